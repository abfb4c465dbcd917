/* filter.c -- filtered pages: feed_page_filtered, feed_page_merged_filtered,
 * feed_page_newer_filtered and their async twins run this one machine.
 *
 * A filtered walk is the unfiltered walk with the hidden items left out.
 * So a filtered page is built from the unfiltered requests themselves, read
 * in chunks from where the page has got to, and every exactness argument of
 * those requests (plain reads, leases, rebuilds, merges, SQL past the copy)
 * carries over unchanged. In order (the states below):
 *
 *   CHUNK    the next chunk of the unfiltered walk after the position: a
 *            page request (page.c), a merged one (merged.c, with the hidden
 *            authors left out of its sources, so their copies are not even
 *            read) or a pull-to-refresh (newer.c), run inside this one: its
 *            wants go to the driver as they are. It asks for as many items as
 *            the page still needs, grown by the share of items this handle
 *            has seen hidden lately (so that most pages take one chunk);
 *   AUTHORS  when the filter needs the chunk's authors (hidden authors, or a
 *            predicate, on a feed with item_author_column), they come from
 *            the copy's author index "<key>:authors:<tag>": a sorted set of
 *            "<author>:<member>" (author empty when NULL) at the items'
 *            scores. A page request reads it in its own round trip: the
 *            index's entries from the cursor down ride along with the plain
 *            read (feed__page_ride), as many as the chunk asks for and a
 *            margin. What the rider did not cover (a merged or newer chunk,
 *            an index short of entries) is read here, by the chunk's score
 *            span (one round trip);
 *   LOOKUP   the authors the index did not know (an item a hook inserted,
 *            the index expired or evicted, a chunk from SQL): one statement
 *            on the primary, never the replica (a row the replica lacks
 *            would look deleted);
 *   LEARN    what the lookup found for items of the cached copy goes into
 *            the index (ZADD, trimmed to its newest FILTER_INDEX_CAP entries,
 *            PEXPIRE to the copy's TTL), best effort: an item's author never
 *            changes, so a stale entry (an item deleted since) is never a
 *            wrong page; many of them newer than live items crowd the live
 *            ones out of the trim, which then costs lookups again;
 *   SQL      once a page's chunk came from PostgreSQL (the walk is past the
 *            cached copy) and the filter needs authors, that chunk is
 *            dropped unexamined and the walk goes on with FEED_SQL_FILTER,
 *            which leaves the hidden authors' rows out inside PostgreSQL,
 *            returns the others with their authors and reads at most what
 *            is left of the page's budget.
 *
 * Each chunk is then examined in walk order (take): an item shown, or
 * hidden; the position moves to it either way. Once the page holds limit
 * items the walk goes on only to find one more visible item, which proves
 * has_more and is not taken: the position stays on the item before it, so
 * the next page re-reads no hidden item and skips no visible one. The page
 * stops after filter_max_scan items examined, with has_more = 1.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

enum { F_CHUNK, F_AUTHORS, F_LOOKUP, F_LEARN, F_SQL, F_DONE };

/* Most items one chunk asks for: a chunk is one read (a plain ZREVRANGE, a
 * merged read, one statement), not a page the caller sees, so max_page does
 * not bound it; this keeps one reply's size in check. */
#define FILTER_CHUNK_MAX 1000

/* An item's author when its row is gone from SQL: hidden (the filtered
 * query would not return it either). */
#define AUTHOR_GONE (INT64_MIN + 1)

/* Entries the author index keeps (its newest): the copy's and a margin for
 * entries of items deleted since, which only a trim or the TTL removes. */
#define FILTER_INDEX_CAP(c) ((c)->cfg.max_len + (c)->cfg.max_len / 4 + 16)

