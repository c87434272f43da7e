/* The reports' shared pieces (report.h): the hash table of 64-bit keys,
 * growable arrays, packed columns, and sums past int64. */
#include "report.h"

#include <string.h>

int
ft_keys_init(ft_key_table *t, size_t slots)
{
    t->slots = PyMem_Malloc(slots * sizeof(ft_key_slot));
    if (t->slots == NULL) {
        return -1;
    }
    for (size_t i = 0; i < slots; i++) {
        t->slots[i].value = -1;
    }
    t->mask = slots - 1;
    t->used = 0;
    return 0;
}

int
ft_keys_put(ft_key_table *t, ft_key_slot *s, uint64_t key, int64_t value)
{
    s->key = key;
    s->value = value;
    if (++t->used * 10 <= (t->mask + 1) * 7) {
        return 0;
    }
    ft_key_table bigger;
    if (ft_keys_init(&bigger, (t->mask + 1) * 2) < 0) {
        return -1;
    }
    for (size_t i = 0; i <= t->mask; i++) {
        if (t->slots[i].value >= 0) {
            *ft_keys_find(&bigger, t->slots[i].key) = t->slots[i];
        }
    }
    bigger.used = t->used;
    PyMem_Free(t->slots);
    *t = bigger;
    return 0;
}

int
ft_grow_more(void **items, size_t *cap, size_t size)
{
    size_t want = *cap ? *cap * 2 : 64;
    void *grown = PyMem_Realloc(*items, want * size);
    if (grown == NULL) {
        return -1;
    }
    *items = grown;
    *cap = want;
    return 0;
}

PyObject *
ft_typed_view(PyObject *bytes, const char *fmt)
{
    if (bytes == NULL) {
        return NULL;
    }
    PyObject *raw = PyMemoryView_FromObject(bytes);
    Py_DECREF(bytes);
    if (raw == NULL) {
        return NULL;
    }
    PyObject *view = PyObject_CallMethod(raw, "cast", "s", fmt);
    Py_DECREF(raw);
    return view;
}

PyObject *
ft_sum_value(PyObject *bigs, int64_t sum, uint8_t flags, uint8_t bit,
             uint64_t id)
{
    if (!(flags & bit)) {
        return PyLong_FromLongLong(sum);
    }
    PyObject *key = PyLong_FromUnsignedLongLong(id);
    if (key == NULL) {
        return NULL;
    }
    PyObject *value = PyDict_GetItemWithError(bigs, key);
    Py_DECREF(key);
    if (value == NULL && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_SystemError, "a report's sum went missing");
    }
    return Py_XNewRef(value);
}

int
ft_sum_add_big(PyObject *bigs, int64_t *sum, uint8_t *flags, uint8_t bit,
               uint64_t id, const ft_num *x, int sign)
{
    PyObject *now = ft_sum_value(bigs, *sum, *flags, bit, id);
    PyObject *by = x->big != NULL ? Py_NewRef(x->big)
                                  : PyLong_FromLongLong(x->small);
    PyObject *key = PyLong_FromUnsignedLongLong(id);
    PyObject *next = NULL;
    int rc = -1;
    if (now != NULL && by != NULL && key != NULL) {
        next = sign > 0 ? PyNumber_Add(now, by) : PyNumber_Subtract(now, by);
    }
    if (next != NULL && PyDict_SetItem(bigs, key, next) == 0) {
        *flags |= bit;
        rc = 0;
    }
    Py_XDECREF(now);
    Py_XDECREF(by);
    Py_XDECREF(key);
    Py_XDECREF(next);
    return rc;
}
