/* Hunting instrumentation (core/hunt.h). Built only with -DWEFT_HUNT=ON. */
#include "core/hunt.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/sync.h"

_Atomic uint64_t weft__hunt_hits[64];
_Atomic uint64_t weft__hunt_dropped;

/* The settings (core/config.c reads the variables), copied once so that a
 * hunt point costs one load of a plain int; the copy also registers the
 * verbose report with atexit exactly once. */
static _Atomic int ready_state; /* 0: unread, 1: being read, 2: read */
static int chaos_n, delay_site = -1, delay_us, delay_p, drop_kind, drop_every;
static int64_t park_ms = -1;
static bool verbose;

static void report(void) {
  fprintf(stderr,
          "weft hunt: dropped %" PRIu64 " notifications; hits:", atomic_load(&weft__hunt_dropped));
  for (int i = 0; i < 64; i++) {
    uint64_t n = atomic_load(&weft__hunt_hits[i]);
    if (n) fprintf(stderr, " %d:%" PRIu64, i, n);
  }
  fputc('\n', stderr);
}

static void settings(void) {
  int s = atomic_load_explicit(&ready_state, memory_order_acquire);
  if (s == 2) return;
  s = 0;
  if (!atomic_compare_exchange_strong(&ready_state, &s, 1)) {
    while (atomic_load_explicit(&ready_state, memory_order_acquire) != 2) sched_yield();
    return;
  }
  const weft_config_hunt *h = weft_config_hunting();
  chaos_n = h->chaos;
  delay_site = h->delay_site;
  delay_us = h->delay_us;
  delay_p = h->delay_p;
  park_ms = h->park_ms;
  drop_kind = h->drop_kind;
  drop_every = h->drop_every;
  verbose = h->verbose;
  if (verbose) atexit(report);
  atomic_store_explicit(&ready_state, 2, memory_order_release);
}

/* xorshift64, one state per thread, seeded from the clock and the thread. */
static uint64_t rnd(void) {
  static _Thread_local uint64_t x;
  if (!x) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    x = ((uint64_t)ts.tv_nsec * UINT64_C(0x9e3779b97f4a7c15)) ^ (uint64_t)(uintptr_t)&x;
    x |= 1;
  }
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return x;
}

void weft__hunt_point(int site) {
  settings();
  if (site == delay_site) {
    if (delay_p > 1 && (rnd() >> 8) % (uint64_t)delay_p) return;
    atomic_fetch_add_explicit(&weft__hunt_hits[site & 63], 1, memory_order_relaxed);
    usleep((useconds_t)delay_us);
    return;
  }
  if (chaos_n <= 0) return;
  uint64_t x = rnd();
  if ((x >> 8) % (uint64_t)chaos_n) return;
  atomic_fetch_add_explicit(&weft__hunt_hits[site & 63], 1, memory_order_relaxed);
  switch ((x >> 40) % 10) {
  case 0:
  case 1:
  case 2:
  case 3:
  case 4:
    sched_yield();
    break;
  case 5:
  case 6:
  case 7:
    for (uint64_t i = (x >> 20) % 3000; i; i--) weft__cpu_relax();
    break;
  default:
    usleep((useconds_t)(1 + (x >> 24) % 300));
    break;
  }
}

uint64_t weft__hunt_park_ns(uint64_t dflt) {
  settings();
  return park_ms < 0 ? dflt : (uint64_t)park_ms * UINT64_C(1000000);
}

bool weft__hunt_drop(int kind, _Atomic uint32_t *sleepers) {
  static _Atomic uint64_t seen;
  settings();
  if (kind != drop_kind) return false;
  /* Only a notification that would wake someone can be lost. */
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(sleepers, memory_order_relaxed) == 0) return false;
  if (atomic_fetch_add_explicit(&seen, 1, memory_order_relaxed) % (uint64_t)drop_every)
    return false;
  atomic_fetch_add_explicit(&weft__hunt_dropped, 1, memory_order_relaxed);
  return true;
}
