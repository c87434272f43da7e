/* The join's sweep (nest.h): ops placed among one thread's frames, as the
 * .pftrace writer nests them: an op goes before the frame it starts before
 * (or at, and outlasts).  Passes repeat until none moves an op: as many as
 * moves cascade (an op's children after it).  Plain C. */
#include "nest.h"

#include <stdlib.h>
#include <string.h>

static int
op_order(const void *a, const void *b)
{
    const ft_nest_op *x = a, *y = b;
    if (x->start != y->start) {
        return x->start < y->start ? -1 : 1;
    }
    if (x->end != y->end) {
        return x->end > y->end ? -1 : 1;
    }
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

void
ft_nest_sort(ft_nest_op *ops, size_t n)
{
    qsort(ops, n, sizeof(*ops), op_order);
}

/* After a move: sorted again, ties kept in their present order (a stable
 * sort, as the reference's), through each op's present position. */
typedef struct {
    ft_nest_op op;
    size_t pos;
} placed;

static int
placed_order(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->op.start != y->op.start) {
        return x->op.start < y->op.start ? -1 : 1;
    }
    if (x->op.end != y->op.end) {
        return x->op.end > y->op.end ? -1 : 1;
    }
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

typedef struct {
    int64_t start, end;
    int is_op;
    size_t idx;         /* a frame's index, or an op's position in ops */
} entry;

/* One sweep.  moved[k] (position k) set with its new times in to[k];
 * found[idx] set for ops (by input index) that cross by more than tol,
 * kept only when none moved.  Returns how many moved, and in *nfound how
 * many were found. */
static size_t
sweep(const ft_nest_frame *frames, size_t nf, const ft_nest_op *ops,
      size_t nx, int64_t tol, const uint8_t *skip, uint8_t *moved,
      ft_nest_op *to, uint8_t *found, size_t *found_list, size_t *nfound,
      entry *stack)
{
    size_t nmoved = 0, depth = 0, i = 0, x = 0;
    *nfound = 0;
#define FOUND(ix) do { if (!found[(ix)]) { found[(ix)] = 1; \
                       found_list[(*nfound)++] = (ix); } } while (0)
    while (i < nf || x < nx) {
        while (x < nx && skip[ops[x].idx]) {
            x++;
        }
        const ft_nest_frame *f = i < nf ? &frames[i] : NULL;
        const ft_nest_op *op = x < nx ? &ops[x] : NULL;
        int take_op;
        int64_t start, end;
        if (op != NULL && (f == NULL || op->start < f->start
                           || (op->start == f->start && op->end > f->end))) {
            take_op = 1;
            start = op->start;
            end = op->end;
        }
        else if (f != NULL) {
            take_op = 0;
            start = f->start;
            end = f->end;
        }
        else {
            break;
        }
        while (depth > 0) {
            const entry *t = &stack[depth - 1];
            int keep = (t->is_op || take_op)
                       ? (t->start <= start && end <= t->end)
                       : (int64_t)t->idx == f->parent;
            if (keep) {
                break;
            }
            entry top = *t;
            depth--;
            if (top.end <= start || (top.is_op && take_op)) {
                /* Ended before; or two ops: torch's own nesting, kept. */
                if (top.is_op && take_op && top.end > start) {
                    FOUND(op->idx);
                }
                continue;
            }
            /* They cross: top began before what begins now, ends after. */
            if (top.is_op && !moved[top.idx]) {  /* an op, then a frame */
                ft_nest_op t_op = ops[top.idx];
                if (start - top.start <= tol && top.end <= end) {
                    t_op.start = start;  /* into the frame */
                    to[top.idx] = t_op;
                    moved[top.idx] = 1;
                    nmoved++;
                }
                else if (top.end - start <= tol) {
                    t_op.end = start;  /* before it */
                    to[top.idx] = t_op;
                    moved[top.idx] = 1;
                    nmoved++;
                }
                else {
                    FOUND(ops[top.idx].idx);
                }
            }
            else if (take_op && !top.is_op && !moved[x]) {
                /* a frame, then an op */
                ft_nest_op o = *op;
                if (end - top.end <= tol && top.start <= start) {
                    o.end = top.end;  /* into the frame */
                    to[x] = o;
                    moved[x] = 1;
                    nmoved++;
                }
                else if (top.end - start <= tol) {
                    o.start = top.end;  /* after it */
                    to[x] = o;
                    moved[x] = 1;
                    nmoved++;
                }
                else {
                    FOUND(op->idx);
                }
            }
        }
        if (take_op) {
            if (!found[op->idx]) {
                stack[depth++] = (entry){start, end, 1, x};
            }
            x++;
        }
        else {
            stack[depth++] = (entry){start, end, 0, i};
            i++;
        }
    }
#undef FOUND
    return nmoved;
}

int
ft_nest_ops(const ft_nest_frame *frames, size_t nframes, ft_nest_op *ops,
            size_t n, int64_t tol, uint8_t *crossing)
{
    int rc = -1;
    size_t cap = n + 1;
    uint8_t *moved = calloc(cap, 1);
    uint8_t *found = calloc(cap, 1);
    size_t *found_list = malloc(cap * sizeof(size_t));
    ft_nest_op *to = malloc(cap * sizeof(ft_nest_op));
    placed *order = malloc(cap * sizeof(placed));
    /* At most every frame and op open at once. */
    entry *stack = malloc((nframes + cap) * sizeof(entry));
    if (moved == NULL || found == NULL || found_list == NULL || to == NULL
        || order == NULL || stack == NULL) {
        goto done;
    }
    for (int pass = 0; pass < 10000; pass++) {
        size_t nfound;
        size_t nmoved = sweep(frames, nframes, ops, n, tol, crossing, moved,
                              to, found, found_list, &nfound, stack);
        for (size_t k = 0; k < nfound; k++) {
            /* Kept only when nothing moved: after a move the order may
             * change, and the next sweep decides again. */
            if (nmoved == 0) {
                crossing[found_list[k]] = 1;
            }
            found[found_list[k]] = 0;
        }
        if (nmoved == 0) {
            if (nfound == 0) {
                break;
            }
            continue;  /* again without them */
        }
        for (size_t k = 0; k < n; k++) {
            if (moved[k]) {
                ops[k] = to[k];
                moved[k] = 0;
            }
            order[k] = (placed){ops[k], k};
        }
        qsort(order, n, sizeof(*order), placed_order);
        for (size_t k = 0; k < n; k++) {
            ops[k] = order[k].op;
        }
    }
    rc = 0;
done:
    free(moved);
    free(found);
    free(found_list);
    free(to);
    free(order);
    free(stack);
    return rc;
}
