/* feedcache_sync.c -- feedcache-sync: keeps feedcache's cached copies right
 * from PostgreSQL's own log, so that no committed write is missed: writes
 * from psql or any language, and writes whose hook never ran (the writer died
 * between COMMIT and hook).
 *
 * The loop: read the slot's stream (stream.c), decode it (pgoutput.c),
 * collect the feeds each committed transaction touched (apply.c); when the
 * stream pauses, or a batch is big or old enough, wait until the batch's
 * transactions are visible to new snapshots, drop those feeds' copies and
 * leases through the library (feed_invalidate_many; a TRUNCATE:
 * feed_invalidate_all), and only then confirm the batch's end to PostgreSQL.
 * With --author-table (read-time merge) the authors' table is followed the
 * same way, its changes dropping the authors' copies
 * (feed_author_invalidate_many, feed_author_invalidate_all).
 * A crash at any point resumes from the last confirmed position and redoes
 * at most the batches after it, which is harmless: dropping a copy twice is
 * the same as once.
 *
 * Exit status: 0 after SIGTERM or SIGINT (what was applied is confirmed
 * first), 2 for bad flags, 1 for a fatal error (reason on stderr).
 * Flags: feedcache-sync --help.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "apply.h"
#include "feedcache.h"
#include "pgoutput.h"
#include "stream.h"

#define BATCH_FEEDS     10000   /* flush a batch past this many feed mentions */
#define BATCH_MS        50      /* ... or when its first commit waits this long */
#define STATUS_MS       1000    /* a status update at least this often */
#define INVALIDATE_CHUNK 1000   /* feeds per feed_invalidate_many call */
#define BACKOFF_MIN_MS  100
#define BACKOFF_MAX_MS  5000

typedef struct options {
    feed_config cfg;
    const char *slot, *publication, *metrics_file;
    unsigned    stats_interval_s;
} options;

static volatile sig_atomic_t stop_requested, dump_requested;

/* Tests only (tests/t_sync_chaos.c): FEEDCACHE_SYNC_TEST_DELAY_MS=N waits a
 * random 0..N ms before applying each batch, so that hooks and the log
 * interleave in every order. */
static int test_delay_ms;

static void on_stop(int sig) { (void)sig; stop_requested = 1; }
static void on_dump(int sig) { (void)sig; dump_requested = 1; }

/* ---------------------------------------------------------------- state */

typedef struct sync_state {
    options     *opt;
    feed        *f;
    sync_pg      pg;
    int          streaming;         /* START_REPLICATION done on pg.repl */
    sync_apply   apply;
    pgo_msg     *msg;               /* big (tuples): on the heap, reused */
    uint64_t     received;          /* end of the last WAL data seen */
    uint64_t     applied;           /* everything before it is in Redis */
    uint64_t     reported;          /* last position sent to PostgreSQL */
    int64_t      status_at;         /* monotonic ms of the last status update */
    int64_t      batch_since;       /* monotonic ms of the batch's first commit, 0: none */
    /* figures for the log and the metrics */
    uint64_t     server_wal_end, slot_confirmed;
    int64_t      last_lag_ms, max_lag_ms;   /* commit -> cache, last batch, max this period */
    uint64_t     batches, redis_retries, pg_reconnects, invalidated_keys;
    int64_t      started_ms, stats_at;
} sync_state;

static int64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t wall_pg_us(void)   /* now, in PostgreSQL's epoch */
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000 - PGO_EPOCH_DIFF_US;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    va_list ap;

    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    fprintf(stderr, "%s feedcache-sync: ", when);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* Sleep ms, or less when a stop is requested. */
static void nap(int64_t ms)
{
    int64_t end = mono_ms() + ms;

    while (!stop_requested && mono_ms() < end) {
        struct timespec ts = { 0, 20 * 1000000L };
        nanosleep(&ts, NULL);
    }
}

