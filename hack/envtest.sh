#!/usr/bin/env bash
# Prints the KUBEBUILDER_ASSETS directory for the real-cluster suite (the envtest layout: a
# directory with kube-apiserver, etcd and kubectl), preparing it when needed:
#   - $KUBEBUILDER_ASSETS when the caller set it;
#   - else .dev/envtest, with kube-apiserver and kube-controller-manager unpacked from
#     ../shared/envtest/*.xz (each checked against the sha256 its README gives), etcd 3.5 from Debian trixie
#     (hack/etcd-for-kube.sh: bookworm's 3.4.23 cannot serve watch-list) and the kubectl of .venv.
# Prints nothing, and says why loudly on stderr, when there is no kube-apiserver to use.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -n "${KUBEBUILDER_ASSETS:-}" ]; then
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

dir=.dev/envtest
archive=../shared/envtest/kube-apiserver.xz

if [ ! -f "$archive" ]; then
  {
    printf '%.0s!' {1..78}; echo
    echo "REAL-CLUSTER SUITE WILL NOT RUN: $archive is missing and KUBEBUILDER_ASSETS is not set."
    echo "Its tests will say so one by one; nothing they check is checked in this run."
    printf '%.0s!' {1..78}; echo
  } >&2
  exit 0
fi

# unpack <name> <sha256 of the unpacked binary, from ../shared/envtest/README.md>
unpack() {
  local name=$1 want=$2 archive=../shared/envtest/$1.xz
  [ -f "$archive" ] || { echo "envtest: $archive is missing" >&2; exit 1; }
  if [ ! -x "$dir/$name" ] || ! echo "$want  $dir/$name" | sha256sum --check --status; then
    echo "envtest: unpacking $archive into $dir" >&2
    xz -dc "$archive" > "$dir/$name.tmp"
    echo "$want  $dir/$name.tmp" | sha256sum --check --status \
      || { echo "envtest: $archive does not unpack to the binary its README names (sha256)" >&2; exit 1; }
    chmod +x "$dir/$name.tmp"
    mv "$dir/$name.tmp" "$dir/$name"
  fi
}

mkdir -p "$dir"
unpack kube-apiserver 7206bdcf786b7d45a3cfeca91f9637c6b9adf42db9d78821d37ceac89794176a
unpack kube-controller-manager 131d588b1cb195ade8fb39de3d2c2a2c15623a7ca676892318f0056a241742f5
# Its own assignment, so that a failure stops here (inside ln's arguments it would not).
etcd=$(hack/etcd-for-kube.sh)
[ -x "$etcd" ] || { echo "envtest: hack/etcd-for-kube.sh gave no etcd ('$etcd')" >&2; exit 1; }
ln -sf "$etcd" "$dir/etcd"
ln -sf "$PWD/.venv/bin/kubectl" "$dir/kubectl"
echo "$PWD/$dir"
