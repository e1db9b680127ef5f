/* Issue 15's embedding surface as an outside user reaches it by accident, on
 * the host backend: callbacks that call back into weft (an import's release
 * callback, the OOM observer, a native kernel), calls on the edges of every
 * size and handle (len 0 and UINT64_MAX, ranges at the end, 1-byte buffers,
 * stale, forged and foreign events, long labels), the failure model through
 * copies, fills, native kernels and asynchronous reads, and the counting
 * allocator's fail_at swept over each new call. Every refusal must be a clear
 * error that loses nothing: the device's counting allocator is back to zero at
 * close, and each import's release callback ran exactly once. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

static const uint32_t one[3] = {1, 1, 1};

/* |st| has |kind| and, when |needle| is set, says it; frees |st|. */
static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, const char *call,
                        int line) {
  char text[4096] = "success";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: expected %s, got %s", line, call,
               weft_error_kind_name(kind), text);
  if (needle)
    cr_assert_not_null(strstr(text, needle), "line %d: %s: '%s' lacks '%s'", line, call, text,
                       needle);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind, needle) expect_kind((call), (kind), (needle), #call, __LINE__)

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* Waits up to 20 s for *flag to reach |want|. */
static bool await_count(_Atomic int *flag, int want) {
  for (uint64_t end = now_ms() + 20000; now_ms() < end;) {
    if (atomic_load(flag) >= want) return true;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return atomic_load(flag) >= want;
}

/* ---- kernels ------------------------------------------------------------------------------- */

static _Atomic int gate_open;

/* Holds its stream until the gate opens. */
static weft_status held(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate_open)) sched_yield();
  return NULL;
}

static weft_status fails(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return weft_error_make(WEFT_ERR_GENERIC, "failed on purpose");
}

/* Adds 1 to every byte of its binding. */
static weft_status inc(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint8_t *p = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0]; i++) p[i]++;
  return NULL;
}

static void launch1(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer b,
                    weft_access a) {
  weft_binding bd = {b, 0, WEFT_WHOLE, a};
  EXPECT_OK(weft_launch(dev, s, k, one, one, &bd, 1, NULL, 0));
}

/* ---- callbacks that call back -------------------------------------------------------------- */

/* What a release callback tried, and what weft answered. */
typedef struct callback_calls {
  weft_device *dev;
  weft_buffer other;  /* a live buffer the callback reads, fills, releases */
  weft_event pending; /* an event that cannot complete while the callback runs */
  weft_capture *cap;  /* a recorded capture it replays */
  weft_kernel k;
  int replays;
  weft_status read, address, sync, wait, snapshot, stats, fill, launch, replay, release;
  _Atomic int ran;
} callback_calls;

static void call_everything(void *user) {
  callback_calls *c = user;
  uint8_t byte;
  uint64_t addr;
  char *json = NULL;
  weft_device_stats stats = {0};
  c->read = weft_buffer_read(c->dev, 0, c->other, 0, &byte, 1);
  c->address = weft_buffer_address(c->dev, c->other, &addr);
  c->sync = weft_sync(c->dev, 0);
  c->wait = weft_event_wait(c->dev, c->pending, UINT64_MAX);
  c->snapshot = weft_memory_snapshot(c->dev, &json);
  free(json);
  c->stats = weft_device_stats_get(c->dev, &stats);
  c->fill = weft_buffer_fill(c->dev, 0, c->other, 0, 1, 7);
  c->launch = NULL;
  weft_binding bd = {c->other, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  c->launch = weft_launch(c->dev, 0, c->k, one, one, &bd, 1, NULL, 0);
  /* More replays than a capture may have in flight: a thread the replays
   * wait for must not wait for them. */
  for (int i = 0; i < c->replays && !c->replay; i++) c->replay = weft_capture_replay(c->cap);
  c->release = weft_buffer_release(c->dev, c->other);
  atomic_fetch_add(&c->ran, 1);
}

/* The answers a callback on the scheduler's thread must get: blocking calls
 * refused, the rest served. */
static void check_scheduler_answers(callback_calls *c, bool pending_done) {
  EXPECT_KIND(c->read, WEFT_ERR_INVALID_ARGUMENT, "scheduler");
  EXPECT_KIND(c->address, WEFT_ERR_INVALID_ARGUMENT, "scheduler");
  EXPECT_KIND(c->sync, WEFT_ERR_INVALID_ARGUMENT, "scheduler");
  if (pending_done)
    EXPECT_OK(c->wait);
  else
    EXPECT_KIND(c->wait, WEFT_ERR_INVALID_ARGUMENT, "scheduler");
  EXPECT_KIND(c->snapshot, WEFT_ERR_INVALID_ARGUMENT, "scheduler");
  EXPECT_KIND(c->stats, WEFT_ERR_INVALID_ARGUMENT, "scheduler");
  EXPECT_OK(c->fill);
  EXPECT_OK(c->launch);
  EXPECT_OK(c->replay);
  EXPECT_OK(c->release);
}

/* A capture of one launch incrementing |b| on stream 0. */
static weft_capture *capture_inc(weft_device *dev, weft_kernel k, weft_buffer b) {
  weft_stream_id s = 0;
  weft_capture *cap;
  EXPECT_OK(weft_capture_prepare(dev, &s, 1, &cap));
  EXPECT_OK(weft_capture_begin(cap));
  launch1(dev, 0, k, b, WEFT_READ_WRITE);
  EXPECT_OK(weft_capture_end(cap));
  return cap;
}

Test(callbacks, a_release_callback_calling_weft_is_refused_or_served_never_deadlocks,
     .timeout = 120) {
  env e = env_new();
  atomic_store(&gate_open, 0);
  weft_kernel hold, k;
  EXPECT_OK(weft_kernel_host(e.dev, "hold", held, NULL, &hold));
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  callback_calls c = {.dev = e.dev, .k = k, .replays = 200};
  EXPECT_OK(weft_buffer_create(e.dev, 0, 16, &c.other));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, c.other, 0, 16, 0));
  c.cap = capture_inc(e.dev, k, c.other);
  /* Stream 1 is held: an event there cannot complete while the callback runs. */
  EXPECT_OK(weft_launch(e.dev, 1, hold, one, one, NULL, 0, NULL, 0));
  EXPECT_OK(weft_event_record(e.dev, 1, &c.pending));
  static uint8_t bytes[64];
  weft_buffer imp;
  EXPECT_OK(weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)bytes, sizeof bytes, call_everything,
                               &c, &imp));
  EXPECT_OK(weft_buffer_release(e.dev, imp));
  cr_assert(await_count(&c.ran, 1), "the release callback never ran (or deadlocked)");
  atomic_store(&gate_open, 1);
  EXPECT_OK(weft_event_wait(e.dev, c.pending, UINT64_MAX));
  EXPECT_OK(weft_event_release(e.dev, c.pending));
  EXPECT_OK(weft_sync(e.dev, 0));
  check_scheduler_answers(&c, false);
  cr_assert_eq(atomic_load(&c.ran), 1);
  weft_capture_destroy(c.cap);
  env_close(&e);
}

