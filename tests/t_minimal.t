#!/usr/bin/env bash
# t_minimal.t -- examples/minimal.c (the README's minimal program) against the
# test servers: its first walk is the feed in SQL, page by page, rebuilt then
# cached; its write lands in SQL and, through the hook, on top of the cached
# copy, so the second walk is SQL's feed again, all from the cache.
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"
BUILD=${BUILD:-build}
bin=$BUILD/examples/minimal
uid=4343
sql() { psql "$FEED_PG_CONNINFO" -qAtc "$1"; }
# SQL's feed as "score:id ..." on one line.
feed_of() { sql "SELECT score || ':' || id FROM feed_entry WHERE uid = $uid ORDER BY score DESC, id DESC" | tr '\n' ' ' | sed 's/ $//'; }

test -x "$bin"; verdict $? "$bin is built"
[ "$(wc -l < examples/minimal.c)" -lt 100 ]; verdict $? "examples/minimal.c is under 100 lines"
sql "DELETE FROM feed_entry WHERE uid = $uid;
     INSERT INTO feed_entry SELECT $uid, i / 3, i FROM generate_series(1, 12) i" >/dev/null
redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" DEL "$(fkey "$uid")" >/dev/null
before=$(feed_of)
out=$("$bin" $uid 2>&1); rc=$?
verdict $rc "minimal $uid exits 0"
first=$(sed -n '1,/^inserted/p' <<<"$out" | grep '^page' | sed 's/^page ([a-z]*): //' | tr '\n' ' ' | sed 's/ $//')
[ "$first" = "$before" ]; verdict $? "its first walk is SQL's feed (12 rows, 5 a page)"
[ "$(grep -c '^page' <<<"$(sed -n '1,/^inserted/p' <<<"$out")")" = 3 ] &&
    grep -q '^page (rebuild)' <<<"$out"
verdict $? "  in 3 pages, the first rebuilt"
after=$(feed_of)
[ "$(sql "SELECT count(*) FROM feed_entry WHERE uid = $uid")" = 13 ]; verdict $? "the write reached SQL"
second=$(sed -n '/^inserted/,$p' <<<"$out" | grep '^page' | sed 's/^page ([a-z]*): //' | tr '\n' ' ' | sed 's/ $//')
[ "$second" = "$after" ]; verdict $? "the second walk is SQL's feed with the new row on top"
[ -z "$(sed -n '/^inserted/,$p' <<<"$out" | grep '^page' | grep -v '^page (cache)')" ]
verdict $? "  every page of it from the cache (the hook updated the cached copy)"
sql "DELETE FROM feed_entry WHERE uid = $uid" >/dev/null
[ $failed = 0 ] || printf '# output:\n%s\n' "$out" | sed 's/^/# /'
echo "1..$n"
[ $failed = 0 ]
