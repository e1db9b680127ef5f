/* The four pool kinds over one page structure (see pool.h). Placement is
 * deterministic: pages are scanned in index order, slices in offset order. */
#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "memory/mm_internal.h"

/* A descriptor, unplaced; ids are unique in the process (the pools key on them). */
static _Atomic uint64_t mem_ids = 0;

void weft_mem_init(weft_mem *m, uint64_t size) {
  memset(m, 0, sizeof(*m));
  m->id = atomic_fetch_add_explicit(&mem_ids, 1, memory_order_relaxed) + 1;
  m->size = size;
}

/* ---- small dynamic arrays ---------------------------------------------------------------- */

static weft_status no_meta(void) {
  return weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory for pool metadata");
}

/* ---- pages ------------------------------------------------------------------------------- */

bool weft_page_is_free(const weft_page *pg) {
  for (uint32_t i = 0; i < pg->nslices; i++)
    if (pg->slices[i].owner) return false;
  return true;
}

uint64_t weft_page_live(const weft_page *pg) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < pg->nslices; i++) n += pg->slices[i].owner != NULL;
  return n;
}

static bool is_tombstone(const weft_page *pg) {
  return pg->nslices == 0;
}

/* ---- the free-slice list of a sliced page ------------------------------------------------- */

/* The position of the first entry >= |s| in |pg|'s free list. */
static uint32_t free_pos(const weft_page *pg, uint32_t s) {
  uint32_t lo = 0, hi = pg->nfree;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (pg->free_idx[mid] < s)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

/* Room for |need| entries (the slices array's capacity). */
static bool free_reserve(const weft_allocator *a, weft_page *pg, uint32_t need) {
  return weft__grow(a, (void **)&pg->free_idx, &pg->free_cap, need, sizeof(uint32_t));
}

/* Rewrites the location of every owner on page |idx| from slice |from| on
 * (after moves). */
static void renumber_from(weft_pool *p, uint32_t idx, uint32_t from) {
  weft_page *pg = &p->pages[idx];
  if (from < pg->nslices) p->mm->slice_visits += pg->nslices - from;
  for (uint32_t s = from; s < pg->nslices; s++) {
    weft_mem *o = pg->slices[s].owner;
    if (o) {
      o->pool = p;
      o->page = idx;
      o->slice = s;
    }
  }
}

static void set_owner(weft_pool *p, uint32_t page, uint32_t s, weft_mem *m, uint64_t size,
                      uint64_t padding) {
  weft_slice *sl = &p->pages[page].slices[s];
  sl->owner = m;
  sl->owner_id = m->id;
  sl->size = size;
  sl->padding = padding;
  m->pool = p;
  m->page = page;
  m->slice = s;
  if (size > p->largest_alloc) p->largest_alloc = size;
}

/* Appends a page of |size| bytes, mapped now or lazily (dry run), with one
 * free slice covering it. Returns its index via |*idx|. */
static weft_status add_page(weft_pool *p, uint64_t size, uint32_t *idx) {
  weft_mm *mm = p->mm;
  uint32_t at = p->npages;
  if (p->nvacant)
    at = p->vacant[--p->nvacant];
  else if (!weft__grow(mm->alloc, (void **)&p->pages, &p->cap, p->npages + 1, sizeof(weft_page)))
    return no_meta();
  weft_page pg;
  memset(&pg, 0, sizeof(pg));
  pg.size = size;
  pg.id = ++mm->page_ids;
  bool sliced = p->cfg.kind == WEFT_POOL_SLICED;
  if (!weft__grow(mm->alloc, (void **)&pg.slices, &pg.cap, 1, sizeof(weft_slice)) ||
      (sliced && !free_reserve(mm->alloc, &pg, 1))) {
    weft__free(mm->alloc, pg.slices, (size_t)pg.cap * sizeof(weft_slice), 16);
    if (at != p->npages) p->vacant[p->nvacant++] = at;
    return no_meta();
  }
  if (!mm->dry_run) {
    weft_status st = weft_storage_alloc(mm->storage, size, &pg.mem);
    if (st) {
      weft__free(mm->alloc, pg.slices, (size_t)pg.cap * sizeof(weft_slice), 16);
      weft__free(mm->alloc, pg.free_idx, (size_t)pg.free_cap * sizeof(uint32_t), 16);
      if (at != p->npages) p->vacant[p->nvacant++] = at;
      return st;
    }
    pg.mapped = true;
  }
  pg.nslices = 1;
  pg.slices[0] = (weft_slice){.offset = 0, .size = size, .padding = 0, .owner = NULL};
  if (sliced) pg.free_idx[pg.nfree++] = 0;
  p->pages[at] = pg;
  if (at == p->npages) p->npages++;
  uint64_t live = p->npages - p->nvacant;
  if (live > p->pages_peak) p->pages_peak = live;
  *idx = at;
  return NULL;
}

static void free_page_storage(weft_pool *p, weft_page *pg) {
  if (pg->mapped) weft_storage_dealloc(p->mm->storage, &pg->mem);
  weft__free(p->mm->alloc, pg->slices, (size_t)pg->cap * sizeof(weft_slice), 16);
  weft__free(p->mm->alloc, pg->free_idx, (size_t)pg->free_cap * sizeof(uint32_t), 16);
  memset(pg, 0, sizeof(*pg));
}

void weft_pool_release_page(weft_pool *p, uint32_t idx) {
  free_page_storage(p, &p->pages[idx]);
  if (p->cfg.kind == WEFT_POOL_DIRECT) {
    /* A tombstone: the indices of live pages never move. */
    if (weft__grow(p->mm->alloc, (void **)&p->vacant, &p->vacant_cap, p->nvacant + 1,
                   sizeof(uint32_t)))
      p->vacant[p->nvacant++] = idx;
    return;
  }
  memmove(&p->pages[idx], &p->pages[idx + 1], (size_t)(p->npages - idx - 1) * sizeof(weft_page));
  p->npages--;
  for (uint32_t i = idx; i < p->npages; i++) renumber_from(p, i, 0);
}

weft_status weft_pool_materialize(weft_pool *p, weft_page *pg, uint64_t size) {
  if (pg->mapped) return NULL;
  weft_status st = weft_storage_alloc(p->mm->storage, pg->size, &pg->mem);
  if (st)
    return weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, size, st,
                           "the page of %" PRIu64 " bytes it was carved from in a dry run could "
                           "not be backed",
                           pg->size);
  pg->mapped = true;
  return NULL;
}

