/* The adaptive arena: page sizing (weft_arena_fit), growth into at most
 * WEFT_ARENA_SLOTS page sizes, outdated pools that serve nothing new and give
 * each page back as it empties, reserve modes, relocation off outdated pages
 * (all or nothing per page, bytes preserved, guarded pages stay put), the
 * relocation trigger, and the pools beside the arena.
 *
 * Every manager here uses WEFT_LAYOUT_ADAPTIVE on host storage (alignment
 * 64) over a counting allocator: tiny (exclusive, max 0), small (sliced,
 * 8 MiB pages, 64 KiB largest slice, strict), then the arena, whose first
 * page size is min(2 MiB, max_page). Sizes reserved in the arena are past
 * 64 KiB. Each test closes its environment, which validates the manager,
 * destroys it and asserts that no storage byte and no allocator block is
 * left. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/arena.h"
#include "memory/memory.h"

#define KiB         (UINT64_C(1) << 10)
#define MiB         (UINT64_C(1) << 20)
#define HOST_ALIGN  UINT64_C(64)
#define SMALL_PAGE  (8 * MiB)
#define SMALL_SLICE (64 * KiB)
#define FLOOR       (2 * MiB)

TestSuite(arena_fit, .timeout = 60);
TestSuite(arena, .timeout = 60);
TestSuite(adaptive, .timeout = 60);

/* ---- errors ---------------------------------------------------------------------------------- */

static void ok(weft_status st, const char *what) {
  if (!st) return;
  char buf[1024];
  weft_error_format(st, buf, sizeof buf);
  weft_error_free(st);
  cr_assert_fail("%s failed: %s", what, buf);
}

static void expect_kind(weft_status st, weft_error_kind kind, const char *what) {
  char buf[1024] = "Ok";
  if (st) weft_error_format(st, buf, sizeof buf);
  weft_error_kind got = weft_error_kind_of(st);
  weft_error_free(st);
  cr_assert_eq(got, kind, "%s: expected %s, got %s (%s)", what, weft_error_kind_name(kind),
               weft_error_kind_name(got), buf);
}

/* ---- the environment ------------------------------------------------------------------------- */

typedef struct env {
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_storage *storage;
  weft_mm *mm;
  uint64_t max_page;
} env;

static void open_env(env *e, uint64_t max_page, uint64_t device_bytes, uint64_t capacity) {
  memset(e, 0, sizeof *e);
  ok(weft_counting_allocator_create(&e->ca), "counting allocator");
  e->alloc = weft_counting_allocator_get(e->ca);
  ok(weft_storage_host_create(&e->alloc, capacity, &e->storage), "host storage");
  e->max_page = max_page;
  weft_mm_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.layout.kind = WEFT_LAYOUT_ADAPTIVE;
  cfg.max_page = max_page;
  cfg.device_bytes = device_bytes;
  cfg.persistent = WEFT_PERSISTENT_ENABLED;
  ok(weft_mm_create(&cfg, e->storage, &e->alloc, &e->mm), "weft_mm_create(ADAPTIVE)");
  cr_assert_not_null(e->mm);
}

static void validate(const env *e, const char *when) {
  weft_status st = weft_mm_validate(e->mm);
  if (!st) return;
  char buf[1024];
  weft_error_format(st, buf, sizeof buf);
  weft_error_free(st);
  cr_assert_fail("weft_mm_validate %s: %s", when, buf);
}

static void close_env(env *e) {
  validate(e, "before destroy");
  weft_mm_destroy(e->mm);
  e->mm = NULL;
  cr_assert_eq(weft_storage_bytes_allocated(e->storage), 0,
               "destroying the manager left %" PRIu64 " storage bytes",
               weft_storage_bytes_allocated(e->storage));
  weft_storage_destroy(e->storage);
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%" PRIu64 " allocator blocks leaked (%" PRIu64 " bytes)",
               c.live_blocks, c.live_bytes);
  weft_counting_allocator_destroy(e->ca);
}

/* ---- descriptors and bytes ------------------------------------------------------------------- */

static weft_status try_reserve(env *e, weft_mem *m, uint64_t size, weft_reserve_mode mode) {
  weft_mem_init(m, size);
  return weft_mm_reserve(e->mm, m, mode);
}

static void reserve(env *e, weft_mem *m, uint64_t size) {
  char what[96];
  snprintf(what, sizeof what, "reserve of %" PRIu64 " bytes", size);
  ok(try_reserve(e, m, size, WEFT_RESERVE_ALLOW), what);
  cr_assert(weft_mem_is_placed(m), "a successful reservation places the descriptor");
  validate(e, what);
}

static unsigned char *addr(env *e, weft_mem *m) {
  void *p = NULL;
  ok(weft_mm_resolve(e->mm, m, &p), "weft_mm_resolve");
  cr_assert_not_null(p);
  return p;
}

static unsigned char pattern(uint64_t seed, uint64_t i) {
  return (unsigned char)(seed * 131u + i * 7u + (i >> 9) + (i >> 17));
}

static void fill(env *e, weft_mem *m, uint64_t seed) {
  unsigned char *p = addr(e, m);
  for (uint64_t i = 0; i < m->size; i++) p[i] = pattern(seed, i);
}

static void expect_bytes(env *e, weft_mem *m, uint64_t seed, const char *what) {
  ok(weft_mm_find(e->mm, m), what);
  const unsigned char *p = addr(e, m);
  for (uint64_t i = 0; i < m->size; i++)
    if (p[i] != pattern(seed, i))
      cr_assert_fail("%s: byte %" PRIu64 " of %" PRIu64 " is %u, expected %u", what, i, m->size,
                     p[i], pattern(seed, i));
}

static bool same_page(const weft_mem *a, const weft_mem *b) {
  return a->pool == b->pool && a->page == b->page;
}

typedef struct place {
  weft_pool *pool;
  uint32_t page, slice;
  unsigned char *addr;
} place;

static place place_of(env *e, weft_mem *m) {
  place p = {m->pool, m->page, m->slice, addr(e, m)};
  return p;
}

static void expect_place(env *e, weft_mem *m, place was, const char *what) {
  cr_assert(m->pool == was.pool && m->page == was.page && m->slice == was.slice,
            "%s: the allocation moved from (page %u, slice %u) to (page %u, slice %u)%s", what,
            was.page, was.slice, m->page, m->slice, m->pool == was.pool ? "" : " of another pool");
  cr_assert(addr(e, m) == was.addr, "%s: the allocation's address changed", what);
}

/* ---- the arena as its reports state it ------------------------------------------------------- */

typedef struct arena_view {
  uint64_t page_size;      /* weft_mm_page_size */
  uint64_t pages;          /* every arena page, outdated ones included */
  uint64_t current_pools;  /* arena reports not outdated (1 once anything was carved) */
  uint64_t current_pages;  /* pages of the current pool */
  uint64_t outdated_pools; /* arena reports marked outdated */
  uint64_t outdated_pages; /* pages those hold */
  uint64_t outdated_allocs;
  weft_pool_report tiny, small, persistent, dedicated;
} arena_view;

static weft_pool_report reports[512];

