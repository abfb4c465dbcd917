/* config.c -- the configuration and what a handle's requests share:
 * defaults, checks, owned copies of the strings, statistics by name. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

const char *feed_strerror(int code)
{
    switch (code) {
    case FEED_OK:           return "success";
    case FEED_EINVAL:       return "invalid argument";
    case FEED_ERANGE:       return "score out of range (a cursor's, a row's, a hook's or a "
                                   "composite score field's)";
    case FEED_EREDIS:       return "Redis failed";
    case FEED_EPG:          return "PostgreSQL failed";
    case FEED_ENOMEM:       return "out of memory";
    case FEED_EUNAVAILABLE: return "neither Redis nor PostgreSQL could answer";
    case FEED_ECANCELED:    return "the request was pending when its handle closed";
    case FEED_EBUSY:        return "shed under load (deadline or cold-work budget): try again";
    default:                return "unknown error code";
    }
}

/* Each script's source and file name. */
static const struct { const char *source, *name; } scripts[FEED_SCRIPT_COUNT] = {
    [FEED_SCRIPT_PAGE]       = { feed_lua_page, "page.lua" },
    [FEED_SCRIPT_REBUILD]    = { feed_lua_rebuild, "rebuild.lua" },
    [FEED_SCRIPT_INSERT]     = { feed_lua_insert, "insert.lua" },
    [FEED_SCRIPT_DELETE]     = { feed_lua_delete, "delete.lua" },
    [FEED_SCRIPT_NEWER]      = { feed_lua_newer, "newer.lua" },
    [FEED_SCRIPT_INVALIDATE] = { feed_lua_invalidate, "invalidate.lua" },
    [FEED_SCRIPT_LEASE]      = { feed_lua_lease, "lease.lua" },
};

const char *feed__script_source(enum feed_script s)
{
    return (unsigned)s < FEED_SCRIPT_COUNT ? scripts[s].source : NULL;
}

const char *feed__script_name(enum feed_script s)
{
    return (unsigned)s < FEED_SCRIPT_COUNT ? scripts[s].name : "?";
}

/* The TLS fields: all of them only with redis_tls = 1, and that only in a
 * build that has TLS (lib/io/tls.c). Silently plaintext would be worse than a
 * refusal: a CA file given means the user expects it to be used. */
static const char *tls_check(const feed_config *c)
{
    int other = c->redis_tls_ca_file || c->redis_tls_ca_dir || c->redis_tls_cert_file ||
                c->redis_tls_key_file || c->redis_tls_server_name || c->redis_tls_verify != 1;

    if (!c->redis_tls && !other)
        return NULL;
#if !FEED_HAVE_TLS
    return "redis_tls and redis_tls_* need a build with TLS (hiredis >= 1.0 with "
           "hiredis_ssl: make HIREDIS=DIR); this one has none (feed_tls_supported() is 0)";
#else
    if (!c->redis_tls)
        return "redis_tls_* fields need redis_tls = 1 (else Redis is plaintext)";
    if (!c->redis_tls_cert_file != !c->redis_tls_key_file)
        return "redis_tls_cert_file and redis_tls_key_file go together: set both or neither";
    return NULL;
#endif
}

/* Each field's own limits come from the table (settings.c), the ones that
 * tie fields together from here. */
