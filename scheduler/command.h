/* Commands: size classes, pools, back-pressure counts (command.c). */
#ifndef WEFT_SCHEDULER_COMMAND_H
#define WEFT_SCHEDULER_COMMAND_H

#include "scheduler/device_internal.h"

/* Open: the smallest class's pool made up front (one block), so that its
 * growth is bounded and does not depend on how far retirement lags; false
 * when memory ran out. */
bool weft__cmd_pool_init(weft_device *dev);
/* A command of |kind| with |extra| bytes after it, counted against |budget|
 * (a stream slot, or WEFT_MAX_STREAMS for the device's own), from |tc| (the
 * calling thread's cache, or NULL) or the device's pools; NULL when memory
 * ran out. The caller has taken the command's back-pressure credit
 * (submit.c): this never waits and counts nothing. */
cmd *weft__cmd_alloc(weft_device *dev, weft_tcache *tc, cmd_kind kind, size_t extra,
                     uint32_t budget);
/* Tops |tc|'s cache of class |k| (< WEFT_TC_CLASSES) up to WEFT_TC_BATCH
 * commands from the device's pool; false when it holds none even so. Never
 * allocates: an empty pool grows through weft__cmd_alloc. */
bool weft__cmd_cache_fill(weft_device *dev, weft_tcache *tc, uint32_t k);
/* A thread cache's free commands go back to the device's pools. */
void weft__cmd_cache_return(weft_device *dev, weft_tcache *tc);
/* Back to its class; on the scheduler thread, batched until the next flush. */
void weft__cmd_free(cmd *c);
/* Returns the scheduler's batched commands to their classes and lowers the
 * pending counts once (every retirement pass). */
void weft__cmd_free_flush(weft_device *dev);
/* A command a recording keeps (for the capture's lifetime) stops counting
 * against back-pressure, or a long recording would block its own end. */
void weft__cmd_detach(weft_device *dev, cmd *c);
/* Lowers |budget|'s count by |n| (credits or commands given back) and wakes
 * the clients waiting for room. */
void weft__budget_release(weft_device *dev, uint32_t budget, uint64_t n);
/* Close: every command is back in its class; frees them all. */
void weft__cmd_pool_destroy(weft_device *dev);

#endif
