/* Naming C functions: the slow path the hot paths take the first time they
 * see a C function (a builtin, a method of a C type).  Calls the Python API
 * (names, the method's defining class), which may run Python code and let
 * other threads run; the function table is touched only after that.  The
 * keys C functions are filed under are the callers' (hook.c, monitor.c). */
#include "state.h"

#include <string.h>

/* Strong reference to a type's qualified name ("OrderedDict", "list"). */
static PyObject *
type_qualname(PyTypeObject *type)
{
    if (type->tp_flags & Py_TPFLAGS_HEAPTYPE) {
        PyHeapTypeObject *ht = (PyHeapTypeObject *)type;
        if (ht->ht_qualname != NULL && PyUnicode_Check(ht->ht_qualname)) {
            return Py_NewRef(ht->ht_qualname);
        }
    }
    const char *dot = strrchr(type->tp_name, '.');
    return PyUnicode_FromString(dot ? dot + 1 : type->tp_name);
}

/* The type in type's MRO whose own method table holds ml, or NULL. */
static PyTypeObject *
type_defining(PyTypeObject *type, const PyMethodDef *ml)
{
    PyObject *mro = type->tp_mro;
    if (mro == NULL || !PyTuple_Check(mro)) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); i++) {
        PyObject *base = PyTuple_GET_ITEM(mro, i);
        if (!PyType_Check(base)) {
            continue;
        }
        PyMethodDef *defs = ((PyTypeObject *)base)->tp_methods;
        for (; defs != NULL && defs->ml_name != NULL; defs++) {
            if (defs == ml) {
                return (PyTypeObject *)base;
            }
        }
    }
    return NULL;
}

/* The class a C method bound to self is named after: the one whose method
 * table defines it, whatever it was called on (an inherited method, a
 * classmethod called on a subclass, a metaclass method such as type.mro
 * called on int).  Functions are keyed by their method definition, so the
 * name must not depend on self.  Else type(self), or self for a class.
 * *is_instance: self is an instance of the class found in whose table ml
 * is (a method bound to its object, not a static or class method). */
static PyTypeObject *
defining_type(PyObject *self, const PyMethodDef *ml, int *is_instance)
{
    PyTypeObject *found = type_defining(Py_TYPE(self), ml);
    *is_instance = found != NULL;
    if (found == NULL && PyType_Check(self)) {
        found = type_defining((PyTypeObject *)self, ml);
    }
    if (found == NULL) {
        found = PyType_Check(self) ? (PyTypeObject *)self : Py_TYPE(self);
    }
    return found;
}

/* A name is never empty: pybind11 makes functions named "" (torch's
 * operator overloads). */
static const char *
method_name(const PyMethodDef *ml)
{
    return ml->ml_name[0] != '\0' ? ml->ml_name : "<unnamed>";
}

/* "module.name", or "name" for builtins. */
static PyObject *
module_function_name(PyObject *modname, const char *ml_name)
{
    if (modname == NULL
        || PyUnicode_CompareWithASCIIString(modname, "builtins") == 0) {
        return PyUnicode_FromString(ml_name);
    }
    return PyUnicode_FromFormat("%U.%s", modname, ml_name);
}

/* torch gives its operators the module "torch._ops.NS", no module one can
 * import; they are called as torch.ops.NS.  Strong: module, or that name. */
static PyObject *
public_module(PyObject *module)
{
    static const char prefix[] = "torch._ops.";
    Py_ssize_t n = (Py_ssize_t)sizeof(prefix) - 1;
    PyObject *head = PyUnicode_FromStringAndSize(prefix, n);
    if (head == NULL) {
        return NULL;
    }
    Py_ssize_t match = PyUnicode_Tailmatch(module, head, 0, n, -1);
    Py_DECREF(head);
    if (match < 0) {
        return NULL;
    }
    if (match == 0 || PyUnicode_GetLength(module) == n) {
        return Py_NewRef(module);
    }
    PyObject *rest = PyUnicode_Substring(module, n, PyUnicode_GetLength(module));
    if (rest == NULL) {
        return NULL;
    }
    PyObject *out = PyUnicode_FromFormat("torch.ops.%U", rest);
    Py_DECREF(rest);
    return out;
}

