/* Layouts: validation of CUSTOM pool lists (every error is InvalidArgument),
 * rounding to the alignment and defaults, the SUBSLICES ladder and the
 * EXCLUSIVE_PAGES buckets (docs/memory.md), routing by size, and install (refused while
 * the dynamic pools hold live memory, accepted afterwards, peaks reset). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"
#include "mm_test_util.h"

TestSuite(layout, .timeout = 30, .fini = mm_fini);

/* weft_mm_create must refuse |layout| with InvalidArgument, build nothing and
 * leak nothing. */
static void expect_invalid_layout(weft_layout layout, const char *what) {
  weft_mm_config cfg = mm_config(layout, GIB);
  mm_env e;
  env_storage(&e, 0);
  weft_mm *out = NULL;
  weft_status st = weft_mm_create(&cfg, e.storage, env_alloc(), &out);
  char buf[1024] = "Ok";
  if (st) weft_error_format(st, buf, sizeof buf);
  if (!st && out) weft_mm_destroy(out);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT,
               "%s: expected InvalidArgument, got %s", what, buf);
  cr_assert_null(out, "%s: no manager on failure", what);
  cr_assert_neq(weft_error_message(st)[0], '\0', "%s: the error names the rule", what);
  weft_error_free(st);
  cr_assert_eq(alloc_calls(&e), 0);
  mm_close(&e);
}

static void expect_invalid_pools(const weft_pool_config *pools, size_t n, const char *what) {
  expect_invalid_layout(custom_layout(pools, n), what);
}

static void expect_valid_pools(const weft_pool_config *pools, size_t n, const char *what) {
  weft_mm_config cfg = mm_config(custom_layout(pools, n), GIB);
  mm_env e;
  env_storage(&e, 0);
  weft_status st = weft_mm_create(&cfg, e.storage, env_alloc(), &e.mm);
  char buf[1024] = "Ok";
  if (st) weft_error_format(st, buf, sizeof buf);
  weft_error_free(st);
  cr_assert_null(st, "%s: refused: %s", what, buf);
  mm_close(&e);
}

/* ---- validation
 * ----------------------------------------------------------------------------------- */

Test(layout, an_empty_custom_list_is_invalid) {
  expect_invalid_pools(NULL, 0, "no pools at all");
  weft_pool_config one[] = {sliced_pool(4096, 0, 0)};
  expect_invalid_pools(one, 0, "a list of zero pools");
}

Test(layout, a_zero_page_size_is_invalid) {
  weft_pool_config pools[] = {sliced_pool(0, 0, 0)};
  expect_invalid_pools(pools, 1, "page_size 0");
  weft_pool_config second[] = {sliced_pool(4096, 0, 0), sliced_pool(0, 1024, 0)};
  expect_invalid_pools(second, 2, "page_size 0 in the second pool");
}

Test(layout, a_max_slice_above_the_page_is_invalid) {
  weft_pool_config pools[] = {sliced_pool(4096, 8192, 0)};
  expect_invalid_pools(pools, 1, "max_slice > page");
  weft_pool_config equal[] = {sliced_pool(4096, 4096, 0)};
  expect_valid_pools(equal, 1, "max_slice == page");
}

Test(layout, a_cap_below_the_page_is_invalid) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 2048)};
  expect_invalid_pools(pools, 1, "max_pool_size < page");
  weft_pool_config tiny[] = {sliced_pool(1024, 1024, 16)};
  expect_invalid_pools(tiny, 1, "max_pool_size below the alignment");
  weft_pool_config one_page[] = {sliced_pool(4096, 0, 4096)};
  expect_valid_pools(one_page, 1, "a cap of exactly one page");
}

Test(layout, a_cap_of_more_than_65535_pages_is_invalid) {
  weft_pool_config pools[] = {sliced_pool(64, 0, 64 * UINT64_C(65536))};
  expect_invalid_pools(pools, 1, "cap / page = 65536");
  weft_pool_config max[] = {sliced_pool(64, 0, 64 * UINT64_C(65535))};
  expect_valid_pools(max, 1, "cap / page = 65535");
}

