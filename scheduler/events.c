/* Events: a record is a command on its stream, placed at once (its batch is
 * flushed, as a sync's is) and completed at retirement, when everything
 * submitted on the stream before it has completed: what its queue holds,
 * and the stream's tasks Interleave placed on other queues, which it waits
 * for (multistream.c, barrier_waits). Clients find an event's
 * object through its handle and hold a reference while they use it; waiting
 * parks on the object's eventcount with a deadline. weft_stream_wait_event
 * places a no-op on the other stream that waits for the record's position
 * (multistream.c's wait hook), so it is a cross-stream wait like any other.
 * weft_buffer_read_async (copy.c) completes an event with the read's answer. */
#include "scheduler/events.h"

#include <inttypes.h>

#include "core/clock.h"
#include "core/alloc.h"
#include "scheduler/command.h"
#include "scheduler/copy.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/multistream.h"
#include "scheduler/submit.h"
#include "scheduler/window.h"

/* ---- objects and handles ------------------------------------------------------------------- */

void weft__events_init(weft_device *dev) {
  weft_handles_init(&dev->events.handles, &dev->alloc);
  dev->events.handles.gen_base = dev->tag * 40503u;
  pthread_mutex_init(&dev->events.lock, NULL);
}

void weft__events_destroy(weft_device *dev) {
  for (weft_event_obj *e = dev->events.all, *next; e; e = next) {
    next = e->next_all;
    weft_error_free(e->result);
    if (e->staging) weft__free(&dev->alloc, e->staging, (size_t)e->len, 16);
    weft__free(&dev->alloc, e, sizeof(*e), WEFT_CACHELINE);
  }
  dev->events.all = dev->events.free = NULL;
  pthread_mutex_destroy(&dev->events.lock);
  weft_handles_destroy(&dev->events.handles);
}

static weft_status event_not_live(weft_event ev) {
  return weft_error_make(WEFT_ERR_NOT_FOUND,
                         "event #%" PRIu32
                         " is not a live event of this device (released, stale or forged)",
                         (uint32_t)ev.id);
}

weft_event_obj *weft__event_new(weft_device *dev, weft_event *out, weft_status *err) {
  pthread_mutex_lock(&dev->events.lock);
  weft_event_obj *e = dev->events.free;
  if (e) dev->events.free = e->next_free;
  pthread_mutex_unlock(&dev->events.lock);
  if (!e) {
    e = weft__calloc(&dev->alloc, sizeof(*e), WEFT_CACHELINE);
    if (!e) {
      *err = weft__oom(sizeof(*e), "an event");
      return NULL;
    }
    pthread_mutex_lock(&dev->events.lock);
    e->next_all = dev->events.all;
    dev->events.all = e;
    pthread_mutex_unlock(&dev->events.lock);
  }
  e->result = NULL;
  e->dst = e->staging = NULL;
  e->filled = false;
  e->len = 0;
  e->rec = NULL;
  atomic_store_explicit(&e->done, 0, memory_order_relaxed);
  /* A stale caller may hold a reference to this object already (it takes
   * one before it checks the handle again): add ours to it. */
  atomic_fetch_add_explicit(&e->refs, 2, memory_order_acq_rel);
  uint64_t id;
  weft_status st = weft_handles_acquire(&dev->events.handles, (uint64_t)(uintptr_t)e, &id);
  if (st) {
    *err = st;
    atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel);
    weft__event_unref(dev, e);
    return NULL;
  }
  atomic_store_explicit(&e->id_live, id, memory_order_release);
  out->id = id;
  return e;
}

void weft__event_unref(weft_device *dev, weft_event_obj *e) {
  if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1) return;
  weft_error_free(e->result);
  e->result = NULL;
  if (e->staging) weft__free(&dev->alloc, e->staging, (size_t)e->len, 16);
  e->staging = NULL;
  uint64_t id = atomic_exchange_explicit(&e->id_live, 0, memory_order_acq_rel);
  if (id) weft_handles_recycle(&dev->events.handles, id);
  pthread_mutex_lock(&dev->events.lock);
  e->next_free = dev->events.free;
  dev->events.free = e;
  pthread_mutex_unlock(&dev->events.lock);
}

void weft__event_discard(weft_device *dev, weft_event_obj *e) {
  uint64_t id = atomic_load_explicit(&e->id_live, memory_order_acquire);
  weft_handles_kill(&dev->events.handles, id);                  /* no one else knows it yet */
  atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel); /* the command's */
  weft__event_unref(dev, e);                                    /* the handle's */
}

/* The live event |ev| names, with a reference the caller drops; NULL with
 * |*err| (NotFound) when it is not live. The reference is taken before the
 * handle is checked again: an object recycled for another event in between
 * is refused (and the reference given back). */
