/* Direct pools: one storage allocation per reservation padded only to the
 * alignment, reuse on an exact effective size, a reclaim ceiling that frees
 * free slices in index order only until the new allocation fits (a watermark,
 * not a budget), stable indices for live allocations, and explicit cleanup. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"
#include "mm_test_util.h"

TestSuite(direct, .timeout = 30, .fini = mm_fini);

Test(direct, a_direct_pool_pads_only_to_the_alignment) {
  weft_pool_config pools[] = {direct_pool(WEFT_NO_CEILING)};
  mm_env e;
  mm_open(&e, pools, 1);
  const uint64_t odd = 700 * KIB + 17;
  weft_mem m;
  reserve_ok(e.mm, &m, odd);
  resolve_ok(e.mm, &m);
  weft_pool_report r = report_at(e.mm, 0);
  cr_assert_eq(r.kind, WEFT_POOL_DIRECT);
  cr_assert_eq(r.pages, 1);
  cr_assert_eq(r.page_size, 0, "only sliced pools report a page size");
  expect_usage_of(r.usage, 1, odd, align_up(odd) - odd, align_up(odd),
                  "nothing reserved beyond what alignment demands");
  EXPECT_USAGE(e.mm, 1, odd, align_up(odd) - odd, align_up(odd), "the manager's usage");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), align_up(odd));
  weft_mm_free(e.mm, &m);
  mm_close(&e);
}

Test(direct, one_shape_in_a_loop_allocates_once_below_the_ceiling) {
  weft_pool_config pools[] = {direct_pool(8 * MIB)};
  mm_env e;
  mm_open(&e, pools, 1);
  for (int i = 0; i < 4; i++) {
    weft_mem scratch;
    reserve_ok(e.mm, &scratch, 300 * KIB);
    EXPECT_USAGE(e.mm, 1, 300 * KIB, 0, 300 * KIB, "one live scratch");
    weft_mm_free(e.mm, &scratch);
  }
  weft_pool_report r = report_at(e.mm, 0);
  cr_assert_eq(r.pages_peak, 1, "four iterations of one shape allocated once");
  cr_assert_eq(r.pages, 1, "held for reuse below the ceiling");
  cr_assert_eq(alloc_calls(&e), 1);
  EXPECT_USAGE(e.mm, 0, 0, 0, 300 * KIB, "freed, held");
  mm_close(&e);
}

Test(direct, crossing_the_ceiling_frees_just_enough_in_index_order) {
  weft_pool_config pools[] = {direct_pool(7 * MIB)};
  mm_env e;
  mm_open(&e, pools, 1);
  /* 1 + 2 + 3 MiB, all freed, all distinct: 6 MiB held under a 7 MiB ceiling. */
  for (uint64_t size = MIB; size <= 3 * MIB; size += MIB) {
    weft_mem held;
    reserve_ok(e.mm, &held, size);
    weft_mm_free(e.mm, &held);
  }
  cr_assert_eq(report_at(e.mm, 0).pages, 3, "held below the ceiling");
  EXPECT_USAGE(e.mm, 0, 0, 0, 6 * MIB, "6 MiB held");

  /* 4 MiB needs 3 MiB back: releasing 1 and 2 (index order) is enough. */
  weft_mem crossed;
  reserve_ok(e.mm, &crossed, 4 * MIB);
  weft_pool_report r = report_at(e.mm, 0);
  cr_assert_eq(r.pages, 2, "just enough was released, not everything free");
  EXPECT_USAGE(e.mm, 1, 4 * MIB, 0, 7 * MIB, "the kept 3 MiB slice plus the new 4 MiB one");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 7 * MIB);

  /* The kept one is the 3 MiB slice: a 3 MiB request reuses it. */
  uint64_t calls = alloc_calls(&e);
  weft_mem three;
  reserve_ok(e.mm, &three, 3 * MIB);
  cr_assert_eq(alloc_calls(&e), calls, "the 3 MiB slice was kept");
  EXPECT_USAGE(e.mm, 2, 7 * MIB, 0, 7 * MIB, "both live");
  weft_mm_free(e.mm, &crossed);
  weft_mm_free(e.mm, &three);
  mm_close(&e);
}

