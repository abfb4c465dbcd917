#!/usr/bin/env bash
# tls.sh -- the servers of tests/t_tls.c, all in one folder of their own:
# certificates made here with the openssl CLI, TLS-only Redis servers
# (Debian's redis-server is built with TLS), a Redis Cluster and a Sentinel
# set speaking TLS to each other too, and a PostgreSQL with ssl = on.
#
#   tests/tls.sh start DIR   make everything; writes DIR/tls.env (KEY=VALUE
#                            lines: ports and file names)
#   tests/tls.sh stop DIR    stop everything it started; never fails
#
# Certificates (DIR/pki/): ca.crt signs server.crt (subjectAltName
# DNS:localhost, IP:127.0.0.1) and client.crt; other-ca.crt signs nothing
# here (a wrong CA); self.crt is self-signed, for 127.0.0.1 too.
# Servers: tls (CA-signed, no client certificate asked), mtls (a client
# certificate required: tls-auth-clients yes), self (self.crt), cluster
# (3 primaries, tls-cluster yes), ha (1 primary and 1 Sentinel,
# tls-replication yes), and PostgreSQL (tools/servers.sh in DIR/pg, then
# ssl = on with server.crt).
set -euo pipefail

die() { echo "tls.sh: $*" >&2; exit 1; }
[[ $# -eq 2 ]] || die "usage: $0 start|stop DIR"
cmd=$1
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$2"
D=$(cd "$2" && pwd)
chmod 0755 "$D"   # PostgreSQL runs as its own user when this runs as root
P=$D/pki

port_free() {
    ! ss -Htan "sport = :$1" 2>/dev/null | grep -q . &&
        ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
TAKEN=" "
pick_port() {  # below the ephemeral range, its +10000 (a cluster bus) free too
    local p i low
    low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    ((low > 22000)) || low=32768
    for ((i = 0; i < 200; i++)); do
        p=$((10000 + (RANDOM * 32768 + RANDOM) % (low - 20000)))
        [[ $TAKEN != *" $p "* ]] || continue
        port_free "$p" && port_free $((p + 10000)) || continue
        TAKEN+="$p $((p + 10000)) "
        echo "$p"
        return
    done
    die "no free loopback port found"
}

cli() {  # port args...: redis-cli over TLS with the client certificate
    local port=$1
    shift
    timeout 5 redis-cli --tls --cacert "$P/ca.crt" --cert "$P/client.crt" --key "$P/client.key" \
        -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

make_pki() {
    mkdir -p "$P"
    cd "$P"
    local ossl="openssl"
    $ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=feedcache test CA" \
        -keyout ca.key -out ca.crt 2>/dev/null
    $ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=another CA" \
        -keyout other-ca.key -out other-ca.crt 2>/dev/null
    printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' >server.ext
    $ossl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout server.key -out server.csr 2>/dev/null
    $ossl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile server.ext -out server.crt 2>/dev/null
    printf 'extendedKeyUsage=clientAuth\n' >client.ext
    $ossl req -newkey rsa:2048 -nodes -subj "/CN=feedcache client" -keyout client.key -out client.csr 2>/dev/null
    $ossl x509 -req -in client.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
        -extfile client.ext -out client.crt 2>/dev/null
    $ossl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=127.0.0.1" \
        -addext "subjectAltName=IP:127.0.0.1" -keyout self.key -out self.crt 2>/dev/null
    chmod 0644 ./*.key ./*.crt     # PostgreSQL (another user when root) reads its copy
    cd - >/dev/null
}

# A TLS-only redis-server: name port cert key [extra config lines...]
redis_tls() {
    local n=$1 port=$2 cert=$3 key=$4 i
    shift 4
    mkdir -p "$D/$n"
    {
        printf '%s\n' "bind 127.0.0.1" "port 0" "tls-port $port" "daemonize yes" \
            "pidfile $D/$n.pid" "logfile $D/$n.log" "dir $D/$n" 'save ""' "appendonly no" \
            "tls-cert-file $cert" "tls-key-file $key" "tls-ca-cert-file $P/ca.crt"
        printf '%s\n' "$@"
    } >"$D/$n.conf"
    echo "$n" >>"$D/started"
    if [[ $n == sentinel ]]; then
        redis-server "$D/$n.conf" --sentinel >>"$D/$n.log" 2>&1 </dev/null || true
    else
        redis-server "$D/$n.conf" >>"$D/$n.log" 2>&1 </dev/null || true
    fi
    for ((i = 0; i < 100; i++)); do
        # --insecure: the self-signed server too (a readiness check only)
        [[ -s $D/$n.pid ]] && [[ $(cli "$port" --insecure ping) == PONG ]] && return 0
        sleep 0.1
    done
    tail -n 20 "$D/$n.log" >&2
    die "$n (TLS port $port) did not answer PING"
}

start() {
    local tls mtls self c1 c2 c3 hp sp i
    [[ ! -e $D/tls.env ]] || die "$D is in use (stop it first)"
    command -v openssl >/dev/null || die "no openssl CLI"
    : >"$D/started"
    make_pki
    tls=$(pick_port) mtls=$(pick_port) self=$(pick_port)
    c1=$(pick_port) c2=$(pick_port) c3=$(pick_port) hp=$(pick_port) sp=$(pick_port)
    redis_tls tls "$tls" "$P/server.crt" "$P/server.key" "tls-auth-clients no"
    redis_tls mtls "$mtls" "$P/server.crt" "$P/server.key" "tls-auth-clients yes"
    redis_tls self "$self" "$P/self.crt" "$P/self.key" "tls-auth-clients no"
    for p in "$c1" "$c2" "$c3"; do
        redis_tls "c$p" "$p" "$P/server.crt" "$P/server.key" "tls-auth-clients no" \
            "tls-cluster yes" "tls-replication yes" "cluster-enabled yes" \
            "cluster-config-file nodes.conf" "cluster-node-timeout 2000"
    done
    timeout 60 redis-cli --tls --cacert "$P/ca.crt" --cluster create \
        "127.0.0.1:$c1" "127.0.0.1:$c2" "127.0.0.1:$c3" --cluster-yes >"$D/cluster.log" 2>&1 ||
        { cat "$D/cluster.log" >&2; die "redis-cli --cluster create failed"; }
    for ((i = 0; i < 300; i++)); do
        [[ $(cli "$c1" cluster info) == *cluster_state:ok* ]] && break
        sleep 0.1
    done
    [[ $(cli "$c1" cluster info) == *cluster_state:ok* ]] || die "the TLS cluster is not ok"
    redis_tls primary "$hp" "$P/server.crt" "$P/server.key" "tls-auth-clients no" \
        "tls-replication yes"
    redis_tls sentinel "$sp" "$P/server.crt" "$P/server.key" "tls-auth-clients no" \
        "tls-replication yes" "sentinel monitor mymaster 127.0.0.1 $hp 1" \
        "sentinel down-after-milliseconds mymaster 2000"
    for ((i = 0; i < 100; i++)); do
        [[ $(cli "$sp" sentinel get-master-addr-by-name mymaster | tail -n1) == "$hp" ]] && break
        sleep 0.1
    done
    # PostgreSQL: the usual throwaway server in DIR/pg, then TLS with the
    # CA-signed certificate (a copy the server's user owns).
    FEED_SERVERS_DIR= FEED_REDIS_PORT= FEED_PG_PORT= "$REPO/tools/servers.sh" start "$D/pg" >/dev/null
    echo pg >>"$D/started"
    # shellcheck source=/dev/null
    . "$D/pg/env"
    cp "$P/server.crt" "$P/server.key" "$D/pg/pg/"
    if [[ $(id -u) -eq 0 ]]; then chown postgres: "$D/pg/pg/server.crt" "$D/pg/pg/server.key"; fi
    chmod 0600 "$D/pg/pg/server.key"
    psql -X -q -h 127.0.0.1 -p "$PGPORT" -U postgres -d feedcache \
        -c "ALTER SYSTEM SET ssl = on" -c "SELECT pg_reload_conf()" >/dev/null
    for ((i = 0; i < 50; i++)); do
        [[ $(psql -X -At "sslmode=require host=127.0.0.1 port=$PGPORT user=postgres dbname=feedcache" \
             -c "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()" 2>/dev/null) == t ]] && break
        sleep 0.1
    done
    cat >"$D/tls.env" <<EOE
TLS_PKI=$P
TLS_PORT=$tls
TLS_MTLS_PORT=$mtls
TLS_SELF_PORT=$self
TLS_CLUSTER=127.0.0.1:$c1,127.0.0.1:$c2,127.0.0.1:$c3
TLS_SENTINELS=127.0.0.1:$sp
TLS_PRIMARY_PORT=$hp
TLS_PG_PORT=$PGPORT
EOE
}

stop() {
    local n p
    [[ -f $D/started ]] || return 0
    while read -r n; do
        if [[ $n == pg ]]; then
            "$REPO/tools/servers.sh" stop "$D/pg" || true
            continue
        fi
        p=$(cat "$D/$n.pid" 2>/dev/null) || continue
        kill -TERM "$p" 2>/dev/null || true
    done <"$D/started"
    rm -f "$D/started" "$D/tls.env"
}

case $cmd in
start) start ;;
stop) stop ;;
*) die "unknown command: $cmd" ;;
esac
