/* The CUDA backend as the scheduler calls it today (scheduler/cuda/device_cuda.c;
 * without cuda.h, scheduler/nocuda/device_nocuda.c answers that it is absent). */
#ifndef WEFT_SCHEDULER_GPU_H
#define WEFT_SCHEDULER_GPU_H

#include "scheduler/device_internal.h"

/* Every call but open runs on a device with dev->gpu set. */
/* Loads the driver, retains the context, creates the storage (dev->mem.storage). */
WEFT_MUST_USE_RESULT weft_status weft__gpu_open(weft_device *dev, const weft_device_options *o);
/* Makes the device's context current on the calling thread. */
void weft__gpu_enter(weft_device *dev);
/* Unloads the modules and destroys the lanes and the context (the storage
 * is destroyed first, by the caller). */
void weft__gpu_close(weft_device *dev);
WEFT_MUST_USE_RESULT weft_status weft__gpu_stream_create(weft_device *dev, uint32_t slot,
                                                         weft_stream **out);
/* As weft_storage_cuda_fail_call (|n| == 0 clears). */
bool weft__gpu_fail_call(weft_device *dev, uint64_t n, weft_error_kind kind);
/* The largest allocation the device could ever hold. */
uint64_t weft__gpu_capacity(weft_device *dev);
/* Checks a launch's bindings and scalar bytes against the kernel's signature. */
WEFT_MUST_USE_RESULT weft_status weft__gpu_check_launch(const weft_kernel_entry *k, size_t nb,
                                                        size_t scalar_bytes);
/* Enqueue a task's work on the CUDA stream it was placed on. */
WEFT_MUST_USE_RESULT weft_status weft__gpu_launch(weft_device *dev, cmd *c, weft_stream *on);
WEFT_MUST_USE_RESULT weft_status weft__gpu_write(weft_device *dev, cmd *c, weft_stream *on);
WEFT_MUST_USE_RESULT weft_status weft__gpu_read(weft_device *dev, cmd *c, weft_stream *on);
/* A GPU write or read retired: a read's bytes reach the caller
 * (|deliver|) and the pinned staging goes back. */
void weft__gpu_staging_done(weft_device *dev, cmd *c, bool deliver);
/* Poisons the device with the first sticky driver error, if any; with
 * |poll|, first queries the streams with work outstanding (async faults). */
void weft__gpu_check_poison(weft_device *dev, bool poll);
void weft__gpu_stats(weft_device *dev, weft_device_stats *out);
/* The CUDA fields of weft_device_info (backend, name, memory, driver). */
void weft__gpu_info(weft_device *dev, weft_device_info *out);
/* Moves the streams' cursors to what the GPU has completed (event polls). */
void weft__gpu_progress(weft_device *dev);
/* Before the scheduler parks: completion marks on the streams with work
 * outstanding, so the GPU wakes it. */
void weft__gpu_arm(weft_device *dev);
/* A host synchronisation point (a sync or read retiring): asks the driver
 * for errors (on |s|; a sticky error is the context's), so a sticky one is
 * reported here. */
void weft__gpu_sync_point(weft_device *dev, weft_stream *s);
/* The launches a capture's graph replays (c->graph set), for the stats. */
uint32_t weft__gpu_graph_launches(const void *graph);
/* Stream-captures the recorded launches |rec| (in order) into a CUDA graph
 * and returns one launch command that replays it, bound to every recorded
 * binding (so a replay is ordered against other work like any launch).
 * Generic when the capture was invalidated or the graph holds memory nodes;
 * a launch the driver refuses makes it fail too. */
WEFT_MUST_USE_RESULT weft_status weft__gpu_capture(weft_device *dev, const cmd *rec, cmd **out);
void weft__gpu_capture_free(weft_device *dev, cmd *graph_launch);

#endif
