#!/usr/bin/env bash
# tests/sim/run.sh -- what `make sim` runs: build/tests/feedsim over
# SIM_SCHEDULES schedules (default 100000) of MODE (default "default"),
# split over the machine's cores (seeds 1, 1+k, 1+2k, ... in process 1 of k),
# or for SIM_SECONDS seconds each when that is set (a soak). Prints the
# processes' results and one last line "N schedules, V violations".
# SIM_SEED=n replays seed n alone, traced. SIM_EXPECT=violation: succeed
# only when some schedule breaks the invariant (a control run).
# MODE: default, async, nofence, kills, kills-sync, replica, replica-unbounded;
# under Sentinel: sentinel, sentinel-nofence, sentinel-wait, sentinel-nowait;
# on a Redis Cluster: cluster, cluster-nofence, cluster-wait, cluster-flap (feedsim.c says
# what each one runs).
set -euo pipefail
BUILD=${BUILD:-build}
MODE=${1:-default}
SIM=$BUILD/tests/feedsim
[[ -x $SIM ]] || { echo "sim: $SIM is missing (make $SIM)" >&2; exit 2; }

if [[ -n ${SIM_SEED:-} ]]; then
    exec "$SIM" "$MODE"
fi

procs=$(nproc 2>/dev/null || echo 1)
total=${SIM_SCHEDULES:-100000}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$SECONDS
pids=()
for ((p = 1; p <= procs; p++)); do
    per=$(( (total + procs - p) / procs ))
    SIM_FIRST=$p SIM_STRIDE=$procs SIM_SCHEDULES=$per SIM_EXPECT= \
        "$SIM" "$MODE" >"$dir/$p.out" 2>&1 &
    pids+=($!)
done
fails=0
for ((p = 1; p <= procs; p++)); do
    wait "${pids[p - 1]}" || fails=$((fails + 1))
done
runs=0
violations=0
for ((p = 1; p <= procs; p++)); do
    grep -v ' schedules, ' "$dir/$p.out" || true
    last=$(tail -n1 "$dir/$p.out")
    [[ $last =~ ^([0-9]+)\ schedules,\ ([0-9]+)\ violation ]] ||
        { echo "sim: process $p ended without a count: $last" >&2; exit 2; }
    runs=$((runs + BASH_REMATCH[1]))
    violations=$((violations + BASH_REMATCH[2]))
done
secs=$((SECONDS - start))
echo "# $MODE: $runs schedules in ${secs} s on $procs processes ($((runs / (secs > 0 ? secs : 1))) schedules/s)"
echo "$runs schedules, $violations violations"
if [[ ${SIM_EXPECT:-} == violation ]]; then
    ((violations > 0))
else
    ((violations == 0 && fails == 0))
fi
