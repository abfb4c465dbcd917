/* t_hostile.c -- hostile configuration and data, against the real servers:
 * each case is a clear error code and message (or a correct answer), never a
 * crash or a wrong page, and the handle keeps serving other feeds.
 *
 *   configuration  a table and columns named with quotes and spaces (they
 *                  work: libpq quotes them); SQL in a table or column name
 *                  (refused at feed_open, nothing runs); a key prefix with
 *                  braces (FEED_EINVAL); a prefix with spaces and quotes
 *                  (works: keys travel as binary-safe arguments);
 *   Redis data     the feed key holding a string, a zset with members that
 *                  are not feedcache ids, the lease key of the wrong type;
 *   SQL data       a score out of range or a negative id (FEED_ERANGE naming
 *                  owner and id), NULL and non-numeric scores through a view
 *                  (FEED_EPG), at the top of a feed and deep below the cache;
 *   caller input   uids at the int64 extremes, forged cursor tokens and
 *                  cursors at the edges of the score range. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "tap.h"
#include "testutil.h"

#define GOOD 999      /* a plain feed every case checks still works */

static PGconn *pg;
static redisContext *r;

static int still_fine(feed *f)
{
    tu_walk_info info;

    return tu_walk_equals_sql(f, pg, GOOD, 7, &info);
}

static int has(const char *msg, const char *want)
{
    return msg && strstr(msg, want) != NULL;
}

/* ------------------------------------------------------------ config */

static void odd_identifiers(void)
{
    feed_config cfg;
    feed *f;
    feed_result res;
    int rc, same;

    tu_sql(pg, "DROP TABLE IF EXISTS \"my \"\"odd\"\" table\"");
    tu_sql(pg, "CREATE TABLE \"my \"\"odd\"\" table\" (\"user id\" bigint NOT NULL,"
               " \"Score!\" bigint NOT NULL, \"i\"\"d\" bigint NOT NULL,"
               " PRIMARY KEY (\"user id\", \"i\"\"d\"))");
    tu_sql(pg, "INSERT INTO \"my \"\"odd\"\" table\" SELECT 5, g / 3, g FROM generate_series(1, 50) g");
    tu_config(&cfg);
    cfg.table = "my \"odd\" table";
    cfg.owner_column = "user id";
    cfg.score_column = "Score!";
    cfg.id_column = "i\"d";
    cfg.key_prefix = "odd";
    cfg.max_len = 20;
    rc = feed_open(&f, &cfg);
    is_int(rc, FEED_OK, "a table and columns named with quotes, spaces and '!' open fine");
    if (rc != FEED_OK) {
        tap_diag("%s", feed_errmsg(NULL));
        return;
    }
    /* Walk by pages of 7 and compare with the rows inserted above: ids 50
     * down to 1, each with score id / 3. */
    {
        feed_item *got = NULL;
        size_t n = 0;
        tu_walk_info info;
        same = tu_walk(f, 5, 7, &got, &n, &info) == FEED_OK && n == 50;
        for (size_t i = 0; same && i < n; i++)
            same = got[i].id == (int64_t)(50 - i) && got[i].score == (int64_t)(50 - i) / 3;
        if (!same)
            tap_diag("walk: %s", info.why);
        free(got);
    }
    ok(same, "  a walk over it equals the table, cache and keyset query alike");
    tu_sql(pg, "INSERT INTO \"my \"\"odd\"\" table\" VALUES (5, 1000, 77)");
    is_int(feed_on_insert(f, 5, 1000, 77), FEED_OK, "  hooks work too");
    rc = feed_page(f, 5, FEED_FIRST, 0, 3, &res);
    ok(rc == FEED_OK && res.count == 3 && res.items[0].id == 77, "  and the cache shows the write");
    feed_result_free(&res);
    feed_close(f);
    tu_sql(pg, "DROP TABLE \"my \"\"odd\"\" table\"");
}

