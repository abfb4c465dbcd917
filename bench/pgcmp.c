/* pgcmp.c -- section "pg": a cached page against PostgreSQL alone.
 *
 * The same pages (200 users of ~890 rows in the 1,000,000-row table, cursors
 * at depths 0..850) answered by feed_page from the cache, and by the keyset
 * query on the (uid, score DESC, id DESC) index, the statement the library
 * itself prepares, from 1 and from 4 client threads. Server CPU per page is
 * the CPU time of the redis-server process, and of the PostgreSQL backends
 * serving the bench's connections, over the pages they answered.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "reads.h"

#define PG_USERS   200
#define PG_CLIENTS 4
static const size_t pg_depths[] = { 0, 200, 400, 600, 850 };
#define PG_NDEPTHS (sizeof pg_depths / sizeof pg_depths[0])
#define PG_PAGES   (PG_USERS * PG_NDEPTHS)

typedef struct pg_page { int64_t uid; page_pos pos; } pg_page;

typedef struct pg_client {
    pthread_t  tid;
    feed      *f;
    PGconn    *pg;
    redisContext *rc;      /* the raw peer's connection */
    pid_t      backend;
    const pg_page *pages;
    size_t     next;
    int        use_pg;     /* 0 feedcache, 1 PostgreSQL, 2 raw ZREVRANGE */
    double     until;
    size_t     done;
    int64_t    sink;       /* keeps the parsed rows alive */
    samples    lat_us;
    pthread_barrier_t *go;
} pg_client;

static void pg_prepare(PGconn *pg)
{
    static const char *const sql[2][2] = {
        { "bench_top", "SELECT score::int8, id::int8 FROM feed_entry WHERE uid = $1"
                       " ORDER BY score DESC, id DESC LIMIT $2" },
        { "bench_after", "SELECT score::int8, id::int8 FROM feed_entry WHERE uid = $1"
                         " AND (score, id) < ($2, $3) ORDER BY score DESC, id DESC LIMIT $4" },
    };
    for (int i = 0; i < 2; i++) {
        PGresult *res = PQprepare(pg, sql[i][0], sql[i][1], i ? 4 : 2, NULL);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            die("prepare: %s", PQerrorMessage(pg));
        PQclear(res);
    }
}

static void be64(char *p, int64_t v)
{
    uint64_t u = (uint64_t)v;

    for (int i = 7; i >= 0; i--, u >>= 8)
        p[i] = (char)(u & 0xff);
}

static int64_t get64(const char *p)
{
    uint64_t u = 0;

    for (int i = 0; i < 8; i++)
        u = (u << 8) | (unsigned char)p[i];
    return (int64_t)u;
}

/* One keyset page: binary parameters and rows, like lib/io/pg.c. */
static int64_t pg_page_query(PGconn *pg, const pg_page *p)
{
    char buf[4][8];
    const char *vals[4] = { buf[0], buf[1], buf[2], buf[3] };
    static const int lens[4] = { 8, 8, 8, 8 }, fmts[4] = { 1, 1, 1, 1 };
    feed_item items[PAGE_LIMIT + 1];
    PGresult *res;
    int n;

    be64(buf[0], p->uid);
    if (p->pos.first) {
        be64(buf[1], PAGE_LIMIT + 1);
        res = PQexecPrepared(pg, "bench_top", 2, vals, lens, fmts, 1);
    } else {
        be64(buf[1], p->pos.score);
        be64(buf[2], p->pos.id);
        be64(buf[3], PAGE_LIMIT + 1);
        res = PQexecPrepared(pg, "bench_after", 4, vals, lens, fmts, 1);
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        die("keyset query: %s", PQerrorMessage(pg));
    n = PQntuples(res);
    if (n != PAGE_LIMIT + 1 && !(p->pos.depth >= 850 && n > 0))
        die("keyset query: %d rows at depth %zu", n, p->pos.depth);
    for (int i = 0; i < n && i <= PAGE_LIMIT; i++) {
        items[i].score = get64(PQgetvalue(res, i, 0));
        items[i].id = get64(PQgetvalue(res, i, 1));
    }
    PQclear(res);
    return items[0].id;
}

static void *pg_client_run(void *arg)
{
    pg_client *cl = arg;
    uint64_t t = 0;

    pthread_barrier_wait(cl->go);
    do {
        const pg_page *p = &cl->pages[cl->next];
        uint64_t a = now_ns();
        cl->next = (cl->next + 1) % PG_PAGES;
        if (cl->use_pg == 1) {
            cl->sink += pg_page_query(cl->pg, p);
        } else if (cl->use_pg == 2) {
            redisReply *r = redisCommand(cl->rc, "ZREVRANGE %s %lld %lld WITHSCORES",
                                         b_key("pgc", p->uid, ""), (long long)p->pos.depth,
                                         (long long)(p->pos.depth + PAGE_LIMIT));
            if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0)
                die("raw ZREVRANGE failed");
            cl->sink += (int64_t)r->elements;
            freeReplyObject(r);
        } else {
            page_ctx x = { cl->f, p->uid, p->pos };
            op_page(&x);
        }
        t = now_ns();
        sm_add(&cl->lat_us, (double)(t - a) / 1e3);
        cl->done++;
    } while ((double)t / 1e9 < cl->until);
    return NULL;
}

