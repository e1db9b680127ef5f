/* The adaptive arena (see arena.h); relocation off its outdated pools is relocate.c. */
#include <inttypes.h>
#include <string.h>

#include "core/alloc.h"
#include "memory/arena.h"

#define MiB (UINT64_C(1) << 20)

uint64_t weft_arena_fit(uint64_t size, uint64_t current, uint64_t align, uint64_t max_page) {
  uint64_t top = max_page / align * align; /* the largest page, aligned down */
  if (size > top || size + weft_pad(size, align) > top) return UINT64_MAX;
  if (size + weft_pad(size, align) <= current) return 0;
  uint64_t min_page = weft_align_up(2 * MiB < max_page ? 2 * MiB : max_page, align);
  uint64_t page = weft_align_up(size + MiB, MiB); /* one MiB of slack, 1 MiB granules */
  page = weft_align_up(page, align);
  if (page < min_page) page = min_page;
  if (page > top) page = top;
  return page;
}

void weft_arena_init(weft_mm *mm, bool enabled) {
  mm->has_arena = enabled;
  memset(mm->slots, 0, sizeof(mm->slots));
  mm->current = -1;
  mm->min_page = weft_align_up(2 * MiB < mm->max_page ? 2 * MiB : mm->max_page, mm->align);
  mm->current_page = mm->min_page;
  mm->settled_shape = 0;
}

void weft_arena_destroy(weft_mm *mm) {
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++) {
    weft_pool_destroy(mm->slots[i]);
    mm->slots[i] = NULL;
  }
  mm->current = -1;
}

/* Frees the slots of outdated pools that hold no page any more. */
void weft_arena_drop_drained(weft_mm *mm) {
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++) {
    weft_pool *p = mm->slots[i];
    if (p && p->outdated && p->npages == 0) {
      weft_pool_destroy(p);
      mm->slots[i] = NULL;
    }
  }
}

void weft_arena_tick(weft_mm *mm) {
  if (!mm->has_arena || mm->current < 0) return;
  bool any = false; /* most ticks find nothing outdated: one pass to tell */
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS && !any; i++)
    any = mm->slots[i] && mm->slots[i]->outdated;
  if (!any) return;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i] && mm->slots[i]->outdated)
      weft_pool_cleanup(mm->slots[i], false, mm->reserves);
  weft_arena_drop_drained(mm);
}

void weft_arena_cleanup(weft_mm *mm) {
  if (!mm->has_arena) return;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i]) weft_pool_cleanup(mm->slots[i], true, mm->reserves);
  weft_arena_drop_drained(mm);
}

void weft_arena_usage(const weft_mm *mm, weft_memory_usage *u) {
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i]) weft_pool_usage(mm->slots[i], u);
}

/* A new current pool of |page| bytes serving |m| from its first page. Only
 * when that succeeds does it replace the current pool, which becomes
 * outdated: a growth the device refused leaves the page size unchanged. */
static weft_status grow_to(weft_mm *mm, uint64_t page, weft_mem *m) {
  int slot = -1;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS && slot < 0; i++)
    if (!mm->slots[i]) slot = (int)i;
  if (slot < 0)
    return weft_error_make_sized(WEFT_ERR_PAGE_SIZES_EXHAUSTED, m->size,
                                 "the arena holds %u page sizes already; a cleanup relocates what "
                                 "lives on outdated pages",
                                 WEFT_ARENA_SLOTS);
  weft_pool_config c = {
      .kind = WEFT_POOL_SLICED, .page_size = page, .max_slice_size = page, .strict = true};
  weft_pool *p = weft_pool_new(mm, &c);
  if (!p) return weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory for an arena pool");
  p->arena = true;
  bool cap;
  weft_status st = weft_pool_alloc(p, m, false, &cap);
  if (st) {
    weft_pool_destroy(p);
    return st;
  }
  if (mm->current >= 0) mm->slots[mm->current]->outdated = true;
  mm->slots[slot] = p;
  mm->current = slot;
  mm->current_page = page;
  mm->settled_shape = 0;
  return NULL;
}

weft_status weft_arena_reserve(weft_mm *mm, weft_mem *m, weft_reserve_mode mode) {
  weft_pool *cur = mm->current >= 0 ? mm->slots[mm->current] : NULL;
  if (cur && weft_pool_try_reserve(cur, m)) return NULL;
  if (mode == WEFT_RESERVE_FORBIDDEN)
    return weft_error_make_sized(WEFT_ERR_PAGE_UPDATE_FORBIDDEN, m->size,
                                 "no room for %" PRIu64 " bytes in the arena's pages, and this "
                                 "reservation may not add a page",
                                 m->size);
  uint64_t f = weft_arena_fit(m->size, mm->current_page, mm->align, mm->max_page);
  if (f == UINT64_MAX)
    return weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, m->size,
                                 "the largest page is %" PRIu64 " bytes", mm->max_page);
  if (!cur) return grow_to(mm, f ? f : mm->current_page, m);
  if (f == 0) {
    bool cap;
    weft_status st = weft_pool_alloc(cur, m, false, &cap);
    if (!st) mm->settled_shape = 0;
    return st;
  }
  return grow_to(mm, f, m);
}
