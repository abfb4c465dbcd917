/* t_ha_cluster.c -- the failover loss on a Redis Cluster, reproduced on the
 * real 3 + 3 cluster of tools/servers.sh, and closed (run as
 * t_ha_cluster:cluster; tests/run.sh starts the cluster).
 *
 * A feed is cached on its primary P and on P's replica R. R is frozen
 * (SIGSTOP) and P closes its replication link (CLIENT KILL TYPE replica),
 * so what P writes next cannot even sit in a socket buffer for R; a hook
 * writes a new top item, P acknowledges it; P is SIGKILLed, R thawed and
 * promoted by the cluster. Three handles configs, each on its own prefix:
 *
 *   none   the hook returns FEED_OK and R's copy misses the item: a walk
 *          differs from SQL (the loss is real; the test can fail);
 *   fence  redis_restart_fence: the hook still "succeeds" on P, but a
 *          handle with no memory of it (another process) walks a feed
 *          equal to SQL: R's run_id is not the one P recorded in the
 *          node's fence key, so R's copies are dropped before any is served;
 *   both   redis_wait_replicas = 1 as well: the hook itself reports
 *          FEED_EREDIS (WAIT: 0 of 1), and so does a fan-out to the feed,
 *          while hooks and a fan-out over every node succeed before the cut.
 *
 * feed_health is checked on the way: every primary answers before; right
 * after the SIGKILL the slot map still names P, which does not answer.
 *
 * Then a primary that comes back: with R frozen and cut off as above, a
 * hook P acknowledges, R thawed and promoted at once (CLUSTER FAILOVER
 * TAKEOVER), P demoted and fully resynced from R (so its copy misses the
 * item now), and P promoted back (TAKEOVER again). A reader's handle that
 * cached the feed before and sent nothing since keeps its connections and
 * meets the same slot map: its trust in P lapsed in the meantime
 * (redis_timeout_ms without a reply), so it reads P's identity again, finds
 * a new replication id, flushes, and walks equal to SQL.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"

void feed__repair_forget(void);   /* lib/core/exchange.c, tests only */

#define UID   7101
#define ROWS  40
#define LIMIT 10

enum { NONE, FENCE, BOTH };

static PGconn *pg;

static int64_t score_of(size_t i) { return (int64_t)i * 10; }
static int64_t id_of(size_t i) { return (int64_t)i + 1; }

/* servers.sh CMD DIR [PORT]; 0 when it succeeded. */
static int cl_srv(const char *cmd, int port)
{
    char line[4096], arg[16] = "";

    if (port > 0)
        snprintf(arg, sizeof arg, "%d", port);
    snprintf(line, sizeof line, "'%s' %s '%s' %s >/dev/null", getenv("FEED_SERVERS"), cmd,
             getenv("FEED_SERVERS_DIR"), arg);
    fflush(stdout);
    return system(line) == 0 ? 0 : -1;
}

/* One command on one node (no redirect followed); the integer answer, or
 * -1 for anything else. */
static long long node_int(int port, const char *cmd, const char *key)
{
    redisContext *c = tu_redis_at(port);
    redisReply *r = key ? redisCommand(c, "%s %s", cmd, key) : redisCommand(c, cmd);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

    freeReplyObject(r);
    redisFree(c);
    return v;
}

