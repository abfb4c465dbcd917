#!/usr/bin/env bash
# t_http.t -- the example service (examples/server/) end to end, over
# HTTP only, against the test servers that tests/run.sh started: whole feeds
# walked page by page and compared with SQL, every write route and its
# effect, the JSON shapes, the status of every kind of bad input (JSON
# errors everywhere, over-long URLs and headers included), CORS, the HTML
# page, pull-to-refresh, merged timelines and the authors' posts (walked
# and compared with SQL's UNION), /metrics counters (every field of feed_stats),
# outages of Redis and PostgreSQL, concurrency, logging, shutdown.
#
# Needs: curl, psql, redis-cli, and $BUILD/examples/{feed_server,jget}
# (jget: a tiny JSON picker built with jansson, see examples/jget.c).
# FEED_HTTP_SERVER names another server of the same API to check instead
# (tests/t_http_evhttp.t: the event-loop one); FEED_HTTP_EVHTTP=1 says it
# is evhttp, which answers a body over --max-body itself (its HTML 413).
# Data: uids 7000000..7999999 only; set up here, since other tests may
# TRUNCATE feed_entry and FLUSHDB before this one runs.
set -uo pipefail

BUILD=${BUILD:-build}
SERVER=${FEED_HTTP_SERVER:-$BUILD/examples/feed_server}
EVHTTP=${FEED_HTTP_EVHTTP:-0}
JGET=$BUILD/examples/jget
MAX_LEN=40
MAX_PAGE=50
THREADS=4

# ------------------------------------------------------------------ TAP
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"

for v in FEED_REDIS_HOST FEED_REDIS_PORT FEED_PG_CONNINFO FEED_SERVERS FEED_SERVERS_DIR; do
    [[ -n ${!v:-} ]] || bail "$v is not set: run through tests/run.sh"
done
[[ -x $SERVER && -x $JGET ]] || bail "$SERVER or $JGET missing: run make"
command -v curl >/dev/null || bail "curl is not installed (tools/deps.sh)"

