/* The wake-up protocol under the hunting build (-DWEFT_HUNT=ON, core/hunt.h):
 * a delay at one site of the protocol reproduces an interleaving at will.
 * Each test sets the hunting variables before its device opens (Criterion
 * runs every test in its own process, and a hunting build reads them once).
 * Built only with WEFT_HUNT (tests/CMakeLists.txt). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include <weft/weft.h>

#include "core/hunt.h"
#include "scheduler/device_internal.h"
#include "support/asan_criterion.h"
#include "support/device_env.h"

static const uint32_t one3[3] = {1, 1, 1};
static _Atomic int ran[4];

static weft_status mark_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint32_t i;
  memcpy(&i, ctx->scalars, sizeof(i));
  atomic_store(&ran[i], 1);
  return NULL;
}

static void nap_ms(unsigned ms) {
  struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static void expect_no_recovery(weft_device *dev) {
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(dev, &s));
  cr_assert_eq(s.wakeups_recovered, 0, "wakeups_recovered is %" PRIu64, s.wakeups_recovered);
  cr_assert_eq(s.streams_recovered, 0, "streams_recovered is %" PRIu64, s.streams_recovered);
}

/* Issue 12, item 8. Combining mode: a client's pass that finds the stream
 * still RUNNING leaves its batch for the combining thread, which the pool
 * wakes when it leaves the stream. The pool thread is held (site 22) in the
 * middle of leaving; once the combining thread has taken that wake-up and
 * parked again, the client launches. Had the pool raised before publishing
 * IDLE, nobody would flush the batch until the combining thread's timed
 * park, and that park counts a lost wake-up. */
Test(hunt, a_combining_pass_leaves_no_batch_behind_on_a_stream_going_idle, .timeout = 60) {
  /* The window (100 ms) ends before the combining thread's next timed park
   * does (400 ms): that park, not a periodic pass, meets the batch. */
  setenv("WEFT_DELAY_SITE", "22", 1);
  setenv("WEFT_DELAY_US", "100000", 1);
  setenv("WEFT_PARK_MS", "400", 1);
  env e;
  env_options(&e);
  e.opts.max_streams = 1;
  e.opts.scheduler = WEFT_SCHEDULER_COMBINING;
  env_open(&e);
  weft_device *dev = e.dev;
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(dev, "mark", mark_kernel, NULL, &k));
  uint32_t i0 = 0, i1 = 1;
  EXPECT_OK(weft_launch(dev, 0, k, one3, one3, NULL, 0, &i0, sizeof(i0)));
  while (!atomic_load(&ran[0])) sched_yield();
  /* The pool thread is in its window; the wake-up it raised (if it raised)
   * has been taken and the combining thread parked again. */
  while (atomic_load(&weft__hunt_hits[22]) == 0) sched_yield();
  while (atomic_load(&dev->loop.wake.raised)) sched_yield();
  nap_ms(20);
  while (atomic_load(&dev->loop.wake.raised) || atomic_load(&dev->loop.inbox.ec.sleepers) == 0) sched_yield();
  EXPECT_OK(weft_launch(dev, 0, k, one3, one3, NULL, 0, &i1, sizeof(i1)));
  while (!atomic_load(&ran[1])) sched_yield();
  expect_no_recovery(dev);
  env_close(&e);
}

/* A pool thread whose park times out while the owner is between pushing
 * tasks and queueing the stream (site 30, longer than the park) finds a
 * stream IDLE with tasks: a transition in progress, not a stranded stream.
 * Its grace park sees the owner finish. */
Test(hunt, a_submission_in_flight_is_no_stranded_stream, .timeout = 60) {
  setenv("WEFT_DELAY_SITE", "30", 1);
  setenv("WEFT_DELAY_US", "40000", 1);
  setenv("WEFT_PARK_MS", "2", 1);
  env e;
  env_options(&e);
  e.opts.max_streams = 1;
  env_open(&e);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "mark", mark_kernel, NULL, &k));
  for (uint32_t i = 0; i < 4; i++) {
    EXPECT_OK(weft_launch(e.dev, 0, k, one3, one3, NULL, 0, &i, sizeof(i)));
    EXPECT_OK(weft_sync(e.dev, 0));
  }
  cr_assert_geq(atomic_load(&weft__hunt_hits[30]), 4);
  expect_no_recovery(e.dev);
  env_close(&e);
}

/* The scheduler thread's park times out while a client is between pushing
 * a command and notifying (site 11, longer than the park): the command is
 * there, its wake-up late, not lost. */
Test(hunt, a_late_notification_is_no_lost_wake_up, .timeout = 60) {
  setenv("WEFT_DELAY_SITE", "11", 1);
  setenv("WEFT_DELAY_US", "40000", 1);
  setenv("WEFT_PARK_MS", "2", 1);
  env e;
  env_options(&e);
  e.opts.max_streams = 1;
  e.opts.scheduler = WEFT_SCHEDULER_THREAD;
  env_open(&e);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "mark", mark_kernel, NULL, &k));
  for (uint32_t i = 0; i < 4; i++) {
    EXPECT_OK(weft_launch(e.dev, 0, k, one3, one3, NULL, 0, &i, sizeof(i)));
    EXPECT_OK(weft_sync(e.dev, 0));
  }
  cr_assert_geq(atomic_load(&weft__hunt_hits[11]), 8);
  expect_no_recovery(e.dev);
  env_close(&e);
}
