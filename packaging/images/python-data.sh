#!/usr/bin/env bash
# The python-data runtime as a pinned image: Debian 12's python3 with numpy,
# pandas and matplotlib (the packages the host runtime of that name uses),
# made by mmdebstrap from Debian's archive into a tree, then an OCI layout by
# `throwbox image build`. Prints the layout's manifest digest: the value of
# runtimes.python-data.image.digest (docs/operations.md, Runtime images).
#
# Usage: packaging/images/python-data.sh OUT_LAYOUT [MIRROR]
#   MIRROR   default http://deb.debian.org/debian. For the same digest on
#            every run, name a fixed snapshot of the archive, such as
#            http://snapshot.debian.org/archive/debian/20250520T000000Z: the
#            tree then holds the same packages, every file's time is
#            SOURCE_DATE_EPOCH (default 0 here) and the layer is built in
#            path order with owner 0:0 and time 0.
# Needs: root (or a user mmdebstrap can unshare as), mmdebstrap, the network
# to the mirror, and a built throwbox (THROWBOX_BIN, default build/throwbox).
set -euo pipefail
out=${1:?usage: $0 OUT_LAYOUT [MIRROR]}
mirror=${2:-http://deb.debian.org/debian}
repo=$(cd "$(dirname "$0")/../.." && pwd)
bin=${THROWBOX_BIN:-$repo/build/throwbox}
command -v mmdebstrap >/dev/null || { echo "$0: mmdebstrap is missing (apt-get install mmdebstrap)" >&2; exit 2; }
[ -x "$bin" ] || { echo "$0: $bin is missing: build throwbox first" >&2; exit 2; }
[ ! -e "$out" ] || { echo "$0: $out exists" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0}
# essential: dpkg, coreutils and the like, then the runtime's packages and
# their dependencies (not what they only recommend: no compiler, no headers);
# no documentation, manual pages or translations; no apt
# state or logs (they hold the time of the build); /dev's nodes are left
# out by the build (a sandbox has its own /dev).
mmdebstrap --variant=essential --mode="$([ "$(id -u)" -eq 0 ] && echo root || echo unshare)" \
  --aptopt='APT::Install-Recommends "false"' \
  --include=python3,python3-numpy,python3-pandas,python3-matplotlib \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
  --customize-hook='rm -rf "$1"/var/cache/* "$1"/var/log/* "$1"/var/lib/apt/lists/*' \
  bookworm "$tmp/rootfs" "$mirror" >&2
"$bin" image build "$tmp/rootfs" "$out"
