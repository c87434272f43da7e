/* frametrace._testing: what only the tests and the benchmarks need, kept
 * out of the product module frametrace._tracer.  Built from csrc/testing/
 * with the plain-C parts of the core it drives (ring.c, clock.c, replay.c,
 * monitor_tool.c). */
#ifndef FT_TESTING_H
#define FT_TESTING_H

#include "../compat.h"
#include "../clock.h"
#include "../functable.h"  /* FT_ID_IGNORED: the largest id + 1 */
#include "../monitor_tool.h"
#include "../replay.h"
#include "../ring.h"

typedef struct {
    PyTypeObject *floor_ring_type;  /* strong */
    PyTypeObject *callback_type;    /* strong: 3.12+, else NULL */
} ftt_state;

static inline ftt_state *
ftt_get_state(PyObject *module)
{
    void *state = PyModule_GetState(module);
    assert(state != NULL);
    return (ftt_state *)state;
}

/* floors.c: the benchmarks' references, set_noop_profile() and (3.12+)
 * set_noop_monitoring(). */
extern PyType_Spec ftt_floor_ring_spec;
PyObject *ftt_set_noop_profile(PyObject *module, PyObject *args,
                               PyObject *kwargs);
#if FT_HAVE_MONITORING
PyObject *ftt_set_noop_monitoring(PyObject *module, PyObject *args,
                                  PyObject *kwargs);
#endif

/* nest.c: nest(frames, ops, tolerance_ns). */
PyObject *ftt_nest(PyObject *module, PyObject *args);

/* bindings.c: bound_function(name, module). */
PyObject *ftt_bound_function(PyObject *module, PyObject *args);

/* records.c: pattern_match(pattern, name), csrc/glob.c's rule. */
PyObject *ftt_pattern_match(PyObject *module, PyObject *args);

/* lifecycle.c: lifecycle_counts(tracer). */
PyObject *ftt_lifecycle_counts(PyObject *module, PyObject *tracer);

/* records.c: the replay and the clock driven by hand-written input, and
 * profile_off()/profile_on(), an extension that swaps the profile function
 * mid-call. */
PyObject *ftt_replay(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *ftt_ticks_to_ns(PyObject *module, PyObject *args);
int ftt_add_profile_toggles(PyObject *module);

#endif /* FT_TESTING_H */