static void read_at_close(void *user) {
  callback_calls *c = user;
  uint8_t byte;
  bool done;
  c->read = weft_buffer_read(c->dev, 0, c->other, 0, &byte, 1);
  c->wait = weft_event_wait(c->dev, c->pending, UINT64_MAX);
  c->release = weft_event_query(c->dev, c->pending, &done);
  c->fill = weft_buffer_fill(c->dev, 0, c->other, 0, 1, 1);
  atomic_fetch_add(&c->ran, 1);
}

Test(callbacks, a_release_callback_run_by_close_is_refused_as_closing, .timeout = 60) {
  env e = env_new();
  callback_calls c = {.dev = e.dev};
  EXPECT_OK(weft_buffer_create(e.dev, 0, 16, &c.other));
  EXPECT_OK(weft_event_record(e.dev, 0, &c.pending));
  static uint8_t bytes[64];
  weft_buffer imp;
  EXPECT_OK(weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)bytes, sizeof bytes, read_at_close,
                               &c, &imp));
  weft_device *dev = e.dev;
  weft_device_close(dev);
  e.dev = NULL;
  cr_assert_eq(atomic_load(&c.ran), 1);
  EXPECT_KIND(c.read, WEFT_ERR_INVALID_ARGUMENT, "closing");
  EXPECT_KIND(c.wait, WEFT_ERR_INVALID_ARGUMENT, "closing");
  EXPECT_KIND(c.release, WEFT_ERR_INVALID_ARGUMENT, "closing");
  EXPECT_KIND(c.fill, WEFT_ERR_INVALID_ARGUMENT, "closing");
  weft_alloc_counts n = weft_counting_allocator_counts(e.ca);
  cr_assert_eq(n.live_blocks, 0);
  weft_counting_allocator_destroy(e.ca);
}

/* The OOM observer runs on the scheduler's thread: it may queue work and
 * release buffers; a blocking call is refused; a replay must not wait. The
 * reclaim ladder drains every stream before the observer runs, so its event
 * is a completed one (a wait on it is served). */
typedef struct oom_calls {
  callback_calls c;
  _Atomic int calls;
} oom_calls;

static void on_oom(void *user, weft_stream_id stream, uint64_t bytes, const char *json) {
  (void)stream, (void)bytes, (void)json;
  oom_calls *o = user;
  if (atomic_fetch_add(&o->calls, 1) == 0) call_everything(&o->c);
}

