/* t_invalidate.c -- feed_invalidate_many and feed_invalidate_all, what
 * feedcache-sync applies: exactly the named feeds (copies and leases) go,
 * nothing else; a prefix with glob characters matches only itself; bad
 * arguments; and a read after the drop rebuilds from SQL. On a Redis
 * Cluster (t_invalidate:cluster) also: slots moved between two nodes of
 * feed_invalidate_all's scan (which SCAN alone would miss) are dropped too,
 * and a primary killed mid-scan fails the call until a replica took over. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"   /* test_after_node_scan */
#include "tap.h"
#include "testutil.h"

static long long exists(redisContext *r, const char *key)
{
    return tu_redis_int(r, "EXISTS %s", key);
}

static void set(redisContext *r, const char *key)
{
    freeReplyObject(tu_redis_cmd(r, "SET %s x", key));
}

static void servers(const char *what)
{
    char cmd[1024];
    const char *bin = getenv("FEED_SERVERS"), *dir = getenv("FEED_SERVERS_DIR");

    snprintf(cmd, sizeof cmd, "%s %s %s >/dev/null", bin ? bin : "tools/servers.sh", what,
             dir ? dir : "/tmp");
    if (system(cmd) != 0)
        tap_bail("servers.sh failed");
}

/* servers.sh CMD DIR [ARGS]: its exit status. */
static int srv(const char *what, const char *args)
{
    char cmd[1024];
    const char *bin = getenv("FEED_SERVERS"), *dir = getenv("FEED_SERVERS_DIR");

    snprintf(cmd, sizeof cmd, "'%s' %s '%s' %s >/dev/null", bin ? bin : "tools/servers.sh",
             what, dir ? dir : "/tmp", args);
    fflush(stdout);
    return system(cmd);
}

/* A live primary of the cluster other than port `not`, or 0. */
static int other_primary(int not)
{
    const char *bin = getenv("FEED_SERVERS"), *dir = getenv("FEED_SERVERS_DIR");
    char line[1024], role[32];
    int port, found = 0;
    FILE *p;

    snprintf(line, sizeof line, "'%s' cluster-ports '%s'", bin ? bin : "tools/servers.sh",
             dir ? dir : "/tmp");
    if (!(p = popen(line, "r")))
        return 0;
    while (fgets(line, sizeof line, p))
        if (!found && sscanf(line, "%d %31s", &port, role) == 2 && port != not &&
            strcmp(role, "master") == 0)
            found = port;
    pclose(p);
    return found;
}

#define MANY 3000   /* copies spread over every primary */

static void fill(redisContext *r)
{
    for (int64_t uid = 1; uid <= MANY; uid++)
        freeReplyObject(tu_redis_cmd(r, "SET %s x", tu_key(uid, "")));
}

static int left(redisContext *r)
{
    int n = 0;

    for (int64_t uid = 1; uid <= MANY; uid++)
        n += (int)exists(r, tu_key(uid, ""));
    return n;
}

/* test_after_node_scan: what happens between two nodes of one scan. */
typedef struct between {
    const char *what;       /* "migrating", "reshard" or "kill" */
    int         calls, done, victim, slot;
} between;

static redisReply *at(int port, const char *fmt, const char *arg)
{
    redisContext *c = redisConnect("127.0.0.1", port);
    redisReply *rep = c && !c->err ? redisCommand(c, fmt, arg) : NULL;

    if (!rep)
        tap_bail("a Redis node does not answer");
    redisFree(c);
    return rep;
}

/* Mark the first slot of primary `from` MIGRATING to node `to`, moving no
 * key: CLUSTER NODES then shows "[slot->-id]" on from's own line. Returns
 * the slot, or -1. */
static int set_migrating(int from, int to)
{
    redisReply *nodes = at(from, "CLUSTER NODES", NULL), *id = at(to, "CLUSTER MYID", NULL);
    const char *me = strstr(nodes->str, "myself"), *range = me ? strstr(me, "connected ") : NULL;
    int slot = range ? atoi(range + strlen("connected ")) : -1;
    char cmd[128];

    if (slot >= 0) {
        snprintf(cmd, sizeof cmd, "CLUSTER SETSLOT %d MIGRATING %%s", slot);
        redisReply *rep = at(from, cmd, id->str);
        if (rep->type == REDIS_REPLY_ERROR)
            slot = -1;
        freeReplyObject(rep);
    }
    freeReplyObject(nodes);
    freeReplyObject(id);
    return slot;
}

