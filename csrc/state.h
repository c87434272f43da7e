/* The one header the product's C files share: the module state (the only
 * "global": no static PyObject* anywhere), the tracer and its threads, and
 * each file's functions that others call, grouped by the file that defines
 * them.  The plain-C parts have their own headers (ring.h, clock.h,
 * functable.h, replay.h, export_out.h, monitor_tool.h). */
#ifndef FT_STATE_H
#define FT_STATE_H

#include "compat.h"
#include "clock.h"
#include "replay.h"
#include "filters.h"
#include "functable.h"
#include "ring.h"
#include "monitor_tool.h"

#include <stdatomic.h>
#include <stdint.h>

struct ft_tracer;
struct ft_recording;

/* One OS thread, for as long as it runs: C code that calls Python through
 * PyGILState_Ensure() gets a new thread state per call, so a thread state
 * that is gone does not mean a thread that ended.  Shared by the OS
 * thread (a pthread key, whose destructor clears alive when the thread
 * exits, without the GIL) and the ft_threads that recorded on it: refs
 * counts both, atomically; the last to let go frees it. */
typedef struct {
    atomic_int refs;
    atomic_int alive;
} ft_os_thread;

/* Tracer(buffer_size=...): records per thread, also the module's
 * DEFAULT_BUFFER_SIZE and MAX_BUFFER_SIZE.  2**28 records are 4 GiB per
 * thread: anything larger is a mistake. */
#define FT_DEFAULT_BUFFER_SIZE ((long long)1 << 20)
#define FT_MAX_BUFFER_SIZE ((long long)1 << 28)
/* Bytes all of a tracer's rings may hold (max_memory): 1 GiB. */
#define FT_DEFAULT_MAX_MEMORY ((long long)1 << 30)

typedef struct {
    PyTypeObject *tracer_type;   /* strong */
    PyTypeObject *hook_type;     /* strong */
    PyTypeObject *event_type;    /* strong */
    PyTypeObject *range_type;    /* strong */
    PyTypeObject *thread_info_type;  /* strong: frametrace.ThreadInfo */
    PyTypeObject *stats_type;    /* strong: frametrace.Stats */
    PyTypeObject *recording_type;  /* strong: recording.c's */
    PyObject *conflict_error;    /* strong: frametrace.ConflictError */
    PyTypeObject *callback_type; /* strong: sys.monitoring callbacks (3.12+),
                                    else NULL */
    PyObject *range_sink;        /* strong: list receiving range marks while
                                    a session records, or NULL */
    PyObject *thread_bootstrap;  /* strong: callable given to
                                    threading.setprofile() */
    PyObject *str_py;            /* strong: "py" */
    PyObject *str_c;             /* strong: "c" */
    PyObject *str_builtin;       /* strong: "<built-in>" */
    PyObject *str_name;          /* strong: "__name__" */
    PyObject *str_module;        /* strong: "__module__" */
    /* sys.monitoring.DISABLE (strong, 3.12+, taken at the first monitoring
     * start), and the filters (a tracer's ft_filters.spec, strong) in force
     * when a callback last returned it, or NULL: DISABLE outlives the
     * tracer, and a tracer with other filters must restart the events. */
    PyObject *monitoring_disable;
    PyObject *disabled_spec;
    /* The tracer that is active in this interpreter, or NULL.  Borrowed: a
     * tracer clears it when it stops, and stops before it is freed. */
    struct ft_tracer *active;
    /* The tracer inside its start(), before it is active, or NULL, and
     * the thread running that start().  Borrowed: start()'s caller holds
     * it meanwhile. */
    struct ft_tracer *starting;
    unsigned long starting_thread;
    /* The tracer inside its stop(), or NULL: no tracer starts meanwhile
     * (its removal would take the new one's hook too).  Borrowed: stop()'s
     * caller (or the finalizer) holds it meanwhile. */
    struct ft_tracer *stopping;
    unsigned long stopping_thread;
    /* What start()/arm() did, for the tests (read by
     * frametrace._testing.lifecycle_counts()):
     * rings allocated by the lifecycle (lifecycle.c, threads.c,
     * bootstrap.c), profile functions set by it (one count per act: every
     * thread at once, or one thread), sys.monitoring tool ids taken. */
    uint64_t count_rings;
    uint64_t count_hook_installs;
    uint64_t count_tool_takes;
    uint64_t count_restarts;     /* sys.monitoring.restart_events() calls */
} ft_state;

