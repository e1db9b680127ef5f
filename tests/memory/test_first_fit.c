/* Sliced pools' placement structure (memory/pool.c): a max-tree over the
 * pages and, per page, a treap of free slices by offset. The tests pin what
 * it must keep from the scan it replaced and its edge cases:
 *
 * - placement is exactly first fit (lowest page, then lowest offset), checked
 *   against a plain reference model over random reserves, frees, guards and
 *   cleanups, and a dry run places everything where a real run does;
 * - exact fits, one byte past a fit, a slice of a whole page, merging with
 *   free neighbours on both sides, zero-size and impossible sizes;
 * - the slices read per reservation grow with the log of the free fragments,
 *   not with the live allocations or the fragments themselves. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/pool.h"
#include "mm_test_util.h"

TestSuite(first_fit, .timeout = 60, .fini = mm_fini);

/* The offset of |m|'s slice in its page. */
static uint64_t offset_of(const weft_mem *m) {
  weft_page *pg;
  weft_slice *sl = weft_pool_find(m->pool, m, &pg);
  cr_assert_not_null(sl, "a live descriptor is found in its pool");
  return sl->offset;
}

static void expect_valid(const weft_mm *mm, const char *what) {
  weft_status st = weft_mm_validate(mm);
  if (st) {
    char buf[1024];
    describe(st, buf, sizeof buf);
    weft_error_free(st);
    cr_assert_fail("%s: weft_mm_validate: %s", what, buf);
  }
}

