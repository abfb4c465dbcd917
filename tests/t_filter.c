/* t_filter.c -- filtered pages against SQL with the filter in its WHERE
 * clause: random feeds with ties and authors, 0% to 100% of authors hidden,
 * a predicate, page sizes 1..max_page, copies cold, warm, partial and
 * empty; every walk equals SQL, no page is short before the end, and the
 * cursor never skips nor repeats. */
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "testutil.h"

#define TABLE    "feed_authored"
#define PREFIX   "tf"
#define MAX_LEN  40
#define MAX_PAGE 30
#define AUTHORS  20

static PGconn *pg;
static redisContext *rds;

typedef struct row { int64_t score, id, author; } row;

static void set_cfg(feed_config *cfg)
{
    cfg->table = TABLE;
    cfg->key_prefix = PREFIX;
    cfg->item_author_column = "author";
    cfg->max_len = MAX_LEN;
    cfg->max_page = MAX_PAGE;
}

static void make_table(void)
{
    tu_sql(pg, "DROP TABLE IF EXISTS " TABLE);
    tu_sql(pg, "CREATE TABLE " TABLE " (uid bigint NOT NULL, score bigint NOT NULL,"
               " id bigint NOT NULL, author bigint, PRIMARY KEY (uid, id))");
    tu_sql(pg, "CREATE INDEX ON " TABLE " (uid, score DESC, id DESC)");
}

/* uid's feed from SQL with authors hidden[0..nh) left out (NULL authors
 * kept), in page order. */