/* ---- slices ------------------------------------------------------------------------------ */

/* Takes free slice |s| of page |page| for |m| (effective bytes |eff|),
 * splitting off the remainder as a new free slice. */
static bool carve(weft_pool *p, uint32_t page, uint32_t s, weft_mem *m, uint64_t eff) {
  weft_page *pg = &p->pages[page];
  uint64_t capacity = pg->slices[s].size + pg->slices[s].padding;
  uint32_t k = free_pos(pg, s); /* s is free: its entry */
  if (capacity > eff) {
    if (!weft__grow(p->mm->alloc, (void **)&pg->slices, &pg->cap, pg->nslices + 1,
                    sizeof(weft_slice)) ||
        !free_reserve(p->mm->alloc, pg, pg->nslices + 1))
      return false;
    memmove(&pg->slices[s + 2], &pg->slices[s + 1],
            (size_t)(pg->nslices - s - 1) * sizeof(weft_slice));
    pg->slices[s + 1] = (weft_slice){
        .offset = pg->slices[s].offset + eff, .size = capacity - eff, .padding = 0, .owner = NULL};
    pg->nslices++;
    renumber_from(p, page, s + 2); /* only the slices after the split moved */
    if (pg->dirty && pg->dirty_lo > s) pg->dirty_lo++;
    if (pg->dirty && pg->dirty_hi > s) pg->dirty_hi++;
    /* The remainder takes s's entry; every later free slice moved up one. */
    pg->free_idx[k] = s + 1;
    for (uint32_t j = k + 1; j < pg->nfree; j++) pg->free_idx[j]++;
  } else {
    memmove(&pg->free_idx[k], &pg->free_idx[k + 1], (size_t)(pg->nfree - k - 1) * sizeof(uint32_t));
    pg->nfree--;
  }
  /* Padding keeps every byte of the slice's capacity: nothing is lost on reuse. */
  set_owner(p, page, s, m, m->size, eff - m->size);
  return true;
}

