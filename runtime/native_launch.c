/* tilejit's native re-launch path: one C call checks that a launch repeats the last one's
 * specialisation (the arguments' kinds, dtypes, shapes, strides, alignment and device, the
 * constexprs, num_warps and the compile switches in the environment), reads the pointers and
 * scalars, packs the kernel's parameters and calls cuLaunchKernel (or cuLaunchKernelEx for a
 * dependent launch) through function pointers taken from libcuda by ctypes.
 *
 * runtime/native.py compiles this file once per machine and Python (into the cache folder)
 * and builds one Launcher per kernel, grid and specialisation; a call answers True (launched)
 * or False (something differs: the caller takes the Python path, which knows every rule).
 * Nothing here decides a specialisation: the guard only repeats one the Python path made. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                         unsigned, void *, void **, void **);
typedef int (*launch_ex_fn)(const void *, void *, void **, void **);
typedef int (*ctx_get_fn)(void **);
typedef int (*ctx_set_fn)(void *);

/* CUlaunchAttribute / CUlaunchConfig (cuda.h, CUDA 12): a 4-byte id, padding, a 64-byte union */
typedef struct { int id; int pad; int value; char rest[60]; } launch_attribute;
typedef struct {
    unsigned grid[3], block[3], shared;
    void *stream;
    launch_attribute *attrs;
    unsigned num_attrs;
} launch_config;
#define PROGRAMMATIC_STREAM_SERIALIZATION 6

enum { ARG_NONE, ARG_INT32, ARG_INT64, ARG_FLOAT, ARG_TENSOR, ARG_DEVICE_ARRAY, ARG_BOOL, ARG_FLOAT_POSITIVE };
#define FLOAT32_MIN 1.1754943508222875e-38      /* specs.positive_float's range */
#define FLOAT32_MAX 3.4028234663852886e38
enum { P_PTR, P_CONST, P_INT, P_FLOAT32, P_FLOAT64, P_MAP };
#define MAP_BYTES 128                   /* a CUtensorMap, 64-byte aligned */

typedef struct {
    int kind;
    PyObject *dtype, *shape, *strides;  /* what the array must have (borrowed from the spec tuple) */
    int aligned;                        /* ptr % 16 == 0 */
} arg_guard;

typedef struct {
    int kind, arg, width;               /* width: 4 or 8 bytes (a bool's: 1) */
    int64_t value;                      /* P_CONST: a dim, stride or grid extent fixed by the guard;
                                           P_MAP: which tensor map */
} param_slot;

typedef struct {
    PyObject_HEAD
    PyObject *spec;                     /* every Python object the guard compares against */
    PyObject *tensor_type, *device_array_type, *raw_stream, *on_error, *owner;
    PyObject *num_warps, *kwargs, *environ, *env_keys, *env_values;
    PyObject *readers, *read_values, *switches, *generation, *device_number, *encode;
    Py_ssize_t nmaps;
    unsigned char *map_block, *maps;    /* the tensor maps (maps: map_block 64-byte aligned) */
    uint64_t *map_ptr;                  /* the pointer each map describes now (0: none yet) */
    Py_ssize_t nargs, nparams;
    arg_guard *args;
    param_slot *params;
    uint64_t *slots;
    void **pointers;
    long device;
    void *function, *context;
    unsigned grid[3], threads, shared;
    int dependent;
    launch_fn launch;
    launch_ex_fn launch_ex;
    ctx_get_fn ctx_get;
    ctx_set_fn ctx_set;
} Launcher;

static PyObject *s_shape, *s_stride, *s_strides, *s_dtype, *s_data_ptr, *s_get_device, *s_ptr, *s_device,
    *s_generation;

