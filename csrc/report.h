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

static inline size_t
ft_key_hash(uint64_t key)
{
    uint64_t h = key * 0x9E3779B97F4A7C15u;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9u;
    return (size_t)(h ^ (h >> 32));
}

/* The slot of key: its own, or the empty one where it would go (inline:
 * a lookup or two per event). */
static inline ft_key_slot *
ft_keys_find(const ft_key_table *t, uint64_t key)
{
    size_t i = ft_key_hash(key) & t->mask;
    while (t->slots[i].value >= 0 && t->slots[i].key != key) {
        i = (i + 1) & t->mask;
    }
    return &t->slots[i];
}

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

/* ft_grow's growth: twice the room (64 items at first). */
int ft_grow_more(void **items, size_t *cap, size_t size);

/* Room for one more item of size bytes; 0, or -1 when out of memory (no
 * exception set).  Inline: a check per event. */
static inline int
ft_grow(void **items, size_t *cap, size_t len, size_t size)
{
    return len < *cap ? 0 : ft_grow_more(items, cap, size);
}

/* A memoryview of bytes read as fmt ("q", "i" or "?"); steals bytes. */
PyObject *ft_typed_view(PyObject *bytes, const char *fmt);

/* A duration or addend: small, or big (a strong int) past int64. */
typedef struct {
    int64_t small;
    PyObject *big;
} ft_num;

/* A sum is kept as its low 64 bits (two's complement) in an int64, and,
 * once it has passed int64 (flags & bit), its carry in bigs[id]: the
 * sum is carry * 2**64 + low.  The adds check nothing but overflow. */

/* The sums' slow path: *sum += x (sign 1) or -= x (sign -1), x the int64
 * small or the int big, carrying into bigs[id]; 0, or -1 with an
 * exception. */
int ft_sum_add_big(PyObject *bigs, int64_t *sum, uint8_t *flags, uint8_t bit,
                   uint64_t id, int64_t small, PyObject *big, int sign);

/* *sum += x (sign 1) or -= x (sign -1), x small, or big where not NULL:
 * in int64 while it fits, carried on as a Python int past it.  0, or -1
 * with an exception. */
static inline int
ft_sum_add(PyObject *bigs, int64_t *sum, uint8_t *flags, uint8_t bit,
           uint64_t id, int64_t small, PyObject *big, int sign)
{
    int64_t out;
    if (big == NULL
        && !(sign > 0 ? __builtin_add_overflow(*sum, small, &out)
                      : __builtin_sub_overflow(*sum, small, &out))) {
        *sum = out;
        return 0;
    }
    return ft_sum_add_big(bigs, sum, flags, bit, id, small, big, sign);
}
/* New reference to the value of a sum. */
PyObject *ft_sum_value(PyObject *bigs, int64_t sum, uint8_t flags,
                       uint8_t bit, uint64_t id);

#endif
