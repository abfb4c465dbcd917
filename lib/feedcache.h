/* feedcache.h -- paginated feeds from a bounded Redis sorted set per owner,
 * kept in front of PostgreSQL in the cache-aside pattern.
 *
 * This header is the manual. Every public name starts with feed_ or FEED_.
 *
 * The model in one paragraph: a feed is the rows (score, id) of one owner uid
 * in a PostgreSQL table, ordered by score DESC, id DESC. feedcache keeps the
 * top of each feed (at most max_len entries) in one Redis sorted set, and
 * keeps it an *exact prefix* of the feed: every row at or above the lowest
 * cached entry is cached, so a page cut from the cache is the page SQL would
 * give. An end marker says the whole feed is cached; a page past a cache that
 * is not complete comes from a keyset query. Write paths call the hooks below
 * after their SQL transaction commits. See docs/internals.md.
 *
 * Threads: a handle holds its own connections, none shared with another
 * handle: one to Redis (one per node it uses on a Redis Cluster) and one to
 * PostgreSQL (and one to pg_replica_conninfo when set). Use each handle from
 * one thread at a time; open one handle per thread.
 *
 * Errors: every function that can fail returns FEED_OK (0) or a negative
 * FEED_E* code; functions that take a handle also leave a message on it,
 * read with feed_errmsg(), and feed_error_kind() says what to do about the
 * code: fix the call, retry later, or fix the configuration. Nothing here
 * aborts or prints.
 */
#ifndef FEEDCACHE_H
#define FEEDCACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* FEED_API marks every public function: the library is built with
 * -fvisibility=hidden, so only what carries it is exported from
 * libfeedcache.so (tests/t_symbols.t checks the exported set against this
 * header). Mark each new public declaration with it. */
#if defined(__GNUC__) || defined(__clang__)
#define FEED_API __attribute__((visibility("default")))
#else
#define FEED_API
#endif

#define FEED_VERSION_MAJOR 0
#define FEED_VERSION_MINOR 1
#define FEED_VERSION_PATCH 0

/* The version of the library a program runs against, "0.1.0" (the
 * FEED_VERSION_* macros are the version it was compiled against; a shared
 * library may be another). Static text, never NULL; no handle needed. */
FEED_API const char *feed_version(void);

/* Events worth a line in the application's log, so that it hears about
 * trouble without polling feed_errmsg() after every call: see
 * feed_config.log_fn. */
typedef enum feed_log_level {
    FEED_LOG_ERROR = 1,     /* a store failed, for the first time since it last worked
                               (or since feed_open): once per outage, not once per call */
    FEED_LOG_WARN = 2,      /* something is wrong with the table (feed_open's checks:
                               docs/schema.md), or a row was left out of a feed */
    FEED_LOG_INFO = 3       /* a store that had failed answers again */
} feed_log_level;
/* msg is one line without a newline, valid during the call. */
typedef void feed_log_fn(void *arg, feed_log_level level, const char *msg);

#define FEED_FIRST     INT64_MAX            /* last_score meaning "first page" */
#define FEED_SCORE_MAX 9007199254740991LL   /* 2^53 - 1; scores lie in [-FEED_SCORE_MAX, FEED_SCORE_MAX] */

typedef struct feed feed;   /* opaque; one handle = one Redis + one PostgreSQL connection;
                               use a handle from one thread at a time */

#define FEED_KEY_PREFIX_MAX 200   /* the longest key_prefix, in bytes */

/* Configuration. Always start from feed_config_init(), then set what you
 * need (directly, or by name from text with feed_config_set()): fields added
 * in later versions then keep their defaults. Strings are copied by
 * feed_open(); the caller may free them afterwards. */
typedef struct feed_config {
    const char *redis_host;       /* default "127.0.0.1" */
    int         redis_port;       /* default 6379 */
    const char *redis_password;   /* default NULL: no AUTH */
    const char *pg_conninfo;      /* libpq connection string; default "" (libpq defaults / PG* env) */
    const char *key_prefix;       /* default "feed": keys look like
                                   * "feed:3:<tag>:{42}" (3: the key format
                                   * version; tag: a hash of table and columns,
                                   * so handles on other tables or columns
                                   * never read each other's copies); at most
                                   * FEED_KEY_PREFIX_MAX bytes, no '{' or '}' */
    const char *table;            /* default "feed_entry" */
    const char *owner_column;     /* default "uid" */
    const char *score_column;     /* default "score" */
    const char *id_column;        /* default "id" */
    uint32_t    max_len;          /* default 1000: most entries cached per feed */
    uint32_t    max_page;         /* default 100: largest limit accepted */
    uint32_t    ttl_seconds;      /* default 604800 (7 days); 0 = never expire */
    uint32_t    redis_timeout_ms; /* default 250: connect and command timeout */
    uint32_t    lease_ms;         /* default 3000: how long a rebuild lease lives */
    /* --- added since the first published API (0.1); later fields go last --- */
    const char *redis_user;       /* default NULL: AUTH <password> (the "default" user);
                                     set with redis_password for an ACL user: AUTH <user> <password> */
    uint32_t    lease_wait_ms;    /* default 3000 (lease_ms's default): how long a reader that
                                     missed while another handle rebuilds waits for that
                                     rebuild (polling the cache, pauses up to 50 ms) before
                                     it reads its page from PostgreSQL itself; never past
                                     request_timeout_ms; 0 = do not wait */
    uint32_t    retry_ms;         /* default 1000: the time between two attempts to reconnect
                                     a Redis or PostgreSQL server that did not answer (no
                                     connect storms): 0.8 to 1 times it, jittered so that
                                     handles do not all try again at once. A server is down
                                     when it refuses, its connection breaks, or it stays
                                     silent redis_timeout_ms; replies late behind others on
                                     an async connection that keeps answering are not that */
    const char *redis_cluster;       /* default NULL: one Redis at redis_host:redis_port.
                                        "host:port[,host:port...]": seed nodes of a Redis
                                        Cluster; redis_host/redis_port are then ignored */
    const char *redis_sentinels;     /* default NULL. "host:port[,...]": ask these Sentinels
                                        for the primary named redis_master_name */
    const char *redis_master_name;   /* default "mymaster" */
    const char *pg_replica_conninfo; /* default NULL: every query on pg_conninfo. Otherwise
                                        pages past the cache may read this replica;
                                        rebuilds never install rows a replica read while behind
                                        (they read pg_conninfo, always). A page read from the
                                        replica may lag the primary by its replication delay;
                                        a replica that fails is replaced by the primary */
    uint32_t    pg_timeout_ms;       /* default 2000: bound on a PostgreSQL connect or statement:
                                        one read (reconnect, prepare, statement) waits at most
                                        this long, then the statement is cancelled, the
                                        connection dropped (FEED_EPG) and reconnected after
                                        retry_ms. Must be > 0. A page the replica failed to
                                        answer in time costs this twice (replica, primary) */
    uint32_t    empty_ttl_seconds;   /* default 60: TTL of a feed known to be empty (its copy
                                        holds only the end marker), so probes for uids that
                                        do not exist cannot fill Redis; 0 = ttl_seconds.
                                        Never longer than ttl_seconds (when that is not 0) */
    /* --- PostgreSQL read replica --- */
    uint32_t    pg_replica_max_lag_ms; /* default 1000. N > 0: the replica answers a page
                                        only while it is proven to have replayed everything
                                        the primary had written N ms before; so a page from
                                        it shows every write committed at least N ms earlier.
                                        Otherwise the primary answers. Costs a probe (one
                                        statement on each) at most every N/4 ms while the
                                        replica is used. 0: no bound, a page from the replica
                                        may lag the primary by its replication delay, however
                                        long (a paused or stuck replay included) */
    /* --- the failover and restart guarantee (docs/ha.md) --- */
    uint32_t    redis_wait_replicas;   /* default 0: off. n > 0: every write hook (insert,
                                          delete, fanout, reload, invalidate) and every repair
                                          sends WAIT n in the same round trip; fewer than n
                                          replicas acknowledging within redis_wait_timeout_ms
                                          fails the hook with FEED_EREDIS and the feed's copy
                                          is dropped as soon as that is itself acknowledged.
                                          On a Redis Cluster: WAIT on each node written to,
                                          one per node and call (a fan-out too) */
    uint32_t    redis_wait_timeout_ms; /* default 100; with redis_wait_replicas, 1 ..
                                          redis_timeout_ms - 1 */
    int         redis_restart_fence;   /* default 1: on. Every key names the data set it
                                          was written in (a generation: a hash of the
                                          server's run_id and master_replid, read on each
                                          new connection), so after a restart from disk or
                                          a failover no copy written before is read: pages
                                          are rebuilt under the new generation at once, and
                                          the older keys are swept in the background (SCAN
                                          + UNLINK, about 10,000 keys a second per handle),
                                          "<prefix>:fence" recording the data set once
                                          swept. On a Redis Cluster: per node (its own
                                          generation and key "<prefix>:fence{n}" on a slot
                                          it owns), and per slot. Costs one round trip per
                                          new connection (and per slot-map change on a
                                          cluster) and a cold cache after a restart or
                                          failover. 0 turns it off: every generation is
                                          "0000000000000", so a copy that missed writes in
                                          a failover or a restart from older data is served
                                          until its TTL runs out. Every process serving the
                                          same feeds needs the same setting */
    /* --- read-time merge (docs/merge.md) --- */
    const char *author_table;          /* default NULL: no read-time merge. The table of
                                          authors' own posts, with the columns author_column,
                                          score_column and id_column (integers, like the
                                          feed table's). Each author's posts are cached as a
                                          feed is (max_len, the end marker, leases, TTLs,
                                          repairs), under "<prefix>:3:<tag>:<gen>:{<author>}",
                                          tag a hash of this table and its columns */
    const char *author_column;         /* default "author" */
    /* --- TLS to Redis (docs/tls.md); needs a build with hiredis_ssl, see
     * feed_tls_supported(). Each field other than redis_tls needs
     * redis_tls = 1, and feed_open refuses any of them set (FEED_EINVAL,
     * saying why) in a build without TLS. A certificate or key that cannot
     * be loaded is FEED_EINVAL at feed_open too --- */
    int         redis_tls;             /* default 0; 1: every Redis connection (single, each
                                          cluster node and each node a redirect names, each
                                          Sentinel and Sentinel's primary; blocking and async
                                          API alike) uses TLS 1.2 or later. A server that
                                          does not speak TLS fails the handshake, reported as
                                          such (never a fallback to plaintext) */
    const char *redis_tls_ca_file;     /* default NULL: the system's CA store (with
                                          redis_tls_ca_dir NULL too). A PEM file of the CAs
                                          whose certificates a server may present */
    const char *redis_tls_ca_dir;      /* default NULL. A folder of CA certificates in
                                          OpenSSL's hashed layout (c_rehash) */
    const char *redis_tls_cert_file;   /* default NULL: no client certificate. A PEM
                                          certificate (chain) for servers that ask for one
                                          (tls-auth-clients) */
    const char *redis_tls_key_file;    /* default NULL; required with redis_tls_cert_file
                                          (and only with it): its private key, PEM, not
                                          encrypted */
    const char *redis_tls_server_name; /* default NULL: the host connected to. The name sent
                                          as SNI and matched against each server's
                                          certificate (for every node: set it when the
                                          nodes' certificates name one DNS name while the
                                          cluster or the Sentinels give out IP addresses) */
    int         redis_tls_verify;      /* default 1: the server's certificate must chain to
                                          a trusted CA and name the host (redis_tls_server_name
                                          or the host connected to: a DNS name, or an IP
                                          address in its subjectAltName). 0: no check at all
                                          (a self-signed certificate is taken): encrypted but
                                          open to whoever sits in between; for tests only */
    /* --- filtered pages (docs/filter.md) --- */
    const char *item_author_column;    /* default NULL: the feed table has no author column.
                                          Else the column of the feed table naming each
                                          item's author (an integer type), so that filtered
                                          pages can hide authors. An item's author must never
                                          change (the library caches it: to move an item to
                                          another author, delete it and insert a new one) */
    uint32_t    filter_max_scan;       /* default 10000: most items one filtered page examines
                                          (hidden or not) before it returns; 1 .. 1000000 */
    /* ---- overload ---- */
    uint32_t    request_timeout_ms;    /* default 5000: the longest a read may take, waits
                                          and queues included; a read past it fails fast
                                          (FEED_EBUSY) instead of reaching a store */
    uint32_t    pg_budget;             /* default 0: four per CPU. The most PostgreSQL
                                          statements of reads (rebuilds, pages past the
                                          cache) in flight at once in this process, all
                                          handles together; a quarter of it is kept for
                                          rebuilds. Past it a read waits for a slot until
                                          its deadline (docs/operations.md, "Overload") */
    /* ---- events ---- */
    feed_log_fn *log_fn;               /* default NULL: nothing is told. Else called with
                                          log_arg on a store's first failure (FEED_LOG_ERROR),
                                          on its recovery (FEED_LOG_INFO), for what the
                                          table's checks find and for a row left out of a
                                          feed (FEED_LOG_WARN). Called on the thread of the
                                          call that met it (the loop's thread for the
                                          async API), inside that call: it must not block
                                          and must not call the library on this handle.
                                          Code sets these two: feed_config_set() does not */
    void        *log_arg;
} feed_config;