typedef struct pg_variant {
    const char *name;
    int use_pg, clients;
    samples rate, cpu_us, lat_us, user_us, sys_us;
} pg_variant;

static uint64_t server_cpu(const pg_client *cl, int use_pg, pid_t rpid,
                           double *user, double *sys)
{
    uint64_t s = 0;

    *user = *sys = 0;
    if (use_pg != 1) {
        proc_cpu_split(rpid, user, sys);
        return proc_cpu_ns(rpid);
    }
    for (int i = 0; i < PG_CLIENTS; i++) {
        double u, y;
        proc_cpu_split(cl[i].backend, &u, &y);
        *user += u;
        *sys += y;
        s += proc_cpu_ns(cl[i].backend);
    }
    return s;
}

void section_pg(void)
{
    redisContext *c = b_redis();
    PGconn *pg = b_pg();
    pid_t rpid = redis_pid(c);
    pg_page *pages = malloc(PG_PAGES * sizeof *pages);
    pg_client cl[PG_CLIENTS];
    pg_variant v[5] = {
        { "feedcache, 1 client", 0, 1, { 0 }, { 0 }, { 0 }, { 0 }, { 0 } },
        { "PostgreSQL, 1 client", 1, 1, { 0 }, { 0 }, { 0 }, { 0 }, { 0 } },
        { "feedcache, 4 clients", 0, 4, { 0 }, { 0 }, { 0 }, { 0 }, { 0 } },
        { "PostgreSQL, 4 clients", 1, 4, { 0 }, { 0 }, { 0 }, { 0 }, { 0 } },
        { "raw ZREVRANGE from hiredis, 1 client (peer: the floor of any Redis read)",
          2, 1, { 0 }, { 0 }, { 0 }, { 0 }, { 0 } },
    };
    int rounds = q_rounds(11);
    double secs = q_secs(0.4);
    FILE *md = out_section("pg"), *dat = out_data("pg");
    uint64_t seed = 42;
    double r_rate[2], r_cpu;
    samples cpu_ratio = { 0 }, raw_ratio = { 0 };

    note("pg: %d users, warming their caches", PG_USERS);
    if (!pages)
        die("out of memory");
    memset(cl, 0, sizeof cl);
    for (int i = 0; i < PG_CLIENTS; i++) {
        cl[i].f = b_open("pgc", 1000);
        cl[i].pg = b_pg();
        cl[i].rc = b_redis();
        pg_prepare(cl[i].pg);
        cl[i].backend = pg_backend(cl[i].pg);
        cl[i].pages = pages;
        cl[i].next = (size_t)i * PG_PAGES / PG_CLIENTS;
    }
    for (int u = 0; u < PG_USERS; u++) {
        int64_t uid = UID_REST + u;
        feed_item *items;
        size_t n = sql_feed(pg, uid, &items);
        char prefix[8] = "pgc";
        warm(cl[0].f, c, uid, prefix, (long long)n + 1);
        for (size_t d = 0; d < PG_NDEPTHS; d++)
            pages[u * PG_NDEPTHS + d] = (pg_page){ uid, pos_at(items, n, pg_depths[d]) };
        free(items);
    }
    /* A fixed shuffle, so that consecutive pages hit different users. */
    for (size_t i = PG_PAGES - 1; i > 0; i--) {
        size_t j;
        pg_page t;
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        j = (size_t)((seed >> 33) % (i + 1));
        t = pages[i];
        pages[i] = pages[j];
        pages[j] = t;
    }

    note("pg: %d rounds x 5 variants x %.2f s", rounds, secs);
    for (int r = 0; r < rounds; r++) {
        double round_cpu[3] = { 0, 0, 0 };
        for (int k = 0; k < 5; k++) {
            pg_variant *x = &v[(k + r) % 5];
            pthread_barrier_t go;
            uint64_t cpu0, cpu1, t0, t1;
            double u0, s0, u1, s1;
            size_t done = 0;

            pthread_barrier_init(&go, NULL, (unsigned)x->clients + 1);
            for (int i = 0; i < x->clients; i++) {
                cl[i].use_pg = x->use_pg;
                cl[i].done = 0;
                cl[i].go = &go;
                sm_free(&cl[i].lat_us);
            }
            cpu0 = server_cpu(cl, x->use_pg, rpid, &u0, &s0);
            t0 = now_ns();
            for (int i = 0; i < x->clients; i++) {
                cl[i].until = (double)t0 / 1e9 + secs;
                if (pthread_create(&cl[i].tid, NULL, pg_client_run, &cl[i]) != 0)
                    die("pthread_create failed");
            }
            pthread_barrier_wait(&go);
            for (int i = 0; i < x->clients; i++)
                pthread_join(cl[i].tid, NULL);
            t1 = now_ns();
            cpu1 = server_cpu(cl, x->use_pg, rpid, &u1, &s1);
            pthread_barrier_destroy(&go);
            for (int i = 0; i < x->clients; i++) {
                done += cl[i].done;
                for (size_t s = 0; s < cl[i].lat_us.n; s++)
                    sm_add(&x->lat_us, cl[i].lat_us.v[s]);
            }
            sm_add(&x->rate, (double)done / ((double)(t1 - t0) / 1e9));
            sm_add(&x->cpu_us, (double)(cpu1 - cpu0) / 1e3 / (double)done);
            sm_add(&x->user_us, (u1 - u0) / 1e3 / (double)done);
            sm_add(&x->sys_us, (s1 - s0) / 1e3 / (double)done);
            if (x->clients == 1)
                round_cpu[x->use_pg] = (double)(cpu1 - cpu0) / 1e3 / (double)done;
        }
        sm_add(&cpu_ratio, round_cpu[1] / round_cpu[0]);
        sm_add(&raw_ratio, round_cpu[1] / round_cpu[2]);
    }
    {
        samples a = { 0 }, b = { 0 };
        for (size_t i = 0; i < v[0].rate.n; i++) {
            sm_add(&a, v[0].rate.v[i] / v[1].rate.v[i]);
            sm_add(&b, v[2].rate.v[i] / v[3].rate.v[i]);
        }
        r_rate[0] = sm_median(&a);
        r_rate[1] = sm_median(&b);
        sm_free(&a);
        sm_free(&b);
    }
    r_cpu = sm_median(&cpu_ratio);

    fprintf(md, "## Cached page against PostgreSQL alone\n\n"
            "The same %d pages (%d users of ~890 rows in the 1,000,000-row table; cursors at"
            " depths 0, 200, 400, 600, 850; shuffled) answered by `feed_page` from the cache"
            " and by the keyset query on the `(uid, score DESC, id DESC)` index (prepared,"
            " binary rows, `LIMIT %d`; the table is VACUUM ANALYZEd, so PostgreSQL gets"
            " index-only scans). Each client is a thread with its own connection."
            " %d interleaved rounds of %.2f s. Server CPU per page: CPU time of the"
            " redis-server process, or of the PostgreSQL backends serving these"
            " connections, divided by the pages answered (median over rounds).\n\n",
            (int)PG_PAGES, PG_USERS, PAGE_LIMIT + 1, rounds, secs);
    fprintf(md, "| variant | pages/s | p50 / p99 latency | server CPU per page |"
            " of which user / system |\n| --- | ---: | ---: | ---: | ---: |\n");
    fprintf(dat, "# clients feedcache_pages_s postgres_pages_s feedcache_cpu_us postgres_cpu_us\n");
    for (int k = 0; k < 4; k += 2)
        fprintf(dat, "\"%d client%s\" %.1f %.1f %.3f %.3f\n", v[k].clients,
                v[k].clients > 1 ? "s" : "", sm_median(&v[k].rate), sm_median(&v[k + 1].rate),
                sm_median(&v[k].cpu_us), sm_median(&v[k + 1].cpu_us));
    for (int k = 0; k < 5; k++) {
        fprintf(md, "| %s%s%s | %s | %s / %s µs | %s µs | %s / %s µs |\n",
                v[k].use_pg ? "" : "**", v[k].name, v[k].use_pg ? "" : "**",
                NUM(sm_median(&v[k].rate)), NUM(sm_pct(&v[k].lat_us, 50)),
                NUM(sm_pct(&v[k].lat_us, 99)), NUM(sm_median(&v[k].cpu_us)),
                NUM(sm_median(&v[k].user_us)), NUM(sm_median(&v[k].sys_us)));
    }
    fprintf(md, "\nfeedcache / PostgreSQL pages/s: **%.1fx** with 1 client, **%.1fx** with 4"
            " (this machine has %s cores for clients and servers together). Server CPU per"
            " page, PostgreSQL / Redis (1 client, paired by round): **%.1fx** less for"
            " feedcache (target >= 5x: %s). For scale, the same ratio for a bare ZREVRANGE"
            " (no script, no feedcache) is %.1fx: the CPU a loopback request costs the"
            " kernel and the event loop (the system column) is a large part of a Redis read"
            " on this machine, and no Redis read can beat it. User-space CPU alone,"
            " PostgreSQL / feedcache: %.1fx.\n",
            r_rate[0], r_rate[1], env_or("BENCH_NPROC", "?"), r_cpu, verdict(r_cpu >= 5),
            sm_median(&raw_ratio), sm_median(&v[1].user_us) / sm_median(&v[0].user_us));
    out_summary("pg_rate", "cached page vs PostgreSQL keyset page, pages/s, 1 and 4 clients",
                "report", "report", "%.1fx (1 client), %.1fx (4 clients)", r_rate[0], r_rate[1]);
    out_summary("pg_cpu", "server CPU per page, PostgreSQL backends / redis-server",
                ">= 5x less", verdict(r_cpu >= 5), "%.1fx less (%s µs vs %s µs); a bare"
                " ZREVRANGE: %.1fx", r_cpu, NUM(sm_median(&v[1].cpu_us)),
                NUM(sm_median(&v[0].cpu_us)), sm_median(&raw_ratio));

    for (int k = 0; k < 5; k++) {
        sm_free(&v[k].rate);
        sm_free(&v[k].cpu_us);
        sm_free(&v[k].lat_us);
        sm_free(&v[k].user_us);
        sm_free(&v[k].sys_us);
    }
    sm_free(&cpu_ratio);
    sm_free(&raw_ratio);
    for (int i = 0; i < PG_CLIENTS; i++) {
        for (int u = 0; u < PG_USERS && i == 0; u++)
            feed_invalidate(cl[0].f, UID_REST + u);
        feed_close(cl[i].f);
        PQfinish(cl[i].pg);
        redisFree(cl[i].rc);
        sm_free(&cl[i].lat_us);
    }
    fclose(md);
    fclose(dat);
    free(pages);
    PQfinish(pg);
    redisFree(c);
}
