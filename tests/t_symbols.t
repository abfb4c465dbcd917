#!/usr/bin/env bash
# t_symbols.t -- libfeedcache.so exports exactly the public API: every
# function lib/feedcache.h declares with FEED_API, and nothing else (no
# feed__ internals, no embedded scripts). The list comes from the header, so
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
nm -D --defined-only "$so" | awk '$2 ~ /^[A-Za-z]$/ && $2 != "A" { print $3 }' |
    grep -v '^_' | sed 's/@.*//' | sort -u > "$tmp/exported"
[ -s "$tmp/exported" ]; verdict $? "nm -D lists the exported symbols"

extra=$(comm -13 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
[ -z "$extra" ]; verdict $? "nothing exported beyond the header${extra:+: $extra}"
missing=$(comm -23 "$tmp/declared" "$tmp/exported" | tr '\n' ' ')
[ -z "$missing" ]; verdict $? "every public function is exported${missing:+; missing: $missing}"
internal=$(grep -c '^feed__' "$tmp/exported")
[ "$internal" = 0 ]; verdict $? "no feed__ internal is exported ($internal found)"

echo "1..$n"
[ $failed = 0 ]