typedef struct feed_item { int64_t score; int64_t id; } feed_item;

typedef enum feed_source {
    FEED_SOURCE_CACHE = 1,   /* answered by Redis alone */
    FEED_SOURCE_REBUILD = 2, /* a miss: the feed was rebuilt from SQL and the page cut from those rows */
    FEED_SOURCE_DB = 3       /* answered by a keyset query (cache short, lease busy, or Redis down) */
} feed_source;

typedef struct feed_result {
    feed_item  *items;       /* count items in (score DESC, id DESC) order; owned by the result */
    size_t      count;
    int         has_more;    /* 1 if at least one more item exists after the last one */
    int64_t     next_score;  /* when has_more: pass these back as last_score, last_id */
    int64_t     next_id;
    feed_source source;
} feed_result;

enum {
    FEED_OK           =  0,
    FEED_EINVAL       = -1,  /* bad argument: NULL, limit 0 or > max_page, negative id, bad token */
    FEED_ERANGE       = -2,  /* score outside [-FEED_SCORE_MAX, FEED_SCORE_MAX] */
    FEED_EREDIS       = -3,  /* Redis failed where only Redis could do the work (a hook) */
    FEED_EPG          = -4,  /* PostgreSQL failed where only PostgreSQL could do the work */
    FEED_ENOMEM       = -5,
    FEED_EUNAVAILABLE = -6,  /* neither store could answer */
    FEED_ECANCELED    = -7,  /* async: the request was pending when its handle closed */
    FEED_EBUSY        = -8   /* shed: the call reached its deadline (request_timeout_ms)
                                or PostgreSQL's budget for cold work was spent; nothing
                                was refused, try again after feed_retry_after_ms() */
};

/* ------------------------------------------------------------------------
 * Handles
 * ------------------------------------------------------------------------ */

/* Fill every field of *cfg with its default (see feed_config). */
FEED_API void feed_config_init(feed_config *cfg);

/* Open a handle: copy the config, connect to Redis and PostgreSQL, load the
 * Lua scripts and prepare the SQL statements.
 *
 * Returns FEED_OK when at least one store answers: a backend that starts while
 * Redis (or PostgreSQL) is down still serves, and the missing connection is
 * retried by later calls, at most once per retry_ms. Otherwise *out is NULL and:
 *   FEED_EINVAL       out or cfg NULL, a NULL string where a value is needed,
 *                     max_len 0, max_page 0, redis_port outside 1..65535,
 *                     redis_timeout_ms 0, pg_timeout_ms 0, lease_ms 0, an
 *                     empty identifier, pg_replica_conninfo "" (NULL = none);
 *                     every integer outside its field's min..max
 *                     (feed_config_field_get)
 *                     (max_page may exceed max_len: deep pages come from SQL);
 *                     a redis_tls_* field in a build without TLS or without
 *                     redis_tls = 1, a certificate, key or CA that cannot be
 *                     loaded
 *   FEED_EREDIS       Redis answered but refused (wrong password, no such user)
 *   FEED_EPG          PostgreSQL answered but refused (authentication, missing
 *                     table or columns)
 *   FEED_EUNAVAILABLE neither store answered
 *   FEED_ENOMEM       out of memory
 * On failure there is no handle to read a message from; the message of the
 * last failed feed_open() in this thread is feed_errmsg(NULL). */
FEED_API int feed_open(feed **out, const feed_config *cfg);

/* Close the connections and free the handle. NULL is fine. */
FEED_API void feed_close(feed *f);

/* 1 if this build can speak TLS to Redis (built against hiredis >= 1.0 with
 * hiredis_ssl: `make HIREDIS=DIR`), else 0. Built without it, feed_open
 * (and feed_async_open_*) with redis_tls = 1, or any other redis_tls_* field
 * set, is FEED_EINVAL with a message saying so. PostgreSQL's TLS is
 * libpq's own: sslmode and the ssl* keys in pg_conninfo, whatever this
 * returns. */
FEED_API int feed_tls_supported(void);

/* Static English text for a FEED_* code; never NULL. */
FEED_API const char *feed_strerror(int code);

/* What an application does about a result code, whichever call returned it.
 * The codes alone do not say: FEED_EREDIS from feed_open() is a refusal (a
 * wrong password), from a hook it is usually Redis down; FEED_EPG from
 * feed_open() is a missing table, from a page usually PostgreSQL down. */
