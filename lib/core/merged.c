/* merged.c -- read-time merge: a merged page request (feed_page_merged and
 * feed_async_page_merged run this one machine).
 *
 * A merged page reads n + 1 sources: the reader's feed (FEED_FAM_FEED) and
 * n authors' posts (FEED_FAM_AUTHOR), each a cached copy that is an exact
 * prefix of its rows. merge.c says what each answer proves and cuts the
 * page; this request asks, in as few round trips as that allows:
 *
 *   READ     one plain read per source, all in one batch (one pipeline per
 *            Redis node, the nodes at once), with a PTTL on first pages
 *            where a TTL may need a refresh. The reader's feed is asked for
 *            limit + 1 items, as a plain page is; an author for as many as
 *            it put into its last merged page on this handle, and two more.
 *            Every entry Redis returns costs it a score formatted as text,
 *            most of a read's cost: an author rarely holds more than a few
 *            items of a page, and merge.c's proof tells when one might.
 *   SEEK     page.lua for the sources a plain read could not prove (an
 *            absent key on a first page, a long run of ties at the cursor).
 *   REBUILD  the sources whose lease we took: their top rows in ONE
 *            statement, installed in one batch; their answers are cut from
 *            those rows.
 *   WAIT     a source another handle is rebuilding is asked again after a
 *            pause, as page.c does; then SQL.
 *   SQL      the sources whose copy ends before the page needs (or Redis
 *            failed, or a reply was not ours) in ONE statement.
 *   CUT      feed__merge_cut: the page, when the answers prove it; else
 *            the sources that block it are read again for limit + 1 items
 *            (a second round trip, then SQL for copies that end), after
 *            which they always do.
 *
 * A warm page is one round trip per node; its work grows with n and limit,
 * never with the cursor's depth or a feed's size. What the handle keeps
 * (TTLs known, each author's share of its last page) are guesses that save
 * round trips, never what a page rests on.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* ---- What the handle learns ------------------------------------------- */

/* Direct-mapped by author: it put `items` of the `want` pairs of its last
 * merged page here; want 0: an empty slot (a page wants limit + 1 >= 2).
 * (The TTLs known are rebuild.c's, shared with page.c.) */
#define HINT_SLOTS 256

struct feed_merge_hints {
    struct merge_share {
        int64_t  author;
        uint32_t items, want;
    } share[HINT_SLOTS];
};

/* ---- The request --------------------------------------------------------- */

enum src_state {
    S_READ,         /* a plain read is to be sent, or has not answered */
    S_PART,         /* rows: the `want` items asked, and the copy may hold more */
    S_SEEK,         /* page.lua must answer */
    S_LEASED,       /* we hold the lease: rebuild */
    S_BUSY,         /* another handle rebuilds it */
    S_SHORT,        /* rows: all the copy holds after the cursor; it ends before
                       the page may (past them, SQL) */
    S_SQL,          /* a keyset query answers */
    S_DONE          /* rows hold its answer: limit + 1 items, or to its end */
};

typedef struct msrc {
    int         fam;
    int64_t     owner;
    char       *key, *lease;
    int         state;
    size_t      want;           /* items the plain read asks for */
    char        asked[24];      /* its last argument, as text */
    int         ended;          /* rows reach the source's end */
    feed_rows   rows;           /* items after the cursor, in order */
    feed_source from;
    int         ttl_due;        /* first page: a PTTL rides with the read */
    long long   pttl;           /* its answer; PTTL_NONE if none */
    char        token[33];      /* page.lua's lease token */
} msrc;

#define PTTL_NONE (-3)

/* The commands of the batch under way. */
enum { C_READ, C_PTTL, C_PEXPIRE, C_SEEK };

typedef struct mcmd {
    int         kind;
    size_t      src;
    int         argc;
    const char *argv[FEED_PAGE_SCRIPT_ARGS];
    size_t      lens[FEED_PAGE_SCRIPT_ARGS];
} mcmd;

enum { M_START, M_READ, M_TTL, M_SEEK, M_REBUILD, M_WAIT, M_SQL, M_DONE };

/* Past MAX_ROUNDS cuts every source not known to its end is read from SQL:
 * each round leaves every blocking source with limit + 1 items or its end,
 * so the second cut is proven; the cap only bounds a server that keeps
 * changing its answers. */
