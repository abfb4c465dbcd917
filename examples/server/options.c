/* options.c -- the flags and environment both servers take, and the start
 * and stop both mains share. Every field of feed_config is a flag under its
 * library name (feed_config_set checks it), a few under shorter names too. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "server.h"

options opt;

/* The example's short names for feed_config fields, kept from its first
 * versions; the library's names work as well. */
static const char *const aliases[][2] = {
    { "pg", "pg-conninfo" },               { "ttl", "ttl-seconds" },
    { "redis-timeout", "redis-timeout-ms" }, { "pg-timeout", "pg-timeout-ms" },
};
#define N_ALIASES (sizeof aliases / sizeof aliases[0])

static void usage(FILE *out, const char *threads_help)
{
    fprintf(out,
"usage: %s [options]\n"
"  --port N            HTTP port (default $FEED_HTTP_PORT or 8080; 0 = any free port)\n"
"  --bind ADDR         listen address (default 127.0.0.1; 0.0.0.0 or :: for all)\n"
"  --cors-origin O     send Access-Control-Allow-Origin: O (\"*\" for any; default\n"
"                      $FEED_CORS_ORIGIN, else no CORS headers)\n"
"  --threads N         %s\n"
"  --max-body BYTES    largest request body (default 1048576)\n"
"  --max-fanout N      most uids in one fan-out (default 10000)\n"
"  --merge-authors L   the authors merged into every timeline: ids separated by commas,\n"
"                      at most %d, each once (default $FEED_MERGE_AUTHORS, else none;\n"
"                      needs --author-table)\n"
"  --quiet             no request log on stderr\n"
"The fields of feed_config, by their names with dashes (defaults: the library's;\n"
"$FEED_REDIS_HOST, $FEED_REDIS_PORT, $FEED_REDIS_PASSWORD, $FEED_PG_CONNINFO and\n"
"$FEED_AUTHOR_TABLE set those fields; --pg, --ttl, --redis-timeout and --pg-timeout\n"
"are pg-conninfo, ttl-seconds, redis-timeout-ms and pg-timeout-ms):\n",
            progname, threads_help, FEED_MERGE_MAX);
    for (size_t i = 0; i < feed_config_field_count(); i++) {
        const feed_config_field *d = feed_config_field_get(i);

        fprintf(out, "  --%-22s %s\n", d->flag, d->help);
    }
    fputs("Prints \"listening on PORT\" on stdout once it accepts connections; stops on SIGINT "
          "or SIGTERM.\n", out);
}

static uint64_t num_arg(const char *name, const char *s, uint64_t min, uint64_t max)
{
    uint64_t v;

    if (parse_u64(s, max, &v) != 0 || v < min) {
        fprintf(stderr, "%s: %s must be an integer in %" PRIu64 "..%" PRIu64 "\n",
                progname, name, min, max);
        exit(2);
    }
    return v;
}

/* A feed_config field from the command line (--NAME) or the environment;
 * shown is how the user spelled it. A value the library refuses stops the
 * program (exit status 2) with the library's reason. */
static void config_arg(const char *name, const char *shown, const char *value)
{
    if (feed_config_set(&opt.cfg, name, value) != FEED_OK) {
        fprintf(stderr, "%s: %s: %s\n", progname, shown, feed_errmsg(NULL));
        exit(2);
    }
}

/* --merge-authors: "2,3,5", author ids (decimal digits, 0..INT64_MAX)
 * separated by single commas, at most FEED_MERGE_MAX, none twice; "" is
 * none. Anything else stops the program (exit status 2). */
static void merge_authors_arg(const char *shown, const char *list)
{
    const char *p = list;
    size_t n = 0;

    opt.n_merge = 0;
    if (!*list)
        return;
    for (;;) {
        size_t len = strcspn(p, ",");
        char num[24];
        int64_t a;

        if (len == 0 || len >= sizeof num) {
            fprintf(stderr, "%s: %s \"%s\": %s\n", progname, shown, list, len ?
                    "an author id is too long" : "an empty author id (ids are separated by "
                    "single commas, as in 2,3,5)");
            exit(2);
        }
        memcpy(num, p, len);
        num[len] = '\0';
        if (parse_i64_nonneg(num, &a) != 0) {
            fprintf(stderr, "%s: %s: \"%s\" is not an author id (decimal digits, at most "
                    "9223372036854775807)\n", progname, shown, num);
            exit(2);
        }
        for (size_t i = 0; i < n; i++)
            if (opt.merge_authors[i] == a) {
                fprintf(stderr, "%s: %s: author %s is listed twice\n", progname, shown, num);
                exit(2);
            }
        if (n == FEED_MERGE_MAX) {
            fprintf(stderr, "%s: %s: more than %d authors (FEED_MERGE_MAX)\n", progname, shown,
                    FEED_MERGE_MAX);
            exit(2);
        }
        opt.merge_authors[n++] = a;
        p += len;
        if (!*p)
            break;
        p++;     /* the comma: a trailing one is an empty id next */
    }
    opt.n_merge = n;
}

static void defaults(void)
{
    static const char *const env[][2] = {
        { "FEED_REDIS_HOST", "redis-host" }, { "FEED_REDIS_PORT", "redis-port" },
        { "FEED_REDIS_PASSWORD", "redis-password" }, { "FEED_AUTHOR_TABLE", "author-table" },
        { "FEED_PG_CONNINFO", "pg-conninfo" },
    };
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
    for (size_t i = 0; i < sizeof env / sizeof env[0]; i++)
        if ((e = getenv(env[i][0])) && *e)
            config_arg(env[i][1], env[i][0], e);
    if ((e = getenv("FEED_MERGE_AUTHORS")))
        merge_authors_arg("FEED_MERGE_AUTHORS", e);
}

