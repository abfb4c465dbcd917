/* writes.c -- the write routes: the row changes in a PostgreSQL transaction
 * (the application's own work), then the library's hook runs after COMMIT.
 * The same routes serve a user's feed (the feed table, feed_on_insert and
 * feed_on_delete) and an author's own posts (the authors' table,
 * feed_author_on_insert and feed_author_on_delete; rq->author).
 * Each route is a chain of backend operations: the transaction, whose
 * completion starts the hook, whose completion answers (or, when the hook
 * failed, first drops the cached copies).
 *
 * This is the library's write protocol (feedcache.h, feed_on_unknown_write):
 * COMMIT, then the hook; when the hook fails, or COMMIT's outcome is
 * unknown, feed_on_unknown_write (feed_author_on_unknown_write for an
 * author's copy) with the feeds the write may have touched. It drops their
 * copies at once with a plain DEL (which an ACL refusing the hooks' scripts
 * may still allow); what it cannot drop stays on the library's repair list
 * until Redis takes it. The answer's "cache" field says which: "ok",
 * "invalidated" or "repair-pending".
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

#define ID_RULE "a non-negative integer (a JSON integer or a string of decimal digits, " \
                "at most 9223372036854775807)"
#define SCORE_RULE "score must be a JSON integer in -9007199254740991..9007199254740991 " \
                   "(+/-(2^53-1))"

/* ---- JSON input ---- */

static int json_id(const json_t *v, int64_t *out)
{
    if (json_is_integer(v)) {
        json_int_t i = json_integer_value(v);
        if (i < 0)
            return -1;
        *out = (int64_t)i;
        return 0;
    }
    if (json_is_string(v) && strlen(json_string_value(v)) == json_string_length(v))
        return parse_i64_nonneg(json_string_value(v), out);
    return -1;
}

static int json_score(const json_t *v, int64_t *out)
{
    json_int_t i;

    if (!json_is_integer(v))
        return -1;
    i = json_integer_value(v);
    if (i < -FEED_SCORE_MAX || i > FEED_SCORE_MAX)
        return -1;
    *out = (int64_t)i;
    return 0;
}

/* The body as a JSON object whose keys are all in allowed (a NULL-ended
 * list). On error returns NULL and writes the message for a 400. */
static json_t *body_object(const request *rq, const char *const *allowed,
                           char *err, size_t errlen)
{
    json_error_t e;
    json_t *j, *val;
    const char *key;

    if (rq->len == 0) {
        snprintf(err, errlen, "the request body must be a JSON object");
        return NULL;
    }
    j = json_loadb(rq->body, rq->len, JSON_REJECT_DUPLICATES, &e);
    if (!j) {
        snprintf(err, errlen, "malformed JSON: %s (line %d, column %d)", e.text, e.line, e.column);
        return NULL;
    }
    if (!json_is_object(j)) {
        snprintf(err, errlen, "the request body must be a JSON object");
        json_decref(j);
        return NULL;
    }
    json_object_foreach(j, key, val) {
        size_t i;
        (void)val;
        for (i = 0; allowed[i] && strcmp(key, allowed[i]) != 0; i++)
            ;
        if (!allowed[i]) {
            snprintf(err, errlen, "unknown field \"%.40s\"", key);
            json_decref(j);
            return NULL;
        }
    }
    return j;
}

/* ---- the SQL: BEGIN; one statement; COMMIT (backend_sync.c, pg_async.c) ---- */

/* What a write works on: a user's feed, or an author's posts. The
 * statements are on the configured table and columns (feed_config). */
typedef struct target {
    const char *path;       /* the Location of a new row: /path/{owner}/{item}s/{id} */
    const char *item;       /* "item", "post" */
    const char *inserted, *deleted;     /* the hooks, for the log */
    char       *insert, *update, *delete;
} target;

static target targets[2] = {
    { "users", "item", "feed_on_insert", "feed_on_delete", NULL, NULL, NULL },
    { "authors", "post", "feed_author_on_insert", "feed_author_on_delete", NULL, NULL, NULL },
};
static char *fanout_stmt;

static const target *target_of(const request *rq)
{
    return &targets[rq->author != 0];
}

