/* The profile callback: the hot path, and the slow paths it falls into the
 * first time it sees a thread or a function. */
#include "state.h"

#include <stdlib.h>
#include <string.h>

/* ---- naming C functions (slow path, runs Python API) ------------------ */

/* Strong reference to a type's qualified name ("OrderedDict", "list"). */
static PyObject *
type_qualname(PyTypeObject *type)
{
    if (type->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        PyHeapTypeObject *ht = (PyHeapTypeObject *)type;
        if (ht->ht_qualname != NULL && PyUnicode_Check(ht->ht_qualname)) {
            return Py_NewRef(ht->ht_qualname);
        }
    }
    const char *dot = strrchr(type->tp_name, '.');
    return PyUnicode_FromString(dot ? dot + 1 : type->tp_name);
}

/* The type in type's MRO whose own method table holds ml, or NULL. */
static PyTypeObject *
type_defining(PyTypeObject *type, const PyMethodDef *ml)
{
    PyObject *mro = type->tp_mro;
    if (mro == NULL || !PyTuple_Check(mro)) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *base = PyTuple_GET_ITEM(mro, i);
        if (!PyType_Check(base)) {
            continue;
        }
        PyMethodDef *defs = ((PyTypeObject *)base)->tp_methods;
        for (; defs != NULL && defs->ml_name != NULL; defs++) {
            if (defs == ml) {
                return (PyTypeObject *)base;
            }
        }
    }
    return NULL;
}

/* The class a C method bound to self is named after: the one whose method
 * table defines it, whatever it was called on (an inherited method, a
 * classmethod called on a subclass, a metaclass method such as type.mro
 * called on int).  Functions are keyed by their method definition, so the
 * name must not depend on self.  Else type(self), or self for a class. */
static PyTypeObject *
defining_type(PyObject *self, const PyMethodDef *ml)
{
    PyTypeObject *found = NULL;
    if (PyType_Check(self)) {
        found = type_defining((PyTypeObject *)self, ml);
    }
    if (found == NULL) {
        found = type_defining(Py_TYPE(self), ml);
    }
    if (found == NULL) {
        found = PyType_Check(self) ? (PyTypeObject *)self : Py_TYPE(self);
    }
    return found;
}

/* Builds the table entry of the C function called through arg.  Sets
 * *ignored for the tracer's own methods. */
static int
describe_c_function(ft_tracer *tracer, PyObject *arg, ft_func *func,
                    int *ignored)
{
    memset(func, 0, sizeof(*func));
    func->is_c = 1;
    func->filename = Py_NewRef(tracer->state->str_builtin);
    *ignored = 0;

    if (!PyCFunction_Check(arg)) {
        /* CPython only reports builtin functions; keep going anyway. */
        func->owner = Py_NewRef((PyObject *)Py_TYPE(arg));
        func->name = type_qualname(Py_TYPE(arg));
        return func->name ? 0 : -1;
    }
    PyCFunctionObject *cf = (PyCFunctionObject *)arg;
    PyMethodDef *ml = cf->m_ml;
    PyObject *self = cf->m_self;

    if (self == NULL || PyModule_Check(self)) {
        PyObject *modname = NULL;
        if (self != NULL) {
            func->owner = Py_NewRef(self);
            *ignored = PyModule_GetDef(self) == &ft_module_def;
            modname = PyModule_GetNameObject(self);
            if (modname == NULL) {
                PyErr_Clear();
            }
        }
        else {
            /* Nothing else owns the method definition (the key): keep the
             * function object itself, which has no self to retain. */
            func->owner = Py_NewRef(arg);
            if (cf->m_module != NULL && PyUnicode_Check(cf->m_module)) {
                modname = Py_NewRef(cf->m_module);
            }
        }
        if (modname == NULL
            || PyUnicode_CompareWithASCIIString(modname, "builtins") == 0) {
            func->name = PyUnicode_FromString(ml->ml_name);
        }
        else {
            func->name = PyUnicode_FromFormat("%U.%s", modname, ml->ml_name);
        }
        Py_XDECREF(modname);
        return func->name ? 0 : -1;
    }
    PyTypeObject *type = defining_type(self, ml);
    /* Methods of frametrace's own objects are the tracer, not the trace. */
    *ignored = PyObject_TypeCheck(self, tracer->state->tracer_type)
               || PyObject_TypeCheck(self, tracer->state->range_type);
    func->owner = Py_NewRef((PyObject *)type);
    PyObject *qualname = type_qualname(type);
    if (qualname == NULL) {
        return -1;
    }
    func->name = PyUnicode_FromFormat("%U.%s", qualname, ml->ml_name);
    Py_DECREF(qualname);
    return func->name ? 0 : -1;
}

