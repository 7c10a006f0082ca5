#!/usr/bin/env bash
# Prints the path of an etcd that kube-apiserver 1.36 fully supports, preparing it when needed.
#
# Debian bookworm's etcd-server is 3.4.23. kube-apiserver serves watch-list (and consistent
# reads from its cache) only on an etcd with the fixed progress notifications, >= 3.4.31 or
# >= 3.5.13; on 3.4.23 every watch-list request ends in a 500 ERROR event (recording 10a). So
# the real-cluster suite and `make bench-real` run on Debian trixie's etcd-server (3.5.16),
# fetched by apt itself (signature-checked against the Debian archive keyring) into .dev/apt
# and unpacked into .dev/etcd-3.5 — the system's apt sources and packages are left as they are.
# The rest of the tests keep the system etcd (`etcd-server` from bookworm).
set -euo pipefail
# No silent exit: say which command failed (a pipe's SIGPIPE under pipefail was one).
trap 'echo "etcd-for-kube: failed (exit $?) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."

dir=.dev/etcd-3.5
binary="$dir/usr/bin/etcd"
if [ -x "$binary" ] && "$binary" --version 2>/dev/null | grep '^etcd Version: 3\.5\.' >/dev/null; then
  echo "$PWD/$binary"
  exit 0
fi

apt=$PWD/.dev/apt
arch=$(dpkg --print-architecture)
mkdir -p "$apt/sources" "$apt/lists/partial" "$apt/cache/archives/partial"
cat > "$apt/sources/trixie.sources" <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
opts=(
  -o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt/sources"
  -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache=$apt/cache" -o Debug::NoLocking=1
  -o "APT::Architectures=$arch" -o Acquire::Languages=none
  # Our own directories: apt need not drop to its _apt user to write them.
  -o "APT::Sandbox::User=$(id -un)"
  -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
)
echo "etcd-for-kube: fetching Debian trixie's etcd-server into $dir" >&2
apt-get "${opts[@]}" -qq update >&2
# awk reads to the end: one that exits at the first match lets apt-cache die of SIGPIPE, which
# pipefail turns into this script's silent failure (seen on a loaded machine).
version=$(apt-cache "${opts[@]}" show etcd-server | awk '/^Version: 3\.5\./ && !found { found = $2 } END { print found }')
[ -n "$version" ] || { echo "etcd-for-kube: trixie has no etcd-server 3.5" >&2; exit 1; }
(cd "$apt/cache" && apt-get "${opts[@]}" -qq download "etcd-server=$version") >&2
rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
dpkg-deb -x "$apt/cache/etcd-server_${version/:/%3a}_${arch}.deb" "$dir.tmp"
rm -rf "$dir" && mv "$dir.tmp" "$dir"
# All of --version, not `| head -1`: under pipefail, etcd killed by SIGPIPE after head's one line
# failed this script at random (a clean clone's `make test` then ran without the suite).
"$binary" --version >&2
echo "$PWD/$binary"