Test(callbacks, an_oom_observer_calling_weft_is_refused_or_served_never_deadlocks, .timeout = 120) {
  env e;
  env_options(&e);
  e.opts.memory_capacity = 4u << 20;
  env_open(&e);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  oom_calls o = {.c = {.dev = e.dev, .k = k, .replays = 200}};
  EXPECT_OK(weft_buffer_create(e.dev, 0, 16, &o.c.other));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, o.c.other, 0, 16, 0));
  o.c.cap = capture_inc(e.dev, k, o.c.other);
  EXPECT_OK(weft_event_record(e.dev, 1, &o.c.pending));
  EXPECT_OK(weft_memory_set_oom_observer(e.dev, on_oom, &o));
  weft_buffer filler, huge; /* 3 MiB held: 2 MiB more do not fit in 4 */
  EXPECT_OK(weft_buffer_create(e.dev, 0, 3u << 20, &filler));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 2u << 20, &huge));
  cr_assert(await_count(&o.c.ran, 1), "the observer never ran (or deadlocked)");
  EXPECT_OK(weft_event_wait(e.dev, o.c.pending, UINT64_MAX));
  EXPECT_OK(weft_event_release(e.dev, o.c.pending));
  EXPECT_OK(weft_sync(e.dev, 0));
  check_scheduler_answers(&o.c, true);
  /* The buffer whose reservation failed: its address, a copy from it and a
   * read of the copy all report the OutOfMemory root. */
  uint64_t addr = 1;
  EXPECT_KIND(weft_buffer_address(e.dev, huge, &addr), WEFT_ERR_SEVERAL, "OutOfMemory");
  cr_assert_eq(addr, 0);
  weft_buffer small;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 8, &small));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, small, 0, 8, 5));
  EXPECT_OK(weft_buffer_copy(e.dev, 0, huge, 0, small, 2, 4));
  uint8_t out[8];
  EXPECT_KIND(weft_buffer_read(e.dev, 0, small, 0, out, 8), WEFT_ERR_SEVERAL, "OutOfMemory");
  EXPECT_OK(weft_buffer_read(e.dev, 0, small, 6, out, 2)); /* outside the copy: still good */
  cr_assert_eq(out[0], 5);
  EXPECT_OK(weft_memory_set_oom_observer(e.dev, NULL, NULL));
  EXPECT_OK(weft_buffer_release(e.dev, huge));
  EXPECT_OK(weft_buffer_release(e.dev, filler));
  EXPECT_OK(weft_buffer_release(e.dev, small));
  weft_capture_destroy(o.c.cap);
  env_close(&e);
}

/* A host native kernel follows the host kernel rules: an event recorded on
 * its stream after it, and one on another stream that waits for it through
 * weft_stream_wait_event, are refused, not a deadlock; with a timeout too. */
typedef struct self_waiter {
  weft_device *dev;
  weft_event after, chained, before;
  weft_status wait_after, wait_after_timed, wait_chained, wait_before;
  _Atomic int go;
} self_waiter;

static weft_status waits_on_itself(const weft_native_ctx *ctx, void *user) {
  (void)ctx;
  self_waiter *w = user;
  while (!atomic_load(&w->go)) sched_yield();
  w->wait_after = weft_event_wait(w->dev, w->after, UINT64_MAX);
  w->wait_after_timed = weft_event_wait(w->dev, w->after, 5u * 1000000000u);
  w->wait_chained = weft_event_wait(w->dev, w->chained, UINT64_MAX);
  w->wait_before = weft_event_wait(w->dev, w->before, UINT64_MAX);
  return NULL;
}

Test(callbacks, a_native_kernel_waiting_on_an_event_after_itself_is_refused, .timeout = 120) {
  env e = env_new();
  self_waiter w = {.dev = e.dev};
  weft_kernel k;
  EXPECT_OK(weft_kernel_native(e.dev, "selfwait", waits_on_itself, &w, &k));
  EXPECT_OK(weft_event_record(e.dev, 0, &w.before));
  EXPECT_OK(weft_launch(e.dev, 0, k, one, one, NULL, 0, NULL, 0));
  EXPECT_OK(weft_event_record(e.dev, 0, &w.after));
  /* Stream 2 waits for |after| (no buffer in common), then records. */
  EXPECT_OK(weft_stream_wait_event(e.dev, 2, w.after));
  EXPECT_OK(weft_event_record(e.dev, 2, &w.chained));
  atomic_store(&w.go, 1);
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_sync(e.dev, 2));
  EXPECT_KIND(w.wait_after, WEFT_ERR_INVALID_ARGUMENT, "selfwait");
  EXPECT_KIND(w.wait_after_timed, WEFT_ERR_INVALID_ARGUMENT, "selfwait");
  EXPECT_KIND(w.wait_chained, WEFT_ERR_INVALID_ARGUMENT, "selfwait");
  EXPECT_OK(w.wait_before);
  weft_event all[] = {w.before, w.after, w.chained};
  for (size_t i = 0; i < 3; i++) EXPECT_OK(weft_event_release(e.dev, all[i]));
  env_close(&e);
}

/* ---- sizes --------------------------------------------------------------------------------- */

