/* memory.c -- section "memory": what a cached item costs Redis, by member
 * encoding and zset encoding, and what that costs pages and inserts.
 *
 *   1. Bytes per item (MEMORY USAGE, exact whatever the load): the library's
 *      members against plain decimal ids (the floor: what Redis stores for
 *      an id with nothing added), the old 19 zero-padded digits and the
 *      candidates measured before choosing, for 6-digit ids (the data
 *      set's) and 19-digit snowflake ids, for max_len 127 (listpack) and
 *      1,000 (skiplist by default, listpack with the limit raised).
 *   2. Redis server time per page, old members against new: the same
 *      lua/page.lua on the same items, one copy per encoding, interleaved.
 *   3. Capacity planning: per cached feed, bytes and the server time of a
 *      page and of an insert hook, for max_len 100 / 800 / 1,000 with the
 *      default and a raised zset-max-listpack-entries; the table of
 *      docs/operations.md, "Memory and capacity planning".
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bench.h"
#include "internal.h"    /* feed__member_encode, feed_lua_page, FEED_KEY_VERSION */
#include "reads.h"

#define RAISED 1024                 /* zset-max-listpack-entries, raised */
#define UID_SNOW 1000001            /* a feed of 19-digit ids, added here */

/* ------------------------------------------------------------ members */

/* The styles compared. Each returns the member's length. */
enum style { S_PLAIN, S_OURS, S_OLD, S_LENBIN, S_BIN, NSTYLE };
static const char *const style_name[NSTYLE] = {
    "plain decimal", "**feedcache**", "old: 19 digits", "candidate: length + digits, bytes",
    "candidate: bytes only"
};

/* n big-endian bytes of v after prefix. */
static size_t be_bytes(char *b, char prefix, uint64_t v, int n)
{
    b[0] = prefix;
    for (int i = 0; i < n; i++)
        b[1 + i] = (char)(unsigned char)(v >> (8 * (n - 1 - i)));
    return (size_t)n + 1;
}

static size_t encode(enum style st, int64_t id, char b[32])
{
    uint64_t v = (uint64_t)id;
    int n = 1;

    switch (st) {
    case S_PLAIN:
        return (size_t)snprintf(b, 32, "%lld", (long long)id);
    case S_OURS:
        return feed__member_encode(id, b);
    case S_OLD:
        return (size_t)snprintf(b, 32, "%019lld", (long long)id);
    case S_LENBIN:   /* ids < 10^8: the digit count, the digits (a listpack
                        integer); above: ':'.. and 4..8 bytes */
        if (id < 100000000)
            return (size_t)snprintf(b, 32, "%d%lld", snprintf(NULL, 0, "%lld", (long long)id),
                                    (long long)id);
        for (n = 4; n < 8 && v >> (8 * n); n++)
            ;
        return be_bytes(b, (char)(':' + n - 4), v, n);
    default:         /* the byte count, then the fewest big-endian bytes */
        while (n < 8 && v >> (8 * n))
            n++;
        return be_bytes(b, (char)('A' + n), v, n);
    }
}

static int64_t snowflake(int64_t id)    /* a 19-digit id, 2^22 apart */
{
    return 1500000000000000000LL + id * 4194304LL;
}

/* One variadic ZADD of n items and the end marker into a fresh key, as the
 * library's install does. */
static void build_set(redisContext *c, const char *key, const feed_item *items, size_t n,
                      enum style st, int snow)
{
    size_t a = 0;
    const char **argv = malloc((4 + 2 * n) * sizeof *argv);
    size_t *lens = malloc((4 + 2 * n) * sizeof *lens);
    char *text = malloc(n * 64 + 1);

