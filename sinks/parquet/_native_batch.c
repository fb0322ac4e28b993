/* A batch's Arrow columns from the row decoder's chunks, and the metadata columns of the lake:
 * the sink's half of the native Arrow path (sinks/parquet/rows.py; loaded by
 * sinks/parquet/native_batch.py).
 *
 * The row decoder (protocol/binlog/_native_rows.c) exports, per rows event and column, a chunk
 * (tag, nulls, validity | None, data, offsets | None): typed column buffers in one of the
 * layouts it names. This module knows nothing of binlog bytes: it joins those chunks into a
 * batch's columns (concat, gather, gather_all), sizes them (arrow_bytes), fills the columns the
 * lake adds to every row from each event's tags (meta_columns) and hands a whole batch to Arrow
 * (export_batch). The layouts and their widths are the decoder's: read from it at import
 * (_native_rows.LAYOUTS), never repeated here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the Arrow buffers hold the host's integers: a little-endian host is needed"
#endif

/* The decoder's layouts: tag and value width in bytes (0: int32 offsets + bytes). */
#define MAX_LAYOUTS 32
static PyObject *layout_tags[MAX_LAYOUTS];
static int layout_width[MAX_LAYOUTS];
static int n_layouts;

static int load_layouts(void) {
    PyObject *rows = PyImport_ImportModule("protocol.binlog._native_rows");
    if (rows == NULL) return -1;
    PyObject *layouts = PyObject_GetAttrString(rows, "LAYOUTS");
    Py_DECREF(rows);
    if (layouts == NULL) return -1;
    if (!PyTuple_Check(layouts) || PyTuple_GET_SIZE(layouts) > MAX_LAYOUTS) goto bad;
    n_layouts = (int)PyTuple_GET_SIZE(layouts);
    for (int i = 0; i < n_layouts; i++) {
        PyObject *entry = PyTuple_GET_ITEM(layouts, i);
        if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2
            || !PyUnicode_Check(PyTuple_GET_ITEM(entry, 0))) goto bad;
        long width = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
        if (width < 0 || width > 16) goto bad;
        layout_tags[i] = Py_NewRef(PyTuple_GET_ITEM(entry, 0));
        layout_width[i] = (int)width;
    }
    Py_DECREF(layouts);
    return 0;
bad:
    Py_DECREF(layouts);
    PyErr_Clear();
    PyErr_SetString(PyExc_ImportError, "_native_rows.LAYOUTS: a tuple of (tag, width)");
    return -1;
}

/* The width of the layout tagged tag; -1 (ValueError) for a tag the decoder does not make. */
static int width_of(PyObject *tag) {
    for (int i = 0; i < n_layouts; i++)  /* a chunk carries the decoder's interned tag */
        if (tag == layout_tags[i]) return layout_width[i];
    for (int i = 0; i < n_layouts; i++) {
        int same = PyUnicode_Compare(tag, layout_tags[i]);
        if (same == 0) return layout_width[i];
        if (same == -1 && PyErr_Occurred()) return -1;
    }
    PyErr_SetString(PyExc_ValueError, "unknown layout tag");
    return -1;
}

/* Whether a chunk of layout `from` lands in a column of layout `to`: the same layout, or an
 * unsigned integer (u1, u2, u4, u8) in a wider signed one (i2, i4, i8) or in a 128-bit decimal
 * of scale 0 (dec): zero-extended, the value unchanged. The decoder keeps unsigned integers as
 * they are; the lake's type for them (sinks/parquet/types.py) picks `to`. */
static int widens(PyObject *from, PyObject *to) {
    if (from == to) return 1;
    const char *f = PyUnicode_Check(from) ? PyUnicode_AsUTF8(from) : NULL;
    const char *t = PyUnicode_Check(to) ? PyUnicode_AsUTF8(to) : NULL;
    if (f == NULL || t == NULL) {
        PyErr_Clear();
        return 0;
    }
    if (strcmp(f, t) == 0) return 1;
    if (f[0] != 'u' || (t[0] != 'i' && strcmp(t, "dec") != 0)) return 0;
    int fw = width_of(from), tw = width_of(to);
    if (fw < 0 || tw < 0) {
        PyErr_Clear();
        return 0;
    }
    return tw > fw;
}

