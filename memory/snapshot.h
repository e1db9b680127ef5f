/* The memory manager as JSON (weft_memory_snapshot's per-stream part) and
 * where an allocation sits. Scheduler thread only, like the manager.
 *
 * weft_mm_snapshot writes, into the object the caller has open, the
 * manager's members: "usage" (weft_mm_usage), "free_bytes", "largest_free",
 * "arena_page_size", "mode", "dry_run" and "pools", one object per pool in
 * weft_mm_report's order (the layout's pools in routing order, the arena's
 * slots, the persistent pool, the dedicated pool), each with its
 * configuration, "usage", "free_bytes" and "pages"; a page lists the slices
 * covering it in offset order. A slice with an owner is "in_use" or, when
 * its page is guarded or |owner| says so, "pinned"; the caller's |owner|
 * callback adds the owner's own members (buffer id, label, taint) to the
 * slice's object. docs/observability.md lists every field. */
#ifndef WEFT_MEMORY_SNAPSHOT_H
#define WEFT_MEMORY_SNAPSHOT_H

#include "core/json_writer.h"
#include "memory/memory.h"

/* Writes the members describing |owner| into the open slice object and
 * returns whether the allocation is pinned (may neither move nor be freed
 * now, e.g. bound by work not yet complete). */
typedef bool (*weft_mm_owner_fn)(void *ctx, weft_json *j, const weft_mem *owner);

void weft_mm_snapshot(const weft_mm *mm, weft_json *j, weft_mm_owner_fn owner, void *ctx);

/* Where a placed allocation sits. */
typedef struct weft_mm_place {
  weft_pool_kind kind; /* of its pool */
  uint64_t page;       /* the page's identity (unique in its manager) */
  uint64_t offset;     /* in the page */
  uint64_t capacity;   /* its slice: size + padding */
} weft_mm_place;

/* false when |m| is not placed in |mm| (stale, unplaced, elsewhere). */
bool weft_mm_locate(const weft_mm *mm, const weft_mem *m, weft_mm_place *out);

#endif /* WEFT_MEMORY_SNAPSHOT_H */
