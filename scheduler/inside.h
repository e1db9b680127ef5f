/* Callers inside a device, the scheduling thread, poisoning (inside.c). */
#ifndef WEFT_SCHEDULER_INSIDE_H
#define WEFT_SCHEDULER_INSIDE_H

#include "scheduler/device_internal.h"

/* Every public call on a device runs inside it: weft__enter counts the
 * caller in (or refuses: NULL device, "device is closing", poisoned), and
 * weft__leave, run by the cleanup of a WEFT_INSIDE variable on every return
 * path, counts it out. Close sets |closing| and waits for the count to drain
 * while the scheduler still runs, so a call that entered first completes
 * (its commands are processed, a blocked read gets its answer) and the
 * device's memory outlives every caller; a call that enters later is refused
 * and touches only the count and the flag. */
typedef struct weft_inside {
  weft_device *dev; /* set once inside */
  uint32_t shard;
} weft_inside;
weft_status weft__enter(weft_device *dev, weft_inside *in);
/* As weft__enter, on a poisoned device too (destroy, the poison calls). */
weft_status weft__enter_open(weft_device *dev, weft_inside *in);
/* As weft__enter, then refuses a call from the device's own scheduler thread. */
weft_status weft__enter_blocking(weft_device *dev, weft_inside *in);
void weft__leave(weft_inside *in);
#define WEFT_INSIDE __attribute__((cleanup(weft__leave))) weft_inside
/* Close: waits until every caller that entered has left. */
void weft__callers_drain(weft_device *dev);

/* The device whose scheduler role this thread holds (set by loop.c). */
extern _Thread_local weft_device *weft__scheduling;
static inline weft_device *weft__dev_scheduling(void) {
  return weft__scheduling;
}

/* Poisons the device once (takes |why|): every later operation fails with
 * it (weft__poisoned in device_internal.h). */
void weft__dev_poison(weft_device *dev, weft_status why);

#endif
