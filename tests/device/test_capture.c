/* Capture and replay on the host backend: the state machine (every legal and
 * illegal transition), recording without running, replays equal to eager
 * runs with inputs refreshed in place, and each rule of the window: warm-up
 * keeps what it releases until begin, reservations inside are Forbidden and
 * doom the recording, no host sync inside, cleanup is a no-op, a failed or
 * skipped launch dooms it, abort gives everything back, destroy waits for
 * replays, isolation forces the sequential path, replays allocate nothing. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"
#include "support/uint_kernels.h"

static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, int line) {
  char text[1024] = "";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: got '%s'", line, text);
  if (needle)
    cr_assert_not_null(strstr(text, needle), "line %d: '%s' lacks '%s'", line, text, needle);
  weft_error_free(st);
}
#define EXPECT_KIND(st, kind, needle) expect_kind((st), (kind), (needle), __LINE__)

static weft_capture *prepare_on(weft_device *dev, weft_stream_id s) {
  weft_capture *cap = NULL;
  EXPECT_OK(weft_capture_prepare(dev, &s, 1, &cap));
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_PREPARED);
  return cap;
}

Test(state_machine, every_transition_out_of_order_fails_and_changes_nothing, .timeout = 60) {
  env e = env_new();
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "end is only allowed after begin");
  EXPECT_KIND(weft_capture_replay(cap), WEFT_ERR_GENERIC, "state: prepared");
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_PREPARED);
  EXPECT_OK(weft_capture_begin(cap));
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_RECORDING);
  EXPECT_KIND(weft_capture_begin(cap), WEFT_ERR_GENERIC, "state: recording");
  EXPECT_KIND(weft_capture_replay(cap), WEFT_ERR_GENERIC, "state: recording");
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_RECORDING);
  EXPECT_OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_READY);
  EXPECT_KIND(weft_capture_begin(cap), WEFT_ERR_GENERIC, "state: ready");
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "state: ready");
  EXPECT_OK(weft_capture_replay(cap)); /* an empty recording replays nothing */
  EXPECT_OK(weft_capture_abort(cap));
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_ABORTED);
  EXPECT_OK(weft_capture_abort(cap)); /* abort of an aborted capture: nothing to do */
  EXPECT_KIND(weft_capture_replay(cap), WEFT_ERR_GENERIC, "state: aborted");
  EXPECT_KIND(weft_capture_begin(cap), WEFT_ERR_GENERIC, "state: aborted");
  weft_capture_destroy(cap);
  /* Abort from prepared and from recording; destroy from every state. */
  cap = prepare_on(e.dev, 1);
  EXPECT_OK(weft_capture_abort(cap));
  weft_capture_destroy(cap);
  cap = prepare_on(e.dev, 1);
  EXPECT_OK(weft_capture_begin(cap));
  EXPECT_OK(weft_capture_abort(cap));
  weft_capture_destroy(cap);
  cap = prepare_on(e.dev, 1);
  weft_capture_destroy(cap); /* prepared */
  cap = prepare_on(e.dev, 1);
  EXPECT_OK(weft_capture_begin(cap));
  weft_capture_destroy(cap); /* recording */
  cr_assert_eq(stats_of(e.dev).captures_live, 0);
  env_close(&e);
}

Test(state_machine, bad_arguments_and_overlapping_windows_are_refused, .timeout = 60) {
  env e = env_new();
  weft_capture *cap = (void *)&e;
  weft_stream_id s[2] = {0, 4}; /* both fold onto slot 0 of 4 */
  EXPECT_KIND(weft_capture_prepare(NULL, s, 1, &cap), WEFT_ERR_INVALID_ARGUMENT, NULL);
  cr_assert_null(cap);
  EXPECT_KIND(weft_capture_prepare(e.dev, s, 0, &cap), WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_capture_prepare(e.dev, NULL, 1, &cap), WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_capture_prepare(e.dev, s, 1, NULL), WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_capture_begin(NULL), WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_capture_replay(NULL), WEFT_ERR_INVALID_ARGUMENT, NULL);
  cr_assert_eq(weft_capture_state_of(NULL), 0);
  weft_capture_destroy(NULL);
  EXPECT_OK(weft_capture_prepare(e.dev, s, 2, &cap));
  weft_capture *other = NULL;
  weft_stream_id s8 = 8;
  EXPECT_KIND(weft_capture_prepare(e.dev, &s8, 1, &other), WEFT_ERR_GENERIC,
              "already in a capture window");
  cr_assert_null(other);
  weft_capture_destroy(cap);
  EXPECT_OK(weft_capture_prepare(e.dev, &s8, 1, &other)); /* free again */
  weft_capture_destroy(other);
  env_close(&e);
}

