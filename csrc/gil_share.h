/* Long work done with the GIL on a thread that writes beside a running
 * program (a session's writer thread joining torch's ops and rendering
 * them) gives the GIL away every FT_GIL_SHARE_NS: the training loop,
 * which releases the GIL in each native call, then waits that long at
 * most when it returns, instead of the interpreter's switch interval
 * (5 ms) each time.  Off on every other thread, where it would only slow
 * the work down. */
#ifndef FT_GIL_SHARE_H
#define FT_GIL_SHARE_H

#include "Python.h"
#include "compat.h"

#include <stdint.h>
#include <time.h>

/* How long a turn with the GIL lasts: about one small native call of the
 * loop, so that the writer's turns mostly fit where the loop runs without
 * the GIL. */
#define FT_GIL_SHARE_NS 25000
/* The pause after a turn: long enough for a thread that waits for the GIL
 * to wake and take it (the writer's next turn then waits for the loop's
 * next native call). */
#define FT_GIL_SHARE_PAUSE_NS 10000

/* Set by _share_gil() on the writer's thread. */
extern FT_TLS int ft_gil_sharing;

typedef struct {
    int64_t due;    /* the end of this turn; INT64_MAX: not sharing */
} ft_gil_share;

static inline int64_t
ft_gil_share_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void
ft_gil_share_begin(ft_gil_share *g)
{
    g->due = ft_gil_sharing ? ft_gil_share_now() + FT_GIL_SHARE_NS
                            : INT64_MAX;
}

/* Called with the GIL between two items of the work, where no borrowed
 * reference is kept: at the end of a turn, lets other threads have the
 * GIL. */
static inline void
ft_gil_share_point(ft_gil_share *g)
{
    if (g->due == INT64_MAX || ft_gil_share_now() < g->due) {
        return;
    }
    Py_BEGIN_ALLOW_THREADS
    struct timespec pause = {0, FT_GIL_SHARE_PAUSE_NS};
    nanosleep(&pause, NULL);
    Py_END_ALLOW_THREADS
    g->due = ft_gil_share_now() + FT_GIL_SHARE_NS;
}

extern PyMethodDef ft_share_gil_def;

#endif