/* Merges runs of free slices. Between two passes a run can only form around
 * a slice freed since (the last pass left none, and a carve splits a free
 * slice whose neighbours are owned), so the pass reads only the window from
 * just before the lowest freed slice to just after the highest, then moves
 * the tail once if anything merged. */
void weft_pool_coalesce(weft_pool *p, uint32_t page) {
  weft_page *pg = &p->pages[page];
  if (!pg->dirty) return; /* nothing was freed since the last pass */
  pg->dirty = false;
  bool sliced = p->cfg.kind == WEFT_POOL_SLICED;
  uint32_t n = pg->nslices;
  uint32_t start = pg->dirty_lo ? pg->dirty_lo - 1 : 0;
  uint32_t end = pg->dirty_hi + 2 < n ? pg->dirty_hi + 2 : n;
  /* The window's free-list entries are rewritten in place: merging only
   * removes free slices, so they never outgrow the old ones. */
  uint32_t k0 = sliced ? free_pos(pg, start) : 0, k1 = sliced ? free_pos(pg, end) : 0, c = 0;
  uint32_t w = start;
  p->mm->slice_visits += end - start;
  for (uint32_t r = start; r < end; r++) {
    weft_slice sl = pg->slices[r];
    if (!sl.owner) { /* a free slice's capacity is all size */
      sl.size += sl.padding;
      sl.padding = 0;
    }
    if (!sl.owner && w > 0 && !pg->slices[w - 1].owner) {
      pg->slices[w - 1].size += sl.size;
      continue;
    }
    if (!sl.owner && sliced) pg->free_idx[k0 + c++] = w;
    pg->slices[w++] = sl;
  }
  if (sliced) {
    uint32_t shift = end - w;
    memmove(&pg->free_idx[k0 + c], &pg->free_idx[k1], (size_t)(pg->nfree - k1) * sizeof(uint32_t));
    pg->nfree = k0 + c + (pg->nfree - k1);
    for (uint32_t j = k0 + c; shift && j < pg->nfree; j++) pg->free_idx[j] -= shift;
  }
  if (w < end) {
    memmove(&pg->slices[w], &pg->slices[end], (size_t)(n - end) * sizeof(weft_slice));
    pg->nslices = n - (end - w);
    renumber_from(p, page, start);
  }
}

weft_slice *weft_pool_find(const weft_pool *p, const weft_mem *m, weft_page **page) {
  if (m->pool != p || m->page >= p->npages) return NULL;
  weft_page *pg = &p->pages[m->page];
  if (m->slice >= pg->nslices) return NULL;
  weft_slice *sl = &pg->slices[m->slice];
  if (sl->owner != m || sl->owner_id != m->id) return NULL;
  if (page) *page = pg;
  return sl;
}

/* ---- creation ---------------------------------------------------------------------------- */

weft_pool *weft_pool_new(weft_mm *mm, const weft_pool_config *cfg) {
  weft_pool *p = weft__calloc(mm->alloc, sizeof(*p), 16);
  if (!p) return NULL;
  p->mm = mm;
  p->cfg = *cfg;
  p->max_pages = UINT32_MAX;
  if (cfg->kind == WEFT_POOL_SLICED && cfg->max_pool_size) {
    uint64_t cap = cfg->max_pool_size;
    if (cap < p->cfg.page_size) {
      uint64_t page = cap / mm->align * mm->align;
      p->cfg.page_size = page > mm->align ? page : mm->align;
      if (p->cfg.max_slice_size > p->cfg.page_size) p->cfg.max_slice_size = p->cfg.page_size;
    }
    uint64_t n = cap / p->cfg.page_size;
    p->max_pages = (uint32_t)(n > 65535 ? 65535 : n);
  }
  return p;
}

void weft_pool_destroy(weft_pool *p) {
  if (!p) return;
  for (uint32_t i = 0; i < p->npages; i++) {
    weft_page *pg = &p->pages[i];
    for (uint32_t s = 0; s < pg->nslices; s++) /* live descriptors become unplaced */
      if (pg->slices[s].owner) pg->slices[s].owner->pool = NULL;
    if (!is_tombstone(pg)) free_page_storage(p, pg);
  }
  const weft_allocator *a = p->mm->alloc;
  weft__free(a, p->pages, (size_t)p->cap * sizeof(weft_page), 16);
  weft__free(a, p->vacant, (size_t)p->vacant_cap * sizeof(uint32_t), 16);
  weft__free(a, p, sizeof(*p), 16);
}