#define MAX_ROUNDS 4

typedef struct merged_op {
    feed_op       op;
    feed_cursor_q q;            /* want = limit + 1 */
    size_t        n;            /* n sources: [0] the reader's feed, then authors */
    msrc         *src;
    char         *keys;
    feed_result  *out;
    int           round;
    int64_t       read_ms;      /* when the first read went out (TTL bookkeeping) */
    feed_wait     wait;         /* for other handles' rebuilds */
    int           redis_failed; /* some source could not be asked of Redis */
    char          score[24], member[FEED_MEMBER_MAX], want[24];
    size_t        member_len;
    mcmd         *cmds;
    size_t        ncmds;
    feed_rebuild  rb;           /* the sources whose lease we took */
    feed_rebuild_src *rebuilt;
    /* The statement's sources: authors, and where its rows go. */
    int64_t      *sql_authors;
    size_t       *sql_idx;      /* tagged[j] is source sql_idx[j]'s */
    feed_rows    *tagged;
    size_t        sql_n;
    feed_sqlpage  sp;
    unsigned char *blocking;
    int64_t      *tags;         /* feed__merged_want_tags: asked for (NULL: not) */
    char          redis_msg[FEED_ERRMSG];
    char          kept[FEED_ERRMSG];    /* op.kept: redis_msg may be in use then */
} merged_op;

static size_t count_in(const merged_op *m, int st)
{
    size_t c = 0;

    for (size_t k = 0; k < m->n; k++)
        c += m->src[k].state == st;
    return c;
}

static enum feed_want finish(merged_op *m, int rc)
{
    m->op.rc = rc;
    m->op.state = M_DONE;
    return FEED_W_DONE;
}

/* Redis could not answer for some source: keep why, for the message of a
 * page that PostgreSQL then cannot answer either. */
static void redis_failed(merged_op *m)
{
    if (!m->redis_failed)
        feed__msg_keep(m->redis_msg, m->op.err);
    m->redis_failed = 1;
}

/* Sources in state from got no answer from Redis: they go to SQL. */
static void unanswered_to_sql(merged_op *m, int from)
{
    for (size_t k = 0; k < m->n; k++)
        if (m->src[k].state == from) {
            if (!m->op.err[0])
                feed__msg(m->op.err, FEED_EREDIS, "Redis merged page: no answer");
            redis_failed(m);
            feed__rows_free(&m->src[k].rows);
            m->src[k].state = S_SQL;
        }
}

/* ---- Batches ------------------------------------------------------------ */

static void cmd_add(merged_op *m, int kind, size_t src, int argc, const char *const *argv,
                    const size_t *lens)
{
    mcmd *c = &m->cmds[m->ncmds++];

    c->kind = kind;
    c->src = src;
    c->argc = argc;
    for (int i = 0; i < argc; i++) {
        c->argv[i] = argv[i];
        c->lens[i] = lens ? lens[i] : strlen(argv[i]);
    }
}

static int batch_build(void *arg, size_t i, const char ***argv, const size_t **lens)
{
    merged_op *m = arg;
    mcmd *c = &m->cmds[i];

    *argv = c->argv;
    *lens = c->lens;
    return c->argc;
}

static void batch_reply(void *arg, size_t i, const redisReply *r);

/* The commands made so far, as one batch of independent commands: each
 * routed by its own key, one pipeline per node, the nodes at once. An
 * error reply is not handed over (its source then has no answer, and goes
 * to SQL); the batch's result says the first. */
static enum feed_want merged_send(merged_op *m, int state)
{
    m->op.state = state;
    m->op.batch = (feed_batch){ .n = m->ncmds, .flags = FEED_B_EACH, .slot = 0, .arg = m,
                                .build = batch_build, .reply = batch_reply };
    return FEED_W_REDIS;
}

/* ---- TTL refresh (first pages) ----------------------------------------- */

static int is_empty(const msrc *s)
{
    return s->ended && s->rows.count == 0;
}

/* After a first page's read: each copy whose PTTL shows less than half
 * its TTL left gets a PEXPIRE (one batch; a failure loses nothing, the
 * next first page tries again). A copy that turned empty, or stopped being
 * empty, since the handle last knew its TTL changed its rule: its record
 * is dropped, and the next first page asks again. Returns how many. */
