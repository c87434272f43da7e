/* The tracer's filters, include= and ignore=: patterns checked in C when a
 * function first enters the function table (glob.h has the rule).  The
 * decision is kept in the table (FT_ID_IGNORED, and ft_func.filtered for
 * the sys.monitoring backend's DISABLE), so later events cost a lookup. */
#ifndef FT_FILTERS_H
#define FT_FILTERS_H

#include "compat.h"

#include <stdint.h>

typedef struct {
    uint32_t *chars;     /* malloc'd code points */
    size_t len;
    int is_glob;
} ft_pattern;

typedef struct {
    ft_pattern *include; /* malloc'd; NULL: no include= (all included) */
    size_t ninclude;
    ft_pattern *ignore;  /* malloc'd, or NULL */
    size_t nignore;
    PyObject *include_obj;  /* strong: tuple of str, or None */
    PyObject *ignore_obj;   /* strong: tuple of str, maybe empty */
    PyObject *spec;      /* strong: (include_obj, ignore_obj), or NULL when
                            neither filters anything */
} ft_filters;

/* Checks and compiles include= and ignore= (NULL or None: not given).
 * 0, or -1 with a TypeError/ValueError naming the argument or pattern. */
int ft_filters_init(ft_filters *filters, PyObject *include, PyObject *ignore);
void ft_filters_clear(ft_filters *filters);

static inline int
ft_filters_active(const ft_filters *filters)
{
    return filters->spec != NULL;
}

/* Whether the function module.qualname is filtered out (module: str or
 * NULL when unknown: then qualname alone is matched).  1 or 0; never
 * raises, keeps any pending exception, runs no Python code. */
int ft_filters_exclude(const ft_filters *filters, PyObject *module,
                       PyObject *qualname);

#endif /* FT_FILTERS_H */
