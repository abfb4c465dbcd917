/* policy.h -- what the example decides around the library that the library
 * could one day take over. Each function names the library call that could
 * replace it (examples/README.md, "Library policy", says why each stays for
 * now); it is kept here, apart from the transport and the routes, so that
 * replacing it changes this file and one line per caller.
 */
#ifndef FEED_SERVER_POLICY_H
#define FEED_SERVER_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "feedcache.h"

/* A handle that is there whenever a store answers: *slot is opened on first
 * use and, after an open that failed (both stores down), tried again at most
 * once per retry_ms (*attempt_us: the last try). NULL while no store answers.
 * Proposed: feed_config.open_unavailable = 1, with which feed_open returns a
 * handle even when neither store answers, reconnecting under retry_ms like
 * any lost connection. */
feed *policy_handle(feed **slot, int64_t *attempt_us);

/* At start: fail on what retrying cannot fix (a bad config, a wrong password,
 * a missing table: 1 with the reason on stderr), warn and go on when a store
 * is merely down (0). Proposed: feed_open with open_unavailable, whose
 * refusals are the fatal cases, then feed_health for the warnings. */
int policy_probe(const feed_config *cfg, const char *prog);

/* A FEED_E* code as an HTTP status: 400 for the caller's mistakes, 503 when
 * a store that was needed is down (retry later), 500 otherwise. Proposed:
 * feed_error_kind(rc) -> FEED_KIND_ARGUMENT, FEED_KIND_UNAVAILABLE,
 * FEED_KIND_INTERNAL, so that no application keeps a table of codes. */
unsigned policy_status(int rc);

/* After a hook failed, or a commit whose outcome is unknown: drop each
 * feed's cached copy with feed_invalidate (a plain DEL, which an ACL that
 * refuses the hooks' scripts may still allow), stopping at the first
 * failure (Redis away or refusing: the library keeps the rest on its repair
 * list). Returns how many were dropped. The blocking backend's; the loops
 * do the same with feed_async_invalidate. Proposed: the hooks do it
 * themselves when Redis refuses the script, and say which happened
 * (feed_hook_outcome: applied, dropped, repair pending). */
size_t policy_drop(feed *f, const int64_t *uids, size_t n);
/* The same for authors' copies, after a failed author hook:
 * feed_author_invalidate each (the same plain DEL), stopping at the first
 * failure. The loops: feed_async_author_invalidate. */
size_t policy_drop_authors(feed *f, const int64_t *authors, size_t n);

#endif /* FEED_SERVER_POLICY_H */
