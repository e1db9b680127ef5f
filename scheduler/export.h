/* Exports (export.c): a buffer's memory handed to a consumer outside weft
 * (the DLPack helper's weft_buffer_to_dlpack) that outlives the buffer's
 * release and the device's close until the consumer lets it go.
 *
 * An export pins its buffer as an unfinished task would (the buffer's
 * |pending| count), so releasing the buffer frees nothing, and guards its
 * page, so relocation never moves it. The device counts live exports in
 * dev->exports.refs (one more for the device itself): close frees every
 * buffer no export pins and, while exports are live, leaves the rest of
 * its teardown (the pinned buffers, the memory managers, the backend and
 * its storage, the device's own memory) to the last weft__buffer_unexport.
 * docs/memory.md, "Exports", has the whole design. */
#ifndef WEFT_SCHEDULER_EXPORT_H
#define WEFT_SCHEDULER_EXPORT_H

#include "scheduler/device_internal.h"

struct weft_export {
  weft_device *dev;
  weft_buf *b;              /* the pinned buffer (the scheduler's; close's once it stopped) */
  uint64_t address;         /* the first byte exported */
  _Atomic uint32_t dropped; /* set by weft__buffer_unexport; the scheduler then unpins */
  struct weft_export *next; /* dev->exports.list */
};

/* Waits, ordered like weft_buffer_read of [offset, offset+len) on |stream|, then
 * fails as that read would (taint), else pins the buffer's memory so it outlives
 * weft_buffer_release AND weft_device_close until weft__buffer_unexport; *address is
 * the first byte. */
WEFT_MUST_USE_RESULT weft_status weft__buffer_export(weft_device *dev, weft_stream_id stream,
                                                     weft_buffer buf, uint64_t offset, uint64_t len,
                                                     uint64_t *address, struct weft_export **out);
/* Any thread, any time (even after weft_device_close): drops the pin. Never blocks.
 * (After close, the last one finishes the device's teardown on the calling thread:
 * frees memory and stops the backend's idle threads.) NULL: nothing. */
void weft__buffer_unexport(struct weft_export *e);

/* ---- the device's side ---- */
/* Scheduler: the read behind |e| succeeded on |b|: pins it. */
void weft__export_pin(weft_device *dev, struct weft_export *e, weft_buf *b, uint64_t offset);
/* Scheduler: unpins the exports dropped since the last sweep (retirement
 * calls it when dev->exports.dirty is set). */
void weft__export_sweep(weft_device *dev);
static inline void weft__export_sweep_if_dirty(weft_device *dev) {
  if (__builtin_expect(atomic_load_explicit(&dev->exports.dirty, memory_order_relaxed) != 0, 0))
    weft__export_sweep(dev);
}
/* Close, once the scheduler stopped: lets the dropped exports go (their
 * buffers are then freed like any other). */
void weft__export_close(weft_device *dev);
/* The teardown's last step (device.c): frees the buffers exports still
 * pinned, and their exports. */
void weft__export_free_all(weft_device *dev);
/* device.c: the rest of close after the buffers (managers, backend,
 * tables, the device itself), run by close or by the last unexport. */
void weft__dev_teardown(weft_device *dev);

#endif
