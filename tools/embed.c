/* embed.c -- turn lua/<name>.lua files into C strings at build time.
 *
 * Usage: embed [-p PREFIX] lua/a.lua lua/b.lua ... > scripts.c
 * Writes "const char feed_lua_<name>[] = {...};" for each file (PREFIX
 * instead of feed_lua_ when given: the example server embeds its HTML page
 * this way), so the program carries its files and none is read at run time.
 *
 * Shared Lua: in a .lua file, a line that holds only
 *     --#include "prelude/<name>.lua"
 * (after any indentation) is replaced by that file, named relative to the
 * including file's folder, each of its lines indented as the marker line is.
 * Redis scripts cannot call each other, so code two scripts need is written
 * once and placed by each script where it wants it (a function defined on a
 * slow path costs the fast path nothing). An included file includes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MARKER "--#include \""

static int name_of(const char *path, char *name, size_t cap)
{
    const char *base = strrchr(path, '/');
    size_t len;

    base = base ? base + 1 : path;
    len = strcspn(base, ".");
    if (len == 0 || len >= cap)
        return -1;
    for (size_t i = 0; i < len; i++) {
        char c = base[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return -1;
        name[i] = c;
    }
    name[len] = '\0';
    return 0;
}

/* The whole file, NUL-terminated, in *out (malloc'd); its length or -1. */
static long slurp(const char *path, char **out)
{
    FILE *in = fopen(path, "rb");
    char *buf = NULL;
    size_t len = 0, cap = 0, got;

    if (!in) {
        perror(path);
        return -1;
    }
    do {
        if (cap - len < 4096) {
            char *more = realloc(buf, cap = cap * 2 + 4096);
            if (!more) {
                fprintf(stderr, "embed: %s: out of memory\n", path);
                free(buf);
                fclose(in);
                return -1;
            }
            buf = more;
        }
        got = fread(buf + len, 1, cap - len - 1, in);
        len += got;
    } while (got > 0);
    if (ferror(in)) {
        perror(path);
        free(buf);
        fclose(in);
        return -1;
    }
    fclose(in);
    buf[len] = '\0';
    *out = buf;
    return (long)len;
}

/* Byte values as a C initializer list: no escaping, and no limit on
 * literal length (-Woverlength-strings under -Wpedantic). n counts the bytes
 * written so far, for the line breaks. */
static void put_bytes(const char *s, size_t len, size_t *n)
{
    for (size_t i = 0; i < len; i++, (*n)++)
        printf("%s%d,", *n % 16 ? " " : "\n    ", (unsigned char)s[i]);
}

/* Is line (len bytes, without its newline) an include marker? */
static int is_marker(const char *line, size_t len)
{
    size_t ws = strspn(line, " \t");

    return ws <= len && len - ws >= strlen(MARKER) &&
           strncmp(line + ws, MARKER, strlen(MARKER)) == 0;
}

/* The file an include marker names, relative to the folder of from, into
 * path, and the marker's indentation into *indent; -1 if malformed. */
static int include_of(const char *from, const char *line, size_t len, char *path,
                      size_t cap, size_t *indent)
{
    const char *slash = strrchr(from, '/');
    size_t dir = slash ? (size_t)(slash - from) + 1 : 0, ws = strspn(line, " \t"), name;
    const char *start = line + ws + strlen(MARKER);

    name = strcspn(start, "\"\n");
    if (start[name] != '"' || start + name + 1 != line + len || name == 0 || dir + name >= cap)
        return -1;
    memcpy(path, from, dir);
    memcpy(path + dir, start, name);
    path[dir + name] = '\0';
    *indent = ws;
    return 0;
}

/* Writes text (the contents of path), each include marker replaced by
 * the file it names, indented. */
static int put_text(const char *path, const char *text, size_t len, size_t *n)
{
    int lua = strlen(path) > 4 && strcmp(path + strlen(path) - 4, ".lua") == 0;

    for (size_t at = 0; at < len;) {
        const char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len, indent = 0;
        char inc[512], *body;
        long blen;

        if (!lua || !is_marker(text + at, end - at)) {
            put_bytes(text + at, (nl ? end + 1 : end) - at, n);
            at = end + 1;
            continue;
        }
        if (include_of(path, text + at, end - at, inc, sizeof inc, &indent) != 0) {
            fprintf(stderr, "embed: %s: malformed include line: %.*s\n", path,
                    (int)(end - at), text + at);
            return -1;
        }
        if ((blen = slurp(inc, &body)) < 0)
            return -1;
        for (size_t b = 0; b < (size_t)blen;) {
            const char *bnl = memchr(body + b, '\n', (size_t)blen - b);
            size_t bend = bnl ? (size_t)(bnl - body) : (size_t)blen;
            if (is_marker(body + b, bend - b)) {
                fprintf(stderr, "embed: %s: an included file includes nothing\n", inc);
                free(body);
                return -1;
            }
            if (bend > b)                       /* empty lines stay empty */
                put_bytes(text + at, indent, n);
            put_bytes(body + b, bend - b, n);
            put_bytes("\n", 1, n);
            b = bend + 1;
        }
        free(body);
        at = end + 1;
    }
    return 0;
}

static int embed(const char *prefix, const char *path)
{
    char name[64], *text;
    long len;
    size_t n = 0;
    int rc;

    if (name_of(path, name, sizeof name) != 0) {
        fprintf(stderr, "embed: %s: name must be [a-z0-9_]+.<ext>\n", path);
        return -1;
    }
    if ((len = slurp(path, &text)) < 0)
        return -1;
    printf("const char %s%s[] = {", prefix, name);
    rc = put_text(path, text, (size_t)len, &n);
    printf("\n    0\n};\n\n");
    free(text);
    return rc;
}

int main(int argc, char **argv)
{
    const char *prefix = "feed_lua_";
    int i = 1;

    if (argc > 2 && strcmp(argv[1], "-p") == 0) {
        prefix = argv[2];
        i = 3;
    }
    printf("/* Generated by tools/embed.c; do not edit. */\n\n");
    for (; i < argc; i++) {
        if (embed(prefix, argv[i]) != 0)
            return 1;
    }
    return ferror(stdout) ? 1 : 0;
}