/* Borrowed str value of key in dict, or NULL (no exception). */
static PyObject *
dict_str(PyObject *dict, PyObject *key)
{
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL || !PyUnicode_Check(value)) {
        PyErr_Clear();
        return NULL;
    }
    return value;
}

/* Whether a module named modname was loaded outside the import system: a
 * dotted name whose parent package was never imported. */
static int
module_made_outside_import(PyObject *modname)
{
    Py_ssize_t dot = PyUnicode_FindChar(modname, '.', 0,
                                        PyUnicode_GetLength(modname), -1);
    if (dot <= 0) {
        PyErr_Clear();
        return 0;
    }
    PyObject *modules = PyImport_GetModuleDict();  /* borrowed */
    PyObject *parent = PyUnicode_Substring(modname, 0, dot);
    int outside = 0;
    if (parent != NULL && modules != NULL && PyDict_Check(modules)) {
        outside = PyDict_GetItemWithError(modules, parent) == NULL
                  && !PyErr_Occurred();
    }
    Py_XDECREF(parent);
    PyErr_Clear();
    return outside;
}

/* The names the calling code knows a C function by, where its own say
 * nothing: strong *module and *qualname, and 1; else 0 (no exception).
 * - A method with no name (pybind11 makes torch's operator overloads'
 *   functions so): by the object whose method calls it and holds it in its
 *   instance dict, that dict's __module__ and __name__ (an OpOverload's
 *   __call__: torch.ops.aten.add.Tensor).
 * - A function of a module loaded outside the import system (inductor
 *   loads each CPU kernel from the file it built as "<hash>.kernel", every
 *   one named "kernel"): by the calling module and the global name it
 *   holds the function under (the compiled graph's module and
 *   cpp_fused_relu_0).
 * Reads frames and dicts only: runs no Python code.  Either way the
 * function is keyed by its own method definition, so one caller names it. */
static int
caller_parts(ft_tracer *tracer, PyCFunctionObject *cf, PyObject **module,
             PyObject **qualname)
{
    *module = *qualname = NULL;
    PyObject *self = cf->m_self;
    if (self == NULL) {
        return 0;
    }
    int unnamed = cf->m_ml->ml_name[0] == '\0' && !PyModule_Check(self);
    if (!unnamed) {
        if (!PyModule_Check(self)) {
            return 0;
        }
        PyObject *own = PyModule_GetNameObject(self);
        int outside = own != NULL && module_made_outside_import(own);
        Py_XDECREF(own);
        PyErr_Clear();
        if (!outside) {
            return 0;
        }
    }
    PyFrameObject *frame = PyEval_GetFrame();  /* borrowed: the caller's */
    if (frame == NULL) {
        PyErr_Clear();
        return 0;
    }
    PyObject *dict = NULL;
    if (unnamed) {
        PyObject *holder = ft_frame_first_arg(frame);
        if (holder != NULL) {
            dict = PyObject_GenericGetDict(holder, NULL);
            Py_DECREF(holder);
        }
    }
    else {
        dict = ft_frame_globals(frame);
    }
    if (dict == NULL || !PyDict_Check(dict)) {
        Py_XDECREF(dict);
        PyErr_Clear();
        return 0;
    }
    PyObject *key, *value, *held = NULL;
    Py_ssize_t pos = 0;
    while (PyDict_Next(dict, &pos, &key, &value)) {
        if (value == (PyObject *)cf && PyUnicode_Check(key)) {
            held = key;
            break;
        }
    }
    PyObject *mod = NULL, *name = NULL;
    if (held != NULL) {
        mod = dict_str(dict, unnamed ? tracer->state->str_module
                                     : tracer->state->str_name);
        name = unnamed ? dict_str(dict, tracer->state->str_name) : held;
    }
    int found = 0;
    if (mod != NULL && name != NULL) {
        *module = unnamed ? public_module(mod) : Py_NewRef(mod);
        *qualname = Py_NewRef(name);
        found = *module != NULL;
        if (!found) {
            Py_CLEAR(*qualname);
        }
    }
    Py_DECREF(dict);
    PyErr_Clear();
    return found;
}

