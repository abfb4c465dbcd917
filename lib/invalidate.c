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

/* One Redis: SCAN it. On a Redis Cluster the keys of a prefix are spread
 * over every primary, and SCAN sees one node's: the loop below would have
 * to run once per primary (and the DEL of a page be split by slot). Until
 * it does, a cluster handle refuses: dropping some copies and reporting
 * success would leave the others stale. */
int feed_invalidate_all(feed *f, uint64_t *dropped)
{
    char cursor[32] = "0";
    char *pattern;
    int rc = FEED_OK;

    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if (dropped)
        *dropped = 0;
    if (f->cfg.redis_cluster)
        return feed__error(f, FEED_EINVAL, "feed_invalidate_all: not supported on a Redis"
                           " Cluster yet; drop the feeds with feed_invalidate_many");
    if (!(pattern = scan_pattern(f->cfg.key_prefix)))
        return feed__error(f, FEED_ENOMEM, "out of memory for a SCAN pattern");
    do {
        const char *argv[6] = { "SCAN", cursor, "MATCH", pattern, "COUNT", "1000" };
        redisReply *r = feed__redis_command(f, 6, argv, NULL);

        if (!r) {
            rc = FEED_EREDIS;
            break;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
            r->element[0]->type != REDIS_REPLY_STRING || r->element[0]->len >= sizeof cursor ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            freeReplyObject(r);
            f->stats.redis_errors++;
            rc = feed__error(f, FEED_EREDIS, "Redis SCAN: unexpected reply");
            break;
        }
        memcpy(cursor, r->element[0]->str, r->element[0]->len + 1);
        rc = drop_page(f, r->element[1], dropped);
        freeReplyObject(r);
    } while (rc == FEED_OK && strcmp(cursor, "0") != 0);
    free(pattern);
    return rc;
}
