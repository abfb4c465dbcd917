/* t_tls.c -- TLS to Redis against real TLS-only servers (tests/tls.sh makes
 * the certificates with the openssl CLI and starts them): pages and hooks
 * over TLS, on the blocking and the async API (the whole test again as
 * t_tls:async); a Redis Cluster and a Sentinel set over TLS; every refusal
 * named: a wrong CA, a certificate for another name, a plaintext port, a
 * server that wants a client certificate; verification off taking a
 * self-signed certificate; feedcache-sync with the TLS flags; PostgreSQL over
 * TLS through libpq's sslmode. Skips (1..0) in a build without TLS:
 * t_tls_config checks that build's refusals. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "feedcache.h"

#if !FEED_HAVE_TLS

int main(void)
{
    printf("1..0 # SKIP built without TLS (hiredis_ssl): make HIREDIS=DIR\n");
    return 0;
}

#else

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "feedcache_libevent.h"
#include "synctest.h"

static char dir[256];
static char env_pki[256], env_cluster[256], env_sentinels[128];
static int port_tls, port_mtls, port_self, port_primary, port_pg;
static char ca[320], other_ca[320], client_crt[320], client_key[320];
static PGconn *pg;

static void servers_stop(void)
{
    char cmd[600];

    if (!dir[0])
        return;
    snprintf(cmd, sizeof cmd, "tests/tls.sh stop '%s' >/dev/null 2>&1; rm -rf '%s'", dir, dir);
    if (system(cmd) != 0)
        fprintf(stderr, "t_tls: stopping the TLS servers failed\n");
    dir[0] = '\0';
}

/* Start tests/tls.sh's servers and read tls.env. */
static void servers_start(void)
{
    char cmd[600], path[400], line[512];
    FILE *env;

    snprintf(dir, sizeof dir, "%s/t_tls.XXXXXX", st_env("TMPDIR", "/tmp"));
    if (!mkdtemp(dir)) {
        dir[0] = '\0';
        tap_bail("mkdtemp failed");
        exit(1);
    }
    atexit(servers_stop);
    snprintf(cmd, sizeof cmd, "tests/tls.sh start '%s' >'%s/start.log' 2>&1", dir, dir);
    if (system(cmd) != 0) {
        snprintf(cmd, sizeof cmd, "sed 's/^/# /' '%s/start.log'", dir);
        if (system(cmd) != 0)
            tap_diag("no start.log");
        tap_bail("tests/tls.sh start failed");
        exit(1);
    }
    snprintf(path, sizeof path, "%s/tls.env", dir);
    if (!(env = fopen(path, "r"))) {
        tap_bail("no tls.env");
        exit(1);
    }
    while (fgets(line, sizeof line, env)) {
        char *eq = strchr(line, '='), *v;
        if (!eq)
            continue;
        *eq = '\0';
        v = eq + 1;
        v[strcspn(v, "\n")] = '\0';
        if (!strcmp(line, "TLS_PKI"))
            snprintf(env_pki, sizeof env_pki, "%s", v);
        else if (!strcmp(line, "TLS_PORT"))
            port_tls = atoi(v);
        else if (!strcmp(line, "TLS_MTLS_PORT"))
            port_mtls = atoi(v);
        else if (!strcmp(line, "TLS_SELF_PORT"))
            port_self = atoi(v);
        else if (!strcmp(line, "TLS_CLUSTER"))
            snprintf(env_cluster, sizeof env_cluster, "%s", v);
        else if (!strcmp(line, "TLS_SENTINELS"))
            snprintf(env_sentinels, sizeof env_sentinels, "%s", v);
        else if (!strcmp(line, "TLS_PRIMARY_PORT"))
            port_primary = atoi(v);
        else if (!strcmp(line, "TLS_PG_PORT"))
            port_pg = atoi(v);
    }
    fclose(env);
    snprintf(ca, sizeof ca, "%s/ca.crt", env_pki);
    snprintf(other_ca, sizeof other_ca, "%s/other-ca.crt", env_pki);
    snprintf(client_crt, sizeof client_crt, "%s/client.crt", env_pki);
    snprintf(client_key, sizeof client_key, "%s/client.key", env_pki);
}

