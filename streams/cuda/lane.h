/* The CUDA backend's streams ("lanes"): a weft_stream whose tasks are
 * enqueued on a CUstream by the owner's thread, in order, as they are
 * submitted. A task's |run| enqueues its work (a launch, a copy) on the
 * lane's CUDA stream, found with weft_lane_cuda_stream(on) from the stream
 * |run| is given.
 *
 *   submit(chain): for each task, its cross-stream waits become
 *   cuStreamWaitEvent on an event of the origin lane (none when the origin
 *   already completed the position; one recorded at the origin's end when
 *   it has none at or after the position), then task->run; after the chain
 *   an event is recorded when 32 positions passed since the last: what the
 *   owner polls (weft_lanes_progress) to move the lane's |completed| cursor.
 *
 *   Before the owner parks, weft_lanes_arm enqueues a completion mark on
 *   every lane with work outstanding: a host function that moves the cursor
 *   and raises the owner's progress signal. Marks hold a stream up until the
 *   driver's thread runs them, so a busy owner polls instead.
 *
 * Nothing here allocates once the event and mark pools are warm. The owner
 * (the device's scheduler thread) is the only caller, except the driver's
 * callback thread, which only stores cursors and raises the signal.
 *
 * Sticky errors: every driver call records the first sticky error on the
 * context. Host functions never run after one, so the cursors would stop:
 * once weft_lanes_poisoned is true, submit completes chains itself and
 * weft_lanes_force_complete moves every cursor to what was enqueued. The
 * device poisons itself before retiring anything past that point. */
#ifndef WEFT_STREAMS_CUDA_LANE_H
#define WEFT_STREAMS_CUDA_LANE_H

#include "streams/cuda/stream_cuda.h"
#include "streams/stream.h"

typedef struct weft_lanes weft_lanes;

typedef struct weft_lanes_stats {
  uint64_t event_waits;    /* cuStreamWaitEvent issued */
  uint64_t waits_complete; /* waits found complete on the host: nothing issued */
  uint64_t events_created; /* by every lane's pool */
  uint64_t marks;          /* completion marks enqueued */
} weft_lanes_stats;

/* Loads the driver ($WEFT_CUDA_DRIVER or libcuda.so.1, kept loaded for the
 * process's life: the driver's threads must never lose their code), checks
 * device |ordinal| and retains its primary context, current on the calling
 * thread. Errors name what is missing: UnsupportedIoOperation for no driver,
 * the toolkit stub, a failed cuInit or no device; InvalidArgument for an
 * ordinal that does not exist. |progress| is raised by every mark. */
WEFT_MUST_USE_RESULT weft_status weft_lanes_open(const weft_allocator *alloc, int ordinal,
                                                 weft_signal *progress, weft_lanes **out);
/* Destroys every lane (synchronising each), then releases the context.
 * Call with every submitted task retired. NULL is a no-op. */
void weft_lanes_close(weft_lanes *b);
/* A lane for stream |slot|. */
WEFT_MUST_USE_RESULT weft_status weft_lanes_stream_create(weft_lanes *b, uint32_t slot,
                                                          weft_stream **out);

weft_cuda_context *weft_lanes_context(weft_lanes *b);
const weft_cuda_driver *weft_lanes_driver(const weft_lanes *b);
const char *weft_lanes_device_name(const weft_lanes *b);
/* The device's total memory (cuDeviceTotalMem). */
uint64_t weft_lanes_total_memory(const weft_lanes *b);
void weft_lanes_get_stats(const weft_lanes *b, weft_lanes_stats *out);

/* Polls the events of every lane with work outstanding and moves their
 * cursors; true if any moved. */
bool weft_lanes_progress(weft_lanes *b);
/* Enqueues a completion mark on every lane with work outstanding and none
 * pending (before the owner parks: the mark wakes it). */
void weft_lanes_arm(weft_lanes *b);

/* The CUDA stream behind a lane. */
weft_cuda_stream *weft_lane_cuda_stream(const weft_stream *s);

/* True once some driver call got a sticky error (cheap: one load). */
bool weft_lanes_poisoned(const weft_lanes *b);
/* Looks for asynchronous faults: queries every lane with work outstanding
 * (a faulting kernel surfaces at the next query). Returns
 * weft_lanes_poisoned. */
bool weft_lanes_poll(weft_lanes *b);
/* After poisoning: every lane's cursor moves to the last position it was
 * handed (nothing will complete it any more). */
void weft_lanes_force_complete(weft_lanes *b);

/* The trace's device time (the owner's thread). Around a launch's enqueue:
 * time_start records a timing event before it (false: the launch is not
 * timed: LANE_TIMED launches wait for retirement, or the driver has no
 * timing events), time_end one after it, for the position lane_submit is
 * running. At retirement, device_ms answers the time between the two on
 * the device (false: not timed) and forgets it and every older pair;
 * timing_drop forgets them all (tracing stopped). */
bool weft_lane_time_start(weft_stream *s);
void weft_lane_time_end(weft_stream *s);
bool weft_lane_device_ms(weft_stream *s, uint64_t seq, double *ms);
void weft_lanes_timing_drop(weft_lanes *b);

#endif
