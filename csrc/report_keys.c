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

/* carry * 2**64 + low: a new reference. */
static PyObject *
carried(PyObject *carry, int64_t low)
{
    PyObject *shift = PyLong_FromLong(64);
    PyObject *high = shift ? PyNumber_Lshift(carry, shift) : NULL;
    PyObject *lo = high ? PyLong_FromLongLong(low) : NULL;
    PyObject *out = lo ? PyNumber_Add(high, lo) : NULL;
    Py_XDECREF(shift);
    Py_XDECREF(high);
    Py_XDECREF(lo);
    return out;
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
    PyObject *carry = PyDict_GetItemWithError(bigs, key);
    Py_DECREF(key);
    if (carry == NULL) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError, "a report's sum went missing");
        }
        return NULL;
    }
    return carried(carry, sum);
}

int
ft_sum_add_big(PyObject *bigs, int64_t *sum, uint8_t *flags, uint8_t bit,
               uint64_t id, int64_t small, PyObject *big, int sign)
{
    PyObject *now = ft_sum_value(bigs, *sum, *flags, bit, id);
    PyObject *by = big != NULL ? Py_NewRef(big) : PyLong_FromLongLong(small);
    PyObject *key = PyLong_FromUnsignedLongLong(id);
    PyObject *next = NULL, *low = NULL, *high = NULL, *shift = NULL;
    PyObject *carry = NULL;
    int rc = -1;
    if (now != NULL && by != NULL && key != NULL) {
        next = sign > 0 ? PyNumber_Add(now, by) : PyNumber_Subtract(now, by);
    }
    /* next's low 64 bits, as int64; the carry is the rest over 2**64. */
    uint64_t bits = next != NULL ? PyLong_AsUnsignedLongLongMask(next) : 0;
    int64_t lo;
    memcpy(&lo, &bits, sizeof(lo));
    if (next != NULL && !PyErr_Occurred()
        && (low = PyLong_FromLongLong(lo)) != NULL
        && (high = PyNumber_Subtract(next, low)) != NULL
        && (shift = PyLong_FromLong(64)) != NULL
        && (carry = PyNumber_Rshift(high, shift)) != NULL
        && PyDict_SetItem(bigs, key, carry) == 0) {
        *sum = lo;
        *flags |= bit;
        rc = 0;
    }
    Py_XDECREF(now);
    Py_XDECREF(by);
    Py_XDECREF(key);
    Py_XDECREF(next);
    Py_XDECREF(low);
    Py_XDECREF(high);
    Py_XDECREF(shift);
    Py_XDECREF(carry);
    return rc;
}