/* The test's own look into a TLS Redis (hiredis_ssl, not the library). */
static redisContext *peek(int port)
{
    redisSSLContextError e;
    redisSSLContext *ssl = redisCreateSSLContext(ca, NULL, client_crt, client_key, NULL, &e);
    redisContext *c = redisConnect("127.0.0.1", port);

    if (!ssl || !c || c->err || redisInitiateSSLWithContext(c, ssl) != REDIS_OK) {
        tap_bail("cannot connect to the TLS Redis by hand");
        exit(1);
    }
    /* The context may go once the session is made (OpenSSL counts refs). */
    redisFreeSSLContext(ssl);
    return c;
}

static long long peek_int(int port, const char *fmt, const char *arg)
{
    redisContext *c = peek(port);
    redisReply *r = redisCommand(c, fmt, arg);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

    if (r)
        freeReplyObject(r);
    redisFree(c);
    return v;
}

/* TLS to the CA-signed single Redis. */
static void tls_config(feed_config *cfg, int port)
{
    tu_config(cfg);
    cfg->redis_cluster = NULL;
    cfg->redis_port = port;
    cfg->redis_tls = 1;
    cfg->redis_tls_ca_file = ca;
    cfg->redis_timeout_ms = 1000;
    cfg->retry_ms = 60000;      /* a held-off reconnect must say why */
}

static void pages_and_hooks(feed_config *cfg, const char *what, int peek_port)
{
    feed *f;
    feed_result res;
    feed_stats before;
    int rc = feed_open(&f, cfg);

    if (!ok(rc == FEED_OK && !*feed_errmsg(f), "%s: feed_open over TLS", what)) {
        tap_diag("rc %d: %s", rc, rc == FEED_OK ? feed_errmsg(f) : feed_errmsg(NULL));
        if (rc == FEED_OK)
            feed_close(f);
        return;
    }
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid BETWEEN 1 AND 40");
    for (int64_t uid = 1; uid <= 40; uid++)
        tu_insert_rows(pg, uid, 25, tu_score_by10, tu_id_seq);
    {
        int walks = 1;
        for (int64_t uid = 1; uid <= 40; uid++)
            walks &= tu_walks_equal_sql(f, pg, uid);
        ok(walks, "%s: walks of 40 feeds equal SQL", what);
    }
    feed_stats_get(f, &before);
    rc = feed_page(f, 7, FEED_FIRST, 0, 10, &res);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_CACHE && res.count == 10,
       "%s: a first page comes from the cache (over TLS)", what);
    feed_result_free(&res);
    tu_insert(pg, 7, 100000, 9999);
    ok(feed_on_insert(f, 7, 100000, 9999) == FEED_OK, "%s: insert hook over TLS", what);
    rc = feed_page(f, 7, FEED_FIRST, 0, 1, &res);
    ok(rc == FEED_OK && res.count == 1 && res.items[0].id == 9999 &&
       res.source == FEED_SOURCE_CACHE, "%s: the hook's item tops the cached page", what);
    feed_result_free(&res);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 7 AND id = 9999");
    ok(feed_on_delete(f, 7, 9999) == FEED_OK && tu_walks_equal_sql(f, pg, 7),
       "%s: delete hook, then the walk equals SQL", what);
    {
        feed_health_info h;
        ok(feed_health(f, &h) == FEED_OK && h.redis_up, "%s: feed_health says Redis is up", what);
    }
    {
        feed_stats now = tu_stats_since(f, &before);
        ok(now.redis_errors == 0, "%s: no Redis error on the way", what);
    }
    if (peek_port)
        ok(peek_int(peek_port, "EXISTS %s", tu_key(7, "")) == 1,
           "%s: the copy is in the TLS server (read by hand)", what);
    feed_close(f);
}

