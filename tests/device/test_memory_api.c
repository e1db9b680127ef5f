/* The device-level memory API on the host backend: usage and per-stream
 * reports, which manager a buffer lives in, installing layouts (at open and
 * later), allocation windows (modes), dry runs and the measure-then-cap
 * planning cycle, the reclaim ladder and the reclaim callback, large writes
 * staged through the drop queue, and the persistent_memory option. Every
 * device runs on a counting allocator that must end with zero live blocks. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

/* ---- helpers --------------------------------------------------------------------------- */

/* |st| is an error of |kind|; frees it. */
static void expect_kind(weft_status st, weft_error_kind kind, const char *call, int line) {
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: expected %s, got %s", line, call,
               weft_error_kind_name(kind), text);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind) expect_kind((call), (kind), #call, __LINE__)

/* An open that must fail with |kind| and leave nothing allocated. */
static void expect_open_fails(env *e, weft_error_kind kind, const char *what) {
  weft_device *dev = (weft_device *)(uintptr_t)1;
  weft_status st = weft_device_open(&e->opts, &dev);
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "%s: expected %s, got %s", what,
               weft_error_kind_name(kind), text);
  weft_error_free(st);
  cr_assert_null(dev, "%s: *out is not NULL after a failed open", what);
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%s: %" PRIu64 " blocks (%" PRIu64 " bytes) leaked by the open",
               what, c.live_blocks, c.live_bytes);
  weft_counting_allocator_destroy(e->ca);
  ASSERT_NO_LEAKS();
}

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s;
}

static weft_buffer make_buffer(weft_device *dev, weft_stream_id stream, uint64_t size) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(dev, stream, size, &b));
  return b;
}

static weft_kernel make_kernel(weft_device *dev, const char *name, weft_host_kernel_fn fn,
                               void *user) {
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(dev, name, fn, user, &k));
  return k;
}

static const uint32_t one[3] = {1, 1, 1};

#define MAX_REPORTS 16

/* The reports of |stream| (at most MAX_REPORTS). */
static size_t report_of(weft_device *dev, weft_stream_id stream, weft_pool_report *out) {
  size_t n = MAX_REPORTS;
  memset(out, 0, sizeof(weft_pool_report) * MAX_REPORTS);
  EXPECT_OK(weft_memory_report_get(dev, stream, out, &n));
  cr_assert_leq(n, MAX_REPORTS, "stream %" PRIu64 " reports %zu pools", stream, n);
  return n;
}

/* The number of pools |stream| reports. */
static size_t pools_of(weft_device *dev, weft_stream_id stream) {
  size_t n = 0;
  EXPECT_OK(weft_memory_report_get(dev, stream, NULL, &n));
  return n;
}

/* The index of the first report of |kind|; fails when there is none. */
static size_t find_kind(const weft_pool_report *r, size_t n, weft_pool_kind kind) {
  for (size_t i = 0; i < n; i++)
    if (r[i].kind == kind) return i;
  cr_assert_fail("no pool of kind %d among %zu reports", (int)kind, n);
  return 0;
}

static weft_memory_usage usage_sum(const weft_pool_report *r, size_t n) {
  weft_memory_usage u = {0};
  for (size_t i = 0; i < n; i++) {
    u.number_allocs += r[i].usage.number_allocs;
    u.bytes_in_use += r[i].usage.bytes_in_use;
    u.bytes_padding += r[i].usage.bytes_padding;
    u.bytes_reserved += r[i].usage.bytes_reserved;
  }
  return u;
}

static weft_memory_usage usage_of(weft_device *dev) {
  weft_memory_usage u = {0};
  EXPECT_OK(weft_memory_usage_get(dev, &u));
  return u;
}

static uint64_t dyn_allocs(const weft_pool_report *r, size_t n) {
  /* Allocations in the pools before the persistent one (routing order). */
  uint64_t a = 0;
  for (size_t i = 0; i < n && r[i].kind != WEFT_POOL_PERSISTENT; i++) a += r[i].usage.number_allocs;
  return a;
}

static uint8_t pattern_byte(uint32_t seed, size_t i) {
  return (uint8_t)(seed * 131u + (uint32_t)i * 7u + (uint32_t)(i >> 9) * 13u + 1u);
}

static void fill_pattern(uint8_t *p, size_t n, uint32_t seed) {
  for (size_t i = 0; i < n; i++) p[i] = pattern_byte(seed, i);
}

static void check_pattern(const uint8_t *p, size_t n, uint32_t seed, const char *what) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != pattern_byte(seed, i))
      cr_assert_fail("%s: byte %zu is %u, expected %u (seed %" PRIu32 ")", what, i, p[i],
                     pattern_byte(seed, i), seed);
}

static void write_pattern(weft_device *dev, weft_stream_id stream, weft_buffer b, uint64_t offset,
                          size_t n, uint32_t seed) {
  uint8_t *p = malloc(n);
  cr_assert_not_null(p);
  fill_pattern(p, n, seed);
  EXPECT_OK(weft_buffer_write(dev, stream, b, offset, p, n));
  free(p);
}

static void read_check(weft_device *dev, weft_stream_id stream, weft_buffer b, uint64_t offset,
                       size_t n, uint32_t seed, const char *what) {
  uint8_t *p = malloc(n);
  cr_assert_not_null(p);
  EXPECT_OK(weft_buffer_read(dev, stream, b, offset, p, n));
  check_pattern(p, n, seed, what);
  free(p);
}

/* The single Unwritten inside the Several a failed read returns. */
static weft_status only_unwritten(weft_status st, int line) {
  char text[4096];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "line %d: expected Several, got %s", line,
               text);
  cr_assert_eq(weft_error_count(st), 1, "line %d: expected one error in %s", line, text);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN, "line %d: expected Unwritten in %s", line,
               text);
  cr_assert_neq(weft_error_failure_id(u), 0, "line %d: failure id 0", line);
  cr_assert_not_null(weft_error_root(u), "line %d: Unwritten without a root", line);
  return u;
}
#define ONLY_UNWRITTEN(st) only_unwritten((st), __LINE__)

/* Reads |b| and expects Several{Unwritten{root: |kind|}}; returns the
 * root's message copied into |msg| (may be NULL). */
static void expect_read_root(weft_device *dev, weft_stream_id stream, weft_buffer b,
                             weft_error_kind kind, char *msg, size_t msg_cap, int line) {
  uint8_t byte;
  weft_status st = weft_buffer_read(dev, stream, b, 0, &byte, 1);
  weft_status u = only_unwritten(st, line);
  weft_status root = weft_error_root(u);
  char text[4096];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(root), kind, "line %d: expected root %s in %s", line,
               weft_error_kind_name(kind), text);
  if (msg) snprintf(msg, msg_cap, "%s", weft_error_message(root));
  weft_error_free(st);
}
#define EXPECT_READ_ROOT(dev, stream, b, kind)                                                     \
  expect_read_root((dev), (stream), (b), (kind), NULL, 0, __LINE__)

/* ---- kernels ------------------------------------------------------------------------------ */

/* Adds 1 to every uint32 of binding 0 (read-write); counts its calls. */
static weft_status inc_kernel(const weft_kernel_ctx *ctx, void *user) {
  if (user) atomic_fetch_add((_Atomic uint32_t *)user, 1);
  uint32_t *p = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0] / 4; i++) p[i] += 1;
  return NULL;
}

static void inc(weft_device *dev, weft_stream_id stream, weft_kernel k, weft_buffer b) {
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(dev, stream, k, one, one, &bd, 1, NULL, 0));
}

/* ---- layouts ------------------------------------------------------------------------------ */

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

static weft_pool_config sliced_pool(uint64_t page, uint64_t max_slice, uint64_t cap) {
  return (weft_pool_config){.kind = WEFT_POOL_SLICED,
                            .page_size = page,
                            .max_slice_size = max_slice,
                            .max_pool_size = cap};
}

static weft_pool_config exclusive_pool(uint64_t max) {
  return (weft_pool_config){
      .kind = WEFT_POOL_EXCLUSIVE, .max_alloc_size = max, .dealloc_period = WEFT_NO_PERIOD};
}

static weft_layout custom(const weft_pool_config *pools, size_t n) {
  return (weft_layout){.kind = WEFT_LAYOUT_CUSTOM, .pools = pools, .num_pools = n};
}

/* ---- usage and reports --------------------------------------------------------------------- */

