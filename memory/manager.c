/* The memory manager: layouts, the reserve path (persistent and dedicated
 * windows, routing through the dynamic pools with capacity spill, the
 * adaptive arena), cleanup, install and reports. */
#include <inttypes.h>
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "memory/arena.h"
#include "memory/mm_internal.h"

#define MiB (UINT64_C(1) << 20)
#define GiB (UINT64_C(1) << 30)

/* The SUBSLICES ladder: no rung's largest slice is below page >> this. */
#define LADDER_MIN_SHIFT 5

/* ---- layouts ------------------------------------------------------------------------------ */

static uint64_t period_for(uint64_t size) {
  /* 5000 reservations, scaled by the size in GiB (rounded). */
  return 5000 * (uint64_t)(1.0 + (double)size / (double)GiB + 0.5);
}

static weft_pool_config exclusive(uint64_t max, uint64_t period) {
  return (weft_pool_config){
      .kind = WEFT_POOL_EXCLUSIVE, .max_alloc_size = max, .dealloc_period = period};
}

static weft_pool_config sliced(uint64_t page, uint64_t max_slice) {
  return (weft_pool_config){
      .kind = WEFT_POOL_SLICED, .page_size = page, .max_slice_size = max_slice};
}

/* Rounds |*size| up to the alignment; a size so close to UINT64_MAX that it
 * would wrap (to 0, or below what was asked) is InvalidArgument naming it. */
static weft_status round_up(const weft_mm *mm, size_t i, const char *field, uint64_t *size) {
  uint64_t pad = weft_pad(*size, mm->align);
  if (*size > UINT64_MAX - pad)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "pool %zu: %s %" PRIu64 " is too large (rounded up to the alignment of "
                           "%" PRIu64 " it overflows)",
                           i, field, *size, mm->align);
  *size += pad;
  return NULL;
}

/* Validates one custom pool and rounds its sizes up to the alignment. */
static weft_status resolve_pool(const weft_mm *mm, size_t i, weft_pool_config *c) {
  weft_status st;
  switch (c->kind) {
  case WEFT_POOL_SLICED:
    if (c->page_size == 0)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "pool %zu: page_size is 0", i);
    if ((st = round_up(mm, i, "page_size", &c->page_size))) return st;
    if (!c->max_slice_size)
      c->max_slice_size = c->page_size;
    else if ((st = round_up(mm, i, "max_slice_size", &c->max_slice_size)))
      return st;
    if (c->max_slice_size > c->page_size)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "pool %zu: max_slice_size %" PRIu64 " exceeds page_size %" PRIu64, i,
                             c->max_slice_size, c->page_size);
    if (c->max_pool_size && c->max_pool_size < c->page_size)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "pool %zu: max_pool_size %" PRIu64 " is below page_size %" PRIu64, i,
                             c->max_pool_size, c->page_size);
    if (c->max_pool_size && c->max_pool_size / c->page_size > 65535)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "pool %zu: max_pool_size allows more than 65535 pages", i);
    if (c->page_size > mm->max_page)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "pool %zu: page_size %" PRIu64 " exceeds the largest page (%" PRIu64
                             ")",
                             i, c->page_size, mm->max_page);
    return NULL;
  case WEFT_POOL_EXCLUSIVE:
    return round_up(mm, i, "max_alloc_size", &c->max_alloc_size);
  case WEFT_POOL_DIRECT: /* a ceiling of 0 is a real one: every free slice goes first */
    return NULL;
  case WEFT_POOL_PERSISTENT:
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "pool %zu: the persistent pool is not part of a layout", i);
  }
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "pool %zu: unknown kind %d", i, (int)c->kind);
}