/* The handle opens (PostgreSQL answers) but Redis is refused: the message
 * of the open, of a page within retry_ms and of feed_health name why. */
static void refused(feed_config *cfg, const char *what, const char *want)
{
    feed *f;
    feed_result res;
    feed_health_info h;
    int rc = feed_open(&f, cfg);

    if (!ok(rc == FEED_OK, "%s: feed_open still opens (PostgreSQL answers)", what)) {
        tap_diag("rc %d: %s", rc, feed_errmsg(NULL));
        return;
    }
    if (!ok(strstr(feed_errmsg(f), want) != NULL, "%s: feed_open's message says \"%s\"", what,
            want))
        tap_diag("message: %s", feed_errmsg(f));
    rc = feed_page(f, 3, FEED_FIRST, 0, 5, &res);
    ok(rc == FEED_OK && res.source == FEED_SOURCE_DB, "%s: a page comes from PostgreSQL", what);
    feed_result_free(&res);
    if (!ok(strstr(feed_errmsg(f), "next reconnect") && strstr(feed_errmsg(f), want),
            "%s: the page's message (reconnect held off) still says why", what))
        tap_diag("message: %s", feed_errmsg(f));
    rc = feed_health(f, &h);
    if (!ok(!h.redis_up && strstr(h.redis_msg, want), "%s: feed_health's redis_msg says why",
            what))
        tap_diag("rc %d, redis_msg: %s", rc, h.redis_msg);
    feed_close(f);
}

/* ---- the async API on libevent, by hand (beside the shim's twin) ---- */

typedef struct arun {
    int         done, rc;
    feed_source source;
    size_t      count;
    char        msg[512];
} arun;

static void a_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    arun *r = arg;

    r->done = 1;
    r->rc = rc;
    snprintf(r->msg, sizeof r->msg, "%s", feed_async_errmsg(a));
    if (page) {
        r->source = page->source;
        r->count = page->count;
        feed_result_free(page);
    }
}

static void a_done(feed_async *a, int rc, void *arg)
{
    arun *r = arg;

    r->done = 1;
    r->rc = rc;
    snprintf(r->msg, sizeof r->msg, "%s", feed_async_errmsg(a));
}

static void a_wait(struct event_base *base, arun *r)
{
    while (!r->done)
        event_base_loop(base, EVLOOP_ONCE);
}

static void async_by_hand(void)
{
    struct event_base *base = event_base_new();
    feed_config cfg;
    feed_async *a;
    arun r = { 0 };

    tls_config(&cfg, port_tls);
    if (!ok(feed_async_open_libevent(&a, &cfg, base) == FEED_OK, "async: open over TLS")) {
        tap_diag("%s", feed_async_errmsg(NULL));
        event_base_free(base);
        return;
    }
    feed_async_page(a, 11, FEED_FIRST, 0, 10, a_page, &r);
    a_wait(base, &r);
    r = (arun){ 0 };
    feed_async_page(a, 11, FEED_FIRST, 0, 10, a_page, &r);
    a_wait(base, &r);
    ok(r.rc == FEED_OK && r.source == FEED_SOURCE_CACHE && r.count == 10,
       "async: a cached page over TLS");
    tu_insert(pg, 11, 200000, 8888);
    r = (arun){ 0 };
    feed_async_on_insert(a, 11, 200000, 8888, a_done, &r);
    a_wait(base, &r);
    ok(r.rc == FEED_OK, "async: insert hook over TLS");
    feed_async_close(a);

    /* A wrong CA: the handshake's failure named in the callback's message. */
    cfg.redis_tls_ca_file = other_ca;
    if (feed_async_open_libevent(&a, &cfg, base) == FEED_OK) {
        r = (arun){ 0 };
        feed_async_page(a, 11, FEED_FIRST, 0, 10, a_page, &r);
        a_wait(base, &r);
        if (!ok(r.rc == FEED_OK && r.source == FEED_SOURCE_DB &&
                strstr(r.msg, "certificate verify failed"),
                "async, wrong CA: the page comes from PostgreSQL, the message says "
                "\"certificate verify failed\""))
            tap_diag("rc %d source %d: %s", r.rc, (int)r.source, r.msg);
        feed_async_close(a);
    } else {
        ok(0, "async, wrong CA: open");
    }

    /* A plaintext port. */
    tls_config(&cfg, atoi(st_env("FEED_REDIS_PORT", "6379")));
    if (feed_async_open_libevent(&a, &cfg, base) == FEED_OK) {
        r = (arun){ 0 };
        feed_async_page(a, 11, FEED_FIRST, 0, 10, a_page, &r);
        a_wait(base, &r);
        if (!ok(r.rc == FEED_OK && strstr(r.msg, "TLS handshake") && strstr(r.msg, "plaintext"),
                "async, plaintext port: the message names the handshake and the port"))
            tap_diag("rc %d: %s", r.rc, r.msg);
        feed_async_close(a);
    } else {
        ok(0, "async, plaintext port: open");
    }
    event_base_free(base);
}

