/* Blocking calls made from inside a host kernel (issue 12, item 9). A call
 * that could wait for the kernel making it is refused with InvalidArgument
 * naming the call and why: a read or sync on the kernel's own stream, or on
 * another stream whose work waits for the kernel; a cleanup, a layout
 * install or a capture begin (they wait for every running kernel); an abort
 * while replays are in flight. A destroy does not wait, a replay never waits
 * for an instance, and a drain started by another thread refuses a
 * kernel's queued call instead of waiting for that kernel. Each of these
 * hung before; the timeouts turn a regression into a failure. */
#include <criterion/criterion.h>

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"
#include "support/uint_kernels.h"

/* A kernel whose body is a test's function: it runs once (grid 1), on the
 * pool thread, and keeps what the calls it makes answered. */
typedef struct probe probe;
struct probe {
  weft_device *dev;
  void (*body)(probe *p, const weft_kernel_ctx *ctx);
  weft_buffer buf, other;
  weft_capture *cap;
  weft_status got[4];
  uint32_t bytes[ELEMS];
  _Atomic int go, reads_ok;
};

static weft_status run_probe(const weft_kernel_ctx *ctx, void *user) {
  probe *p = user;
  p->body(p, ctx);
  return NULL;
}

/* Launches the probe on stream 0 (writing p->buf when |binds|) and waits for it. */
static void run_on_stream0(probe *p, bool binds) {
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(p->dev, "probe", run_probe, p, &k));
  weft_binding bd = {p->buf, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(p->dev, 0, k, one, one, binds ? &bd : NULL, binds ? 1 : 0, NULL, 0));
  EXPECT_OK(weft_sync(p->dev, 0));
}

static void expect_refused(weft_status st, const char *call, const char *why) {
  char text[1024] = "";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "got '%s'", text);
  cr_assert_not_null(strstr(text, call), "'%s' lacks '%s'", text, call);
  cr_assert_not_null(strstr(text, "kernel 'probe'"), "'%s' does not name the kernel", text);
  cr_assert_not_null(strstr(text, why), "'%s' lacks '%s'", text, why);
  weft_error_free(st);
}

static void read_own_stream(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  p->got[0] = weft_buffer_read(p->dev, 0, p->other, 0, p->bytes, BYTES);
  p->got[1] = weft_buffer_read(p->dev, 4, p->other, 0, p->bytes, BYTES); /* folds onto slot 0 */
}

Test(kernel_calls, a_read_on_its_own_stream_is_refused, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = read_own_stream};
  p.other = make_buffer(e.dev, 1);
  run_on_stream0(&p, false);
  expect_refused(p.got[0], "weft_buffer_read on the kernel's own stream", "the kernel included");
  expect_refused(p.got[1], "weft_buffer_read on the kernel's own stream", "the kernel included");
  EXPECT_OK(weft_buffer_release(e.dev, p.other));
  env_close(&e);
}

static void sync_own_stream(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  p->got[0] = weft_sync(p->dev, 0);
}

Test(kernel_calls, a_sync_on_its_own_stream_is_refused, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = sync_own_stream};
  run_on_stream0(&p, false);
  expect_refused(p.got[0], "weft_sync on the kernel's own stream", "the kernel included");
  env_close(&e);
}

/* The kernel writes p->buf: a read of it on stream 1 waits for its last
 * writer, the kernel itself. An unrelated buffer reads fine (first: the
 * refused read stays on stream 1, ordered after the kernel, and so would
 * every later read there). */
static void read_own_output_elsewhere(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  p->got[1] = weft_buffer_read(p->dev, 1, p->other, 0, p->bytes, BYTES);
  p->got[0] = weft_buffer_read(p->dev, 1, p->buf, 0, p->bytes + ELEMS / 2, BYTES / 2);
}

