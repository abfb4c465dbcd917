#!/usr/bin/env bash
# Test runner for `make check`: throwaway Redis + PostgreSQL, then prove.
#
#   tests/run.sh [TEST...]   default: every executable $BUILD/tests/t_* and
#                            every tests/*.t (bash scripts printing TAP), then
#                            the tests of CLUSTER_TESTS once more against a
#                            Redis Cluster, named $BUILD/tests/t_foo:cluster
#                            (a name may be given so too; the cluster is
#                            started only when some test needs it)
# Env: BUILD (default build); REDIS=valkey runs every server on Valkey
# instead of Redis (tools/servers.sh); PROVE_QUIET=1 drops -v; FEED_KEEP=1 keeps the
# servers' folder (logs, data) and prints its path; FEED_TEST_WRAPPER, e.g.
# "valgrind --error-exitcode=99 -q", wraps the C test binaries (not .t files).
# Tests run from the repo root with DIR/env sourced (see tools/servers.sh).
set -euo pipefail

SELF=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

# prove runs every test as `run.sh --exec-one PATH` (see --exec below): .t
# files go to bash, binaries through the optional wrapper.
if [[ ${1:-} == --exec-one ]]; then
    [[ $2 == *.t ]] && exec bash "$2"
    # Suffixes: ":cluster" against the Redis Cluster, ":async" through the
    # async API on libevent, ":async-uv" on libuv (tests/shim.h).
    while [[ $2 == *:* ]]; do
        case ${2##*:} in
        cluster) export FEED_TEST_CLUSTER=1 ;;
        async) export FEED_TEST_ASYNC=libevent ;;
        async-uv) export FEED_TEST_ASYNC=libuv ;;
        *) echo "run.sh: unknown suffix in $2" >&2; exit 2 ;;
        esac
        set -- "$1" "${2%:*}"
    done
    # shellcheck disable=SC2086  # the wrapper is a command line: split it
    exec ${FEED_TEST_WRAPPER:-} "$2"
fi

ROOT=$(cd "$(dirname "$SELF")/.." && pwd)
if (($#)); then
    tests=()
    for t in "$@"; do   # named relative to the caller's folder
        if [[ $PWD != "$ROOT" && $t != /* ]]; then t=$PWD/$t; fi
        tests+=("$t")
    done
fi
cd "$ROOT"
BUILD=${BUILD:-build}

if ((!$#)); then
    tests=()
    for t in "$BUILD"/tests/t_* tests/*.t; do
        [[ -f $t && ( -x $t || $t == *.t ) ]] && tests+=("$t")
    done
    ((${#tests[@]})) || { echo "run.sh: no tests found (did you run make?)" >&2; exit 1; }
    # The correctness tests again through Redis Cluster routing, and
    # feedcache-sync on the cluster; t_cluster (resharding, failover) and
    # t_ha_cluster (the failover loss) only make sense there.
    for t in t_walk t_hooks t_model t_lease t_stress t_invalidate t_sync t_sync_chaos t_ranked t_merge t_filter t_cluster t_ha_cluster; do
        [[ -x $BUILD/tests/$t ]] && tests+=("$BUILD/tests/$t:cluster")
    done
    # The correctness tests once more through the async API (tests/shim.h):
    # on libevent, some on libuv, and the cluster's through both.
    for t in t_walk t_hooks t_model t_lease t_stress t_plain t_ranked t_newer t_fault_redis t_fault_pg t_fault_hooks t_defaults t_hostile t_format t_ha_sentinel t_ha_failover t_health t_merge t_filter t_tls; do
        [[ -x $BUILD/tests/$t ]] && tests+=("$BUILD/tests/$t:async")
    done
    for t in t_walk t_hooks t_model; do
        [[ -x $BUILD/tests/$t ]] && tests+=("$BUILD/tests/$t:async-uv")
    done
    for t in t_walk t_hooks t_model t_lease t_stress t_cluster; do
        [[ -x $BUILD/tests/$t ]] && tests+=("$BUILD/tests/$t:async:cluster")
    done
fi

DIR=$(mktemp -d -t feedcache-test.XXXXXX)
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    local rc=$?
    tools/servers.sh stop "$DIR" || true
    if [[ ${FEED_KEEP:-} == 1 ]]; then
        echo "run.sh: kept $DIR (restart with: tools/servers.sh start $DIR)" >&2
    else
        rm -rf "$DIR"
    fi
    exit "$rc"
}
# prove runs in the background so that a signal to this script is handled at
# once (bash defers traps while a foreground child runs): stop prove, then the
# EXIT trap stops the servers.
PROVE_PID=
trap cleanup EXIT
# shellcheck disable=SC2317  # invoked by the traps
stop_prove() {  # the running test (prove's child), then prove
    [[ -n $PROVE_PID ]] || return 0
    pkill -TERM -P "$PROVE_PID" 2>/dev/null || true
    kill "$PROVE_PID" 2>/dev/null || true
}
trap 'stop_prove; exit 130' INT
trap 'stop_prove; exit 143' TERM

# REDIS=valkey: tools/servers.sh starts Valkey's programs; the tests that
# start or call redis-server or redis-cli by name (t_auth, the .t scripts)
# get Valkey's too, through $DIR/bin first on PATH.
if [[ ${REDIS:-redis} == valkey ]]; then
    mkdir -p "$DIR/bin"
    for p in server cli; do
        v=$(command -v "valkey-$p") || { echo "run.sh: REDIS=valkey but no valkey-$p (tools/deps.sh)" >&2; exit 1; }
        ln -s "$v" "$DIR/bin/redis-$p"
    done
    export REDIS PATH=$DIR/bin:$PATH
fi
pg=$(printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n1)
echo "run.sh: $("${REDIS:-redis}-server" --version | sed 's/ sha=.*//'); $("$pg" --version)" >&2

tools/servers.sh start "$DIR"
if [[ " ${tests[*]} " == *":cluster "* ]]; then
    tools/servers.sh cluster-start "$DIR"
fi
# shellcheck source=/dev/null
. "$DIR/env"

opts=(-f)
[[ ${PROVE_QUIET:-} == 1 ]] || opts+=(-v)
rc=0
prove "${opts[@]}" --exec "$SELF --exec-one" "${tests[@]}" &
PROVE_PID=$!
wait "$PROVE_PID" || rc=$?
exit "$rc"