/* Builds the table entry of the C function called through arg.  Sets
 * *ignored for the tracer's own methods. */
static int
describe_c_function(ft_tracer *tracer, PyObject *arg, ft_func *func,
                    int *ignored)
{
    memset(func, 0, sizeof(*func));
    func->is_c = 1;
    func->filename = Py_NewRef(tracer->state->str_builtin);
    *ignored = 0;

    if (!PyCFunction_Check(arg)) {
        /* CPython only reports builtin functions; keep going anyway. */
        func->owner = Py_NewRef((PyObject *)Py_TYPE(arg));
        func->name = type_qualname(Py_TYPE(arg));
        return func->name ? 0 : -1;
    }
    PyCFunctionObject *cf = (PyCFunctionObject *)arg;
    PyMethodDef *ml = cf->m_ml;
    PyObject *self = cf->m_self;

    PyObject *caller_module, *caller_qualname;
    if (caller_parts(tracer, cf, &caller_module, &caller_qualname)) {
        /* self (a module, pybind11's function record) owns the method
         * definition (the key). */
        func->owner = Py_NewRef(self);
        func->name = PyUnicode_FromFormat("%U.%U", caller_module, caller_qualname);
        Py_DECREF(caller_module);
        Py_DECREF(caller_qualname);
        return func->name ? 0 : -1;
    }
    if (self == NULL || PyModule_Check(self)) {
        PyObject *modname = NULL;
        if (self != NULL) {
            func->owner = Py_NewRef(self);
            *ignored = PyModule_GetDef(self) == &ft_module_def;
            modname = PyModule_GetNameObject(self);
            if (modname == NULL) {
                PyErr_Clear();
            }
        }
        else {
            /* Nothing else owns the method definition (the key): keep the
             * function object itself, which has no self to retain. */
            func->owner = Py_NewRef(arg);
            if (cf->m_module != NULL && PyUnicode_Check(cf->m_module)) {
                modname = Py_NewRef(cf->m_module);
            }
        }
        func->name = module_function_name(modname, method_name(ml));
        Py_XDECREF(modname);
        return func->name ? 0 : -1;
    }
    int is_instance;
    PyTypeObject *type = defining_type(self, ml, &is_instance);
    /* Methods of frametrace's own objects are the tracer, not the trace. */
    *ignored = PyObject_TypeCheck(self, tracer->state->tracer_type)
               || PyObject_TypeCheck(self, tracer->state->range_type);
    if (!is_instance && cf->m_module != NULL
        && PyUnicode_Check(cf->m_module)) {
        /* Its self is not what it is a method of: pybind11's function
         * record, or the class a static method was looked up on when the
         * function was given a module (torch.relu is a static method of
         * torch._C._VariableFunctionsClass, __module__ "torch").  type(self)
         * names the binding machinery, not the function.  self owns the
         * method definition (the key): keep it, not its type. */
        func->owner = Py_NewRef(self);
        PyObject *modname = public_module(cf->m_module);
        if (modname == NULL) {
            return -1;
        }
        func->name = module_function_name(modname, method_name(ml));
        Py_DECREF(modname);
        return func->name ? 0 : -1;
    }
    func->owner = Py_NewRef((PyObject *)type);
    PyObject *qualname = type_qualname(type);
    if (qualname == NULL) {
        return -1;
    }
    func->name = PyUnicode_FromFormat("%U.%s", qualname, method_name(ml));
    Py_DECREF(qualname);
    return func->name ? 0 : -1;
}

/* Strong reference to a type's __module__ if it is a str, else NULL (no
 * exception). */
static PyObject *
type_module(ft_tracer *tracer, PyTypeObject *type)
{
    PyObject *module = PyObject_GetAttr((PyObject *)type,
                                        tracer->state->str_module);
    if (module == NULL || !PyUnicode_Check(module)) {
        PyErr_Clear();
        Py_XDECREF(module);
        return NULL;
    }
    return module;
}

