/* fuzz_session.c -- a hostile or broken Redis server. The input is a small
 * header and then every byte "Redis" sends back, over a socketpair, to a
 * sequence of library calls on one handle: pages (first and after a cursor),
 * merged pages (the reader and two authors, feed_page_merged),
 * feed_on_insert, feed_on_delete, feed_fanout, feed_reload, feed_invalidate.
 * So every path that reads a reply runs on those bytes: page.lua's answer,
 * the hooks' integers, the pipelines, NOSCRIPT and SCRIPT LOAD, the rebuild's
 * staging ZADD + rebuild.lua pipeline, the repairs' DELs. PostgreSQL is fake_pg.c.
 *
 * Header: bytes 0-1 four calls (3 bits each), byte 2 the page limit (1..20)
 * and, in its top bit, PostgreSQL down; byte 3 the uid.
 *
 * Whatever the bytes, every call returns one of the documented codes, and a
 * page that comes back OK is well formed: at most limit items, scores in
 * range, ids >= 0, has_more only on a full page with the cursor on its last
 * item, and every item strictly after the cursor and strictly ordered (a
 * reply that breaks the order is an unexpected reply: FEED_EREDIS, then SQL
 * answers). Leaks and memory errors are the sanitizers' to catch. */
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "internal.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A handle wired to fd, as feed_open would make it, without connecting:
 * no reconnects (retry_ms is huge), and PostgreSQL is the fake. */
static feed *fake_handle(int fd)
{
    feed *f = calloc(1, sizeof *f);
    feed_config cfg;
    feed_node *n;

    if (!f)
        return NULL;
    feed_config_init(&cfg);
    cfg.redis_port = 1;
    cfg.max_len = 8;
    cfg.max_page = 20;
    cfg.ttl_seconds = 60;
    cfg.lease_wait_ms = 0;
    cfg.retry_ms = UINT32_MAX;
    cfg.author_table = "author_post";     /* fake_pg.c makes its rows up too */
    if (feed__core_init(&f->core, &cfg) != FEED_OK || feed__topo_init(&f->core) != FEED_OK) {
        close(fd);
        feed_close(f);
        return NULL;
    }
    f->core.handle = f;
    f->core.token_seed = 1;
    feed__pg_init(&f->pg);
    for (int s = 0; s < FEED_SCRIPT_COUNT; s++)
        memset(f->core.sha[s], 'a' + s, 40);
    n = f->core.topo.nodes[0];
    n->attempt_ms = feed__now_ms();
    n->io = redisConnectFd(fd);
    if (!n->io || ((redisContext *)n->io)->err) {
        if (!n->io)
            close(fd);
        feed_close(f);
        return NULL;
    }
    n->state = FEED_NODE_READY;
    n->fence.state = FEED_FENCE_TRUSTED;
    {
        struct timeval tv = { 0, 200 * 1000 };
        redisSetTimeout(n->io, tv);
    }
    return f;
}

static int known_code(int rc)
{
    return rc == FEED_OK || rc == FEED_EINVAL || rc == FEED_ERANGE || rc == FEED_EREDIS ||
           rc == FEED_EPG || rc == FEED_ENOMEM || rc == FEED_EUNAVAILABLE;
}

static int before(feed_item a, feed_item b)   /* a strictly before b */
{
    return a.score > b.score || (a.score == b.score && a.id > b.id);
}

static void check_page(int rc, const feed_result *r, size_t limit, int first,
                       int64_t score, int64_t id)
{
    FUZZ_CHECK(known_code(rc));
    if (rc != FEED_OK) {
        FUZZ_CHECK(r->items == NULL && r->count == 0);
        return;
    }
    FUZZ_CHECK(r->count <= limit);
    FUZZ_CHECK(r->source == FEED_SOURCE_CACHE || r->source == FEED_SOURCE_REBUILD ||
               r->source == FEED_SOURCE_DB);
    FUZZ_CHECK(!r->has_more || (r->count == limit && r->next_score == r->items[r->count - 1].score &&
                               r->next_id == r->items[r->count - 1].id));
    for (size_t i = 0; i < r->count; i++) {
        FUZZ_CHECK(feed__score_ok(r->items[i].score) && r->items[i].id >= 0);
        if (i > 0)
            FUZZ_CHECK(before(r->items[i - 1], r->items[i]));
    }
    if (!first && r->count > 0)
        FUZZ_CHECK(before((feed_item){ score, id }, r->items[0]));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int sv[2];
    feed *f;
    unsigned ops;
    size_t limit;
    int64_t uid;

    if (size < 4 || !fuzz_counts_sane(data + 4, size - 4) || size > 60000)
        return 0;
    ops = (unsigned)data[0] | (unsigned)data[1] << 8;
    limit = 1 + (data[2] & 0x7f) % 20;
    fuzz_pg_down = (data[2] & 0x80) != 0;
    uid = data[3];
    feed__repair_forget();

    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
        return 0;
    /* Everything "Redis" will say, then end of stream. */
    for (size_t at = 4; at < size;) {
        ssize_t n = write(sv[1], data + at, size - at);
        if (n <= 0)
            break;
        at += (size_t)n;
    }
    shutdown(sv[1], SHUT_WR);
    f = fake_handle(sv[0]);
    if (!f) {
        close(sv[1]);
        return 0;
    }

    for (int k = 0; k < 4; k++) {
        feed_result res;
        int64_t uids[3] = { uid, uid + 1, -uid };
        int64_t cscore = (int64_t)data[3] * 3 - 50, cid = (int64_t)data[3] + 90;
        int rc;

        switch ((ops >> (3 * k)) & 7) {
        case 0:
            rc = feed_page(f, uid, FEED_FIRST, 0, limit, &res);
            check_page(rc, &res, limit, 1, 0, 0);
            feed_result_free(&res);
            break;
        case 7:     /* merged: first page or after the cursor, by the uid's low bit */
            if (uid & 1) {
                rc = feed_page_merged(f, uid, uids, 2, FEED_FIRST, 0, limit, &res);
                check_page(rc, &res, limit, 1, 0, 0);
            } else {
                rc = feed_page_merged(f, uid, uids, 2, cscore, cid, limit, &res);
                check_page(rc, &res, limit, 0, cscore, cid);
            }
            feed_result_free(&res);
            break;
        case 1:
            rc = feed_page(f, uid, cscore, cid, limit, &res);
            check_page(rc, &res, limit, 0, cscore, cid);
            feed_result_free(&res);
            break;
        case 2:
            rc = feed_on_insert(f, uid, 10, 105);
            FUZZ_CHECK(rc == FEED_OK || rc == FEED_EREDIS);
            break;
        case 3:
            rc = feed_on_delete(f, uid, 105);
            FUZZ_CHECK(rc == FEED_OK || rc == FEED_EREDIS);
            break;
        case 4:
            rc = feed_fanout(f, uids, 3, 10, 106);
            FUZZ_CHECK(rc == FEED_OK || rc == FEED_EREDIS);
            break;
        case 5:
            rc = feed_reload(f, uid);
            FUZZ_CHECK(known_code(rc) && rc != FEED_EINVAL);
            break;
        default:
            rc = feed_invalidate(f, uid);
            FUZZ_CHECK(rc == FEED_OK || rc == FEED_EREDIS);
            break;
        }
        FUZZ_CHECK(strlen(feed_errmsg(f)) < 512);
    }
    feed_close(f);
    close(sv[1]);
    return 0;
}
