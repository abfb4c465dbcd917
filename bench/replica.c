/* replica.c -- section "replica": how far the PostgreSQL read replica
 * trails the primary, idle and under write load.
 *
 * With pg_replica_conninfo set, a page past the cache may come from the
 * replica; without a bound (pg_replica_max_lag_ms = 0) it may miss the
 * commits of the last moments, by the replication delay (the default bound,
 * 1000 ms, sends pages to the primary while the replica is not proven). This measures that delay
 * the way pg_replica_max_lag_ms proves it: read the primary's WAL insert
 * position, then ask the replica until it has replayed past it; the time
 * between is one sample. Idle first, then while WRITERS connections commit
 * single-row inserts as fast as they can, with synchronous_commit on (the
 * server default; the test servers run with it off, and with it off a
 * commit reaches the replica only when the WAL writer flushes, every
 * wal_writer_delay), then the same with it off.
 *
 * bench/run.sh starts the replica (tools/servers.sh replica-start) and
 * exports FEED_PG_REPLICA_CONNINFO; the section is skipped without it. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <libpq-fe.h>

#include "bench.h"
#include "reads.h"

#define WRITERS   4
#define UID0      70000000        /* no bench feed: rows only for the load */

static atomic_int  writing;
static atomic_long commits, next_id;
static const char *sync_commit;

static PGconn *connect_or_die(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);

    if (PQstatus(c) != CONNECTION_OK)
        die("PostgreSQL (%s): %s", conninfo, PQerrorMessage(c));
    return c;
}

