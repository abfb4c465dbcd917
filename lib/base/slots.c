/* slots.c -- Redis Cluster arithmetic and the meaning of replies.
 *
 * Which slot a key lives on, what a reply means (done, or MOVED / ASK /
 * TRYAGAIN / NOSCRIPT: send again, and where), how long to wait before the
 * next try, "host:port" lists. The exchange (lib/core/exchange.c) decides with
 * these; nothing here keeps state or touches a socket.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base.h"

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as the Redis
 * Cluster specification requires; bitwise, since keys are a few bytes. */
static uint16_t crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;

    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (uint16_t)(crc & 0x8000 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    return crc;
}

/* The spec's hash tag rule: if the key has a '{' followed later by a '}'
 * with at least one byte between them, only those bytes are hashed. */
unsigned feed__key_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len), *close;

    if (open) {
        size_t rest = len - (size_t)(open - key) - 1;
        close = memchr(open + 1, '}', rest);
        if (close && close > open + 1)
            return crc16(open + 1, (size_t)(close - open - 1)) & (FEED_SLOTS - 1);
    }
    return crc16(key, len) & (FEED_SLOTS - 1);
}

/* Every key of uid's feed is "<prefix>:{<uid>}...": its slot is the uid's
 * decimal text's. */
unsigned feed__uid_slot(int64_t uid)
{
    char num[21];

    return crc16(num, feed__i64_to_str(uid, num)) & (FEED_SLOTS - 1);
}

/* "host:port" into *a; the port is the text after the last ':'. */
static int parse_addr(const char *s, size_t len, feed_addr *a)
{
    const char *colon = NULL;
    long port = 0;

    for (size_t i = 0; i < len; i++)
        if (s[i] == ':')
            colon = s + i;
    if (!colon || colon == s || (size_t)(colon - s) >= sizeof a->host || colon + 1 == s + len)
        return FEED_EINVAL;
    for (const char *p = colon + 1; p < s + len; p++) {
        if (!isdigit((unsigned char)*p) || (port = port * 10 + (*p - '0')) > 65535)
            return FEED_EINVAL;
    }
    if (port < 1)
        return FEED_EINVAL;
    memcpy(a->host, s, (size_t)(colon - s));
    a->host[colon - s] = '\0';
    a->port = (int)port;
    return FEED_OK;
}

/* Entry i of "host:port[,host:port...]" into *a: 1 when entry i exists
 * and is well formed, 0 past the end or on a malformed entry. The
 * Sentinels are asked in this order. */
int feed__addr_at(const char *list, size_t i, feed_addr *a)
{
    const char *p = list, *end;

    for (size_t k = 0; k < i; k++) {
        if (!(p = strchr(p, ',')))
            return 0;
        p++;
    }
    end = strchr(p, ',');
    return parse_addr(p, end ? (size_t)(end - p) : strlen(p), a) == FEED_OK;
}

/* "host:port[,host:port...]": the seed list of redis_cluster. With out NULL
 * only checks it (feed_open's config check). */
int feed__parse_addrs(const char *list, feed_addr **out, size_t *n)
{
    size_t count = 1;
    feed_addr *addrs = NULL, one;

    if (!list || !*list)
        return FEED_EINVAL;
    for (const char *p = list; *p; p++)
        count += *p == ',';
    if (out && (addrs = calloc(count, sizeof *addrs)) == NULL)
        return FEED_ENOMEM;
    for (size_t i = 0; i < count; i++) {
        if (!feed__addr_at(list, i, addrs ? &addrs[i] : &one)) {
            free(addrs);
            return FEED_EINVAL;
        }
    }
    if (out) {
        *out = addrs;
        *n = count;
    }
    return FEED_OK;
}

static int starts(const redisReply *r, const char *word)
{
    size_t len = strlen(word);

    return r->len >= len && strncmp(r->str, word, len) == 0 &&
           (r->len == len || r->str[len] == ' ');
}

/* "MOVED <slot> <host>:<port>" / "ASK ...": the node to try. An empty host
 * means the host of the node that answered. */
static int redirect_target(const redisReply *r, const char *here, feed_addr *to)
{
    const char *addr = strrchr(r->str, ' ');

    if (!addr)
        return FEED_EINVAL;
    addr++;
    if (*addr == ':') {     /* ":port" */
        char buf[sizeof to->host + 8];
        int len = snprintf(buf, sizeof buf, "%s%s", here, addr);
        return len > 0 && (size_t)len < sizeof buf ? parse_addr(buf, (size_t)len, to)
                                                   : FEED_EINVAL;
    }
    return parse_addr(addr, strlen(addr), to);
}