static inline ft_state *
ft_get_state(PyObject *module)
{
    void *state = PyModule_GetState(module);
    assert(state != NULL);
    return (ft_state *)state;
}

/* Everything recorded for one thread.  Owned by its tracer; the hook reaches
 * it through the thread's hook object. */
typedef struct {
    ft_ring ring;
    uint64_t capacity;        /* ring capacity, allocated at first event */
    uint64_t lost;            /* events not recorded: no memory */
    unsigned long thread_id;  /* threading.get_ident() */
    unsigned long native_id;  /* threading.get_native_id(), 0 if unknown */
    uint64_t tstate_id;       /* PyThreadState.id: unique in the process;
                                 the newest seen on its OS thread */
    ft_os_thread *os_thread;  /* a reference: the OS thread its ring was
                                 given on, or NULL (no ring yet) */
    uint8_t of_threading;     /* threading started it (its bootstrap ran
                                 there): its one thread state ends with it */
    int64_t base_ticks;       /* when the hook was installed on the thread */
    uint32_t *base_stack;     /* ids of the Python frames on the stack then,
                                 outermost first */
    Py_ssize_t base_depth;
    uint32_t *stop_stack;     /* the same, at stop(); NULL if not taken */
    Py_ssize_t stop_depth;
    PyObject *name;           /* strong: threading's name for it, or NULL */
    int64_t loss_ticks;       /* 0, or when its recording ended early (its
                                 hook displaced): its last record */
    uint8_t displaced;        /* FT_DISPLACED_*: why its recording ended
                                 early (set by stop()) */
    uint8_t at_stop;          /* FT_AT_STOP_*: its thread state at stop() */
    uint8_t hook_restored;    /* its hook came back through sys.setprofile()
                                 after another tool had replaced it */
    uint64_t dropped_events;  /* events lost entirely, once counted by a
                                 replay after the stop */
    int dropped_counted;
    uint8_t ended;            /* a sweep found its thread state gone: its
                                 ring was trimmed (budget.c) */
    uint8_t queued;           /* ended, its ring to be packed by new
                                 threads (budget.c's to_pack counts it) */
    uint8_t open_known;       /* open_at_end counted, for the ring as it
                                 was at open_words */
    int64_t open_at_end;      /* Python frames its records leave open */
    int64_t window_ticks;     /* a snapshot's copy: where its window
                                 starts (records before are left out), or
                                 0 */
    uint64_t open_words;      /* its ring's words and packed records then */
} ft_thread;

/* Why a thread's recording ended before stop() (ft_thread.displaced). */
enum {
    FT_DISPLACED_NO = 0,
    FT_DISPLACED_REPLACED,  /* another profile function, or none, at stop */
    FT_DISPLACED_ENDED,     /* it ended with frames whose end was never
                               recorded: its hook had gone before */
    FT_DISPLACED_RESTORED,  /* its hook was replaced and later put back:
                               the events in between are missing */
    FT_DISPLACED_TOOL_ID,   /* another tool freed or changed the
                               sys.monitoring tool id */
};

/* Whether a tracer of the setprofile backend saw a thread run Python code
 * without its hook (ft_tracer.loss.unhooked): a thread state that C code made
 * (PyGILState_Ensure(): ctypes, cffi and pybind11 callbacks from C
 * threads), or a thread _thread started without threading. */
enum {
    FT_UNHOOKED_NO = 0,
    FT_UNHOOKED_SEEN,      /* to be warned about */
    FT_UNHOOKED_WARNED,
};

