/* pgoutput.c -- decoding the replication stream (see pgoutput.h). One
 * reader walks the buffer; any read past the end sets its error and every
 * later read returns zero, so a decoder checks the error once at the end
 * instead of after each field. */
#include <stdio.h>
#include <string.h>

#include "pgoutput.h"

typedef struct reader {
    const uint8_t *p;
    size_t         len, pos;
    int            bad;
} reader;

static const uint8_t *take(reader *r, size_t n)
{
    const uint8_t *at;

    if (r->bad || r->len - r->pos < n) {
        r->bad = 1;
        return NULL;
    }
    at = r->p + r->pos;
    r->pos += n;
    return at;
}

static uint64_t get_n(reader *r, size_t n)   /* big-endian, n <= 8 */
{
    const uint8_t *b = take(r, n);
    uint64_t v = 0;

    for (size_t i = 0; b && i < n; i++)
        v = (v << 8) | b[i];
    return v;
}

static uint8_t  get8(reader *r)  { return (uint8_t)get_n(r, 1); }
static uint16_t get16(reader *r) { return (uint16_t)get_n(r, 2); }
static uint32_t get32(reader *r) { return (uint32_t)get_n(r, 4); }
static uint64_t get64(reader *r) { return get_n(r, 8); }

/* A NUL-terminated string inside the buffer. */
static const char *get_str(reader *r)
{
    const uint8_t *start, *nul;

    if (r->bad)
        return NULL;
    start = r->p + r->pos;
    nul = memchr(start, 0, r->len - r->pos);
    if (!nul) {
        r->bad = 1;
        return NULL;
    }
    r->pos += (size_t)(nul - start) + 1;
    return (const char *)start;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)(v & 0xff);
}

int pgo_frame_decode(const uint8_t *buf, size_t len, pgo_frame *out)
{
    reader r = { buf, len, 0, 0 };

    memset(out, 0, sizeof *out);
    out->kind = (char)get8(&r);
    if (out->kind == 'w') {
        out->wal_start = get64(&r);
        out->wal_end = get64(&r);
        out->send_time = (int64_t)get64(&r);
        if (r.bad)
            return -1;
        out->data = buf + r.pos;
        out->len = len - r.pos;
        return 0;
    }
    if (out->kind == 'k') {
        out->wal_end = get64(&r);
        out->send_time = (int64_t)get64(&r);
        out->reply_requested = get8(&r);
        return r.bad || r.pos != len ? -1 : 0;
    }
    return -1;
}

size_t pgo_status_encode(uint8_t out[PGO_STATUS_LEN], uint64_t written,
                         uint64_t flushed, uint64_t applied, int64_t now_us,
                         int reply_requested)
{
    out[0] = 'r';
    put64(out + 1, written);
    put64(out + 9, flushed);
    put64(out + 17, applied);
    put64(out + 25, (uint64_t)now_us);
    out[33] = reply_requested ? 1 : 0;
    return PGO_STATUS_LEN;
}

static void get_tuple(reader *r, pgo_tuple *t)
{
    t->ncols = get16(r);
    if (t->ncols > PGO_MAX_COLS) {
        r->bad = 1;
        return;
    }
    for (uint16_t i = 0; i < t->ncols && !r->bad; i++) {
        pgo_value *v = &t->cols[i];
        v->kind = (char)get8(r);
        v->data = NULL;
        v->len = 0;
        switch (v->kind) {
        case 'n':
        case 'u':
            break;
        case 't':
        case 'b':
            v->len = get32(r);
            v->data = (const char *)take(r, v->len);
            break;
        default:
            r->bad = 1;
        }
    }
}

static void get_relation(reader *r, pgo_msg *m)
{
    m->relid = get32(r);
    m->nspname = get_str(r);
    m->relname = get_str(r);
    m->replident = (char)get8(r);
    m->ncols = get16(r);
    if (m->ncols > PGO_MAX_COLS) {
        r->bad = 1;
        return;
    }
    for (uint16_t i = 0; i < m->ncols && !r->bad; i++) {
        m->cols[i].flags = get8(r);
        m->cols[i].name = get_str(r);
        m->cols[i].type_oid = get32(r);
        m->cols[i].typmod = (int32_t)get32(r);
    }
}