/* y = x + 1; z = y + x on stream 0, around buffers given by the caller. */
static void step(weft_device *dev, const kernels *k, weft_buffer x, weft_buffer y, weft_buffer z) {
  add(dev, k, 0, x, y, 1, 0);
  sum(dev, k, 0, y, x, z, 0);
}

Test(replay, recording_runs_nothing_and_replays_match_eager_runs_with_fresh_inputs, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 0), z = make_buffer(e.dev, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  set(e.dev, &k, 0, x, 10, 0);
  step(e.dev, &k, x, y, z); /* warm-up, eager */
  expect_all(e.dev, 0, z, 21, "warm-up ran");
  EXPECT_OK(weft_capture_begin(cap));
  uint64_t calls = atomic_load(&kernel_calls);
  step(e.dev, &k, x, y, z);
  EXPECT_OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_launches(cap), 2);
  cr_assert_eq(atomic_load(&kernel_calls), calls, "recorded launches did not run");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_recorded, 2);
  for (uint32_t v = 0; v < 20; v++) {
    uint32_t in[ELEMS];
    for (int i = 0; i < ELEMS; i++) in[i] = v * 7;
    EXPECT_OK(weft_buffer_write(e.dev, 0, x, 0, in, BYTES)); /* refreshed in place */
    EXPECT_OK(weft_capture_replay(cap));
    expect_all(e.dev, 0, z, v * 7 * 2 + 1, "replay");
  }
  s = stats_of(e.dev);
  cr_assert_eq(s.launches_replayed, 40);
  weft_capture_destroy(cap);
  weft_buffer all[3] = {x, y, z};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(replay, a_task_graph_over_several_streams_is_captured_and_replayed, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer a = make_buffer(e.dev, 0), b = make_buffer(e.dev, 0), c = make_buffer(e.dev, 0);
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_binding ra = {a, 0, WEFT_WHOLE, WEFT_READ_WRITE}, rb = {b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  args one_a = {1, 0}, two_a = {2, 0};
  for (int i = 0; i < 5; i++) {
    EXPECT_OK(weft_taskgraph_add_launch(g, k.inc, one, one, &ra, 1, &one_a, sizeof(one_a), NULL));
    EXPECT_OK(weft_taskgraph_add_launch(g, k.inc, one, one, &rb, 1, &two_a, sizeof(two_a), NULL));
  }
  weft_binding j[3] = {
      {a, 0, WEFT_WHOLE, WEFT_READ}, {b, 0, WEFT_WHOLE, WEFT_READ}, {c, 0, WEFT_WHOLE, WEFT_WRITE}};
  args z = {0, 0};
  EXPECT_OK(weft_taskgraph_add_launch(g, k.sum, one, one, j, 3, &z, sizeof(z), NULL));
  cr_assert_eq(weft_taskgraph_lane_count(g), 2);
  weft_stream_id lanes[2] = {4, 5};
  weft_capture *cap;
  EXPECT_OK(weft_capture_prepare(e.dev, lanes, 2, &cap));
  set(e.dev, &k, 0, a, 0, 0);
  set(e.dev, &k, 0, b, 0, 0);
  EXPECT_OK(weft_taskgraph_submit(g, 4)); /* warm-up */
  expect_all(e.dev, 0, c, 15, "5 + 10");
  EXPECT_OK(weft_capture_begin(cap));
  EXPECT_OK(weft_taskgraph_submit(g, 4));
  EXPECT_OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_launches(cap), 11);
  for (int r = 1; r <= 3; r++) {
    EXPECT_OK(weft_capture_replay(cap));
    expect_all(e.dev, 0, c, 15 + 15 * (uint32_t)r, "after a replay");
  }
  weft_capture_destroy(cap);
  weft_taskgraph_destroy(g);
  weft_buffer all[3] = {a, b, c};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(window, warm_up_keeps_released_memory_until_begin, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_capture *cap = prepare_on(e.dev, 0);
  weft_buffer t = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, t, 1, 0);
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_memory_usage before = {0}, held = {0}, after = {0};
  EXPECT_OK(weft_memory_usage_get(e.dev, &before));
  EXPECT_OK(weft_buffer_release(e.dev, t)); /* a warm-up temporary */
  EXPECT_OK(weft_memory_usage_get(e.dev, &held));
  cr_assert_eq(held.bytes_in_use, before.bytes_in_use, "its slice stays taken until begin");
  cr_assert_eq(stats_of(e.dev).buffers_live, 1, "its memory is still held");
  EXPECT_OK(weft_capture_begin(cap));
  EXPECT_OK(weft_memory_usage_get(e.dev, &after));
  cr_assert_lt(after.bytes_in_use, held.bytes_in_use, "begin gives it back to the pool");
  cr_assert_eq(after.bytes_reserved, held.bytes_reserved, "the pool keeps the page");
  EXPECT_OK(weft_capture_end(cap));
  weft_capture_destroy(cap);
  env_close(&e);
}

