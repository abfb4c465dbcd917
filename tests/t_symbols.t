#!/usr/bin/env bash
# t_symbols.t -- libfeedcache.so exports exactly the public API: every
# function lib/feedcache.h declares with FEED_API, and nothing else (no
# feed__ internals but the one the adapter libraries call, no embedded
# scripts); libfeedcache-libevent.so and libfeedcache-libuv.so export their
# open function alone, and libfeedcache.so links neither loop. The list comes from the header, so
# a new public function is covered as soon as it is declared there.
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"
BUILD=${BUILD:-build}
so=$BUILD/libfeedcache.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Declared: the name before the first '(' of each declaration that starts
# with FEED_API (declarations may span lines: only the first one matters).
headers=(lib/feedcache.h lib/feedcache_libevent.h lib/feedcache_libuv.h)
sed -n 's/^FEED_API[^(]*[^A-Za-z0-9_(]\(feed_[A-Za-z0-9_]*\)(.*/\1/p' "${headers[@]}" | sort -u > "$tmp/declared"
# Every top-level function declaration of the headers must carry FEED_API
# (a typedef of a callback's type is not a function).
bare=$(grep -nE '^[a-z][a-z_ ]*[ *]feed_[a-z0-9_]*\(' "${headers[@]}" | grep -v ':typedef ' || true)
[ -z "$bare" ]; verdict $? "every function declared in the public headers carries FEED_API${bare:+ (not: $bare)}"
[ "$(wc -l < "$tmp/declared")" -ge 20 ]; verdict $? "the header declares $(wc -l < "$tmp/declared") public functions"

test -f "$so"; verdict $? "$so is built"
exported() {  # defined dynamic symbols of a shared library, one a line
    nm -D --defined-only "$1" | awk '$2 ~ /^[A-Za-z]$/ && $2 != "A" { print $3 }' |
        grep -v '^_' | sed 's/@.*//' | sort -u
}
exported "$so" > "$tmp/exported"
[ -s "$tmp/exported" ]; verdict $? "nm -D lists the exported symbols"

# The event-loop adapters are libraries of their own: each exports its one
# open function, and libfeedcache.so gives them the driver's door
# (lib/drive/async.h), the only feed__ name it exports.
adapter_doors="feed__async_open"
ev=$(sed -n 's/^FEED_API[^(]*[^A-Za-z0-9_(]\(feed_[A-Za-z0-9_]*\)(.*/\1/p' lib/feedcache_libevent.h)
uv=$(sed -n 's/^FEED_API[^(]*[^A-Za-z0-9_(]\(feed_[A-Za-z0-9_]*\)(.*/\1/p' lib/feedcache_libuv.h)
sed -n 's/^FEED_API[^(]*[^A-Za-z0-9_(]\(feed_[A-Za-z0-9_]*\)(.*/\1/p' lib/feedcache.h |
    { cat; printf '%s\n' $adapter_doors; } | sort -u > "$tmp/core"
extra=$(comm -13 "$tmp/core" "$tmp/exported" | tr '\n' ' ')
[ -z "$extra" ]; verdict $? "nothing exported beyond feedcache.h and the adapters' doors${extra:+: $extra}"
missing=$(comm -23 "$tmp/core" "$tmp/exported" | tr '\n' ' ')
[ -z "$missing" ]; verdict $? "every public function of feedcache.h is exported${missing:+; missing: $missing}"
internal=$(grep '^feed__' "$tmp/exported" | grep -cvxF -e feed__async_open)
[ "$internal" = 0 ]; verdict $? "no other feed__ internal is exported ($internal found)"
loops=$(readelf -d "$so" | grep -E 'NEEDED.*(libevent|libuv)' | tr -s ' ' | tr '\n' ';')
[ -z "$loops" ]; verdict $? "libfeedcache.so links no event loop${loops:+: $loops}"

for a in libevent libuv; do
    lib=$BUILD/libfeedcache-$a.so
    want=$ev
    [ $a = libuv ] && want=$uv
    test -f "$lib"; verdict $? "$lib is built"
    got=$(exported "$lib" | tr '\n' ' ')
    [ "$got" = "$want " ]; verdict $? "  it exports $want alone (got: $got)"
    readelf -d "$lib" | grep -q "NEEDED.*\[libfeedcache\.so\.0\]"
    verdict $? "  it links libfeedcache.so.0"
done

echo "1..$n"
[ $failed = 0 ]
