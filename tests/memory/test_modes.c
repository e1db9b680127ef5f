/* Allocation modes and reserve modes: persistent and dedicated windows form a
 * stack (the innermost decides, AUTO pops), the persistent policies (ENABLED,
 * SIZE_MATCH, DISABLED, ENFORCED), dedicated allocations released once freed,
 * FORBIDDEN serving only room already held (else PageUpdateForbidden, never a
 * new page), and ADD_ONLY / FORBIDDEN releasing nothing. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"
#include "mm_test_util.h"

TestSuite(modes, .timeout = 30, .fini = mm_fini);

static void open_policy(mm_env *e, const weft_pool_config *pools, size_t n,
                        weft_persistent_policy policy) {
  weft_mm_config cfg = mm_config(custom_layout(pools, n), GIB);
  cfg.persistent = policy;
  mm_open_cfg(e, &cfg, 0);
}

/* ---- windows
 * ---------------------------------------------------------------------------------------- */

Test(modes, persistent_windows_nest) {
  weft_pool_config pools[] = {sliced_pool(4096, 4096, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO);
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT); /* the load's window */
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT); /* one parameter's window */
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);       /* that parameter is done */
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_PERSISTENT);

  weft_mem weight, transient;
  reserve_ok(e.mm, &weight, 1024);
  cr_assert_eq(persistent_report(e.mm).usage.bytes_in_use, 1024,
               "an allocation inside the outer window is persistent");
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 0, "nothing leaked into the dynamic pools");

  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO); /* the outer window closes */
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO);
  reserve_ok(e.mm, &transient, 1024);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 1, "ordinary allocations are dynamic again");
  cr_assert_eq(persistent_report(e.mm).usage.bytes_in_use, 1024);
  EXPECT_USAGE(e.mm, 2, 2048, 0, 1024 + 4096, "one persistent slice and one page");
  weft_mm_free(e.mm, &weight);
  weft_mm_free(e.mm, &transient);
  mm_close(&e);
}

Test(modes, the_innermost_window_decides_and_auto_pops) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO); /* popping an empty stack is harmless */
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO);
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_DEDICATED);
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_PERSISTENT);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_DEDICATED);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_PERSISTENT);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO, "saturates at the base");
  mm_close(&e);
}

Test(modes, windows_nest_to_any_depth) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  for (int i = 0; i < 100; i++) weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  for (int i = 0; i < 99; i++) weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_PERSISTENT,
               "99 inner windows closed: the outermost is still open (mode %d)",
               (int)weft_mm_current_mode(e.mm));
  weft_mem m;
  reserve_ok(e.mm, &m, 1024);
  cr_assert_eq(persistent_report(e.mm).usage.number_allocs, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO);
  weft_mm_free(e.mm, &m);
  mm_close(&e);
}

Test(modes, dedicated_allocations_are_released_once_freed) {
  weft_pool_config pools[] = {sliced_pool(4 * MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  weft_mem probe, weight, tick;
  reserve_ok(e.mm, &probe, 8 * MIB);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  reserve_ok(e.mm, &weight, MIB);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);

  cr_assert_eq(persistent_report(e.mm).usage.bytes_in_use, MIB,
               "closing the dedicated window restores the persistent one");
  weft_pool_report d = dedicated_report(e.mm);
  cr_assert_eq(d.pages, 1, "the dedicated allocation is reported as its own pool");
  expect_usage_of(d.usage, 1, 8 * MIB, 0, 8 * MIB, "the dedicated pool");
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 0);
  EXPECT_USAGE(e.mm, 2, 9 * MIB, 0, 9 * MIB, "probe and weight");
  char *pp = resolve_ok(e.mm, &probe);
  cr_assert_not_null(pp);

  weft_mm_free(e.mm, &probe);
  reserve_ok(e.mm, &tick, MIB);
  cr_assert_eq(dedicated_report(e.mm).pages, 0, "the probe buffer is gone");
  EXPECT_USAGE(e.mm, 2, 2 * MIB, 0, MIB + 4 * MIB, "the weight and one dynamic page remain");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 5 * MIB);
  weft_mm_free(e.mm, &weight);
  weft_mm_free(e.mm, &tick);
  mm_close(&e);
}

