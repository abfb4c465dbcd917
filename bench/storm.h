/* storm.h -- bench/storm.c: section "storm" of feedbench. */
#ifndef FEED_BENCH_STORM_H
#define FEED_BENCH_STORM_H

void section_storm(void);   /* not measured (noted) without tools/servers.sh's folder */

#endif
