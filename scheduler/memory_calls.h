/* The device's memory (memory_calls.c): managers, reservation, reclaim ladder. */
#ifndef WEFT_SCHEDULER_MEMORY_CALLS_H
#define WEFT_SCHEDULER_MEMORY_CALLS_H

#include "scheduler/device_internal.h"

/* Reserves |b|'s memory in the manager of |slot|, climbing the reclaim
 * ladder (and the reclaim callback) when it does not fit. */
WEFT_MUST_USE_RESULT weft_status weft__dev_reserve(weft_device *dev, weft_buf *b, uint32_t slot);
/* CMD_MEMORY. */
void weft__dev_memory_call(weft_device *dev, cmd *c);
void weft__dev_mm_destroy_all(weft_device *dev);
/* Frees |b|'s slice (when placed) and records the release in the event ring. */
void weft__dev_free(weft_device *dev, weft_buf *b);

#endif
