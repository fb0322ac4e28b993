/* Row images as text lines, natively: the hot loop of `binlake decode`'s two formats.
 *
 * `binlake decode --format text` and `--format open-protocol` print one line per changed row;
 * done value by value in Python that cost ~10 us a row, ten times the decoding. These two
 * functions build a whole rows event's lines in one growing UTF-8 buffer and return them as
 * one str. They know values' *types*, not the formats' rules: the caller (replica/commands/
 * decode.py, sinks/openprotocol.py) precomputes every constant fragment (column names, JSON
 * keys) and gives, per column, a fallback callable -- the Python reference formatter -- for
 * every value that is not one of the plain exact types handled here (bool, tz-aware datetimes,
 * timedelta, zero dates, JSON diffs, subclasses...). So the reference defines the output, and
 * the fast path only repeats it for the plain cases (tests/unit/test_native_format.py checks the
 * two agree byte for byte).
 *
 * Either function returns None instead of a str when a str (a value or a fallback's result)
 * has no UTF-8 form (a lone surrogate): the caller then formats that event with the reference.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static PyObject *decimal_type;  /* decimal.Decimal */

/* --- a growing byte buffer ------------------------------------------------------------------ */

typedef struct {
    char *data;
    size_t len, cap;
} Buf;

static int buf_reserve(Buf *b, size_t extra) {
    if (b->len + extra <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) {
        if (cap > ((size_t)PY_SSIZE_T_MAX) / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *data = PyMem_Realloc(b->data, cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *s, size_t n) {
    if (n == 0)
        return 0; /* memcpy from/to NULL is undefined even for 0 bytes */
    if (buf_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static inline int buf_ch(Buf *b, char c) {
    if (b->len == b->cap && buf_reserve(b, 1) < 0)
        return -1;
    b->data[b->len++] = c;
    return 0;
}

/* 1: encoded; 0: no UTF-8 form (error cleared, the caller returns None); -1: error. */
#define NO_UTF8 0

/* The UTF-8 bytes of a str (cached on the object by CPython: ASCII strs are not copied). */
static int utf8_of(PyObject *s, const char **p, Py_ssize_t *n) {
    *p = PyUnicode_AsUTF8AndSize(s, n);
    if (*p != NULL)
        return 1;
    if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        PyErr_Clear();
        return NO_UTF8;
    }
    return -1;
}

static int put_str(Buf *b, PyObject *s) {
    const char *p;
    Py_ssize_t n;
    int ok = utf8_of(s, &p, &n);
    if (ok <= 0)
        return ok;
    return buf_put(b, p, (size_t)n) < 0 ? -1 : 1;
}

/* A fallback callable's str result, appended. */
static int put_fallback(Buf *b, PyObject *fallback, PyObject *value) {
    PyObject *text = PyObject_CallOneArg(fallback, value);
    if (text == NULL)
        return -1;
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "formatter returned %.100s, not str",
                     Py_TYPE(text)->tp_name);
        Py_DECREF(text);
        return -1;
    }
    int ok = put_str(b, text);
    Py_DECREF(text);
    return ok;
}

static int put_int(Buf *b, PyObject *v) {
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow) {
        PyObject *s = PyObject_Str(v);
        if (s == NULL)
            return -1;
        int ok = put_str(b, s);
        Py_DECREF(s);
        return ok;
    }
    char tmp[24], *end = tmp + sizeof tmp, *o = end;
    unsigned long long u = x < 0 ? 0ull - (unsigned long long)x : (unsigned long long)x;
    do {
        *--o = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (x < 0)
        *--o = '-';
    return buf_put(b, o, (size_t)(end - o)) < 0 ? -1 : 1;
}

/* repr(float); json=1: json.dumps' NaN/Infinity/-Infinity for the non-finite ones. */
/* --- repr(float), fast for the common magnitudes ------------------------------------------ *
 *
 * repr() prints the shortest digits that read back as the same double (the closest such when
 * there are several), in fixed notation for decimal exponents -4 < decpt <= 16. CPython gets
 * them with arbitrary-precision arithmetic (dtoa), which costs more than the rest of a row.
 * For a normal double x = m * 2^-s (m < 2^53, so 1e-5 <= |x| < 1e14 keeps s <= 69) the
 * correctly rounded p-digit decimal of x is exact in 128-bit integers: N = round(m * 10^k / 2^s)
 * with k = p - 1 - E, E the decimal exponent; and N reads back as x exactly when
 * |N * 2^s - m * 10^k| < 10^k / 2 (at equality, when m is even: round half to even).
 *   - If the shortest repr has <= 15 digits, it is N for p = 15 without its trailing zeros:
 *     x is within half an ulp (<= 2^-53 |x|) of it, nearer than half a unit of the 15th digit
 *     (>= 5e-16 |x|), so rounding x to 15 digits lands on it.
 *   - Else the closest 16-digit decimal, if it reads back, else the closest 17-digit one (17
 *     always do). A closer candidate reads back whenever any does, because x's rounding
 *     interval is symmetric -- except at a power of two (m == 2^52), left to dtoa, as are
 *     subnormals, other magnitudes, inf and nan.
 * tests/unit/test_native_format.py compares this with repr() over millions of doubles. */

#ifdef __SIZEOF_INT128__ /* GCC and Clang on 64-bit targets; elsewhere CPython's routine */
typedef unsigned __int128 u128;

/* The shortest digits of x (0 < x, see above) into d, their count; *decpt: x = 0.d * 10^decpt.
 * 0: not in the fast path's domain. */
static int shortest_digits(double x, char *d, int *decpt) {
    if (!(x >= 1e-5 && x < 1e14))
        return 0;
    int exp2;
    double frac = frexp(x, &exp2); /* x = frac * 2^exp2, 0.5 <= frac < 1 */
    uint64_t m = (uint64_t)ldexp(frac, 53);
    int s = 53 - exp2; /* 6..69 in the domain */
    if (m == (uint64_t)1 << 52 || s < 1 || s > 69)
        return 0;
    static const uint64_t P10[] = {
        1ull, 10ull, 100ull, 1000ull, 10000ull, 100000ull, 1000000ull, 10000000ull,
        100000000ull, 1000000000ull, 10000000000ull, 100000000000ull, 1000000000000ull,
        10000000000000ull, 100000000000000ull, 1000000000000000ull, 10000000000000000ull,
        100000000000000000ull, 1000000000000000000ull, 10000000000000000000ull};
    int E0 = (int)floor(log10(x)), E = E0;
    for (int p = 15; p <= 17; p++) {
        E = E0; /* a carry at one precision says nothing about the next */
        uint64_t n = 0;
        int settled = 0;
        for (int tries = 0; tries < 3 && !settled; tries++) {
            int k = p - 1 - E;
            if (k < 0 || k > 21)
                return 0;
            u128 pow10 = k <= 19 ? (u128)P10[k] : (u128)P10[19] * P10[k - 19];
            u128 t = (u128)m * pow10;
            u128 q = t >> s, rem = t - (q << s), half = (u128)1 << (s - 1);
            /* E is x's decimal exponent iff floor(x * 10^k) has p digits */
            if (q >= (u128)P10[p]) {
                E++;
                continue;
            }
            if (q < (u128)P10[p - 1]) {
                E--;
                continue;
            }
            settled = 1;
            if (rem > half || (rem == half && (q & 1)))
                q++;
            /* does q * 10^-k read back as x? 2 |q 2^s - t| against 10^k */
            u128 back = q << s, twice = (back > t ? back - t : t - back) * 2;
            if (twice < pow10 || (twice == pow10 && !(m & 1)))
                n = (uint64_t)q;
        }
        if (!settled)
            return 0;
        int carried = n == P10[p]; /* 99..9.5 rounded up: 10^p, one more decimal digit */
        if (carried)
            n = P10[p - 1];
        if (n == 0)
            continue;
        char tmp[20];
        int len = p;
        for (int i = p - 1; i >= 0; i--) {
            tmp[i] = (char)('0' + n % 10);
            n /= 10;
        }
        while (len > 1 && tmp[len - 1] == '0')
            len--;
        memcpy(d, tmp, (size_t)len);
        *decpt = E + 1 + carried;
        return len;
    }
    return 0;
}

#else
static int shortest_digits(double x, char *d, int *decpt) {
    return 0;
}
#endif

/* repr(x) for x in the fast path's domain, else 0 (nothing written). */
static int put_repr_fast(Buf *b, double x) {
    char d[20], out[40];
    int decpt, n = shortest_digits(fabs(x), d, &decpt), o = 0;
    if (n == 0)
        return 0;
    if (x < 0)
        out[o++] = '-';
    if (decpt <= -4 || decpt > 16) {
        out[o++] = d[0];
        if (n > 1) {
            out[o++] = '.';
            memcpy(out + o, d + 1, (size_t)n - 1);
            o += n - 1;
        }
        int e = decpt - 1;
        out[o++] = 'e';
        out[o++] = e < 0 ? '-' : '+';
        e = e < 0 ? -e : e;
        if (e >= 100)
            out[o++] = (char)('0' + e / 100);
        out[o++] = (char)('0' + e / 10 % 10);
        out[o++] = (char)('0' + e % 10);
    } else if (decpt <= 0) {
        out[o++] = '0';
        out[o++] = '.';
        for (int i = 0; i < -decpt; i++)
            out[o++] = '0';
        memcpy(out + o, d, (size_t)n);
        o += n;
    } else if (decpt >= n) {
        memcpy(out + o, d, (size_t)n);
        o += n;
        for (int i = n; i < decpt; i++)
            out[o++] = '0';
        out[o++] = '.';
        out[o++] = '0';
    } else {
        memcpy(out + o, d, (size_t)decpt);
        o += decpt;
        out[o++] = '.';
        memcpy(out + o, d + decpt, (size_t)(n - decpt));
        o += n - decpt;
    }
    return buf_put(b, out, (size_t)o) < 0 ? -1 : 1;
}

static int put_float(Buf *b, PyObject *v, int json) {
    double x = PyFloat_AS_DOUBLE(v);
    if (json && !isfinite(x)) {
        const char *s = isnan(x) ? "NaN" : (x > 0 ? "Infinity" : "-Infinity");
        return buf_put(b, s, strlen(s)) < 0 ? -1 : 1;
    }
    int fast = put_repr_fast(b, x);
    if (fast != 0)
        return fast;
    char *s = PyOS_double_to_string(x, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
    if (s == NULL)
        return -1;
    int rc = buf_put(b, s, strlen(s));
    PyMem_Free(s);
    return rc < 0 ? -1 : 1;
}

static int put_decimal(Buf *b, PyObject *v) {
    PyObject *s = PyObject_Str(v);
    if (s == NULL)
        return -1;
    int ok = put_str(b, s);
    Py_DECREF(s);
    return ok;
}

/* v as exactly `width` decimal digits, zero-padded (v < 10^width). */
static void fixed(char *o, unsigned v, int width) {
    for (int k = width - 1; k >= 0; k--) {
        o[k] = (char)('0' + v % 10);
        v /= 10;
    }
}

/* "YYYY-MM-DD" (isoformat: the year zero-padded to 4 digits). */
static int put_date(Buf *b, PyObject *v) {
    char tmp[10];
    fixed(tmp, PyDateTime_GET_YEAR(v), 4); /* 1..9999: always four digits */
    tmp[4] = '-';
    fixed(tmp + 5, PyDateTime_GET_MONTH(v), 2);
    tmp[7] = '-';
    fixed(tmp + 8, PyDateTime_GET_DAY(v), 2);
    return buf_put(b, tmp, sizeof tmp) < 0 ? -1 : 1;
}

/* A naive datetime as isoformat(" "): the fraction when non-zero, all six digits
 * (strip=0) or without its trailing zeros (strip=1, the Open Protocol's form). */
static int put_datetime(Buf *b, PyObject *v, int strip) {
    char tmp[26];
    fixed(tmp, PyDateTime_GET_YEAR(v), 4);
    tmp[4] = '-';
    fixed(tmp + 5, PyDateTime_GET_MONTH(v), 2);
    tmp[7] = '-';
    fixed(tmp + 8, PyDateTime_GET_DAY(v), 2);
    tmp[10] = ' ';
    fixed(tmp + 11, PyDateTime_DATE_GET_HOUR(v), 2);
    tmp[13] = ':';
    fixed(tmp + 14, PyDateTime_DATE_GET_MINUTE(v), 2);
    tmp[16] = ':';
    fixed(tmp + 17, PyDateTime_DATE_GET_SECOND(v), 2);
    size_t n = 19;
    int micro = PyDateTime_DATE_GET_MICROSECOND(v);
    if (micro) {
        tmp[19] = '.';
        fixed(tmp + 20, (unsigned)micro, 6);
        n = 26;
        if (strip)
            while (tmp[n - 1] == '0')
                n--;
    }
    return buf_put(b, tmp, n) < 0 ? -1 : 1;
}

static int is_naive_datetime(PyObject *v) {
    return PyDateTime_CheckExact(v) && PyDateTime_DATE_GET_TZINFO(v) == Py_None;
}

/* --- text format (replica/commands/decode.py format_value) ------------------------------- */

static const char HEX[] = "0123456789abcdef";

/* 'text' with \\ \' \n \r \t \0 escaped and every other C0 control and DEL as \xNN. */
static int put_quoted(Buf *b, PyObject *s) {
    const char *p;
    Py_ssize_t n;
    int ok = utf8_of(s, &p, &n);
    if (ok <= 0)
        return ok;
    if (buf_reserve(b, (size_t)n * 4 + 2) < 0)
        return -1;
    char *o = b->data + b->len;
    *o++ = '\'';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c != '\\' && c != '\'' && c != 0x7f) {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '\\': *o++ = '\\'; break;
        case '\'': *o++ = '\''; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case 0: *o++ = '0'; break;
        default:
            *o++ = 'x';
            *o++ = HEX[c >> 4];
            *o++ = HEX[c & 15];
        }
    }
    *o++ = '\'';
    b->len = (size_t)(o - b->data);
    return 1;
}

static int put_text_value(Buf *b, PyObject *v, PyObject *fallback) {
    PyTypeObject *t = Py_TYPE(v);
    if (v == Py_None)
        return buf_put(b, "NULL", 4) < 0 ? -1 : 1;
    if (t == &PyLong_Type)
        return put_int(b, v);
    if (t == &PyUnicode_Type)
        return put_quoted(b, v);
    if (t == &PyFloat_Type)
        return put_float(b, v, 0);
    if ((PyObject *)t == decimal_type)
        return put_decimal(b, v);
    if (t == &PyBytes_Type) {
        Py_ssize_t n = PyBytes_GET_SIZE(v);
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(v);
        if (buf_reserve(b, (size_t)n * 2 + 3) < 0)
            return -1;
        char *o = b->data + b->len;
        *o++ = 'X';
        *o++ = '\'';
        for (Py_ssize_t i = 0; i < n; i++) {
            *o++ = HEX[p[i] >> 4];
            *o++ = HEX[p[i] & 15];
        }
        *o++ = '\'';
        b->len = (size_t)(o - b->data);
        return 1;
    }
    if (is_naive_datetime(v)) {
        int ok;
        if (buf_ch(b, '\'') < 0 || (ok = put_datetime(b, v, 0)) <= 0 || buf_ch(b, '\'') < 0)
            return -1;
        return 1;
    }
    if (PyDate_CheckExact(v)) {
        if (buf_ch(b, '\'') < 0 || put_date(b, v) < 0 || buf_ch(b, '\'') < 0)
            return -1;
        return 1;
    }
    return put_fallback(b, fallback, v);
}

/* The value lists of an image: a tuple of lists, each at least `rows` long. */
static int check_columns(PyObject *columns, Py_ssize_t want, Py_ssize_t rows) {
    if (!PyTuple_Check(columns) || PyTuple_GET_SIZE(columns) != want) {
        PyErr_SetString(PyExc_TypeError, "columns must be a tuple, one list per column");
        return -1;
    }
    for (Py_ssize_t j = 0; j < want; j++) {
        PyObject *col = PyTuple_GET_ITEM(columns, j);
        if (!PyList_Check(col) || PyList_GET_SIZE(col) < rows) {
            PyErr_SetString(PyExc_ValueError, "a column list is shorter than the rows");
            return -1;
        }
    }
    return 0;
}

/* The last result's size: the next event of a table is likely as big, and starting there
 * saves the copies of growing the buffer from nothing (capped: a huge event is no guide). */
static size_t size_hint = 0;

static int buf_start(Buf *b) {
    return buf_reserve(b, size_hint < ((size_t)1 << 26) ? size_hint + 64 : (size_t)1 << 26);
}

static PyObject *finish(Buf *b, int ok, int as_bytes) {
    size_hint = b->len;
    PyObject *result = NULL;
    if (ok > 0 && as_bytes)
        result = PyBytes_FromStringAndSize(b->data ? b->data : "", (Py_ssize_t)b->len);
    else if (ok > 0)
        result = PyUnicode_DecodeUTF8(b->data ? b->data : "", (Py_ssize_t)b->len, "strict");
    else if (ok == NO_UTF8)
        result = Py_NewRef(Py_None);
    PyMem_Free(b->data);
    return result;
}

/* text_lines(parts, images, rows, fallback, head="", as_bytes=False) -> str | bytes | None
 *
 * head, then per row: parts[0] image[0] parts[1] image[1] ... parts[k], where image i is its
 * columns' prefixes[j] followed by the value of columns[j] at the row, and images is a tuple
 * of (prefixes: tuple[str], columns: tuple[list]). as_bytes: the UTF-8 bytes, not a str. */
static PyObject *text_lines(PyObject *self, PyObject *args) {
    PyObject *parts, *images, *fallback, *head = NULL;
    Py_ssize_t rows;
    int as_bytes = 0;
    if (!PyArg_ParseTuple(args, "O!O!nO|Up:text_lines", &PyTuple_Type, &parts, &PyTuple_Type,
                          &images, &rows, &fallback, &head, &as_bytes))
        return NULL;
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "rows must be >= 0");
        return NULL;
    }
    Py_ssize_t nimages = PyTuple_GET_SIZE(images);
    if (PyTuple_GET_SIZE(parts) != nimages + 1) {
        PyErr_SetString(PyExc_ValueError, "need one more part than images");
        return NULL;
    }
    for (Py_ssize_t i = 0; i <= nimages; i++)
        if (!PyUnicode_Check(PyTuple_GET_ITEM(parts, i))) {
            PyErr_SetString(PyExc_TypeError, "parts must be str");
            return NULL;
        }
    for (Py_ssize_t i = 0; i < nimages; i++) {
        PyObject *image = PyTuple_GET_ITEM(images, i);
        if (!PyTuple_Check(image) || PyTuple_GET_SIZE(image) != 2
                || !PyTuple_Check(PyTuple_GET_ITEM(image, 0))) {
            PyErr_SetString(PyExc_TypeError, "an image is (prefixes, columns)");
            return NULL;
        }
        PyObject *prefixes = PyTuple_GET_ITEM(image, 0);
        for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(prefixes); j++)
            if (!PyUnicode_Check(PyTuple_GET_ITEM(prefixes, j))) {
                PyErr_SetString(PyExc_TypeError, "prefixes must be str");
                return NULL;
            }
        if (check_columns(PyTuple_GET_ITEM(image, 1), PyTuple_GET_SIZE(prefixes), rows) < 0)
            return NULL;
    }
    Buf b = {NULL, 0, 0};
    int ok = buf_start(&b) < 0 ? -1 : 1;
    if (ok > 0 && head != NULL)
        ok = put_str(&b, head);
    for (Py_ssize_t r = 0; r < rows && ok > 0; r++) {
        for (Py_ssize_t i = 0; i <= nimages && ok > 0; i++) {
            ok = put_str(&b, PyTuple_GET_ITEM(parts, i));
            if (i == nimages || ok <= 0)
                break;
            PyObject *image = PyTuple_GET_ITEM(images, i);
            PyObject *prefixes = PyTuple_GET_ITEM(image, 0);
            PyObject *columns = PyTuple_GET_ITEM(image, 1);
            for (Py_ssize_t j = 0; j < PyTuple_GET_SIZE(prefixes) && ok > 0; j++) {
                ok = put_str(&b, PyTuple_GET_ITEM(prefixes, j));
                if (ok > 0) {
                    /* the list may have been changed by a fallback: check again */
                    PyObject *col = PyTuple_GET_ITEM(columns, j);
                    if (PyList_GET_SIZE(col) <= r) {
                        PyErr_SetString(PyExc_ValueError, "a column list shrank");
                        ok = -1;
                        break;
                    }
                    PyObject *v = PyList_GET_ITEM(col, r);
                    Py_INCREF(v);
                    ok = put_text_value(&b, v, fallback);
                    Py_DECREF(v);
                }
            }
        }
    }
    return finish(&b, ok, as_bytes);
}