    if (!argv || !lens || !text)
        die("out of memory");
    b_cmd_ok(c, "DEL %s", key);
    argv[a] = "ZADD";
    lens[a++] = 4;
    argv[a] = key;
    lens[a++] = strlen(key);
    for (size_t i = 0; i < n; i++) {
        char *s = text + i * 64, *m = s + 24;
        lens[a] = (size_t)snprintf(s, 24, "%lld", (long long)items[i].score);
        argv[a++] = s;
        lens[a] = encode(st, snow ? snowflake(items[i].id) : items[i].id, m);
        argv[a++] = m;
    }
    argv[a] = "-inf";
    lens[a++] = 4;
    argv[a] = FEED_END_MEMBER;
    lens[a++] = strlen(FEED_END_MEMBER);
    freeReplyObject(b_argv(c, (int)a, argv, lens));
    free(argv);
    free(lens);
    free(text);
}

static long long memory_usage(redisContext *c, const char *key)
{
    redisReply *r = b_cmd(c, "MEMORY USAGE %s SAMPLES 0", key);
    long long v = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;

    freeReplyObject(r);
    return v;
}

static const char *encoding_of(redisContext *c, const char *key, char buf[16])
{
    redisReply *r = b_cmd(c, "OBJECT ENCODING %s", key);

    snprintf(buf, 16, "%s", r->type == REDIS_REPLY_STRING ? r->str : "?");
    freeReplyObject(r);
    return buf;
}

static long long config_get(redisContext *c, const char *name)
{
    redisReply *r = b_cmd(c, "CONFIG GET %s", name);
    long long v;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        die("CONFIG GET %s: unexpected reply", name);
    v = atoll(r->element[1]->str);
    freeReplyObject(r);
    return v;
}

static void listpack_limit(redisContext *c, long long n)
{
    b_cmd_ok(c, "CONFIG SET zset-max-listpack-entries %lld", n);
}

/* Part 1: bytes per item by style. Returns the worst feedcache / plain. */
static double bytes_per_item(FILE *md, redisContext *c, const feed_item *k1, size_t n1k,
                             long long dflt)
{
    static const struct { size_t len; int raised; } cfg[3] = {
        { 127, 0 }, { 1000, 0 }, { 1000, 1 }
    };
    double worst = 0;

    fprintf(md, "### Bytes per cached item, by member encoding\n\n"
            "`MEMORY USAGE key SAMPLES 0` (exact, whatever the load) divided by the item"
            " count, for a feed of max_len items and the end marker built with one variadic"
            " ZADD, as the library's install does. Scores are the data set's (13-digit"
            " milliseconds). 6-digit ids are the data set's; 19-digit ids are snowflake-like"
            " (1.5 * 10^18 + id * 2^22). *Plain decimal* is the floor: the id as Redis"
            " stores it with nothing added (a listpack keeps it as an integer). feedcache's"
            " members (lib/base/codec.c): \"-\", the digit count and the digits below 10^8 (a"
            " listpack integer: \"-6200002\"), \".\" and 8 bytes for 9 to 18 digits, the 19"
            " digits themselves from 10^18. The candidates were measured before choosing."
            " A listpack is one allocation, rounded up to jemalloc's size classes (4 KiB"
            " steps near 16 KiB): one byte more per item can cost 4 B per item at a class"
            " boundary, which is why *bytes only* loses with 19-digit ids."
            " Default `zset-max-listpack-entries` is %lld.\n\n"
            "| ids | max_len | zset-max-listpack-entries |", dflt);
    for (int s = 0; s < NSTYLE; s++)
        fprintf(md, " %s |", style_name[s]);
    fprintf(md, " feedcache / plain (target <= 1.15x) |\n| --- | ---: | --- |");
    for (int s = 0; s <= NSTYLE; s++)
        fprintf(md, " ---: |");
    fprintf(md, "\n");
    for (int snow = 0; snow < 2; snow++) {
        for (int k = 0; k < 3; k++) {
            double per[NSTYLE];
            char enc[NSTYLE][16];
            if (cfg[k].len > n1k)
                die("memory: the 1,000-item feed has %zu rows", n1k);
            listpack_limit(c, cfg[k].raised ? RAISED : dflt);
            for (int s = 0; s < NSTYLE; s++) {
                build_set(c, "mem:{1}", k1, cfg[k].len, (enum style)s, snow);
                per[s] = (double)memory_usage(c, "mem:{1}") / (double)cfg[k].len;
                encoding_of(c, "mem:{1}", enc[s]);
            }
            fprintf(md, "| %s | %zu | %s |", snow ? "19-digit" : "6-digit", cfg[k].len,
                    cfg[k].raised ? "1024 (raised)" : "default");
            for (int s = 0; s < NSTYLE; s++)
                fprintf(md, " %s%.1f B%s (%s) |", s == S_OURS ? "**" : "", per[s],
                        s == S_OURS ? "**" : "", enc[s]);
            fprintf(md, " **%.2fx** %s |\n", per[S_OURS] / per[S_PLAIN],
                    verdict(per[S_OURS] / per[S_PLAIN] <= 1.15));
            if (per[S_OURS] / per[S_PLAIN] > worst)
                worst = per[S_OURS] / per[S_PLAIN];
        }
    }
    b_cmd_ok(c, "DEL mem:{1}");
    listpack_limit(c, dflt);
    return worst;
}