static int64_t backoff_next(int64_t ms)
{
    return ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : ms * 2;
}

/* ---------------------------------------------------------------- metrics */

/* The figures as Prometheus text: to the metrics file (written whole, then
 * renamed, so a scraper never reads half of it) and, summed up, to the log. */
static void write_metrics(sync_state *s)
{
    char tmp[4096];
    FILE *out;
    uint64_t lag_bytes = s->server_wal_end > s->slot_confirmed
                       ? s->server_wal_end - s->slot_confirmed : 0;

    if (!s->opt->metrics_file)
        return;
    snprintf(tmp, sizeof tmp, "%s.tmp", s->opt->metrics_file);
    if (!(out = fopen(tmp, "w"))) {
        say("metrics file %s: %s", tmp, strerror(errno));
        return;
    }
    fprintf(out,
            "# feedcache-sync metrics (Prometheus text format)\n"
            "feedcache_sync_lag_bytes %llu\n"
            "feedcache_sync_last_commit_to_cache_ms %lld\n"
            "feedcache_sync_max_commit_to_cache_ms %lld\n"
            "feedcache_sync_server_wal_end_bytes %llu\n"
            "feedcache_sync_confirmed_bytes %llu\n"
            "feedcache_sync_applied_bytes %llu\n"
            "feedcache_sync_transactions_total %llu\n"
            "feedcache_sync_changes_total %llu\n"
            "feedcache_sync_feeds_invalidated_total %llu\n"
            "feedcache_sync_authors_invalidated_total %llu\n"
            "feedcache_sync_truncates_total %llu\n"
            "feedcache_sync_batches_total %llu\n"
            "feedcache_sync_redis_retries_total %llu\n"
            "feedcache_sync_pg_reconnects_total %llu\n"
            "feedcache_sync_uptime_seconds %lld\n",
            (unsigned long long)lag_bytes, (long long)s->last_lag_ms, (long long)s->max_lag_ms,
            (unsigned long long)s->server_wal_end, (unsigned long long)s->slot_confirmed,
            (unsigned long long)s->applied, (unsigned long long)s->apply.txns,
            (unsigned long long)s->apply.changes, (unsigned long long)s->apply.feeds,
            (unsigned long long)s->apply.authors, (unsigned long long)s->apply.truncates, (unsigned long long)s->batches,
            (unsigned long long)s->redis_retries, (unsigned long long)s->pg_reconnects,
            (long long)((mono_ms() - s->started_ms) / 1000));
    if (fclose(out) != 0 || rename(tmp, s->opt->metrics_file) != 0)
        say("metrics file %s: %s", s->opt->metrics_file, strerror(errno));
}

static void report(sync_state *s)
{
    char confirmed[24], end[24];
    uint64_t lag_bytes;

    if (s->pg.sql)   /* the server's own view: WAL end and the slot's confirmed position */
        spg_slot_position(&s->pg, s->opt->slot, &s->server_wal_end, &s->slot_confirmed);
    lag_bytes = s->server_wal_end > s->slot_confirmed ? s->server_wal_end - s->slot_confirmed : 0;
    pgo_lsn_format(s->slot_confirmed, confirmed, sizeof confirmed);
    pgo_lsn_format(s->server_wal_end, end, sizeof end);
    say("slot %s confirmed %s, WAL end %s: lag %llu bytes; commit->cache last %lld ms, "
        "max %lld ms; %llu transactions, %llu changes, %llu feeds invalidated, "
        "%llu truncates, %llu Redis retries, %llu PostgreSQL reconnects",
        s->opt->slot, confirmed, end, (unsigned long long)lag_bytes,
        (long long)s->last_lag_ms, (long long)s->max_lag_ms,
        (unsigned long long)s->apply.txns, (unsigned long long)s->apply.changes,
        (unsigned long long)s->apply.feeds, (unsigned long long)s->apply.truncates,
        (unsigned long long)s->redis_retries, (unsigned long long)s->pg_reconnects);
    write_metrics(s);
    s->max_lag_ms = 0;
    s->stats_at = mono_ms();
}

