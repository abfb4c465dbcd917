/* invalidate.c -- dropping cached copies in bulk: what a change log
 * (feedcache-sync) needs. One DEL of a feed's copy and lease is always safe:
 * an absent copy is rebuilt from SQL by the next read, and without its lease
 * a rebuild that read SQL before the change can never install. So these
 * calls are idempotent and commute with every hook, rebuild and with each
 * other: replaying them, late or twice, cannot make a copy wrong.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct many_args {
    feed          *f;
    const int64_t *uids;
    char          *keys;      /* key, lease: f->key_cap bytes each */
} many_args;

static int many_fill(void *arg, size_t i, const char **argv, size_t *lens, int *nkeys)
{
    many_args *a = arg;
    char *key = a->keys, *lease = a->keys + a->f->key_cap;

    feed__keys_of(a->f, a->uids[i], key, lease);
    argv[0] = key;
    argv[1] = lease;
    lens[0] = strlen(key);
    lens[1] = strlen(lease);
    *nkeys = 2;
    return 2;
}

int feed_invalidate_many(feed *f, const int64_t *uids, size_t n)
{
    many_args a;
    int rc;

    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if (!uids && n > 0)
        return feed__error(f, FEED_EINVAL, "feed_invalidate_many: uids is NULL");
    if (n == 0)
        return FEED_OK;
    a.f = f;
    a.uids = uids;
    a.keys = malloc(2 * f->key_cap);
    if (!a.keys)
        return feed__error(f, FEED_ENOMEM, "out of memory invalidating %zu feeds", n);
    rc = feed__redis_script_many(f, FEED_SCRIPT_INVALIDATE, n, 2, many_fill, &a);
    free(a.keys);
    /* Which feeds were dropped is unknown: each goes on the process-wide
     * repair list, like the feed of a failed hook. */
    if (rc == FEED_EREDIS)
        for (size_t i = 0; i < n; i++)
            feed__redis_remember(f, uids[i]);
    return rc;
}

/* SCAN's MATCH is a glob: the prefix's own '*', '?', '[', ']' and '\' must
 * match themselves. Returns a malloc'd "<escaped prefix>:2:{*" (2 is
 * FEED_KEY_VERSION: copies in another key format are never read, so they
 * are left to their TTL). */
static char *scan_pattern(const char *prefix)
{
    size_t len = strlen(prefix);
    char *pat = malloc(2 * len + sizeof ":" FEED_KEY_VERSION ":{*"), *p = pat;

    if (!pat)
        return NULL;
    for (const char *s = prefix; *s; s++) {
        if (strchr("*?[]\\", *s))
            *p++ = '\\';
        *p++ = *s;
    }
    memcpy(p, ":" FEED_KEY_VERSION ":{*", sizeof ":" FEED_KEY_VERSION ":{*");
    return pat;
}

/* DEL the keys of one SCAN page. */
static int drop_page(feed *f, const redisReply *keys, uint64_t *dropped)
{
    const char **argv;
    size_t *lens;
    redisReply *r;

    if (keys->elements == 0)
        return FEED_OK;
    argv = malloc((keys->elements + 1) * sizeof *argv);
    lens = malloc((keys->elements + 1) * sizeof *lens);
    if (!argv || !lens) {
        free(argv);
        free(lens);
        return feed__error(f, FEED_ENOMEM, "out of memory dropping %zu keys", keys->elements);
    }
    argv[0] = "DEL";
    lens[0] = 3;
    for (size_t i = 0; i < keys->elements; i++) {
        if (keys->element[i]->type != REDIS_REPLY_STRING) {
            free(argv);
            free(lens);
            return feed__error(f, FEED_EREDIS, "Redis SCAN: a key is not a string");
        }
        argv[i + 1] = keys->element[i]->str;
        lens[i + 1] = keys->element[i]->len;
    }
    r = feed__redis_command(f, (int)keys->elements + 1, argv, lens);
    free(argv);
    free(lens);
    if (!r)
        return FEED_EREDIS;
    if (r->type == REDIS_REPLY_INTEGER && dropped)
        *dropped += (uint64_t)r->integer;
    freeReplyObject(r);
    return FEED_OK;
}

/* One SCAN reply: its keys (r->element[1]) and the next cursor, or
 * FEED_EREDIS. */
static int scan_reply(feed *f, const redisReply *r, char cursor[32])
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= 32 ||
        r->element[1]->type != REDIS_REPLY_ARRAY) {
        f->stats.redis_errors++;
        return feed__error(f, FEED_EREDIS, "Redis SCAN: %s",
                           r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
    }
    memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
    return FEED_OK;
}

