/* A small Parquet file written natively: one row group, one PLAIN data page per column chunk,
 * uncompressed (sinks/parquet/small_file.py says when and why).
 *
 * write(schema_capsule, array_capsule, template, statistics, key_value_metadata=None)
 *     -> bytes | None
 *
 * The rows come as one record batch through the Arrow C data interface (the capsules of
 * RecordBatch.__arrow_c_array__). `template` is a Parquet file pyarrow wrote with no rows for
 * the same schema: its footer gives the Parquet schema, the key-value metadata (ARROW:schema,
 * the schema's metadata), created_by and the column orders verbatim, so every type, logical
 * annotation and metadata entry is pyarrow's own; this code adds the row group. `statistics`
 * names the top-level INT64 columns that get min/max/null count. `key_value_metadata`, a tuple
 * of (key, value) bytes, replaces the template's (so one template serves every schema of the
 * same fields, whatever the schema's own metadata). Returns None for anything it
 * does not cover (a type, a nesting, a NULL in a field declared non-nullable, a template it
 * cannot splice): the caller then writes the file with pyarrow, which decides. Reads the rows
 * only where the arrays' lengths, offsets and validity say (valid Arrow data, as pyarrow makes),
 * and the template only within its bytes.
 *
 * Pool(threads, bound): the same encoding (`encode`, shared with write) and the write of the file, in
 * threads that never take the GIL nor touch a Python object: submit(path, schema_capsule,
 * array_capsule, template, statistics, key_value_metadata) -> job id copies what the job needs
 * and holds references to the capsules and the template until reap(wait_all) -> [(job id,
 * status, errno)] hands the finished jobs back (small_file.new_pool, files.NativeFiles);
 * write(path, data) -> job id writes bytes as they are (the flush's schema files, DDL logs).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- the Arrow C data interface (its ABI is fixed by the Arrow specification) --------------- */

#define ARROW_FLAG_NULLABLE 2

struct ArrowSchema {
    const char *format;
    const char *name;
    const char *metadata;
    int64_t flags;
    int64_t n_children;
    struct ArrowSchema **children;
    struct ArrowSchema *dictionary;
    void (*release)(struct ArrowSchema *);
    void *private_data;
};

struct ArrowArray {
    int64_t length;
    int64_t null_count;
    int64_t offset;
    int64_t n_buffers;
    int64_t n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* --- a growing byte buffer ---------------------------------------------------------------- */

typedef struct {
    uint8_t *data;
    size_t len, cap;
    int failed;
    uint64_t bits; /* BOOLEAN values put so far (put_bit), packed eight to a byte */
} Buf;

static int buf_reserve(Buf *b, size_t more) {
    if (b->failed) return -1;
    if (b->len + more <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + more) {
        if (cap > ((size_t)1 << 40)) { b->failed = 1; return -1; }
        cap *= 2;
    }
    uint8_t *data = realloc(b->data, cap);
    if (data == NULL) { b->failed = 1; return -1; }
    b->data = data;
    b->cap = cap;
    return 0;
}

static void put(Buf *b, const void *src, size_t n) {
    if (n == 0 || buf_reserve(b, n) < 0) return;
    memcpy(b->data + b->len, src, n);
    b->len += n;
}

static void put_byte(Buf *b, uint8_t v) { put(b, &v, 1); }

static void put_le32(Buf *b, uint32_t v) {
    uint8_t s[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, s, 4);
}

static void put_le64(Buf *b, uint64_t v) {
    uint8_t s[8];
    for (int i = 0; i < 8; i++) s[i] = (uint8_t)(v >> (8 * i));
    put(b, s, 8);
}

/* PLAIN BOOLEAN: bit-packed, the first value in the lowest bit; a new byte every eight. */
static void put_bit(Buf *b, int v) {
    if ((b->bits & 7) == 0) put_byte(b, 0);
    if (b->failed) return;
    if (v) b->data[b->len - 1] |= (uint8_t)(1u << (b->bits & 7));
    b->bits++;
}

/* --- Thrift compact protocol: the writer ----------------------------------------------------- */

enum { T_I32 = 5, T_I64 = 6, T_BINARY = 8, T_LIST = 9, T_STRUCT = 12, T_I16 = 4 };

typedef struct {
    Buf *b;
    int16_t last[8]; /* the last field id written, per open struct */
    int depth;
} TW;

static void tw_varint(TW *w, uint64_t v) {
    uint8_t s[10];
    int n = 0;
    while (v >= 0x80) { s[n++] = (uint8_t)(v | 0x80); v >>= 7; }
    s[n++] = (uint8_t)v;
    put(w->b, s, (size_t)n);
}

static void tw_zigzag(TW *w, int64_t v) {
    tw_varint(w, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static void tw_field(TW *w, int16_t id, int type) {
    int16_t delta = (int16_t)(id - w->last[w->depth]);
    if (delta > 0 && delta <= 15) {
        put_byte(w->b, (uint8_t)((delta << 4) | type));
    } else {
        put_byte(w->b, (uint8_t)type);
        tw_zigzag(w, id);
    }
    w->last[w->depth] = id;
}

static void tw_i32(TW *w, int16_t id, int32_t v) { tw_field(w, id, T_I32); tw_zigzag(w, v); }
static void tw_i64(TW *w, int16_t id, int64_t v) { tw_field(w, id, T_I64); tw_zigzag(w, v); }

static void tw_binary(TW *w, int16_t id, const void *s, size_t n) {
    tw_field(w, id, T_BINARY);
    tw_varint(w, n);
    put(w->b, s, n);
}

static void tw_list(TW *w, int16_t id, int elem_type, size_t size) {
    tw_field(w, id, T_LIST);
    if (size < 15) {
        put_byte(w->b, (uint8_t)((size << 4) | elem_type));
    } else {
        put_byte(w->b, (uint8_t)(0xF0 | elem_type));
        tw_varint(w, size);
    }
}

static void tw_begin(TW *w) { w->last[++w->depth] = 0; } /* a struct (a field or list item) */
static void tw_end(TW *w) { put_byte(w->b, 0); w->depth--; }

/* --- Thrift compact protocol: skipping a value of the template ------------------------------- */

typedef struct {
    const uint8_t *p, *end;
} TR;

static int tr_varint(TR *r, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end) return -1;
        uint8_t c = *r->p++;
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80)) { *out = v; return 0; }
    }
    return -1;
}

static int tr_skip(TR *r, int type, int depth);