/* 'K' or 'O' then a tuple, before the 'N' of an Update or as a Delete's
 * only tuple. */
static void get_old_tuple(reader *r, pgo_msg *m, int required)
{
    uint8_t k;

    if (r->bad || r->pos >= r->len) {
        r->bad = 1;
        return;
    }
    k = r->p[r->pos];
    if (k == 'K' || k == 'O') {
        r->pos++;
        m->old_kind = (char)k;
        get_tuple(r, &m->old_tuple);
    } else if (required) {
        r->bad = 1;
    }
}

static void expect(reader *r, uint8_t want)
{
    if (get8(r) != want)
        r->bad = 1;
}

int pgo_msg_decode(const uint8_t *buf, size_t len, pgo_msg *m)
{
    reader r = { buf, len, 0, 0 };

    m->kind = (char)get8(&r);
    m->old_kind = 0;
    m->old_tuple.ncols = m->new_tuple.ncols = 0;
    m->ncols = 0;
    m->nrels = 0;
    m->raw = NULL;
    m->raw_len = 0;
    switch (m->kind) {
    case 'B':
        m->lsn = get64(&r);
        m->commit_ts = (int64_t)get64(&r);
        m->xid = get32(&r);
        break;
    case 'C':
        m->flags = get8(&r);
        m->lsn = get64(&r);
        m->end_lsn = get64(&r);
        m->commit_ts = (int64_t)get64(&r);
        break;
    case 'O':
        m->lsn = get64(&r);
        m->relname = get_str(&r);
        break;
    case 'R':
        get_relation(&r, m);
        break;
    case 'Y':
        m->relid = get32(&r);
        m->nspname = get_str(&r);
        m->relname = get_str(&r);
        break;
    case 'I':
        m->relid = get32(&r);
        expect(&r, 'N');
        get_tuple(&r, &m->new_tuple);
        break;
    case 'U':
        m->relid = get32(&r);
        get_old_tuple(&r, m, 0);
        expect(&r, 'N');
        get_tuple(&r, &m->new_tuple);
        break;
    case 'D':
        m->relid = get32(&r);
        get_old_tuple(&r, m, 1);
        break;
    case 'T':
        m->nrels = get32(&r);
        m->flags = get8(&r);
        if (!r.bad && m->nrels > (r.len - r.pos) / 4)
            r.bad = 1;
        m->raw = take(&r, (size_t)m->nrels * 4);
        break;
    case 'M':
        m->flags = get8(&r);
        m->lsn = get64(&r);
        m->relname = get_str(&r);
        m->raw_len = get32(&r);
        m->raw = take(&r, m->raw_len);
        break;
    default:
        return -1;
    }
    return r.bad || r.pos != len ? -1 : 0;
}

uint32_t pgo_truncate_relid(const pgo_msg *m, uint32_t i)
{
    const uint8_t *p = m->raw + (size_t)i * 4;

    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

int pgo_value_i64(const pgo_value *v, int64_t *out)
{
    uint64_t mag = 0, limit;
    size_t i = 0;
    int neg;

    if (!v || v->kind != 't' || v->len == 0 || v->len > 20)
        return -1;
    neg = v->data[0] == '-';
    i = (size_t)neg;
    if (i == v->len)
        return -1;
    limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; i < v->len; i++) {
        unsigned d = (unsigned char)v->data[i] - '0';
        if (d > 9 || mag > (limit - d) / 10)
            return -1;
        mag = mag * 10 + d;
    }
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return 0;
}

void pgo_lsn_format(uint64_t lsn, char *buf, size_t buflen)
{
    snprintf(buf, buflen, "%X/%X", (unsigned)(lsn >> 32), (unsigned)(lsn & 0xffffffffu));
}
