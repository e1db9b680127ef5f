/* weft_eventcount (core/sync.h): prepare / recheck / wait-or-cancel against
 * make-true / notify. The sleepers count, when notify bumps the epoch, who
 * notify and notify_one wake, timed and owed waits, and the race of a notify
 * with a prepare (no lost wake-up). */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/sync.h"

TestSuite(eventcount, .timeout = 60);

#define SECONDS(s) ((uint64_t)(s)*UINT64_C(1000000000))

static weft_eventcount fresh(void) {
  weft_eventcount ec;
  atomic_init(&ec.epoch, 0);
  atomic_init(&ec.sleepers, 0);
  return ec;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

Test(eventcount, prepare_counts_a_sleeper_and_cancel_uncounts_it) {
  weft_eventcount ec = fresh();
  uint32_t k1 = weft__ec_prepare(&ec), k2 = weft__ec_prepare(&ec);
  cr_assert_eq(k1, WEFT_EC_PARKED, "prepare marks the epoch PARKED");
  cr_assert_eq(k2, WEFT_EC_PARKED, "prepare does not move the count");
  cr_assert_eq(atomic_load(&ec.sleepers), 2);
  weft__ec_cancel(&ec);
  cr_assert_eq(atomic_load(&ec.sleepers), 1);
  weft__ec_cancel(&ec);
  cr_assert_eq(atomic_load(&ec.sleepers), 0);
}

Test(eventcount, a_notify_with_nobody_prepared_leaves_the_epoch) {
  weft_eventcount ec = fresh();
  weft__ec_notify(&ec);
  weft__ec_notify_one(&ec);
  cr_assert_eq(atomic_load(&ec.epoch), 0, "no sleeper: no epoch bump, no futex wake");
}

Test(eventcount, a_notify_after_prepare_makes_the_wait_return_at_once) {
  weft_eventcount ec = fresh();
  uint32_t k = weft__ec_prepare(&ec);
  weft__ec_notify(&ec);
  cr_assert_eq(atomic_load(&ec.epoch), k + 1);
  weft__ec_wait(&ec, k); /* the epoch moved: the futex does not block */
  cr_assert_eq(atomic_load(&ec.sleepers), 0, "a wait uncounts its sleeper");
  k = weft__ec_prepare(&ec);
  weft__ec_notify_one(&ec);
  cr_assert_eq(atomic_load(&ec.epoch), k + 1);
  cr_assert(weft__ec_wait_ns(&ec, k, SECONDS(10)), "a notified timed wait does not time out");
  cr_assert_eq(atomic_load(&ec.sleepers), 0);
}

static uint64_t wakes_made(void) {
  uint64_t waits, wakes;
  weft__futex_counts(&waits, &wakes);
  return wakes;
}

/* The wake storm issue 14 found: a notifier woke while a sleeper count was
 * non-zero, and only the sleeper, once back on a CPU, decremented it. */
Test(eventcount, only_the_first_notify_after_a_prepare_makes_a_wake_system_call) {
  weft_eventcount ec = fresh();
  uint32_t k = weft__ec_prepare(&ec);
  uint64_t w0 = wakes_made();
  weft__ec_notify(&ec);
  cr_assert_eq(wakes_made() - w0, 1);
  cr_assert_eq(atomic_load(&ec.sleepers), 1, "the sleeper has not run yet");
  for (int i = 0; i < 100; i++) {
    weft__ec_notify(&ec);
    weft__ec_notify_one(&ec);
  }
  cr_assert_eq(wakes_made() - w0, 1, "notifies before the sleeper prepares again wake nobody");
  weft__ec_wait(&ec, k); /* the epoch moved: returns at once */
  k = weft__ec_prepare(&ec);
  weft__ec_cancel(&ec);
  weft__ec_notify(&ec); /* a cancelled prepare costs the next notifier one wake */
  weft__ec_notify(&ec);
  cr_assert_eq(wakes_made() - w0, 2);
  (void)k;
}

Test(eventcount, a_timed_wait_without_a_notify_times_out) {
  weft_eventcount ec = fresh();
  uint32_t k = weft__ec_prepare(&ec);
  double t0 = now_s();
  cr_assert_not(weft__ec_wait_ns(&ec, k, UINT64_C(20000000)));
  cr_assert_geq(now_s() - t0, 0.019);
  cr_assert_eq(atomic_load(&ec.sleepers), 0);
}

/* ---- parked threads ---- */

typedef struct waiter {
  weft_eventcount *ec;
  _Atomic pid_t tid;
  _Atomic int woken;
  pthread_t th;
} waiter;

static void *wait_once(void *arg) {
  waiter *w = arg;
  atomic_store(&w->tid, gettid());
  uint32_t k = weft__ec_prepare(w->ec);
  weft__ec_wait(w->ec, k);
  atomic_store(&w->woken, 1);
  return NULL;
}

/* True once thread |tid| sleeps in the kernel: in a futex wait, since
 * nothing else between its prepare and its wait can block. */
static bool sleeping(pid_t tid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/self/task/%d/stat", (int)tid);
  FILE *f = fopen(path, "r");
  if (!f) return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = 0;
  const char *p = strrchr(buf, ')');
  return p && p[1] == ' ' && p[2] == 'S';
}

static void start_parked(waiter *w, int n, weft_eventcount *ec) {
  for (int i = 0; i < n; i++) {
    w[i].ec = ec;
    atomic_init(&w[i].tid, 0);
    atomic_init(&w[i].woken, 0);
    cr_assert_eq(pthread_create(&w[i].th, NULL, wait_once, &w[i]), 0);
  }
  double t0 = now_s();
  for (int i = 0; i < n; i++) {
    while (!atomic_load(&w[i].tid) || !sleeping(atomic_load(&w[i].tid))) {
      cr_assert_lt(now_s() - t0, 20.0, "waiter %d never parked", i);
      usleep(1000);
    }
  }
  cr_assert_eq(atomic_load(&ec->sleepers), (uint32_t)n);
}

static int count_woken(waiter *w, int n) {
  int c = 0;
  for (int i = 0; i < n; i++) c += atomic_load(&w[i].woken);
  return c;
}

static void await_woken(waiter *w, int n, int want) {
  double t0 = now_s();
  while (count_woken(w, n) < want) {
    cr_assert_lt(now_s() - t0, 20.0, "%d of %d waiters woken, %d expected", count_woken(w, n), n,
                 want);
    usleep(1000);
  }
}

Test(eventcount, notify_wakes_every_parked_waiter) {
  weft_eventcount ec = fresh();
  waiter w[3];
  start_parked(w, 3, &ec);
  weft__ec_notify(&ec);
  await_woken(w, 3, 3);
  for (int i = 0; i < 3; i++) pthread_join(w[i].th, NULL);
  cr_assert_eq(atomic_load(&ec.sleepers), 0);
}

Test(eventcount, notify_one_wakes_one_parked_waiter) {
  weft_eventcount ec = fresh();
  waiter w[2];
  start_parked(w, 2, &ec);
  weft__ec_notify_one(&ec);
  await_woken(w, 2, 1);
  usleep(50000);
  cr_assert_eq(count_woken(w, 2), 1, "notify_one woke both waiters");
  cr_assert_eq(atomic_load(&ec.sleepers), 1, "the other is still counted");
  weft__ec_notify_one(&ec);
  await_woken(w, 2, 2);
  for (int i = 0; i < 2; i++) pthread_join(w[i].th, NULL);
  cr_assert_eq(atomic_load(&ec.sleepers), 0);
}

/* ---- the race of notify with prepare ---- */

enum { ROUNDS = 3000 };

static weft_eventcount race_ec;
static _Atomic uint32_t turn, ack;
static _Atomic int lost;

/* Waits for each turn by the protocol: prepare, recheck, wait or cancel. A
 * timed wait that expires with its turn already given lost the wake-up. */
static void *consumer(void *arg) {
  (void)arg;
  for (uint32_t r = 1; r <= ROUNDS; r++) {
    while (atomic_load_explicit(&turn, memory_order_acquire) < r) {
      uint32_t k = weft__ec_prepare(&race_ec);
      if (atomic_load_explicit(&turn, memory_order_acquire) >= r) {
        weft__ec_cancel(&race_ec);
        break;
      }
      if (!weft__ec_wait_ns(&race_ec, k, SECONDS(5)) &&
          atomic_load_explicit(&turn, memory_order_acquire) >= r) {
        atomic_fetch_add(&lost, 1);
      }
    }
    atomic_store_explicit(&ack, r, memory_order_release);
  }
  return NULL;
}

Test(eventcount, a_notify_racing_a_prepare_is_never_lost) {
  race_ec = fresh();
  atomic_store(&turn, 0);
  atomic_store(&ack, 0);
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, consumer, NULL), 0);
  for (uint32_t r = 1; r <= ROUNDS; r++) {
    /* Vary the moment of the notify against the consumer's prepare. */
    for (uint32_t spin = r % 64; spin; spin--) weft__cpu_relax();
    atomic_store_explicit(&turn, r, memory_order_release);
    if (r % 2)
      weft__ec_notify(&race_ec);
    else
      weft__ec_notify_one(&race_ec);
    while (atomic_load_explicit(&ack, memory_order_acquire) < r) sched_yield();
  }
  pthread_join(th, NULL);
  cr_assert_eq(atomic_load(&lost), 0, "%d wake-ups lost", atomic_load(&lost));
  cr_assert_eq(atomic_load(&race_ec.sleepers), 0);
}

