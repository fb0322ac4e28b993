/* The native row decoder: runs a table's column plan (built by protocol/binlog/native.py from
 * what rows.TableDecoder derives) over the row images of one rows event and appends each value
 * to its column's list: the same values as the generated Python decoder, without its per-value
 * bytecode.
 *
 * Why it is safe on bad bytes: every read is checked against the end of the event first; any
 * bytes that do not fit (a read past the end, a DECIMAL digit group out of range, a DATETIME2
 * fraction over 999999, an ENUM index with no label) raise ValueError, which
 * rows.decode_rows_event turns into the same RowDecodeError the Python decoder's errors become.
 * Values Python cannot hold (an invalid date) are handed to the same Python helper the
 * reference uses, so the result is the same object.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>

enum {
    K_INT = 1,     /* a = bytes (1,2,3,4,8), b = unsigned */
    K_FLOAT = 2,   /* a = 4 or 8 */
    K_STR = 3,     /* a = length-prefix width (1..4), b = mode (0 bytes, 1 utf-8, 2 call obj1),
                      c = BINARY(n) pad length (0: none) */
    K_DATE = 4,    /* obj1 = values.decode_date (dates Python cannot hold) */
    K_DT2 = 5,     /* a = fsp, obj1 = values.datetime2_invalid */
    K_TS2 = 6,     /* a = fsp, obj1 = the zero TIMESTAMP's InvalidTemporal, obj2 = UTC */
    K_DEC = 7,     /* a = scale, obj1 = bytes of (nbytes, digits) pairs, obj2 = Decimal */
    K_ENUM = 8,    /* a = width (1 or 2), obj1 = labels tuple ("" first) or None */
    K_YEAR = 9,
};

typedef struct {
    int kind, a, b, c;
    PyObject *obj1, *obj2;
    unsigned char groups[16][2];
    int ngroups, size;
} ColPlan;

typedef struct {
    Py_ssize_t n;
    ColPlan cols[];
} Plan;

static const char *CAPSULE = "binlake.native_rows.plan";

static void plan_free(PyObject *capsule) {
    Plan *plan = (Plan *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (plan == NULL) return;
    for (Py_ssize_t i = 0; i < plan->n; i++) {
        Py_XDECREF(plan->cols[i].obj1);
        Py_XDECREF(plan->cols[i].obj2);
    }
    PyMem_Free(plan);
}

/* plan(specs) -> capsule; specs: a tuple of (kind, a, b, c, obj1, obj2) per present column. */
static PyObject *make_plan(PyObject *self, PyObject *specs) {
    if (!PyTuple_Check(specs)) {
        PyErr_SetString(PyExc_TypeError, "plan expects a tuple");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(specs);
    Plan *plan = PyMem_Calloc(1, sizeof(Plan) + (size_t)n * sizeof(ColPlan));
    if (plan == NULL) return PyErr_NoMemory();
    plan->n = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        ColPlan *cp = &plan->cols[i];
        PyObject *o1, *o2;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(specs, i), "iiiiOO", &cp->kind, &cp->a, &cp->b,
                              &cp->c, &o1, &o2))
            goto fail;
        Py_INCREF(o1);
        Py_INCREF(o2);
        cp->obj1 = o1;
        cp->obj2 = o2;
        plan->n = i + 1;
        if (cp->kind == K_DEC) {
            if (!PyBytes_Check(o1) || PyBytes_GET_SIZE(o1) % 2 || PyBytes_GET_SIZE(o1) > 32
                || PyBytes_GET_SIZE(o1) == 0) {
                PyErr_SetString(PyExc_ValueError, "bad DECIMAL groups");
                goto fail;
            }
            const unsigned char *g = (const unsigned char *)PyBytes_AS_STRING(o1);
            cp->ngroups = (int)(PyBytes_GET_SIZE(o1) / 2);
            cp->size = 0;
            for (int k = 0; k < cp->ngroups; k++) {
                cp->groups[k][0] = g[2 * k];
                cp->groups[k][1] = g[2 * k + 1];
                if (g[2 * k] < 1 || g[2 * k] > 4 || g[2 * k + 1] > 9) {
                    PyErr_SetString(PyExc_ValueError, "bad DECIMAL group");
                    goto fail;
                }
                cp->size += g[2 * k];
            }
        } else if (cp->kind < K_INT || cp->kind > K_YEAR) {
            PyErr_SetString(PyExc_ValueError, "unknown column kind");
            goto fail;
        }
    }
    PyObject *capsule = PyCapsule_New(plan, CAPSULE, plan_free);
    if (capsule == NULL) goto fail;
    return capsule;
