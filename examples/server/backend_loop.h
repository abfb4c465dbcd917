/* backend_loop.h -- the event-loop backend (backend_loop.c). */
#ifndef FEED_SERVER_BACKEND_LOOP_H
#define FEED_SERVER_BACKEND_LOOP_H

#include <event2/event.h>

#include "server.h"

/* A state for the loop base, used from its thread only. NULL when out of
 * memory. */
void *backend_loop_new(struct event_base *base);
extern const backend_ops backend_loop_ops;

#endif /* FEED_SERVER_BACKEND_LOOP_H */