/* ---------------------------------------------------------------- confirm */

static int send_status(sync_state *s)
{
    if (!s->pg.repl || !s->streaming)
        return SPG_RETRY;
    if (spg_status(&s->pg, s->received > s->applied ? s->received : s->applied,
                   s->applied) != SPG_OK)
        return SPG_RETRY;
    s->reported = s->applied;
    s->status_at = mono_ms();
    return SPG_OK;
}

/* ---------------------------------------------------------------- apply */

/* Every copy of the feeds (feeds) and of the authors (authors), dropped
 * once. */
static int drop_every(sync_state *s, int feeds, int authors)
{
    uint64_t n = 0;

    if (feeds && feed_invalidate_all(s->f, &n) != FEED_OK)
        return -1;
    s->invalidated_keys += n;
    n = 0;
    if (authors && feed_author_invalidate_all(s->f, &n) != FEED_OK)
        return -1;
    s->invalidated_keys += n;
    return 0;
}

/* TRUNCATE: drop every copy, then again once every lease taken before the
 * first pass has expired: a rebuild that read the rows before the TRUNCATE
 * may install while the first SCAN runs (and be missed), but never after
 * its lease expired. Status updates keep the stream alive meanwhile. */
static int drop_all(sync_state *s, int feeds, int authors)
{
    int64_t first = mono_ms();

    if (drop_every(s, feeds, authors) != 0)
        return -1;
    while (mono_ms() - first < (int64_t)s->opt->cfg.lease_ms + 10) {
        if (stop_requested)
            return -2;        /* not applied: resent after the restart */
        send_status(s);
        nap(100);
    }
    return drop_every(s, feeds, authors);
}

/* The copies of n feeds (or authors' copies: authors), in chunks. */
static int drop_feeds(sync_state *s, const int64_t *uids, size_t n, int authors)
{
    for (size_t i = 0; i < n; i += INVALIDATE_CHUNK) {
        size_t k = n - i < INVALIDATE_CHUNK ? n - i : INVALIDATE_CHUNK;
        if ((authors ? feed_author_invalidate_many(s->f, uids + i, k)
                     : feed_invalidate_many(s->f, uids + i, k)) != FEED_OK)
            return -1;
    }
    return 0;
}

/* One batch into Redis: TRUNCATEs drop every copy of their table's family,
 * the other changes the copies of the feeds and authors they named. */
static int drop_batch(sync_state *s, size_t n, size_t na)
{
    sync_batch *b = &s->apply.batch;
    int rc;

    if ((b->truncate || b->truncate_authors) &&
        (rc = drop_all(s, b->truncate, b->truncate_authors)) != 0)
        return rc;
    if (!b->truncate && drop_feeds(s, b->uids, n, 0) != 0)
        return -1;
    if (!b->truncate_authors && drop_feeds(s, b->authors, na, 1) != 0)
        return -1;
    return 0;
}

/* Apply the batch: barrier, Redis, then the confirmable position moves.
 * Redis failures are retried with backoff, never skipped (the position is
 * not confirmed meanwhile); returns SPG_RETRY when PostgreSQL failed (the
 * batch is dropped and resent after the reconnect), SPG_FATAL when a stop
 * was requested before the batch could be applied, or (once: the last try
 * while stopping) when Redis failed once. */
