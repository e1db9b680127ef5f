/* weft_buffer_copy and weft_buffer_fill on the host backend: the bytes they
 * move, their argument checks (handles, ranges, overflow, overlap, len 0),
 * that they are launches for order, stats and failures (a copy of tainted
 * bytes is skipped and carries the root to its destination with a hop
 * naming it; a fill clears exactly the bytes it writes), and that a capture
 * records and replays them. Every device runs on a counting allocator that
 * must end with zero live blocks. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

static const uint32_t one[3] = {1, 1, 1};

static weft_buffer make(weft_device *dev, uint64_t size) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(dev, 0, size, &b));
  return b;
}

static void write_pattern(weft_device *dev, weft_buffer b, uint64_t size, uint8_t seed) {
  uint8_t bytes[256];
  cr_assert_leq(size, sizeof(bytes));
  for (uint64_t i = 0; i < size; i++) bytes[i] = (uint8_t)(seed + i);
  EXPECT_OK(weft_buffer_write(dev, 0, b, 0, bytes, size));
}

static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, int line) {
  cr_assert_not_null(st, "line %d: the call succeeded", line);
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: %s", line,
               weft_error_kind_name(weft_error_kind_of(st)), weft_error_message(st));
  cr_assert_not_null(strstr(weft_error_message(st), needle), "line %d: '%s' lacks '%s'", line,
                     weft_error_message(st), needle);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind, needle) expect_kind((call), (kind), (needle), __LINE__)

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s;
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s;
}

/* A host kernel that fails: its WRITE binding carries the failure. */
static weft_status fails(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return weft_error_make(WEFT_ERR_VALIDATION, "the producer failed on purpose");
}

/* The read's Several holds one Unwritten: returned (borrowed from |st|). */
static weft_status only_unwritten(weft_status st, int line) {
  cr_assert_not_null(st, "line %d: the read succeeded", line);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "line %d: %s", line,
               weft_error_message(st));
  cr_assert_eq(weft_error_count(st), 1, "line %d", line);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN, "line %d", line);
  return u;
}

Test(copy, moves_bytes_between_buffers_at_their_offsets, .timeout = 60) {
  env e = env_new();
  weft_buffer a = make(e.dev, 64), b = make(e.dev, 64);
  write_pattern(e.dev, a, 64, 1);
  write_pattern(e.dev, b, 64, 100);
  EXPECT_OK(weft_buffer_copy(e.dev, 0, a, 8, b, 32, 16));
  uint8_t got[64];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, got, 64));
  for (int i = 0; i < 64; i++) {
    uint8_t want = i >= 32 && i < 48 ? (uint8_t)(1 + 8 + (i - 32)) : (uint8_t)(100 + i);
    cr_assert_eq(got[i], want, "byte %d: %u, want %u", i, got[i], want);
  }
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches, 1, "a copy is a launch");
  cr_assert_eq(s.launches_run, 1);
  env_close(&e);
}

Test(copy, within_one_buffer_copies_disjoint_ranges, .timeout = 60) {
  env e = env_new();
  weft_buffer a = make(e.dev, 64);
  write_pattern(e.dev, a, 64, 0);
  EXPECT_OK(weft_buffer_copy(e.dev, 0, a, 0, a, 32, 32));
  uint8_t got[64];
  EXPECT_OK(weft_buffer_read(e.dev, 0, a, 0, got, 64));
  for (int i = 0; i < 64; i++) cr_assert_eq(got[i], (uint8_t)(i % 32), "byte %d", i);
  env_close(&e);
}

Test(copy, bad_arguments_are_refused_and_submit_nothing, .timeout = 60) {
  env e = env_new();
  weft_buffer a = make(e.dev, 64), b = make(e.dev, 32), dead = make(e.dev, 16);
  EXPECT_OK(weft_buffer_release(e.dev, dead));
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 0, a, 8, 16), WEFT_ERR_INVALID_ARGUMENT, "overlap");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 8, a, 0, 16), WEFT_ERR_INVALID_ARGUMENT, "overlap");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 4, a, 4, 1), WEFT_ERR_INVALID_ARGUMENT, "overlap");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 0, b, 0, 33), WEFT_ERR_INVALID_ARGUMENT,
              "copy destination [0, +33) is outside the buffer of 32 bytes");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 60, b, 0, 8), WEFT_ERR_INVALID_ARGUMENT,
              "copy source [60, +8)");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 65, b, 0, 0), WEFT_ERR_INVALID_ARGUMENT,
              "copy source [65, +0)");
  /* offset + len wraps around: still outside */
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 8, b, 0, UINT64_MAX - 4), WEFT_ERR_INVALID_ARGUMENT,
              "copy source");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, UINT64_MAX, b, 0, 2), WEFT_ERR_INVALID_ARGUMENT,
              "copy source");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, dead, 0, b, 0, 8), WEFT_ERR_NOT_FOUND,
              "not a live buffer");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, a, 0, (weft_buffer){12345}, 0, 8), WEFT_ERR_NOT_FOUND,
              "not a live buffer");
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, (weft_buffer){0}, 0, b, 0, 8), WEFT_ERR_NOT_FOUND,
              "not a live buffer");
  /* len 0: a no-op once the handles and offsets are good */
  EXPECT_OK(weft_buffer_copy(e.dev, 0, a, 64, b, 32, 0));
  EXPECT_OK(weft_buffer_copy(e.dev, 0, a, 4, a, 4, 0));
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(stats_of(e.dev).launches, 0, "a refused or empty copy submitted a launch");
  env_close(&e);
}

