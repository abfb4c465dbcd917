/* fuzz_pgoutput.c -- feedcache-sync's decoder, as a server (or anything in
 * between) may send anything.
 *
 * The bytes are a replication stream: frames of [2-byte big-endian length]
 * [CopyData], each decoded as a frame ('w' XLogData, 'k' keepalive), the
 * XLogData's payload as a pgoutput message and fed to the batch logic of
 * sync/apply.c, as the program does. Every read must stay in bounds (ASan),
 * a refused message must not change the batch, and the batch must stay
 * consistent: feeds only from committed or open transactions, sorted and
 * without repeats after sa_unique. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../sync/apply.c"
#include "../../sync/pgoutput.c"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pgo_msg *m;
    sync_apply a;
    size_t pos = 0, n;

    if (!m && !(m = malloc(sizeof *m)))
        return 0;
    sa_init(&a, "public", "feed_entry", "uid");
    while (size - pos >= 2) {
        size_t len = (size_t)data[pos] << 8 | data[pos + 1];
        pgo_frame fr;
        pos += 2;
        if (len > size - pos)
            len = size - pos;
        if (pgo_frame_decode(data + pos, len, &fr) == 0 && fr.kind == 'w') {
            FUZZ_CHECK(fr.data >= data + pos && fr.data + fr.len == data + pos + len);
            if (pgo_msg_decode(fr.data, fr.len, m) == 0) {
                size_t before = a.batch.nuids;
                int rc = sa_message(&a, m);
                FUZZ_CHECK(rc == 0 || rc == -1);
                FUZZ_CHECK(a.batch.nuids <= before + 2);   /* at most two feeds a change */
                FUZZ_CHECK(m->old_tuple.ncols <= PGO_MAX_COLS && m->new_tuple.ncols <= PGO_MAX_COLS);
            }
        }
        pos += len;
    }
    sa_unique(&a, &n);
    for (size_t i = 1; i < n; i++)
        FUZZ_CHECK(a.batch.uids[i - 1] < a.batch.uids[i]);
    sa_free(&a);
    return 0;
}
