/* The adaptive arena and relocation (see arena.h). */
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
static void drop_drained(weft_mm *mm) {
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
  drop_drained(mm);
}

void weft_arena_cleanup(weft_mm *mm) {
  if (!mm->has_arena) return;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i]) weft_pool_cleanup(mm->slots[i], true, mm->reserves);
  drop_drained(mm);
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

/* ---- relocation --------------------------------------------------------------------------- */

static uint64_t shape(const weft_mm *mm) {
  uint64_t h = 1469598103934665603u;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++) {
    const weft_pool *p = mm->slots[i];
    uint64_t guards = 0;
    for (uint32_t j = 0; p && j < p->npages; j++) guards += p->pages[j].guards;
    uint64_t v = p ? ((uint64_t)p->npages << 32) ^ guards ^ ((uint64_t)p->outdated << 63) : 0;
    h = (h ^ v ^ i) * 1099511628211u;
  }
  return h ? h : 1;
}

bool weft_mm_wants_relocation(const weft_mm *mm) {
  if (!mm->has_arena || mm->current < 0) return false;
  bool outdated = false, full = true;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++) {
    const weft_pool *p = mm->slots[i];
    if (!p)
      full = false;
    else if (p->outdated) {
      weft_memory_usage u = {0};
      weft_pool_usage(p, &u);
      outdated |= u.number_allocs > 0;
    }
  }
  if (!outdated) return false;
  bool pressure = false;
  if (mm->device_bytes) {
    /* After the next page, would less than one page remain? */
    uint64_t used = weft_storage_bytes_allocated(mm->storage);
    pressure = used + 2 * mm->current_page > mm->device_bytes;
  }
  if (!full && !pressure) return false;
  return mm->settled_shape != shape(mm);
}

/* Moves every live allocation of page |idx| of |from| into |to|, or none. */
static uint64_t move_page(weft_mm *mm, weft_pool *from, uint32_t idx, weft_pool *to,
                          bool may_allocate) {
  weft_page *pg = &from->pages[idx];
  uint32_t n = (uint32_t)weft_page_live(pg);
  if (n == 0 || pg->guards) return 0;
  size_t bytes = sizeof(weft_mem) * n + sizeof(weft_mem *) * n;
  weft_mem *targets = weft__calloc(mm->alloc, bytes, 16);
  if (!targets) return 0;
  weft_mem **owners = (weft_mem **)(targets + n);
  uint32_t k = 0, placed = 0;
  for (uint32_t s = 0; s < pg->nslices; s++)
    if (pg->slices[s].owner) owners[k++] = pg->slices[s].owner;
  bool ok = true;
  for (uint32_t j = 0; j < n && ok; j++) {
    weft_mem_init(&targets[j], owners[j]->size);
    if (weft_pool_try_reserve(to, &targets[j])) {
      placed++;
      continue;
    }
    bool cap;
    weft_status st = may_allocate ? weft_pool_alloc(to, &targets[j], false, &cap)
                                  : weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no room held");
    if (st) {
      weft_error_free(st);
      ok = false;
    } else {
      placed++;
    }
  }
  /* Copy the bytes; any failure abandons the page: nothing moved. */
  for (uint32_t j = 0; j < n && ok; j++) {
    weft_page *src_pg, *dst_pg;
    weft_slice *src = weft_pool_find(from, owners[j], &src_pg);
    weft_slice *dst = weft_pool_find(to, &targets[j], &dst_pg);
    if (!src_pg->mapped) continue; /* never backed: no bytes to carry */
    weft_status st = weft_pool_materialize(to, dst_pg, owners[j]->size);
    if (!st)
      st = weft_storage_copy(mm->storage, &src_pg->mem, src->offset, &dst_pg->mem, dst->offset,
                             owners[j]->size);
    if (st) {
      weft_error_free(st);
      ok = false;
    }
  }
  if (!ok) {
    for (uint32_t j = 0; j < placed; j++) weft_pool_free(to, &targets[j]);
    weft__free(mm->alloc, targets, bytes, 16);
    return 0;
  }
  /* Commit: each target slice takes its owner's identity. */
  for (uint32_t j = 0; j < n; j++) {
    weft_slice *src = weft_pool_find(from, owners[j], NULL);
    weft_page *dst_pg;
    weft_slice *dst = weft_pool_find(to, &targets[j], &dst_pg);
    weft_page_vacate(&from->pages[idx], (uint32_t)(src - from->pages[idx].slices), true);
    dst->owner = owners[j];
    dst->owner_id = owners[j]->id;
    owners[j]->pool = to;
    owners[j]->page = targets[j].page;
    owners[j]->slice = targets[j].slice;
  }
  weft__free(mm->alloc, targets, bytes, 16);
  weft_pool_release_page(from, idx);
  return n;
}

uint64_t weft_mm_relocate(weft_mm *mm, bool may_allocate) {
  if (!mm->has_arena || mm->current < 0) return 0;
  weft_pool *to = mm->slots[mm->current];
  uint64_t moved = 0;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++) {
    weft_pool *p = mm->slots[i];
    if (!p || !p->outdated) continue;
    for (uint32_t j = p->npages; j-- > 0;) {
      weft_pool_coalesce(p, j);
      if (weft_page_is_free(&p->pages[j]) && !p->pages[j].guards) {
        weft_pool_release_page(p, j);
        continue;
      }
      moved += move_page(mm, p, j, to, may_allocate);
    }
  }
  drop_drained(mm);
  weft_storage_flush(mm->storage);
  mm->settled_shape = moved ? 0 : shape(mm);
  return moved;
}