static inline const void *
c_function_key(PyObject *arg)
{
    /* Bound builtin methods are created per attribute access; their method
     * definition is what stays the same. */
    return PyCFunction_Check(arg) ? (const void *)((PyCFunctionObject *)arg)->m_ml
                                  : (const void *)Py_TYPE(arg);
}

/* Slow path: first sighting of a C function.  Calls the Python API, which
 * can run arbitrary code and let other threads run: the table is only
 * touched after that, by pure C.  Returns the id or FT_NO_ID. */
static uint32_t
intern_c_function(ft_tracer *tracer, PyObject *arg, const void *key)
{
    ft_saved_exc saved;
    ft_func func;
    int ignored;
    uint32_t id;

    FT_SAVE_EXC(saved);
    if (describe_c_function(tracer, arg, &func, &ignored) < 0) {
        /* Never raise from the hook: count it, report it at getEvents(). */
        PyErr_Clear();
        Py_CLEAR(func.owner);
        Py_CLEAR(func.name);
        Py_CLEAR(func.filename);
        tracer->intern_failures++;
        id = FT_NO_ID;
    }
    else if (tracer->phase != FT_PHASE_ACTIVE) {
        Py_CLEAR(func.owner);
        Py_CLEAR(func.name);
        Py_CLEAR(func.filename);
        id = FT_NO_ID;
    }
    else {
        id = ft_functable_find(&tracer->funcs, key);
        if (id == FT_NO_ID) {
            id = ft_functable_add(&tracer->funcs, key, func, ignored);
        }
        else {
            Py_CLEAR(func.owner);
            Py_CLEAR(func.name);
            Py_CLEAR(func.filename);
        }
    }
    FT_RESTORE_EXC(saved);
    return id;
}

/* ---- the hot path ---------------------------------------------------- */

/* Whether the tracer of hook stopped.  On 3.10/3.11 a stop clears each
 * per-thread hook's thread first; the shared hook of 3.12+ has none. */
static inline int
hook_stopped(const ft_hookobject *hook)
{
#if FT_SHARED_HOOK
    return hook->tracer == NULL;
#else
    return hook->thread == NULL;
#endif
}

/* What the ring code gets as the holder of a thread's first ring: the
 * per-thread hook, or with the shared hook the tracer (NULL). */
#if FT_SHARED_HOOK
#  define RING_HOOK(hook) NULL
#else
#  define RING_HOOK(hook) (hook)
#endif

void
ft_record_id_slow(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
                  int64_t ts, uint32_t id, uint32_t kind)
{
    if (id == FT_NO_ID) {
        th->lost++;
        return;
    }
    if (id & FT_ID_IGNORED) {
        return;
    }
    if (th->ring.buf == NULL
        && ft_thread_first_ring(tracer, th, hook, &ts) < 0) {
        return;
    }
    if (ft_ring_push(&th->ring, ts, id, kind)) {
        ft_clock_maybe_anchor(&tracer->clock, ts);
    }
}

/* The record kind of each profile event (PyTrace_*); -1: not recorded. */
static const int8_t record_kind[] = {
    [PyTrace_CALL] = FT_REC_CALL,
    [PyTrace_EXCEPTION] = -1,
    [PyTrace_LINE] = -1,
    [PyTrace_RETURN] = FT_REC_RETURN,
    [PyTrace_C_CALL] = FT_REC_C_CALL,
    [PyTrace_C_EXCEPTION] = FT_REC_C_EXCEPTION,
    [PyTrace_C_RETURN] = FT_REC_C_RETURN,
    [PyTrace_OPCODE] = -1,
};