Test(window, a_recording_that_allocates_or_writes_is_rejected, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  weft_buffer fresh = make_buffer(e.dev, 0); /* a reservation inside the window */
  set(e.dev, &k, 0, x, 1, 0);
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "the recording allocated");
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_ABORTED);
  cr_assert_eq(weft_capture_launches(cap), 0, "nothing is kept");
  weft_capture_destroy(cap);

  cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  uint32_t in[ELEMS] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, x, 0, in, BYTES));
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "written inside the window");
  weft_capture_destroy(cap);
  /* Other streams are not in the window: they allocate and write freely. */
  cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  weft_buffer elsewhere = make_buffer(e.dev, 1);
  EXPECT_OK(weft_buffer_write(e.dev, 1, elsewhere, 0, in, BYTES));
  EXPECT_OK(weft_capture_end(cap));
  weft_capture_destroy(cap);
  weft_buffer all[3] = {x, fresh, elsewhere};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(window, reservations_inside_are_served_only_from_room_already_held, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.memory_capacity = 1u << 20;
  env_open(&e);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  weft_buffer big;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 200000, &big)); /* needs a new page: refused */
  uint8_t got[16];
  weft_status st = weft_buffer_read(e.dev, 1, big, 0, got, sizeof(got));
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  cr_assert_not_null(strstr(text, "PageUpdateForbidden"), "%s", text);
  weft_error_free(st);
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "the recording allocated");
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, big));
  env_close(&e);
}

Test(window, no_host_sync_inside_and_cleanup_is_a_no_op, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 3, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_sync(e.dev, 0)); /* warm-up may sync */
  EXPECT_OK(weft_capture_begin(cap));
  weft_memory_usage before = {0}, after = {0};
  EXPECT_OK(weft_memory_usage_get(e.dev, &before));
  EXPECT_OK(weft_memory_cleanup(e.dev, 0));
  EXPECT_OK(weft_memory_usage_get(e.dev, &after));
  cr_assert_eq(after.bytes_reserved, before.bytes_reserved, "cleanup inside the window: no-op");
  EXPECT_KIND(weft_sync(e.dev, 0), WEFT_ERR_GENERIC, "no host sync while recording");
  uint32_t got[ELEMS];
  EXPECT_KIND(weft_buffer_read(e.dev, 0, x, 0, got, BYTES), WEFT_ERR_GENERIC,
              "a read on stream 0 (slot 0)");
  expect_all(e.dev, 1, x, 3, "a read on another stream is fine");
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "sync");
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

static weft_status k_fail(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return weft_error_make(WEFT_ERR_VALIDATION, "eager failure");
}

Test(window, a_launch_that_would_be_skipped_or_hits_a_failpoint_dooms_the_capture, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_kernel kf;
  EXPECT_OK(weft_kernel_host(e.dev, "fails", k_fail, NULL, &kf));
  weft_buffer bad = make_buffer(e.dev, 0), y = make_buffer(e.dev, 0);
  weft_binding w = {bad, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, kf, one, one, &w, 1, NULL, 0)); /* bad carries a failure */
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  add(e.dev, &k, 0, bad, y, 1, 0);
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "would be skipped inside the window");
  weft_capture_destroy(cap);

  weft_device_stats s = stats_of(e.dev);
  char spec[64];
  snprintf(spec, sizeof(spec), "launch#%" PRIu64 "=Unknown", s.launches + 1);
  EXPECT_OK(weft_device_set_failpoints(e.dev, spec));
  cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  set(e.dev, &k, 0, y, 1, 0);
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "failpoint");
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, bad));
  EXPECT_OK(weft_buffer_release(e.dev, y));
  env_close(&e);
}

Test(lifetime, abort_gives_back_everything_and_destroy_waits_for_replays, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  inc(e.dev, &k, 0, x, 1, 2000);
  EXPECT_OK(weft_buffer_release(e.dev, x)); /* the recording keeps it alive */
  cr_assert_eq(stats_of(e.dev).buffers_live, 1);
  EXPECT_OK(weft_capture_abort(cap));
  cr_assert_eq(stats_of(e.dev).buffers_live, 0, "abort let go of the buffer");
  cr_assert_eq(weft_capture_launches(cap), 0);
  weft_capture_destroy(cap);

  weft_buffer y = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, y, 0, 0);
  cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  inc(e.dev, &k, 0, y, 1, 2000); /* 2 ms per replay */
  EXPECT_OK(weft_capture_end(cap));
  uint64_t calls = atomic_load(&kernel_calls);
  for (int i = 0; i < 10; i++) EXPECT_OK(weft_capture_replay(cap));
  weft_capture_destroy(cap);
  cr_assert_eq(atomic_load(&kernel_calls), calls + 10, "destroy returned after every replay ran");
  expect_all(e.dev, 0, y, 10, "y");
  EXPECT_OK(weft_buffer_release(e.dev, y));
  cr_assert_eq(stats_of(e.dev).captures_live, 0);
  env_close(&e);
}

