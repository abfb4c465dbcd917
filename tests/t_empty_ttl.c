/* t_empty_ttl.c -- feeds known to be empty (a copy holding only the end
 * marker) get their own short TTL, empty_ttl_seconds, so probes for uids that
 * do not exist cannot fill Redis for days; real feeds keep ttl_seconds. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define PROBES    500
#define EMPTY_TTL 30            /* seconds */
#define LONG_TTL  604800

static PGconn *pg;
static redisContext *rds;

static long long pttl(int64_t uid) { return tu_redis_int(rds, "PTTL %s", tu_key(uid, "")); }

static feed *open_with(uint32_t ttl, uint32_t empty_ttl)
{
    feed_config cfg;

    tu_config(&cfg);
    cfg.ttl_seconds = ttl;
    cfg.empty_ttl_seconds = empty_ttl;
    return tu_open(&cfg);
}

static int first_page(feed *f, int64_t uid, size_t *count)
{
    feed_result r;
    int rc = feed_page(f, uid, FEED_FIRST, 0, 10, &r);

    *count = r.count;
    feed_result_free(&r);
    return rc;
}

static void probes(void)
{
    feed *f = open_with(LONG_TTL, EMPTY_TTL);
    feed_config dflt;
    size_t count, bad = 0, keys = 0, longer = 0;
    long long worst = 0;

    feed_config_init(&dflt);
    is_int(dflt.empty_ttl_seconds, 60, "empty_ttl_seconds defaults to 60");

    /* Two probes each: the first rebuilds (known empty), the second reads
     * the cached marker, which refreshes a first page's TTL. */
    for (int round = 0; round < 2; round++)
        for (int64_t uid = 900000; uid < 900000 + PROBES; uid++)
            bad += first_page(f, uid, &count) != FEED_OK || count != 0;
    for (int64_t uid = 900000; uid < 900000 + PROBES; uid++) {
        long long t = pttl(uid);
        keys += t != -2;
        longer += t < 0 || t > EMPTY_TTL * 1000LL;
        if (t > worst)
            worst = t;
    }
    is_int(bad, 0, "%d unknown uids probed twice: empty pages", PROBES);
    is_int(keys, PROBES, "  each left one key (the known-empty marker)");
    is_int(longer, 0, "  every key's PTTL <= %d s (largest %lld ms)", EMPTY_TTL, worst);

    /* A real feed keeps the long TTL. */
    tu_insert(pg, 910000, 5, 1);
    ok(first_page(f, 910000, &count) == FEED_OK && count == 1, "a real feed of 1 row");
    ok(pttl(910000) > (LONG_TTL - 60) * 1000LL, "  keeps ttl_seconds (%lld ms)", pttl(910000));

    /* An insert into a known-empty feed makes it real: the next first page
     * gives it the long TTL. */
    tu_insert(pg, 900000, 7, 70);
    is_int(feed_on_insert(f, 900000, 7, 70), FEED_OK, "insert into a known-empty feed");
    ok(first_page(f, 900000, &count) == FEED_OK && count == 1, "  its first page has the row");
    ok(pttl(900000) > (LONG_TTL - 60) * 1000LL, "  and the long TTL now (%lld ms)", pttl(900000));

    /* A delete that empties a complete feed shortens its TTL; one that
     * leaves items does not. */
    tu_insert(pg, 910000, 6, 2);
    feed_invalidate(f, 910000);
    first_page(f, 910000, &count);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 910000 AND id = 1");
    feed_on_delete(f, 910000, 1);
    ok(pttl(910000) > (LONG_TTL - 60) * 1000LL, "delete of 1 of 2 items: the long TTL stays");
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 910000");
    is_int(feed_on_delete(f, 910000, 2), FEED_OK, "delete of the last item");
    ok(pttl(910000) > 0 && pttl(910000) <= EMPTY_TTL * 1000LL,
       "  the feed is known empty now, with the short TTL (%lld ms)", pttl(910000));
    ok(first_page(f, 910000, &count) == FEED_OK && count == 0 &&
       pttl(910000) <= EMPTY_TTL * 1000LL, "  and reading it keeps that");

    /* feed_reload of an empty feed: short too. */
    freeReplyObject(tu_redis_cmd(rds, "DEL %s", tu_key(920000, "")));
    is_int(feed_reload(f, 920000), FEED_OK, "feed_reload of an empty feed");
    ok(pttl(920000) > 0 && pttl(920000) <= EMPTY_TTL * 1000LL, "  short TTL (%lld ms)",
       pttl(920000));
    feed_close(f);
}

static void settings(void)
{
    feed *f;
    size_t count;

    /* 0 = as long as a real feed. */
    f = open_with(1000, 0);
    first_page(f, 930000, &count);
    ok(pttl(930000) > 900 * 1000LL, "empty_ttl_seconds 0: an empty feed lives ttl_seconds (%lld ms)",
       pttl(930000));
    feed_close(f);

    /* Never longer than ttl_seconds. */
    f = open_with(20, 3600);
    first_page(f, 930001, &count);
    ok(pttl(930001) > 0 && pttl(930001) <= 20000, "empty_ttl_seconds above ttl_seconds: capped"
       " (%lld ms)", pttl(930001));
    feed_close(f);

    /* ttl_seconds 0 (real feeds never expire): empty ones still do. */
    f = open_with(0, EMPTY_TTL);
    first_page(f, 930002, &count);
    tu_insert(pg, 930003, 1, 1);
    first_page(f, 930003, &count);
    ok(pttl(930002) > 0 && pttl(930002) <= EMPTY_TTL * 1000LL,
       "ttl_seconds 0: an empty feed still expires (%lld ms)", pttl(930002));
    is_int(pttl(930003), -1, "  a real one does not");
    feed_close(f);
}

int main(void)
{
    pg = tu_begin(&rds);
    probes();
    settings();
    redisFree(rds);
    PQfinish(pg);
    return tap_done();
}
