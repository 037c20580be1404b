#!/usr/bin/env bash
# Throughput and peak memory of `rampart traffic profile` against jq doing
# the same group-by, on one audit log of at least 1 GB synthesised from the
# real lines of a local cluster's audit log (issue 16).
#
#   hack/traffic-profile-bench.sh [SOURCE_AUDIT_LOG] [TARGET_MB]
#
# SOURCE_AUDIT_LOG: a local cluster's audit log (DIR/audit.log of `rampart
# up` or of an integration test's cluster); default: the largest one under
# /tmp/rampart-*/. TARGET_MB: size of the synthesised log (default 1100).
# The log is the source repeated, each copy moved one day later (times
# rewritten), so that it spans time as a long log does. Both tools read the
# same file once, one after the other, under /usr/bin/time -v; rampart is
# also run on a quarter of the file to show its memory does not grow with
# the input. jq's program (streaming: reduce over inputs, flat memory too)
# counts the requests (ResponseComplete events) of each user and user
# agent, by verb; rampart computes that and more (peaks, LISTs, latency
# sketches, series).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
src=${1:-$(ls -S /tmp/rampart-*/audit.log 2>/dev/null | head -1 || true)}
target_mb=${2:-1100}
[[ -n "$src" && -s "$src" ]] || { echo "no source audit log: pass one (a local cluster's DIR/audit.log)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq is missing: apt-get install -y jq" >&2; exit 1; }
[[ -x /usr/bin/time ]] || { echo "/usr/bin/time is missing: apt-get install -y time" >&2; exit 1; }
[[ -x "$root/bin/rampart" ]] || make -C "$root" build >/dev/null

work=$(mktemp -d /tmp/traffic-profile-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
log="$work/audit.log"
day=$(grep -m1 -o '"requestReceivedTimestamp":"[0-9-]*' "$src" | cut -d'"' -f4)
src_bytes=$(stat -c %s "$src")
copies=$(( (target_mb * 1024 * 1024 + src_bytes - 1) / src_bytes ))
echo "source: $src ($(( src_bytes / 1024 / 1024 )) MB, $(wc -l < "$src") lines, first day $day); $copies copies"
for ((k = 0; k < copies; k++)); do
	sed "s/\"$day"'T/"'"$(date -u -d "$day + $k days" +%F)"'T/g' "$src"
done > "$log"
bytes=$(stat -c %s "$log")
lines=$(wc -l < "$log")
echo "synthesised: $log, $(( bytes / 1024 / 1024 )) MB, $lines lines"
head -c $(( bytes / 4 )) "$log" | sed '$d' > "$work/quarter.log"

# run NAME FILE CMD... runs CMD under /usr/bin/time -v and prints MB/s and
# peak RSS.
run() {
	local name=$1 file=$2
	shift 2
	local mb
	mb=$(( $(stat -c %s "$file") / 1024 / 1024 ))
	/usr/bin/time -v -o "$work/time" "$@" > "$work/$name.out" 2> "$work/$name.err" || { cat "$work/$name.err" >&2; exit 1; }
	local secs cpu rss
	secs=$(awk -F': ' '/Elapsed \(wall clock\)/ {n = split($2, p, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + p[i]; print s}' "$work/time")
	cpu=$(awk -F': ' '/User time|System time/ {s += $2} END {print s}' "$work/time")
	rss=$(awk -F': ' '/Maximum resident set size/ {print int($2 / 1024)}' "$work/time")
	printf '%-18s %6d MB in %7.2f s wall = %7.1f MB/s; %7.2f s CPU = %7.1f MB per CPU-second; peak RSS %5d MB\n' \
		"$name" "$mb" "$secs" "$(echo "$mb / $secs" | bc -l)" "$cpu" "$(echo "$mb / $cpu" | bc -l)" "$rss"
	echo "$secs" > "$work/$name.secs"
	echo "$cpu" > "$work/$name.cpu"
}

echo
run "rampart (quarter)" "$work/quarter.log" "$root/bin/rampart" traffic profile --top 10 "$work/quarter.log"
run "rampart" "$log" "$root/bin/rampart" traffic profile --top 10 "$log"
run "jq" "$log" jq -n -c '
  reduce (inputs | select(.stage == "ResponseComplete")) as $e ({};
    .[$e.user.username + " " + ($e.userAgent // "")][$e.verb] += 1)
  | to_entries | map({client: .key, requests: (.value | add), byVerb: .value})
  | sort_by(-.requests) | .[:10][]' "$log"
echo
printf 'rampart vs jq on the same file: %.1fx faster in wall time, %.1fx less CPU (%d cores; load average %s)\n' \
	"$(echo "$(cat "$work/jq.secs") / $(cat "$work/rampart.secs")" | bc -l)" \
	"$(echo "$(cat "$work/jq.cpu") / $(cat "$work/rampart.cpu")" | bc -l)" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)"

# The two agree on the busiest client's request count.
top_jq=$(head -1 "$work/jq.out" | jq -r '"\(.requests) \(.client)"')
echo "jq's busiest client:      $top_jq"
echo "rampart's table (by server time):"
head -6 "$work/rampart.out"