typedef struct filter_op {
    feed_op        op;
    int            kind;            /* FEED_FILTER_* */
    int64_t        uid;
    int64_t       *merge;           /* merged: the authors merged (hidden ones left out) */
    size_t         nmerge;
    int64_t       *hide;            /* sorted, distinct */
    size_t         nhide;
    feed_keep_fn  *keep;
    void          *keep_arg;
    int            by_author;       /* the filter needs feed items' authors */
    size_t         limit;
    size_t         budget;          /* filter_max_scan */
    feed_result   *out;

    /* Where the walk is: the last item examined (first: none yet). */
    int            first;
    int64_t        score, id;
    feed_item     *shown;           /* the page: nshown of limit */
    size_t         nshown, examined;
    int            has_more;
    feed_source    source;          /* the worst of the chunks' */

    /* The chunk under way. */
    feed_op       *inner;           /* its request */
    int            inner_self;      /* inner->free frees it (merged) */
    enum feed_want inner_want;
    feed_result    chunk;
    const int64_t *tags;            /* merged: the chunk's items' source authors */
    uint64_t       stats[3];        /* pages, cache_pages, db_pages before it */
    int            sql_mode;        /* past the copy, hidden authors: FEED_SQL_FILTER */
    feed_item     *walk;            /* the chunk's items in walk order */
    int64_t       *author;          /* theirs: INT64_MIN unknown, AUTHOR_GONE */
    unsigned char *need;            /* 1: the author is still to be found (LEARN:
                                       found, to be written to the index) */
    size_t         nwalk, cap;
    int            chunk_more;      /* the walk goes on past the chunk */
    int            chunk_cached;    /* the chunk came from the cached copy */
    int64_t        sql_scanned;     /* FEED_SQL_FILTER: rows it read, the last of them */
    feed_item      sql_last;
    feed_sqlpage   sp;

    /* AUTHORS, LOOKUP and LEARN. */
    char          *key;             /* the author index */
    feed_rider     rider;           /* its read in a page request's plain read */
    const char    *rargv[7];
    size_t         rlens[7];
    char           rnum[3][24];     /* max, min, count */
    feed_item     *seen;            /* index entries read: {author, id} */
    size_t         nseen, seen_cap;
    const char   **argv;
    size_t        *lens, argc;
    char          *text;
    const char    *expire[7];       /* LEARN: the trim and PEXPIRE */
    size_t         expire_lens[7];
    int64_t       *ids;             /* the ids looked up */
    size_t         nids;
} filter_op;

static enum feed_want filter_finish(filter_op *fo, int rc)
{
    fo->op.rc = rc;
    fo->op.state = F_DONE;
    return FEED_W_DONE;
}

static int by_value(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

    return (a > b) - (a < b);
}

static int filter_hidden_author(const filter_op *fo, int64_t a)
{
    return a == AUTHOR_GONE ||
           (fo->nhide > 0 && bsearch(&a, fo->hide, fo->nhide, sizeof a, by_value) != NULL);
}

/* filter_visible: is walk item i shown? */
static int filter_visible(const filter_op *fo, size_t i)
{
    const feed_item *it = &fo->walk[i];
    int64_t a = fo->author[i];

    if (filter_hidden_author(fo, a))
        return 0;
    return !fo->keep || fo->keep(fo->keep_arg, it->score, it->id,
                                 a == AUTHOR_GONE ? INT64_MIN : a) != 0;
}

/* ---- The estimate the handle keeps ----------------------------------------
 *
 * c->filter_kept_pm: the share of examined items recent filtered pages
 * showed, per mille, moved an eighth of the way to each page's own share.
 * Only a guess: a wrong one costs a chunk more or a few items read in vain,
 * never a wrong page. */
static size_t filter_chunk_size(const filter_op *fo)
{
    const feed_core *c = fo->op.c;
    size_t need = fo->nshown < fo->limit ? fo->limit - fo->nshown : 0;
    size_t kept = c->filter_kept_pm < 20 ? 20 : c->filter_kept_pm;
    size_t want = need + 1, n = (want * 1000 + kept - 1) / kept;
    size_t left = fo->budget - fo->examined;

    if (kept < 1000)
        n += n / 8 + 1;          /* a margin for chance: hidden items come in runs */
    if (n > FILTER_CHUNK_MAX)
        n = FILTER_CHUNK_MAX;
    if (n > left)
        n = left;
    return n ? n : 1;
}

static void filter_learn_share(filter_op *fo)
{
    feed_core *c = fo->op.c;
    uint32_t pm;

    if (fo->examined == 0)
        return;
    pm = (uint32_t)(fo->nshown * 1000 / fo->examined);
    c->filter_kept_pm = (c->filter_kept_pm * 7 + pm) / 8;
}

/* ---- The page ------------------------------------------------------------- */

static enum feed_want filter_answer(filter_op *fo)
{
    feed_core *c = fo->op.c;
    feed_result *out = fo->out;

    filter_learn_share(fo);
    if (fo->kind == FEED_FILTER_NEWER)      /* examined closest first; shown newest first */
        for (size_t i = 0; i < fo->nshown / 2; i++) {
            feed_item t = fo->shown[i];
            fo->shown[i] = fo->shown[fo->nshown - 1 - i];
            fo->shown[fo->nshown - 1 - i] = t;
        }
    out->items = fo->shown;
    fo->shown = NULL;
    feed__page_served(c, out, fo->nshown, fo->limit, fo->source);
    out->has_more = fo->has_more;       /* the walk's position, not the last shown */
    if (fo->has_more || fo->kind == FEED_FILTER_NEWER) {
        out->next_score = fo->score;
        out->next_id = fo->id;
    }
    return filter_finish(fo, FEED_OK);
}

