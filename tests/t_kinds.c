/* t_kinds.c -- what an application does about a result code, and the write
 * protocol's step 3, against the real test servers, blocking and async:
 *
 *   feed_error_kind / feed_async_error_kind
 *     input     bad arguments: FEED_KIND_INPUT;
 *     config    a store that answered and refused: a Redis user that does
 *               not exist and a missing table at feed_open; at run time an
 *               ACL that takes EVALSHA from a connected user (a hook
 *               refused) and a table dropped under an open handle (a page
 *               refused): FEED_KIND_CONFIG;
 *     retry     a store that is down: nothing listening on Redis' or
 *               PostgreSQL's port at open (both: FEED_EUNAVAILABLE), under
 *               a hook (FEED_EREDIS), a page (FEED_EPG) and feed_health:
 *               FEED_KIND_RETRY. The same code (FEED_EREDIS, FEED_EPG)
 *               reads as config from one call and retry from another.
 *
 *   feed_on_unknown_write and its twins
 *     the copies named are gone from Redis and the next walks equal SQL,
 *     which changed behind the cache (a commit whose outcome the
 *     application did not know); authors' copies likewise; with the
 *     scripts refused (a plain DEL still drops); with Redis
 *     frozen every copy named, not only the first, is dropped by the first
 *     handle that reaches Redis again (the repair list); bad input.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "tap.h"
#include "testutil.h"
#include "fault.h"
#include "feedcache_libevent.h"

static PGconn *pg;
static redisContext *r;
static struct event_base *base;

/* A loopback port nothing listens on (bound, then closed). */
static int closed_port(void)
{
    struct sockaddr_in sa = { .sin_family = AF_INET };
    socklen_t len = sizeof sa;
    int s = socket(AF_INET, SOCK_STREAM, 0), port;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (s < 0 || bind(s, (struct sockaddr *)&sa, sizeof sa) != 0 ||
        getsockname(s, (struct sockaddr *)&sa, &len) != 0) {
        tap_bail("no free port");
        exit(255);
    }
    port = ntohs(sa.sin_port);
    close(s);
    return port;
}

static char pg_down[128];

static void cfg_redis_down(feed_config *cfg)
{
    tu_config(cfg);
    cfg->redis_port = closed_port();
    cfg->redis_timeout_ms = 200;
    cfg->author_table = "author_post";
}

static void cfg_pg_down(feed_config *cfg)
{
    tu_config(cfg);
    snprintf(pg_down, sizeof pg_down, "host=127.0.0.1 port=%d connect_timeout=2",
             closed_port());
    cfg->pg_conninfo = pg_down;
    cfg->author_table = "author_post";
}

static void cfg_ok(feed_config *cfg)
{
    tu_config(cfg);
    cfg->author_table = "author_post";
}

/* ---- async: one request run to its callback ---- */

typedef struct waited {
    int       called, rc;
    feed_kind kind;
    char      msg[256];
} waited;

static void done_cb(feed_async *a, int rc, void *arg)
{
    waited *w = arg;

    w->called++;
    w->rc = rc;
    w->kind = feed_async_error_kind(a, rc);   /* inside the callback, as documented */
    snprintf(w->msg, sizeof w->msg, "%s", feed_async_errmsg(a));
}

static void page_cb(feed_async *a, int rc, feed_result *page, void *arg)
{
    done_cb(a, rc, arg);
    feed_result_free(page);
}

static feed_health_info last_health;

static void health_cb(feed_async *a, int rc, const feed_health_info *h, void *arg)
{
    if (h)
        last_health = *h;
    done_cb(a, rc, arg);
}

static void wait_for(waited *w)
{
    for (int i = 0; i < 100000 && !w->called; i++)
        event_base_loop(base, EVLOOP_ONCE);
}

static feed_async *async_open(void (*set)(feed_config *))
{
    feed_config cfg;
    feed_async *a = NULL;

    set(&cfg);
    if (feed_async_open_libevent(&a, &cfg, base) != FEED_OK) {
        tap_bail("feed_async_open_libevent failed");
        exit(255);
    }
    return a;
}