/* The pools of |layout|, validated, into |out| (capacity WEFT_MAX_POOLS). */
static weft_status layout_pools(const weft_mm *mm, const weft_layout *layout, weft_pool_config *out,
                                uint32_t *n, bool *arena) {
  *n = 0;
  *arena = false;
  uint64_t maxp = mm->max_page / mm->align * mm->align;
  switch (layout->kind) {
  case WEFT_LAYOUT_SUBSLICES: {
    out[(*n)++] = exclusive(0, WEFT_NO_PERIOD); /* zero-size allocations */
    uint64_t pages[32];
    uint32_t k = 0;
    for (uint64_t c = mm->max_page; c >= 32 * MiB && k < 32;) {
      c = weft_align_up(c / 4, mm->align);
      pages[k++] = c;
    }
    /* Ascending; the largest page's slices are half a page, each smaller
     * page's a further half smaller, down to a 32nd of the page (reached by
     * the fifth rung: ladders below 32 GiB are as they always were). Halving
     * on, a large device's smallest rungs took slices of a few bytes and sent
     * small buffers to pages thousands of times their size; with rungs 4
     * apart, a buffer above the smallest page's slices now reserves a page
     * at most 128 times its size. */
    for (uint32_t j = k; j-- > 0;)
      out[(*n)++] = sliced(pages[j], pages[j] >> (j < LADDER_MIN_SHIFT ? j + 1 : LADDER_MIN_SHIFT));
    out[(*n)++] = exclusive(maxp, period_for(maxp));
    return NULL;
  }
  case WEFT_LAYOUT_EXCLUSIVE_PAGES: {
    uint64_t lo = 32 * 1024, hi = maxp > lo ? maxp : lo;
    double step = log((double)hi / (double)lo) / 23.0; /* 24 log-spaced buckets */
    uint64_t last = 0;
    for (int j = 0; j < 24; j++) {
      uint64_t s = weft_align_up((uint64_t)((double)lo * exp(step * j) + 0.5), mm->align);
      if (j == 23 || s > maxp) s = maxp;
      if (s == last || s == 0) continue;
      out[(*n)++] = exclusive(s, period_for(s));
      last = s;
    }
    return NULL;
  }
  case WEFT_LAYOUT_ADAPTIVE: {
    out[(*n)++] = exclusive(0, WEFT_NO_PERIOD);
    uint64_t small = 8 * MiB < maxp ? 8 * MiB : maxp;
    weft_pool_config c = sliced(small, 64 * 1024 < small ? 64 * 1024 : small);
    c.strict = true; /* strictly up to its max slice: keeps churn off the arena */
    out[(*n)++] = c;
    *arena = true;
    return NULL;
  }
  case WEFT_LAYOUT_CUSTOM:
    if (!layout->pools || layout->num_pools == 0)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "a custom layout needs at least one pool");
    if (layout->num_pools >= 255)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%zu pools; a layout holds at most 254",
                             layout->num_pools);
    for (size_t i = 0; i < layout->num_pools; i++) {
      out[i] = layout->pools[i];
      weft_status st = resolve_pool(mm, i, &out[i]);
      if (st) return st;
    }
    *n = (uint32_t)layout->num_pools;
    return NULL;
  }
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown layout kind %d", (int)layout->kind);
}

static void destroy_dynamic(weft_mm *mm) {
  for (uint32_t i = 0; i < mm->ndynamic; i++) weft_pool_destroy(mm->dynamic[i]);
  mm->ndynamic = 0;
  weft_arena_destroy(mm);
}

static weft_status build(weft_mm *mm, const weft_layout *layout) {
  weft_pool_config cfgs[WEFT_MAX_POOLS];
  uint32_t n;
  bool arena;
  weft_status st = layout_pools(mm, layout, cfgs, &n, &arena);
  if (st) return st;
  weft_pool *pools[WEFT_MAX_POOLS];
  for (uint32_t i = 0; i < n; i++) {
    pools[i] = weft_pool_new(mm, &cfgs[i]);
    if (!pools[i]) {
      for (uint32_t j = 0; j < i; j++) weft_pool_destroy(pools[j]);
      return weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory for the pools");
    }
  }
  destroy_dynamic(mm);
  memcpy(mm->dynamic, pools, sizeof(pools[0]) * n);
  mm->ndynamic = n;
  mm->layout = layout->kind;
  weft_arena_init(mm, arena);
  return NULL;
}

weft_status weft_mm_create(const weft_mm_config *cfg, weft_storage *storage,
                           const weft_allocator *alloc, weft_mm **out) {
  *out = NULL;
  if (!cfg || !storage || !alloc)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "memory manager: NULL argument");
  weft_mm *mm = weft__calloc(alloc, sizeof(*mm), 16);
  if (!mm) return weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory for a memory manager");
  mm->storage = storage;
  mm->alloc = alloc;
  mm->align = weft_storage_alignment(storage);
  if (mm->align == 0 || mm->align > UINT32_MAX) { /* a slice's padding is below it (uint32_t) */
    weft_status st = weft_error_make(
        WEFT_ERR_INVALID_ARGUMENT,
        "memory manager: storage alignment %" PRIu64 " is not in 1 .. 2^32 - 1", mm->align);
    weft__free(alloc, mm, sizeof(*mm), 16);
    return st;
  }
  mm->max_page = cfg->max_page ? cfg->max_page : 4 * GiB;
  mm->device_bytes = cfg->device_bytes;
  mm->persistent_policy = cfg->persistent;
  weft_pool_config pc = {.kind = WEFT_POOL_PERSISTENT};
  weft_pool_config dc = {.kind = WEFT_POOL_DIRECT, .reclaim_at = 0};
  mm->persistent = weft_pool_new(mm, &pc);
  mm->dedicated = weft_pool_new(mm, &dc);
  weft_status st = NULL;
  if (!mm->persistent || !mm->dedicated)
    st = weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory for a memory manager");
  else if (cfg->persistent > WEFT_PERSISTENT_ENFORCED)
    st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown persistent policy %d",
                         (int)cfg->persistent);
  if (!st) {
    mm->dedicated->release_free = true; /* returned on the tick after it is freed */
    st = build(mm, &cfg->layout);
  }
  if (st) {
    weft_mm_destroy(mm);
    return st;
  }
  *out = mm;
  return NULL;
}