typedef enum feed_kind {
    FEED_KIND_OK = 0,       /* FEED_OK */
    FEED_KIND_INPUT = 1,    /* the call's arguments are wrong (FEED_EINVAL, FEED_ERANGE;
                               or a score out of range found in SQL): fix the call or
                               the data; the same call fails the same way again */
    FEED_KIND_RETRY = 2,    /* a store the call needed is down, timed out or not retried
                               yet, or the call was shed under load (FEED_EBUSY): try
                               again later (feed_retry_after_ms() says when) */
    FEED_KIND_CONFIG = 3,   /* a store answered and refused (a wrong password, an ACL,
                               a missing table or column, no permission, Redis out of
                               memory): retrying will not help, fix the configuration */
    FEED_KIND_INTERNAL = 4  /* out of memory, a request cancelled by its handle's close
                               (FEED_ECANCELED), or a code this version does not know */
} feed_kind;

/* The kind of rc, a code a call on f returned (f NULL: feed_open() or a
 * call that needs no handle). For FEED_EREDIS and FEED_EPG the handle says
 * which it was: when that store's connection is down (a Redis node or the
 * PostgreSQL primary: it broke, timed out or was never made), the store
 * was not reached (FEED_KIND_RETRY); when it is up, the store answered
 * with an error (FEED_KIND_CONFIG). So ask before the next call on f: a
 * later call may reconnect. From feed_open() (f NULL) both are
 * FEED_KIND_CONFIG, since feed_open() fails only when a store refused or
 * none answered (FEED_EUNAVAILABLE: FEED_KIND_RETRY). A refusal met while
 * a connection is made or set up (a password changed under a running
 * handle, an ACL that denies the restart fence's key or the scripts, a
 * missing table or column, a score column of the wrong type) leaves the
 * connection down and reads as FEED_KIND_CONFIG, on the call that met it
 * and on every call held off until the next attempt (retry_ms later), each
 * with the store's words in feed_errmsg(); a store that did not answer
 * reads as FEED_KIND_RETRY, its message saying that the handle has not
 * tried it again yet and when it will. A WAIT answered by fewer than
 * redis_wait_replicas replicas keeps the connection, and reads as
 * FEED_KIND_CONFIG. Makes no round trip; never fails. */
FEED_API feed_kind feed_error_kind(const feed *f, int rc);

/* Detail of this handle's last error ("" if none). The text stays valid until
 * the next call on the handle. feed_errmsg(NULL) gives the detail of the last
 * failed feed_open(), feed_config_set(), feed_cursor_decode() or
 * feed_cursor_decode_ranked() in the calling thread (each clears it first). A call that succeeds in a degraded way (a page answered by
 * PostgreSQL because Redis failed) also leaves the Redis error here. */
FEED_API const char *feed_errmsg(const feed *f);

/* ---- configuration by name: flags, config files, environment ---- */

/* Set the field of *cfg called name from the text value, as a program reads
 * a flag or a line of a config file. name is the field's C name
 * ("redis_port") or the same with dashes for underscores ("redis-port": the
 * spelling of feedcache-sync's flags). Every field of feed_config can be set
 * so; feed_config_field_get() lists them.
 *
 * Integers: decimal digits only (no sign, no blank, nothing after them)
 * within the field's min..max (its feed_config_field), which are the limits
 * feed_open() applies to that field. Limits that tie two fields together
 * stay feed_open()'s, since fields may be set in any order: redis_user needs
 * redis_password; redis_cluster and redis_sentinels exclude each other;
 * redis_sentinels needs redis_master_name and author_table author_column;
 * with redis_wait_replicas > 0, redis_wait_timeout_ms must be below
 * redis_timeout_ms.
 *
 * Strings: *cfg keeps the pointer value, not a copy, as when the field is
 * assigned; value must stay valid until feed_open() has copied it. "" stores
 * NULL in the fields where NULL means none: redis_password, redis_user,
 * redis_cluster, redis_sentinels, pg_replica_conninfo, author_table. "" is
 * refused where a name is needed: redis_host, key_prefix, table,
 * owner_column, score_column, id_column, redis_master_name, author_column.
 * pg_conninfo keeps "" (libpq's defaults). As feed_open() requires,
 * redis_cluster and redis_sentinels must read "host:port[,host:port...]"
 * and key_prefix must not contain '{' or '}' nor be longer than
 * FEED_KEY_PREFIX_MAX bytes.
 *
 * Returns FEED_OK, or FEED_EINVAL with *cfg unchanged: cfg, name or value
 * NULL, no field of that name, a value refused. feed_errmsg(NULL) then says
 * why, starting with name as given, so that a program can put its own
 * spelling in front ("--" for a flag): "redis-port must be 1..65535, not
 * \"0\"". */
FEED_API int feed_config_set(feed_config *cfg, const char *name, const char *value);

typedef enum feed_config_type {
    FEED_CONFIG_STRING = 1,      /* const char *: stored as given */
    FEED_CONFIG_INTEGER = 2      /* int or uint32_t: min..max */
} feed_config_type;

/* One field of feed_config, for usage texts and config-file documentation. */
typedef struct feed_config_field {
    const char      *name;       /* the C name: "redis_port" */
    const char      *flag;       /* the same with dashes: "redis-port" */
    feed_config_type type;
    int64_t          min, max;   /* FEED_CONFIG_INTEGER: the values accepted; strings: 0, 0 */
    const char      *dflt;       /* feed_config_init()'s value as text ("6379", "feed"),
                                    NULL when the default is NULL */
    const char      *help;       /* what it is, one line without a newline */
} feed_config_field;

/* The fields in declaration order: feed_config_field_get(i) for i <
 * feed_config_field_count(), NULL past the end. Static data: never freed,
 * never changing; no handle needed. */
FEED_API size_t                   feed_config_field_count(void);
FEED_API const feed_config_field *feed_config_field_get(size_t i);

/* ------------------------------------------------------------------------
 * Read path
 * ------------------------------------------------------------------------ */

/* One page of uid's feed: the items strictly after (last_score, last_id) in
 * (score DESC, id DESC) order; last_score == FEED_FIRST for the first page
 * (last_id is then ignored). The cursor item need not exist any more. A
 * cursor (0, 0), what a zero-initialised struct holds, is a position like
 * any other (the items after score 0, id 0), not the first page: when its
 * page is empty, feed_errmsg() says so.
 *
 * limit is 1..max_page. On FEED_OK *out holds up to limit items, owned by it;
 * free with feed_result_free(). On error *out is zeroed (freeing it is safe).
 *
 * Where the page comes from: the cache (one Redis round trip: a plain read
 * whose reply proves the page; two when it cannot and page.lua seeks the
 * cursor, feed_stats.plain_fallbacks; a first page may add a TTL refresh,
 * see docs/operations.md, "TTLs"); on a miss the
 * feed is rebuilt from SQL under a lease and the page cut from those rows;
 * when the cache does not reach the page, or another handle holds the lease
 * longer than lease_wait_ms, or Redis fails, from a keyset query. A Redis
 * failure on this path is not an error: the page comes from PostgreSQL.
 *
 * Errors: FEED_EINVAL (f or out NULL, limit 0 or > max_page, last_id < 0),
 * FEED_ERANGE (last_score out of range and not FEED_FIRST; or a score out of
 * range found in SQL), FEED_EPG (the page needed SQL and PostgreSQL failed,
 * Redis being up), FEED_EUNAVAILABLE (both failed), FEED_ENOMEM. */
FEED_API int feed_page(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
                       size_t limit, feed_result *out);

/* Free the items of a result and zero it. NULL and a zeroed result are fine. */
FEED_API void feed_result_free(feed_result *r);

/* The name of a page's source, for logs, metrics and answers: "cache",
 * "rebuild" or "db" (FEED_SOURCE_CACHE, _REBUILD, _DB). Static text, never
 * NULL: any other value gives "unknown". Needs no handle. */
FEED_API const char *feed_source_name(feed_source s);

/* ---- pull-to-refresh and store health ---- */

/* Pull-to-refresh: up to limit items strictly above (score, id) in (score
 * DESC, id DESC) order -- what is new since the top item a client holds. They
 * are the ones closest to the cursor, so that nothing between them and the
 * cursor is skipped, returned newest first. has_more = 1 when still newer
 * items exist: call again at once. next_score/next_id is, on every FEED_OK,
 * the cursor to keep and pass to the next call: the newest returned item
 * (items[0]), or (score, id) itself when nothing is newer. The cursor item
 * need not exist any more.
 *
 * limit is 1..max_page. On FEED_OK *out holds up to limit items, owned by it
 * (free with feed_result_free); on error *out is zeroed.
 *
 * Where the items come from: the cache, in one Redis round trip, when the
 * cached copy covers them, i.e. when the copy is complete or the cursor sorts
 * at or above its lowest item (the copy is an exact prefix of the feed, so
 * everything above such a cursor is cached): FEED_SOURCE_CACHE. Otherwise
 * (cursor below the cached window, feed not cached, Redis failed) one keyset
 * query, WHERE owner = $1 AND (score, id) > ($2, $3) ORDER BY score, id
 * LIMIT limit + 1: FEED_SOURCE_DB. It never rebuilds nor refreshes the TTL.
 * A Redis failure here is not an error (PostgreSQL answers; the Redis error
 * is left in feed_errmsg).
 *
 * Errors: FEED_EINVAL (f or out NULL, limit 0 or > max_page, id < 0),
 * FEED_ERANGE (score outside +/-(2^53-1), FEED_FIRST included: a cursor is
 * required; or a score out of range found in SQL), FEED_EPG (SQL was needed
 * and PostgreSQL failed, Redis being up), FEED_EUNAVAILABLE (both failed),
 * FEED_ENOMEM. */
