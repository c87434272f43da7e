/* The tracer's function table: every Python code object and C function seen
 * while tracing gets a small integer id the first time it is seen.  Records
 * carry the id; the table keeps what is needed to name it later.
 *
 * Code made at run time (exec, dataclasses, torch.compile) would grow the
 * table for as long as the tracer records, so a sweep (budget.c) releases
 * the entries that no retained record references: released, an entry
 * leaves the map (its function gets a new id when it runs again) but keeps
 * its names, for a record that a thread was writing meanwhile; released
 * and still unreferenced at the next sweep, it is freed and its id reused. */
#ifndef FT_FUNCTABLE_H
#define FT_FUNCTABLE_H

#include "compat.h"

#include <stdint.h>

#define FT_NO_ID UINT32_MAX
/* Set on the id of a function the hook must not record (the tracer's own
 * methods).  Ids stay below it. */
#define FT_ID_IGNORED ((uint32_t)1 << 31)

typedef struct {
    PyObject *owner;     /* strong: the code object, or the C function's type
                            or module; keeps the name source alive */
    PyObject *name;      /* strong: str */
    PyObject *filename;  /* strong: str */
    int lineno;          /* first line; 0 for C functions */
    int is_c;
    int filtered;        /* ignored by the tracer's include=/ignore= (not
                            by _ignore()): the monitoring backend may
                            return DISABLE for its events */
    uint8_t state;       /* FT_FUNC_* */
    uint8_t pinned;      /* ignored by _ignore(): never released (nothing
                            could tell again that it is ignored) */
    uint32_t next_free;  /* free: the next free id, or FT_NO_ID */
} ft_func;

enum {
    FT_FUNC_LIVE = 0,    /* in the map */
    FT_FUNC_RELEASED,    /* out of the map, names kept */
    FT_FUNC_FREE,        /* no references; its id is reused first */
};

typedef struct {
    const void *key;     /* PyCodeObject* or PyMethodDef*; NULL: empty */
    uint32_t id;
} ft_slot;

typedef struct {
    ft_slot *slots;      /* open addressing, power-of-two size */
    size_t mask;
    size_t used;
    ft_func *funcs;      /* indexed by id without the ignored bit */
    uint32_t nfuncs;     /* ids ever handed out (entries in funcs) */
    uint32_t funcs_cap;
    uint32_t free_head;  /* the first free id, or FT_NO_ID */
    uint32_t nreleased;  /* entries released and not freed yet */
    uint64_t freed;      /* entries freed by sweeps, ever */
} ft_functable;

int ft_functable_init(ft_functable *table);
/* Drops every reference; the table is empty and unusable afterwards. */
void ft_functable_clear(ft_functable *table);
/* dst (uninitialized) becomes a copy of src, holding its own references:
 * 0, or -1 (no memory) leaving dst empty (ft_functable_clear() safe). */
int ft_functable_copy(ft_functable *dst, const ft_functable *src);
int ft_functable_traverse(ft_functable *table, visitproc visit, void *arg);

/* Entries holding references: live ones (table->used) and released ones. */
static inline uint32_t
ft_functable_held(const ft_functable *table)
{
    return (uint32_t)table->used + table->nreleased;
}

/* One sweep, given which ids some retained record (or stack) references
 * (referenced[id] != 0, for every id < nfuncs): a released entry no longer
 * referenced is freed; a live one unreferenced and not pinned is released;
 * the map is rebuilt for the live ones.  The freed entries' references go
 * to *garbage (malloc'd, *ngarbage of them, possibly 0 and NULL): the
 * caller releases them once the table is consistent, since that may run
 * Python code.  Runs no Python code itself.  0, or -1 (no memory) leaving
 * the table as it was. */
int ft_functable_sweep(ft_functable *table, const uint8_t *referenced,
                       PyObject ***garbage, size_t *ngarbage);

static inline size_t
ft_hash_ptr(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    /* Objects are 16-byte aligned: drop the zero bits, then mix. */
    x = (x >> 4) * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(x >> 29);
}

/* The id stored for key (possibly with FT_ID_IGNORED), or FT_NO_ID. */
static inline uint32_t
ft_functable_find(const ft_functable *table, const void *key)
{
    size_t i = ft_hash_ptr(key) & table->mask;
    for (;;) {
        const ft_slot *slot = &table->slots[i];
        if (slot->key == key) {
            return slot->id;
        }
        if (slot->key == NULL) {
            return FT_NO_ID;
        }
        i = (i + 1) & table->mask;
    }
}

/* Adds key with the given function info, stealing the three references in
 * func (also on failure).  Pure C: runs no Python code, so the table is
 * consistent whenever another thread can run.  Returns the new id (with
 * FT_ID_IGNORED if ignored), or FT_NO_ID when out of memory. */
uint32_t ft_functable_add(ft_functable *table, const void *key, ft_func func,
                          int ignored);

/* Marks key's id ignored (adding the code object if new); 0 or -1 (no
 * memory).  Records already written keep the plain id. */
int ft_functable_ignore_code(ft_functable *table, PyCodeObject *code);

/* Id of a Python code object, adding it if new (unfiltered: the tracer's
 * filters are applied by ft_intern_code(), filters.c).  Runs no Python
 * code. */
uint32_t ft_functable_intern_code(ft_functable *table, PyCodeObject *code);
/* Adds code, not in the table yet; filtered: ignored by the filters.  The
 * id (with FT_ID_IGNORED if filtered), or FT_NO_ID (no memory). */
uint32_t ft_functable_add_code(ft_functable *table, PyCodeObject *code,
                               int filtered);

/* Whether id, from ft_functable_find(), is a function the hook must not
 * record (FT_NO_ID is not: it is not in the table yet). */
static inline int
ft_id_ignored(uint32_t id)
{
    return (id & FT_ID_IGNORED) && id != FT_NO_ID;
}

static inline const ft_func *
ft_functable_get(const ft_functable *table, uint32_t id)
{
    return &table->funcs[id & ~FT_ID_IGNORED];
}

#endif /* FT_FUNCTABLE_H */