/* ---- persistent policies
 * ------------------------------------------------------------------------------- */

Test(modes, enabled_policy_is_persistent_only_inside_windows) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  open_policy(&e, pools, 1, WEFT_PERSISTENT_ENABLED);
  weft_mem w, a;
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  reserve_ok(e.mm, &w, 1024);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  weft_mm_free(e.mm, &w); /* a free persistent 1024 slice exists */
  reserve_ok(e.mm, &a, 1024);
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1, "outside a window: dynamic");
  cr_assert_eq(persistent_report(e.mm).usage.number_allocs, 0);
  weft_mm_free(e.mm, &a);
  mm_close(&e);
}

Test(modes, size_match_serves_known_sizes_from_the_persistent_pool) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  open_policy(&e, pools, 1, WEFT_PERSISTENT_SIZE_MATCH);
  weft_mem w, a, b, c;
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  reserve_ok(e.mm, &w, 1024);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(alloc_calls(&e), 1);

  reserve_ok(e.mm, &a, 1024); /* a bucket of 1024 exists: a new persistent slice */
  weft_pool_report p = persistent_report(e.mm);
  cr_assert_eq(p.pages, 2);
  cr_assert_eq(p.usage.number_allocs, 2);
  cr_assert_eq(report_at(e.mm, 0).pages, 0);

  reserve_ok(e.mm, &b, 2048); /* no such bucket: dynamic */
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1);
  cr_assert_eq(persistent_report(e.mm).usage.number_allocs, 2);

  weft_mm_free(e.mm, &w);
  uint64_t calls = alloc_calls(&e);
  reserve_ok(e.mm, &c, 1000); /* effective 1024: reuses w's free slice */
  cr_assert_eq(alloc_calls(&e), calls);
  p = persistent_report(e.mm);
  cr_assert_eq(p.pages, 2);
  expect_usage_of(p.usage, 2, 2024, 24, 2048, "the persistent pool");
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

Test(modes, a_disabled_policy_ignores_persistent_windows) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  open_policy(&e, pools, 1, WEFT_PERSISTENT_DISABLED);
  weft_mem a, d;
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO, "the push pushed the base mode");
  reserve_ok(e.mm, &a, 1024);
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1, "served by the dynamic pool");
  cr_assert_eq(persistent_report(e.mm).pages, 0);
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED); /* always honoured */
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_DEDICATED);
  reserve_ok(e.mm, &d, 1024);
  cr_assert_eq(dedicated_report(e.mm).usage.number_allocs, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &d);
  mm_close(&e);
}

Test(modes, an_enforced_policy_makes_every_allocation_persistent) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  open_policy(&e, pools, 1, WEFT_PERSISTENT_ENFORCED);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_PERSISTENT, "the base mode is persistent");
  weft_mem a, d;
  reserve_ok(e.mm, &a, 1024);
  cr_assert_eq(persistent_report(e.mm).usage.number_allocs, 1);
  cr_assert_eq(report_at(e.mm, 0).pages, 0);
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  reserve_ok(e.mm, &d, 1024);
  cr_assert_eq(dedicated_report(e.mm).usage.number_allocs, 1, "dedicated is always honoured");
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_PERSISTENT);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_PERSISTENT, "AUTO cannot pop the base");
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &d);
  mm_close(&e);
}

/* ---- reserve modes
 * -------------------------------------------------------------------------------------- */

