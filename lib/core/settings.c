/* settings.c -- every field of feed_config in one table: its name, type,
 * range, default and what it is. feed_config_init() fills the defaults from
 * it, feed_open()'s config check takes each field's own limits from it, and
 * feed_config_set() parses text against it; so a program that sets fields by
 * name (feedcache-sync's flags, the example server's) accepts exactly what
 * feed_open() accepts, and prints its usage from the same lines.
 *
 * What ties two fields together (redis_user needs redis_password, ...) is
 * checked by config.c alone: fields may be set by name in any order. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"

/* How a field is stored and which of its values feed_open() refuses. */
enum { CF_STR, CF_U32, CF_INT };
enum {
    CF_NEEDED     = 1 << 0,   /* NULL is refused */
    CF_NONEMPTY   = 1 << 1,   /* "" is refused */
    CF_EMPTY_NULL = 1 << 2,   /* NULL means none: "" from text stores NULL */
    CF_PREFIX     = 1 << 3,   /* a key prefix: '{' '}' would replace the {uid} hash
                                 tag; at most FEED_KEY_PREFIX_MAX bytes, so that
                                 the fence's key and SCAN pattern hold it whole */
    CF_ADDRS      = 1 << 4,   /* "host:port[,host:port...]" */
    CF_BESIDE     = 1 << 5    /* used only beside another field, and checked
                                 there by feed_open (config.c); refused when
                                 empty from text all the same */
};

typedef struct cfield {
    feed_config_field d;      /* what feed_config_field_get() gives */
    size_t            off;
    unsigned char     store;
    unsigned char     flags;
} cfield;

