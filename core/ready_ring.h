/* weft_ready_ring: a bounded multi-producer / multi-consumer FIFO of non-NULL
 * pointers in a caller-provided array of cells (Vyukov's bounded queue:
 * every cell carries a sequence number). Nothing here allocates; the
 * capacity (a power of two, at least 2) is fixed at init.
 *
 * Invariants, for the cell at position |pos| (index pos & mask):
 *  - seq == pos:            free, for the producer that claims position pos;
 *  - seq == pos + 1:        holds the item pushed at pos, for the consumer of pos;
 *  - seq == pos + capacity: freed by that consumer, for the producer of the
 *                           next lap.
 * A producer claims a position by CAS on |enq| and publishes its item with a
 * release store of seq; a consumer claims by CAS on |deq| after an acquire
 * load of seq has shown the item published. So an item, and what it points
 * to, is visible to whoever pops it.
 *
 * Progress: no producer or consumer ever waits for another. push returns
 * false when the next cell is still taken (full, or its last consumer has
 * claimed it and not yet freed it); pop returns NULL when the next cell is
 * not yet published (empty, or its producer was preempted between claim and
 * publish: that producer's own wake-up is what the caller waits for). This
 * is why weft does not use ck_ring here: its multi-producer enqueue commits
 * in ticket order and spins behind a preempted producer.
 * Hunting builds (core/hunt.h) put site 20 in that window.
 *
 *   weft_ready_cell cells[64];
 *   weft_ready_ring r;
 *   weft_status st = weft_ready_ring_init(&r, cells, 64);   // before any push or pop
 *   if (!weft_ready_ring_push(&r, item)) ...;   // any thread; false: full
 *   void *x = weft_ready_ring_pop(&r);          // any thread; NULL: nothing ready */
#ifndef WEFT_CORE_READY_RING_H
#define WEFT_CORE_READY_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <weft/weft.h>

#include "core/hunt.h"

typedef struct weft_ready_cell {
  _Atomic uint64_t seq;
  void *item; /* published by seq = pos + 1 (release) */
} weft_ready_cell;

typedef struct weft_ready_ring {
  weft_ready_cell *cells;            /* read-only after init */
  uint64_t mask;                     /* capacity - 1 */
  _Alignas(64) _Atomic uint64_t enq; /* next position to push (producers' line) */
  _Alignas(64) _Atomic uint64_t deq; /* next position to pop (consumers' line) */
} weft_ready_ring;

/* Before any push or pop: |cells| (|capacity| of them, a power of two)
 * become the ring's storage; they must outlive it. InvalidArgument for any
 * other capacity or a NULL array; one cell is refused too, since its "holds
 * the item of pos" (pos + 1) would read as "free for pos + 1". */
static inline weft_status weft_ready_ring_init(weft_ready_ring *r, weft_ready_cell *cells,
                                               uint32_t capacity) {
  if (!cells || capacity < 2 || (capacity & (capacity - 1)))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "a ready ring holds a power of two of cells, at least 2 (got %u%s)",
                           capacity, cells ? "" : ", and no cells");
  r->cells = cells;
  r->mask = capacity - 1u;
  for (uint32_t i = 0; i < capacity; i++) {
    atomic_init(&cells[i].seq, i);
    cells[i].item = NULL;
  }
  atomic_init(&r->enq, 0);
  atomic_init(&r->deq, 0);
  return NULL;
}

static inline uint32_t weft_ready_ring_capacity(const weft_ready_ring *r) {
  return (uint32_t)(r->mask + 1u);
}

/* Any thread: appends |item| (not NULL); false when the ring is full. */
static inline bool weft_ready_ring_push(weft_ready_ring *r, void *item) {
  uint64_t pos = atomic_load_explicit(&r->enq, memory_order_relaxed);
  weft_ready_cell *c;
  for (;;) {
    c = &r->cells[pos & r->mask];
    uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    int64_t dif = (int64_t)(seq - pos);
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->enq, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed))
        break;
    } else if (dif < 0) {
      return false; /* the cell still holds (or is freeing) the item of the last lap */
    } else {
      pos = atomic_load_explicit(&r->enq, memory_order_relaxed); /* another producer took pos */
    }
  }
  WEFT_HUNT_POINT(20);
  c->item = item;
  atomic_store_explicit(&c->seq, pos + 1, memory_order_release);
  return true;
}

/* Any thread: the oldest item, or NULL when there is none or the next one's
 * producer has not published it yet. */
static inline void *weft_ready_ring_pop(weft_ready_ring *r) {
  uint64_t pos = atomic_load_explicit(&r->deq, memory_order_relaxed);
  weft_ready_cell *c;
  for (;;) {
    c = &r->cells[pos & r->mask];
    uint64_t seq = atomic_load_explicit(&c->seq, memory_order_acquire);
    int64_t dif = (int64_t)(seq - (pos + 1));
    if (dif == 0) {
      if (atomic_compare_exchange_weak_explicit(&r->deq, &pos, pos + 1, memory_order_relaxed,
                                                memory_order_relaxed))
        break;
    } else if (dif < 0) {
      return NULL;
    } else {
      pos = atomic_load_explicit(&r->deq, memory_order_relaxed); /* another consumer took pos */
    }
  }
  void *item = c->item;
  /* release: this read of the item comes before the next lap's producer
   * overwrites it. */
  atomic_store_explicit(&c->seq, pos + r->mask + 1, memory_order_release);
  return item;
}

/* Any thread: true when every claimed position has been popped (a push that
 * has claimed a cell but not yet published it counts as not empty). */
static inline bool weft_ready_ring_empty(weft_ready_ring *r) {
  return atomic_load_explicit(&r->enq, memory_order_acquire) ==
         atomic_load_explicit(&r->deq, memory_order_acquire);
}

/* Any thread, for dumps and probes: positions claimed by pushes and by pops
 * so far (their difference is the number queued, or being queued). */
static inline uint64_t weft_ready_ring_enqueued(weft_ready_ring *r) {
  return atomic_load_explicit(&r->enq, memory_order_acquire);
}
static inline uint64_t weft_ready_ring_dequeued(weft_ready_ring *r) {
  return atomic_load_explicit(&r->deq, memory_order_acquire);
}

#endif
