/* Function table: pointer -> id map and per-function names. */
#include "functable.h"

#include <stdlib.h>
#include <string.h>

#define FT_INITIAL_SLOTS 1024

int
ft_functable_init(ft_functable *table)
{
    memset(table, 0, sizeof(*table));
    table->slots = calloc(FT_INITIAL_SLOTS, sizeof(ft_slot));
    if (table->slots == NULL) {
        return -1;
    }
    table->mask = FT_INITIAL_SLOTS - 1;
    table->free_head = FT_NO_ID;
    return 0;
}

static void
func_clear(ft_func *func)
{
    Py_CLEAR(func->owner);
    Py_CLEAR(func->name);
    Py_CLEAR(func->filename);
}

void
ft_functable_clear(ft_functable *table)
{
    for (uint32_t i = 0; i < table->nfuncs; i++) {
        func_clear(&table->funcs[i]);
    }
    free(table->funcs);
    free(table->slots);
    memset(table, 0, sizeof(*table));
    table->free_head = FT_NO_ID;
}

int
ft_functable_copy(ft_functable *dst, const ft_functable *src)
{
    memset(dst, 0, sizeof(*dst));
    size_t nslots = src->mask + 1;
    dst->slots = malloc(nslots * sizeof(ft_slot));
    dst->funcs = malloc((src->nfuncs ? src->nfuncs : 1) * sizeof(ft_func));
    if (dst->slots == NULL || dst->funcs == NULL) {
        free(dst->slots);
        free(dst->funcs);
        memset(dst, 0, sizeof(*dst));
        return -1;
    }
    memcpy(dst->slots, src->slots, nslots * sizeof(ft_slot));
    dst->mask = src->mask;
    dst->used = src->used;
    for (uint32_t i = 0; i < src->nfuncs; i++) {
        dst->funcs[i] = src->funcs[i];
        Py_XINCREF(dst->funcs[i].owner);
        Py_XINCREF(dst->funcs[i].name);
        Py_XINCREF(dst->funcs[i].filename);
    }
    dst->funcs_cap = src->nfuncs ? src->nfuncs : 1;
    dst->nfuncs = src->nfuncs;
    dst->free_head = src->free_head;
    dst->nreleased = src->nreleased;
    dst->freed = src->freed;
    return 0;
}

int
ft_functable_traverse(ft_functable *table, visitproc visit, void *arg)
{
    for (uint32_t i = 0; i < table->nfuncs; i++) {
        Py_VISIT(table->funcs[i].owner);
    }
    return 0;
}

/* The map's slots moved into slots, a new zeroed array of nslots (a power
 * of two, more than twice the live entries), the entries that are not live
 * left out. */
static void
move_slots(ft_functable *table, ft_slot *slots, size_t nslots)
{
    size_t used = 0;
    for (size_t i = 0; i <= table->mask; i++) {
        const ft_slot *old = &table->slots[i];
        if (old->key == NULL
            || table->funcs[old->id & ~FT_ID_IGNORED].state != FT_FUNC_LIVE) {
            continue;
        }
        size_t j = ft_hash_ptr(old->key) & (nslots - 1);
        while (slots[j].key != NULL) {
            j = (j + 1) & (nslots - 1);
        }
        slots[j] = *old;
        used++;
    }
    free(table->slots);
    table->slots = slots;
    table->mask = nslots - 1;
    table->used = used;
}

static int
grow_slots(ft_functable *table)
{
    size_t nslots = (table->mask + 1) * 2;
    ft_slot *slots = calloc(nslots, sizeof(ft_slot));
    if (slots == NULL) {
        return -1;
    }
    move_slots(table, slots, nslots);
    return 0;
}