Test(modes, forbidden_serves_only_room_already_held) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c, d;
  reserve_ok(e.mm, &a, 1024);
  cr_assert_eq(alloc_calls(&e), 1);
  EXPECT_OK(reserve_mode(e.mm, &b, 1024, WEFT_RESERVE_FORBIDDEN));
  cr_assert_eq(b.page, a.page, "served from the page held");
  EXPECT_USAGE(e.mm, 2, 2048, 0, 4096, "two on the one page");

  weft_status st = reserve_mode(e.mm, &c, 4096, WEFT_RESERVE_FORBIDDEN);
  expect_kind_of(st, WEFT_ERR_PAGE_UPDATE_FORBIDDEN, "no room and no new page");
  cr_assert_eq(weft_error_size(st), 4096);
  cr_assert_not(weft_error_may_succeed_after_reclaim(st), "never retried");
  weft_error_free(st);
  cr_assert_not(weft_mem_is_placed(&c));
  cr_assert_eq(alloc_calls(&e), 1, "storage untouched");
  cr_assert_eq(report_at(e.mm, 0).pages, 1);
  EXPECT_USAGE(e.mm, 2, 2048, 0, 4096, "unchanged");

  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  EXPECT_OK(reserve_mode(e.mm, &d, 4096, WEFT_RESERVE_FORBIDDEN)); /* the freed room */
  cr_assert_eq(alloc_calls(&e), 1);
  EXPECT_USAGE(e.mm, 1, 4096, 0, 4096, "the whole page");
  weft_mm_free(e.mm, &d);
  mm_close(&e);
}

Test(modes, forbidden_never_adds_a_page_in_any_pool) {
  weft_pool_config pools[] = {exclusive_pool(1024, WEFT_NO_PERIOD), sliced_pool(4096, 0, 0),
                              direct_pool(WEFT_NO_CEILING)};
  mm_env e;
  mm_open(&e, pools, 3);
  weft_mem m;
  EXPECT_KIND(reserve_mode(e.mm, &m, 512, WEFT_RESERVE_FORBIDDEN), WEFT_ERR_PAGE_UPDATE_FORBIDDEN);
  EXPECT_KIND(reserve_mode(e.mm, &m, 4000, WEFT_RESERVE_FORBIDDEN), WEFT_ERR_PAGE_UPDATE_FORBIDDEN);
  EXPECT_KIND(reserve_mode(e.mm, &m, MIB, WEFT_RESERVE_FORBIDDEN), WEFT_ERR_PAGE_UPDATE_FORBIDDEN);
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  EXPECT_KIND(reserve_mode(e.mm, &m, 512, WEFT_RESERVE_FORBIDDEN), WEFT_ERR_PAGE_UPDATE_FORBIDDEN);
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  EXPECT_KIND(reserve_mode(e.mm, &m, 512, WEFT_RESERVE_FORBIDDEN), WEFT_ERR_PAGE_UPDATE_FORBIDDEN);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(alloc_calls(&e), 0, "not one storage allocation");
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "nothing");

  /* A free persistent slice of the same size is room already held. */
  weft_mem w;
  reserve_ok(e.mm, &w, 512);
  weft_mm_free(e.mm, &w);
  EXPECT_OK(reserve_mode(e.mm, &m, 512, WEFT_RESERVE_FORBIDDEN));
  cr_assert_eq(alloc_calls(&e), 1);
  cr_assert_eq(persistent_report(e.mm).usage.number_allocs, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  weft_mm_free(e.mm, &m);
  mm_close(&e);
}

/* An exclusive pool with period 5 checks on every reservation: a free page is
 * released at the first check that sees it free, unless the mode forbids it. */
