/* stream.h -- the PostgreSQL side of feedcache-sync: a plain connection
 * (set-up, visibility barrier) and a replication=database connection that
 * follows the slot. */
#ifndef FEED_SYNC_STREAM_H
#define FEED_SYNC_STREAM_H

#include <stddef.h>
#include <stdint.h>
#include <libpq-fe.h>

typedef struct sync_pg {
    PGconn *sql;           /* plain: set-up, barrier */
    PGconn *repl;          /* replication=database, in COPY BOTH once started */
    char   *schema;        /* the feed table's schema, as the catalog says */
    char   *author_schema; /* the authors' table's (read-time merge), or NULL */
    char    err[512];
} sync_pg;

/* What went wrong: retrying may help (the server is down, restarting, the
 * slot is still held by a previous process), or it will not (no rights,
 * wal_level, a publication without the table): the program then exits 1. */
enum { SPG_OK = 0, SPG_RETRY = -1, SPG_FATAL = -2 };

/* Connect both, make sure the publication (of table, and of author_table
 * unless it is NULL, publishing insert, update, delete and truncate) and
 * the logical slot (plugin pgoutput, this database) exist, creating them
 * when missing (*created = 1 when the slot is new). An existing
 * publication that lacks a table is an error that says what to do. */
int spg_open(sync_pg *s, const char *conninfo, const char *table, const char *author_table,
             const char *slot, const char *publication, int *created);

/* START_REPLICATION from the slot's confirmed position. */
int spg_start(sync_pg *s, const char *slot, const char *publication);

/* Drop the slot (not started): a first run that could not finish. */
int spg_drop_slot(sync_pg *s, const char *slot);
void spg_close(sync_pg *s);

/* The next CopyData frame: returns its length with *buf owned by the caller
 * (PQfreemem), 0 when none arrived within timeout_ms, SPG_RETRY when the
 * stream ended or failed (reason in s->err). */
int spg_read(sync_pg *s, char **buf, int timeout_ms);

/* A Standby Status Update: written up to received, flushed and applied up
 * to applied. Returns SPG_OK or SPG_RETRY. */
int spg_status(sync_pg *s, uint64_t received, uint64_t applied);

/* Are the transactions xids[0..n) visible to every snapshot taken from now
 * on? A commit reaches the WAL, and so the slot, a moment before the
 * committing backend leaves the proc array; a snapshot taken in between
 * does not see it. Returns 1 (all visible), 0 (some still finishing: ask
 * again) or SPG_RETRY. */
int spg_visible(sync_pg *s, const uint32_t *xids, size_t n);

/* The server's current WAL end and the slot's confirmed position, for lag
 * reports; returns SPG_OK or SPG_RETRY. */
int spg_slot_position(sync_pg *s, const char *slot, uint64_t *wal_end,
                      uint64_t *confirmed);

#endif
