/* stress_config: threads racing core/config's first read. A plain main() so
 * that it runs under ThreadSanitizer (and ASan, and plainly).
 *
 *   stress_config [rounds]     (default 500)
 *
 * Each round forgets the settings (weft__config_reload, from the main thread
 * while no other runs), then starts THREADS threads that meet at a barrier
 * and read every setting at once: exactly one parses, the others must see
 * its complete result (the values set below), never a half-written one.
 *
 * Exit status 0 on success; 1 with a message on the first failure. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "core/config.h"

enum { THREADS = 8 };

static pthread_barrier_t start;
static _Atomic int failed;

static void check(bool ok, const char *what) {
  if (!ok && !atomic_exchange(&failed, 1)) fprintf(stderr, "stress_config: %s\n", what);
}

static void *reader(void *arg) {
  (void)arg;
  pthread_barrier_wait(&start);
  const weft_config_hunt *h = weft_config_hunting();
  check(h->delay_us == 4321 && h->chaos == 7 && h->drop_kind != 0 && h->drop_every == 3,
        "a reader saw hunting settings other than those set");
  check(weft_config_log_level(NULL) == 3, "a reader saw another WEFT_LOG level");
  const char *d = weft_config_cuda_driver();
  check(d && !strcmp(d, "/stress/libcuda.so.1"), "a reader saw another WEFT_CUDA_DRIVER");
  weft_scheduler_mode m = WEFT_SCHEDULER_DEFAULT;
  weft_status st = weft_config_scheduler(&m);
  check(!st && m == WEFT_SCHEDULER_COMBINING, "a reader saw another WEFT_SCHEDULER");
  weft_error_free(st);
  return NULL;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 500;
  setenv("WEFT_DELAY_US", "4321", 1);
  setenv("WEFT_CHAOS", "7", 1);
  setenv("WEFT_HUNT_DROP", "inbox:3", 1);
  setenv("WEFT_LOG", "debug", 1);
  setenv("WEFT_CUDA_DRIVER", "/stress/libcuda.so.1", 1);
  setenv("WEFT_SCHEDULER", "combining", 1);
  for (int r = 0; r < rounds && !atomic_load(&failed); r++) {
    weft__config_reload();
    pthread_barrier_init(&start, NULL, THREADS);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
      if (pthread_create(&t[i], NULL, reader, NULL)) {
        fprintf(stderr, "stress_config: pthread_create failed\n");
        return 1;
      }
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    pthread_barrier_destroy(&start);
  }
  if (atomic_load(&failed)) return 1;
  printf("stress_config: %d rounds of %d racing first reads\n", rounds, THREADS);
  return 0;
}