/* --- Open Protocol JSON (sinks/openprotocol.py encode_value + json.dumps) ------------------ */

enum { M_PLAIN = 0, M_BASE64 = 1, M_ENUM = 2, M_GENERIC = 3 };

/* A JSON string, as json.dumps(ensure_ascii=False) writes it: " \\ \n \r \t \b \f escaped by
 * name, the other C0 controls as \u00XX, everything else (DEL, non-ASCII) as is. */
static int put_json_string(Buf *b, const char *p, Py_ssize_t n) {
    if (buf_reserve(b, (size_t)n * 6 + 2) < 0)
        return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *o++ = (char)c;
            continue;
        }
        *o++ = '\\';
        switch (c) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '\n': *o++ = 'n'; break;
        case '\r': *o++ = 'r'; break;
        case '\t': *o++ = 't'; break;
        case '\b': *o++ = 'b'; break;
        case '\f': *o++ = 'f'; break;
        default:
            memcpy(o, "u00", 3);
            o += 3;
            *o++ = HEX[c >> 4];
            *o++ = HEX[c & 15];
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    return 1;
}

/* bytes as the Open Protocol's VARBINARY text (openprotocol._escape_binary: printable ASCII as
 * is, \\ \n \r \t, the rest \xNN), in a JSON string (so every backslash doubles). */
