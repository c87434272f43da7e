/* The threads a tracer records: the registry (each thread state's
 * ft_thread, found newest first, or by its OS thread), the stacks taken at
 * start and stop, threading's names for them, each thread's ring (one page
 * to begin with, at its first record; budget.c grows it), the calling OS
 * thread (ft_os_thread), and the caller's thread through the thread-local
 * cache and its generations.  Threads alive at start() are registered
 * there (lifecycle.c), later ones at their first event
 * (ft_thread_of_caller()) or through threading's bootstrap (bootstrap.c).
 * Also the interrupt kept while start() and stop() run Python code. */
#include "threads.h"
#include "import.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* ---- OS threads ----------------------------------------------------- */

/* The calling OS thread's ft_os_thread, made at its first ring: the key's
 * value holds one reference, dropped by os_thread_exit() when the thread
 * exits.  (Never on the main thread, which exits with the process; nor,
 * in a forked child, on the threads the fork left behind: their few bytes
 * stay.) */
static pthread_key_t os_thread_key;
static int os_thread_key_made;  /* guarded by the GIL */

static void
os_thread_release(ft_os_thread *os)
{
    /* acq_rel: the last to let go sees every other's writes before it
     * frees. */
    if (os != NULL
        && atomic_fetch_sub_explicit(&os->refs, 1, memory_order_acq_rel) == 1) {
        free(os);
    }
}

/* The key's destructor, as the OS thread exits (no GIL): the threads that
 * recorded on it read alive under the GIL, with acquire. */
static void
os_thread_exit(void *value)
{
    ft_os_thread *os = value;
    atomic_store_explicit(&os->alive, 0, memory_order_release);
    os_thread_release(os);
}

/* A new reference to the calling OS thread's ft_os_thread, or NULL when
 * out of memory (then its ring is taken for ended with its thread state,
 * as before).  Holds the GIL. */
static ft_os_thread *
os_thread_current(void)
{
    if (!os_thread_key_made) {
        if (pthread_key_create(&os_thread_key, os_thread_exit) != 0) {
            return NULL;
        }
        os_thread_key_made = 1;
    }
    ft_os_thread *os = pthread_getspecific(os_thread_key);
    if (os == NULL) {
        os = malloc(sizeof(*os));
        if (os == NULL) {
            return NULL;
        }
        atomic_init(&os->refs, 1);
        atomic_init(&os->alive, 1);
        if (pthread_setspecific(os_thread_key, os) != 0) {
            free(os);
            return NULL;
        }
    }
    atomic_fetch_add_explicit(&os->refs, 1, memory_order_relaxed);
    return os;
}

/* ---- threads: registration, stacks, names --------------------------- */

/* Frees a thread and what it owns (its ring, stacks and name). */
void
ft_thread_free(ft_thread *thread)
{
    if (thread == NULL) {
        return;
    }
    ft_ring_free(&thread->ring);
    os_thread_release(thread->os_thread);
    Py_CLEAR(thread->name);
    free(thread->base_stack);
    free(thread->stop_stack);
    free(thread);
}

/* Ids of the Python frames from top (borrowed, may be NULL) down,
 * outermost first, into a malloc'd array.  0, or -1 with an exception. */
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
        uint32_t id = ft_intern_code(tracer, ft_frame_code(frame), frame);
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
    /* A thread state newer than every registered one (ids grow): the
     * common miss, a new thread's first event, without a walk over
     * thousands of ended threads. */
    if (tstate_id > tracer->max_tstate_id) {
        return NULL;
    }
    /* Newest first: the later a thread registered, the likelier it is
     * still running. */
    for (Py_ssize_t i = tracer->nthreads - 1; i >= 0; i--) {
        if (tracer->threads[i]->tstate_id == tstate_id) {
            return tracer->threads[i];
        }
    }
    return NULL;
}

ft_thread *
ft_find_thread_of(ft_tracer *tracer, PyThreadState *ts)
{
    ft_thread *th = ft_find_thread(tracer, ts);
    if (th != NULL) {
        return th;
    }
    /* Two OS threads alive at once never share an ident. */
    unsigned long ident = ft_tstate_thread_id(ts);
    for (Py_ssize_t i = tracer->nthreads - 1; i >= 0; i--) {
        th = tracer->threads[i];
        if (th->thread_id == ident && ft_thread_os_alive(th)) {
            th->tstate_id = PyThreadState_GetID(ts);
            if (th->tstate_id > tracer->max_tstate_id) {
                tracer->max_tstate_id = th->tstate_id;
            }
            return th;
        }
    }
    return NULL;
}


/* Registers (or finds, by thread state) the thread ts with tracer, capturing
 * its Python stack (from top, borrowed, may be NULL) as the base stack at
 * base_ticks.  Returns the thread (owned by tracer), or NULL with an
 * exception set. */
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
    if (thread->tstate_id > tracer->max_tstate_id) {
        tracer->max_tstate_id = thread->tstate_id;
    }
    return thread;

