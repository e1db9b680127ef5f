/* Every public device, buffer, kernel, launch, sync, check and stats
 * call rejects bad input (NULL, zero or overflowing sizes, out-of-range
 * offsets, unknown kernels, stale or forged handles, too many bindings) with a
 * clear error of the right kind and a non-empty message; it never crashes,
 * leaks nothing (every device runs on a counting allocator that must end with
 * zero live blocks) and loses nothing (a rejected call submits no command and
 * the device keeps working). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

/* ---- helpers --------------------------------------------------------------------------- */

static void expect_err(weft_error_kind want, weft_status st, const char *call, int line) {
  cr_assert_not_null(st, "line %d: %s succeeded; expected %s", line, call,
                     weft_error_kind_name(want));
  char text[512];
  weft_error_format(st, text, sizeof(text));
  weft_error_kind got = weft_error_kind_of(st);
  cr_assert_eq(got, want, "line %d: %s failed with %s (%s); expected %s", line, call,
               weft_error_kind_name(got), text, weft_error_kind_name(want));
  cr_assert(weft_error_message(st)[0] != '\0', "line %d: %s: the %s error has no message", line,
            call, weft_error_kind_name(got));
  weft_error_free(st);
}

#define EXPECT_ERR(kind, call) expect_err((kind), (call), #call, __LINE__)
#define INVALID                WEFT_ERR_INVALID_ARGUMENT
#define NOT_FOUND              WEFT_ERR_NOT_FOUND

/* A device on a counting allocator. */
/* Closes the device and proves that it gave back every block it took. */
static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s = {0};
  memset(&s, 0xff, sizeof(s));
  s.struct_size = sizeof(s); /* every other byte is weft's to write */
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s;
}

/* out[i] = in[i] for the bytes both bindings hold (binding 0 read, 1 written). */
static weft_status copy_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  if (ctx->num_buffers < 2) return weft_error_make(WEFT_ERR_VALIDATION, "copy needs 2 bindings");
  uint64_t n = ctx->sizes[0] < ctx->sizes[1] ? ctx->sizes[0] : ctx->sizes[1];
  memcpy(ctx->buffers[1], ctx->buffers[0], (size_t)n);
  return NULL;
}

static weft_status nop_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return NULL;
}

static const uint32_t one[3] = {1, 1, 1};

/* The device still works: a write/read round trip through a launch on three
 * streams gives back the bytes written. */
static void assert_device_works(weft_device *dev) {
  enum { N = 300 };
  uint8_t in[N], out[N];
  for (int i = 0; i < N; i++) in[i] = (uint8_t)(i * 7 + 3);
  weft_buffer a, b;
  EXPECT_OK(weft_buffer_create(dev, 0, N, &a));
  EXPECT_OK(weft_buffer_create(dev, 1, N, &b));
  EXPECT_OK(weft_buffer_write(dev, 0, a, 0, in, N));
  memset(out, 0, N);
  EXPECT_OK(weft_buffer_read(dev, 2, a, 0, out, N));
  cr_assert_arr_eq(out, in, N, "write/read round trip lost bytes");
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(dev, "works_copy", copy_kernel, NULL, &k));
  weft_binding bd[2] = {{a, 0, WEFT_WHOLE, WEFT_READ}, {b, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(dev, 1, k, one, one, bd, 2, NULL, 0));
  memset(out, 0, N);
  EXPECT_OK(weft_buffer_read(dev, 2, b, 0, out, N));
  cr_assert_arr_eq(out, in, N, "a launch after rejected calls lost bytes");
  EXPECT_OK(weft_buffer_release(dev, a));
  EXPECT_OK(weft_buffer_release(dev, b));
}

/* Nothing was submitted between two snapshots but the second stats command. */
static void assert_nothing_submitted(const weft_device_stats *before,
                                     const weft_device_stats *after) {
  cr_assert_eq(after->commands, before->commands + 1,
               "a rejected call submitted %" PRIu64 " commands",
               after->commands - before->commands - 1);
  cr_assert_eq(after->launches, before->launches);
  cr_assert_eq(after->launches_run, before->launches_run);
  cr_assert_eq(after->launches_failed, before->launches_failed);
  cr_assert_eq(after->launches_skipped, before->launches_skipped);
  cr_assert_eq(after->buffers_live, before->buffers_live);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15u;
static uint64_t rng(void) {
  uint64_t x = rng_state;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return rng_state = x;
}

/* ---- weft_device_open / options ------------------------------------------------------------ */

/* Opens with |e->opts| and expects |kind|; *out NULL and no allocation made. */
static void expect_open_fails(env *e, weft_error_kind kind, int line) {
  weft_device *dev = (weft_device *)&dev; /* not NULL: open must clear it */
  expect_err(kind, weft_device_open(&e->opts, &dev), "weft_device_open", line);
  cr_assert_null(dev, "line %d: a failed open left *out set", line);
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "line %d: a failed open kept %" PRIu64 " blocks", line,
               c.live_blocks);
}

#define EXPECT_OPEN_FAILS(e, kind) expect_open_fails((e), (kind), __LINE__)

Test(device_open, null_out_is_invalid_argument) {
  env e;
  env_options(&e);
  EXPECT_ERR(INVALID, weft_device_open(&e.opts, NULL));
  EXPECT_ERR(INVALID, weft_device_open(NULL, NULL));
  cr_assert_eq(weft_counting_allocator_counts(e.ca).allocs, 0);
  weft_counting_allocator_destroy(e.ca);
}

Test(device_open, null_options_give_a_working_default_device) {
  weft_device *dev = NULL;
  EXPECT_OK(weft_device_open(NULL, &dev));
  cr_assert_not_null(dev);
  assert_device_works(dev);
  weft_device_close(dev);
}

Test(device_open, info_tells_the_backend_streams_and_capacity) {
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = 6;
  o.memory_capacity = 64u << 20;
  weft_device *dev = NULL;
  EXPECT_OK(weft_device_open(&o, &dev));
  weft_device_info info = {0};
  EXPECT_ERR(INVALID, weft_device_info_get(dev, NULL));
  EXPECT_OK(weft_device_info_get(dev, &info));
  cr_assert_eq(info.backend, WEFT_BACKEND_HOST);
  cr_assert_str_eq(info.name, "host");
  cr_assert_eq(info.max_streams, 6);
  cr_assert_eq(info.capacity, 64u << 20);
  cr_assert_eq(info.total_memory, 64u << 20);
  cr_assert_eq(info.driver_version, 0);
  cr_assert(info.memory_align > 0 && (info.memory_align & (info.memory_align - 1)) == 0);
  weft_device_close(dev);
  EXPECT_OK(weft_device_open(NULL, &dev));
  EXPECT_OK(weft_device_info_get(dev, &info));
  cr_assert_eq(info.capacity, 0, "an uncapped host device");
  weft_device_close(dev);
}

Test(device_open, close_and_options_init_accept_null) {
  weft_device_close(NULL);
  weft_device_options_init(NULL);
}

Test(device_open, bad_struct_size_is_invalid_argument) {
  env e;
  env_options(&e);
  const uint32_t bad[] = {0,
                          1,
                          (uint32_t)offsetof(weft_device_options, allocator) - 1,
                          (uint32_t)sizeof(weft_device_options) + 1,
                          (uint32_t)sizeof(weft_device_options) + 8,
                          UINT32_MAX};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    e.opts.struct_size = bad[i];
    EXPECT_OPEN_FAILS(&e, INVALID);
  }
  weft_counting_allocator_destroy(e.ca);
}

