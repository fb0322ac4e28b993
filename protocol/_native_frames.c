/* The per-event framing of a binlog dump, in C: packets split into events, and each plain
 * event's header parsed, placed, CRC-checked and handed to its decoder.
 *
 * A stream of one-row transactions is four events per transaction (GTID, TABLE_MAP, ROWS,
 * XID) of ~100 bytes each. In Python, splitting the packets (protocol/packets.py
 * PacketCodec._payloads_one_pass) and the per-event loop of EventStream.feed_into (header
 * unpack, positions, CRC32, body slice, dispatch) were ~40% of the decode side's CPU: a dozen
 * bytecode lines per event. These two functions do the same work on the happy path only and
 * *stop* before anything else, which the Python code then takes over (and raises its
 * typed errors for): so every error is still the reference's, by construction.
 *
 *   split_payloads(buf, start, end, seq, check, limit, status) -> (payloads, pos, seq)
 *       The payloads (without their first byte) of the complete plain packets in
 *       buf[start:end] that begin with ``status``, as PacketCodec._payloads_one_pass takes
 *       them; ``pos`` and ``seq`` where the first packet not taken starts, and its expected
 *       sequence id. Never raises for bad bytes: it stops before them.
 *
 *   feed_plain(events, index, out, file, position, crc, verify, make_header, decoders, crc32,
 *              make_gtid, make_xid) -> (index, position, error)
 *       For events[index:], while each is a ``bytes`` whose type has a decoder in
 *       ``decoders`` (a 256-tuple of callables or None), is not artificial, holds its own
 *       ``event_size`` and (with ``crc`` and ``verify``) a valid CRC32 trailer: build its
 *       header (``make_header``, with the file and its start/end position as
 *       EventStream.feed_into computes them), call ``decoder(header, body)`` (body without
 *       the header and trailer) and append the result to ``out``; a plain MariaDB GTID and
 *       an XID are built in C instead (``make_gtid``/``make_xid``: their classes' positional
 *       makers, or None to call the decoders), as events.decode_mariadb_gtid and decode_xid
 *       build them. Returns where it stopped, the position after the last event taken and None; or, when a decoder raised, the
 *       index of that event, the position before it and the exception (not raised: the
 *       caller decides, knowing where it happened).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define HEADER_LEN 19
#define CHECKSUM_LEN 4
#define ARTIFICIAL_F 0x20
#define CRC32_RESIDUE 0x2144DF1CUL
#define MAX_CHUNK 0xFFFFFF
#define XID_EVENT 16
#define GTID_EVENT 162  /* MariaDB's */
#define GTID_HAS_MORE 0xC2  /* FL_GROUP_COMMIT_ID | FL_PREPARED_XA | FL_COMPLETED_XA */

static inline uint32_t
u32le(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static PyObject *
split_payloads(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "split_payloads(buf, start, end, seq, check, limit, status)");
        return NULL;
    }
    Py_ssize_t start = PyLong_AsSsize_t(args[1]);
    Py_ssize_t end = PyLong_AsSsize_t(args[2]);
    long seq = PyLong_AsLong(args[3]);
    int check = PyObject_IsTrue(args[4]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[5]);
    long status = PyLong_AsLong(args[6]);
    if (PyErr_Occurred() || check < 0)
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    if (start < 0 || end > view.len || start > end) {
        PyBuffer_Release(&view);
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, "split_payloads: start/end outside the buffer");
        return NULL;
    }
    if (limit > MAX_CHUNK - 1)
        limit = MAX_CHUNK - 1;
    const unsigned char *data = (const unsigned char *)view.buf;
    Py_ssize_t pos = start;
    seq &= 0xFF;
    while (end - pos >= 5) {
        uint32_t header = u32le(data + pos);
        Py_ssize_t length = header & 0xFFFFFF;
        long id = header >> 24;
        if ((check && id != seq) || length > limit || length > end - pos - 4 || length == 0
                || data[pos + 4] != status)
            break;
        PyObject *payload = PyBytes_FromStringAndSize((const char *)data + pos + 5,
                                                      length - 1);
        if (payload == NULL || PyList_Append(out, payload) < 0) {
            Py_XDECREF(payload);
            Py_DECREF(out);
            PyBuffer_Release(&view);
            return NULL;
        }
        Py_DECREF(payload);
        seq = (id + 1) & 0xFF;
        pos += 4 + length;
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("(Nnl)", out, pos, seq);
}

/* The last value made into an int, kept to be handed out again: consecutive events share
 * their timestamp and server id, and an event starts where the one before it ended, so most
 * header fields need no new int (fewer to make now and to free with the event). */
typedef struct {
    unsigned long long value;
    PyObject *obj;
} LastInt;

static PyObject *
last_int(LastInt *last, unsigned long long value)
{
    if (last->obj == NULL || last->value != value) {
        PyObject *obj = PyLong_FromUnsignedLongLong(value);
        if (obj == NULL)
            return NULL;
        Py_XSETREF(last->obj, obj);
        last->value = value;
    }
    Py_INCREF(last->obj);
    return last->obj;
}

