/* t_sync.c -- feedcache-sync against real servers: flags and fatal errors,
 * writes made with SQL only (no hook) reach the cache, TRUNCATE, a clean
 * stop and restart resumes where it confirmed, and a writer killed between
 * COMMIT and hook is repaired within a bounded time (reported). */
#include "synctest.h"

#define SLOT "t_sync"

static feed_config cfg;

/* Run the program to its end (flags that make it exit); its status. */
static int run_to_end(const char *slot, const char *const *extra)
{
    return st_sync_stop(st_sync_start(slot, extra), 0);
}

static int log_has(const char *slot, const char *text)
{
    char path[512], line[2048];
    FILE *in;
    int found = 0;

    snprintf(path, sizeof path, "%s/sync-%s.log", st_env("FEED_SERVERS_DIR", "/tmp"), slot);
    if (!(in = fopen(path, "r")))
        return 0;
    while (!found && fgets(line, sizeof line, in))
        found = strstr(line, text) != NULL;
    fclose(in);
    return found;
}

static void flags(void)
{
    const char *bogus[] = { "--bogus", NULL };
    const char *port[] = { "--redis-port", "0", NULL };
    const char *name[] = { "--publication", "Bad-Name", NULL };
    const char *num[] = { "--max-len", "12x", NULL };
    const char *help[] = { "--help", NULL };

    is_int(run_to_end("t_sync_flags", bogus), 2, "an unknown flag: exit 2");
    is_int(run_to_end("t_sync_flags", port), 2, "--redis-port 0: exit 2");
    is_int(run_to_end("t_sync_flags", name), 2, "a publication name outside [a-z0-9_]: exit 2");
    is_int(run_to_end("t_sync_flags", num), 2, "--max-len 12x: exit 2");
    is_int(run_to_end("t_sync_flags", help), 0, "--help: exit 0");
    ok(log_has("t_sync_flags", "--redis-port must be 1..65535"), "the reason is on stderr");
}

static void fatal_errors(PGconn *pg)
{
    char conninfo[600];
    const char *other[] = { "--publication", "t_sync_other", NULL };
    const char *weak[] = { "--pg-conninfo", conninfo, "--publication", "t_sync_weak", NULL };

    tu_sql(pg, "SET client_min_messages = warning");   /* no NOTICE on stderr */
    tu_sql(pg, "CREATE TABLE IF NOT EXISTS t_sync_other_table (x int)");
    tu_sql(pg, "DROP PUBLICATION IF EXISTS t_sync_other");
    tu_sql(pg, "CREATE PUBLICATION t_sync_other FOR TABLE t_sync_other_table");
    is_int(run_to_end("t_sync_pub", other), 1,
           "a publication that does not publish the table: exit 1");
    ok(log_has("t_sync_pub", "does not publish table"), "... and stderr says so");

    /* A role that may read the table (so feed_open works) but not create a
     * publication or a slot. */
    tu_sql(pg, "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = "
               "'t_sync_weak') THEN CREATE ROLE t_sync_weak LOGIN; END IF; END $$");
    tu_sql(pg, "GRANT SELECT ON feed_entry TO t_sync_weak");
    snprintf(conninfo, sizeof conninfo, "%s user=t_sync_weak", st_env("FEED_PG_CONNINFO", ""));
    is_int(run_to_end("t_sync_weak", weak), 1, "a role without the rights: exit 1");
    ok(log_has("t_sync_weak", "creating the publication") &&
       log_has("t_sync_weak", "permission denied"),
       "... and stderr names what it could not do and why");
    tu_sql(pg, "DROP PUBLICATION t_sync_other");
    tu_sql(pg, "DROP TABLE t_sync_other_table");
}

/* Walk equals SQL, quietly: 1 or 0. */
static int walk_same(feed *f, PGconn *pg, int64_t uid)
{
    feed_item *want, *got = NULL;
    size_t nwant = tu_sql_feed(pg, uid, &want), ngot = 0;
    tu_walk_info info;
    int same = tu_walk(f, uid, 7, &got, &ngot, &info) == FEED_OK && ngot == nwant;

    for (size_t i = 0; same && i < ngot; i++)
        same = got[i].score == want[i].score && got[i].id == want[i].id;
    free(want);
    free(got);
    return same;
}

static void all_right(feed *f, PGconn *pg, redisContext *r, int64_t from, int64_t to,
                      const char *what)
{
    int prefix = 1, walks = 1;

    for (int64_t uid = from; uid <= to; uid++)
        prefix &= st_copy_is_prefix(r, pg, uid);
    for (int64_t uid = from; uid <= to; uid++) {
        tu_walk_info info;
        walks &= tu_walk_equals_sql(f, pg, uid, 7, &info);
    }
    ok(prefix, "%s: every copy in Redis is an exact prefix of its SQL feed", what);
    ok(walks, "%s: every walk equals SQL", what);
}

