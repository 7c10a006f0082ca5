#!/usr/bin/env bash
# Refuses an svm-apiserver binary that carries the volume controller's test hooks
# (crates/volumes/src/hooks.rs, read from SVM_TEST_VOLUME_HOOKS): they are compiled only with
# the `test-hooks` feature, which the test builds have and no product build may. `make build`
# and `make image` run it on what they built; tests/ops/hooks.rs shows it finding the hooks in
# the test build's binary. Why strings: the hooks' variable name and the `test hook:` lines
# they log are in a binary exactly when their code is, and nowhere else in the product.
# Usage: hack/no-test-hooks.sh BINARY...
set -euo pipefail

markers=("SVM_TEST_VOLUME_HOOKS" "SVM_TEST_DATA_PLANE_HOOKS" "test hook:")
[ "$#" -gt 0 ] || { echo "usage: $0 BINARY..." >&2; exit 2; }
status=0
for binary in "$@"; do
  if [ ! -f "$binary" ]; then
    echo "no-test-hooks: $binary: no such file" >&2
    exit 2
  fi
  for marker in "${markers[@]}"; do
    if grep -q -a -F -e "$marker" "$binary"; then
      echo "no-test-hooks: $binary carries the test hooks ('$marker' is in it): it was built" \
        "with the test-hooks feature, which only test builds may have" >&2
      status=1
    fi
  done
done
exit "$status"
