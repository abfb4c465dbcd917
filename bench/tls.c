/* tls.c -- section "tls": what TLS to Redis costs a cached page, against
 * plaintext, side by side in one run: page latency p50/p99 and Redis
 * process CPU per page, on the blocking API and on the async API (one
 * request at a time on a libevent loop: the latency of a call, not a
 * flood).
 *
 * The bench's own Redis serves both: a TLS port is opened on it at run
 * time (CONFIG SET tls-port, with a certificate the section makes with the
 * openssl CLI), so both kinds of handle read the same cached feed from the
 * same process and its CPU counts both alike. Interleaved rounds
 * (run_rounds). Needs a build with TLS (make HIREDIS=DIR); otherwise the
 * section says so and measures nothing. */
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "bench.h"
#include "reads.h"
#include "feedcache_libevent.h"

typedef struct tls_async {
    struct event_base *base;
    feed_async        *a;
    int                done, rc;
} tls_async;

static void tls_on_page(feed_async *a, int rc, feed_result *page, void *arg)
{
    tls_async *x = arg;

    (void)a;
    x->done = 1;
    x->rc = rc == FEED_OK && page->count == PAGE_LIMIT ? 0 : -1;
    if (page)
        feed_result_free(page);
}

static int tls_op_async_page(void *arg)
{
    tls_async *x = arg;

    x->done = 0;
    if (feed_async_page(x->a, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, tls_on_page, x) != FEED_OK)
        return -1;
    while (!x->done)
        event_base_loop(x->base, EVLOOP_ONCE);
    return x->rc;
}

static int tls_op_page(void *arg)
{
    feed *f = arg;
    feed_result r;
    int rc = feed_page(f, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, &r);

    rc = rc == FEED_OK && r.count == PAGE_LIMIT && r.source == FEED_SOURCE_CACHE ? 0 : -1;
    feed_result_free(&r);
    return rc;
}

/* A CA and a server certificate for 127.0.0.1 in dir. */
static void make_cert(const char *dir)
{
    char cmd[2048];

    snprintf(cmd, sizeof cmd,
             "set -e; mkdir -p '%s'; cd '%s';"
             "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj '/CN=bench CA'"
             " -keyout ca.key -out ca.crt 2>/dev/null;"
             "openssl req -newkey rsa:2048 -nodes -subj '/CN=127.0.0.1' -keyout server.key"
             " -out server.csr 2>/dev/null;"
             "printf 'subjectAltName=IP:127.0.0.1\\n' >server.ext;"
             "openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2"
             " -extfile server.ext -out server.crt 2>/dev/null;"
             "chmod 0644 server.key", dir, dir);
    if (system(cmd) != 0)
        die("tls: making the certificates with the openssl CLI failed");
}

/* Open a TLS port on the bench's Redis; returns it. */
static int open_tls_port(redisContext *r, const char *dir)
{
    char path[600];
    int base = atoi(env_or("FEED_REDIS_PORT", "6379"));

    snprintf(path, sizeof path, "%s/server.crt", dir);
    b_cmd_ok(r, "CONFIG SET tls-cert-file %s", path);
    snprintf(path, sizeof path, "%s/server.key", dir);
    b_cmd_ok(r, "CONFIG SET tls-key-file %s", path);
    snprintf(path, sizeof path, "%s/ca.crt", dir);
    b_cmd_ok(r, "CONFIG SET tls-ca-cert-file %s", path);
    b_cmd_ok(r, "CONFIG SET tls-auth-clients no");
    for (int i = 1; i < 200; i++) {
        int port = base + 7 * i;
        redisReply *x;
        if (port > 65535)
            break;
        x = redisCommand(r, "CONFIG SET tls-port %d", port);
        if (x && x->type == REDIS_REPLY_STATUS) {
            freeReplyObject(x);
            return port;
        }
        if (x)
            freeReplyObject(x);
    }
    die("tls: no free port for Redis's tls-port");
}

