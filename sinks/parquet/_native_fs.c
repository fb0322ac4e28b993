/* Directories and empty files made in one call that holds no GIL (sinks/parquet/trees.py).
 *
 * The staged trees' thread makes a new table's directories and files while the main thread
 * decodes. From Python each mkdir or open is a call that gives up the interpreter lock and must
 * win it back from a busy main thread (up to the switch interval, 5 ms, each time): the thread
 * made 221 of 4,000 tables' worth before the flush. Here a whole batch costs one such wait.
 *
 * make(dirs, files): mkdir each of dirs (in order, mode 0777 less the umask), then create (or
 * truncate) each of files empty (0666 less the umask). Stops at the first failure and raises
 * it as os.mkdir/os.open would (OSError subclass by errno, naming the path).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

static int
to_paths(PyObject *seq, PyObject **owned, const char ***paths, Py_ssize_t *count)
{
    PyObject *fast = PySequence_Fast(seq, "expected a list of paths");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject *encoded = PyList_New(n);
    const char **out = PyMem_Calloc(n ? (size_t)n : 1, sizeof(char *));
    if (encoded == NULL || out == NULL) {
        Py_DECREF(fast);
        Py_XDECREF(encoded);
        PyMem_Free(out);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *bytes = NULL;
        if (!PyUnicode_FSConverter(PySequence_Fast_GET_ITEM(fast, i), &bytes)) {
            Py_DECREF(fast);
            Py_DECREF(encoded);
            PyMem_Free(out);
            return -1;
        }
        PyList_SET_ITEM(encoded, i, bytes);
        out[i] = PyBytes_AS_STRING(bytes);
    }
    Py_DECREF(fast);
    *owned = encoded;
    *paths = out;
    *count = n;
    return 0;
}

static PyObject *
make(PyObject *self, PyObject *args)
{
    PyObject *dirs_arg, *files_arg;
    if (!PyArg_ParseTuple(args, "OO:make", &dirs_arg, &files_arg))
        return NULL;
    PyObject *dirs_owned = NULL, *files_owned = NULL;
    const char **dirs = NULL, **files = NULL;
    Py_ssize_t n_dirs = 0, n_files = 0;
    if (to_paths(dirs_arg, &dirs_owned, &dirs, &n_dirs) < 0)
        return NULL;
    if (to_paths(files_arg, &files_owned, &files, &n_files) < 0) {
        Py_DECREF(dirs_owned);
        PyMem_Free(dirs);
        return NULL;
    }
    int error = 0;
    PyObject *failed_in = NULL;
    Py_ssize_t failed_at = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n_dirs; i++) {
        if (mkdir(dirs[i], 0777) != 0) {
            error = errno;
            failed_in = dirs_arg;
            failed_at = i;
            break;
        }
    }
    for (Py_ssize_t i = 0; !error && i < n_files; i++) {
        int fd = open(files[i], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (fd < 0 || close(fd) != 0) {
            error = errno;
            failed_in = files_arg;
            failed_at = i;
        }
    }
    Py_END_ALLOW_THREADS
    Py_DECREF(dirs_owned);
    Py_DECREF(files_owned);
    PyMem_Free(dirs);
    PyMem_Free(files);
    if (error) {
        PyObject *path = PySequence_GetItem(failed_in, failed_at);
        errno = error;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path);
        Py_XDECREF(path);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"make", make, METH_VARARGS,
     "make(dirs, files): mkdir each of dirs, then create each of files empty, without the GIL."},
    {NULL, NULL, 0, NULL},
};

/* What the Python side checks before it uses this extension (protocol/native_switch.py):
 * bump it with the loader's ABI whenever what the module exports, or how it is called, changes */
#define ABI_VERSION 1

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native_fs",
    "Directories and empty files made in one call that holds no GIL.", -1, methods,
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
PyInit__native_fs(void)
{
    return create_module();
}
