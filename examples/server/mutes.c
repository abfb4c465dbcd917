/* mutes.c -- who a viewer has muted: the routes that change it, and the
 * read every feed and timeline route makes before its page.
 *
 * The mutes are the application's own table, mutes (uid, author)
 * (examples/mutes.sql), written and read in SQL like any other row of the
 * application; feedcache never sees the table. A read route reads the
 * viewer's mutes once per request (one statement) and hands them to the
 * filtered call as the authors to hide: a mute takes effect on the very
 * next page, on every worker, with no cache of mutes to keep right. Both
 * backends run the statements through the same transaction operation as
 * the writes (backend_ops.tx).
 *
 * They exist only when the feed table names each item's author
 * (--item-author-column): without it nothing could be hidden by author.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

/* The viewer's mutes, ascending, as "a,b,c" ("" for none); at most one
 * more than a filter takes, so that too many are seen as such. */
static const char mutes_select[] =
    "SELECT coalesce(string_agg(author::text, ',' ORDER BY author), '') FROM "
    "(SELECT author FROM mutes WHERE uid = $1 ORDER BY author LIMIT 1001) AS m";

/* "inserted,existed": whether the row was added, whether it was there
 * before. At most FEED_FILTER_MAX_AUTHORS (1000) mutes a viewer. */
static const char mutes_insert[] =
    "WITH n AS (SELECT count(*) AS c FROM mutes WHERE uid = $1::bigint), "
    "ins AS (INSERT INTO mutes (uid, author) SELECT $1::bigint, $2::bigint FROM n "
    "WHERE n.c < 1000 ON CONFLICT DO NOTHING RETURNING 1) "
    "SELECT (SELECT count(*) FROM ins)::text || ',' || "
    "EXISTS (SELECT 1 FROM mutes WHERE uid = $1 AND author = $2)::int::text";

static const char mutes_delete[] = "DELETE FROM mutes WHERE uid = $1 AND author = $2";

/* Parse "a,b,c" into rq->mutes; -1 when out of memory or malformed. */
static int mutes_parse(request *rq, const char *list)
{
    size_t n = 0, cap = 1;
    const char *p;

    for (p = list; *p; p++)
        cap += *p == ',';
    free(rq->mutes);
    rq->nmutes = 0;
    if (!(rq->mutes = malloc(cap * sizeof *rq->mutes)))
        return -1;
    for (p = list; *p;) {
        char num[24];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof num)
            return -1;
        memcpy(num, p, len);
        num[len] = '\0';
        if (parse_i64_nonneg(num, &rq->mutes[n++]) != 0)
            return -1;
        p += len + (p[len] == ',');
    }
    rq->nmutes = n;
    return 0;
}

/* A failed statement as HTTP: PostgreSQL down 503, anything else 500. */
static int mutes_failed(request *rq, const tx_outcome *tx)
{
    if (tx->res == TX_OK)
        return 0;
    snprintf(rq->err, sizeof rq->err, "%s", tx->err ? tx->err : "");
    if (tx->res == TX_DOWN || tx->res == TX_UNKNOWN)
        respond_error(rq, 503, "PostgreSQL is unavailable: the mutes cannot be %s",
                      strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "HEAD") == 0
                      ? "read" : "changed");
    else
        respond_error(rq, 500, "PostgreSQL refused the mutes' statement");
    return 1;
}

static void mutes_got(request *rq, const tx_outcome *tx)
{
    if (mutes_failed(rq, tx))
        return;
    if (mutes_parse(rq, tx->first ? tx->first : "") != 0) {
        respond_error(rq, 500, "out of memory, or a malformed list of mutes");
        return;
    }
    if (rq->nmutes > FEED_FILTER_MAX_AUTHORS) {
        respond_error(rq, 500, "user %" PRId64 " has muted more than %d authors", rq->uid,
                      FEED_FILTER_MAX_AUTHORS);
        return;
    }
    rq->after_mutes(rq);
}

void mutes_read(request *rq, int64_t uid, void (*next)(request *rq))
{
    rq->uid = uid;
    rq->after_mutes = next;
    snprintf(rq->param[0], sizeof rq->param[0], "%" PRId64, uid);
    rq->params[0] = rq->param[0];
    rq->w->ops->tx(rq->w->be, rq, mutes_select, 1, rq->params, mutes_got);
}

/* GET /users/{uid}/mutes: {"uid":"7","mutes":["2001","3004"]}, ascending. */
static void mutes_list(request *rq)
{
    json_t *arr = json_array(), *obj;
    size_t i;

    for (i = 0; arr && i < rq->nmutes; i++)
        if (json_array_append_new(arr, id_json(rq->mutes[i])) != 0)
            break;
    obj = arr && i == rq->nmutes ? json_pack("{s:o,s:O}", "uid", id_json(rq->uid), "mutes", arr)
                                 : NULL;
    json_decref(arr);
    if (!obj) {
        respond_error(rq, 500, "out of memory");
        return;
    }
    respond_json(rq, 200, obj, NULL);
}

/* {"uid":"7","author":"2001","muted":true|false} */
static void mutes_reply(request *rq, unsigned status, int muted)
{
    respond_json(rq, status, json_pack("{s:o,s:o,s:b}", "uid", id_json(rq->uid), "author",
                                       id_json(rq->id), "muted", muted), NULL);
}

static void mute_done(request *rq, const tx_outcome *tx)
{
    unsigned inserted = 0, existed = 0;

    if (mutes_failed(rq, tx))
        return;
    if (!tx->first || sscanf(tx->first, "%u,%u", &inserted, &existed) != 2) {
        respond_error(rq, 500, "unexpected answer from PostgreSQL");
        return;
    }
    if (existed)
        mutes_reply(rq, 200, 1);        /* already muted: nothing changed */
    else if (inserted)
        mutes_reply(rq, 201, 1);
    else
        respond_error(rq, 409, "user %" PRId64 " already mutes %d authors, the most a "
                      "filter takes", rq->uid, FEED_FILTER_MAX_AUTHORS);
}

static void unmute_done(request *rq, const tx_outcome *tx)
{
    if (mutes_failed(rq, tx))
        return;
    if (tx->rows == 0)
        respond_error(rq, 404, "user %" PRId64 " does not mute author %" PRId64, rq->uid,
                      rq->id);
    else
        mutes_reply(rq, 200, 0);
}

/* GET /users/{uid}/mutes (author < 0), POST and DELETE
 * /users/{uid}/mutes/{author}. */
void mutes_route(request *rq, int64_t uid, int64_t author)
{
    if (rq->len > 0) {
        respond_error(rq, 400, "%s takes no request body", rq->method);
        return;
    }
    if (author < 0) {
        mutes_read(rq, uid, mutes_list);
        return;
    }
    rq->uid = uid;
    rq->id = author;
    snprintf(rq->param[0], sizeof rq->param[0], "%" PRId64, uid);
    snprintf(rq->param[1], sizeof rq->param[1], "%" PRId64, author);
    rq->params[0] = rq->param[0];
    rq->params[1] = rq->param[1];
    if (strcmp(rq->method, "DELETE") == 0)
        rq->w->ops->tx(rq->w->be, rq, mutes_delete, 2, rq->params, unmute_done);
    else
        rq->w->ops->tx(rq->w->be, rq, mutes_insert, 2, rq->params, mute_done);
}
