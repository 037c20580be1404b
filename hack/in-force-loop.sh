#!/usr/bin/env bash
# Shows that every protection Rampart offers holds from the moment the API
# accepts the request that creates it. For each protection (the
# rampart.io/protection and rampart.io/explicit-replicas labels, a
# ProtectionPolicy, a ChangeWindow, a DeletionFlowControl, a namespace
# relabelled into a policy guarding replicas) it creates one and
# acts against it at once, ITERATIONS times, on real local control planes:
#   after   - this tree, one manager replica, one API server;
#   after   - this tree, three manager replicas, two API servers (the act goes
#             to the API server that did not take the creating request);
#   before  - the binary of BEFORE (default: the merge base with main), one
#             replica: the same loop, to show what the fix closes.
# Each line prints the bypasses (acts that went through) and the latency of
# the creating request (p50/p99) beside a like request no Rampart webhook
# sees (a plain label patch or ConfigMap creation).
# Usage: hack/in-force-loop.sh [ITERATIONS]   (default 50)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
iterations=${1:-50}
assets=${RAMPART_ASSETS:-$root/bin/k8s}
before=${BEFORE:-$(git merge-base HEAD main)}
tmp=$(mktemp -d)
cleanup() { git worktree remove --force "$tmp/before" >/dev/null 2>&1 || true; rm -rf "$tmp"; }
trap cleanup EXIT

make build >/dev/null
git worktree add --detach "$tmp/before" "$before" >/dev/null 2>&1
(cd "$tmp/before" && go build -o "$tmp/rampart-before" ./cmd/rampart)

run() { # LABEL BINARY TEST
  RAMPART_ASSETS=$assets RAMPART_BIN=$2 INFORCE_ITERATIONS=$iterations INFORCE_REPORT=1 \
    go test -count=1 -v -timeout 40m -run "^$3\$" ./internal/protection/admission/ 2>&1 |
    grep -E '^INFORCE|--- FAIL|inforce_test.go' | sed "s/^INFORCE /$1 /" || true
}
echo "iterations per protection: $iterations; before = $(git rev-parse --short "$before")"
run "after " "$root/bin/rampart" TestProtectionsHoldOnceAccepted
run "after " "$root/bin/rampart" TestNamespaceRelabelledIntoAPolicyHoldsAtOnce
run "after " "$root/bin/rampart" TestProtectionsHoldOnceAcceptedAcrossReplicasAndAPIServers
run "before" "$tmp/rampart-before" TestProtectionsHoldOnceAccepted
run "before" "$tmp/rampart-before" TestNamespaceRelabelledIntoAPolicyHoldsAtOnce
