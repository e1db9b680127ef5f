#include "memory/drop_queue.h"

#include <string.h>

#include "core/alloc.h"

void weft_drop_queue_init(weft_drop_queue *q, const weft_allocator *alloc,
                          weft_drop_fence_ops fences) {
  memset(q, 0, sizeof(*q));
  q->alloc = alloc;
  q->fences = fences;
  q->max_count = WEFT_DROP_MAX_COUNT;
  q->max_bytes = WEFT_DROP_MAX_BYTES;
}

static void free_block(weft_drop_queue *q, void *ptr, size_t size) {
  weft__free(q->alloc, ptr, size, 16);
  if (q->held) atomic_fetch_sub_explicit(q->held, size, memory_order_relaxed);
}

static void free_blocks(weft_drop_queue *q, weft_drop_block *b, uint32_t *n) {
  for (uint32_t i = 0; i < *n; i++) free_block(q, b[i].ptr, b[i].size);
  *n = 0;
}

static void wait_fence(weft_drop_queue *q, uint64_t fence) {
  q->fences.wait(q->fences.ctx, fence);
  q->syncs++;
}

void weft_drop_queue_push(weft_drop_queue *q, void *ptr, size_t size) {
  if (!weft__grow(q->alloc, (void **)&q->staged, &q->staged_cap, q->nstaged + 1,
                  sizeof(*q->staged))) {
    /* No room to remember it: make sure the device is done, then free. */
    wait_fence(q, q->fences.make(q->fences.ctx));
    free_block(q, ptr, size);
    return;
  }
  q->staged[q->nstaged++] = (weft_drop_block){ptr, size};
  q->staged_bytes += size;
}

bool weft_drop_queue_should_flush(const weft_drop_queue *q) {
  return q->nstaged >= q->max_count || q->staged_bytes >= q->max_bytes;
}

void weft_drop_queue_flush(weft_drop_queue *q) {
  if (q->has_fence) { /* 1. the previous flush's fence, then what it moved */
    wait_fence(q, q->fence);
    q->has_fence = false;
    free_blocks(q, q->pending, &q->npending);
  } else if (q->npending) { /* 2. safety net: pending without a fence */
    wait_fence(q, q->fences.make(q->fences.ctx));
    free_blocks(q, q->pending, &q->npending);
  }
  /* 3. staged becomes pending (swap the arrays: no allocation). */
  weft_drop_block *t = q->pending;
  uint32_t tc = q->pending_cap;
  q->pending = q->staged;
  q->pending_cap = q->staged_cap;
  q->npending = q->nstaged;
  q->staged = t;
  q->staged_cap = tc;
  q->nstaged = 0;
  /* 4. a fence covering them; 5. counters reset. */
  q->fence = q->fences.make(q->fences.ctx);
  q->has_fence = true;
  q->staged_bytes = 0;
}

void weft_drop_queue_destroy(weft_drop_queue *q) {
  weft_drop_queue_flush(q);
  weft_drop_queue_flush(q);
  weft__free(q->alloc, q->staged, sizeof(weft_drop_block) * q->staged_cap, 16);
  weft__free(q->alloc, q->pending, sizeof(weft_drop_block) * q->pending_cap, 16);
  memset(q, 0, sizeof(*q));
}