fail:
    for (Py_ssize_t i = 0; i < plan->n; i++) {
        Py_XDECREF(plan->cols[i].obj1);
        Py_XDECREF(plan->cols[i].obj2);
    }
    PyMem_Free(plan);
    return NULL;
}

static int overrun(void) {
    PyErr_SetString(PyExc_ValueError, "row image runs past the end of the event");
    return -1;
}

#define NEED(k) do { if ((Py_ssize_t)(k) > end - off) return overrun(); } while (0)

static uint64_t be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static const uint32_t POW10[10] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                   100000000, 1000000000};

/* Days since 1970-01-01 → civil date (proleptic Gregorian). */
static void civil(int64_t z, int *y, int *m, int *d) {
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

static int frac_bytes(int fsp) { return (fsp + 1) / 2; }

static uint32_t read_frac(const unsigned char *p, int fsp) {
    if (fsp == 0) return 0;
    if (fsp <= 2) return (uint32_t)p[0] * 10000;
    if (fsp <= 4) return (uint32_t)(p[0] << 8 | p[1]) * 100;
    return (uint32_t)(p[0] << 16 | p[1] << 8 | p[2]);
}

/* Decode one value of column cp at *offp into a new reference in *out. */
static int value(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp, Py_ssize_t end,
                 PyObject **out) {
    Py_ssize_t off = *offp;
    const unsigned char *p = buf + off;
    PyObject *v = NULL;
    switch (cp->kind) {
    case K_INT: {
        int n = cp->a;
        NEED(n);
        uint64_t u = le(p, n);
        if (cp->b) {
            v = PyLong_FromUnsignedLongLong(u);
        } else {
            int64_t s;
            if (n == 8) {
                s = (int64_t)u;
            } else {
                uint64_t sign = (uint64_t)1 << (n * 8 - 1);
                s = (int64_t)(u ^ sign) - (int64_t)sign;
            }
            v = PyLong_FromLongLong(s);
        }
        off += n;
        break;
    }
    case K_FLOAT:
        NEED(cp->a);
        if (cp->a == 4) {
            uint32_t bits = (uint32_t)le(p, 4);
            float f;
            memcpy(&f, &bits, 4);
            v = PyFloat_FromDouble((double)f);
        } else {
            uint64_t bits = le(p, 8);
            double f;
            memcpy(&f, &bits, 8);
            v = PyFloat_FromDouble(f);
        }
        off += cp->a;
        break;
    case K_STR: {
        NEED(cp->a);
        uint64_t n = le(p, cp->a);
        off += cp->a;
        if (n > (uint64_t)(end - off)) return overrun();
        const char *s = (const char *)buf + off;
        off += (Py_ssize_t)n;
        if (cp->b == 1) {
            v = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, NULL);
            if (v == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
                PyErr_Clear();
                v = PyBytes_FromStringAndSize(s, (Py_ssize_t)n);
            }
        } else if (cp->c > 0 && n < (uint64_t)cp->c) {
            v = PyBytes_FromStringAndSize(NULL, cp->c);
            if (v != NULL) {
                memcpy(PyBytes_AS_STRING(v), s, (size_t)n);
                memset(PyBytes_AS_STRING(v) + n, 0, (size_t)cp->c - (size_t)n);
            }
        } else {
            v = PyBytes_FromStringAndSize(s, (Py_ssize_t)n);
            if (v != NULL && cp->b == 2) {
                PyObject *t = PyObject_CallOneArg(cp->obj1, v);
                Py_DECREF(v);
                v = t;
            }
        }
        break;
    }
    case K_DATE: {
        NEED(3);
        uint32_t x = (uint32_t)le(p, 3);
        off += 3;
        v = PyDate_FromDate((int)(x >> 9), (int)(x >> 5 & 15), (int)(x & 31));
        if (v == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            PyObject *arg = PyLong_FromUnsignedLong(x);
            if (arg == NULL) return -1;
            v = PyObject_CallOneArg(cp->obj1, arg);
            Py_DECREF(arg);
        }
        break;
    }
    case K_DT2: {
        int fsp = cp->a;
        NEED(5 + frac_bytes(fsp));
        int64_t packed = (int64_t)be(p, 5) - ((int64_t)1 << 39);
        uint32_t us = read_frac(p + 5, fsp);
        off += 5 + frac_bytes(fsp);
        if (packed < 0 || us > 999999) {
            PyErr_SetString(PyExc_ValueError, "negative or out-of-range DATETIME2");
            return -1;
        }
        int64_t ymd = packed >> 17, ym = ymd >> 5;
        int year = (int)(ym / 13), month = (int)(ym % 13);
        v = PyDateTime_FromDateAndTime(year, month, (int)(ymd & 31), (int)(packed >> 12 & 31),
                                       (int)(packed >> 6 & 63), (int)(packed & 63), (int)us);
        if (v == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            v = PyObject_CallFunction(cp->obj1, "LIi", (long long)packed, (unsigned int)us,
                                      fsp);
        }
        break;
    }
    case K_TS2: {
        int fsp = cp->a;
        NEED(4 + frac_bytes(fsp));
        uint32_t secs = (uint32_t)be(p, 4);
        uint32_t us = read_frac(p + 4, fsp);
        off += 4 + frac_bytes(fsp);
        if (us > 999999) {
            PyErr_SetString(PyExc_ValueError, "TIMESTAMP2 fraction out of range");
            return -1;
        }
        if (secs == 0 && us == 0) {
            v = Py_NewRef(cp->obj1);
            break;
        }
        int y, m, d;
        civil((int64_t)(secs / 86400), &y, &m, &d);
        uint32_t rem = secs % 86400;
        v = PyDateTimeAPI->DateTime_FromDateAndTime(y, m, d, (int)(rem / 3600),
                                                    (int)(rem / 60 % 60), (int)(rem % 60),
                                                    (int)us, cp->obj2,
                                                    PyDateTimeAPI->DateTimeType);
        break;
    }
    case K_DEC: {
        NEED(cp->size);
        unsigned char raw[40];
        memcpy(raw, p, (size_t)cp->size);
        off += cp->size;
        int neg = !(raw[0] & 0x80);
        if (neg)
            for (int i = 0; i < cp->size; i++) raw[i] ^= 0xFF;
        raw[0] &= 0x7F;
        char text[96];
        int len = 0, pos = 0;
        if (neg) text[len++] = '-';
        for (int k = 0; k < cp->ngroups; k++) {
            int nb = cp->groups[k][0], digits = cp->groups[k][1];
            uint32_t g = (uint32_t)be(raw + pos, nb);
            pos += nb;
            if (g >= POW10[digits]) {
                PyErr_SetString(PyExc_ValueError, "DECIMAL digit group out of range");
                return -1;
            }
            len += snprintf(text + len, sizeof(text) - (size_t)len, "%0*u", digits, g);
        }
        if (cp->a)
            len += snprintf(text + len, sizeof(text) - (size_t)len, "E-%d", cp->a);
        PyObject *s = PyUnicode_FromStringAndSize(text, len);
        if (s == NULL) return -1;
        v = PyObject_CallOneArg(cp->obj2, s);
        Py_DECREF(s);
        break;
    }
    case K_ENUM: {
        NEED(cp->a);
        uint32_t x = (uint32_t)le(p, cp->a);
        off += cp->a;
        if (cp->obj1 == Py_None) {
            v = PyLong_FromUnsignedLong(x);
        } else if ((Py_ssize_t)x >= PyTuple_GET_SIZE(cp->obj1)) {
            PyErr_SetString(PyExc_ValueError, "ENUM index has no label");
            return -1;
        } else {
            v = Py_NewRef(PyTuple_GET_ITEM(cp->obj1, x));
        }
        break;
    }
    case K_YEAR:
        NEED(1);
        v = PyLong_FromLong(p[0] ? 1900 + p[0] : 0);
        off += 1;
        break;
    default:
        PyErr_SetString(PyExc_ValueError, "unknown column kind");
        return -1;
    }
    if (v == NULL) return -1;
    *offp = off;
    *out = v;
    return 0;
}