static void Launcher_dealloc(Launcher *self) {
    Py_XDECREF(self->spec);
    Py_XDECREF(self->tensor_type);
    Py_XDECREF(self->device_array_type);
    Py_XDECREF(self->raw_stream);
    Py_XDECREF(self->on_error);
    Py_XDECREF(self->owner);
    Py_XDECREF(self->num_warps);
    Py_XDECREF(self->kwargs);
    Py_XDECREF(self->environ);
    Py_XDECREF(self->env_keys);
    Py_XDECREF(self->env_values);
    Py_XDECREF(self->readers);
    Py_XDECREF(self->read_values);
    Py_XDECREF(self->switches);
    Py_XDECREF(self->generation);
    Py_XDECREF(self->device_number);
    Py_XDECREF(self->encode);
    PyMem_Free(self->map_block);
    PyMem_Free(self->map_ptr);
    PyMem_Free(self->args);
    PyMem_Free(self->params);
    PyMem_Free(self->slots);
    PyMem_Free(self->pointers);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void *as_pointer(PyObject *value) {
    return (void *)(uintptr_t)PyLong_AsUnsignedLongLong(value);
}

/* Launcher(spec) with spec a tuple:
 *   (args, params, grid, threads, shared, device, function, context, dependent,
 *    (cuLaunchKernel, cuLaunchKernelEx or 0, cuCtxGetCurrent, cuCtxSetCurrent) addresses,
 *    tensor_type, device_array_type, raw_stream, on_error, owner,
 *    num_warps, kwargs (a tuple of (name, value) pairs), environ dict, env keys, env values,
 *    readers, the values they returned, switches module, its generation then,
 *    encode(map index, pointer) -> the 128 bytes of that tensor map for the array at pointer)
 * args: one (kind, dtype, shape, strides, aligned) per positional argument;
 * params: one (kind, arg, width, value) per kernel parameter. */
static int Launcher_init(Launcher *self, PyObject *call_args, PyObject *kw) {
    PyObject *spec;
    if (!PyArg_ParseTuple(call_args, "O!", &PyTuple_Type, &spec))
        return -1;
    PyObject *args, *params, *fns, *tensor_type, *device_array_type, *raw_stream, *on_error,
             *owner, *num_warps, *kwargs, *environ, *env_keys, *env_values, *function, *context,
             *readers, *read_values, *switches, *generation, *encode;
    unsigned threads, shared;
    long device;
    int dependent;
    if (!PyArg_ParseTuple(spec, "O!O!(III)IIlOOpO!OOOOOOO!O!O!O!O!O!OOO", &PyTuple_Type, &args, &PyTuple_Type, &params,
                          &self->grid[0], &self->grid[1], &self->grid[2], &threads, &shared, &device,
                          &function, &context, &dependent, &PyTuple_Type, &fns, &tensor_type,
                          &device_array_type, &raw_stream, &on_error, &owner, &num_warps,
                          &PyTuple_Type, &kwargs, &PyDict_Type, &environ, &PyTuple_Type, &env_keys,
                          &PyTuple_Type, &env_values, &PyTuple_Type, &readers, &PyTuple_Type, &read_values,
                          &switches, &generation, &encode))
        return -1;
    if (PyTuple_GET_SIZE(fns) != 4 || PyTuple_GET_SIZE(env_keys) != PyTuple_GET_SIZE(env_values)
            || PyTuple_GET_SIZE(readers) != PyTuple_GET_SIZE(read_values)) {
        PyErr_SetString(PyExc_ValueError, "Launcher: malformed spec");
        return -1;
    }
    self->threads = threads;
    self->shared = shared;
    self->device = device;
    self->dependent = dependent;
    self->function = as_pointer(function);
    self->context = as_pointer(context);
    self->launch = (launch_fn)as_pointer(PyTuple_GET_ITEM(fns, 0));
    self->launch_ex = (launch_ex_fn)as_pointer(PyTuple_GET_ITEM(fns, 1));
    self->ctx_get = (ctx_get_fn)as_pointer(PyTuple_GET_ITEM(fns, 2));
    self->ctx_set = (ctx_set_fn)as_pointer(PyTuple_GET_ITEM(fns, 3));
    if (PyErr_Occurred())
        return -1;
    if (!self->launch || !self->ctx_get || !self->ctx_set || (dependent && !self->launch_ex)) {
        PyErr_SetString(PyExc_ValueError, "Launcher: a driver function is missing");
        return -1;
    }
    self->nargs = PyTuple_GET_SIZE(args);
    self->nparams = PyTuple_GET_SIZE(params);
    self->args = PyMem_Calloc(self->nargs + 1, sizeof(arg_guard));
    self->params = PyMem_Calloc(self->nparams + 1, sizeof(param_slot));
    self->slots = PyMem_Calloc(self->nparams + 1, sizeof(uint64_t));
    self->pointers = PyMem_Calloc(self->nparams + 1, sizeof(void *));
    if (!self->args || !self->params || !self->slots || !self->pointers) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < self->nargs; i++) {
        arg_guard *g = &self->args[i];
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(args, i), "iOOOp", &g->kind, &g->dtype, &g->shape,
                              &g->strides, &g->aligned))
            return -1;
        if (g->kind < ARG_NONE || g->kind > ARG_FLOAT_POSITIVE) {
            PyErr_SetString(PyExc_ValueError, "Launcher: unknown argument kind");
            return -1;
        }
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        param_slot *p = &self->params[i];
        long long value;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(params, i), "iiiL", &p->kind, &p->arg, &p->width, &value))
            return -1;
        p->value = value;
        if (p->kind == P_MAP && (value < 0 || value >= self->nparams)) {
            PyErr_SetString(PyExc_ValueError, "Launcher: bad tensor map index");
            return -1;
        }
        if (p->kind == P_MAP && value + 1 > self->nmaps)
            self->nmaps = value + 1;
        if (p->kind < P_PTR || p->kind > P_MAP || (p->width != 4 && p->width != 8 && (p->width != 1 || p->kind != P_INT))
                || (p->kind != P_CONST && (p->arg < 0 || p->arg >= self->nargs))) {
            PyErr_SetString(PyExc_ValueError, "Launcher: bad parameter slot");
            return -1;
        }
        self->pointers[i] = &self->slots[i];     /* a tensor map's: set below */
        if (p->kind == P_CONST) {               /* little-endian: the low bytes of the slot */
            if (p->width == 4) { int32_t v = (int32_t)value; memcpy(&self->slots[i], &v, 4); }
            else memcpy(&self->slots[i], &value, 8);
        }
    }
    self->map_block = PyMem_Calloc(self->nmaps * MAP_BYTES + 64, 1);
    self->map_ptr = PyMem_Calloc(self->nmaps + 1, sizeof(uint64_t));
    if (!self->map_block || !self->map_ptr) {
        PyErr_NoMemory();
        return -1;
    }
    self->maps = (unsigned char *)(((uintptr_t)self->map_block + 63) & ~(uintptr_t)63);
    for (Py_ssize_t i = 0; i < self->nparams; i++)
        if (self->params[i].kind == P_MAP)
            self->pointers[i] = self->maps + MAP_BYTES * self->params[i].value;