/* ---- step 3 of the write protocol ---- */

static int cached(const char *key)
{
    return (int)tu_redis_int(r, "EXISTS %s", key);
}

static const char *author_key(int64_t author)
{
    return tu_author_key_of("feed", author, "");
}

/* uids[0..n) cached, then a row added to each behind the cache's back (a
 * commit no hook followed). */
static void stale_copies(feed *f, const int64_t *uids, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        feed_result res;
        tu_insert_rows(pg, uids[i], 12, tu_score_by10, tu_id_seq);
        if (feed_page(f, uids[i], FEED_FIRST, 0, 5, &res) != FEED_OK || !cached(tu_key(uids[i], ""))) {
            tap_bail("could not cache a feed");
            exit(255);
        }
        feed_result_free(&res);
        tu_insert(pg, uids[i], 100000, 900000 + (int64_t)i);
    }
}

static int all_gone(const int64_t *uids, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (cached(tu_key(uids[i], "")))
            return 0;
    return 1;
}

static int walks_equal(feed *f, const int64_t *uids, size_t n)
{
    tu_walk_info info;

    for (size_t i = 0; i < n; i++)
        if (!tu_walk_equals_sql(f, pg, uids[i], 4, &info))
            return 0;
    return 1;
}

/* ACL SETUSER t_kinds_bob with rules, a list separated by blanks. */
static void acl(const char *rules)
{
    char copy[128], *save = NULL;
    const char *argv[16] = { "ACL", "SETUSER", "t_kinds_bob" };
    int argc = 3;
    redisReply *rep;

    snprintf(copy, sizeof copy, "%s", rules);
    for (char *t = strtok_r(copy, " ", &save); t && argc < 16; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    rep = redisCommandArgv(r, argc, argv, NULL);

    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        tap_bail("ACL SETUSER failed");
        exit(255);
    }
    freeReplyObject(rep);
}

/* ---- the kinds ---- */

static void kinds_of_codes(void)
{
    is_int(feed_error_kind(NULL, FEED_OK), FEED_KIND_OK, "FEED_OK is FEED_KIND_OK");
    is_int(feed_error_kind(NULL, FEED_EINVAL), FEED_KIND_INPUT, "FEED_EINVAL is input");
    is_int(feed_error_kind(NULL, FEED_ERANGE), FEED_KIND_INPUT, "FEED_ERANGE is input");
    is_int(feed_error_kind(NULL, FEED_EUNAVAILABLE), FEED_KIND_RETRY,
           "FEED_EUNAVAILABLE is retry");
    is_int(feed_error_kind(NULL, FEED_ENOMEM), FEED_KIND_INTERNAL, "FEED_ENOMEM is internal");
    is_int(feed_error_kind(NULL, FEED_ECANCELED), FEED_KIND_INTERNAL,
           "FEED_ECANCELED is internal");
    is_int(feed_error_kind(NULL, -1000), FEED_KIND_INTERNAL, "an unknown code is internal");
    is_int(feed_async_error_kind(NULL, FEED_EREDIS), FEED_KIND_CONFIG,
           "async, no handle: FEED_EREDIS (feed_async_open's) is config");
}

static void kinds_at_open(void)
{
    feed_config cfg;
    feed *f = NULL;
    int rc;

    tu_config(&cfg);
    cfg.redis_user = "nobody_t_kinds";
    cfg.redis_password = "not-a-password";
    rc = feed_open(&f, &cfg);
    ok(rc == FEED_EREDIS && feed_error_kind(NULL, rc) == FEED_KIND_CONFIG,
       "open, a Redis user that does not exist: FEED_EREDIS, config (%s)", feed_errmsg(NULL));

    tu_config(&cfg);
    cfg.table = "no_such_table_t_kinds";
    rc = feed_open(&f, &cfg);
    ok(rc == FEED_EPG && feed_error_kind(NULL, rc) == FEED_KIND_CONFIG,
       "open, a missing table: FEED_EPG, config (%s)", feed_errmsg(NULL));

    cfg_redis_down(&cfg);
    snprintf(pg_down, sizeof pg_down, "host=127.0.0.1 port=%d connect_timeout=2",
             closed_port());
    cfg.pg_conninfo = pg_down;
    rc = feed_open(&f, &cfg);
    ok(rc == FEED_EUNAVAILABLE && feed_error_kind(NULL, rc) == FEED_KIND_RETRY,
       "open, both stores down: FEED_EUNAVAILABLE, retry (%s)", feed_errmsg(NULL));
    feed_close(f);
}