/* What a reply means for the command it answers. here: the host of the
 * node that sent it. */
enum feed_verdict feed__classify(const redisReply *r, const char *here, feed_addr *to)
{
    if (!r || r->type != REDIS_REPLY_ERROR)
        return FEED_V_DONE;
    if (starts(r, "MOVED"))
        return redirect_target(r, here, to) == FEED_OK ? FEED_V_MOVED : FEED_V_DONE;
    if (starts(r, "ASK"))
        return redirect_target(r, here, to) == FEED_OK ? FEED_V_ASK : FEED_V_DONE;
    /* A slot migrating (TRYAGAIN), the cluster or a slot not served
     * (CLUSTERDOWN), a replica promoted and still loading: all pass. */
    if (starts(r, "TRYAGAIN") || starts(r, "CLUSTERDOWN") || starts(r, "LOADING") ||
        starts(r, "MASTERDOWN"))
        return FEED_V_TRYAGAIN;
    if (starts(r, "NOSCRIPT"))
        return FEED_V_NOSCRIPT;
    return FEED_V_DONE;
}

/* The pause before try number `tries` (1, 2, ...) after a TRYAGAIN-like
 * answer: 1, 2, 4, ... ms, at most 32, and never past the deadline. Returns
 * -1 when the next try would start past it: give up. */
int64_t feed__backoff_ms(int tries, int64_t now, int64_t deadline)
{
    int64_t pause = (int64_t)1 << (tries < 6 ? tries - 1 : 5);

    return now + pause >= deadline ? -1 : pause;
}

static int is_int(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_INTEGER;
}

/* One entry of CLUSTER SLOTS: {from, to, {host, port, ...}, replicas...}.
 * An empty or "?" host means the node that answered. */
static int slot_range(const redisReply *e, const char *here, unsigned *from,
                      unsigned *to, feed_addr *owner)
{
    const redisReply *node;
    size_t len;

    if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 || !is_int(e->element[0]) ||
        !is_int(e->element[1]))
        return FEED_EINVAL;
    node = e->element[2];
    if (node->type != REDIS_REPLY_ARRAY || node->elements < 2 ||
        node->element[0]->type != REDIS_REPLY_STRING || !is_int(node->element[1]))
        return FEED_EINVAL;
    if (e->element[0]->integer < 0 || e->element[1]->integer >= FEED_SLOTS ||
        e->element[0]->integer > e->element[1]->integer ||
        node->element[1]->integer < 1 || node->element[1]->integer > 65535)
        return FEED_EINVAL;
    *from = (unsigned)e->element[0]->integer;
    *to = (unsigned)e->element[1]->integer;
    len = node->element[0]->len;
    if (len == 0 || (len == 1 && node->element[0]->str[0] == '?')) {
        snprintf(owner->host, sizeof owner->host, "%s", here);
    } else {
        if (len >= sizeof owner->host)
            return FEED_EINVAL;
        memcpy(owner->host, node->element[0]->str, len);
        owner->host[len] = '\0';
    }
    owner->port = (int)node->element[1]->integer;
    return FEED_OK;
}

/* A CLUSTER SLOTS reply: each(arg, from, to, owner) per range, in order.
 * Returns FEED_EINVAL for a malformed reply (nothing is half-applied if the
 * caller builds a fresh map and keeps it only on FEED_OK), or each's first
 * error. */
int feed__slot_map_parse(const redisReply *r, const char *here,
                         int (*each)(void *arg, unsigned from, unsigned to,
                                     const feed_addr *owner),
                         void *arg)
{
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return FEED_EINVAL;
    for (size_t i = 0; i < r->elements; i++) {
        unsigned from, to;
        feed_addr owner;
        int rc = slot_range(r->element[i], here, &from, &to, &owner);
        if (rc == FEED_OK)
            rc = each(arg, from, to, &owner);
        if (rc != FEED_OK)
            return rc;
    }
    return FEED_OK;
}

unsigned feed__command_slot(int argc, const char **argv, const size_t *lens)
{
    int k = 1;

    if (argc > 3 && strcmp(argv[0], "EVALSHA") == 0)
        k = 3;
    if (argc <= k)
        return 0;
    return feed__key_slot(argv[k], lens ? lens[k] : strlen(argv[k]));
}

int feed__is_readonly(const redisReply *r)
{
    /* Plain commands answer "READONLY ..."; Redis 7 passes a script's
     * failed redis.call back with the same code first. */
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "READONLY", 8) == 0;
}

int feed__is_noscript(const redisReply *r)
{
    return r && r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}
