/* Module state and the structures shared by the C files.  Module state is
 * the only "global": no static PyObject* anywhere. */
#ifndef FT_STATE_H
#define FT_STATE_H

#include "compat.h"
#include "clock.h"
#include "replay.h"
#include "functable.h"
#include "ring.h"
#include "monitor_tool.h"

#include <stdint.h>

struct ft_tracer;

typedef struct {
    PyTypeObject *tracer_type;   /* strong */
    PyTypeObject *hook_type;     /* strong */
    PyTypeObject *event_type;    /* strong */
    PyTypeObject *range_type;    /* strong */
    PyTypeObject *callback_type; /* strong: sys.monitoring callbacks (3.12+),
                                    else NULL */
    PyObject *range_sink;        /* strong: list receiving range marks while
                                    a session records, or NULL */
    PyObject *thread_bootstrap;  /* strong: callable given to
                                    threading.setprofile() */
    PyObject *str_py;            /* strong: "py" */
    PyObject *str_c;             /* strong: "c" */
    PyObject *str_builtin;       /* strong: "<built-in>" */
    /* The tracer that is active in this interpreter, or NULL.  Borrowed: a
     * tracer clears it when it stops, and stops before it is freed. */
    struct ft_tracer *active;
    /* The tracer inside its start(), before it is active, or NULL, and
     * the thread running that start().  Borrowed: start()'s caller holds
     * it meanwhile. */
    struct ft_tracer *starting;
    unsigned long starting_thread;
} ft_state;

static inline ft_state *
ft_get_state(PyObject *module)
{
    void *state = PyModule_GetState(module);
    assert(state != NULL);
    return (ft_state *)state;
}

extern PyModuleDef ft_module_def;

/* Module state of one of the module's types or a subclass of it; NULL with
 * an exception if not found. */
ft_state *ft_state_of_type(PyTypeObject *type);

/* Everything recorded for one thread.  Owned by its tracer; the hook reaches
 * it through the thread's hook object. */
typedef struct {
    ft_ring ring;
    uint64_t capacity;        /* ring capacity, allocated at first event */
    uint64_t lost;            /* events not recorded: no memory */
    unsigned long thread_id;  /* threading.get_ident() */
    unsigned long native_id;  /* threading.get_native_id(), 0 if unknown */
    uint64_t tstate_id;       /* PyThreadState.id: unique in the process */
    int64_t base_ticks;       /* when the hook was installed on the thread */
    uint32_t *base_stack;     /* ids of the Python frames on the stack then,
                                 outermost first */
    Py_ssize_t base_depth;
    uint32_t *stop_stack;     /* the same, at stop(); NULL if not taken */
    Py_ssize_t stop_depth;
    PyObject *name;           /* strong: threading's name for it, or NULL */
} ft_thread;

/* The profile function's argument: on 3.10/3.11 one per thread (thread
 * set), on 3.12+ one for all threads (thread NULL: the hook finds the
 * caller's thread through ft_cached_thread()); also the owner of the
 * sys.monitoring callbacks (thread NULL).  Both pointers are borrowed and set
 * to NULL when the tracer stops, which turns the hook into a no-op. */
typedef struct {
    PyObject_HEAD
    struct ft_tracer *tracer;
    ft_thread *thread;
    uint64_t generation;  /* the tracer's, kept after it stopped */
} ft_hookobject;

enum {
    FT_BACKEND_SETPROFILE = 0,
    FT_BACKEND_MONITORING,
};

enum {
    FT_PHASE_NEW = 0,
    FT_PHASE_ACTIVE,
    FT_PHASE_STOPPED,
    FT_PHASE_CLEARED,
};

