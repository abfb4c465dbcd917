/* retry.c -- what a handle's connections say about a failure: when it
 * tries a lost store again (feed_retry_after_ms; the retry rule itself is
 * core/'s: feed__retry_left), and whether a store's failure was "down" or
 * "refused" (feed_error_kind). Both read the connections as the last call
 * left them, and both have an async twin. */
#include "drive/drive.h"
#include "drive/async.h"

/* The longest wait over the Redis nodes and the PostgreSQL connections
 * that are down. */
/* After a call was shed (FEED_EBUSY), how long a client should wait: a
 * tenth of the deadline, so that the load comes back spread out. */
static uint32_t shed_wait(const feed_core *c, int64_t now)
{
    uint32_t wait = c->cfg.request_timeout_ms / 10;

    return c->shed_ms && now - c->shed_ms < (int64_t)c->cfg.request_timeout_ms ? wait : 0;
}

static uint32_t retry_after(const feed_core *c, const feed_pg *pg)
{
    int64_t now = feed__now_ms();
    uint32_t most = feed__redis_retry_left(c, now), shed = shed_wait(c, now);

    for (size_t i = 0; i < sizeof pg->side / sizeof pg->side[0]; i++) {
        uint32_t left = pg->side[i].conn ? 0
                      : feed__retry_left(c, pg->side[i].server.attempt_ms, now);
        if (left > most)
            most = left;
    }
    return shed > most ? shed : most;
}

uint32_t feed_retry_after_ms(const feed *f)
{
    return f ? retry_after(&f->core, &f->pg) : 0;
}

uint32_t feed_async_retry_after_ms(const feed_async *a)
{
    return a ? retry_after(&a->core, &a->pg) : 0;
}

/* 1 when some Redis node of c has no connection (or none is known yet). A
 * request that met an error reply keeps its connection; one that met no
 * answer (refused connect, reset, timeout) has dropped it. */
static int redis_down(const feed_core *c)
{
    if (c->topo.nnodes == 0)
        return 1;
    for (size_t i = 0; i < c->topo.nnodes; i++)
        if (c->topo.nodes[i]->state == FEED_NODE_DOWN)
            return 1;
    return 0;
}

/* 1 when some Redis node of c went down because it refused (AUTH, an ACL
 * on the set-up's commands). */
static int redis_refused(const feed_core *c)
{
    for (size_t i = 0; i < c->topo.nnodes; i++)
        if (c->topo.nodes[i]->state == FEED_NODE_DOWN && c->topo.nodes[i]->refused)
            return 1;
    return 0;
}

/* The kind of rc; c and pg NULL: no handle (feed_open's codes). The codes
 * whose kind never depends on the store come first; FEED_EREDIS and
 * FEED_EPG are then "down" when that store's connection is, unless it
 * went because the store refused: a configuration error, whatever the
 * connection's state, until an attempt succeeds. */
static feed_kind error_kind(const feed_core *c, const feed_pg *pg, int rc)
{
    const feed_pgside *primary = pg ? &pg->side[FEED_PG_PRIMARY] : NULL;

    switch (rc) {
    case FEED_OK:           return FEED_KIND_OK;
    case FEED_EINVAL:
    case FEED_ERANGE:       return FEED_KIND_INPUT;
    case FEED_EUNAVAILABLE:
    case FEED_EBUSY:        return FEED_KIND_RETRY;
    case FEED_EREDIS:
        return c && redis_down(c) && !redis_refused(c) ? FEED_KIND_RETRY : FEED_KIND_CONFIG;
    case FEED_EPG:
        return primary && !primary->conn && !primary->server.refused ? FEED_KIND_RETRY
                                                                     : FEED_KIND_CONFIG;
    default:                return FEED_KIND_INTERNAL;  /* ENOMEM, ECANCELED, unknown */
    }
}

feed_kind feed_error_kind(const feed *f, int rc)
{
    return f ? error_kind(&f->core, &f->pg, rc) : error_kind(NULL, NULL, rc);
}

feed_kind feed_async_error_kind(const feed_async *a, int rc)
{
    return a ? error_kind(&a->core, &a->pg, rc) : error_kind(NULL, NULL, rc);
}