static uint64_t splitmix(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

/* ---- the reference model: first fit over plain arrays ------------------------------------- */

#define MODEL_PAGES   64
#define MODEL_EXTENTS 512
#define MODEL_SLOTS   160
#define MODEL_FREE    (-1)

typedef struct extent {
  uint64_t off, cap;
  int owner; /* a slot, or MODEL_FREE */
} extent;

typedef struct model_page {
  extent x[MODEL_EXTENTS];
  uint32_t n;
  uint32_t guards;
} model_page;

typedef struct model {
  uint64_t page_size;
  model_page *pages; /* [MODEL_PAGES] */
  uint32_t npages;
} model;

/* Where slot |slot| lives in the model: its page, and its extent index. */
static bool model_find(const model *md, int slot, uint32_t *page, uint32_t *k) {
  for (uint32_t i = 0; i < md->npages; i++)
    for (uint32_t j = 0; j < md->pages[i].n; j++)
      if (md->pages[i].x[j].owner == slot) {
        *page = i;
        *k = j;
        return true;
      }
  return false;
}

static void model_remove(model_page *pg, uint32_t k) {
  memmove(&pg->x[k], &pg->x[k + 1], (pg->n - k - 1) * sizeof(extent));
  pg->n--;
}

static void model_insert(model_page *pg, uint32_t k, extent e) {
  cr_assert_lt(pg->n, MODEL_EXTENTS, "the model's page is full of extents");
  memmove(&pg->x[k + 1], &pg->x[k], (pg->n - k) * sizeof(extent));
  pg->x[k] = e;
  pg->n++;
}

/* First fit for |eff| bytes: the page and offset it lands at. */
static void model_reserve(model *md, int slot, uint64_t eff, uint32_t *page, uint64_t *off) {
  for (uint32_t i = 0; i < md->npages; i++) {
    model_page *pg = &md->pages[i];
    if (pg->guards) continue;
    for (uint32_t j = 0; j < pg->n; j++) {
      extent *e = &pg->x[j];
      if (e->owner != MODEL_FREE || e->cap < eff) continue;
      uint64_t rest = e->cap - eff;
      e->owner = slot;
      e->cap = eff;
      if (rest) model_insert(pg, j + 1, (extent){e->off + eff, rest, MODEL_FREE});
      *page = i;
      *off = pg->x[j].off;
      return;
    }
  }
  cr_assert_lt(md->npages, MODEL_PAGES, "the model ran out of pages");
  model_page *pg = &md->pages[md->npages];
  memset(pg, 0, sizeof *pg);
  pg->x[0] = (extent){0, md->page_size, MODEL_FREE};
  pg->n = 1;
  md->npages++;
  model_reserve(md, slot, eff, page, off);
}

/* Frees |slot|: merges with free neighbours; an empty free extent goes. */
static void model_free(model *md, int slot) {
  uint32_t i, k;
  cr_assert(model_find(md, slot, &i, &k));
  model_page *pg = &md->pages[i];
  pg->x[k].owner = MODEL_FREE;
  if (k + 1 < pg->n && pg->x[k + 1].owner == MODEL_FREE) {
    pg->x[k].cap += pg->x[k + 1].cap;
    model_remove(pg, k + 1);
  }
  if (k > 0 && pg->x[k - 1].owner == MODEL_FREE) {
    pg->x[k - 1].cap += pg->x[k].cap;
    model_remove(pg, k);
  } else if (pg->x[k].cap == 0) {
    model_remove(pg, k);
  }
}

/* An explicit cleanup: every free, unguarded page goes; later pages move down. */
static void model_cleanup(model *md) {
  for (uint32_t i = md->npages; i-- > 0;) {
    model_page *pg = &md->pages[i];
    if (pg->guards || pg->n != 1 || pg->x[0].owner != MODEL_FREE) continue;
    memmove(&md->pages[i], &md->pages[i + 1], (md->npages - i - 1) * sizeof(model_page));
    md->npages--;
  }
}

static uint64_t model_largest_free(const model *md) {
  uint64_t best = 0;
  for (uint32_t i = 0; i < md->npages; i++)
    for (uint32_t j = 0; j < md->pages[i].n; j++)
      if (md->pages[i].x[j].owner == MODEL_FREE && md->pages[i].x[j].cap > best)
        best = md->pages[i].x[j].cap;
  return best;
}

/* Random reserves (sizes 0 .. a quarter page, most small), frees, guards and
 * cleanups against the model; after every step the placement, the page
 * count, the largest free extent and the invariants agree. */
static void run_against_model(uint64_t seed, uint32_t steps) {
  const uint64_t page = 64 * KIB;
  weft_pool_config pools[] = {sliced_pool(page, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  model md = {.page_size = page, .pages = calloc(MODEL_PAGES, sizeof(model_page))};
  cr_assert_not_null(md.pages);
  weft_mem m[MODEL_SLOTS];
  bool live[MODEL_SLOTS] = {false}, guarded[MODEL_SLOTS] = {false};
  uint64_t s = seed;
  for (uint32_t step = 0; step < steps; step++) {
    int slot = (int)(splitmix(&s) % MODEL_SLOTS);
    uint32_t op = (uint32_t)(splitmix(&s) % 100);
    if (op < 2) {
      weft_mm_cleanup(e.mm);
      model_cleanup(&md);
    } else if (op < 6 && live[slot]) { /* toggle a guard */
      uint32_t i, k;
      cr_assert(model_find(&md, slot, &i, &k));
      if (guarded[slot]) {
        weft_mm_unguard(e.mm, &m[slot]);
        md.pages[i].guards--;
      } else {
        weft_mm_guard(e.mm, &m[slot]);
        md.pages[i].guards++;
      }
      guarded[slot] = !guarded[slot];
    } else if (live[slot]) {
      if (guarded[slot]) { /* a guard goes with its allocation */
        uint32_t i, k;
        cr_assert(model_find(&md, slot, &i, &k));
        weft_mm_unguard(e.mm, &m[slot]);
        md.pages[i].guards--;
        guarded[slot] = false;
      }
      weft_mm_free(e.mm, &m[slot]);
      model_free(&md, slot);
      live[slot] = false;
    } else {
      uint64_t r = splitmix(&s);
      uint64_t size = r % 16 == 0 ? 0 : r % 4 == 0 ? r % (page / 4) : 1 + r % 2048;
      reserve_ok(e.mm, &m[slot], size);
      uint32_t want_page;
      uint64_t want_off;
      model_reserve(&md, slot, align_up(size), &want_page, &want_off);
      cr_assert(m[slot].page == want_page && offset_of(&m[slot]) == want_off,
                "step %" PRIu32 " (seed %" PRIu64 "): %" PRIu64 " B landed at page %" PRIu32
                " offset %" PRIu64 ", first fit is page %" PRIu32 " offset %" PRIu64,
                step, seed, size, m[slot].page, offset_of(&m[slot]), want_page, want_off);
      live[slot] = true;
    }
    cr_assert_eq(report_at(e.mm, 0).pages, md.npages, "step %" PRIu32 ": page count", step);
    cr_assert_eq(weft_mm_largest_free(e.mm), model_largest_free(&md),
                 "step %" PRIu32 ": largest free extent", step);
    if (step % 16 == 0) expect_valid(e.mm, "random step");
  }
  for (int i = 0; i < MODEL_SLOTS; i++) {
    if (guarded[i]) weft_mm_unguard(e.mm, &m[i]);
    if (live[i]) weft_mm_free(e.mm, &m[i]);
  }
  weft_mm_cleanup(e.mm);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "all released");
  free(md.pages);
  mm_close(&e);
}

Test(first_fit, random_reserves_frees_guards_and_cleanups_land_where_a_reference_first_fit_does) {
  run_against_model(1, 4000);
  run_against_model(0xC0FFEE, 4000);
  run_against_model(UINT64_C(0x5EED5EED5EED), 4000);
}

/* ---- dry runs ---------------------------------------------------------------------------- */

Test(first_fit, a_dry_run_places_every_reservation_where_a_real_run_does) {
  const weft_pool_config pools[] = {sliced_pool(256 * KIB, 0, 0), sliced_pool(4 * MIB, 0, 0)};
  mm_env real;
  mm_open(&real, pools, 2);
  weft_mm *rm = real.mm, *dm = NULL;
  weft_mm_config cfg = mm_config(custom_layout(pools, 2), GIB);
  EXPECT_OK(weft_mm_create(&cfg, real.storage, env_alloc(), &dm)); /* same storage and allocator */
  weft_mm_set_dry_run(dm, true);
  uint64_t calls0 = alloc_calls(&real);
  enum { SLOTS = 96, STEPS = 3000 };
  weft_mem a[SLOTS], b[SLOTS];
  bool live[SLOTS] = {false};
  uint64_t s = 42;
  for (int step = 0; step < STEPS; step++) {
    int i = (int)(splitmix(&s) % SLOTS);
    if (live[i]) {
      weft_mm_free(rm, &a[i]);
      weft_mm_free(dm, &b[i]);
      live[i] = false;
      continue;
    }
    uint64_t size = 1 + splitmix(&s) % (splitmix(&s) % 8 == 0 ? 3 * MIB : 16 * KIB);
    reserve_ok(rm, &a[i], size);
    reserve_ok(dm, &b[i], size);
    live[i] = true;
    cr_assert(a[i].page == b[i].page && a[i].slice == b[i].slice &&
                  offset_of(&a[i]) == offset_of(&b[i]),
              "step %d: %" PRIu64 " B: real (page %" PRIu32 ", slice %" PRIu32
              ") but dry (page %" PRIu32 ", slice %" PRIu32 ")",
              step, size, a[i].page, a[i].slice, b[i].page, b[i].slice);
    cr_assert_eq(weft_pool_find(a[i].pool, &a[i], NULL) != NULL, true);
  }
  for (size_t p = 0; p < 2; p++) {
    weft_pool_report x = report_at(rm, p), y = report_at(dm, p);
    cr_assert(x.pages == y.pages && x.pages_peak == y.pages_peak && y.pages_unmapped == y.pages,
              "pool %zu: real %" PRIu64 " pages (peak %" PRIu64 "), dry %" PRIu64 " (peak %" PRIu64
              ", %" PRIu64 " unmapped)",
              p, x.pages, x.pages_peak, y.pages, y.pages_peak, y.pages_unmapped);
  }
  cr_assert_eq(weft_mm_storage_allocs(dm), 0, "a dry run backs no page until one is resolved");
  cr_assert_eq(alloc_calls(&real) - calls0, weft_mm_storage_allocs(rm),
               "only the real manager called the storage");
  for (int i = 0; i < SLOTS; i++)
    if (live[i]) {
      weft_mm_free(rm, &a[i]);
      weft_mm_free(dm, &b[i]);
    }
  expect_valid(dm, "the dry run");
  weft_mm_destroy(dm);
  mm_close(&real);
}

/* ---- edge cases -------------------------------------------------------------------------- */

Test(first_fit, an_exact_fit_takes_the_hole_and_one_byte_more_goes_past_it) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c, d, f;
  reserve_ok(e.mm, &a, 64);
  reserve_ok(e.mm, &b, 64);
  reserve_ok(e.mm, &c, 64);
  weft_mm_free(e.mm, &b);   /* a 64-byte hole at 64 */
  reserve_ok(e.mm, &d, 65); /* 128 effective: not in the hole */
  cr_assert_eq(offset_of(&d), 192, "one byte past the hole's capacity goes to the tail");
  reserve_ok(e.mm, &f, 64);
  cr_assert_eq(offset_of(&f), 64, "an exact fit takes the hole");
  cr_assert_eq(f.slice, b.slice, "the whole free slice becomes the allocation");
  cr_assert_eq(weft_mm_largest_free(e.mm), 4096 - 320);
  /* The tail exactly: the page is full, the next byte adds a page. */
  weft_mem tail, more;
  reserve_ok(e.mm, &tail, 4096 - 320);
  cr_assert_eq(offset_of(&tail), 320);
  cr_assert_eq(weft_mm_largest_free(e.mm), 0, "no free slice is left");
  cr_assert_eq(report_at(e.mm, 0).pages, 1);
  reserve_ok(e.mm, &more, 1);
  cr_assert(more.page == 1 && offset_of(&more) == 0, "a full page serves nothing: a new page");
  EXPECT_USAGE(e.mm, 6, 64 + 64 + 65 + 64 + 4096 - 320 + 1, 63 + 63, 8192, "six live");
  weft_mem *all[] = {&a, &c, &d, &f, &tail, &more};
  for (size_t i = 0; i < 6; i++) weft_mm_free(e.mm, all[i]);
  mm_close(&e);
}

Test(first_fit, freeing_a_slice_between_two_free_neighbours_merges_all_three) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, b, c, z;
  reserve_ok(e.mm, &a, 1000); /* 1024 */
  reserve_ok(e.mm, &b, 1000);
  reserve_ok(e.mm, &c, 1000); /* the tail (1024 free) follows */
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &c); /* merges with the tail on its right */
  cr_assert_eq(weft_mm_largest_free(e.mm), 2048);
  cr_assert_eq(weft_mm_free_bytes(e.mm), 3072);
  expect_valid(e.mm, "a and c freed");
  weft_mm_free(e.mm, &b); /* free on both sides: one slice covers the page */
  cr_assert_eq(weft_mm_largest_free(e.mm), 4096, "a, b, c and the tail merged");
  expect_valid(e.mm, "b freed");
  uint64_t calls = alloc_calls(&e);
  reserve_ok(e.mm, &z, 4096);
  cr_assert(z.page == 0 && offset_of(&z) == 0, "the merged page serves a whole page");
  cr_assert_eq(alloc_calls(&e), calls, "no storage was needed");
  weft_mm_free(e.mm, &z);
  weft_mm_cleanup(e.mm);
  cr_assert_eq(report_at(e.mm, 0).pages, 0, "the free page goes at a cleanup");
  mm_close(&e);
}