FEED_API int feed_page_newer(feed *f, int64_t uid, int64_t score, int64_t id,
                             size_t limit, feed_result *out);

/* The state of each store, for health checks (feed_open succeeds with one
 * store down, by design: this makes it visible). */
typedef struct feed_health_info {
    int  redis_up;          /* 1: Redis answered a PING (a cluster: every primary did) */
    int  pg_up;             /* 1: PostgreSQL answered a read of the feed table */
    char redis_msg[256];    /* "" when up; otherwise why not */
    char pg_msg[256];       /* likewise */
    int  redis_refused;     /* 1 (with redis_up 0): Redis answered and refused (AUTH, an
                               ACL): a configuration error, redis_msg in its words; 0:
                               it did not answer (down, or not tried again yet) */
    int  pg_refused;        /* likewise for PostgreSQL: a password, a database, a missing
                               table or column, a column of the wrong type */
} feed_health_info;

/* Ask each store for a sign of life, each within its own timeout
 * (redis_timeout_ms, and PostgreSQL's statement bound): a Redis PING, and for
 * PostgreSQL one read of the feed table (the prepared top-rows statement,
 * LIMIT 1), so a dropped table or lost permission shows too. A lost
 * connection is reconnected under the usual rule (at most one attempt per
 * retry_ms per handle), so a health check polled often cannot cause a connect
 * storm: between attempts a store that is down is reported down at once,
 * with the time to the next attempt in its message.
 *
 * A store that answered and refused (a password, an ACL, a missing table or
 * column, a wrong column type) is reported so: redis_refused / pg_refused
 * set and its words in the message, never "down"; feed_error_kind() then
 * reads FEED_KIND_CONFIG.
 *
 * Returns FEED_OK when both are up, FEED_EREDIS when only Redis is down,
 * FEED_EPG when only PostgreSQL is down, FEED_EUNAVAILABLE when both are, and
 * FEED_EINVAL when f or out is NULL (*out untouched). *out is filled in every
 * case but the last; feed_errmsg() then holds both messages. Counts in
 * feed_stats like any call (redis_calls, sql_queries, errors).
 *
 * On a Redis Cluster (redis_cluster), Redis is up only when every primary
 * of the slot map (asked again first) answers PING: the PINGs go to all of
 * them at once and the answers are awaited for one redis_timeout_ms in all
 * (a node to reconnect, under retry_ms, may add its connect time).
 * Otherwise redis_msg says "Redis Cluster: <k> of <n> primaries answered
 * PING; <host>:<port>: <why>", naming the first that did not. Replicas are
 * not checked. */
FEED_API int feed_health(feed *f, feed_health_info *out);

/* How long until the handle tries again a store it lost, in milliseconds:
 * for each connection that is down (a Redis node, the PostgreSQL primary or
 * replica), the time left until retry_ms has passed since its last connect
 * attempt, and the longest of these; 0 when none is down, or its retry is
 * due (the next call that needs it tries at once), and when f is NULL.
 * Never more than retry_ms, except after a call was shed (FEED_EBUSY,
 * within the last request_timeout_ms): then at least a tenth of
 * request_timeout_ms, so that shed clients come back spread out. Meant for
 * answers that tell a client when to ask again (an HTTP Retry-After after a
 * page failed with FEED_EPG, FEED_EUNAVAILABLE or FEED_EBUSY): until then
 * the handle answers from what it has without trying the store again.
 * Makes no round trip. */
FEED_API uint32_t feed_retry_after_ms(const feed *f);
/* ---- end pull-to-refresh and store health ---- */

/* ------------------------------------------------------------------------
 * Write hooks: call after the SQL transaction that changed the row commits.
 *
 * Each is one atomic script call (feed_fanout: one pipelined round trip) and
 * cancels any rebuild of the feed in flight, so a rebuild that read SQL before
 * the write can never install. A feed that is not cached is left alone: the
 * next read rebuilds it. Errors: FEED_EINVAL (f NULL, id < 0), FEED_ERANGE
 * (score out of range), FEED_EREDIS (Redis unreachable or refused: nothing is
 * lost, PostgreSQL has the row).
 *
 * When a hook, feed_reload() or feed_invalidate() fails because the handle
 * could not reach Redis (down, timed out, or not retried yet: retry_ms), or
 * because Redis answered with an error (an ACL, OOM), the library remembers
 * the feed, process-wide, and the first handle on the same Redis and
 * key_prefix that reaches Redis and has a DEL accepted drops that cached copy
 * before anything else (feed_stats.repairs counts them), so the next read
 * rebuilds it from SQL. While Redis refuses that DEL, every command of every
 * such handle tries it again first (one more round trip each). Up to 65536
 * feeds; past that the message says so and feed_invalidate() is the
 * caller's to call later. A copy another process reads meanwhile, or one
 * whose process exits first, is not covered: those need feed_invalidate(),
 * or feedcache-sync (docs/sync.md): this list is the in-process repair, and
 * where feedcache-sync runs it is the cross-process one, dropping the copy of
 * every feed a committed transaction touched, whoever wrote it.
 * ------------------------------------------------------------------------ */

/* A new row (score, id) in uid's feed, or a new score for an existing row. */
FEED_API int feed_on_insert(feed *f, int64_t uid, int64_t score, int64_t id);

/* Row id left uid's feed. */
FEED_API int feed_on_delete(feed *f, int64_t uid, int64_t id);

/* feed_on_insert(f, uids[i], score, id) for each of n feeds, pipelined in one
 * round trip. n == 0 is a no-op. On FEED_EREDIS some feeds may have been
 * updated and others not. */
FEED_API int feed_fanout(feed *f, const int64_t *uids, size_t n,
                         int64_t score, int64_t id);

/* Rebuild uid's cached copy from SQL now (under a lease, like a miss). If a
 * write hook cancels the rebuild, the cached copy is dropped instead, which is
 * always safe. Errors: FEED_EINVAL, FEED_EREDIS, FEED_EPG, FEED_ERANGE (a row
 * in SQL with an out-of-range score). */
FEED_API int feed_reload(feed *f, int64_t uid);

/* Drop uid's cached copy (and any lease). Errors: FEED_EINVAL, FEED_EREDIS. */
FEED_API int feed_invalidate(feed *f, int64_t uid);

/* The write protocol, for every transaction that changes the feed table or
 * the authors' table:
 *   1. change the rows and COMMIT;
 *   2. once COMMIT has succeeded, call the hook of each change (feed_on_insert,
 *      feed_on_delete, feed_fanout, feed_author_on_insert, _on_delete);
 *   3. when a hook failed, or when COMMIT's outcome is unknown (the connection
 *      broke or timed out during COMMIT: the rows may or may not be there),
 *      call feed_on_unknown_write with every feed the transaction may have
 *      changed (feed_author_on_unknown_write with every author).
 * Never call a hook before COMMIT, nor skip step 3: a cached copy that
 * missed a committed change would be served until its TTL runs out.
 *
 * feed_on_unknown_write drops the cached copy and the lease of each of n
 * feeds, so the next read rebuilds each from SQL, whatever the transaction
 * did; a rebuild in flight that read SQL earlier cannot install. It is one
 * plain DEL per feed, which an ACL that refuses the hooks' scripts may
 * still allow: one round trip each, in order (the async twin starts them
 * all at once, pipelined). After the first DEL that fails (Redis down,
 * timed out, or refusing) no more are sent, and every feed not dropped,
 * that one and all after it, goes on the repair list (see "Write hooks"
 * above): the first handle that reaches Redis drops them. Idempotent;
 * n == 0 is a no-op.
 *
 * Returns FEED_OK when every copy is dropped; FEED_EREDIS when some could
 * not be (the repair list has them: nothing more to call; feed_errmsg says
 * why, feed_error_kind whether Redis was down or refused); FEED_EINVAL (f
 * NULL, uids NULL with n > 0); FEED_ENOMEM. */
FEED_API int feed_on_unknown_write(feed *f, const int64_t *uids, size_t n);

/* ---- invalidation in bulk (what feedcache-sync needs) ---- */
/* Drop the cached copy and the lease of each of n feeds, pipelined (one round
 * trip per pipeline). Idempotent and order-free: dropping a copy is always
 * correct, and without its lease a rebuild that read SQL earlier cannot
 * install. feedcache-sync calls it for every feed a committed transaction
 * touched. n == 0 is a no-op. Errors: FEED_EINVAL (f NULL, uids NULL with
 * n > 0), FEED_ENOMEM, FEED_EREDIS (some feeds may have been dropped and
 * others not: call again; each feed also goes on the repair list, as for
 * a failed hook). */
