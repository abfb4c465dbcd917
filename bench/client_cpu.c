/* client_cpu.c -- the client's instructions per call, for callgrind.
 *
 *   client_cpu page DEPTH N   N cached pages of uid 2 through feed_page, on a
 *                             handle that walked to DEPTH first (so it holds
 *                             the rank hint: a reader's own next page)
 *   client_cpu cold DEPTH N   the same on a handle that never saw the cursor
 *                             (the read by score: another process's next page)
 *   client_cpu ranked DEPTH N the same through feed_page_ranked, given the
 *                             rank the previous page handed out (a cursor
 *                             token's): the handle learns it on the first
 *                             call, so this is the hinted path, entered by
 *                             another door
 *   client_cpu raw DEPTH N    N bare hiredis ZREVRANGE calls and their parse
 *
 * bench/run.sh runs each under `valgrind --tool=callgrind` for two values of
 * N and takes the difference per call, which removes start-up (connecting,
 * loading scripts). The cursor of depth d is the item at rank d-1, read once
 * from Redis before the timed part. Needs the feed cached (run.sh warms it).
 *
 * With FEED_BENCH_REPORT=1 (not under callgrind) it also prints, for the N
 * calls alone, "calls N redis_calls R redis_cpu_ns C wall_ns W": the
 * handle's round trips (feed_stats) and the Redis process's CPU (/proc).
 * run.sh builds this same file against the library before the restructure
 * too (section "blocking"): it uses the public API only. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

int main(int argc, char **argv)
{
    redisContext *c;
    feed *f;
    size_t depth;
    long n;
    int64_t score = 0, id = 0;
    char start[24], stop[24];
    int report;
    pid_t rpid = 0;
    feed_stats s0;
    uint64_t cpu0 = 0, t0 = 0;

    if (argc != 4 || (strcmp(argv[1], "page") && strcmp(argv[1], "cold") &&
                      strcmp(argv[1], "ranked") && strcmp(argv[1], "raw")))
        die("usage: client_cpu page|cold|ranked|raw DEPTH N");
    depth = (size_t)atol(argv[2]);
    n = atol(argv[3]);
    c = b_redis();
    f = b_open("feed", 1000);
    {   /* warm the feed: the first call may be a miss */
        feed_result r;
        if (feed_page(f, UID_1K, FEED_FIRST, 0, PAGE_LIMIT, &r) != FEED_OK)
            die("feed_page: %s", feed_errmsg(f));
        feed_result_free(&r);
    }
    if (depth > 0) {   /* the cursor: the item at rank depth - 1 */
        redisReply *r = b_cmd(c, "ZREVRANGE %s %lld %lld WITHSCORES", b_key("feed", UID_1K, ""),
                              (long long)depth - 1, (long long)depth - 1);
        if (r->elements != 2)
            die("%s is not cached", b_key("feed", UID_1K, ""));
        if (!member_id(r->element[0]->str, r->element[0]->len, &id))
            die("%s: rank %zu is not an item", b_key("feed", UID_1K, ""), depth - 1);
        score = strtoll(r->element[1]->str, NULL, 10);
        freeReplyObject(r);
    }
    if (strcmp(argv[1], "page") == 0) {   /* walk there: the handle learns the rank */
        int64_t cs = FEED_FIRST, ci = 0;
        for (size_t at = 0; at < depth;) {
            size_t step = depth - at < PAGE_LIMIT ? depth - at : PAGE_LIMIT;
            feed_result r;
            if (feed_page(f, UID_1K, cs, ci, step, &r) != FEED_OK || !r.has_more)
                die("walking to depth %zu: %s", depth, feed_errmsg(f));
            cs = r.next_score;
            ci = r.next_id;
            at += step;
            feed_result_free(&r);
        }
        if (depth > 0 && (cs != score || ci != id))
            die("the walk ended at another cursor");
    }
    report = strcmp(env_or("FEED_BENCH_REPORT", "0"), "1") == 0;
    if (report) {
        rpid = redis_pid(c);
        feed_stats_get(f, &s0);
        cpu0 = proc_cpu_ns(rpid);
        t0 = now_ns();
    }
    if (strcmp(argv[1], "raw") != 0) {
        for (long i = 0; i < n; i++) {
            feed_result r;
            int rc = strcmp(argv[1], "ranked") == 0
                ? feed_page_ranked(f, UID_1K, depth ? score : FEED_FIRST, id, (int64_t)depth,
                                   PAGE_LIMIT, &r, NULL)
                : feed_page(f, UID_1K, depth ? score : FEED_FIRST, id, PAGE_LIMIT, &r);
            if (rc != FEED_OK || r.source != FEED_SOURCE_CACHE)
                die("feed_page: rc %d source %d", rc, (int)r.source);
            feed_result_free(&r);
        }
    } else {
        const char *av[5] = { "ZREVRANGE", b_key("feed", UID_1K, ""), start, stop, "WITHSCORES" };
        snprintf(start, sizeof start, "%zu", depth);
        snprintf(stop, sizeof stop, "%zu", depth + PAGE_LIMIT);
        for (long i = 0; i < n; i++) {
            feed_item items[PAGE_LIMIT + 1];
            size_t k = 0;
            redisReply *r = redisCommandArgv(c, 5, av, NULL);
            if (!r || r->type != REDIS_REPLY_ARRAY)
                die("ZREVRANGE failed");
            /* the same parse as the library: the member codec, score digits */
            for (size_t e = 0; e + 1 < r->elements && k <= PAGE_LIMIT; e += 2) {
                const redisReply *m = r->element[e];
                int64_t v = 0;
                if (!member_id(m->str, m->len, &v))
                    break;
                items[k].id = v;
                items[k].score = strtoll(r->element[e + 1]->str, NULL, 10);
                k++;
            }
            freeReplyObject(r);
            if (k == 0 || items[0].id < 0)
                die("ZREVRANGE: nothing parsed");
        }
    }
    if (report) {
        uint64_t t1 = now_ns(), cpu1 = proc_cpu_ns(rpid);
        feed_stats s1;
        feed_stats_get(f, &s1);
        printf("calls %ld redis_calls %llu redis_cpu_ns %llu wall_ns %llu\n", n,
               (unsigned long long)(s1.redis_calls - s0.redis_calls),
               (unsigned long long)(cpu1 - cpu0), (unsigned long long)(t1 - t0));
    }
    feed_close(f);
    redisFree(c);
    return 0;
}