/* ------------------------------------------------------------ page.lua, old vs new */

/* One page.lua call on a hand-built copy: KEYS feed, lease; ARGV want,
 * cursor score, cursor member, token, lease ms, TTL ms. */
typedef struct lua_page {
    redisContext *c;
    const char   *argv[11];
    size_t        lens[11];
    char          key[64], lease[72], score[24], member[32];
    char          sha[41];
} lua_page;

static int op_lua_page(void *arg)
{
    lua_page *x = arg;
    redisReply *r = redisCommandArgv(x->c, 11, x->argv, x->lens);
    int bad = !r || r->type != REDIS_REPLY_ARRAY || r->elements < 2;

    freeReplyObject(r);
    return bad;
}

static void lua_page_init(lua_page *x, redisContext *c, const char *sha, const char *key,
                          int first, int64_t score, int64_t id, enum style st)
{
    memset(x, 0, sizeof *x);
    x->c = c;
    memcpy(x->sha, sha, 41);
    snprintf(x->key, sizeof x->key, "%s", key);
    snprintf(x->lease, sizeof x->lease, "%s:lease", key);
    x->argv[0] = "EVALSHA";
    x->argv[1] = x->sha;
    x->argv[2] = "2";
    x->argv[3] = x->key;
    x->argv[4] = x->lease;
    x->argv[5] = "21";
    x->argv[6] = x->score;
    x->argv[7] = x->member;
    x->argv[8] = "token";
    x->argv[9] = "3000";
    x->argv[10] = "604800000";
    for (int i = 0; i < 11; i++)
        x->lens[i] = strlen(x->argv[i]);
    if (!first) {
        x->lens[6] = (size_t)snprintf(x->score, sizeof x->score, "%lld", (long long)score);
        x->lens[7] = encode(st, id, x->member);
    }
}

/* Server time of each call, call by call: SLOWLOG, its threshold set to 0,
 * records every command's own execution time (µs), so the variants can
 * alternate call by call (the order rotating) and meet the same load;
 * commandstats could only average a whole run of one kind. A call may send
 * several commands (a plain read, a script, a pipeline): after each, an
 * ECHO on this connection marks where it ended, and a call's time is the
 * sum of the commands logged since the last mark (a script's inner
 * commands, logged by Redis's Lua client "?", are inside its own time and
 * skipped). Per round: reset the log, make `per` calls of each variant,
 * read the log back. Fills each variant's srv_us with one sample per call,
 * so paired_ratio_srv pairs calls made next to each other. */