static int flush(sync_state *s, int once)
{
    sync_batch *b = &s->apply.batch;
    int64_t backoff = BACKOFF_MIN_MS;
    size_t n, na;
    int v;

    if (!sa_pending(&s->apply))
        return SPG_OK;
    if (once && (b->truncate || b->truncate_authors))   /* needs lease_ms: leave it to the restart */
        return SPG_FATAL;
    if (test_delay_ms > 0)   /* tests only: apply late, in any interleaving */
        nap(rand() % (test_delay_ms + 1));
    /* Wait until a snapshot taken now sees every transaction of the batch:
     * a rebuild whose lease outlives our DEL then reads SQL after them. */
    while ((v = spg_visible(&s->pg, b->xids, b->nxids)) == 0) {
        struct timespec ts = { 0, 200 * 1000L };
        if (stop_requested && !once)
            return SPG_FATAL;
        nanosleep(&ts, NULL);
    }
    if (v < 0)
        return SPG_RETRY;
    sa_unique(&s->apply, &n);
    sa_unique_authors(&s->apply, &na);
    for (;;) {
        int failed = drop_batch(s, n, na);
        if (!failed)
            break;
        if (once || failed == -2)
            return SPG_FATAL;
        s->redis_retries++;
        say("Redis: %s; retrying in %lld ms (position %s not confirmed)",
            feed_errmsg(s->f), (long long)backoff, "of this batch");
        if (send_status(s) != SPG_OK)
            return SPG_RETRY;
        nap(backoff);
        if (stop_requested)
            return SPG_FATAL;
        backoff = backoff_next(backoff);
    }
    s->apply.feeds += b->truncate ? 0 : n;
    s->apply.authors += b->truncate_authors ? 0 : na;
    s->apply.truncates += (uint64_t)b->truncate + (uint64_t)b->truncate_authors;
    s->batches++;
    s->applied = b->end_lsn > s->applied ? b->end_lsn : s->applied;
    s->last_lag_ms = (wall_pg_us() - b->commit_ts) / 1000;
    if (s->last_lag_ms > s->max_lag_ms)
        s->max_lag_ms = s->last_lag_ms;
    sa_done(&s->apply);
    s->batch_since = 0;
    return SPG_OK;
}

/* ---------------------------------------------------------------- stream */

static int on_frame(sync_state *s, const uint8_t *buf, size_t len)
{
    pgo_frame fr;

    if (pgo_frame_decode(buf, len, &fr) != 0) {
        snprintf(s->pg.err, sizeof s->pg.err, "malformed CopyData frame (%zu bytes)", len);
        return SPG_RETRY;
    }
    if (fr.kind == 'k') {
        /* Nothing in flight and everything received applied: the walsender
         * has nothing before wal_end left for us (transactions without
         * changes to the table are not sent), so confirm up to there, or
         * the slot would hold WAL written for other tables forever. */
        if (!s->apply.in_txn && !sa_pending(&s->apply) && fr.wal_end > s->applied)
            s->applied = s->received = fr.wal_end;
        if (fr.reply_requested)
            return send_status(s);
        return SPG_OK;
    }
    if (fr.wal_start > s->received)
        s->received = fr.wal_start;
    if (pgo_msg_decode(fr.data, fr.len, s->msg) != 0) {
        snprintf(s->pg.err, sizeof s->pg.err, "malformed pgoutput message (%zu bytes)", fr.len);
        return SPG_RETRY;
    }
    if (sa_message(&s->apply, s->msg) != 0) {
        snprintf(s->pg.err, sizeof s->pg.err, "%s", s->apply.err);
        return SPG_FATAL;
    }
    if (s->msg->kind == 'C' && s->batch_since == 0)
        s->batch_since = mono_ms();
    return SPG_OK;
}

/* Should the batch go now? When the stream has nothing more right now, or
 * the batch is big or old: latency at low rates, batching at high ones. */
static int batch_due(sync_state *s, int idle)
{
    return sa_pending(&s->apply) && !s->apply.in_txn &&
           (idle || s->apply.batch.nuids + s->apply.batch.nauthors >= BATCH_FEEDS ||
            mono_ms() - s->batch_since >= BATCH_MS);
}

