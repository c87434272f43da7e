/* getEvents(): replay every thread of a recording, then build the Event
 * objects; the readers' reference to a recording (ft_export_begin()). */
#include "state.h"
#include "recording.h"
#include "replay.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The shared (name, filename, lineno, kind) tuple of ev's function, made
 * at its first event; infos is indexed by function index and kind. */
static PyObject *
event_info(ft_state *state, const ft_recording *rec, const ft_event *ev,
           PyObject **infos)
{
    uint32_t idx = ev->func & ~FT_ID_IGNORED;
    PyObject **slot = &infos[2 * (size_t)idx + (ev->is_c ? 1 : 0)];
    if (*slot == NULL) {
        const ft_func *func = ft_functable_get(rec->funcs, ev->func);
        if (func->state == FT_FUNC_FREE) {
            /* No record refers to a freed entry: named "?" all the same. */
            PyObject *unknown = PyUnicode_FromString("?");
            *slot = unknown == NULL ? NULL
                    : ft_event_info(state, unknown, unknown, 0,
                                    ev->is_c);
            Py_XDECREF(unknown);
            return *slot;
        }
        *slot = ft_event_info(state, func->name, func->filename,
                              func->lineno, ev->is_c);
    }
    return *slot;
}

uint64_t
ft_thread_lost_records(const ft_thread *th)
{
    return ft_ring_overwritten(&th->ring) + th->lost;
}

/* The replay's input for thread th of a stopped tracer. */
static void
thread_input(const ft_thread *th, const ft_clock *clock, int64_t stop_ns,
             ft_replay_input *in)
{
    *in = (ft_replay_input){
        .ring = &th->ring,
        .clock = clock,
        .base_ticks = th->base_ticks,
        .base_stack = th->base_stack,
        .base_depth = (size_t)th->base_depth,
        .base_known = 1,
        .stop_stack = th->stop_stack,
        .stop_depth = (size_t)th->stop_depth,
        .stop_ns = stop_ns,
    };
    if (th->window_ticks != 0) {
        ft_clock_cursor cursor = {0};
        int64_t window_ns = ft_clock_convert(clock, th->window_ticks, &cursor);
        in->window_ns = window_ns != 0 ? window_ns : 1;
    }
    if (th->loss_ticks != 0) {
        ft_clock_cursor cursor = {0};
        int64_t loss_ns = ft_clock_convert(clock, th->loss_ticks, &cursor);
        in->loss_ns = loss_ns != 0 ? loss_ns : 1;  /* 0: not lost */
    }
}

/* Replays thread i of a recording, appending to vec; counts the events it
 * lost entirely the first time. */
static int
replay_thread(ft_recording *rec, Py_ssize_t i, ft_eventvec *vec)
{
    ft_thread *th = rec->threads[i];
    ft_replay_input in;
    thread_input(th, &rec->clock, rec->stop_ns, &in);
    int64_t partial;
    if (ft_replay_thread(&in, vec, &partial) < 0) {
        return -1;
    }
    if (!th->dropped_counted) {
        th->dropped_events = ft_dropped_events(ft_thread_lost_records(th),
                                               partial);
        th->dropped_counted = 1;
    }
    return 0;
}

int
ft_replay_all(ft_recording *rec, ft_eventvec *vec, size_t **thread_end)
{
    *thread_end = malloc(((size_t)rec->nthreads + 1) * sizeof(size_t));
    if (*thread_end == NULL) {
        return -1;
    }
    for (Py_ssize_t i = 0; i < rec->nthreads; i++) {
        if (replay_thread(rec, i, vec) < 0) {
            return -1;
        }
        (*thread_end)[i] = vec->len;
    }
    return 0;
}

int
ft_count_dropped(ft_tracer *tracer)
{
    Py_ssize_t n = tracer->nthreads;
    Py_ssize_t uncounted = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uncounted += !tracer->threads[i]->dropped_counted;
    }
    if (uncounted == 0) {
        return 0;
    }
    /* The replays that count run with the GIL released, holding the
     * recording (they can be many: every thread whose ring overflowed). */
    ft_export ex;
    if (ft_export_begin(&ex, tracer, "counting the dropped events") < 0) {
        return -1;
    }
    uint8_t *todo = calloc((size_t)n + 1, 1);
    uint64_t *lost = calloc((size_t)n + 1, sizeof(uint64_t));
    int64_t *partial = calloc((size_t)n + 1, sizeof(int64_t));
    int rc = todo != NULL && lost != NULL && partial != NULL ? 0 : -1;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        todo[i] = !ex.threads[i]->dropped_counted;
    }
    if (rc == 0) {
        ft_thread_events te = {0};
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
            if (!todo[i]) {
                continue;
            }
            lost[i] = ft_thread_lost_records(ex.threads[i]);
            if (lost[i] != 0) {  /* else nothing lost: no replay needed */
                ft_replay_input in;
                thread_input(ex.threads[i], &ex.clock, ex.stop_ns, &in);
                rc = ft_replay_thread_events(&in, &te, &partial[i]);
            }
        }
        ft_thread_events_free(&te);
        Py_END_ALLOW_THREADS
    }
    /* Another thread may have counted some meanwhile: the same counts. */
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        ft_thread *th = ex.threads[i];
        if (todo[i] && !th->dropped_counted) {
            th->dropped_events = lost[i] ? ft_dropped_events(lost[i], partial[i])
                                         : 0;
            th->dropped_counted = 1;
        }
    }
    free(todo);
    free(lost);
    free(partial);
    ft_export_end(&ex);
    if (rc < 0) {
        PyErr_NoMemory();
    }
    return rc;
}

