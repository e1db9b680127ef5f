/* The trace clock (clock.c): the time-stamp counter where the kernel itself
 * keeps CLOCK_MONOTONIC on it (x86-64, clocksource "tsc": invariant and
 * synchronised across cores, or Linux would not use it), else
 * CLOCK_MONOTONIC in ns. On this VM rdtsc costs 13-20 ns of CPU against
 * 27-33 for clock_gettime, on a task that runs in about 150: stamps are
 * ticks, turned into ns when a trace is written (scheduler/trace.c). Chosen
 * once per process (weft_clock_choose), before the first recording starts;
 * WEFT_TRACE_CLOCK=monotonic keeps it off the TSC. Any thread. */
#ifndef WEFT_CORE_CLOCK_H
#define WEFT_CORE_CLOCK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

extern _Atomic int weft__clock_tsc; /* -1: not chosen yet; 1: the TSC; 0: CLOCK_MONOTONIC */

/* Chooses the clock, once (later calls do nothing). */
void weft_clock_choose(void);

static inline uint64_t weft_clock_monotonic_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

/* True when weft_clock_ticks counts TSC ticks (else ns). */
static inline bool weft_clock_is_tsc(void) {
  return atomic_load_explicit(&weft__clock_tsc, memory_order_relaxed) > 0;
}

static inline uint64_t weft_clock_ticks(void) {
#if defined(__x86_64__)
  if (__builtin_expect(weft_clock_is_tsc(), 1)) return __builtin_ia32_rdtsc();
#endif
  return weft_clock_monotonic_ns();
}

#endif
