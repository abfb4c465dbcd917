/* t_schema.c -- what a table needs (docs/schema.md), checked at feed_open,
 * and the events a handle tells its log_fn, against the real servers:
 *
 *   NULLs     a score column without NOT NULL: feed_open warns (its message
 *             and log_fn); a row with a NULL score, or a NULL id, is left
 *             out of the feed, which is otherwise served exactly (walks
 *             equal SQL without that row), and the row is named (table,
 *             owner, id, column) in the call's message, told to log_fn and
 *             counted (rows_left_out)
 *   unique    no primary key or unique index on (owner, id): refused at
 *             feed_open (FEED_EPG, config), blocking and async; a primary
 *             key on id alone is enough
 *   index     no index for (owner, score DESC, id DESC): a warning, pages
 *             still exact; a view: a warning that nothing can be checked
 *   clean     sql/schema.sql's table: no warning at all
 *   events    Redis stopped and started, then PostgreSQL: one FEED_LOG_ERROR
 *             per outage however many calls meet it, one FEED_LOG_INFO when
 *             the store answers again; the pages PostgreSQL answered because
 *             Redis failed counted apart (redis_failed_pages) from pages
 *             past the cached copy; blocking and through the async API
 *   version   feed_version() is the FEED_VERSION_* macros' text
 *
 * Blocking, and the events through the async API on libevent too. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"
#include "feedcache_libevent.h"

static PGconn *pg;

/* ---- log_fn ---- */

#define MAXEV 64
static struct ev { feed_log_level level; char msg[512]; } evs[MAXEV];
static int nev;

static void on_log(void *arg, feed_log_level level, const char *msg)
{
    (void)arg;
    if (nev < MAXEV) {
        evs[nev].level = level;
        snprintf(evs[nev].msg, sizeof evs[nev].msg, "%s", msg);
    }
    nev++;
}

/* Events of level since event from that name all of words (NULL: any). */
static int events(int from, feed_log_level level, const char *w1, const char *w2)
{
    int n = 0;

    for (int i = from; i < nev && i < MAXEV; i++)
        if (evs[i].level == level && (!w1 || strstr(evs[i].msg, w1)) &&
            (!w2 || strstr(evs[i].msg, w2)))
            n++;
    return n;
}

static void diag_events(int from)
{
    for (int i = from; i < nev && i < MAXEV; i++)
        tap_diag("  event %d: level %d: %s", i, evs[i].level, evs[i].msg);
}

static void cfg_of(feed_config *cfg, const char *table)
{
    tu_config(cfg);
    cfg->table = table;
    cfg->key_prefix = "schema";
    cfg->log_fn = on_log;
    cfg->log_arg = NULL;
}

/* Walk owner's feed of table, 3 items a page, against SQL's rows with a
 * score and an id. */
static int walk_sql(feed *f, const char *table, int64_t owner)
{
    char sql[256];
    PGresult *res;
    int64_t score = FEED_FIRST, id = 0;
    size_t got = 0, n;
    int good = 1, more = 1;

    snprintf(sql, sizeof sql, "SELECT score, id FROM %s WHERE uid = %" PRId64 " AND score IS NOT"
             " NULL AND id IS NOT NULL ORDER BY score DESC, id DESC", table, owner);
    res = PQexec(pg, sql);
    n = (size_t)PQntuples(res);
    while (good && more) {
        feed_result r;
        if (feed_page(f, owner, score, id, 3, &r) != FEED_OK) {
            tap_diag("%s: %s", table, feed_errmsg(f));
            good = 0;
            break;
        }
        for (size_t i = 0; good && i < r.count; i++, got++)
            good = got < n && r.items[i].score == strtoll(PQgetvalue(res, (int)got, 0), NULL, 10)
                   && r.items[i].id == strtoll(PQgetvalue(res, (int)got, 1), NULL, 10);
        more = r.has_more;
        score = r.next_score;
        id = r.next_id;
        feed_result_free(&r);
    }
    PQclear(res);
    if (good && got != n)
        tap_diag("%s: %zu items, SQL has %zu", table, got, n);
    return good && got == n;
}

/* ---- NULLs ---- */

