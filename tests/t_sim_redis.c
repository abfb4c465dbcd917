/* t_sim_redis.c -- the simulated Redis (tests/sim/) against the real one.
 *
 * The simulation is only worth what its servers are: this test sends the
 * same random commands, and the project's real scripts with random
 * arguments, to the simulated Redis and to the test's real Redis, and
 * compares every reply and, at the end, the whole data set. Error replies
 * are compared by their first word (the code the library looks at). PTTL
 * is compared within 200 ms: the two clocks are the same one, read a few
 * microseconds apart.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "sim/sim.h"
#include "tap.h"
#include "testutil.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint64_t rng;
static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}
static size_t pick(size_t n) { return (size_t)(next() % n); }

/* Replies equal? why gets the first difference. */
static int same(const redisReply *a, const redisReply *b, int pttl, char *why, size_t cap)
{
    if (a->type != b->type) {
        snprintf(why, cap, "type %d vs %d (%.*s / %.*s)", a->type, b->type,
                 a->str ? (int)a->len : 0, a->str ? a->str : "",
                 b->str ? (int)b->len : 0, b->str ? b->str : "");
        return 0;
    }
    switch (a->type) {
    case REDIS_REPLY_INTEGER:
        if (a->integer == b->integer || (pttl && a->integer > 0 && b->integer > 0 &&
                                         llabs(a->integer - b->integer) <= 200))
            return 1;
        snprintf(why, cap, "integer %lld vs %lld", a->integer, b->integer);
        return 0;
    case REDIS_REPLY_ERROR: {
        size_t wa = strcspn(a->str, " "), wb = strcspn(b->str, " ");
        if (wa == wb && memcmp(a->str, b->str, wa) == 0)
            return 1;
        snprintf(why, cap, "error '%s' vs '%s'", a->str, b->str);
        return 0;
    }
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
        if (a->len == b->len && memcmp(a->str, b->str, a->len) == 0)
            return 1;
        snprintf(why, cap, "string '%.*s' vs '%.*s'", (int)a->len, a->str, (int)b->len, b->str);
        return 0;
    case REDIS_REPLY_ARRAY:
        if (a->elements != b->elements) {
            snprintf(why, cap, "array of %zu vs %zu", a->elements, b->elements);
            return 0;
        }
        for (size_t i = 0; i < a->elements; i++)
            if (!same(a->element[i], b->element[i], pttl, why, cap))
                return 0;
        return 1;
    default:
        return 1;
    }
}

static redisContext *real;
static simr *sim;
static int64_t t0;
static long compared, differed;

/* Send argv to both; compare; return 1 when equal. */
static int both(int argc, const char **argv, const size_t *lens, int pttl)
{
    redisReply *a, *b;
    char why[512];

    a = redisCommandArgv(real, argc, argv, lens);
    if (!a)
        tap_bail("real Redis did not answer");
    b = simr_exec(sim, argc, argv, lens, now_ms() - t0 + 1000000);
    if (!b)
        tap_bail("simulated Redis: out of memory");
    compared++;
    int eq = same(a, b, pttl, why, sizeof why);
    if (!eq && differed++ < 5) {
        printf("# %s:", argv[0]);
        for (int i = 1; i < argc && i < 12; i++)
            printf(" %.*s", (int)(lens[i] < 40 ? lens[i] : 40), argv[i]);
        printf("\n#   real vs simulated: %s\n", why);
    }
    freeReplyObject(a);
    freeReplyObject(b);
    return eq;
}

static int bothv(int pttl, const char **argv)
{
    size_t lens[32];
    int argc = 0;

    while (argv[argc]) {
        lens[argc] = strlen(argv[argc]);
        argc++;
    }
    return both(argc, argv, lens, pttl);
}

