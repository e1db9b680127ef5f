#include "core/handles.h"

#include "core/alloc.h"

void weft_handles_init(weft_handles *t, const weft_allocator *alloc) {
  for (uint32_t i = 0; i < WEFT_HANDLE_CHUNKS; i++) atomic_init(&t->chunks[i], NULL);
  atomic_init(&t->free_head, 0);
  atomic_init(&t->fresh, 0);
  t->gen_base = 0;
  t->alloc = alloc;
}

void weft_handles_destroy(weft_handles *t) {
  for (uint32_t i = 0; i < WEFT_HANDLE_CHUNKS; i++) {
    weft_handle_slot *c = atomic_load(&t->chunks[i]);
    weft__free(t->alloc, c, sizeof(weft_handle_slot) * WEFT_HANDLE_CHUNK, WEFT_CACHELINE);
  }
}

/* Makes sure the chunk holding |idx| exists; racing creators agree by CAS. */
static weft_handle_slot *slot_make(weft_handles *t, uint32_t idx) {
  weft_handle_slot *s = weft_handles_at(t, idx);
  if (s) return s;
  size_t bytes = sizeof(weft_handle_slot) * WEFT_HANDLE_CHUNK;
  weft_handle_slot *c = weft__calloc(t->alloc, bytes, WEFT_CACHELINE);
  if (!c) return NULL;
  for (uint32_t i = 0; i < WEFT_HANDLE_CHUNK; i++) atomic_init(&c[i].gen, t->gen_base & ~1u);
  weft_handle_slot *expected = NULL;
  /* release: the zeroed slots are visible to whoever loads the chunk. */
  if (!atomic_compare_exchange_strong_explicit(&t->chunks[idx >> WEFT_HANDLE_CHUNK_BITS], &expected,
                                               c, memory_order_acq_rel, memory_order_acquire)) {
    weft__free(t->alloc, c, bytes, WEFT_CACHELINE);
  }
  return weft_handles_at(t, idx);
}

weft_status weft_handles_acquire(weft_handles *t, uint64_t value, uint64_t *out_id) {
  uint32_t idx;
  weft_handle_slot *s;
  uint64_t head = atomic_load_explicit(&t->free_head, memory_order_acquire);
  for (;;) {
    uint32_t top = (uint32_t)head;
    if (top == 0) {
      idx = atomic_fetch_add_explicit(&t->fresh, 1, memory_order_relaxed);
      if (idx >= WEFT_HANDLE_CHUNK * WEFT_HANDLE_CHUNKS) {
        atomic_fetch_sub_explicit(&t->fresh, 1, memory_order_relaxed);
        return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                               "too many live buffers (the handle table holds %u)",
                               WEFT_HANDLE_CHUNK * WEFT_HANDLE_CHUNKS);
      }
      s = slot_make(t, idx);
      if (!s) {
        /* The index is lost to the table; it never had a live handle. */
        return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY,
                                     sizeof(weft_handle_slot) * WEFT_HANDLE_CHUNK,
                                     "no memory for the handle table");
      }
      break;
    }
    s = weft_handles_at(t, top - 1);
    uint32_t next = atomic_load_explicit(&s->next_free, memory_order_relaxed);
    uint64_t want = (((head >> 32) + 1) << 32) | next;
    if (atomic_compare_exchange_weak_explicit(&t->free_head, &head, want, memory_order_acq_rel,
                                              memory_order_acquire)) {
      idx = top - 1;
      break;
    }
  }
  uint32_t g = atomic_load_explicit(&s->gen, memory_order_relaxed) + 1; /* even -> odd */
  /* release, as a seqlock writer's: a lookup of a stale handle that reads
   * this new value then sees (after its acquire fence) at least the kill's
   * generation, so it refuses rather than return this value as the old
   * handle's. A compiler barrier on x86. */
  atomic_thread_fence(memory_order_release);
  atomic_store_explicit(&s->value, value, memory_order_relaxed);
  /* release: value is visible to any thread that sees the live generation. */
  atomic_store_explicit(&s->gen, g, memory_order_release);
  *out_id = ((uint64_t)g << 32) | (idx + 1u);
  return NULL;
}

weft_handle_slot *weft_handles_lookup(weft_handles *t, uint64_t id, uint64_t *out_value) {
  uint64_t v;
  weft_handle_slot *s = weft_handles_find(t, id, &v);
  if (s && out_value) *out_value = v;
  return s;
}

bool weft_handles_kill(weft_handles *t, uint64_t id) {
  weft_handle_slot *s = weft_handles_of(t, id);
  uint32_t g = (uint32_t)(id >> 32);
  if (!s || !(g & 1u)) return false;
  return atomic_compare_exchange_strong_explicit(&s->gen, &g, g + 1, memory_order_acq_rel,
                                                 memory_order_relaxed);
}

void weft_handles_recycle(weft_handles *t, uint64_t id) {
  weft_handle_slot *s = weft_handles_of(t, id);
  if (!s) return;
  s->obj = NULL;
  uint32_t idx1 = (uint32_t)id;
  uint64_t head = atomic_load_explicit(&t->free_head, memory_order_acquire);
  for (;;) {
    atomic_store_explicit(&s->next_free, (uint32_t)head, memory_order_relaxed);
    uint64_t want = (((head >> 32) + 1) << 32) | idx1;
    if (atomic_compare_exchange_weak_explicit(&t->free_head, &head, want, memory_order_acq_rel,
                                              memory_order_acquire))
      return;
  }
}
