/* The launch path (launch.c): client, schedule, run, complete, replay. */
#ifndef WEFT_SCHEDULER_LAUNCH_H
#define WEFT_SCHEDULER_LAUNCH_H

#include "scheduler/device_internal.h"

/* Checks a launch's arguments (the caller is inside the device); |resolved|
 * (num_bindings entries) receives the bindings with WEFT_WHOLE sizes resolved. */
WEFT_MUST_USE_RESULT weft_status weft__launch_check(weft_device *dev, weft_kernel kernel,
                                                    const uint32_t grid[3], const uint32_t block[3],
                                                    const weft_binding *bindings,
                                                    size_t num_bindings, const void *scalars,
                                                    size_t scalar_bytes, weft_binding *resolved);
/* A launch command from checked arguments (not numbered, not submitted).
 * |wait| false: NULL at once (as for no memory) when the stream's budget is
 * full, instead of waiting for room. */
cmd *weft__launch_build(weft_device *dev, weft_stream_id stream, weft_kernel kernel,
                        const uint32_t grid[3], const uint32_t block[3],
                        const weft_binding *resolved, size_t nb, const void *scalars,
                        size_t scalar_bytes, bool wait);
/* CMD_LAUNCH reaching the scheduler: resolve, pin, arm, record or register. */
void weft__launch_schedule(weft_device *dev, cmd *c);
/* A launch's task retired: its outcome goes to the error graph; unpins. */
void weft__launch_complete(weft_device *dev, cmd *c);

/* ---- replay support (capture.c) ---- */
/* Scope id, failpoints, then SchedulerMultiStream registration. */
void weft__launch_register(weft_device *dev, cmd *c);
/* Drops a resolved launch that will not run (unpins, frees). */
void weft__launch_discard(weft_device *dev, cmd *c);
/* A launch that cannot run: its outputs carry |err|. */
void weft__launch_fail(weft_device *dev, const cmd *r, weft_status err);
/* Copies the recorded launch |r| into |c| (its arrays rebased). */
void weft__launch_copy(cmd *c, const cmd *r);
/* |c| as its backend sees it: its binding addresses resolved into c->ptrs
 * (every bound buffer allocated), the kernel's fields and payload. Inline,
 * pointers into the command: it is on every launch's path. */
static inline void weft__launch_desc(const weft_device *dev, cmd *c, weft_backend_launch *out) {
  for (uint32_t i = 0; i < c->nb; i++)
    c->ptrs[i] = weft__buf_ptr(c->bufs[i], c->bindings[i].offset);
  out->kernel = &dev->kernels[c->kernel].k;
  out->graph = c->graph;
  out->grid = c->grid;
  out->block = c->block;
  out->nb = c->nb;
  out->addrs = c->ptrs;
  out->bindings = c->bindings;
  out->scalars = c->scalars;
  out->scalar_bytes = c->scalar_bytes;
  out->shared_bytes = c->shared_bytes;
  out->label = c->label;
}
/* The launches |c| runs: those of the graph it replays, else 1. */
static inline uint32_t weft__launch_count(const weft_device *dev, const cmd *c) {
  return c->graph ? dev->backend->vt->graph_launches(c->graph) : 1;
}
/* Runs |c| (a copy of a recorded launch) again: numbered anew, its buffers
 * pinned, registered. |instance|: the segment of the replay instance that
 * owns |c| (not freed at retirement), or NULL for a pooled command. */
void weft__launch_replay(weft_device *dev, cmd *c, weft_replay_seg *instance);

#endif