#define KEEP(field, value) do { Py_INCREF(value); Py_XSETREF(self->field, value); } while (0)
    KEEP(spec, spec);
    KEEP(tensor_type, tensor_type);
    KEEP(device_array_type, device_array_type);
    KEEP(raw_stream, raw_stream);
    KEEP(on_error, on_error);
    KEEP(owner, owner);
    KEEP(num_warps, num_warps);
    KEEP(kwargs, kwargs);
    KEEP(environ, environ);
    KEEP(env_keys, env_keys);
    KEEP(env_values, env_values);
    KEEP(readers, readers);
    KEEP(read_values, read_values);
    KEEP(switches, switches);
    KEEP(generation, generation);
    KEEP(encode, encode);
#undef KEEP
    Py_XSETREF(self->device_number, PyLong_FromLong(device));
    if (!self->device_number)
        return -1;
    return 0;
}

/* 1: equal, 0: not (or an error was cleared: the Python path reports it) */
static int same(PyObject *a, PyObject *b) {
    if (a == b)
        return 1;
    int r = PyObject_RichCompareBool(a, b, Py_EQ);
    if (r < 0) {
        PyErr_Clear();
        return 0;
    }
    return r;
}

/* The array's pointer, or 0 with *ok = 0 when it is not the array the guard expects. */
static uint64_t read_array(Launcher *self, arg_guard *g, PyObject *v, int *ok, int *has_stream) {
    PyObject *dtype = NULL, *shape = NULL, *strides = NULL, *ptr = NULL, *device = NULL;
    uint64_t address = 0;
    int torch = g->kind == ARG_TENSOR;
    *ok = 0;
    if (torch ? !PyObject_TypeCheck(v, (PyTypeObject *)self->tensor_type)
              : Py_TYPE(v) != (PyTypeObject *)self->device_array_type)
        return 0;
    if (!(dtype = PyObject_GetAttr(v, s_dtype)) || dtype != g->dtype)
        goto done;
    if (!(shape = PyObject_GetAttr(v, s_shape)) || !same(shape, g->shape))
        goto done;
    strides = torch ? PyObject_CallMethodNoArgs(v, s_stride) : PyObject_GetAttr(v, s_strides);
    if (!strides || !same(strides, g->strides))
        goto done;
    device = torch ? PyObject_CallMethodNoArgs(v, s_get_device) : PyObject_GetAttr(v, s_device);
    if (!device || !PyLong_Check(device) || PyLong_AsLong(device) != self->device)
        goto done;
    ptr = torch ? PyObject_CallMethodNoArgs(v, s_data_ptr) : PyObject_GetAttr(v, s_ptr);
    if (!ptr || !PyLong_Check(ptr))
        goto done;
    address = PyLong_AsUnsignedLongLong(ptr);
    if (PyErr_Occurred() || ((address & 15) == 0) != g->aligned)
        goto done;
    *ok = 1;
    *has_stream |= torch;
done:
    if (PyErr_Occurred())
        PyErr_Clear();
    Py_XDECREF(dtype);
    Py_XDECREF(shape);
    Py_XDECREF(strides);
    Py_XDECREF(ptr);
    Py_XDECREF(device);
    return *ok ? address : 0;
}

