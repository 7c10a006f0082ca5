#!/usr/bin/env bash
# `make test`'s test run: every test target of the workspace, with the real-cluster suite
# running beside the others instead of after them. That suite spends most of its time waiting
# for kube-apiserver and etcd, the others mostly wait on their own servers, so on two cores the
# two halves overlap well. The real-cluster output goes to target/real-cluster-test.log and is
# printed once both halves are done; the run fails if either failed.
set -uo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
# cargo-nextest, where hack/ensure-deps.sh built it rather than finding it on the machine.
export PATH="$PWD/.dev/tools/bin:$PATH"

# Build everything first, so the two halves do not race to compile.
$cargo test --workspace --no-run || exit 1

others=()
for main in tests/*/main.rs; do
    target=$(basename "$(dirname "$main")")
    [ "$target" = real_cluster ] || others+=(--test "$target")
done
for file in tests/*.rs tests/support/kube-double/tests/*.rs; do
    others+=(--test "$(basename "$file" .rs)")
done

# The real-cluster suite runs under cargo-nextest (.config/nextest.toml): each test's time on
# its line and the slow ones named again at the end.
log=target/real-cluster-test.log
$cargo nextest run --workspace --test real_cluster --no-fail-fast >"$log" 2>&1 &
real=$!
$cargo test --workspace --no-fail-fast --lib --bins "${others[@]}"
status=$?
$cargo test --workspace --doc || status=1
wait "$real"
real_status=$?

echo
echo "===== tests/real_cluster (run alongside the targets above; log: $log) ====="
cat "$log"
if [ "$status" -ne 0 ] || [ "$real_status" -ne 0 ]; then
    echo "FAILED: other targets exit $status, real-cluster suite exit $real_status" >&2
    exit 1
fi
