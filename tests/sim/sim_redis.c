/* sim_redis.c -- a Redis server in memory for the simulation (sim.h).
 *
 * Every command writes its reply as RESP2 into r->out; simr_exec hands the
 * bytes to hiredis's reader, and a script's redis.call does the same and
 * turns the reply into Lua values the way Redis 7.0's scripting engine does.
 * Keeping one representation (the bytes) means a reply a script sees and
 * a reply the library sees can never disagree.
 */
#include "sim.h"
#include "base/base.h"

#include <errno.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <openssl/sha.h>

enum { SIMR_STR, SIMR_ZSET, SIMR_HASH };

typedef struct simr_hent {
    char  *f, *v;
    size_t fl, vl;
} simr_hent;

typedef struct simr_zent {
    double score;
    char  *m;
    size_t mlen;
} simr_zent;

typedef struct simr_key {
    char      *name;
    size_t     nlen;
    int        type;
    char      *s;               /* SIMR_STR */
    size_t     slen;
    simr_zent *z;               /* SIMR_ZSET: ascending (score, member bytes) */
    size_t     zn, zcap;
    simr_hent *h;               /* SIMR_HASH: fields in insertion order */
    size_t     hn, hcap;
    int64_t    expire_at;       /* -1: none */
} simr_key;

typedef struct simr_script {
    char  sha[41];
    char *body;
    int   fn;                   /* the compiled chunk in the registry; LUA_NOREF: not yet */
} simr_script;

struct simr {
    simr_key    *k;
    size_t       n, cap;
    simr_script *sc;
    size_t       nsc;
    lua_State   *L;
    int64_t      now;
    char         run_id[41], replid[41];
    char        *password;
    int          authed, replica, acked;
    int          attached;      /* replicas ROLE lists (simr_set_links) */
    simr_guard   guard;         /* a script's commands on keys: served here? */
    void        *guard_arg;
    long long    offset;        /* replication offset: one per write */
    int          in_script, script_line;
    char        *out;           /* the reply being written */
    size_t       olen, ocap;
    int          oom;
};

/* ---- output ---- */

static void simr_put(simr *r, const char *p, size_t len)
{
    if (r->oom)
        return;
    if (r->ocap - r->olen < len) {
        size_t cap = (r->ocap + len) * 2 + 64;
        char *more = realloc(r->out, cap);
        if (!more) {
            r->oom = 1;
            return;
        }
        r->out = more;
        r->ocap = cap;
    }
    memcpy(r->out + r->olen, p, len);
    r->olen += len;
}

static void simr_putf(simr *r, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    int len;

    va_start(ap, fmt);
    len = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    simr_put(r, buf, len < 0 ? 0 : (size_t)len >= sizeof buf ? sizeof buf - 1 : (size_t)len);
}

static void simr_bulk(simr *r, const char *p, size_t len)
{
    simr_putf(r, "$%zu\r\n", len);
    simr_put(r, p, len);
    simr_put(r, "\r\n", 2);
}

static void simr_nil(simr *r) { simr_put(r, "$-1\r\n", 5); }
static void simr_int(simr *r, long long v) { simr_putf(r, ":%lld\r\n", v); }
static void simr_ok(simr *r) { simr_put(r, "+OK\r\n", 5); }
static void simr_err(simr *r, const char *msg) { simr_putf(r, "-%s\r\n", msg); }

/* A score as Redis 7.0 replies with it in RESP2: "%.17g", and inf/-inf
 * spelled out (addReplyDouble). */
static void simr_score(simr *r, double d)
{
    char buf[64];
    int len;

    if (isinf(d))
        len = snprintf(buf, sizeof buf, "%s", d > 0 ? "inf" : "-inf");
    else
        len = snprintf(buf, sizeof buf, "%.17g", d);
    simr_bulk(r, buf, (size_t)len);
}

/* ---- keys ---- */

static void simr_key_clear(simr_key *k)
{
    free(k->name);
    free(k->s);
    for (size_t i = 0; i < k->zn; i++)
        free(k->z[i].m);
    free(k->z);
    for (size_t i = 0; i < k->hn; i++) {
        free(k->h[i].f);
        free(k->h[i].v);
    }
    free(k->h);
    memset(k, 0, sizeof *k);
}

static void simr_key_del(simr *r, size_t i)
{
    simr_key_clear(&r->k[i]);
    r->k[i] = r->k[--r->n];
}

/* The index of a live key, or -1; a key past its TTL is deleted on the way,
 * as Redis's lazy expiry does. */
static long simr_find(simr *r, const char *name, size_t len)
{
    for (size_t i = 0; i < r->n; i++) {
        simr_key *k = &r->k[i];
        if (k->nlen == len && memcmp(k->name, name, len) == 0) {
            if (k->expire_at >= 0 && r->now >= k->expire_at) {
                simr_key_del(r, i);
                return -1;
            }
            return (long)i;
        }
    }
    return -1;
}

static simr_key *simr_add(simr *r, const char *name, size_t len, int type)
{
    simr_key *k;

    if (r->n == r->cap) {
        size_t cap = r->cap * 2 + 16;
        simr_key *more = realloc(r->k, cap * sizeof *more);
        if (!more)
            return NULL;
        r->k = more;
        r->cap = cap;
    }
    k = &r->k[r->n];
    memset(k, 0, sizeof *k);
    k->name = malloc(len + 1);
    if (!k->name)
        return NULL;
    memcpy(k->name, name, len);
    k->name[len] = '\0';
    k->nlen = len;
    k->type = type;
    k->expire_at = -1;
    r->n++;
    return k;
}

/* ---- sorted sets ---- */

static int simr_zcmp(double s, const char *m, size_t mlen, const simr_zent *e)
{
    int c;

    if (s != e->score)
        return s < e->score ? -1 : 1;
    c = memcmp(m, e->m, mlen < e->mlen ? mlen : e->mlen);
    if (c)
        return c;
    return mlen < e->mlen ? -1 : mlen > e->mlen;
}

static long simr_zfind(const simr_key *k, const char *m, size_t mlen)
{
    for (size_t i = 0; i < k->zn; i++)
        if (k->z[i].mlen == mlen && memcmp(k->z[i].m, m, mlen) == 0)
            return (long)i;
    return -1;
}

static void simr_zremove(simr_key *k, size_t i)
{
    free(k->z[i].m);
    memmove(&k->z[i], &k->z[i + 1], (k->zn - i - 1) * sizeof *k->z);
    k->zn--;
}

/* Insert (s, m) in order; 1 added, 0 score updated, -1 out of memory. */
static int simr_zset(simr_key *k, double s, const char *m, size_t mlen)
{
    long at = simr_zfind(k, m, mlen);
    size_t pos = 0;
    char *copy;

    if (at >= 0) {
        if (k->z[at].score == s)
            return 0;
        copy = k->z[at].m;
        k->z[at].m = NULL;
        simr_zremove(k, (size_t)at);
    } else {
        copy = malloc(mlen ? mlen : 1);
        if (!copy)
            return -1;
        memcpy(copy, m, mlen);
    }
    if (k->zn == k->zcap) {
        size_t cap = k->zcap * 2 + 8;
        simr_zent *more = realloc(k->z, cap * sizeof *more);
        if (!more) {
            free(copy);
            return -1;
        }
        k->z = more;
        k->zcap = cap;
    }
    while (pos < k->zn && simr_zcmp(s, copy, mlen, &k->z[pos]) > 0)
        pos++;
    memmove(&k->z[pos + 1], &k->z[pos], (k->zn - pos) * sizeof *k->z);
    k->z[pos] = (simr_zent){ s, copy, mlen };
    k->zn++;
    return at < 0;
}