static void slowlog_rounds(redisContext *c, variant *v, size_t nv, int rounds, int per)
{
    size_t n = nv * (size_t)per, *seq = malloc(n * sizeof *seq);
    long long slower = config_get(c, "slowlog-log-slower-than");
    long long maxlen = config_get(c, "slowlog-max-len");

    if (!seq)
        die("out of memory");
    b_cmd_ok(c, "CONFIG SET slowlog-max-len %lld", (long long)(64 * n));
    for (int r = 0; r < rounds; r++) {
        redisReply *log;
        size_t j = 0;
        double sum = 0;
        int open = 0;

        b_cmd_ok(c, "SLOWLOG RESET");
        b_cmd_ok(c, "CONFIG SET slowlog-log-slower-than 0");
        b_cmd_ok(c, "ECHO start");
        for (size_t k = 0; k < n; k++) {
            seq[k] = (k + k / nv + (size_t)r) % nv;
            if (v[seq[k]].op(v[seq[k]].ctx))
                die("memory: %s failed", v[seq[k]].name);
            b_cmd_ok(c, "ECHO mark");
        }
        b_cmd_ok(c, "CONFIG SET slowlog-log-slower-than %lld", slower);
        log = b_cmd(c, "SLOWLOG GET -1");
        for (size_t e = log->elements; e-- > 0;) {   /* newest first: walk back */
            const redisReply *en = log->element[e], *argv;
            const char *cmd, *addr;
            if (en->type != REDIS_REPLY_ARRAY || en->elements < 5)
                continue;
            argv = en->element[3];
            addr = en->element[4]->type == REDIS_REPLY_STRING ? en->element[4]->str : "";
            if (argv->type != REDIS_REPLY_ARRAY || argv->elements < 1 || addr[0] == '?')
                continue;
            cmd = argv->element[0]->str;
            if (strcasecmp(cmd, "echo") == 0) {
                if (open) {
                    if (j == n)
                        die("memory: more calls in the slowlog than made");
                    sm_add(&v[seq[j++]].srv_us, sum);
                }
                open = 1;       /* the first ECHO opens the first call */
                sum = 0;
            } else if (open && strcasecmp(cmd, "config") != 0) {
                sum += (double)en->element[2]->integer;
            }
        }
        if (j != n)
            die("memory: %zu calls in the slowlog, %zu made", j, n);
        freeReplyObject(log);
    }
    b_cmd_ok(c, "CONFIG SET slowlog-max-len %lld", maxlen);
    b_cmd_ok(c, "SLOWLOG RESET");
    free(seq);
}

#define PAIRS 100   /* calls of each kind per round */

/* Part 2. Returns the worst new / old over the targeted cases (the
 * default encoding: the pages section's cases). */
