/* minimal.c -- feedcache in one page: open a handle, read a feed page by
 * page, write a row and tell the cache, read again, close.
 *
 *   cc minimal.c -o minimal $(pkg-config --cflags --libs feedcache libpq)
 *   ./minimal [uid]     servers from FEED_REDIS_HOST, FEED_REDIS_PORT and
 *                       FEED_PG_CONNINFO (defaults: local Redis, libpq's PG*)
 * The table is sql/schema.sql's feed_entry. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <libpq-fe.h>
#include <feedcache.h>

static const char *env(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v ? v : dflt;
}

/* The whole feed, 5 items a page: each page continues from the last one's
 * cursor (next_score, next_id), as a "load more" button would. */
static int print_feed(feed *f, int64_t uid)
{
    int64_t last_score = FEED_FIRST, last_id = 0;
    int more = 1;

    while (more) {
        feed_result page;
        int rc = feed_page(f, uid, last_score, last_id, 5, &page);
        if (rc != FEED_OK) {
            fprintf(stderr, "feed_page: %s: %s\n", feed_strerror(rc), feed_errmsg(f));
            return rc;
        }
        printf("page (%s):", feed_source_name(page.source));   /* cache, rebuild, db */
        for (size_t i = 0; i < page.count; i++)
            printf(" %" PRId64 ":%" PRId64, page.items[i].score, page.items[i].id);
        printf("\n");
        more = page.has_more;
        last_score = page.next_score;
        last_id = page.next_id;
        feed_result_free(&page);
    }
    return FEED_OK;
}

int main(int argc, char **argv)
{
    int64_t uid = argc > 1 ? strtoll(argv[1], NULL, 10) : 1;
    const char *uid_text = argc > 1 ? argv[1] : "1";
    feed_config cfg;
    feed *f;
    PGconn *pg;
    PGresult *res;
    int rc;

    feed_config_init(&cfg);                       /* every default, then ours */
    cfg.redis_host = env("FEED_REDIS_HOST", "127.0.0.1");
    cfg.redis_port = atoi(env("FEED_REDIS_PORT", "6379"));
    cfg.pg_conninfo = env("FEED_PG_CONNINFO", "");
    if ((rc = feed_open(&f, &cfg)) != FEED_OK) {
        fprintf(stderr, "feed_open: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
        return 1;
    }
    if (print_feed(f, uid) != FEED_OK)
        return 1;

    /* A write: the application changes SQL, the statement commits (no BEGIN:
     * it commits when it returns), and only then the hook tells the cache. */
    pg = PQconnectdb(cfg.pg_conninfo);
    res = PQexecParams(pg, "INSERT INTO feed_entry (uid, score, id)"
                       " SELECT $1, coalesce(max(score), 0) + 1, coalesce(max(id), 0) + 1"
                       " FROM feed_entry WHERE uid = $1 RETURNING score, id",
                       1, NULL, &uid_text, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        fprintf(stderr, "INSERT: %s", PQerrorMessage(pg));
        return 1;
    }
    int64_t score = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    int64_t id = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    PQclear(res);
    PQfinish(pg);
    if ((rc = feed_on_insert(f, uid, score, id)) != FEED_OK)   /* Redis down: the */
        fprintf(stderr, "feed_on_insert: %s\n", feed_errmsg(f)); /* row is safe in SQL */
    printf("inserted %" PRId64 ":%" PRId64 "\n", score, id);

    rc = print_feed(f, uid);                      /* the new row on top */
    feed_close(f);
    return rc == FEED_OK ? 0 : 1;
}