FEED_API int feed_invalidate_many(feed *f, const int64_t *uids, size_t n);

/* Drop every cached copy and lease of this handle's table under its
 * key_prefix (SCAN with MATCH "<prefix>:3:<tag>:*:{*", 3 being the key format version,
 * tag naming the table and columns, * every generation; then DEL per page of keys):
 * what a TRUNCATE of the table needs; another table's copies stay. If dropped is not NULL,
 * *dropped counts the keys removed.
 * A copy installed while the scan runs may be missed; it can only come from
 * a rebuild whose lease was taken before the call, so calling it again
 * lease_ms after the first call began drops those too (feedcache-sync does).
 * On a Redis Cluster every primary is scanned. If the slot map changed or a
 * slot was migrating meanwhile (a key may have moved from a node not yet
 * scanned to one already scanned), every primary is scanned again, up to 3
 * times in all, then FEED_EREDIS. A primary that fails during the call fails
 * it (FEED_EREDIS): call again once a replica has taken over. So FEED_OK
 * means the same on both: no key there before the call survives it.
 * Errors: FEED_EINVAL (f NULL), FEED_ENOMEM, FEED_EREDIS (part may be
 * dropped: call again). */
FEED_API int feed_invalidate_all(feed *f, uint64_t *dropped);
/* ---- end invalidation in bulk ---- */

/* ------------------------------------------------------------------------
 * Read-time merge: timelines with high-follower authors (docs/merge.md)
 *
 * Fan-out on write (feed_fanout) costs one cache write per follower. For the
 * few authors with very many followers, an application keeps their posts in
 * a table of their own (author_table: author_column, score_column,
 * id_column) and merges them into each reader's timeline when it is read.
 * Each author's posts are a feed like any other: a bounded copy of that
 * author's rows (max_len, the end marker), rebuilt from SQL under a lease,
 * kept right by the hooks below, with the same TTLs and repairs as a feed.
 * ------------------------------------------------------------------------ */

#define FEED_MERGE_MAX 100   /* most authors one merged page may name */

/* The next page of uid's timeline merged with the own posts of n authors:
 * the items strictly after (last_score, last_id) (FEED_FIRST: the first
 * page) in (score DESC, id DESC) order of the union of uid's feed and those
 * authors' posts, each (score, id) pair once. Exactly what
 *     SELECT score, id FROM <table> WHERE <owner_column> = uid
 *     UNION SELECT score, id FROM <author_table> WHERE <author_column> = ANY(authors)
 *     ORDER BY score DESC, id DESC LIMIT ...
 * returns. A pair fanned out into uid's feed and present in an author's
 * posts too comes once: an author moved from fan-out to merge keeps their
 * old fanned-out rows. An author named twice counts once; n == 0 is
 * feed_page. The cursor (next_score, next_id) is the same pair as for one
 * feed; has_more, limit and ownership of *out as feed_page.
 *
 * Cost: every source (uid's feed and each author) whose copy is cached is
 * read in one pipelined round trip per Redis node (one on a single Redis;
 * on a cluster one per node, the nodes at once): uid's feed for limit + 1
 * items, as feed_page reads it, and each author for its share of the last
 * merged page it was in on this handle, plus two (a few, the first time).
 * The page is served only when those answers prove it; an author that
 * turns out to hold more of it is read again for limit + 1 items (one more
 * round trip). A source whose copy does not reach far enough is read from
 * SQL, all such sources in one statement (the replica may answer it). On
 * a first page, absent copies are rebuilt under their leases (one SQL
 * statement for all of them, one pipelined install), or awaited up to
 * lease_wait_ms while another handle rebuilds them; after a cursor an
 * absent copy is read from SQL (the next first page rebuilds it). A long
 * run of equal scores at the cursor may cost one more round trip (page.lua's
 * seek, counted in feed_stats.plain_fallbacks per source) for the sources
 * it touches. First pages refresh each copy's TTL as feed_page does. Work
 * per page grows with n and limit, never with the cursor's depth or the
 * feeds' size. A Redis failure is not an error: the page comes from
 * PostgreSQL. Figures: docs/merge.md.
 *
 * source: FEED_SOURCE_CACHE when every source came from the cache,
 * FEED_SOURCE_DB when any came from SQL, else FEED_SOURCE_REBUILD.
 *
 * Errors: FEED_EINVAL (f or out NULL, author_table not configured, n >
 * FEED_MERGE_MAX, authors NULL with n > 0, limit 0 or > max_page, last_id <
 * 0), FEED_ERANGE (last_score out of range and not FEED_FIRST; or a score
 * out of range found in SQL), FEED_EPG (SQL was needed and PostgreSQL
 * failed, Redis being up), FEED_EUNAVAILABLE (both failed), FEED_ENOMEM. */
FEED_API int feed_page_merged(feed *f, int64_t uid, const int64_t *authors, size_t n,
                              int64_t last_score, int64_t last_id, size_t limit,
                              feed_result *out);

/* ------------------------------------------------------------------------
 * Filtered pages: what one viewer must not see (docs/filter.md)
 *
 * A filter is given per request: authors to hide and/or a predicate. The
 * pages stay full and the cursor exact: the visible items of a walk are
 * exactly what SQL returns with the filter in its WHERE clause.
 * ------------------------------------------------------------------------ */

#define FEED_FILTER_MAX_AUTHORS 1000   /* most authors one filter hides */

/* The predicate: 1 shows the item, 0 hides it. author is the item's author
 * (item_author_column, or the author_table's author for an author's post in
 * a merged page), INT64_MIN when unknown (no item_author_column, or a NULL
 * in it). Called on the caller's thread (the loop's thread for the async
 * API), any number of times for one item and in no promised order; it must
 * not block nor call the library, and must give one answer per item for the
 * whole walk (a changed answer takes effect from the next page on). */
typedef int feed_keep_fn(void *arg, int64_t score, int64_t id, int64_t author);

typedef struct feed_filter {
    const int64_t *hide_authors;   /* n_hide_authors ids whose items are hidden; needs
                                      item_author_column for feed rows. In a merged page
                                      these authors are also left out of the merge */
    size_t         n_hide_authors; /* 0 .. FEED_FILTER_MAX_AUTHORS; the array is read
                                      during the call only, never kept */
    feed_keep_fn  *keep;           /* NULL: no predicate */
    void          *keep_arg;       /* passed to keep as it is; must be NULL when keep is */
} feed_filter;

/* feed_page, feed_page_merged and feed_page_newer with a filter (NULL, or
 * one that hides nothing and has no predicate: exactly the unfiltered call,
 * at its cost). Arguments, ownership of *out and the errors of the
 * unfiltered call apply, plus the filter's.
 *
 * The page holds limit visible items unless the filtered feed ends
 * (has_more = 0) or the page examined filter_max_scan items (then has_more =
 * 1 and the page may hold fewer, even none: call again with the cursor).
 * next_score/next_id (set whenever has_more is 1) name the last item the
 * page examined before the first visible item it did not return, shown or
 * hidden, so that the next page neither reads those hidden items again nor
 * skips a visible one. Items hidden inside PostgreSQL (author <> ALL in the
 * statement, past the cached copy) are never seen by the library: there the
 * cursor names the last item returned. feed_page_newer_filtered's cursor is
 * the newest item it examined, as feed_page_newer's is the newest returned.
 *
 * How: the page is read in chunks from the cached copy (as feed_page reads
 * it, rebuilds and leases included), each chunk as large as what this
 * handle has seen of hidden items so far predicts the page needs; the
 * authors of cached items come from an index beside the copy, the sorted
 * set "<copy's key>:authors:<tag of item_author_column>" read in the page's own round trip,
 * filled from PostgreSQL the first time an item is looked at (the hooks do
 * not know authors: an item inserted by a hook costs one lookup, once).
 * Past the copy, PostgreSQL reads with the hidden authors in the statement. A merged page leaves the hidden authors
 * out of the merge (their copies are not read) and hides the reader's feed
 * items by their author. Cost and figures: docs/filter.md.
 *
 * source: the "worst" source any chunk came from (FEED_SOURCE_DB over
 * _REBUILD over _CACHE). feed_stats.pages counts one page per call.
 *
 * Errors: those of the unfiltered call; FEED_EINVAL (with a message naming
 * the call) for hide_authors NULL with n_hide_authors > 0, keep_arg set
 * with keep NULL (a predicate lost on the way), n_hide_authors >
 * FEED_FILTER_MAX_AUTHORS, hidden authors on a handle without
 * item_author_column (feed_page_merged_filtered accepts them there and
 * hides only the merged authors: the reader's feed items cannot be told
 * apart by author); FEED_EPG or FEED_EUNAVAILABLE when an author had to be
 * looked up in PostgreSQL and it failed. */
FEED_API int feed_page_filtered(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
                                size_t limit, const feed_filter *filter, feed_result *out);