/* A float argument as Redis parses one (getDoubleFromObject): the whole
 * string, no NaN. */
static int simr_parse_double(const char *p, size_t len, double *out)
{
    char buf[128], *end;

    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    if (buf[0] == ' ' || buf[0] == '\t')
        return -1;
    errno = 0;
    *out = strtod(buf, &end);
    if (*end || isnan(*out) || (errno == ERANGE && !isinf(*out) && *out != 0))
        return -1;
    return 0;
}

static int simr_parse_ll(const char *p, size_t len, long long *out)
{
    char buf[32], *end;

    if (len == 0 || len >= sizeof buf)
        return -1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    errno = 0;
    *out = strtoll(buf, &end, 10);
    return *end || errno || buf[0] == ' ' || buf[0] == '+' ? -1 : 0;
}

/* A score range bound: "(x" exclusive, "-inf", "+inf". */
static int simr_parse_bound(const char *p, size_t len, double *v, int *excl)
{
    *excl = len > 0 && p[0] == '(';
    return simr_parse_double(p + *excl, len - *excl, v);
}

static int simr_in_min(double s, double min, int ex) { return ex ? s > min : s >= min; }
static int simr_in_max(double s, double max, int ex) { return ex ? s < max : s <= max; }

/* ---- commands ---- */

typedef struct simr_args {
    int                argc;
    const char *const *v;
    const size_t      *l;
} simr_args;

static int simr_is(const simr_args *a, int i, const char *word)
{
    return i < a->argc && a->l[i] == strlen(word) && strncasecmp(a->v[i], word, a->l[i]) == 0;
}

static const char simr_wrongtype[] =
    "WRONGTYPE Operation against a key holding the wrong kind of value";

/* The key of argument i if it is a sorted set (NULL and an error written
 * when it is something else; NULL alone when absent). */
static simr_key *simr_zkey(simr *r, const simr_args *a, int i, int *wrong)
{
    long at = simr_find(r, a->v[i], a->l[i]);

    *wrong = 0;
    if (at < 0)
        return NULL;
    if (r->k[at].type != SIMR_ZSET) {
        *wrong = 1;
        simr_err(r, simr_wrongtype);
        return NULL;
    }
    return &r->k[at];
}

static void simr_wrote(simr *r) { r->offset++; }

static void simr_cmd_zadd(simr *r, const simr_args *a)
{
    long at;
    simr_key *k;
    long long added = 0;

    if (a->argc < 4 || (a->argc - 2) % 2) {
        simr_err(r, "ERR syntax error");
        return;
    }
    for (int i = 2; i < a->argc; i += 2) {
        double s;
        if (simr_parse_double(a->v[i], a->l[i], &s) < 0) {
            simr_err(r, "ERR value is not a valid float");
            return;
        }
    }
    at = simr_find(r, a->v[1], a->l[1]);
    if (at >= 0 && r->k[at].type != SIMR_ZSET) {
        simr_err(r, simr_wrongtype);
        return;
    }
    k = at >= 0 ? &r->k[at] : simr_add(r, a->v[1], a->l[1], SIMR_ZSET);
    if (!k) {
        r->oom = 1;
        return;
    }
    for (int i = 2; i < a->argc; i += 2) {
        double s;
        int rc;
        simr_parse_double(a->v[i], a->l[i], &s);
        rc = simr_zset(k, s, a->v[i + 1], a->l[i + 1]);
        if (rc < 0) {
            r->oom = 1;
            return;
        }
        added += rc;
    }
    simr_wrote(r);
    simr_int(r, added);
}

/* Write items [from, to] (ascending indexes) in the order asked. */
static void simr_zreply(simr *r, const simr_key *k, long from, long to, int rev, int scores)
{
    long n = to >= from ? to - from + 1 : 0;

    simr_putf(r, "*%ld\r\n", n * (scores ? 2 : 1));
    for (long j = 0; j < n; j++) {
        const simr_zent *e = &k->z[rev ? to - j : from + j];
        simr_bulk(r, e->m, e->mlen);
        if (scores)
            simr_score(r, e->score);
    }
}

/* Ranks start..stop of a set of n as Redis reads them (negative counts
 * from the end, the range clipped to the set): 1 with *start <= *stop
 * inside [0, n), 0 when the range holds nothing. */
static int simr_rank_range(long n, long long *start, long long *stop)
{
    if (*start < 0)
        *start += n;
    if (*stop < 0)
        *stop += n;
    if (*start < 0)
        *start = 0;
    if (*start > *stop || *start >= n)
        return 0;
    if (*stop >= n)
        *stop = n - 1;
    return 1;
}

/* ZRANGE / ZREVRANGE key start stop [WITHSCORES] */
static void simr_cmd_zrange(simr *r, const simr_args *a, int rev)
{
    long long start, stop;
    int wrong, scores = simr_is(a, 4, "WITHSCORES");
    simr_key *k;
    long n;

    if ((a->argc != 4 && !(a->argc == 5 && scores)) ||
        simr_parse_ll(a->v[2], a->l[2], &start) < 0 || simr_parse_ll(a->v[3], a->l[3], &stop) < 0) {
        simr_err(r, a->argc > 5 || (a->argc == 5 && !scores) ? "ERR syntax error"
                                                            : "ERR value is not an integer or out of range");
        return;
    }
    k = simr_zkey(r, a, 1, &wrong);
    if (wrong)
        return;
    n = k ? (long)k->zn : 0;
    if (!k || !simr_rank_range(n, &start, &stop)) {
        simr_put(r, "*0\r\n", 4);
        return;
    }
    if (rev)
        simr_zreply(r, k, n - 1 - stop, n - 1 - start, 1, scores);
    else
        simr_zreply(r, k, start, stop, 0, scores);
}

/* ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count] */
static void simr_cmd_zrevrangebyscore(simr *r, const simr_args *a)
{
    double max, min;
    int maxex, minex, wrong, scores = 0;
    long long off = 0, count = -1;
    simr_key *k;
    long hi, lo, got = 0;

    if (a->argc < 4 || simr_parse_bound(a->v[2], a->l[2], &max, &maxex) < 0 ||
        simr_parse_bound(a->v[3], a->l[3], &min, &minex) < 0) {
        simr_err(r, a->argc < 4 ? "ERR wrong number of arguments for 'zrevrangebyscore' command"
                                : "ERR min or max is not a float");
        return;
    }
    for (int i = 4; i < a->argc; i++) {
        if (simr_is(a, i, "WITHSCORES")) {
            scores = 1;
        } else if (simr_is(a, i, "LIMIT") && i + 2 < a->argc &&
                   simr_parse_ll(a->v[i + 1], a->l[i + 1], &off) == 0 &&
                   simr_parse_ll(a->v[i + 2], a->l[i + 2], &count) == 0) {
            i += 2;
        } else {
            simr_err(r, "ERR syntax error");
            return;
        }
    }
    k = simr_zkey(r, a, 1, &wrong);
    if (wrong)
        return;
    if (!k || off < 0) {
        simr_put(r, "*0\r\n", 4);
        return;
    }
    /* Descending: from the highest in range, skip off, take count. */
    hi = (long)k->zn - 1;
    while (hi >= 0 && !simr_in_max(k->z[hi].score, max, maxex))
        hi--;
    hi -= (long)off;
    lo = hi;
    while (lo >= 0 && simr_in_min(k->z[lo].score, min, minex) &&
           simr_in_max(k->z[lo].score, max, maxex) && (count < 0 || got < count)) {
        lo--;
        got++;
    }
    simr_zreply(r, k, lo + 1, hi, 1, scores);
}

