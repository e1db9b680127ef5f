/* The client side of the queue: waiting for room (back-pressure), new
 * commands, and submission to the scheduler's inbox. A combining client
 * runs the scheduler itself when it can take the role (loop.c). */
#include "scheduler/submit.h"

#include "core/hunt.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/loop.h"

/* Back-pressure is per stream: a command on a stream counts against that
 * stream slot's budget of max_pending commands, one on no stream against
 * the device's own. A stream stalled behind a blocked kernel fills only its
 * own budget, so clients of unrelated streams keep going. Only clients
 * wait: the scheduler thread and the device's workers retire commands, so
 * making them wait could stall the device. */
typedef struct room_arg {
  weft_device *dev;
  uint32_t budget;
} room_arg;

static bool room_for_one(void *arg) {
  const room_arg *r = arg;
  return atomic_load_explicit(&r->dev->cmds.pending[r->budget].n, memory_order_acquire) <
         r->dev->cmds.max_pending;
}

/* Waits (spin, then park on the room event count, which every retirement
 * pass signals) until |ready|. Combining clients first help retire; a pool
 * thread never takes the scheduler role (it could end up waiting for the
 * kernel it runs). */
void weft__wait_room(weft_device *dev, bool (*ready)(void *), void *arg) {
  if (ready(arg)) return;
  if (dev->loop.combining && weft_stream_worker_ctx() != dev) {
    weft__combine(dev);
    weft__signal_raise(&dev->loop.wake);
  }
  for (int i = 0; i < 64; i++) {
    if (ready(arg)) return;
    weft__cpu_relax();
  }
  while (!ready(arg)) {
    WEFT_HUNT_POINT(46);
    uint32_t k = weft__ec_prepare(&dev->cmds.room);
    if (ready(arg)) {
      weft__ec_cancel(&dev->cmds.room);
      return;
    }
    weft__ec_wait(&dev->cmds.room, k);
  }
}

/* false: no room, and the caller may not wait (|wait| false) or must not. */
static bool wait_for_room(weft_device *dev, uint32_t budget, bool wait) {
  room_arg r = {dev, budget};
  if (room_for_one(&r)) return true;
  if (weft__dev_scheduling() == dev || weft_stream_worker_ctx() == dev) return true;
  if (!wait) return false;
  atomic_fetch_add_explicit(&dev->cmds.backpressure_waits, 1, memory_order_relaxed);
  weft__wait_room(dev, room_for_one, &r);
  return true;
}

cmd *weft__cmd_take(weft_device *dev, cmd_kind kind, size_t extra, uint32_t budget, bool wait) {
  if (!wait_for_room(dev, budget, wait)) return NULL;
  return weft__cmd_alloc(dev, kind, extra, budget);
}

cmd *weft__cmd_new(weft_device *dev, cmd_kind kind, size_t extra) {
  return weft__cmd_take(dev, kind, extra, WEFT_MAX_STREAMS, true);
}

cmd *weft__cmd_new_on(weft_device *dev, cmd_kind kind, size_t extra, weft_stream_id stream) {
  return weft__cmd_take(dev, kind, extra, weft__slot_of(dev, stream), true);
}

void weft__cmd_submit_chain(weft_device *dev, cmd *first, cmd *last) {
  if (!dev->loop.combining) {
    weft_inbox_push_chain(&dev->loop.inbox, &first->task.link, &last->task.link);
    return;
  }
  weft_inbox_push_chain_quiet(&dev->loop.inbox, &first->task.link, &last->task.link);
  if (weft__dev_scheduling() == dev) return; /* the holder's own loop takes it */
  if (weft_stream_worker_ctx() == dev) {     /* a pool thread never schedules: it could */
    weft__signal_raise(&dev->loop.wake);     /* end up waiting for itself */
    return;
  }
  WEFT_HUNT_POINT(43);
  /* Push, fence, load the role (role_try), against the holder's release,
   * fence, inbox load (combine, combining_thread): the holder sees this
   * command, or this thread sees the role free and takes it. */
  atomic_thread_fence(memory_order_seq_cst);
  weft__combine(dev);
}

void weft__cmd_submit(weft_device *dev, cmd *c) {
  weft__cmd_submit_chain(dev, c, c);
}

weft_status weft__cmd_call(weft_device *dev, cmd *c) {
  weft_token tok;
  weft__token_init(&tok);
  c->token = &tok;
  c->caller = weft__running_kernel(dev);
  weft__cmd_submit(dev, c);
  return weft__token_wait(&tok);
}
