/* Memory the caller owns, on the host backend: weft_buffer_import wraps it
 * with no copy (kernels and reads see and change the caller's bytes), its
 * release callback runs exactly once on every path (release after the last
 * work retired, close, poison, every failed call), it counts in no pool's
 * usage, and taint works on it; weft_buffer_address; and the internal
 * export (scheduler/export.h), whose pin outlives release and close.
 * Counting allocator: zero live blocks at close. */
#include <criterion/criterion.h>

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "scheduler/export.h"
#include "support/asan_criterion.h"
#include "support/device_env.h"

static void expect_kind(weft_status st, weft_error_kind kind, const char *call, int line) {
  char text[2048] = "success";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: expected %s, got %s", line, call,
               weft_error_kind_name(kind), text);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind) expect_kind((call), (kind), #call, __LINE__)

static const uint32_t one[3] = {1, 1, 1};

static void count_release(void *user) {
  atomic_fetch_add((_Atomic int *)user, 1);
}

typedef struct gate {
  _Atomic int open;
} gate;

/* Waits for its gate, then adds 1 to every byte of its binding. */
static weft_status gated_inc(const weft_kernel_ctx *ctx, void *user) {
  gate *g = user;
  while (g && !atomic_load(&g->open)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  uint8_t *p = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0]; i++) p[i]++;
  return NULL;
}

static weft_status fails(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return weft_error_make(WEFT_ERR_GENERIC, "the kernel failed on purpose");
}

static void launch_rw(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer b) {
  weft_binding bd = {.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(dev, s, k, one, one, &bd, 1, NULL, 0));
}

static env env_failing(const char *spec) {
  env e;
  env_options(&e);
  e.opts.failpoints = spec;
  env_open(&e);
  return e;
}

Test(import, kernels_and_reads_use_the_callers_bytes_in_place) {
  env e = env_new();
  uint8_t mine[100];
  for (int i = 0; i < 100; i++) mine[i] = (uint8_t)i;
  _Atomic int released = 0;
  weft_buffer b;
  EXPECT_OK(weft_buffer_import(e.dev, 1, (uint64_t)(uintptr_t)mine, sizeof(mine), count_release,
                               &released, &b));
  uint64_t addr = 0;
  EXPECT_OK(weft_buffer_address(e.dev, b, &addr));
  cr_assert_eq(addr, (uint64_t)(uintptr_t)mine, "the address is not the caller's pointer");
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", gated_inc, NULL, &k));
  launch_rw(e.dev, 1, k, b);
  uint8_t back[100];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, back, sizeof(back)));
  for (int i = 0; i < 100; i++) {
    cr_assert_eq(back[i], (uint8_t)(i + 1));
    cr_assert_eq(mine[i], (uint8_t)(i + 1), "the kernel did not write the caller's bytes");
  }
  uint8_t w[4] = {9, 9, 9, 9};
  EXPECT_OK(weft_buffer_write(e.dev, 1, b, 10, w, sizeof(w)));
  EXPECT_OK(weft_sync(e.dev, 1));
  cr_assert_eq(mine[10], 9);
  /* No pool holds it. */
  weft_memory_usage u = {0};
  EXPECT_OK(weft_memory_usage_get(e.dev, &u));
  cr_assert_eq(u.bytes_in_use, 0);
  cr_assert_eq(u.number_allocs, 0);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_sync(e.dev, 1));
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(atomic_load(&released), 1);
  env_close(&e);
  cr_assert_eq(atomic_load(&released), 1, "released twice");
}

Test(import, the_callback_waits_for_the_last_work_that_uses_the_bytes) {
  env e = env_new();
  static uint8_t mine[64];
  _Atomic int released = 0;
  gate g = {0};
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "gated", gated_inc, &g, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)mine, sizeof(mine), count_release,
                               &released, &b));
  launch_rw(e.dev, 0, k, b);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  struct timespec ts = {0, 20 * 1000000};
  nanosleep(&ts, NULL);
  cr_assert_eq(atomic_load(&released), 0, "released while a kernel still used the bytes");
  atomic_store(&g.open, 1);
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &s)); /* a retirement pass after the sync */
  cr_assert_eq(atomic_load(&released), 1);
  cr_assert_eq(mine[0], 1);
  env_close(&e);
  cr_assert_eq(atomic_load(&released), 1);
}