/* ---- owed waits ---- */

static int owed_calls;
static bool always_owed(void *arg, int pass) {
  (void)arg;
  (void)pass;
  owed_calls++;
  return true;
}
static bool never_owed(void *arg, int pass) {
  (void)arg;
  (void)pass;
  owed_calls++;
  return false;
}

Test(eventcount, an_owed_wait_tells_woken_from_timed_out_from_lost) {
  weft_eventcount ec = fresh();
  uint32_t k = weft__ec_prepare(&ec);
  weft__ec_notify(&ec);
  owed_calls = 0;
  cr_assert_eq(weft__ec_wait_owed(&ec, k, SECONDS(5), always_owed, NULL), WEFT_PARK_WOKEN);
  cr_assert_eq(owed_calls, 0, "a woken wait asks nothing");

  k = weft__ec_prepare(&ec);
  cr_assert_eq(weft__ec_wait_owed(&ec, k, UINT64_C(1000000), never_owed, NULL),
               WEFT_PARK_TIMED_OUT);
  cr_assert_eq(owed_calls, 1, "nothing owed: no grace park");

  owed_calls = 0;
  k = weft__ec_prepare(&ec);
  double t0 = now_s();
  cr_assert_eq(weft__ec_wait_owed(&ec, k, UINT64_C(1000000), always_owed, NULL), WEFT_PARK_LOST);
  cr_assert_eq(owed_calls, 2, "asked before and after the grace park");
  cr_assert_geq(now_s() - t0, 0.099, "the grace park lasted WEFT_PARK_GRACE_NS");
  cr_assert_eq(atomic_load(&ec.sleepers), 0);
}