Test(lifetime, close_ends_live_captures_and_destroy_after_close_frees_only_the_object,
     .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  inc(e.dev, &k, 0, x, 1, 0);
  EXPECT_OK(weft_capture_end(cap));
  EXPECT_OK(weft_capture_replay(cap));
  weft_capture *open_window = prepare_on(e.dev, 1);
  weft_capture *destroyed = prepare_on(e.dev, 2);
  weft_capture_destroy(destroyed); /* before close: all of it goes */
  weft_device *dev = e.dev;
  e.dev = NULL;
  weft_device_close(dev); /* ends both captures and frees what they held */
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_ABORTED);
  cr_assert_eq(weft_capture_launches(cap), 0);
  EXPECT_KIND(weft_capture_replay(cap), WEFT_ERR_INVALID_ARGUMENT, "device is closed");
  EXPECT_KIND(weft_capture_begin(open_window), WEFT_ERR_INVALID_ARGUMENT, "device is closed");
  weft_alloc_counts c = weft_counting_allocator_counts(e.ca);
  cr_assert_eq(c.live_blocks, 2, "only the two capture objects are left, the caller's");
  weft_capture_destroy(cap); /* after close: frees the object and nothing else */
  weft_capture_destroy(open_window);
  env_close(&e); /* checks that nothing leaked */
}

Test(isolation, a_window_forces_the_sequential_path, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.strategy = WEFT_STRATEGY_INTERLEAVE;
  e.opts.max_tasks = 1000;
  e.opts.scheduler = WEFT_SCHEDULER_THREAD;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 1), z = make_buffer(e.dev, 2);
  /* Outside a window, the sum on 2 aligns 0 and 1 onto one stream (the
   * three reach the scheduler together: no idle flush between). */
  weft_buffer slow = make_buffer(e.dev, 3);
  hold h;
  hold_begin(&h, e.dev, &k, slow, 3, 0, 200);
  set(e.dev, &k, 0, x, 1, 0);
  set(e.dev, &k, 1, y, 2, 0);
  sum(e.dev, &k, 2, x, y, z, 0);
  hold_end(&h);
  EXPECT_OK(weft_buffer_release(e.dev, slow));
  expect_all(e.dev, 2, z, 3, "z");
  uint64_t interleaved = stats_of(e.dev).tasks_interleaved;
  cr_assert_gt(interleaved, 0);
  /* With stream 0 in a window, the same program keeps every task on its stream. */
  weft_capture *cap = prepare_on(e.dev, 0);
  set(e.dev, &k, 0, x, 5, 0);
  set(e.dev, &k, 1, y, 6, 0);
  sum(e.dev, &k, 2, x, y, z, 0);
  expect_all(e.dev, 2, z, 11, "z in the window");
  cr_assert_eq(stats_of(e.dev).tasks_interleaved, interleaved, "no task left its stream");
  weft_capture_destroy(cap);
  weft_buffer all[3] = {x, y, z};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(replay, replays_allocate_nothing_once_warm, .timeout = 60) {
  env e;
  env_options(&e);
  /* A small cap bounds the commands in circulation, so warm-up reaches
   * the pools' final size (growth is not a per-replay cost). */
  e.opts.max_pending_commands = 2;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  for (int i = 0; i < 8; i++) inc(e.dev, &k, 0, x, 1, 0);
  EXPECT_OK(weft_capture_end(cap));
  /* Warm the command pools up to the same number of launches in flight. */
  for (int i = 0; i < 2000; i++) EXPECT_OK(weft_capture_replay(cap));
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_alloc_counts before = weft_counting_allocator_counts(e.ca);
  for (int i = 0; i < 2000; i++) EXPECT_OK(weft_capture_replay(cap));
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_alloc_counts after = weft_counting_allocator_counts(e.ca);
  cr_assert_eq(after.allocs, before.allocs, "%" PRIu64 " allocations over 16,000 replayed launches",
               after.allocs - before.allocs);
  expect_all(e.dev, 0, x, 8 * 4000, "x");
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

/* ---- a replay that runs out of memory ---- */

/* Allocations fail on the thread that sets |fail_here| (the client's own
 * command), or everywhere while |fail_everywhere| is set. */
static _Thread_local bool fail_here;
static _Atomic bool fail_everywhere; /* every thread */

static void *failing_alloc(void *self, size_t size, size_t align) {
  const weft_allocator *inner = self;
  return fail_here || atomic_load(&fail_everywhere) ? NULL : inner->alloc(inner->self, size, align);
}

static void failing_free(void *self, void *p, size_t size, size_t align) {
  const weft_allocator *inner = self;
  inner->free(inner->self, p, size, align);
}

static _Atomic bool gate_open;

static weft_status k_gate(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate_open)) sched_yield();
  return NULL;
}

