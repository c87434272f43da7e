/* Replay of one thread's records.
 *
 * The records of a thread are in time order but need not be consistent:
 * the ring may have overwritten the oldest ones, CPython 3.12.0-3.12.4 can
 * deliver a C return without its call or a C call without its return
 * (CPython issue 122029), and a C function already running when the hook
 * was installed returns with no call.  Whatever the order, the output obeys
 * the invariants: every event lies within its parent, and within
 * [window start, stop_ns].
 *
 * Frames whose call we never saw are of two sorts.  A Python return with no
 * matching open frame closes a frame that was open when the window began:
 * it becomes a "pre-window" frame (F) that starts at the window start and
 * encloses everything recorded before it at that level.  Frames open both
 * before the window and at stop are found from the stack taken at stop (M).
 * The output of a thread is M (outermost first), F (outermost first), then
 * the recorded frames (R) in call order.
 *
 * A thread whose recording ended early (loss_ns) has no M: its open frames
 * end at loss_ns, flagged open_at_loss instead of open_at_stop. */
#define _POSIX_C_SOURCE 200809L  /* clock.h under -std=c11 */
#include "replay.h"

#include <stdlib.h>
#include <string.h>

/* A recorded frame's parent while replaying: an R index (>= 0), or for a
 * frame opened on an empty stack, the number of pre-window frames closed
 * before it, encoded as -(epoch + 1). */
#define ROOT_OF_EPOCH(e) (-(int64_t)(e) - 1)
#define EPOCH_OF_ROOT(p) ((size_t)(-(p) - 1))

typedef struct {
    ft_eventvec recorded;   /* R */
    ft_eventvec prewindow;  /* F, in the order their returns came */
    size_t *stack;          /* R indices of open frames */
    size_t depth;
    size_t stack_cap;
    int64_t window_start;
    int64_t prev_ts;        /* time of the previous record */
    int base_known;         /* every frame open at the window start is on
                               the stack: no overflow, base stack given */
    uint64_t partial;       /* frames shown with one of their records
                               missing (see ft_dropped_events()) */
} replay_ctx;

static int
vec_reserve(ft_eventvec *vec, size_t extra)
{
    if (vec->len + extra <= vec->cap) {
        return 0;
    }
    size_t cap = vec->cap ? vec->cap : 64;
    while (cap < vec->len + extra) {
        if (cap > SIZE_MAX / 2 / sizeof(ft_event)) {
            return -1;
        }
        cap *= 2;
    }
    ft_event *items = realloc(vec->items, cap * sizeof(ft_event));
    if (items == NULL) {
        return -1;
    }
    vec->items = items;
    vec->cap = cap;
    return 0;
}

void
ft_eventvec_free(ft_eventvec *vec)
{
    free(vec->items);
    memset(vec, 0, sizeof(*vec));
}

static int
push_frame(replay_ctx *ctx, uint32_t func, int is_c, int64_t start,
           int open_at_start)
{
    if (vec_reserve(&ctx->recorded, 1) < 0) {
        return -1;
    }
    if (ctx->depth == ctx->stack_cap) {
        size_t cap = ctx->stack_cap ? ctx->stack_cap * 2 : 256;
        size_t *stack = realloc(ctx->stack, cap * sizeof(size_t));
        if (stack == NULL) {
            return -1;
        }
        ctx->stack = stack;
        ctx->stack_cap = cap;
    }
    size_t idx = ctx->recorded.len++;
    ft_event *ev = &ctx->recorded.items[idx];
    memset(ev, 0, sizeof(*ev));
    ev->start_ns = start;
    ev->end_ns = start;
    ev->func = func;
    ev->is_c = (uint8_t)is_c;
    ev->open_at_start = (uint8_t)open_at_start;
    ev->parent = ctx->depth ? (int64_t)ctx->stack[ctx->depth - 1]
                            : ROOT_OF_EPOCH(ctx->prewindow.len);
    ctx->stack[ctx->depth++] = idx;
    return 0;
}

static inline ft_event *
top_frame(replay_ctx *ctx)
{
    return &ctx->recorded.items[ctx->stack[ctx->depth - 1]];
}

/* Closes the open frames down to depth keep (exclusive) at ts. */
static void
close_down_to(replay_ctx *ctx, size_t keep, int64_t ts)
{
    while (ctx->depth > keep) {
        top_frame(ctx)->end_ns = ts;
        ctx->depth--;
    }
}

/* Position + 1 of the innermost open frame of the given sort running func,
 * or 0. */
static size_t
find_open(replay_ctx *ctx, uint32_t func, int is_c)
{
    for (size_t i = ctx->depth; i > 0; i--) {
        const ft_event *ev = &ctx->recorded.items[ctx->stack[i - 1]];
        if (ev->func == func && ev->is_c == is_c) {
            return i;
        }
    }
    return 0;
}