static int tr_skip_struct(TR *r, int depth) {
    int16_t last = 0;
    for (;;) {
        if (r->p >= r->end) return -1;
        uint8_t h = *r->p++;
        if (h == 0) return 0;
        int type = h & 0x0F;
        if (h >> 4) {
            last = (int16_t)(last + (h >> 4));
        } else {
            uint64_t id;
            if (tr_varint(r, &id) < 0) return -1;
            last = (int16_t)((id >> 1) ^ -(int64_t)(id & 1));
        }
        if (tr_skip(r, type, depth + 1) < 0) return -1;
    }
}

static int tr_skip(TR *r, int type, int depth) {
    uint64_t v;
    if (depth > 32) return -1;
    switch (type) {
    case 1: case 2: return 0; /* bool in the field header */
    case 3: if (r->p >= r->end) return -1; r->p++; return 0;
    case 4: case 5: case 6: return tr_varint(r, &v);
    case 7: if (r->end - r->p < 8) return -1; r->p += 8; return 0;
    case 8:
        if (tr_varint(r, &v) < 0 || v > (uint64_t)(r->end - r->p)) return -1;
        r->p += v;
        return 0;
    case 9: case 10: {
        if (r->p >= r->end) return -1;
        uint8_t h = *r->p++;
        uint64_t n = h >> 4;
        int et = h & 0x0F;
        if (n == 15 && tr_varint(r, &n) < 0) return -1;
        if (n > (uint64_t)(r->end - r->p) * 8 + 8) return -1;
        for (uint64_t i = 0; i < n; i++) {
            if (et == 1 || et == 2) { if (r->p >= r->end) return -1; r->p++; continue; }
            if (tr_skip(r, et, depth + 1) < 0) return -1;
        }
        return 0;
    }
    case 11: {
        if (tr_varint(r, &v) < 0) return -1;
        if (v == 0) return 0;
        if (r->p >= r->end) return -1;
        uint8_t kv = *r->p++;
        for (uint64_t i = 0; i < v; i++)
            if (tr_skip(r, kv >> 4, depth + 1) < 0 || tr_skip(r, kv & 0x0F, depth + 1) < 0)
                return -1;
        return 0;
    }
    case 12: return tr_skip_struct(r, depth);
    default: return -1;
    }
}

/* The template's footer cut around fields 3 (num_rows) and 4 (row_groups) of FileMetaData:
 * [head, head_end) holds fields 1-2, [tail, tail_end) fields 5.. and the stop byte, of which
 * [tail, after_kv) is field 5 (key_value_metadata). */
typedef struct {
    const uint8_t *head, *head_end, *tail, *after_kv, *tail_end;
} Splice;

static int splice_template(const uint8_t *file, size_t n, Splice *s) {
    if (n < 12 || memcmp(file, "PAR1", 4) != 0 || memcmp(file + n - 4, "PAR1", 4) != 0)
        return -1;
    uint32_t flen = (uint32_t)file[n - 8] | (uint32_t)file[n - 7] << 8 |
                    (uint32_t)file[n - 6] << 16 | (uint32_t)file[n - 5] << 24;
    if (flen > n - 12) return -1;
    TR r = {file + n - 8 - flen, file + n - 8};
    s->head = r.p;
    /* exactly: field 1 (i32), field 2 (list), field 3 (i64), field 4 (list), then the rest */
    static const uint8_t expect[4] = {0x15, 0x19, 0x16, 0x19};
    for (int i = 0; i < 4; i++) {
        if (r.p >= r.end || *r.p != expect[i]) return -1;
        if (i == 2) s->head_end = r.p;
        r.p++;
        if (tr_skip(&r, expect[i] & 0x0F, 0) < 0) return -1;
    }
    s->tail = r.p;
    if (r.p >= r.end || *r.p != 0x19) return -1; /* field 5, a list */
    r.p++;
    if (tr_skip(&r, 9, 0) < 0) return -1;
    s->after_kv = r.p;
    if (r.p >= r.end || (*r.p != 0 && (*r.p >> 4) != 1)) return -1; /* stop, or field 6 */
    if (tr_skip_struct(&r, 0) < 0 || r.p != r.end) return -1;
    s->tail_end = r.end;
    return 0;
}

/* --- leaves: the column plan from the Arrow schema ------------------------------------------ */

enum { P_BOOLEAN = 0, P_INT32 = 1, P_INT64 = 2, P_FLOAT = 4, P_DOUBLE = 5, P_BYTE_ARRAY = 6,
       P_FLBA = 7 };
enum { V_BOOL, V_I8, V_I16, V_I32, V_I64, V_F32, V_F64, V_BYTES, V_DEC };
enum { SHAPE_FLAT, SHAPE_STRUCT, SHAPE_LIST };

#define MAX_LEAVES 65536

typedef struct {
    int shape;
    int64_t top;          /* index of the top-level column */
    int64_t child;        /* struct: the child's index */
    int top_nullable, leaf_nullable;
    int physical, value;  /* P_*, V_* */
    int type_length;      /* FLBA: bytes of a decimal */
    int max_def, max_rep;
    int statistics;
    const char *path[3];
    int path_len;
} Leaf;

static int decimal_size(int precision) {
    /* the fewest bytes of two's complement that hold 10^precision - 1 */
    return (int)ceil((precision * log2(10.0) + 1.0) / 8.0);
}

/* The value kind of a primitive format string, or -1 when not covered. */
static int value_of(const char *f, int *physical, int *type_length) {
    *type_length = 0;
    if (!strcmp(f, "b")) { *physical = P_BOOLEAN; return V_BOOL; }
    if (!strcmp(f, "c")) { *physical = P_INT32; return V_I8; }
    if (!strcmp(f, "s")) { *physical = P_INT32; return V_I16; }
    if (!strcmp(f, "i") || !strcmp(f, "tdD")) { *physical = P_INT32; return V_I32; }
    /* time64[us]: INT64, its TIME(MICROS) annotation the template's */
    if (!strcmp(f, "l") || !strncmp(f, "tsu:", 4) || !strcmp(f, "ttu")) {
        *physical = P_INT64;
        return V_I64;
    }
    if (!strcmp(f, "f")) { *physical = P_FLOAT; return V_F32; }
    if (!strcmp(f, "g")) { *physical = P_DOUBLE; return V_F64; }
    if (!strcmp(f, "u") || !strcmp(f, "z")) { *physical = P_BYTE_ARRAY; return V_BYTES; }
    if (!strncmp(f, "d:", 2)) {
        int precision, scale, n = 0;
        if (sscanf(f + 2, "%d,%d%n", &precision, &scale, &n) != 2 || f[2 + n] != '\0')
            return -1; /* a bit width given: decimal256 or other, not covered */
        if (precision < 1 || precision > 38) return -1;
        *physical = P_FLBA;
        *type_length = decimal_size(precision);
        return V_DEC;
    }
    return -1;
}