static void nulls(void)
{
    feed_config cfg;
    feed_stats st;
    feed *f;
    feed_result r;
    int from = nev, rc;

    tu_sql(pg, "DROP TABLE IF EXISTS sc_nullable");
    tu_sql(pg, "CREATE TABLE sc_nullable (uid bigint NOT NULL, score bigint, id bigint,"
               " UNIQUE (uid, id))");
    tu_sql(pg, "CREATE INDEX ON sc_nullable (uid, score DESC, id DESC)");
    tu_sql(pg, "INSERT INTO sc_nullable SELECT 1, i * 10, i FROM generate_series(1, 20) i");
    tu_sql(pg, "UPDATE sc_nullable SET score = NULL WHERE uid = 1 AND id = 7");
    tu_sql(pg, "INSERT INTO sc_nullable SELECT 2, i, i FROM generate_series(1, 5) i");
    tu_sql(pg, "INSERT INTO sc_nullable VALUES (2, 3, NULL)");
    cfg_of(&cfg, "sc_nullable");
    f = tu_open(&cfg);
    ok(strstr(feed_errmsg(f), "score, id may be NULL") != NULL,
       "nullable score and id: feed_open opens and its message warns (%s)", feed_errmsg(f));
    ok(events(from, FEED_LOG_WARN, "sc_nullable", "may be NULL") == 1, "  told to log_fn once");
    from = nev;
    rc = feed_page(f, 1, FEED_FIRST, 0, 5, &r);
    ok(rc == FEED_OK && r.source == FEED_SOURCE_REBUILD,
       "a feed with a NULL score: its first page is served (rebuilt), rc %d", rc);
    ok(strstr(feed_errmsg(f), "sc_nullable") && strstr(feed_errmsg(f), "owner 1") &&
       strstr(feed_errmsg(f), "id 7") && strstr(feed_errmsg(f), "NULL score"),
       "  the call's message names the table, owner, id and column (%s)", feed_errmsg(f));
    ok(events(from, FEED_LOG_WARN, "id 7", "NULL score") == 1, "  told to log_fn");
    if (rc == FEED_OK)
        feed_result_free(&r);
    feed_stats_get(f, &st);
    is_int((long long)st.rows_left_out, 1, "  counted in rows_left_out");
    ok(walk_sql(f, "sc_nullable", 1), "  the walk equals SQL's rows with a score (19 of 20)");
    ok(walk_sql(f, "sc_nullable", 2), "a feed with a NULL id: its walk equals SQL's other rows");
    ok(events(from, FEED_LOG_WARN, "owner 2", "NULL id") == 1, "  the row named (owner 2, NULL id)");
    feed_close(f);
    tu_sql(pg, "DROP TABLE sc_nullable");
}

/* ---- unique ---- */

static void unique(void)
{
    feed_config cfg;
    feed *f = NULL;
    int rc;

    tu_sql(pg, "DROP TABLE IF EXISTS sc_dup, sc_idkey");
    tu_sql(pg, "CREATE TABLE sc_dup (uid bigint NOT NULL, score bigint NOT NULL,"
               " id bigint NOT NULL)");
    tu_sql(pg, "CREATE INDEX ON sc_dup (uid, score DESC, id DESC)");
    tu_sql(pg, "INSERT INTO sc_dup VALUES (1, 6, 2), (1, 5, 1), (1, 5, 1), (1, 4, 0)");
    cfg_of(&cfg, "sc_dup");
    rc = feed_open(&f, &cfg);
    ok(rc == FEED_EPG && f == NULL && feed_error_kind(NULL, rc) == FEED_KIND_CONFIG &&
       strstr(feed_errmsg(NULL), "no primary key or unique index") &&
       strstr(feed_errmsg(NULL), "PRIMARY KEY (uid, id)"),
       "no unique (owner, id): refused at feed_open, config, saying what to add (%s)",
       feed_errmsg(NULL));
    feed_close(f);
    tu_sql(pg, "CREATE TABLE sc_idkey (uid bigint NOT NULL, score bigint NOT NULL,"
               " id bigint PRIMARY KEY)");
    tu_sql(pg, "CREATE INDEX ON sc_idkey (uid, score DESC, id DESC)");
    tu_sql(pg, "INSERT INTO sc_idkey SELECT 1, i, i FROM generate_series(1, 9) i");
    cfg_of(&cfg, "sc_idkey");
    f = NULL;
    rc = feed_open(&f, &cfg);
    ok(rc == FEED_OK && !feed_errmsg(f)[0], "a primary key on id alone: accepted, no warning");
    ok(rc == FEED_OK && walk_sql(f, "sc_idkey", 1), "  its walk equals SQL");
    feed_close(f);
    tu_sql(pg, "DROP TABLE sc_dup, sc_idkey");
}