Test(device_open, struct_size_of_the_first_release_is_accepted) {
  /* Options written before |allocator| was added: the field is not read. */
  weft_device_options o;
  weft_device_options_init(&o);
  o.struct_size = (uint32_t)offsetof(weft_device_options, allocator);
  weft_device *dev = NULL;
  EXPECT_OK(weft_device_open(&o, &dev));
  assert_device_works(dev);
  weft_device_close(dev);
}

Test(device_open, max_streams_must_be_1_to_64) {
  env e;
  env_options(&e);
  const uint32_t bad[] = {0, 65, 1000, UINT32_MAX};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    e.opts.max_streams = bad[i];
    EXPECT_OPEN_FAILS(&e, INVALID);
  }
  const uint32_t good[] = {1, 64};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    e.opts.max_streams = good[i];
    env_open(&e);
    assert_device_works(e.dev);
    weft_device_close(e.dev);
    cr_assert_eq(weft_counting_allocator_counts(e.ca).live_blocks, 0);
  }
  weft_counting_allocator_destroy(e.ca);
}

Test(device_open, max_tasks_zero_is_invalid_argument) {
  env e;
  env_options(&e);
  e.opts.max_tasks = 0;
  EXPECT_OPEN_FAILS(&e, INVALID);
  e.opts.max_tasks = 1;
  env_open(&e);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(device_open, unknown_backend_is_invalid_argument) {
  env e;
  env_options(&e);
  const int bad[] = {2, 3, -1, 1000};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    e.opts.backend = (weft_backend)bad[i];
    EXPECT_OPEN_FAILS(&e, INVALID);
  }
  weft_counting_allocator_destroy(e.ca);
}

Test(device_open, cuda_backend_is_a_clear_unsupported_error) {
  env e;
  env_options(&e);
  e.opts.backend = WEFT_BACKEND_CUDA;
  weft_device *dev = NULL;
  weft_status st = weft_device_open(&e.opts, &dev);
  cr_assert_null(dev);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_UNSUPPORTED_IO_OPERATION, "got %s",
               weft_error_kind_name(weft_error_kind_of(st)));
  cr_assert_not_null(strstr(weft_error_message(st), "CUDA"), "message '%s' does not name CUDA",
                     weft_error_message(st));
  weft_error_free(st);
  cr_assert_eq(weft_counting_allocator_counts(e.ca).live_blocks, 0);
  weft_counting_allocator_destroy(e.ca);
}

Test(device_open, unknown_strategy_is_invalid_argument) {
  env e;
  env_options(&e);
  const int bad[] = {2, -1, 77};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    e.opts.strategy = (weft_strategy)bad[i];
    EXPECT_OPEN_FAILS(&e, INVALID);
  }
  e.opts.strategy = WEFT_STRATEGY_SEQUENTIAL;
  env_open(&e);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(device_open, malformed_failpoints_are_rejected_valid_ones_accepted) {
  env e;
  env_options(&e);
  const char *bad[] = {"garbage",
                       "launch#0=Generic",
                       "launch#1=NoSuchKind",
                       "alloc#x=OutOfMemory",
                       "poison#2=Generic",
                       "kernel:=Generic",
                       "launch#1",
                       "alloc#99999999999999999999=Unknown",
                       "launch#1=Ok"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    e.opts.failpoints = bad[i];
    EXPECT_OPEN_FAILS(&e, INVALID);
  }
  const char *good[] = {"launch#1=Generic", "alloc#2=OutOfMemory", ";", " poison#3 ; ",
                        "kernel:k=Validation;launch#2=Unknown"};
  for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
    e.opts.failpoints = good[i];
    env_open(&e);
    weft_device_close(e.dev);
  }
  /* NULL and "" mean none. */
  e.opts.failpoints = "";
  env_open(&e);
  weft_device_close(e.dev);
  e.opts.failpoints = NULL;
  env_open(&e);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(device_open, allocator_with_a_null_function_is_invalid_argument) {
  env e;
  env_options(&e);
  weft_allocator broken = e.alloc;
  e.opts.allocator = &broken;
  broken.alloc = NULL;
  EXPECT_OPEN_FAILS(&e, INVALID);
  broken = e.alloc;
  broken.free = NULL;
  EXPECT_OPEN_FAILS(&e, INVALID);
  broken.alloc = NULL;
  EXPECT_OPEN_FAILS(&e, INVALID);
  /* A NULL allocator pointer means the default. */
  e.opts.allocator = NULL;
  weft_device *dev = NULL;
  EXPECT_OK(weft_device_open(&e.opts, &dev));
  assert_device_works(dev);
  weft_device_close(dev);
  cr_assert_eq(weft_counting_allocator_counts(e.ca).allocs, 0);
  weft_counting_allocator_destroy(e.ca);
}

Test(device_open, allocator_out_of_memory_at_every_step_fails_cleanly) {
  /* Every allocation open makes, failed in turn: OutOfMemory, nothing kept. */
  env e;
  env_options(&e);
  for (uint64_t k = 1;; k++) {
    cr_assert_lt(k, 1000, "open never succeeded");
    weft_counting_allocator_fail_at(e.ca, k);
    weft_device *dev = NULL;
    weft_status st = weft_device_open(&e.opts, &dev);
    weft_counting_allocator_fail_at(e.ca, 0);
    if (!st) {
      cr_assert_not_null(dev);
      assert_device_works(dev);
      weft_device_close(dev);
      cr_assert_eq(weft_counting_allocator_counts(e.ca).live_blocks, 0);
      break;
    }
    cr_assert_null(dev);
    expect_err(WEFT_ERR_OUT_OF_MEMORY, st, "weft_device_open under allocation failure", __LINE__);
    cr_assert_eq(weft_counting_allocator_counts(e.ca).live_blocks, 0,
                 "open failing at allocation %" PRIu64 " leaked", k);
  }
  weft_counting_allocator_destroy(e.ca);
  ASSERT_NO_LEAKS();
}

/* ---- a NULL device -----------------------------------------------------------------------------
 */

Test(null_device, every_call_is_invalid_argument) {
  uint8_t bytes[16] = {0};
  weft_buffer b = {1};
  weft_kernel k = {1};
  weft_device_stats s = {0};
  weft_buffer out = {12345};
  EXPECT_ERR(INVALID, weft_buffer_create(NULL, 0, 16, &out));
  cr_assert_eq(out.id, 0, "a failed create left a handle");
  EXPECT_ERR(INVALID, weft_buffer_write(NULL, 0, b, 0, bytes, 16));
  EXPECT_ERR(INVALID, weft_buffer_read(NULL, 0, b, 0, bytes, 16));
  EXPECT_ERR(INVALID, weft_buffer_release(NULL, b));
  weft_kernel kout = {12345};
  EXPECT_ERR(INVALID, weft_kernel_host(NULL, "k", nop_kernel, NULL, &kout));
  cr_assert_eq(kout.id, 0, "a failed registration left a handle");
  EXPECT_ERR(INVALID, weft_launch(NULL, 0, k, one, one, NULL, 0, NULL, 0));
  EXPECT_ERR(INVALID, weft_sync(NULL, 0));
  EXPECT_ERR(INVALID, weft_check(NULL, &b, 1));
  EXPECT_ERR(INVALID, weft_check(NULL, NULL, 0));
  EXPECT_ERR(INVALID, weft_device_stats_get(NULL, &s));
  EXPECT_ERR(INVALID, weft_device_stats_get(NULL, NULL));
  weft_device_info info = {0};
  EXPECT_ERR(INVALID, weft_device_info_get(NULL, &info));
  ASSERT_NO_LEAKS();
}

