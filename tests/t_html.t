#!/usr/bin/env bash
# t_html.t -- the example service's HTML page (GET /) in a real browser:
# headless Chromium loads it, scrolls to the end of a feed (?autoscroll=1
# makes the page load every page itself), and the DOM it dumps is checked
# against SQL: every id, in order, each page marked with where it came from,
# the counters panel filled from /metrics; then the same for a timeline
# (?view=timeline: the feed merged with the authors of --merge-authors),
# checked against SQL's UNION. Screenshots are saved to
# $BUILD/artifacts/feed.png and $BUILD/artifacts/feed_timeline.png.
#
# Needs: chromium (tools/deps.sh), curl, psql, redis-cli, $BUILD/examples/feed_server.
# FEED_HTTP_SERVER names another server of the same page and API to check
# instead, and FEED_HTML_SHOT the screenshot's file name (t_html_evhttp.t).
# Data: uids 7100000..7199999 only.
set -uo pipefail

BUILD=${BUILD:-build}
SERVER=${FEED_HTTP_SERVER:-$BUILD/examples/feed_server}
ART=$BUILD/artifacts
SHOT=$ART/${FEED_HTML_SHOT:-feed.png}

# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"

for v in FEED_REDIS_HOST FEED_REDIS_PORT FEED_PG_CONNINFO; do
    [[ -n ${!v:-} ]] || bail "$v is not set: run through tests/run.sh"
done
[[ -x $SERVER ]] || bail "$SERVER missing: run make"
CHROMIUM=$(command -v chromium || command -v chromium-browser) ||
    { echo "1..0 # SKIP chromium is not installed (tools/deps.sh installs it)"; exit 0; }

