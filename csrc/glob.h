/* Name patterns of the tracer's filters (include=/ignore=), plain C over
 * arrays of code points, so that the hook's slow path can match a
 * function's name without calling Python code (fnmatch would) and so that
 * frametrace._testing can check the matcher against fnmatch itself.
 *
 * A name is "module.qualname" ("torch.nn.modules.module.Module.__call__",
 * "builtins.len").  A pattern with none of "*?[" is a dotted prefix: it
 * matches a name equal to it or starting with it followed by ".".  Any
 * other pattern is a glob with fnmatch.fnmatchcase() semantics over the
 * whole name ("*" crosses dots). */
#ifndef FT_GLOB_H
#define FT_GLOB_H

#include <stddef.h>
#include <stdint.h>

/* Whether pat (n code points) holds any of "*?[". */
int ft_glob_is_glob(const uint32_t *pat, size_t n);

/* fnmatch.fnmatchcase(name, pat) over code points: 1 or 0. */
int ft_glob_match(const uint32_t *pat, size_t plen, const uint32_t *name,
                  size_t nlen);

/* The filters' rule above: a dotted prefix, or a glob (is_glob from
 * ft_glob_is_glob()).  1 or 0. */
int ft_pattern_match(const uint32_t *pat, size_t plen, int is_glob,
                     const uint32_t *name, size_t nlen);

#endif /* FT_GLOB_H */
