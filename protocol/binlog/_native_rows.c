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
 *
 * The readers below are twins of the readable descriptions in protocol/valuetypes (TIMESTAMP,
 * TIME, DECIMAL, JSON, character data): tests/unit/test_value_types.py compares them.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the Arrow buffers are filled with the host's integers: a little-endian host is needed"
#endif

enum {
    K_INT = 1,     /* a = bytes (1,2,3,4,8), b = unsigned */
    K_FLOAT = 2,   /* a = 4 or 8 */
    K_STR = 3,     /* a = length-prefix width (1..4), b = mode (0 bytes, 1 utf-8, 2 call obj1:
                      a charset's decoder, or JSON's binary-to-text), c = BINARY(n) pad (0: none) */
    K_DATE = 4,    /* obj1 = values.decode_date (dates Python cannot hold) */
    K_DT2 = 5,     /* a = fsp, obj1 = values.datetime2_invalid */
    K_TS2 = 6,     /* a = fsp, obj1 = the zero TIMESTAMP's InvalidTemporal, obj2 = UTC */
    K_DEC = 7,     /* a = scale, c = precision, obj1 = bytes of (nbytes, digits) pairs,
                      obj2 = Decimal */
    K_ENUM = 8,    /* a = width (1 or 2), obj1 = labels tuple ("" first) or None */
    K_YEAR = 9,
    K_BIT = 10,    /* a = bytes (0..8, big-endian) */
    K_TIME2 = 11,  /* a = fsp */
    K_SET = 12,    /* a = width (1..8), obj1 = rows.set_labels' function or None,
                      obj2 = the labels tuple or None */
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
        } else if ((cp->kind == K_ENUM && o1 != Py_None && !PyTuple_Check(o1))
                   || (cp->kind == K_SET && o2 != Py_None && !PyTuple_Check(o2))) {
            PyErr_SetString(PyExc_ValueError, "ENUM/SET labels must be a tuple");
            goto fail;
        } else if (cp->kind < K_INT || cp->kind > K_SET
                   || ((cp->kind == K_BIT || cp->kind == K_SET) && (cp->a < 0 || cp->a > 8))
                   || (cp->kind == K_SET && cp->a == 0)
                   || (cp->kind == K_TIME2 && (cp->a < 0 || cp->a > 6))) {
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

/* ---- One reader per column kind, shared by decode (Python values) and decode_arrow ----------
 * Each read_*(cp, buf, &off, end, out...) checks that its bytes lie before end, reads them,
 * validates them the way the Python decoder does (ValueError, which becomes its RowDecodeError)
 * and moves off past them; it returns the value's primitive parts and -1 on an error. The two
 * decoders differ only in what they make of those parts, so a fix to a read is made once. */

/* The next n bytes at *offp, with *offp moved past them; NULL (ValueError) when fewer are left. */
static inline const unsigned char *take(const unsigned char *buf, Py_ssize_t *offp,
                                        Py_ssize_t end, Py_ssize_t n) {
    if (n > end - *offp) {
        overrun();
        return NULL;
    }
    const unsigned char *p = buf + *offp;
    *offp += n;
    return p;
}

#define TAKE(p, n) \
    const unsigned char *p = take(buf, offp, end, (n)); \
    if (p == NULL) return -1

/* A DATE or DATETIME2 as read: its fields, unchecked (a DATE's time is 0; year int64_t for the
 * range checks), the microseconds, and the packed value the Python fallbacks take (DATE's 3
 * bytes, DATETIME2's 5 less their 2^39 bias). */
typedef struct {
    int64_t year;
    int month, day, hour, minute, second;
    uint32_t us;
    int64_t packed;
} Civil;

/* cp->a bytes as an unsigned integer: big-endian (BIT) or little-endian (FLOAT/DOUBLE's IEEE
 * bits; what INT, ENUM and SET start from). */
static inline int read_uint(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                            Py_ssize_t end, int big_endian, uint64_t *u) {
    TAKE(p, cp->a);
    *u = big_endian ? be(p, cp->a) : le(p, cp->a);
    return 0;
}

/* INT: cp->a little-endian bytes, sign-extended unless unsigned (cp->b: then its bits). */
static inline int read_int(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                           Py_ssize_t end, int64_t *v) {
    uint64_t u;
    if (read_uint(cp, buf, offp, end, 0, &u) < 0) return -1;
    if (cp->b || cp->a == 8) {
        *v = (int64_t)u;
    } else {
        uint64_t sign = (uint64_t)1 << (cp->a * 8 - 1);
        *v = (int64_t)(u ^ sign) - (int64_t)sign;
    }
    return 0;
}

/* A length-prefixed value (cp->a length bytes, then the bytes): its start and size. */
static inline int read_prefixed(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                                Py_ssize_t end, const unsigned char **s, uint64_t *n) {
    if (read_uint(cp, buf, offp, end, 0, n) < 0) return -1;
    if (*n > (uint64_t)(end - *offp)) return overrun();
    *s = buf + *offp;
    *offp += (Py_ssize_t)*n;
    return 0;
}

/* DATE: 3 little-endian bytes. */
static inline int read_date(const unsigned char *buf, Py_ssize_t *offp, Py_ssize_t end,
                            Civil *t) {
    TAKE(p, 3);
    uint32_t x = (uint32_t)le(p, 3);
    *t = (Civil){x >> 9, (int)(x >> 5 & 15), (int)(x & 31), 0, 0, 0, 0, x};
    return 0;
}

/* DATETIME2: 5 big-endian bytes and the fraction; ValueError when the value less its bias is
 * negative or the fraction over 999999. */
static inline int read_dt2(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                           Py_ssize_t end, Civil *t) {
    TAKE(p, 5 + frac_bytes(cp->a));
    int64_t packed = (int64_t)be(p, 5) - ((int64_t)1 << 39);
    uint32_t us = read_frac(p + 5, cp->a);
    if (packed < 0 || us > 999999) {
        PyErr_SetString(PyExc_ValueError, "negative or out-of-range DATETIME2");
        return -1;
    }
    int64_t ymd = packed >> 17, ym = ymd >> 5;
    *t = (Civil){ym / 13, (int)(ym % 13), (int)(ymd & 31), (int)(packed >> 12 & 31),
                 (int)(packed >> 6 & 63), (int)(packed & 63), us, packed};
    return 0;
}

/* TIMESTAMP2: seconds and microseconds; ValueError for a fraction over 999999. */
static inline int read_ts2(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                           Py_ssize_t end, uint32_t *secs, uint32_t *us) {
    TAKE(p, 4 + frac_bytes(cp->a));
    *secs = (uint32_t)be(p, 4);
    *us = read_frac(p + 4, cp->a);
    if (*us > 999999) {
        PyErr_SetString(PyExc_ValueError, "TIMESTAMP2 fraction out of range");
        return -1;
    }
    return 0;
}

/* DECIMAL (cp->size bytes): the sign and each digit group's value; ValueError when a group
 * holds more digits than it may. */
static inline int read_dec(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                           Py_ssize_t end, int *neg, uint32_t *groups) {
    TAKE(p, cp->size);
    unsigned char raw[40];
    memcpy(raw, p, (size_t)cp->size);
    *neg = !(raw[0] & 0x80);
    if (*neg)
        for (int i = 0; i < cp->size; i++) raw[i] ^= 0xFF;
    raw[0] &= 0x7F;
    int pos = 0;
    for (int k = 0; k < cp->ngroups; k++) {
        int nb = cp->groups[k][0];
        groups[k] = (uint32_t)be(raw + pos, nb);
        pos += nb;
        if (groups[k] >= POW10[cp->groups[k][1]]) {
            PyErr_SetString(PyExc_ValueError, "DECIMAL digit group out of range");
            return -1;
        }
    }
    return 0;
}

/* ENUM (cp->a bytes): the index; ValueError when the column has labels and none for it. */
static inline int read_enum(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                            Py_ssize_t end, uint32_t *x) {
    uint64_t u;
    if (read_uint(cp, buf, offp, end, 0, &u) < 0) return -1;
    *x = (uint32_t)u;
    if (cp->obj1 != Py_None && (Py_ssize_t)*x >= PyTuple_GET_SIZE(cp->obj1)) {
        PyErr_SetString(PyExc_ValueError, "ENUM index has no label");
        return -1;
    }
    return 0;
}

/* YEAR: one byte, 0 or 1900 + it. */
static inline int read_year(const unsigned char *buf, Py_ssize_t *offp, Py_ssize_t end,
                            int *year) {
    TAKE(p, 1);
    *year = p[0] ? 1900 + p[0] : 0;
    return 0;
}

/* TIME2 as signed microseconds, the way values.decode_time2 reads it (a negative value's
 * fraction borrows from its seconds); ValueError for an impossible minute, second or fraction. */
static inline int read_time2(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                             Py_ssize_t end, int64_t *micros) {
    int fsp = cp->a;
    TAKE(p, 3 + frac_bytes(fsp));
    int64_t intpart = (int64_t)be(p, 3) - 0x800000, packed;
    if (fsp == 0) {
        packed = intpart * 16777216;
    } else if (fsp <= 2) {
        int64_t frac = p[3];
        if (intpart < 0 && frac) { intpart += 1; frac -= 0x100; }
        packed = intpart * 16777216 + frac * 10000;
    } else if (fsp <= 4) {
        int64_t frac = (int64_t)be(p + 3, 2);
        if (intpart < 0 && frac) { intpart += 1; frac -= 0x10000; }
        packed = intpart * 16777216 + frac * 100;
    } else {
        packed = (int64_t)be(p, 6) - 0x800000000000LL;
    }
    int neg = packed < 0;
    if (neg) packed = -packed;
    int64_t hms = packed >> 24, us = packed & 0xFFFFFF;
    int64_t hour = hms >> 12 & 0x3FF, minute = hms >> 6 & 63, second = hms & 63;
    if (minute > 59 || second > 59 || us > 999999) {
        PyErr_SetString(PyExc_ValueError, "impossible TIME");
        return -1;
    }
    int64_t v = (hour * 3600 + minute * 60 + second) * 1000000 + us;
    *micros = neg ? -v : v;
    return 0;
}

/* SET (cp->a bytes): the mask, checked against the number of labels (as rows.set_labels
 * does); ValueError for a bit beyond them. */
static inline int read_set(const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp,
                           Py_ssize_t end, uint64_t *mask) {
    if (read_uint(cp, buf, offp, end, 0, mask) < 0) return -1;
    if (cp->obj2 != Py_None && PyTuple_GET_SIZE(cp->obj2) < 64
        && *mask >> PyTuple_GET_SIZE(cp->obj2)) {
        PyErr_SetString(PyExc_ValueError, "SET value has bits beyond its members");
        return -1;
    }
    return 0;
}

#undef TAKE

/* UTF-8 text as str, or the bytes when they are not well-formed (strict): what the lists decoder
 * makes of a utf8mb4 string and the text-row parser of a T_UTF8 value. */
static PyObject *utf8_or_bytes(const char *s, Py_ssize_t n) {
    PyObject *v = PyUnicode_DecodeUTF8(s, n, NULL);
    if (v != NULL || !PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return v;
    PyErr_Clear();
    return PyBytes_FromStringAndSize(s, n);
}

/* fn(arg), arg's reference consumed (NULL arg: the error it came with). */
static PyObject *call_consuming(PyObject *fn, PyObject *arg) {
    if (arg == NULL) return NULL;
    PyObject *result = PyObject_CallOneArg(fn, arg);
    Py_DECREF(arg);
    return result;
}

/* Decode one value of column cp at *offp into a new reference in *out. Inlined into image():
 * it runs once per cell, and a call per cell costs more instructions per row. */
static inline __attribute__((always_inline)) int value(
    const ColPlan *cp, const unsigned char *buf, Py_ssize_t *offp, Py_ssize_t end,
    PyObject **out) {
    Py_ssize_t off = *offp;  /* a local the readers' inlined code keeps in a register */
    PyObject *v = NULL;
    switch (cp->kind) {
    case K_INT: {
        int64_t i;
        if (read_int(cp, buf, &off, end, &i) < 0) return -1;
        v = cp->b ? PyLong_FromUnsignedLongLong((uint64_t)i) : PyLong_FromLongLong(i);
        break;
    }
    case K_FLOAT: {
        uint64_t bits;
        if (read_uint(cp, buf, &off, end, 0, &bits) < 0) return -1;
        double d;
        if (cp->a == 4) {
            uint32_t b4 = (uint32_t)bits;
            float f;
            memcpy(&f, &b4, 4);
            d = f;
        } else {
            memcpy(&d, &bits, 8);
        }
        v = PyFloat_FromDouble(d);
        break;
    }
    case K_STR: {
        const unsigned char *str;
        uint64_t n;
        if (read_prefixed(cp, buf, &off, end, &str, &n) < 0) return -1;
        const char *s = (const char *)str;
        if (cp->b == 1) {
            v = utf8_or_bytes(s, (Py_ssize_t)n);
        } else if (cp->c > 0 && n < (uint64_t)cp->c) {
            v = PyBytes_FromStringAndSize(NULL, cp->c);
            if (v != NULL) {
                memcpy(PyBytes_AS_STRING(v), s, (size_t)n);
                memset(PyBytes_AS_STRING(v) + n, 0, (size_t)cp->c - (size_t)n);
            }
        } else {
            v = PyBytes_FromStringAndSize(s, (Py_ssize_t)n);
            if (cp->b == 2) v = call_consuming(cp->obj1, v);
        }
        break;
    }
    case K_DATE: {
        Civil t;
        if (read_date(buf, &off, end, &t) < 0) return -1;
        v = PyDate_FromDate((int)t.year, t.month, t.day);
        if (v == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            v = call_consuming(cp->obj1, PyLong_FromUnsignedLong((unsigned long)t.packed));
        }
        break;
    }
    case K_DT2: {
        Civil t;
        if (read_dt2(cp, buf, &off, end, &t) < 0) return -1;
        v = PyDateTime_FromDateAndTime((int)t.year, t.month, t.day, t.hour, t.minute, t.second,
                                       (int)t.us);
        if (v == NULL && PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyErr_Clear();
            v = PyObject_CallFunction(cp->obj1, "LIi", (long long)t.packed, (unsigned int)t.us,
                                      cp->a);
        }
        break;
    }
    case K_TS2: {
        uint32_t secs, us;
        if (read_ts2(cp, buf, &off, end, &secs, &us) < 0) return -1;
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
        int neg;
        uint32_t groups[16];
        if (read_dec(cp, buf, &off, end, &neg, groups) < 0) return -1;
        char text[96];
        int len = 0;
        if (neg) text[len++] = '-';
        for (int k = 0; k < cp->ngroups; k++)
            len += snprintf(text + len, sizeof(text) - (size_t)len, "%0*u", cp->groups[k][1],
                            groups[k]);
        if (cp->a)
            len += snprintf(text + len, sizeof(text) - (size_t)len, "E-%d", cp->a);
        v = call_consuming(cp->obj2, PyUnicode_FromStringAndSize(text, len));
        break;
    }
    case K_ENUM: {
        uint32_t x;
        if (read_enum(cp, buf, &off, end, &x) < 0) return -1;
        v = cp->obj1 == Py_None ? PyLong_FromUnsignedLong(x)
                                : Py_NewRef(PyTuple_GET_ITEM(cp->obj1, x));
        break;
    }
    case K_YEAR: {
        int year;
        if (read_year(buf, &off, end, &year) < 0) return -1;
        v = PyLong_FromLong(year);
        break;
    }
    case K_BIT: {
        uint64_t bits;
        if (read_uint(cp, buf, &off, end, 1, &bits) < 0) return -1;
        v = PyLong_FromUnsignedLongLong(bits);
        break;
    }
    case K_TIME2: {
        int64_t micros;
        if (read_time2(cp, buf, &off, end, &micros) < 0) return -1;
        int sign = micros < 0 ? -1 : 1;
        int64_t m = micros * sign;
        v = PyDelta_FromDSU(0, sign * (int)(m / 1000000), sign * (int)(m % 1000000));
        break;
    }
    case K_SET: {
        uint64_t mask;
        if (read_set(cp, buf, &off, end, &mask) < 0) return -1;
        v = PyLong_FromUnsignedLongLong(mask);
        if (cp->obj1 != Py_None) v = call_consuming(cp->obj1, v);
        break;
    }
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
    const unsigned char *nulls = take(buf, &off, end, (plan->n + 7) / 8);
    if (nulls == NULL) return -1;
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

/* The (buf, off, end) every decoding entry point starts with, checked. */
static int event_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want,
                      const char *usage, const unsigned char **buf, Py_ssize_t *off,
                      Py_ssize_t *end) {
    if (nargs != want || !PyBytes_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *buf = (const unsigned char *)PyBytes_AS_STRING(args[0]);
    *off = PyLong_AsSsize_t(args[1]);
    *end = PyLong_AsSsize_t(args[2]);
    if (PyErr_Occurred()) return -1;
    if (*off < 0 || *end > PyBytes_GET_SIZE(args[0]) || *off > *end) {
        PyErr_SetString(PyExc_ValueError, "offsets outside the event");
        return -1;
    }
    return 0;
}

/* decode(buf, off, end, before_plan, after_plan, before_lists, after_lists) -> rows */
static PyObject *decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const unsigned char *buf;
    Py_ssize_t off, end;
    if (event_args(args, nargs, 7, "decode(buf: bytes, off, end, bplan, aplan, bl, al)", &buf,
                   &off, &end) < 0)
        return NULL;
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

/* ---- Arrow columns: decode_arrow -----------------------------------------------------------
 * decode_arrow runs the same plan over the same bytes through the same readers as decode, but
 * appends each value to its column's Arrow buffers (validity bitmap, data, and for strings
 * int32 offsets) instead of a Python object: typed column buffers, one chunk per column. A
 * column holding a value its layout cannot carry (a string that is not well-formed in its
 * charset, a zero or invalid date, DECIMAL wider than 38 digits, ENUM/SET without labels) gives
 * None instead: its consumer then takes the Python values of that column of that event. The
 * tag of a chunk names its layout (LAYOUTS, exported: the one list of them); a consumer uses a
 * chunk only when the tag is the layout it wants. */

/* Each layout holds its values as they are: integers signed (i*) or unsigned (u*) in a width
 * that holds every value of the column's type, DECIMAL as a 128-bit scaled integer, … What a
 * consumer makes of them (a wider type, a decimal for BIGINT UNSIGNED) is its own choice. */
enum { L_NONE, L_I1, L_I2, L_I4, L_I8, L_DEC, L_F4, L_F8, L_STR, L_BIN, L_DATE, L_TS,
       L_U1, L_U2, L_U4, L_U8, L_LAST = L_U8 };
static const char *const TAGS[] = {"none", "i1", "i2", "i4", "i8", "dec", "f4", "f8", "str",
                                   "bin", "date", "ts", "u1", "u2", "u4", "u8"};
static const int WIDTH[] = {0, 1, 2, 4, 8, 16, 4, 8, 0, 0, 4, 8, 1, 2, 4, 8};

typedef struct {
    char *p;
    Py_ssize_t len, cap;
} Buf;

static int buf_grow_slow(Buf *b, Py_ssize_t extra) {
    Py_ssize_t cap = b->cap ? b->cap : 64;
    while (cap < b->len + extra) {
        if (cap > PY_SSIZE_T_MAX / 2) { PyErr_NoMemory(); return -1; }
        cap *= 2;
    }
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (p == NULL) { PyErr_NoMemory(); return -1; }
    b->p = p;
    b->cap = cap;
    return 0;
}

/* Room for extra more bytes: the check inlined (every value makes it), the growth not. */
static inline int buf_grow(Buf *b, Py_ssize_t extra) {
    return b->len + extra <= b->cap ? 0 : buf_grow_slow(b, extra);
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_grow(b, n) < 0) return -1;
    if (n) memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

typedef struct {
    int layout;   /* L_*, L_NONE once the column fell back */
    Py_ssize_t rows, nulls;
    Buf valid, data, offsets;
} ACol;

static void acol_free(ACol *c) {
    PyMem_Free(c->valid.p);
    PyMem_Free(c->data.p);
    PyMem_Free(c->offsets.p);
    memset(c, 0, sizeof(*c));
}

static int layout_of(const ColPlan *cp) {
    switch (cp->kind) {
    case K_INT: {
        static const int s[9] = {0, L_I1, L_I2, L_I4, L_I4, 0, 0, 0, L_I8};
        static const int u[9] = {0, L_U1, L_U2, L_I4, L_U4, 0, 0, 0, L_U8};  /* 24 bits fit i4 */
        return cp->a >= 1 && cp->a <= 8 ? (cp->b ? u : s)[cp->a] : L_NONE;
    }
    case K_FLOAT: return cp->a == 4 ? L_F4 : L_F8;
    case K_STR: return cp->b == 0 ? L_BIN : L_STR;
    case K_DATE: return L_DATE;
    case K_DT2: case K_TS2: return L_TS;
    case K_DEC: return cp->c >= 1 && cp->c <= 38 ? L_DEC : L_NONE;
    case K_ENUM: return cp->obj1 == Py_None ? L_NONE : L_STR;
    case K_YEAR: return L_I2;
    case K_BIT: case K_TIME2: return L_I8;
    case K_SET: return cp->obj2 == Py_None ? L_NONE : L_STR;
    }
    return L_NONE;
}

/* Append the validity bit of the next row (bitmap allocated at the first NULL). */
static int put_valid_slow(ACol *c, int valid) {
    Py_ssize_t i = c->rows;
    if (!valid && c->valid.p == NULL) {
        Py_ssize_t need = (i + 8) / 8;
        if (buf_grow(&c->valid, need) < 0) return -1;
        memset(c->valid.p, 0xFF, (size_t)need);
        c->valid.len = need;
    }
    if (c->valid.p != NULL) {
        if (buf_grow(&c->valid, i / 8 + 1 - c->valid.len) < 0) return -1;
        if (c->valid.len < i / 8 + 1) c->valid.p[c->valid.len++] = 0;
        unsigned char *byte = (unsigned char *)c->valid.p + i / 8;
        if (valid) *byte |= (unsigned char)(1u << (i & 7));
        else *byte &= (unsigned char)~(1u << (i & 7));
    }
    if (!valid) c->nulls++;
    c->rows++;
    return 0;
}

/* A valid row of a column without NULLs so far (the usual case) only counts it. */
static inline int put_valid(ACol *c, int valid) {
    if (valid && c->valid.p == NULL) {
        c->rows++;
        return 0;
    }
    return put_valid_slow(c, valid);
}

static int is_utf8(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    while (i < n) {
        uint64_t word, w[4];  /* ASCII 32, then eight bytes at a time: most text is */
        if (n - i >= 32 && (memcpy(w, s + i, 32),
                            !((w[0] | w[1] | w[2] | w[3]) & 0x8080808080808080ULL))) {
            i += 32;
            continue;
        }
        if (n - i >= 8 && (memcpy(&word, s + i, 8), !(word & 0x8080808080808080ULL))) {
            i += 8;
            continue;
        }
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int len;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) len = 2;
        else if (c == 0xE0) { len = 3; lo = 0xA0; }
        else if (c >= 0xE1 && c <= 0xEC) len = 3;
        else if (c == 0xED) { len = 3; hi = 0x9F; }
        else if (c >= 0xEE && c <= 0xEF) len = 3;
        else if (c == 0xF0) { len = 4; lo = 0x90; }
        else if (c >= 0xF1 && c <= 0xF3) len = 4;
        else if (c == 0xF4) { len = 4; hi = 0x8F; }
        else return 0;
        if (n - i < len) return 0;
        if (s[i + 1] < lo || s[i + 1] > hi) return 0;
        for (int k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF) return 0;
        i += len;
    }
    return 1;
}

static int64_t days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* A date Python's datetime.date accepts (else the reference makes an InvalidTemporal). */
static int valid_date(int64_t y, int m, int d) {
    static const int mdays[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (y < 1 || y > 9999 || m < 1 || m > 12 || d < 1) return 0;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= mdays[m] + (m == 2 && leap);
}

static int put_offset(ACol *c) {
    int32_t end = (int32_t)c->data.len;
    return buf_put(&c->offsets, &end, 4);
}

static int put_zeros(Buf *b, Py_ssize_t n) {
    if (buf_grow(b, n) < 0) return -1;
    memset(b->p + b->len, 0, (size_t)n);
    b->len += n;
    return 0;
}

static int put_str(ACol *c, const void *s, Py_ssize_t n) {
    if (c->data.len + n > INT32_MAX) { c->layout = L_NONE; return 0; }
    if (buf_put(&c->data, s, n) < 0) return -1;
    return put_offset(c);
}

/* A Python str's UTF-8 as the column's next string; the column falls back when it has none. */
static int put_pystr(ACol *c, PyObject *text) {
    Py_ssize_t n;
    const char *s = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &n) : NULL;
    if (s != NULL) return put_str(c, s, n);
    PyErr_Clear();
    c->layout = L_NONE;
    return 0;
}

/* A string column's value (K_STR) into c: UTF-8 text, bytes, or what cp->obj1 makes of them. */
static int astr(const ColPlan *cp, ACol *c, const unsigned char *s, uint64_t n) {
    if (cp->b == 2) {
        /* Python's own decoder, called even for a column that fell back: it is what may
         * raise on bad bytes (JSON), and the reference raises there too. Its str lands as
         * UTF-8; bytes (not well-formed in the charset) leave the column to Python. */
        PyObject *text = call_consuming(
            cp->obj1, PyBytes_FromStringAndSize((const char *)s, (Py_ssize_t)n));
        if (text == NULL) return -1;
        int rc = c->layout == L_STR ? put_pystr(c, text) : 0;
        Py_DECREF(text);
        return rc;
    }
    if (c->layout == L_STR) {
        if (!is_utf8(s, (Py_ssize_t)n)) c->layout = L_NONE;
        else return put_str(c, s, (Py_ssize_t)n);
    } else if (c->layout == L_BIN) {
        if (put_str(c, s, (Py_ssize_t)n) < 0) return -1;
        if (c->layout == L_BIN && cp->c > 0 && n < (uint64_t)cp->c) {  /* BINARY(n) pad */
            Py_ssize_t pad = cp->c - (Py_ssize_t)n;
            if (c->data.len + pad > INT32_MAX) {
                c->layout = L_NONE;
            } else {
                if (put_zeros(&c->data, pad) < 0) return -1;
                int32_t e = (int32_t)c->data.len;
                memcpy(c->offsets.p + c->offsets.len - 4, &e, 4);
            }
        }
    }
    return 0;
}

/* A SET's members, comma-separated, as the column's next string. */
static int aset(const ColPlan *cp, ACol *c, uint64_t mask) {
    int members = 0;
    for (Py_ssize_t bit = 0; bit < PyTuple_GET_SIZE(cp->obj2) && bit < 64; bit++) {
        if (!(mask >> bit & 1)) continue;
        Py_ssize_t n;
        const char *label = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(cp->obj2, bit), &n);
        if (label == NULL) {
            PyErr_Clear();
            c->layout = L_NONE;
            return 0;
        }
        if ((members++ && buf_put(&c->data, ",", 1) < 0) || buf_put(&c->data, label, n) < 0)
            return -1;
    }
    if (c->data.len > INT32_MAX) {
        c->layout = L_NONE;
        return 0;
    }
    return put_offset(c);
}

/* Read one value of cp at *offp (the readers decode() uses) into column c. */
static int avalue(const ColPlan *cp, ACol *c, const unsigned char *buf, Py_ssize_t *offp,
                  Py_ssize_t end) {
    Py_ssize_t off = *offp;  /* a local the readers' inlined code keeps in a register */
    /* A fixed-width value, appended as its first `width` bytes: Arrow's little-endian integer
     * (a narrower one is the low bytes of i64, an unsigned one's bits as they are), a FLOAT's or
     * DOUBLE's IEEE bits, DECIMAL's 128-bit integer. */
    union {
        int64_t i64;
        __int128 i128;
    } out = {.i128 = 0};
    int width = 0;
    switch (cp->kind) {
    case K_INT:
        if (read_int(cp, buf, &off, end, &out.i64) < 0) return -1;
        width = WIDTH[c->layout];
        break;
    case K_FLOAT:
        if (read_uint(cp, buf, &off, end, 0, (uint64_t *)&out.i64) < 0) return -1;
        width = cp->a;
        break;
    case K_STR: {
        const unsigned char *s;
        uint64_t n;
        if (read_prefixed(cp, buf, &off, end, &s, &n) < 0 || astr(cp, c, s, n) < 0) return -1;
        break;
    }
    case K_DATE: {
        Civil t;
        if (read_date(buf, &off, end, &t) < 0) return -1;
        if (!valid_date(t.year, t.month, t.day)) {
            c->layout = L_NONE;
            break;
        }
        out.i64 = (int32_t)days_from_civil(t.year, t.month, t.day);
        width = 4;
        break;
    }
    case K_DT2: {
        Civil t;
        if (read_dt2(cp, buf, &off, end, &t) < 0) return -1;
        if (!valid_date(t.year, t.month, t.day) || t.hour > 23 || t.minute > 59 || t.second > 59) {
            c->layout = L_NONE;
            break;
        }
        out.i64 = ((days_from_civil(t.year, t.month, t.day) * 86400 + t.hour * 3600
                    + t.minute * 60 + t.second) * 1000000) + t.us;
        width = 8;
        break;
    }
    case K_TS2: {
        uint32_t secs, us;
        if (read_ts2(cp, buf, &off, end, &secs, &us) < 0) return -1;
        if (secs == 0 && us == 0) {
            c->layout = L_NONE;  /* the zero TIMESTAMP: the Python value (an InvalidTemporal) */
            break;
        }
        out.i64 = (int64_t)secs * 1000000 + us;
        width = 8;
        break;
    }
    case K_DEC: {
        int neg;
        uint32_t groups[16];
        if (read_dec(cp, buf, &off, end, &neg, groups) < 0) return -1;
        if (c->layout != L_DEC) break;
        for (int k = 0; k < cp->ngroups; k++)
            out.i128 = out.i128 * POW10[cp->groups[k][1]] + groups[k];
        if (neg) out.i128 = -out.i128;
        width = 16;
        break;
    }
    case K_ENUM: {
        uint32_t x;
        if (read_enum(cp, buf, &off, end, &x) < 0) return -1;
        if (c->layout == L_STR && put_pystr(c, PyTuple_GET_ITEM(cp->obj1, x)) < 0) return -1;
        break;
    }
    case K_YEAR: {
        int year;
        if (read_year(buf, &off, end, &year) < 0) return -1;
        out.i64 = year;
        width = 2;
        break;
    }
    case K_BIT:  /* int64, two's complement above 2^63 (types._to_bit) */
        if (read_uint(cp, buf, &off, end, 1, (uint64_t *)&out.i64) < 0) return -1;
        width = 8;
        break;
    case K_TIME2:
        if (read_time2(cp, buf, &off, end, &out.i64) < 0) return -1;
        width = 8;
        break;
    case K_SET: {
        uint64_t mask;
        if (read_set(cp, buf, &off, end, &mask) < 0) return -1;
        if (c->layout == L_STR && aset(cp, c, mask) < 0) return -1;
        break;
    }
    default:
        PyErr_SetString(PyExc_ValueError, "unknown column kind");
        return -1;
    }
    if (c->layout != L_NONE && width && buf_put(&c->data, &out, width) < 0) return -1;
    *offp = off;
    return 0;
}

static int aimage(const Plan *plan, ACol *cols, const unsigned char *buf, Py_ssize_t *offp,
                  Py_ssize_t end) {
    Py_ssize_t off = *offp;
    const unsigned char *nulls = take(buf, &off, end, (plan->n + 7) / 8);
    if (nulls == NULL) return -1;
    for (Py_ssize_t k = 0; k < plan->n; k++) {
        ACol *c = &cols[k];
        int null = nulls[k >> 3] >> (k & 7) & 1;
        if (null) {
            if (c->layout == L_NONE) continue;
            int w = WIDTH[c->layout];
            if ((w ? put_zeros(&c->data, w) : put_offset(c)) < 0) return -1;
        } else if (avalue(&plan->cols[k], c, buf, &off, end) < 0) {
            return -1;
        }
        if (c->layout != L_NONE && put_valid(c, !null) < 0) return -1;
    }
    *offp = off;
    return 0;
}

static PyObject *bytes_of(Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
}

/* (tag, nulls, validity bytes | None, data bytes, offsets bytes | None), or None (fallback). */
static PyObject *TAG_OBJECTS[L_LAST + 1];  /* TAGS as interned str, made at import */

static PyObject *chunk_of(ACol *c) {
    if (c->layout == L_NONE) Py_RETURN_NONE;
    PyObject *out = PyTuple_New(5);
    if (out == NULL) return NULL;
    PyTuple_SET_ITEM(out, 0, Py_NewRef(TAG_OBJECTS[c->layout]));
    PyTuple_SET_ITEM(out, 1, PyLong_FromSsize_t(c->nulls));
    PyTuple_SET_ITEM(out, 2, c->valid.p ? bytes_of(&c->valid) : Py_NewRef(Py_None));
    PyTuple_SET_ITEM(out, 3, bytes_of(&c->data));
    PyTuple_SET_ITEM(out, 4, WIDTH[c->layout] ? Py_NewRef(Py_None) : bytes_of(&c->offsets));
    for (int i = 1; i < 5; i++)
        if (PyTuple_GET_ITEM(out, i) == NULL) {
            Py_DECREF(out);
            return NULL;
        }
    return out;
}

static void acols_free(const Plan *plan, ACol *cols) {
    if (cols == NULL) return;
    for (Py_ssize_t k = 0; k < plan->n; k++) acol_free(&cols[k]);
    PyMem_Free(cols);
}

/* Columns for an event of `bytes` row bytes, their buffers sized for it up front: a column's
 * data rarely outgrows the event's bytes (strings never do), nor its offsets a quarter of them,
 * so an event of the usual 8 KiB is decoded without growing a buffer (growing them from 64
 * bytes was ~15% of the decoder's time). Capped, so that a huge event's columns start at 64 KiB
 * and grow as they must. */
static ACol *acols_new(const Plan *plan, Py_ssize_t bytes) {
    ACol *cols = PyMem_Calloc((size_t)plan->n + 1, sizeof(ACol));
    if (cols == NULL) { PyErr_NoMemory(); return NULL; }
    Py_ssize_t room = bytes > 65536 ? 65536 : bytes;
    for (Py_ssize_t k = 0; k < plan->n; k++) {
        ACol *c = &cols[k];
        c->layout = layout_of(&plan->cols[k]);
        if (c->layout == L_NONE) continue;
        int32_t zero = 0;
        if (buf_grow(&c->data, room) < 0
            || (!WIDTH[c->layout] && (buf_grow(&c->offsets, room / 4 + 4) < 0
                                      || buf_put(&c->offsets, &zero, 4) < 0))) {
            acols_free(plan, cols);
            return NULL;
        }
    }
    return cols;
}

static PyObject *chunks_of(const Plan *plan, ACol *cols) {
    if (plan == NULL) Py_RETURN_NONE;
    PyObject *t = PyTuple_New(plan->n);
    if (t == NULL) return NULL;
    for (Py_ssize_t k = 0; k < plan->n; k++) {
        PyObject *c = chunk_of(&cols[k]);
        if (c == NULL) { Py_DECREF(t); return NULL; }
        PyTuple_SET_ITEM(t, k, c);
    }
    return t;
}

static Plan *plan_only(PyObject *capsule) {
    if (capsule == Py_None) return NULL;
    return (Plan *)PyCapsule_GetPointer(capsule, CAPSULE);
}

/* decode_arrow(buf, off, end, before_plan, after_plan) -> (rows, before_chunks, after_chunks)
 * Bad bytes raise ValueError exactly where decode() would. */
static PyObject *decode_arrow(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    const unsigned char *buf;
    Py_ssize_t off, end;
    if (event_args(args, nargs, 5, "decode_arrow(buf: bytes, off, end, bplan, aplan)", &buf,
                   &off, &end) < 0)
        return NULL;
    Plan *before = plan_only(args[3]);
    if (before == NULL && PyErr_Occurred()) return NULL;
    Plan *after = plan_only(args[4]);
    if (after == NULL && PyErr_Occurred()) return NULL;
    ACol *bcols = NULL, *acols = NULL;
    PyObject *result = NULL, *bt = NULL, *at = NULL;
    if (before != NULL && (bcols = acols_new(before, end - off)) == NULL) goto done;
    if (after != NULL && (acols = acols_new(after, end - off)) == NULL) goto done;
    Py_ssize_t rows = 0;
    while (off < end) {
        Py_ssize_t start = off;
        if (before != NULL && aimage(before, bcols, buf, &off, end) < 0) goto done;
        if (after != NULL && aimage(after, acols, buf, &off, end) < 0) goto done;
        if (off == start) {
            PyErr_SetString(PyExc_ValueError, "row image holds no bytes");
            goto done;
        }
        rows++;
    }
    bt = chunks_of(before, bcols);
    at = chunks_of(after, acols);
    if (bt && at) result = Py_BuildValue("(nOO)", rows, bt, at);
done:
    Py_XDECREF(bt);
    Py_XDECREF(at);
    if (before) acols_free(before, bcols);
    if (after) acols_free(after, acols);
    return result;
}

/* What text_rows makes of one non-NULL value (protocol.results.TEXT_* say the same). */
enum { T_STR = 0, T_BYTES = 1, T_INT = 2, T_FLOAT = 3, T_UTF8 = 4 };

/* The value's text as str (UTF-8, surrogateescape): what an INT/FLOAT value that is not in the
 * server's plain number form is kept as (the caller then converts the column in Python). */
static PyObject *text_fallback(const unsigned char *p, Py_ssize_t n, Py_ssize_t *fallbacks) {
    (*fallbacks)++;
    return PyUnicode_DecodeUTF8((const char *)p, n, "surrogateescape");
}

/* One value of text_rows. T_INT: [-]digits only, else the text; T_FLOAT: what float() accepts
 * of [0-9.eE+-], else the text; T_UTF8: str when valid UTF-8 (strict), else bytes. */
static PyObject *text_value(int kind, const unsigned char *p, Py_ssize_t n,
                            Py_ssize_t *fallbacks) {
    char tmp[64];
    switch (kind) {
    case T_BYTES:
        return PyBytes_FromStringAndSize((const char *)p, n);
    case T_INT: {
        Py_ssize_t i = (n > 0 && p[0] == '-') ? 1 : 0;
        if (n - i < 1 || n >= (Py_ssize_t)sizeof tmp) return text_fallback(p, n, fallbacks);
        for (Py_ssize_t j = i; j < n; j++)
            if (p[j] < '0' || p[j] > '9') return text_fallback(p, n, fallbacks);
        if (n - i <= 18) {
            long long v = 0;
            for (Py_ssize_t j = i; j < n; j++) v = v * 10 + (p[j] - '0');
            return PyLong_FromLongLong(i ? -v : v);
        }
        memcpy(tmp, p, (size_t)n);
        tmp[n] = '\0';
        return PyLong_FromString(tmp, NULL, 10);
    }
    case T_FLOAT: {
        if (n < 1 || n >= (Py_ssize_t)sizeof tmp) return text_fallback(p, n, fallbacks);
        for (Py_ssize_t j = 0; j < n; j++) {
            unsigned char c = p[j];
            if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' ||
                  c == '+'))
                return text_fallback(p, n, fallbacks);
        }
        memcpy(tmp, p, (size_t)n);
        tmp[n] = '\0';
        char *stop = NULL;
        double v = PyOS_string_to_double(tmp, &stop, NULL);
        if ((v == -1.0 && PyErr_Occurred()) || stop != tmp + n) {
            PyErr_Clear();
            return text_fallback(p, n, fallbacks);
        }
        return PyFloat_FromDouble(v);
    }
    case T_UTF8:
        return utf8_or_bytes((const char *)p, n);
    default:
        return PyUnicode_DecodeUTF8((const char *)p, n, "surrogateescape");
    }
}

