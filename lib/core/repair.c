/* repair.c -- copies whose write was lost, dropped before anything else.
 *
 * A write (hook, reload, invalidate) that cannot reach Redis leaves that
 * feed's cached copy possibly stale, and Redis may well keep the copy
 * through the outage (a freeze, a partition, a restart from disk). So the
 * feed is remembered, and the first handle of the process to reach that
 * Redis again drops the copy before anything else; the next read rebuilds
 * it from SQL.
 *
 * One list for the whole process, so that whichever handle reaches Redis
 * first after an outage drops the copies, not only the handle whose write
 * failed (it may sit idle for long, and its late DEL would then throw away a
 * copy rebuilt correctly in between). This is the library's one piece of
 * process-wide state, on purpose. An entry is (store, uid, family), store
 * naming the Redis server and the family's key base, the family which copy of uid's
 * number (a reader's feed, an author's posts); sorted, without duplicates,
 * so a long outage under many writes to the same feeds costs one entry per
 * feed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct repair_entry {
    uint64_t store;
    int64_t  uid;
    int      fam;               /* enum feed_family */
    unsigned char dropped;      /* in a repair request's copy: 1 lease, 2 copy dropped */
    uint64_t gen;               /* repair_gen when last remembered */
} repair_entry;

static pthread_mutex_t repair_lock = PTHREAD_MUTEX_INITIALIZER;
static repair_entry   *repair_list;
static size_t          repair_count, repair_cap;
static atomic_size_t   repair_pending;   /* repair_count, read without the lock */
static uint64_t        repair_gen;       /* remembers so far */

/* FNV-1a over host, port and a family's key base (the prefix and what the
 * copies hold, base.h): which copies an entry names. Under Sentinel the
 * store is the master name, wherever it now runs; a cluster is named by its
 * seed list (every handle of an application is configured alike). */
uint64_t feed__store_of(const feed_config *cfg, const char *key_base)
{
    const char *parts[3] = { cfg->redis_cluster ? cfg->redis_cluster : cfg->redis_host,
                             key_base, "" };
    uint64_t h = 14695981039346656037ULL ^ (uint64_t)(cfg->redis_cluster ? 0 : cfg->redis_port);

    if (cfg->redis_sentinels) {
        parts[0] = cfg->redis_sentinels;
        parts[2] = cfg->redis_master_name;
    }
    for (int i = 0; i < 3; i++) {
        for (const char *p = parts[i]; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL;   /* separator */
    }
    return h;
}

/* Does e name a copy c's handle reads (its store, of e's family)? */
static int repair_mine(const feed_core *c, const repair_entry *e)
{
    return e->store == c->topo.store[e->fam];
}

static int repair_entry_before(repair_entry a, repair_entry b)
{
    if (a.store != b.store)
        return a.store < b.store;
    return a.uid < b.uid || (a.uid == b.uid && a.fam < b.fam);
}

/* Lock held. */
static int repair_remember_locked(repair_entry e)
{
    size_t lo = 0, hi = repair_count;

    while (lo < hi) {           /* the first entry not before e */
        size_t mid = lo + (hi - lo) / 2;
        if (repair_entry_before(repair_list[mid], e))
            lo = mid + 1;
        else
            hi = mid;
    }
    e.gen = ++repair_gen;
    if (lo < repair_count && !repair_entry_before(e, repair_list[lo])) {   /* e is there */
        repair_list[lo].gen = e.gen;    /* a newer loss: a repair under way keeps it */
        return 1;
    }
    if (repair_count == FEED_REPAIR_MAX)
        return 0;
    if (repair_count == repair_cap) {
        size_t cap = repair_cap ? 2 * repair_cap : 16;
        repair_entry *bigger = realloc(repair_list, cap * sizeof *bigger);
        if (!bigger)
            return 0;
        repair_list = bigger;
        repair_cap = cap;
    }
    memmove(repair_list + lo + 1, repair_list + lo, (repair_count - lo) * sizeof *repair_list);
    repair_list[lo] = e;
    repair_count++;
    atomic_store(&repair_pending, repair_count);
    return 1;
}

int feed__repair_remember(const feed_core *c, int fam, int64_t owner)
{
    repair_entry e = { .store = c->topo.store[fam], .uid = owner, .fam = fam };
    int done;

    pthread_mutex_lock(&repair_lock);
    done = repair_remember_locked(e);
    pthread_mutex_unlock(&repair_lock);
    return done;
}

uint64_t feed__repair_gen(void)
{
    uint64_t gen;

    pthread_mutex_lock(&repair_lock);
    gen = repair_gen;
    pthread_mutex_unlock(&repair_lock);
    return gen;
}

int feed__repairs_pending(void)
{
    return atomic_load(&repair_pending) > 0;
}

/* Is a copy in slot still to be dropped (an entry of this store whose
 * uid's keys hash there)? After the repairs ran and some failed, a read
 * of that slot must not use the copy: its lost write may be missing. */
int feed__repair_slot_pending(const feed_core *c, unsigned slot)
{
    int found = 0;

    if (!feed__repairs_pending())
        return 0;
    pthread_mutex_lock(&repair_lock);
    for (size_t i = 0; i < repair_count && !found; i++)
        found = repair_mine(c, &repair_list[i]) && feed__uid_slot(repair_list[i].uid) == slot;
    pthread_mutex_unlock(&repair_lock);
    return found;
}

/* Tests only: forget every pending repair, so that each test or fuzz
 * run starts from the same state. */
void feed__repair_forget(void)
{
    pthread_mutex_lock(&repair_lock);
    repair_count = 0;
    atomic_store(&repair_pending, 0);
    pthread_mutex_unlock(&repair_lock);
}

/* Copy the entries c's handle reads (repair_mine): *n of them in a new array. They stay on the
 * list until their copies are known dropped (repair_done): until then every
 * request of the process that reaches Redis drops them again first, so no
 * page anywhere in the process is read between a handle taking the list
 * and its DELs landing. */
static repair_entry *repair_take(const feed_core *c, size_t *n, uint64_t *gen)
{
    repair_entry *uids = NULL;
    size_t k = 0;

    *n = 0;
    pthread_mutex_lock(&repair_lock);
    *gen = repair_gen;
    for (size_t i = 0; i < repair_count; i++)
        *n += (size_t)repair_mine(c, &repair_list[i]);
    if (*n > 0 && (uids = malloc(*n * sizeof *uids)) != NULL) {
        for (size_t i = 0; i < repair_count; i++)
            if (repair_mine(c, &repair_list[i]))
                uids[k++] = repair_list[i];
    } else {
        *n = 0;                 /* none, or no memory: try again next call */
    }
    pthread_mutex_unlock(&repair_lock);
    return uids;
}

/* e's copy is dropped: off the list, unless a loss was remembered for it
 * after the copy of the list was taken (its gen is newer). */
static void repair_done(repair_entry e)
{
    size_t kept = 0;

    pthread_mutex_lock(&repair_lock);
    for (size_t i = 0; i < repair_count; i++)
        if (repair_list[i].store != e.store || repair_list[i].uid != e.uid ||
            repair_list[i].fam != e.fam || repair_list[i].gen != e.gen)
            repair_list[kept++] = repair_list[i];
    repair_count = kept;
    atomic_store(&repair_pending, repair_count);
    pthread_mutex_unlock(&repair_lock);
}

/* ---- The repair request ----------------------------------------------
 *
 * Each remembered feed's lease, then its copy, by single-key DELs in one
 * pipeline (on a cluster, each sent to its slot: a multi-key DEL gets
 * TRYAGAIN while the slot migrates, a single key is redirected with ASK).
 * The lease first: once it is gone, no rebuild that read SQL before the
 * lost write can install, and the second DEL removes whatever copy is
 * there. Dropping a copy is always safe: the next read rebuilds it. A DEL
 * refused (an ACL) keeps its feed on the list; a batch that failed puts
 * every feed back. The repairs are a hook's writes: WAITed with
 * redis_wait_replicas (a repair must survive a failover as much as the write
 * it stands for) and allowed past a fence being cleared. The caller's
 * request goes on whatever they give: it may well be for another node. */
typedef struct repair_op {
    feed_op  op;
    repair_entry *uids;
    size_t   n;
    uint64_t gen;               /* the list's generation when taken */
    const char *argv[2];
    size_t   lens[2];
    char     err[FEED_ERRMSG];
    char     keys[];            /* two key buffers of key_cap */
} repair_op;

static int repair_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    repair_op *r = arg;
    feed_core *c = r->op.c;
    char *key = r->keys, *lease = r->keys + c->key_cap;

    feed__family_keys(c->key_base[r->uids[i / 2].fam], r->uids[i / 2].uid, key, lease);
    r->argv[0] = "DEL";
    r->argv[1] = i % 2 == 0 ? lease : key;
    r->lens[0] = 3;
    r->lens[1] = strlen(r->argv[1]);
    *argv = r->argv;
    *lens = r->lens;
    return 2;
}