Test(layout, two_hundred_fifty_five_pools_are_invalid) {
  weft_pool_config *pools = calloc(255, sizeof *pools);
  cr_assert_not_null(pools);
  for (size_t i = 0; i < 255; i++) pools[i] = sliced_pool(64 * (i + 1), 0, 0);
  expect_invalid_pools(pools, 255, "255 pools");
  expect_valid_pools(pools, 254, "254 pools");
  free(pools);
}

/* Sizes that wrap to 0 (or below the request) when rounded up to the
 * alignment: a sliced page of UINT64_MAX divided by zero (SIGFPE) with a
 * cap, and without one was accepted with a page of 0; an exclusive pool's
 * max_alloc_size near UINT64_MAX was accepted as 0, so every buffer routed
 * there failed later with BufferTooBig (issue 12, item 26). */
Test(layout, sizes_that_overflow_when_rounded_to_the_alignment_are_invalid) {
  const uint64_t huge[] = {UINT64_MAX, UINT64_MAX - 10, UINT64_MAX - 62};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    const weft_pool_config capped[] = {sliced_pool(huge[i], 0, GIB)};
    expect_invalid_pools(capped, 1, "a huge page_size with a cap");
    const weft_pool_config uncapped[] = {sliced_pool(huge[i], 0, 0)};
    expect_invalid_pools(uncapped, 1, "a huge page_size");
    const weft_pool_config slice[] = {sliced_pool(MIB, huge[i], 0)};
    expect_invalid_pools(slice, 1, "a huge max_slice_size");
    const weft_pool_config excl[] = {exclusive_pool(huge[i], WEFT_NO_PERIOD)};
    expect_invalid_pools(excl, 1, "a huge max_alloc_size");
  }
  /* The message names the field and the value. */
  const weft_pool_config excl[] = {sliced_pool(MIB, 0, 0), exclusive_pool(UINT64_MAX, 5000)};
  weft_mm_config cfg = mm_config(custom_layout(excl, 2), GIB);
  mm_env e;
  env_storage(&e, 0);
  weft_mm *out = NULL;
  weft_status st = weft_mm_create(&cfg, e.storage, env_alloc(), &out);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  const char *msg = weft_error_message(st);
  cr_assert_not_null(strstr(msg, "pool 1: max_alloc_size 18446744073709551615"), "%s", msg);
  weft_error_free(st);
  mm_close(&e);
  /* The largest size that still rounds is fine. */
  const weft_pool_config edge[] = {exclusive_pool(UINT64_MAX - 63, WEFT_NO_PERIOD)};
  expect_valid_pools(edge, 1, "max_alloc_size UINT64_MAX - 63 rounds to a multiple of 64");
}

Test(layout, a_persistent_pool_in_a_layout_is_invalid) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  pools[0].kind = WEFT_POOL_PERSISTENT;
  expect_invalid_pools(pools, 1, "a persistent pool in a layout");
  pools[0].kind = (weft_pool_kind)42;
  expect_invalid_pools(pools, 1, "an unknown pool kind");
  weft_layout bad = preset_layout((weft_layout_kind)42);
  expect_invalid_layout(bad, "an unknown layout kind");
}

Test(layout, an_invalid_install_is_refused_and_keeps_the_old_layout) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_pool_config bad[] = {sliced_pool(4096, 8192, 0)};
  weft_layout l = custom_layout(bad, 1);
  EXPECT_KIND(weft_mm_install(e.mm, &l), WEFT_ERR_INVALID_ARGUMENT);
  weft_layout empty = custom_layout(NULL, 0);
  EXPECT_KIND(weft_mm_install(e.mm, &empty), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_eq(report_at(e.mm, 0).page_size, 4096, "the old layout is in force");
  weft_mem m;
  reserve_ok(e.mm, &m, 4096);
  weft_mm_free(e.mm, &m);
  mm_close(&e);
}

