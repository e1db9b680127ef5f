/* Exclusive pools: one allocation per page, pages sized max(running average,
 * size) rounded to the alignment, best-fit reuse (weft picks the smallest free
 * page that fits, not the reference's least-recently-freed one), explicit and
 * periodic cleanup with renumbering, and the EXCLUSIVE_PAGES preset. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"
#include "mm_test_util.h"

TestSuite(exclusive, .timeout = 30, .fini = mm_fini);

Test(exclusive, a_new_page_is_sized_from_the_request) {
  weft_pool_config pools[] = {exclusive_pool(512, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 100);
  weft_memory_usage u = weft_mm_usage(e.mm);
  cr_assert_eq(u.bytes_in_use, 100);
  cr_assert(u.bytes_reserved >= 100 && u.bytes_reserved <= 512);
  /* Its effective size (aligned to 64), not half the pool's max (256 B, as
   * the reference's running average gave). */
  expect_usage_of(u, 1, 100, 28, 128, "100 B in a pool of max 512");
  weft_mm_free(e.mm, &a);
  reserve_ok(e.mm, &b, 100);
  weft_memory_usage again = weft_mm_usage(e.mm);
  cr_assert(memcmp(&u, &again, sizeof u) == 0, "freeing and re-reserving gives the same usage");
  cr_assert_eq(alloc_calls(&e), 1);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(exclusive, two_chunks_get_two_pages) {
  weft_pool_config pools[] = {exclusive_pool(1024, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 512);
  reserve_ok(e.mm, &b, 512);
  weft_memory_usage u = weft_mm_usage(e.mm);
  cr_assert_eq(u.number_allocs, 2);
  cr_assert_eq(u.bytes_in_use, 1024);
  cr_assert_eq(u.bytes_padding, 0);
  cr_assert_geq(u.bytes_reserved, 1024);
  cr_assert_eq(report_at(e.mm, 0).pages, 2, "one page per allocation");
  cr_assert_eq(alloc_calls(&e), 2);
  cr_assert_neq(a.page, b.page);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(exclusive, a_freed_page_is_reused) {
  weft_pool_config pools[] = {exclusive_pool(1024, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 512);
  char *pa = resolve_ok(e.mm, &a);
  weft_mm_free(e.mm, &a);
  reserve_ok(e.mm, &b, 512);
  cr_assert_eq(resolve_ok(e.mm, &b), pa);
  weft_memory_usage u = weft_mm_usage(e.mm);
  cr_assert_eq(u.number_allocs, 1);
  cr_assert_eq(u.bytes_in_use, 512);
  cr_assert_geq(u.bytes_reserved, 512);
  cr_assert_eq(alloc_calls(&e), 1);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(exclusive, a_second_live_chunk_allocates_a_new_page) {
  weft_pool_config pools[] = {exclusive_pool(1024, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 768);
  reserve_ok(e.mm, &b, 768);
  /* 768 > the average (512): each page is exactly 768. */
  EXPECT_USAGE(e.mm, 2, 1536, 0, 1536, "two 768 B pages");
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 2);
  cr_assert_eq(report_at(e.mm, 0).largest_alloc, 768);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(exclusive, each_allocation_is_padded_to_the_alignment) {
  weft_pool_config pools[] = {exclusive_pool(64 * 20, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 40);
  reserve_ok(e.mm, &b, 40);
  weft_memory_usage u = weft_mm_usage(e.mm);
  cr_assert_eq(u.bytes_padding, 24 * 2, "40 B aligned to 64: 24 padding bytes each");
  cr_assert_eq(u.bytes_in_use, 80);
  cr_assert_eq((uintptr_t)resolve_ok(e.mm, &a) % ALIGN, 0);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(exclusive, a_request_above_the_max_is_buffer_too_big) {
  weft_pool_config pools[] = {exclusive_pool(1024, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem m;
  weft_status st = reserve_mode(e.mm, &m, 1025, WEFT_RESERVE_ALLOW);
  expect_kind_of(st, WEFT_ERR_BUFFER_TOO_BIG, "1025 B in an exclusive pool of max 1024");
  cr_assert_eq(weft_error_size(st), 1025);
  weft_error_free(st);
  cr_assert_eq(alloc_calls(&e), 0);
  mm_close(&e);
}

Test(exclusive, a_max_of_zero_serves_only_zero_size_allocations) {
  weft_pool_config pools[] = {exclusive_pool(0, WEFT_NO_PERIOD), sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem zero, one;
  reserve_ok(e.mm, &zero, 0);
  reserve_ok(e.mm, &one, 1);
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1, "0 B goes to the max-0 pool");
  cr_assert_eq(report_at(e.mm, 1).usage.number_allocs, 1, "1 B goes on");
  cr_assert_null(weft_mm_find(e.mm, &zero));
  weft_mm_free(e.mm, &zero);
  weft_mm_free(e.mm, &one);
  mm_close(&e);
}

/* ---- best fit (not the reference's lowest free_count) -------------------------------------------
 */

Test(exclusive, reuse_picks_the_smallest_free_page_that_fits) {
  weft_pool_config pools[] = {exclusive_pool(4096, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 4096); /* page 4096 */
  reserve_ok(e.mm, &b, 3000); /* page 3008 */
  reserve_ok(e.mm, &c, 2100); /* page 2112 */
  char *pa = resolve_ok(e.mm, &a), *pb = resolve_ok(e.mm, &b), *pc = resolve_ok(e.mm, &c);
  uint64_t reserved = weft_mm_usage(e.mm).bytes_reserved;
  cr_assert_eq(reserved, 4096 + 3008 + 2112);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);

  /* 2500 fits 4096 and 3008; the smallest that fits is b's page. */
  weft_mem d, f, g;
  reserve_ok(e.mm, &d, 2500);
  cr_assert_eq(resolve_ok(e.mm, &d), pb, "best fit: the 3008 B page, not the first free one");
  /* 2000 fits 4096 and 2112 (b's is taken): c's page. */
  reserve_ok(e.mm, &f, 2000);
  cr_assert_eq(resolve_ok(e.mm, &f), pc, "best fit: the 2112 B page");
  reserve_ok(e.mm, &g, 4000);
  cr_assert_eq(resolve_ok(e.mm, &g), pa);
  cr_assert_eq(alloc_calls(&e), 3, "every request was served by a free page");
  EXPECT_USAGE(e.mm, 3, 8500, align_up(2500) - 2500 + align_up(2000) - 2000 + 4032 - 4000, reserved,
               "three reused pages");
  weft_mm_free(e.mm, &d);
  weft_mm_free(e.mm, &f);
  weft_mm_free(e.mm, &g);
  mm_close(&e);
}

/* ---- cleanup
 * -------------------------------------------------------------------------------------- */

Test(exclusive, an_explicit_cleanup_frees_free_pages_and_renumbers_the_survivors) {
  weft_pool_config pools[] = {exclusive_pool(1024, WEFT_NO_PERIOD)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &b, 1024);
  reserve_ok(e.mm, &c, 1024);
  cr_assert_eq(b.page, 1);
  char *pb = resolve_ok(e.mm, &b);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &c);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(b.page, 0, "the survivor was renumbered through its descriptor");
  cr_assert_null(weft_mm_find(e.mm, &b));
  cr_assert_eq(resolve_ok(e.mm, &b), pb);
  EXPECT_USAGE(e.mm, 1, 1024, 0, 1024, "only b's page is left");
  cr_assert_eq(report_at(e.mm, 0).pages, 1);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 3);
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 1024);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(exclusive, a_free_page_is_released_by_a_periodic_cleanup) {
  /* Period 10: a check every 10 / 5 = 2 reservations frees a page seen free. */
  weft_pool_config pools[] = {exclusive_pool(1024, 10), sliced_pool(64 * KIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem a, live, other[10];
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &live, 1024);
  char *plive = resolve_ok(e.mm, &live);
  weft_mm_free(e.mm, &a);
  cr_assert_eq(report_at(e.mm, 0).pages, 2);
  int released_after = -1;
  for (int i = 0; i < 10; i++) {
    reserve_ok(e.mm, &other[i], 4096); /* served by the sliced pool */
    if (released_after < 0 && report_at(e.mm, 0).pages == 1) released_after = i + 1;
  }
  cr_assert_geq(released_after, 1, "the free page was still held after a whole period");
  cr_assert_leq(released_after, 2, "a free page is released at the next check (every 2)");
  cr_assert_null(weft_mm_find(e.mm, &live), "the live page is never released");
  cr_assert_eq(resolve_ok(e.mm, &live), plive);
  EXPECT_USAGE(e.mm, 11, 1024 + 10 * 4096, 0, 1024 + 64 * KIB, "live page + one sliced page");
  weft_mm_free(e.mm, &live);
  for (int i = 0; i < 10; i++) weft_mm_free(e.mm, &other[i]);
  mm_close(&e);
}

Test(exclusive, without_a_period_only_an_explicit_cleanup_frees) {
  weft_pool_config pools[] = {exclusive_pool(1024, WEFT_NO_PERIOD), sliced_pool(64 * KIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem a, other;
  reserve_ok(e.mm, &a, 1024);
  weft_mm_free(e.mm, &a);
  for (int i = 0; i < 100; i++) {
    reserve_ok(e.mm, &other, 4096);
    weft_mm_free(e.mm, &other);
  }
  cr_assert_eq(report_at(e.mm, 0).pages, 1, "no periodic release without a period");
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 0);
  cr_assert_eq(report_at(e.mm, 1).pages, 0);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "all released");
  mm_close(&e);
}

/* ---- the EXCLUSIVE_PAGES preset
 * --------------------------------------------------------------------- */

Test(exclusive, the_exclusive_pages_preset_reuses_across_a_reallocation) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_EXCLUSIVE_PAGES), 128 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  weft_mem m[5];
  for (int i = 0; i < 5; i++) reserve_ok(e.mm, &m[i], 1000 * (uint64_t)(i + 1));
  weft_memory_usage before = weft_mm_usage(e.mm);
  uint64_t calls = alloc_calls(&e);
  m[0].handle_refs = 2;
  cr_assert_not(weft_mem_can_mut(&m[0]));
  m[0].handle_refs = 1;
  cr_assert(weft_mem_can_mut(&m[0]));
  for (int i = 0; i < 5; i++) weft_mm_free(e.mm, &m[i]);
  for (int i = 0; i < 5; i++) reserve_ok(e.mm, &m[i], 1000 * (uint64_t)(i + 1));
  weft_memory_usage after = weft_mm_usage(e.mm);
  cr_assert_eq(after.number_allocs, before.number_allocs);
  cr_assert_eq(after.bytes_in_use, before.bytes_in_use);
  cr_assert_eq(after.bytes_reserved, before.bytes_reserved);
  cr_assert_eq(alloc_calls(&e), calls, "every page was reused");
  for (int i = 0; i < 5; i++) weft_mm_free(e.mm, &m[i]);
  mm_close(&e);
}

/* ---- pages sized from the request (issue 12, item 29) --------------------------------------- */

Test(exclusive, a_wide_pool_reserves_what_the_request_needs_and_reports_free_pages_whole) {
  /* The default layout for 4 GiB pages: 600 MiB goes to the exclusive tail,
   * whose page was max(2 GiB average, request) = 2033 MiB. A dry run keeps
   * the pages unbacked. */
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), 4 * GIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 600 * MIB);
  EXPECT_USAGE(e.mm, 1, 600 * MIB, 0, 600 * MIB, "600 MiB reserves a page of 600 MiB");
  weft_mm_free(e.mm, &a);
  cr_assert_eq(weft_mm_largest_free(e.mm), 600 * MIB);
  cr_assert_eq(weft_mm_free_bytes(e.mm), 600 * MIB);
  /* A smaller request reuses the free page (best fit), and once freed the
   * page is free whole, not at the size of its last allocation. */
  reserve_ok(e.mm, &b, 550 * MIB);
  EXPECT_USAGE(e.mm, 1, 550 * MIB, 0, 600 * MIB, "550 MiB reuses the 600 MiB page");
  cr_assert_eq(weft_mm_free_bytes(e.mm), 0, "the page's other 50 MiB can serve nothing");
  weft_mm_free(e.mm, &b);
  cr_assert_eq(weft_mm_largest_free(e.mm), 600 * MIB, "a free exclusive page is free whole");
  cr_assert_eq(weft_mm_free_bytes(e.mm), 600 * MIB);
  weft_mm_set_dry_run(e.mm, false);
  mm_close(&e);
}
