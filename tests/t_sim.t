#!/usr/bin/env bash
# t_sim.t -- the deterministic simulation (tests/sim/, docs/internals.md
# "The simulation") in make check: a replay is the same schedule every
# time, the schedules that once broke the invariant on main hold now, a
# short run of the default config holds, and each control (a protection
# off) breaks it. `make sim` runs the long budget; this needs no server.
set -u
# shellcheck source=tests/tap.bash
. "$(dirname "${BASH_SOURCE[0]}")/tap.bash"
BUILD=${BUILD:-build}
sim=$BUILD/tests/feedsim
test -x "$sim" || bail "$sim is not built"
# The schedules as drawn without swarm testing: this file checks replays,
# the seeds that once broke the invariant and the controls, and the
# contended schedules run about 1.5 times slower on a cluster, which under
# the sanitizers starved the cluster tests beside it (a reshard that did
# not settle in 90 s). `make sim` and `make sim-mutants` (CI) run them.
export SIM_SWARM=0

# A replay is deterministic: the whole trace, twice.
a=$(SIM_SEED=7 "$sim" default 2>&1)
b=$(SIM_SEED=7 "$sim" default 2>&1)
[[ $a == "$b" && $(wc -l <<<"$a") -gt 50 ]]
verdict $? "SIM_SEED=7 replays the same trace ($(wc -l <<<"$a") lines) twice"
like "$(tail -n1 <<<"$a")" '^seed 7 \(default\): [0-9]+ steps, [0-9]+ requests, [0-9]+ pages, [0-9]+ walks, [0-9]+ faults, no violation$' \
    "its last line names the seed, its size and the verdict"

# So is one with an async handle (several requests in flight on one core).
a=$(SIM_SEED=3 "$sim" async 2>&1)
b=$(SIM_SEED=3 "$sim" async 2>&1)
[[ $a == "$b" && $(grep -c '(async) begins' <<<"$a") -gt 10 ]]
verdict $? "SIM_SEED=3 async replays the same trace ($(wc -l <<<"$a") lines) twice"
# A schedule without an async handle draws as before there were any.
a=$(SIM_SEED=3 SIM_ASYNC=0 "$sim" default 2>&1)
b=$(SIM_SEED=3 "$sim" default 2>&1)
! grep -q '(async) begins' <<<"$a" && grep -q '(async) begins' <<<"$b"
verdict $? "SIM_ASYNC=0 leaves the async handle out; seed 3 of default draws one"

# So is one with several servers: under Sentinel, on a cluster.
for mode in sentinel cluster; do
    a=$(SIM_SEED=7 "$sim" "$mode" 2>&1)
    b=$(SIM_SEED=7 "$sim" "$mode" 2>&1)
    [[ $a == "$b" && $(wc -l <<<"$a") -gt 50 ]]
    verdict $? "SIM_SEED=7 $mode replays the same trace ($(wc -l <<<"$a") lines) twice"
done

# Schedules that broke the invariant on main before their fix (the shrunk
# form the simulation printed). The simulation has grown since: they now
# replay the same seed and options, not necessarily the same steps (with
# no async handle, as when they were found: a schedule that draws none is
# the one it was before).
while read -r seed ops mask mode what; do
    [[ $mask == 0 ]] && mask=
    out=$(SIM_ASYNC=0 SIM_SEED=$seed SIM_OPS=$ops SIM_MASK=$mask "$sim" "$mode" 2>&1 | tail -n1)
    like "$out" 'no violation$' "seed $seed ($what) holds: $out"
done <<'EOF2'
1505 4 650,702 default repair list taken off before the DELs landed
640 4 0 cluster repairs given up whole at the first primary down
4411 4 0 cluster repairs given up whole at the first primary down
4897 4 0 cluster repairs given up whole at the first primary down
9368 4 0 cluster a promoted replica's stale copy migrating past the node fences
2479 4 691,2436,3094,3172,3284,3346,3402,3420 cluster-wait a read of a feed whose repair failed
3917 4 347,765,851,966 replica a replica lag proof dated from the replica's late answer
413 4 0 cluster-flap a primary demoted and promoted back, unseen by an idle reader
801 4 1151 cluster-flap a demoted node trusted by its look, then promoted unsynced
EOF2