Test(first_fit, a_slice_of_exactly_a_page_leaves_no_free_slice_and_is_reused_whole) {
  weft_pool_config pools[] = {sliced_pool(MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem whole, small, again;
  reserve_ok(e.mm, &whole, MIB);
  cr_assert_eq(weft_mm_largest_free(e.mm), 0);
  reserve_ok(e.mm, &small, 64);
  cr_assert_eq(small.page, 1, "a page-sized slice fills its page");
  weft_mm_free(e.mm, &whole);
  reserve_ok(e.mm, &again, MIB);
  cr_assert(again.page == 0 && offset_of(&again) == 0, "first fit: the first page, whole");
  cr_assert_eq(alloc_calls(&e), 2);
  weft_mm_free(e.mm, &again);
  weft_mm_free(e.mm, &small);
  mm_close(&e);
}

Test(first_fit, a_zero_size_reservation_holds_no_bytes_and_leaves_no_empty_free_slice) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)}; /* no zero-size pool: the sliced takes it */
  mm_env e;
  mm_open(&e, pools, 1);
  weft_mem a, z, b, c;
  reserve_ok(e.mm, &a, 64);
  reserve_ok(e.mm, &z, 0);
  reserve_ok(e.mm, &b, 64);
  cr_assert(offset_of(&z) == 64 && offset_of(&b) == 64, "a zero-size slice takes no bytes");
  EXPECT_USAGE(e.mm, 3, 128, 0, 4096, "a, z, b");
  weft_mm_free(e.mm, &z); /* between two live slices: it goes */
  expect_valid(e.mm, "z freed");
  EXPECT_USAGE(e.mm, 2, 128, 0, 4096, "a, b");
  cr_assert_eq(weft_mm_largest_free(e.mm), 4096 - 128);
  reserve_ok(e.mm, &c, 64);
  cr_assert_eq(offset_of(&c), 128, "nothing was left between a and b");
  weft_mm_free(e.mm, &a);
  weft_mm_free(e.mm, &b);
  weft_mm_free(e.mm, &c);
  mm_close(&e);
}

