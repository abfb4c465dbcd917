/* t_overload.c -- a cold cache under load comes back by itself
 * (docs/operations.md, "Overload"), against the real servers:
 *
 *   late      replies late on a live connection: 2000 pages in flight on
 *             one async handle while another client keeps Redis busy in
 *             200 ms bursts (a Lua script spinning) with short gaps, so
 *             the replies come, in order, but the last ones far later than
 *             redis_timeout_ms (250) after they were sent: the connection
 *             stays, every page is served from the cache, nothing is held
 *             off or counted as an error
 *
 * The async parts run on libevent directly. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"
#include "feedcache_libevent.h"

static PGconn *pg;
static struct event_base *base;

typedef struct got {
    int done, rc, source;
} got;

static void on_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    got *g = arg;

    (void)a;
    g->done = 1;
    g->rc = rc;
    g->source = page ? (int)page->source : 0;
    feed_result_free(page);
}

/* Another client: Redis busy in bursts of 200 ms, 10 ms apart, six times. */
static void *busy_bursts(void *arg)
{
    redisContext *r = tu_redis();

    (void)arg;
    for (int i = 0; i < 6; i++) {
        freeReplyObject(tu_redis_cmd(r, "EVAL %s 0",
                                     "local t = redis.call('TIME') local s = t[1] * 1e6 + t[2]"
                                     " repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - s"
                                     " > 200000 return 1"));
        fault_sleep_ms(10);
    }
    redisFree(r);
    return NULL;
}

static void run_until(const got *g, int n)
{
    for (int spins = 0; spins < 200000; spins++) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !g[i].done;
        if (!left)
            return;
        event_base_loop(base, EVLOOP_ONCE);
    }
}

/* ---- late replies on a live connection ---- */

#define NLATE 2000

static void late_replies(void)
{
    static got g[NLATE];
    feed_config cfg;
    feed_async *a = NULL;
    feed_stats s0, s1;
    pthread_t busy;
    int cached = 0;

    tu_insert_rows(pg, 91, 40, tu_score_by10, tu_id_seq);
    tu_config(&cfg);
    cfg.redis_timeout_ms = 250;
    if (feed_async_open_libevent(&a, &cfg, base) != FEED_OK) {
        tap_bail("feed_async_open_libevent");
        exit(255);
    }
    memset(g, 0, sizeof g);
    feed_async_page(a, 91, FEED_FIRST, 0, 30, on_page, &g[0]);    /* the copy, cached */
    run_until(g, 1);
    feed_async_stats_get(a, &s0);
    memset(g, 0, sizeof g);
    pthread_create(&busy, NULL, busy_bursts, NULL);
    fault_sleep_ms(20);                 /* the first burst is on */
    for (int i = 0; i < NLATE; i++)
        feed_async_page(a, 91, FEED_FIRST, 0, 30, on_page, &g[i]);
    run_until(g, NLATE);
    pthread_join(busy, NULL);
    feed_async_stats_get(a, &s1);
    for (int i = 0; i < NLATE; i++)
        cached += g[i].rc == FEED_OK && g[i].source == FEED_SOURCE_CACHE;
    is_int(cached, NLATE, "%d pages in flight while Redis is busy in 200 ms bursts"
           " (redis_timeout_ms 250): every one from the cache", NLATE);
    ok(s1.redis_errors == s0.redis_errors && s1.redis_connects == s0.redis_connects,
       "  the connection stayed: no Redis error, no reconnect (errors +%llu, connects +%llu)",
       (unsigned long long)(s1.redis_errors - s0.redis_errors),
       (unsigned long long)(s1.redis_connects - s0.redis_connects));
    is_int(feed_async_retry_after_ms(a), 0, "  and Redis is not held off");
    feed_async_close(a);
}

int main(void)
{
    pg = tu_begin(NULL);
    fault_setup();
    if (!(base = event_base_new())) {
        tap_bail("event_base_new");
        return 255;
    }
    late_replies();
    event_base_free(base);
    PQfinish(pg);
    return tap_done();
}
