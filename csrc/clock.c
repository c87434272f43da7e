/* Anchors and the conversion of ticks to CLOCK_MONOTONIC ns. */
#define _POSIX_C_SOURCE 200809L  /* clock_gettime() under -std=c11 */
#include "clock.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if FT_HAVE_CYCLE_COUNTER && defined(__linux__) && defined(__aarch64__)
/* How long the virtual counter is watched against CLOCK_MONOTONIC. */
#  define FT_ARM_CHECK_NS 200000
/* Reads of a CLOCK_MONOTONIC that never reaches the end of the check. */
#  define FT_ARM_CHECK_MAX_READS 10000000

/* The generic timer is constant-rate by the architecture, but firmware may
 * leave its frequency register unset and a hypervisor may trap or emulate
 * the counter: it is used only if its frequency is set and, over a short
 * check, it never goes back and it advances while CLOCK_MONOTONIC does.
 * Done once per process (the answer cannot change). */
static int
arm_counter_check(void)
{
    uint64_t freq;
    __asm__ __volatile__("mrs %0, cntfrq_el0" : "=r"(freq));
    if (freq == 0) {
        return 0;
    }
    int64_t t0 = ft_clock_now();
    int64_t first = ft_cycles(), last = first;
    for (long i = 0; i < FT_ARM_CHECK_MAX_READS; i++) {
        int64_t c = ft_cycles();
        if (c < last) {
            return 0;
        }
        last = c;
        if (ft_clock_now() - t0 >= FT_ARM_CHECK_NS) {
            return last > first;
        }
    }
    return 0;
}

static int
arm_counter_usable(void)
{
    /* 0: not checked yet; 1: usable; 2: not.  Threads that race here
     * compute the same answer. */
    static atomic_int checked;
    int v = atomic_load_explicit(&checked, memory_order_relaxed);
    if (v == 0) {
        v = arm_counter_check() ? 1 : 2;
        atomic_store_explicit(&checked, v, memory_order_relaxed);
    }
    return v == 1;
}
#endif

int
ft_clock_env(void)
{
    const char *env = getenv("FRAMETRACE_CLOCK");
    if (env == NULL || env[0] == '\0' || strcmp(env, "auto") == 0) {
        return FT_CLOCK_ENV_AUTO;
    }
    return strcmp(env, "monotonic") == 0 ? FT_CLOCK_ENV_MONOTONIC
                                         : FT_CLOCK_ENV_BAD;
}

int
ft_clock_cycles_usable(void)
{
    if (ft_clock_env() == FT_CLOCK_ENV_MONOTONIC) {
        return 0;
    }
#if FT_HAVE_CYCLE_COUNTER && defined(__linux__)
#  if defined(__aarch64__)
    return arm_counter_usable();
#  else
    char name[32] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/"
                    "current_clocksource", "r");
    if (f == NULL) {
        return 0;
    }
    int ok = fgets(name, sizeof(name), f) != NULL
             && strncmp(name, "tsc", 3) == 0
             && (name[3] == '\n' || name[3] == '\0');
    fclose(f);
    return ok;
#  endif
#else
    return 0;
#endif
}