static int primitive_leaf(const struct ArrowSchema *s, Leaf *leaf) {
    if (s->dictionary != NULL || s->n_children != 0) return -1;
    leaf->value = value_of(s->format, &leaf->physical, &leaf->type_length);
    return leaf->value < 0 ? -1 : 0;
}

/* Whether `name` is one of the `n` names (NULL entries name no column). */
static int in_list(const char *const *names, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (names[i] != NULL && !strcmp(names[i], name)) return 1;
    return 0;
}

/* The leaves of `schema` in Parquet's column order; -1 when a shape is not covered. */
static int plan(const struct ArrowSchema *schema, const char *const *statistics,
                int n_statistics, Leaf *leaves, int64_t capacity, int *count) {
    int n = 0;
    if (strcmp(schema->format, "+s") != 0) return -1;
    for (int64_t i = 0; i < schema->n_children; i++) {
        const struct ArrowSchema *f = schema->children[i];
        int nullable = (f->flags & ARROW_FLAG_NULLABLE) != 0;
        if (f->dictionary != NULL) return -1;
        if (!strcmp(f->format, "+s")) {
            if (f->n_children == 0) return -1;
            for (int64_t k = 0; k < f->n_children; k++) {
                if (n >= capacity) return -1;
                Leaf *leaf = &leaves[n++];
                memset(leaf, 0, sizeof *leaf);
                const struct ArrowSchema *c = f->children[k];
                if (primitive_leaf(c, leaf) < 0) return -1;
                leaf->shape = SHAPE_STRUCT;
                leaf->top = i;
                leaf->child = k;
                leaf->top_nullable = nullable;
                leaf->leaf_nullable = (c->flags & ARROW_FLAG_NULLABLE) != 0;
                leaf->max_def = nullable + leaf->leaf_nullable;
                leaf->path[0] = f->name;
                leaf->path[1] = c->name;
                leaf->path_len = 2;
            }
        } else if (!strcmp(f->format, "+l")) {
            if (f->n_children != 1 || n >= capacity) return -1;
            Leaf *leaf = &leaves[n++];
            memset(leaf, 0, sizeof *leaf);
            const struct ArrowSchema *c = f->children[0];
            if (primitive_leaf(c, leaf) < 0) return -1;
            leaf->shape = SHAPE_LIST;
            leaf->top = i;
            leaf->top_nullable = nullable;
            leaf->leaf_nullable = (c->flags & ARROW_FLAG_NULLABLE) != 0;
            leaf->max_def = nullable + 1 + leaf->leaf_nullable;
            leaf->max_rep = 1;
            leaf->path[0] = f->name;
            leaf->path[1] = "list"; /* pyarrow's compliant nested type: list.element */
            leaf->path[2] = "element";
            leaf->path_len = 3;
        } else {
            if (n >= capacity) return -1;
            Leaf *leaf = &leaves[n++];
            memset(leaf, 0, sizeof *leaf);
            if (primitive_leaf(f, leaf) < 0) return -1;
            leaf->shape = SHAPE_FLAT;
            leaf->top = i;
            leaf->leaf_nullable = nullable;
            leaf->max_def = nullable;
            leaf->path[0] = f->name;
            leaf->path_len = 1;
            leaf->statistics = in_list(statistics, n_statistics, f->name);
            if (leaf->statistics && leaf->physical != P_INT64) return -1;
        }
    }
    *count = n;
    return 0;
}

/* --- the values and levels of a leaf ---------------------------------------------------------- */

/* Bit k of an Arrow bitmap (validity, or BOOLEAN values): least significant bit first. */
static inline int bit_at(const uint8_t *bits, int64_t k) {
    return (bits[k >> 3] >> (k & 7)) & 1;
}

static int valid_at(const struct ArrowArray *a, int64_t i) {
    const uint8_t *bits = a->n_buffers > 0 ? (const uint8_t *)a->buffers[0] : NULL;
    if (bits == NULL || a->null_count == 0) return 1;
    return bit_at(bits, a->offset + i);
}

/* The arrays of a leaf hold enough buffers for its type (checked once per leaf). */
static int check_leaf_array(const struct ArrowArray *a, const Leaf *leaf) {
    int64_t need = leaf->value == V_BYTES ? 3 : 2;
    if (a->n_buffers != need || a->buffers[1] == NULL) return -1;
    if (leaf->value == V_BYTES && a->buffers[2] == NULL && a->length > 0) {
        /* an empty data buffer may be NULL only when every value is empty */
        const int32_t *o = (const int32_t *)a->buffers[1];
        if (o[a->offset + a->length] != o[a->offset]) return -1;
    }
    return a->offset >= 0 && a->length >= 0 ? 0 : -1;
}

typedef struct {
    int64_t min, max, nulls;
    int seen;
} Stats;

/* Appends the PLAIN value at physical index i of `a`. */
static int put_value(Buf *v, const struct ArrowArray *a, const Leaf *leaf, int64_t i, Stats *st) {
    int64_t k = a->offset + i;
    switch (leaf->value) {
    case V_BOOL: put_bit(v, bit_at((const uint8_t *)a->buffers[1], k)); break;
    case V_I8: put_le32(v, (uint32_t)(int32_t)((const int8_t *)a->buffers[1])[k]); break;
    case V_I16: put_le32(v, (uint32_t)(int32_t)((const int16_t *)a->buffers[1])[k]); break;
    case V_I32: put_le32(v, (uint32_t)((const int32_t *)a->buffers[1])[k]); break;
    case V_I64: {
        int64_t x = ((const int64_t *)a->buffers[1])[k];
        put_le64(v, (uint64_t)x);
        if (st != NULL) {
            if (!st->seen || x < st->min) st->min = x;
            if (!st->seen || x > st->max) st->max = x;
            st->seen = 1;
        }
        break;
    }
    case V_F32: put(v, (const uint8_t *)a->buffers[1] + 4 * k, 4); break;
    case V_F64: put(v, (const uint8_t *)a->buffers[1] + 8 * k, 8); break;
    case V_BYTES: {
        const int32_t *o = (const int32_t *)a->buffers[1];
        int32_t start = o[k], end = o[k + 1];
        if (end < start) return -1;
        put_le32(v, (uint32_t)(end - start));
        if (end > start) put(v, (const uint8_t *)a->buffers[2] + start, (size_t)(end - start));
        break;
    }
    case V_DEC: {
        const uint8_t *le = (const uint8_t *)a->buffers[1] + 16 * k;
        uint8_t be[16];
        for (int j = 0; j < leaf->type_length; j++) be[j] = le[leaf->type_length - 1 - j];
        put(v, be, (size_t)leaf->type_length);
        break;
    }
    default: return -1;
    }
    return 0;
}