static int image(const Plan *plan, PyObject *lists, const unsigned char *buf, Py_ssize_t *offp,
                 Py_ssize_t end) {
    Py_ssize_t off = *offp;
    Py_ssize_t nbytes = (plan->n + 7) / 8;
    NEED(nbytes);
    const unsigned char *nulls = buf + off;
    off += nbytes;
    for (Py_ssize_t k = 0; k < plan->n; k++) {
        PyObject *list = PyTuple_GET_ITEM(lists, k);
        PyObject *v;
        if (nulls[k >> 3] >> (k & 7) & 1) {
            v = Py_NewRef(Py_None);
        } else if (value(&plan->cols[k], buf, &off, end, &v) < 0) {
            return -1;
        }
        int rc = PyList_Append(list, v);
        Py_DECREF(v);
        if (rc < 0) return -1;
    }
    *offp = off;
    return 0;
}

static Plan *plan_of(PyObject *capsule, PyObject *lists) {
    if (capsule == Py_None) return NULL;
    Plan *plan = (Plan *)PyCapsule_GetPointer(capsule, CAPSULE);
    if (plan == NULL) return NULL;
    if (!PyTuple_Check(lists) || PyTuple_GET_SIZE(lists) != plan->n) {
        PyErr_SetString(PyExc_TypeError, "column lists do not match the plan");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < plan->n; k++)
        if (!PyList_Check(PyTuple_GET_ITEM(lists, k))) {
            PyErr_SetString(PyExc_TypeError, "column lists must be lists");
            return NULL;
        }
    return plan;
}