/* ---- buffers ------------------------------------------------------------------------------------
 */

Test(buffer_args, create_with_null_out_is_invalid_argument) {
  env e = env_new();
  weft_device_stats s0 = stats_of(e.dev);
  EXPECT_ERR(INVALID, weft_buffer_create(e.dev, 0, 64, NULL));
  weft_device_stats s1 = stats_of(e.dev);
  assert_nothing_submitted(&s0, &s1);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, create_size_zero_is_invalid_argument) {
  env e = env_new();
  weft_buffer b = {777};
  EXPECT_ERR(INVALID, weft_buffer_create(e.dev, 0, 0, &b));
  cr_assert_eq(b.id, 0);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, create_larger_than_max_buffer_size_is_invalid_argument) {
  env e = env_new();
  weft_device_stats s0 = stats_of(e.dev);
  const uint64_t bad[] = {WEFT_MAX_BUFFER_SIZE + 1, WEFT_MAX_BUFFER_SIZE * 2, UINT64_MAX - 63,
                          UINT64_MAX};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_buffer b = {777};
    EXPECT_ERR(INVALID, weft_buffer_create(e.dev, 0, bad[i], &b));
    cr_assert_eq(b.id, 0);
  }
  weft_device_stats s1 = stats_of(e.dev);
  assert_nothing_submitted(&s0, &s1);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, create_of_exactly_max_buffer_size_is_accepted_and_fails_lazily) {
  /* The largest legal size is accepted; a host device capped at 1 MiB can
   * never hold it, which its reads report (BufferTooBig inside Unwritten). */
  env e;
  env_options(&e);
  e.opts.memory_capacity = 1u << 20;
  env_open(&e);
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, WEFT_MAX_BUFFER_SIZE, &b));
  uint8_t byte;
  weft_status st = weft_buffer_read(e.dev, 0, b, WEFT_MAX_BUFFER_SIZE - 1, &byte, 1);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  cr_assert_eq(weft_error_count(st), 1);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN);
  cr_assert_eq(weft_error_kind_of(weft_error_root(u)), WEFT_ERR_BUFFER_TOO_BIG);
  cr_assert_eq(weft_error_size(weft_error_root(u)), WEFT_MAX_BUFFER_SIZE);
  weft_error_free(st);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, write_with_null_src_is_invalid_argument) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, 0, NULL, 1));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, 0, NULL, 64));
  /* Nothing to copy: NULL is fine. */
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, NULL, 0));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  assert_device_works(e.dev);
  env_close(&e);
}

/* Writes a known pattern to |b| (|size| bytes) and checks it is still there. */
static void fill_pattern(weft_device *dev, weft_buffer b, uint64_t size, uint8_t seed) {
  uint8_t *p = malloc(size);
  for (uint64_t i = 0; i < size; i++) p[i] = (uint8_t)(seed + i);
  EXPECT_OK(weft_buffer_write(dev, 0, b, 0, p, size));
  free(p);
}

static void assert_pattern(weft_device *dev, weft_buffer b, uint64_t size, uint8_t seed) {
  uint8_t *p = malloc(size);
  EXPECT_OK(weft_buffer_read(dev, 1, b, 0, p, size));
  for (uint64_t i = 0; i < size; i++)
    cr_assert_eq(p[i], (uint8_t)(seed + i), "byte %" PRIu64 " changed by a rejected call", i);
  free(p);
}

Test(buffer_args, write_out_of_range_is_invalid_argument_and_writes_nothing) {
  env e = env_new();
  enum { SIZE = 100 };
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, SIZE, &b));
  fill_pattern(e.dev, b, SIZE, 9);
  uint8_t junk[256];
  memset(junk, 0xee, sizeof(junk));
  weft_device_stats s0 = stats_of(e.dev);
  /* offset past the end */
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, SIZE + 1, junk, 0));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, SIZE + 1, junk, 1));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, UINT64_MAX, junk, 1));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, UINT64_MAX, junk, 0));
  /* offset + len overflows */
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, 8, junk, UINT64_MAX));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, 1, junk, UINT64_MAX));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, SIZE, junk, UINT64_MAX));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, UINT64_MAX - 8, junk, 16));
  /* len past the end */
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, 0, junk, SIZE + 1));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, SIZE - 1, junk, 2));
  EXPECT_ERR(INVALID, weft_buffer_write(e.dev, 0, b, SIZE, junk, 1));
  weft_device_stats s1 = stats_of(e.dev);
  assert_nothing_submitted(&s0, &s1);
  /* The edges themselves are fine. */
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, SIZE, junk, 0));
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, junk, 0));
  assert_pattern(e.dev, b, SIZE, 9);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, read_with_null_dst_is_invalid_argument) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  fill_pattern(e.dev, b, 64, 1);
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, 0, NULL, 1));
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, 0, NULL, 64));
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, NULL, 0));
  assert_pattern(e.dev, b, 64, 1);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, read_out_of_range_is_invalid_argument_and_touches_nothing) {
  env e = env_new();
  enum { SIZE = 100 };
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, SIZE, &b));
  fill_pattern(e.dev, b, SIZE, 200);
  uint8_t dst[256];
  memset(dst, 0x5a, sizeof(dst));
  weft_device_stats s0 = stats_of(e.dev);
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, SIZE + 1, dst, 0));
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, SIZE + 1, dst, 1));
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, UINT64_MAX, dst, 1));
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, 8, dst, UINT64_MAX));
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, SIZE, dst, UINT64_MAX));
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, UINT64_MAX - 8, dst, 16));
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, 0, dst, SIZE + 1));
  EXPECT_ERR(INVALID, weft_buffer_read(e.dev, 0, b, SIZE - 1, dst, 2));
  weft_device_stats s1 = stats_of(e.dev);
  assert_nothing_submitted(&s0, &s1);
  for (size_t i = 0; i < sizeof(dst); i++) cr_assert_eq(dst[i], 0x5a, "a rejected read wrote dst");
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, SIZE, dst, 0));
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, SIZE - 1, dst, 1));
  cr_assert_eq(dst[0], (uint8_t)(200 + SIZE - 1));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  assert_device_works(e.dev);
  env_close(&e);
}

/* Every buffer call with |b| fails with NotFound. */
static void expect_dead_handle(weft_device *dev, weft_buffer b, int line) {
  uint8_t bytes[8] = {0};
  expect_err(NOT_FOUND, weft_buffer_write(dev, 0, b, 0, bytes, 8), "write", line);
  expect_err(NOT_FOUND, weft_buffer_write(dev, 0, b, 0, bytes, 0), "empty write", line);
  expect_err(NOT_FOUND, weft_buffer_read(dev, 0, b, 0, bytes, 8), "read", line);
  expect_err(NOT_FOUND, weft_buffer_read(dev, 0, b, 0, bytes, 0), "empty read", line);
  expect_err(NOT_FOUND, weft_buffer_release(dev, b), "release", line);
  expect_err(NOT_FOUND, weft_check(dev, &b, 1), "check", line);
}