/* RLE/bit-packed hybrid levels, all bit-packed (groups of eight), after their 4-byte length. */
static void put_levels(Buf *out, const uint8_t *levels, int64_t n, int max_level) {
    int width = 0;
    while ((1 << width) <= max_level) width++;
    int64_t groups = (n + 7) / 8;
    uint8_t header[10];
    Buf hb = {header, 0, sizeof header, 0, 0};
    TW hw = {&hb, {0}, 0};
    tw_varint(&hw, ((uint64_t)groups << 1) | 1);
    put_le32(out, (uint32_t)(hb.len + (size_t)groups * (size_t)width));
    put(out, header, hb.len);
    if (buf_reserve(out, (size_t)groups * (size_t)width) < 0) return;
    uint8_t *p = out->data + out->len;
    memset(p, 0, (size_t)groups * (size_t)width);
    for (int64_t i = 0; i < n; i++) {
        int64_t bit = i * width;
        for (int b = 0; b < width; b++, bit++)
            if ((levels[i] >> b) & 1) p[bit >> 3] |= (uint8_t)(1 << (bit & 7));
    }
    out->len += (size_t)groups * (size_t)width;
}

typedef struct {
    Buf values, scratch_levels_r, scratch_levels_d;
} Scratch;

/* Levels (as bytes) and PLAIN values of one leaf over the batch's rows; returns the number
 * of level entries (= the page's num_values), or -1. */
static int64_t leaf_page(const struct ArrowArray *batch, const Leaf *leaf, Scratch *s,
                         Stats *st) {
    Buf *rl = &s->scratch_levels_r, *dl = &s->scratch_levels_d, *v = &s->values;
    rl->len = dl->len = v->len = 0;
    v->bits = 0;
    const struct ArrowArray *top = batch->children[leaf->top];
    int64_t rows = batch->length;
    if (leaf->shape == SHAPE_FLAT) {
        if (check_leaf_array(top, leaf) < 0) return -1;
        if (top->length < rows) return -1;
        for (int64_t i = 0; i < rows; i++) {
            int ok = valid_at(top, i);
            if (!ok && !leaf->max_def) return -1; /* a NULL in a non-nullable field */
            if (leaf->max_def) put_byte(dl, (uint8_t)ok);
            if (ok) { if (put_value(v, top, leaf, i, st) < 0) return -1; }
            else if (st) st->nulls++;
        }
        return rows;
    }
    if (leaf->shape == SHAPE_STRUCT) {
        if (top->n_children <= leaf->child || top->length < rows) return -1;
        const struct ArrowArray *c = top->children[leaf->child];
        if (check_leaf_array(c, leaf) < 0 || c->length < top->offset + rows) return -1;
        for (int64_t i = 0; i < rows; i++) {
            uint8_t d = 0;
            int defined = 0;
            if (!leaf->top_nullable || valid_at(top, i)) {
                d = (uint8_t)leaf->top_nullable;
                int ok = valid_at(c, top->offset + i);
                if (!ok && !leaf->leaf_nullable) return -1; /* NULL, declared non-nullable */
                if (ok) {
                    d = (uint8_t)(d + leaf->leaf_nullable);
                    defined = 1;
                }
            }
            if (leaf->max_def) put_byte(dl, d);
            if (defined && put_value(v, c, leaf, top->offset + i, NULL) < 0) return -1;
        }
        return rows;
    }
    /* SHAPE_LIST */
    if (top->n_children != 1 || top->n_buffers != 2 || top->buffers[1] == NULL ||
        top->length < rows)
        return -1;
    const struct ArrowArray *c = top->children[0];
    if (check_leaf_array(c, leaf) < 0) return -1;
    const int32_t *o = (const int32_t *)top->buffers[1];
    int64_t entries = 0;
    for (int64_t i = 0; i < rows; i++) {
        if (leaf->top_nullable && !valid_at(top, i)) {
            put_byte(rl, 0); put_byte(dl, 0); entries++;
            continue;
        }
        int64_t start = o[top->offset + i], end = o[top->offset + i + 1];
        if (start < 0 || end < start || end > c->length) return -1;
        uint8_t base = (uint8_t)(leaf->top_nullable + 1);
        if (start == end) {
            put_byte(rl, 0); put_byte(dl, (uint8_t)(base - 1)); entries++;
            continue;
        }
        for (int64_t j = start; j < end; j++) {
            int ok = valid_at(c, j);
            if (!ok && !leaf->leaf_nullable) return -1; /* NULL, declared non-nullable */
            put_byte(rl, j == start ? 0 : 1);
            put_byte(dl, (uint8_t)(base + (ok ? leaf->leaf_nullable : 0)));
            if (ok && put_value(v, c, leaf, j, NULL) < 0) return -1;
            entries++;
        }
    }
    return entries;
}

/* --- the file ----------------------------------------------------------------------------- */

typedef struct {
    int64_t offset, size, num_values;
    Stats stats;
} Chunk;

static void free_scratch(Scratch *s) {
    free(s->values.data);
    free(s->scratch_levels_r.data); free(s->scratch_levels_d.data);
}

/* A key-value metadata entry, pointing into bytes the caller keeps alive. */
typedef struct {
    const char *key, *value;
    size_t key_len, value_len;
} KV;

/* What became of a file (encode's result, a pool job's status): small_file.NOT_COVERED,
 * OS_ERROR and NO_MEMORY name the same numbers. */
enum { ST_OK = 0, ST_NOT_COVERED = 1, ST_OS_ERROR = 2, ST_NO_MEMORY = 3 };

/* The Parquet file of `batch` (of `schema`) into `out`, never touching a Python object (it
 * runs without the GIL: in write_file and in the pool's threads). `kv`: n_kv entries that
 * replace the template's key-value metadata, or n_kv < 0 to keep the template's. Returns
 * ST_OK, ST_NOT_COVERED (the caller lets pyarrow write it) or ST_NO_MEMORY. */