int
ft_functable_sweep(ft_functable *table, const uint8_t *referenced,
                   PyObject ***garbage, size_t *ngarbage)
{
    *garbage = NULL;
    *ngarbage = 0;
    size_t to_free = 0, live = 0;
    for (uint32_t id = 0; id < table->nfuncs; id++) {
        const ft_func *f = &table->funcs[id];
        if (f->state == FT_FUNC_RELEASED && !referenced[id]) {
            to_free++;
        }
        else if (f->state == FT_FUNC_LIVE
                 && (referenced[id] || f->pinned)) {
            live++;
        }
    }
    /* Allocations first: failing, nothing has changed. */
    size_t nslots = FT_INITIAL_SLOTS;
    while (nslots < 2 * (live + 1)) {
        nslots *= 2;
    }
    PyObject **refs = NULL;
    if (to_free != 0) {
        refs = malloc(3 * to_free * sizeof(PyObject *));
        if (refs == NULL) {
            return -1;
        }
    }
    ft_slot *slots = calloc(nslots, sizeof(ft_slot));
    if (slots == NULL) {
        free(refs);
        return -1;
    }
    size_t n = 0;
    for (uint32_t id = 0; id < table->nfuncs; id++) {
        ft_func *f = &table->funcs[id];
        if (f->state == FT_FUNC_RELEASED && !referenced[id]) {
            PyObject *held[3] = {f->owner, f->name, f->filename};
            for (int k = 0; k < 3; k++) {
                if (held[k] != NULL) {
                    refs[n++] = held[k];
                }
            }
            *f = (ft_func){.state = FT_FUNC_FREE, .next_free = table->free_head};
            table->free_head = id;
            table->nreleased--;
            table->freed++;
        }
        else if (f->state == FT_FUNC_LIVE && !referenced[id] && !f->pinned) {
            f->state = FT_FUNC_RELEASED;
            table->nreleased++;
        }
    }
    move_slots(table, slots, nslots);
    *garbage = refs;
    *ngarbage = n;
    return 0;
}

uint32_t
ft_functable_add(ft_functable *table, const void *key, ft_func func,
                 int ignored)
{
    if (table->free_head == FT_NO_ID && table->nfuncs >= FT_ID_IGNORED - 1) {
        goto error;
    }
    /* Keep the load factor at or below one half. */
    if ((table->used + 1) * 2 > table->mask + 1 && grow_slots(table) < 0) {
        goto error;
    }
    uint32_t id;
    if (table->free_head != FT_NO_ID) {
        id = table->free_head;
        table->free_head = table->funcs[id].next_free;
    }
    else if (table->nfuncs == table->funcs_cap) {
        uint32_t cap = table->funcs_cap ? table->funcs_cap * 2 : 256;
        ft_func *funcs = realloc(table->funcs, cap * sizeof(ft_func));
        if (funcs == NULL) {
            goto error;
        }
        table->funcs = funcs;
        table->funcs_cap = cap;
        id = table->nfuncs++;
    }
    else {
        id = table->nfuncs++;
    }
    func.state = FT_FUNC_LIVE;
    func.pinned = 0;
    func.next_free = FT_NO_ID;
    table->funcs[id] = func;
    if (ignored) {
        id |= FT_ID_IGNORED;
    }
    size_t i = ft_hash_ptr(key) & table->mask;
    while (table->slots[i].key != NULL) {
        i = (i + 1) & table->mask;
    }
    table->slots[i].key = key;
    table->slots[i].id = id;
    table->used++;
    return id;

error:
    func_clear(&func);
    return FT_NO_ID;
}

uint32_t
ft_functable_add_code(ft_functable *table, PyCodeObject *code, int filtered)
{
    ft_func func = {
        .owner = Py_NewRef((PyObject *)code),
        .name = ft_code_name(code),
        .filename = Py_NewRef(code->co_filename),
        .lineno = code->co_firstlineno,
        .is_c = 0,
        .filtered = filtered,
    };
    return ft_functable_add(table, code, func, filtered);
}

uint32_t
ft_functable_intern_code(ft_functable *table, PyCodeObject *code)
{
    uint32_t id = ft_functable_find(table, code);
    if (id != FT_NO_ID) {
        return id;
    }
    return ft_functable_add_code(table, code, 0);
}

int
ft_functable_ignore_code(ft_functable *table, PyCodeObject *code)
{
    if (ft_functable_intern_code(table, code) == FT_NO_ID) {
        return -1;
    }
    size_t i = ft_hash_ptr(code) & table->mask;
    while (table->slots[i].key != code) {
        i = (i + 1) & table->mask;
    }
    table->slots[i].id |= FT_ID_IGNORED;
    table->funcs[table->slots[i].id & ~FT_ID_IGNORED].pinned = 1;
    return 0;
}