static double page_time(FILE *md, redisContext *c, const feed_item *k1, size_t n1k,
                        const feed_item *tie, size_t ntie, long long dflt)
{
    static const struct { const char *label; int feed; int raised; size_t depth; int gone; }
    cases[] = {
        { "1,000-item feed, depth 0", 0, 0, 0, 0 },
        { "1,000-item feed, depth 20", 0, 0, 20, 0 },
        { "1,000-item feed, depth 500", 0, 0, 500, 0 },
        { "1,000-item feed, depth 980", 0, 0, 980, 0 },
        { "10,000-item tie group, depth 5,000", 1, 0, 5000, 0 },
        { "tie group, depth 5,000, cursor item deleted", 1, 0, 5000, 1 },
        { "1,000-item feed as a listpack (raised), depth 0", 0, 1, 0, 0 },
        { "1,000-item feed as a listpack (raised), depth 20", 0, 1, 20, 0 },
        { "1,000-item feed as a listpack (raised), depth 500", 0, 1, 500, 0 },
        { "1,000-item feed as a listpack (raised), depth 980", 0, 1, 980, 0 },
    };
    int rounds = q_rounds(30);
    double worst = 0;
    char sha[41], enc[16];

    b_script_load(c, feed_lua_page, sha);
    fprintf(md, "\n### Redis server time per page, old members against new\n\n"
            "The library's `lua/page.lua` (`EVALSHA`) on two copies of the same items, one"
            " with the old members (19 zero-padded digits), one with the new: a page of %d"
            " after the cursor of the item at depth - 1. Old and new calls alternate one by"
            " one (%d rounds of %d pairs), and Redis's SLOWLOG, its threshold set to 0,"
            " gives each call's own server time (µs, whole), so each pair meets the same"
            " load; medians of the per-call times, and the median of the per-pair ratios. The"
            " data set's ids have 6 digits; ids from 10^18 are the same bytes in both"
            " formats. *Cursor item deleted* takes the slow seek, a binary search"
            " comparing members (byte by byte in Lua). The target counts the default"
            " encoding (skiplist: the pages section's cases); a raised listpack is"
            " reported: a listpack lookup (ZREVRANK) compares the cursor member with each"
            " entry it passes, and an integer entry costs a parse of the cursor member"
            " each time, more than a memcmp of two strings.\n\n"
            "| case | encoding | old members | **new members** | new / old (target <= 1.05x) |\n"
            "| --- | --- | ---: | ---: | ---: |\n", PAGE_LIMIT, rounds, PAIRS);
    for (int raised = 0; raised < 2; raised++) {
        /* Build both copies of both feeds in this encoding. */
        listpack_limit(c, raised ? RAISED : dflt);
        build_set(c, "pg:old:{2}", k1, n1k, S_OLD, 0);
        build_set(c, "pg:new:{2}", k1, n1k, S_OURS, 0);
        if (!raised) {
            build_set(c, "pg:old:{3}", tie, ntie, S_OLD, 0);
            build_set(c, "pg:new:{3}", tie, ntie, S_OURS, 0);
        }
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            const feed_item *items = cases[i].feed ? tie : k1;
            size_t n = cases[i].feed ? ntie : n1k;
            page_pos p;
            lua_page x[2];
            variant v[2];
            double ratio;
            if (cases[i].raised != raised)
                continue;
            note("memory: page.lua, %s", cases[i].label);
            p = pos_at(items, n, cases[i].depth);
            if (cases[i].gone)
                p.id -= 1;   /* ids are even: an odd id is an item that is gone */
            lua_page_init(&x[0], c, sha, cases[i].feed ? "pg:old:{3}" : "pg:old:{2}",
                          p.first, p.score, p.id, S_OLD);
            lua_page_init(&x[1], c, sha, cases[i].feed ? "pg:new:{3}" : "pg:new:{2}",
                          p.first, p.score, p.id, S_OURS);
            memset(v, 0, sizeof v);
            v[0] = (variant){ .name = "page.lua, old members", .op = op_lua_page, .ctx = &x[0] };
            v[1] = (variant){ .name = "page.lua, new members", .op = op_lua_page, .ctx = &x[1] };
            slowlog_rounds(c, v, 2, rounds, PAIRS);
            ratio = paired_ratio_srv(&v[1], &v[0]);
            fprintf(md, "| %s | %s | %s µs | **%s µs** | **%.3fx** %s |\n", cases[i].label,
                    encoding_of(c, x[1].key, enc), NUM(sm_median(&v[0].srv_us)),
                    NUM(sm_median(&v[1].srv_us)), ratio, raised ? "(report)" : verdict(ratio <= 1.05));
            if (!raised && ratio > worst)
                worst = ratio;
            variant_free(&v[0]);
            variant_free(&v[1]);
        }
    }
    b_cmd_ok(c, "DEL pg:old:{2} pg:new:{2} pg:old:{3} pg:new:{3}");
    listpack_limit(c, dflt);
    return worst;
}

/* ------------------------------------------------------------ capacity */

/* feed_on_insert of a new top item into a feed of its own (uid 4: pages
 * keep their cursors cached): each call adds one and, once the feed is
 * full, trims one. New ids have 7 digits, like the feed's. */
typedef struct insert_ctx {
    feed   *f;
    int64_t uid, score, id;
} insert_ctx;

