/* t_errors.c -- bad arguments, bad configs, malformed tokens, foreign data in
 * Redis: each a clear code and message, never a crash, never a wrong page. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

static PGconn *pg;
static redisContext *r;

static void null_and_range_arguments(void)
{
    feed *f = tu_open(NULL);
    feed_result res;
    feed_stats s;
    int64_t uid = 1;

    is_int(feed_page(NULL, 1, FEED_FIRST, 0, 10, &res), FEED_EINVAL, "feed_page(NULL handle)");
    ok(res.items == NULL && res.count == 0, "  result zeroed");
    is_int(feed_page(f, 1, FEED_FIRST, 0, 10, NULL), FEED_EINVAL, "feed_page(out NULL)");
    ok(*feed_errmsg(f) != '\0', "  message: %s", feed_errmsg(f));
    is_int(feed_page(f, 1, FEED_FIRST, 0, 0, &res), FEED_EINVAL, "limit 0");
    ok(strstr(feed_errmsg(f), "limit 0") != NULL, "  message: %s", feed_errmsg(f));
    is_int(feed_page(f, 1, FEED_FIRST, 0, 101, &res), FEED_EINVAL, "limit max_page + 1");
    is_int(feed_page(f, 1, FEED_FIRST, 0, (size_t)-1, &res), FEED_EINVAL, "limit SIZE_MAX");
    is_int(feed_page(f, 1, FEED_FIRST, 0, 100, &res), FEED_OK, "limit max_page is fine");
    feed_result_free(&res);
    is_int(feed_page(f, 1, 10, -1, 10, &res), FEED_EINVAL, "negative cursor id");
    is_int(feed_page(f, 1, FEED_FIRST, -1, 10, &res), FEED_OK,
           "the cursor id is ignored on the first page");
    feed_result_free(&res);

    is_int(feed_on_insert(NULL, 1, 1, 1), FEED_EINVAL, "feed_on_insert(NULL)");
    is_int(feed_on_insert(f, 1, 1, -1), FEED_EINVAL, "feed_on_insert negative id");
    is_int(feed_on_delete(NULL, 1, 1), FEED_EINVAL, "feed_on_delete(NULL)");
    is_int(feed_on_delete(f, 1, -1), FEED_EINVAL, "feed_on_delete negative id");
    is_int(feed_fanout(NULL, &uid, 1, 1, 1), FEED_EINVAL, "feed_fanout(NULL)");
    is_int(feed_fanout(f, NULL, 3, 1, 1), FEED_EINVAL, "feed_fanout uids NULL with n 3");
    is_int(feed_fanout(f, &uid, 1, 1, -1), FEED_EINVAL, "feed_fanout negative id");
    is_int(feed_reload(NULL, 1), FEED_EINVAL, "feed_reload(NULL)");
    is_int(feed_invalidate(NULL, 1), FEED_EINVAL, "feed_invalidate(NULL)");
    feed_close(NULL);
    ok(1, "feed_close(NULL) is a no-op");
    feed_result_free(NULL);
    ok(1, "feed_result_free(NULL) is a no-op");
    feed_stats_get(NULL, &s);
    ok(s.pages == 0 && s.redis_calls == 0, "feed_stats_get(NULL) gives zeros");
    feed_stats_get(f, NULL);
    ok(1, "feed_stats_get(f, NULL) is a no-op");
    {
        /* Every field of feed_stats has a name: an exporter that walks the
         * names misses none. A counter added to the struct but not to the
         * table in lib/core/config.c makes the count short. */
        feed_stats st;
        size_t n = feed_stats_count(), named = 0, matched = 0;
        memset(&st, 0, sizeof st);
        for (size_t i = 0; i < n; i++) {
            named += feed_stats_name(i) != NULL && *feed_stats_name(i);
            memset(&st, 0, sizeof st);
            ((uint64_t *)(void *)&st)[i] = 1000 + i;   /* field i, by position */
            matched += feed_stats_value(&st, i) == 1000 + i;
        }
        is_int((int)n, (int)(sizeof(feed_stats) / sizeof(uint64_t)),
               "feed_stats_count() names every field of feed_stats");
        ok(named == n && matched == n, "  each has a name and reads its own field");
        ok(feed_stats_name(n) == NULL && feed_stats_value(&st, n) == 0 &&
           feed_stats_value(NULL, 0) == 0, "  out of range: NULL and 0");
        st.pages = 7;
        ok(strcmp(feed_stats_name(0), "pages") == 0 && feed_stats_value(&st, 0) == 7,
           "  'pages' is the first");
    }

    {
        const int codes[] = { FEED_OK, FEED_EINVAL, FEED_ERANGE, FEED_EREDIS, FEED_EPG,
                              FEED_ENOMEM, FEED_EUNAVAILABLE };
        int distinct = 1;
        for (int i = 0; i < 7; i++)
            for (int j = 0; j < i; j++)
                distinct &= strcmp(feed_strerror(codes[i]), feed_strerror(codes[j])) != 0;
        ok(distinct, "feed_strerror gives each code its own text");
        is_str(feed_strerror(12345), "unknown error code", "and a text for an unknown code");
        /* feed_score_pack() and feed_score_unpack() return FEED_ERANGE for
         * a field too wide, not only for a score: the text says both. */
        is_str(feed_strerror(FEED_ERANGE), "score out of range (a cursor's, a row's, a hook's"
               " or a composite score field's)", "FEED_ERANGE's text covers a composite field too");
    }
    is_str(feed_source_name(FEED_SOURCE_CACHE), "cache", "feed_source_name: cache");
    is_str(feed_source_name(FEED_SOURCE_REBUILD), "rebuild", "  rebuild");
    is_str(feed_source_name(FEED_SOURCE_DB), "db", "  db");
    ok(strcmp(feed_source_name((feed_source)0), "unknown") == 0 &&
       strcmp(feed_source_name((feed_source)4), "unknown") == 0,
       "  \"unknown\" for any other value, never NULL");
    feed_close(f);
}

