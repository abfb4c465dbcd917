/* rebuild.c -- fill a feed's cache from SQL rows, under a lease.
 *
 * The rows are the top max_len + 1 of the feed, read from the primary
 * (sql.c says why). At most max_len of them means the whole feed: the end
 * marker goes in. More means the feed is longer than the cache: max_len
 * rows go in, without the marker. The install is one round trip: the rows
 * are staged with a plain ZADD (which Redis parses far faster than a script
 * receives arguments) into a set named after the lease token, with a TTL so
 * that a client that dies here leaves nothing behind for long, then one
 * call of lua/rebuild.lua swaps them in only if the caller's lease is still
 * current; every write hook deletes the lease, so rows read before a write
 * committed can never overwrite it. The rows stay with the caller, who cuts
 * the page that missed from them: no second read.
 *
 * One machine runs every rebuild (core.h: feed_rebuild). A read that
 * fails gives the leases back at once, so that the next reader need not
 * wait out lease_ms; the read's error stays the caller's.
 *
 * The TTL bookkeeping lives here too, since a rebuild is what sets a full
 * TTL: one table per handle for plain and merged first pages alike.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* Text for "score member" pairs: 21 bytes a score, then a member. */
#define PAIR_TEXT (21 + FEED_MEMBER_MAX)
/* The words after the ZADD's: PEXPIRE's 3, then rebuild.lua's call's 8. */
#define INSTALL_TAIL 11

/* Free what the install holds; failed and installed stay. */
static void install_free(feed_install *in)
{
    free(in->argv);
    free(in->lens);
    free(in->text);
    free(in->staged);
    *in = (feed_install){ .failed = in->failed, .installed = in->installed };
}

static int install_prepare(feed_install *in, feed_core *c, const char *key,
                          const char *lease_key, const char *token, const feed_rows *rows,
                          char *err)
{
    int complete = rows->count <= c->cfg.max_len;
    size_t n = complete ? rows->count : c->cfg.max_len, a = 0;

    memset(in, 0, sizeof *in);
    in->zargc = 2 + 2 * n + (complete ? 2 : 0);
    in->argv = malloc((in->zargc + INSTALL_TAIL) * sizeof *in->argv);
    in->lens = malloc((in->zargc + INSTALL_TAIL) * sizeof *in->lens);
    in->text = malloc(n * PAIR_TEXT + 1);
    in->staged = malloc(c->key_cap + sizeof ":stage:" + 32);
    if (!in->argv || !in->lens || !in->text || !in->staged) {
        install_free(in);
        return feed__msg(err, FEED_ENOMEM, "out of memory installing %zu rows", n);
    }
    sprintf(in->staged, "%s:stage:%s", key, token);
    in->argv[a] = "ZADD";
    in->lens[a++] = 4;
    in->argv[a] = in->staged;
    in->lens[a++] = strlen(in->staged);
    for (size_t i = 0; i < n; i++) {
        char *score = in->text + i * PAIR_TEXT, *member = score + 21;
        in->lens[a] = feed__i64_to_str(rows->items[i].score, score);
        in->argv[a++] = score;
        in->lens[a] = feed__member_encode(rows->items[i].id, member);
        in->argv[a++] = member;
    }
    if (complete) {   /* the end marker: the set holds the whole feed */
        in->argv[a] = "-inf";
        in->lens[a++] = 4;
        in->argv[a] = FEED_END_MEMBER;
        in->lens[a++] = strlen(FEED_END_MEMBER);
    }
    /* Then PEXPIRE staged, and rebuild.lua's call. A feed known to be empty
     * gets its own, short TTL (empty_ttl_seconds): probes for uids that do
     * not exist must not fill Redis. */
    memcpy(in->argv + a, (const char *[INSTALL_TAIL]){
               "PEXPIRE", in->staged, c->lease_ms,
               "EVALSHA", c->sha[FEED_SCRIPT_REBUILD], "3", key, lease_key, in->staged, token,
               complete && rows->count == 0 ? c->empty_ttl_ms : c->ttl_ms },
           sizeof(const char *[INSTALL_TAIL]));
    for (; a < in->zargc + INSTALL_TAIL; a++)
        in->lens[a] = strlen(in->argv[a]);
    return FEED_OK;
}

