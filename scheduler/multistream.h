/* SchedulerMultiStream and the streams it runs on (multistream.c). */
#ifndef WEFT_SCHEDULER_MULTISTREAM_H
#define WEFT_SCHEDULER_MULTISTREAM_H

#include "scheduler/device_internal.h"

/* The stream of |slot|, created on first use (with its drop queue); NULL
 * with |*err| set when the backend cannot create it. */
weft_stream *weft__stream_create(weft_device *dev, uint32_t slot, weft_status *err);
/* |slot|'s stream, created on first use; NULL with *err when it cannot start. */
static inline weft_stream *weft__stream_get(weft_device *dev, uint32_t slot, weft_status *err) {
  weft_stream *s = dev->streams[slot];
  return s ? s : weft__stream_create(dev, slot, err);
}
/* register: align, then batch on |slot| (whose stream exists), executing
 * the batch once it is full. execute: hands the batches of |slots| to their
 * streams (strategy). flush: executes |slot|'s partial batch. */
void weft__ms_register(weft_device *dev, uint32_t slot, cmd *c);
void weft__ms_execute(weft_device *dev, const uint32_t *slots, uint32_t n);
void weft__ms_flush(weft_device *dev, uint32_t slot);
void weft__ms_flush_all(weft_device *dev);

#endif