Test(memory_api, usage_sums_every_stream_and_reports_follow_creates_releases_and_cleanup,
     .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[2] = {sliced_pool(64 * KiB, 16 * KiB, 0), exclusive_pool(1 * MiB)};
  weft_layout layout = custom(pools, 2);
  e.opts.memory_layout = &layout;
  env_open(&e);
  weft_device *dev = e.dev;
  weft_pool_report r[MAX_REPORTS] = {0};

  /* Questions on a stream that never allocated: 0 pools, nothing created. */
  weft_device_stats s0 = stats_of(dev);
  cr_assert_eq(report_of(dev, 3, r), 0, "a stream that never allocated reports pools");
  cr_assert_eq(pools_of(dev, 3), 0);
  EXPECT_OK(weft_memory_cleanup(dev, 3));
  weft_memory_usage u = usage_of(dev);
  cr_assert_eq(u.number_allocs, 0);
  cr_assert_eq(u.bytes_reserved, 0);
  weft_device_stats s1 = stats_of(dev);
  cr_assert_eq(s1.streams_created, s0.streams_created, "a question created a stream");
  cr_assert_eq(report_of(dev, 3, r), 0, "a question created a memory manager");

  weft_buffer a0 = make_buffer(dev, 0, 1000), a1 = make_buffer(dev, 0, 1000);
  weft_buffer b0 = make_buffer(dev, 1, 5000), b1 = make_buffer(dev, 1, 100000);
  weft_buffer c0 = make_buffer(dev, 2, 16 * KiB);

  /* Stream 0: the layout's two pools, then persistent and dedicated. */
  size_t n = report_of(dev, 0, r);
  cr_assert_eq(n, 4, "stream 0 reports %zu pools, expected 2 + persistent + dedicated", n);
  cr_assert_eq(r[0].kind, WEFT_POOL_SLICED);
  cr_assert_eq(r[0].page_size, 64 * KiB);
  cr_assert_eq(r[0].pages, 1);
  cr_assert_eq(r[0].pages_unmapped, 0);
  cr_assert_eq(r[0].usage.number_allocs, 2);
  cr_assert_eq(r[0].usage.bytes_in_use, 2000);
  cr_assert_eq(r[0].usage.bytes_padding, 2 * 24, "1000 bytes pad to 1024 (64-byte alignment)");
  cr_assert_eq(r[0].usage.bytes_reserved, 64 * KiB);
  cr_assert_eq(r[0].largest_alloc, 1000);
  cr_assert_eq(r[1].kind, WEFT_POOL_EXCLUSIVE);
  cr_assert_eq(r[1].pages, 0);
  cr_assert_eq(r[1].usage.bytes_reserved, 0);
  cr_assert_eq(r[2].kind, WEFT_POOL_PERSISTENT);
  cr_assert_eq(r[2].usage.number_allocs, 0);
  cr_assert_eq(r[3].kind, WEFT_POOL_DIRECT, "the dedicated pool is a direct pool, reported last");
  cr_assert_eq(r[3].usage.number_allocs, 0);

  /* Stream 1: 5000 in the sliced pool, 100000 (past its max slice) exclusive. */
  n = report_of(dev, 1, r);
  cr_assert_eq(n, 4);
  cr_assert_eq(r[0].usage.number_allocs, 1);
  cr_assert_eq(r[0].usage.bytes_in_use, 5000);
  cr_assert_eq(r[0].usage.bytes_padding, 5056 - 5000);
  cr_assert_eq(r[0].usage.bytes_reserved, 64 * KiB);
  cr_assert_eq(r[1].pages, 1);
  cr_assert_eq(r[1].usage.number_allocs, 1);
  cr_assert_eq(r[1].usage.bytes_in_use, 100000);
  cr_assert_geq(r[1].usage.bytes_reserved, 100032);
  cr_assert_eq(r[1].page_size, 0, "page_size is reported for sliced pools only");
  weft_memory_usage s1u = usage_sum(r, n);

  n = report_of(dev, 2, r);
  cr_assert_eq(r[0].usage.number_allocs, 1);
  cr_assert_eq(r[0].usage.bytes_in_use, 16 * KiB);
  cr_assert_eq(r[0].usage.bytes_padding, 0);

  /* The usage is the sum over every stream's reports. */
  weft_memory_usage want = {0};
  for (weft_stream_id s = 0; s < 4; s++) {
    size_t k = report_of(dev, s, r);
    weft_memory_usage x = usage_sum(r, k);
    want.number_allocs += x.number_allocs;
    want.bytes_in_use += x.bytes_in_use;
    want.bytes_padding += x.bytes_padding;
    want.bytes_reserved += x.bytes_reserved;
  }
  u = usage_of(dev);
  cr_assert_eq(u.number_allocs, 5);
  cr_assert_eq(u.bytes_in_use, 2000 + 5000 + 100000 + 16 * KiB);
  cr_assert_eq(u.number_allocs, want.number_allocs);
  cr_assert_eq(u.bytes_in_use, want.bytes_in_use);
  cr_assert_eq(u.bytes_padding, want.bytes_padding);
  cr_assert_eq(u.bytes_reserved, want.bytes_reserved);
  cr_assert_eq(u.bytes_reserved, 3 * 64 * KiB + s1u.bytes_reserved - 64 * KiB);

  /* A report into a short array: the count of all, only the capacity written. */
  weft_pool_report shortr[4] = {0};
  memset(shortr, 0xAB, sizeof(shortr));
  shortr[0].struct_size = sizeof(shortr[0]); /* the first element's sets the layout */
  size_t cap = 2;
  EXPECT_OK(weft_memory_report_get(dev, 0, shortr, &cap));
  cr_assert_eq(cap, 4, "a short report must tell how many pools there are");
  cr_assert_eq(shortr[0].kind, WEFT_POOL_SLICED);
  const unsigned char *tail = (const unsigned char *)&shortr[2];
  for (size_t i = 0; i < sizeof(shortr[2]) * 2; i++)
    cr_assert_eq(tail[i], 0xAB, "byte %zu past the capacity was written", i);

  /* Releases: the bytes are no longer in use, but pages stay reserved until
   * a cleanup; cleanup of one stream leaves the others alone. */
  EXPECT_OK(weft_buffer_release(dev, a0));
  EXPECT_OK(weft_buffer_release(dev, a1));
  EXPECT_OK(weft_buffer_release(dev, b1));
  n = report_of(dev, 0, r);
  cr_assert_eq(r[0].usage.number_allocs, 0);
  cr_assert_eq(r[0].usage.bytes_in_use, 0);
  cr_assert_eq(r[0].usage.bytes_reserved, 64 * KiB, "a sliced pool keeps free pages until cleanup");
  EXPECT_OK(weft_memory_cleanup(dev, 0));
  EXPECT_OK(weft_memory_cleanup(dev, 1));
  n = report_of(dev, 0, r);
  cr_assert_eq(n, 4);
  weft_memory_usage x = usage_sum(r, n);
  cr_assert_eq(x.bytes_reserved, 0, "stream 0 still reserves %" PRIu64 " bytes after cleanup",
               x.bytes_reserved);
  cr_assert_eq(r[0].pages, 0);
  cr_assert_eq(r[0].pages_peak, 1, "the peak survives a cleanup");
  n = report_of(dev, 1, r);
  cr_assert_eq(r[0].usage.bytes_reserved, 64 * KiB, "b0 still lives on stream 1");
  cr_assert_eq(r[1].usage.bytes_reserved, 0, "the exclusive page of b1 was not freed");
  cr_assert_eq(r[1].pages, 0);
  n = report_of(dev, 2, r);
  cr_assert_eq(r[0].usage.bytes_reserved, 64 * KiB, "cleanup of 0 and 1 touched stream 2");
  u = usage_of(dev);
  cr_assert_eq(u.number_allocs, 2);
  cr_assert_eq(u.bytes_in_use, 5000 + 16 * KiB);
  cr_assert_eq(u.bytes_reserved, 2 * 64 * KiB);

  EXPECT_OK(weft_buffer_release(dev, b0));
  EXPECT_OK(weft_buffer_release(dev, c0));
  env_close(&e);
}