/* The example's own flags, the aliases ('a'), then one flag per field of
 * feed_config ('c'), and the end; NULL: no memory. */
static struct option *long_options(void)
{
    static const struct option own[] = {
        { "port", required_argument, NULL, 'p' },
        { "bind", required_argument, NULL, 'b' },
        { "cors-origin", required_argument, NULL, 'C' },
        { "merge-authors", required_argument, NULL, 'M' },
        { "threads", required_argument, NULL, 'T' },
        { "max-body", required_argument, NULL, 'B' },
        { "max-fanout", required_argument, NULL, 'F' },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
    };
    size_t n_own = sizeof own / sizeof own[0], n = feed_config_field_count();
    struct option *o = calloc(n_own + N_ALIASES + n + 1, sizeof *o);

    if (!o)
        return NULL;
    memcpy(o, own, sizeof own);
    for (size_t i = 0; i < N_ALIASES; i++)
        o[n_own + i] = (struct option){ aliases[i][0], required_argument, NULL, 'a' };
    for (size_t i = 0; i < n; i++)
        o[n_own + N_ALIASES + i] =
            (struct option){ feed_config_field_get(i)->flag, required_argument, NULL, 'c' };
    return o;
}

static const char *alias_field(const char *name)
{
    for (size_t i = 0; i < N_ALIASES; i++)
        if (strcmp(aliases[i][0], name) == 0)
            return aliases[i][1];
    return name;
}

static void parse_options(int argc, char **argv, const char *threads_help)
{
    struct option *longopts = long_options();
    char shown[48];
    int ch, idx;

    if (!longopts) {
        fprintf(stderr, "%s: out of memory\n", progname);
        exit(1);
    }
    defaults();
    while ((ch = getopt_long(argc, argv, "h", longopts, &idx)) != -1) {
        switch (ch) {
        case 'p': opt.port = (unsigned)num_arg("--port", optarg, 0, 65535); break;
        case 'b': opt.bind = optarg; break;
        case 'C': opt.cors_origin = *optarg ? optarg : NULL; break;
        case 'a':
        case 'c':
            snprintf(shown, sizeof shown, "--%s", longopts[idx].name);
            config_arg(alias_field(longopts[idx].name), shown, optarg);
            break;
        case 'T': opt.threads = (unsigned)num_arg("--threads", optarg, 1, 1024); break;
        case 'B': opt.max_body = (size_t)num_arg("--max-body", optarg, 64, 1u << 30); break;
        case 'F': opt.max_fanout = (size_t)num_arg("--max-fanout", optarg, 1, 1000000); break;
        case 'M': merge_authors_arg("--merge-authors", optarg); break;
        case 'q': opt.quiet = 1; break;
        case 'h': usage(stdout, threads_help); exit(0);
        default: usage(stderr, threads_help); exit(2);
        }
    }
    free(longopts);   /* optarg points into argv; the names shown were copied */
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument \"%s\"\n", progname, argv[optind]);
        usage(stderr, threads_help);
        exit(2);
    }
    if (opt.n_merge > 0 && !opt.cfg.author_table) {
        fprintf(stderr, "%s: --merge-authors needs --author-table (the table of the authors' "
                "posts, e.g. author_post of sql/authors.sql)\n", progname);
        exit(2);
    }
}

/* ---- start and stop ---- */

int server_start(int argc, char **argv, const char *threads_help, sigset_t *sigs)
{
    int rc;

    parse_options(argc, argv, threads_help);
    if ((rc = policy_probe(&opt.cfg, progname)) != 0)
        return rc;
    if (writes_init() != 0) {
        fprintf(stderr, "%s: out of memory\n", progname);
        return 1;
    }
    /* Signals go to the main thread only: block them before any thread
     * starts (threads inherit the mask); server_wait waits for them. */
    sigemptyset(sigs);
    sigaddset(sigs, SIGINT);
    sigaddset(sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

socklen_t server_address(struct sockaddr_storage *ss)
{
    struct sockaddr_in *sin = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ss;

    memset(ss, 0, sizeof *ss);
    if (inet_pton(AF_INET, opt.bind, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons((uint16_t)opt.port);
        return sizeof *sin;
    }
    if (inet_pton(AF_INET6, opt.bind, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons((uint16_t)opt.port);
        return sizeof *sin6;
    }
    fprintf(stderr, "%s: --bind %s is not an IPv4 or IPv6 address\n", progname, opt.bind);
    exit(2);
}

void server_wait(sigset_t *sigs, unsigned port, const char *workers)
{
    int sig;

    printf("listening on %u\n", port);
    fflush(stdout);
    fprintf(stderr, "%s: http://%s:%u/ (%u %s, Redis %s:%d, max_len %u, max_page %u, "
            "CORS %s, authors' table %s, %zu authors merged)\n", progname, opt.bind, port,
            opt.threads, workers, opt.cfg.redis_host, opt.cfg.redis_port, opt.cfg.max_len,
            opt.cfg.max_page, opt.cors_origin ? opt.cors_origin : "off",
            opt.cfg.author_table ? opt.cfg.author_table : "none", opt.n_merge);
    do {
        if (sigwait(sigs, &sig) != 0)
            sig = SIGTERM;
    } while (sig != SIGINT && sig != SIGTERM);
    fprintf(stderr, "%s: %s: stopping\n", progname, sig == SIGINT ? "SIGINT" : "SIGTERM");
}