/* One length-encoded value of a text row at *offp: 1 value (*s, *n), 0 NULL, -1 malformed
 * (no exception set: the caller says what it makes of it). */
static int text_field(const unsigned char *p, Py_ssize_t size, Py_ssize_t *offp,
                      const unsigned char **s, Py_ssize_t *n) {
    Py_ssize_t off = *offp;
    if (off >= size) goto bad;
    unsigned int first = p[off];
    unsigned long long length;
    Py_ssize_t start;
    if (first < 0xFB) {
        length = first;
        start = off + 1;
    } else if (first == 0xFB) {
        *offp = off + 1;
        return 0;
    } else {
        int width = first == 0xFC ? 2 : first == 0xFD ? 3 : first == 0xFE ? 8 : 0;
        if (width == 0 || size - off - 1 < width) goto bad;
        length = le(p + off + 1, width);
        start = off + 1 + width;
    }
    if (length > (unsigned long long)(size - start)) goto bad;
    *s = p + start;
    *n = (Py_ssize_t)length;
    *offp = start + (Py_ssize_t)length;
    return 1;
bad:
    return -1;
}

/* The length of the plain text-row packet at b[pos, end) with sequence id seq, or -1 where the
 * bulk readers stop (see text_rows). */
static Py_ssize_t plain_row(const unsigned char *b, Py_ssize_t pos, Py_ssize_t end, long seq,
                            long long limit) {
    if (end - pos < 4) return -1;
    Py_ssize_t length = b[pos] | (b[pos + 1] << 8) | (b[pos + 2] << 16);
    if (b[pos + 3] != seq || length >= 0xFFFFFF || length > limit || end - pos - 4 < length
        || length == 0 || b[pos + 4] >= 0xFE)
        return -1;
    return length;
}