Test(memory_api, buffer_lives_in_the_manager_of_the_stream_that_created_it, .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(64 * KiB, 0, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  env_open(&e);
  weft_device *dev = e.dev;
  _Atomic uint32_t calls = 0;
  weft_kernel k = make_kernel(dev, "inc", inc_kernel, &calls);
  weft_pool_report r[MAX_REPORTS] = {0};

  weft_buffer b = make_buffer(dev, 1, 4096);
  uint32_t host[1024];
  for (uint32_t i = 0; i < 1024; i++) host[i] = i * 3u;
  EXPECT_OK(weft_buffer_write(dev, 2, b, 0, host, sizeof(host)));
  inc(dev, 3, k, b);
  inc(dev, 2, k, b);
  uint32_t got[1024];
  EXPECT_OK(weft_buffer_read(dev, 3, b, 0, got, sizeof(got)));
  for (uint32_t i = 0; i < 1024; i++)
    cr_assert_eq(got[i], i * 3u + 2u, "element %" PRIu32 " is %" PRIu32, i, got[i]);
  cr_assert_eq(atomic_load(&calls), 2);

  size_t n = report_of(dev, 1, r);
  cr_assert_eq(n, 3, "stream 1: its sliced pool, persistent, dedicated");
  cr_assert_eq(r[0].usage.number_allocs, 1);
  cr_assert_eq(r[0].usage.bytes_in_use, 4096);
  cr_assert_eq(r[0].usage.bytes_reserved, 64 * KiB);
  /* Streams that only used it hold nothing: they never allocated. */
  cr_assert_eq(report_of(dev, 2, r), 0, "stream 2 only wrote the buffer");
  cr_assert_eq(report_of(dev, 3, r), 0, "stream 3 only launched on and read the buffer");
  /* Stream ids fold onto the pool: 5 is slot 1. */
  n = report_of(dev, 5, r);
  cr_assert_eq(n, 3);
  cr_assert_eq(r[0].usage.bytes_in_use, 4096);
  weft_memory_usage u = usage_of(dev);
  cr_assert_eq(u.number_allocs, 1);
  cr_assert_eq(u.bytes_in_use, 4096);

  /* Its memory goes back to stream 1's manager: a cleanup of stream 2 frees
   * nothing, a cleanup of stream 1 frees the page. */
  EXPECT_OK(weft_buffer_release(dev, b));
  EXPECT_OK(weft_memory_cleanup(dev, 2));
  n = report_of(dev, 1, r);
  cr_assert_eq(r[0].usage.number_allocs, 0);
  cr_assert_eq(r[0].usage.bytes_reserved, 64 * KiB);
  EXPECT_OK(weft_memory_cleanup(dev, 1));
  n = report_of(dev, 1, r);
  cr_assert_eq(r[0].usage.bytes_reserved, 0);
  cr_assert_eq(usage_of(dev).bytes_reserved, 0);
  env_close(&e);
}

/* ---- install layout ---------------------------------------------------------------------------
 */

Test(memory_api, install_layout_is_refused_while_live_and_used_by_streams_created_later,
     .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config l1[1] = {sliced_pool(64 * KiB, 0, 0)};
  weft_layout layout1 = custom(l1, 1);
  e.opts.memory_layout = &layout1;
  e.opts.max_streams = 8;
  env_open(&e);
  weft_device *dev = e.dev;
  weft_pool_report r[MAX_REPORTS] = {0};

  /* Stream 1 has a manager (with layout 1) before the install. */
  weft_buffer t = make_buffer(dev, 1, 100);
  EXPECT_OK(weft_buffer_release(dev, t));

  const weft_pool_config l2[2] = {sliced_pool(128 * KiB, 32 * KiB, 0), exclusive_pool(1 * MiB)};
  weft_layout layout2 = custom(l2, 2);
  weft_buffer a = make_buffer(dev, 0, 1000);
  write_pattern(dev, 0, a, 0, 1000, 7);
  EXPECT_KIND(weft_memory_install_layout(dev, 0, &layout2), WEFT_ERR_VALIDATION);
  /* Refused: the old layout stays and the buffer is intact. */
  size_t n = report_of(dev, 0, r);
  cr_assert_eq(n, 3, "a refused install changed stream 0's pools");
  cr_assert_eq(r[0].page_size, 64 * KiB);
  cr_assert_eq(r[0].usage.number_allocs, 1);
  read_check(dev, 0, a, 0, 1000, 7, "buffer after a refused install");
  /* ... and streams created later still get layout 1. */
  weft_buffer t2 = make_buffer(dev, 8 + 3, 100); /* slot 3 */
  n = report_of(dev, 3, r);
  cr_assert_eq(n, 3, "a refused install became the layout of later streams");
  cr_assert_eq(r[0].page_size, 64 * KiB);
  EXPECT_OK(weft_buffer_release(dev, t2));

  /* Released: the install is accepted (the release is ordered before it). */
  EXPECT_OK(weft_buffer_release(dev, a));
  EXPECT_OK(weft_memory_install_layout(dev, 0, &layout2));
  n = report_of(dev, 0, r);
  cr_assert_eq(n, 4, "stream 0 after the install: 2 pools + persistent + dedicated");
  cr_assert_eq(r[0].kind, WEFT_POOL_SLICED);
  cr_assert_eq(r[0].page_size, 128 * KiB);
  cr_assert_eq(r[0].pages, 0);
  cr_assert_eq(r[0].pages_peak, 0, "an install rebuilds the pools: peaks reset");
  cr_assert_eq(r[1].kind, WEFT_POOL_EXCLUSIVE);
  weft_buffer a2 = make_buffer(dev, 0, 20000);
  n = report_of(dev, 0, r);
  cr_assert_eq(r[0].usage.number_allocs, 1);
  cr_assert_eq(r[0].usage.bytes_reserved, 128 * KiB);
  weft_buffer a3 = make_buffer(dev, 0, 40000); /* past the 32 KiB slice: exclusive */
  n = report_of(dev, 0, r);
  cr_assert_eq(r[1].usage.number_allocs, 1);
  cr_assert_eq(r[1].usage.bytes_in_use, 40000);

  /* A stream created later (slot 2: it never allocated) gets layout 2. */
  weft_buffer c = make_buffer(dev, 2, 1000);
  n = report_of(dev, 2, r);
  cr_assert_eq(n, 4, "a stream created after the install did not get the installed layout");
  cr_assert_eq(r[0].page_size, 128 * KiB);
  cr_assert_eq(r[0].usage.number_allocs, 1);
  cr_assert_eq(r[1].kind, WEFT_POOL_EXCLUSIVE);
  /* The stream that already had a manager keeps its own layout. */
  weft_buffer d = make_buffer(dev, 1, 1000);
  n = report_of(dev, 1, r);
  cr_assert_eq(n, 3, "an install on stream 0 changed stream 1's existing layout");
  cr_assert_eq(r[0].page_size, 64 * KiB);

  /* Invalid layouts: InvalidArgument, and nothing changes. Slot 3 has a
   * manager (layout 1) with no live memory, so only validation can refuse. */
  const weft_pool_config page0[1] = {sliced_pool(0, 0, 0)};
  const weft_pool_config slice_gt_page[1] = {sliced_pool(64 * KiB, 128 * KiB, 0)};
  const weft_layout bad[] = {
      custom(NULL, 0),          custom(l2, 0),
      custom(NULL, 2),          custom(page0, 1),
      custom(slice_gt_page, 1), {.kind = (weft_layout_kind)42},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_status st = weft_memory_install_layout(dev, 3, &bad[i]);
    char text[1024];
    weft_error_format(st, text, sizeof(text));
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT,
                 "invalid layout %zu: expected InvalidArgument, got %s", i, text);
    weft_error_free(st);
  }
  EXPECT_KIND(weft_memory_install_layout(dev, 3, NULL), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_memory_install_layout(NULL, 3, &layout2), WEFT_ERR_INVALID_ARGUMENT);
  n = report_of(dev, 3, r);
  cr_assert_eq(n, 3, "an invalid install changed stream 3's pools");
  cr_assert_eq(r[0].page_size, 64 * KiB);
  /* Later streams still get layout 2 (slot 5 never allocated). */
  weft_buffer f = make_buffer(dev, 5, 1000);
  n = report_of(dev, 5, r);
  cr_assert_eq(n, 4, "an invalid install replaced the layout of later streams");
  cr_assert_eq(r[0].page_size, 128 * KiB);
  EXPECT_OK(weft_buffer_release(dev, f));
  EXPECT_OK(weft_buffer_release(dev, a2));
  EXPECT_OK(weft_buffer_release(dev, a3));
  EXPECT_OK(weft_buffer_release(dev, c));
  EXPECT_OK(weft_buffer_release(dev, d));
  env_close(&e);
}

Test(memory_api, install_layout_rejects_invalid_layouts_at_open_and_leaks_nothing, .timeout = 60) {
  const weft_pool_config page0[1] = {sliced_pool(0, 0, 0)};
  const weft_pool_config slice_gt_page[1] = {sliced_pool(64 * KiB, 128 * KiB, 0)};
  const weft_pool_config ok_then_bad[2] = {sliced_pool(64 * KiB, 0, 0),
                                           sliced_pool(32 * KiB, 64 * KiB, 0)};
  const weft_pool_config cap_below_page[1] = {sliced_pool(64 * KiB, 0, 32 * KiB)};
  const weft_layout bad[] = {
      custom(NULL, 0),           custom(page0, 0),
      custom(NULL, 3),           custom(page0, 1),
      custom(slice_gt_page, 1),  custom(ok_then_bad, 2),
      custom(cap_below_page, 1), {.kind = (weft_layout_kind)42},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    env e;
    env_options(&e);
    e.opts.memory_layout = &bad[i];
    char what[64];
    snprintf(what, sizeof(what), "invalid layout %zu at open", i);
    expect_open_fails(&e, WEFT_ERR_INVALID_ARGUMENT, what);
  }
  /* The same with a capacity (the device's own small-device layout is not
   * used when a layout is given). */
  env e;
  env_options(&e);
  e.opts.memory_capacity = 4 * MiB;
  e.opts.memory_layout = &bad[3];
  expect_open_fails(&e, WEFT_ERR_INVALID_ARGUMENT, "invalid layout with a capacity");
  /* A valid custom layout at open is copied: the caller's array may go. */
  env_options(&e);
  weft_pool_config *heap = malloc(sizeof(weft_pool_config));
  cr_assert_not_null(heap);
  *heap = sliced_pool(32 * KiB, 0, 0);
  weft_layout l = custom(heap, 1);
  e.opts.memory_layout = &l;
  env_open(&e);
  memset(heap, 0, sizeof(*heap));
  free(heap);
  weft_buffer b = make_buffer(e.dev, 0, 100);
  weft_pool_report r[MAX_REPORTS] = {0};
  size_t n = report_of(e.dev, 0, r);
  cr_assert_eq(n, 3);
  cr_assert_eq(r[0].page_size, 32 * KiB);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

/* ---- modes ---------------------------------------------------------------------------------- */

/* Where the last |n| reports say allocations are: dynamic, persistent, dedicated. */
static void expect_placement(weft_device *dev, weft_stream_id stream, uint64_t dyn, uint64_t pers,
                             uint64_t ded, int line) {
  weft_pool_report r[MAX_REPORTS] = {0};
  size_t n = report_of(dev, stream, r);
  cr_assert_geq(n, 2, "line %d: no persistent and dedicated pools", line);
  size_t p = find_kind(r, n, WEFT_POOL_PERSISTENT);
  cr_assert_eq(p, n - 2, "line %d: the persistent pool is not second to last", line);
  cr_assert_eq(dyn_allocs(r, n), dyn, "line %d: %" PRIu64 " allocations in the dynamic pools", line,
               dyn_allocs(r, n));
  cr_assert_eq(r[p].usage.number_allocs, pers,
               "line %d: %" PRIu64 " allocations in the persistent pool", line,
               r[p].usage.number_allocs);
  cr_assert_eq(r[n - 1].usage.number_allocs, ded,
               "line %d: %" PRIu64 " allocations in the dedicated pool", line,
               r[n - 1].usage.number_allocs);
}
#define EXPECT_PLACEMENT(dev, stream, dyn, pers, ded)                                              \
  expect_placement((dev), (stream), (dyn), (pers), (ded), __LINE__)

Test(memory_api, modes_open_and_close_persistent_and_dedicated_windows, .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(64 * KiB, 0, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  env_open(&e);
  weft_device *dev = e.dev;
  weft_buffer bufs[16];
  size_t nb = 0;

  bufs[nb++] = make_buffer(dev, 0, 1000);
  EXPECT_PLACEMENT(dev, 0, 1, 0, 0);
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_PERSISTENT));
  bufs[nb++] = make_buffer(dev, 0, 1000);
  bufs[nb++] = make_buffer(dev, 0, 3000);
  EXPECT_PLACEMENT(dev, 0, 1, 2, 0);
  /* Windows are per stream: stream 1 is not in one. */
  bufs[nb++] = make_buffer(dev, 1, 1000);
  EXPECT_PLACEMENT(dev, 1, 1, 0, 0);
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_AUTO)); /* closes the window */
  bufs[nb++] = make_buffer(dev, 0, 1000);
  EXPECT_PLACEMENT(dev, 0, 2, 2, 0);
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_DEDICATED));
  bufs[nb++] = make_buffer(dev, 0, 5000);
  EXPECT_PLACEMENT(dev, 0, 2, 2, 1);
  weft_pool_report r[MAX_REPORTS] = {0};
  size_t n = report_of(dev, 0, r);
  cr_assert_eq(r[n - 1].kind, WEFT_POOL_DIRECT);
  cr_assert_eq(r[n - 1].usage.bytes_in_use, 5000);
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_AUTO));
  bufs[nb++] = make_buffer(dev, 0, 1000);
  EXPECT_PLACEMENT(dev, 0, 3, 2, 1);
  /* Nested: the innermost window decides; AUTO pops one. */
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_PERSISTENT));
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_DEDICATED));
  bufs[nb++] = make_buffer(dev, 0, 1000);
  EXPECT_PLACEMENT(dev, 0, 3, 2, 2);
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_AUTO));
  bufs[nb++] = make_buffer(dev, 0, 1000);
  EXPECT_PLACEMENT(dev, 0, 3, 3, 2);
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_AUTO));
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_AUTO)); /* nothing open: a no-op */
  bufs[nb++] = make_buffer(dev, 0, 1000);
  EXPECT_PLACEMENT(dev, 0, 4, 3, 2);

  /* Persistent buffers work like any other. */
  write_pattern(dev, 2, bufs[1], 0, 1000, 11);
  read_check(dev, 3, bufs[1], 0, 1000, 11, "persistent buffer");
  write_pattern(dev, 2, bufs[5], 0, 5000, 12);
  read_check(dev, 3, bufs[5], 0, 5000, 12, "dedicated buffer");

  /* Invalid mode values. */
  EXPECT_KIND(weft_memory_mode(dev, 0, (weft_alloc_mode)3), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_memory_mode(dev, 0, (weft_alloc_mode)-1), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_memory_mode(NULL, 0, WEFT_ALLOC_AUTO), WEFT_ERR_INVALID_ARGUMENT);
  bufs[nb++] = make_buffer(dev, 0, 1000);
  EXPECT_PLACEMENT(dev, 0, 5, 3, 2); /* an invalid mode pushed nothing */

  /* Releases and a cleanup free the persistent and dedicated slices too. */
  for (size_t i = 0; i < nb; i++) EXPECT_OK(weft_buffer_release(dev, bufs[i]));
  EXPECT_OK(weft_memory_cleanup(dev, 0));
  n = report_of(dev, 0, r);
  cr_assert_eq(usage_sum(r, n).bytes_reserved, 0);
  env_close(&e);
}

