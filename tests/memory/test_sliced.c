/* Sliced pools through the manager: first-fit carving of pages into slices,
 * coalescing, offsets, alignment padding, slice reuse (a reused free slice
 * keeps its padding bytes: capacity = size + padding), descriptor identity
 * (unplaced and stale descriptors are NotFound), renumbering, pool caps (an
 * OutOfMemory naming the cap instead of growth), spilling to the next
 * accepting pool, and exact usage after every step. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"
#include "mm_test_util.h"

TestSuite(sliced, .timeout = 30, .fini = mm_fini);

/* ---- the memory_page scenario ------------------------------------------------------------------
 */

Test(sliced, reservations_of_4_15_8_4_mib_carve_one_page_and_coalesce_in_place) {
  /* One 32 MiB page and no room for a second one. */
  weft_pool_config pools[] = {sliced_pool(32 * MIB, 0, 32 * MIB)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mm *mm = e.mm;

  weft_mem s1, s2, s3, s4, s5, s6;
  reserve_ok(mm, &s1, 4 * MIB);
  reserve_ok(mm, &s2, 15 * MIB);
  reserve_ok(mm, &s3, 8 * MIB);
  reserve_ok(mm, &s4, 4 * MIB);
  char *base = resolve_ok(mm, &s1);
  cr_assert_eq(resolve_ok(mm, &s2) - base, (ptrdiff_t)(4 * MIB));
  cr_assert_eq(resolve_ok(mm, &s3) - base, (ptrdiff_t)(19 * MIB));
  cr_assert_eq(resolve_ok(mm, &s4) - base, (ptrdiff_t)(27 * MIB));
  cr_assert_eq(s1.slice, 0);
  cr_assert_eq(s2.slice, 1);
  cr_assert_eq(s3.slice, 2);
  cr_assert_eq(s4.slice, 3);
  cr_assert(s1.page == 0 && s2.page == 0 && s3.page == 0 && s4.page == 0);
  EXPECT_USAGE(mm, 4, 31 * MIB, 0, 32 * MIB, "4/15/8/4 carved");
  cr_assert_eq(weft_mm_largest_free(mm), 1 * MIB, "[4, 15, 8, 4 | 1 free]");
  cr_assert_eq(alloc_calls(&e), 1);

  /* 8 MiB: no room, and the cap forbids a second page. */
  EXPECT_KIND(reserve_mode(mm, &s5, 8 * MIB, WEFT_RESERVE_ALLOW), WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_not(weft_mem_is_placed(&s5), "a failed reservation leaves the descriptor unplaced");
  EXPECT_USAGE(mm, 4, 31 * MIB, 0, 32 * MIB, "after the refused 8 MiB");

  /* Freeing the 15 lets a 9 fit in its place (split 9 + 6). */
  weft_mm_free(mm, &s2);
  reserve_ok(mm, &s5, 9 * MIB);
  cr_assert_eq(resolve_ok(mm, &s5) - base, (ptrdiff_t)(4 * MIB));
  cr_assert_eq(s5.slice, 1, "s5 takes the freed slice's slot");
  cr_assert_eq(s3.slice, 2, "a split moves no other slice: slots are stable");
  cr_assert_eq(s4.slice, 3, "a split moves no other slice: slots are stable");
  cr_assert_null(weft_mm_find(mm, &s3));
  cr_assert_null(weft_mm_find(mm, &s4));
  EXPECT_USAGE(mm, 4, 25 * MIB, 0, 32 * MIB, "[4, 9, 6 free, 8, 4, 1 free]");

  /* A second 9 has nowhere to go: 6 and 1 are free, not adjacent. */
  EXPECT_KIND(reserve_mode(mm, &s6, 9 * MIB, WEFT_RESERVE_ALLOW), WEFT_ERR_OUT_OF_MEMORY);

  /* Freeing the 8 and coalescing gives [4, 9, 14 free, 4, 1 free]. */
  weft_mm_free(mm, &s3);
  weft_mm_cleanup(mm);
  cr_assert_eq(report_at(mm, 0).pages, 1, "a page with live slices survives a cleanup");
  cr_assert_eq(s4.slice, 3, "a merge moves no live slice: the 4 MiB slice keeps its slot");
  cr_assert_eq(resolve_ok(mm, &s4) - base, (ptrdiff_t)(27 * MIB), "slice_4 sits at 27 MiB");
  cr_assert_eq(weft_mm_largest_free(mm), 14 * MIB, "6 + 8 coalesced into 14");
  EXPECT_USAGE(mm, 3, 17 * MIB, 0, 32 * MIB, "[4, 9, 14 free, 4, 1 free]");

  reserve_ok(mm, &s6, 9 * MIB);
  cr_assert_eq(resolve_ok(mm, &s6) - base, (ptrdiff_t)(13 * MIB));
  /* The free 6 + 8 kept the slot of its lowest part: the remainder split off
   * s5's slice, a new slot (0..3: s1..s4, 4: the 1 MiB tail). */
  cr_assert_eq(s6.slice, 5);

  /* Free the first and the 4 MiB one and coalesce: [4 free, 9, 9, 10 free]. */
  weft_mm_free(mm, &s1);
  weft_mm_free(mm, &s4);
  weft_mm_cleanup(mm);
  cr_assert_eq(s5.slice, 1);
  cr_assert_eq(s6.slice, 5);
  cr_assert_eq(resolve_ok(mm, &s5) - base, (ptrdiff_t)(4 * MIB));
  cr_assert_eq(resolve_ok(mm, &s6) - base, (ptrdiff_t)(13 * MIB), "slice_6 at 13 MiB, size 9");
  cr_assert_eq(weft_mm_largest_free(mm), 10 * MIB, "5 + 4 + 1 coalesced into 10");
  EXPECT_USAGE(mm, 2, 18 * MIB, 0, 32 * MIB, "[4 free, 9, 9, 10 free]");
  cr_assert_null(weft_mm_validate(mm));

  weft_mm_free(mm, &s5);
  weft_mm_free(mm, &s6);
  weft_mm_cleanup(mm);
  cr_assert_eq(report_at(mm, 0).pages, 0, "an entirely free page is released by a cleanup");
  EXPECT_USAGE(mm, 0, 0, 0, 0, "all released");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 0);
  mm_close(&e);
}

Test(sliced, a_freed_half_page_coalesces_with_the_rest_of_the_page) {
  weft_pool_config pools[] = {sliced_pool(32 * MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem half, whole;
  reserve_ok(e.mm, &half, 16 * MIB);
  char *base = resolve_ok(e.mm, &half);
  EXPECT_USAGE(e.mm, 1, 16 * MIB, 0, 32 * MIB, "16 of 32 MiB");
  weft_mm_free(e.mm, &half);
  EXPECT_USAGE(e.mm, 0, 0, 0, 32 * MIB, "freed, the page is still held");

  /* The two free 16 MiB blocks merge into one 32 MiB block on the same page. */
  reserve_ok(e.mm, &whole, 32 * MIB);
  cr_assert_eq(resolve_ok(e.mm, &whole), base, "the whole page, from offset 0");
  cr_assert_eq(alloc_calls(&e), 1, "no second page");
  EXPECT_USAGE(e.mm, 1, 32 * MIB, 0, 32 * MIB, "the whole page");
  weft_mm_free(e.mm, &whole);
  mm_close(&e);
}

/* ---- memory_manage slice tests -----------------------------------------------------------------
 */

Test(sliced, two_chunks_share_one_page) {
  weft_pool_config pools[] = {sliced_pool(2048, 2048, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 512);
  EXPECT_USAGE(e.mm, 1, 512, 0, 2048, "one chunk");
  reserve_ok(e.mm, &b, 512);
  EXPECT_USAGE(e.mm, 2, 1024, 0, 2048, "two chunks on one page");
  cr_assert_eq(resolve_ok(e.mm, &b) - resolve_ok(e.mm, &a), 512);
  cr_assert_eq(report_at(e.mm, 0).pages, 1);
  cr_assert_eq(alloc_calls(&e), 1);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  EXPECT_USAGE(e.mm, 0, 0, 0, 2048, "freed");
  mm_close(&e);
}

Test(sliced, a_freed_page_is_reused_instead_of_allocating) {
  weft_pool_config pools[] = {sliced_pool(512, 512, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 512);
  char *pa = resolve_ok(e.mm, &a);
  weft_mm_free(e.mm, &a);
  reserve_ok(e.mm, &b, 512);
  cr_assert_eq(resolve_ok(e.mm, &b), pa);
  EXPECT_USAGE(e.mm, 1, 512, 0, 512, "reused");
  cr_assert_eq(alloc_calls(&e), 1, "if nothing were reused this would be two pages");
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(sliced, a_chunk_that_does_not_fit_allocates_a_new_page) {
  weft_pool_config pools[] = {sliced_pool(1024, 1024, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 768);
  reserve_ok(e.mm, &b, 768);
  EXPECT_USAGE(e.mm, 2, 1536, 0, 2048, "two pages");
  cr_assert_eq(b.page, 1);
  cr_assert_eq(report_at(e.mm, 0).pages, 2);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 2);
  cr_assert_eq(report_at(e.mm, 0).page_size, 1024);
  cr_assert_eq(weft_mm_storage_allocs(e.mm), 2);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(sliced, every_slice_is_padded_to_the_alignment) {
  weft_pool_config pools[] = {sliced_pool(512, 512, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  cr_assert_eq(weft_storage_alignment(e.storage), ALIGN);
  weft_mem a, b;
  reserve_ok(e.mm, &a, 40);
  EXPECT_USAGE(e.mm, 1, 40, 24, 512, "40 + 24 padding");
  reserve_ok(e.mm, &b, 40);
  EXPECT_USAGE(e.mm, 2, 80, 48, 512, "each slice aligned to 64: 24 padding bytes each");
  cr_assert_eq(resolve_ok(e.mm, &b) - resolve_ok(e.mm, &a), 64, "the second slice starts aligned");
  cr_assert_eq((uintptr_t)resolve_ok(e.mm, &b) % ALIGN, 0);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  EXPECT_USAGE(e.mm, 0, 0, 0, 512, "freed");
  mm_close(&e);
}

Test(sliced, each_size_lands_on_the_first_pool_that_accepts_it) {
  weft_pool_config pools[] = {sliced_pool(128, 128, 0), sliced_pool(256, 256, 0),
                              sliced_pool(384, 384, 0), sliced_pool(512, 512, 0)};
  mm_env e;
  mm_open(&e, pools, 4);
  const uint64_t sizes[] = {64, 192, 320, 448};
  weft_mem m[4];
  for (size_t i = 0; i < 4; i++) reserve_ok(e.mm, &m[i], sizes[i]);
  EXPECT_USAGE(e.mm, 4, 64 + 192 + 320 + 448, 0, 128 + 256 + 384 + 512, "one page per pool");
  for (size_t i = 0; i < 4; i++) {
    weft_pool_report r = report_at(e.mm, i);
    cr_assert_eq(r.kind, WEFT_POOL_SLICED);
    cr_assert_eq(r.pages, 1, "pool %zu holds one page", i);
    cr_assert_eq(r.usage.bytes_in_use, sizes[i], "pool %zu holds the %" PRIu64 " B request", i,
                 sizes[i]);
    cr_assert_eq(r.largest_alloc, sizes[i]);
  }
  for (size_t i = 0; i < 4; i++) weft_mm_free(e.mm, &m[i]);
  mm_close(&e);
}

Test(sliced, reallocating_the_same_sizes_does_not_grow_the_reservation) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), 128 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  weft_mem m[5];
  uint64_t padding = 0;
  for (int i = 0; i < 5; i++) {
    reserve_ok(e.mm, &m[i], 1000 * (uint64_t)(i + 1));
    padding += align_up(1000 * (uint64_t)(i + 1)) - 1000 * (uint64_t)(i + 1);
  }
  weft_memory_usage before = weft_mm_usage(e.mm);
  /* 1000..5000 B all land on the first 8 MiB page of the default ladder. */
  expect_usage_of(before, 5, 15000, padding, 8 * MIB, "before");
  for (int i = 0; i < 5; i++) weft_mm_free(e.mm, &m[i]);
  for (int i = 0; i < 5; i++) reserve_ok(e.mm, &m[i], 1000 * (uint64_t)(i + 1));
  weft_memory_usage after = weft_mm_usage(e.mm);
  cr_assert_eq(after.number_allocs, before.number_allocs);
  cr_assert_eq(after.bytes_in_use, before.bytes_in_use);
  cr_assert_leq(after.bytes_reserved, before.bytes_reserved);
  expect_usage_of(after, 5, 15000, padding, 8 * MIB, "after");
  for (int i = 0; i < 5; i++) weft_mm_free(e.mm, &m[i]);
  mm_close(&e);
}

Test(sliced, freeing_every_other_allocation_and_refilling_stays_within_a_tenth) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), 128 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  const uint64_t sizes[] = {50, 1000, 100, 5000, 200, 10000, 300};
  weft_mem m[7], again[3];
  for (size_t i = 0; i < 7; i++) reserve_ok(e.mm, &m[i], sizes[i]);
  weft_memory_usage before = weft_mm_usage(e.mm);
  for (size_t i = 0; i < 7; i += 2) weft_mm_free(e.mm, &m[i]);
  for (size_t i = 0; i < 3; i++) reserve_ok(e.mm, &again[i], sizes[i]);
  weft_memory_usage after = weft_mm_usage(e.mm);
  cr_assert_leq(after.bytes_reserved * 10, before.bytes_reserved * 11,
                "reserved grew from %" PRIu64 " to %" PRIu64, before.bytes_reserved,
                after.bytes_reserved);
  cr_assert_eq(after.number_allocs, 6);
  cr_assert_eq(after.bytes_in_use, 1000 + 5000 + 10000 + 50 + 1000 + 100);
  for (size_t i = 1; i < 7; i += 2) weft_mm_free(e.mm, &m[i]);
  for (size_t i = 0; i < 3; i++) weft_mm_free(e.mm, &again[i]);
  mm_close(&e);
}

/* ---- padding kept on reuse (not the reference's bug) ------------------------------------------
 */

Test(sliced, a_freed_slice_is_reused_with_its_padding) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 100); /* capacity 128: 100 + 28 padding */
  reserve_ok(e.mm, &b, 1000);
  char *pa = resolve_ok(e.mm, &a);
  cr_assert_eq(resolve_ok(e.mm, &b) - pa, 128);
  EXPECT_USAGE(e.mm, 2, 1100, 28 + 24, 4096, "a and b");
  weft_mm_free(e.mm, &a);
  EXPECT_USAGE(e.mm, 1, 1000, 24, 4096, "a freed");

  /* 120 B needs 128: exactly the freed slice's size + padding. */
  reserve_ok(e.mm, &c, 120);
  cr_assert_eq(resolve_ok(e.mm, &c), pa, "the freed slice (capacity 128) serves 120 + 8");
  cr_assert_eq(c.slice, 0);
  EXPECT_USAGE(e.mm, 2, 1120, 8 + 24, 4096, "c reuses a's slice with padding 8");
  cr_assert_eq(weft_mm_largest_free(e.mm), 4096 - 128 - 1024, "the tail was left alone");
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

Test(sliced, a_reused_slice_splits_off_its_unused_capacity) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c, d;
  reserve_ok(e.mm, &a, 100); /* capacity 128 */
  reserve_ok(e.mm, &b, 1000);
  char *pa = resolve_ok(e.mm, &a);
  weft_mm_free(e.mm, &a);

  reserve_ok(e.mm, &c, 64);
  cr_assert_eq(resolve_ok(e.mm, &c), pa);
  EXPECT_USAGE(e.mm, 2, 1064, 24, 4096, "c takes 64 of the 128");
  /* The other 64 bytes of a's capacity (its old padding included) stay usable. */
  reserve_ok(e.mm, &d, 64);
  cr_assert_eq(resolve_ok(e.mm, &d) - pa, 64, "d fills the remainder of a's old slice");
  cr_assert_eq(d.slice, 3, "d takes the remainder's slot, a new one (a: 0, b: 1, tail: 2)");
  cr_assert_eq(b.slice, 1, "a split moves no other slice: b keeps its slot");
  EXPECT_USAGE(e.mm, 3, 1128, 24, 4096, "a's capacity fully reused");
  cr_assert_null(weft_mm_validate(e.mm));
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  weft_mm_free(e.mm, &d);
  mm_close(&e);
}

/* ---- descriptors ---------------------------------------------------------------------------- */

Test(sliced, descriptors_get_unique_non_zero_identities) {
  weft_mem a, b;
  weft_mem_init(&a, 10);
  weft_mem_init(&b, 10);
  cr_assert_neq(a.id, 0);
  cr_assert_neq(b.id, 0);
  cr_assert_neq(a.id, b.id);
  cr_assert_eq(a.size, 10);
  cr_assert_not(weft_mem_is_placed(&a));
}

Test(sliced, a_descriptor_with_two_handles_cannot_be_mutated_in_place) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), 128 * MIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, 0);
  weft_mem m;
  reserve_ok(e.mm, &m, 10);
  m.refs = 2;
  m.handle_refs = 2;
  cr_assert_not(weft_mem_can_mut(&m), "two handles: not mutable in place");
  m.refs = 1;
  m.handle_refs = 1;
  cr_assert(weft_mem_can_mut(&m), "one handle: mutable in place");
  m.refs = 2; /* a binding holds it too: still mutable, bindings do not count */
  cr_assert(weft_mem_can_mut(&m));
  m.refs = 0;
  m.handle_refs = 0;
  weft_mm_free(e.mm, &m);
  mm_close(&e);
}