static int put_json_binary(Buf *b, const unsigned char *p, Py_ssize_t n) {
    if (buf_reserve(b, (size_t)n * 6 + 2) < 0)
        return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        if (c == '\\') {
            memcpy(o, "\\\\\\\\", 4);
            o += 4;
        } else if (c == '"') {
            *o++ = '\\';
            *o++ = '"';
        } else if (c >= 0x20 && c < 0x7f) {
            *o++ = (char)c;
        } else {
            *o++ = '\\';
            *o++ = '\\';
            if (c == '\n' || c == '\r' || c == '\t') {
                *o++ = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            } else {
                *o++ = 'x';
                *o++ = HEX[c >> 4];
                *o++ = HEX[c & 15];
            }
        }
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    return 1;
}

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* "base64" (standard alphabet, padded, no newlines: base64.b64encode). */
static int put_base64(Buf *b, const unsigned char *p, Py_ssize_t n) {
    if (buf_reserve(b, (size_t)(n + 2) / 3 * 4 + 2) < 0)
        return -1;
    char *o = b->data + b->len;
    *o++ = '"';
    Py_ssize_t i = 0;
    for (; i + 3 <= n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8 | p[i + 2];
        *o++ = B64[v >> 18];
        *o++ = B64[v >> 12 & 63];
        *o++ = B64[v >> 6 & 63];
        *o++ = B64[v & 63];
    }
    if (n - i == 1) {
        unsigned v = (unsigned)p[i] << 16;
        *o++ = B64[v >> 18];
        *o++ = B64[v >> 12 & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (n - i == 2) {
        unsigned v = (unsigned)p[i] << 16 | (unsigned)p[i + 1] << 8;
        *o++ = B64[v >> 18];
        *o++ = B64[v >> 12 & 63];
        *o++ = B64[v >> 6 & 63];
        *o++ = '=';
    }
    *o++ = '"';
    b->len = (size_t)(o - b->data);
    return 1;
}

/* One value's JSON text in a column of the given mode; `extra` is its ENUM labels dict
 * (label -> number, or None), `fallback(value) -> JSON text` the reference for the rest. */
static int put_json_value(Buf *b, PyObject *v, int mode, PyObject *extra, PyObject *fallback) {
    PyTypeObject *t = Py_TYPE(v);
    if (v == Py_None)
        return buf_put(b, "null", 4) < 0 ? -1 : 1;
    if (mode == M_GENERIC)
        return put_fallback(b, fallback, v);
    if (t == &PyLong_Type)
        return put_int(b, v);
    if (t == &PyUnicode_Type) {
        if (mode == M_ENUM && extra != Py_None) {
            PyObject *number = PyDict_GetItemWithError(extra, v);
            if (number != NULL)
                return put_int(b, number);
            if (PyErr_Occurred())
                return -1;
        }
        const char *p;
        Py_ssize_t n;
        int ok = utf8_of(v, &p, &n);
        if (ok <= 0)
            return ok;
        return mode == M_BASE64 ? put_base64(b, (const unsigned char *)p, n)
                                : put_json_string(b, p, n);
    }
    if (mode == M_ENUM)
        return put_fallback(b, fallback, v);
    if (t == &PyFloat_Type)
        return put_float(b, v, 1);
    if ((PyObject *)t == decimal_type) {
        if (buf_ch(b, '"') < 0 || put_decimal(b, v) <= 0 || buf_ch(b, '"') < 0)
            return PyErr_Occurred() ? -1 : NO_UTF8;
        return 1;
    }
    if (is_naive_datetime(v)) {
        if (buf_ch(b, '"') < 0 || put_datetime(b, v, 1) < 0 || buf_ch(b, '"') < 0)
            return -1;
        return 1;
    }
    if (PyDate_CheckExact(v)) {
        if (buf_ch(b, '"') < 0 || put_date(b, v) < 0 || buf_ch(b, '"') < 0)
            return -1;
        return 1;
    }
    if (t == &PyBytes_Type) {
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(v);
        return mode == M_BASE64 ? put_base64(b, p, PyBytes_GET_SIZE(v))
                                : put_json_binary(b, p, PyBytes_GET_SIZE(v));
    }
    return put_fallback(b, fallback, v);
}

/* An image spec: (prefixes: tuple[str], modes: tuple[int], extras: tuple, fallbacks: tuple,
 * columns: tuple[list]). prefixes[j] is everything before column j's value ('"name":{...,"v":',
 * with the separating comma for j > 0); '}' follows each value. */
typedef struct {
    PyObject *prefixes, *extras, *fallbacks, *columns;
    int *modes;
    Py_ssize_t n;
} Image;

static int image_parse(PyObject *spec, Image *im, Py_ssize_t rows) {
    im->modes = NULL;
    if (spec == Py_None) {
        im->n = -1;
        return 0;
    }
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "an image is (prefixes, modes, extras, fallbacks, columns)");
        return -1;
    }
    for (int k = 0; k < 4; k++)
        if (!PyTuple_Check(PyTuple_GET_ITEM(spec, k))) {
            PyErr_SetString(PyExc_TypeError, "image parts must be tuples");
            return -1;
        }
    im->prefixes = PyTuple_GET_ITEM(spec, 0);
    PyObject *modes = PyTuple_GET_ITEM(spec, 1);
    im->extras = PyTuple_GET_ITEM(spec, 2);
    im->fallbacks = PyTuple_GET_ITEM(spec, 3);
    im->columns = PyTuple_GET_ITEM(spec, 4);
    im->n = PyTuple_GET_SIZE(im->prefixes);
    if (PyTuple_GET_SIZE(modes) != im->n || PyTuple_GET_SIZE(im->extras) != im->n
            || PyTuple_GET_SIZE(im->fallbacks) != im->n) {
        PyErr_SetString(PyExc_ValueError, "image parts differ in length");
        return -1;
    }
    if (check_columns(im->columns, im->n, rows) < 0)
        return -1;
    im->modes = PyMem_Malloc(sizeof(int) * (size_t)(im->n ? im->n : 1));
    if (im->modes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t j = 0; j < im->n; j++) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(im->prefixes, j))) {
            PyErr_SetString(PyExc_TypeError, "prefixes must be str");
            return -1;
        }
        long mode = PyLong_AsLong(PyTuple_GET_ITEM(modes, j));
        if (mode == -1 && PyErr_Occurred())
            return -1;
        if (mode < M_PLAIN || mode > M_GENERIC) {
            PyErr_SetString(PyExc_ValueError, "unknown column mode");
            return -1;
        }
        PyObject *extra = PyTuple_GET_ITEM(im->extras, j);
        if (mode == M_ENUM && extra != Py_None && !PyDict_Check(extra)) {
            PyErr_SetString(PyExc_TypeError, "an ENUM column's extra is a dict or None");
            return -1;
        }
        im->modes[j] = (int)mode;
    }
    return 0;
}