static void kinds_blocking(void)
{
    feed_config cfg;
    feed_result res;
    feed_health_info h;
    feed *f;
    int rc;

    f = tu_open_with(cfg_ok);
    rc = feed_page(f, 1, FEED_FIRST, 0, 0, &res);
    ok(rc == FEED_EINVAL && feed_error_kind(f, rc) == FEED_KIND_INPUT, "page, limit 0: input");
    rc = feed_on_insert(f, 1, FEED_SCORE_MAX + 1, 1);
    ok(rc == FEED_ERANGE && feed_error_kind(f, rc) == FEED_KIND_INPUT,
       "hook, score out of range: input");
    rc = feed_page(f, 1, FEED_FIRST, 0, 5, &res);
    ok(rc == FEED_OK && feed_error_kind(f, rc) == FEED_KIND_OK, "page: ok");
    feed_result_free(&res);
    feed_close(f);

    f = tu_open_with(cfg_redis_down);
    rc = feed_on_insert(f, 1, 10, 1);
    ok(rc == FEED_EREDIS && feed_error_kind(f, rc) == FEED_KIND_RETRY,
       "Redis down: a hook is FEED_EREDIS, retry (%s)", feed_errmsg(f));
    rc = feed_on_insert(f, 1, 10, 1);
    ok(rc == FEED_EREDIS && feed_error_kind(f, rc) == FEED_KIND_RETRY &&
       strstr(feed_errmsg(f), "not tried again yet") && strstr(feed_errmsg(f), "the next in") &&
       !strstr(feed_errmsg(f), "is down"),
       "  the next, held off until retry_ms: says the handle has not tried again yet, and when"
       " it will, never \"down\" (%s)", feed_errmsg(f));
    rc = feed_health(f, &h);
    ok(rc == FEED_EREDIS && feed_error_kind(f, rc) == FEED_KIND_RETRY,
       "Redis down: feed_health is FEED_EREDIS, retry");
    feed_close(f);

    f = tu_open_with(cfg_pg_down);
    rc = feed_page(f, 77001, FEED_FIRST, 0, 5, &res);
    ok(rc == FEED_EPG && feed_error_kind(f, rc) == FEED_KIND_RETRY,
       "PostgreSQL down: a page that needs it is FEED_EPG, retry (%s)", feed_errmsg(f));
    rc = feed_health(f, &h);
    ok(rc == FEED_EPG && feed_error_kind(f, rc) == FEED_KIND_RETRY,
       "PostgreSQL down: feed_health is FEED_EPG, retry");
    feed_close(f);

    /* Refused at run time: the store answers, the connection stays. */
    tu_config(&cfg);
    cfg.redis_user = "t_kinds_bob";
    cfg.redis_password = "bob-pw";
    f = tu_open_settled(&cfg);
    acl("-evalsha");
    rc = feed_on_insert(f, 1, 10, 1);
    ok(rc == FEED_EREDIS && feed_error_kind(f, rc) == FEED_KIND_CONFIG,
       "an ACL refusing the scripts: a hook is FEED_EREDIS, config (%s)", feed_errmsg(f));
    {
        static const int64_t uid = 85001;
        feed *good = tu_open_with(cfg_ok);
        stale_copies(good, &uid, 1);
        rc = feed_on_unknown_write(f, &uid, 1);
        ok(rc == FEED_OK && all_gone(&uid, 1),
           "  feed_on_unknown_write still drops the copy (a plain DEL)");
        ok(walks_equal(good, &uid, 1), "  the next walk equals SQL");
        feed_close(good);
    }
    acl("+evalsha");
    feed_close(f);

    tu_sql(pg, "CREATE TABLE t_kinds_gone (uid bigint, score bigint, id bigint,"
               " PRIMARY KEY (uid, id))");
    tu_config(&cfg);
    cfg.table = "t_kinds_gone";
    cfg.key_prefix = "kinds";
    f = tu_open(&cfg);
    tu_sql(pg, "DROP TABLE t_kinds_gone");
    rc = feed_page(f, 77002, FEED_FIRST, 0, 5, &res);
    ok(rc == FEED_EPG && feed_error_kind(f, rc) == FEED_KIND_CONFIG,
       "the table dropped under the handle: a page is FEED_EPG, config (%s)", feed_errmsg(f));
    feed_close(f);
}