/* The install's three commands: ZADD staged, PEXPIRE staged, rebuild.lua. */
static int install_build(feed_install *in, size_t i, const char ***argv, const size_t **lens)
{
    size_t at = i == 0 ? 0 : i == 1 ? in->zargc : in->zargc + 3;

    *argv = in->argv + at;
    *lens = in->lens + at;
    return i == 0 ? (int)in->zargc : i == 1 ? 3 : 8;
}

/* An error reply to the staging fails the install, the script's reply
 * then dropped. */
static void install_reply(feed_install *in, feed_core *c, size_t i, const redisReply *r,
                          char *err)
{
    if (in->failed)
        return;
    if (r->type != REDIS_REPLY_ERROR && (i < 2 || r->type == REDIS_REPLY_INTEGER)) {
        in->installed |= i == 2 && r->integer == 1;
        return;
    }
    c->stats.redis_errors++;
    in->failed = 1;
    if (r->type == REDIS_REPLY_ERROR)
        feed__msg(err, FEED_EREDIS, "Redis %s: %s", i == 0 ? "ZADD" : i == 1 ? "PEXPIRE"
                  : "rebuild.lua", r->str);
    else
        feed__msg(err, FEED_EREDIS, "Redis rebuild.lua: unexpected reply type %d", r->type);
}

/* ---- The machine ---------------------------------------------------------- */

/* Command i: HDEL of source i's grant from its lease, or the install's
 * command i % 3 of source i / 3. */
static int rebuild_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    feed_rebuild *rb = arg;

    if (rb->state == FEED_RB_INSTALL)
        return install_build(&rb->src[i / 3].in, i % 3, argv, lens);
    rb->del[0] = "HDEL";
    rb->del[1] = rb->src[i].lease;
    rb->del[2] = rb->src[i].token;
    rb->del_lens[0] = 4;
    rb->del_lens[1] = strlen(rb->del[1]);
    rb->del_lens[2] = strlen(rb->del[2]);
    *argv = rb->del;
    *lens = rb->del_lens;
    return 3;
}

static void rebuild_reply(void *arg, size_t i, const redisReply *r)
{
    feed_rebuild *rb = arg;

    if (rb->state == FEED_RB_INSTALL)
        install_reply(&rb->src[i / 3].in, rb->op->c, i % 3, r, rb->op->err);
    /* FEED_RB_RELEASE: best effort */
}

static enum feed_want rebuild_send(feed_rebuild *rb, int state, size_t n)
{
    rb->state = state;
    /* The install and the release end work already done: past the
     * request's deadline too (FEED_B_FINISH). */
    rb->op->batch = (feed_batch){ .n = n, .flags = rb->flags | FEED_B_FINISH, .slot = rb->slot,
                                  .arg = rb, .build = rebuild_build, .reply = rebuild_reply };
    return FEED_W_REDIS;
}

void feed__rebuild_begin(feed_rebuild *rb, feed_op *op, feed_rebuild_src *src, size_t n,
                         int flags, unsigned slot)
{
    *rb = (feed_rebuild){ .op = op, .state = FEED_RB_READ, .flags = flags, .slot = slot,
                          .src = src, .n = n };
}

/* From the primary, never the replica (sql.c says why). */
enum feed_want feed__rebuild_one(feed_rebuild *rb, feed_op *op, int flags, unsigned slot,
                                 int fam, int64_t owner, const char *key, const char *lease,
                                 const char *token)
{
    feed__rebuild_begin(rb, op, &rb->one, 1, flags, slot);
    rb->one = (feed_rebuild_src){ .fam = fam, .owner = owner, .key = key, .lease = lease,
                                  .token = token, .rows = &op->sql.rows };
    feed__sql_ask(op, FEED_SQL_TOP, FEED_PG_PRIMARY, owner,
                  (int64_t[]){ owner, (int64_t)op->c->cfg.max_len + 1 }, 2);
    return FEED_W_SQL;
}

