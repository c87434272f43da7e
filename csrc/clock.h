/* Timestamps: nanoseconds on the CLOCK_MONOTONIC base, the same base as
 * time.monotonic_ns(), so records compare directly with start/stop times. */
#ifndef FT_CLOCK_H
#define FT_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t
ft_clock_now(void)
{
    struct timespec ts;
    /* CLOCK_MONOTONIC is read through the vDSO: no system call. */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

#endif /* FT_CLOCK_H */
