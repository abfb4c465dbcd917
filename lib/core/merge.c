/* merge.c -- read-time merge, the decisions: what each source's answer
 * proves, and the merged page cut from the answers. No I/O, no clock: the
 * request (merged.c) runs them under both drivers alike.
 *
 * A merged page is the first limit items after the cursor of the union of
 * n + 1 sources (the reader's feed and n authors' posts), each (score, id)
 * pair once. Every source's cached copy is an exact prefix of that source's
 * rows (the invariant). So each source is asked for want = limit + 1 items
 * after the cursor, and its answer is usable when it holds want of them or
 * every one to the source's end. Then the first want distinct pairs of the
 * union of the answers are exact: a source cannot put more than want items
 * above the union's want-th one, so no item it left out can rank among
 * them. An answer that reaches neither (the copy ends first, or does not
 * say) is not used: that source is read from SQL instead, or by a seek.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static int after(const feed_cursor_q *q, feed_item it)
{
    return q->first || feed__item_after(it, q->score, q->id);
}

/* Pairs [from, from + npairs) of r, all after the cursor and in order: at
 * most want items into rows, *ended when the end marker closes them within
 * those. Returns FEED_MERGE_PROVEN or _SHORT as the items reach or not, or
 * FEED_MERGE_BAD. */
static int take(const redisReply *r, size_t from, size_t npairs, const feed_cursor_q *q,
                feed_rows *rows, int *ended)
{
    size_t n = 0;

    *ended = 0;
    rows->items = malloc((q->want + 1) * sizeof *rows->items);
    rows->count = 0;
    if (!rows->items)
        return FEED_MERGE_BAD;
    for (size_t j = 0; j < npairs && n < q->want; j++) {
        feed_item it;
        if (feed__reply_end(r, from + 2 * j)) {
            *ended = 1;
            break;
        }
        /* Never a page out of order or from before the cursor, whatever
         * the server says: SQL answers instead. */
        if (feed__reply_pair(r, from + 2 * j, &it) != FEED_OK || !after(q, it) ||
            (n > 0 && !feed__item_after(it, rows->items[n - 1].score, rows->items[n - 1].id))) {
            feed__rows_free(rows);
            return FEED_MERGE_BAD;
        }
        rows->items[n++] = it;
    }
    rows->count = n;
    return *ended || n == q->want ? FEED_MERGE_PROVEN : FEED_MERGE_SHORT;
}

/* A plain read is one atomic snapshot of the copy, and proves the source's
 * answer when it holds want items after the cursor, or reached the set's
 * bottom (fewer entries than asked): then the end marker is there (the
 * copy is whole) or not (the copy ends first: SHORT). First page: rank 0
 * has nothing above it, and an empty reply is an absent key (a cached feed
 * is never empty: an empty feed holds the end marker): page.lua takes the
 * lease. After a cursor, the read by score starts with the entries at the
 * cursor's score that are not after it (the cursor item, ties of higher
 * id); when those fill the reply (a long run of ties) it proves nothing.
 * An empty reply there is SHORT: a copy whose window ends above the
 * cursor, or an absent one; SQL answers either exactly, and an absent copy
 * is rebuilt by the next first page (a walk past the windows then pays no
 * seek per page). */
int feed__merge_plain(const redisReply *r, const feed_cursor_q *q, size_t asked,
                      feed_rows *rows, int *ended)
{
    size_t npairs, j = 0;
    int v;

    *rows = (feed_rows){ NULL, 0 };
    *ended = 0;
    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 != 0)
        return FEED_MERGE_BAD;
    if (r->elements == 0)
        return q->first ? FEED_MERGE_UNKNOWN : FEED_MERGE_SHORT;
    npairs = r->elements / 2;
    while (j < npairs && !feed__reply_end(r, 2 * j)) {
        feed_item it;
        if (feed__reply_pair(r, 2 * j, &it) != FEED_OK)
            return FEED_MERGE_BAD;
        if (after(q, it))
            break;
        j++;
    }
    v = take(r, 2 * j, npairs - j, q, rows, ended);
    if (v == FEED_MERGE_SHORT && npairs == asked) {
        feed__rows_free(rows);   /* the reply stopped before the copy did */
        return FEED_MERGE_UNKNOWN;
    }
    return v;
}

/* page.lua answers a miss with an integer (1: the caller holds the lease)
 * and a hit with ZREVRANGE's reply: after a cursor still cached at its
 * score the first pair is the cursor item (dropped here), and one integer,
 * the first pair's rank, ends the array. Up to want items after the
 * cursor, the end marker among them when reached: the answer is PROVEN
 * with want items or the marker, else SHORT (the copy ends first). */
