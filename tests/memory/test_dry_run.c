/* Dry runs: pages are carved (identities, slices, high-water marks) without
 * backing, mapped on the first weft_mm_resolve (identity checked first), a
 * mapping failure is StorageMappingFailed{size, source}, cleanup forgets
 * unmapped pages without deallocating them, and the measured plan cycle:
 * measure a peak in a dry run, cap a layout at it, replay for real. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"
#include "mm_test_util.h"

TestSuite(dry_run, .timeout = 30, .fini = mm_fini);

static const weft_pool_config growable[] = {{.kind = WEFT_POOL_SLICED,
                                             .page_size = 1024 * 1024,
                                             .dealloc_period = WEFT_NO_PERIOD,
                                             .reclaim_at = WEFT_NO_CEILING}};

Test(dry_run, reservations_stay_unmapped_until_resolved) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem m;
  reserve_ok(e.mm, &m, 600 * KIB);
  weft_pool_report r = report_at(e.mm, 0);
  cr_assert_eq(r.pages, 1, "the page was carved");
  cr_assert_eq(r.pages_peak, 1, "and counts toward the plan");
  cr_assert_eq(r.pages_unmapped, 1, "but has no backing");
  cr_assert_eq(r.largest_alloc, 600 * KIB);
  EXPECT_USAGE(e.mm, 1, 600 * KIB, 0, MIB, "usage counts the lazy page");
  cr_assert_eq(alloc_calls(&e), 0, "no storage allocation");
  cr_assert_eq(weft_mm_storage_allocs(e.mm), 0);
  cr_assert_null(weft_mm_find(e.mm, &m), "the descriptor is placed and found");

  char *p = resolve_ok(e.mm, &m); /* writes the 600 KiB */
  cr_assert_not_null(p);
  cr_assert_eq(report_at(e.mm, 0).pages_unmapped, 0, "resolution installed the backing");
  cr_assert_eq(alloc_calls(&e), 1);
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), MIB, "the page, at its size");
  cr_assert_eq(weft_mm_storage_allocs(e.mm), 1);
  cr_assert_eq(resolve_ok(e.mm, &m), p, "a second resolve maps nothing new");
  cr_assert_eq(alloc_calls(&e), 1);

  weft_mm_free(e.mm, &m);
  weft_mm_set_dry_run(e.mm, false);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 0);
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 0);
  mm_close(&e);
}

Test(dry_run, a_resolution_maps_only_its_own_page) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem workload, scratch;
  reserve_ok(e.mm, &workload, 600 * KIB); /* 600 KiB each: they cannot share a page */
  reserve_ok(e.mm, &scratch, 600 * KIB);
  weft_pool_report r = report_at(e.mm, 0);
  cr_assert_eq(r.pages, 2);
  cr_assert_eq(r.pages_unmapped, 2, "neither is backed until something resolves it");
  resolve_ok(e.mm, &scratch);
  cr_assert_eq(report_at(e.mm, 0).pages_unmapped, 1, "only the resolved page is backed");
  cr_assert_eq(alloc_calls(&e), 1);
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), MIB);
  weft_mm_free(e.mm, &workload);
  weft_mm_free(e.mm, &scratch);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 0, "mapped and unmapped pages both go");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 0);
  mm_close(&e);
}

Test(dry_run, mapping_a_page_keeps_every_slice_at_its_offset) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 100 * KIB);
  reserve_ok(e.mm, &b, 300 * KIB);
  reserve_ok(e.mm, &c, 100);
  char *pb = resolve_ok(e.mm, &b); /* maps the page through b */
  char *pa = resolve_ok(e.mm, &a);
  char *pc = resolve_ok(e.mm, &c);
  cr_assert_eq(pb - pa, (ptrdiff_t)(100 * KIB));
  cr_assert_eq(pc - pa, (ptrdiff_t)(400 * KIB));
  cr_assert_eq(alloc_calls(&e), 1, "one page, mapped once");
  EXPECT_USAGE(e.mm, 3, 400 * KIB + 100, 28, MIB, "carving is the same as a real run");
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

Test(dry_run, persistent_reservations_stay_unmapped) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem kv;
  reserve_ok(e.mm, &kv, 512 * KIB);
  weft_pool_report p = persistent_report(e.mm);
  cr_assert_eq(p.pages, 1);
  cr_assert_eq(p.pages_unmapped, 1, "a dry-run persistent slice has no backing yet");
  cr_assert_eq(alloc_calls(&e), 0);
  resolve_ok(e.mm, &kv);
  cr_assert_eq(persistent_report(e.mm).pages_unmapped, 0);
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 512 * KIB, "mapped at its own size");
  weft_mm_free(e.mm, &kv);
  weft_mm_set_dry_run(e.mm, false);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  mm_close(&e);
}