#define BAD_CONFIG(what, stmt)                                                  \
    do {                                                                        \
        feed_config c;                                                          \
        feed *f = (feed *)&c;                                                   \
        tu_config(&c);                                                          \
        stmt;                                                                   \
        is_int(feed_open(&f, &c), FEED_EINVAL, "config: %s", what);            \
        ok(f == NULL && *feed_errmsg(NULL), "  no handle; %s", feed_errmsg(NULL)); \
    } while (0)

static void bad_configs(void)
{
    BAD_CONFIG("redis_host NULL", c.redis_host = NULL);
    BAD_CONFIG("redis_port 0", c.redis_port = 0);
    BAD_CONFIG("redis_port 70000", c.redis_port = 70000);
    BAD_CONFIG("pg_conninfo NULL", c.pg_conninfo = NULL);
    BAD_CONFIG("key_prefix NULL", c.key_prefix = NULL);
    BAD_CONFIG("key_prefix empty", c.key_prefix = "");
    BAD_CONFIG("key_prefix with braces", c.key_prefix = "feed{x}");
    BAD_CONFIG("table NULL", c.table = NULL);
    BAD_CONFIG("id_column empty", c.id_column = "");
    BAD_CONFIG("max_len 0", c.max_len = 0);
    BAD_CONFIG("max_page 0", c.max_page = 0);
    BAD_CONFIG("redis_timeout_ms 0", c.redis_timeout_ms = 0);
    BAD_CONFIG("lease_ms 0", c.lease_ms = 0);
    BAD_CONFIG("pg_timeout_ms 0 (no unbounded wait)", c.pg_timeout_ms = 0);
    BAD_CONFIG("pg_replica_conninfo empty", c.pg_replica_conninfo = "");
    BAD_CONFIG("redis_user without a password", c.redis_user = "app");
    BAD_CONFIG("redis_wait_timeout_ms not below redis_timeout_ms on a cluster",
               (c.redis_cluster = "127.0.0.1:1", c.redis_wait_replicas = 1,
                c.redis_wait_timeout_ms = c.redis_timeout_ms));
    BAD_CONFIG("redis_cluster and redis_sentinels together",
               (c.redis_cluster = "127.0.0.1:1", c.redis_sentinels = "127.0.0.1:2"));
}

