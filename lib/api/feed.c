/* feed.c -- the blocking API: open, close, errors, statistics, pages.
 *
 * Each call checks its arguments, makes its request (core/) and runs it
 * to its end (lib/drive/sync.c): a page, newer or hook request on the
 * caller's stack, the others on the heap.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drive/drive.h"

/* The message of the last failed feed_open(), feed_config_set() or cursor
 * decode in this thread: there is no handle to carry it. */
#define open_errmsg (feed__thread_msg())

const char *feed_errmsg(const feed *f)
{
    return f ? f->errmsg : open_errmsg;
}

int feed_config_set(feed_config *cfg, const char *name, const char *value)
{
    open_errmsg[0] = '\0';
    return feed__config_set(cfg, name, value, open_errmsg);
}

void feed_stats_get(const feed *f, feed_stats *out)
{
    if (!out)
        return;
    if (f)
        *out = f->core.stats;
    else
        memset(out, 0, sizeof *out);
}

/* feed_open succeeds when one store answers; a store that answered and
 * refused (bad password, missing table) is a configuration error worth
 * failing for, since retrying will not fix it. */
static int open_outcome(int redis_rc, int pg_rc)
{
    if (redis_rc == FEED_ENOMEM || pg_rc == FEED_ENOMEM)
        return FEED_ENOMEM;
    if (redis_rc == FEED_EREDIS)
        return FEED_EREDIS;
    if (pg_rc == FEED_EPG || pg_rc == FEED_ERANGE)
        return FEED_EPG;
    if (redis_rc != FEED_OK && pg_rc != FEED_OK)
        return FEED_EUNAVAILABLE;
    return FEED_OK;
}

/* feed_open's failure before its connects: f (NULL or partly made) closed,
 * "feed_open: why" kept for feed_errmsg(NULL). Returns rc. */
static int open_failed(feed *f, int rc, const char *why)
{
    snprintf(open_errmsg, FEED_ERRMSG, "feed_open: %.480s", why);
    feed_close(f);
    return rc;
}

int feed_open(feed **out, const feed_config *cfg)
{
    char redis_msg[FEED_ERRMSG] = "", pg_msg[FEED_ERRMSG] = "", why[128];
    const char *bad;
    feed_connect_result cr;
    feed_op *op;
    int rc;
    feed *f;

    open_errmsg[0] = '\0';
    if (out)
        *out = NULL;
    if (!out || !cfg)
        return open_failed(NULL, FEED_EINVAL, "out or cfg is NULL");
    if ((bad = feed__config_check(cfg, why, sizeof why)) != NULL)
        return open_failed(NULL, FEED_EINVAL, bad);
    if (!(f = calloc(1, sizeof *f)) || feed__core_init(&f->core, cfg) != FEED_OK ||
        feed__topo_init(&f->core) != FEED_OK)
        return open_failed(f, FEED_ENOMEM, "out of memory");
    f->core.handle = f;
    feed__pg_init(&f->pg);
    if ((rc = feed__tls_open(&f->core.cfg, &f->core.tls, redis_msg, sizeof redis_msg)) != FEED_OK)
        return open_failed(f, rc, redis_msg);
    if (!(op = feed__connect_op(&f->core, &cr, &rc)))
        return open_failed(f, FEED_ENOMEM, "out of memory");
    feed__sync_run(f, op);
    op->free(op);
    if (cr.redis_rc != FEED_OK)
        feed__msg_keep(redis_msg, cr.redis_msg);
    if (cr.pg_rc != FEED_OK)
        feed__msg_keep(pg_msg, cr.pg_msg);

    rc = open_outcome(cr.redis_rc, cr.pg_rc);
    feed__msg(f->errmsg, rc, "%s%s%s", redis_msg, *redis_msg && *pg_msg ? "; " : "", pg_msg);
    if (rc == FEED_OK && !f->errmsg[0])     /* what the table's checks warned of */
        feed__msg_keep(f->errmsg, f->core.warnings);
    if (rc != FEED_OK) {
        feed__msg_keep(open_errmsg, f->errmsg);
        feed_close(f);
        return rc;
    }
    *out = f;
    return FEED_OK;
}

void feed_close(feed *f)
{
    if (!f)
        return;
    feed__sync_close(f);
    feed__tls_free(f->core.tls);
    feed__core_free(&f->core);
    free(f);
}

/* A request on the caller's stack: room for a page, newer or hook request
 * (each call checks its request's size against it), aligned for any. */
typedef union stack_op {
    feed_op op;
    char    bytes[4096];
    long double align;
} stack_op;

