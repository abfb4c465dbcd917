/* t_health.c -- feed_health: each store's state, with a wrong Redis port and
 * a stopped PostgreSQL, within the retry rule (no connect storm from a health
 * check polled in a loop), and recovery; and feed_retry_after_ms, the time
 * until a lost store is tried again. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"

#define RETRY_MS 300
#define POLLS    100

static void healthy(void)
{
    feed *f = tu_open(NULL);
    feed_health_info h;

    memset(&h, 0x55, sizeof h);
    is_int(feed_health(f, &h), FEED_OK, "both stores up: FEED_OK");
    ok(h.redis_up == 1 && h.pg_up == 1, "  redis_up and pg_up are 1");
    ok(h.redis_msg[0] == '\0' && h.pg_msg[0] == '\0' && feed_errmsg(f)[0] == '\0',
       "  no messages");
    is_int(feed_health(NULL, &h), FEED_EINVAL, "NULL handle: FEED_EINVAL");
    is_int(feed_health(f, NULL), FEED_EINVAL, "NULL info: FEED_EINVAL");
    is_int((int)feed_retry_after_ms(f), 0, "both up: feed_retry_after_ms is 0");
    is_int((int)feed_retry_after_ms(NULL), 0, "  and 0 for a NULL handle");
    feed_close(f);
}

/* Right after a failed connect attempt: the wait is under way, within
 * retry_ms. */
static void retry_after_is_pending(feed *f, const char *when)
{
    uint32_t ms = feed_retry_after_ms(f);

    ok(ms > 0 && ms <= RETRY_MS, "%s: feed_retry_after_ms is %u ms, in 1..retry_ms (%d)", when,
       ms, RETRY_MS);
}

/* Poll POLLS times, 10 ms apart (several retry_ms in all): connect attempts
 * stay within one per retry_ms. */
static unsigned long long polls(feed *f, int want, int *same, double *elapsed)
{
    feed_stats before, after;
    feed_health_info h;
    double t0 = fault_now_ms();

    feed_stats_get(f, &before);
    *same = 1;
    for (int i = 0; i < POLLS; i++) {
        *same &= feed_health(f, &h) == want;
        fault_sleep_ms(10);
    }
    *elapsed = fault_now_ms() - t0;
    feed_stats_get(f, &after);
    return (after.redis_connects - before.redis_connects) +
           (after.pg_connects - before.pg_connects);
}

static void wrong_redis_port(void)
{
    feed_config cfg;
    feed *f;
    feed_health_info h;
    unsigned long long connects;
    double elapsed;
    int same;

    tu_config(&cfg);
    cfg.redis_port = 1;              /* nothing listens there */
    cfg.retry_ms = RETRY_MS;
    is_int(feed_open(&f, &cfg), FEED_OK, "feed_open with a wrong Redis port still succeeds");
    is_int(feed_health(f, &h), FEED_EREDIS, "feed_health: FEED_EREDIS");
    ok(h.redis_up == 0 && h.pg_up == 1, "  Redis down, PostgreSQL up");
    retry_after_is_pending(f, "Redis down");
    ok(strstr(h.redis_msg, "Redis") != NULL && h.pg_msg[0] == '\0',
       "  the Redis message says why: %s", h.redis_msg);
    connects = polls(f, FEED_EREDIS, &same, &elapsed);
    ok(same, "  %d polls in a row all say FEED_EREDIS", POLLS);
    ok(connects <= 1 + (unsigned long long)(elapsed / RETRY_MS) + 1,
       "  with %llu connect attempts in %.0f ms (retry_ms %d): no storm", connects, elapsed,
       RETRY_MS);
    fault_sleep_ms(RETRY_MS + 50);
    is_int((int)feed_retry_after_ms(f), 0, "  retry_ms later feed_retry_after_ms is 0: the "
           "next call tries");
    feed_health(f, &h);
    ok(strstr(h.redis_msg, "127.0.0.1:1") != NULL,
       "  once retry_ms has passed it tries again, and names the address: %s", h.redis_msg);
    retry_after_is_pending(f, "  after that attempt");
    feed_close(f);
}