static void simr_cmd_zcount(simr *r, const simr_args *a)
{
    double min, max;
    int minex, maxex, wrong;
    simr_key *k;
    long long n = 0;

    if (a->argc != 4 || simr_parse_bound(a->v[2], a->l[2], &min, &minex) < 0 ||
        simr_parse_bound(a->v[3], a->l[3], &max, &maxex) < 0) {
        simr_err(r, "ERR min or max is not a float");
        return;
    }
    k = simr_zkey(r, a, 1, &wrong);
    if (wrong)
        return;
    for (size_t i = 0; k && i < k->zn; i++)
        n += simr_in_min(k->z[i].score, min, minex) && simr_in_max(k->z[i].score, max, maxex);
    simr_int(r, n);
}

/* ZSCORE, ZRANK, ZREVRANK key member */
static void simr_cmd_zmember(simr *r, const simr_args *a, int what)
{
    int wrong;
    simr_key *k;
    long at;

    if (a->argc != 3) {
        simr_err(r, "ERR wrong number of arguments");
        return;
    }
    k = simr_zkey(r, a, 1, &wrong);
    if (wrong)
        return;
    at = k ? simr_zfind(k, a->v[2], a->l[2]) : -1;
    if (at < 0)
        simr_nil(r);
    else if (what == 0)
        simr_score(r, k->z[at].score);
    else
        simr_int(r, what == 1 ? at : (long)k->zn - 1 - at);
}

static void simr_drop_if_empty(simr *r, simr_key *k)
{
    if (k->zn == 0)
        simr_key_del(r, (size_t)(k - r->k));
}

static void simr_cmd_zrem(simr *r, const simr_args *a)
{
    int wrong;
    simr_key *k = a->argc >= 3 ? simr_zkey(r, a, 1, &wrong) : NULL;
    long long n = 0;

    if (a->argc < 3) {
        simr_err(r, "ERR wrong number of arguments for 'zrem' command");
        return;
    }
    if (wrong)
        return;
    for (int i = 2; k && i < a->argc; i++) {
        long at = simr_zfind(k, a->v[i], a->l[i]);
        if (at >= 0) {
            simr_zremove(k, (size_t)at);
            n++;
        }
    }
    if (n) {
        simr_drop_if_empty(r, k);
        simr_wrote(r);
    }
    simr_int(r, n);
}

static void simr_cmd_zremrangebyrank(simr *r, const simr_args *a)
{
    long long start, stop;
    int wrong;
    simr_key *k;
    long n, removed = 0;

    if (a->argc != 4 || simr_parse_ll(a->v[2], a->l[2], &start) < 0 ||
        simr_parse_ll(a->v[3], a->l[3], &stop) < 0) {
        simr_err(r, "ERR value is not an integer or out of range");
        return;
    }
    k = simr_zkey(r, a, 1, &wrong);
    if (wrong)
        return;
    n = k ? (long)k->zn : 0;
    if (k && simr_rank_range(n, &start, &stop)) {
        for (long long i = stop; i >= start; i--, removed++)
            simr_zremove(k, (size_t)i);
        simr_drop_if_empty(r, k);
        simr_wrote(r);
    }
    simr_int(r, removed);
}

static void simr_cmd_zcard(simr *r, const simr_args *a)
{
    int wrong;
    simr_key *k;

    if (a->argc != 2) {
        simr_err(r, "ERR wrong number of arguments for 'zcard' command");
        return;
    }
    k = simr_zkey(r, a, 1, &wrong);
    if (!wrong)
        simr_int(r, k ? (long long)k->zn : 0);
}

/* ---- strings and keys ---- */

static void simr_cmd_get(simr *r, const simr_args *a)
{
    long at = a->argc == 2 ? simr_find(r, a->v[1], a->l[1]) : -1;

    if (a->argc != 2)
        simr_err(r, "ERR wrong number of arguments for 'get' command");
    else if (at < 0)
        simr_nil(r);
    else if (r->k[at].type != SIMR_STR)
        simr_err(r, simr_wrongtype);
    else
        simr_bulk(r, r->k[at].s, r->k[at].slen);
}

/* ---- hashes: what the lease needs (lua/page.lua, rebuild.lua, lease.lua) ---- */

static long simr_hfind(const simr_key *k, const char *f, size_t fl)
{
    for (size_t i = 0; i < k->hn; i++)
        if (k->h[i].fl == fl && memcmp(k->h[i].f, f, fl) == 0)
            return (long)i;
    return -1;
}

static char *simr_dup(const char *p, size_t len)
{
    char *d = malloc(len + 1);

    if (d) {
        memcpy(d, p, len);
        d[len] = '\0';
    }
    return d;
}

/* HSET key field value [field value ...]: the fields added. */
static void simr_cmd_hset(simr *r, const simr_args *a)
{
    long at, added = 0;
    simr_key *k;

    if (a->argc < 4 || a->argc % 2) {
        simr_err(r, "ERR wrong number of arguments for 'hset' command");
        return;
    }
    at = simr_find(r, a->v[1], a->l[1]);
    if (at >= 0 && r->k[at].type != SIMR_HASH) {
        simr_err(r, simr_wrongtype);
        return;
    }
    if (!(k = at >= 0 ? &r->k[at] : simr_add(r, a->v[1], a->l[1], SIMR_HASH))) {
        r->oom = 1;
        return;
    }
    for (int i = 2; i < a->argc; i += 2) {
        long f = simr_hfind(k, a->v[i], a->l[i]);
        char *v = simr_dup(a->v[i + 1], a->l[i + 1]);
        if (!v) {
            r->oom = 1;
            return;
        }
        if (f < 0) {
            if (k->hn == k->hcap) {
                size_t cap = k->hcap * 2 + 4;
                simr_hent *more = realloc(k->h, cap * sizeof *more);
                if (!more) {
                    free(v);
                    r->oom = 1;
                    return;
                }
                k->h = more;
                k->hcap = cap;
            }
            if (!(k->h[k->hn].f = simr_dup(a->v[i], a->l[i]))) {
                free(v);
                r->oom = 1;
                return;
            }
            k->h[k->hn].fl = a->l[i];
            f = (long)k->hn++;
            added++;
        } else {
            free(k->h[f].v);
        }
        k->h[f].v = v;
        k->h[f].vl = a->l[i + 1];
    }
    simr_wrote(r);
    simr_int(r, added);
}

/* HVALS key, HEXISTS key field, HDEL key field ... */
static void simr_cmd_hash(simr *r, const simr_args *a, int what)
{
    long at = a->argc >= 2 ? simr_find(r, a->v[1], a->l[1]) : -1;
    simr_key *k = at >= 0 ? &r->k[at] : NULL;
    long n = 0;

    if ((what == 0 && a->argc != 2) || (what == 1 && a->argc != 3) || (what == 2 && a->argc < 3)) {
        simr_err(r, "ERR wrong number of arguments");
        return;
    }
    if (k && k->type != SIMR_HASH) {
        simr_err(r, simr_wrongtype);
        return;
    }
    if (what == 0) {
        simr_putf(r, "*%zu\r\n", k ? k->hn : 0);
        for (size_t i = 0; k && i < k->hn; i++)
            simr_bulk(r, k->h[i].v, k->h[i].vl);
        return;
    }
    if (what == 1) {
        simr_int(r, k && simr_hfind(k, a->v[2], a->l[2]) >= 0);
        return;
    }
    for (int i = 2; k && i < a->argc; i++) {
        long f = simr_hfind(k, a->v[i], a->l[i]);
        if (f < 0)
            continue;
        free(k->h[f].f);
        free(k->h[f].v);
        k->h[f] = k->h[--k->hn];
        n++;
    }
    if (k && k->hn == 0)
        simr_key_del(r, (size_t)at);    /* Redis drops an emptied hash */
    if (n)
        simr_wrote(r);
    simr_int(r, n);
}