/* An error another OpenSSL user left on this thread's queue: the reason
 * below, put there by hand (an application's, libpq's). hiredis_ssl asks
 * SSL_get_error() whether a read or write that returned nothing must wait,
 * as every non-blocking handshake does, and it answers "failed" while
 * anything is on the queue: a handshake on a loop failed for it, and its
 * reason was the one named. */
#define STALE_REASON "unsafe legacy renegotiation disabled"

static void stale_error(void)
{
    ERR_clear_error();
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
    ERR_raise(ERR_LIB_SSL, SSL_R_UNSAFE_LEGACY_RENEGOTIATION_DISABLED);
#else
    SSLerr(SSL_F_SSL_READ, SSL_R_UNSAFE_LEGACY_RENEGOTIATION_DISABLED);
#endif
}

static void async_stale_error(void)
{
    struct event_base *base = event_base_new();
    feed_config cfg;
    feed_async *a;
    arun r = { 0 };
    unsigned long e;

    tls_config(&cfg, port_tls);
    if (!ok(feed_async_open_libevent(&a, &cfg, base) == FEED_OK, "stale error: async open")) {
        event_base_free(base);
        return;
    }
    stale_error();
    e = ERR_peek_error();
    ok(e && strstr(ERR_reason_error_string(e), STALE_REASON),
       "stale error: the thread's queue holds \"" STALE_REASON "\"");
    feed_async_page(a, 11, FEED_FIRST, 0, 10, a_page, &r);
    a_wait(base, &r);
    if (!ok(r.rc == FEED_OK && r.source != FEED_SOURCE_DB && !strstr(r.msg, STALE_REASON),
            "stale error: the handshake on the loop is made, the page comes from Redis"))
        tap_diag("rc %d source %d: %s", r.rc, (int)r.source, r.msg);
    feed_async_close(a);

    /* A handshake that does fail (a wrong CA) is named by its own reason. */
    cfg.redis_tls_ca_file = other_ca;
    if (feed_async_open_libevent(&a, &cfg, base) == FEED_OK) {
        stale_error();
        r = (arun){ 0 };
        feed_async_page(a, 11, FEED_FIRST, 0, 10, a_page, &r);
        a_wait(base, &r);
        if (!ok(r.rc == FEED_OK && strstr(r.msg, "certificate verify failed") &&
                !strstr(r.msg, STALE_REASON),
                "stale error, wrong CA: the message names \"certificate verify failed\", "
                "not the stale reason"))
            tap_diag("rc %d source %d: %s", r.rc, (int)r.source, r.msg);
        feed_async_close(a);
    } else {
        ok(0, "stale error, wrong CA: open");
    }
    ERR_clear_error();
    event_base_free(base);
}