Test(sizes, copies_and_fills_at_the_edges_of_their_buffers, .timeout = 60) {
  env e = env_new();
  weft_buffer a, b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 1, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 1, &b));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, a, 0, 1, 0xab));
  EXPECT_OK(weft_buffer_copy(e.dev, 0, a, 0, b, 0, 1));
  uint8_t v = 0;
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, &v, 1));
  cr_assert_eq(v, 0xab);
  /* len 0 at the end is a no-op; past the end is refused. */
  EXPECT_OK(weft_buffer_copy(e.dev, 0, a, 1, b, 1, 0));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, a, 1, 0, 1));
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 2, b, 0, 0), WEFT_ERR_INVALID_ARGUMENT, "source");
  EXPECT_KIND(weft_buffer_fill(e.dev, 0, a, 2, 0, 1), WEFT_ERR_INVALID_ARGUMENT, "fill");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 1, b, 0, 1), WEFT_ERR_INVALID_ARGUMENT, "source");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 0, b, 1, 1), WEFT_ERR_INVALID_ARGUMENT, "destination");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 0, b, 0, UINT64_MAX), WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_buffer_fill(e.dev, 0, a, 0, UINT64_MAX, 1), WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_buffer_fill(e.dev, 0, a, UINT64_MAX, 2, 1), WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, UINT64_MAX, b, 0, 1), WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 0, a, 0, 1), WEFT_ERR_INVALID_ARGUMENT, "overlap");
  /* A copy onto itself of len 0 overlaps nothing. */
  EXPECT_OK(weft_buffer_copy(e.dev, 0, a, 0, a, 0, 0));
  weft_event ev;
  EXPECT_KIND(weft_buffer_read_async(e.dev, 0, a, 0, &v, UINT64_MAX, &ev),
              WEFT_ERR_INVALID_ARGUMENT, NULL);
  cr_assert_eq(ev.id, 0);
  EXPECT_KIND(weft_buffer_read_async(e.dev, 0, a, 1, &v, 1, &ev), WEFT_ERR_INVALID_ARGUMENT, NULL);
  /* A read of 0 bytes at the end, with no dst, completes with no error. */
  EXPECT_OK(weft_buffer_read_async(e.dev, 0, a, 1, NULL, 0, &ev));
  EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX));
  EXPECT_OK(weft_event_release(e.dev, ev));
  weft_device_stats st = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &st));
  cr_assert_eq(st.launches, 2, "only the 1-byte fill and copy are launches (%" PRIu64 ")",
               st.launches);
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

static void count_release(void *user) {
  atomic_fetch_add((_Atomic int *)user, 1);
}

Test(sizes, imports_of_bad_addresses_and_sizes_are_refused_and_released_once, .timeout = 60) {
  env e = env_new();
  static uint8_t bytes[16];
  uint64_t at = (uint64_t)(uintptr_t)bytes;
  _Atomic int released = 0;
  weft_buffer b = {99};
  EXPECT_KIND(weft_buffer_import(e.dev, 0, 0, 16, count_release, &released, &b),
              WEFT_ERR_INVALID_ARGUMENT, "address");
  cr_assert_eq(b.id, 0);
  EXPECT_KIND(weft_buffer_import(e.dev, 0, at, 0, count_release, &released, &b),
              WEFT_ERR_INVALID_ARGUMENT, "size");
  EXPECT_KIND(
      weft_buffer_import(e.dev, 0, at, WEFT_MAX_BUFFER_SIZE + 1, count_release, &released, &b),
      WEFT_ERR_INVALID_ARGUMENT, "size");
  EXPECT_KIND(weft_buffer_import(e.dev, 0, UINT64_MAX - 8, 16, count_release, &released, &b),
              WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_buffer_import(e.dev, 0, at, 16, count_release, &released, NULL),
              WEFT_ERR_INVALID_ARGUMENT, "out");
  EXPECT_KIND(weft_buffer_import(NULL, 0, at, 16, count_release, &released, &b),
              WEFT_ERR_INVALID_ARGUMENT, "NULL");
  cr_assert_eq(atomic_load(&released), 6);
  /* WEFT_MAX_BUFFER_SIZE itself is accepted: weft never touches bytes no work
   * binds; a 1-byte copy at its very end is in range. */
  weft_buffer huge, small;
  EXPECT_OK(
      weft_buffer_import(e.dev, 0, at, WEFT_MAX_BUFFER_SIZE, count_release, &released, &huge));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 1, &small));
  uint64_t addr = 0;
  EXPECT_OK(weft_buffer_address(e.dev, huge, &addr));
  cr_assert_eq(addr, at);
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, huge, WEFT_MAX_BUFFER_SIZE, small, 0, 1),
              WEFT_ERR_INVALID_ARGUMENT, "source");
  EXPECT_OK(weft_buffer_fill(e.dev, 0, huge, 3, 1, 0x5a));
  EXPECT_OK(weft_buffer_copy(e.dev, 0, huge, 3, small, 0, 1));
  uint8_t v = 0;
  EXPECT_OK(weft_buffer_read(e.dev, 0, small, 0, &v, 1));
  cr_assert_eq(v, 0x5a);
  cr_assert_eq(bytes[3], 0x5a);
  EXPECT_OK(weft_buffer_release(e.dev, huge));
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert(await_count(&released, 7));
  /* Released: its address and its label are NotFound. */
  EXPECT_KIND(weft_buffer_address(e.dev, huge, &addr), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_KIND(weft_buffer_set_label(e.dev, huge, "gone"), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_OK(weft_buffer_release(e.dev, small));
  env_close(&e);
  cr_assert_eq(atomic_load(&released), 7);
}

Test(sizes, labels_of_every_length_are_accepted_or_refused_saying_why, .timeout = 60) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &b));
  char l127[128], l128[129];
  memset(l127, 'a', 127);
  l127[127] = '\0';
  memset(l128, 'b', 128);
  l128[128] = '\0';
  EXPECT_OK(weft_buffer_set_label(e.dev, b, l127));
  EXPECT_KIND(weft_buffer_set_label(e.dev, b, l128), WEFT_ERR_INVALID_ARGUMENT, "1..127");
  EXPECT_KIND(weft_buffer_set_label(e.dev, b, ""), WEFT_ERR_INVALID_ARGUMENT, "empty");
  EXPECT_OK(weft_buffer_set_label(e.dev, b, NULL));
  EXPECT_OK(weft_buffer_set_label(e.dev, b, NULL)); /* removing no label is fine */
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  weft_launch_desc d = {.struct_size = sizeof d,
                        .stream = 0,
                        .kernel = k,
                        .grid = {1, 1, 1},
                        .block = {1, 1, 1},
                        .bindings = &bd,
                        .num_bindings = 1};
  d.label = l128;
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "1..127");
  d.label = "";
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "empty");
  d.label = l127;
  EXPECT_OK(weft_launch_ex(e.dev, &d));
  /* A 127-byte label names its buffer and its launch in a failure's report. */
  weft_kernel bad;
  EXPECT_OK(weft_kernel_host(e.dev, "bad", fails, NULL, &bad));
  EXPECT_OK(weft_buffer_set_label(e.dev, b, l127));
  d.kernel = bad;
  EXPECT_OK(weft_launch_ex(e.dev, &d));
  uint8_t out[4];
  weft_status st = weft_buffer_read(e.dev, 0, b, 0, out, 4);
  char text[4096];
  weft_error_format(st, text, sizeof text);
  char want[160];
  snprintf(want, sizeof want, "launch '%s' of kernel 'bad'", l127);
  cr_assert_not_null(strstr(text, want), "%s", text);
  weft_error_free(st);
  /* A launch skipped for reading it names the buffer by its 127-byte label. */
  d.kernel = k;
  d.label = NULL;
  weft_buffer c2;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &c2));
  weft_binding two[2] = {{b, 0, WEFT_WHOLE, WEFT_READ}, {c2, 0, WEFT_WHOLE, WEFT_WRITE}};
  d.bindings = two;
  d.num_bindings = 2;
  EXPECT_OK(weft_launch_ex(e.dev, &d));
  st = weft_buffer_read(e.dev, 0, c2, 0, out, 4);
  weft_error_format(st, text, sizeof text);
  snprintf(want, sizeof want, "it needed buffer '%s'", l127);
  cr_assert_not_null(strstr(text, want), "%s", text);
  weft_error_free(st);
  EXPECT_OK(weft_buffer_release(e.dev, c2));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  /* A label set after its buffer's release is NotFound, and leaks nothing. */
  EXPECT_KIND(weft_buffer_set_label(e.dev, b, "late"), WEFT_ERR_NOT_FOUND, NULL);
  env_close(&e);
}

