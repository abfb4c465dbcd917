/* apply.h -- what feedcache-sync does with decoded pgoutput messages:
 * collect, per batch of committed transactions, the feeds they touched, then
 * drop those feeds' cached copies and leases through the library.
 *
 * Why invalidation and not the hooks' in-place update: the slot delivers at
 * least once (after a restart it resends from the confirmed position) and
 * the hooks of the writers apply the same changes in their own order. An
 * in-place insert replayed after a later delete would resurrect the row. A
 * DEL of the copy and its lease is idempotent and commutes with every hook,
 * rebuild and replay: the copy is either absent (the next read rebuilds it
 * from SQL, which has the change) or rebuilt under a lease taken after the
 * DEL, so from a snapshot that includes the change (see the visibility
 * barrier in stream.h). */
#ifndef FEED_SYNC_APPLY_H
#define FEED_SYNC_APPLY_H

#include <stddef.h>
#include <stdint.h>

#include "feedcache.h"
#include "pgoutput.h"

/* Which of our tables a relation is: each one's rows are feeds of a family
 * of their own (the library's key namespaces). */
enum { SA_NONE, SA_FEEDS, SA_AUTHORS };

typedef struct sync_rel {
    uint32_t relid;
    int      ours;           /* SA_FEEDS: the feed table; SA_AUTHORS: the authors' table */
    int      owner_col;      /* its index in tuples */
} sync_rel;

typedef struct sync_batch {
    int64_t  *uids;          /* feeds touched, with repeats until flushed */
    size_t    nuids, cap_uids;
    int64_t  *authors;       /* authors whose posts changed, likewise */
    size_t    nauthors, cap_authors;
    int       truncate_authors;  /* a TRUNCATE of the authors' table */
    uint32_t *xids;          /* transactions to wait visible for */
    size_t    nxids, cap_xids;
    int       truncate;      /* a TRUNCATE: drop every copy */
    size_t    txns;          /* committed transactions in the batch */
    uint64_t  end_lsn;       /* end of the batch's last commit */
    int64_t   commit_ts;     /* its commit time, us since 2000-01-01 */
} sync_batch;

typedef struct sync_apply {
    const char *schema, *table, *owner_column;
    /* read-time merge: the authors' table, or NULL (sa_authors) */
    const char *author_schema, *author_table, *author_column;
    sync_rel   *rels;
    size_t      nrels, cap_rels;
    int         in_txn;      /* between Begin and Commit */
    uint32_t    xid;         /* of the open transaction */
    int         touched;     /* the open transaction changed a feed */
    sync_batch  batch;
    /* totals since start */
    uint64_t    changes, txns, feeds, authors, truncates;
    char        err[256];
} sync_apply;

void sa_init(sync_apply *a, const char *schema, const char *table,
             const char *owner_column);
void sa_free(sync_apply *a);

/* Follow the authors' table too (read-time merge): its changes name the
 * authors whose copies to drop, apart from the feeds'. */
void sa_authors(sync_apply *a, const char *schema, const char *table, const char *column);

/* Forget everything not yet applied and every relation: the stream is
 * starting again (reconnect), and will resend from the confirmed position. */
void sa_reset(sync_apply *a);

/* Take one decoded message. Returns 0, or -1 with a reason in a->err: the
 * table cannot be followed (the owner column is missing, or a change does
 * not say which feed it touched) or the stream is inconsistent. */
int sa_message(sync_apply *a, const pgo_msg *m);

/* Something committed waits to be applied. */
int sa_pending(const sync_apply *a);

/* The feeds of the batch, sorted and without repeats: *n of them in
 * a->batch.uids; sa_unique_authors likewise for a->batch.authors. */
void sa_unique(sync_apply *a, size_t *n);
void sa_unique_authors(sync_apply *a, size_t *n);

/* The batch was applied: start a new one. */
void sa_done(sync_apply *a);

#endif
