/* internal.h -- what the files of the library share; not installed.
 *
 * The files, one job each:
 *   handle.c   config, open/close, error messages, stats
 *   redis.c    the Redis transport: connect, AUTH, scripts by SHA, NOSCRIPT
 *   pg.c       the PostgreSQL side: primary and replica, bounded connects and
 *              statements, prepared statements, row fetch
 *   codec.c    members, scores and integers as bytes, parsed strictly
 *   page.c     the read path: feed_page
 *   newer.c    pull-to-refresh: feed_page_newer
 *   health.c   feed_health: each store's state
 *   rebuild.c  a miss or a reload: top rows from SQL installed under a lease
 *   hooks.c    the write path: insert, delete, fanout, reload, invalidate
 *   cursor.c   opaque cursor tokens
 *   score.c    composite scores
 *   cluster.c  Redis Cluster decisions: slots, the slot map, what a reply means
 *   cluster_io.c  Redis Cluster transport: a connection per node, redirects
 *   sentinel.c asking the Sentinels for the primary, checking its ROLE
 *   fence.c    the restart fence: no cached page survives a restart or failover
 *   wait.c     WAIT after hooks, ROLE after reads: the replicas hold what was served
 * and the Lua scripts in lua/, embedded as feed_lua_<name> (build/lib/scripts.c).
 */
#ifndef FEED_INTERNAL_H
#define FEED_INTERNAL_H

#include <stdarg.h>
#include <stdint.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "feedcache.h"

/* Member encoding (codec.c): an id as a short string whose byte order is
 * the ids' numeric order, so that Redis, which orders equal scores by member
 * bytes, orders ties by id exactly as SQL does; at most 19 bytes. The end
 * marker is a member no id can encode to; its score is -inf, below every
 * real score. Buffers hold FEED_MEMBER_MAX bytes (the member and a NUL);
 * callers use the length feed__member_encode returns (members may hold NUL
 * bytes). */
#define FEED_MEMBER_MAX 24
#define FEED_END_MEMBER "end"

#define FEED_HINTS 64               /* page.c: rank hints kept per handle (2-way sets) */

/* The key format: part of every key name, "<prefix>:2:{<uid>}". It changes
 * whenever what the keys hold is read differently (the member encoding, the
 * end marker, the lease), so a library never reads a copy another version
 * wrote: an upgrade costs a cold cache, never a misread page. Version 1 was
 * "<prefix>:{<uid>}" with 19 zero-padded digits as members. */
#define FEED_KEY_VERSION "2"

/* The Lua scripts: lua/<name>.lua becomes feed_lua_<name> at build time
 * (tools/embed.c writes build/lib/scripts.c). */
enum feed_script {
    FEED_SCRIPT_PAGE,           /* lua/page.lua    the read path */
    FEED_SCRIPT_REBUILD,        /* lua/rebuild.lua install rows under a lease */
    FEED_SCRIPT_INSERT,         /* lua/insert.lua  insert or rescore hook */
    FEED_SCRIPT_DELETE,         /* lua/delete.lua  delete hook */
    FEED_SCRIPT_NEWER,          /* lua/newer.lua   pull-to-refresh (newer.c) */
    FEED_SCRIPT_INVALIDATE,     /* lua/invalidate.lua drop a copy and its lease */
    FEED_SCRIPT_COUNT
};
extern const char feed_lua_page[], feed_lua_rebuild[], feed_lua_insert[],
                  feed_lua_delete[], feed_lua_newer[], feed_lua_invalidate[];

/* fence.c: one connection's restart fence (FEED_FENCE_* below). */
typedef struct feed_fence {
    int  state;                 /* FEED_FENCE_*; 0 = UNKNOWN */
    char cursor[24];            /* SCAN cursor of a flush in progress */
    char run_id[41];            /* of the server connected to */
    char replid[41];            /* its master_replid (INFO replication) */
    char trusted_run_id[41];    /* the data set last trusted here: "" = none yet */
    char trusted_replid[41];
} feed_fence;