static int encode(const struct ArrowSchema *schema, const struct ArrowArray *batch,
                  const uint8_t *template, size_t template_len,
                  const char *const *statistics, int n_statistics,
                  const KV *kv, Py_ssize_t n_kv, Buf *out) {
    int status = ST_OK;
    Leaf *leaves = NULL;
    Chunk *chunks = NULL;
    Buf page = {0};
    Scratch s;
    memset(&s, 0, sizeof s);
    Splice sp = {NULL, NULL, NULL, NULL, NULL};
    int count = 0;
    int64_t most = 0; /* leaves at most: a struct's children, else one per column */
    for (int64_t i = 0; i < schema->n_children && most <= MAX_LEAVES; i++)
        most += schema->children[i]->n_children > 1 ? schema->children[i]->n_children : 1;
    if (most > MAX_LEAVES) return ST_NOT_COVERED;
    leaves = malloc(sizeof(Leaf) * (size_t)(most ? most : 1));
    if (leaves == NULL) return ST_NO_MEMORY;
    if (splice_template(template, template_len, &sp) < 0 ||
        plan(schema, statistics, n_statistics, leaves, most, &count) < 0 || count == 0 ||
        batch->n_children != schema->n_children || batch->length <= 0 ||
        batch->offset != 0 || batch->null_count > 0) {
        status = ST_NOT_COVERED;
        goto done;
    }
    chunks = calloc((size_t)count, sizeof(Chunk));
    if (chunks == NULL) { status = ST_NO_MEMORY; goto done; }
    put(out, "PAR1", 4);
    for (int i = 0; i < count; i++) {
        Leaf *leaf = &leaves[i];
        Chunk *chunk = &chunks[i];
        int64_t n = leaf_page(batch, leaf, &s, leaf->statistics ? &chunk->stats : NULL);
        if (n < 0 || n > INT32_MAX) { status = ST_NOT_COVERED; goto done; }
        page.len = 0;
        if (leaf->max_rep) put_levels(&page, s.scratch_levels_r.data, n, leaf->max_rep);
        if (leaf->max_def) put_levels(&page, s.scratch_levels_d.data, n, leaf->max_def);
        put(&page, s.values.data, s.values.len);
        if (page.failed) break;
        if (page.len > INT32_MAX) { status = ST_NOT_COVERED; goto done; }
        chunk->offset = (int64_t)out->len;
        chunk->num_values = n;
        TW w = {out, {0}, 0};
        tw_i32(&w, 1, 0);                       /* type: DATA_PAGE */
        tw_i32(&w, 2, (int32_t)page.len);       /* uncompressed_page_size */
        tw_i32(&w, 3, (int32_t)page.len);       /* compressed_page_size */
        tw_field(&w, 5, T_STRUCT);              /* data_page_header */
        tw_begin(&w);
        tw_i32(&w, 1, (int32_t)n);              /* num_values */
        tw_i32(&w, 2, 0);                       /* encoding: PLAIN */
        tw_i32(&w, 3, 3);                       /* definition_level_encoding: RLE */
        tw_i32(&w, 4, 3);                       /* repetition_level_encoding: RLE */
        tw_end(&w);
        put_byte(out, 0);
        put(out, page.data, page.len);
        chunk->size = (int64_t)out->len - chunk->offset;
    }
    if (!out->failed && !page.failed) {
        size_t footer_start = out->len;
        TW w = {out, {0}, 0};
        put(out, sp.head, (size_t)(sp.head_end - sp.head));
        w.last[0] = 2;
        tw_i64(&w, 3, batch->length);           /* num_rows */
        tw_list(&w, 4, T_STRUCT, 1);            /* row_groups */
        tw_begin(&w);
        int64_t total = 0;
        for (int i = 0; i < count; i++) total += chunks[i].size;
        tw_list(&w, 1, T_STRUCT, (size_t)count); /* columns */
        for (int i = 0; i < count; i++) {
            Leaf *leaf = &leaves[i];
            Chunk *chunk = &chunks[i];
            tw_begin(&w);
            tw_i64(&w, 2, chunk->offset);       /* file_offset */
            tw_field(&w, 3, T_STRUCT);          /* meta_data */
            tw_begin(&w);
            tw_i32(&w, 1, leaf->physical);
            tw_list(&w, 2, T_I32, leaf->max_def || leaf->max_rep ? 2 : 1);  /* encodings */
            tw_zigzag(&w, 0);                   /* PLAIN */
            if (leaf->max_def || leaf->max_rep) tw_zigzag(&w, 3);  /* RLE */
            tw_list(&w, 3, T_BINARY, (size_t)leaf->path_len);  /* path_in_schema */
            for (int k = 0; k < leaf->path_len; k++) {
                size_t len = strlen(leaf->path[k]);
                tw_varint(&w, len);
                put(out, leaf->path[k], len);
            }
            tw_i32(&w, 4, 0);                   /* codec: UNCOMPRESSED */
            tw_i64(&w, 5, chunk->num_values);
            tw_i64(&w, 6, chunk->size);         /* total_uncompressed_size */
            tw_i64(&w, 7, chunk->size);         /* total_compressed_size */
            tw_i64(&w, 9, chunk->offset);       /* data_page_offset */
            if (leaf->statistics) {
                tw_field(&w, 12, T_STRUCT);
                tw_begin(&w);
                tw_i64(&w, 3, chunk->stats.nulls);  /* null_count */
                if (chunk->stats.seen) {
                    uint8_t le[8];
                    for (int b = 0; b < 8; b++) le[b] = (uint8_t)((uint64_t)chunk->stats.max >> (8 * b));
                    tw_binary(&w, 5, le, 8);    /* max_value */
                    for (int b = 0; b < 8; b++) le[b] = (uint8_t)((uint64_t)chunk->stats.min >> (8 * b));
                    tw_binary(&w, 6, le, 8);    /* min_value */
                }
                tw_end(&w);
            }
            tw_end(&w);                         /* meta_data */
            tw_end(&w);                         /* ColumnChunk */
        }
        tw_i64(&w, 2, total);                   /* total_byte_size */
        tw_i64(&w, 3, batch->length);           /* num_rows */
        tw_i64(&w, 5, chunks[0].offset);        /* file_offset */
        tw_i64(&w, 6, total);                   /* total_compressed_size */
        tw_field(&w, 7, T_I16);                 /* ordinal */
        tw_zigzag(&w, 0);
        tw_end(&w);                             /* RowGroup */
        if (n_kv < 0) {
            put(out, sp.tail, (size_t)(sp.tail_end - sp.tail));
        } else {
            w.last[0] = 4;
            tw_list(&w, 5, T_STRUCT, (size_t)n_kv);
            for (Py_ssize_t i = 0; i < n_kv; i++) {
                tw_begin(&w);
                tw_binary(&w, 1, kv[i].key, kv[i].key_len);
                tw_binary(&w, 2, kv[i].value, kv[i].value_len);
                tw_end(&w);
            }
            put(out, sp.after_kv, (size_t)(sp.tail_end - sp.after_kv));
        }
        put_le32(out, (uint32_t)(out->len - footer_start));
        put(out, "PAR1", 4);
    }
    if (out->failed || page.failed || s.values.failed || s.scratch_levels_d.failed ||
        s.scratch_levels_r.failed)
        status = ST_NO_MEMORY;
done:
    free(leaves);
    free(chunks);
    free(page.data);
    free_scratch(&s);
    return status;
}