const char *feed__config_check(const feed_config *c, char *why, size_t len)
{
    const char *bad;

    if ((bad = feed__config_fields_check(c, why, len)) != NULL)
        return bad;
    if (c->redis_user && !c->redis_password)
        return "redis_user needs redis_password";
    if (c->redis_cluster && c->redis_sentinels)
        return "redis_cluster and redis_sentinels are exclusive: set one";
    if (c->redis_sentinels && (!c->redis_master_name || !*c->redis_master_name))
        return "redis_sentinels needs redis_master_name";
    if (c->redis_wait_replicas > 0 &&
        (c->redis_wait_timeout_ms == 0 || c->redis_wait_timeout_ms >= c->redis_timeout_ms))
        return "redis_wait_timeout_ms must be 1 .. redis_timeout_ms - 1";
    if (c->author_table && (!c->author_column || !*c->author_column))
        return "author_table needs author_column (author_table NULL: no read-time merge)";
    return tls_check(c);
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

/* The key bases of the two families and the author index's suffix: what
 * the keys say of the rows a copy holds (base.h, feed__key_base). The
 * author index also depends on the column it was learnt from. */
static int core_key_bases(feed_core *c)
{
    const feed_config *g = &c->cfg;
    const char *rows[] = { "feed", g->table, g->owner_column, g->score_column, g->id_column };
    const char *author[] = { "author", g->author_table, g->author_column, g->score_column,
                             g->id_column };
    const char *index[] = { "authors", g->item_author_column };

    c->key_base[FEED_FAM_FEED] = feed__key_base(g->key_prefix, rows, 5);
    c->key_base[FEED_FAM_AUTHOR] = feed__key_base(g->key_prefix, author, 5);
    if (!c->key_base[FEED_FAM_FEED] || !c->key_base[FEED_FAM_AUTHOR])
        return FEED_ENOMEM;
    strcpy(c->index_suffix, ":authors:");
    feed__key_tag(index, 2, c->index_suffix + strlen(c->index_suffix));
    c->key_cap = feed__key_cap(c->key_base[FEED_FAM_FEED]);
    c->key_gen_at = feed__key_gen_at(c->key_base[FEED_FAM_FEED]);
    return FEED_OK;
}

/* A key of ours is "<prefix>:3:<tag>:<gen>:..." with a family's tag: the
 * bytes before the generation are a base's, and a ':' ends it. Nothing
 * else a command carries starts so (numbers, tokens, SHAs, a SCAN pattern
 * has a '*' where the generation goes). The request built the key in its
 * own buffer, so writing into it is the request's memory, not Redis's. */
void feed__keys_stamp(const feed_core *c, const char *gen, int argc, const char **argv,
                      const size_t *lens)
{
    size_t at = c->key_gen_at;

    for (int j = 0; j < argc; j++) {
        if (lens[j] <= at + FEED_KEY_GEN_LEN || argv[j][at + FEED_KEY_GEN_LEN] != ':' ||
            (memcmp(argv[j], c->key_base[FEED_FAM_FEED], at) != 0 &&
             memcmp(argv[j], c->key_base[FEED_FAM_AUTHOR], at) != 0))
            continue;
        memcpy((char *)(uintptr_t)argv[j] + at, gen, FEED_KEY_GEN_LEN);
    }
}

/* Copy the config's strings, so the caller's may go; the config was
 * checked. */
int feed__core_init(feed_core *c, const feed_config *cfg)
{
    size_t k = 0;

    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    for (size_t i = 0; i < feed_config_field_count(); i++) {
        const char **field = feed__config_string(&c->cfg, i);
        if (!field || !*field)
            continue;
        if (k == sizeof c->owned / sizeof c->owned[0] || !(c->owned[k] = strdup(*field)))
            return FEED_ENOMEM;
        *field = c->owned[k++];
    }
    if (core_key_bases(c) != FEED_OK)
        return FEED_ENOMEM;
    c->filter_kept_pm = 1000;
    c->token_seed = feed__random_seed(c);
    feed__i64_to_str((int64_t)c->cfg.ttl_seconds * 1000, c->ttl_ms);
    feed__i64_to_str((int64_t)empty_ttl_seconds(&c->cfg) * 1000, c->empty_ttl_ms);
    feed__i64_to_str((int64_t)c->cfg.lease_ms, c->lease_ms);
    feed__i64_to_str(feed__grant_ms(&c->cfg), c->grant_ms);
    c->topo.cluster = c->cfg.redis_cluster != NULL;
    for (int fam = 0; fam < FEED_FAM_COUNT; fam++)
        c->topo.store[fam] = feed__store_of(&c->cfg, c->key_base[fam]);
    return FEED_OK;
}

void feed__core_free(feed_core *c)
{
    for (int fam = 0; fam < FEED_FAM_COUNT; fam++)
        free(c->key_base[fam]);
    free(c->merge);
    for (size_t i = 0; i < c->topo.nnodes; i++)
        free(c->topo.nodes[i]);
    free(c->topo.nodes);
    free(c->topo.seeds);
    free(c->topo.owner);
    free(c->topo.slot_epoch);
    free(c->topo.slot_tag);
    for (size_t i = 0; i < sizeof c->owned / sizeof c->owned[0]; i++)
        free(c->owned[i]);
    memset(c, 0, sizeof *c);
}

/* redis_failed: Redis could not answer either (redis_msg: why). Degraded
 * but answered: keep why Redis was not used. PostgreSQL failed too: the
 * feed is unavailable, with both reasons. Any other rc is returned as is. */
int feed__db_outcome(feed_core *c, char *err, int rc, int redis_failed, const char *redis_msg)
{
    char pg_msg[FEED_ERRMSG];

    if (!redis_failed)
        return rc;
    if (rc == FEED_OK) {
        c->stats.redis_failed_pages++;
        feed__msg_keep(err, redis_msg);
    } else if (rc == FEED_EPG) {
        feed__msg_keep(pg_msg, err);
        rc = feed__msg(err, FEED_EUNAVAILABLE, "%s; %s", redis_msg, pg_msg);
    }
    return rc;
}

void feed__rows_free(feed_rows *rows)
{
    free(rows->items);
    rows->items = NULL;
    rows->count = 0;
}

void feed_result_free(feed_result *r)
{
    if (!r)
        return;
    free(r->items);
    memset(r, 0, sizeof *r);
}

int64_t feed__grant_ms(const feed_config *cfg)
{
    /* A rebuild is granted, read, then installed within its request's
     * deadline; twice that, past the lease, leaves room for a clock step. */
    return (int64_t)cfg->lease_ms + 2 * (int64_t)cfg->request_timeout_ms;
}

const char *feed_version(void)
{
#define FEED_VERSION_TEXT_(a, b, c) #a "." #b "." #c
#define FEED_VERSION_TEXT(a, b, c) FEED_VERSION_TEXT_(a, b, c)
    return FEED_VERSION_TEXT(FEED_VERSION_MAJOR, FEED_VERSION_MINOR, FEED_VERSION_PATCH);
#undef FEED_VERSION_TEXT
#undef FEED_VERSION_TEXT_
}

void feed__log(const feed_core *c, feed_log_level level, const char *fmt, ...)
{
    char msg[FEED_ERRMSG];
    va_list ap;

    if (!c->cfg.log_fn)
        return;
    va_start(ap, fmt);
    feed__vmsg(msg, 0, fmt, ap);
    va_end(ap);
    c->cfg.log_fn(c->cfg.log_arg, level, msg);
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
    FEED_STAT(redis_failed_pages), FEED_STAT(rows_left_out),
    FEED_STAT(installs_refused), FEED_STAT(shed), FEED_STAT(deadlines_missed),
    FEED_STAT(lease_waits_served), FEED_STAT(fence_sweeps), FEED_STAT(lease_waits_joined),
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
