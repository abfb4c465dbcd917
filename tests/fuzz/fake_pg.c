/* fake_pg.c -- lib/io/pg.c's interface with no PostgreSQL behind it, for the
 * fuzz targets: uid's feed is (uid mod 40) rows, scores with ties, in
 * (score DESC, id DESC) order, made up on the spot. fuzz_pg_down makes every
 * call fail like an outage. It defines every function lib/io/pg.c exports, so
 * that the archive's pg.o is never linked in beside it. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "fuzz.h"

int fuzz_pg_down;

static size_t rows_of(int64_t uid)
{
    return (size_t)((uint64_t)uid % 40);
}

static feed_item row(int64_t uid, size_t i)   /* i-th row, in order */
{
    size_t n = rows_of(uid);
    feed_item it;

    it.score = (int64_t)((n - i) / 2) * 5 - 20;
    it.id = (int64_t)(n - i) + 100;
    return it;
}

/* The read-time merge's statement: each source's rows after the cursor,
 * an author's posts made up like the feed of the same number. */
static int fetch_merge(feed_sql *q, char *err)
{
    feed_item cursor = { q->params[1], q->params[2] };
    size_t limit = (size_t)q->params[3];

    for (size_t k = q->with_feed ? 0 : 1; k <= q->nauthors; k++) {
        int64_t owner = k == 0 ? q->params[0] : q->authors[k - 1];
        size_t n = rows_of(owner);
        feed_rows *rows = &q->tagged[k];
        if (!(rows->items = malloc((n + 1) * sizeof *rows->items))) {
            for (size_t j = 0; j <= q->nauthors; j++)
                feed__rows_free(&q->tagged[j]);
            return feed__msg(err, FEED_ENOMEM, "out of memory");
        }
        for (size_t i = 0; i < n && rows->count < limit; i++) {
            feed_item it = row(owner, i);
            if (feed__item_after(it, cursor.score, cursor.id))
                rows->items[rows->count++] = it;
        }
    }
    return FEED_OK;
}

/* The rows of statement q, as the real statements would give them. */
static int fetch(feed_core *c, char *err, feed_sql *q)
{
    int64_t uid = q->params[0];
    size_t n = rows_of(uid), limit;
    feed_rows *rows = &q->rows;
    feed_item cursor = { q->params[1], q->params[2] };

    rows->items = NULL;
    rows->count = 0;
    if (q->stmt < 0)
        return fuzz_pg_down ? feed__msg(err, FEED_EUNAVAILABLE, "PostgreSQL (fake) is down")
                            : FEED_OK;
    c->stats.sql_queries++;
    if (fuzz_pg_down) {
        c->stats.pg_errors++;
        return feed__msg(err, FEED_EPG, "PostgreSQL (fake) query: server is down");
    }
    if (q->stmt >= FEED_SQL_STMTS)
        return feed__msg(err, FEED_EPG, "PostgreSQL (fake): no lag probes");
    if (q->stmt == FEED_SQL_MERGE)
        return fetch_merge(q, err);
    limit = (size_t)(q->stmt == FEED_SQL_TOP ? q->params[1] : q->params[3]);
    rows->items = malloc((n + 1) * sizeof *rows->items);
    if (!rows->items)
        return feed__msg(err, FEED_ENOMEM, "out of memory");
    if (q->stmt == FEED_SQL_BEFORE) {   /* above the cursor, closest first */
        for (size_t i = n; i-- > 0 && rows->count < limit;) {
            feed_item it = row(uid, i);
            if (feed__item_after(cursor, it.score, it.id))
                rows->items[rows->count++] = it;
        }
        return FEED_OK;
    }
    for (size_t i = 0; i < n && rows->count < limit; i++) {
        feed_item it = row(uid, i);
        if (q->stmt == FEED_SQL_TOP || feed__item_after(it, cursor.score, cursor.id))
            rows->items[rows->count++] = it;
    }
    return FEED_OK;
}

void feed__pg_init(feed_pg *pg)
{
    memset(pg, 0, sizeof *pg);
}

void feed__pg_free(feed_pg *pg)
{
    (void)pg;
}

void feed__pg_task_begin(feed_pgtask *t, feed_pg *pg, feed_core *c, feed_sql *q, char *err,
                         int64_t now)
{
    (void)now;
    (void)pg;
    memset(t, 0, sizeof *t);
    if (q->stmt == FEED_SQL_MERGE)
        for (size_t k = 0; k <= q->nauthors; k++)
            q->tagged[k] = (feed_rows){ NULL, 0 };
    t->rc = fetch(c, err, q);
    t->want = FEED_PGW_DONE;
}

int feed__pg_task_run(feed_pgtask *t, int ready, int64_t now)
{
    (void)ready;
    (void)now;
    return t->want;
}

int feed__pg_task_fd(const feed_pgtask *t)
{
    (void)t;
    return -1;
}

void feed__pg_task_abandon(feed_pgtask *t)
{
    (void)t;
}