/* The column names of `statistics` (a tuple of str) as UTF-8, borrowed from the str objects
 * (NULL for a name that is not UTF-8: it names no column); NULL with an exception set. */
static const char **statistics_names(PyObject *statistics) {
    Py_ssize_t n = PyTuple_GET_SIZE(statistics);
    const char **names = malloc(sizeof(char *) * (size_t)(n ? n : 1));
    if (names == NULL) { PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(statistics, i);
        if (!PyUnicode_Check(name)) {
            PyErr_SetString(PyExc_TypeError, "statistics: a tuple of column names");
            free(names);
            return NULL;
        }
        names[i] = PyUnicode_AsUTF8(name);
        if (names[i] == NULL) PyErr_Clear();
    }
    return names;
}

/* `kv` (None, or a tuple of (bytes, bytes)) as entries pointing into its bytes objects;
 * *n = -1 for None. NULL with an exception set. */
static KV *kv_entries(PyObject *kv, Py_ssize_t *n) {
    *n = -1;
    if (kv != Py_None) {
        int ok = PyTuple_Check(kv);
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(kv); i++) {
            PyObject *pair = PyTuple_GET_ITEM(kv, i);
            ok = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 &&
                 PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) && PyBytes_Check(PyTuple_GET_ITEM(pair, 1));
        }
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "key_value_metadata: a tuple of (bytes, bytes)");
            return NULL;
        }
        *n = PyTuple_GET_SIZE(kv);
    }
    KV *entries = malloc(sizeof(KV) * (size_t)(*n > 0 ? *n : 1));
    if (entries == NULL) { PyErr_NoMemory(); return NULL; }
    for (Py_ssize_t i = 0; i < *n; i++) {
        PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(kv, i), 0);
        PyObject *value = PyTuple_GET_ITEM(PyTuple_GET_ITEM(kv, i), 1);
        entries[i].key = PyBytes_AS_STRING(key);
        entries[i].key_len = (size_t)PyBytes_GET_SIZE(key);
        entries[i].value = PyBytes_AS_STRING(value);
        entries[i].value_len = (size_t)PyBytes_GET_SIZE(value);
    }
    return entries;
}

/* The ArrowSchema and ArrowArray in the capsules; -1 with an exception set if either is not
 * such a capsule or was already moved out (imported into pyarrow: release is then NULL, and
 * the buffers are no longer the capsule's to lend). */
static int exported_batch(PyObject *schema_capsule, PyObject *array_capsule,
                          const struct ArrowSchema **schema, const struct ArrowArray **batch) {
    *schema = PyCapsule_GetPointer(schema_capsule, "arrow_schema");
    *batch = *schema ? PyCapsule_GetPointer(array_capsule, "arrow_array") : NULL;
    if (*batch == NULL) return -1;
    if ((*schema)->release == NULL || (*batch)->release == NULL) {
        PyErr_SetString(PyExc_ValueError, "the exported batch was already moved out");
        return -1;
    }
    return 0;
}

static PyObject *write_file(PyObject *self, PyObject *args) {
    PyObject *schema_capsule, *array_capsule, *statistics, *kv = Py_None;
    Py_buffer template;
    if (!PyArg_ParseTuple(args, "OOy*O!|O", &schema_capsule, &array_capsule, &template,
                          &PyTuple_Type, &statistics, &kv))
        return NULL;
    PyObject *result = NULL;
    const char **names = NULL;
    KV *entries = NULL;
    Py_ssize_t n_kv;
    Buf out = {0};
    const struct ArrowSchema *schema;
    const struct ArrowArray *batch;
    if (exported_batch(schema_capsule, array_capsule, &schema, &batch) < 0 ||
        (names = statistics_names(statistics)) == NULL ||
        (entries = kv_entries(kv, &n_kv)) == NULL)
        goto done;
    int status;
    /* the str and bytes objects read stay alive: `statistics` and `kv` are the caller's */
    Py_BEGIN_ALLOW_THREADS
    status = encode(schema, batch, template.buf, (size_t)template.len, names,
                    (int)PyTuple_GET_SIZE(statistics), entries, n_kv, &out);
    Py_END_ALLOW_THREADS
    if (status == ST_NO_MEMORY) {
        PyErr_NoMemory();
    } else if (status == ST_NOT_COVERED) {
        result = Py_None;
        Py_INCREF(result);
    } else {
        result = PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.len);
    }
done:
    PyBuffer_Release(&template);
    free(names);
    free(entries);
    free(out.data);
    return result;
}

/* --- the pool: small files encoded and written by threads that never take the GIL ----------- */

/* A job holds everything its thread reads: its path (a C copy) and references to the Python
 * objects whose memory it reads — the capsules (their ArrowSchema/ArrowArray, and through the
 * array's private data the batch's buffers), the template (bytes), the statistics names (a
 * tuple of str: `statistics` points at their UTF-8, which a str keeps) and the key-value
 * metadata (a tuple of bytes pairs: `kv` points into them); tuples, str and bytes never
 * change. Those references are taken and dropped only under the GIL, by submit and reap; the
 * thread only reads the memory they keep alive. */