#define STR(f, flag, dflt, fl, help) \
    { { #f, flag, FEED_CONFIG_STRING, 0, 0, dflt, help }, offsetof(feed_config, f), CF_STR, fl }
#define U32(f, flag, min, max, dflt, help) \
    { { #f, flag, FEED_CONFIG_INTEGER, min, max, dflt, help }, offsetof(feed_config, f), CF_U32, 0 }
#define INT(f, flag, min, max, dflt, help) \
    { { #f, flag, FEED_CONFIG_INTEGER, min, max, dflt, help }, offsetof(feed_config, f), CF_INT, 0 }

/* In declaration order (lib/feedcache.h). A field added to feed_config goes
 * here too: t_sync_flags finds a field this table misses. */
static const cfield fields[] = {
    STR(redis_host, "redis-host", "127.0.0.1", CF_NEEDED | CF_NONEMPTY,
        "Redis host (not with redis_cluster, redis_sentinels)"),
    INT(redis_port, "redis-port", 1, 65535, "6379", "Redis port"),
    STR(redis_password, "redis-password", NULL, CF_EMPTY_NULL,
        "Redis AUTH password; none: no AUTH"),
    STR(pg_conninfo, "pg-conninfo", "", CF_NEEDED,
        "libpq connection string of the primary; \"\": PG* defaults"),
    STR(key_prefix, "key-prefix", "feed", CF_NEEDED | CF_NONEMPTY | CF_PREFIX,
        "start of every key name; no '{' or '}', at most 200 bytes"),
    STR(table, "table", "feed_entry", CF_NEEDED | CF_NONEMPTY, "the feed table"),
    STR(owner_column, "owner-column", "uid", CF_NEEDED | CF_NONEMPTY,
        "the feed table's owner column"),
    STR(score_column, "score-column", "score", CF_NEEDED | CF_NONEMPTY,
        "the score column (of the authors' table too)"),
    STR(id_column, "id-column", "id", CF_NEEDED | CF_NONEMPTY,
        "the id column (of the authors' table too)"),
    U32(max_len, "max-len", 1, 10000000, "1000", "most entries cached per feed"),
    U32(max_page, "max-page", 1, 100000, "100", "largest page limit accepted"),
    U32(ttl_seconds, "ttl-seconds", 0, UINT32_MAX, "604800",
        "a copy nobody reads expires after this; 0: never"),
    U32(redis_timeout_ms, "redis-timeout-ms", 1, UINT32_MAX, "250",
        "Redis connect and command timeout"),
    U32(lease_ms, "lease-ms", 1, UINT32_MAX, "3000", "how long a rebuild lease lives"),
    STR(redis_user, "redis-user", NULL, CF_EMPTY_NULL,
        "Redis ACL user, with redis_password; none: the default user"),
    U32(lease_wait_ms, "lease-wait-ms", 0, UINT32_MAX, "3000",
        "wait for another's rebuild before asking SQL; 0: no wait"),
    U32(retry_ms, "retry-ms", 0, UINT32_MAX, "1000",
        "time between two reconnects of a store that did not answer"),
    STR(redis_cluster, "redis-cluster", NULL, CF_EMPTY_NULL | CF_ADDRS,
        "host:port[,...]: seed nodes of a Redis Cluster"),
    STR(redis_sentinels, "redis-sentinels", NULL, CF_EMPTY_NULL | CF_ADDRS,
        "host:port[,...]: Sentinels to ask for the primary"),
    STR(redis_master_name, "redis-master-name", "mymaster", CF_NONEMPTY | CF_BESIDE,
        "the primary's name for the Sentinels"),
    STR(pg_replica_conninfo, "pg-replica-conninfo", NULL, CF_EMPTY_NULL | CF_NONEMPTY,
        "a read replica for pages past the cache"),
    U32(pg_timeout_ms, "pg-timeout-ms", 1, UINT32_MAX, "2000",
        "bound on a PostgreSQL connect or statement"),
    U32(empty_ttl_seconds, "empty-ttl-seconds", 0, UINT32_MAX, "60",
        "TTL of the copy of an empty feed; 0: ttl_seconds"),
    U32(pg_replica_max_lag_ms, "pg-replica-max-lag-ms", 0, UINT32_MAX, "1000",
        "the replica answers only if proven this fresh; 0: no bound"),
    U32(redis_wait_replicas, "redis-wait-replicas", 0, UINT32_MAX, "0",
        "n > 0: each write waits for n replicas (WAIT); 0: off"),
    U32(redis_wait_timeout_ms, "redis-wait-timeout-ms", 0, UINT32_MAX, "100",
        "how long WAIT waits; below redis_timeout_ms"),
    INT(redis_restart_fence, "redis-restart-fence", 0, 1, "1",
        "1: no copy served from a restarted or promoted Redis"),
    STR(author_table, "author-table", NULL, CF_EMPTY_NULL | CF_NONEMPTY,
        "the authors' posts table, for read-time merge"),
    STR(author_column, "author-column", "author", CF_NONEMPTY | CF_BESIDE,
        "the authors' table's author column"),
    INT(redis_tls, "redis-tls", 0, 1, "0",
        "1: TLS on every Redis connection (a build with hiredis_ssl)"),
    STR(redis_tls_ca_file, "redis-tls-ca-file", NULL, CF_EMPTY_NULL | CF_NONEMPTY,
        "PEM file of the CAs to trust; none: the system's"),
    STR(redis_tls_ca_dir, "redis-tls-ca-dir", NULL, CF_EMPTY_NULL | CF_NONEMPTY,
        "folder of CA certificates (c_rehash layout)"),
    STR(redis_tls_cert_file, "redis-tls-cert-file", NULL, CF_EMPTY_NULL | CF_NONEMPTY,
        "client certificate (PEM), with redis_tls_key_file"),
    STR(redis_tls_key_file, "redis-tls-key-file", NULL, CF_EMPTY_NULL | CF_NONEMPTY,
        "the client certificate's private key (PEM)"),
    STR(redis_tls_server_name, "redis-tls-server-name", NULL, CF_EMPTY_NULL | CF_NONEMPTY,
        "name sent as SNI and checked in certificates; none: the host"),
    INT(redis_tls_verify, "redis-tls-verify", 0, 1, "1",
        "1: verify each server's certificate and name; 0: no check"),
    STR(item_author_column, "item-author-column", NULL, CF_EMPTY_NULL | CF_NONEMPTY,
        "the feed table's author column, for filtered pages"),
    U32(filter_max_scan, "filter-max-scan", 1, 1000000, "10000",
        "most items one filtered page examines"),
    U32(request_timeout_ms, "request-timeout-ms", 1, 3600000, "5000",
        "the longest a read may take, queues included"),
    U32(pg_budget, "pg-budget", 0, 100000, "0",
        "most statements of reads in flight per process; 0: 4 per CPU"),
};

#define NFIELDS (sizeof fields / sizeof fields[0])

size_t feed_config_field_count(void)
{
    return NFIELDS;
}

const feed_config_field *feed_config_field_get(size_t i)
{
    return i < NFIELDS ? &fields[i].d : NULL;
}

/* "redis_port" or "redis-port": each '-' of name reads as '_'. */
static const cfield *find(const char *name)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        const char *a = fields[i].d.name, *b = name;
        while (*a && (*a == *b || (*a == '_' && *b == '-')))
            a++, b++;
        if (!*a && !*b)
            return &fields[i];
    }
    return NULL;
}

static const char **str_at(const cfield *fl, const feed_config *c)
{
    return (const char **)((const char *)c + fl->off);
}

static int64_t int_at(const cfield *fl, const feed_config *c)
{
    const char *p = (const char *)c + fl->off;

    return fl->store == CF_INT ? (int64_t)*(const int *)p : (int64_t)*(const uint32_t *)p;
}

static void int_put(const cfield *fl, feed_config *c, int64_t v)
{
    char *p = (char *)c + fl->off;

    if (fl->store == CF_INT)
        *(int *)p = (int)v;
    else
        *(uint32_t *)p = (uint32_t)v;
}

#define SET_TEXT_(n) #n
#define SET_TEXT(n) SET_TEXT_(n)      /* a number macro as a string literal */

/* Why feed_open refuses the string v for this field alone; NULL: it does
 * not. */
static const char *str_refused(const cfield *fl, const char *v)
{
    if (!v)
        return fl->flags & CF_NEEDED ? "must not be NULL" : NULL;
    if (!*v && (fl->flags & CF_NONEMPTY))
        return "must not be empty";
    if ((fl->flags & CF_PREFIX) && strpbrk(v, "{}"))
        return "must not contain '{' or '}'";
    if ((fl->flags & CF_PREFIX) && strlen(v) > FEED_KEY_PREFIX_MAX)
        return "must be at most " SET_TEXT(FEED_KEY_PREFIX_MAX) " bytes";
    if ((fl->flags & CF_ADDRS) && feed__parse_addrs(v, NULL, NULL) != FEED_OK)
        return "must be host:port[,host:port...]";
    return NULL;
}

/* 1 with *out when s is a value of number field fl: decimal digits only
 * (no sign, no blank, nothing after), within its range; else 0. */
static int parse_count(const cfield *fl, const char *s, int64_t *out)
{
    return *s != '-' && feed__parse_i64(s, strlen(s), out) == FEED_OK && *out >= fl->d.min &&
           *out <= fl->d.max;
}

void feed_config_init(feed_config *c)
{
    if (!c)
        return;
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NFIELDS; i++) {
        const cfield *fl = &fields[i];
        int64_t v = 0;

        if (fl->store == CF_STR)
            *str_at(fl, c) = fl->d.dflt;
        else if (parse_count(fl, fl->d.dflt, &v))
            int_put(fl, c, v);
    }
}

const char *feed__config_fields_check(const feed_config *c, char *why, size_t len)
{
    for (size_t i = 0; i < NFIELDS; i++) {
        const cfield *fl = &fields[i];
        const char *bad;
        int64_t v;

        if (fl->store == CF_STR) {
            if (fl->flags & CF_BESIDE)
                continue;
            if ((bad = str_refused(fl, *str_at(fl, c))) != NULL) {
                snprintf(why, len, "%s %s", fl->d.name, bad);
                return why;
            }
        } else if ((v = int_at(fl, c)) < fl->d.min || v > fl->d.max) {
            snprintf(why, len, "%s must be %lld..%lld", fl->d.name, (long long)fl->d.min,
                     (long long)fl->d.max);
            return why;
        }
    }
    return NULL;
}

int feed__config_set(feed_config *c, const char *name, const char *value, char *err)
{
    const cfield *fl;
    const char *bad;
    int64_t v;

    if (!c || !name || !value)
        return feed__msg(err, FEED_EINVAL, "feed_config_set: cfg, name or value is NULL");
    if (!(fl = find(name)))
        return feed__msg(err, FEED_EINVAL, "%.64s is not a field of feed_config", name);
    if (fl->store != CF_STR) {
        if (!parse_count(fl, value, &v))
            return feed__msg(err, FEED_EINVAL, "%.64s must be %lld..%lld, not \"%.32s\"", name,
                             (long long)fl->d.min, (long long)fl->d.max, value);
        int_put(fl, c, v);
        return FEED_OK;
    }
    if (!*value && (fl->flags & CF_EMPTY_NULL))
        value = NULL;
    if ((bad = str_refused(fl, value)) != NULL)
        return feed__msg(err, FEED_EINVAL, "%.64s %s", name, bad);
    *str_at(fl, c) = value;
    return FEED_OK;
}

const char **feed__config_string(feed_config *c, size_t i)
{
    return i < NFIELDS && fields[i].store == CF_STR ? str_at(&fields[i], c) : NULL;
}
