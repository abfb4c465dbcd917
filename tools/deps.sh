#!/usr/bin/env bash
# What feedcache needs to build and test, checked by what it is (a command,
# a header, a PostgreSQL extension, a sanitizer runtime), not by package
# name. Fast no-op when everything is there (it runs on every `make check`).
#
#   tools/deps.sh           check; on Debian or Ubuntu as root, install what
#                           is missing (package names chosen for the installed
#                           PostgreSQL major and clang: postgresql-NN-pgtap,
#                           libclang-rt-NN-dev); otherwise print what is
#                           missing (and the apt-get line, on Debian) and fail
#   tools/deps.sh --check   only check and print, never install
#   FEED_NO_DEPS=1          skip it all (exit 0): `make check FEED_NO_DEPS=1`
#                           on another distribution or a hand-made setup
#   REDIS=valkey            Valkey's valkey-server and valkey-cli instead of
#                           Redis's (Debian 12: from bookworm-backports, added
#                           in its own sources file; Debian 13: main)
set -euo pipefail

[[ ${FEED_NO_DEPS:-} == 1 ]] && exit 0
CHECK_ONLY=0
[[ ${1:-} == --check ]] && CHECK_ONLY=1
REDIS=${REDIS:-redis}
[[ $REDIS == redis || $REDIS == valkey ]] || { echo "deps.sh: REDIS must be redis or valkey, not $REDIS" >&2; exit 2; }

# ------------------------------------------------------------------ checks
# Each check: a test, what it is for, and the Debian package that gives it.
missing=()      # Debian packages
missing_what=() # what, for the message
need() {  # package what test-command...
    local pkg=$1 what=$2
    shift 2
    "$@" >/dev/null 2>&1 && return 0
    missing+=("$pkg")
    missing_what+=("$what${pkg:+ (Debian: $pkg)}")
}
has() { command -v "$1"; }
# A header the C compiler finds (extra -I flags after it).
header() {
    local h=$1
    shift
    printf '#include <%s>\n' "$h" | ${CC:-cc} "$@" -E -x c - -o /dev/null
}
pg_bin() { printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -n1; }
pg_major() {  # of the newest installed server, else of what apt would install
    local b
    b=$(pg_bin)
    if [[ -x $b/postgres ]]; then basename "$(dirname "$b")"; return; fi
    apt-cache depends postgresql 2>/dev/null | sed -n 's/.*Depends: postgresql-\([0-9][0-9]*\)$/\1/p' | head -n1
}
clang_major() { clang -dumpversion 2>/dev/null | cut -d. -f1; }
# libFuzzer's runtime (make fuzz, .ci/run); clang's resource folder holds it
# (lib/linux/ up to clang 15, lib/<triple>/ after).
fuzzer_rt() {
    local r
    r=$(clang -print-resource-dir) || return 1
    compgen -G "$r/lib/*/libclang_rt.fuzzer*.a" >/dev/null
}

check_all() {
    missing=() missing_what=()
    local pgm clm pgi
    need gcc       "a C compiler (cc)"        has cc
    need make      "make"                     has make
    need pkg-config "pkg-config"              has pkg-config
    need clang     "clang (make fuzz, CC=clang)" has clang
    need perl      "prove (perl)"             has prove
    need curl      "curl"                     has curl
    need valgrind  "valgrind"                 has valgrind
    need procps    "ps"                       has ps
    need iproute2  "ss"                       has ss
    need gnuplot-nox "gnuplot (bench plots)"  has gnuplot
    need chromium  "chromium (tests/t_html.t)" has chromium
    if [[ $REDIS == valkey ]]; then
        need valkey-server "valkey-server"    has valkey-server
        need valkey-tools  "valkey-cli"       has valkey-cli
    else
        need redis-server "redis-server"      has redis-server
        need redis-tools  "redis-cli"         has redis-cli
    fi
    need postgresql "PostgreSQL's server (pg_ctl, initdb)" test -x "$(pg_bin)/pg_ctl"
    need postgresql-client "psql"             has psql
    pgm=$(pg_major || true)
    if [[ -n $pgm ]]; then
        need "postgresql-$pgm-pgtap" "pgTAP for PostgreSQL $pgm" \
            test -f "/usr/share/postgresql/$pgm/extension/pgtap.control"
    fi
    clm=$(clang_major || true)
    if [[ -n $clm ]]; then
        need "libclang-rt-$clm-dev" "clang $clm's libFuzzer runtime" fuzzer_rt
    fi
    pgi=$(pg_config --includedir 2>/dev/null || echo /usr/include/postgresql)
    need libhiredis-dev    "hiredis's headers"       header hiredis/hiredis.h
    need libpq-dev         "libpq's headers"         header libpq-fe.h "-I$pgi"
    need libevent-dev      "libevent's headers"      header event2/event.h
    need libuv1-dev        "libuv's headers"         header uv.h
    need libmicrohttpd-dev "libmicrohttpd's headers" header microhttpd.h
    need libjansson-dev    "jansson's headers"       header jansson.h
    need liblua5.1-0-dev   "Lua 5.1 (the simulation's Redis scripts)" header lua5.1/lua.h
    need libssl-dev        "OpenSSL's headers (the simulation's SHA1, TLS)" header openssl/sha.h
    need openssl           "openssl (tests/tls.sh: the test certificates)" has openssl
}