typedef struct Job {
    struct Job *next;
    long long id;
    char *path;
    PyObject *schema_capsule, *array_capsule, *template_obj;
    const struct ArrowSchema *schema;
    const struct ArrowArray *batch;
    const uint8_t *template;     /* template_obj's bytes, read under the GIL by submit */
    size_t template_len;
    PyObject *statistics_obj, *kv_obj;
    const char **statistics;     /* into statistics_obj's str */
    int n_statistics;
    KV *kv;                      /* into kv_obj's bytes */
    Py_ssize_t n_kv;
    int status, error;
} Job;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t work, done;   /* a job queued (or stop); a job finished */
    Job *queue[2], *tail[2];     /* submitted, not yet started: rows, bytes (write) */
    Job *finished;               /* finished, not yet reaped */
    long long next_id;
    long unfinished;             /* submitted, not yet finished */
    long rows;                   /* of which rows to encode (submit) */
    long bound;                  /* submit waits while this many rows jobs are unfinished */
    int threads, started, stopping;
    pthread_t *tids;
} Pool;

static void job_free(Job *job) {
    /* under the GIL */
    Py_XDECREF(job->schema_capsule);
    Py_XDECREF(job->array_capsule);
    Py_XDECREF(job->template_obj);
    Py_XDECREF(job->statistics_obj);
    Py_XDECREF(job->kv_obj);
    free(job->path);
    free(job->statistics);
    free(job->kv);
    free(job);
}

/* commit.FileSystem.write's twin for threads without the GIL (change them together): all of
 * `data` to `path`, a file that is new or empty (made ahead by trees.py), opened without
 * O_TRUNC (see there), a longer file cut to what was written. Returns 0 or an errno. */
static int write_path(const char *path, const uint8_t *data, size_t len) {
    int fd;
    do fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0666); while (fd < 0 && errno == EINTR);
    if (fd < 0) return errno;
    int error = 0;
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            error = errno;
            break;
        }
        done += (size_t)n;
    }
    struct stat st;
    if (!error && fstat(fd, &st) < 0) error = errno;
    if (!error && st.st_size > (off_t)len && ftruncate(fd, (off_t)len) < 0) error = errno;
    if (close(fd) < 0 && !error && errno != EINTR) error = errno;
    return error;
}

static void job_run(Job *job) {
    if (job->schema == NULL) { /* write(path, data): the bytes as they are */
        job->error = write_path(job->path, job->template, job->template_len);
        job->status = job->error ? ST_OS_ERROR : ST_OK;
        return;
    }
    Buf out = {0};
    job->status = encode(job->schema, job->batch, job->template, job->template_len,
                         job->statistics, job->n_statistics, job->kv, job->n_kv, &out);
    if (job->status == ST_OK) {
        job->error = write_path(job->path, out.data, out.len);
        if (job->error) job->status = ST_OS_ERROR;
    }
    free(out.data);
}

static void *pool_thread(void *arg) {
    Pool *pool = arg;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (pool->queue[0] == NULL && pool->queue[1] == NULL && !pool->stopping)
            pthread_cond_wait(&pool->work, &pool->lock);
        /* rows first: they hold memory and bound submit; bytes fill the gaps */
        int k = pool->queue[0] != NULL ? 0 : 1;
        if (pool->queue[k] == NULL) break; /* stopping, nothing left */
        Job *job = pool->queue[k];
        pool->queue[k] = job->next;
        if (pool->queue[k] == NULL) pool->tail[k] = NULL;
        pthread_mutex_unlock(&pool->lock);
        job_run(job);
        pthread_mutex_lock(&pool->lock);
        job->next = pool->finished;
        pool->finished = job;
        pool->unfinished--;
        if (job->schema != NULL) pool->rows--;
        pthread_cond_broadcast(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

static PyObject *pool_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    int threads, bound;
    if (!PyArg_ParseTuple(args, "ii", &threads, &bound)) return NULL;
    if (threads < 1 || threads > 64 || bound < 1) {
        PyErr_SetString(PyExc_ValueError, "Pool(threads, bound): 1 to 64 threads, bound >= 1");
        return NULL;
    }
    Pool *pool = (Pool *)type->tp_alloc(type, 0);
    if (pool == NULL) return NULL;
    pool->tids = calloc((size_t)threads, sizeof(pthread_t));
    if (pool->tids == NULL) { Py_DECREF(pool); return PyErr_NoMemory(); }
    pthread_mutex_init(&pool->lock, NULL);
    pthread_cond_init(&pool->work, NULL);
    pthread_cond_init(&pool->done, NULL);
    pool->threads = threads;
    pool->bound = bound;
    pool->next_id = 1;
    return (PyObject *)pool;
}

/* Takes the finished jobs off the pool (lock held). */
static Job *take_finished(Pool *pool) {
    Job *done = pool->finished;
    pool->finished = NULL;
    return done;
}

/* Stops the threads once every job queued has run, and joins them (GIL released). */
static void pool_stop(Pool *pool) {
    if (pool->started == 0) return;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&pool->lock);
    pool->stopping = 1;
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 0; i < pool->started; i++) pthread_join(pool->tids[i], NULL);
    Py_END_ALLOW_THREADS
    pool->started = 0;
    pool->stopping = 0;
}

static void pool_dealloc(Pool *pool) {
    if (pool->tids != NULL) {
        pool_stop(pool);
        Job *job = take_finished(pool);
        while (job != NULL) {
            Job *next = job->next;
            job_free(job);
            job = next;
        }
        pthread_mutex_destroy(&pool->lock);
        pthread_cond_destroy(&pool->work);
        pthread_cond_destroy(&pool->done);
        free(pool->tids);
    }
    Py_TYPE(pool)->tp_free((PyObject *)pool);
}

/* Queues `job` (made under the GIL) and returns its id: a job of rows waits, GIL released,
 * while `bound` jobs of rows are unfinished (they wait for a thread holding their batch;
 * bytes to write are in memory already, and run when no rows wait; what finished jobs hold
 * until reaped the caller bounds, files.NATIVE_WINDOW). -1 with an exception set (the job
 * freed) when not even one thread could be made. */
static long long enqueue(Pool *pool, Job *job) {
    /* threads made as jobs need them: as many as jobs unfinished, up to `threads` */
    pthread_mutex_lock(&pool->lock);
    long wanted = pool->unfinished + 1;
    pthread_mutex_unlock(&pool->lock);
    while (pool->started < pool->threads && pool->started < wanted) {
        int error = pthread_create(&pool->tids[pool->started], NULL, pool_thread, pool);
        if (error) {
            if (pool->started > 0) break; /* the threads there are will do */
            errno = error;
            PyErr_SetFromErrno(PyExc_OSError);
            job_free(job);
            return -1;
        }
        pool->started++;
    }
    long long id;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&pool->lock);
    int k = job->schema != NULL ? 0 : 1;
    while (k == 0 && pool->rows >= pool->bound) pthread_cond_wait(&pool->done, &pool->lock);
    id = job->id = pool->next_id++;
    if (pool->tail[k] != NULL) pool->tail[k]->next = job;
    else pool->queue[k] = job;
    pool->tail[k] = job;
    pool->unfinished++;
    if (k == 0) pool->rows++;
    pthread_cond_signal(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    Py_END_ALLOW_THREADS
    return id;
}

