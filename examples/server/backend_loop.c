/* backend_loop.c -- the event-loop server's backend: the one file where
 * feedcache's asynchronous API (feed_async_*, feedcache.h "Asynchronous
 * API") goes.
 *
 * TEMPORARY BACKEND. feed_async_* does not exist yet. Until it does, each
 * library operation below calls the blocking API from the loop's thread,
 * through backend_sync.c, and completes at once: while such a call waits on
 * Redis or PostgreSQL (a rebuild, a lease wait, up to pg_timeout_ms when
 * PostgreSQL is stuck), this loop serves nothing else; the other loops go
 * on. Each function says which feed_async_* call replaces its body. The
 * completions keep their signatures, so nothing outside this file changes
 * then: the arg of each feed_async_* call becomes a small closure holding
 * (rq, done), and its callback calls done with what the blocking call
 * returns here.
 *
 * The write transactions are asynchronous already: pg_async.c runs them on
 * this loop with libpq's asynchronous calls.
 */
#include <stdlib.h>

#include "backend_loop.h"
#include "backend_sync.h"
#include "pg_async.h"

typedef struct loop_be {
    void     *blocking;   /* TEMPORARY: backend_sync's state; becomes a feed_async
                             opened with feed_async_open_libevent(&fa, &opt.cfg, base) */
    pg_async *pg;         /* the write transactions, on this loop */
} loop_be;

#define SYNC backend_sync_ops   /* TEMPORARY: every use below is a blocking call */

void *backend_loop_new(struct event_base *base)
{
    loop_be *l = calloc(1, sizeof *l);

    if (!l)
        return NULL;
    l->pg = pg_async_new(base);
    l->blocking = backend_sync_new();
    if (!l->pg || !l->blocking) {
        pg_async_free(l->pg);
        if (l->blocking)
            SYNC.close(l->blocking);
        free(l);
        return NULL;
    }
    return l;
}

/* feed_async_page_ranked(fa, uid, score, id, rank, limit, cb, closure) */
static void loop_page(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                      int64_t rank, size_t limit, page_done *done)
{
    SYNC.page(((loop_be *)be)->blocking, rq, uid, score, id, rank, limit, done);
}

/* feed_async_page_newer(fa, uid, score, id, limit, cb, closure) */
static void loop_newer(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                       size_t limit, page_done *done)
{
    SYNC.newer(((loop_be *)be)->blocking, rq, uid, score, id, limit, done);
}

/* The contract has no asynchronous feed_health: it stays a blocking call
 * (a PING and a one-row read, each bounded by its timeout) until it does. */
static void loop_health(void *be, request *rq, health_done *done)
{
    SYNC.health(((loop_be *)be)->blocking, rq, done);
}

/* feed_async_on_insert(fa, uid, score, id, cb, closure) */
static void loop_on_insert(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                           hook_done *done)
{
    SYNC.on_insert(((loop_be *)be)->blocking, rq, uid, score, id, done);
}

/* feed_async_on_delete(fa, uid, id, cb, closure) */
static void loop_on_delete(void *be, request *rq, int64_t uid, int64_t id, hook_done *done)
{
    SYNC.on_delete(((loop_be *)be)->blocking, rq, uid, id, done);
}

/* feed_async_fanout(fa, uids, n, score, id, cb, closure) */
static void loop_fanout(void *be, request *rq, const int64_t *uids, size_t n, int64_t score,
                        int64_t id, hook_done *done)
{
    SYNC.fanout(((loop_be *)be)->blocking, rq, uids, n, score, id, done);
}

/* feed_async_invalidate(fa, uids[i], cb, closure) for every i at once (one
 * pipelined write); done when the last answers, dropped = those FEED_OK. */
static void loop_drop(void *be, request *rq, const int64_t *uids, size_t n, drop_done *done)
{
    SYNC.drop(((loop_be *)be)->blocking, rq, uids, n, done);
}

static void loop_tx(void *be, request *rq, const char *sql, int nparams,
                    const char *const *params, tx_done *done)
{
    pg_async_tx(((loop_be *)be)->pg, rq, sql, nparams, params, done);
}

/* feed_async_stats_get(fa, out) */
static int loop_stats(void *be, feed_stats *out)
{
    return SYNC.stats(((loop_be *)be)->blocking, out);
}

/* Transactions first: their completions may still call hooks. Then
 * feed_async_close(fa), which calls back what is pending with
 * FEED_ECANCELED. */
static void loop_close(void *be)
{
    loop_be *l = be;

    pg_async_free(l->pg);
    SYNC.close(l->blocking);
    free(l);
}

const backend_ops backend_loop_ops = {
    loop_page, loop_newer, loop_health, loop_on_insert, loop_on_delete, loop_fanout,
    loop_drop, loop_tx, loop_stats, loop_close
};