static void injection_in_names(void)
{
    static const struct { const char *field, *value; } cases[] = {
        { "table", "feed_entry; DROP TABLE feed_entry; --" },
        { "table", "feed_entry\" WHERE false; --" },
        { "owner_column", "uid = uid OR true --" },
        { "score_column", "score) FROM pg_class; --" },
        { "id_column", "id\"; DELETE FROM feed_entry; --" },
    };

    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        feed_config cfg;
        feed *f = NULL;
        int rc;

        tu_config(&cfg);
        if (strcmp(cases[i].field, "table") == 0)
            cfg.table = cases[i].value;
        else if (strcmp(cases[i].field, "owner_column") == 0)
            cfg.owner_column = cases[i].value;
        else if (strcmp(cases[i].field, "score_column") == 0)
            cfg.score_column = cases[i].value;
        else
            cfg.id_column = cases[i].value;
        rc = feed_open(&f, &cfg);
        ok(rc == FEED_EPG && f == NULL && has(feed_errmsg(NULL), "does not exist"),
           "SQL in %s (%s): FEED_EPG at feed_open, \"%.60s...\"", cases[i].field,
           cases[i].value, feed_errmsg(NULL));
        feed_close(f);
    }
    ok(tu_sql_int(pg, "SELECT count(*) FROM feed_entry WHERE uid = %d", GOOD) == 40,
       "  feed_entry is intact: nothing of it ran");
}

static void key_prefixes(void)
{
    static const char *braces[] = { "feed{x}", "{", "}", "a{b" };
    feed_config cfg;
    feed *f = NULL;
    int rc;

    for (size_t i = 0; i < sizeof braces / sizeof *braces; i++) {
        tu_config(&cfg);
        cfg.key_prefix = braces[i];
        rc = feed_open(&f, &cfg);
        ok(rc == FEED_EINVAL && f == NULL && has(feed_errmsg(NULL), "key_prefix"),
           "key prefix \"%s\": FEED_EINVAL (%s)", braces[i], feed_errmsg(NULL));
        feed_close(f);
    }
    tu_config(&cfg);
    cfg.key_prefix = "my \"feeds\"\n\t*";
    f = tu_open(&cfg);
    ok(still_fine(f), "a prefix with quotes, a space, a newline and '*' works");
    {
        const char *key = tu_key_of(cfg.key_prefix, 999, "");
        is_int(tu_redis_int(r, "EXISTS %b", key, strlen(key)), 1, "  under exactly that key");
    }
    feed_close(f);
}

/* ------------------------------------------------------------ Redis data */