#define EXPECT_DEAD_HANDLE(dev, b) expect_dead_handle((dev), (b), __LINE__)

Test(buffer_args, released_handle_is_not_found_everywhere) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  fill_pattern(e.dev, b, 64, 3);
  EXPECT_OK(weft_sync(e.dev, 0)); /* the buffer is freed as soon as it is released */
  EXPECT_OK(weft_buffer_release(e.dev, b));
  weft_device_stats s0 = stats_of(e.dev);
  EXPECT_DEAD_HANDLE(e.dev, b);
  weft_device_stats s1 = stats_of(e.dev);
  assert_nothing_submitted(&s0, &s1);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, double_release_is_not_found) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_ERR(NOT_FOUND, weft_buffer_release(e.dev, b));
  EXPECT_ERR(NOT_FOUND, weft_buffer_release(e.dev, b));
  cr_assert_eq(stats_of(e.dev).buffers_live, 0);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, stale_handle_stays_dead_when_its_slot_is_reused) {
  env e = env_new();
  weft_buffer old, fresh;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &old));
  EXPECT_OK(weft_buffer_release(e.dev, old));
  (void)stats_of(e.dev); /* the scheduler has recycled the slot */
  EXPECT_OK(weft_buffer_create(e.dev, 0, 32, &fresh));
  cr_assert_eq((uint32_t)fresh.id, (uint32_t)old.id, "expected the slot to be reused");
  cr_assert_neq(fresh.id, old.id, "a reused slot kept its generation");
  fill_pattern(e.dev, fresh, 32, 77);
  EXPECT_DEAD_HANDLE(e.dev, old);
  /* The stale handle did not disturb the new buffer. */
  assert_pattern(e.dev, fresh, 32, 77);
  EXPECT_OK(weft_buffer_release(e.dev, fresh));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, forged_handles_are_not_found) {
  env e = env_new();
  weft_buffer live;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &live));
  fill_pattern(e.dev, live, 64, 50);
  uint64_t gen = live.id >> 32, idx = (uint32_t)live.id;
  weft_device_stats s0 = stats_of(e.dev);
  EXPECT_DEAD_HANDLE(e.dev, ((weft_buffer){0}));
  EXPECT_DEAD_HANDLE(e.dev, ((weft_buffer){UINT64_MAX}));
  EXPECT_DEAD_HANDLE(e.dev, ((weft_buffer){idx}));             /* generation 0 */
  EXPECT_DEAD_HANDLE(e.dev, ((weft_buffer){gen << 32}));       /* index 0 */
  EXPECT_DEAD_HANDLE(e.dev, ((weft_buffer){(gen << 32) | 2})); /* never handed out */
  EXPECT_DEAD_HANDLE(e.dev, ((weft_buffer){(gen << 32) | 0xffffffffu}));
  /* A valid index with a wrong generation: older, newer, the dead (even) one. */
  const uint64_t wrong[] = {gen + 1, gen - 1, gen + 2, gen - 2, gen ^ 0x80000000u, 1, 0xffffffffu};
  for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
    uint64_t g = wrong[i] & 0xffffffffu;
    if (g == gen) continue;
    EXPECT_DEAD_HANDLE(e.dev, ((weft_buffer){(g << 32) | idx}));
  }
  /* Random ids, and random generations on the live index. */
  for (int i = 0; i < 2000; i++) {
    weft_buffer r = {rng()};
    if (i & 1) r.id = (r.id & ~(uint64_t)0xffffffffu) | idx;
    if (r.id == live.id) continue;
    EXPECT_DEAD_HANDLE(e.dev, r);
  }
  weft_device_stats s1 = stats_of(e.dev);
  assert_nothing_submitted(&s0, &s1);
  assert_pattern(e.dev, live, 64, 50);
  EXPECT_OK(weft_buffer_release(e.dev, live));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(buffer_args, handle_of_another_device_is_not_found) {
  env a = env_new(), b = env_new();
  weft_buffer on_a, on_b;
  EXPECT_OK(weft_buffer_create(a.dev, 0, 64, &on_a));
  EXPECT_OK(weft_buffer_create(b.dev, 0, 64, &on_b));
  cr_assert_eq((uint32_t)on_a.id, (uint32_t)on_b.id, "both sit in slot 1 of their device");
  cr_assert_neq(on_a.id, on_b.id, "two devices handed out the same handle");
  fill_pattern(b.dev, on_b, 64, 11);
  EXPECT_DEAD_HANDLE(b.dev, on_a);
  EXPECT_DEAD_HANDLE(a.dev, on_b);
  assert_pattern(b.dev, on_b, 64, 11);
  EXPECT_OK(weft_buffer_release(a.dev, on_a));
  EXPECT_OK(weft_buffer_release(b.dev, on_b));
  assert_device_works(a.dev);
  assert_device_works(b.dev);
  env_close(&a);
  env_close(&b);
}

/* ---- kernels
 * -------------------------------------------------------------------------------------- */

