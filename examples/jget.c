/* jget.c -- read one JSON document on stdin, print values picked by paths.
 * A tiny, strict stand-in for jq, used by tests/t_http.t and
 * examples/demo.sh so that neither needs more than the packages feedcache
 * already builds with (jansson).
 *
 *   jget PATH...
 *
 * A PATH is steps separated by dots, applied from the document's root:
 *   name     the member of an object     (items, next_cursor)
 *   N        the N-th element of an array (0-based)
 *   *        every element of an array / every member value of an object
 *   @type    the value's type: object array string integer real true false null
 *   @len     the number of elements, members, or bytes of a string
 *   @keys    an object's keys, comma-separated, in document order
 * "." alone is the root. Each result is printed on its own line: a string
 * as its raw text, an integer in decimal, a real with %.17g, true, false,
 * null, and an object or array as compact JSON with sorted keys. A path
 * that leads nowhere prints "@missing".
 *
 * Exit status: 0; 2 when stdin is not exactly one JSON document (the error
 * is printed on stderr); 64 for a usage error.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT:  return "object";
    case JSON_ARRAY:   return "array";
    case JSON_STRING:  return "string";
    case JSON_INTEGER: return "integer";
    case JSON_REAL:    return "real";
    case JSON_TRUE:    return "true";
    case JSON_FALSE:   return "false";
    default:           return "null";
    }
}

static void print_value(const json_t *v)
{
    char *s;

    switch (json_typeof(v)) {
    case JSON_STRING:
        fwrite(json_string_value(v), 1, json_string_length(v), stdout);
        putchar('\n');
        break;
    case JSON_INTEGER:
        printf("%" JSON_INTEGER_FORMAT "\n", json_integer_value(v));
        break;
    case JSON_REAL:
        printf("%.17g\n", json_real_value(v));
        break;
    case JSON_TRUE:
    case JSON_FALSE:
    case JSON_NULL:
        printf("%s\n", type_name(v));
        break;
    default:
        s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
        printf("%s\n", s ? s : "@error");
        free(s);
    }
}

/* Apply the steps of path (a mutable copy) from v; print every result. */
static void walk(const json_t *v, char *path)
{
    char *dot, *step;

    if (!v) {
        printf("@missing\n");
        return;
    }
    if (!path || !*path) {
        print_value(v);
        return;
    }
    step = path;
    dot = strchr(path, '.');
    if (dot)
        *dot = '\0';
    path = dot ? dot + 1 : NULL;

    if (strcmp(step, "@type") == 0) {
        printf("%s\n", type_name(v));
    } else if (strcmp(step, "@len") == 0) {
        if (json_is_array(v))
            printf("%zu\n", json_array_size(v));
        else if (json_is_object(v))
            printf("%zu\n", json_object_size(v));
        else if (json_is_string(v))
            printf("%zu\n", json_string_length(v));
        else
            printf("@missing\n");
    } else if (strcmp(step, "@keys") == 0) {
        const char *key;
        json_t *val;
        int first = 1;
        if (!json_is_object(v)) {
            printf("@missing\n");
            return;
        }
        json_object_foreach((json_t *)v, key, val) {
            (void)val;
            printf("%s%s", first ? "" : ",", key);
            first = 0;
        }
        printf("\n");
    } else if (strcmp(step, "*") == 0) {
        size_t i, rest = path ? strlen(path) + 1 : 0;
        char *copy = NULL;
        const char *key;
        json_t *val;
        if (!json_is_array(v) && !json_is_object(v)) {
            printf("@missing\n");
            return;
        }
        if (path && !(copy = malloc(rest))) {
            perror("jget");
            exit(1);
        }
        if (json_is_array(v)) {
            json_array_foreach((json_t *)v, i, val) {
                if (copy)
                    memcpy(copy, path, rest);
                walk(val, copy);
            }
        } else {
            json_object_foreach((json_t *)v, key, val) {
                if (copy)
                    memcpy(copy, path, rest);
                walk(val, copy);
            }
        }
        free(copy);
    } else if (json_is_array(v) && step[0] >= '0' && step[0] <= '9' &&
               strspn(step, "0123456789") == strlen(step)) {
        walk(json_array_get(v, strtoul(step, NULL, 10)), path);
    } else if (json_is_object(v)) {
        walk(json_object_get(v, step), path);
    } else {
        printf("@missing\n");
    }
}

int main(int argc, char **argv)
{
    json_error_t err;
    json_t *doc;

    if (argc < 2) {
        fprintf(stderr, "usage: jget PATH... < document.json\n");
        return 64;
    }
    doc = json_loadf(stdin, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &err);
    if (!doc) {
        fprintf(stderr, "jget: not JSON: %s (line %d, column %d)\n", err.text, err.line, err.column);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        char *path = strcmp(argv[i], ".") == 0 ? NULL : strdup(argv[i]);
        if (strcmp(argv[i], ".") != 0 && !path) {
            perror("jget");
            return 1;
        }
        walk(doc, path);
        free(path);
    }
    json_decref(doc);
    return fflush(stdout) == 0 ? 0 : 1;
}
