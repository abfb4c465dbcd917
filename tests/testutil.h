/* testutil.h -- what the C tests share: connections to the throwaway test
 * servers (tests/run.sh exports where they are), SQL set-up, and full walks
 * compared with SQL. Every helper that cannot do its job bails out: a test
 * that cannot reach its servers must fail, not pass quietly. */
#ifndef FEED_TESTUTIL_H
#define FEED_TESTUTIL_H

#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "feedcache.h"

/* 1 when the tests run against the Redis Cluster (FEED_TEST_CLUSTER=1,
 * seeds in FEED_REDIS_CLUSTER): tu_config then sets redis_cluster, and
 * tu_redis_cmd follows the key to its node. */
int tu_cluster(void);
/* For a test whose faults, ACLs or controls act on the single Redis of a
 * plain run: under the cluster it prints a TAP skip naming itself and exits 0. */
void tu_plain_redis_only(const char *test);

/* Defaults plus the test servers from the environment. */
void tu_config(feed_config *cfg);
feed *tu_open(const feed_config *cfg);          /* bails on failure; NULL: tu_config's */

/* tu_open with tu_config's settings changed by set: a test's own max_len,
 * timeouts, ... in one function, for every handle the test opens. */
feed *tu_open_with(void (*set)(feed_config *cfg));

/* Make f's first Redis calls now, so that what a test measures or plants
 * afterwards starts from a running handle. On a new connection the restart
 * fence (on by default) sweeps, in the background, every key under the
 * prefix but the current generation's unless the fence key names the live
 * server, and after tu_reset's FLUSHALL there is no such key: a key a test
 * plants in another form would be dropped, and a handle's calls cost a
 * round trip more now and then while the sweep lasts. feed_invalidate of an
 * unused uid per node reached (64 uids on a cluster: their slots fall on
 * every node), again until f has seen every sweep end (fence_sweeps equal
 * to fence_flushes, at most 30 s); bails if Redis does not answer. */
void tu_settle(feed *f);
feed *tu_open_settled(const feed_config *cfg);
/* On a Redis Cluster a read also checks the fence of its slot, and drops
 * the slot's keys when that fence does not name the node: one page of an
 * unused uid in uid's slot (then dropped), so that a key a test plants for
 * uid afterwards is not dropped by f's first read of uid. Costs f one
 * rebuild and one SQL query there (its stats say so); nothing elsewhere. */
void tu_settle_feed(feed *f, int64_t uid);

