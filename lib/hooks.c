/* hooks.c -- the write path: what an application calls after its SQL
 * transaction commits. Each hook is one script call (fan-out: one pipeline)
 * that keeps the cache an exact prefix of the feed; lua/insert.lua and
 * lua/delete.lua say how. Every hook also deletes the feed's lease, which
 * is what stops a rebuild that read SQL before this write from installing.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static int check_item(feed *f, const char *hook, int64_t score, int64_t id)
{
    if (id < 0)
        return feed__error(f, FEED_EINVAL, "%s: id %lld is negative", hook, (long long)id);
    if (!feed__score_ok(score))
        return feed__error(f, FEED_ERANGE, "%s: score %lld is outside +/-(2^53-1)",
                           hook, (long long)score);
    return FEED_OK;
}

/* From here until note_failure the Redis calls are a hook's: WAITed when
 * redis_wait_replicas asks for it, and allowed before the restart fence is
 * cleared (redis.c). Every path after hook_begin ends in note_failure. */
static void hook_begin(feed *f)
{
    f->in_hook = 1;
    f->wait_short = 0;
}

/* A write that failed, because Redis could not be reached (the connection
 * is down: refused, timed out, or not retried yet), because it answered
 * with an error (an ACL, OOM, a script error), or because too few replicas
 * acknowledged it (WAIT, redis_wait_replicas: a failover may lose it), may
 * leave uid's cached copy stale while Redis keeps it. The first handle to
 * reach that Redis and have a DEL accepted drops the copy (redis.c,
 * repair); here we only take note. */
static int note_failure(feed *f, int rc, int64_t uid)
{
    f->in_hook = 0;
    if (rc == FEED_EREDIS && !feed__redis_remember(f, uid)) {
        size_t len = strlen(f->errmsg);
        snprintf(f->errmsg + len, sizeof f->errmsg - len,
                 "; too many feeds to repair: call feed_invalidate(%lld) later",
                 (long long)uid);
    }
    return rc;
}

/* A script's reply must be an integer; anything else is a Redis fault. */
static int integer_reply(feed *f, redisReply *r, const char *what)
{
    int rc = FEED_OK;

    if (!r)
        return FEED_EREDIS;
    if (r->type != REDIS_REPLY_INTEGER) {
        f->stats.redis_errors++;
        rc = feed__error(f, FEED_EREDIS, "Redis %s: unexpected reply type %d", what, r->type);
    }
    freeReplyObject(r);
    return rc;
}

/* The arguments of insert.lua: one feed, or in a fan-out a batch of feeds
 * whose keys are rewritten for each call (hiredis copies each command as it
 * is appended). */
typedef struct insert_args {
    feed          *f;
    const int64_t *uids;       /* fan-out: the feeds, batch after batch */
    const size_t  *batch;      /* fan-out: call i has feeds batch[i] .. batch[i + 1] */
    char          *keys;       /* fan-out: 2 * FANOUT_BATCH keys of f->key_cap bytes */
    int            by_node;    /* fan-out on a cluster: a batch is one node's */
    int64_t       *away;       /* ... the feeds its node did not serve, */
    size_t         naway, cap; /* ... so many, room for so many */
    int            bad_reply;  /* ... a reply that named no such feed */
    char           score[21];
    char           member[FEED_MEMBER_MAX];
    size_t         member_len;
    char           max_len[21];
    char           count[21];  /* fan-out: feeds of the current call */
} insert_args;

static void insert_args_init(insert_args *a, feed *f, int64_t score, int64_t id)
{
    memset(a, 0, sizeof *a);
    a->f = f;
    feed__i64_to_str(score, a->score);
    a->member_len = feed__member_encode(id, a->member);
    feed__i64_to_str((int64_t)f->cfg.max_len, a->max_len);
}

static void insert_argv(insert_args *a, const char **argv, size_t *lens)
{
    argv[0] = a->f->key;
    argv[1] = a->f->lease_key;
    argv[2] = a->score;
    argv[3] = a->member;
    argv[4] = a->max_len;
    for (int i = 0; i < 5; i++)
        lens[i] = i == 3 ? a->member_len : strlen(argv[i]);
}

int feed_on_insert(feed *f, int64_t uid, int64_t score, int64_t id)
{
    const char *argv[5];
    size_t lens[5];
    insert_args a;
    int rc;

    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if ((rc = check_item(f, "feed_on_insert", score, id)) != FEED_OK)
        return rc;
    feed__set_keys(f, uid);
    insert_args_init(&a, f, score, id);
    insert_argv(&a, argv, lens);
    hook_begin(f);
    rc = integer_reply(f, feed__redis_script(f, FEED_SCRIPT_INSERT, 2, 5, argv, lens),
                       "insert.lua");
    return note_failure(f, rc, uid);
}

