/* Other tools' slices (torch's ops) nested with one thread's frames: the
 * sweep frametrace.torch's join runs without the GIL.  Plain C. */
#ifndef FT_NEST_H
#define FT_NEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t start, end;
    int64_t parent;     /* index of the parent frame, or -1 */
} ft_nest_frame;

typedef struct {
    int64_t start, end; /* as placed: moved by at most the tolerance */
    size_t idx;         /* the op's index in the input */
} ft_nest_op;

/* ops (n of them, sorted by start then longest first, idx their input
 * order) split into those that nest with frames (in call order) and those
 * that cross a frame's edge or another op's by more than tol ns: the
 * former stay in ops, moved onto the side of an edge they cross by at most
 * tol and sorted again, the latter get crossing[idx] = 1 (crossing: n
 * bytes, zeroed by the caller) and stay in ops where they were.  Returns
 * 0, or -1 when out of memory. */
int ft_nest_ops(const ft_nest_frame *frames, size_t nframes, ft_nest_op *ops,
                size_t n, int64_t tol, uint8_t *crossing);

/* Sorts ops by start, then longest first, then input order. */
void ft_nest_sort(ft_nest_op *ops, size_t n);

#endif /* FT_NEST_H */
