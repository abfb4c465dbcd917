/* synctest.h -- what the feedcache-sync tests share (header only: static
 * functions, included once per test program): start and stop the program,
 * wait until its slot has confirmed a position, and check Redis' contents
 * against the invariant. */
#ifndef FEED_SYNCTEST_H
#define FEED_SYNCTEST_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"   /* feed__member_decode: whatever the member encoding */
#include "tap.h"
#include "testutil.h"

static inline double st_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void st_sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static inline const char *st_env(const char *name, const char *dflt)
{
    const char *v = getenv(name);

    return v && *v ? v : dflt;
}

/* Start feedcache-sync on slot (publication "feedcache"), stderr appended to
 * sync-<slot>.log in the servers' folder, metrics to sync-<slot>.prom. extra:
 * more flags, NULL-terminated (may be NULL). */
static inline pid_t st_sync_start(const char *slot, const char *const *extra)
{
    char bin[512], log[512], metrics[512], port[16];
    const char *argv[40];
    int argc = 0;
    pid_t pid;

    snprintf(bin, sizeof bin, "%s/sync/feedcache-sync", st_env("BUILD", "build"));
    snprintf(log, sizeof log, "%s/sync-%s.log", st_env("FEED_SERVERS_DIR", "/tmp"), slot);
    snprintf(metrics, sizeof metrics, "%s/sync-%s.prom", st_env("FEED_SERVERS_DIR", "/tmp"), slot);
    snprintf(port, sizeof port, "%s", st_env("FEED_REDIS_PORT", "6379"));
    argv[argc++] = bin;
    argv[argc++] = "--pg-conninfo";
    argv[argc++] = st_env("FEED_PG_CONNINFO", "");
    if (tu_cluster()) {     /* the tests' :cluster runs: the same through the cluster */
        argv[argc++] = "--redis-cluster";
        argv[argc++] = st_env("FEED_REDIS_CLUSTER", "");
    } else {
        argv[argc++] = "--redis-host";
        argv[argc++] = st_env("FEED_REDIS_HOST", "127.0.0.1");
        argv[argc++] = "--redis-port";
        argv[argc++] = port;
    }
    argv[argc++] = "--slot";
    argv[argc++] = slot;
    argv[argc++] = "--metrics-file";
    argv[argc++] = metrics;
    argv[argc++] = "--stats-interval";
    argv[argc++] = "1";
    for (int i = 0; extra && extra[i] && argc < 39; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    unlink(metrics);   /* st_wait_following waits for a fresh one */
    fflush(stdout);
    pid = fork();
    if (pid == 0) {
        /* Not the test's stdout (prove would wait for it to close), and
         * not outliving a test that bails out. */
        FILE *err = freopen(log, "a", stderr), *out = freopen("/dev/null", "w", stdout);
        (void)err;
        (void)out;
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv(bin, (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", bin, strerror(errno));
        _exit(127);
    }
    if (pid < 0)
        tap_bail("fork failed");
    return pid;
}

/* Wait until the program started by st_sync_start follows its slot: its
 * metrics file appears then (after a new slot's first run, which drops
 * every cached copy). Returns 1, or 0 after timeout_s. */
static inline int st_wait_following(const char *slot, double timeout_s)
{
    char path[512];
    double start = st_now();

    snprintf(path, sizeof path, "%s/sync-%s.prom", st_env("FEED_SERVERS_DIR", "/tmp"), slot);
    while (st_now() - start < timeout_s) {
        if (access(path, R_OK) == 0)
            return 1;
        st_sleep_ms(10);
    }
    return 0;
}

/* Send sig and wait; returns the exit status (128 + signal when killed),
 * -1 when it did not end within 30 s (it is then SIGKILLed). */
static inline int st_sync_stop(pid_t pid, int sig)
{
    double end = st_now() + 30;
    int status;

    kill(pid, sig);
    while (st_now() < end) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        st_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    return -1;
}

/* The server's WAL position now, as text ("0/16B3748"): the insert
 * position, past every commit made so far (with synchronous_commit = off the
 * written position may still lag behind them). */
static inline void st_wal_now(PGconn *pg, char *lsn, size_t len)
{
    PGresult *r = PQexec(pg, "SELECT pg_current_wal_insert_lsn()");

    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        tap_bail("pg_current_wal_insert_lsn failed");
    snprintf(lsn, len, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

/* Wait up to timeout_s until slot has confirmed lsn: everything committed
 * before it is applied to Redis. Returns the seconds waited, or -1. */
static inline double st_wait_confirmed(PGconn *pg, const char *slot, const char *lsn, double timeout_s)
{
    const char *params[2] = { slot, lsn };
    double start = st_now();

    while (st_now() - start < timeout_s) {
        PGresult *r = PQexecParams(pg, "SELECT confirmed_flush_lsn >= $2::pg_lsn"
                                   " FROM pg_replication_slots WHERE slot_name = $1",
                                   2, NULL, params, NULL, NULL, 0);
        int done = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1 &&
                   PQgetvalue(r, 0, 0)[0] == 't';
        PQclear(r);
        if (PQstatus(pg) != CONNECTION_OK)
            PQreset(pg);
        if (done)
            return st_now() - start;
        st_sleep_ms(20);
    }
    return -1;
}

/* Everything committed so far applied? Up to timeout_s. */
static inline int st_caught_up(PGconn *pg, const char *slot, double timeout_s)
{
    char lsn[32];

    st_wal_now(pg, lsn, sizeof lsn);
    return st_wait_confirmed(pg, slot, lsn, timeout_s) >= 0;
}

static inline void st_drop_slot(PGconn *pg, const char *slot)
{
    const char *params[1] = { slot };
    PGresult *r;

    for (int i = 0; i < 100; i++) {   /* its walsender may take a moment to go */
        r = PQexecParams(pg, "SELECT pg_drop_replication_slot(slot_name) FROM "
                         "pg_replication_slots WHERE slot_name = $1", 1, NULL, params,
                         NULL, NULL, 0);
        int ok_ = PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
        if (ok_)
            return;
        st_sleep_ms(50);
    }
}

/* The invariant, read straight from Redis: uid's cached copy (if any),
 * without its end marker, is exactly the first items of SQL's feed, and all
 * of them when the end marker is there. Returns 1, or 0 with a diagnostic. */
static inline int st_copy_is_prefix(redisContext *r, PGconn *pg, int64_t uid)
{
    feed_item *want;
    size_t nwant = tu_sql_feed(pg, uid, &want), n = 0;
    redisReply *rep = tu_redis_cmd(r, "ZREVRANGE %s 0 -1 WITHSCORES", tu_key(uid, ""));
    int complete = 0, good = 1;

    if (!rep || rep->type != REDIS_REPLY_ARRAY)
        tap_bail("ZREVRANGE failed");
    for (size_t i = 0; good && i + 1 < rep->elements; i += 2) {
        redisReply *m = rep->element[i], *s = rep->element[i + 1];
        int64_t id, score;
        if (m->len == strlen(FEED_END_MEMBER) && memcmp(m->str, FEED_END_MEMBER, m->len) == 0) {
            complete = 1;
            continue;
        }
        if (feed__member_decode(m->str, m->len, &id) != 0 ||
            feed__parse_score(s->str, s->len, &score) != 0) {
            tap_diag("uid %lld: unreadable member or score", (long long)uid);
            good = 0;
        } else if (n >= nwant || want[n].id != id || want[n].score != score) {
            tap_diag("uid %lld: cached item %zu is (%lld,%lld), SQL has %s", (long long)uid, n,
                     (long long)score, (long long)id, n >= nwant ? "no more" : "another");
            good = 0;
        }
        n++;
    }
    if (good && complete && n != nwant) {
        tap_diag("uid %lld: marked complete with %zu items, SQL has %zu", (long long)uid, n, nwant);
        good = 0;
    }
    freeReplyObject(rep);
    free(want);
    return good;
}

/* One counter from a metrics file, or -1. */
static inline long long st_metric(const char *slot, const char *name)
{
    char path[512], line[256];
    size_t len = strlen(name);
    long long v = -1;
    FILE *in;

    snprintf(path, sizeof path, "%s/sync-%s.prom", st_env("FEED_SERVERS_DIR", "/tmp"), slot);
    if (!(in = fopen(path, "r")))
        return -1;
    while (fgets(line, sizeof line, in))
        if (strncmp(line, name, len) == 0 && line[len] == ' ')
            v = atoll(line + len + 1);
    fclose(in);
    return v;
}

#endif
