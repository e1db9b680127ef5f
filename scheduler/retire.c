/* Retirement: the scheduler takes back what the workers completed, in the
 * order the work ran, and applies each outcome (the per-kind completion of
 * launch.c and copy.c, through the command table). */
#include "scheduler/retire.h"

#include "scheduler/buffers.h"
#include "scheduler/command.h"
#include "scheduler/export.h"
#include "scheduler/trace.h"

/* The position |t| must reach before retire_all takes it: a whole replay
 * segment retires at once, so its head waits for the segment's last. */
static inline uint64_t ready_seq(const weft_task *t) {
  const weft_replay_seg *g = ((const cmd *)t)->instance;
  return g && g->armed && g->head == (const cmd *)t ? g->last_seq : t->seq;
}

/* A replay instance's launches retired: the last frees the instance. */
static void instance_release(weft_device *dev, weft_replay_count *n, uint32_t k) {
  if ((n->inflight -= k) == 0) { /* the instance is free: a replayer may wait for it */
    atomic_fetch_sub_explicit(n->outstanding, 1, memory_order_release);
    weft__ec_notify(&dev->cmds.room);
  }
}

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
  if (__builtin_expect(dev->trace != NULL, 0))
    weft__trace_task(dev, c); /* before its kind's completion frees its error */
  const weft_cmd_ops *ops = &weft__cmd_ops[c->kind];
  if (ops->complete) ops->complete(dev, c);
  if (c->instance) { /* a replay instance's command: the capture keeps it */
    c->instance->armed = false;
    instance_release(dev, c->instance->count, 1);
  } else {
    weft__cmd_free(c);
  }
}

static void retire(weft_device *dev, uint32_t slot, uint64_t upto, uint64_t before, bool whole);

/* Retires the armed replay segment at the head of |slot|'s list in one step
 * (its last launch completed, placed before |before|): the waits of its
 * head first, as for any task; then, if every launch ran and no buffer it
 * writes carries a claim (each launch's scope would be a no-op), its
 * buffers are unpinned per buffer and the segment leaves the list. false:
 * it retires launch by launch. */
static bool retire_segment(weft_device *dev, uint32_t slot, weft_replay_seg *g) {
  weft_task *h = &g->head->task;
  for (uint32_t i = 0; i < h->nwaits; i++)
    retire(dev, h->waits[i].stream->slot, h->waits[i].seq, UINT64_MAX, false);
  if (dev->backend->deferred) return false; /* its faults rewrite outcomes (complete) */
  if (dev->trace) return false;             /* a trace shows every launch */
  uint32_t k = 0;
  for (weft_task *t = h; k < g->n; t = t->fnext, k++)
    if (((cmd *)t)->result != OUT_RUN) return false;
  for (uint32_t i = 0; i < g->npins; i++)
    if (g->pins[i].writes && !weft_taint_is_clean(&g->pins[i].b->taint)) return false;
  for (uint32_t i = 0; i < g->npins; i++) {
    weft_buf *b = g->pins[i].b;
    if ((b->pending -= g->pins[i].pins) == 0 && b->released) weft__buf_drop(dev, b);
  }
  struct weft_fifo *f = &dev->ms.fifo[slot];
  f->head = g->tail->task.fnext;
  if (!f->head) f->tail = NULL;
  dev->ms.inflight -= g->n;
  dev->stats.launches_run += g->launches;
  g->armed = false;
  instance_release(dev, g->count, g->n);
  return true;
}

/* Retires, in order, the tasks of |slot| up to |upto| (completed by its
 * worker) and placed before |before|. A task's outcome is applied after the
 * outcomes of the tasks it waited for on other streams, so the error graph
 * sees work in the order it ran. */
static void retire(weft_device *dev, uint32_t slot, uint64_t upto, uint64_t before, bool whole) {
  struct weft_fifo *f = &dev->ms.fifo[slot];
  weft_task *t;
  while ((t = f->head) && t->seq <= upto && t->placed < before) {
    weft_replay_seg *g = ((cmd *)t)->instance;
    if (g && g->armed && g->head == (cmd *)t) { /* a replay segment: whole if it can */
      if (g->last_seq <= upto && g->last_placed < before && retire_segment(dev, slot, g)) continue;
      if (whole && g->last_seq > upto) return; /* the rest of it is still running */
    }
    for (uint32_t i = 0; i < t->nwaits; i++)
      retire(dev, t->waits[i].stream->slot, t->waits[i].seq, UINT64_MAX, false);
    if (((cmd *)t)->kind == CMD_READ) {
      /* A read answers after every completed task placed before it, on any
       * stream, so its report does not depend on which stream's completions
       * the scheduler happened to look at first. Later work stays out. */
      for (uint32_t s = 0; s < dev->max_streams; s++)
        if (s != slot && dev->ms.fifo[s].head)
          retire(dev, s, atomic_load_explicit(&dev->streams[s]->completed, memory_order_acquire),
                 t->placed, false);
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
    if (ready_seq(t) > done) continue;
    retire(dev, i, done, UINT64_MAX, true);
    any = true;
  }
  if (__builtin_expect(dev->trace != NULL, 0) && any) weft__trace_fence();
  weft__export_sweep_if_dirty(dev); /* exports dropped since: their pins go */
  weft__cmd_free_flush(dev);
  return any;
}

bool weft__completions_ready(weft_device *dev) {
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    weft_task *t = dev->ms.fifo[i].head;
    if (t &&
        ready_seq(t) <= atomic_load_explicit(&dev->streams[i]->completed, memory_order_acquire))
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
    if (ready_seq(t) > done) continue;
    if (atomic_load_explicit(&dev->streams[i]->state, memory_order_acquire) == WEFT_STREAM_IDLE)
      return true;
    for (; t && t->seq <= done; t = t->fnext)
      if (t->notify) return true;
  }
  return false;
}
