/* fence.c -- the restart fence: a data set that came back from disk, or
 * from a promoted replica, is never trusted.
 *
 * Redis replicates asynchronously and persists at best every second, so a
 * server that restarts from its RDB/AOF, or a replica promoted in a
 * failover, may hold a cached copy that misses a write whose hook the old
 * server acknowledged: the exact-prefix invariant broken, silently. Both
 * events have one mark in common: the server answering now has another
 * run_id (INFO server) than the one whose writes the copies received, since
 * run_id is new at every start and a promoted replica keeps its own.
 *
 * So "<prefix>:fence" holds the run_id of the server on which every cached
 * copy was written. It is replicated and persisted with the copies, hence
 * after a restart or a failover it names the old server. A handle that
 * finds its server's run_id differs serves no cached page (pages come from
 * PostgreSQL) until every "<prefix>:*" key has been dropped (SCAN + UNLINK,
 * resumable, at most redis_timeout_ms of it per call), then writes the new
 * run_id. Write hooks still run meanwhile: they only ever make a copy more
 * right, and the copy is dropped anyway. Several handles may flush at once;
 * each pass first looks whether another finished (the fence then matches).
 *
 * Why every key must go before any page is served: SCAN returns every key
 * present from the start to the end of a pass, and only handles past the
 * fence build copies, so when the pass ends nothing from the old data set
 * is left. The fence key is never dropped by a pass (another handle may
 * have just written it).
 *
 * On a Redis Cluster each node holds its own copies, so each node
 * connection has its own fence (cluster_io.c) and the fence key is one per
 * node: "<prefix>:fence{<n>}", n chosen so that the key hashes to a slot
 * the node owns (its lowest). The key then lives in the node's data set,
 * is replicated to the node's replicas with the copies, and a promoted
 * replica finds the old primary's run_id in it: the same test, per node.
 * SCAN on a node sees that node's keys only, and its UNLINKs go one key
 * each (keys of several slots cannot share a command on a cluster).
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* "<prefix>:fence", or on a cluster node (slot >= 0) "<prefix>:fence{<n>}"
 * with the least n whose text hashes to slot: the prefix holds no braces
 * (handle.c), so the tag alone decides the slot. Every slot is reached by
 * some n below 10^6 (about 16384 tries on average, a millisecond). */
static int fence_key(feed *f, int slot, char *buf, size_t cap)
{
    char num[21];

    if (slot < 0) {
        snprintf(buf, cap, "%s:fence", f->cfg.key_prefix);
        return FEED_OK;
    }
    for (int64_t n = 0; n < 1000000; n++) {
        size_t len = feed__i64_to_str(n, num);
        if (feed__key_slot(num, len) == (unsigned)slot) {
            snprintf(buf, cap, "%s:fence{%s}", f->cfg.key_prefix, num);
            return FEED_OK;
        }
    }
    return feed__error(f, FEED_EREDIS, "restart fence: no key name for slot %d", slot);
}

static void scan_pattern(const feed *f, char *buf, size_t cap)
{
    size_t n = 0;

    for (const char *p = f->cfg.key_prefix; *p && n + 4 < cap; p++) {
        if (strchr("*?[]\\", *p))
            buf[n++] = '\\';
        buf[n++] = *p;
    }
    buf[n++] = ':';
    buf[n++] = '*';
    buf[n] = '\0';
}

/* The connection *c is freed and NULL after a failure (never left
 * half-read); f->redis's reconnect waits retry_ms, a cluster node's is its
 * caller's to schedule. */
static int fence_fail(feed *f, redisContext **c, const char *what, redisReply *r)
{
    f->stats.redis_errors++;
    feed__error(f, FEED_EREDIS, "Redis %s (restart fence): %s", what,
                r && r->type == REDIS_REPLY_ERROR ? r->str : *c && (*c)->errstr[0]
                ? (*c)->errstr : "unexpected reply");
    freeReplyObject(r);
    if (*c) {
        redisFree(*c);
        *c = NULL;
    }
    if (c == &f->redis)
        f->redis_attempt_ms = feed__now_ms();
    return FEED_EREDIS;
}

/* The recorded run_id matches the live one? r is GET's reply. */
static int fence_matches(const feed_fence *fc, const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING && r->len == strlen(fc->run_id) &&
           memcmp(r->str, fc->run_id, r->len) == 0;
}

/* One step's state: the connection, its fence, the key names. */
typedef struct fence_run {
    feed          *f;
    redisContext **c;
    feed_fence    *fc;
    const char    *key;       /* the fence key */
    const char    *pattern;   /* SCAN MATCH */
    int            cluster;   /* UNLINK one key per command */
} fence_run;

static int fail(fence_run *x, const char *what, redisReply *r)
{
    return fence_fail(x->f, x->c, what, r);
}