static enum feed_want filter_next_chunk(filter_op *fo, int64_t now);

/* filter_take: examine the chunk's items in walk order; then the page is
 * done, or the next chunk is asked for. */
static enum feed_want filter_take(filter_op *fo, int64_t now)
{
    size_t i;

    for (i = 0; i < fo->nwalk; i++) {
        int vis;
        if (fo->examined >= fo->budget) {
            fo->has_more = 1;
            return filter_answer(fo);
        }
        vis = filter_visible(fo, i);
        if (vis && fo->nshown == fo->limit) {
            fo->has_more = 1;           /* proven; the item is the next page's first */
            return filter_answer(fo);
        }
        fo->examined++;
        fo->first = 0;
        fo->score = fo->walk[i].score;
        fo->id = fo->walk[i].id;
        if (vis)
            fo->shown[fo->nshown++] = fo->walk[i];
    }
    if (fo->sql_mode && fo->sql_scanned > 0) {
        /* Rows PostgreSQL read and hid count too, and the walk goes on
         * after the last row it read. */
        fo->examined += (size_t)fo->sql_scanned - fo->nwalk;
        fo->first = 0;
        fo->score = fo->sql_last.score;
        fo->id = fo->sql_last.id;
    }
    if (!fo->chunk_more)
        return filter_answer(fo);       /* the walk's end: has_more stays 0 */
    if (fo->examined >= fo->budget) {
        fo->has_more = 1;
        return filter_answer(fo);
    }
    return filter_next_chunk(fo, now);
}

/* ---- AUTHORS, LOOKUP, LEARN ------------------------------------------------- */

/* The reply of an author index read (the rider's, or AUTHORS'): its entries
 * into fo->seen. Entries that are not "<author>:<member>" are skipped: the
 * lookup finds those items' authors. */
static void filter_index_reply(void *arg, const redisReply *r)
{
    filter_op *fo = arg;

    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0)
        return;
    if (fo->nseen + r->elements > fo->seen_cap) {
        size_t cap = fo->nseen + r->elements;
        feed_item *s = realloc(fo->seen, cap * sizeof *s);
        if (!s)
            return;                     /* no memory: only a lookup more */
        fo->seen = s;
        fo->seen_cap = cap;
    }
    for (size_t k = 0; k < r->elements; k++) {
        const redisReply *e = r->element[k];
        const char *colon;
        feed_item it = { INT64_MIN, 0 };
        if (e->type != REDIS_REPLY_STRING || !(colon = memchr(e->str, ':', e->len)))
            continue;
        if (colon > e->str && (feed__parse_i64(e->str, (size_t)(colon - e->str), &it.score)
                               != FEED_OK || it.score == INT64_MIN || it.score == AUTHOR_GONE))
            continue;
        if (feed__member_decode(colon + 1, e->len - (size_t)(colon + 1 - e->str), &it.id)
            != FEED_OK)
            continue;
        fo->seen[fo->nseen++] = it;
    }
}

static int by_id(const void *x, const void *y)
{
    int64_t a = ((const feed_item *)x)->id, b = ((const feed_item *)y)->id;

    return (a > b) - (a < b);
}

/* The chunk's items the index entries read know get their authors (a NULL
 * one stays INT64_MIN, known); returns how many are still needed. */
static size_t filter_index_apply(filter_op *fo)
{
    size_t needed = 0;

    if (fo->nseen > 1)
        qsort(fo->seen, fo->nseen, sizeof *fo->seen, by_id);
    for (size_t w = 0; w < fo->nwalk; w++) {
        feed_item key = { 0, fo->walk[w].id }, *hit;
        if (!fo->need[w])
            continue;
        hit = fo->nseen ? bsearch(&key, fo->seen, fo->nseen, sizeof key, by_id) : NULL;
        if (hit) {
            fo->author[w] = hit->score;
            fo->need[w] = 0;
        } else {
            needed++;
        }
    }
    fo->nseen = 0;
    return needed;
}

/* The index read filter_index_read put in fo->rargv: the rider's command
 * in the page read's batch, and AUTHORS' only command. */
static int filter_index_build(void *arg, const char ***argv, const size_t **lens)
{
    filter_op *fo = arg;

    *argv = fo->rargv;
    *lens = fo->rlens;
    return 7;
}

/* ZREVRANGEBYSCORE key max min LIMIT 0 count in fo->rargv. */
static void filter_index_read(filter_op *fo, const char *max, const char *min, size_t count)
{
    const char *v[7] = { "ZREVRANGEBYSCORE", fo->key, max, min, "LIMIT", "0", fo->rnum[2] };

    feed__i64_to_str((int64_t)count, fo->rnum[2]);
    for (int i = 0; i < 7; i++) {
        fo->rargv[i] = v[i];
        fo->rlens[i] = strlen(v[i]);
    }
}

