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
#include "clock.h"

#include <stdint.h>
#include <time.h>

/* How long a turn with the GIL lasts: a few of the loop's native calls,
 * so that the writer's turns mostly fit where the loop runs without the
 * GIL; shorter turns cost the loop more in hand-overs than they save in
 * waiting (measured on a transformer's training steps). */
#define FT_GIL_SHARE_NS 100000
/* The pause after a turn: long enough for a thread that waits for the GIL
 * to wake and take it (the writer's next turn then waits for the loop's
 * next native call). */
#define FT_GIL_SHARE_PAUSE_NS 10000

/* Set by _share_gil() on the writer's thread. */
extern FT_TLS int ft_gil_sharing;

typedef struct {
    int64_t due;    /* the end of this turn; INT64_MAX: not sharing */
} ft_gil_share;

static inline void
ft_gil_share_begin(ft_gil_share *g)
{
    g->due = ft_gil_sharing ? ft_clock_now() + FT_GIL_SHARE_NS
                            : INT64_MAX;
}

/* Called with the GIL between two items of the work, where no borrowed
 * reference is kept: at the end of a turn, lets other threads have the
 * GIL. */
static inline void
ft_gil_share_point(ft_gil_share *g)
{
    if (g->due == INT64_MAX || ft_clock_now() < g->due) {
        return;
    }
    Py_BEGIN_ALLOW_THREADS
    struct timespec pause = {0, FT_GIL_SHARE_PAUSE_NS};
    nanosleep(&pause, NULL);
    Py_END_ALLOW_THREADS
    g->due = ft_clock_now() + FT_GIL_SHARE_NS;
}

extern PyMethodDef ft_share_gil_def;

#endif