static void wrong_types(void)
{
    feed *f = tu_open_settled(NULL);   /* the fence must not drop what we plant */
    feed_result res;
    tu_walk_info info;
    char m1[FEED_MEMBER_MAX], m2[FEED_MEMBER_MAX];
    size_t m1len, m2len;
    int rc;

    tu_insert_rows(pg, 900, 30, tu_score_pairs, tu_id_seq);
    tu_insert_rows(pg, 901, 30, tu_score_pairs, tu_id_seq);
    tu_insert_rows(pg, 902, 30, tu_score_pairs, tu_id_seq);

    /* The feed key is a string. */
    freeReplyObject(tu_redis_cmd(r, "SET %s not-a-zset", tu_key(900, "")));
    rc = feed_page(f, 900, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && res.count == 10 && res.items[0].id == 30,
       "feed key holds a string: the page comes from SQL, right");
    ok(has(feed_errmsg(f), "WRONGTYPE"), "  the Redis error is left in feed_errmsg: %s",
       feed_errmsg(f));
    feed_result_free(&res);
    ok(tu_walk_equals_sql(f, pg, 900, 7, &info) && info.sources[FEED_SOURCE_DB] == (int)info.pages,
       "  a whole walk equals SQL, from SQL");
    tu_insert(pg, 900, 5000, 500);
    rc = feed_on_insert(f, 900, 5000, 500);
    ok(rc == FEED_EREDIS && has(feed_errmsg(f), "WRONGTYPE"),
       "  feed_on_insert: FEED_EREDIS with WRONGTYPE (%s)", feed_errmsg(f));
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 900 AND id = 500");
    /* The failed hook put feed 900 on the repair list: the next call drops
     * the foreign key first, so the delete finds no copy to fix. */
    rc = feed_on_delete(f, 900, 500);
    ok(rc == FEED_OK && tu_redis_int(r, "EXISTS %s", tu_key(900, "")) == 0,
       "  the next hook drops the foreign key first (repair), then has nothing to fix");
    freeReplyObject(tu_redis_cmd(r, "SET %s not-a-zset", tu_key(900, "")));
    {
        int64_t uids[2] = { 900, 901 };
        rc = feed_fanout(f, uids, 2, 6000, 600);
        ok(rc == FEED_EREDIS && has(feed_errmsg(f), "WRONGTYPE"),
           "  feed_fanout over it and a good feed: FEED_EREDIS with WRONGTYPE");
        tap_diag("  (feed 901 was %scached)", tu_redis_int(r, "EXISTS %s", tu_key(901, "")) ? "" : "not ");
        tu_sql(pg, "DELETE FROM feed_entry WHERE id = 600");   /* never committed, say */
        feed_invalidate(f, 901);
    }
    ok(tu_redis_int(r, "EXISTS %s", tu_key(900, "")) == 0,
       "  and the call after the failed fan-out dropped the foreign key too");
    ok(still_fine(f), "  the same handle serves another feed fine");
    is_int(feed_invalidate(f, 900), FEED_OK, "  feed_invalidate drops the foreign key");
    ok(tu_walk_equals_sql(f, pg, 900, 7, &info) && tu_walk_equals_sql(f, pg, 900, 7, &info) &&
       info.sources[FEED_SOURCE_CACHE] == (int)info.pages,
       "  then the feed is cached again and walks equal SQL from the cache");

    /* A zset whose members are not feedcache ids. */
    freeReplyObject(tu_redis_cmd(r, "DEL %s", tu_key(901, "")));
    m1len = tu_member(1, m1);
    freeReplyObject(tu_redis_cmd(r, "ZADD %s 100 hello 50 %b", tu_key(901, ""), m1, m1len));
    rc = feed_page(f, 901, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && res.count == 10 && res.items[0].id == 30,
       "feed key is a zset of foreign members: the page comes from SQL, right");
    ok(has(feed_errmsg(f), "not a feedcache item"), "  with the reason: %s", feed_errmsg(f));
    feed_result_free(&res);
    freeReplyObject(tu_redis_cmd(r, "DEL %s", tu_key(901, "")));
    m1len = tu_member(31, m1);
    m2len = tu_member(32, m2);
    freeReplyObject(tu_redis_cmd(r, "ZADD %s 1e300 %b 0.5 %b", tu_key(901, ""), m1, m1len,
                                 m2, m2len));
    rc = feed_page(f, 901, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && res.items[0].id == 30,
       "  scores that are no feedcache score (1e300, 0.5): from SQL, right");
    feed_result_free(&res);
    freeReplyObject(tu_redis_cmd(r, "DEL %s", tu_key(901, "")));

    /* The lease key is a list. */
    freeReplyObject(tu_redis_cmd(r, "RPUSH %s a b c", tu_key(902, ":lease")));
    rc = feed_page(f, 902, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_DB && res.items[0].id == 30,
       "lease key holds a list: the reader waits, then reads SQL, right");
    feed_result_free(&res);
    tu_insert(pg, 902, 5000, 500);
    is_int(feed_on_insert(f, 902, 5000, 500), FEED_OK, "  a hook clears the bad lease");
    ok(tu_walk_equals_sql(f, pg, 902, 7, &info) && tu_walk_equals_sql(f, pg, 902, 7, &info) &&
       info.sources[FEED_SOURCE_CACHE] == (int)info.pages,
       "  and the feed caches normally again");
    ok(still_fine(f), "  another feed is fine throughout");
    feed_close(f);
}

/* ------------------------------------------------------------ SQL data */

