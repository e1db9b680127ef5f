/* The default (SUBSLICES) layout's ladder: up to 16 GiB its rungs (page and
 * largest slice) are the ones it always had; beyond, no rung's largest slice
 * falls below a 32nd of its page (issue 12, item 29: at 2^58 bytes the
 * smallest rung took slices of at most 128 bytes, and a 177-byte buffer
 * landed in a 64 MiB page), every rung serves sizes no smaller rung takes,
 * and the ladder stays short. Routing runs in dry runs: nothing is backed. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"
#include "memory/mm_internal.h"
#include "mm_test_util.h"

TestSuite(default_ladder, .timeout = 60, .fini = mm_fini);

typedef struct rung {
  uint64_t page, max_slice;
} rung;

/* The sliced rungs of a SUBSLICES manager, smallest first; checks the frame
 * around them (the zero-size exclusive pool first, the exclusive tail of
 * max_page last). */
static uint32_t rungs_of(const weft_mm *mm, rung *out, uint32_t cap) {
  cr_assert_geq(mm->ndynamic, 2);
  cr_assert_eq(mm->dynamic[0]->cfg.kind, WEFT_POOL_EXCLUSIVE);
  cr_assert_eq(mm->dynamic[0]->cfg.max_alloc_size, 0);
  const weft_pool *tail = mm->dynamic[mm->ndynamic - 1];
  cr_assert_eq(tail->cfg.kind, WEFT_POOL_EXCLUSIVE);
  cr_assert_eq(tail->cfg.max_alloc_size, mm->max_page / ALIGN * ALIGN);
  uint32_t k = 0;
  for (uint32_t i = 1; i + 1 < mm->ndynamic; i++) {
    const weft_pool *p = mm->dynamic[i];
    cr_assert_eq(p->cfg.kind, WEFT_POOL_SLICED, "pool %u", i);
    cr_assert_lt(k, cap);
    out[k++] = (rung){p->cfg.page_size, p->cfg.max_slice_size};
  }
  return k;
}

/* The ladder as it has always been built: pages max_page/4, /16, ... while
 * the previous one was at least 32 MiB (each rounded up to the alignment),
 * the largest page's slices half a page, each smaller rung's halved again. */
static uint32_t reference_rungs(uint64_t max_page, rung *out) {
  uint64_t pages[32];
  uint32_t k = 0;
  for (uint64_t c = max_page; c >= 32 * MIB && k < 32;) {
    c = align_up(c / 4);
    pages[k++] = c;
  }
  for (uint32_t j = 0; j < k; j++) out[k - 1 - j] = (rung){pages[j], pages[j] >> (j + 1)};
  return k;
}

static void open_subslices(mm_env *e, uint64_t max_page) {
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_SUBSLICES), max_page);
  mm_open_cfg(e, &cfg, 0);
}

Test(default_ladder, up_to_16_gib_the_rungs_are_unchanged) {
  /* 4 GiB (the uncapped default) and 16 GiB, spelled out. */
  static const rung four[] = {
      {16 * MIB, MIB}, {64 * MIB, 8 * MIB}, {256 * MIB, 64 * MIB}, {GIB, 512 * MIB}};
  static const rung sixteen[] = {{16 * MIB, 512 * KIB},
                                 {64 * MIB, 4 * MIB},
                                 {256 * MIB, 32 * MIB},
                                 {GIB, 256 * MIB},
                                 {4 * GIB, 2 * GIB}};
  rung got[32];
  mm_env e;
  open_subslices(&e, 4 * GIB);
  cr_assert_eq(rungs_of(e.mm, got, 32), 4);
  for (size_t i = 0; i < 4; i++) {
    cr_assert_eq(got[i].page, four[i].page, "4 GiB, rung %zu", i);
    cr_assert_eq(got[i].max_slice, four[i].max_slice, "4 GiB, rung %zu", i);
  }
  mm_close(&e);
  open_subslices(&e, 16 * GIB);
  cr_assert_eq(rungs_of(e.mm, got, 32), 5);
  for (size_t i = 0; i < 5; i++) {
    cr_assert_eq(got[i].page, sixteen[i].page, "16 GiB, rung %zu", i);
    cr_assert_eq(got[i].max_slice, sixteen[i].max_slice, "16 GiB, rung %zu", i);
  }
  mm_close(&e);

  /* And every capacity from 128 MiB to 16 GiB, odd ones included. */
  static const uint64_t caps[] = {128 * MIB,     100 * MIB + 7, GIB,     GIB + 4097,
                                  3 * GIB - 1,   4 * GIB,       5 * GIB, 10 * GIB + 12345,
                                  16 * GIB - 64, 16 * GIB};
  for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
    rung want[32];
    uint32_t k = reference_rungs(caps[c], want);
    open_subslices(&e, caps[c]);
    cr_assert_eq(rungs_of(e.mm, got, 32), k, "max_page %" PRIu64, caps[c]);
    for (uint32_t i = 0; i < k; i++) {
      cr_assert_eq(got[i].page, want[i].page, "max_page %" PRIu64 ", rung %u", caps[c], i);
      cr_assert_eq(got[i].max_slice, want[i].max_slice, "max_page %" PRIu64 ", rung %u", caps[c],
                   i);
    }
    mm_close(&e);
  }
}

