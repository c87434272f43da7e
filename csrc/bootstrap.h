/* bootstrap.c: the profile function threading gives the threads started
 * while a tracer is armed or active. */
#ifndef FT_BOOTSTRAP_H
#define FT_BOOTSTRAP_H

#include "state.h"

/* _thread_bootstrap(), the profile function given to threading.setprofile()
 * while a tracer is active: a new thread installs the hook itself. */
extern PyMethodDef ft_thread_bootstrap_def;
/* What _thread_bootstrap(frame, event, arg) does: registers the calling
 * thread with the active tracer (or finds it), installs the hook on it and
 * records the event; with no tracer active, turns profiling off on it. */
PyObject *ft_bootstrap_thread(ft_state *state, PyObject *const *args,
                              Py_ssize_t nargs);

#endif /* FT_BOOTSTRAP_H */