/* ---- stale handles ------------------------------------------------------------------------- */

Test(handles, stale_forged_and_foreign_events_are_not_found_everywhere, .timeout = 60) {
  env e = env_new(), f = env_new();
  weft_event ev, other;
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX));
  EXPECT_OK(weft_event_record(f.dev, 0, &other));
  /* Another device's live event, on this device. */
  bool done;
  EXPECT_KIND(weft_event_query(e.dev, other, &done), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_KIND(weft_event_wait(e.dev, other, 0), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_KIND(weft_stream_wait_event(e.dev, 1, other), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_KIND(weft_event_release(e.dev, other), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_OK(weft_event_release(f.dev, other));
  /* Released, then its slot recycled by a new event: the old id stays dead. */
  EXPECT_OK(weft_event_release(e.dev, ev));
  weft_event fresh;
  EXPECT_OK(weft_event_record(e.dev, 0, &fresh));
  cr_assert_neq(fresh.id, ev.id);
  EXPECT_KIND(weft_event_query(e.dev, ev, &done), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_KIND(weft_event_wait(e.dev, ev, UINT64_MAX), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_KIND(weft_stream_wait_event(e.dev, 1, ev), WEFT_ERR_NOT_FOUND, NULL);
  EXPECT_KIND(weft_event_release(e.dev, ev), WEFT_ERR_NOT_FOUND, NULL);
  const uint64_t forged[] = {0,
                             1,
                             UINT64_MAX,
                             fresh.id + 1,
                             fresh.id ^ ((uint64_t)1 << 40),
                             fresh.id & 0xffffffffu,
                             (fresh.id & ~(uint64_t)0xffffffffu) | 0xffffffu};
  for (size_t i = 0; i < sizeof forged / sizeof forged[0]; i++) {
    weft_event x = {forged[i]};
    EXPECT_KIND(weft_event_query(e.dev, x, &done), WEFT_ERR_NOT_FOUND, NULL);
    EXPECT_KIND(weft_event_wait(e.dev, x, UINT64_MAX), WEFT_ERR_NOT_FOUND, NULL);
    EXPECT_KIND(weft_stream_wait_event(e.dev, 1, x), WEFT_ERR_NOT_FOUND, NULL);
    EXPECT_KIND(weft_event_release(e.dev, x), WEFT_ERR_NOT_FOUND, NULL);
  }
  EXPECT_OK(weft_event_wait(e.dev, fresh, UINT64_MAX));
  EXPECT_OK(weft_event_release(e.dev, fresh));
  env_close(&f);
  env_close(&e);
}

Test(handles, many_live_events_then_all_released, .timeout = 240) {
  env e = env_new();
  enum { N = 100000 };
  weft_event *evs = malloc(sizeof(*evs) * N);
  cr_assert_not_null(evs);
  for (int i = 0; i < N; i++) EXPECT_OK(weft_event_record(e.dev, (weft_stream_id)(i % 3), &evs[i]));
  for (int i = N - 1; i >= 0; i -= 997) EXPECT_OK(weft_event_wait(e.dev, evs[i], UINT64_MAX));
  for (int i = 0; i < N; i++) EXPECT_OK(weft_event_release(e.dev, evs[i]));
  /* The ids are all dead; the objects are reused, not grown. */
  weft_event again;
  EXPECT_OK(weft_event_record(e.dev, 0, &again));
  for (int i = 0; i < N; i += 4999) cr_assert_neq(again.id, evs[i].id);
  EXPECT_OK(weft_event_wait(e.dev, again, UINT64_MAX));
  EXPECT_OK(weft_event_release(e.dev, again));
  free(evs);
  env_close(&e);
}

/* ---- the failure model --------------------------------------------------------------------- */

static weft_status native_fails(const weft_native_ctx *ctx, void *user) {
  (void)ctx;
  atomic_fetch_add((_Atomic int *)user, 1);
  return weft_error_make(WEFT_ERR_VALIDATION, "the library said no");
}

static weft_status native_copies(const weft_native_ctx *ctx, void *user) {
  atomic_fetch_add((_Atomic int *)user, 1);
  memcpy((void *)(uintptr_t)ctx->addresses[1], (const void *)(uintptr_t)ctx->addresses[0],
         (size_t)ctx->sizes[1]);
  return NULL;
}

Test(failures, a_native_failure_skips_its_chain_and_the_report_names_each_label, .timeout = 60) {
  env e = env_new();
  _Atomic int bad_calls = 0, copy_calls = 0;
  weft_kernel bad, cp;
  EXPECT_OK(weft_kernel_native(e.dev, "lib.call", native_fails, &bad_calls, &bad));
  EXPECT_OK(weft_kernel_native(e.dev, "lib.copy", native_copies, &copy_calls, &cp));
  weft_buffer a, b, c;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 8, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 8, &b));
  EXPECT_OK(weft_buffer_create(e.dev, 1, 8, &c));
  EXPECT_OK(weft_buffer_set_label(e.dev, b, "mid.act"));
  weft_binding wa = {a, 0, WEFT_WHOLE, WEFT_WRITE};
  weft_launch_desc d = {.struct_size = sizeof d,
                        .stream = 0,
                        .kernel = bad,
                        .grid = {1, 1, 1},
                        .block = {1, 1, 1},
                        .bindings = &wa,
                        .num_bindings = 1,
                        .label = "step.one"};
  EXPECT_OK(weft_launch_ex(e.dev, &d));
  weft_binding ab[2] = {{a, 0, WEFT_WHOLE, WEFT_READ}, {b, 0, WEFT_WHOLE, WEFT_WRITE}};
  d.kernel = cp;
  d.bindings = ab;
  d.num_bindings = 2;
  d.label = "step.two";
  EXPECT_OK(weft_launch_ex(e.dev, &d));
  EXPECT_OK(weft_buffer_copy(e.dev, 1, b, 0, c, 0, 8)); /* on another stream, ordered by b */
  uint8_t out[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  weft_event rd;
  EXPECT_OK(weft_buffer_read_async(e.dev, 1, c, 0, out, 8, &rd));
  weft_status st = weft_event_wait(e.dev, rd, UINT64_MAX);
  char text[4096];
  weft_error_format(st, text, sizeof text);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "%s", text);
  const char *needles[] = {"the library said no", "launch 'step.one' of kernel 'lib.call'",
                           "launch 'step.two' of kernel 'lib.copy'", "kernel 'copy'",
                           "it needed buffer 'mid.act'"};
  for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
    cr_assert_not_null(strstr(text, needles[i]), "'%s' lacks '%s'", text, needles[i]);
  weft_error_free(st);
  for (int i = 0; i < 8; i++) cr_assert_eq(out[i], i + 1, "a failed read wrote dst");
  /* A second wait gets its own copy of the same answer. */
  EXPECT_KIND(weft_event_wait(e.dev, rd, 0), WEFT_ERR_SEVERAL, "step.one");
  EXPECT_OK(weft_event_release(e.dev, rd));
  cr_assert_eq(atomic_load(&bad_calls), 1);
  cr_assert_eq(atomic_load(&copy_calls), 0, "a skipped native kernel ran");
  /* A fill over the tainted range clears exactly it; the copy of it then reads well. */
  EXPECT_OK(weft_buffer_fill(e.dev, 0, b, 0, 4, 9));
  EXPECT_OK(weft_buffer_copy(e.dev, 0, b, 0, c, 4, 4));
  EXPECT_OK(weft_buffer_read(e.dev, 0, c, 4, out, 4));
  for (int i = 0; i < 4; i++) cr_assert_eq(out[i], 9);
  EXPECT_KIND(weft_buffer_read(e.dev, 0, c, 0, out, 8), WEFT_ERR_SEVERAL, "step.one");
  EXPECT_KIND(weft_buffer_read(e.dev, 0, b, 4, out, 4), WEFT_ERR_SEVERAL, "step.one");
  weft_buffer all[] = {a, b, c};
  for (size_t i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

/* Native kernel that adds the scalar byte to every byte of in into out. */
static weft_status native_add(const weft_native_ctx *ctx, void *user) {
  atomic_fetch_add((_Atomic int *)user, 1);
  const uint8_t *in = (const uint8_t *)(uintptr_t)ctx->addresses[0];
  uint8_t *out = (uint8_t *)(uintptr_t)ctx->addresses[1];
  uint8_t k = *(const uint8_t *)ctx->scalars;
  for (uint64_t i = 0; i < ctx->sizes[1]; i++) out[i] = (uint8_t)(in[i] + k);
  return NULL;
}

Test(failures, a_replay_of_copies_fills_and_natives_sees_inputs_refreshed_between_replays,
     .timeout = 60) {
  env e = env_new();
  _Atomic int calls = 0;
  weft_kernel add;
  EXPECT_OK(weft_kernel_native(e.dev, "add", native_add, &calls, &add));
  weft_buffer in, mid, out;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 16, &in));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 16, &mid));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 16, &out));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, in, 0, 16, 0));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, out, 0, 16, 0));
  weft_stream_id s = 0;
  weft_capture *cap;
  EXPECT_OK(weft_capture_prepare(e.dev, &s, 1, &cap));
  EXPECT_OK(weft_capture_begin(cap));
  EXPECT_OK(weft_buffer_copy(e.dev, 0, in, 0, mid, 0, 16));
  uint8_t k = 3;
  weft_binding bd[2] = {{mid, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, 8, WEFT_WRITE}};
  EXPECT_OK(weft_launch(e.dev, 0, add, one, one, bd, 2, &k, 1));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, out, 8, 8, 0xee));
  EXPECT_OK(weft_capture_end(cap));
  for (uint8_t round = 1; round <= 5; round++) {
    uint8_t src[16];
    memset(src, round * 10, sizeof src);
    EXPECT_OK(weft_buffer_write(e.dev, 0, in, 0, src, sizeof src));
    EXPECT_OK(weft_capture_replay(cap));
    uint8_t got[16];
    EXPECT_OK(weft_buffer_read(e.dev, 0, out, 0, got, sizeof got));
    for (int i = 0; i < 8; i++) cr_assert_eq(got[i], (uint8_t)(round * 10 + 3), "round %u", round);
    for (int i = 8; i < 16; i++) cr_assert_eq(got[i], 0xee);
  }
  weft_capture_destroy(cap);
  weft_buffer all[] = {in, mid, out};
  for (size_t i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(failures, poison_wakes_every_waiter_of_a_pending_event, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.failpoints = "poison#2";
  env_open(&e);
  atomic_store(&gate_open, 0);
  weft_kernel hold, k;
  EXPECT_OK(weft_kernel_host(e.dev, "hold", held, NULL, &hold));
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &b));
  EXPECT_OK(weft_launch(e.dev, 0, hold, one, one, NULL, 0, NULL, 0)); /* launch 1 */
  launch1(e.dev, 0, k, b, WEFT_READ_WRITE);                           /* launch 2: poisons */
  weft_event ev, rd;
  uint8_t out[4] = {7, 7, 7, 7};
  EXPECT_OK(weft_event_record(e.dev, 0, &ev));
  EXPECT_OK(weft_buffer_read_async(e.dev, 0, b, 0, out, 4, &rd));
  EXPECT_KIND(weft_event_wait(e.dev, ev, 1000000), WEFT_ERR_TIMEOUT, "did not complete");
  atomic_store(&gate_open, 1);
  weft_status a = weft_event_wait(e.dev, ev, UINT64_MAX);
  weft_status r = weft_event_wait(e.dev, rd, UINT64_MAX);
  weft_status poisoned = weft_device_poisoned(e.dev);
  cr_assert_not_null(poisoned, "the device was not poisoned");
  weft_error_free(poisoned);
  EXPECT_KIND(a, WEFT_ERR_DEVICE_POISONED, NULL);
  cr_assert_not_null(r, "a read after the poison succeeded");
  weft_error_free(r);
  for (int i = 0; i < 4; i++) cr_assert_eq(out[i], 7);
  EXPECT_OK(weft_event_release(e.dev, ev));
  EXPECT_OK(weft_event_release(e.dev, rd));
  env_close(&e);
}

