/* Replay: one thread's records -> complete, properly nested events, every
 * one of them ending at or before the latched stop time.  Plain C. */
#ifndef FT_REPLAY_H
#define FT_REPLAY_H

#include "clock.h"
#include "ring.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t start_ns;
    int64_t end_ns;
    int64_t parent;      /* index in the output vector, or -1 */
    uint32_t func;       /* function table id */
    uint32_t depth;
    uint8_t is_c;
    uint8_t open_at_start;  /* its start was not recorded: it begins at the
                               earliest time the records allow */
    uint8_t open_at_stop;   /* still running at stop: ends at stop_ns */
    uint8_t open_at_loss;   /* still running when the thread's recording
                               ended early: ends at loss_ns */
} ft_event;

typedef struct {
    ft_event *items;
    size_t len;
    size_t cap;
} ft_eventvec;

typedef struct {
    const ft_ring *ring;          /* the thread's records, in ticks */
    const ft_clock *clock;        /* ticks -> ns; NULL: ticks are ns */
    int64_t base_ticks;           /* when the thread's hook was installed */
    const uint32_t *base_stack;   /* Python frames open then, outermost
                                     first */
    size_t base_depth;
    int base_known;               /* base_stack holds every frame open then
                                     (a tracer's always does) */
    const uint32_t *stop_stack;   /* Python frames open at stop, or NULL */
    size_t stop_depth;
    int64_t stop_ns;
    int64_t window_ns;            /* 0, or where a snapshot's window starts:
                                     records before are left out, as if
                                     overwritten (not counted lost) */
    int64_t loss_ns;              /* 0, or when the thread's recording ended
                                     early (its hook displaced): frames open
                                     then end there, and stop_stack is not
                                     used */
} ft_replay_input;

/* One thread's events, parents before children: head (the frames open
 * before the window, from the stop stack and the unmatched returns), then
 * body (the recorded frames, in call order).  Parents are indices in that
 * sequence (head.len + i for body item i), or -1. */
typedef struct {
    ft_eventvec head;
    ft_eventvec body;
} ft_thread_events;

/* Event i of te (i < head.len + body.len). */
static inline const ft_event *
ft_thread_event(const ft_thread_events *te, size_t i)
{
    return i < te->head.len ? &te->head.items[i]
                            : &te->body.items[i - te->head.len];
}

/* Replaces te's events with the thread's, reusing its buffers (the
 * writers replay thread after thread into one: their memory is what the
 * largest thread needs).  Pure C: no Python API, no GIL needed.  Returns
 * 0, or -1 when out of memory (te then holds no events, and stays valid
 * for ft_thread_events_free()).  partial: as for ft_replay_thread(). */
int ft_replay_thread_events(const ft_replay_input *in, ft_thread_events *te,
                            int64_t *partial);
void ft_thread_events_free(ft_thread_events *te);

/* Appends the thread's events to out, parents before children; parent
 * indices are absolute in out.  Returns 0, or -1 when out of memory (out is
 * then left as it was before the call).  partial (may be NULL) gets how many
 * of the events have a record missing, less the frames open at the hook's
 * installation when the ring overflowed (they had no call to lose), for
 * ft_dropped_events(). */
int ft_replay_thread(const ft_replay_input *in, ft_eventvec *out,
                     int64_t *partial);

/* The number of events lost entirely, estimated from the records a thread
 * lost (overwritten or never stored) and the events its replay showed with
 * a record missing: exact when every lost record belongs to a Python frame
 * that began after the hook was installed; never above lost_records. */
uint64_t ft_dropped_events(uint64_t lost_records, int64_t partial);
void ft_eventvec_free(ft_eventvec *vec);
/* The number of Python frames the thread's records leave open (called and
 * never returned), from in's ring, clock, base stack and stop_ns (its
 * stop stack and loss_ns are not used), or -1 when out of memory.  More
 * than the thread really has open means returns were never recorded. */
int64_t ft_replay_open_python(const ft_replay_input *in);

#endif /* FT_REPLAY_H */
