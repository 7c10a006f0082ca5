#!/usr/bin/env bash
# The load rehearsal (docs/testing.md): `make test` while CPU burners keep cores busy, as a
# loaded CI machine would. The suite must pass as it does on a quiet machine, only slower: its
# waits fail when nothing moves, not on a total.
#   SVM_LOAD_BURNERS=n   how many cores to keep busy (default 1, of this machine's 2)
# Usage: hack/test-under-load.sh [make target, default test]
set -euo pipefail
cd "$(dirname "$0")/.."

burners=${SVM_LOAD_BURNERS:-1}
pids=()
stop_burners() { [ ${#pids[@]} -eq 0 ] || kill "${pids[@]}" 2>/dev/null || true; }
trap stop_burners EXIT
for _ in $(seq "$burners"); do
  # A busy loop at normal priority: the scheduler shares its core with the suite.
  bash -c 'while :; do :; done' &
  pids+=($!)
done
echo "test-under-load: $burners CPU burner(s) running (pids ${pids[*]}) beside make ${1:-test}"
started=$(date +%s)
status=0
make "${1:-test}" || status=$?
echo "test-under-load: make ${1:-test} exited $status after $(( $(date +%s) - started )) s with $burners burner(s)"
exit "$status"
