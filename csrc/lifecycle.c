/* The tracer's lifecycle, in the order one start() runs it:
 *
 * - arm (arm(), or the first half of start() on a new tracer): refuse over
 *   another profiler (ft_find_conflict(), or the monitoring tool id), swap
 *   threading's profile hook for our bootstrap, fault the caller's ring
 *   in, install the hook on every thread (setprofile, install.c) or take
 *   the tool id (monitoring), recording off: CPython (3.12+) instruments
 *   the code as it runs from here, not in the first recorded step;
 * - start (begin_recording()): pure C, the flip: start the clock, register
 *   every thread that has the hook (its stack at start, threads.c);
 * - stop, the latch: stop_ns taken once, the stacks still running taken,
 *   the hook removed from every thread, threading's hook restored.
 *
 * The fields arm() prepares for start() (`armed`) are this file's.  Not
 * here: the thread registry and the caller's thread (threads.c),
 * installing and removing the hook (install.c), threads started later
 * (bootstrap.c), snapshot() (snapshot.c), fork (fork.c), the hot paths
 * that record (hook.c, monitor.c), the Tracer type's methods (tracer.c). */
#include "lifecycle.h"
#include "fork.h"
#include "install.h"
#include "threads.h"

#include <string.h>

/* What arm() prepared goes: the threads' names and the caller's ring. */
static void
drop_armed(ft_tracer *self)
{
    Py_CLEAR(self->armed.names);
    ft_ring_free(&self->armed.ring);
    memset(&self->armed.ring, 0, sizeof(self->armed.ring));
}

/* ---- start ---------------------------------------------------------- */

static int arm_claimed(ft_tracer *self, ft_interrupt *kept);
static int begin_recording(ft_tracer *self);
static void disarm_claimed(ft_tracer *self, ft_interrupt *kept);

/* Why arm() (arming) or start() cannot run now: -1 with a RuntimeError (a
 * ConflictError where another tracer holds the hook), or 0. */
static int
refuse_start(ft_tracer *self, int arming)
{
    ft_state *state = self->state;
    const char *what = arming ? "arm()" : "start()";
    switch (self->phase) {
    case FT_PHASE_ARMED:
        if (arming) {
            PyErr_SetString(PyExc_RuntimeError,
                            "arm() called twice: this Tracer is already armed");
            return -1;
        }
        break;
    case FT_PHASE_ACTIVE:
        PyErr_Format(PyExc_RuntimeError,
                     "%s called twice: this Tracer is already active", what);
        return -1;
    case FT_PHASE_STOPPED:
    case FT_PHASE_CLEARED:
        PyErr_SetString(PyExc_RuntimeError,
                        "this Tracer has already run and stopped; a Tracer "
                        "records once: create a new one");
        return -1;
    }
    if (state->active != NULL && state->active != self) {
        PyErr_SetString(state->conflict_error,
                        state->active->phase == FT_PHASE_ARMED
                        ? "another frametrace Tracer is armed in this "
                          "interpreter; disarm or stop it first"
                        : "another frametrace Tracer is already active in this "
                          "interpreter; stop it first");
        return -1;
    }
    /* start() and arm() run Python code before the tracer is armed
     * (conflict checks, thread names, threading's hook, audit hooks), which
     * may let another thread, or that code itself, start a tracer: one at
     * a time. */
    if (state->starting != NULL) {
        if (state->starting == self) {
            PyErr_Format(PyExc_RuntimeError, "%s called twice: this Tracer "
                         "is already starting", what);
        }
        else {
            PyErr_SetString(state->conflict_error,
                            "another frametrace Tracer is starting in this "
                            "interpreter; stop it first");
        }
        return -1;
    }
    if (state->stopping != NULL) {
        PyErr_Format(state->conflict_error,
                     "%s called while another frametrace Tracer is "
                     "stopping (from code its stop() runs, such as an "
                     "audit hook, or from another thread meanwhile); "
                     "start once its stop() has returned", what);
        return -1;
    }
    return 0;
}

