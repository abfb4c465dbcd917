# plot.gp -- the charts of a run's latest.md (bench/results/<run>/), from
# the data that feedbench writes. Run by bench/run.sh:
#   gnuplot -e "datadir='DIR'; outdir='bench/results/<run>'" bench/plot.gp
if (!exists("datadir")) datadir = "."
if (!exists("outdir")) outdir = "."

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
