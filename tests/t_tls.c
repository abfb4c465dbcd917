/* t_tls.c -- TLS to Redis against real TLS-only servers (tests/tls.sh makes
 * the certificates with the openssl CLI and starts them): pages and hooks
 * over TLS, on the blocking and the async API (the whole test again as
 * t_tls:async); a Redis Cluster and a Sentinel set over TLS, with a MOVED
 * and an ASK forced on the cluster; every refusal named: a wrong CA, a
 * certificate for another name, a plaintext port, a server that wants a
 * client certificate; verification off taking a self-signed certificate;
 * pages on a loop with an error left on the thread's OpenSSL queue and
 * every reply arriving in two parts; feedcache-sync with the TLS flags;
 * PostgreSQL over TLS through libpq's sslmode. Skips (1..0) in a build
 * without TLS: t_tls_config checks that build's refusals. */
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

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>

#include <event2/event.h>
#include <hiredis/hiredis.h>
#include <hiredis/hiredis_ssl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "feedcache_libevent.h"
#include "internal.h"   /* FEED_FAM_FEED, feed__key_gen */
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

/* The key of uid's copy on the TLS Redis at port: in the generation of its
 * data set now, read there over TLS (testutil's tu_key asks the tests'
 * plain servers); cluster 1 for a TLS cluster's node, where keys carry none
 * (lib/core/setup.c says why). */
static const char *tls_key(int port, int64_t uid, int cluster)
{
    char run_id[41] = "", replid[41] = "", gen[FEED_KEY_GEN_LEN + 1];
    feed_config cfg;
    redisContext *c;
    redisReply *r;
    const char *p;

    tu_config(&cfg);
    if (cluster)
        return tu_key_gen(&cfg, FEED_FAM_FEED, uid, "", FEED_KEY_GEN_NONE);
    c = peek(port);
    r = redisCommand(c, "INFO");
    if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "run_id:")) != NULL)
        sscanf(p + 7, "%40[0-9a-f]", run_id);
    if (r && r->type == REDIS_REPLY_STRING && (p = strstr(r->str, "master_replid:")) != NULL)
        sscanf(p + 14, "%40[0-9a-f]", replid);
    if (r)
        freeReplyObject(r);
    redisFree(c);
    if (strlen(run_id) != 40 || strlen(replid) != 40) {
        tap_bail("no run_id or master_replid in INFO of the TLS Redis");
        exit(1);
    }
    feed__key_gen(run_id, replid, gen);
    return tu_key_gen(&cfg, FEED_FAM_FEED, uid, "", gen);
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
        ok(peek_int(peek_port, "EXISTS %s", tls_key(peek_port, 7, 0)) == 1,
           "%s: the copy is in the TLS server (read by hand)", what);
    feed_close(f);
}

/* ---- redirects over TLS: MOVED and ASK forced by hand ---- */

static redisReply *node_cmd(redisContext *c, int argc, const char **argv)
{
    redisReply *r = redisCommandArgv(c, argc, argv, NULL);

    if (!r) {
        tap_diag("%s", c->errstr);
        tap_bail("a TLS cluster node stopped answering");
        exit(1);
    }
    return r;
}

static redisReply *node(redisContext *c, const char *fmt, const char *a, const char *b)
{
    redisReply *r = redisCommand(c, fmt, a, b);

    if (!r) {
        tap_diag("%s", c->errstr);
        tap_bail("a TLS cluster node stopped answering");
        exit(1);
    }
    return r;
}

/* Page p equals SQL's first n items of uid. */
static int page_is_sql(const feed_result *p, int64_t uid, size_t n)
{
    feed_item *want;
    size_t nwant = tu_sql_feed(pg, uid, &want);
    int same = p->count == (nwant < n ? nwant : n);

    for (size_t i = 0; same && i < p->count; i++)
        same = p->items[i].score == want[i].score && p->items[i].id == want[i].id;
    free(want);
    return same;
}