Test(replay, a_replay_that_runs_out_of_memory_gives_its_slot_back, .timeout = 60) {
  env e;
  env_options(&e);
  weft_allocator failing = {&e.alloc, failing_alloc, failing_free};
  e.opts.allocator = &failing;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_kernel gate;
  EXPECT_OK(weft_kernel_host(e.dev, "gate", k_gate, NULL, &gate));
  weft_buffer x = make_buffer(e.dev, 0), held = make_buffer(e.dev, 1);
  set(e.dev, &k, 0, x, 0, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  inc(e.dev, &k, 0, x, 1, 0);
  EXPECT_OK(weft_capture_end(cap));
  /* Stream 1 waits at a gate; the launches queued behind it hold commands,
   * so the command pool runs dry and a replay must allocate its own. */
  atomic_store(&gate_open, false);
  weft_binding hb = {held, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(e.dev, 1, gate, one, one, &hb, 1, NULL, 0));
  int ooms = 0, ok = 0;
  for (int i = 0; i < 10000 && ooms < 2 * 4; i++) {
    for (int j = 0; j < 8; j++) inc(e.dev, &k, 1, held, 1, 0);
    fail_here = true;
    weft_status st = weft_capture_replay(cap);
    fail_here = false;
    if (!st) {
      ok++; /* the pool still had a command */
      continue;
    }
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY);
    weft_error_free(st);
    ooms++;
  }
  cr_assert_eq(ooms, 8, "the pool never ran dry");
  atomic_store(&gate_open, true);
  /* Before the fix each failure kept a slot: this replay waited forever. */
  for (int i = 0; i < 8; i++) EXPECT_OK(weft_capture_replay(cap));
  expect_all(e.dev, 0, x, (uint32_t)(ok + 8), "every replay that was accepted ran");
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, held));
  env_close(&e);
}

Test(window, a_capture_records_only_its_own_stream_ids_and_others_on_its_slot_run, .timeout = 60) {
  env e = env_new(); /* 4 slots: streams 0 and 4 share slot 0 */
  kernels k = make_kernels(e.dev);
  weft_buffer mine = make_buffer(e.dev, 0), theirs = make_buffer(e.dev, 4);
  set(e.dev, &k, 0, mine, 0, 0);
  set(e.dev, &k, 4, theirs, 0, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  inc(e.dev, &k, 0, mine, 1, 0);
  inc(e.dev, &k, 4, theirs, 1, 0); /* another thread's work on the same slot: runs */
  expect_all(e.dev, 4, theirs, 1, "a launch on stream 4 ran during the window");
  EXPECT_OK(weft_capture_end(cap)); /* the read on stream 4 is no sync of the capture */
  cr_assert_eq(weft_capture_launches(cap), 1, "only the launch on stream 0 was recorded");
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_capture_replay(cap));
  expect_all(e.dev, 0, mine, 3, "each replay ran the recorded launch");
  expect_all(e.dev, 4, theirs, 1, "no replay ran stream 4's launch");
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, mine));
  EXPECT_OK(weft_buffer_release(e.dev, theirs));
  env_close(&e);
}

Test(replay, replays_on_clones_give_back_their_back_pressure, .timeout = 60) {
  env e;
  env_options(&e);
  weft_allocator failing = {&e.alloc, failing_alloc, failing_free};
  e.opts.allocator = &failing;
  e.opts.max_pending_commands = 8;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  inc(e.dev, &k, 0, x, 1, 0);
  inc(e.dev, &k, 0, x, 1, 0);
  /* No memory for the instances at end: every replay clones the recording
   * into pooled commands. The end's own command normally comes from the
   * pool; if the pool was empty, end fails and changes nothing: again. */
  for (int i = 0; weft_capture_state_of(cap) == WEFT_CAPTURE_RECORDING; i++) {
    cr_assert_lt(i, 100, "end never got a command");
    if (i) (void)stats_of(e.dev); /* a command back in the pool */
    fail_everywhere = true;
    weft_status st = weft_capture_end(cap);
    fail_everywhere = false;
    if (st) cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY);
    weft_error_free(st);
  }
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_READY);
  /* Before the fix each clone kept a back-pressure slot: the 5th replay
   * (8 launches) and every later call waited forever. */
  for (int i = 0; i < 100; i++) EXPECT_OK(weft_capture_replay(cap));
  expect_all(e.dev, 0, x, 200, "every cloned replay ran");
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