void weft_mm_destroy(weft_mm *mm) {
  if (!mm) return;
  destroy_dynamic(mm);
  weft_pool_destroy(mm->persistent);
  weft_pool_destroy(mm->dedicated);
  weft__free(mm->alloc, mm->modes, sizeof(weft_alloc_mode) * mm->modes_cap, 16);
  weft__free(mm->alloc, mm, sizeof(*mm), 16);
}

/* ---- modes -------------------------------------------------------------------------------- */

void weft_mm_mode(weft_mm *mm, weft_alloc_mode mode) {
  if (mode == WEFT_ALLOC_AUTO) {
    if (mm->depth) mm->depth--;
    return;
  }
  if (!weft__grow(mm->alloc, (void **)&mm->modes, &mm->modes_cap, mm->depth + 1,
                  sizeof(*mm->modes))) {
    if (mm->depth) mm->modes[mm->depth - 1] = mode; /* no room: the innermost is replaced */
    return;
  }
  mm->modes[mm->depth++] = mode;
}

weft_alloc_mode weft_mm_current_mode(const weft_mm *mm) {
  weft_alloc_mode m = mm->depth ? mm->modes[mm->depth - 1] : WEFT_ALLOC_AUTO;
  if (m == WEFT_ALLOC_DEDICATED) return m; /* always honoured */
  if (mm->persistent_policy == WEFT_PERSISTENT_ENFORCED) return WEFT_ALLOC_PERSISTENT;
  if (mm->persistent_policy == WEFT_PERSISTENT_DISABLED) return WEFT_ALLOC_AUTO;
  return m;
}

void weft_mm_set_dry_run(weft_mm *mm, bool on) {
  mm->dry_run = on;
}

/* ---- the reserve path --------------------------------------------------------------------- */

static weft_status forbidden(uint64_t size) {
  return weft_error_make_sized(WEFT_ERR_PAGE_UPDATE_FORBIDDEN, size,
                               "no room for %" PRIu64 " bytes in the pages held, and this "
                               "reservation may not add a page",
                               size);
}

static void tick(weft_mm *mm) {
  for (uint32_t i = 0; i < mm->ndynamic; i++)
    if (weft_pool_periodic(mm->dynamic[i])) weft_pool_cleanup(mm->dynamic[i], false, mm->reserves);
  if (weft_pool_periodic(mm->dedicated)) weft_pool_cleanup(mm->dedicated, false, mm->reserves);
  weft_arena_tick(mm);
}

static weft_status reserve_in(weft_pool *p, weft_mem *m, weft_reserve_mode mode) {
  if (weft_pool_try_reserve(p, m)) return NULL;
  if (mode == WEFT_RESERVE_FORBIDDEN) return forbidden(m->size);
  bool cap;
  return weft_pool_alloc(p, m, mode == WEFT_RESERVE_ALLOW, &cap);
}