/* The (buf, start, end, seq, limit) arguments of the bulk readers, the buffer's view held. */
static int wire_args(PyObject *const *args, Py_buffer *view, Py_ssize_t *pos, Py_ssize_t *end,
                     long *seq, long long *limit) {
    *pos = PyLong_AsSsize_t(args[1]);
    *end = PyLong_AsSsize_t(args[2]);
    *seq = PyLong_AsLong(args[3]);
    *limit = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred() || PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE) < 0) return -1;
    if (*pos < 0 || *end > view->len || *pos > *end) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "start/end outside the buffer");
        return -1;
    }
    return 0;
}

/* kinds (bytes) and columns (a list of as many lists) of text_rows and text_lists. */
static int kinds_and_columns(PyObject *kinds, PyObject *columns) {
    Py_ssize_t n = PyBytes_GET_SIZE(kinds);
    if (PyList_GET_SIZE(columns) != n) {
        PyErr_SetString(PyExc_ValueError, "one kind per column list");
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (!PyList_Check(PyList_GET_ITEM(columns, i))) {
            PyErr_SetString(PyExc_TypeError, "columns must be lists");
            return -1;
        }
    return 0;
}

/* Parse one row payload into values[0..n); 0 ok, 1 malformed (nothing kept), -1 error. */
static int text_values(const unsigned char *p, Py_ssize_t size, const char *kinds, Py_ssize_t n,
                       PyObject **values, Py_ssize_t *fallbacks) {
    Py_ssize_t off = 0, i = 0;
    for (; i < n; i++) {
        const unsigned char *s = NULL;
        Py_ssize_t length = 0;
        int got = text_field(p, size, &off, &s, &length);
        if (got < 0) goto malformed;
        values[i] = got ? text_value(kinds[i], s, length, fallbacks) : Py_NewRef(Py_None);
        if (values[i] == NULL) {
            for (Py_ssize_t j = 0; j < i; j++) Py_DECREF(values[j]);
            return -1;
        }
    }
    if (off == size) return 0;
malformed:
    for (Py_ssize_t j = 0; j < i; j++) Py_DECREF(values[j]);
    return 1;
}

/* text_rows(buf, start, end, seq, limit, kinds: bytes, columns: list[list])
 *     -> (next start, next sequence id, rows, fallbacks)
 * The complete text-protocol row packets buffered in buf[start:end] (the packet codec's
 * buffer), each value appended to its column's list as kinds says. Stops, consuming nothing
 * of it, at the first packet that is not a plain row for the Python path to handle: an
 * incomplete, split (>= 16 MiB) or oversized packet, one with another sequence id, an
 * EOF/OK/ERR (first byte 0xFE/0xFF, also a row whose first value is >= 16 MiB), a malformed
 * row. fallbacks counts the T_INT/T_FLOAT values kept as text. */
static PyObject *text_rows(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyBytes_Check(args[5]) || !PyList_Check(args[6])) {
        PyErr_SetString(PyExc_TypeError,
                        "text_rows(buf, start, end, seq, limit, kinds: bytes, columns: list)");
        return NULL;
    }
    const char *kinds = PyBytes_AS_STRING(args[5]);
    PyObject *columns = args[6];
    Py_ssize_t n = PyBytes_GET_SIZE(args[5]), pos, end, length;
    long seq;
    long long limit;
    Py_buffer view;
    if (kinds_and_columns(args[5], columns) < 0
        || wire_args(args, &view, &pos, &end, &seq, &limit) < 0)
        return NULL;
    PyObject **values = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n ? n : 1));
    if (values == NULL) {
        PyBuffer_Release(&view);
        return PyErr_NoMemory();
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t rows = 0, fallbacks = 0;
    while ((length = plain_row(b, pos, end, seq, limit)) >= 0) {
        const unsigned char *p = b + pos + 4;
        Py_ssize_t row_fallbacks = 0;
        int r = text_values(p, length, kinds, n, values, &row_fallbacks);
        if (r < 0) goto fail;
        if (r > 0) break;
        for (Py_ssize_t i = 0; i < n; i++) {
            int failed = PyList_Append(PyList_GET_ITEM(columns, i), values[i]);
            Py_DECREF(values[i]);
            if (failed) {
                for (Py_ssize_t j = i + 1; j < n; j++) Py_DECREF(values[j]);
                goto fail;
            }
        }
        fallbacks += row_fallbacks;
        pos += 4 + length;
        seq = (seq + 1) & 0xFF;
        rows++;
    }
    PyMem_Free(values);
    PyBuffer_Release(&view);
    return Py_BuildValue("(nlnn)", pos, seq, rows, fallbacks);
fail:
    PyMem_Free(values);
    PyBuffer_Release(&view);
    return NULL;
}

