/* handle.c -- the feed handle: config, open and close, errors, statistics. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* The message of the last failed feed_open() in this thread: there is no
 * handle to carry it. */
static _Thread_local char open_errmsg[512];

void feed_config_init(feed_config *cfg)
{
    if (!cfg)
        return;
    memset(cfg, 0, sizeof *cfg);
    cfg->redis_host = "127.0.0.1";
    cfg->redis_port = 6379;
    cfg->redis_password = NULL;
    cfg->pg_conninfo = "";
    cfg->key_prefix = "feed";
    cfg->table = "feed_entry";
    cfg->owner_column = "uid";
    cfg->score_column = "score";
    cfg->id_column = "id";
    cfg->max_len = 1000;
    cfg->max_page = 100;
    cfg->ttl_seconds = 604800;
    cfg->redis_timeout_ms = 250;
    cfg->lease_ms = 3000;
    cfg->redis_user = NULL;
    cfg->lease_wait_ms = 100;
    cfg->retry_ms = 1000;
    cfg->redis_cluster = NULL;
    cfg->redis_sentinels = NULL;
    cfg->redis_master_name = "mymaster";
    cfg->pg_replica_conninfo = NULL;
    cfg->pg_timeout_ms = 2000;
    cfg->empty_ttl_seconds = 60;
    cfg->pg_replica_max_lag_ms = 1000;
    cfg->redis_wait_replicas = 0;
    cfg->redis_wait_timeout_ms = 100;
    cfg->redis_restart_fence = 1;
}

const char *feed_strerror(int code)
{
    switch (code) {
    case FEED_OK:           return "success";
    case FEED_EINVAL:       return "invalid argument";
    case FEED_ERANGE:       return "score or composite field out of range";
    case FEED_EREDIS:       return "Redis failed";
    case FEED_EPG:          return "PostgreSQL failed";
    case FEED_ENOMEM:       return "out of memory";
    case FEED_EUNAVAILABLE: return "neither Redis nor PostgreSQL could answer";
    default:                return "unknown error code";
    }
}

const char *feed_errmsg(const feed *f)
{
    return f ? f->errmsg : open_errmsg;
}

/* Record code and a message on the handle; returns code, so that error
 * paths read "return feed__error(f, FEED_EINVAL, ...)". */
int feed__error(feed *f, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(f->errmsg, sizeof f->errmsg, fmt, ap);
    va_end(ap);
    /* One line, whatever the servers said (libpq adds "LINE 1: ..."):
     * messages end up in logs. */
    for (char *p = f->errmsg; *p; p++)
        if (*p == '\n' || *p == '\r' || *p == '\t')
            *p = ' ';
    return code;
}

void feed__clear_error(feed *f)
{
    f->errmsg[0] = '\0';
}

/* The end of a read that PostgreSQL answered instead of Redis (redis_failed:
 * Redis could not answer either; redis_msg: why). Degraded but answered:
 * keep why Redis was not used. PostgreSQL failed too: the feed is
 * unavailable, with both reasons. Any other rc is returned as it is. */
int feed__db_outcome(feed *f, int rc, int redis_failed, const char *redis_msg)
{
    char pg_msg[sizeof f->errmsg];

    if (!redis_failed)
        return rc;
    if (rc == FEED_OK) {
        snprintf(f->errmsg, sizeof f->errmsg, "%s", redis_msg);
    } else if (rc == FEED_EPG) {
        snprintf(pg_msg, sizeof pg_msg, "%s", f->errmsg);
        rc = feed__error(f, FEED_EUNAVAILABLE, "%s; %s", redis_msg, pg_msg);
    }
    return rc;
}

int64_t feed__now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* May a lost connection be tried again? Only retry_ms after the last
 * attempt, so that an outage cannot turn into a connect storm. */
int feed__retry_due(feed *f, int64_t last_attempt_ms, const char *store)
{
    int64_t since = feed__now_ms() - last_attempt_ms;

    if (since < (int64_t)f->cfg.retry_ms)
        return feed__error(f, FEED_EUNAVAILABLE, "%s is down; next reconnect in %lld ms",
                           store, (long long)(f->cfg.retry_ms - since));
    return FEED_OK;
}

