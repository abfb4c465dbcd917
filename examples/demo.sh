#!/usr/bin/env bash
# examples/demo.sh -- the example feed service with sample data, for `make demo`.
#
#   examples/demo.sh start   start (or reuse) Redis + PostgreSQL in .demo/, load
#                            examples/sample_data.sql and (with sql/authors.sql)
#                            examples/sample_authors.sql once, (re)start
#                            feed_server (timelines merging authors 2001, 2002,
#                            2003) and feedcache-sync, walk through it;
#                            then, on a terminal, keep the service up until
#                            Enter or Ctrl-C; then stop everything it started
#   examples/demo.sh stop    stop feed_server, feedcache-sync and both servers
#                            (make demo-stop: after DEMO_KEEP=1, or a demo
#                            killed with SIGKILL)
#
# `make demo` installs the packages and builds first; run this directly only
# after `make`. Env: BUILD (default build), SERVER (threads, the default:
# feed_server on libmicrohttpd; evhttp: feed_server_evhttp on libevent's
# event loops; the same HTTP API and page), DEMO_PORT (HTTP port; default
# 8080, or any free port when 8080 is taken), DEMO_KEEP=1 (leave everything
# running in the background at the end, for make demo-stop).
# Everything lives in .demo/: the servers' data and logs (tools/servers.sh),
# feed_server.pid, feed_server.log, http.port. `rm -rf .demo` after a stop
# starts from scratch.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
DIR=.demo
case ${SERVER:-threads} in
threads | mhd | feed_server)
    SERVER=$BUILD/examples/feed_server OTHER=evhttp
    KIND="worker threads on libmicrohttpd, with feedcache's blocking API" ;;
evhttp | feed_server_evhttp)
    SERVER=$BUILD/examples/feed_server_evhttp OTHER=threads
    KIND="event loops on libevent's evhttp, with feedcache's asynchronous API" ;;
*) echo "demo: SERVER=$SERVER: say threads (the default) or evhttp" >&2; exit 2 ;;
esac
NAME=$(basename "$SERVER")
PIDFILE=$DIR/feed_server.pid

die() { echo "demo: $*" >&2; exit 1; }

server_pid() {   # the pid of our server (either one), if it runs
    local p comm
    p=$(cat "$PIDFILE" 2>/dev/null) || return 1
    comm=$(cat "/proc/$p/comm" 2>/dev/null)   # the kernel keeps 15 characters
    [[ -n $p && ( $comm == feed_server || $comm == feed_server_evh ) ]] && echo "$p"
}

stop_server() {
    local p i comm
    if p=$(server_pid); then
        comm=$(cat "/proc/$p/comm" 2>/dev/null)
        [[ $comm == feed_server_evh ]] && comm=feed_server_evhttp
        kill -TERM "$p" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            [[ -d /proc/$p && $(ps -o stat= -p "$p" 2>/dev/null) != Z* ]] || break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null || true
        echo "demo: stopped ${comm:-the server} (pid $p)"
    fi
    rm -f "$PIDFILE"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# ---------------------------------------------------------------- feedcache-sync
# Runs next to the service: it follows PostgreSQL's log, so writes made
# without a hook (psql below) reach the cache too. Log: .demo/feedcache-sync.log
SYNC=$BUILD/sync/feedcache-sync
SYNC_PIDFILE=$DIR/feedcache-sync.pid
sync_pid() {
    local p
    p=$(cat "$SYNC_PIDFILE" 2>/dev/null) || return 1
    [[ -n $p && $(cat "/proc/$p/comm" 2>/dev/null) == feedcache-sync ]] && echo "$p"
}
stop_sync() {
    local p i
    if p=$(sync_pid); then
        kill -TERM "$p" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do
            [[ -d /proc/$p && $(ps -o stat= -p "$p" 2>/dev/null) != Z* ]] || break
            sleep 0.1
        done
        kill -KILL "$p" 2>/dev/null || true
        echo "demo: stopped feedcache-sync (pid $p)"
    fi
    rm -f "$SYNC_PIDFILE"
}
start_sync() {
    stop_sync
    # It follows the authors' table too; a publication made by an earlier
    # demo, before there was one, gets it (feedcache-sync refuses otherwise).
    psql -XAtq -c "DO \$\$ BEGIN
        IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'feedcache') AND NOT EXISTS
           (SELECT 1 FROM pg_publication_tables WHERE pubname = 'feedcache' AND tablename = 'author_post')
        THEN ALTER PUBLICATION feedcache ADD TABLE author_post; END IF; END \$\$"
    setsid "$SYNC" --pg-conninfo "$FEED_PG_CONNINFO" --redis-host "$FEED_REDIS_HOST" \
        --redis-port "$FEED_REDIS_PORT" --author-table author_post \
        </dev/null >/dev/null 2>>"$DIR/feedcache-sync.log" &
    echo $! >"$SYNC_PIDFILE"
    for ((i = 0; i < 300; i++)); do   # its first run drops every copy once (a new slot)
        grep -q "following slot" "$DIR/feedcache-sync.log" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "demo: feedcache-sync did not start; see $DIR/feedcache-sync.log" >&2
}

