/* feedsim.c -- run simulated schedules (sim_world.c) by seed.
 *
 *   feedsim [MODE]        seeds 1, 2, ... until SIM_SCHEDULES schedules
 *                         (default 100000) or SIM_SECONDS seconds have run;
 *                         prints "N schedules" and the rate, exit 1 on a
 *                         violation (after shrinking it and printing the
 *                         shrunk schedule's trace)
 *   SIM_SEED=n feedsim    replay seed n with a readable trace; the last line
 *                         is the same every time
 *   SIM_OPS, SIM_MASK     a shrunk schedule: operations per client, and the
 *                         fault draws that do not strike ("3,17,40")
 *   SIM_FIRST, SIM_STRIDE the seeds first, first + stride, ... (tests/sim/run.sh
 *                         runs one process per core so)
 *   SIM_ASYNC=0|1         no schedule has an async handle / every one has
 *                         (default: half of them, drawn by seed)
 *   SIM_SWARM=0|1         no schedule is contended (swarm testing: the
 *                         schedules drawn before it existed) / every one is
 *                         (default: half of them, drawn by seed)
 *
 * MODE: default (the default config: restart fence on, no writer dies),
 * nofence (the fence off), kills (writers die between commit and hook),
 * kills-sync (the same with a log follower dropping each written feed
 * late), replica (pages past the cache from a replica that lags, within
 * pg_replica_max_lag_ms), replica-unbounded (the same with no bound: pages
 * may be as old as the replica).
 * Under Sentinel (a primary, its replica that lags, two Sentinels that
 * learn of a failover late): sentinel (the defaults; failovers that kill
 * the old primary, the replica promoted however far behind), sentinel-nofence
 * (the same with the fence off), sentinel-wait (redis_wait_replicas = 1;
 * failovers also leave the old primary demoted with its connections, or
 * writable for a while), sentinel-nowait (those failovers with the
 * defaults: what WAIT adds).
 * On a Redis Cluster (three primaries and a replica of each; slots that
 * migrate key by key; failovers that kill or demote a primary): cluster
 * (the defaults), cluster-nofence (the fence off), cluster-wait
 * (redis_wait_replicas = 1), cluster-flap (the defaults; failovers in
 * every schedule, each demoting its primary at once, so a primary is
 * promoted back after a resync, no sooner than SIM_EPISODE_MS; readers
 * idle towards a node across that; no migrations).
 * async: the default config, with an async handle in every schedule (2 to 4
 * readers' requests in flight on one core; every other mode has one in
 * half its schedules, SIM_ASYNC=0|1 says none or all).
 * With SIM_EXPECT=violation the exit status is inverted: 0 when some
 * schedule breaks the invariant (a control, or a mutant found).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim/sim_world.h"

typedef struct sim_opts {
    const char *mode;
    int         ops;
    int         swarm;          /* SIM_SWARM: -1 no schedule contended, 1 all, 0 half */
    size_t      mask[SIM_MASK_MAX], nmask;
} sim_opts;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The world for seed under opts: the fault rates come from the seed too
 * (a stream of their own), so a third of the schedules run without faults,
 * the rest with few or many. */