static void repair_reply(void *arg, size_t i, const redisReply *rep)
{
    repair_op *r = arg;

    if (rep->type == REDIS_REPLY_ERROR)
        r->op.c->stats.redis_errors++;
    else
        r->uids[i / 2].dropped |= (unsigned char)(i % 2 == 0 ? 1 : 2);
}

static enum feed_want repair_step(feed_op *op, int64_t now)
{
    repair_op *r = (repair_op *)op;
    feed_core *c = op->c;

    (void)now;
    if (op->state == 0) {
        op->state = 1;
        op->batch = (feed_batch){ .n = 2 * r->n, .arg = r,
                                  .flags = FEED_B_HOOK | FEED_B_REPAIR |
                                           (c->topo.cluster ? FEED_B_EACH : 0),
                                  .slot = 0, .build = repair_build, .reply = repair_reply };
        return FEED_W_REDIS;
    }
    for (size_t i = 0; i < r->n; i++)
        if (op->redis_rc == FEED_OK && r->uids[i].dropped == 3) {
            c->stats.repairs++;
            repair_done(r->uids[i]);
        }
    op->rc = op->redis_rc;
    return FEED_W_DONE;
}

static void repair_free(feed_op *op)
{
    repair_op *r = (repair_op *)op;

    free(r->uids);
    free(r);
}

uint64_t feed__repair_op_gen(const feed_op *op)
{
    return ((const repair_op *)op)->gen;
}

/* A request that drops this store's remembered copies; NULL when there is
 * none (or no memory: the entries stay, the next call tries again). */
feed_op *feed__repair_op(feed_core *c)
{
    repair_op *r = calloc(1, sizeof *r + 2 * c->key_cap);

    if (!r)
        return NULL;
    if (!(r->uids = repair_take(c, &r->n, &r->gen))) {
        free(r);
        return NULL;
    }
    r->op.c = c;
    r->op.err = r->err;
    r->op.step = repair_step;
    r->op.free = repair_free;
    return &r->op;
}