FEED_API int feed_page_merged_filtered(feed *f, int64_t uid, const int64_t *authors, size_t n,
                                       int64_t last_score, int64_t last_id, size_t limit,
                                       const feed_filter *filter, feed_result *out);
FEED_API int feed_page_newer_filtered(feed *f, int64_t uid, int64_t score, int64_t id,
                                      size_t limit, const feed_filter *filter,
                                      feed_result *out);

/* Hooks for the authors' table: call after the SQL transaction that changed
 * the row commits. As feed_on_insert and feed_on_delete, for author's posts:
 * one atomic script call each, a lease in flight cancelled, an uncached copy
 * left alone, a failure remembered for repair. Errors: FEED_EINVAL (f NULL,
 * author_table not configured, id < 0), FEED_ERANGE (score out of range),
 * FEED_EREDIS. */
FEED_API int feed_author_on_insert(feed *f, int64_t author, int64_t score, int64_t id);
FEED_API int feed_author_on_delete(feed *f, int64_t author, int64_t id);

/* feed_invalidate_many and feed_invalidate_all for authors' copies
 * (feedcache-sync calls them for changes to the authors' table): drop the
 * copy and lease of each of n authors, pipelined; or every author's copy
 * of author_table under this key_prefix (SCAN MATCH "<prefix>:3:<tag>:*:{*"). Same guarantees and
 * errors as those two, plus FEED_EINVAL when author_table is not
 * configured. */
FEED_API int feed_author_invalidate_many(feed *f, const int64_t *authors, size_t n);
FEED_API int feed_author_invalidate_all(feed *f, uint64_t *dropped);

/* feed_invalidate for one author's copy: drop the copy and lease of
 * author's posts, with the same plain DEL (which an ACL that refuses the
 * library's scripts, and so a hook, may still allow: what to call after an
 * author hook failed). Errors: FEED_EINVAL (f NULL, author_table not
 * configured), FEED_EREDIS. */
FEED_API int feed_author_invalidate(feed *f, int64_t author);

/* Step 3 of the write protocol (feed_on_unknown_write) for the authors'
 * table: drop the copy and lease of each of n authors, every one it cannot
 * drop on the repair list. Same returns, plus FEED_EINVAL when author_table
 * is not configured. */
FEED_API int feed_author_on_unknown_write(feed *f, const int64_t *authors, size_t n);
/* ---- end read-time merge ---- */

/* ------------------------------------------------------------------------
 * Cursor tokens
 * ------------------------------------------------------------------------ */

#define FEED_CURSOR_LEN  24                    /* characters in a token, without the NUL */
#define FEED_CURSOR_SIZE (FEED_CURSOR_LEN + 1)  /* bytes of a buffer for one, NUL included */

/* Write an opaque URL-safe token ([A-Za-z0-9_-], FEED_CURSOR_LEN characters,
 * NUL-terminated) for the cursor (score, id) into buf, a buffer of buflen >=
 * FEED_CURSOR_SIZE bytes:
 *     char token[FEED_CURSOR_SIZE];
 *     feed_cursor_encode(page.next_score, page.next_id, token, sizeof token);
 * Returns FEED_EINVAL if buf is NULL, buflen < FEED_CURSOR_SIZE or id < 0
 * (buf is then untouched), FEED_ERANGE if score is out of range. */
FEED_API int feed_cursor_encode(int64_t score, int64_t id, char *buf, size_t buflen);

/* Read a token made by feed_cursor_encode(). Returns FEED_EINVAL for NULL
 * arguments or a malformed token (wrong length, characters, version or
 * check byte, out-of-range fields, a ranked token); *score and *id are then
 * untouched, and feed_errmsg(NULL) says which, for a server's log: "token
 * too long", "not a cursor token", "the token's check byte does not match:
 * it was changed, cut or mistyped", "a ranked token ...: read it with
 * feed_cursor_decode_ranked". */
FEED_API int feed_cursor_decode(const char *token, int64_t *score, int64_t *id);

/* ---- rank-carrying cursors ---- */

/* A next page costs Redis least when the caller says where its cursor sat:
 * the rank (0-based position in the cached copy, newest first) of the first
 * item after the cursor. A handle remembers that for the cursors of the
 * pages it served; a cursor that travels to another process (a web farm:
 * the next request reaches another server) can carry it in its token.
 *
 * The rank is only ever a hint. A page read at a hinted rank is served only
 * when the reply itself proves it is the page after the cursor (it holds an
 * entry at or above the cursor right before the first one after it, or
 * starts at rank 0); a stale, wrong or forged rank costs one more round
 * trip, never a wrong page. */

#define FEED_CURSOR_RANK_MAX 32767   /* the largest rank a token carries */

/* feed_page with a rank hint: rank is -1 (none: exactly feed_page) or the
 * *next_rank that the call returning this cursor gave (any value >= 0 is
 * accepted as a hint, and goes before the handle's own for that cursor: it
 * came with the page that handed the cursor out). If next_rank is not NULL, *next_rank is set, on
 * FEED_OK with has_more, to the rank the item after out's last one held in
 * the cache when this page was read: the hint for the next call; -1 when
 * unknown (the page came from PostgreSQL, or no rank was seen); and to -1
 * in every other case. Arguments, ownership, sources and errors as
 * feed_page, plus FEED_EINVAL for rank < -1. */
FEED_API int feed_page_ranked(feed *f, int64_t uid, int64_t last_score, int64_t last_id,
                              int64_t rank, size_t limit, feed_result *out,
                              int64_t *next_rank);

/* A token for the cursor (score, id) that also carries rank, in the same
 * FEED_CURSOR_LEN characters and alphabet as feed_cursor_encode's. rank -1,
 * or a rank above FEED_CURSOR_RANK_MAX, gives feed_cursor_encode's token
 * (no rank). Returns FEED_EINVAL if buf is NULL, buflen < FEED_CURSOR_SIZE,
 * id < 0 or rank < -1 (buf is then untouched), FEED_ERANGE if score is out
 * of range. feed_cursor_decode refuses a token that carries a rank (old
 * readers of tokens keep one token per cursor); read it with: */
FEED_API int feed_cursor_encode_ranked(int64_t score, int64_t id, int64_t rank, char *buf,
                                       size_t buflen);

/* Read a token made by feed_cursor_encode_ranked() or feed_cursor_encode()
 * (then *rank = -1). Returns FEED_EINVAL for NULL arguments or a malformed
 * token; *score, *id and *rank are then untouched, and feed_errmsg(NULL)
 * says why, as for feed_cursor_decode. */
FEED_API int feed_cursor_decode_ranked(const char *token, int64_t *score, int64_t *id,
                                       int64_t *rank);
/* ---- end rank-carrying cursors ---- */

/* ---- composite scores ---- */
/* ------------------------------------------------------------------------
 * Composite scores: several ordering fields in one exact score
 *
 * Feeds often order by several fields: hot replies by likes, then replies,
 * then latest reply day; a leaderboard by points, then paid first, then
 * earliest time first. Redis has one double per entry, exact for integers
 * only up to 2^53. A layout lists the fields from most to least significant,
 * each with a width in bits and a direction; the widths sum to at most
 * FEED_SCORE_BITS (53), so a packed score lies in [0, 2^53 - 1], inside
 * [0, FEED_SCORE_MAX], and survives Redis unchanged. Comparing two packed
 * scores compares their tuples field by field, each in its direction, so
 * (score DESC, id DESC) is (fields in their directions, then id DESC).
 * A value too wide for its field is refused with FEED_ERANGE, never masked.
 *
 * sql/score.sql computes the same scores in PostgreSQL, for a generated
 * column: score bigint GENERATED ALWAYS AS (feed_score_pack(...)) STORED.
 *
 *     static const feed_field hot[] = {               most significant first
 *         { "likes",   20, FEED_LARGER_FIRST },       0 .. 1048575
 *         { "replies", 17, FEED_LARGER_FIRST },       0 .. 131071
 *         { "day",     16, FEED_LARGER_FIRST },       0 .. 65535
 *     };
 *     feed_layout l;
 *     uint64_t v[3] = { likes, replies, day };
 *     int64_t score;
 *     feed_layout_init(&l, hot, 3);
 *     if (feed_score_pack(&l, v, &score) == FEED_OK)
 *         feed_on_insert(f, uid, score, id);
 *
 * A layout is plain data: no allocation, nothing to free. Copy it freely and
 * share it read-only between threads. Nothing here needs a handle.
 * ------------------------------------------------------------------------ */

#define FEED_SCORE_BITS        53  /* most bits the fields of a layout may use in all */
#define FEED_LAYOUT_MAX_FIELDS 16

typedef enum feed_order {
    FEED_LARGER_FIRST  = 0,  /* a larger value ranks higher (comes first) */
    FEED_SMALLER_FIRST = 1   /* a smaller value ranks higher, e.g. an earlier time;
                                stored inverted as (2^bits - 1 - value) */
} feed_order;

