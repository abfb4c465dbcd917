/* window.h -- bench/window.c: section "window" of feedbench. */
#ifndef FEED_BENCH_WINDOW_H
#define FEED_BENCH_WINDOW_H

/* Stale reads from a replaced cluster primary: frozen and thawed, and cut
 * off from the majority (in a network namespace of its own, when the
 * process may make one). Skipped (noted) unless FEED_REDIS_CLUSTER and
 * FEED_SERVERS_DIR are set. */
void section_window(void);

#endif