/* SET key value [NX|XX] [PX ms|EX s] */
static void simr_cmd_set(simr *r, const simr_args *a)
{
    int nx = 0, xx = 0;
    long long ttl = -1;
    long at;
    simr_key *k;
    char *copy;

    if (a->argc < 3) {
        simr_err(r, "ERR wrong number of arguments for 'set' command");
        return;
    }
    for (int i = 3; i < a->argc; i++) {
        long long v;
        if (simr_is(a, i, "NX")) {
            nx = 1;
        } else if (simr_is(a, i, "XX")) {
            xx = 1;
        } else if ((simr_is(a, i, "PX") || simr_is(a, i, "EX")) && i + 1 < a->argc &&
                   simr_parse_ll(a->v[i + 1], a->l[i + 1], &v) == 0) {
            if (v <= 0) {
                simr_err(r, "ERR invalid expire time in 'set' command");
                return;
            }
            ttl = simr_is(a, i, "EX") ? v * 1000 : v;
            i++;
        } else {
            simr_err(r, "ERR syntax error");
            return;
        }
    }
    at = simr_find(r, a->v[1], a->l[1]);
    if ((nx && at >= 0) || (xx && at < 0)) {
        simr_nil(r);
        return;
    }
    copy = malloc(a->l[2] ? a->l[2] : 1);
    if (!copy) {
        r->oom = 1;
        return;
    }
    memcpy(copy, a->v[2], a->l[2]);
    if (at >= 0)
        simr_key_del(r, (size_t)at);
    k = simr_add(r, a->v[1], a->l[1], SIMR_STR);
    if (!k) {
        free(copy);
        r->oom = 1;
        return;
    }
    k->s = copy;
    k->slen = a->l[2];
    k->expire_at = ttl >= 0 ? r->now + ttl : -1;
    simr_wrote(r);
    simr_ok(r);
}

/* DEL, UNLINK, EXISTS key... */
static void simr_cmd_keys(simr *r, const simr_args *a, int del)
{
    long long n = 0;

    if (a->argc < 2) {
        simr_err(r, "ERR wrong number of arguments");
        return;
    }
    for (int i = 1; i < a->argc; i++) {
        long at = simr_find(r, a->v[i], a->l[i]);
        if (at < 0)
            continue;
        n++;
        if (del)
            simr_key_del(r, (size_t)at);
    }
    if (del && n)
        simr_wrote(r);
    simr_int(r, n);
}

/* PEXPIRE key ms, PERSIST key, PTTL key */
static void simr_cmd_ttl(simr *r, const simr_args *a, int what)
{
    long at;
    long long ms = 0;

    if (a->argc != (what == 0 ? 3 : 2) ||
        (what == 0 && simr_parse_ll(a->v[2], a->l[2], &ms) < 0)) {
        simr_err(r, "ERR value is not an integer or out of range");
        return;
    }
    at = simr_find(r, a->v[1], a->l[1]);
    if (what == 2) {                                    /* PTTL */
        simr_int(r, at < 0 ? -2 : r->k[at].expire_at < 0 ? -1 : r->k[at].expire_at - r->now);
        return;
    }
    if (at < 0 || (what == 1 && r->k[at].expire_at < 0)) {
        simr_int(r, 0);
        return;
    }
    if (what == 1)
        r->k[at].expire_at = -1;
    else if (ms <= 0)                                   /* expires at once: deleted */
        simr_key_del(r, (size_t)at);
    else
        r->k[at].expire_at = r->now + ms;
    simr_wrote(r);
    simr_int(r, 1);
}

static void simr_cmd_rename(simr *r, const simr_args *a)
{
    long from, to;
    simr_key moved;
    char *name;

    if (a->argc != 3) {
        simr_err(r, "ERR wrong number of arguments for 'rename' command");
        return;
    }
    from = simr_find(r, a->v[1], a->l[1]);
    if (from < 0) {
        simr_err(r, "ERR no such key");
        return;
    }
    name = malloc(a->l[2] + 1);
    if (!name) {
        r->oom = 1;
        return;
    }
    memcpy(name, a->v[2], a->l[2]);
    name[a->l[2]] = '\0';
    moved = r->k[from];                 /* the value and its TTL go along */
    free(moved.name);
    moved.name = name;
    moved.nlen = a->l[2];
    r->k[from] = r->k[--r->n];
    to = simr_find(r, a->v[2], a->l[2]);
    if (to >= 0)
        simr_key_del(r, (size_t)to);
    r->k[r->n++] = moved;              /* a slot is free: one was just taken out */
    simr_wrote(r);
    simr_ok(r);
}

/* SCAN cursor [MATCH pattern] [COUNT n]: the cursor is an index into the
 * keys in byte order, so a key present for the whole scan is returned
 * exactly once, as Redis promises. */
static int simr_namecmp(const void *x, const void *y)
{
    const simr_key *a = *(simr_key *const *)x, *b = *(simr_key *const *)y;
    int c = memcmp(a->name, b->name, a->nlen < b->nlen ? a->nlen : b->nlen);
    return c ? c : (a->nlen > b->nlen) - (a->nlen < b->nlen);
}

static simr_key **simr_sorted(simr *r)
{
    simr_key **v;

    for (size_t i = 0; i < r->n;)      /* expired keys first go */
        if (r->k[i].expire_at >= 0 && r->now >= r->k[i].expire_at)
            simr_key_del(r, i);
        else
            i++;
    v = malloc((r->n ? r->n : 1) * sizeof *v);
    if (!v)
        return NULL;
    for (size_t i = 0; i < r->n; i++)
        v[i] = &r->k[i];
    qsort(v, r->n, sizeof *v, simr_namecmp);
    return v;
}

static void simr_cmd_scan(simr *r, const simr_args *a)
{
    long long cur, count = 10;
    const char *pattern = "*";
    char pat[1024];
    simr_key **v;
    size_t i, got = 0, n = 0;

    if (a->argc < 2 || simr_parse_ll(a->v[1], a->l[1], &cur) < 0 || cur < 0) {
        simr_err(r, "ERR invalid cursor");
        return;
    }
    for (int j = 2; j + 1 < a->argc; j += 2) {
        if (simr_is(a, j, "MATCH") && a->l[j + 1] < sizeof pat) {
            memcpy(pat, a->v[j + 1], a->l[j + 1]);
            pat[a->l[j + 1]] = '\0';
            pattern = pat;
        } else if (!simr_is(a, j, "COUNT") || simr_parse_ll(a->v[j + 1], a->l[j + 1], &count) < 0 ||
                   count < 1) {
            simr_err(r, "ERR syntax error");
            return;
        }
    }
    v = simr_sorted(r);
    if (!v) {
        r->oom = 1;
        return;
    }
    for (i = (size_t)cur; i < r->n && got < (size_t)count; i++, got++)
        n += fnmatch(pattern, v[i]->name, 0) == 0;
    {
        char c[24];
        int len = snprintf(c, sizeof c, "%zu", i >= r->n ? (size_t)0 : i);
        simr_put(r, "*2\r\n", 4);
        simr_bulk(r, c, (size_t)len);
    }
    simr_putf(r, "*%zu\r\n", n);
    for (size_t j = (size_t)cur; j < i; j++)
        if (fnmatch(pattern, v[j]->name, 0) == 0)
            simr_bulk(r, v[j]->name, v[j]->nlen);
    free(v);
}