Test(kernel_calls, a_read_of_its_own_output_through_another_stream_is_refused, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = read_own_output_elsewhere};
  p.buf = make_buffer(e.dev, 0);
  p.other = make_buffer(e.dev, 1);
  uint32_t seven[ELEMS];
  for (int i = 0; i < ELEMS; i++) seven[i] = 7;
  EXPECT_OK(weft_buffer_write(e.dev, 1, p.other, 0, seven, BYTES));
  EXPECT_OK(weft_sync(e.dev, 1));
  run_on_stream0(&p, true);
  expect_refused(p.got[0], "weft_buffer_read", "after work that runs only once the kernel");
  EXPECT_OK(p.got[1]);
  /* The refused read stays a no-op (it never writes its destination) and
   * the stream goes on. */
  EXPECT_OK(weft_sync(e.dev, 1));
  cr_assert_eq(memcmp(p.bytes, seven, BYTES), 0, "the unrelated read delivered other bytes");
  uint32_t out[ELEMS];
  EXPECT_OK(weft_buffer_read(e.dev, 1, p.buf, 0, out, BYTES));
  EXPECT_OK(weft_buffer_release(e.dev, p.buf));
  EXPECT_OK(weft_buffer_release(e.dev, p.other));
  env_close(&e);
}

/* Stream 1 holds a launch reading the kernel's output: a barrier there waits
 * for it, so for the kernel. */
static void sync_behind_own_output(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  while (!atomic_load(&p->go)) sched_yield();
  p->got[0] = weft_sync(p->dev, 1);
}

Test(kernel_calls, a_sync_of_a_stream_waiting_for_the_kernel_is_refused, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = sync_behind_own_output};
  p.buf = make_buffer(e.dev, 0);
  p.other = make_buffer(e.dev, 1);
  kernels ks = make_kernels(e.dev);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "probe", run_probe, &p, &k));
  weft_binding w = {p.buf, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, k, one, one, &w, 1, NULL, 0));
  add(e.dev, &ks, 1, p.buf, p.other, 1, 0); /* waits for the probe's output */
  atomic_store(&p.go, 1);                   /* the sync is submitted after that launch */
  EXPECT_OK(weft_sync(e.dev, 0));
  expect_refused(p.got[0], "weft_sync", "after work that runs only once the kernel");
  EXPECT_OK(weft_sync(e.dev, 1));
  EXPECT_OK(weft_buffer_release(e.dev, p.buf));
  EXPECT_OK(weft_buffer_release(e.dev, p.other));
  env_close(&e);
}

static void cleanup_elsewhere(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  p->got[0] = weft_memory_cleanup(p->dev, 2);
}

Test(kernel_calls, a_memory_cleanup_from_any_kernel_is_refused, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = cleanup_elsewhere};
  p.other = make_buffer(e.dev, 2); /* stream 2 has memory to clean */
  EXPECT_OK(weft_buffer_release(e.dev, p.other));
  run_on_stream0(&p, false);
  expect_refused(p.got[0], "weft_memory_cleanup", "waits for every running kernel");
  EXPECT_OK(weft_memory_cleanup(e.dev, 2)); /* from a client, it runs */
  env_close(&e);
}

static void install_elsewhere(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  weft_layout l = {.kind = WEFT_LAYOUT_EXCLUSIVE_PAGES};
  p->got[0] = weft_memory_install_layout(p->dev, 3, &l);
}

Test(kernel_calls, a_layout_install_from_a_kernel_is_refused, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = install_elsewhere};
  run_on_stream0(&p, false);
  expect_refused(p.got[0], "weft_memory_install_layout", "waits for every running kernel");
  weft_layout l = {.kind = WEFT_LAYOUT_EXCLUSIVE_PAGES};
  EXPECT_OK(weft_memory_install_layout(e.dev, 3, &l));
  env_close(&e);
}

static void begin_capture(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  p->got[0] = weft_capture_begin(p->cap);
}

