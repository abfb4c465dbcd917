/* backend_sync.c -- the blocking backend: each operation is one call of the
 * blocking feedcache API (or one libpq transaction) made at once, on the
 * calling thread, and its completion is called before the operation
 * returns. One state per worker thread: a feedcache handle and a libpq
 * connection for the write transactions, used by that thread only.
 */
#include <stdlib.h>
#include <string.h>

#include "backend_sync.h"
#include "pgtx.h"

typedef struct sync_be {
    feed    *feed;
    int64_t  feed_attempt_us;
    PGconn  *pg;
    int64_t  pg_attempt_us;
} sync_be;

void *backend_sync_new(void)
{
    sync_be *s = calloc(1, sizeof *s);

    if (s)
        policy_handle(&s->feed, &s->feed_attempt_us);   /* now: later counters move by requests only */
    return s;
}

static feed *handle(void *be)
{
    sync_be *s = be;

    return policy_handle(&s->feed, &s->feed_attempt_us);
}

static const char *errmsg(feed *f)
{
    return f ? feed_errmsg(f) : feed_errmsg(NULL);
}

static void sync_page(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                 int64_t rank, size_t limit, page_done *done)
{
    feed *f = handle(be);
    feed_result res;
    int64_t next_rank = -1;
    int rc = f ? feed_page_ranked(f, uid, score, id, rank, limit, &res, &next_rank)
               : FEED_EUNAVAILABLE;

    done(rq, rc, rc == FEED_OK ? &res : NULL, next_rank, errmsg(f));
}

static void sync_newer(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                  size_t limit, page_done *done)
{
    feed *f = handle(be);
    feed_result res;
    int rc = f ? feed_page_newer(f, uid, score, id, limit, &res) : FEED_EUNAVAILABLE;

    done(rq, rc, rc == FEED_OK ? &res : NULL, -1, errmsg(f));
}

static void sync_merged(void *be, request *rq, int64_t uid, const int64_t *authors, size_t n,
                        int64_t score, int64_t id, size_t limit, page_done *done)
{
    feed *f = handle(be);
    feed_result res;
    int rc = f ? feed_page_merged(f, uid, authors, n, score, id, limit, &res)
               : FEED_EUNAVAILABLE;

    done(rq, rc, rc == FEED_OK ? &res : NULL, -1, errmsg(f));
}

static void sync_filtered(void *be, request *rq, int kind, int64_t uid,
                          const int64_t *authors, size_t n, int64_t score, int64_t id,
                          size_t limit, const feed_filter *filter, page_done *done)
{
    feed *f = handle(be);
    feed_result res;
    int rc;

    if (!f)
        rc = FEED_EUNAVAILABLE;
    else if (kind == FILTER_NEWER)
        rc = feed_page_newer_filtered(f, uid, score, id, limit, filter, &res);
    else if (kind == FILTER_MERGED)
        rc = feed_page_merged_filtered(f, uid, authors, n, score, id, limit, filter, &res);
    else
        rc = feed_page_filtered(f, uid, score, id, limit, filter, &res);
    done(rq, rc, rc == FEED_OK ? &res : NULL, -1, errmsg(f));
}

static void sync_health(void *be, request *rq, health_done *done)
{
    feed *f = handle(be);
    feed_health_info h;

    done(rq, f && feed_health(f, &h) != FEED_EINVAL ? &h : NULL, errmsg(f));
}

static void sync_on_insert(void *be, request *rq, int64_t uid, int64_t score, int64_t id,
                      hook_done *done)
{
    feed *f = handle(be);

    done(rq, f ? feed_on_insert(f, uid, score, id) : FEED_EUNAVAILABLE,
         f ? feed_errmsg(f) : "no handle");
}

static void sync_on_delete(void *be, request *rq, int64_t uid, int64_t id, hook_done *done)
{
    feed *f = handle(be);

    done(rq, f ? feed_on_delete(f, uid, id) : FEED_EUNAVAILABLE,
         f ? feed_errmsg(f) : "no handle");
}

static void sync_fanout(void *be, request *rq, const int64_t *uids, size_t n, int64_t score,
                   int64_t id, hook_done *done)
{
    feed *f = handle(be);

    done(rq, f ? feed_fanout(f, uids, n, score, id) : FEED_EUNAVAILABLE,
         f ? feed_errmsg(f) : "no handle");
}

static void sync_drop(void *be, request *rq, const int64_t *uids, size_t n, hook_done *done)
{
    feed *f = handle(be);

    done(rq, f ? feed_on_unknown_write(f, uids, n) : FEED_EUNAVAILABLE,
         f ? feed_errmsg(f) : "no handle");
}

static void sync_author_on_insert(void *be, request *rq, int64_t author, int64_t score,
                                 int64_t id, hook_done *done)
{
    feed *f = handle(be);

    done(rq, f ? feed_author_on_insert(f, author, score, id) : FEED_EUNAVAILABLE,
         f ? feed_errmsg(f) : "no handle");
}

