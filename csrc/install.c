/* Installing frametrace's profile function on every thread and removing
 * it: the hook objects it is installed with, the conflict check (another
 * profiler's hook, or the profiler tool id), threading's profile function
 * swapped for the bootstrap and given back, and setting every thread as one
 * audited act.  This file makes, installs and silences hook objects (the
 * hot paths only read them), so their type is here rather than with the
 * Tracer type in tracer.c.
 *
 * Where every thread shares one hook object (3.12+), its installing and
 * removal are here too; one hook object per thread (3.10/3.11) is
 * install_perthread.c's.  Not here: when the hook goes on and off
 * (lifecycle.c), threads started later (bootstrap.c). */
#include "install.h"
#include "import.h"
#include "audit_aside.h"

#include <stdlib.h>

/* ---- hook objects --------------------------------------------------- */

static void
hook_dealloc(ft_hookobject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyType_Slot hook_slots[] = {
    {Py_tp_doc, "The argument frametrace's profile function and monitoring "
                "callbacks find their tracer through (internal).  Called "
                "as a profile function when sys.setprofile() puts it back "
                "(displaced.c)."},
    {Py_tp_dealloc, hook_dealloc},
    {Py_tp_call, ft_hook_call},
    {0, NULL},
};

PyType_Spec ft_hook_spec = {
    .name = "frametrace._tracer._ThreadHook",
    .basicsize = sizeof(ft_hookobject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = hook_slots,
};

#if FT_SHARED_HOOK
/* The hook object of every thread, for start(): a new reference, or NULL
 * with an exception. */
static PyObject *
new_shared_hook(ft_tracer *self)
{
    ft_hookobject *hook = PyObject_New(ft_hookobject, self->state->hook_type);
    if (hook == NULL) {
        return NULL;
    }
    hook->tracer = self;  /* borrowed: cleared by ft_uninstall_hooks() */
    hook->thread = NULL;
    hook->generation = self->generation;
    return (PyObject *)hook;
}
#endif

/* ---- conflicts, and threading's profile function ----------------- */

/* Whether a thread's profile function is the hook of a stopped tracer: inert,
 * it goes at the thread's next event (3.12+) or with the next start(). */
static int
is_inert(Py_tracefunc func, PyObject *obj)
{
    return func == ft_hook && ((ft_hookobject *)obj)->tracer == NULL;
}

/* The first thread (other than through our own hook or bootstrap) with a
 * profile function installed, described in a new string; NULL if none. */
PyObject *
ft_find_conflict(ft_tracer *self)
{
    unsigned long thread_id = 0;
    PyObject *other = NULL;
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        Py_tracefunc func = ft_tstate_profile_func(ts);
        PyObject *obj = ft_tstate_profile_obj(ts);
        if (func == NULL || obj == self->state->thread_bootstrap
            || is_inert(func, obj)) {
            continue;
        }
        thread_id = ft_tstate_thread_id(ts);
        other = Py_NewRef(obj ? obj : Py_None);
        break;
    }
    if (other != NULL) {
        PyObject *msg = PyUnicode_FromFormat(
            "another profiler is installed on thread %lu: %R (cProfile, "
            "sys.setprofile(), torch.profiler with with_stack=True, or "
            "another PyEval_SetProfile() hook); stop it before starting "
            "frametrace", thread_id, other);
        Py_DECREF(other);
        return msg;
    }
#if FT_HAVE_MONITORING
    /* cProfile uses sys.monitoring's profiler tool id on 3.12+. */
    PyObject *monitoring = ft_import("sys");
    PyObject *tool = NULL;
    if (monitoring != NULL) {
        Py_SETREF(monitoring, PyObject_GetAttrString(monitoring, "monitoring"));
    }
    if (monitoring != NULL) {
        PyObject *id = PyObject_GetAttrString(monitoring, "PROFILER_ID");
        if (id != NULL) {
            tool = PyObject_CallMethod(monitoring, "get_tool", "O", id);
            Py_DECREF(id);
        }
        Py_DECREF(monitoring);
    }
    if (tool == NULL) {
        return NULL;  /* exception set */
    }
    if (tool != Py_None) {
        PyObject *msg = PyUnicode_FromFormat(
            "another profiler holds sys.monitoring.PROFILER_ID: %R (cProfile "
            "uses it on Python 3.12+); stop it before starting frametrace",
            tool);
        Py_DECREF(tool);
        return msg;
    }
    Py_DECREF(tool);
#endif
    return NULL;
}

/* threading.getprofile() (arg NULL) or threading.setprofile(arg): Python
 * functions of one assignment at most, holding no lock, so an interrupt
 * raised into one (before or after its assignment) is kept and the call
 * made again.  New reference, or NULL with an exception. */
static PyObject *
call_threading_profile(PyObject *threading, PyObject *arg,
                       ft_interrupt *kept)
{
    for (int tries = 0;; tries++) {
        PyObject *res = arg == NULL
            ? PyObject_CallMethod(threading, "getprofile", NULL)
            : PyObject_CallMethod(threading, "setprofile", "O", arg);
        if (res != NULL || tries == 16 || !ft_keep_interrupt(kept)) {
            return res;
        }
    }
}

int
ft_swap_threading_profile(ft_tracer *self, ft_interrupt *kept)
{
    PyObject *hook = self->state->thread_bootstrap;
    PyObject *threading = ft_import("threading");
    if (threading == NULL) {
        return -1;
    }
    PyObject *prev = call_threading_profile(threading, NULL, kept);
    if (prev != NULL) {
        PyObject *res = call_threading_profile(threading, hook, kept);
        if (res == NULL) {
            Py_CLEAR(prev);
        }
        Py_XDECREF(res);
    }
    Py_DECREF(threading);
    self->install.prev_threading = prev;
    return prev != NULL ? 0 : -1;
}

void
ft_restore_threading_profile(ft_tracer *self, ft_interrupt *kept)
{
    PyObject *prev = self->install.prev_threading;
    self->install.prev_threading = NULL;
    if (prev == NULL) {
        return;
    }
    if (FT_FINALIZING()) {
        Py_DECREF(prev);  /* threading is going away with everything else */
        return;
    }
    PyObject *threading = ft_import("threading");
    PyObject *current = threading
        ? call_threading_profile(threading, NULL, kept) : NULL;
    /* Someone may have set their own hook meanwhile: leave it. */
    if (current == self->state->thread_bootstrap) {
        PyObject *res = call_threading_profile(threading, prev, kept);
        Py_XDECREF(res);
    }
    if (PyErr_Occurred() && !ft_keep_interrupt(kept)) {
        PyErr_WriteUnraisable(NULL);
    }
    Py_XDECREF(current);
    Py_XDECREF(threading);
    Py_DECREF(prev);
}

/* ---- every thread as one audited act ------------------------------ */

#if FT_SET_ONE_BY_ONE
ft_thread_entry *
ft_thread_list_append(ft_thread_list *list, PyThreadState *ts)
{
    if (list->n == list->cap) {
        size_t cap = list->cap ? list->cap * 2 : 16;
        ft_thread_entry *grown = realloc(list->items,
                                         cap * sizeof(ft_thread_entry));
        if (grown == NULL) {
            return NULL;
        }
        list->items = grown;
        list->cap = cap;
    }
    ft_thread_entry *entry = &list->items[list->n++];
    entry->ts = ts;
    entry->id = PyThreadState_GetID(ts);
    entry->hook = NULL;
    return entry;
}
#endif

int
ft_audit_setprofile_once(void)
{
    return PySys_Audit("sys.setprofile", NULL);
}

void
ft_set_aside(ft_audit_aside *aside)
{
    aside->hooks = NULL;
    aside->taken = ft_audit_hooks_set_aside(&aside->hooks) == 0;
}

void
ft_put_back(ft_audit_aside *aside)
{
    if (aside->taken) {
        ft_audit_hooks_put_back(aside->hooks);
        aside->taken = 0;
        aside->hooks = NULL;
    }
}


int
ft_is_ours(ft_tracer *self, PyThreadState *ts)
{
    PyObject *obj = ft_tstate_profile_obj(ts);
    if (obj == self->state->thread_bootstrap) {
        return 1;
    }
    if (ft_tstate_profile_func(ts) != ft_hook) {
        return 0;
    }
    return ft_hooks_own(self, obj);
}

int
ft_install_hooks(ft_tracer *self)
{
    /* Pure C, with the GC off so that allocations run no finalizer, and
     * the audit hooks set aside. */
    int gc_was_enabled = PyGC_Disable();
    ft_audit_aside aside = {NULL, 0};
    ft_set_aside(&aside);
    int rc = ft_hooks_install_all(self);
    ft_put_back(&aside);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    return rc;
}

void
ft_hooks_drop(ft_tracer *self)
{
    Py_CLEAR(self->install.per_thread);
    Py_CLEAR(self->install.shared);
}

#if FT_SHARED_HOOK

/* ---- one hook object for every thread (3.12+) ------------------------ */

int
ft_hooks_make(ft_tracer *self)
{
    self->install.shared = new_shared_hook(self);
    return self->install.shared != NULL ? 0 : -1;
}

int
ft_hooks_own(ft_tracer *self, PyObject *obj)
{
    /* Still ours once stop() has silenced it. */
    return obj == self->install.shared;
}

ft_hookobject *
ft_hooks_for_thread(ft_tracer *tracer, ft_thread *th)
{
    if (th != NULL) {
        /* The next events find th through the cache. */
        ft_cache_thread(tracer, th);
    }
    return (ft_hookobject *)Py_XNewRef(tracer->install.shared);
}

void
ft_hooks_attach(ft_tracer *self, PyThreadState *ts, ft_thread *th)
{
    (void)self;  /* the thread's first event finds th through the cache */
    (void)ts;
    (void)th;
}

void
ft_hooks_detach(ft_tracer *self)
{
    (void)self;  /* the shared hook object has no thread */
}

void
ft_hooks_silence(ft_tracer *self)
{
    if (self->install.shared != NULL) {
        ((ft_hookobject *)self->install.shared)->tracer = NULL;
    }
}

#if FT_NEED_CHECKED_WALK
/* What PyEval_SetProfileAllThreads(func, arg) does, where it is unsafe
 * (FT_ALL_THREADS_CALL_SAFE): the thread states are listed in pure C
 * first, and each is checked to be alive before its call, whose audit
 * hooks may let threads exit when they could not be set aside.  With func
 * NULL, only threads where this tracer's hook still is.  0, or -1 with an
 * exception (installing only: a refused removal leaves the hook, silenced,
 * and is reported). */
static int
set_profile_checked(ft_tracer *self, Py_tracefunc func, PyObject *arg)
{
    int gc_was_enabled = PyGC_Disable();
    ft_thread_list todo = {NULL, 0, 0};
    int rc = 0;
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (func == NULL && !ft_is_ours(self, ts)) {
            continue;
        }
        if (ft_thread_list_append(&todo, ts) == NULL) {
            PyErr_NoMemory();
            rc = -1;
            break;
        }
    }
    for (size_t i = 0; rc == 0 && i < todo.n; i++) {
        ft_thread_entry *entry = &todo.items[i];
        if (func != NULL && self->phase != FT_PHASE_ARMED) {
            break;  /* an audit hook disarmed the tracer */
        }
        if (!ft_tstate_id_alive(entry->id)
            || (func == NULL && !ft_is_ours(self, entry->ts))) {
            continue;
        }
        if (_PyEval_SetProfile(entry->ts, func, arg) < 0) {
            if (func != NULL) {
                rc = -1;
            }
            else {
                PyErr_WriteUnraisable(NULL);
            }
        }
    }
    if (rc < 0 && func == NULL) {
        PyErr_WriteUnraisable(NULL);  /* never raise from a removal */
        rc = 0;
    }
    free(todo.items);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    return rc;
}
#endif