/* A slot caught mid-migration, then moved, under handles that had read
 * the feed there, on the TLS cluster: the slot migrated by hand as
 * t_cluster does (IMPORTING on the target, MIGRATING on the source, the
 * slot's keys MIGRATEd over the cluster's TLS), so a read at the source
 * gets -ASK, then SETSLOT NODE on every primary, so a call at the source
 * gets -MOVED. Each redirect is followed over TLS to the node it names and
 * answered from the copy that moved there: a page after ASK, a hook and a
 * page after MOVED. */
static void redirects_over_tls(void)
{
    const int64_t uid = 33;
    int ports[3] = { 0 }, n = 0, src = -1, dst, rc;
    redisContext *c[3];
    redisReply *r;
    char src_id[64], dst_id[64], slot[16], port[16];
    const char *cursor = env_cluster;
    feed_config cfg;
    feed *f, *g;
    feed_result res;
    feed_stats before, d;

    while (n < 3 && (cursor = strchr(cursor, ':')) != NULL)
        ports[n++] = atoi(++cursor);
    if (n != 3) {
        tap_bail("TLS_CLUSTER does not name 3 nodes");
        exit(1);
    }
    tls_config(&cfg, port_tls);
    cfg.redis_cluster = env_cluster;
    f = tu_open(&cfg);
    g = tu_open(&cfg);
    tu_sql(pg, "DELETE FROM feed_entry WHERE uid = 33");
    tu_insert_rows(pg, uid, 25, tu_score_by10, tu_id_seq);
    /* Both handles meet every node first (the 40 feeds of pages_and_hooks
     * spread over the three): the target's lowest slot may become the moved
     * one, where its restart fence key is then looked for, and a handle
     * that never trusted the node would take the key's absence for another
     * data set and flush the node, the moved copy with it. */
    for (int64_t u = 1; u <= 40; u++)
        for (int i = 0; i < 2; i++)
            if (feed_page(i ? g : f, u, FEED_FIRST, 0, 10, &res) == FEED_OK)
                feed_result_free(&res);
    for (int i = 0; i < 2; i++) {   /* both cached, both handles know the slot's owner */
        if (feed_page(i ? g : f, uid, FEED_FIRST, 0, 10, &res) == FEED_OK)
            feed_result_free(&res);
    }
    for (int i = 0; i < 3; i++) {
        c[i] = peek(ports[i]);
        r = node(c[i], "EXISTS %s", tls_key(ports[i], uid, 1), NULL);
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
            src = i;
        freeReplyObject(r);
    }
    if (!ok(src >= 0, "redirects: feed %lld is cached on a TLS cluster node", (long long)uid)) {
        for (int i = 0; i < 3; i++)
            redisFree(c[i]);
        feed_close(g);
        feed_close(f);
        return;
    }
    dst = (src + 1) % 3;
    r = node(c[src], "CLUSTER KEYSLOT %s", tls_key(ports[src], uid, 1), NULL);
    snprintf(slot, sizeof slot, "%lld", r->integer);
    freeReplyObject(r);
    r = node(c[src], "CLUSTER MYID", NULL, NULL);
    snprintf(src_id, sizeof src_id, "%s", r->str);
    freeReplyObject(r);
    r = node(c[dst], "CLUSTER MYID", NULL, NULL);
    snprintf(dst_id, sizeof dst_id, "%s", r->str);
    freeReplyObject(r);
    freeReplyObject(node(c[dst], "CLUSTER SETSLOT %s IMPORTING %s", slot, src_id));
    freeReplyObject(node(c[src], "CLUSTER SETSLOT %s MIGRATING %s", slot, dst_id));
    {   /* every key of the slot (the feed's and what shares its hash tag) */
        redisReply *keys = node(c[src], "CLUSTER GETKEYSINSLOT %s 1000", slot, NULL);
        const char *argv[8 + 64];
        int argc = 0;
        snprintf(port, sizeof port, "%d", ports[dst]);
        argv[argc++] = "MIGRATE";
        argv[argc++] = "127.0.0.1";
        argv[argc++] = port;
        argv[argc++] = "";
        argv[argc++] = "0";
        argv[argc++] = "5000";
        argv[argc++] = "KEYS";
        for (size_t i = 0; keys->type == REDIS_REPLY_ARRAY && i < keys->elements && argc < 8 + 64; i++)
            argv[argc++] = keys->element[i]->str;
        r = node_cmd(c[src], argc, argv);
        if (!ok(r->type == REDIS_REPLY_STATUS && argc > 7,
                "redirects: slot %s MIGRATING to the next node, its %d keys moved over TLS", slot,
                argc - 7))
            tap_diag("MIGRATE: %s", r->type == REDIS_REPLY_ERROR ? r->str : "no keys");
        freeReplyObject(r);
        freeReplyObject(keys);
    }

    /* -ASK: the source no longer has the key, the slot is still its own. A
     * read is not sent on by ASK (a copy of a slot being imported is not
     * known right before the slot arrives, docs/ha.md): PostgreSQL answers,
     * the ASK having come back over TLS. */
    feed_stats_get(f, &before);
    rc = feed_page(f, uid, FEED_FIRST, 0, 10, &res);
    d = tu_stats_since(f, &before);
    if (!ok(rc == FEED_OK && page_is_sql(&res, uid, 10) && res.source == FEED_SOURCE_DB &&
            strstr(feed_errmsg(f), "ASK") != NULL, "  ASK over TLS: the page comes from "
            "PostgreSQL, not the importing node (source %d: %s)",
            rc == FEED_OK ? (int)res.source : -1, feed_errmsg(f)))
        tap_diag("rc %d: %s", rc, feed_errmsg(f));
    if (rc == FEED_OK)
        feed_result_free(&res);

    /* -MOVED: the slot is the target's now; f and g still map it to the source. */
    for (int i = 0; i < 3; i++)
        freeReplyObject(node(c[i], "CLUSTER SETSLOT %s NODE %s", slot, dst_id));
    tu_insert(pg, uid, 100000, 7777);
    feed_stats_get(g, &before);
    rc = feed_on_insert(g, uid, 100000, 7777);
    d = tu_stats_since(g, &before);
    if (!ok(rc == FEED_OK && d.redis_redirects > 0,
            "  MOVED: the insert hook follows it over TLS (%llu redirects)",
            (unsigned long long)d.redis_redirects))
        tap_diag("rc %d: %s", rc, feed_errmsg(g));
    feed_stats_get(f, &before);
    rc = feed_page(f, uid, FEED_FIRST, 0, 10, &res);
    d = tu_stats_since(f, &before);
    /* From the new owner: its copy, or (its slot fence not yet naming the
     * node) a rebuild there. */
    if (!ok(rc == FEED_OK && page_is_sql(&res, uid, 10) && res.source != FEED_SOURCE_DB &&
            res.count > 0 && res.items[0].id == 7777 && d.redis_redirects > 0,
            "  MOVED: the page follows it over TLS, the hook's item on top (source %d, %llu "
            "redirects)", rc == FEED_OK ? (int)res.source : -1,
            (unsigned long long)d.redis_redirects))
        tap_diag("rc %d: %s", rc, feed_errmsg(f));
    if (rc == FEED_OK)
        feed_result_free(&res);
    r = node(c[dst], "EXISTS %s", tls_key(ports[dst], uid, 1), NULL);
    ok(r->type == REDIS_REPLY_INTEGER && r->integer == 1 && tu_walks_equal_sql(f, pg, uid) &&
       tu_walks_equal_sql(g, pg, uid), "  the copy is on the new owner; walks equal SQL");
    freeReplyObject(r);
    {
        feed_stats s, t;
        feed_stats_get(f, &s);
        feed_stats_get(g, &t);
        ok(t.redis_errors == 0 && s.fence_flushes + t.fence_flushes == 0,
           "  no error for the hooks' handle, no node flushed (%llu, %llu errors; %llu"
           " flushes)", (unsigned long long)s.redis_errors, (unsigned long long)t.redis_errors,
           (unsigned long long)(s.fence_flushes + t.fence_flushes));
    }
    for (int i = 0; i < 3; i++)
        redisFree(c[i]);
    feed_close(g);
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
    if (!ok(strstr(feed_errmsg(f), "not tried again yet") && strstr(feed_errmsg(f), want),
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

/* ---- a stale error on the thread's OpenSSL queue, on the loop ---- */

/* What another OpenSSL user (the application, libpq) may leave on the
 * thread's error queue: a reason put there by hand. hiredis_ssl asks
 * SSL_get_error() whether a read that returned no data must wait for more
 * (a TLS record that has not wholly arrived) or failed, and OpenSSL
 * answers "failed" while anything is on the queue: the connection was
 * dropped for it, and the stale reason named as the cause. */
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

/* A TCP relay in front of the TLS Redis that hands each chunk the server
 * sends on in two parts, 20 ms apart: the first byte, then the rest. Every
 * record then reaches the client incomplete first, and the loop's read of
 * it must wait for the rest (SSL_ERROR_WANT_READ). */
#define RELAY_PAIRS 8

typedef struct relay {
    int          listen_fd, port, to;
    int          cli[RELAY_PAIRS], srv[RELAY_PAIRS], n;
    volatile int stop;
    pthread_t    t;
} relay;

static int relay_write(int fd, const char *buf, size_t len)
{
    for (size_t at = 0; at < len;) {
        ssize_t w = write(fd, buf + at, len - at);
        if (w <= 0)
            return -1;
        at += (size_t)w;
    }
    return 0;
}

static void relay_drop(relay *rl, int i)
{
    close(rl->cli[i]);
    close(rl->srv[i]);
    rl->cli[i] = rl->srv[i] = -1;   /* poll() skips a negative fd */
}

static void relay_accept(relay *rl)
{
    struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons((uint16_t)rl->to) };
    int one = 1, c = accept(rl->listen_fd, NULL, NULL), s = socket(AF_INET, SOCK_STREAM, 0);

    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (c < 0 || s < 0 || rl->n == RELAY_PAIRS ||
        connect(s, (struct sockaddr *)&to, sizeof to) != 0) {
        if (c >= 0)
            close(c);
        if (s >= 0)
            close(s);
        return;
    }
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    rl->cli[rl->n] = c;
    rl->srv[rl->n++] = s;
}

static void *relay_run(void *arg)
{
    relay *rl = arg;
    static char buf[1 << 16];
    struct timespec pause = { 0, 20000000 };

    while (!rl->stop) {
        struct pollfd p[1 + 2 * RELAY_PAIRS];
        int n = rl->n;
        p[0] = (struct pollfd){ rl->listen_fd, POLLIN, 0 };
        for (int i = 0; i < n; i++) {
            p[1 + 2 * i] = (struct pollfd){ rl->cli[i], POLLIN, 0 };
            p[2 + 2 * i] = (struct pollfd){ rl->srv[i], POLLIN, 0 };
        }
        if (poll(p, (nfds_t)(1 + 2 * n), 50) <= 0)
            continue;
        if (p[0].revents & POLLIN)
            relay_accept(rl);
        for (int i = 0; i < n; i++) {
            ssize_t m;
            if (rl->cli[i] >= 0 && p[1 + 2 * i].revents) {   /* to the server as it comes */
                m = read(rl->cli[i], buf, sizeof buf);
                if (m <= 0 || relay_write(rl->srv[i], buf, (size_t)m) != 0) {
                    relay_drop(rl, i);
                    continue;
                }
            }
            if (rl->srv[i] >= 0 && p[2 + 2 * i].revents) {   /* to the client in two parts */
                m = read(rl->srv[i], buf, sizeof buf);
                if (m <= 0 || relay_write(rl->cli[i], buf, 1) != 0 ||
                    (nanosleep(&pause, NULL), relay_write(rl->cli[i], buf + 1, (size_t)m - 1)) != 0)
                    relay_drop(rl, i);
            }
        }
    }
    for (int i = 0; i < rl->n; i++)
        if (rl->cli[i] >= 0)
            relay_drop(rl, i);
    close(rl->listen_fd);
    return NULL;
}

static int relay_start(relay *rl, int to)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = 0 };
    socklen_t len = sizeof a;

    memset(rl, 0, sizeof *rl);
    rl->to = to;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if ((rl->listen_fd = socket(AF_INET, SOCK_STREAM, 0)) < 0 ||
        bind(rl->listen_fd, (struct sockaddr *)&a, sizeof a) != 0 ||
        listen(rl->listen_fd, 8) != 0 ||
        getsockname(rl->listen_fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    rl->port = ntohs(a.sin_port);
    return pthread_create(&rl->t, NULL, relay_run, rl) == 0 ? 0 : -1;
}

static void relay_stop(relay *rl)
{
    rl->stop = 1;
    pthread_join(rl->t, NULL);
}

/* Pages on the loop, each started after the application left an error on
 * the queue, each reply coming in two parts: every page must come from
 * Redis on the one connection, and no message may name the stale reason. */
static void async_stale_error(void)
{
    struct event_base *base = event_base_new();
    feed_config cfg;
    feed_async *a;
    feed_stats st;
    relay rl;
    arun r = { 0 };
    int good = 0;

    if (!ok(relay_start(&rl, port_tls) == 0, "stale error: a relay that splits every record")) {
        event_base_free(base);
        return;
    }
    tls_config(&cfg, rl.port);
    if (!ok(feed_async_open_libevent(&a, &cfg, base) == FEED_OK, "stale error: async open")) {
        tap_diag("%s", feed_async_errmsg(NULL));
        relay_stop(&rl);
        event_base_free(base);
        return;
    }
    feed_async_page(a, 11, FEED_FIRST, 0, 10, a_page, &r);     /* connected, set up */
    a_wait(base, &r);
    for (int i = 0; i < 5; i++) {
        unsigned long e;
        r = (arun){ 0 };
        stale_error();
        e = ERR_peek_error();
        feed_async_page(a, 11, FEED_FIRST, 0, 10, a_page, &r);
        a_wait(base, &r);
        if (e && r.rc == FEED_OK && r.source == FEED_SOURCE_CACHE && r.count == 10 &&
            !strstr(r.msg, STALE_REASON))
            good++;
        else
            tap_diag("page %d: queue %lu, rc %d source %d: %s", i, e, r.rc, (int)r.source, r.msg);
    }
    feed_async_stats_get(a, &st);
    ok(good == 5 && st.redis_errors == 0 && st.redis_connects == 1,
       "stale error: 5 of 5 pages from the cache with \"" STALE_REASON "\" on the queue, "
       "replies split (%d right, %llu Redis errors, %llu connects)", good,
       (unsigned long long)st.redis_errors, (unsigned long long)st.redis_connects);
    ERR_clear_error();
    feed_async_close(a);
    event_base_loop(base, EVLOOP_NONBLOCK);
    relay_stop(&rl);
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
    ok(peek_int(port_tls, "EXISTS %s", tls_key(port_tls, 21, 0)) == 1, "sync: uid 21's copy is cached");
    tu_sql(pg, "INSERT INTO feed_entry VALUES (21, 99999, 777)");   /* no hook */
    ok(st_caught_up(pg, "t_tls", 30), "sync: confirms an SQL-only insert");
    ok(peek_int(port_tls, "EXISTS %s", tls_key(port_tls, 21, 0)) == 0,
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
    redirects_over_tls();

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