/* One Redis: SCAN it, DEL page by page. */
static int invalidate_one(feed *f, const char *pattern, uint64_t *dropped)
{
    char cursor[32] = "0";
    int rc = FEED_OK;

    do {
        const char *argv[6] = { "SCAN", cursor, "MATCH", pattern, "COUNT", "1000" };
        redisReply *r = feed__redis_command(f, 6, argv, NULL);

        if (!r)
            return FEED_EREDIS;
        if ((rc = scan_reply(f, r, cursor)) == FEED_OK)
            rc = drop_page(f, r->element[1], dropped);
        freeReplyObject(r);
    } while (rc == FEED_OK && strcmp(cursor, "0") != 0);
    return rc;
}

/* ---- A Redis Cluster: every primary ----
 *
 * Each primary is SCANned on its own connection (feed__cluster_each_primary)
 * and the keys of a page are DELed there, one DEL per key (the keys of a
 * page lie on many slots), pipelined: one round trip per page. A key that
 * left the node between its SCAN and its DEL (MOVED, ASK) is kept aside and
 * DELed after the walk through the routed path, which follows it.
 *
 * SCAN promises the keys that stay on one node while it runs, not keys that
 * move from a node not yet scanned to one already scanned: a slot migrating
 * (resharding) or a failover during the walk. So after the walk the map is
 * asked again and every primary says whether it has a slot migrating or
 * importing (CLUSTER NODES, its "myself" line: "[slot->-id]" / "[slot-<-id]").
 * Same map and nothing migrating: no key changed node during the walk, so
 * each one there before the call was met on its node and dropped. Else the
 * walk runs again (MAX_PASSES in all, then FEED_EREDIS: call again once the
 * resharding is over). A primary that fails mid-walk fails the call (the
 * caller calls again once a replica has taken over). */
/* A cluster's primaries are walked at most this many times by one
 * feed_invalidate_all: a slot map that keeps moving fails the call. */
#define MAX_PASSES 3

typedef struct scan_all {
    const char *pattern;
    uint64_t    dropped;
    char      **away;           /* keys that left their node: DEL them routed */
    size_t     *away_len, naway, cap;
} scan_all;

static int keep_away(feed *f, scan_all *a, const redisReply *key)
{
    char *copy;

    if (a->naway == a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 16;
        char **keys = realloc(a->away, cap * sizeof *keys);
        size_t *lens = keys ? realloc(a->away_len, cap * sizeof *lens) : NULL;
        if (keys)
            a->away = keys;
        if (!keys || !lens)
            return feed__error(f, FEED_ENOMEM, "out of memory for moved keys");
        a->away_len = lens;
        a->cap = cap;
    }
    if ((copy = malloc(key->len + 1)) == NULL)
        return feed__error(f, FEED_ENOMEM, "out of memory for moved keys");
    memcpy(copy, key->str, key->len + 1);
    a->away[a->naway] = copy;
    a->away_len[a->naway++] = key->len;
    return FEED_OK;
}

/* DEL each key of a SCAN page on node c, pipelined. FEED_EUNAVAILABLE: c
 * is out of step (feed__cluster_each_primary drops it). */
