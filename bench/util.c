/* util.c -- see bench.h. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "internal.h"   /* the member codec and key format, for the peers */

static void say(const char *prefix, const char *fmt, va_list ap)
{
    fprintf(stderr, "%s", prefix);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
}

void die(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    say("feedbench: ", fmt, ap);
    va_end(ap);
    exit(1);
}

void note(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    say("  .. ", fmt, ap);
    va_end(ap);
}

const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v && *v ? v : dflt;
}

uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double now_s(void)
{
    return (double)now_ns() / 1e9;
}

void sleep_s(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

    nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ samples */

void sm_add(samples *s, double x)
{
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 256;
        double *v = realloc(s->v, cap * sizeof *v);
        if (!v)
            die("out of memory");
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

void sm_free(samples *s)
{
    free(s->v);
    memset(s, 0, sizeof *s);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

double sm_pct(const samples *s, double p)
{
    double *c, r;
    size_t k;

    if (s->n == 0)
        return NAN;
    c = malloc(s->n * sizeof *c);
    if (!c)
        die("out of memory");
    memcpy(c, s->v, s->n * sizeof *c);
    qsort(c, s->n, sizeof *c, cmp_double);
    /* nearest rank */
    k = (size_t)ceil(p / 100.0 * (double)s->n);
    if (k > 0)
        k--;
    if (k >= s->n)
        k = s->n - 1;
    r = c[k];
    if (p == 50.0 && s->n % 2 == 0)   /* the usual median of an even count */
        r = (c[s->n / 2 - 1] + c[s->n / 2]) / 2;
    free(c);
    return r;
}

double sm_median(const samples *s)
{
    return sm_pct(s, 50.0);
}

double sm_min(const samples *s)
{
    double m = INFINITY;

    for (size_t i = 0; i < s->n; i++)
        m = s->v[i] < m ? s->v[i] : m;
    return s->n ? m : NAN;
}

double sm_max(const samples *s)
{
    double m = -INFINITY;

    for (size_t i = 0; i < s->n; i++)
        m = s->v[i] > m ? s->v[i] : m;
    return s->n ? m : NAN;
}

/* ------------------------------------------------------------ Redis */

redisContext *b_redis(void)
{
    struct timeval tv = { 60, 0 };
    redisContext *c = redisConnectWithTimeout(env_or("FEED_REDIS_HOST", "127.0.0.1"),
                                              atoi(env_or("FEED_REDIS_PORT", "6379")), tv);

    if (!c || c->err)
        die("Redis: %s", c ? c->errstr : "out of memory");
    redisSetTimeout(c, tv);
    return c;
}

static redisReply *checked(redisContext *c, redisReply *r, const char *what)
{
    if (!r)
        die("Redis %s: %s", what, c->errstr);
    if (r->type == REDIS_REPLY_ERROR)
        die("Redis %s: %s", what, r->str);
    return r;
}

redisReply *b_cmd(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    return checked(c, r, fmt);
}

redisReply *b_argv(redisContext *c, int argc, const char **argv, const size_t *lens)
{
    return checked(c, redisCommandArgv(c, argc, argv, lens), argv[0]);
}

void b_cmd_ok(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;

    va_start(ap, fmt);
    r = redisvCommand(c, fmt, ap);
    va_end(ap);
    freeReplyObject(checked(c, r, fmt));
}

long long b_cmd_int(redisContext *c, const char *fmt, ...)
{
    va_list ap;
    redisReply *r;
    long long v;

    va_start(ap, fmt);
    r = checked(c, redisvCommand(c, fmt, ap), fmt);
    va_end(ap);
    if (r->type != REDIS_REPLY_INTEGER)
        die("Redis %s: not an integer reply", fmt);
    v = r->integer;
    freeReplyObject(r);
    return v;
}

void b_script_load(redisContext *c, const char *src, char sha[41])
{
    redisReply *r = b_cmd(c, "SCRIPT LOAD %s", src);

    if (r->type != REDIS_REPLY_STRING || r->len != 40)
        die("SCRIPT LOAD: unexpected reply");
    memcpy(sha, r->str, 40);
    sha[40] = '\0';
    freeReplyObject(r);
}

/* The value of "field:" in an INFO reply, as text up to the line's end. */
static int info_field(const char *info, const char *field, char *out, size_t cap)
{
    size_t flen = strlen(field);
    const char *p = info;

    while ((p = strstr(p, field)) != NULL) {
        if ((p == info || p[-1] == '\n') && p[flen] == ':') {
            const char *v = p + flen + 1;
            size_t n = strcspn(v, "\r\n");
            if (n >= cap)
                n = cap - 1;
            memcpy(out, v, n);
            out[n] = '\0';
            return 1;
        }
        p += flen;
    }
    return 0;
}

pid_t redis_pid(redisContext *c)
{
    redisReply *r = b_cmd(c, "INFO server");
    char v[32];
    pid_t pid;

    if (!info_field(r->str, "process_id", v, sizeof v))
        die("INFO server: no process_id");
    pid = (pid_t)atol(v);
    freeReplyObject(r);
    return pid;
}

cstat cmdstat(redisContext *c, const char *names)
{
    redisReply *r = b_cmd(c, "INFO commandstats");
    cstat s = { 0, 0 };
    const char *p = names + (names[0] == '=');   /* '=': see variant.cmd */

    /* names: one command, or several separated by commas, summed */
    while (*p) {
        char field[64], v[256];
        size_t len = strcspn(p, ",");
        cstat one = { 0, 0 };
        snprintf(field, sizeof field, "cmdstat_%.*s", (int)len, p);
        if (info_field(r->str, field, v, sizeof v))
            sscanf(v, "calls=%llu,usec=%llu", &one.calls, &one.usec);
        s.usec += one.usec;
        if (s.calls == 0)
            s.calls = one.calls;   /* calls: the first command's */
        p += len;
        if (*p == ',')
            p++;
    }
    freeReplyObject(r);
    return s;
}

/* ------------------------------------------------------------ PostgreSQL */

PGconn *b_pg(void)
{
    PGconn *pg = PQconnectdb(env_or("FEED_PG_CONNINFO", ""));

    if (PQstatus(pg) != CONNECTION_OK)
        die("PostgreSQL: %s", PQerrorMessage(pg));
    return pg;
}

PGresult *b_sql(PGconn *pg, const char *sql)
{
    PGresult *res = PQexec(pg, sql);

    if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
        die("SQL failed: %.200s: %s", sql, PQerrorMessage(pg));
    return res;
}

long long b_sql_int(PGconn *pg, const char *sql)
{
    PGresult *res = b_sql(pg, sql);
    long long v;

    if (PQntuples(res) != 1)
        die("%s: %d rows", sql, PQntuples(res));
    v = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return v;
}

pid_t pg_backend(PGconn *pg)
{
    return (pid_t)b_sql_int(pg, "SELECT pg_backend_pid()");
}

size_t sql_feed(PGconn *pg, int64_t uid, feed_item **out)
{
    char sql[200];
    PGresult *res;
    size_t n;

    snprintf(sql, sizeof sql, "SELECT score, id FROM feed_entry WHERE uid = %lld"
             " ORDER BY score DESC, id DESC", (long long)uid);
    res = b_sql(pg, sql);
    n = (size_t)PQntuples(res);
    *out = malloc((n + 1) * sizeof **out);
    if (!*out)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        (*out)[i].score = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
        (*out)[i].id = strtoll(PQgetvalue(res, (int)i, 1), NULL, 10);
    }
    PQclear(res);
    return n;
}

/* ------------------------------------------------------------ servers */

int b_servers(const char *cmd)
{
    const char *srv = getenv("FEED_SERVERS"), *dir = getenv("FEED_SERVERS_DIR");
    char line[2048];

    if (!srv || !*srv || !dir || !*dir)
        return -1;
    snprintf(line, sizeof line, "'%s' %s '%s' >/dev/null", srv, cmd, dir);
    return system(line) == 0 ? 0 : -1;
}

/* ------------------------------------------------------------ feedcache */

void b_config(feed_config *cfg, const char *prefix, uint32_t max_len)
{
    feed_config_init(cfg);
    cfg->redis_host = env_or("FEED_REDIS_HOST", "127.0.0.1");
    cfg->redis_port = atoi(env_or("FEED_REDIS_PORT", "6379"));
    cfg->pg_conninfo = env_or("FEED_PG_CONNINFO", "");
    cfg->key_prefix = prefix;
    cfg->max_len = max_len;
    cfg->redis_timeout_ms = 30000;   /* 100,000-row installs take a while */
    if (strcmp(env_or("FEED_BENCH_CLUSTER", "0"), "1") == 0)   /* client_cpu on the cluster */
        cfg->redis_cluster = env_or("FEED_REDIS_CLUSTER", "");
}

feed *b_open(const char *prefix, uint32_t max_len)
{
    return b_open_with(prefix, max_len, NULL);
}

feed *b_open_with(const char *prefix, uint32_t max_len, const char *author_table)
{
    feed_config cfg;
    feed *f;
    int rc;

    b_config(&cfg, prefix, max_len);
    cfg.author_table = author_table;
    rc = feed_open(&f, &cfg);
    if (rc != FEED_OK)
        die("feed_open: %s: %s", feed_strerror(rc), feed_errmsg(NULL));
    /* The restart fence (on by default) drops every key of the prefix the
     * first time a handle meets this server: settle it now, with a hook on a
     * feed no one has, so that keys a section then writes straight into
     * Redis (the fan-outs' cached feeds) are not dropped by its first call. */
    if (feed_invalidate(f, INT64_MIN) != FEED_OK)
        die("settling the restart fence: %s", feed_errmsg(f));
    return f;
}

void b_cache_feeds(redisContext *c, const char *prefix, const int64_t *uids, size_t n,
                   int items)
{
    char (*args)[2][24] = malloc(((size_t)items + 1) * sizeof *args);
    const char **argv = malloc((4 + 2 * (size_t)items) * sizeof *argv);
    size_t *lens = malloc((4 + 2 * (size_t)items) * sizeof *lens);

    if (!args || !argv || !lens)
        die("out of memory");
    for (size_t i = 0; i < n; i++) {
        char key[64];
        int a = 2;
        b_key_copy(key, sizeof key, b_key(prefix, uids[i], ""));
        argv[0] = "ZADD";
        lens[0] = 4;
        argv[1] = key;
        lens[1] = strlen(key);
        for (int k = 0; k <= items; k++) {
            if (k == items) {
                snprintf(args[k][0], 24, "-inf");
                snprintf(args[k][1], 24, "end");
                lens[a + 1] = 3;
            } else {
                snprintf(args[k][0], 24, "%lld", 1600000000000LL + k * 1000);
                lens[a + 1] = member_of(2 * (k + 1), args[k][1]);
            }
            lens[a] = strlen(args[k][0]);
            argv[a++] = args[k][0];
            argv[a++] = args[k][1];
        }
        if (redisAppendCommandArgv(c, a, argv, lens) != REDIS_OK)
            die("pipeline failed");
        if (i % 1000 == 999 || i == n - 1) {
            for (size_t k = i - i % 1000; k <= i; k++) {
                redisReply *r;
                if (redisGetReply(c, (void **)&r) != REDIS_OK)
                    die("ZADD: %s", c->errstr);
                freeReplyObject(r);
            }
        }
    }
    free(args);
    free(argv);
    free(lens);
}

size_t member_of(int64_t id, char buf[24])
{
    return feed__member_encode(id, buf);
}

int member_id(const char *s, size_t len, int64_t *id)
{
    return feed__member_decode(s, len, id) == FEED_OK;
}

/* The generation of FEED_REDIS_*'s data set (base.h's feed__key_gen of its
 * run_id and master_replid), what the restart fence writes into keys. */
static char key_gen[FEED_KEY_GEN_LEN + 1];
static pthread_once_t key_gen_once = PTHREAD_ONCE_INIT;

static void key_gen_learn(void)
{
    redisContext *c = b_redis();
    redisReply *r = b_cmd(c, "INFO");
    char run_id[41], replid[41];

    if (r->type != REDIS_REPLY_STRING)
        die("INFO: not a string");
    if (!feed__info_id(r->str, "run_id", run_id) || !feed__info_id(r->str, "master_replid", replid))
        die("INFO: no run_id or master_replid");
    feed__key_gen(run_id, replid, key_gen);
    freeReplyObject(r);
    redisFree(c);
}

const char *b_key_of(const char *prefix, const char *table, int64_t uid, const char *suffix)
{
    static _Thread_local char bufs[8][256];   /* pgcmp.c calls it from threads */
    static _Thread_local unsigned next;
    char *b = bufs[next++ % 8];
    const char *rows[] = { "feed", table, "uid", "score", "id" };
    const char *index[] = { "authors", "author" };
    char *base = feed__key_base(prefix, rows, 5), tag[FEED_KEY_TAG_LEN + 1];
    int n;

    if (!base)
        die("out of memory");
    pthread_once(&key_gen_once, key_gen_learn);
    memcpy(base + feed__key_gen_at(base), key_gen, FEED_KEY_GEN_LEN);
    if (strcmp(suffix, ":authors") == 0) {   /* the author index, item_author_column "author" */
        feed__key_tag(index, 2, tag);
        n = snprintf(b, sizeof bufs[0], "%s{%lld}:authors:%s", base, (long long)uid, tag);
    } else {
        n = snprintf(b, sizeof bufs[0], "%s{%lld}%s", base, (long long)uid, suffix);
    }
    if (n < 0 || (size_t)n >= sizeof bufs[0])
        die("key of %s uid %lld: too long", prefix, (long long)uid);
    free(base);
    return b;
}

void b_key_copy(char *dst, size_t size, const char *key)
{
    size_t n = strlen(key);

    if (n >= size)
        die("key %s: %zu bytes, the buffer holds %zu", key, n, size - 1);
    memcpy(dst, key, n + 1);
}

const char *b_key(const char *prefix, int64_t uid, const char *suffix)
{
    return b_key_of(prefix, "feed_entry", uid, suffix);
}

/* ------------------------------------------------------------ CPU */

uint64_t proc_cpu_ns(pid_t pid)
{
    char path[64];
    DIR *d;
    struct dirent *e;
    uint64_t sum = 0;

    snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
    d = opendir(path);
    if (!d)
        die("%s: %s", path, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        char p[300];
        unsigned long long ns;
        FILE *fp;
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "/proc/%ld/task/%s/schedstat", (long)pid, e->d_name);
        fp = fopen(p, "r");
        if (!fp)
            continue;   /* a thread that just ended */
        if (fscanf(fp, "%llu", &ns) == 1)
            sum += ns;
        fclose(fp);
    }
    closedir(d);
    return sum;
}

void proc_cpu_split(pid_t pid, double *user_ns, double *sys_ns)
{
    char path[64];
    DIR *d;
    struct dirent *e;
    double tick = 1e9 / (double)sysconf(_SC_CLK_TCK);

    *user_ns = *sys_ns = 0;
    snprintf(path, sizeof path, "/proc/%ld/task", (long)pid);
    d = opendir(path);
    if (!d)
        die("%s: %s", path, strerror(errno));
    while ((e = readdir(d)) != NULL) {
        char p[300], buf[1024], *s;
        unsigned long long ut, st;
        FILE *fp;
        size_t n;
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof p, "/proc/%ld/task/%s/stat", (long)pid, e->d_name);
        fp = fopen(p, "r");
        if (!fp)
            continue;
        n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        buf[n] = '\0';
        s = strrchr(buf, ')');   /* fields after the command name */
        if (s && sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                        &ut, &st) == 2) {
            *user_ns += (double)ut * tick;
            *sys_ns += (double)st * tick;
        }
    }
    closedir(d);
}