/* Reports are tiny, small, the arena's pools, persistent, dedicated. */
static arena_view view(const env *e) {
  size_t n = sizeof reports / sizeof reports[0];
  weft_mm_report(e->mm, reports, &n);
  cr_assert_geq(n, 4, "an adaptive manager reports tiny, small, persistent and dedicated pools");
  cr_assert_leq(n, sizeof reports / sizeof reports[0]);
  cr_assert_leq(n, 4 + WEFT_ARENA_SLOTS, "%zu reports: more arena pools than slots", n);
  arena_view v;
  memset(&v, 0, sizeof v);
  v.tiny = reports[0];
  v.small = reports[1];
  v.persistent = reports[n - 2];
  v.dedicated = reports[n - 1];
  cr_assert_eq(v.tiny.kind, WEFT_POOL_EXCLUSIVE, "report 0 is the tiny exclusive pool");
  cr_assert_eq(v.small.kind, WEFT_POOL_SLICED, "report 1 is the small sliced pool");
  /* 8 MiB pages; the reference does not say what a device whose largest page
   * is smaller does, so a page capped at max_page is accepted there. */
  if (e->max_page >= SMALL_PAGE)
    cr_assert_eq(v.small.page_size, SMALL_PAGE, "the small pool carves 8 MiB pages, not %" PRIu64,
                 v.small.page_size);
  else
    cr_assert(v.small.page_size >= SMALL_SLICE && v.small.page_size <= SMALL_PAGE,
              "the small pool's pages: %" PRIu64, v.small.page_size);
  cr_assert(!v.small.outdated && !v.tiny.outdated, "only arena pools are ever outdated");
  cr_assert_eq(v.persistent.kind, WEFT_POOL_PERSISTENT, "the next-to-last report is persistent");
  cr_assert_eq(v.dedicated.kind, WEFT_POOL_DIRECT, "the last report is the dedicated pool");
  v.page_size = weft_mm_page_size(e->mm);
  for (size_t i = 2; i + 2 < n; i++) {
    const weft_pool_report *r = &reports[i];
    cr_assert_eq(r->kind, WEFT_POOL_SLICED, "arena report %zu is a sliced pool", i);
    v.pages += r->pages;
    if (r->outdated) {
      v.outdated_pools++;
      v.outdated_pages += r->pages;
      v.outdated_allocs += r->usage.number_allocs;
      cr_assert_lt(r->page_size, v.page_size,
                   "an outdated pool carves smaller pages than the current");
    } else {
      v.current_pools++;
      v.current_pages = r->pages;
      cr_assert_eq(r->page_size, v.page_size,
                   "the current arena pool carves pages of weft_mm_page_size (%" PRIu64
                   "), not %" PRIu64,
                   v.page_size, r->page_size);
    }
  }
  cr_assert_leq(v.current_pools, 1, "%" PRIu64 " arena pools serve new reservations",
                v.current_pools);
  return v;
}

/* The reference's Pool{page_size, pages, outdated}: outdated counts pages. */
static void expect_arena(const env *e, uint64_t page_size, uint64_t pages, uint64_t outdated_pages,
                         const char *what) {
  arena_view v = view(e);
  cr_assert_eq(v.page_size, page_size, "%s: page size %" PRIu64 " KiB, expected %" PRIu64 " KiB",
               what, v.page_size / KiB, page_size / KiB);
  cr_assert_eq(v.pages, pages, "%s: the arena holds %" PRIu64 " pages, expected %" PRIu64, what,
               v.pages, pages);
  cr_assert_eq(v.outdated_pages, outdated_pages,
               "%s: %" PRIu64 " outdated pages, expected %" PRIu64, what, v.outdated_pages,
               outdated_pages);
}

/* After a tick, a cleanup or a relocation: every drained pool freed its slot. */
static void expect_no_outdated_pool(const env *e, const char *what) {
  arena_view v = view(e);
  cr_assert_eq(v.outdated_pools, 0, "%s: %" PRIu64 " outdated pools are still reported", what,
               v.outdated_pools);
}

static void expect_usage(const env *e, uint64_t allocs, uint64_t in_use, const char *what) {
  weft_memory_usage u = weft_mm_usage(e->mm);
  cr_assert_eq(u.number_allocs, allocs, "%s: %" PRIu64 " allocations, expected %" PRIu64, what,
               u.number_allocs, allocs);
  cr_assert_eq(u.bytes_in_use, in_use, "%s: %" PRIu64 " bytes in use, expected %" PRIu64, what,
               u.bytes_in_use, in_use);
}

/* ==== weft_arena_fit ========================================================================== */

Test(arena_fit, an_allocation_that_fits_the_pages_grows_nothing) {
  cr_assert_eq(weft_arena_fit(1 * MiB, 2 * MiB, HOST_ALIGN, 16 * MiB), 0);
  cr_assert_eq(weft_arena_fit(2 * MiB, 2 * MiB, HOST_ALIGN, 16 * MiB), 0, "an exact fit fits");
  cr_assert_eq(weft_arena_fit(2 * MiB - 1, 2 * MiB, HOST_ALIGN, 16 * MiB), 0,
               "size plus padding is exactly the page");
  cr_assert_eq(weft_arena_fit(64 * KiB + 1, 2 * MiB, HOST_ALIGN, 16 * MiB), 0);
  cr_assert_eq(weft_arena_fit(1 * MiB, 11 * MiB, HOST_ALIGN, 16 * MiB), 0,
               "a smaller allocation never shrinks the pages");
  cr_assert_eq(weft_arena_fit(16 * MiB, 16 * MiB, HOST_ALIGN, 16 * MiB), 0);
}

Test(arena_fit, a_growth_sizes_pages_to_the_allocation_with_slack) {
  cr_assert_eq(weft_arena_fit(10 * MiB, 2 * MiB, HOST_ALIGN, 16 * MiB), 11 * MiB);
  cr_assert_eq(weft_arena_fit(2 * MiB + 1, 2 * MiB, HOST_ALIGN, 16 * MiB), 4 * MiB,
               "3 MiB + 1 rounds up to the next MiB");
  cr_assert_eq(weft_arena_fit(3 * MiB, 2 * MiB, HOST_ALIGN, 16 * MiB), 4 * MiB);
  cr_assert_eq(weft_arena_fit(11 * MiB + 1, 11 * MiB, HOST_ALIGN, 16 * MiB), 13 * MiB);
  cr_assert_eq(weft_arena_fit(10 * MiB + 1, 11 * MiB, HOST_ALIGN, 16 * MiB), 0);
}

Test(arena_fit, a_growth_stops_at_the_devices_largest_page) {
  cr_assert_eq(weft_arena_fit(16 * MiB, 2 * MiB, HOST_ALIGN, 16 * MiB), 16 * MiB,
               "the slack does not push the page past the largest");
  cr_assert_eq(weft_arena_fit(15 * MiB + 1, 2 * MiB, HOST_ALIGN, 16 * MiB), 16 * MiB);
  cr_assert_eq(weft_arena_fit(16 * MiB + 1, 2 * MiB, HOST_ALIGN, 16 * MiB), UINT64_MAX,
               "no page the device holds fits it");
  cr_assert_eq(weft_arena_fit(16 * MiB + 1, 16 * MiB, HOST_ALIGN, 16 * MiB), UINT64_MAX);
  cr_assert_eq(weft_arena_fit(UINT64_C(1) << 50, 2 * MiB, HOST_ALIGN, 16 * MiB), UINT64_MAX);
}