/* Any event, a function seen for the first time included; th NULL (3.12+):
 * found here.  Out of line:
 * inlined, its calls would give the hook's common case a stack frame. */
static FT_NOINLINE int
record(ft_hookobject *hook, ft_thread *th, int64_t ts, PyFrameObject *frame,
       int what, PyObject *arg)
{
    ft_tracer *tracer = hook->tracer;
    const void *key;
    uint32_t id;

    if (what < 0 || (size_t)what >= Py_ARRAY_LENGTH(record_kind)
        || record_kind[what] < 0) {
        return 0;
    }
    if (what == PyTrace_CALL || what == PyTrace_RETURN) {
        key = ft_frame_code(frame);
        id = ft_functable_find(&tracer->funcs, key);
        if (FT_UNLIKELY(id == FT_NO_ID)) {
            id = ft_functable_intern_code(&tracer->funcs, (PyCodeObject *)key);
        }
    }
    else {
        if (!tracer->c_calls) {
            return 0;
        }
        key = c_function_key(arg);
        id = ft_functable_find(&tracer->funcs, key);
        if (FT_UNLIKELY(id == FT_NO_ID)) {
            /* The slow path may let other threads run, even one that stops
             * this tracer: hold it, and look again at the hook after. */
            Py_INCREF(hook);
            Py_INCREF(tracer);
            id = intern_c_function(tracer, arg, key);
            /* The tracer's last reference may be ours now: its release
             * stops it (hook_stopped() then) and frees it. */
            Py_DECREF(tracer);
            int stopped = hook_stopped(hook);
            Py_DECREF(hook);
            if (stopped) {
                return 0;
            }
        }
    }
    if (th == NULL) {
        th = ft_cached_thread(tracer);
    }
    if (th == NULL) {
        th = ft_thread_of_caller(tracer, what == PyTrace_CALL);
        if (th == NULL) {
            return 0;
        }
    }
    ft_record_id(tracer, th, RING_HOOK(hook), ts, id,
                 (uint32_t)record_kind[what]);
    return 0;
}

int
ft_thread_first_ring(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
                     int64_t *ts)
{
    /* A thread's first record: allocate its ring now, so idle threads cost
     * nothing.  Faulting it in takes milliseconds: let the other threads
     * run meanwhile (one of them may stop the tracer, and then clear it:
     * th is not touched after that). */
    ft_ring ring;
    PyObject *holder = hook != NULL ? (PyObject *)hook : (PyObject *)tracer;
    Py_INCREF(holder);
    int rc = ft_ring_alloc_released(&ring, th->capacity, *ts);
    int stopped = hook != NULL ? hook->thread == NULL
                               : tracer->phase != FT_PHASE_ACTIVE;
    if (stopped) {
        if (rc == 0) {
            ft_ring_free(&ring);
        }
    }
    else if (rc < 0) {
        th->lost++;
    }
    else {
        ft_thread_adopt_ring(th, &ring);
    }
    /* All references but ours may have gone meanwhile: then releasing it
     * frees the tracer (the monitoring backend's holder) or stops it. */
    int last = Py_REFCNT(holder) == 1;
    Py_DECREF(holder);
    if (stopped || rc < 0 || last) {
        return -1;
    }
    /* Faulting the ring in took time: leave it out of the event. */
    *ts = ft_clock_ticks(&tracer->clock);
    return 0;
}

void
ft_thread_adopt_ring(ft_thread *th, const ft_ring *ring)
{
    th->ring = *ring;
    /* A thread state registered before its OS thread bound it had no ids
     * yet (3.12+: 0), or its creator's (3.10/3.11). */
    th->thread_id = PyThread_get_thread_ident();
    th->native_id = PyThread_get_thread_native_id();
}

