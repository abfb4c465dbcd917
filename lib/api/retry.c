/* retry.c -- feed_retry_after_ms and its async twin: how long until a
 * handle tries again a store it lost, read off its connections (the retry
 * rule itself is core/'s: feed__retry_left). */
#include "drive/drive.h"
#include "drive/async.h"

/* The longest wait over the Redis nodes and the PostgreSQL connections
 * that are down. */
static uint32_t retry_after(const feed_core *c, const feed_pg *pg)
{
    int64_t now = feed__now_ms();
    uint32_t most = feed__redis_retry_left(c, now);

    for (size_t i = 0; i < sizeof pg->side / sizeof pg->side[0]; i++) {
        uint32_t left = pg->side[i].conn ? 0 : feed__retry_left(c, pg->side[i].attempt_ms, now);
        if (left > most)
            most = left;
    }
    return most;
}

uint32_t feed_retry_after_ms(const feed *f)
{
    return f ? retry_after(&f->core, &f->pg) : 0;
}

uint32_t feed_async_retry_after_ms(const feed_async *a)
{
    return a ? retry_after(&a->core, &a->pg) : 0;
}