/* '{' the image's columns '}' at row r. */
static int put_image(Buf *b, const Image *im, Py_ssize_t r) {
    int ok = buf_ch(b, '{') < 0 ? -1 : 1;
    for (Py_ssize_t j = 0; j < im->n && ok > 0; j++) {
        ok = put_str(b, PyTuple_GET_ITEM(im->prefixes, j));
        if (ok <= 0)
            break;
        PyObject *col = PyTuple_GET_ITEM(im->columns, j);
        if (PyList_GET_SIZE(col) <= r) {
            PyErr_SetString(PyExc_ValueError, "a column list shrank");
            return -1;
        }
        PyObject *v = PyList_GET_ITEM(col, r);
        Py_INCREF(v);
        ok = put_json_value(b, v, im->modes[j], PyTuple_GET_ITEM(im->extras, j),
                            PyTuple_GET_ITEM(im->fallbacks, j));
        Py_DECREF(v);
        if (ok > 0 && buf_ch(b, '}') < 0)
            ok = -1;
    }
    if (ok > 0 && buf_ch(b, '}') < 0)
        ok = -1;
    return ok;
}

static PyObject *value_at(const Image *im, Py_ssize_t j, Py_ssize_t r) {
    PyObject *col = PyTuple_GET_ITEM(im->columns, j);
    if (PyList_GET_SIZE(col) <= r) {
        PyErr_SetString(PyExc_ValueError, "a column list shrank");
        return NULL;
    }
    return Py_NewRef(PyList_GET_ITEM(col, r));
}