/* "master" or "slave" as ROLE says, "" if the node does not answer. */
static int is_primary(int port)
{
    struct timeval tv = { 1, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = c && !c->err ? redisCommand(c, "ROLE") : NULL;
    int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
              r->element[0]->type == REDIS_REPLY_STRING && strcmp(r->element[0]->str, "master") == 0;

    freeReplyObject(r);
    if (c)
        redisFree(c);
    return yes;
}

/* The live primaries' ports. */
static int primaries(int ports[6])
{
    char line[4096], role[32];
    int n = 0, port;
    FILE *p;

    snprintf(line, sizeof line, "'%s' cluster-ports '%s'", getenv("FEED_SERVERS"),
             getenv("FEED_SERVERS_DIR"));
    if (!(p = popen(line, "r")))
        return 0;
    while (n < 6 && fgets(line, sizeof line, p))
        if (sscanf(line, "%d %31s", &port, role) == 2 && strcmp(role, "master") == 0)
            ports[n++] = port;
    pclose(p);
    return n;
}

/* The primary holding key (EXISTS answers 1 there, MOVED elsewhere). */
static int owner_of(const char *key)
{
    int ports[6], n = primaries(ports);

    for (int i = 0; i < n; i++)
        if (node_int(ports[i], "EXISTS", key) == 1)
            return ports[i];
    return 0;
}

/* Primary port's replica, from ROLE: ["master", off, [[ip, port, off]]]. */
static int replica_of(int port)
{
    redisContext *c = tu_redis_at(port);
    redisReply *r = redisCommand(c, "ROLE");
    int rep = 0;

    if (r && r->type == REDIS_REPLY_ARRAY && r->elements == 3 &&
        r->element[2]->type == REDIS_REPLY_ARRAY && r->element[2]->elements > 0 &&
        r->element[2]->element[0]->elements >= 2)
        rep = atoi(r->element[2]->element[0]->element[1]->str);
    freeReplyObject(r);
    redisFree(c);
    return rep;
}

/* The ms it took until replica port held key as primary p does (the
 * same ZCARD, read on the replica after READONLY); -1 if not within ms.
 * Not WAIT on a connection of the test's own: WAIT counts the replicas
 * that acknowledged that connection's writes, and a connection that wrote
 * nothing is acknowledged by any replica online, holding the copy or not.
 * And a replica can lack it then: the first case runs right after the
 * cluster is made, and a replica that has just loaded its full sync is
 * streamed the writes made since only after its next ACK, up to a second
 * later, by which time the case may have cut the link. */
static int replica_holds(int p, int port, const char *key, double ms)
{
    long long want = node_int(p, "ZCARD", key);
    double start = fault_now_ms(), end = start + ms;

    while (want > 0 && fault_now_ms() < end) {
        redisContext *c = tu_redis_at(port);
        redisReply *ro = redisCommand(c, "READONLY");
        redisReply *r = redisCommand(c, "ZCARD %s", key);
        int yes = r && r->type == REDIS_REPLY_INTEGER && r->integer == want;

        freeReplyObject(ro);
        freeReplyObject(r);
        redisFree(c);
        if (yes)
            return (int)(fault_now_ms() - start);
        fault_sleep_ms(50);
    }
    return -1;
}

static pid_t pid_of(int port)
{
    char path[4096];
    FILE *fp;
    long pid = 0;

    snprintf(path, sizeof path, "%s/cluster/%d/redis.pid", getenv("FEED_SERVERS_DIR"), port);
    if ((fp = fopen(path, "r")) != NULL) {
        if (fscanf(fp, "%ld", &pid) != 1)
            pid = 0;
        fclose(fp);
    }
    return (pid_t)pid;
}

static int frozen_port;

static void thaw(void)
{
    if (frozen_port > 0)
        kill(pid_of(frozen_port), SIGCONT);
    frozen_port = 0;
}

static int wait_primary(int port, double ms)
{
    double end = fault_now_ms() + ms;

    while (fault_now_ms() < end) {
        if (is_primary(port))
            return 1;
        fault_sleep_ms(100);
    }
    return 0;
}

/* WAITs node port has run (INFO commandstats). */
static long long waits_on(int port)
{
    redisContext *c = tu_redis_at(port);
    redisReply *r = redisCommand(c, "INFO commandstats");
    const char *p = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "cmdstat_wait:calls=") : NULL;
    long long n = p ? atoll(p + 19) : 0;

    freeReplyObject(r);
    redisFree(c);
    return n;
}

/* Before the cut, with WAIT: a fan-out over feeds on every primary
 * succeeds (each node's WAIT is met by its replica), with one WAIT per
 * node, not one per slot. */
static void wait_passes(feed *f, const char *name)
{
    int64_t uids[24];
    int ports[6], n = primaries(ports);
    long long before_w[6], total = 0, most = 0;
    feed_stats before, d;
    int rc;

    for (int i = 0; i < 24; i++)
        uids[i] = UID + 100 + i;        /* 24 slots, spread over the nodes */
    for (int i = 0; i < n; i++)
        before_w[i] = waits_on(ports[i]);
    feed_stats_get(f, &before);
    rc = feed_fanout(f, uids, 24, 50, 9000);
    d = tu_stats_since(f, &before);
    for (int i = 0; i < n; i++) {
        long long w = waits_on(ports[i]) - before_w[i];
        total += w;
        most = w > most ? w : most;
    }
    ok(rc == FEED_OK && d.wait_failures == 0,
       "%s: a fan-out over 24 feeds succeeds with WAIT (%s)", name, feed_errmsg(f));
    ok(total == n && most == 1, "%s: one WAIT per primary (%lld WAITs on %d primaries)", name,
       total, n);
}