Test(arena_fit, a_size_at_the_top_of_the_range_is_too_large_not_a_fit) {
  /* size + padding must not wrap around to a small number */
  cr_assert_eq(weft_arena_fit(UINT64_MAX, 2 * MiB, HOST_ALIGN, 16 * MiB), UINT64_MAX);
  cr_assert_eq(weft_arena_fit(UINT64_MAX - 10, 2 * MiB, HOST_ALIGN, 16 * MiB), UINT64_MAX);
}

Test(arena_fit, padding_counts_toward_the_fit_and_pages_round_to_the_alignment) {
  const uint64_t align = 4 * MiB;
  cr_assert_eq(weft_arena_fit(3 * MiB, 4 * MiB, align, 64 * MiB), 0, "3 MiB pads to 4 MiB");
  cr_assert_eq(weft_arena_fit(1 * MiB, 2 * MiB, align, 64 * MiB), 4 * MiB,
               "1 MiB pads to 4 MiB, which a 2 MiB page does not hold");
  cr_assert_eq(weft_arena_fit(10 * MiB, 2 * MiB, align, 64 * MiB), 12 * MiB,
               "11 MiB rounds up to the 4 MiB alignment");
  cr_assert_eq(weft_arena_fit(4 * MiB + 1, 8 * MiB, align, 64 * MiB), 0);
  cr_assert_eq(weft_arena_fit(8 * MiB + 1, 8 * MiB, align, 64 * MiB), 12 * MiB);
}

Test(arena_fit, the_largest_page_is_rounded_down_to_the_alignment) {
  /* A max_page of 18 MiB on a 4 MiB alignment allocates pages of at most 16. */
  cr_assert_eq(weft_arena_fit(16 * MiB, 2 * MiB, 4 * MiB, 18 * MiB), 16 * MiB);
  cr_assert_eq(weft_arena_fit(17 * MiB, 2 * MiB, 4 * MiB, 18 * MiB), UINT64_MAX);
}

Test(arena_fit, a_device_whose_largest_page_is_below_the_floor_caps_the_floor) {
  cr_assert_eq(weft_arena_fit(512 * KiB, 0, HOST_ALIGN, 1 * MiB), 1 * MiB);
  cr_assert_eq(weft_arena_fit(1 * MiB, 1 * MiB, HOST_ALIGN, 1 * MiB), 0);
  cr_assert_eq(weft_arena_fit(1 * MiB + 1, 1 * MiB, HOST_ALIGN, 1 * MiB), UINT64_MAX);
}

/* ==== the arena: growth and slots ============================================================= */

Test(arena, a_refused_growth_leaves_the_page_size_where_it_was) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem small, refused, served, grown;
  reserve(&e, &small, 1 * MiB);
  expect_arena(&e, FLOOR, 1, 0, "the floor holds a 1 MiB allocation");
  uint64_t allocs = weft_mm_storage_allocs(e.mm);

  weft_storage_host_fail_at(e.storage, 1, WEFT_ERR_OUT_OF_MEMORY);
  expect_kind(try_reserve(&e, &refused, 10 * MiB, WEFT_RESERVE_ALLOW), WEFT_ERR_OUT_OF_MEMORY,
              "a growth whose first page the storage refuses");
  weft_storage_host_fail_at(e.storage, 0, WEFT_ERR_OUT_OF_MEMORY);
  cr_assert(!weft_mem_is_placed(&refused), "a refused reservation leaves the descriptor unplaced");
  validate(&e, "after the refused growth");
  cr_assert_eq(weft_mm_page_size(e.mm), FLOOR, "the page size stays where it was");
  expect_arena(&e, FLOOR, 1, 0, "no pool was outdated by the refused growth");
  expect_no_outdated_pool(&e, "after the refused growth");
  cr_assert_eq(weft_mm_storage_allocs(e.mm), allocs);
  expect_usage(&e, 1, 1 * MiB, "after the refused growth");

  reserve(&e, &served, 1 * MiB);
  expect_arena(&e, FLOOR, 1, 0, "served from the page held");
  cr_assert(same_page(&served, &small));

  reserve(&e, &grown, 10 * MiB);
  expect_arena(&e, 11 * MiB, 2, 1, "the same growth succeeds once the storage allows it");
  close_env(&e);
}

Test(arena, a_growth_past_the_device_capacity_leaves_the_page_size_where_it_was) {
  env e;
  open_env(&e, 16 * MiB, 0, 12 * MiB);
  weft_mem small, refused, served, grown;
  reserve(&e, &small, 1 * MiB);

  /* 2 MiB held plus an 11 MiB page is past the 12 MiB the storage holds. */
  expect_kind(try_reserve(&e, &refused, 10 * MiB, WEFT_RESERVE_ALLOW), WEFT_ERR_OUT_OF_MEMORY,
              "a growth the storage has no room for now");
  cr_assert(!weft_mem_is_placed(&refused));
  expect_arena(&e, FLOOR, 1, 0, "the refused growth changed nothing");
  reserve(&e, &served, 1 * MiB);
  expect_arena(&e, FLOOR, 1, 0, "served from the page held");

  weft_mm_free(e.mm, &small);
  weft_mm_free(e.mm, &served);
  weft_mm_cleanup(e.mm);
  expect_arena(&e, FLOOR, 0, 0, "an explicit cleanup returns the empty page");
  reserve(&e, &grown, 10 * MiB);
  cr_assert_eq(weft_mm_page_size(e.mm), 11 * MiB, "with the room reclaimed the growth succeeds");
  close_env(&e);
}

/* Each step outgrows the page the last one grew to, so every step takes a
 * slot; each pool keeps one small live allocation (the large one that grew
 * it is freed, so the pages stay untouched virtual memory). */