/* ---- rounding and defaults
 * --------------------------------------------------------------------------- */

Test(layout, sizes_are_rounded_up_to_the_alignment) {
  weft_pool_config pools[] = {strict_sliced_pool(1000, 0, 0), exclusive_pool(1000, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 2);
  cr_assert_eq(report_at(e.mm, 0).page_size, 1024, "page 1000 rounds up to 1024");
  weft_mem a;
  reserve_ok(e.mm, &a, 1024);
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1, "the rounded page and slice serve 1024");
  EXPECT_USAGE(e.mm, 1, 1024, 0, 1024, "one rounded page");
  weft_mm_free(e.mm, &a);
  mm_close(&e);

  weft_pool_config excl[] = {exclusive_pool(1000, WEFT_NO_PERIOD)};
  mm_open(&e, excl, 1);
  reserve_ok(e.mm, &a, 1024); /* the max rounds up to 1024 too */
  weft_mm_free(e.mm, &a);
  mm_close(&e);
}

Test(layout, the_max_slice_defaults_to_the_page) {
  weft_pool_config pools[] = {strict_sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a;
  reserve_ok(e.mm, &a, 4096);
  weft_mm_free(e.mm, &a);
  mm_close(&e);

  weft_pool_config small[] = {strict_sliced_pool(4096, 1024, 0)};
  mm_open(&e, small, 1);
  EXPECT_KIND(reserve_mode(e.mm, &a, 2048, WEFT_RESERVE_ALLOW), WEFT_ERR_BUFFER_TOO_BIG);
  reserve_ok(e.mm, &a, 1024);
  weft_mm_free(e.mm, &a);
  mm_close(&e);
}

/* ---- the SUBSLICES ladder (docs/memory.md)
 * ---------------------------------------------------------------------- */

Test(layout, the_subslices_ladder_for_16_gib) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), 16 * GIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  /* Exclusive{0}, sliced 16M, 64M, 256M, 1G, 4G, the exclusive tail,
   * then the persistent and the dedicated pool. */
  cr_assert_eq(report_count(e.mm), 9);
  cr_assert_eq(report_at(e.mm, 0).kind, WEFT_POOL_EXCLUSIVE, "pool 0 serves zero-size requests");
  const uint64_t pages[] = {16 * MIB, 64 * MIB, 256 * MIB, GIB, 4 * GIB};
  for (size_t i = 0; i < 5; i++) {
    weft_pool_report r = report_at(e.mm, 1 + i);
    cr_assert_eq(r.kind, WEFT_POOL_SLICED, "pool %zu is sliced", 1 + i);
    cr_assert_eq(r.page_size, pages[i], "pool %zu: page %" PRIu64 ", expected %" PRIu64, 1 + i,
                 r.page_size, pages[i]);
    cr_assert_eq(r.pages, 0);
  }
  cr_assert_eq(report_at(e.mm, 6).kind, WEFT_POOL_EXCLUSIVE, "the tail is exclusive");
  cr_assert_eq(report_at(e.mm, 7).kind, WEFT_POOL_PERSISTENT);
  cr_assert_eq(report_at(e.mm, 8).kind, WEFT_POOL_DIRECT, "the dedicated pool");
  cr_assert_eq(weft_mm_page_size(e.mm), 0, "not adaptive");

  weft_mem m;
  weft_status st = reserve_mode(e.mm, &m, 16 * GIB + 1, WEFT_RESERVE_ALLOW);
  expect_kind_of(st, WEFT_ERR_BUFFER_TOO_BIG, "larger than max_page");
  cr_assert_eq(weft_error_size(st), 16 * GIB + 1);
  weft_error_free(st);
  cr_assert_eq(alloc_calls(&e), 0);
  mm_close(&e);
}