/* text_row(data: bytes, binary: tuple[bool, ...]) -> tuple | None
 * One text-protocol row (results.parse_text_row's fast path): per column a length-encoded
 * string, str (UTF-8, surrogateescape) or bytes where binary[i] is true, None for 0xFB.
 * Returns None for anything malformed, so that the Python parser raises its typed error. */
static PyObject *text_row(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyBytes_Check(args[0]) || !PyTuple_Check(args[1])) Py_RETURN_NONE;
    PyObject *binary = args[1];
    Py_ssize_t n = PyTuple_GET_SIZE(binary);
    char *kinds = PyMem_Malloc((size_t)(n ? n : 1));
    PyObject **values = PyMem_Malloc(sizeof(PyObject *) * (size_t)(n ? n : 1));
    PyObject *row = NULL;
    if (kinds == NULL || values == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        int is_binary = PyObject_IsTrue(PyTuple_GET_ITEM(binary, i));
        if (is_binary < 0) goto done;
        kinds[i] = is_binary ? T_BYTES : T_STR;
    }
    Py_ssize_t fallbacks = 0;
    int r = text_values((const unsigned char *)PyBytes_AS_STRING(args[0]),
                        PyBytes_GET_SIZE(args[0]), kinds, n, values, &fallbacks);
    if (r < 0) goto done;
    if (r > 0) {
        Py_INCREF(Py_None);
        row = Py_None;
        goto done;
    }
    row = PyTuple_New(n);
    if (row == NULL) {
        for (Py_ssize_t i = 0; i < n; i++) Py_DECREF(values[i]);
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) PyTuple_SET_ITEM(row, i, values[i]);
done:
    PyMem_Free(kinds);
    PyMem_Free(values);
    return row;
}