/* ------------------------------------------------------------ output */

static char out_dir[512] = ".";

void out_init(const char *dir)
{
    snprintf(out_dir, sizeof out_dir, "%s", dir);
}

static FILE *out_open(const char *name, const char *ext, const char *mode)
{
    char path[700];
    FILE *fp;

    snprintf(path, sizeof path, "%s/%s%s", out_dir, name, ext);
    fp = fopen(path, mode);
    if (!fp)
        die("%s: %s", path, strerror(errno));
    return fp;
}

FILE *out_section(const char *name)
{
    char n[200];

    snprintf(n, sizeof n, "sec_%s", name);
    return out_open(n, ".md", "w");
}

FILE *out_data(const char *name)
{
    return out_open(name, ".dat", "w");
}

void out_summary(const char *key, const char *figure, const char *target,
                 const char *verd, const char *fmt, ...)
{
    char measured[512];
    va_list ap;
    FILE *fp = out_open("summary", ".tsv", "a");

    va_start(ap, fmt);
    vsnprintf(measured, sizeof measured, fmt, ap);
    va_end(ap);
    fprintf(fp, "%s\t%s\t%s\t%s\t%s\n", key, figure, target, measured, verd);
    fclose(fp);
}

const char *verdict(int ok)
{
    return ok ? "pass" : "MISS";
}

