/* The drop queue: host bytes kept alive until the device has consumed them.
 *
 * push() stages a block; flush() waits for the fence made by the previous
 * flush, frees what that flush moved to pending, moves the staged blocks to
 * pending and makes a new fence. A block is therefore freed by the second
 * flush after it was staged: two flushes in a row free everything staged
 * before them. The policy asks for a flush once max_count blocks or
 * max_bytes are staged, whichever comes first.
 *
 * Fences come from the owner (a stream's completion cursor on the host
 * backend, an event on CUDA), so this layer knows nothing about streams. */
#ifndef WEFT_MEMORY_DROP_QUEUE_H
#define WEFT_MEMORY_DROP_QUEUE_H

#include <stdatomic.h>

#include <weft/weft.h>

typedef struct weft_drop_block {
  void *ptr;
  size_t size;
} weft_drop_block;

typedef struct weft_drop_fence_ops {
  uint64_t (*make)(void *ctx);             /* a fence after everything submitted so far */
  void (*wait)(void *ctx, uint64_t fence); /* blocks until the fence is reached */
  void *ctx;
} weft_drop_fence_ops;

typedef struct weft_drop_queue {
  const weft_allocator *alloc;
  weft_drop_fence_ops fences;
  uint64_t max_count, max_bytes;
  weft_drop_block *staged, *pending;
  uint32_t nstaged, staged_cap, npending, pending_cap;
  uint64_t staged_bytes;
  bool has_fence;
  uint64_t fence;
  uint64_t syncs;         /* fences waited on */
  _Atomic uint64_t *held; /* optional: lowered by the size of every block freed */
} weft_drop_queue;

#define WEFT_DROP_MAX_COUNT 64u
#define WEFT_DROP_MAX_BYTES (UINT64_C(64) << 20)

void weft_drop_queue_init(weft_drop_queue *q, const weft_allocator *alloc,
                          weft_drop_fence_ops fences);
/* Stages |ptr| (|size| bytes from |q->alloc|; ownership transfers). On a
 * metadata allocation failure the block is freed at once after a fence wait,
 * so nothing leaks and nothing is freed early. */
void weft_drop_queue_push(weft_drop_queue *q, void *ptr, size_t size);
bool weft_drop_queue_should_flush(const weft_drop_queue *q);
void weft_drop_queue_flush(weft_drop_queue *q);
/* Waits for every fence and frees everything (close). */
void weft_drop_queue_destroy(weft_drop_queue *q);

#endif