/* C functions never call C functions directly in the profile stream (only
 * bytecode makes C calls), so a C frame on top of the stack when another C
 * event or an unmatched return arrives lost its return: close it. */
static int
close_dangling_c(replay_ctx *ctx, int64_t ts)
{
    int closed = 0;
    while (ctx->depth && top_frame(ctx)->is_c) {
        top_frame(ctx)->end_ns = ts;
        ctx->depth--;
        closed = 1;
    }
    return closed;
}

static int
on_call(replay_ctx *ctx, const ft_record *rec)
{
    return push_frame(ctx, rec->func, 0, rec->ts, 0);
}

static int
on_c_call(replay_ctx *ctx, const ft_record *rec)
{
    close_dangling_c(ctx, rec->ts);
    return push_frame(ctx, rec->func, 1, rec->ts, 0);
}

static int
on_return(replay_ctx *ctx, const ft_record *rec)
{
    size_t pos = find_open(ctx, rec->func, 0);
    if (pos) {
        close_down_to(ctx, pos - 1, rec->ts);
        return 0;
    }
    int python_open = 0;
    for (size_t i = 0; i < ctx->depth && !python_open; i++) {
        python_open = !ctx->recorded.items[ctx->stack[i]].is_c;
    }
    if (ctx->base_known || python_open) {
        /* Not a frame from before the window: those are all on the stack
         * (the base stack), or every frame called since has returned.  Its call was not reported (CPython 3.11's throw()
         * into a yield from): it ran inside the open frame, at most since
         * the previous record. */
        if (push_frame(ctx, rec->func, 0, ctx->prev_ts, 1) < 0) {
            return -1;
        }
        close_down_to(ctx, ctx->depth - 1, rec->ts);
        ctx->partial++;
        return 0;
    }
    /* The frame was open before the window began. */
    close_down_to(ctx, 0, rec->ts);
    if (vec_reserve(&ctx->prewindow, 1) < 0) {
        return -1;
    }
    ft_event *ev = &ctx->prewindow.items[ctx->prewindow.len++];
    memset(ev, 0, sizeof(*ev));
    ev->start_ns = ctx->window_start;
    ev->end_ns = rec->ts;
    ev->func = rec->func;
    ev->open_at_start = 1;
    ctx->partial++;
    return 0;
}

static int
on_c_return(replay_ctx *ctx, const ft_record *rec)
{
    size_t pos = find_open(ctx, rec->func, 1);
    if (pos) {
        close_down_to(ctx, pos - 1, rec->ts);
        return 0;
    }
    /* No call recorded: it ran at most since the previous record (or since
     * whatever dangling C frame we close now). */
    int64_t start = close_dangling_c(ctx, rec->ts) ? rec->ts : ctx->prev_ts;
    if (push_frame(ctx, rec->func, 1, start, 1) < 0) {
        return -1;
    }
    close_down_to(ctx, ctx->depth - 1, rec->ts);
    ctx->partial++;
    return 0;
}

/* Depth of the event at thread-relative index i of te, whose head is
 * complete and whose body is fixed up to before i. */
static inline uint32_t
depth_at(const ft_thread_events *te, int64_t i)
{
    size_t k = (size_t)i;
    return k < te->head.len ? te->head.items[k].depth
                            : te->body.items[k - te->head.len].depth;
}

/* How many of the outermost frames of the stop stack the records lost
 * (their calls overwritten), open_py Python frames being open on the
 * records.  A thread caught between a frame's push and its call event
 * (3.12+: the eval breaker runs before PY_START; a snapshot catches running
 * threads there) has that frame innermost on its stack and not on its
 * records: if the stack without it ends as the records' open frames do,
 * and with it does not, it is not counted. */
static size_t
missing_frames(const replay_ctx *ctx, const ft_replay_input *in,
               size_t open_py)
{
    size_t depth = in->stop_depth;
    if (depth > open_py && open_py > 0) {
        /* The records' innermost open Python frame. */
        uint32_t innermost = UINT32_MAX;
        for (size_t i = ctx->depth; i-- > 0;) {
            const ft_event *ev = &ctx->recorded.items[ctx->stack[i]];
            if (!ev->is_c) {
                innermost = ev->func;
                break;
            }
        }
        if (in->stop_stack[depth - 1] != innermost
            && in->stop_stack[depth - 2] == innermost) {
            depth--;
        }
    }
    return depth > open_py ? depth - open_py : 0;
}

/* Makes te from the replay: the M frames from the stop stack and F in its
 * head, R (ctx->recorded, moved, fixed in place) as its body. */