void feed_stats_get(const feed *f, feed_stats *out)
{
    if (!out)
        return;
    if (f)
        *out = f->stats;
    else
        memset(out, 0, sizeof *out);
}

/* The names of feed_stats' fields, in declaration order. */
#define FEED_STAT(name) { #name, offsetof(feed_stats, name) }
static const struct { const char *name; size_t offset; } stat_fields[] = {
    FEED_STAT(pages), FEED_STAT(cache_pages), FEED_STAT(rebuilds),
    FEED_STAT(db_pages), FEED_STAT(sql_queries), FEED_STAT(redis_calls),
    FEED_STAT(lease_waits), FEED_STAT(redis_errors), FEED_STAT(pg_errors),
    FEED_STAT(redis_connects), FEED_STAT(pg_connects), FEED_STAT(repairs),
    FEED_STAT(pg_timeouts), FEED_STAT(replica_queries), FEED_STAT(replica_fallbacks),
    FEED_STAT(replica_lagging),
    FEED_STAT(wait_failures), FEED_STAT(fence_flushes), FEED_STAT(failovers),
    FEED_STAT(plain_pages), FEED_STAT(script_pages), FEED_STAT(plain_fallbacks),
    FEED_STAT(redis_redirects), FEED_STAT(redis_retries),
};
#undef FEED_STAT

size_t feed_stats_count(void)
{
    return sizeof stat_fields / sizeof stat_fields[0];
}

const char *feed_stats_name(size_t i)
{
    return i < feed_stats_count() ? stat_fields[i].name : NULL;
}

uint64_t feed_stats_value(const feed_stats *s, size_t i)
{
    uint64_t v;

    if (!s || i >= feed_stats_count())
        return 0;
    memcpy(&v, (const char *)s + stat_fields[i].offset, sizeof v);
    return v;
}

void feed_result_free(feed_result *r)
{
    if (!r)
        return;
    free(r->items);
    memset(r, 0, sizeof *r);
}

/* "<prefix>:2:{<uid>}" and "<prefix>:2:{<uid>}:lease" (2 is
 * FEED_KEY_VERSION, the key format). The braces are a Redis Cluster hash
 * tag: both keys of a feed live on one slot, so one script can touch both. */
void feed__keys_of(const feed *f, int64_t uid, char *key, char *lease_key)
{
    char num[21];

    feed__i64_to_str(uid, num);
    snprintf(key, f->key_cap, "%s:" FEED_KEY_VERSION ":{%s}", f->cfg.key_prefix, num);
    snprintf(lease_key, f->key_cap, "%s:" FEED_KEY_VERSION ":{%s}:lease",
             f->cfg.key_prefix, num);
}

void feed__set_keys(feed *f, int64_t uid)
{
    feed__keys_of(f, uid, f->key, f->lease_key);
}

/* splitmix64: a well-mixed 64-bit value from a counter. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* A lease token unique across handles and processes: a random seed per
 * handle, then a counter. It needs to be unguessable only by accident. */
static void hex64(uint64_t v, char *out)
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 15; i >= 0; i--, v >>= 4)
        out[i] = digits[v & 15];
}

void feed__lease_token(feed *f, char buf[33])
{
    uint64_t seq = ++f->token_seq;

    hex64(mix64(f->token_seed ^ seq), buf);
    hex64(mix64(f->token_seed + seq), buf + 16);
    buf[32] = '\0';
}

static uint64_t random_seed(const void *salt)
{
    uint64_t seed = 0;
    FILE *urandom = fopen("/dev/urandom", "rb");

    if (urandom) {
        if (fread(&seed, sizeof seed, 1, urandom) != 1)
            seed = 0;
        fclose(urandom);
    }
    /* Without /dev/urandom, time, pid and an address still differ between
     * handles; tokens only have to differ. */
    seed ^= (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)salt;
    return mix64(seed);
}

