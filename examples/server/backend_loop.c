/* backend_loop.c -- the event-loop server's backend: every operation starts
 * a request of feedcache's asynchronous API (feedcache.h, "Asynchronous
 * API") or a transaction of pg_async.c on the loop's event_base, and its
 * completion comes from the loop once the answer is in. Nothing here waits:
 * a loop serves its other connections while Redis, PostgreSQL or a lease
 * keeps one request waiting.
 *
 * One state per loop: an async feedcache handle and a write connection,
 * used from the loop's thread only. Each library call carries a small
 * closure, the request and its completion, freed when its callback has
 * passed the result on. A call refused at once (an argument error, no
 * memory) completes before it returns, with the library's code and
 * message.
 */
#include <stdlib.h>

#include "backend_loop.h"
#include "feedcache_libevent.h"
#include "pg_async.h"

typedef struct loop_be {
    feed_async *fa;
    pg_async   *pg;          /* the write transactions, on this loop */
} loop_be;

/* The closure of one library call. */
typedef struct call {
    request *rq;
    union {
        page_done   *page;
        health_done *health;
        hook_done   *hook;
    } done;
} call;

void *backend_loop_new(struct event_base *base)
{
    loop_be *l = calloc(1, sizeof *l);

    if (!l)
        return NULL;
    if (feed_async_open_libevent(&l->fa, &opt.cfg, base) != FEED_OK ||
        !(l->pg = pg_async_new(base))) {
        feed_async_close(l->fa);
        free(l);
        return NULL;
    }
    return l;
}

static call *call_new(request *rq)
{
    call *c = malloc(sizeof *c);

    if (c)
        c->rq = rq;
    return c;
}

/* ---- pages ---- */

static void on_ranked(feed_async *a, int rc, feed_result *page, int64_t next_rank, void *arg)
{
    call *c = arg;

    c->done.page(c->rq, rc, page, next_rank, feed_async_errmsg(a));
    free(c);
}

static void on_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    on_ranked(a, rc, page, -1, arg);
}

/* The closure of a page call; without memory the call completes now. */
static call *page_call(request *rq, page_done *done)
{
    call *c = call_new(rq);

    if (c)
        c->done.page = done;
    else
        done(rq, FEED_ENOMEM, NULL, -1, "out of memory");
    return c;
}

/* A call refused at once (rc from the call that started it) completes now,
 * through its own callback: feed_async_errmsg says why. */
static void loop_page(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                      int64_t rank, size_t limit, page_done *done)
{
    loop_be *l = be;
    call *c = page_call(rq, done);
    int rc;

    if (c && (rc = feed_async_page_ranked(l->fa, uid, score, id, rank, limit, on_ranked,
                                          c)) != FEED_OK)
        on_ranked(l->fa, rc, NULL, -1, c);
}

static void loop_newer(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                       size_t limit, page_done *done)
{
    loop_be *l = be;
    call *c = page_call(rq, done);
    int rc;

    if (c && (rc = feed_async_page_newer(l->fa, uid, score, id, limit, on_page, c)) != FEED_OK)
        on_page(l->fa, rc, NULL, c);
}

static void loop_merged(void *be, request *rq, int64_t uid, const int64_t *authors, size_t n,
                        int64_t score, int64_t id, size_t limit, page_done *done)
{
    loop_be *l = be;
    call *c = page_call(rq, done);
    int rc;

    if (c && (rc = feed_async_page_merged(l->fa, uid, authors, n, score, id, limit, on_page,
                                          c)) != FEED_OK)
        on_page(l->fa, rc, NULL, c);
}

/* filter is copied by the call (feedcache.h); its keep_arg, the request,
 * stays until the callback. */
static void loop_filtered(void *be, request *rq, int kind, int64_t uid,
                          const int64_t *authors, size_t n, int64_t score, int64_t id,
                          size_t limit, const feed_filter *filter, page_done *done)
{
    loop_be *l = be;
    call *c = page_call(rq, done);
    int rc;

    if (!c)
        return;
    if (kind == FILTER_NEWER)
        rc = feed_async_page_newer_filtered(l->fa, uid, score, id, limit, filter, on_page, c);
    else if (kind == FILTER_MERGED)
        rc = feed_async_page_merged_filtered(l->fa, uid, authors, n, score, id, limit, filter,
                                             on_page, c);
    else
        rc = feed_async_page_filtered(l->fa, uid, score, id, limit, filter, on_page, c);
    if (rc != FEED_OK)
        on_page(l->fa, rc, NULL, c);
}

/* ---- health ---- */

static void on_health(feed_async *a, int rc, const feed_health_info *h, void *arg)
{
    call *c = arg;

    (void)rc;
    c->done.health(c->rq, h, feed_async_errmsg(a));
    free(c);
}