# Found with an async handle (so replayed with one): a request that joined
# the handle's repair, taken before a hook of the process failed, read the
# copy that missed that hook's write.
out=$(SIM_SEED=43397 SIM_OPS=3 SIM_MASK=892,921 "$sim" default 2>&1 | tail -n1)
like "$out" 'no violation$' "seed 43397 (an async request joined a repair older than the loss it needed dropped) holds: $out"

# A short run of the default config: no violation; and of async, an async
# handle in every schedule.
out=$(SIM_SCHEDULES=400 BUILD=$BUILD tests/sim/run.sh default 2>&1)
like "$(tail -n1 <<<"$out")" '^400 schedules, 0 violations$' "400 schedules of the default config hold"
out=$(SIM_SCHEDULES=400 BUILD=$BUILD tests/sim/run.sh async 2>&1)
like "$(tail -n1 <<<"$out")" '^400 schedules, 0 violations$' "400 schedules with an async handle hold"

# The controls: with the restart fence off, a restart from an older
# snapshot leaves a stale copy; writers killed between commit and hook
# leave one too; a replica with no lag bound serves old pages. The log
# follower (feedcache-sync) repairs the second, the bound the third.
for mode in nofence kills replica-unbounded; do
    out=$(SIM_NO_SHRINK=1 SIM_SCHEDULES=20000 "$sim" "$mode" 2>&1 | tail -n1)
    like "$out" ' 1 violation$' "control $mode: the simulation finds the stale copy ($out)"
done
out=$(SIM_SCHEDULES=400 BUILD=$BUILD tests/sim/run.sh kills-sync 2>&1)
like "$(tail -n1 <<<"$out")" '^400 schedules, 0 violations$' "writers killed, with the log follower: 400 schedules hold"
out=$(SIM_SCHEDULES=400 BUILD=$BUILD tests/sim/run.sh replica 2>&1)
like "$(tail -n1 <<<"$out")" '^400 schedules, 0 violations$' "a lagging replica within pg_replica_max_lag_ms: 400 schedules hold"

# Under Sentinel (a primary, a replica that lags, Sentinels that learn of a
# failover late) and on a Redis Cluster (three primaries and their
# replicas, slots migrating key by key): the defaults hold through
# failovers to a lagging replica that kill the old primary, and WAIT holds
# through those that leave it demoted with its connections or writable a
# while; without WAIT those serve the old primary's copy (docs/ha.md, the
# guarantees: a reader in another process keeps reading the old primary),
# and with the fence off the promoted replica's copy is stale.
# With WAIT a failover never loses a write whose hook returned FEED_OK (a
# violation in the WAIT modes); with the defaults it does, and the fence
# keeps that from leaving a stale copy.
for mode in sentinel sentinel-wait; do
    out=$(SIM_SCHEDULES=300 BUILD=$BUILD tests/sim/run.sh "$mode" 2>&1)
    like "$(tail -n1 <<<"$out")" '^300 schedules, 0 violations$' "$mode: 300 schedules hold"
    lost=$(sed -n 's/.* \([0-9]*\) acknowledged writes lost.*/\1/p' <<<"$out" |
           awk '{ n += $1 } END { print n + 0 }')
    if [[ $mode == sentinel ]]; then
        [[ ${lost:-0} -gt 0 ]]
        verdict $? "sentinel: failovers lost $lost acknowledged writes, and no page or copy was stale"
    else
        [[ ${lost:-1} -eq 0 ]]
        verdict $? "sentinel-wait: failovers lost no acknowledged write"
    fi
done
for mode in sentinel-nowait sentinel-nofence cluster-nofence; do
    out=$(SIM_NO_SHRINK=1 SIM_SCHEDULES=20000 "$sim" "$mode" 2>&1 | tail -n1)
    like "$out" ' 1 violation$' "control $mode: the simulation finds the stale page or copy ($out)"
done
# On a cluster, failovers that kill or demote a primary and slots that
# migrate meanwhile: the defaults and WAIT hold (`make sim-topo` runs
# longer budgets of both).
# cluster-flap: primaries demoted and promoted back (after a resync from
# the replica promoted meanwhile) while readers sit idle towards them: a
# trust that lapses after redis_timeout_ms of silence catches each one.
for mode in cluster cluster-wait cluster-flap; do
    out=$(SIM_SCHEDULES=300 BUILD=$BUILD tests/sim/run.sh "$mode" 2>&1)
    like "$(tail -n1 <<<"$out")" '^300 schedules, 0 violations$' "$mode: 300 schedules hold"
done

echo "1..$n"
((failed == 0))
