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
    dst->nfuncs = dst->funcs_cap = src->nfuncs ? src->nfuncs : 1;
    dst->nfuncs = src->nfuncs;
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

static int
grow_slots(ft_functable *table)
{
    size_t nslots = (table->mask + 1) * 2;
    ft_slot *slots = calloc(nslots, sizeof(ft_slot));
    if (slots == NULL) {
        return -1;
    }
    for (size_t i = 0; i <= table->mask; i++) {
        const ft_slot *old = &table->slots[i];
        if (old->key == NULL) {
            continue;
        }
        size_t j = ft_hash_ptr(old->key) & (nslots - 1);
        while (slots[j].key != NULL) {
            j = (j + 1) & (nslots - 1);
        }
        slots[j] = *old;
    }
    free(table->slots);
    table->slots = slots;
    table->mask = nslots - 1;
    return 0;
}

uint32_t
ft_functable_add(ft_functable *table, const void *key, ft_func func,
                 int ignored)
{
    if (table->nfuncs >= FT_ID_IGNORED - 1) {
        goto error;
    }
    /* Keep the load factor at or below one half. */
    if ((table->used + 1) * 2 > table->mask + 1 && grow_slots(table) < 0) {
        goto error;
    }
    if (table->nfuncs == table->funcs_cap) {
        uint32_t cap = table->funcs_cap ? table->funcs_cap * 2 : 256;
        ft_func *funcs = realloc(table->funcs, cap * sizeof(ft_func));
        if (funcs == NULL) {
            goto error;
        }
        table->funcs = funcs;
        table->funcs_cap = cap;
    }
    uint32_t id = table->nfuncs++;
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
    return 0;
}