static int filter_batch_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    filter_op *fo = arg;

    if (fo->op.state == F_AUTHORS)
        return filter_index_build(arg, argv, lens);
    if (i == 1) {                       /* LEARN: the trim, then PEXPIRE */
        *argv = fo->expire;
        *lens = fo->expire_lens;
        return 4;
    }
    if (i == 2) {
        *argv = fo->expire + 4;
        *lens = fo->expire_lens + 4;
        return 3;
    }
    *argv = fo->argv;
    *lens = fo->lens;
    return (int)fo->argc;
}

static void filter_batch_reply(void *arg, size_t i, const redisReply *r)
{
    filter_op *fo = arg;

    (void)i;
    if (fo->op.state == F_AUTHORS)      /* LEARN's replies are not read: best effort */
        filter_index_reply(fo, r);
}

static enum feed_want filter_send(filter_op *fo, int state, size_t n)
{
    fo->op.state = state;
    fo->op.batch = (feed_batch){ .n = n, .flags = 0, .arg = fo,
                                 .slot = feed__key_slot(fo->key, strlen(fo->key)),
                                 .build = filter_batch_build, .reply = filter_batch_reply };
    return FEED_W_REDIS;
}

/* Room for the commands of nwalk items: ZADD key s "a:m" ... */
static int filter_room(filter_op *fo)
{
    size_t n = fo->nwalk;

    free(fo->argv);
    free(fo->lens);
    free(fo->text);
    free(fo->ids);
    fo->argv = malloc((2 + 2 * n) * sizeof *fo->argv);
    fo->lens = malloc((2 + 2 * n) * sizeof *fo->lens);
    fo->text = malloc(n * (FEED_MEMBER_MAX + 43) + 1);
    fo->ids = malloc((n + 1) * sizeof *fo->ids);
    if (!fo->argv || !fo->lens || !fo->text || !fo->ids)
        return feed__msg(fo->op.err, FEED_ENOMEM, "out of memory for %zu authors", n);
    return FEED_OK;
}

/* AUTHORS: the index over the score span of the items still needed. */
static enum feed_want filter_ask_authors(filter_op *fo)
{
    int64_t hi = INT64_MIN, lo = INT64_MAX;

    for (size_t w = 0; w < fo->nwalk; w++) {
        if (!fo->need[w])
            continue;
        hi = fo->walk[w].score > hi ? fo->walk[w].score : hi;
        lo = fo->walk[w].score < lo ? fo->walk[w].score : lo;
    }
    feed__i64_to_str(hi, fo->rnum[0]);
    feed__i64_to_str(lo, fo->rnum[1]);
    filter_index_read(fo, fo->rnum[0], fo->rnum[1], FILTER_INDEX_CAP(fo->op.c));
    return filter_send(fo, F_AUTHORS, 1);
}

static enum feed_want filter_ask_lookup(filter_op *fo)
{
    feed_sql *q = &fo->op.sql;

    if (filter_room(fo) != FEED_OK)
        return filter_finish(fo, FEED_ENOMEM);
    fo->nids = 0;
    for (size_t w = 0; w < fo->nwalk; w++)
        if (fo->need[w])
            fo->ids[fo->nids++] = fo->walk[w].id;
    feed__sql_ask(&fo->op, FEED_SQL_AUTHORS, FEED_PG_PRIMARY, fo->uid,
                  (int64_t[]){ fo->uid, 0, 0, 0 }, 4);
    q->authors = fo->ids;
    q->nauthors = fo->nids;
    fo->op.state = F_LOOKUP;
    return FEED_W_SQL;
}

/* ZADD key score "<author>:<member>" ... for the authors just found
 * (need[w] set by filter_looked_up), the index trimmed to its newest FILTER_INDEX_CAP entries,
 * with the copy's TTL. Only those of items of the cached copy: items past it
 * (a chunk from SQL) would only make the index larger than the copy. A NULL
 * author is kept too, as the empty string: else an item whose author is
 * NULL would be looked up in PostgreSQL on every page that examines it. */
static enum feed_want filter_ask_learn(filter_op *fo)
{
    feed_core *c = fo->op.c;
    const char *tail[7] = { "ZREMRANGEBYRANK", fo->key, "0", fo->rnum[2],
                            "PEXPIRE", fo->key, c->ttl_ms };
    size_t a = 0;
    char *t = fo->text;

