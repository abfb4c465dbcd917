/* t_sync_decode.c -- the pgoutput decoder and the batch logic of
 * feedcache-sync on constructed messages (protocol version 1, as PostgreSQL
 * sends them): every field read back, every truncation and random bytes
 * refused without a crash, and the feeds a batch names. No servers. */
#include <stdlib.h>
#include <string.h>

#include "../sync/apply.h"
#include "../sync/pgoutput.h"
#include "tap.h"
#include "testutil.h"

typedef struct buf { uint8_t b[4096]; size_t n; } buf;

static void u8(buf *w, uint8_t v) { w->b[w->n++] = v; }
static void be(buf *w, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--)
        u8(w, (uint8_t)(v >> (8 * i)));
}
static void str(buf *w, const char *s) { memcpy(w->b + w->n, s, strlen(s) + 1); w->n += strlen(s) + 1; }
static void text(buf *w, const char *s) { u8(w, 't'); be(w, strlen(s), 4); memcpy(w->b + w->n, s, strlen(s)); w->n += strlen(s); }

static void tuple3(buf *w, const char *uid, const char *score, const char *id)
{
    be(w, 3, 2);
    if (uid) text(w, uid); else u8(w, 'n');
    if (score) text(w, score); else u8(w, 'n');
    text(w, id);
}

static buf begin_msg(uint32_t xid)
{
    buf w = { .n = 0 };
    u8(&w, 'B'); be(&w, 0x1000, 8); be(&w, 777, 8); be(&w, xid, 4);
    return w;
}

static buf commit_msg(uint64_t end)
{
    buf w = { .n = 0 };
    u8(&w, 'C'); u8(&w, 0); be(&w, end - 0x10, 8); be(&w, end, 8); be(&w, 778, 8);
    return w;
}

static buf relation_msg(uint32_t relid, const char *name, char ident, int uid_in_key)
{
    buf w = { .n = 0 };
    u8(&w, 'R'); be(&w, relid, 4); str(&w, "public"); str(&w, name); u8(&w, (uint8_t)ident);
    be(&w, 3, 2);
    u8(&w, uid_in_key ? 1 : 0); str(&w, "uid"); be(&w, 20, 4); be(&w, 0xffffffff, 4);
    u8(&w, 0); str(&w, "score"); be(&w, 20, 4); be(&w, 0xffffffff, 4);
    u8(&w, 1); str(&w, "id"); be(&w, 20, 4); be(&w, 0xffffffff, 4);
    return w;
}

static buf insert_msg(uint32_t relid, const char *uid)
{
    buf w = { .n = 0 };
    u8(&w, 'I'); be(&w, relid, 4); u8(&w, 'N'); tuple3(&w, uid, "5", "9");
    return w;
}

static buf update_msg(uint32_t relid, const char *old_uid, const char *uid)
{
    buf w = { .n = 0 };
    u8(&w, 'U'); be(&w, relid, 4);
    if (old_uid) {   /* key changed: the old key, other columns NULL */
        u8(&w, 'K');
        be(&w, 3, 2); text(&w, old_uid); u8(&w, 'n'); text(&w, "9");
    }
    u8(&w, 'N'); tuple3(&w, uid, "6", "9");
    return w;
}

static buf delete_msg(uint32_t relid, const char *uid)
{
    buf w = { .n = 0 };
    u8(&w, 'D'); be(&w, relid, 4); u8(&w, 'K');
    be(&w, 3, 2); text(&w, uid); u8(&w, 'n'); text(&w, "9");
    return w;
}

static buf truncate_msg(uint32_t a, uint32_t b)
{
    buf w = { .n = 0 };
    u8(&w, 'T'); be(&w, 2, 4); u8(&w, 0); be(&w, a, 4); be(&w, b, 4);
    return w;
}

static pgo_msg *m;

static int feed_in(sync_apply *a, buf w)
{
    return pgo_msg_decode(w.b, w.n, m) == 0 ? sa_message(a, m) : -2;
}