static char *quote_ident(const char *s)   /* "s" with " doubled */
{
    char *q = malloc(2 * strlen(s) + 3), *p = q;

    if (!q)
        return NULL;
    *p++ = '"';
    for (; *s; s++)
        if ((*p++ = *s) == '"')
            *p++ = '"';
    *p++ = '"';
    *p = '\0';
    return q;
}

/* INSERT, UPDATE and DELETE of one row of table (owner u, score s, id i:
 * quoted identifiers; author: the item's author column, NULL for none)
 * into t; 0, or -1 when out of memory. */
static int target_init(target *t, const char *table, const char *owner, const char *score,
                       const char *id, const char *author)
{
    char *tb = quote_ident(table), *u = quote_ident(owner), *sc = quote_ident(score),
         *i = quote_ident(id), *a = author ? quote_ident(author) : NULL;
    sbuf b[3] = { { 0 }, { 0 }, { 0 } };
    int ok = tb && u && sc && i && (a || !author);

    if (ok && a)
        sb_printf(&b[0], "INSERT INTO %s (%s, %s, %s, %s) VALUES ($1, $2, $3, $4)", tb, u, sc,
                  i, a);
    else if (ok)
        sb_printf(&b[0], "INSERT INTO %s (%s, %s, %s) VALUES ($1, $2, $3)", tb, u, sc, i);
    if (ok) {
        sb_printf(&b[1], "UPDATE %s SET %s = $2 WHERE %s = $1 AND %s = $3", tb, sc, u, i);
        sb_printf(&b[2], "DELETE FROM %s WHERE %s = $1 AND %s = $2 RETURNING %s", tb, u, i, sc);
    }
    free(tb);
    free(u);
    free(sc);
    free(i);
    free(a);
    t->insert = b[0].data;
    t->update = b[1].data;
    t->delete = b[2].data;
    return ok && !b[0].failed && !b[1].failed && !b[2].failed ? 0 : -1;
}

int writes_init(void)
{
    const feed_config *c = &opt.cfg;
    char *t = quote_ident(c->table), *u = quote_ident(c->owner_column),
         *s = quote_ident(c->score_column), *i = quote_ident(c->id_column),
         *a = c->item_author_column ? quote_ident(c->item_author_column) : NULL;
    sbuf b = { 0 };
    int ok = t && u && s && i && (a || !c->item_author_column);

    /* An upsert: fanning the same item out again sets its score (never its
     * author: an item's author does not change). */
    if (ok && a)
        sb_printf(&b, "INSERT INTO %s (%s, %s, %s, %s) SELECT u, $2, $1, $4 FROM "
                  "unnest($3::bigint[]) AS u ON CONFLICT (%s, %s) DO UPDATE SET %s = "
                  "EXCLUDED.%s", t, u, s, i, a, u, i, s, s);
    else if (ok)
        sb_printf(&b, "INSERT INTO %s (%s, %s, %s) SELECT u, $2, $1 FROM unnest($3::bigint[]) "
                  "AS u ON CONFLICT (%s, %s) DO UPDATE SET %s = EXCLUDED.%s", t, u, s, i, u, i,
                  s, s);
    free(t);
    free(u);
    free(s);
    free(i);
    free(a);
    fanout_stmt = b.data;
    ok = ok && !b.failed &&
         target_init(&targets[0], c->table, c->owner_column, c->score_column, c->id_column,
                     c->item_author_column) == 0;
    if (ok && c->author_table)
        ok = target_init(&targets[1], c->author_table, c->author_column, c->score_column,
                         c->id_column, NULL) == 0;
    return ok ? 0 : -1;
}

void writes_free(void)
{
    for (size_t k = 0; k < 2; k++) {
        free(targets[k].insert);
        free(targets[k].update);
        free(targets[k].delete);
    }
    free(fanout_stmt);
}


/* ---- after the commit: the cache ---- */

/* The answer to a write, after its commit. */
static void reply(request *rq)
{
    json_t *obj = json_pack("{s:o,s:I,s:s}", "id", id_json(rq->id), "score",
                            (json_int_t)rq->score, "cache", rq->cache ? rq->cache : "ok");
    char loc[80];
    const char *const hdr[] = { "Location", loc, NULL };

    if (obj && rq->route == R_FANOUT)
        json_object_set_new(obj, "users", json_integer((json_int_t)rq->n));
    if (rq->create) {
        snprintf(loc, sizeof loc, "/%s/%" PRId64 "/%ss/%" PRId64, target_of(rq)->path, rq->uid,
                 target_of(rq)->item, rq->id);
        respond_json(rq, 201, obj, hdr);
    } else {
        respond_json(rq, 200, obj, NULL);
    }
}

