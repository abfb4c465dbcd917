#!/usr/bin/env bash
# t_http_mutes.t -- the example service's mutes, over HTTP only, on both
# servers (feed_server, then feed_server_evhttp): GET /users/{uid}/mutes,
# POST and DELETE /users/{uid}/mutes/{author}, and every read route
# (feed, newer, timeline) filtered by the viewer's mutes. Whole feeds and
# timelines are walked with several page sizes and compared with SQL with
# the mutes in its WHERE clause; every page before the last must be full;
# each item's "author" must be SQL's; a mute added in the middle of a walk
# takes effect on the next page with no item twice; the write routes take
# an author; bad input is refused; the routes are 404 without
# --item-author-column.
#
# Its own feed table (http_mute_entry, with an author column), key prefix
# and ids (93xxxxx), so that it shares nothing with the other tests; the
# mutes table is examples/mutes.sql's (created here without the ALTER of
# feed_entry that file makes for the demo).
set -uo pipefail

BUILD=${BUILD:-build}
JGET=$BUILD/examples/jget
MAX_LEN=40
MAX_PAGE=50

# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"

for v in FEED_REDIS_HOST FEED_REDIS_PORT FEED_PG_CONNINFO; do
    [[ -n ${!v:-} ]] || bail "$v is not set: run through tests/run.sh"
done
for s in feed_server feed_server_evhttp jget; do
    [[ -x $BUILD/examples/$s ]] || bail "$BUILD/examples/$s missing: run make"
done