/* How every call on f begins: out (when given) emptied, f's message
 * cleared. FEED_EINVAL when f is NULL (no handle to carry a message). */
static int call_begin(feed *f, feed_result *out)
{
    if (out)
        memset(out, 0, sizeof *out);
    if (!f)
        return FEED_EINVAL;
    f->errmsg[0] = '\0';
    return FEED_OK;
}

/* A request run to its end and freed (on the heap, or what one on the stack
 * holds); NULL: it could not be made, and *rc says why (read here, after
 * the call that made it: the order in which a call's arguments are
 * evaluated is unspecified). */
static int run_and_free(feed *f, feed_op *op, const int *rc)
{
    int done;

    if (!op)
        return *rc;
    done = feed__sync_run(f, op);
    op->free(op);
    return done;
}

int feed_page(feed *f, int64_t uid, int64_t last_score, int64_t last_id, size_t limit,
              feed_result *out)
{
    return feed_page_ranked(f, uid, last_score, last_id, -1, limit, out, NULL);
}

int feed_page_ranked(feed *f, int64_t uid, int64_t last_score, int64_t last_id, int64_t rank,
                     size_t limit, feed_result *out, int64_t *next_rank)
{
    stack_op u;
    feed_page_op *p = (feed_page_op *)&u.op;
    int rc = FEED_OK;

    if (next_rank)
        *next_rank = -1;
    if (call_begin(f, out) != FEED_OK)
        return FEED_EINVAL;
    if ((rc = feed__page_check(&f->core, f->errmsg, "feed_page", last_score, last_id, rank,
                               limit, out)) != FEED_OK)
        return rc;
    if (feed__page_op_size() > sizeof u)
        return feed__msg(f->errmsg, FEED_ENOMEM, "feed_page: request too large");
    if ((rc = feed__page_init(p, &f->core, f->errmsg, uid, last_score, last_id, rank, limit,
                              out)) != FEED_OK)
        return rc;
    rc = feed__sync_run(f, &u.op);
    if (rc == FEED_OK && out->has_more && next_rank)
        *next_rank = feed__page_next_rank(p);
    u.op.free(&u.op);
    if (rc != FEED_OK)
        memset(out, 0, sizeof *out);
    return rc;
}

int feed_page_newer(feed *f, int64_t uid, int64_t score, int64_t id, size_t limit,
                    feed_result *out)
{
    stack_op u;
    int rc = FEED_OK;

    if (call_begin(f, out) != FEED_OK)
        return FEED_EINVAL;
    if ((rc = feed__newer_check(&f->core, f->errmsg, "feed_page_newer", score, id, limit, out))
        != FEED_OK)
        return rc;
    if (feed__newer_op_size() > sizeof u)
        return feed__msg(f->errmsg, FEED_ENOMEM, "feed_page_newer: request too large");
    if ((rc = feed__newer_init((feed_newer_op *)&u.op, &f->core, f->errmsg, uid, score, id,
                               limit, out)) != FEED_OK)
        return rc;
    rc = run_and_free(f, &u.op, &rc);
    if (rc != FEED_OK)
        memset(out, 0, sizeof *out);
    return rc;
}

/* One hook of owner's feed in family fam, its request on the stack; name is
 * the public call, for messages. */
static int hook(feed *f, const char *name, int kind, int fam, int64_t uid, int64_t score,
                int64_t id)
{
    stack_op u;
    int rc = FEED_OK;

    if (call_begin(f, NULL) != FEED_OK)
        return FEED_EINVAL;
    if ((rc = feed__hook_check(&f->core, f->errmsg, name, kind, fam, score, id)) != FEED_OK)
        return rc;
    if (feed__hook_op_size() > sizeof u)
        return feed__msg(f->errmsg, FEED_ENOMEM, "hook: request too large");
    if ((rc = feed__hook_init((feed_hook_op *)&u.op, &f->core, f->errmsg, kind, fam, uid, score,
                              id)) != FEED_OK)
        return rc;
    return run_and_free(f, &u.op, &rc);
}

int feed_on_insert(feed *f, int64_t uid, int64_t score, int64_t id)
{
    return hook(f, "feed_on_insert", FEED_HOOK_INSERT, FEED_FAM_FEED, uid, score, id);
}

int feed_on_delete(feed *f, int64_t uid, int64_t id)
{
    return hook(f, "feed_on_delete", FEED_HOOK_DELETE, FEED_FAM_FEED, uid, 0, id);
}

int feed_invalidate(feed *f, int64_t uid)
{
    return hook(f, "feed_invalidate", FEED_HOOK_INVALIDATE, FEED_FAM_FEED, uid, 0, 0);
}

