/* The persistent pool: one storage allocation per slice of size + padding,
 * reused only by a request of exactly the same effective size and only once
 * freed, accounting (in use, padding, reserved), explicit cleanup with
 * renumbering, and survival across a layout install. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"
#include "mm_test_util.h"

TestSuite(persistent, .timeout = 30, .fini = mm_fini);

static void open_persistent(mm_env *e) {
  static const weft_pool_config pools[] = {{.kind = WEFT_POOL_SLICED,
                                            .page_size = 1024 * 1024,
                                            .dealloc_period = WEFT_NO_PERIOD,
                                            .reclaim_at = WEFT_NO_CEILING}};
  mm_open(e, pools, 1);
  weft_mm_mode(e->mm, WEFT_ALLOC_PERSISTENT);
  cr_assert_eq(weft_mm_current_mode(e->mm), WEFT_ALLOC_PERSISTENT);
}

static void expect_persistent(const weft_mm *mm, uint64_t slices, uint64_t allocs, uint64_t in_use,
                              uint64_t padding, uint64_t reserved, const char *what) {
  weft_pool_report r = persistent_report(mm);
  cr_assert_eq(r.pages, slices, "%s: %" PRIu64 " persistent slices, expected %" PRIu64, what,
               r.pages, slices);
  expect_usage_of(r.usage, allocs, in_use, padding, reserved, what);
  cr_assert_eq(report_at(mm, 0).pages_peak, 0, "%s: nothing went to the dynamic pool", what);
}

Test(persistent, a_freed_slice_is_reused_with_its_padding) {
  mm_env e;
  open_persistent(&e);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 1025); /* padding 63: effective 1088 */
  char *pa = resolve_ok(e.mm, &a);
  expect_persistent(e.mm, 1, 1, 1025, 63, 1088, "a");
  cr_assert_eq(alloc_calls(&e), 1);

  reserve_ok(e.mm, &b, 1025);
  expect_persistent(e.mm, 2, 2, 2050, 126, 2176, "the slice stays reserved while a is alive");
  cr_assert_eq(alloc_calls(&e), 2);

  weft_mm_free(e.mm, &a);
  expect_persistent(e.mm, 2, 1, 1025, 63, 2176, "a freed");
  reserve_ok(e.mm, &c, 1025);
  cr_assert_eq(resolve_ok(e.mm, &c), pa, "the freed slice is reusable");
  cr_assert_eq(alloc_calls(&e), 2, "no new storage for a reuse");
  expect_persistent(e.mm, 2, 2, 2050, 126, 2176, "c reuses a's slice");
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

Test(persistent, slices_are_reused_only_after_free_and_only_by_the_same_size) {
  mm_env e;
  open_persistent(&e);
  weft_mem a1, r, other, a2, r2;
  reserve_ok(e.mm, &a1, 1024);
  char *p1 = resolve_ok(e.mm, &a1);
  expect_persistent(e.mm, 1, 1, 1024, 0, 1024, "a1");

  weft_mm_free(e.mm, &a1);
  reserve_ok(e.mm, &r, 1024);
  cr_assert_eq(resolve_ok(e.mm, &r), p1, "a1's slice is free to be reused");
  cr_assert_eq(alloc_calls(&e), 1);
  weft_mm_free(e.mm, &r);

  reserve_ok(e.mm, &other, 1025);
  cr_assert_neq(resolve_ok(e.mm, &other), p1, "not the same size: a new slice");
  cr_assert_eq(alloc_calls(&e), 2);
  expect_persistent(e.mm, 2, 1, 1025, 63, 1024 + 1088, "1025 beside a free 1024");
  weft_mm_free(e.mm, &other);

  reserve_ok(e.mm, &a2, 1024);
  cr_assert_eq(resolve_ok(e.mm, &a2), p1);
  expect_persistent(e.mm, 2, 1, 1024, 0, 2112, "a2 in the 1024 slice");
  reserve_ok(e.mm, &r2, 1024);
  cr_assert_eq(alloc_calls(&e), 3, "a2 is alive: a second 1024 slice");
  expect_persistent(e.mm, 3, 2, 2048, 0, 3136, "two 1024 live");
  weft_mm_free(e.mm, &a2);
  weft_mm_free(e.mm, &r2);
  expect_persistent(e.mm, 3, 0, 0, 0, 3136, "all free, all held");
  EXPECT_USAGE(e.mm, 0, 0, 0, 3136, "the manager's usage includes the persistent pool");
  weft_mm_cleanup(e.mm);
  expect_persistent(e.mm, 0, 0, 0, 0, 0, "an explicit cleanup frees every free slice");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 0);
  mm_close(&e);
}