/* A registered thread's thread state when stop() looked (ft_thread.at_stop). */
enum {
    FT_AT_STOP_GONE = 0,  /* the thread had ended */
    FT_AT_STOP_OURS,      /* alive, recording through this tracer */
    FT_AT_STOP_OTHER,     /* alive, with another profile function or none */
};

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

/* Which of start() and stop() is running, if any: Python code runs inside
 * both (audit hooks, threading, other threads while the GIL is released),
 * and may call them, or clear(), again. */
enum {
    FT_IN_NONE = 0,
    FT_IN_START,
    FT_IN_STOP,
};

/* NEW -> (ARMED ->) ACTIVE -> STOPPED -> CLEARED; disarm() takes ARMED back
 * to NEW.  ARMED: the hook is on every thread (or the tool id taken, its
 * events set), so that CPython has instrumented the code already, but
 * nothing records: no clock, no threads. */
enum {
    FT_PHASE_NEW = 0,
    FT_PHASE_ARMED,
    FT_PHASE_ACTIVE,
    FT_PHASE_STOPPED,
    FT_PHASE_CLEARED,
};

/* ft_tracer's fields in groups, each written by one file (or, for the
 * hook objects, one pair of files): */

/* install.c and install_perthread.c: the hook objects and threading's
 * profile function. */
typedef struct {
    PyObject *per_thread;     /* strong: list of this tracer's per-thread
                                 hook objects (3.10/3.11 setprofile) */
    PyObject *shared;         /* strong: the hook object of all threads
                                 (3.12+ setprofile), or NULL */
    PyObject *prev_threading; /* strong: threading's profile hook before
                                 start(), restored by stop() */
} ft_install;

/* lifecycle.c: what arm() prepares so that start() runs no Python code. */
typedef struct {
    ft_ring ring;             /* the arming thread's ring, given to the
                                 thread that calls start() */
    PyObject *names;          /* strong: {ident: name} of the threads then,
                                 or NULL */
} ft_armed;

/* fork.c */
typedef struct {
    ft_anchor anchor;         /* taken just before os.fork(), while active */
    int anchored;
    int stop_pending;         /* a forked child's stop, latched when the
                                 start() it interrupted returns */
} ft_fork;

/* displaced.c: what stop() found lost, for the warnings. */
typedef struct {
    int unwarned;             /* stop() found displaced threads that its
                                 caller has not warned about yet */
    int unhooked;             /* FT_UNHOOKED_*: a thread ran Python code
                                 the setprofile backend could not hook */
} ft_loss;

/* budget.c: the memory bound over all rings (max_memory). */
typedef struct {
    uint64_t max_memory;      /* bytes all rings may hold */
    uint64_t ring_bytes;      /* bytes they hold now */
    Py_ssize_t rings_since_sweep;  /* rings adopted since the last look for
                                      ended threads */
    Py_ssize_t sweep_every;   /* how many make the next look */
    Py_ssize_t to_pack;       /* threads queued to have their rings packed */
    Py_ssize_t pack_from;     /* none queued before this index in threads */
} ft_budget;

/* release.c: the function table's sweep. */
typedef struct {
    uint32_t at;              /* live functions that make the next sweep */
    int scheduled;            /* a pending call holds the tracer for it */
    uint64_t sweeps;          /* sweeps done */
} ft_release;

