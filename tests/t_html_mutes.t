#!/usr/bin/env bash
# t_html_mutes.t -- muting an author from the example service's page, in
# headless Chromium, on both servers (feed_server, feed_server_evhttp)
# started with --item-author-column: ?mute_first=1 makes the page mute the
# author of the first item once page 1 is in, as a click on its "mute"
# button would; the page then reads the feed again from page 1, and with
# ?autoscroll=1 to its end. The DOM must show: a notice naming the muted
# author with page 1 refilled to a full page; every page but the last full;
# the ids SQL returns with the mute in its WHERE clause, in order, none by
# the muted author; the mute in the panel; the mutes table holding it. The
# same for a timeline. Screenshots: $BUILD/artifacts/feed_mutes.png and
# $BUILD/artifacts/feed_evhttp_mutes.png (the notice and the refilled page 1).
#
# Its own feed table (html_mute_entry), key prefix and ids (94xxxxx).
set -uo pipefail

BUILD=${BUILD:-build}
ART=$BUILD/artifacts

# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"

for v in FEED_REDIS_HOST FEED_REDIS_PORT FEED_PG_CONNINFO; do
    [[ -n ${!v:-} ]] || bail "$v is not set: run through tests/run.sh"
done
for s in feed_server feed_server_evhttp; do
    [[ -x $BUILD/examples/$s ]] || bail "$BUILD/examples/$s missing: run make"
done
CHROMIUM=$(command -v chromium || command -v chromium-browser) ||
    { echo "1..0 # SKIP chromium is not installed (tools/deps.sh installs it)"; exit 0; }

