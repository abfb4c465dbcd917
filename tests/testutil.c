/* testutil.c -- see testutil.h. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "tap.h"
#include "testutil.h"

static void bail(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    tap_bail(buf);
    exit(255);
}

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v && *v ? v : dflt;
}

int tu_cluster(void)
{
    const char *v = getenv("FEED_TEST_CLUSTER");

    return v && strcmp(v, "1") == 0;
}

void tu_plain_redis_only(const char *test)
{
    if (!tu_cluster())
        return;
    printf("1..0 # SKIP acts on the single Redis (run %s without :cluster)\n", test);
    exit(0);
}

void tu_config(feed_config *cfg)
{
    feed_config_init(cfg);
    cfg->redis_host = env_or("FEED_REDIS_HOST", "127.0.0.1");
    cfg->redis_port = atoi(env_or("FEED_REDIS_PORT", "6379"));
    cfg->pg_conninfo = env_or("FEED_PG_CONNINFO", "");
    if (tu_cluster()) {
        cfg->redis_cluster = getenv("FEED_REDIS_CLUSTER");
        if (!cfg->redis_cluster || !*cfg->redis_cluster)
            bail("FEED_TEST_CLUSTER=1 but FEED_REDIS_CLUSTER is not set");
    }
}

feed *tu_open(const feed_config *cfg)
{
    feed_config dflt;
    feed *f = NULL;
    int rc;

    if (!cfg) {
        tu_config(&dflt);
        cfg = &dflt;
    }
    rc = feed_open(&f, cfg);
    if (rc != FEED_OK)
        bail("feed_open: %s: %s", feed_strerror(rc), feed_errmsg(NULL));
    return f;
}

#define SETTLE_UID0 INT64_C(8000000000000000000)   /* no test's feed */

void tu_settle(feed *f)
{
    int n = tu_cluster() ? 64 : 1;
    feed_stats st;

    char why[512] = "";

    /* A call that fails (a node's INFO late on a loaded machine: the
     * handle's redis_timeout_ms is the test's own, often the default) is
     * made again: only a set-up that does not end in 30 s fails the test. */
    struct timespec t0, t;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int failed = 0;
        for (int i = 0; i < n && !failed; i++)
            if (feed_invalidate(f, SETTLE_UID0 + i) != FEED_OK) {
                snprintf(why, sizeof why, "%s", feed_errmsg(f));
                failed = 1;
            }
        feed_stats_get(f, &st);
        if (!failed && st.fence_sweeps == st.fence_flushes)
            return;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= 30)     /* a wall-clock bound: calls may time out */
            break;
        nanosleep(&(struct timespec){ .tv_nsec = 10 * 1000 * 1000 }, NULL);
    }
    bail("tu_settle: the restart fence's set-up did not end in 30 s%s%s", *why ? "; last: " : "",
         why);
}

void tu_settle_feed(feed *f, int64_t uid)
{
    char tag[24];
    unsigned slot;
    feed_result res;

    if (!tu_cluster())
        return;
    snprintf(tag, sizeof tag, "%lld", (long long)uid);
    slot = feed__key_slot(tag, strlen(tag));
    for (int64_t v = SETTLE_UID0 + 64;; v++) {
        snprintf(tag, sizeof tag, "%lld", (long long)v);
        if (feed__key_slot(tag, strlen(tag)) != slot)
            continue;
        if (feed_page(f, v, FEED_FIRST, 0, 1, &res) != FEED_OK)
            bail("tu_settle_feed: %s", feed_errmsg(f));
        feed_result_free(&res);
        if (feed_invalidate(f, v) != FEED_OK)
            bail("tu_settle_feed: %s", feed_errmsg(f));
        return;
    }
}

feed *tu_open_settled(const feed_config *cfg)
{
    feed *f = tu_open(cfg);

    tu_settle(f);
    return f;
}

feed *tu_open_with(void (*set)(feed_config *cfg))
{
    feed_config cfg;

    tu_config(&cfg);
    set(&cfg);
    return tu_open(&cfg);
}