typedef struct ft_tracer {
    PyObject_HEAD
    ft_state *state;          /* borrowed: the type keeps the module alive */
    uint64_t buffer_size;     /* records per thread */
    int c_calls;              /* record C function calls */
    int phase;                /* FT_PHASE_* */
    int64_t start_ns;
    int64_t stop_ns;
    ft_clock clock;           /* ticks of the records -> ns */
    ft_functable funcs;
    ft_thread **threads;      /* in registration order */
    Py_ssize_t nthreads;
    Py_ssize_t threads_cap;
    PyObject *hooks;          /* strong: list of this tracer's per-thread
                                 hook objects (3.10/3.11 setprofile) */
    PyObject *hook;           /* strong: the hook object of all threads
                                 (3.12+ setprofile), or NULL */
    PyObject *prev_thread_hook;  /* strong: threading's profile hook before
                                    start(), restored by stop() */
    uint64_t intern_failures; /* functions that could not be named */
    int backend;              /* FT_BACKEND_* */
    PyObject *monitor;        /* strong: the callbacks' owner (a hook object
                                 with no thread), monitoring backend only */
    uint64_t generation;      /* unique per start(): the key of the threads'
                                 cache (ft_cached_thread()) */
    ft_anchor fork_anchor;    /* taken just before os.fork(), while active */
    int fork_anchored;
    PyObject *weakreflist;
} ft_tracer;

/* Which thread's ring this OS thread records into, for the tracer started
 * as generation `generation` (generations are never reused, unlike
 * addresses): the sys.monitoring callbacks' and (3.12+) the profile hook's
 * way to their thread.  Set by ft_thread_of_caller().  One struct: one
 * address to look up per event. */
typedef struct {
    uint64_t generation;
    ft_thread *thread;
} ft_thread_cache;
extern FT_TLS ft_thread_cache ft_tls_cache;

/* A new generation, for a tracer that starts. */
uint64_t ft_next_generation(void);

/* Slow path: the caller's thread under tracer, registering it if new (with
 * the frames below the event's as its base stack; starting: the event is a
 * call, whose frame is the callee), and caching it.  Runs Python code (its
 * name): NULL when the tracer stopped meanwhile, or on failure. */
ft_thread *ft_thread_of_caller(ft_tracer *tracer, int starting);

/* Whether this thread's cache is for tracer: then ft_tls_cache.thread is
 * the caller's thread, never NULL. */
static inline int
ft_cache_hit(const ft_tracer *tracer)
{
    return ft_tls_cache.generation == tracer->generation;
}

/* The thread of the caller if this thread's cache is for tracer (the
 * common case), else NULL. */
static inline ft_thread *
ft_cached_thread(const ft_tracer *tracer)
{
    return FT_LIKELY(ft_cache_hit(tracer)) ? ft_tls_cache.thread : NULL;
}

/* Makes th, the caller's thread under tracer, what the cache gives. */
static inline void
ft_cache_thread(const ft_tracer *tracer, ft_thread *th)
{
    ft_tls_cache.generation = tracer->generation;
    ft_tls_cache.thread = th;
}

/* hook.c */
int ft_hook(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);
/* The thread registered with tracer for thread state ts, or NULL. */
ft_thread *ft_find_thread(const ft_tracer *tracer, PyThreadState *ts);
/* Registers (or finds, by thread state) the thread ts with tracer, capturing
 * its Python stack (from top, borrowed, may be NULL) as the base stack at
 * base_ticks.  Returns the thread (owned by tracer), or NULL with an
 * exception set. */
ft_thread *ft_register_thread(ft_tracer *tracer, PyThreadState *ts,
                              PyFrameObject *top, int64_t base_ticks);
#if !FT_SHARED_HOOK
/* A new hook object for thread th (a new reference; tracer->hooks holds
 * another), or NULL with an exception set. */
ft_hookobject *ft_new_hook(ft_tracer *tracer, ft_thread *th);
#endif
/* Ids of ts's Python frames, outermost first, into a malloc'd array. */
int ft_capture_stack(ft_tracer *tracer, PyFrameObject *top,
                     uint32_t **stack, Py_ssize_t *depth);
void ft_thread_free(ft_thread *thread);
/* ft_ring_alloc() with the GIL released meanwhile (faulting a ring in takes
 * milliseconds).  Other threads run: callers check their state again. */
int ft_ring_alloc_released(ft_ring *ring, uint64_t capacity, int64_t origin);
/* {ident: name} of the threads threading knows (new reference; NULL when
 * even that failed).  Runs Python code; never raises: names are best
 * effort. */