/* ---- policies ---------------------------------------------------------------------------- */

bool weft_pool_accept(const weft_pool *p, uint64_t size) {
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED: {
    uint64_t page = p->cfg.page_size, ms = p->cfg.max_slice_size;
    if (size <= (ms < page ? ms : page)) return true;
    /* Uncapped: within 20% of a page is served by a page of its own. */
    return !p->cfg.strict && p->max_pages == UINT32_MAX && size <= page && (page - size) * 5 < page;
  }
  case WEFT_POOL_EXCLUSIVE:
    return size <= p->cfg.max_alloc_size;
  case WEFT_POOL_DIRECT:
  case WEFT_POOL_PERSISTENT:
    return true;
  }
  return false;
}

static uint64_t effective(const weft_pool *p, uint64_t size) {
  return weft_align_up(size, p->mm->align);
}

/* First fit: the first page, in index order, with a free slice that holds
 * |eff|, and its first such slice, read from the pages' free lists. */
static bool sliced_try(weft_pool *p, weft_mem *m) {
  uint64_t eff = effective(p, m->size);
  for (uint32_t i = 0; i < p->npages; i++) {
    if (p->pages[i].guards) continue; /* a guarded page serves nothing new */
    weft_pool_coalesce(p, i);
    weft_page *pg = &p->pages[i];
    for (uint32_t k = 0; k < pg->nfree; k++) {
      weft_slice *sl = &pg->slices[pg->free_idx[k]];
      p->mm->slice_visits++;
      if (sl->size + sl->padding >= eff) return carve(p, i, pg->free_idx[k], m, eff);
    }
  }
  return false;
}

static bool exclusive_try(weft_pool *p, weft_mem *m) {
  uint64_t eff = effective(p, m->size);
  int64_t best = -1;
  for (uint32_t i = 0; i < p->npages; i++) {
    weft_page *pg = &p->pages[i];
    if (pg->slices[0].owner || pg->size < eff) continue;
    if (best < 0 || pg->size < p->pages[best].size) best = i; /* best fit, first on ties */
  }
  if (best < 0) return false;
  weft_page *pg = &p->pages[best];
  if (pg->free_count) pg->free_count--;
  set_owner(p, (uint32_t)best, 0, m, m->size, eff - m->size);
  return true;
}

/* Persistent and direct: a free page of exactly the effective size. */
static bool exact_try(weft_pool *p, weft_mem *m) {
  uint64_t eff = effective(p, m->size);
  for (uint32_t i = 0; i < p->npages; i++) {
    weft_page *pg = &p->pages[i];
    if (is_tombstone(pg) || pg->slices[0].owner || pg->size != eff) continue;
    set_owner(p, i, 0, m, m->size, eff - m->size);
    return true;
  }
  return false;
}

bool weft_pool_try_reserve(weft_pool *p, weft_mem *m) {
  if (p->outdated) return false;
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED:
    return sliced_try(p, m);
  case WEFT_POOL_EXCLUSIVE:
    return exclusive_try(p, m);
  case WEFT_POOL_DIRECT:
  case WEFT_POOL_PERSISTENT:
    return exact_try(p, m);
  }
  return false;
}

static uint64_t reserved_bytes(const weft_pool *p) {
  uint64_t r = 0;
  for (uint32_t i = 0; i < p->npages; i++)
    if (!is_tombstone(&p->pages[i])) r += p->pages[i].size;
  return r;
}

static uint64_t in_use_bytes(const weft_pool *p) {
  weft_memory_usage u = {0};
  weft_pool_usage(p, &u);
  return u.bytes_in_use;
}