/* concat(tag, segments) -> (rows, nulls, validity | None, data, offsets | None)
 * segments: a sequence of (chunk | None, rows); None is that many NULLs (a column absent from
 * an image, or the rows of a batch with no before image). A chunk carries ``tag`` or a layout
 * that widens to it (ValueError otherwise); a string column over 2 GiB raises OverflowError
 * (the caller then takes the Python path, which splits it as today). */
static PyObject *concat(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "concat(tag: str, segments)");
        return NULL;
    }
    int w = width_of(args[0]);
    if (w < 0) return NULL;
    PyObject *seq = PySequence_Fast(args[1], "segments must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t nseg = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_ssize_t rows = 0, nulls = 0, databytes = 0;
    for (Py_ssize_t i = 0; i < nseg; i++) {
        PyObject *seg = items[i], *chunk;
        Py_ssize_t n;
        if (!PyTuple_Check(seg) || PyTuple_GET_SIZE(seg) != 2) goto bad;
        chunk = PyTuple_GET_ITEM(seg, 0);
        n = PyLong_AsSsize_t(PyTuple_GET_ITEM(seg, 1));
        if (n < 0) goto bad;
        if (chunk == Py_None) {
            nulls += n;
            databytes += w * n;
        } else {
            if (!PyTuple_Check(chunk) || PyTuple_GET_SIZE(chunk) != 5
                || !PyBytes_Check(PyTuple_GET_ITEM(chunk, 3))
                || !widens(PyTuple_GET_ITEM(chunk, 0), args[0])) goto bad;
            int cw = PyTuple_GET_ITEM(chunk, 0) == args[0] ? w
                     : width_of(PyTuple_GET_ITEM(chunk, 0));
            PyObject *o = PyTuple_GET_ITEM(chunk, 4);
            PyObject *v = PyTuple_GET_ITEM(chunk, 2);
            Py_ssize_t dl = PyBytes_GET_SIZE(PyTuple_GET_ITEM(chunk, 3));
            if (w ? dl != cw * n : (!PyBytes_Check(o) || PyBytes_GET_SIZE(o) != 4 * (n + 1)))
                goto bad;
            if (v != Py_None && (!PyBytes_Check(v) || PyBytes_GET_SIZE(v) < (n + 7) / 8))
                goto bad;
            nulls += PyLong_AsSsize_t(PyTuple_GET_ITEM(chunk, 1));
            databytes += w ? w * n : dl;
        }
        rows += n;
    }
    if (PyErr_Occurred()) goto fail;
    if (!w && databytes > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "string column over 2 GiB");
        goto fail;
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, databytes);
    PyObject *offsets = w ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize(NULL, 4 * (rows + 1));
    PyObject *valid = nulls ? PyBytes_FromStringAndSize(NULL, (rows + 7) / 8) : Py_NewRef(Py_None);
    if (data == NULL || offsets == NULL || valid == NULL) {
        Py_XDECREF(data); Py_XDECREF(offsets); Py_XDECREF(valid);
        goto fail;
    }
    char *dp = PyBytes_AS_STRING(data);
    int32_t *op = w ? NULL : (int32_t *)PyBytes_AS_STRING(offsets);
    unsigned char *vp = nulls ? (unsigned char *)PyBytes_AS_STRING(valid) : NULL;
    if (vp) memset(vp, 0, (size_t)(rows + 7) / 8);
    Py_ssize_t row = 0, pos = 0;
    if (op) op[0] = 0;
    for (Py_ssize_t i = 0; i < nseg; i++) {
        PyObject *chunk = PyTuple_GET_ITEM(items[i], 0);
        Py_ssize_t n = PyLong_AsSsize_t(PyTuple_GET_ITEM(items[i], 1));
        if (chunk == Py_None) {
            if (w) { memset(dp + pos, 0, (size_t)(w * n)); pos += w * n; }
            else for (Py_ssize_t r = 0; r < n; r++) op[row + r + 1] = (int32_t)pos;
            row += n;
            continue;
        }
        PyObject *d = PyTuple_GET_ITEM(chunk, 3), *v = PyTuple_GET_ITEM(chunk, 2);
        Py_ssize_t dl = PyBytes_GET_SIZE(d);
        int cw = w && PyTuple_GET_ITEM(chunk, 0) != args[0] ? width_of(PyTuple_GET_ITEM(chunk, 0))
                                                           : w;
        if (cw == w) {
            memcpy(dp + pos, PyBytes_AS_STRING(d), (size_t)dl);
        } else {  /* an unsigned integer zero-extended to the column's width (widens) */
            const char *src = PyBytes_AS_STRING(d);
            memset(dp + pos, 0, (size_t)(w * n));
            for (Py_ssize_t r = 0; r < n; r++)
                memcpy(dp + pos + w * r, src + cw * r, (size_t)cw);
            dl = w * n;
        }
        if (op) {
            const char *src = PyBytes_AS_STRING(PyTuple_GET_ITEM(chunk, 4));
            for (Py_ssize_t r = 1; r <= n; r++) {
                int32_t e;
                memcpy(&e, src + 4 * r, 4);
                op[row + r] = (int32_t)pos + e;
            }
        }
        if (vp) {
            const unsigned char *sv = v == Py_None ? NULL
                                      : (const unsigned char *)PyBytes_AS_STRING(v);
            for (Py_ssize_t r = 0; r < n; r++)
                if (sv == NULL || (sv[r >> 3] >> (r & 7) & 1))
                    vp[(row + r) >> 3] |= (unsigned char)(1u << ((row + r) & 7));
        }
        pos += dl;
        row += n;
    }
    Py_DECREF(seq);
    PyObject *res = Py_BuildValue("(nnNNN)", rows, nulls, valid, data, offsets);
    return res;