static int
assemble(replay_ctx *ctx, const ft_replay_input *in, ft_thread_events *te)
{
    /* A thread whose recording ended early: what was open then ends at
     * that moment (not before anything recorded, not after the stop), and
     * the stop stack, taken later, says nothing about it. */
    int lost = in->loss_ns != 0;
    int64_t open_end = in->stop_ns;
    if (lost) {
        open_end = in->loss_ns > ctx->prev_ts ? in->loss_ns : ctx->prev_ts;
        open_end = open_end < in->stop_ns ? open_end : in->stop_ns;
    }
    size_t open_py = 0;
    for (size_t i = 0; i < ctx->depth; i++) {
        ft_event *ev = &ctx->recorded.items[ctx->stack[i]];
        ev->end_ns = open_end;
        ev->open_at_stop = (uint8_t)!lost;
        ev->open_at_loss = (uint8_t)lost;
        open_py += !ev->is_c;
    }
    size_t nmissing = 0;
    if (!lost && !ctx->base_known && in->stop_stack != NULL) {
        nmissing = missing_frames(ctx, in, open_py);
    }
    size_t npre = ctx->prewindow.len;
    size_t nrec = ctx->recorded.len;
    te->head.len = 0;
    if (vec_reserve(&te->head, nmissing + npre) < 0) {
        return -1;
    }
    ctx->partial += nmissing;
    /* The innermost enclosing frame built from the stop stack, or -1. */
    int64_t outer_parent = nmissing ? (int64_t)nmissing - 1 : -1;
    ft_event *dst = te->head.items;

    for (size_t j = 0; j < nmissing; j++) {
        ft_event *ev = &dst[j];
        memset(ev, 0, sizeof(*ev));
        ev->start_ns = ctx->window_start;
        ev->end_ns = in->stop_ns;
        ev->func = in->stop_stack[j];
        ev->open_at_start = 1;
        ev->open_at_stop = 1;
        ev->parent = j ? (int64_t)j - 1 : -1;
        ev->depth = (uint32_t)j;
    }
    /* Pre-window frame i (0-based, in return order) goes to position
     * nmissing + (npre - 1 - i): the last to return is the outermost. */
#define PRE_INDEX(i) ((int64_t)(nmissing + (npre - 1 - (i))))
    for (size_t i = 0; i < npre; i++) {
        ft_event *ev = &dst[nmissing + (npre - 1 - i)];
        *ev = ctx->prewindow.items[i];
        ev->parent = i + 1 < npre ? PRE_INDEX(i + 1) : outer_parent;
        ev->depth = (uint32_t)(nmissing + (npre - 1 - i));
    }
    te->head.len = nmissing + npre;
    /* R in place: parents come before their children, so a parent's depth
     * is final when its children are reached. */
    te->body = ctx->recorded;
    memset(&ctx->recorded, 0, sizeof(ctx->recorded));
    int64_t rec_base = (int64_t)(nmissing + npre);
    for (size_t r = 0; r < nrec; r++) {
        ft_event *ev = &te->body.items[r];
        if (ev->parent >= 0) {
            ev->parent += rec_base;
        }
        else {
            size_t epoch = EPOCH_OF_ROOT(ev->parent);
            ev->parent = epoch < npre ? PRE_INDEX(epoch) : outer_parent;
        }
        ev->depth = ev->parent < 0 ? 0 : depth_at(te, ev->parent) + 1;
    }
#undef PRE_INDEX
    return 0;
}

uint64_t
ft_dropped_events(uint64_t lost_records, int64_t partial)
{
    /* A frame lost entirely lost two records (its call and return); one
     * shown with a record missing lost one.  Rounded up: a single record
     * lost from no frame shown is one frame lost. */
    if (partial >= 0 && lost_records <= (uint64_t)partial) {
        return 0;
    }
    uint64_t whole = partial >= 0 ? lost_records - (uint64_t)partial
                                  : lost_records + (uint64_t)-partial;
    uint64_t events = whole / 2 + whole % 2;
    return events < lost_records ? events : lost_records;
}