Test(fill, sets_exactly_its_range, .timeout = 60) {
  env e = env_new();
  weft_buffer a = make(e.dev, 64);
  write_pattern(e.dev, a, 64, 0);
  EXPECT_OK(weft_buffer_fill(e.dev, 0, a, 10, 20, 0xab));
  uint8_t got[64];
  EXPECT_OK(weft_buffer_read(e.dev, 0, a, 0, got, 64));
  for (int i = 0; i < 64; i++)
    cr_assert_eq(got[i], i >= 10 && i < 30 ? 0xab : (uint8_t)i, "byte %d", i);
  cr_assert_eq(stats_of(e.dev).launches_run, 1, "a fill is a launch");
  env_close(&e);
}

Test(fill, bad_arguments_are_refused_and_submit_nothing, .timeout = 60) {
  env e = env_new();
  weft_buffer a = make(e.dev, 64);
  EXPECT_KIND(weft_buffer_fill(e.dev, 0, a, 0, 65, 1), WEFT_ERR_INVALID_ARGUMENT,
              "fill range [0, +65) is outside the buffer of 64 bytes");
  EXPECT_KIND(weft_buffer_fill(e.dev, 0, a, 8, UINT64_MAX, 1), WEFT_ERR_INVALID_ARGUMENT,
              "fill range");
  EXPECT_KIND(weft_buffer_fill(e.dev, 0, a, 65, 0, 1), WEFT_ERR_INVALID_ARGUMENT, "fill range");
  EXPECT_KIND(weft_buffer_fill(e.dev, 0, (weft_buffer){77}, 0, 1, 1), WEFT_ERR_NOT_FOUND,
              "not a live buffer");
  EXPECT_OK(weft_buffer_fill(e.dev, 0, a, 64, 0, 1)); /* len 0: a no-op */
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(stats_of(e.dev).launches, 0);
  env_close(&e);
}

Test(builtins, cannot_be_launched_as_kernels, .timeout = 60) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "mine", fails, NULL, &k));
  /* The built-ins are the device's first two kernels: ids 1 and 2 of its tag. */
  weft_kernel copy = {(k.id & ~(uint64_t)UINT32_MAX) | 1u};
  weft_kernel fill = {(k.id & ~(uint64_t)UINT32_MAX) | 2u};
  weft_buffer a = make(e.dev, 64), b = make(e.dev, 8);
  /* a "copy" of unequal sizes would overrun: refused before anything runs */
  weft_binding bd[2] = {{a, 0, 64, WEFT_READ}, {b, 0, 8, WEFT_WRITE}};
  EXPECT_KIND(weft_launch(e.dev, 0, copy, one, one, bd, 2, NULL, 0), WEFT_ERR_INVALID_ARGUMENT,
              "kernel 'copy' is the device's built-in: launch it with weft_buffer_copy");
  EXPECT_KIND(weft_launch(e.dev, 0, fill, one, one, &bd[1], 1, NULL, 0), WEFT_ERR_INVALID_ARGUMENT,
              "weft_buffer_fill");
  weft_launch_desc d = {
      .struct_size = sizeof(d), .kernel = copy, .bindings = bd, .num_bindings = 2};
  memcpy(d.grid, one, sizeof(one));
  memcpy(d.block, one, sizeof(one));
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "built-in");
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(stats_of(e.dev).launches, 0);
  env_close(&e);
}

