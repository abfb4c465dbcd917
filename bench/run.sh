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
# sync for sync/sync_bench.c, client for the callgrind counts, blocking
# for the blocking API before and after the restructure of lib/ and hiredis
# for two hiredis builds side by side);
# BENCH_BEFORE (default ec83fbd) the commit section blocking calls "before";
# BENCH_COMPARE_HIREDIS=DIR a second hiredis (an install folder, e.g.
# build/hiredis-1.2 from tools/hiredis.sh) for section hiredis, which builds
# this tree's client_cpu and loop_cpu against it into BENCH_COMPARE_BUILD
# (default build-<name of DIR>) and runs them beside $BUILD's;
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
    case $s in sync | client | blocking | hiredis) ;; *) FB_SECTIONS+=("$s") ;; esac
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

# ---------------------------------------------------------------- two builds
# Sections blocking and hiredis run the same programs of two builds (their
# bench folders, "a" and "b") against the same servers, in interleaved
# rounds, and compare them by the same figures. Helpers:
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# ab_rounds TAG DIR_A DIR_B ROUNDS CASE...: each CASE ("program mode depth
# n") runs as FEED_BENCH_REPORT=1 DIR/program mode depth n, from both
# folders each round, the order turned around every other round. A CASE
# may be a group, "case+case+...": its runs follow each other from one
# folder before the other's (so that a figure and its peer in one build are
# measured next to each other), in the reverse order every other round.
# Lines "round round_trips redis_cpu_us pages_per_s", per page, go to
# $WORK/TAG.a.MODE.DEPTH and $WORK/TAG.b.MODE.DEPTH.
ab_rounds() {
    local tag=$1 da=$2 db=$3 rounds=$4 r g c prog mode depth n which line
    local -a sub
    shift 4
    for ((r = 0; r < rounds; r++)); do
        for g in "$@"; do
            IFS=+ read -r -a sub <<<"$g"
            for which in a b; do
                # the order turns around every other round
                ((r % 2)) && which=$([[ $which == a ]] && echo b || echo a)
                for ((c = 0; c < ${#sub[@]}; c++)); do
                    read -r prog mode depth n <<<"${sub[$(((r % 2) ? ${#sub[@]} - 1 - c : c))]}"
                    line=$(FEED_BENCH_REPORT=1 "$([[ $which == a ]] && echo "$da" || echo "$db")/$prog" \
                        "$mode" "$depth" "$n")
                    # calls N redis_calls R redis_cpu_ns C wall_ns W
                    awk -v r="$r" '{ printf "%d %.4f %.4f %.1f\n", r, $4 / $2, $6 / $2 / 1000, $2 / ($8 / 1e9) }' \
                        <<<"$line" >>"$WORK/$tag.$which.$mode.$depth"
                done
            done
        done
    done
}
# Column K (2 round trips, 3 Redis CPU, 4 pages/s) of FILE: its median.
col_median() { awk -v k="$2" '{ print $k }' "$1" | median; }
# ... and its range over the rounds, "min-max".
col_range() { awk -v k="$2" '{ print $k }' "$1" | sort -g | awk 'NR == 1 { a = $1 } { b = $1 } END { printf "%.2f-%.2f", a, b }'; }
# FILE1 / FILE2 round by round (rounds paired by number), every column, in
# the same layout: the input of col_median or of another per_round.
per_round() {
    join <(sort -k1,1 "$1") <(sort -k1,1 "$2") |
        awk '{ printf "%s %.6f %.6f %.6f\n", $1, ($5 > 0 ? $2 / $5 : 0), $3 / $6, $4 / $7 }'
}
# Client instructions per call of BIN MODE DEPTH (callgrind, as section
# client: ($N2 - $N1 calls) / $((N2 - N1))); TAG names its output files.
cg_per_call() {  # bin tag mode depth
    local x y
    x=$(CG_BIN=$1 CG_TAG=$2 cg_count "$3" "$4" $N1)
    y=$(CG_BIN=$1 CG_TAG=$2 cg_count "$3" "$4" $N2)
    echo $(((y - x) / (N2 - N1)))
}
within() { awk -v r="$1" -v t="$2" 'BEGIN { print (r <= t) ? "pass" : "MISS" }'; }

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
    # before is "a", after "b"
    ab_rounds blocking "$(dirname "$old")" "$(dirname "$new")" "$rounds" \
        "client_cpu page 0 $n" "client_cpu page 500 $n"
    local depth rows=() worst_i=0 worst_c=0 rt_same=1 rt_all="" fb fa
    for depth in 0 500; do
        local ib ia ri rtb rta cpub cpua rc rateb ratea
        ib=$(cg_per_call "$old" .before page $depth)
        ia=$(cg_per_call "$new" "" page $depth)
        ri=$(awk -v a="$ia" -v b="$ib" 'BEGIN { printf "%.3f", a / b }')
        fb=$WORK/blocking.a.page.$depth fa=$WORK/blocking.b.page.$depth
        rtb=$(col_median "$fb" 2) rta=$(col_median "$fa" 2)
        cpub=$(col_median "$fb" 3) cpua=$(col_median "$fa" 3)
        rateb=$(col_median "$fb" 4) ratea=$(col_median "$fa" 4)
        # Redis CPU: the median of the per-round ratios (rounds paired by number)
        rc=$(awk -v v="$(per_round "$fa" "$fb" | awk '{ print $3 }' | median)" 'BEGIN { printf "%.3f", v }')
        [[ $rtb == "$rta" ]] || rt_same=0
        rt_all+="${rt_all:+; }depth $depth: $(printf '%.2f / %.2f' "$rtb" "$rta")"
        worst_i=$(awk -v r="$ri" -v w="$worst_i" 'BEGIN { print (r > w) ? r : w }')
        worst_c=$(awk -v r="$rc" -v w="$worst_c" 'BEGIN { print (r > w) ? r : w }')
        rows+=("$(printf '| %s | %s / %s | **%sx** %s | %.2f / %.2f | %s / %s µs | **%sx** %s | %s / %s |' \
            "$depth" "$(printf "%'d" "$ib")" "$(printf "%'d" "$ia")" "$ri" "$(within "$ri" 1.05)" \
            "$rtb" "$rta" "$(printf '%.2f' "$cpub")" "$(printf '%.2f' "$cpua")" "$rc" \
            "$(within "$rc" 1.05)" "$(printf "%'.0f" "$rateb")" "$(printf "%'.0f" "$ratea")")")
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
            "$full" "$worst_i" "$(within "$worst_i" 1.05)"
        printf 'blocking_rt\tblocking API before / after: round trips per cached page (feed_stats.redis_calls)\tthe same\t%s\t%s\n' \
            "$rt_all" "$( ((rt_same)) && echo pass || echo MISS)"
        printf 'blocking_cpu\tblocking API after / before: Redis CPU per cached page, depth 0 and 500\t<= 1.05x\tworst %sx\t%s\n' \
            "$worst_c" "$(within "$worst_c" 1.05)"
    } >>"$WORK/summary.tsv"
}
want blocking && blocking_before_after

# ---------------------------------------------------------------- hiredis
# This tree against two hiredis builds in one run: bench/client_cpu.c and
# bench/loop_cpu.c of $BUILD (its hiredis, the system's by default: "a")
# and the same files built against BENCH_COMPARE_HIREDIS (an install
# folder, e.g. build/hiredis-1.2 from tools/hiredis.sh) into
# BENCH_COMPARE_BUILD (default build-<its name>, as make HIREDIS=DIR names
# it: "b"), run side by side as section blocking runs before and after. The
# headline figures each build gives (Redis CPU per cached page vs a plain
# ZREVRANGE; one loop thread's pages/s vs one blocking thread's), then b / a
# of each, and the figures under them: client instructions (callgrind),
# Redis CPU, round trips and pages/s per page.
hiredis_lib() {  # the libhiredis a program loads
    ldd "$1" | awk '$1 ~ /^libhiredis\.so/ { print $3; exit }'
}
hiredis_version() {  # program: the version of the hiredis it loads
    local so hd
    so=$(hiredis_lib "$1")
    hd=$(dirname "$(dirname "$so")")
    if [[ -f $hd/lib/pkgconfig/hiredis.pc ]]; then
        sed -n 's/^Version: //p' "$hd/lib/pkgconfig/hiredis.pc"
    else
        dpkg-query -W -f='${Version}' libhiredis-dev 2>/dev/null ||
            pkg-config --modversion hiredis 2>/dev/null || basename "$(readlink -f "$so")"
    fi
}
compare_build() {  # DIR (absolute): the build folder of BENCH_COMPARE_HIREDIS=DIR
    echo "${BENCH_COMPARE_BUILD:-build-$(basename "$1")}"
}
hiredis_not_measured() {  # why
    echo "bench: section hiredis skipped: $1" >&2
    {
        echo "## hiredis builds side by side"
        echo
        echo "Not measured: $1."
    } >"$WORK/sec_hiredis.md"
    printf 'hiredis_cpu\thiredis builds side by side\twithin 5%%\tnot measured (%s)\tMISS\n' "$1" \
        >>"$WORK/summary.tsv"
}
hiredis_side_by_side() {
    local dir=${BENCH_COMPARE_HIREDIS:-} cmp da db va vb rounds n nl
    echo "bench: this tree against two hiredis builds, side by side" >&2
    if [[ -z $dir ]]; then
        hiredis_not_measured "no second hiredis (BENCH_COMPARE_HIREDIS=DIR; tools/hiredis.sh build/hiredis-1.2 makes one)"
        return
    fi
    if [[ ! -f $dir/include/hiredis/hiredis.h ]]; then
        hiredis_not_measured "no hiredis installed under $dir"
        return
    fi
    dir=$(cd "$dir" && pwd)
    cmp=$(compare_build "$dir")
    da=$BUILD/bench db=$cmp/bench
    [[ -x $da/loop_cpu ]] || { echo "run.sh: $da/loop_cpu is missing (make bench-build)" >&2; exit 1; }
    echo "bench: building client_cpu and loop_cpu against $dir into $cmp" >&2
    make -j2 HIREDIS="$dir" BUILD="$cmp" "$db/client_cpu" "$db/loop_cpu" >"$WORK/hiredis-build.log" 2>&1 ||
        { cat "$WORK/hiredis-build.log" >&2; exit 1; }
    if [[ $(hiredis_lib "$da/client_cpu") == "$(hiredis_lib "$db/client_cpu")" ]]; then
        hiredis_not_measured "$BUILD and $cmp load the same hiredis ($(hiredis_lib "$da/client_cpu"))"
        return
    fi
    va=$(hiredis_version "$da/client_cpu") vb=$(hiredis_version "$db/client_cpu")
    rounds=21 n=6000 nl=30000
    [[ -n ${BENCH_QUICK:-} ]] && rounds=5 n=3000 nl=15000
    "$da/client_cpu" page 0 1 >/dev/null     # warm uid 2, uncounted
    "$db/client_cpu" page 0 1 >/dev/null
    # Each headline figure's two runs follow each other in one build (the
    # loop, the blocking first page, the plain read; then depth 500).
    ab_rounds hiredis "$da" "$db" "$rounds" \
        "loop_cpu libevent 0 $nl+client_cpu page 0 $n+client_cpu raw 0 $n" \
        "client_cpu page 500 $n+client_cpu raw 500 $n"

    local w=$WORK/hiredis x d head=() rows=() worst_h=0 worst_l=0 r ia ib
    # Headline 1, each build: Redis CPU per page, feed_page / plain ZREVRANGE.
    for d in 0 500; do
        for x in a b; do per_round "$w.$x.page.$d" "$w.$x.raw.$d" >"$w.$x.vsraw.$d"; done
        per_round "$w.b.vsraw.$d" "$w.a.vsraw.$d" >"$w.ba.vsraw.$d"
        r=$(awk -v v="$(col_median "$w.ba.vsraw.$d" 3)" 'BEGIN { printf "%.3f", v }')
        worst_h=$(awk -v r="$r" -v w="$worst_h" 'BEGIN { d = r > 1 ? r - 1 : 1 - r; e = w > 1 ? w - 1 : 1 - w; print (w == 0 || d > e) ? r : w }')
        # shellcheck disable=SC2016  # the backquotes are Markdown's
        head+=("$(printf '| Redis CPU per cached page vs a plain `ZREVRANGE` of the same items, %s | %.3fx | %.3fx | **%sx** %s | %s |' \
            "$([[ $d == 0 ]] && echo "first page" || echo "depth 500 (rank hint)")" \
            "$(col_median "$w.a.vsraw.$d" 3)" "$(col_median "$w.b.vsraw.$d" 3)" "$r" \
            "$(awk -v r="$r" 'BEGIN { print (r >= 0.95 && r <= 1.05) ? "pass" : "MISS" }')" \
            "$(col_range "$w.ba.vsraw.$d" 3)")")
    done
    # Headline 2, each build: one loop thread's pages/s / one blocking thread's.
    for x in a b; do per_round "$w.$x.libevent.0" "$w.$x.page.0" >"$w.$x.loop.0"; done
    per_round "$w.b.loop.0" "$w.a.loop.0" >"$w.ba.loop.0"
    worst_l=$(awk -v v="$(col_median "$w.ba.loop.0" 4)" 'BEGIN { printf "%.3f", v }')
    head+=("$(printf '| cached first pages/s: one libevent loop thread (256 in flight) vs one blocking thread | %.2fx | %.2fx | **%sx** %s | %s |' \
        "$(col_median "$w.a.loop.0" 4)" "$(col_median "$w.b.loop.0" 4)" "$worst_l" \
        "$(awk -v r="$worst_l" 'BEGIN { print (r >= 0.95 && r <= 1.05) ? "pass" : "MISS" }')" \
        "$(col_range "$w.ba.loop.0" 4)")")
    head+=("$(printf '| Redis CPU per cached first page: one loop thread vs one blocking thread | %.3fx | %.3fx | **%.3fx** | %s |' \
        "$(col_median "$w.a.loop.0" 3)" "$(col_median "$w.b.loop.0" 3)" "$(col_median "$w.ba.loop.0" 3)" \
        "$(col_range "$w.ba.loop.0" 3)")")

    # Under them: per page, each build, and b / a.
    local worst_i=1 worst_c=1 what mode
    for what in "page 0|feed_page, first page" "page 500|feed_page, depth 500 (rank hint)" \
                "raw 0|bare hiredis ZREVRANGE + parse, first page" "libevent 0|feed_async_page, one libevent loop, 256 in flight"; do
        mode=${what%%|*} d=${mode#* } mode=${mode% *}
        local prog=client_cpu
        [[ $mode == libevent ]] && prog=loop_cpu
        ia=$(cg_per_call "$da/$prog" .ha "$mode" "$d")
        ib=$(cg_per_call "$db/$prog" .hb "$mode" "$d")
        r=$(awk -v a="$ia" -v b="$ib" 'BEGIN { printf "%.3f", b / a }')
        [[ $mode == raw ]] || worst_i=$(awk -v r="$r" -v w="$worst_i" 'BEGIN { print (r > w) ? r : w }')
        per_round "$w.b.$mode.$d" "$w.a.$mode.$d" >"$w.ba.$mode.$d"
        local rc
        rc=$(awk -v v="$(col_median "$w.ba.$mode.$d" 3)" 'BEGIN { printf "%.3f", v }')
        [[ $mode == raw ]] || worst_c=$(awk -v r="$rc" -v w="$worst_c" 'BEGIN { print (r > w) ? r : w }')
        rows+=("$(printf '| %s | %s / %s | **%sx** | %.2f / %.2f | %.2f / %.2f µs | **%sx** | %s / %s | **%.3fx** |' \
            "${what#*|}" "$(printf "%'d" "$ia")" "$(printf "%'d" "$ib")" "$r" \
            "$(col_median "$w.a.$mode.$d" 2)" "$(col_median "$w.b.$mode.$d" 2)" \
            "$(col_median "$w.a.$mode.$d" 3)" "$(col_median "$w.b.$mode.$d" 3)" "$rc" \
            "$(printf "%'.0f" "$(col_median "$w.a.$mode.$d" 4)")" \
            "$(printf "%'.0f" "$(col_median "$w.b.$mode.$d" 4)")" "$(col_median "$w.ba.$mode.$d" 4)")")
    done
    {
        echo "## hiredis builds side by side"
        echo
        echo "This tree's \`bench/client_cpu.c\` (the blocking API, and a bare hiredis"
        echo "\`ZREVRANGE\` with its parse) and \`bench/loop_cpu.c\` (\`feed_async_page\` on one"
        echo "libevent loop, 256 requests in flight) built twice: against hiredis **$va**"
        echo "(\`$BUILD\`, $(hiredis_lib "$da/client_cpu")) and against hiredis **$vb**"
        echo "(\`$cmp\`, $(hiredis_lib "$db/client_cpu")), run against the same servers"
        echo "in $rounds interleaved rounds ($n blocking calls, $nl loop pages per run; the"
        echo "order turns around every other round; a figure and its peer run one after the"
        echo "other in each build). Ratios are medians of per-round ratios; the last column"
        echo "shows how far single rounds spread (the noise a 5% target is read against)."
        echo "Instructions per page: callgrind, ($N2 - $N1 calls) / $((N2 - N1)), as in the"
        echo "client section."
        echo
        echo "The headline figures, each build against its own peer, then $vb / $va:"
        echo
        echo "| figure | hiredis $va | hiredis $vb | $vb / $va (target: within 5%) | $vb / $va, rounds: lowest-highest |"
        echo "| --- | ---: | ---: | ---: | ---: |"
        printf '%s\n' "${head[@]}"
        echo
        echo "Per page, $va / $vb, and $vb / $va:"
        echo
        echo "| call | client instructions | ratio | round trips | Redis CPU | ratio | pages/s | ratio |"
        echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
        printf '%s\n' "${rows[@]}"
    } >"$WORK/sec_hiredis.md"
    {
        printf 'hiredis_cpu\thiredis %s / %s (same run): Redis CPU per cached page vs a plain ZREVRANGE, depth 0 and 500\twithin 5%%\tfurthest %sx\t%s\n' \
            "$vb" "$va" "$worst_h" "$(awk -v r="$worst_h" 'BEGIN { print (r >= 0.95 && r <= 1.05) ? "pass" : "MISS" }')"
        printf 'hiredis_loop\thiredis %s / %s (same run): one loop thread vs one blocking thread, cached first pages/s\twithin 5%%\t%sx\t%s\n' \
            "$vb" "$va" "$worst_l" "$(awk -v r="$worst_l" 'BEGIN { print (r >= 0.95 && r <= 1.05) ? "pass" : "MISS" }')"
        printf 'hiredis_instr\thiredis %s / %s: client instructions per cached page, blocking and loop (callgrind); Redis CPU per page\treport\tworst %sx; worst %sx\treport\n' \
            "$vb" "$va" "$worst_i" "$worst_c"
    } >>"$WORK/summary.tsv"
}
want hiredis && hiredis_side_by_side

# ---------------------------------------------------------------- tls
# Section tls needs a build with TLS (hiredis >= 1.0 with hiredis_ssl). When
# $BUILD has none (Debian 12's hiredis 0.14), feedbench wrote "not measured";
# the second hiredis of section hiredis, when it has hiredis_ssl, measures
# it instead, against the same servers and data.
tls_on_second_hiredis() {
    local dir=${BENCH_COMPARE_HIREDIS:-} cmp
    [[ -n $dir && -f $dir/include/hiredis/hiredis_ssl.h ]] || return 0
    grep -q '^Not measured: this build has no TLS' "$WORK/sec_tls.md" 2>/dev/null || return 0
    dir=$(cd "$dir" && pwd)
    cmp=$(compare_build "$dir")
    echo "bench: section tls on $cmp ($BUILD has no TLS)" >&2
    make -j2 HIREDIS="$dir" BUILD="$cmp" "$cmp/bench/feedbench" >"$WORK/tls-build.log" 2>&1 ||
        { cat "$WORK/tls-build.log" >&2; exit 1; }
    BENCH_NPROC=$NPROC "$cmp/bench/feedbench" "$WORK" tls
    # shellcheck disable=SC2016  # the backquotes are Markdown's
    printf '\nMeasured with `%s/bench/feedbench`, built against hiredis %s (`%s`): `%s` has no TLS.\n' \
        "$cmp" "$(hiredis_version "$cmp/bench/feedbench")" "$dir" "$BUILD" >>"$WORK/sec_tls.md"
}
want tls && tls_on_second_hiredis

# ---------------------------------------------------------------- charts
# From the data of the pages, writes (rebuild) and pg sections: a run
# without one of them has none of those charts; the merge chart comes with
# the merge section's data.
mkdir -p "$OUT"
CHARTS=1
for d in pages rebuild pg; do [[ -f $WORK/$d.dat ]] || CHARTS=0; done
MERGE_CHART=0
[[ -f $WORK/merge.dat ]] && MERGE_CHART=1
STORM_CHART=0
[[ -s $WORK/storm.dat ]] && STORM_CHART=1
if ((CHARTS || MERGE_CHART || STORM_CHART)); then
    echo "bench: charts (gnuplot)" >&2
    gnuplot -e "datadir='$WORK'; outdir='$OUT'; core=$CHARTS; merge=$MERGE_CHART; storm=$STORM_CHART" bench/plot.gp
fi
# The storm chart goes where its section left a place for it, under its table.
if ((STORM_CHART)) && [[ -f $WORK/sec_storm.md ]]; then
    sed -i 's|^<!-- storm.png -->$|![section storm: hit rate and p99 per second around the trigger](storm.png)|' \
        "$WORK/sec_storm.md"
fi

# ---------------------------------------------------------------- latest.md
CPU=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
MEM=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
REDIS_V=$(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p')
PG_V=$(psql -X -At -c 'SHOW server_version')
HIREDIS_V=$(hiredis_version "$BUILD/bench/feedbench")   # the one $BUILD loads
[[ -n $HIREDIS_V ]] || HIREDIS_V='?'
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
               async_memory blocking_instr blocking_rt blocking_cpu hiredis_cpu hiredis_loop hiredis_instr \
               merge_first merge_depth merge_xover window_zombie window_partition \
               filter_cpu filter_sql filter_memory filter_memory_author storm_recover storm_budget; do
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
             async blocking hiredis merge window tls filter storm; do
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

echo "bench: wrote $OUT/latest.md$( ((CHARTS)) && echo " and $OUT/{pages,rebuild,pg}.png")$( ((MERGE_CHART)) && echo " and $OUT/merge.png")$( ((STORM_CHART)) && echo " and $OUT/storm.png") in $((TOTAL_S / 60)) min $((TOTAL_S % 60)) s" >&2
awk -F'\t' '{ printf "  %-5s %s: %s\n", $5, $1, $4 }' "$WORK/summary.tsv" >&2
