/* The trace clock (clock.h): which one, chosen once per process. */
#include "core/clock.h"

#include <stdio.h>
#include <string.h>

#include "core/config.h"

_Atomic int weft__clock_tsc = -1;

static bool kernel_clock_is_tsc(void) {
#if defined(__x86_64__)
  FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
  if (!f) return false;
  char name[32] = "";
  bool tsc = fgets(name, sizeof(name), f) && !strcmp(name, "tsc\n");
  fclose(f);
  return tsc;
#else
  return false;
#endif
}

void weft_clock_choose(void) {
  if (atomic_load_explicit(&weft__clock_tsc, memory_order_relaxed) >= 0) return;
  int tsc = !weft_config_trace_monotonic() && kernel_clock_is_tsc();
  int unset = -1; /* two first recordings at once choose the same */
  atomic_compare_exchange_strong_explicit(&weft__clock_tsc, &unset, tsc, memory_order_relaxed,
                                          memory_order_relaxed);
}
