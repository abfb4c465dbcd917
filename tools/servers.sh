#!/usr/bin/env bash
# Throwaway Redis + PostgreSQL on loopback, everything inside one folder.
#
#   tools/servers.sh start DIR    start (or reuse) both; writes DIR/env to source
#   tools/servers.sh stop DIR     stop both; never fails
#   tools/servers.sh status DIR   exit 0 iff both are up
#   fault injection (each blocks until done):
#     redis-stop | redis-start | redis-freeze | redis-thaw | redis-pid DIR
#     pg-stop | pg-start | pg-freeze | pg-thaw DIR
#   a streaming replica of the PostgreSQL server (not started by `start`):
#     replica-start DIR    pg_basebackup -R from the primary, then start it;
#                          DIR/env gains FEED_PG_REPLICA_CONNINFO
#     replica-stop | replica-freeze | replica-thaw DIR
#   (a freeze is SIGSTOP to every process of that PostgreSQL: the postmaster
#   and all its children; the sockets still accept, nothing answers)
#   Sentinel (started only by the tests that need it; `stop` stops it too):
#     sentinel-start DIR   1 primary + 1 replica + 3 Sentinels (quorum 2,
#                          master name "mymaster"), or restart whatever of
#                          them is down; waits until the set is healthy (one
#                          primary all Sentinels agree on, its replica in
#                          sync, every Sentinel knowing the other two);
#                          writes DIR/ha.env (FEED_SENTINELS, FEED_MASTER_NAME)
#     sentinel-stop DIR
#     ha-primary | ha-replica DIR       print that node's port
#     ha-kill-primary DIR               SIGKILL the primary (no restart)
#     ha-failover DIR                   SENTINEL FAILOVER; waits for the new primary
#     ha-freeze-replica | ha-thaw-replica DIR   SIGSTOP / SIGCONT the replica
#   Redis Cluster (3 primaries + 3 replicas, data in DIR/cluster/), started
#   only on request (startup costs seconds):
#     cluster-start DIR       start (or reuse) it; adds FEED_REDIS_CLUSTER (the
#                             seed list) to DIR/env
#     cluster-stop DIR        stop it (stop does it too)
#     cluster-ports DIR       "port role" per live node (role: master|slave)
#     cluster-reshard DIR FROM TO N   move N slots from primary port FROM to TO
#     cluster-failover DIR PORT       CLUSTER FAILOVER on replica PORT, wait for it
#     cluster-kill DIR PORT           SIGKILL node PORT (a crash)
#     cluster-wait DIR                until every live node says cluster_state:ok
#                                     and all 16384 slots are served, replicas in sync
#     cluster-restart DIR PORT        start a killed node again (rejoins as a replica)
#
# Layout of DIR: redis.conf redis.port redis.pid redis.log redis/   (Redis)
#                pg/ pg.port pg.log sock/                          (PostgreSQL)
#                replica/ replica.port replica.log                 (its replica)
#                env
# REDIS=valkey: every server and client is Valkey's (valkey-server, its
# --sentinel mode, valkey-cli) instead of Redis's; same configuration files.
# Ports: FEED_REDIS_PORT / FEED_PG_PORT choose them for a fresh DIR, otherwise
# free ones below the ephemeral range are picked at random; a restart always
# reuses the DIR's port.
set -euo pipefail

die() { echo "servers.sh: $*" >&2; exit 1; }

case ${REDIS:-redis} in
redis) REDIS_SERVER=redis-server REDIS_CLI=redis-cli ;;
valkey) REDIS_SERVER=valkey-server REDIS_CLI=valkey-cli ;;
*) die "REDIS must be redis or valkey, not $REDIS" ;;
esac
# A pid of ours is one of these programs (guards against a reused pid).
is_server() {
    case $(cat "/proc/$1/comm" 2>/dev/null) in redis-server* | valkey-server*) return 0 ;; esac
    return 1
}

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
REPO=$(cd "$(dirname "$SELF")/.." && pwd)

