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
 * cannot splice): the caller then writes the file with pyarrow, which decides. Reads the rows only where the arrays' lengths, offsets and validity say
 * (valid Arrow data, as pyarrow makes), and the template only within its bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

enum { P_INT32 = 1, P_INT64 = 2, P_FLOAT = 4, P_DOUBLE = 5, P_BYTE_ARRAY = 6, P_FLBA = 7 };
enum { V_I8, V_I16, V_I32, V_I64, V_F32, V_F64, V_BYTES, V_DEC };
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
    if (!strcmp(f, "c")) { *physical = P_INT32; return V_I8; }
    if (!strcmp(f, "s")) { *physical = P_INT32; return V_I16; }
    if (!strcmp(f, "i") || !strcmp(f, "tdD")) { *physical = P_INT32; return V_I32; }
    if (!strcmp(f, "l") || !strncmp(f, "tsu:", 4)) { *physical = P_INT64; return V_I64; }
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

static int in_list(PyObject *names, const char *name) {
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    for (Py_ssize_t i = 0; i < n; i++) {
        const char *s = PyUnicode_AsUTF8(PyTuple_GET_ITEM(names, i));
        if (s == NULL) { PyErr_Clear(); continue; }  /* not UTF-8: names no column */
        if (!strcmp(s, name)) return 1;
    }
    return 0;
}

/* The leaves of `schema` in Parquet's column order; -1 when a shape is not covered. */
static int plan(const struct ArrowSchema *schema, PyObject *statistics, Leaf *leaves,
                int64_t capacity, int *count) {
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
            leaf->statistics = in_list(statistics, f->name);
            if (leaf->statistics && leaf->physical != P_INT64) return -1;
        }
    }
    *count = n;
    return 0;
}

/* --- the values and levels of a leaf ---------------------------------------------------------- */

static int valid_at(const struct ArrowArray *a, int64_t i) {
    const uint8_t *bits = a->n_buffers > 0 ? (const uint8_t *)a->buffers[0] : NULL;
    if (bits == NULL || a->null_count == 0) return 1;
    int64_t k = a->offset + i;
    return (bits[k >> 3] >> (k & 7)) & 1;
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
    Buf hb = {header, 0, sizeof header, 0};
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
    Buf rep, def, values, scratch_levels_r, scratch_levels_d;
} Scratch;

/* Levels (as bytes) and PLAIN values of one leaf over the batch's rows; returns the number
 * of level entries (= the page's num_values), or -1. */
static int64_t leaf_page(const struct ArrowArray *batch, const Leaf *leaf, Scratch *s,
                         Stats *st) {
    Buf *rl = &s->scratch_levels_r, *dl = &s->scratch_levels_d, *v = &s->values;
    rl->len = dl->len = v->len = 0;
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
    free(s->rep.data); free(s->def.data); free(s->values.data);
    free(s->scratch_levels_r.data); free(s->scratch_levels_d.data);
}