static void configs(void)
{
    feed_config c;
    feed *f = (feed *)&c;

    tu_config(&c);
    is_int(feed_open(NULL, &c), FEED_EINVAL, "feed_open(NULL out)");
    is_int(feed_open(&f, NULL), FEED_EINVAL, "feed_open(NULL cfg)");
    ok(f == NULL, "  *out is NULL");

    tu_config(&c);
    c.table = "no_such_table";
    is_int(feed_open(&f, &c), FEED_EPG, "a table that does not exist: FEED_EPG");
    ok(f == NULL && strstr(feed_errmsg(NULL), "no_such_table"), "  %s", feed_errmsg(NULL));
    tu_config(&c);
    c.score_column = "no_such_column";
    is_int(feed_open(&f, &c), FEED_EPG, "a column that does not exist: FEED_EPG");
    /* Answered and refused, told apart from "no answer" without PQping
     * (pg.c: refused). */
    {
        char conninfo[512];
        tu_config(&c);
        snprintf(conninfo, sizeof conninfo, "%s dbname=no_such_db", c.pg_conninfo);
        c.pg_conninfo = conninfo;
        is_int(feed_open(&f, &c), FEED_EPG, "a database that does not exist: FEED_EPG");
        ok(f == NULL && strstr(feed_errmsg(NULL), "no_such_db") &&
           !strstr(feed_errmsg(NULL), "LOCATION"), "  %s", feed_errmsg(NULL));
        feed_config d;
        tu_config(&d);
        c.pg_replica_conninfo = c.pg_conninfo;
        c.pg_conninfo = d.pg_conninfo;
        is_int(feed_open(&f, &c), FEED_EPG, "a replica that refuses: FEED_EPG at open");
        ok(f == NULL && strstr(feed_errmsg(NULL), "replica"), "  %s", feed_errmsg(NULL));
    }
    tu_config(&c);
    c.pg_conninfo = "host=127.0.0.1 port=1 connect_timeout=2";
    c.redis_port = 1;
    is_int(feed_open(&f, &c), FEED_EUNAVAILABLE, "neither store answers: FEED_EUNAVAILABLE");
    ok(strstr(feed_errmsg(NULL), "Redis") && strstr(feed_errmsg(NULL), "PostgreSQL"),
       "  the message names both: %s", feed_errmsg(NULL));

    /* The failover guarantee on a Redis Cluster (WAIT and the fence per
     * node) is a valid config; here no node answers, so the handle opens
     * on PostgreSQL alone. */
    tu_config(&c);
    c.redis_cluster = "127.0.0.1:1";
    c.redis_wait_replicas = 1;
    c.redis_restart_fence = 1;
    is_int(feed_open(&f, &c), FEED_OK, "redis_cluster with redis_wait_replicas and "
           "redis_restart_fence is accepted");
    feed_close(f);

    /* Redis absent, PostgreSQL there: the handle opens and serves from SQL. */
    tu_config(&c);
    c.redis_port = 1;
    is_int(feed_open(&f, &c), FEED_OK, "Redis absent at open: the handle still opens");
    if (f) {
        feed_result res;
        tu_insert(pg, 9, 5, 5);
        is_int(feed_page(f, 9, FEED_FIRST, 0, 10, &res), FEED_OK, "  and pages work");
        ok(res.source == FEED_SOURCE_DB && res.count == 1, "  from SQL");
        ok(strstr(feed_errmsg(f), "Redis") != NULL, "  the Redis problem is in errmsg: %s",
           feed_errmsg(f));
        feed_result_free(&res);
        is_int(feed_on_insert(f, 9, 5, 5), FEED_EREDIS, "  a hook says FEED_EREDIS");
        feed_close(f);
    }
}