/* PyEval_SetProfileAllThreads(func, arg) where it is safe, else the same
 * done by hand.  0, or -1 with an exception (installing only). */
static int
set_profile_all(ft_tracer *self, Py_tracefunc func, PyObject *arg)
{
#if FT_NEED_CHECKED_WALK
    if (!FT_ALL_THREADS_CALL_SAFE()) {
        return set_profile_checked(self, func, arg);
    }
#endif
    (void)self;
    PyEval_SetProfileAllThreads(func, arg);
    return 0;
}

int
ft_hooks_install_all(ft_tracer *self)
{
    /* Held: an audit hook may stop the tracer, which drops its own, before
     * any thread holds one. */
    PyObject *hook = Py_NewRef(self->install.shared);
    int rc = set_profile_all(self, ft_hook, hook);
    Py_DECREF(hook);
    if (rc < 0) {
        return -1;
    }
    /* It reports a refusal (an audit hook's exception) as unraisable only:
     * the caller's thread tells.  Unless the tracer stopped meanwhile (an
     * audit hook may disarm it). */
    if (self->phase == FT_PHASE_ARMED
        && !ft_is_ours(self, PyThreadState_Get())) {
        PyErr_SetString(PyExc_RuntimeError,
                        "the profile function could not be installed: an "
                        "audit hook refused sys.setprofile (see the "
                        "exception reported above)");
        return -1;
    }
    return 0;
}