stop_all() {
    stop_server
    stop_sync
    tools/servers.sh stop "$DIR"
    echo "demo: stopped Redis and PostgreSQL of $DIR/ (their data stays; rm -rf $DIR to drop it)"
}

case ${1:-} in
stop)
    stop_all
    exit 0
    ;;
start) ;;
*) die "usage: $0 start|stop" ;;
esac

[[ -x $SERVER && -x $BUILD/examples/jget ]] || die "$SERVER is missing: run make demo (or make) first"

# Whatever ends this script -- the end of the demo, Ctrl-C, SIGTERM, a
# failure -- stops every server it started: nothing is left running behind
# the user's back. Only DEMO_KEEP=1, at a successful end, leaves them up.
# (feed_server and feedcache-sync run under setsid, so a Ctrl-C reaches
# this script only, and they are stopped in order here.)
KEEP=${DEMO_KEEP:-0}
# shellcheck disable=SC2317  # invoked by the trap
on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ $KEEP == 1 && $rc == 0 ]]; then exit 0; fi
    echo
    stop_all || true
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- servers
# Ports in the caller's environment belong to some other servers.
unset FEED_REDIS_PORT FEED_PG_PORT FEED_REDIS_PASSWORD FEED_HTTP_PORT
echo "demo: starting Redis and PostgreSQL in $DIR/ (reused when already running)"
tools/servers.sh start "$DIR"
# shellcheck source=/dev/null
. "$DIR/env"

loaded() {   # rows of the last completed load, or nothing
    [[ $(psql -XAtqc "SELECT to_regclass('feedcache_demo') IS NOT NULL") == t ]] &&
        psql -XAtqc 'SELECT rows FROM feedcache_demo'
}
if rows=$(loaded) && [[ -n $rows ]]; then
    echo "demo: sample data already loaded ($rows rows)"
else
    echo "demo: loading examples/sample_data.sql (1,000 users, ~190,000 rows)..."
    PGOPTIONS='-c client_min_messages=warning' psql -Xq -f examples/sample_data.sql
    # A cache left from an earlier data set would not match this one.
    redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" flushdb >/dev/null
    echo "demo: loaded $(loaded) rows"
fi
# The authors' posts (read-time merge): the table, then the sample once.
PGOPTIONS='-c client_min_messages=warning' psql -Xq -f sql/authors.sql
if [[ $(psql -XAtqc "SELECT to_regclass('feedcache_demo_authors') IS NOT NULL") == t ]]; then
    echo "demo: sample authors already loaded ($(psql -XAtqc 'SELECT rows FROM feedcache_demo_authors') posts)"
else
    echo "demo: loading examples/sample_authors.sql (authors 2001, 2002, 2003)..."
    psql -Xq -f examples/sample_authors.sql
    redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" flushdb >/dev/null
    echo "demo: loaded $(psql -XAtqc 'SELECT rows FROM feedcache_demo_authors') posts"