static int bad_identifier(const char *s)
{
    return !s || !*s;
}

static const char *check_config(const feed_config *c)
{
    if (!c->redis_host || !*c->redis_host)
        return "redis_host is NULL or empty";
    if (c->redis_port < 1 || c->redis_port > 65535)
        return "redis_port must be 1..65535";
    if (c->redis_user && !c->redis_password)
        return "redis_user needs redis_password";
    if (!c->pg_conninfo)
        return "pg_conninfo is NULL (use \"\" for libpq defaults)";
    if (!c->key_prefix || !*c->key_prefix)
        return "key_prefix is NULL or empty";
    /* A brace in the prefix would become the Redis Cluster hash tag instead
     * of the uid, putting every feed on one slot. */
    if (strpbrk(c->key_prefix, "{}"))
        return "key_prefix must not contain '{' or '}'";
    if (bad_identifier(c->table) || bad_identifier(c->owner_column) ||
        bad_identifier(c->score_column) || bad_identifier(c->id_column))
        return "table and column names must be non-empty strings";
    if (c->max_len == 0 || c->max_len > 10000000)
        return "max_len must be 1..10000000";
    if (c->max_page == 0 || c->max_page > 100000)
        return "max_page must be 1..100000";
    if (c->redis_timeout_ms == 0)
        return "redis_timeout_ms must be > 0";
    if (c->lease_ms == 0)
        return "lease_ms must be > 0";
    /* Like redis_timeout_ms: no "wait forever" setting. A stuck server must
     * cost a caller a bounded wait (README: Reliability). */
    if (c->pg_timeout_ms == 0)
        return "pg_timeout_ms must be > 0";
    if (c->pg_replica_conninfo && !*c->pg_replica_conninfo)
        return "pg_replica_conninfo is empty (NULL for no replica)";
    if (c->redis_cluster && feed__parse_addrs(c->redis_cluster, NULL, NULL) != FEED_OK)
        return "redis_cluster must be host:port[,host:port...]";
    if (c->redis_cluster && c->redis_sentinels)
        return "redis_cluster and redis_sentinels are exclusive: set one";
    if (c->redis_sentinels && (!c->redis_master_name || !*c->redis_master_name))
        return "redis_sentinels needs redis_master_name";
    if (c->redis_sentinels && !feed__sentinels_valid(c->redis_sentinels))
        return "redis_sentinels must be \"host:port[,host:port...]\"";
    if (c->redis_wait_replicas > 0 &&
        (c->redis_wait_timeout_ms == 0 || c->redis_wait_timeout_ms >= c->redis_timeout_ms))
        return "redis_wait_timeout_ms must be 1 .. redis_timeout_ms - 1";
    if (c->redis_restart_fence != 0 && c->redis_restart_fence != 1)
        return "redis_restart_fence must be 0 or 1";
    return NULL;
}

/* Copy the config's strings into the handle, so the caller's may go. */
static int copy_config(feed *f, const feed_config *cfg)
{
    const char **fields[] = {
        &f->cfg.redis_host, &f->cfg.redis_password, &f->cfg.pg_conninfo,
        &f->cfg.key_prefix, &f->cfg.table, &f->cfg.owner_column,
        &f->cfg.score_column, &f->cfg.id_column, &f->cfg.redis_user,
        &f->cfg.redis_cluster, &f->cfg.redis_sentinels, &f->cfg.redis_master_name,
        &f->cfg.pg_replica_conninfo,
    };

    f->cfg = *cfg;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (!*fields[i])
            continue;
        f->owned[i] = strdup(*fields[i]);
        if (!f->owned[i])
            return FEED_ENOMEM;
        *fields[i] = f->owned[i];
    }
    f->key_cap = strlen(f->cfg.key_prefix) +
                 sizeof ":" FEED_KEY_VERSION ":{-9223372036854775808}:lease";
    f->key = malloc(f->key_cap);
    f->lease_key = malloc(f->key_cap);
    return f->key && f->lease_key ? FEED_OK : FEED_ENOMEM;
}

