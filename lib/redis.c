/* redis.c -- the Redis transport, and the only file that talks to hiredis.
 *
 * One blocking connection per handle, with the configured timeout on connect
 * and on every command. A connection that fails (I/O error, timeout,
 * protocol error) is dropped at once and never reused half-read; the next
 * call reconnects, at most once per retry_ms, so a Redis outage cannot turn
 * into a connect storm. Scripts are loaded once per connection (SCRIPT LOAD,
 * pipelined) and called by SHA; a NOSCRIPT answer (SCRIPT FLUSH, a restart
 * behind a proxy) loads the script again and retries once.
 *
 * A write (hook, reload, invalidate) that cannot reach Redis leaves that
 * feed's cached copy possibly stale, and Redis may well keep the copy through
 * the outage (a freeze, a partition, a restart from disk). So the feed is
 * remembered, and the first handle of the process to reach that Redis again
 * drops the copy before anything else (repair() below); the next read
 * rebuilds it from SQL.
 *
 * A later step adds Redis Cluster routing here: every key a call names lives
 * on one slot (the {uid} hash tag), so routing is by the first key.
 *
 * On a Redis Cluster (cfg.redis_cluster) every function here hands its
 * commands to cluster_io.c instead: every key a call names lives on one slot
 * (the {uid} hash tag), so a call is routed by its first key. A single Redis
 * takes exactly the paths and round trips it always did.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "internal.h"

static const char *script_source(enum feed_script s)
{
    switch (s) {
    case FEED_SCRIPT_PAGE:    return feed_lua_page;
    case FEED_SCRIPT_REBUILD: return feed_lua_rebuild;
    case FEED_SCRIPT_INSERT:  return feed_lua_insert;
    case FEED_SCRIPT_DELETE:  return feed_lua_delete;
    case FEED_SCRIPT_NEWER:   return feed_lua_newer;
    case FEED_SCRIPT_INVALIDATE: return feed_lua_invalidate;
    default:                  return NULL;
    }
}

static const char *script_name(enum feed_script s)
{
    switch (s) {
    case FEED_SCRIPT_PAGE:    return "page.lua";
    case FEED_SCRIPT_REBUILD: return "rebuild.lua";
    case FEED_SCRIPT_INSERT:  return "insert.lua";
    case FEED_SCRIPT_DELETE:  return "delete.lua";
    case FEED_SCRIPT_NEWER:   return "newer.lua";
    case FEED_SCRIPT_INVALIDATE: return "invalidate.lua";
    default:                  return "?";
    }
}

static struct timeval ms_to_timeval(uint32_t ms)
{
    struct timeval tv;

    tv.tv_sec = ms / 1000;
    tv.tv_usec = (ms % 1000) * 1000;
    return tv;
}

void feed__redis_drop(feed *f)
{
    if (f->redis) {
        redisFree(f->redis);
        f->redis = NULL;
    }
}

/* The connection failed under a call: keep the reason, drop the socket.
 * The failure counts as a connect attempt: against a frozen server the next
 * call would otherwise connect at once (the kernel still accepts) and wait
 * out a second timeout on SCRIPT LOAD. */
static void io_failed(feed *f, const char *what)
{
    f->stats.redis_errors++;
    f->redis_attempt_ms = feed__now_ms();
    feed__error(f, FEED_EREDIS, "Redis %s: %s", what,
                f->redis && f->redis->errstr[0] ? f->redis->errstr : "connection lost");
    feed__redis_drop(f);
}

