/* Paths where the scheduler itself waits or is re-entered, found by a review
 * of the merged issue-12 fixes: the reclaim ladder and an explicit cleanup
 * must not wait for a kernel whose own blocking call is queued behind them; a
 * capture destroyed from the reclaim callback (the scheduler's thread) must
 * not wait for the scheduler; a staged write whose buffer is released before
 * it is processed gives its staging copy back. The first three hung before
 * (the timeouts turn a regression into a failure); the last leaked. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"

#define MiB (UINT64_C(1) << 20)

static void ok(weft_status st, const char *what) {
  if (st) {
    cr_log_error("%s: %s", what, weft_error_message(st));
    weft_error_free(st);
    cr_assert_fail("%s failed", what);
  }
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* ---- a counting allocator: what the device still holds after close ---- */

static _Atomic int64_t live_bytes;
static void *count_alloc(void *self, size_t size, size_t align) {
  (void)self;
  void *p = NULL;
  if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
    return NULL;
  atomic_fetch_add(&live_bytes, (int64_t)size);
  return p;
}
static void count_free(void *self, void *p, size_t size, size_t align) {
  (void)self;
  (void)align;
  if (!p) return;
  atomic_fetch_sub(&live_bytes, (int64_t)size);
  free(p);
}
static weft_allocator counting = {NULL, count_alloc, count_free};

/* ---- a kernel that makes a blocking call once told to ---- */

typedef struct {
  weft_device *dev;
  _Atomic int go, returned;
  weft_error_kind got;
} sync_probe;

static weft_status sync_later(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  sync_probe *p = user;
  /* Told to go, or 150 ms on: in the combining mode the thread that queued
   * the ladder's create runs the ladder itself and cannot say go. */
  for (int i = 0; i < 150 && !atomic_load(&p->go); i++) sleep_ms(1);
  weft_status st = weft_sync(p->dev, 2);
  p->got = st ? weft_error_kind_of(st) : (weft_error_kind)0;
  weft_error_free(st);
  atomic_store(&p->returned, 1);
  return NULL;
}

/* Opens a 64 MiB host device with a kernel running on stream 1 (spinning
 * until p->go), stream 2 alive and 40 MiB held on stream 0. */
static weft_device *open_with_running_kernel(sync_probe *p, weft_buffer *held) {
  weft_device_options o;
  weft_device_options_init(&o);
  o.memory_capacity = 64 * MiB;
  weft_device *dev;
  ok(weft_device_open(&o, &dev), "open");
  p->dev = dev;
  weft_kernel k;
  ok(weft_kernel_host(dev, "sync_later", sync_later, p, &k), "kernel");
  weft_buffer x1, x2;
  ok(weft_buffer_create(dev, 1, 4096, &x1), "create on stream 1");
  ok(weft_buffer_create(dev, 2, 4096, &x2), "create on stream 2");
  ok(weft_buffer_create(dev, 0, 40 * MiB, held), "create 40 MiB");
  ok(weft_sync(dev, 0), "sync 0");
  uint32_t one[3] = {1, 1, 1};
  ok(weft_launch(dev, 1, k, one, one, NULL, 0, NULL, 0), "launch");
  ok(weft_sync(dev, 0), "sync 0 (the launch is placed)");
  return dev;
}

static void expect_answered(sync_probe *p) {
  while (!atomic_load(&p->returned)) sched_yield();
  cr_expect(p->got == 0 || p->got == WEFT_ERR_INVALID_ARGUMENT,
            "the kernel's sync is either served or refused, got kind %d", (int)p->got);
}

Test(scheduler_side_waits, a_kernels_sync_queued_behind_a_reclaim_ladder_is_answered,
     .timeout = 60) {
  sync_probe p = {0};
  weft_buffer held, more;
  weft_device *dev = open_with_running_kernel(&p, &held);
  /* Needs the ladder (40 + 40 MiB of 64), and fails in the end. */
  ok(weft_buffer_create(dev, 0, 40 * MiB, &more), "create queued");
  /* The ladder is running (here or on the scheduler thread); 150 ms into
   * the kernel, its sync queues behind it. */
  expect_answered(&p);
  weft_device_close(dev);
}

static void *cleanup_stream1(void *arg) {
  weft_status st = weft_memory_cleanup(arg, 1);
  weft_error_free(st);
  return NULL;
}

Test(scheduler_side_waits, a_kernels_sync_queued_behind_another_threads_cleanup_is_answered,
     .timeout = 60) {
  sync_probe p = {0};
  weft_buffer held;
  weft_device *dev = open_with_running_kernel(&p, &held);
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, cleanup_stream1, dev), 0);
  sleep_ms(100); /* the cleanup runs; the kernel's sync queues behind it */
  atomic_store(&p.go, 1);
  expect_answered(&p);
  pthread_join(t, NULL);
  weft_device_close(dev);
}