check_all
((${#missing[@]} == 0)) && exit 0

echo "deps.sh: missing: $(IFS=,; echo "${missing_what[*]}" | sed 's/,/, /g')" >&2
debian=0
has apt-get >/dev/null && has dpkg-query >/dev/null && debian=1
if ((CHECK_ONLY || !debian)); then
    ((debian)) && echo "deps.sh: install them with: sudo apt-get install ${missing[*]}" >&2
    echo "deps.sh: or, with everything installed your own way: make check FEED_NO_DEPS=1" >&2
    exit 1
fi

# Valkey on Debian 12 comes from bookworm-backports: add that suite in its
# own file (apt installs from backports only when asked, -t below).
BACKPORTS=
if [[ $REDIS == valkey ]]; then
    . /etc/os-release
    if [[ ${VERSION_CODENAME:-} == bookworm ]]; then
        BACKPORTS=bookworm-backports
        src=/etc/apt/sources.list.d/feedcache-backports.sources
        if [[ $(id -u) -eq 0 && ! -f $src ]] && ! apt-cache policy 2>/dev/null | grep -q "a=bookworm-backports"; then
            echo "deps.sh: adding $src (Valkey)" >&2
            cat >"$src" <<'EOS'
# Added by feedcache's tools/deps.sh for REDIS=valkey: Debian 12's backports
# (valkey-server 8). apt installs from it only when asked (-t bookworm-backports).
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOS
        fi
    fi
fi

if [[ $(id -u) -ne 0 ]]; then
    echo "deps.sh: run as root:" >&2
    echo "  sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}" >&2
    [[ -z $BACKPORTS ]] || echo "  (valkey-* from $BACKPORTS: add that suite, then apt-get install -t $BACKPORTS valkey-server valkey-tools)" >&2
    echo "deps.sh: or, with everything installed your own way: make check FEED_NO_DEPS=1" >&2
    exit 1
fi

# No stdin and noninteractive frontend so nothing can prompt (CI has no stdin);
# keep existing config files if a package asks. Valkey's packages alone come
# from backports (-t), everything else from the release itself.
export DEBIAN_FRONTEND=noninteractive
install() {
    local p plain=() bp=()
    for p in "$@"; do
        if [[ -n $BACKPORTS && $p == valkey-* ]]; then bp+=("$p"); else plain+=("$p"); fi
    done
    local o=(-y --no-install-recommends -o Dpkg::Options::=--force-confdef
             -o Dpkg::Options::=--force-confold)
    ((${#plain[@]} == 0)) || apt-get install "${o[@]}" "${plain[@]}" </dev/null
    ((${#bp[@]} == 0)) || apt-get install "${o[@]}" -t "$BACKPORTS" "${bp[@]}" </dev/null
}
apt-get update </dev/null
install "${missing[@]}"
# The versioned names follow what was just installed (PostgreSQL, clang):
# check again and install what those name.
check_all
if ((${#missing[@]})); then install "${missing[@]}"; check_all; fi
if ((${#missing[@]})); then
    echo "deps.sh: still missing after apt-get: $(IFS=,; echo "${missing_what[*]}" | sed 's/,/, /g')" >&2
    exit 1
fi
