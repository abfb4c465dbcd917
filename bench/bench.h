/* bench.h -- what the benchmark programs share (bench/util.c): servers from
 * the environment (tools/servers.sh writes it), timing, statistics, Redis
 * INFO commandstats, process CPU from /proc, and the output files.
 *
 * Every helper that cannot do its job exits with a message: a benchmark that
 * lost its servers must fail loudly, never print a figure. */
#ifndef FEED_BENCH_H
#define FEED_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>

#include "feedcache.h"

/* Peers' scripts, bench/lua/peer_*.lua, embedded by tools/embed. */
extern const char feed_lua_peer_zrevrange[], feed_lua_peer_next_page[],
                  feed_lua_peer_reload[], feed_lua_peer_noop[], feed_lua_peer_min_batch[],
                  feed_lua_peer_seek[];
/* The library's own insert hook (build/lib/scripts.o, in libfeedcache.a), for
 * the fan-out made of one call per feed. */
extern const char feed_lua_insert[];

#define PAGE_LIMIT 20          /* items per page everywhere */

/* The data set (bench/load.sql): 1,000,000 rows, 1,000 users. */
#define UID_BIG   1            /* 100,000 rows */
#define UID_1K    2            /* exactly 1,000 rows */
#define UID_TIE   3            /* 10,000 rows, all with one score */
#define UID_REST  4            /* uids 4..1000: the other 889,000 rows */
#define UID_LAST  1000

void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));  /* progress, stderr */
const char *env_or(const char *name, const char *dflt);

double now_s(void);            /* monotonic seconds */
uint64_t now_ns(void);
void sleep_s(double s);

/* ---- samples and statistics ---- */
typedef struct samples { double *v; size_t n, cap; } samples;
void   sm_add(samples *s, double x);
void   sm_free(samples *s);
double sm_pct(const samples *s, double p);    /* p in [0,100], nearest rank; NAN if empty */
double sm_median(const samples *s);
double sm_min(const samples *s);
double sm_max(const samples *s);

/* ---- Redis ---- */
redisContext *b_redis(void);                  /* FEED_REDIS_HOST/PORT, 60 s timeout */
redisReply *b_cmd(redisContext *c, const char *fmt, ...);   /* exits on error reply */
redisReply *b_argv(redisContext *c, int argc, const char **argv, const size_t *lens);
void b_cmd_ok(redisContext *c, const char *fmt, ...);       /* run, free the reply */
long long b_cmd_int(redisContext *c, const char *fmt, ...); /* an integer reply */
void b_script_load(redisContext *c, const char *src, char sha[41]);
pid_t redis_pid(redisContext *c);

typedef struct cstat { unsigned long long calls, usec; } cstat;
/* usec summed over the named commands ("evalsha", or "zadd,evalsha");
 * calls of the first one. Commands run inside a script or a transaction are
 * also counted on their own since Redis 7.0: name the outer one only. */
cstat cmdstat(redisContext *c, const char *names);

/* ---- PostgreSQL ---- */
PGconn *b_pg(void);                           /* FEED_PG_CONNINFO */
PGresult *b_sql(PGconn *pg, const char *sql); /* exits on error */
long long b_sql_int(PGconn *pg, const char *sql);
pid_t pg_backend(PGconn *pg);

/* ---- the servers: tools/servers.sh ---- */
/* tools/servers.sh CMD DIR on the bench's servers (bench/run.sh's DIR/env
 * names the script, FEED_SERVERS, and the folder, FEED_SERVERS_DIR): 0
 * when done, -1 when it failed or they are not named ("status": are they
 * there to freeze, restart?). */
int b_servers(const char *cmd);

/* ---- feedcache ---- */
/* The bench's configuration (the servers of the environment), which
 * b_open opens; bench/async.c opens event-loop handles with it. */
void b_config(feed_config *cfg, const char *prefix, uint32_t max_len);
feed *b_open(const char *prefix, uint32_t max_len);
/* The same with an authors' table (read-time merge), or NULL. */
feed *b_open_with(const char *prefix, uint32_t max_len, const char *author_table);
/* n cached, complete feeds under prefix, for uids[0..n): items entries
 * (scores 1600000000000 + 1000 k, ids 2 (k + 1)) and the end marker each,
 * written straight into Redis, 1,000 ZADDs a pipeline. */
