/* fanout.c -- one item into many feeds: feed_fanout.
 *
 * A fan-out sends insert.lua once per group of feeds, all the calls in one
 * batch. Groups because a script call has a fixed cost in Redis before
 * its first line, comparable to the insert itself, which one call per feed
 * would pay per feed (figures: bench/results/latest/latest.md, "Fan-out"). 100 keeps one
 * call short in Redis time.
 *
 * On a Redis Cluster the keys a call declares must share a hash slot, and
 * 10,000 feeds fall in ~7,400 slots. So a group is the feeds one node
 * serves by the slot map, and the call declares none of them: the node
 * updates those it serves and names back the others (insert.lua,
 * "Undeclared feeds"), which go out again by slot, declared, like a single
 * hook: a few, after a reshard the map had not seen yet. The call is routed
 * by its first argument, its first feed's key (the exchange routes EVALSHA
 * by argv[3]); a call without keys is never redirected.
 *
 * Which feeds got the write is unknown when the pipeline fails: every one
 * of them goes on the repair list.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define FANOUT_GROUP 100
#define FANOUT_ARGS (2 * FANOUT_GROUP + 8)  /* a call's: its keys, and a few more */

typedef struct fanout_op {
    feed_op        op;
    int64_t       *uids;        /* the caller's feeds, copied */
    size_t         n;
    int64_t       *sorted;      /* this batch's feeds, group after group */
    size_t        *group;       /* call i has feeds group[i] .. group[i + 1] */
    size_t         calls;
    int            by_node;     /* a group is one node's, its feeds undeclared */
    int64_t       *away;        /* the feeds a node did not serve */
    size_t         naway;
    int            bad_reply;   /* a reply that named no such feed */
    char          *keys;        /* 2 * FANOUT_GROUP keys of key_cap bytes */
    const char    *argv[FANOUT_ARGS];
    size_t         lens[FANOUT_ARGS];
    char           score[21], member[FEED_MEMBER_MAX], max_len[21], count[21], nkeys[12];
    size_t         member_len;
} fanout_op;

/* Call i: EVALSHA, the feeds of group i, then insert.lua's arguments; by
 * node, the feeds as arguments, then score, member, max_len. */
static int fanout_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    fanout_op *f = arg;
    feed_core *c = f->op.c;
    size_t first = f->group[i], count = f->group[i + 1] - first, k = 3;

    f->argv[0] = "EVALSHA";
    f->argv[1] = c->sha[FEED_SCRIPT_INSERT];
    for (size_t j = 0; j < count; j++) {
        char *key = f->keys + 2 * j * c->key_cap, *lease = key + c->key_cap;
        feed__family_keys(c->key_base[FEED_FAM_FEED], f->sorted[first + j], key, lease);
        f->argv[k++] = key;
        f->argv[k++] = lease;
    }
    feed__i64_to_str(f->by_node ? 0 : (int64_t)(k - 3), f->nkeys);
    f->argv[2] = f->nkeys;
    feed__i64_to_str((int64_t)count, f->count);
    f->argv[k++] = f->score;
    f->argv[k++] = f->member;
    f->argv[k++] = f->max_len;
    if (!f->by_node)
        f->argv[k++] = f->count;
    for (size_t j = 0; j < k; j++)
        f->lens[j] = f->argv[j] == f->member ? f->member_len : strlen(f->argv[j]);
    *argv = f->argv;
    *lens = f->lens;
    return (int)k;
}

/* Call i's reply, by node: an array of the positions (1 = the group's
 * first feed) of the feeds its node did not serve; they go out again. */
static void fanout_reply(void *arg, size_t i, const redisReply *r)
{
    fanout_op *f = arg;
    size_t first = f->group[i], count = f->group[i + 1] - first;

    if (r->type == REDIS_REPLY_INTEGER && !f->by_node)
        return;
    if (r->type != REDIS_REPLY_ARRAY || !f->by_node) {
        f->bad_reply = 1;
        return;
    }
    for (size_t e = 0; e < r->elements; e++) {
        const redisReply *k = r->element[e];
        if (k->type != REDIS_REPLY_INTEGER || k->integer < 1 || (size_t)k->integer > count ||
            f->naway == f->n) {
            f->bad_reply = 1;
            return;
        }
        f->away[f->naway++] = f->sorted[first + (size_t)k->integer - 1];
    }
}

typedef struct fanout_slot_uid {
    int      node;          /* by node: the slot's owner by the map, else 0 */
    unsigned slot;
    int64_t  uid;
} fanout_slot_uid;

static int fanout_by_slot(const void *x, const void *y)
{
    const fanout_slot_uid *a = x, *b = y;

    if (a->node != b->node)
        return a->node < b->node ? -1 : 1;
    return a->slot < b->slot ? -1 : a->slot > b->slot;
}

/* Cut n feeds into groups: evenly into ceil(n / FANOUT_GROUP) on a single
 * Redis; on a cluster, by node or by slot (sorted then holds the uids in
 * that order). Returns the number of calls, 0 without memory. */
