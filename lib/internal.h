/* internal.h -- the library's internals, for its own tests and benchmarks
 * (tests/, bench/): the handle's layout, the codec, the slot arithmetic.
 * Not installed; nothing outside this project may include it. */
#ifndef FEED_INTERNAL_H
#define FEED_INTERNAL_H

#include "drive/drive.h"

#endif /* FEED_INTERNAL_H */