bad:
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "malformed concat segment");
fail:
    Py_DECREF(seq);
    return NULL;
}

/* arrow_bytes(images) -> int
 * The bytes of every buffer (validity, data, offsets) of the chunks of a rows event's Arrow
 * images ``(before chunks or None, after chunks or None)``, each chunk None or
 * ``(tag, nulls, validity, data, offsets)``: the sink's memory estimate per event
 * (sinks/parquet/writer.py _estimate), a loop over every column that showed in profiles of
 * one-row transactions. Anything else raises TypeError. */
static PyObject *arrow_bytes(PyObject *self, PyObject *images) {
    (void)self;
    if (!PyTuple_Check(images)) {
        PyErr_SetString(PyExc_TypeError, "arrow_bytes: images must be a tuple");
        return NULL;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(images); i++) {
        PyObject *chunks = PyTuple_GET_ITEM(images, i);
        if (chunks == Py_None)
            continue;
        if (!PyTuple_Check(chunks)) {
            PyErr_SetString(PyExc_TypeError, "arrow_bytes: an image's chunks must be a tuple");
            return NULL;
        }
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(chunks); j++) {
            PyObject *chunk = PyTuple_GET_ITEM(chunks, j);
            if (chunk == Py_None)
                continue;
            if (!PyTuple_Check(chunk) || PyTuple_GET_SIZE(chunk) != 5) {
                PyErr_SetString(PyExc_TypeError, "arrow_bytes: a chunk must be a 5-tuple");
                return NULL;
            }
            for (Py_ssize_t b = 2; b < 5; b++) {
                PyObject *buffer = PyTuple_GET_ITEM(chunk, b);
                if (buffer == Py_None && b != 3)
                    continue;
                Py_ssize_t n = PyObject_Size(buffer);  /* TypeError for a None data buffer */
                if (n < 0)
                    return NULL;
                total += n;
            }
        }
    }
    return PyLong_FromSsize_t(total);
}

/* gather(tag, k, entries) -> concat's result, or None
 * Table column k of a batch from its entries (sinks/parquet/rows.py): per image (slots, chunks,
 * values, rows) — slots None means the table's order, values None an image the rows lack. The
 * column is NULL where the image lacks it; None when some image holds it in no chunk of
 * ``tag`` or of a layout that widens to it (the caller then converts the Python values). */
