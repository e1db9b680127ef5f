/* weft_handles: a table of generation-checked handles, lock-free on every
 * client thread. A handle is (generation << 32) | (index + 1); a slot's
 * generation is odd while the handle is live and even once it is killed, so
 * a released, stale or forged handle never matches (NotFound) and id 0 is
 * never valid.
 *
 * Life of a slot: acquire (client) -> kill (client, the handle is dead at
 * once) -> recycle (the owner, once nothing refers to the slot any more).
 * The free list is a Treiber stack with a tag against ABA; chunks of slots
 * are allocated on first use and live until the table is destroyed. */
#ifndef WEFT_CORE_HANDLES_H
#define WEFT_CORE_HANDLES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <weft/weft.h>

#define WEFT_HANDLE_CHUNK_BITS 10
#define WEFT_HANDLE_CHUNK      (1u << WEFT_HANDLE_CHUNK_BITS)
#define WEFT_HANDLE_CHUNKS     4096u /* 4M live handles */

typedef struct weft_handle_slot {
  _Atomic uint32_t gen;       /* odd: live */
  _Atomic uint32_t next_free; /* index + 1 of the next free slot, 0: end */
  _Atomic uint64_t value;     /* client-visible value (a buffer's size) */
  void *obj;                  /* owner-private object (scheduler thread only) */
} weft_handle_slot;

typedef struct weft_handles {
  _Atomic(weft_handle_slot *) chunks[WEFT_HANDLE_CHUNKS];
  _Atomic uint64_t free_head; /* (tag << 32) | (index + 1) */
  _Atomic uint32_t fresh;     /* slots ever handed out */
  uint32_t gen_base;          /* even start generation: differs between tables */
  const weft_allocator *alloc;
} weft_handles;

void weft_handles_init(weft_handles *t, const weft_allocator *alloc);
void weft_handles_destroy(weft_handles *t);
/* Any thread: a new live handle whose slot holds |value|. */
WEFT_MUST_USE_RESULT weft_status weft_handles_acquire(weft_handles *t, uint64_t value,
                                                      uint64_t *out_id);
/* The slot at index |idx|, or NULL when its chunk was never made. */
static inline weft_handle_slot *weft_handles_at(weft_handles *t, uint32_t idx) {
  weft_handle_slot *c =
      atomic_load_explicit(&t->chunks[idx >> WEFT_HANDLE_CHUNK_BITS], memory_order_acquire);
  return c ? &c[idx & (WEFT_HANDLE_CHUNK - 1)] : NULL;
}
/* The slot a well-formed |id| names (its generation unchecked), or NULL. */
static inline weft_handle_slot *weft_handles_of(weft_handles *t, uint64_t id) {
  uint32_t idx1 = (uint32_t)id;
  if (idx1 == 0 || (id >> 32) == 0) return NULL;
  if (idx1 - 1 >= atomic_load_explicit(&t->fresh, memory_order_acquire)) return NULL;
  return weft_handles_at(t, idx1 - 1);
}
/* Any thread: the live slot of |id|, or NULL (stale, released, forged); its
 * value in |*out_value| (may be NULL), left alone when refused. */
weft_handle_slot *weft_handles_lookup(weft_handles *t, uint64_t id, uint64_t *out_value);
/* weft_handles_lookup, inline, for the launch path (every binding of every
 * launch is looked up): |*out_value| is always written, the value or 0. */
static inline weft_handle_slot *weft_handles_find(weft_handles *t, uint64_t id,
                                                  uint64_t *out_value) {
  weft_handle_slot *s = weft_handles_of(t, id);
  uint32_t g = (uint32_t)(id >> 32);
  *out_value = 0;
  if (!s || !(g & 1u)) return NULL;
  if (atomic_load_explicit(&s->gen, memory_order_acquire) != g) return NULL;
  uint64_t v = atomic_load_explicit(&s->value, memory_order_relaxed);
  /* Re-check: the value belongs to this generation only if it did not change. */
  atomic_thread_fence(memory_order_acquire);
  if (atomic_load_explicit(&s->gen, memory_order_relaxed) != g) return NULL;
  *out_value = v;
  return s;
}
/* Any thread: kills |id|; false if it was not live (double release, forged). */
bool weft_handles_kill(weft_handles *t, uint64_t id);
/* The slot of a well-formed id whose generation may be dead (owner use).
 * Inline: the scheduler resolves every binding of every launch with it. */
static inline weft_handle_slot *weft_handles_slot(weft_handles *t, uint64_t id) {
  return weft_handles_of(t, id);
}
/* The slot of |id| where a lookup found it live before handing it to the
 * owner (through a release/acquire hand-off, such as a command): its chunk
 * exists and stays, so no check is needed; its generation may be dead since. */
static inline weft_handle_slot *weft_handles_slot_seen(weft_handles *t, uint64_t id) {
  uint32_t idx = (uint32_t)id - 1u;
  weft_handle_slot *c =
      atomic_load_explicit(&t->chunks[idx >> WEFT_HANDLE_CHUNK_BITS], memory_order_relaxed);
  return &c[idx & (WEFT_HANDLE_CHUNK - 1)];
}
/* Owner: returns a killed slot to the free list. */
void weft_handles_recycle(weft_handles *t, uint64_t id);

#endif
