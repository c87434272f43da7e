/* What the reports' C code shares (report_keys.c): a hash table of 64-bit
 * keys, growable arrays, packed columns, and sums that go on as Python
 * ints past int64 (the reports add up any int the events hold). */
#ifndef FT_REPORT_H
#define FT_REPORT_H

#include "state.h"

#include <stddef.h>
#include <stdint.h>

/* 16 bytes a slot, filled up to 70%. */
typedef struct {
    uint64_t key;
    int64_t value;  /* -1: empty slot */
} ft_key_slot;

typedef struct {
    ft_key_slot *slots;
    size_t mask;
    size_t used;
} ft_key_table;

/* 0, or -1 when out of memory (no exception set). */
int ft_keys_init(ft_key_table *t, size_t slots);
ft_key_slot *ft_keys_find(const ft_key_table *t, uint64_t key);
/* Stores value in the empty slot s found for key; 0, or -1 when out of
 * memory (no exception set). */
int ft_keys_put(ft_key_table *t, ft_key_slot *s, uint64_t key, int64_t value);

static inline uint64_t
ft_two_ids(int64_t a, int64_t b)
{
    return (uint64_t)a << 32 | (uint32_t)b;
}

typedef struct {
    int64_t *items;
    size_t len, cap;
} ft_i64vec;

/* Room for one more item of size bytes; 0, or -1 when out of memory (no
 * exception set). */
int ft_grow(void **items, size_t *cap, size_t len, size_t size);

/* A memoryview of bytes read as fmt ("q", "i" or "?"); steals bytes. */
PyObject *ft_typed_view(PyObject *bytes, const char *fmt);

/* A duration or addend: small, or big (a strong int) past int64. */
typedef struct {
    int64_t small;
    PyObject *big;
} ft_num;

/* A sum of int64 *sum; where it passed int64 (*flags & bit), its value is
 * the int at id in bigs.  *sum += x (sign 1) or -= x (sign -1); 0, or -1
 * with an exception. */
int ft_sum_add(PyObject *bigs, int64_t *sum, uint8_t *flags, uint8_t bit,
               uint64_t id, const ft_num *x, int sign);
/* New reference to the value of a sum. */
PyObject *ft_sum_value(PyObject *bigs, int64_t sum, uint8_t flags,
                       uint8_t bit, uint64_t id);

#endif