Test(layout, the_subslices_max_slices_halve_down_the_ladder) {
  /* max_page 1 GiB: pages [16M, 64M, 256M], max slices [2M, 16M, 128M], then the
   * exclusive tail. A dry run keeps the pages unbacked: only routing matters. */
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), GIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  weft_mm_set_dry_run(e.mm, true);
  cr_assert_eq(report_count(e.mm), 7);
  cr_assert_eq(report_at(e.mm, 1).page_size, 16 * MIB);
  cr_assert_eq(report_at(e.mm, 2).page_size, 64 * MIB);
  cr_assert_eq(report_at(e.mm, 3).page_size, 256 * MIB);
  cr_assert_eq(report_at(e.mm, 4).kind, WEFT_POOL_EXCLUSIVE);
  static const struct {
    uint64_t size;
    size_t pool;
    const char *why;
  } routes[] = {
      {2 * MIB, 1, "2 MiB is pool 1's max slice"},
      {2 * MIB + 64, 2, "2 MiB + 64 goes to the 64 MiB pages"},
      {12 * MIB, 2, "12 MiB: not within a fifth of 16 MiB"},
      {14 * MIB, 1, "14 MiB: within a fifth of pool 1's 16 MiB page"},
      {16 * MIB, 1, "16 MiB: a whole page of pool 1 (near-page acceptance)"},
      {16 * MIB + 64, 3, "16 MiB + 64 is above pool 2's max slice"},
      {128 * MIB, 3, "128 MiB is pool 3's max slice"},
      {128 * MIB + 64, 4, "128 MiB + 64 goes to the exclusive tail"},
  };
  enum { N = sizeof routes / sizeof routes[0] };
  weft_mem m[N];
  for (size_t i = 0; i < N; i++) {
    uint64_t before = report_at(e.mm, routes[i].pool).usage.number_allocs;
    reserve_ok(e.mm, &m[i], routes[i].size);
    cr_assert_eq(report_at(e.mm, routes[i].pool).usage.number_allocs, before + 1, "%s",
                 routes[i].why);
  }
  cr_assert_eq(alloc_calls(&e), 0, "dry run: nothing backed");
  for (size_t i = 0; i < N; i++) weft_mm_free(e.mm, &m[i]);
  weft_mm_set_dry_run(e.mm, false);
  mm_close(&e);
}

Test(layout, the_subslices_pages_are_rounded_up_to_the_alignment) {
  const uint64_t max_page = 100 * MIB + 7;
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), max_page);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  /* One step: c = max_page / 4 = 26214401, rounded up to 26214464 (< 32 MiB: stop). */
  cr_assert_eq(report_count(e.mm), 1 + 1 + 1 + 2);
  cr_assert_eq(report_at(e.mm, 1).page_size, align_up(max_page / 4));
  cr_assert_eq(report_at(e.mm, 1).page_size, 26214464);
  weft_mem a;
  reserve_ok(e.mm, &a, 26214464 / 2); /* its max slice: page / 2 */
  cr_assert_eq(report_at(e.mm, 1).usage.number_allocs, 1);
  weft_mm_free(e.mm, &a);
  mm_close(&e);
}

Test(layout, a_zero_size_allocation_lands_in_the_tiny_exclusive_pool) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), 128 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  weft_mem z, one;
  reserve_ok(e.mm, &z, 0);
  reserve_ok(e.mm, &one, 1);
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1);
  cr_assert_eq(report_at(e.mm, 1).usage.number_allocs, 1);
  cr_assert_eq(report_at(e.mm, 1).page_size, 8 * MIB, "128 MiB: pages [8M, 32M]");
  cr_assert_eq(report_at(e.mm, 2).page_size, 32 * MIB);
  weft_mm_free(e.mm, &z);
  weft_mm_free(e.mm, &one);
  mm_close(&e);
}