static void tx_error(request *rq, enum tx_result tx, const char *conflict)
{
    switch (tx) {
    case TX_CONFLICT:
        respond_error(rq, 409, "%s", conflict);
        break;
    case TX_DOWN:
        respond_error(rq, 503, "PostgreSQL is unavailable; nothing was written");
        break;
    case TX_UNKNOWN:
        respond_error(rq, 503, "PostgreSQL went away during COMMIT; the write may "
                      "or may not have happened");
        break;
    default:
        respond_error(rq, 500, "PostgreSQL refused the write");
    }
}

/* The copies the write may have touched are dropped (FEED_OK) or on the
 * library's repair list: count, answer. */
static void dropped(request *rq, int rc, const char *errmsg)
{
    worker *w = rq->w;

    (void)errmsg;
    pthread_mutex_lock(&w->lock);
    w->c.hook_failures++;
    w->c.invalidations += rc == FEED_OK ? rq->n : 0;
    pthread_mutex_unlock(&w->lock);
    if (rq->tx == TX_UNKNOWN) {
        tx_error(rq, TX_UNKNOWN, "");
        return;
    }
    rq->cache = rc == FEED_OK ? "invalidated" : "repair-pending";
    reply(rq);
}

/* A hook for rq's feeds failed (what, msg) after its row committed, or the
 * commit's outcome is unknown: the write protocol's last step
 * (feed_on_unknown_write, feed_author_on_unknown_write), then answer. */
static void hook_failed(request *rq, const char *what, const char *msg)
{
    if (rq->n == 1)
        fprintf(stderr, "%s: %s for %s %" PRId64 " failed after commit: %s\n",
                progname, what, rq->author ? "author" : "uid", rq->uids[0], msg);
    else
        fprintf(stderr, "%s: %s for %zu feeds failed after commit: %s\n",
                progname, what, rq->n, msg);
    if (rq->author)
        rq->w->ops->author_drop(rq->w->be, rq, rq->uids, rq->n, dropped);
    else
        rq->w->ops->drop(rq->w->be, rq, rq->uids, rq->n, dropped);
}

static void hooked(request *rq, int rc, const char *errmsg)
{
    if (rc != FEED_OK)
        hook_failed(rq, rq->what, errmsg);
    else
        reply(rq);
}

/* The transaction's outcome: on TX_OK the caller goes on; otherwise the
 * answer is under way and 1 is returned. */
static int tx_failed(request *rq, const tx_outcome *tx, const char *conflict)
{
    if (tx->res == TX_OK)
        return 0;
    snprintf(rq->err, sizeof rq->err, "%s", tx->err ? tx->err : "");
    rq->tx = tx->res;
    if (tx->res == TX_UNKNOWN)   /* it may have committed: drop the copies */
        hook_failed(rq, rq->what, "commit outcome unknown");
    else
        tx_error(rq, tx->res, conflict);
    return 1;
}

/* ---- the routes ---- */

/* The hook of one row's change, on a feed or an author's posts. */
static void hook_one(request *rq, int insert)
{
    const backend_ops *ops = rq->w->ops;

    rq->what = insert ? target_of(rq)->inserted : target_of(rq)->deleted;
    if (insert)
        (rq->author ? ops->author_on_insert : ops->on_insert)(rq->w->be, rq, rq->uid,
                                                               rq->score, rq->id, hooked);
    else
        (rq->author ? ops->author_on_delete : ops->on_delete)(rq->w->be, rq, rq->uid, rq->id,
                                                               hooked);
}

/* 404: no such row. */
static void no_row(request *rq)
{
    if (rq->author)
        respond_error(rq, 404, "author %" PRId64 " has no post %" PRId64, rq->uid, rq->id);
    else
        respond_error(rq, 404, "no item %" PRId64 " in the feed of user %" PRId64, rq->id,
                      rq->uid);
}

