/* The device-wide state every call reads: callers inside a device (close
 * drains them), which device this thread schedules, and poisoning. */
#include "scheduler/inside.h"

#include "core/log.h"

#include <sched.h>
#include <time.h>

_Thread_local weft_device *weft__scheduling = NULL;

/* ---- callers inside ---- */

static _Atomic uint32_t caller_shards = 0;
_Thread_local uint32_t weft__caller_shard = 0;

uint32_t weft__caller_shard_pick(void) {
  return weft__caller_shard = atomic_fetch_add_explicit(&caller_shards, 1, memory_order_relaxed) %
                                  WEFT_CALLER_SHARDS +
                              1;
}

weft_status weft__enter_refused(const weft_device *dev) {
  return dev ? weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "device is closing")
             : weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "device is NULL");
}

/* A blocking call made on the device's scheduler thread (from a reclaim
 * callback) would wait for itself. */
weft_status weft__enter_blocking(weft_device *dev, weft_inside *in) {
  weft_status st = weft__enter(dev, in);
  if (!st && weft__dev_scheduling() == dev)
    st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "a blocking call from the device's own scheduler thread would deadlock");
  return st;
}

/* Close: waits until every caller that entered has left (a blocked read
 * waits for its kernel: the scheduler still runs). A leaving caller touches
 * nothing after its decrement, so this polls, backing off to 1 ms. */
void weft__callers_drain(weft_device *dev) {
  for (unsigned spins = 0;; spins += spins < 192) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < WEFT_CALLER_SHARDS; i++)
      n += atomic_load_explicit(&dev->live.callers[i].n, memory_order_seq_cst);
    if (n == 0) return;
    if (spins < 64) {
      weft__cpu_relax();
    } else if (spins < 128) {
      sched_yield();
    } else {
      struct timespec ts = {0, spins < 192 ? 50000L : 1000000L};
      nanosleep(&ts, NULL);
    }
  }
}

/* Poisons the device once: the error is published before the flag, and the
 * embedder hears of it. Every later task completes as a no-op. */
void weft__dev_poison(weft_device *dev, weft_status why) {
  uint32_t expected = 0;
  if (!atomic_compare_exchange_strong(&dev->live.poisoned, &expected, 2)) {
    weft_error_free(why);
    return;
  }
  dev->live.poison_error = why;
  atomic_store_explicit(&dev->live.poisoned, 1, memory_order_release);
  if (weft_log_on(WEFT_LOG_ERROR)) {
    char msg[WEFT_LOG_MAX - 64];
    weft_error_format(why, msg, sizeof(msg));
    weft__log(WEFT_LOG_ERROR, "the device is poisoned; every later operation fails: %s", msg);
  }
  weft_poison_fn fn = atomic_load_explicit(&dev->live.on_poison, memory_order_acquire);
  if (fn) fn(atomic_load_explicit(&dev->live.on_poison_user, memory_order_acquire), why);
}