static void warm(feed *f, int64_t from, int64_t to)
{
    for (int64_t uid = from; uid <= to; uid++) {
        feed_result res;
        if (feed_page(f, uid, FEED_FIRST, 0, 5, &res) == FEED_OK)
            feed_result_free(&res);
    }
}

static int cached(redisContext *r, int64_t uid)
{
    return tu_redis_int(r, "EXISTS %s", tu_key(uid, "")) == 1;
}

static void sql_only_writes(feed *f, PGconn *pg, redisContext *r)
{
    for (int64_t uid = 1; uid <= 6; uid++)
        tu_insert_rows(pg, uid, 30, tu_score_from1000, tu_id_seq);
    tu_sql(pg, "INSERT INTO feed_entry VALUES (4, 1200, 4000)");
    ok(st_caught_up(pg, SLOT, 30), "sync confirms the initial load");
    warm(f, 1, 6);
    ok(cached(r, 1) && cached(r, 6), "feeds 1..6 are cached");

    /* No hook for any of these: only the log can tell the cache. */
    tu_sql(pg, "INSERT INTO feed_entry VALUES (1, 99999, 500)");             /* new top */
    tu_sql(pg, "UPDATE feed_entry SET score = 88888 WHERE uid = 2 AND id = 3"); /* rescore */
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 3 AND id = 30");           /* top leaves */
    tu_sql(pg, "UPDATE feed_entry SET uid = 5, score = 77777 WHERE uid = 4 AND id = 4000");
    tu_sql(pg, "BEGIN; INSERT INTO feed_entry VALUES (6, 66666, 600);"
               " DELETE FROM feed_entry WHERE uid = 6 AND id = 1; COMMIT");
    ok(st_caught_up(pg, SLOT, 30), "sync confirms the SQL-only writes");
    ok(!cached(r, 1) && !cached(r, 2) && !cached(r, 3) && !cached(r, 4) &&
       !cached(r, 5) && !cached(r, 6),
       "insert, rescore, delete, owner change (both feeds), multi-row transaction: "
       "each touched copy dropped");
    all_right(f, pg, r, 1, 6, "after SQL-only writes");

    warm(f, 1, 6);
    tu_sql(pg, "TRUNCATE feed_entry");
    tu_sql(pg, "INSERT INTO feed_entry VALUES (1, 5, 5)");
    ok(st_caught_up(pg, SLOT, 30), "sync confirms a TRUNCATE");
    all_right(f, pg, r, 1, 6, "after TRUNCATE and an insert");
    ok(st_metric(SLOT, "feedcache_sync_truncates_total") >= 0, "the metrics file is written");
}

static void restart(feed *f, PGconn *pg, redisContext *r, pid_t *pid)
{
    const char *lease[] = { "--lease-ms", "500", NULL };
    char before[32];

    for (int64_t uid = 10; uid <= 14; uid++)
        tu_insert_rows(pg, uid, 20, tu_score_from1000, tu_id_seq);
    /* The last of our writes, with a position inside its transaction: the
     * slot is past it once that commit is confirmed. The position after the
     * commit would not do: other tests' databases share the WAL, and what
     * they write after our commit the sync need not have confirmed. */
    tu_sql(pg, "BEGIN");
    tu_sql(pg, "INSERT INTO feed_entry VALUES (10, 44444, 901)");
    st_wal_now(pg, before, sizeof before);
    tu_sql(pg, "COMMIT");
    ok(st_wait_confirmed(pg, SLOT, before, 30) >= 0, "caught up before the stop");
    is_int(st_sync_stop(*pid, SIGTERM), 0, "SIGTERM: exit 0");
    ok(st_wait_confirmed(pg, SLOT, before, 0.1) >= 0,
       "after the stop the slot has confirmed everything applied");
    warm(f, 10, 14);

    /* Written while no sync runs: the slot keeps them. */
    for (int64_t uid = 10; uid <= 14; uid++)
        tu_sql(pg, "INSERT INTO feed_entry VALUES (%lld, 55555, 900)", (long long)uid);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 12");
    *pid = st_sync_start(SLOT, lease);
    ok(st_caught_up(pg, SLOT, 30), "restarted, it catches up");
    all_right(f, pg, r, 10, 14, "writes made while it was stopped");
}

/* A writer that commits and dies before its hook: the copy stays stale
 * without sync (for the whole TTL), and is repaired with it. */
