/* writes.c -- the write routes: the row changes in a PostgreSQL transaction
 * (the application's own work), then the library's hook runs after COMMIT.
 *
 * When a hook fails, PostgreSQL has the row but the cached copy may lack
 * it. If Redis could not be reached, the library remembers the feed and the
 * first handle to reach Redis again drops that copy (feedcache.h, "Write
 * hooks"). If Redis answered and refused, this server drops the copy itself
 * with feed_invalidate(), the caller's part by the header; when that is
 * refused too, the answer says "repair-pending" and the library keeps the
 * feed on its repair list. Either way the answer's "cache" field says
 * which: "ok", "invalidated" or "repair-pending".
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

/* ---- PostgreSQL: BEGIN; one statement; COMMIT ---- */

/* The statements, on the configured table and columns (feed_config). */
static struct {
    char *insert, *update, *delete, *fanout;
} stmt;

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

int writes_init(void)
{
    char *t = quote_ident(opt.cfg.table), *u = quote_ident(opt.cfg.owner_column),
         *s = quote_ident(opt.cfg.score_column), *i = quote_ident(opt.cfg.id_column);
    sbuf b[4] = { { 0 }, { 0 }, { 0 }, { 0 } };
    int ok = t && u && s && i;

    if (ok) {
        sb_printf(&b[0], "INSERT INTO %s (%s, %s, %s) VALUES ($1, $2, $3)", t, u, s, i);
        sb_printf(&b[1], "UPDATE %s SET %s = $2 WHERE %s = $1 AND %s = $3", t, s, u, i);
        sb_printf(&b[2], "DELETE FROM %s WHERE %s = $1 AND %s = $2 RETURNING %s", t, u, i, s);
        /* An upsert: fanning the same item out again sets its score. */
        sb_printf(&b[3], "INSERT INTO %s (%s, %s, %s) SELECT u, $2, $1 FROM unnest($3::bigint[]) "
                  "AS u ON CONFLICT (%s, %s) DO UPDATE SET %s = EXCLUDED.%s", t, u, s, i, u, i, s, s);
    }
    free(t);
    free(u);
    free(s);
    free(i);
    stmt.insert = b[0].data;
    stmt.update = b[1].data;
    stmt.delete = b[2].data;
    stmt.fanout = b[3].data;
    return ok && !b[0].failed && !b[1].failed && !b[2].failed && !b[3].failed ? 0 : -1;
}

void writes_free(void)
{
    free(stmt.insert);
    free(stmt.update);
    free(stmt.delete);
    free(stmt.fanout);
}

enum tx_result {
    TX_OK,
    TX_CONFLICT,     /* unique violation: the row exists */
    TX_DOWN,         /* PostgreSQL unreachable; nothing committed */
    TX_UNKNOWN,      /* the connection broke during COMMIT: it may have committed */
    TX_FAILED        /* any other error; nothing committed */
};

static void pg_message(PGconn *pg, const PGresult *r, char *err, size_t errlen)
{
    const char *m = r ? PQresultErrorMessage(r) : "";
    size_t len;

    if (!m || !*m)
        m = pg ? PQerrorMessage(pg) : "no connection";
    len = strlen(m);
    while (len > 0 && (m[len - 1] == '\n' || m[len - 1] == ' '))
        len--;
    snprintf(err, errlen, "PostgreSQL: %.*s", (int)len, m);
}

static int conn_lost(PGconn *pg, const PGresult *r)
{
    const char *s = r ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : NULL;

    return PQstatus(pg) != CONNECTION_OK || (s && (strncmp(s, "08", 2) == 0 ||
                                                   strcmp(s, "57P01") == 0 ||
                                                   strcmp(s, "57P03") == 0));
}