PGconn *tu_pg(void);
void tu_sql(PGconn *pg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
long long tu_sql_int(PGconn *pg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
redisContext *tu_redis(void);
redisReply *tu_redis_cmd(redisContext *r, const char *fmt, ...);
/* A command whose reply is an integer (EXISTS, ZCARD, PTTL, ...): the
 * integer; bails on any other reply. */
long long tu_redis_int(redisContext *r, const char *fmt, ...);

/* Empty the table and the Redis database. */
void tu_reset(PGconn *pg, redisContext *r);

/* A test's start: connect to both servers and empty them. Returns the
 * PostgreSQL connection; the Redis one goes to *r, or is closed when r is
 * NULL. */
PGconn *tu_begin(redisContext **r);

/* uid's whole feed from SQL, in order; *out is malloc'd. */
size_t tu_sql_feed(PGconn *pg, int64_t uid, feed_item **out);

/* 1 when r is SQL's page of uid after (score, id) (FEED_FIRST: the first
 * page) of at most limit items, has_more included; otherwise 0 and a
 * diagnostic. *next_at, if not NULL, gets the index in SQL's order of the
 * item after r's last one. */
int tu_page_equals_sql(PGconn *pg, int64_t uid, int64_t score, int64_t id, size_t limit,
                       const feed_result *r, size_t *next_at);

/* Walk uid's whole feed through feed_page with page size limit. Checks that
 * each page is strictly ordered, continues its cursor and has_more agrees.
 * Returns FEED_OK or the failing rc (or -100 for a broken page, with why). */
typedef struct tu_walk_info {
    size_t pages;
    int    sources[4];       /* pages by feed_source */
    char   why[256];
} tu_walk_info;
int tu_walk(feed *f, int64_t uid, size_t limit, feed_item **out, size_t *n,
            tu_walk_info *info);

/* 1 when the walk equals SQL's feed; otherwise 0 and a diagnostic. */
int tu_walk_equals_sql(feed *f, PGconn *pg, int64_t uid, size_t limit,
                       tu_walk_info *info);

/* Walks with page sizes 1, 2, 3, 4, 7 and 20, each equal to SQL: a gap in
 * the cache shows only on pages that span it. */
int tu_walks_equal_sql(feed *f, PGconn *pg, int64_t uid);

/* Insert n rows for uid with score = score_of(i), id = id_of(i), in one
 * statement per 1000 rows. */
void tu_insert_rows(PGconn *pg, int64_t uid, size_t n,
                    int64_t (*score_of)(size_t), int64_t (*id_of)(size_t));
void tu_insert(PGconn *pg, int64_t uid, int64_t score, int64_t id);

/* Row i of a feed, for tu_insert_rows. Ids: tu_id_seq, 1, 2, 3, ...
 * Scores: tu_score_by10, 10, 20, 30, ... (distinct, rising with the id);
 * tu_score_desc, 100000, 99990, ... (distinct, falling as the id rises);
 * tu_score_from1000, 1000, 1010, 1020, ...; tu_score_pairs, 0, 0, 3, 3,
 * 6, ... (two rows per score); tu_score_same, TU_SCORE_SAME for every row
 * (one tie group, ordered by id alone). */
#define TU_SCORE_SAME 777
int64_t tu_id_seq(size_t i);
int64_t tu_score_by10(size_t i);
int64_t tu_score_desc(size_t i);
int64_t tu_score_from1000(size_t i);
int64_t tu_score_pairs(size_t i);
int64_t tu_score_same(size_t i);

/* splitmix64: reproducible pseudo-random numbers for tests; the state is the
 * caller's (print the seed, so a failure can be replayed). */
uint64_t tu_rand(uint64_t *state);
/* A number in [0, n), n > 0, from tu_rand. */
int64_t tu_rand_below(uint64_t *state, int64_t n);
/* A random score for randomized tests: mostly one of a few values (ties are
 * common), now and then within 2 of either end of the score range. */
int64_t tu_random_score(uint64_t *state);

/* How the library names and stores things in Redis, for tests that look
 * inside it. tu_key: uid's sorted set under the default prefix ("feed") and
 * table (feed_entry), tu_key_of under another prefix, tu_key_cfg for cfg's prefix, table
 * and columns, in family fam (FEED_FAM_FEED: a reader's feed,
 * FEED_FAM_AUTHOR: an author's posts); suffix is appended (":lease", or "";
 * ":authors" names the author index of filtered pages). With the restart
 * fence (the default) a key names the data set it lives in (base.h): each
 * call asks cfg's Redis (tu_key, tu_key_of: the run's, as tu_config) which
 * one holds owner's keys now, so name a key again after a restart or a
 * failover. The result lives in one of 8 static buffers, reused in turn. tu_member: id's member into
 * buf (FEED_MEMBER_MAX bytes); returns its length (send it with %b: a
 * member may hold NUL bytes). */
const char *tu_key(int64_t uid, const char *suffix);
const char *tu_key_of(const char *prefix, int64_t uid, const char *suffix);
const char *tu_key_cfg(const feed_config *cfg, int fam, int64_t owner, const char *suffix);
/* The same key in generation gen (FEED_KEY_GEN_LEN characters): a copy
 * written in another data set, before a restart or a failover. */
const char *tu_key_gen(const feed_config *cfg, int fam, int64_t owner, const char *suffix,
                       const char *gen);
/* Another handle's rebuild, granted now and alive for 10 s: the lease's
 * form (lua/page.lua) with token in it. */
void tu_plant_lease(redisContext *r, const char *lease_key, const char *token);
/* An author's copy under prefix, of the tests' authors' table (author_post). */
const char *tu_author_key_of(const char *prefix, int64_t author, const char *suffix);
size_t tu_member(int64_t id, char *buf);

/* Counters moved since a snapshot. */
feed_stats tu_stats_since(feed *f, const feed_stats *before);

/* ha tests: a connection to one Redis on 127.0.0.1:port (a cluster node:
 * no redirect followed), bails if it cannot; and paging uid's first page
 * until one comes from Redis (cache or rebuild), i.e. the handle found the
 * (new) primary: 0 when none did within ms. */
redisContext *tu_redis_at(int port);
int tu_reach_redis(feed *f, int64_t uid, size_t limit, int ms);

#include "shim.h"   /* last: the tests' calls, maybe through the async API */

#endif