/* CLUSTER GETKEYSINSLOT slot count: the first count keys of the slot (in
 * name order, as Redis 7.0 keeps a slot's keys), whatever the slot map
 * says: a node lists the keys it holds. */
static void simr_cmd_cluster(simr *r, const simr_args *a)
{
    long long slot, count;
    simr_key **v;
    size_t n = 0;

    if (a->argc != 4 || !simr_is(a, 1, "GETKEYSINSLOT")) {
        simr_err(r, "ERR unknown subcommand for 'cluster'");
        return;
    }
    if (simr_parse_ll(a->v[2], a->l[2], &slot) < 0 || slot < 0 || slot >= 16384) {
        simr_err(r, "ERR Invalid slot");
        return;
    }
    if (simr_parse_ll(a->v[3], a->l[3], &count) < 0 || count < 0) {
        simr_err(r, "ERR Invalid number of keys");
        return;
    }
    if ((v = simr_sorted(r)) == NULL) {
        r->oom = 1;
        return;
    }
    for (size_t i = 0; i < r->n && n < (size_t)count; i++)
        n += feed__key_slot(v[i]->name, v[i]->nlen) == (unsigned)slot;
    simr_putf(r, "*%zu\r\n", n);
    for (size_t i = 0, put = 0; i < r->n && put < n; i++)
        if (feed__key_slot(v[i]->name, v[i]->nlen) == (unsigned)slot) {
            simr_bulk(r, v[i]->name, v[i]->nlen);
            put++;
        }
    free(v);
}

static void simr_cmd_info(simr *r)
{
    char buf[512];
    int len = snprintf(buf, sizeof buf,
                       "# Server\r\nredis_version:7.0.15\r\nrun_id:%s\r\n"
                       "# Replication\r\nrole:%s\r\nmaster_replid:%s\r\nmaster_repl_offset:%lld\r\n",
                       r->run_id, r->replica ? "slave" : "master", r->replid, r->offset);
    simr_bulk(r, buf, (size_t)len);
}

static void simr_cmd_role(simr *r)
{
    if (r->replica) {
        simr_put(r, "*5\r\n", 4);
        simr_bulk(r, "slave", 5);
        simr_bulk(r, "127.0.0.1", 9);
        simr_int(r, 1);
        simr_bulk(r, "connected", 9);
        simr_int(r, r->offset);
    } else {
        simr_put(r, "*3\r\n", 4);
        simr_bulk(r, "master", 6);
        simr_int(r, r->offset);
        simr_putf(r, "*%d\r\n", r->attached);
        for (int i = 0; i < r->attached; i++) {
            char port[16];
            snprintf(port, sizeof port, "%d", 6380 + i);
            simr_put(r, "*3\r\n", 4);
            simr_bulk(r, "127.0.0.1", 9);
            simr_bulk(r, port, strlen(port));
            simr_bulk(r, "0", 1);
        }
    }
}

/* ---- scripts ---- */

static void simr_sha1hex(const char *p, size_t len, char out[41])
{
    unsigned char d[SHA_DIGEST_LENGTH];

    SHA1((const unsigned char *)p, len, d);
    for (int i = 0; i < SHA_DIGEST_LENGTH; i++)
        snprintf(out + 2 * i, 3, "%02x", d[i]);
}

static simr_script *simr_script_find(const simr *r, const char *sha, size_t len)
{
    for (size_t i = 0; i < r->nsc; i++)
        if (len == 40 && strncasecmp(r->sc[i].sha, sha, 40) == 0)
            return &r->sc[i];
    return NULL;
}

/* Forget every script (SCRIPT FLUSH, a restart). */
static void simr_scripts_flush(simr *r)
{
    for (size_t i = 0; i < r->nsc; i++) {
        luaL_unref(r->L, LUA_REGISTRYINDEX, r->sc[i].fn);
        free(r->sc[i].body);
    }
    r->nsc = 0;
}

/* The SHA1 of a script body, remembered for the last few bodies: the same
 * six scripts are loaded on every connection of every schedule. */
static void simr_script_sha(const char *body, size_t len, char sha[41])
{
    static struct { char *body; size_t len; char sha[41]; } memo[16];
    static unsigned next;

    for (unsigned i = 0; i < 16; i++)
        if (memo[i].body && memo[i].len == len && memcmp(memo[i].body, body, len) == 0) {
            memcpy(sha, memo[i].sha, 41);
            return;
        }
    simr_sha1hex(body, len, sha);
    free(memo[next].body);
    memo[next].body = malloc(len ? len : 1);
    if (memo[next].body) {
        memcpy(memo[next].body, body, len);
        memo[next].len = len;
        memcpy(memo[next].sha, sha, 41);
        next = (next + 1) % 16;
    }
}

static simr_script *simr_script_add(simr *r, const char *body, size_t len)
{
    char sha[41];
    simr_script *have;
    simr_script *more;

    simr_script_sha(body, len, sha);
    have = simr_script_find(r, sha, 40);
    if (have)
        return have;
    more = realloc(r->sc, (r->nsc + 1) * sizeof *more);
    if (!more)
        return NULL;
    r->sc = more;
    memcpy(more[r->nsc].sha, sha, 41);
    more[r->nsc].body = malloc(len + 1);
    if (!more[r->nsc].body)
        return NULL;
    memcpy(more[r->nsc].body, body, len);
    more[r->nsc].body[len] = '\0';
    more[r->nsc].fn = LUA_NOREF;
    return &r->sc[r->nsc++];
}

static void simr_dispatch(simr *r, const simr_args *a);

/* The RESP reply at r->out + from as a Lua value (Redis's
 * redisProtocolToLuaType): integer -> number, bulk -> string, nil ->
 * false, array -> table, status -> {ok=}, error -> {err=}. */
static void simr_reply_to_lua(lua_State *L, const redisReply *x)
{
    switch (x->type) {
    case REDIS_REPLY_INTEGER:
        lua_pushnumber(L, (lua_Number)x->integer);
        break;
    case REDIS_REPLY_STRING:
        lua_pushlstring(L, x->str, x->len);
        break;
    case REDIS_REPLY_NIL:
        lua_pushboolean(L, 0);
        break;
    case REDIS_REPLY_STATUS:
    case REDIS_REPLY_ERROR:
        lua_newtable(L);
        lua_pushstring(L, x->type == REDIS_REPLY_STATUS ? "ok" : "err");
        lua_pushlstring(L, x->str, x->len);
        lua_settable(L, -3);
        break;
    default:                            /* REDIS_REPLY_ARRAY */
        lua_newtable(L);
        for (size_t i = 0; i < x->elements; i++) {
            lua_pushnumber(L, (lua_Number)(i + 1));
            simr_reply_to_lua(L, x->element[i]);
            lua_settable(L, -3);
        }
        break;
    }
}

static redisReply *simr_parse(simr *r, size_t from)
{
    redisReader *rd = redisReaderCreate();
    void *reply = NULL;

    if (!rd)
        return NULL;
    if (redisReaderFeed(rd, r->out + from, r->olen - from) != REDIS_OK ||
        redisReaderGetReply(rd, &reply) != REDIS_OK)
        reply = NULL;
    redisReaderFree(rd);
    return reply;
}

