/* The launch fast path's per-call function in C (tilekit.rt._fastlaunch).
 *
 * ``fastpath.Dispatcher`` owns the profile, the key -> entry table and the generated
 * Python functions; a ``Launcher`` is what ``kern[grid](...)`` calls instead of the
 * generated ``_tk_call`` when the profile is one it serves. Per call it does what
 * ``_tk_call`` does, in the same order and with the same Python objects:
 *
 *   bind the arguments -> check that the globals the trace read hold the same objects
 *   (``guards``) -> check their types -> read the tensors (data_ptr(), shape, stride(),
 *   dtype, get_device()) -> build the same key tuple -> look it up in the
 *   Dispatcher's own table -> resolve the grid -> find the stream -> write the launch
 *   configuration and the argument slots into the entry's buffer, as its
 *   ``struct.pack_into`` would, byte for byte -> one cuLaunchKernelEx.
 *
 * Three outcomes besides a hit:
 *   - decline: anything this code does not handle itself (an odd call shape, a value
 *     that is not a plain int where one is read, a key not in the table, ...) before
 *     any side effect: the generated ``_tk_call`` gets the call unchanged and decides
 *     (it hits or misses exactly as without this module);
 *   - miss: after a table hit, what ``_tk_call`` would also miss on (a grid out of the
 *     device's limits, a value that does not fit its slot, a driver error): the
 *     dispatcher's ``_fallback`` (Launch._miss, then the slow path) runs, nothing having
 *     been queued;
 *   - an empty grid: nothing runs, None is returned.
 *
 * cuLaunchKernelEx arrives as an address (no libcuda link): the driver's symbol, or a
 * test's ctypes callback. The GIL is held throughout, the launch included: two threads
 * never write one entry's buffer at once (the Python path releases it in ctypes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define MAX_PARAMS 64
#define MAX_TENSORS 16
#define MAX_RANK 8
#define MAX_FACTS 64
#define CONFIG_BYTES 56 /* fastpath.CONFIG_BYTES: cuda.h's CUlaunchConfig */
#define ENTRY_ITEMS 11  /* fastpath.make_entry's tuple; the last item is an Entry */
#define I32_MAX_SPAN 2147483647LL

#if PY_VERSION_HEX >= 0x030B0000
#define PACK2(x, p) PyFloat_Pack2((x), (char *)(p), 1)
#define PACK4(x, p) PyFloat_Pack4((x), (char *)(p), 1)
#define PACK8(x, p) PyFloat_Pack8((x), (char *)(p), 1)
#else
#define PACK2(x, p) _PyFloat_Pack2((x), (unsigned char *)(p), 1)
#define PACK4(x, p) _PyFloat_Pack4((x), (unsigned char *)(p), 1)
#define PACK8(x, p) _PyFloat_Pack8((x), (unsigned char *)(p), 1)
#endif

/* CUresult cuLaunchKernelEx(const CUlaunchConfig *, CUfunction, void **, void **) */
typedef int (*launch_ex_t)(void *config, void *function, void **params, void **extra);

/* A parameter's kind (fastpath.ArgPlan): a tensor, an unannotated int (whether it fits
 * in int32 is keyed), another scalar, a bfloat16 scalar, a constexpr (keyed by value). */
enum { K_TENSOR = 'T', K_INT = 'I', K_SCALAR = 'S', K_BF16 = 'B', K_CONST = 'C' };

/* Outcomes of a stage of the call. */
enum { OK = 0, DECLINE = 1, MISS = 2, EMPTY = 3, ERROR = -1 };

static PyObject *s_data_ptr, *s_shape, *s_stride, *s_dtype, *s_get_device, *s_dim,
    *s_stream, *s_interpret, *s_check;

/* An exception raised by a Python call on the way: an ``Exception`` is the outcome
 * ``soft`` (the generated code's ``except Exception``), anything else (KeyboardInterrupt)
 * propagates. */
static int soft_error(int soft) {
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return soft;
    }
    return ERROR;
}

/* --- packing, as struct's '<' formats do --------------------------------------------- */

static int code_size(char code) {
    switch (code) {
    case '?': case 'b': case 'B': return 1;
    case 'h': case 'H': case 'e': return 2;
    case 'i': case 'I': case 'f': return 4;
    case 'q': case 'Q': case 'd': return 8;
    default: return 0;
    }
}

static int code_signed(char code) {
    return code == 'b' || code == 'h' || code == 'i' || code == 'q';
}

static int code_unsigned(char code) {
    return code == 'B' || code == 'H' || code == 'I' || code == 'Q';
}

static void put_le(unsigned char *dst, uint64_t v, int size) {
    for (int i = 0; i < size; i++) {
        dst[i] = (unsigned char)(v >> (8 * i));
    }
}

/* An integer into an integer slot: 0, or -1 when it does not fit (struct.error). */
static int pack_i64(char code, int64_t v, unsigned char *dst) {
    int size = code_size(code);
    if (code_signed(code)) {
        if (size < 8) {
            int64_t lim = (int64_t)1 << (8 * size - 1);
            if (v < -lim || v >= lim) return -1;
        }
    } else {
        if (v < 0 || (size < 8 && v >= ((int64_t)1 << (8 * size)))) return -1;
    }
    put_le(dst, (uint64_t)v, size);
    return 0;
}

static int pack_u64(char code, uint64_t v, unsigned char *dst) {
    if (v > (uint64_t)INT64_MAX) {
        if (code != 'Q') return -1;
        put_le(dst, v, 8);
        return 0;
    }
    return pack_i64(code, (int64_t)v, dst);
}

/* Any object into a slot, with struct's conversions (``__index__`` for the integer
 * codes, ``PyFloat_AsDouble`` and the same rounding and overflow rules for e/f/d,
 * truth for '?'). 0, or -1 with an exception set. */
