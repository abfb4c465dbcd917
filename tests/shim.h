/* shim.h -- the C tests through the asynchronous API.
 *
 * With FEED_TEST_ASYNC=libevent (or libuv) in the environment, every
 * feed_page, feed_page_ranked, feed_page_newer, feed_page_merged, their
 * _filtered twins,
 * feed_on_insert, feed_on_delete, feed_author_on_insert,
 * feed_author_on_delete, feed_author_invalidate, feed_fanout and feed_invalidate a
 * test makes runs as its
 * feed_async_* twin on an async handle of its own loop, opened beside the
 * test's blocking handle with the same config: the call starts the request
 * and runs the loop until its callback came, so the test's assertions hold
 * the async API to exactly what they hold the blocking one to. The other
 * calls (reload, bulk invalidation) go to the blocking handle, feed_health
 * to feed_async_health; feed_stats_get adds both handles' counters,
 * feed_retry_after_ms gives the longer wait of the two, feed_errmsg the
 * last call's message. Without the variable every call is the blocking one.
 * tests/run.sh runs the tests so as "t_foo:async" (and ":async-uv").
 *
 * Each call checks (as tests/t_async.c does at length) that the callback
 * came exactly once and never from inside the call that started it. */
#ifndef FEED_TEST_SHIM_H
#define FEED_TEST_SHIM_H

#include "feedcache.h"

int  tu_async(void);    /* 0 blocking, 1 libevent, 2 libuv */
int  tu_feed_open(feed **out, const feed_config *cfg);
void tu_feed_close(feed *f);
const char *tu_feed_errmsg(const feed *f);
void tu_feed_stats_get(const feed *f, feed_stats *out);
int  tu_feed_page(feed *f, int64_t uid, int64_t last_score, int64_t last_id, size_t limit,
                  feed_result *out);
int  tu_feed_page_ranked(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
                         int64_t rank, size_t limit, feed_result *out, int64_t *next_rank);
int  tu_feed_page_newer(feed *f, int64_t uid, int64_t score, int64_t id, size_t limit,
                        feed_result *out);
int  tu_feed_page_merged(feed *f, int64_t uid, const int64_t *authors, size_t n,
                        int64_t last_score, int64_t last_id, size_t limit, feed_result *out);
int  tu_feed_page_filtered(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
                          size_t limit, const feed_filter *filter, feed_result *out);
int  tu_feed_page_merged_filtered(feed *f, int64_t uid, const int64_t *authors, size_t n,
                                  int64_t last_score, int64_t last_id, size_t limit,
                                  const feed_filter *filter, feed_result *out);
int  tu_feed_page_newer_filtered(feed *f, int64_t uid, int64_t score, int64_t id, size_t limit,
                                 const feed_filter *filter, feed_result *out);
int  tu_feed_on_insert(feed *f, int64_t uid, int64_t score, int64_t id);
int  tu_feed_on_delete(feed *f, int64_t uid, int64_t id);
int  tu_feed_author_on_insert(feed *f, int64_t author, int64_t score, int64_t id);
int  tu_feed_author_on_delete(feed *f, int64_t author, int64_t id);
int  tu_feed_author_invalidate(feed *f, int64_t author);
int  tu_feed_author_invalidate_many(feed *f, const int64_t *authors, size_t n);
int  tu_feed_author_invalidate_all(feed *f, uint64_t *dropped);
int  tu_feed_fanout(feed *f, const int64_t *uids, size_t n, int64_t score, int64_t id);
int  tu_feed_invalidate(feed *f, int64_t uid);
int  tu_feed_reload(feed *f, int64_t uid);
int  tu_feed_invalidate_many(feed *f, const int64_t *uids, size_t n);
int  tu_feed_invalidate_all(feed *f, uint64_t *dropped);
int  tu_feed_health(feed *f, feed_health_info *out);
uint32_t tu_feed_retry_after_ms(const feed *f);

#ifndef TU_SHIM_SELF
#define feed_open(out, cfg)          tu_feed_open(out, cfg)
#define feed_close(f)                tu_feed_close(f)
#define feed_errmsg(f)               tu_feed_errmsg(f)
#define feed_stats_get(f, out)       tu_feed_stats_get(f, out)
#define feed_page(f, u, s, i, l, o)  tu_feed_page(f, u, s, i, l, o)
#define feed_page_ranked(f, u, s, i, r, l, o, n) tu_feed_page_ranked(f, u, s, i, r, l, o, n)
#define feed_page_newer(f, u, s, i, l, o) tu_feed_page_newer(f, u, s, i, l, o)
#define feed_page_merged(f, u, a, n, s, i, l, o) tu_feed_page_merged(f, u, a, n, s, i, l, o)
#define feed_page_filtered(f, u, s, i, l, fl, o) tu_feed_page_filtered(f, u, s, i, l, fl, o)
#define feed_page_merged_filtered(f, u, a, n, s, i, l, fl, o) \
    tu_feed_page_merged_filtered(f, u, a, n, s, i, l, fl, o)
#define feed_page_newer_filtered(f, u, s, i, l, fl, o) \
    tu_feed_page_newer_filtered(f, u, s, i, l, fl, o)
#define feed_on_insert(f, u, s, i)   tu_feed_on_insert(f, u, s, i)
#define feed_author_on_insert(f, a, s, i) tu_feed_author_on_insert(f, a, s, i)
#define feed_author_on_delete(f, a, i) tu_feed_author_on_delete(f, a, i)
#define feed_author_invalidate(f, a) tu_feed_author_invalidate(f, a)
#define feed_author_invalidate_many(f, as, n) tu_feed_author_invalidate_many(f, as, n)
#define feed_author_invalidate_all(f, d) tu_feed_author_invalidate_all(f, d)
#define feed_on_delete(f, u, i)      tu_feed_on_delete(f, u, i)
#define feed_fanout(f, us, n, s, i)  tu_feed_fanout(f, us, n, s, i)
#define feed_invalidate(f, u)        tu_feed_invalidate(f, u)
#define feed_reload(f, u)            tu_feed_reload(f, u)
#define feed_invalidate_many(f, us, n) tu_feed_invalidate_many(f, us, n)
#define feed_invalidate_all(f, d)    tu_feed_invalidate_all(f, d)
#define feed_health(f, out)          tu_feed_health(f, out)
#define feed_retry_after_ms(f)       tu_feed_retry_after_ms(f)
#endif

#endif /* FEED_TEST_SHIM_H */