static size_t ttl_refreshes(merged_op *m)
{
    feed_core *c = m->op.c;

    m->ncmds = 0;
    for (size_t k = 0; k < m->n; k++) {
        msrc *s = &m->src[k];
        int empty = is_empty(s);

        if ((s->state != S_DONE && s->state != S_PART && s->state != S_SHORT) ||
            s->from != FEED_SOURCE_CACHE)
            continue;
        if (!s->ttl_due) {
            if (feed__ttl_turned(c, s->fam, s->owner, empty))
                feed__ttl_forget(c, s->fam, s->owner);
        } else if (s->pttl != PTTL_NONE &&
                   feed__ttl_checked(c, s->fam, s->owner, m->read_ms, s->pttl, empty)) {
            cmd_add(m, C_PEXPIRE, k, 3, (const char *[]){ "PEXPIRE", s->key,
                                                          feed__ttl_text(c, empty) }, NULL);
        }
    }
    return m->ncmds;
}

/* ---- READ: one plain read per source ------------------------------------ */

/* What a source's read (plain, or page.lua: what) proved: its next state. */
static void took(merged_op *m, msrc *s, int verdict, const char *what)
{
    static const int next[] = { [FEED_MERGE_PROVEN] = S_DONE, [FEED_MERGE_SHORT] = S_SHORT,
                                [FEED_MERGE_UNKNOWN] = S_SEEK, [FEED_MERGE_LEASED] = S_LEASED,
                                [FEED_MERGE_BUSY] = S_BUSY, [FEED_MERGE_BAD] = S_SQL };

    s->state = next[verdict];
    if (verdict == FEED_MERGE_PROVEN || verdict == FEED_MERGE_SHORT)
        s->from = FEED_SOURCE_CACHE;    /* SHORT: the copy ends before the page may */
    if (verdict == FEED_MERGE_PROVEN && !s->ended && s->want < m->q.want)
        s->state = S_PART;              /* a plain read asked fewer: the copy may hold more */
    if (verdict == FEED_MERGE_BAD) {
        m->op.c->stats.redis_errors++;
        feed__msg(m->op.err, FEED_EREDIS, "Redis %s: unexpected reply", what);
        redis_failed(m);
        feed__rows_free(&s->rows);
    }
}

/* One plain read for every source in state S_READ, one batch; on a first
 * page's first round, a PTTL too where the TTL may need a refresh. */
static enum feed_want ask_read(merged_op *m, int64_t now)
{
    feed_core *c = m->op.c;
    int with_ttl = m->round == 0 && m->q.first;

    m->ncmds = 0;
    m->read_ms = now;
    for (size_t k = 0; k < m->n; k++) {
        msrc *s = &m->src[k];
        if (s->state != S_READ)
            continue;
        feed__rows_free(&s->rows);
        s->ended = 0;
        /* First page: ranks 0 .. want - 1; after a cursor, want + 1 entries
         * at or below its score (the cursor item itself may come first). */
        feed__i64_to_str((int64_t)s->want - (m->q.first ? 1 : -1), s->asked);
        if (m->q.first)
            cmd_add(m, C_READ, k, 5, (const char *[]){ "ZREVRANGE", s->key, "0", s->asked,
                                                       "WITHSCORES" }, NULL);
        else
            cmd_add(m, C_READ, k, 8, (const char *[]){ "ZREVRANGEBYSCORE", s->key, m->score,
                                                       "-inf", "WITHSCORES", "LIMIT", "0",
                                                       s->asked }, NULL);
        s->pttl = PTTL_NONE;
        s->ttl_due = with_ttl && feed__ttl_due(c, s->fam, s->owner, now);
        if (s->ttl_due)
            cmd_add(m, C_PTTL, k, 2, (const char *[]){ "PTTL", s->key }, NULL);
    }
    return merged_send(m, M_READ);
}

/* ---- SEEK: page.lua ------------------------------------------------------ */

/* page.lua for every source in state S_SEEK, one batch (page.c's call:
 * keys, limit + 1, the cursor, a lease token, the TTLs on first pages). */
static enum feed_want ask_seek(merged_op *m)
{
    feed_core *c = m->op.c;
    const char *argv[FEED_PAGE_SCRIPT_ARGS];
    size_t lens[FEED_PAGE_SCRIPT_ARGS];
    int argc;