/* ---- index, view, clean ---- */

static void index_and_view(void)
{
    feed_config cfg;
    feed *f;
    int from = nev;

    tu_sql(pg, "DROP TABLE IF EXISTS sc_noindex CASCADE");
    tu_sql(pg, "CREATE TABLE sc_noindex (uid bigint NOT NULL, score bigint NOT NULL,"
               " id bigint NOT NULL, PRIMARY KEY (uid, id))");
    tu_sql(pg, "INSERT INTO sc_noindex SELECT 1, i / 2, i FROM generate_series(1, 12) i");
    cfg_of(&cfg, "sc_noindex");
    f = tu_open(&cfg);
    ok(strstr(feed_errmsg(f), "no index on (uid, score DESC, id DESC)") != NULL &&
       events(from, FEED_LOG_WARN, "no index", NULL) == 1,
       "no index for the pages' order: a warning at open, in its message and to log_fn (%s)",
       feed_errmsg(f));
    ok(walk_sql(f, "sc_noindex", 1), "  pages still equal SQL");
    feed_close(f);

    from = nev;
    tu_sql(pg, "CREATE VIEW sc_view AS SELECT uid, score, id FROM sc_noindex");
    cfg_of(&cfg, "sc_view");
    f = tu_open(&cfg);
    ok(strstr(feed_errmsg(f), "is a view") != NULL && events(from, FEED_LOG_WARN, "view", NULL) == 1,
       "a view: a warning that its columns, rows and index cannot be checked (%s)",
       feed_errmsg(f));
    ok(walk_sql(f, "sc_view", 1), "  pages through it equal SQL");
    feed_close(f);
    tu_sql(pg, "DROP TABLE sc_noindex CASCADE");

    from = nev;
    cfg_of(&cfg, "feed_entry");
    f = tu_open(&cfg);
    ok(!feed_errmsg(f)[0] && events(from, FEED_LOG_WARN, NULL, NULL) == 0,
       "sql/schema.sql's feed_entry: no warning");
    feed_close(f);
}

/* ---- events ---- */

static int page_ok(feed *f, int64_t uid, feed_source *src)
{
    feed_result r;
    int rc = feed_page(f, uid, FEED_FIRST, 0, 5, &r);

    if (rc == FEED_OK) {
        *src = r.source;
        feed_result_free(&r);
    }
    return rc;
}

static void store_events(void)
{
    feed_config cfg;
    feed_stats s0, s1;
    feed_source src = 0;
    feed *f;
    int from, good = 1;

    tu_insert_rows(pg, 60, 30, tu_score_by10, tu_id_seq);
    cfg_of(&cfg, "feed_entry");
    cfg.retry_ms = 100;
    cfg.max_len = 10;
    f = tu_open(&cfg);
    good &= page_ok(f, 60, &src) == FEED_OK;
    from = nev;
    feed_stats_get(f, &s0);
    fault_inject("redis-stop");
    for (int i = 0; i < 5; i++) {
        good &= page_ok(f, 60, &src) == FEED_OK && src == FEED_SOURCE_DB;
        fault_sleep_ms(30);
    }
    fault_sleep_ms(150);            /* past retry_ms: tried again, and failed again */
    good &= page_ok(f, 60, &src) == FEED_OK && src == FEED_SOURCE_DB;
    feed_stats_get(f, &s1);
    ok(good, "Redis stopped: 6 pages, each from PostgreSQL");
    if (!ok(events(from, FEED_LOG_ERROR, "Redis", NULL) == 1 && events(from, FEED_LOG_INFO, NULL, NULL) == 0,
            "  one FEED_LOG_ERROR for the outage, however many calls met it"))
        diag_events(from);
    is_int((long long)(s1.redis_failed_pages - s0.redis_failed_pages), 6,
           "  each counted in redis_failed_pages");
    fault_inject("redis-start");
    fault_sleep_ms(150);
    from = nev;
    good = page_ok(f, 60, &src) == FEED_OK && page_ok(f, 60, &src) == FEED_OK;
    if (!ok(good && events(from, FEED_LOG_INFO, "Redis", "answers again") == 1 &&
            events(from, FEED_LOG_ERROR, NULL, NULL) == 0,
            "Redis back: one FEED_LOG_INFO, \"answers again\""))
        diag_events(from);
    {
        feed_result r;
        feed_stats_get(f, &s0);
        good = feed_page(f, 60, 150, 15, 5, &r) == FEED_OK && r.source == FEED_SOURCE_DB;
        if (good)
            feed_result_free(&r);
        feed_stats_get(f, &s1);
        ok(good && s1.db_pages == s0.db_pages + 1 && s1.redis_failed_pages == s0.redis_failed_pages,
           "a page past the cached copy: a db page, not counted in redis_failed_pages");
    }

    from = nev;
    fault_inject("pg-stop");
    for (int i = 0; i < 3; i++) {
        feed_result r;
        if (feed_page(f, 60, 100, 10, 5, &r) == FEED_OK)   /* past the copy: needs SQL */
            feed_result_free(&r);
        fault_sleep_ms(60);
    }
    if (!ok(events(from, FEED_LOG_ERROR, "PostgreSQL", NULL) == 1,
            "PostgreSQL stopped: one FEED_LOG_ERROR for 3 calls that needed it"))
        diag_events(from);
    fault_inject("pg-start");
    fault_sleep_ms(150);
    from = nev;
    {
        feed_result r;
        int rc = feed_page(f, 60, 100, 10, 5, &r);
        if (rc == FEED_OK)
            feed_result_free(&r);
        if (!ok(rc == FEED_OK && events(from, FEED_LOG_INFO, "PostgreSQL", "answers again") == 1,
                "PostgreSQL back: a page past the copy, and one FEED_LOG_INFO"))
            diag_events(from);
    }
    feed_close(f);
}

