/* t_fuzz_replay.c -- the fuzz targets of tests/fuzz/ as a plain test, for
 * `make check` (gcc, and ASan + UBSan under SANITIZE=1): every input of
 * their corpus, then a fixed number of seeded random mutations of them
 * (byte flips, inserts, deletes, splices, dictionary words), through each
 * target. A broken invariant aborts (the input is saved first and named in
 * a "Bail out!" line); `make fuzz` is the real, coverage-guided run.
 *
 * Env: FEED_FUZZ_REPLAY_RUNS mutations per target (default 20000; 1000 with
 * FEED_TEST_SLOW=1). Needs no server. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LLVMFuzzerTestOneInput fuzz_cursor_one
#include "fuzz/fuzz_cursor.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_reply_one
#include "fuzz/fuzz_reply.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_session_one
#include "fuzz/fuzz_session.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_pgoutput_one
#include "fuzz/fuzz_pgoutput.c"
#undef LLVMFuzzerTestOneInput
#include "fuzz/fake_pg.c"

#include "tap.h"
#include "testutil.h"

typedef int target_fn(const uint8_t *, size_t);

static const struct target {
    const char *name;
    target_fn  *run;
} targets[] = {
    { "cursor", fuzz_cursor_one },
    { "reply", fuzz_reply_one },
    { "session", fuzz_session_one },
    { "pgoutput", fuzz_pgoutput_one },
};

/* The input being run, saved if the target aborts. */
static const struct target *current;
static const uint8_t *cur_data;
static size_t cur_size;

static void on_abort(int sig)
{
    char path[256];
    FILE *out;

    (void)sig;
    snprintf(path, sizeof path, "%s/fuzz-replay-crash-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
             current ? current->name : "unknown");
    out = fopen(path, "wb");
    if (out) {
        fwrite(cur_data, 1, cur_size, out);
        fclose(out);
    }
    printf("Bail out! fuzz target %s broke an invariant; input saved to %s\n",
           current ? current->name : "?", path);
    fflush(stdout);
    _exit(1);
}

static void run(const struct target *t, const uint8_t *data, size_t size)
{
    current = t;
    cur_data = data;
    cur_size = size;
    t->run(data, size);
}

typedef struct input {
    uint8_t *data;
    size_t   size;
} input;

static size_t load_corpus(const char *name, input **out)
{
    char path[512];
    DIR *d;
    struct dirent *e;
    size_t n = 0, cap = 16;
    input *in = malloc(cap * sizeof *in);

    snprintf(path, sizeof path, "tests/fuzz/corpus/%s", name);
    d = opendir(path);
    if (!d || !in) {
        free(in);
        if (d)
            closedir(d);
        *out = NULL;
        return 0;
    }
    while ((e = readdir(d)) != NULL) {
        char file[1024];
        FILE *fp;
        long len;

        if (e->d_name[0] == '.')
            continue;
        snprintf(file, sizeof file, "%s/%s", path, e->d_name);
        if (!(fp = fopen(file, "rb")))
            continue;
        fseek(fp, 0, SEEK_END);
        len = ftell(fp);
        rewind(fp);
        if (len < 0 || len > 1 << 20) {
            fclose(fp);
            continue;
        }
        if (n == cap) {
            input *bigger = realloc(in, 2 * cap * sizeof *in);
            if (!bigger)
                break;
            in = bigger;
            cap *= 2;
        }
        in[n].data = malloc((size_t)len + 1);
        in[n].size = in[n].data ? fread(in[n].data, 1, (size_t)len, fp) : 0;
        fclose(fp);
        if (in[n].data)
            n++;
    }
    closedir(d);
    *out = in;
    return n;
}

static uint64_t rng = 0x5eed5eed12345ULL;     /* tu_rand's state: the same inputs every run */

static const char *const words[] = {
    "\r\n", "*2\r\n", "$19\r\n", ":0\r\n", ":1\r\n", ":2\r\n", "+OK\r\n", "+QUEUED\r\n", "$-1\r\n",
    "*-1\r\n", "-NOSCRIPT x\r\n", "-ERR x\r\n", "0000000000000000105", "-3105", "-6123456",
    "1500000000000006290", "end", "-inf", "1e+15",
    "9007199254740991", "-9007199254740992", "*4096\r\n", "$4096\r\n",
};

