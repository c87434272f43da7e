/* frametrace.Event: one function execution.  A compact immutable record
 * rather than a tuple: getEvents() makes millions of them, and a 12-item
 * tuple with three fresh ints costs four allocations and ~240 bytes each;
 * this is one allocation of 80.  It behaves as the 14-sequence it replaces
 * (fields by name and by index, unpacking, iteration, equality and ordering
 * with Events and tuples, hashing, pickling).
 *
 * Two kinds of instance share the layout:
 * - built by getEvents(): info is the function's (name, filename, lineno,
 *   kind) tuple and thread its (thread_id, native_thread_id, thread_serial)
 *   tuple, both shared by many events; the numbers are C fields, made ints
 *   on access;
 * - built by Event(sequence) (the loader, tests): info is the tuple of the
 *   14 values as given (12 from files written before thread_serial and
 *   open_at_loss: those two are then 0 and False), thread is NULL.
 * New fields go at the end, so that indices and old files stay valid. */
#include "state.h"

#include <stdint.h>

enum {
    F_NAME, F_FILENAME, F_LINENO, F_KIND, F_THREAD_ID, F_NATIVE_ID,
    F_START, F_END, F_DEPTH, F_PARENT, F_OPEN_START, F_OPEN_STOP,
    F_THREAD_SERIAL, F_OPEN_LOSS,
    FT_EVENT_NFIELDS
};

/* Event(sequence) also takes the fields up to open_at_stop alone. */
#define FT_EVENT_OLD_NFIELDS F_THREAD_SERIAL

typedef struct {
    PyObject_HEAD
    PyObject *info;     /* strong; see above */
    PyObject *thread;   /* strong, or NULL for an Event(sequence) */
    int64_t start_ns;
    int64_t end_ns;
    int64_t parent;
    uint32_t depth;
    uint8_t open_at_start;
    uint8_t open_at_stop;
    uint8_t open_at_loss;
} ft_eventobject;

#define IS_RECORDED(ev) ((ev)->thread != NULL)

PyObject *
ft_event_info(ft_state *state, PyObject *name, PyObject *filename,
              int lineno, int is_c)
{
    return Py_BuildValue("(OOiO)", name, filename, lineno,
                         is_c ? state->str_c : state->str_py);
}

PyObject *
ft_event_from_record(PyTypeObject *type, PyObject *info, PyObject *thread,
                     const ft_event *ev)
{
    /* Not tracked by the GC: info and thread hold only str and int, so a
     * recorded Event is in no cycle (as CPython untracks such tuples). */
    ft_eventobject *self = PyObject_GC_New(ft_eventobject, type);
    if (self == NULL) {
        return NULL;
    }
    self->info = Py_NewRef(info);
    self->thread = Py_NewRef(thread);
    self->start_ns = ev->start_ns;
    self->end_ns = ev->end_ns;
    self->parent = ev->parent;
    self->depth = ev->depth;
    self->open_at_start = ev->open_at_start;
    self->open_at_stop = ev->open_at_stop;
    self->open_at_loss = ev->open_at_loss;
    return (PyObject *)self;
}

int
ft_event_values_span(PyObject *values, ft_event *out)
{
    if (!PyTuple_CheckExact(values)
        || PyTuple_GET_SIZE(values) != FT_EVENT_NFIELDS) {
        return -1;
    }
    int64_t span[2];
    for (int k = 0; k < 2; k++) {
        PyObject *value = PyTuple_GET_ITEM(values, k == 0 ? F_START : F_END);
        int overflow;
        if (!PyLong_CheckExact(value)) {
            return -1;
        }
        span[k] = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow || (span[k] == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return -1;
        }
    }
    uint8_t flags[3];
    static const int at[3] = {F_OPEN_START, F_OPEN_STOP, F_OPEN_LOSS};
    for (int k = 0; k < 3; k++) {
        PyObject *value = PyTuple_GET_ITEM(values, at[k]);
        if (value != Py_True && value != Py_False) {
            return -1;
        }
        flags[k] = value == Py_True;
    }
    out->start_ns = span[0];
    out->end_ns = span[1];
    out->open_at_start = flags[0];
    out->open_at_stop = flags[1];
    out->open_at_loss = flags[2];
    return 0;
}