static PyObject *pool_submit(Pool *pool, PyObject *args) {
    PyObject *path_obj, *schema_capsule, *array_capsule, *template_obj, *statistics, *kv;
    if (!PyArg_ParseTuple(args, "O&OOO!O!O", PyUnicode_FSConverter, &path_obj, &schema_capsule,
                          &array_capsule, &PyBytes_Type, &template_obj, &PyTuple_Type,
                          &statistics, &kv))
        return NULL;
    Job *job = calloc(1, sizeof(Job));
    if (job == NULL || (job->path = strdup(PyBytes_AS_STRING(path_obj))) == NULL) {
        PyErr_NoMemory();
        goto failed;
    }
    Py_CLEAR(path_obj);
    if (exported_batch(schema_capsule, array_capsule, &job->schema, &job->batch) < 0 ||
        (job->statistics = statistics_names(statistics)) == NULL ||
        (job->kv = kv_entries(kv, &job->n_kv)) == NULL)
        goto failed;
    job->n_statistics = (int)PyTuple_GET_SIZE(statistics);
    Py_INCREF(schema_capsule);
    job->schema_capsule = schema_capsule;
    Py_INCREF(array_capsule);
    job->array_capsule = array_capsule;
    Py_INCREF(template_obj);
    job->template_obj = template_obj;
    job->template = (const uint8_t *)PyBytes_AS_STRING(template_obj);
    job->template_len = (size_t)PyBytes_GET_SIZE(template_obj);
    Py_INCREF(statistics);
    job->statistics_obj = statistics;
    Py_INCREF(kv);
    job->kv_obj = kv;
    long long id = enqueue(pool, job);
    return id < 0 ? NULL : PyLong_FromLongLong(id);
failed:
    Py_XDECREF(path_obj);
    if (job != NULL) job_free(job);
    return NULL;
}

static PyObject *pool_write(Pool *pool, PyObject *args) {
    PyObject *path_obj, *data;
    if (!PyArg_ParseTuple(args, "O&O!", PyUnicode_FSConverter, &path_obj, &PyBytes_Type, &data))
        return NULL;
    Job *job = calloc(1, sizeof(Job));
    if (job == NULL || (job->path = strdup(PyBytes_AS_STRING(path_obj))) == NULL) {
        Py_DECREF(path_obj);
        free(job);
        return PyErr_NoMemory();
    }
    Py_DECREF(path_obj);
    Py_INCREF(data);
    job->template_obj = data; /* the bytes written, held until reaped */
    job->template = (const uint8_t *)PyBytes_AS_STRING(data);
    job->template_len = (size_t)PyBytes_GET_SIZE(data);
    long long id = enqueue(pool, job);
    return id < 0 ? NULL : PyLong_FromLongLong(id);
}

static PyObject *pool_reap(Pool *pool, PyObject *args) {
    int wait_all = 0;
    if (!PyArg_ParseTuple(args, "|p", &wait_all)) return NULL;
    Job *done;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&pool->lock);
    while (wait_all && pool->unfinished > 0) pthread_cond_wait(&pool->done, &pool->lock);
    done = take_finished(pool);
    pthread_mutex_unlock(&pool->lock);
    Py_END_ALLOW_THREADS
    PyObject *result = PyList_New(0);
    while (done != NULL) {
        Job *next = done->next;
        if (result != NULL) {
            PyObject *item = Py_BuildValue("(Lii)", done->id, done->status, done->error);
            if (item == NULL || PyList_Append(result, item) < 0) Py_CLEAR(result);
            Py_XDECREF(item);
        }
        job_free(done);
        done = next;
    }
    return result;
}

static PyObject *pool_close(Pool *pool, PyObject *unused) {
    pool_stop(pool);
    Py_RETURN_NONE;
}

static PyMethodDef pool_methods[] = {
    {"submit", (PyCFunction)pool_submit, METH_VARARGS,
     "submit(path, schema_capsule, array_capsule, template, statistics, key_value_metadata)"
     " -> job id: encode and write the file in the pool's threads (waits, GIL released, while"
     " `bound` jobs of rows are unfinished)"},
    {"write", (PyCFunction)pool_write, METH_VARARGS,
     "write(path, data: bytes) -> job id: write the bytes as they are in the pool's threads"},
    {"reap", (PyCFunction)pool_reap, METH_VARARGS,
     "reap(wait_all=False) -> [(job id, status, errno)] of the jobs finished since the last"
     " reap; status 0 written, 1 not covered (pyarrow writes it), 2 OS error, 3 no memory"},
    {"close", (PyCFunction)pool_close, METH_NOARGS,
     "close(): run what is queued, then stop and join the threads (a later submit restarts them)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject PoolType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sinks.parquet._native_parquet.Pool",
    .tp_basicsize = sizeof(Pool),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Pool(threads, bound): small Parquet files encoded and written by threads that "
              "never take the GIL; submit waits while `bound` jobs of rows are unfinished. "
              "One Python thread at a time uses a pool (the flush's)",
    .tp_new = pool_new,
    .tp_dealloc = (destructor)pool_dealloc,
    .tp_methods = pool_methods,
};

static PyMethodDef methods[] = {
    {"write", write_file, METH_VARARGS,
     "write(schema_capsule, array_capsule, template, statistics, key_value_metadata=None)"
     " -> bytes | None"},
    {NULL, NULL, 0, NULL},
};

/* What the Python side checks before it uses this extension (protocol/native_switch.py):
 * bump it with the loader's ABI whenever what the module exports, or how it is called, changes */
#define ABI_VERSION 1

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_parquet",
    "A small Parquet file written natively (see sinks/parquet/small_file.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

/* The module, carrying ABI_VERSION; NULL (the error set) when either fails. */
static PyObject *create_module(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0)
        Py_CLEAR(m);
    return m;
}

PyMODINIT_FUNC PyInit__native_parquet(void) {
    if (PyType_Ready(&PoolType) < 0) return NULL;
    PyObject *m = create_module();
    if (m == NULL) return NULL;
    Py_INCREF(&PoolType);
    if (PyModule_AddObject(m, "Pool", (PyObject *)&PoolType) < 0) {
        Py_DECREF(&PoolType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
