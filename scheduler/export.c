/* Exports: pins that keep a buffer's memory alive for a consumer outside
 * weft, past release and close (export.h; docs/memory.md, "Exports"). The
 * client call is in copy.c (an export is a read that copies nothing). */
#include "scheduler/export.h"

#include "core/alloc.h"
#include "scheduler/buffers.h"

void weft__export_pin(weft_device *dev, struct weft_export *e, weft_buf *b, uint64_t offset) {
  e->b = b;
  e->address = (uint64_t)(uintptr_t)weft__buf_ptr(b, offset);
  b->pending++; /* as a task binding it: a release frees nothing */
  b->exported++;
  if (!b->imported && b->mm && weft_mem_is_placed(&b->mem)) weft_mm_guard(b->mm, &b->mem);
  e->next = dev->exports.list;
  dev->exports.list = e;
  atomic_fetch_add_explicit(&dev->exports.refs, 1, memory_order_relaxed);
}

/* Unlinks and frees the dropped exports; |unpin|: their buffers' pins go
 * (the scheduler's sweep; close frees the buffers itself). */
static void let_go(weft_device *dev, bool unpin) {
  for (struct weft_export **p = &dev->exports.list; *p;) {
    struct weft_export *e = *p;
    if (!atomic_load_explicit(&e->dropped, memory_order_acquire)) {
      p = &e->next;
      continue;
    }
    *p = e->next;
    weft_buf *b = e->b;
    b->exported--;
    if (!b->imported && b->mm && weft_mem_is_placed(&b->mem) && b->allocated)
      weft_mm_unguard(b->mm, &b->mem);
    weft__free(&dev->alloc, e, sizeof(*e), 16);
    if (unpin) weft__buf_unpin(dev, b);
  }
}

void weft__export_sweep(weft_device *dev) {
  atomic_store_explicit(&dev->exports.dirty, 0, memory_order_relaxed);
  atomic_thread_fence(memory_order_seq_cst); /* a drop after the clear sets it again */
  let_go(dev, true);
}

void weft__export_close(weft_device *dev) {
  let_go(dev, false);
}

void weft__export_free_all(weft_device *dev) {
  while (dev->exports.list) {
    struct weft_export *e = dev->exports.list;
    dev->exports.list = e->next;
    weft_buf *b = e->b;
    if (--b->exported == 0) {
      b->pending = 0;
      weft__buf_free(dev, b);
    }
    weft__free(&dev->alloc, e, sizeof(*e), 16);
  }
}

void weft__buffer_unexport(struct weft_export *e) {
  if (!e) return;
  weft_device *dev = e->dev; /* |e| may be freed once it is marked dropped */
  atomic_store_explicit(&e->dropped, 1, memory_order_release);
  atomic_store_explicit(&dev->exports.dirty, 1, memory_order_release);
  weft__signal_raise(&dev->loop.wake); /* the device's memory lives while we hold a ref */
  if (atomic_fetch_sub_explicit(&dev->exports.refs, 1, memory_order_acq_rel) == 1)
    weft__dev_teardown(dev); /* close ran: this was the last pin */
}