/* ---- the reclaim callback (the scheduler's thread) destroys a capture ---- */

typedef struct {
  weft_device *dev;
  weft_capture *cap;
  weft_buffer victim;
  int calls;
} destroy_probe;

static uint64_t destroy_in_reclaim(void *user, weft_stream_id stream, uint64_t bytes) {
  (void)stream;
  (void)bytes;
  destroy_probe *p = user;
  if (p->calls++) return 0;
  weft_capture_destroy(p->cap); /* frees what the capture kept; must not wait */
  p->cap = NULL;
  weft_error_free(weft_buffer_release(p->dev, p->victim));
  return 40 * MiB;
}

static weft_status noop(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return NULL;
}

Test(scheduler_side_waits, a_capture_destroyed_from_the_reclaim_callback_does_not_wait,
     .timeout = 60) {
  weft_device_options o;
  weft_device_options_init(&o);
  o.memory_capacity = 64 * MiB;
  weft_device *dev;
  ok(weft_device_open(&o, &dev), "open");
  destroy_probe p = {.dev = dev};
  weft_kernel k;
  ok(weft_kernel_host(dev, "noop", noop, NULL, &k), "kernel");
  weft_buffer x;
  ok(weft_buffer_create(dev, 1, 4096, &x), "create on stream 1");
  weft_stream_id s = 1;
  ok(weft_capture_prepare(dev, &s, 1, &p.cap), "prepare");
  ok(weft_capture_begin(p.cap), "begin");
  uint32_t one[3] = {1, 1, 1};
  weft_binding b = {x, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  ok(weft_launch(dev, 1, k, one, one, &b, 1, NULL, 0), "recorded launch");
  ok(weft_capture_end(p.cap), "end");
  ok(weft_buffer_create(dev, 0, 40 * MiB, &p.victim), "create 40 MiB");
  ok(weft_sync(dev, 0), "sync");
  ok(weft_memory_set_reclaim(dev, destroy_in_reclaim, &p), "set reclaim");
  weft_buffer more;
  ok(weft_buffer_create(dev, 0, 40 * MiB, &more), "create through the ladder");
  ok(weft_sync(dev, 0), "sync after the ladder");
  cr_expect_eq(p.calls, 1, "the callback ran once");
  cr_expect_null(p.cap, "the callback destroyed the capture");
  weft_device_stats st = {0};
  ok(weft_device_stats_get(dev, &st), "stats");
  cr_expect_eq(st.captures_live, 0, "the destroyed capture is gone");
  weft_device_close(dev);
}

/* ---- a staged write whose buffer goes before the write is processed ---- */

typedef struct {
  weft_device *dev;
  weft_buffer victim;
  _Atomic int write_queued;
} release_probe;

static uint64_t release_after_write(void *user, weft_stream_id stream, uint64_t bytes) {
  (void)stream;
  (void)bytes;
  release_probe *p = user;
  while (!atomic_load(&p->write_queued)) sched_yield();
  weft_error_free(weft_buffer_release(p->dev, p->victim)); /* takes effect at once */
  return 40 * MiB;
}

static void *create_through_the_ladder(void *arg) {
  weft_device *dev = arg;
  weft_buffer more;
  weft_error_free(weft_buffer_create(dev, 0, 40 * MiB, &more));
  return NULL;
}

Test(scheduler_side_waits, a_staged_write_to_a_buffer_released_first_leaves_nothing_allocated,
     .timeout = 60) {
  atomic_store(&live_bytes, 0);
  weft_device_options o;
  weft_device_options_init(&o);
  o.memory_capacity = 64 * MiB;
  o.allocator = &counting;
  weft_device *dev;
  ok(weft_device_open(&o, &dev), "open");
  release_probe p = {.dev = dev};
  ok(weft_buffer_create(dev, 0, 40 * MiB, &p.victim), "create 40 MiB");
  ok(weft_sync(dev, 0), "sync");
  ok(weft_memory_set_reclaim(dev, release_after_write, &p), "set reclaim");
  /* Another thread's create climbs the ladder (in the combining mode that
   * thread runs it), and its callback holds the scheduler until the write
   * below is queued. */
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, create_through_the_ladder, dev), 0);
  sleep_ms(50);
  size_t n = (size_t)MiB; /* staged: larger than the inline limit, within the window */
  char *src = calloc(1, n);
  cr_assert_not_null(src);
  ok(weft_buffer_write(dev, 0, p.victim, 0, src, n), "staged write, queued behind the create");
  atomic_store(&p.write_queued, 1);
  pthread_join(t, NULL);
  ok(weft_sync(dev, 0), "sync");
  free(src);
  weft_device_close(dev);
  cr_expect_eq(atomic_load(&live_bytes), 0,
               "the device's allocator still holds %lld bytes after close",
               (long long)atomic_load(&live_bytes));
}