/* redis.call / redis.pcall: run a command inside the script. */
static int simr_lua_command(lua_State *L, int raise)
{
    simr *r;
    int argc = lua_gettop(L);
    const char *argv[64];
    size_t lens[64];
    char nums[64][32];
    size_t from;
    redisReply *x;

    lua_getfield(L, LUA_REGISTRYINDEX, "simr");
    r = lua_touserdata(L, -1);
    lua_pop(L, 1);
    if (argc == 0 || argc > 64)
        return luaL_error(L, "Please specify at least one argument for this redis lib call");
    for (int i = 0; i < argc; i++) {
        if (lua_type(L, i + 1) == LUA_TNUMBER) {
            /* A Lua number goes out as "%.17g" (as in Redis), not as tostring's 14 digits. */
            int len = snprintf(nums[i], sizeof nums[i], "%.17g", (double)lua_tonumber(L, i + 1));
            argv[i] = nums[i];
            lens[i] = (size_t)len;
        } else if (lua_type(L, i + 1) == LUA_TSTRING) {
            argv[i] = lua_tolstring(L, i + 1, &lens[i]);
        } else {
            return luaL_error(L, "Lua redis lib command arguments must be strings or integers");
        }
    }
    from = r->olen;
    simr_dispatch(r, &(simr_args){ argc, argv, lens });
    x = simr_parse(r, from);
    r->olen = from;
    if (!x)
        return luaL_error(L, "simr: out of memory");
    if (x->type == REDIS_REPLY_ERROR && raise) {
        lua_pushlstring(L, x->str, x->len);
        freeReplyObject(x);
        return lua_error(L);
    }
    simr_reply_to_lua(L, x);
    freeReplyObject(x);
    return 1;
}

static int simr_lua_call(lua_State *L) { return simr_lua_command(L, 1); }
static int simr_lua_pcall(lua_State *L) { return simr_lua_command(L, 0); }

static int simr_lua_reply(lua_State *L, const char *field)
{
    luaL_checkstring(L, 1);
    lua_newtable(L);
    lua_pushstring(L, field);
    lua_pushvalue(L, 1);
    lua_settable(L, -3);
    return 1;
}

static int simr_lua_error_reply(lua_State *L) { return simr_lua_reply(L, "err"); }
static int simr_lua_status_reply(lua_State *L) { return simr_lua_reply(L, "ok"); }

/* A Lua value returned by a script as a reply (luaReplyToRedisReply):
 * numbers are cut to integers, true is 1, false and nil are nil, a table
 * with ok or err is a status or an error, another table an array up to its
 * first nil. */
static void simr_lua_to_reply(simr *r, lua_State *L, int depth)
{
    switch (lua_type(L, -1)) {
    case LUA_TSTRING: {
        size_t len;
        const char *s = lua_tolstring(L, -1, &len);
        simr_bulk(r, s, len);
        break;
    }
    case LUA_TBOOLEAN:
        if (lua_toboolean(L, -1))
            simr_int(r, 1);
        else
            simr_nil(r);
        break;
    case LUA_TNUMBER:
        simr_int(r, (long long)lua_tonumber(L, -1));
        break;
    case LUA_TTABLE: {
        size_t n = 0;
        lua_getfield(L, -1, "err");
        if (lua_isstring(L, -1)) {
            simr_putf(r, "-%s\r\n", lua_tostring(L, -1));
            lua_pop(L, 1);
            break;
        }
        lua_pop(L, 1);
        lua_getfield(L, -1, "ok");
        if (lua_isstring(L, -1)) {
            simr_putf(r, "+%s\r\n", lua_tostring(L, -1));
            lua_pop(L, 1);
            break;
        }
        lua_pop(L, 1);
        for (;; n++) {
            lua_rawgeti(L, -1, (int)n + 1);
            int nil = lua_isnil(L, -1);
            lua_pop(L, 1);
            if (nil)
                break;
        }
        simr_putf(r, "*%zu\r\n", n);
        for (size_t i = 0; i < n; i++) {
            lua_rawgeti(L, -1, (int)i + 1);
            simr_lua_to_reply(r, L, depth + 1);
            lua_pop(L, 1);
        }
        break;
    }
    default:
        simr_nil(r);
        break;
    }
}

/* The Lua state: base, table, string and math, the redis table; scripts
 * are compiled per call (a cache would change nothing the library sees). */
static int simr_lua_open(simr *r)
{
    lua_State *L = luaL_newstate();

    if (!L)
        return -1;
    luaL_openlibs(L);
    lua_pushlightuserdata(L, r);
    lua_setfield(L, LUA_REGISTRYINDEX, "simr");
    lua_newtable(L);
    lua_pushcfunction(L, simr_lua_call);
    lua_setfield(L, -2, "call");
    lua_pushcfunction(L, simr_lua_pcall);
    lua_setfield(L, -2, "pcall");
    lua_pushcfunction(L, simr_lua_error_reply);
    lua_setfield(L, -2, "error_reply");
    lua_pushcfunction(L, simr_lua_status_reply);
    lua_setfield(L, -2, "status_reply");
    lua_setglobal(L, "redis");
    r->L = L;
    return 0;
}

static void simr_lua_array(lua_State *L, const char *name, const simr_args *a, int from, int n)
{
    lua_newtable(L);
    for (int i = 0; i < n; i++) {
        lua_pushnumber(L, i + 1);
        lua_pushlstring(L, a->v[from + i], a->l[from + i]);
        lua_settable(L, -3);
    }
    lua_setglobal(L, name);
}

/* EVAL / EVALSHA body-or-sha numkeys key... arg... */
static void simr_cmd_eval(simr *r, const simr_args *a, int by_sha)
{
    long long nkeys;
    simr_script *s;
    lua_State *L = r->L;

    if (a->argc < 3 || simr_parse_ll(a->v[2], a->l[2], &nkeys) < 0 || nkeys < 0 ||
        nkeys > a->argc - 3) {
        simr_err(r, "ERR Number of keys can't be greater than number of args");
        return;
    }
    s = by_sha ? simr_script_find(r, a->v[1], a->l[1]) : simr_script_add(r, a->v[1], a->l[1]);
    if (!s) {
        if (by_sha)
            simr_err(r, "NOSCRIPT No matching script. Please use EVAL.");
        else
            r->oom = 1;
        return;
    }
    simr_lua_array(L, "KEYS", a, 3, (int)nkeys);
    simr_lua_array(L, "ARGV", a, 3 + (int)nkeys, a->argc - 3 - (int)nkeys);
    /* Compiled once per script and kept, as Redis keeps its functions. */
    if (s->fn == LUA_NOREF) {
        if (luaL_loadbuffer(L, s->body, strlen(s->body), "@user_script") != 0) {
            simr_putf(r, "-ERR Error compiling script (new function): %s\r\n", lua_tostring(L, -1));
            lua_settop(L, 0);
            return;
        }
        s->fn = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, s->fn);
    r->in_script = 1;
    if (lua_pcall(L, 0, 1, 0) != 0) {
        /* A redis.call that failed raised the command's error; Redis
         * replies with it and names the script. */
        const char *msg = lua_tostring(L, -1);
        simr_putf(r, "-%s script: %s\r\n", msg ? msg : "ERR script error", s->sha);
    } else {
        simr_lua_to_reply(r, L, 0);
    }
    r->in_script = 0;
    lua_settop(L, 0);
}