/* Whether the key columns' encoded values differ between the images at row r: 1, 0, -1.
 * keys: tuple of (before position, after position, changed(before, after) -> bool); None,
 * int and (but in SET columns) str values compare here (their encoding is one-to-one), the
 * rest by `changed`. */
static int key_changed(PyObject *keys, const Image *before, const Image *after, Py_ssize_t r) {
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys); k++) {
        PyObject *key = PyTuple_GET_ITEM(keys, k);
        Py_ssize_t bj = PyLong_AsSsize_t(PyTuple_GET_ITEM(key, 0));
        Py_ssize_t aj = PyLong_AsSsize_t(PyTuple_GET_ITEM(key, 1));
        if (PyErr_Occurred())
            return -1;
        if (bj < 0 || bj >= before->n || aj < 0 || aj >= after->n) {
            PyErr_SetString(PyExc_IndexError, "key position out of the image");
            return -1;
        }
        PyObject *bv = value_at(before, bj, r);
        if (bv == NULL)
            return -1;
        PyObject *av = value_at(after, aj, r);
        if (av == NULL) {
            Py_DECREF(bv);
            return -1;
        }
        int changed;
        if (bv == Py_None || av == Py_None)
            changed = bv != av;
        else if (Py_TYPE(bv) == Py_TYPE(av)
                 && (PyLong_CheckExact(bv)
                     || (PyUnicode_CheckExact(bv) && after->modes[aj] != M_GENERIC)))
            changed = PyObject_RichCompareBool(bv, av, Py_NE);
        else {
            PyObject *res = PyObject_CallFunctionObjArgs(PyTuple_GET_ITEM(key, 2), bv, av,
                                                         NULL);
            changed = res == NULL ? -1 : PyObject_IsTrue(res);
            Py_XDECREF(res);
        }
        Py_DECREF(bv);
        Py_DECREF(av);
        if (changed != 0)
            return changed;
    }
    return 0;
}