Test(import, close_releases_a_live_imported_buffer_once) {
  env e = env_new();
  static uint8_t mine[64];
  _Atomic int released = 0;
  weft_buffer b;
  EXPECT_OK(weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)mine, sizeof(mine), count_release,
                               &released, &b));
  env_close(&e);
  cr_assert_eq(atomic_load(&released), 1);
}

Test(import, every_refused_import_runs_the_callback_once) {
  env e = env_new();
  static uint8_t mine[64];
  uint64_t a = (uint64_t)(uintptr_t)mine;
  struct {
    weft_device *dev;
    uint64_t address, size;
    bool out;
  } cases[] = {
      {e.dev, 0, 64, true},
      {e.dev, a, 0, true},
      {e.dev, a, WEFT_MAX_BUFFER_SIZE + 1, true},
      {e.dev, UINT64_MAX - 8, 64, true},
      {e.dev, a, 64, false},
      {NULL, a, 64, true},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    _Atomic int released = 0;
    weft_buffer b = {42};
    weft_status st = weft_buffer_import(cases[i].dev, 0, cases[i].address, cases[i].size,
                                        count_release, &released, cases[i].out ? &b : NULL);
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "case %zu", i);
    weft_error_free(st);
    cr_assert_eq(atomic_load(&released), 1, "case %zu: callback ran %d times", i,
                 atomic_load(&released));
    if (cases[i].out) cr_assert_eq(b.id, 0, "case %zu", i);
  }
  weft_buffer b; /* a NULL callback is allowed */
  EXPECT_KIND(weft_buffer_import(e.dev, 0, 0, 64, NULL, NULL, &b), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_OK(weft_buffer_import(e.dev, 0, a, 64, NULL, NULL, &b));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(import, a_create_that_runs_out_of_memory_still_runs_the_callback_once) {
  static uint8_t mine[64];
  bool failed = false, succeeded = false;
  for (uint64_t n = 1; n <= 3; n++) {
    env e = env_new();
    weft_buffer warm; /* the handle table's chunk exists */
    EXPECT_OK(weft_buffer_create(e.dev, 0, 8, &warm));
    EXPECT_OK(weft_buffer_release(e.dev, warm));
    _Atomic int released = 0;
    weft_counting_allocator_fail_at(e.ca, n);
    weft_buffer b;
    weft_status st = weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)mine, sizeof(mine),
                                        count_release, &released, &b);
    weft_counting_allocator_fail_at(e.ca, 0);
    if (st) {
      failed = true;
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY);
      weft_error_free(st);
      cr_assert_eq(atomic_load(&released), 1, "allocation %" PRIu64 " failed", n);
    } else {
      succeeded = true;
      EXPECT_OK(weft_buffer_release(e.dev, b));
    }
    env_close(&e);
    cr_assert_eq(atomic_load(&released), 1);
  }
  cr_assert(failed && succeeded, "the sweep did not reach both outcomes");
}

Test(import, a_poisoned_device_refuses_imports_and_releases_live_ones_at_close) {
  env e = env_failing("poison#1");
  static uint8_t mine[64], other[64];
  _Atomic int released = 0, refused = 0;
  weft_buffer b, c;
  EXPECT_OK(weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)mine, sizeof(mine), count_release,
                               &released, &b));
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", gated_inc, NULL, &k));
  launch_rw(e.dev, 0, k, b);
  weft_status st = weft_sync(e.dev, 0);
  cr_assert_not_null(st, "the device was not poisoned");
  weft_error_free(st);
  st = weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)other, sizeof(other), count_release,
                          &refused, &c);
  cr_assert_not_null(st);
  weft_error_free(st);
  cr_assert_eq(atomic_load(&refused), 1);
  env_close(&e);
  cr_assert_eq(atomic_load(&released), 1);
}