static weft_event_obj *event_get(weft_device *dev, weft_event ev, weft_status *err) {
  uint64_t v = 0;
  if (!weft_handles_lookup(&dev->events.handles, ev.id, &v) || !v) {
    *err = event_not_live(ev);
    return NULL;
  }
  weft_event_obj *e = (weft_event_obj *)(uintptr_t)v;
  uint32_t r = atomic_load_explicit(&e->refs, memory_order_relaxed);
  do {
    if (r == 0) { /* recycled meanwhile, not yet reused */
      *err = event_not_live(ev);
      return NULL;
    }
  } while (!atomic_compare_exchange_weak_explicit(&e->refs, &r, r + 1, memory_order_acquire,
                                                  memory_order_relaxed));
  uint64_t again = 0;
  if (!weft_handles_lookup(&dev->events.handles, ev.id, &again) || again != v ||
      atomic_load_explicit(&e->id_live, memory_order_acquire) != ev.id) {
    weft__event_unref(dev, e);
    *err = event_not_live(ev);
    return NULL;
  }
  return e;
}

void weft__event_complete(weft_device *dev, weft_event_obj *e, weft_status st) {
  if (e->staging) { /* read_async: the bytes reach the caller only if the read succeeded */
    if (!st && !e->filled) memcpy(e->dst, e->staging, (size_t)e->len);
    weft__free(&dev->alloc, e->staging, (size_t)e->len, 16);
    e->staging = NULL;
  }
  e->rec = NULL;
  e->result = st;
  atomic_store_explicit(&e->done, 1, memory_order_release);
  weft__ec_notify(&e->ec);
  weft__event_unref(dev, e); /* the command's */
}

/* ---- client calls -------------------------------------------------------------------------- */

weft_status weft_event_record(weft_device *dev, weft_stream_id stream, weft_event *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  weft_event_obj *e = weft__event_new(dev, out, &st);
  if (!e) return st;
  /* Room for a wait per slot: the record waits for its stream's tasks that
   * Interleave placed on other queues (multistream.c, barrier_waits). */
  size_t extra = sizeof(weft_stream_wait) * dev->max_streams;
  cmd *c = weft__cmd_new_on(dev, CMD_EVENT, extra, stream);
  if (!c) {
    weft__event_discard(dev, e);
    out->id = 0;
    return weft__oom(sizeof(cmd) + extra, "an event record command");
  }
  c->task.waits = (weft_stream_wait *)((char *)c + weft__align8(sizeof(cmd)));
  c->stream = stream;
  c->event = e;
  weft__cmd_submit(dev, c);
  return NULL;
}

weft_status weft_event_query(weft_device *dev, weft_event ev, bool *done) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_open(dev, &in);
  if (st) return st;
  if (!done) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "done is NULL");
  weft_event_obj *e = event_get(dev, ev, &st);
  if (!e) return st;
  *done = atomic_load_explicit(&e->done, memory_order_acquire) != 0;
  weft__event_unref(dev, e);
  return NULL;
}

/* A wait that could never end: from the scheduler's own thread, or from a
 * host kernel the event waits for (the scheduler answers that one: it
 * holds the streams' order). NULL: the wait may park. */
static weft_status refuse_self_wait(weft_device *dev, weft_event_obj *e) {
  if (weft__dev_scheduling() == dev)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_event_wait on an unfinished event from the device's scheduler "
                           "(a reclaim callback) would wait for itself");
  if (!weft__running_kernel(dev)) return NULL;
  cmd *c = weft__cmd_new(dev, CMD_EVENT_CHECK, 0);
  if (!c) return weft__oom(sizeof(cmd), "an event check");
  c->event = e; /* the caller's reference covers the call */
  return weft__cmd_call(dev, c);
}

weft_status weft_event_wait(weft_device *dev, weft_event ev, uint64_t timeout_ns) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_open(dev, &in);
  if (st) return st;
  weft_event_obj *e = event_get(dev, ev, &st);
  if (!e) return st;
  uint64_t start = timeout_ns && timeout_ns != UINT64_MAX ? weft_clock_monotonic_ns() : 0;
  if (!atomic_load_explicit(&e->done, memory_order_acquire) && timeout_ns &&
      (st = refuse_self_wait(dev, e))) {
    weft__event_unref(dev, e);
    return st;
  }
  for (int spin = 0; !atomic_load_explicit(&e->done, memory_order_acquire);) {
    uint64_t left = UINT64_MAX;
    if (timeout_ns != UINT64_MAX) {
      uint64_t spent = timeout_ns ? weft_clock_monotonic_ns() - start : 0;
      if (spent >= timeout_ns) {
        weft__event_unref(dev, e);
        return weft_error_make(WEFT_ERR_TIMEOUT,
                               "event #%" PRIu32 " did not complete within %" PRIu64 " ns",
                               (uint32_t)ev.id, timeout_ns);
      }
      left = timeout_ns - spent;
    }
    if (spin < 64) { /* an answer on its way is cheaper to catch than to park for */
      spin++;
      weft__cpu_relax();
      continue;
    }
    uint32_t k = weft__ec_prepare(&e->ec);
    if (atomic_load_explicit(&e->done, memory_order_acquire)) {
      weft__ec_cancel(&e->ec);
      break;
    }
    if (left == UINT64_MAX)
      weft__ec_wait(&e->ec, k);
    else
      weft__ec_wait_ns(&e->ec, k, left);
  }
  st = weft_error_clone(e->result);
  weft__event_unref(dev, e);
  return st;
}

