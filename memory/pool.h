/* Pools: private to memory/. A pool is an array of pages, each an ordered
 * list of slices covering it. Every pool kind uses the same page structure:
 *
 *   sliced      pages of page_size carved first-fit (the lowest page, then the
 *               lowest offset, that holds the request), free neighbours
 *               merged at once; O(log pages + log free slices) per reserve
 *               or free, whatever the number of live allocations
 *   exclusive   one slice per page; a free page is reused by the best fit
 *   persistent  one page per slice of exactly its effective size
 *   direct      one page per slice, exact-size reuse, reclaim at a ceiling;
 *               freed pages become tombstones so live indices never move
 *
 * Descriptors (weft_mem) hold (pool, page, slice). A slice's slot never
 * moves; whoever moves a page (a release compacts the page array) or the
 * bytes (relocation) rewrites its owners' locations. */
#ifndef WEFT_MEMORY_POOL_H
#define WEFT_MEMORY_POOL_H

#include "memory/memory.h"

typedef struct weft_mm weft_mm;

struct weft_pool {
  weft_pool_config cfg; /* resolved: sizes aligned, defaults filled */
  weft_mm *mm;
  weft_page *pages;
  uint32_t npages, cap;
  uint32_t max_pages; /* sliced, capped: pages allowed; UINT32_MAX: uncapped */
  uint64_t pages_peak, largest_alloc;
  uint64_t last_check; /* exclusive: reservation count at the last periodic check */
  /* Sliced: a max-tree over the pages, leaf i = 1 + the largest free
   * capacity of page i (0: no free slice, or guarded), so first fit finds
   * its page by descending it. seg_leaves: a power of two >= npages;
   * seg_stale: a release compacted the pages, rebuilt before the next use. */
  uint64_t *seg;
  uint32_t seg_leaves;
  bool seg_stale;
  uint32_t *vacant; /* direct: tombstoned page indices, reused first */
  uint32_t nvacant, vacant_cap;
  bool cap_warned;   /* sliced, capped: one warning per layout */
  bool outdated;     /* arena: serves nothing new, drains */
  bool arena;        /* an arena slot */
  bool release_free; /* dedicated: free pages go on the next tick */
};

/* Alignment padding of |size|. */
static inline uint64_t weft_pad(uint64_t size, uint64_t align) {
  return (align - size % align) % align;
}
static inline uint64_t weft_align_up(uint64_t size, uint64_t align) {
  return size + weft_pad(size, align);
}

weft_pool *weft_pool_new(weft_mm *mm, const weft_pool_config *cfg);
void weft_pool_destroy(weft_pool *p); /* frees every mapped page */

bool weft_pool_accept(const weft_pool *p, uint64_t size);
/* Serves |m| from room the pool already holds; false when there is none. */
bool weft_pool_try_reserve(weft_pool *p, weft_mem *m);
/* Adds storage (a page or a slice) and serves |m| from it. |may_release|:
 * a direct pool may free slices to stay under its ceiling (ALLOW mode only).
 * |*cap_hit|: the pool is at its cap (the caller may spill to the next pool). */
WEFT_MUST_USE_RESULT weft_status weft_pool_alloc(weft_pool *p, weft_mem *m, bool may_release,
                                                 bool *cap_hit);
/* Frees |m|'s slice; on a sliced page it merges with its free neighbours. */
void weft_pool_free(weft_pool *p, weft_mem *m);
/* Periodic (explicit false) or explicit cleanup; |reserves|: the manager's
 * reservation count (exclusive periods). */
void weft_pool_cleanup(weft_pool *p, bool explicit_, uint64_t reserves);

/* Whether a periodic cleanup of |p| can do anything (the manager's tick
 * calls weft_pool_cleanup only then: it runs before every ALLOW reservation). */
static inline bool weft_pool_periodic(const weft_pool *p) {
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED:
    return p->outdated;
  case WEFT_POOL_EXCLUSIVE:
    return p->cfg.dealloc_period != WEFT_NO_PERIOD;
  case WEFT_POOL_DIRECT:
  case WEFT_POOL_PERSISTENT:
    return p->release_free;
  }
  return true;
}

/* The page and slice |m| owns, or NULL (stale, unplaced, elsewhere). */
weft_slice *weft_pool_find(const weft_pool *p, const weft_mem *m, weft_page **page);
/* Maps a lazy page (dry run) for an allocation of |size| bytes;
 * StorageMappingFailed{size} on failure (the message names the page size). */
WEFT_MUST_USE_RESULT weft_status weft_pool_materialize(weft_pool *p, weft_page *pg, uint64_t size);

/* Page-level helpers shared with the manager and the arena's relocation. */
void weft_pool_release_page(weft_pool *p, uint32_t idx); /* frees and compacts */
/* Adds |delta| (+1 or -1; never below 0) to page |page|'s guards: a guarded
 * page serves no new reservation. */
void weft_pool_guard(weft_pool *p, uint32_t page, int delta);
bool weft_page_is_free(const weft_page *pg);
uint64_t weft_page_live(const weft_page *pg); /* live slices */

void weft_pool_usage(const weft_pool *p, weft_memory_usage *u);
void weft_pool_fill_report(const weft_pool *p, weft_pool_report *r);
/* Checks this pool's structure; NULL or a Validation error. */
WEFT_MUST_USE_RESULT weft_status weft_pool_validate(const weft_pool *p);

#endif