/* ---- feedcache-sync with the TLS flags ---- */

static void sync_over_tls(void)
{
    char port[16];
    const char *flags[] = { "--redis-port", port, "--redis-tls", "1", "--redis-tls-ca-file", ca,
                            NULL };
    feed_config cfg;
    feed *f;
    feed_result res;
    pid_t pid;

    snprintf(port, sizeof port, "%d", port_tls);
    tls_config(&cfg, port_tls);
    f = tu_open(&cfg);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 21");
    tu_insert_rows(pg, 21, 10, tu_score_by10, tu_id_seq);
    st_drop_slot(pg, "t_tls");
    pid = st_sync_start("t_tls", flags);
    ok(st_wait_following("t_tls", 30), "feedcache-sync --redis-tls 1: follows its slot");
    if (feed_page(f, 21, FEED_FIRST, 0, 5, &res) == FEED_OK)
        feed_result_free(&res);
    ok(peek_int(port_tls, "EXISTS %s", tu_key(21, "")) == 1, "sync: uid 21's copy is cached");
    tu_sql(pg, "INSERT INTO feed_entry VALUES (21, 99999, 777)");   /* no hook */
    ok(st_caught_up(pg, "t_tls", 30), "sync: confirms an SQL-only insert");
    ok(peek_int(port_tls, "EXISTS %s", tu_key(21, "")) == 0,
       "sync: it dropped the stale copy, over TLS");
    ok(st_sync_stop(pid, SIGTERM) == 0, "sync: SIGTERM ends it with 0");
    st_drop_slot(pg, "t_tls");
    feed_close(f);
}

/* ---- PostgreSQL over TLS: libpq's sslmode ---- */

static void pg_over_tls(void)
{
    char conninfo[600];
    feed_config cfg;
    feed *f;
    feed_result res;
    PGconn *c;
    int rc;

    snprintf(conninfo, sizeof conninfo, "host=localhost port=%d user=postgres dbname=feedcache "
             "sslmode=verify-full sslrootcert=%s", port_pg, ca);
    c = PQconnectdb(conninfo);
    if (!ok(PQstatus(c) == CONNECTION_OK && PQsslInUse(c), "PostgreSQL: sslmode=verify-full "
            "connects, over TLS")) {
        tap_diag("%s", PQerrorMessage(c));
        PQfinish(c);
        return;
    }
    tls_config(&cfg, port_tls);
    cfg.pg_conninfo = conninfo;
    rc = feed_open(&f, &cfg);
    if (ok(rc == FEED_OK, "PostgreSQL over TLS and Redis over TLS: feed_open")) {
        tu_sql(c, "DELETE FROM feed_entry WHERE uid = 5");
        tu_insert_rows(c, 5, 8, tu_score_by10, tu_id_seq);
        rc = feed_invalidate(f, 5);
        if (rc == FEED_OK)
            rc = feed_page(f, 5, FEED_FIRST, 0, 5, &res);
        if (!ok(rc == FEED_OK && res.source == FEED_SOURCE_REBUILD && res.count == 5,
                "  a copy rebuilt from that PostgreSQL"))
            tap_diag("rc %d source %d count %zu: %s", rc, (int)res.source, res.count,
                     feed_errmsg(f));
        feed_result_free(&res);
        feed_close(f);
    } else {
        tap_diag("%s", feed_errmsg(NULL));
    }
    PQfinish(c);
    snprintf(conninfo, sizeof conninfo, "host=localhost port=%d user=postgres dbname=feedcache "
             "sslmode=verify-full sslrootcert=%s", port_pg, other_ca);
    cfg.pg_conninfo = conninfo;
    cfg.redis_port = 1;         /* nothing there: only PostgreSQL can answer */
    rc = feed_open(&f, &cfg);
    if (!ok(rc != FEED_OK && strstr(feed_errmsg(NULL), "certificate verify failed"),
            "PostgreSQL with a wrong sslrootcert: refused, libpq saying why"))
        tap_diag("rc %d: %s", rc, feed_errmsg(NULL));
    if (rc == FEED_OK)
        feed_close(f);
}