static void kinds_async(void)
{
    waited w = { 0 };
    feed_async *a;
    int rc;

    a = async_open(cfg_ok);
    rc = feed_async_page(a, 1, FEED_FIRST, 0, 0, page_cb, &w);
    ok(rc == FEED_EINVAL && feed_async_error_kind(a, rc) == FEED_KIND_INPUT,
       "async page, limit 0: input, no callback");
    feed_async_close(a);

    a = async_open(cfg_redis_down);
    memset(&w, 0, sizeof w);
    is_int(feed_async_on_insert(a, 1, 10, 1, done_cb, &w), FEED_OK, "async hook, Redis down:");
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_EREDIS && w.kind == FEED_KIND_RETRY,
       "  FEED_EREDIS, retry (%s)", w.msg);
    memset(&w, 0, sizeof w);
    is_int(feed_async_health(a, health_cb, &w), FEED_OK, "async health, Redis down:");
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_EREDIS && w.kind == FEED_KIND_RETRY,
       "  FEED_EREDIS, retry");
    feed_async_close(a);

    a = async_open(cfg_pg_down);
    memset(&w, 0, sizeof w);
    is_int(feed_async_page(a, 77003, FEED_FIRST, 0, 5, page_cb, &w), FEED_OK,
           "async page, PostgreSQL down:");
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_EPG && w.kind == FEED_KIND_RETRY,
       "  FEED_EPG, retry (%s)", w.msg);
    feed_async_close(a);

    {
        feed_config cfg;
        a = NULL;
        tu_config(&cfg);
        cfg.redis_user = "t_kinds_bob";
        cfg.redis_password = "bob-pw";
        if (feed_async_open_libevent(&a, &cfg, base) != FEED_OK) {
            tap_bail("async open as t_kinds_bob failed");
            exit(255);
        }
    }
    memset(&w, 0, sizeof w);
    feed_async_invalidate(a, 85999, done_cb, &w);     /* connected, set up */
    wait_for(&w);
    acl("-evalsha");
    memset(&w, 0, sizeof w);
    is_int(feed_async_on_insert(a, 1, 10, 1, done_cb, &w), FEED_OK,
           "async hook, an ACL refusing the scripts:");
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_EREDIS && w.kind == FEED_KIND_CONFIG,
       "  FEED_EREDIS, config (%s)", w.msg);
    acl("+evalsha");
    feed_async_close(a);
}

/* A table the async handle cannot use: feed_async_open succeeds (it opens
 * with a store unusable, as documented), then every request says so in
 * PostgreSQL's words and reads as config, the first (which met the
 * refusal) and those held off after it, until retry_ms; health too. */
static void cfg_no_table(feed_config *cfg)
{
    tu_config(cfg);
    cfg->table = "no_such_table_t_kinds";
    cfg->retry_ms = 60000;          /* every request below is held off */
}

static void cfg_numeric(feed_config *cfg)
{
    tu_config(cfg);
    cfg->table = "t_kinds_numeric";
    cfg->retry_ms = 60000;
}