/* ---- dry run -------------------------------------------------------------------------------- */

Test(memory_api, dry_run_reserves_unmapped_pages_and_drops_launches_and_writes, .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(64 * KiB, 0, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  env_open(&e);
  weft_device *dev = e.dev;
  _Atomic uint32_t calls = 0;
  weft_kernel k = make_kernel(dev, "inc", inc_kernel, &calls);
  weft_pool_report r[MAX_REPORTS] = {0};

  /* A real buffer with real contents before the dry run. */
  weft_buffer w = make_buffer(dev, 0, 4096);
  write_pattern(dev, 0, w, 0, 4096, 21);
  EXPECT_OK(weft_sync(dev, 0));

  EXPECT_KIND(weft_memory_dry_run(dev, false), WEFT_ERR_INVALID_ARGUMENT);
  weft_device_stats s0 = stats_of(dev);
  EXPECT_OK(weft_memory_dry_run(dev, true));
  weft_buffer a = make_buffer(dev, 1, 20000), b = make_buffer(dev, 1, 20000);
  weft_buffer c = make_buffer(dev, 1, 64 * KiB);
  size_t n = report_of(dev, 1, r);
  cr_assert_eq(n, 3);
  cr_assert_eq(r[0].pages, 2);
  cr_assert_eq(r[0].pages_unmapped, 2, "pages carved in a dry run must stay unmapped");
  cr_assert_eq(r[0].pages_peak, 2);
  cr_assert_eq(r[0].usage.number_allocs, 3);
  cr_assert_eq(r[0].usage.bytes_in_use, 40000 + 64 * KiB);
  cr_assert_eq(r[0].usage.bytes_reserved, 2 * 64 * KiB, "unmapped pages are still reserved");

  /* Launches and writes are dropped: the kernel never runs, nothing maps. */
  inc(dev, 2, k, b);
  inc(dev, 0, k, w);
  write_pattern(dev, 2, w, 0, 4096, 99);
  write_pattern(dev, 2, c, 0, 64 * KiB, 98);
  EXPECT_OK(weft_sync(dev, 2));
  EXPECT_OK(weft_sync(dev, 0));
  cr_assert_eq(atomic_load(&calls), 0, "a kernel ran in a dry run");
  weft_device_stats s1 = stats_of(dev);
  cr_assert_eq(s1.launches_dry - s0.launches_dry, 2);
  cr_assert_eq(s1.launches_run, s0.launches_run);
  n = report_of(dev, 1, r);
  cr_assert_eq(r[0].pages_unmapped, 2, "a dropped launch or write mapped a page");

  /* A read resolves (maps) the page it needs, and only that one. */
  uint8_t tmp[64];
  EXPECT_OK(weft_buffer_read(dev, 1, a, 0, tmp, sizeof(tmp)));
  n = report_of(dev, 1, r);
  cr_assert_eq(r[0].pages, 2);
  cr_assert_eq(r[0].pages_unmapped, 1, "a read in a dry run did not map its page");
  /* The dropped write left w as it was (its page was real all along). */
  read_check(dev, 0, w, 0, 4096, 21, "w after a dropped write and launch");

  /* Dry runs nest: one end leaves the outer one open. */
  EXPECT_OK(weft_memory_dry_run(dev, true));
  EXPECT_OK(weft_memory_dry_run(dev, false));
  weft_buffer d = make_buffer(dev, 2, 1000);
  n = report_of(dev, 2, r);
  cr_assert_eq(r[0].pages_unmapped, 1, "a page carved in the outer dry run was mapped");
  inc(dev, 2, k, d);
  EXPECT_OK(weft_sync(dev, 2));
  cr_assert_eq(atomic_load(&calls), 0, "a kernel ran in the outer dry run");
  cr_assert_eq(stats_of(dev).launches_dry - s0.launches_dry, 3);
  EXPECT_OK(weft_memory_dry_run(dev, false));
  EXPECT_KIND(weft_memory_dry_run(dev, false), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_memory_dry_run(NULL, true), WEFT_ERR_INVALID_ARGUMENT);

  /* Real again: launches run, writes land, and the lazy pages map on use. */
  write_pattern(dev, 2, c, 0, 64 * KiB, 31);
  read_check(dev, 3, c, 0, 64 * KiB, 31, "c after the dry run");
  n = report_of(dev, 1, r);
  cr_assert_eq(r[0].pages_unmapped, 0);
  uint32_t zeros[250] = {0};
  EXPECT_OK(weft_buffer_write(dev, 2, d, 0, zeros, sizeof(zeros)));
  inc(dev, 2, k, d);
  uint32_t got[250];
  EXPECT_OK(weft_buffer_read(dev, 2, d, 0, got, sizeof(got)));
  for (int i = 0; i < 250; i++) cr_assert_eq(got[i], 1);
  cr_assert_eq(atomic_load(&calls), 1);
  n = report_of(dev, 2, r);
  cr_assert_eq(r[0].pages_unmapped, 0);
  cr_assert_eq(stats_of(dev).launches_dry - s0.launches_dry, 3);

  EXPECT_OK(weft_buffer_release(dev, a));
  EXPECT_OK(weft_buffer_release(dev, b));
  EXPECT_OK(weft_buffer_release(dev, c));
  EXPECT_OK(weft_buffer_release(dev, d));
  EXPECT_OK(weft_buffer_release(dev, w));
  env_close(&e);
}

Test(memory_api, dry_run_left_open_and_unmapped_pages_leak_nothing_at_close, .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(64 * KiB, 0, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  env_open(&e);
  EXPECT_OK(weft_memory_dry_run(e.dev, true));
  for (int i = 0; i < 10; i++) (void)make_buffer(e.dev, (weft_stream_id)i, 30000);
  weft_buffer b = make_buffer(e.dev, 0, 100);
  uint8_t byte;
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, &byte, 1)); /* one page mapped */
  env_close(&e);
}

/* A buffer carved in a dry run whose page cannot be backed later (the first
 * storage allocation fails): its read is StorageMappingFailed, sized as the
 * buffer, not as its page. Released, it must give its slice back: the slice
 * pointed at the freed buffer, the next cleanup or close wrote through it
 * (ASan: heap-use-after-free), and without ASan its bytes stayed in use and
 * later layout installs were refused. */
static void open_unmappable(env *e, const weft_layout *layout) {
  env_options(e);
  e->opts.memory_layout = layout;
  e->opts.failpoints = "alloc#1=OutOfMemory";
  env_open(e);
}