weft_status weft_mm_reserve(weft_mm *mm, weft_mem *m, weft_reserve_mode mode) {
  if (m->pool)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "the allocation is already placed");
  mm->reserves++;
  if (mode == WEFT_RESERVE_ALLOW) tick(mm); /* only ALLOW may release pages */
  weft_alloc_mode am = weft_mm_current_mode(mm);
  if (am == WEFT_ALLOC_DEDICATED) return reserve_in(mm->dedicated, m, mode);
  bool size_match = mm->persistent_policy == WEFT_PERSISTENT_SIZE_MATCH;
  if (am == WEFT_ALLOC_PERSISTENT || size_match) {
    if (weft_pool_try_reserve(mm->persistent, m)) return NULL;
    bool bucket = false;
    uint64_t eff = weft_align_up(m->size, mm->align);
    for (uint32_t i = 0; size_match && i < mm->persistent->npages && !bucket; i++)
      bucket = mm->persistent->pages[i].size == eff;
    if (am == WEFT_ALLOC_PERSISTENT || bucket) {
      if (mode == WEFT_RESERVE_FORBIDDEN) return forbidden(m->size);
      bool cap;
      return weft_pool_alloc(mm->persistent, m, false, &cap);
    }
  }
  weft_status remembered = NULL; /* a capacity error, or a refusal to add a page */
  bool accepted = false;
  for (uint32_t i = 0; i < mm->ndynamic; i++) {
    weft_pool *p = mm->dynamic[i];
    if (!weft_pool_accept(p, m->size)) continue;
    accepted = true;
    if (weft_pool_try_reserve(p, m)) {
      weft_error_free(remembered);
      return NULL;
    }
    if (mode == WEFT_RESERVE_FORBIDDEN) {
      if (!remembered) remembered = forbidden(m->size);
      continue;
    }
    bool cap;
    weft_status st = weft_pool_alloc(p, m, mode == WEFT_RESERVE_ALLOW, &cap);
    if (!st) {
      weft_error_free(remembered);
      return NULL;
    }
    if (cap) { /* spill to the next accepting pool */
      if (!remembered)
        remembered = st;
      else
        weft_error_free(st);
      continue;
    }
    if (remembered) {
      weft_error_free(st);
      return remembered;
    }
    return st;
  }
  if (mm->has_arena && m->size <= mm->max_page) {
    weft_error_free(remembered);
    return weft_arena_reserve(mm, m, mode);
  }
  if (remembered) return remembered;
  (void)accepted;
  return weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, m->size,
                               "no pool can hold %" PRIu64 " bytes (the largest page is %" PRIu64
                               ")",
                               m->size, mm->max_page);
}

static weft_pool *owner_pool(const weft_mm *mm, const weft_mem *m) {
  weft_pool *p = m->pool;
  if (!p || p->mm != mm) return NULL;
  return p;
}

void weft_mm_free(weft_mm *mm, weft_mem *m) {
  weft_pool *p = owner_pool(mm, m);
  if (p) weft_pool_free(p, m);
}

weft_status weft_mm_find(const weft_mm *mm, const weft_mem *m) {
  if (!m->pool)
    return weft_error_make(WEFT_ERR_NOT_FOUND, "allocation %" PRIu64 " was never placed", m->id);
  weft_pool *p = owner_pool(mm, m);
  if (!p || !weft_pool_find(p, m, NULL))
    return weft_error_make(WEFT_ERR_NOT_FOUND,
                           "allocation %" PRIu64 " points to a different allocation", m->id);
  return NULL;
}

weft_status weft_mm_resolve(weft_mm *mm, weft_mem *m, void **out) {
  weft_status st = weft_mm_find(mm, m);
  if (st) return st;
  weft_page *pg;
  weft_slice *sl = weft_pool_find(m->pool, m, &pg);
  if ((st = weft_pool_materialize(m->pool, pg, m->size))) return st;
  void *base;
  if ((st = weft_storage_get(mm->storage, &pg->mem, &base))) return st;
  *out = (char *)base + sl->offset;
  return NULL;
}

void weft_mm_cleanup(weft_mm *mm) {
  weft_pool_cleanup(mm->persistent, true, mm->reserves);
  weft_pool_cleanup(mm->dedicated, true, mm->reserves);
  for (uint32_t i = 0; i < mm->ndynamic; i++) weft_pool_cleanup(mm->dynamic[i], true, mm->reserves);
  weft_arena_cleanup(mm);
  weft_storage_flush(mm->storage);
}

static void guard(weft_mm *mm, const weft_mem *m, int delta) {
  weft_pool *p = owner_pool(mm, m);
  if (!p || !weft_pool_find(p, m, NULL)) return;
  weft_pool_guard(p, m->page, delta);
}

void weft_mm_guard(weft_mm *mm, const weft_mem *m) {
  guard(mm, m, 1);
}

void weft_mm_unguard(weft_mm *mm, const weft_mem *m) {
  guard(mm, m, -1);
}

/* ---- install and reports ------------------------------------------------------------------ */

static uint64_t dynamic_in_use(const weft_mm *mm) {
  weft_memory_usage u = {0};
  for (uint32_t i = 0; i < mm->ndynamic; i++) weft_pool_usage(mm->dynamic[i], &u);
  weft_arena_usage(mm, &u);
  return u.bytes_in_use + u.bytes_padding;
}