static void bad_rows(void)
{
    feed_config cfg;
    feed *f;
    feed_result res;
    tu_walk_info info;
    int rc;

    tu_config(&cfg);
    cfg.max_len = 20;
    cfg.lease_ms = 300;
    cfg.lease_wait_ms = 10;
    f = tu_open(&cfg);

    /* At the top of a feed: the rebuild reads it. */
    tu_insert_rows(pg, 910, 30, tu_score_pairs, tu_id_seq);
    tu_sql(pg, "INSERT INTO feed_entry VALUES (910, 9007199254740992, 4242)");   /* 2^53 */
    rc = feed_page(f, 910, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_ERANGE && has(feed_errmsg(f), "910") && has(feed_errmsg(f), "4242"),
       "a score of 2^53 in SQL: FEED_ERANGE naming owner and id (%s)", feed_errmsg(f));
    feed_result_free(&res);
    is_int(feed_reload(f, 910), FEED_ERANGE, "  feed_reload: FEED_ERANGE too");
    ok(still_fine(f), "  another feed is fine");
    tu_sql(pg, "UPDATE feed_entry SET score = 1000 WHERE uid = 910 AND id = 4242");
    ok(tu_walk_equals_sql(f, pg, 910, 7, &info), "  the row fixed, the feed walks equal to SQL");

    /* Deep below the cached window: cached pages work, the deep one fails. */
    tu_insert_rows(pg, 911, 60, tu_score_pairs, tu_id_seq);
    tu_sql(pg, "INSERT INTO feed_entry VALUES (911, -9007199254740992, 4343)");
    {
        feed_item *got = NULL;
        size_t n = 0;
        rc = tu_walk(f, 911, 10, &got, &n, &info);
        free(got);
        ok(info.pages >= 1 && rc == FEED_ERANGE && has(feed_errmsg(f), "4343"),
           "a score of -2^53 deep in a feed: %zu pages, then FEED_ERANGE on the page that"
           " reaches it", info.pages);
    }
    tu_sql(pg, "DELETE FROM feed_entry WHERE id = 4343");

    /* A negative id. */
    tu_insert_rows(pg, 912, 5, tu_score_pairs, tu_id_seq);
    tu_sql(pg, "INSERT INTO feed_entry VALUES (912, 100, -7)");
    rc = feed_page(f, 912, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_ERANGE && has(feed_errmsg(f), "-7"), "a negative id in SQL: FEED_ERANGE (%s)",
       feed_errmsg(f));
    feed_result_free(&res);
    tu_sql(pg, "DELETE FROM feed_entry WHERE id = -7");
    ok(still_fine(f), "  another feed is fine");
    feed_close(f);

    /* Through a view: NULL scores; score columns that are not integers. */
    tu_sql(pg, "CREATE OR REPLACE VIEW hostile_null AS SELECT uid,"
               " CASE WHEN uid = 912 AND id = 3 THEN NULL ELSE score END AS score, id"
               " FROM feed_entry");
    tu_sql(pg, "CREATE OR REPLACE VIEW hostile_text AS SELECT uid, score::text AS score, id"
               " FROM feed_entry");
    tu_sql(pg, "CREATE OR REPLACE VIEW hostile_numeric AS SELECT uid,"
               " score + 0.5 AS score, id FROM feed_entry");
    tu_config(&cfg);
    cfg.table = "hostile_null";
    cfg.key_prefix = "hn";
    f = tu_open(&cfg);
    rc = feed_page(f, 912, FEED_FIRST, 0, 10, &res);
    {
        int without = rc == FEED_OK;
        for (size_t i = 0; without && i < res.count; i++)
            without = res.items[i].id != 3;
        ok(without && has(feed_errmsg(f), "NULL") && has(feed_errmsg(f), "id 3"),
           "a NULL score (a view): the row is left out of the page, and named (%s)",
           feed_errmsg(f));
    }
    feed_result_free(&res);
    ok(still_fine(f), "  another feed through the same view is fine");
    feed_close(f);
    {
        static const char *views[2] = { "hostile_text", "hostile_numeric" };
        for (int i = 0; i < 2; i++) {
            feed *g = NULL;
            cfg.table = views[i];
            rc = feed_open(&g, &cfg);
            ok(rc == FEED_EPG && g == NULL && has(feed_errmsg(NULL), "integer"),
               "a %s score column: FEED_EPG at feed_open (%s)", i ? "numeric" : "text",
               feed_errmsg(NULL));
            feed_close(g);
        }
    }
    tu_sql(pg, "DROP VIEW hostile_numeric");
    tu_sql(pg, "DROP VIEW hostile_null");
    tu_sql(pg, "DROP VIEW hostile_text");
}

/* ------------------------------------------------------------ caller input */

static void extreme_uids(void)
{
    static const int64_t uids[] = { INT64_MIN, INT64_MIN + 1, -1, 0, INT64_MAX };
    feed *f = tu_open(NULL);
    tu_walk_info info;

    for (size_t i = 0; i < sizeof uids / sizeof *uids; i++) {
        tu_insert_rows(pg, uids[i], 12, tu_score_pairs, tu_id_seq);
        ok(tu_walk_equals_sql(f, pg, uids[i], 5, &info) && tu_walk_equals_sql(f, pg, uids[i], 5, &info),
           "uid %lld: walks equal SQL, its own feed only", (long long)uids[i]);
    }
    feed_close(f);
}

