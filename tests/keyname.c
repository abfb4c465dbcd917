/* keyname.c -- the Redis key of a cached copy, for the bash tests that
 * look inside Redis (tests/t_*.t): the library names keys after the rows a
 * copy holds (lib/base/base.h, feed__key_base), so a script cannot write
 * them by hand.
 *
 *   keyname [--author] [--FIELD VALUE]... OWNER [SUFFIX]
 *
 * FIELD is a feed_config field with dashes for underscores (--key-prefix,
 * --table, --author-table, ...), set by feed_config_set; --author names an
 * author's copy (read-time merge) instead of a reader's feed; SUFFIX is
 * appended (":lease"). Prints the key; exit status 2 for bad arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "testutil.h"

int main(int argc, char **argv)
{
    feed_config cfg;
    int fam = FEED_FAM_FEED, i = 1;
    char name[64];

    tu_config(&cfg);     /* the servers of the run: the key names their data set */
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--author") == 0) {
            fam = FEED_FAM_AUTHOR;
            continue;
        }
        snprintf(name, sizeof name, "%s", argv[i] + 2);
        for (char *p = name; *p; p++)
            if (*p == '-')
                *p = '_';
        if (i + 1 >= argc || feed_config_set(&cfg, name, argv[i + 1]) != FEED_OK) {
            fprintf(stderr, "keyname: %s: %s\n", argv[i], feed_errmsg(NULL));
            return 2;
        }
        i++;
    }
    if (i >= argc || i + 2 < argc) {
        fprintf(stderr, "usage: keyname [--author] [--FIELD VALUE]... OWNER [SUFFIX]\n");
        return 2;
    }
    printf("%s\n", tu_key_cfg(&cfg, fam, strtoll(argv[i], NULL, 10), i + 1 < argc ? argv[i + 1] : ""));
    return 0;
}