Test(memory_api, a_buffer_whose_dry_run_page_fails_to_map_frees_its_slice_when_released,
     .timeout = 60) {
  const weft_pool_config pools[1] = {sliced_pool(64 * KiB, 0, 0)};
  weft_layout layout = custom(pools, 1);
  env e;
  open_unmappable(&e, &layout);
  /* c, d and b share one lazy page (slices 0, 1, 2); b's read maps it, and
   * that first storage allocation fails. */
  EXPECT_OK(weft_memory_dry_run(e.dev, true));
  weft_buffer c = make_buffer(e.dev, 0, 64), d = make_buffer(e.dev, 0, 64);
  weft_buffer b = make_buffer(e.dev, 0, 64);
  EXPECT_OK(weft_memory_dry_run(e.dev, false));
  EXPECT_READ_ROOT(e.dev, 0, b, WEFT_ERR_STORAGE_MAPPING_FAILED);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_buffer_release(e.dev, c));
  EXPECT_OK(weft_buffer_release(e.dev, d));
  /* The next reservation coalesces c's and d's slices and renumbers the
   * slices after them: before the fix, b's stale owner among them (ASan:
   * heap-use-after-free in renumber_from). */
  weft_buffer f = make_buffer(e.dev, 0, 4096);
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_memory_usage u = usage_of(e.dev);
  cr_assert_eq(u.number_allocs, 1, "the released buffer's slice is still owned");
  cr_assert_eq(u.bytes_in_use, 4096, "%" PRIu64 " bytes in use, 4096 expected", u.bytes_in_use);
  EXPECT_OK(weft_buffer_release(e.dev, f));
  EXPECT_OK(weft_memory_cleanup(e.dev, 0));
  cr_assert_eq(usage_of(e.dev).bytes_reserved, 0, "the never-mapped page was not forgotten");
  EXPECT_OK(weft_memory_install_layout(e.dev, 0, &layout));
  /* The stream still works: a new buffer maps (the failpoint fired once). */
  weft_buffer g = make_buffer(e.dev, 0, 4096);
  write_pattern(e.dev, 0, g, 0, 4096, 7);
  read_check(e.dev, 0, g, 0, 4096, 7, "a buffer after the failed mapping");
  EXPECT_OK(weft_buffer_release(e.dev, g));
  env_close(&e);
}

Test(memory_api, storage_mapping_failed_reports_the_buffer_size_not_the_page_size, .timeout = 60) {
  const weft_pool_config pools[1] = {sliced_pool(16 * MiB, 0, 0)};
  weft_layout layout = custom(pools, 1);
  env e;
  open_unmappable(&e, &layout);
  EXPECT_OK(weft_memory_dry_run(e.dev, true));
  weft_buffer b = make_buffer(e.dev, 0, 64);
  EXPECT_OK(weft_memory_dry_run(e.dev, false));
  uint8_t byte;
  weft_status st = weft_buffer_read(e.dev, 0, b, 0, &byte, 1);
  weft_status root = weft_error_root(only_unwritten(st, __LINE__));
  char text[4096];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_STORAGE_MAPPING_FAILED, "%s", text);
  cr_assert_eq(weft_error_size(root), 64, "the size is the page's, not the buffer's: %s", text);
  cr_assert_not_null(strstr(text, "16777216"), "the message should still name the page: %s", text);
  weft_error_free(st);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

enum { PLAN_SMALL = 10, PLAN_PAGE = 64 * 1024 };

/* The planned workload on stream 0: ten 20000-byte buffers (three per page),
 * three of them released (a page empties), two 30000-byte buffers (first-fit
 * into the emptied page). Each is written and incremented; in a real run
 * every live buffer is read back. Returns the live buffers in |live|. */
static size_t plan_workload(weft_device *dev, weft_kernel k, bool real, weft_buffer *live) {
  weft_buffer small[PLAN_SMALL], big[2];
  uint32_t host[30000 / 4];
  for (int i = 0; i < PLAN_SMALL; i++) {
    small[i] = make_buffer(dev, 0, 20000);
    for (uint32_t j = 0; j < 20000 / 4; j++) host[j] = (uint32_t)i * 100000u + j;
    EXPECT_OK(weft_buffer_write(dev, 0, small[i], 0, host, 20000));
    inc(dev, 0, k, small[i]);
  }
  EXPECT_OK(weft_sync(dev, 0)); /* released memory is free at once: placement is deterministic */
  for (int i = 3; i < 6; i++) EXPECT_OK(weft_buffer_release(dev, small[i]));
  for (int i = 0; i < 2; i++) {
    big[i] = make_buffer(dev, 0, 30000);
    for (uint32_t j = 0; j < 30000 / 4; j++) host[j] = 7u * (uint32_t)i + j;
    EXPECT_OK(weft_buffer_write(dev, 0, big[i], 0, host, 30000));
    inc(dev, 0, k, big[i]);
  }
  size_t n = 0;
  for (int i = 0; i < PLAN_SMALL; i++) {
    if (i >= 3 && i < 6) continue;
    if (real) {
      EXPECT_OK(weft_buffer_read(dev, 1, small[i], 0, host, 20000));
      for (uint32_t j = 0; j < 20000 / 4; j++)
        cr_assert_eq(host[j], (uint32_t)i * 100000u + j + 1u, "small %d element %" PRIu32, i, j);
    }
    live[n++] = small[i];
  }
  for (int i = 0; i < 2; i++) {
    if (real) {
      EXPECT_OK(weft_buffer_read(dev, 1, big[i], 0, host, 30000));
      for (uint32_t j = 0; j < 30000 / 4; j++)
        cr_assert_eq(host[j], 7u * (uint32_t)i + j + 1u, "big %d element %" PRIu32, i, j);
    }
    live[n++] = big[i];
  }
  return n;
}

Test(memory_api, dry_run_measure_then_cap_planning_cycle_through_the_api, .timeout = 60) {
  /* 1. Measure: the workload under a dry run, on a growable sliced layout. */
  const weft_pool_config grow[1] = {sliced_pool(PLAN_PAGE, 0, 0)};
  weft_layout growable = custom(grow, 1);
  env e;
  env_options(&e);
  e.opts.memory_layout = &growable;
  env_open(&e);
  _Atomic uint32_t calls = 0;
  weft_kernel k = make_kernel(e.dev, "inc", inc_kernel, &calls);
  weft_buffer live[PLAN_SMALL + 2];
  EXPECT_OK(weft_memory_dry_run(e.dev, true));
  size_t nlive = plan_workload(e.dev, k, false, live);
  EXPECT_OK(weft_memory_dry_run(e.dev, false));
  weft_pool_report r[MAX_REPORTS] = {0};
  size_t n = report_of(e.dev, 0, r);
  cr_assert_eq(n, 3);
  uint64_t peak = r[0].pages_peak;
  cr_assert_eq(peak, 4, "ten buffers three to a page, then two into the emptied one: 4 pages");
  cr_assert_eq(r[0].pages_unmapped, r[0].pages, "the dry run mapped a page");
  cr_assert_eq(atomic_load(&calls), 0);
  cr_assert_eq(stats_of(e.dev).launches_dry, PLAN_SMALL + 2);
  for (size_t i = 0; i < nlive; i++) EXPECT_OK(weft_buffer_release(e.dev, live[i]));
  env_close(&e);

  /* 2. Cap: the same layout, capped at the measured peak, on a fresh device. */
  weft_pool_config capped_pool[1] = {sliced_pool(PLAN_PAGE, 0, peak * PLAN_PAGE)};
  weft_layout capped = custom(capped_pool, 1);
  env_options(&e);
  env_open(&e);
  EXPECT_OK(weft_memory_install_layout(e.dev, 0, &capped));
  k = make_kernel(e.dev, "inc", inc_kernel, &calls);

  /* 3. Run it for real: it fits, without any reclaim. */
  nlive = plan_workload(e.dev, k, true, live);
  cr_assert_eq(atomic_load(&calls), PLAN_SMALL + 2);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.reclaims, 0, "the planned workload needed the reclaim ladder");
  n = report_of(e.dev, 0, r);
  cr_assert_eq(r[0].pages, peak);
  cr_assert_eq(r[0].pages_unmapped, 0);

  /* 4. One extra page-sized buffer no longer fits. */
  weft_buffer extra = make_buffer(e.dev, 0, PLAN_PAGE);
  char msg[2048];
  expect_read_root(e.dev, 0, extra, WEFT_ERR_OUT_OF_MEMORY, msg, sizeof(msg), __LINE__);
  s = stats_of(e.dev);
  cr_assert_eq(s.reclaims, 1);
  cr_assert_eq(s.reclaims_rescued, 0);
  n = report_of(e.dev, 0, r);
  cr_assert_eq(r[0].pages, peak, "a capped pool grew past its cap");
  /* The planned buffers are intact. */
  uint32_t host[20000 / 4];
  EXPECT_OK(weft_buffer_read(e.dev, 2, live[0], 0, host, 20000));
  for (uint32_t j = 0; j < 20000 / 4; j++) cr_assert_eq(host[j], j + 1u);
  EXPECT_OK(weft_buffer_release(e.dev, extra));
  for (size_t i = 0; i < nlive; i++) EXPECT_OK(weft_buffer_release(e.dev, live[i]));
  env_close(&e);
}