/* start() (arming: arm()) once refuse_start() has let it through. */
static int
start_or_arm(ft_tracer *self, int arming)
{
    ft_state *state = self->state;
    /* Held to the end: the code arming runs may drop every other
     * reference. */
    Py_INCREF(self);
    state->starting = self;
    state->starting_thread = PyThread_get_thread_ident();
    self->in_call = FT_IN_START;
    int was_new = self->phase == FT_PHASE_NEW;
    ft_interrupt kept = {0};
    int rc = was_new ? arm_claimed(self, &kept) : 0;
    if (rc == 0 && kept.held && self->phase == FT_PHASE_ARMED) {
        /* Interrupted while arming (which did finish): new again, and the
         * interrupt raised below, as if it had come before the call. */
        disarm_claimed(self, &kept);
    }
    else if (rc == 0 && !arming) {
        /* An audit hook may have disarmed it meanwhile. */
        rc = self->phase == FT_PHASE_ARMED ? begin_recording(self) : 0;
        if (rc < 0 && was_new) {
            ft_saved_exc saved;
            FT_SAVE_EXC(saved);
            disarm_claimed(self, &kept);
            FT_RESTORE_EXC(saved);
        }
    }
    self->in_call = FT_IN_NONE;
    if (state->starting == self) {
        state->starting = NULL;
    }
    /* In a child forked by code start() ran: it stops as of the fork now
     * that start() is done with the hooks. */
    ft_fork_stop_pending(self, &kept);
    Py_DECREF(self);
    return ft_raise_kept(&kept, rc);
}

int
ft_tracer_start(ft_tracer *self)
{
    if (refuse_start(self, 0) < 0) {
        return -1;
    }
    return start_or_arm(self, 0);
}

int
ft_tracer_arm(ft_tracer *self)
{
    if (refuse_start(self, 1) < 0) {
        return -1;
    }
    return start_or_arm(self, 1);
}

/* arm() once this tracer is the only one starting: everything that runs
 * Python code or takes a while, so that start() then runs neither. */
static int
arm_claimed(ft_tracer *self, ft_interrupt *kept)
{
    ft_state *state = self->state;
#if FT_HAVE_MONITORING
    int monitoring = self->backend == FT_BACKEND_MONITORING;
    PyObject *conflict = monitoring ? ft_monitor_conflict()
                                    : ft_find_conflict(self);
#else
    int monitoring = 0;
    PyObject *conflict = ft_find_conflict(self);
#endif
    if (ft_refuse_conflict(state->conflict_error, conflict) < 0) {
        return -1;
    }
    /* Installing the hook on every thread is audited once, here (an audit
     * hook may refuse), and done below with the audit hooks set aside. */
    if (!monitoring && ft_audit_setprofile_once() < 0) {
        return -1;
    }
    /* The caller's ring (one page: budget.c grows it); its origin is set
     * when recording starts. */
    if (ft_ring_alloc(&self->armed.ring, self->buffer_size, 0) < 0) {
        memset(&self->armed.ring, 0, sizeof(self->armed.ring));
        PyErr_Format(PyExc_MemoryError, "cannot allocate a ring of %llu "
                     "events (buffer_size)",
                     (unsigned long long)self->buffer_size);
        return -1;
    }
    state->count_rings++;
    PyObject *names = ft_thread_names(kept);
    self->generation = ft_next_generation();
    int made = monitoring || ft_hooks_make(self) == 0;
    /* Threads started from now on install the hook themselves (with the
     * monitoring backend, which sees every thread, they only get named).
     * The monitoring tool id is taken before any thread is registered: its
     * audit hooks run Python code, and its callbacks record nothing until
     * the tracer is active. */
    int failed = !made || ft_swap_threading_profile(self, kept) < 0;
#if FT_HAVE_MONITORING
    if (!failed && monitoring) {
        failed = ft_monitor_start(self) < 0;
        if (!failed) {
            state->count_tool_takes++;
        }
    }
#endif
    if (failed) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        /* Both run Python code: the exception is kept meanwhile. */
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
#if FT_HAVE_MONITORING
        ft_monitor_stop(self);
#endif
        ft_restore_threading_profile(self, kept);
        FT_RESTORE_EXC(saved);
        ft_hooks_drop(self);
        Py_XDECREF(names);
        ft_ring_free(&self->armed.ring);
        memset(&self->armed.ring, 0, sizeof(self->armed.ring));
        return -1;
    }
    self->armed.names = names;
    state->active = self;
    self->phase = FT_PHASE_ARMED;
    if (monitoring) {
        return 0;  /* armed with the tool id's events */
    }

    /* The hook on every thread, in pure C. */
    int rc = ft_install_hooks(self);
    if (rc == 0) {
        state->count_hook_installs++;
    }
    else {
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        disarm_claimed(self, kept);
        FT_RESTORE_EXC(saved);
        return -1;
    }
    return 0;
}