static int pack_object(char code, PyObject *v, unsigned char *dst) {
    if (code == '?') {
        int t = PyObject_IsTrue(v);
        if (t < 0) return -1;
        dst[0] = (unsigned char)t;
        return 0;
    }
    if (code == 'e' || code == 'f' || code == 'd') {
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) return -1;
        return code == 'e' ? PACK2(x, dst) : code == 'f' ? PACK4(x, dst) : PACK8(x, dst);
    }
    PyObject *n = PyLong_Check(v) ? (Py_INCREF(v), v) : PyNumber_Index(v);
    if (n == NULL) return -1;
    int rc;
    if (code_signed(code)) {
        long long x = PyLong_AsLongLong(n);
        rc = (x == -1 && PyErr_Occurred()) ? -1 : pack_i64(code, (int64_t)x, dst);
    } else {
        unsigned long long x = PyLong_AsUnsignedLongLong(n);
        rc = (x == (unsigned long long)-1 && PyErr_Occurred()) ? -1
                                                                : pack_u64(code, (uint64_t)x, dst);
    }
    Py_DECREF(n);
    if (rc < 0 && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_OverflowError, "argument out of range for its slot");
    }
    return rc;
}

/* --- Entry: what a hit needs of one loaded kernel, in C ------------------------------- */

typedef struct {
    PyObject_HEAD
    Py_buffer buffer;   /* the launch configuration, then the argument slots */
    Py_buffer params;   /* the void*[] of kernelParams */
    void *function;     /* CUfunction */
    uint32_t threads, shared;
    long long limits[3]; /* the device's grid limits */
    Py_ssize_t nvalues;  /* the per-call slots (all but the status word) */
    char *codes;         /* their struct codes */
    Py_ssize_t *offsets; /* their offsets in ``buffer`` */
} Entry;

static void Entry_dealloc(Entry *self) {
    if (self->buffer.obj) PyBuffer_Release(&self->buffer);
    if (self->params.obj) PyBuffer_Release(&self->params);
    PyMem_Free(self->codes);
    PyMem_Free(self->offsets);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Entry_init(Entry *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"buffer", "function", "params", "threads", "shared", "limits",
                             "codes", "offsets", NULL};
    PyObject *buffer, *function, *params, *limits, *offsets;
    unsigned long long threads, shared;
    const char *codes;
    Py_ssize_t ncodes;
    if (self->buffer.obj != NULL || self->codes != NULL) {
        PyErr_SetString(PyExc_TypeError, "an Entry is initialized once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOKKOy#O:Entry", kwlist, &buffer,
                                     &function, &params, &threads, &shared, &limits, &codes,
                                     &ncodes, &offsets)) {
        return -1;
    }
    if (threads > UINT32_MAX || shared > UINT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "threads and shared bytes must fit in 32 bits");
        return -1;
    }
    self->threads = (uint32_t)threads;
    self->shared = (uint32_t)shared;
    self->function = function == Py_None ? NULL : PyLong_AsVoidPtr(function);
    if (PyErr_Occurred()) return -1;
    if (!PyArg_ParseTuple(limits, "LLL", &self->limits[0], &self->limits[1],
                          &self->limits[2])) {
        return -1;
    }
    if (PyObject_GetBuffer(buffer, &self->buffer, PyBUF_WRITABLE) < 0) return -1;
    if (PyObject_GetBuffer(params, &self->params, PyBUF_SIMPLE) < 0) return -1;
    if (!PyTuple_Check(offsets) || PyTuple_GET_SIZE(offsets) != ncodes) {
        PyErr_SetString(PyExc_ValueError, "one offset per code");
        return -1;
    }
    if (self->buffer.len < CONFIG_BYTES) {
        PyErr_SetString(PyExc_ValueError, "the buffer is shorter than a launch configuration");
        return -1;
    }
    self->codes = PyMem_Malloc(ncodes + 1);
    self->offsets = PyMem_Malloc(sizeof(Py_ssize_t) * (ncodes + 1));
    if (self->codes == NULL || self->offsets == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->nvalues = ncodes;
    for (Py_ssize_t k = 0; k < ncodes; k++) {
        Py_ssize_t off = PyLong_AsSsize_t(PyTuple_GET_ITEM(offsets, k));
        if (off == -1 && PyErr_Occurred()) return -1;
        int size = code_size(codes[k]);
        if (size == 0 || off < CONFIG_BYTES || off + size > self->buffer.len) {
            PyErr_Format(PyExc_ValueError, "slot %zd: code %c at offset %zd does not fit "
                         "the buffer", k, codes[k], off);
            return -1;
        }
        self->codes[k] = codes[k];
        self->offsets[k] = off;
    }
    return 0;
}

static PyTypeObject EntryType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilekit.rt._fastlaunch.Entry",
    .tp_doc = "What a native hit needs of one loaded kernel: its buffer, function, "
              "parameter array, block, shared bytes, grid limits, and the struct code and "
              "offset of each per-call slot.",
    .tp_basicsize = sizeof(Entry),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Entry_init,
    .tp_dealloc = (destructor)Entry_dealloc,
};

/* --- Launcher: the per-call function of one profile ------------------------------------ */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int nparams, nposonly, npositional, ntensors, nfacts, stream_option;
    char kinds[MAX_PARAMS];
    int ranks[MAX_PARAMS];
    int tensor_param[MAX_TENSORS]; /* the parameter of tensor j */
    int fact_tensor[MAX_FACTS], fact_dim[MAX_FACTS];
    long long fact_n[MAX_FACTS];
    Py_ssize_t key_len, nvalues;
    PyObject *names;    /* tuple of the parameters' names */
    PyObject *types;    /* tuple: each parameter's exact type (None for a constexpr) */
    PyObject *defaults; /* tuple: each parameter's default, or ``unset`` */
    PyObject *table, *row_masks, *overrides;
    PyObject *python_call, *fallback, *current_stream, *stream_handle, *grid3, *bf16,
        *check_status, *unset, *launch_obj;
    /* The kernel's globals_guards: (a dict, a str, the object it holds) or (a cell, None,
     * the object it holds), checked by identity before anything else is read. */
    PyObject *guards;
    launch_ex_t launch;
    /* The last key found and its entry, kept while the table keeps its size: a call whose
     * key items are the same objects skips hashing and lookup. The table only grows
     * (Dispatcher.add never replaces an entry); Dispatcher.cover, which empties it, calls
     * ``forget`` first. */
    PyObject *memo_key, *memo_entry;
    Py_ssize_t memo_size;
    unsigned long long hits, declines, misses, empties;
} Launcher;