/* One uid: rq->uids points at it (freed with the request). */
static int one_uid(request *rq, int64_t uid)
{
    if (!(rq->uids = malloc(sizeof *rq->uids)))
        return -1;
    rq->uids[0] = rq->uid = uid;
    rq->n = 1;
    return 0;
}

static void put_committed(request *rq, const tx_outcome *tx)
{
    if (tx_failed(rq, tx, rq->author ? "the author already has a post with this id; "
                  "PUT changes its score" : "an item with this id is already in the feed; "
                  "PUT changes its score"))
        return;
    if (tx->rows == 0) {   /* UPDATE of no row: committed a no-op, nothing to tell the cache */
        no_row(rq);
        return;
    }
    hook_one(rq, 1);
}

/* POST /users/{uid}/items, PUT /users/{uid}/items, PUT /users/{uid}/items/{id}:
 * path_id < 0 when the id is not in the path. With rq->author, the same for
 * /authors/{author}/posts: uid is the author. */
/* The body's "author": required when a new feed row needs its author
 * (item_author_column), refused anywhere else. 0, or 1 after a queued 400. */
static int body_author(request *rq, const json_t *body, int needed, int64_t *author)
{
    const json_t *v = json_object_get(body, "author");

    if (!needed && v)
        return respond_error(rq, 400, "%s", !opt.cfg.item_author_column || rq->author
                             ? "unknown field \"author\"" : "an item's author never changes: "
                             "delete the item and insert it again"), 1;
    if (needed && !v)
        return respond_error(rq, 400, "missing field \"author\": the feed table names each "
                             "item's author (--item-author-column)"), 1;
    if (needed && json_id(v, author) != 0)
        return respond_error(rq, 400, "author must be " ID_RULE), 1;
    return 0;
}

void put_item(request *rq, int64_t uid, int64_t path_id, int create)
{
    static const char *const allowed[] = { "id", "score", "author", NULL };
    char err[300];
    int64_t id = path_id, score = 0, author = -1;
    json_t *body, *v;
    int rc, with_author = create && !rq->author && opt.cfg.item_author_column;

    if (!(body = body_object(rq, allowed, err, sizeof err))) {
        respond_error(rq, 400, "%s", err);
        return;
    }
    if (body_author(rq, body, with_author, &author)) {
        json_decref(body);
        return;
    }
    if ((v = json_object_get(body, "id")) != NULL) {
        int64_t body_id;
        rc = json_id(v, &body_id);
        if (rc == 0 && path_id >= 0 && body_id != path_id)
            rc = 1;
        if (rc != 0) {
            json_decref(body);
            respond_error(rq, 400, rc < 0 ? "id must be " ID_RULE
                          : "the id in the body differs from the id in the path");
            return;
        }
        id = body_id;
    } else if (path_id < 0) {
        json_decref(body);
        respond_error(rq, 400, "missing field \"id\"");
        return;
    }
    v = json_object_get(body, "score");
    rc = v ? json_score(v, &score) : -1;
    json_decref(body);
    if (!v || rc != 0) {
        respond_error(rq, 400, "%s", v ? SCORE_RULE : "missing field \"score\"");
        return;
    }
    if (one_uid(rq, uid) != 0) {
        respond_error(rq, 500, "out of memory");
        return;
    }
    rq->id = id;
    rq->score = score;
    rq->create = create;
    rq->what = create ? "insert" : "update";
    snprintf(rq->param[0], sizeof rq->param[0], "%" PRId64, uid);
    snprintf(rq->param[1], sizeof rq->param[1], "%" PRId64, score);
    snprintf(rq->param[2], sizeof rq->param[2], "%" PRId64, id);
    snprintf(rq->param[3], sizeof rq->param[3], "%" PRId64, author);
    for (int i = 0; i < 4; i++)
        rq->params[i] = rq->param[i];
    rq->w->ops->tx(rq->w->be, rq, create ? target_of(rq)->insert : target_of(rq)->update,
                   with_author ? 4 : 3, rq->params, put_committed);
}

static void delete_committed(request *rq, const tx_outcome *tx)
{
    if (tx_failed(rq, tx, "conflict"))
        return;
    if (tx->rows != 1 || !tx->first || sscanf(tx->first, "%" SCNd64, &rq->score) != 1) {
        no_row(rq);
        return;
    }
    hook_one(rq, 0);
}