/* Registers thread ts (its stack) with an armed tracer; the caller's thread
 * gets the armed ring.  Runs no Python code.  Returns the thread, or NULL
 * with an exception. */
static ft_thread *
register_existing(ft_tracer *self, PyThreadState *ts)
{
    PyFrameObject *top = PyThreadState_GetFrame(ts);
    ft_thread *th = ft_register_thread(self, ts, top, 0);
    Py_XDECREF(top);
    if (th == NULL) {
        return NULL;
    }
    if (ts == PyThreadState_Get() && self->armed.ring.buf != NULL) {
        ft_adopt_ring(self, th, &self->armed.ring);
        th->ring.last = self->clock.anchors[0].ticks;  /* start() */
        memset(&self->armed.ring, 0, sizeof(self->armed.ring));
    }
    ft_name_thread(th, self->armed.names);
    return th;
}

/* start() of an armed tracer: recording goes on.  Pure C, GC off: nothing
 * else runs meanwhile, so each thread's stack is the one its first record
 * follows.  Only the threads with this tracer's hook (or threading's
 * bootstrap, still to run) are registered: with the monitoring backend,
 * all.  0, or -1 with an exception, still armed. */
static int
begin_recording(ft_tracer *self)
{
    int monitoring = self->backend == FT_BACKEND_MONITORING;
    if (ft_clock_start(&self->clock, self->clock.use_cycles) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    ft_anchor start = self->clock.anchors[0];
    self->start_ns = start.ns;
    self->phase = FT_PHASE_ACTIVE;
    int gc_was_enabled = PyGC_Disable();
    PyThreadState *current = PyThreadState_Get();
    int rc = 0;
    /* The caller first: its events come first in getEvents(). */
    PyThreadState *ts = current;
    PyThreadState *next = PyInterpreterState_ThreadHead(
        PyThreadState_GetInterpreter(current));
    while (ts != NULL) {
        if (monitoring || ft_is_ours(self, ts)) {
            ft_thread *th = register_existing(self, ts);
            if (th == NULL) {
                rc = -1;
                break;
            }
            th->base_ticks = start.ticks;
            ft_hooks_attach(self, ts, th);
        }
        if (next == current) {
            next = PyThreadState_Next(next);
        }
        ts = next;
        next = next ? PyThreadState_Next(next) : NULL;
        if (ts == current) {
            ts = next;
            next = next ? PyThreadState_Next(next) : NULL;
        }
    }
    if (rc < 0) {
        /* Back to armed: nothing recorded yet. */
        self->phase = FT_PHASE_ARMED;
        ft_hooks_detach(self);
        ft_free_threads(self);
        self->start_ns = 0;
    }
    else {
        /* The names hold only ints and strs: no finalizer runs.  The ring
         * goes if it was not handed over. */
        drop_armed(self);
    }
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    return rc;
}

/* An armed tracer (or one arm() is undoing) is new again: its hook
 * removed, or the tool id freed, threading's hook restored.  Runs Python
 * code (audit hooks, threading); marked new first, so that nothing
 * records and no stop() acts meanwhile. */
static void
disarm_claimed(ft_tracer *self, ft_interrupt *kept)
{
    ft_state *state = self->state;
    self->phase = FT_PHASE_NEW;
    if (state->active == self) {
        state->active = NULL;
    }
#if FT_HAVE_MONITORING
    ft_monitor_stop(self);
#endif
    ft_uninstall_hooks(self, 0, kept);
    ft_restore_threading_profile(self, kept);
    ft_hooks_drop(self);
    drop_armed(self);
}

void
ft_armed_note_names(ft_tracer *self, PyObject *names)
{
    Py_XSETREF(self->armed.names, names);
}

void
ft_tracer_abandon_start(ft_tracer *self)
{
    Py_INCREF(self);
    ft_restore_threading_profile(self, NULL);
    ft_hooks_drop(self);
    drop_armed(self);
    Py_DECREF(self);
}

/* disarm_claimed(), marked as stopping like the latched stop. */
static void
disarm_marked(ft_tracer *self, ft_interrupt *kept)
{
    ft_state *state = self->state;
    Py_INCREF(self);
    int was = self->in_call;
    self->in_call = FT_IN_STOP;
    state->stopping = self;
    state->stopping_thread = PyThread_get_thread_ident();
    disarm_claimed(self, kept);
    if (state->stopping == self) {
        state->stopping = NULL;
    }
    self->in_call = was;
    Py_DECREF(self);
}

int
ft_tracer_disarm(ft_tracer *self)
{
    if (self->in_call != FT_IN_NONE) {
        PyErr_Format(PyExc_RuntimeError, "disarm() called while %s is "
                     "running: call it once that has returned",
                     self->in_call == FT_IN_START ? "start() or arm()"
                                                  : "stop()");
        return -1;
    }
    if (self->phase == FT_PHASE_ACTIVE) {
        PyErr_SetString(PyExc_RuntimeError,
                        "disarm() called while the tracer records: stop() "
                        "ends recording");
        return -1;
    }
    ft_interrupt kept = {0};
    if (self->phase == FT_PHASE_ARMED) {
        disarm_marked(self, &kept);
    }
    return ft_raise_kept(&kept, 0);
}

/* ---- stop: the latch ------------------------------------------------ */

#if FT_HAVE_MONITORING
/* The monitoring backend's threads are found by thread state, not hook. */
static void
take_stop_stacks(ft_tracer *self)
{
    int gc_was_enabled = PyGC_Disable();
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        ft_thread *th = ft_find_thread_of(self, ts);
        if (th != NULL) {
            ft_take_stop_stack(self, th, ts);
        }
    }
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}
#endif