static int command_ok(const PGresult *r)
{
    ExecStatusType st = r ? PQresultStatus(r) : PGRES_FATAL_ERROR;

    return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

/* BEGIN, and if the connection turns out to be dead (a PostgreSQL restart
 * since the last request), once more on a fresh one: nothing was done yet. */
static enum tx_result begin(worker *w, char *err, size_t errlen)
{
    for (int attempt = 0; attempt < 2; attempt++) {
        PGconn *pg = worker_pg(w, attempt > 0);
        PGresult *r;
        int lost;
        if (!pg) {
            pg_message(w->pg, NULL, err, errlen);
            return TX_DOWN;
        }
        r = PQexec(pg, "BEGIN");
        if (command_ok(r)) {
            PQclear(r);
            return TX_OK;
        }
        pg_message(pg, r, err, errlen);
        lost = conn_lost(pg, r);
        PQclear(r);
        if (!lost)
            return TX_FAILED;
    }
    return TX_DOWN;
}

static enum tx_result pg_write(worker *w, const char *sql, int nparams,
                               const char *const *params, PGresult **out,
                               char *err, size_t errlen)
{
    enum tx_result res = begin(w, err, errlen);
    PGresult *r;
    PGconn *pg = w->pg;
    const char *state;

    *out = NULL;
    if (res != TX_OK)
        return res;
    /* ... the application's own work of the transaction would go here ... */
    r = PQexecParams(pg, sql, nparams, NULL, params, NULL, NULL, 0);
    if (!command_ok(r)) {
        pg_message(pg, r, err, errlen);
        state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
        res = state && strcmp(state, "23505") == 0 ? TX_CONFLICT
              : conn_lost(pg, r) ? TX_DOWN : TX_FAILED;
        PQclear(r);
        if (PQstatus(pg) == CONNECTION_OK)
            PQclear(PQexec(pg, "ROLLBACK"));
        return res;
    }
    *out = r;
    r = PQexec(pg, "COMMIT");
    if (!command_ok(r)) {
        pg_message(pg, r, err, errlen);
        res = conn_lost(pg, r) ? TX_UNKNOWN : TX_FAILED;
        PQclear(r);
        PQclear(*out);
        *out = NULL;
        return res;
    }
    PQclear(r);
    return TX_OK;
}

/* ---- after the commit: the cache ---- */

/* A hook for uids failed (rc) after its row committed, or the commit's
 * outcome is unknown. Returns the "cache" word of the answer. */
static const char *hook_failed(worker *w, feed *f, const int64_t *uids, size_t n,
                               const char *what, const char *msg)
{
    size_t done = 0;

    if (n == 1)
        fprintf(stderr, "feed_server: %s for uid %" PRId64 " failed after commit: %s\n",
                what, uids[0], msg);
    else
        fprintf(stderr, "feed_server: %s for %zu feeds failed after commit: %s\n", what, n, msg);
    /* Dropping a copy is always safe. Stop at the first failure: Redis is
     * away or refusing, and the library keeps what it could not reach. */
    while (f && done < n && feed_invalidate(f, uids[done]) == FEED_OK)
        done++;
    pthread_mutex_lock(&w->lock);
    w->c.hook_failures++;
    w->c.invalidations += done;
    pthread_mutex_unlock(&w->lock);
    return done == n ? "invalidated" : "repair-pending";
}

/* The answer to a write, after its commit. */
static json_t *write_reply(int64_t id, int64_t score, const char *cache)
{
    return json_pack("{s:o,s:I,s:s}", "id", id_json(id), "score", (json_int_t)score,
                     "cache", cache);
}

static enum MHD_Result tx_error(ARGS, enum tx_result tx, const char *what)
{
    switch (tx) {
    case TX_CONFLICT:
        return respond_error(PASS, 409, "%s", what);
    case TX_DOWN:
        return respond_error(PASS, 503, "PostgreSQL is unavailable; nothing was written");
    case TX_UNKNOWN:
        return respond_error(PASS, 503, "PostgreSQL went away during COMMIT; the write may "
                             "or may not have happened");
    default:
        return respond_error(PASS, 500, "PostgreSQL refused the write");
    }
}

/* POST /users/{uid}/items, PUT /users/{uid}/items, PUT /users/{uid}/items/{id}:
 * path_id < 0 when the id is not in the path. */
enum MHD_Result put_item(ARGS, worker *w, int64_t uid, int64_t path_id, int create)
{
    static const char *const allowed[] = { "id", "score", NULL };
    char err[300], p_uid[24], p_score[24], p_id[24], loc[80];
    const char *params[3] = { p_uid, p_score, p_id };
    const char *cache = "ok";
    int64_t id = path_id, score = 0;
    json_t *body, *v;
    PGresult *r;
    enum tx_result tx;
    int rc;
    feed *f;

    if (!(body = body_object(rq, allowed, err, sizeof err)))
        return respond_error(PASS, 400, "%s", err);
    if ((v = json_object_get(body, "id")) != NULL) {
        int64_t body_id;
        rc = json_id(v, &body_id);
        if (rc == 0 && path_id >= 0 && body_id != path_id)
            rc = 1;
        if (rc != 0) {
            json_decref(body);
            return respond_error(PASS, 400, rc < 0 ? "id must be " ID_RULE
                                 : "the id in the body differs from the id in the path");
        }
        id = body_id;
    } else if (path_id < 0) {
        json_decref(body);
        return respond_error(PASS, 400, "missing field \"id\"");
    }
    v = json_object_get(body, "score");
    rc = v ? json_score(v, &score) : -1;
    json_decref(body);
    if (!v)
        return respond_error(PASS, 400, "missing field \"score\"");
    if (rc != 0)
        return respond_error(PASS, 400, SCORE_RULE);

    f = worker_feed(w);
    snprintf(p_uid, sizeof p_uid, "%" PRId64, uid);
    snprintf(p_score, sizeof p_score, "%" PRId64, score);
    snprintf(p_id, sizeof p_id, "%" PRId64, id);
    tx = pg_write(w, create ? stmt.insert : stmt.update, 3, params, &r, err, sizeof err);
    if (tx == TX_UNKNOWN)
        hook_failed(w, f, &uid, 1, create ? "insert" : "update", "commit outcome unknown");
    if (tx != TX_OK) {
        snprintf(rq->err, sizeof rq->err, "%s", err);
        return tx_error(PASS, tx, "an item with this id is already in the feed; "
                        "PUT changes its score");
    }
    rc = strcmp(PQcmdTuples(r), "0") == 0;
    PQclear(r);
    if (rc)   /* UPDATE of no row: committed a no-op, nothing to tell the cache */
        return respond_error(PASS, 404, "no item %" PRId64 " in the feed of user %" PRId64, id, uid);

    /* The row committed: now the cache. */
    rc = f ? feed_on_insert(f, uid, score, id) : FEED_EUNAVAILABLE;
    if (rc != FEED_OK)
        cache = hook_failed(w, f, &uid, 1, "feed_on_insert", f ? feed_errmsg(f) : "no handle");
    if (create) {
        const char *const hdr[] = { "Location", loc, NULL };
        snprintf(loc, sizeof loc, "/users/%" PRId64 "/items/%" PRId64, uid, id);
        return respond_json(PASS, 201, write_reply(id, score, cache), hdr);
    }
    return respond_json(PASS, 200, write_reply(id, score, cache), NULL);
}

enum MHD_Result delete_item(ARGS, worker *w, int64_t uid, int64_t id)
{
    char err[300], p_uid[24], p_id[24];
    const char *params[2] = { p_uid, p_id };
    const char *cache = "ok";
    int64_t score = 0;
    enum tx_result tx;
    PGresult *r;
    feed *f;
    int rc;

    if (rq->len > 0)
        return respond_error(PASS, 400, "DELETE takes no request body");
    f = worker_feed(w);
    snprintf(p_uid, sizeof p_uid, "%" PRId64, uid);
    snprintf(p_id, sizeof p_id, "%" PRId64, id);
    tx = pg_write(w, stmt.delete, 2, params, &r, err, sizeof err);
    if (tx == TX_UNKNOWN)
        hook_failed(w, f, &uid, 1, "delete", "commit outcome unknown");
    if (tx != TX_OK) {
        snprintf(rq->err, sizeof rq->err, "%s", err);
        return tx_error(PASS, tx, "conflict");
    }
    rc = PQntuples(r) == 1 && sscanf(PQgetvalue(r, 0, 0), "%" SCNd64, &score) == 1;
    PQclear(r);
    if (!rc)
        return respond_error(PASS, 404, "no item %" PRId64 " in the feed of user %" PRId64, id, uid);
    rc = f ? feed_on_delete(f, uid, id) : FEED_EUNAVAILABLE;
    if (rc != FEED_OK)
        cache = hook_failed(w, f, &uid, 1, "feed_on_delete", f ? feed_errmsg(f) : "no handle");
    return respond_json(PASS, 200, write_reply(id, score, cache), NULL);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

/* The uids of a fan-out body, sorted, each once; NULL after a queued 400
 * or 500 (*ret then holds its result). */
static int64_t *fanout_uids(ARGS, json_t *uids_j, size_t *n, enum MHD_Result *ret)
{
    int64_t *uids;
    json_t *v;
    size_t i, m = 0;

    if (!json_is_array(uids_j) || json_array_size(uids_j) == 0 ||
        json_array_size(uids_j) > opt.max_fanout) {
        *ret = respond_error(PASS, 400, "uids must be an array of 1..%zu user ids", opt.max_fanout);
        return NULL;
    }
    if (!(uids = malloc(json_array_size(uids_j) * sizeof *uids))) {
        *ret = respond_error(PASS, 500, "out of memory");
        return NULL;
    }
    json_array_foreach(uids_j, i, v) {
        if (json_id(v, &uids[i]) != 0) {
            free(uids);
            *ret = respond_error(PASS, 400, "uids[%zu] must be " ID_RULE, i);
            return NULL;
        }
    }
    /* One row per user: a uid listed twice counts once. */
    qsort(uids, i, sizeof *uids, cmp_i64);
    for (size_t k = 0; k < i; k++)
        if (m == 0 || uids[k] != uids[m - 1])
            uids[m++] = uids[k];
    *n = m;
    return uids;
}

enum MHD_Result fanout(ARGS, worker *w, int64_t id)
{
    static const char *const allowed[] = { "score", "uids", NULL };
    char err[300], p_id[24], p_score[24];
    const char *params[3] = { p_id, p_score, NULL };
    const char *cache = "ok";
    json_t *body, *v, *reply;
    int64_t score, *uids;
    size_t n = 0;
    sbuf arr = { 0 };
    enum tx_result tx;
    enum MHD_Result ret;
    PGresult *r;
    feed *f;

    if (!(body = body_object(rq, allowed, err, sizeof err)))
        return respond_error(PASS, 400, "%s", err);
    v = json_object_get(body, "score");
    if (!v || json_score(v, &score) != 0) {
        json_decref(body);
        return respond_error(PASS, 400, "%s", v ? SCORE_RULE : "missing field \"score\"");
    }
    uids = fanout_uids(PASS, json_object_get(body, "uids"), &n, &ret);
    json_decref(body);
    if (!uids)
        return ret;
    sb_printf(&arr, "{");
    for (size_t i = 0; i < n; i++)
        sb_printf(&arr, "%s%" PRId64, i ? "," : "", uids[i]);
    sb_printf(&arr, "}");
    if (arr.failed) {
        free(arr.data);
        free(uids);
        return respond_error(PASS, 500, "out of memory");
    }

    f = worker_feed(w);
    snprintf(p_id, sizeof p_id, "%" PRId64, id);
    snprintf(p_score, sizeof p_score, "%" PRId64, score);
    params[2] = arr.data;
    tx = pg_write(w, stmt.fanout, 3, params, &r, err, sizeof err);
    free(arr.data);
    if (tx == TX_UNKNOWN)
        hook_failed(w, f, uids, n, "fanout", "commit outcome unknown");
    if (tx != TX_OK) {
        free(uids);
        snprintf(rq->err, sizeof rq->err, "%s", err);
        return tx_error(PASS, tx, "conflict");
    }
    PQclear(r);
    if (!f || feed_fanout(f, uids, n, score, id) != FEED_OK) {
        /* Some feeds may have been updated, others not: all are suspect. */
        char msg[sizeof err];
        snprintf(msg, sizeof msg, "%s", f ? feed_errmsg(f) : "no handle");
        cache = hook_failed(w, f, uids, n, "feed_fanout", msg);
    }
    free(uids);
    reply = write_reply(id, score, cache);
    if (reply)
        json_object_set_new(reply, "users", json_integer((json_int_t)n));
    return respond_json(PASS, 200, reply, NULL);
}
