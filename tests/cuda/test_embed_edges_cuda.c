/* Issue 15's native kernels on the CUDA backend (fake driver) calling back
 * into their own device. The function runs on the device's scheduler thread:
 * a blocking call (a read, a sync, an address, a wait on an unfinished event,
 * a snapshot) is refused with InvalidArgument rather than deadlocking, and a
 * submission (launches past the back-pressure limit, a large write, more
 * replays than a capture may have in flight, records, releases) is accepted
 * without waiting and runs in order once the function returns. */
#include <criterion/criterion.h>

#if !defined(FAKE_CUDA_PATH) || !defined(WEFT_HAVE_CUDA)
Test(cuda_embed_edges, skipped_no_cuda) {
  cr_skip_test("weft or the fake driver was built without cuda.h: no CUDA backend to test");
}
#else

#include <dlfcn.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "fake_cuda_control.h"
#include "support/asan_criterion.h"
#include "support/fake_cuda_fixture.h"
#include "weft_test_kernels_ptx.h"

static void expect_ok(weft_status st, const char *call, int line) {
  if (st) {
    char text[2048];
    weft_error_format(st, text, sizeof(text));
    cr_assert_fail("line %d: %s failed: %s", line, call, text);
  }
}
#define OK(call)                        expect_ok((call), #call, __LINE__)

static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, int line) {
  char text[2048] = "Ok";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: got '%s', expected %s", line, text,
               weft_error_kind_name(kind));
  if (needle)
    cr_assert_not_null(strstr(text, needle), "line %d: '%s' lacks '%s'", line, text, needle);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind, needle) expect_kind((call), (kind), (needle), __LINE__)

typedef struct cenv {
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_device *dev;
  weft_module mod;
  weft_kernel fill, axpy, spin;
} cenv;

/* A CUDA device on the fake driver (reset) over a counting allocator. */
static cenv cenv_new(void) {
  const char *path = driver_path();
  setenv("WEFT_CUDA_DRIVER", path, 1);
  fake_cuda_open(path);
  need_fake("counters and the fake's emulated kernels");
  fake_reset();
  cenv e;
  memset(&e, 0, sizeof(e));
  OK(weft_counting_allocator_create(&e.ca));
  e.alloc = weft_counting_allocator_get(e.ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &e.alloc;
  o.backend = WEFT_BACKEND_CUDA;
  o.max_streams = 4;
  OK(weft_device_open(&o, &e.dev));
  OK(weft_module_load(e.dev, weft_test_kernels_ptx, weft_test_kernels_ptx_len, &e.mod));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", "b44", &e.fill));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_axpy_f32", "4bb4", &e.axpy));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_spin_us", "4", &e.spin));
  return e;
}