TMP=$(mktemp -d -t feedcache-mutes.XXXXXX)
SPID=
sql() { PGOPTIONS='-c client_min_messages=warning' psql "$FEED_PG_CONNINFO" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
rcli() { redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" "$@"; }
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    [[ -n $SPID ]] && kill -KILL "$SPID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

req() {   # METHOD PATH [curl args...]: sets STATUS, BODY
    local method=$1 path=$2
    shift 2
    if [[ $method == GET && $# == 0 ]]; then http_get "$BASE$path"; return; fi   # tap.bash
    STATUS=$(curl -sS --max-time 30 -o "$TMP/body" -w '%{http_code}' -X "$method" "$@" \
        "$BASE$path" 2>"$TMP/curl.err") || STATUS=000
    BODY=$(cat "$TMP/body" 2>/dev/null)
}
post() { req "$1" "$2" -H 'Content-Type: application/json' --data-binary "$3"; }
j() { "$JGET" "$@" <<<"$BODY"; }
error_is() {   # STATUS NAME: the last answer was STATUS with a JSON error
    if [[ $STATUS == "$1" && $(j @keys 2>/dev/null) == error ]]; then
        pass "$2 -> $1 ($(j error | cut -c1-60))"
    else
        fail "$2 -> $1" "got $STATUS: $BODY"
    fi
}

# ------------------------------------------------------------------ data
T=http_mute_entry
U_A=9300001        # 300 items, ten authors, scores tied in threes, past max_len
U_B=9300002        # 200 items, nine in ten by one author (A_LOUD)
U_C=9300003        # the mutes limit
U_W=9300004        # writes
A0=9300200         # U_A's authors: A0+1 .. A0+10
A_LOUD=9300301
M1=9300101         # merged into every timeline: 120 posts
M2=9300102         #   and 30
MERGE=$M1,$M2
load_data() {   # afresh for each server
sql "CREATE TABLE IF NOT EXISTS $T (uid bigint NOT NULL, score bigint NOT NULL,
       id bigint NOT NULL, author bigint, PRIMARY KEY (uid, id));
     CREATE INDEX IF NOT EXISTS ${T}_page ON $T (uid, score DESC, id DESC);
     CREATE TABLE IF NOT EXISTS mutes (uid bigint NOT NULL, author bigint NOT NULL,
       PRIMARY KEY (uid, author));
     CREATE TABLE IF NOT EXISTS author_post (author bigint NOT NULL, score bigint NOT NULL,
       id bigint NOT NULL, PRIMARY KEY (author, id));
     DELETE FROM $T WHERE uid BETWEEN 9300000 AND 9399999;
     DELETE FROM mutes WHERE uid BETWEEN 9300000 AND 9399999;
     DELETE FROM author_post WHERE author BETWEEN 9300000 AND 9399999;
     INSERT INTO $T SELECT $U_A, 5000 + (g / 3) * 10, 9310000 + (g * 7919) % 300,
                           $A0 + 1 + (g * 37 % 10) FROM generate_series(0, 299) g;
     INSERT INTO $T SELECT $U_B, 3000 + g * 10, 9320000 + g,
                           CASE WHEN g % 10 = 3 THEN $A0 + 1 + g % 7 ELSE $A_LOUD END
                      FROM generate_series(0, 199) g;
     INSERT INTO author_post SELECT $M1, 4000 + g * 15, 9330000 + g FROM generate_series(0, 119) g;
     INSERT INTO author_post SELECT $M2, 4003 + g * 50, 9340000 + g FROM generate_series(0, 29) g;
     INSERT INTO $T SELECT $U_W, g * 10, 9350000 + g, $A0 + 1 FROM generate_series(1, 20) g" ||
    bail "loading test data failed"
rcli --scan --pattern 'httpmute:*' | while read -r k; do rcli del "$k" >/dev/null; done
}

# SQL's filtered feed and timeline of uid: what a walk must print.
mutes_of() { sql "SELECT coalesce(array_agg(author), '{}') FROM mutes WHERE uid = $1"; }
sql_feed() {
    sql "SELECT format('{\"author\":\"%s\",\"id\":\"%s\",\"score\":%s}', author, id, score)
           FROM $T WHERE uid = $1 AND author <> ALL('$(mutes_of "$1")'::bigint[])
          ORDER BY score DESC, id DESC"
}
sql_timeline() {
    sql "SELECT format('{\"author\":\"%s\",\"id\":\"%s\",\"score\":%s}', author, id, score)
           FROM (SELECT score, id, author FROM $T WHERE uid = $1
                 UNION SELECT score, id, author FROM author_post
                        WHERE author = ANY('{$MERGE}'::bigint[])) t
          WHERE author <> ALL('$(mutes_of "$1")'::bigint[])
          ORDER BY score DESC, id DESC"
}

# walk ROUTE UID LIMIT [MUTE_AFTER AUTHOR]: every page into $TMP/walk; WHY
# says what was wrong (a page not full before the end, a bad shape, a
# status). With MUTE_AFTER, AUTHOR is muted after that many pages.
walk() {
    local route=$1 uid=$2 limit=$3 after=${4:-0} author=${5:-} cursor='' q count keys out
    : >"$TMP/walk"
    PAGES=0 WHY=''
    while :; do
        q="limit=$limit"
        [[ -n $cursor ]] && q+="&cursor=$cursor"
        req GET "/users/$uid/$route?$q"
        [[ $STATUS == 200 ]] || { WHY="page $PAGES: status $STATUS: $BODY"; return 1; }
        PAGES=$((PAGES + 1))
        # One jget for the page: its keys, length and cursor, then its
        # items, a line each.
        out=$(j @keys items.@len next_cursor 'items.*') ||
            { WHY="page $PAGES: not JSON: $BODY"; return 1; }
        out+=$'\n'
        { IFS= read -r keys; IFS= read -r count; IFS= read -r cursor; } <<<"$out"
        [[ $keys == items,next_cursor,source,muted ]] || { WHY="page $PAGES: keys $keys"; return 1; }
        printf '%s' "${out#*$'\n'*$'\n'*$'\n'}" >>"$TMP/walk"
        [[ $cursor == null ]] && return 0
        [[ $count == "$limit" ]] || { WHY="page $PAGES: $count items of $limit, and more"; return 1; }
        ((PAGES < 5000)) || { WHY="runaway walk"; return 1; }
        if ((PAGES == after)); then
            req POST "/users/$uid/mutes/$author"
            [[ $STATUS == 201 ]] || { WHY="the mute: $STATUS $BODY"; return 1; }
        fi
    done
}
walk_is() {   # ROUTE UID LIMIT NAME
    local want
    if [[ $1 == timeline ]]; then want=$(sql_timeline "$2"); else want=$(sql_feed "$2"); fi
    if ! walk "$1" "$2" "$3"; then
        fail "$4" "$WHY"
    elif [[ $(cat "$TMP/walk") == "$want" ]]; then
        pass "$4 ($(wc -l <"$TMP/walk") items, $PAGES pages, all full)"
    else
        fail "$4" "walk and SQL differ:" "$(diff <(echo "$want") "$TMP/walk" | head -n 6 | tr '\n' '|')"
    fi
}

start_server() {   # SERVER extra args...; sets SPID, BASE
    local server=$1 i port=
    shift
    : >"$TMP/out"
    # shellcheck disable=SC2086  # the wrapper is a command line
    ${FEED_TEST_WRAPPER:-} "$BUILD/examples/$server" --port 0 --max-len $MAX_LEN \
        --max-page $MAX_PAGE --threads 2 --key-prefix httpmute "$@" >"$TMP/out" 2>"$TMP/log" &
    SPID=$!
    for ((i = 0; i < 600; i++)); do
        port=$(sed -n 's/^listening on \([0-9][0-9]*\)$/\1/p' "$TMP/out")
        [[ -n $port ]] && break
        kill -0 "$SPID" 2>/dev/null || break
        sleep 0.1
    done
    BASE=http://127.0.0.1:$port
    [[ -n $port ]]
}
stop_server() {
    kill -TERM "$SPID" 2>/dev/null
    wait "$SPID"
    local rc=$?
    SPID=
    return $rc
}

for server in feed_server feed_server_evhttp; do
    S="$server:"
    load_data

    # ---------------------------------------------------------- without the column
    start_server $server --table $T || bail "$server did not start: $(tail -n 5 "$TMP/log")"
    req GET "/users/$U_A/mutes"
    error_is 404 "$S GET mutes without --item-author-column"
    req POST "/users/$U_A/mutes/$A0"
    error_is 404 "$S POST a mute without --item-author-column"
    req GET "/users/$U_A/feed?limit=3"
    is "$STATUS $(j @keys)" "200 items,next_cursor,source" "$S without it the feed is unfiltered, as before"
    stop_server

    # ---------------------------------------------------------- with it
    start_server $server --table $T --item-author-column author --author-table author_post \
        --merge-authors $MERGE || bail "$server did not start: $(tail -n 5 "$TMP/log")"
    pass "$S started with --item-author-column author"

    req GET "/users/$U_A/mutes"
    is "$STATUS $BODY" "200 {\"uid\":\"$U_A\",\"mutes\":[]}" "$S GET mutes: none yet"
    for limit in 7 $MAX_PAGE; do
        walk_is feed $U_A "$limit" "$S feed, no mutes, pages of $limit: SQL, each item's author"
    done

    req POST "/users/$U_A/mutes/$((A0 + 3))"
    is "$STATUS $BODY" "201 {\"uid\":\"$U_A\",\"author\":\"$((A0 + 3))\",\"muted\":true}" "$S POST a mute: 201"
    req POST "/users/$U_A/mutes/$((A0 + 3))"
    is "$STATUS $(j muted)" "200 true" "$S POST it again: 200, nothing changes"
    is "$(sql "SELECT count(*) FROM mutes WHERE uid = $U_A")" 1 "$S one row in the mutes table"
    for limit in 1 7 $MAX_PAGE; do
        walk_is feed $U_A "$limit" "$S feed, one author muted, pages of $limit"
    done
    req POST "/users/$U_A/mutes/$((A0 + 7))"
    req GET "/users/$U_A/mutes"
    is "$(j 'mutes.*' | tr '\n' ' ')" "$((A0 + 3)) $((A0 + 7)) " "$S GET mutes: both, ascending"
    walk_is feed $U_A 9 "$S feed, two muted, pages of 9"
    walk_is timeline $U_A 9 "$S timeline, two feed authors muted, pages of 9"
    req POST "/users/$U_A/mutes/$M1"
    walk_is timeline $U_A 1 "$S timeline, merged author $M1 muted too, pages of 1"
    walk_is timeline $U_A $MAX_PAGE "$S timeline, pages of $MAX_PAGE"

    # Nine in ten of U_B's items by one author: the pages stay full.
    req POST "/users/$U_B/mutes/$A_LOUD"
    req GET "/users/$U_B/feed?limit=10"
    is "$(j items.@len) $(j 'items.*.author' | grep -c "^$A_LOUD$")" "10 0" \
        "$S 90% muted: page 1 still holds 10 items, none by the muted author"
    walk_is feed $U_B 10 "$S 90% muted, pages of 10"

    # Pull-to-refresh from where a page of 50 ended: its cursor names the
    # last item it examined before the first visible one it did not return,
    # so item 50 itself when the item after it is visible, else the last of
    # the hidden ones after it. The pulls give the visible items above that
    # cursor (49 or 50 of them), each once.
    req GET "/users/$U_A/feed?limit=50"
    cur=$(j next_cursor)
    s50=$(j items.49.score) i50=$(j items.49.id)
    next_hidden=$(sql "SELECT author = ANY('$(mutes_of $U_A)'::bigint[]) FROM $T WHERE uid = $U_A
                         AND (score, id) < ($s50, $i50) ORDER BY score DESC, id DESC LIMIT 1")
    want=$(sql_feed $U_A | head -n "$([[ $next_hidden == t ]] && echo 50 || echo 49)" | sort)
    got=''
    for ((i = 0; i < 40; i++)); do
        req GET "/users/$U_A/feed/newer?cursor=$cur&limit=7"
        [[ $STATUS == 200 ]] || break
        got+="$(j 'items.*')"$'\n'
        cur=$(j next_cursor)
        [[ $(j has_more) == true ]] || break
    done
    if [[ $(sed '/^$/d' <<<"$got" | sort) == "$want" ]]; then
        pass "$S newer with mutes: the $(wc -l <<<"$want") visible items above the cursor, each once"
    else
        fail "$S newer with mutes" "$(diff <(echo "$want") <(sed '/^$/d' <<<"$got" | sort) | head -n 6 | tr '\n' '|')"
    fi

    # A mute added in the middle of a walk: it counts from the next page,
    # nothing twice, nothing after it by the muted author.
    sql "DELETE FROM mutes WHERE uid = $U_A"
    if walk feed $U_A 8 3 $((A0 + 5)); then
        dup=$(sort "$TMP/walk" | uniq -d | wc -l)
        late=$(tail -n +25 "$TMP/walk" | grep -c "\"author\":\"$((A0 + 5))\"")
        all=$(sql "SELECT count(*) FROM $T WHERE uid = $U_A AND author <> $((A0 + 5))")
        early=$(head -n 24 "$TMP/walk" | grep -c "\"author\":\"$((A0 + 5))\"")
        is "$dup $late $(wc -l <"$TMP/walk")" "0 0 $((all + early))" \
            "$S a mute after page 3: no item twice, none of the author after it, all the rest"
    else
        fail "$S a mute in the middle of a walk" "$WHY"
    fi

    # Unmute.
    req DELETE "/users/$U_A/mutes/$((A0 + 5))"
    is "$STATUS $(j muted)" "200 false" "$S DELETE a mute: 200"
    req DELETE "/users/$U_A/mutes/$((A0 + 5))"
    error_is 404 "$S DELETE a mute that is not there"
    walk_is feed $U_A $MAX_PAGE "$S feed after the unmute: everything again"

    # Writes carry the author; a muted author's new item stays hidden.
    post POST "/users/$U_W/items" '{"id":9350100,"score":100000}'
    error_is 400 "$S POST an item without its author"
    post POST "/users/$U_W/items" "{\"id\":9350100,\"score\":100000,\"author\":\"$A_LOUD\"}"
    is "$STATUS $(sql "SELECT author FROM $T WHERE uid = $U_W AND id = 9350100")" "201 $A_LOUD" \
        "$S POST an item with its author: the row has it"
    post PUT "/users/$U_W/items/9350100" "{\"score\":100001,\"author\":\"$A_LOUD\"}"
    error_is 400 "$S PUT with an author (it never changes)"
    req GET "/users/$U_W/feed?limit=1"
    is "$(j 'items.0.id') $(j 'items.0.author')" "9350100 $A_LOUD" "$S the new item leads the feed, with its author"
    req POST "/users/$U_W/mutes/$A_LOUD"
    req GET "/users/$U_W/feed?limit=3"
    is "$(j 'items.*.id' | tr '\n' ' ')" "9350020 9350019 9350018 " "$S muted: the new item is gone, the page full"
    post POST "/items/9350200/fanout" "{\"score\":200000,\"uids\":[$U_W,$U_B]}"
    error_is 400 "$S fan-out without an author"
    post POST "/items/9350200/fanout" "{\"score\":200000,\"uids\":[$U_W,$U_B],\"author\":$((A0 + 2))}"
    is "$STATUS $(sql "SELECT string_agg(author::text, ',') FROM $T WHERE id = 9350200")" \
        "200 $((A0 + 2)),$((A0 + 2))" "$S fan-out with an author: every row has it"
    req GET "/users/$U_B/feed?limit=1"
    is "$(j 'items.0.id') $(j 'items.0.author')" "9350200 $((A0 + 2))" "$S the fanned-out item leads U_B's feed"

    # Bad input.
    req POST "/users/x/mutes/1";              error_is 400 "$S a bad uid"
    like "$(j error)" '^uid ' "$S   the message names the uid"
    req POST "/users/$U_A/mutes/-1";          error_is 400 "$S a bad author"
    req GET "/users/$U_A/mutes?limit=1";      error_is 400 "$S GET mutes with a query"
    req POST "/users/$U_A/mutes/1?x=1";       error_is 400 "$S POST a mute with a query"
    post POST "/users/$U_A/mutes/1" '{}';     error_is 400 "$S POST a mute with a body"
    req PUT "/users/$U_A/mutes/1";            error_is 405 "$S PUT a mute"
    req DELETE "/users/$U_A/mutes";           error_is 405 "$S DELETE the list"
    # At most 1000 mutes (FEED_FILTER_MAX_AUTHORS).
    sql "INSERT INTO mutes SELECT $U_C, g FROM generate_series(1, 1000) g"
    req POST "/users/$U_C/mutes/5000";        error_is 409 "$S the 1001st mute"
    req GET "/users/$U_C/feed?limit=5"
    is "$STATUS $(j muted)" "200 1000" "$S a feed read with 1000 mutes"

    stop_server
    verdict $? "$S exits 0 on SIGTERM"
done

echo "1..$n"
((failed == 0))