static void sim_setup(sim_world *w, uint64_t seed, const sim_opts *o)
{
    uint64_t r = seed * 0x2545f4914f6cdd1dULL + 1;

    memset(w, 0, sizeof *w);
    w->seed = seed;
    w->rng = seed;
    w->ops = o->ops;
    w->fence = 1;
    if (strcmp(o->mode, "nofence") == 0)
        w->fence = 0;
    if (strncmp(o->mode, "kills", 5) == 0)
        w->kills = 1;
    if (strcmp(o->mode, "kills-sync") == 0)
        w->sync = 1;
    if (strcmp(o->mode, "replica") == 0)
        w->replica = 1;
    if (strcmp(o->mode, "replica-unbounded") == 0)
        w->replica = 2;
    if (strncmp(o->mode, "sentinel", 8) == 0) {
        w->topo = SIM_TOPO_SENTINEL;
        w->failover_kinds = 1;          /* the old primary killed */
    }
    if (strcmp(o->mode, "sentinel-wait") == 0 || strcmp(o->mode, "sentinel-nowait") == 0)
        w->failover_kinds = 7;          /* also demoted at once, or left writable a while */
    if (strcmp(o->mode, "sentinel-wait") == 0)
        w->wait_replicas = 1;
    if (strncmp(o->mode, "cluster", 7) == 0) {
        w->topo = SIM_TOPO_CLUSTER;
        w->failover_kinds = 3;          /* the old primary killed, or demoted at once */
    }
    if (strcmp(o->mode, "cluster-wait") == 0)
        w->wait_replicas = 1;
    if (strcmp(o->mode, "cluster-flap") == 0) {
        w->flap = 1;
        w->failover_kinds = 2;          /* demoted at once, so promoted back later */
    }
    if (strcmp(o->mode, "async") == 0)
        w->async = 1;                   /* an async handle in every schedule */
    if (getenv("SIM_ASYNC"))            /* 0: in none, 1: in every one */
        w->async = atoi(getenv("SIM_ASYNC")) ? 1 : -1;
    if (strcmp(o->mode, "sentinel-nofence") == 0 || strcmp(o->mode, "cluster-nofence") == 0)
        w->fence = 0;
    for (int k = 0; k < SIM_F_COUNT; k++) {
        static const unsigned levels[] = { 0, 0, 5, 20, 60 };
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        w->rate[k] = (seed % 3 == 0) ? 0 : levels[r % 5];
    }
    /* Swarm testing (Groce et al., ISSTA 2012): uniform choices almost
     * never line up two handles in one feed's repair, rebuild or fence
     * window (sim_census counts how often they do). Half the schedules
     * (a stream of their own) are contended instead: one feed and more
     * handles on it (sim_run), each kind of fault either off or frequent,
     * and kinds of operation switched off, so that what is left happens
     * more often. The other half is drawn as before. */
    r ^= r << 13;
    r ^= r >> 7;
    r ^= r << 17;
    if (o->swarm > 0 || (o->swarm == 0 && r % 2)) {
        static const unsigned often[] = { 20, 60, 150 };
        w->swarm = 1;
        for (int k = 0; k < SIM_F_COUNT; k++) {
            r ^= r << 13;
            r ^= r >> 7;
            r ^= r << 17;
            w->rate[k] = r % 2 ? 0 : often[(r >> 1) % 3];
        }
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        w->ops_off = (unsigned)(r >> 3) & (SIM_OP_FANOUT | SIM_OP_RELOAD | SIM_OP_DELETE |
                                            SIM_OP_MERGED | SIM_OP_NEWER);
    }
    if (w->kills)
        w->rate[SIM_F_KILL] = 150;
    if (w->topo != SIM_TOPO_SINGLE && seed % 3 != 0 && w->rate[SIM_F_FAILOVER] == 0)
        w->rate[SIM_F_FAILOVER] = 5;    /* every faulty schedule may fail over */
    if (w->topo == SIM_TOPO_CLUSTER && seed % 3 != 0 && w->rate[SIM_F_MIGRATE] == 0)
        w->rate[SIM_F_MIGRATE] = 20;    /* and migrate slots */
    if (w->flap) {                      /* every schedule: primaries come and go */
        w->rate[SIM_F_FAILOVER] = 30;
        w->rate[SIM_F_MIGRATE] = 0;
    }
    memcpy(w->mask, o->mask, o->nmask * sizeof *o->mask);
    w->nmask = o->nmask;
}

static int sim_one(sim_world *w, uint64_t seed, const sim_opts *o, FILE *trace)
{
    int rc;

    sim_setup(w, seed, o);
    w->trace = trace;
    rc = sim_run(w);
    if (rc < 0) {
        fprintf(stderr, "feedsim: out of memory\n");
        exit(3);
    }
    return rc;
}

/* Fewer faults and operations that still break the invariant. */
static void sim_shrink(uint64_t seed, sim_opts *o)
{
    sim_world *w = malloc(sizeof *w);
    size_t struck[SIM_FAULT_LOG], n;

    if (!w)
        exit(3);
    for (int ops = 1; ops < o->ops; ops++) {
        int was = o->ops;
        o->ops = ops;
        if (sim_one(w, seed, o, NULL) == 1)
            break;
        o->ops = was;
    }
    sim_one(w, seed, o, NULL);
    n = w->last_faults_n;
    memcpy(struck, w->last_faults, n * sizeof *struck);
    for (size_t i = 0; i < n && o->nmask < SIM_MASK_MAX; i++) {
        o->mask[o->nmask++] = struck[i];
        if (sim_one(w, seed, o, NULL) != 1)
            o->nmask--;                  /* that fault is needed */
    }
    free(w);
}

static void print_replay(uint64_t seed, const sim_opts *o)
{
    printf("# replay: %s%s%s%s%s%sSIM_SEED=%llu SIM_OPS=%d SIM_MASK=",
           getenv("SIM_ASYNC") ? "SIM_ASYNC=" : "", getenv("SIM_ASYNC") ? getenv("SIM_ASYNC") : "",
           getenv("SIM_ASYNC") ? " " : "", getenv("SIM_SWARM") ? "SIM_SWARM=" : "",
           getenv("SIM_SWARM") ? getenv("SIM_SWARM") : "", getenv("SIM_SWARM") ? " " : "",
           (unsigned long long)seed, o->ops);
    for (size_t i = 0; i < o->nmask; i++)
        printf("%s%zu", i ? "," : "", o->mask[i]);
    printf(" %s/tests/feedsim %s\n", getenv("BUILD") ? getenv("BUILD") : "build", o->mode);
}