static PyObject *
feed_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "feed_plain(events, index, out, file, position, crc, "
                        "verify, make_header, decoders, crc32, make_gtid, make_xid)");
        return NULL;
    }
    PyObject *events = args[0], *out = args[2], *file = args[3];
    PyObject *make_header = args[7], *decoders = args[8], *crc32 = args[9];
    PyObject *make_gtid = args[10], *make_xid = args[11];
    if (!PyList_CheckExact(events) || !PyList_Check(out) || !PyTuple_CheckExact(decoders)
            || PyTuple_GET_SIZE(decoders) != 256) {
        PyErr_SetString(PyExc_TypeError,
                        "feed_plain: events and out lists, decoders a 256-tuple");
        return NULL;
    }
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    unsigned long long position = PyLong_AsUnsignedLongLong(args[4]);
    int crc = PyObject_IsTrue(args[5]);
    int verify = PyObject_IsTrue(args[6]);
    if (PyErr_Occurred() || crc < 0 || verify < 0)
        return NULL;
    if (index < 0)
        index = 0;
    LastInt timestamps = {0, NULL}, servers = {0, NULL}, positions = {0, NULL};
    PyObject *result = NULL;
    while (index < PyList_GET_SIZE(events)) {
        PyObject *event = PyList_GET_ITEM(events, index);
        if (!PyBytes_CheckExact(event))
            break;
        Py_ssize_t size = PyBytes_GET_SIZE(event);
        if (size < HEADER_LEN)
            break;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(event);
        unsigned type_code = p[4];
        PyObject *decoder = PyTuple_GET_ITEM(decoders, type_code);
        uint32_t event_size = u32le(p + 9);
        uint32_t log_pos = u32le(p + 13);
        unsigned flags = (unsigned)p[17] | (unsigned)p[18] << 8;
        if (decoder == Py_None || flags & ARTIFICIAL_F || (Py_ssize_t)event_size != size)
            break;
        Py_ssize_t body_end = size;
        if (crc) {
            if (size < HEADER_LEN + CHECKSUM_LEN)
                break;  /* the Python path says what is wrong (or slices it as it does) */
            if (verify) {
                PyObject *sum = PyObject_CallOneArg(crc32, event);
                if (sum == NULL)
                    goto done;
                unsigned long value = PyLong_AsUnsignedLong(sum);
                Py_DECREF(sum);
                if (value == (unsigned long)-1 && PyErr_Occurred())
                    goto done;
                if (value != CRC32_RESIDUE)
                    break;
            }
            body_end = size - CHECKSUM_LEN;
        }
        unsigned long long start, following;
        if (log_pos >= event_size) {
            start = log_pos - event_size;
            following = log_pos;
        }
        else {
            start = position;
            following = start + event_size;
        }
        PyObject *fields[9];
        fields[0] = last_int(&timestamps, u32le(p));
        fields[1] = PyLong_FromUnsignedLong(type_code);
        fields[2] = last_int(&servers, u32le(p + 5));
        fields[3] = PyLong_FromUnsignedLong(event_size);
        fields[6] = file;
        Py_INCREF(file);
        fields[7] = last_int(&positions, start);  /* the end of the event before, mostly */
        fields[8] = last_int(&positions, following);
        fields[4] = log_pos == following ? last_int(&positions, following)
                                         : PyLong_FromUnsignedLong(log_pos);
        fields[5] = PyLong_FromUnsignedLong(flags);
        PyObject *header = NULL;
        int ok = 1;
        for (int i = 0; i < 9; i++)
            ok = ok && fields[i] != NULL;
        if (ok)
            header = PyObject_Vectorcall(make_header, fields, 9, NULL);
        for (int i = 0; i < 9; i++)
            Py_XDECREF(fields[i]);
        if (header == NULL)
            goto done;
        const unsigned char *b = p + HEADER_LEN;
        Py_ssize_t body_len = body_end - HEADER_LEN;
        PyObject *decoded;
        if (type_code == GTID_EVENT && make_gtid != Py_None && body_len >= 13 && body_len <= 19
                && !(b[12] & GTID_HAS_MORE)) {
            /* events.decode_mariadb_gtid's plain GTID: seq_no u64, domain u32, flags u8 */
            PyObject *gtid[11] = {
                header, PyLong_FromUnsignedLong(u32le(b + 8)), last_int(&servers, u32le(p + 5)),
                PyLong_FromUnsignedLongLong((unsigned long long)u32le(b)
                                            | (unsigned long long)u32le(b + 4) << 32),
                PyLong_FromUnsignedLong(b[12]), Py_None, Py_None, PyLong_FromLong(0), Py_None,
                Py_None, Py_None};
            decoded = NULL;
            if (gtid[1] != NULL && gtid[2] != NULL && gtid[3] != NULL && gtid[4] != NULL
                    && gtid[7] != NULL)
                decoded = PyObject_Vectorcall(make_gtid, gtid, 11, NULL);
            Py_XDECREF(gtid[1]);
            Py_XDECREF(gtid[2]);
            Py_XDECREF(gtid[3]);
            Py_XDECREF(gtid[4]);
            Py_XDECREF(gtid[7]);
        }
        else if (type_code == XID_EVENT && make_xid != Py_None && body_len >= 8) {
            /* events.decode_xid: the u64 xid */
            PyObject *xid[2] = {header, PyLong_FromUnsignedLongLong(
                (unsigned long long)u32le(b) | (unsigned long long)u32le(b + 4) << 32)};
            decoded = xid[1] == NULL ? NULL : PyObject_Vectorcall(make_xid, xid, 2, NULL);
            Py_XDECREF(xid[1]);
        }
        else {
            PyObject *body = PyBytes_FromStringAndSize((const char *)b, body_len);
            if (body == NULL) {
                Py_DECREF(header);
                goto done;
            }
            PyObject *call[2] = {header, body};
            decoded = PyObject_Vectorcall(decoder, call, 2, NULL);
            Py_DECREF(body);
        }
        Py_DECREF(header);
        if (decoded == NULL) {  /* handed back with where it happened, not raised */
            PyObject *type, *value, *traceback;
            PyErr_Fetch(&type, &value, &traceback);
            PyErr_NormalizeException(&type, &value, &traceback);
            if (value == NULL) {  /* cannot happen: an exception always has a value */
                Py_XDECREF(type);
                Py_XDECREF(traceback);
                PyErr_SetString(PyExc_SystemError, "feed_plain: a decoder failed silently");
                goto done;
            }
            if (traceback != NULL) {
                PyException_SetTraceback(value, traceback);
                Py_DECREF(traceback);
            }
            Py_XDECREF(type);
            result = Py_BuildValue("(nKN)", index, position, value);
            goto done;
        }
        int failed = PyList_Append(out, decoded);
        Py_DECREF(decoded);
        if (failed < 0)
            goto done;
        position = following;
        index++;
    }
    result = Py_BuildValue("(nKO)", index, position, Py_None);