Test(kernel_args, null_name_fn_or_out_is_invalid_argument) {
  env e = env_new();
  weft_kernel k = {99};
  EXPECT_ERR(INVALID, weft_kernel_host(e.dev, NULL, nop_kernel, NULL, &k));
  cr_assert_eq(k.id, 0);
  k.id = 99;
  EXPECT_ERR(INVALID, weft_kernel_host(e.dev, "k", NULL, NULL, &k));
  cr_assert_eq(k.id, 0);
  EXPECT_ERR(INVALID, weft_kernel_host(e.dev, "k", nop_kernel, NULL, NULL));
  EXPECT_ERR(INVALID, weft_kernel_host(e.dev, NULL, NULL, NULL, NULL));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(kernel_args, name_must_be_1_to_255_bytes) {
  env e = env_new();
  char name[400];
  weft_kernel k = {99};
  EXPECT_ERR(INVALID, weft_kernel_host(e.dev, "", nop_kernel, NULL, &k));
  cr_assert_eq(k.id, 0);
  memset(name, 'n', sizeof(name));
  name[256] = '\0';
  EXPECT_ERR(INVALID, weft_kernel_host(e.dev, name, nop_kernel, NULL, &k));
  name[399] = '\0';
  EXPECT_ERR(INVALID, weft_kernel_host(e.dev, name, nop_kernel, NULL, &k));
  name[255] = '\0';
  EXPECT_OK(weft_kernel_host(e.dev, name, nop_kernel, NULL, &k));
  cr_assert_neq(k.id, 0);
  EXPECT_OK(weft_launch(e.dev, 0, k, one, one, NULL, 0, NULL, 0));
  EXPECT_OK(weft_kernel_host(e.dev, "x", nop_kernel, NULL, &k));
  EXPECT_OK(weft_sync(e.dev, 0));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(kernel_args, registering_past_the_kernel_table_is_invalid_argument) {
  env e = env_new();
  weft_kernel k, first = {0};
  uint32_t n = 0;
  for (;; n++) {
    cr_assert_lt(n, 1u << 20, "the kernel table never filled");
    char name[32];
    snprintf(name, sizeof(name), "k%" PRIu32, n);
    weft_status st = weft_kernel_host(e.dev, name, nop_kernel, NULL, &k);
    if (st) {
      expect_err(INVALID, st, "weft_kernel_host past the table", __LINE__);
      cr_assert_eq(k.id, 0);
      break;
    }
    if (n == 0) first = k;
  }
  cr_assert_geq(n, 1024, "only %" PRIu32 " kernels fit", n);
  /* Still full, still clean, and the registered kernels still launch. */
  EXPECT_ERR(INVALID, weft_kernel_host(e.dev, "more", nop_kernel, NULL, &k));
  EXPECT_OK(weft_launch(e.dev, 0, first, one, one, NULL, 0, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(stats_of(e.dev).launches_run, 1);
  env_close(&e);
}

/* ---- launches
 * --------------------------------------------------------------------------------------- */

typedef struct launch_env {
  env e;
  weft_kernel copy;
  weft_buffer in, out;
} launch_env;

enum { LSIZE = 256 };

static launch_env launch_env_new(void) {
  launch_env l;
  l.e = env_new();
  EXPECT_OK(weft_kernel_host(l.e.dev, "copy", copy_kernel, NULL, &l.copy));
  EXPECT_OK(weft_buffer_create(l.e.dev, 0, LSIZE, &l.in));
  EXPECT_OK(weft_buffer_create(l.e.dev, 1, LSIZE, &l.out));
  fill_pattern(l.e.dev, l.in, LSIZE, 42);
  fill_pattern(l.e.dev, l.out, LSIZE, 7);
  return l;
}

/* Nothing ran, |out| kept its bytes, and the device still launches. */
static void launch_env_close(launch_env *l, const weft_device_stats *before) {
  weft_device_stats after = stats_of(l->e.dev);
  assert_nothing_submitted(before, &after);
  EXPECT_OK(weft_sync(l->e.dev, 0));
  EXPECT_OK(weft_sync(l->e.dev, 1));
  assert_pattern(l->e.dev, l->out, LSIZE, 7);
  weft_binding bd[2] = {{l->in, 0, WEFT_WHOLE, WEFT_READ}, {l->out, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(l->e.dev, 2, l->copy, one, one, bd, 2, NULL, 0));
  assert_pattern(l->e.dev, l->out, LSIZE, 42);
  EXPECT_OK(weft_buffer_release(l->e.dev, l->in));
  EXPECT_OK(weft_buffer_release(l->e.dev, l->out));
  assert_device_works(l->e.dev);
  env_close(&l->e);
}

Test(launch_args, forged_or_zero_kernel_is_not_found) {
  launch_env l = launch_env_new();
  weft_device_stats s0 = stats_of(l.e.dev);
  weft_binding bd[2] = {{l.in, 0, WEFT_WHOLE, WEFT_READ}, {l.out, 0, WEFT_WHOLE, WEFT_WRITE}};
  uint64_t id = l.copy.id, tag = id >> 32, idx = (uint32_t)id;
  const uint64_t forged[] = {0,
                             1,
                             idx,                       /* no device tag */
                             tag << 32,                 /* index 0 */
                             (tag << 32) | (idx + 1),   /* not registered */
                             (tag << 32) | 4096,        /* last slot, not registered */
                             (tag << 32) | 4097,        /* past the table */
                             (tag << 32) | 0xffffffffu, /* far past the table */
                             ((tag + 1) << 32) | idx,   /* another tag */
                             ((tag ^ 0x80000000u) << 32) | idx,
                             UINT64_MAX};
  for (size_t i = 0; i < sizeof(forged) / sizeof(forged[0]); i++) {
    weft_kernel k = {forged[i]};
    EXPECT_ERR(NOT_FOUND, weft_launch(l.e.dev, 0, k, one, one, bd, 2, NULL, 0));
  }
  for (int i = 0; i < 1000; i++) {
    weft_kernel k = {rng()};
    if (k.id == id) continue;
    EXPECT_ERR(NOT_FOUND, weft_launch(l.e.dev, 0, k, one, one, bd, 2, NULL, 0));
  }
  launch_env_close(&l, &s0);
}

Test(launch_args, kernel_of_another_device_is_not_found) {
  launch_env l = launch_env_new();
  env other = env_new();
  weft_kernel foreign;
  EXPECT_OK(weft_kernel_host(other.dev, "copy", copy_kernel, NULL, &foreign));
  cr_assert_neq(foreign.id, l.copy.id);
  weft_device_stats s0 = stats_of(l.e.dev);
  weft_binding bd[2] = {{l.in, 0, WEFT_WHOLE, WEFT_READ}, {l.out, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_ERR(NOT_FOUND, weft_launch(l.e.dev, 0, foreign, one, one, bd, 2, NULL, 0));
  EXPECT_ERR(NOT_FOUND, weft_launch(other.dev, 0, l.copy, one, one, NULL, 0, NULL, 0));
  assert_device_works(other.dev);
  env_close(&other);
  launch_env_close(&l, &s0);
}

Test(launch_args, null_or_zero_dimensions_are_invalid_argument) {
  launch_env l = launch_env_new();
  weft_device_stats s0 = stats_of(l.e.dev);
  weft_binding bd[2] = {{l.in, 0, WEFT_WHOLE, WEFT_READ}, {l.out, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, NULL, one, bd, 2, NULL, 0));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, NULL, bd, 2, NULL, 0));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, NULL, NULL, bd, 2, NULL, 0));
  const uint32_t zeros[][3] = {{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {0, 0, 0}, {4, 4, 0}};
  for (size_t i = 0; i < sizeof(zeros) / sizeof(zeros[0]); i++) {
    EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, zeros[i], one, bd, 2, NULL, 0));
    EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, zeros[i], bd, 2, NULL, 0));
  }
  launch_env_close(&l, &s0);
}

Test(launch_args, too_many_or_null_bindings_are_invalid_argument) {
  launch_env l = launch_env_new();
  weft_binding bd[WEFT_MAX_BINDINGS + 1];
  for (size_t i = 0; i < WEFT_MAX_BINDINGS + 1; i++) bd[i] = (weft_binding){l.in, 0, 1, WEFT_READ};
  bd[0] = (weft_binding){l.out, 0, WEFT_WHOLE, WEFT_WRITE};
  weft_device_stats s0 = stats_of(l.e.dev);
  EXPECT_ERR(INVALID,
             weft_launch(l.e.dev, 0, l.copy, one, one, bd, WEFT_MAX_BINDINGS + 1, NULL, 0));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, SIZE_MAX, NULL, 0));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, NULL, 1, NULL, 0));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, NULL, 2, NULL, 0));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, NULL, SIZE_MAX, NULL, 0));
  weft_device_stats s1 = stats_of(l.e.dev);
  assert_nothing_submitted(&s0, &s1);
  /* Exactly WEFT_MAX_BINDINGS is fine (and NULL with 0). */
  EXPECT_OK(weft_launch(l.e.dev, 0, l.copy, one, one, bd + 1, WEFT_MAX_BINDINGS, NULL, 0));
  weft_kernel nop;
  EXPECT_OK(weft_kernel_host(l.e.dev, "nop", nop_kernel, NULL, &nop));
  EXPECT_OK(weft_launch(l.e.dev, 0, nop, one, one, NULL, 0, NULL, 0));
  EXPECT_OK(weft_sync(l.e.dev, 0));
  weft_device_stats s2 = stats_of(l.e.dev);
  cr_assert_eq(s2.launches_run, s1.launches_run + 2);
  launch_env_close(&l, &s2);
}