/* Removes this tracer's hook from every thread, taking each hooked thread's
 * stack first if take_stacks.
 *
 * The stacks are taken and the hook silenced at once, in pure C; then
 * "sys.setprofile" is audited (Python code: threads run meanwhile, but
 * record nothing), and the hook removed as one act (ft_audit_aside).
 *
 * No public call removes the profile function of some threads only:
 * PyEval_SetProfile() acts on the caller, PyEval_SetProfileAllThreads() on
 * all.  Where frametrace walks the threads itself (before 3.14.1), it
 * removes its hook wherever it is.  Elsewhere, when another tool has
 * installed its own on some thread meanwhile, that one is left alone: the
 * caller's thread drops ours now, and every other thread drops ours itself
 * at its next event (hook_off() in hook.c), silenced until then.  Those
 * threads then pay for a profile function a while longer, but only while
 * another tool's keeps CPython's profiling layer on anyway.  So do all
 * threads when an audit hook refuses the removal. */
void
ft_uninstall_hooks(ft_tracer *self, int take_stacks, ft_interrupt *kept)
{
    ft_hookobject *hook = (ft_hookobject *)self->install.shared;
    if (hook == NULL) {
        return;  /* not installed, or removed already */
    }
    /* Pure C first, GC off so that allocations run no finalizer. */
    int gc_was_enabled = PyGC_Disable();
    PyInterpreterState *interp = PyInterpreterState_Get();
    int installed = 0;
    PyThreadState *ts = PyInterpreterState_ThreadHead(interp);
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (ft_is_ours(self, ts)) {
            installed = 1;
            if (take_stacks && ft_tstate_profile_func(ts) == ft_hook) {
                ft_take_stop_stack(self, ft_find_thread_of(self, ts), ts);
            }
        }
    }
    /* Silenced first: events from here on record nothing. */
    hook->tracer = NULL;
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    if (!installed) {
        /* Nothing to remove, nothing to audit. */
        Py_CLEAR(self->install.shared);
        return;
    }
    if (ft_audit_setprofile_once() < 0) {
        if (!ft_keep_interrupt(kept)) {
            PyErr_WriteUnraisable(NULL);  /* never raise from a removal */
        }
        Py_CLEAR(self->install.shared);
        return;
    }
    gc_was_enabled = PyGC_Disable();
    ft_audit_aside aside;
    ft_set_aside(&aside);
    int any_ours = 0, all_ours = 1;
    for (ts = PyInterpreterState_ThreadHead(interp); ts != NULL;
         ts = PyThreadState_Next(ts)) {
        Py_tracefunc func = ft_tstate_profile_func(ts);
        if (ft_is_ours(self, ts)) {
            any_ours = 1;
        }
        else if (func != NULL && !is_inert(func, ft_tstate_profile_obj(ts))) {
            all_ours = 0;
        }
    }
#if FT_NEED_CHECKED_WALK
    /* The walk by hand sets only the threads that have our hook; without
     * the audit hooks set aside, they may let that very thread exit first
     * (CPython gh-137400): then each thread removes it itself. */
    if (!FT_ALL_THREADS_CALL_SAFE()) {
        all_ours = aside.taken;
    }
#endif
    if (any_ours) {
        if (all_ours) {
            (void)set_profile_all(self, NULL, NULL);
        }
        else if (ft_is_ours(self, PyThreadState_Get())) {
            PyEval_SetProfile(NULL, NULL);
        }
    }
    ft_put_back(&aside);
    Py_CLEAR(self->install.shared);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}
#endif
