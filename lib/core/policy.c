/* policy.c -- what a caller does with an outcome, decided once for every
 * application: the name of a page's source, and when a handle tries a lost
 * store again (the retry rule: feed__retry_due refuses a connect before it,
 * feed__retry_left reads it ahead of time so that a server can tell its
 * clients when to ask again). */
#include "core/core.h"

const char *feed_source_name(feed_source s)
{
    switch (s) {
    case FEED_SOURCE_CACHE:   return "cache";
    case FEED_SOURCE_REBUILD: return "rebuild";
    case FEED_SOURCE_DB:      return "db";
    default:                  return "unknown";
    }
}

uint32_t feed__retry_left(const feed_core *c, int64_t attempt_ms, int64_t now)
{
    int64_t left = attempt_ms + (int64_t)c->cfg.retry_ms - now;

    /* attempt_ms 0: never tried, or to be tried at once. The clock counts
     * from boot, so "since 0" would hold a new handle off whenever retry_ms
     * exceeds the machine's uptime. */
    if (attempt_ms == 0 || left <= 0)
        return 0;
    return left > (int64_t)c->cfg.retry_ms ? c->cfg.retry_ms : (uint32_t)left;
}

int feed__retry_due(const feed_core *c, int64_t last_attempt_ms, int64_t now,
                    const char *store, const char *why, int refused_rc, char *err)
{
    uint32_t left = feed__retry_left(c, last_attempt_ms, now);

    if (left == 0)
        return FEED_OK;
    if (refused_rc && why[0])
        return feed__msg(err, refused_rc, "%.440s (refused at the last attempt; %s is tried"
                         " again in %u ms)", why, store, (unsigned)left);
    return feed__msg(err, FEED_EUNAVAILABLE, "%s not tried again yet: the last attempt, %u ms"
                     " ago, failed%s%.400s%s; the next in %u ms", store,
                     (unsigned)(c->cfg.retry_ms - left), why[0] ? " (" : "", why,
                     why[0] ? ")" : "", (unsigned)left);
}

uint32_t feed__redis_retry_left(const feed_core *c, int64_t now)
{
    uint32_t most = 0;

    for (size_t i = 0; i < c->topo.nnodes; i++) {
        const feed_node *n = c->topo.nodes[i];
        uint32_t left = n->state == FEED_NODE_DOWN ? feed__retry_left(c, n->attempt_ms, now) : 0;
        if (left > most)
            most = left;
    }
    return most;
}

void feed__store_failed(const feed_core *c, int *failing, const char *why)
{
    if (*failing)
        return;
    *failing = 1;
    feed__log(c, FEED_LOG_ERROR, "%s", why);
}

void feed__store_back(const feed_core *c, int *failing, const char *store)
{
    if (!*failing)
        return;
    *failing = 0;
    feed__log(c, FEED_LOG_INFO, "%s answers again", store);
}

int64_t feed__attempt_at(feed_core *c, int64_t now)
{
    uint64_t x = c->token_seed + 0x9e3779b97f4a7c15ULL * ++c->jitter_seq;
    int64_t spread = (int64_t)c->cfg.retry_ms / 5;

    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    x ^= x >> 31;
    if (spread == 0)
        return now;
    /* now, moved back by up to a fifth of retry_ms (never later: the next
     * attempt is due within retry_ms, as documented); never 0, which means
     * "never tried" (feed__retry_left) */
    now -= (int64_t)(x % (uint64_t)(spread + 1));
    return now > 0 ? now : 1;
}

int feed__shed(feed_op *op, int64_t now, const char *what)
{
    feed_core *c = op->c;

    if (!op->deadline || now < op->deadline)
        return 0;
    if (!op->shed) {
        op->shed = 1;
        c->stats.shed++;
        c->stats.deadlines_missed++;
    }
    c->shed_ms = now;
    feed__msg(op->err, FEED_EBUSY, "shed: the call reached its deadline (request_timeout_ms"
              " %u) before it could ask %s", c->cfg.request_timeout_ms, what);
    return 1;
}
