/* filter.h -- section "filter" (bench/filter.c): filtered pages. */
#ifndef FEED_BENCH_FILTER_H
#define FEED_BENCH_FILTER_H

void section_filter(void);

#endif