static void simr_cmd_script(simr *r, const simr_args *a)
{
    if (simr_is(a, 1, "LOAD") && a->argc == 3) {
        const simr_script *s = simr_script_add(r, a->v[2], a->l[2]);
        if (!s) {
            r->oom = 1;
            return;
        }
        simr_bulk(r, s->sha, 40);
    } else if (simr_is(a, 1, "EXISTS")) {
        simr_putf(r, "*%d\r\n", a->argc - 2);
        for (int i = 2; i < a->argc; i++)
            simr_int(r, simr_script_find(r, a->v[i], a->l[i]) != NULL);
    } else if (simr_is(a, 1, "FLUSH")) {
        simr_scripts_flush(r);
        simr_ok(r);
    } else {
        simr_err(r, "ERR unknown subcommand for 'script'");
    }
}

/* ---- dispatch ---- */

static int simr_is_write(const simr_args *a)
{
    static const char *const w[] = { "ZADD", "ZREM", "ZREMRANGEBYRANK", "SET", "DEL", "UNLINK",
                                     "PEXPIRE", "PERSIST", "RENAME", "HSET", "HDEL", NULL };
    for (int i = 0; w[i]; i++)
        if (simr_is(a, 0, w[i]))
            return 1;
    return 0;
}

static void simr_dispatch(simr *r, const simr_args *a)
{
    if (r->password && !r->authed && !simr_is(a, 0, "AUTH")) {
        simr_err(r, "NOAUTH Authentication required.");
        return;
    }
    if (r->replica && simr_is_write(a)) {
        simr_err(r, "READONLY You can't write against a read only replica.");
        return;
    }
    if (r->in_script && r->guard) {
        char why[160];
        if (r->guard(r->guard_arg, a->argc, a->v, a->l, why, sizeof why)) {
            simr_err(r, why);
            return;
        }
    }
    if (simr_is(a, 0, "ZADD"))
        simr_cmd_zadd(r, a);
    else if (simr_is(a, 0, "ZRANGE") || simr_is(a, 0, "ZREVRANGE"))
        simr_cmd_zrange(r, a, simr_is(a, 0, "ZREVRANGE"));
    else if (simr_is(a, 0, "ZREVRANGEBYSCORE"))
        simr_cmd_zrevrangebyscore(r, a);
    else if (simr_is(a, 0, "ZCOUNT"))
        simr_cmd_zcount(r, a);
    else if (simr_is(a, 0, "ZSCORE") || simr_is(a, 0, "ZRANK") || simr_is(a, 0, "ZREVRANK"))
        simr_cmd_zmember(r, a, simr_is(a, 0, "ZSCORE") ? 0 : simr_is(a, 0, "ZRANK") ? 1 : 2);
    else if (simr_is(a, 0, "ZREM"))
        simr_cmd_zrem(r, a);
    else if (simr_is(a, 0, "ZREMRANGEBYRANK"))
        simr_cmd_zremrangebyrank(r, a);
    else if (simr_is(a, 0, "ZCARD"))
        simr_cmd_zcard(r, a);
    else if (simr_is(a, 0, "GET"))
        simr_cmd_get(r, a);
    else if (simr_is(a, 0, "SET"))
        simr_cmd_set(r, a);
    else if (simr_is(a, 0, "DEL") || simr_is(a, 0, "UNLINK") || simr_is(a, 0, "EXISTS"))
        simr_cmd_keys(r, a, !simr_is(a, 0, "EXISTS"));
    else if (simr_is(a, 0, "PEXPIRE") || simr_is(a, 0, "PERSIST") || simr_is(a, 0, "PTTL"))
        simr_cmd_ttl(r, a, simr_is(a, 0, "PEXPIRE") ? 0 : simr_is(a, 0, "PERSIST") ? 1 : 2);
    else if (simr_is(a, 0, "RENAME"))
        simr_cmd_rename(r, a);
    else if (simr_is(a, 0, "HSET"))
        simr_cmd_hset(r, a);
    else if (simr_is(a, 0, "HVALS") || simr_is(a, 0, "HEXISTS") || simr_is(a, 0, "HDEL"))
        simr_cmd_hash(r, a, simr_is(a, 0, "HVALS") ? 0 : simr_is(a, 0, "HEXISTS") ? 1 : 2);
    else if (simr_is(a, 0, "TIME"))     /* the simulated clock, as Redis's is the real one */
        simr_putf(r, "*2\r\n$%d\r\n%lld\r\n$%d\r\n%lld\r\n",
                  snprintf(NULL, 0, "%lld", (long long)(r->now / 1000)), (long long)(r->now / 1000),
                  snprintf(NULL, 0, "%lld", (long long)(r->now % 1000 * 1000)),
                  (long long)(r->now % 1000 * 1000));
    else if (r->in_script)
        simr_err(r, "ERR This Redis command is not allowed from script");
    else if (simr_is(a, 0, "EVALSHA") || simr_is(a, 0, "EVAL"))
        simr_cmd_eval(r, a, simr_is(a, 0, "EVALSHA"));
    else if (simr_is(a, 0, "SCRIPT"))
        simr_cmd_script(r, a);
    else if (simr_is(a, 0, "SCAN"))
        simr_cmd_scan(r, a);
    else if (simr_is(a, 0, "CLUSTER"))
        simr_cmd_cluster(r, a);
    else if (simr_is(a, 0, "PING"))
        simr_put(r, "+PONG\r\n", 7);
    else if (simr_is(a, 0, "INFO"))
        simr_cmd_info(r);
    else if (simr_is(a, 0, "ROLE"))
        simr_cmd_role(r);
    else if (simr_is(a, 0, "WAIT") && r->replica)
        simr_err(r, "ERR WAIT cannot be used with replica instances. Please also note that since "
                    "Redis 4.0 if a replica is configured to be writable (which is not the "
                    "default) writes to replicas are just local and are not propagated.");
    else if (simr_is(a, 0, "WAIT"))
        simr_int(r, r->acked);
    else if (simr_is(a, 0, "AUTH")) {
        int ok = r->password && a->argc == 2 && a->l[1] == strlen(r->password) &&
                 memcmp(a->v[1], r->password, a->l[1]) == 0;
        if (!r->password)
            simr_err(r, "ERR AUTH <password> called without any password configured for the "
                        "default user. Are you sure your configuration is correct?");
        else if (!ok)
            simr_err(r, "WRONGPASS invalid username-password pair or user is disabled.");
        else {
            r->authed = 1;
            simr_ok(r);
        }
    } else {
        simr_putf(r, "-ERR unknown command '%.*s'\r\n", (int)(a->l[0] < 64 ? a->l[0] : 64), a->v[0]);
    }
}

/* ---- the public calls ---- */

void simr_identity(const simr *r, const char **run_id, const char **replid)
{
    *run_id = r->run_id;
    *replid = r->replid;
}

static void simr_ids(simr *r, uint64_t seed, int run_id, int replid)
{
    char buf[32];

    snprintf(buf, sizeof buf, "%016" PRIx64, seed);
    if (run_id) {
        simr_sha1hex(buf, strlen(buf), r->run_id);
        r->run_id[0] = 'a';             /* run_id and replid never equal */
    }
    if (replid) {
        simr_sha1hex(buf, strlen(buf), r->replid);
        r->replid[0] = 'b';
    }
}

simr *simr_new(uint64_t seed, const char *password)
{
    simr *r = calloc(1, sizeof *r);

    if (!r)
        return NULL;
    if (password && !(r->password = strdup(password))) {
        free(r);
        return NULL;
    }
    if (simr_lua_open(r) < 0) {
        free(r->password);
        free(r);
        return NULL;
    }
    simr_ids(r, seed, 1, 1);
    return r;
}