/* A reply must be a bulk string holding a 40-hex SHA1. */
static int take_sha(feed *f, redisReply *r, char sha[41])
{
    if (!r || r->type != REDIS_REPLY_STRING || r->len != 40) {
        f->stats.redis_errors++;
        feed__error(f, FEED_EREDIS, "Redis SCRIPT LOAD refused: %s",
                    r && r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        return FEED_EREDIS;
    }
    memcpy(sha, r->str, 40);
    sha[40] = '\0';
    return FEED_OK;
}

static int authenticate(feed *f)
{
    const char *argv[3] = { "AUTH", NULL, NULL };
    int argc = 1, rc = FEED_OK;
    redisReply *r;

    if (f->cfg.redis_user)
        argv[argc++] = f->cfg.redis_user;
    argv[argc++] = f->cfg.redis_password;
    r = redisCommandArgv(f->redis, argc, argv, NULL);
    f->stats.redis_calls++;
    if (!r) {
        io_failed(f, "AUTH");
        return FEED_EUNAVAILABLE;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        f->stats.redis_errors++;
        rc = feed__error(f, FEED_EREDIS, "Redis refused AUTH: %s", r->str);
    }
    freeReplyObject(r);
    return rc;
}

/* All scripts in one round trip. */
static int load_scripts(feed *f)
{
    int rc = FEED_OK;

    for (int s = 0; s < FEED_SCRIPT_COUNT; s++) {
        if (redisAppendCommand(f->redis, "SCRIPT LOAD %s", script_source(s)) != REDIS_OK) {
            io_failed(f, "SCRIPT LOAD");
            return FEED_ENOMEM;
        }
    }
    f->stats.redis_calls++;
    for (int s = 0; s < FEED_SCRIPT_COUNT; s++) {
        redisReply *r = NULL;
        if (redisGetReply(f->redis, (void **)&r) != REDIS_OK) {
            io_failed(f, "SCRIPT LOAD");
            return FEED_EUNAVAILABLE;
        }
        /* Read every reply even after a refusal: the pipeline stays in step. */
        if (rc == FEED_OK)
            rc = take_sha(f, r, f->sha[s]);
        freeReplyObject(r);
    }
    return rc;
}

/* AUTH and the scripts on a cluster node's fresh connection *c, by the
 * same code as the single connection's. *c is NULL afterwards if it failed
 * under the hello. */
int feed__redis_hello(feed *f, redisContext **c)
{
    redisContext *saved = f->redis;
    int64_t attempt = f->redis_attempt_ms;
    int rc;

    f->redis = *c;
    rc = f->cfg.redis_password ? authenticate(f) : FEED_OK;
    if (rc == FEED_OK)
        rc = load_scripts(f);
    *c = f->redis;
    f->redis = saved;
    f->redis_attempt_ms = attempt;
    return rc;
}

/* ---- Repairs after lost writes --------------------------------------
 *
 * One list for the whole process, so that whichever handle reaches Redis
 * first after an outage drops the copies, not only the handle whose write
 * failed (it may sit idle for long, and its late DEL would then throw away a
 * copy rebuilt correctly in between). An entry is (store, uid), store naming
 * the Redis server and key prefix; sorted, without duplicates, so a long
 * outage under many writes to the same feeds costs one entry per feed. */
typedef struct repair_entry {
    uint64_t store;
    int64_t  uid;
} repair_entry;

static pthread_mutex_t repair_lock = PTHREAD_MUTEX_INITIALIZER;
static repair_entry   *repair_list;
static size_t          repair_count, repair_cap;
static atomic_size_t   repair_pending;   /* repair_count, read without the lock */

/* FNV-1a over host, port and key prefix: which copies an entry names. */
static uint64_t store_of(const feed *f)
{
    /* Under Sentinel the store is the master name, wherever it now runs. */
    /* A cluster is named by its seed list: every handle of an application
     * is configured alike. */
    const char *parts[3] = { f->cfg.redis_cluster ? f->cfg.redis_cluster : f->cfg.redis_host,
                             f->cfg.key_prefix, "" };
    uint64_t h = 14695981039346656037ULL ^
                 (uint64_t)(f->cfg.redis_cluster ? 0 : f->cfg.redis_port);

    if (f->cfg.redis_sentinels) {
        parts[0] = f->cfg.redis_sentinels;
        parts[2] = f->cfg.redis_master_name;
    }
    for (int i = 0; i < 3; i++) {
        for (const char *p = parts[i]; *p; p++)
            h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        h = (h ^ 0xff) * 1099511628211ULL;   /* separator */
    }
    return h;
}

static int entry_before(repair_entry a, repair_entry b)
{
    return a.store < b.store || (a.store == b.store && a.uid < b.uid);
}

/* Lock held. */
static int remember_locked(repair_entry e)
{
    size_t lo = 0, hi = repair_count;

    while (lo < hi) {           /* the first entry not before e */
        size_t mid = lo + (hi - lo) / 2;
        if (entry_before(repair_list[mid], e))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo < repair_count && repair_list[lo].store == e.store && repair_list[lo].uid == e.uid)
        return 1;
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

int feed__redis_remember(feed *f, int64_t uid)
{
    repair_entry e = { store_of(f), uid };
    int done;

    pthread_mutex_lock(&repair_lock);
    done = remember_locked(e);
    pthread_mutex_unlock(&repair_lock);
    return done;
}

/* Tests only (the fuzz targets): forget every pending repair, so that each
 * run starts from the same state. */
void feed__redis_forget_repairs(void)
{
    pthread_mutex_lock(&repair_lock);
    repair_count = 0;
    atomic_store(&repair_pending, 0);
    pthread_mutex_unlock(&repair_lock);
}

/* Take this store's entries off the list: *n uids in a new array. */
static int64_t *take_repairs(uint64_t store, size_t *n)
{
    int64_t *uids = NULL;
    size_t kept = 0;

    *n = 0;
    pthread_mutex_lock(&repair_lock);
    for (size_t i = 0; i < repair_count; i++)
        *n += repair_list[i].store == store;
    if (*n > 0 && (uids = malloc(*n * sizeof *uids)) != NULL) {
        *n = 0;
        for (size_t i = 0; i < repair_count; i++) {
            if (repair_list[i].store == store)
                uids[(*n)++] = repair_list[i].uid;
            else
                repair_list[kept++] = repair_list[i];
        }
        repair_count = kept;
        atomic_store(&repair_pending, repair_count);
    } else {
        *n = 0;                 /* none, or no memory: try again next call */
    }
    pthread_mutex_unlock(&repair_lock);
    return uids;
}

static void put_back(feed *f, const int64_t *uids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        feed__redis_remember(f, uids[i]);
}

/* On a working connection, before the caller's command: DEL each remembered
 * feed of this store and its lease, in one pipeline. Dropping a cached copy
 * is always safe (the next read rebuilds it from SQL), and dropping the
 * lease stops a rebuild that read SQL before the lost write from installing.
 * If the connection fails meanwhile, the entries go back on the list. */
static int repair(feed *f)
{
    size_t n;
    int64_t *uids = take_repairs(store_of(f), &n);
    char *key, *lease_key;

    if (!uids)
        return FEED_OK;
    key = malloc(2 * f->key_cap);
    if (!key) {
        put_back(f, uids, n);
        free(uids);
        return feed__error(f, FEED_ENOMEM, "out of memory repairing feeds");
    }
    lease_key = key + f->key_cap;
    for (size_t i = 0; i < n; i++) {
        const char *argv[3] = { "DEL", key, lease_key };
        feed__keys_of(f, uids[i], key, lease_key);
        if (redisAppendCommandArgv(f->redis, 3, argv, NULL) != REDIS_OK) {
            free(key);
            io_failed(f, "DEL");
            put_back(f, uids, n);
            free(uids);
            return FEED_ENOMEM;
        }
    }
    free(key);
    /* A repair must survive a failover as much as the write it stands for. */
    if (f->cfg.redis_wait_replicas > 0 && feed__wait_append(f, f->redis) != REDIS_OK) {
        io_failed(f, "WAIT");
        put_back(f, uids, n);
        free(uids);
        return FEED_ENOMEM;
    }
    f->stats.redis_calls++;
    for (size_t i = 0; i < n; i++) {
        redisReply *r = NULL;
        if (redisGetReply(f->redis, (void **)&r) != REDIS_OK) {
            io_failed(f, "DEL");
            put_back(f, uids, n);
            free(uids);
            return FEED_EUNAVAILABLE;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            /* Refused (an ACL): the copy stays, so the entry does too, and
             * the next command of any handle tries again. */
            f->stats.redis_errors++;
            feed__redis_remember(f, uids[i]);
        } else {
            f->stats.repairs++;
        }
        freeReplyObject(r);
    }
    if (f->cfg.redis_wait_replicas > 0 && feed__wait_read(f, f->redis) != FEED_OK) {
        put_back(f, uids, n);   /* dropped here, maybe not on the replicas yet */
        free(uids);
        return FEED_EREDIS;
    }
    free(uids);
    return FEED_OK;
}

/* Returns FEED_OK, FEED_EUNAVAILABLE (no answer) or FEED_EREDIS (answered
 * and refused: a wrong password, NOAUTH, ...). */
int feed__redis_connect(feed *f)
{
    struct timeval tv = ms_to_timeval(f->cfg.redis_timeout_ms);
    const char *host = f->cfg.redis_host;
    int port = f->cfg.redis_port, rc;

    if (f->cfg.redis_cluster)
        return feed__cluster_connect(f);
    feed__redis_drop(f);
    f->redis_attempt_ms = feed__now_ms();
    f->stats.redis_connects++;
    f->fence.state = FEED_FENCE_UNKNOWN;
    if (f->cfg.redis_sentinels) {          /* sentinel.c: where the primary is now */
        if ((rc = feed__sentinel_primary(f)) != FEED_OK)
            return rc;
        host = f->primary_host;
        port = f->primary_port;
    }
    f->redis = redisConnectWithTimeout(host, port, tv);
    if (!f->redis)
        return feed__error(f, FEED_ENOMEM, "Redis connect: out of memory");
    if (f->redis->err || redisSetTimeout(f->redis, tv) != REDIS_OK) {
        f->stats.redis_errors++;
        feed__error(f, FEED_EUNAVAILABLE, "Redis connect to %s:%d: %s",
                    host, port, f->redis->errstr);
        feed__redis_drop(f);
        return FEED_EUNAVAILABLE;
    }
    rc = f->cfg.redis_password ? authenticate(f) : FEED_OK;
    if (rc == FEED_OK && f->cfg.redis_sentinels)
        rc = feed__sentinel_check_role(f);
    if (rc == FEED_OK)
        rc = load_scripts(f);
    if (rc != FEED_OK)
        feed__redis_drop(f);
    return rc;
}

/* Connected, or reconnected if the last attempt is old enough; then the
 * restart fence (fence.c: until the server's data set is known to be ours,
 * only write hooks may use it), then any repairs pending for this store. */
static int redis_ready(feed *f)
{
    int rc;

    if (!f->redis) {
        if ((rc = feed__retry_due(f, f->redis_attempt_ms, "Redis")) != FEED_OK)
            return rc;
        if ((rc = feed__redis_connect(f)) != FEED_OK)
            return rc;
    }
    if (f->cfg.redis_restart_fence && f->fence.state != FEED_FENCE_TRUSTED) {
        if ((rc = feed__fence_step(f, &f->redis, &f->fence, -1)) != FEED_OK)
            return rc;
        if (f->fence.state != FEED_FENCE_TRUSTED && !f->in_hook)
            return feed__error(f, FEED_EUNAVAILABLE, "Redis came back from a restart or "
                               "failover: its cached copies are being dropped");
    }
    return atomic_load(&repair_pending) > 0 ? repair(f) : FEED_OK;
}

/* On a cluster: each remembered feed's lease, then its copy, by
 * single-key DELs sent to the feed's slot (a multi-key DEL gets TRYAGAIN
 * while the slot migrates; a single key is redirected with ASK). The lease
 * first: once it is gone, no rebuild that read SQL before the lost write
 * can install, and the second DEL removes whatever copy is there. A feed
 * whose node cannot be reached goes back on the list, and the caller's call
 * goes on: it may well be for another node. */
static void repair_cluster(feed *f)
{
    size_t n;
    int64_t *uids = take_repairs(store_of(f), &n);
    char *key, *lease_key;
    int in_hook = f->in_hook, wait_short = f->wait_short;

    if (!uids)
        return;
    /* A repair must survive a failover as much as the write it stands for:
     * its DELs are a hook's (WAITed, allowed past a node's fence). */
    f->in_hook = 1;
    if ((key = malloc(2 * f->key_cap)) == NULL) {
        put_back(f, uids, n);
        free(uids);
        f->in_hook = in_hook;
        return;
    }
    lease_key = key + f->key_cap;
    for (size_t i = 0; i < n; i++) {
        const char *del_lease[2] = { "DEL", lease_key }, *del_feed[2] = { "DEL", key };
        const char **argv[2] = { del_lease, del_feed };
        const size_t *lens[2] = { NULL, NULL };
        const int argc[2] = { 2, 2 };
        redisReply *r[2];

        feed__keys_of(f, uids[i], key, lease_key);
        if (feed__cluster_exchange(f, feed__uid_slot(uids[i]), 2, argc, argv, lens, r) != FEED_OK) {
            feed__redis_remember(f, uids[i]);
            continue;
        }
        if (r[0]->type != REDIS_REPLY_ERROR && r[1]->type != REDIS_REPLY_ERROR) {
            f->stats.repairs++;
        } else {
            /* Refused (an ACL): the copy may stay, so the entry does too. */
            f->stats.redis_errors++;
            feed__redis_remember(f, uids[i]);
        }
        for (int k = 0; k < 2; k++)
            freeReplyObject(r[k]);
    }
    free(key);
    free(uids);
    f->in_hook = in_hook;
    f->wait_short = wait_short;
    feed__clear_error(f);   /* the caller's call decides its own outcome */
}

/* The cluster transport is set up (feed_open may have failed to), then
 * repairs pending for this cluster go first. */
int feed__cluster_ready(feed *f)
{
    int rc;

    if (!f->cluster) {
        if ((rc = feed__retry_due(f, f->redis_attempt_ms, "Redis Cluster")) != FEED_OK)
            return rc;
        f->redis_attempt_ms = feed__now_ms();
        if ((rc = feed__redis_connect(f)) != FEED_OK && !f->cluster)
            return rc;
    }
    if (atomic_load(&repair_pending) > 0)
        repair_cluster(f);
    return FEED_OK;
}

/* One command on a cluster: routed by its first key. */
static redisReply *cluster_round_trip(feed *f, int argc, const char **argv,
                                      const size_t *lens)
{
    redisReply *r;

    if (feed__cluster_ready(f) != FEED_OK)
        return NULL;
    if (feed__cluster_exchange(f, feed__command_slot(argc, argv, lens), 1, &argc, &argv,
                               &lens, &r) != FEED_OK)
        return NULL;
    return r;
}

/* Did the server close a connection that worked (a restart)? Then one retry
 * on a fresh connection is worth it. A timeout is not retried: a frozen
 * server would only double the wait. */
static int closed_by_peer(const redisContext *c)
{
    return c->err == REDIS_ERR_EOF ||
           (c->err == REDIS_ERR_IO && (errno == ECONNRESET || errno == EPIPE));
}

/* The command, and the replica check after it (wait.c: WAIT in a hook,
 * ROLE in a read). NULL: I/O failure, connection not yet dropped. */
static redisReply *send_one(feed *f, int argc, const char **argv, const size_t *lens)
{
    redisReply *r = NULL;

    if (!feed__check_on(f))
        return redisCommandArgv(f->redis, argc, argv, lens);
    if (redisAppendCommandArgv(f->redis, argc, argv, lens) != REDIS_OK ||
        feed__check_append(f, f->redis) != REDIS_OK ||
        redisGetReply(f->redis, (void **)&r) != REDIS_OK)
        return NULL;
    return r;
}

/* One command, one round trip. Returns the reply, which may be an error
 * reply, or NULL with the reason on f and the connection dropped, or kept
 * when only the replica check fell short (f->wait_short). */
static redisReply *round_trip(feed *f, int argc, const char **argv,
                              const size_t *lens)
{
    redisReply *r;
    int retried = 0;

    if (f->cfg.redis_cluster)
        return cluster_round_trip(f, argc, argv, lens);
    for (;;) {
        if (redis_ready(f) != FEED_OK)
            return NULL;
        f->stats.redis_calls++;
        r = send_one(f, argc, argv, lens);
        if (r && feed__check_read(f, f->redis) != FEED_OK) {
            freeReplyObject(r);
            return NULL;
        }
        if (r)
            return r;
        if (retried || !closed_by_peer(f->redis)) {
            io_failed(f, argv[0]);
            return NULL;
        }
        feed__redis_drop(f);
        f->redis_attempt_ms = 0;   /* the server went away under us: try now */
        retried = 1;
    }
}

/* An error reply becomes NULL plus a message; anything else is returned. */
static redisReply *no_error(feed *f, redisReply *r, const char *what)
{
    if (r && r->type == REDIS_REPLY_ERROR) {
        f->stats.redis_errors++;
        feed__error(f, FEED_EREDIS, "Redis %s: %s", what, r->str);
        feed__if_demoted(f, r);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

redisReply *feed__redis_command(feed *f, int argc, const char **argv,
                                const size_t *lens)
{
    return no_error(f, round_trip(f, argc, argv, lens), argv[0]);
}

static int is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

static int reload_script(feed *f, enum feed_script s)
{
    const char *argv[3] = { "SCRIPT", "LOAD", script_source(s) };
    redisReply *r = feed__redis_command(f, 3, argv, NULL);
    int rc;

    if (!r)
        return FEED_EREDIS;
    rc = take_sha(f, r, f->sha[s]);
    freeReplyObject(r);
    return rc;
}

/* EVALSHA <sha> <nkeys> args... : argv gets three leading slots. */
typedef struct evalsha_args {
    const char **argv;
    size_t      *lens;
    const char  *small_argv[16];
    size_t       small_lens[16];
    char         nkeys[12];
    enum feed_script script;
} evalsha_args;

static int evalsha_init(evalsha_args *e, feed *f, enum feed_script s,
                        int nkeys, int argc)
{
    size_t n = (size_t)argc + 3;

    if (n <= 16) {
        e->argv = e->small_argv;
        e->lens = e->small_lens;
    } else {
        e->argv = malloc(n * sizeof *e->argv);
        e->lens = malloc(n * sizeof *e->lens);
        if (!e->argv || !e->lens) {
            free(e->argv);
            free(e->lens);
            return feed__error(f, FEED_ENOMEM, "out of memory building a Redis call");
        }
    }
    e->script = s;
    snprintf(e->nkeys, sizeof e->nkeys, "%d", nkeys);
    e->argv[0] = "EVALSHA";
    e->lens[0] = 7;
    e->argv[1] = f->sha[s];
    e->lens[1] = 40;
    e->argv[2] = e->nkeys;
    e->lens[2] = strlen(e->nkeys);
    return FEED_OK;
}

static void evalsha_set(evalsha_args *e, int argc, const char **argv,
                        const size_t *lens)
{
    for (int i = 0; i < argc; i++) {
        e->argv[i + 3] = argv[i];
        e->lens[i + 3] = lens ? lens[i] : strlen(argv[i]);
    }
}

static void evalsha_free(evalsha_args *e)
{
    if (e->argv != e->small_argv) {
        free(e->argv);
        free(e->lens);
    }
}

/* The server lost the script (SCRIPT FLUSH, a restart behind a proxy): load
 * it again and send the call once more, alone. Otherwise r as it came. */
static redisReply *again_if_noscript(feed *f, evalsha_args *e, int argc, redisReply *r)
{
    if (!is_noscript(r))
        return r;
    freeReplyObject(r);
    if (reload_script(f, e->script) != FEED_OK)
        return NULL;
    e->argv[1] = f->sha[e->script];
    return round_trip(f, argc + 3, e->argv, e->lens);
}

redisReply *feed__redis_script(feed *f, enum feed_script script, int nkeys,
                               int argc, const char **argv, const size_t *lens)
{
    evalsha_args e;
    redisReply *r;

    if (evalsha_init(&e, f, script, nkeys, argc) != FEED_OK)
        return NULL;
    evalsha_set(&e, argc, argv, lens);
    r = again_if_noscript(f, &e, argc, round_trip(f, argc + 3, e.argv, e.lens));
    evalsha_free(&e);
    return no_error(f, r, script_name(script));
}

/* The script's reply r after its commands: none failed, then NOSCRIPT is
 * handled and an error reply becomes NULL; otherwise r is dropped. */
static redisReply *script_after_end(feed *f, evalsha_args *e, int argc, redisReply *r,
                                    int failed)
{
    if (!failed)
        r = again_if_noscript(f, e, argc, r);
    evalsha_free(e);
    if (failed) {
        freeReplyObject(r);
        return NULL;
    }
    return no_error(f, r, script_name(e->script));
}

/* On a cluster: the commands and the script in one exchange on their slot
 * (NOSCRIPT is handled there, per node). */
static redisReply *cluster_script_after(feed *f, size_t ncmds, const int *cargc,
                                        const char **const *cargv,
                                        const size_t *const *clens,
                                        enum feed_script script, int nkeys,
                                        int argc, const char **argv, const size_t *lens)
{
    int all_argc[8];
    const char **all_argv[8];
    const size_t *all_lens[8];
    redisReply *replies[8], *r;
    evalsha_args e;
    int failed = 0;

    if (ncmds + 1 > 8)
        return feed__error(f, FEED_EINVAL, "feed__redis_script_after: %zu commands", ncmds),
               NULL;
    if (evalsha_init(&e, f, script, nkeys, argc) != FEED_OK)
        return NULL;
    evalsha_set(&e, argc, argv, lens);
    for (size_t i = 0; i < ncmds; i++) {
        all_argc[i] = cargc[i];
        all_argv[i] = cargv[i];
        all_lens[i] = clens[i];
    }
    all_argc[ncmds] = argc + 3;
    all_argv[ncmds] = e.argv;
    all_lens[ncmds] = e.lens;
    if (feed__redis_commands(f, ncmds + 1, all_argc, all_argv, all_lens, replies) != FEED_OK) {
        evalsha_free(&e);
        return NULL;
    }
    for (size_t i = 0; i < ncmds; i++) {
        if (replies[i]->type == REDIS_REPLY_ERROR && !failed) {
            f->stats.redis_errors++;
            feed__error(f, FEED_EREDIS, "Redis %s: %s", cargv[i][0], replies[i]->str);
            failed = 1;
        }
        freeReplyObject(replies[i]);
    }
    r = replies[ncmds];
    return script_after_end(f, &e, argc, r, failed);
}

/* Plain commands, then one script call, all in one round trip: the script
 * decides atomically what to do with what the commands prepared (rebuild.c
 * stages rows with a plain ZADD, which Redis parses far faster than a script
 * receives arguments). An error reply to a command fails the call, with the
 * script's reply dropped. NOSCRIPT: the script is loaded and called again
 * alone; what the commands prepared is still there. Returns the script's
 * reply, or NULL with the reason on f. */
redisReply *feed__redis_script_after(feed *f, size_t ncmds, const int *cargc,
                                     const char **const *cargv,
                                     const size_t *const *clens,
                                     enum feed_script script, int nkeys,
                                     int argc, const char **argv, const size_t *lens)
{
    evalsha_args e;
    redisReply *r = NULL;
    int failed = 0;

    if (f->cfg.redis_cluster)
        return cluster_script_after(f, ncmds, cargc, cargv, clens, script, nkeys, argc, argv,
                                    lens);
    if (redis_ready(f) != FEED_OK)
        return NULL;
    if (evalsha_init(&e, f, script, nkeys, argc) != FEED_OK)
        return NULL;
    evalsha_set(&e, argc, argv, lens);
    for (size_t i = 0; i <= ncmds + feed__check_on(f); i++) {
        int ok = i < ncmds ? redisAppendCommandArgv(f->redis, cargc[i], cargv[i], clens[i])
            : i == ncmds ? redisAppendCommandArgv(f->redis, argc + 3, e.argv, e.lens)
            : feed__check_append(f, f->redis);
        if (ok != REDIS_OK) {   /* part of it may sit in the buffer: drop */
            io_failed(f, "pipeline");
            evalsha_free(&e);
            return NULL;
        }
    }
    f->stats.redis_calls++;
    for (size_t i = 0; i <= ncmds; i++) {
        freeReplyObject(r);
        r = NULL;
        if (redisGetReply(f->redis, (void **)&r) != REDIS_OK) {
            io_failed(f, i < ncmds ? cargv[i][0] : script_name(script));
            evalsha_free(&e);
            return NULL;
        }
        if (i < ncmds && r->type == REDIS_REPLY_ERROR && !failed) {
            f->stats.redis_errors++;
            feed__error(f, FEED_EREDIS, "Redis %s: %s", cargv[i][0], r->str);
            failed = 1 + feed__is_readonly(r);
        }
    }
    if (feed__check_on(f) && feed__check_read(f, f->redis) != FEED_OK) {
        freeReplyObject(r);
        evalsha_free(&e);
        return NULL;
    }
    if (failed == 2)
        feed__demote(f);
    return script_after_end(f, &e, argc, r, failed);
}

/* A page read's commands are small: formatted here on the stack and written
 * in one send(), instead of through hiredis's output buffer. hiredis
 * grows that buffer by realloc for every command and frees it once written,
 * and on glibc that pattern, repeated call after call, fills the
 * thread cache for its size, after which every free lands next to the
 * heap's top and consolidates the whole heap (malloc_consolidate): a
 * ZREVRANGEBYSCORE page cost 64k client instructions instead of 48k
 * (bench/client_cpu, callgrind). hiredis's own formatting (sdscatfmt per
 * argument) costs a further 1-2k per call. */
#define DIRECT_MAX 1024

/* Append "$<len>\r\n" or "*<n>\r\n" to buf at *at. */
static void put_header(char *buf, size_t *at, char kind, size_t n)
{
    char digits[24];
    size_t k = 0;

    buf[(*at)++] = kind;
    do
        digits[k++] = (char)('0' + n % 10);
    while ((n /= 10) > 0);
    while (k > 0)
        buf[(*at)++] = digits[--k];
    buf[(*at)++] = '\r';
    buf[(*at)++] = '\n';
}

/* Write the n commands to c's socket in the protocol. 1: written; 0: they
 * do not fit DIRECT_MAX, a command's lengths are NULL (strlen's, as hiredis
 * allows), or hiredis holds output not yet written (its order must be
 * kept), so nothing was written and the caller appends through hiredis; -1: the write failed, c->err and c->errstr say why (as hiredis
 * sets them, so closed_by_peer() reads them alike). cluster_io.c uses it
 * too. */
int feed__send_direct(redisContext *c, size_t n, const int *argc,
                      const char **const *argv, const size_t *const *lens)
{
    char buf[DIRECT_MAX];
    size_t at = 0, need = 0;

    if (c->obuf[0] != '\0')    /* an sds: empty unless output is pending */
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (!lens || !lens[i])   /* lengths by strlen: hiredis's way */
            return 0;
        need += 24;
        for (int a = 0; a < argc[i]; a++) {
            if (lens[i][a] > sizeof buf)
                return 0;
            need += 24 + lens[i][a] + 2;
        }
    }
    if (need > sizeof buf)
        return 0;
    for (size_t i = 0; i < n; i++) {
        put_header(buf, &at, '*', (size_t)argc[i]);
        for (int a = 0; a < argc[i]; a++) {
            put_header(buf, &at, '$', lens[i][a]);
            memcpy(buf + at, argv[i][a], lens[i][a]);
            at += lens[i][a];
            buf[at++] = '\r';
            buf[at++] = '\n';
        }
    }
    for (size_t done = 0; done < at;) {
        /* MSG_NOSIGNAL: a peer that went away is an EPIPE here, handled
         * as any failed write, not a SIGPIPE that ends the process. */
        ssize_t w = send(c->fd, buf + done, at - done, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            c->err = REDIS_ERR_IO;
            snprintf(c->errstr, sizeof c->errstr, "%s",
                     w < 0 ? strerror(errno) : "write returned 0");
            return -1;
        }
        done += (size_t)w;
    }
    return 1;
}

/* n plain commands in ONE round trip; every key they name lives on one
 * hash slot (on a Redis Cluster, routed by the first command's key).
 * replies[i] gets each reply, error replies included: the caller reads and
 * frees them. A server that closed a working connection (a restart) is
 * retried once on a fresh one, as round_trip() does. Returns FEED_OK, or
 * FEED_EREDIS with every replies[i] NULL, the connection dropped and the
 * reason on f. */
int feed__redis_commands(feed *f, size_t n, const int *argc,
                         const char **const *argv, const size_t *const *lens,
                         redisReply **replies)
{
    int retried = 0;

    for (size_t i = 0; i < n; i++)
        replies[i] = NULL;
    if (f->cfg.redis_cluster) {
        if (n == 0)
            return FEED_OK;
        if (feed__cluster_ready(f) != FEED_OK)
            return FEED_EREDIS;
        return feed__cluster_exchange(f, feed__command_slot(argc[0], argv[0], lens[0]), n,
                                      argc, argv, lens, replies);
    }
    for (;;) {
        size_t sent = 0, got = 0;
        int direct;
        if (redis_ready(f) != FEED_OK)
            return FEED_EREDIS;
        f->stats.redis_calls++;
        /* With the replica check on, the commands and the check go out in
         * one write through hiredis, as before: a second write to a server
         * that dropped us in between would raise SIGPIPE in hiredis. */
        direct = feed__check_on(f) ? 0 : feed__send_direct(f->redis, n, argc, argv, lens);
        if (direct == 1)
            sent = n;
        while (direct == 0 && sent < n &&
               redisAppendCommandArgv(f->redis, argc[sent], argv[sent], lens[sent]) == REDIS_OK)
            sent++;
        /* The replica check (wait.c: ROLE after a read under Sentinel) rides
         * in the same round trip, as in round_trip(). A write that failed
         * (direct < 0) is handled as a read that failed, below. */
        if (direct >= 0 &&
            (sent < n || (feed__check_on(f) && feed__check_append(f, f->redis) != REDIS_OK))) {
            io_failed(f, "pipeline");   /* out of memory; part may sit in the buffer */
            return FEED_EREDIS;
        }
        while (direct >= 0 && got < n &&
               redisGetReply(f->redis, (void **)&replies[got]) == REDIS_OK)
            got++;
        if (got == n && feed__check_read(f, f->redis) != FEED_OK) {
            for (size_t i = 0; i < n; i++) {
                freeReplyObject(replies[i]);
                replies[i] = NULL;
            }
            if (f->redis)   /* dropped unless the check itself kept it */
                feed__redis_drop(f);
            return FEED_EREDIS;
        }
        if (got == n) {
            for (size_t i = 0; i < n; i++)
                feed__if_demoted(f, replies[i]);   /* -READONLY: a demoted primary */
            return FEED_OK;
        }
        for (size_t i = 0; i < got; i++) {
            freeReplyObject(replies[i]);
            replies[i] = NULL;
        }
        if (retried || got > 0 || !closed_by_peer(f->redis)) {
            io_failed(f, argv[0][0]);
            return FEED_EREDIS;
        }
        feed__redis_drop(f);
        f->redis_attempt_ms = 0;   /* the server went away under us: try now */
        retried = 1;
    }
}

/* Call i of a pipeline into e: the caller's arguments after EVALSHA's
 * three. Returns the whole argc. */
static int evalsha_fill(evalsha_args *e, feed__args_fn *fill, void *arg, size_t i)
{
    int nkeys, argc = fill(arg, i, e->argv + 3, e->lens + 3, &nkeys);

    e->lens[2] = (size_t)snprintf(e->nkeys, sizeof e->nkeys, "%d", nkeys);
    return argc + 3;
}

/* Send the calls not yet done (done[i] == 0) in one pipeline and read every
 * reply. A NOSCRIPT leaves done[i] at 0 for another pass; any other error
 * reply marks the call done and failed. */
static int pipeline_pass(feed *f, evalsha_args *e, size_t n,
                         feed__args_fn *fill, feed__reply_fn *on_reply, void *arg,
                         unsigned char *done, int *noscript)
{
    int rc = FEED_OK, demoted = 0;
    size_t sent = 0;

    if (redis_ready(f) != FEED_OK)
        return FEED_EREDIS;
    for (size_t i = 0; i < n; i++) {
        if (done[i])
            continue;
        if (redisAppendCommandArgv(f->redis, evalsha_fill(e, fill, arg, i), e->argv,
                                   e->lens) != REDIS_OK) {
            io_failed(f, "pipeline");
            return FEED_EREDIS;
        }
        sent++;
    }
    if (feed__check_on(f) && feed__check_append(f, f->redis) != REDIS_OK) {
        io_failed(f, "pipeline");
        return FEED_EREDIS;
    }
    f->stats.redis_calls++;
    *noscript = 0;
    for (size_t i = 0; i < n && sent > 0; i++) {
        redisReply *r = NULL;
        if (done[i])
            continue;
        sent--;
        if (redisGetReply(f->redis, (void **)&r) != REDIS_OK) {
            io_failed(f, "pipeline");
            return FEED_EREDIS;
        }
        if (is_noscript(r)) {
            *noscript = 1;
        } else {
            done[i] = 1;
            if (r->type == REDIS_REPLY_ERROR && rc == FEED_OK) {
                f->stats.redis_errors++;
                rc = feed__error(f, FEED_EREDIS, "Redis %s: %s",
                                 script_name(e->script), r->str);
                demoted = demoted || feed__is_readonly(r);
            } else if (r->type != REDIS_REPLY_ERROR && on_reply) {
                on_reply(arg, i, r);
            }
        }
        freeReplyObject(r);
    }
    if (feed__check_on(f) && feed__check_read(f, f->redis) != FEED_OK)
        return FEED_EREDIS;
    if (demoted)
        feed__demote(f);
    return rc;
}

/* On a cluster each call goes to its slot's node (hooks.c groups a
 * fan-out's feeds by slot), every node's pipeline at once. */
typedef struct many_args {
    evalsha_args   *e;
    feed__args_fn  *fill;
    feed__reply_fn *on_reply;
    void           *arg;
} many_args;

static int many_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    many_args *m = arg;
    int argc = evalsha_fill(m->e, m->fill, m->arg, i);

    *argv = m->e->argv;
    *lens = m->e->lens;
    return argc;
}

static void many_reply(void *arg, size_t i, const redisReply *r)
{
    many_args *m = arg;

    m->on_reply(m->arg, i, r);
}

int feed__redis_script_many(feed *f, enum feed_script script, size_t n,
                            int max_argc, feed__args_fn *fill, void *arg)
{
    return feed__redis_script_many_r(f, script, n, max_argc, fill, NULL, arg);
}

/* The same script for n feeds, pipelined: one round trip, plus one more if
 * the server lost the script. */
int feed__redis_script_many_r(feed *f, enum feed_script script, size_t n, int max_argc,
                              feed__args_fn *fill, feed__reply_fn *on_reply, void *arg)
{
    evalsha_args e;
    unsigned char *done;
    int rc, noscript = 0;

    if (n == 0)
        return FEED_OK;
    if (evalsha_init(&e, f, script, 0, max_argc) != FEED_OK)
        return FEED_ENOMEM;
    if (f->cfg.redis_cluster) {
        many_args m = { &e, fill, on_reply, arg };
        rc = feed__cluster_ready(f);
        if (rc == FEED_OK)
            rc = feed__cluster_many_r(f, n, many_build, on_reply ? many_reply : NULL, &m);
        evalsha_free(&e);
        return rc == FEED_OK || rc == FEED_ENOMEM ? rc : FEED_EREDIS;
    }
    done = calloc(n, 1);
    if (!done) {
        evalsha_free(&e);
        return feed__error(f, FEED_ENOMEM, "out of memory for a pipeline of %zu", n);
    }
    rc = pipeline_pass(f, &e, n, fill, on_reply, arg, done, &noscript);
    if (noscript && f->redis) {
        if (reload_script(f, script) == FEED_OK) {
            e.argv[1] = f->sha[script];
            int again = pipeline_pass(f, &e, n, fill, on_reply, arg, done, &noscript);
            if (rc == FEED_OK)
                rc = again;
        }
        if (noscript && rc == FEED_OK)
            rc = feed__error(f, FEED_EREDIS, "Redis %s: NOSCRIPT twice", script_name(script));
    }
    evalsha_free(&e);
    free(done);
    return rc;
}