/* ---- Snapshot rows straight into Arrow: text_collect, text_arrow, text_lists ---------------
 * A snapshot chunk's row packets are kept as they arrive (text_collect: one framed copy, no
 * parsing), then converted column by column: text_arrow turns each value's text (what the
 * snapshot's SELECT expressions print: protocol/snapshot/values.py) into the same Arrow chunks
 * decode_arrow makes of the binlog's bytes for the column (the layout from the same plan entry,
 * so the same tag); text_lists gives the Python text values of the columns that need them (a
 * column text_arrow left to Python, the chunking key). Kept rows are framed as a 4-byte
 * little-endian length and the row payload (a row of any size fits, also one the Python path
 * joined from split packets). */

/* text_collect(buf, start, end, seq, limit, out: bytearray) -> (start, seq, rows, last)
 * text_rows' framing and stop rules (see there), but each plain row packet's payload is
 * appended to out, framed, unparsed; last is where the last one starts in out (-1: none). A
 * malformed row is found by text_arrow / text_lists. */
static PyObject *text_collect(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 || !PyByteArray_Check(args[5])) {
        PyErr_SetString(PyExc_TypeError, "text_collect(buf, start, end, seq, limit, out: bytearray)");
        return NULL;
    }
    PyObject *out = args[5];
    Py_ssize_t pos, end, length;
    long seq;
    long long limit;
    Py_buffer view;
    if (wire_args(args, &view, &pos, &end, &seq, &limit) < 0) return NULL;
    const unsigned char *b = (const unsigned char *)view.buf;
    /* First pass: how many packets and bytes, so out grows once. */
    Py_ssize_t scan = pos, bytes = 0, rows = 0;
    long s = seq;
    while ((length = plain_row(b, scan, end, s, limit)) >= 0) {
        bytes += 4 + length;
        scan += 4 + length;
        s = (s + 1) & 0xFF;
        rows++;
    }
    Py_ssize_t at = PyByteArray_GET_SIZE(out), last = -1;
    if (rows && PyByteArray_Resize(out, at + bytes) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    unsigned char *base = (unsigned char *)PyByteArray_AS_STRING(out), *o = base + at;
    for (Py_ssize_t r = 0; r < rows; r++) {
        length = b[pos] | (b[pos + 1] << 8) | (b[pos + 2] << 16);
        uint32_t len32 = (uint32_t)length;
        last = o - base;
        o[0] = (unsigned char)len32;
        o[1] = (unsigned char)(len32 >> 8);
        o[2] = (unsigned char)(len32 >> 16);
        o[3] = 0;
        memcpy(o + 4, b + pos + 4, (size_t)length);
        o += 4 + length;
        pos += 4 + length;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(nlnn)", pos, s, rows, last);
}

/* The next kept row of raw[*offp, size): its payload and length; 0 at the end, -1 (ValueError)
 * when the framing runs past the end. */
static int next_kept(const unsigned char *raw, Py_ssize_t size, Py_ssize_t *offp,
                     const unsigned char **p, Py_ssize_t *n) {
    Py_ssize_t off = *offp;
    if (off >= size) return 0;
    if (size - off < 4) goto bad;
    uint32_t len = (uint32_t)le(raw + off, 4);
    if ((uint64_t)len > (uint64_t)(size - off - 4)) goto bad;
    *p = raw + off + 4;
    *n = (Py_ssize_t)len;
    *offp = off + 4 + (Py_ssize_t)len;
    return 1;
bad:
    PyErr_SetString(PyExc_ValueError, "kept text rows truncated");
    return -1;
}

/* Unsigned decimal digits s[0..n) (1..20 of them) into *v; 0 when not that or over 2^64-1. */
static int digits_u64(const unsigned char *s, Py_ssize_t n, uint64_t *v) {
    if (n < 1 || n > 20) return 0;
    uint64_t x = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *v = x;
    return 1;
}

/* Exactly n digits at s as a number (0 when one is not a digit). */
static int fixed_digits(const unsigned char *s, int n, int *v) {
    int x = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        x = x * 10 + (s[i] - '0');
    }
    *v = x;
    return 1;
}