static void decode_fields(void)
{
    buf w = begin_msg(4242);
    ok(pgo_msg_decode(w.b, w.n, m) == 0 && m->kind == 'B' && m->xid == 4242 &&
       m->lsn == 0x1000 && m->commit_ts == 777, "Begin: final lsn, time, xid");
    w = commit_msg(0x2000);
    ok(pgo_msg_decode(w.b, w.n, m) == 0 && m->kind == 'C' && m->end_lsn == 0x2000 &&
       m->lsn == 0x1ff0 && m->commit_ts == 778, "Commit: commit lsn, end lsn, time");
    w = relation_msg(16384, "feed_entry", 'd', 1);
    ok(pgo_msg_decode(w.b, w.n, m) == 0 && m->relid == 16384 &&
       strcmp(m->nspname, "public") == 0 && strcmp(m->relname, "feed_entry") == 0 &&
       m->replident == 'd' && m->ncols == 3 && strcmp(m->cols[2].name, "id") == 0 &&
       m->cols[0].flags == 1 && m->cols[1].type_oid == 20, "Relation: names, identity, columns");
    w = update_msg(16384, "7", "8");
    ok(pgo_msg_decode(w.b, w.n, m) == 0 && m->old_kind == 'K' && m->old_tuple.ncols == 3 &&
       m->old_tuple.cols[1].kind == 'n' && m->new_tuple.cols[0].len == 1 &&
       m->new_tuple.cols[0].data[0] == '8', "Update with the old key");
    w = update_msg(16384, NULL, "8");
    ok(pgo_msg_decode(w.b, w.n, m) == 0 && m->old_kind == 0, "Update without an old tuple");
    w = truncate_msg(1, 16384);
    ok(pgo_msg_decode(w.b, w.n, m) == 0 && m->nrels == 2 && pgo_truncate_relid(m, 1) == 16384,
       "Truncate: relation ids");

    uint8_t k[18] = { 'k' };
    pgo_frame fr;
    k[8] = 0x42; k[17] = 1;
    ok(pgo_frame_decode(k, sizeof k, &fr) == 0 && fr.kind == 'k' && fr.wal_end == 0x42 &&
       fr.reply_requested == 1, "keepalive frame");
    ok(pgo_frame_decode(k, sizeof k - 1, &fr) != 0, "a short keepalive is refused");
    uint8_t st[PGO_STATUS_LEN];
    pgo_status_encode(st, 1, 2, 3, 4, 0);
    ok(st[0] == 'r' && st[8] == 1 && st[16] == 2 && st[24] == 3 && st[32] == 4 && st[33] == 0,
       "status update: write, flush, apply, time");
}

static void hostile(void)
{
    buf all[] = { begin_msg(1), commit_msg(0x10), relation_msg(1, "feed_entry", 'd', 1),
                  insert_msg(1, "5"), update_msg(1, "5", "6"), delete_msg(1, "5"),
                  truncate_msg(1, 2) };
    int refused = 1, survived = 1;
    uint64_t seed = 11;

    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        for (size_t n = 0; n < all[i].n; n++)
            refused &= pgo_msg_decode(all[i].b, n, m) != 0;
    ok(refused, "every truncation of every message is refused");
    for (int i = 0; i < 200000; i++) {
        uint8_t junk[64];
        size_t n = tu_rand(&seed) % sizeof junk;
        for (size_t j = 0; j < n; j++)
            junk[j] = (uint8_t)tu_rand(&seed);
        if (n > 0)
            junk[0] = (uint8_t)"BCORYIUDTMkw"[tu_rand(&seed) % 12];
        pgo_frame fr;
        pgo_frame_decode(junk, n, &fr);
        pgo_msg_decode(junk, n, m);
    }
    ok(survived, "200,000 random messages decoded or refused without a crash");

    pgo_value v = { 't', "9223372036854775808", 19 };
    int64_t x;
    ok(pgo_value_i64(&v, &x) != 0, "an owner above INT64_MAX is refused");
    v.data = "-9223372036854775808"; v.len = 20;
    ok(pgo_value_i64(&v, &x) == 0 && x == INT64_MIN, "INT64_MIN is read exactly");
    v.data = "12a"; v.len = 3;
    ok(pgo_value_i64(&v, &x) != 0, "a non-number is refused");
}