static void refused_async(void (*set)(feed_config *), const char *what, const char *words)
{
    waited w;
    feed_async *a = async_open(set);

    for (int k = 0; k < 3; k++) {
        memset(&w, 0, sizeof w);
        is_int(feed_async_page(a, 77010 + k, FEED_FIRST, 0, 5, page_cb, &w), FEED_OK,
               "async, %s: page %d accepted", what, k + 1);
        wait_for(&w);
        ok(w.called == 1 && w.rc == FEED_EPG && w.kind == FEED_KIND_CONFIG,
           "  FEED_EPG, config, %s (%s)", k ? "held off till the next attempt" : "refused",
           w.msg);
        ok(strstr(w.msg, words) != NULL && !strstr(w.msg, "down") && !strstr(w.msg, "CONTEXT"),
           "  in PostgreSQL's words (\"%s\"), not \"down\", no CONTEXT line of our"
           " statement's parameter", words);
    }
    memset(&w, 0, sizeof w);
    memset(&last_health, 0, sizeof last_health);
    is_int(feed_async_health(a, health_cb, &w), FEED_OK, "async health, %s:", what);
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_EPG && w.kind == FEED_KIND_CONFIG,
       "  FEED_EPG, config (%s)", w.msg);
    ok(!last_health.pg_up && last_health.pg_refused && last_health.redis_up &&
       strstr(last_health.pg_msg, words) != NULL,
       "  pg_up 0, pg_refused 1, pg_msg in PostgreSQL's words (%s)", last_health.pg_msg);
    feed_async_close(a);
}

static void kinds_refused(void)
{
    feed *f;
    feed_result res;
    feed_health_info h;
    int rc;

    refused_async(cfg_no_table, "a missing table", "does not exist");
    tu_sql(pg, "DROP TABLE IF EXISTS t_kinds_numeric");
    tu_sql(pg, "CREATE TABLE t_kinds_numeric (uid bigint, score numeric, id bigint,"
               " PRIMARY KEY (uid, id))");
    refused_async(cfg_numeric, "a numeric score column", "numeric");

    /* Blocking, refused after open: the table dropped, the handle's
     * connection lost, so the next connect's set-up is refused. */
    tu_sql(pg, "CREATE TABLE t_kinds_later (uid bigint, score bigint, id bigint,"
               " PRIMARY KEY (uid, id))");
    {
        feed_config cfg;
        tu_config(&cfg);
        cfg.table = "t_kinds_later";
        cfg.key_prefix = "kinds";
        cfg.retry_ms = 60000;
        f = tu_open(&cfg);
    }
    tu_sql(pg, "DROP TABLE t_kinds_later");
    tu_sql(pg, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
               " WHERE pid <> pg_backend_pid() AND datname = current_database()"
               " AND application_name = ''");
    rc = feed_page(f, 77020, FEED_FIRST, 0, 5, &res);
    ok(rc == FEED_EPG && feed_error_kind(f, rc) == FEED_KIND_CONFIG &&
       strstr(feed_errmsg(f), "does not exist"),
       "blocking, the table dropped and the connection lost: a page is FEED_EPG, config (%s)",
       feed_errmsg(f));
    rc = feed_page(f, 77021, FEED_FIRST, 0, 5, &res);
    ok(rc == FEED_EPG && feed_error_kind(f, rc) == FEED_KIND_CONFIG &&
       strstr(feed_errmsg(f), "does not exist") && strstr(feed_errmsg(f), "tried again in"),
       "  the next, held off: config, the refusal's words and when it is tried again (%s)",
       feed_errmsg(f));
    rc = feed_health(f, &h);
    ok(rc == FEED_EPG && feed_error_kind(f, rc) == FEED_KIND_CONFIG && h.pg_refused &&
       !h.pg_up && !h.redis_refused, "  feed_health: FEED_EPG, config, pg_refused (%s)",
       h.pg_msg);
    feed_close(f);
    tu_sql(pg, "DROP TABLE t_kinds_numeric");

    /* Redis, refused after open: the user's password changed and its
     * connections closed, so the next set-up's AUTH is refused. */
    {
        feed_config cfg;
        tu_config(&cfg);
        cfg.redis_user = "t_kinds_bob";
        cfg.redis_password = "bob-pw";
        cfg.retry_ms = 60000;
        f = tu_open_settled(&cfg);
    }
    acl("resetpass >another-pw");
    freeReplyObject(tu_redis_cmd(r, "CLIENT KILL USER t_kinds_bob"));
    for (int k = 0; k < 2; k++) {
        rc = feed_on_insert(f, 1, 10, 1);
        ok(rc == FEED_EREDIS && feed_error_kind(f, rc) == FEED_KIND_CONFIG &&
           strstr(feed_errmsg(f), "WRONGPASS") && !strstr(feed_errmsg(f), "down"),
           "blocking, Redis AUTH refused after open: hook %d is FEED_EREDIS, config, in Redis's"
           " words (%s)", k + 1, feed_errmsg(f));
    }
    rc = feed_health(f, &h);
    ok(rc == FEED_EREDIS && feed_error_kind(f, rc) == FEED_KIND_CONFIG && h.redis_refused &&
       !h.redis_up && h.pg_up && strstr(h.redis_msg, "WRONGPASS"),
       "  feed_health: FEED_EREDIS, config, redis_refused (%s)", h.redis_msg);
    feed_close(f);
    acl("resetpass >bob-pw");
}