typedef struct ft_tracer {
    PyObject_HEAD
    ft_state *state;          /* borrowed: the type keeps the module alive */
    uint64_t buffer_size;     /* records per thread */
    int c_calls;              /* record C function calls */
    int phase;                /* FT_PHASE_* */
    int in_call;              /* FT_IN_*: inside start() or stop() */
    int64_t start_ns;
    int64_t stop_ns;
    ft_clock clock;           /* ticks of the records -> ns */
    ft_functable funcs;
    ft_thread **threads;      /* in registration order */
    uint64_t max_tstate_id;   /* the largest tstate_id among them */
    Py_ssize_t nthreads;
    Py_ssize_t threads_cap;
    ft_install install;
    uint64_t intern_failures; /* functions that could not be named */
    int backend;              /* FT_BACKEND_* */
    PyObject *monitor;        /* strong: the callbacks' owner (a hook object
                                 with no thread), monitoring backend only */
    uint64_t generation;      /* unique per start(): the key of the threads'
                                 cache (ft_cached_thread()) */
    ft_fork fork;
    long monitor_events;      /* the events the tool id was given, as
                                 get_events() reports them */
    ft_loss loss;
    /* Once stopped: what it recorded (recording.h), made by stop() or
     * snapshot(); threads and clock above are then views of its own.
     * Strong; clear() drops it. */
    struct ft_recording *recording;
    ft_armed armed;
    ft_budget budget;
    PyObject *weakreflist;
    ft_filters filters;       /* include= and ignore= */
    ft_release release;
} ft_tracer;

/* The fewest live functions a sweep of the function table waits for. */
#define FT_RELEASE_MIN 2048

/* ==== module.c ==== */

extern PyModuleDef ft_module_def;

/* Module state of one of the module's types or a subclass of it; NULL with
 * an exception if not found. */
ft_state *ft_state_of_type(PyTypeObject *type);

/* ==== lifecycle.c, threads.c, install.c, snapshot.c, bootstrap.c, fork.c:
 * each has a header of its own (lifecycle.h, threads.h, install.h,
 * snapshot.h, bootstrap.h, fork.h). ==== */

/* ==== displaced.c: threads whose recording ended early ==== */

/* With the setprofile backend: notes in tracer->loss.unhooked whether ts
 * runs Python code without any profile function and is not a thread of
 * threading (whose bootstrap hooks it).  Pure C, GC off; for the walks
 * over the thread states of budget.c and stop(). */
void ft_note_unhooked(ft_tracer *tracer, PyThreadState *ts);

/* After the hook is removed at stop (ft_thread.at_stop set before): flags
 * the threads whose recording ended early, or had a gap, and sets their
 * loss_ticks; tool_lost: the monitoring tool id was freed or changed by
 * another tool.  Pure C. */
void ft_find_displaced(ft_tracer *tracer, int tool_lost);
/* After ft_tracer_stop(): one RuntimeWarning per displaced thread, once,
 * and one if a thread ran Python code unhooked (ft_note_unhooked()).
 * 0, or -1 with the exception of a warning turned into an error. */
int ft_tracer_warn_displaced(ft_tracer *tracer);
/* The number of Python frames th's records leave open (called, never
 * returned), or -1 when out of memory: a replay of its ring, kept until
 * the ring changes. */
int64_t ft_thread_open_python(ft_thread *th);
/* Notes n as what ft_thread_open_python() gives for th's ring as it is. */
void ft_thread_note_open(ft_thread *th, int64_t n);
/* Tracer.displaced: [ThreadInfo(serial, thread_id, native_thread_id, name,
 * None)] of the displaced threads (a new list), or NULL with an
 * exception. */
PyObject *ft_displaced_list(ft_tracer *tracer);
/* The hook object's tp_call: it is called as a Python profile function
 * when a tool that saved it (sys.getprofile()) puts it back. */
PyObject *ft_hook_call(PyObject *hook, PyObject *args, PyObject *kwargs);

/* ==== release.c: the function table's sweep ==== */

/* Releases the function table's entries that no retained record or stack
 * references, and frees those released before and still unreferenced
 * (functable.h), if the tracer records and nothing reads its records.
 * Runs Python code (what the freed entries held goes).  The entries freed,
 * or -1 with MemoryError. */
int64_t ft_release_functions(ft_tracer *tracer);
/* A pending call in the main interpreter that sweeps, unless one is
 * scheduled already. */
void ft_release_schedule(ft_tracer *tracer);
/* After a new function entered the table: a sweep when it has grown
 * enough. */
static inline void
ft_release_check(ft_tracer *tracer)
{
    if (FT_UNLIKELY(tracer->funcs.used >= tracer->release.at)) {
        ft_release_schedule(tracer);
    }
}

