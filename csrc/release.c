/* The function table's sweep: entries no retained record references are
 * released, so that code made at run time (exec, dataclasses, namedtuples,
 * torch.compile) does not grow the table for as long as the tracer records
 * (see functable.h for an entry's states).
 *
 * A sweep reads every word the rings retain, under the GIL: it runs when
 * the table has grown to twice what the last one left live (at least
 * FT_RELEASE_MIN entries), from a safe point: Tracer.mark() (each step of
 * a session or a flight recorder), a pending call that the hook schedules
 * in the main interpreter when the table passes that size, or
 * Tracer.release_functions().  Pending dumps are snapshots, which hold a
 * copy of the table: their names stay until they are written. */
#include "state.h"

#include <stdlib.h>

static void
mark_stack(const uint32_t *ids, Py_ssize_t depth, uint8_t *marks, uint32_t n)
{
    for (Py_ssize_t i = 0; ids != NULL && i < depth; i++) {
        uint32_t id = ids[i] & ~FT_ID_IGNORED;
        if (id < n) {
            marks[id] = 1;
        }
    }
}

int64_t
ft_release_functions(ft_tracer *tracer)
{
    if (tracer->phase != FT_PHASE_ACTIVE || tracer->in_call != FT_IN_NONE) {
        return 0;
    }
    ft_functable *table = &tracer->funcs;
    uint32_t n = table->nfuncs;
    uint8_t *referenced = calloc(n ? n : 1, 1);
    if (referenced == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < tracer->nthreads; i++) {
        const ft_thread *th = tracer->threads[i];
        ft_ring_mark_ids(&th->ring, referenced, n);
        mark_stack(th->base_stack, th->base_depth, referenced, n);
        mark_stack(th->stop_stack, th->stop_depth, referenced, n);
    }
    PyObject **garbage;
    size_t ngarbage;
    uint64_t freed = table->freed;
    int rc = ft_functable_sweep(table, referenced, &garbage, &ngarbage);
    free(referenced);
    if (rc < 0) {
        PyErr_NoMemory();
        return -1;
    }
    uint64_t next = 2 * (uint64_t)table->used;
    tracer->release.at = next > FT_RELEASE_MIN ? (uint32_t)next
                                                : FT_RELEASE_MIN;
    tracer->release.sweeps++;
    /* The table is consistent: what the freed entries held may go now,
     * even if that runs Python code (traced like any other). */
    for (size_t i = 0; i < ngarbage; i++) {
        Py_DECREF(garbage[i]);
    }
    free(garbage);
    return (int64_t)(table->freed - freed);
}

/* The pending call: arg is the tracer, a strong reference. */
static int
release_pending(void *arg)
{
    ft_tracer *tracer = (ft_tracer *)arg;
    tracer->release.scheduled = 0;
    if (tracer->funcs.used >= tracer->release.at) {
        ft_saved_exc saved;
        FT_SAVE_EXC(saved);
        if (ft_release_functions(tracer) < 0) {
            PyErr_Clear();  /* no memory: the next one tries again */
        }
        FT_RESTORE_EXC(saved);
    }
    Py_DECREF(tracer);
    return 0;
}

void
ft_release_schedule(ft_tracer *tracer)
{
    /* Pending calls run in the main interpreter's main thread: a tracer
     * of another interpreter sweeps at its marks only. */
    if (tracer->release.scheduled
        || PyInterpreterState_Get() != PyInterpreterState_Main()) {
        return;
    }
    Py_INCREF(tracer);
    if (Py_AddPendingCall(release_pending, tracer) < 0) {
        /* The queue is full: a later new function tries again.  Not our
         * last reference: the caller holds the tracer. */
        Py_DECREF(tracer);
        return;
    }
    tracer->release.scheduled = 1;
}
