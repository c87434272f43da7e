/* lifecycle.c: arm, start, disarm and the latched stop. */
#ifndef FT_LIFECYCLE_H
#define FT_LIFECYCLE_H

#include "state.h"
#include "threads.h"

/* Tracer.start(): refuses a tracer that ran, or another one active or
 * starting; else arms it (ft_tracer_arm()) unless armed, and turns
 * recording on: the clock starts, the threads are registered with their
 * stacks, in pure C.  0, or -1 with an exception set and nothing installed
 * (an armed tracer stays armed). */
int ft_tracer_start(ft_tracer *tracer);
/* Tracer.arm(): everything costly of a start, recording off: conflict
 * checks, thread names, the hook objects, threading's hook, the caller's
 * ring, the hook installed on every thread (or the tool id taken).
 * 0, or -1 with an exception set and nothing installed. */
int ft_tracer_arm(ft_tracer *tracer);
/* Tracer.disarm(): an armed tracer removes its hook (or frees the tool id)
 * and is new again; does nothing unless armed.  0, or -1 with a
 * RuntimeError (active, or inside start() or stop()). */
int ft_tracer_disarm(ft_tracer *tracer);

/* The latched stop: the first call records stop_ns, removes the hook and
 * finds the threads whose recording ended early (displaced); every later
 * call does nothing, as does a call from code that stop() runs.
 * 0, or -1 with a RuntimeError when start() is running. */
int ft_tracer_stop(ft_tracer *tracer);
/* The latch itself: the first call records stop_ns (now, or at the anchor
 * `at` taken earlier), removes the hook and, unless in a forked child
 * (whose other threads vanished with the fork), finds the threads whose
 * recording ended early (displaced.c); an armed tracer disarms; every
 * later call does nothing.  Never fails (an interrupt goes to kept). */
void ft_latch_stop(ft_tracer *tracer, const ft_anchor *at, int in_child,
                   ft_interrupt *kept);
/* Whether clear() may free the records now (not inside start() or stop()):
 * 0, or -1 with a RuntimeError. */
int ft_check_not_in_call(ft_tracer *tracer, const char *what);
/* The tracer's stop when it is about to be freed (tp_finalize): runs Python
 * code, raises nothing. */
void ft_tracer_finalize(ft_tracer *tracer);
/* Makes an active tracer inert without running Python code (tp_clear and
 * tp_dealloc, after its finalizer): the hooks record nothing from now on,
 * and go at their thread's next event (setprofile) or stay, inert, with
 * the tool id (monitoring). */
void ft_tracer_silence(ft_tracer *tracer);

/* An armed tracer's names of the threads, replaced (names stolen). */
void ft_armed_note_names(ft_tracer *tracer, PyObject *names);
/* In a forked child, what a start() another thread was running had made
 * for a tracer not armed yet goes, so that the tracer can start there. */
void ft_tracer_abandon_start(ft_tracer *tracer);

#endif /* FT_LIFECYCLE_H */