/* What one call has read so far (released by ``call_release``). */
typedef struct {
    PyObject *ptr; /* data_ptr() */
    PyObject *shape, *strides;
    uint64_t p;
    int64_t n[MAX_RANK], s[MAX_RANK];
} TensorRead;

typedef struct {
    PyObject *vals[MAX_PARAMS]; /* borrowed: the bound arguments */
    PyObject *stream;           /* borrowed: stream=, or NULL */
    TensorRead t[MAX_TENSORS];
    int nread;
    PyObject *key;  /* the key tuple */
    PyObject *dev0; /* borrowed from the key: the first tensor's get_device() */
} Call;

static void call_release(Call *c) {
    for (int j = 0; j < c->nread; j++) {
        Py_XDECREF(c->t[j].ptr);
        Py_XDECREF(c->t[j].shape);
        Py_XDECREF(c->t[j].strides);
    }
    c->nread = 0;
    Py_CLEAR(c->key);
}

static int same_name(PyObject *a, PyObject *b) {
    return a == b || (PyUnicode_Check(a) && PyUnicode_Check(b) && PyUnicode_Compare(a, b) == 0);
}

/* Bind as the generated function's signature does (``_tk_grid, <posonly>, /, <the
 * others>, *_tk_more, <kwonly>, [stream=,] **_tk_kw``). What would land in the
 * catch-alls, a parameter given twice or one left unset declines: ``_tk_call`` then
 * misses or raises as it always did. */
static int bind(Launcher *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                Call *c) {
    if (nargs > self->npositional) return DECLINE;
    for (int i = 0; i < self->nparams; i++) c->vals[i] = i < nargs ? args[i] : NULL;
    c->stream = NULL;
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int found = -1;
        for (int i = 0; i < self->nparams && found < 0; i++) {
            if (PyTuple_GET_ITEM(self->names, i) == name) found = i;
        }
        for (int i = 0; i < self->nparams && found < 0; i++) {
            if (same_name(PyTuple_GET_ITEM(self->names, i), name)) found = i;
        }
        if (found < 0) {
            if (self->stream_option && same_name(name, s_stream)) {
                c->stream = args[nargs + k];
                continue;
            }
            return DECLINE;
        }
        if (found < self->nposonly || c->vals[found] != NULL) return DECLINE;
        c->vals[found] = args[nargs + k];
    }
    for (int i = 0; i < self->nparams; i++) {
        if (c->vals[i] == NULL) {
            PyObject *d = PyTuple_GET_ITEM(self->defaults, i);
            if (d == self->unset) return DECLINE;
            c->vals[i] = d;
        }
    }
    return OK;
}

/* ``knobs.override(interpret=True)`` or ``check=True`` is active: the fast path is off
   (``fastpath.FAST_PATH_OFF``). */
static int fast_path_off(Launcher *self) {
    if (PyDict_GET_SIZE(self->overrides) == 0) return OK;
    PyObject *keys[] = {s_interpret, s_check};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        PyObject *v = PyDict_GetItemWithError(self->overrides, keys[i]);
        if (v == NULL) {
            if (PyErr_Occurred()) return soft_error(DECLINE);
            continue;
        }
        int t = PyObject_IsTrue(v);
        if (t < 0) return soft_error(DECLINE);
        if (t) return DECLINE;
    }
    return OK;
}

/* Each global the kernel's trace read still holds the same object: a dict lookup (the
 * name's hash is cached) or a cell read per guard, compared by identity. A change
 * declines: the generated call misses on it too, and the slow path traces again. */
static int guards_hold(Launcher *self) {
    Py_ssize_t n = PyTuple_GET_SIZE(self->guards);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *g = PyTuple_GET_ITEM(self->guards, i);
        PyObject *where = PyTuple_GET_ITEM(g, 0), *name = PyTuple_GET_ITEM(g, 1);
        PyObject *now;
        if (name == Py_None) {
            now = PyCell_GET(where);
        } else {
            now = PyDict_GetItemWithError(where, name);
            if (now == NULL && PyErr_Occurred()) return soft_error(DECLINE);
        }
        if (now != PyTuple_GET_ITEM(g, 2)) return DECLINE;
    }
    return OK;
}

/* A tuple of ``rank`` plain ints into int64s; DECLINE for anything else. */
static int read_ints(PyObject *tup, int rank, int64_t *out) {
    if (tup == NULL) return soft_error(DECLINE);
    if (!PyTuple_Check(tup) || PyTuple_GET_SIZE(tup) != rank) return DECLINE;
    for (int a = 0; a < rank; a++) {
        PyObject *item = PyTuple_GET_ITEM(tup, a);
        int overflow;
        if (!PyLong_CheckExact(item)) return DECLINE;
        long long v = PyLong_AsLongLongAndOverflow(item, &overflow);
        if (overflow || (v == -1 && PyErr_Occurred())) return soft_error(DECLINE);
        out[a] = (int64_t)v;
    }
    return OK;
}

