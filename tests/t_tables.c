/* t_tables.c -- handles on different tables, or on other columns of one
 * table, share a key prefix and never serve each other's rows.
 *
 * A copy's keys name the rows it holds (table, owner, score and id
 * columns: lib/base/base.h, feed__key_base), so two configurations on the
 * default prefix "feed" keep their copies apart, while two handles
 * configured alike (a reader and a writer process) still share theirs.
 * Each walk is checked against its own table's SQL:
 *
 *   tables    timeline(user_id, created_ms, post_id), 10 rows of owner 1,
 *             cached first; then a handle on tl_int (uid, score, id), 3 rows
 *             of owner 1: its own 3, rebuilt, never the timeline's 10
 *   columns   one table with two score columns: a handle per column, each
 *             walk in its own column's order
 *   hooks     a write and its hook through one handle leave the other
 *             table's copy as it was, and both walks still equal SQL
 *   alike     a second handle configured like the first reads the first's
 *             copy (from the cache) and sees its hooks
 *   drops     feed_invalidate_all of one table leaves the other's copy
 *
 * Run plain, through the Redis Cluster (:cluster) and the async API
 * (:async, :async:cluster). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define OWNER 1

static PGconn *pg;

/* owner's rows of table in (score DESC, id DESC) order by those columns. */
static size_t sql_rows(const char *table, const char *owner_col, const char *score_col,
                       const char *id_col, feed_item **out)
{
    char sql[512];
    PGresult *res;
    size_t n;

    snprintf(sql, sizeof sql, "SELECT %s, %s FROM %s WHERE %s = %d ORDER BY %s DESC, %s DESC",
             score_col, id_col, table, owner_col, OWNER, score_col, id_col);
    res = PQexec(pg, sql);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        tap_bail(PQerrorMessage(pg));
    n = (size_t)PQntuples(res);
    *out = malloc((n + 1) * sizeof **out);
    for (size_t i = 0; i < n; i++)
        (*out)[i] = (feed_item){ strtoll(PQgetvalue(res, (int)i, 0), NULL, 10),
                                 strtoll(PQgetvalue(res, (int)i, 1), NULL, 10) };
    PQclear(res);
    return n;
}

/* Walk owner's feed on f, 4 items a page: equal to cfg's table's SQL? The
 * first page's source goes to *first. */
static int walk_is_sql(feed *f, const feed_config *cfg, feed_source *first, const char *what)
{
    feed_item *want;
    size_t n = sql_rows(cfg->table, cfg->owner_column, cfg->score_column, cfg->id_column, &want);
    size_t got = 0;
    int64_t score = FEED_FIRST, id = 0;
    int good = 1, more = 1, pages = 0;

    while (more && good && pages++ < 100) {
        feed_result r;
        int rc = feed_page(f, OWNER, score, id, 4, &r);
        if (rc != FEED_OK) {
            tap_diag("%s: rc %d: %s", what, rc, feed_errmsg(f));
            good = 0;
            break;
        }
        if (pages == 1 && first)
            *first = r.source;
        for (size_t i = 0; i < r.count; i++, got++)
            if (got >= n || r.items[i].score != want[got].score || r.items[i].id != want[got].id) {
                tap_diag("%s: item %zu is (%" PRId64 ",%" PRId64 "), SQL has %s", what, got,
                         r.items[i].score, r.items[i].id, got < n ? "another" : "no more");
                good = 0;
                break;
            }
        more = r.has_more;
        score = r.next_score;
        id = r.next_id;
        feed_result_free(&r);
    }
    if (good && got != n) {
        tap_diag("%s: %zu items, SQL has %zu", what, got, n);
        good = 0;
    }
    free(want);
    return good;
}

static void timeline_cfg(feed_config *cfg)
{
    tu_config(cfg);
    cfg->table = "tt_timeline";
    cfg->owner_column = "user_id";
    cfg->score_column = "created_ms";
    cfg->id_column = "post_id";
}

static void int_cfg(feed_config *cfg)
{
    tu_config(cfg);
    cfg->table = "tt_int";
}