/* ==== hook.c: the PyEval_SetProfile backend's hot path ==== */

/* The profile function (Py_tracefunc) of every traced thread; obj is its
 * hook object. */
int ft_hook(PyObject *obj, PyFrameObject *frame, int what, PyObject *arg);

/* Records one event of thread th from the thread-bootstrap path
 * (bootstrap.c); hook: the object the profile function was installed
 * with. */
void ft_hook_record(ft_hookobject *hook, ft_thread *th, int64_t ticks,
                    PyFrameObject *frame, int what, PyObject *arg);

/* ==== budget.c: the memory bound over all rings (max_memory) ==== */

/* A new tracer's bound: max_memory bytes. */
void ft_budget_init(ft_tracer *tracer, uint64_t max_memory);
/* The tracer's threads are gone (freed): nothing counted, nothing queued. */
void ft_budget_reset(ft_tracer *tracer);
/* Counts th's ring, copied (a snapshot's), in the tracer's total. */
void ft_budget_count(ft_tracer *tracer, const ft_thread *th);
/* th's ring, packed, is discarded (it stays counted as dropped): a thread
 * taken for ended that records again cannot append to it. */
void ft_budget_discard_packed(ft_tracer *tracer, ft_thread *th);
/* Counts th's ring, just adopted, in the tracer's total; every so many new
 * rings, looks for ended threads. */
void ft_budget_adopted(ft_tracer *tracer, ft_thread *th);
/* Finds the threads that ended (by their thread states; never keep, the
 * calling thread's, or NULL) and gives back what their rings hold past
 * their records. */
void ft_budget_sweep(ft_tracer *tracer, const ft_thread *keep);
/* th's ring is full and may grow: grows it within max_memory (packing,
 * then discarding ended threads' rings, oldest first), or stops its
 * growth. */
void ft_budget_grow(ft_tracer *tracer, ft_thread *th);

/* Everything ft_record_id() does not do inline: a thread's first record
 * (its ring), lost and ignored ids, two-word records, the wrap. */
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

/* ==== filters.c: include= and ignore= ==== */

/* Id of code, adding it if new, ignored if the tracer's filters say so
 * (decided once, here).  frame: one running code (borrowed), which gives
 * its module; NULL: the current frame.  Runs no Python code, never raises.
 * FT_NO_ID when out of memory. */
uint32_t ft_intern_code(ft_tracer *tracer, PyCodeObject *code,
                        PyFrameObject *frame);

/* ==== cnames.c: naming C functions (slow path) ==== */

/* First sighting of the C function called through arg, filed under key:
 * names it (Python API, which can run arbitrary code and let other threads
 * run) and adds it to the function table, by pure C after that.  Never
 * raises.  The id, or FT_NO_ID if it cannot be named or the tracer stopped
 * meanwhile. */
uint32_t ft_intern_c_function(ft_tracer *tracer, PyObject *arg,
                              const void *key);
/* The id of C function func under key, naming it if new (slow path: runs
 * Python code; the caller holds a reference to tracer).  FT_NO_ID if it
 * cannot be named. */
uint32_t ft_c_function_id(ft_tracer *tracer, PyObject *func, const void *key);

/* ==== monitor.c: the sys.monitoring backend (3.12+) ==== */

#if FT_HAVE_MONITORING
/* Takes the tool id (monitor_tool.h) with the callbacks, owned by a new
 * hook object of tracer.  0, or -1 with an exception set. */
int ft_monitor_start(ft_tracer *tracer);
/* Silences the callbacks and gives the tool id back; never fails.  1, or
 * 0 when another tool had freed or changed the tool id meanwhile (then
 * recording stopped or went wrong on every thread). */
int ft_monitor_stop(ft_tracer *tracer);
#endif

/* ==== tracer.c ==== */

extern PyType_Spec ft_tracer_spec;
/* A new tracer of tracer's type and options, never started, with no
 * function table yet (ft_functable_init() or a copy makes one).  NULL with
 * an exception. */