void b_cache_feeds(redisContext *c, const char *prefix, const int64_t *uids, size_t n,
                   int items);
/* uid's whole feed from SQL in (score DESC, id DESC) order; malloc'd. */
size_t sql_feed(PGconn *pg, int64_t uid, feed_item **out);
/* The library's member encoding (lib/base/codec.c) into buf; returns the length.
 * member_id decodes one, 0 when it is not a member (the end marker). */
size_t member_of(int64_t id, char buf[24]);
int member_id(const char *s, size_t len, int64_t *id);
/* The name the library gives uid's sorted set under prefix (the key format
 * version, the tag of the table, feed_entry for b_key and table for
 * b_key_of, and the generation of the bench's Redis data set included), with
 * suffix appended (":authors": the author index of a handle with
 * item_author_column "author"); one of 8 static buffers per thread. The
 * generation is learnt once per process (INFO on FEED_REDIS_*), as a handle
 * with the restart fence (on in every handle the sections open) learns it;
 * only section storm restarts Redis, and it names no key through these. */
const char *b_key(const char *prefix, int64_t uid, const char *suffix);
const char *b_key_of(const char *prefix, const char *table, int64_t uid, const char *suffix);
/* Copies key (a b_key answer) into dst of size bytes; dies if it does not fit. */
void b_key_copy(char *dst, size_t size, const char *key);

/* ---- CPU time of server processes (all threads), nanoseconds ---- */
uint64_t proc_cpu_ns(pid_t pid);
/* user and system CPU time (all threads), from /proc stat: clock ticks */
void proc_cpu_split(pid_t pid, double *user_ns, double *sys_ns);

/* ---- output: sections of latest.md, the headline table, gnuplot data ---- */
void out_init(const char *dir);
FILE *out_section(const char *name);          /* DIR/sec_<name>.md, truncated */
FILE *out_data(const char *name);             /* DIR/<name>.dat, truncated */
/* One row of the headline table: figure, target, measured, verdict
 * ("pass", "MISS", "report"). Rows keep the order of the calls. */
void out_summary(const char *key, const char *figure, const char *target,
                 const char *verdict, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
const char *verdict(int ok);                  /* "pass" / "MISS" */

/* Numbers for people: 12,345 / 1.23 / 0.0123. */
const char *fmt_num(char *buf, size_t cap, double v);
#define NUM(v) fmt_num((char[32]){0}, 32, (v))

/* ---- interleaved rounds of alternatives ----
 * Each variant is one kind of call. A run does `rounds` rounds; in each,
 * every variant runs (in an order that rotates with the round) for `secs`
 * seconds, timing each call. Per round it records calls/s, Redis server time
 * per call from INFO commandstats (when cmd is set) and Redis process CPU per
 * call. Medians over rounds; latencies pooled over rounds. */
typedef int (*op_fn)(void *ctx);              /* one call; 0 = ok */
typedef struct variant {
    const char *name;
    op_fn       op;
    void       *ctx;
    const char *cmd;          /* commandstats name(s), or NULL; "=a,b": server time
                                 of a and b per call of op, not per command */
    samples     rate;         /* calls/s per round */
    samples     srv_us;       /* commandstats usec per call, per round */
    samples     cpu_us;       /* Redis process CPU per call, per round */
    samples     lat_us;       /* every call */
    size_t      calls;
} variant;
void run_rounds(variant *v, size_t nv, int rounds, double secs, int min_calls,
                redisContext *stats, pid_t rpid);
/* The median of a->v[i] / b->v[i]: samples paired by round. */
double median_of_ratios(const samples *a, const samples *b);
/* Median over rounds of v[a].rate / v[b].rate (paired by round). */
double paired_ratio(const variant *a, const variant *b);
double paired_ratio_srv(const variant *a, const variant *b);   /* srv_us a / b */
double paired_ratio_cpu(const variant *a, const variant *b);   /* cpu_us a / b */
void variant_free(variant *v);

/* Scale for quick runs (BENCH_QUICK=1): rounds and seconds shrink. */
int    q_rounds(int n);
double q_secs(double s);

#endif