Test(memory_api, a_layout_whose_sizes_overflow_the_alignment_is_refused_at_open_and_install,
     .timeout = 60) {
  /* page_size UINT64_MAX rounded to 0, then a division by it (SIGFPE). */
  const weft_pool_config pools[1] = {sliced_pool(UINT64_MAX, 0, 64 * MiB)};
  weft_layout bad = custom(pools, 1);
  env e;
  env_options(&e);
  e.opts.memory_layout = &bad;
  expect_open_fails(&e, WEFT_ERR_INVALID_ARGUMENT, "page_size UINT64_MAX at open");
  e = env_new();
  weft_buffer b = make_buffer(e.dev, 0, 100);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_KIND(weft_memory_install_layout(e.dev, 0, &bad), WEFT_ERR_INVALID_ARGUMENT);
  const weft_pool_config excl[1] = {{.kind = WEFT_POOL_EXCLUSIVE,
                                     .max_alloc_size = UINT64_MAX - 1,
                                     .dealloc_period = WEFT_NO_PERIOD,
                                     .reclaim_at = WEFT_NO_CEILING}};
  weft_layout wraps = custom(excl, 1);
  EXPECT_KIND(weft_memory_install_layout(e.dev, 0, &wraps), WEFT_ERR_INVALID_ARGUMENT);
  /* The old layout still serves. */
  b = make_buffer(e.dev, 0, 4096);
  write_pattern(e.dev, 0, b, 0, 4096, 3);
  read_check(e.dev, 0, b, 0, 4096, 3, "after the refused installs");
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

/* Errors that named what the caller never configured (issue 12, item 30). */
static void expect_open_message(env *e, const char *needle, const char *what) {
  weft_device *dev = NULL;
  weft_status st = weft_device_open(&e->opts, &dev);
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s: got %s", what, text);
  cr_assert_not_null(strstr(text, needle), "%s: '%s' does not say '%s'", what, text, needle);
  weft_error_free(st);
  cr_assert_null(dev);
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%s: the open leaked %" PRIu64 " blocks", what, c.live_blocks);
  weft_counting_allocator_destroy(e->ca);
}

Test(memory_api, a_capacity_below_the_alignment_is_refused_naming_memory_capacity, .timeout = 60) {
  const uint64_t caps[] = {1, 10, 63};
  for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++) {
    env e;
    env_options(&e);
    e.opts.memory_capacity = caps[i];
    char needle[64];
    snprintf(needle, sizeof needle, "memory_capacity %" PRIu64, caps[i]);
    expect_open_message(&e, needle, needle);
  }
  env e; /* the alignment itself is enough for one buffer */
  env_options(&e);
  e.opts.memory_capacity = 64;
  env_open(&e);
  weft_buffer b = make_buffer(e.dev, 0, 64);
  write_pattern(e.dev, 0, b, 0, 64, 5);
  read_check(e.dev, 0, b, 0, 64, 5, "the one buffer a 64-byte device holds");
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(memory_api, a_layout_of_too_many_pools_is_refused_at_open_for_its_count, .timeout = 60) {
  static weft_pool_config pools[300];
  for (size_t i = 0; i < 300; i++) pools[i] = sliced_pool(64 * KiB, 0, 0);
  weft_layout many = custom(pools, 300);
  env e;
  env_options(&e);
  e.opts.memory_layout = &many;
  expect_open_message(&e, "300 pools; a layout holds at most 254", "300 pools at open");
  env_options(&e);
  many.num_pools = 255;
  e.opts.memory_layout = &many;
  expect_open_message(&e, "255 pools; a layout holds at most 254", "255 pools at open");
  env_options(&e);
  many.num_pools = 254;
  e.opts.memory_layout = &many;
  env_open(&e);
  env_close(&e);
}

/* On a 1 GiB device, two 200 MiB buffers reserved 1014 MiB (exclusive pages
 * sized from half the pool's max) and a third failed with OutOfMemory while
 * 600 MiB was unused, reporting "largest free extent 0" next to "free
 * 644529472" (issue 12, item 29). */
Test(memory_api, exclusive_pages_fit_their_requests_and_the_oom_snapshot_is_true, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.memory_capacity = 1024 * MiB;
  env_open(&e);
  weft_buffer b[3];
  for (int i = 0; i < 3; i++) {
    b[i] = make_buffer(e.dev, 0, 200 * MiB);
    write_pattern(e.dev, 0, b[i], 0, 4096, (uint32_t)(60 + i));
  }
  for (int i = 0; i < 3; i++) read_check(e.dev, 0, b[i], 0, 4096, (uint32_t)(60 + i), "200 MiB");
  weft_memory_usage u = usage_of(e.dev);
  cr_assert_eq(u.bytes_reserved, 600 * MiB, "three 200 MiB buffers reserved %" PRIu64,
               u.bytes_reserved);
  /* 500 MiB more cannot fit: the snapshot's numbers are what is there. */
  weft_buffer big = make_buffer(e.dev, 0, 500 * MiB);
  char msg[2048];
  expect_read_root(e.dev, 0, big, WEFT_ERR_OUT_OF_MEMORY, msg, sizeof(msg), __LINE__);
  cr_assert_not_null(strstr(msg, "request 524288000 bytes"), "%s", msg);
  cr_assert_not_null(strstr(msg, "reserved 629145600, in use 629145600, free 0"), "%s", msg);
  cr_assert_not_null(strstr(msg, "largest free extent 0"), "%s", msg);
  cr_assert_not_null(strstr(msg, "storage holds 629145600 of 1073741824 bytes"), "%s", msg);
  EXPECT_OK(weft_buffer_release(e.dev, big));
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  env_close(&e);
}

/* ---- relocation by an explicit cleanup ---------------------------------------------------------
 */

Test(memory_api, an_explicit_cleanup_counts_the_allocations_it_relocates, .timeout = 60) {
  env e;
  env_options(&e);
  weft_layout adaptive = {.kind = WEFT_LAYOUT_ADAPTIVE};
  e.opts.memory_layout = &adaptive;
  env_open(&e);
  /* 100 KiB (past the small pool's 64 KiB slices) lands on the arena's
   * first 2 MiB page; 3 MiB grows the page to 4 MiB, outdating the first. */
  weft_buffer a = make_buffer(e.dev, 0, 100 * KiB);
  write_pattern(e.dev, 0, a, 0, 100 * KiB, 41);
  weft_buffer big = make_buffer(e.dev, 0, 3 * MiB);
  EXPECT_OK(weft_sync(e.dev, 0));
  uint64_t before = stats_of(e.dev).relocations;
  EXPECT_OK(weft_memory_cleanup(e.dev, 0));
  weft_pool_report r[MAX_REPORTS] = {0};
  size_t n = report_of(e.dev, 0, r);
  for (size_t i = 0; i < n; i++)
    cr_assert(!r[i].outdated || r[i].usage.number_allocs == 0,
              "an outdated pool still holds %" PRIu64 " allocations after the cleanup",
              r[i].usage.number_allocs);
  cr_assert_eq(stats_of(e.dev).relocations - before, 1,
               "the cleanup moved a's allocation; stats.relocations counted %" PRIu64,
               stats_of(e.dev).relocations - before);
  read_check(e.dev, 0, a, 0, 100 * KiB, 41, "a after its relocation");
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, big));
  env_close(&e);
}

/* ---- the reclaim ladder ---------------------------------------------------------------------- */

enum { HOGS = 4, REQUEST = 1000000 };

/* A 4 MiB device (the device's own small layout: 1 MiB sliced pages) full
 * of four 1 MiB hogs on stream 0. */
static void open_full_device(env *e, weft_buffer *hogs) {
  env_options(e);
  e->opts.memory_capacity = HOGS * MiB;
  env_open(e);
  for (int i = 0; i < HOGS; i++) {
    hogs[i] = make_buffer(e->dev, 0, 1 * MiB);
    write_pattern(e->dev, 0, hogs[i], 0, 4096, (uint32_t)(100 + i));
  }
  EXPECT_OK(weft_sync(e->dev, 0));
  weft_memory_usage u = usage_of(e->dev);
  cr_assert_eq(u.number_allocs, HOGS);
  cr_assert_eq(u.bytes_reserved, HOGS * MiB, "the hogs should fill the device exactly");
}

Test(memory_api, reclaim_ladder_reuses_released_pages_of_the_same_and_other_streams,
     .timeout = 60) {
  env e;
  weft_buffer hogs[HOGS];
  open_full_device(&e, hogs);
  weft_device *dev = e.dev;

  /* Full: a create fails; the read tells why, with a snapshot. */
  weft_buffer x = make_buffer(dev, 0, REQUEST);
  char msg[2048];
  expect_read_root(dev, 0, x, WEFT_ERR_OUT_OF_MEMORY, msg, sizeof(msg), __LINE__);
  cr_assert_not_null(strstr(msg, "memory snapshot"), "no snapshot in '%s'", msg);
  cr_assert_not_null(strstr(msg, "1000000"), "the request size is not in '%s'", msg);
  /* A write to the unallocated buffer is accepted and dropped; it still
   * reads back as out of memory. */
  write_pattern(dev, 1, x, 0, 4096, 9);
  EXPECT_READ_ROOT(dev, 1, x, WEFT_ERR_OUT_OF_MEMORY);
  weft_device_stats s = stats_of(dev);
  cr_assert_eq(s.reclaims, 1);
  cr_assert_eq(s.reclaims_rescued, 0);
  EXPECT_OK(weft_buffer_release(dev, x));

  /* Same stream: a released hog's page serves the next create. */
  EXPECT_OK(weft_buffer_release(dev, hogs[0]));
  weft_buffer y = make_buffer(dev, 0, REQUEST);
  write_pattern(dev, 0, y, 0, REQUEST, 5);
  read_check(dev, 1, y, 0, REQUEST, 5, "y (same stream)");

  /* Other stream: stream 1 holds no page, stream 0 holds a free one; the
   * ladder frees it so stream 1 can have it (no stranding). */
  EXPECT_OK(weft_buffer_release(dev, hogs[1]));
  weft_buffer z = make_buffer(dev, 1, REQUEST);
  write_pattern(dev, 1, z, 0, REQUEST, 6);
  read_check(dev, 2, z, 0, REQUEST, 6, "z (other stream)");
  s = stats_of(dev);
  cr_assert_eq(s.reclaims, 2, "the cross-stream create did not go through the ladder");
  cr_assert_eq(s.reclaims_rescued, 1);
  weft_pool_report r[MAX_REPORTS] = {0};
  size_t n = report_of(dev, 1, r);
  cr_assert_eq(usage_sum(r, n).number_allocs, 1, "z lives on stream 1");
  cr_assert_eq(usage_of(dev).bytes_reserved, HOGS * MiB);

  /* Full again: fails again (still counted), rescued count unchanged. */
  weft_buffer x2 = make_buffer(dev, 2, REQUEST);
  EXPECT_READ_ROOT(dev, 2, x2, WEFT_ERR_OUT_OF_MEMORY);
  s = stats_of(dev);
  cr_assert_eq(s.reclaims, 3);
  cr_assert_eq(s.reclaims_rescued, 1);

  /* Larger than the whole device: BufferTooBig, which no reclaim can fix. */
  weft_buffer big = make_buffer(dev, 3, HOGS * MiB + 64);
  EXPECT_READ_ROOT(dev, 3, big, WEFT_ERR_BUFFER_TOO_BIG);
  s = stats_of(dev);
  cr_assert_eq(s.reclaims, 3, "a BufferTooBig went through the reclaim ladder");
  cr_assert_eq(s.reclaims_rescued, 1);

  /* The survivors are intact. */
  read_check(dev, 0, hogs[2], 0, 4096, 102, "hog 2");
  read_check(dev, 0, hogs[3], 0, 4096, 103, "hog 3");
  read_check(dev, 3, y, 0, REQUEST, 5, "y at the end");
  read_check(dev, 3, z, 0, REQUEST, 6, "z at the end");
  EXPECT_OK(weft_buffer_release(dev, x2));
  EXPECT_OK(weft_buffer_release(dev, big));
  EXPECT_OK(weft_buffer_release(dev, y));
  /* z, hogs[2] and hogs[3] are left to close. */
  env_close(&e);
}