    fo->argv[a] = "ZADD";
    fo->lens[a++] = 4;
    fo->argv[a] = fo->key;
    fo->lens[a++] = strlen(fo->key);
    for (size_t w = 0; w < fo->nwalk; w++) {
        size_t n = 0;
        if (!fo->need[w])
            continue;
        fo->lens[a] = feed__i64_to_str(fo->walk[w].score, t);
        fo->argv[a++] = t;
        t += 21;
        if (fo->author[w] != INT64_MIN)
            n = feed__i64_to_str(fo->author[w], t);
        t[n++] = ':';
        n += feed__member_encode(fo->walk[w].id, t + n);
        fo->lens[a] = n;
        fo->argv[a++] = t;
        t += n + 1;
    }
    fo->argc = a;
    feed__i64_to_str(-(int64_t)FILTER_INDEX_CAP(c) - 1, fo->rnum[2]);
    for (int i = 0; i < 7; i++) {
        fo->expire[i] = tail[i];
        fo->expire_lens[i] = strlen(tail[i]);
    }
    return filter_send(fo, F_LEARN, strcmp(c->ttl_ms, "0") != 0 ? 3 : 2);
}

/* A statement's rows and their authors freed (the author lookup's, or
 * FEED_SQL_FILTER's). */
static void filter_sql_drop(feed_sql *q)
{
    free(q->row_authors);
    q->row_authors = NULL;
    feed__rows_free(&q->rows);
}

/* The lookup answered: each item asked for gets its author, or is gone. */
static enum feed_want filter_looked_up(filter_op *fo, int64_t now)
{
    feed_sql *q = &fo->op.sql;
    int64_t *found_author = q->row_authors;
    size_t nlearnt = 0;

    if (fo->op.sql_rc != FEED_OK) {
        filter_sql_drop(q);
        return filter_finish(fo, fo->op.sql_rc);
    }
    /* Sort the (0, id) rows by id, carrying their authors in the score. */
    for (size_t r = 0; r < q->rows.count; r++)
        q->rows.items[r].score = found_author[r];
    qsort(q->rows.items, q->rows.count, sizeof *q->rows.items, by_id);
    for (size_t w = 0; w < fo->nwalk; w++) {
        feed_item key = { 0, fo->walk[w].id }, *hit;
        if (!fo->need[w])
            continue;
        hit = bsearch(&key, q->rows.items, q->rows.count, sizeof key, by_id);
        fo->author[w] = hit ? hit->score : AUTHOR_GONE;
        /* need[w] now says the author was learnt: NULL ones too */
        fo->need[w] = hit && hit->score != AUTHOR_GONE && fo->chunk_cached;
        nlearnt += fo->need[w];
    }
    filter_sql_drop(q);
    if (nlearnt > 0)
        return filter_ask_learn(fo);
    return filter_take(fo, now);
}

/* ---- CHUNK and SQL ---------------------------------------------------------- */

/* The chunk is in fo->walk: find the authors it needs, then take it. */
static enum feed_want filter_chunk_ready(filter_op *fo, int64_t now)
{
    size_t needed = 0;

    for (size_t w = 0; w < fo->nwalk; w++) {
        fo->need[w] = fo->by_author && fo->author[w] == INT64_MIN &&
                      !(fo->kind == FEED_FILTER_MERGED && fo->tags &&
                        fo->tags[w] != INT64_MIN);
        needed += fo->need[w];
    }
    if (needed > 0 && fo->nseen > 0)    /* the rider's entries */
        needed = filter_index_apply(fo);
    fo->nseen = 0;
    if (needed == 0)
        return filter_take(fo, now);
    return filter_ask_authors(fo);
}

/* Room for a chunk of n items in walk order. */
static int filter_walk_room(filter_op *fo, size_t n)
{
    if (n <= fo->cap)
        return FEED_OK;
    free(fo->walk);
    free(fo->author);
    free(fo->need);
    fo->walk = malloc(n * sizeof *fo->walk);
    fo->author = malloc(n * sizeof *fo->author);
    fo->need = malloc(n);
    fo->cap = n;
    if (!fo->walk || !fo->author || !fo->need) {
        fo->cap = 0;
        return feed__msg(fo->op.err, FEED_ENOMEM, "out of memory for %zu items", n);
    }
    return FEED_OK;
}

/* The worse of two sources: DB over REBUILD over CACHE (0: none yet). */
static feed_source filter_worse(feed_source a, feed_source b)
{
    if (a == FEED_SOURCE_DB || b == FEED_SOURCE_DB)
        return FEED_SOURCE_DB;
    if (a == FEED_SOURCE_REBUILD || b == FEED_SOURCE_REBUILD)
        return FEED_SOURCE_REBUILD;
    return FEED_SOURCE_CACHE;
}