Test(first_fit, sizes_no_page_can_hold_are_buffer_too_big) {
  weft_pool_config pools[] = {sliced_pool(4096, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  const uint64_t sizes[] = {4097, GIB, UINT64_MAX - 63, UINT64_MAX - 1, UINT64_MAX};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    weft_mem m;
    EXPECT_KIND(reserve_mode(e.mm, &m, sizes[i], WEFT_RESERVE_ALLOW), WEFT_ERR_BUFFER_TOO_BIG);
    cr_assert_not(weft_mem_is_placed(&m));
  }
  cr_assert_eq(alloc_calls(&e), 0);
  mm_close(&e);
  /* The adaptive arena too, where the near-UINT64_MAX sizes reach the arena's pools. */
  weft_mm_config cfg = mm_config(preset_layout(WEFT_LAYOUT_ADAPTIVE), 64 * MIB);
  mm_open_cfg(&e, &cfg, 0);
  for (size_t i = 1; i < sizeof sizes / sizeof sizes[0]; i++) {
    weft_mem m;
    EXPECT_KIND(reserve_mode(e.mm, &m, sizes[i], WEFT_RESERVE_ALLOW), WEFT_ERR_BUFFER_TOO_BIG);
  }
  mm_close(&e);
}

/* ---- cost ---------------------------------------------------------------------------------- */

enum { MANY = 10000 };

Test(first_fit, ten_thousand_live_allocations_and_five_thousand_holes_cost_a_logarithmic_search) {
  weft_pool_config pools[] = {sliced_pool(MIB, 0, 0)};
  mm_env e;
  mm_open(&e, pools, 1);
  static weft_mem m[MANY];
  uint64_t s = 7, in_use = 0;
  for (int i = 0; i < MANY; i++) {
    reserve_ok(e.mm, &m[i], 64 + splitmix(&s) % 960);
    in_use += m[i].size;
  }
  expect_valid(e.mm, "10k live");
  for (int i = 0; i < MANY; i += 2) { /* a hole between every two live slices */
    in_use -= m[i].size;
    weft_mm_free(e.mm, &m[i]);
  }
  expect_valid(e.mm, "5k holes");
  weft_memory_usage u = weft_mm_usage(e.mm);
  cr_assert(u.number_allocs == MANY / 2 && u.bytes_in_use == in_use, "5k live");
  /* Churn: random sizes, each reserved and freed again. The holes are as
   * large as the live ones, so some fit and some go to the tail. */
  uint64_t v0 = weft_mm_slice_visits(e.mm);
  enum { CYCLES = 2000 };
  for (int k = 0; k < CYCLES; k++) {
    weft_mem t;
    reserve_ok(e.mm, &t, 64 + splitmix(&s) % 2048);
    weft_mm_free(e.mm, &t);
  }
  double per = (double)(weft_mm_slice_visits(e.mm) - v0) / CYCLES;
  /* About 900 holes a page: a treap's expected depth is near 2 ln 900 = 14,
   * and first fit often stops high in it (18 reads a cycle here); a scan of
   * the free slices read hundreds. */
  cr_assert_leq(per, 48.0, "a reserve + free read %.1f slices with 5000 live and 5000 holes", per);
  expect_valid(e.mm, "after the churn");
  for (int i = 1; i < MANY; i += 2) weft_mm_free(e.mm, &m[i]);
  weft_mm_cleanup(e.mm);
  EXPECT_USAGE(e.mm, 0, 0, 0, 0, "all released");
  mm_close(&e);
}
