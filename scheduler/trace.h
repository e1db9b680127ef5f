/* The trace: a device's events in a preallocated ring of fixed-size
 * records, written as Chrome trace-event JSON (trace.c, docs/observability.md).
 *
 * Single producer: every record is written by whoever holds the scheduler
 * role (the scheduler thread, or a combining client), so the ring needs no
 * lock and no atomic. The only other writer is the thread that runs a task,
 * which stamps its run interval into the task's command (cmd.tr, through
 * weft_stream_run_task: the stream stamps while a trace records); the
 * scheduler reads the stamps at retirement, after the stream's completion
 * cursor (release) passed the task.
 *
 * The hooks are called only when dev->trace is set: each call site is one
 * __builtin_expect(dev->trace != NULL, 0) branch. */
#ifndef WEFT_SCHEDULER_TRACE_H
#define WEFT_SCHEDULER_TRACE_H

#include <stddef.h>

#include "scheduler/device_internal.h"

typedef struct weft_trace weft_trace;

/* Instant events and scheduler marks (weft__trace_mark's |what|). */
typedef enum weft_trace_mark_kind {
  WEFT_TRACE_ALIGN,        /* a registration executed |a| other batches first */
  WEFT_TRACE_RECLAIM,      /* a reservation of |a| bytes climbs the reclaim ladder */
  WEFT_TRACE_RECLAIM_DONE, /* ... |b|: 1 rescued, 0 failed for good */
  WEFT_TRACE_RELOCATE,     /* |a| allocations moved off outdated pages */
  WEFT_TRACE_MARK_KINDS,
} weft_trace_mark_kind;

/* Buffer events (weft__trace_buffer's |what|). */
typedef enum weft_trace_buf_kind {
  WEFT_TRACE_BUF_CREATE,
  WEFT_TRACE_BUF_RELEASE,
  WEFT_TRACE_BUF_FREE,
} weft_trace_buf_kind;

/* A task retires (retire.c, before its kind's completion): its run
 * interval, outcome, failure, bindings and cross-stream waits. */
void weft__trace_task(weft_device *dev, const cmd *c);
/* Makes the ring's streaming stores visible (weakly ordered): after each
 * retirement pass, so that a combining client that hands the scheduler role
 * on, or the end, leaves no record behind in a write-combining buffer. */
void weft__trace_fence(void);
/* Batches are about to be placed (multistream.c): the flush. */
void weft__trace_flush(weft_device *dev, const uint32_t *slots, uint32_t n, bool interleave);
/* A stream's tasks stamp their run into their command (cmd.tr) while a
 * trace records: set on every stream at begin and on a stream created
 * during the recording, cleared at the end. */
static inline void weft__trace_stamp(weft_stream *s, bool on) {
  weft_stream_stamp_at(s, on ? (uint32_t)offsetof(cmd, tr) : 0);
}
void weft__trace_mark(weft_device *dev, weft_trace_mark_kind what, uint32_t slot, uint64_t a,
                      uint64_t b);
/* A buffer created, released or freed, and its stream's memory counters. */
void weft__trace_buffer(weft_device *dev, weft_trace_buf_kind what, const weft_buf *b);
/* A live buffer took its label (weft_buffer_set_label; its new |label|, or
 * NULL when it was cleared), labels.c: the writer names the buffer by the
 * label in the events after it. */
void weft__trace_buf_label(weft_device *dev, const weft_buf *b);

/* CMD_TRACE: begin or end on the scheduler. */
void weft__trace_process(weft_device *dev, cmd *c);
/* Open: WEFT_TRACE=path starts a recording before the scheduler starts. */
WEFT_MUST_USE_RESULT weft_status weft__trace_open_env(weft_device *dev);
/* Close (the scheduler stopped): writes WEFT_TRACE's file; frees the ring. */
void weft__trace_close(weft_device *dev);
/* A failed open: frees the recording, writing nothing. */
void weft__trace_drop(weft_device *dev);

#endif