/* ---- allocation failures swept over the new calls ------------------------------------------ */

/* One of each new call; every failure must be clean (a status, nothing lost);
 * the import's callback runs exactly once whatever failed. */
static bool new_calls_once(weft_device *dev, weft_kernel nat, _Atomic int *released, bool *failed) {
  static uint8_t bytes[32];
  bool imported = false;
  weft_buffer a = {0}, imp = {0};
  weft_event ev = {0}, rd = {0};
  uint8_t out[8];
  weft_status st;
  if ((st = weft_buffer_create(dev, 0, 32, &a))) goto fail;
  imported = true;
  if ((st = weft_buffer_import(dev, 0, (uint64_t)(uintptr_t)bytes, 32, count_release, released,
                               &imp)))
    goto fail;
  if ((st = weft_buffer_set_label(dev, imp, "imported"))) goto fail;
  if ((st = weft_buffer_fill(dev, 0, a, 0, 32, 1))) goto fail;
  if ((st = weft_buffer_copy(dev, 0, a, 0, imp, 0, 32))) goto fail;
  weft_binding bd[2] = {{imp, 0, 8, WEFT_READ}, {a, 8, 8, WEFT_WRITE}};
  weft_launch_desc d = {.struct_size = sizeof d,
                        .stream = 0,
                        .kernel = nat,
                        .grid = {1, 1, 1},
                        .block = {1, 1, 1},
                        .bindings = bd,
                        .num_bindings = 2,
                        .label = "sweep"};
  if ((st = weft_launch_ex(dev, &d))) goto fail;
  if ((st = weft_event_record(dev, 0, &ev))) goto fail;
  if ((st = weft_stream_wait_event(dev, 1, ev))) goto fail;
  if ((st = weft_buffer_read_async(dev, 1, a, 8, out, 8, &rd))) goto fail;
  if ((st = weft_event_wait(dev, rd, UINT64_MAX))) goto fail;
  uint64_t addr;
  if ((st = weft_buffer_address(dev, imp, &addr))) goto fail;
  cr_assert_eq(addr, (uint64_t)(uintptr_t)bytes);
  goto done;
fail:
  *failed = true;
  cr_assert_not_null(weft_error_message(st));
  cr_assert(weft_error_kind_of(st) == WEFT_ERR_OUT_OF_MEMORY ||
                weft_error_kind_of(st) == WEFT_ERR_SEVERAL,
            "a failed allocation gave %s: %s", weft_error_kind_name(weft_error_kind_of(st)),
            weft_error_message(st));
  weft_error_free(st);
done:
  if (rd.id) weft_error_free(weft_event_release(dev, rd));
  if (ev.id) weft_error_free(weft_event_release(dev, ev));
  if (imp.id) weft_error_free(weft_buffer_release(dev, imp));
  if (a.id) weft_error_free(weft_buffer_release(dev, a));
  return imported;
}