static PyObject *fail(Launcher *self, int err, const char *call) {
    PyObject *r = PyObject_CallFunction(self->on_error, "is", err, call);
    Py_XDECREF(r);
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_RuntimeError, "%s failed: CUresult %d", call, err);
    return NULL;
}

#define MISS do { PyErr_Clear(); return 0; } while (0)

/* Guard, pack and launch: 1 launched, 0 something differs (nothing launched), -1 an error set.
 * ``options``: the number of entries of ``kwargs`` that are launch options (num_warps, stream),
 * not constexprs. */
static int run(Launcher *self, PyObject *args, PyObject *kwargs, PyObject *num_warps, PyObject *stream_arg,
               Py_ssize_t options) {
    if (!PyTuple_Check(args) || PyTuple_GET_SIZE(args) != self->nargs || !same(num_warps, self->num_warps))
        MISS;
    /* the constexprs: the same names, values of the same types and equal */
    Py_ssize_t nkw = PyTuple_GET_SIZE(self->kwargs);
    if (!kwargs || kwargs == Py_None ? nkw != 0 : (!PyDict_Check(kwargs) || PyDict_GET_SIZE(kwargs) - options != nkw))
        MISS;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *pair = PyTuple_GET_ITEM(self->kwargs, i);
        PyObject *want = PyTuple_GET_ITEM(pair, 1);
        PyObject *got = PyDict_GetItemWithError(kwargs, PyTuple_GET_ITEM(pair, 0));
        if (!got || Py_TYPE(got) != Py_TYPE(want) || !same(got, want))
            MISS;
    }
    /* the compile switches: os.environ's values are new objects whenever they are set */
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->env_keys); i++) {
        PyObject *got = PyDict_GetItemWithError(self->environ, PyTuple_GET_ITEM(self->env_keys, i));
        PyObject *want = PyTuple_GET_ITEM(self->env_values, i);
        if (got ? (want == Py_None || !same(got, want)) : want != Py_None)
            MISS;
    }
    /* what the compiled code folded in: every global, cell and attribute chain it read is the
     * same object (Kernel._drop_stale compares by value: it runs when this differs) */
    PyObject *now = PyObject_GetAttr(self->switches, s_generation);
    int fresh = now && same(now, self->generation);
    Py_XDECREF(now);
    for (Py_ssize_t i = 0; fresh && i < PyTuple_GET_SIZE(self->readers); i++) {
        PyObject *value = PyObject_CallNoArgs(PyTuple_GET_ITEM(self->readers, i));
        fresh = value == PyTuple_GET_ITEM(self->read_values, i);
        Py_XDECREF(value);
    }
    if (!fresh)
        MISS;
    void *stream = NULL;
    int has_stream = 0;
    if (stream_arg != Py_None) {
        if (!PyLong_CheckExact(stream_arg))
            MISS;
        stream = as_pointer(stream_arg);
        if (PyErr_Occurred())
            MISS;
        has_stream = -1;                        /* given: never the arrays' */
    }
    uint64_t values[self->nargs + 1];
    for (Py_ssize_t i = 0; i < self->nargs; i++) {
        arg_guard *g = &self->args[i];
        PyObject *v = PyTuple_GET_ITEM(args, i);
        int ok = 1;
        switch (g->kind) {
        case ARG_NONE:
            ok = v == Py_None;
            break;
        case ARG_INT32:
        case ARG_INT64: {
            if (!PyLong_CheckExact(v)) { ok = 0; break; }
            long long n = PyLong_AsLongLong(v);
            if (n == -1 && PyErr_Occurred()) { PyErr_Clear(); ok = 0; break; }
            ok = (n >= INT32_MIN && n <= INT32_MAX) == (g->kind == ARG_INT32);
            values[i] = (uint64_t)n;
            break;
        }
        case ARG_BOOL:
            ok = PyBool_Check(v);
            values[i] = v == Py_True;
            break;
        case ARG_FLOAT:
        case ARG_FLOAT_POSITIVE: {              /* specialised on specs.positive_float */
            if (!PyFloat_CheckExact(v)) { ok = 0; break; }
            double d = PyFloat_AS_DOUBLE(v);
            ok = (d >= FLOAT32_MIN && d <= FLOAT32_MAX) == (g->kind == ARG_FLOAT_POSITIVE);
            memcpy(&values[i], &d, 8);
            break;
        }
        default: {
            int torch = 0;
            values[i] = read_array(self, g, v, &ok, &torch);
            if (torch && !has_stream)
                has_stream = 1;
        }
        }
        if (!ok)
            MISS;
    }
    if (has_stream == 1) {                      /* torch's current stream on the arrays' device */
        PyObject *s = PyObject_CallOneArg(self->raw_stream, self->device_number);
        if (!s)
            return -1;
        stream = as_pointer(s);
        Py_DECREF(s);
        if (PyErr_Occurred())
            return -1;
    }
    /* First the tensor maps of new pointers, through Python (which may let another thread run
     * and launch through this launcher); then, with no Python call until the launch, the
     * shared slots and maps are written: a launch never sees another's half-written values. */
    PyObject *encoded[self->nparams + 1];
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        param_slot *p = &self->params[i];
        uint64_t v = values[p->arg < 0 ? 0 : p->arg];
        encoded[i] = NULL;
        if (p->kind != P_MAP || self->map_ptr[p->value] == v)
            continue;
        PyObject *bytes = PyObject_CallFunction(self->encode, "LK", (long long)p->value, (unsigned long long)v);
        if (bytes && (!PyBytes_Check(bytes) || PyBytes_GET_SIZE(bytes) != MAP_BYTES)) {
            Py_CLEAR(bytes);
            PyErr_SetString(PyExc_ValueError, "Launcher: a tensor map is 128 bytes");
        }
        if (!bytes) {
            for (Py_ssize_t j = 0; j < i; j++)
                Py_XDECREF(encoded[j]);
            return -1;
        }
        encoded[i] = bytes;
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++) {   /* a map another launch re-encoded meanwhile */
        param_slot *p = &self->params[i];
        if (p->kind == P_MAP && !encoded[i] && self->map_ptr[p->value] != values[p->arg]) {
            for (Py_ssize_t j = 0; j < self->nparams; j++)
                Py_XDECREF(encoded[j]);
            return 0;                           /* (rare) the Python path launches this one */
        }
    }
    for (Py_ssize_t i = 0; i < self->nparams; i++) {
        param_slot *p = &self->params[i];
        uint64_t v = values[p->arg < 0 ? 0 : p->arg];
        switch (p->kind) {
        case P_PTR:
            self->slots[i] = v;
            break;
        case P_INT:
            if (p->width == 1) { uint8_t b = (uint8_t)v; memcpy(&self->slots[i], &b, 1); }
            else if (p->width == 4) { int32_t n = (int32_t)(int64_t)v; memcpy(&self->slots[i], &n, 4); }
            else self->slots[i] = v;
            break;
        case P_FLOAT32: {
            double d;
            memcpy(&d, &v, 8);
            float f = (float)d;
            memcpy(&self->slots[i], &f, 4);
            break;
        }
        case P_FLOAT64:
            self->slots[i] = v;
            break;
        case P_MAP:                             /* encoded in the first pass where new */
            if (encoded[i]) {
                memcpy(self->maps + MAP_BYTES * p->value, PyBytes_AS_STRING(encoded[i]), MAP_BYTES);
                self->map_ptr[p->value] = v;
                Py_CLEAR(encoded[i]);
            }
            break;
        default:                                /* P_CONST: written once */
            break;
        }
    }
    void *current = NULL;
    int err = self->ctx_get(&current);
    if (err || current != self->context) {
        err = self->ctx_set(self->context);
        if (err)
            return fail(self, err, "cuCtxSetCurrent"), -1;
    }
    if (self->dependent) {
        launch_attribute attribute;
        memset(&attribute, 0, sizeof attribute);
        attribute.id = PROGRAMMATIC_STREAM_SERIALIZATION;
        attribute.value = 1;
        launch_config config = {{self->grid[0], self->grid[1], self->grid[2]}, {self->threads, 1, 1},
                                self->shared, stream, &attribute, 1};
        err = self->launch_ex(&config, self->function, self->pointers, NULL);
        if (err)
            return fail(self, err, "cuLaunchKernelEx"), -1;
    } else {
        err = self->launch(self->function, self->grid[0], self->grid[1], self->grid[2], self->threads, 1, 1,
                           self->shared, stream, self->pointers, NULL);
        if (err)
            return fail(self, err, "cuLaunchKernel"), -1;
    }
    return 1;
}