static void failover_case(int mode)
{
    static const char *const names[] = { "none", "fence", "WAIT and fence" };
    const char *name = names[mode];
    int64_t uid = UID + mode;
    feed_config cfg;
    feed_health_info hi;
    feed_stats st;
    tu_walk_info info;
    feed *f, *other;
    char prefix[16], key[256];
    int p, r, rc, held;
    redisContext *c;
    redisReply *rep;

    snprintf(prefix, sizeof prefix, "hc%d", mode);
    tu_config(&cfg);
    cfg.key_prefix = prefix;
    /* WAIT's timeout well above a replica's answer on a loaded machine:
     * only the frozen replica may miss it. */
    cfg.redis_timeout_ms = 2000;
    cfg.redis_wait_timeout_ms = 1000;
    cfg.retry_ms = 100;
    cfg.redis_wait_replicas = mode == BOTH;
    cfg.redis_restart_fence = mode != NONE;
    f = tu_open(&cfg);

    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld", (long long)uid);
    tu_insert_rows(pg, uid, ROWS, score_of, id_of);
    ok(tu_walk_equals_sql(f, pg, uid, LIMIT, &info) && info.sources[FEED_SOURCE_REBUILD] == 1,
       "%s: the feed is cached (%s)", name, info.why);
    if (mode == BOTH)
        wait_passes(f, name);
    snprintf(key, sizeof key, "%s", tu_key_of(prefix, uid, ""));
    p = owner_of(key);
    r = p ? replica_of(p) : 0;
    held = p > 0 && r > 0 ? replica_holds(p, r, key, 10000) : -1;
    ok(held >= 0, "%s: the copy is on primary %d and its replica %d (after %d ms)", name, p, r,
       held);
    if (p <= 0 || r <= 0) {
        tap_bail("no primary/replica pair found");
        exit(255);
    }
    if (mode == NONE) {
        rc = feed_health(f, &hi);
        ok(rc == FEED_OK && hi.redis_up, "health: every primary answers (%s)", hi.redis_msg);
    }

    /* Cut replication: R frozen, its link closed by P. */
    frozen_port = r;
    ok(kill(pid_of(r), SIGSTOP) == 0, "%s: replica %d frozen", name, r);
    c = tu_redis_at(p);
    rep = redisCommand(c, "CLIENT KILL TYPE replica");
    freeReplyObject(rep);
    redisFree(c);

    tu_insert(pg, uid, 100000, 5000);
    feed_stats_get(f, &st);
    rc = feed_on_insert(f, uid, 100000, 5000);
    {
        feed_stats d = tu_stats_since(f, &st);
        /* >= 1: a repair pending from an earlier failure is WAITed too. */
        if (mode == BOTH)
            ok(rc == FEED_EREDIS && d.wait_failures >= 1,
               "%s: the hook reports that no replica has its write (%s; %s)", name,
               feed_strerror(rc), feed_errmsg(f));
        else
            is_int(rc, FEED_OK, "%s: primary %d acknowledged the hook", name, p);
    }
    if (mode == BOTH) {
        int64_t one = uid;
        tu_insert(pg, uid, 100001, 5001);
        rc = feed_fanout(f, &one, 1, 100001, 5001);
        is_int(rc, FEED_EREDIS, "%s: so does a fan-out to the feed (%s)", name, feed_errmsg(f));
    }

    ok(cl_srv("cluster-kill", p) == 0, "%s: primary %d SIGKILLed", name, p);
    if (mode == NONE) {
        rc = feed_health(f, &hi);
        char want[32];
        snprintf(want, sizeof want, ":%d", p);
        ok(rc == FEED_EREDIS && !hi.redis_up && strstr(hi.redis_msg, "2 of 3 primaries") &&
           strstr(hi.redis_msg, want), "health: the dead primary is named (%s)", hi.redis_msg);
    }
    thaw();
    ok(wait_primary(r, 30000), "%s: the cluster promoted replica %d", name, r);
    cl_srv("cluster-wait", 0);

    /* Another process: knows nothing of the failed hook. */
    feed__repair_forget();
    other = tu_open(&cfg);
    ok(tu_reach_redis(other, uid, LIMIT, 10000), "%s: a new handle reaches the new primary", name);
    if (mode == NONE) {
        ok(!tu_walk_equals_sql(other, pg, uid, LIMIT, &info) &&
           info.sources[FEED_SOURCE_CACHE] > 0,
           "%s: the promoted copy misses the acknowledged write: the loss is real", name);
    } else {
        ok(tu_walk_equals_sql(other, pg, uid, LIMIT, &info),
           "%s: its walk equals SQL (%s)", name, info.why);
        feed_stats_get(other, &st);
        ok(st.fence_flushes >= 1, "%s: it found a foreign run_id on the promoted node and "
           "flushed (%llu)", name, (unsigned long long)st.fence_flushes);
        ok(tu_reach_redis(f, uid, LIMIT, 10000) && tu_walk_equals_sql(f, pg, uid, LIMIT, &info),
           "%s: the first handle follows the failover and walks right (%s)", name, info.why);
    }
    feed_close(other);
    feed_close(f);

    /* Heal: the killed node rejoins as the replica of the promoted one. */
    ok(cl_srv("cluster-restart", p) == 0 && cl_srv("cluster-wait", 0) == 0,
       "%s: node %d back as a replica, the cluster is whole", name, p);
}