/* decode(buf, off, end, before_plan, after_plan, before_lists, after_lists) -> rows */
static PyObject *decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "decode(buf: bytes, off, end, bplan, aplan, bl, al)");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t off = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return NULL;
    if (off < 0 || end > PyBytes_GET_SIZE(args[0]) || off > end) {
        PyErr_SetString(PyExc_ValueError, "offsets outside the event");
        return NULL;
    }
    Plan *before = plan_of(args[3], args[5]);
    if (before == NULL && PyErr_Occurred()) return NULL;
    Plan *after = plan_of(args[4], args[6]);
    if (after == NULL && PyErr_Occurred()) return NULL;
    Py_ssize_t rows = 0;
    while (off < end) {
        Py_ssize_t start = off;
        if (before != NULL && image(before, args[5], buf, &off, end) < 0) return NULL;
        if (after != NULL && image(after, args[6], buf, &off, end) < 0) return NULL;
        if (off == start) {
            PyErr_SetString(PyExc_ValueError, "row image holds no bytes");
            return NULL;
        }
        rows++;
    }
    return PyLong_FromSsize_t(rows);
}

/* text_row(data: bytes, binary: tuple[bool, ...]) -> tuple | None
 * One text-protocol row (results.parse_text_row's fast path): per column a length-encoded
 * string, str (UTF-8, surrogateescape) or bytes where binary[i] is true, None for 0xFB.
 * Returns None for anything malformed, so that the Python parser raises its typed error. */
static PyObject *text_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyTuple_Check(args[1])) Py_RETURN_NONE;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]);
    PyObject *binary = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(binary), off = 0;
    PyObject *row = PyTuple_New(n);
    if (row == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (off >= size) goto malformed;
        unsigned int first = p[off];
        unsigned long long length;
        Py_ssize_t start;
        if (first < 0xFB) {
            length = first;
            start = off + 1;
        } else if (first == 0xFB) {
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(row, i, Py_None);
            off += 1;
            continue;
        } else {
            int width = first == 0xFC ? 2 : first == 0xFD ? 3 : first == 0xFE ? 8 : 0;
            if (width == 0 || size - off - 1 < width) goto malformed;
            length = 0;
            for (int b = width - 1; b >= 0; b--) length = (length << 8) | p[off + 1 + b];
            start = off + 1 + width;
        }
        if (length > (unsigned long long)(size - start)) goto malformed;
        PyObject *value;
        int is_binary = PyObject_IsTrue(PyTuple_GET_ITEM(binary, i));
        if (is_binary < 0) { Py_DECREF(row); return NULL; }
        if (is_binary)
            value = PyBytes_FromStringAndSize((const char *)p + start, (Py_ssize_t)length);
        else
            value = PyUnicode_DecodeUTF8((const char *)p + start, (Py_ssize_t)length,
                                         "surrogateescape");
        if (value == NULL) { Py_DECREF(row); return NULL; }
        PyTuple_SET_ITEM(row, i, value);
        off = start + (Py_ssize_t)length;
    }
    if (off != size) goto malformed;
    return row;
malformed:
    Py_DECREF(row);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"plan", (PyCFunction)make_plan, METH_O, "Compile a column plan (a tuple of specs)."},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "Decode a rows event's images into per-column lists; returns the row count."},
    {"text_row", (PyCFunction)(void (*)(void))text_row, METH_FASTCALL,
     "Parse one text-protocol row; None when malformed (the Python parser then raises)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_rows", "binlake's native row decoder (see native.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native_rows(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return NULL;
    return PyModule_Create(&module);
}