static void
recorded_numbers(const ft_eventobject *self, ft_event *out)
{
    out->start_ns = self->start_ns;
    out->end_ns = self->end_ns;
    out->parent = self->parent;
    out->depth = self->depth;
    out->open_at_start = self->open_at_start;
    out->open_at_stop = self->open_at_stop;
    out->open_at_loss = self->open_at_loss;
}

int
ft_event_parts(ft_state *state, PyObject *obj, PyObject **info,
               PyObject **thread, ft_event *out)
{
    if (!Py_IS_TYPE(obj, state->event_type)) {
        return -1;
    }
    ft_eventobject *self = (ft_eventobject *)obj;
    *info = self->info;
    *thread = self->thread;
    if (!IS_RECORDED(self)) {
        PyObject *parent = PyTuple_GET_ITEM(self->info, F_PARENT);
        PyObject *depth = PyTuple_GET_ITEM(self->info, F_DEPTH);
        int overflow;
        if (ft_event_values_span(self->info, out) < 0
            || !PyLong_CheckExact(parent) || !PyLong_CheckExact(depth)) {
            return -1;
        }
        out->parent = PyLong_AsLongLongAndOverflow(parent, &overflow);
        if (overflow || (out->parent == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return -1;
        }
        unsigned long d = PyLong_AsUnsignedLong(depth);
        if (d > UINT32_MAX) {  /* also (unsigned long)-1: an error */
            PyErr_Clear();
            return -1;
        }
        out->depth = (uint32_t)d;
        return 0;
    }
    recorded_numbers(self, out);
    return 0;
}

int
ft_event_int_field(PyObject *value, Py_ssize_t i, const char *what,
                   long long min, long long max, long long *out)
{
    int overflow = 0;
    int is_int = PyLong_Check(value) && !PyBool_Check(value);
    long long v = is_int ? PyLong_AsLongLongAndOverflow(value, &overflow) : 0;
    if (!is_int || overflow || v < min || v > max) {
        if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_ValueError, "events[%zd]: %s must be an int "
                         "from %lld to %lld, not %R", i, what, min, max,
                         value);
        }
        return -1;
    }
    *out = v;
    return 0;
}

int
ft_check_function(PyObject *info, Py_ssize_t i)
{
    long long lineno;
    if (!PyUnicode_Check(PyTuple_GET_ITEM(info, 0))
        || !PyUnicode_Check(PyTuple_GET_ITEM(info, 1))
        || !PyUnicode_Check(PyTuple_GET_ITEM(info, 3))) {
        PyErr_Format(PyExc_TypeError, "events[%zd]: name, filename and kind "
                     "must be str", i);
        return -1;
    }
    return ft_event_int_field(PyTuple_GET_ITEM(info, 2), i, "lineno",
                              INT32_MIN, INT32_MAX, &lineno);
}

int
ft_event_span(ft_state *state, PyObject *obj, ft_event *out)
{
    if (!Py_IS_TYPE(obj, state->event_type)) {
        return -1;
    }
    ft_eventobject *self = (ft_eventobject *)obj;
    if (IS_RECORDED(self)) {
        recorded_numbers(self, out);
        return 0;
    }
    return ft_event_values_span(self->info, out);  /* its 14 values */
}

/* New reference to field i (0 <= i < FT_EVENT_NFIELDS). */
static PyObject *
event_field(ft_eventobject *self, Py_ssize_t i)
{
    if (!IS_RECORDED(self)) {
        return Py_NewRef(PyTuple_GET_ITEM(self->info, i));
    }
    switch (i) {
    case F_NAME:
    case F_FILENAME:
    case F_LINENO:
    case F_KIND:
        return Py_NewRef(PyTuple_GET_ITEM(self->info, i - F_NAME));
    case F_THREAD_ID:
    case F_NATIVE_ID:
        return Py_NewRef(PyTuple_GET_ITEM(self->thread, i - F_THREAD_ID));
    case F_THREAD_SERIAL:
        return Py_NewRef(PyTuple_GET_ITEM(self->thread, 2));
    case F_START:
        return PyLong_FromLongLong(self->start_ns);
    case F_END:
        return PyLong_FromLongLong(self->end_ns);
    case F_DEPTH:
        return PyLong_FromUnsignedLong(self->depth);
    case F_PARENT:
        return PyLong_FromLongLong(self->parent);
    case F_OPEN_START:
        return PyBool_FromLong(self->open_at_start);
    case F_OPEN_STOP:
        return PyBool_FromLong(self->open_at_stop);
    default:
        return PyBool_FromLong(self->open_at_loss);
    }
}