Test(alloc_failures, each_failing_allocation_in_the_new_calls_is_clean, .timeout = 300) {
  static _Atomic int calls;
  bool failed = true;
  for (uint64_t n = 1; failed && n < 400; n++) {
    env e = env_new();
    weft_kernel nat;
    EXPECT_OK(weft_kernel_native(e.dev, "copy8", native_copies, (void *)&calls, &nat));
    EXPECT_OK(weft_sync(e.dev, 0));
    EXPECT_OK(weft_sync(e.dev, 1));
    _Atomic int released = 0;
    weft_counting_allocator_fail_at(e.ca, n);
    failed = false;
    bool imported = new_calls_once(e.dev, nat, &released, &failed);
    weft_counting_allocator_fail_at(e.ca, 0);
    env_close(&e); /* nothing leaked */
    cr_assert_eq(atomic_load(&released), imported ? 1 : 0,
                 "n=%" PRIu64 ": the callback ran %d times", n, atomic_load(&released));
  }
  cr_assert(!failed, "400 allocations were not enough for one round");
}

/* ---- a log hook that calls back ------------------------------------------------------------ */

typedef struct hook_seen {
  _Atomic int calls, nested_sets;
} hook_seen;

/* On its first message, turns logging off from inside itself (a common
 * "log the first error, then stop"), and asks for a bad level (which logs a
 * warning from inside the hook). */