static void loop_health(void *be, request *rq, health_done *done)
{
    loop_be *l = be;
    call *c = call_new(rq);

    if (!c) {
        done(rq, NULL, "out of memory");
        return;
    }
    c->done.health = done;
    if (feed_async_health(l->fa, on_health, c) != FEED_OK)
        on_health(l->fa, FEED_EINVAL, NULL, c);
}

/* ---- hooks ---- */

static void on_hook(feed_async *a, int rc, void *arg)
{
    call *c = arg;

    c->done.hook(c->rq, rc, feed_async_errmsg(a));
    free(c);
}

static call *hook_call(request *rq, hook_done *done)
{
    call *c = call_new(rq);

    if (c)
        c->done.hook = done;
    else
        done(rq, FEED_ENOMEM, "out of memory");
    return c;
}

static void hook_started(loop_be *l, call *c, int rc)
{
    if (rc != FEED_OK)
        on_hook(l->fa, rc, c);
}

static void loop_on_insert(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                           hook_done *done)
{
    loop_be *l = be;
    call *c = hook_call(rq, done);

    if (c)
        hook_started(l, c, feed_async_on_insert(l->fa, uid, score, id, on_hook, c));
}

static void loop_on_delete(void *be, request *rq, int64_t uid, int64_t id, hook_done *done)
{
    loop_be *l = be;
    call *c = hook_call(rq, done);

    if (c)
        hook_started(l, c, feed_async_on_delete(l->fa, uid, id, on_hook, c));
}

static void loop_fanout(void *be, request *rq, const int64_t *uids, size_t n, int64_t score,
                        int64_t id, hook_done *done)
{
    loop_be *l = be;
    call *c = hook_call(rq, done);

    if (c)
        hook_started(l, c, feed_async_fanout(l->fa, uids, n, score, id, on_hook, c));
}

static void loop_author_on_insert(void *be, request *rq, int64_t author, int64_t score,
                                  int64_t id, hook_done *done)
{
    loop_be *l = be;
    call *c = hook_call(rq, done);

    if (c)
        hook_started(l, c, feed_async_author_on_insert(l->fa, author, score, id, on_hook, c));
}

static void loop_author_on_delete(void *be, request *rq, int64_t author, int64_t id,
                                  hook_done *done)
{
    loop_be *l = be;
    call *c = hook_call(rq, done);

    if (c)
        hook_started(l, c, feed_async_author_on_delete(l->fa, author, id, on_hook, c));
}

/* ---- the write protocol's last step ---- */

static void loop_drop(void *be, request *rq, const int64_t *uids, size_t n, hook_done *done)
{
    loop_be *l = be;
    call *c = hook_call(rq, done);

    if (c)
        hook_started(l, c, feed_async_on_unknown_write(l->fa, uids, n, on_hook, c));
}

static void loop_author_drop(void *be, request *rq, const int64_t *authors, size_t n,
                             hook_done *done)
{
    loop_be *l = be;
    call *c = hook_call(rq, done);

    if (c)
        hook_started(l, c, feed_async_author_on_unknown_write(l->fa, authors, n, on_hook, c));
}

/* ---- the rest ---- */

static void loop_tx(void *be, request *rq, const char *sql, int nparams,
                    const char *const *params, tx_done *done)
{
    pg_async_tx(((loop_be *)be)->pg, rq, sql, nparams, params, done);
}

static int loop_stats(void *be, feed_stats *out)
{
    feed_async_stats_get(((loop_be *)be)->fa, out);
    return 0;
}

static uint32_t loop_retry_after(void *be)
{
    return feed_async_retry_after_ms(((loop_be *)be)->fa);
}

/* Called from a completion, so inside the library's callback. */
static feed_kind loop_kind(void *be, int rc)
{
    return feed_async_error_kind(((loop_be *)be)->fa, rc);
}

/* Transactions first: their completions may still call hooks. Then the
 * handle: what is still pending completes with FEED_ECANCELED, and a
 * completion that starts another call then finds no handle (l->fa NULL:
 * refused at once). */
static void loop_close(void *be)
{
    loop_be *l = be;
    feed_async *fa = l->fa;

    pg_async_free(l->pg);
    l->fa = NULL;
    feed_async_close(fa);
    free(l);
}

const backend_ops backend_loop_ops = {
    .page = loop_page, .newer = loop_newer, .health = loop_health, .merged = loop_merged,
    .filtered = loop_filtered,
    .on_insert = loop_on_insert, .on_delete = loop_on_delete, .fanout = loop_fanout,
    .drop = loop_drop, .author_on_insert = loop_author_on_insert,
    .author_on_delete = loop_author_on_delete, .author_drop = loop_author_drop,
    .tx = loop_tx, .stats = loop_stats, .retry_after = loop_retry_after, .kind = loop_kind,
    .close = loop_close
};