typedef struct reclaim_probe {
  weft_device *dev;
  weft_buffer victim;
  weft_buffer other; /* a live buffer to try a read on */
  int calls;
  weft_stream_id stream;
  uint64_t bytes;
  weft_error_kind release_kind, sync_kind, read_kind, usage_kind, report_kind, stats_kind;
} reclaim_probe;

static weft_error_kind kind_free(weft_status st) {
  weft_error_kind k = weft_error_kind_of(st);
  weft_error_free(st);
  return k;
}

static uint64_t reclaim_cb(void *user, weft_stream_id stream, uint64_t bytes) {
  reclaim_probe *p = user;
  p->calls++;
  p->stream = stream;
  p->bytes = bytes;
  /* Blocking calls from the scheduler thread are refused, not deadlocked. */
  p->sync_kind = kind_free(weft_sync(p->dev, 0));
  uint8_t byte;
  p->read_kind = kind_free(weft_buffer_read(p->dev, 0, p->other, 0, &byte, 1));
  weft_memory_usage u = {0};
  p->usage_kind = kind_free(weft_memory_usage_get(p->dev, &u));
  size_t n = 0;
  p->report_kind = kind_free(weft_memory_report_get(p->dev, 0, NULL, &n));
  weft_device_stats s = {0};
  p->stats_kind = kind_free(weft_device_stats_get(p->dev, &s));
  /* A release takes effect at once. */
  p->release_kind = kind_free(weft_buffer_release(p->dev, p->victim));
  return 1 * MiB;
}

