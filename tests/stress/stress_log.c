/* weft_set_log swapped while threads log: every call of a hook sees the user
 * it was installed with (never a new fn with an old user), and once
 * weft_set_log returns no call of the previous hook is still running (so
 * its user may be freed). Plain main(): run under TSan too. */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/log.h"

enum { THREADS = 2, SWAPS = 500 };

typedef struct hook_state {
  int tag;               /* the hook checks it was handed its own state */
  _Atomic int inside;    /* calls of the hook running now */
  _Atomic uint64_t seen; /* messages it received */
} hook_state;

static _Atomic int failed;
static _Atomic int stop;

static void fail(const char *what) {
  if (!atomic_exchange(&failed, 1)) fprintf(stderr, "stress_log: %s\n", what);
}

static void hook_a(void *user, int level, const char *msg) {
  hook_state *s = user;
  (void)level, (void)msg;
  atomic_fetch_add(&s->inside, 1);
  if (s->tag != 'a') fail("hook a received another hook's user");
  atomic_fetch_add(&s->seen, 1);
  atomic_fetch_sub(&s->inside, 1);
}

static void hook_b(void *user, int level, const char *msg) {
  hook_state *s = user;
  (void)level, (void)msg;
  atomic_fetch_add(&s->inside, 1);
  if (s->tag != 'b') fail("hook b received another hook's user");
  atomic_fetch_add(&s->seen, 1);
  atomic_fetch_sub(&s->inside, 1);
}

static void *logger(void *arg) {
  (void)arg;
  uint64_t i = 0;
  while (!atomic_load(&stop)) {
    WEFT_LOGF(WEFT_LOG_INFO, "message %llu", (unsigned long long)i++);
    if (i % 64 == 0) sched_yield(); /* leaves the swapping thread some of a small machine */
  }
  return NULL;
}

int main(int argc, char **argv) {
  int swaps = argc > 1 ? atoi(argv[1]) : SWAPS;
  hook_state a = {.tag = 'a'}, b = {.tag = 'b'};
  weft_set_log(hook_a, &a, WEFT_LOG_INFO);
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, logger, NULL)) {
      fprintf(stderr, "stress_log: pthread_create failed\n");
      return 1;
    }
  for (int k = 0; k < swaps && !atomic_load(&failed); k++) {
    bool to_b = k % 2 == 0;
    weft_set_log(to_b ? hook_b : hook_a, to_b ? (void *)&b : (void *)&a, WEFT_LOG_INFO);
    hook_state *old = to_b ? &a : &b, *now = to_b ? &b : &a;
    if (atomic_load(&old->inside) != 0) fail("the previous hook still ran after weft_set_log");
    /* The next swap comes once the new hook has heard from a logger: every
     * swap happens while messages go through the hook being replaced. */
    uint64_t seen = atomic_load(&now->seen);
    while (atomic_load(&now->seen) == seen && !atomic_load(&failed)) sched_yield();
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  weft_set_log(NULL, NULL, WEFT_LOG_WARN);
  if (atomic_load(&failed)) return 1;
  if (!atomic_load(&a.seen) || !atomic_load(&b.seen)) {
    fprintf(stderr, "stress_log: a hook never ran (a %llu, b %llu)\n", (unsigned long long)a.seen,
            (unsigned long long)b.seen);
    return 1;
  }
  printf("stress_log: %d swaps under %d logging threads; %llu + %llu messages\n", swaps, THREADS,
         (unsigned long long)a.seen, (unsigned long long)b.seen);
  return 0;
}