Test(launch_args, invalid_access_is_invalid_argument) {
  launch_env l = launch_env_new();
  weft_device_stats s0 = stats_of(l.e.dev);
  const int bad[] = {0, 4, 7, -1, 1000};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_binding bd[2] = {{l.in, 0, WEFT_WHOLE, WEFT_READ},
                          {l.out, 0, WEFT_WHOLE, (weft_access)bad[i]}};
    EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, 0));
    bd[0].access = (weft_access)bad[i];
    bd[1].access = WEFT_WRITE;
    EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, 0));
  }
  launch_env_close(&l, &s0);
}

Test(launch_args, binding_out_of_range_is_invalid_argument) {
  launch_env l = launch_env_new();
  weft_device_stats s0 = stats_of(l.e.dev);
  const struct {
    uint64_t offset, size;
  } bad[] = {
      {LSIZE + 1, 0},          /* offset past the end */
      {LSIZE + 1, WEFT_WHOLE}, /* offset past the end, whole */
      {UINT64_MAX, 1},         /* offset far past the end */
      {UINT64_MAX, WEFT_WHOLE},
      {0, LSIZE + 1},      /* size past the end */
      {LSIZE - 1, 2},      /* offset + size past the end */
      {LSIZE, 1},          /* at the end, one byte */
      {8, UINT64_MAX - 1}, /* offset + size overflows */
      {1, UINT64_MAX - 4},
      {UINT64_MAX - 8, 16},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    /* as the output, and as the input */
    weft_binding bd[2] = {{l.in, 0, WEFT_WHOLE, WEFT_READ},
                          {l.out, bad[i].offset, bad[i].size, WEFT_WRITE}};
    EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, 0));
    bd[1] = (weft_binding){l.out, 0, WEFT_WHOLE, WEFT_WRITE};
    bd[0] = (weft_binding){l.in, bad[i].offset, bad[i].size, WEFT_READ};
    EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, 0));
  }
  launch_env_close(&l, &s0);
}

static weft_status record_sizes_kernel(const weft_kernel_ctx *ctx, void *user) {
  uint64_t *sizes = user;
  for (size_t i = 0; i < ctx->num_buffers; i++) sizes[i] = ctx->sizes[i];
  return NULL;
}

Test(launch_args, whole_size_and_edge_bindings_are_accepted) {
  launch_env l = launch_env_new();
  uint64_t sizes[4] = {9, 9, 9, 9};
  weft_kernel rec;
  EXPECT_OK(weft_kernel_host(l.e.dev, "record_sizes", record_sizes_kernel, sizes, &rec));
  weft_binding bd[4] = {{l.in, 0, WEFT_WHOLE, WEFT_READ},
                        {l.in, 100, WEFT_WHOLE, WEFT_READ},
                        {l.in, LSIZE, WEFT_WHOLE, WEFT_READ}, /* at the end: 0 bytes */
                        {l.in, LSIZE, 0, WEFT_READ}};
  EXPECT_OK(weft_launch(l.e.dev, 0, rec, one, one, bd, 4, NULL, 0));
  EXPECT_OK(weft_sync(l.e.dev, 0));
  cr_assert_eq(sizes[0], LSIZE);
  cr_assert_eq(sizes[1], LSIZE - 100);
  cr_assert_eq(sizes[2], 0);
  cr_assert_eq(sizes[3], 0);
  weft_device_stats s0 = stats_of(l.e.dev);
  launch_env_close(&l, &s0);
}

Test(launch_args, binding_with_a_dead_or_foreign_buffer_is_not_found) {
  launch_env l = launch_env_new();
  env other = env_new();
  weft_buffer foreign, dead;
  EXPECT_OK(weft_buffer_create(other.dev, 0, LSIZE, &foreign));
  EXPECT_OK(weft_buffer_create(l.e.dev, 0, LSIZE, &dead));
  EXPECT_OK(weft_buffer_release(l.e.dev, dead));
  weft_device_stats s0 = stats_of(l.e.dev);
  const weft_buffer bad[] = {dead, foreign, {0}, {rng()}};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_binding bd[2] = {{bad[i], 0, WEFT_WHOLE, WEFT_READ}, {l.out, 0, WEFT_WHOLE, WEFT_WRITE}};
    EXPECT_ERR(NOT_FOUND, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, 0));
    bd[0] = (weft_binding){l.in, 0, WEFT_WHOLE, WEFT_READ};
    bd[1] = (weft_binding){bad[i], 0, 16, WEFT_WRITE};
    EXPECT_ERR(NOT_FOUND, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, 0));
  }
  EXPECT_OK(weft_buffer_release(other.dev, foreign));
  env_close(&other);
  launch_env_close(&l, &s0);
}

Test(launch_args, bad_scalars_are_invalid_argument) {
  launch_env l = launch_env_new();
  static uint8_t scalars[WEFT_MAX_SCALAR_BYTES + 64];
  weft_binding bd[2] = {{l.in, 0, WEFT_WHOLE, WEFT_READ}, {l.out, 0, WEFT_WHOLE, WEFT_WRITE}};
  weft_device_stats s0 = stats_of(l.e.dev);
  EXPECT_ERR(INVALID,
             weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, scalars, WEFT_MAX_SCALAR_BYTES + 1));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, scalars, SIZE_MAX));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, 1));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, 8));
  EXPECT_ERR(INVALID, weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, NULL, SIZE_MAX));
  launch_env_close(&l, &s0);
}

/* ---- sync, check, stats -------------------------------------------------------------------------
 */

Test(sync_args, any_stream_id_is_accepted) {
  env e = env_new();
  const weft_stream_id ids[] = {0, 1, 63, 64, 1000, UINT64_MAX, weft_stream_current()};
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) EXPECT_OK(weft_sync(e.dev, ids[i]));
  /* A question never creates a stream. */
  cr_assert_eq(stats_of(e.dev).streams_created, 0);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(check_args, null_bufs_with_a_count_is_invalid_argument) {
  env e = env_new();
  weft_device_stats s0 = stats_of(e.dev);
  EXPECT_ERR(INVALID, weft_check(e.dev, NULL, 1));
  EXPECT_ERR(INVALID, weft_check(e.dev, NULL, SIZE_MAX));
  EXPECT_OK(weft_check(e.dev, NULL, 0));
  weft_device_stats s1 = stats_of(e.dev);
  assert_nothing_submitted(&s0, &s1);
  assert_device_works(e.dev);
  env_close(&e);
}