static const char *const feeds[] = { "t:{1}", "t:{2}", "t:{3}" };
static const char *const leases[] = { "t:{1}:lease", "t:{2}:lease", "t:{3}:lease" };
static const char *const staged[] = { "t:{1}:stage", "t:{2}:stage", "t:{3}:stage" };
static const char *const scores[] = { "0", "1", "2", "5", "-7", "1000", "9007199254740991",
                                      "-9007199254740991", "4503599627370497", "-inf", "+inf",
                                      "3.5", "1e3" };
static char members[8][4];

static void random_member(char *m)
{
    /* Short byte strings, bytes 0x01..0xff with 0x80 and 0x7f among them: the
     * order the scripts compare by is the bytes'. */
    static const unsigned char bytes[] = { 0x01, 0x30, 0x7f, 0x80, 0xff };
    m[0] = (char)bytes[pick(5)];
    m[1] = (char)bytes[pick(5)];
    m[2] = pick(3) ? '\0' : (char)bytes[pick(5)];
    m[3] = '\0';
}

static const char *member(void) { return pick(10) ? members[pick(8)] : "end"; }
static const char *score(void) { return scores[pick(9)]; }   /* no floats for the scripts */

static char shas[FEED_SCRIPT_COUNT][41];

static void load_scripts(void)
{
    for (int s = 0; s < FEED_SCRIPT_COUNT; s++) {    /* every script the library loads */
        const char *body = feed__script_source(s);
        const char *argv[] = { "SCRIPT", "LOAD", body, NULL };
        redisReply *a = redisCommand(real, "SCRIPT LOAD %s", body);
        redisReply *b = simr_execv(sim, 0, argv);
        ok(a && b && a->type == REDIS_REPLY_STRING && b->type == REDIS_REPLY_STRING &&
               strcmp(a->str, b->str) == 0,
           "SCRIPT LOAD of script %d: the same SHA1 as Redis's", s);
        if (a && a->type == REDIS_REPLY_STRING)
            snprintf(shas[s], sizeof shas[s], "%s", a->str);
        freeReplyObject(a);
        freeReplyObject(b);
    }
}

/* One random script call. */
static int random_script(void)
{
    size_t f = pick(3);
    char n[8], ml[8];

    snprintf(n, sizeof n, "%zu", 1 + pick(6));
    snprintf(ml, sizeof ml, "%zu", 2 + pick(5));
    switch (pick(6)) {
    case 0: {                            /* page.lua: first page or after a cursor */
        int first = pick(3) == 0;
        const char *argv[] = { "EVALSHA", shas[FEED_SCRIPT_PAGE], "2", feeds[f], leases[f], n,
                               first ? "" : score(), first ? "" : member(), "tok", "600000",
                               "600000", "300000", "900000", NULL };
        return bothv(0, argv);
    }
    case 1: {
        const char *argv[] = { "EVALSHA", shas[FEED_SCRIPT_INSERT], "2", feeds[f], leases[f],
                               score(), member(), ml, NULL };
        return bothv(0, argv);
    }
    case 2: {
        const char *argv[] = { "EVALSHA", shas[FEED_SCRIPT_DELETE], "2", feeds[f], leases[f],
                               member(), pick(2) ? "400000" : "0", NULL };
        return bothv(0, argv);
    }
    case 3: {                            /* stage then rebuild.lua, as a rebuild does */
        const char *z[] = { "ZADD", staged[f], score(), member(), score(), member(), NULL };
        const char *argv[] = { "EVALSHA", shas[FEED_SCRIPT_REBUILD], "3", feeds[f], leases[f],
                               staged[f], pick(4) ? "tok" : "other", pick(2) ? "600000" : "0",
                               NULL };
        return bothv(0, z) & bothv(0, argv);
    }
    case 4: {
        const char *argv[] = { "EVALSHA", shas[FEED_SCRIPT_NEWER], "1", feeds[f], n, score(),
                               member(), NULL };
        return bothv(0, argv);
    }
    default: {
        const char *argv[] = { "EVALSHA", shas[FEED_SCRIPT_INVALIDATE], "2", feeds[f], leases[f],
                               NULL };
        return bothv(0, argv);
    }
    }
}

