/* The capture window's hooks (docs/graphs.md): the scheduler's steps ask
 * whether a stream is recording and report what a replay could not
 * reproduce (a launch that fails to resolve or carries a failpoint, an
 * input that carries a failure, a buffer created or written on the slots,
 * a read or sync on them), which dooms the recording: end then fails with
 * the first reason. Scheduler thread only. */
#include "scheduler/window.h"

#include <inttypes.h>

#include "core/alloc.h"
#include "scheduler/command.h"

/* The capture recording |stream|, or NULL. */
static weft_capture *recording(weft_device *dev, weft_stream_id stream) {
  weft_capture *cap = dev->window.capture_of[weft__slot_of(dev, stream)];
  return cap && state_of(cap) == WEFT_CAPTURE_RECORDING && opened_on(cap, stream) ? cap : NULL;
}

void weft__capture_doom(weft_capture *cap, weft_status why) {
  if (cap->doom)
    weft_error_free(why);
  else
    cap->doom = why;
}

weft_record weft__capture_record(weft_device *dev, cmd *c) {
  weft_capture *cap = recording(dev, c->stream);
  if (!cap) return WEFT_NOT_RECORDING;
  weft_status why = NULL;
  const char *kname = dev->kernels[c->kernel].k.name;
  if (c->preset) {
    why = weft_error_make(WEFT_ERR_GENERIC,
                          "capture: launch %" PRIu64 " ('%s') failed inside the window: %s",
                          c->launch_no, kname, weft_error_message(c->preset));
  } else if (c->inject != WEFT_OK || c->poison) {
    why = weft_error_make(WEFT_ERR_GENERIC,
                          "capture: launch %" PRIu64 " ('%s') hit a failpoint inside the window",
                          c->launch_no, kname);
  } else {
    for (uint32_t i = 0; i < c->nb && !why; i++) {
      weft_buf *b = c->bufs[i];
      const weft_binding *bd = &c->bindings[i];
      weft_failure_id f = 0;
      if (!b->allocated)
        f = b->unalloc ? b->unalloc : 1;
      else if (bd->access & WEFT_READ)
        f = weft_taint_failure(&b->taint, (weft_range){bd->offset, bd->offset + bd->size});
      if (f)
        why = weft_error_make(WEFT_ERR_GENERIC,
                              "capture: launch %" PRIu64
                              " ('%s') would be skipped inside the window: buffer #%" PRIu32
                              " carries failure #%" PRIu64,
                              c->launch_no, kname, (uint32_t)b->id, f);
    }
  }
  if (why) {
    weft__capture_doom(cap, why);
    return WEFT_REFUSED;
  }
  c->task.link.next = NULL;
  if (cap->rec_tail)
    cap->rec_tail->task.link.next = &c->task.link;
  else
    cap->rec_head = c;
  cap->rec_tail = c;
  atomic_fetch_add_explicit(&cap->nrec, 1, memory_order_relaxed);
  dev->stats.launches_recorded++;
  weft__cmd_detach(dev, c);
  return WEFT_RECORDED;
}

void weft__capture_on_create(weft_device *dev, weft_stream_id stream, uint64_t buffer) {
  weft_capture *cap = recording(dev, stream);
  uint32_t slot = weft__slot_of(dev, stream);
  if (cap)
    weft__capture_doom(cap, weft_error_make(WEFT_ERR_GENERIC,
                                            "capture: the recording allocated buffer #%" PRIu32
                                            " on stream slot %" PRIu32 " (allocate before begin)",
                                            (uint32_t)buffer, slot));
}

void weft__capture_on_write(weft_device *dev, weft_stream_id stream, uint64_t buffer) {
  weft_capture *cap = recording(dev, stream);
  if (cap)
    weft__capture_doom(
        cap, weft_error_make(WEFT_ERR_GENERIC,
                             "capture: buffer #%" PRIu32
                             " was written inside the window (a replay would reuse stale bytes: "
                             "refresh inputs between replays)",
                             (uint32_t)buffer));
}

void weft__capture_on_unstarted(weft_device *dev, const cmd *c, weft_status why) {
  weft_capture *cap = recording(dev, c->stream);
  if (cap)
    weft__capture_doom(cap, weft_error_make(WEFT_ERR_GENERIC,
                                            "capture: launch %" PRIu64
                                            " ('%s') could not start inside the window: %s",
                                            c->launch_no, dev->kernels[c->kernel].k.name,
                                            weft_error_message(why)));
}

weft_status weft__capture_refuse_sync(weft_device *dev, weft_stream_id stream, const char *what) {
  weft_capture *cap = recording(dev, stream);
  if (!cap) return NULL;
  weft_status st = weft_error_make(WEFT_ERR_GENERIC,
                                   "capture: a %s on stream %" PRIu64 " (slot %" PRIu32
                                   ") inside a capture window (no host sync while recording)",
                                   what, (uint64_t)stream, weft__slot_of(dev, stream));
  weft__capture_doom(cap, weft_error_clone(st));
  return st;
}

bool weft__capture_keep(weft_device *dev, weft_buf *b) {
  weft_capture *cap = dev->window.capture_of[b->slot];
  if (!cap || state_of(cap) != WEFT_CAPTURE_PREPARED) return false;
  if (!weft__grow(&dev->alloc, (void **)&cap->primed, &cap->primed_cap, cap->nprimed + 1,
                  sizeof(weft_buf *)))
    return false; /* no room to remember it: it is freed now */
  cap->primed[cap->nprimed++] = b;
  return true;
}

bool weft__capture_cleanup_skipped(weft_device *dev, uint32_t slot) {
  return dev->window.capture_of[slot] != NULL;
}