Test(replay, a_replay_during_a_dry_run_is_measured_and_not_run, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  inc(e.dev, &k, 0, x, 1, 0);
  inc(e.dev, &k, 0, x, 1, 0);
  EXPECT_OK(weft_capture_end(cap));
  EXPECT_OK(weft_capture_replay(cap));
  expect_all(e.dev, 0, x, 2, "a replay outside the dry run");
  weft_device_stats before = stats_of(e.dev);
  EXPECT_OK(weft_memory_dry_run(e.dev, true));
  inc(e.dev, &k, 0, x, 1, 0); /* dropped, like the replays */
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_capture_replay(cap));
  EXPECT_OK(weft_memory_dry_run(e.dev, false));
  expect_all(e.dev, 0, x, 2, "the dry run changed no byte");
  weft_device_stats after = stats_of(e.dev);
  cr_assert_eq(after.launches_dry - before.launches_dry, 1 + 3 * 2, "every launch was measured");
  cr_assert_eq(after.launches_replayed, before.launches_replayed, "no replayed launch ran");
  EXPECT_OK(weft_capture_replay(cap)); /* and replays run again after it */
  expect_all(e.dev, 0, x, 4, "a replay after the dry run");
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

/* ---- fused replays: many in flight, several streams, failures ---- */

typedef struct replayer_arg {
  weft_capture *cap;
  int n;
  _Atomic int done; /* replay calls returned */
} replayer_arg;

static void *replay_n(void *p) {
  replayer_arg *a = p;
  for (int i = 0; i < a->n; i++) {
    EXPECT_OK(weft_capture_replay(a->cap));
    atomic_fetch_add(&a->done, 1);
  }
  return NULL;
}

/* Waits up to |ms| milliseconds for |a| to have returned |want| calls. */
static int wait_done(replayer_arg *a, int want, int ms) {
  for (int i = 0; i < ms && atomic_load(&a->done) < want; i++) sleep_us(1000);
  return atomic_load(&a->done);
}

Test(replay, sixty_four_replays_in_flight_never_wait_and_the_next_waits_for_one, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_kernel gate;
  EXPECT_OK(weft_kernel_host(e.dev, "gate", k_gate, NULL, &gate));
  weft_buffer x = make_buffer(e.dev, 0), g = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  weft_capture *cap = prepare_on(e.dev, 0);
  EXPECT_OK(weft_capture_begin(cap));
  for (int i = 0; i < 8; i++) inc(e.dev, &k, 0, x, 1, 0);
  EXPECT_OK(weft_capture_end(cap));
  /* Stream 0 waits at a gate: no replay behind it can finish. */
  atomic_store(&gate_open, false);
  weft_binding gb = {g, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, gate, one, one, &gb, 1, NULL, 0));
  uint64_t calls = atomic_load(&kernel_calls);
  replayer_arg a = {.cap = cap, .n = 65};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, replay_n, &a), 0);
  /* Before, the 5th call waited for the first replay to finish. */
  cr_assert_eq(wait_done(&a, 64, 20000), 64, "only %d replays returned behind the gate",
               atomic_load(&a.done));
  sleep_us(200000);
  cr_assert_eq(atomic_load(&a.done), 64, "the 65th replay did not wait for a free instance");
  cr_assert_eq(atomic_load(&kernel_calls), calls, "nothing ran behind the gate");
  atomic_store(&gate_open, true);
  pthread_join(th, NULL);
  expect_all(e.dev, 0, x, 65 * 8, "every replay ran once");
  cr_assert_eq(stats_of(e.dev).launches_replayed, 65 * 8);
  weft_capture_destroy(cap);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, g));
  env_close(&e);
}

/* Six launches over streams 0..2 with every kind of cross-stream edge
 * (read-after-write, write-after-read, write-after-write), from a = v:
 * b = v + 1, c = v + 3, d = 2v + 3, a = 2v + 3, c = 3v + 4, b = v + 6. */
static void crossing(weft_device *dev, const kernels *k, const weft_buffer *v) {
  add(dev, k, 0, v[0], v[1], 1, 0);
  add(dev, k, 1, v[1], v[2], 2, 50);
  sum(dev, k, 2, v[0], v[2], v[3], 0);
  add(dev, k, 0, v[3], v[0], 0, 50);
  sum(dev, k, 1, v[0], v[1], v[2], 0);
  inc(dev, k, 2, v[1], 5, 0);
}