static void simr_clear(simr *r)
{
    for (size_t i = 0; i < r->n; i++)
        simr_key_clear(&r->k[i]);
    free(r->k);
    r->k = NULL;
    r->n = r->cap = 0;
}

void simr_free(simr *r)
{
    if (!r)
        return;
    simr_clear(r);
    if (r->L)
        simr_scripts_flush(r);
    free(r->sc);
    if (r->L)
        lua_close(r->L);
    free(r->password);
    free(r->out);
    free(r);
}

redisReply *simr_exec(simr *r, int argc, const char *const *argv, const size_t *lens,
                      int64_t now)
{
    redisReply *x;

    r->now = now;
    r->olen = 0;
    r->oom = 0;
    if (argc < 1)
        simr_err(r, "ERR empty command");
    else
        simr_dispatch(r, &(simr_args){ argc, argv, lens });
    if (r->oom)
        return NULL;
    x = simr_parse(r, 0);
    r->olen = 0;
    return x;
}

redisReply *simr_execv(simr *r, int64_t now, const char *const *argv)
{
    size_t lens[64];
    int argc = 0;

    while (argv[argc] && argc < 64) {
        lens[argc] = strlen(argv[argc]);
        argc++;
    }
    return simr_exec(r, argc, argv, lens, now);
}

/* A deep copy of k into to. */
static int simr_key_copy(simr_key *to, const simr_key *k)
{
    *to = *k;
    to->name = malloc(k->nlen + 1);
    to->s = k->type == SIMR_STR ? malloc(k->slen ? k->slen : 1) : NULL;
    to->z = k->zn ? malloc(k->zn * sizeof *to->z) : NULL;
    to->zcap = k->zn;
    if (!to->name || (k->type == SIMR_STR && !to->s) || (k->zn && !to->z)) {
        free(to->name);
        free(to->s);
        free(to->z);
        return -1;
    }
    memcpy(to->name, k->name, k->nlen + 1);
    if (to->s)
        memcpy(to->s, k->s, k->slen);
    for (size_t i = 0; i < k->zn; i++) {
        to->z[i] = k->z[i];
        to->z[i].m = malloc(k->z[i].mlen ? k->z[i].mlen : 1);
        if (!to->z[i].m) {
            to->zn = i;
            simr_key_clear(to);
            return -1;
        }
        memcpy(to->z[i].m, k->z[i].m, k->z[i].mlen);
    }
    to->h = NULL;
    to->hn = to->hcap = 0;
    if (k->hn && !(to->h = calloc(k->hn, sizeof *to->h))) {
        simr_key_clear(to);
        return -1;
    }
    for (size_t i = 0; i < k->hn; i++, to->hn++) {
        to->h[i].f = simr_dup(k->h[i].f, k->h[i].fl);
        to->h[i].v = simr_dup(k->h[i].v, k->h[i].vl);
        to->h[i].fl = k->h[i].fl;
        to->h[i].vl = k->h[i].vl;
        if (!to->h[i].f || !to->h[i].v) {
            to->hn++;
            simr_key_clear(to);
            return -1;
        }
    }
    to->hcap = to->hn;
    return 0;
}

static int simr_copy_data(simr *to, const simr *from)
{
    to->k = calloc(from->n ? from->n : 1, sizeof *to->k);
    if (!to->k)
        return -1;
    to->cap = from->n ? from->n : 1;
    for (size_t i = 0; i < from->n; i++) {
        if (simr_key_copy(&to->k[i], &from->k[i]) < 0)
            return -1;
        to->n++;
    }
    to->offset = from->offset;
    return 0;
}

simr *simr_snapshot(const simr *r)
{
    simr *s = calloc(1, sizeof *s);

    if (!s)
        return NULL;
    if (simr_copy_data(s, r) < 0) {
        simr_free(s);
        return NULL;
    }
    return s;
}

int simr_restart(simr *r, const simr *from, uint64_t seed)
{
    simr_clear(r);
    simr_scripts_flush(r);
    r->authed = 0;
    r->offset = 0;
    simr_ids(r, seed, 1, 1);
    return from ? simr_copy_data(r, from) : 0;
}

void simr_promote(simr *r, uint64_t seed)
{
    r->replica = 0;
    simr_ids(r, seed, 0, 1);
}

int simr_evict(simr *r, const char *key, size_t klen)
{
    long at = simr_find(r, key, klen);

    if (at < 0)
        return 0;
    simr_key_del(r, (size_t)at);
    return 1;
}

void simr_set_role(simr *r, int replica, int replicas_acked)
{
    r->replica = replica;
    r->acked = replicas_acked;
}

size_t simr_keys(const simr *r) { return r->n; }

void simr_set_links(simr *r, int attached, int acked)
{
    r->attached = attached;
    r->acked = acked;
}

long long simr_offset(const simr *r) { return r->offset; }

void simr_set_guard(simr *r, simr_guard guard, void *arg)
{
    r->guard = guard;
    r->guard_arg = arg;
}

int simr_has(simr *r, const char *key, size_t klen, int64_t now)
{
    r->now = now;
    return simr_find(r, key, klen) >= 0;
}

int simr_migrate_one(simr *from, simr *to, int (*mine)(void *arg, const char *key, size_t len),
                     void *arg, int64_t now)
{
    from->now = to->now = now;
    for (size_t i = 0; i < from->n; i++) {
        simr_key *k = &from->k[i];
        long at;
        if (!mine(arg, k->name, k->nlen) || simr_find(from, k->name, k->nlen) != (long)i)
            continue;
        if ((at = simr_find(to, k->name, k->nlen)) >= 0)
            simr_key_del(to, (size_t)at);       /* MIGRATE ... REPLACE */
        if (to->n == to->cap) {
            size_t cap = to->cap ? 2 * to->cap : 8;
            simr_key *bigger = realloc(to->k, cap * sizeof *bigger);
            if (!bigger)
                return -1;
            to->k = bigger;
            to->cap = cap;
        }
        to->k[to->n++] = *k;                    /* the key whole, TTL with it */
        from->k[i] = from->k[--from->n];
        from->offset++;
        to->offset++;
        return 1;
    }
    return 0;
}

int simr_replicate(simr *to, const simr *from)
{
    simr_clear(to);
    memcpy(to->replid, from->replid, sizeof to->replid);
    return simr_copy_data(to, from);
}

char *simr_dump(simr *r, int64_t now)
{
    simr_key **v;
    char *text;

    r->now = now;
    r->olen = 0;
    r->oom = 0;
    v = simr_sorted(r);
    if (!v)
        return NULL;
    for (size_t i = 0; i < r->n; i++) {
        const simr_key *k = v[i];
        simr_put(r, k->name, k->nlen);
        if (k->expire_at >= 0)
            simr_putf(r, " ttl=%lld", (long long)(k->expire_at - now));
        if (k->type == SIMR_STR) {
            simr_put(r, " = ", 3);
            simr_put(r, k->s, k->slen);
        } else {
            simr_put(r, " zset", 5);
            for (size_t j = k->zn; j-- > 0;) {
                simr_putf(r, " %.17g:", k->z[j].score);
                simr_put(r, k->z[j].m, k->z[j].mlen);
            }
        }
        simr_put(r, "\n", 1);
    }
    free(v);
    simr_put(r, "", 1);
    if (r->oom)
        return NULL;
    text = malloc(r->olen);
    if (text)
        memcpy(text, r->out, r->olen);
    r->olen = 0;
    return text;
}