static size_t fanout_cut(fanout_op *f, const int64_t *uids, size_t n)
{
    feed_core *c = f->op.c;
    size_t calls = 0;

    if (!c->topo.cluster) {
        size_t k = (n + FANOUT_GROUP - 1) / FANOUT_GROUP, per = (n + k - 1) / k;
        memcpy(f->sorted, uids, n * sizeof *uids);
        for (size_t first = 0; first < n; first += per)
            f->group[calls++] = first;
    } else {
        fanout_slot_uid *su = malloc(n * sizeof *su);
        if (!su)
            return 0;
        for (size_t i = 0; i < n; i++) {
            su[i].slot = feed__uid_slot(uids[i]);
            su[i].node = f->by_node ? feed__map_owner(&c->topo, su[i].slot) : 0;
            su[i].uid = uids[i];
        }
        qsort(su, n, sizeof *su, fanout_by_slot);
        for (size_t i = 0; i < n; i++) {
            f->sorted[i] = su[i].uid;
            if (i == 0 || su[i].node != su[i - 1].node ||
                (!f->by_node && su[i].slot != su[i - 1].slot) ||
                i - f->group[calls - 1] == FANOUT_GROUP)
                f->group[calls++] = i;
        }
        free(su);
    }
    f->group[calls] = n;
    return calls;
}

static enum feed_want fanout_finish(fanout_op *f, int rc)
{
    if (rc == FEED_EREDIS)      /* which feeds got the write is unknown */
        for (size_t i = 0; i < f->n; i++)
            feed__repair_remember(f->op.c, FEED_FAM_FEED, f->uids[i]);
    f->op.rc = rc;
    f->op.state = 3;
    return FEED_W_DONE;
}

/* One pipeline of insert.lua calls for n feeds. */
static enum feed_want fanout_send(fanout_op *f, const int64_t *uids, size_t n, int by_node,
                                  int state)
{
    f->by_node = by_node;
    f->bad_reply = 0;
    if ((f->calls = fanout_cut(f, uids, n)) == 0)
        return fanout_finish(f, feed__msg(f->op.err, FEED_ENOMEM, "out of memory for a fan-out "
                                          "of %zu", f->n));
    f->op.state = state;
    f->op.batch = (feed_batch){ .n = f->calls, .flags = FEED_B_HOOK | FEED_B_EACH,
                                .arg = f, .build = fanout_build, .reply = fanout_reply };
    return FEED_W_REDIS;
}

static int fanout_sent(fanout_op *f)
{
    if (f->op.redis_rc != FEED_OK)
        return f->op.redis_rc == FEED_ENOMEM ? FEED_ENOMEM : FEED_EREDIS;
    if (f->bad_reply) {
        f->op.c->stats.redis_errors++;
        return feed__msg(f->op.err, FEED_EREDIS, "Redis insert.lua: unexpected reply to a fan-out");
    }
    return FEED_OK;
}

static enum feed_want fanout_step(feed_op *op, int64_t now)
{
    fanout_op *f = (fanout_op *)op;
    int rc;

    (void)now;
    switch (op->state) {
    case 0:
        return fanout_send(f, f->uids, f->n, op->c->topo.cluster, 1);
    case 1:
        if ((rc = fanout_sent(f)) != FEED_OK || f->naway == 0)
            return fanout_finish(f, rc);
        return fanout_send(f, f->away, f->naway, 0, 2);
    case 2:
        return fanout_finish(f, fanout_sent(f));
    default:
        return FEED_W_DONE;
    }
}

static void fanout_free(feed_op *op)
{
    fanout_op *f = (fanout_op *)op;

    free(f->uids);
    free(f->sorted);
    free(f->group);
    free(f->away);
    free(f->keys);
    free(f);
}

feed_op *feed__fanout_op(feed_core *c, char *err, const int64_t *uids, size_t n,
                         int64_t score, int64_t id, int *rc)
{
    fanout_op *f = calloc(1, sizeof *f);

    if (f) {
        f->op.c = c;
        f->op.err = err;
        f->op.step = fanout_step;
        f->op.free = fanout_free;
        f->n = n;
        f->uids = malloc(n * sizeof *uids);
        f->sorted = malloc(n * sizeof *f->sorted);
        f->group = malloc((n + 1) * sizeof *f->group);
        f->away = malloc(n * sizeof *f->away);
        f->keys = malloc(2 * FANOUT_GROUP * c->key_cap);
    }
    if (!f || !f->uids || !f->sorted || !f->group || !f->away || !f->keys) {
        if (f)
            fanout_free(&f->op);
        *rc = feed__msg(err, FEED_ENOMEM, "out of memory for a fan-out of %zu", n);
        return NULL;
    }
    memcpy(f->uids, uids, n * sizeof *uids);
    feed__i64_to_str(score, f->score);
    f->member_len = feed__member_encode(id, f->member);
    feed__i64_to_str((int64_t)c->cfg.max_len, f->max_len);
    *rc = FEED_OK;
    return &f->op;
}