/* The rows are read: every source's install, one batch. */
static enum feed_want rebuild_install(feed_rebuild *rb, int *rc)
{
    feed_core *c = rb->op->c;

    for (size_t k = 0; k < rb->n; k++) {
        feed_rebuild_src *s = &rb->src[k];
        if (c->test_before_install)
            c->test_before_install(c->handle, s->owner, c->test_arg);
        if ((*rc = install_prepare(&s->in, c, s->key, s->lease, s->token, s->rows,
                                   rb->op->err)) != FEED_OK)
            return FEED_W_DONE;
    }
    return rebuild_send(rb, FEED_RB_INSTALL, 3 * rb->n);
}

/* The installs answered: FEED_OK (installed or not), or FEED_EREDIS. A
 * copy that went in counts, and has its full TTL now, whatever else its
 * batch met (a short WAIT, another node's failure). */
static int rebuild_installed(feed_rebuild *rb, int64_t now)
{
    feed_core *c = rb->op->c;
    int rc = FEED_OK;

    for (size_t k = 0; k < rb->n; k++) {
        feed_rebuild_src *s = &rb->src[k];
        if (rb->op->redis_rc != FEED_OK || s->in.failed)
            rc = FEED_EREDIS;
        if (s->in.installed) {
            c->stats.rebuilds++;
            feed__ttl_full(c, s->fam, s->owner, now, s->rows->count == 0);
        } else if (rb->op->redis_rc == FEED_OK && !s->in.failed) {
            c->stats.installs_refused++;    /* a write came between: the grant went */
        }
        install_free(&s->in);
    }
    return rc;
}

enum feed_want feed__rebuild_step(feed_rebuild *rb, int64_t now, int *rc)
{
    feed_op *op = rb->op;

    switch (rb->state) {
    case FEED_RB_READ:
        if (op->sql_rc == FEED_OK)
            return rebuild_install(rb, rc);
        /* Best effort: this rebuild's grant goes, so that the next reader
         * need not wait out lease_ms; another's stays. */
        rb->sql_rc = op->sql_rc;
        feed__msg_keep(op->kept, op->err);
        return rebuild_send(rb, FEED_RB_RELEASE, rb->n);
    case FEED_RB_RELEASE:
        feed__msg_keep(op->err, op->kept);
        *rc = rb->sql_rc;
        return FEED_W_DONE;
    default:
        *rc = rebuild_installed(rb, now);
        return FEED_W_DONE;
    }
}

/* Another handle holds the lease: its rebuild will serve us too. Ask again
 * after a pause that doubles, up to WAIT_PAUSE_MAX, until lease_wait_ms has
 * passed (the request's deadline ends it sooner: the drivers). The default
 * wait is the lease's life: a reader waits for the rebuild under way, which
 * its holder may take that long to finish, rather than read SQL itself, so
 * that a cold feed read by many costs one statement, not one each; past
 * lease_ms a grant is old enough for the waiter to take over (page.lua). */
#define WAIT_PAUSE_MAX 50
int feed__lease_wait(feed_op *op, feed_wait *w, int fam, int64_t owner, int64_t now)
{
    /* Never 0 for a feed (the odd bit): 0 is "not waiting on one feed". */
    op->lease_of = fam < 0 ? 0 : ((uint64_t)owner * 0x9E3779B97F4A7C15ULL + (uint64_t)fam) | 1;
    if (w->deadline == 0) {
        op->c->stats.lease_waits++;
        w->deadline = now + op->c->cfg.lease_wait_ms;
    }
    if (now >= w->deadline)
        return 0;
    op->wake_at = now + (w->pause < w->deadline - now ? w->pause : w->deadline - now);
    if (w->pause < WAIT_PAUSE_MAX)
        w->pause *= 2;
    return 1;
}