static PyObject *method0(PyObject *obj, PyObject *name) {
    return PyObject_VectorcallMethod(name, &obj, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* One tensor's facts into the key, as ``fastpath._source`` writes them: dtype, the
 * pointer's residue mod 16, the device, then (rank > 0) whether the span fits in int32,
 * the unit last stride, and (rank > 1) the 16-byte row strides. */
static int read_tensor(Launcher *self, Call *c, int j, Py_ssize_t *pos) {
    PyObject *x = c->vals[self->tensor_param[j]];
    int rank = self->ranks[self->tensor_param[j]];
    TensorRead *r = &c->t[j];
    r->ptr = r->shape = r->strides = NULL;
    c->nread = j + 1;
    r->ptr = method0(x, s_data_ptr);
    if (r->ptr == NULL) return soft_error(DECLINE);
    if (!PyLong_CheckExact(r->ptr)) return DECLINE;
    r->p = PyLong_AsUnsignedLongLong(r->ptr);
    if (r->p == (uint64_t)-1 && PyErr_Occurred()) return soft_error(DECLINE);
    long long mask = 0;
    PyObject *dtype;
    int rc;
    if (rank) {
        r->shape = PyObject_GetAttr(x, s_shape);
        if ((rc = read_ints(r->shape, rank, r->n)) != OK) return rc;
        r->strides = method0(x, s_stride);
        if ((rc = read_ints(r->strides, rank, r->s)) != OK) return rc;
    } else {
        PyObject *dim = method0(x, s_dim);
        if (dim == NULL) return soft_error(DECLINE);
        int t = PyObject_IsTrue(dim);
        Py_DECREF(dim);
        if (t < 0) return soft_error(DECLINE);
        if (t) return DECLINE;
    }
    dtype = PyObject_GetAttr(x, s_dtype);
    if (dtype == NULL) return soft_error(DECLINE);
    PyTuple_SET_ITEM(c->key, (*pos)++, dtype);
    if (rank > 1) { /* the dtype's row-stride mask (fastpath.note_dtype) */
        PyObject *m = PyDict_GetItemWithError(self->row_masks, dtype);
        if (m == NULL) return PyErr_Occurred() ? soft_error(DECLINE) : DECLINE;
        if (!PyLong_CheckExact(m)) return DECLINE;
        mask = PyLong_AsLongLong(m);
        if (mask == -1 && PyErr_Occurred()) return soft_error(DECLINE);
    }
    PyObject *residue = PyLong_FromLong((long)(r->p & 15));
    if (residue == NULL) return ERROR;
    PyTuple_SET_ITEM(c->key, (*pos)++, residue);
    PyObject *dev = method0(x, s_get_device);
    if (dev == NULL) return soft_error(DECLINE);
    PyTuple_SET_ITEM(c->key, (*pos)++, dev);
    if (j == 0) c->dev0 = dev;
    if (rank) {
        int64_t span = 0, extent, term;
        for (int a = 0; a < rank; a++) { /* an overflow here: the Python key decides */
            if (__builtin_sub_overflow(r->n[a], 1, &extent) ||
                __builtin_mul_overflow(extent, r->s[a], &term) ||
                __builtin_add_overflow(span, term, &span)) {
                return DECLINE;
            }
        }
        PyObject *b = PyBool_FromLong(span < I32_MAX_SPAN);
        PyTuple_SET_ITEM(c->key, (*pos)++, b);
        int last = rank - 1;
        b = PyBool_FromLong(r->n[last] == 1 || r->s[last] == 1);
        PyTuple_SET_ITEM(c->key, (*pos)++, b);
        if (rank > 1) {
            int rows = 1;
            for (int a = 0; a < last; a++) {
                rows = rows && (r->n[a] == 1 || !(r->s[a] & mask));
            }
            PyTuple_SET_ITEM(c->key, (*pos)++, PyBool_FromLong(rows));
        }
    }
    return OK;
}

/* The key of a bound call, exactly ``_tk_key``'s tuple, in ``c->key``. */
static int compute_key(Launcher *self, Call *c) {
    for (int i = 0; i < self->nparams; i++) {
        if (self->kinds[i] != K_CONST &&
            (PyObject *)Py_TYPE(c->vals[i]) != PyTuple_GET_ITEM(self->types, i)) {
            return DECLINE;
        }
    }
    c->key = PyTuple_New(self->key_len);
    if (c->key == NULL) return ERROR;
    Py_ssize_t pos = 0;
    for (int j = 0; j < self->ntensors; j++) {
        int rc = read_tensor(self, c, j, &pos);
        if (rc != OK) return rc;
    }
    for (int i = 0; i < self->nparams; i++) {
        PyObject *v = c->vals[i];
        if (self->kinds[i] == K_INT) { /* fits in int32 */
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred()) return soft_error(DECLINE);
            PyTuple_SET_ITEM(c->key, pos++,
                             PyBool_FromLong(!overflow && x >= INT32_MIN && x <= INT32_MAX));
        } else if (self->kinds[i] == K_CONST) {
            Py_INCREF(v);
            PyTuple_SET_ITEM(c->key, pos++, v);
        }
    }
    for (int f = 0; f < self->nfacts; f++) { /* the size facts (Dispatcher.cover) */
        int64_t size = c->t[self->fact_tensor[f]].n[self->fact_dim[f]];
        long long n = self->fact_n[f];
        int holds = size > 0 && ((n & (n - 1)) == 0 ? !(size & (n - 1)) : size % n == 0);
        PyTuple_SET_ITEM(c->key, pos++, PyBool_FromLong(holds));
    }
    return OK;
}

/* The grid as three dimensions within the limits (``_grid3``'s rules): an int or a tuple
 * of 1 to 3 plain ints here, anything else (a function of the arguments, a list, numpy
 * ints) through ``_grid3`` itself. */
static int resolve_grid(Launcher *self, Call *c, PyObject *grid, PyObject *entry_tuple,
                        Entry *e, uint32_t dims[3]) {
    PyObject *items[3];
    Py_ssize_t n = 0;
    if (PyLong_CheckExact(grid)) {
        items[n++] = grid;
    } else if (PyTuple_CheckExact(grid) && PyTuple_GET_SIZE(grid) >= 1 &&
               PyTuple_GET_SIZE(grid) <= 3) {
        for (n = 0; n < PyTuple_GET_SIZE(grid); n++) {
            items[n] = PyTuple_GET_ITEM(grid, n);
            if (!PyLong_CheckExact(items[n])) break;
        }
        if (n < PyTuple_GET_SIZE(grid)) n = 0;
    }
    if (n > 0) {
        long long v[3] = {1, 1, 1};
        int big[3] = {0, 0, 0}, empty = 0;
        for (Py_ssize_t d = 0; d < n; d++) {
            int overflow;
            v[d] = PyLong_AsLongLongAndOverflow(items[d], &overflow);
            if (v[d] == -1 && PyErr_Occurred()) return soft_error(MISS);
            if (overflow < 0 || (!overflow && v[d] < 0)) return MISS;
            big[d] = overflow > 0;
            empty = empty || (!big[d] && v[d] == 0);
        }
        if (empty) return EMPTY;
        for (int d = 0; d < 3; d++) {
            if (big[d] || v[d] > e->limits[d] || v[d] > UINT32_MAX) return MISS;
            dims[d] = (uint32_t)v[d];
        }
        return OK;
    }
    PyObject *meta = PyDict_New();
    if (meta == NULL) return ERROR;
    for (int i = 0; i < self->nparams; i++) {
        if (PyDict_SetItem(meta, PyTuple_GET_ITEM(self->names, i), c->vals[i]) < 0) {
            Py_DECREF(meta);
            return ERROR;
        }
    }
    PyObject *argv[5] = {grid, meta, PyTuple_GET_ITEM(entry_tuple, 6),
                         PyTuple_GET_ITEM(entry_tuple, 7), PyTuple_GET_ITEM(entry_tuple, 8)};
    PyObject *g = PyObject_Vectorcall(self->grid3, argv, 5, NULL);
    Py_DECREF(meta);
    if (g == NULL) return soft_error(MISS);
    if (g == Py_None) {
        Py_DECREF(g);
        return EMPTY;
    }
    int rc = OK;
    if (!PyTuple_Check(g) || PyTuple_GET_SIZE(g) != 3) {
        rc = MISS;
    } else {
        for (int d = 0; d < 3 && rc == OK; d++) {
            long long v = PyLong_AsLongLong(PyTuple_GET_ITEM(g, d));
            if (v == -1 && PyErr_Occurred()) rc = soft_error(MISS);
            else if (v < 0 || v > UINT32_MAX) rc = MISS;
            else dims[d] = (uint32_t)v;
        }
    }
    Py_DECREF(g);
    return rc;
}

/* The stream: ``stream=`` (an int as is, another object through ``stream_handle``), else
 * torch's current stream on the first tensor's device. A new reference in ``*out``. */
static int find_stream(Launcher *self, Call *c, PyObject **out) {
    PyObject *st = c->stream;
    if (st != NULL && st != Py_None) {
        if (PyLong_CheckExact(st)) {
            Py_INCREF(st);
            *out = st;
        } else {
            PyObject *argv[2] = {st, Py_None};
            *out = PyObject_Vectorcall(self->stream_handle, argv, 2, NULL);
        }
    } else {
        *out = PyObject_Vectorcall(self->current_stream, &c->dev0, 1, NULL);
    }
    return *out == NULL ? soft_error(MISS) : OK;
}

/* The launch configuration and every per-call slot, as the entry's pack_into writes
 * them: grid, block (threads, 1, 1), shared bytes, 4 zero bytes, the stream, 16 zero
 * bytes (attrs = NULL, numAttrs = 0); then per tensor its pointer, sizes and strides,
 * then the scalars (bfloat16 ones as ``_bf16_bits``' 16 bits). */
static int pack(Launcher *self, Call *c, Entry *e, const uint32_t dims[3], PyObject *stream) {
    unsigned char *buf = e->buffer.buf;
    put_le(buf + 0, dims[0], 4);
    put_le(buf + 4, dims[1], 4);
    put_le(buf + 8, dims[2], 4);
    put_le(buf + 12, e->threads, 4);
    put_le(buf + 16, 1, 4);
    put_le(buf + 20, 1, 4);
    put_le(buf + 24, e->shared, 4);
    memset(buf + 28, 0, 4);
    if (pack_object('Q', stream, buf + 32) < 0) return soft_error(MISS);
    memset(buf + 40, 0, 16);
    Py_ssize_t k = 0;
    for (int j = 0; j < self->ntensors; j++) {
        TensorRead *r = &c->t[j];
        int rank = self->ranks[self->tensor_param[j]];
        for (int v = 0; v < 1 + 2 * rank; v++, k++) {
            char code = e->codes[k];
            unsigned char *dst = buf + e->offsets[k];
            int rc;
            if (!code_signed(code) && !code_unsigned(code)) { /* not an int slot: as struct */
                PyObject *obj = v == 0 ? r->ptr : PyTuple_GET_ITEM(
                    v <= rank ? r->shape : r->strides, (v - 1) % rank);
                if (pack_object(code, obj, dst) < 0) return soft_error(MISS);
                continue;
            }
            if (v == 0) rc = pack_u64(code, r->p, dst);
            else rc = pack_i64(code, v <= rank ? r->n[v - 1] : r->s[v - 1 - rank], dst);
            if (rc < 0) return MISS;
        }
    }
    for (int i = 0; i < self->nparams; i++) {
        char kind = self->kinds[i];
        if (kind != K_INT && kind != K_SCALAR && kind != K_BF16) continue;
        unsigned char *dst = buf + e->offsets[k];
        char code = e->codes[k++];
        if (kind == K_BF16) {
            PyObject *bits = PyObject_Vectorcall(self->bf16, &c->vals[i], 1, NULL);
            if (bits == NULL) return soft_error(MISS);
            int rc = pack_object(code, bits, dst);
            Py_DECREF(bits);
            if (rc < 0) return soft_error(MISS);
        } else if (pack_object(code, c->vals[i], dst) < 0) {
            return soft_error(MISS);
        }
    }
    return OK;
}

/* After a table hit: grid, stream, pack, launch, then the status word of a kernel with
 * tk.device_assert. */
static int launch_entry(Launcher *self, Call *c, PyObject *grid, PyObject *entry_tuple) {
    Entry *e = (Entry *)PyTuple_GET_ITEM(entry_tuple, ENTRY_ITEMS - 1);
    if (e->nvalues != self->nvalues) return DECLINE;
    uint32_t dims[3];
    int rc = resolve_grid(self, c, grid, entry_tuple, e, dims);
    if (rc != OK) return rc;
    PyObject *stream;
    if ((rc = find_stream(self, c, &stream)) != OK) return rc;
    rc = pack(self, c, e, dims, stream);
    if (rc == OK) {
        if (self->launch(e->buffer.buf, e->function, (void **)e->params.buf, NULL) != 0) {
            rc = MISS; /* nothing was queued: the slow path retries and names the error */
        } else {
            self->hits++;
        }
    }
    if (rc == OK) {
        PyObject *check = PyTuple_GET_ITEM(entry_tuple, 9);
        if (check != Py_None) { /* tk.device_assert: read the status word */
            PyObject *argv[3] = {check, stream, Py_None};
            PyObject *res = PyObject_Vectorcall(self->check_status, argv, 3, NULL);
            if (res == NULL) rc = ERROR;
            Py_XDECREF(res);
        }
    }
    Py_DECREF(stream);
    return rc;
}

/* Whether two keys hold the same objects, item by item (then they are equal). */
static int same_items(PyObject *a, PyObject *b) {
    Py_ssize_t n = PyTuple_GET_SIZE(a);
    if (PyTuple_GET_SIZE(b) != n) return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyTuple_GET_ITEM(a, i) != PyTuple_GET_ITEM(b, i)) return 0;
    }
    return 1;
}

