/* Setting the Python audit hooks aside (audit_aside.c): a header of its own,
 * free of state.h, because that file is built with CPython's internal
 * headers. */
#ifndef FT_AUDIT_ASIDE_H
#define FT_AUDIT_ASIDE_H

#include <Python.h>

/* Takes the caller's interpreter's Python audit hooks (sys.addaudithook())
 * off it into *saved (NULL: there were none).  0, or -1 when the field does
 * not look like CPython's list of hooks (a build against other internal
 * headers than this interpreter's): nothing is changed then, and no
 * exception is set.  The GIL is held throughout, and no Python code may run
 * until ft_audit_hooks_put_back(). */
int ft_audit_hooks_set_aside(PyObject **saved);
/* Gives back what ft_audit_hooks_set_aside() took, keeping any hook added
 * meanwhile.  Never raises (an append that fails is reported as
 * unraisable). */
void ft_audit_hooks_put_back(PyObject *saved);

#endif
