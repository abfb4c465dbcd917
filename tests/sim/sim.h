/* sim.h -- simulated servers for the deterministic simulation (test-only).
 *
 * simr: one Redis server in memory. It runs the commands the library sends
 * (sorted sets, strings with TTLs, DEL/UNLINK, SCAN, EVALSHA/EVAL/SCRIPT,
 * WAIT, ROLE, INFO, PING, AUTH) with Redis 7.0's reply shapes, and runs the
 * project's real Lua scripts in Lua 5.1, the language Redis embeds: a
 * script runs to its end before anything else happens (atomicity), a Lua
 * number given to redis.call goes out as "%.17g", one returned to Redis is
 * cut to an integer, tostring keeps 14 digits (Lua's own). Time is the
 * caller's: every call names `now` (ms), and keys expire against it.
 *
 * Replies are produced as RESP2 bytes and parsed by hiredis's own reader,
 * so the library sees the same redisReply objects a socket would give it.
 *
 * What it leaves out of real Redis: persistence other than snapshots taken
 * by the caller, memory limits (eviction is a call the caller makes),
 * every command the library does not send, RESP3, client-side state other
 * than "authenticated". Cluster replies (MOVED, ASK, TRYAGAIN, CLUSTER
 * SLOTS, ASKING) are the simulated world's (sim_world.c), which knows the
 * slot map: simr_set_guard lets it judge a script's undeclared keys.
 */
#ifndef FEED_SIM_H
#define FEED_SIM_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

typedef struct simr simr;

/* A cluster node's word on a command a script runs: nonzero and the error
 * in why (without the '-') when the node does not serve its key here. */
typedef int (*simr_guard)(void *arg, int argc, const char *const *argv, const size_t *lens,
                          char *why, size_t cap);

/* simr_new: a new, empty server whose run_id derives from seed. NULL when
 * out of memory. password NULL: AUTH not required. */
simr *simr_new(uint64_t seed, const char *password);
void  simr_free(simr *r);

/* simr_exec: run one command at time now (ms); the reply, to be freed with
 * freeReplyObject, or NULL when out of memory. argv[i] has lens[i] bytes. */
redisReply *simr_exec(simr *r, int argc, const char *const *argv, const size_t *lens,
                      int64_t now);
/* simr_execv: the same for NUL-terminated words, argv ending with NULL. */
redisReply *simr_execv(simr *r, int64_t now, const char *const *argv);

/* simr_snapshot: a copy of the data set (keys, values, TTLs), as an RDB
 * save would keep it. NULL when out of memory. */
simr *simr_snapshot(const simr *r);
/* simr_restart: the server restarts: scripts and the authenticated state
 * are gone, the run_id and master_replid are new, and the data set becomes
 * from's (a snapshot; NULL: empty). 0, or -1 when out of memory. */
int   simr_restart(simr *r, const simr *from, uint64_t seed);
/* simr_promote: a replica becomes a primary: new master_replid, same run_id. */
void  simr_promote(simr *r, uint64_t seed);
/* simr_identity: what INFO says of the data set: run_id and master_replid. */
void  simr_identity(const simr *r, const char **run_id, const char **replid);
/* simr_evict: drop key (as maxmemory eviction would); 1 if it was there. */
int   simr_evict(simr *r, const char *key, size_t klen);
/* simr_set_role: 0 primary (default), 1 replica (writes refused with
 * READONLY); replicas_acked: what WAIT answers. */
void  simr_set_role(simr *r, int replica, int replicas_acked);

/* simr_set_links: the replicas ROLE lists as attached, and what WAIT
 * answers (the caller knows which replica holds what). */
void  simr_set_links(simr *r, int attached, int acked);
/* simr_offset: the replication offset (one per write command applied). */
long long simr_offset(const simr *r);
/* simr_replicate: replica `to` receives primary `from`'s data set as it is
 * now (a full sync, or the stream replayed up to here: the same data set),
 * with its offset and master_replid; to keeps its run_id and scripts (Redis
 * 7 replicates a script's effects, not the script). 0, or -1 when out of
 * memory. */
int   simr_replicate(simr *to, const simr *from);

/* simr_set_guard: asked before each command a script runs (a cluster
 * node's check of undeclared keys). NULL: none. */
void  simr_set_guard(simr *r, simr_guard guard, void *arg);
/* simr_has: key exists (and has not expired) at now. */
int   simr_has(simr *r, const char *key, size_t klen, int64_t now);
/* simr_migrate_one: move one live key for which mine() says 1 from `from`
 * to `to`, whole with its TTL (MIGRATE ... REPLACE). 1 moved, 0 none left,
 * -1 out of memory. */
int   simr_migrate_one(simr *from, simr *to, int (*mine)(void *arg, const char *key, size_t len),
                       void *arg, int64_t now);

/* The keys in byte order, one per line, with their type and TTL left at
 * now, and for sorted sets every member and score: a text the caller
 * compares or prints. Freed by the caller; NULL when out of memory. */
char *simr_dump(simr *r, int64_t now);
size_t simr_keys(const simr *r);

/* ------------------------------------------------------------------------
 * simpg: PostgreSQL's side as the library sees it: two tables of
 * (owner, score, id) rows, the feed table and the authors' posts, every
 * commit a new version, and every statement the library sends answered by
 * its meaning at a version the caller names (a replica that lags is an
 * older version). The text of the statements, types, prepares and
 * connections are libpq's and PostgreSQL's: the real-server tests cover
 * them.
 * ------------------------------------------------------------------------ */

enum { SIMPG_FEED, SIMPG_AUTHORS };

typedef struct simpg simpg;

typedef struct simpg_row {
    int64_t score, id;
} simpg_row;

simpg   *simpg_new(void);
void     simpg_free(simpg *p);
/* The version after the last commit (0: nothing committed yet). */
uint64_t simpg_version(const simpg *p);
/* Commit one write: insert (or move to a new score) / delete row id of
 * owner's in table. Returns the new version, 0 when out of memory. */
uint64_t simpg_upsert(simpg *p, int table, int64_t owner, int64_t score, int64_t id);
uint64_t simpg_delete(simpg *p, int table, int64_t owner, int64_t id);
/* owner's rows at version v, in (score DESC, id DESC) order; *n rows. The
 * array belongs to p (valid until p is freed). */
const simpg_row *simpg_rows(const simpg *p, int table, int64_t owner, uint64_t v, size_t *n);

/* Answer statement q (lib/core/core.h: feed_sql) at version v as
 * PostgreSQL would: rows in q->rows (or q->tagged), probes' text in
 * q->text. FEED_OK, or FEED_ENOMEM. The probes see lsn as the primary's
 * position and replayed as the replica's. */
struct feed_sql;
int simpg_answer(const simpg *p, struct feed_sql *q, uint64_t v, uint64_t lsn,
                 uint64_t replayed);

#endif /* FEED_SIM_H */