/* The table's entry for the key, a new reference, if a native one. */
static int lookup(Launcher *self, Call *c, PyObject **entry_tuple) {
    Py_ssize_t size = PyDict_GET_SIZE(self->table);
    if (self->memo_key != NULL && size == self->memo_size &&
        same_items(c->key, self->memo_key)) {
        Py_INCREF(self->memo_entry);
        *entry_tuple = self->memo_entry;
        return OK;
    }
    PyObject *t = PyDict_GetItemWithError(self->table, c->key);
    if (t == NULL) return PyErr_Occurred() ? soft_error(DECLINE) : DECLINE;
    if (!PyTuple_CheckExact(t) || PyTuple_GET_SIZE(t) != ENTRY_ITEMS ||
        !PyObject_TypeCheck(PyTuple_GET_ITEM(t, ENTRY_ITEMS - 1), &EntryType)) {
        return DECLINE;
    }
    Py_INCREF(c->key);
    Py_XSETREF(self->memo_key, c->key);
    Py_INCREF(t);
    Py_XSETREF(self->memo_entry, t);
    self->memo_size = size;
    Py_INCREF(t);
    *entry_tuple = t;
    return OK;
}

static PyObject *Launcher_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf,
                                     PyObject *kwnames) {
    Launcher *self = (Launcher *)op;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Call c;
    c.nread = 0;
    c.key = c.dev0 = c.stream = NULL;
    PyObject *entry_tuple = NULL;
    int rc = nargs >= 1 ? bind(self, args + 1, nargs - 1, kwnames, &c) : DECLINE;
    if (rc == OK) rc = fast_path_off(self);
    if (rc == OK) rc = guards_hold(self);
    if (rc == OK) rc = compute_key(self, &c);
    if (rc == OK) rc = lookup(self, &c, &entry_tuple);
    if (rc == OK) rc = launch_entry(self, &c, args[0], entry_tuple);
    Py_XDECREF(entry_tuple);
    PyObject *values = NULL;
    if (rc == MISS) {
        values = PyTuple_New(self->nparams);
        if (values == NULL) rc = ERROR;
        for (int i = 0; values != NULL && i < self->nparams; i++) {
            Py_INCREF(c.vals[i]);
            PyTuple_SET_ITEM(values, i, c.vals[i]);
        }
    }
    call_release(&c);
    switch (rc) {
    case OK:
        Py_RETURN_NONE;
    case EMPTY:
        self->empties++;
        Py_RETURN_NONE;
    case DECLINE:
        self->declines++;
        return PyObject_Vectorcall(self->python_call, args, nargsf, kwnames);
    case MISS: {
        self->misses++;
        PyObject *more = PyTuple_New(0), *extra = PyDict_New(), *res = NULL;
        if (more != NULL && extra != NULL) {
            PyObject *st = c.stream != NULL ? c.stream : self->unset;
            PyObject *argv[5] = {args[0], values, more, st, extra};
            res = PyObject_Vectorcall(self->fallback, argv, 5, NULL);
        }
        Py_XDECREF(more);
        Py_XDECREF(extra);
        Py_DECREF(values);
        return res;
    }
    default:
        return NULL;
    }
}

