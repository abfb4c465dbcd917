/* fuzz.h -- what the fuzz targets in tests/fuzz/ share.
 *
 * Targets (each defines LLVMFuzzerTestOneInput; `make fuzz` builds them with
 * clang -fsanitize=fuzzer,address,undefined, and tests/t_fuzz_replay.c runs
 * them as a plain test over their corpus in `make check`):
 *
 *   fuzz_cursor.c   feed_cursor_decode on any bytes; round trips
 *   fuzz_reply.c    any bytes through hiredis's reply reader, then every
 *                   string of every reply through the strict parsers of
 *                   lib/base/codec.c (members, scores, integers)
 *   fuzz_session.c  a fake Redis server: the bytes are everything "Redis"
 *                   answers, over a socketpair, to a sequence of library
 *                   calls (pages, hooks, fan-out, reload, invalidate), so
 *                   every reply parser of the library sees them
 *   fuzz_pgoutput.c feedcache-sync's replication stream decoder and batch
 *                   logic (sync/pgoutput.c, sync/apply.c) on any frames
 *
 * fake_pg.c replaces lib/io/pg.c in the fuzz builds: a deterministic feed per
 * uid, in memory, so that rebuilds and keyset pages run with no server.
 * Abort on a broken invariant: libFuzzer and the replay test report it. */
#ifndef FEED_FUZZ_H
#define FEED_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* fake_pg.c: when set, every SQL call fails as PostgreSQL being down would. */
extern int fuzz_pg_down;

#define FUZZ_CHECK(cond)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            fprintf(stderr, "fuzz invariant broken: %s (%s:%d)\n", #cond,    \
                    __FILE__, __LINE__);                                     \
            abort();                                                         \
        }                                                                    \
    } while (0)

/* hiredis 0.14 allocates an array's element vector from the count the
 * server sends, before the elements arrive ("*2000000000\r\n" asks for 16
 * GB). The server is trusted (README, "Reliability and security"), so such
 * counts are outside what these targets explore: inputs announcing an array
 * or a bulk string longer than this are skipped.
 *
 * A header can start anywhere, not only after a '\n': hiredis skips the two
 * bytes after a bulk string's payload without reading them, so in
 * "$1\r\nx00*494174091\r\n" the array header follows "00". Every '*' and
 * '$' is therefore taken as a header. Signs need no care: this hiredis
 * refuses every negative count but -1 and every count past INT_MAX. */
#define FUZZ_MAX_COUNT 4096

static inline int fuzz_counts_sane(const uint8_t *data, size_t size)
{
    for (size_t i = 0; i < size; i++) {
        unsigned long long n = 0;

        if (data[i] != '*' && data[i] != '$')
            continue;
        for (size_t k = i + 1; k < size && data[k] >= '0' && data[k] <= '9'; k++) {
            n = n * 10 + (unsigned)(data[k] - '0');
            if (n > FUZZ_MAX_COUNT)
                return 0;
        }
    }
    return 1;
}

#endif