static void after_node(feed *f, int port, void *arg)
{
    between *b = arg;
    char args[64];

    (void)f;
    b->calls++;
    if (b->done)
        return;
    b->done = 1;
    b->victim = other_primary(port);
    if (!b->victim)
        return;
    if (strcmp(b->what, "migrating") == 0) {
        b->slot = set_migrating(b->victim, port);
    } else if (strcmp(b->what, "reshard") == 0) {
        /* Slots of a node not yet scanned go to the one just scanned: their
         * keys leave before the scan reaches them and arrive where it has
         * been. SCAN alone misses them. */
        snprintf(args, sizeof args, "%d %d 300", b->victim, port);
        if (srv("cluster-reshard", args) != 0)
            b->victim = 0;
    } else {
        snprintf(args, sizeof args, "%d", b->victim);
        if (srv("cluster-kill", args) != 0)
            b->victim = 0;
    }
}

/* The cluster's own cases (see the top). */
static void cluster_moves(feed_config *cfg, redisContext *r)
{
    between b = { "migrating", 0, 0, 0, -1 };
    uint64_t dropped = 0;
    feed *h = tu_open(cfg);
    char args[32];
    int rc;

    fill(r);
    h->core.test_after_node_scan = after_node;
    h->core.test_arg = &b;
    rc = feed_invalidate_all(h, NULL);
    ok(b.slot >= 0 && rc == FEED_EREDIS && strstr(feed_errmsg(h), "slots moved"),
       "a slot left migrating during the scan: FEED_EREDIS (%s)", feed_errmsg(h));
    is_int(b.calls, 9, "... after three scans of every primary");
    if (b.slot >= 0) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "CLUSTER SETSLOT %d STABLE", b.slot);
        freeReplyObject(at(b.victim, cmd, NULL));
    }
    b = (between){ "reshard", 0, 0, 0, -1 };
    fill(r);
    is_int(feed_invalidate_all(h, &dropped), FEED_OK,
           "slots resharded between two nodes of the scan: FEED_OK");
    ok(b.victim > 0, "... 300 slots moved from primary %d to the node scanned first", b.victim);
    is_int(left(r), 0, "... and not one of %d copies survives", MANY);
    ok(dropped >= MANY, "... dropped counts them all (%llu)", (unsigned long long)dropped);
    ok(b.calls > 3, "... because every primary was scanned again (%d node scans)", b.calls);

    fill(r);
    b = (between){ "kill", 0, 0, 0, -1 };
    rc = feed_invalidate_all(h, NULL);
    ok(b.victim > 0 && rc == FEED_EREDIS,
       "a primary SIGKILLed before its turn in the scan: FEED_EREDIS (%s)", feed_errmsg(h));
    ok(srv("cluster-wait", "") == 0, "a replica takes over");
    h->core.test_after_node_scan = NULL;
    rc = feed_invalidate_all(h, NULL);
    for (int i = 0; i < 50 && rc != FEED_OK; i++) {   /* retry_ms, the map settling */
        nanosleep(&(struct timespec){ 0, 100 * 1000000L }, NULL);
        rc = feed_invalidate_all(h, NULL);
    }
    is_int(rc, FEED_OK, "called again after the failover: FEED_OK");
    is_int(left(r), 0, "... and not one copy survives");
    snprintf(args, sizeof args, "%d", b.victim);
    srv("cluster-restart", args);
    srv("cluster-wait", "");
    feed_close(h);
}

