/* The client side of the queue (submit.c). */
#ifndef WEFT_SCHEDULER_SUBMIT_H
#define WEFT_SCHEDULER_SUBMIT_H

#include "scheduler/device_internal.h"

/* A command of |kind| with |extra| bytes after it, from the device's pools.
 * A client past the back-pressure limit waits here (the scheduler thread and
 * the device's own workers never wait: they are what frees room). Commands
 * on a stream count against that stream's budget (_on), others against the
 * device's own: a stream stalled behind a blocked kernel holds up only its
 * own clients. */
cmd *weft__cmd_new(weft_device *dev, cmd_kind kind, size_t extra);
cmd *weft__cmd_new_on(weft_device *dev, cmd_kind kind, size_t extra, weft_stream_id stream);
/* A command counted against |budget| (weft__cmd_alloc) once the calling
 * thread has a credit for it (from its cache, or a block from the budget,
 * waiting for room); |wait| false: NULL at once (as for no memory) when
 * the budget is full. */
cmd *weft__cmd_take(weft_device *dev, cmd_kind kind, size_t extra, uint32_t budget, bool wait);
/* Clients that wait for room (back-pressure, a free replay instance).
 * |ready| may take what it waits for: it is called until it returns true,
 * and never again after. */
void weft__wait_room(weft_device *dev, bool (*ready)(void *), void *arg);
/* Close, once every caller has left: every thread's cache for |dev| hands
 * back its credits and commands and is unbound. */
void weft__tcache_close(weft_device *dev);
/* Queues |c| for the scheduler (and, when combining, schedules it). */
void weft__cmd_submit(weft_device *dev, cmd *c);
/* A blocking call: submits |c| and waits for its answer. The kernel the
 * calling thread runs, if any, is recorded (c->caller), so that a call that
 * would wait for it is refused instead. */
WEFT_MUST_USE_RESULT weft_status weft__cmd_call(weft_device *dev, cmd *c);
/* Queues a chain of commands (linked through task.link, in order) at once. */
void weft__cmd_submit_chain(weft_device *dev, cmd *first, cmd *last);

#endif
