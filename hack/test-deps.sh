#!/usr/bin/env bash
# Installs the Debian packages `make test` needs beyond Go and make, when
# this machine lacks them (`make test-deps`; `make test` runs it first, so
# that a fresh machine passes the README's test command as CI does). It
# says what it installs and why, and does nothing when all are there.
#
# - git and gcc: the version stamp, the fuzz smoke's check of left inputs,
#   and cgo (runc links libseccomp);
# - containerd, containernetworking-plugins, busybox-static (the image real
#   nodes run) and libseccomp-dev + pkg-config (make assets builds runc with
#   seccomp): real kubelet nodes (`rampart up --real-nodes`, the real-node
#   tests and the kubelet-bad-restart drill). Debian's runc comes with
#   containerd but is not used;
# - ca-certificates: the CA bundle make image puts in the chart's image
#   (a real-node test runs that image);
# - systemd: systemd-analyze verify checks the node guard's unit
#   (deploy/systemd); nothing of it is started;
# - chromium, optional: a real browser checks the HTML reports (etcd usage,
#   traffic profile); without it those checks skip and say so.
set -euo pipefail

required=(git gcc containerd containernetworking-plugins busybox-static libseccomp-dev pkg-config ca-certificates systemd)
optional=(chromium)
declare -A why=(
  [git]="version stamp, fuzz smoke" [gcc]=cgo
  [containerd]="real nodes" [containernetworking-plugins]="real nodes" [busybox-static]="real nodes' image"
  [libseccomp-dev]="runc with seccomp" [pkg-config]="runc with seccomp"
  [ca-certificates]="the CA bundle in make image's image"
  [systemd]="systemd-analyze verify of the node guard's unit"
  [chromium]="browser checks of the HTML reports"
)
# says PKG... lists each package with what it is for.
says() { local p out=(); for p; do out+=("$p (${why[$p]})"); done; local IFS=,; echo "${out[*]}" | sed 's/,/, /g'; }

# installed PKG succeeds when dpkg has PKG installed (not merely known).
installed() { [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null)" = "ii " ]; }

need=()
for p in "${required[@]}"; do installed "$p" || need+=("$p"); done
want=()
for p in "${optional[@]}"; do installed "$p" || want+=("$p"); done
[ ${#need[@]} -eq 0 ] && [ ${#want[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" -ne 0 ]; then
  echo "test-deps: this machine lacks $(says "${need[@]}" "${want[@]}"); install them as root: apt-get install ${need[*]} ${want[*]}" >&2
  [ ${#need[@]} -eq 0 ] && exit 0 # only the optional browser: its checks skip
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
if ! apt-get update -qq && [ ${#need[@]} -eq 0 ]; then
  echo "test-deps: apt-get update failed; ${want[*]} not installed, the browser checks will skip"
  exit 0
fi
if [ ${#need[@]} -gt 0 ]; then
  echo "test-deps: installing $(says "${need[@]}")"
  apt-get install -y -qq "${need[@]}"
fi
if [ ${#want[@]} -gt 0 ]; then
  echo "test-deps: installing $(says "${want[@]}")"
  apt-get install -y -qq "${want[@]}" || echo "test-deps: ${want[*]} could not be installed; the browser checks will skip"
fi