    m->ncmds = 0;
    for (size_t k = 0; k < m->n; k++) {
        msrc *s = &m->src[k];
        if (s->state != S_SEEK)
            continue;
        feed__rows_free(&s->rows);
        s->ended = 0;
        s->want = m->q.want;            /* page.lua asks for limit + 1 */
        feed__lease_token(c->token_seed, &c->token_seq, s->token);
        argc = feed__page_script(c, argv, lens, s->key, s->lease, m->want,
                                 m->q.first ? NULL : m->score, m->member, m->member_len,
                                 s->token);
        cmd_add(m, C_SEEK, k, argc, argv, lens);
    }
    c->stats.plain_fallbacks += m->ncmds;
    return merged_send(m, M_SEEK);
}

/* ---- SQL: one statement for many sources --------------------------------- */

/* op->sql's merge fields: the statement over the sources in state st. */
static void sql_sources(merged_op *m, int st)
{
    feed_sql *q = &m->op.sql;

    m->sql_n = 0;
    q->with_feed = m->src[0].state == st;
    m->sql_idx[0] = 0;
    for (size_t k = 1; k < m->n; k++)
        if (m->src[k].state == st) {
            m->sql_authors[m->sql_n++] = m->src[k].owner;
            m->sql_idx[m->sql_n] = k;
        }
    q->authors = m->sql_authors;
    q->nauthors = m->sql_n;
    q->tagged = m->tagged;
}

static void tagged_free(merged_op *m)
{
    for (size_t j = 0; j <= m->sql_n; j++)
        feed__rows_free(&m->tagged[j]);
}

/* Every source still without an answer, in one statement: limit + 1 rows
 * after the cursor each; the replica may answer. */
static enum feed_want ask_sql(merged_op *m, int64_t now)
{
    int64_t params[4] = { m->src[0].owner, m->q.first ? INT64_MAX : m->q.score,
                          m->q.first ? 0 : m->q.id, (int64_t)m->q.want };
    int rc;

    sql_sources(m, S_SQL);
    feed__sqlpage_begin(&m->sp, FEED_SQL_MERGE, m->src[0].owner, params, 4);
    m->op.state = M_SQL;
    if (feed__sqlpage_step(&m->sp, &m->op, now, &rc) == FEED_W_SQL)
        return FEED_W_SQL;
    return finish(m, rc);
}

static enum feed_want cut(merged_op *m, int64_t now);

/* The statement answered: each source's rows are limit + 1 items, or all
 * there are (its end). Redis failed too for some source: then PostgreSQL
 * was the only way, and its failure makes the page unavailable. */
static enum feed_want sql_answered(merged_op *m, int rc, int64_t now)
{
    for (size_t j = m->op.sql.with_feed ? 0 : 1; rc == FEED_OK && j <= m->sql_n; j++) {
        msrc *s = &m->src[m->sql_idx[j]];
        feed__rows_free(&s->rows);
        s->rows = m->tagged[j];
        m->tagged[j] = (feed_rows){ NULL, 0 };
        s->ended = s->rows.count < m->q.want;
        s->from = FEED_SOURCE_DB;
        s->state = S_DONE;
    }
    tagged_free(m);
    rc = feed__db_outcome(m->op.c, m->op.err, rc, m->redis_failed, m->redis_msg);
    if (rc != FEED_OK)
        return finish(m, rc);
    return cut(m, now);
}

/* ---- REBUILD: the sources whose lease we hold ---------------------------- */

/* Their top max_len + 1 rows, one statement, from the primary, never the
 * replica: a replica may not yet have replayed a write whose hook already
 * ran (and cancelled the lease). */
static enum feed_want ask_rebuild(merged_op *m)
{
    feed_core *c = m->op.c;
    size_t n = 0;

    feed__sql_ask(&m->op, FEED_SQL_MERGE, FEED_PG_PRIMARY, m->src[0].owner,
                  (int64_t[]){ m->src[0].owner, INT64_MAX, 0, (int64_t)c->cfg.max_len + 1 }, 4);
    sql_sources(m, S_LEASED);
    for (size_t j = m->op.sql.with_feed ? 0 : 1; j <= m->sql_n; j++) {
        const msrc *s = &m->src[m->sql_idx[j]];
        m->rebuilt[n++] = (feed_rebuild_src){ .fam = s->fam, .owner = s->owner, .key = s->key,
                                              .lease = s->lease, .token = s->token,
                                              .rows = &m->tagged[j] };
    }
    feed__rebuild_begin(&m->rb, &m->op, m->rebuilt, n, FEED_B_EACH, 0);
    m->op.state = M_REBUILD;
    return FEED_W_SQL;
}