typedef struct feed_field {
    const char *name;   /* the caller's label (messages, docs); may be NULL.
                           Not used by the library; the pointer is copied,
                           not the string */
    unsigned    bits;   /* 1..53: the field holds the values 0 .. 2^bits - 1 */
    feed_order  order;
} feed_field;

/* Fill with feed_layout_init(); the functions below recheck it anyway. */
typedef struct feed_layout {
    size_t     nfields;                         /* 1..FEED_LAYOUT_MAX_FIELDS */
    feed_field fields[FEED_LAYOUT_MAX_FIELDS];  /* most significant first */
    unsigned   total_bits;                      /* sum of the widths, 1..53 */
} feed_layout;

/* Check fields[0..n), most significant first, and copy them into *l (the
 * array may be freed afterwards; the name strings are not copied).
 *
 * Returns FEED_OK, or FEED_EINVAL when l or fields is NULL, n is 0 or more
 * than FEED_LAYOUT_MAX_FIELDS, a width is 0 or more than 53, the widths sum
 * to more than FEED_SCORE_BITS, or an order is neither FEED_LARGER_FIRST nor
 * FEED_SMALLER_FIRST. On error *l is untouched. */
FEED_API int feed_layout_init(feed_layout *l, const feed_field *fields, size_t n);

/* Pack values[0..l->nfields), one per field in the layout's order, into
 * *score, a number in [0, 2^l->total_bits - 1]. For two tuples a and b,
 * score(a) > score(b) exactly when a ranks higher: the first field where they
 * differ decides, by its direction.
 *
 * Returns FEED_OK; FEED_EINVAL when an argument is NULL or *l is not a valid
 * layout (not made by feed_layout_init()); FEED_ERANGE when some values[i]
 * does not fit field i (values[i] > 2^bits - 1): nothing is masked or
 * clamped. On error *score is untouched. */
FEED_API int feed_score_pack(const feed_layout *l, const uint64_t *values,
                             int64_t *score);

/* The inverse of feed_score_pack(): write the l->nfields values packed into
 * score to values[0..l->nfields). Every score in [0, 2^l->total_bits - 1] is
 * the packing of exactly one tuple.
 *
 * Returns FEED_OK; FEED_EINVAL when l or values is NULL or *l is not a valid
 * layout; FEED_ERANGE when score is negative or above 2^l->total_bits - 1, so
 * not a score of this layout. On error values is untouched. */
FEED_API int feed_score_unpack(const feed_layout *l, int64_t score, uint64_t *values);

/* The score of a row in a time-ordered feed whose ids are snowflakes: the
 * id's creation time in unix milliseconds, (snowflake_id >> timestamp_shift)
 * + epoch_ms. Store the row as (score, snowflake_id).
 *
 * Why this is exact: the score is a non-decreasing function of the id, so a
 * larger id never has a smaller score, and where two ids share a millisecond
 * the id breaks the tie. Ordering by (score DESC, id DESC) is therefore
 * ordering by snowflake id DESC, exactly. The score (about 2^41 for times in
 * this century) is exact in a double; the id, which may exceed 2^53, travels
 * as the sorted-set member and never as a score. Do not use the id itself as
 * the score: ids above 2^53 would round and collide.
 *
 * timestamp_shift is the number of bits below the time field (22 for
 * Twitter- and Discord-style ids), 0..63; epoch_ms is the scheme's epoch in
 * unix milliseconds (1288834974657 for Twitter, 1420070400000 for Discord),
 * 0..FEED_SCORE_MAX. For schemes whose time counts units other than
 * milliseconds the order argument holds all the same; the score is then not
 * unix milliseconds.
 *
 * Returns FEED_OK; FEED_EINVAL when score is NULL, snowflake_id is negative,
 * or timestamp_shift or epoch_ms is out of its range; FEED_ERANGE when the
 * result exceeds FEED_SCORE_MAX. On error *score is untouched. */
FEED_API int feed_snowflake_score(int64_t snowflake_id, int timestamp_shift,
                                  int64_t epoch_ms, int64_t *score);
/* ---- end composite scores ---- */

/* ------------------------------------------------------------------------
 * Statistics
 * ------------------------------------------------------------------------ */

/* Counters of one handle since feed_open. sql_queries counts every statement
 * sent, the PREPAREs of each new PostgreSQL connection included; tests
 * compare deltas. redis_calls counts round trips: a pipeline is one. */
typedef struct feed_stats {
    uint64_t pages;          /* feed_page (feed_page_newer, feed_page_merged) calls that
                                returned FEED_OK */
    uint64_t cache_pages;    /* ... answered with FEED_SOURCE_CACHE */
    uint64_t rebuilds;       /* rebuilds installed in Redis */
    uint64_t db_pages;       /* ... answered with FEED_SOURCE_DB */
    uint64_t sql_queries;    /* statements sent to PostgreSQL */
    uint64_t redis_calls;    /* round trips to Redis */
    uint64_t lease_waits;    /* times a reader waited on another's rebuild */
    uint64_t redis_errors;
    uint64_t pg_errors;
    /* --- added since the first published API (0.1); later fields go last --- */
    uint64_t redis_connects; /* attempts to connect to Redis, feed_open's included;
                                during an outage at most one per retry_ms */
    uint64_t pg_connects;    /* attempts to connect to PostgreSQL (primary or
                                replica), likewise */
    uint64_t repairs;        /* cached copies this handle dropped because some write
                                hook (or reload, invalidate) could not reach Redis */
    /* --- PostgreSQL timeouts and read replica --- */
    uint64_t pg_timeouts;      /* PostgreSQL connects or statements (primary or replica)
                                  given up after pg_timeout_ms; each also counts in
                                  pg_errors */
    uint64_t replica_queries;  /* statements sent to the replica (also in sql_queries) */
    uint64_t replica_fallbacks; /* pages past the cache the replica could not answer,
                                  read from the primary instead */
    uint64_t replica_lagging;  /* pages past the cache read from the primary because the
                                  replica was not proven within pg_replica_max_lag_ms */
    /* --- the failover and restart guarantee --- */
    uint64_t wait_failures;  /* WAITs answered by fewer than redis_wait_replicas replicas */
    uint64_t fence_flushes;  /* data sets this handle found with a foreign run_id
                                (restart from disk, failover): their older copies are
                                never read (the keys name the data set they were
                                written in) and are swept in the background */
    uint64_t failovers;      /* -READONLY replies or non-primary ROLEs seen: the node
                                was demoted, the Sentinels are asked again at once */
    /* --- how cached pages were served --- */
    uint64_t plain_pages;    /* cache pages answered by plain Redis reads, no script */
    uint64_t script_pages;   /* cache pages answered by page.lua */
    uint64_t plain_fallbacks; /* plain reads that could not prove their page exact
                                 (absent key, cursor moved, a long run of ties):
                                 page.lua then answered, one more round trip */
    /* --- Redis Cluster --- */
    uint64_t redis_redirects; /* Redis Cluster: MOVED or ASK answers followed */
    uint64_t redis_retries;   /* Redis Cluster: waits after TRYAGAIN, CLUSTERDOWN or LOADING
                                 (a slot migrating, a failover) before sending again */
    /* --- why pages came from PostgreSQL, and rows left out --- */
    uint64_t redis_failed_pages; /* pages answered by PostgreSQL because Redis failed (also
                                    in db_pages; the rest of db_pages reached past the
                                    cached copy or waited out another's lease) */
    uint64_t rows_left_out;   /* rows met with a NULL score or id: no place in a feed, left
                                 out of it (FEED_LOG_WARN names each; docs/schema.md) */
    /* --- overload: a cold cache under load (docs/operations.md) --- */
    uint64_t installs_refused; /* rebuilds read from SQL but not installed: a write came
                                  between (its hook took the grant), or the grant outlived
                                  its window; the page is still served from the rows */
    uint64_t shed;            /* calls failed fast with FEED_EBUSY: past their deadline, or
                                 PostgreSQL's cold-work budget spent (both counted here) */
    uint64_t deadlines_missed; /* ... of which past request_timeout_ms */
    uint64_t lease_waits_served; /* lease waits that ended in the cache another's rebuild
                                    filled (the rest read SQL themselves, or were shed) */
    /* --- the restart fence's sweep --- */
    uint64_t fence_sweeps;    /* sweeps of a data set's older copies (fence_flushes) seen
                                 to end, by this handle or another; equal to fence_flushes
                                 when none is under way */
    /* --- lease waits on one event loop --- */
    uint64_t lease_waits_joined; /* async handles: lease waits that joined another request of
                                    the handle waiting on the same feed, and asked Redis
                                    nothing until that one's answer came (0 on a blocking
                                    handle: one call at a time) */
} feed_stats;

/* Copy the handle's counters (since feed_open) into *out. */
FEED_API void feed_stats_get(const feed *f, feed_stats *out);

