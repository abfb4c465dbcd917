/* example_common.h -- what the two composite-score examples share
 * (examples/hot_replies.c, examples/leaderboard.c).
 *
 * Each example describes its feed in an ex_domain: its table and columns,
 * its layout, the order its rows must have, and how it prints them. The code
 * here does the rest, the same for both: options, schema, feed_open, the
 * model of what the feed must hold, the writes through SQL and
 * feed_on_insert, the walks through feed_page, and the checks. The examples
 * keep only what is theirs: the layout, the seed rows, the writers and the
 * printing.
 */
#ifndef EXAMPLE_COMMON_H
#define EXAMPLE_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>

#include "feedcache.h"

#define EX_NFIELDS  3    /* both examples pack three fields into their score */
#define EX_MAX_ROWS 16   /* the model's room: a dozen seed rows and a few more */

/* A row as the model keeps it: its id and its field values, most
 * significant first (the layout's order), as plain numbers. */
typedef struct ex_row {
    int64_t  id;
    uint64_t v[EX_NFIELDS];
} ex_row;

/* One example's feed, in its own words. */
typedef struct ex_domain {
    const char *name;           /* "hot_replies": the summary line */
    const char *owner;          /* "topic": --topic N, and the messages */
    const char *noun, *nouns;   /* "reply", "replies" */

    /* Where feedcache reads the feed (feed_config; score_column is "score"). */
    const char *table, *owner_column, *id_column;
    const char *key_prefix;     /* keys <key_prefix>:{owner} */
    uint32_t    max_len;        /* how many entries the cache keeps */

    const feed_field *fields;   /* the layout, most significant first */
    size_t            nfields;  /* EX_NFIELDS */

    /* The schema: its SQL, the file it came from, and the sql/score.sql
     * function it needs (the whole of sql/score.sql is loaded when the
     * database lacks that function). */
    const char *schema, *schema_file;
    const char *needs;          /* "name(argument types)", for to_regprocedure */

    /* Every query the shared code reads rows from returns the columns id,
     * the fields in layout order, and score. by_fields: the owner's rows
     * ($1) ordered by the fields themselves, then the id. */
    const char *by_fields;

    /* The order the feed must have, from the tuples alone: a qsort
     * comparator of two ex_row, best first. order_text says it in words. */
    int (*order)(const void *x, const void *y);
    const char *order_text;

    /* Printing: the field columns of a row (used by the walks and after each
     * write), the walk's column headings, and the spaces either side of the
     * id column in a walk. */
    void (*print_fields)(const uint64_t *v);
    const char *walk_header;
    int         id_pad;
} ex_domain;

typedef struct ex_app {
    const ex_domain *d;
    PGconn     *pg;
    feed       *f;
    feed_layout layout;
    int64_t     owner;        /* --topic N, --board N */
    size_t      limit;        /* --limit N */
    int         check;        /* --check: print failures and a summary only */
    int         checks, failures;
    char        sqlstate[6];  /* why the last ex_write was refused */
    char        errmsg[256];
    ex_row      model[EX_MAX_ROWS];   /* what the feed must hold */
    size_t      n;
} ex_app;

/* Output and checks. ex_say prints unless --check; ex_check counts a check
 * and prints why when it fails, returning cond. */
void ex_say(const ex_app *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int ex_check(ex_app *a, int cond, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Options, layout, PostgreSQL, the schema, feed_open, then an empty feed:
 * no rows for the owner, no cached copy. Returns 0 when ready, otherwise
 * the exit status (1: failed, 2: bad arguments). */
int ex_open(ex_app *a, const ex_domain *d, int argc, char **argv);

/* Print the summary line, close everything; returns the exit status. */
int ex_finish(ex_app *a);

/* The model row with that id, counted as a check; NULL when there is none. */
ex_row *ex_find(ex_app *a, int64_t id);

/* Run one writing statement with the parameters $1 = owner, $2 = row id,
 * then args, RETURNING the row's columns (see by_fields) and tell the cache.
 * Returns 1 and fills *got; or 0 when PostgreSQL refused it, with
 * a->sqlstate and a->errmsg set. */
int ex_write(ex_app *a, const char *query, int64_t id,
             const char *const *args, int nargs, ex_row *got);

/* A write that does not fit its fields: PostgreSQL must refuse it with
 * SQLSTATE 22003 (numeric_value_out_of_range), so that it changes nothing
 * and the cache is not told anything. what names it when it is not. */
void ex_refused(ex_app *a, const char *what, const char *query, int64_t id,
                const char *const *args, int nargs);

/* The row PostgreSQL returned must be the one the model predicts. */
void ex_expect_row(ex_app *a, const ex_row *got, const ex_row *want);

/* Walk the feed through feed_page, limit rows a page, checking every page
 * against the model; print prints the pages (unless --check). */
void ex_walk(ex_app *a, const char *title, size_t limit, int print);

/* Quietly, after the writes: walks with every page size from 1 to
 * max_limit over the cache the hooks kept, walks after a fresh rebuild
 * (what SQL holds now), and the rows as PostgreSQL sorts them by their
 * fields. */
void ex_recheck(ex_app *a, size_t max_limit);

#endif
