/* The references the benchmarks measure frametrace against: what the least
 * a tracer does costs.  The floor is a C profile function that does
 * nothing: any PyEval_SetProfile tracer pays at least that.  With the clock,
 * it also reads the tick counter and stores one 8-byte word per event into
 * a ring, the least a ring-buffer tracer does.  On 3.12+ the same two run as
 * sys.monitoring callbacks on the events the monitoring backend uses. */
#include "testing.h"

#include <string.h>

/* The ring of the clock variants, with the tracer's clock and ring code. */
typedef struct {
    PyObject_HEAD
    ft_clock clock;   /* only use_cycles: the ticks are never converted */
    ft_ring ring;
} floor_ring;

#define FLOOR_RING_WORDS ((uint64_t)1 << 20)  /* the default buffer_size */
#define FLOOR_TOOL_NAME "frametrace-floor"

static void
floor_ring_dealloc(floor_ring *self)
{
    PyTypeObject *type = Py_TYPE(self);
    ft_ring_free(&self->ring);
    PyObject_Free(self);
    Py_DECREF(type);
}

static PyType_Slot floor_ring_slots[] = {
    {Py_tp_doc, "The ring of a benchmark reference hook (internal)."},
    {Py_tp_dealloc, floor_ring_dealloc},
    {0, NULL},
};

PyType_Spec ftt_floor_ring_spec = {
    .name = "frametrace._testing._FloorRing",
    .basicsize = sizeof(floor_ring),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE
             | Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = floor_ring_slots,
};

static PyObject *
new_floor_ring(PyObject *module)
{
    floor_ring *self = PyObject_New(floor_ring,
                                    ftt_get_state(module)->floor_ring_type);
    if (self == NULL) {
        return NULL;
    }
    memset(&self->clock, 0, sizeof(self->clock));
    memset(&self->ring, 0, sizeof(self->ring));
    self->clock.use_cycles = ft_clock_cycles_usable();
    int64_t origin = ft_clock_ticks(&self->clock);
    int rc;
    Py_BEGIN_ALLOW_THREADS  /* faulting the ring in takes milliseconds */
    rc = ft_ring_alloc(&self->ring, FLOOR_RING_WORDS, origin);
    if (rc == 0 && self->ring.capacity < FLOOR_RING_WORDS) {
        /* All of it, as before rings grew: the floor's footprint. */
        rc = ft_ring_grow(&self->ring, FLOOR_RING_WORDS);
    }
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    return (PyObject *)self;
}

static inline void
floor_record(floor_ring *self)
{
    int64_t ts = ft_clock_ticks(&self->clock);
    if (!ft_ring_try_push(&self->ring, ts, 0, FT_REC_CALL)) {
        (void)ft_ring_push(&self->ring, ts, 0, FT_REC_CALL);
    }
}

/* ---- PyEval_SetProfile ---------------------------------------------------- */

static int
noop_profile(PyObject *Py_UNUSED(obj), PyFrameObject *Py_UNUSED(frame),
             int Py_UNUSED(what), PyObject *Py_UNUSED(arg))
{
    return 0;
}

static int
clock_profile(PyObject *obj, PyFrameObject *Py_UNUSED(frame),
              int Py_UNUSED(what), PyObject *Py_UNUSED(arg))
{
    floor_record((floor_ring *)obj);
    return 0;
}

PyObject *
ftt_set_noop_profile(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"", "clock", NULL};
    PyObject *enable;
    int clock = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:set_noop_profile",
                                     keywords, &enable, &clock)) {
        return NULL;
    }
    int on = PyObject_IsTrue(enable);
    if (on < 0) {
        return NULL;
    }
    PyThreadState *ts = PyThreadState_Get();
    int ours = ft_tstate_profile_func(ts) == noop_profile
               || ft_tstate_profile_func(ts) == clock_profile;
    if (!on) {
        /* Removes the reference only, never another tool's function. */
        if (ours) {
            PyEval_SetProfile(NULL, NULL);
        }
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    }
    if (ft_tstate_profile_func(ts) != NULL && !ours) {
        PyErr_SetString(PyExc_RuntimeError,
                        "a profile function is already installed");
        return NULL;
    }
    PyObject *ring = clock ? new_floor_ring(module) : NULL;
    if (clock && ring == NULL) {
        return NULL;
    }
    PyEval_SetProfile(clock ? clock_profile : noop_profile, ring);
    Py_XDECREF(ring);  /* the thread state holds it */
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
}

/* ---- sys.monitoring ------------------------------------------------------- */

#if FT_HAVE_MONITORING
static PyObject *
noop_callback(PyObject *Py_UNUSED(callable), PyObject *const *Py_UNUSED(args),
              size_t Py_UNUSED(nargsf), PyObject *Py_UNUSED(kwnames))
{
    Py_RETURN_NONE;
}

static PyObject *
clock_callback(PyObject *callable, PyObject *const *Py_UNUSED(args),
               size_t Py_UNUSED(nargsf), PyObject *Py_UNUSED(kwnames))
{
    floor_record((floor_ring *)((ft_callback *)callable)->owner);
    Py_RETURN_NONE;
}

/* Whether the reference holds the tool id; -1 with an exception. */
static int
floor_holds_tool(void)
{
    PyObject *holder = ft_monitor_holder();
    if (holder == NULL) {
        return -1;
    }
    int ours = PyUnicode_Check(holder)
               && PyUnicode_CompareWithASCIIString(holder,
                                                   FLOOR_TOOL_NAME) == 0;
    Py_DECREF(holder);
    return ours;
}

PyObject *
ftt_set_noop_monitoring(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"", "clock", "c_calls", NULL};
    PyObject *enable;
    int clock = 0, c_calls = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "O|$pp:set_noop_monitoring", keywords,
                                     &enable, &clock, &c_calls)) {
        return NULL;
    }
    int on = PyObject_IsTrue(enable);
    int ours = on < 0 ? -1 : floor_holds_tool();
    if (ours < 0) {
        return NULL;
    }
    if (ours) {
        (void)ft_monitor_release(FLOOR_TOOL_NAME, NULL, NULL, -1);
    }
    if (!on) {
        Py_RETURN_NONE;
    }
    if (ft_refuse_conflict(PyExc_RuntimeError, ft_monitor_conflict()) < 0) {
        return NULL;
    }
    PyObject *owner = clock ? new_floor_ring(module) : Py_NewRef(Py_None);
    if (owner == NULL) {
        return NULL;
    }
    vectorcallfunc funcs[FT_MON_NEVENTS];
    for (int i = 0; i < FT_MON_NEVENTS; i++) {
        funcs[i] = clock ? clock_callback : noop_callback;
    }
    int rc = ft_monitor_take(ftt_get_state(module)->callback_type,
                             FLOOR_TOOL_NAME, owner, funcs, c_calls, NULL);
    Py_DECREF(owner);  /* the callbacks hold it */
    return rc < 0 ? NULL : Py_NewRef(Py_None);
}
#endif