Test(kernel_calls, a_capture_begin_from_a_kernel_is_refused, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = begin_capture};
  weft_stream_id s = 2;
  EXPECT_OK(weft_capture_prepare(e.dev, &s, 1, &p.cap));
  run_on_stream0(&p, false);
  expect_refused(p.got[0], "weft_capture_begin", "waits for every running kernel");
  cr_assert_eq(weft_capture_state_of(p.cap), WEFT_CAPTURE_PREPARED);
  EXPECT_OK(weft_capture_begin(p.cap));
  EXPECT_OK(weft_capture_end(p.cap));
  weft_capture_destroy(p.cap);
  env_close(&e);
}

/* A recorded kernel that, replayed, holds its stream until the gate opens. */
static _Atomic int gate;

static weft_status held(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate)) sched_yield();
  return NULL;
}

static weft_capture *record_one(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer b) {
  weft_capture *cap;
  EXPECT_OK(weft_capture_prepare(dev, &s, 1, &cap));
  EXPECT_OK(weft_capture_begin(cap));
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  args a = {1, 0};
  EXPECT_OK(weft_launch(dev, s, k, one, one, &bd, 1, &a, sizeof(a)));
  EXPECT_OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_launches(cap), 1);
  return cap;
}

static void abort_then_open(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  p->got[0] = weft_capture_abort(p->cap);
  atomic_store(&gate, 1);
}

Test(kernel_calls, a_capture_abort_from_a_kernel_is_refused_while_replays_run, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = abort_then_open};
  atomic_store(&gate, 0);
  weft_kernel hk;
  EXPECT_OK(weft_kernel_host(e.dev, "held", held, NULL, &hk));
  p.other = make_buffer(e.dev, 2);
  p.cap = record_one(e.dev, 2, hk, p.other);
  EXPECT_OK(weft_capture_replay(p.cap)); /* runs, and holds stream 2 until the gate opens */
  run_on_stream0(&p, false);
  expect_refused(p.got[0], "weft_capture_abort", "replays of the capture are in flight");
  cr_assert_eq(weft_capture_state_of(p.cap), WEFT_CAPTURE_READY);
  EXPECT_OK(weft_sync(e.dev, 2));
  EXPECT_OK(weft_capture_abort(p.cap));
  weft_capture_destroy(p.cap);
  EXPECT_OK(weft_buffer_release(e.dev, p.other));
  env_close(&e);
}

static void destroy_capture(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  weft_capture_destroy(p->cap);
  p->cap = NULL;
}

Test(kernel_calls, a_capture_destroy_from_a_kernel_does_not_wait_for_it, .timeout = 30) {
  env e = env_new();
  probe p = {.dev = e.dev, .body = destroy_capture};
  weft_kernel inc;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", k_inc, NULL, &inc));
  p.other = make_buffer(e.dev, 2);
  p.cap = record_one(e.dev, 2, inc, p.other);
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_capture_replay(p.cap));
  run_on_stream0(&p, false);
  cr_assert_null(p.cap);
  cr_assert_eq(stats_of(e.dev).captures_live, 0, "the capture was not freed");
  EXPECT_OK(weft_buffer_release(e.dev, p.other));
  env_close(&e); /* and nothing of it leaked */
}

/* Replays of a capture on the kernel's own stream run after the kernel: the
 * fifth would wait for an instance that only the kernel's end frees. */
static void replay_eight(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  for (int i = 0; i < 8 && !p->got[0]; i++) p->got[0] = weft_capture_replay(p->cap);
}