/* The 14 fields as a new tuple. */
static PyObject *
event_as_tuple(ft_eventobject *self)
{
    if (!IS_RECORDED(self)) {
        return Py_NewRef(self->info);
    }
    PyObject *tuple = PyTuple_New(FT_EVENT_NFIELDS);
    if (tuple == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < FT_EVENT_NFIELDS; i++) {
        PyObject *value = event_field(self, i);
        if (value == NULL) {
            Py_DECREF(tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(tuple, i, value);
    }
    return tuple;
}

static PyObject *
event_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"sequence", NULL};
    PyObject *arg;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Event", kwlist, &arg)) {
        return NULL;
    }
    PyObject *values = PySequence_Tuple(arg);
    if (values == NULL) {
        if (PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Format(PyExc_TypeError, "frametrace.Event() takes a "
                         "sequence of its %d fields, not %.100s",
                         FT_EVENT_NFIELDS, Py_TYPE(arg)->tp_name);
        }
        return NULL;
    }
    Py_ssize_t given = PyTuple_GET_SIZE(values);
    if (given == FT_EVENT_OLD_NFIELDS) {
        /* An event from before thread_serial and open_at_loss. */
        PyObject *full = PyTuple_New(FT_EVENT_NFIELDS);
        if (full == NULL) {
            Py_DECREF(values);
            return NULL;
        }
        for (Py_ssize_t i = 0; i < given; i++) {
            PyTuple_SET_ITEM(full, i,
                             Py_NewRef(PyTuple_GET_ITEM(values, i)));
        }
        PyObject *serial = PyLong_FromLong(0);
        if (serial == NULL) {
            Py_DECREF(full);
            Py_DECREF(values);
            return NULL;
        }
        PyTuple_SET_ITEM(full, F_THREAD_SERIAL, serial);
        PyTuple_SET_ITEM(full, F_OPEN_LOSS, Py_NewRef(Py_False));
        Py_SETREF(values, full);
    }
    else if (given != FT_EVENT_NFIELDS) {
        PyErr_Format(PyExc_TypeError, "frametrace.Event() takes a "
                     "%d-sequence, or the first %d fields of files written "
                     "before (%zd-sequence given)", FT_EVENT_NFIELDS,
                     FT_EVENT_OLD_NFIELDS, given);
        Py_DECREF(values);
        return NULL;
    }
    ft_eventobject *self = PyObject_GC_New(ft_eventobject, type);
    if (self == NULL) {
        Py_DECREF(values);
        return NULL;
    }
    self->info = values;
    self->thread = NULL;
    self->start_ns = self->end_ns = self->parent = 0;
    self->depth = 0;
    self->open_at_start = self->open_at_stop = self->open_at_loss = 0;
    /* Its values may be anything, cycles included. */
    PyObject_GC_Track(self);
    return (PyObject *)self;
}

static int
event_traverse(ft_eventobject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->info);
    Py_VISIT(self->thread);
    return 0;
}

static void
event_dealloc(ft_eventobject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Py_XDECREF(self->info);
    Py_XDECREF(self->thread);
    PyObject_GC_Del(self);
    Py_DECREF(type);
}

static PyObject *
event_get_field(ft_eventobject *self, void *closure)
{
    return event_field(self, (Py_ssize_t)(intptr_t)closure);
}

#define FIELD(i, name, doc) {name, (getter)event_get_field, NULL, doc, \
                             (void *)(intptr_t)(i)}

