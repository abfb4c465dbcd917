#!/usr/bin/env bash
# bench/run.sh -- what `make bench` runs once everything is built.
#
#   start throwaway Redis + PostgreSQL (tools/servers.sh, a temporary folder),
#   load the data set (bench/load.sql: 1,000,000 rows, 1,000 users), run every
#   section of $BUILD/bench/feedbench, count client instructions per call
#   under callgrind ($BUILD/bench/client_cpu), then write the run's
#   latest.md and charts (*.png, gnuplot) into a folder of its own, and stop
#   the servers, also on failure or Ctrl-C.
#
# Every run keeps its results: bench/results/<UTC date and time>/, e.g.
# bench/results/2026-11-23T1808Z/, with latest.md naming the machine (CPU,
# nproc, memory), the load average at start and end, and the git commit.
# bench/results/latest is a symlink to the newest full run. A run with
# BENCH_QUICK or BENCH_SECTIONS goes to <date and time>-quick/ instead
# (ignored by git) and leaves the link alone: its figures are not the
# ones to quote.
#
# Env: BUILD (default build); BENCH_QUICK=1 for a short, noisier run;
# BENCH_SECTIONS="wait sync ..." runs only those (feedbench's sections, plus
# sync for sync/sync_bench.c, client for the callgrind counts and blocking
# for the blocking API before and after the restructure of lib/);
# BENCH_BEFORE (default ec83fbd) the commit section blocking calls "before";
# BENCH_OUT (default bench/results) the folder that holds the runs;
# FEED_KEEP=1 keeps the servers' folder. No figure is asserted here: only
# a failing program (lost servers, a wrong page) fails the run.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
export BUILD=${BUILD:-build}     # sync-bench reads it too
RESULTS=${BENCH_OUT:-bench/results}
SECTIONS=${BENCH_SECTIONS:-}
START=$SECONDS
STARTED=$(date -u '+%Y-%m-%d %H:%M UTC')
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
FULL=1
[[ -n ${BENCH_QUICK:-} || -n $SECTIONS ]] && FULL=0
RUN=$(date -u '+%Y-%m-%dT%H%MZ')
((FULL)) || RUN=$RUN-quick
for n in 2 3 4 5 6 7 8 9; do     # two runs started within a minute
    [[ -e $RESULTS/$RUN ]] || break
    RUN=${RUN%.[0-9]}.$n
done
[[ -e $RESULTS/$RUN ]] && { echo "run.sh: $RESULTS/$RUN exists" >&2; exit 1; }
OUT=$RESULTS/$RUN
# The commit measured, and whether the tree differed from it.
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
[[ -n $(git status --porcelain --untracked-files=no -- . ":(exclude)$RESULTS" 2>/dev/null) ]] &&
    COMMIT="$COMMIT, with uncommitted changes"
# Is section $1 part of this run?
want() { [[ -z $SECTIONS || " $SECTIONS " == *" $1 "* ]]; }

for b in "$BUILD/bench/feedbench" "$BUILD/bench/client_cpu"; do
    [[ -x $b ]] || { echo "run.sh: $b is missing (make bench-build)" >&2; exit 1; }
done
for t in valgrind gnuplot psql redis-server; do
    command -v "$t" >/dev/null || { echo "run.sh: $t is missing (tools/deps.sh)" >&2; exit 1; }
done

DIR=$(mktemp -d -t feedcache-bench.XXXXXX)
WORK=$DIR/work
# shellcheck disable=SC2317  # invoked by the trap
cleanup() {
    local rc=$?
    # Section async freezes servers (SIGSTOP) for a while: one left frozen by
    # a bench that was killed would not stop.
    tools/servers.sh pg-thaw "$DIR" >/dev/null 2>&1 || true
    tools/servers.sh redis-thaw "$DIR" >/dev/null 2>&1 || true
    tools/servers.sh stop "$DIR" || true
    # A run that did not finish leaves no results folder behind.
    [[ -n ${OUT:-} && -d $OUT && ! -f $OUT/latest.md ]] && rm -rf "$OUT"
    if [[ ${FEED_KEEP:-} == 1 ]]; then
        echo "run.sh: kept $DIR" >&2
    else
        rm -rf "$DIR"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

tools/servers.sh start "$DIR"
tools/servers.sh sentinel-start "$DIR"     # section wait: a primary with a replica
tools/servers.sh cluster-start "$DIR"   # sections "cluster", "window": 3 primaries + 3 replicas
# shellcheck source=/dev/null
. "$DIR/env"
# shellcheck source=/dev/null
. "$DIR/ha.env"
mkdir -p "$WORK"
touch "$WORK/summary.tsv"

echo "bench: loading 1,000,000 rows (bench/load.sql)" >&2
t0=$SECONDS
PGOPTIONS='-c client_min_messages=warning' psql -X -q -v ON_ERROR_STOP=1 -f bench/load.sql
LOAD_S=$((SECONDS - t0))
# section "replica": a streaming replica of the loaded primary
tools/servers.sh replica-start "$DIR"
# shellcheck source=/dev/null
. "$DIR/env"

NPROC=$(nproc)
FB_SECTIONS=()
for s in $SECTIONS; do
    case $s in sync | client | blocking) ;; *) FB_SECTIONS+=("$s") ;; esac