static PyObject *write_file(PyObject *self, PyObject *args) {
    PyObject *schema_capsule, *array_capsule, *statistics, *kv = Py_None;
    Py_buffer template;
    if (!PyArg_ParseTuple(args, "OOy*O!|O", &schema_capsule, &array_capsule, &template,
                          &PyTuple_Type, &statistics, &kv))
        return NULL;
    PyObject *result = NULL;
    Leaf *leaves = NULL;
    Chunk *chunks = NULL;
    Buf out = {0}, page = {0};
    Scratch s;
    memset(&s, 0, sizeof s);
    struct ArrowSchema *schema = PyCapsule_GetPointer(schema_capsule, "arrow_schema");
    struct ArrowArray *batch = schema ? PyCapsule_GetPointer(array_capsule, "arrow_array") : NULL;
    if (batch == NULL) goto done;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(statistics); i++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(statistics, i))) {
            PyErr_SetString(PyExc_TypeError, "statistics: a tuple of column names");
            goto done;
        }
    if (kv != Py_None) {
        int ok = PyTuple_Check(kv);
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(kv); i++) {
            PyObject *pair = PyTuple_GET_ITEM(kv, i);
            ok = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 &&
                 PyBytes_Check(PyTuple_GET_ITEM(pair, 0)) && PyBytes_Check(PyTuple_GET_ITEM(pair, 1));
        }
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "key_value_metadata: a tuple of (bytes, bytes)");
            goto done;
        }
    }
    Splice sp = {NULL, NULL, NULL, NULL, NULL};
    int count = 0;
    int64_t most = 0; /* leaves at most: a struct's children, else one per column */
    for (int64_t i = 0; i < schema->n_children && most <= MAX_LEAVES; i++)
        most += schema->children[i]->n_children > 1 ? schema->children[i]->n_children : 1;
    if (most > MAX_LEAVES) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    leaves = malloc(sizeof(Leaf) * (size_t)(most ? most : 1));
    if (leaves == NULL) { PyErr_NoMemory(); goto done; }
    if (splice_template(template.buf, (size_t)template.len, &sp) < 0 ||
        plan(schema, statistics, leaves, most, &count) < 0 || count == 0 ||
        batch->n_children != schema->n_children || batch->length <= 0 ||
        batch->offset != 0 || batch->null_count > 0) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    chunks = calloc((size_t)count, sizeof(Chunk));
    if (chunks == NULL) { PyErr_NoMemory(); goto done; }
    int unsupported = 0;
    Py_BEGIN_ALLOW_THREADS
    put(&out, "PAR1", 4);
    for (int i = 0; i < count && !unsupported; i++) {
        Leaf *leaf = &leaves[i];
        Chunk *chunk = &chunks[i];
        int64_t n = leaf_page(batch, leaf, &s, leaf->statistics ? &chunk->stats : NULL);
        if (n < 0 || n > INT32_MAX) { unsupported = 1; break; }
        page.len = 0;
        if (leaf->max_rep) put_levels(&page, s.scratch_levels_r.data, n, leaf->max_rep);
        if (leaf->max_def) put_levels(&page, s.scratch_levels_d.data, n, leaf->max_def);
        put(&page, s.values.data, s.values.len);
        if (page.failed || page.len > INT32_MAX) { unsupported = 1; break; }
        chunk->offset = (int64_t)out.len;
        chunk->num_values = n;
        TW w = {&out, {0}, 0};
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
        put_byte(&out, 0);
        put(&out, page.data, page.len);
        chunk->size = (int64_t)out.len - chunk->offset;
    }
    if (!unsupported && !out.failed) {
        size_t footer_start = out.len;
        TW w = {&out, {0}, 0};
        put(&out, sp.head, (size_t)(sp.head_end - sp.head));
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
                put(&out, leaf->path[k], len);
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
        if (kv == Py_None) {
            put(&out, sp.tail, (size_t)(sp.tail_end - sp.tail));
        } else { /* field 5 given: the bytes objects live in `kv`, held by the caller */
            w.last[0] = 4;
            tw_list(&w, 5, T_STRUCT, (size_t)PyTuple_GET_SIZE(kv));
            for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kv); i++) {
                PyObject *key = PyTuple_GET_ITEM(PyTuple_GET_ITEM(kv, i), 0);
                PyObject *value = PyTuple_GET_ITEM(PyTuple_GET_ITEM(kv, i), 1);
                tw_begin(&w);
                tw_binary(&w, 1, PyBytes_AS_STRING(key), (size_t)PyBytes_GET_SIZE(key));
                tw_binary(&w, 2, PyBytes_AS_STRING(value), (size_t)PyBytes_GET_SIZE(value));
                tw_end(&w);
            }
            put(&out, sp.after_kv, (size_t)(sp.tail_end - sp.after_kv));
        }
        put_le32(&out, (uint32_t)(out.len - footer_start));
        put(&out, "PAR1", 4);
    }
    Py_END_ALLOW_THREADS
    if (out.failed || page.failed || s.values.failed || s.scratch_levels_d.failed ||
        s.scratch_levels_r.failed) {
        PyErr_NoMemory();
        goto done;
    }
    if (unsupported) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    result = PyBytes_FromStringAndSize((const char *)out.data, (Py_ssize_t)out.len);
done:
    PyBuffer_Release(&template);
    free(leaves);
    free(chunks);
    free(out.data);
    free(page.data);
    free_scratch(&s);
    return result;
}

static PyMethodDef methods[] = {
    {"write", write_file, METH_VARARGS,
     "write(schema_capsule, array_capsule, template, statistics, key_value_metadata=None)"
     " -> bytes | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_parquet",
    "A small Parquet file written natively (see sinks/parquet/small_file.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native_parquet(void) { return PyModule_Create(&module); }