/* A rebuild's answer for source k: its rows are the source's top, so they
 * answer the page when they are the whole source or reach past it. */
static int answer_from_top(merged_op *m, size_t k, const feed_rows *top)
{
    msrc *s = &m->src[k];
    int complete = top->count <= m->op.c->cfg.max_len;
    size_t start = feed__rows_after(top, &m->q), avail = top->count - start;

    if (avail > m->q.want)
        avail = m->q.want;
    feed__rows_free(&s->rows);
    if (!(s->rows.items = malloc((avail + 1) * sizeof *s->rows.items)))
        return FEED_ENOMEM;
    memcpy(s->rows.items, top->items + start, avail * sizeof *top->items);
    s->rows.count = avail;
    s->ended = complete;
    /* Not the whole source and short of the page: past them, SQL knows. */
    s->state = complete || avail == m->q.want ? S_DONE : S_SHORT;
    return FEED_OK;
}

static enum feed_want after_rebuild(merged_op *m, int64_t now);

/* The installs are done (or not: the rows answer either way). */
static enum feed_want installed(merged_op *m, int64_t now)
{
    int rc = FEED_OK;
    size_t i = 0;

    for (size_t j = m->op.sql.with_feed ? 0 : 1; j <= m->sql_n; j++) {
        size_t k = m->sql_idx[j];
        m->src[k].from = m->rebuilt[i++].in.installed ? FEED_SOURCE_REBUILD : FEED_SOURCE_DB;
        if (rc == FEED_OK)
            rc = answer_from_top(m, k, &m->tagged[j]);
    }
    tagged_free(m);
    if (rc != FEED_OK)
        return finish(m, feed__msg(m->op.err, FEED_ENOMEM, "out of memory for a merged page"));
    m->op.err[0] = '\0';        /* an install that failed loses nothing: the rows answered */
    return after_rebuild(m, now);
}

/* ---- The order of things -------------------------------------------------- */

/* Seeks first, then the statement for the sources left without an answer,
 * then the cut. */
static enum feed_want advance(merged_op *m, int64_t now)
{
    if (count_in(m, S_SEEK) > 0)
        return ask_seek(m);
    if (count_in(m, S_SQL) > 0)
        return ask_sql(m, now);
    return cut(m, now);
}

/* A source another handle rebuilds is asked again after a pause that
 * doubles, until lease_wait_ms has passed; then SQL answers it. */
static enum feed_want after_rebuild(merged_op *m, int64_t now)
{
    if (count_in(m, S_BUSY) == 0)
        return advance(m, now);
    if (!feed__lease_wait(&m->op, &m->wait, -1, 0, now)) {
        for (size_t k = 0; k < m->n; k++)
            if (m->src[k].state == S_BUSY)
                m->src[k].state = S_SQL;
        return advance(m, now);
    }
    m->op.state = M_WAIT;
    return FEED_W_WAKE;
}

/* ---- What an author's read asks for ------------------------------------- */

static struct merge_share *share_slot(feed_core *c, int64_t author)
{
    return &c->merge->share[((uint64_t)author * 0x9E3779B97F4A7C15ULL >> 32) % HINT_SLOTS];
}

/* Items an author's first read asks for: its share of its last merged
 * page on this handle, scaled to this page's want, and two more; without
 * one, twice an even share of want. At least 2, at most want. */
static size_t author_want(feed_core *c, int64_t author, size_t want, size_t nsrc)
{
    const struct merge_share *s = share_slot(c, author);
    size_t k = s->want && s->author == author
             ? (size_t)(((uint64_t)s->items * want + s->want - 1) / s->want) + 2
             : (2 * want + nsrc - 1) / nsrc + 1;

    return k < 2 ? 2 : k > want ? want : k;
}

/* After a page: each author's items among the want pairs cut (rows are in
 * order: those at or above the last pair). */