Test(sliced, an_unplaced_descriptor_is_not_found) {
  weft_pool_config pools[] = {sliced_pool(2048, 2048, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem live, never;
  reserve_ok(e.mm, &live, 512); /* a live page at index 0 */
  weft_mem_init(&never, 512);
  EXPECT_KIND(weft_mm_find(e.mm, &never), WEFT_ERR_NOT_FOUND);
  void *p = NULL;
  EXPECT_KIND(weft_mm_resolve(e.mm, &never, &p), WEFT_ERR_NOT_FOUND);
  /* Even a forged location of a live slice does not resolve without its identity. */
  weft_mem forged = live;
  forged.id = never.id;
  EXPECT_KIND(weft_mm_find(e.mm, &forged), WEFT_ERR_NOT_FOUND);
  EXPECT_KIND(weft_mm_resolve(e.mm, &forged, &p), WEFT_ERR_NOT_FOUND);
  cr_assert_null(weft_mm_find(e.mm, &live));
  weft_mm_free(e.mm, &live);
  mm_close(&e);
}

Test(sliced, a_stale_descriptor_is_not_found_once_its_slice_is_reused) {
  weft_pool_config pools[] = {sliced_pool(2048, 2048, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem first, second;
  reserve_ok(e.mm, &first, 512);
  weft_mem stale = first; /* a holder of the old location and identity */
  weft_mm_free(e.mm, &first);
  EXPECT_KIND(weft_mm_find(e.mm, &first), WEFT_ERR_NOT_FOUND);
  reserve_ok(e.mm, &second, 512);
  cr_assert_eq(second.page, stale.page, "the same slice was reused");
  cr_assert_eq(second.slice, stale.slice, "the same slice was reused");
  EXPECT_KIND(weft_mm_find(e.mm, &stale), WEFT_ERR_NOT_FOUND);
  void *p = NULL;
  EXPECT_KIND(weft_mm_resolve(e.mm, &stale, &p), WEFT_ERR_NOT_FOUND);
  EXPECT_KIND(weft_mm_find(e.mm, &first), WEFT_ERR_NOT_FOUND);
  cr_assert_null(weft_mm_find(e.mm, &second), "the new owner resolves");
  resolve_ok(e.mm, &second);
  weft_mm_free(e.mm, &second);
  mm_close(&e);
}

Test(sliced, renumbering_rewrites_the_descriptors_in_place) {
  /* Two pages of 4 KiB; a merge moves no slice, a released page moves the
   * pages after it. */
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem m[4], far;
  char *p[4];
  for (int i = 0; i < 4; i++) {
    reserve_ok(e.mm, &m[i], 64);
    p[i] = resolve_ok(e.mm, &m[i]);
  }
  reserve_ok(e.mm, &far, 4096); /* a page of its own, the second */
  char *pfar = resolve_ok(e.mm, &far);
  cr_assert_eq(far.page, 1);
  cr_assert_eq(m[2].slice, 2);
  cr_assert_eq(m[3].slice, 3);
  weft_mm_free(e.mm, &m[0]);
  weft_mm_free(e.mm, &m[1]); /* merges with m[0]'s free slice */
  weft_mm_cleanup(e.mm);
  cr_assert_eq(m[2].slice, 2, "a merge moves no live slice");
  cr_assert_eq(m[3].slice, 3);
  cr_assert_null(weft_mm_find(e.mm, &m[2]));
  cr_assert_eq(resolve_ok(e.mm, &m[2]), p[2], "the bytes did not move");
  cr_assert_eq(resolve_ok(e.mm, &m[3]), p[3]);
  cr_assert_eq(report_at(e.mm, 0).pages, 2, "both pages hold live slices");
  weft_mm_free(e.mm, &m[2]);
  weft_mm_free(e.mm, &m[3]);
  weft_mm_cleanup(e.mm); /* the first page is free and goes: the second moves down one */
  cr_assert_eq(report_at(e.mm, 0).pages, 1);
  cr_assert_eq(far.page, 0, "the location lives in the descriptor and was rewritten");
  cr_assert_eq(far.slice, 0);
  cr_assert_null(weft_mm_find(e.mm, &far));
  cr_assert_eq(resolve_ok(e.mm, &far), pfar, "the bytes did not move");
  EXPECT_USAGE(e.mm, 1, 4096, 0, 4096, "one live");
  for (int i = 0; i < 4; i++) EXPECT_KIND(weft_mm_find(e.mm, &m[i]), WEFT_ERR_NOT_FOUND);
  weft_mm_free(e.mm, &far);
  mm_close(&e);
}

/* ---- acceptance ------------------------------------------------------------------------------ */

Test(sliced, an_uncapped_pool_also_takes_sizes_within_a_fifth_of_its_page) {
  weft_pool_config pools[] = {sliced_pool(MIB, 64 * KIB, 0), sliced_pool(16 * MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem near, far;
  reserve_ok(e.mm, &near, 900 * KIB); /* (1 MiB - 900 KiB) * 5 < 1 MiB */
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1, "near-page size taken by pool 0");
  reserve_ok(e.mm, &far, 700 * KIB); /* (1 MiB - 700 KiB) * 5 >= 1 MiB */
  cr_assert_eq(report_at(e.mm, 1).usage.number_allocs, 1, "a far size goes on");
  EXPECT_USAGE(e.mm, 2, 1600 * KIB, 0, 17 * MIB, "one page each");
  weft_mm_free(e.mm, &near);
  weft_mm_free(e.mm, &far);
  mm_close(&e);
}

Test(sliced, a_strict_pool_takes_nothing_above_its_max_slice) {
  weft_pool_config pools[] = {strict_sliced_pool(MIB, 64 * KIB, 0), sliced_pool(16 * MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem near, tiny;
  reserve_ok(e.mm, &near, 900 * KIB);
  cr_assert_eq(report_at(e.mm, 0).pages, 0, "strict: no near-page acceptance");
  cr_assert_eq(report_at(e.mm, 1).usage.number_allocs, 1);
  reserve_ok(e.mm, &tiny, 64 * KIB);
  cr_assert_eq(report_at(e.mm, 0).usage.number_allocs, 1, "up to the max slice it serves");
  weft_mm_free(e.mm, &near);
  weft_mm_free(e.mm, &tiny);
  mm_close(&e);
}

Test(sliced, a_size_no_pool_accepts_is_buffer_too_big) {
  weft_pool_config pools[] = {strict_sliced_pool(MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem m;
  weft_status st = reserve_mode(e.mm, &m, 2 * MIB, WEFT_RESERVE_ALLOW);
  expect_kind_of(st, WEFT_ERR_BUFFER_TOO_BIG, "2 MiB in a 1 MiB pool");
  cr_assert_eq(weft_error_size(st), 2 * MIB, "the error carries the requested size");
  cr_assert_not(weft_error_may_succeed_after_reclaim(st));
  weft_error_free(st);
  cr_assert_not(weft_mem_is_placed(&m));
  cr_assert_eq(alloc_calls(&e), 0);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "nothing reserved");
  mm_close(&e);
}

Test(sliced, a_storage_refusal_is_out_of_memory_and_places_nothing) {
  weft_pool_config pools[] = {sliced_pool(MIB, 0, 0)};
  weft_mm_config cfg = mm_config(custom_layout(pools, 1), GIB);
  mm_env e;
  mm_open_cfg(&e, &cfg, MIB); /* the storage holds one page */
  weft_mem a, b;
  reserve_ok(e.mm, &a, 600 * KIB);
  weft_status st = reserve_mode(e.mm, &b, 600 * KIB, WEFT_RESERVE_ALLOW);
  expect_kind_of(st, WEFT_ERR_OUT_OF_MEMORY, "a second page past the storage capacity");
  cr_assert(weft_error_may_succeed_after_reclaim(st));
  weft_error_free(st);
  cr_assert_not(weft_mem_is_placed(&b));
  EXPECT_USAGE(e.mm, 1, 600 * KIB, 0, MIB, "unchanged by the refusal");
  cr_assert_eq(report_at(e.mm, 0).pages, 1);
  weft_mm_free(e.mm, &a);
  reserve_ok(e.mm, &b, 600 * KIB); /* the freed room serves it */
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

/* ---- caps
 * ---------------------------------------------------------------------------------------- */

/* weft reports the reference's PoolCapacityExceeded{size, capacity} as
 * OutOfMemory{size} whose message names the capacity. */
static void expect_capacity_error(weft_status st, uint64_t size, uint64_t capacity) {
  expect_kind_of(st, WEFT_ERR_OUT_OF_MEMORY, "a full capped pool");
  cr_assert_eq(weft_error_size(st), size, "the error carries the requested size (%" PRIu64 ")",
               weft_error_size(st));
  char cap[32];
  snprintf(cap, sizeof cap, "%" PRIu64, capacity);
  cr_assert_not_null(strstr(weft_error_message(st), cap), "message '%s' does not name the cap %s",
                     weft_error_message(st), cap);
  weft_error_free(st);
}

Test(sliced, a_capped_pool_errors_instead_of_growing) {
  weft_pool_config pools[] = {sliced_pool(1024, 1024, 2048)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &b, 1024);
  EXPECT_USAGE(e.mm, 2, 2048, 0, 2048, "the cap reached");
  expect_capacity_error(reserve_mode(e.mm, &c, 1024, WEFT_RESERVE_ALLOW), 1024, 2048);
  cr_assert_not(weft_mem_is_placed(&c));
  EXPECT_USAGE(e.mm, 2, 2048, 0, 2048, "a failed reservation must not grow the pool");
  cr_assert_eq(alloc_calls(&e), 2);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 2);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

Test(sliced, a_capped_pool_reuses_freed_memory) {
  weft_pool_config pools[] = {sliced_pool(1024, 1024, 2048)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &b, 1024);
  weft_mm_free(e.mm, &a);
  reserve_ok(e.mm, &c, 1024); /* the capacity error is transient */
  EXPECT_USAGE(e.mm, 2, 2048, 0, 2048, "c reused a's page");
  cr_assert_eq(alloc_calls(&e), 2);
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

Test(sliced, a_capped_pool_cleanup_still_frees_and_the_cap_holds_after) {
  weft_pool_config pools[] = {sliced_pool(1024, 1024, 2048)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c;
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &b, 1024);
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  EXPECT_USAGE(e.mm, 0, 0, 0, 2048, "freed but held: sliced pools only release on cleanup");
  weft_mm_cleanup(e.mm);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "cleanup released both pages");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 0);
  reserve_ok(e.mm, &a, 1024);
  reserve_ok(e.mm, &b, 1024);
  expect_capacity_error(reserve_mode(e.mm, &c, 1024, WEFT_RESERVE_ALLOW), 1024, 2048);
  EXPECT_USAGE(e.mm, 2, 2048, 0, 2048, "the cap still holds after the pool shrank and regrew");
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  mm_close(&e);
}

/* A cap below the page size: the reference's SlicedPool shrinks the page to
 * the cap, while its Custom-layout resolution refuses cap < page. weft has one
 * entry point (weft_mm_create), so either behaviour is acceptable here as long
 * as the cap is never overshot; test_layout.c checks the refusal itself. */
Test(sliced, a_cap_smaller_than_the_page_is_never_overshot) {
  weft_pool_config pools[] = {sliced_pool(2048, 2048, 512)};
  weft_mm_config cfg = mm_config(custom_layout(pools, 1), GIB);
  mm_env e;
  env_storage(&e, 0);
  weft_status st = weft_mm_create(&cfg, e.storage, env_alloc(), &e.mm);
  if (st) {
    expect_kind_of(st, WEFT_ERR_INVALID_ARGUMENT, "a cap below the page");
    weft_error_free(st);
    cr_assert_null(e.mm);
    cr_log_info("cap < page refused at create (Custom validation): nothing to shrink");
    mm_close(&e);
    return;
  }
  weft_mem small, large;
  reserve_ok(e.mm, &small, 256);
  cr_assert_leq(weft_mm_usage(e.mm).bytes_reserved, 512);
  cr_assert_eq(report_at(e.mm, 0).page_size, 512, "the page shrank to the cap");
  weft_status big = reserve_mode(e.mm, &large, 1024, WEFT_RESERVE_ALLOW);
  cr_assert_not_null(big, "larger than the shrunk page: refused");
  weft_error_free(big);
  cr_assert_leq(weft_mm_usage(e.mm).bytes_reserved, 512);
  weft_mm_free(e.mm, &small);
  mm_close(&e);
}

Test(sliced, a_cap_below_the_alignment_never_overshoots) {
  weft_pool_config pools[] = {sliced_pool(1024, 1024, 16)};
  weft_mm_config cfg = mm_config(custom_layout(pools, 1), GIB);
  mm_env e;
  env_storage(&e, 0);
  weft_status st = weft_mm_create(&cfg, e.storage, env_alloc(), &e.mm);
  if (st) {
    expect_kind_of(st, WEFT_ERR_INVALID_ARGUMENT, "a cap below the alignment");
    weft_error_free(st);
    cr_log_info("cap < page refused at create (Custom validation)");
    mm_close(&e);
    return;
  }
  weft_mem m;
  EXPECT_KIND(reserve_mode(e.mm, &m, 8, WEFT_RESERVE_ALLOW), WEFT_ERR_OUT_OF_MEMORY);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "nothing reserved");
  cr_assert_eq(alloc_calls(&e), 0);
  mm_close(&e);
}

Test(sliced, a_capped_pool_is_a_hard_budget_when_nothing_follows_it) {
  weft_pool_config pools[] = {sliced_pool(MIB, 0, 2 * MIB)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem small, large, fill1, fill2, over;
  /* Vastly different sizes share the same arena. */
  reserve_ok(e.mm, &small, 4096);
  weft_mm_free(e.mm, &small);
  reserve_ok(e.mm, &large, 512 * KIB);
  EXPECT_USAGE(e.mm, 1, 512 * KIB, 0, MIB, "one page");
  reserve_ok(e.mm, &fill1, MIB);
  reserve_ok(e.mm, &fill2, 500 * KIB);
  EXPECT_USAGE(e.mm, 3, 2036 * KIB, 0, 2 * MIB, "the budget filled");
  expect_capacity_error(reserve_mode(e.mm, &over, MIB, WEFT_RESERVE_ALLOW), MIB, 2 * MIB);
  EXPECT_USAGE(e.mm, 3, 2036 * KIB, 0, 2 * MIB, "the budget held");
  weft_mm_free(e.mm, &large);
  weft_mm_free(e.mm, &fill1);
  weft_mm_free(e.mm, &fill2);
  mm_close(&e);
}

Test(sliced, a_capped_pool_ignores_near_page_sizes_above_its_max_slice) {
  weft_pool_config pools[] = {sliced_pool(MIB, 64 * KIB, 2 * MIB),
                              sliced_pool(16 * MIB, 0, 32 * MIB)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem strays[4], tiny;
  for (int i = 0; i < 4; i++) reserve_ok(e.mm, &strays[i], MIB);
  EXPECT_USAGE(e.mm, 4, 4 * MIB, 0, 16 * MIB, "strays land in the arena, not the capped pool");
  cr_assert_eq(report_at(e.mm, 0).pages, 0);
  reserve_ok(e.mm, &tiny, 4096);
  EXPECT_USAGE(e.mm, 5, 4 * MIB + 4096, 0, 17 * MIB, "small allocations still go to pool 0");
  cr_assert_eq(report_at(e.mm, 0).pages, 1);
  for (int i = 0; i < 4; i++) weft_mm_free(e.mm, &strays[i]);
  weft_mm_free(e.mm, &tiny);
  mm_close(&e);
}

Test(sliced, a_full_capped_pool_spills_to_the_next_accepting_pool) {
  weft_pool_config pools[] = {sliced_pool(1024, 1024, 1024), sliced_pool(1024, 1024, 0)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem fill, overflow;
  reserve_ok(e.mm, &fill, 1024);
  reserve_ok(e.mm, &overflow, 1024);
  EXPECT_USAGE(e.mm, 2, 2048, 0, 2048, "the overflow landed in the later pool");
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 1, "the cap held");
  cr_assert_eq(report_at(e.mm, 1).pages_peak, 1, "the tail caught the spill");
  weft_mm_free(e.mm, &fill);
  weft_mm_free(e.mm, &overflow);
  mm_close(&e);
}

Test(sliced, a_full_measured_arena_spills_to_a_growable_tail) {
  weft_pool_config pools[] = {sliced_pool(MIB, 0, MIB), sliced_pool(4 * MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 2);
  weft_mem planned, off_plan;
  reserve_ok(e.mm, &planned, MIB);
  reserve_ok(e.mm, &off_plan, MIB);
  cr_assert_eq(report_at(e.mm, 0).pages_peak, 1, "the arena stayed capped");
  cr_assert_eq(report_at(e.mm, 1).pages_peak, 1, "the tail caught the spill");
  EXPECT_USAGE(e.mm, 2, 2 * MIB, 0, 5 * MIB, "1 MiB arena page + 4 MiB tail page");
  weft_mm_free(e.mm, &planned);
  weft_mm_free(e.mm, &off_plan);
  mm_close(&e);
}

/* ---- placement cost against live allocations (issue 12, item 18) -------------------------------
 */

enum { COST_LIVE = 40000, COST_CYCLES = 1000 };

/* Slices read per reserve + free of |size| bytes, averaged over COST_CYCLES. */
static double visits_per_cycle(weft_mm *mm, uint64_t size) {
  uint64_t v0 = weft_mm_slice_visits(mm);
  for (int i = 0; i < COST_CYCLES; i++) {
    weft_mem m;
    reserve_ok(mm, &m, size);
    weft_mm_free(mm, &m);
  }
  return (double)(weft_mm_slice_visits(mm) - v0) / COST_CYCLES;
}

Test(sliced, a_reservation_reads_a_bounded_number_of_slices_however_many_are_live) {
  /* 1 MiB pages of 64-byte slices: 40000 live allocations fill two pages
   * and part of a third (16384 slices a page). */
  const weft_pool_config pools[] = {sliced_pool(MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  static weft_mem live[COST_LIVE];
  for (int i = 0; i < COST_LIVE; i++) reserve_ok(e.mm, &live[i], 64);
  cr_assert_eq(report_at(e.mm, 0).pages, 3);

  /* Churn at the end of the live slices, same size and another size. */
  double same = visits_per_cycle(e.mm, 64), other = visits_per_cycle(e.mm, 100);
  cr_assert_leq(same, 16.0, "a 64 B reserve + free read %.1f slices with %d live", same, COST_LIVE);
  cr_assert_leq(other, 16.0, "a 100 B reserve + free read %.1f slices with %d live", other,
                COST_LIVE);

  /* A hole in the first page: first fit still takes it, at the same cost. */
  weft_mm_free(e.mm, &live[5]);
  reserve_ok(e.mm, &live[5], 64);
  cr_assert_eq(live[5].page, 0, "first fit takes the hole on the first page");
  cr_assert_eq(live[5].slice, 5);
  weft_mm_free(e.mm, &live[20000]); /* a hole on the second page */
  double hole = visits_per_cycle(e.mm, 64);
  cr_assert_leq(hole, 16.0, "reusing a hole read %.1f slices per cycle", hole);
  reserve_ok(e.mm, &live[20000], 64);
  cr_assert_eq(live[20000].page, 1, "the hole on the second page is refilled");
  cr_assert_eq(live[20000].slice, 20000 - 16384);
  EXPECT_USAGE(e.mm, COST_LIVE, COST_LIVE * 64, 0, 3 * MIB, "every live allocation is back");

  for (int i = 0; i < COST_LIVE; i++) weft_mm_free(e.mm, &live[i]);
  weft_mm_cleanup(e.mm);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "a cleanup returns every page");
  mm_close(&e);
}