/* The counters by name, for exporters (metrics pages, logs): every field of
 * feed_stats, in declaration order, is one entry. feed_stats_count() is the
 * number of counters; feed_stats_name(i) is field i's name as spelled in the
 * struct ("pages", "cache_pages", ...), NULL when i is out of range;
 * feed_stats_value(s, i) is its value in *s (0 when s is NULL or i is out of
 * range). A counter added to feed_stats is added here too (tests/t_errors.c
 * checks that every field has a name). */
FEED_API size_t      feed_stats_count(void);
FEED_API const char *feed_stats_name(size_t i);
FEED_API uint64_t    feed_stats_value(const feed_stats *s, size_t i);

/* ------------------------------------------------------------------------
 * Asynchronous API: for servers that run an event loop
 *
 * A feed_async handle lives on one loop (libevent: feedcache_libevent.h,
 * libuv: feedcache_libuv.h) and is used from that loop's thread. Any number
 * of requests may be in flight on it at once; nothing in it blocks:
 * connections, Redis commands, SQL statements, lease waits and timeouts all
 * run on the loop. Requests started in the same turn of the loop share one
 * write per Redis node (pipelining). Every request makes the decisions the
 * blocking call of the same name makes (the same code runs both): cluster
 * routing, Sentinel, the restart fence, WAIT, repairs, leases.
 *
 * Each call checks its arguments at once: an argument error is returned
 * (FEED_EINVAL, FEED_ERANGE; feed_async_errmsg says why) and no callback
 * comes. Otherwise it returns FEED_OK and the callback comes exactly once,
 * on the loop's thread, never from inside the call that started the
 * request, with the request's result code: what the blocking call would
 * have returned, or FEED_ECANCELED when the handle closed first (FEED_ENOMEM
 * when the request could not even be made: then no callback either).
 *
 * PostgreSQL statements of one handle run one after another on its
 * connection (the primary's; the replica's for pages past the cache), each
 * bounded by pg_timeout_ms; a statement that times out is cancelled on a
 * thread of its own, never on the loop's.
 *
 * SIGPIPE: a program needs nothing. A write to a Redis that has just gone
 * away fails with EPIPE and the handle takes the node as down: the loop's
 * thread has SIGPIPE blocked around each write to Redis, and a SIGPIPE the
 * write raised is taken off before the mask is put back, as libpq does (one
 * already pending is left to the program). The blocking API sends with
 * MSG_NOSIGNAL.
 * ------------------------------------------------------------------------ */

typedef struct feed_async feed_async;

/* A page's callback. On FEED_OK *page holds the page and the callback owns
 * it: free it with feed_result_free(). On an error page is NULL and
 * feed_async_errmsg(a) says why, valid until the callback returns. */
typedef void feed_async_page_cb(feed_async *a, int rc, feed_result *page, void *arg);
/* feed_async_page_ranked's: next_rank as feed_page_ranked gives it. */
typedef void feed_async_ranked_cb(feed_async *a, int rc, feed_result *page, int64_t next_rank,
                                  void *arg);
/* A write's callback (cb may be NULL: the result is then dropped). */
typedef void feed_async_done_cb(feed_async *a, int rc, void *arg);

/* feed_page, feed_page_ranked and feed_page_newer on the loop: same
 * arguments, checks, sources and result codes. */
FEED_API int feed_async_page(feed_async *a, int64_t uid, int64_t last_score, int64_t last_id,
                             size_t limit, feed_async_page_cb *cb, void *arg);
FEED_API int feed_async_page_ranked(feed_async *a, int64_t uid, int64_t last_score,
                                    int64_t last_id, int64_t rank, size_t limit,
                                    feed_async_ranked_cb *cb, void *arg);
FEED_API int feed_async_page_newer(feed_async *a, int64_t uid, int64_t score, int64_t id,
                                   size_t limit, feed_async_page_cb *cb, void *arg);

/* The write hooks on the loop: call after the SQL change commits. uids is
 * copied: the caller's array may go once the call returns. */
FEED_API int feed_async_on_insert(feed_async *a, int64_t uid, int64_t score, int64_t id,
                                  feed_async_done_cb *cb, void *arg);
FEED_API int feed_async_on_delete(feed_async *a, int64_t uid, int64_t id,
                                  feed_async_done_cb *cb, void *arg);
FEED_API int feed_async_fanout(feed_async *a, const int64_t *uids, size_t n, int64_t score,
                               int64_t id, feed_async_done_cb *cb, void *arg);
FEED_API int feed_async_invalidate(feed_async *a, int64_t uid, feed_async_done_cb *cb,
                                   void *arg);

/* feed_page_merged on the loop: same arguments, checks, sources and result
 * codes. authors is copied: the caller's array may go once the call
 * returns. */
FEED_API int feed_async_page_merged(feed_async *a, int64_t uid, const int64_t *authors,
                                    size_t n, int64_t last_score, int64_t last_id, size_t limit,
                                    feed_async_page_cb *cb, void *arg);
/* feed_page_filtered, feed_page_merged_filtered and feed_page_newer_filtered
 * on the loop: same arguments, checks, sources and result codes. The filter
 * and its arrays (and authors) are copied before the call returns; keep is
 * called on the loop's thread with keep_arg, which must stay valid until
 * the callback. */
FEED_API int feed_async_page_filtered(feed_async *a, int64_t uid, int64_t last_score,
                                      int64_t last_id, size_t limit, const feed_filter *filter,
                                      feed_async_page_cb *cb, void *arg);
FEED_API int feed_async_page_merged_filtered(feed_async *a, int64_t uid,
                                             const int64_t *authors, size_t n,
                                             int64_t last_score, int64_t last_id, size_t limit,
                                             const feed_filter *filter,
                                             feed_async_page_cb *cb, void *arg);
FEED_API int feed_async_page_newer_filtered(feed_async *a, int64_t uid, int64_t score,
                                            int64_t id, size_t limit, const feed_filter *filter,
                                            feed_async_page_cb *cb, void *arg);
/* feed_author_on_insert and feed_author_on_delete on the loop. */
FEED_API int feed_async_author_on_insert(feed_async *a, int64_t author, int64_t score,
                                         int64_t id, feed_async_done_cb *cb, void *arg);
FEED_API int feed_async_author_on_delete(feed_async *a, int64_t author, int64_t id,
                                         feed_async_done_cb *cb, void *arg);
/* feed_author_invalidate on the loop. */
FEED_API int feed_async_author_invalidate(feed_async *a, int64_t author,
                                          feed_async_done_cb *cb, void *arg);

/* Close the handle: every request still pending gets its callback with
 * FEED_ECANCELED before close returns, and no callback comes after it; the
 * connections are closed and the memory freed (with libuv, on the loop's
 * next turn). May be called from a callback. NULL is fine. */
FEED_API void feed_async_close(feed_async *a);

/* Detail of the last error on a ("" if none): inside a callback, that
 * request's; after a call that refused its arguments, why. NULL: the last
 * failed feed_async_open_* in this thread. */
FEED_API const char *feed_async_errmsg(const feed_async *a);

/* feed_health on the loop: a Redis PING and one read of the feed table,
 * each bounded by its store's timeout and under the same retry rule. The
 * callback gets rc as feed_health returns it (FEED_OK, FEED_EREDIS, FEED_EPG,
 * FEED_EUNAVAILABLE, FEED_ENOMEM) and h, the state of each store, owned by
 * the request and valid until the callback returns; h is NULL only with
 * FEED_ECANCELED. Returns FEED_EINVAL (a or cb NULL) or FEED_ENOMEM, with no
 * callback then. */
typedef void feed_async_health_cb(feed_async *a, int rc, const feed_health_info *h,
                                  void *arg);
FEED_API int feed_async_health(feed_async *a, feed_async_health_cb *cb, void *arg);

/* The handle's counters (feed_stats), over every request since it opened. */
FEED_API void feed_async_stats_get(const feed_async *a, feed_stats *out);

/* feed_retry_after_ms for an async handle: the same rule, read now. */
FEED_API uint32_t feed_async_retry_after_ms(const feed_async *a);

/* feed_error_kind for an async handle: rc is a code a call on a returned, or
 * the rc of a callback; ask from inside the callback (or right after the
 * call), before the loop runs on: a later turn may reconnect. */
FEED_API feed_kind feed_async_error_kind(const feed_async *a, int rc);

/* feed_on_unknown_write and feed_author_on_unknown_write on the loop (step 3
 * of the write protocol): same arguments, drops and result codes, but every
 * DEL is started at once (pipelined) and each feed whose DEL fails goes on
 * the repair list. The callback comes once, after the last DEL, with the
 * first failure's code and message (FEED_OK: every copy dropped). The
 * caller's array may go once the call returns. n == 0: the callback still
 * comes, with FEED_OK. */
FEED_API int feed_async_on_unknown_write(feed_async *a, const int64_t *uids, size_t n,
                                         feed_async_done_cb *cb, void *arg);
FEED_API int feed_async_author_on_unknown_write(feed_async *a, const int64_t *authors,
                                                size_t n, feed_async_done_cb *cb, void *arg);

#ifdef __cplusplus
}
#endif

#endif /* FEEDCACHE_H */
