/* The manager as JSON, walked pool by pool, page by page, slice by slice
 * (memory/snapshot.h). It reads the structures the pools keep and changes
 * nothing, so a snapshot between two reservations describes exactly what
 * the next one will find. */
#include "memory/snapshot.h"

#include "memory/mm_internal.h"

static void usage_object(weft_json *j, const char *key, weft_memory_usage u) {
  weft_json_key(j, key);
  weft_json_begin_object(j);
  weft_json_kv_u64(j, "number_allocs", u.number_allocs);
  weft_json_kv_u64(j, "bytes_in_use", u.bytes_in_use);
  weft_json_kv_u64(j, "bytes_padding", u.bytes_padding);
  weft_json_kv_u64(j, "bytes_reserved", u.bytes_reserved);
  weft_json_end_object(j);
}

static const char *mode_name(weft_alloc_mode m) {
  return m == WEFT_ALLOC_PERSISTENT  ? "persistent"
         : m == WEFT_ALLOC_DEDICATED ? "dedicated"
                                     : "auto";
}

/* Bytes the pool's free slices hold (a free page of a one-slice kind whole). */
static uint64_t pool_free_bytes(const weft_pool *p) {
  uint64_t n = 0;
  for (uint32_t i = 0; i < p->npages; i++) {
    const weft_page *pg = &p->pages[i];
    if (!pg->nslices) continue; /* a tombstone */
    for (uint32_t s = pg->head; s != WEFT_NIL; s = pg->slices[s].next)
      if (!pg->slices[s].owner) n += pg->slices[s].size;
  }
  return n;
}

static void slice_object(weft_json *j, const weft_page *pg, const weft_slice *sl,
                         weft_mm_owner_fn owner, void *ctx) {
  weft_json_begin_object(j);
  weft_json_kv_u64(j, "offset", sl->offset);
  weft_json_kv_u64(j, "size", sl->size);
  if (!sl->owner) {
    weft_json_kv_string(j, "state", "free");
    weft_json_end_object(j);
    return;
  }
  weft_json_kv_u64(j, "padding", sl->padding);
  /* The owner's members come before "state", which depends on them: the
   * callback reports the pin, the state follows it. */
  bool pinned = owner ? owner(ctx, j, sl->owner) : false;
  weft_json_kv_string(j, "state", pinned || pg->guards ? "pinned" : "in_use");
  weft_json_end_object(j);
}

static void page_object(weft_json *j, const weft_page *pg, weft_mm_owner_fn owner, void *ctx) {
  weft_json_begin_object(j);
  weft_json_kv_u64(j, "id", pg->id);
  weft_json_kv_u64(j, "size", pg->size);
  weft_json_kv_bool(j, "mapped", pg->mapped);
  weft_json_kv_u64(j, "guards", pg->guards);
  weft_json_key(j, "slices");
  weft_json_begin_array(j);
  for (uint32_t s = pg->head; s != WEFT_NIL; s = pg->slices[s].next)
    slice_object(j, pg, &pg->slices[s], owner, ctx);
  weft_json_end_array(j);
  weft_json_end_object(j);
}

static void pool_object(weft_json *j, const weft_pool *p, const char *role, uint32_t index,
                        weft_mm_owner_fn owner, void *ctx) {
  const weft_pool_config *c = &p->cfg;
  weft_json_begin_object(j);
  weft_json_kv_string(j, "role", role);
  weft_json_kv_u64(j, "index", index);
  weft_json_kv_string(j, "kind", weft_pool_kind_name(c->kind));
  switch (c->kind) {
  case WEFT_POOL_SLICED:
    weft_json_kv_u64(j, "page_size", c->page_size);
    weft_json_kv_u64(j, "max_slice_size", c->max_slice_size);
    weft_json_kv_u64(j, "max_pool_size", c->max_pool_size);
    weft_json_kv_bool(j, "strict", c->strict);
    break;
  case WEFT_POOL_EXCLUSIVE:
    weft_json_kv_u64(j, "max_alloc_size", c->max_alloc_size);
    weft_json_key(j, "dealloc_period");
    if (c->dealloc_period == WEFT_NO_PERIOD)
      weft_json_null(j);
    else
      weft_json_u64(j, c->dealloc_period);
    break;
  case WEFT_POOL_DIRECT:
    weft_json_key(j, "reclaim_at");
    if (c->reclaim_at == WEFT_NO_CEILING)
      weft_json_null(j);
    else
      weft_json_u64(j, c->reclaim_at);
    break;
  case WEFT_POOL_PERSISTENT:
    break;
  }
  weft_json_kv_bool(j, "outdated", p->outdated);
  weft_json_kv_u64(j, "pages_peak", p->pages_peak);
  weft_json_kv_u64(j, "largest_alloc", p->largest_alloc);
  weft_memory_usage u = {0};
  weft_pool_usage(p, &u);
  usage_object(j, "usage", u);
  weft_json_kv_u64(j, "free_bytes", pool_free_bytes(p));
  weft_json_key(j, "pages");
  weft_json_begin_array(j);
  for (uint32_t i = 0; i < p->npages; i++)
    if (p->pages[i].nslices) page_object(j, &p->pages[i], owner, ctx); /* tombstones: nothing */
  weft_json_end_array(j);
  weft_json_end_object(j);
}

void weft_mm_snapshot(const weft_mm *mm, weft_json *j, weft_mm_owner_fn owner, void *ctx) {
  usage_object(j, "usage", weft_mm_usage(mm));
  weft_json_kv_u64(j, "free_bytes", weft_mm_free_bytes(mm));
  weft_json_kv_u64(j, "largest_free", weft_mm_largest_free(mm));
  weft_json_key(j, "arena_page_size");
  if (mm->has_arena)
    weft_json_u64(j, mm->current_page);
  else
    weft_json_null(j);
  weft_json_kv_string(j, "mode", mode_name(weft_mm_current_mode(mm)));
  weft_json_kv_bool(j, "dry_run", mm->dry_run);
  weft_json_key(j, "pools");
  weft_json_begin_array(j);
  uint32_t k = 0;
  for (uint32_t i = 0; i < mm->ndynamic; i++)
    pool_object(j, mm->dynamic[i], "layout", k++, owner, ctx);
  for (uint32_t i = 0; i < WEFT_ARENA_SLOTS; i++)
    if (mm->slots[i]) pool_object(j, mm->slots[i], "arena", k++, owner, ctx);
  pool_object(j, mm->persistent, "persistent", k++, owner, ctx);
  pool_object(j, mm->dedicated, "dedicated", k++, owner, ctx);
  weft_json_end_array(j);
}

bool weft_mm_locate(const weft_mm *mm, const weft_mem *m, weft_mm_place *out) {
  if (!m->pool || m->pool->mm != mm) return false;
  weft_page *pg;
  const weft_slice *sl = weft_pool_find(m->pool, m, &pg);
  if (!sl) return false;
  *out = (weft_mm_place){.kind = m->pool->cfg.kind,
                         .page = pg->id,
                         .offset = sl->offset,
                         .capacity = sl->size + sl->padding};
  return true;
}