/* Follow the stream until it fails (SPG_RETRY), a fatal error, or a stop. */
static int follow(sync_state *s)
{
    int rc;

    for (;;) {
        char *buf = NULL;
        int n, idle;

        if (dump_requested) {
            dump_requested = 0;
            report(s);
        }
        if (stop_requested)
            return SPG_OK;
        /* Do not wait when a batch could go now: an empty socket is the
         * signal to flush it. */
        n = spg_read(&s->pg, &buf, sa_pending(&s->apply) && !s->apply.in_txn ? 0 : 100);
        if (n < 0)
            return n;
        idle = n == 0;
        if (n > 0) {
            rc = on_frame(s, (const uint8_t *)buf, (size_t)n);
            PQfreemem(buf);
            if (rc != SPG_OK)
                return rc;
        }
        if (batch_due(s, idle) && (rc = flush(s, 0)) != SPG_OK)
            return rc;
        if (s->applied != s->reported || mono_ms() - s->status_at >= STATUS_MS)
            if ((rc = send_status(s)) != SPG_OK)
                return rc;
        if (mono_ms() - s->stats_at >= (int64_t)s->opt->stats_interval_s * 1000)
            report(s);
    }
}

/* A new slot starts at its creation: changes before it were never sent, and
 * copies cached before then may lack writes no hook applied. Drop them all
 * once, so that from now on every copy is right. */
static int first_run(sync_state *s)
{
    int64_t backoff = BACKOFF_MIN_MS;

    int rc;

    say("new slot: dropping every cached copy under prefix \"%s\" once", s->opt->cfg.key_prefix);
    while ((rc = drop_all(s, 1, s->opt->cfg.author_table != NULL)) != 0) {
        if (rc == -1) {
            say("Redis: %s; retrying in %lld ms", feed_errmsg(s->f), (long long)backoff);
            nap(backoff);
            backoff = backoff_next(backoff);
        }
        if (stop_requested) {
            /* Unfinished: without the slot, the next start does it again. */
            spg_drop_slot(&s->pg, s->opt->slot);
            return -1;
        }
    }
    return 0;
}

static int run(sync_state *s)
{
    int64_t backoff = BACKOFF_MIN_MS;

    while (!stop_requested) {
        int created = 0, rc;

        sa_reset(&s->apply);
        s->batch_since = 0;
        s->streaming = 0;
        rc = spg_open(&s->pg, s->opt->cfg.pg_conninfo, s->opt->cfg.table,
                      s->opt->cfg.author_table, s->opt->slot, s->opt->publication, &created);
        if (rc == SPG_OK) {
            say("following slot %s (publication %s, table %s.%s%s%s%s%s)", s->opt->slot,
                s->opt->publication, s->pg.schema, s->opt->cfg.table,
                s->opt->cfg.author_table ? ", authors' table " : "",
                s->opt->cfg.author_table ? s->pg.author_schema : "",
                s->opt->cfg.author_table ? "." : "",
                s->opt->cfg.author_table ? s->opt->cfg.author_table : "");
            backoff = BACKOFF_MIN_MS;
            s->apply.schema = s->pg.schema;
            s->apply.author_schema = s->pg.author_schema;
            /* A new slot: drop every copy before following (and confirming). */
            if (created && first_run(s) != 0)
                break;
            if ((rc = spg_start(&s->pg, s->opt->slot, s->opt->publication)) == SPG_OK) {
                s->streaming = 1;
                rc = follow(s);
            }
        }
        if (rc == SPG_OK || stop_requested)
            break;
        if (rc == SPG_FATAL) {
            fprintf(stderr, "feedcache-sync: %s\n", s->pg.err);
            return 1;
        }
        s->pg_reconnects++;
        say("PostgreSQL: %s; reconnecting in %lld ms", s->pg.err, (long long)backoff);
        spg_close(&s->pg);
        nap(backoff);
        backoff = backoff_next(backoff);
    }
    /* Stopping: apply what is complete if Redis lets us right now, confirm
     * what was applied, and say goodbye. */
    if (s->pg.repl && s->streaming) {
        if (sa_pending(&s->apply) && !s->apply.in_txn && flush(s, 1) != SPG_OK)
            say("stopping with a batch not applied: it will be resent");
        send_status(s);
        PQputCopyEnd(s->pg.repl, NULL);
        PQflush(s->pg.repl);
    }
    report(s);
    say("stopped; confirmed up to the last applied commit");
    return 0;
}