uint32_t
ft_c_function_id(ft_tracer *tracer, PyObject *func, const void *key)
{
    uint32_t id = ft_functable_find(&tracer->funcs, key);
    return id != FT_NO_ID ? id : intern_c_function(tracer, func, key);
}

/* ft_hook() for what its common case leaves: reads the clock itself. */
static FT_NOINLINE int
hook_general(ft_hookobject *hook, ft_thread *th, PyFrameObject *frame,
             int what, PyObject *arg)
{
    ft_tracer *tracer = hook->tracer;
    if (what >= PyTrace_C_CALL && !tracer->c_calls) {
        return 0;  /* before reading the clock */
    }
    return record(hook, th, ft_clock_ticks(&tracer->clock), frame, what, arg);
}

#if FT_SHARED_HOOK
/* The hook of a stopped tracer, on a thread stop() left it on (another
 * tool held the hook elsewhere: see uninstall_hooks() in tracer.c): the
 * thread removes it itself, with the public call that acts on the caller.
 * Once per thread and tracer, even if an audit hook refuses. */
static FT_TLS uint64_t tls_unhooked;

static FT_NOINLINE int
hook_off(ft_hookobject *hook)
{
    if (tls_unhooked != hook->generation) {
        tls_unhooked = hook->generation;
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        Py_INCREF(hook);  /* the thread's reference goes: ours to return */
        PyEval_SetProfile(NULL, NULL);
        Py_DECREF(hook);
        FT_RESTORE_EXC(saved);
    }
    return 0;
}
#endif

int
ft_hook(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg)
{
    ft_hookobject *hook = (ft_hookobject *)obj;
#if FT_SHARED_HOOK
    ft_tracer *tracer = hook->tracer;
    if (FT_UNLIKELY(tracer == NULL)) {
        return hook_off(hook);  /* the tracer stopped */
    }
    ft_thread *th = NULL;  /* read last, when no call follows */
#else
    ft_thread *th = hook->thread;
    if (FT_UNLIKELY(th == NULL)) {
        return 0;  /* the tracer stopped */
    }
    ft_tracer *tracer = hook->tracer;
#endif
    /* The common case inline, with no call that would need a stack frame
     * (3.10; 3.11+ must call PyFrame_GetCode()): the cycle counter, the
     * thread seen before, a Python function or an exact builtin function
     * seen before, a one-word record, a ring with room.  Anything else goes
     * out of line. */
    const void *key;
    if (what == PyTrace_CALL || what == PyTrace_RETURN) {
        key = ft_frame_code(frame);
    }
    else if (what >= PyTrace_C_CALL && what <= PyTrace_C_RETURN
             && Py_IS_TYPE(arg, &PyCFunction_Type) && tracer->c_calls) {
        key = ((PyCFunctionObject *)arg)->m_ml;
    }
    else {
        return hook_general(hook, th, frame, what, arg);
    }
    if (FT_UNLIKELY(!tracer->clock.use_cycles)) {
        return hook_general(hook, th, frame, what, arg);
    }
    int64_t ts = ft_cycles();
    uint32_t id = ft_functable_find(&tracer->funcs, key);
#if FT_SHARED_HOOK
    /* A miss: the thread's first event under this tracer, which record()
     * finds. */
    if (FT_UNLIKELY(!ft_cache_hit(tracer))) {
        return record(hook, NULL, ts, frame, what, arg);
    }
    th = ft_tls_cache.thread;
#endif
    if (FT_LIKELY(ft_ring_try_push(&th->ring, ts, id,
                                   (uint32_t)record_kind[what]))) {
        return 0;
    }
    return record(hook, th, ts, frame, what, arg);
}

void
ft_hook_record(ft_hookobject *hook, ft_thread *th, int64_t ticks,
               PyFrameObject *frame, int what, PyObject *arg)
{
    if (!hook_stopped(hook)) {
        (void)record(hook, th, ticks, frame, what, arg);
    }
}

/* ---- threads ----------------------------------------------------------- */

