#!/usr/bin/env bash
# Build hiredis 1.2 from Debian's own source package into a folder of the
# build, never over the system's copy:
#
#   tools/hiredis.sh [DIR]     default DIR: build/hiredis-1.2
#
# 1. If apt does not yet know the source package of Debian 13 ("trixie"),
#    add a deb-src-only entry for it in its own file,
#    /etc/apt/sources.list.d/feedcache-trixie-src.sources (deb-src only:
#    nothing of trixie can ever be installed from it), then apt-get update.
#    Needs root for that step (and for dpkg-dev, which apt-get source needs).
# 2. apt-get source hiredis=1.2.* into DIR-src (e.g. build/hiredis-1.2-src):
#    the upstream tarball plus Debian's patches, signature checked by dpkg.
# 3. make USE_SSL=1, make install PREFIX=DIR USE_SSL=1: DIR/include/hiredis,
#    DIR/lib/libhiredis{,_ssl}.{a,so*}.
#
# Then: make HIREDIS=DIR (see the Makefile's header). A second run with DIR
# already built is a no-op. HIREDIS_VERSION (default 1.2) picks the version.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR=${1:-build/hiredis-1.2}
WANT=${HIREDIS_VERSION:-1.2}
DIR=$(mkdir -p "$DIR" && cd "$DIR" && pwd)
SRC=$DIR-src
SOURCES=/etc/apt/sources.list.d/feedcache-trixie-src.sources
die() { echo "hiredis.sh: $*" >&2; exit 1; }

if [[ -f $DIR/include/hiredis/hiredis_ssl.h && -e $DIR/lib/libhiredis_ssl.so ]]; then
    echo "hiredis.sh: $DIR already holds hiredis $(sed -n 's/^Version: //p' "$DIR/lib/pkgconfig/hiredis.pc")"
    exit 0
fi

as_root() {
    if [[ $(id -u) -eq 0 ]]; then "$@"; else
        die "needs root for: $* (run it as root, or: sudo $*)"; fi
}
export DEBIAN_FRONTEND=noninteractive
# apt-get source needs dpkg-source (dpkg-dev); the build needs OpenSSL's headers.
for p in dpkg-dev libssl-dev make gcc; do
    if [[ $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) != "install ok installed" ]]; then
        as_root apt-get install -y --no-install-recommends "$p" </dev/null
    fi
done

have_src() { apt-cache showsrc hiredis 2>/dev/null | grep -q "^Version: $WANT\."; }
if ! have_src; then
    if [[ ! -f $SOURCES ]]; then
        echo "hiredis.sh: adding $SOURCES (deb-src of Debian 13 only)"
        as_root tee "$SOURCES" >/dev/null <<'EOS'
# Added by feedcache's tools/hiredis.sh: Debian 13's source packages only
# (deb-src), to build hiredis 1.2 into a folder of the build. Binary packages
# of trixie are not reachable through this entry.
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
    fi
    as_root apt-get update </dev/null
    have_src || die "apt knows no source package hiredis $WANT.* (apt-cache showsrc hiredis)"
fi
ver=$(apt-cache showsrc hiredis | sed -n "s/^Version: \($WANT\.[^ ]*\)$/\1/p" | sort -V | tail -n1)

rm -rf "$SRC"
mkdir -p "$SRC"
# apt-get source drops privileges to _apt when it can; the folder must let it in.
chmod 0755 "$SRC"
(cd "$SRC" && apt-get source --only-source "hiredis=$ver" </dev/null >apt-source.log 2>&1) ||
    { tail -n 20 "$SRC/apt-source.log" >&2; die "apt-get source hiredis=$ver failed"; }
tree=$(find "$SRC" -mindepth 1 -maxdepth 1 -type d -name 'hiredis-*' | head -n1)
[[ -n $tree ]] || die "no hiredis-* folder in $SRC"

echo "hiredis.sh: building hiredis $ver (Debian source package) with USE_SSL=1 into $DIR"
jobs=$(nproc 2>/dev/null || echo 2)
(cd "$tree" && make -j"$jobs" USE_SSL=1 PREFIX="$DIR" >build.log 2>&1 &&
    make USE_SSL=1 PREFIX="$DIR" LIBRARY_PATH=lib install >>build.log 2>&1) ||
    { tail -n 30 "$tree/build.log" >&2; die "building hiredis $ver failed (log: $tree/build.log)"; }
[[ -f $DIR/include/hiredis/hiredis_ssl.h && -e $DIR/lib/libhiredis_ssl.so ]] ||
    die "the install left no hiredis_ssl in $DIR"
echo "hiredis.sh: hiredis $ver in $DIR (make HIREDIS=$DIR)"
