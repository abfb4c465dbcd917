/* pgoutput.h -- decoding PostgreSQL's logical replication stream: the
 * CopyData frames of START_REPLICATION (XLogData 'w', primary keepalive 'k')
 * and, inside XLogData, the messages of the built-in pgoutput plugin,
 * protocol version 1 (Begin, Commit, Origin, Relation, Type, Insert, Update,
 * Delete, Truncate, Message). Also the Standby Status Update ('r') a client
 * sends back.
 *
 * Pure functions over bytes: no I/O, no allocation. A decoded message points
 * into the caller's buffer, so it is valid as long as that buffer is. Every
 * read is bounds-checked; malformed input gives -1, never a crash
 * (tests/fuzz/fuzz_pgoutput.c). References: PostgreSQL's "Streaming
 * Replication Protocol" and "Logical Replication Message Formats" chapters.
 */
#ifndef FEED_PGOUTPUT_H
#define FEED_PGOUTPUT_H

#include <stddef.h>
#include <stdint.h>

#define PGO_MAX_COLS 1664   /* PostgreSQL's most columns in a tuple */

/* A CopyData frame of the replication stream. */
typedef struct pgo_frame {
    char           kind;            /* 'w' XLogData, 'k' keepalive */
    uint64_t       wal_start;       /* 'w': where this message's WAL starts */
    uint64_t       wal_end;         /* the server's current end of WAL */
    int64_t        send_time;       /* microseconds since 2000-01-01 */
    int            reply_requested; /* 'k': answer now or be disconnected */
    const uint8_t *data;            /* 'w': the pgoutput message */
    size_t         len;
} pgo_frame;

int pgo_frame_decode(const uint8_t *buf, size_t len, pgo_frame *out);

/* A Standby Status Update: 34 bytes written to out. */
#define PGO_STATUS_LEN 34
size_t pgo_status_encode(uint8_t out[PGO_STATUS_LEN], uint64_t written,
                         uint64_t flushed, uint64_t applied, int64_t now_us,
                         int reply_requested);

/* One column of a tuple: 'n' NULL, 'u' unchanged TOASTed value (not sent),
 * 't' text (data, len; not NUL-terminated), 'b' binary. */
typedef struct pgo_value {
    char        kind;
    const char *data;
    uint32_t    len;
} pgo_value;

typedef struct pgo_tuple {
    uint16_t  ncols;
    pgo_value cols[PGO_MAX_COLS];
} pgo_tuple;

typedef struct pgo_column {
    uint8_t     flags;      /* 1: part of the replica identity (key) */
    const char *name;       /* NUL-terminated, in the buffer */
    uint32_t    type_oid;
    int32_t     typmod;
} pgo_column;

typedef struct pgo_msg {
    char kind;              /* 'B' 'C' 'O' 'R' 'Y' 'I' 'U' 'D' 'T' 'M' */
    /* B: final_lsn, commit_ts, xid.  C: commit_lsn, end_lsn, commit_ts. */
    uint64_t    lsn;        /* B final_lsn; C commit_lsn; O, M lsn */
    uint64_t    end_lsn;    /* C */
    int64_t     commit_ts;  /* B, C: microseconds since 2000-01-01 */
    uint32_t    xid;        /* B */
    uint8_t     flags;      /* C, M: flags; T: options (1 CASCADE, 2 RESTART IDENTITY) */
    /* R, Y: relid/oid, namespace, name.  I, U, D: relid. */
    uint32_t    relid;
    const char *nspname;
    const char *relname;    /* R, Y name; O origin name; M prefix */
    char        replident;  /* R: 'd' default, 'n' nothing, 'f' full, 'i' index */
    uint16_t    ncols;      /* R */
    pgo_column  cols[PGO_MAX_COLS];
    /* U, D: the old tuple, kind 'K' (key columns only) or 'O' (whole row);
     * 0 when absent. I, U: the new tuple. */
    char        old_kind;
    pgo_tuple   old_tuple;
    pgo_tuple   new_tuple;
    /* T: nrels relation ids, read with pgo_truncate_relid(). M: content. */
    uint32_t       nrels;
    const uint8_t *raw;
    uint32_t       raw_len;
} pgo_msg;

/* Decode one pgoutput message. Returns 0, or -1 when the message is
 * malformed (short, a string without its NUL, a count past the end, bytes
 * left over, an unknown kind). */
int pgo_msg_decode(const uint8_t *buf, size_t len, pgo_msg *out);

/* The i-th relation id of a Truncate message (i < nrels). */
uint32_t pgo_truncate_relid(const pgo_msg *m, uint32_t i);

/* A text column as a decimal int64: digits with an optional '-', nothing
 * else, no overflow. Returns 0 or -1 (NULL, not text, malformed). */
int pgo_value_i64(const pgo_value *v, int64_t *out);

/* "X/Y" as PostgreSQL prints an LSN; buf >= 18 bytes. */
void pgo_lsn_format(uint64_t lsn, char *buf, size_t buflen);

/* Microseconds between the Unix epoch and PostgreSQL's (2000-01-01). */
#define PGO_EPOCH_DIFF_US 946684800000000LL

#endif
