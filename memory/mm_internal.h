/* The manager's state, shared by the files of memory/. */
#ifndef WEFT_MEMORY_MM_INTERNAL_H
#define WEFT_MEMORY_MM_INTERNAL_H

#include "memory/pool.h"

/* The adaptive arena's page-size slots (arena.h). */
#define WEFT_ARENA_SLOTS 64u

#define WEFT_MAX_POOLS 254u

struct weft_mm {
  weft_storage *storage;
  const weft_allocator *alloc;
  uint64_t align, max_page, device_bytes;
  weft_persistent_policy persistent_policy;
  weft_layout_kind layout;
  weft_pool *dynamic[WEFT_MAX_POOLS]; /* routing order (arena slots are separate) */
  uint32_t ndynamic;
  weft_pool *persistent, *dedicated;
  /* the adaptive arena */
  bool has_arena;
  weft_pool *slots[WEFT_ARENA_SLOTS];
  int current;           /* slot serving new reservations, -1: none yet */
  uint64_t current_page; /* never shrinks */
  uint64_t min_page;
  uint64_t settled_shape; /* arena shape when relocation last found nothing; 0: unsettled */
  /* modes */
  weft_alloc_mode *modes; /* the window stack, grown as windows nest */
  uint32_t depth, modes_cap;
  bool dry_run;
  uint64_t reserves, page_ids;
  uint64_t slice_visits; /* slices read by placement, coalescing and renumbering */
};

#endif