/* A batch of rows from SQL, in (score DESC, id DESC) order. */
typedef struct feed_rows {
    feed_item *items;
    size_t     count;
} feed_rows;

struct feed {
    feed_config cfg;            /* strings point into owned copies below */
    char       *owned[13];  /* one per string field of feed_config */

    /* Redis: ctx is NULL while disconnected. */
    redisContext *redis;
    int64_t       redis_attempt_ms;   /* last connect attempt, monotonic */
    char          sha[FEED_SCRIPT_COUNT][41];

    /* PostgreSQL: pg is NULL while disconnected. */
    PGconn  *pg;
    int64_t  pg_attempt_ms;
    char    *sql_top;           /* SELECT ... WHERE owner=$1 ORDER ... LIMIT $2 */
    char    *sql_after;         /* ... AND (score, id) < ($2, $3) ... LIMIT $4 */
    char    *sql_before;        /* ... AND (score, id) > ($2, $3) ORDER BY ... ASC LIMIT $4 */
    PGconn  *pg_replica;        /* cfg.pg_replica_conninfo; NULL while disconnected */
    int64_t  pg_replica_attempt_ms;
    /* pg_replica_max_lag_ms (pg.c: replica_fresh): the replica may answer
     * until fresh_until; a probe is the primary's WAL insert position at
     * probe_ms, to be found replayed by the replica. */
    int64_t  replica_fresh_until;
    int64_t  replica_probe_ms;          /* 0: no probe */
    int64_t  replica_tried_ms;          /* last probe attempt */
    char     replica_probe_lsn[32];

    /* Keys of the feed last named: "<prefix>:<FEED_KEY_VERSION>:{<uid>}"
     * and its ":lease". */
    char    *key;
    char    *lease_key;
    size_t   key_cap;

    char     ttl_ms[24];        /* cfg.ttl_seconds * 1000 as text, "0" = no TTL */
    char     empty_ttl_ms[24];  /* the TTL of a feed known to be empty, likewise */
    char     lease_ms[24];      /* cfg.lease_ms as text */

    uint64_t token_seed;        /* lease tokens: seed from the OS, then a counter */
    uint64_t token_seq;

    /* page.c: where recent pages ended. hints[h] says that in uid's zset the
     * first entry after the cursor (score, id) sat at rank `rank` when last
     * read; a next page fetches by rank from there and its reply proves (or
     * disproves) that the rank still holds. Never trusted, only a guess. */
    struct feed_hint {
        int64_t  uid, score, id, rank;
        uint64_t used;          /* hint_clock when last put; 0 = empty */
    } hints[FEED_HINTS];
    uint64_t hint_clock;
    int      hint_slack;        /* ranks read below a hinted page (page.c) */
    /* page.c: a first page of uid needs no TTL check before fresh_until
     * (monotonic ms): a PTTL showed the key lives at least that long plus
     * half the TTL. 0 = unknown. */
    struct feed_ttl_seen {
        int64_t uid, fresh_until;
        int     empty;          /* the copy then held only the end marker */
    } ttl_seen[FEED_HINTS];

    feed_stats stats;
    char       errmsg[512];

    /* Redis Cluster (cfg.redis_cluster set): the nodes, the slot map and
     * their connections; redis is then unused. NULL on a single Redis. */
    struct feed_cluster *cluster;
    /* ha: the primary the Sentinels named (sentinel.c), the restart fence
     * (fence.c) and WAIT (redis.c). in_hook is set while a write hook runs:
     * only hooks are WAITed, and only hooks may write before the fence is
     * cleared. wait_short: the last WAIT got too few acknowledgements. */
    char     primary_host[256];
    int      primary_port;
    feed_fence fence;           /* of f->redis (a cluster: one per node) */
    int      in_hook;
    int      wait_short;

    /* Tests only: called between a rebuild's SQL read and its install. */
    void (*test_before_install)(feed *f, int64_t uid, void *arg);
    void  *test_arg;
    /* Tests only: called after feed_invalidate_all scanned a cluster node. */
    void (*test_after_node_scan)(feed *f, int port, void *arg);
};