static int drop_on_node(feed *f, redisContext *c, const feed_addr *node,
                        const redisReply *keys, scan_all *a)
{
    int rc = FEED_OK;

    for (size_t i = 0; i < keys->elements; i++)
        if (keys->element[i]->type != REDIS_REPLY_STRING) {
            f->stats.redis_errors++;
            return feed__error(f, FEED_EREDIS, "Redis SCAN: a key is not a string");
        }
    for (size_t i = 0; i < keys->elements; i++) {
        const char *argv[2] = { "DEL", keys->element[i]->str };
        size_t lens[2] = { 3, keys->element[i]->len };
        if (redisAppendCommandArgv(c, 2, argv, lens) != REDIS_OK)
            return FEED_EUNAVAILABLE;
    }
    if (keys->elements > 0)
        f->stats.redis_calls++;
    /* Every reply is read, even after a refusal: the connection stays in
     * step. */
    for (size_t i = 0; i < keys->elements; i++) {
        redisReply *r = NULL;
        feed_addr to;
        if (redisGetReply(c, (void **)&r) != REDIS_OK || !r)
            return FEED_EUNAVAILABLE;
        if (r->type == REDIS_REPLY_INTEGER) {
            a->dropped += (uint64_t)r->integer;
        } else if (feed__classify(r, node->host, &to) != FEED_V_DONE) {
            if (rc == FEED_OK)
                rc = keep_away(f, a, keys->element[i]);
        } else if (rc == FEED_OK) {
            f->stats.redis_errors++;
            rc = feed__error(f, FEED_EREDIS, "Redis %s:%d DEL: %s", node->host, node->port,
                             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        }
        freeReplyObject(r);
    }
    return rc;
}

static int scan_node(feed *f, redisContext *c, const feed_addr *node, void *arg)
{
    scan_all *a = arg;
    char cursor[32] = "0";
    int rc = FEED_OK;

    do {
        const char *argv[6] = { "SCAN", cursor, "MATCH", a->pattern, "COUNT", "1000" };
        redisReply *r;

        f->stats.redis_calls++;
        if ((r = redisCommandArgv(c, 6, argv, NULL)) == NULL)
            return FEED_EUNAVAILABLE;
        if ((rc = scan_reply(f, r, cursor)) == FEED_OK)
            rc = drop_on_node(f, c, node, r->element[1], a);
        freeReplyObject(r);
    } while (rc == FEED_OK && strcmp(cursor, "0") != 0);
    if (rc == FEED_OK && f->test_after_node_scan)
        f->test_after_node_scan(f, node->port, f->test_arg);
    return rc;
}

/* Is a slot migrating to or from this node? CLUSTER NODES's "myself" line
 * lists them in brackets. */
static int node_settled(feed *f, redisContext *c, const feed_addr *node, void *arg)
{
    const char *argv[2] = { "CLUSTER", "NODES" };
    const char *me, *start, *end;
    redisReply *r;

    f->stats.redis_calls++;
    if ((r = redisCommandArgv(c, 2, argv, NULL)) == NULL)
        return FEED_EUNAVAILABLE;
    if (r->type != REDIS_REPLY_STRING ||
        (me = strstr(r->str, "myself")) == NULL) {
        f->stats.redis_errors++;
        feed__error(f, FEED_EREDIS, "Redis %s:%d CLUSTER NODES: %s", node->host, node->port,
                    r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        freeReplyObject(r);
        return FEED_EREDIS;
    }
    for (start = me; start > r->str && start[-1] != '\n'; start--) {}
    if ((end = strchr(me, '\n')) == NULL)
        end = me + strlen(me);
    if (memchr(start, '[', (size_t)(end - start)))
        *(int *)arg = 1;
    freeReplyObject(r);
    return FEED_OK;
}

/* The keys kept aside, each DELed where its slot lives now. */
static int drop_away(feed *f, scan_all *a)
{
    int rc = FEED_OK;

    for (size_t i = 0; i < a->naway; i++) {
        const char *argv[2] = { "DEL", a->away[i] };
        size_t lens[2] = { 3, a->away_len[i] };
        redisReply *r = rc == FEED_OK ? feed__redis_command(f, 2, argv, lens) : NULL;

        if (rc == FEED_OK && !r)
            rc = FEED_EREDIS;
        else if (r && r->type == REDIS_REPLY_INTEGER)
            a->dropped += (uint64_t)r->integer;
        else if (r) {
            f->stats.redis_errors++;
            rc = feed__error(f, FEED_EREDIS, "Redis DEL: %s",
                             r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        }
        freeReplyObject(r);
        free(a->away[i]);
    }
    a->naway = 0;
    return rc;
}

static int invalidate_cluster(feed *f, const char *pattern, uint64_t *dropped)
{
    scan_all a = { pattern, 0, NULL, NULL, 0, 0 };
    int rc, pass = 1;

    if ((rc = feed__cluster_ready(f)) != FEED_OK)
        return rc == FEED_ENOMEM ? rc : FEED_EREDIS;
    for (;; pass++) {
        uint64_t before = 0, after = 0;
        int moving = 0;

        rc = feed__cluster_each_primary(f, scan_node, &a, &before);
        if (rc == FEED_OK)
            rc = drop_away(f, &a);
        for (size_t i = 0; i < a.naway; i++)    /* left by a failure */
            free(a.away[i]);
        a.naway = 0;
        if (rc == FEED_OK)
            rc = feed__cluster_each_primary(f, node_settled, &moving, &after);
        if (rc != FEED_OK || (before == after && !moving))
            break;
        if (pass == MAX_PASSES) {
            f->stats.redis_errors++;
            rc = feed__error(f, FEED_EREDIS, "Redis Cluster: slots moved during each of %d "
                             "scans of every primary (resharding or failover); call again",
                             MAX_PASSES);
            break;
        }
    }
    free(a.away);
    free(a.away_len);
    if (dropped)
        *dropped = a.dropped;
    return rc;
}

/* Keys of this prefix and key format, dropped: SCAN on a single Redis, on
 * every primary of a cluster (see above). */
int feed_invalidate_all(feed *f, uint64_t *dropped)
{
    char *pattern;
    int rc;

    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if (dropped)
        *dropped = 0;
    if (!(pattern = scan_pattern(f->cfg.key_prefix)))
        return feed__error(f, FEED_ENOMEM, "out of memory for a SCAN pattern");
    rc = f->cfg.redis_cluster ? invalidate_cluster(f, pattern, dropped)
                              : invalidate_one(f, pattern, dropped);
    free(pattern);
    return rc;
}
