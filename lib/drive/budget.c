/* budget.c -- PostgreSQL's budget for cold work, for the whole process.
 *
 * A cold cache (a flush, a restart fence, an eviction wave) sends every
 * read to PostgreSQL at once: rebuilds and pages past the cache. Nothing
 * bounded how many statements the handles of a process ran at once but
 * the number of handles, so PostgreSQL's queue grew with the load, every
 * statement waited behind all the others, and the rebuilds that would
 * have warmed the cache came back too late to matter. So the statements
 * of reads share one budget per process, pg_budget (0: four per CPU):
 *
 *   - a rebuild's top rows (FEED_SQL_TOP: what warms the cache, and a
 *     first page) may take any slot;
 *   - a page past the cache (keyset, merge, filter) only while a quarter of
 *     the budget (one at least) is left for rebuilds, so that deep pages
 *     never crowd out the work that ends the storm;
 *   - a write's reload, a health check and the replica's lag probes are
 *     not counted (they are few, and must answer).
 *
 * A statement takes its slot when it starts and gives it back when it
 * ends. Past the budget a read waits, the blocking driver on a condition
 * variable, the event-loop one in its handle's line, until a slot frees or
 * its deadline passes (then FEED_EBUSY: lib/core/policy.c, feed__shed).
 * The one piece of process-wide state besides the repair list, on purpose:
 * PostgreSQL is shared by every handle of the process. */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "drive/drive.h"

static pthread_mutex_t budget_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  budget_freed = PTHREAD_COND_INITIALIZER;
static unsigned        budget_used, budget_most;
static pthread_once_t  budget_once = PTHREAD_ONCE_INIT;
static unsigned        budget_default;

/* Four per CPU, counted once: glibc's sysconf reads a file in /sys for
 * it, and a line waiting for a slot asks the size hundreds of times a
 * second. */
static void budget_count_cpus(void)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);

    budget_default = cpus > 1 ? 4 * (unsigned)cpus : 4;
}

unsigned feed__budget_size(const feed_core *c)
{
    if (c->cfg.pg_budget)
        return c->cfg.pg_budget;
    pthread_once(&budget_once, budget_count_cpus);
    return budget_default;
}

int feed__budget_prio(const feed_op *op)
{
    if (!op->reads || op->sql.stmt < 0 || op->sql.stmt >= FEED_SQL_STMTS)
        return FEED_BUDGET_NONE;
    return op->sql.stmt == FEED_SQL_TOP ? FEED_BUDGET_REBUILD : FEED_BUDGET_PAST;
}

/* Lock held: may prio take a slot of a budget of size? */
static int budget_room(unsigned size, int prio)
{
    unsigned reserve = size / 4 ? size / 4 : 1;

    return prio == FEED_BUDGET_REBUILD ? budget_used < size
                                       : budget_used + reserve < size;
}

static void budget_took(void)
{
    if (++budget_used > budget_most)
        budget_most = budget_used;
}

int feed__budget_take(const feed_core *c, int prio)
{
    unsigned size = feed__budget_size(c);
    int took;

    if (prio == FEED_BUDGET_NONE)
        return 1;
    pthread_mutex_lock(&budget_lock);
    if ((took = budget_room(size, prio)) != 0)
        budget_took();
    pthread_mutex_unlock(&budget_lock);
    return took;
}

int feed__budget_wait(const feed_core *c, int prio, int64_t until)
{
    unsigned size = feed__budget_size(c);
    struct timespec ts;
    int took;

    if (prio == FEED_BUDGET_NONE)
        return 1;
    /* The wait's end on the real-time clock, which the condition
     * variable counts in: until is monotonic milliseconds. */
    clock_gettime(CLOCK_REALTIME, &ts);
    {
        int64_t left = until - feed__now_ms();
        int64_t ns = (int64_t)ts.tv_nsec + (left > 0 ? left : 0) % 1000 * 1000000;
        ts.tv_sec += (left > 0 ? left : 0) / 1000 + ns / 1000000000;
        ts.tv_nsec = ns % 1000000000;
    }
    pthread_mutex_lock(&budget_lock);
    while (!(took = budget_room(size, prio)) && feed__now_ms() < until &&
           pthread_cond_timedwait(&budget_freed, &budget_lock, &ts) == 0) {}
    if (!took)                  /* timed out: a slot may have freed as it did */
        took = budget_room(size, prio);
    if (took)
        budget_took();
    pthread_mutex_unlock(&budget_lock);
    return took;
}

void feed__budget_give(void)
{
    pthread_mutex_lock(&budget_lock);
    if (budget_used > 0)
        budget_used--;
    pthread_cond_broadcast(&budget_freed);
    pthread_mutex_unlock(&budget_lock);
}

unsigned feed__budget_most(int reset)
{
    unsigned most;

    pthread_mutex_lock(&budget_lock);
    most = budget_most;
    if (reset)
        budget_most = budget_used;
    pthread_mutex_unlock(&budget_lock);
    return most;
}
