/* main.c -- feed_server: a small HTTP/JSON feed service on feedcache.
 *
 *   GET    /                         an HTML page: a feed with infinite scroll
 *   GET    /users/{uid}/feed?limit=N&cursor=TOKEN   one page of uid's feed
 *   GET    /users/{uid}/feed/newer?cursor=TOKEN&limit=N   items newer than the cursor
 *   POST   /users/{uid}/items        {"id":..,"score":..}   new row, then feed_on_insert
 *   PUT    /users/{uid}/items        {"id":..,"score":..}   new score, then feed_on_insert
 *   PUT    /users/{uid}/items/{id}   {"score":..}           the same, id in the path
 *   DELETE /users/{uid}/items/{id}                           row gone, then feed_on_delete
 *   POST   /items/{id}/fanout        {"score":..,"uids":[..]} one row per uid, then feed_fanout
 *   GET    /metrics                  Prometheus text
 *   GET    /healthz                  whether Redis and PostgreSQL answer
 *   OPTIONS on any of them           Allow, and the CORS preflight answer
 *
 * This file: options, the per-thread workers, the daemon, start and stop.
 * The rest is listed in server.h.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "server.h"

#define RETRY_OPEN_MS 1000      /* least time between two feed_open / PQconnect tries per worker */
#define MEMORY_LIMIT  (256 * 1024)  /* per connection: well above http.c's limits */

options opt;
pthread_mutex_t workers_lock = PTHREAD_MUTEX_INITIALIZER;
worker *workers;
static _Thread_local worker *self;

/* ---- workers: one per libmicrohttpd thread ---- */