/* Notes which registered threads are alive at stop, and whether this
 * tracer's hook is still theirs (ft_thread.at_stop), before the hook is
 * removed.  Pure C: nothing runs meanwhile. */
static void
mark_threads_at_stop(ft_tracer *self)
{
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        ft_note_unhooked(self, ts);
        ft_thread *th = ft_find_thread_of(self, ts);
        if (th == NULL) {
            continue;
        }
        th->at_stop = self->backend == FT_BACKEND_MONITORING || ft_is_ours(self, ts)
            ? FT_AT_STOP_OURS : FT_AT_STOP_OTHER;
    }
}

void
ft_latch_stop(ft_tracer *self, const ft_anchor *at, int in_child,
              ft_interrupt *kept)
{
    if (self->phase == FT_PHASE_ARMED) {
        disarm_marked(self, kept);  /* nothing recorded: nothing to latch */
        return;
    }
    if (self->phase != FT_PHASE_ACTIVE) {
        return;
    }
    /* Python code runs below (audit hooks, threading, thread names): held,
     * and marked as stopping, so that a stop() from there does nothing, and
     * a clear() or another tracer's start() is refused. */
    Py_INCREF(self);
    ft_state *state = self->state;
    self->in_call = FT_IN_STOP;
    state->stopping = self;
    state->stopping_thread = PyThread_get_thread_ident();
    /* Every record was written before this anchor: converted, none can
     * end after stop_ns.  With an earlier anchor, the records after it
     * are past stop_ns: the replay drops them. */
    self->stop_ns = at != NULL ? at->ns : ft_clock_anchor(&self->clock).ns;
    if (at == NULL) {
        ft_clock_note_boottime(&self->clock, 1);
    }
    self->phase = FT_PHASE_STOPPED;
    /* Before uninstalling, which may run Python code: threads starting
     * meanwhile must not register with a stopping tracer. */
    if (self->state->active == self) {
        self->state->active = NULL;
    }
    mark_threads_at_stop(self);
    /* Ended threads' rings give back their rest (none records now). */
    ft_budget_sweep(self, NULL);
    int tool_lost = 0;
#if FT_HAVE_MONITORING
    if (self->backend == FT_BACKEND_MONITORING) {
        take_stop_stacks(self);
        tool_lost = !ft_monitor_stop(self);
    }
#endif
    ft_uninstall_hooks(self, 1, kept);
    if (!in_child) {
        ft_find_displaced(self, tool_lost);  /* pure C */
    }
    ft_restore_threading_profile(self, kept);
    /* Threads may have been renamed while traced.  Only those still
     * running: an ended thread's ident may be a later thread's now. */
    PyObject *names = ft_thread_names(kept);
    for (Py_ssize_t i = 0; i < self->nthreads; i++) {
        if (ft_tstate_id_alive(self->threads[i]->tstate_id)) {
            ft_name_thread(self->threads[i], names);
        }
    }
    Py_XDECREF(names);
    if (state->stopping == self) {
        state->stopping = NULL;
    }
    self->in_call = FT_IN_NONE;
    Py_DECREF(self);
}

