/* Commands: size classes, pools, back-pressure counts (command.c). */
#ifndef WEFT_SCHEDULER_COMMAND_H
#define WEFT_SCHEDULER_COMMAND_H

#include "scheduler/device_internal.h"

/* A command of |kind| with |extra| bytes after it, counted against
 * |budget| (a stream slot, or WEFT_MAX_STREAMS for the device's own); NULL
 * when memory ran out. Never waits: weft__cmd_new (submit.h) waits for room. */
cmd *weft__cmd_alloc(weft_device *dev, cmd_kind kind, size_t extra, uint32_t budget);
/* Back to its class; on the scheduler thread, batched until the next flush. */
void weft__cmd_free(cmd *c);
/* Returns the scheduler's batched commands to their classes and lowers the
 * pending counts once (every retirement pass). */
void weft__cmd_free_flush(weft_device *dev);
/* A command a recording keeps (for the capture's lifetime) stops counting
 * against back-pressure, or a long recording would block its own end. */
void weft__cmd_detach(weft_device *dev, cmd *c);
/* Close: every command is back in its class; frees them all. */
void weft__cmd_pool_destroy(weft_device *dev);

#endif