fi
# Mutes: the feed rows' author column and the mutes table, then the authors
# of rows that have none (only those: a second run changes nothing).
PGOPTIONS='-c client_min_messages=warning' psql -Xq -f examples/mutes.sql
psql -Xq -f examples/sample_item_authors.sql

# ---------------------------------------------------------------- service
stop_server   # a second `make demo` restarts it with the binary just built
echo "demo: starting $NAME: $KIND (make demo SERVER=$OTHER runs the other server)"
port=${DEMO_PORT:-}
if [[ -z $port ]]; then
    port=$(cat "$DIR/http.port" 2>/dev/null || echo 8080)
    port_free "$port" || port=0
fi
: >"$DIR/feed_server.out"
# setsid: the service outlives this script and ignores the terminal's ^C.
MERGED=2001,2002,2003
setsid "$SERVER" --port "$port" --author-table author_post --merge-authors "$MERGED" \
    --item-author-column author </dev/null \
    >"$DIR/feed_server.out" 2>>"$DIR/feed_server.log" &
echo $! >"$PIDFILE"
for ((i = 0; i < 300; i++)); do
    port=$(sed -n 's/^listening on \([0-9][0-9]*\)$/\1/p' "$DIR/feed_server.out")
    [[ -n $port ]] && break
    server_pid >/dev/null || { tail -n 5 "$DIR/feed_server.log" >&2; die "$NAME did not start"; }
    sleep 0.1
done
[[ -n $port ]] || die "$NAME did not say which port it listens on"
echo "$port" >"$DIR/http.port"
[[ -x $SYNC ]] && start_sync
URL=http://127.0.0.1:$port
for ((i = 0; ; i++)); do   # 200 once a store answers; the walk wants both
    [[ $(curl -s "$URL/healthz") == *'"status":"ok"'* ]] && break
    ((i < 300)) || die "the service is not healthy after 30 s: $(curl -s "$URL/healthz")"
    sleep 0.1
done

# ---------------------------------------------------------------- the walk
# show 'COMMAND': print it as the user would type it, run it, print its
# output with long lines cut.
show() {
    printf '\n  $ %s\n' "$1"
    bash -c "$1" 2>&1 | cut -c1-400 | sed -e 's/^/  /' -e '/^  .\{398\}/s/$/ .../'
}
if [[ -t 1 ]]; then BOLD=$'\033[1m' PLAIN=$'\033[0m'; else BOLD='' PLAIN=''; fi
step() {   # title, then more lines
    printf '\n%s%s%s\n' "$BOLD" "$1" "$PLAIN"
    shift
    (($# == 0)) || printf '%s\n' "$@"
}
cursor_of='sed -n '\''s/.*"next_cursor":"\([^"]*\)".*/\1/p'\'''

cat <<EOF

