/* reads.h -- cursors and the feed_page call, shared by the sections. */
#ifndef FEED_BENCH_READS_H
#define FEED_BENCH_READS_H

#include "bench.h"

/* Where a page starts: rank depth; the cursor is the item at depth - 1. */
typedef struct page_pos {
    size_t  depth;
    int     first;
    int64_t score, id;
} page_pos;

typedef struct page_ctx {
    feed    *f;
    int64_t  uid;
    page_pos pos;
} page_ctx;

/* A bare peer call: the argv it sends, and how much of the reply precedes
 * the page's first pair. */
typedef struct raw_ctx {
    redisContext *c;
    const char   *argv[6];
    size_t        lens[6];
    int           argc;
    size_t        skip;          /* reply elements before the page's first pair */
    char          start[24], stop[24];
    char          sha[41];
} raw_ctx;

/* ZREVRANGE key depth depth+PAGE_LIMIT WITHSCORES, and op_bare runs it and
 * parses the pairs into items as the library does. */
void raw_init(raw_ctx *x, redisContext *c, const char *key, size_t depth);
int  op_bare(void *raw_ctx);

/* What feed_page sends Redis (variant.cmd): plain reads, now and then a
 * PTTL or PEXPIRE, page.lua when a reply cannot prove the page; server time
 * per feed_page call ('=': divided by the calls made, not by a command's). */
#define FEED_PAGE_CMDS "=zrevrange,zrevrangebyscore,pttl,pexpire,evalsha"

/* Walk f from the first page down to depth (bench/cpu.c), so that f holds
 * the rank hint of the cursor there, as a handle that served the previous
 * page does. */
void prime(feed *f, int64_t uid, size_t depth);

page_pos pos_at(const feed_item *items, size_t n, size_t depth);
int  op_page(void *page_ctx);   /* exits unless answered by the cache */
void warm(feed *f, redisContext *c, int64_t uid, const char *prefix, long long want_card);
/* The same for a handle on table (b_key_of's copies of table). */
void warm_table(feed *f, redisContext *c, int64_t uid, const char *prefix, const char *table,
                long long want_card);

void section_pages(void);
void section_memory(void);
void section_writes(void);     /* rebuild install, end-to-end miss */
void section_stampede(void);
void section_fanout(void);
void section_pg(void);
void section_wait(void);      /* bench/ha.c: the failover guarantee's cost */
void section_fence(void);     /* bench/ha.c: the restart fence in steady state */
void section_replica(void);   /* bench/replica.c: the PostgreSQL replica's delay */
void section_cpu(void);        /* bench/cpu.c: plain-read pages, Redis CPU, 8 clients */
void section_async(void);      /* bench/async.c: the event-loop API against the blocking one */
void section_tls(void);        /* bench/tls.c: a cached page over TLS against plaintext */

#endif