/* ".f{1,6}" or nothing at s[0..n) → microseconds; 0 when not that. */
static int text_fraction(const unsigned char *s, Py_ssize_t n, uint32_t *us) {
    *us = 0;
    if (n == 0) return 1;
    if (s[0] != '.' || n < 2 || n > 7) return 0;
    uint32_t x = 0;
    for (Py_ssize_t i = 1; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return 0;
        x = x * 10 + (uint32_t)(s[i] - '0');
    }
    *us = x * POW10[7 - n];
    return 1;
}

/* Append the validity and the value text s[0..n) of cp to c as decode_arrow would append the
 * same value from the binlog, or leave the column to Python (c->layout = L_NONE) where the
 * text is not in the form the snapshot's SELECT prints for a value Arrow holds that way (a zero
 * date, a value out of range, ...): the reference conversion then decides. */
static int tvalue(const ColPlan *cp, ACol *c, const unsigned char *s, Py_ssize_t n) {
    unsigned char out[16];
    int width = 0;
    switch (cp->kind) {
    case K_INT: case K_YEAR: case K_BIT: {
        int neg = n > 0 && s[0] == '-';
        uint64_t u;
        if (!digits_u64(s + neg, n - neg, &u)) goto python;
        if (c->layout >= L_U1 && c->layout <= L_U8) {  /* an unsigned integer */
            width = WIDTH[c->layout];
            if (neg || (width < 8 && u >> (8 * width))) goto python;
            memcpy(out, &u, (size_t)width);
        } else if (cp->kind == K_BIT) {  /* int64, two's complement above 2^63 */
            if (neg) goto python;
            memcpy(out, &u, 8);
            width = 8;
        } else {
            width = WIDTH[c->layout];
            uint64_t top = width == 1 ? 0x7F : width == 2 ? 0x7FFF : width == 4 ? 0x7FFFFFFF
                           : 0x7FFFFFFFFFFFFFFFull;
            if (u > top + (uint64_t)neg) goto python;
            int64_t v = neg ? (int64_t)(0 - u) : (int64_t)u;
            if (width == 1) { int8_t x = (int8_t)v; memcpy(out, &x, 1); }
            else if (width == 2) { int16_t x = (int16_t)v; memcpy(out, &x, 2); }
            else if (width == 4) { int32_t x = (int32_t)v; memcpy(out, &x, 4); }
            else memcpy(out, &v, 8);
        }
        break;
    }
    case K_FLOAT: {  /* what float() accepts of the server's number form */
        char tmp[64];
        if (n < 1 || n >= (Py_ssize_t)sizeof tmp) goto python;
        for (Py_ssize_t j = 0; j < n; j++) {
            unsigned char ch = s[j];
            if (!((ch >= '0' && ch <= '9') || ch == '.' || ch == 'e' || ch == 'E' || ch == '-'
                  || ch == '+'))
                goto python;
        }
        memcpy(tmp, s, (size_t)n);
        tmp[n] = '\0';
        /* C's strtod rounds correctly, as float() does (the same double for the same digits;
         * the characters allowed above leave out what only one of them accepts), and costs a
         * fraction of PyOS_string_to_double. */
        char *stop = NULL;
        double d = strtod(tmp, &stop);
        if (stop != tmp + n) goto python;
        if (cp->a == 4) {
            float f = (float)d;
            if (isinf(f) && !isinf(d)) goto python;  /* the reference raises OverflowError */
            memcpy(out, &f, 4);
            width = 4;
        } else {
            memcpy(out, &d, 8);
            width = 8;
        }
        break;
    }
    case K_DEC: {  /* [-]digits[.digits], exactly scale fraction digits, <= precision digits */
        if (c->layout != L_DEC) goto python;
        Py_ssize_t i = n > 0 && s[0] == '-';
        int neg = (int)i, before = 0, after = 0, dot = 0;
        __int128 v = 0;
        for (; i < n; i++) {
            if (s[i] == '.' && !dot) { dot = 1; continue; }
            if (s[i] < '0' || s[i] > '9') goto python;
            v = v * 10 + (s[i] - '0');
            if (dot) after++; else before++;
            if (before + after > 38) goto python;
        }
        if (before == 0 || (dot && after == 0) || after != cp->a) goto python;
        /* leading zeros do not count towards the precision */
        __int128 limit = 1;
        for (int k = 0; k < cp->c; k++) limit *= 10;
        if (v >= limit) goto python;
        if (neg) v = -v;
        memcpy(out, &v, 16);
        width = 16;
        break;
    }
    case K_DATE: {
        int y, m, d;
        if (n != 10 || s[4] != '-' || s[7] != '-' || !fixed_digits(s, 4, &y)
            || !fixed_digits(s + 5, 2, &m) || !fixed_digits(s + 8, 2, &d) || !valid_date(y, m, d))
            goto python;
        int32_t days = (int32_t)days_from_civil(y, m, d);
        memcpy(out, &days, 4);
        width = 4;
        break;
    }
    case K_DT2: {
        int y, m, d, hh, mm, ss;
        uint32_t us;
        if (n < 19 || s[4] != '-' || s[7] != '-' || s[10] != ' ' || s[13] != ':'
            || s[16] != ':' || !fixed_digits(s, 4, &y) || !fixed_digits(s + 5, 2, &m)
            || !fixed_digits(s + 8, 2, &d) || !fixed_digits(s + 11, 2, &hh)
            || !fixed_digits(s + 14, 2, &mm) || !fixed_digits(s + 17, 2, &ss)
            || !text_fraction(s + 19, n - 19, &us) || !valid_date(y, m, d) || hh > 23
            || mm > 59 || ss > 59)
            goto python;
        int64_t v = ((days_from_civil(y, m, d) * 86400 + hh * 3600 + mm * 60 + ss) * 1000000)
                    + us;
        memcpy(out, &v, 8);
        width = 8;
        break;
    }
    case K_TS2: {  /* UNIX_TIMESTAMP(c): seconds[.fraction]; 0 is the zero TIMESTAMP */
        Py_ssize_t i = 0;
        while (i < n && s[i] != '.') i++;
        uint64_t secs;
        uint32_t us;
        if (i > 12 || !digits_u64(s, i, &secs) || !text_fraction(s + i, n - i, &us)
            || (secs == 0 && us == 0))
            goto python;
        int64_t v = (int64_t)secs * 1000000 + us;
        memcpy(out, &v, 8);
        width = 8;
        break;
    }
    case K_TIME2: {  /* [-]h+:mm:ss[.fraction] */
        Py_ssize_t i = n > 0 && s[0] == '-';
        int neg = (int)i;
        Py_ssize_t colon = i;
        while (colon < n && s[colon] != ':') colon++;
        uint64_t hours;
        int mm, ss;
        uint32_t us;
        if (colon - i > 4 || !digits_u64(s + i, colon - i, &hours) || n - colon < 6
            || s[colon + 3] != ':' || !fixed_digits(s + colon + 1, 2, &mm)
            || !fixed_digits(s + colon + 4, 2, &ss) || mm > 59 || ss > 59
            || !text_fraction(s + colon + 6, n - colon - 6, &us))
            goto python;
        int64_t v = ((int64_t)hours * 3600 + mm * 60 + ss) * 1000000 + us;
        if (neg) v = -v;
        memcpy(out, &v, 8);
        width = 8;
        break;
    }
    case K_STR:
        if (c->layout == L_STR) {
            if (cp->b != 1 || !is_utf8(s, n)) goto python;
        } else if (c->layout != L_BIN || cp->b != 0) {
            goto python;
        }
        return put_str(c, s, n);
    case K_ENUM: {  /* CAST(c AS UNSIGNED): the index, "" at 0 */
        uint64_t x;
        if (c->layout != L_STR || !digits_u64(s, n, &x)
            || x >= (uint64_t)PyTuple_GET_SIZE(cp->obj1))
            goto python;
        Py_ssize_t len;
        const char *label = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(cp->obj1, x), &len);
        if (label == NULL) { PyErr_Clear(); goto python; }
        return put_str(c, label, len);
    }
    case K_SET: {  /* CAST(c AS UNSIGNED): the bit mask */
        uint64_t mask;
        Py_ssize_t members = c->layout == L_STR ? PyTuple_GET_SIZE(cp->obj2) : 0;
        if (c->layout != L_STR || !digits_u64(s, n, &mask)
            || (members < 64 && mask >> members))
            goto python;
        int count = 0;
        for (Py_ssize_t bit = 0; bit < members && bit < 64; bit++) {
            if (!(mask >> bit & 1)) continue;
            Py_ssize_t len;
            const char *label = PyUnicode_AsUTF8AndSize(PyTuple_GET_ITEM(cp->obj2, bit), &len);
            if (label == NULL) { PyErr_Clear(); goto python; }
            if ((count++ && buf_put(&c->data, ",", 1) < 0) || buf_put(&c->data, label, len) < 0)
                return -1;
        }
        if (c->data.len > INT32_MAX) goto python;
        int32_t e = (int32_t)c->data.len;
        return buf_put(&c->offsets, &e, 4);
    }
    default:
        goto python;
    }
    return buf_put(&c->data, out, width);