static pid_t commit_and_die(int64_t uid, int64_t score, int64_t id)
{
    pid_t pid;
    int status;

    fflush(stdout);
    if ((pid = fork()) == 0) {
        PGconn *w = PQconnectdb(st_env("FEED_PG_CONNINFO", ""));
        char sql[200];
        snprintf(sql, sizeof sql, "INSERT INTO feed_entry VALUES (%lld, %lld, %lld)",
                 (long long)uid, (long long)score, (long long)id);
        PQclear(PQexec(w, sql));
        raise(SIGKILL);            /* committed; feed_on_insert never runs */
        _exit(0);
    }
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/* Walk uid every millisecond until the walk equals SQL: the seconds that
 * took, or -1 after 30 s. */
static double seconds_until_right(feed *f, PGconn *pg, int64_t uid)
{
    double start = st_now();

    while (st_now() - start < 30) {
        if (walk_same(f, pg, uid))
            return st_now() - start;
        st_sleep_ms(1);
    }
    return -1;
}

static void killed_writer(feed *f, PGconn *pg, redisContext *r, pid_t *pid)
{
    const char *lease[] = { "--lease-ms", "500", NULL };
    double took;

    tu_insert_rows(pg, 20, 40, tu_score_from1000, tu_id_seq);
    ok(st_caught_up(pg, SLOT, 30), "caught up");

    /* Without sync: stale. */
    is_int(st_sync_stop(*pid, SIGTERM), 0, "sync stopped");
    warm(f, 20, 20);
    ok(commit_and_die(20, 1000000, 7000), "a writer commits and is SIGKILLed before its hook");
    st_sleep_ms(1000);
    ok(!walk_same(f, pg, 20), "without sync the cached feed stays stale (1 s later)");

    /* With sync: repaired. */
    *pid = st_sync_start(SLOT, lease);
    ok(commit_and_die(20, 1000001, 7001), "another writer dies the same way, sync running");
    took = seconds_until_right(f, pg, 20);
    ok(took >= 0, "with sync every walk of that feed equals SQL within 30 s");
    tap_diag("killed writer: the walk equalled SQL %.1f ms after the writer died "
             "(sync restarted just before)", took * 1000);

    warm(f, 20, 20);
    ok(commit_and_die(20, 1000002, 7002), "and once more, sync warm");
    took = seconds_until_right(f, pg, 20);
    ok(took >= 0, "repaired again");
    tap_diag("killed writer, sync warm: the walk equalled SQL %.1f ms after the writer died",
             took * 1000);
    all_right(f, pg, r, 20, 20, "after killed writers");
}

/* The copy of uid's feed in the partitioned table below. */
static const char *part_key(int64_t uid)
{
    feed_config part;

    tu_config(&part);
    part.key_prefix = "tsp";
    part.table = "t_sync_part";
    return tu_key_cfg(&part, FEED_FAM_FEED, uid, "");
}

/* A handle on the partitioned table below, made to see the fence's sweep
 * or flush of every node end (tu_settle), then closed. */
static void part_settle(void)
{
    feed_config part;

    tu_config(&part);
    part.key_prefix = "tsp";
    part.table = "t_sync_part";
    feed_close(tu_open_settled(&part));
}

/* A partitioned table: its changes must carry the table's name (the
 * publication publishes via the root), or no copy would ever be dropped. */
static void partitioned(PGconn *pg, redisContext *r)
{
    const char *flags[] = { "--table", "t_sync_part", "--publication", "t_sync_part",
                            "--key-prefix", "tsp", "--lease-ms", "300", NULL };
    long long left = 0;
    pid_t pid;

    tu_sql(pg, "CREATE TABLE t_sync_part (uid bigint NOT NULL, score bigint NOT NULL,"
               " id bigint NOT NULL, PRIMARY KEY (uid, id)) PARTITION BY HASH (uid)");
    tu_sql(pg, "CREATE TABLE t_sync_part_0 PARTITION OF t_sync_part"
               " FOR VALUES WITH (MODULUS 2, REMAINDER 0)");
    tu_sql(pg, "CREATE TABLE t_sync_part_1 PARTITION OF t_sync_part"
               " FOR VALUES WITH (MODULUS 2, REMAINDER 1)");
    /* The restart fence's flush of each node for this prefix done first,
     * by a handle of the test's own (its end is written in the nodes'
     * fence keys, which feedcache-sync's handle then finds): else, on a
     * cluster, sync's handle may still be flushing a node (a SCAN through
     * every key the set holds, slow under the sanitizers) when the copies
     * below are planted, and drop feed 4's with the rest. */
    part_settle();
    pid = st_sync_start("t_sync_part", flags);
    /* Its first run drops every copy under the prefix: wait for it. */
    ok(st_wait_following("t_sync_part", 30), "a partitioned table: sync starts");
    for (int uid = 1; uid <= 4; uid++)
        freeReplyObject(tu_redis_cmd(r, "ZADD %s 1 x", part_key(uid)));
    tu_sql(pg, "INSERT INTO t_sync_part VALUES (1, 1, 1), (2, 2, 2), (3, 3, 3)");
    ok(st_caught_up(pg, "t_sync_part", 30), "... and confirms the inserts");
    for (int uid = 1; uid <= 4; uid++)     /* one key a command: a cluster's slots differ */
        left += tu_redis_int(r, "EXISTS %s", part_key(uid));
    is_int(left, 1, "the copies of feeds 1, 2, 3 (rows in both partitions) are dropped, "
           "feed 4's is not");
    is_int(st_sync_stop(pid, SIGTERM), 0, "stopped");
    st_drop_slot(pg, "t_sync_part");
    tu_sql(pg, "DROP PUBLICATION t_sync_part");
    tu_sql(pg, "DROP TABLE t_sync_part");
}

static int author_cached(redisContext *r, int64_t author)
{
    redisReply *rep = tu_redis_cmd(r, "EXISTS %s", tu_author_key_of("feed", author, ""));
    int yes = rep->integer == 1;

    freeReplyObject(rep);
    return yes;
}

/* A merged walk (uid 30 with authors 1..5) equals SQL's UNION. */
static int merged_walk_same(feed *f, PGconn *pg)
{
    static const int64_t authors[5] = { 1, 2, 3, 4, 5 };
    PGresult *res = PQexec(pg, "SELECT score, id FROM feed_entry WHERE uid = 30 UNION"
                               " SELECT score, id FROM author_post WHERE author BETWEEN 1 AND 5"
                               " ORDER BY score DESC, id DESC");
    int64_t score = FEED_FIRST, id = 0;
    int n = PQntuples(res), at = 0, same = 1;

    while (same) {
        feed_result page;
        if (feed_page_merged(f, 30, authors, 5, score, id, 7, &page) != FEED_OK) {
            tap_diag("feed_page_merged: %s", feed_errmsg(f));
            same = 0;
            break;
        }
        for (size_t i = 0; same && i < page.count; i++, at++)
            same = at < n && page.items[i].score == strtoll(PQgetvalue(res, at, 0), NULL, 10) &&
                   page.items[i].id == strtoll(PQgetvalue(res, at, 1), NULL, 10);
        if (!page.has_more) {
            feed_result_free(&page);
            break;
        }
        score = page.next_score;
        id = page.next_id;
        feed_result_free(&page);
    }
    if (same && at != n)
        same = 0;
    if (!same)
        tap_diag("merged walk differs from SQL at item %d of %d", at, n);
    PQclear(res);
    return same;
}

static void warm_merged(feed *f)
{
    static const int64_t authors[5] = { 1, 2, 3, 4, 5 };
    feed_result page;

    if (feed_page_merged(f, 30, authors, 5, FEED_FIRST, 0, 7, &page) == FEED_OK)
        feed_result_free(&page);
}

/* The authors' table of read-time merge (--author-table): writes made with
 * SQL alone drop the authors' copies they touched, a TRUNCATE drops them
 * all, and the feeds' copies are left alone. */
static void authors_table(PGconn *pg, redisContext *r)
{
    const char *flags[] = { "--author-table", "author_post", "--publication", "t_sync_authors",
                            "--lease-ms", "500", NULL };
    const char *lacking[] = { "--author-table", "author_post", "--publication", "t_sync_feeds",
                              NULL };
    /* "" for --author-table is none (feed_config_set), as for every field
     * where NULL means none; the author column must be named. */
    const char *empty[] = { "--author-table", "author_post", "--author-column", "", NULL };
    feed_config c;
    feed *f;
    pid_t pid;
    int all_cached = 1;

    tu_config(&c);
    c.author_table = "author_post";
    c.lease_ms = 500;
    f = tu_open(&c);
    is_int(run_to_end("t_sync_authors", empty), 2, "--author-column \"\": exit 2");
    tu_sql(pg, "SET client_min_messages = warning");
    tu_sql(pg, "DROP PUBLICATION IF EXISTS t_sync_feeds");
    tu_sql(pg, "CREATE PUBLICATION t_sync_feeds FOR TABLE feed_entry");
    is_int(run_to_end("t_sync_feeds", lacking), 1,
           "a publication without the authors' table: exit 1");
    ok(log_has("t_sync_feeds", "does not publish table \"author_post\""), "  and stderr says so");
    st_drop_slot(pg, "t_sync_feeds");
    tu_sql(pg, "DROP PUBLICATION t_sync_feeds");

    tu_sql(pg, "TRUNCATE author_post");
    pid = st_sync_start("t_sync_authors", flags);
    ok(st_wait_following("t_sync_authors", 30) && st_caught_up(pg, "t_sync_authors", 30),
       "sync follows the feed table and the authors' table (a publication of both)");
    for (int64_t a = 1; a <= 5; a++)
        for (int j = 0; j < 12; j++)
            tu_sql(pg, "INSERT INTO author_post VALUES (%lld, %lld, %lld)", (long long)a,
                   (long long)(1000 + 10 * j + a), (long long)(100 * a + j));
    tu_insert_rows(pg, 30, 20, tu_score_from1000, tu_id_seq);
    ok(st_caught_up(pg, "t_sync_authors", 30), "  confirms the posts");
    warm_merged(f);
    ok(author_cached(r, 1) && author_cached(r, 5) && cached(r, 30),
       "a merged page cached the 5 authors' copies and the reader's feed");

    /* No hook for any of these: only the log tells the cache. */
    tu_sql(pg, "INSERT INTO author_post VALUES (1, 99999, 9000)");                /* new top */
    tu_sql(pg, "UPDATE author_post SET score = 88888 WHERE author = 2 AND id = 203"); /* rescore */
    tu_sql(pg, "DELETE FROM author_post WHERE author = 3 AND id = 311");           /* top leaves */
    tu_sql(pg, "UPDATE author_post SET author = 5 WHERE author = 4 AND id = 411"); /* moves */
    ok(st_caught_up(pg, "t_sync_authors", 30), "  confirms SQL-only writes to author_post");
    ok(!author_cached(r, 1) && !author_cached(r, 2) && !author_cached(r, 3) &&
       !author_cached(r, 4) && !author_cached(r, 5),
       "insert, rescore, delete, author change (both authors): each touched copy dropped");
    ok(cached(r, 30), "  the reader's feed, untouched, stays cached");
    ok(merged_walk_same(f, pg), "  a merged walk equals SQL");
    for (int64_t a = 1; a <= 5; a++)
        all_cached &= author_cached(r, a);
    ok(all_cached, "  and cached every author again");

    tu_sql(pg, "TRUNCATE author_post");
    tu_sql(pg, "INSERT INTO author_post VALUES (2, 5, 5)");
    ok(st_caught_up(pg, "t_sync_authors", 30), "sync confirms a TRUNCATE of author_post");
    ok(!author_cached(r, 1) && !author_cached(r, 5) && cached(r, 30),
       "  every author's copy dropped, the feeds' kept");
    ok(merged_walk_same(f, pg), "  a merged walk equals SQL");
    ok(st_metric("t_sync_authors", "feedcache_sync_authors_invalidated_total") >= 5,
       "  the metrics count the authors invalidated (%lld)",
       st_metric("t_sync_authors", "feedcache_sync_authors_invalidated_total"));
    is_int(st_sync_stop(pid, SIGTERM), 0, "stopped");
    st_drop_slot(pg, "t_sync_authors");
    tu_sql(pg, "DROP PUBLICATION t_sync_authors");
    tu_sql(pg, "TRUNCATE author_post");
    feed_close(f);
}

int main(void)
{
    const char *lease[] = { "--lease-ms", "500", NULL };
    redisContext *r;
    PGconn *pg = tu_begin(&r);
    feed *f;
    pid_t pid;

    tu_config(&cfg);
    cfg.lease_ms = 500;
    f = tu_open(&cfg);
    st_drop_slot(pg, SLOT);

    flags();
    fatal_errors(pg);

    pid = st_sync_start(SLOT, lease);
    ok(st_wait_following(SLOT, 30) && st_caught_up(pg, SLOT, 30), "sync starts and creates its slot");
    sql_only_writes(f, pg, r);
    restart(f, pg, r, &pid);
    killed_writer(f, pg, r, &pid);
    partitioned(pg, r);

    is_int(st_sync_stop(pid, SIGINT), 0, "SIGINT: exit 0");
    ok(st_metric(SLOT, "feedcache_sync_transactions_total") > 0,
       "the metrics file counts the transactions applied");
    st_drop_slot(pg, SLOT);
    authors_table(pg, r);
    feed_close(f);
    redisFree(r);
    PQfinish(pg);
    return tap_done();
}