/* The inner request is done: its page becomes the chunk. */
static enum feed_want filter_chunk_done(filter_op *fo, int64_t now)
{
    feed_core *c = fo->op.c;
    int rc = fo->inner->rc;
    size_t n = fo->chunk.count;

    c->stats.pages = fo->stats[0];      /* the chunks are not pages: this call is one */
    c->stats.cache_pages = fo->stats[1];
    c->stats.db_pages = fo->stats[2];
    if (rc == FEED_OK && (rc = filter_walk_room(fo, n + 1)) == FEED_OK) {
        for (size_t i = 0; i < n; i++) {
            size_t at = fo->kind == FEED_FILTER_NEWER ? n - 1 - i : i;
            fo->walk[i] = fo->chunk.items[at];
            fo->author[i] = fo->kind == FEED_FILTER_MERGED && fo->tags ? fo->tags[at]
                                                                        : INT64_MIN;
        }
        fo->nwalk = n;
        fo->chunk_more = fo->chunk.has_more;
        fo->chunk_cached = fo->chunk.source != FEED_SOURCE_DB;
        fo->source = filter_worse(fo->source, fo->chunk.source);
        fo->sql_mode = fo->chunk.source == FEED_SOURCE_DB && fo->kind == FEED_FILTER_PAGE &&
                       fo->by_author;
        /* Past the copy: its items would each need their author looked up;
         * the filtered statement reads the same rows again with their
         * authors, the hidden ones left out (one statement for two, and the
         * lookup of many ids is the one PostgreSQL may scan the table for). */
        if (fo->sql_mode && n > 0) {
            fo->nwalk = 0;
            fo->chunk_more = 1;
        }
    }
    feed_result_free(&fo->chunk);
    fo->inner->free(fo->inner);
    if (!fo->inner_self)
        free(fo->inner);
    fo->inner = NULL;
    fo->tags = NULL;
    if (rc != FEED_OK)
        return filter_finish(fo, rc);
    return filter_chunk_ready(fo, now);
}

/* Run the inner request one step, its wants passed on as they are. */
static enum feed_want filter_inner_step(filter_op *fo, int64_t now)
{
    feed_op *in = fo->inner;
    enum feed_want w = in->step(in, now);

    fo->inner_want = w;
    switch (w) {
    case FEED_W_REDIS:
        fo->op.batch = in->batch;
        return w;
    case FEED_W_SQL:
        fo->op.sql = in->sql;
        return w;
    case FEED_W_WAKE:
        fo->op.wake_at = in->wake_at;
        fo->op.lease_of = in->lease_of;
        return w;
    default:
        return filter_chunk_done(fo, now);
    }
}

/* FEED_SQL_FILTER: the rows after the position that are not hidden, from
 * at most what is left of the budget. */
static enum feed_want filter_ask_sql(filter_op *fo, int64_t now)
{
    size_t n = filter_chunk_size(fo);
    int64_t params[4] = { fo->uid, fo->first ? INT64_MAX : fo->score,   /* first: above all */
                          fo->first ? INT64_MAX : fo->id, (int64_t)n };
    int rc;

    fo->op.state = F_SQL;
    feed__sqlpage_begin(&fo->sp, FEED_SQL_FILTER, fo->uid, params, 4);
    fo->op.sql.authors = fo->hide;
    fo->op.sql.nauthors = fo->nhide;
    if (feed__sqlpage_step(&fo->sp, &fo->op, now, &rc) == FEED_W_DONE)
        return filter_finish(fo, rc);
    return FEED_W_SQL;
}

static enum feed_want filter_sql_answered(filter_op *fo, int64_t now)
{
    feed_sql *q = &fo->op.sql;
    int rc;

    if (feed__sqlpage_step(&fo->sp, &fo->op, now, &rc) != FEED_W_DONE) {
        q->authors = fo->hide;          /* a probe or the primary after the replica */
        q->nauthors = fo->nhide;
        return FEED_W_SQL;
    }
    if (rc != FEED_OK) {
        filter_sql_drop(q);
        return filter_finish(fo, feed__db_outcome(fo->op.c, fo->op.err, rc, 0, ""));
    }
    if ((rc = filter_walk_room(fo, q->rows.count + 1)) != FEED_OK) {
        filter_sql_drop(q);
        return filter_finish(fo, rc);
    }
    for (size_t i = 0; i < q->rows.count; i++) {
        fo->walk[i] = q->rows.items[i];
        fo->author[i] = q->row_authors[i];
    }
    fo->nwalk = q->rows.count;
    fo->chunk_cached = 0;
    fo->sql_scanned = q->scanned;
    fo->sql_last = q->last;
    fo->chunk_more = q->scanned > 0 && (size_t)q->scanned >= (size_t)q->params[3];
    filter_sql_drop(q);
    fo->source = FEED_SOURCE_DB;
    return filter_take(fo, now);
}

