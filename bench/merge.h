/* merge.h -- bench/merge.c: section "merge" of feedbench (read-time merge). */
#ifndef FEED_BENCH_MERGE_H
#define FEED_BENCH_MERGE_H

void section_merge(void);

#endif