static void sync_author_on_delete(void *be, request *rq, int64_t author, int64_t id,
                                 hook_done *done)
{
    feed *f = handle(be);

    done(rq, f ? feed_author_on_delete(f, author, id) : FEED_EUNAVAILABLE,
         f ? feed_errmsg(f) : "no handle");
}

static void sync_author_drop(void *be, request *rq, const int64_t *authors, size_t n,
                             hook_done *done)
{
    feed *f = handle(be);

    done(rq, f ? feed_author_on_unknown_write(f, authors, n) : FEED_EUNAVAILABLE,
         f ? feed_errmsg(f) : "no handle");
}

/* ---- the write transaction, blocking ---- */

/* The write connection, reconnected at most once per retry_ms unless
 * force. connect_timeout comes first so that one in the conninfo wins. */
static PGconn *write_conn(sync_be *s, int force)
{
    const char *keys[] = { "connect_timeout", "dbname", NULL };
    const char *vals[] = { PG_CONNECT_TIMEOUT, opt.cfg.pg_conninfo, NULL };
    int64_t t = now_us();

    if (s->pg && PQstatus(s->pg) == CONNECTION_OK)
        return s->pg;
    if (!force && s->pg_attempt_us && t - s->pg_attempt_us < (int64_t)opt.cfg.retry_ms * 1000)
        return NULL;
    s->pg_attempt_us = t;
    if (s->pg)
        PQreset(s->pg);
    else
        s->pg = PQconnectdbParams(keys, vals, 1);
    return s->pg && PQstatus(s->pg) == CONNECTION_OK ? s->pg : NULL;
}

/* BEGIN, and if the connection turns out to be dead (a PostgreSQL restart
 * since the last request), once more on a fresh one: nothing was done yet. */
static enum tx_result begin(sync_be *s, char *err, size_t errlen)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        PGconn *pg = write_conn(s, attempt > 0);
        PGresult *r;
        int lost;
        if (!pg) {
            pg_message(s->pg, NULL, err, errlen);
            return TX_DOWN;
        }
        r = PQexec(pg, "BEGIN");
        if (pg_command_ok(r)) {
            PQclear(r);
            return TX_OK;
        }
        pg_message(pg, r, err, errlen);
        lost = pg_conn_lost(pg, r);
        PQclear(r);
        if (!lost)
            return TX_FAILED;
    }
    return TX_DOWN;
}

static void sync_tx(void *be, request *rq, const char *sql, int nparams,
               const char *const *params, tx_done *done)
{
    sync_be *s = be;
    char err[300] = "";
    tx_outcome out = { TX_OK, 0, NULL, err };
    PGresult *r = NULL, *c;

    out.res = begin(s, err, sizeof err);
    if (out.res == TX_OK) {
        /* ... the application's own work of the transaction would go here ... */
        r = PQexecParams(s->pg, sql, nparams, NULL, params, NULL, NULL, 0);
        if (!pg_command_ok(r)) {
            pg_message(s->pg, r, err, sizeof err);
            out.res = pg_statement_error(s->pg, r);
            if (PQstatus(s->pg) == CONNECTION_OK)
                PQclear(PQexec(s->pg, "ROLLBACK"));
        } else {
            c = PQexec(s->pg, "COMMIT");
            if (!pg_command_ok(c)) {
                pg_message(s->pg, c, err, sizeof err);
                out.res = pg_conn_lost(s->pg, c) ? TX_UNKNOWN : TX_FAILED;
            } else {
                pg_outcome_rows(r, &out);
            }
            PQclear(c);
        }
    }
    done(rq, &out);
    PQclear(r);
}

static int sync_stats(void *be, feed_stats *out)
{
    sync_be *s = be;

    if (!s->feed)
        return -1;
    feed_stats_get(s->feed, out);
    return 0;
}

/* The handle's own rule; without a handle, when policy_handle opens again. */
static uint32_t sync_retry_after(void *be)
{
    sync_be *s = be;
    int64_t left;

    if (s->feed)
        return feed_retry_after_ms(s->feed);
    left = (s->feed_attempt_us + (int64_t)opt.cfg.retry_ms * 1000 - now_us()) / 1000;
    return left > 0 ? (uint32_t)left : 0;
}

static feed_kind sync_kind(void *be, int rc)
{
    return feed_error_kind(((sync_be *)be)->feed, rc);
}

static void sync_close_be(void *be)
{
    sync_be *s = be;

    feed_close(s->feed);
    if (s->pg)
        PQfinish(s->pg);
    free(s);
}

const backend_ops backend_sync_ops = {
    .page = sync_page, .newer = sync_newer, .health = sync_health, .merged = sync_merged,
    .filtered = sync_filtered,
    .on_insert = sync_on_insert, .on_delete = sync_on_delete, .fanout = sync_fanout,
    .drop = sync_drop, .author_on_insert = sync_author_on_insert,
    .author_on_delete = sync_author_on_delete, .author_drop = sync_author_drop,
    .tx = sync_tx, .stats = sync_stats, .retry_after = sync_retry_after, .kind = sync_kind,
    .close = sync_close_be
};