Test(import, a_failed_launch_taints_an_imported_buffer_like_any_other) {
  env e = env_new();
  static uint8_t mine[64];
  weft_buffer b;
  EXPECT_OK(weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)mine, sizeof(mine), NULL, NULL, &b));
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "fails", fails, NULL, &k));
  launch_rw(e.dev, 0, k, b);
  uint8_t back[64];
  weft_status st = weft_buffer_read(e.dev, 0, b, 0, back, sizeof(back));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_error_free(st);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(buffer_address, is_the_reserved_address_or_the_reservations_error) {
  env e = env_failing("alloc#1=OutOfMemory;alloc#2=OutOfMemory"); /* the retry fails too */
  weft_buffer bad, good;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4096, &bad)); /* its page allocation fails */
  uint64_t addr = 7;
  weft_status st = weft_buffer_address(e.dev, bad, &addr);
  cr_assert_not_null(st, "an unreserved buffer has an address");
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  cr_assert_not_null(strstr(text, "OutOfMemory"), "%s", text);
  weft_error_free(st);
  cr_assert_eq(addr, 0);
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4096, &good));
  EXPECT_OK(weft_buffer_address(e.dev, good, &addr));
  cr_assert_neq(addr, 0);
  weft_device_info info = {0};
  EXPECT_OK(weft_device_info_get(e.dev, &info));
  cr_assert_eq(addr % info.memory_align, 0);
  uint8_t src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_OK(weft_buffer_write(e.dev, 0, good, 0, src, 8));
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(memcmp((void *)(uintptr_t)addr, src, 8), 0, "the address is not the buffer's");
  EXPECT_KIND(weft_buffer_address(e.dev, good, NULL), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_buffer_address(NULL, good, &addr), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_OK(weft_buffer_release(e.dev, good));
  EXPECT_KIND(weft_buffer_address(e.dev, good, &addr), WEFT_ERR_NOT_FOUND);
  EXPECT_OK(weft_buffer_release(e.dev, bad));
  env_close(&e);
}

/* ---- exports (scheduler/export.h) ---- */

Test(export, a_pin_outlives_release_and_close_until_unexport) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4096, &b));
  uint8_t src[4096];
  for (int i = 0; i < 4096; i++) src[i] = (uint8_t)(i ^ 0x33);
  EXPECT_OK(weft_buffer_write(e.dev, 1, b, 0, src, sizeof(src)));
  uint64_t addr = 0;
  struct weft_export *x = NULL;
  EXPECT_OK(weft__buffer_export(e.dev, 0, b, 16, 100, &addr, &x));
  cr_assert_not_null(x);
  cr_assert_eq(memcmp((void *)(uintptr_t)addr, src + 16, 100), 0);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  weft_device_close(e.dev); /* the memory stays: the export pins it */
  cr_assert_eq(memcmp((void *)(uintptr_t)addr, src + 16, 100), 0, "freed under a live export");
  weft_alloc_counts c = weft_counting_allocator_counts(e.ca);
  cr_assert_gt(c.live_blocks, 0, "close freed everything under a live export");
  weft__buffer_unexport(x); /* the last pin finishes the teardown */
  c = weft_counting_allocator_counts(e.ca);
  cr_assert_eq(c.live_blocks, 0, "%" PRIu64 " blocks left after the last unexport", c.live_blocks);
  weft_counting_allocator_destroy(e.ca);
  weft__buffer_unexport(NULL);
}

Test(export, unexport_before_close_gives_the_memory_back_and_a_tainted_range_fails) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4096, &b));
  uint64_t addr;
  struct weft_export *x, *y;
  EXPECT_OK(weft__buffer_export(e.dev, 0, b, 0, 4096, &addr, &x));
  EXPECT_OK(weft__buffer_export(e.dev, 1, b, 0, 8, &addr, &y));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  weft__buffer_unexport(x);
  weft__buffer_unexport(y); /* the buffer goes at the scheduler's next pass */
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "fails", fails, NULL, &k));
  weft_buffer t;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &t));
  launch_rw(e.dev, 0, k, t);
  x = (struct weft_export *)1;
  EXPECT_KIND(weft__buffer_export(e.dev, 0, t, 0, 64, &addr, &x), WEFT_ERR_SEVERAL);
  cr_assert_null(x);
  EXPECT_KIND(weft__buffer_export(e.dev, 0, t, 60, 8, &addr, &x), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft__buffer_export(e.dev, 0, t, 0, 8, NULL, &x), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_OK(weft_buffer_release(e.dev, t));
  /* An imported buffer's callback waits for its export. */
  static uint8_t mine[32];
  _Atomic int released = 0;
  weft_buffer im;
  EXPECT_OK(weft_buffer_import(e.dev, 0, (uint64_t)(uintptr_t)mine, sizeof(mine), count_release,
                               &released, &im));
  EXPECT_OK(weft__buffer_export(e.dev, 0, im, 0, 32, &addr, &x));
  cr_assert_eq(addr, (uint64_t)(uintptr_t)mine);
  EXPECT_OK(weft_buffer_release(e.dev, im));
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(atomic_load(&released), 0, "released under a live export");
  weft__buffer_unexport(x);
  env_close(&e);
  cr_assert_eq(atomic_load(&released), 1);
}