static void learn_shares(merged_op *m, const feed_item *page, size_t count)
{
    for (size_t k = 1; k < m->n && count > 0; k++) {
        const msrc *s = &m->src[k];
        feed_item last = page[count - 1];
        uint32_t items = 0;
        while (items < s->rows.count &&
               !feed__item_after(s->rows.items[items], last.score, last.id))
            items++;
        *share_slot(m->op.c, s->owner) = (struct merge_share){ s->owner, items,
                                                               (uint32_t)m->q.want };
    }
}

/* ---- CUT ------------------------------------------------------------------ */

/* Each item's tag: the author whose answer holds it (its rows are the
 * author's posts), or INT64_MIN when only the reader's feed does. Every
 * answer is in page order, so one pass per source. */
static void tag_items(merged_op *m, const feed_item *items, size_t count)
{
    for (size_t i = 0; i < count; i++)
        m->tags[i] = INT64_MIN;
    for (size_t k = 1; k < m->n; k++) {
        const feed_rows *r = &m->src[k].rows;
        size_t j = 0;
        for (size_t i = 0; i < count && j < r->count; i++) {
            while (j < r->count && feed__item_after(items[i], r->items[j].score,
                                                    r->items[j].id))
                j++;
            if (j < r->count && r->items[j].score == items[i].score &&
                r->items[j].id == items[i].id && m->tags[i] == INT64_MIN)
                m->tags[i] = m->src[k].owner;
        }
    }
}

static enum feed_want answer(merged_op *m, feed_item *items, size_t count)
{
    feed_source source = FEED_SOURCE_CACHE;

    /* The worst of the sources': DB over REBUILD over CACHE, as they are numbered. */
    for (size_t k = 0; k < m->n; k++)
        if (m->src[k].from > source)
            source = m->src[k].from;
    learn_shares(m, items, count);
    if (m->tags)
        tag_items(m, items, count);
    m->out->items = items;
    feed__page_served(m->op.c, m->out, count, m->q.want - 1, source);
    return finish(m, FEED_OK);
}

/* The page, when the answers prove it; else the sources that block it are
 * asked further: for limit + 1 items from the cache, or from SQL when their
 * copy ends. */
static enum feed_want cut(merged_op *m, int64_t now)
{
    feed_merge_answer *ans = malloc(m->n * sizeof *ans);
    feed_item *items = malloc((m->q.want + 1) * sizeof *items);
    size_t count;

    if (!ans || !items) {
        free(ans);
        free(items);
        return finish(m, feed__msg(m->op.err, FEED_ENOMEM, "out of memory for a merged page"));
    }
    for (size_t k = 0; k < m->n; k++) {
        ans[k].rows = m->src[k].rows;
        ans[k].ended = m->src[k].ended;
    }
    count = feed__merge_cut(ans, m->n, &m->q, items, m->blocking);
    free(ans);
    if (count == FEED_MERGE_DISORDER) {
        free(items);
        m->op.c->stats.redis_errors++;
        return finish(m, feed__msg(m->op.err, FEED_EREDIS,
                                   "merged page: a source's items out of order"));
    }
    if (count != FEED_MERGE_UNPROVEN)
        return answer(m, items, count);
    free(items);
    for (size_t k = 0; k < m->n; k++) {
        msrc *s = &m->src[k];
        if (!m->blocking[k] && m->round < MAX_ROUNDS)
            continue;
        if (s->state == S_PART && m->round < MAX_ROUNDS) {
            s->state = S_READ;              /* the cache holds more: ask for it */
            s->want = m->q.want;
        } else if (s->state != S_DONE || !s->ended) {
            feed__rows_free(&s->rows);
            s->state = S_SQL;               /* the copy ends first: SQL knows */
        }
    }
    m->round++;
    if (count_in(m, S_READ) > 0)
        return ask_read(m, now);
    return advance(m, now);
}

/* ---- Replies and steps ------------------------------------------------------ */

