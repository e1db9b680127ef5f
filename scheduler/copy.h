/* Writes, reads, syncs and checks (copy.c): the scheduler's steps. */
#ifndef WEFT_SCHEDULER_COPY_H
#define WEFT_SCHEDULER_COPY_H

#include "scheduler/device_internal.h"

void weft__copy_schedule_write(weft_device *dev, cmd *c);
void weft__copy_schedule_read(weft_device *dev, cmd *c);
void weft__copy_schedule_sync(weft_device *dev, cmd *c);
/* CMD_CHECK: answered from the error graph, without a barrier. */
void weft__copy_check(weft_device *dev, cmd *c);
void weft__copy_complete_write(weft_device *dev, cmd *c);
void weft__copy_complete_read(weft_device *dev, cmd *c);
void weft__copy_complete_sync(weft_device *dev, cmd *c);
/* True when the placed task |t| cannot complete before the running launch
 * |k| does (it follows |k| on its stream, or waits for it through any chain
 * of cross-stream waits). */
bool weft__waits_for_kernel(weft_device *dev, const cmd *t, const cmd *k);

#endif