Test(replay, replays_across_streams_match_eager_launches_with_work_between, .timeout = 60) {
  env e = env_new(); /* 4 slots: the capture takes 0..2, eager work between runs on 3 */
  kernels k = make_kernels(e.dev);
  enum { ROUNDS = 24 };
  weft_buffer v[4], out[2][2][ROUNDS]; /* [eager, replay][d, c][round] */
  for (int i = 0; i < 4; i++) v[i] = make_buffer(e.dev, 0);
  for (int w = 0; w < 2; w++)
    for (int j = 0; j < 2; j++)
      for (int r = 0; r < ROUNDS; r++) out[w][j][r] = make_buffer(e.dev, 3);
  weft_stream_id ids[3] = {0, 1, 2};
  weft_capture *cap;
  EXPECT_OK(weft_capture_prepare(e.dev, ids, 3, &cap));
  set(e.dev, &k, 0, v[0], 0, 0);
  crossing(e.dev, &k, v); /* warm-up */
  EXPECT_OK(weft_capture_begin(cap));
  crossing(e.dev, &k, v);
  EXPECT_OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_launches(cap), 6);
  /* The same rounds twice, eagerly then replayed: the input refreshed in
   * place on stream 0 and the outputs copied out on stream 3 after each,
   * all in flight together. */
  for (int w = 0; w < 2; w++)
    for (int r = 0; r < ROUNDS; r++) {
      uint32_t in[ELEMS];
      for (int i = 0; i < ELEMS; i++) in[i] = (uint32_t)r * 7;
      EXPECT_OK(weft_buffer_write(e.dev, 0, v[0], 0, in, BYTES));
      if (w)
        EXPECT_OK(weft_capture_replay(cap));
      else
        crossing(e.dev, &k, v);
      add(e.dev, &k, 3, v[3], out[w][0][r], 0, 0);
      add(e.dev, &k, 3, v[2], out[w][1][r], 0, 0);
    }
  for (int r = 0; r < ROUNDS; r++) {
    uint32_t x = (uint32_t)r * 7;
    char what[64];
    snprintf(what, sizeof(what), "round %d: eager d", r);
    expect_all(e.dev, 3, out[0][0][r], 2 * x + 3, what);
    snprintf(what, sizeof(what), "round %d: eager c", r);
    expect_all(e.dev, 3, out[0][1][r], 3 * x + 4, what);
    snprintf(what, sizeof(what), "round %d: replayed d", r);
    expect_all(e.dev, 3, out[1][0][r], 2 * x + 3, what);
    snprintf(what, sizeof(what), "round %d: replayed c", r);
    expect_all(e.dev, 3, out[1][1][r], 3 * x + 4, what);
  }
  uint32_t last = (ROUNDS - 1) * 7;
  expect_all(e.dev, 0, v[0], 2 * last + 3, "a");
  expect_all(e.dev, 0, v[1], last + 6, "b");
  cr_assert_eq(stats_of(e.dev).launches_replayed, 6 * ROUNDS);
  weft_capture_destroy(cap);
  for (int i = 0; i < 4; i++) EXPECT_OK(weft_buffer_release(e.dev, v[i]));
  for (int w = 0; w < 2; w++)
    for (int j = 0; j < 2; j++)
      for (int r = 0; r < ROUNDS; r++) EXPECT_OK(weft_buffer_release(e.dev, out[w][j][r]));
  env_close(&e);
}

/* y += 1 on stream 0; z = y on stream 1; w += 1 on stream 1 (independent). */
static void fail_program(weft_device *dev, const kernels *k, weft_buffer y, weft_buffer z,
                         weft_buffer w) {
  inc(dev, k, 0, y, 1, 0);
  add(dev, k, 1, y, z, 0, 0);
  inc(dev, k, 1, w, 1, 0);
}

/* A read of |b| fails with one Unwritten whose root is the failpoint at
 * |launch|; returns the length of its chain (the hops it was passed on). */
static size_t expect_failed_at(weft_device *dev, weft_buffer b, uint64_t launch, const char *what) {
  uint32_t got[ELEMS];
  weft_status st = weft_buffer_read(dev, 1, b, 0, got, BYTES);
  cr_assert_not_null(st, "%s: the read succeeded", what);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "%s", what);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN, "%s", what);
  weft_status root = weft_error_root(u);
  char want[64];
  snprintf(want, sizeof(want), "launch %" PRIu64 " ", launch);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_VALIDATION, "%s", what);
  cr_assert_not_null(strstr(weft_error_message(root), want), "%s: root '%s' lacks '%s'", what,
                     weft_error_message(root), want);
  size_t hops = weft_error_chain_length(u);
  weft_error_free(st);
  return hops;
}

