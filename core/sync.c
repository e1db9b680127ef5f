#include "core/sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/futex.h>
#include <time.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "core/config.h"

/* Process-wide counts of futex system calls (relaxed; a system call costs
 * far more than the increment), read by weft-bench per operation. */
static _Atomic uint64_t futex_waits, futex_wakes;

void weft__futex_counts(uint64_t *waits, uint64_t *wakes) {
  *waits = atomic_load_explicit(&futex_waits, memory_order_relaxed);
  *wakes = atomic_load_explicit(&futex_wakes, memory_order_relaxed);
}

void weft__futex_wait(_Atomic uint32_t *word, uint32_t expected) {
  atomic_fetch_add_explicit(&futex_waits, 1, memory_order_relaxed);
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

bool weft__futex_wait_ns(_Atomic uint32_t *word, uint32_t expected, uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  atomic_fetch_add_explicit(&futex_waits, 1, memory_order_relaxed);
  long rc = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
  return !(rc == -1 && errno == ETIMEDOUT);
}

int weft__futex_wake(_Atomic uint32_t *word, int count) {
  atomic_fetch_add_explicit(&futex_wakes, 1, memory_order_relaxed);
  long n = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
  return n > 0 ? (int)n : 0;
}

void weft__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

void *weft__token_wait(weft_token *t) {
  /* A short spin catches answers that are already on their way; past it the
   * caller parks, so an oversubscribed machine is not burnt on spinning. */
  for (int i = 0; i < 256; i++) {
    if (atomic_load_explicit(&t->done, memory_order_acquire)) return t->result;
    weft__cpu_relax();
  }
  while (!atomic_load_explicit(&t->done, memory_order_acquire)) weft__futex_wait(&t->done, 0);
  return t->result;
}

weft_park weft__ec_wait_owed(weft_eventcount *ec, uint32_t k, uint64_t ns,
                             bool (*owed)(void *arg, int pass), void *arg) {
  WEFT_HUNT_POINT(3);
  if (weft__futex_wait_ns(&ec->epoch, k, ns) ||
      atomic_load_explicit(&ec->epoch, memory_order_acquire) != k) {
    atomic_fetch_sub_explicit(&ec->sleepers, 1, memory_order_relaxed);
    return WEFT_PARK_WOKEN;
  }
  /* Still a sleeper: a notify on its way bumps the epoch and wakes us. */
  bool stranded = owed(arg, 0);
  bool late = stranded && (weft__futex_wait_ns(&ec->epoch, k, WEFT_PARK_GRACE_NS) ||
                           atomic_load_explicit(&ec->epoch, memory_order_acquire) != k);
  atomic_fetch_sub_explicit(&ec->sleepers, 1, memory_order_relaxed);
  if (!stranded || late || !owed(arg, 1)) return WEFT_PARK_TIMED_OUT;
  return WEFT_PARK_LOST;
}

/* Under WEFT_STRICT_WAKEUPS a run that lost a wake-up fails, as a leak fails
 * an ASan run: the process exits with status 1 however the program ends,
 * even when the loss was recovered after its last look at the counters (at
 * close, say). */
static void strict_exit(void) {
  _exit(1);
}

bool weft__wakeup_lost_report(const char *what) {
  static _Atomic int reported;
  if (!weft_config_strict_wakeups() || atomic_exchange(&reported, 1)) return false;
  fprintf(stderr, "weft: WEFT_STRICT_WAKEUPS: a parked thread recovered a lost wake-up: %s\n",
          what);
  atexit(strict_exit);
  return true;
}