/* How many members of key on node port have score; -1 for another answer
 * (said as a diagnostic: a redirect means the node does not serve the
 * key's slot, which is another failure than a copy holding the write). */
static long long zcount_at(int port, const char *key, long long score)
{
    redisContext *c = tu_redis_at(port);
    redisReply *r = redisCommand(c, "ZCOUNT %s %lld %lld", key, score, score);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

    if (v < 0)
        tap_diag("ZCOUNT on %d: %s", port, !r ? c->errstr : r->type == REDIS_REPLY_ERROR ?
                 r->str : "not an integer");
    freeReplyObject(r);
    redisFree(c);
    return v;
}

/* Is node port, within ms, a replica of node of whose link to it is up
 * (ROLE ["slave", host, of, "connected", offset])? Of that node, not of
 * any: promoted back, port takes over the slots of the primary it follows. */
static int replica_synced(int port, int of, double ms)
{
    double end = fault_now_ms() + ms;

    while (fault_now_ms() < end) {
        redisContext *c = tu_redis_at(port);
        redisReply *r = redisCommand(c, "ROLE");
        int yes = r && r->type == REDIS_REPLY_ARRAY && r->elements >= 5 &&
                  strcmp(r->element[0]->str, "slave") == 0 &&
                  r->element[2]->type == REDIS_REPLY_INTEGER && r->element[2]->integer == of &&
                  r->element[3]->type == REDIS_REPLY_STRING &&
                  strcmp(r->element[3]->str, "connected") == 0;
        freeReplyObject(r);
        redisFree(c);
        if (yes)
            return 1;
        fault_sleep_ms(100);
    }
    return 0;
}

/* One command on node port: 0 when it answered +OK. */
static int node_ok(int port, const char *cmd)
{
    redisContext *c = tu_redis_at(port);
    redisReply *r = redisCommand(c, cmd);
    int rc = r && r->type == REDIS_REPLY_STATUS ? 0 : -1;

    freeReplyObject(r);
    redisFree(c);
    return rc;
}

/* Promotes node port, frozen, by CLUSTER FAILOVER TAKEOVER on c (a
 * connection made before the freeze) sent while it is frozen, then thaws
 * it: the first pass of its event loop reads the command and promotes it
 * before its replication cron can reconnect to its primary and fetch what
 * it missed. Sent after the thaw, the command raced that reconnect, and the
 * write meant to be lost sometimes arrived first. 0 on +OK. */
static int takeover_on_thaw(redisContext *c)
{
    redisReply *r = NULL;
    int done = 0, rc;

    if (redisAppendCommand(c, "CLUSTER FAILOVER TAKEOVER") != REDIS_OK)
        return -1;
    while (!done)
        if (redisBufferWrite(c, &done) != REDIS_OK)
            return -1;
    thaw();
    if (redisGetReply(c, (void **)&r) != REDIS_OK)
        return -1;
    rc = r && r->type == REDIS_REPLY_STATUS ? 0 : -1;
    freeReplyObject(r);
    return rc;
}