/* A feed known to be empty (its copy holds only the end marker) lives
 * empty_ttl_seconds, never longer than a real feed: any uid probe creates
 * one, so they must not pile up in Redis. 0 means "as long as a real feed". */
static uint32_t empty_ttl_seconds(const feed_config *c)
{
    if (c->empty_ttl_seconds == 0)
        return c->ttl_seconds;
    if (c->ttl_seconds != 0 && c->empty_ttl_seconds > c->ttl_seconds)
        return c->ttl_seconds;
    return c->empty_ttl_seconds;
}

/* feed_open succeeds when one store answers; a store that answered and
 * refused (bad password, missing table) is a configuration error worth
 * failing for, since retrying will not fix it. */
static int open_outcome(int redis_rc, int pg_rc)
{
    if (redis_rc == FEED_ENOMEM || pg_rc == FEED_ENOMEM)
        return FEED_ENOMEM;
    if (redis_rc == FEED_EREDIS)
        return FEED_EREDIS;
    if (pg_rc == FEED_EPG || pg_rc == FEED_ERANGE)
        return FEED_EPG;
    if (redis_rc != FEED_OK && pg_rc != FEED_OK)
        return FEED_EUNAVAILABLE;
    return FEED_OK;
}

int feed_open(feed **out, const feed_config *cfg)
{
    const char *bad;
    char redis_msg[sizeof open_errmsg] = "", pg_msg[sizeof open_errmsg] = "";
    int rc, redis_rc, pg_rc;
    feed *f;

    open_errmsg[0] = '\0';
    if (!out || !cfg) {
        snprintf(open_errmsg, sizeof open_errmsg, "feed_open: out or cfg is NULL");
        if (out)
            *out = NULL;
        return FEED_EINVAL;
    }
    *out = NULL;
    if ((bad = check_config(cfg)) != NULL) {
        snprintf(open_errmsg, sizeof open_errmsg, "feed_open: %s", bad);
        return FEED_EINVAL;
    }
    f = calloc(1, sizeof *f);
    if (!f) {
        snprintf(open_errmsg, sizeof open_errmsg, "feed_open: out of memory");
        return FEED_ENOMEM;
    }
    if (copy_config(f, cfg) != FEED_OK) {
        feed_close(f);
        snprintf(open_errmsg, sizeof open_errmsg, "feed_open: out of memory");
        return FEED_ENOMEM;
    }
    f->token_seed = random_seed(f);
    feed__i64_to_str((int64_t)f->cfg.ttl_seconds * 1000, f->ttl_ms);
    feed__i64_to_str((int64_t)empty_ttl_seconds(&f->cfg) * 1000, f->empty_ttl_ms);
    feed__i64_to_str((int64_t)f->cfg.lease_ms, f->lease_ms);

    redis_rc = feed__redis_connect(f);
    if (redis_rc != FEED_OK)
        snprintf(redis_msg, sizeof redis_msg, "%s", f->errmsg);
    pg_rc = feed__pg_connect(f);
    if (pg_rc != FEED_OK)
        snprintf(pg_msg, sizeof pg_msg, "%s", f->errmsg);

    rc = open_outcome(redis_rc, pg_rc);
    feed__error(f, rc, "%s%s%s", redis_msg, *redis_msg && *pg_msg ? "; " : "", pg_msg);
    if (rc != FEED_OK) {
        snprintf(open_errmsg, sizeof open_errmsg, "%s", f->errmsg);
        feed_close(f);
        return rc;
    }
    *out = f;
    return FEED_OK;
}

void feed_close(feed *f)
{
    if (!f)
        return;
    feed__redis_drop(f);
    feed__cluster_free(f);
    feed__pg_drop(f);
    for (size_t i = 0; i < sizeof f->owned / sizeof f->owned[0]; i++)
        free(f->owned[i]);
    free(f->sql_top);
    free(f->sql_after);
    free(f->sql_before);
    free(f->key);
    free(f->lease_key);
    free(f);
}
