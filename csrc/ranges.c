/* Ranges: named spans a user marks with ``with frametrace.range(name):``.
 * A C type, so that entering and leaving one (type call and with-slots)
 * produces no trace event and costs two list appends.  Each enter and exit
 * appends ("B"/"E", name, thread_id, ns) to the sink the recording session
 * set, if any; the session pairs them, so a range may begin before a
 * window and end in it, or the other way round. */
#include "state.h"
#include "clock.h"

typedef struct {
    PyObject_HEAD
    PyObject *name;   /* strong: str */
} ft_rangeobject;

static PyObject *
range_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"name", NULL};
    PyObject *name;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:range", kwlist, &name)) {
        return NULL;
    }
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "range name must be a str, not %.100s",
                     Py_TYPE(name)->tp_name);
        return NULL;
    }
    ft_rangeobject *self = (ft_rangeobject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->name = Py_NewRef(name);
    return (PyObject *)self;
}

/* Appends (mark, name, thread_id, now) to sink. */
static int
append_mark(PyObject *sink, const char *mark, PyObject *name)
{
    PyObject *entry = Py_BuildValue("(sOkL)", mark, name,
                                    PyThread_get_thread_ident(),
                                    (long long)ft_clock_now());
    if (entry == NULL) {
        return -1;
    }
    int rc = PyList_Append(sink, entry);
    Py_DECREF(entry);
    return rc;
}

static PyObject *
range_enter(ft_rangeobject *self, PyObject *Py_UNUSED(ignored))
{
    ft_state *state = ft_state_of_type(Py_TYPE(self));
    if (state == NULL) {
        return NULL;
    }
    if (state->range_sink != NULL
        && append_mark(state->range_sink, "B", self->name) < 0) {
        return NULL;
    }
    return Py_NewRef(self);
}

static PyObject *
range_exit(ft_rangeobject *self, PyObject *const *Py_UNUSED(args),
           Py_ssize_t Py_UNUSED(nargs))
{
    ft_state *state = ft_state_of_type(Py_TYPE(self));
    if (state == NULL) {
        return NULL;
    }
    /* Also an exit whose enter came before the session recorded: the
     * session gives it the window's start. */
    PyObject *sink = state->range_sink;
    if (sink != NULL && append_mark(sink, "E", self->name) < 0) {
        return NULL;
    }
    Py_RETURN_FALSE;
}

static PyObject *
range_get_name(ft_rangeobject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->name);
}

static int
range_traverse(ft_rangeobject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->name);
    return 0;
}

static int
range_clear(ft_rangeobject *self)
{
    Py_CLEAR(self->name);
    return 0;
}

static void
range_dealloc(ft_rangeobject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    range_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *
set_range_sink(PyObject *module, PyObject *sink)
{
    if (sink != Py_None && !PyList_CheckExact(sink)) {
        PyErr_SetString(PyExc_TypeError, "the range sink must be a list or None");
        return NULL;
    }
    ft_state *state = ft_get_state(module);
    Py_XSETREF(state->range_sink, sink == Py_None ? NULL : Py_NewRef(sink));
    Py_RETURN_NONE;
}

PyMethodDef ft_set_range_sink_def = {
    "_set_range_sink", set_range_sink, METH_O,
    "_set_range_sink($module, sink, /)\n--\n\n"
    "Send range marks to sink (a list), or nowhere (None).  For sessions.",
};

static PyMethodDef range_methods[] = {
    {"__enter__", (PyCFunction)range_enter, METH_NOARGS,
     "__enter__($self, /)\n--\n\nMark the start of the range."},
    {"__exit__", (PyCFunction)(void (*)(void))range_exit, METH_FASTCALL,
     "__exit__($self, *exc_info, /)\n--\n\nMark its end."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef range_getset[] = {
    {"name", (getter)range_get_name, NULL, "the range's name", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot range_slots[] = {
    {Py_tp_doc,
     "range(name)\n--\n\n"
     "A named span of a profiling session: ``with frametrace.range(name):``.\n"
     "Recorded while a session records, whether or not Python tracing is on."},
    {Py_tp_new, range_new},
    {Py_tp_dealloc, range_dealloc},
    {Py_tp_traverse, range_traverse},
    {Py_tp_clear, range_clear},
    {Py_tp_methods, range_methods},
    {Py_tp_getset, range_getset},
    {0, NULL},
};

PyType_Spec ft_range_spec = {
    .name = "frametrace._tracer.Range",
    .basicsize = sizeof(ft_rangeobject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = range_slots,
};