/* json_lines(head, before, after, keys, rows) -> str | None
 *
 * One Open Protocol line per row (two for a key-changing update): head is
 * '{"key":{...},"value":' (the event's key, constant); before/after are image specs or None
 * (an INSERT has no before, a DELETE no after). An UPDATE is {"u":after,"p":before}, or, when
 * keys (a tuple, empty for none) says the key changed, {"d":before} then {"u":after}. */
static PyObject *json_lines(PyObject *self, PyObject *args) {
    PyObject *head, *before_spec, *after_spec, *keys;
    Py_ssize_t rows;
    if (!PyArg_ParseTuple(args, "UOOO!n:json_lines", &head, &before_spec, &after_spec,
                          &PyTuple_Type, &keys, &rows))
        return NULL;
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "rows must be >= 0");
        return NULL;
    }
    for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys); k++) {
        PyObject *key = PyTuple_GET_ITEM(keys, k);
        if (!PyTuple_Check(key) || PyTuple_GET_SIZE(key) != 3) {
            PyErr_SetString(PyExc_TypeError, "a key is (before pos, after pos, changed)");
            return NULL;
        }
    }
    Image before, after;
    if (image_parse(before_spec, &before, rows) < 0) {
        PyMem_Free(before.modes);
        return NULL;
    }
    if (image_parse(after_spec, &after, rows) < 0) {
        PyMem_Free(before.modes);
        PyMem_Free(after.modes);
        return NULL;
    }
    Buf b = {NULL, 0, 0};
    int ok = buf_start(&b) < 0 ? -1 : 1;
    if (before.n < 0 && after.n < 0) {
        PyErr_SetString(PyExc_ValueError, "no image");
        ok = -1;
    }
    if (PyTuple_GET_SIZE(keys) && (before.n < 0 || after.n < 0)) {
        PyErr_SetString(PyExc_ValueError, "keys need both images");
        ok = -1;
    }
    for (Py_ssize_t r = 0; r < rows && ok > 0; r++) {
        if (before.n >= 0 && after.n >= 0) {
            int changed = key_changed(keys, &before, &after, r);
            if (changed < 0) {
                ok = -1;
                break;
            }
            if (changed) {
                if ((ok = put_str(&b, head)) <= 0 || buf_put(&b, "{\"d\":", 5) < 0
                        || (ok = put_image(&b, &before, r)) <= 0
                        || buf_put(&b, "}}\n", 3) < 0 || (ok = put_str(&b, head)) <= 0
                        || buf_put(&b, "{\"u\":", 5) < 0
                        || (ok = put_image(&b, &after, r)) <= 0 || buf_put(&b, "}}\n", 3) < 0)
                    ok = ok > 0 ? -1 : ok;
                continue;
            }
            if ((ok = put_str(&b, head)) <= 0 || buf_put(&b, "{\"u\":", 5) < 0
                    || (ok = put_image(&b, &after, r)) <= 0 || buf_put(&b, ",\"p\":", 5) < 0
                    || (ok = put_image(&b, &before, r)) <= 0 || buf_put(&b, "}}\n", 3) < 0)
                ok = ok > 0 ? -1 : ok;
            continue;
        }
        const Image *im = after.n >= 0 ? &after : &before;
        if ((ok = put_str(&b, head)) <= 0
                || buf_put(&b, after.n >= 0 ? "{\"u\":" : "{\"d\":", 5) < 0
                || (ok = put_image(&b, im, r)) <= 0 || buf_put(&b, "}}\n", 3) < 0)
            ok = ok > 0 ? -1 : ok;
    }
    PyMem_Free(before.modes);
    PyMem_Free(after.modes);
    return finish(&b, ok, 0);
}

