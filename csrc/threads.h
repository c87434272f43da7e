/* threads.c: the registry of a tracer's threads, their stacks, names and
 * rings, and the caller's thread through the thread-local cache. */
#ifndef FT_THREADS_H
#define FT_THREADS_H

#include "state.h"

/* ---- registry and stacks ---- */

/* The thread registered with tracer for thread state ts, or NULL. */
ft_thread *ft_find_thread(const ft_tracer *tracer, PyThreadState *ts);
/* The same, or else the thread whose OS thread ts runs on (a thread state
 * C code made for one call into Python, PyGILState_Ensure()), which then
 * notes ts as its thread state.  Pure C; a walk over the threads for a
 * thread state not registered: for stop() and snapshot(). */
ft_thread *ft_find_thread_of(ft_tracer *tracer, PyThreadState *ts);
/* Registers (or finds, by thread state) the thread ts with tracer, capturing
 * its Python stack (from top, borrowed, may be NULL) as the base stack at
 * base_ticks.  Returns the thread (owned by tracer), or NULL with an
 * exception set. */
ft_thread *ft_register_thread(ft_tracer *tracer, PyThreadState *ts,
                              PyFrameObject *top, int64_t base_ticks);
/* Frees a thread and what it owns (its ring, stacks and name). */
void ft_thread_free(ft_thread *thread);
/* Frees the tracer's threads (their rings and stacks). */
void ft_free_threads(ft_tracer *tracer);
/* Frees n threads and the array holding them (a recording's). */
void ft_free_thread_array(ft_thread **threads, Py_ssize_t n);
/* Ids of the Python frames from top (borrowed, may be NULL) down,
 * outermost first, into a malloc'd array.  0, or -1 with an exception. */
int ft_capture_stack(ft_tracer *tracer, PyFrameObject *top, uint32_t **stack,
                     Py_ssize_t *depth);
/* Takes the stack of thread th (running as ts; th may be NULL) at stop or
 * at a snapshot, unless taken already.  Raises nothing. */
void ft_take_stop_stack(ft_tracer *tracer, ft_thread *th, PyThreadState *ts);
/* Whether th's OS thread is still running (it recorded, and has not
 * exited). */
static inline int
ft_thread_os_alive(const ft_thread *th)
{
    return th->os_thread != NULL
           && atomic_load_explicit(&th->os_thread->alive,
                                   memory_order_acquire);
}
/* Whether a thread state with this id (unique in the process) is alive. */
int ft_tstate_id_alive(uint64_t id);

/* ---- interrupts met in the Python code start() and stop() run ---- */

/* An interrupt met in the Python code start() and stop() run (threading,
 * thread names, audit hooks): an exception that is no Exception, such as
 * the KeyboardInterrupt a signal handler raises there.  Kept (the first
 * one) and raised once the tracer's state is whole, never reported as
 * unraisable. */
typedef struct {
    int held;
    ft_saved_exc exc;
} ft_interrupt;

/* Whether the exception set is an interrupt, now kept in *kept (or
 * cleared: one is kept).  kept NULL (no caller to raise it to): never. */
int ft_keep_interrupt(ft_interrupt *kept);
/* rc, or -1 with the interrupt kept (preferred to another error). */
int ft_raise_kept(ft_interrupt *kept, int rc);

/* ---- names ---- */

/* {ident: name} of the threads threading knows: a new reference, or NULL.
 * Runs Python code; never raises (an interrupt goes to kept). */
PyObject *ft_thread_names(ft_interrupt *kept);
/* The same, of the calling thread only. */
PyObject *ft_caller_thread_names(void);
/* Gives thread its name from such a dict (NULL: none).  Runs no Python
 * code. */
void ft_name_thread(ft_thread *thread, PyObject *names);

/* ---- rings ---- */

/* ft_ring_alloc(), holding the GIL. */
int ft_alloc_ring(ft_ring *ring, uint64_t capacity, int64_t origin);
/* Gives th, the calling thread's, its ring, counted in the tracer's memory,
 * and its ids from the thread itself.  Runs no Python code. */
void ft_adopt_ring(ft_tracer *tracer, ft_thread *th, const ft_ring *ring);
/* A thread's first record: its ring, one page (hook: the thread's own
 * hook object (3.10/3.11), or NULL).  0 with *ts the time after, or -1:
 * record nothing. */
int ft_thread_first_ring(ft_tracer *tracer, ft_thread *th, ft_hookobject *hook,
                         int64_t *ts);

/* ---- the caller's thread ---- */

/* A new generation, for a tracer that starts. */
uint64_t ft_next_generation(void);

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

#endif /* FT_THREADS_H */