Test(layout, the_subslices_ladder_below_32_mib_has_no_sliced_pools) {
  /* The ladder loop runs while c >= 32 MiB, so a 16 MiB device gets
   * only Exclusive{0} and the exclusive tail. */
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), 16 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  cr_assert_eq(report_count(e.mm), 2 + 2,
               "Exclusive{0}, the tail, persistent, dedicated: %zu reports (pool 1: kind %d, "
               "page %" PRIu64 ")",
               report_count(e.mm), (int)report_at(e.mm, 1).kind, report_at(e.mm, 1).page_size);
  cr_assert_eq(report_at(e.mm, 0).kind, WEFT_POOL_EXCLUSIVE);
  cr_assert_eq(report_at(e.mm, 1).kind, WEFT_POOL_EXCLUSIVE);
  weft_mem m;
  reserve_ok(e.mm, &m, 4096);
  cr_assert_eq(report_at(e.mm, 1).usage.number_allocs, 1, "served by the exclusive tail");
  weft_mm_free(e.mm, &m);
  mm_close(&e);
}

/* ---- EXCLUSIVE_PAGES: 24 log-spaced buckets from 32 KiB to max_page
 * ----------------------- */

Test(layout, the_exclusive_pages_buckets_span_32_kib_to_the_max_page) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_EXCLUSIVE_PAGES), 128 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  size_t n = report_count(e.mm);
  cr_assert_eq(n, 24 + 2, "24 distinct buckets at alignment 64, then persistent and dedicated");
  for (size_t i = 0; i < 24; i++) cr_assert_eq(report_at(e.mm, i).kind, WEFT_POOL_EXCLUSIVE);
  weft_mem a, b, c, d;
  reserve_ok(e.mm, &a, 32 * KIB);
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1, "32 KiB is the first bucket");
  reserve_ok(e.mm, &b, 32 * KIB + 1);
  cr_assert_eq(report_at(e.mm, 1).usage.number_allocs, 1, "32 KiB + 1 is the second");
  reserve_ok(e.mm, &c, 128 * MIB);
  cr_assert_eq(report_at(e.mm, 23).usage.number_allocs, 1, "max_page is the last bucket");
  EXPECT_KIND(reserve_mode(e.mm, &d, 128 * MIB + 1, WEFT_RESERVE_ALLOW), WEFT_ERR_BUFFER_TOO_BIG);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

/* The EXCLUSIVE_PAGES buckets for max_page 128 MiB at alignment 64:
 * align_up(trunc(exp(ln(32 KiB) + ln(128 MiB / 32 KiB) * i / 23))). */
static const uint64_t buckets_128m[24] = {
    32768,    47104,    67584,    97024,    139264,   199872,   286976,   411968,
    591488,   849152,   1219136,  1750272,  2512832,  3607616,  5179392,  7435968,
    10675712, 15326976, 22004672, 31591744, 45355776, 65116608, 93486912, 134217728};

Test(layout, each_exclusive_pages_bucket_takes_exactly_its_range) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_EXCLUSIVE_PAGES), 128 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  weft_mm_set_dry_run(e.mm, true); /* routing only: no backing */
  cr_assert_eq(report_count(e.mm), 24 + 2);
  static weft_mem at[24], above[23];
  for (size_t i = 0; i < 24; i++) {
    reserve_ok(e.mm, &at[i], buckets_128m[i]);
    cr_assert_eq(report_at(e.mm, i).usage.number_allocs, 1, "%" PRIu64 " B lands in bucket %zu",
                 buckets_128m[i], i);
    if (i == 23) break;
    reserve_ok(e.mm, &above[i], buckets_128m[i] + 1);
    cr_assert_eq(report_at(e.mm, i + 1).usage.number_allocs, 1, "%" PRIu64 " B lands in bucket %zu",
                 buckets_128m[i] + 1, i + 1);
    weft_mm_free(e.mm, &above[i]);
  }
  cr_assert_eq(alloc_calls(&e), 0);
  for (size_t i = 0; i < 24; i++) weft_mm_free(e.mm, &at[i]);
  weft_mm_set_dry_run(e.mm, false);
  mm_close(&e);
}