cmd=${1:-}
[[ -n $cmd && -n ${2:-} ]] || die "usage: $0 start|stop|status|redis-stop|redis-start|redis-freeze|redis-thaw|redis-pid|pg-stop|pg-start|pg-freeze|pg-thaw|replica-start|replica-stop|replica-freeze|replica-thaw DIR"
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
        [[ $p != "${1:-}" ]] && port_free "$p" && reserve_ports "$p" && { echo "$p"; return; }
    done
    die "no free loopback port found"
}
# Servers started side by side (tests/run.sh starts one set per parallel
# job) may each find the same port free before either binds it. With
# FEED_PORT_LEDGER naming a file, a port is taken only by whoever first
# writes it there (under a lock), so no two of them ever pick the same one.
reserve_ports() {  # port...: 0 when all were free in the ledger, now written
    local f=${FEED_PORT_LEDGER:-} p
    [[ -n $f ]] || return 0
    (
        flock 9
        for p in "$@"; do grep -qx "$p" "$f" 2>/dev/null && exit 1; done
        printf '%s\n' "$@" >>"$f"
    ) 9>>"$f.lock"
}

# ---------------------------------------------------------------- Redis
redis_port() { cat "$D/redis.port" 2>/dev/null; }
redis_pid() {
    local p
    p=$(cat "$D/redis.pid" 2>/dev/null) || return 1
    # also guard against the pid having been reused by something else
    alive "$p" && is_server "$p" && echo "$p"
}
redis_ping() { [[ $(timeout 1 "$REDIS_CLI" -h 127.0.0.1 -p "$(redis_port)" ping 2>/dev/null) == PONG ]]; }