error:
    ft_thread_free(thread);
    return NULL;
}

void
ft_free_thread_array(ft_thread **threads, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        ft_thread_free(threads[i]);
    }
    free(threads);
}

void
ft_free_threads(ft_tracer *self)
{
    ft_free_thread_array(self->threads, self->nthreads);
    self->threads = NULL;
    self->nthreads = 0;
    self->threads_cap = 0;
    self->max_tstate_id = 0;
    ft_budget_reset(self);
}

#if FT_RESUME_WAITS_BEFORE_EVENT
/* Whether frame, the innermost of another thread, was pushed and has not
 * started: 3.13+ checks the eval breaker in RESUME before PY_START (and
 * PY_RESUME after a yield; 3.12 after them), so a thread can wait for the
 * GIL there, its frame on its stack and no call recorded.  Its RESUME is
 * then where the frame is. */
static int
frame_not_started(PyFrameObject *frame)
{
    int lasti = PyFrame_GetLasti(frame);
    if (lasti < 0) {
        return 1;  /* not even at its first instruction */
    }
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *bytes = PyCode_GetCode(code);  /* cached by the code object */
    Py_DECREF(code);
    if (bytes == NULL) {
        PyErr_Clear();
        return 0;
    }
    int pending = 0;
    if (PyBytes_Check(bytes) && lasti + 1 < PyBytes_GET_SIZE(bytes)) {
        const unsigned char *at = (const unsigned char *)PyBytes_AS_STRING(bytes) + lasti;
        /* oparg 0: the function's start; 1: after a yield.  (After
         * `yield from` or `await` RESUME does not wait.) */
        pending = at[0] == RESUME && (at[1] & 3) <= 1;
    }
    Py_DECREF(bytes);
    return pending;
}
#endif

void
ft_take_stop_stack(ft_tracer *self, ft_thread *th, PyThreadState *ts)
{
    if (th == NULL || th->stop_stack != NULL) {
        return;
    }
    PyFrameObject *top = PyThreadState_GetFrame(ts);
#if FT_RESUME_WAITS_BEFORE_EVENT
    if (top != NULL && ts != PyThreadState_Get() && frame_not_started(top)) {
        PyFrameObject *back = PyFrame_GetBack(top);
        Py_DECREF(top);
        top = back;
        PyErr_Clear();  /* the caller's frame could not be made: none */
    }
#endif
    if (ft_capture_stack(self, top, &th->stop_stack, &th->stop_depth) < 0) {
        /* Replay then goes without it: only frames lost to overflow are
         * affected. */
        PyErr_Clear();
        th->stop_stack = NULL;
    }
    else if (th->stop_stack == NULL) {
        th->stop_stack = malloc(sizeof(uint32_t));  /* empty */
    }
    Py_XDECREF(top);
}

/* Whether the exception set is an interrupt, now kept in *kept (or
 * cleared: one is kept).  kept NULL (no caller to raise it to): never. */
int
ft_keep_interrupt(ft_interrupt *kept)
{
    if (kept == NULL || !PyErr_Occurred()
        || PyErr_ExceptionMatches(PyExc_Exception)) {
        return 0;
    }
    if (kept->held) {
        PyErr_Clear();
    }
    else {
        FT_SAVE_EXC(kept->exc);
        kept->held = 1;
    }
    return 1;
}

/* rc, or -1 with the interrupt kept (preferred to another error). */
int
ft_raise_kept(ft_interrupt *kept, int rc)
{
    if (!kept->held) {
        return rc;
    }
    PyErr_Clear();
    kept->held = 0;
    FT_RESTORE_EXC(kept->exc);
    return -1;
}

/* Adds thread's {ident: name} to names, when it has both.  Leaves no
 * exception (an interrupt goes to kept). */
static void
add_thread_name(PyObject *names, PyObject *thread, ft_interrupt *kept)
{
    PyObject *ident = PyObject_GetAttrString(thread, "ident");
    PyObject *name = ident && PyLong_Check(ident)
        ? PyObject_GetAttrString(thread, "name") : NULL;
    if (name != NULL && PyUnicode_Check(name)) {
        PyDict_SetItem(names, ident, name);
    }
    Py_XDECREF(name);
    Py_XDECREF(ident);
    if (!ft_keep_interrupt(kept)) {
        PyErr_Clear();
    }
}

/* {ident: name} of the threads threading knows, or of the calling thread
 * only (caller_only: a thread that starts pays for itself, not for every
 * thread alive; threading has put it in its table before its profile
 * function runs).  New reference; NULL when even that failed.  Runs Python
 * code (the name properties); never raises: names are best effort, and an
 * interrupt goes to kept. */
