/* Build instances of a frozen, slotted dataclass from positional values, in C.
 *
 * The binlog stream builds one EventHeader (nine fields) per event. Through the class, even
 * with protocol/frozen.py's fast __init__, that is a call of the type, a Python frame and a
 * descriptor call per field, five times per one-row transaction. A maker stores the
 * values straight into the instance's slots, as the generated __init__ would.
 *
 *     make = maker(EventHeader, ("timestamp", ..., "next_position"))
 *     header = make(timestamp, ..., next_position)   # == EventHeader(timestamp, ...)
 *
 * Only for classes whose __init__ does nothing but store its arguments (protocol/frozen.py
 * checks that before asking for a maker); the instance is a plain one of the class, allocated
 * by its own tp_alloc (tracked by the GC as the class says), immutable as ever.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define MAX_FIELDS 32

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t count;
    Py_ssize_t offsets[MAX_FIELDS];
} Maker;

static PyObject *
maker_call(PyObject *self_obj, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Maker *self = (Maker *)self_obj;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        PyErr_Format(PyExc_TypeError, "%s maker takes positional arguments only",
                     self->cls->tp_name);
        return NULL;
    }
    if (n != self->count) {
        PyErr_Format(PyExc_TypeError, "%s maker takes %zd arguments, got %zd",
                     self->cls->tp_name, self->count, n);
        return NULL;
    }
    PyObject *obj = self->cls->tp_alloc(self->cls, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject **slot = (PyObject **)((char *)obj + self->offsets[i]);
        Py_INCREF(args[i]);
        Py_XSETREF(*slot, args[i]);
    }
    return obj;
}

static void
maker_dealloc(PyObject *self_obj)
{
    Maker *self = (Maker *)self_obj;
    Py_XDECREF(self->cls);
    PyObject_Free(self);
}

static PyTypeObject MakerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "protocol._native_slots.Maker",
    .tp_basicsize = sizeof(Maker),
    .tp_dealloc = maker_dealloc,
    .tp_vectorcall_offset = offsetof(Maker, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Builds instances of one slotted class from positional values.",
};

/* maker(cls, names): a Maker storing its arguments into the slots ``names`` of ``cls``. */
static PyObject *
make_maker(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "maker(cls, names): a class and a tuple of names");
        return NULL;
    }
    PyTypeObject *cls = (PyTypeObject *)args[0];
    PyObject *names = args[1];
    Py_ssize_t count = PyTuple_GET_SIZE(names);
    if (count > MAX_FIELDS) {
        PyErr_Format(PyExc_ValueError, "maker: at most %d fields", MAX_FIELDS);
        return NULL;
    }
    Maker *self = PyObject_New(Maker, &MakerType);
    if (self == NULL)
        return NULL;
    self->vectorcall = maker_call;
    self->count = count;
    Py_INCREF(cls);
    self->cls = cls;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *descr = PyObject_GetAttr((PyObject *)cls, PyTuple_GET_ITEM(names, i));
        if (descr == NULL) {
            Py_DECREF(self);
            return NULL;
        }
        int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type);
        PyMemberDef *member = ok ? ((PyMemberDescrObject *)descr)->d_member : NULL;
        ok = ok && member->type == T_OBJECT_EX && !(member->flags & READONLY)
             && member->offset >= (Py_ssize_t)sizeof(PyObject)
             && member->offset + (Py_ssize_t)sizeof(PyObject *) <= cls->tp_basicsize
             && PyType_IsSubtype(cls, ((PyMemberDescrObject *)descr)->d_common.d_type);
        Py_DECREF(descr);
        if (!ok) {
            PyErr_Format(PyExc_TypeError, "maker: %s.%R is not an object slot", cls->tp_name,
                         PyTuple_GET_ITEM(names, i));
            Py_DECREF(self);
            return NULL;
        }
        self->offsets[i] = member->offset;
    }
    return (PyObject *)self;
}

static PyMethodDef methods[] = {
    {"maker", (PyCFunction)(void (*)(void))make_maker, METH_FASTCALL,
     "maker(cls, names): a callable building cls instances from positional slot values."},
    {NULL, NULL, 0, NULL},
};

/* What the Python side checks before it uses this extension (protocol/native_switch.py):
 * bump it with the loader's ABI whenever what the module exports, or how it is called, changes */
#define ABI_VERSION 1

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_slots",
    "Instances of slotted classes built from positional values.", -1, methods,
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
PyInit__native_slots(void)
{
    if (PyType_Ready(&MakerType) < 0)
        return NULL;
    return create_module();
}
