#!/usr/bin/env bash
# Builds the container image: the statically linked binary (x86_64-unknown-linux-musl,
# release), then Containerfile with podman or buildah, tagged <IMAGE>:<version of Cargo.toml>
# (the tag deploy/base/kustomization.yaml sets).
# Usage: hack/image.sh            IMAGE=registry.example/svm-apiserver hack/image.sh
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE="${IMAGE:-svm-apiserver}"
TARGET=x86_64-unknown-linux-musl
VERSION="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)"
REVISION="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
CREATED="$(date -u +%Y-%m-%dT%H:%M:%SZ)"

if ! rustup target list --installed 2>/dev/null | grep -qx "$TARGET"; then
  echo "image: adding the Rust target $TARGET"
  rustup target add "$TARGET"
fi
if ! command -v musl-gcc >/dev/null 2>&1; then
  # ring compiles C and assembly for the target: musl's gcc wrapper (Debian musl-tools).
  hack/ensure-deps.sh image
fi
BUILDER=""
for tool in podman buildah; do
  if command -v "$tool" >/dev/null 2>&1; then BUILDER="$tool"; break; fi
done
if [ -z "$BUILDER" ]; then
  hack/ensure-deps.sh image
  BUILDER=podman
fi

cargo build --release --locked --target "$TARGET" --bin svm-apiserver
context="target/image"
rm -rf "$context" && mkdir -p "$context"
cp "target/$TARGET/release/svm-apiserver" "$context/svm-apiserver"
# A product build has no test hooks (the test-hooks feature is for test builds only): refuse
# to package a binary that has them.
hack/no-test-hooks.sh "$context/svm-apiserver"
strip "$context/svm-apiserver" 2>/dev/null || true

case "$BUILDER" in
  podman) build=(podman build) ;;
  buildah) build=(buildah build) ;;
esac
"${build[@]}" --file Containerfile \
  --build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION" --build-arg "CREATED=$CREATED" \
  --tag "$IMAGE:$VERSION" "$context"
echo "image: built $IMAGE:$VERSION with $BUILDER"
"$BUILDER" images --format '{{.Repository}}:{{.Tag}} {{.Size}}' 2>/dev/null | grep -F "$IMAGE:$VERSION" || true