/* ---------------------------------------------------------------- flags */

/* The program's own flags; each field of feed_config is a flag too, named
 * and checked by the library (feed_config_field_get, feed_config_set). */
enum { O_SLOT = 256, O_PUB, O_METRICS, O_STATS, O_HELP, O_CONFIG };

static const struct option own_opts[] = {
    { "slot", 1, NULL, O_SLOT },                { "publication", 1, NULL, O_PUB },
    { "metrics-file", 1, NULL, O_METRICS },     { "stats-interval", 1, NULL, O_STATS },
    { "help", 0, NULL, O_HELP },
};
#define N_OWN (sizeof own_opts / sizeof own_opts[0])

static void usage(FILE *out)
{
    fputs("usage: feedcache-sync [options]\n"
          "Follow PostgreSQL's logical replication slot (plugin pgoutput) and drop the\n"
          "cached copy of every feed a committed transaction changed.\n\n"
          "  --slot NAME                logical replication slot (default feedcache), created\n"
          "                             if missing\n"
          "  --publication NAME         publication of the table (default feedcache), created\n"
          "                             if missing\n"
          "  --metrics-file PATH        write metrics (Prometheus text) there every stats\n"
          "                             interval, on SIGUSR1 and at exit\n"
          "  --stats-interval SEC       a log line with the lag every SEC seconds (default 10)\n"
          "The fields of feed_config (give the values the application uses; with\n"
          "--author-table the authors' table of read-time merge is followed too):\n", out);
    for (size_t i = 0; i < feed_config_field_count(); i++) {
        const feed_config_field *d = feed_config_field_get(i);
        int num = d->type == FEED_CONFIG_INTEGER;
        char flag[48], tail[96];

        snprintf(flag, sizeof flag, "%s %s", d->flag, num ? "N" : "STR");
        if (num)
            snprintf(tail, sizeof tail, "(%lld..%lld, default %s)", (long long)d->min,
                     (long long)d->max, d->dflt);
        else
            snprintf(tail, sizeof tail, "(default %s%s%s)", d->dflt ? "\"" : "",
                     d->dflt ? d->dflt : "none", d->dflt ? "\"" : "");
        fprintf(out, "  --%-24s %s%s%s\n", flag, d->help,
                29 + strlen(d->help) + strlen(tail) < 80 ? " " : "\n                             ",
                tail);
    }
    fputs("Exit status: 0 after SIGTERM/SIGINT, 1 fatal error, 2 bad flags.\n", out);
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    unsigned long long v;

    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || *end || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Slot names allow [a-z0-9_]; publication names get the same rule, so that
 * both can be written into START_REPLICATION without quoting games. */
static int plain_name(const char *s)
{
    if (!*s || strlen(s) > 63)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '_'))
            return 0;
    return 1;
}

/* own_opts, one option per field of feed_config, the end; NULL: no memory. */
static struct option *long_opts(void)
{
    size_t n = feed_config_field_count();
    struct option *o = calloc(N_OWN + n + 1, sizeof *o);

    if (!o)
        return NULL;
    memcpy(o, own_opts, sizeof own_opts);
    for (size_t i = 0; i < n; i++)
        o[N_OWN + i] = (struct option){ feed_config_field_get(i)->flag, 1, NULL, O_CONFIG };
    return o;
}