static void stopped_pg(void)
{
    feed_config cfg;
    feed *f;
    feed_health_info h;
    unsigned long long connects;
    double elapsed, t0;
    int same, rc = FEED_EPG;

    tu_config(&cfg);
    cfg.retry_ms = RETRY_MS;
    f = tu_open(&cfg);
    is_int(feed_health(f, &h), FEED_OK, "before the fault: FEED_OK");

    fault_inject("pg-stop");
    is_int(feed_health(f, &h), FEED_EPG, "PostgreSQL stopped: FEED_EPG");
    ok(h.redis_up == 1 && h.pg_up == 0, "  Redis up, PostgreSQL down");
    ok(strstr(h.pg_msg, "PostgreSQL") != NULL && h.redis_msg[0] == '\0',
       "  the PostgreSQL message says why: %s", h.pg_msg);
    ok(strstr(feed_errmsg(f), "PostgreSQL") != NULL, "  and so does feed_errmsg");
    retry_after_is_pending(f, "PostgreSQL down");
    connects = polls(f, FEED_EPG, &same, &elapsed);
    ok(same, "  %d polls in a row all say FEED_EPG", POLLS);
    ok(connects <= 1 + (unsigned long long)(elapsed / RETRY_MS) + 1,
       "  with %llu connect attempts in %.0f ms (retry_ms %d): no storm", connects, elapsed,
       RETRY_MS);

    /* Both down: a second handle on a wrong Redis port. */
    {
        feed_config bad = cfg;
        feed *g = NULL;
        bad.redis_port = 1;
        is_int(feed_open(&g, &bad), FEED_EUNAVAILABLE, "both down: feed_open is FEED_EUNAVAILABLE");
        is_int(feed_health(f, &h), FEED_EPG, "  (the first handle still reaches Redis)");
    }

    fault_inject("pg-start");
    t0 = fault_now_ms();
    while (rc != FEED_OK && fault_now_ms() - t0 < 10000) {
        fault_sleep_ms(50);
        rc = feed_health(f, &h);
    }
    is_int(rc, FEED_OK, "PostgreSQL back: FEED_OK again, by itself");
    ok(h.redis_up == 1 && h.pg_up == 1 && h.pg_msg[0] == '\0', "  both up, no message");
    is_int((int)feed_retry_after_ms(f), 0, "  feed_retry_after_ms is 0 again");
    feed_close(f);
}

static void both_down(void)
{
    feed_config cfg;
    feed *f;
    feed_health_info h;

    /* A handle opened while both were up, then Redis on a port that goes
     * away: simplest is a handle whose Redis never answered, on a stopped
     * PostgreSQL opened while it ran. */
    tu_config(&cfg);
    cfg.redis_port = 1;
    cfg.retry_ms = RETRY_MS;
    f = tu_open(&cfg);                 /* PostgreSQL up: open succeeds */
    fault_inject("pg-stop");
    is_int(feed_health(f, &h), FEED_EUNAVAILABLE, "both stores down: FEED_EUNAVAILABLE");
    ok(h.redis_up == 0 && h.pg_up == 0 && h.redis_msg[0] && h.pg_msg[0],
       "  both flags 0, both messages set");
    ok(strstr(feed_errmsg(f), "Redis") && strstr(feed_errmsg(f), "PostgreSQL"),
       "  feed_errmsg holds both: %s", feed_errmsg(f));
    fault_inject("pg-start");
    feed_close(f);
}

int main(void)
{
    PGconn *pg;

    tu_plain_redis_only("t_health");
    fault_setup();
    pg = tu_begin(NULL);
    healthy();
    wrong_redis_port();
    stopped_pg();
    both_down();
    PQfinish(pg);
    return tap_done();
}
