/* sentinel.c -- which Redis is the primary: ask the Sentinels.
 *
 * With redis_sentinels set, every connect first asks the Sentinels in the
 * configured order, one short connection each (redis_timeout_ms), for
 * SENTINEL get-master-addr-by-name <redis_master_name>; the first usable
 * answer names the primary. After connecting, ROLE must say "master": during
 * a failover a Sentinel may still name the old primary, already demoted (or
 * about to be), and writing there would be lost. A -READONLY reply later
 * means the same (redis.c drops the connection and asks again at once).
 *
 * Not covered: Sentinels that require AUTH (sentinel's own requirepass), and
 * TLS. The data nodes' redis_user/redis_password apply as without Sentinels.
 */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* Entry i of "host:port[,host:port...]": host copied into host[cap], port
 * parsed. Returns 1 when entry i exists and is well formed, 0 past the end
 * or on a malformed entry (*bad set then). */
static int entry_at(const char *list, size_t i, char *host, size_t cap, int *port, int *bad)
{
    const char *p = list, *end, *colon;
    char *stop;
    long v;

    *bad = 0;
    for (size_t k = 0; k < i; k++) {
        if (!(p = strchr(p, ',')))
            return 0;
        p++;
    }
    end = strchr(p, ',');
    if (!end)
        end = p + strlen(p);
    /* The last colon: a bare IPv6 address would need brackets, not handled. */
    for (colon = end; colon > p && colon[-1] != ':'; colon--)
        ;
    if (colon == p || colon - 1 == p || (size_t)(colon - 1 - p) >= cap || colon == end) {
        *bad = 1;
        return 0;
    }
    v = strtol(colon, &stop, 10);
    if (stop != end || v < 1 || v > 65535 || *colon == '+' || *colon == '-' || *colon == ' ') {
        *bad = 1;
        return 0;
    }
    memcpy(host, p, (size_t)(colon - 1 - p));
    host[colon - 1 - p] = '\0';
    *port = (int)v;
    return 1;
}

int feed__sentinels_valid(const char *list)
{
    char host[256];
    int port, bad;
    size_t n = 0;

    if (!list || !*list)
        return 0;
    while (entry_at(list, n, host, sizeof host, &port, &bad))
        n++;
    return !bad && n > 0;
}

/* One Sentinel's answer: a two-element array of host and port. */
static int take_addr(feed *f, const redisReply *r)
{
    char num[8];
    char *stop;
    long v;

    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_STRING || r->element[1]->type != REDIS_REPLY_STRING ||
        r->element[0]->len == 0 || r->element[0]->len >= sizeof f->primary_host ||
        r->element[1]->len == 0 || r->element[1]->len >= sizeof num)
        return 0;
    memcpy(num, r->element[1]->str, r->element[1]->len);
    num[r->element[1]->len] = '\0';
    v = strtol(num, &stop, 10);
    if (*stop || v < 1 || v > 65535)
        return 0;
    memcpy(f->primary_host, r->element[0]->str, r->element[0]->len);
    f->primary_host[r->element[0]->len] = '\0';
    f->primary_port = (int)v;
    return 1;
}

static int ask_one(feed *f, const char *host, int port, struct timeval tv, char *why, size_t cap)
{
    const char *argv[3] = { "SENTINEL", "get-master-addr-by-name", f->cfg.redis_master_name };
    redisContext *c = redisConnectWithTimeout(host, port, tv);
    redisReply *r = NULL;
    int ok = 0;

    if (!c) {
        snprintf(why, cap, "%.255s:%d: out of memory", host, port);
        return 0;
    }
    if (!c->err && redisSetTimeout(c, tv) == REDIS_OK)
        r = redisCommandArgv(c, 3, argv, NULL);
    f->stats.redis_calls++;
    if (!r)
        snprintf(why, cap, "%.255s:%d: %.200s", host, port, c->err ? c->errstr : "no answer");
    else if (!(ok = take_addr(f, r)))
        snprintf(why, cap, "%.255s:%d: %.200s", host, port,
                 r->type == REDIS_REPLY_ERROR ? r->str
                 : r->type == REDIS_REPLY_NIL ? "does not know the master name" : "unexpected reply");
    freeReplyObject(r);
    redisFree(c);
    return ok;
}

int feed__sentinel_primary(feed *f)
{
    struct timeval tv;
    char host[256], why[512] = "";
    int port, bad;

    tv.tv_sec = f->cfg.redis_timeout_ms / 1000;
    tv.tv_usec = (f->cfg.redis_timeout_ms % 1000) * 1000;
    for (size_t i = 0; entry_at(f->cfg.redis_sentinels, i, host, sizeof host, &port, &bad); i++)
        if (ask_one(f, host, port, tv, why, sizeof why))
            return FEED_OK;
    f->stats.redis_errors++;
    return feed__error(f, FEED_EUNAVAILABLE, "no Sentinel named the primary \"%s\" (last: %s)",
                       f->cfg.redis_master_name, why);
}

int feed__is_readonly(const redisReply *r)
{
    /* Plain commands answer "READONLY ..."; Redis 7 passes a script's
     * failed redis.call back with the same code first. */
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0;
}

int feed__sentinel_check_role(feed *f)
{
    redisReply *r = redisCommand(f->redis, "ROLE");
    int rc = FEED_OK;

    f->stats.redis_calls++;
    if (!r) {
        f->stats.redis_errors++;
        return feed__error(f, FEED_EUNAVAILABLE, "Redis ROLE at %s:%d: %s", f->primary_host,
                           f->primary_port, f->redis->errstr);
    }
    if (r->type != REDIS_REPLY_ARRAY || r->elements < 1 ||
        r->element[0]->type != REDIS_REPLY_STRING || strcmp(r->element[0]->str, "master") != 0) {
        f->stats.failovers++;
        rc = feed__error(f, FEED_EUNAVAILABLE,
                         "Redis at %s:%d is not the primary (ROLE %s): a failover is under way",
                         f->primary_host, f->primary_port,
                         r->type == REDIS_REPLY_ARRAY && r->elements > 0 &&
                         r->element[0]->type == REDIS_REPLY_STRING ? r->element[0]->str : "?");
    }
    freeReplyObject(r);
    return rc;
}