int feed_reload(feed *f, int64_t uid)
{
    return hook(f, "feed_reload", FEED_HOOK_RELOAD, FEED_FAM_FEED, uid, 0, 0);
}

int feed_fanout(feed *f, const int64_t *uids, size_t n, int64_t score, int64_t id)
{
    int rc = FEED_OK;

    if (call_begin(f, NULL) != FEED_OK)
        return FEED_EINVAL;
    if (!uids && n > 0)
        return feed__msg(f->errmsg, FEED_EINVAL, "feed_fanout: uids is NULL");
    if ((rc = feed__check_item(f->errmsg, "feed_fanout", score, id)) != FEED_OK)
        return rc;
    if (n == 0)
        return FEED_OK;
    return run_and_free(f, feed__fanout_op(&f->core, f->errmsg, uids, n, score, id, &rc), &rc);
}

/* The checks of a call on n ids of family fam (what names them in
 * messages; name is the public call; n 0 for a call on the whole family):
 * FEED_OK, or the code with f's message set. */
static int ids_check(feed *f, const char *name, const char *what, int fam, const int64_t *ids,
                     size_t n)
{
    int rc;

    if (call_begin(f, NULL) != FEED_OK)
        return FEED_EINVAL;
    if (fam == FEED_FAM_AUTHOR && (rc = feed__authors_on(&f->core, f->errmsg, name)) != FEED_OK)
        return rc;
    if (!ids && n > 0)
        return feed__msg(f->errmsg, FEED_EINVAL, "%s: %s is NULL", name, what);
    return FEED_OK;
}

/* feed_invalidate_many and its authors' twin: ids of family fam (what
 * names them in messages), dropped in one request; name is the public call. */
static int invalidate_many(feed *f, const char *name, const char *what, int fam,
                           const int64_t *ids, size_t n)
{
    int rc = ids_check(f, name, what, fam, ids, n);

    if (rc != FEED_OK || n == 0)
        return rc;
    return run_and_free(f, feed__invalidate_many_op(&f->core, f->errmsg, fam, ids, n, &rc), &rc);
}

/* feed_invalidate_all and its authors' twin: every copy of family fam. */
static int invalidate_all(feed *f, const char *name, int fam, uint64_t *dropped)
{
    int rc;

    if (dropped)
        *dropped = 0;
    if ((rc = ids_check(f, name, NULL, fam, NULL, 0)) != FEED_OK)
        return rc;
    return run_and_free(f, feed__invalidate_all_op(&f->core, f->errmsg, fam, dropped, &rc), &rc);
}

/* Step 3 of the write protocol, ids of family fam: one plain DEL each (what
 * an ACL refusing the hooks' scripts may still allow), in order; after the
 * first that fails, the rest go on the repair list unasked, since Redis is
 * away or refusing. The first failure's message stays on f. */
static int unknown_write(feed *f, const char *name, const char *what, int fam,
                         const int64_t *ids, size_t n)
{
    int rc = ids_check(f, name, what, fam, ids, n);
    size_t i = 0;

    if (rc != FEED_OK)
        return rc;
    while (i < n && (rc = hook(f, name, FEED_HOOK_INVALIDATE, fam, ids[i], 0, 0)) == FEED_OK)
        i++;
    for (i++; i < n; i++)
        feed__repair_remember(&f->core, fam, ids[i]);
    return rc;
}

int feed_on_unknown_write(feed *f, const int64_t *uids, size_t n)
{
    return unknown_write(f, "feed_on_unknown_write", "uids", FEED_FAM_FEED, uids, n);
}

int feed_author_on_unknown_write(feed *f, const int64_t *authors, size_t n)
{
    return unknown_write(f, "feed_author_on_unknown_write", "authors", FEED_FAM_AUTHOR, authors,
                         n);
}

int feed_invalidate_many(feed *f, const int64_t *uids, size_t n)
{
    return invalidate_many(f, "feed_invalidate_many", "uids", FEED_FAM_FEED, uids, n);
}

int feed_invalidate_all(feed *f, uint64_t *dropped)
{
    return invalidate_all(f, "feed_invalidate_all", FEED_FAM_FEED, dropped);
}

int feed_health(feed *f, feed_health_info *out)
{
    int rc = FEED_OK;

    if (call_begin(f, NULL) != FEED_OK)
        return FEED_EINVAL;
    if (!out)
        return feed__msg(f->errmsg, FEED_EINVAL, "feed_health: out is NULL");
    return run_and_free(f, feed__health_op(&f->core, f->errmsg, out, &rc), &rc);
}

/* ---- Read-time merge ---------------------------------------------------- */