int feed__merge_script(const redisReply *r, const feed_cursor_q *q, feed_rows *rows,
                       int *ended)
{
    size_t elements, first = 0;

    *rows = (feed_rows){ NULL, 0 };
    *ended = 0;
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer == 1 ? FEED_MERGE_LEASED
             : r->integer == 0 ? FEED_MERGE_BUSY : FEED_MERGE_BAD;
    if (r->type != REDIS_REPLY_ARRAY)
        return FEED_MERGE_BAD;
    elements = r->elements;
    if (!q->first && elements % 2 == 1) {
        if (r->element[elements - 1]->type != REDIS_REPLY_INTEGER)
            return FEED_MERGE_BAD;
        elements--;
    }
    if (elements % 2 != 0)
        return FEED_MERGE_BAD;
    if (!q->first && elements > 0) {
        feed_item c;
        if (feed__reply_pair(r, 0, &c) == FEED_OK && c.score == q->score && c.id == q->id)
            first = 2;
    }
    return take(r, first, (elements - first) / 2, q, rows, ended);
}

size_t feed__rows_after(const feed_rows *rows, const feed_cursor_q *q)
{
    size_t lo = 0, hi = rows->count;

    if (q->first)
        return 0;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (feed__item_after(rows->items[mid], q->score, q->id))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* a is strictly above b in (score DESC, id DESC) order. */
static int above(feed_item a, feed_item b)
{
    return feed__item_after(b, a.score, a.id);
}

/* The first `want` distinct pairs of the union, at most, into out: a k-way
 * merge that takes the first of the sources' heads at each step and skips
 * it in every source that holds the same pair. O(want * n) comparisons: n
 * and want are small (FEED_MERGE_MAX + 1 sources, max_page + 1 items). */
static size_t union_top(const feed_merge_answer *src, size_t n, size_t want, size_t *head,
                        feed_item *out)
{
    size_t count = 0;

    memset(head, 0, n * sizeof *head);
    while (count < want) {
        int found = 0;
        feed_item best = { 0, 0 };
        for (size_t k = 0; k < n; k++) {
            if (head[k] == src[k].rows.count)
                continue;
            feed_item it = src[k].rows.items[head[k]];
            if (!found || above(it, best)) {
                best = it;
                found = 1;
            }
        }
        if (!found)
            break;
        out[count++] = best;
        for (size_t k = 0; k < n; k++)
            if (head[k] < src[k].rows.count && src[k].rows.items[head[k]].score == best.score &&
                src[k].rows.items[head[k]].id == best.id)
                head[k]++;
    }
    return count;
}

/* Why the cut is exact. A source that has not ended is known down to its
 * last row (inclusive), its bound: it may hold more items below that, none
 * above it that its rows lack (a copy is an exact prefix; a read returns
 * every entry down to where it stops). So the union is known exactly at and
 * above the highest bound of the sources that have not ended, L, and its
 * first want pairs are the page when at least want of them lie at or above
 * L. A source with no row and no end is known nowhere after the cursor.
 *
 * Otherwise, with C the want-th pair known so far (if there are want), a
 * source whose bound lies at or below C cannot change the page (what it may
 * hold below its bound lies below C, and more items from the others only
 * move the want-th pair up), and one whose bound lies above C (or any,
 * without C) blocks it. Once each blocking source answers with want items
 * or to its end, the cut is proven: such a source's bound is its want-th
 * item, at or below the union's want-th. */
size_t feed__merge_cut(const feed_merge_answer *src, size_t n, const feed_cursor_q *q,
                       feed_item *out, unsigned char *blocking)
{
    size_t head[FEED_MERGE_MAX + 1], count;
    int open = 0, nowhere = 0;
    feed_item top = { 0, 0 };

    for (size_t k = 0; k < n; k++) {
        const feed_rows *r = &src[k].rows;
        for (size_t i = 0; i < r->count; i++)
            if (!after(q, r->items[i]) || (i > 0 && !above(r->items[i - 1], r->items[i])))
                return FEED_MERGE_DISORDER;
        if (src[k].ended)
            continue;
        if (r->count == 0) {
            nowhere = 1;
        } else if (!open || above(r->items[r->count - 1], top)) {
            top = r->items[r->count - 1];     /* L so far: the highest bound */
            open = 1;
        }
    }
    count = union_top(src, n, q->want, head, out);
    /* Proven: every source ended, or want pairs known, the last of them at
     * or above L. */
    if (!nowhere && (!open || (count == q->want && !above(top, out[count - 1]))))
        return count;
    /* Not proven: which sources must say more. */
    for (size_t k = 0; k < n; k++) {
        const feed_rows *r = &src[k].rows;
        blocking[k] = !src[k].ended &&
                      (r->count == 0 || count < q->want ||
                       above(r->items[r->count - 1], out[count - 1]));
    }
    return FEED_MERGE_UNPROVEN;
}