TMP=$(mktemp -d -t feedcache-http.XXXXXX)
SPID=
sql() { psql "$FEED_PG_CONNINFO" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
rcli() { redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" "$@"; }

# Whatever happens, leave the shared servers as the next test expects them.
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    [[ -n $SPID ]] && kill -KILL "$SPID" 2>/dev/null
    "$FEED_SERVERS" redis-thaw "$FEED_SERVERS_DIR" >/dev/null 2>&1
    "$FEED_SERVERS" pg-thaw "$FEED_SERVERS_DIR" >/dev/null 2>&1
    rcli acl setuser default on nopass '~*' '&*' +@all >/dev/null 2>&1
    rcli acl deluser feedtest >/dev/null 2>&1
    "$FEED_SERVERS" pg-start "$FEED_SERVERS_DIR" >/dev/null 2>&1
    rm -rf "$TMP"
}
trap cleanup EXIT

# ------------------------------------------------------------------ HTTP
# req METHOD PATH [curl args...]: sets STATUS, CTYPE, BODY, HEADERS.
req() {
    local method=$1 path=$2 out
    shift 2
    if [[ $method == GET && $# == 0 ]]; then http_get "$BASE$path"; return; fi   # tap.bash
    out=$(curl -sS --max-time 30 -o "$TMP/body" -D "$TMP/headers" \
        -w '%{http_code}\t%{content_type}' -X "$method" "$@" "$BASE$path" 2>"$TMP/curl.err") ||
        out="000	"
    STATUS=${out%%$'\t'*}
    CTYPE=${out#*$'\t'}
    BODY=$(cat "$TMP/body" 2>/dev/null)
    HEADERS=$(tr -d '\r' <"$TMP/headers" 2>/dev/null)
}
post() { req "$1" "$2" -H 'Content-Type: application/json' --data-binary "$3"; }

# req_retry: req, and while the answer is a 503 with Retry-After, wait as it
# says and ask again, at most RETRY_503 times (0: never, like req). A worker
# whose connection to a store broke in an outage reconnects on its first call
# at least retry_ms (1 s) after its last attempt, and answers 503 with
# Retry-After: 1 until then (examples/README.md); a client retries, and so do
# the checks of the outages. Adds the retries to RETRIED.
RETRY_503=0
RETRIED=0
req_retry() {
    local tries=0 after
    req "$@"
    while [[ $STATUS == 503 ]] && ((tries < RETRY_503)); do
        after=$(sed -n 's/^Retry-After: \([0-9][0-9]*\)$/\1/p' <<<"$HEADERS")
        [[ -n $after ]] || break
        sleep "$after"
        tries=$((tries + 1))
        RETRIED=$((RETRIED + 1))
        req "$@"
    done
}
j() { "$JGET" "$@" <<<"$BODY"; }        # fields of the last body
jq_() { "$JGET" "$@"; }                 # fields of stdin

# A metric's value from the last scrape ($M), 0 when absent.
scrape() { req GET /metrics; M=$BODY; }
metric() {
    local v
    v=$(awk -v k="$1" '$1 == k { print $2; exit }' <<<"$M")
    echo "${v:-0}"
}

# delta NAME: how much a metric moved from scrape $M0 to scrape $M1.
delta() { echo $(($(M=$M1 metric "$1") - $(M=$M0 metric "$1"))); }

# uid's whole feed from SQL, one item a line, as the service must print it.
sql_feed() {
    sql "SELECT format('{\"id\":\"%s\",\"score\":%s}', id, score) FROM feed_entry
         WHERE uid = $1 ORDER BY score DESC, id DESC"
}

# uid's timeline from SQL: the feed and the merged authors' posts (MERGE),
# each (score, id) once, as the service must print it.
sql_timeline() {
    sql "SELECT format('{\"id\":\"%s\",\"score\":%s}', id, score) FROM
           (SELECT score, id FROM feed_entry WHERE uid = $1
            UNION SELECT score, id FROM author_post WHERE author = ANY('{$MERGE}'::bigint[])) t
         ORDER BY score DESC, id DESC"
}

# walk, walk_is and first_ids read /users/{uid}/$ROUTE: feed, or timeline
# (the merged timeline, compared with sql_timeline): ROUTE=timeline walk_is ...
ROUTE=feed

# walk UID LIMIT: every page through HTTP into $TMP/walk (one item a line);
# sets PAGES, SOURCES (one per page), WHY (empty when every page was
# well-formed: status 200, JSON with exactly items/next_cursor/source,
# full pages whenever a cursor follows, the last one without). A page
# answered 503 is asked again as req_retry says (RETRY_503); any other
# answer counts at once.
walk() {
    local uid=$1 limit=$2 cursor='' q count keys src out
    : >"$TMP/walk"
    PAGES=0 SOURCES='' WHY=''
    while :; do
        q="limit=$limit"
        [[ -n $cursor ]] && q+="&cursor=$cursor"
        req_retry GET "/users/$uid/$ROUTE?$q"
        if [[ $STATUS != 200 ]]; then WHY="page $PAGES: status $STATUS: $BODY"; return 1; fi
        PAGES=$((PAGES + 1))
        # One jget for the page: its keys, source, length and cursor, then
        # its items, a line each.
        out=$(j @keys source items.@len next_cursor 'items.*') ||
            { WHY="page $PAGES: not JSON: $BODY"; return 1; }
        out+=$'\n'
        { IFS= read -r keys; IFS= read -r src; IFS= read -r count; IFS= read -r cursor; } <<<"$out"
        [[ $keys == items,next_cursor,source ]] || { WHY="page $PAGES: keys $keys"; return 1; }
        SOURCES+="$src "
        printf '%s' "${out#*$'\n'*$'\n'*$'\n'*$'\n'}" >>"$TMP/walk"
        if [[ $cursor == null ]]; then
            ((count <= limit)) || { WHY="last page $PAGES has $count items"; return 1; }
            return 0
        fi
        [[ $cursor =~ ^[A-Za-z0-9_-]{24}$ ]] || { WHY="page $PAGES: cursor '$cursor'"; return 1; }
        [[ $count == "$limit" ]] || { WHY="page $PAGES: $count items and a next cursor"; return 1; }
        ((PAGES < 10000)) || { WHY="runaway walk"; return 1; }
    done
}

# walk_is UID LIMIT NAME: the walk equals SQL's feed.
walk_is() {
    local want note=''
    if [[ $ROUTE == timeline ]]; then want=$(sql_timeline "$1"); else want=$(sql_feed "$1"); fi
    RETRIED=0
    if ! walk "$1" "$2"; then
        fail "$3" "$WHY"
        return 1
    fi
    ((RETRIED == 0)) || note=", $RETRIED asked again after a 503"
    if [[ $(cat "$TMP/walk") == "$want" ]]; then
        pass "$3 ($(wc -l <"$TMP/walk") items, $PAGES pages$note)"
    else
        fail "$3" "walk and SQL differ:" \
            "$(diff <(echo "$want") "$TMP/walk" | head -n 8 | tr '\n' '|')"
        return 1
    fi
}

# first_ids UID N: IDS = the ids of page 1 (limit N) through HTTP, space-separated
# (a function, not a $(...), so that STATUS and BODY stay for the next check).
first_ids() { req GET "/users/$1/$ROUTE?limit=$2"; IDS=$(j 'items.*.id' | tr '\n' ' '); }
sql_first_ids() {
    sql "SELECT id FROM feed_entry WHERE uid = $1 ORDER BY score DESC, id DESC LIMIT $2" | tr '\n' ' '
}

# error_is STATUS NAME: the last response was STATUS with a JSON error body.
error_is() {
    local msg
    msg=$(j error 2>/dev/null)
    if [[ $STATUS == "$1" && $CTYPE == application/json* && $(j @keys 2>/dev/null) == error &&
          $(j error.@type 2>/dev/null) == string && -n $msg ]]; then
        pass "$2 -> $1 (${msg:0:60})"
    else
        fail "$2 -> $1" "got status $STATUS, type $CTYPE, body $BODY"
    fi
}

# ------------------------------------------------------------------ data
U_TIES=7000001      # 230 rows, scores in groups of 4, scattered ids: past max_len
U_BIG=7000002       # ids above 2^53 and the extreme scores
U_EMPTY=7000003     # no rows
U_FITS=7000004      # exactly max_len rows
U_WRITE=7000010     # insert / update / delete
U_FAN=(7000020 7000021 7000022)   # fan-out: cached, not cached, empty
U_COLD=7000030      # metrics: a feed nobody read
U_ACL=7000040       # failed hooks
U_OUT=7000050       # outages
U_CROWD=7000060     # concurrent cold reads
U_TL=7000080        # a reader's timeline: 60 rows, 9 of them also an author's posts
A_MANY=7000081      # authors merged into every timeline (--merge-authors):
A_FEW=7000082       #   45 posts (past max_len), scores tied with U_TL's; 10 posts
A_NONE=7000083      #   above them; none
MERGE=$A_MANY,$A_FEW,$A_NONE
ALL_UIDS="7000000 AND 7999999"

sql "DELETE FROM feed_entry WHERE uid BETWEEN $ALL_UIDS" || bail "psql failed"
sql "INSERT INTO feed_entry (uid, score, id)
     SELECT $U_TIES, 1700000000000 + (g / 4) * 1000, (g::bigint * 2654435761) % 4294967296
       FROM generate_series(1, 230) g;
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_BIG, CASE WHEN g % 3 = 0 THEN 9007199254740991 WHEN g % 3 = 1 THEN 0
                         ELSE -9007199254740991 END, 9007199254740993 + g * 1000003
       FROM generate_series(1, 24) g;
     INSERT INTO feed_entry VALUES ($U_BIG, 5, 9223372036854775807), ($U_BIG, 5, 0);
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_FITS, g % 7, g FROM generate_series(1, $MAX_LEN) g;
     INSERT INTO feed_entry (uid, score, id)
     SELECT u, g * 10, g FROM unnest(ARRAY[$U_WRITE, ${U_FAN[0]}, ${U_FAN[1]}, $U_COLD, $U_ACL, $U_OUT]) u,
            generate_series(1, 60) g;
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_CROWD, g / 2, g FROM generate_series(1, 200) g;
     DELETE FROM author_post WHERE author BETWEEN $ALL_UIDS;
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_TL, 1000 + (g / 3) * 10, 7100000 + g FROM generate_series(1, 60) g;
     INSERT INTO author_post (author, score, id)
     SELECT $A_MANY, 1000 + (g / 2) * 10, 7200000 + g FROM generate_series(1, 45) g;
     INSERT INTO author_post (author, score, id)
     SELECT $A_FEW, 1500 + g * 7, 7300000 + g FROM generate_series(1, 10) g;
     -- posts fanned out to the reader before their author was merged: in both tables
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_TL, score, id FROM author_post WHERE author = $A_MANY AND id % 5 = 0" ||
    bail "loading test data failed"
# Drop whatever an earlier run left cached for these feeds and authors.
for u in $U_TIES $U_BIG $U_EMPTY $U_FITS $U_WRITE "${U_FAN[@]}" $U_COLD $U_ACL $U_OUT $U_CROWD $U_TL; do
    rcli del "$(fkey "$u")" "$(fkey "$u" :lease)" >/dev/null
done
for a in $A_MANY $A_FEW $A_NONE; do
    rcli del "$(akey "$a")" "$(akey "$a" :lease)" >/dev/null
done

# ------------------------------------------------------------------ start
# FEED_TEST_WRAPPER (e.g. valgrind) wraps the server too.
start_server() {   # extra args...; sets SPID, PORT, BASE
    local i
    : >"$TMP/out"   # before the background job opens it: sed reads it at once
    # shellcheck disable=SC2086  # the wrapper is a command line
    ${FEED_TEST_WRAPPER:-} "$SERVER" --port 0 --max-len $MAX_LEN --max-page $MAX_PAGE \
        --threads $THREADS --max-body 65536 "$@" >"$TMP/out" 2>"$TMP/log" &
    SPID=$!
    PORT=
    for ((i = 0; i < 600; i++)); do
        PORT=$(sed -n 's/^listening on \([0-9][0-9]*\)$/\1/p' "$TMP/out")
        [[ -n $PORT ]] && break
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    BASE=http://127.0.0.1:$PORT
    [[ -n $PORT ]]
}
stop_server() {   # SIGTERM; returns the exit status
    local rc
    kill -TERM "$SPID" 2>/dev/null
    wait "$SPID"
    rc=$?
    SPID=
    return $rc
}

ORIGIN=https://app.example
start_server --cors-origin "$ORIGIN" --author-table author_post --merge-authors "$MERGE" || bail "feed_server did not start: $(tail -n 5 "$TMP/log")"
pass "$(basename "$SERVER") started on a free port ($PORT)"
req GET /healthz
is "$STATUS $(j status redis postgres | tr '\n' ' ')" "200 ok up up " "GET /healthz: 200, both stores up"
like "$CTYPE" '^application/json' "  as application/json"

# Every worker opens its feedcache handle on its first request; reach them
# all now so that counters later move by the requests under test only.
for ((i = 0; i < 400; i++)); do
    scrape
    [[ $(metric feed_server_workers) == "$THREADS" ]] && break
done
is "$(metric feed_server_workers)" $THREADS "all $THREADS worker threads answered"

# ------------------------------------------------------------------ reads
req GET "/users/$U_TIES/feed?limit=7"
is "$STATUS" 200 "page 1 of a feed: 200"
like "$CTYPE" '^application/json' "  Content-Type application/json"
is "$(j @keys)" "items,next_cursor,source" "  keys: items, next_cursor, source"
is "$(j items.@type next_cursor.@type source | tr '\n' ' ')" "array string rebuild " \
    "  items an array, next_cursor a string, source rebuild (a cold feed)"
is "$(j items.0.@keys items.0.id.@type items.0.score.@type | tr '\n' ' ')" "id,score string integer " \
    "  an item is {id: string, score: integer}"
like "$(j 'items.*.id' | tr '\n' ' ')" '^([0-9]+ ){7}$' "  7 ids, each a string of decimal digits"
is "$(j 'items.*' | tr '\n' ' ')" "$(sql_feed $U_TIES | head -n 7 | tr '\n' ' ')" "  page 1 equals SQL"
req GET "/users/$U_TIES/feed?limit=7"
is "$(j source)" cache "page 1 again: source cache"
# The server's own time for the page, which the demo page shows apart from
# the browser's round trip (a loaded browser's queue is not the server's).
like "$(grep -i '^Server-Timing:' <<<"$HEADERS")" '^Server-Timing: app;dur=[0-9]+\.[0-9]{3}$' \
    "  Server-Timing: app;dur=<ms> (the server's time, apart from the round trip)"

walk_is $U_TIES 7 "walk of 230 rows (max_len $MAX_LEN), pages of 7"
like "$SOURCES" '^(cache ){5}db ' "  pages within max_len from the cache, past it from the db"
walk_is $U_TIES $MAX_PAGE "walk of 230 rows, pages of $MAX_PAGE (max_page)"
walk_is $U_TIES 1 "walk of 230 rows, pages of 1"
walk_is $U_BIG 5 "ids above 2^53 and scores at +/-(2^53-1) come back exact"
req GET "/users/$U_BIG/feed?limit=1"
is "$(j items.0.id items.0.score | tr '\n' ' ')" \
    "$(sql "SELECT id || ' ' || score || ' ' FROM feed_entry WHERE uid = $U_BIG ORDER BY score DESC, id DESC LIMIT 1")" \
    "  the largest score, exactly; the id as a string"
walk "$U_BIG" 50 && grep -q '"id":"9223372036854775807"' "$TMP/walk"
is "$?" 0 "  id 9223372036854775807 (INT64_MAX) round-trips"

req GET "/users/$U_EMPTY/feed"
is "$STATUS $BODY" '200 {"items":[],"next_cursor":null,"source":"rebuild"}' "an empty feed: no items, null cursor"
req GET "/users/$U_EMPTY/feed"
is "$(j source)" cache "  the empty feed is cached (end marker): source cache"
walk_is $U_FITS 7 "walk of a feed of exactly max_len rows"
walk_is $U_FITS 7 "  again"
is "$SOURCES" "cache cache cache cache cache cache " "  every page from the cache"
req GET "/users/$U_TIES/feed"
is "$(j items.@len)" 20 "no limit: 20 items"
req GET "/users/$U_TIES/feed?limit=$MAX_PAGE"
is "$STATUS $(j items.@len)" "200 $MAX_PAGE" "limit=$MAX_PAGE (max_page) is accepted"
req HEAD "/users/$U_TIES/feed?limit=3" -I
is "$STATUS" 200 "HEAD on a feed: 200"

# ------------------------------------------------------------------ CORS, the page
req GET "/users/$U_TIES/feed?limit=3" -H "Origin: $ORIGIN"
like "$HEADERS" $'\nAccess-Control-Allow-Origin: '"$ORIGIN"$'\n' "CORS: Access-Control-Allow-Origin: the configured origin"
like "$HEADERS" $'\nVary: Origin\n' "  Vary: Origin"
req GET /nope -H "Origin: $ORIGIN"
like "$HEADERS" $'\nAccess-Control-Allow-Origin: ' "  on errors too"
req OPTIONS "/users/$U_TIES/items" -H "Origin: $ORIGIN" -H 'Access-Control-Request-Method: POST' \
    -H 'Access-Control-Request-Headers: content-type'
is "$STATUS $BODY" "204 " "OPTIONS (a CORS preflight): 204, no body"
like "$HEADERS" $'\nAccess-Control-Allow-Methods: POST, PUT, OPTIONS\n' "  Access-Control-Allow-Methods of the route"
like "$HEADERS" $'\nAccess-Control-Allow-Headers: Content-Type\n' "  Access-Control-Allow-Headers: Content-Type"
like "$HEADERS" $'\nAccess-Control-Max-Age: [0-9]' "  Access-Control-Max-Age"
like "$HEADERS" $'\nAllow: POST, PUT, OPTIONS\n' "  Allow"
req OPTIONS /nope;  error_is 404 "OPTIONS on an unknown path"
req GET /
is "$STATUS" 200 "GET /: the HTML page"
like "$CTYPE" '^text/html; charset=utf-8' "  text/html"
like "$BODY" '<script>' "  with its script inline"
if grep -Eq '(src|href)="(https?:)?//' <<<"$BODY"; then fail "  and no external asset"; else pass "  and no external asset"; fi
like "$HEADERS" $'\nContent-Security-Policy: default-src \'self\'' "  Content-Security-Policy: only this server"
req GET "/?uid=$U_TIES&limit=7&autoscroll=1"
is "$STATUS" 200 "  the page takes uid, limit and autoscroll"

# ------------------------------------------------------------------ writes
walk_is $U_WRITE 9 "a feed to write to (now cached)"
TOP=$(sql "SELECT max(score) FROM feed_entry WHERE uid = $U_WRITE")
post POST "/users/$U_WRITE/items" "{\"id\":5000001,\"score\":$((TOP + 1))}"
is "$STATUS" 201 "POST an item: 201"
is "$BODY" "{\"id\":\"5000001\",\"score\":$((TOP + 1)),\"cache\":\"ok\"}" "  reply {id (a string), score, cache: ok}"
like "$HEADERS" "Location: /users/$U_WRITE/items/5000001" "  Location of the new item"
is "$(sql "SELECT score FROM feed_entry WHERE uid = $U_WRITE AND id = 5000001")" $((TOP + 1)) "  the row is in PostgreSQL"
first_ids $U_WRITE 3
is "$IDS" "5000001 $(sql_first_ids $U_WRITE 3 | cut -d' ' -f2-)" "  first on page 1"
is "$(j source)" cache "  served from the cache, which the hook updated"
post POST "/users/$U_WRITE/items" "{\"id\":5000001,\"score\":1}"
error_is 409 "POST an id that is already in the feed"
is "$(sql "SELECT score FROM feed_entry WHERE uid = $U_WRITE AND id = 5000001")" $((TOP + 1)) "  the row is unchanged"
post POST "/users/$U_WRITE/items" "{\"id\":\"9007199254740993\",\"score\":$((TOP + 2))}"
is "$STATUS $(j id)" "201 9007199254740993" "POST an id above 2^53 as a string: exact"
first_ids $U_WRITE 2
is "$IDS" "9007199254740993 5000001 " "  page 1 shows it exactly"
walk_is $U_WRITE 9 "  walk equals SQL after the inserts"

post PUT "/users/$U_WRITE/items" '{"id":5000001,"score":-100}'
is "$STATUS $BODY" '200 {"id":"5000001","score":-100,"cache":"ok"}' "PUT a new score: 200"
is "$(sql "SELECT score FROM feed_entry WHERE uid = $U_WRITE AND id = 5000001")" -100 "  PostgreSQL has it"
first_ids $U_WRITE 20
like "$IDS" '^9007199254740993 ' "  no longer second on page 1"
walk_is $U_WRITE 9 "  walk equals SQL (the item moved to the end)"
post PUT "/users/$U_WRITE/items/5000001" "{\"score\":$((TOP + 5))}"
is "$STATUS $(j score)" "200 $((TOP + 5))" "PUT /users/{uid}/items/{id} with the score only"
first_ids $U_WRITE 1
is "$IDS" "5000001 " "  back to the top"
post PUT "/users/$U_WRITE/items/5000001" '{"id":5000002,"score":1}'
error_is 400 "PUT whose body id differs from the path's"
post PUT "/users/$U_WRITE/items/424242" '{"score":1}'
error_is 404 "PUT a score for an item not in the feed"
is "$(sql "SELECT count(*) FROM feed_entry WHERE uid = $U_WRITE AND id = 424242")" 0 "  and nothing was inserted"

req DELETE "/users/$U_WRITE/items/5000001"
is "$STATUS $BODY" "200 {\"id\":\"5000001\",\"score\":$((TOP + 5)),\"cache\":\"ok\"}" "DELETE an item: 200 with what was deleted"
is "$(sql "SELECT count(*) FROM feed_entry WHERE uid = $U_WRITE AND id = 5000001")" 0 "  the row is gone"
first_ids $U_WRITE 1
is "$IDS" "9007199254740993 " "  gone from page 1"
walk_is $U_WRITE 9 "  walk equals SQL after the delete"
req DELETE "/users/$U_WRITE/items/5000001"
error_is 404 "DELETE it again"

# Below the cached window of a long feed: not cached, yet in the walk.
post POST "/users/$U_TIES/items" '{"id":5000003,"score":-5}'
is "$STATUS" 201 "POST an item below the cached window"
walk_is $U_TIES 25 "  walk equals SQL: the item is at the end"

req GET "/users/${U_FAN[0]}/feed?limit=5"      # cached
req GET "/users/${U_FAN[2]}/feed?limit=5"      # cached, empty
post POST /items/5000004/fanout "{\"score\":$((TOP + 10)),\"uids\":[${U_FAN[0]},\"${U_FAN[1]}\",${U_FAN[2]},${U_FAN[0]}]}"
is "$STATUS $BODY" "200 {\"id\":\"5000004\",\"score\":$((TOP + 10)),\"cache\":\"ok\",\"users\":3}" \
    "POST fanout to 3 users (one listed twice): 200, users 3"
is "$(sql "SELECT string_agg(uid::text, ' ' ORDER BY uid) FROM feed_entry WHERE id = 5000004")" "${U_FAN[*]}" \
    "  one row per user in PostgreSQL"
for u in "${U_FAN[@]}"; do
    first_ids "$u" 1
is "$IDS" "5000004 " "  first on page 1 of $u"
done
is "$(j source)" cache "  the empty cached feed got it through the hook"
post POST /items/5000004/fanout "{\"score\":-7,\"uids\":[${U_FAN[0]},${U_FAN[2]}]}"
is "$STATUS $(sql "SELECT string_agg(score::text, ' ' ORDER BY uid) FROM feed_entry WHERE id = 5000004")" \
    "200 -7 $((TOP + 10)) -7" "fanout again: an upsert of the score"
walk_is "${U_FAN[0]}" 7 "  walk of a fanned-out feed equals SQL"
walk_is "${U_FAN[2]}" 7 "  walk of the formerly empty feed equals SQL"

# ------------------------------------------------------------------ pull-to-refresh
# GET /users/{uid}/feed/newer?cursor=C&limit=N: the items above C, closest
# first cut, newest first; next_cursor is what to pass next, has_more says
# call again at once. Pulling from the 14th item up must give items 1..13.
req GET "/users/$U_TIES/feed?limit=14"
C=$(j next_cursor)
: >"$TMP/newer"
for ((pulls = 1; pulls <= 10; pulls++)); do
    req GET "/users/$U_TIES/feed/newer?cursor=$C&limit=5"
    [[ $STATUS == 200 && $(j @keys) == items,next_cursor,has_more,source ]] || break
    j 'items.*' >"$TMP/pull"        # newest first, above what we have
    cat "$TMP/newer" >>"$TMP/pull"
    mv "$TMP/pull" "$TMP/newer"
    C=$(j next_cursor)
    [[ $(j has_more) == false ]] && break
done
is "$STATUS $(j has_more)" "200 false" "newer: pulls end with has_more false"
is "$pulls" 3 "  13 items above the 14th in pulls of 5: 3 pulls"
is "$(cat "$TMP/newer")" "$(sql_feed $U_TIES | head -n 13)" "  together they are items 1..13 of SQL, in order"
req GET "/users/$U_TIES/feed/newer?cursor=$C&limit=5"
is "$STATUS $(j items.@len) $(j has_more) $(j next_cursor)" "200 0 false $C" \
    "  from the top: nothing newer, the same cursor back"
req GET "/users/$U_TIES/feed/newer?limit=5";        error_is 400 "newer without a cursor"
req GET "/users/$U_TIES/feed/newer?cursor=$C&limit=0"; error_is 400 "newer with limit 0"

# ------------------------------------------------------------------ timeline
# GET /users/{uid}/timeline: the reader's feed merged with the posts of the
# authors of --merge-authors (feed_page_merged), walked page by page and
# compared with SQL's UNION. 9 pairs are in both tables and come once.
ROUTE=timeline
req GET "/users/$U_TL/timeline?limit=7"
is "$STATUS $(j @keys) $(j source)" "200 items,next_cursor,source rebuild" \
    "timeline page 1: 200, {items, next_cursor, source}, rebuilt (every copy cold)"
is "$(j 'items.*' | tr '\n' ' ')" "$(sql_timeline $U_TL | head -n 7 | tr '\n' ' ')" "  page 1 equals SQL's UNION"
like "$(j next_cursor)" '^[A-Za-z0-9_-]{24}$' "  next_cursor an opaque token"
req GET "/users/$U_TL/timeline?limit=7"
is "$(j source)" cache "  again: from the cache"
walk_is $U_TL 7 "timeline walk, pages of 7 (reader 69 rows, authors 45 + 10 + 0, max_len $MAX_LEN)"
like "$SOURCES" '^(cache )+(db )+$' "  from the cache, then past the copies from the db: $SOURCES"
walk_is $U_TL 1 "timeline walk, pages of 1"
walk_is $U_TL $MAX_PAGE "timeline walk, pages of $MAX_PAGE"
is "$(wc -l <"$TMP/walk") $(sql "SELECT count(*) FROM (SELECT score, id FROM feed_entry WHERE uid = $U_TL
      UNION ALL SELECT score, id FROM author_post WHERE author = ANY('{$MERGE}'::bigint[])) t")" "115 124" \
    "  115 items: the 124 rows less the 9 pairs in both tables"
BOTH=$(sql "SELECT id FROM author_post WHERE author = $A_MANY AND id % 5 = 0 ORDER BY id LIMIT 1")
is "$(grep -c "\"id\":\"$BOTH\"" "$TMP/walk")" 1 "  a pair in the reader's feed and in an author's posts comes once"
walk_is $U_EMPTY 5 "the timeline of a reader with no rows: the authors' posts"

# The authors' posts: POST, PUT, DELETE /authors/{author}/posts[/{id}],
# each a transaction, then feed_author_on_insert / _on_delete.
TOPT=$(sql "SELECT max(score) FROM author_post WHERE author = $A_FEW")
post POST "/authors/$A_FEW/posts" "{\"id\":5000101,\"score\":$((TOPT + 1))}"
is "$STATUS $BODY" "201 {\"id\":\"5000101\",\"score\":$((TOPT + 1)),\"cache\":\"ok\"}" \
    "POST an author's post: 201 {id, score, cache: ok}"
like "$HEADERS" "Location: /authors/$A_FEW/posts/5000101" "  Location of the new post"
is "$(sql "SELECT score FROM author_post WHERE author = $A_FEW AND id = 5000101")" $((TOPT + 1)) \
    "  the row is in the authors' table"
first_ids $U_TL 2
is "$IDS$(j source)" "5000101 $(sql_timeline $U_TL | sed -n 2p | "$JGET" id) cache" \
    "  first on the next page 1 of the timeline, from the cache the hook updated"
post POST "/authors/$A_FEW/posts" '{"id":5000101,"score":1}'
error_is 409 "POST a post the author already has"
post PUT "/authors/$A_FEW/posts/5000101" '{"score":1001}'
is "$STATUS $BODY" '200 {"id":"5000101","score":1001,"cache":"ok"}' "PUT a post's new score: 200"
walk_is $U_TL 9 "  timeline walk equals SQL (the post moved down among the reader's rows)"
post PUT "/authors/$A_FEW/posts" '{"id":424242,"score":1}'
error_is 404 "PUT a post the author does not have"
req DELETE "/authors/$A_FEW/posts/5000101"
is "$STATUS $BODY" '200 {"id":"5000101","score":1001,"cache":"ok"}' "DELETE a post: 200 with what was deleted"
is "$(sql "SELECT count(*) FROM author_post WHERE id = 5000101")" 0 "  the row is gone"
walk_is $U_TL 9 "  timeline walk equals SQL without it"
grep -q '"id":"5000101"' "$TMP/walk"
is "$?" 1 "  (the post is in no page)"
req DELETE "/authors/$A_FEW/posts/5000101";          error_is 404 "DELETE it again"
post POST "/authors/$A_NONE/posts" '{"id":5000102,"score":2000}'
is "$STATUS $(j cache)" "201 ok" "POST a post by an author who had none"
first_ids $U_TL 1
is "$IDS$(j source)" "5000102 cache" "  first on page 1, from the cache (the empty copy took it)"
walk_is $U_TL 20 "  timeline walk equals SQL"
sql "DELETE FROM author_post WHERE id = 5000102" >/dev/null
rcli del "$(akey "$A_NONE")" >/dev/null

CHECKSUM_A="SELECT count(*) || ' ' || sum(score) || ' ' || sum(id % 1000003) FROM author_post WHERE author BETWEEN $ALL_UIDS"
BEFORE_A=$(sql "$CHECKSUM_A")
req GET "/users/$U_TL/timeline?limit=3"
TC=$(j next_cursor)
req GET "/users/$U_TL/timeline?limit=3&cursor=$TC";            is "$STATUS" 200 "a timeline cursor is accepted"
req GET "/users/$U_TL/timeline?limit=0";                      error_is 400 "timeline: limit 0"
req GET "/users/$U_TL/timeline?limit=$((MAX_PAGE + 1))";      error_is 400 "timeline: limit above max_page"
req GET "/users/$U_TL/timeline?limit=x";                      error_is 400 "timeline: non-numeric limit"
req GET "/users/$U_TL/timeline?cursor=garbage";               error_is 400 "timeline: malformed cursor"
BADT=${TC:0:10}$([[ ${TC:10:1} == A ]] && echo B || echo A)${TC:11}
req GET "/users/$U_TL/timeline?cursor=$BADT";                 error_is 400 "timeline: a cursor with one character changed"
req GET "/users/$U_TL/timeline?cursor=";                      error_is 400 "timeline: an empty cursor"
req GET "/users/$U_TL/timeline?limit=3&limit=3";              error_is 400 "timeline: a repeated parameter"
req GET "/users/$U_TL/timeline?authors=1";                    error_is 400 "timeline: an unknown parameter"
req GET /users/-1/timeline;                                   error_is 400 "timeline: a negative uid"
req GET /users/x/timeline;                                    error_is 400 "timeline: a non-numeric uid"
req POST "/users/$U_TL/timeline";                             error_is 405 "POST on a timeline"
req GET "/authors/$A_FEW/posts";                              error_is 405 "GET on an author's posts"
req GET "/authors/$A_FEW";                                    error_is 404 "an author without /posts"
post POST /authors/x/posts '{"id":1,"score":1}';              error_is 400 "POST a post: a non-numeric author"
post POST "/authors/$A_FEW/posts" '{"id":-1,"score":1}';      error_is 400 "POST a post: a negative id"
post POST "/authors/$A_FEW/posts" '{"id":1}';                 error_is 400 "POST a post: no score"
post POST "/authors/$A_FEW/posts" '{"id":1,"score":1.5}';     error_is 400 "POST a post: a fractional score"
post POST "/authors/$A_FEW/posts" '{"id":1,"score":1,"x":1}'; error_is 400 "POST a post: an unknown field"
post POST "/authors/$A_FEW/posts?x=1" '{"id":1,"score":1}';   error_is 400 "POST a post: a query"
post PUT "/authors/$A_FEW/posts/7" '{"id":8,"score":1}';      error_is 400 "PUT a post whose body id differs from the path's"
req DELETE "/authors/$A_FEW/posts/-1";                        error_is 400 "DELETE a post: a negative id"
req DELETE "/authors/$A_FEW/posts/1" --data-binary x;         error_is 400 "DELETE a post: a body"
is "$(sql "$CHECKSUM_A")" "$BEFORE_A" "  no bad request changed a post"
scrape
like "$(metric 'feed_server_requests_total{route="/users/{uid}/timeline",code="200"}') $(metric 'feed_server_requests_total{route="/authors/{author}/posts",code="201"}')" \
    '^[1-9][0-9]* [1-9]' "/metrics counts the timeline's and the posts' requests under their routes"
ROUTE=feed

# ------------------------------------------------------------------ bad input
CHECKSUM="SELECT count(*) || ' ' || sum(score) || ' ' || sum(id % 1000003) FROM feed_entry WHERE uid BETWEEN $ALL_UIDS"
BEFORE=$(sql "$CHECKSUM")
req GET /nope;                               error_is 404 "unknown path"
req GET /users/1/feed/more;                  error_is 404 "a path one segment too long"
req GET /users//feed;                        error_is 404 "an empty uid segment"
req GET /metrics/;                           error_is 404 "a trailing slash"
req PATCH "/users/$U_TIES/feed";             error_is 405 "PATCH on a feed"
like "$HEADERS" $'\nAllow: GET, HEAD' "  Allow: GET, HEAD"
req DELETE /metrics;                         error_is 405 "DELETE /metrics"
req GET /items/1/fanout;                     error_is 405 "GET on fanout"
req POST "/users/$U_TIES/feed";              error_is 405 "POST on a feed"
req GET /users/abc/feed;                     error_is 400 "non-numeric uid"
req GET /users/-1/feed;                      error_is 400 "negative uid"
req GET /users/1.5/feed;                     error_is 400 "fractional uid"
req GET /users/9223372036854775808/feed;     error_is 400 "uid above INT64_MAX"
req GET "/users/$U_TIES/feed?limit=0";       error_is 400 "limit 0"
req GET "/users/$U_TIES/feed?limit=$((MAX_PAGE + 1))"; error_is 400 "limit above max_page"
req GET "/users/$U_TIES/feed?limit=-1";      error_is 400 "negative limit"
req GET "/users/$U_TIES/feed?limit=ten";     error_is 400 "non-numeric limit"
req GET "/users/$U_TIES/feed?limit=";        error_is 400 "empty limit"
req GET "/users/$U_TIES/feed?limit=99999999999999999999999"; error_is 400 "huge limit"
req GET "/users/$U_TIES/feed?limit=3"
CUR=$(j next_cursor)
req GET "/users/$U_TIES/feed?limit=3&cursor=$CUR"
is "$STATUS" 200 "a real cursor is accepted"
req GET "/users/$U_TIES/feed?cursor=garbage";            error_is 400 "malformed cursor"
BAD=${CUR:0:10}$([[ ${CUR:10:1} == A ]] && echo B || echo A)${CUR:11}
req GET "/users/$U_TIES/feed?cursor=$BAD";               error_is 400 "a cursor with one character changed"
req GET "/users/$U_TIES/feed?cursor=${CUR:0:23}";        error_is 400 "a truncated cursor"
req GET "/users/$U_TIES/feed?cursor=";                   error_is 400 "an empty cursor"
req GET "/users/$U_TIES/feed?cursor=${CUR:0:20}%2B%2F%3D%3D"; error_is 400 "a cursor with base64 +/="
req GET "/users/$U_TIES/feed?limit=3&limit=3";           error_is 400 "a repeated query parameter"
req GET "/users/$U_TIES/feed?cursor=$CUR&cursor=$CUR";    error_is 400 "a repeated cursor"
req GET "/users/$U_TIES/feed?limt=3";                     error_is 400 "an unknown query parameter"
req GET "/users/$U_TIES/feed?limit=3&";                   is "$STATUS" 200 "an empty trailing & is no parameter"
req GET "/healthz?verbose=1";                             error_is 400 "a query on /healthz"
req GET "/metrics?x";                                     error_is 400 "a query on /metrics"
req GET "/?uid=1&uid=2";                                  error_is 400 "a repeated parameter of the page"
post POST "/users/$U_WRITE/items?id=1" '{"id":1,"score":1}'; error_is 400 "a query on a write"
LONG=$(head -c 20000 /dev/zero | tr '\0' a)
req GET "/users/$U_TIES/feed?limit=3&pad=$LONG";          error_is 414 "a 20 kB URL: JSON, not the HTTP library's HTML"
req GET "/users/$U_TIES/feed?limit=3" -H "X-Pad: $LONG";  error_is 431 "a 20 kB header: JSON"
req GET "/users/$U_TIES/feed?limit=3" -H "X-A: ${LONG:0:9000}" -H "X-B: ${LONG:0:9000}"
error_is 431 "  two 9 kB headers: JSON"
req GET "/users/$U_TIES/feed?limit=3&pad=${LONG:0:7000}"; error_is 400 "a 7 kB URL is read (and its unknown parameter refused)"
W=/users/$U_WRITE/items
post POST "$W" '{"id":1,"score":1';                 error_is 400 "malformed JSON"
post POST "$W" '';                                  error_is 400 "empty body"
post POST "$W" '[{"id":1,"score":1}]';              error_is 400 "a JSON array, not an object"
post POST "$W" '{"id":1,"score":1} {}';             error_is 400 "trailing data after the JSON"
post POST "$W" '{"id":1,"id":2,"score":1}';         error_is 400 "a duplicate key"
post POST "$W" '{"id":1}';                          error_is 400 "missing score"
post POST "$W" '{"score":1}';                       error_is 400 "missing id"
post POST "$W" '{"id":1,"score":1,"extra":true}';   error_is 400 "an unknown field"
post POST "$W" '{"id":-1,"score":1}';               error_is 400 "negative id"
post POST "$W" '{"id":"-1","score":1}';             error_is 400 "negative id as a string"
post POST "$W" '{"id":"12a","score":1}';            error_is 400 "id string with a non-digit"
post POST "$W" '{"id":"","score":1}';               error_is 400 "empty id string"
post POST "$W" '{"id":1.0,"score":1}';              error_is 400 "id as a real number"
post POST "$W" '{"id":"9223372036854775808","score":1}'; error_is 400 "id above INT64_MAX"
post POST "$W" '{"id":9223372036854775808,"score":1}';   error_is 400 "id above INT64_MAX as a number"
post POST "$W" '{"id":1,"score":1.5}';              error_is 400 "fractional score"
post POST "$W" '{"id":1,"score":"5"}';              error_is 400 "score as a string"
post POST "$W" '{"id":1,"score":9007199254740992}'; error_is 400 "score 2^53"
post POST "$W" '{"id":1,"score":-9007199254740992}'; error_is 400 "score -2^53"
post POST "$W" '{"id":1,"score":null}';             error_is 400 "score null"
req DELETE "$W/-1";                                 error_is 400 "DELETE a negative id"
req DELETE "$W/x1";                                 error_is 400 "DELETE a non-numeric id"
post POST /items/-1/fanout '{"score":1,"uids":[1]}'; error_is 400 "fanout of a negative id"
post POST /items/1/fanout '{"score":1,"uids":[]}';   error_is 400 "fanout to no users"
post POST /items/1/fanout '{"score":1,"uids":5}';    error_is 400 "fanout uids not an array"
post POST /items/1/fanout '{"score":1,"uids":[1,-2]}'; error_is 400 "fanout to a negative uid"
post POST /items/1/fanout '{"uids":[1]}';            error_is 400 "fanout without a score"
is "$(sql "$CHECKSUM")" "$BEFORE" "no bad request changed a row"
# libevent 2.1's evhttp refuses such a body itself, before our code sees the
# request, with its own HTML page (it has no hook before the body is read).
too_large_is() {
    if ((EVHTTP)); then is "$STATUS" 413 "$1 -> 413 (evhttp's own page)"; else error_is 413 "$1"; fi
}
head -c 70000 /dev/zero | tr '\0' ' ' >"$TMP/big"
req POST "$W" -H 'Expect: 100-continue' --data-binary @"$TMP/big"; too_large_is "a body over --max-body (Content-Length)"
req POST "$W" -H 'Transfer-Encoding: chunked' --data-binary @"$TMP/big"; too_large_is "a body over --max-body (chunked)"
{ printf '{"id":5000009,"score":1,"pad":"'; head -c 60000 /dev/zero | tr '\0' x; printf '"}'; } >"$TMP/near"
req POST "$W" --data-binary @"$TMP/near"; error_is 400 "a body just under the limit is read (and its bad field refused)"
kill -0 "$SPID" 2>/dev/null
is "$?" 0 "the server is still up after all that"

# ------------------------------------------------------------------ metrics
# The counters of struct feed_stats, read from the header itself: /metrics
# must export every one, so a counter added to the library cannot be missed.
FIELDS=$(sed -n '/^typedef struct feed_stats {/,/^} feed_stats;/s/^ *uint64_t *\([a-z_]*\);.*/\1/p' lib/feedcache.h)
scrape
like "$CTYPE" '^text/plain; version=0.0.4' "GET /metrics: Prometheus text"
if (($(wc -w <<<"$FIELDS") >= 12)); then
    pass "feed_stats has $(wc -w <<<"$FIELDS") counters in lib/feedcache.h"
else
    fail "reading feed_stats from lib/feedcache.h" "got: $FIELDS"
fi
missing=
for k in $FIELDS; do
    grep -q "^# TYPE feedcache_${k}_total counter$" <<<"$M" && grep -q "^feedcache_${k}_total [0-9][0-9]*$" <<<"$M" ||
        missing+="$k "
done
is "$missing" "" "  every one is exported as feedcache_<name>_total, a counter"
is "$(grep -c '^feedcache_[a-z_]*_total ' <<<"$M")" "$(wc -w <<<"$FIELDS")" "  and nothing else under feedcache_"
for k in 'feed_server_request_duration_seconds_bucket{le="+Inf"}' feed_server_request_duration_seconds_count \
    feed_server_hook_failures_total feed_server_invalidations_total; do
    like "$(awk -v k="$k" '$1 == k' <<<"$M")" '^[^ ]+ [0-9.]+$' "  has $k"
done
is "$(metric 'feed_server_request_duration_seconds_bucket{le="+Inf"}')" \
    "$(metric feed_server_request_duration_seconds_count)" "  histogram: +Inf bucket = count"
# rebuild pages: pages that were neither cache nor db
rebuilt() { echo $(($(delta feedcache_pages_total) - $(delta feedcache_cache_pages_total) - $(delta feedcache_db_pages_total))); }
M0=$M
req GET "/users/$U_COLD/feed?limit=10"
is "$(j source)" rebuild "a cold read"
scrape
M1=$M
is "$(rebuilt) $(delta feedcache_rebuilds_total) $(delta feedcache_sql_queries_total)" \
    "1 1 1" "  moved rebuild pages +1, rebuilds +1, SQL queries +1"
is "$(delta feedcache_cache_pages_total) $(delta feedcache_db_pages_total)" "0 0" \
    "  and no cache or db page"
is "$(delta feed_server_request_duration_seconds_count)" 2 "  requests +2 (the read and the scrape before it)"
is "$(delta 'feed_server_requests_total{route="/users/{uid}/feed",code="200"}')" 1 "  feed 200s +1"
M0=$M1
req GET "/users/$U_COLD/feed?limit=10"
is "$(j source)" cache "a warm read"
scrape
M1=$M
is "$(delta feedcache_cache_pages_total) $(delta feedcache_sql_queries_total) $(delta feedcache_redis_calls_total)" \
    "1 0 1" "  moved cache pages +1, SQL queries +0, Redis calls +1"
M0=$M1
walk "$U_TIES" 10
is "$WHY" "" "a walk of pages of 10, past the cache"
scrape
M1=$M
is "$(delta feedcache_db_pages_total)" "$(grep -o db <<<"$SOURCES" | wc -l)" \
    "  db pages moved by the pages of the walk past the cache"
is "$(delta feedcache_sql_queries_total)" "$(grep -o db <<<"$SOURCES" | wc -l)" "  one SQL query per db page"
M0=$M1
req GET /users/abc/feed
req GET "/users/$U_TIES/feed?limit=0"
scrape
M1=$M
is "$(delta 'feed_server_requests_total{route="/users/{uid}/feed",code="400"}')" 2 "  feed 400s +2"

# ------------------------------------------------------------------ concurrency
scrape
M0=$M
pids=()
for ((i = 0; i < 32; i++)); do
    curl -sS --max-time 30 "$BASE/users/$U_CROWD/feed?limit=20" -o "$TMP/crowd.$i" &
    pids+=($!)
done
crowd_rc=0
for p in "${pids[@]}"; do wait "$p" || crowd_rc=1; done
is "$crowd_rc" 0 "32 concurrent cold reads of one feed all answered"
want=$(sql_feed $U_CROWD | head -n 20)
same=0
for ((i = 0; i < 32; i++)); do
    [[ $("$JGET" 'items.*' <"$TMP/crowd.$i") == "$want" ]] && same=$((same + 1))
done
is "$same" 32 "  every one got page 1 exactly"
scrape
M1=$M
is "$(delta feedcache_pages_total)" 32 "  32 pages counted"
is "$(delta feedcache_rebuilds_total)" 1 "  one rebuild for all of them (the lease)"
walk_is $U_CROWD 20 "  the feed walks equal to SQL afterwards"

# ------------------------------------------------------------------ failed hooks
# Redis refuses the hook's script (ACL) while keeping the connection: the
# cached copy would be stale, so the server drops it (feed_invalidate) and
# says "invalidated"; pages come from SQL meanwhile (page.lua is refused too).
walk_is $U_ACL 20 "a cached feed"
rcli acl setuser default -evalsha >/dev/null
post POST "/users/$U_ACL/items" '{"id":5000010,"score":100000}'
is "$STATUS $(j cache)" "201 invalidated" "POST while Redis refuses the hook: 201, cache invalidated"
is "$(rcli exists "$(fkey "$U_ACL")")" 0 "  (the cached copy is gone)"
scrape
is "$(metric feed_server_hook_failures_total) $(metric feed_server_invalidations_total)" "1 1" \
    "  one failed hook, one invalidation"
first_ids $U_ACL 1
is "$IDS$(j source)" "5000010 db" "  page 1 has the item, read from SQL"
# Now the DEL is refused too: the copy stays, and the library's repair list
# (not the server) drops it as soon as Redis accepts again.
rcli acl setuser default +evalsha >/dev/null
walk_is $U_ACL 20 "  walk equals SQL, cached again"
rcli acl setuser default -evalsha -del >/dev/null
req DELETE "/users/$U_ACL/items/10"
is "$STATUS $(j cache)" "200 repair-pending" "DELETE while Redis refuses the hook and DEL: 200, repair-pending"
is "$(rcli exists "$(fkey "$U_ACL")")" 1 "  (the stale copy is still in Redis)"
walk_is $U_ACL 20 "  walk equals SQL (from SQL: page.lua is refused)"
rcli acl setuser default +evalsha +del >/dev/null
walk_is $U_ACL 20 "Redis accepts again: walk equals SQL, never the stale copy"
scrape
like "$(metric feedcache_repairs_total)" '^[1-9]' "  the library's repair list dropped it (feedcache_repairs_total)"
walk_is $U_ACL 20 "  walk equals SQL"
like "$SOURCES" '^cache ' "  from the cache again"

# The same for an author's post: the hook refused, the server drops the
# author's copy (feed_author_invalidate; on the event loops
# feed_async_author_invalidate); with DEL refused too the library's repair
# list drops it once Redis accepts a DEL again. (Meanwhile a read that Redis
# still allows may serve the stale copy, for a feed as for an author: the
# copy cannot go while Redis refuses to delete it.)
ROUTE=timeline
walk_is $U_TL 20 "a timeline whose copies are cached"
is "$(rcli exists "$(akey "$A_NONE")")" 1 "  (the copy of author $A_NONE's posts, empty, too)"
scrape
M0=$M
rcli acl setuser default -evalsha >/dev/null
post POST "/authors/$A_NONE/posts" '{"id":5000110,"score":3000}'
is "$STATUS $(j cache)" "201 invalidated" "POST an author's post while Redis refuses the hook: 201, cache invalidated"
is "$(rcli exists "$(akey "$A_NONE")")" 0 "  (the author's cached copy is gone)"
scrape
M1=$M
is "$(delta feed_server_hook_failures_total) $(delta feed_server_invalidations_total)" "1 1" \
    "  one failed hook, one invalidation"
first_ids $U_TL 1
is "$IDS" "5000110 " "  timeline page 1 has the post"
rcli acl setuser default +evalsha >/dev/null
walk_is $U_TL 20 "  timeline walk equals SQL, the copy rebuilt"
is "$(rcli exists "$(akey "$A_NONE")")" 1 "  (the author's copy is back)"
rcli acl setuser default -evalsha -del >/dev/null
req DELETE "/authors/$A_NONE/posts/5000110"
is "$STATUS $(j cache)" "200 repair-pending" "DELETE an author's post while Redis refuses the hook and DEL: 200, repair-pending"
is "$(rcli exists "$(akey "$A_NONE")")" 1 "  (the stale copy is still in Redis)"
scrape
M0=$M
rcli acl setuser default +evalsha +del >/dev/null
walk_is $U_TL 20 "Redis accepts again: timeline walk equals SQL"
grep -q '"id":"5000110"' "$TMP/walk"
is "$?" 1 "  without the deleted post"
scrape
M1=$M
like "$(delta feedcache_repairs_total)" '^[1-9]' "  the library's repair list dropped the stale copy (feedcache_repairs_total)"
walk_is $U_TL 20 "  and again"
like "$SOURCES" '^cache ' "  page 1 from the cache again"
ROUTE=feed

# ------------------------------------------------------------------ outages
walk_is $U_OUT 20 "a cached feed before the outages"
"$FEED_SERVERS" redis-freeze "$FEED_SERVERS_DIR" || bail "cannot freeze Redis"
walk_is $U_OUT 20 "Redis frozen: walk equals SQL"
like "$SOURCES" '^(db )+$' "  every page from the db"
req GET /healthz
is "$STATUS $(j status redis postgres | tr '\n' ' ')" "200 degraded down up " "  /healthz: 200 degraded, redis down"
post POST "/users/$U_OUT/items" '{"id":5000020,"score":100000}'
is "$STATUS $(j cache)" "201 repair-pending" "  POST: 201, cache repair-pending"
walk_is $U_OUT 20 "  walk equals SQL with the new item"
"$FEED_SERVERS" redis-thaw "$FEED_SERVERS_DIR" || bail "cannot thaw Redis"
walk_is $U_OUT 20 "Redis thawed: walk equals SQL"
for ((i = 0; i < 50; i++)); do
    req GET "/users/$U_OUT/feed?limit=5"
    [[ $(j source) == cache ]] && break
    sleep 0.1
done
walk_is $U_OUT 20 "  walk equals SQL, from the cache again: $SOURCES"

# A worker whose Redis connection broke in the freeze has not necessarily
# reconnected yet: it does on its first call at least retry_ms (1 s) after
# its last attempt, and with PostgreSQL down it answers 503 (Retry-After: 1)
# until then. The cached reads below ask again as a client would; every page
# that comes back must still be the cache's, and right.
WANT_FITS=$(sql_feed $U_FITS)
WANT_OUT=$(sql_feed $U_OUT | head -n 20)
"$FEED_SERVERS" pg-stop "$FEED_SERVERS_DIR" || bail "cannot stop PostgreSQL"
RETRY_503=5 RETRIED=0
walk "$U_FITS" 7
is "$WHY|$(cat "$TMP/walk")" "|$WANT_FITS" "PostgreSQL down: a feed cached whole walks as before ($RETRIED asked again after a 503)"
like "$SOURCES" '^(cache )+$' "  every page from the cache"
req_retry GET "/users/$U_OUT/feed?limit=20"
RETRY_503=0
is "$STATUS $(j source)|$(j 'items.*')" "200 cache|$WANT_OUT" "  page 1 of a long feed, from the cache"
req GET "/users/$U_OUT/feed?limit=20&cursor=$(j next_cursor)"
error_is 503 "  page 2 needs SQL (the cache holds $MAX_LEN, not the 41st): 503"
req GET "/users/7000099/feed"
error_is 503 "  a feed that is not cached: 503"
like "$HEADERS" $'\nRetry-After: 1' "  with Retry-After"
post POST "/users/$U_OUT/items" '{"id":5000021,"score":1}'; error_is 503 "  POST: 503"
post PUT "/users/$U_OUT/items" '{"id":5000020,"score":1}';  error_is 503 "  PUT: 503"
req DELETE "/users/$U_OUT/items/5000020";                    error_is 503 "  DELETE: 503"
post POST /items/5000022/fanout "{\"score\":1,\"uids\":[$U_OUT]}"; error_is 503 "  fanout: 503"
req GET /healthz
is "$STATUS $(j status redis postgres | tr '\n' ' ')" "200 degraded up down " "  /healthz: 200 degraded, postgres down"
"$FEED_SERVERS" redis-freeze "$FEED_SERVERS_DIR" || bail "cannot freeze Redis"
req GET "/users/$U_OUT/feed"
error_is 503 "both down: a read gets 503"
req GET /healthz
is "$STATUS $(j status redis postgres | tr '\n' ' ')" "503 down down down " "  /healthz: 503 down"
"$FEED_SERVERS" redis-thaw "$FEED_SERVERS_DIR" || bail "cannot thaw Redis"
"$FEED_SERVERS" pg-start "$FEED_SERVERS_DIR" || bail "cannot restart PostgreSQL"
for ((i = 0; i < 50; i++)); do
    post POST "/users/$U_OUT/items" '{"id":5000021,"score":100001}'
    [[ $STATUS == 503 ]] || break
    sleep 0.1
done
is "$STATUS" 201 "PostgreSQL back: POST 201 (a worker reconnects within a second)"
# Another worker may still have both connections broken from the outage (the
# read and the /healthz while both were down): it answers 503 until retry_ms
# has passed since its last attempts (see req_retry). Asked again then, every
# page must be right: a wrong page is never retried away.
RETRY_503=5
walk_is $U_OUT 20 "  walk equals SQL"
req_retry GET "/users/$U_OUT/feed?limit=1"
RETRY_503=0
is "$STATUS $(j 'items.*.id')" "200 5000021" "  with the new item first"

# ------------------------------------------------------------------ log, stop
like "$(cat "$TMP/log")" $'\nGET /users/'"$U_TIES"$'/feed 200 rebuild [0-9]+us\n' \
    "the log has one line per request: method, path, status, source, microseconds"
like "$(cat "$TMP/log")" $'\nGET /nope 404 - [0-9]+us\n' "  an unknown path is logged with its 404"
kill -0 "$SPID" 2>/dev/null
is "$?" 0 "the server never crashed"
stop_server
is "$?" 0 "SIGTERM: the server stops cleanly, exit status 0"
like "$(tail -n 1 "$TMP/log")" 'SIGTERM: stopping' "  and says so"

start_server --quiet || bail "feed_server --quiet did not start: $(tail -n 5 "$TMP/log" | tr "\n" " ")"
req GET "/users/$U_TIES/feed"
is "$STATUS" 200 "--quiet: the service answers"
# Started without --author-table: no timelines, no authors' posts.
req GET "/users/$U_TL/timeline"
error_is 404 "no --author-table: GET a timeline"
like "$(j error)" 'author-table' "  the error names --author-table"
post POST "/authors/$A_FEW/posts" '{"id":1,"score":1}'; error_is 404 "  POST an author's post"
req DELETE "/authors/$A_FEW/posts/1";                   error_is 404 "  DELETE an author's post"
req OPTIONS "/users/$U_TL/timeline";                    error_is 404 "  OPTIONS on a timeline"
stop_server
is "$(grep -c '^GET ' "$TMP/log")" 0 "  and logs no request"

# A wrong Redis port: the service starts (it serves from SQL) but says so.
start_server --quiet --redis-port 1 || bail "feed_server without Redis did not start"
like "$(cat "$TMP/log")" 'warning: .*Redis' "Redis unreachable at start: a warning in the log"
req GET "/users/$U_TIES/feed?limit=3"
is "$STATUS $(j source)" "200 db" "  and pages come from SQL"
req GET "/users/$U_TIES/feed?limit=3" -H "Origin: $ORIGIN"
if [[ $HEADERS == *Access-Control* ]]; then
    fail "  no --cors-origin: no CORS header" "$HEADERS"
else
    pass "  no --cors-origin: no CORS header"
fi
stop_server

"$SERVER" --port 0 --redis-port "$FEED_REDIS_PORT" --pg "host=127.0.0.1 port=1 dbname=none" --max-len 0 \
    >/dev/null 2>"$TMP/bad.log"
is "$?" 2 "a bad flag value (--max-len 0): exit status 2"
like "$(cat "$TMP/bad.log")" 'max-len must be' "  with the library's reason (feed_config_set)"
# Every field of feed_config is a flag, under the library's limits: one the
# example never named, refused past its range, and --help lists them all.
"$SERVER" --port 0 --lease-wait-ms 4294967296 >/dev/null 2>"$TMP/bad.log"
is "$?" 2 "--lease-wait-ms 4294967296 (a field by its library name, past uint32): exit status 2"
like "$(cat "$TMP/bad.log")" '--lease-wait-ms: lease-wait-ms must be 0\.\.4294967295' "  naming the range"
"$SERVER" --port 0 --redis-timeout 0 >/dev/null 2>"$TMP/bad.log"
is "$?" 2 "--redis-timeout 0 (the short name of redis-timeout-ms): exit status 2"
fields=$(awk '/^typedef struct feed_config {/,/^} feed_config;/' lib/feedcache.h |
         grep -oE '^ +(const char +\*|uint32_t|int) *[a-z_]+;' | grep -oE '[a-z_]+;$' | tr -d ';')
help=$("$SERVER" --help)
missing=()
for f in $fields; do
    grep -q -- "--${f//_/-}\b" <<<"$help" || missing+=("--${f//_/-}")
done
is "${missing[*]}" "" "--help names a flag for each of the $(wc -w <<<"$fields") fields of feed_config"
for bad in "1,,2" "1,2," "1,x" "1,-2" "3,1,3" "1 2" "9223372036854775808" "$(seq -s, 1 101)"; do
    timeout 20 "$SERVER" --port 0 --author-table author_post --merge-authors "$bad" >/dev/null 2>"$TMP/bad.log"
    rc=$?
    if [[ $rc == 2 && $(cat "$TMP/bad.log") == *--merge-authors* ]]; then
        pass "--merge-authors '${bad:0:20}': refuses to start (exit status 2, $(cut -c1-70 "$TMP/bad.log"))"
    else
        fail "--merge-authors '${bad:0:20}': refuses to start" "exit status $rc: $(cat "$TMP/bad.log")"
    fi
done
timeout 20 "$SERVER" --port 0 --merge-authors 1,2 >/dev/null 2>"$TMP/bad.log"
is "$?" 2 "--merge-authors without --author-table: exit status 2"
like "$(cat "$TMP/bad.log")" 'needs --author-table' "  and says why"
timeout 20 "$SERVER" --port 0 --author-table no_such_table >/dev/null 2>"$TMP/bad.log"
is "$?" 1 "--author-table naming no table: refuses to start (exit status 1)"
like "$(cat "$TMP/bad.log")" 'no_such_table' "  and names it"
rcli acl setuser feedtest on '>secret' '~*' '&*' +@all >/dev/null
"$SERVER" --port 0 --redis-user feedtest --redis-password wrong >/dev/null 2>"$TMP/bad.log"
is "$?" 1 "a wrong Redis password: refuses to start (exit status 1)"
like "$(cat "$TMP/bad.log")" 'AUTH' "  and says why"
rcli acl deluser feedtest >/dev/null

# ------------------------------------------------------------------ event loop
# The event-loop server waits on nothing: the library's requests
# (feed_async_*) and the write transactions (libpq's asynchronous calls) run
# on the loop. With one loop and PostgreSQL frozen, a page that needs SQL,
# a /healthz and a write each wait for their bound while the same loop goes
# on answering cached pages and /metrics. That the page was under way, its
# statement sent, before the loop answered the others is read off the
# counters: sql_queries moves when a statement is sent.
if ((EVHTTP)); then
    U_FROZEN=7000070        # no rows, not cached: its page needs SQL
    rcli del "$(fkey "$U_FROZEN")" "$(fkey "$U_FROZEN" :lease)" >/dev/null
    start_server --quiet --threads 1 --pg-timeout 3000 || bail "one-loop server did not start"
    req GET "/users/$U_TIES/feed?limit=3"   # the loop's handle is open, the page cached
    scrape
    M0=$M
    "$FEED_SERVERS" pg-freeze "$FEED_SERVERS_DIR" || bail "cannot freeze PostgreSQL"
    bg() {  # NAME curl-args...: in the background, status in $TMP/NAME, headers in $TMP/NAME.h
        local name=$1
        shift
        curl -sS --max-time 30 -o "$TMP/$name.body" -D "$TMP/$name.h" -w '%{http_code}' "$@" \
            >"$TMP/$name" 2>&1 &
    }
    bg frozen_read "$BASE/users/$U_FROZEN/feed"
    rpid=$!
    sleep 0.5
    bg frozen_health "$BASE/healthz"
    hpid=$!
    bg frozen_write -X POST --data-binary '{"id":5000030,"score":1}' "$BASE/users/$U_OUT/items"
    wpid=$!
    sleep 0.5
    req GET "/users/$U_TIES/feed?limit=3"
    cached="$STATUS $(j source)"
    scrape
    M1=$M
    pending=0
    for p in $rpid $hpid $wpid; do kill -0 "$p" 2>/dev/null && pending=$((pending + 1)); done
    is "$cached $STATUS $pending" "200 cache 200 3" \
        "one loop, PostgreSQL frozen: a cached page and /metrics answer while a page, /healthz and a POST wait on it"
    like "$(delta feedcache_sql_queries_total)" '^[1-9]' "  the page's statement was sent before they answered"
    is "$(delta feedcache_pg_timeouts_total)" 0 "  and had not timed out yet"
    wait "$rpid"
    is "$(cat "$TMP/frozen_read")" 503 "  the page ends with 503 once its bound has passed"
    like "$(tr -d '\r' <"$TMP/frozen_read.h")" $'\nRetry-After: 1\n' "    with Retry-After: 1 (the handle retries within retry_ms)"
    wait "$hpid"
    is "$(cat "$TMP/frozen_health") $("$JGET" status redis postgres <"$TMP/frozen_health.body" | tr '\n' ' ')" \
        "200 degraded up down " "  /healthz ends 200 degraded, postgres down"
    wait "$wpid"
    is "$(cat "$TMP/frozen_write")" 503 "  the POST ends with 503 once its bound has passed"
    "$FEED_SERVERS" pg-thaw "$FEED_SERVERS_DIR" || bail "cannot thaw PostgreSQL"
    RETRY_503=5
    walk_is $U_TIES 25 "PostgreSQL thawed: the same loop walks a feed equal to SQL"
    RETRY_503=0
    stop_server
    is "$?" 0 "  the server stops cleanly"
fi

sql "DELETE FROM feed_entry WHERE uid BETWEEN $ALL_UIDS;
     DELETE FROM author_post WHERE author BETWEEN $ALL_UIDS" >/dev/null
echo "1..$n"
((failed == 0))
