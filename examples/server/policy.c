/* policy.c -- what the example decides around the library (policy.h says
 * what each could become in lib/). Nothing here knows about HTTP transports
 * or the routes. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "server.h"

feed *policy_handle(feed **slot, int64_t *attempt_us)
{
    int64_t t = now_us();
    int rc;

    if (*slot)
        return *slot;
    if (*attempt_us && t - *attempt_us < (int64_t)opt.cfg.retry_ms * 1000)
        return NULL;
    *attempt_us = t;
    rc = feed_open(slot, &opt.cfg);
    if (rc != FEED_OK)
        fprintf(stderr, "%s: feed_open: %s: %s\n", progname, feed_strerror(rc), feed_errmsg(NULL));
    return *slot;
}

int policy_probe(const feed_config *cfg, const char *prog)
{
    feed_health_info h;
    feed *probe;
    int rc = feed_open(&probe, cfg);

    if (rc == FEED_EINVAL || rc == FEED_EREDIS || rc == FEED_EPG || rc == FEED_ENOMEM) {
        fprintf(stderr, "%s: %s: %s\n", prog, feed_strerror(rc), feed_errmsg(NULL));
        return 1;
    }
    if (rc != FEED_OK) {
        fprintf(stderr, "%s: warning: no store answers (%s); serving 503 until one does\n",
                prog, feed_errmsg(NULL));
        return 0;
    }
    if (feed_health(probe, &h) != FEED_OK) {
        if (!h.redis_up)
            fprintf(stderr, "%s: warning: Redis is down, pages come from PostgreSQL until "
                    "it answers: %s\n", prog, h.redis_msg);
        if (!h.pg_up)
            fprintf(stderr, "%s: warning: PostgreSQL is down, only cached pages can be "
                    "served until it answers: %s\n", prog, h.pg_msg);
    }
    feed_close(probe);
    return 0;
}

unsigned policy_status(int rc)
{
    switch (rc) {
    case FEED_EINVAL:
    case FEED_ERANGE:       return 400;
    case FEED_EUNAVAILABLE:
    case FEED_EPG:          return 503;   /* the page needed SQL, and SQL was down */
    default:                return 500;
    }
}

size_t policy_drop(feed *f, const int64_t *uids, size_t n)
{
    size_t done = 0;

    while (f && done < n && feed_invalidate(f, uids[done]) == FEED_OK)
        done++;
    return done;
}

size_t policy_drop_authors(feed *f, const int64_t *authors, size_t n)
{
    size_t done = 0;

    while (f && done < n && feed_author_invalidate(f, authors[done]) == FEED_OK)
        done++;
    return done;
}

/* ---- feed_config from flags ---- */

enum kind { STR, STR_OR_NULL, U32, PORT };

static const struct cfg_flag {
    const char *name;
    enum kind   kind;
    size_t      off;
    uint32_t    min, max;
} cfg_flags[] = {
    { "redis-host",     STR,         offsetof(feed_config, redis_host), 0, 0 },
    { "redis-port",     PORT,        offsetof(feed_config, redis_port), 1, 65535 },
    { "redis-user",     STR,         offsetof(feed_config, redis_user), 0, 0 },
    { "redis-password", STR_OR_NULL, offsetof(feed_config, redis_password), 0, 0 },
    { "pg",             STR,         offsetof(feed_config, pg_conninfo), 0, 0 },
    { "table",          STR,         offsetof(feed_config, table), 0, 0 },
    { "max-len",        U32,         offsetof(feed_config, max_len), 1, 10000000 },
    { "max-page",       U32,         offsetof(feed_config, max_page), 1, 100000 },
    { "ttl",            U32,         offsetof(feed_config, ttl_seconds), 0, UINT32_MAX / 1000 },
    { "redis-timeout",  U32,         offsetof(feed_config, redis_timeout_ms), 1, 3600000 },
    { "pg-timeout",     U32,         offsetof(feed_config, pg_timeout_ms), 1, 3600000 },
    { "author-table",   STR_OR_NULL, offsetof(feed_config, author_table), 0, 0 },
    { "author-column",  STR,         offsetof(feed_config, author_column), 0, 0 },
};

const char policy_config_usage[] =
"  --redis-host H      (default $FEED_REDIS_HOST or 127.0.0.1)\n"
"  --redis-port N      (default $FEED_REDIS_PORT or 6379)\n"
"  --redis-user U      Redis ACL user (default none)\n"
"  --redis-password P  (default $FEED_REDIS_PASSWORD or none; prefer the variable)\n"
"  --pg CONNINFO       libpq connection string (default $FEED_PG_CONNINFO, else libpq's PG* defaults)\n"
"  --table T           the feed table (default feed_entry; columns uid, score, id)\n"
"  --max-len N         most entries cached per feed (default 1000)\n"
"  --max-page N        largest limit accepted (default 100)\n"
"  --ttl SECONDS       cache TTL, 0 = none (default 604800)\n"
"  --redis-timeout MS  longest wait on Redis before a page comes from PostgreSQL\n"
"                      (redis_timeout_ms, default 250)\n"
"  --pg-timeout MS     longest wait on PostgreSQL (pg_timeout_ms, default 2000)\n"
"  --author-table T    the table of the authors' own posts (sql/authors.sql: author_post),\n"
"                      for timelines (default $FEED_AUTHOR_TABLE, else none: no timelines)\n"
"  --author-column C   its author column (default author)\n";

int policy_config_set(feed_config *cfg, const char *name, const char *value,
                      char *err, size_t errlen)
{
    const struct cfg_flag *fl = NULL;
    char *field;
    uint64_t v;

    for (size_t i = 0; i < sizeof cfg_flags / sizeof cfg_flags[0]; i++)
        if (strcmp(cfg_flags[i].name, name) == 0)
            fl = &cfg_flags[i];
    if (!fl)
        return 1;
    field = (char *)cfg + fl->off;
    switch (fl->kind) {
    case STR:
    case STR_OR_NULL:
        *(const char **)field = fl->kind == STR_OR_NULL && !*value ? NULL : value;
        return 0;
    case U32:
    case PORT:
        if (parse_u64(value, fl->max, &v) != 0 || v < fl->min) {
            snprintf(err, errlen, "must be an integer in %u..%u", fl->min, fl->max);
            return -1;
        }
        if (fl->kind == PORT)
            *(int *)field = (int)v;
        else
            *(uint32_t *)field = (uint32_t)v;
        return 0;
    }
    return 1;
}
