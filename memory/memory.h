/* The memory manager of one stream slot: pools of pages carved into slices,
 * routed by size, with reserve modes, persistent and dedicated windows, dry
 * runs with lazy pages, cleanup and relocation, and usage reports.
 *
 * Owned by the scheduler thread: nothing here is thread-safe on its own.
 *
 *   weft_mm *mm; weft_mm_create(&cfg, storage, alloc, &mm);
 *   weft_mem m; weft_mem_init(&m, 1000);          // a descriptor, unplaced
 *   weft_mm_reserve(mm, &m, WEFT_RESERVE_ALLOW);   // placed in some pool
 *   weft_mm_resolve(mm, &m, &ptr);                 // identity-checked address
 *   weft_mm_free(mm, &m);                          // the slice is free again
 *
 * A descriptor (weft_mem) holds the location of its allocation; pools rewrite
 * it when they renumber pages or slices, and relocation rewrites it when it
 * moves the bytes. Every lookup checks that the slice at that location is
 * still owned by this descriptor (id compare): a stale or unplaced descriptor
 * gets NotFound, never a wrong address. */
#ifndef WEFT_MEMORY_MEMORY_H
#define WEFT_MEMORY_MEMORY_H

#include "memory/storage.h"

/* ---- descriptors ------------------------------------------------------------------------ */

typedef struct weft_pool weft_pool;

typedef struct weft_mem {
  uint64_t id;     /* identity: unique per process, never 0 */
  uint64_t size;   /* bytes requested */
  weft_pool *pool; /* NULL: unplaced */
  uint32_t page, slice;
  /* "Free" is refs == 0 (no handle, binding or pin); "mutable in place" is
   * handle_refs <= 1. The owner of the descriptor maintains both. */
  uint32_t refs, handle_refs;
} weft_mem;

void weft_mem_init(weft_mem *m, uint64_t size);
static inline bool weft_mem_is_placed(const weft_mem *m) {
  return m->pool != NULL;
}
static inline bool weft_mem_can_mut(const weft_mem *m) {
  return m->handle_refs <= 1;
}

/* ---- pages and slices ---------------------------------------------------------------------- */

/* "No slice": the end of a neighbour link or a tree link. */
#define WEFT_NIL UINT32_MAX

/* A page's slices live in a pool of slots (weft_page.slices) whose indices
 * never move: a descriptor's |slice| is its slot, so a split or a merge
 * rewrites no other descriptor. The slices covering a page are linked in
 * offset order (prev, next: boundary links, O(1) merging with neighbours);
 * unused slots are chained through |next| from weft_page.spare. On a sliced
 * page the free slices also form a treap ordered by offset (left, right,
 * prio) whose |max| is the largest capacity in the subtree: first fit
 * descends it in O(log free slices). 64 bytes. */
typedef struct weft_slice {
  uint64_t offset, size; /* capacity = size + padding */
  uint32_t padding;      /* < the storage alignment (weft_mm_create refuses one >= 2^32) */
  uint32_t prio;         /* free slices: the treap's heap priority */
  weft_mem *owner;       /* NULL: free */
  uint64_t owner_id;     /* identity the owner must still have */
  uint64_t max;          /* free slices: the largest capacity in this subtree */
  uint32_t prev, next;   /* neighbours in offset order; a spare slot: the next spare */
  uint32_t left, right;  /* free slices: treap children */
} weft_slice;

typedef struct weft_page {
  weft_storage_handle mem; /* mem.id == 0 while unmapped (lazy) */
  uint64_t id;             /* page identity, given even to unmapped pages */
  uint64_t size;
  bool mapped;
  uint32_t guards;     /* relocation guards: a guarded page never moves */
  uint32_t free_count; /* exclusive pools: the age of a free page */
  weft_slice *slices;  /* slots [0, top) of cap; the page's slices start at |head| */
  uint32_t nslices;    /* slices covering the page; 0: a tombstone (direct pools) */
  uint32_t cap, top;
  uint32_t head;  /* the slice at offset 0 */
  uint32_t spare; /* unused slots below |top|, chained through next */
  /* Sliced pages: the treap of free slices (WEFT_NIL: none), their number,
   * and the priority sequence (deterministic, so dry and real runs agree).
   * Free slices are never adjacent: a free merges with its free neighbours
   * at once, and freeing never allocates (it only returns slots). */
  uint32_t root, nfree, prio_seq;
} weft_page;

typedef struct weft_mm_config {
  weft_layout layout;
  uint64_t max_page;     /* largest page the device can hold */
  uint64_t device_bytes; /* total device memory (relocation pressure); 0: unknown */
  weft_persistent_policy persistent;
} weft_mm_config;

typedef struct weft_mm weft_mm;