static PyObject *gather(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyUnicode_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "gather(tag: str, k: int, entries)");
        return NULL;
    }
    Py_ssize_t k = PyLong_AsSsize_t(args[1]);
    if (k < 0) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "negative column");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[2], "entries must be a sequence");
    if (seq == NULL) return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    PyObject *parts = PyList_New(count), *result = NULL;
    if (parts == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *e = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyTuple_Check(e) || PyTuple_GET_SIZE(e) != 4) {
            PyErr_SetString(PyExc_ValueError, "malformed gather entry");
            goto done;
        }
        PyObject *slots = PyTuple_GET_ITEM(e, 0), *chunks = PyTuple_GET_ITEM(e, 1);
        PyObject *chunk = Py_None;
        if (PyTuple_GET_ITEM(e, 2) != Py_None) {
            PyObject *slot = NULL;
            Py_ssize_t at = k;
            if (slots != Py_None) {
                if (!PyTuple_Check(slots) || k >= PyTuple_GET_SIZE(slots)) {
                    PyErr_SetString(PyExc_ValueError, "malformed gather slots");
                    goto done;
                }
                slot = PyTuple_GET_ITEM(slots, k);
                at = slot == Py_None ? -1 : PyLong_AsSsize_t(slot);
                if (at == -1 && PyErr_Occurred()) goto done;
            }
            if (at >= 0) {
                if (!PyTuple_Check(chunks) || at >= PyTuple_GET_SIZE(chunks)) {
                    result = Py_NewRef(Py_None);  /* no chunks: the Python values */
                    goto done;
                }
                chunk = PyTuple_GET_ITEM(chunks, at);
                if (!PyTuple_Check(chunk) || PyTuple_GET_SIZE(chunk) != 5
                    || !widens(PyTuple_GET_ITEM(chunk, 0), args[0])) {
                    result = Py_NewRef(Py_None);
                    goto done;
                }
            }
        }
        PyObject *part = PyTuple_Pack(2, chunk, PyTuple_GET_ITEM(e, 3));
        if (part == NULL) goto done;
        PyList_SET_ITEM(parts, i, part);
    }
    PyObject *cargs[2] = {args[0], parts};
    result = concat(self, cargs, 2);
done:
    Py_XDECREF(parts);
    Py_DECREF(seq);
    return result;
}

/* gather_all(tags, entries) -> [gather's result or None per column]
 * Every table column of a batch at once (tags: each column's native tag, None for a column
 * the native layouts do not cover): one call per batch instead of one per column, which
 * showed at a flush over thousands of small tables. None for a column without a tag, one
 * gather gives None for, or one over 2 GiB of strings (OverflowError: the caller converts
 * its Python values, which splits it). */
static PyObject *gather_all(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "gather_all(tags: tuple, entries)");
        return NULL;
    }
    Py_ssize_t width = PyTuple_GET_SIZE(args[0]);
    PyObject *out = PyList_New(width);
    if (out == NULL) return NULL;
    for (Py_ssize_t k = 0; k < width; k++) {
        PyObject *tag = PyTuple_GET_ITEM(args[0], k), *column;
        if (tag == Py_None) {
            column = Py_NewRef(Py_None);
        } else {
            PyObject *index = PyLong_FromSsize_t(k);
            if (index == NULL) { Py_DECREF(out); return NULL; }
            PyObject *gargs[3] = {tag, index, args[1]};
            column = gather(self, gargs, 3);
            Py_DECREF(index);
            if (column == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_OverflowError)) { Py_DECREF(out); return NULL; }
                PyErr_Clear();
                column = Py_NewRef(Py_None);
            }
        }
        PyList_SET_ITEM(out, k, column);
    }
    return out;
}

/* meta_columns(tags, ends, kinds) -> tuple: per kind, (nulls, validity | None, data,
 * offsets | None), or None for a column of NULLs only (or a kind "-": not wanted)
 * The metadata columns of a batch (sinks/parquet/rows.py) from its events' tags: event i's
 * rows end at ends[i] (batch-wide, non-decreasing) and carry tags[i][c] in column c. Kinds:
 * "i" int64 (int or None), "s" UTF-8 string (str or None), "r" int64 row number: the row's
 * index in the batch plus tags[i][c] (an int), "-" skipped. A value of another type or out of
 * int64 raises TypeError / OverflowError (the caller then takes its Python path, which raises
 * or converts as ever); so does a string column over 2 GiB. */