int main(void)
{
    redisContext *r;
    PGconn *pg = tu_begin(&r);
    feed_config cfg;
    feed *f, *g;
    int64_t uids[3] = { 1, 3, 3 };
    uint64_t dropped = 99;
    char other_table_key[256];

    tu_config(&cfg);
    f = tu_open(&cfg);
    for (int64_t uid = 1; uid <= 4; uid++) {
        feed_result res;
        tu_insert_rows(pg, uid, 5, tu_score_by10, tu_id_seq);
        is_int(feed_page(f, uid, FEED_FIRST, 0, 2, &res), FEED_OK, "feed %lld cached", (long long)uid);
        feed_result_free(&res);
    }
    set(r, tu_key(1, ":lease"));
    set(r, tu_key(2, ":lease"));

    is_int(feed_invalidate_many(f, uids, 3), FEED_OK, "feed_invalidate_many of 1, 3, 3");
    ok(!exists(r, tu_key(1, "")) && !exists(r, tu_key(1, ":lease")) && !exists(r, tu_key(3, "")),
       "feeds 1 and 3 dropped, with the lease");
    ok(exists(r, tu_key(2, "")) && exists(r, tu_key(2, ":lease")) && exists(r, tu_key(4, "")),
       "feeds 2 and 4 (and 2's lease) untouched");
    is_int(feed_invalidate_many(f, uids, 3), FEED_OK, "again: idempotent");
    is_int(feed_invalidate_many(f, NULL, 0), FEED_OK, "n = 0 is a no-op");
    is_int(feed_invalidate_many(f, NULL, 2), FEED_EINVAL, "uids NULL with n > 0: FEED_EINVAL");
    is_int(feed_invalidate_many(NULL, uids, 1), FEED_EINVAL, "f NULL: FEED_EINVAL");

    tu_insert(pg, 1, 999, 77);   /* no hook: the drop is what lets a read see it */
    tu_walk_info info;
    ok(tu_walk_equals_sql(f, pg, 1, 3, &info), "after the drop a walk rebuilds from SQL");

    /* feed_invalidate_all: only this prefix, its copies and leases. */
    set(r, tu_key_of("feedx", 1, ""));
    set(r, tu_key_of("other", 1, ""));
    set(r, tu_key(5, ":lease"));
    {
        feed_config t = cfg;
        t.table = "other_table";
        snprintf(other_table_key, sizeof other_table_key, "%s", tu_key_cfg(&t, FEED_FAM_FEED, 1, ""));
    }
    set(r, other_table_key);
    is_int(feed_invalidate_all(f, &dropped), FEED_OK, "feed_invalidate_all");
    ok(!exists(r, tu_key(1, "")) && !exists(r, tu_key(2, "")) && !exists(r, tu_key(2, ":lease")) &&
       !exists(r, tu_key(4, "")) && !exists(r, tu_key(5, ":lease")), "every copy and lease of prefix feed gone");
    ok(exists(r, tu_key_of("feedx", 1, "")) && exists(r, tu_key_of("other", 1, "")), "keys of other prefixes kept");
    ok(exists(r, other_table_key), "  and the copies of another table on the same prefix");
    ok(dropped >= 4, "dropped counts the keys removed (%llu)", (unsigned long long)dropped);

    /* A prefix with glob characters matches itself only. */
    cfg.key_prefix = "f*";
    g = tu_open(&cfg);
    set(r, tu_key_of("f*", 1, ""));
    set(r, tu_key_of("fa", 1, ""));
    is_int(feed_invalidate_all(g, NULL), FEED_OK, "feed_invalidate_all with prefix f*");
    ok(!exists(r, tu_key_of("f*", 1, "")) && exists(r, tu_key_of("fa", 1, "")) && exists(r, tu_key_of("feedx", 1, "")),
       "prefix f* drops the copy of f* only, not of fa or feedx");
    is_int(feed_invalidate_all(NULL, NULL), FEED_EINVAL, "f NULL: FEED_EINVAL");

    /* Redis frozen: a first call times out and drops the connection; the
     * next one, before retry_ms, is not even sent: it fails, and its feeds
     * go on the repair list, so the first call that reaches Redis again
     * drops them. (A single Redis's case: the cluster's are below.) */
    cfg.key_prefix = "feed";
    if (tu_cluster()) {
        cluster_moves(&cfg, r);
    } else {
        int64_t seven = 7, nine = 9;
        feed_result res;
        cfg.retry_ms = 500;
        feed *h = tu_open(&cfg);
        tu_insert_rows(pg, 7, 5, tu_score_by10, tu_id_seq);
        is_int(feed_page(h, 7, FEED_FIRST, 0, 2, &res), FEED_OK, "feed 7 cached");
        feed_result_free(&res);
        servers("redis-freeze");
        is_int(feed_invalidate_many(h, &nine, 1), FEED_EREDIS, "Redis frozen: FEED_EREDIS");
        is_int(feed_invalidate_many(h, &seven, 1), FEED_EREDIS, "... and at once for the next call");
        servers("redis-thaw");
        ok(exists(r, tu_key(7, "")), "the copy of feed 7 is still there after the thaw");
        nanosleep(&(struct timespec){ 0, 600 * 1000000L }, NULL);   /* retry_ms */
        is_int(feed_page(h, 8, FEED_FIRST, 0, 2, &res), FEED_OK, "the next call reaches Redis");
        feed_result_free(&res);
        ok(!exists(r, tu_key(7, "")), "... and drops the copy the failed call could not");
        feed_close(h);
    }

    feed_close(g);
    feed_close(f);
    redisFree(r);
    PQfinish(pg);
    return tap_done();
}