/* key(*args, **kwargs): the key the launcher computes for a call (without the grid), or
 * None where it would decline; for tests, against ``Dispatcher.key_fn``. */
static PyObject *Launcher_key(Launcher *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames) {
    Call c;
    c.nread = 0;
    c.key = c.dev0 = c.stream = NULL;
    int rc = bind(self, args, nargs, kwnames, &c);
    if (rc == OK) rc = compute_key(self, &c);
    PyObject *key = c.key;
    Py_XINCREF(key);
    call_release(&c);
    if (rc == ERROR) {
        Py_XDECREF(key);
        return NULL;
    }
    if (rc != OK) {
        Py_XDECREF(key);
        Py_RETURN_NONE;
    }
    return key;
}

static PyObject *Launcher_forget(Launcher *self, PyObject *unused) {
    Py_CLEAR(self->memo_key);
    Py_CLEAR(self->memo_entry);
    Py_RETURN_NONE;
}

static PyObject *Launcher_stats(Launcher *self, void *closure) {
    return Py_BuildValue("{sKsKsKsK}", "hits", self->hits, "declines", self->declines,
                         "misses", self->misses, "empty", self->empties);
}

static PyObject *Launcher_unusable(PyObject *op, PyObject *const *args, size_t nargsf,
                                   PyObject *kwnames) {
    PyErr_SetString(PyExc_TypeError, "this Launcher was not initialized (or was cleared)");
    return NULL;
}