static PyObject *meta_columns(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 3 || !PyList_Check(args[0]) || !PyList_Check(args[1])
        || !PyBytes_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "meta_columns(tags: list, ends: list, kinds: bytes)");
        return NULL;
    }
    PyObject *tags = args[0], *ends = args[1];
    Py_ssize_t events = PyList_GET_SIZE(tags), width = PyBytes_GET_SIZE(args[2]);
    const char *kinds = PyBytes_AS_STRING(args[2]);
    if (PyList_GET_SIZE(ends) != events) {
        PyErr_SetString(PyExc_ValueError, "meta_columns: one end per event");
        return NULL;
    }
    Py_ssize_t *end = PyMem_Malloc(sizeof(Py_ssize_t) * (size_t)(events + 1));
    if (end == NULL) return PyErr_NoMemory();
    PyObject *out = NULL;
    Py_ssize_t rows = 0;
    for (Py_ssize_t e = 0; e < events; e++) {
        PyObject *t = PyList_GET_ITEM(tags, e);
        Py_ssize_t at = PyLong_AsSsize_t(PyList_GET_ITEM(ends, e));
        if (at == -1 && PyErr_Occurred()) goto fail;
        if (at < rows || !PyTuple_Check(t) || PyTuple_GET_SIZE(t) < width) {
            PyErr_SetString(PyExc_ValueError, "meta_columns: malformed tags or ends");
            goto fail;
        }
        end[e] = rows = at;
    }
    if (rows > PY_SSIZE_T_MAX / 8 - 8) { PyErr_NoMemory(); goto fail; }
    out = PyTuple_New(width);
    if (out == NULL) goto fail;
    for (Py_ssize_t c = 0; c < width; c++) {
        char kind = kinds[c];
        if (kind == '-') {
            PyTuple_SET_ITEM(out, c, Py_NewRef(Py_None));
            continue;
        }
        if (kind != 'i' && kind != 's' && kind != 'r') {
            PyErr_SetString(PyExc_ValueError, "meta_columns: unknown kind");
            goto fail;
        }
        /* First pass: NULL rows, string bytes, values checked. */
        Py_ssize_t nulls = 0, bytes = 0, start = 0;
        for (Py_ssize_t e = 0; e < events; e++) {
            PyObject *v = PyTuple_GET_ITEM(PyList_GET_ITEM(tags, e), c);
            Py_ssize_t n = end[e] - start;
            start = end[e];
            if (v == Py_None && kind != 'r') {
                nulls += n;
            } else if (kind == 's') {
                Py_ssize_t len;
                if (!PyUnicode_Check(v)) {
                    PyErr_SetString(PyExc_TypeError, "meta_columns: a string column holds a non-str");
                    goto fail;
                }
                if (PyUnicode_AsUTF8AndSize(v, &len) == NULL) goto fail;
                if (n && len > (INT32_MAX - bytes) / n) {
                    PyErr_SetString(PyExc_OverflowError, "meta_columns: string column over 2 GiB");
                    goto fail;
                }
                bytes += len * n;
            } else if (!PyLong_Check(v) || PyBool_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "meta_columns: an int64 column holds a non-int");
                goto fail;
            }
        }
        if (nulls == rows) {
            PyTuple_SET_ITEM(out, c, Py_NewRef(Py_None));
            continue;
        }
        PyObject *data = PyBytes_FromStringAndSize(NULL, kind == 's' ? bytes : 8 * rows);
        PyObject *offsets = kind == 's' ? PyBytes_FromStringAndSize(NULL, 4 * (rows + 1))
                                        : Py_NewRef(Py_None);
        PyObject *valid = nulls ? PyBytes_FromStringAndSize(NULL, (rows + 7) / 8)
                                : Py_NewRef(Py_None);
        PyObject *column = NULL;
        if (data && offsets && valid)
            column = Py_BuildValue("(nOOO)", nulls, valid, data, offsets);
        Py_XDECREF(data);
        Py_XDECREF(offsets);
        Py_XDECREF(valid);
        if (column == NULL) goto fail;
        PyTuple_SET_ITEM(out, c, column);
        char *dp = PyBytes_AS_STRING(data);
        int32_t *op = kind == 's' ? (int32_t *)PyBytes_AS_STRING(offsets) : NULL;
        unsigned char *vp = nulls ? (unsigned char *)PyBytes_AS_STRING(valid) : NULL;
        if (vp) memset(vp, 0, (size_t)(rows + 7) / 8);
        if (op) op[0] = 0;
        /* Second pass: the values (checked above; only int64's range is left to check). */
        Py_ssize_t row = 0, pos = 0;
        for (Py_ssize_t e = 0; e < events; e++) {
            PyObject *v = PyTuple_GET_ITEM(PyList_GET_ITEM(tags, e), c);
            int valid_run = v != Py_None;
            if (kind == 's') {
                Py_ssize_t len = 0;
                const char *s = valid_run ? PyUnicode_AsUTF8AndSize(v, &len) : "";
                if (s == NULL) goto fail;
                for (; row < end[e]; row++) {
                    if (len) memcpy(dp + pos, s, (size_t)len);
                    pos += len;
                    op[row + 1] = (int32_t)pos;
                    if (vp && valid_run) vp[row >> 3] |= (unsigned char)(1u << (row & 7));
                }
                continue;
            }
            long long x = 0;
            if (valid_run) {
                x = PyLong_AsLongLong(v);
                if (x == -1 && PyErr_Occurred()) goto fail;
            }
            for (; row < end[e]; row++) {
                int64_t value = x;
                if (kind == 'r' && __builtin_add_overflow((int64_t)row, (int64_t)x, &value)) {
                    PyErr_SetString(PyExc_OverflowError, "meta_columns: row number over int64");
                    goto fail;
                }
                memcpy(dp + 8 * row, &value, 8);
                if (vp && valid_run) vp[row >> 3] |= (unsigned char)(1u << (row & 7));
            }
        }
    }
    PyMem_Free(end);
    return out;
