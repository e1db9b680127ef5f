/* Buffers: the handle check clients make, and the scheduler's side (buffers.c). */
#ifndef WEFT_SCHEDULER_BUFFERS_H
#define WEFT_SCHEDULER_BUFFERS_H

#include "scheduler/device_internal.h"

/* ---- client side ---- */
/* A buffer as reports print it: the slot index names a live buffer. */
void weft__buf_name(uint64_t id, char *buf, size_t cap);
WEFT_MUST_USE_RESULT weft_status weft__buf_not_live(uint64_t id);
WEFT_MUST_USE_RESULT weft_status weft__range_outside(uint64_t size, uint64_t offset, uint64_t len,
                                                     const char *what);
/* NotFound unless |b| is a live buffer of |dev|; its size in |*size| (may be NULL). */
static inline WEFT_MUST_USE_RESULT weft_status weft__buf_lookup(weft_device *dev, weft_buffer b,
                                                                uint64_t *size) {
  return weft_handles_lookup(&dev->buffers, b.id, size) ? NULL : weft__buf_not_live(b.id);
}
/* InvalidArgument unless [offset, offset + len) lies inside |size| bytes. */
static inline WEFT_MUST_USE_RESULT weft_status weft__check_range(uint64_t size, uint64_t offset,
                                                                 uint64_t len, const char *what) {
  return offset > size || len > size - offset ? weft__range_outside(size, offset, len, what) : NULL;
}

/* ---- scheduler side ---- */
/* The live buffer |id| names, or NULL when it was released. */
static inline weft_buf *weft__buf_resolve(weft_device *dev, uint64_t id) {
  weft_handle_slot *s = weft_handles_slot(&dev->buffers, id);
  weft_buf *b = s ? s->obj : NULL;
  return b && b->id == id && !b->released ? b : NULL;
}
/* As resolve, for an id the client found live when it made the command
 * (weft__buf_lookup: a launch's bindings), whose slot therefore exists. */
static inline weft_buf *weft__buf_resolve_seen(weft_device *dev, uint64_t id) {
  weft_buf *b = weft_handles_slot_seen(&dev->buffers, id)->obj;
  return b && b->id == id && !b->released ? b : NULL;
}
/* NotFound: |id| was released before the command reached it. */
WEFT_MUST_USE_RESULT weft_status weft__buf_not_found(uint64_t id);
/* Gives an allocated buffer its address, mapping a lazy (dry-run) page on
 * first use; a page that cannot be backed leaves the buffer carrying the
 * StorageMappingFailed error over all its bytes. */
void weft__buf_map_lazy(weft_device *dev, weft_buf *b);
static inline void weft__buf_map(weft_device *dev, weft_buf *b) {
  if (b->allocated && !b->ptr) weft__buf_map_lazy(dev, b);
}
/* A released buffer's memory goes back, unless a capture's warm-up keeps it. */
void weft__buf_drop(weft_device *dev, weft_buf *b);
/* A task binding it completed: the last one frees a released buffer. */
static inline void weft__buf_unpin(weft_device *dev, weft_buf *b) {
  if (--b->pending == 0 && b->released) weft__buf_drop(dev, b);
}
/* Frees |b| and every claim it holds. */
void weft__buf_free(weft_device *dev, weft_buf *b);
/* The reservation (or the late mapping) of |b| failed: it is unallocated and
 * carries the reason, which reads and launches report. */
void weft__buf_unallocated(weft_device *dev, weft_buf *b, weft_status why);
/* Releases |buffer| now (freed once no task binds it). */
void weft__buf_release_now(weft_device *dev, uint64_t buffer);
/* CMD_CREATE and CMD_RELEASE. */
void weft__buf_process_create(weft_device *dev, cmd *c);
void weft__buf_process_release(weft_device *dev, cmd *c);
/* CMD_ADDRESS: the buffer's address once its creation was processed. */
void weft__buf_process_address(weft_device *dev, cmd *c);

#endif
