/* hooks.c -- the write path: what an application calls after its SQL
 * transaction commits. Each hook is one script call (fan-out: one pipeline)
 * that keeps the cache an exact prefix of the feed; lua/insert.lua and
 * lua/delete.lua say how. Every hook also deletes the feed's lease, which
 * is what stops a rebuild that read SQL before this write from installing.
 *
 * A write that fails, because Redis could not be reached (the connection
 * is down: refused, timed out, or not retried yet), because it answered
 * with an error (an ACL, OOM, a script error), or because too few replicas
 * acknowledged it (WAIT, redis_wait_replicas: a failover may lose it), may
 * leave the feed's cached copy stale while Redis keeps it. The first handle
 * to reach that Redis and have a DEL accepted drops the copy (repair.c);
 * here we only take note.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

enum { S_START, S_SENT, S_LEASED, S_REBUILD, S_DONE };

struct feed_hook_op {
    feed_op      op;
    int          kind;
    int          fam;           /* enum feed_family: which copy of uid's number */
    int64_t      uid, score, id;
    int          bad;           /* the reply was not an integer */
    char        *key, *lease_key;
    const char  *argv[8];
    size_t       lens[8];
    int          argc;
    char         num[21], member[FEED_MEMBER_MAX], max_len[21], token[33];
    feed_rebuild rb;
    char         keys[192];
    char         kept[FEED_ERRMSG];     /* op.kept; not cleared at init */
};

int feed__check_item(char *err, const char *hook, int64_t score, int64_t id)
{
    if (id < 0)
        return feed__msg(err, FEED_EINVAL, "%s: id %lld is negative", hook, (long long)id);
    if (!feed__score_ok(score))
        return feed__msg(err, FEED_ERANGE, "%s: score %lld is outside +/-(2^53-1)", hook,
                         (long long)score);
    return FEED_OK;
}

/* The end of a hook: a write that failed leaves a trace. */
static enum feed_want noted(feed_hook_op *h, int rc)
{
    if (rc == FEED_EREDIS && !feed__repair_remember(h->op.c, h->fam, h->uid)) {
        size_t len = strlen(h->op.err);
        snprintf(h->op.err + len, FEED_ERRMSG - len,
                 "; too many feeds to repair: call %s(%lld) later",
                 h->fam == FEED_FAM_AUTHOR ? "feed_author_invalidate_many" : "feed_invalidate",
                 (long long)h->uid);
    }
    h->op.rc = rc;
    h->op.state = S_DONE;
    return FEED_W_DONE;
}

static int hook_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    feed_hook_op *h = arg;

    (void)i;
    *argv = h->argv;
    *lens = h->lens;
    return h->argc;
}

/* A script's or DEL's reply must be an integer; anything else is a Redis
 * fault. */
static void hook_reply(void *arg, size_t i, const redisReply *r)
{
    feed_hook_op *h = arg;
    const char *what;

    (void)i;
    if (h->op.state == S_LEASED && r->type != REDIS_REPLY_ERROR)
        return;                 /* SET's OK */
    if (r->type == REDIS_REPLY_INTEGER)
        return;
    h->op.c->stats.redis_errors++;
    h->bad = 1;
    what = h->kind == FEED_HOOK_INSERT ? "insert.lua" : h->kind == FEED_HOOK_DELETE ? "delete.lua"
         : h->op.state == S_LEASED ? "SET" : "DEL";
    if (r->type == REDIS_REPLY_ERROR)
        feed__msg(h->op.err, FEED_EREDIS, "Redis %s: %s", what, r->str);
    else
        feed__msg(h->op.err, FEED_EREDIS, "Redis %s: unexpected reply type %d", what, r->type);
}

static unsigned hook_slot(const feed_hook_op *h)
{
    return h->op.c->topo.cluster ? feed__uid_slot(h->uid) : 0;
}

static enum feed_want hook_send(feed_hook_op *h, int state)
{
    h->op.state = state;
    h->bad = 0;
    h->op.batch = (feed_batch){ .n = 1, .flags = FEED_B_HOOK, .slot = hook_slot(h), .arg = h,
                                .build = hook_build, .reply = hook_reply };
    return FEED_W_REDIS;
}

/* A script's SHA is 40 bytes, whatever c->sha holds now: a handle whose
 * node is not set up yet has not read it from SCRIPT LOAD, and the exchange
 * sets the node up before it builds the command. */
static void set_args(feed_hook_op *h, int argc, const char *const *argv)
{
    h->argc = argc;
    for (int i = 0; i < argc; i++) {
        h->argv[i] = argv[i];
        if (argv[i] != h->member)
            h->lens[i] = i == 1 && strcmp(argv[0], "EVALSHA") == 0 ? 40 : strlen(argv[i]);
    }
}

static enum feed_want hook_start(feed_hook_op *h)
{
    feed_core *c = h->op.c;
    size_t mlen;