/* Make and start the next chunk's request. */
static enum feed_want filter_next_chunk(filter_op *fo, int64_t now)
{
    feed_core *c = fo->op.c;
    size_t n = filter_chunk_size(fo);
    int64_t last = fo->first ? FEED_FIRST : fo->score;
    int rc = FEED_OK;

    fo->sql_scanned = 0;
    if (fo->sql_mode)
        return filter_ask_sql(fo, now);
    fo->op.state = F_CHUNK;
    fo->inner_self = 0;
    memset(&fo->chunk, 0, sizeof fo->chunk);
    if (fo->kind == FEED_FILTER_MERGED && fo->nmerge > 0) {
        fo->inner = feed__merged_op(c, fo->op.err, fo->uid, fo->merge, fo->nmerge, last,
                                    fo->id, n, &fo->chunk, &rc);
        fo->inner_self = 1;
        if (fo->inner && (rc = feed__merged_want_tags(fo->inner, &fo->tags)) != FEED_OK) {
            fo->inner->free(fo->inner);
            fo->inner = NULL;
            rc = feed__msg(fo->op.err, FEED_ENOMEM, "out of memory for a merged page");
        }
    } else if (fo->kind == FEED_FILTER_NEWER) {
        if (!(fo->inner = malloc(feed__newer_op_size())))
            rc = feed__msg(fo->op.err, FEED_ENOMEM, "out of memory for a page");
        else if ((rc = feed__newer_init((feed_newer_op *)fo->inner, c, fo->op.err, fo->uid,
                                        fo->score, fo->id, n, &fo->chunk)) != FEED_OK) {
            free(fo->inner);
            fo->inner = NULL;
        }
    } else {
        if (!(fo->inner = malloc(feed__page_op_size())))
            rc = feed__msg(fo->op.err, FEED_ENOMEM, "out of memory for a page");
        else if ((rc = feed__page_init((feed_page_op *)fo->inner, c, fo->op.err, fo->uid,
                                       last, fo->id, -1, n, &fo->chunk)) != FEED_OK) {
            free(fo->inner);
            fo->inner = NULL;
        } else if (fo->by_author) {
            /* The index's entries from the position down: the chunk's, the
             * cursor's own, and a small margin for entries of items deleted
             * since (each entry read costs Redis about what a page item
             * does). */
            if (!fo->first)
                feed__i64_to_str(fo->score, fo->rnum[0]);
            filter_index_read(fo, fo->first ? "+inf" : fo->rnum[0], "-inf", n + n / 16 + 2);
            fo->rider = (feed_rider){ fo, filter_index_build, filter_index_reply };
            feed__page_ride((feed_page_op *)fo->inner, &fo->rider);
        }
    }
    if (!fo->inner)
        return filter_finish(fo, rc);
    fo->stats[0] = c->stats.pages;
    fo->stats[1] = c->stats.cache_pages;
    fo->stats[2] = c->stats.db_pages;
    return filter_inner_step(fo, now);
}

/* ---- Steps ------------------------------------------------------------------ */

static enum feed_want filter_step(feed_op *op, int64_t now)
{
    filter_op *fo = (filter_op *)op;

    switch (op->state) {
    case F_CHUNK:
        if (!fo->inner)
            return filter_next_chunk(fo, now);
        /* The answer to what the inner request asked goes back to it. */
        if (fo->inner_want == FEED_W_REDIS)
            fo->inner->redis_rc = op->redis_rc;
        else if (fo->inner_want == FEED_W_SQL) {
            fo->inner->sql = op->sql;
            fo->inner->sql_rc = op->sql_rc;
            op->sql.rows = (feed_rows){ NULL, 0 };
        }
        return filter_inner_step(fo, now);
    case F_AUTHORS:
        if (op->redis_rc != FEED_OK)        /* the index cannot say: SQL will */
            op->err[0] = '\0';
        if (filter_index_apply(fo) > 0)
            return filter_ask_lookup(fo);
        return filter_take(fo, now);
    case F_LOOKUP:
        return filter_looked_up(fo, now);
    case F_LEARN:
        op->err[0] = '\0';                  /* best effort */
        return filter_take(fo, now);
    case F_SQL:
        return filter_sql_answered(fo, now);
    default:
        return FEED_W_DONE;
    }
}