/* One random plain command. */
static int random_command(void)
{
    size_t f = pick(3);
    char a[8], b[8];

    snprintf(a, sizeof a, "%d", (int)pick(8) - 3);
    snprintf(b, sizeof b, "%d", (int)pick(10) - 3);
    switch (pick(16)) {
    case 0: case 1: case 2: {
        const char *argv[] = { "ZADD", feeds[f], scores[pick(13)], member(), NULL };
        return bothv(0, argv);
    }
    case 3: {
        const char *argv[] = { "ZREM", feeds[f], member(), NULL };
        return bothv(0, argv);
    }
    case 4: {
        const char *argv[] = { pick(2) ? "ZREVRANGE" : "ZRANGE", feeds[f], a, b, "WITHSCORES", NULL };
        return bothv(0, argv);
    }
    case 5: {
        const char *argv[] = { "ZREVRANGEBYSCORE", feeds[f], pick(2) ? score() : "(1000",
                               pick(2) ? "-inf" : "(0", "WITHSCORES", "LIMIT", "0", b + (b[0] == '-'),
                               NULL };
        return bothv(0, argv);
    }
    case 6: {
        const char *argv[] = { "ZCOUNT", feeds[f], pick(2) ? "-inf" : "(1", score(), NULL };
        return bothv(0, argv);
    }
    case 7: {
        static const char *const w[] = { "ZSCORE", "ZRANK", "ZREVRANK" };
        const char *argv[] = { w[pick(3)], feeds[f], member(), NULL };
        return bothv(0, argv);
    }
    case 8: {
        const char *argv[] = { "ZREMRANGEBYRANK", feeds[f], "0", a, NULL };
        return bothv(0, argv);
    }
    case 9: {
        const char *argv[] = { "SET", leases[f], pick(2) ? "tok" : "other", "NX", "PX", "600000", NULL };
        return bothv(0, argv);
    }
    case 10: {
        const char *argv[] = { pick(2) ? "GET" : "ZCARD", pick(2) ? leases[f] : feeds[f], NULL };
        return bothv(0, argv);
    }
    case 11: {
        const char *argv[] = { pick(2) ? "DEL" : "UNLINK", feeds[f], leases[pick(3)], NULL };
        return pick(4) == 0 ? bothv(0, argv) : 1;
    }
    case 12: {
        const char *argv[] = { "PEXPIRE", pick(2) ? feeds[f] : leases[f], pick(2) ? "500000" : "100000",
                               NULL };
        return bothv(0, argv);
    }
    case 13: {
        const char *argv[] = { pick(2) ? "PTTL" : "PERSIST", pick(2) ? feeds[f] : leases[f], NULL };
        return bothv(1, argv);
    }
    case 14: {
        const char *argv[] = { "EXISTS", feeds[f], leases[f], staged[f], NULL };
        return bothv(0, argv);
    }
    default:
        return random_script();
    }
}

/* The whole data set of both, compared key by key. */
static int same_data(void)
{
    int eq = 1;

    for (size_t f = 0; f < 3; f++) {
        const char *z[] = { "ZRANGE", feeds[f], "0", "-1", "WITHSCORES", NULL };
        const char *g[] = { "GET", leases[f], NULL };
        const char *s[] = { "EXISTS", staged[f], NULL };
        const char *t[] = { "PTTL", feeds[f], NULL };
        eq &= bothv(0, z) & bothv(0, g) & bothv(0, s) & bothv(1, t);
    }
    return eq;
}

/* simr_migrate_one's choice: the key "mk" only. */
static int migrating(void *arg, const char *key, size_t len)
{
    (void)arg;
    return len == 2 && memcmp(key, "mk", 2) == 0;
}