done:
    Py_XDECREF(timestamps.obj);
    Py_XDECREF(servers.obj);
    Py_XDECREF(positions.obj);
    return result;
}

/* end_positions(events, index, pos) -> (index, pos): for events[index:], while each is a
 * ``bytes`` of at least a header that is neither a ROTATE, a FORMAT_DESCRIPTION nor a
 * heartbeat, the end position the session's tracker follows (log_pos when non-zero, else
 * the previous end plus the size unless the event is artificial). */
static PyObject *
end_positions(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyList_CheckExact(args[0])) {
        PyErr_SetString(PyExc_TypeError, "end_positions(events: list, index, pos)");
        return NULL;
    }
    PyObject *events = args[0];
    Py_ssize_t index = PyLong_AsSsize_t(args[1]);
    unsigned long long pos = PyLong_AsUnsignedLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    if (index < 0)
        index = 0;
    for (; index < PyList_GET_SIZE(events); index++) {
        PyObject *event = PyList_GET_ITEM(events, index);
        if (!PyBytes_CheckExact(event) || PyBytes_GET_SIZE(event) < HEADER_LEN)
            break;
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(event);
        unsigned type_code = p[4];
        if (type_code == 4 || type_code == 15 || type_code == 27 || type_code == 41)
            break;  /* ROTATE, FORMAT_DESCRIPTION, HEARTBEAT, HEARTBEAT_V2 */
        uint32_t log_pos = u32le(p + 13);
        if (log_pos)
            pos = log_pos;
        else if (!(p[17] & ARTIFICIAL_F))
            pos += u32le(p + 9);
    }
    return Py_BuildValue("(nK)", index, pos);
}

static PyMethodDef methods[] = {
    {"end_positions", (PyCFunction)(void (*)(void))end_positions, METH_FASTCALL,
     "end_positions(events, index, pos) -> (index, pos)"},
    {"split_payloads", (PyCFunction)(void (*)(void))split_payloads, METH_FASTCALL,
     "split_payloads(buf, start, end, seq, check, limit, status) -> (payloads, pos, seq)"},
    {"feed_plain", (PyCFunction)(void (*)(void))feed_plain, METH_FASTCALL,
     "feed_plain(events, index, out, file, position, crc, verify, make_header, decoders, "
     "crc32, make_gtid, make_xid) -> (index, position, error)"},
    {NULL, NULL, 0, NULL},
};

/* What the Python side checks before it uses this extension (protocol/native_switch.py):
 * bump it with the loader's ABI whenever what the module exports, or how it is called, changes */
#define ABI_VERSION 1

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_frames",
    "A binlog dump's packets split and its plain events framed, in C.", -1, methods,
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

PyMODINIT_FUNC
PyInit__native_frames(void)
{
    return create_module();
}
