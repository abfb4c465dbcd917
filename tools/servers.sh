#!/usr/bin/env bash
# Throwaway Redis + PostgreSQL on loopback, everything inside one folder.
#
#   tools/servers.sh start DIR    start (or reuse) both; writes DIR/env to source
#   tools/servers.sh stop DIR     stop both; never fails
#   tools/servers.sh status DIR   exit 0 iff both are up
#   fault injection (each blocks until done):
#     redis-stop | redis-start | redis-freeze | redis-thaw | redis-pid DIR
#     pg-stop | pg-start DIR
#
# Layout of DIR: redis.conf redis.port redis.pid redis.log redis/   (Redis)
#                pg/ pg.port pg.log sock/                          (PostgreSQL)
#                env
# Ports: FEED_REDIS_PORT / FEED_PG_PORT choose them for a fresh DIR, otherwise
# free ones below the ephemeral range are picked at random; a restart always
# reuses the DIR's port.
set -euo pipefail

die() { echo "servers.sh: $*" >&2; exit 1; }

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)

cmd=${1:-}
[[ -n $cmd && -n ${2:-} ]] || die "usage: $0 start|stop|status|redis-stop|redis-start|redis-freeze|redis-thaw|redis-pid|pg-stop|pg-start DIR"
if [[ ! -d $2 ]]; then
    case $cmd in
    start) mkdir -p "$2" ;;
    stop) exit 0 ;;   # nothing there, nothing to stop
    *) die "no such folder: $2" ;;
    esac
fi
D=$(cd "$2" && pwd)

# Overrides that came from sourcing some other DIR/env are not the user's
# choice: they name ports that other servers are already using.
if [[ -n ${FEED_SERVERS_DIR:-} && ${FEED_SERVERS_DIR} != "$D" ]]; then
    unset FEED_REDIS_PORT FEED_PG_PORT
fi

PGBIN=$(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V | tail -n1)
[[ -x $PGBIN/pg_ctl ]] || die "PostgreSQL server binaries not found (run tools/deps.sh)"

# PostgreSQL refuses to run as root: run its tools as the postgres user then.
if [[ $(id -u) -eq 0 ]]; then
    as_pg() { runuser -u postgres -- "$@"; }
else
    as_pg() { "$@"; }
fi

# A pid counts as alive unless gone or a zombie (PID 1 in containers may
# never reap our daemonized children).
alive() {
    local st
    [[ -n ${1:-} ]] || return 1
    st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ $st != Z* ]]
}
wait_gone() {  # pid: up to ~10 s
    local i
    for ((i = 0; i < 200; i++)); do alive "$1" || return 0; sleep 0.05; done
    return 1
}