/* The 40 hex digits after "<field>:" in an INFO reply into out; 0 if absent. */
static int info_field(const redisReply *info, const char *field, char out[41])
{
    const char *p;
    size_t len = strlen(field);

    if (info->type != REDIS_REPLY_STRING || !(p = strstr(info->str, field)) ||
        p[len] != ':' || strspn(p + len + 1, "0123456789abcdef") != 40)
        return 0;
    memcpy(out, p + len + 1, 40);
    out[40] = '\0';
    return 1;
}

/* A -MOVED or -ASK: on a cluster node, the key's slot is not (or no longer)
 * served here. */
static int redirected(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "MOVED ", 6) == 0 || strncmp(r->str, "ASK ", 4) == 0);
}

static void trust(feed_fence *fc)
{
    fc->state = FEED_FENCE_TRUSTED;
    memcpy(fc->trusted_run_id, fc->run_id, sizeof fc->run_id);
    memcpy(fc->trusted_replid, fc->replid, sizeof fc->replid);
}

static int record_run_id(fence_run *x);

/* INFO server, INFO replication and GET fence, one round trip: learn the
 * run_id and the replication id, compare.
 *
 * The same run_id and master_replid as when this handle last trusted the
 * node mean the same data set: run_id is new at every start, and
 * master_replid changes whenever the node is promoted and whenever it
 * follows another primary (it takes that primary's id), so no other data
 * set can have replaced it since. Then the fence key proves nothing more,
 * and a key that is missing or names another node (on a cluster it lives
 * in the node's lowest slot, and a reshard moves slots with their keys) is
 * written again instead of costing the node a flush. Otherwise the key
 * decides; on a cluster a key whose slot the node no longer serves (a
 * stale slot map: -MOVED, -ASK) decides nothing: the call fails, the
 * connection stays, and the next one looks again with a fresh map. */
static int first_look(fence_run *x)
{
    redisContext *c = *x->c;
    redisReply *info = NULL, *repl = NULL, *got = NULL;
    int same;

    x->f->stats.redis_calls++;
    if (redisAppendCommand(c, "INFO server") != REDIS_OK ||
        redisAppendCommand(c, "INFO replication") != REDIS_OK ||
        redisAppendCommand(c, "GET %s", x->key) != REDIS_OK ||
        redisGetReply(c, (void **)&info) != REDIS_OK)
        return fail(x, "INFO", NULL);
    if (redisGetReply(c, (void **)&repl) != REDIS_OK || redisGetReply(c, (void **)&got) != REDIS_OK) {
        freeReplyObject(info);
        freeReplyObject(repl);
        return fail(x, "GET", NULL);
    }
    if (!info_field(info, "run_id", x->fc->run_id) || !info_field(repl, "master_replid", x->fc->replid)) {
        freeReplyObject(got);
        freeReplyObject(repl);
        return fail(x, "INFO", info);
    }
    freeReplyObject(info);
    freeReplyObject(repl);
    same = x->fc->trusted_run_id[0] && strcmp(x->fc->trusted_run_id, x->fc->run_id) == 0 &&
           strcmp(x->fc->trusted_replid, x->fc->replid) == 0;
    if (got->type == REDIS_REPLY_STRING && fence_matches(x->fc, got)) {
        trust(x->fc);
    } else if (redirected(got)) {
        freeReplyObject(got);
        if (same) {
            trust(x->fc);
            return FEED_OK;
        }
        return feed__error(x->f, FEED_EREDIS, "Redis restart fence: the fence key's slot moved;"
                           " the slot map is asked again");
    } else if (got->type != REDIS_REPLY_STRING && got->type != REDIS_REPLY_NIL) {
        return fail(x, "GET", got);
    } else if (same) {
        freeReplyObject(got);
        return record_run_id(x);
    } else {
        x->fc->state = FEED_FENCE_FLUSHING;
        strcpy(x->fc->cursor, "0");
        x->f->stats.fence_flushes++;
    }
    freeReplyObject(got);
    return FEED_OK;
}

/* The keys of one SCAN batch but the fence key. */
static size_t batch_keys(const fence_run *x, const redisReply *keys, const char **argv,
                         size_t *lens)
{
    size_t n = 0, klen = strlen(x->key);

    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        if (k->type != REDIS_REPLY_STRING || (k->len == klen && !memcmp(k->str, x->key, klen)))
            continue;
        argv[n] = k->str;
        lens[n++] = k->len;
    }
    return n;
}

/* UNLINK the keys of one SCAN batch, the fence key left alone: one UNLINK
 * on a single Redis; on a cluster node one per key, each after ASKING, since
 * SCAN also returns the keys of a slot the node is importing, which it
 * serves only to a client that said ASKING (without it every pass would
 * fail on them until the migration ends). A key that left meanwhile (its
 * slot migrated away: -ASK, -MOVED) is no longer the node's to drop. */