/* ---- adaptive spinning ---- */

Test(spin, a_spin_that_finds_work_grows_to_the_cap_and_one_that_does_not_halves) {
  weft_spin s;
  weft__spin_init(&s, 128);
  cr_assert_eq(weft__spin_budget(&s), 128, "starts at the cap");
  weft__spin_learn(&s, 128, false);
  cr_assert_eq(weft__spin_budget(&s), 64);
  weft__spin_learn(&s, 64, false);
  weft__spin_learn(&s, 32, false);
  cr_assert_eq(weft__spin_budget(&s), 16);
  weft__spin_learn(&s, 16, true);
  cr_assert_eq(weft__spin_budget(&s), 48, "2 x 16 + 16");
  weft__spin_learn(&s, 48, true);
  cr_assert_eq(weft__spin_budget(&s), 112);
  weft__spin_learn(&s, 112, true);
  cr_assert_eq(weft__spin_budget(&s), 128, "never past the cap");
}

Test(spin, at_zero_every_sixteenth_wait_probes_and_a_paying_probe_reenables_spinning) {
  weft_spin s;
  weft__spin_init(&s, 128);
  for (uint32_t b = 128; b; b /= 2) weft__spin_learn(&s, b, false);
  int probes = 0;
  for (int i = 0; i < 64; i++) {
    uint32_t b = weft__spin_budget(&s);
    if (b) {
      cr_assert_eq(b, 16);
      probes++;
    }
    weft__spin_learn(&s, b, false);
  }
  cr_assert_eq(probes, 4, "one wait in 16 probes");
  uint32_t b;
  while (!(b = weft__spin_budget(&s))) weft__spin_learn(&s, b, false);
  weft__spin_learn(&s, b, true);
  cr_assert_eq(weft__spin_budget(&s), 48, "a probe that paid lets the next wait spin");
}

Test(spin, a_cap_of_zero_never_spins) {
  weft_spin s;
  weft__spin_init(&s, 0);
  for (int i = 0; i < 100; i++) {
    uint32_t b = weft__spin_budget(&s);
    cr_assert_eq(b, 0);
    weft__spin_learn(&s, b, true);
  }
}