static void batches(void)
{
    sync_apply a;
    size_t n;

    sa_init(&a, "public", "feed_entry", "uid");
    ok(feed_in(&a, relation_msg(1, "feed_entry", 'd', 1)) == 0 &&
       feed_in(&a, relation_msg(2, "other", 'd', 1)) == 0, "relations described");
    ok(feed_in(&a, begin_msg(100)) == 0 && feed_in(&a, insert_msg(1, "5")) == 0 &&
       feed_in(&a, insert_msg(2, "77")) == 0 && feed_in(&a, update_msg(1, "6", "7")) == 0 &&
       feed_in(&a, delete_msg(1, "8")) == 0 && feed_in(&a, update_msg(1, NULL, "5")) == 0,
       "a transaction of every kind of change");
    ok(!sa_pending(&a), "nothing to apply before its Commit");
    ok(feed_in(&a, commit_msg(0x500)) == 0 && sa_pending(&a), "committed: a batch waits");
    sa_unique(&a, &n);
    ok(n == 4 && a.batch.uids[0] == 5 && a.batch.uids[1] == 6 && a.batch.uids[2] == 7 &&
       a.batch.uids[3] == 8, "feeds 5, 6 (owner left), 7 (owner came), 8; not the other table's");
    ok(a.batch.nxids == 1 && a.batch.xids[0] == 100 && a.batch.end_lsn == 0x500,
       "the batch waits for xid 100 and confirms up to its commit's end");
    sa_done(&a);
    ok(feed_in(&a, begin_msg(101)) == 0 && feed_in(&a, truncate_msg(2, 1)) == 0 &&
       feed_in(&a, commit_msg(0x600)) == 0 && a.batch.truncate, "TRUNCATE of the table: drop all");
    sa_done(&a);
    ok(feed_in(&a, begin_msg(102)) == 0 && feed_in(&a, insert_msg(2, "1")) == 0 &&
       feed_in(&a, commit_msg(0x700)) == 0 && a.batch.nuids == 0 && a.batch.nxids == 0 &&
       sa_pending(&a), "another table's transaction: only a position to confirm");
    sa_done(&a);
    ok(feed_in(&a, relation_msg(1, "feed_entry", 'd', 0)) == -1 &&
       strstr(a.err, "REPLICA IDENTITY FULL") != NULL,
       "owner outside the replica identity: refused, and the message says what to do");
    ok(feed_in(&a, relation_msg(1, "feed_entry", 'f', 0)) == 0, "... unless the identity is FULL");
    ok(feed_in(&a, insert_msg(9, "1")) == -1, "a change to an undescribed relation is an error");
    sa_free(&a);
}

/* The authors' table of read-time merge: its changes name authors, kept
 * apart from the feeds; a TRUNCATE of it drops the authors' copies only. */
static void author_batches(void)
{
    sync_apply a;
    size_t n, na;

    sa_init(&a, "public", "feed_entry", "uid");
    sa_authors(&a, "public", "author_post", "uid");
    ok(feed_in(&a, relation_msg(1, "feed_entry", 'd', 1)) == 0 &&
       feed_in(&a, relation_msg(3, "author_post", 'd', 1)) == 0, "authors: relations described");
    ok(feed_in(&a, begin_msg(200)) == 0 && feed_in(&a, insert_msg(1, "5")) == 0 &&
       feed_in(&a, insert_msg(3, "40")) == 0 && feed_in(&a, update_msg(3, "41", "42")) == 0 &&
       feed_in(&a, delete_msg(3, "43")) == 0 && feed_in(&a, insert_msg(3, "40")) == 0 &&
       feed_in(&a, commit_msg(0x800)) == 0, "a transaction on both tables");
    sa_unique(&a, &n);
    sa_unique_authors(&a, &na);
    ok(n == 1 && a.batch.uids[0] == 5, "  the feed table's change names feed 5 only");
    ok(na == 4 && a.batch.authors[0] == 40 && a.batch.authors[1] == 41 &&
       a.batch.authors[2] == 42 && a.batch.authors[3] == 43,
       "  the authors' table's name authors 40, 41 (left), 42 (came), 43, once each");
    sa_done(&a);
    ok(feed_in(&a, begin_msg(201)) == 0 && feed_in(&a, truncate_msg(3, 7)) == 0 &&
       feed_in(&a, commit_msg(0x900)) == 0 && a.batch.truncate_authors && !a.batch.truncate,
       "TRUNCATE of the authors' table: drop the authors' copies, not the feeds'");
    sa_done(&a);
    ok(feed_in(&a, relation_msg(3, "author_post", 'd', 0)) == -1 &&
       strstr(a.err, "author_post") != NULL && strstr(a.err, "REPLICA IDENTITY FULL") != NULL,
       "authors' owner outside the replica identity: refused, naming the table");
    sa_free(&a);

    sa_init(&a, "public", "feed_entry", "uid");
    ok(feed_in(&a, relation_msg(3, "author_post", 'd', 1)) == 0 &&
       feed_in(&a, begin_msg(202)) == 0 && feed_in(&a, insert_msg(3, "40")) == 0 &&
       feed_in(&a, commit_msg(0xa00)) == 0 && a.batch.nauthors == 0 && a.batch.nuids == 0,
       "without an authors' table configured, author_post is just another table");
    sa_free(&a);
}

int main(void)
{
    m = malloc(sizeof *m);
    if (!m)
        tap_bail("out of memory");
    decode_fields();
    hostile();
    batches();
    author_batches();
    free(m);
    return tap_done();
}
