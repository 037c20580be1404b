#!/usr/bin/env bash
# secret-scan.sh DIR...: fails if a log of a local cluster (DIR/logs/*,
# DIR/audit.log*) holds a secret: a line of any private key the cluster
# made (DIR/pki, DIR/manager; the recycle bin's key as base64 or hex), a PEM private key, a bearer token or a
# service-account JWT, or a canary Secret value written by the tests
# ("rampart-canary-..."). Each DIR is a cluster directory, or a directory
# of them (what clustertest archives when RAMPART_TEST_LOGS is set).
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 DIR..." >&2; exit 2; }
clusters=()
for d in "$@"; do
	[ -d "$d" ] || continue
	while IFS= read -r logs; do clusters+=("$(dirname "$logs")"); done < <(find "$d" -type d -name logs)
done
[ ${#clusters[@]} -gt 0 ] || { echo "secret-scan: no cluster logs under $*" >&2; exit 2; }
leaks=0
files=0
for c in "${clusters[@]}"; do
	needles=$(mktemp)
	# The base64 body lines of every private key this cluster made (PEM),
	# and the recycle bin's raw AES key as base64 and hex.
	find "$c" -path "$c/logs" -prune -o -type f \( -name '*.key' -o -name 'tls.key' \) ! -name 'recycle-bin.key' -print 2>/dev/null |
		xargs -r grep -hvE '^-----|^$' | awk 'length($0) >= 32' >"$needles" || true
	while IFS= read -r k; do
		base64 -w0 <"$k" >>"$needles" && echo >>"$needles"
		od -An -tx1 -v <"$k" | tr -d ' \n' >>"$needles" && echo >>"$needles"
	done < <(find "$c" -path "$c/logs" -prune -o -type f -name 'recycle-bin.key' -print 2>/dev/null)
	logs=()
	while IFS= read -r f; do logs+=("$f"); done < <(find "$c/logs" "$c" -maxdepth 1 -type f -name "*.log*" | sort -u)
	files=$((files + ${#logs[@]}))
	report() { # what, grep output
		[ -n "$2" ] || return 0
		leaks=$((leaks + $(wc -l <<<"$2")))
		# Show where, never the secret itself.
		cut -d: -f1,2 <<<"$2" | sort -u | head -20 | sed "s|^|secret-scan: $1 in |"
	}
	if [ -s "$needles" ]; then
		report "a line of a cluster private key" "$(grep -nHF -f "$needles" "${logs[@]}" || true)"
	fi
	report "a PEM private key" "$(grep -nHE 'BEGIN [A-Z ]*PRIVATE KEY' "${logs[@]}" || true)"
	report "a JWT (service-account token)" "$(grep -nHE 'eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}' "${logs[@]}" || true)"
	report "a bearer token" "$(grep -nHiE 'bearer [A-Za-z0-9._~+/=-]{16,}' "${logs[@]}" || true)"
	report "a canary Secret value" "$(grep -nHE 'rampart-canary-[a-z0-9]+' "${logs[@]}" || true)"
	rm -f "$needles"
done
echo "secret-scan: ${#clusters[@]} clusters, $files log files, $leaks secrets found"
[ "$leaks" -eq 0 ]