void delete_item(request *rq, int64_t uid, int64_t id)
{
    if (rq->len > 0) {
        respond_error(rq, 400, "DELETE takes no request body");
        return;
    }
    if (one_uid(rq, uid) != 0) {
        respond_error(rq, 500, "out of memory");
        return;
    }
    rq->id = id;
    rq->what = "delete";
    snprintf(rq->param[0], sizeof rq->param[0], "%" PRId64, uid);
    snprintf(rq->param[1], sizeof rq->param[1], "%" PRId64, id);
    rq->params[0] = rq->param[0];
    rq->params[1] = rq->param[1];
    rq->w->ops->tx(rq->w->be, rq, target_of(rq)->delete, 2, rq->params, delete_committed);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The uids of a fan-out body into rq->uids, rq->n: sorted, each once.
 * Returns 1 after a queued 400 or 500. */
static int fanout_uids(request *rq, json_t *uids_j)
{
    json_t *v;
    size_t i, m = 0;

    if (!json_is_array(uids_j) || json_array_size(uids_j) == 0 ||
        json_array_size(uids_j) > opt.max_fanout)
        return respond_error(rq, 400, "uids must be an array of 1..%zu user ids",
                             opt.max_fanout), 1;
    if (!(rq->uids = malloc(json_array_size(uids_j) * sizeof *rq->uids)))
        return respond_error(rq, 500, "out of memory"), 1;
    json_array_foreach(uids_j, i, v) {
        if (json_id(v, &rq->uids[i]) != 0)
            return respond_error(rq, 400, "uids[%zu] must be " ID_RULE, i), 1;
    }
    /* One row per user: a uid listed twice counts once. */
    qsort(rq->uids, i, sizeof *rq->uids, cmp_i64);
    for (size_t k = 0; k < i; k++)
        if (m == 0 || rq->uids[k] != rq->uids[m - 1])
            rq->uids[m++] = rq->uids[k];
    rq->n = m;
    return 0;
}

static void fanout_committed(request *rq, const tx_outcome *tx)
{
    if (tx_failed(rq, tx, "conflict"))
        return;
    /* Some feeds may be updated, others not, when it fails: all are suspect. */
    rq->what = "feed_fanout";
    rq->w->ops->fanout(rq->w->be, rq, rq->uids, rq->n, rq->score, rq->id, hooked);
}

void fanout(request *rq, int64_t id)
{
    static const char *const allowed[] = { "score", "uids", "author", NULL };
    char err[300];
    json_t *body, *v;
    sbuf arr = { 0 };
    int64_t author = -1;
    int bad, with_author = opt.cfg.item_author_column != NULL;

    if (!(body = body_object(rq, allowed, err, sizeof err))) {
        respond_error(rq, 400, "%s", err);
        return;
    }
    if (body_author(rq, body, with_author, &author)) {
        json_decref(body);
        return;
    }
    v = json_object_get(body, "score");
    if (!v || json_score(v, &rq->score) != 0) {
        json_decref(body);
        respond_error(rq, 400, "%s", v ? SCORE_RULE : "missing field \"score\"");
        return;
    }
    bad = fanout_uids(rq, json_object_get(body, "uids"));
    json_decref(body);
    if (bad)
        return;
    sb_printf(&arr, "{");
    for (size_t i = 0; i < rq->n; i++)
        sb_printf(&arr, "%s%" PRId64, i ? "," : "", rq->uids[i]);
    sb_printf(&arr, "}");
    rq->arr = arr.data;
    if (arr.failed) {
        respond_error(rq, 500, "out of memory");
        return;
    }
    rq->id = id;
    rq->what = "fanout";
    snprintf(rq->param[0], sizeof rq->param[0], "%" PRId64, id);
    snprintf(rq->param[1], sizeof rq->param[1], "%" PRId64, rq->score);
    rq->params[0] = rq->param[0];
    rq->params[1] = rq->param[1];
    rq->params[2] = rq->arr;
    snprintf(rq->param[3], sizeof rq->param[3], "%" PRId64, author);
    rq->params[3] = rq->param[3];
    rq->w->ops->tx(rq->w->be, rq, fanout_stmt, with_author ? 4 : 3, rq->params,
                   fanout_committed);
}