static void expect_mode_releases_nothing(weft_reserve_mode mode) {
  weft_pool_config pools[] = {exclusive_pool(1024, 5), sliced_pool(64 * KIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem a, x[6], y;
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &x[0], 4096); /* the sliced page, so the loop needs no new page */
  weft_mm_free(e.mm, &a);
  for (int i = 1; i < 6; i++) {
    EXPECT_OK(reserve_mode(e.mm, &x[i], 4096, mode));
    cr_assert_eq(report_at(e.mm, 0).pages, 1, "reservation %d released a page", i);
  }
  reserve_ok(e.mm, &y, 4096); /* ALLOW: the periodic pass may release now */
  cr_assert_eq(report_at(e.mm, 0).pages, 0, "an ALLOW reservation released the free page");
  EXPECT_USAGE(e.mm, 7, 7 * 4096, 0, 64 * KIB, "the sliced page only");
  for (int i = 0; i < 6; i++) weft_mm_free(e.mm, &x[i]);
  weft_mm_free(e.mm, &y);
  mm_close(&e);
}

Test(modes, add_only_releases_nothing) {
  expect_mode_releases_nothing(WEFT_RESERVE_ADD_ONLY);
}

Test(modes, forbidden_releases_nothing) {
  expect_mode_releases_nothing(WEFT_RESERVE_FORBIDDEN);
}

Test(modes, add_only_may_add_pages) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  EXPECT_OK(reserve_mode(e.mm, &a, 4096, WEFT_RESERVE_ADD_ONLY));
  EXPECT_OK(reserve_mode(e.mm, &b, 4096, WEFT_RESERVE_ADD_ONLY));
  cr_assert_eq(report_at(e.mm, 0).pages, 2);
  cr_assert_eq(alloc_calls(&e), 2);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(modes, add_only_keeps_a_freed_dedicated_allocation_until_allowed) {
  weft_pool_config pools[] = {sliced_pool(64 * KIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem probe, x, y;
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  reserve_ok(e.mm, &probe, MIB);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  reserve_ok(e.mm, &x, 4096);
  weft_mm_free(e.mm, &probe);
  weft_mem z;
  /* Released by the free itself is acceptable; released by a reservation that
   * may not release anything is not. */
  bool held = dedicated_report(e.mm).pages == 1;
  EXPECT_OK(reserve_mode(e.mm, &z, 4096, WEFT_RESERVE_ADD_ONLY));
  if (held)
    cr_assert_eq(weft_storage_bytes_allocated(e.storage), MIB + 64 * KIB,
                 "an ADD_ONLY reservation released the dedicated allocation");
  reserve_ok(e.mm, &y, 4096);
  cr_assert_eq(dedicated_report(e.mm).pages, 0, "released on an ALLOW tick");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 64 * KIB);
  weft_mm_free(e.mm, &x);
  weft_mm_free(e.mm, &y);
  weft_mm_free(e.mm, &z);
  mm_close(&e);
}

Test(modes, add_only_does_not_reclaim_at_a_direct_ceiling) {
  weft_pool_config pools[] = {direct_pool(7 * MIB)};
  mm_env e;
  mm_open(&e, pools, 1);
  for (uint64_t size = MIB; size <= 3 * MIB; size += MIB) {
    weft_mem held;
    reserve_ok(e.mm, &held, size);
    weft_mm_free(e.mm, &held);
  }
  /* ALLOW would release 1 and 2 MiB here; ADD_ONLY may only add. The ceiling
   * is a watermark, so the allocation is served past it. */
  weft_mem crossed;
  EXPECT_OK(reserve_mode(e.mm, &crossed, 4 * MIB, WEFT_RESERVE_ADD_ONLY));
  cr_assert_eq(report_at(e.mm, 0).pages, 4,
               "an ADD_ONLY reservation released free slices: %" PRIu64 " of 4 held, %" PRIu64
               " bytes reserved",
               report_at(e.mm, 0).pages, weft_mm_usage(e.mm).bytes_reserved);
  EXPECT_USAGE(e.mm, 1, 4 * MIB, 0, 10 * MIB, "everything held");
  weft_mm_free(e.mm, &crossed);
  mm_close(&e);
}

Test(modes, add_only_does_not_release_a_freed_dedicated_allocation_in_a_dedicated_window) {
  weft_pool_config pools[] = {sliced_pool(64 * KIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  weft_mem probe, next;
  reserve_ok(e.mm, &probe, MIB);
  weft_mm_free(e.mm, &probe);
  bool held = dedicated_report(e.mm).pages == 1; /* a release at free itself is fine */
  EXPECT_OK(reserve_mode(e.mm, &next, 2 * MIB, WEFT_RESERVE_ADD_ONLY));
  if (held)
    cr_assert_eq(dedicated_report(e.mm).pages, 2,
                 "an ADD_ONLY reservation released the freed dedicated allocation (%" PRIu64
                 " of 2 held)",
                 dedicated_report(e.mm).pages);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  weft_mm_free(e.mm, &next);
  mm_close(&e);
}