================================================================================
 feedcache demo: $NAME at $URL   (pid $(server_pid), log $DIR/feed_server.log)
 The server: $KIND.
 In a browser: $URL/?uid=1   (user 1's feed, infinite scroll, live counters)
               $URL/?uid=1&view=timeline   (the same merged with authors $MERGED)
 Data: 1,000 users. User 1 has 100,000 items (ids are snowflakes above 2^53,
 8 items a minute share a score); users 900..999 have none. Each feed keeps its
 newest 1,000 items in one Redis sorted set in front of PostgreSQL. Authors
 2001, 2002, 2003 have too many followers to fan out to: their 6,708 posts sit
 in author_post, merged into every timeline when it is read.
================================================================================
EOF

# Drop the cached copies (and leases) of these numbers, readers' and
# authors' alike: their keys are feed:3:<tag>:{<n>}, the tag naming the table.
drop_copies() {
    local n k
    for n in "$@"; do
        for k in $(redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" --scan --pattern "feed:3:*:{$n}*"); do
            redis-cli -h "$FEED_REDIS_HOST" -p "$FEED_REDIS_PORT" del "$k" >/dev/null
        done
    done
}
drop_copies 1  # a cold start for step 1
step "1. Page 1 of user 1's feed." \
     "   Not cached yet: feedcache rebuilds it from PostgreSQL under a lease, \"source\":\"rebuild\"." \
     "   Ids are strings (they exceed 2^53); scores are exact JSON integers (ms)."
show "curl -s '$URL/users/1/feed?limit=3'"

step "2. The same page again: one Redis round trip, \"source\":\"cache\"."
show "curl -s '$URL/users/1/feed?limit=3'"

step "3. The next page: pass next_cursor back as cursor (an opaque token of the last item)."
show "C=\$(curl -s '$URL/users/1/feed?limit=3' | $cursor_of); curl -s \"$URL/users/1/feed?limit=3&cursor=\$C\""

step "4. Deep pages: past the 1,000 cached items a keyset query answers, \"source\":\"db\"."
show "C=; for i in 1 2 3 4 5 6 7 8 9 10; do C=\$(curl -s \"$URL/users/1/feed?limit=100\${C:+&cursor=\$C}\" | $cursor_of); done; curl -s \"$URL/users/1/feed?limit=3&cursor=\$C\""

now=$(date +%s%3N)
id=$(((now - 1288834974657) << 22))
step "5. Insert an item scored now (ms). The row is written in a PostgreSQL" \
     "   transaction, then feed_on_insert updates the cached feed; page 1 shows it first."
show "curl -s -X POST '$URL/users/1/items' -d '{\"id\":\"$id\",\"score\":$now,\"author\":3005}'"
show "curl -s '$URL/users/1/feed?limit=3'"

step "6. Delete it (the row, then feed_on_delete); page 1 is as before."
show "curl -s -X DELETE '$URL/users/1/items/$id'"
show "curl -s '$URL/users/1/feed?limit=3'"

drop_copies 1000 2001 2002 2003   # cold copies for step 7
step "7. A timeline: user 1000's feed merged, at read time, with the posts of the" \
     "   high-follower authors $MERGED (--merge-authors; they are never fanned out)." \
     "   Exactly SQL's UNION of feed_entry and author_post, newest first, each (score, id)" \
     "   once; one feed_page_merged reads every cached copy in one Redis round trip." \
     "   Here: user 1000's one item (1000001), then posts of 2002, 2001, 2003 seconds apart."
show "curl -s '$URL/users/1000/timeline?limit=5'"
show "C=\$(curl -s '$URL/users/1000/timeline?limit=5' | $cursor_of); curl -s \"$URL/users/1000/timeline?limit=5&cursor=\$C\""

now=$(date +%s%3N)
id=$((((now - 1288834974657) << 22) | 12))
step "8. Author 2002 posts: the row goes into author_post, then feed_author_on_insert" \
     "   updates the author's one cached copy, and every timeline that merges 2002 has it" \
     "   at once, user 1000's and user 1's alike (no write per follower). Then it is" \
     "   deleted (feed_author_on_delete)."
show "curl -s -X POST '$URL/authors/2002/posts' -d '{\"id\":\"$id\",\"score\":$now}'"
show "curl -s '$URL/users/1000/timeline?limit=2'; echo; curl -s '$URL/users/1/timeline?limit=2'"
show "curl -s -X DELETE '$URL/authors/2002/posts/$id'; echo; curl -s '$URL/users/1000/timeline?limit=2'"

psql -XAtqc "DELETE FROM mutes WHERE uid IN (1, 1000)" >/dev/null   # a walk from no mutes
authors_of="$BUILD/examples/jget items.@len 'items.*.author' | tr '\\n' ' '; echo"
step "9. Mutes. Every item says who wrote it (\"author\"; authors 3001..3008 take turns in" \
     "   user 1's feed). User 1 mutes 3001: the mute is a row of the mutes table, read on" \
     "   every feed and timeline request and passed to feed_page_filtered. The page of 8" \
     "   is still full, with no item of 3001 (shown: the item count, then each item's" \
     "   author), and its cursor skips nothing visible."
show "curl -s '$URL/users/1/feed?limit=8' | $authors_of"
show "curl -s -X POST '$URL/users/1/mutes/3001'"
show "curl -s '$URL/users/1/feed?limit=8' | $authors_of"
show "curl -s '$URL/users/1/feed?limit=3'"
step "   User 1000 mutes 2001, a merged author: its posts leave every page of user 1000's" \
     "   timeline (feed_page_merged_filtered does not even read its copy); unmuting brings" \
     "   them back."
show "curl -s '$URL/users/1000/timeline?limit=8' | $authors_of"
show "curl -s -X POST '$URL/users/1000/mutes/2001'; echo; curl -s '$URL/users/1000/mutes'"
show "curl -s '$URL/users/1000/timeline?limit=8' | $authors_of"
show "curl -s -X DELETE '$URL/users/1000/mutes/2001'; echo; curl -s -X DELETE '$URL/users/1/mutes/3001'"
show "curl -s '$URL/users/1000/timeline?limit=8' | $authors_of"

step "10. A user with no items: an empty page. It is cached too (an end marker):" \
     "   asked again, it comes from the cache."
show "curl -s '$URL/users/950/feed'"
show "curl -s '$URL/users/950/feed'"

step "11. Bad input gets a 4xx with a JSON message."
show "curl -s -w ' HTTP %{http_code}\\n' '$URL/users/1/feed?limit=0'"

step "12. What the library did, summed over the workers' handles (Prometheus text)."
show "curl -s '$URL/metrics' | grep -E '^feedcache_(pages|cache_pages|db_pages|rebuilds|sql_queries|redis_calls)_total'"

step "13. Health: whether Redis and PostgreSQL answer."
show "curl -s '$URL/healthz'"

if sync_pid >/dev/null; then
    now=$(date +%s%3N)
    id=$(((now - 1288834974657) << 22))
    rcli="redis-cli -h $FEED_REDIS_HOST -p $FEED_REDIS_PORT"
    step "14. A write made with psql alone, no hook: feedcache-sync (pid $(sync_pid)) reads it from" \
         "   PostgreSQL's log and drops user 2's cached copy (its key in Redis goes away);" \
         "   the next page rebuilds the copy with the new row, and the cache serves it."
    curl -s "$URL/users/2/feed?limit=2" >/dev/null   # cached before the write
    key=$($rcli --scan --pattern 'feed:3:*:{2}' | head -n1)   # user 2's copy
    show "curl -s '$URL/users/2/feed?limit=2'"
    show "psql -XAtqc 'INSERT INTO feed_entry (uid, score, id, author) VALUES (2, $now, $id, 3001)'"
    show "for i in \$(seq 300); do [ \"\$($rcli exists '$key')\" = 0 ] && break; sleep 0.1; done; $rcli exists '$key'"
    show "curl -s '$URL/users/2/feed?limit=2'"
    show "curl -s '$URL/users/2/feed?limit=2'"
    psql -XAtqc "DELETE FROM feed_entry WHERE uid = 2 AND id = $id" >/dev/null
fi

if [[ $KEEP == 1 ]]; then
    how="They keep running (DEMO_KEEP=1). Stop everything: make demo-stop"
elif [[ -t 0 ]]; then
    how="They run until you press Enter or Ctrl-C here; then everything stops."
else
    how="No terminal to wait on: everything stops now (DEMO_KEEP=1 keeps it running)."
fi
cat <<EOF

--------------------------------------------------------------------------------
 $NAME, feedcache-sync, Redis and PostgreSQL are up. Open the feed page:
   $URL/?uid=1    user 1's feed: scroll for more; each page is marked
                                  cache / rebuild / db, counters live on the right
   $URL/?uid=1&view=timeline   user 1's timeline (the feed/timeline switch is at the top)
 Also try:
   curl -s -X PUT    $URL/users/1/items/ID -d '{"score":123}'     new score
   curl -s -X POST   $URL/items/42/fanout -d '{"score":1,"uids":[2,3,4],"author":3002}'
   curl -s -X POST   $URL/users/1/mutes/3002                    mute an author
   tail -f $DIR/feed_server.log                                 one line per request
 Endpoints and options: examples/README.md.
 $how
--------------------------------------------------------------------------------
EOF
if [[ $KEEP != 1 && -t 0 ]]; then
    read -r _ || true
fi
exit 0