static void batch_reply(void *arg, size_t i, const redisReply *r)
{
    merged_op *m = arg;
    const mcmd *c = &m->cmds[i];
    msrc *s = &m->src[c->src];
    feed_cursor_q q = m->q;

    switch (c->kind) {
    case C_READ:            /* it asked for want entries, or want + 1 after a cursor */
        q.want = s->want;
        took(m, s, feed__merge_plain(r, &q, m->q.first ? s->want : s->want + 1, &s->rows,
                                     &s->ended), "merged page read");
        return;
    case C_PTTL:
        if (r->type == REDIS_REPLY_INTEGER)
            s->pttl = r->integer;
        return;
    case C_PEXPIRE:
        if (r->type == REDIS_REPLY_INTEGER && r->integer == 1)
            feed__ttl_full(m->op.c, s->fam, s->owner, m->read_ms, is_empty(s));
        return;
    default:        /* C_SEEK */
        took(m, s, feed__merge_script(r, &m->q, &s->rows, &s->ended), "page.lua");
        return;
    }
}

/* The step follows a Redis batch (whose redis_rc then speaks). */
static int redis_answered(const merged_op *m)
{
    switch (m->op.state) {
    case M_START: case M_WAIT: case M_SQL:
        return 0;
    case M_REBUILD:
        return m->rb.state != FEED_RB_READ;
    default:
        return 1;
    }
}

static enum feed_want merged_step(feed_op *op, int64_t now)
{
    merged_op *m = (merged_op *)op;
    enum feed_want want;
    int rc;

    if (redis_answered(m) && op->redis_rc == FEED_ENOMEM)
        return finish(m, FEED_ENOMEM);
    switch (op->state) {
    case M_START:
        return ask_read(m, now);
    case M_READ:
        unanswered_to_sql(m, S_READ);
        if (m->round == 0 && m->q.first && ttl_refreshes(m) > 0)
            return merged_send(m, M_TTL);
        return advance(m, now);
    case M_TTL:
        op->err[0] = '\0';      /* the page's outcome is not the refresh's */
        return advance(m, now);
    case M_SEEK:
        unanswered_to_sql(m, S_SEEK);
        if (count_in(m, S_LEASED) > 0)
            return ask_rebuild(m);
        return after_rebuild(m, now);
    case M_REBUILD:
        if ((want = feed__rebuild_step(&m->rb, now, &rc)) != FEED_W_DONE)
            return want;
        if (m->rb.state != FEED_RB_INSTALL)
            return finish(m, rc);   /* the read failed, or no memory to install */
        return installed(m, now);
    case M_WAIT:
        for (size_t k = 0; k < m->n; k++)
            if (m->src[k].state == S_BUSY)
                m->src[k].state = S_SEEK;
        return advance(m, now);
    case M_SQL:
        if (feed__sqlpage_step(&m->sp, op, now, &rc) == FEED_W_SQL)
            return FEED_W_SQL;
        return sql_answered(m, rc, now);
    default:
        return FEED_W_DONE;
    }
}

static void merged_free(feed_op *op)
{
    merged_op *m = (merged_op *)op;

    for (size_t k = 0; m->src && k < m->n; k++)
        feed__rows_free(&m->src[k].rows);
    feed__rebuild_free(&m->rb);
    feed__sqlpage_end(&m->sp);
    if (m->tagged)              /* rows only of the last statement's sources */
        tagged_free(m);
    feed__rows_free(&op->sql.rows);
    free(m->src);
    free(m->keys);
    free(m->cmds);
    free(m->rebuilt);
    free(m->sql_authors);
    free(m->sql_idx);
    free(m->tagged);
    free(m->blocking);
    free(m->tags);
    free(m);
}

/* Ask op (feed__merged_op's, not started) to tag the items of its page:
 * FEED_OK or FEED_ENOMEM. Once it is done, tags[i] says where the i-th item
 * of out->items came from (see tag_items); the array stays op's. */
int feed__merged_want_tags(feed_op *op, const int64_t **tags)
{
    merged_op *m = (merged_op *)op;

    if (!(m->tags = malloc((m->q.want + 1) * sizeof *m->tags)))
        return FEED_ENOMEM;
    *tags = m->tags;
    return FEED_OK;
}

/* ---- Making the request --------------------------------------------------- */

int feed__authors_on(const feed_core *c, char *err, const char *fn)
{
    if (!c->cfg.author_table)
        return feed__msg(err, FEED_EINVAL, "%s: author_table is not configured", fn);
    return FEED_OK;
}