/* Returns 0, 1 (--help: exit 0) or -1 (exit 2). */
static int parse_flags(int argc, char **argv, options *o, const struct option *opts)
{
    int ch, idx;

    feed_config_init(&o->cfg);
    o->slot = o->publication = "feedcache";
    o->stats_interval_s = 10;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "", opts, &idx)) != -1) {
        switch (ch) {
        case O_HELP:    usage(stdout); return 1;
        case O_SLOT:    o->slot = optarg; break;
        case O_PUB:     o->publication = optarg; break;
        case O_METRICS: o->metrics_file = optarg; break;
        case O_STATS:
            if (parse_u32(optarg, &o->stats_interval_s) != 0) {
                fprintf(stderr, "feedcache-sync: --stats-interval wants a number, not \"%s\"\n",
                        optarg);
                return -1;
            }
            break;
        case O_CONFIG:  /* the message starts with the name given: the flag's */
            if (feed_config_set(&o->cfg, opts[idx].name, optarg) != FEED_OK) {
                fprintf(stderr, "feedcache-sync: --%s\n", feed_errmsg(NULL));
                return -1;
            }
            break;
        default:
            fprintf(stderr, "feedcache-sync: unknown flag or missing value: %s\n",
                    argv[optind - 1]);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "feedcache-sync: unexpected argument: %s\n", argv[optind]);
        return -1;
    }
    if (!plain_name(o->slot) || !plain_name(o->publication)) {
        fprintf(stderr, "feedcache-sync: --slot and --publication take 1..63 of [a-z0-9_]\n");
        return -1;
    }
    if (o->stats_interval_s == 0) {
        fprintf(stderr, "feedcache-sync: --stats-interval must be > 0\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static sync_state s;
    options opt;
    struct option *opts;
    struct sigaction sa;
    int rc;

    if (!(opts = long_opts())) {
        fprintf(stderr, "feedcache-sync: out of memory\n");
        return 1;
    }
    rc = parse_flags(argc, argv, &opt, opts);
    free(opts);   /* optarg points into argv, not into opts */
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_dump;
    sigaction(SIGUSR1, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (getenv("FEEDCACHE_SYNC_TEST_DELAY_MS"))
        test_delay_ms = atoi(getenv("FEEDCACHE_SYNC_TEST_DELAY_MS"));
    srand((unsigned)getpid());
    s.opt = &opt;
    s.started_ms = s.stats_at = s.status_at = mono_ms();
    if (!(s.msg = malloc(sizeof *s.msg))) {
        fprintf(stderr, "feedcache-sync: out of memory\n");
        return 1;
    }
    rc = feed_open(&s.f, &opt.cfg);
    if (rc == FEED_EINVAL) {
        fprintf(stderr, "feedcache-sync: %s\n", feed_errmsg(NULL));
        free(s.msg);
        return 2;
    }
    if (rc != FEED_OK && rc != FEED_EUNAVAILABLE) {
        fprintf(stderr, "feedcache-sync: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
        free(s.msg);
        return 1;
    }
    /* Neither store answered: keep trying, as after any outage. */
    while (rc == FEED_EUNAVAILABLE && !stop_requested) {
        say("%s; retrying", feed_errmsg(NULL));
        nap(BACKOFF_MAX_MS / 5);
        rc = feed_open(&s.f, &opt.cfg);
    }
    if (rc != FEED_OK) {
        free(s.msg);
        if (stop_requested)
            return 0;
        fprintf(stderr, "feedcache-sync: %s: %s\n", feed_strerror(rc), feed_errmsg(NULL));
        return 1;
    }
    sa_init(&s.apply, NULL, opt.cfg.table, opt.cfg.owner_column);
    if (opt.cfg.author_table)
        sa_authors(&s.apply, NULL, opt.cfg.author_table, opt.cfg.author_column);
    rc = run(&s);
    spg_close(&s.pg);
    free(s.pg.schema);
    free(s.pg.author_schema);
    sa_free(&s.apply);
    feed_close(s.f);
    free(s.msg);
    return rc;
}
