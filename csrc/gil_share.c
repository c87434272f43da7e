/* _share_gil(on): this thread's long work with the GIL gives it away in
 * turns (gil_share.h). */
#include "gil_share.h"

FT_TLS int ft_gil_sharing;

static PyObject *
share_gil(PyObject *Py_UNUSED(module), PyObject *on)
{
    int truth = PyObject_IsTrue(on);
    if (truth < 0) {
        return NULL;
    }
    ft_gil_sharing = truth;
    Py_RETURN_NONE;
}

PyMethodDef ft_share_gil_def = {
    "_share_gil", share_gil, METH_O,
    "_share_gil(on): whether this thread's long work with the GIL (the "
    "join of torch's ops, rendering slices) gives it away in turns of "
    "25 us, for a program that runs beside it.",
};
