/* base.h -- the bottom layer: pure functions every other layer uses.
 *
 *   codec.c   ids as members, scores and integers as text, both ways, strictly
 *   cursor.c  opaque cursor tokens (public)
 *   score.c   composite scores (public)
 *   slots.c   Redis Cluster slots, "host:port" lists, what a reply means
 *   text.c    messages, key names, lease tokens, the clock
 *
 * Nothing here keeps state between calls or touches a socket. Not installed.
 */
#ifndef FEED_BASE_H
#define FEED_BASE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <hiredis/hiredis.h>    /* redisReply: the parsed reply, a plain tree */

#include "feedcache.h"

/* Internal names are feed__*; the library is built with
 * -fvisibility=hidden, so none of them leaves libfeedcache.so. */

#define FEED_ERRMSG 512             /* bytes of an error message buffer */

/* ---- codec.c ----
 *
 * Members (the encoding is codec.c's) are at most 19 bytes. The end marker
 * is a member no id can encode to; its score is -inf, below every real
 * score. Buffers hold FEED_MEMBER_MAX bytes (the member and a NUL); callers
 * use the length feed__member_encode returns (members may hold NUL bytes). */
#define FEED_MEMBER_MAX 24
#define FEED_END_MEMBER "end"

int    feed__score_ok(int64_t score);
size_t feed__i64_to_str(int64_t v, char *buf);          /* buf >= 21 bytes; returns the length */
size_t feed__member_encode(int64_t id, char buf[FEED_MEMBER_MAX]);
int    feed__member_decode(const char *s, size_t len, int64_t *id);
int    feed__parse_i64(const char *s, size_t len, int64_t *out);
int    feed__parse_score(const char *s, size_t len, int64_t *out);
int    feed__item_after(feed_item item, int64_t score, int64_t id);

/* The pair at element i (and i + 1) of a WITHSCORES reply: is it the end
 * marker (member "end", score "-inf")? Is it a feed item (FEED_OK, or
 * FEED_EINVAL: not two strings, or a member or score of no feedcache
 * item)? Inline: a page decodes every entry it reads with them. */
static inline int feed__reply_end(const redisReply *r, size_t i)
{
    const redisReply *m = r->element[i], *s = r->element[i + 1];

    return m->type == REDIS_REPLY_STRING && s->type == REDIS_REPLY_STRING &&
           m->len == sizeof FEED_END_MEMBER - 1 &&
           memcmp(m->str, FEED_END_MEMBER, m->len) == 0 &&
           s->len == 4 && memcmp(s->str, "-inf", 4) == 0;
}

static inline int feed__reply_pair(const redisReply *r, size_t i, feed_item *it)
{
    const redisReply *m = r->element[i], *s = r->element[i + 1];

    if (m->type != REDIS_REPLY_STRING || s->type != REDIS_REPLY_STRING ||
        feed__member_decode(m->str, m->len, &it->id) != FEED_OK ||
        feed__parse_score(s->str, s->len, &it->score) != FEED_OK)
        return FEED_EINVAL;
    return FEED_OK;
}

/* ---- slots.c ---- */
#define FEED_SLOTS 16384
typedef struct feed_addr {
    char host[256];
    int  port;
} feed_addr;

/* What a reply means for the command it answers (on a Redis Cluster). */
enum feed_verdict {
    FEED_V_DONE,        /* a final answer (maybe an error reply) */
    FEED_V_MOVED,       /* the slot lives elsewhere for good: refresh the map */
    FEED_V_ASK,         /* migrating: ASKING + the command at the target, once */
    FEED_V_TRYAGAIN,    /* TRYAGAIN, CLUSTERDOWN, LOADING: back off, try again */
    FEED_V_NOSCRIPT     /* this node lacks the script: load it, try again */
};
unsigned feed__key_slot(const char *key, size_t len);
unsigned feed__uid_slot(int64_t uid);
int      feed__parse_addrs(const char *list, feed_addr **out, size_t *n);
int      feed__addr_at(const char *list, size_t i, feed_addr *a);
enum feed_verdict feed__classify(const redisReply *r, const char *here, feed_addr *to);
int64_t  feed__backoff_ms(int tries, int64_t now, int64_t deadline);
int      feed__slot_map_parse(const redisReply *r, const char *here,
                              int (*each)(void *arg, unsigned from, unsigned to,
                                          const feed_addr *owner),
                              void *arg);
/* The slot of a command's first key: argv[1], or argv[3] for EVALSHA (with
 * no keys, its first argument: a fan-out by node routes by it). */
unsigned feed__command_slot(int argc, const char **argv, const size_t *lens);
int      feed__is_readonly(const redisReply *r);   /* a -READONLY error: a demoted node */
int      feed__is_noscript(const redisReply *r);

/* ---- text.c ---- */
/* Format a message into buf (FEED_ERRMSG bytes), on one line (servers'
 * messages may hold newlines; messages end up in logs). Returns code, so
 * that error paths read "return feed__msg(err, FEED_EINVAL, ...)". */
