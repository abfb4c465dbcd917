/* async.c -- the asynchronous API: each call checks its arguments, makes
 * its request (core/) and starts it on the handle's loop (lib/drive/async.c).
 * An argument error is returned at once, and no callback comes. */
#include <stdlib.h>

#include "drive/async.h"

/* Start r once its operation is made (rc FEED_OK), or hand the making's
 * message to the handle and give r back: a request refused here never
 * calls back. */
static int launch(feed_async *a, feed_areq *r, int rc)
{
    if (rc != FEED_OK) {
        feed__msg_keep(a->errmsg, r->err);
        feed__async_discard(r);
        return rc;
    }
    feed__async_start(r);
    return FEED_OK;
}

/* The body of every page call: kind (FEED_FILTER_*) says which, a ranked
 * page is FEED_FILTER_PAGE with ranked_cb, and filtered says whether the
 * call takes filter. The call's checks, the filter's, then its request: a
 * filter that hides nothing makes the unfiltered call's request. */
static int pages(feed_async *a, int kind, const char *fn, int64_t uid, const int64_t *authors,
                 size_t n, int64_t score, int64_t id, int64_t rank, size_t limit,
                 int filtered, const feed_filter *filter, feed_async_page_cb *cb,
                 feed_async_ranked_cb *ranked_cb, void *arg)
{
    feed_result probe = { 0 };
    size_t size = kind == FEED_FILTER_NEWER ? feed__newer_op_size() : feed__page_op_size();
    int heap, rc;
    feed_areq *r;

    if (!a)
        return FEED_EINVAL;
    a->errmsg[0] = '\0';
    if (kind == FEED_FILTER_NEWER)
        rc = feed__newer_check(&a->core, a->errmsg, fn, score, id, limit, &probe);
    else if (kind == FEED_FILTER_MERGED)
        rc = feed__merged_check(&a->core, a->errmsg, fn, authors, n, score, id, limit, &probe);
    else
        rc = feed__page_check(&a->core, a->errmsg, fn, score, id, rank, limit, &probe);
    if (rc != FEED_OK ||
        (filtered && (rc = feed__filter_check(&a->core, a->errmsg, fn, kind, filter)) != FEED_OK))
        return rc;
    filtered = filtered && !feed__filter_empty(filter);
    heap = filtered || (kind == FEED_FILTER_MERGED && n > 0);   /* else the machine is in r */
    if (!(r = feed__async_request(a, heap ? 0 : size, FEED_API_PAGE, arg)))
        return feed__msg(a->errmsg, FEED_ENOMEM, "%s: out of memory", fn);
    r->cb.page = cb;
    r->cb.ranked = ranked_cb;
    if (filtered)       /* rc is FEED_OK here; a machine that cannot be made sets it */
        r->op = feed__filter_op(&a->core, r->err, kind, uid, authors, n, score, id, limit, filter,
                                &r->result, &rc);
    else if (heap)
        r->op = feed__merged_op(&a->core, r->err, uid, authors, n, score, id, limit, &r->result,
                                &rc);
    else if (kind == FEED_FILTER_NEWER)
        rc = feed__newer_init((feed_newer_op *)r->op, &a->core, r->err, uid, score, id, limit,
                              &r->result);
    else    /* a page of the reader's feed alone (a merged page of no author too) */
        rc = feed__page_init((feed_page_op *)r->op, &a->core, r->err, uid, score, id, rank, limit,
                             &r->result);
    return launch(a, r, rc);
}

int feed_async_page(feed_async *a, int64_t uid, int64_t last_score, int64_t last_id,
                    size_t limit, feed_async_page_cb *cb, void *arg)
{
    return pages(a, FEED_FILTER_PAGE, "feed_async_page", uid, NULL, 0, last_score, last_id, -1,
                 limit, 0, NULL, cb, NULL, arg);
}

int feed_async_page_ranked(feed_async *a, int64_t uid, int64_t last_score, int64_t last_id,
                           int64_t rank, size_t limit, feed_async_ranked_cb *cb, void *arg)
{
    return pages(a, FEED_FILTER_PAGE, "feed_async_page_ranked", uid, NULL, 0, last_score, last_id,
                 rank, limit, 0, NULL, NULL, cb, arg);
}

int feed_async_page_newer(feed_async *a, int64_t uid, int64_t score, int64_t id, size_t limit,
                          feed_async_page_cb *cb, void *arg)
{
    return pages(a, FEED_FILTER_NEWER, "feed_async_page_newer", uid, NULL, 0, score, id, -1,
                 limit, 0, NULL, cb, NULL, arg);
}

/* A hook of one feed, owner's in family fam; name is the public call, for
 * messages. Bad arguments are refused before a request exists. */