/* launcher(args, kwargs, num_warps, stream) -> True (launched) / False (take the Python path) */
static PyObject *Launcher_call(Launcher *self, PyObject *call_args, PyObject *kw) {
    PyObject *args, *kwargs, *num_warps, *stream_arg;
    if (!PyArg_UnpackTuple(call_args, "Launcher", 4, 4, &args, &kwargs, &num_warps, &stream_arg))
        return NULL;
    int r = run(self, args, kwargs, num_warps, stream_arg, 0);
    if (r < 0)
        return NULL;
    return PyBool_FromLong(r);
}

static PyTypeObject LauncherType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilejit_native_launch.Launcher",
    .tp_basicsize = sizeof(Launcher),
    .tp_dealloc = (destructor)Launcher_dealloc,
    .tp_call = (ternaryfunc)Launcher_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One kernel's re-launch: guard, pack, cuLaunchKernel (see native_launch.c).",
    .tp_init = (initproc)Launcher_init,
    .tp_new = PyType_GenericNew,
};

/* Front(python_launch, launcher, fast_paths, skipping): what ``kernel[grid]`` returns once a
 * native launcher exists for that grid.  front(*args, **kwargs) runs the launcher when nothing
 * has dropped the kernel's fast paths since (their ``generation``), no launches_skipped block is
 * open (``skipping[0]``) and no launch option but num_warps and stream is given; anything else,
 * a guard that does not hold or a driver error (the Python path reports it at the user's line)
 * calls the Python launch function with the same arguments. */
