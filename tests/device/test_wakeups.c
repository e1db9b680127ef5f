/* The wake-up accounting (wakeups_recovered, streams_recovered): a correct
 * program never counts. Runs in both scheduler modes (WEFT_SCHEDULER). The
 * cases that need a lost or delayed notification are in tests/hunt/ (a
 * hunting build). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

static weft_status sleep_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint32_t ms;
  memcpy(&ms, ctx->scalars, sizeof(ms));
  struct timespec ts = {ms / 1000u, (long)(ms % 1000u) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
  return NULL;
}

/* The pool wakes the scheduler after a task someone waits for and when it
 * leaves a stream, not after every task: a task completed before a kernel
 * longer than the scheduler's 100 ms park is no wake-up owed, and a timed
 * park that finds it is no recovery. */
Test(wakeups, a_long_kernel_after_a_completed_task_is_no_recovery, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_streams = 1;
  env_open(&e);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "sleep", sleep_kernel, NULL, &k));
  const uint32_t one[3] = {1, 1, 1};
  for (int round = 0; round < 2; round++) {
    uint32_t short_ms = 20, long_ms = 350;
    EXPECT_OK(weft_launch(e.dev, 0, k, one, one, NULL, 0, &short_ms, sizeof(short_ms)));
    EXPECT_OK(weft_launch(e.dev, 0, k, one, one, NULL, 0, &long_ms, sizeof(long_ms)));
    EXPECT_OK(weft_sync(e.dev, 0));
  }
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.launches_run, 4);
  cr_assert_eq(s.wakeups_recovered, 0, "a correct run counted %" PRIu64 " recovered wake-ups",
               s.wakeups_recovered);
  cr_assert_eq(s.streams_recovered, 0, "a correct run counted %" PRIu64 " recovered streams",
               s.streams_recovered);
  env_close(&e);
}