/* Every str is "ready" since Python 3.12 (PyUnicode_READY is deprecated there). */
static int ready(PyObject *text) {
#if PY_VERSION_HEX < 0x030C0000
    return PyUnicode_READY(text);
#else
    (void)text;
    return 0;
#endif
}

/* --- statement text (replica/commands/decode.py _statement) -------------------------------- */

/* Whether `word` is in p[0:n]: memchr (vectorized) for its rarest letter, at word[at], then a
 * compare around each hit: long text full of the common letters is scanned at memchr's speed. */
static int has_word(const unsigned char *p, size_t n, const char *word, size_t len,
                    size_t at) {
    const unsigned char *q = p + at, *end = p + n;
    while (q < end && (q = memchr(q, word[at], (size_t)(end - q))) != NULL) {
        if ((size_t)(end - q) >= len - at && memcmp(q - at, word, len) == 0)
            return 1;
        q++;
    }
    return 0;
}

/* The statement markers of ddl.SECRET_MARKERS (their one home), read when the module is
 * imported: lower-cased, each with the index of its rarest letter (the one memchr looks for). */
#define MAX_MARKERS 16
#define MAX_MARKER_LEN 32
static struct {
    char word[MAX_MARKER_LEN];
    size_t len, at;
} markers[MAX_MARKERS];
static int n_markers;
static PyObject *markers_tuple;  /* the tuple read, exposed as MARKERS for the test */

/* Letters from the most to the least frequent in text: a marker's rarest letter is searched. */
static const char FREQUENCY[] = "etaoinsrhldcumfpgwybvkxjqz";

static size_t rarest(const char *word, size_t len) {
    size_t best = 0;
    long best_rank = -1;
    for (size_t i = 0; i < len; i++) {
        const char *f = strchr(FREQUENCY, word[i]);
        long rank = (f != NULL && word[i] != '\0') ? (long)(f - FREQUENCY) : 100;
        if (rank > best_rank) {
            best_rank = rank;
            best = i;
        }
    }
    return best;
}

static int load_markers(void) {
    PyObject *ddl = PyImport_ImportModule("protocol.binlog.ddl");
    if (ddl == NULL) return -1;
    markers_tuple = PyObject_GetAttrString(ddl, "SECRET_MARKERS");
    Py_DECREF(ddl);
    if (markers_tuple == NULL) return -1;
    if (!PyTuple_Check(markers_tuple) || PyTuple_GET_SIZE(markers_tuple) > MAX_MARKERS) {
        PyErr_SetString(PyExc_ImportError, "ddl.SECRET_MARKERS: a tuple of at most 16 markers");
        return -1;
    }
    n_markers = (int)PyTuple_GET_SIZE(markers_tuple);
    for (int k = 0; k < n_markers; k++) {
        Py_ssize_t len;
        PyObject *item = PyTuple_GET_ITEM(markers_tuple, k);
        const char *word = PyUnicode_Check(item) ? PyUnicode_AsUTF8AndSize(item, &len) : NULL;
        if (word == NULL || len < 1 || len >= MAX_MARKER_LEN
            || PyUnicode_MAX_CHAR_VALUE(item) > 0x7f) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ImportError,
                            "ddl.SECRET_MARKERS: each marker is 1 to 31 ASCII characters");
            return -1;
        }
        for (Py_ssize_t i = 0; i < len; i++)
            markers[k].word[i] = (char)(word[i] | ((unsigned char)(word[i] - 'A') < 26u) << 5);
        markers[k].len = (size_t)len;
        markers[k].at = rarest(markers[k].word, markers[k].len);
    }
    return 0;
}

/* maybe_secret(text) -> bool: False when text is ASCII and holds none of ddl.SECRET_MARKERS in
 * any letter case (then ddl.redact_secrets would return it unchanged); True otherwise -- also
 * for any non-ASCII text, where str.upper()'s Unicode mappings (a long s, a ligature) can make
 * a marker, so ddl.redact_secrets must decide. A lower-cased copy, searched: a row event's
 * statement is as long as its rows. */
