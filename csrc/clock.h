/* Timestamps.  The hot path reads a cheap tick counter (the CPU's time-stamp
 * counter where the kernel itself trusts it as its clocksource, else
 * CLOCK_MONOTONIC in ns); anchors pair ticks with CLOCK_MONOTONIC ns (the
 * base of time.monotonic_ns()) at start, at stop and now and then in
 * between, and ticks are converted to ns after the fact, piecewise linearly
 * between anchors: exactly at start and stop, monotonically everywhere. */
#ifndef FT_CLOCK_H
#define FT_CLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#  include <x86intrin.h>
#  define FT_HAVE_CYCLE_COUNTER 1
#elif defined(__aarch64__)
#  define FT_HAVE_CYCLE_COUNTER 1
#else
#  define FT_HAVE_CYCLE_COUNTER 0
#endif

static inline int64_t
ft_clock_now(void)
{
    struct timespec ts;
    /* Read through the vDSO: no system call. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline int64_t
ft_cycles(void)
{
#if defined(__x86_64__) || defined(__i386__)
    return (int64_t)__rdtsc();
#elif defined(__aarch64__)
    uint64_t v;
    __asm__ __volatile__("mrs %0, cntvct_el0" : "=r"(v));
    return (int64_t)v;
#else
    return ft_clock_now();
#endif
}

typedef struct {
    int64_t ticks;
    int64_t ns;
    int64_t width;        /* the bracket's width in ticks: 0 on the ns clock */
} ft_anchor;

/* CLOCK_MONOTONIC and CLOCK_BOOTTIME read together, for the .pftrace's
 * clock snapshot: they differ by the time the machine was suspended. */
typedef struct {
    int64_t mono_ns;
    int64_t boot_ns;
} ft_boot_pair;

typedef struct {
    int use_cycles;       /* ticks are cycle-counter values, not ns */
    ft_anchor *anchors;   /* increasing in both fields */
    size_t nanchors;
    size_t cap;
    ft_boot_pair boot[2]; /* at start, and at stop if taken */
    int nboot;
    int64_t best_width;   /* the tightest bracket seen so far, 0: none */
} ft_clock;

/* What FRAMETRACE_CLOCK asks for: unset, empty or "auto" (the cycle
 * counter where usable), "monotonic", or anything else (which Tracer()
 * refuses). */
enum { FT_CLOCK_ENV_AUTO, FT_CLOCK_ENV_MONOTONIC, FT_CLOCK_ENV_BAD };
int ft_clock_env(void);

/* Whether the cycle counter is safe to convert, and not disabled by
 * FRAMETRACE_CLOCK=monotonic.  x86: the kernel uses the TSC as its own
 * clocksource (so it is invariant and synchronized across CPUs).  aarch64:
 * cntfrq_el0 is set and cntvct_el0 advances monotonically beside
 * CLOCK_MONOTONIC over a 0.2 ms check, done once per process. */
int ft_clock_cycles_usable(void);

/* Ready to record (takes the first anchor); -1 when out of memory. */
int ft_clock_start(ft_clock *clock, int use_cycles);
void ft_clock_free(ft_clock *clock);
/* dst becomes a copy of src with its own anchors: 0, or -1 (no memory)
 * leaving dst empty. */
int ft_clock_copy(ft_clock *dst, const ft_clock *src);
/* Reads CLOCK_MONOTONIC and CLOCK_BOOTTIME together into the clock's
 * pair at start (ft_clock_start() does) or at stop.  Pure C; a clock
 * without CLOCK_BOOTTIME keeps no pair. */
void ft_clock_note_boottime(ft_clock *clock, int at_stop);
/* One moment on CLOCK_MONOTONIC and CLOCK_REALTIME, for placing a trace on
 * the wall clock (other processes' traces, torch.profiler's): the tightest
 * of `tries` bracketed reads (monotonic, wall, monotonic), the wall read
 * paired with the bracket's midpoint; *width_ns: that bracket's width, a
 * bound on the pair's error.  Pure C. */
void ft_clock_wall_pair(int tries, int64_t *mono_ns, int64_t *wall_ns,
                        int64_t *width_ns);
/* Appends an anchor (pure C, never fails: without memory it is skipped)
 * and returns it: the tightest of up to FT_ANCHOR_TRIES bracketed reads
 * (ticks, CLOCK_MONOTONIC, ticks), fewer once one is about as tight as the
 * tightest this clock has seen; its ns paired with the bracket's
 * midpoint, off by at most half its width. */
ft_anchor ft_clock_anchor(ft_clock *clock);
/* Anchor i's width in ns (the tick rate: the clock's mean, from its first
 * anchor to its last or to now); 0 on the ns clock. */
int64_t ft_clock_width_ns(const ft_clock *clock, size_t i);

/* A cold read (the vDSO's data out of cache) can be 30x as wide as a warm
 * one; 16 reads cost about 0.5 us in all. */
#define FT_ANCHOR_TRIES 16

/* Anchors closer together than this add nothing. */
#define FT_ANCHOR_MIN_TICKS ((int64_t)1 << 30)

static inline int64_t
ft_clock_ticks(const ft_clock *clock)
{
    return clock->use_cycles ? ft_cycles() : ft_clock_now();
}

/* Called when a ring wraps: keeps anchors coming in long traces. */
static inline void
ft_clock_maybe_anchor(ft_clock *clock, int64_t ticks)
{
    if (ticks - clock->anchors[clock->nanchors - 1].ticks >= FT_ANCHOR_MIN_TICKS) {
        ft_clock_anchor(clock);
    }
}

/* Where the last conversion was: its segment, and that segment's slope
 * split for exact conversion without a division per timestamp. */
typedef struct {
    size_t segment;
    int ready;            /* the fields below describe segment */
    int64_t lo_ticks;     /* the segment's anchors */
    int64_t hi_ticks;
    int64_t lo_ns;
    uint64_t whole;       /* ns per tick, integer part */
    uint64_t rem;         /* its remainder, < span */
    uint64_t frac;        /* floor(rem * 2**64 / span) */
    uint64_t span;        /* hi_ticks - lo_ticks */
} ft_clock_cursor;

/* ticks -> ns.  cursor starts zeroed; conversions of increasing ticks with
 * the same cursor cost O(1) each.  clock may be NULL (ticks are ns). */
int64_t ft_clock_to_ns(const ft_clock *clock, int64_t ticks,
                       ft_clock_cursor *cursor);

/* The same, inline for ticks in the cursor's segment: lo_ns + floor(dt *
 * slope), the slope's fraction held as a 64-bit binary fraction that is off
 * by less than one unit of its last place, so the quotient is at most 1 low
 * and one comparison corrects it. */
static inline int64_t
ft_clock_convert(const ft_clock *clock, int64_t ticks, ft_clock_cursor *c)
{
#ifdef __SIZEOF_INT128__
    if (c->ready && ticks >= c->lo_ticks && ticks <= c->hi_ticks) {
        uint64_t dt = (uint64_t)(ticks - c->lo_ticks);
        uint64_t q = (uint64_t)(((unsigned __int128)dt * c->frac) >> 64);
        if ((unsigned __int128)(q + 1) * c->span
            <= (unsigned __int128)dt * c->rem) {
            q++;
        }
        return c->lo_ns + (int64_t)(dt * c->whole + q);
    }
#endif
    return ft_clock_to_ns(clock, ticks, c);
}

#endif /* FT_CLOCK_H */
