/* sync_bench.c -- make bench's feedcache-sync section (bench/run.sh runs it
 * against the bench's throwaway servers and appends the section "sync" to the results folder):
 *
 *   1. the rate of the fastest single-row committer: one connection, one
 *      INSERT per transaction, as fast as it goes;
 *   2. apply throughput: a backlog of such commits made while sync is
 *      stopped, then the changes/s sync applies from start to confirmed;
 *   3. commit-to-cache lag at a steady write rate: COMMIT returns, then
 *      poll until the feed's cached copy is gone (the next read rebuilds it
 *      with the row): p50 / p99;
 *   4. PostgreSQL CPU of the slot: the walsender's CPU time per change,
 *      next to the committing backend's CPU time per commit (/proc).
 */
#include "synctest.h"

#define SLOT "bench_sync"

static int64_t next_id = 1000000000000LL;

/* CPU time of a process, in seconds: /proc/PID/schedstat (nanoseconds on
 * the CPU) when the kernel keeps it, else utime + stime from /proc/PID/stat
 * (clock ticks: too coarse for short runs). */
static double cpu_seconds(int pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ns, ut = 0, st = 0;
    FILE *in;

    snprintf(path, sizeof path, "/proc/%d/schedstat", pid);
    if ((in = fopen(path, "r")) != NULL) {
        int got = fscanf(in, "%llu", &ns);
        fclose(in);
        if (got == 1)
            return (double)ns / 1e9;
    }
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    if (!(in = fopen(path, "r")))
        return -1;
    if (!fgets(buf, sizeof buf, in)) {
        fclose(in);
        return -1;
    }
    fclose(in);
    if (!(p = strrchr(buf, ')')))
        return -1;
    /* fields after the name: state(3) ... utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int sql_int(PGconn *pg, const char *sql)
{
    PGresult *r = PQexec(pg, sql);
    int v = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 ? atoi(PQgetvalue(r, 0, 0)) : -1;

    PQclear(r);
    return v;
}

/* Single-row autocommit inserts for `seconds` (or n > 0 of them): the count. */
static long commit_loop(PGconn *w, double seconds, long n, int64_t uids)
{
    double end = st_now() + seconds;
    uint64_t seed = 5;
    long done = 0;

    while (n > 0 ? done < n : st_now() < end) {
        char uid[24], id[24];
        const char *p[2] = { uid, id };
        snprintf(uid, sizeof uid, "%lld", (long long)(1 + (int64_t)(tu_rand(&seed) % (uint64_t)uids)));
        snprintf(id, sizeof id, "%lld", (long long)next_id++);
        PGresult *r = PQexecPrepared(w, "ins", 2, p, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            fprintf(stderr, "sync_bench: insert: %s", PQerrorMessage(w));
            exit(1);
        }
        PQclear(r);
        done++;
    }
    return done;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* samples writes, one each 10 ms, each to a cached (empty) feed: the time
 * from COMMIT returning until the copy is gone. */
static void lag_run(feed *f, PGconn *w, redisContext *r, int samples,
                    double *p50, double *p99, int *got)
{
    static double lag[1000];
    static int64_t uid = 200000;
    int n = 0;

    for (int i = 0; i < samples && i < 1000; i++, uid++) {
        feed_result res;
        char sql[200];
        if (feed_page(f, uid, FEED_FIRST, 0, 5, &res) == FEED_OK)
            feed_result_free(&res);
        snprintf(sql, sizeof sql, "INSERT INTO feed_entry VALUES (%lld, 5, %lld)",
                 (long long)uid, (long long)next_id++);
        PQclear(PQexec(w, sql));
        double c = st_now();
        while (st_now() - c < 5) {
            redisReply *e = tu_redis_cmd(r, "EXISTS %s", tu_key(uid, ""));
            int gone = e->integer == 0;
            freeReplyObject(e);
            if (gone) {
                lag[n++] = (st_now() - c) * 1000;
                break;
            }
            struct timespec ts = { 0, 50000 };
            nanosleep(&ts, NULL);
        }
        st_sleep_ms(10);
    }
    qsort(lag, (size_t)n, sizeof lag[0], cmp_d);
    *p50 = n ? lag[n / 2] : -1;
    *p99 = n ? lag[(int)(n * 0.99) < n ? (int)(n * 0.99) : n - 1] : -1;
    *got = n;
}

int main(int argc, char **argv)
{
    const char *flags[] = { "--stats-interval", "5", NULL };
    char path[1024], lsn[32];
    PGconn *pg = tu_pg(), *w = tu_pg();
    redisContext *r = tu_redis();
    double quick = getenv("BENCH_QUICK") ? 0.5 : 1.0;
    FILE *out;
    feed *f;
    pid_t pid;

    if (argc != 2) {
        fprintf(stderr, "usage: sync_bench WORKDIR\n");
        return 2;
    }
    f = tu_open(NULL);
    st_drop_slot(pg, SLOT);
    PQclear(PQprepare(w, "ins", "INSERT INTO feed_entry (uid, score, id) VALUES ($1::int8, 1, $2::int8)",
                      2, NULL));
    int backend = sql_int(w, "SELECT pg_backend_pid()");
    PGresult *mx = PQexec(pg, "SELECT coalesce(max(id), 0) + 1 FROM feed_entry");
    if (PQresultStatus(mx) == PGRES_TUPLES_OK && atoll(PQgetvalue(mx, 0, 0)) > next_id)
        next_id = atoll(PQgetvalue(mx, 0, 0));
    PQclear(mx);

    /* 1. The fastest single-row committer, no slot at all. */
    fprintf(stderr, "bench: feedcache-sync: committer rate\n");
    double c0 = cpu_seconds(backend), t0 = st_now();
    long commits = commit_loop(w, 3 * quick, 0, 100000);
    double commit_rate = commits / (st_now() - t0);
    double backend_us = (cpu_seconds(backend) - c0) / commits * 1e6;

    /* 2. A backlog, then sync applies it. */
    fprintf(stderr, "bench: feedcache-sync: apply throughput\n");
    pid = st_sync_start(SLOT, flags);
    if (!st_wait_following(SLOT, 60) || !st_caught_up(pg, SLOT, 60))
        tap_bail("sync did not start");
    st_sync_stop(pid, SIGTERM);
    long backlog = commit_loop(w, 0, (long)(commit_rate * 4 * quick), 100000);
    st_wal_now(pg, lsn, sizeof lsn);
    t0 = st_now();
    pid = st_sync_start(SLOT, flags);
    double apply_s;
    if (st_wait_confirmed(pg, SLOT, lsn, 300) < 0)
        tap_bail("sync did not catch up with the backlog");
    apply_s = st_now() - t0;
    /* The walsender is a new process for this connection: its whole CPU
     * time is what decoding the backlog cost (plus its start, small). */
    int sender = sql_int(pg, "SELECT active_pid FROM pg_replication_slots"
                             " WHERE slot_name = '" SLOT "'");
    double sender_us = sender > 0 ? cpu_seconds(sender) / backlog * 1e6 : -1;
    double sync_cpu = cpu_seconds(pid);
    double apply_rate = backlog / apply_s;

    /* 3. Commit-to-cache lag at a steady rate, with the writer's commits
     * synchronous (the default: the WAL is flushed, and the walsender woken,
     * at COMMIT) and asynchronous (flushed by the WAL writer within
     * wal_writer_delay, 200 ms by default: the slot sees nothing before). */
    fprintf(stderr, "bench: feedcache-sync: commit-to-cache lag\n");
    double p50[2], p99[2];
    int nsamples[2];
    PQclear(PQexec(w, "SET synchronous_commit = on"));
    lag_run(f, w, r, (int)(300 * quick), &p50[0], &p99[0], &nsamples[0]);
    PQclear(PQexec(w, "SET synchronous_commit = off"));
    lag_run(f, w, r, (int)(50 * quick), &p50[1], &p99[1], &nsamples[1]);
    st_sync_stop(pid, SIGTERM);
    st_drop_slot(pg, SLOT);

    snprintf(path, sizeof path, "%s/sec_sync.md", argv[1]);
    if (!(out = fopen(path, "w")))
        return 1;
    fprintf(out,
        "## feedcache-sync: apply rate, lag, PostgreSQL cost\n\n"
        "`%s/sync/sync-bench` (sync/sync_bench.c) against the same throwaway servers\n"
        "(synchronous_commit off, fsync off: the fastest commits PostgreSQL makes).\n"
        "The committer is one connection doing single-row INSERTs in autocommit, as\n"
        "fast as it goes, with no slot; the backlog is %ld such commits made while\n"
        "feedcache-sync is stopped, then applied from its start to the slot's\n"
        "confirmed position (connect and catch-up included). The lag is the time from\n"
        "COMMIT returning to the feed's cached copy being gone (the next read rebuilds\n"
        "it with the row), one write each 10 ms to a cached feed, %d samples with\n"
        "the writer's commits synchronous (PostgreSQL's default) and %d asynchronous\n"
        "(`synchronous_commit = off`: the WAL writer flushes within wal_writer_delay,\n"
        "200 ms, and the slot sees nothing earlier).\n\n"
        "| figure | measured |\n| --- | ---: |\n"
        "| fastest single-row committer | %.0f commits/s |\n"
        "| feedcache-sync apply rate (backlog of single-row commits) | **%.0f changes/s (%.1fx the committer)** |\n"
        "| commit-to-cache lag p50 / p99, synchronous commit | **%.2f ms / %.2f ms** |\n"
        "| commit-to-cache lag p50 / p99, asynchronous commit | %.0f ms / %.0f ms |\n"
        "| PostgreSQL: walsender CPU per change decoded | %.1f µs |\n"
        "| PostgreSQL: committing backend CPU per single-row commit | %.1f µs |\n"
        "| slot cost relative to the commit itself | %.0f%% |\n"
        "| feedcache-sync's own CPU for the backlog | %.1f µs per change |\n\n",
        getenv("BUILD") ? getenv("BUILD") : "build", backlog, nsamples[0], nsamples[1],
        commit_rate, apply_rate, apply_rate / commit_rate, p50[0], p99[0], p50[1], p99[1], sender_us, backend_us,
        sender_us > 0 ? 100 * sender_us / backend_us : -1, sync_cpu / backlog * 1e6);
    fclose(out);
    printf("sync_apply\tfeedcache-sync apply rate vs the fastest single-row committer\t>= 1x\t%.1fx (%.0f vs %.0f/s)\t%s\n",
           apply_rate / commit_rate, apply_rate, commit_rate, apply_rate >= commit_rate ? "pass" : "MISS");
    printf("sync_lag\tcommit-to-cache lag p50 / p99 (feedcache-sync, synchronous commit)\treport\t%.2f / %.2f ms\treport\n",
           p50[0], p99[0]);
    feed_close(f);
    redisFree(r);
    PQfinish(w);
    PQfinish(pg);
    return 0;
}