static PyObject *maybe_secret(PyObject *self, PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "text must be str");
        return NULL;
    }
    if (ready(text) < 0)
        return NULL;
    if (PyUnicode_MAX_CHAR_VALUE(text) > 0x7f)
        Py_RETURN_TRUE;
    const unsigned char *p = PyUnicode_1BYTE_DATA(text);
    size_t n = (size_t)PyUnicode_GET_LENGTH(text);
    unsigned char *lower = PyMem_Malloc(n ? n : 1);
    if (lower == NULL)
        return PyErr_NoMemory();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) { /* eight ASCII bytes at a time: +0x20 where 'A'..'Z' */
        uint64_t x, ones = 0x0101010101010101u;
        memcpy(&x, p + i, 8);
        uint64_t ge_a = (x + ones * (0x80 - 'A')) & ones * 0x80;    /* byte >= 'A' */
        uint64_t gt_z = (x + ones * (0x80 - 'Z' - 1)) & ones * 0x80; /* byte > 'Z' */
        x |= (ge_a & ~gt_z) >> 2;
        memcpy(lower + i, &x, 8);
    }
    for (; i < n; i++)
        lower[i] = (unsigned char)(p[i] | ((unsigned char)(p[i] - 'A') < 26u) << 5);
    int found = 0;
    for (int k = 0; k < n_markers && !found; k++)
        found = has_word(lower, n, markers[k].word, markers[k].len, markers[k].at);
    PyMem_Free(lower);
    return PyBool_FromLong(found);
}

/* one_line(text) -> str: \\ and the C0 controls and DEL escaped (\n \r \t \0, the rest
 * \xNN), nothing else; text itself when nothing needs it. */
static PyObject *one_line(PyObject *self, PyObject *text) {
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "text must be str");
        return NULL;
    }
    if (ready(text) < 0)
        return NULL;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), extra = 0;
#define COUNT(c) \
    if ((c) == '\\' || (c) == '\n' || (c) == '\r' || (c) == '\t' || (c) == 0) \
        extra += 1; \
    else if ((c) < 0x20 || (c) == 0x7f) \
        extra += 3;
    if (kind == PyUnicode_1BYTE_KIND) { /* the common case: eight bytes at a time */
        const Py_UCS1 *p = data;
        const uint64_t ones = 0x0101010101010101u, highs = ones * 0x80;
        Py_ssize_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t x, del, bsl;
            memcpy(&x, p + i, 8);
            del = x ^ ones * 0x7f;
            bsl = x ^ ones * '\\';
            /* any byte < 0x20, == 0x7f or == '\\' (exact as a whole, see "hasless") */
            if ((((x - ones * 0x20) & ~x) | ((del - ones) & ~del) | ((bsl - ones) & ~bsl))
                    & highs)
                for (int k = 0; k < 8; k++) {
                    COUNT(p[i + k])
                }
        }
        for (; i < n; i++) {
            COUNT(p[i])
        }
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            COUNT(c)
        }
    }
#undef COUNT
    if (extra == 0)
        return Py_NewRef(text);
    PyObject *out = PyUnicode_New(n + extra, PyUnicode_MAX_CHAR_VALUE(text));
    if (out == NULL)
        return NULL;
    int okind = PyUnicode_KIND(out);
    void *odata = PyUnicode_DATA(out);
    Py_ssize_t o = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c >= 0x20 && c != 0x7f && c != '\\') {
            PyUnicode_WRITE(okind, odata, o++, c);
            continue;
        }
        PyUnicode_WRITE(okind, odata, o++, '\\');
        switch (c) {
        case '\\': PyUnicode_WRITE(okind, odata, o++, '\\'); break;
        case '\n': PyUnicode_WRITE(okind, odata, o++, 'n'); break;
        case '\r': PyUnicode_WRITE(okind, odata, o++, 'r'); break;
        case '\t': PyUnicode_WRITE(okind, odata, o++, 't'); break;
        case 0: PyUnicode_WRITE(okind, odata, o++, '0'); break;
        default:
            PyUnicode_WRITE(okind, odata, o++, 'x');
            PyUnicode_WRITE(okind, odata, o++, (Py_UCS4)HEX[c >> 4]);
            PyUnicode_WRITE(okind, odata, o++, (Py_UCS4)HEX[c & 15]);
        }
    }
    return out;
}

static PyMethodDef methods[] = {
    {"maybe_secret", maybe_secret, METH_O,
     "maybe_secret(text) -> bool: whether ddl.redact_secrets could change the text"},
    {"one_line", one_line, METH_O,
     "one_line(text) -> str: statement text on one line (escapes as decode._one_line)"},
    {"text_lines", text_lines, METH_VARARGS,
     "text_lines(parts, images, rows, fallback, head='', as_bytes=False) -> str | bytes | None: "
     "binlake decode's text lines"},
    {"json_lines", json_lines, METH_VARARGS,
     "json_lines(head, before, after, keys, rows) -> str | None: Open Protocol lines"},
    {NULL, NULL, 0, NULL},
};

/* What the Python side checks before it uses this extension (protocol/native_switch.py):
 * bump it with the loader's ABI whenever what the module exports, or how it is called, changes */
#define ABI_VERSION 1

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_format",
    "Row images as text lines (binlake decode's formats), natively.", -1, methods,
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

PyMODINIT_FUNC PyInit__native_format(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL)
        return NULL;
    PyObject *dec = PyImport_ImportModule("decimal");
    if (dec == NULL)
        return NULL;
    decimal_type = PyObject_GetAttrString(dec, "Decimal");
    Py_DECREF(dec);
    if (decimal_type == NULL)
        return NULL;
    if (load_markers() < 0)
        return NULL;
    PyObject *m = create_module();
    if (m != NULL && PyModule_AddObjectRef(m, "MARKERS", markers_tuple) < 0)
        Py_CLEAR(m);
    return m;
}