static void hook_turns_itself_off(void *user, int level, const char *message) {
  (void)level, (void)message;
  hook_seen *h = user;
  if (atomic_fetch_add(&h->calls, 1) == 0) {
    weft_set_log(hook_turns_itself_off, h, 99); /* its warning must not recurse */
    atomic_fetch_add(&h->nested_sets, 1);
    weft_set_log(NULL, NULL, 0); /* error only */
    atomic_fetch_add(&h->nested_sets, 1);
  }
}

Test(callbacks, a_log_hook_calling_weft_set_log_takes_effect_when_it_returns, .timeout = 30) {
  hook_seen h = {0};
  /* A bad level warns through the new hook at once. */
  weft_set_log(hook_turns_itself_off, &h, 42);
  cr_assert_eq(atomic_load(&h.nested_sets), 2, "weft_set_log from the hook did not return");
  cr_assert_eq(atomic_load(&h.calls), 1, "the hook ran %d times", atomic_load(&h.calls));
  /* Its last call won: logging went back to stderr at level error, so a
   * warning no longer reaches the hook. */
  env e;
  env_options(&e);
  e.opts.failpoints = "poison#1";
  env_open(&e);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &b));
  launch1(e.dev, 0, k, b, WEFT_READ_WRITE);
  EXPECT_KIND(weft_sync(e.dev, 0), WEFT_ERR_DEVICE_POISONED, NULL);
  cr_assert_eq(atomic_load(&h.calls), 1);
  env_close(&e);
}
