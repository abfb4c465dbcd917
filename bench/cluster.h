/* cluster.h -- bench/cluster.c: section "cluster" of feedbench. */
#ifndef FEED_BENCH_CLUSTER_H
#define FEED_BENCH_CLUSTER_H

void section_cluster(void);   /* skipped (noted) unless FEED_REDIS_CLUSTER is set */

#endif