TMP=$(mktemp -d -t feedcache-html-mutes.XXXXXX)
SPID=
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    [[ -n $SPID ]] && kill -KILL "$SPID" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT
sql() { PGOPTIONS='-c client_min_messages=warning' psql "$FEED_PG_CONNINFO" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
rcli() { redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" "$@"; }
chrome() {
    local url=$1
    shift
    timeout 120 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --disable-dev-shm-usage --hide-scrollbars --user-data-dir="$TMP/profile" \
        --virtual-time-budget=20000 "$@" "$url" 2>>"$TMP/chromium.log"
}

T=html_mute_entry
U=9400001          # 137 items, authors 9400101..9400108 in turn, ties in threes
M=9400201          # merged into the timeline: 40 posts
LIMIT=10
load_data() {
    sql "CREATE TABLE IF NOT EXISTS $T (uid bigint NOT NULL, score bigint NOT NULL,
           id bigint NOT NULL, author bigint, PRIMARY KEY (uid, id));
         CREATE INDEX IF NOT EXISTS ${T}_page ON $T (uid, score DESC, id DESC);
         CREATE TABLE IF NOT EXISTS mutes (uid bigint NOT NULL, author bigint NOT NULL,
           PRIMARY KEY (uid, author));
         CREATE TABLE IF NOT EXISTS author_post (author bigint NOT NULL, score bigint NOT NULL,
           id bigint NOT NULL, PRIMARY KEY (author, id));
         DELETE FROM $T WHERE uid BETWEEN 9400000 AND 9499999;
         DELETE FROM mutes WHERE uid BETWEEN 9400000 AND 9499999;
         DELETE FROM author_post WHERE author BETWEEN 9400000 AND 9499999;
         INSERT INTO $T SELECT $U, 1700000000000 + (g / 3) * 60000, 9410000 + g,
                               9400101 + g % 8 FROM generate_series(1, 137) g;
         INSERT INTO author_post SELECT $M, 1700000000000 + g * 170000 + 7, 9420000 + g
                                   FROM generate_series(1, 40) g" || bail "loading test data failed"
    rcli --scan --pattern 'htmlmute:*' | while read -r k; do rcli del "$k" >/dev/null; done
}

# The filtered feed and timeline in SQL, ids in order, with uid's mutes.
sql_ids() {   # feed|timeline
    local src="SELECT score, id, author FROM $T WHERE uid = $U"
    [[ $1 == timeline ]] && src+=" UNION SELECT score, id, author FROM author_post WHERE author = $M"
    sql "SELECT id FROM ($src) t
          WHERE author <> ALL(ARRAY(SELECT author FROM mutes WHERE uid = $U))
          ORDER BY score DESC, id DESC"
}

# check FILE VIEW NAME: the DOM after a mute from the page.
check() {
    local f=$1 view=$2 name=$3 muted want got markers
    muted=$(sed -n 's/.*id="notice"[^>]*data-author="\([0-9]*\)".*/\1/p' "$f" | head -n 1)
    if [[ -z $muted ]]; then
        fail "$name: the notice of a mute" "$(grep -o '<p id="notice"[^<]*' "$f")"
        return
    fi
    is "$(sql "SELECT string_agg(author::text, ',') FROM mutes WHERE uid = $U")" "$muted" \
        "$name: the page muted the first item's author ($muted): one row in mutes"
    like "$(grep -o '<p id="notice"[^<]*' "$f")" \
        "data-refill=\"$LIMIT\".*>Muted $muted: the $view was read again; page 1 holds $LIMIT of $LIMIT items \\(full\\), 0 by $muted; 1 author muted\\." \
        "$name: the notice says page 1 refilled to $LIMIT items, none by $muted"
    want=$(sql_ids "$view")
    got=$(grep -o 'data-id="[0-9]*"' "$f" | sed 's/data-id="\(.*\)"/\1/')
    if [[ $got == "$want" ]]; then
        pass "$name: the ids shown are SQL's with the mute in its WHERE clause ($(wc -l <<<"$got") items)"
    else
        fail "$name: the ids shown are SQL's" "$(diff <(echo "$want") <(echo "$got") | head -n 6 | tr '\n' '|')"
    fi
    is "$(grep -c "data-author=\"$muted\"" <<<"$(grep -o 'class="item[^>]*>' "$f")")" 0 \
        "$name: no item by $muted"
    markers=$(grep -o 'data-source="[a-z]*"><span>page [0-9]*</span><span class="src [a-z]*">[a-z]*</span><span>[0-9]* items' "$f" |
              sed 's/.*<span>\([0-9]*\) items$/\1/' | tr '\n' ' ')
    like "$markers" "^($LIMIT )+[0-9]+ $" "$name: every page but the last holds $LIMIT items ($markers)"
    like "$(grep -o 'id="mutes".*</ul>' "$f")" "data-muted=\"$muted\"" "$name: the panel lists the mute"
}

mkdir -p "$ART"
for server in feed_server feed_server_evhttp; do
    S="$server:"
    load_data
    : >"$TMP/out"
    "$BUILD/examples/$server" --port 0 --max-len 25 --max-page 50 --threads 2 --quiet \
        --redis-timeout 10000 --key-prefix htmlmute --table $T --item-author-column author \
        --author-table author_post --merge-authors $M >"$TMP/out" 2>"$TMP/log" &
    SPID=$!
    PORT=
    for ((i = 0; i < 300; i++)); do
        PORT=$(sed -n 's/^listening on \([0-9][0-9]*\)$/\1/p' "$TMP/out")
        [[ -n $PORT ]] && break
        sleep 0.1
    done
    [[ -n $PORT ]] || bail "$server did not start: $(tail -n 3 "$TMP/log")"
    BASE=http://127.0.0.1:$PORT

    chrome "$BASE/?uid=$U&limit=$LIMIT&mute_first=1&autoscroll=1" --dump-dom >"$TMP/dom.html"
    [[ -s $TMP/dom.html ]] || bail "chromium dumped no DOM: $(tail -n 3 "$TMP/chromium.log")"
    like "$(grep -o '<body[^>]*>' "$TMP/dom.html")" 'data-done="1"' "$S the page walked the feed to its end after the mute"
    check "$TMP/dom.html" feed "$S feed"

    sql "DELETE FROM mutes WHERE uid = $U"
    chrome "$BASE/?uid=$U&limit=$LIMIT&view=timeline&mute_first=1&autoscroll=1" --dump-dom >"$TMP/tl.html"
    check "$TMP/tl.html" timeline "$S timeline"

    shot=$ART/$([[ $server == feed_server ]] && echo feed_mutes.png || echo feed_evhttp_mutes.png)
    rm -f "$shot"
    sql "DELETE FROM mutes WHERE uid = $U"
    chrome "$BASE/?uid=$U&limit=$LIMIT&mute_first=1" --window-size=1100,1100 --screenshot="$shot" >/dev/null
    if [[ -s $shot && $(head -c 8 "$shot" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]]; then
        pass "$S a screenshot after the mute: $shot ($(stat -c %s "$shot") bytes)"
    else
        fail "$S a screenshot in $shot" "$(tail -n 3 "$TMP/chromium.log")"
    fi

    kill -TERM "$SPID" && wait "$SPID"
    is "$?" 0 "$S the server stops cleanly"
    SPID=
done

echo "1..$n"
((failed == 0))