Test(memory_api, reclaim_callback_releases_a_hog_and_rescues_the_create, .timeout = 60) {
  env e;
  weft_buffer hogs[HOGS];
  open_full_device(&e, hogs);
  weft_device *dev = e.dev;
  reclaim_probe p = {.dev = dev, .victim = hogs[2], .other = hogs[3]};
  EXPECT_OK(weft_memory_set_reclaim(dev, reclaim_cb, &p));

  weft_buffer x = make_buffer(dev, 1, REQUEST);
  write_pattern(dev, 1, x, 0, REQUEST, 41);
  read_check(dev, 2, x, 0, REQUEST, 41, "x rescued by the callback");
  cr_assert_eq(p.calls, 1);
  cr_assert_eq(p.stream % 4, 1, "the callback was told stream %" PRIu64, p.stream);
  cr_assert_eq(p.bytes, REQUEST);
  cr_assert_eq(p.release_kind, WEFT_OK, "a release inside the callback failed: %s",
               weft_error_kind_name(p.release_kind));
  cr_assert_eq(p.sync_kind, WEFT_ERR_INVALID_ARGUMENT, "weft_sync in the callback: %s",
               weft_error_kind_name(p.sync_kind));
  cr_assert_eq(p.read_kind, WEFT_ERR_INVALID_ARGUMENT, "weft_buffer_read in the callback: %s",
               weft_error_kind_name(p.read_kind));
  cr_assert_eq(p.usage_kind, WEFT_ERR_INVALID_ARGUMENT, "weft_memory_usage_get in the callback: %s",
               weft_error_kind_name(p.usage_kind));
  cr_assert_eq(p.report_kind, WEFT_ERR_INVALID_ARGUMENT,
               "weft_memory_report_get in the callback: %s", weft_error_kind_name(p.report_kind));
  cr_assert_eq(p.stats_kind, WEFT_ERR_INVALID_ARGUMENT, "weft_device_stats_get in the callback: %s",
               weft_error_kind_name(p.stats_kind));
  weft_device_stats s = stats_of(dev);
  cr_assert_eq(s.reclaims, 1);
  cr_assert_eq(s.reclaims_rescued, 1);
  /* The victim's handle is dead. */
  EXPECT_KIND(weft_buffer_release(dev, hogs[2]), WEFT_ERR_NOT_FOUND);
  weft_pool_report r[MAX_REPORTS] = {0};
  size_t n = report_of(dev, 0, r);
  cr_assert_eq(usage_sum(r, n).number_allocs, HOGS - 1);
  n = report_of(dev, 1, r);
  cr_assert_eq(usage_sum(r, n).number_allocs, 1);

  /* Cleared: the next failing create is not rescued and the callback is not
   * called. */
  EXPECT_OK(weft_memory_set_reclaim(dev, NULL, NULL));
  weft_buffer y = make_buffer(dev, 2, REQUEST);
  EXPECT_READ_ROOT(dev, 2, y, WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(p.calls, 1, "a cleared callback was called");
  s = stats_of(dev);
  cr_assert_eq(s.reclaims, 2);
  cr_assert_eq(s.reclaims_rescued, 1);

  read_check(dev, 0, hogs[3], 0, 4096, 103, "hog 3");
  EXPECT_OK(weft_buffer_release(dev, y));
  EXPECT_OK(weft_buffer_release(dev, x));
  env_close(&e);
}

typedef struct noop_probe {
  int calls;
} noop_probe;

static uint64_t noop_cb(void *user, weft_stream_id stream, uint64_t bytes) {
  (void)stream;
  (void)bytes;
  ((noop_probe *)user)->calls++;
  return 0;
}

Test(memory_api, reclaim_callback_is_not_called_for_buffer_too_big_or_successful_creates,
     .timeout = 60) {
  env e;
  weft_buffer hogs[HOGS];
  open_full_device(&e, hogs);
  weft_device *dev = e.dev;
  noop_probe p = {0};
  EXPECT_OK(weft_memory_set_reclaim(dev, noop_cb, &p));
  weft_buffer big = make_buffer(dev, 1, 64 * MiB);
  EXPECT_READ_ROOT(dev, 1, big, WEFT_ERR_BUFFER_TOO_BIG);
  cr_assert_eq(p.calls, 0, "the callback was called for a BufferTooBig");
  EXPECT_OK(weft_buffer_release(dev, hogs[0]));
  weft_buffer ok = make_buffer(dev, 0, REQUEST); /* the free page of stream 0 */
  write_pattern(dev, 0, ok, 0, 4096, 3);
  read_check(dev, 0, ok, 0, 4096, 3, "ok");
  cr_assert_eq(p.calls, 0, "the callback was called for a create that fit");
  /* A callback that frees nothing: called once, the create still fails. */
  weft_buffer x = make_buffer(dev, 1, REQUEST);
  EXPECT_READ_ROOT(dev, 1, x, WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(p.calls, 1);
  weft_device_stats s = stats_of(dev);
  cr_assert_eq(s.reclaims, 1);
  cr_assert_eq(s.reclaims_rescued, 0);
  EXPECT_KIND(weft_memory_set_reclaim(NULL, noop_cb, &p), WEFT_ERR_INVALID_ARGUMENT);
  env_close(&e);
}

/* ---- large writes (staged through the drop queue) ------------------------------------------ */

enum { BIG_WRITE = 100 * 1024, CHUNKS = 4, WSTREAMS = 4, ROUNDS = 13 };

Test(memory_api, writes_larger_than_64k_round_trip_on_several_streams, .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(2 * MiB, 1 * MiB, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  env_open(&e);
  weft_device *dev = e.dev;
  weft_buffer bufs[WSTREAMS];
  for (int s = 0; s < WSTREAMS; s++)
    bufs[s] = make_buffer(dev, (weft_stream_id)s, (uint64_t)BIG_WRITE * CHUNKS);
  uint8_t *chunk = malloc(BIG_WRITE), *got = malloc((size_t)BIG_WRITE * CHUNKS);
  cr_assert_not_null(chunk);
  cr_assert_not_null(got);
  int writes = 0;
  for (uint32_t round = 0; round < ROUNDS; round++) {
    /* Every stream writes four 100 KiB chunks to its buffer... */
    for (int s = 0; s < WSTREAMS; s++)
      for (int c = 0; c < CHUNKS; c++) {
        uint32_t seed = round * 1000u + (uint32_t)s * 10u + (uint32_t)c;
        fill_pattern(chunk, BIG_WRITE, seed);
        EXPECT_OK(weft_buffer_write(dev, (weft_stream_id)s, bufs[s], (uint64_t)c * BIG_WRITE, chunk,
                                    BIG_WRITE));
        writes++;
      }
    /* ... and the next stream reads it back (a cross-stream read). */
    for (int s = 0; s < WSTREAMS; s++) {
      EXPECT_OK(weft_buffer_read(dev, (weft_stream_id)((s + 1) % WSTREAMS), bufs[s], 0, got,
                                 (uint64_t)BIG_WRITE * CHUNKS));
      for (int c = 0; c < CHUNKS; c++) {
        char what[64];
        snprintf(what, sizeof(what), "round %" PRIu32 " stream %d chunk %d", round, s, c);
        check_pattern(got + (size_t)c * BIG_WRITE, BIG_WRITE,
                      round * 1000u + (uint32_t)s * 10u + (uint32_t)c, what);
      }
    }
  }
  cr_assert_geq(writes, 200);
  /* Overlapping large writes on different streams to one buffer: the last
   * one submitted wins (write-after-write is ordered across streams). */
  for (int s = 0; s < WSTREAMS; s++) {
    fill_pattern(chunk, BIG_WRITE, 7000u + (uint32_t)s);
    EXPECT_OK(weft_buffer_write(dev, (weft_stream_id)s, bufs[0], 1000, chunk, BIG_WRITE));
  }
  EXPECT_OK(weft_buffer_read(dev, 0, bufs[0], 1000, got, BIG_WRITE));
  check_pattern(got, BIG_WRITE, 7000u + WSTREAMS - 1, "last of the overlapping writes");
  free(chunk);
  free(got);
  for (int s = 0; s < WSTREAMS; s++) EXPECT_OK(weft_buffer_release(dev, bufs[s]));
  env_close(&e);
}

Test(memory_api, closing_with_staged_writes_pending_leaks_nothing, .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(2 * MiB, 1 * MiB, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  env_open(&e);
  weft_device *dev = e.dev;
  uint8_t *chunk = malloc(BIG_WRITE);
  cr_assert_not_null(chunk);
  weft_buffer bufs[WSTREAMS];
  for (int s = 0; s < WSTREAMS; s++) bufs[s] = make_buffer(dev, (weft_stream_id)s, 4 * BIG_WRITE);
  /* 70 writes: more than the drop queue's 64-item flush threshold on no
   * stream, so most stay staged; one buffer is released with writes queued. */
  for (int i = 0; i < 70; i++) {
    int s = i % WSTREAMS;
    fill_pattern(chunk, BIG_WRITE, (uint32_t)i);
    EXPECT_OK(weft_buffer_write(dev, (weft_stream_id)s, bufs[s],
                                (uint64_t)(i / WSTREAMS % 4) * BIG_WRITE, chunk, BIG_WRITE));
  }
  EXPECT_OK(weft_buffer_release(dev, bufs[1]));
  /* A write staged on a stream to a buffer that is then released. */
  EXPECT_OK(weft_buffer_write(dev, 3, bufs[2], 0, chunk, BIG_WRITE));
  EXPECT_OK(weft_buffer_release(dev, bufs[2]));
  free(chunk);
  env_close(&e); /* no sync: close drains the staged writes */
}

Test(memory_api, many_staged_writes_on_one_stream_pass_the_drop_queue_threshold, .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(2 * MiB, 1 * MiB, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  env_open(&e);
  weft_device *dev = e.dev;
  uint8_t *chunk = malloc(BIG_WRITE), *got = malloc(BIG_WRITE);
  cr_assert_not_null(chunk);
  cr_assert_not_null(got);
  weft_buffer b = make_buffer(dev, 0, 8 * BIG_WRITE);
  /* 200 writes from one stream: the drop queue flushes (twice over) while
   * writes are queued; each slot keeps the last value written to it. */
  for (int i = 0; i < 200; i++) {
    fill_pattern(chunk, BIG_WRITE, (uint32_t)i);
    EXPECT_OK(weft_buffer_write(dev, 1, b, (uint64_t)(i % 8) * BIG_WRITE, chunk, BIG_WRITE));
  }
  for (int slot = 0; slot < 8; slot++) {
    EXPECT_OK(weft_buffer_read(dev, 2, b, (uint64_t)slot * BIG_WRITE, got, BIG_WRITE));
    char what[32];
    snprintf(what, sizeof(what), "slot %d", slot);
    check_pattern(got, BIG_WRITE, (uint32_t)(192 + slot), what);
  }
  EXPECT_OK(weft_memory_cleanup(dev, 1)); /* flushes stream 1's drop queue twice */
  free(chunk);
  free(got);
  EXPECT_OK(weft_buffer_release(dev, b));
  env_close(&e);
}

/* ---- persistent_memory option -----------------------------------------------------------------
 */

Test(memory_api, persistent_memory_option_rejects_invalid_values_and_enforced_goes_persistent,
     .timeout = 60) {
  const int bad[] = {4, -1, 1000};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    env e;
    env_options(&e);
    e.opts.persistent_memory = bad[i];
    char what[64];
    snprintf(what, sizeof(what), "persistent_memory %d", bad[i]);
    expect_open_fails(&e, WEFT_ERR_INVALID_ARGUMENT, what);
  }

  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(64 * KiB, 0, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  e.opts.persistent_memory = WEFT_PERSISTENT_ENFORCED;
  env_open(&e);
  weft_device *dev = e.dev;
  weft_buffer a = make_buffer(dev, 0, 1000), b = make_buffer(dev, 0, 5000);
  weft_buffer c = make_buffer(dev, 2, 1000);
  EXPECT_PLACEMENT(dev, 0, 0, 2, 0);
  EXPECT_PLACEMENT(dev, 2, 0, 1, 0);
  weft_pool_report r[MAX_REPORTS] = {0};
  size_t n = report_of(dev, 0, r);
  cr_assert_eq(r[0].pages, 0, "an AUTO buffer under ENFORCED took a sliced page");
  /* An explicit AUTO changes nothing under ENFORCED. */
  EXPECT_OK(weft_memory_mode(dev, 0, WEFT_ALLOC_AUTO));
  weft_buffer d = make_buffer(dev, 0, 1000);
  EXPECT_PLACEMENT(dev, 0, 0, 3, 0);
  write_pattern(dev, 1, a, 0, 1000, 51);
  read_check(dev, 1, a, 0, 1000, 51, "persistent a");
  /* The persistent pool reuses a freed slice of exactly the same size. */
  EXPECT_OK(weft_buffer_release(dev, d));
  weft_buffer d2 = make_buffer(dev, 0, 1000);
  n = report_of(dev, 0, r);
  size_t p = find_kind(r, n, WEFT_POOL_PERSISTENT);
  cr_assert_eq(r[p].pages, 3, "a same-size persistent slice was not reused");
  cr_assert_eq(r[p].usage.number_allocs, 3);
  EXPECT_OK(weft_buffer_release(dev, a));
  EXPECT_OK(weft_buffer_release(dev, b));
  EXPECT_OK(weft_buffer_release(dev, c));
  EXPECT_OK(weft_buffer_release(dev, d2));
  EXPECT_OK(weft_memory_cleanup(dev, 0));
  n = report_of(dev, 0, r);
  cr_assert_eq(usage_sum(r, n).bytes_reserved, 0, "cleanup left persistent slices");
  env_close(&e);
}

Test(memory_api, persistent_memory_disabled_ignores_persistent_windows, .timeout = 60) {
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(64 * KiB, 0, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  e.opts.persistent_memory = WEFT_PERSISTENT_DISABLED;
  env_open(&e);
  EXPECT_OK(weft_memory_mode(e.dev, 0, WEFT_ALLOC_PERSISTENT));
  weft_buffer a = make_buffer(e.dev, 0, 1000);
  EXPECT_PLACEMENT(e.dev, 0, 1, 0, 0);
  EXPECT_OK(weft_memory_mode(e.dev, 0, WEFT_ALLOC_DEDICATED)); /* always honoured */
  weft_buffer b = make_buffer(e.dev, 0, 1000);
  EXPECT_PLACEMENT(e.dev, 0, 1, 0, 1);
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

/* ---- memory calls racing completions ----------------------------------------------------------
 */

static void spin_us(unsigned us) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000L < (long)us);
}

Test(memory_api, memory_calls_issued_while_work_completes_do_not_deadlock, .timeout = 60) {
  /* A cleanup or an install waits for in-flight work (it drains); the
   * completion of a write that finishes just as the call arrives must still
   * be seen, or the drain waits forever. */
  env e;
  env_options(&e);
  const weft_pool_config pools[1] = {sliced_pool(2 * MiB, 1 * MiB, 0)};
  weft_layout layout = custom(pools, 1);
  e.opts.memory_layout = &layout;
  e.opts.max_streams = 8;
  env_open(&e);
  weft_device *dev = e.dev;
  uint8_t *chunk = malloc(256 * KiB);
  cr_assert_not_null(chunk);
  fill_pattern(chunk, 256 * KiB, 1);
  weft_buffer b[4];
  for (int s = 0; s < 4; s++) b[s] = make_buffer(dev, (weft_stream_id)s, 256 * KiB);
  for (int i = 0; i < 3000; i++) {
    int s = i % 4;
    EXPECT_OK(weft_buffer_write(dev, (weft_stream_id)s, b[s], 0, chunk, 256 * KiB));
    spin_us((unsigned)(i % 40));
    if (i % 2 == 0) /* slots 4..7 hold no memory: the install is accepted */
      EXPECT_OK(weft_memory_cleanup(dev, (weft_stream_id)s));
    else
      EXPECT_OK(weft_memory_install_layout(dev, (weft_stream_id)(4 + s), &layout));
  }
  read_check(dev, 0, b[0], 0, 256 * KiB, 1, "after the races");
  free(chunk);
  for (int s = 0; s < 4; s++) EXPECT_OK(weft_buffer_release(dev, b[s]));
  env_close(&e);
}
