/* fake_pg.c -- lib/pg.c's interface with no PostgreSQL behind it, for the
 * fuzz targets: uid's feed is (uid mod 40) rows, scores with ties, in
 * (score DESC, id DESC) order, made up on the spot. fuzz_pg_down makes every
 * call fail like an outage. It defines every function lib/pg.c exports, so
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

int feed__pg_connect(feed *f)
{
    f->stats.pg_connects++;
    return fuzz_pg_down ? feed__error(f, FEED_EUNAVAILABLE, "PostgreSQL (fake) is down") : FEED_OK;
}

int feed__pg_ready(feed *f)
{
    return fuzz_pg_down ? feed__error(f, FEED_EUNAVAILABLE, "PostgreSQL (fake) is down") : FEED_OK;
}

void feed__pg_drop(feed *f)
{
    (void)f;
}

void feed__rows_free(feed_rows *rows)
{
    free(rows->items);
    rows->items = NULL;
    rows->count = 0;
}

static int fetch(feed *f, int64_t uid, int after, int64_t score, int64_t id,
                 size_t limit, feed_rows *rows)
{
    size_t n = rows_of(uid);

    rows->items = NULL;
    rows->count = 0;
    f->stats.sql_queries++;
    if (fuzz_pg_down) {
        f->stats.pg_errors++;
        return feed__error(f, FEED_EPG, "PostgreSQL (fake) query: server is down");
    }
    rows->items = malloc((n + 1) * sizeof *rows->items);
    if (!rows->items)
        return feed__error(f, FEED_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && rows->count < limit; i++) {
        feed_item it = row(uid, i);
        if (!after || feed__item_after(it, score, id))
            rows->items[rows->count++] = it;
    }
    return FEED_OK;
}

int feed__pg_top(feed *f, int64_t uid, size_t limit, feed_rows *rows)
{
    return fetch(f, uid, 0, 0, 0, limit, rows);
}

int feed__pg_after(feed *f, int64_t uid, int64_t score, int64_t id,
                   size_t limit, feed_rows *rows)
{
    return fetch(f, uid, 1, score, id, limit, rows);
}

/* The rows above a cursor, closest first, as lib/pg.c's feedcache_before. */
int feed__pg_before(feed *f, int64_t uid, int64_t score, int64_t id,
                    size_t limit, feed_rows *rows)
{
    feed_item cursor = { score, id };
    int rc = fetch(f, uid, 0, 0, 0, rows_of(uid), rows);
    size_t k = 0;

    if (rc != FEED_OK)
        return rc;
    for (size_t i = rows->count; i-- > 0 && k < limit;)
        if (feed__item_after(cursor, rows->items[i].score, rows->items[i].id))
            rows->items[k++] = rows->items[i];
    rows->count = k;
    return FEED_OK;
}

int feed__pg_page(feed *f, int64_t uid, int first, int64_t score, int64_t id,
                  size_t limit, feed_rows *rows)
{
    return fetch(f, uid, !first, score, id, limit, rows);
}