static void replays_from_a_kernel(weft_scheduler_mode mode) {
  env e;
  env_options(&e);
  e.opts.scheduler = mode;
  env_open(&e);
  probe p = {.dev = e.dev, .body = replay_eight};
  weft_kernel inc;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", k_inc, NULL, &inc));
  p.other = make_buffer(e.dev, 0);
  uint32_t zero[ELEMS] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, p.other, 0, zero, BYTES));
  p.cap = record_one(e.dev, 0, inc, p.other);
  run_on_stream0(&p, false);
  EXPECT_OK(p.got[0]);
  EXPECT_OK(weft_buffer_read(e.dev, 0, p.other, 0, p.bytes, BYTES));
  for (int i = 0; i < ELEMS; i++)
    cr_assert_eq(p.bytes[i], 8u, "element %d: %u replays ran", i, p.bytes[i]);
  weft_capture_destroy(p.cap);
  EXPECT_OK(weft_buffer_release(e.dev, p.other));
  env_close(&e);
}

Test(kernel_calls, replays_on_its_own_stream_never_wait_for_the_kernel, .timeout = 30) {
  replays_from_a_kernel(WEFT_SCHEDULER_THREAD);
}

/* Combining: a pool thread that took the scheduler role to make room would
 * schedule, and wait, from inside the kernel. */
Test(kernel_calls, replays_from_a_kernel_in_combining_mode_never_schedule_nor_wait, .timeout = 30) {
  replays_from_a_kernel(WEFT_SCHEDULER_COMBINING);
}

/* Another thread's cleanup drains the device (it waits for every running
 * kernel) while the kernel keeps reading an unrelated buffer: once a read is
 * queued behind the cleanup, the drain refuses it rather than wait for the
 * kernel that waits for it. */
static void read_until_refused(probe *p, const weft_kernel_ctx *ctx) {
  (void)ctx;
  while (!atomic_load(&p->go)) sched_yield();
  for (long i = 0; i < 100000000L; i++) {
    memset(p->bytes, 0, BYTES);
    weft_status st = weft_buffer_read(p->dev, 1, p->other, 0, p->bytes, BYTES);
    if (st) {
      p->got[0] = st;
      return;
    }
    for (int j = 0; j < ELEMS; j++)
      if (p->bytes[j] != 7) return; /* reads_ok stays short of i + 1 */
    atomic_fetch_add(&p->reads_ok, 1);
  }
}

static void *cleanup_thread(void *arg) {
  probe *p = arg;
  atomic_store(&p->go, 1);
  p->got[1] = weft_memory_cleanup(p->dev, 2);
  return NULL;
}

static void drain_against_a_reading_kernel(weft_scheduler_mode mode) {
  env e;
  env_options(&e);
  e.opts.scheduler = mode;
  env_open(&e);
  probe p = {.dev = e.dev, .body = read_until_refused};
  weft_buffer spare = make_buffer(e.dev, 2); /* stream 2 has memory: cleanup drains */
  EXPECT_OK(weft_buffer_release(e.dev, spare));
  p.other = make_buffer(e.dev, 1);
  uint32_t seven[ELEMS];
  for (int i = 0; i < ELEMS; i++) seven[i] = 7;
  EXPECT_OK(weft_buffer_write(e.dev, 1, p.other, 0, seven, BYTES));
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "probe", run_probe, &p, &k));
  EXPECT_OK(weft_launch(e.dev, 0, k, one, one, NULL, 0, NULL, 0));
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, cleanup_thread, &p), 0);
  pthread_join(t, NULL);
  EXPECT_OK(p.got[1]);
  EXPECT_OK(weft_sync(e.dev, 0));
  expect_refused(p.got[0], "weft_buffer_read", "waiting for every running kernel");
  cr_log_info("%d reads answered before the drain refused one", atomic_load(&p.reads_ok));
  EXPECT_OK(weft_buffer_release(e.dev, p.other));
  env_close(&e);
}

Test(kernel_calls, a_drain_refuses_a_kernels_queued_read_instead_of_waiting, .timeout = 60) {
  drain_against_a_reading_kernel(WEFT_SCHEDULER_THREAD);
}

Test(kernel_calls, a_combining_drain_refuses_a_kernels_queued_read_instead_of_waiting,
     .timeout = 60) {
  drain_against_a_reading_kernel(WEFT_SCHEDULER_COMBINING);
}
