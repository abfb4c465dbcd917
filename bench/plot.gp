# plot.gp -- the charts of a run's latest.md (bench/results/<run>/), from
# the data that feedbench writes. Run by bench/run.sh:
#   gnuplot -e "datadir='DIR'; outdir='bench/results/<run>'" bench/plot.gp
#   (core=0: not the pages/rebuild/pg charts; merge=1: the merge chart too;
#   storm=1: the storm chart too)
if (!exists("datadir")) datadir = "."
if (!exists("outdir")) outdir = "."
if (!exists("core")) core = 1
if (!exists("merge")) merge = 0
if (!exists("storm")) storm = 0

if (core) {
    set style data histograms
    set style histogram clustered gap 1
    set style fill solid 0.85 border -1
    set grid ytics
    set key outside bottom center horizontal noenhanced
    set xtics noenhanced
    set bmargin 6

    # ---- pages/s and server time per page, by depth
    set terminal pngcairo size 1200,540 font "sans,10"
    set output outdir."/pages.png"
    set multiplot layout 1,2 title "Cached page, single connection, 20 items: medians of interleaved rounds (log scales)"
    set logscale y
    set title "pages/s (higher is better)"
    set yrange [10:*]
    plot datadir."/pages.dat" using 2:xtic(1) title "raw ZREVRANGE" lc rgb "#999999", \
         '' using 3 title "bare Lua ZREVRANGE" lc rgb "#5b8fd6", \
         '' using 4 title "feedcache" lc rgb "#d6452f", \
         '' using 5 title "common next-page script" lc rgb "#e0b040"
    set title "Redis server time per call, µs, INFO commandstats (lower is better)"
    set yrange [1:*]
    plot datadir."/pages.dat" using 6:xtic(1) title "raw ZREVRANGE" lc rgb "#999999", \
         '' using 7 title "bare Lua ZREVRANGE" lc rgb "#5b8fd6", \
         '' using 8 title "feedcache" lc rgb "#d6452f", \
         '' using 9 title "common next-page script" lc rgb "#e0b040"
    unset multiplot

    # ---- installing a rebuild
    set terminal pngcairo size 700,480 font "sans,10"
    set output outdir."/rebuild.png"
    set title "Installing a rebuild: Redis server time, ms (log scale; lower is better)"
    set yrange [0.1:*]
    plot datadir."/rebuild.dat" using 2:xtic(sprintf("%d items", $1)) title "feedcache (staging ZADD + rebuild.lua)" lc rgb "#d6452f", \
         '' using 3 title "common reload script" lc rgb "#e0b040"

    # ---- cached page vs PostgreSQL
    set terminal pngcairo size 1000,480 font "sans,10"
    set output outdir."/pg.png"
    unset logscale y
    set multiplot layout 1,2 title "Cached page vs PostgreSQL keyset page (the same pages, 1,000,000-row table)"
    set title "pages/s (higher is better)"
    set yrange [0:*]
    plot datadir."/pg.dat" using 2:xtic(1) title "feedcache" lc rgb "#d6452f", \
         '' using 3 title "PostgreSQL" lc rgb "#5b8fd6"
    set title "server CPU per page, µs (lower is better)"
    plot datadir."/pg.dat" using 4:xtic(1) title "redis-server" lc rgb "#d6452f", \
         '' using 5 title "PostgreSQL backends" lc rgb "#5b8fd6"
    unset multiplot
}

# ---- read-time merge: fan out one post, or merge the author into R reads
if (merge) {
    reset
    set terminal pngcairo size 900,560 font "sans,10"
    set output outdir."/merge.png"
    set grid
    set logscale xy
    set key top left noenhanced
    set format x "%.0s%c"
    set xrange [700:1500000]
    set title "One post: Redis CPU of fanning it out to F followers vs merging its author into R reads"
    set xlabel "followers F"
    set ylabel "Redis CPU, ms (log scale)"
    plot datadir."/merge.dat" using 1:2 with linespoints lw 2 pt 7 lc rgb "#d6452f" title "fan-out, every follower's feed cached", \
         '' using 1:3 with linespoints lw 2 pt 5 lc rgb "#e0b040" title "fan-out, no follower's feed cached", \
         '' using 1:5 with lines lw 2 lc rgb "#5b8fd6" title "merge into R = F reads", \
         '' using 1:4 with lines dt 2 lw 2 lc rgb "#5b8fd6" title "merge into R = F / 10 reads", \
         '' using 1:6 with lines dt 3 lw 2 lc rgb "#5b8fd6" title "merge into R = 10 F reads"
}

# ---- section storm: hit rate and p99 per second around the trigger, each
# run a block of storm.dat (its first line the run's name)
if (storm) {
    reset
    # a run per block, each opening with its name in quotes (stats would
    # count the empty block after the last one too)
    nruns = int(system("grep -c '^\"' '".datadir."/storm.dat'"))
    set terminal pngcairo size 1200,900 font "sans,10"
    set output outdir."/storm.png"
    set multiplot layout 2,1 title "Section storm: a flush or an empty restart at t = 0, open-loop load (each line a run)"
    set grid
    set key outside right noenhanced
    set xlabel "seconds after the trigger"
    set title "hit rate of the pages served in each second (dotted: the ideal cache's)"
    set yrange [0:1.02]
    plot for [i=0:nruns-1] datadir."/storm.dat" index i using 1:2 with lines lw 2 lc i+1 title columnheader(1), \
         for [i=0:nruns-1] datadir."/storm.dat" index i using 1:3 with lines dt 3 lc i+1 notitle
    set title "p99 of the requests scheduled in each second, ms (log scale)"
    set yrange [*:*]
    set logscale y
    plot for [i=0:nruns-1] datadir."/storm.dat" index i using 1:($4 > 0 ? $4 : 1/0) with lines lw 2 lc i+1 title columnheader(1)
    unset multiplot
}