ft_tracer *ft_tracer_like(ft_tracer *tracer);

/* ==== thread_info.c: a thread in the API and the exports ==== */

/* The tid the writers give a thread whose native id (or ident) an earlier
 * thread of the same trace had: this plus its serial.  Above any Linux tid
 * (at most 2**22) and within the int32 that Perfetto's tid fields hold. */
#define FT_SYNTHETIC_TID_BASE ((uint64_t)1 << 30)
/* The frametrace.ThreadInfo structseq type (new reference, or NULL). */
PyTypeObject *ft_thread_info_type_new(void);
/* The frametrace.Stats structseq type (new reference, or NULL). */
PyTypeObject *ft_stats_type_new(void);
/* ThreadInfo(serial, thread_id, native_thread_id, name, dropped) of
 * tracer->threads[index] (dropped: borrowed, an int, or None or NULL for
 * None); the one shape of a thread in the API (tracer.threads; a list of
 * some threads should reuse it).  NULL with an exception. */
PyObject *ft_thread_info(ft_tracer *tracer, Py_ssize_t index,
                         PyObject *dropped);
/* The tid each thread has in the exports (malloc'd, nthreads long, the
 * caller frees it): its native id, else its ident, or
 * FT_SYNTHETIC_TID_BASE + serial where an earlier thread had that tid.
 * NULL when out of memory (no exception set). */
uint64_t *ft_export_tids(const ft_tracer *tracer);
/* _export_tids(threads): the same rule for threads given as
 * (serial, thread_id, native_thread_id, ...), a ThreadInfo say: the tids of
 * a loaded trace's threads. */
PyObject *ft_export_tids_of(PyObject *module, PyObject *threads);

/* ==== ranges.c: frametrace.Range and _set_range_sink() ==== */
extern PyType_Spec ft_range_spec;
extern PyMethodDef ft_set_range_sink_def;


/* ==== event_type.c: frametrace.Event ==== */
PyTypeObject *ft_event_type_new(PyObject *module);
/* A function's shared (name, filename, lineno, kind) tuple, for
 * ft_event_from_record(). */
PyObject *ft_event_info(ft_state *state, PyObject *name, PyObject *filename,
                        int lineno, int is_c);
/* An Event of a replayed record; info from ft_event_info(), thread the
 * (thread_id, native_thread_id) tuple.  Both must hold only str and int. */
PyObject *ft_event_from_record(PyTypeObject *type, PyObject *info,
                               PyObject *thread, const ft_event *ev);

/* The start, end and open flags of an Event (either kind) into out: 0, or
 * -1 (no exception set) when obj is no Event or its values are not int64
 * and bools. */
int ft_event_span(ft_state *state, PyObject *obj, ft_event *out);
/* The same of an Event's 14 values as a tuple (the loader's). */
int ft_event_values_span(PyObject *values, ft_event *out);
/* An Event's parts: for one built by getEvents() or the loader's C path,
 * its shared (name, filename, lineno, kind) and (thread_id,
 * native_thread_id, thread_serial) tuples; for an Event(values), *info is
 * its 14 values and *thread NULL (both borrowed).  Its start, end, parent,
 * depth and open flags into out.  0, or -1 (no exception set) when obj is no
 * Event or its numbers are not int64 and its flags not bools. */
int ft_event_parts(ft_state *state, PyObject *obj, PyObject **info,
                   PyObject **thread, ft_event *out);
/* value (an Event's field what, of events[i]) as a C long long in [min,
 * max]: 0, or -1 with a ValueError naming it. */
int ft_event_int_field(PyObject *value, Py_ssize_t i, const char *what,
                       long long min, long long max, long long *out);
/* What every writer takes of a function, info's first four values (name,
 * filename, lineno, kind): str, str, an int32 and str; 0, or -1 with an
 * error naming events[i]. */
int ft_check_function(PyObject *info, Py_ssize_t i);