static void make_tables(void)
{
    tu_sql(pg, "DROP TABLE IF EXISTS tt_timeline, tt_int, tt_two");
    tu_sql(pg, "CREATE TABLE tt_timeline (user_id bigint NOT NULL, created_ms bigint NOT NULL,"
               " post_id bigint NOT NULL, PRIMARY KEY (user_id, post_id))");
    tu_sql(pg, "CREATE INDEX ON tt_timeline (user_id, created_ms DESC, post_id DESC)");
    tu_sql(pg, "CREATE TABLE tt_int (uid bigint NOT NULL, score bigint NOT NULL,"
               " id bigint NOT NULL, PRIMARY KEY (uid, id))");
    tu_sql(pg, "CREATE INDEX ON tt_int (uid, score DESC, id DESC)");
    tu_sql(pg, "CREATE TABLE tt_two (uid bigint NOT NULL, score bigint NOT NULL,"
               " likes bigint NOT NULL, id bigint NOT NULL, PRIMARY KEY (uid, id))");
    tu_sql(pg, "CREATE INDEX ON tt_two (uid, score DESC, id DESC)");
    tu_sql(pg, "CREATE INDEX ON tt_two (uid, likes DESC, id DESC)");
    tu_sql(pg, "INSERT INTO tt_timeline SELECT %d, 1000 + i, 100 + i FROM generate_series(1, 10) i",
           OWNER);
    tu_sql(pg, "INSERT INTO tt_int SELECT %d, i, i FROM generate_series(1, 3) i", OWNER);
    /* score ascends with id, likes descends: the two orders are opposite */
    tu_sql(pg, "INSERT INTO tt_two SELECT %d, i, 100 - i, i FROM generate_series(1, 9) i", OWNER);
}

int main(void)
{
    feed_config ct, ci, cs, cl;
    feed *t, *i, *t2, *s, *l;
    feed_source src = 0;

    pg = tu_begin(NULL);
    make_tables();
    timeline_cfg(&ct);
    int_cfg(&ci);
    t = tu_open(&ct);
    i = tu_open(&ci);

    /* tables: the timeline cached first, then tt_int's owner 1 */
    ok(walk_is_sql(t, &ct, &src, "timeline"), "timeline: the walk equals its SQL (10 rows)");
    is_int(src, FEED_SOURCE_REBUILD, "  its first page rebuilt its copy");
    ok(walk_is_sql(t, &ct, &src, "timeline again") && src == FEED_SOURCE_CACHE,
       "  and a second walk comes from that copy");
    ok(walk_is_sql(i, &ci, &src, "tt_int"),
       "tt_int on the same key prefix: its own 3 rows, not the timeline's 10");
    is_int(src, FEED_SOURCE_REBUILD, "  from a copy of its own, rebuilt from tt_int");

    /* columns: one table, two score columns */
    tu_config(&cs);
    cs.table = "tt_two";
    cl = cs;
    cl.score_column = "likes";
    s = tu_open(&cs);
    l = tu_open(&cl);
    ok(walk_is_sql(s, &cs, NULL, "by score"), "tt_two by score: the walk equals SQL");
    ok(walk_is_sql(l, &cl, &src, "by likes"),
       "tt_two by likes, the same table and prefix: the walk is in likes order");
    is_int(src, FEED_SOURCE_REBUILD, "  from a copy of its own");
    ok(walk_is_sql(s, &cs, &src, "by score again") && src == FEED_SOURCE_CACHE,
       "  and the score copy is still the score order (cached)");

    /* hooks: a write to tt_int and its hook */
    tu_sql(pg, "INSERT INTO tt_int VALUES (%d, 50, 50)", OWNER);
    is_int(feed_on_insert(i, OWNER, 50, 50), FEED_OK, "a hook on tt_int's handle");
    ok(walk_is_sql(i, &ci, &src, "tt_int after the hook") && src == FEED_SOURCE_CACHE,
       "  tt_int's cached walk has the new row");
    ok(walk_is_sql(t, &ct, &src, "timeline after tt_int's hook") && src == FEED_SOURCE_CACHE,
       "  the timeline's copy is as it was (cached, equals its SQL)");

    /* alike: a second handle on the timeline shares its copy and hooks */
    t2 = tu_open(&ct);
    ok(walk_is_sql(t2, &ct, &src, "second timeline handle") && src == FEED_SOURCE_CACHE,
       "a second handle configured alike reads the same copy (from the cache)");
    tu_sql(pg, "INSERT INTO tt_timeline VALUES (%d, 5000, 5000)", OWNER);
    is_int(feed_on_insert(t2, OWNER, 5000, 5000), FEED_OK, "  its hook after a write");
    ok(walk_is_sql(t, &ct, &src, "timeline after the other's hook") && src == FEED_SOURCE_CACHE,
       "  reaches the first handle's pages (cached)");

    /* drops: feed_invalidate_all of one table only */
    is_int(feed_invalidate_all(i, NULL), FEED_OK, "feed_invalidate_all on tt_int's handle");
    ok(walk_is_sql(t, &ct, &src, "timeline after tt_int's drop") && src == FEED_SOURCE_CACHE,
       "  the timeline's copy stays (cached)");
    ok(walk_is_sql(i, &ci, &src, "tt_int after its drop") && src == FEED_SOURCE_REBUILD,
       "  tt_int's is rebuilt");

    feed_close(t);
    feed_close(t2);
    feed_close(i);
    feed_close(s);
    feed_close(l);
    tu_sql(pg, "DROP TABLE tt_timeline, tt_int, tt_two");
    PQfinish(pg);
    return tap_done();
}