Test(arena, a_full_arena_refuses_to_grow_until_a_relocation_frees_it) {
  enum { SLOTS = WEFT_ARENA_SLOTS };
  const uint64_t max_page = 256 * MiB, keep = 100 * KiB;
  env e;
  open_env(&e, max_page, 0, 0);
  static weft_mem kept[SLOTS], big, refused, after;

  reserve(&e, &kept[0], keep);
  fill(&e, &kept[0], 0);
  cr_assert_eq(weft_mm_page_size(e.mm), FLOOR);
  for (unsigned k = 1; k < SLOTS; k++) {
    uint64_t page = weft_mm_page_size(e.mm);
    reserve(&e, &big, page + 1 * MiB);
    cr_assert_eq(weft_mm_page_size(e.mm), page + 2 * MiB, "growth %u", k);
    reserve(&e, &kept[k], keep);
    cr_assert(same_page(&kept[k], &big), "growth %u: the small allocation shares the new page", k);
    fill(&e, &kept[k], k);
    weft_mm_free(e.mm, &big);
  }
  uint64_t top = weft_mm_page_size(e.mm);
  cr_assert_eq(top, FLOOR + 2 * MiB * (SLOTS - 1));
  arena_view v = view(&e);
  cr_assert_eq(v.outdated_pools, SLOTS - 1, "every slot holds a pool");
  cr_assert_eq(v.current_pools, 1);
  cr_assert(weft_mm_wants_relocation(e.mm), "a full arena with outdated pools asks to relocate");

  uint64_t allocs = weft_mm_storage_allocs(e.mm);
  expect_kind(try_reserve(&e, &refused, top + 1 * MiB, WEFT_RESERVE_ALLOW),
              WEFT_ERR_PAGE_SIZES_EXHAUSTED, "a growth with no free slot");
  cr_assert(!weft_mem_is_placed(&refused));
  cr_assert_eq(weft_mm_page_size(e.mm), top, "the page size stays");
  cr_assert_eq(weft_mm_storage_allocs(e.mm), allocs, "no page was allocated");
  validate(&e, "after PageSizesExhausted");

  uint64_t moved = weft_mm_relocate(e.mm, true);
  cr_assert_eq(moved, SLOTS - 1, "one allocation per outdated pool moves, %" PRIu64 " did", moved);
  validate(&e, "after the relocation");
  v = view(&e);
  cr_assert_eq(v.outdated_pools, 0, "every outdated pool drained and freed its slot");
  cr_assert_eq(v.pages, 1, "everything lives on the current page");
  cr_assert(!weft_mm_wants_relocation(e.mm), "nothing is outdated any more");
  for (unsigned k = 0; k < SLOTS; k++) {
    cr_assert(same_page(&kept[k], &kept[SLOTS - 1]), "allocation %u is on the current page", k);
    expect_bytes(&e, &kept[k], k, "a relocated allocation keeps its bytes");
  }
  expect_usage(&e, SLOTS, SLOTS * keep, "after the relocation");

  reserve(&e, &after, top + 1 * MiB);
  cr_assert_eq(weft_mm_page_size(e.mm), top + 2 * MiB, "a slot is free again");
  close_env(&e);
}

/* ==== the adaptive layout ===================================================================== */

Test(adaptive, the_first_page_is_the_floor_or_the_largest_page_if_smaller) {
  env e;
  open_env(&e, 1 * MiB, 0, 0);
  weft_mem a, b, c;
  reserve(&e, &a, 512 * KiB);
  expect_arena(&e, 1 * MiB, 1, 0, "a 1 MiB device page caps the 2 MiB floor");
  weft_mm_free(e.mm, &a);
  reserve(&e, &b, 1 * MiB);
  expect_arena(&e, 1 * MiB, 1, 0, "a page-sized allocation fits without growing");
  expect_kind(try_reserve(&e, &c, 1 * MiB + 1, WEFT_RESERVE_ALLOW), WEFT_ERR_BUFFER_TOO_BIG,
              "past the largest page");
  close_env(&e);
}

Test(adaptive, the_page_size_follows_the_largest_allocation) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem small, large, smaller, again;
  reserve(&e, &small, 1 * MiB);
  expect_arena(&e, FLOOR, 1, 0, "the floor holds small workloads");
  reserve(&e, &large, 10 * MiB);
  expect_arena(&e, 11 * MiB, 2, 1, "a megabyte of slack, rounded to the megabyte");
  reserve(&e, &smaller, 6 * MiB);
  cr_assert_eq(weft_mm_page_size(e.mm), 11 * MiB, "the page size never shrinks");

  weft_mm_free(e.mm, &small);
  weft_mm_free(e.mm, &large);
  weft_mm_free(e.mm, &smaller);
  weft_mm_cleanup(e.mm);
  expect_arena(&e, 11 * MiB, 0, 0, "an explicit cleanup returns every empty page");
  reserve(&e, &again, 1 * MiB);
  expect_arena(&e, 11 * MiB, 1, 0, "nor does it shrink once everything was freed");
  close_env(&e);
}

Test(adaptive, the_page_size_stops_at_the_devices_largest_page) {
  const uint64_t max_page = 16 * MiB;
  env e;
  open_env(&e, max_page, 0, 0);
  weft_mem largest, near, refused;
  reserve(&e, &largest, max_page);
  expect_arena(&e, max_page, 1, 0, "the slack does not push the page past the device's limit");
  reserve(&e, &near, 14 * MiB + 1);
  cr_assert_eq(weft_mm_page_size(e.mm), max_page);
  expect_kind(try_reserve(&e, &refused, max_page + 1, WEFT_RESERVE_ALLOW), WEFT_ERR_BUFFER_TOO_BIG,
              "an allocation no page fits is no pool's to serve");
  expect_arena(&e, max_page, 2, 0, "two pages of the largest size, nothing outdated");
  close_env(&e);
}

Test(adaptive, an_allocation_no_page_fits_leaves_the_pages_alone) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem small, refused, served;
  reserve(&e, &small, 1 * MiB);
  uint64_t calls = weft_storage_host_alloc_calls(e.storage);
  expect_kind(try_reserve(&e, &refused, UINT64_C(1) << 50, WEFT_RESERVE_ALLOW),
              WEFT_ERR_BUFFER_TOO_BIG, "2^50 bytes");
  expect_kind(try_reserve(&e, &refused, 16 * MiB + 1, WEFT_RESERVE_ALLOW), WEFT_ERR_BUFFER_TOO_BIG,
              "one byte past the largest page");
  cr_assert(!weft_mem_is_placed(&refused));
  cr_assert_eq(weft_storage_host_alloc_calls(e.storage), calls,
               "refused before the storage was asked");
  expect_arena(&e, FLOOR, 1, 0, "the pages held are untouched");
  reserve(&e, &served, 1 * MiB);
  expect_arena(&e, FLOOR, 1, 0, "served from the page already held");
  close_env(&e);
}

Test(adaptive, a_grown_page_size_serves_nothing_from_outdated_pages) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem first, large, small, tiny_room;
  reserve(&e, &first, 1 * MiB);
  reserve(&e, &large, 10 * MiB);
  expect_arena(&e, 11 * MiB, 2, 1, "one current and one outdated page");
  reserve(&e, &small, 1 * MiB);
  cr_assert(!same_page(&small, &first), "the outdated page has room to spare, but it is outdated");
  cr_assert(same_page(&small, &large), "the current page has exactly 1 MiB of room");
  reserve(&e, &tiny_room, 512 * KiB);
  cr_assert(tiny_room.pool == large.pool, "a new page of the current pool, not the outdated one");
  arena_view v = view(&e);
  cr_assert_eq(v.outdated_allocs, 1, "the outdated pool still holds only its first allocation");
  cr_assert_eq(v.current_pages, 2);
  close_env(&e);
}

Test(adaptive, an_outdated_page_is_released_once_empty) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem first, large, tick;
  reserve(&e, &first, 1 * MiB);
  reserve(&e, &large, 10 * MiB);
  expect_arena(&e, 11 * MiB, 2, 1, "before the free");
  uint64_t bytes = weft_storage_bytes_allocated(e.storage);

  weft_mm_free(e.mm, &first);
  reserve(&e, &tick, 1 * MiB); /* the next reservation's periodic tick */
  expect_arena(&e, 11 * MiB, 1, 0, "the tick after its last slice was freed returns the page");
  expect_no_outdated_pool(&e, "the drained pool freed its slot");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), bytes - FLOOR,
               "the 2 MiB page went back to the storage");
  cr_assert_eq(weft_mm_storage_allocs(e.mm), 1);
  close_env(&e);
}