weft_status weft_pool_alloc(weft_pool *p, weft_mem *m, bool may_release, bool *cap_hit) {
  *cap_hit = false;
  uint64_t eff = effective(p, m->size), page_size = eff;
  uint32_t idx = 0;
  weft_status st;
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED:
    if (p->npages >= p->max_pages) {
      *cap_hit = true;
      p->cap_warned = true;
      return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, m->size,
                                   "pool capacity exceeded: %" PRIu32 " pages of %" PRIu64
                                   " bytes (cap %" PRIu64 ", %" PRIu64 " in use)",
                                   p->max_pages, p->cfg.page_size, p->cfg.max_pool_size,
                                   in_use_bytes(p));
    }
    page_size = p->cfg.page_size > eff ? p->cfg.page_size : eff;
    break;
  case WEFT_POOL_EXCLUSIVE:
    if (m->size > p->cfg.max_alloc_size)
      return weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, m->size,
                                   "the exclusive pool holds at most %" PRIu64 " bytes",
                                   p->cfg.max_alloc_size);
    /* From the request: a page of its effective size. (The reference sizes
     * it by a running average that starts at max_alloc_size / 2, so a wide
     * pool's first pages held several times what they served.) */
    page_size = eff;
    break;
  case WEFT_POOL_DIRECT:
    if (may_release && p->cfg.reclaim_at != WEFT_NO_CEILING) {
      /* Free in index order only until the new allocation fits the ceiling:
       * deterministic, and a watermark rather than a budget. */
      uint64_t reserved = reserved_bytes(p);
      for (uint32_t i = 0; i < p->npages && reserved + eff > p->cfg.reclaim_at; i++) {
        weft_page *pg = &p->pages[i];
        if (is_tombstone(pg) || pg->slices[0].owner) continue;
        reserved -= pg->size;
        weft_pool_release_page(p, i);
      }
    }
    break;
  case WEFT_POOL_PERSISTENT:
    break;
  }
  if ((st = add_page(p, page_size, &idx))) return st;
  weft_page *pg = &p->pages[idx];
  if (p->cfg.kind == WEFT_POOL_EXCLUSIVE) pg->free_count = 4;
  if (p->cfg.kind == WEFT_POOL_SLICED) {
    if (!carve(p, idx, 0, m, eff)) {
      weft_pool_release_page(p, idx);
      return no_meta();
    }
  } else { /* padding is the alignment's; an exclusive page may hold more */
    set_owner(p, idx, 0, m, m->size, eff - m->size);
  }
  return NULL;
}

void weft_pool_free(weft_pool *p, weft_mem *m) {
  weft_page *pg;
  weft_slice *sl = weft_pool_find(p, m, &pg);
  if (!sl) return;
  weft_page_vacate(pg, m->slice, p->cfg.kind == WEFT_POOL_SLICED);
  m->pool = NULL;
}

void weft_page_vacate(weft_page *pg, uint32_t s, bool sliced) {
  weft_slice *sl = &pg->slices[s];
  sl->owner = NULL;
  sl->owner_id = 0;
  if (sliced) { /* a free slice's capacity is all size; it joins the free list */
    sl->size += sl->padding;
    sl->padding = 0;
    uint32_t k = free_pos(pg, s);
    memmove(&pg->free_idx[k + 1], &pg->free_idx[k], (size_t)(pg->nfree - k) * sizeof(uint32_t));
    pg->free_idx[k] = s;
    pg->nfree++;
  }
  if (!pg->dirty) {
    pg->dirty = true;
    pg->dirty_lo = pg->dirty_hi = s;
  } else {
    if (s < pg->dirty_lo) pg->dirty_lo = s;
    if (s > pg->dirty_hi) pg->dirty_hi = s;
  }
}

void weft_pool_cleanup(weft_pool *p, bool explicit_, uint64_t reserves) {
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED:
    /* Explicit only, except outdated arena pools, which return each page
     * as soon as it empties, on any tick. */
    if (!explicit_ && !p->outdated) return;
    for (uint32_t i = p->npages; i-- > 0;) {
      weft_pool_coalesce(p, i);
      if (weft_page_is_free(&p->pages[i]) && !p->pages[i].guards) weft_pool_release_page(p, i);
    }
    return;
  case WEFT_POOL_EXCLUSIVE: {
    uint64_t period = p->cfg.dealloc_period;
    bool due = period != WEFT_NO_PERIOD && reserves - p->last_check >= period / 5;
    if (!explicit_ && !due) return;
    if (due) p->last_check = reserves;
    for (uint32_t i = p->npages; i-- > 0;) {
      weft_page *pg = &p->pages[i];
      if (pg->slices[0].owner) continue;
      pg->free_count++;
      if (explicit_ || pg->free_count >= 5) weft_pool_release_page(p, i);
    }
    return;
  }
  case WEFT_POOL_DIRECT:
  case WEFT_POOL_PERSISTENT:
    if (!explicit_ && !p->release_free) return;
    for (uint32_t i = p->npages; i-- > 0;) {
      weft_page *pg = &p->pages[i];
      if (!is_tombstone(pg) && !pg->slices[0].owner) weft_pool_release_page(p, i);
    }
    return;
  }
}