PGconn *tu_pg(void)
{
    PGconn *pg = PQconnectdb(env_or("FEED_PG_CONNINFO", ""));

    if (PQstatus(pg) != CONNECTION_OK)
        bail("PostgreSQL: %s", PQerrorMessage(pg));
    return pg;
}

static PGresult *vexec(PGconn *pg, const char *fmt, va_list ap)
{
    char *sql;
    int len;
    va_list ap2;
    PGresult *res;

    va_copy(ap2, ap);
    len = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    sql = malloc((size_t)len + 1);
    if (!sql)
        bail("out of memory");
    vsnprintf(sql, (size_t)len + 1, fmt, ap);
    res = PQexec(pg, sql);
    if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
        bail("SQL failed: %.200s: %s", sql, PQerrorMessage(pg));
    free(sql);
    return res;
}

void tu_sql(PGconn *pg, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    PQclear(vexec(pg, fmt, ap));
    va_end(ap);
}

long long tu_sql_int(PGconn *pg, const char *fmt, ...)
{
    va_list ap;
    PGresult *res;
    long long v;

    va_start(ap, fmt);
    res = vexec(pg, fmt, ap);
    va_end(ap);
    if (PQntuples(res) != 1)
        bail("tu_sql_int: %d rows", PQntuples(res));
    v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

/* On a cluster (FEED_TEST_CLUSTER=1) tu_redis connects to the first seed and
 * tu_redis_cmd follows MOVED and ASK to the node that holds the key, on
 * connections kept here for the whole test; FLUSHDB and FLUSHALL go to
 * every primary. Every key a test names carries its feed's {uid}, so one
 * node answers each command. */
static pthread_mutex_t nodes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { char host[64]; int port; redisContext *c; } nodes[32];
static int nnodes;

static redisContext *connect_to(const char *host, int port)
{
    struct timeval tv = { 5, 0 };
    redisContext *r = redisConnectWithTimeout(host, port, tv);

    if (!r || r->err)
        bail("Redis %s:%d: %s", host, port, r ? r->errstr : "out of memory");
    return r;
}

/* A kept connection to host:port (lock held). */
static redisContext *node_at(const char *host, int port)
{
    for (int i = 0; i < nnodes; i++)
        if (nodes[i].port == port && strcmp(nodes[i].host, host) == 0)
            return nodes[i].c;
    if (nnodes == (int)(sizeof nodes / sizeof nodes[0]))
        bail("tu_redis_cmd: too many cluster nodes");
    snprintf(nodes[nnodes].host, sizeof nodes[nnodes].host, "%s", host);
    nodes[nnodes].port = port;
    nodes[nnodes].c = connect_to(host, port);
    return nodes[nnodes++].c;
}

redisContext *tu_redis(void)
{
    if (tu_cluster()) {
        char host[64];
        int port;
        if (sscanf(env_or("FEED_REDIS_CLUSTER", ""), "%63[^:]:%d", host, &port) != 2)
            bail("FEED_REDIS_CLUSTER is not host:port,...");
        return connect_to(host, port);
    }
    return connect_to(env_or("FEED_REDIS_HOST", "127.0.0.1"),
                      atoi(env_or("FEED_REDIS_PORT", "6379")));
}

static redisReply *send_formatted(redisContext *r, const char *cmd, size_t len, int asking)
{
    redisReply *reply = NULL;

    if ((asking && redisAppendCommand(r, "ASKING") != REDIS_OK) ||
        redisAppendFormattedCommand(r, cmd, len) != REDIS_OK)
        bail("Redis command failed: %s", r->errstr);
    if (asking) {
        if (redisGetReply(r, (void **)&reply) != REDIS_OK)
            bail("Redis command failed: %s", r->errstr);
        freeReplyObject(reply);
    }
    if (redisGetReply(r, (void **)&reply) != REDIS_OK || !reply)
        bail("Redis command failed: %s", r->errstr);
    return reply;
}

/* FLUSHDB / FLUSHALL on a cluster: on every primary CLUSTER SLOTS names. */
static redisReply *on_every_primary(redisContext *r, const char *cmd, size_t len)
{
    redisReply *slots = send_formatted(r, "*2\r\n$7\r\nCLUSTER\r\n$5\r\nSLOTS\r\n", 28, 0);
    redisReply *last = NULL;

    if (slots->type != REDIS_REPLY_ARRAY)
        bail("CLUSTER SLOTS: unexpected reply");
    pthread_mutex_lock(&nodes_lock);
    for (size_t i = 0; i < slots->elements; i++) {
        redisReply *owner = slots->element[i]->element[2];
        redisContext *n = node_at(owner->element[0]->str, (int)owner->element[1]->integer);
        freeReplyObject(last);
        last = send_formatted(n, cmd, len, 0);
        if (last->type == REDIS_REPLY_ERROR)
            bail("%.*s: %s", (int)len, cmd, last->str);
    }
    pthread_mutex_unlock(&nodes_lock);
    freeReplyObject(slots);
    return last;
}

static redisReply *vcmd(redisContext *r, const char *fmt, va_list ap)
{
    redisReply *reply;
    char *cmd;
    int len = redisvFormatCommand(&cmd, fmt, ap);

    if (len < 0)
        bail("tu_redis_cmd: cannot format %s", fmt);
    if (tu_cluster() && (strncmp(fmt, "FLUSHDB", 7) == 0 || strncmp(fmt, "FLUSHALL", 8) == 0)) {
        reply = on_every_primary(r, cmd, (size_t)len);
        free(cmd);
        return reply;
    }
    reply = send_formatted(r, cmd, (size_t)len, 0);
    /* A few hops at most: MOVED to the owner, then maybe ASK while a slot
     * migrates. */
    for (int hops = 0; tu_cluster() && reply->type == REDIS_REPLY_ERROR && hops < 5; hops++) {
        char host[64];
        int port, slot, asking = strncmp(reply->str, "ASK ", 4) == 0;
        if (!(strncmp(reply->str, "MOVED ", 6) == 0 || asking) ||
            sscanf(reply->str + (asking ? 4 : 6), "%d %63[^:]:%d", &slot, host, &port) != 3)
            break;
        freeReplyObject(reply);
        pthread_mutex_lock(&nodes_lock);
        reply = send_formatted(node_at(host, port), cmd, (size_t)len, asking);
        pthread_mutex_unlock(&nodes_lock);
    }
    free(cmd);
    return reply;
}

redisReply *tu_redis_cmd(redisContext *r, const char *fmt, ...)
{
    va_list ap;
    redisReply *reply;

    va_start(ap, fmt);
    reply = vcmd(r, fmt, ap);
    va_end(ap);
    return reply;
}

long long tu_redis_int(redisContext *r, const char *fmt, ...)
{
    va_list ap;
    redisReply *reply;
    long long v;

    va_start(ap, fmt);
    reply = vcmd(r, fmt, ap);
    va_end(ap);
    if (reply->type != REDIS_REPLY_INTEGER)
        bail("tu_redis_int: %s: not an integer reply (type %d%s%s)", fmt, reply->type,
             reply->type == REDIS_REPLY_ERROR ? ": " : "",
             reply->type == REDIS_REPLY_ERROR ? reply->str : "");
    v = reply->integer;
    freeReplyObject(reply);
    return v;
}

void tu_reset(PGconn *pg, redisContext *r)
{
    tu_sql(pg, "TRUNCATE feed_entry");
    freeReplyObject(tu_redis_cmd(r, "FLUSHDB"));
}

PGconn *tu_begin(redisContext **r)
{
    PGconn *pg = tu_pg();
    redisContext *redis = tu_redis();

    tu_reset(pg, redis);
    if (r)
        *r = redis;
    else
        redisFree(redis);
    return pg;
}

size_t tu_sql_feed(PGconn *pg, int64_t uid, feed_item **out)
{
    PGresult *res;
    size_t n;

    char num[32];
    const char *params[1] = { num };

    snprintf(num, sizeof num, "%lld", (long long)uid);
    res = PQexecParams(pg, "SELECT score, id FROM feed_entry WHERE uid = $1::int8"
                           " ORDER BY score DESC, id DESC",
                       1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        bail("tu_sql_feed: %s", PQerrorMessage(pg));
    n = (size_t)PQntuples(res);
    *out = malloc((n + 1) * sizeof **out);
    if (!*out)
        bail("out of memory");
    for (size_t i = 0; i < n; i++) {
        (*out)[i].score = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
        (*out)[i].id = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
    }
    PQclear(res);
    return n;
}

int tu_page_equals_sql(PGconn *pg, int64_t uid, int64_t score, int64_t id, size_t limit,
                       const feed_result *r, size_t *next_at)
{
    feed_item *all;
    size_t n = tu_sql_feed(pg, uid, &all), start = 0, want;
    int same;

    if (score != FEED_FIRST)
        while (start < n && !(all[start].score < score ||
                              (all[start].score == score && all[start].id < id)))
            start++;
    want = n - start < limit ? n - start : limit;
    same = r->count == want && r->has_more == (start + want < n);
    for (size_t i = 0; same && i < want; i++)
        same = r->items[i].score == all[start + i].score && r->items[i].id == all[start + i].id;
    if (!same)
        tap_diag("page after (%lld, %lld): %zu items, SQL has %zu from index %zu",
                 (long long)score, (long long)id, r->count, want, start);
    if (next_at)
        *next_at = start + want;
    free(all);
    return same;
}

static int before(feed_item a, feed_item b)   /* a strictly before b */
{
    return a.score > b.score || (a.score == b.score && a.id > b.id);
}

int tu_walk(feed *f, int64_t uid, size_t limit, feed_item **out, size_t *n,
            tu_walk_info *info)
{
    int64_t score = FEED_FIRST, id = 0;
    size_t cap = 64, count = 0;
    feed_item *all = malloc(cap * sizeof *all);

    memset(info, 0, sizeof *info);
    if (!all)
        bail("out of memory");
    for (;;) {
        feed_result r;
        int rc = feed_page(f, uid, score, id, limit, &r);
        if (rc != FEED_OK) {
            snprintf(info->why, sizeof info->why, "page %zu: %s: %s", info->pages,
                     feed_strerror(rc), feed_errmsg(f));
            free(all);
            return rc;
        }
        info->pages++;
        if (r.source >= 1 && r.source <= 3)
            info->sources[r.source]++;
        for (size_t i = 0; i < r.count; i++) {
            feed_item prev = count ? all[count - 1] : (feed_item){ 0, 0 };
            if ((count && !before(prev, r.items[i])) || r.count > limit ||
                (i == 0 && score != FEED_FIRST &&
                 !(r.items[0].score < score || (r.items[0].score == score && r.items[0].id < id)))) {
                snprintf(info->why, sizeof info->why,
                         "page %zu item %zu (%lld,%lld) out of order", info->pages, i,
                         (long long)r.items[i].score, (long long)r.items[i].id);
                feed_result_free(&r);
                free(all);
                return -100;
            }
            if (count == cap) {
                feed_item *bigger = realloc(all, 2 * cap * sizeof *all);
                if (!bigger)
                    bail("out of memory");
                all = bigger;
                cap *= 2;
            }
            all[count++] = r.items[i];
        }
        if (!r.has_more) {
            feed_result_free(&r);
            break;
        }
        if (r.count == 0 || r.next_score != r.items[r.count - 1].score ||
            r.next_id != r.items[r.count - 1].id || r.count != limit) {
            snprintf(info->why, sizeof info->why,
                     "page %zu: has_more with %zu items or a cursor that is not the last item",
                     info->pages, r.count);
            feed_result_free(&r);
            free(all);
            return -100;
        }
        score = r.next_score;
        id = r.next_id;
        feed_result_free(&r);
        if (info->pages > 10000000) {
            snprintf(info->why, sizeof info->why, "walk does not end");
            free(all);
            return -100;
        }
    }
    *out = all;
    *n = count;
    return FEED_OK;
}

int tu_walk_equals_sql(feed *f, PGconn *pg, int64_t uid, size_t limit,
                       tu_walk_info *info)
{
    feed_item *want, *got = NULL;
    size_t nwant = tu_sql_feed(pg, uid, &want), ngot = 0;
    int rc = tu_walk(f, uid, limit, &got, &ngot, info), same = 0;

    if (rc == FEED_OK) {
        same = ngot == nwant;
        for (size_t i = 0; same && i < ngot; i++) {
            if (got[i].score != want[i].score || got[i].id != want[i].id) {
                snprintf(info->why, sizeof info->why,
                         "item %zu: got (%lld,%lld), SQL has (%lld,%lld)", i,
                         (long long)got[i].score, (long long)got[i].id,
                         (long long)want[i].score, (long long)want[i].id);
                same = 0;
            }
        }
        if (ngot != nwant)
            snprintf(info->why, sizeof info->why, "walk has %zu items, SQL %zu", ngot, nwant);
    }
    if (!same)
        tap_diag("uid %lld limit %zu: %s", (long long)uid, limit, info->why);
    free(want);
    free(got);
    return same;
}

int tu_walks_equal_sql(feed *f, PGconn *pg, int64_t uid)
{
    static const size_t sizes[] = { 1, 2, 3, 4, 7, 20 };
    tu_walk_info info;
    int same = 1;

    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        same &= tu_walk_equals_sql(f, pg, uid, sizes[i], &info);
    return same;
}

void tu_insert_rows(PGconn *pg, int64_t uid, size_t n,
                    int64_t (*score_of)(size_t), int64_t (*id_of)(size_t))
{
    size_t cap = 64 * 1000 + 64;
    char *sql = malloc(cap);

    if (!sql)
        bail("out of memory");
    for (size_t done = 0; done < n;) {
        size_t len = (size_t)snprintf(sql, cap, "INSERT INTO feed_entry (uid, score, id) VALUES ");
        size_t batch = n - done < 1000 ? n - done : 1000;
        for (size_t i = 0; i < batch; i++, done++)
            len += (size_t)snprintf(sql + len, cap - len, "%s(%lld,%lld,%lld)", i ? "," : "",
                                    (long long)uid, (long long)score_of(done),
                                    (long long)id_of(done));
        tu_sql(pg, "%s", sql);
    }
    free(sql);
}

void tu_insert(PGconn *pg, int64_t uid, int64_t score, int64_t id)
{
    tu_sql(pg, "INSERT INTO feed_entry (uid, score, id) VALUES (%lld,%lld,%lld)"
               " ON CONFLICT (uid, id) DO UPDATE SET score = EXCLUDED.score",
           (long long)uid, (long long)score, (long long)id);
}

int64_t tu_id_seq(size_t i) { return (int64_t)i + 1; }
int64_t tu_score_by10(size_t i) { return ((int64_t)i + 1) * 10; }
int64_t tu_score_desc(size_t i) { return 100000 - (int64_t)i * 10; }
int64_t tu_score_from1000(size_t i) { return 1000 + (int64_t)i * 10; }
int64_t tu_score_pairs(size_t i) { return (int64_t)(i / 2) * 3; }
int64_t tu_score_same(size_t i) { (void)i; return TU_SCORE_SAME; }

feed_stats tu_stats_since(feed *f, const feed_stats *before_stats)
{
    /* Every counter, those added later included: feed_stats is uint64_t
     * fields only (tests/t_errors.c checks it against feed_stats_count). */
    uint64_t now[sizeof(feed_stats) / sizeof(uint64_t)], then[sizeof now / sizeof now[0]];
    feed_stats d;

    feed_stats_get(f, &d);
    memcpy(now, &d, sizeof now);
    memcpy(then, before_stats, sizeof then);
    for (size_t i = 0; i < sizeof now / sizeof now[0]; i++)
        now[i] -= then[i];
    memcpy(&d, now, sizeof d);
    return d;
}

uint64_t tu_rand(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);

    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

int64_t tu_rand_below(uint64_t *state, int64_t n)
{
    return (int64_t)(tu_rand(state) % (uint64_t)n);
}

int64_t tu_random_score(uint64_t *state)
{
    switch (tu_rand_below(state, 20)) {
    case 0:  return FEED_SCORE_MAX - tu_rand_below(state, 3);
    case 1:  return -FEED_SCORE_MAX + tu_rand_below(state, 3);
    default: return tu_rand_below(state, 15) * 1000;
    }
}

/* The Sentinels' primary for cfg into host/port (the first Sentinel that names it). */
static void sentinel_primary(const feed_config *cfg, char host[64], int *port)
{
    char shost[64];
    int sport, at = 0, used;

    while (sscanf(cfg->redis_sentinels + at, "%63[^:]:%d%n", shost, &sport, &used) == 2) {
        redisContext *r = connect_to(shost, sport);
        redisReply *a = redisCommand(r, "SENTINEL get-master-addr-by-name %s",
                                     cfg->redis_master_name);
        int found = a && a->type == REDIS_REPLY_ARRAY && a->elements == 2;
        if (found) {
            snprintf(host, 64, "%s", a->element[0]->str);
            *port = atoi(a->element[1]->str);
        }
        freeReplyObject(a);
        redisFree(r);
        if (found)
            return;
        at += used;
        if (cfg->redis_sentinels[at] != ',')
            break;
        at++;
    }
    bail("no Sentinel of %s names %s", cfg->redis_sentinels, cfg->redis_master_name);
}

/* The generation last learnt from each server (host:port): what a test
 * names keys with while the server is down (a command on them then fails,
 * as the test expects). */
static pthread_mutex_t gens_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { char host[64]; int port; char gen[FEED_KEY_GEN_LEN + 1]; } gens[32];
static int ngens;

static int gen_known(const char *host, int port, char *gen, int learnt)
{
    int i, found = 0;

    pthread_mutex_lock(&gens_lock);
    for (i = 0; i < ngens && (gens[i].port != port || strcmp(gens[i].host, host) != 0); i++) {}
    if (learnt && i == ngens && ngens < (int)(sizeof gens / sizeof gens[0])) {
        snprintf(gens[i].host, sizeof gens[i].host, "%s", host);
        gens[i].port = port;
        ngens++;
    }
    if (i < ngens) {
        found = 1;
        if (learnt)
            memcpy(gens[i].gen, gen, FEED_KEY_GEN_LEN + 1);
        else
            memcpy(gen, gens[i].gen, FEED_KEY_GEN_LEN + 1);
    }
    pthread_mutex_unlock(&gens_lock);
    return found;
}

/* The generation the library writes into the keys of owner's copies (base.h):
 * with the restart fence and one Redis (or the primary the Sentinels name),
 * that of its data set now (INFO); a server that does not answer, the one
 * it had when last asked. None on a cluster (lib/core/setup.c says why). */
static void key_gen_of(const feed_config *cfg, char gen[FEED_KEY_GEN_LEN + 1])
{
    struct timeval tv = { 2, 0 };
    char host[64], run_id[41], replid[41];
    int port;
    redisContext *r;
    redisReply *a;

    if (!cfg->redis_restart_fence || cfg->redis_cluster) {
        memcpy(gen, FEED_KEY_GEN_NONE, FEED_KEY_GEN_LEN + 1);
        return;
    }
    if (cfg->redis_sentinels) {
        sentinel_primary(cfg, host, &port);
    } else {
        snprintf(host, sizeof host, "%s", cfg->redis_host);
        port = cfg->redis_port;
    }
    if ((r = redisConnectWithTimeout(host, port, tv)) == NULL || r->err) {
        redisFree(r);
        if (gen_known(host, port, gen, 0))
            return;
        bail("Redis %s:%d does not answer, and no key of it was named before", host, port);
    }
    /* A frozen server (SIGSTOP, DEBUG SLEEP) answers late or never: its
     * generation is the one it had when last asked. */
    if (redisSetTimeout(r, tv) != REDIS_OK || (a = redisCommand(r, "INFO")) == NULL) {
        redisFree(r);
        if (gen_known(host, port, gen, 0))
            return;
        bail("Redis %s:%d does not answer INFO, and no key of it was named before", host, port);
    }
    if (!a || a->type != REDIS_REPLY_STRING || !feed__info_id(a->str, "run_id", run_id) ||
        !feed__info_id(a->str, "master_replid", replid))
        bail("the identity of Redis %s:%d: %s", host, port,
             a && a->type == REDIS_REPLY_ERROR ? a->str : "no run_id or master_replid in INFO");
    feed__key_gen(run_id, replid, gen);
    gen_known(host, port, gen, 1);
    freeReplyObject(a);
    redisFree(r);
}

const char *tu_key_gen(const feed_config *cfg, int fam, int64_t owner, const char *suffix,
                       const char *gen)
{
    static char bufs[8][512];
    static unsigned next;
    char *b = bufs[next++ % 8], *base;
    const char *rows[] = { "feed", cfg->table, cfg->owner_column, cfg->score_column,
                           cfg->id_column };
    const char *authors[] = { "author", cfg->author_table, cfg->author_column,
                              cfg->score_column, cfg->id_column };
    const char *index[] = { "authors", cfg->item_author_column };
    char tag[FEED_KEY_TAG_LEN + 1];

    base = feed__key_base(cfg->key_prefix, fam == FEED_FAM_AUTHOR ? authors : rows, 5);
    if (!base)
        bail("out of memory");
    memcpy(base + feed__key_gen_at(base), gen, FEED_KEY_GEN_LEN);
    if (strcmp(suffix, ":authors") == 0) {   /* the author index of filtered pages */
        feed__key_tag(index, 2, tag);
        snprintf(b, sizeof bufs[0], "%s{%lld}:authors:%s", base, (long long)owner, tag);
    } else {
        snprintf(b, sizeof bufs[0], "%s{%lld}%s", base, (long long)owner, suffix);
    }
    free(base);
    return b;
}

const char *tu_key_cfg(const feed_config *cfg, int fam, int64_t owner, const char *suffix)
{
    char gen[FEED_KEY_GEN_LEN + 1];

    key_gen_of(cfg, gen);
    return tu_key_gen(cfg, fam, owner, suffix, gen);
}

const char *tu_key_of(const char *prefix, int64_t uid, const char *suffix)
{
    feed_config cfg;

    tu_config(&cfg);
    cfg.key_prefix = prefix;
    return tu_key_cfg(&cfg, FEED_FAM_FEED, uid, suffix);
}

void tu_plant_lease(redisContext *r, const char *lease_key, const char *token)
{
    freeReplyObject(tu_redis_cmd(r, "EVAL %s 1 %s %s",
                                 "local t = redis.call('TIME') redis.call('HSET', KEYS[1], ARGV[1],"
                                 " t[1] * 1000 + math.floor(t[2] / 1000))"
                                 " redis.call('PEXPIRE', KEYS[1], 10000)", lease_key, token));
}

const char *tu_key(int64_t uid, const char *suffix)
{
    return tu_key_of("feed", uid, suffix);
}

const char *tu_author_key_of(const char *prefix, int64_t author, const char *suffix)
{
    feed_config cfg;

    tu_config(&cfg);
    cfg.key_prefix = prefix;
    cfg.author_table = "author_post";
    return tu_key_cfg(&cfg, FEED_FAM_AUTHOR, author, suffix);
}

size_t tu_member(int64_t id, char *buf)
{
    return feed__member_encode(id, buf);
}

redisContext *tu_redis_at(int port)
{
    struct timeval tv = { 5, 0 };
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);

    if (!c || c->err)
        bail("cannot reach Redis at 127.0.0.1:%d", port);
    return c;
}

static double mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1000.0 + (double)ts.tv_nsec / 1e6;
}

int tu_reach_redis(feed *f, int64_t uid, size_t limit, int ms)
{
    struct timespec pause = { 0, 50 * 1000000L };
    double end = mono_ms() + ms;

    while (mono_ms() < end) {
        feed_result res;
        if (feed_page(f, uid, FEED_FIRST, 0, limit, &res) == FEED_OK) {
            feed_source src = res.source;
            feed_result_free(&res);
            if (src != FEED_SOURCE_DB)
                return 1;
        }
        nanosleep(&pause, NULL);
    }
    return 0;
}