Test(adaptive, an_outdated_page_is_released_by_an_explicit_cleanup) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem first, large;
  reserve(&e, &first, 1 * MiB);
  reserve(&e, &large, 10 * MiB);
  weft_mm_free(e.mm, &first);
  weft_mm_cleanup(e.mm);
  expect_arena(&e, 11 * MiB, 1, 0, "the explicit cleanup returned the outdated page");
  expect_no_outdated_pool(&e, "after the explicit cleanup");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 11 * MiB);
  close_env(&e);
}

Test(adaptive, an_outdated_pool_returns_each_page_as_it_empties) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem a, b, large, tick1, tick2;
  reserve(&e, &a, 1536 * KiB);
  reserve(&e, &b, 1536 * KiB);
  cr_assert(!same_page(&a, &b), "two 1.5 MiB allocations take two 2 MiB pages");
  fill(&e, &b, 2);
  reserve(&e, &large, 10 * MiB);
  expect_arena(&e, 11 * MiB, 3, 2, "one outdated pool with two pages");

  weft_mm_free(e.mm, &a);
  reserve(&e, &tick1, 512 * KiB);
  expect_arena(&e, 11 * MiB, 2, 1, "the emptied page went back; the other stays");
  cr_assert_eq(view(&e).outdated_pools, 1, "the pool is still outdated, not drained");
  expect_bytes(&e, &b, 2, "the survivor on the outdated pool");

  weft_mm_free(e.mm, &b);
  reserve(&e, &tick2, 256 * KiB);
  expect_arena(&e, 11 * MiB, 1, 0, "the drained pool is gone");
  expect_no_outdated_pool(&e, "after the second tick");
  close_env(&e);
}

Test(adaptive, an_add_only_reservation_releases_nothing) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem first, large, kept, grown, tick;
  reserve(&e, &first, 1 * MiB);
  reserve(&e, &large, 10 * MiB);
  weft_mm_free(e.mm, &first);

  ok(try_reserve(&e, &kept, 1 * MiB, WEFT_RESERVE_ADD_ONLY), "ADD_ONLY reservation");
  expect_arena(&e, 11 * MiB, 2, 1, "the emptied outdated page is still held");
  ok(try_reserve(&e, &grown, 12 * MiB, WEFT_RESERVE_ADD_ONLY), "ADD_ONLY growth");
  cr_assert_eq(weft_mm_page_size(e.mm), 13 * MiB, "an add-only reservation may add pages");
  arena_view v = view(&e);
  cr_assert_eq(v.outdated_pages, 2, "the 2 MiB and 11 MiB pages are outdated and both held");
  validate(&e, "after add-only reservations");

  reserve(&e, &tick, 1 * MiB);
  expect_arena(&e, 13 * MiB, 2, 1, "a plain reservation releases the emptied page");
  close_env(&e);
}

Test(adaptive, a_forbidden_page_update_serves_only_the_room_held) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem nothing, first, held, more, too_big, grow;
  expect_kind(try_reserve(&e, &nothing, 1 * MiB, WEFT_RESERVE_FORBIDDEN),
              WEFT_ERR_PAGE_UPDATE_FORBIDDEN, "no page is held at all");
  cr_assert(!weft_mem_is_placed(&nothing));
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 0);

  reserve(&e, &first, 1 * MiB);
  weft_mm_free(e.mm, &first);
  ok(try_reserve(&e, &held, 1 * MiB, WEFT_RESERVE_FORBIDDEN), "the page held has room for it");
  ok(try_reserve(&e, &more, 512 * KiB, WEFT_RESERVE_FORBIDDEN), "and for 512 KiB more");
  expect_kind(try_reserve(&e, &too_big, 1 * MiB, WEFT_RESERVE_FORBIDDEN),
              WEFT_ERR_PAGE_UPDATE_FORBIDDEN, "512 KiB of room left, 1 MiB asked");
  expect_kind(try_reserve(&e, &grow, 4 * MiB, WEFT_RESERVE_FORBIDDEN),
              WEFT_ERR_PAGE_UPDATE_FORBIDDEN, "a growth is a page update");
  cr_assert(!weft_mem_is_placed(&too_big) && !weft_mem_is_placed(&grow));
  expect_arena(&e, FLOOR, 1, 0, "no page was added and the page size stayed");
  expect_usage(&e, 2, 1536 * KiB, "after the forbidden reservations");
  close_env(&e);
}

Test(adaptive, a_forbidden_reservation_releases_nothing) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem first, large, held, tick;
  reserve(&e, &first, 1 * MiB);
  reserve(&e, &large, 10 * MiB);
  weft_mm_free(e.mm, &first);
  ok(try_reserve(&e, &held, 512 * KiB, WEFT_RESERVE_FORBIDDEN), "FORBIDDEN in the room held");
  cr_assert(same_page(&held, &large));
  expect_arena(&e, 11 * MiB, 2, 1, "the emptied outdated page is still held");
  reserve(&e, &tick, 256 * KiB);
  expect_arena(&e, 11 * MiB, 1, 0, "the next plain reservation releases it");
  close_env(&e);
}

Test(adaptive, padding_is_never_lost_on_reuse) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem a, b;
  /* Two allocations of 1 MiB - 1 pad to 1 MiB each and fill the 2 MiB page. */
  reserve(&e, &a, 1 * MiB - 1);
  reserve(&e, &b, 1 * MiB - 1);
  cr_assert(same_page(&a, &b));
  fill(&e, &b, 9);
  const uint64_t sizes[] = {1 * MiB - 1,  1 * MiB - 63, 512 * KiB + 1, 1 * MiB - 64,
                            64 * KiB + 1, 1 * MiB,      700 * KiB + 3, 1 * MiB - 1};
  for (int round = 0; round < 25; round++) {
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      weft_mm_free(e.mm, &a);
      ok(try_reserve(&e, &a, sizes[i], WEFT_RESERVE_FORBIDDEN),
         "reuse of the freed 1 MiB slot in the room held");
      cr_assert(same_page(&a, &b), "round %d, size %" PRIu64 ": reused in place", round, sizes[i]);
      validate(&e, "after a reuse");
    }
  }
  weft_memory_usage u = weft_mm_usage(e.mm);
  cr_assert_eq(u.bytes_reserved, FLOOR, "no page was added");
  cr_assert_eq(u.bytes_in_use, 2 * (1 * MiB - 1));
  cr_assert_eq(u.bytes_padding, 2);
  cr_assert_eq(weft_mm_largest_free(e.mm), 0, "the page is exactly full again");
  expect_bytes(&e, &b, 9, "the neighbour's bytes");
  close_env(&e);
}