static int op_insert(void *arg)
{
    insert_ctx *x = arg;
    int rc = feed_on_insert(x->f, x->uid, x->score, x->id);

    x->score += 1;
    x->id += 2;
    return rc != FEED_OK;
}

/* Part 3: the capacity table (docs/operations.md). */
static void capacity(FILE *md, redisContext *c, PGconn *pg,
                     long long dflt, double *lp_vs_sl)
{
    enum { NCFG = 5 };
    static const struct { uint32_t max_len; int raised; } cfg[NCFG] = {
        { 100, 0 }, { 800, 0 }, { 800, 1 }, { 1000, 0 }, { 1000, 1 }
    };
    feed *f[NCFG];
    page_ctx first[NCFG], mid[NCFG];
    insert_ctx ins[NCFG];
    variant v[3 * NCFG];
    long long bytes[NCFG][2];
    char enc[NCFG][16], prefix[NCFG][16];
    feed_item *big, *rest;
    size_t nbig = sql_feed(pg, UID_BIG, &big), nrest = sql_feed(pg, UID_REST, &rest);
    int rounds = q_rounds(15);

    PQclear(b_sql(pg, "DELETE FROM feed_entry WHERE uid = 1000001"));
    PQclear(b_sql(pg, "INSERT INTO feed_entry (uid, score, id) SELECT 1000001,"
                  " 1700000000000 + (g * 2654435761) % 100000000000,"
                  " 1500000000000000000 + g::bigint * 4194304 FROM generate_series(1, 2000) g"));
    memset(v, 0, sizeof v);
    for (int k = 0; k < NCFG; k++) {
        /* The zset encoding is chosen when the install creates the key. */
        listpack_limit(c, cfg[k].raised ? RAISED : dflt);
        snprintf(prefix[k], sizeof prefix[k], "cap%d", k);
        f[k] = b_open(prefix[k], cfg[k].max_len);
        warm(f[k], c, UID_SNOW, prefix[k], cfg[k].max_len);
        bytes[k][1] = memory_usage(c, b_key(prefix[k], UID_SNOW, ""));
        warm(f[k], c, UID_BIG, prefix[k], cfg[k].max_len);
        bytes[k][0] = memory_usage(c, b_key(prefix[k], UID_BIG, ""));
        encoding_of(c, b_key(prefix[k], UID_BIG, ""), enc[k]);
        first[k] = (page_ctx){ f[k], UID_BIG, pos_at(big, nbig, 0) };
        mid[k] = (page_ctx){ f[k], UID_BIG, pos_at(big, nbig, cfg[k].max_len / 2) };
        warm(f[k], c, UID_REST, prefix[k],
             nrest > cfg[k].max_len ? (long long)cfg[k].max_len : (long long)nrest + 1);
        ins[k] = (insert_ctx){ f[k], UID_REST, rest[0].score + 1, 3000001 };
        v[3 * k] = (variant){ .name = "first", .op = op_page, .ctx = &first[k], .cmd = "evalsha" };
        v[3 * k + 1] = (variant){ .name = "mid", .op = op_page, .ctx = &mid[k], .cmd = "evalsha" };
        v[3 * k + 2] = (variant){ .name = "insert", .op = op_insert, .ctx = &ins[k], .cmd = "evalsha" };
    }
    /* Keep the limit raised while measuring: an insert into a listpack
     * longer than the limit would convert it to a skiplist. Skiplists never
     * convert back. */
    listpack_limit(c, RAISED);
    note("memory: capacity, pages and inserts by max_len and encoding");
    slowlog_rounds(c, v, 3 * NCFG, rounds, 20);
    fprintf(md, "\n### Capacity planning\n\n"
            "What one cached feed costs Redis, through the library: a feed longer than"
            " max_len (uid 1) cached by `feed_page` with max_len items, no end marker."
            " Bytes are `MEMORY USAGE` of the key (the set, its key name and its entry in"
            " the keyspace; a TTL adds an entry in the expires table, about 40 B more)."
            " Per million feeds is that times 10^6, in GB (10^9 B), before Redis's own"
            " overhead and fragmentation. Server time per call is from SLOWLOG,"
            " the sum of the commands the call sent (%d rounds, the %d kinds of call"
            " alternating, 20 of each a round), medians: a first page, a page after a"
            " cursor at depth max_len / 2 (of uid 1), and `feed_on_insert` of a new top item"
            " into a feed of 891 rows (uid 4: the add, and the trim of the lowest item"
            " once max_len is reached). 6-digit ids are the data set's;"
            " 19-digit ids a feed of snowflake-like ids.\n\n"
            "| max_len | zset-max-listpack-entries | encoding | bytes per feed, 6-digit ids"
            " | per million feeds | bytes per feed, 19-digit ids | per million feeds"
            " | first page | page at depth max_len / 2 | insert hook |\n"
            "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n",
            rounds, 3 * NCFG);
    for (int k = 0; k < NCFG; k++) {
        fprintf(md, "| %u | %s | %s | %s B | %.1f GB | %s B | %.1f GB | %s µs | %s µs | %s µs |\n",
                cfg[k].max_len, cfg[k].raised ? "1024 (raised)" : "128 (default)", enc[k],
                NUM((double)bytes[k][0]), (double)bytes[k][0] / 1e3,
                NUM((double)bytes[k][1]), (double)bytes[k][1] / 1e3,
                NUM(sm_median(&v[3 * k].srv_us)), NUM(sm_median(&v[3 * k + 1].srv_us)),
                NUM(sm_median(&v[3 * k + 2].srv_us)));
    }
    /* max_len 1,000 as a listpack against the skiplist, page at depth 500. */
    *lp_vs_sl = paired_ratio_srv(&v[3 * 4 + 1], &v[3 * 3 + 1]);
    for (int k = 0; k < NCFG; k++) {
        feed_invalidate(f[k], UID_BIG);
        feed_invalidate(f[k], UID_SNOW);
        feed_invalidate(f[k], UID_REST);
        feed_close(f[k]);
        variant_free(&v[3 * k]);
        variant_free(&v[3 * k + 1]);
        variant_free(&v[3 * k + 2]);
    }
    PQclear(b_sql(pg, "DELETE FROM feed_entry WHERE uid = 1000001"));
    listpack_limit(c, dflt);
    free(big);
    free(rest);
}