Test(dry_run, unmapped_persistent_slices_are_forgotten_by_a_cleanup) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem kv;
  reserve_ok(e.mm, &kv, 512 * KIB);
  weft_mm_free(e.mm, &kv);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(persistent_report(e.mm).pages, 0);
  cr_assert_eq(alloc_calls(&e), 0, "never mapped, never allocated");
  mm_close(&e);
}

Test(dry_run, a_mapping_failure_is_storage_mapping_failed_with_its_source) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem m;
  reserve_ok(e.mm, &m, 600 * KIB);
  weft_storage_host_fail_at(e.storage, 1, WEFT_ERR_OUT_OF_MEMORY);
  void *p = NULL;
  weft_status st = weft_mm_resolve(e.mm, &m, &p);
  expect_kind_of(st, WEFT_ERR_STORAGE_MAPPING_FAILED, "mapping the lazy page");
  cr_assert_eq(weft_error_size(st), 600 * KIB,
               "the size is the allocation's (what the caller asked for), not its page's");
  cr_assert_not_null(strstr(weft_error_message(st), "1048576"), "the message names the page: %s",
                     weft_error_message(st));
  weft_status src = weft_error_source(st);
  cr_assert_not_null(src, "the storage error is the source");
  cr_assert_eq(weft_error_kind_of(src), WEFT_ERR_OUT_OF_MEMORY);
  weft_error_free(st);
  cr_assert_eq(report_at(e.mm, 0).pages_unmapped, 1, "still unmapped");
  cr_assert_null(weft_mm_find(e.mm, &m), "the reservation itself stands");
  cr_assert_null(weft_mm_validate(e.mm));

  resolve_ok(e.mm, &m); /* the failpoint fired once: a retry maps */
  cr_assert_eq(report_at(e.mm, 0).pages_unmapped, 0);
  weft_mm_free(e.mm, &m);
  mm_close(&e);
}

Test(dry_run, a_persistent_mapping_failure_names_the_slice_size) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem m;
  reserve_ok(e.mm, &m, 1025);
  weft_storage_host_fail_at(e.storage, 1, WEFT_ERR_OUT_OF_MEMORY);
  void *p = NULL;
  weft_status st = weft_mm_resolve(e.mm, &m, &p);
  expect_kind_of(st, WEFT_ERR_STORAGE_MAPPING_FAILED, "mapping the lazy slice");
  cr_assert_eq(weft_error_size(st), 1025, "the allocation's size, not its padded slice's");
  cr_assert_eq(weft_error_kind_of(weft_error_source(st)), WEFT_ERR_OUT_OF_MEMORY);
  weft_error_free(st);
  cr_assert_eq(persistent_report(e.mm).pages_unmapped, 1);
  weft_mm_free(e.mm, &m);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  mm_close(&e);
}

Test(dry_run, a_stale_descriptor_never_maps_a_page) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem first, second;
  reserve_ok(e.mm, &first, 600 * KIB);
  weft_mem stale = first;
  weft_mm_free(e.mm, &first);
  reserve_ok(e.mm, &second, 600 * KIB);
  cr_assert(second.page == stale.page && second.slice == stale.slice);
  void *p = NULL;
  EXPECT_KIND(weft_mm_resolve(e.mm, &stale, &p), WEFT_ERR_NOT_FOUND);
  weft_mem never;
  weft_mem_init(&never, 10);
  EXPECT_KIND(weft_mm_resolve(e.mm, &never, &p), WEFT_ERR_NOT_FOUND);
  cr_assert_eq(alloc_calls(&e), 0, "identity is checked before mapping");
  cr_assert_eq(report_at(e.mm, 0).pages_unmapped, 1);
  weft_mm_free(e.mm, &second);
  mm_close(&e);
}

Test(dry_run, a_capped_lazy_pool_cleanup_still_frees) {
  weft_pool_config pools[] = {sliced_pool(1024, 1024, 2048)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &b, 1024);
  EXPECT_KIND(reserve_mode(e.mm, &c, 1024, WEFT_RESERVE_ALLOW), WEFT_ERR_OUT_OF_MEMORY);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  weft_mm_cleanup(e.mm);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "lazy pages released by the cleanup");
  cr_assert_eq(report_at(e.mm, 0).pages, 0);
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &b, 1024);
  EXPECT_KIND(reserve_mode(e.mm, &c, 1024, WEFT_RESERVE_ALLOW), WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(alloc_calls(&e), 0);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(dry_run, pages_added_after_a_dry_run_are_mapped_at_once) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem lazy, eager;
  reserve_ok(e.mm, &lazy, 600 * KIB);
  weft_mm_set_dry_run(e.mm, false);
  reserve_ok(e.mm, &eager, 600 * KIB);
  cr_assert_eq(report_at(e.mm, 0).pages, 2);
  cr_assert_eq(report_at(e.mm, 0).pages_unmapped, 1, "the dry-run page stays lazy");
  cr_assert_eq(alloc_calls(&e), 1, "the new page was mapped at reservation");
  resolve_ok(e.mm, &eager);
  cr_assert_eq(alloc_calls(&e), 1);
  weft_mm_free(e.mm, &lazy);
  weft_mm_free(e.mm, &eager);
  mm_close(&e);
}