static PyGetSetDef event_getset[] = {
    FIELD(F_NAME, "name",
          "qualified name of the function"),
    FIELD(F_FILENAME, "filename",
          "source file, or \"<built-in>\" for C functions"),
    FIELD(F_LINENO, "lineno",
          "first line of the function; 0 for C functions"),
    FIELD(F_KIND, "kind",
          "\"py\" or \"c\""),
    FIELD(F_THREAD_ID, "thread_id",
          "threading.get_ident() of the thread"),
    FIELD(F_NATIVE_ID, "native_thread_id",
          "threading.get_native_id() of the thread"),
    FIELD(F_START, "start_ns",
          "entry, time.monotonic_ns() base"),
    FIELD(F_END, "end_ns",
          "exit (or the tracer's stop_ns), time.monotonic_ns() base"),
    FIELD(F_DEPTH, "depth",
          "nesting depth in its thread; 0 for a root"),
    FIELD(F_PARENT, "parent",
          "index of the parent event in the list, or -1"),
    FIELD(F_OPEN_START, "open_at_start",
          "its entry was not recorded (running at start, or its record "
          "was overwritten): starts at the earliest time the records allow"),
    FIELD(F_OPEN_STOP, "open_at_stop",
          "still running at stop(): ends at the tracer's stop_ns"),
    FIELD(F_THREAD_SERIAL, "thread_serial",
          "1, 2, ... in the order the tracer first saw the thread: unique "
          "per thread even when CPython or the OS reuses its ids; 0 if "
          "unknown (an event from a file written before this field)"),
    FIELD(F_OPEN_LOSS, "open_at_loss",
          "still running when its thread stopped being recorded before "
          "stop() (another tool replaced frametrace's hook): ends at the "
          "thread's last record"),
    {NULL, NULL, NULL, NULL, NULL},
};

static Py_ssize_t
event_length(PyObject *Py_UNUSED(self))
{
    return FT_EVENT_NFIELDS;
}

static PyObject *
event_item(ft_eventobject *self, Py_ssize_t i)
{
    if (i < 0 || i >= FT_EVENT_NFIELDS) {
        PyErr_SetString(PyExc_IndexError, "Event index out of range");
        return NULL;
    }
    return event_field(self, i);
}

static PyObject *
event_subscript(ft_eventobject *self, PyObject *key)
{
    if (PyIndex_Check(key)) {
        Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
        if (i == -1 && PyErr_Occurred()) {
            return NULL;
        }
        return event_item(self, i < 0 ? i + FT_EVENT_NFIELDS : i);
    }
    if (PySlice_Check(key)) {
        PyObject *tuple = event_as_tuple(self);
        if (tuple == NULL) {
            return NULL;
        }
        PyObject *part = PyObject_GetItem(tuple, key);
        Py_DECREF(tuple);
        return part;
    }
    PyErr_Format(PyExc_TypeError, "Event indices must be integers or "
                 "slices, not %.100s", Py_TYPE(key)->tp_name);
    return NULL;
}

static int
event_contains(ft_eventobject *self, PyObject *value)
{
    PyObject *tuple = event_as_tuple(self);
    if (tuple == NULL) {
        return -1;
    }
    int rc = PySequence_Contains(tuple, value);
    Py_DECREF(tuple);
    return rc;
}

static PyObject *
event_iter(ft_eventobject *self)
{
    PyObject *tuple = event_as_tuple(self);
    if (tuple == NULL) {
        return NULL;
    }
    PyObject *it = PyObject_GetIter(tuple);
    Py_DECREF(tuple);
    return it;
}

static PyObject *
event_richcompare(ft_eventobject *self, PyObject *other, int op)
{
    int other_is_event = Py_TYPE(other) == Py_TYPE(self);
    if (!other_is_event && !PyTuple_Check(other)) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (other_is_event && (op == Py_EQ || op == Py_NE)) {
        ft_eventobject *o = (ft_eventobject *)other;
        /* Two recorded Events differ in their numbers far more often than
         * not: decide those without building tuples. */
        if (IS_RECORDED(self) && IS_RECORDED(o)
            && (self->start_ns != o->start_ns || self->end_ns != o->end_ns
                || self->parent != o->parent || self->depth != o->depth
                || self->open_at_start != o->open_at_start
                || self->open_at_stop != o->open_at_stop
                || self->open_at_loss != o->open_at_loss)) {
            return PyBool_FromLong(op == Py_NE);
        }
    }
    PyObject *mine = event_as_tuple(self);
    if (mine == NULL) {
        return NULL;
    }
    PyObject *theirs = other_is_event
        ? event_as_tuple((ft_eventobject *)other) : Py_NewRef(other);
    if (theirs == NULL) {
        Py_DECREF(mine);
        return NULL;
    }
    PyObject *result = PyObject_RichCompare(mine, theirs, op);
    Py_DECREF(mine);
    Py_DECREF(theirs);
    return result;
}