typedef struct {
    PyObject_HEAD
    PyObject *python, *fast, *generation, *skipping;
    Launcher *launcher;
} Front;

static PyTypeObject LauncherType;
static PyObject *s_num_warps, *s_stream, *s_num_stages, *s_fast_math, *s_debug;

static void Front_dealloc(Front *self) {
    Py_XDECREF(self->python);
    Py_XDECREF(self->fast);
    Py_XDECREF(self->generation);
    Py_XDECREF(self->skipping);
    Py_XDECREF(self->launcher);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Front_init(Front *self, PyObject *call_args, PyObject *kw) {
    PyObject *python, *launcher, *fast, *skipping;
    if (!PyArg_ParseTuple(call_args, "OO!OO!", &python, &LauncherType, &launcher, &fast, &PyList_Type, &skipping))
        return -1;
    if (PyList_GET_SIZE(skipping) != 1) {
        PyErr_SetString(PyExc_ValueError, "Front: skipping must be a one-item list");
        return -1;
    }
    PyObject *generation = PyObject_GetAttr(fast, s_generation);
    if (!generation)
        return -1;
    Py_INCREF(python);
    Py_INCREF(launcher);
    Py_INCREF(fast);
    Py_INCREF(skipping);
    Py_XSETREF(self->python, python);
    Py_XSETREF(self->launcher, (Launcher *)launcher);
    Py_XSETREF(self->fast, fast);
    Py_XSETREF(self->skipping, skipping);
    Py_XSETREF(self->generation, generation);
    return 0;
}

static PyObject *Front_call(Front *self, PyObject *args, PyObject *kwargs) {
    PyObject *num_warps = Py_None, *stream = Py_None;
    Py_ssize_t options = 0;
    PyObject *skip = PyList_GET_ITEM(self->skipping, 0);
    int ready = PyLong_CheckExact(skip) && PyLong_AsLong(skip) == 0;
    if (ready) {
        PyObject *now = PyObject_GetAttr(self->fast, s_generation);
        ready = now && same(now, self->generation);
        Py_XDECREF(now);
    }
    if (ready && kwargs && PyDict_GET_SIZE(kwargs)) {
        PyObject *found;
        if ((found = PyDict_GetItemWithError(kwargs, s_num_warps))) { num_warps = found; options++; }
        if ((found = PyDict_GetItemWithError(kwargs, s_stream))) { stream = found; options++; }
        ready = !PyDict_GetItemWithError(kwargs, s_num_stages) && !PyDict_GetItemWithError(kwargs, s_fast_math)
                && !PyDict_GetItemWithError(kwargs, s_debug);
    }
    if (ready) {
        int r = run(self->launcher, args, kwargs, num_warps, stream, options);
        if (r == 1)
            Py_RETURN_NONE;
    }
    PyErr_Clear();
    return PyObject_Call(self->python, args, kwargs);
}

static PyObject *Front_get_python(Front *self, void *closure) {
    Py_INCREF(self->python);
    return self->python;
}

static PyObject *Front_get_launcher(Front *self, void *closure) {
    Py_INCREF(self->launcher);
    return (PyObject *)self->launcher;
}

static PyGetSetDef Front_getset[] = {
    {"python", (getter)Front_get_python, NULL, "the Python launch function it falls back on", NULL},
    {"launcher", (getter)Front_get_launcher, NULL, "the native launcher it runs", NULL},
    {NULL},
};

static PyTypeObject FrontType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tilejit_native_launch.Front",
    .tp_basicsize = sizeof(Front),
    .tp_dealloc = (destructor)Front_dealloc,
    .tp_call = (ternaryfunc)Front_call,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "kernel[grid] with a native launcher: the launcher, else the Python launch function.",
    .tp_getset = Front_getset,
    .tp_init = (initproc)Front_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "tilejit_native_launch", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_tilejit_native_launch(void) {
    if (PyType_Ready(&LauncherType) < 0 || PyType_Ready(&FrontType) < 0)
        return NULL;
#define INTERN(var, text) if (!(var = PyUnicode_InternFromString(text))) return NULL
    INTERN(s_shape, "shape");
    INTERN(s_stride, "stride");
    INTERN(s_strides, "strides");
    INTERN(s_dtype, "dtype");
    INTERN(s_data_ptr, "data_ptr");
    INTERN(s_get_device, "get_device");
    INTERN(s_ptr, "ptr");
    INTERN(s_device, "device");
    INTERN(s_generation, "generation");
    INTERN(s_num_warps, "num_warps");
    INTERN(s_stream, "stream");
    INTERN(s_num_stages, "num_stages");
    INTERN(s_fast_math, "fast_math");
    INTERN(s_debug, "debug");
#undef INTERN
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    if (PyModule_AddObjectRef(m, "Launcher", (PyObject *)&LauncherType) < 0
            || PyModule_AddObjectRef(m, "Front", (PyObject *)&FrontType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
