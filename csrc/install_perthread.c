/* One hook object per thread, the setprofile backend of CPython 3.10 and
 * 3.11, where a profile function is installed thread by thread: the hook
 * object holds its thread, so the hot path needs no cache.  The
 * definitions of install.h's hook_* functions for these versions (3.12+:
 * install.c); dropping 3.11 is deleting this file. */
#include "install.h"

#include <stdlib.h>

#if !FT_SHARED_HOOK

/* A new hook object for thread th (a new reference; install.per_thread
 * holds another), or NULL with an exception set. */
static ft_hookobject *
new_thread_hook(ft_tracer *tracer, ft_thread *thread)
{
    ft_hookobject *hook = PyObject_New(ft_hookobject,
                                       tracer->state->hook_type);
    if (hook == NULL) {
        return NULL;
    }
    hook->tracer = tracer;
    hook->thread = thread;
    hook->generation = tracer->generation;
    if (PyList_Append(tracer->install.per_thread, (PyObject *)hook) < 0) {
        hook->tracer = NULL;
        hook->thread = NULL;
        Py_DECREF(hook);
        return NULL;
    }
    return hook;
}

int
ft_hooks_make(ft_tracer *self)
{
    self->install.per_thread = PyList_New(0);
    return self->install.per_thread != NULL ? 0 : -1;
}

int
ft_hooks_own(ft_tracer *self, PyObject *obj)
{
    return ((ft_hookobject *)obj)->tracer == self;
}

ft_hookobject *
ft_hooks_for_thread(ft_tracer *tracer, ft_thread *th)
{
    return new_thread_hook(tracer, th);
}

void
ft_hooks_attach(ft_tracer *self, PyThreadState *ts, ft_thread *th)
{
    (void)self;
    if (ft_tstate_profile_func(ts) == ft_hook) {
        ((ft_hookobject *)ft_tstate_profile_obj(ts))->thread = th;
    }
}

void
ft_hooks_detach(ft_tracer *self)
{
    PyObject *hooks = self->install.per_thread;
    for (Py_ssize_t i = 0; hooks != NULL && i < PyList_GET_SIZE(hooks); i++) {
        ((ft_hookobject *)PyList_GET_ITEM(hooks, i))->thread = NULL;
    }
}

void
ft_hooks_silence(ft_tracer *self)
{
    PyObject *hooks = self->install.per_thread;
    for (Py_ssize_t i = 0; hooks != NULL && i < PyList_GET_SIZE(hooks); i++) {
        ft_hookobject *hook = (ft_hookobject *)PyList_GET_ITEM(hooks, i);
        hook->thread = NULL;
        hook->tracer = NULL;
    }
}

/* One hook object per thread, with no ft_thread until start(). */
int
ft_hooks_install_all(ft_tracer *self)
{
    int rc = 0;
    ft_thread_list entries = {NULL, 0, 0};
    PyThreadState *ts = PyInterpreterState_ThreadHead(PyInterpreterState_Get());
    for (; rc == 0 && ts != NULL; ts = PyThreadState_Next(ts)) {
        ft_thread_entry *entry = ft_thread_list_append(&entries, ts);
        if (entry == NULL) {
            PyErr_NoMemory();
            rc = -1;
            break;
        }
        entry->hook = new_thread_hook(self, NULL);
        if (entry->hook == NULL) {
            rc = -1;
            break;
        }
        Py_DECREF(entry->hook);  /* self->install.per_thread holds it */
    }
    /* Where the audit hooks could not be set aside, installing runs them
     * (Python code): check each thread state is still alive first.  They
     * may stop the tracer, which drops its list of hooks: held meanwhile. */
    PyObject *hooks = Py_XNewRef(self->install.per_thread);
    for (size_t i = 0; rc == 0 && i < entries.n
                       && self->phase == FT_PHASE_ARMED; i++) {
        ft_thread_entry *entry = &entries.items[i];
        if (ft_tstate_id_alive(entry->id)) {
            rc = _PyEval_SetProfile(entry->ts, ft_hook,
                                    (PyObject *)entry->hook);
        }
    }
    Py_XDECREF(hooks);
    free(entries.items);
    return rc;
}

/* Removes this tracer's hook from every thread, taking each hooked thread's
 * stack first if take_stacks: the stacks are taken and the hooks silenced
 * at once, in pure C, then "sys.setprofile" is audited and the hooks
 * removed as one act (ft_audit_aside). */
void
ft_uninstall_hooks(ft_tracer *self, int take_stacks, ft_interrupt *kept)
{
    /* Pure C first, GC off so that allocations run no finalizer. */
    int gc_was_enabled = PyGC_Disable();
    PyInterpreterState *interp = PyInterpreterState_Get();
    int installed = 0;
    PyThreadState *ts = PyInterpreterState_ThreadHead(interp);
    for (; ts != NULL; ts = PyThreadState_Next(ts)) {
        if (!ft_is_ours(self, ts)) {
            continue;
        }
        installed = 1;
        if (take_stacks && ft_tstate_profile_func(ts) == ft_hook) {
            ft_hookobject *hook = (ft_hookobject *)ft_tstate_profile_obj(ts);
            ft_take_stop_stack(self, hook->thread, ts);
        }
    }
    ft_hooks_detach(self);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    /* Nothing to remove: nothing to audit. */
    int refused = !installed || ft_audit_setprofile_once() < 0;
    if (refused && installed && !ft_keep_interrupt(kept)) {
        /* The hooks stay, inert. */
        PyErr_WriteUnraisable(NULL);
    }
    gc_was_enabled = PyGC_Disable();
    ft_audit_aside aside;
    ft_thread_list todo = {NULL, 0, 0};
    if (!refused) {
        ft_set_aside(&aside);
        for (ts = PyInterpreterState_ThreadHead(interp); ts != NULL;
             ts = PyThreadState_Next(ts)) {
            if (ft_is_ours(self, ts)
                && ft_thread_list_append(&todo, ts) == NULL) {
                break;  /* the rest stay installed, silenced below */
            }
        }
    }
    /* Checked again before each call: where the audit hooks could not be
     * set aside, they run for each and may let threads exit. */
    for (size_t i = 0; i < todo.n; i++) {
        ft_thread_entry *entry = &todo.items[i];
        if (ft_tstate_id_alive(entry->id) && ft_is_ours(self, entry->ts)
            && _PyEval_SetProfile(entry->ts, NULL, NULL) < 0) {
            /* A C audit hook refused: the hook stays, inert. */
            PyErr_WriteUnraisable(NULL);
        }
    }
    free(todo.items);
    if (!refused) {
        ft_put_back(&aside);
    }
    /* Hooks registered meanwhile (a thread's bootstrap, while an audit hook
     * ran) are silenced here too.  thread is cleared first, always: the hot
     * path reads the tracer only when its thread is set. */
    ft_hooks_silence(self);
    Py_CLEAR(self->install.per_thread);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
}

#endif /* !FT_SHARED_HOOK */