int
ft_ring_alloc_released(ft_ring *ring, uint64_t capacity, int64_t origin)
{
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = ft_ring_alloc(ring, capacity, origin);
    Py_END_ALLOW_THREADS
    return rc;
}

void
ft_thread_free(ft_thread *thread)
{
    if (thread == NULL) {
        return;
    }
    ft_ring_free(&thread->ring);
    Py_CLEAR(thread->name);
    free(thread->base_stack);
    free(thread->stop_stack);
    free(thread);
}

int
ft_capture_stack(ft_tracer *tracer, PyFrameObject *top, uint32_t **stack,
                 Py_ssize_t *depth)
{
    Py_ssize_t n = 0, cap = 0;
    uint32_t *ids = NULL;
    PyFrameObject *frame = top;
    Py_XINCREF(frame);
    while (frame != NULL) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            uint32_t *grown = realloc(ids, (size_t)cap * sizeof(uint32_t));
            if (grown == NULL) {
                Py_DECREF(frame);
                free(ids);
                PyErr_NoMemory();
                return -1;
            }
            ids = grown;
        }
        uint32_t id = ft_functable_intern_code(&tracer->funcs,
                                               ft_frame_code(frame));
        if (id == FT_NO_ID) {
            Py_DECREF(frame);
            free(ids);
            PyErr_NoMemory();
            return -1;
        }
        /* Frames the hook ignores have no records to match them. */
        if (!(id & FT_ID_IGNORED)) {
            ids[n++] = id;
        }
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
        if (frame == NULL && PyErr_Occurred()) {
            free(ids);  /* 3.11+ may fail to create the caller's frame */
            return -1;
        }
    }
    /* Collected innermost first; store outermost first. */
    for (Py_ssize_t i = 0; i < n / 2; i++) {
        uint32_t tmp = ids[i];
        ids[i] = ids[n - 1 - i];
        ids[n - 1 - i] = tmp;
    }
    *stack = ids;
    *depth = n;
    return 0;
}

ft_thread *
ft_find_thread(const ft_tracer *tracer, PyThreadState *ts)
{
    uint64_t tstate_id = PyThreadState_GetID(ts);
    for (Py_ssize_t i = 0; i < tracer->nthreads; i++) {
        if (tracer->threads[i]->tstate_id == tstate_id) {
            return tracer->threads[i];
        }
    }
    return NULL;
}

#if !FT_SHARED_HOOK
ft_hookobject *
ft_new_hook(ft_tracer *tracer, ft_thread *thread)
{
    ft_hookobject *hook = PyObject_New(ft_hookobject,
                                       tracer->state->hook_type);
    if (hook == NULL) {
        return NULL;
    }
    hook->tracer = tracer;
    hook->thread = thread;
    hook->generation = tracer->generation;
    if (PyList_Append(tracer->hooks, (PyObject *)hook) < 0) {
        hook->tracer = NULL;
        hook->thread = NULL;
        Py_DECREF(hook);
        return NULL;
    }
    return hook;
}
#endif

