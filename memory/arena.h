/* The adaptive arena: up to WEFT_ARENA_SLOTS sliced pools, one per page size
 * the workload grew through. Only the current pool serves new reservations;
 * outdated ones drain, return each page as it empties, and are relocated. */
#ifndef WEFT_MEMORY_ARENA_H
#define WEFT_MEMORY_ARENA_H

#include "memory/mm_internal.h"

/* The page size the adaptive arena would use for |size| in a page of
 * |current|: 0 = it fits, UINT64_MAX = too large, else the new page size. */
uint64_t weft_arena_fit(uint64_t size, uint64_t current, uint64_t align, uint64_t max_page);
void weft_arena_init(weft_mm *mm, bool enabled);
void weft_arena_destroy(weft_mm *mm);
WEFT_MUST_USE_RESULT weft_status weft_arena_reserve(weft_mm *mm, weft_mem *m,
                                                    weft_reserve_mode mode);
void weft_arena_tick(weft_mm *mm);    /* periodic: outdated pools return empty pages */
void weft_arena_cleanup(weft_mm *mm); /* explicit */
void weft_arena_usage(const weft_mm *mm, weft_memory_usage *u);
/* Outdated pools that have drained go away (their last page returned). */
void weft_arena_drop_drained(weft_mm *mm);

#endif