void section_tls(void)
{
    FILE *md = out_section("tls");
    char dir[512], ca[600];
    redisContext *r;
    feed_config cfg;
    feed *plain, *tls;
    tls_async ap = { 0 }, at = { 0 };
    int port, rounds = q_rounds(9);
    double secs = q_secs(2.0);

    fprintf(md, "## TLS to Redis: a cached page over TLS and in plaintext\n\n");
    if (!feed_tls_supported()) {
        fprintf(md, "Not measured: this build has no TLS (feed_tls_supported() is 0; "
                "build with `make HIREDIS=DIR`).\n");
        fclose(md);
        return;
    }
    r = b_redis();
    snprintf(dir, sizeof dir, "%s/tls-pki", env_or("FEED_SERVERS_DIR", "/tmp"));
    make_cert(dir);
    port = open_tls_port(r, dir);
    snprintf(ca, sizeof ca, "%s/ca.crt", dir);

    plain = b_open("btls", 1000);
    b_config(&cfg, "btls", 1000);
    cfg.redis_port = port;
    cfg.redis_tls = 1;
    cfg.redis_tls_ca_file = ca;
    if (feed_open(&tls, &cfg) != FEED_OK || *feed_errmsg(tls))
        die("tls: feed_open over TLS: %s", feed_errmsg(NULL));
    prime(plain, UID_1K, PAGE_LIMIT);
    if (tls_op_page(plain) != 0 || tls_op_page(tls) != 0)
        die("tls: the first page is not cached");

    b_config(&cfg, "btls", 1000);
    ap.base = event_base_new();
    if (feed_async_open_libevent(&ap.a, &cfg, ap.base) != FEED_OK)
        die("tls: async open: %s", feed_async_errmsg(NULL));
    cfg.redis_port = port;
    cfg.redis_tls = 1;
    cfg.redis_tls_ca_file = ca;
    at.base = event_base_new();
    if (feed_async_open_libevent(&at.a, &cfg, at.base) != FEED_OK)
        die("tls: async open over TLS: %s", feed_async_errmsg(NULL));
    /* the first calls connect */
    if (tls_op_async_page(&ap) != 0 || tls_op_async_page(&at) != 0)
        die("tls: an async first page failed");

    {
        variant v[] = {
            { .name = "blocking, plaintext", .op = tls_op_page, .ctx = plain },
            { .name = "blocking, TLS", .op = tls_op_page, .ctx = tls },
            { .name = "async (libevent), plaintext", .op = tls_op_async_page, .ctx = &ap },
            { .name = "async (libevent), TLS", .op = tls_op_async_page, .ctx = &at },
        };
        size_t nv = sizeof v / sizeof v[0];

        run_rounds(v, nv, rounds, secs, 200, r, redis_pid(r));
        fprintf(md, "The first page (%d items) of a cached feed, one call at a time on one "
                "connection; the same Redis process serves the plaintext port and the TLS "
                "port (CONFIG SET tls-port), TLS 1.3, verification on. %d interleaved rounds "
                "of %.1f s per kind; latencies pooled, the rest medians over rounds.\n\n",
                PAGE_LIMIT, rounds, secs);
        fprintf(md, "| API, transport | pages/s | p50 µs | p99 µs | Redis CPU µs/page |\n"
                    "| --- | ---: | ---: | ---: | ---: |\n");
        for (size_t i = 0; i < nv; i++)
            fprintf(md, "| %s | %s | %s | %s | %s |\n", v[i].name, NUM(sm_median(&v[i].rate)),
                    NUM(sm_pct(&v[i].lat_us, 50)), NUM(sm_pct(&v[i].lat_us, 99)),
                    NUM(sm_median(&v[i].cpu_us)));
        fprintf(md, "\nTLS / plaintext, paired by round: blocking %.2fx Redis CPU per page, "
                "%.2fx pages/s; async %.2fx Redis CPU per page, %.2fx pages/s.\n",
                paired_ratio_cpu(&v[1], &v[0]), paired_ratio(&v[1], &v[0]),
                paired_ratio_cpu(&v[3], &v[2]), paired_ratio(&v[3], &v[2]));
        out_summary("tls_cpu_blocking", "Redis CPU per cached page, TLS / plaintext (blocking)",
                    "report", "report", "%.2fx", paired_ratio_cpu(&v[1], &v[0]));
        out_summary("tls_p99_blocking", "cached page p99, TLS vs plaintext (blocking)", "report",
                    "report", "%s vs %s µs", NUM(sm_pct(&v[1].lat_us, 99)),
                    NUM(sm_pct(&v[0].lat_us, 99)));
        out_summary("tls_cpu_async", "Redis CPU per cached page, TLS / plaintext (async)",
                    "report", "report", "%.2fx", paired_ratio_cpu(&v[3], &v[2]));
        for (size_t i = 0; i < nv; i++)
            variant_free(&v[i]);
    }
    feed_async_close(ap.a);
    feed_async_close(at.a);
    event_base_free(ap.base);
    event_base_free(at.base);
    feed_close(plain);
    feed_close(tls);
    b_cmd_ok(r, "CONFIG SET tls-port 0");
    redisFree(r);
    fclose(md);
}