ft_thread *
ft_register_thread(ft_tracer *tracer, PyThreadState *ts, PyFrameObject *top,
                   int64_t base_ticks)
{
    ft_thread *thread = ft_find_thread(tracer, ts);
    if (thread != NULL) {
        /* The thread was registered already (threading's bootstrap
         * replaced the hook start() had installed): go on recording into
         * the same buffer. */
        return thread;
    }
    thread = calloc(1, sizeof(ft_thread));
    if (thread == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    thread->capacity = tracer->buffer_size;
    thread->thread_id = ft_tstate_thread_id(ts);
    thread->native_id = ft_tstate_native_id(ts);
    thread->tstate_id = PyThreadState_GetID(ts);
    thread->base_ticks = base_ticks;
    if (ft_capture_stack(tracer, top, &thread->base_stack,
                         &thread->base_depth) < 0) {
        goto error;
    }
    /* Grow and append last, with no call in between that could run Python
     * code and let another thread register meanwhile. */
    if (tracer->nthreads == tracer->threads_cap) {
        Py_ssize_t cap = tracer->threads_cap ? tracer->threads_cap * 2 : 8;
        ft_thread **grown = realloc(tracer->threads,
                                    (size_t)cap * sizeof(ft_thread *));
        if (grown == NULL) {
            PyErr_NoMemory();
            goto error;
        }
        tracer->threads = grown;
        tracer->threads_cap = cap;
    }
    tracer->threads[tracer->nthreads++] = thread;
    return thread;

error:
    ft_thread_free(thread);
    return NULL;
}

/* ---- the caller's thread, through thread-local storage -------------- */

FT_TLS ft_thread_cache ft_tls_cache;
/* Guarded by the GIL. */
static uint64_t last_generation;

uint64_t
ft_next_generation(void)
{
    return ++last_generation;
}

ft_thread *
ft_thread_of_caller(ft_tracer *tracer, int starting)
{
    PyThreadState *ts = PyThreadState_Get();
    ft_thread *th = ft_find_thread(tracer, ts);
    if (th == NULL) {
        /* Threads alive at start() were registered then; later ones
         * register here. */
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        int64_t base = ft_clock_ticks(&tracer->clock);
        PyFrameObject *top = PyThreadState_GetFrame(ts);
        if (starting && top != NULL) {
            /* A call event's frame is the callee: its call is this event. */
            Py_SETREF(top, PyFrame_GetBack(top));
        }
        Py_INCREF(tracer);
        th = ft_register_thread(tracer, ts, top, base);
        Py_XDECREF(top);
        PyErr_Clear();  /* never raise from a hook */
        FT_RESTORE_EXC(saved);
        if (th != NULL && tracer->phase == FT_PHASE_ACTIVE) {
            PyObject *names = ft_thread_names();  /* Python code */
            if (tracer->phase == FT_PHASE_ACTIVE) {
                ft_name_thread(th, names);
            }
            Py_XDECREF(names);
        }
        /* Ours may be the last reference now: releasing it frees the
         * tracer, and th with it. */
        int gone = th == NULL || tracer->phase != FT_PHASE_ACTIVE
                   || Py_REFCNT(tracer) == 1;
        Py_DECREF(tracer);
        if (gone) {
            return NULL;
        }
    }
    ft_cache_thread(tracer, th);
    return th;
}

/* ---- threads' names -------------------------------------------------- */

PyObject *
ft_thread_names(void)
{
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    PyObject *names = PyDict_New();
    PyObject *threading = PyImport_ImportModule("threading");
    /* Every Thread object threading knows: dummy ones for foreign threads
     * included, with no ident yet for those not started. */
    PyObject *threads = threading
        ? PyObject_CallMethod(threading, "enumerate", NULL) : NULL;
    PyObject *list = threads ? PySequence_List(threads) : NULL;
    for (Py_ssize_t i = 0; names && list && i < PyList_GET_SIZE(list); i++) {
        PyObject *thread = PyList_GET_ITEM(list, i);
        PyObject *ident = PyObject_GetAttrString(thread, "ident");
        PyObject *name = ident && PyLong_Check(ident)
            ? PyObject_GetAttrString(thread, "name") : NULL;
        if (name != NULL && PyUnicode_Check(name)) {
            PyDict_SetItem(names, ident, name);
        }
        Py_XDECREF(name);
        Py_XDECREF(ident);
        PyErr_Clear();
    }
    Py_XDECREF(list);
    Py_XDECREF(threads);
    Py_XDECREF(threading);
    PyErr_Clear();
    FT_RESTORE_EXC(saved);
    return names;
}

void
ft_name_thread(ft_thread *thread, PyObject *names)
{
    if (names == NULL) {
        return;
    }
    PyObject *ident = PyLong_FromUnsignedLong(thread->thread_id);
    PyObject *name = ident ? PyDict_GetItemWithError(names, ident) : NULL;
    if (name != NULL) {
        Py_XSETREF(thread->name, Py_NewRef(name));
    }
    Py_XDECREF(ident);
    PyErr_Clear();
}
