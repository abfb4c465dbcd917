/* tap.h -- the Test Anything Protocol for the C tests, header only.
 *
 * Each test program prints "ok N - name" / "not ok N - name" lines and a plan
 * ("1..N") at the end; prove(1) reads them. A failed check also prints where
 * it failed and what it saw as "# " diagnostics. tap_done() returns the exit
 * status: 0 only when every check passed and at least one ran.
 */
#ifndef FEED_TAP_H
#define FEED_TAP_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int tap_count;
static int tap_failed;

static inline int tap_ok_at(int pass, const char *file, int line,
                            const char *fmt, ...)
{
    va_list ap;
    char name[1024];

    tap_count++;

    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    /* A newline inside a name would end the TAP line early. */
    for (char *p = name; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    printf("%sok %d - %s\n", pass ? "" : "not ", tap_count, name);
    if (!pass) {
        tap_failed++;
        printf("#   failed at %s line %d\n", file, line);
    }
    fflush(stdout);
    return pass;
}

static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static inline int tap_done(void)
{
    printf("1..%d\n", tap_count);
    if (tap_failed)
        tap_diag("failed %d of %d", tap_failed, tap_count);
    return (tap_failed == 0 && tap_count > 0) ? 0 : 1;
}

/* Stop the whole program: for when the rest cannot run (no server...). */
static inline void tap_bail(const char *why)
{
    printf("Bail out! %s\n", why);
    fflush(stdout);
}

#define ok(cond, ...) tap_ok_at(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

#define is_int(got, want, ...)                                              \
    do {                                                                    \
        long long got_ = (long long)(got), want_ = (long long)(want);       \
        if (!tap_ok_at(got_ == want_, __FILE__, __LINE__, __VA_ARGS__))     \
            tap_diag("     got: %lld\n#    want: %lld", got_, want_);       \
    } while (0)

#define is_str(got, want, ...)                                              \
    do {                                                                    \
        const char *got_ = (got), *want_ = (want);                          \
        int same_ = got_ && want_ && strcmp(got_, want_) == 0;              \
        if (!tap_ok_at(same_, __FILE__, __LINE__, __VA_ARGS__))             \
            tap_diag("     got: '%s'\n#    want: '%s'",                     \
                     got_ ? got_ : "(null)", want_ ? want_ : "(null)");     \
    } while (0)

#endif /* FEED_TAP_H */