Test(adaptive, relocation_moves_live_allocations_to_current_pages) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem kept, large;
  reserve(&e, &kept, 1 * MiB);
  fill(&e, &kept, 7);
  place was = place_of(&e, &kept);
  reserve(&e, &large, 10 * MiB);
  fill(&e, &large, 8);
  expect_arena(&e, 11 * MiB, 2, 1, "before the relocation");

  cr_assert_eq(weft_mm_relocate(e.mm, false), 1, "one allocation moves into the room held");
  validate(&e, "after the relocation");
  expect_arena(&e, 11 * MiB, 1, 0, "the outdated page is gone");
  expect_no_outdated_pool(&e, "a relocation drains at once");
  cr_assert(same_page(&kept, &large), "it shares the current page");
  cr_assert(addr(&e, &kept) != was.addr, "it lives somewhere else now");
  expect_bytes(&e, &kept, 7, "the bytes moved with it");
  expect_bytes(&e, &large, 8, "the current page's bytes are untouched");
  expect_usage(&e, 2, 11 * MiB, "after the relocation");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 11 * MiB, "the 2 MiB page went back");
  cr_assert_eq(weft_mm_relocate(e.mm, true), 0, "nothing is left to move");
  close_env(&e);
}

Test(adaptive, relocation_moves_all_of_a_page_or_none_of_it) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem kept, neighbour, large;
  reserve(&e, &kept, 1 * MiB);
  reserve(&e, &neighbour, 512 * KiB);
  cr_assert(same_page(&kept, &neighbour));
  fill(&e, &kept, 1);
  fill(&e, &neighbour, 2);
  place pk = place_of(&e, &kept), pn = place_of(&e, &neighbour);
  reserve(&e, &large, 10 * MiB);
  uint64_t allocs = weft_mm_storage_allocs(e.mm);

  /* The current page has room for the 1 MiB allocation but not for both. */
  cr_assert_eq(weft_mm_relocate(e.mm, false), 0, "moving part of a page frees nothing");
  validate(&e, "after the refused plan");
  expect_place(&e, &kept, pk, "the allocation that would have fitted");
  expect_place(&e, &neighbour, pn, "its neighbour");
  expect_bytes(&e, &kept, 1, "kept");
  expect_bytes(&e, &neighbour, 2, "neighbour");
  expect_arena(&e, 11 * MiB, 2, 1, "nothing changed");
  cr_assert_eq(weft_mm_storage_allocs(e.mm), allocs);
  expect_usage(&e, 3, 11 * MiB + 512 * KiB, "the targets were given back");
  close_env(&e);
}

Test(adaptive, a_relocation_that_may_allocate_adds_pages_for_its_targets) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem kept, neighbour, large;
  reserve(&e, &kept, 1 * MiB);
  reserve(&e, &neighbour, 512 * KiB);
  fill(&e, &kept, 1);
  fill(&e, &neighbour, 2);
  reserve(&e, &large, 10 * MiB);

  cr_assert_eq(weft_mm_relocate(e.mm, true), 2);
  validate(&e, "after the relocation");
  arena_view v = view(&e);
  cr_assert_eq(v.outdated_pages, 0);
  cr_assert_eq(v.current_pages, 2, "a second current page took what did not fit the first");
  cr_assert(kept.pool == large.pool && neighbour.pool == large.pool);
  expect_bytes(&e, &kept, 1, "kept");
  expect_bytes(&e, &neighbour, 2, "neighbour");
  expect_usage(&e, 3, 11 * MiB + 512 * KiB, "after the relocation");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 22 * MiB);
  close_env(&e);
}

Test(adaptive, an_abandoned_relocation_loses_nothing) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem kept, neighbour, large;
  reserve(&e, &kept, 1 * MiB);
  reserve(&e, &neighbour, 512 * KiB);
  fill(&e, &kept, 3);
  fill(&e, &neighbour, 4);
  place pk = place_of(&e, &kept), pn = place_of(&e, &neighbour);
  reserve(&e, &large, 10 * MiB);
  fill(&e, &large, 5);
  uint64_t allocs = weft_mm_storage_allocs(e.mm);
  uint64_t bytes = weft_storage_bytes_allocated(e.storage);

  /* The page a target needs is refused: the plan for that page is dropped. */
  weft_storage_host_fail_at(e.storage, 1, WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(weft_mm_relocate(e.mm, true), 0, "the refused target page abandons the plan");
  weft_storage_host_fail_at(e.storage, 0, WEFT_ERR_OUT_OF_MEMORY);
  validate(&e, "after the abandoned relocation");
  expect_place(&e, &kept, pk, "kept");
  expect_place(&e, &neighbour, pn, "neighbour");
  expect_bytes(&e, &kept, 3, "kept");
  expect_bytes(&e, &neighbour, 4, "neighbour");
  expect_bytes(&e, &large, 5, "the current page");
  expect_arena(&e, 11 * MiB, 2, 1, "every page where it was");
  expect_usage(&e, 3, 11 * MiB + 512 * KiB, "the reserved targets were freed");
  cr_assert_eq(weft_mm_storage_allocs(e.mm), allocs);
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), bytes);

  cr_assert_eq(weft_mm_relocate(e.mm, true), 2, "the same plan succeeds once storage allows it");
  expect_bytes(&e, &kept, 3, "kept, relocated");
  expect_bytes(&e, &neighbour, 4, "neighbour, relocated");
  close_env(&e);
}

Test(adaptive, relocation_leaves_guarded_pages_in_place) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem recorded, large;
  reserve(&e, &recorded, 1 * MiB);
  fill(&e, &recorded, 6);
  place was = place_of(&e, &recorded);
  weft_mm_guard(e.mm, &recorded);
  reserve(&e, &large, 10 * MiB);

  cr_assert_eq(weft_mm_relocate(e.mm, true), 0, "a guarded page never moves");
  expect_place(&e, &recorded, was, "the guarded allocation");
  expect_bytes(&e, &recorded, 6, "the guarded allocation");
  expect_arena(&e, 11 * MiB, 2, 1, "the guarded page is still held");
  weft_mm_unguard(e.mm, &recorded);
  close_env(&e);
}

Test(adaptive, relocation_moves_the_unguarded_pages_around_a_guarded_one) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem a, b, large;
  reserve(&e, &a, 1536 * KiB);
  reserve(&e, &b, 1536 * KiB);
  cr_assert(!same_page(&a, &b));
  fill(&e, &a, 1);
  fill(&e, &b, 2);
  place pa = place_of(&e, &a);
  weft_mm_guard(e.mm, &a);
  reserve(&e, &large, 10 * MiB);

  cr_assert_eq(weft_mm_relocate(e.mm, true), 1, "the unguarded page moves");
  expect_place(&e, &a, pa, "the guarded allocation");
  cr_assert(b.pool == large.pool, "the unguarded one moved to the current pool");
  expect_bytes(&e, &a, 1, "guarded");
  expect_bytes(&e, &b, 2, "moved");
  expect_arena(&e, 11 * MiB, 3, 1, "the guarded page stays outdated");

  weft_mm_unguard(e.mm, &a);
  cr_assert_eq(weft_mm_relocate(e.mm, true), 1, "unguarded, it moves too");
  expect_bytes(&e, &a, 1, "moved once unguarded");
  expect_arena(&e, 11 * MiB, 2, 0, "nothing is outdated");
  close_env(&e);
}