Test(failures, a_copy_of_tainted_bytes_is_skipped_and_its_destination_takes_the_root,
     .timeout = 60) {
  env e = env_new();
  weft_kernel bad;
  EXPECT_OK(weft_kernel_host(e.dev, "producer", fails, NULL, &bad));
  weft_buffer src = make(e.dev, 64), dst = make(e.dev, 64);
  write_pattern(e.dev, dst, 64, 0);
  weft_binding w = {src, 0, 32, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, bad, one, one, &w, 1, NULL, 0)); /* launch 1 */
  EXPECT_OK(weft_buffer_copy(e.dev, 1, src, 16, dst, 0, 32));      /* launch 2: tainted */
  EXPECT_OK(weft_buffer_copy(e.dev, 1, src, 32, dst, 32, 32));     /* launch 3: clean */
  uint8_t got[64];
  weft_status st = weft_buffer_read(e.dev, 0, dst, 0, got, 32);
  weft_status u = only_unwritten(st, __LINE__);
  cr_assert_eq(weft_error_kind_of(weft_error_root(u)), WEFT_ERR_VALIDATION);
  cr_assert_str_eq(weft_error_origin(u), "kernel 'producer' (launch 1)");
  cr_assert_eq(weft_error_chain_length(u), 1);
  char hop[128];
  snprintf(hop, sizeof(hop), "skipped kernel 'copy' (launch 2): it needed buffer #%" PRIu32,
           (uint32_t)src.id);
  cr_assert_str_eq(weft_error_chain_at(u, 0), hop);
  weft_error_free(st);
  /* The clean copy ran: src's untouched bytes are zero (fresh host memory
   * is not promised zero, so compare with src itself). */
  uint8_t want[32];
  EXPECT_OK(weft_buffer_read(e.dev, 0, src, 32, want, 32));
  EXPECT_OK(weft_buffer_read(e.dev, 0, dst, 32, got, 32));
  cr_assert_arr_eq(got, want, 32);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_skipped, 1);
  cr_assert_eq(s.launches_run, 1);
  env_close(&e);
}

Test(failures, a_fill_clears_the_taint_of_exactly_the_bytes_it_writes, .timeout = 60) {
  env e = env_new();
  weft_kernel bad;
  EXPECT_OK(weft_kernel_host(e.dev, "producer", fails, NULL, &bad));
  weft_buffer b = make(e.dev, 64);
  weft_binding w = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, bad, one, one, &w, 1, NULL, 0));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, b, 0, 32, 0x5a));
  uint8_t got[64];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, got, 32));
  for (int i = 0; i < 32; i++) cr_assert_eq(got[i], 0x5a, "byte %d", i);
  weft_status st = weft_buffer_read(e.dev, 0, b, 32, got, 32);
  weft_status u = only_unwritten(st, __LINE__);
  cr_assert_str_eq(weft_error_origin(u), "kernel 'producer' (launch 1)");
  weft_error_free(st);
  /* The boundary: one byte either side. */
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 31, got, 1));
  st = weft_buffer_read(e.dev, 0, b, 31, got, 2);
  only_unwritten(st, __LINE__);
  weft_error_free(st);
  env_close(&e);
}

Test(order, copies_and_fills_follow_the_launches_and_writes_before_them, .timeout = 60) {
  env e = env_new();
  weft_buffer a = make(e.dev, 256), b = make(e.dev, 256), c = make(e.dev, 256);
  /* A chain across streams: fill a on 0, copy a->b on 1, fill b's tail on 2,
   * copy b->c on 3: each waits for the one before through its buffers. */
  for (int round = 0; round < 20; round++) {
    uint8_t v = (uint8_t)(round + 1);
    EXPECT_OK(weft_buffer_fill(e.dev, 0, a, 0, 256, v));
    EXPECT_OK(weft_buffer_copy(e.dev, 1, a, 0, b, 0, 256));
    EXPECT_OK(weft_buffer_fill(e.dev, 2, b, 128, 128, (uint8_t)(v + 100)));
    EXPECT_OK(weft_buffer_copy(e.dev, 3, b, 0, c, 0, 256));
    uint8_t got[256];
    EXPECT_OK(weft_buffer_read(e.dev, 0, c, 0, got, 256));
    for (int i = 0; i < 256; i++)
      cr_assert_eq(got[i], i < 128 ? v : (uint8_t)(v + 100), "round %d byte %d", round, i);
  }
  env_close(&e);
}

Test(capture, records_and_replays_copies_and_fills, .timeout = 60) {
  env e = env_new();
  weft_buffer a, b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  weft_stream_id s = 0;
  weft_capture *cap = NULL;
  EXPECT_OK(weft_capture_prepare(e.dev, &s, 1, &cap));
  EXPECT_OK(weft_capture_begin(cap));
  EXPECT_OK(weft_buffer_fill(e.dev, 0, b, 0, 64, 0x11));
  EXPECT_OK(weft_buffer_copy(e.dev, 0, a, 0, b, 16, 16));
  EXPECT_OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_launches(cap), 2);
  for (int r = 0; r < 3; r++) {
    uint8_t in[64];
    memset(in, 0x40 + r, sizeof(in));
    EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, in, 64));
    EXPECT_OK(weft_capture_replay(cap));
    uint8_t got[64];
    EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, got, 64));
    for (int i = 0; i < 64; i++)
      cr_assert_eq(got[i], i >= 16 && i < 32 ? 0x40 + r : 0x11, "replay %d byte %d", r, i);
  }
  cr_assert_eq(stats_of(e.dev).launches_replayed, 6);
  weft_capture_destroy(cap);
  env_close(&e);
}
