/* Retirement: the scheduler takes back what the workers completed, in the
 * order the work ran, and applies each outcome (the per-kind completion of
 * launch.c and copy.c, through the command table). */
#include "scheduler/retire.h"

#include "scheduler/command.h"

static void complete(weft_device *dev, cmd *c) {
  dev->ms.inflight--;
  weft_backend_base *b = dev->backend;
  if ((c->kind == CMD_SYNC || c->kind == CMD_READ) && b->vt->sync_point)
    b->vt->sync_point(b, dev->streams[weft__slot_of(dev, c->stream)]); /* what the device hit */
  /* A deferred backend's fault stops everything queued: nothing retired
   * after the device was poisoned can be trusted to have run. */
  if (b->deferred && weft__poisoned(dev) && c->result != OUT_NONE) {
    weft_error_free(c->error);
    c->error = NULL;
    c->result = OUT_POISONED;
  }
  const weft_cmd_ops *ops = &weft__cmd_ops[c->kind];
  if (ops->complete) ops->complete(dev, c);
  if (c->instance) {                    /* a replay instance's command: the capture keeps it */
    if (--c->instance->inflight == 0) { /* the instance is free: a replayer may wait for it */
      atomic_fetch_sub_explicit(c->instance->outstanding, 1, memory_order_release);
      weft__ec_notify(&dev->cmds.room);
    }
  } else {
    weft__cmd_free(c);
  }
}

/* Retires, in order, the tasks of |slot| up to |upto| (completed by its
 * worker) and placed before |before|. A task's outcome is applied after the
 * outcomes of the tasks it waited for on other streams, so the error graph
 * sees work in the order it ran. */
static void retire(weft_device *dev, uint32_t slot, uint64_t upto, uint64_t before) {
  struct weft_fifo *f = &dev->ms.fifo[slot];
  weft_task *t;
  while ((t = f->head) && t->seq <= upto && t->placed < before) {
    for (uint32_t i = 0; i < t->nwaits; i++)
      retire(dev, t->waits[i].stream->slot, t->waits[i].seq, UINT64_MAX);
    if (((cmd *)t)->kind == CMD_READ) {
      /* A read answers after every completed task placed before it, on any
       * stream, so its report does not depend on which stream's completions
       * the scheduler happened to look at first. Later work stays out. */
      for (uint32_t s = 0; s < dev->max_streams; s++)
        if (s != slot && dev->ms.fifo[s].head)
          retire(dev, s, atomic_load_explicit(&dev->streams[s]->completed, memory_order_acquire),
                 t->placed);
    }
    f->head = t->fnext;
    if (!f->head) f->tail = NULL;
    complete(dev, (cmd *)t);
  }
}

/* Retires everything the workers completed; true if anything was. */
bool weft__retire_all(weft_device *dev) {
  bool any = false;
  weft__check_fault(dev, false); /* a fault first: before any forced completion retires */
  if (dev->backend->vt->progress) dev->backend->vt->progress(dev->backend);
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    weft_task *t = dev->ms.fifo[i].head;
    if (!t) continue;
    uint64_t done = atomic_load_explicit(&dev->streams[i]->completed, memory_order_acquire);
    if (t->seq > done) continue;
    retire(dev, i, done, UINT64_MAX);
    any = true;
  }
  weft__cmd_free_flush(dev);
  return any;
}

bool weft__completions_ready(weft_device *dev) {
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    weft_task *t = dev->ms.fifo[i].head;
    if (t && t->seq <= atomic_load_explicit(&dev->streams[i]->completed, memory_order_acquire))
      return true;
  }
  return false;
}

/* Completed work the scheduler was owed a wake-up for: the pool raises
 * progress after a task marked |notify| and when it leaves a stream (IDLE),
 * not after every task, so completions on a stream still running are not
 * (a long kernel after a short one is no lost wake-up). Not on a deferred
 * backend: its completions have their own polling. */
bool weft__completions_owed(weft_device *dev) {
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    weft_task *t = dev->ms.fifo[i].head;
    if (!t || dev->backend->deferred) continue;
    uint64_t done = atomic_load_explicit(&dev->streams[i]->completed, memory_order_acquire);
    if (t->seq > done) continue;
    if (atomic_load_explicit(&dev->streams[i]->state, memory_order_acquire) == WEFT_STREAM_IDLE)
      return true;
    for (; t && t->seq <= done; t = t->fnext)
      if (t->notify) return true;
  }
  return false;
}