Test(default_ladder, on_large_devices_every_rung_is_reachable_and_takes_a_32nd_of_its_page) {
  static const uint64_t caps[] = {
      16 * GIB + 64,     UINT64_C(1) << 36, UINT64_C(141) * 1000 * 1000 * 1000, /* an H200 */
      UINT64_C(1) << 40, UINT64_C(1) << 50, (UINT64_C(1) << 58) + 12345,
      UINT64_C(1) << 58, UINT64_C(1) << 62, UINT64_MAX};
  for (size_t c = 0; c < sizeof caps / sizeof caps[0]; c++) {
    mm_env e;
    open_subslices(&e, caps[c]);
    rung r[32];
    uint32_t k = rungs_of(e.mm, r, 32);
    /* One rung per factor of 4 from a page below 32 MiB to max_page / 4:
     * 20 at most for a 64-bit capacity. */
    cr_assert_leq(k, 20, "max_page %" PRIu64 ": %u rungs", caps[c], k);
    cr_assert_geq(k, 5);
    cr_assert_lt(r[0].page, 32 * MIB, "max_page %" PRIu64, caps[c]);
    cr_assert_eq(r[k - 1].page, align_up(caps[c] / 4));
    for (uint32_t i = 0; i < k; i++) {
      cr_assert_leq(r[i].max_slice, r[i].page / 2);
      cr_assert_geq(r[i].max_slice, r[i].page / 32,
                    "max_page %" PRIu64 ", rung %u: page %" PRIu64 ", largest slice %" PRIu64,
                    caps[c], i, r[i].page, r[i].max_slice);
      if (i) {
        cr_assert(r[i - 1].page >= r[i].page / 4 && r[i - 1].page <= r[i].page / 4 + ALIGN,
                  "max_page %" PRIu64 ": rung %u is not a quarter of rung %u", caps[c], i - 1, i);
        cr_assert_gt(r[i].max_slice, r[i - 1].max_slice, "max_page %" PRIu64 ": rung %u", caps[c],
                     i);
      }
    }
    cr_assert_null(weft_mm_validate(e.mm));

    /* Each rung serves the sizes between the rung below's largest slice and
     * its own (the midpoint is never within a fifth of a smaller page). */
    weft_mm_set_dry_run(e.mm, true);
    for (uint32_t i = 0; i < k; i++) {
      uint64_t size = i ? r[i - 1].max_slice + (r[i].max_slice - r[i - 1].max_slice) / 2 : 1;
      weft_mem m;
      reserve_ok(e.mm, &m, size);
      cr_assert_eq(m.pool, e.mm->dynamic[1 + i],
                   "max_page %" PRIu64 ": %" PRIu64 " bytes belong to rung %u (page %" PRIu64 ")",
                   caps[c], size, i, r[i].page);
      weft_mm_free(e.mm, &m);
    }
    weft_mm_cleanup(e.mm);
    weft_mm_set_dry_run(e.mm, false);
    cr_assert_eq(alloc_calls(&e), 0, "dry run: nothing backed");
    mm_close(&e);
  }
}