/* The same outage met by an async handle: its calls run on the loop, and
 * log_fn is called there, once per outage. */
static int a_done, a_rc, a_src;

static void a_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    (void)a;
    (void)arg;
    a_done = 1;
    a_rc = rc;
    a_src = page ? (int)page->source : 0;
    feed_result_free(page);
}

static int a_page_ok(feed_async *a, struct event_base *base, int64_t uid)
{
    a_done = 0;
    if (feed_async_page(a, uid, FEED_FIRST, 0, 5, a_page, NULL) != FEED_OK)
        return -1;
    for (int i = 0; i < 100000 && !a_done; i++)
        event_base_loop(base, EVLOOP_ONCE);
    return a_done ? a_rc : -1;
}

static void async_events(void)
{
    struct event_base *base = event_base_new();
    feed_config cfg;
    feed_async *a = NULL;
    int from, good = 1;

    cfg_of(&cfg, "feed_entry");
    cfg.retry_ms = 100;
    cfg.max_len = 10;
    if (!base || feed_async_open_libevent(&a, &cfg, base) != FEED_OK) {
        tap_bail("async open");
        exit(255);
    }
    good &= a_page_ok(a, base, 60) == FEED_OK;
    from = nev;
    fault_inject("redis-stop");
    for (int i = 0; i < 5; i++) {
        good &= a_page_ok(a, base, 60) == FEED_OK && a_src == FEED_SOURCE_DB;
        fault_sleep_ms(50);
    }
    if (!ok(good && events(from, FEED_LOG_ERROR, "Redis", NULL) == 1,
            "async, Redis stopped: pages from PostgreSQL, one FEED_LOG_ERROR"))
        diag_events(from);
    fault_inject("redis-start");
    fault_sleep_ms(150);
    from = nev;
    good = a_page_ok(a, base, 60) == FEED_OK && a_page_ok(a, base, 60) == FEED_OK;
    if (!ok(good && events(from, FEED_LOG_INFO, "Redis", "answers again") == 1,
            "async, Redis back: one FEED_LOG_INFO"))
        diag_events(from);
    feed_async_close(a);
    event_base_free(base);
}

int main(void)
{
    char v[32];

    pg = tu_begin(NULL);
    fault_setup();
    snprintf(v, sizeof v, "%d.%d.%d", FEED_VERSION_MAJOR, FEED_VERSION_MINOR, FEED_VERSION_PATCH);
    is_str(feed_version(), v, "feed_version() is the library's version");
    nulls();
    unique();
    index_and_view();
    store_events();
    async_events();
    PQfinish(pg);
    return tap_done();
}