fail:
    PyMem_Free(end);
    Py_XDECREF(out);
    return NULL;
}

/* ---- A small batch handed to Arrow whole: the C data interface ---------------------------
 * export_batch(spec) -> (capsule, address, size): an ArrowArray (the Arrow C data interface's
 * struct, https://arrow.apache.org/docs/format/CDataInterface.html) built from a spec, for
 * ``pyarrow.RecordBatch._import_from_c(address, schema)``: one import for a whole record
 * batch instead of one ``Array.from_buffers`` per column, and no per-column array
 * (sinks/parquet/rows.py, for the small batches of a flush over thousands of tables). A spec
 * is ``(length, null_count, validity, buffers, children)``: validity None (no bitmap), an int
 * (that many zero bytes: all NULL) or bytes; buffers a tuple of bytes or ints (zero bytes),
 * after the validity in Arrow's order for the type; children a tuple of specs. Every buffer is
 * copied into memory the array owns (one block per export, see Block), so it may be released
 * on any thread, without the GIL.
 * The caller vouches that the spec matches the schema it imports with (Arrow does not see
 * buffer sizes); the capsule releases the array unless Arrow took it, and frees the struct.
 * The capsule is named "arrow_array", as the Arrow PyCapsule interface names one (its
 * destructor is that interface's: a consumer may move the array out), so that the small-file
 * writer's pool reads it as it is (sinks/parquet/_native_parquet.c) and
 * RecordBatch._import_from_c_capsule takes it. `size` is the block's bytes: at least the sum of
 * the buffers' (an upper bound of the batch's nbytes, known without importing it). */
struct ArrowArray {
    int64_t length, null_count, offset, n_buffers, n_children;
    const void **buffers;
    struct ArrowArray **children;
    struct ArrowArray *dictionary;
    void (*release)(struct ArrowArray *);
    void *private_data;
};

/* Everything one export owns — child structs, pointer arrays, buffers — is carved from one
 * block (one malloc per batch: with thousands of small batches, glibc's malloc per buffer
 * showed in profiles of the daemon), freed when the last array using it is released: each
 * array holds a reference, so a child a consumer moved out stays valid after its parent. */