Test(direct, the_ceiling_is_a_watermark_not_a_budget) {
  weft_pool_config pools[] = {direct_pool(MIB)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 2 * MIB); /* nothing free to release: served anyway */
  reserve_ok(e.mm, &b, 2 * MIB);
  EXPECT_USAGE(e.mm, 2, 4 * MIB, 0, 4 * MIB, "both served past the ceiling");
  weft_mm_free(e.mm, &a);
  weft_mem c;
  reserve_ok(e.mm, &c, 3 * MIB); /* releases a (free), then is served */
  EXPECT_USAGE(e.mm, 2, 5 * MIB, 0, 5 * MIB, "a was released to make room");
  cr_assert_eq(report_at(e.mm, 0).pages, 2);
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

Test(direct, an_explicit_cleanup_releases_everything_free) {
  weft_pool_config pools[] = {direct_pool(64 * MIB)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem live, freed;
  reserve_ok(e.mm, &live, MIB);
  reserve_ok(e.mm, &freed, 2 * MIB);
  weft_mm_free(e.mm, &freed);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 1, "only the live slice survives");
  EXPECT_USAGE(e.mm, 1, MIB, 0, MIB, "after the cleanup");
  cr_assert_null(weft_mm_find(e.mm, &live));
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), MIB);
  weft_mm_free(e.mm, &live);
  mm_close(&e);
}

Test(direct, reuse_needs_the_same_effective_size_and_resets_size_and_padding) {
  weft_pool_config pools[] = {direct_pool(WEFT_NO_CEILING)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 1000); /* 1024 */
  char *pa = resolve_ok(e.mm, &a);
  EXPECT_USAGE(e.mm, 1, 1000, 24, 1024, "a");
  weft_mm_free(e.mm, &a);
  reserve_ok(e.mm, &b, 1020); /* also 1024 */
  cr_assert_eq(resolve_ok(e.mm, &b), pa);
  EXPECT_USAGE(e.mm, 1, 1020, 4, 1024, "size and padding reset on reuse");
  weft_mm_free(e.mm, &b);
  reserve_ok(e.mm, &c, 1025); /* 1088: no match */
  cr_assert_eq(alloc_calls(&e), 2);
  EXPECT_USAGE(e.mm, 1, 1025, 63, 1024 + 1088, "a new allocation beside the free one");
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

Test(direct, a_live_allocation_keeps_its_index_while_others_come_and_go) {
  weft_pool_config pools[] = {direct_pool(WEFT_NO_CEILING)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c, d;
  reserve_ok(e.mm, &a, 1 * KIB);
  reserve_ok(e.mm, &b, 2 * KIB);
  reserve_ok(e.mm, &c, 3 * KIB);
  uint32_t page = c.page, slice = c.slice;
  char *pc = resolve_ok(e.mm, &c);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 1);
  cr_assert(c.page == page && c.slice == slice, "a live handle's index never moves");
  cr_assert_null(weft_mm_find(e.mm, &c));
  cr_assert_eq(resolve_ok(e.mm, &c), pc);
  reserve_ok(e.mm, &d, 4 * KIB);
  cr_assert(d.page != c.page || d.slice != c.slice, "a vacant index is reused, not c's");
  cr_assert_null(weft_mm_find(e.mm, &c));
  cr_assert_null(weft_mm_find(e.mm, &d));
  EXPECT_USAGE(e.mm, 2, 7 * KIB, 0, 7 * KIB, "c and d");
  weft_mm_free(e.mm, &c);
  weft_mm_free(e.mm, &d);
  mm_close(&e);
}

Test(direct, without_a_ceiling_freed_slices_wait_for_an_explicit_cleanup) {
  weft_pool_config pools[] = {direct_pool(WEFT_NO_CEILING)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, other;
  reserve_ok(e.mm, &a, MIB);
  weft_mm_free(e.mm, &a);
  for (int i = 0; i < 50; i++) {
    reserve_ok(e.mm, &other, 4096);
    weft_mm_free(e.mm, &other);
  }
  cr_assert_eq(report_at(e.mm, 0).pages, 2, "periodic cleanups do nothing in a direct pool");
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 0);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "all released");
  mm_close(&e);
}

Test(direct, a_ceiling_of_zero_releases_every_free_slice_on_allocation) {
  /* reclaim_at = 0 is a real ceiling (the dedicated pool's): every free slice
   * goes before the next allocation. WEFT_NO_CEILING is the one "never". */
  weft_pool_config pools[] = {direct_pool(0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, MIB);
  weft_mm_free(e.mm, &a);
  reserve_ok(e.mm, &b, 2 * MIB);
  cr_assert_eq(report_at(e.mm, 0).pages, 1,
               "the free 1 MiB slice was reclaimed: %" PRIu64 " slices, %" PRIu64 " bytes held",
               report_at(e.mm, 0).pages, weft_mm_usage(e.mm).bytes_reserved);
  EXPECT_USAGE(e.mm, 1, 2 * MIB, 0, 2 * MIB, "only b");
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}