static void cenv_close(cenv *e) {
  weft_device_close(e->dev);
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%" PRIu64 " blocks leaked by the device", c.live_blocks);
  weft_counting_allocator_destroy(e->ca);
  const char *names[] = {"live_allocations", "streams_live",     "events_live",
                         "graphs_live",      "graph_execs_live", "ctx_refs"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    cr_assert_eq(stat_of(names[i]), 0, "fake %s = %" PRIu64 " after close", names[i],
                 stat_of(names[i]));
  ASSERT_NO_LEAKS();
}

static const uint32_t one[3] = {1, 1, 1};

static weft_buffer make(cenv *e, weft_stream_id s, uint64_t size) {
  weft_buffer b;
  OK(weft_buffer_create(e->dev, s, size, &b));
  return b;
}

/* y[0..n) = v (weft_fill_f32). */
static void fill_f32(cenv *e, weft_stream_id s, weft_buffer y, uint32_t n, float v) {
  weft_binding b = {y, 0, WEFT_WHOLE, WEFT_WRITE};
  struct {
    float v;
    uint32_t n;
  } sc = {v, n};
  const uint32_t grid[3] = {(n + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
  OK(weft_launch(e->dev, s, e->fill, grid, block, &b, 1, &sc, sizeof(sc)));
}

static void spin(cenv *e, weft_stream_id s, uint32_t us) {
  OK(weft_launch(e->dev, s, e->spin, one, one, NULL, 0, &us, sizeof(us)));
}

typedef struct reentry {
  cenv *e;
  weft_buffer mine, other;
  weft_capture *cap;
  weft_event pending, recorded;
  weft_status read, sync, address, wait, wait0, snapshot, stats, write, launch, replay, record,
      release, fill;
  int launches;
  _Atomic int calls;
} reentry;

enum { N = 4096, BIG = 8u << 20, LAUNCHES = 3000, REPLAYS = 200 };

static weft_status calls_weft(const weft_native_ctx *ctx, void *user) {
  (void)ctx;
  reentry *r = user;
  weft_device *dev = r->e->dev;
  atomic_fetch_add(&r->calls, 1);
  uint8_t byte;
  uint64_t addr;
  char *json = NULL;
  weft_device_stats stats = {0};
  r->read = weft_buffer_read(dev, 2, r->other, 0, &byte, 1);
  r->sync = weft_sync(dev, 2);
  r->address = weft_buffer_address(dev, r->other, &addr);
  r->wait = weft_event_wait(dev, r->pending, UINT64_MAX);
  r->wait0 = weft_event_wait(dev, r->pending, 0);
  r->snapshot = weft_memory_snapshot(dev, &json);
  free(json);
  r->stats = weft_device_stats_get(dev, &stats);
  /* Submissions: none of them may wait for the scheduler. */
  uint8_t *big = malloc(BIG);
  memset(big, 0x11, BIG);
  r->write = weft_buffer_write(dev, 2, r->other, 0, big, BIG);
  free(big); /* the write was staged: the caller's bytes may go at once */
  for (int i = 0; i < LAUNCHES && !r->launch; i++, r->launches++)
    r->launch = weft_buffer_fill(dev, 2, r->other, (uint64_t)(i % 64), 1, 0x22);
  for (int i = 0; i < REPLAYS && !r->replay; i++) r->replay = weft_capture_replay(r->cap);
  r->record = weft_event_record(dev, 2, &r->recorded);
  r->fill = weft_buffer_fill(dev, 2, r->other, BIG - 4, 4, 0x33);
  return NULL;
}

/* A blocking call from the scheduler's thread: refused, saying why. */
#define refused(st, what)               EXPECT_KIND((st), WEFT_ERR_INVALID_ARGUMENT, "scheduler")

Test(native_reentry, a_native_kernel_calling_its_device_is_refused_or_served_never_deadlocks,
     .timeout = 120) {
  cenv e = cenv_new();
  reentry r = {.e = &e};
  weft_kernel k;
  OK(weft_kernel_native(e.dev, "calls_weft", calls_weft, &r, &k));
  r.mine = make(&e, 0, 64);
  r.other = make(&e, 2, BIG);
  weft_buffer counted = make(&e, 3, N * 4);
  /* A capture on stream 3 that fills |counted| with 5.0. */
  weft_stream_id s3 = 3;
  OK(weft_capture_prepare(e.dev, &s3, 1, &r.cap));
  OK(weft_capture_begin(r.cap));
  fill_f32(&e, 3, counted, N, 5.0f);
  OK(weft_capture_end(r.cap));
  /* Stream 1 is busy: an event recorded there after the spin is unfinished
   * while the native kernel runs on stream 0 (the scheduler is in it). */
  spin(&e, 1, 200000);
  OK(weft_event_record(e.dev, 1, &r.pending));
  weft_binding b = {r.mine, 0, WEFT_WHOLE, WEFT_WRITE};
  OK(weft_launch(e.dev, 0, k, one, one, &b, 1, NULL, 0));
  OK(weft_sync(e.dev, 0));
  cr_assert_eq(atomic_load(&r.calls), 1);
  refused(r.read, "read");
  refused(r.sync, "sync");
  refused(r.address, "address");
  refused(r.wait, "wait");
  refused(r.snapshot, "snapshot");
  refused(r.stats, "stats");
  /* A wait of 0 only asks: Timeout or done, never refused, never blocks. */
  if (r.wait0) {
    cr_assert_eq(weft_error_kind_of(r.wait0), WEFT_ERR_TIMEOUT, "%s", weft_error_message(r.wait0));
    weft_error_free(r.wait0);
  }
  OK(r.write);
  OK(r.launch);
  cr_assert_eq(r.launches, LAUNCHES);
  OK(r.replay);
  OK(r.record);
  OK(r.fill);
  /* Everything it queued ran, in order. */
  OK(weft_event_wait(e.dev, r.recorded, UINT64_MAX));
  uint8_t *got = malloc(BIG);
  OK(weft_buffer_read(e.dev, 2, r.other, 0, got, BIG));
  for (uint64_t i = 0; i < 64; i++) cr_assert_eq(got[i], 0x22, "byte %" PRIu64, i);
  cr_assert_eq(got[64], 0x11);
  cr_assert_eq(got[BIG - 5], 0x11);
  for (uint64_t i = BIG - 4; i < BIG; i++) cr_assert_eq(got[i], 0x33);
  free(got);
  float f[4];
  OK(weft_buffer_read(e.dev, 3, counted, 0, f, sizeof f));
  cr_assert_eq(f[0], 5.0f);
  OK(weft_event_wait(e.dev, r.pending, UINT64_MAX));
  OK(weft_event_release(e.dev, r.pending));
  OK(weft_event_release(e.dev, r.recorded));
  weft_capture_destroy(r.cap);
  OK(weft_buffer_release(e.dev, r.mine));
  OK(weft_buffer_release(e.dev, r.other));
  OK(weft_buffer_release(e.dev, counted));
  cenv_close(&e);
}

/* An import's release callback runs on the scheduler's thread on CUDA too. */
typedef struct released {
  cenv *e;
  weft_buffer other;
  weft_status read, fill;
  _Atomic int calls;
} released;

static void on_release(void *user) {
  released *r = user;
  uint8_t byte;
  r->read = weft_buffer_read(r->e->dev, 0, r->other, 0, &byte, 1);
  r->fill = weft_buffer_fill(r->e->dev, 0, r->other, 0, 4, 9);
  atomic_fetch_add(&r->calls, 1);
}

Test(native_reentry, an_imports_release_callback_calling_its_device_never_deadlocks,
     .timeout = 60) {
  cenv e = cenv_new();
  released r = {.e = &e};
  r.other = make(&e, 0, 64);
  weft_buffer src = make(&e, 0, 64), imp;
  uint64_t at;
  OK(weft_buffer_address(e.dev, src, &at));
  OK(weft_buffer_import(e.dev, 0, at, 64, on_release, &r, &imp));
  OK(weft_buffer_fill(e.dev, 0, imp, 0, 64, 1));
  OK(weft_buffer_release(e.dev, imp));
  OK(weft_sync(e.dev, 0));
  for (int i = 0; i < 2000 && !atomic_load(&r.calls); i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  cr_assert_eq(atomic_load(&r.calls), 1);
  refused(r.read, "read");
  OK(r.fill);
  uint8_t got[4];
  OK(weft_buffer_read(e.dev, 0, r.other, 0, got, 4));
  cr_assert_eq(got[0], 9);
  OK(weft_buffer_release(e.dev, r.other));
  OK(weft_buffer_release(e.dev, src));
  cenv_close(&e);
}

#endif