static void tokens(void)
{
    char buf[32], bad[40];
    int64_t s = 7, id = 7;
    const char *malformed[] = {
        "", "AAAA", "AQAAAAAAAAAqAAAAAAAAAAcX", /* wrong check */
        "AQAAAAAAAAAqAAAAAAAAAAc+", "AQAAAAAAAAAqAAAAAAAAAAc/", "AQAAAAAAAAAqAAAAAAAAAA==",
        "AQAAAAAAAAAqAAAAAAAAAAcXX", "not a cursor at all!!!!!",
    };
    int all = 1;

    is_int(feed_cursor_encode(42, 7, buf, sizeof buf), FEED_OK, "encode (42, 7)");
    is_int((long long)strlen(buf), FEED_CURSOR_LEN, "  %d characters: %s", FEED_CURSOR_LEN, buf);
    ok(strspn(buf, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") ==
           FEED_CURSOR_LEN, "  URL-safe");
    is_int(feed_cursor_decode(buf, &s, &id), FEED_OK, "decodes");
    ok(s == 42 && id == 7, "  to (42, 7)");
    is_int(feed_cursor_encode(-FEED_SCORE_MAX, INT64_MAX, buf, sizeof buf), FEED_OK, "extremes encode");
    ok(feed_cursor_decode(buf, &s, &id) == FEED_OK && s == -FEED_SCORE_MAX && id == INT64_MAX,
       "  and decode exactly");
    {
        /* The documented size works, and so does the 32 of older callers;
         * one byte less is refused without a byte written. */
        char exact[FEED_CURSOR_SIZE], canary[FEED_CURSOR_SIZE + 8];
        is_int(FEED_CURSOR_SIZE, FEED_CURSOR_LEN + 1, "FEED_CURSOR_SIZE is FEED_CURSOR_LEN + 1");
        is_int(feed_cursor_encode(42, 7, exact, sizeof exact), FEED_OK,
               "a FEED_CURSOR_SIZE buffer is accepted");
        ok(strlen(exact) == FEED_CURSOR_LEN && feed_cursor_decode(exact, &s, &id) == FEED_OK &&
           s == 42 && id == 7, "  and holds a token that decodes to (42, 7)");
        is_int(feed_cursor_encode(42, 7, buf, 32), FEED_OK, "a 32-byte buffer still works");
        memset(canary, 'x', sizeof canary);
        is_int(feed_cursor_encode(1, 1, canary, FEED_CURSOR_SIZE - 1), FEED_EINVAL,
               "buflen FEED_CURSOR_SIZE - 1 refused");
        ok(canary[0] == 'x' && canary[FEED_CURSOR_SIZE - 1] == 'x', "  and nothing written");
    }
    is_int(feed_cursor_encode(1, 1, NULL, 32), FEED_EINVAL, "NULL buffer refused");
    is_int(feed_cursor_encode(1, -1, buf, 32), FEED_EINVAL, "negative id refused");
    is_int(feed_cursor_encode(FEED_SCORE_MAX + 1, 1, buf, 32), FEED_ERANGE, "score 2^53 refused");
    is_int(feed_cursor_decode(NULL, &s, &id), FEED_EINVAL, "decode NULL token");
    is_int(feed_cursor_decode(buf, NULL, &id), FEED_EINVAL, "decode NULL score");

    s = id = 99;
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++)
        all &= feed_cursor_decode(malformed[i], &s, &id) == FEED_EINVAL;
    ok(all && s == 99 && id == 99, "%zu malformed tokens: FEED_EINVAL, outputs untouched",
       sizeof malformed / sizeof *malformed);

    /* Every single-character change of a valid token is caught (the check byte). */
    feed_cursor_encode(123456789, 987654321, buf, sizeof buf);
    all = 1;
    for (int pos = 0; pos < FEED_CURSOR_LEN; pos++) {
        const char *alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        for (const char *c = alphabet; *c; c++) {
            int64_t ds, di;
            if (*c == buf[pos])
                continue;
            memcpy(bad, buf, sizeof buf);
            bad[pos] = *c;
            if (feed_cursor_decode(bad, &ds, &di) == FEED_OK &&
                !(ds == 123456789 && di == 987654321)) {
                /* A changed token decoding to another valid cursor is possible
                 * only if the check byte collides; count it as a failure. */
                all = 0;
            }
        }
    }
    ok(all, "no single-character edit of a token decodes to another cursor");
}

/* Common mistakes, each answered with a message that names it: a refused
 * token and why (feed_errmsg(NULL)), a zero cursor meant as "first page",
 * FEED_FIRST where a cursor is needed, a limit from a negative int. */
static void mistakes(void)
{
    feed *f = tu_open(NULL);
    char plain[FEED_CURSOR_SIZE], ranked[FEED_CURSOR_SIZE], bad[64];
    int64_t s = 0, id = 0, rank = 0;
    feed_result res;
    int rc;

    feed_cursor_encode(500, 5, plain, sizeof plain);
    feed_cursor_encode_ranked(500, 5, 3, ranked, sizeof ranked);
    ok(feed_cursor_decode("this is not a token!!!!!", &s, &id) == FEED_EINVAL &&
       strstr(feed_errmsg(NULL), "not a cursor token"),
       "garbage: FEED_EINVAL, and why (%s)", feed_errmsg(NULL));
    snprintf(bad, sizeof bad, "%s", plain);
    bad[5] = bad[5] == 'A' ? 'B' : 'A';
    ok(feed_cursor_decode(bad, &s, &id) == FEED_EINVAL && strstr(feed_errmsg(NULL), "check byte"),
       "a tampered token: FEED_EINVAL, and why (%s)", feed_errmsg(NULL));
    ok(feed_cursor_decode(ranked, &s, &id) == FEED_EINVAL &&
       strstr(feed_errmsg(NULL), "feed_cursor_decode_ranked"),
       "a ranked token to the plain decoder: FEED_EINVAL, and which to call (%s)",
       feed_errmsg(NULL));
    snprintf(bad, sizeof bad, "%sAAAA", plain);
    ok(feed_cursor_decode_ranked(bad, &s, &id, &rank) == FEED_EINVAL &&
       strstr(feed_errmsg(NULL), "too long"), "a token too long: FEED_EINVAL, and why (%s)",
       feed_errmsg(NULL));
    ok(feed_cursor_decode(plain, &s, &id) == FEED_OK && !feed_errmsg(NULL)[0],
       "  a good token after them: FEED_OK, the message cleared");
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 61");
    tu_insert_rows(pg, 61, 5, tu_score_by10, tu_id_seq);
    rc = feed_page(f, 61, 0, 0, 5, &res);
    ok(rc == FEED_OK && res.count == 0 && strstr(feed_errmsg(f), "FEED_FIRST") &&
       strstr(feed_errmsg(f), "(0, 0)"),
       "cursor (0, 0) on a feed of positive scores: FEED_OK, empty, and a note (%s)",
       feed_errmsg(f));
    if (rc == FEED_OK)
        feed_result_free(&res);
    rc = feed_page_newer(f, 61, FEED_FIRST, 0, 5, &res);
    ok(rc == FEED_ERANGE && strstr(feed_errmsg(f), "FEED_FIRST is no cursor here"),
       "feed_page_newer(FEED_FIRST): refused, naming the mistake (%s)", feed_errmsg(f));
    rc = feed_page(f, 61, FEED_FIRST, 0, (size_t)(int)-5, &res);
    ok(rc == FEED_EINVAL && strstr(feed_errmsg(f), "negative"),
       "a limit of (size_t)-5: refused, as a negative number (%s)", feed_errmsg(f));
    ok(strstr(feed_strerror(FEED_ERANGE), "cursor") != NULL,
       "feed_strerror(FEED_ERANGE) names a cursor among its causes (%s)",
       feed_strerror(FEED_ERANGE));
    feed_close(f);
}