const char *fmt_num(char *buf, size_t cap, double v)
{
    double a = fabs(v);

    if (isnan(v))
        snprintf(buf, cap, "n/a");
    else if (a >= 1000) {
        /* thousands separators */
        char digits[32];
        int len, o = 0, lead;
        snprintf(digits, sizeof digits, "%.0f", a);
        len = (int)strlen(digits);
        lead = len % 3 ? len % 3 : 3;
        if (v < 0 && o < (int)cap - 1)
            buf[o++] = '-';
        for (int i = 0; i < len && o < (int)cap - 2; i++) {
            if (i > 0 && (i - lead) % 3 == 0)
                buf[o++] = ',';
            buf[o++] = digits[i];
        }
        buf[o] = '\0';
    } else if (a >= 100)
        snprintf(buf, cap, "%.0f", v);
    else if (a >= 10)
        snprintf(buf, cap, "%.1f", v);
    else if (a >= 1)
        snprintf(buf, cap, "%.2f", v);
    else
        snprintf(buf, cap, "%.3g", v);
    return buf;
}

/* ------------------------------------------------------------ rounds */

int q_rounds(int n)
{
    if (getenv("BENCH_QUICK"))
        return n > 3 ? 3 : n;
    return n;
}

double q_secs(double s)
{
    return getenv("BENCH_QUICK") ? s / 4 : s;
}