static size_t sql_filtered(int64_t uid, const int64_t *hidden, size_t nh, row **out)
{
    char arr[16384] = "{";
    size_t len = 1, n;
    PGresult *res;
    char num[32];
    const char *params[2] = { num, arr };

    for (size_t i = 0; i < nh; i++)
        len += (size_t)snprintf(arr + len, sizeof arr - len, "%s%lld", i ? "," : "",
                                (long long)hidden[i]);
    snprintf(arr + len, sizeof arr - len, "}");
    snprintf(num, sizeof num, "%lld", (long long)uid);
    res = PQexecParams(pg, "SELECT score, id, coalesce(author, -1) FROM " TABLE
                           " WHERE uid = $1::int8 AND (author IS NULL OR author <> ALL($2::int8[]))"
                           " ORDER BY score DESC, id DESC", 2, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        tap_bail(PQerrorMessage(pg));
    n = (size_t)PQntuples(res);
    *out = malloc((n + 1) * sizeof **out);
    for (size_t i = 0; i < n; i++)
        (*out)[i] = (row){ strtoll(PQgetvalue(res, (int)i, 0), NULL, 10),
                           strtoll(PQgetvalue(res, (int)i, 1), NULL, 10),
                           strtoll(PQgetvalue(res, (int)i, 2), NULL, 10) };
    PQclear(res);
    return n;
}

/* Hide ids divisible by `mod` too (mod 0: no predicate). */
static int keep_mod(void *arg, int64_t score, int64_t id, int64_t author)
{
    int64_t mod = *(const int64_t *)arg;

    (void)score;
    (void)author;
    return mod == 0 || id % mod != 0;
}

/* Walk uid's filtered feed with page size limit and compare with SQL:
 * equal items, no short page before the end, has_more right. */
static int walk_equals(feed *f, int64_t uid, const int64_t *hidden, size_t nh, int64_t mod,
                       size_t limit, const char *what)
{
    row *want;
    size_t nwant = sql_filtered(uid, hidden, nh, &want), got = 0, pages = 0;
    int64_t score = FEED_FIRST, id = 0;
    feed_filter flt = { hidden, nh, mod ? keep_mod : NULL, &mod };
    int ok = 1;

    if (mod) {                  /* apply the predicate to SQL's answer too */
        size_t k = 0;
        for (size_t i = 0; i < nwant; i++)
            if (want[i].id % mod != 0)
                want[k++] = want[i];
        nwant = k;
    }
    for (;;) {
        feed_result r;
        int rc = feed_page_filtered(f, uid, score, id, limit, &flt, &r);
        if (rc != FEED_OK) {
            tap_diag("%s: rc %d: %s", what, rc, feed_errmsg(f));
            ok = 0;
            break;
        }
        pages++;
        for (size_t i = 0; i < r.count && ok; i++, got++)
            if (got >= nwant || r.items[i].score != want[got].score ||
                r.items[i].id != want[got].id) {
                tap_diag("%s: page %zu item %zu is (%lld,%lld), SQL has %s (%lld,%lld)", what,
                         pages, i, (long long)r.items[i].score, (long long)r.items[i].id,
                         got >= nwant ? "nothing" : "", got < nwant ? (long long)want[got].score
                         : 0, got < nwant ? (long long)want[got].id : 0);
                ok = 0;
            }
        if (ok && r.count < limit && r.has_more) {
            tap_diag("%s: page %zu short (%zu of %zu) before the end", what, pages, r.count,
                     limit);
            ok = 0;
        }
        if (ok && !r.has_more && got != nwant) {
            tap_diag("%s: walk ended after %zu of %zu items", what, got, nwant);
            ok = 0;
        }
        score = r.next_score;
        id = r.next_id;
        if (!r.has_more || !ok || pages > 10000) {
            feed_result_free(&r);
            break;
        }
        feed_result_free(&r);
    }
    free(want);
    return ok;
}

static void fill(int64_t uid, size_t n, uint64_t *seed, int nulls)
{
    for (size_t i = 0; i < n; i++) {
        int64_t a = tu_rand_below(seed, AUTHORS);
        if (nulls && tu_rand_below(seed, 10) == 0)
            tu_sql(pg, "INSERT INTO " TABLE " VALUES (%lld, %lld, %lld, NULL)", (long long)uid,
                   (long long)tu_rand_below(seed, 30), (long long)(i + 1));
        else
            tu_sql(pg, "INSERT INTO " TABLE " VALUES (%lld, %lld, %lld, %lld)", (long long)uid,
                   (long long)tu_rand_below(seed, 30), (long long)(i + 1), (long long)a);
    }
}

int main(void)
{
    uint64_t seed = 20261127;
    feed *f;
    static const int shares[] = { 0, 10, 50, 90, 100 };
    int64_t hidden[AUTHORS];
    size_t sizes[] = { 1, 2, 3, 7, 20, MAX_PAGE };

    pg = tu_begin(&rds);
    make_table();
    f = tu_open_with(set_cfg);
    tap_diag("seed %llu", (unsigned long long)seed);

    /* Feeds: short (complete copy), long (partial copy), empty. */
    fill(1, 25, &seed, 1);
    fill(2, 150, &seed, 1);
    for (size_t s = 0; s < sizeof shares / sizeof shares[0]; s++) {
        size_t nh = (size_t)shares[s] * AUTHORS / 100;
        for (size_t i = 0; i < nh; i++)
            hidden[i] = (int64_t)i;
        for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++) {
            char what[128];
            for (int64_t uid = 1; uid <= 3; uid++) {
                snprintf(what, sizeof what, "uid %lld, %d%% hidden, limit %zu", (long long)uid,
                         shares[s], sizes[z]);
                ok(walk_equals(f, uid, hidden, nh, 0, sizes[z], what), "%s", what);
                snprintf(what, sizeof what, "uid %lld, %d%% hidden + ids %% 3, limit %zu",
                         (long long)uid, shares[s], sizes[z]);
                ok(walk_equals(f, uid, hidden, nh, 3, sizes[z], what), "%s", what);
            }
            /* cold again */
            feed_invalidate(f, 1);
            feed_invalidate(f, 2);
        }
    }
    feed_close(f);
    PQfinish(pg);
    redisFree(rds);
    return tap_done();
}