Test(adaptive, a_guard_holds_its_whole_page) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem recorded, neighbour, large;
  reserve(&e, &recorded, 1 * MiB);
  reserve(&e, &neighbour, 512 * KiB);
  cr_assert(same_page(&recorded, &neighbour));
  fill(&e, &neighbour, 4);
  place was = place_of(&e, &neighbour);
  weft_mm_guard(e.mm, &recorded);
  reserve(&e, &large, 10 * MiB);

  cr_assert_eq(weft_mm_relocate(e.mm, true), 0, "everything on a guarded page stays");
  expect_place(&e, &neighbour, was, "the unguarded neighbour");
  expect_bytes(&e, &neighbour, 4, "the neighbour");
  weft_mm_unguard(e.mm, &recorded);
  close_env(&e);
}

Test(adaptive, a_guarded_page_serves_no_new_reservation) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem recorded, later;
  reserve(&e, &recorded, 1 * MiB);
  weft_pool *pool = recorded.pool;
  uint32_t page = recorded.page;
  weft_mm_guard(e.mm, &recorded);
  weft_mm_free(e.mm, &recorded);

  reserve(&e, &later, 1 * MiB);
  expect_arena(&e, FLOOR, 2, 0, "the guarded page stays out of reach, even where it is free");
  cr_assert(!(later.pool == pool && later.page == page), "not carved from the guarded page");
  close_env(&e);
}

Test(adaptive, a_dropped_guard_lets_the_page_move) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem recorded, large;
  reserve(&e, &recorded, 1 * MiB);
  fill(&e, &recorded, 5);
  weft_mm_guard(e.mm, &recorded);
  weft_mm_unguard(e.mm, &recorded);
  reserve(&e, &large, 10 * MiB);
  cr_assert_eq(weft_mm_relocate(e.mm, false), 1, "the page moves once unguarded");
  cr_assert(same_page(&recorded, &large));
  expect_bytes(&e, &recorded, 5, "the relocated allocation");
  close_env(&e);
}

Test(adaptive, guards_nest_and_the_page_moves_after_the_last_is_dropped) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem recorded, large;
  reserve(&e, &recorded, 1 * MiB);
  weft_mm_guard(e.mm, &recorded);
  weft_mm_guard(e.mm, &recorded);
  reserve(&e, &large, 10 * MiB);
  weft_mm_unguard(e.mm, &recorded);
  cr_assert_eq(weft_mm_relocate(e.mm, false), 0, "one guard is still held");
  weft_mm_unguard(e.mm, &recorded);
  cr_assert_eq(weft_mm_relocate(e.mm, false), 1, "both guards dropped");
  close_env(&e);
}

/* ---- the relocation trigger ------------------------------------------------------------------ */

Test(adaptive, memory_pressure_asks_for_a_relocation_before_the_next_page) {
  env e;
  open_env(&e, 16 * MiB, 24 * MiB, 0);
  weft_mem kept, large;
  reserve(&e, &kept, 1 * MiB);
  fill(&e, &kept, 3);
  cr_assert(!weft_mm_wants_relocation(e.mm), "one 2 MiB page of 24 MiB");

  /* 13 MiB held over two pools, and the next page is 11 MiB: 13 + 11 > 24 - 11. */
  reserve(&e, &large, 10 * MiB);
  cr_assert(weft_mm_wants_relocation(e.mm), "the next page would leave less than a page");

  cr_assert_eq(weft_mm_relocate(e.mm, false), 1);
  expect_arena(&e, 11 * MiB, 1, 0, "the outdated pool was emptied into the room held");
  cr_assert(same_page(&kept, &large));
  expect_bytes(&e, &kept, 3, "the relocated allocation");
  cr_assert(!weft_mm_wants_relocation(e.mm), "nothing is outdated any more");
  close_env(&e);
}

Test(adaptive, a_device_with_room_to_spare_asks_for_nothing) {
  env e;
  open_env(&e, 16 * MiB, 1024 * MiB, 0);
  weft_mem kept, large;
  reserve(&e, &kept, 1 * MiB);
  reserve(&e, &large, 10 * MiB);
  cr_assert(!weft_mm_wants_relocation(e.mm), "13 MiB held of 1 GiB: low pressure");
  close_env(&e);
}

Test(adaptive, a_device_of_unknown_size_is_not_judged) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem kept, large;
  reserve(&e, &kept, 1 * MiB);
  reserve(&e, &large, 10 * MiB);
  cr_assert(!weft_mm_wants_relocation(e.mm), "outdated, but no capacity to judge by");
  close_env(&e);
}

Test(adaptive, a_full_device_with_nothing_outdated_asks_for_nothing) {
  env e;
  open_env(&e, 16 * MiB, 4 * MiB, 0);
  weft_mem held, more;
  cr_assert(!weft_mm_wants_relocation(e.mm), "an empty manager");
  reserve(&e, &held, 1 * MiB);
  cr_assert(!weft_mm_wants_relocation(e.mm), "nothing is outdated");
  reserve(&e, &more, 1536 * KiB);
  cr_assert(!weft_mm_wants_relocation(e.mm), "two pages on a 4 MiB device, nothing outdated");
  cr_assert_eq(weft_mm_relocate(e.mm, true), 0);
  close_env(&e);
}

Test(adaptive, a_relocation_that_moved_nothing_is_not_planned_again) {
  env e;
  open_env(&e, 16 * MiB, 24 * MiB, 0);
  weft_mem recorded, large;
  reserve(&e, &recorded, 1 * MiB);
  weft_mm_guard(e.mm, &recorded);
  reserve(&e, &large, 10 * MiB);
  cr_assert(weft_mm_wants_relocation(e.mm), "memory pressure with an outdated page");

  cr_assert_eq(weft_mm_relocate(e.mm, false), 0, "the guarded page cannot move");
  cr_assert(!weft_mm_wants_relocation(e.mm), "settled: the same shape plans nothing");
  cr_assert(!weft_mm_wants_relocation(e.mm), "asking again changes nothing");

  weft_mm_unguard(e.mm, &recorded);
  cr_assert(weft_mm_wants_relocation(e.mm),
            "a released guard is a page the last plan could not move");
  cr_assert_eq(weft_mm_relocate(e.mm, false), 1);
  cr_assert(!weft_mm_wants_relocation(e.mm));
  close_env(&e);
}

Test(adaptive, a_new_page_lets_a_stalled_relocation_plan_again) {
  env e;
  open_env(&e, 16 * MiB, 24 * MiB, 0);
  weft_mem recorded, large, more;
  reserve(&e, &recorded, 1 * MiB);
  weft_mm_guard(e.mm, &recorded);
  reserve(&e, &large, 10 * MiB);
  cr_assert_eq(weft_mm_relocate(e.mm, false), 0);
  cr_assert(!weft_mm_wants_relocation(e.mm), "stalled");

  reserve(&e, &more, 10 * MiB);
  cr_assert_eq(view(&e).current_pages, 2, "the 10 MiB took a new current page");
  cr_assert(weft_mm_wants_relocation(e.mm), "a new page is room the last plan did not have");
  weft_mm_unguard(e.mm, &recorded);
  close_env(&e);
}

/* ---- the pools beside the arena -------------------------------------------------------------- */