weft_status weft_mm_install(weft_mm *mm, const weft_layout *layout) {
  if (!layout) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "layout is NULL");
  weft_mm_cleanup(mm);
  uint64_t live = dynamic_in_use(mm);
  if (live)
    return weft_error_make(WEFT_ERR_VALIDATION,
                           "pools in use: %" PRIu64 " bytes are live; release them first", live);
  return build(mm, layout);
}

weft_memory_usage weft_mm_usage(const weft_mm *mm) {
  weft_memory_usage u = {0};
  for (uint32_t i = 0; i < mm->ndynamic; i++) weft_pool_usage(mm->dynamic[i], &u);
  weft_arena_usage(mm, &u);
  weft_pool_usage(mm->persistent, &u);
  weft_pool_usage(mm->dedicated, &u);
  return u;
}

void weft_mm_report(const weft_mm *mm, weft_pool_report *out, size_t *n) {
  size_t cap = *n, k = 0;
#define PUT(p)                                                                                     \
  do {                                                                                             \
    if (k < cap) weft_pool_fill_report((p), &out[k]);                                              \
    k++;                                                                                           \
  } while (0)
  for (uint32_t i = 0; i < mm->ndynamic; i++) PUT(mm->dynamic[i]);
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i]) PUT(mm->slots[i]);
  PUT(mm->persistent);
  PUT(mm->dedicated);
#undef PUT
  *n = k;
}

static uint64_t largest_free_in(const weft_pool *p) {
  uint64_t best = 0;
  for (uint32_t i = 0; i < p->npages; i++) {
    const weft_page *pg = &p->pages[i];
    if (p->cfg.kind != WEFT_POOL_SLICED) { /* one allocation a page: a free page is free whole */
      if (pg->nslices && !pg->slices[0].owner && pg->size > best) best = pg->size;
      continue;
    }
    if (pg->root != WEFT_NIL && pg->slices[pg->root].max > best) /* free slices never touch */
      best = pg->slices[pg->root].max;
  }
  return best;
}

uint64_t weft_mm_largest_free(const weft_mm *mm) {
  uint64_t best = 0, x;
  for (uint32_t i = 0; i < mm->ndynamic; i++)
    if ((x = largest_free_in(mm->dynamic[i])) > best) best = x;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i] && (x = largest_free_in(mm->slots[i])) > best) best = x;
  if ((x = largest_free_in(mm->persistent)) > best) best = x;
  return best;
}

static uint64_t free_in(const weft_pool *p) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < p->npages; i++) {
    const weft_page *pg = &p->pages[i];
    if (p->cfg.kind != WEFT_POOL_SLICED) {
      if (pg->nslices && !pg->slices[0].owner) n += pg->size;
      continue;
    }
    if (!pg->nslices) continue;
    for (uint32_t s = pg->head; s != WEFT_NIL; s = pg->slices[s].next)
      if (!pg->slices[s].owner) n += pg->slices[s].size;
  }
  return n;
}

uint64_t weft_mm_free_bytes(const weft_mm *mm) {
  uint64_t n = free_in(mm->persistent) + free_in(mm->dedicated);
  for (uint32_t i = 0; i < mm->ndynamic; i++) n += free_in(mm->dynamic[i]);
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i]) n += free_in(mm->slots[i]);
  return n;
}

uint64_t weft_mm_page_size(const weft_mm *mm) {
  return mm->has_arena ? mm->current_page : 0;
}

uint64_t weft_mm_slice_visits(const weft_mm *mm) {
  return mm->slice_visits;
}

uint64_t weft_mm_storage_allocs(const weft_mm *mm) {
  uint64_t n = 0;
  weft_pool_report r[WEFT_MAX_POOLS + WEFT_ARENA_SLOTS + 2];
  size_t k = sizeof(r) / sizeof(r[0]);
  weft_mm_report(mm, r, &k);
  for (size_t i = 0; i < k; i++) n += r[i].pages - r[i].pages_unmapped;
  return n;
}

weft_status weft_mm_validate(const weft_mm *mm) {
  weft_status st;
  for (uint32_t i = 0; i < mm->ndynamic; i++)
    if ((st = weft_pool_validate(mm->dynamic[i]))) return st;
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i] && (st = weft_pool_validate(mm->slots[i]))) return st;
  if ((st = weft_pool_validate(mm->persistent))) return st;
  if ((st = weft_pool_validate(mm->dedicated))) return st;
  /* Live allocations never share bytes: pages are distinct storage, and
   * slices within a page are contiguous and disjoint (checked above). */
  return NULL;
}