static int Launcher_traverse(Launcher *self, visitproc visit, void *arg) {
    Py_VISIT(self->names);
    Py_VISIT(self->types);
    Py_VISIT(self->defaults);
    Py_VISIT(self->table);
    Py_VISIT(self->row_masks);
    Py_VISIT(self->overrides);
    Py_VISIT(self->python_call);
    Py_VISIT(self->fallback);
    Py_VISIT(self->current_stream);
    Py_VISIT(self->stream_handle);
    Py_VISIT(self->grid3);
    Py_VISIT(self->bf16);
    Py_VISIT(self->check_status);
    Py_VISIT(self->unset);
    Py_VISIT(self->launch_obj);
    Py_VISIT(self->guards);
    Py_VISIT(self->memo_key);
    Py_VISIT(self->memo_entry);
    return 0;
}

static int Launcher_clear(Launcher *self) {
    Py_CLEAR(self->names);
    Py_CLEAR(self->types);
    Py_CLEAR(self->defaults);
    Py_CLEAR(self->table);
    Py_CLEAR(self->row_masks);
    Py_CLEAR(self->overrides);
    Py_CLEAR(self->python_call);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->current_stream);
    Py_CLEAR(self->stream_handle);
    Py_CLEAR(self->grid3);
    Py_CLEAR(self->bf16);
    Py_CLEAR(self->check_status);
    Py_CLEAR(self->unset);
    Py_CLEAR(self->launch_obj);
    Py_CLEAR(self->guards);
    Py_CLEAR(self->memo_key);
    Py_CLEAR(self->memo_entry);
    self->launch = NULL;
    self->vectorcall = Launcher_unusable;
    return 0;
}

static void Launcher_dealloc(Launcher *self) {
    PyObject_GC_UnTrack(self);
    Launcher_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Launcher_init(Launcher *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"names", "kinds", "types", "ranks", "defaults", "nposonly",
                             "npositional", "stream_option", "facts", "table", "row_masks",
                             "overrides", "python_call", "fallback", "current_stream",
                             "stream_handle", "grid3", "bf16", "check_status", "unset",
                             "launch", "launch_address", "guards", NULL};
    PyObject *names, *types, *ranks, *defaults, *facts, *table, *row_masks, *overrides,
        *python_call, *fallback, *current_stream, *stream_handle, *grid3, *bf16,
        *check_status, *unset, *launch_obj, *address, *guards = NULL;
    const char *kinds;
    Py_ssize_t nkinds;
    int nposonly, npositional, stream_option;
    if (self->names != NULL) {
        PyErr_SetString(PyExc_TypeError, "a Launcher is initialized once");
        return -1;
    }
    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, "O!s#O!O!O!iipO!O!O!O!OOOOOOOOOO|O!:Launcher", kwlist, &PyTuple_Type,
            &names, &kinds, &nkinds, &PyTuple_Type, &types, &PyTuple_Type, &ranks,
            &PyTuple_Type, &defaults, &nposonly, &npositional, &stream_option, &PyTuple_Type,
            &facts, &PyDict_Type, &table, &PyDict_Type, &row_masks, &PyDict_Type, &overrides,
            &python_call, &fallback, &current_stream, &stream_handle, &grid3, &bf16,
            &check_status, &unset, &launch_obj, &address, &PyTuple_Type, &guards)) {
        return -1;
    }
    for (Py_ssize_t i = 0; guards != NULL && i < PyTuple_GET_SIZE(guards); i++) {
        PyObject *g = PyTuple_GET_ITEM(guards, i);
        int ok = PyTuple_CheckExact(g) && PyTuple_GET_SIZE(g) == 3;
        if (ok && PyTuple_GET_ITEM(g, 1) == Py_None) {
            ok = PyCell_Check(PyTuple_GET_ITEM(g, 0));
        } else if (ok) {
            ok = PyDict_Check(PyTuple_GET_ITEM(g, 0)) &&
                 PyUnicode_CheckExact(PyTuple_GET_ITEM(g, 1));
        }
        if (!ok) {
            PyErr_SetString(PyExc_TypeError,
                            "a guard is (dict, str, object) or (cell, None, object)");
            return -1;
        }
    }
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    if (n > MAX_PARAMS || nkinds != n || PyTuple_GET_SIZE(types) != n ||
        PyTuple_GET_SIZE(ranks) != n || PyTuple_GET_SIZE(defaults) != n ||
        PyTuple_GET_SIZE(facts) > MAX_FACTS || nposonly < 0 || nposonly > npositional ||
        npositional > n) {
        PyErr_SetString(PyExc_ValueError, "a profile beyond the native launcher's limits");
        return -1;
    }
    self->nparams = (int)n;
    self->nposonly = nposonly;
    self->npositional = npositional;
    self->stream_option = stream_option;
    self->ntensors = 0;
    self->key_len = 0;
    self->nvalues = 0;
    int tensor_of[MAX_PARAMS];
    for (int i = 0; i < n; i++) {
        char kind = kinds[i];
        long rank = PyLong_AsLong(PyTuple_GET_ITEM(ranks, i));
        if (rank == -1 && PyErr_Occurred()) return -1;
        if (!PyUnicode_Check(PyTuple_GET_ITEM(names, i))) {
            PyErr_SetString(PyExc_TypeError, "parameter names are str");
            return -1;
        }
        self->kinds[i] = kind;
        self->ranks[i] = (int)rank;
        tensor_of[i] = -1;
        if (kind == K_TENSOR) {
            if (self->ntensors == MAX_TENSORS || rank < 0 || rank > MAX_RANK) {
                PyErr_SetString(PyExc_ValueError, "a profile beyond the native launcher's "
                                "limits (tensors, rank)");
                return -1;
            }
            tensor_of[i] = self->ntensors;
            self->tensor_param[self->ntensors++] = i;
            self->key_len += rank == 0 ? 3 : rank == 1 ? 5 : 6;
            self->nvalues += 1 + 2 * rank;
        } else if (kind == K_INT || kind == K_CONST) {
            self->key_len += 1;
            self->nvalues += kind == K_INT;
        } else if (kind == K_SCALAR || kind == K_BF16) {
            self->nvalues += 1;
        } else {
            PyErr_Format(PyExc_ValueError, "unknown parameter kind %c", kind);
            return -1;
        }
        if (kind != K_CONST && !PyType_Check(PyTuple_GET_ITEM(types, i))) {
            PyErr_SetString(PyExc_TypeError, "each non-constexpr parameter has a type");
            return -1;
        }
    }
    if (self->ntensors == 0) {
        PyErr_SetString(PyExc_ValueError, "a profile without tensors");
        return -1;
    }
    self->nfacts = (int)PyTuple_GET_SIZE(facts);
    for (int f = 0; f < self->nfacts; f++) {
        int param, dim;
        long long size;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(facts, f), "iiL", &param, &dim, &size)) {
            return -1;
        }
        if (param < 0 || param >= n || tensor_of[param] < 0 || dim < 0 ||
            dim >= self->ranks[param] || size <= 0) {
            PyErr_SetString(PyExc_ValueError, "a size fact names a tensor's dimension");
            return -1;
        }
        self->fact_tensor[f] = tensor_of[param];
        self->fact_dim[f] = dim;
        self->fact_n[f] = size;
    }
    self->key_len += self->nfacts;
    void *fn = PyLong_AsVoidPtr(address);
    if (fn == NULL) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "no launch function");
        return -1;
    }
    self->launch = (launch_ex_t)fn;