/* ---- reports ----------------------------------------------------------------------------- */

void weft_pool_usage(const weft_pool *p, weft_memory_usage *u) {
  for (uint32_t i = 0; i < p->npages; i++) {
    const weft_page *pg = &p->pages[i];
    if (is_tombstone(pg)) continue;
    u->bytes_reserved += pg->size;
    for (uint32_t s = 0; s < pg->nslices; s++) {
      if (!pg->slices[s].owner) continue;
      u->number_allocs++;
      u->bytes_in_use += pg->slices[s].size;
      u->bytes_padding += pg->slices[s].padding;
    }
  }
}

void weft_pool_fill_report(const weft_pool *p, weft_pool_report *r) {
  memset(r, 0, sizeof(*r));
  r->kind = p->cfg.kind;
  weft_pool_usage(p, &r->usage);
  for (uint32_t i = 0; i < p->npages; i++) {
    if (is_tombstone(&p->pages[i])) continue;
    r->pages++;
    r->pages_unmapped += !p->pages[i].mapped;
  }
  r->pages_peak = p->pages_peak;
  r->largest_alloc = p->largest_alloc;
  r->page_size = p->cfg.kind == WEFT_POOL_SLICED ? p->cfg.page_size : 0;
  r->outdated = p->outdated;
}

static weft_status bad(const weft_pool *p, uint32_t page, const char *what) {
  return weft_error_make(WEFT_ERR_VALIDATION, "pool (kind %d) page %" PRIu32 ": %s",
                         (int)p->cfg.kind, page, what);
}

weft_status weft_pool_validate(const weft_pool *p) {
  for (uint32_t i = 0; i < p->npages; i++) {
    const weft_page *pg = &p->pages[i];
    if (is_tombstone(pg)) continue;
    uint64_t at = 0;
    for (uint32_t s = 0; s < pg->nslices; s++) {
      const weft_slice *sl = &pg->slices[s];
      if (sl->offset != at) return bad(p, i, "slices are not contiguous");
      at += sl->size + sl->padding;
      if (sl->owner) {
        const weft_mem *o = sl->owner;
        if (o->id != sl->owner_id) return bad(p, i, "a slice's owner changed identity");
        if (o->pool != p || o->page != i || o->slice != s)
          return bad(p, i, "an owner's location does not point back at its slice");
        if (o->size != sl->size) return bad(p, i, "a slice's size differs from its owner's");
      }
      if (p->cfg.kind != WEFT_POOL_SLICED && s > 0) return bad(p, i, "more than one slice");
    }
    if (p->cfg.kind == WEFT_POOL_SLICED ? at != pg->size : at > pg->size)
      return bad(p, i, "slices do not cover the page");
    if (p->cfg.kind == WEFT_POOL_SLICED) {
      uint32_t k = 0;
      for (uint32_t s = 0; s < pg->nslices; s++) {
        if (pg->slices[s].owner) continue;
        if (k >= pg->nfree || pg->free_idx[k] != s)
          return bad(p, i, "the free list does not list the free slices in order");
        k++;
        if (s > 0 && !pg->slices[s - 1].owner && !pg->dirty)
          return bad(p, i, "two adjacent free slices on a page with no coalesce pending");
      }
      if (k != pg->nfree) return bad(p, i, "the free list lists an owned slice");
      if (pg->free_cap < pg->nslices) return bad(p, i, "the free list may need to grow on a free");
    }
    if (pg->mapped != (pg->mem.id != 0)) return bad(p, i, "mapped flag disagrees with storage");
  }
  return NULL;
}
