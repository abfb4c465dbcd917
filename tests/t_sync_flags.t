#!/usr/bin/env bash
# t_sync_flags.t -- feedcache-sync has a flag for every field of feed_config
# (the program's contract: flags mirror feed_config, every field, dashes for
# underscores):
# the fields are read from the header itself, so a field added to feed_config
# without a flag fails here. Each flag is also accepted by the parser (a bad
# value "1" for it is taken, and only a bogus flag after it is refused).
set -uo pipefail
cd "$(dirname "$0")/.."
. tests/tap.bash
BIN=${BUILD:-build}/sync/feedcache-sync
[[ -x $BIN ]] || bail "no $BIN (run make)"

fields=$(awk '/^typedef struct feed_config {/,/^} feed_config;/' lib/feedcache.h |
         grep -oE '^ +(const char +\*|uint32_t|int) *[a-z_]+;' | grep -oE '[a-z_]+;$' | tr -d ';')
count=$(wc -w <<<"$fields")
((count >= 25)) || bail "read only $count fields from feed_config"
help=$("$BIN" --help)
TMPERR=$(mktemp)
missing=()
unknown=()
for f in $fields; do
    flag=--${f//_/-}
    grep -q -- "$flag\b" <<<"$help" || missing+=("$flag")
    value=1
    [[ $flag == --redis-cluster || $flag == --redis-sentinels ]] && value=127.0.0.1:1
    out=$("$BIN" "$flag" "$value" --bogus 2>&1 >/dev/null)
    [[ $out == *"unknown flag or missing value: --bogus"* ]] || unknown+=("$flag: $out")
done
is "${missing[*]}" "" "--help names a flag for each of the $count fields of feed_config"
is "${unknown[*]}" "" "  and the parser takes each of them (only the bogus flag after it is refused)"
"$BIN" --no-such-flag >/dev/null 2>&1
is "$?" 2 "an unknown flag exits 2"
"$BIN" --redis-restart-fence 2 >/dev/null 2>"$TMPERR"
is "$?" 2 "--redis-restart-fence 2 exits 2"
like "$(cat "$TMPERR")" 'redis-restart-fence must be 0\.\.1' "  with the library's limits (feed_config_set)"
"$BIN" --redis-cluster nohost >/dev/null 2>"$TMPERR"
is "$?" 2 "--redis-cluster without host:port exits 2"
"$BIN" --redis-port 65536 >/dev/null 2>"$TMPERR"
is "$?" 2 "--redis-port 65536 exits 2"
rm -f "$TMPERR"
# A cluster is followed like a single Redis (t_sync:cluster): with nothing
# reachable it waits and retries, and SIGTERM ends it cleanly.
err=$(mktemp)
"$BIN" --redis-cluster 127.0.0.1:1 --pg-conninfo "host=127.0.0.1 port=1 connect_timeout=1" \
    2>"$err" >/dev/null &
pid=$!
sleep 1
kill -TERM "$pid"
wait "$pid"
is "$?" 0 "--redis-cluster, nothing reachable: it retries until SIGTERM, then exits 0"
like "$(cat "$err")" "retrying" "  saying on stderr that it retries"
rm -f "$err"
echo "1..$n"
((failed == 0))
