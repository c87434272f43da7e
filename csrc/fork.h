/* fork.c: what os.fork() does to a tracer. */
#ifndef FT_FORK_H
#define FT_FORK_H

#include "state.h"
#include "threads.h"

/* os.register_at_fork() callbacks: the parent goes on tracing; in the child
 * the tracer is stopped as of the moment just before the fork.  0, or -1
 * with an exception set. */
int ft_register_at_fork(PyObject *module);
/* At the end of a start() during which this process was forked (the
 * child): the stop the fork left pending, as of the fork. */
void ft_fork_stop_pending(ft_tracer *tracer, ft_interrupt *kept);

#endif /* FT_FORK_H */