/* One mutation of src (and maybe a splice with other) into buf. */
static size_t mutate(uint8_t *buf, size_t cap, const input *src, const input *other)
{
    size_t n = src->size < cap ? src->size : cap;
    int rounds = 1 + (int)(tu_rand(&rng) % 4);

    memcpy(buf, src->data, n);
    for (int k = 0; k < rounds; k++) {
        size_t at = n ? (size_t)(tu_rand(&rng) % n) : 0;
        switch (tu_rand(&rng) % 6) {
        case 0:                                          /* flip a byte */
            if (n)
                buf[at] ^= (uint8_t)(1u << (tu_rand(&rng) % 8));
            break;
        case 1:                                          /* random byte */
            if (n)
                buf[at] = (uint8_t)tu_rand(&rng);
            break;
        case 2:                                          /* delete a run */
            if (n) {
                size_t len = 1 + (size_t)(tu_rand(&rng) % 8);
                if (len > n - at)
                    len = n - at;
                memmove(buf + at, buf + at + len, n - at - len);
                n -= len;
            }
            break;
        case 3: {                                        /* insert a word */
            const char *w = words[tu_rand(&rng) % (sizeof words / sizeof *words)];
            size_t len = strlen(w);
            if (n + len <= cap) {
                memmove(buf + at + len, buf + at, n - at);
                memcpy(buf + at, w, len);
                n += len;
            }
            break;
        }
        case 4:                                          /* splice the other's tail */
            if (other->size > 0) {
                size_t from = (size_t)(tu_rand(&rng) % other->size), len = other->size - from;
                if (at + len > cap)
                    len = cap - at;
                memcpy(buf + at, other->data + from, len);
                n = at + len;
            }
            break;
        default:                                         /* truncate */
            n = at;
            break;
        }
    }
    return n;
}

/* The filter every Redis-bytes target applies (fuzz.h) must see a huge
 * count wherever hiredis would read one as a header. from_ci is the start
 * of the input CI's `make fuzz` stopped on (libFuzzer: out-of-memory, a 3.9
 * GB calloc): its array header followed the two bytes hiredis skips after a
 * bulk string, not a '\n'. */
static void check_count_filter(void)
{
    static const char plain[] = "*3\r\n:1\r\n$3\r\nabc\r\n*-1\r\n$-1\r\n";
    static const char after_bulk[] = "$1\r\nx00*494174091\r\n";
    static const char from_ci[] =
        "*-1\r\n$19\r\n0\0011\r\016:2\r\n000000000000*494174091\r\n\r\n$19\r\n0\0011\r=00):0\r\n";

    ok(fuzz_counts_sane((const uint8_t *)plain, sizeof plain - 1),
       "count filter: small counts and nil replies pass");
    ok(!fuzz_counts_sane((const uint8_t *)after_bulk, sizeof after_bulk - 1),
       "count filter: a huge array count right after a bulk string's payload is skipped");
    ok(!fuzz_counts_sane((const uint8_t *)from_ci, sizeof from_ci - 1),
       "count filter: CI's out-of-memory input is skipped");
}

int main(void)
{
    const char *slow = getenv("FEED_TEST_SLOW"), *runs_env = getenv("FEED_FUZZ_REPLAY_RUNS");
    long runs = runs_env ? atol(runs_env) : (slow && *slow && *slow != '0' ? 1000 : 20000);
    size_t cap = 65536;
    uint8_t *buf = malloc(cap);
    unsigned long total = 0;

    signal(SIGABRT, on_abort);
    signal(SIGPIPE, SIG_IGN);
    check_count_filter();
    for (size_t t = 0; t < sizeof targets / sizeof *targets; t++) {
        input *in;
        size_t n = load_corpus(targets[t].name, &in);

        ok(n > 0, "%s: %zu corpus inputs in tests/fuzz/corpus/%s", targets[t].name, n,
           targets[t].name);
        for (size_t i = 0; i < n; i++)
            run(&targets[t], in[i].data, in[i].size);
        ok(1, "%s: every corpus input runs clean", targets[t].name);
        for (long k = 0; k < runs && n > 0; k++) {
            size_t len = mutate(buf, cap, &in[tu_rand(&rng) % n], &in[tu_rand(&rng) % n]);
            uint8_t *exact = malloc(len ? len : 1);     /* exact size: overreads show */
            memcpy(exact, buf, len);
            run(&targets[t], exact, len);
            free(exact);
        }
        ok(1, "%s: %ld seeded mutations run clean", targets[t].name, runs);
        total += n + (unsigned long)runs;
        for (size_t i = 0; i < n; i++)
            free(in[i].data);
        free(in);
    }
    tap_diag("%lu executions in all", total);
    feed__repair_forget();
    free(buf);
    return tap_done();
}