int main(void)
{
    feed_config cfg;

    if (!feed_tls_supported()) {
        printf("1..0 # SKIP feed_tls_supported() is 0 in a build with FEED_HAVE_TLS\n");
        return 1;
    }
    pg = tu_begin(NULL);
    servers_start();
    tap_diag("TLS servers in %s", dir);

    tls_config(&cfg, port_tls);
    pages_and_hooks(&cfg, "single Redis", port_tls);

    tls_config(&cfg, port_tls);
    cfg.redis_tls_server_name = "localhost";
    pages_and_hooks(&cfg, "server name localhost (a DNS name in the certificate)", 0);

    tls_config(&cfg, port_mtls);
    cfg.redis_tls_cert_file = client_crt;
    cfg.redis_tls_key_file = client_key;
    pages_and_hooks(&cfg, "client certificate (tls-auth-clients yes)", 0);

    tls_config(&cfg, port_self);
    cfg.redis_tls_ca_file = NULL;
    cfg.redis_tls_verify = 0;
    pages_and_hooks(&cfg, "verify 0, self-signed certificate", 0);

    tls_config(&cfg, port_tls);
    cfg.redis_cluster = env_cluster;
    pages_and_hooks(&cfg, "Redis Cluster over TLS (3 primaries)", 0);

    tls_config(&cfg, port_tls);
    cfg.redis_sentinels = env_sentinels;
    cfg.redis_master_name = "mymaster";
    pages_and_hooks(&cfg, "Sentinel and its primary over TLS", port_primary);

    /* The refusals, each named. */
    tls_config(&cfg, port_tls);
    cfg.redis_tls_ca_file = other_ca;
    refused(&cfg, "wrong CA", "certificate verify failed");

    tls_config(&cfg, port_self);
    refused(&cfg, "self-signed certificate, verify 1", "certificate verify failed");

    tls_config(&cfg, port_tls);
    cfg.redis_tls_server_name = "redis.example.org";
    refused(&cfg, "a certificate for another name", "certificate verify failed");

    tls_config(&cfg, atoi(st_env("FEED_REDIS_PORT", "6379")));
    refused(&cfg, "plaintext port", "TLS handshake");

    tls_config(&cfg, port_mtls);
    /* The server's alert says "certificate required"; when its reset
     * overtakes the alert, the message asks whether one is required. */
    refused(&cfg, "no client certificate where one is required", "certificate");

    tls_config(&cfg, 1);
    refused(&cfg, "nothing listening", "Connection refused");

    /* A wrong CA under Sentinel: the Sentinel's own connection is TLS too. */
    tls_config(&cfg, port_tls);
    cfg.redis_sentinels = env_sentinels;
    cfg.redis_tls_ca_file = other_ca;
    refused(&cfg, "Sentinel, wrong CA", "certificate verify failed");

    tls_config(&cfg, port_tls);
    cfg.redis_tls_ca_file = "/nonexistent/ca.pem";
    {
        feed *f;
        int rc = feed_open(&f, &cfg);
        if (!ok(rc == FEED_EINVAL && strstr(feed_errmsg(NULL), "redis_tls_ca_file") &&
                strstr(feed_errmsg(NULL), "/nonexistent/ca.pem") &&
                strstr(feed_errmsg(NULL), "No such file"),
                "a CA file that cannot be read: FEED_EINVAL naming it and why"))
            tap_diag("rc %d: %s", rc, feed_errmsg(NULL));
        if (rc == FEED_OK)
            feed_close(f);
    }

    if (!tu_async())
        async_by_hand();
    if (!tu_async())
        async_stale_error();
    if (!tu_async())
        sync_over_tls();
    pg_over_tls();
    servers_stop();
    PQfinish(pg);
    return tap_done();
}

#endif
