/* Relocation: live allocations move off the arena's outdated pools (and off
 * sparse pages) into the current one, so those pages can go back. Needs a
 * quiescent device: workers hold addresses resolved at dispatch. */
#include <inttypes.h>
#include <string.h>

#include "core/alloc.h"
#include "memory/arena.h"

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
  for (uint32_t s = pg->head; s != WEFT_NIL; s = pg->slices[s].next)
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
    src->owner = NULL; /* the page goes below: nothing may point at a moved owner */
    src->owner_id = 0;
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
      if (weft_page_is_free(&p->pages[j]) && !p->pages[j].guards) {
        weft_pool_release_page(p, j);
        continue;
      }
      moved += move_page(mm, p, j, to, may_allocate);
    }
  }
  weft_arena_drop_drained(mm);
  weft_storage_flush(mm->storage);
  mm->settled_shape = moved ? 0 : shape(mm);
  return moved;
}