/* Foreign things under the feed's key: a correct page from SQL, a clear
 * error from the hooks, nothing broken for other feeds. */
static void foreign_redis_data(void)
{
    feed *f = tu_open(NULL);
    feed_result res;
    tu_walk_info info;

    tu_insert(pg, 20, 10, 1);
    tu_insert(pg, 20, 20, 2);
    freeReplyObject(tu_redis_cmd(r, "SET %s not-a-zset", tu_key(20, "")));
    is_int(feed_page(f, 20, FEED_FIRST, 0, 10, &res), FEED_OK, "feed key of the wrong type: page OK");
    ok(res.source == FEED_SOURCE_DB && res.count == 2 && res.items[0].id == 2,
       "  a correct page, from SQL");
    ok(strstr(feed_errmsg(f), "WRONGTYPE") != NULL, "  errmsg says why: %s", feed_errmsg(f));
    feed_result_free(&res);
    is_int(feed_on_insert(f, 20, 30, 3), FEED_EREDIS, "  a hook: FEED_EREDIS");
    ok(strstr(feed_errmsg(f), "WRONGTYPE") != NULL, "  %s", feed_errmsg(f));
    /* The failed hook left feed 20 on the repair list: the next call drops
     * the key first, so the delete finds no copy to fix. */
    is_int(feed_on_delete(f, 20, 3), FEED_OK, "  the next hook drops the foreign key first (repair)");
    is_int(tu_redis_int(r, "EXISTS %s", tu_key(20, "")), 0, "  the key is gone");
    tu_insert(pg, 21, 1, 1);
    ok(tu_walk_equals_sql(f, pg, 21, 3, &info), "other feeds are unaffected");
    is_int(feed_reload(f, 20), FEED_OK, "reload replaces the foreign key with the feed");
    ok(tu_walk_equals_sql(f, pg, 20, 1, &info) &&
       info.sources[FEED_SOURCE_CACHE] == (int)info.pages, "  which walks from the cache");
    freeReplyObject(tu_redis_cmd(r, "SET %s not-a-zset", tu_key(20, "")));
    is_int(feed_invalidate(f, 20), FEED_OK, "invalidate removes a foreign key too");
    ok(tu_walk_equals_sql(f, pg, 20, 1, &info), "  and the feed caches again");

    /* A member that is not a feedcache id inside a cached feed. */
    freeReplyObject(tu_redis_cmd(r, "ZADD %s 15 hello", tu_key(20, "")));
    is_int(feed_page(f, 20, FEED_FIRST, 0, 10, &res), FEED_OK, "a foreign member in the zset");
    ok(res.source == FEED_SOURCE_DB && res.count == 2, "  the page comes from SQL, correct");
    feed_result_free(&res);
    feed_close(f);
}

int main(void)
{
    pg = tu_begin(&r);
    null_and_range_arguments();
    bad_configs();
    configs();
    tokens();
    mistakes();
    foreign_redis_data();
    PQfinish(pg);
    redisFree(r);
    return tap_done();
}