static void unknown_write_blocking(void)
{
    static const int64_t uids[] = { 81001, 81002, 81003 };
    feed *f = tu_open_with(cfg_ok);
    feed_result res;
    int64_t author = 82001;
    int rc;

    stale_copies(f, uids, 3);
    rc = feed_on_unknown_write(f, uids, 3);
    ok(rc == FEED_OK && all_gone(uids, 3), "feed_on_unknown_write: every copy named is dropped");
    ok(walks_equal(f, uids, 3), "  the next walks equal SQL (the row behind the cache included)");

    tu_sql(pg, "INSERT INTO author_post (author, score, id) VALUES (%lld, 5, 1), (%lld, 6, 2)",
           (long long)author, (long long)author);
    rc = feed_page_merged(f, 81009, &author, 1, FEED_FIRST, 0, 5, &res);
    feed_result_free(&res);
    ok(rc == FEED_OK && cached(author_key(author)), "an author's copy is cached");
    rc = feed_author_on_unknown_write(f, &author, 1);
    ok(rc == FEED_OK && !cached(author_key(author)),
       "feed_author_on_unknown_write: the author's copy is dropped");

    is_int(feed_on_unknown_write(f, uids, 0), FEED_OK, "n == 0: FEED_OK");
    is_int(feed_on_unknown_write(f, NULL, 2), FEED_EINVAL, "uids NULL, n 2: FEED_EINVAL");
    is_int(feed_on_unknown_write(NULL, uids, 1), FEED_EINVAL, "f NULL: FEED_EINVAL");
    feed_close(f);
    f = tu_open(NULL);      /* no author_table */
    is_int(feed_author_on_unknown_write(f, &author, 1), FEED_EINVAL,
           "authors without author_table: FEED_EINVAL");
    feed_close(f);
}

/* Redis frozen (its data kept): every copy named goes on the repair list,
 * and the handle drops them all once Redis answers again. Only the first
 * DEL is sent (and may run at the thaw); the others must come from the
 * list. */
static void cfg_quick(feed_config *cfg)
{
    cfg_ok(cfg);
    cfg->retry_ms = 100;
}