python:
    c->layout = L_NONE;
    return 0;
}

/* Size every column's buffers for the kept rows once (a first pass over the framing and the
 * value lengths, no conversion): growing them value by value copied and page-faulted more than
 * the conversion itself cost. An error (a malformed row) is left to the conversion pass. */
static int reserve_text(const Plan *plan, ACol *cols, const unsigned char *raw,
                        Py_ssize_t size) {
    Py_ssize_t rows = 0, off = 0, n;
    const unsigned char *p;
    Py_ssize_t *text = PyMem_Calloc((size_t)plan->n + 1, sizeof(Py_ssize_t));
    if (text == NULL) { PyErr_NoMemory(); return -1; }
    while (next_kept(raw, size, &off, &p, &n) > 0) {
        Py_ssize_t at = 0;
        for (Py_ssize_t k = 0; k < plan->n; k++) {
            const unsigned char *s;
            Py_ssize_t len = 0;
            int got = text_field(p, n, &at, &s, &len);
            if (got < 0) break;
            if (got) text[k] += len;
        }
        rows++;
    }
    PyErr_Clear();  /* a malformed row: the conversion pass raises */
    int status = 0;
    for (Py_ssize_t k = 0; k < plan->n && status == 0; k++) {
        ACol *c = &cols[k];
        if (c->layout == L_NONE) continue;
        int w = WIDTH[c->layout];
        if (w) status = buf_grow(&c->data, rows * w);
        else if ((status = buf_grow(&c->offsets, rows * 4)) == 0 && plan->cols[k].kind == K_STR)
            status = buf_grow(&c->data, text[k]);
    }
    PyMem_Free(text);
    return status;
}

