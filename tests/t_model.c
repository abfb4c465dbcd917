/* t_model.c -- a randomized model test. PostgreSQL is the model: thousands
 * of random inserts, score changes, deletes, reloads, invalidations and TTL
 * expiries on a few feeds, each SQL write followed by its hook as an
 * application would do, and after every step a full walk through the
 * library, with a random page size, must equal SQL exactly.
 *
 * Seeds are fixed and printed; FEED_MODEL_SEED=n FEED_MODEL_STEPS=m replay
 * one run. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define FEEDS   4
#define MAX_LEN 12

static PGconn *pg;
static redisContext *r;
static uint64_t rng;

static int64_t pick(int64_t n) { return tu_rand_below(&rng, n); }

/* Ids from a small space (so rows come back), and some near INT64_MAX. */
static int64_t random_id(void)
{
    return pick(10) == 0 ? INT64_MAX - pick(5) : pick(60);
}

static int64_t existing_id(int64_t uid)
{
    long long n = tu_sql_int(pg, "SELECT count(*) FROM feed_entry WHERE uid = %lld", (long long)uid);

    if (n == 0)
        return -1;
    return tu_sql_int(pg, "SELECT id FROM feed_entry WHERE uid = %lld ORDER BY id OFFSET %lld LIMIT 1",
                      (long long)uid, (long long)pick(n));
}

static const char *step(feed *f, int64_t uid)
{
    int64_t id, score;

    switch (pick(12)) {
    case 0: case 1: case 2: case 3:            /* insert (or re-score if present) */
        id = random_id();
        score = tu_random_score(&rng);
        tu_insert(pg, uid, score, id);
        feed_on_insert(f, uid, score, id);
        return "insert";
    case 4: case 5:                            /* score change of an existing row */
        if ((id = existing_id(uid)) < 0)
            return "noop";
        score = tu_random_score(&rng);
        tu_sql(pg, "UPDATE feed_entry SET score = %lld WHERE uid = %lld AND id = %lld",
               (long long)score, (long long)uid, (long long)id);
        feed_on_insert(f, uid, score, id);
        return "rescore";
    case 6: case 7: case 8:                    /* delete */
        if ((id = existing_id(uid)) < 0)
            return "noop";
        tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld AND id = %lld", (long long)uid,
               (long long)id);
        feed_on_delete(f, uid, id);
        return "delete";
    case 9:
        feed_reload(f, uid);
        return "reload";
    case 10:
        feed_invalidate(f, uid);
        return "invalidate";
    default:                                   /* a real TTL expiry, by Redis */
        freeReplyObject(tu_redis_cmd(r, "PEXPIRE %s 1", tu_key(uid, "")));
        return "expire";
    }
}

static int run(uint64_t seed, int steps)
{
    feed_config cfg;
    feed *f;
    int failures = 0;
    size_t walks = 0, pages = 0;

    rng = seed;
    tu_config(&cfg);
    cfg.max_len = MAX_LEN;
    cfg.max_page = 8;
    f = tu_open(&cfg);
    for (int i = 0; i < steps && failures == 0; i++) {
        int64_t uid = 30 + pick(FEEDS);
        const char *what = step(f, uid);
        size_t limit = (size_t)(1 + pick(8));
        tu_walk_info info;

        if (!tu_walk_equals_sql(f, pg, uid, limit, &info)) {
            tap_diag("seed %llu step %d (%s on feed %lld): walk by %zu differs from SQL",
                     (unsigned long long)seed, i, what, (long long)uid, limit);
            failures++;
        }
        walks++;
        pages += info.pages;
    }
    tap_diag("seed %llu: %d steps, %zu walks, %zu pages checked, %d mismatches",
             (unsigned long long)seed, steps, walks, pages, failures);
    feed_close(f);
    return failures == 0;
}

int main(void)
{
    const char *seed_env = getenv("FEED_MODEL_SEED"), *steps_env = getenv("FEED_MODEL_STEPS");
    int steps = steps_env ? atoi(steps_env) : 1500;
    uint64_t seeds[] = { 1, 20261121, 0x5eed5eedULL };

    pg = tu_begin(&r);
    if (seed_env) {
        uint64_t s = strtoull(seed_env, NULL, 10);
        ok(run(s, steps), "seed %llu: every walk equals SQL", (unsigned long long)s);
    } else {
        for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++)
            ok(run(seeds[i], steps), "seed %llu: every walk equals SQL after each of %d steps",
               (unsigned long long)seeds[i], steps);
    }
    PQfinish(pg);
    redisFree(r);
    return tap_done();
}
