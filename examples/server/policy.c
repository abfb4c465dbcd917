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

    if (rc != FEED_OK && feed_error_kind(NULL, rc) != FEED_KIND_RETRY) {
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
