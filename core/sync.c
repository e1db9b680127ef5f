#include "core/sync.h"

#include <errno.h>
#include <linux/futex.h>
#include <time.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

void weft__futex_wait(_Atomic uint32_t *word, uint32_t expected) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

bool weft__futex_wait_ns(_Atomic uint32_t *word, uint32_t expected, uint64_t ns) {
  struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
  long rc = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
  return !(rc == -1 && errno == ETIMEDOUT);
}

void weft__futex_wake(_Atomic uint32_t *word, int count) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE_PRIVATE, count, NULL, NULL, 0);
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