void section_memory(void)
{
    redisContext *c = b_redis();
    PGconn *pg = b_pg();
    feed_item *k1, *tie;
    size_t n1k = sql_feed(pg, UID_1K, &k1), ntie = sql_feed(pg, UID_TIE, &tie);
    long long dflt = config_get(c, "zset-max-listpack-entries");
    FILE *md = out_section("memory");
    double worst_bytes, worst_page, lp_vs_sl;

    note("memory: bytes per item by member encoding");
    fprintf(md, "## Memory: members, zset encodings, capacity\n\n");
    worst_bytes = bytes_per_item(md, c, k1, n1k, dflt);
    out_summary("memory", "memory per cached item (MEMORY USAGE), feedcache members / plain"
                " decimal ids: 6- and 19-digit ids, max_len 127 and 1,000, default and"
                " raised listpack", "<= 1.15x", verdict(worst_bytes <= 1.15), "worst %.2fx",
                worst_bytes);
    worst_page = page_time(md, c, k1, n1k, tie, ntie, dflt);
    out_summary("mem_pages", "page server time, new members / old (19 digits), 1,000-item"
                " feed at every depth and the 10,000-item tie group", "<= 1.05x",
                verdict(worst_page <= 1.05), "worst %.3fx", worst_page);
    capacity(md, c, pg, dflt, &lp_vs_sl);
    out_summary("encoding", "page server time, max_len 1,000 as listpack vs skiplist, depth 500",
                "report", "report", "listpack %.2fx the skiplist's", lp_vs_sl);
    fclose(md);
    free(k1);
    free(tie);
    PQfinish(pg);
    redisFree(c);
}