int feed__merged_check(const feed_core *c, char *err, const char *fn, const int64_t *authors,
                       size_t n, int64_t last_score, int64_t last_id, size_t limit,
                       const feed_result *out)
{
    int rc;

    if (out && (rc = feed__authors_on(c, err, fn)) != FEED_OK)
        return rc;
    if (out && n > FEED_MERGE_MAX)
        return feed__msg(err, FEED_EINVAL, "%s: %zu authors, at most %d", fn, n,
                         FEED_MERGE_MAX);
    if (out && !authors && n > 0)
        return feed__msg(err, FEED_EINVAL, "%s: authors is NULL, n %zu", fn, n);
    return feed__page_check(c, err, fn, last_score, last_id, -1, limit, out);
}

static int by_value(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

    return (a > b) - (a < b);
}

/* The sources: uid's feed, then each author once (sorted). */
static int sources_init(merged_op *m, int64_t uid, const int64_t *authors, size_t n)
{
    feed_core *c = m->op.c;
    int64_t *who = malloc((n + 1) * sizeof *who);
    size_t u = 0, cmds;

    if (!who)
        return FEED_ENOMEM;
    memcpy(who, authors, n * sizeof *who);
    qsort(who, n, sizeof *who, by_value);
    for (size_t i = 0; i < n; i++)
        if (u == 0 || who[u - 1] != who[i])
            who[u++] = who[i];
    m->n = u + 1;
    cmds = 2 * m->n;            /* at most two commands a source (a read and PTTL) */
    m->src = calloc(m->n, sizeof *m->src);
    m->keys = malloc(2 * m->n * c->key_cap);
    m->cmds = malloc(cmds * sizeof *m->cmds);
    m->rebuilt = calloc(m->n, sizeof *m->rebuilt);
    m->sql_authors = malloc(m->n * sizeof *m->sql_authors);
    m->sql_idx = malloc(m->n * sizeof *m->sql_idx);
    m->tagged = calloc(m->n, sizeof *m->tagged);
    m->blocking = malloc(m->n);
    if (!m->src || !m->keys || !m->cmds || !m->rebuilt || !m->sql_authors || !m->sql_idx ||
        !m->tagged || !m->blocking) {
        free(who);
        return FEED_ENOMEM;
    }
    for (size_t k = 0; k < m->n; k++) {
        msrc *s = &m->src[k];
        s->fam = k == 0 ? FEED_FAM_FEED : FEED_FAM_AUTHOR;
        s->owner = k == 0 ? uid : who[k - 1];
        s->key = m->keys + 2 * k * c->key_cap;
        s->lease = s->key + c->key_cap;
        feed__family_keys(c->key_base[s->fam], s->owner, s->key, s->lease);
        s->state = S_READ;
        s->want = k == 0 ? m->q.want : author_want(c, s->owner, m->q.want, m->n);
    }
    free(who);
    return FEED_OK;
}

/* A merged page request for n > 0 authors (the arguments checked by
 * feed__merged_check); NULL with *rc when it cannot be made. */
feed_op *feed__merged_op(feed_core *c, char *err, int64_t uid, const int64_t *authors,
                         size_t n, int64_t last_score, int64_t last_id, size_t limit,
                         feed_result *out, int *rc)
{
    merged_op *m;

    if ((!c->merge && !(c->merge = calloc(1, sizeof *c->merge))) ||
        !(m = calloc(1, sizeof *m))) {
        *rc = feed__msg(err, FEED_ENOMEM, "out of memory for a merged page");
        return NULL;
    }
    m->op.c = c;
    m->op.reads = 1;
    m->op.err = err;
    m->op.kept = m->kept;
    m->op.step = merged_step;
    m->op.free = merged_free;
    m->op.state = M_START;
    m->out = out;
    m->wait = (feed_wait){ 0, 1 };
    m->q = (feed_cursor_q){ last_score == FEED_FIRST, last_score, last_id, limit + 1 };
    feed__i64_to_str(last_score == FEED_FIRST ? 0 : last_score, m->score);
    feed__i64_to_str((int64_t)limit + 1, m->want);
    if (!m->q.first)
        m->member_len = feed__member_encode(last_id, m->member);
    if (sources_init(m, uid, authors, n) != FEED_OK) {
        merged_free(&m->op);
        *rc = feed__msg(err, FEED_ENOMEM, "out of memory for %zu authors", n);
        return NULL;
    }
    *rc = FEED_OK;
    return &m->op;
}