Test(layout, an_exclusive_pages_bucket_releases_a_free_page_within_its_period) {
  /* dealloc_period 5000 * round(1 + size / 1 GiB) = 5000: a check every 1000. */
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_EXCLUSIVE_PAGES), 128 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  weft_mem a, x;
  reserve_ok(e.mm, &a, 32 * KIB); /* reservation 1, bucket 0 */
  weft_mm_free(e.mm, &a);
  uint64_t released_at = 0;
  for (uint64_t n = 2; n <= 2000 && !released_at; n++) {
    reserve_ok(e.mm, &x, 150 * KIB); /* bucket 5 */
    weft_mm_free(e.mm, &x);
    if (report_at(e.mm, 0).pages == 0) released_at = n;
  }
  cr_assert_neq(released_at, 0, "the free page was never released");
  cr_assert_gt(released_at, 900, "released at reservation %" PRIu64 ": too early", released_at);
  cr_assert_leq(released_at, 1001, "released at reservation %" PRIu64 ": too late", released_at);
  mm_close(&e);
}

/* ---- install
 * -------------------------------------------------------------------------------------------- */

Test(layout, an_install_is_refused_while_live_and_accepted_afterwards) {
  weft_pool_config small[] = {sliced_pool(MIB, 0, 2 * MIB)};
  weft_pool_config big[] = {sliced_pool(4 * MIB, 0, 8 * MIB)};
  weft_layout bigger = custom_layout(big, 1);
  mm_env e;
  mm_open(&e, small, 1);
  weft_mem live, large;
  reserve_ok(e.mm, &live, MIB);

  weft_status st = weft_mm_install(e.mm, &bigger);
  expect_kind_of(st, WEFT_ERR_VALIDATION, "install while 1 MiB is live");
  cr_assert_not_null(strstr(weft_error_message(st), "1048576"),
                     "the refusal names the live bytes: '%s'", weft_error_message(st));
  weft_error_free(st);
  cr_assert_eq(report_at(e.mm, 0).page_size, MIB, "the old layout stays in force");
  cr_assert_null(weft_mm_find(e.mm, &live));
  st = reserve_mode(e.mm, &large, 2 * MIB, WEFT_RESERVE_ALLOW);
  cr_assert_not_null(st, "the old layout cannot hold 2 MiB in one slice");
  weft_error_free(st);

  weft_mm_free(e.mm, &live); /* free but still held: install cleans up first */
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), MIB);
  EXPECT_OK(weft_mm_install(e.mm, &bigger));
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 0, "the old pages were released");
  weft_pool_report r = report_at(e.mm, 0);
  cr_assert_eq(r.page_size, 4 * MIB);
  cr_assert_eq(r.pages, 0);
  cr_assert_eq(r.pages_peak, 0, "peaks reset");
  cr_assert_eq(r.largest_alloc, 0, "peaks reset");
  reserve_ok(e.mm, &large, 2 * MIB);
  EXPECT_USAGE(e.mm, 1, 2 * MIB, 0, 4 * MIB, "the new layout serves what the old refused");
  weft_mm_free(e.mm, &large);
  mm_close(&e);
}

Test(layout, an_install_resets_the_peaks) {
  weft_pool_config pools[] = {sliced_pool(MIB, 0, 0)};
  weft_layout same = custom_layout(pools, 1);
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 600 * KIB);
  reserve_ok(e.mm, &b, 600 * KIB);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 2);
  cr_assert_eq(report_at(e.mm, 0).largest_alloc, 600 * KIB);
  EXPECT_OK(weft_mm_install(e.mm, &same));
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 0);
  reserve_ok(e.mm, &a, 600 * KIB);
  weft_mm_free(e.mm, &a);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 1, "the second pass measures itself alone");
  mm_close(&e);
}