static int unlink_batch(fence_run *x, const redisReply *keys)
{
    const char **argv;
    size_t *lens, n, cmds, per = x->cluster ? 2 : 1;
    redisReply *r = NULL;
    int rc = FEED_OK;

    if (keys->elements == 0)
        return FEED_OK;
    argv = malloc((keys->elements + 1) * sizeof *argv);
    lens = malloc((keys->elements + 1) * sizeof *lens);
    if (!argv || !lens) {
        free(argv);
        free(lens);
        return feed__error(x->f, FEED_ENOMEM, "out of memory flushing after a restart");
    }
    argv[0] = "UNLINK";
    lens[0] = 6;
    n = batch_keys(x, keys, argv + 1, lens + 1);
    cmds = x->cluster ? n : n > 0;
    for (size_t i = 0; i < cmds && rc == FEED_OK; i++) {
        const char *one[2] = { "UNLINK", argv[1 + i] };
        size_t one_len[2] = { 6, lens[1 + i] };
        if (x->cluster ? redisAppendCommand(*x->c, "ASKING") != REDIS_OK ||
                         redisAppendCommandArgv(*x->c, 2, one, one_len) != REDIS_OK
                       : redisAppendCommandArgv(*x->c, (int)n + 1, argv, lens) != REDIS_OK)
            rc = fail(x, "UNLINK", NULL);
    }
    free(argv);
    free(lens);
    if (cmds > 0 && rc == FEED_OK)
        x->f->stats.redis_calls++;
    for (size_t i = 0; i < cmds * per && rc == FEED_OK; i++) {
        int asking = x->cluster && i % 2 == 0;
        if (redisGetReply(*x->c, (void **)&r) != REDIS_OK ||
            !(asking ? r->type == REDIS_REPLY_STATUS
                     : r->type == REDIS_REPLY_INTEGER || (x->cluster && redirected(r))))
            rc = fail(x, asking ? "ASKING" : "UNLINK", r);
        else
            freeReplyObject(r);
        r = NULL;
    }
    return rc;
}

/* One pass step: GET fence (someone finished?) and SCAN, one round trip;
 * then UNLINK what SCAN found. */
static int flush_step(fence_run *x)
{
    redisContext *c = *x->c;
    redisReply *got = NULL, *scan = NULL;
    int rc;

    x->f->stats.redis_calls++;
    if (redisAppendCommand(c, "GET %s", x->key) != REDIS_OK ||
        redisAppendCommand(c, "SCAN %s MATCH %s COUNT 1000", x->fc->cursor, x->pattern) != REDIS_OK ||
        redisGetReply(c, (void **)&got) != REDIS_OK)
        return fail(x, "GET", NULL);
    if (redisGetReply(c, (void **)&scan) != REDIS_OK) {
        freeReplyObject(got);
        return fail(x, "SCAN", NULL);
    }
    if (fence_matches(x->fc, got)) {      /* another handle finished the pass */
        freeReplyObject(got);
        freeReplyObject(scan);
        trust(x->fc);
        return FEED_OK;
    }
    freeReplyObject(got);
    if (scan->type != REDIS_REPLY_ARRAY || scan->elements != 2 ||
        scan->element[0]->type != REDIS_REPLY_STRING ||
        scan->element[0]->len >= sizeof x->fc->cursor ||
        scan->element[1]->type != REDIS_REPLY_ARRAY)
        return fail(x, "SCAN", scan);
    rc = unlink_batch(x, scan->element[1]);
    if (rc == FEED_OK) {
        memcpy(x->fc->cursor, scan->element[0]->str, scan->element[0]->len);
        x->fc->cursor[scan->element[0]->len] = '\0';
    }
    freeReplyObject(scan);
    return rc;
}

static int record_run_id(fence_run *x)
{
    redisReply *r = redisCommand(*x->c, "SET %s %s", x->key, x->fc->run_id);

    x->f->stats.redis_calls++;
    if (!r || r->type == REDIS_REPLY_ERROR)
        return fail(x, "SET", r);
    freeReplyObject(r);
    trust(x->fc);
    return FEED_OK;
}

int feed__fence_step(feed *f, redisContext **c, feed_fence *fc, int slot)
{
    size_t cap = 2 * f->key_cap + 32;    /* the prefix, each byte maybe escaped; a tag */
    char *key = malloc(2 * cap), *pattern = key + cap;
    int64_t deadline = feed__now_ms() + f->cfg.redis_timeout_ms;
    fence_run x = { f, c, fc, key, pattern, slot >= 0 };
    int rc;

    if (!key)
        return feed__error(f, FEED_ENOMEM, "out of memory checking the restart fence");
    rc = fence_key(f, slot, key, cap);
    scan_pattern(f, pattern, cap);
    if (rc == FEED_OK && fc->state == FEED_FENCE_UNKNOWN)
        rc = first_look(&x);
    while (rc == FEED_OK && fc->state == FEED_FENCE_FLUSHING && feed__now_ms() < deadline) {
        rc = flush_step(&x);
        if (rc == FEED_OK && fc->state == FEED_FENCE_FLUSHING && strcmp(fc->cursor, "0") == 0)
            rc = record_run_id(&x);
    }
    free(key);
    return rc;
}