/* The module and qualified name the filters match a C function by, as
 * describe_c_function() names it but with the module always there:
 * ("builtins", "len"), ("builtins", "list.append"), ("collections",
 * "OrderedDict.move_to_end"); a function whose self is not an instance of
 * the class defining it and that has a __module__ (pybind11's, torch.relu)
 * by that: ("torch._C._nn", "linear").  Strong, module maybe NULL.  0, or
 * -1 with an exception. */
static int
c_function_parts(ft_tracer *tracer, PyObject *arg, PyObject **module,
                 PyObject **qualname)
{
    *module = NULL;
    *qualname = NULL;
    if (!PyCFunction_Check(arg)) {
        *module = type_module(tracer, Py_TYPE(arg));
        *qualname = type_qualname(Py_TYPE(arg));
        return *qualname ? 0 : -1;
    }
    PyCFunctionObject *cf = (PyCFunctionObject *)arg;
    if (caller_parts(tracer, cf, module, qualname)) {
        return 0;
    }
    PyObject *self = cf->m_self;
    int has_module = cf->m_module != NULL && PyUnicode_Check(cf->m_module);
    if (self != NULL && !PyModule_Check(self)) {
        int is_instance;
        PyTypeObject *type = defining_type(self, cf->m_ml, &is_instance);
        if (is_instance || !has_module) {
            *module = type_module(tracer, type);
            PyObject *tq = type_qualname(type);
            if (tq == NULL) {
                return -1;
            }
            *qualname = PyUnicode_FromFormat("%U.%s", tq,
                                             method_name(cf->m_ml));
            Py_DECREF(tq);
            return *qualname ? 0 : -1;
        }
    }
    if (self != NULL && PyModule_Check(self)) {
        *module = PyModule_GetNameObject(self);
        if (*module == NULL) {
            PyErr_Clear();
        }
    }
    else if (has_module) {
        *module = public_module(cf->m_module);
        if (*module == NULL) {
            return -1;
        }
    }
    *qualname = PyUnicode_FromString(method_name(cf->m_ml));
    return *qualname ? 0 : -1;
}

/* Whether the tracer's filters leave out the C function called through
 * arg.  Runs Python code (names); never raises. */
static int
c_function_filtered(ft_tracer *tracer, PyObject *arg)
{
    PyObject *module, *qualname;
    int filtered = 0;
    if (c_function_parts(tracer, arg, &module, &qualname) == 0) {
        filtered = ft_filters_exclude(&tracer->filters, module, qualname);
    }
    else {
        PyErr_Clear();  /* unnamed: recorded, as without filters */
    }
    Py_XDECREF(module);
    Py_XDECREF(qualname);
    return filtered;
}

uint32_t
ft_intern_c_function(ft_tracer *tracer, PyObject *arg, const void *key)
{
    ft_saved_exc saved;
    ft_func func;
    int ignored;
    uint32_t id = FT_NO_ID;

    FT_SAVE_EXC(saved);
    int named = describe_c_function(tracer, arg, &func, &ignored) == 0;
    if (!named) {
        /* Never raise from the hook: count it, report it at getEvents(). */
        PyErr_Clear();
        tracer->intern_failures++;
    }
    else if (!ignored && ft_filters_active(&tracer->filters)) {
        func.filtered = c_function_filtered(tracer, arg);
    }
    /* Both above may run Python code: the tracer may have stopped. */
    if (named && tracer->phase == FT_PHASE_ACTIVE) {
        id = ft_functable_find(&tracer->funcs, key);
        if (id == FT_NO_ID) {
            ft_release_check(tracer);
            id = ft_functable_add(&tracer->funcs, key, func,
                                  ignored || func.filtered);
            func.owner = func.name = func.filename = NULL;  /* stolen */
        }
    }
    Py_CLEAR(func.owner);
    Py_CLEAR(func.name);
    Py_CLEAR(func.filename);
    FT_RESTORE_EXC(saved);
    return id;
}

uint32_t
ft_c_function_id(ft_tracer *tracer, PyObject *func, const void *key)
{
    uint32_t id = ft_functable_find(&tracer->funcs, key);
    return id != FT_NO_ID ? id : ft_intern_c_function(tracer, func, key);
}