int
ft_export_begin(ft_export *ex, ft_tracer *tracer, const char *who)
{
    memset(ex, 0, sizeof(*ex));
    ft_recording *rec = ft_tracer_recording(tracer, who);
    if (rec == NULL) {
        return -1;
    }
    ft_recording_forget(rec);
    rec->readers++;
    ex->rec = (ft_recording *)Py_NewRef(rec);
    ex->threads = rec->threads;
    ex->nthreads = rec->nthreads;
    ex->clock = rec->clock;
    ex->stop_ns = rec->stop_ns;
    ex->pid = (long)getpid();
    return 0;
}

int
ft_export_thread(const ft_export *ex, Py_ssize_t i, ft_thread_events *te)
{
    ft_replay_input in;
    thread_input(ex->threads[i], &ex->clock, ex->stop_ns, &in);
    return ft_replay_thread_events(&in, te, NULL);
}

uint64_t
ft_export_estimate(const ft_export *ex, Py_ssize_t i)
{
    const ft_thread *th = ex->threads[i];
    return ft_ring_retained(&th->ring) / 2 + (uint64_t)th->base_depth;
}

void
ft_export_end(ft_export *ex)
{
    ft_recording *rec = ex->rec;
    if (rec == NULL) {
        return;
    }
    ex->rec = NULL;
    /* In a forked child, a reader of the parent's: the child forgot its
     * reference already, or will. */
    if (ex->pid == (long)getpid()) {
        rec->readers--;
        Py_DECREF(rec);
    }
}

PyObject *
ft_build_events(ft_state *state, ft_recording *rec)
{
    ft_eventvec vec = {0};
    size_t *thread_end = NULL;
    PyObject **infos = NULL;
    /* One per function and kind (see event_info()). */
    size_t ninfos = 2 * ((size_t)rec->funcs->nfuncs + 1);
    PyObject *list = NULL;
    Py_ssize_t nthreads = rec->nthreads;

    /* GC off throughout: pure cost here (millions of new tracked objects,
     * none of them garbage); the caller holds rec. */
    int gc_was_enabled = PyGC_Disable();
    /* Replay first, in pure C. */
    if (ft_replay_all(rec, &vec, &thread_end) < 0) {
        goto nomem;
    }
    infos = calloc(ninfos, sizeof(PyObject *));
    if (infos == NULL) {
        goto nomem;
    }
    if (vec.len > (size_t)PY_SSIZE_T_MAX) {
        goto nomem;
    }
    list = PyList_New((Py_ssize_t)vec.len);
    if (list == NULL) {
        goto error;
    }
    size_t pos = 0;
    for (Py_ssize_t i = 0; i < nthreads; i++) {
        const ft_thread *th = rec->threads[i];
        PyObject *thread = Py_BuildValue("(kkn)", th->thread_id,
                                         th->native_id, i + 1);
        if (thread == NULL) {
            goto error;
        }
        for (; pos < thread_end[i]; pos++) {
            const ft_event *ev_rec = &vec.items[pos];
            PyObject *info = event_info(state, rec, ev_rec, infos);
            PyObject *ev = info == NULL ? NULL
                : ft_event_from_record(state->event_type, info, thread,
                                       ev_rec);
            if (ev == NULL) {
                Py_DECREF(thread);
                goto error;
            }
            PyList_SET_ITEM(list, (Py_ssize_t)pos, ev);
        }
        Py_DECREF(thread);
    }
    goto done;

nomem:
    PyErr_NoMemory();
error:
    Py_CLEAR(list);
done:
    if (infos != NULL) {
        for (size_t i = 0; i < ninfos; i++) {
            Py_XDECREF(infos[i]);
        }
        free(infos);
    }
    free(thread_end);
    ft_eventvec_free(&vec);
    if (gc_was_enabled) {
        PyGC_Enable();
    }
    return list;
}