Test(dry_run, direct_slices_are_mapped_per_slice) {
  weft_pool_config pools[] = {direct_pool(WEFT_NO_CEILING)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 1000);
  reserve_ok(e.mm, &b, 3000);
  cr_assert_eq(report_at(e.mm, 0).pages_unmapped, 2);
  resolve_ok(e.mm, &b);
  cr_assert_eq(report_at(e.mm, 0).pages_unmapped, 1);
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), align_up(3000));
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 0);
  mm_close(&e);
}

/* ---- the measured plan cycle
 * ---------------------------------------------------------------------------- */

/* Long-lived buffers overlapping transients, with a reuse: the 900 KiB fits
 * where the dropped 600 KiB was, after coalescing with the page remainder. */
static void workload(weft_mm *mm) {
  weft_mem a, b, c;
  reserve_ok(mm, &a, 600 * KIB);
  reserve_ok(mm, &b, 600 * KIB);
  weft_mm_free(mm, &a);
  reserve_ok(mm, &c, 900 * KIB);
  weft_mm_free(mm, &b);
  weft_mm_free(mm, &c);
}

Test(dry_run, a_plan_measured_in_a_dry_run_fits_the_real_replay) {
  mm_env e;
  mm_open(&e, growable, 1);

  /* Measure. */
  weft_mm_set_dry_run(e.mm, true);
  workload(e.mm);
  weft_pool_report measured = report_at(e.mm, 0);
  cr_assert_eq(measured.kind, WEFT_POOL_SLICED);
  cr_assert_eq(measured.largest_alloc, 900 * KIB);
  cr_assert_eq(measured.pages_peak, 2, "two pages while a and b overlap");
  cr_assert_eq(measured.pages_unmapped, 2, "measured without backing");
  cr_assert_eq(alloc_calls(&e), 0, "the measurement cost no storage");
  weft_mm_set_dry_run(e.mm, false);

  /* Cap a layout at the measured high-water mark. */
  weft_pool_config capped[] = {
      sliced_pool(measured.page_size, 0, measured.page_size * measured.pages_peak)};
  weft_layout plan = custom_layout(capped, 1);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 0);
  EXPECT_OK(weft_mm_install(e.mm, &plan));
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 0, "the install reset the marks");

  /* Replay for real: the same peak, every page backed. */
  workload(e.mm);
  weft_pool_report replayed = report_at(e.mm, 0);
  cr_assert_eq(replayed.pages_peak, measured.pages_peak);
  cr_assert_eq(replayed.pages_unmapped, 0);
  cr_assert_eq(replayed.largest_alloc, 900 * KIB);
  cr_assert_eq(alloc_calls(&e), 2);

  /* The plan is exact: one allocation past the workload's peak fails. */
  weft_mem a, b, over;
  reserve_ok(e.mm, &a, 600 * KIB);
  reserve_ok(e.mm, &b, 600 * KIB);
  weft_status st = reserve_mode(e.mm, &over, 600 * KIB, WEFT_RESERVE_ALLOW);
  expect_kind_of(st, WEFT_ERR_OUT_OF_MEMORY, "past the measured plan");
  cr_assert_eq(weft_error_size(st), 600 * KIB);
  weft_error_free(st);
  cr_assert_eq(alloc_calls(&e), 2);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(dry_run, a_warm_second_pass_measures_the_workload_alone) {
  mm_env e;
  mm_open(&e, growable, 1);
  weft_mm_set_dry_run(e.mm, true);
  weft_mem live, scratch;
  reserve_ok(e.mm, &live, 600 * KIB);
  reserve_ok(e.mm, &scratch, 600 * KIB); /* a measurement's scratch beside it */
  weft_mm_free(e.mm, &scratch);
  weft_mm_free(e.mm, &live);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 2, "the scratch is in the marks");
  weft_layout same = custom_layout(growable, 1);
  EXPECT_OK(weft_mm_install(e.mm, &same));
  reserve_ok(e.mm, &live, 600 * KIB);
  weft_mm_free(e.mm, &live);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 1, "the plan is the workload's own high-water");
  cr_assert_eq(alloc_calls(&e), 0);
  weft_mm_set_dry_run(e.mm, false);
  mm_close(&e);
}