/* handle.c */
int  feed__error(feed *f, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void feed__clear_error(feed *f);
int64_t feed__now_ms(void);
int  feed__db_outcome(feed *f, int rc, int redis_failed, const char *redis_msg);
int  feed__retry_due(feed *f, int64_t last_attempt_ms, const char *store);
void feed__set_keys(feed *f, int64_t uid);
void feed__keys_of(const feed *f, int64_t uid, char *key, char *lease_key); /* f->key_cap each */
void feed__lease_token(feed *f, char buf[33]);

/* redis.c -- every function returns with the connection either healthy or
 * dropped (NULL), never half-read. */
int  feed__redis_connect(feed *f);
void feed__redis_drop(feed *f);
redisReply *feed__redis_command(feed *f, int argc, const char **argv,
                                const size_t *lens);
redisReply *feed__redis_script(feed *f, enum feed_script script, int nkeys,
                               int argc, const char **argv, const size_t *lens);
redisReply *feed__redis_script_after(feed *f, size_t ncmds, const int *cargc,
                                     const char **const *cargv,
                                     const size_t *const *clens,
                                     enum feed_script script, int nkeys,
                                     int argc, const char **argv, const size_t *lens);
/* n plain commands on one hash slot in one round trip; replies[i] gets each
 * reply (error replies included; the caller frees them). FEED_OK, or
 * FEED_EREDIS with the connection dropped and every replies[i] NULL. On a
 * Redis Cluster, routed by the first command's first key. */
int  feed__redis_commands(feed *f, size_t n, const int *argc,
                          const char **const *argv, const size_t *const *lens,
                          redisReply **replies);
/* Fills argv and lens for the i-th call of a pipeline. */
typedef int feed__args_fn(void *arg, size_t i, const char **argv, size_t *lens,
                          int *nkeys);
/* Returns each call's argc (at most max_argc) and sets its *nkeys. */
int  feed__redis_script_many(feed *f, enum feed_script script, size_t n,
                             int max_argc, feed__args_fn *fill, void *arg);
/* Each final reply of a pipeline that is not an error, with the call's
 * index (r is freed after the call). */
typedef void feed__reply_fn(void *arg, size_t i, const redisReply *r);
/* feed__redis_script_many, with each call's reply given to on_reply(arg). */
int  feed__redis_script_many_r(feed *f, enum feed_script script, size_t n, int max_argc,
                               feed__args_fn *fill, feed__reply_fn *on_reply, void *arg);
/* A write for uid could not reach Redis: remember, process-wide, to drop
 * uid's cached copy as soon as any handle on the same Redis and key prefix
 * reaches it. Returns 0 when the list (FEED_REPAIR_MAX feeds) is full. */
#define FEED_REPAIR_MAX 65536
int  feed__redis_remember(feed *f, int64_t uid);
void feed__redis_forget_repairs(void);   /* tests only */

/* n plain commands whose keys share one hash slot, in ONE round trip;
 * replies[i] gets each reply (error replies included; the caller frees).
 * Returns FEED_OK, or FEED_EREDIS with the connection dropped and the reason
 * on f (replies then all NULL). On a cluster, routed by the first command's
 * first key. */
int  feed__redis_commands(feed *f, size_t n, const int *argc,
                          const char **const *argv,
                          const size_t *const *lens, redisReply **replies);
/* Write n small commands to c's socket in the protocol, in one send()
 * (not through hiredis's output buffer: redis.c says why). 1: written; 0:
 * too large, or hiredis holds output not yet written, so nothing was sent
 * (append through hiredis); -1: the write failed, c->err and c->errstr
 * set as hiredis sets them. */
int  feed__send_direct(redisContext *c, size_t n, const int *argc,
                       const char **const *argv, const size_t *const *lens);
/* AUTH (when configured) and SCRIPT LOAD of every script on a cluster
 * node's fresh connection *c. FEED_OK, FEED_EREDIS (refused) or
 * FEED_EUNAVAILABLE (I/O: *c is then freed and NULL). */
int  feed__redis_hello(feed *f, redisContext **c);

/* cluster.c -- decisions only, no I/O: an event-loop transport reuses them. */
#define FEED_SLOTS 16384
typedef struct feed_addr {
    char host[256];
    int  port;
} feed_addr;
enum feed_verdict {
    FEED_V_DONE,        /* a final answer (maybe an error reply) */
    FEED_V_MOVED,       /* the slot lives elsewhere for good: refresh the map */
    FEED_V_ASK,         /* migrating: ASKING + the command at the target, once */
    FEED_V_TRYAGAIN,    /* TRYAGAIN, CLUSTERDOWN, LOADING: back off, try again */
    FEED_V_NOSCRIPT     /* this node lacks the script: load it, try again */
};
unsigned feed__key_slot(const char *key, size_t len);
unsigned feed__uid_slot(int64_t uid);
int  feed__parse_addrs(const char *list, feed_addr **out, size_t *n);
enum feed_verdict feed__classify(const redisReply *r, const char *here, feed_addr *to);
int64_t feed__backoff_ms(int tries, int64_t now, int64_t deadline);
int  feed__slot_map_parse(const redisReply *r, const char *here,
                          int (*each)(void *arg, unsigned from, unsigned to,
                                      const feed_addr *owner),
                          void *arg);

/* cluster_io.c -- the blocking cluster transport. */
int  feed__cluster_connect(feed *f);
void feed__cluster_free(feed *f);
/* n commands on one slot, one pipeline to its node; redirects and retries
 * followed within redis_timeout_ms. Same contract as feed__redis_commands. */
int  feed__cluster_exchange(feed *f, unsigned slot, size_t n, const int *argc,
                            const char **const *argv, const size_t *const *lens,
                            redisReply **replies);
/* n independent commands, each routed by its own first key, pipelined per
 * node, every node at once. build(arg, i, &argv, &lens) makes command i
 * (valid until the next build) and returns its argc. Error replies are
 * counted and the first one reported; FEED_OK when none. */
typedef int feed__cmd_fn(void *arg, size_t i, const char ***argv, const size_t **lens);
int  feed__cluster_many(feed *f, size_t n, feed__cmd_fn *build, void *arg);
/* The same, with each final reply that is not an error given to
 * on_reply(arg, i, r) (NULL: none). */
int  feed__cluster_many_r(feed *f, size_t n, feed__cmd_fn *build, feed__reply_fn *on_reply,
                          void *arg);
/* The node that serves slot by the current map (an index, stable for the
 * handle's life), or -1 if the map names none. No I/O: it groups a
 * fan-out's feeds; the calls are routed by their first feed's key. */
int  feed__cluster_owner(const feed *f, unsigned slot);
/* feed_health: PING every primary within redis_timeout_ms (health.c). */
int  feed__cluster_ping(feed *f, size_t *up, size_t *total);
/* The slot of a command's first key: argv[1], or argv[3] for EVALSHA (with
 * no keys, its first argument: a fan-out by node routes by it, hooks.c). */
unsigned feed__command_slot(int argc, const char **argv, const size_t *lens);
/* visit(f, c, node, arg) once per primary (every node that owns a slot in
 * a map asked afresh), on that node's connection c: for what no key routes,
 * such as SCAN (invalidate.c) or a per-node health check. visit may send and
 * read on c only (not call the cluster transport: the node table may move).
 * It returns FEED_EUNAVAILABLE when c is no longer usable (an I/O failure,
 * or replies left unread): the walk then drops c and fails with FEED_EREDIS
 * (it does so too whenever c->err is set). The walk stops at the first visit
 * that does not return FEED_OK and returns that; FEED_EREDIS when a primary
 * cannot be reached (the map is then stale: call again). *stamp (if not
 * NULL) identifies the map the walk used: a later walk with another stamp
 * saw the slots owned differently. */
typedef int feed__node_fn(feed *f, redisContext *c, const feed_addr *node, void *arg);
int  feed__cluster_each_primary(feed *f, feed__node_fn *visit, void *arg, uint64_t *stamp);
/* redis.c: the cluster transport set up (retried at most every retry_ms),
 * pending repairs sent first. FEED_OK or the reason on f. */
int  feed__cluster_ready(feed *f);
/* sentinel.c -- ha */
int  feed__sentinels_valid(const char *list);     /* "host:port[,...]" well formed */
int  feed__sentinel_primary(feed *f);             /* fills f->primary_host/port */
int  feed__sentinel_check_role(feed *f);          /* FEED_OK iff ROLE says master */
int  feed__is_readonly(const redisReply *r);      /* a -READONLY error (demoted node) */

/* wait.c -- ha: the replica check sent after a command in one pipeline on
 * the connection c that carried it: WAIT in a hook, ROLE in a read under
 * Sentinel (redis_wait_replicas). The append functions return hiredis's
 * REDIS_OK/REDIS_ERR. The read functions return FEED_OK; FEED_EREDIS with
 * f->wait_short set (too few replicas; under Sentinel f->redis is dropped);
 * or FEED_EUNAVAILABLE when c broke (f->redis dropped if it is c, another
 * connection is the caller's to drop). */
int  feed__check_on(const feed *f);
int  feed__check_append(feed *f, redisContext *c);
int  feed__check_read(feed *f, redisContext *c);
int  feed__wait_append(feed *f, redisContext *c);   /* WAIT regardless of in_hook (repairs) */
int  feed__check_skip(feed *f, redisContext *c);    /* read and drop it: nothing applied */
int  feed__wait_read(feed *f, redisContext *c);
void feed__demote(feed *f);             /* -READONLY: drop, ask the Sentinels at once */
void feed__if_demoted(feed *f, const redisReply *r);

/* fence.c -- ha: the restart fence. A new connection starts UNKNOWN; a
 * step compares run_ids, then flushes with SCAN + UNLINK within one
 * redis_timeout_ms, and records the run_id when the flush is done. *c is
 * the connection (&f->redis, or a cluster node's), fc its fence; slot -1 on
 * a single Redis, else a slot the cluster node owns (where its fence key
 * lives). On failure *c is freed and NULL. */
enum { FEED_FENCE_UNKNOWN, FEED_FENCE_FLUSHING, FEED_FENCE_TRUSTED };
int  feed__fence_step(feed *f, redisContext **c, feed_fence *fc, int slot);

/* pg.c */
int  feed__pg_connect(feed *f);
int  feed__pg_ready(feed *f);
void feed__pg_drop(feed *f);
int  feed__pg_top(feed *f, int64_t uid, size_t limit, feed_rows *rows);
int  feed__pg_after(feed *f, int64_t uid, int64_t score, int64_t id,
                    size_t limit, feed_rows *rows);
/* The rows above a cursor, closest first: (score ASC, id ASC) order. */
int  feed__pg_before(feed *f, int64_t uid, int64_t score, int64_t id,
                     size_t limit, feed_rows *rows);
/* The rows of a page past the cache: from the replica when one is
 * configured and answers, else from the primary (feed__pg_top and
 * feed__pg_after always read the primary: rebuilds use them). first: ignore
 * score and id and read the top of the feed. */
int  feed__pg_page(feed *f, int64_t uid, int first, int64_t score, int64_t id,
                   size_t limit, feed_rows *rows);
void feed__rows_free(feed_rows *rows);

/* codec.c */
int  feed__score_ok(int64_t score);
size_t feed__i64_to_str(int64_t v, char *buf);          /* buf >= 21 bytes */
size_t feed__member_encode(int64_t id, char buf[FEED_MEMBER_MAX]);  /* returns the length */
int  feed__member_decode(const char *s, size_t len, int64_t *id);
int  feed__parse_i64(const char *s, size_t len, int64_t *out);
int  feed__parse_score(const char *s, size_t len, int64_t *out);
int  feed__item_after(feed_item item, int64_t score, int64_t id);

/* rebuild.c */
int feed__rebuild(feed *f, int64_t uid, const char *token, feed_rows *rows,
                  int *installed);

#endif /* FEED_INTERNAL_H */