static PyObject *
names_of_threads(int caller_only, ft_interrupt *kept)
{
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    PyObject *names = PyDict_New();
    PyObject *threading = ft_import("threading");
    PyObject *found = NULL;
    if (threading != NULL && caller_only) {
        found = PyObject_CallMethod(threading, "current_thread", NULL);
    }
    else if (threading != NULL) {
        /* threading._active, {ident: Thread} of the threads started (dummy
         * ones for foreign threads included), copied in C: not through
         * enumerate(), which holds threading's _active_limbo_lock, and
         * leaves it held where an interrupt lands just after the lock's
         * __enter__ (CPython 3.14's `with`). */
        PyObject *active = PyObject_GetAttrString(threading, "_active");
        found = active != NULL && PyDict_Check(active)
            ? PyDict_Values(active) : NULL;
        Py_XDECREF(active);
    }
    if (names != NULL && found != NULL) {
        if (caller_only) {
            add_thread_name(names, found, kept);
        }
        else {
            for (Py_ssize_t i = 0; i < PyList_GET_SIZE(found); i++) {
                add_thread_name(names, PyList_GET_ITEM(found, i), kept);
            }
        }
    }
    Py_XDECREF(found);
    Py_XDECREF(threading);
    if (!ft_keep_interrupt(kept)) {
        PyErr_Clear();
    }
    FT_RESTORE_EXC(saved);
    return names;
}

PyObject *
ft_thread_names(ft_interrupt *kept)
{
    return names_of_threads(0, kept);
}

PyObject *
ft_caller_thread_names(void)
{
    return names_of_threads(1, NULL);
}

/* Whether a thread state with this id (unique in the process) is alive. */
int
ft_tstate_id_alive(uint64_t id)
{
    PyThreadState *p = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; p != NULL; p = PyThreadState_Next(p)) {
        if (PyThreadState_GetID(p) == id) {
            return 1;
        }
    }
    return 0;
}

/* Gives thread its name from such a dict.  Runs no Python code. */
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

/* ---- a thread's ring ------------------------------------------------ */

/* ft_ring_alloc(), holding the GIL: a new ring commits one page
 * (microseconds), less than releasing the GIL and taking it back could
 * cost while other threads run.  Callers still check their state after. */
int
ft_alloc_ring(ft_ring *ring, uint64_t capacity, int64_t origin)
{
    return ft_ring_alloc(ring, capacity, origin);
}

/* Gives th, the calling thread's, its ring, counted in the tracer's memory,
 * and its ids from the thread itself.  Runs no Python code. */
void
ft_adopt_ring(ft_tracer *tracer, ft_thread *th, const ft_ring *ring)
{
    /* A ring the memory bound discarded stays counted (the thread went on
     * recording, later, in a new one).  So does a packed one, discarded
     * here: a thread taken for ended that records again (C code entering
     * it through PyGILState_Ensure(): see budget.c) cannot append to it. */
    if (th->ring.packed != NULL) {
        ft_budget_discard_packed(tracer, th);
    }
    uint64_t discarded = th->ring.discarded;
    th->ring = *ring;
    th->ring.discarded += discarded;
    th->ended = 0;
    /* Its OS thread, before any sweep looks (a new ring may start one):
     * while it runs, the ring is not taken for ended. */
    if (th->os_thread == NULL) {
        th->os_thread = os_thread_current();
    }
    th->tstate_id = PyThreadState_GetID(PyThreadState_Get());
    if (th->tstate_id > tracer->max_tstate_id) {
        tracer->max_tstate_id = th->tstate_id;
    }
    ft_budget_adopted(tracer, th);
    /* A thread state registered before its OS thread bound it had no ids
     * yet (3.12+: 0), or its creator's (3.10/3.11). */
    th->thread_id = PyThread_get_thread_ident();
    th->native_id = PyThread_get_thread_native_id();
}

int
ft_thread_first_ring(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
                     int64_t *ts)
{
    /* A thread's first record: allocate its ring now, so idle threads cost
     * nothing.  The checks after are for a stop meanwhile (none can happen
     * while the GIL is held, but they cost nothing). */
    ft_ring ring;
    PyObject *holder = hook != NULL ? (PyObject *)hook : (PyObject *)tracer;
    Py_INCREF(holder);
    int rc = ft_alloc_ring(&ring, th->capacity, *ts);
    tracer->state->count_rings++;
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
        ft_adopt_ring(tracer, th, &ring);
    }
    /* All references but ours may have gone meanwhile: then releasing it
     * frees the tracer (the monitoring backend's holder) or stops it. */
    int last = Py_REFCNT(holder) == 1;
    Py_DECREF(holder);
    if (stopped || rc < 0 || last) {
        return -1;
    }
    /* Leave the allocation out of the event. */
    *ts = ft_clock_ticks(&tracer->clock);
    return 0;
}

/* ---- the caller's thread, through thread-local storage -------------- */

FT_TLS ft_thread_cache ft_tls_cache;
/* Guarded by the GIL. */
static uint64_t last_generation;

/* A new generation, for a tracer that starts. */
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
            PyObject *names = ft_thread_names(NULL);  /* Python code */
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