int feed_page_merged(feed *f, int64_t uid, const int64_t *authors, size_t n,
                     int64_t last_score, int64_t last_id, size_t limit, feed_result *out)
{
    int rc = FEED_OK;

    if (call_begin(f, out) != FEED_OK)
        return FEED_EINVAL;
    if ((rc = feed__merged_check(&f->core, f->errmsg, "feed_page_merged", authors, n,
                                 last_score, last_id, limit, out)) != FEED_OK)
        return rc;
    if (n == 0)     /* the reader's feed alone: a plain page, with its rank hints */
        return feed_page(f, uid, last_score, last_id, limit, out);
    rc = run_and_free(f, feed__merged_op(&f->core, f->errmsg, uid, authors, n, last_score,
                                         last_id, limit, out, &rc), &rc);
    if (rc != FEED_OK)
        feed_result_free(out);
    return rc;
}

/* The body of the three filtered calls: the unfiltered call's checks, the
 * filter's, then the unfiltered call itself when the filter hides nothing. */
static int filtered(feed *f, int kind, const char *fn, int64_t uid, const int64_t *authors,
                    size_t n, int64_t score, int64_t id, size_t limit, const feed_filter *filter,
                    feed_result *out)
{
    int rc = FEED_OK;

    if (call_begin(f, out) != FEED_OK)
        return FEED_EINVAL;
    if (kind == FEED_FILTER_NEWER)
        rc = feed__newer_check(&f->core, f->errmsg, fn, score, id, limit, out);
    else if (kind == FEED_FILTER_MERGED)
        rc = feed__merged_check(&f->core, f->errmsg, fn, authors, n, score, id, limit, out);
    else
        rc = feed__page_check(&f->core, f->errmsg, fn, score, id, -1, limit, out);
    if (rc != FEED_OK ||
        (rc = feed__filter_check(&f->core, f->errmsg, fn, kind, filter)) != FEED_OK)
        return rc;
    if (feed__filter_empty(filter))
        return kind == FEED_FILTER_NEWER ? feed_page_newer(f, uid, score, id, limit, out)
             : kind == FEED_FILTER_MERGED ? feed_page_merged(f, uid, authors, n, score, id, limit,
                                                             out)
             : feed_page(f, uid, score, id, limit, out);
    rc = run_and_free(f, feed__filter_op(&f->core, f->errmsg, kind, uid, authors, n, score, id,
                                         limit, filter, out, &rc), &rc);
    if (rc != FEED_OK)
        feed_result_free(out);
    return rc;
}

int feed_page_filtered(feed *f, int64_t uid, int64_t last_score, int64_t last_id, size_t limit,
                       const feed_filter *filter, feed_result *out)
{
    return filtered(f, FEED_FILTER_PAGE, "feed_page_filtered", uid, NULL, 0, last_score, last_id,
                    limit, filter, out);
}

int feed_page_merged_filtered(feed *f, int64_t uid, const int64_t *authors, size_t n,
                              int64_t last_score, int64_t last_id, size_t limit,
                              const feed_filter *filter, feed_result *out)
{
    return filtered(f, FEED_FILTER_MERGED, "feed_page_merged_filtered", uid, authors, n,
                    last_score, last_id, limit, filter, out);
}

int feed_page_newer_filtered(feed *f, int64_t uid, int64_t score, int64_t id, size_t limit,
                             const feed_filter *filter, feed_result *out)
{
    return filtered(f, FEED_FILTER_NEWER, "feed_page_newer_filtered", uid, NULL, 0, score, id,
                    limit, filter, out);
}

int feed_author_on_insert(feed *f, int64_t author, int64_t score, int64_t id)
{
    return hook(f, "feed_author_on_insert", FEED_HOOK_INSERT, FEED_FAM_AUTHOR, author, score,
                id);
}

int feed_author_on_delete(feed *f, int64_t author, int64_t id)
{
    return hook(f, "feed_author_on_delete", FEED_HOOK_DELETE, FEED_FAM_AUTHOR, author, 0, id);
}

int feed_author_invalidate_many(feed *f, const int64_t *authors, size_t n)
{
    return invalidate_many(f, "feed_author_invalidate_many", "authors", FEED_FAM_AUTHOR, authors,
                           n);
}

int feed_author_invalidate(feed *f, int64_t author)
{
    return hook(f, "feed_author_invalidate", FEED_HOOK_INVALIDATE, FEED_FAM_AUTHOR, author, 0, 0);
}

int feed_author_invalidate_all(feed *f, uint64_t *dropped)
{
    return invalidate_all(f, "feed_author_invalidate_all", FEED_FAM_AUTHOR, dropped);
}