weft_status weft_stream_wait_event(weft_device *dev, weft_stream_id stream, weft_event ev) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  weft_event_obj *e = event_get(dev, ev, &st);
  if (!e) return st;
  cmd *c = weft__cmd_new_on(dev, CMD_EVENT_WAIT, sizeof(weft_stream_wait), stream);
  if (!c) {
    weft__event_unref(dev, e);
    return weft__oom(sizeof(cmd), "a stream wait command");
  }
  c->task.waits = (weft_stream_wait *)((char *)c + weft__align8(sizeof(cmd)));
  c->stream = stream;
  c->event = e; /* the caller's reference covers the call: the scheduler answers last */
  st = weft__cmd_call(dev, c);
  weft__event_unref(dev, e);
  return st;
}

weft_status weft_event_release(weft_device *dev, weft_event ev) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_open(dev, &in);
  if (st) return st;
  weft_event_obj *e = event_get(dev, ev, &st);
  if (!e) return st;
  if (!weft_handles_kill(&dev->events.handles, ev.id)) { /* another thread released it first */
    weft__event_unref(dev, e);
    return event_not_live(ev);
  }
  weft__event_unref(dev, e); /* the handle's */
  weft__event_unref(dev, e); /* ours */
  return NULL;
}

/* ---- scheduler ----------------------------------------------------------------------------- */

static void run_point(weft_task *t, weft_stream *on) {
  (void)on;
  cmd *c = (cmd *)t;
  c->result = weft__poisoned(c->dev) ? OUT_POISONED : OUT_RUN;
}

static void run_nothing(weft_task *t, weft_stream *on) {
  (void)on;
  ((cmd *)t)->result = OUT_RUN;
}

static weft_status poison_or_null(weft_device *dev) {
  return weft__poisoned(dev) ? weft_error_clone(dev->live.poison_error) : NULL;
}

void weft__event_process_record(weft_device *dev, cmd *c) {
  weft_event_obj *e = c->event;
  uint32_t slot = weft__slot_of(dev, c->stream);
  weft_status refused = weft__capture_refuse_sync(dev, c->stream, "event record");
  if (refused || !dev->streams[slot]) { /* nothing ever ran there: done at once */
    weft__event_complete(dev, e, refused ? refused : poison_or_null(dev));
    weft__cmd_free(c);
    return;
  }
  c->task.run = run_point;
  c->task.notify = true; /* retirement completes it: the pool wakes the scheduler */
  e->rec = c;
  weft__ms_register(dev, slot, c);
  weft__ms_flush(dev, slot); /* placed now: its position is what others wait for */
}

void weft__event_complete_record(weft_device *dev, cmd *c) {
  weft__event_complete(dev, c->event,
                       c->result == OUT_POISONED ? weft_error_clone(dev->live.poison_error) : NULL);
}

void weft__event_process_wait(weft_device *dev, cmd *c) {
  weft_event_obj *e = c->event;
  weft_token *tok = c->token;
  c->token = NULL;
  uint32_t slot = weft__slot_of(dev, c->stream);
  weft_status st = weft__capture_refuse_sync(dev, c->stream, "weft_stream_wait_event");
  const cmd *rec = e->rec;
  /* Done, or on this very stream (which runs in order): nothing to wait for. */
  if (st || !rec || rec->on_slot == slot) {
    weft__token_complete(tok, st);
    weft__cmd_free(c);
    return;
  }
  weft_stream *s = weft__stream_get(dev, slot, &st);
  if (!s) {
    weft__token_complete(tok, st);
    weft__cmd_free(c);
    return;
  }
  c->nb = rec->on_slot;      /* the wait hook (multistream.c): on (nb, offset) */
  c->offset = rec->task.seq; /* placed: the record's batch was flushed */
  c->event = NULL;
  c->task.run = run_nothing;
  weft__token_complete(tok, NULL); /* the caller's reference may go now */
  weft__ms_register(dev, slot, c);
  weft__ms_flush(dev, slot);
}

void weft__event_process_check(weft_device *dev, cmd *c) {
  const cmd *rec = c->event->rec;
  weft_status st = NULL;
  if (c->caller && rec && weft__waits_for_kernel(dev, rec, c->caller))
    st = weft__kernel_refusal(dev, c->caller, "weft_event_wait",
                              "the event is ordered after that kernel, on its stream or through "
                              "the buffers streams share");
  weft__token_complete(c->token, st);
  weft__cmd_free(c);
}