int main(void)
{
    const char *seed_env = getenv("SIM_SEED");
    uint64_t seed = seed_env ? strtoull(seed_env, NULL, 10) : 20261127;
    int all = 1;

    real = tu_redis();
    sim = simr_new(seed, NULL);
    if (!sim)
        tap_bail("simr_new");
    t0 = now_ms() - 1000000;

    {
        redisReply *x = redisCommand(real, "FLUSHALL");
        freeReplyObject(x);
        x = redisCommand(real, "SCRIPT FLUSH");
        freeReplyObject(x);
    }
    load_scripts();

    /* Redis's Lua conversions, the ones the scripts' comments rely on. */
    {
        const char *cases[] = {
            "return 3.7", "return tostring(9007199254740991)", "return {1, 2.9, 'x', false, 4}",
            "return redis.call('ZADD', KEYS[1], 9007199254740991, 'm')",
            "return redis.call('ZSCORE', KEYS[1], 'm')", "return {ok='fine'}",
            "return redis.error_reply('ERR custom')", "return redis.call('GET', KEYS[1])",
            "return redis.pcall('GET', KEYS[1])", "return true", "return nil",
            "return redis.call('ZADD', KEYS[1], 4503599627370497.0, 'n')",
            "return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')",
        };
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            const char *argv[] = { "EVAL", cases[i], "1", "conv:{9}", NULL };
            ok(bothv(0, argv), "EVAL \"%s\": the same reply", cases[i]);
        }
        const char *nos[] = { "EVALSHA", "0123456789012345678901234567890123456789", "0", NULL };
        ok(bothv(0, nos), "EVALSHA of an unknown script: NOSCRIPT from both");
    }

    rng = seed | 1;
    for (int i = 0; i < 8; i++)
        random_member(members[i]);
    for (int round = 0; round < 40; round++) {
        int eq = 1;
        for (int i = 0; i < 500; i++)
            eq &= random_command();
        eq &= same_data();
        all &= eq;
        if (!eq)
            break;
    }
    ok(all, "20,000 random commands and script calls (seed %llu): every reply and the data "
            "set the same as Redis's (%ld replies compared)",
       (unsigned long long)seed, compared);

    /* A restart: the data set from a snapshot, scripts gone. */
    {
        simr *snap = simr_snapshot(sim);
        char *before = simr_dump(sim, 2000000), *after;
        const char *argv[] = { "EVALSHA", shas[FEED_SCRIPT_INVALIDATE], "2", feeds[0], leases[0], NULL };
        redisReply *x;

        ok(snap && simr_restart(sim, snap, seed + 1) == 0, "snapshot and restart from it");
        after = simr_dump(sim, 2000000);
        ok(before && after && strcmp(before, after) == 0, "the data set survives the restart");
        x = simr_execv(sim, 2000000, argv);
        ok(x && x->type == REDIS_REPLY_ERROR && strncmp(x->str, "NOSCRIPT", 8) == 0,
           "after the restart a script is NOSCRIPT");
        freeReplyObject(x);
        free(before);
        free(after);
        simr_free(snap);
    }

    /* TTLs on the simulated clock. */
    {
        const char *set[] = { "SET", "k", "v", "PX", "100", NULL };
        const char *get[] = { "GET", "k", NULL };
        redisReply *x = simr_execv(sim, 5000000, set), *y, *z;
        y = simr_execv(sim, 5000099, get);
        z = simr_execv(sim, 5000100, get);
        ok(x && y && z && y->type == REDIS_REPLY_STRING && z->type == REDIS_REPLY_NIL,
           "a key with a 100 ms TTL is there at +99 ms and gone at +100 ms of simulated time");
        freeReplyObject(x);
        freeReplyObject(y);
        freeReplyObject(z);
    }

    /* What the simulated world builds on (sim_world.c), with no
     * counterpart on one real server: a replica's copy, ROLE and WAIT as
     * the world sets them, a key migrating. */
    {
        simr *rep = simr_new(seed + 7, NULL);
        const char *zadd[] = { "ZADD", "m{1}", "1", "x", NULL }, *info[] = { "INFO", NULL };
        const char *role[] = { "ROLE", NULL }, *wait[] = { "WAIT", "1", "0", NULL };
        const char *set[] = { "SET", "mk", "v", "PX", "500", NULL };
        const char *pttl[] = { "PTTL", "mk", NULL };
        redisReply *x, *y, *z;
        char *a, *b;
        long long off;

        x = simr_execv(sim, 6000000, zadd);
        freeReplyObject(x);
        ok(rep && simr_replicate(rep, sim) == 0, "a replica receives the primary's data set");
        a = simr_dump(sim, 6000000);
        b = simr_dump(rep, 6000000);
        ok(a && b && strcmp(a, b) == 0 && simr_offset(rep) == simr_offset(sim),
           "the replica's data set and offset are the primary's");
        free(a);
        free(b);
        x = simr_execv(sim, 6000000, info);
        y = simr_execv(rep, 6000000, info);
        ok(x && y && strstr(x->str, "master_replid:") && strstr(y->str, "master_replid:") &&
           strcmp(strstr(x->str, "master_replid:"), strstr(y->str, "master_replid:")) == 0 &&
           strncmp(strstr(x->str, "run_id:"), strstr(y->str, "run_id:"), 47) != 0,
           "the replica has the primary's master_replid and offset, and its own run_id");
        freeReplyObject(x);
        freeReplyObject(y);
        off = simr_offset(sim);
        x = simr_execv(sim, 6000000, zadd);
        ok(simr_offset(sim) == off + 1 && simr_offset(rep) == off,
           "a write moves the primary's offset, not the replica's");
        freeReplyObject(x);
        simr_set_links(sim, 2, 1);
        x = simr_execv(sim, 6000000, role);
        y = simr_execv(sim, 6000000, wait);
        ok(x && x->type == REDIS_REPLY_ARRAY && x->elements == 3 &&
           x->element[2]->type == REDIS_REPLY_ARRAY && x->element[2]->elements == 2 &&
           y && y->type == REDIS_REPLY_INTEGER && y->integer == 1,
           "ROLE lists the replicas attached, WAIT answers those acknowledged");
        freeReplyObject(x);
        freeReplyObject(y);
        simr_set_links(sim, 0, 0);
        simr_set_role(rep, 1, 0);
        x = simr_execv(rep, 6000000, zadd);
        y = simr_execv(rep, 6000000, wait);
        ok(x && x->type == REDIS_REPLY_ERROR && strncmp(x->str, "READONLY", 8) == 0 && y &&
           y->type == REDIS_REPLY_ERROR && strstr(y->str, "replica instances"),
           "a replica refuses writes (READONLY) and WAIT");
        freeReplyObject(x);
        freeReplyObject(y);
        simr_free(rep);

        rep = simr_new(seed + 8, NULL);
        x = simr_execv(sim, 6000000, set);
        freeReplyObject(x);
        {
            int moved = simr_migrate_one(sim, rep, migrating, NULL, 6000100), none;
            none = simr_migrate_one(sim, rep, migrating, NULL, 6000100);
            x = simr_execv(rep, 6000100, pttl);
            y = simr_execv(sim, 6000100, pttl);
            z = simr_execv(rep, 6000600, pttl);
            ok(moved == 1 && none == 0 && x && x->type == REDIS_REPLY_INTEGER &&
               x->integer == 400 && y && y->integer == -2 && z && z->integer == -2,
               "a migrating key moves whole with its TTL, once");
            freeReplyObject(x);
            freeReplyObject(y);
            freeReplyObject(z);
        }
        simr_free(rep);
    }

    simr_free(sim);
    redisFree(real);
    return tap_done();
}