int main(int argc, char **argv)
{
    sim_opts o = { argc > 1 ? argv[1] : "default", 4, 0, { 0 }, 0 };
    const char *seed_env = getenv("SIM_SEED"), *mask = getenv("SIM_MASK");
    const char *expect = getenv("SIM_EXPECT");
    long budget = getenv("SIM_SCHEDULES") ? atol(getenv("SIM_SCHEDULES")) : 100000;
    double seconds = getenv("SIM_SECONDS") ? atof(getenv("SIM_SECONDS")) : 0, t0 = wall();
    uint64_t first = getenv("SIM_FIRST") ? strtoull(getenv("SIM_FIRST"), NULL, 10) : 1;
    uint64_t stride = getenv("SIM_STRIDE") ? strtoull(getenv("SIM_STRIDE"), NULL, 10) : 1;
    int want_violation = expect && strcmp(expect, "violation") == 0;
    sim_world *w = malloc(sizeof *w);
    long runs = 0, faults = 0, pages = 0, lost = 0, walks = 0, ranks = 0;
    long races[SIM_RACES] = { 0 };

    if (!w)
        return 3;
    if (getenv("SIM_OPS"))
        o.ops = atoi(getenv("SIM_OPS"));
    if (getenv("SIM_SWARM"))
        o.swarm = atoi(getenv("SIM_SWARM")) ? 1 : -1;
    for (const char *p = mask; p && *p && o.nmask < SIM_MASK_MAX;) {
        char *end;
        o.mask[o.nmask++] = strtoul(p, &end, 10);
        if (end == p || (*end && *end != ',')) {
            fprintf(stderr, "feedsim: SIM_MASK is a list of numbers: \"3,17,40\"\n");
            return 2;
        }
        p = *end ? end + 1 : end;
    }
    if (strcmp(o.mode, "default") && strcmp(o.mode, "nofence") && strcmp(o.mode, "kills") &&
        strcmp(o.mode, "kills-sync") && strcmp(o.mode, "replica") &&
        strcmp(o.mode, "replica-unbounded") && strcmp(o.mode, "sentinel") &&
        strcmp(o.mode, "sentinel-nofence") && strcmp(o.mode, "sentinel-wait") &&
        strcmp(o.mode, "sentinel-nowait") && strcmp(o.mode, "cluster") &&
        strcmp(o.mode, "cluster-nofence") && strcmp(o.mode, "cluster-wait") &&
        strcmp(o.mode, "cluster-flap") && strcmp(o.mode, "async")) {
        fprintf(stderr, "feedsim: unknown mode %s\n", o.mode);
        return 2;
    }

    if (seed_env) {                     /* replay one seed, traced */
        uint64_t seed = strtoull(seed_env, NULL, 10);
        int rc = sim_one(w, seed, &o, stdout);
        printf("seed %llu (%s): %ld steps, %ld requests, %ld pages, %ld walks, %zu faults, %s\n",
               (unsigned long long)seed, o.mode, w->steps, w->requests, w->pages, w->walks,
               w->faults,
               rc ? w->why : "no violation");
        free(w);
        return rc ? 1 : 0;
    }

    if (stride < 1)
        stride = 1;
    for (uint64_t seed = first;; seed += stride) {
        int rc = sim_one(w, seed, &o, NULL);
        runs++;
        faults += (long)w->faults;
        pages += w->pages;
        walks += w->walks;
        ranks += w->ranks;
        for (int k = 0; k < SIM_RACES; k++)
            races[k] += w->race[k];
        lost += w->acked_lost;
        if (rc == 1) {
            double dt = wall() - t0;
            printf("# seed %llu (%s) breaks the invariant after %ld schedules (%.1f s): %s\n",
                   (unsigned long long)seed, o.mode, runs, dt, w->why);
            if (!getenv("SIM_NO_SHRINK")) {
                sim_shrink(seed, &o);
                printf("# shrunk to %d operations per client, %zu fault draws masked; its trace:\n",
                       o.ops, o.nmask);
                sim_one(w, seed, &o, stdout);
                printf("# %s\n", w->why);
            }
            print_replay(seed, &o);
            printf("%ld schedules, 1 violation\n", runs);
            free(w);
            return want_violation ? 0 : 1;
        }
        if ((budget > 0 && runs >= budget && seconds == 0) || (seconds > 0 && wall() - t0 >= seconds))
            break;
    }
    {
        double dt = wall() - t0;
        printf("# mode %s: %ld pages checked, %ld walks checked to their end, %ld rank hints "
               "checked against the copy, %ld faults injected, %ld acknowledged writes lost in "
               "failovers, %.0f schedules/s\n", o.mode, pages, walks, ranks, faults, lost,
               runs / (dt > 0 ? dt : 1));
        /* How often schedules reach the windows where handles race on one
         * feed (sim_world.c, sim_census). */
        printf("# mode %s: contention in %ld of %ld schedules: a loss recorded during another "
               "handle's repair of its feed; in %ld: that, then the feed's lease held with the "
               "loss pending; in %ld: a loss recorded while its feed's lease was held; in %ld: "
               "two handles setting up one restarted server at once\n", o.mode,
               races[SIM_RACE_REPAIR], runs, races[SIM_RACE_REPAIR_REBUILD],
               races[SIM_RACE_REBUILD], races[SIM_RACE_FENCE]);
        printf("%ld schedules, 0 violations\n", runs);
    }
    free(w);
    return want_violation ? 1 : 0;
}