int feed__msg(char *buf, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int feed__vmsg(char *buf, int code, const char *fmt, va_list ap);
/* Copy the message src into dst, a buffer of cap bytes (at least 1), cut
 * to fit: how a request keeps one message while a later step writes
 * another, puts it back, or hands it to a field of another size. The one
 * way a message is copied; dst and src may overlap. */
void feed__msg_keep_n(char *dst, size_t cap, const char *src);
/* The calling thread's message of the calls that have no handle to carry
 * one (feed_open, feed_config_set, the cursor decoders): what
 * feed_errmsg(NULL) gives; FEED_ERRMSG bytes. */
char *feed__thread_msg(void);
/* The same between two FEED_ERRMSG buffers. */
static inline void feed__msg_keep(char *dst, const char *src)
{
    feed__msg_keep_n(dst, FEED_ERRMSG, src);
}

/* The key format: part of every key name, "<prefix>:3:<tag>:<gen>:{<owner>}". It
 * changes whenever what the keys hold is read differently (the member
 * encoding, the end marker, the lease, what the tag covers), so a library
 * never reads a copy another version wrote: an upgrade costs a cold cache,
 * never a misread page. */
#define FEED_KEY_VERSION "3"

/* Feed families: the rows of one table grouped by an owner column, each
 * owner's rows one feed, cached under the family's own key base. Every
 * family keeps the same invariant with the same scripts, TTLs, leases and
 * repairs; which family a request works on is the request's (a hook, a
 * drop, a source of a merged page), never the handle's. */
enum feed_family {
    FEED_FAM_FEED,      /* cfg.table by cfg.owner_column */
    FEED_FAM_AUTHOR,    /* cfg.author_table by cfg.author_column (read-time merge) */
    FEED_FAM_COUNT
};

/* A copy is only ever read by handles configured for the rows it was built
 * from, whatever key prefix they share: the key names what the copy holds.
 * The tag is a hash of the strings that say it (a family's name, its table,
 * owner, score and id columns), FEED_KEY_TAG_LEN letters and digits; the key
 * base, "<prefix>:3:<tag>:<gen>:", begins every key of that family's copies
 * (a string of its own, malloc'd; NULL: no memory). Two handles whose table
 * and columns are spelt alike share copies, as the write hooks of one and
 * the pages of the other need; any other spelling gets copies of its own. */
#define FEED_KEY_TAG_LEN 13
void  feed__key_tag(const char *const *what, size_t n, char out[FEED_KEY_TAG_LEN + 1]);
/* The key base ends with the copies' generation, "<prefix>:3:<tag>:<gen>:":
 * FEED_KEY_GEN_LEN letters and digits that name the Redis data set the copy
 * was written in (with the restart fence; setup.c says why). A request's
 * keys are built with FEED_KEY_GEN_NONE there, and the exchange writes the
 * generation of the node a command is sent to into each key just before it
 * goes (feed__keys_stamp): which data set a trip reaches is known only then.
 * Without the fence every generation is FEED_KEY_GEN_NONE. */
#define FEED_KEY_GEN_LEN  13
#define FEED_KEY_GEN_NONE "0000000000000"
char *feed__key_base(const char *prefix, const char *const *what, size_t n);
/* The generation of the data set whose identity is run_id and replid (INFO
 * server's run_id, INFO replication's master_replid): a hash of both, never
 * FEED_KEY_GEN_NONE. */
void  feed__key_gen(const char *run_id, const char *replid, char out[FEED_KEY_GEN_LEN + 1]);
/* The 40 hex digits of INFO's line "<field>:..." (run_id, master_replid)
 * into out: 1, or 0 (out "") if there is none. */
int   feed__info_id(const char *info, const char *field, char out[41]);
/* Bytes of a key base before its generation: "<prefix>:3:<tag>:". */
size_t feed__key_gen_at(const char *base);
/* Bytes a key of this base needs, NUL included (the longest owner and
 * suffix). */
size_t feed__key_cap(const char *base);
/* "<base>{<owner>}" into key and "<base>{<owner>}:lease" into lease_key
 * (feed__key_cap(base) bytes each; lease_key may be NULL). The braces are a
 * Redis Cluster hash tag: every key of a feed lives on one slot. */
void feed__family_keys(const char *base, int64_t owner, char *key, char *lease_key);

/* A lease token unique across handles and processes: a random seed per
 * handle, then a counter (*seq). */
uint64_t feed__random_seed(const void *salt);
void     feed__lease_token(uint64_t seed, uint64_t *seq, char buf[33]);

/* A command in the Redis protocol (RESP): feed__resp_size bytes are enough
 * (an upper bound), feed__resp_format writes it and returns its length. */
size_t feed__resp_size(int argc, const size_t *lens);
size_t feed__resp_format(char *buf, int argc, const char **argv, const size_t *lens);

/* Monotonic milliseconds. Only drivers read the clock: the core is handed
 * the time. */
int64_t feed__now_ms(void);

#endif /* FEED_BASE_H */
