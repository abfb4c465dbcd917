/* feedbench.c -- the benchmark driver: `feedbench OUTDIR [SECTION...]`.
 *
 * bench/run.sh starts the servers, loads the data set (bench/load.sql) and
 * runs this; every section writes OUTDIR/sec_<name>.md, gnuplot data in
 * OUTDIR/<name>.dat, and appends its headline rows to OUTDIR/summary.tsv.
 * Sections: pages memory writes stampede fanout pg wait fence replica cpu cluster
 * async merge window tls filter storm (default: all, in that order; storm
 * last, since it restarts Redis). BENCH_QUICK=1
 * shortens every section, for trying things out. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "reads.h"
#include "cluster.h"
#include "merge.h"
#include "window.h"
#include "filter.h"
#include "storm.h"

static const struct { const char *name; void (*run)(void); } sections[] = {
    { "pages", section_pages },
    { "memory", section_memory },
    { "writes", section_writes },
    { "stampede", section_stampede },
    { "fanout", section_fanout },
    { "pg", section_pg },
    { "wait", section_wait },
    { "fence", section_fence },
    { "replica", section_replica },
    { "cpu", section_cpu },
    { "cluster", section_cluster },
    { "async", section_async },
    { "merge", section_merge },
    { "window", section_window },
    { "tls", section_tls },
    { "filter", section_filter },
    { "storm", section_storm },
};
#define NSECTIONS (sizeof sections / sizeof sections[0])

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: feedbench OUTDIR [pages|memory|writes|stampede|fanout|pg|wait|fence|replica|"
            "cpu|cluster|async|merge|window|tls|filter|storm ...]");
    out_init(argv[1]);
    for (size_t i = 0; i < NSECTIONS; i++) {
        int want = argc == 2;
        for (int a = 2; a < argc; a++)
            want |= strcmp(argv[a], sections[i].name) == 0;
        if (!want)
            continue;
        double t0 = now_s();
        fprintf(stderr, "feedbench: %s\n", sections[i].name);
        sections[i].run();
        fprintf(stderr, "feedbench: %s done in %.1f s\n", sections[i].name, now_s() - t0);
    }
    return 0;
}