typedef struct {
    int64_t refs;
    char *next;  /* carving cursor (building only) */
} Block;

static void block_unref(Block *b) {
    if (__atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) free(b);
}

static void node_release(struct ArrowArray *a) {
    if (a->release == NULL) return;
    for (int64_t i = 0; i < a->n_children; i++) {
        struct ArrowArray *c = a->children[i];
        if (c->release != NULL) c->release(c);
    }
    a->release = NULL;
    block_unref((Block *)a->private_data);
}

/* Bytes a spec needs from the block (each piece rounded up to 64 bytes: Arrow's alignment);
 * -1 with an exception for a malformed spec. */
#define ROUND64(n) ((((n) + 63) / 64) * 64)

static Py_ssize_t buffer_size(PyObject *source) {
    if (PyBytes_Check(source)) return PyBytes_GET_SIZE(source);
    Py_ssize_t n = PyLong_AsSsize_t(source);
    if (n < 0 && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "export_batch: negative size");
    return n < 0 ? -1 : n;
}

static Py_ssize_t spec_size(PyObject *spec, int depth) {
    if (depth > 4 || !PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5
        || !PyTuple_Check(PyTuple_GET_ITEM(spec, 3)) || !PyTuple_Check(PyTuple_GET_ITEM(spec, 4))) {
        PyErr_SetString(PyExc_ValueError, "export_batch: malformed spec");
        return -1;
    }
    PyObject *buffers = PyTuple_GET_ITEM(spec, 3), *children = PyTuple_GET_ITEM(spec, 4);
    PyObject *valid = PyTuple_GET_ITEM(spec, 2);
    Py_ssize_t nb = PyTuple_GET_SIZE(buffers), nc = PyTuple_GET_SIZE(children);
    Py_ssize_t total = ROUND64((nb + 1) * (Py_ssize_t)sizeof(void *))
                       + ROUND64(nc * (Py_ssize_t)sizeof(void *))
                       + nc * ROUND64((Py_ssize_t)sizeof(struct ArrowArray));
    if (valid != Py_None) {
        Py_ssize_t n = buffer_size(valid);
        if (n < 0) return -1;
        total += ROUND64(n);
    }
    for (Py_ssize_t i = 0; i < nb; i++) {
        Py_ssize_t n = buffer_size(PyTuple_GET_ITEM(buffers, i));
        if (n < 0) return -1;
        if (n > PY_SSIZE_T_MAX / 4 - total) { PyErr_NoMemory(); return -1; }
        total += ROUND64(n);
    }
    for (Py_ssize_t i = 0; i < nc; i++) {
        Py_ssize_t n = spec_size(PyTuple_GET_ITEM(children, i), depth + 1);
        if (n < 0) return -1;
        if (n > PY_SSIZE_T_MAX / 4 - total) { PyErr_NoMemory(); return -1; }
        total += n;
    }
    return total;
}

static void *carve(Block *b, Py_ssize_t n) {
    char *p = b->next;
    b->next += ROUND64(n);
    return p;
}

/* A buffer carved from the block: a copy of bytes, or n zero bytes for an int n. */
static void *node_buffer(Block *b, PyObject *source) {
    Py_ssize_t n = buffer_size(source);  /* checked by spec_size */
    void *p = carve(b, n);
    if (PyBytes_Check(source)) {
        if (n) memcpy(p, PyBytes_AS_STRING(source), (size_t)n);
    } else if (n) {
        memset(p, 0, (size_t)n);
    }
    return p;
}