worker *this_worker(void)
{
    worker *w;

    if (self)
        return self;
    w = calloc(1, sizeof *w);
    if (!w || !(w->c.stats = calloc(feed_stats_count() + 1, sizeof *w->c.stats))) {
        free(w);
        return NULL;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_mutex_lock(&workers_lock);
    w->next = workers;
    workers = w;
    pthread_mutex_unlock(&workers_lock);
    self = w;
    worker_feed(w);   /* open now: later counters then move by requests only */
    return w;
}

/* The worker's feedcache handle, opened on first use and, after a failed
 * open (both stores down), retried at most once per RETRY_OPEN_MS. */
feed *worker_feed(worker *w)
{
    int64_t t = now_us();
    int rc;

    if (w->feed)
        return w->feed;
    if (w->feed_attempt_us && t - w->feed_attempt_us < RETRY_OPEN_MS * 1000)
        return NULL;
    w->feed_attempt_us = t;
    rc = feed_open(&w->feed, &opt.cfg);
    if (rc != FEED_OK)
        fprintf(stderr, "feed_server: feed_open: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
    return w->feed;
}

/* The worker's libpq connection for writes, with the same retry pacing.
 * connect_timeout comes first so that one in the conninfo wins. */
PGconn *worker_pg(worker *w, int force)
{
    const char *keys[] = { "connect_timeout", "dbname", NULL };
    const char *vals[] = { "3", opt.cfg.pg_conninfo, NULL };
    int64_t t = now_us();

    if (w->pg && PQstatus(w->pg) == CONNECTION_OK)
        return w->pg;
    if (!force && w->pg_attempt_us && t - w->pg_attempt_us < RETRY_OPEN_MS * 1000)
        return NULL;
    w->pg_attempt_us = t;
    if (w->pg)
        PQreset(w->pg);
    else
        w->pg = PQconnectdbParams(keys, vals, 1);
    return w->pg && PQstatus(w->pg) == CONNECTION_OK ? w->pg : NULL;
}

void workers_close(void)
{
    pthread_mutex_lock(&workers_lock);
    while (workers) {
        worker *w = workers;
        workers = w->next;
        feed_close(w->feed);
        if (w->pg)
            PQfinish(w->pg);
        pthread_mutex_destroy(&w->lock);
        free(w->c.stats);
        free(w);
    }
    pthread_mutex_unlock(&workers_lock);
}

/* ---- options ---- */

static void usage(FILE *out)
{
    fprintf(out,
"usage: feed_server [options]\n"
"  --port N            HTTP port (default $FEED_HTTP_PORT or 8080; 0 = any free port)\n"
"  --bind ADDR         listen address (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
"  --cors-origin O     send Access-Control-Allow-Origin: O (\"*\" for any; default\n"
"                      $FEED_CORS_ORIGIN, else no CORS headers)\n"
"  --redis-host H      (default $FEED_REDIS_HOST or 127.0.0.1)\n"
"  --redis-port N      (default $FEED_REDIS_PORT or 6379)\n"
"  --redis-user U      Redis ACL user (default none)\n"
"  --redis-password P  (default $FEED_REDIS_PASSWORD or none; prefer the variable)\n"
"  --pg CONNINFO       libpq connection string (default $FEED_PG_CONNINFO, else libpq's PG* defaults)\n"
"  --table T           the feed table (default feed_entry; columns uid, score, id)\n"
"  --max-len N         most entries cached per feed (default 1000)\n"
"  --max-page N        largest limit accepted (default 100)\n"
"  --ttl SECONDS       cache TTL, 0 = none (default 604800)\n"
"  --redis-timeout MS  longest wait on Redis before a page comes from PostgreSQL\n"
"                      (redis_timeout_ms, default 250)\n"
"  --pg-timeout MS     longest wait on PostgreSQL (pg_timeout_ms, default 2000)\n"
"  --threads N         worker threads, one feedcache handle each (default 4)\n"
"  --max-body BYTES    largest request body (default 1048576)\n"
"  --max-fanout N      most uids in one fan-out (default 10000)\n"
"  --quiet             no request log on stderr\n"
"Prints \"listening on PORT\" on stdout once it accepts connections; stops on SIGINT or SIGTERM.\n");
}

static uint64_t num_arg(const char *name, const char *s, uint64_t min, uint64_t max)
{
    uint64_t v;

    if (parse_u64(s, max, &v) != 0 || v < min) {
        fprintf(stderr, "feed_server: %s must be an integer in %" PRIu64 "..%" PRIu64 "\n",
                name, min, max);
        exit(2);
    }
    return v;
}

static void defaults(void)
{
    const char *e;

    feed_config_init(&opt.cfg);
    opt.bind = "127.0.0.1";
    opt.port = 8080;
    opt.threads = 4;
    opt.max_body = 1048576;
    opt.max_fanout = 10000;
    if ((e = getenv("FEED_HTTP_PORT")) && *e)
        opt.port = (unsigned)num_arg("FEED_HTTP_PORT", e, 0, 65535);
    if ((e = getenv("FEED_CORS_ORIGIN")) && *e)
        opt.cors_origin = e;
    if ((e = getenv("FEED_REDIS_HOST")) && *e)
        opt.cfg.redis_host = e;
    if ((e = getenv("FEED_REDIS_PORT")) && *e)
        opt.cfg.redis_port = (int)num_arg("FEED_REDIS_PORT", e, 1, 65535);
    if ((e = getenv("FEED_REDIS_PASSWORD")) && *e)
        opt.cfg.redis_password = e;
    if ((e = getenv("FEED_PG_CONNINFO")))
        opt.cfg.pg_conninfo = e;
}

static void parse_options(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "port", required_argument, NULL, 'p' },
        { "bind", required_argument, NULL, 'b' },
        { "cors-origin", required_argument, NULL, 'C' },
        { "redis-host", required_argument, NULL, 'H' },
        { "redis-port", required_argument, NULL, 'P' },
        { "redis-user", required_argument, NULL, 'U' },
        { "redis-password", required_argument, NULL, 'W' },
        { "pg", required_argument, NULL, 'g' },
        { "table", required_argument, NULL, 'X' },
        { "max-len", required_argument, NULL, 'l' },
        { "max-page", required_argument, NULL, 'm' },
        { "ttl", required_argument, NULL, 't' },
        { "redis-timeout", required_argument, NULL, 'R' },
        { "pg-timeout", required_argument, NULL, 'G' },
        { "threads", required_argument, NULL, 'T' },
        { "max-body", required_argument, NULL, 'B' },
        { "max-fanout", required_argument, NULL, 'F' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 }
    };
    int ch;

    defaults();
    while ((ch = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (ch) {
        case 'p': opt.port = (unsigned)num_arg("--port", optarg, 0, 65535); break;
        case 'b': opt.bind = optarg; break;
        case 'C': opt.cors_origin = *optarg ? optarg : NULL; break;
        case 'H': opt.cfg.redis_host = optarg; break;
        case 'P': opt.cfg.redis_port = (int)num_arg("--redis-port", optarg, 1, 65535); break;
        case 'U': opt.cfg.redis_user = optarg; break;
        case 'W': opt.cfg.redis_password = *optarg ? optarg : NULL; break;
        case 'g': opt.cfg.pg_conninfo = optarg; break;
        case 'X': opt.cfg.table = optarg; break;
        case 'l': opt.cfg.max_len = (uint32_t)num_arg("--max-len", optarg, 1, 10000000); break;
        case 'm': opt.cfg.max_page = (uint32_t)num_arg("--max-page", optarg, 1, 100000); break;
        case 't': opt.cfg.ttl_seconds = (uint32_t)num_arg("--ttl", optarg, 0, UINT32_MAX / 1000); break;
        case 'R': opt.cfg.redis_timeout_ms = (uint32_t)num_arg("--redis-timeout", optarg, 1, 3600000); break;
        case 'G': opt.cfg.pg_timeout_ms = (uint32_t)num_arg("--pg-timeout", optarg, 1, 3600000); break;
        case 'T': opt.threads = (unsigned)num_arg("--threads", optarg, 1, 1024); break;
        case 'B': opt.max_body = (size_t)num_arg("--max-body", optarg, 64, 1u << 30); break;
        case 'F': opt.max_fanout = (size_t)num_arg("--max-fanout", optarg, 1, 1000000); break;
        case 'q': opt.quiet = 1; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "feed_server: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        exit(2);
    }
}

/* ---- start and stop ---- */

/* Fail now on what retrying cannot fix (a bad config, a wrong password, a
 * missing table); start anyway when a store is merely down, with a warning
 * naming it: feed_open succeeds with Redis down by design, and a wrong port
 * would otherwise go unnoticed. Returns 0, or the exit status. */
static int probe_stores(void)
{
    feed *probe;
    int rc = feed_open(&probe, &opt.cfg);

    if (rc == FEED_EINVAL || rc == FEED_EREDIS || rc == FEED_EPG || rc == FEED_ENOMEM) {
        fprintf(stderr, "feed_server: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
        return 1;
    }
    if (rc != FEED_OK) {
        fprintf(stderr, "feed_server: warning: no store answers (%s); serving 503 until one "
                "does\n", feed_errmsg(NULL));
        return 0;
    }
    {
        feed_health_info h;
        if (feed_health(probe, &h) != FEED_OK) {
            if (!h.redis_up)
                fprintf(stderr, "feed_server: warning: Redis is down, pages come from "
                        "PostgreSQL until it answers: %s\n", h.redis_msg);
            if (!h.pg_up)
                fprintf(stderr, "feed_server: warning: PostgreSQL is down, only cached pages "
                        "can be served until it answers: %s\n", h.pg_msg);
        }
    }
    feed_close(probe);
    return 0;
}

static struct MHD_Daemon *start_daemon(void)
{
    struct sockaddr_in sin;
    struct sockaddr_in6 sin6;
    struct sockaddr *sa;
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;

    memset(&sin, 0, sizeof sin);
    memset(&sin6, 0, sizeof sin6);
    if (inet_pton(AF_INET, opt.bind, &sin.sin_addr) == 1) {
        sin.sin_family = AF_INET;
        sin.sin_port = htons((uint16_t)opt.port);
        sa = (struct sockaddr *)&sin;
    } else if (inet_pton(AF_INET6, opt.bind, &sin6.sin6_addr) == 1) {
        sin6.sin6_family = AF_INET6;
        sin6.sin6_port = htons((uint16_t)opt.port);
        sa = (struct sockaddr *)&sin6;
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "feed_server: --bind %s is not an IPv4 or IPv6 address\n", opt.bind);
        exit(2);
    }
    return MHD_start_daemon(flags, (uint16_t)opt.port, NULL, NULL, on_request, NULL,
                            MHD_OPTION_SOCK_ADDR, sa,
                            MHD_OPTION_THREAD_POOL_SIZE, (unsigned)opt.threads,
                            MHD_OPTION_URI_LOG_CALLBACK, on_uri, NULL,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)MEMORY_LIMIT,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000,
                            MHD_OPTION_END);
}

int main(int argc, char **argv)
{
    const union MHD_DaemonInfo *info;
    struct MHD_Daemon *d;
    sigset_t sigs;
    unsigned port;
    int rc, sig;

    parse_options(argc, argv);
    if ((rc = probe_stores()) != 0)
        return rc;
    if (writes_init() != 0) {
        fprintf(stderr, "feed_server: out of memory\n");
        return 1;
    }

    /* Signals go to the main thread only: block them before any thread starts
     * (threads inherit the mask), then wait for them. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (!(d = start_daemon())) {
        fprintf(stderr, "feed_server: cannot listen on %s port %u: %s\n", opt.bind, opt.port,
                strerror(errno));
        return 1;
    }
    info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    port = info ? (unsigned)info->port : opt.port;
    printf("listening on %u\n", port);
    fflush(stdout);
    fprintf(stderr, "feed_server: http://%s:%u/ (%u threads, Redis %s:%d, max_len %u, "
            "max_page %u, CORS %s)\n", opt.bind, port, opt.threads, opt.cfg.redis_host,
            opt.cfg.redis_port, opt.cfg.max_len, opt.cfg.max_page,
            opt.cors_origin ? opt.cors_origin : "off");

    do {
        if (sigwait(&sigs, &sig) != 0)
            sig = SIGTERM;
    } while (sig != SIGINT && sig != SIGTERM);

    fprintf(stderr, "feed_server: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    MHD_stop_daemon(d);   /* joins the workers: their handles are ours now */
    workers_close();
    writes_free();
    return 0;
}
