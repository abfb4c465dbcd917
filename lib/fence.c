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
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* "<prefix>:fence" and the SCAN pattern "<prefix>:*", glob characters of the
 * prefix escaped. */
static void fence_key(const feed *f, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s:fence", f->cfg.key_prefix);
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

static int fence_fail(feed *f, const char *what, redisReply *r)
{
    f->stats.redis_errors++;
    feed__error(f, FEED_EREDIS, "Redis %s (restart fence): %s", what,
                r && r->type == REDIS_REPLY_ERROR ? r->str : f->redis && f->redis->errstr[0]
                ? f->redis->errstr : "unexpected reply");
    freeReplyObject(r);
    feed__redis_drop(f);   /* never leave a connection half-read */
    f->redis_attempt_ms = feed__now_ms();
    return FEED_EREDIS;
}

/* The recorded run_id matches the live one? r is GET's reply. */
static int fence_matches(const feed *f, const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING && r->len == strlen(f->run_id) &&
           memcmp(r->str, f->run_id, r->len) == 0;
}

/* INFO server and GET fence, one round trip: learn the run_id, compare. */
static int first_look(feed *f, const char *key)
{
    redisReply *info = NULL, *got = NULL;
    const char *p;

    f->stats.redis_calls++;
    if (redisAppendCommand(f->redis, "INFO server") != REDIS_OK ||
        redisAppendCommand(f->redis, "GET %s", key) != REDIS_OK ||
        redisGetReply(f->redis, (void **)&info) != REDIS_OK)
        return fence_fail(f, "INFO", NULL);
    if (redisGetReply(f->redis, (void **)&got) != REDIS_OK) {
        freeReplyObject(info);
        return fence_fail(f, "GET", NULL);
    }
    if (info->type != REDIS_REPLY_STRING || !(p = strstr(info->str, "run_id:")) ||
        strspn(p + 7, "0123456789abcdef") != 40) {
        freeReplyObject(got);
        return fence_fail(f, "INFO", info);
    }
    memcpy(f->run_id, p + 7, 40);
    f->run_id[40] = '\0';
    freeReplyObject(info);
    if (got->type != REDIS_REPLY_STRING && got->type != REDIS_REPLY_NIL)
        return fence_fail(f, "GET", got);
    if (fence_matches(f, got)) {
        f->fence_state = FEED_FENCE_TRUSTED;
    } else {
        f->fence_state = FEED_FENCE_FLUSHING;
        strcpy(f->fence_cursor, "0");
        f->stats.fence_flushes++;
    }
    freeReplyObject(got);
    return FEED_OK;
}

/* UNLINK the keys of one SCAN batch, the fence key left alone. */
static int unlink_batch(feed *f, const redisReply *keys, const char *key)
{
    const char **argv;
    size_t *lens, n = 1;
    redisReply *r;

    if (keys->elements == 0)
        return FEED_OK;
    argv = malloc((keys->elements + 1) * sizeof *argv);
    lens = malloc((keys->elements + 1) * sizeof *lens);
    if (!argv || !lens) {
        free(argv);
        free(lens);
        return feed__error(f, FEED_ENOMEM, "out of memory flushing after a restart");
    }
    argv[0] = "UNLINK";
    lens[0] = 6;
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        if (k->type != REDIS_REPLY_STRING || (k->len == strlen(key) && !memcmp(k->str, key, k->len)))
            continue;
        argv[n] = k->str;
        lens[n++] = k->len;
    }
    r = n > 1 ? redisCommandArgv(f->redis, (int)n, argv, lens) : NULL;
    free(argv);
    free(lens);
    if (n == 1)
        return FEED_OK;
    f->stats.redis_calls++;
    if (!r || r->type != REDIS_REPLY_INTEGER)
        return fence_fail(f, "UNLINK", r);
    freeReplyObject(r);
    return FEED_OK;
}

/* One pass step: GET fence (someone finished?) and SCAN, one round trip;
 * then UNLINK what SCAN found. */
static int flush_step(feed *f, const char *key, const char *pattern)
{
    redisReply *got = NULL, *scan = NULL;
    int rc;

    f->stats.redis_calls++;
    if (redisAppendCommand(f->redis, "GET %s", key) != REDIS_OK ||
        redisAppendCommand(f->redis, "SCAN %s MATCH %s COUNT 1000", f->fence_cursor, pattern) != REDIS_OK ||
        redisGetReply(f->redis, (void **)&got) != REDIS_OK)
        return fence_fail(f, "GET", NULL);
    if (redisGetReply(f->redis, (void **)&scan) != REDIS_OK) {
        freeReplyObject(got);
        return fence_fail(f, "SCAN", NULL);
    }
    if (fence_matches(f, got)) {          /* another handle finished the pass */
        freeReplyObject(got);
        freeReplyObject(scan);
        f->fence_state = FEED_FENCE_TRUSTED;
        return FEED_OK;
    }
    freeReplyObject(got);
    if (scan->type != REDIS_REPLY_ARRAY || scan->elements != 2 ||
        scan->element[0]->type != REDIS_REPLY_STRING ||
        scan->element[0]->len >= sizeof f->fence_cursor ||
        scan->element[1]->type != REDIS_REPLY_ARRAY)
        return fence_fail(f, "SCAN", scan);
    rc = unlink_batch(f, scan->element[1], key);
    if (rc == FEED_OK) {
        memcpy(f->fence_cursor, scan->element[0]->str, scan->element[0]->len);
        f->fence_cursor[scan->element[0]->len] = '\0';
    }
    freeReplyObject(scan);
    return rc;
}

static int record_run_id(feed *f, const char *key)
{
    redisReply *r = redisCommand(f->redis, "SET %s %s", key, f->run_id);

    f->stats.redis_calls++;
    if (!r || r->type == REDIS_REPLY_ERROR)
        return fence_fail(f, "SET", r);
    freeReplyObject(r);
    f->fence_state = FEED_FENCE_TRUSTED;
    return FEED_OK;
}

int feed__fence_step(feed *f)
{
    size_t cap = 2 * f->key_cap + 8;     /* the prefix, each byte maybe escaped */
    char *key = malloc(2 * cap), *pattern = key + cap;
    int64_t deadline = feed__now_ms() + f->cfg.redis_timeout_ms;
    int rc = FEED_OK;

    if (!key)
        return feed__error(f, FEED_ENOMEM, "out of memory checking the restart fence");
    fence_key(f, key, cap);
    scan_pattern(f, pattern, cap);
    if (f->fence_state == FEED_FENCE_UNKNOWN)
        rc = first_look(f, key);
    while (rc == FEED_OK && f->fence_state == FEED_FENCE_FLUSHING && feed__now_ms() < deadline) {
        rc = flush_step(f, key, pattern);
        if (rc == FEED_OK && f->fence_state == FEED_FENCE_FLUSHING &&
            strcmp(f->fence_cursor, "0") == 0)
            rc = record_run_id(f, key);
    }
    free(key);
    return rc;
}
