/* backend_sync.h -- the blocking backend (backend_sync.c). */
#ifndef FEED_SERVER_BACKEND_SYNC_H
#define FEED_SERVER_BACKEND_SYNC_H

#include "server.h"

/* A state for one thread: its handle is opened now (policy_handle), its
 * write connection on the first write. NULL when out of memory. */
void *backend_sync_new(void);
extern const backend_ops backend_sync_ops;

#endif /* FEED_SERVER_BACKEND_SYNC_H */
