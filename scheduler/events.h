/* Events (events.c): points on a stream that clients query, wait on, and
 * order other streams after; weft_buffer_read_async completes one. */
#ifndef WEFT_SCHEDULER_EVENTS_H
#define WEFT_SCHEDULER_EVENTS_H

#include "scheduler/device_internal.h"

/* An event's state. Clients reach it through its handle (the slot's value)
 * holding a reference; objects are recycled, never freed before close, so a
 * stale handle's lookup touches live memory and is refused by the handle's
 * generation (checked again once the reference is held). */
typedef struct weft_event_obj {
  _Atomic uint32_t done;    /* release: |result| is set */
  _Atomic uint32_t refs;    /* the handle, the command that completes it, client calls inside */
  weft_eventcount ec;       /* waiters park here */
  weft_status result;       /* owned; clones go to the waiters */
  _Atomic uint64_t id_live; /* its handle while it has one (0: none), recycled with it */
  /* weft_buffer_read_async: the caller's destination and the staging block */
  void *dst, *staging;
  uint64_t len;
  bool filled; /* the host worker copied the staged bytes to |dst| when the read ran */
  /* scheduler only: the record's command while it is placed and not retired */
  struct cmd *rec;
  struct weft_event_obj *next_all, *next_free; /* dev->events lists (under the lock) */
} weft_event_obj;

/* Open and close: the table, the lock, and every object. */
void weft__events_init(weft_device *dev);
void weft__events_destroy(weft_device *dev);
/* Completes |e| with |st| (taken): a read_async's bytes reach its caller
 * when |st| is NULL; waiters wake; the command's reference goes. Scheduler
 * thread. */
void weft__event_complete(weft_device *dev, weft_event_obj *e, weft_status st);
/* A new object with one reference for the handle and one for the command
 * that will complete it, and its handle in |*out|; NULL with |*err|. */
weft_event_obj *weft__event_new(weft_device *dev, weft_event *out, weft_status *err);
/* Undoes weft__event_new (the command could not be made): the handle dies. */
void weft__event_discard(weft_device *dev, weft_event_obj *e);
/* Drops one reference; the last recycles the object and its handle. */
void weft__event_unref(weft_device *dev, weft_event_obj *e);

/* The command table's entries (device.c). */
void weft__event_process_record(weft_device *dev, cmd *c);
void weft__event_complete_record(weft_device *dev, cmd *c);
void weft__event_process_wait(weft_device *dev, cmd *c);
void weft__event_process_check(weft_device *dev, cmd *c);

#endif