void run_rounds(variant *v, size_t nv, int rounds, double secs, int min_calls,
                redisContext *stats, pid_t rpid)
{
    for (int r = 0; r < rounds; r++) {
        for (size_t k = 0; k < nv; k++) {
            /* Rotate the order, and reverse it every other round, so that no
             * variant always runs first or right after another. */
            size_t j = (k + (size_t)r) % nv;
            variant *x = &v[r % 2 ? nv - 1 - j : j];
            cstat c0 = { 0, 0 }, c1 = { 0, 0 };
            uint64_t cpu0, cpu1, t0, t;
            size_t calls = 0;

            if (x->cmd)
                c0 = cmdstat(stats, x->cmd);
            cpu0 = rpid ? proc_cpu_ns(rpid) : 0;
            t0 = t = now_ns();
            do {
                uint64_t a = t;
                if (x->op(x->ctx) != 0)
                    die("%s: call failed", x->name);
                t = now_ns();
                sm_add(&x->lat_us, (double)(t - a) / 1e3);
                calls++;
            } while ((double)(t - t0) / 1e9 < secs || calls < (size_t)min_calls);
            cpu1 = rpid ? proc_cpu_ns(rpid) : 0;
            if (x->cmd)
                c1 = cmdstat(stats, x->cmd);
            sm_add(&x->rate, (double)calls / ((double)(t - t0) / 1e9));
            if (rpid)
                sm_add(&x->cpu_us, (double)(cpu1 - cpu0) / 1e3 / (double)calls);
            if (x->cmd && x->cmd[0] == '=')
                sm_add(&x->srv_us, (double)(c1.usec - c0.usec) / (double)calls);
            else if (x->cmd && c1.calls > c0.calls)
                sm_add(&x->srv_us, (double)(c1.usec - c0.usec) / (double)(c1.calls - c0.calls));
            x->calls += calls;
        }
    }
}

/* The median of the per-round ratios a[i] / b[i]: rounds are interleaved,
 * so each ratio pairs figures taken under the same load. */
double median_of_ratios(const samples *a, const samples *b)
{
    samples s = { 0 };
    double m;

    for (size_t i = 0; i < a->n && i < b->n; i++)
        sm_add(&s, a->v[i] / b->v[i]);
    m = sm_median(&s);
    sm_free(&s);
    return m;
}

double paired_ratio(const variant *a, const variant *b)
{
    return median_of_ratios(&a->rate, &b->rate);
}

double paired_ratio_srv(const variant *a, const variant *b)
{
    return median_of_ratios(&a->srv_us, &b->srv_us);
}

double paired_ratio_cpu(const variant *a, const variant *b)
{
    return median_of_ratios(&a->cpu_us, &b->cpu_us);
}

void variant_free(variant *v)
{
    sm_free(&v->rate);
    sm_free(&v->srv_us);
    sm_free(&v->cpu_us);
    sm_free(&v->lat_us);
}