Test(replay, a_failure_in_the_tenth_of_twenty_replays_in_flight_taints_as_eager_launches_do,
     .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_kernel gate;
  EXPECT_OK(weft_kernel_host(e.dev, "gate", k_gate, NULL, &gate));
  weft_buffer y[2], z[2], w[2], g = make_buffer(e.dev, 0);
  for (int i = 0; i < 2; i++) {
    y[i] = make_buffer(e.dev, 0), z[i] = make_buffer(e.dev, 0), w[i] = make_buffer(e.dev, 0);
    set(e.dev, &k, 0, y[i], 0, 0);
    set(e.dev, &k, 0, z[i], 0, 0);
    set(e.dev, &k, 0, w[i], 0, 0);
  }
  weft_stream_id ids[2] = {0, 1};
  weft_capture *cap;
  EXPECT_OK(weft_capture_prepare(e.dev, ids, 2, &cap));
  EXPECT_OK(weft_capture_begin(cap));
  fail_program(e.dev, &k, y[1], z[1], w[1]);
  EXPECT_OK(weft_capture_end(cap));
  /* Eagerly: 20 rounds behind a gate, the 10th round's y += 1 fails. */
  weft_binding gb = {g, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  uint64_t failing[2];
  weft_device_stats before[2] = {0}, after[2] = {0};
  for (int way = 0; way < 2; way++) {
    EXPECT_OK(weft_sync(e.dev, 0));
    EXPECT_OK(weft_sync(e.dev, 1));
    before[way] = stats_of(e.dev);
    uint64_t first = before[way].launches + 2; /* after the gate's */
    failing[way] = first + 9 * 3;
    char spec[64];
    snprintf(spec, sizeof(spec), "launch#%" PRIu64 "=Validation", failing[way]);
    EXPECT_OK(weft_device_set_failpoints(e.dev, spec));
    atomic_store(&gate_open, false);
    EXPECT_OK(weft_launch(e.dev, 0, gate, one, one, &gb, 1, NULL, 0));
    for (int r = 0; r < 20; r++) {
      if (way)
        EXPECT_OK(weft_capture_replay(cap));
      else
        fail_program(e.dev, &k, y[0], z[0], w[0]);
    }
    atomic_store(&gate_open, true);
    EXPECT_OK(weft_sync(e.dev, 0));
    EXPECT_OK(weft_sync(e.dev, 1));
    after[way] = stats_of(e.dev);
    EXPECT_OK(weft_device_set_failpoints(e.dev, ""));
  }
  size_t hops[2][2];
  for (int way = 0; way < 2; way++) {
    const char *how = way ? "replayed" : "eager";
    /* One failure; y's later increments and every later z = y are skipped. */
    cr_assert_eq(after[way].launches_failed - before[way].launches_failed, 1, "%s", how);
    cr_assert_eq(after[way].launches_skipped - before[way].launches_skipped, 10 + 11, "%s", how);
    hops[way][0] = expect_failed_at(e.dev, y[way], failing[way], how);
    hops[way][1] = expect_failed_at(e.dev, z[way], failing[way], how);
    expect_all(e.dev, 1, w[way], 20, how); /* independent of the failure */
  }
  cr_assert_eq(hops[1][0], hops[0][0], "y's chain: %zu hops replayed, %zu eager", hops[1][0],
               hops[0][0]);
  cr_assert_eq(hops[1][1], hops[0][1], "z's chain: %zu hops replayed, %zu eager", hops[1][1],
               hops[0][1]);
  cr_assert_eq(after[1].launches_replayed - before[1].launches_replayed, 60);
  weft_capture_destroy(cap);
  for (int i = 0; i < 2; i++) {
    EXPECT_OK(weft_buffer_release(e.dev, y[i]));
    EXPECT_OK(weft_buffer_release(e.dev, z[i]));
    EXPECT_OK(weft_buffer_release(e.dev, w[i]));
  }
  EXPECT_OK(weft_buffer_release(e.dev, g));
  env_close(&e);
}

Test(replay, replays_across_streams_allocate_nothing_once_warm, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_pending_commands = 2;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer v[4];
  for (int i = 0; i < 4; i++) v[i] = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, v[0], 0, 0);
  weft_stream_id ids[3] = {0, 1, 2};
  weft_capture *cap;
  EXPECT_OK(weft_capture_prepare(e.dev, ids, 3, &cap));
  crossing(e.dev, &k, v);
  EXPECT_OK(weft_capture_begin(cap));
  for (int i = 0; i < 4; i++) crossing(e.dev, &k, v);
  EXPECT_OK(weft_capture_end(cap));
  for (int i = 0; i < 1000; i++) EXPECT_OK(weft_capture_replay(cap));
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_alloc_counts b0 = weft_counting_allocator_counts(e.ca);
  for (int i = 0; i < 1000; i++) EXPECT_OK(weft_capture_replay(cap));
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_alloc_counts b1 = weft_counting_allocator_counts(e.ca);
  cr_assert_eq(b1.allocs, b0.allocs, "%" PRIu64 " allocations over 24,000 replayed launches",
               b1.allocs - b0.allocs);
  weft_capture_destroy(cap);
  for (int i = 0; i < 4; i++) EXPECT_OK(weft_buffer_release(e.dev, v[i]));
  env_close(&e);
}