static void exec_or_die(PGconn *c, const char *sql)
{
    PGresult *r = PQexec(c, sql);

    if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
        die("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

static void *writer(void *arg)
{
    PGconn *c = connect_or_die(env_or("FEED_PG_CONNINFO", ""));
    long w = (long)(intptr_t)arg;
    char sql[256];

    snprintf(sql, sizeof sql, "SET synchronous_commit = %s", sync_commit);
    exec_or_die(c, sql);
    while (atomic_load(&writing)) {
        long n = atomic_fetch_add(&next_id, 1) + 1;
        snprintf(sql, sizeof sql, "INSERT INTO feed_entry (uid, score, id) VALUES (%ld, %ld, %ld)",
                 UID0 + w, n, n);
        exec_or_die(c, sql);
        atomic_fetch_add(&commits, 1);
    }
    PQfinish(c);
    return NULL;
}

/* One sample: ms from the primary's WAL insert position to the replica
 * having replayed it. */
static double one_delay(PGconn *primary, PGconn *replica)
{
    const char *param[1];
    PGresult *r = PQexec(primary, "SELECT pg_current_wal_insert_lsn()::text");
    char lsn[64];
    double t0 = now_s();

    if (PQresultStatus(r) != PGRES_TUPLES_OK)
        die("pg_current_wal_insert_lsn: %s", PQerrorMessage(primary));
    snprintf(lsn, sizeof lsn, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    param[0] = lsn;
    for (;;) {
        int done;
        r = PQexecParams(replica, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", 1, NULL,
                         param, NULL, NULL, 0);
        if (PQresultStatus(r) != PGRES_TUPLES_OK)
            die("pg_last_wal_replay_lsn: %s", PQerrorMessage(replica));
        done = strcmp(PQgetvalue(r, 0, 0), "t") == 0;
        PQclear(r);
        if (done)
            return (now_s() - t0) * 1e3;
        if (now_s() - t0 > 30)
            die("the replica did not replay for 30 s");
    }
}

typedef struct phase {
    const char *name;
    samples     ms;
    double      commits_per_s;
} phase;

static void run_phase(phase *p, PGconn *primary, PGconn *replica, int load, const char *sc,
                      double secs)
{
    pthread_t th[WRITERS];
    double t0;
    long c0;

    sync_commit = sc;
    atomic_store(&writing, load);
    atomic_store(&commits, 0);
    if (load)
        for (long i = 0; i < WRITERS; i++)
            if (pthread_create(&th[i], NULL, writer, (void *)(intptr_t)i) != 0)
                die("pthread_create");
    sleep_s(0.3);                   /* the writers get going */
    c0 = atomic_load(&commits);
    t0 = now_s();
    while (now_s() - t0 < secs) {
        sm_add(&p->ms, one_delay(primary, replica));
        sleep_s(0.005);
    }
    p->commits_per_s = (double)(atomic_load(&commits) - c0) / (now_s() - t0);
    atomic_store(&writing, 0);
    if (load)
        for (int i = 0; i < WRITERS; i++)
            pthread_join(th[i], NULL);
}

/* Share of samples at or under ms. */
static double share_within(const samples *s, double ms)
{
    size_t k = 0;

    for (size_t i = 0; i < s->n; i++)
        k += s->v[i] <= ms;
    return s->n ? 100.0 * (double)k / (double)s->n : 0;
}

void section_replica(void)
{
    const char *rconn = env_or("FEED_PG_REPLICA_CONNINFO", "");
    FILE *md = out_section("replica");
    phase ph[3] = { { "idle", { 0 }, 0 },
                    { "4 writers, synchronous_commit on", { 0 }, 0 },
                    { "4 writers, synchronous_commit off", { 0 }, 0 } };
    PGconn *primary, *replica;
    double secs = q_secs(6);

    fprintf(md, "## The PostgreSQL replica's delay\n\n");
    if (!*rconn) {
        fprintf(md, "Skipped: FEED_PG_REPLICA_CONNINFO is not set.\n\n");
        fclose(md);
        return;
    }
    primary = connect_or_die(env_or("FEED_PG_CONNINFO", ""));
    replica = connect_or_die(rconn);
    note("replica: %.0f s idle, then %.0f s under each load", secs, secs);
    run_phase(&ph[0], primary, replica, 0, "on", secs);
    run_phase(&ph[1], primary, replica, 1, "on", secs);
    run_phase(&ph[2], primary, replica, 1, "off", secs);
    exec_or_die(primary, "DELETE FROM feed_entry WHERE uid >= 70000000 AND uid < 70000100");

    fprintf(md, "A streaming hot standby of the bench's primary (`tools/servers.sh\n"
                "replica-start`), on this machine. One sample: the primary's WAL insert\n"
                "position read, then the replica asked until it has replayed past it (as\n"
                "`pg_replica_max_lag_ms` proves it), every 5 ms for %.0f s per phase. Under\n"
                "load, %d connections commit single-row inserts as fast as they can.\n\n",
            secs, WRITERS);
    fprintf(md, "| phase | commits/s | samples | delay p50 ms | p99 ms | max ms |"
                " within 1,000 ms |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < 3; i++)
        fprintf(md, "| %s | %s | %zu | %s | %s | %s | %.1f%% |\n", ph[i].name,
                NUM(ph[i].commits_per_s), ph[i].ms.n, NUM(sm_pct(&ph[i].ms, 50)),
                NUM(sm_pct(&ph[i].ms, 99)), NUM(sm_pct(&ph[i].ms, 100)),
                share_within(&ph[i].ms, 1000));
    fprintf(md, "\nA deep page from the replica without a bound (`pg_replica_max_lag_ms = 0`)\n"
                "can miss the commits of the last delay; with the default bound of 1000 ms the\n"
                "replica answers only while its proof is under 1 s old.\n\n");
    out_summary("replica_delay", "PostgreSQL replica delay p50/p99, 4 writers (sync commit)",
                "report", "report", "%s / %s ms (idle %s / %s ms)", NUM(sm_pct(&ph[1].ms, 50)),
                NUM(sm_pct(&ph[1].ms, 99)), NUM(sm_pct(&ph[0].ms, 50)),
                NUM(sm_pct(&ph[0].ms, 99)));
    for (int i = 0; i < 3; i++)
        sm_free(&ph[i].ms);
    PQfinish(replica);
    PQfinish(primary);
    fclose(md);
}