static Py_hash_t
event_hash(ft_eventobject *self)
{
    /* The hash of the equal tuple. */
    PyObject *tuple = event_as_tuple(self);
    if (tuple == NULL) {
        return -1;
    }
    Py_hash_t h = PyObject_Hash(tuple);
    Py_DECREF(tuple);
    return h;
}

static PyObject *
event_repr(ft_eventobject *self)
{
    int rc = Py_ReprEnter((PyObject *)self);
    if (rc != 0) {
        return rc > 0 ? PyUnicode_FromString("frametrace.Event(...)") : NULL;
    }
    PyObject *parts = PyList_New(FT_EVENT_NFIELDS);
    PyObject *result = NULL;
    if (parts == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < FT_EVENT_NFIELDS; i++) {
        PyObject *value = event_field(self, i);
        if (value == NULL) {
            goto done;
        }
        PyObject *part = PyUnicode_FromFormat("%s=%R", event_getset[i].name, value);
        Py_DECREF(value);
        if (part == NULL) {
            goto done;
        }
        PyList_SET_ITEM(parts, i, part);
    }
    PyObject *sep = PyUnicode_FromString(", ");
    PyObject *body = sep ? PyUnicode_Join(sep, parts) : NULL;
    Py_XDECREF(sep);
    if (body != NULL) {
        result = PyUnicode_FromFormat("frametrace.Event(%U)", body);
        Py_DECREF(body);
    }
done:
    Py_XDECREF(parts);
    Py_ReprLeave((PyObject *)self);
    return result;
}

static PyObject *
event_reduce(ft_eventobject *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *tuple = event_as_tuple(self);
    if (tuple == NULL) {
        return NULL;
    }
    return Py_BuildValue("(O(N))", (PyObject *)Py_TYPE(self), tuple);
}

/* __replace__(**changes): copy.replace() on 3.13, and a plain method. */
static PyObject *
event_replace(ft_eventobject *self, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0) {
        PyErr_SetString(PyExc_TypeError, "Event.__replace__() takes only "
                        "keyword arguments");
        return NULL;
    }
    PyObject *tuple = event_as_tuple(self);
    if (tuple == NULL) {
        return NULL;
    }
    PyObject *list = PySequence_List(tuple);
    Py_DECREF(tuple);
    if (list == NULL) {
        return NULL;
    }
    Py_ssize_t used = 0;
    for (Py_ssize_t i = 0; kwargs != NULL && i < FT_EVENT_NFIELDS; i++) {
        PyObject *value = PyDict_GetItemString(kwargs, event_getset[i].name);
        if (value != NULL) {
            Py_INCREF(value);
            PyList_SetItem(list, i, value);
            used++;
        }
    }
    if (kwargs != NULL && used != PyDict_GET_SIZE(kwargs)) {
        PyErr_Format(PyExc_TypeError, "Event.__replace__() got an "
                     "unexpected field name among %R", kwargs);
        Py_DECREF(list);
        return NULL;
    }
    PyObject *values = PyList_AsTuple(list);
    Py_DECREF(list);
    if (values == NULL) {
        return NULL;
    }
    PyObject *new_args = PyTuple_Pack(1, values);
    Py_DECREF(values);
    if (new_args == NULL) {
        return NULL;
    }
    PyObject *result = event_new(Py_TYPE(self), new_args, NULL);
    Py_DECREF(new_args);
    return result;
}

static PyObject *
event_delegate(ft_eventobject *self, const char *method, PyObject *args)
{
    PyObject *tuple = event_as_tuple(self);
    if (tuple == NULL) {
        return NULL;
    }
    PyObject *callable = PyObject_GetAttrString(tuple, method);
    Py_DECREF(tuple);
    if (callable == NULL) {
        return NULL;
    }
    PyObject *result = PyObject_Call(callable, args, NULL);
    Py_DECREF(callable);
    return result;
}