Test(adaptive, other_pools_do_not_move_the_statistic) {
  env e;
  open_env(&e, 64 * MiB, 0, 0);
  weft_mem dynamic, weight, probe, empty, meta;
  reserve(&e, &dynamic, 1 * MiB);

  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  reserve(&e, &weight, 40 * MiB);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  reserve(&e, &probe, 60 * MiB);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO);
  reserve(&e, &empty, 0);
  reserve(&e, &meta, SMALL_SLICE);

  expect_arena(&e, FLOOR, 1, 0, "persistent, dedicated, tiny and small leave the arena alone");
  arena_view v = view(&e);
  cr_assert_eq(v.persistent.usage.bytes_in_use, 40 * MiB);
  cr_assert_eq(v.dedicated.usage.bytes_in_use, 60 * MiB);
  cr_assert_eq(v.tiny.usage.number_allocs, 1, "the zero-size allocation is the tiny pool's");
  cr_assert_eq(v.small.usage.number_allocs, 1, "64 KiB is the small pool's");
  cr_assert_eq(v.small.usage.bytes_in_use, SMALL_SLICE);
  expect_usage(&e, 5, 101 * MiB + SMALL_SLICE, "every pool counts in the manager's usage");
  close_env(&e);
}

Test(adaptive, the_small_pool_is_strict_about_its_largest_slice) {
  env e;
  open_env(&e, 64 * MiB, 0, 0);
  weft_mem meta, past, near_page;
  reserve(&e, &meta, SMALL_SLICE);
  reserve(&e, &past, SMALL_SLICE + 1);
  reserve(&e, &near_page, 7 * MiB);
  arena_view v = view(&e);
  cr_assert_eq(v.small.usage.number_allocs, 1,
               "only the 64 KiB allocation is the small pool's: no near-page acceptance");
  cr_assert_eq(v.pages, 2, "64 KiB + 1 and 7 MiB are the arena's");
  cr_assert_eq(weft_mm_page_size(e.mm), 8 * MiB, "7 MiB grew the arena to 8 MiB pages");
  cr_assert(past.pool != meta.pool && near_page.pool != meta.pool);
  close_env(&e);
}

Test(adaptive, dedicated_allocations_are_released_once_freed) {
  env e;
  open_env(&e, 64 * MiB, 0, 0);
  weft_mem probe, weight, tick;
  weft_mm_mode(e.mm, WEFT_ALLOC_PERSISTENT);
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_DEDICATED, "the innermost window decides");
  reserve(&e, &probe, 48 * MiB);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_PERSISTENT);
  reserve(&e, &weight, 1 * MiB);
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  cr_assert_eq(weft_mm_current_mode(e.mm), WEFT_ALLOC_AUTO);

  arena_view v = view(&e);
  cr_assert_eq(v.persistent.usage.bytes_in_use, 1 * MiB,
               "closing the dedicated window restores the persistent one");
  cr_assert_eq(v.dedicated.usage.bytes_in_use, 48 * MiB);
  cr_assert_eq(v.dedicated.pages, 1, "the dedicated allocation is its own storage allocation");
  cr_assert_eq(weft_mm_usage(e.mm).bytes_reserved, 48 * MiB + 1 * MiB);

  weft_mm_free(e.mm, &probe);
  reserve(&e, &tick, 1 * MiB);
  cr_assert_eq(weft_mm_usage(e.mm).bytes_reserved, 1 * MiB + FLOOR,
               "the probe is gone; the weight and one arena page remain");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), 1 * MiB + FLOOR);
  cr_assert_eq(view(&e).dedicated.pages, 0);
  close_env(&e);
}

Test(adaptive, an_add_only_reservation_releases_no_dedicated_allocation) {
  env e;
  open_env(&e, 64 * MiB, 0, 0);
  weft_mem probe, next, tick;
  weft_mm_mode(e.mm, WEFT_ALLOC_DEDICATED);
  reserve(&e, &probe, 8 * MiB);
  weft_mm_free(e.mm, &probe);
  uint64_t bytes = weft_storage_bytes_allocated(e.storage);
  ok(try_reserve(&e, &next, 4 * MiB, WEFT_RESERVE_ADD_ONLY), "ADD_ONLY dedicated reservation");
  cr_assert_geq(weft_storage_bytes_allocated(e.storage), bytes,
                "an ADD_ONLY reservation released the freed dedicated allocation (%" PRIu64
                " -> %" PRIu64 " storage bytes)",
                bytes, weft_storage_bytes_allocated(e.storage));
  weft_mm_free(e.mm, &next);
  bytes = weft_storage_bytes_allocated(e.storage);
  ok(try_reserve(&e, &tick, 4 * MiB, WEFT_RESERVE_FORBIDDEN),
     "a FORBIDDEN dedicated reservation the freed 4 MiB allocation serves");
  cr_assert_eq(weft_storage_bytes_allocated(e.storage), bytes,
               "a FORBIDDEN reservation neither adds nor releases storage");
  weft_mm_mode(e.mm, WEFT_ALLOC_AUTO);
  close_env(&e);
}

Test(adaptive, a_forbidden_reservation_takes_no_room_from_outdated_pages) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem first, large, fill_room, refused;
  reserve(&e, &first, 1 * MiB);
  reserve(&e, &large, 10 * MiB);
  reserve(&e, &fill_room, 1 * MiB);
  cr_assert(same_page(&fill_room, &large), "the current page is full now");
  expect_kind(try_reserve(&e, &refused, 512 * KiB, WEFT_RESERVE_FORBIDDEN),
              WEFT_ERR_PAGE_UPDATE_FORBIDDEN,
              "the only room held is on an outdated page, which serves nothing new");
  cr_assert(!weft_mem_is_placed(&refused));
  expect_arena(&e, 11 * MiB, 2, 1, "nothing changed");
  close_env(&e);
}

Test(adaptive, a_page_that_does_not_fit_leaves_the_other_pages_free_to_move) {
  env e;
  open_env(&e, 16 * MiB, 0, 0);
  weft_mem a, b, c, d, large;
  reserve(&e, &a, 1536 * KiB); /* page A */
  reserve(&e, &b, 1792 * KiB); /* page B */
  reserve(&e, &c, 512 * KiB);  /* fills page A */
  reserve(&e, &d, 256 * KiB);  /* fills page B */
  cr_assert(same_page(&a, &c) && same_page(&b, &d) && !same_page(&a, &b));
  weft_mm_free(e.mm, &b);
  fill(&e, &a, 1);
  fill(&e, &c, 2);
  fill(&e, &d, 3);
  place pa = place_of(&e, &a), pc = place_of(&e, &c);
  reserve(&e, &large, 10 * MiB);
  expect_arena(&e, 11 * MiB, 3, 2, "two outdated pages, 1 MiB of room on the current one");

  /* Page A holds 2 MiB live, which the room held cannot take; page B 256 KiB. */
  cr_assert_eq(weft_mm_relocate(e.mm, false), 1, "page B moves, page A stays whole");
  expect_place(&e, &a, pa, "a");
  expect_place(&e, &c, pc, "c");
  cr_assert(same_page(&d, &large), "d moved to the current page");
  expect_bytes(&e, &a, 1, "a");
  expect_bytes(&e, &c, 2, "c");
  expect_bytes(&e, &d, 3, "d");
  expect_arena(&e, 11 * MiB, 2, 1, "page B went back at once");
  close_env(&e);
}