int
ft_replay_thread_events(const ft_replay_input *in, ft_thread_events *te,
                        int64_t *partial)
{
    replay_ctx ctx;
    memset(&ctx, 0, sizeof(ctx));
    /* R grows in te's body, whose buffer a previous thread may have left. */
    ctx.recorded = te->body;
    ctx.recorded.len = 0;
    memset(&te->body, 0, sizeof(te->body));
    te->head.len = 0;
    const ft_ring *ring = in->ring;
    int rc = -1;
    ft_ring_reader reader;
    ft_ring_reader_init(&reader, ring);
    ft_clock_cursor cursor = {0};
    int64_t base_ns = ft_clock_convert(in->clock, in->base_ticks, &cursor);
    /* A window that starts after the thread's hook went on leaves out what
     * came before, as an overflow would. */
    int windowed = in->window_ns != 0 && in->window_ns > base_ns;
    int overflowed = ft_ring_overflowed(ring) || windowed;
    ctx.base_known = !overflowed && in->base_known;
    ctx.window_start = base_ns;
    if (overflowed) {
        /* The base stack is stale: the records that left it are gone. */
        ft_ring_reader peek = reader;
        ft_record oldest;
        int64_t first = in->stop_ns;
        /* Whether every record since the window's start is there: some
         * before it were left out, or nothing was overwritten. */
        int whole = ring->skipped || !ft_ring_overflowed(ring);
        while (ft_ring_read(&peek, &oldest)) {
            int64_t ts = ft_clock_convert(in->clock, oldest.ts, &cursor);
            if (windowed && ts < in->window_ns) {
                whole = 1;
                continue;
            }
            first = ts;
            break;
        }
        if (windowed && whole) {
            first = in->window_ns;
        }
        ctx.window_start = first < in->stop_ns ? first : in->stop_ns;
        cursor = (ft_clock_cursor){0};
    }
    else {
        for (size_t i = 0; i < in->base_depth; i++) {
            if (push_frame(&ctx, in->base_stack[i], 0, base_ns, 1) < 0) {
                goto done;
            }
        }
    }
    ctx.prev_ts = ctx.window_start;

    cursor = (ft_clock_cursor){0};
    ft_record converted;
    while (ft_ring_read(&reader, &converted)) {
        const ft_record *rec = &converted;
        converted.ts = ft_clock_convert(in->clock, converted.ts, &cursor);
        if (rec->ts > in->stop_ns) {
            break;  /* raced the stop: not part of the trace */
        }
        if (windowed && rec->ts < in->window_ns) {
            continue;  /* before the snapshot's window */
        }
        int err;
        switch (rec->kind) {
        case FT_REC_CALL:
            err = on_call(&ctx, rec);
            break;
        case FT_REC_RETURN:
            err = on_return(&ctx, rec);
            break;
        case FT_REC_C_CALL:
            err = on_c_call(&ctx, rec);
            break;
        case FT_REC_C_RETURN:
        case FT_REC_C_EXCEPTION:
            err = on_c_return(&ctx, rec);
            break;
        default:
            err = 0;  /* unknown kinds are skipped */
            break;
        }
        if (err < 0) {
            goto done;
        }
        ctx.prev_ts = rec->ts;
    }
    rc = assemble(&ctx, in, te);
    if (rc == 0 && partial != NULL) {
        /* The frames open at the hook's installation had no call to lose:
         * under overflow they are among the pre-window and stop-stack
         * frames counted, or lost entirely with their return: one record
         * each, which the negative count makes up for. */
        int64_t base = overflowed ? (int64_t)in->base_depth : 0;
        *partial = (int64_t)ctx.partial - base;
    }

done:
    ft_eventvec_free(&ctx.recorded);
    ft_eventvec_free(&ctx.prewindow);
    free(ctx.stack);
    return rc;
}

void
ft_thread_events_free(ft_thread_events *te)
{
    ft_eventvec_free(&te->head);
    ft_eventvec_free(&te->body);
}

int
ft_replay_thread(const ft_replay_input *in, ft_eventvec *out,
                 int64_t *partial)
{
    ft_thread_events te = {0};
    int rc = ft_replay_thread_events(in, &te, partial);
    size_t n = te.head.len + te.body.len;
    if (rc == 0 && vec_reserve(out, n) < 0) {
        rc = -1;
    }
    if (rc == 0) {
        int64_t base = (int64_t)out->len;
        for (size_t i = 0; i < n; i++) {
            ft_event *ev = &out->items[out->len + i];
            *ev = *ft_thread_event(&te, i);
            if (ev->parent >= 0) {
                ev->parent += base;
            }
        }
        out->len += n;
    }
    ft_thread_events_free(&te);
    return rc;
}

int64_t
ft_replay_open_python(const ft_replay_input *in)
{
    ft_replay_input bare = *in;
    bare.stop_stack = NULL;  /* only what the records leave open */
    bare.stop_depth = 0;
    bare.loss_ns = 0;
    ft_thread_events te = {0};
    if (ft_replay_thread_events(&bare, &te, NULL) < 0) {
        ft_thread_events_free(&te);
        return -1;
    }
    int64_t open = 0;
    for (size_t i = 0; i < te.head.len + te.body.len; i++) {
        const ft_event *ev = ft_thread_event(&te, i);
        open += ev->open_at_stop && !ev->is_c;
    }
    ft_thread_events_free(&te);
    return open;
}