static void unknown_write_down(void)
{
    static const int64_t uids[] = { 83001, 83002, 83003, 83004 };
    feed *f = tu_open_with(cfg_quick);
    feed_result res;
    int rc;

    stale_copies(f, uids, 4);
    fault_inject("redis-freeze");
    rc = feed_on_unknown_write(f, uids, 4);
    ok(rc == FEED_EREDIS && feed_error_kind(f, rc) == FEED_KIND_RETRY,
       "Redis frozen: feed_on_unknown_write is FEED_EREDIS, retry (%s)", feed_errmsg(f));
    fault_inject("redis-thaw");
    ok(cached(tu_key(uids[1], "")) && cached(tu_key(uids[3], "")),
       "  the stale copies are still in Redis after the thaw");
    fault_sleep_ms(150);            /* retry_ms: the handle tries Redis again */
    rc = feed_page(f, 83999, FEED_FIRST, 0, 5, &res);
    feed_result_free(&res);
    ok(rc == FEED_OK && all_gone(uids, 4),
       "  the next call reaches Redis: every one of the 4 copies is dropped, not only the first");
    ok(walks_equal(f, uids, 4), "  the next walks equal SQL");
    feed_close(f);
}

static void unknown_write_async(void)
{
    static const int64_t uids[] = { 84001, 84002, 84003 };
    feed *f = tu_open_with(cfg_ok);
    feed_async *a = async_open(cfg_ok);
    waited w = { 0 };
    int64_t author = 84501;
    feed_result res;

    stale_copies(f, uids, 3);
    is_int(feed_async_on_unknown_write(a, uids, 3, done_cb, &w), FEED_OK,
           "feed_async_on_unknown_write: accepted");
    ok(w.called == 0, "  no callback from inside the call");
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_OK && all_gone(uids, 3),
       "  one callback, FEED_OK, every copy named is dropped");
    ok(walks_equal(f, uids, 3), "  the next walks equal SQL");

    tu_sql(pg, "INSERT INTO author_post (author, score, id) VALUES (%lld, 5, 1)",
           (long long)author);
    feed_page_merged(f, 84009, &author, 1, FEED_FIRST, 0, 5, &res);
    feed_result_free(&res);
    memset(&w, 0, sizeof w);
    ok(cached(author_key(author)) &&
       feed_async_author_on_unknown_write(a, &author, 1, done_cb, &w) == FEED_OK,
       "feed_async_author_on_unknown_write: accepted for a cached author");
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_OK && !cached(author_key(author)),
       "  the author's copy is dropped");

    memset(&w, 0, sizeof w);
    is_int(feed_async_on_unknown_write(a, uids, 0, done_cb, &w), FEED_OK, "async n == 0:");
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_OK, "  the callback still comes, FEED_OK");
    is_int(feed_async_on_unknown_write(a, NULL, 1, done_cb, &w), FEED_EINVAL,
           "async uids NULL: FEED_EINVAL");
    feed_async_close(a);

    a = async_open(cfg_redis_down);
    memset(&w, 0, sizeof w);
    feed_async_on_unknown_write(a, uids, 3, done_cb, &w);
    wait_for(&w);
    ok(w.called == 1 && w.rc == FEED_EREDIS && w.kind == FEED_KIND_RETRY && *w.msg,
       "async, Redis down: one callback, FEED_EREDIS, retry, with a message (%s)", w.msg);
    feed_async_close(a);
    feed_close(f);
}

int main(void)
{
    redisReply *rep;

    tu_plain_redis_only("t_kinds");
    fault_setup();
    pg = tu_begin(&r);
    tu_sql(pg, "TRUNCATE author_post");
    tu_sql(pg, "DROP TABLE IF EXISTS t_kinds_gone");
    acl("reset on >bob-pw ~* &* +@all");
    base = event_base_new();

    kinds_of_codes();
    kinds_at_open();
    kinds_blocking();
    kinds_async();
    kinds_refused();
    unknown_write_blocking();
    unknown_write_async();
    unknown_write_down();

    rep = redisCommand(r, "ACL DELUSER t_kinds_bob");
    freeReplyObject(rep);
    event_base_free(base);
    tu_sql(pg, "TRUNCATE author_post");
    redisFree(r);
    PQfinish(pg);
    return tap_done();
}