/* "sliced", "exclusive", "direct" or "persistent" (snapshots and logs). */
const char *weft_pool_kind_name(weft_pool_kind k);

/* Validates |cfg->layout| (every pool config error is InvalidArgument naming
 * the pool and the rule) and builds the pools. */
WEFT_MUST_USE_RESULT weft_status weft_mm_create(const weft_mm_config *cfg, weft_storage *storage,
                                                const weft_allocator *alloc, weft_mm **out);
/* Frees every page (live allocations included). */
void weft_mm_destroy(weft_mm *mm);

/* Places |m| (unplaced) in a pool. Errors: BufferTooBig (no pool can ever
 * hold it), OutOfMemory (storage refused a page), PageSizesExhausted (the
 * arena holds 64 page sizes), PageUpdateForbidden (FORBIDDEN and no room). */
WEFT_MUST_USE_RESULT weft_status weft_mm_reserve(weft_mm *mm, weft_mem *m, weft_reserve_mode mode);
/* The slice of |m| becomes free (its bytes may be reused at once). */
void weft_mm_free(weft_mm *mm, weft_mem *m);
/* The address of |m|'s bytes; maps a lazy page first (a failure there is
 * StorageMappingFailed{size, source}). NotFound for stale/unplaced. */
WEFT_MUST_USE_RESULT weft_status weft_mm_resolve(weft_mm *mm, weft_mem *m, void **out);
/* Identity check only: NULL if |m| resolves to a slice it owns. */
WEFT_MUST_USE_RESULT weft_status weft_mm_find(const weft_mm *mm, const weft_mem *m);

/* Explicit cleanup: frees every free page (and free persistent/direct
 * slices); unmapped pages are forgotten, never deallocated. */
void weft_mm_cleanup(weft_mm *mm);
/* Relocates live allocations off outdated arena pages (all or nothing per
 * page; guarded pages stay). |may_allocate|: targets may add pages. Returns
 * the number of allocations moved. */
uint64_t weft_mm_relocate(weft_mm *mm, bool may_allocate);
/* Whether a relocation is worth planning now (something is outdated and the
 * arena is full or memory pressure is high), and not already settled. */
bool weft_mm_wants_relocation(const weft_mm *mm);

/* Guards: a guarded allocation's page never moves (e.g. pinned by a consumer). */
void weft_mm_guard(weft_mm *mm, const weft_mem *m);
void weft_mm_unguard(weft_mm *mm, const weft_mem *m);

/* Persistent / dedicated windows: a stack; the innermost decides. AUTO pops. */
void weft_mm_mode(weft_mm *mm, weft_alloc_mode mode);
weft_alloc_mode weft_mm_current_mode(const weft_mm *mm);

/* Dry run: new pages get identities but no backing until first resolved. */
void weft_mm_set_dry_run(weft_mm *mm, bool on);

/* Replaces the layout. Refused (Validation, "pools in use: N bytes") while
 * the dynamic pools hold live memory, after an explicit cleanup; resets
 * peaks. The persistent pool is kept. */
WEFT_MUST_USE_RESULT weft_status weft_mm_install(weft_mm *mm, const weft_layout *layout);

weft_memory_usage weft_mm_usage(const weft_mm *mm);
/* Per-pool reports in routing order, then the persistent pool, then the
 * dedicated pool; |*n| in: capacity of |out|, out: number written (or needed). */
void weft_mm_report(const weft_mm *mm, weft_pool_report *out, size_t *n);
/* The largest free extent any page holds now (a free exclusive, persistent
 * or direct page counts whole). */
uint64_t weft_mm_largest_free(const weft_mm *mm);
/* Bytes of free slices and free pages: what the pages held can still serve
 * (the rest of bytes_reserved is in use, padding, or an exclusive page's
 * room beyond its allocation). */
uint64_t weft_mm_free_bytes(const weft_mm *mm);
uint64_t weft_mm_page_size(const weft_mm *mm); /* adaptive: the current page size; else 0 */

/* Checks every invariant: each page's slices are ordered, disjoint and cover
 * it; each owned slice's owner points back at it with the same id; no two
 * live allocations overlap; usage counters equal a recount. NULL, or a
 * Validation error naming the first violation. For tests. */
WEFT_MUST_USE_RESULT weft_status weft_mm_validate(const weft_mm *mm);
/* Storage allocations currently held by this manager (mapped pages and slices). */
uint64_t weft_mm_storage_allocs(const weft_mm *mm);
/* Slices the sliced pools have read so far to place, coalesce and renumber:
 * the work a reservation costs, which tests bound (it must not grow with the
 * number of live allocations). */
uint64_t weft_mm_slice_visits(const weft_mm *mm);

#endif