/* ==== load_chrome.c: the loader's fast path ==== */
extern PyMethodDef ft_load_chrome_calls_def;
extern PyMethodDef ft_merge_chrome_lines_def;

/* ==== convert_columns.c: convert's JSON lines into column buffers ==== */
int ft_add_chrome_columns(PyObject *module);

/* ==== load_perfetto.c: the loader's reader of .pftrace ==== */
extern PyMethodDef ft_load_perfetto_def;

/* ==== report_pass.c: the reports' pass over the events ==== */
extern PyMethodDef ft_report_pass_def;
extern PyMethodDef ft_collapse_labels_def;
extern PyMethodDef ft_collapsed_batch_def;

/* ==== event_columns.c: Events as column buffers (the Parquet writer) ==== */
extern PyMethodDef ft_event_columns_def;

/* ==== join_ops.c: frametrace.torch's join, _join_ops() ==== */
extern PyMethodDef ft_join_ops_def;

/* ==== signal_relay.c: signals caught in C (flight recorder, run's SIGTERM) ==== */
extern PyMethodDef ft_relay_signal_def;
extern PyMethodDef ft_unrelay_signal_def;
extern PyMethodDef ft_watch_relayed_def;
extern PyMethodDef ft_die_of_signal_def;

/* ==== events.c ==== */
/* Replays a recording into a list of events. */
PyObject *ft_build_events(ft_state *state, struct ft_recording *rec);
/* Replays every thread into vec; (*thread_end)[i] is the end of thread
 * i's events (malloc'd, the caller frees it, also on failure).  Pure C:
 * 0, or -1 when out of memory. */
int ft_replay_all(struct ft_recording *rec, ft_eventvec *vec,
                  size_t **thread_end);

/* Records thread th lost: overwritten by its ring, or never stored. */
uint64_t ft_thread_lost_records(const ft_thread *th);

/* Counts the events each thread of a stopped tracer lost entirely
 * (ft_thread.dropped_events), replaying the threads that lost records and
 * were not replayed yet, with the GIL released (holding the recording).
 * 0, or -1 with an exception set. */
int ft_count_dropped(ft_tracer *tracer);

/* A reader of a stopped tracer's records, which replays them one thread
 * at a time with the GIL released (a background thread writes while the
 * program runs): it holds a reference to the recording, which a clear()
 * or the tracer's end meanwhile leaves whole.  Names are taken from
 * rec->funcs with the GIL held. */
typedef struct {
    struct ft_recording *rec;  /* strong */
    ft_thread **threads;    /* the recording's */
    Py_ssize_t nthreads;
    ft_clock clock;         /* a copy of the recording's (its anchors
                               borrowed) */
    int64_t stop_ns;
    long pid;               /* the process that began it */
} ft_export;

/* Takes a reference to a stopped tracer's recording (GIL held); who names
 * the caller in the error.  0, or -1 with a RuntimeError (not stopped, or
 * cleared) or MemoryError. */
int ft_export_begin(ft_export *ex, ft_tracer *tracer, const char *who);
/* Replays thread i into te (ft_replay_thread_events()); no GIL needed.  0,
 * or -1 when out of memory. */
int ft_export_thread(const ft_export *ex, Py_ssize_t i, ft_thread_events *te);
/* About how many events thread i will give (half its records, plus the
 * frames open at start): for progress(done, total) before its replay. */
uint64_t ft_export_estimate(const ft_export *ex, Py_ssize_t i);
/* Lets the recording go (GIL held): freed if it was the last reference. */
void ft_export_end(ft_export *ex);

/* ==== export_chrome.c, export_perfetto.c, export_events.c ==== */
/* Tracer._write_chrome() and Tracer._write_perfetto(). */
PyObject *ft_write_chrome(ft_tracer *tracer, PyObject *args, PyObject *kwargs);
PyObject *ft_write_perfetto(ft_tracer *tracer, PyObject *args, PyObject *kwargs);
/* _write_events(): the same writers from a list of Events. */
extern PyMethodDef ft_write_events_def;

#endif /* FT_STATE_H */