#define KEEP(field) (Py_INCREF(field), self->field = field)
    KEEP(names);
    KEEP(types);
    KEEP(defaults);
    KEEP(table);
    KEEP(row_masks);
    KEEP(overrides);
    KEEP(python_call);
    KEEP(fallback);
    KEEP(current_stream);
    KEEP(stream_handle);
    KEEP(grid3);
    KEEP(bf16);
    KEEP(check_status);
    KEEP(unset);
    KEEP(launch_obj);
#undef KEEP
    if (guards != NULL) {
        Py_INCREF(guards);
        self->guards = guards;
    } else if ((self->guards = PyTuple_New(0)) == NULL) {
        return -1;
    }
    self->vectorcall = Launcher_vectorcall;
    return 0;
}

static PyObject *Launcher_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    Launcher *self = (Launcher *)type->tp_alloc(type, 0);
    if (self != NULL) self->vectorcall = Launcher_unusable;
    return (PyObject *)self;
}

static PyMethodDef Launcher_methods[] = {
    {"key", (PyCFunction)(void (*)(void))Launcher_key, METH_FASTCALL | METH_KEYWORDS,
     "key(*args, **kwargs): the key of a call (no grid), or None where the launcher "
     "declines; for tests."},
    {"forget", (PyCFunction)Launcher_forget, METH_NOARGS,
     "Forget the last key and entry (the table is about to lose entries)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Launcher_getset[] = {
    {"stats", (getter)Launcher_stats, NULL,
     "Calls so far: hits (launched here), declines (handed to the generated function), "
     "misses (handed to the slow path), empty grids (nothing to run).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilekit.rt._fastlaunch.Launcher",
    .tp_doc = "The fast path's per-call function of one profile, in C: "
              "launcher(grid, *args, **kwargs) as the generated _tk_call.",
    .tp_basicsize = sizeof(Launcher),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Launcher, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = Launcher_new,
    .tp_init = (initproc)Launcher_init,
    .tp_dealloc = (destructor)Launcher_dealloc,
    .tp_traverse = (traverseproc)Launcher_traverse,
    .tp_clear = (inquiry)Launcher_clear,
    .tp_methods = Launcher_methods,
    .tp_getset = Launcher_getset,
};

static struct PyModuleDef fastlaunch_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tilekit.rt._fastlaunch",
    .m_doc = "The launch fast path's per-call function in C (see tilekit/rt/fastpath.py).",
    .m_size = -1,
};

PyMODINIT_FUNC PyInit__fastlaunch(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_data_ptr, "data_ptr"}, {&s_shape, "shape"}, {&s_stride, "stride"},
        {&s_dtype, "dtype"}, {&s_get_device, "get_device"}, {&s_dim, "dim"},
        {&s_stream, "stream"}, {&s_interpret, "TILEKIT_INTERPRET"},
        {&s_check, "TILEKIT_CHECK"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (*names[i].slot == NULL) {
            *names[i].slot = PyUnicode_InternFromString(names[i].text);
            if (*names[i].slot == NULL) return NULL;
        }
    }
    if (PyType_Ready(&EntryType) < 0 || PyType_Ready(&LauncherType) < 0) return NULL;
    PyObject *m = PyModule_Create(&fastlaunch_module);
    if (m == NULL) return NULL;
    Py_INCREF(&EntryType);
    Py_INCREF(&LauncherType);
    if (PyModule_AddObject(m, "Entry", (PyObject *)&EntryType) < 0 ||
        PyModule_AddObject(m, "Launcher", (PyObject *)&LauncherType) < 0 ||
        PyModule_AddIntConstant(m, "CONFIG_BYTES", CONFIG_BYTES) < 0 ||
        PyModule_AddIntConstant(m, "ENTRY_ITEMS", ENTRY_ITEMS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