ft_anchor
ft_clock_anchor(ft_clock *clock)
{
    ft_anchor a = {0, 0, 0};
    if (clock->use_cycles) {
        /* An interrupt, a migration or a cache miss inside a bracket widens
         * it: the tightest is kept, and the reads stop early once one is
         * within an eighth of the tightest seen. */
        a.width = INT64_MAX;
        int64_t good = clock->best_width + clock->best_width / 8;
        for (int i = 0; i < FT_ANCHOR_TRIES; i++) {
            int64_t before = ft_cycles();
            int64_t ns = ft_clock_now();
            int64_t after = ft_cycles();
            if (after >= before && after - before < a.width) {
                a.width = after - before;
                a.ns = ns;
                a.ticks = before + a.width / 2;
                if (a.width <= good) {
                    break;
                }
            }
        }
        if (a.width == INT64_MAX) {  /* the counter went back every time */
            a.ns = ft_clock_now();
            a.ticks = ft_cycles();
            a.width = 0;
        }
        else if (clock->best_width == 0 || a.width < clock->best_width) {
            clock->best_width = a.width > 0 ? a.width : 1;
        }
    }
    else {
        a.ns = ft_clock_now();
        a.ticks = a.ns;
    }
    if (clock->nanchors) {
        const ft_anchor *last = &clock->anchors[clock->nanchors - 1];
        /* Keep both fields increasing, whatever the counters did. */
        if (a.ticks <= last->ticks || a.ns < last->ns) {
            return *last;
        }
    }
    if (clock->nanchors == clock->cap) {
        size_t cap = clock->cap ? clock->cap * 2 : 64;
        ft_anchor *grown = realloc(clock->anchors, cap * sizeof(ft_anchor));
        if (grown == NULL) {
            return clock->nanchors ? clock->anchors[clock->nanchors - 1] : a;
        }
        clock->anchors = grown;
        clock->cap = cap;
    }
    clock->anchors[clock->nanchors++] = a;
    return a;
}

int
ft_clock_start(ft_clock *clock, int use_cycles)
{
    ft_clock_free(clock);
    clock->use_cycles = use_cycles;
    ft_clock_anchor(clock);
    ft_clock_note_boottime(clock, 0);
    return clock->nanchors ? 0 : -1;
}

void
ft_clock_note_boottime(ft_clock *clock, int at_stop)
{
#ifdef CLOCK_BOOTTIME
    /* The tightest of several bracketed reads: a preemption between two
     * reads would skew the pair by as long as it lasted. */
    ft_boot_pair best = {0, 0};
    int64_t best_gap = INT64_MAX;
    for (int i = 0; i < FT_ANCHOR_TRIES; i++) {
        struct timespec ts;
        int64_t before = ft_clock_now();
        if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0) {
            return;
        }
        int64_t after = ft_clock_now();
        if (after - before < best_gap) {
            best_gap = after - before;
            best.boot_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
            /* BOOTTIME is never behind MONOTONIC: where they are equal
             * (no suspend yet), the midpoint may be, by half the gap. */
            best.mono_ns = before + best_gap / 2;
            if (best.mono_ns > best.boot_ns) {
                best.mono_ns = best.boot_ns;
            }
        }
    }
    if (at_stop && clock->nboot >= 1) {
        /* The same offset as at start unless it moved by more than the
         * reads can tell (a suspend): else converting times after this
         * pair would shift them by the reads' noise. */
        int64_t was = clock->boot[0].boot_ns - clock->boot[0].mono_ns;
        int64_t moved = best.boot_ns - best.mono_ns - was;
        if (moved <= best_gap && moved >= -best_gap) {
            best.boot_ns = best.mono_ns + was;
        }
        clock->boot[1] = best;
        clock->nboot = 2;
    }
    else if (!at_stop) {
        clock->boot[0] = best;
        clock->nboot = 1;
    }
#else
    (void)clock;
    (void)at_stop;
#endif
}

void
ft_clock_wall_pair(int tries, int64_t *mono_ns, int64_t *wall_ns,
                   int64_t *width_ns)
{
    /* A preemption or an interrupt between the reads widens one bracket:
     * the tightest is kept. */
    int64_t best_width = INT64_MAX, best_mono = 0, best_wall = 0;
    for (int i = 0; i < tries || best_width == INT64_MAX; i++) {
        struct timespec ts;
        int64_t before = ft_clock_now();
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t after = ft_clock_now();
        if (after - before < best_width) {
            best_width = after - before;
            best_mono = before + best_width / 2;
            best_wall = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
        }
    }
    *mono_ns = best_mono;
    *wall_ns = best_wall;
    *width_ns = best_width;
}

int64_t
ft_clock_width_ns(const ft_clock *clock, size_t i)
{
    if (!clock->use_cycles || i >= clock->nanchors) {
        return 0;
    }
    const ft_anchor *first = &clock->anchors[0];
    const ft_anchor *last = &clock->anchors[clock->nanchors - 1];
    int64_t dticks = last->ticks - first->ticks, dns = last->ns - first->ns;
    if (dticks <= 0) {
        dticks = ft_cycles() - first->ticks;
        dns = ft_clock_now() - first->ns;
    }
    if (dticks <= 0 || dns <= 0) {
        return clock->anchors[i].width;
    }
    return (int64_t)((long double)clock->anchors[i].width * dns / dticks + 0.5L);
}