Test(persistent, a_slice_serves_any_size_of_the_same_effective_size) {
  mm_env e;
  open_persistent(&e);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 1025); /* 1088 */
  char *pa = resolve_ok(e.mm, &a);
  weft_mm_free(e.mm, &a);
  reserve_ok(e.mm, &b, 1030); /* also 1088: the bucket key is size + padding */
  cr_assert_eq(resolve_ok(e.mm, &b), pa);
  cr_assert_eq(alloc_calls(&e), 1);
  expect_persistent(e.mm, 1, 1, 1030, 58, 1088, "size and padding reset on reuse");
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(persistent, a_cleanup_frees_free_slices_and_renumbers_the_survivors) {
  mm_env e;
  open_persistent(&e);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 4096);
  reserve_ok(e.mm, &b, 8192);
  reserve_ok(e.mm, &c, 4096);
  /* The persistent pool may index its slices by page or by slice: b is the second. */
  cr_assert_eq(b.page + b.slice, 1);
  char *pb = resolve_ok(e.mm, &b);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &c);
  weft_mm_cleanup(e.mm);
  expect_persistent(e.mm, 1, 1, 8192, 0, 8192, "only b's slice survives");
  cr_assert_eq(b.page + b.slice, 0, "renumbered through the descriptor");
  cr_assert_null(weft_mm_find(e.mm, &b));
  cr_assert_eq(resolve_ok(e.mm, &b), pb);
  EXPECT_KIND(weft_mm_find(e.mm, &a), WEFT_ERR_NOT_FOUND);
  cr_assert_eq(weft_mm_storage_allocs(e.mm), 1);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(persistent, each_slice_is_its_own_storage_allocation) {
  mm_env e;
  open_persistent(&e);
  weft_mem m[4];
  for (int i = 0; i < 4; i++) reserve_ok(e.mm, &m[i], 1000 + 100 * (uint64_t)i);
  cr_assert_eq(weft_mm_storage_allocs(e.mm), 4);
  cr_assert_eq(weft_storage_bytes_allocated(e.storage),
               align_up(1000) + align_up(1100) + align_up(1200) + align_up(1300));
  for (int i = 0; i < 4; i++) weft_mm_free(e.mm, &m[i]);
  mm_close(&e);
}

Test(persistent, persistent_memory_survives_an_install) {
  mm_env e;
  open_persistent(&e);
  weft_mem w;
  reserve_ok(e.mm, &w, 4096);
  char *pw = resolve_ok(e.mm, &w);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  weft_pool_config bigger[] = {sliced_pool(4 * MIB, 0, 0)};
  weft_layout l = custom_layout(bigger, 1);
  EXPECT_OK(weft_mm_install(e.mm, &l)); /* only dynamic pools count as in use */
  cr_assert_null(weft_mm_find(e.mm, &w), "the persistent pool is kept");
  cr_assert_eq(resolve_ok(e.mm, &w), pw);
  cr_assert_eq(report_at(e.mm, 0).page_size, 4 * MIB);
  expect_persistent(e.mm, 1, 1, 4096, 0, 4096, "after the install");
  weft_mm_free(e.mm, &w);
  mm_close(&e);
}