void feed__rebuild_free(feed_rebuild *rb)
{
    for (size_t k = 0; k < rb->n; k++)
        install_free(&rb->src[k].in);
    rb->n = 0;
}

/* ---- TTL refresh -------------------------------------------------------------
 *
 * What page.lua promises, on first pages only: right after a first page, at
 * least half the TTL is left (it reads PTTL and PEXPIREs when less is left).
 * A plain first page (page.c), and each source of a merged one (merged.c),
 * sends its PTTL in the read's round trip and a PEXPIRE in a second one when
 * less than half is left; both only when the handle does not already know
 * the answer: a PTTL of P read at t means the key lives until t + P at
 * least (only rebuilds and refreshes set a TTL, always the full one for the
 * kind of copy, and a key deleted and cached again gets a later one), so the
 * next check waits until t + P - TTL/2. A copy that turned empty or stopped
 * being empty changed its TTL rule (a delete that empties a feed gives it
 * the short empty_ttl): what the handle knew is void (feed__ttl_turned). A
 * handle reading a feed thus sends one PTTL per TTL/2 or so, and a plain
 * first page is one command. (This assumes every handle on the key prefix
 * uses the same ttl_seconds, and no one else shortens the TTL.) One table
 * per handle, by (family, owner), direct-mapped. */

const char *feed__ttl_text(const feed_core *c, int empty)
{
    return empty ? c->empty_ttl_ms : c->ttl_ms;
}

static struct feed_ttl_seen *ttl_slot(feed_core *c, int fam, int64_t owner)
{
    uint64_t h = (uint64_t)owner * 0x9E3779B97F4A7C15ULL + (uint64_t)fam;

    return &c->ttl_seen[(h >> 32) % FEED_TTL_SLOTS];
}

static int ttl_is(const struct feed_ttl_seen *t, int fam, int64_t owner)
{
    return t->used && t->fam == fam && t->owner == owner;
}

/* Not when no copy expires, nor while the handle knows it need not. */
int feed__ttl_due(feed_core *c, int fam, int64_t owner, int64_t now)
{
    const struct feed_ttl_seen *t = ttl_slot(c, fam, owner);

    if (strcmp(c->ttl_ms, "0") == 0 && strcmp(c->empty_ttl_ms, "0") == 0)
        return 0;
    return !(ttl_is(t, fam, owner) && t->fresh_until > now);
}

int feed__ttl_turned(feed_core *c, int fam, int64_t owner, int empty)
{
    const struct feed_ttl_seen *t = ttl_slot(c, fam, owner);

    return ttl_is(t, fam, owner) && t->empty != empty;
}

void feed__ttl_forget(feed_core *c, int fam, int64_t owner)
{
    struct feed_ttl_seen *t = ttl_slot(c, fam, owner);

    if (ttl_is(t, fam, owner))
        t->used = 0;
}

int feed__ttl_checked(feed_core *c, int fam, int64_t owner, int64_t at, long long pttl,
                      int empty)
{
    long long ttl = atoll(feed__ttl_text(c, empty));

    if (pttl == -2)
        return 0;               /* gone meanwhile: the next read rebuilds it */
    if (ttl != 0 && pttl < ttl / 2)
        return 1;
    /* The copy lives at least pttl ms from `at`: no check is due until half
     * its TTL is left (a copy that never expires: none is). */
    *ttl_slot(c, fam, owner) = (struct feed_ttl_seen){
        owner, at + (ttl == 0 ? INT64_MAX / 4 : pttl - ttl / 2), fam, 1, empty };
    return 0;
}

/* A full TTL is never less than half of itself: always remembered. */
void feed__ttl_full(feed_core *c, int fam, int64_t owner, int64_t at, int empty)
{
    feed__ttl_checked(c, fam, owner, at, atoll(feed__ttl_text(c, empty)), empty);
}