static int hook(feed_async *a, const char *name, int kind, int fam, int64_t uid, int64_t score,
                int64_t id, feed_async_done_cb *cb, void *arg)
{
    feed_areq *r;
    int rc;

    if (!a)
        return FEED_EINVAL;
    a->errmsg[0] = '\0';
    if ((rc = feed__hook_check(&a->core, a->errmsg, name, kind, fam, score, id)) != FEED_OK)
        return rc;
    if (!(r = feed__async_request(a, feed__hook_op_size(), FEED_API_DONE, arg)))
        return feed__msg(a->errmsg, FEED_ENOMEM, "out of memory for a hook");
    r->cb.done = cb;
    rc = feed__hook_init((feed_hook_op *)r->op, &a->core, r->err, kind, fam, uid, score, id);
    return launch(a, r, rc);
}

int feed_async_on_insert(feed_async *a, int64_t uid, int64_t score, int64_t id,
                         feed_async_done_cb *cb, void *arg)
{
    return hook(a, "feed_async_on_insert", FEED_HOOK_INSERT, FEED_FAM_FEED, uid, score, id, cb,
                arg);
}

int feed_async_on_delete(feed_async *a, int64_t uid, int64_t id, feed_async_done_cb *cb,
                         void *arg)
{
    return hook(a, "feed_async_on_delete", FEED_HOOK_DELETE, FEED_FAM_FEED, uid, 0, id, cb, arg);
}

int feed_async_invalidate(feed_async *a, int64_t uid, feed_async_done_cb *cb, void *arg)
{
    return hook(a, "feed_async_invalidate", FEED_HOOK_INVALIDATE, FEED_FAM_FEED, uid, 0, 0, cb,
                arg);
}

int feed_async_fanout(feed_async *a, const int64_t *uids, size_t n, int64_t score, int64_t id,
                      feed_async_done_cb *cb, void *arg)
{
    feed_areq *r;
    int rc;

    if (!a)
        return FEED_EINVAL;
    a->errmsg[0] = '\0';
    if (!uids && n > 0)
        return feed__msg(a->errmsg, FEED_EINVAL, "feed_async_fanout: uids is NULL");
    if ((rc = feed__check_item(a->errmsg, "feed_async_fanout", score, id)) != FEED_OK)
        return rc;
    if (n == 0)     /* nothing to do, but the callback still comes, from the loop */
        return hook(a, "feed_async_fanout", FEED_HOOK_NONE, FEED_FAM_FEED, 0, 0, 0, cb, arg);
    if (!(r = feed__async_request(a, 0, FEED_API_DONE, arg)))
        return feed__msg(a->errmsg, FEED_ENOMEM, "feed_async_fanout: out of memory");
    r->cb.done = cb;
    r->op = feed__fanout_op(&a->core, r->err, uids, n, score, id, &rc);
    return launch(a, r, r->op ? FEED_OK : rc);
}

int feed_async_health(feed_async *a, feed_async_health_cb *cb, void *arg)
{
    feed_areq *r;
    int rc;

    if (!a)
        return FEED_EINVAL;
    a->errmsg[0] = '\0';
    if (!cb)
        return feed__msg(a->errmsg, FEED_EINVAL, "feed_async_health: cb is NULL");
    if (!(r = feed__async_request(a, sizeof(feed_health_info), FEED_API_HEALTH, arg)))
        return feed__msg(a->errmsg, FEED_ENOMEM, "feed_async_health: out of memory");
    r->cb.health = cb;
    r->op = feed__health_op(&a->core, r->err, (feed_health_info *)r->op_space, &rc);
    return launch(a, r, r->op ? FEED_OK : rc);
}

/* ---- Read-time merge ---------------------------------------------------- */

int feed_async_page_merged(feed_async *a, int64_t uid, const int64_t *authors, size_t n,
                           int64_t last_score, int64_t last_id, size_t limit,
                           feed_async_page_cb *cb, void *arg)
{
    return pages(a, FEED_FILTER_MERGED, "feed_async_page_merged", uid, authors, n, last_score,
                 last_id, -1, limit, 0, NULL, cb, NULL, arg);
}

int feed_async_author_on_insert(feed_async *a, int64_t author, int64_t score, int64_t id,
                                feed_async_done_cb *cb, void *arg)
{
    return hook(a, "feed_async_author_on_insert", FEED_HOOK_INSERT, FEED_FAM_AUTHOR, author,
                score, id, cb, arg);
}

int feed_async_author_on_delete(feed_async *a, int64_t author, int64_t id,
                                feed_async_done_cb *cb, void *arg)
{
    return hook(a, "feed_async_author_on_delete", FEED_HOOK_DELETE, FEED_FAM_AUTHOR, author, 0,
                id, cb, arg);
}

int feed_async_author_invalidate(feed_async *a, int64_t author, feed_async_done_cb *cb,
                                 void *arg)
{
    return hook(a, "feed_async_author_invalidate", FEED_HOOK_INVALIDATE, FEED_FAM_AUTHOR, author,
                0, 0, cb, arg);
}

