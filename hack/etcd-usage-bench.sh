#!/usr/bin/env bash
# Measures `rampart etcd usage` on a generated snapshot in etcd's layout
# (default 1024 MB: 2 KiB values, 4 revisions per key, 5% deleted) and, if
# auger builds from its Go module, `auger analyze` on the same file.
# Prints wall time and peak RSS (GNU time; RSS includes the file pages bbolt
# maps, page cache rather than heap) and the Go benchmark's figures, whose
# heap-MB is what the scan holds at its end (one record per key, no values).
# The file is about twice MB: 2 KiB values fill bbolt's 4 KiB pages half.
# AUGER=PATH names an auger binary to use instead (where the module proxy
# does not serve github.com/etcd-io/auger: build it from its repository).
# Values are ConfigMaps in the API server's protobuf envelope, so that
# auger, which decodes each value, reads them as objects.
#   hack/etcd-usage-bench.sh [MB]
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-${ETCD_USAGE_BENCH_MB:-1024}}
WORK=${ETCD_USAGE_BENCH_DIR:-$(mktemp -d)}
SNAP=$WORK/bench-$MB.db
mkdir -p "$WORK"
[ -x bin/rampart ] || make build >/dev/null
if [ ! -s "$SNAP" ]; then
  echo "writing a $MB MB snapshot to $SNAP"
  ETCD_USAGE_BENCH_WRITE=$SNAP ETCD_USAGE_BENCH_MB=$MB go test -count=1 -run TestWriteBenchSnapshot ./internal/operations/etcdtool/usage/ >/dev/null
fi
ls -l "$SNAP"
measure() { # name command...
  local name=$1; shift
  # Drop nothing from the page cache (no root needed); the first read warms it.
  "$@" >/dev/null 2>&1 || true
  /usr/bin/time -f "$name: %e s wall, %M KB max RSS" "$@" >/dev/null 2>"$WORK/$name.time" || { cat "$WORK/$name.time"; return 1; }
  tail -1 "$WORK/$name.time"
}
SIZE=$(stat -c %s "$SNAP")
measure rampart bin/rampart etcd usage --snapshot "$SNAP" -o json
AUGER=${AUGER:-}
if [ -z "$AUGER" ]; then
  GOBIN=$WORK/bin go install github.com/etcd-io/auger@latest && AUGER=$WORK/bin/auger || echo "auger did not build from its Go module"
fi
if [ -n "$AUGER" ]; then
  measure auger "$AUGER" analyze -f "$SNAP"
fi
for n in rampart auger; do
  [ -f "$WORK/$n.time" ] || continue
  s=$(tail -1 "$WORK/$n.time" | sed -E 's/.*: ([0-9.]+) s wall.*/\1/')
  awk -v n=$n -v s="$s" -v b="$SIZE" 'BEGIN{ if (s>0) printf "%s: %.0f MB/s\n", n, b/1048576/s }'
done
ETCD_USAGE_BENCH_FILE=$SNAP go test -count=1 -run XXX -bench EtcdUsage -benchtime=3x -benchmem ./internal/operations/etcdtool/usage/ | grep Benchmark