Test(check_args, too_many_buffers_is_invalid_argument) {
  env e = env_new();
  weft_buffer b[1] = {{0}};
  /* Rejected by count, before any element is read. */
  EXPECT_ERR(INVALID, weft_check(e.dev, b, (size_t)UINT32_MAX + 1));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(check_args, any_dead_handle_among_live_ones_is_not_found) {
  env e = env_new();
  weft_buffer b[4];
  for (int i = 0; i < 4; i++) EXPECT_OK(weft_buffer_create(e.dev, (weft_stream_id)i, 64, &b[i]));
  EXPECT_OK(weft_check(e.dev, b, 4));
  weft_buffer dead = b[2];
  EXPECT_OK(weft_buffer_release(e.dev, dead));
  EXPECT_ERR(NOT_FOUND, weft_check(e.dev, b, 4));
  b[2] = (weft_buffer){0};
  EXPECT_ERR(NOT_FOUND, weft_check(e.dev, b, 4));
  b[2] = b[3];
  EXPECT_OK(weft_check(e.dev, b, 4)); /* a repeated live handle is fine */
  EXPECT_OK(weft_check(e.dev, b, 2));
  for (int i = 0; i < 4; i++)
    if (i != 2) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  assert_device_works(e.dev);
  env_close(&e);
}

Test(stats_args, null_out_is_invalid_argument) {
  env e = env_new();
  weft_device_stats s0 = stats_of(e.dev);
  EXPECT_ERR(INVALID, weft_device_stats_get(e.dev, NULL));
  weft_device_stats s1 = stats_of(e.dev);
  assert_nothing_submitted(&s0, &s1);
  assert_device_works(e.dev);
  env_close(&e);
}

/* ---- everything at once
 * --------------------------------------------------------------------------- */

Test(bad_input, a_storm_of_rejected_calls_loses_and_leaks_nothing, .timeout = 60) {
  launch_env l = launch_env_new();
  weft_device_stats s0 = stats_of(l.e.dev);
  uint8_t bytes[64] = {0};
  static uint8_t scalars[WEFT_MAX_SCALAR_BYTES + 1];
  for (int i = 0; i < 20000; i++) {
    weft_buffer rb = {rng()};
    weft_binding bd[2] = {{l.in, 0, WEFT_WHOLE, WEFT_READ}, {l.out, 0, WEFT_WHOLE, WEFT_WRITE}};
    weft_status st = NULL;
    weft_error_kind want = INVALID;
    switch (i % 10) {
    case 0:
      st = weft_buffer_write(l.e.dev, (weft_stream_id)i, l.in, LSIZE, bytes, 1);
      break;
    case 1:
      st = weft_buffer_read(l.e.dev, (weft_stream_id)i, l.out, rng() | LSIZE, bytes, 1);
      break;
    case 2:
      st = weft_buffer_write(l.e.dev, 0, rb, 0, bytes, 1), want = NOT_FOUND;
      break;
    case 3:
      bd[i & 1].offset = LSIZE + 1 + (rng() & 0xffff);
      st = weft_launch(l.e.dev, (weft_stream_id)i, l.copy, one, one, bd, 2, NULL, 0);
      break;
    case 4:
      bd[1].buffer = rb;
      st = weft_launch(l.e.dev, (weft_stream_id)i, l.copy, one, one, bd, 2, NULL, 0);
      want = NOT_FOUND;
      break;
    case 5:
      st = weft_launch(l.e.dev, 0, l.copy, one, one, bd, 2, scalars, sizeof(scalars));
      break;
    case 6:
      st = weft_buffer_create(l.e.dev, 0, 0, NULL);
      break;
    case 7:
      st = weft_check(l.e.dev, &rb, 1), want = NOT_FOUND;
      break;
    case 8:
      st = weft_buffer_release(l.e.dev, rb), want = NOT_FOUND;
      break;
    case 9:
      st = weft_launch(l.e.dev, 0, (weft_kernel){rng()}, one, one, bd, 2, NULL, 0);
      want = NOT_FOUND;
      break;
    }
    expect_err(want, st, "storm call", i % 10);
  }
  launch_env_close(&l, &s0);
}

/* A launch refused for a binding has already taken a command and a credit
 * from the thread's cache (the fast path checks each binding as it writes
 * it into the command): the command must go back to the cache, the credit
 * to the budget. With a budget of two commands a lost credit stalls the
 * good launches (the timeout), and a lost command makes the pool grow (past
 * its presized slab, an allocation). */
Test(bad_input, a_refused_binding_gives_back_its_command_and_its_credit, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_pending_commands = 2;
  env_open(&e);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "nop", nop_kernel, NULL, &k));
  weft_buffer a, dead;
  EXPECT_OK(weft_buffer_create(e.dev, 0, LSIZE, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 0, LSIZE, &dead));
  EXPECT_OK(weft_buffer_release(e.dev, dead));
  weft_binding good = {a, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (int i = 0; i < 64; i++) EXPECT_OK(weft_launch(e.dev, 0, k, one, one, &good, 1, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 0)); /* warm: the thread's cache holds commands and credits */
  uint64_t allocs = weft_counting_allocator_counts(e.ca).allocs;
  weft_device_stats s0 = stats_of(e.dev);
  enum { ROUNDS = 4000 };
  for (int i = 0; i < ROUNDS; i++) {
    weft_binding bd[2] = {good, good};
    switch (i % 4) {
    case 0:
      bd[1].buffer = dead;
      EXPECT_ERR(NOT_FOUND, weft_launch(e.dev, 0, k, one, one, bd, 2, NULL, 0));
      break;
    case 1:
      bd[1].offset = LSIZE + 1;
      EXPECT_ERR(INVALID, weft_launch(e.dev, 0, k, one, one, bd, 2, NULL, 0));
      break;
    case 2:
      bd[1].size = LSIZE + 1;
      EXPECT_ERR(INVALID, weft_launch(e.dev, 0, k, one, one, bd, 2, NULL, 0));
      break;
    default:
      bd[0].access = (weft_access)4;
      EXPECT_ERR(INVALID, weft_launch(e.dev, 0, k, one, one, bd, 2, NULL, 0));
      break;
    }
    EXPECT_OK(weft_launch(e.dev, 0, k, one, one, &good, 1, NULL, 0));
  }
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_device_stats s1 = stats_of(e.dev);
  cr_assert_eq(s1.launches_run - s0.launches_run, ROUNDS, "%" PRIu64 " good launches ran of %d",
               s1.launches_run - s0.launches_run, ROUNDS);
  cr_assert_eq(s1.launches_failed, s0.launches_failed);
  cr_assert_leq(s1.pending_peak, 2, "the budget held %" PRIu64 " commands", s1.pending_peak);
  cr_assert_eq(weft_counting_allocator_counts(e.ca).allocs, allocs,
               "the refused launches cost %" PRIu64 " allocations: commands were lost",
               weft_counting_allocator_counts(e.ca).allocs - allocs);
  EXPECT_OK(weft_buffer_release(e.dev, a));
  env_close(&e);
}

/* Two threads that each had a launch refused for a binding, and then sit
 * idle inside their device (their thread caches stay bound), hold no credit
 * of a budget of two: a third thread's launches on that stream find room
 * (were the refused launches' credits kept in the idle caches, the budget
 * would be full with nothing in flight to free it, and the third thread
 * would wait for ever: the timeout). */
typedef struct refuser {
  weft_device *dev;
  weft_kernel k;
  weft_buffer good, dead;
  pthread_barrier_t *refused, *done;
} refuser;

static void *refuse_then_idle(void *arg) {
  refuser *r = arg;
  weft_binding bd = {r->good, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(r->dev, 0, r->k, one, one, &bd, 1, NULL, 0)); /* binds the cache */
  EXPECT_OK(weft_sync(r->dev, 0));
  /* A pass after the one that answered: stream 0's retired commands are
   * returned and its budget empty, so the refused launch gets its credit. */
  EXPECT_OK(weft_sync(r->dev, 1));
  bd.buffer = r->dead;
  EXPECT_ERR(NOT_FOUND, weft_launch(r->dev, 0, r->k, one, one, &bd, 1, NULL, 0));
  pthread_barrier_wait(r->refused);
  pthread_barrier_wait(r->done); /* idle, cache bound, until the main thread is through */
  return NULL;
}