PyObject *ft_thread_names(void);
/* Gives thread its name from such a dict.  Runs no Python code. */
void ft_name_thread(ft_thread *thread, PyObject *names);
/* A thread's first record: its ring, faulted in with the GIL released
 * (hook: the thread's own hook object (3.10/3.11), or NULL).
 * 0 with *ts the time after, or -1: record nothing. */
int ft_thread_first_ring(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
                         int64_t *ts);
/* Gives th, the calling thread's, its ring, and its ids from the thread
 * itself.  Runs no Python code. */
void ft_thread_adopt_ring(ft_thread *th, const ft_ring *ring);
/* The id of C function func under key, naming it if new (slow path: runs
 * Python code; the caller holds a reference to tracer).  FT_NO_ID if it
 * cannot be named. */
uint32_t ft_c_function_id(ft_tracer *tracer, PyObject *func, const void *key);

/* Everything ft_record_id() does not do inline: a thread's first record
 * (its ring), lost and ignored ids, two-word records, the wrap (hook.c). */
void ft_record_id_slow(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
                       int64_t ts, uint32_t id, uint32_t kind);

/* The end of the hot path, shared by both backends: one inline store in the
 * common case, a call out of line otherwise. */
static inline void
ft_record_id(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
             int64_t ts, uint32_t id, uint32_t kind)
{
    if (FT_UNLIKELY(!ft_ring_try_push(&th->ring, ts, id, kind))) {
        ft_record_id_slow(tracer, th, hook, ts, id, kind);
    }
}

/* monitor.c: the sys.monitoring backend (3.12+), on tool id 2
 * (monitor_tool.h). */
#if FT_HAVE_MONITORING
int ft_monitor_start(ft_tracer *tracer);
void ft_monitor_stop(ft_tracer *tracer);
#endif

/* Records one event of thread th from the thread-bootstrap path (see
 * module.c); hook: the object the profile function was installed with. */
void ft_hook_record(ft_hookobject *hook, ft_thread *th, int64_t ticks,
                    PyFrameObject *frame, int what, PyObject *arg);

/* ranges.c */
extern PyType_Spec ft_range_spec;
extern PyMethodDef ft_set_range_sink_def;

/* tracer.c */
/* os.fork() while a tracer is active: the parent goes on tracing; in the
 * child the tracer is stopped as of the moment just before the fork. */
void ft_tracer_before_fork(ft_tracer *tracer);
void ft_tracer_after_fork_child(ft_tracer *tracer);
extern PyType_Spec ft_tracer_spec;
extern PyType_Spec ft_hook_spec;

/* event_type.c: frametrace.Event. */
PyTypeObject *ft_event_type_new(PyObject *module);
/* A function's shared (name, filename, lineno, kind) tuple, for
 * ft_event_from_record(). */
PyObject *ft_event_info(ft_state *state, PyObject *name, PyObject *filename,
                        int lineno, int is_c);
/* An Event of a replayed record; info from ft_event_info(), thread the
 * (thread_id, native_thread_id) tuple.  Both must hold only str and int. */
PyObject *ft_event_from_record(PyTypeObject *type, PyObject *info,
                               PyObject *thread, const ft_event *ev);

/* events.c: replays a stopped tracer's records into a list of events. */
PyObject *ft_build_events(ft_tracer *tracer);
/* Replays every thread into vec; (*thread_end)[i] is the end of thread
 * i's events (malloc'd, the caller frees it, also on failure).  Pure C:
 * 0, or -1 when out of memory. */
int ft_replay_all(ft_tracer *tracer, ft_eventvec *vec, size_t **thread_end);

/* export_chrome.c and export_perfetto.c: Tracer._write_chrome() and
 * Tracer._write_perfetto().  ft_export_replay() is their common start: a
 * stopped tracer's events replayed with the GC off (so that no other thread
 * can clear the tracer meanwhile); 0, or -1 with an exception set. */
int ft_export_replay(ft_tracer *tracer, const char *who, ft_eventvec *vec,
                     size_t **thread_end);
PyObject *ft_write_chrome(ft_tracer *tracer, PyObject *args, PyObject *kwargs);
PyObject *ft_write_perfetto(ft_tracer *tracer, PyObject *args, PyObject *kwargs);

#endif /* FT_STATE_H */