int
ft_tracer_stop(ft_tracer *self)
{
    if (self->in_call == FT_IN_START) {
        /* The hooks are half installed: start() finishes first. */
        PyErr_SetString(PyExc_RuntimeError,
                        "stop() called while start() is running (from code "
                        "start() runs, such as an audit hook, or from another "
                        "thread meanwhile); call stop() once start() has "
                        "returned");
        return -1;
    }
    /* Inside stop(): the stop is latched already, and finishing.  An
     * interrupt met on the way is raised once it is stopped. */
    ft_interrupt kept = {0};
    ft_latch_stop(self, NULL, 0, &kept);
    return ft_raise_kept(&kept, 0);
}

int
ft_check_not_in_call(ft_tracer *self, const char *what)
{
    if (self->in_call != FT_IN_NONE) {
        PyErr_Format(PyExc_RuntimeError, "%s called while %s is running: "
                     "call it once that has returned", what,
                     self->in_call == FT_IN_START ? "start()" : "stop()");
        return -1;
    }
    return 0;
}

void
ft_tracer_finalize(ft_tracer *self)
{
    /* Inside start() or stop() their callers hold the tracer: not here. */
    if ((self->phase != FT_PHASE_ACTIVE && self->phase != FT_PHASE_ARMED)
        || self->in_call != FT_IN_NONE) {
        return;
    }
    ft_saved_exc saved;
    FT_SAVE_EXC(saved);
    ft_latch_stop(self, NULL, 0, NULL);
    FT_RESTORE_EXC(saved);
}

void
ft_tracer_silence(ft_tracer *self)
{
    if (self->phase == FT_PHASE_ARMED) {
        self->phase = FT_PHASE_NEW;  /* nothing recorded */
        ft_ring_free(&self->armed.ring);
        memset(&self->armed.ring, 0, sizeof(self->armed.ring));
    }
    else if (self->phase == FT_PHASE_ACTIVE) {
        self->stop_ns = ft_clock_anchor(&self->clock).ns;
        ft_clock_note_boottime(&self->clock, 1);
        self->phase = FT_PHASE_STOPPED;
    }
    else {
        return;
    }
    if (self->state->active == self) {
        self->state->active = NULL;
    }
    ft_hooks_silence(self);
    if (self->monitor != NULL) {
        ((ft_hookobject *)self->monitor)->tracer = NULL;
    }
}