/* A fan-out sends insert.lua once per batch of feeds, all the calls in one
 * pipeline. Batches because a script call has a fixed cost in Redis before
 * its first line, comparable to the insert itself, which one call per feed
 * would pay per feed (figures: bench/results/latest/latest.md, "Fan-out").
 * 100 keeps one call short in Redis time.
 *
 * On a Redis Cluster the keys a call declares must share a hash slot, and
 * 10,000 feeds fall in ~7,400 slots. So a batch is the feeds one node
 * serves by the slot map, and the call declares none of them: the node
 * updates those it serves and names back the others (insert.lua,
 * "Undeclared feeds"), which go out again by slot, declared, like a single
 * hook: a few, after a reshard the map had not seen yet. The call is routed
 * by its first argument, its first feed's key (cluster_io.c routes EVALSHA
 * by argv[3]); a call without keys is never redirected. */
#define FANOUT_BATCH 100

/* Call i: the feeds of batch i, then insert.lua's four arguments; by node,
 * the feeds as arguments, then score, member, max_len. */
static int fanout_fill(void *arg, size_t i, const char **argv, size_t *lens, int *nkeys)
{
    insert_args *a = arg;
    size_t first = a->batch[i], count = a->batch[i + 1] - first;
    size_t cap = a->f->key_cap, k = 0;

    for (size_t j = 0; j < count; j++) {
        char *key = a->keys + 2 * j * cap, *lease = key + cap;
        feed__keys_of(a->f, a->uids[first + j], key, lease);
        argv[k++] = key;
        argv[k++] = lease;
    }
    *nkeys = a->by_node ? 0 : (int)k;
    feed__i64_to_str((int64_t)count, a->count);
    argv[k++] = a->score;
    argv[k++] = a->member;
    argv[k++] = a->max_len;
    if (!a->by_node)
        argv[k++] = a->count;
    for (size_t j = 0; j < k; j++)
        lens[j] = argv[j] == a->member ? a->member_len : strlen(argv[j]);
    return (int)k;
}

/* Call i's reply, by node: an array of the positions (1 = the batch's
 * first feed) of the feeds its node did not serve; they go out again. */
static void fanout_reply(void *arg, size_t i, const redisReply *r)
{
    insert_args *a = arg;
    size_t first = a->batch[i], count = a->batch[i + 1] - first;

    if (r->type == REDIS_REPLY_INTEGER && !a->by_node)
        return;
    if (r->type != REDIS_REPLY_ARRAY || !a->by_node) {
        a->bad_reply = 1;
        return;
    }
    for (size_t e = 0; e < r->elements; e++) {
        const redisReply *k = r->element[e];
        if (k->type != REDIS_REPLY_INTEGER || k->integer < 1 || (size_t)k->integer > count ||
            a->naway == a->cap) {
            a->bad_reply = 1;
            return;
        }
        a->away[a->naway++] = a->uids[first + (size_t)k->integer - 1];
    }
}

typedef struct slot_uid {
    int      node;          /* by node: the slot's owner by the map, else 0 */
    unsigned slot;
    int64_t  uid;
} slot_uid;

static int by_slot(const void *x, const void *y)
{
    const slot_uid *a = x, *b = y;

    if (a->node != b->node)
        return a->node < b->node ? -1 : 1;
    return a->slot < b->slot ? -1 : a->slot > b->slot;
}

/* Cut n feeds into batches: evenly into ceil(n / FANOUT_BATCH) on a single
 * Redis; on a cluster, by node or by slot (*sorted then holds the uids in
 * that order). batch gets n + 1 entries at most; returns the number of
 * calls. */
static size_t fanout_batches(feed *f, const int64_t *uids, size_t n, int by_node,
                             int64_t *sorted, size_t *batch)
{
    size_t calls = 0;

    if (!f->cfg.redis_cluster) {
        size_t c = (n + FANOUT_BATCH - 1) / FANOUT_BATCH, per = (n + c - 1) / c;
        memcpy(sorted, uids, n * sizeof *uids);
        for (size_t first = 0; first < n; first += per)
            batch[calls++] = first;
    } else {
        slot_uid *su = malloc(n * sizeof *su);
        if (!su)
            return 0;
        for (size_t i = 0; i < n; i++) {
            su[i].slot = feed__uid_slot(uids[i]);
            su[i].node = by_node ? feed__cluster_owner(f, su[i].slot) : 0;
            su[i].uid = uids[i];
        }
        qsort(su, n, sizeof *su, by_slot);
        for (size_t i = 0; i < n; i++) {
            sorted[i] = su[i].uid;
            if (i == 0 || su[i].node != su[i - 1].node ||
                (!by_node && su[i].slot != su[i - 1].slot) ||
                i - batch[calls - 1] == FANOUT_BATCH)
                batch[calls++] = i;
        }
        free(su);
    }
    batch[calls] = n;
    return calls;
}

/* One pipeline of insert.lua calls for n feeds (by node: feeds a node did
 * not serve are added to a->away). */