static PyObject *
event_count(ft_eventobject *self, PyObject *args)
{
    return event_delegate(self, "count", args);
}

static PyObject *
event_index(ft_eventobject *self, PyObject *args)
{
    return event_delegate(self, "index", args);
}

static PyMethodDef event_methods[] = {
    {"__reduce__", (PyCFunction)event_reduce, METH_NOARGS, NULL},
    {"__replace__", (PyCFunction)(void (*)(void))event_replace,
     METH_VARARGS | METH_KEYWORDS,
     "__replace__($self, /, **changes)\n--\n\n"
     "A new Event with the given fields changed."},
    {"count", (PyCFunction)event_count, METH_VARARGS,
     "count($self, value, /)\n--\n\nHow many fields equal value."},
    {"index", (PyCFunction)event_index, METH_VARARGS,
     "index($self, value, start=0, stop=sys.maxsize, /)\n--\n\n"
     "Position of the first field equal to value."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot event_slots[] = {
    {Py_tp_doc,
     "Event(sequence)\n--\n\n"
     "One function execution: a call and its return (or the stop).  "
     "Immutable; its 14 fields by name or index, in this order: name, "
     "filename, lineno, kind, thread_id, native_thread_id, start_ns, "
     "end_ns, depth, parent, open_at_start, open_at_stop, thread_serial, "
     "open_at_loss.  The sequence may also hold only the first 12 (an "
     "event of a file written before the last two): thread_serial is then "
     "0 and open_at_loss False."},
    {Py_tp_new, event_new},
    {Py_tp_dealloc, event_dealloc},
    {Py_tp_traverse, event_traverse},
    {Py_tp_repr, event_repr},
    {Py_tp_hash, event_hash},
    {Py_tp_richcompare, event_richcompare},
    {Py_tp_iter, event_iter},
    {Py_tp_methods, event_methods},
    {Py_tp_getset, event_getset},
    {Py_sq_length, event_length},
    {Py_sq_item, event_item},
    {Py_sq_contains, event_contains},
    {Py_mp_length, event_length},
    {Py_mp_subscript, event_subscript},
    {0, NULL},
};

static PyType_Spec event_spec = {
    .name = "frametrace.Event",
    .basicsize = sizeof(ft_eventobject),
    /* GC for the Events made from arbitrary values; recorded ones stay
     * untracked. */
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_SEQUENCE
             | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = event_slots,
};

PyTypeObject *
ft_event_type_new(PyObject *module)
{
    PyTypeObject *type = (PyTypeObject *)PyType_FromModuleAndSpec(
        module, &event_spec, NULL);
    if (type == NULL) {
        return NULL;
    }
    /* What a struct sequence type offers besides its fields. */
    PyObject *match_args = PyTuple_New(FT_EVENT_NFIELDS);
    if (match_args == NULL) {
        goto error;
    }
    for (Py_ssize_t i = 0; i < FT_EVENT_NFIELDS; i++) {
        PyObject *name = PyUnicode_InternFromString(event_getset[i].name);
        if (name == NULL) {
            Py_DECREF(match_args);
            goto error;
        }
        PyTuple_SET_ITEM(match_args, i, name);
    }
    int rc = PyDict_SetItemString(type->tp_dict, "__match_args__",
                                  match_args);
    Py_DECREF(match_args);
    if (rc < 0) {
        goto error;
    }
    static const struct {
        const char *name;
        long value;
    } counts[] = {
        {"n_fields", FT_EVENT_NFIELDS},
        {"n_sequence_fields", FT_EVENT_NFIELDS},
        {"n_unnamed_fields", 0},
    };
    for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
        PyObject *n = PyLong_FromLong(counts[i].value);
        rc = n ? PyDict_SetItemString(type->tp_dict, counts[i].name, n) : -1;
        Py_XDECREF(n);
        if (rc < 0) {
            goto error;
        }
    }
    PyType_Modified(type);
    return type;
error:
    Py_DECREF(type);
    return NULL;
}