void
ft_clock_free(ft_clock *clock)
{
    free(clock->anchors);
    memset(clock, 0, sizeof(*clock));
}

int
ft_clock_copy(ft_clock *dst, const ft_clock *src)
{
    *dst = *src;
    dst->anchors = malloc((src->nanchors ? src->nanchors : 1)
                          * sizeof(ft_anchor));
    if (dst->anchors == NULL) {
        memset(dst, 0, sizeof(*dst));
        return -1;
    }
    memcpy(dst->anchors, src->anchors, src->nanchors * sizeof(ft_anchor));
    dst->cap = src->nanchors ? src->nanchors : 1;
    return 0;
}

#ifdef __SIZEOF_INT128__
/* Makes cursor describe the segment lo..hi, for ft_clock_convert(): span
 * and dns below 2**62, so that dt * whole and the sum fit. */
static void
cursor_set_segment(ft_clock_cursor *c, const ft_anchor *lo,
                   const ft_anchor *hi)
{
    c->lo_ticks = lo->ticks;
    c->hi_ticks = hi->ticks;
    c->lo_ns = lo->ns;
    c->span = (uint64_t)(hi->ticks - lo->ticks);
    uint64_t dns = (uint64_t)(hi->ns - lo->ns);
    c->whole = dns / c->span;
    c->rem = dns % c->span;
    c->frac = (uint64_t)(((unsigned __int128)c->rem << 64) / c->span);
    c->ready = 1;
}
#endif

int64_t
ft_clock_to_ns(const ft_clock *clock, int64_t ticks, ft_clock_cursor *cursor)
{
    if (clock == NULL || !clock->use_cycles || clock->nanchors == 0) {
        return ticks;
    }
    const ft_anchor *a = clock->anchors;
    size_t n = clock->nanchors;
    if (n == 1 || ticks <= a[0].ticks) {
        /* Before the first anchor (cannot happen for a record). */
        return a[0].ns;
    }
    size_t i = cursor->segment < n - 1 ? cursor->segment : n - 2;
    if (a[i].ticks > ticks) {
        i = 0;
    }
    while (i + 2 < n && a[i + 1].ticks < ticks) {
        i++;
    }
    cursor->segment = i;
    cursor->ready = 0;
    /* Beyond the last anchor this extrapolates along the last segment:
     * only records after stop get there, and they are discarded. */
    const ft_anchor *lo = &a[i], *hi = &a[i + 1];
    /* Differences in 128 bits (or long double): anchors given to the test
     * entry point may span more than int64, a real clock's never do. */
#ifdef __SIZEOF_INT128__
    __int128 dt = (__int128)ticks - lo->ticks, span = (__int128)hi->ticks - lo->ticks;
    __int128 dns = (__int128)hi->ns - lo->ns;
    __int128 big = (__int128)1 << 62;
    __int128 v;
    if (dt >= 0 && dt <= span && span > 0 && span < big && dns >= 0
        && dns < big) {
        cursor_set_segment(cursor, lo, hi);
        return ft_clock_convert(clock, ticks, cursor);
    }
    if (dt < big && dns < big) {
        v = lo->ns + dt * dns / span;
    }
    else {
        v = lo->ns + (__int128)((long double)dt / (long double)span * (long double)dns);
    }
    return v > INT64_MAX ? INT64_MAX : v < INT64_MIN ? INT64_MIN : (int64_t)v;
#else
    long double frac = ((long double)ticks - lo->ticks) / ((long double)hi->ticks - lo->ticks);
    long double v = lo->ns + frac * ((long double)hi->ns - lo->ns);
    return v >= 9.2233720368547758e18L ? INT64_MAX
           : v <= -9.2233720368547758e18L ? INT64_MIN : (int64_t)v;
#endif
}