static uint64_t rng = 88172645463325252ULL;     /* tu_rand's state: the same inputs every run */

static void forged_cursors(void)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    feed *f = tu_open(NULL);
    feed_item *want;
    size_t nwant = tu_sql_feed(pg, GOOD, &want);
    int bad = 0, accepted = 0;
    feed_result res;
    char tok[64];
    int64_t s, id;

    /* Random tokens of the right alphabet and length, and edits of a valid
     * one: decoded or refused, and when decoded the page is SQL's page. */
    for (int i = 0; i < 20000; i++) {
        int k;
        if (i % 2 == 0) {
            for (k = 0; k < FEED_CURSOR_LEN; k++)
                tok[k] = alphabet[tu_rand(&rng) % 64];
            tok[k] = '\0';
        } else {
            feed_cursor_encode((int64_t)(tu_rand(&rng) % 1000), (int64_t)(tu_rand(&rng) % 100), tok,
                               sizeof tok);
            tok[tu_rand(&rng) % FEED_CURSOR_LEN] = alphabet[tu_rand(&rng) % 64];
        }
        if (feed_cursor_decode(tok, &s, &id) != FEED_OK)
            continue;
        accepted++;
        if (feed_page(f, GOOD, s, id, 5, &res) != FEED_OK) {
            bad++;
            continue;
        }
        {
            size_t at = 0;
            while (at < nwant && !(want[at].score < s || (want[at].score == s && want[at].id < id)))
                at++;
            for (size_t k2 = 0; k2 < res.count; k2++)
                if (at + k2 >= nwant || res.items[k2].score != want[at + k2].score ||
                    res.items[k2].id != want[at + k2].id)
                    bad++;
            if (res.count != (nwant - at < 5 ? nwant - at : 5))
                bad++;
        }
        feed_result_free(&res);
    }
    is_int(bad, 0, "20000 forged tokens: %d decoded, each to SQL's page; the rest refused",
           accepted);

    /* Cursors at the edges. */
    ok(feed_page(f, GOOD, FEED_SCORE_MAX, INT64_MAX, 5, &res) == FEED_OK && res.count == 5 &&
       res.items[0].id == want[0].id, "cursor (2^53-1, INT64_MAX): the first page");
    feed_result_free(&res);
    ok(feed_page(f, GOOD, -FEED_SCORE_MAX, 0, 5, &res) == FEED_OK && res.count == 0 &&
       !res.has_more, "cursor (-(2^53-1), 0): an empty last page");
    feed_result_free(&res);
    is_int(feed_page(f, GOOD, FEED_SCORE_MAX + 1, 0, 5, &res), FEED_ERANGE,
           "cursor score 2^53: FEED_ERANGE");
    is_int(feed_page(f, GOOD, INT64_MIN, 0, 5, &res), FEED_ERANGE, "cursor score INT64_MIN: FEED_ERANGE");
    is_int(feed_page(f, GOOD, 0, -1, 5, &res), FEED_EINVAL, "cursor id -1: FEED_EINVAL");
    is_int(feed_cursor_decode("AAAAAAAAAAAAAAAAAAAAAAA\xff", &s, &id), FEED_EINVAL,
           "a token with a byte outside the alphabet: FEED_EINVAL");
    is_int(feed_cursor_decode("", &s, &id), FEED_EINVAL, "an empty token: FEED_EINVAL");
    ok(still_fine(f), "the feed still walks equal to SQL");
    free(want);
    feed_close(f);
}

int main(void)
{
    pg = tu_pg();
    r = tu_redis();
    tu_sql(pg, "SET client_min_messages = warning");
    tu_reset(pg, r);
    tu_insert_rows(pg, GOOD, 40, tu_score_pairs, tu_id_seq);

    odd_identifiers();
    injection_in_names();
    key_prefixes();
    wrong_types();
    bad_rows();
    extreme_uids();
    forged_cursors();

    PQfinish(pg);
    redisFree(r);
    return tap_done();
}