static int fanout_send(feed *f, insert_args *a, const int64_t *uids, size_t n, int by_node)
{
    int64_t *sorted = malloc(n * sizeof *sorted);
    size_t *batch = malloc((n + 1) * sizeof *batch), calls;
    int rc;

    calls = sorted && batch ? fanout_batches(f, uids, n, by_node, sorted, batch) : 0;
    if (calls == 0) {
        free(sorted);
        free(batch);
        return feed__error(f, FEED_ENOMEM, "out of memory for a fan-out of %zu", n);
    }
    a->uids = sorted;
    a->batch = batch;
    a->by_node = by_node;
    a->bad_reply = 0;
    rc = feed__redis_script_many_r(f, FEED_SCRIPT_INSERT, calls, 2 * FANOUT_BATCH + 4,
                                   fanout_fill, fanout_reply, a);
    if (rc == FEED_OK && a->bad_reply) {
        f->stats.redis_errors++;
        rc = feed__error(f, FEED_EREDIS, "Redis insert.lua: unexpected reply to a fan-out");
    }
    free(sorted);
    free(batch);
    return rc;
}

int feed_fanout(feed *f, const int64_t *uids, size_t n, int64_t score, int64_t id)
{
    insert_args a;
    int rc;

    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if (!uids && n > 0)
        return feed__error(f, FEED_EINVAL, "feed_fanout: uids is NULL");
    if ((rc = check_item(f, "feed_fanout", score, id)) != FEED_OK)
        return rc;
    if (n == 0)
        return FEED_OK;
    insert_args_init(&a, f, score, id);
    a.keys = malloc(2 * FANOUT_BATCH * f->key_cap);
    a.away = f->cfg.redis_cluster ? malloc(n * sizeof *a.away) : NULL;
    a.cap = n;
    if (!a.keys || (f->cfg.redis_cluster && !a.away)) {
        free(a.keys);
        free(a.away);
        return feed__error(f, FEED_ENOMEM, "out of memory for a fan-out of %zu", n);
    }
    hook_begin(f);
    rc = fanout_send(f, &a, uids, n, f->cfg.redis_cluster != NULL);
    if (rc == FEED_OK && a.naway > 0)
        rc = fanout_send(f, &a, a.away, a.naway, 0);
    free(a.keys);
    free(a.away);
    if (rc == FEED_OK || rc == FEED_ENOMEM)
        return note_failure(f, rc, 0);
    for (size_t i = 0; i < n; i++)   /* which feeds got the write is unknown */
        note_failure(f, FEED_EREDIS, uids[i]);
    return FEED_EREDIS;
}

int feed_on_delete(feed *f, int64_t uid, int64_t id)
{
    char member[FEED_MEMBER_MAX];
    const char *argv[4];
    size_t lens[4];

    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    if (id < 0)
        return feed__error(f, FEED_EINVAL, "feed_on_delete: id %lld is negative",
                           (long long)id);
    feed__set_keys(f, uid);
    lens[2] = feed__member_encode(id, member);
    argv[0] = f->key;
    argv[1] = f->lease_key;
    argv[2] = member;
    argv[3] = f->empty_ttl_ms;      /* a delete that empties a complete feed */
    lens[0] = strlen(argv[0]);
    lens[1] = strlen(argv[1]);
    lens[3] = strlen(argv[3]);
    hook_begin(f);
    return note_failure(f, integer_reply(f, feed__redis_script(f, FEED_SCRIPT_DELETE, 2, 4,
                                                                argv, lens), "delete.lua"),
                        uid);
}

/* DEL of the feed, with or without its lease. */
static int drop_keys(feed *f, int with_lease)
{
    const char *argv[3] = { "DEL", f->key, f->lease_key };

    return integer_reply(f, feed__redis_command(f, with_lease ? 3 : 2, argv, NULL), "DEL");
}

int feed_invalidate(feed *f, int64_t uid)
{
    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    feed__set_keys(f, uid);
    hook_begin(f);
    return note_failure(f, drop_keys(f, 1), uid);
}

/* A reload takes the lease outright (a reader's rebuild in flight then fails
 * to install, harmlessly) and rebuilds as a miss would. If a write cancels
 * it, the cached copy may predate this reload's reason to exist, so it is
 * dropped: an absent feed is always correct. */
int feed_reload(feed *f, int64_t uid)
{
    char token[33];
    const char *argv[5];
    feed_rows rows;
    redisReply *r;
    int installed, rc;

    if (!f)
        return FEED_EINVAL;
    feed__clear_error(f);
    feed__set_keys(f, uid);
    feed__lease_token(f, token);
    argv[0] = "SET";
    argv[1] = f->lease_key;
    argv[2] = token;
    argv[3] = "PX";
    argv[4] = f->lease_ms;
    hook_begin(f);
    r = feed__redis_command(f, 5, argv, NULL);
    if (!r)
        return note_failure(f, FEED_EREDIS, uid);
    freeReplyObject(r);

    rc = feed__rebuild(f, uid, token, &rows, &installed);
    feed__rows_free(&rows);
    if (rc == FEED_OK && !installed)
        rc = drop_keys(f, 0);
    return note_failure(f, rc, uid);
}
