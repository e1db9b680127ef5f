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
  _Atomic uint64_t *count; /* set once inside: the shard counted in */
} weft_inside;
/* Inline: every public call pays for them. */
extern _Thread_local uint32_t weft__caller_shard; /* this thread's line + 1; 0: none yet */
uint32_t weft__caller_shard_pick(void);
WEFT_MUST_USE_RESULT weft_status weft__enter_refused(const weft_device *dev);

/* As weft__enter, on a poisoned device too (destroy, the poison calls). */
static inline WEFT_MUST_USE_RESULT weft_status weft__enter_open(weft_device *dev, weft_inside *in) {
  in->count = NULL;
  if (!dev) return weft__enter_refused(dev);
  uint32_t s = weft__caller_shard;
  if (!s) s = weft__caller_shard_pick();
  /* seq_cst increment, then seq_cst load of |closing|, against close's store
   * of |closing|, then loads of the counts: either close sees this caller
   * or this caller sees close. */
  _Atomic uint64_t *n = &dev->live.callers[s - 1].n;
  atomic_fetch_add_explicit(n, 1, memory_order_seq_cst);
  in->count = n;
  if (atomic_load_explicit(&dev->live.closing, memory_order_seq_cst))
    return weft__enter_refused(dev);
  return NULL;
}

static inline WEFT_MUST_USE_RESULT weft_status weft__enter(weft_device *dev, weft_inside *in) {
  weft_status st = weft__enter_open(dev, in);
  if (!st && atomic_load_explicit(&dev->live.poisoned, memory_order_acquire) == 1)
    st = weft_error_clone(dev->live.poison_error);
  return st;
}

/* As weft__enter, then refuses a call from the device's own scheduler thread. */
WEFT_MUST_USE_RESULT weft_status weft__enter_blocking(weft_device *dev, weft_inside *in);

/* The caller's last touch of the device: close may free it right after. */
static inline void weft__leave(weft_inside *in) {
  if (in->count) atomic_fetch_sub_explicit(in->count, 1, memory_order_release);
  in->count = NULL;
}
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
