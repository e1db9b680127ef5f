/* Capture (capture.c): hooks the scheduler's steps call, and its commands. */
#ifndef WEFT_SCHEDULER_CAPTURE_H
#define WEFT_SCHEDULER_CAPTURE_H

#include "scheduler/device_internal.h"

/* The hooks act only on the stream ids a capture was opened on (not on
 * every id that folds onto its slots). */
bool weft__capture_record(weft_device *dev, cmd *c); /* true: taken */
void weft__capture_on_create(weft_device *dev, weft_stream_id stream, uint64_t buffer);
void weft__capture_on_write(weft_device *dev, weft_stream_id stream, uint64_t buffer);
/* A launch on a recording stream that could not start (no stream): dooms it. */
void weft__capture_on_unstarted(weft_device *dev, const cmd *c, weft_status why);
weft_status weft__capture_refuse_sync(weft_device *dev, weft_stream_id stream, const char *what);
bool weft__capture_keep(weft_device *dev, weft_buf *b); /* true: held until begin */
bool weft__capture_cleanup_skipped(weft_device *dev, uint32_t slot);
/* CMD_CAPTURE and CMD_REPLAY. */
void weft__capture_process(weft_device *dev, cmd *c);
void weft__capture_close_all(weft_device *dev);

#endif
