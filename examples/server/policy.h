/* policy.h -- what the example decides around the library that the library
 * could one day take over. Each function names the library call that could
 * replace it (examples/README.md, "Library policy", says why each stays for
 * now); it is kept here, apart from the transport and the routes, so that
 * replacing it changes this file and one line per caller. What was here and
 * is the library's now: feed_error_kind (which codes mean retry) and
 * feed_on_unknown_write (dropping copies after a failed hook or an unknown
 * commit).
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

/* At start: fail on what retrying cannot fix (feed_error_kind of feed_open's
 * code is not FEED_KIND_RETRY: a bad config, a wrong password, a missing
 * table: 1 with the reason on stderr), warn and go on when a store is merely
 * down (0). Proposed: feed_open with open_unavailable, whose refusals are
 * the fatal cases, then feed_health for the warnings. */
int policy_probe(const feed_config *cfg, const char *prog);

#endif /* FEED_SERVER_POLICY_H */