    switch (h->kind) {
    case FEED_HOOK_INSERT:
        feed__i64_to_str(h->score, h->num);
        mlen = feed__member_encode(h->id, h->member);
        feed__i64_to_str((int64_t)c->cfg.max_len, h->max_len);
        set_args(h, 8, (const char *[]){ "EVALSHA", c->sha[FEED_SCRIPT_INSERT], "2", h->key,
                                         h->lease_key, h->num, h->member, h->max_len });
        h->lens[6] = mlen;
        return hook_send(h, S_SENT);
    case FEED_HOOK_DELETE:
        /* The empty TTL: a delete that empties a complete feed. */
        mlen = feed__member_encode(h->id, h->member);
        set_args(h, 7, (const char *[]){ "EVALSHA", c->sha[FEED_SCRIPT_DELETE], "2", h->key,
                                         h->lease_key, h->member, c->empty_ttl_ms });
        h->lens[5] = mlen;
        return hook_send(h, S_SENT);
    case FEED_HOOK_INVALIDATE:
        set_args(h, 3, (const char *[]){ "DEL", h->key, h->lease_key });
        return hook_send(h, S_SENT);
    default:
        /* A reload takes the lease outright (a reader's rebuild in flight
         * then fails to install, harmlessly) and rebuilds as a miss would. */
        feed__lease_token(c->token_seed, &c->token_seq, h->token);
        set_args(h, 6, (const char *[]){ "EVALSHA", c->sha[FEED_SCRIPT_LEASE], "1",
                                         h->lease_key, h->token, c->grant_ms });
        return hook_send(h, S_LEASED);
    }
}

static enum feed_want hook_step(feed_op *op, int64_t now)
{
    feed_hook_op *h = (feed_hook_op *)op;
    enum feed_want want;
    int rc;

    switch (op->state) {
    case S_START:
        if (h->kind == FEED_HOOK_NONE)
            return noted(h, FEED_OK);
        return hook_start(h);
    case S_SENT:
        return noted(h, op->redis_rc != FEED_OK || h->bad ? FEED_EREDIS : FEED_OK);
    case S_LEASED:
        if (op->redis_rc != FEED_OK || h->bad)
            return noted(h, FEED_EREDIS);
        op->state = S_REBUILD;
        return feed__rebuild_one(&h->rb, op, FEED_B_HOOK, hook_slot(h), h->fam, h->uid, h->key,
                                 h->lease_key, h->token);
    case S_REBUILD:
        if ((want = feed__rebuild_step(&h->rb, now, &rc)) != FEED_W_DONE)
            return want;
        if (rc == FEED_OK && !h->rb.one.in.installed) {
            /* A write cancelled the reload: the cached copy may predate the
             * reload's reason to exist, so it is dropped. An absent feed is
             * always correct. */
            set_args(h, 2, (const char *[]){ "DEL", h->key });
            return hook_send(h, S_SENT);
        }
        return noted(h, rc);
    default:
        return FEED_W_DONE;
    }
}

static void hook_free(feed_op *op)
{
    feed_hook_op *h = (feed_hook_op *)op;

    feed__rows_free(&op->sql.rows);
    feed__rebuild_free(&h->rb);
    if (h->key != h->keys)
        free(h->key);
    h->key = NULL;
}

size_t feed__hook_op_size(void)
{
    return sizeof(feed_hook_op);
}

/* What a hook's arguments must be, checked before any request exists: an
 * author's hook needs author_table, an insert a score and id in range, a
 * delete an id that is not negative. name is the public call, for the
 * message. */
int feed__hook_check(const feed_core *c, char *err, const char *name, int kind, int fam,
                     int64_t score, int64_t id)
{
    int rc;

    if (fam == FEED_FAM_AUTHOR && (rc = feed__authors_on(c, err, name)) != FEED_OK)
        return rc;
    return feed__check_item(err, name, kind == FEED_HOOK_INSERT ? score : 0, id);
}

int feed__hook_init(feed_hook_op *h, feed_core *c, char *err, int kind, int fam,
                    int64_t uid, int64_t score, int64_t id)
{
    memset(h, 0, offsetof(feed_hook_op, kept));
    h->op.c = c;
    h->op.err = err;
    h->op.kept = h->kept;
    h->op.step = hook_step;
    h->op.free = hook_free;
    h->kind = kind;
    h->fam = fam;
    h->uid = uid;
    h->score = score;
    h->id = id;
    if (2 * c->key_cap <= sizeof h->keys) {
        h->key = h->keys;
    } else if ((h->key = malloc(2 * c->key_cap)) == NULL) {
        return feed__msg(err, FEED_ENOMEM, "out of memory for a hook");
    }
    h->lease_key = h->key + c->key_cap;
    feed__family_keys(c->key_base[fam], uid, h->key, h->lease_key);
    return FEED_OK;
}