/* ---- Step 3 of the write protocol --------------------------------------- */

/* One feed_async_on_unknown_write: a DEL request per id, all started at
 * once (the loop pipelines them); the caller's callback comes once, when
 * the last of them has called back, with the first failure's code and
 * message. Each request that fails puts its id on the repair list. */
typedef struct unknown_write {
    feed_async_done_cb *cb;
    void               *arg;
    size_t              left;       /* requests still to call back */
    int                 rc;         /* the first failure's, else FEED_OK */
    char                err[FEED_ERRMSG];
} unknown_write;

/* One DEL request called back; after the last, the caller's callback. */
static void unknown_write_one(feed_async *a, int rc, void *arg)
{
    unknown_write *u = arg;

    if (rc != FEED_OK && u->rc == FEED_OK) {
        u->rc = rc;
        feed__msg_keep(u->err, feed_async_errmsg(a));
    }
    if (--u->left > 0)
        return;
    if (u->cb) {
        a->cur_err = u->err;        /* feed_async_errmsg, during the callback */
        u->cb(a, u->rc, u->arg);
    }
    free(u);
}

static int unknown_write_start(feed_async *a, const char *name, const char *what, int fam,
                               const int64_t *ids, size_t n, feed_async_done_cb *cb, void *arg)
{
    unknown_write *u;
    int rc;

    if (!a)
        return FEED_EINVAL;
    a->errmsg[0] = '\0';
    if (fam == FEED_FAM_AUTHOR && (rc = feed__authors_on(&a->core, a->errmsg, name)) != FEED_OK)
        return rc;
    if (!ids && n > 0)
        return feed__msg(a->errmsg, FEED_EINVAL, "%s: %s is NULL", name, what);
    if (n == 0)     /* nothing to do, but the callback still comes, from the loop */
        return hook(a, name, FEED_HOOK_NONE, fam, 0, 0, 0, cb, arg);
    if (!(u = calloc(1, sizeof *u)))
        return feed__msg(a->errmsg, FEED_ENOMEM, "%s: out of memory", name);
    u->cb = cb;
    u->arg = arg;
    u->left = 1;    /* held while starting, so no callback can end u early */
    for (size_t i = 0; i < n; i++) {
        u->left++;
        if ((rc = hook(a, name, FEED_HOOK_INVALIDATE, fam, ids[i], 0, 0, unknown_write_one,
                       u)) != FEED_OK) {
            u->left--;                       /* no callback comes for it: */
            for (; i < n; i++)               /* it and the rest wait for Redis */
                feed__repair_remember(&a->core, fam, ids[i]);
            if (u->left == 1) {              /* nothing started */
                free(u);
                return rc;
            }
            u->rc = rc;
            feed__msg_keep(u->err, a->errmsg);
            break;
        }
    }
    u->left--;      /* callbacks come from the loop, never from inside this call */
    return FEED_OK;
}

int feed_async_on_unknown_write(feed_async *a, const int64_t *uids, size_t n,
                                feed_async_done_cb *cb, void *arg)
{
    return unknown_write_start(a, "feed_async_on_unknown_write", "uids", FEED_FAM_FEED, uids, n,
                               cb, arg);
}

int feed_async_author_on_unknown_write(feed_async *a, const int64_t *authors, size_t n,
                                       feed_async_done_cb *cb, void *arg)
{
    return unknown_write_start(a, "feed_async_author_on_unknown_write", "authors",
                               FEED_FAM_AUTHOR, authors, n, cb, arg);
}

int feed_async_page_filtered(feed_async *a, int64_t uid, int64_t last_score, int64_t last_id,
                             size_t limit, const feed_filter *filter, feed_async_page_cb *cb,
                             void *arg)
{
    return pages(a, FEED_FILTER_PAGE, "feed_async_page_filtered", uid, NULL, 0, last_score,
                 last_id, -1, limit, 1, filter, cb, NULL, arg);
}

int feed_async_page_merged_filtered(feed_async *a, int64_t uid, const int64_t *authors, size_t n,
                                    int64_t last_score, int64_t last_id, size_t limit,
                                    const feed_filter *filter, feed_async_page_cb *cb, void *arg)
{
    return pages(a, FEED_FILTER_MERGED, "feed_async_page_merged_filtered", uid, authors, n,
                 last_score, last_id, -1, limit, 1, filter, cb, NULL, arg);
}

int feed_async_page_newer_filtered(feed_async *a, int64_t uid, int64_t score, int64_t id,
                                   size_t limit, const feed_filter *filter,
                                   feed_async_page_cb *cb, void *arg)
{
    return pages(a, FEED_FILTER_NEWER, "feed_async_page_newer_filtered", uid, NULL, 0, score,
                 id, -1, limit, 1, filter, cb, NULL, arg);
}