/* Fill a from a spec spec_size accepted (so nothing here can fail), with block b's room. */
static void node_fill(struct ArrowArray *a, PyObject *spec, Block *b) {
    memset(a, 0, sizeof(*a));
    PyObject *buffers = PyTuple_GET_ITEM(spec, 3), *children = PyTuple_GET_ITEM(spec, 4);
    PyObject *valid = PyTuple_GET_ITEM(spec, 2);
    Py_ssize_t nb = PyTuple_GET_SIZE(buffers), nc = PyTuple_GET_SIZE(children);
    a->length = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 0));
    a->null_count = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 1));
    a->buffers = carve(b, (nb + 1) * (Py_ssize_t)sizeof(void *));
    a->children = carve(b, nc * (Py_ssize_t)sizeof(void *));
    a->n_buffers = nb + 1;
    a->n_children = nc;
    a->buffers[0] = valid == Py_None ? NULL : node_buffer(b, valid);
    for (Py_ssize_t i = 0; i < nb; i++)
        a->buffers[i + 1] = node_buffer(b, PyTuple_GET_ITEM(buffers, i));
    for (Py_ssize_t i = 0; i < nc; i++) {
        struct ArrowArray *c = carve(b, (Py_ssize_t)sizeof(struct ArrowArray));
        a->children[i] = c;
        node_fill(c, PyTuple_GET_ITEM(children, i), b);
    }
    a->private_data = b;
    b->refs++;
    a->release = node_release;
}

/* Lengths and null counts: checked before anything is built. */
static int spec_counts(PyObject *spec) {
    long long length = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 0));
    long long nulls = PyLong_AsLongLong(PyTuple_GET_ITEM(spec, 1));
    if (PyErr_Occurred()) return -1;
    if (length < 0 || nulls < 0 || nulls > length) {
        PyErr_SetString(PyExc_ValueError, "export_batch: bad length or null count");
        return -1;
    }
    PyObject *children = PyTuple_GET_ITEM(spec, 4);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(children); i++)
        if (spec_counts(PyTuple_GET_ITEM(children, i)) < 0) return -1;
    return 0;
}

static const char *BATCH_CAPSULE = "arrow_array";

static void batch_free(PyObject *capsule) {
    struct ArrowArray *a = PyCapsule_GetPointer(capsule, BATCH_CAPSULE);
    if (a == NULL) return;
    if (a->release != NULL) a->release(a);
    free(a);
}

static PyObject *export_batch(PyObject *self, PyObject *spec) {
    (void)self;
    Py_ssize_t size = spec_size(spec, 0);
    if (size < 0 || spec_counts(spec) < 0) return NULL;
    Block *b = malloc(ROUND64((Py_ssize_t)sizeof(Block)) + size);
    struct ArrowArray *a = malloc(sizeof(*a));
    if (b == NULL || a == NULL) {
        free(b);
        free(a);
        return PyErr_NoMemory();
    }
    b->refs = 1;  /* the builder's, dropped below */
    b->next = (char *)b + ROUND64((Py_ssize_t)sizeof(Block));
    node_fill(a, spec, b);
    block_unref(b);
    PyObject *capsule = PyCapsule_New(a, BATCH_CAPSULE, batch_free);
    if (capsule == NULL) {
        a->release(a);
        free(a);
        return NULL;
    }
    return Py_BuildValue("(NKn)", capsule, (unsigned long long)(uintptr_t)a,
                         ROUND64((Py_ssize_t)sizeof(Block)) + size);
}

static PyMethodDef methods[] = {
    {"concat", (PyCFunction)(void (*)(void))concat, METH_FASTCALL,
     "Concatenate Arrow column chunks (and runs of NULLs) into one column's buffers."},
    {"arrow_bytes", (PyCFunction)arrow_bytes, METH_O,
     "The bytes of every buffer of a rows event's Arrow images' chunks."},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "One table column of a batch from its images' chunks; None when one lacks a chunk."},
    {"gather_all", (PyCFunction)(void (*)(void))gather_all, METH_FASTCALL,
     "Every table column of a batch, as gather's; None per column gather leaves to Python."},
    {"meta_columns", (PyCFunction)(void (*)(void))meta_columns, METH_FASTCALL,
     "A batch's metadata columns' buffers from its events' tags and where their rows end."},
    {"export_batch", (PyCFunction)export_batch, METH_O,
     "An Arrow C data interface array from a spec of buffers: (capsule, address, size)."},
    {NULL, NULL, 0, NULL},
};

/* What sinks/parquet/native_batch.py checks before it uses this extension: bump it with the
 * loader's ABI whenever what the module exports, or how it is called, changes. */
#define ABI_VERSION 2

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_batch",
    "A batch's Arrow columns from the row decoder's chunks (see native_batch.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native_batch(void) {
    if (n_layouts == 0 && load_layouts() < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
