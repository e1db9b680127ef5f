/* Capture (capture.c): its commands, and close. The hooks are window.h. */
#ifndef WEFT_SCHEDULER_CAPTURE_H
#define WEFT_SCHEDULER_CAPTURE_H

#include "scheduler/device_internal.h"

/* CMD_CAPTURE and CMD_REPLAY. */
void weft__capture_process(weft_device *dev, cmd *c);
void weft__capture_close_all(weft_device *dev);

#endif