port_free() {  # no socket on it in any state, and nothing accepting
    ! ss -Htan "sport = :$1" 2>/dev/null | grep -q . &&
        ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
# Random ports below the kernel's ephemeral range: above it, any outgoing
# connection (the tests' own) may take the port between our check and the
# server's bind.
pick_port() {  # avoid: a port already chosen for the other server
    local p i low
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    ((low > 12000)) || low=32768
    for ((i = 0; i < 100; i++)); do
        p=$((10000 + (RANDOM * 32768 + RANDOM) % (low - 10000)))
        [[ $p != "${1:-}" ]] && port_free "$p" && { echo "$p"; return; }
    done
    die "no free loopback port found"
}

# ---------------------------------------------------------------- Redis
redis_port() { cat "$D/redis.port" 2>/dev/null; }
redis_pid() {
    local p
    p=$(cat "$D/redis.pid" 2>/dev/null) || return 1
    # also guard against the pid having been reused by something else
    alive "$p" && [[ $(cat "/proc/$p/comm" 2>/dev/null) == redis-server* ]] && echo "$p"
}
redis_ping() { [[ $(timeout 1 redis-cli -h 127.0.0.1 -p "$(redis_port)" ping 2>/dev/null) == PONG ]]; }

redis_launch() {  # from DIR/redis.conf, wait until it answers PING
    local end=$((SECONDS + 10))
    rm -f "$D/redis.pid"
    redis-server "$D/redis.conf" >>"$D/redis.log" 2>&1 </dev/null || true
    while ((SECONDS < end)); do redis_ping && return 0; sleep 0.1; done
    echo "servers.sh: redis-server on port $(redis_port) did not answer PING in 10 s; log tail:" >&2
    tail -n 20 "$D/redis.log" >&2
    return 1
}

redis_start() {
    if redis_pid >/dev/null; then return 0; fi
    if [[ ! -f $D/redis.conf ]]; then
        local port=${FEED_REDIS_PORT:-}
        if [[ -n $port ]]; then
            port_free "$port" || die "Redis port $port (FEED_REDIS_PORT) is in use"
        else
            port=$(pick_port "$(cat "$D/pg.port" 2>/dev/null)")
        fi
        mkdir -p "$D/redis"
        echo "$port" >"$D/redis.port"
        cat >"$D/redis.conf" <<EOC
bind 127.0.0.1
port $port
daemonize yes
pidfile $D/redis.pid
logfile $D/redis.log
dir $D/redis
save ""
appendonly no
EOC
    fi
    redis_launch
}

redis_stop() {  # graceful-ish; used by `stop`
    local p
    p=$(redis_pid) || { rm -f "$D/redis.pid"; return 0; }
    kill -CONT "$p" 2>/dev/null || true   # it may be frozen
    kill -TERM "$p" 2>/dev/null || true   # no save configured, so no dump
    wait_gone "$p" || { kill -KILL "$p" 2>/dev/null || true; wait_gone "$p" || true; }
    rm -f "$D/redis.pid"
}

# ---------------------------------------------------------------- PostgreSQL
pg_port() { cat "$D/pg.port" 2>/dev/null; }
pg_running() {
    local p
    p=$(head -n1 "$D/pg/postmaster.pid" 2>/dev/null) || return 1
    alive "$p"
}
psql_() {  # psql against the throwaway server as superuser; extra args follow
    PGOPTIONS='-c client_min_messages=warning' \
        psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(pg_port)" -U postgres "$@"
}

pg_launch() {
    if ! as_pg "$PGBIN/pg_ctl" start -w -t 60 -D "$D/pg" -l "$D/pg.log" >/dev/null; then
        echo "servers.sh: PostgreSQL on port $(pg_port) did not start; log tail:" >&2
        tail -n 20 "$D/pg.log" >&2
        return 1
    fi
}

pg_start() {
    if pg_running; then return 0; fi
    if [[ -f $D/pg/PG_VERSION ]]; then pg_launch; return; fi

    local port=${FEED_PG_PORT:-} f
    if [[ -n $port ]]; then
        port_free "$port" || die "PostgreSQL port $port (FEED_PG_PORT) is in use"
    else
        port=$(pick_port "$(redis_port)")
    fi
    echo "$port" >"$D/pg.port"
    rm -rf "$D/pg"
    mkdir -p "$D/pg" "$D/sock"
    touch "$D/pg.log"
    if [[ $(id -u) -eq 0 ]]; then
        # mktemp -d makes 0700 folders; postgres must be able to get inside.
        chmod 0755 "$D"
        chown postgres: "$D/pg" "$D/sock" "$D/pg.log"
        runuser -u postgres -- test -x "$D" ||
            die "user postgres cannot reach $D (a parent folder is not world-searchable)"
    fi
    as_pg "$PGBIN/initdb" -D "$D/pg" -U postgres -A trust -E UTF8 --locale=C \
        --no-sync >"$D/initdb.log" 2>&1 ||
        { cat "$D/initdb.log" >&2; die "initdb failed"; }
    # Throwaway cluster: durability off for speed.
    cat >>"$D/pg/postgresql.conf" <<EOC
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$D/sock'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOC
    pg_launch
    psql_ -d postgres -c 'CREATE DATABASE feedcache'
    for f in "$REPO"/sql/*.sql; do    # glob order is sorted
        [[ -e $f ]] || continue
        psql_ -d feedcache -f "$f" || die "loading $f failed"
    done
}

pg_stop() {  # mode: fast | immediate
    pg_running || return 0
    as_pg "$PGBIN/pg_ctl" stop -w -t 30 -m "$1" -D "$D/pg" >/dev/null 2>&1 ||
        as_pg "$PGBIN/pg_ctl" stop -w -t 30 -m immediate -D "$D/pg" >/dev/null 2>&1 || true
    # Wait for the postmaster itself (a zombie counts as gone).
    local p
    p=$(head -n1 "$D/pg/postmaster.pid" 2>/dev/null) || return 0
    wait_gone "$p" || true
}

# ---------------------------------------------------------------- env file
write_env() {
    local rp pp
    rp=$(redis_port) pp=$(pg_port)
    cat >"$D/env.tmp" <<EOE
# Generated by tools/servers.sh start; source it.
export FEED_REDIS_HOST=127.0.0.1
export FEED_REDIS_PORT=$rp
export FEED_PG_CONNINFO="host=127.0.0.1 port=$pp user=postgres dbname=feedcache"
export PGHOST=127.0.0.1
export PGPORT=$pp
export PGUSER=postgres
export PGDATABASE=feedcache
export FEED_SERVERS_DIR="$D"
export FEED_SERVERS="$SELF"
EOE
    mv "$D/env.tmp" "$D/env"
}

case $cmd in
start)
    redis_start
    pg_start
    write_env
    ;;
stop)
    redis_stop || true
    pg_stop fast || true
    ;;
status)
    rc=0
    if p=$(redis_pid); then echo "redis: running (pid $p, port $(redis_port))"; else echo "redis: stopped"; rc=1; fi
    if pg_running; then echo "postgres: running (port $(pg_port))"; else echo "postgres: stopped"; rc=1; fi
    exit $rc
    ;;
redis-stop)  # crash: SIGKILL, no shutdown
    if p=$(redis_pid); then
        kill -KILL "$p" 2>/dev/null || true
        wait_gone "$p" || die "redis pid $p did not die"
    fi
    rm -f "$D/redis.pid"
    ;;
redis-start)
    [[ -f $D/redis.conf ]] || die "no Redis set up in $D (run start first)"
    redis_start
    ;;
redis-freeze | redis-thaw)
    p=$(redis_pid) || die "redis is not running"
    if [[ $cmd == redis-freeze ]]; then sig=STOP want='T*'; else sig=CONT want='[^T]*'; fi
    kill -"$sig" "$p"
    for ((i = 0; i < 100; i++)); do
        # shellcheck disable=SC2053  # $want is a glob on purpose
        [[ $(ps -o stat= -p "$p") == $want ]] && exit 0
        sleep 0.05
    done
    die "redis pid $p did not change state after SIG$sig"
    ;;
redis-pid)
    redis_pid || die "redis is not running"
    ;;
pg-stop)
    pg_stop immediate
    ;;
pg-start)
    [[ -f $D/pg/PG_VERSION ]] || die "no PostgreSQL set up in $D (run start first)"
    pg_start
    ;;
*)
    die "unknown command: $cmd"
    ;;
esac