static void filter_free(feed_op *op)
{
    filter_op *fo = (filter_op *)op;

    if (fo->inner) {
        fo->inner->free(fo->inner);
        if (!fo->inner_self)
            free(fo->inner);
    }
    feed_result_free(&fo->chunk);
    feed__sqlpage_end(&fo->sp);
    filter_sql_drop(&op->sql);
    free(fo->merge);
    free(fo->hide);
    free(fo->shown);
    free(fo->walk);
    free(fo->author);
    free(fo->need);
    free(fo->key);
    free(fo->argv);
    free(fo->lens);
    free(fo->text);
    free(fo->ids);
    free(fo->seen);
    free(fo);
}

/* ---- Making the request ------------------------------------------------------ */

int feed__filter_check(const feed_core *c, char *err, const char *fn, int kind,
                       const feed_filter *filter)
{
    if (!filter)
        return FEED_OK;
    if (!filter->hide_authors && filter->n_hide_authors > 0)
        return feed__msg(err, FEED_EINVAL, "%s: hide_authors is NULL, n_hide_authors %zu", fn,
                         filter->n_hide_authors);
    if (!filter->keep && filter->keep_arg)
        return feed__msg(err, FEED_EINVAL, "%s: keep_arg is set but keep is NULL", fn);
    if (filter->n_hide_authors > FEED_FILTER_MAX_AUTHORS)
        return feed__msg(err, FEED_EINVAL, "%s: %zu authors to hide, at most %d", fn,
                         filter->n_hide_authors, FEED_FILTER_MAX_AUTHORS);
    if (filter->n_hide_authors > 0 && !c->cfg.item_author_column && kind != FEED_FILTER_MERGED)
        return feed__msg(err, FEED_EINVAL, "%s: hiding authors needs item_author_column, which"
                         " is not configured", fn);
    return FEED_OK;
}

int feed__filter_empty(const feed_filter *filter)
{
    return !filter || (filter->n_hide_authors == 0 && !filter->keep);
}

/* Sort and dedupe v[0 .. n) in place; returns the count left. */
static size_t filter_distinct(int64_t *v, size_t n)
{
    size_t u = 0;

    qsort(v, n, sizeof *v, by_value);
    for (size_t i = 0; i < n; i++)
        if (u == 0 || v[u - 1] != v[i])
            v[u++] = v[i];
    return u;
}

feed_op *feed__filter_op(feed_core *c, char *err, int kind, int64_t uid,
                         const int64_t *authors, size_t n, int64_t last_score, int64_t last_id,
                         size_t limit, const feed_filter *filter, feed_result *out, int *rc)
{
    filter_op *fo = calloc(1, sizeof *fo);
    size_t nh = filter->n_hide_authors;

    if (!fo) {
        *rc = feed__msg(err, FEED_ENOMEM, "out of memory for a filtered page");
        return NULL;
    }
    fo->op.c = c;
    fo->op.reads = 1;
    fo->op.err = err;
    fo->op.step = filter_step;
    fo->op.free = filter_free;
    fo->op.state = F_CHUNK;
    fo->kind = kind;
    fo->uid = uid;
    fo->keep = filter->keep;
    fo->keep_arg = filter->keep_arg;
    fo->limit = limit;
    fo->budget = c->cfg.filter_max_scan;
    fo->out = out;
    fo->first = kind != FEED_FILTER_NEWER && last_score == FEED_FIRST;
    fo->score = fo->first ? 0 : last_score;
    fo->id = fo->first ? 0 : last_id;
    fo->hide = malloc((nh + 1) * sizeof *fo->hide);
    fo->merge = malloc((n + 1) * sizeof *fo->merge);
    fo->shown = malloc((limit + 1) * sizeof *fo->shown);
    fo->key = malloc(c->key_cap + sizeof c->index_suffix);
    if (!fo->hide || !fo->merge || !fo->shown || !fo->key) {
        filter_free(&fo->op);
        *rc = feed__msg(err, FEED_ENOMEM, "out of memory for a filtered page");
        return NULL;
    }
    if (nh)
        memcpy(fo->hide, filter->hide_authors, nh * sizeof *fo->hide);
    fo->nhide = filter_distinct(fo->hide, nh);
    for (size_t i = 0; i < n; i++)          /* hidden authors are no source */
        if (!filter_hidden_author(fo, authors[i]))
            fo->merge[fo->nmerge++] = authors[i];
    fo->by_author = c->cfg.item_author_column && (fo->nhide > 0 || fo->keep);
    fo->key[0] = '\0';
    if (c->cfg.item_author_column) {
        feed__family_keys(c->key_base[FEED_FAM_FEED], uid, fo->key, NULL);
        strcat(fo->key, c->index_suffix);
    }
    *rc = FEED_OK;
    return &fo->op;
}