redis_launch() {  # from DIR/redis.conf, wait until it answers PING
    local end=$((SECONDS + 10))
    rm -f "$D/redis.pid"
    "$REDIS_SERVER" "$D/redis.conf" >>"$D/redis.log" 2>&1 </dev/null || true
    while ((SECONDS < end)); do redis_ping && return 0; sleep 0.1; done
    echo "servers.sh: $REDIS_SERVER on port $(redis_port) did not answer PING in 10 s; log tail:" >&2
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
pg_running() {  # data folder (default DIR/pg)
    local p
    p=$(head -n1 "${1:-$D/pg}/postmaster.pid" 2>/dev/null) || return 1
    alive "$p"
}
psql_() {  # psql against the throwaway server as superuser; extra args follow
    PGOPTIONS='-c client_min_messages=warning' \
        psql -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$(pg_port)" -U postgres "$@"
}

pg_launch() {  # name (default pg): DIR/<name>/ the data, DIR/<name>.log, .port
    local n=${1:-pg}
    if ! as_pg "$PGBIN/pg_ctl" start -w -t 60 -D "$D/$n" -l "$D/$n.log" >/dev/null; then
        echo "servers.sh: PostgreSQL ($n) on port $(cat "$D/$n.port") did not start; log tail:" >&2
        tail -n 20 "$D/$n.log" >&2
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
    # Throwaway cluster: durability off for speed. wal_level logical serves
    # both feedcache-sync (a logical slot) and replica-start (streaming,
    # which needs replica or more); initdb's pg_hba.conf already trusts
    # replication connections from 127.0.0.1.
    cat >>"$D/pg/postgresql.conf" <<EOC
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$D/sock'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
# feedcache-sync follows a logical replication slot (sync/, docs/sync.md). A slot keeps WAL until its consumer confirms it: a
# stopped consumer would keep WAL until the disk fills, so cap it (the slot
# is then invalidated and feedcache-sync must be restarted with a new one).
wal_level = logical
max_replication_slots = 10
max_wal_senders = 10
max_slot_wal_keep_size = 1GB
EOC
    pg_launch
    psql_ -d postgres -c 'CREATE DATABASE feedcache'
    for f in "$REPO"/sql/*.sql; do    # glob order is sorted
        [[ -e $f ]] || continue
        psql_ -d feedcache -f "$f" || die "loading $f failed"
    done
}

pg_stop() {  # mode: fast | immediate; data folder (default DIR/pg)
    local data=${2:-$D/pg} p
    p=$(head -n1 "$data/postmaster.pid" 2>/dev/null) || return 0
    alive "$p" || return 0
    cluster_signal "$data" CONT || true   # it may be frozen
    as_pg "$PGBIN/pg_ctl" stop -w -t 30 -m "$1" -D "$data" >/dev/null 2>&1 ||
        as_pg "$PGBIN/pg_ctl" stop -w -t 30 -m immediate -D "$data" >/dev/null 2>&1 || true
    # Wait for the postmaster itself (a zombie counts as gone).
    wait_gone "$p" || true
}

# SIGSTOP or SIGCONT to every process of the PostgreSQL in a data folder:
# the postmaster first on STOP (then it forks nothing new), last on CONT.
cluster_signal() {  # data-folder STOP|CONT
    local pm kids k want i
    pm=$(head -n1 "$1/postmaster.pid" 2>/dev/null) && alive "$pm" || return 1
    [[ $2 == STOP ]] && kill -STOP "$pm"
    kids=$(ps -o pid= --ppid "$pm" 2>/dev/null || true)
    for k in $kids; do kill -"$2" "$k" 2>/dev/null || true; done
    [[ $2 == CONT ]] && kill -CONT "$pm"
    if [[ $2 == STOP ]]; then want='T*'; else want='[^T]*'; fi
    for ((i = 0; i < 100; i++)); do
        # shellcheck disable=SC2053  # $want is a glob on purpose
        [[ $(ps -o stat= -p "$pm") == $want ]] && return 0
        sleep 0.05
    done
    return 1
}

# ---------------------------------------------------------------- replica
# A hot standby streaming from the primary, made by pg_basebackup -R
# (which writes primary_conninfo and standby.signal). Its own port and data
# folder; the sockets folder is shared (the port names the socket).
replica_port() { cat "$D/replica.port" 2>/dev/null; }
replica_start() {
    local port
    pg_running || die "the primary is not running (run start first)"
    if pg_running "$D/replica"; then return 0; fi
    if [[ -f $D/replica/PG_VERSION ]]; then pg_launch replica; return; fi
    port=$(pick_port "$(pg_port)")
    echo "$port" >"$D/replica.port"
    rm -rf "$D/replica"
    mkdir -p "$D/replica"
    chmod 0700 "$D/replica"
    touch "$D/replica.log"
    [[ $(id -u) -ne 0 ]] || chown postgres: "$D/replica" "$D/replica.log"
    as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$(pg_port)" -U postgres -D "$D/replica" \
        -R -X stream -c fast --no-sync >"$D/basebackup.log" 2>&1 ||
        { cat "$D/basebackup.log" >&2; die "pg_basebackup failed"; }
    # The copied postgresql.conf names the primary's port: the last line wins.
    cat >>"$D/replica/postgresql.conf" <<EOC
port = $port
hot_standby = on
EOC
    pg_launch replica
}

# ---------------------------------------------------------------- Sentinel
# DIR/ha/: n1 n2 (Redis nodes; n1 starts as primary) s1 s2 s3 (Sentinels),
# each with NAME.conf NAME.port NAME.pid NAME.log and a folder NAME/.
# Short timeouts so that a test's failover takes seconds: a primary is down
# after 500 ms without answer.
HA=$D/ha
HA_NODES="n1 n2"
HA_SENTINELS="s1 s2 s3"
ha_port() { cat "$HA/$1.port" 2>/dev/null; }
ha_pid() {
    local p
    p=$(cat "$HA/$1.pid" 2>/dev/null) || return 1
    alive "$p" && is_server "$p" && echo "$p"
}
ha_cli() {  # port args...
    local port=$1
    shift
    timeout 2 "$REDIS_CLI" -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

ha_setup() {  # fresh ports and configs, once
    local n p taken=""
    mkdir -p "$HA"
    for n in $HA_NODES $HA_SENTINELS; do
        [[ -f $HA/$n.port ]] && { taken="$taken $(ha_port "$n")"; continue; }
        for ((;;)); do
            p=$(pick_port "$(redis_port)")
            [[ " $taken $(pg_port) " != *" $p "* ]] && break
        done
        taken="$taken $p"
        echo "$p" >"$HA/$n.port"
    done
    for n in $HA_NODES $HA_SENTINELS; do
        [[ -f $HA/$n.conf ]] && continue
        mkdir -p "$HA/$n"
        # Sentinels rewrite their file as they learn; it must stay writable.
        cat >"$HA/$n.conf" <<EOC
bind 127.0.0.1
port $(ha_port "$n")
daemonize yes
pidfile $HA/$n.pid
logfile $HA/$n.log
dir $HA/$n
EOC
        case $n in
        n*) printf '%s\n' 'save ""' 'appendonly no' 'repl-diskless-sync-delay 0' >>"$HA/$n.conf" ;;
        esac
        case $n in
        n1) ;;
        n*) echo "replicaof 127.0.0.1 $(ha_port n1)" >>"$HA/$n.conf" ;;
        s*) cat >>"$HA/$n.conf" <<EOC
sentinel monitor mymaster 127.0.0.1 $(ha_port n1) 2
sentinel down-after-milliseconds mymaster 500
sentinel failover-timeout mymaster 3000
sentinel parallel-syncs mymaster 1
EOC
            ;;
        esac
    done
}

ha_launch() {  # name
    local n=$1 i
    ha_pid "$n" >/dev/null && return 0
    rm -f "$HA/$n.pid"
    if [[ $n == s* ]]; then
        "$REDIS_SERVER" "$HA/$n.conf" --sentinel >>"$HA/$n.log" 2>&1 </dev/null || true
    elif [[ -n ${2:-} && $2 != $(ha_port "$n") ]]; then
        # A node coming back after a failover rejoins as the replica of the
        # current primary, as an operator would restart it (empty: no
        # persistence), instead of as a second, empty primary.
        "$REDIS_SERVER" "$HA/$n.conf" --replicaof 127.0.0.1 "$2" >>"$HA/$n.log" 2>&1 </dev/null || true
    else
        "$REDIS_SERVER" "$HA/$n.conf" >>"$HA/$n.log" 2>&1 </dev/null || true
    fi
    for ((i = 0; i < 100; i++)); do
        [[ $(ha_cli "$(ha_port "$n")" ping) == PONG ]] && return 0
        sleep 0.1
    done
    tail -n 20 "$HA/$n.log" >&2
    die "$n on port $(ha_port "$n") did not answer PING"
}

ha_primary() {  # the port the Sentinels name (the first one that answers)
    local s a
    for s in $HA_SENTINELS; do
        a=$(ha_cli "$(ha_port "$s")" sentinel get-master-addr-by-name mymaster | sed -n 2p)
        [[ -n $a ]] && { echo "$a"; return 0; }
    done
    return 1
}
ha_other() {  # the node that is not on port $1
    local n
    for n in $HA_NODES; do [[ $(ha_port "$n") != "$1" ]] && { echo "$n"; return; }; done
}
ha_name_of() {  # node name on port $1
    local n
    for n in $HA_NODES; do [[ $(ha_port "$n") == "$1" ]] && { echo "$n"; return; }; done
}

# Healthy: every Sentinel names the same primary, which says ROLE master;
# the other node is its replica with the link up; each Sentinel sees the
# primary up, one replica not down, and the two other Sentinels.
ha_healthy() {
    local s p r info m
    p=$(ha_primary) || return 1
    for s in $HA_SENTINELS; do
        [[ $(ha_cli "$(ha_port "$s")" sentinel get-master-addr-by-name mymaster | sed -n 2p) == "$p" ]] || return 1
        m=$(ha_cli "$(ha_port "$s")" sentinel master mymaster | tr '\n' ' ')
        [[ $m == *" flags master "* && $m == *" num-slaves 1 "* && $m == *" num-other-sentinels 2 "* ]] || return 1
        [[ $(ha_cli "$(ha_port "$s")" sentinel replicas mymaster | tr '\n' ' ') == *" flags slave "* ]] || return 1
    done
    [[ $(ha_cli "$p" role | head -n1) == master ]] || return 1
    r=$(ha_port "$(ha_other "$p")")
    info=$(ha_cli "$r" info replication | tr -d '\r')
    [[ $info == *"master_port:$p"* && $info == *"master_link_status:up"* ]]
}

ha_start() {
    local n i p
    ha_setup
    p=$(ha_primary) || p=
    for n in $HA_NODES $HA_SENTINELS; do ha_launch "$n" "$p"; done
    for ((i = 0; i < 600; i++)); do
        if ha_healthy; then
            cat >"$D/ha.env.tmp" <<EOE
# Generated by tools/servers.sh sentinel-start; source it.
export FEED_SENTINELS=127.0.0.1:$(ha_port s1),127.0.0.1:$(ha_port s2),127.0.0.1:$(ha_port s3)
export FEED_MASTER_NAME=mymaster
EOE
            mv "$D/ha.env.tmp" "$D/ha.env"
            return 0
        fi
        sleep 0.1
    done
    die "the Sentinel set in $HA did not become healthy in 60 s"
}

ha_stop() {
    local n p
    [[ -d $HA ]] || return 0
    for n in $HA_SENTINELS $HA_NODES; do
        p=$(ha_pid "$n") || continue
        kill -CONT "$p" 2>/dev/null || true
        kill -TERM "$p" 2>/dev/null || true
        wait_gone "$p" || { kill -KILL "$p" 2>/dev/null || true; wait_gone "$p" || true; }
    done
}

ha_signal() {  # name SIG want-glob
    local p i
    p=$(ha_pid "$1") || die "$1 is not running"
    kill -"$2" "$p"
    for ((i = 0; i < 100; i++)); do
        # shellcheck disable=SC2053  # $3 is a glob on purpose
        [[ $(ps -o stat= -p "$p") == $3 ]] && return 0
        sleep 0.05
    done
    die "$1 (pid $p) did not change state after SIG$2"
}

# ---------------------------------------------------------------- Redis Cluster
# Six nodes in DIR/cluster/<port>/; DIR/cluster/ports lists them. Each node's
# cluster bus listens on port + 10000, which must be free too (and <= 65535).
C=$D/cluster
cluster_node_pid() {  # port
    local p
    p=$(cat "$C/$1/redis.pid" 2>/dev/null) || return 1
    alive "$p" && is_server "$p" && echo "$p"
}
ccli() {  # port args...: redis-cli against one node
    local port=$1
    shift
    timeout 10 "$REDIS_CLI" -h 127.0.0.1 -p "$port" "$@"
}
cluster_pick_ports() {  # six ports, each with a free bus port, none in use
    local low p i ports=() taken=" $(redis_port) $(pg_port) "
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    ((low > 12000)) || low=32768
    ((low - 10000 > 10000)) || low=30000
    for ((i = 0; i < 1000 && ${#ports[@]} < 6; i++)); do
        # Both the port and its bus port (+10000) below the ephemeral range.
        p=$((10000 + (RANDOM * 32768 + RANDOM) % (low - 10000 - 10000)))
        [[ $taken != *" $p "* && $taken != *" $((p + 10000)) "* ]] || continue
        port_free "$p" && port_free $((p + 10000)) && reserve_ports "$p" $((p + 10000)) || continue
        ports+=("$p")
        taken+="$p $((p + 10000)) "
    done
    ((${#ports[@]} == 6)) || die "no six free loopback port pairs found"
    echo "${ports[@]}"
}
cluster_launch() {  # port: start one node from its config, wait for PING
    local port=$1 end=$((SECONDS + 10))
    "$REDIS_SERVER" "$C/$port/redis.conf" >>"$C/$port/redis.log" 2>&1 </dev/null || true
    while ((SECONDS < end)); do
        [[ $(ccli "$port" ping 2>/dev/null) == PONG ]] && return 0
        sleep 0.1
    done
    tail -n 20 "$C/$port/redis.log" >&2
    die "cluster node $port did not answer PING in 10 s"
}
cluster_ok() {  # every live node: state ok, every slot served, every replica in sync
    local port info
    for port in $(cat "$C/ports"); do
        cluster_node_pid "$port" >/dev/null || continue
        info=$(ccli "$port" cluster info 2>/dev/null) || return 1
        [[ $info == *cluster_state:ok* && $info == *cluster_slots_ok:16384* ]] || return 1
        info=$(ccli "$port" info replication 2>/dev/null) || return 1
        [[ $info != *role:slave* || $info == *master_link_status:up* ]] || return 1
    done
}
cluster_wait() {  # up to 90 s (a rejoining node syncs its data first; slow under load)
    local end=$((SECONDS + 90)) port
    while ((SECONDS < end)); do cluster_ok && return 0; sleep 0.2; done
    for port in $(cat "$C/ports"); do   # what each node says, for whoever reads the failure
        if ! cluster_node_pid "$port" >/dev/null; then
            echo "servers.sh: node $port: not running" >&2
            continue
        fi
        # shellcheck disable=SC2046  # unquoted: the lines joined into one
        echo "servers.sh: node $port:" \
            $(ccli "$port" cluster info 2>&1 | grep -E 'cluster_state|slots_(ok|pfail|fail)') \
            $(ccli "$port" info replication 2>&1 |
                grep -E '^(role|master_port|master_link_status|master_sync_in_progress)') |
            tr -d '\r' >&2
    done
    die "cluster not ok after 90 s"
}
cluster_start() {
    local port
    if [[ -f $C/ports ]]; then
        for port in $(cat "$C/ports"); do
            cluster_node_pid "$port" >/dev/null || cluster_launch "$port"
        done
        cluster_wait
        return
    fi
    mkdir -p "$C"
    local ports
    read -ra ports <<<"$(cluster_pick_ports)"
    for port in "${ports[@]}"; do
        mkdir -p "$C/$port"
        # cluster-node-timeout 2000: a dead primary is replaced in ~2-4 s
        # rather than the default 15 s.
        cat >"$C/$port/redis.conf" <<EOC
bind 127.0.0.1
port $port
daemonize yes
pidfile $C/$port/redis.pid
logfile $C/$port/redis.log
dir $C/$port
save ""
appendonly no
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 2000
cluster-replica-validity-factor 0
cluster-require-full-coverage no
# A replica syncs at once (the default waits 5 s for more replicas).
repl-diskless-sync-delay 0
EOC
        cluster_launch "$port"
    done
    local addrs=()
    for port in "${ports[@]}"; do addrs+=("127.0.0.1:$port"); done
    "$REDIS_CLI" --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes \
        >"$C/create.log" 2>&1 || { cat "$C/create.log" >&2; die "$REDIS_CLI --cluster create failed"; }
    echo "${ports[@]}" >"$C/ports"
    cluster_wait
}
cluster_stop() {
    local port p
    [[ -f $C/ports ]] || return 0
    for port in $(cat "$C/ports"); do
        p=$(cluster_node_pid "$port") || continue
        kill -CONT "$p" 2>/dev/null || true
        kill -TERM "$p" 2>/dev/null || true
    done
    for port in $(cat "$C/ports"); do
        p=$(cluster_node_pid "$port") || continue
        wait_gone "$p" || { kill -KILL "$p" 2>/dev/null || true; wait_gone "$p" || true; }
    done
}
cluster_ports() {  # "port role" of every live node
    local port
    for port in $(cat "$C/ports"); do
        cluster_node_pid "$port" >/dev/null || continue
        echo "$port $(ccli "$port" role 2>/dev/null | head -n1)"
    done
}
cluster_seeds() {
    local port s=
    for port in $(cat "$C/ports"); do s+=${s:+,}127.0.0.1:$port; done
    echo "$s"
}

# ---------------------------------------------------------------- env file
write_env() {
    local rp pp
    rp=$(redis_port || true) pp=$(pg_port || true)
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
    if [[ -f $D/replica.port ]]; then
        echo "export FEED_PG_REPLICA_CONNINFO=\"host=127.0.0.1 port=$(replica_port) user=postgres dbname=feedcache\"" >>"$D/env.tmp"
    fi
    if [[ -f $C/ports ]]; then
        echo "export FEED_REDIS_CLUSTER=$(cluster_seeds)" >>"$D/env.tmp"
    fi
    mv "$D/env.tmp" "$D/env"
}

case $cmd in
start)
    redis_start
    pg_start
    write_env
    ;;
stop)
    cluster_stop || true
    ha_stop || true
    redis_stop || true
    pg_stop fast "$D/replica" || true
    pg_stop fast || true
    ;;
status)
    rc=0
    if p=$(redis_pid); then echo "redis: running (pid $p, port $(redis_port))"; else echo "redis: stopped"; rc=1; fi
    if pg_running; then echo "postgres: running (port $(pg_port))"; else echo "postgres: stopped"; rc=1; fi
    if pg_running "$D/replica"; then echo "replica: running (port $(replica_port))"; fi
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
sentinel-start)
    ha_start
    ;;
sentinel-stop)
    ha_stop
    ;;
ha-primary)
    ha_primary || die "no Sentinel names a primary"
    ;;
ha-replica)
    p=$(ha_primary) || die "no Sentinel names a primary"
    ha_port "$(ha_other "$p")"
    ;;
ha-kill-primary)
    p=$(ha_primary) || die "no Sentinel names a primary"
    n=$(ha_name_of "$p")
    if pid=$(ha_pid "$n"); then
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid" || die "$n (pid $pid) did not die"
    fi
    rm -f "$HA/$n.pid"
    ;;
ha-failover)
    old=$(ha_primary) || die "no Sentinel names a primary"
    [[ $(ha_cli "$(ha_port s1)" sentinel failover mymaster) == OK ]] ||
        die "SENTINEL FAILOVER refused"
    for ((i = 0; i < 200; i++)); do
        p=$(ha_primary) || true
        [[ -n $p && $p != "$old" && $(ha_cli "$p" role | head -n1) == master ]] && exit 0
        sleep 0.05
    done
    die "no new primary 10 s after SENTINEL FAILOVER"
    ;;
ha-freeze-replica | ha-thaw-replica)
    p=$(ha_primary) || die "no Sentinel names a primary"
    n=$(ha_other "$p")
    if [[ $cmd == ha-freeze-replica ]]; then ha_signal "$n" STOP 'T*'; else ha_signal "$n" CONT '[^T]*'; fi
    ;;
pg-stop)
    pg_stop immediate
    ;;
pg-start)
    [[ -f $D/pg/PG_VERSION ]] || die "no PostgreSQL set up in $D (run start first)"
    pg_start
    ;;
pg-freeze | replica-freeze)
    data=$D/pg
    [[ $cmd == pg-freeze ]] || data=$D/replica
    cluster_signal "$data" STOP || die "${cmd%-freeze} is not running or did not stop"
    ;;
pg-thaw | replica-thaw)  # no-op when not running
    data=$D/pg
    [[ $cmd == pg-thaw ]] || data=$D/replica
    if [[ -f $data/postmaster.pid ]]; then cluster_signal "$data" CONT || true; fi
    ;;
replica-start)
    replica_start
    write_env
    ;;
replica-stop)
    pg_stop immediate "$D/replica"
    ;;
cluster-start)
    cluster_start
    write_env
    ;;
cluster-stop)
    cluster_stop
    ;;
cluster-ports)
    cluster_ports
    ;;
cluster-wait)
    cluster_wait
    ;;
cluster-reshard)
    [[ $# -eq 5 ]] || die "usage: $0 cluster-reshard DIR FROM_PORT TO_PORT NSLOTS"
    # Right after a test's failover or kill the cluster may still be
    # settling, and a node that briefly counts itself cut off answers the
    # MIGRATE of a move with CLUSTERDOWN (seen on Valkey 8 under load): wait
    # until every node agrees first. A move that fails all the same leaves
    # its slot open, which would refuse every later reshard: close it
    # (--cluster fix), wait, and move what is left once more, saying so.
    cluster_wait
    src=$3
    from=$(ccli "$3" cluster myid) to=$(ccli "$4" cluster myid)
    owned() {  # slots node $1 serves
        ccli "$1" cluster nodes | awk '/myself/ { n = 0
            for (i = 9; i <= NF; i++) { if ($i ~ /^\[/) continue; k = split($i, a, "-")
                                        n += k == 2 ? a[2] - a[1] + 1 : 1 }
            print n }'
    }
    reshard() {  # nslots
        "$REDIS_CLI" --cluster reshard "127.0.0.1:$src" --cluster-from "$from" --cluster-to "$to" \
            --cluster-slots "$1" --cluster-yes --cluster-pipeline 10 >>"$C/reshard.log" 2>&1
    }
    had=$(owned "$4")
    if ! reshard "$5"; then
        echo "servers.sh: reshard $3 -> $4 stopped ($(grep -oE '(ERR|\*\*\*) .*' "$C/reshard.log" | tail -n1)); fixing the open slot, then the rest" >&2
        "$REDIS_CLI" --cluster fix "127.0.0.1:$3" --cluster-yes >>"$C/reshard.log" 2>&1 || true
        cluster_wait
        left=$(($5 - ($(owned "$4") - had)))
        if ((left > 0)) && ! reshard "$left"; then
            tail -n 20 "$C/reshard.log" >&2
            die "reshard $3 -> $4 failed"
        fi
    fi
    ;;
cluster-failover)
    [[ $# -eq 3 ]] || die "usage: $0 cluster-failover DIR REPLICA_PORT"
    [[ $(ccli "$3" cluster failover) == OK ]] || die "CLUSTER FAILOVER on $3 refused"
    for ((i = 0; i < 200; i++)); do
        [[ $(ccli "$3" role 2>/dev/null | head -n1) == master ]] && { cluster_wait; exit 0; }
        sleep 0.05
    done
    die "replica $3 did not become primary in 10 s"
    ;;
cluster-kill)
    [[ $# -eq 3 ]] || die "usage: $0 cluster-kill DIR PORT"
    if p=$(cluster_node_pid "$3"); then
        kill -KILL "$p" 2>/dev/null || true
        wait_gone "$p" || die "cluster node pid $p did not die"
    fi
    ;;
cluster-restart)
    [[ $# -eq 3 && -f $C/$3/redis.conf ]] || die "usage: $0 cluster-restart DIR PORT (a node of DIR)"
    cluster_node_pid "$3" >/dev/null || cluster_launch "$3"
    ;;
*)
    die "unknown command: $cmd"
    ;;
esac