/* text_arrow(raw, plan, values: int) -> tuple of a chunk or None per plan column
 * Every kept row of raw (text_collect's framing) holds ``values`` values, the first
 * len(plan) converted into Arrow chunks as decode_arrow's (None: the column is left to
 * Python); the others only checked. A malformed row raises ValueError. */
static PyObject *text_arrow(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "text_arrow(raw, plan, values: int)");
        return NULL;
    }
    Plan *plan = (Plan *)PyCapsule_GetPointer(args[1], CAPSULE);
    if (plan == NULL) return NULL;
    Py_ssize_t values = PyLong_AsSsize_t(args[2]);
    if (values == -1 && PyErr_Occurred()) return NULL;
    if (values < plan->n) {
        PyErr_SetString(PyExc_ValueError, "text_arrow: fewer values than plan columns");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *raw = (const unsigned char *)view.buf;
    PyObject *result = NULL;
    ACol *cols = acols_new(plan, 0);  /* reserve_text sizes them */
    if (cols == NULL) goto done;
    Py_ssize_t off = 0, n;
    const unsigned char *p;
    int more;
    if (reserve_text(plan, cols, raw, view.len) < 0) goto done;
    while ((more = next_kept(raw, view.len, &off, &p, &n)) > 0) {
        Py_ssize_t at = 0;
        for (Py_ssize_t k = 0; k < values; k++) {
            const unsigned char *s = NULL;
            Py_ssize_t len = 0;
            int got = text_field(p, n, &at, &s, &len);
            if (got < 0) goto malformed;
            if (k >= plan->n) continue;
            ACol *c = &cols[k];
            if (c->layout == L_NONE) continue;
            if (!got) {
                int w = WIDTH[c->layout];
                if (w) {
                    if (buf_grow(&c->data, w) < 0) goto done;
                    memset(c->data.p + c->data.len, 0, (size_t)w);
                    c->data.len += w;
                } else {
                    int32_t e = (int32_t)c->data.len;
                    if (buf_put(&c->offsets, &e, 4) < 0) goto done;
                }
            } else if (tvalue(&plan->cols[k], c, s, len) < 0) {
                goto done;
            }
            if (c->layout != L_NONE && put_valid(c, got) < 0) goto done;
        }
        if (at != n) goto malformed;
    }
    if (more < 0) goto done;
    result = chunks_of(plan, cols);
    goto done;
malformed:
    PyErr_SetString(PyExc_ValueError, "malformed text row");
done:
    if (cols) acols_free(plan, cols);
    PyBuffer_Release(&view);
    return result;
}

/* text_lists(raw, kinds: bytes, columns: list[list]) -> rows
 * The kept rows of raw as text_rows would append them, only for the columns whose kind is not
 * T_SKIP (the others are checked, not made); a malformed row raises ValueError. */
enum { T_SKIP = 255 };
static PyObject *text_lists(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyBytes_Check(args[1]) || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "text_lists(raw, kinds: bytes, columns: list)");
        return NULL;
    }
    const unsigned char *kinds = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t width = PyBytes_GET_SIZE(args[1]);
    PyObject *columns = args[2];
    if (kinds_and_columns(args[1], columns) < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const unsigned char *raw = (const unsigned char *)view.buf;
    Py_ssize_t off = 0, n, rows = 0, fallbacks = 0;
    const unsigned char *p;
    int more;
    while ((more = next_kept(raw, view.len, &off, &p, &n)) > 0) {
        Py_ssize_t at = 0;
        for (Py_ssize_t k = 0; k < width; k++) {
            const unsigned char *s = NULL;
            Py_ssize_t len = 0;
            int got = text_field(p, n, &at, &s, &len);
            if (got < 0) goto malformed;
            if (kinds[k] == T_SKIP) continue;
            PyObject *v = got ? text_value(kinds[k], s, len, &fallbacks) : Py_NewRef(Py_None);
            if (v == NULL) goto fail;
            int failed = PyList_Append(PyList_GET_ITEM(columns, k), v);
            Py_DECREF(v);
            if (failed) goto fail;
        }
        if (at != n) goto malformed;
        rows++;
    }
    if (more < 0) goto fail;
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(rows);
malformed:
    PyErr_SetString(PyExc_ValueError, "malformed text row");
fail:
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"plan", (PyCFunction)make_plan, METH_O, "Compile a column plan (a tuple of specs)."},
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "Decode a rows event's images into per-column lists; returns the row count."},
    {"decode_arrow", (PyCFunction)(void (*)(void))decode_arrow, METH_FASTCALL,
     "Decode a rows event's images into per-column Arrow buffers (see native.py)."},
    {"text_row", (PyCFunction)(void (*)(void))text_row, METH_FASTCALL,
     "Parse one text-protocol row; None when malformed (the Python parser then raises)."},
    {"text_rows", (PyCFunction)(void (*)(void))text_rows, METH_FASTCALL,
     "Parse the complete row packets of a buffer into column lists."},
    {"text_collect", (PyCFunction)(void (*)(void))text_collect, METH_FASTCALL,
     "Keep the complete row packets of a buffer, unparsed (a snapshot chunk's rows)."},
    {"text_arrow", (PyCFunction)(void (*)(void))text_arrow, METH_FASTCALL,
     "Kept text rows into Arrow chunks, as decode_arrow's; None where Python must convert."},
    {"text_lists", (PyCFunction)(void (*)(void))text_lists, METH_FASTCALL,
     "Kept text rows into column lists (text_rows' values) for the columns asked for."},
    {NULL, NULL, 0, NULL},
};

/* What the Python side checks before it uses this extension (protocol/native_switch.py):
 * bump it with the loader's ABI whenever what the module exports, or how it is called, changes */
#define ABI_VERSION 3

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_rows", "binlake's native row decoder (see native.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native_rows(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return NULL;
    for (int i = 0; i <= L_LAST; i++)
        if (TAG_OBJECTS[i] == NULL && (TAG_OBJECTS[i] = PyUnicode_InternFromString(TAGS[i])) == NULL)
            return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "ABI_VERSION", ABI_VERSION) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    /* LAYOUTS: ((tag, bytes per value or 0 for offsets + bytes), ...), the chunks' layouts */
    PyObject *layouts = m == NULL ? NULL : PyTuple_New(L_LAST);
    for (int i = 1; layouts != NULL && i <= L_LAST; i++) {
        PyObject *entry = Py_BuildValue("(Oi)", TAG_OBJECTS[i], WIDTH[i]);
        if (entry == NULL) Py_CLEAR(layouts);
        else PyTuple_SET_ITEM(layouts, i - 1, entry);
    }
    if (m != NULL && (layouts == NULL || PyModule_AddObject(m, "LAYOUTS", layouts) < 0)) {
        Py_XDECREF(layouts);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