TMP=$(mktemp -d -t feedcache-html.XXXXXX)
SPID=
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    [[ -n $SPID ]] && kill -KILL "$SPID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
sql() { psql "$FEED_PG_CONNINFO" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
rcli() { redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" "$@"; }

# chrome URL ARGS...: headless Chromium on URL; virtual time lets the page's
# fetches and timers run to the end without waiting in real time.
chrome() {
    local url=$1
    shift
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$TMP/profile" \
        --virtual-time-budget=20000 "$@" "$url" 2>>"$TMP/chromium.log"
}

U_LONG=7100001     # 137 rows with ties, past max_len
U_BIG=7100002      # ids above 2^53
U_TL=7100003       # a timeline: 40 rows, merged with
A_MANY=7100011     #   60 posts tied with them (9 also in U_TL's feed)
A_FEW=7100012      #   and 5 posts above them
sql "DELETE FROM feed_entry WHERE uid BETWEEN 7100000 AND 7199999;
     DELETE FROM author_post WHERE author BETWEEN 7100000 AND 7199999;
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_TL, 1700000000000 + (g / 2) * 60000, 7110000 + g FROM generate_series(1, 40) g;
     INSERT INTO author_post (author, score, id)
     SELECT $A_MANY, 1700000000000 + (g / 3) * 60000, 7120000 + g FROM generate_series(1, 60) g;
     INSERT INTO author_post (author, score, id)
     SELECT $A_FEW, 1800000000000 + g, 7130000 + g FROM generate_series(1, 5) g;
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_TL, score, id FROM author_post WHERE author = $A_MANY AND id % 7 = 0;
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_LONG, 1700000000000 + (g / 3) * 60000, (g::bigint * 2654435761) % 4294967296
       FROM generate_series(1, 137) g;
     INSERT INTO feed_entry (uid, score, id)
     SELECT $U_BIG, 1700000000000 + g, 9007199254740993 + g * 1000003 FROM generate_series(1, 12) g" ||
    bail "loading test data failed"
rcli del "$(fkey "$U_LONG")" "$(fkey "$U_LONG" :lease)" "$(fkey "$U_BIG")" "$(fkey "$U_TL")" >/dev/null
rcli del "$(akey "$A_MANY")" "$(akey "$A_FEW")" >/dev/null

# The sources the page must show (rebuild, cache, then db) are what the
# service answers when Redis replies within redis_timeout_ms; the default
# 250 ms is within reach of a loaded machine (a full make check next to
# Chromium: single requests of 110 ms seen), and one late reply turns a page
# into "db" (and the next ones too, for retry_ms). Nothing here stops
# Redis, so give it a bound that only a broken server misses.
: >"$TMP/out"
"$SERVER" --port 0 --max-len 25 --max-page 50 --threads 2 --redis-timeout 10000 --quiet \
    --author-table author_post --merge-authors "$A_MANY,$A_FEW" \
    >"$TMP/out" 2>"$TMP/log" &
SPID=$!
for ((i = 0; i < 300; i++)); do
    PORT=$(sed -n 's/^listening on \([0-9][0-9]*\)$/\1/p' "$TMP/out")
    [[ -n $PORT ]] && break
    sleep 0.1
done
[[ -n $PORT ]] || bail "feed_server did not start: $(tail -n 3 "$TMP/log")"
BASE=http://127.0.0.1:$PORT

# ---------------------------------------------------------------- scroll to the end
chrome "$BASE/?uid=$U_LONG&limit=10&autoscroll=1" --dump-dom >"$TMP/dom.html"
[[ -s $TMP/dom.html ]] || bail "chromium dumped no DOM: $(tail -n 3 "$TMP/chromium.log")"
pass "Chromium loaded the page and dumped its DOM"
body=$(grep -o '<body[^>]*>' "$TMP/dom.html")
if [[ $body =~ data-scrolled=\"([0-9]+)\" && ${BASH_REMATCH[1]} -gt 1000 && $body == *'data-done="1"'* ]]; then
    pass "the page scrolled to the end of the feed (${BASH_REMATCH[1]} px down)"
else
    fail "the page scrolled to the end of the feed" "body: $body"
fi
ids() { grep -o 'data-id="[0-9]*"' "$1" | sed 's/data-id="\(.*\)"/\1/'; }
# ids_are FILE QUERY NAME: the ids the DOM in FILE shows are QUERY's, in order.
ids_are() {
    local want got
    want=$(sql "$2")
    got=$(ids "$1")
    if [[ $got == "$want" ]]; then
        pass "$3 ($(wc -l <<<"$got") items)"
    else
        fail "$3" "$(diff <(echo "$want") <(echo "$got") | head -n 6 | tr '\n' '|')"
    fi
}
ids_are "$TMP/dom.html" "SELECT id FROM feed_entry WHERE uid = $U_LONG ORDER BY score DESC, id DESC" \
    "the ids it shows are the feed in SQL, in order"
scores=$(grep -o 'data-score="[-0-9]*"' "$TMP/dom.html" | sed 's/data-score="\(.*\)"/\1/')
is "$scores" "$(sql "SELECT score FROM feed_entry WHERE uid = $U_LONG ORDER BY score DESC, id DESC")" \
    "  with their scores"
# 137 items in pages of 10 with 25 cached: page 1 rebuilds the cold feed,
# page 2 is cut from the cache, the rest need SQL.
sources=$(grep -o 'data-source="[a-z]*"' "$TMP/dom.html" | sed 's/data-source="\(.*\)"/\1/' | tr '\n' ' ')
is "$sources" "rebuild cache $(printf 'db %.0s' {1..12})" \
    "each of the 14 pages is marked with its source: rebuild, cache, then db"
# Each page's line shows the server's time (its Server-Timing header) apart
# from the browser's round trip, which a loaded browser makes far longer.
timed=$(grep -oE 'items, server [0-9]+\.[0-9] ms, round trip [0-9]+ ms' "$TMP/dom.html" | wc -l)
is "$timed" 14 "  each page's line shows the server's time apart from the round trip"
like_status=$(grep -o 'id="status"[^<]*' "$TMP/dom.html")
is "$like_status" 'id="status" class="">end of the feed: 137 items in 14 pages' "  and the status line says so"
fields=$(sed -n '/^typedef struct feed_stats {/,/^} feed_stats;/s/^ *uint64_t *\([a-z_]*\);.*/\1/p' lib/feedcache.h)
panel=$(grep -o 'data-counter="[a-z_ ]*"' "$TMP/dom.html" | sed 's/data-counter="\(.*\)"/\1/')
missing=
for k in $fields; do grep -qx "$k" <<<"$panel" || missing+="$k "; done
is "$missing" "" "the counters panel lists every feed_stats counter (from /metrics)"

like "$(grep -o '<a id="v-timeline"[^>]*>' "$TMP/dom.html")" "href=\"/\\?uid=$U_LONG&amp;limit=10&amp;view=timeline\"" \
    "a visible switch to the timeline of the same user, page size kept"
like "$(grep -o '<a id="v-feed"[^>]*>' "$TMP/dom.html")" 'class="on"' "  the feed marked as the view shown"

# ---------------------------------------------------------------- a timeline
chrome "$BASE/?uid=$U_TL&limit=10&view=timeline&autoscroll=1" --dump-dom >"$TMP/tl.html"
ids_are "$TMP/tl.html" "SELECT id FROM (SELECT score, id FROM feed_entry WHERE uid = $U_TL
              UNION SELECT score, id FROM author_post WHERE author IN ($A_MANY, $A_FEW)) t
            ORDER BY score DESC, id DESC" \
    "?view=timeline: the ids shown are SQL's UNION of the feed and the authors' posts, in order"
got=$(ids "$TMP/tl.html")
is "$(grep -o 'data-score="[-0-9]*"' "$TMP/tl.html" | sed 's/data-score="\(.*\)"/\1/')" \
    "$(sql "SELECT score FROM (SELECT score, id FROM feed_entry WHERE uid = $U_TL
              UNION SELECT score, id FROM author_post WHERE author IN ($A_MANY, $A_FEW)) t
            ORDER BY score DESC, id DESC")" "  with their scores"
is "$(wc -l <<<"$got") $(sort <<<"$got" | uniq -d | wc -l)" "105 0" \
    "  105 items (49 + 60 + 5, less the 9 pairs in both tables), none twice"
sources=$(grep -o 'data-source="[a-z]*"' "$TMP/tl.html" | sed 's/data-source="\(.*\)"/\1/' | tr '\n' ' ')
like "$sources" '^rebuild (cache )+(db )+$' "  each page marked with its source: rebuild, cache, then db ($sources)"
is "$(grep -o 'data-source=' "$TMP/tl.html" | wc -l)" 11 "  11 pages"
is "$(grep -o 'id="status"[^<]*' "$TMP/tl.html")" 'id="status" class="">end of the timeline: 105 items in 11 pages' \
    "  and the status line says so"
like "$(grep -o '<a id="v-timeline"[^>]*>' "$TMP/tl.html")" 'class="on"' "  the switch marks the timeline as the view shown"
like "$(grep -o '<body[^>]*>' "$TMP/tl.html")" 'data-view="timeline"' "  (body data-view)"

# ---------------------------------------------------------------- big ids
chrome "$BASE/?uid=$U_BIG&limit=5&autoscroll=1" --dump-dom >"$TMP/big.html"
is "$(ids "$TMP/big.html")" "$(sql "SELECT id FROM feed_entry WHERE uid = $U_BIG ORDER BY score DESC, id DESC")" \
    "ids above 2^53 are shown exactly (strings, never rounded)"

# ---------------------------------------------------------------- errors shown
chrome "$BASE/?uid=$U_LONG&limit=9999" --dump-dom >"$TMP/err.html"
is "$(grep -c 'id="status" class="error">could not load: 400' "$TMP/err.html")" 1 \
    "a limit the server refuses: the page shows the server's 400"

# ---------------------------------------------------------------- screenshot
mkdir -p "$ART"
rm -f "$SHOT"
rcli del "$(fkey "$U_LONG")" >/dev/null
chrome "$BASE/?uid=$U_LONG&limit=10" --window-size=1100,1500 --screenshot="$SHOT" >/dev/null
if [[ -s $SHOT && $(head -c 8 "$SHOT" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; then
    pass "a screenshot: $SHOT ($(stat -c %s "$SHOT") bytes)"
else
    fail "a screenshot in $SHOT" "$(tail -n 3 "$TMP/chromium.log")"
fi

TL_SHOT=${SHOT%.png}_timeline.png
rm -f "$TL_SHOT"
rcli del "$(fkey "$U_TL")" "$(akey "$A_MANY")" "$(akey "$A_FEW")" >/dev/null
chrome "$BASE/?uid=$U_TL&limit=10&view=timeline" --window-size=1100,1500 --screenshot="$TL_SHOT" >/dev/null
if [[ -s $TL_SHOT && $(head -c 8 "$TL_SHOT" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; then
    pass "a screenshot of the timeline: $TL_SHOT ($(stat -c %s "$TL_SHOT") bytes)"
else
    fail "a screenshot in $TL_SHOT" "$(tail -n 3 "$TMP/chromium.log")"
fi

kill -TERM "$SPID" && wait "$SPID"
is "$?" 0 "the server stops cleanly"
SPID=
sql "DELETE FROM feed_entry WHERE uid BETWEEN 7100000 AND 7199999;
     DELETE FROM author_post WHERE author BETWEEN 7100000 AND 7199999" >/dev/null
echo "1..$n"
((failed == 0))
