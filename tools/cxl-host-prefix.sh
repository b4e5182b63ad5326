#!/bin/bash
# Unpack QEMU 10 and a 6.12 kernel from Debian's bookworm-backports into a
# private prefix, for the CXL host guest of tests/functional/cxl_host.
#
# Debian 12's own QEMU (7.2) and kernel (6.1) are too old to compose CXL
# memory into a guest (QEMU's cxl-fmw windows with volatile Type-3
# devices, the kernel's RAM regions): the newer ones are unpacked with
# dpkg-deb -x, never installed, so the machine's QEMU, libvirt and kernel
# stay as they are. apt works on a private list and cache under the
# prefix; the machine's apt configuration is not changed.
#
# Usage: tools/cxl-host-prefix.sh [PREFIX]   (default
# /var/tmp/composable-cxl-host, or $COMPOSABLE_CXL_HOST_PREFIX). Prints
# the prefix; does nothing when it is complete already.
set -euo pipefail

PREFIX=${1:-${COMPOSABLE_CXL_HOST_PREFIX:-/var/tmp/composable-cxl-host}}
MIRROR=${COMPOSABLE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOT=$PREFIX/root
DONE=$PREFIX/complete

if [ -f "$DONE" ]; then
    echo "$PREFIX"
    exit 0
fi

rm -rf "$PREFIX"
mkdir -p "$PREFIX/apt/lists/partial" "$PREFIX/apt/cache/archives/partial" \
    "$PREFIX/debs" "$ROOT"
echo "deb $MIRROR bookworm-backports main" > "$PREFIX/apt/sources.list"
APT=(-o "Dir::Etc::SourceList=$PREFIX/apt/sources.list"
     -o "Dir::Etc::SourceParts=/nonexistent"
     -o "Dir::State::Lists=$PREFIX/apt/lists"
     -o "Dir::Cache=$PREFIX/apt/cache"
     -o "Debug::NoLocking=1" -o "APT::Sandbox::User=root")
# retry COMMAND...: three tries, a mirror may hiccup.
retry() {
    local try
    for try in 1 2 3; do
        "$@" && return 0
        echo "cxl-host-prefix: try $try of '$*' failed" >&2
        sleep $((try * 10))
    done
    return 1
}
retry apt-get "${APT[@]}" -qq update

# The newest 6.12 kernel image of the backports (the metapackage names it).
KERNEL=$(apt-cache "${APT[@]}" depends linux-image-amd64 \
    | sed -n 's/^ *Depends: \(linux-image-6\.[0-9.+a-z0-9-]*-amd64\)$/\1/p' \
    | head -n1)
if [ -z "$KERNEL" ]; then
    echo "cxl-host-prefix: no linux-image-6.x-amd64 in bookworm-backports" >&2
    exit 1
fi
cd "$PREFIX/debs"
retry apt-get "${APT[@]}" -qq download qemu-system-x86 qemu-system-common \
    qemu-system-data seabios "$KERNEL"
for deb in "$PREFIX"/debs/*.deb; do
    dpkg-deb -x "$deb" "$ROOT"
done
VERSION=${KERNEL#linux-image-}
# The package's modules.dep is made at install; the guest image reads it.
depmod -b "$ROOT" "$VERSION"
test -x "$ROOT/usr/bin/qemu-system-x86_64"
test -f "$ROOT/boot/vmlinuz-$VERSION"
"$ROOT/usr/bin/qemu-system-x86_64" --version | head -n1 >&2
rm -rf "$PREFIX/debs" "$PREFIX/apt"
echo "$VERSION" > "$DONE"
echo "$PREFIX"
