/* install.c and install_perthread.c: the hook objects, and installing the
 * profile function on every thread and removing it (the tracer's `install`
 * fields are theirs alone).  The hook_* functions have two definitions:
 * install.c's for the one hook object all threads share (3.12+),
 * install_perthread.c's for one hook object per thread (3.10/3.11). */
#ifndef FT_INSTALL_H
#define FT_INSTALL_H

#include "state.h"
#include "threads.h"

/* The hook object's type (ft_hookobject). */
extern PyType_Spec ft_hook_spec;

/* The first thread (other than through our own hook or bootstrap) with a
 * profile function installed, or the profiler tool id taken (3.12+),
 * described in a new string; NULL if none (or with an exception). */
PyObject *ft_find_conflict(ft_tracer *tracer);
/* Gives threading.setprofile() the bootstrap function for the threads
 * started from now on, keeping the previous one for
 * ft_restore_threading_profile().  0, or -1 with an exception. */
int ft_swap_threading_profile(ft_tracer *tracer, ft_interrupt *kept);
/* Gives threading its previous profile function back, unless someone set
 * their own meanwhile.  Raises nothing (an interrupt goes to kept). */
void ft_restore_threading_profile(ft_tracer *tracer, ft_interrupt *kept);
/* "sys.setprofile" audited once for the act of setting every thread: 0,
 * or -1 with the exception of an audit hook that refused. */
int ft_audit_setprofile_once(void);
/* Whether ts's profile function is tracer's hook (silenced or not), or
 * threading's bootstrap still to run. */
int ft_is_ours(ft_tracer *tracer, PyThreadState *ts);
/* Installs tracer's hook on every thread of an armed tracer, in pure C
 * with the audit hooks set aside.  0, or -1 with an exception. */
int ft_install_hooks(ft_tracer *tracer);
/* Drops the tracer's references to its hook objects. */
void ft_hooks_drop(ft_tracer *tracer);

/* The hook object(s) of an arming tracer: 0, or -1 with an exception. */
int ft_hooks_make(ft_tracer *tracer);
/* The hook object a new thread th (NULL: armed, not recording yet) is to
 * have, a new reference, made the caller's cached thread where threads
 * share it; NULL (with an exception if it failed) when there is none. */
ft_hookobject *ft_hooks_for_thread(ft_tracer *tracer, ft_thread *th);
/* start(): th, just registered for ts, is what ts's hook object records
 * into (one hook object per thread; shared: the cache finds it). */
void ft_hooks_attach(ft_tracer *tracer, PyThreadState *ts, ft_thread *th);
/* A start() that failed: no hook object has a thread any more. */
void ft_hooks_detach(ft_tracer *tracer);
/* Every hook object of tracer records nothing from now on.  Pure C. */
void ft_hooks_silence(ft_tracer *tracer);
/* Removes tracer's hook from every thread, taking each hooked thread's
 * stack first if take_stacks; never raises (an interrupt goes to kept). */
void ft_uninstall_hooks(ft_tracer *tracer, int take_stacks,
                        ft_interrupt *kept);

/* ---- shared by install.c and install_perthread.c ---- */

/* Whether obj, the argument of ft_hook on some thread, is tracer's. */
int ft_hooks_own(ft_tracer *tracer, PyObject *obj);

#if !FT_SHARED_HOOK || FT_NEED_CHECKED_WALK
/* Where the threads are set one by one: CPython before 3.14.1 (3.12+:
 * where PyEval_SetProfileAllThreads() is unsafe), and the per-thread hooks
 * of 3.10/3.11. */
#  define FT_SET_ONE_BY_ONE 1
#else
#  define FT_SET_ONE_BY_ONE 0
#endif

#if FT_SET_ONE_BY_ONE
/* A thread state seen in a walk of the thread list.  Setting a profile
 * function runs audit hooks, which are Python code that may let a thread
 * exit: such entries are checked again before each use. */
typedef struct {
    PyThreadState *ts;
    uint64_t id;
    ft_hookobject *hook;  /* borrowed: held by install.per_thread */
} ft_thread_entry;

/* The thread states of one walk, collected in pure C before any is set. */
typedef struct {
    ft_thread_entry *items;  /* malloc'd; the caller frees it */
    size_t n;
    size_t cap;
} ft_thread_list;

/* Appends ts (hook NULL), doubling the array when full.  The new entry, or
 * NULL when out of memory, with no exception set: a removal must not
 * raise. */
ft_thread_entry *ft_thread_list_append(ft_thread_list *list,
                                       PyThreadState *ts);
#endif

/* Setting the profile function of every thread, as one audited act
 * (audit_aside.c): "sys.setprofile" is audited once, where Python code may
 * run (ft_audit_setprofile_once()); then, from ft_set_aside() to
 * ft_put_back(), the threads are set with the Python audit hooks off the
 * interpreter, so that nothing runs between one thread being set and the
 * next, nor between their stacks being taken and their hooks going on. */
typedef struct {
    PyObject *hooks;  /* what was set aside (NULL: none) */
    int taken;        /* whether they were (1), or could not be (0) */
} ft_audit_aside;

/* Pure C, like everything until ft_put_back(). */
void ft_set_aside(ft_audit_aside *aside);
void ft_put_back(ft_audit_aside *aside);

/* Sets the hook on every thread, within ft_install_hooks(): 0, or -1 with
 * an exception. */
int ft_hooks_install_all(ft_tracer *tracer);

#endif /* FT_INSTALL_H */