Test(bad_input, idle_threads_keep_no_credit_of_their_refused_launches, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_pending_commands = 2;
  env_open(&e);
  refuser r = {.dev = e.dev};
  EXPECT_OK(weft_kernel_host(e.dev, "nop", nop_kernel, NULL, &r.k));
  EXPECT_OK(weft_buffer_create(e.dev, 0, LSIZE, &r.good));
  EXPECT_OK(weft_buffer_create(e.dev, 0, LSIZE, &r.dead));
  EXPECT_OK(weft_buffer_release(e.dev, r.dead));
  EXPECT_OK(weft_sync(e.dev, 1));
  pthread_barrier_t refused, done;
  pthread_barrier_init(&refused, NULL, 2);
  pthread_barrier_init(&done, NULL, 3);
  r.refused = &refused;
  r.done = &done;
  pthread_t t[2];
  for (int i = 0; i < 2; i++) { /* one at a time: neither finds the other's commands pending */
    cr_assert_eq(pthread_create(&t[i], NULL, refuse_then_idle, &r), 0);
    pthread_barrier_wait(&refused);
  }
  weft_binding bd = {r.good, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (int i = 0; i < 8; i++) EXPECT_OK(weft_launch(e.dev, 0, r.k, one, one, &bd, 1, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 0));
  pthread_barrier_wait(&done);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&refused);
  pthread_barrier_destroy(&done);
  weft_device_stats st = stats_of(e.dev);
  cr_assert_eq(st.launches_run, 10, "%" PRIu64 " launches ran of 10", st.launches_run);
  cr_assert_leq(st.pending_peak, 2);
  EXPECT_OK(weft_buffer_release(e.dev, r.good));
  env_close(&e);
}

/* ---- running out of memory on the device allocator
 * ------------------------------------------------ */

/* One small program: create A, write A, create B, launch copy A -> B, read B,
 * each on its own stream. With the |k|th allocation failing, every call either
 * succeeds or returns OutOfMemory, and the final read of B returns either the
 * bytes written or an error: never other bytes without an error. Returns true
 * when no allocation failed (k is past the program's allocations). */
static bool run_program_failing_at(uint64_t k) {
  enum { SIZE = 256 };
  env e = env_new();
  weft_kernel copy;
  EXPECT_OK(weft_kernel_host(e.dev, "copy", copy_kernel, NULL, &copy));
  uint8_t in[SIZE], out[SIZE];
  for (int i = 0; i < SIZE; i++) in[i] = (uint8_t)(i * 13 + 1);
  weft_alloc_counts c0 = weft_counting_allocator_counts(e.ca);
  weft_counting_allocator_fail_at(e.ca, k);
  weft_buffer a = {0}, b = {0};
  weft_status st = NULL;
  bool launched = false; /* B's bytes are defined only once the copy was accepted */
  int step = 0;
  do {
    step = 1;
    if ((st = weft_buffer_create(e.dev, 0, SIZE, &a))) break;
    step = 2;
    if ((st = weft_buffer_write(e.dev, 1, a, 0, in, SIZE))) break;
    step = 3;
    if ((st = weft_buffer_create(e.dev, 2, SIZE, &b))) break;
    step = 4;
    weft_binding bd[2] = {{a, 0, WEFT_WHOLE, WEFT_READ}, {b, 0, WEFT_WHOLE, WEFT_WRITE}};
    if ((st = weft_launch(e.dev, 3, copy, one, one, bd, 2, NULL, 0))) break;
    launched = true;
    step = 5;
    weft_status r = weft_buffer_read(e.dev, 0, b, 0, out, SIZE);
    if (r && weft_error_kind_of(r) == WEFT_ERR_OUT_OF_MEMORY) {
      st = r; /* the read's own command */
      break;
    }
    weft_error_free(r);
    step = 0;
  } while (0);
  if (st) expect_err(WEFT_ERR_OUT_OF_MEMORY, st, "a call under allocation failure", (int)step);
  weft_counting_allocator_fail_at(e.ca, 0);
  bool none_failed = weft_counting_allocator_counts(e.ca).failed == c0.failed;
  if (launched) {
    /* Every stream synced: what B holds now is final. */
    for (weft_stream_id s = 0; s < 4; s++) EXPECT_OK(weft_sync(e.dev, s));
    memset(out, 0, SIZE);
    weft_status r = weft_buffer_read(e.dev, 0, b, 0, out, SIZE);
    if (!r) {
      for (int i = 0; i < SIZE; i++)
        cr_assert_eq(out[i], in[i],
                     "allocation %" PRIu64 " failed and B reads back other bytes without an "
                     "error (byte %d is %u, expected %u): a failure was lost",
                     k, i, out[i], in[i]);
    } else {
      weft_error_kind kind = weft_error_kind_of(r);
      cr_assert(kind == WEFT_ERR_SEVERAL || kind == WEFT_ERR_NOT_FOUND,
                "allocation %" PRIu64 ": B reads back %s", k, weft_error_kind_name(kind));
      weft_error_free(r);
    }
  }
  assert_device_works(e.dev);
  env_close(&e);
  return none_failed;
}

Test(bad_input, write_whose_stream_cannot_start_is_reported_not_lost, .timeout = 60) {
  /* The smallest case of the sweep below: the write is accepted (its command
   * was allocated), then the scheduler cannot start the write's stream. The
   * bytes were not written, so a later read must say so, not return the old
   * bytes as if the write had never been made. */
  env e = env_new();
  weft_buffer a;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 16, &a));
  char old[16] = "old old old old", neu[16] = "new new new new", got[16];
  /* Warm the command pool: after these writes complete (the stats round trip
   * is processed after their completions), the next small command is
   * recycled and allocates nothing. */
  for (int i = 0; i < 8; i++) EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, old, 16));
  EXPECT_OK(weft_sync(e.dev, 0));
  (void)stats_of(e.dev);
  uint64_t f0 = weft_counting_allocator_counts(e.ca).failed;
  /* The write command comes from the pool, so the next allocation is stream
   * 1's worker (scheduler); the client allocates nothing until that failure
   * was seen. */
  weft_counting_allocator_fail_at(e.ca, 1);
  EXPECT_OK(weft_buffer_write(e.dev, 1, a, 0, neu, 16));
  for (int spin = 0; weft_counting_allocator_counts(e.ca).failed == f0; spin++)
    cr_assert_lt(spin, 100000000, "the stream was never started");
  weft_counting_allocator_fail_at(e.ca, 0);
  cr_assert_eq(stats_of(e.dev).streams_created, 1, "stream 1 could not start");
  for (weft_stream_id s = 0; s < 4; s++) EXPECT_OK(weft_sync(e.dev, s));
  weft_status st = weft_buffer_read(e.dev, 0, a, 0, got, 16);
  if (!st) {
    cr_assert_arr_eq(got, neu, 16,
                     "the write returned OK, its stream never started, and a read returns the "
                     "old bytes '%.15s' without an error: the write was silently lost",
                     got);
  } else {
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
    weft_error_free(st);
  }
  env_close(&e);
}

Test(bad_input, allocation_failure_at_any_step_is_reported_never_silent, .timeout = 120) {
  for (uint64_t k = 1;; k++) {
    cr_assert_lt(k, 200, "the program never ran without a failed allocation");
    if (run_program_failing_at(k)) break;
  }
}