done
# Section async freezes PostgreSQL and Redis for a while (tools/servers.sh
# pg-freeze, redis-freeze): DIR/env, sourced above, names the servers' folder
# (FEED_SERVERS_DIR) and the script (FEED_SERVERS) to it.
if [[ -z $SECTIONS ]] || ((${#FB_SECTIONS[@]})); then
    BENCH_NPROC=$NPROC "$BUILD/bench/feedbench" "$WORK" "${FB_SECTIONS[@]}"
fi

# feedcache-sync: apply rate, commit-to-cache lag, PostgreSQL cost (sync/sync_bench.c)
if want sync; then
    "$BUILD/sync/sync-bench" "$WORK" >>"$WORK/summary.tsv"
fi

# ---------------------------------------------------------------- client CPU
# Instructions per call, deterministic: callgrind counts every instruction the
# client runs (hiredis, libc, the library). Two runs of different lengths for
# each kind of call; the difference per call removes start-up.
N1=200
N2=1200
# Instructions of one run of client_cpu MODE DEPTH N: CG_BIN (default this
# build's) and CG_TAG (the name of its output files) pick another build.
cg_count() {  # mode depth n
    local f="$WORK/cg${CG_TAG:-}.$1.$2.$3"
    valgrind --tool=callgrind --callgrind-out-file="$f" \
        "${CG_BIN:-$BUILD/bench/client_cpu}" "$1" "$2" "$3" >/dev/null 2>"$f.log" ||
        { cat "$f.log" >&2; exit 1; }
    awk '/^(summary|totals):/ { print $2; exit }' "$f"
}
client_cpu() {
    echo "bench: client instructions per call (callgrind)" >&2
    {
        echo "## Client CPU: instructions per cached page"
        echo
        echo "\`valgrind --tool=callgrind\` on \`$BUILD/bench/client_cpu\`: the instructions the"
        echo "client process executes (the library, hiredis, libc; not the kernel), for $N2 and"
        echo "for $N1 calls; per call = the difference / $((N2 - N1)), so start-up (connecting,"
        echo "loading scripts) drops out. feedcache is \`feed_page\` of uid 2 (cached) with"
        echo "the cursor at the given depth, on a handle that walked there page by page (it"
        echo "holds the rank hint: a reader's own next page), and on one that never saw the"
        echo "cursor (\"no hint\": the read by score), and through \`feed_page_ranked\` on one"
        echo "that never saw it, given the rank a cursor token carries (\"rank in token\"); the"
        echo "peer is a bare hiredis \`ZREVRANGE\` of the same ranks with the same parse of the"
        echo "reply into (score, id) pairs."
        echo
        echo "| depth | feed_page | feed_page, no hint | feed_page_ranked, rank in token | bare ZREVRANGE + parse | feed_page / bare (target <= 1.5x) |"
        echo "| ---: | ---: | ---: | ---: | ---: | ---: |"
    } >"$WORK/sec_client.md"
    # Warm uid 2 on the single Redis and on the cluster first, uncounted: a run
    # whose warm-up page is a miss counts a rebuild of 1,000 rows in its start-up,
    # which the other run of the pair does not, and the difference per call
    # comes out too low (seen: 44,544 instead of 46,829 at depth 0).
    "$BUILD/bench/client_cpu" page 0 1 >/dev/null
    FEED_BENCH_CLUSTER=1 "$BUILD/bench/client_cpu" page 0 1 >/dev/null
    worst=0
    clrow=()
    clworst=0
    for depth in 0 500; do
        p1=$(cg_count page $depth $N1); p2=$(cg_count page $depth $N2)
        c1=$(cg_count cold $depth $N1); c2=$(cg_count cold $depth $N2)
        k1=$(cg_count ranked $depth $N1); k2=$(cg_count ranked $depth $N2)
        r1=$(cg_count raw $depth $N1); r2=$(cg_count raw $depth $N2)
        # The same page through the Redis Cluster (target <= 1.1x the single
        # Redis: routing must cost next to nothing on the client).
        q1=$(FEED_BENCH_CLUSTER=1 cg_count page $depth $N1)
        q2=$(FEED_BENCH_CLUSTER=1 cg_count page $depth $N2)
        page=$(((p2 - p1) / (N2 - N1)))
        cold=$(((c2 - c1) / (N2 - N1)))
        ranked=$(((k2 - k1) / (N2 - N1)))
        raw=$(((r2 - r1) / (N2 - N1)))
        clp=$(((q2 - q1) / (N2 - N1)))
        ratio=$(awk -v a="$page" -v b="$raw" 'BEGIN { printf "%.2f", a / b }')
        mark=$(awk -v r="$ratio" 'BEGIN { print (r <= 1.5) ? "pass" : "MISS" }')
        printf '| %s | %s | %s | %s | %s | **%sx** %s |\n' "$depth" "$(printf "%'d" "$page")" \
            "$(printf "%'d" "$cold")" "$(printf "%'d" "$ranked")" "$(printf "%'d" "$raw")" "$ratio" \
            "$mark" >>"$WORK/sec_client.md"
        worst=$(awk -v r="$ratio" -v w="$worst" 'BEGIN { print (r > w) ? r : w }')
        clr=$(awk -v a="$clp" -v b="$page" 'BEGIN { printf "%.3f", a / b }')
        clrow+=("$(printf '| %s | %s | %s | **%sx** %s |' "$depth" "$(printf "%'d" "$clp")" \
            "$(printf "%'d" "$page")" "$clr" "$(awk -v r="$clr" 'BEGIN { print (r <= 1.1) ? "pass" : "MISS" }')")")
        clworst=$(awk -v r="$clr" -v w="$clworst" 'BEGIN { print (r > w) ? r : w }')
    done
    printf 'client_cpu\tclient CPU: instructions per cached page (callgrind) vs a bare hiredis ZREVRANGE call and parse\t<= 1.5x\tworst %sx\t%s\n' \
        "$worst" "$(awk -v r="$worst" 'BEGIN { print (r <= 1.5) ? "pass" : "MISS" }')" >>"$WORK/summary.tsv"

    clv=$(awk -v r="$clworst" 'BEGIN { print (r <= 1.1) ? "pass" : "MISS" }')
    {
        echo
        echo "Through the Redis Cluster (\`FEED_BENCH_CLUSTER=1\`, the same runs of"
        echo "\`client_cpu page\`): the first page (depth 0) and a next page (depth 500, on"
        echo "the handle that walked there), against the single Redis's figures above."
        echo
        echo "| depth | feed_page through the cluster | feed_page, single Redis | cluster / single (target <= 1.1x) |"
        echo "| ---: | ---: | ---: | ---: |"
        printf '%s\n' "${clrow[@]}"
    } >>"$WORK/sec_client.md"
    printf 'cluster_cpu\tRedis Cluster: client instructions per cached page (first / next), cluster / single (callgrind)\t<= 1.1x\tworst %sx\t%s\n' \
        "$clworst" "$clv" >>"$WORK/summary.tsv"
}
want client && client_cpu

# ---------------------------------------------------------------- blocking
# The blocking API before and after lib/ was restructured: this tree's
# bench/client_cpu.c built against the library of BENCH_BEFORE too (a
# snapshot of that commit from git, built once into
# $BUILD/bench/before-<commit>/), both run against the same servers. The
# program uses the public API only, and its timed loop is the same file at
# both commits. Three figures per page, at depth 0 and 500 (the handle
# walked there): client instructions (callgrind, as client_cpu above),
# round trips (feed_stats.redis_calls) and Redis CPU (/proc), the last
# two from FEED_BENCH_REPORT=1 runs, before and after interleaved by round.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
blocking_before_after() {
    local before=${BENCH_BEFORE:-ec83fbd} full tree old new rounds n
    echo "bench: the blocking API before and after the restructure ($before)" >&2
    if ! command -v git >/dev/null ||
        ! full=$(git rev-parse -q --verify "$before^{commit}" 2>/dev/null); then
        echo "bench: commit $before is not in this repository: section blocking skipped" >&2
        {
            echo "## The blocking API before and after the restructure"
            echo
            echo "Not measured: commit \`$before\` (BENCH_BEFORE) is not in this repository."
        } >"$WORK/sec_blocking.md"
        printf 'blocking_instr\tblocking API before and after the restructure\t<= 1.05x\tnot measured (no commit %s)\tMISS\n' \
            "$before" >>"$WORK/summary.tsv"
        return
    fi
    full=${full:0:12}
    tree=$BUILD/bench/before-$full
    old=$tree/build/bench/client_cpu
    new=$BUILD/bench/client_cpu
    if [[ ! -x $old ]] || ! cmp -s bench/client_cpu.c "$tree/bench/client_cpu.c"; then
        echo "bench: building $full into $tree" >&2
        rm -rf "$tree"
        mkdir -p "$tree"
        git archive "$full" | tar -x -C "$tree"
        cp bench/client_cpu.c "$tree/bench/client_cpu.c"
        make -C "$tree" -j2 BUILD=build build/bench/client_cpu >"$WORK/before-build.log" 2>&1 ||
            { cat "$WORK/before-build.log" >&2; exit 1; }
    fi
    rounds=7 n=20000
    [[ -n ${BENCH_QUICK:-} ]] && rounds=3 n=5000
    "$new" page 0 1 >/dev/null     # warm uid 2, uncounted
    "$old" page 0 1 >/dev/null
    local depth which r bin line ci cb ca rows=() worst_i=0 worst_c=0 rt_same=1 rt_all=""
    for ((r = 0; r < rounds; r++)); do
        for depth in 0 500; do
            for which in before after; do
                # the order turns around every other round
                ((r % 2)) && which=$([[ $which == before ]] && echo after || echo before)
                bin=$([[ $which == before ]] && echo "$old" || echo "$new")
                line=$(FEED_BENCH_REPORT=1 "$bin" page "$depth" "$n")
                # calls N redis_calls R redis_cpu_ns C wall_ns W
                awk -v r="$r" '{ printf "%d %.4f %.4f %.1f\n", r, $4 / $2, $6 / $2 / 1000, $2 / ($8 / 1e9) }' \
                    <<<"$line" >>"$WORK/blocking.$which.$depth"
            done
        done
    done
    for depth in 0 500; do
        ci=$(CG_BIN=$old CG_TAG=.before cg_count page $depth $N1)
        cb=$(CG_BIN=$old CG_TAG=.before cg_count page $depth $N2)
        local ib=$(((cb - ci) / (N2 - N1)))
        ci=$(cg_count page $depth $N1)
        ca=$(cg_count page $depth $N2)
        local ia=$(((ca - ci) / (N2 - N1)))
        local ri rtb rta cpub cpua rc rateb ratea
        ri=$(awk -v a="$ia" -v b="$ib" 'BEGIN { printf "%.3f", a / b }')
        rtb=$(awk '{ print $2 }' "$WORK/blocking.before.$depth" | median)
        rta=$(awk '{ print $2 }' "$WORK/blocking.after.$depth" | median)
        cpub=$(awk '{ print $3 }' "$WORK/blocking.before.$depth" | median)
        cpua=$(awk '{ print $3 }' "$WORK/blocking.after.$depth" | median)
        rateb=$(awk '{ print $4 }' "$WORK/blocking.before.$depth" | median)
        ratea=$(awk '{ print $4 }' "$WORK/blocking.after.$depth" | median)
        # Redis CPU: the median of the per-round ratios (rounds paired by number)
        rc=$(join <(sort -k1,1 "$WORK/blocking.after.$depth") <(sort -k1,1 "$WORK/blocking.before.$depth") |
            awk '{ print $3 / $6 }' | median)
        rc=$(awk -v v="$rc" 'BEGIN { printf "%.3f", v }')
        [[ $rtb == "$rta" ]] || rt_same=0
        rt_all+="${rt_all:+; }depth $depth: $(printf '%.2f / %.2f' "$rtb" "$rta")"
        worst_i=$(awk -v r="$ri" -v w="$worst_i" 'BEGIN { print (r > w) ? r : w }')
        worst_c=$(awk -v r="$rc" -v w="$worst_c" 'BEGIN { print (r > w) ? r : w }')
        rows+=("$(printf '| %s | %s / %s | **%sx** %s | %.2f / %.2f | %s / %s µs | **%sx** %s | %s / %s |' \
            "$depth" "$(printf "%'d" "$ib")" "$(printf "%'d" "$ia")" "$ri" \
            "$(awk -v r="$ri" 'BEGIN { print (r <= 1.05) ? "pass" : "MISS" }')" "$rtb" "$rta" \
            "$(printf '%.2f' "$cpub")" "$(printf '%.2f' "$cpua")" "$rc" \
            "$(awk -v r="$rc" 'BEGIN { print (r <= 1.05) ? "pass" : "MISS" }')" \
            "$(printf "%'.0f" "$rateb")" "$(printf "%'.0f" "$ratea")")")
    done
    {
        echo "## The blocking API before and after the restructure"
        echo
        echo "\`feed_page\` of uid 2's cached 1,000-item feed, first page (depth 0) and a next"
        echo "page at depth 500 on the handle that walked there: this tree's library against"
        echo "the one of commit \`$full\` (BENCH_BEFORE, the last before lib/ became a core of"
        echo "decisions and drivers), both driven by this tree's \`bench/client_cpu.c\` (the"
        echo "public API only; its timed loop is the same file at both commits), each with its"
        echo "own defaults (\`feed_config_init\`), against the same servers. Instructions per"
        echo "page: callgrind, ($N2 - $N1 calls) / $((N2 - N1)), as in the client section."
        echo "Round trips per page: \`feed_stats.redis_calls\` over $n calls. Redis CPU per page:"
        echo "the redis-server process's CPU (/proc) over those calls; $rounds rounds, before"
        echo "and after interleaved, the ratio is the median of the per-round ratios."
        echo
        echo "| depth | instructions per page: before / after | after / before (target <= 1.05x) | round trips per page: before / after | Redis CPU per page: before / after | after / before (target <= 1.05x) | pages/s, one thread: before / after |"
        echo "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        printf '%s\n' "${rows[@]}"
    } >"$WORK/sec_blocking.md"
    {
        printf 'blocking_instr\tblocking API after / before the restructure (%s): client instructions per cached page, depth 0 and 500 (callgrind)\t<= 1.05x\tworst %sx\t%s\n' \
            "$full" "$worst_i" "$(awk -v r="$worst_i" 'BEGIN { print (r <= 1.05) ? "pass" : "MISS" }')"
        printf 'blocking_rt\tblocking API before / after: round trips per cached page (feed_stats.redis_calls)\tthe same\t%s\t%s\n' \
            "$rt_all" "$( ((rt_same)) && echo pass || echo MISS)"
        printf 'blocking_cpu\tblocking API after / before: Redis CPU per cached page, depth 0 and 500\t<= 1.05x\tworst %sx\t%s\n' \
            "$worst_c" "$(awk -v r="$worst_c" 'BEGIN { print (r <= 1.05) ? "pass" : "MISS" }')"
    } >>"$WORK/summary.tsv"
}
want blocking && blocking_before_after

# ---------------------------------------------------------------- charts
# From the data of the pages, writes (rebuild) and pg sections: a run
# without one of them has none of those charts; the merge chart comes with
# the merge section's data.
mkdir -p "$OUT"
CHARTS=1
for d in pages rebuild pg; do [[ -f $WORK/$d.dat ]] || CHARTS=0; done
MERGE_CHART=0
[[ -f $WORK/merge.dat ]] && MERGE_CHART=1
if ((CHARTS || MERGE_CHART)); then
    echo "bench: charts (gnuplot)" >&2
    gnuplot -e "datadir='$WORK'; outdir='$OUT'; core=$CHARTS; merge=$MERGE_CHART" bench/plot.gp
fi

# ---------------------------------------------------------------- latest.md
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
MEM=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
REDIS_V=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
PG_V=$(psql -X -At -c 'SHOW server_version')
HIREDIS_V=$(dpkg-query -W -f='${Version}' libhiredis-dev 2>/dev/null || echo '?')
CC_V=$(${CC:-cc} --version | head -n1)
TOTAL_S=$((SECONDS - START))
LOAD_END=$(cut -d' ' -f1-3 /proc/loadavg)
{
    echo "# feedcache benchmark results"
    echo
    echo "Written by \`make bench\` (bench/run.sh), started $STARTED,"
    echo "in $((TOTAL_S / 60)) min $((TOTAL_S % 60)) s (data load: ${LOAD_S} s)."
    [[ -n ${BENCH_QUICK:-} ]] && echo "**BENCH_QUICK run: fewer, shorter rounds; noisier figures.**"
    [[ -n $SECTIONS ]] && echo "**Sections $SECTIONS only: not a full run.**"
    echo
    echo "| machine | |"
    echo "| --- | --- |"
    echo "| CPU | $CPU, \`nproc\` = $NPROC |"
    echo "| memory | $MEM |"
    echo "| load average (1, 5, 15 min) | $LOAD_START at the start, $LOAD_END at the end |"
    echo "| commit | $COMMIT |"
    echo "| kernel | $(uname -sr) |"
    echo "| Redis | $REDIS_V (throwaway, defaults; \`tools/servers.sh\`) |"
    echo "| PostgreSQL | $PG_V (throwaway: fsync off, shared_buffers default) |"
    echo "| client | hiredis $HIREDIS_V, libpq, $CC_V, -O2 |"
    echo
    echo "Clients and servers share the machine, over loopback TCP. Every comparison"
    echo "runs in the same process, interleaved: rounds alternate between the variants"
    echo "(the order rotates every round), so drift and noise from other work (the"
    echo "load average above) hit all of them alike. The headline figures are ratios:"
    echo "the median over rounds of each round's ratio. Absolute figures (pages/s, µs)"
    echo "are medians and percentiles on this machine and move from run to run."
    echo
    echo "## Targets"
    echo
    echo "| figure | target | measured | |"
    echo "| --- | --- | --- | --- |"
    for key in cpu_idle cpu_writes cpu_clients pages_raw srv_cpu next_1k next_100k rebuild miss \
               pg_rate pg_cpu stampede fanout memory mem_pages encoding client_cpu wait_hook \
               wait_page wait_cluster_hook wait_cluster_fanout sync_apply sync_lag cluster_rt \
               cluster_cpu cluster_fanout async_pages async_cpu async_limit async_frozen \
               async_memory blocking_instr blocking_rt blocking_cpu \
               merge_first merge_depth merge_xover window_zombie window_partition \
               filter_cpu filter_sql filter_memory filter_memory_author; do
        awk -F'\t' -v k="$key" '$1 == k { printf "| %s | %s | %s | %s |\n", $2, $3, $4, $5 }' \
            "$WORK/summary.tsv"
    done
    echo
    if ((CHARTS)); then
        echo "![pages/s and Redis server time per page, by depth](pages.png)"
        echo
        echo "![installing a rebuild: server time by size](rebuild.png)"
        echo "![cached page vs PostgreSQL: pages/s and server CPU per page](pg.png)"
        echo
    fi
    for s in cpu pages client writes stampede fanout pg memory wait fence replica sync cluster \
             async blocking merge window tls filter; do
        [[ -f $WORK/sec_$s.md ]] && { cat "$WORK/sec_$s.md"; echo; }
    done
    echo "How these figures are made and how to read them, the misses included:"
    echo "[docs/performance.md](../../../docs/performance.md)."
} >"$OUT/latest.md"

# The newest full run: bench/results/latest, swapped in one rename.
if ((FULL)); then
    ln -sfn "$RUN" "$RESULTS/latest.tmp"
    mv -Tf "$RESULTS/latest.tmp" "$RESULTS/latest"
fi

echo "bench: wrote $OUT/latest.md$( ((CHARTS)) && echo " and $OUT/{pages,rebuild,pg}.png")$( ((MERGE_CHART)) && echo " and $OUT/merge.png") in $((TOTAL_S / 60)) min $((TOTAL_S % 60)) s" >&2
awk -F'\t' '{ printf "  %-5s %s: %s\n", $5, $1, $4 }' "$WORK/summary.tsv" >&2