/* Promotes replica port back (CLUSTER FAILOVER TAKEOVER) and waits until
 * the cluster agrees and port serves key's slot (EXISTS answers, no
 * redirect); at most 3 times, saying so before each retry. 0 when it does.
 * A takeover takes its config epoch without the other primaries' votes,
 * and the slots it claims are not promised to stay with it: a node that
 * lost them is a replica again, answers MOVED, and is told once more. */
static int promote_back(int port, const char *key)
{
    const char *step = "";

    for (int i = 0; i < 3; i++) {
        if (i > 0)
            tap_diag("%d does not serve %s after its takeover (%s): once more", port, key, step);
        if (node_ok(port, "CLUSTER FAILOVER TAKEOVER") != 0)
            step = "CLUSTER FAILOVER TAKEOVER not +OK";
        else if (!wait_primary(port, 10000))
            step = "not a primary within 10 s";
        else if (cl_srv("cluster-wait", 0) != 0)
            step = "the cluster did not agree";
        else if (node_int(port, "EXISTS", key) < 0)
            step = "EXISTS redirected or failed";
        else
            return 0;
    }
    tap_diag("%d: the last takeover failed so (%s)", port, step);
    return -1;
}

/* P demoted, resynced from its replica promoted behind it, and promoted
 * back, while a reader's handle stays idle towards it. */
static void flap_case(void)
{
    int64_t uid = UID + 3;
    feed_config cfg;
    feed_stats st;
    tu_walk_info info;
    feed *reader, *writer;
    char key[256];
    int p, r, rc, held;
    redisContext *c, *cr;
    redisReply *rep;

    tu_config(&cfg);
    cfg.key_prefix = "hc3";
    cfg.retry_ms = 100;             /* redis_timeout_ms: the default, 250 */
    reader = tu_open(&cfg);
    writer = tu_open(&cfg);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = %lld", (long long)uid);
    tu_insert_rows(pg, uid, ROWS, score_of, id_of);
    ok(tu_walk_equals_sql(reader, pg, uid, LIMIT, &info), "flap: the feed is cached (%s)",
       info.why);
    snprintf(key, sizeof key, "%s", tu_key_of("hc3", uid, ""));
    p = owner_of(key);
    r = p ? replica_of(p) : 0;
    held = p > 0 && r > 0 ? replica_holds(p, r, key, 10000) : -1;
    ok(held >= 0, "flap: the copy is on primary %d and its replica %d (after %d ms)", p, r, held);
    if (p <= 0 || r <= 0) {
        tap_bail("no primary/replica pair found");
        exit(255);
    }
    cr = tu_redis_at(r);
    frozen_port = r;
    ok(kill(pid_of(r), SIGSTOP) == 0, "flap: replica %d frozen", r);
    c = tu_redis_at(p);
    rep = redisCommand(c, "CLIENT KILL TYPE replica");
    freeReplyObject(rep);
    redisFree(c);
    tu_insert(pg, uid, 100000, 5000);
    rc = feed_on_insert(writer, uid, 100000, 5000);
    is_int(rc, FEED_OK, "flap: primary %d acknowledged the hook", p);
    ok(takeover_on_thaw(cr) == 0 && wait_primary(r, 10000),
       "flap: replica %d promoted at once, without the hook's write", r);
    redisFree(cr);
    ok(replica_synced(p, r, 30000), "flap: %d demoted and resynced from %d", p, r);
    ok(promote_back(p, key) == 0, "flap: %d promoted back", p);
    is_int((int)zcount_at(p, key, 100000), 0, "flap: %d's copy misses the acknowledged write "
           "now (the loss is real)", p);

    /* The reader: same connections, same slot map, nothing sent since. */
    feed_stats_get(reader, &st);
    ok(tu_walk_equals_sql(reader, pg, uid, LIMIT, &info),
       "flap: the idle reader walks equal to SQL (%s)", info.why);
    st = tu_stats_since(reader, &st);
    ok(st.fence_flushes >= 1, "flap: it read %d's identity again and flushed (%llu)", p,
       (unsigned long long)st.fence_flushes);
    feed_close(writer);
    feed_close(reader);
}

int main(void)
{
    if (!tu_cluster()) {
        printf("1..0 # SKIP needs the Redis Cluster (tests/run.sh runs t_ha_cluster:cluster)\n");
        return 0;
    }
    pg = tu_begin(NULL);
    atexit(thaw);
    failover_case(NONE);
    failover_case(FENCE);
    failover_case(BOTH);
    flap_case();
    PQfinish(pg);
    return tap_done();
}
