/* SchedulerMultiStream: per-stream batches, align, execute_streams with the
 * Interleave and Sequential strategies, and the event rules that order
 * streams only where a buffer crosses them (docs/architecture.md).
 *
 * A task is first *registered* on its slot's batch (no stream position yet),
 * then *placed* when its batch is executed: it gets its position on the
 * stream that runs it, and the waits its buffers need are computed against
 * that stream. Align keeps batches independent of one another: a task is
 * registered only after every other batch touching one of its buffers was
 * executed, so any interleaving of the batches' tasks respects the program's
 * order, and waits only ever name tasks already handed to a worker.
 * Barriers (sync, event records, reads) also wait for their stream's tasks
 * that Interleave placed on other queues (barrier_waits). */
#include "scheduler/multistream.h"

#include "scheduler/trace.h"
#include "core/log.h"

/* Records the access of |b| by the task at (me, seq) and collects the waits
 * it needs: a reader waits for the buffer's last writer, a writer for the
 * last writer and every reader since (read-after-write, write-after-read,
 * write-after-write). The last writer is tracked, not the allocation: an
 * in-place write after a sync is still waited for. */
static inline __attribute__((always_inline)) void
order(weft_device *dev, weft_buf *b, bool write, uint32_t me, uint64_t seq, weft_wait_set *w) {
  (void)dev;
  if (b->lw_seq) weft__wait_need(w, me, b->lw_slot, b->lw_seq);
  if (write) {
    for (uint64_t m = b->read_mask; m; m &= m - 1) { /* only the slots that read it */
      uint32_t s = (uint32_t)__builtin_ctzll(m);
      weft__wait_need(w, me, s, b->last_read[s]);
      b->last_read[s] = 0;
    }
    b->read_mask = 0;
    b->lw_slot = me;
    b->lw_seq = seq;
  } else if (seq > b->last_read[me]) {
    b->last_read[me] = seq;
    b->read_mask |= UINT64_C(1) << me;
  }
}

/* Turns the per-slot wait vector into the task's wait list for stream |me|.
 * A wait is elided when this stream already waited for the origin at that
 * position or later (streams run in order, so everything queued after that
 * wait is past it too). */
static void set_waits(weft_device *dev, cmd *c, uint32_t me, const weft_wait_set *w) {
  uint64_t *synced = &dev->ms.synced[(size_t)me * dev->max_streams];
  c->task.nwaits = 0;
  for (uint64_t m = w->mask; m; m &= m - 1) { /* ascending slots, as a scan would */
    uint32_t s = (uint32_t)__builtin_ctzll(m);
    if (synced[s] >= w->seq[s]) {
      dev->stats.waits_elided++;
      continue;
    }
    synced[s] = w->seq[s];
    c->task.waits[c->task.nwaits].stream = dev->streams[s];
    c->task.waits[c->task.nwaits].seq = w->seq[s];
    c->task.nwaits++;
    dev->stats.cross_stream_waits++;
  }
}

/* A barrier of slot |from| (a sync, an event record, a read: each is ordered
 * after every command submitted on its stream before it) placed on |me|
 * waits for the last task of |from| that Interleave placed on each other
 * queue, and for |from|'s own queue when it is placed elsewhere (a
 * read_async is batched, so align may move it too). Without this, a task of
 * |from| that align ran on another stream's queue could still be running
 * when the barrier completes (tests/device/test_barrier_interleave.c). A
 * barrier on |from|'s own queue then covers those tasks for every later one
 * there (streams run in order), so their record is cleared. Rare kinds:
 * never on the launch path. */
static void barrier_waits(weft_device *dev, uint32_t from, uint32_t me, weft_wait_set *w) {
  for (uint64_t m = dev->ms.away_mask[from]; m; m &= m - 1) {
    uint32_t s = (uint32_t)__builtin_ctzll(m);
    weft__wait_need(w, me, s, dev->ms.away[(size_t)s * dev->max_streams + from]);
  }
  if (from == me)
    dev->ms.away_mask[from] = 0;
  else if (dev->streams[from]->submitted)
    weft__wait_need(w, me, from, dev->streams[from]->submitted);
}

/* place_waits for every kind but a launch, out of line so that the launch
 * loop keeps its registers: a write's or a read's buffer, a barrier's waits
 * for its stream's moved tasks, a stream wait's position. */
static __attribute__((noinline)) void other_waits(weft_device *dev, cmd *c, uint32_t me,
                                                  uint64_t seq, uint64_t batch, weft_wait_set *w) {
  uint32_t from = (uint32_t)__builtin_ctzll(batch);
  if (weft__ms_nbufs(c) && c->bufs[0]) { /* a write or a read: one buffer */
    c->bufs[0]->pend_mask &= ~batch;
    order(dev, c->bufs[0], c->kind == CMD_WRITE, me, seq, w);
    if (c->kind == CMD_READ) barrier_waits(dev, from, me, w);
  } else if (c->kind == CMD_EVENT_WAIT) { /* weft_stream_wait_event: the record's position */
    weft__wait_need(w, me, c->nb, c->offset);
    /* Placed at once on its own queue (events.c flushes it): the slot's
     * later tasks that Interleave moves elsewhere wait for it there. */
    dev->ms.gate[me] = seq;
  } else if (c->kind == CMD_SYNC || c->kind == CMD_EVENT) {
    barrier_waits(dev, from, me, w);
  }
}

/* The waits |c| needs as the task at (me, seq), recorded in |c|; |batch| is
 * the bit of the slot whose batch held it, cleared from its buffers' marks
 * in the same pass (the batch left with take_batch). |gate|: for a task
 * Interleave moved off its slot's queue, that slot's last
 * weft_stream_wait_event position (0: none, and always 0 in place_chain,
 * whose tasks stay on their own queue: the test folds away there). */
static inline __attribute__((always_inline)) void
place_waits(weft_device *dev, cmd *c, uint32_t me, uint64_t seq, uint64_t batch, uint64_t gate) {
  weft_wait_set w; /* only the slots in w.mask are read */
  w.mask = 0;
  /* Locals: the stores below through buffers could alias the command's fields. */
  weft_buf *const *bufs = c->bufs;
  if (c->kind == CMD_LAUNCH) { /* the common kind: its bindings say what it writes */
    const weft_binding *bd = c->bindings;
    for (uint32_t i = 0, n = c->nb; i < n; i++) {
      weft_buf *b = bufs[i];
      if (!b) continue;
      b->pend_mask &= ~batch;
      order(dev, b, weft__is_write(bd[i].access), me, seq, &w);
    }
  } else {
    other_waits(dev, c, me, seq, batch, &w);
  }
  /* A task moved off its slot's queue is still ordered after the slot's
   * last weft_stream_wait_event, as a task left on that queue would be. */
  if (gate) weft__wait_need(&w, me, (uint32_t)__builtin_ctzll(batch), gate);
  if (w.mask)
    set_waits(dev, c, me, &w);
  else
    c->task.nwaits = 0;
}

/* Gives |c| its position on |s| and its waits, and appends it to the chain
 * about to be handed to the worker and to the retirement list (interleaving:
 * tasks of several batches on one stream). */
typedef struct chain {
  weft_task *head, *tail;
} chain;

static void place(weft_device *dev, weft_stream *s, cmd *c, uint64_t batch, uint64_t gate,
                  chain *ch) {
  uint32_t me = s->slot;
  place_waits(dev, c, me, s->submitted + 1, batch, gate);
  c->task.seq = ++s->submitted;
  c->task.placed = ++dev->ms.placed;
  c->on_slot = (uint16_t)me;
  c->task.link.next = NULL;
  if (ch->tail)
    ch->tail->link.next = &c->task.link;
  else
    ch->head = &c->task;
  ch->tail = &c->task;
  struct weft_fifo *f = &dev->ms.fifo[me];
  c->task.fnext = NULL;
  if (f->tail)
    f->tail->fnext = &c->task;
  else
    f->head = &c->task;
  f->tail = &c->task;
  dev->ms.inflight++;
}

/* Places the batch |first| (of the slot whose bit is |batch|) on |s| in its
 * order, as place would each task, with the counters in registers; the
 * batch's chain is the one handed over. Returns its last task. */
static __attribute__((noinline)) weft_task *place_chain(weft_device *dev, weft_stream *s,
                                                        weft_task *first, uint64_t batch) {
  uint32_t me = s->slot;
  uint64_t seq = s->submitted, placed = dev->ms.placed, n = 0;
  struct weft_fifo *f = &dev->ms.fifo[me];
  weft_task *prev = f->tail;
  for (weft_task *t = first; t; t = weft_task_next(t), n++) {
    cmd *c = (cmd *)t;
    place_waits(dev, c, me, ++seq, batch, 0);
    t->seq = seq;
    t->placed = ++placed;
    c->on_slot = (uint16_t)me;
    if (prev)
      prev->fnext = t;
    else
      f->head = t;
    prev = t;
  }
  prev->fnext = NULL;
  f->tail = prev;
  s->submitted = seq;
  dev->ms.placed = placed;
  dev->ms.inflight += n;
  return prev;
}

/* Takes |slot|'s batch (in registration order); placing each of its tasks
 * clears the slot's marks on its buffers. */
static weft_task *take_batch(weft_device *dev, uint32_t slot) {
  weft_batch *bt = &dev->ms.batches[slot];
  weft_task *t = bt->head;
  bt->head = bt->tail = NULL;
  bt->n = 0;
  return t;
}

void weft__ms_execute(weft_device *dev, const uint32_t *slots, uint32_t n) {
  uint32_t ids[WEFT_MAX_STREAMS], k = 0;
  uint64_t seen = 0;
  bool isolated = false;
  for (uint32_t i = 0; i < n; i++) { /* unique slots with work, first seen first */
    uint64_t bit = UINT64_C(1) << slots[i];
    if ((seen & bit) || !dev->ms.batches[slots[i]].n) continue;
    seen |= bit;
    ids[k++] = slots[i];
    isolated |= (dev->ms.isolated & bit) != 0;
  }
  if (!k) return;
  dev->stats.batches_flushed += k;
  if (__builtin_expect(dev->trace != NULL, 0)) /* stamps each task's run */
    weft__trace_flush(dev, ids, k, dev->strategy == WEFT_STRATEGY_INTERLEAVE && k > 1 && !isolated);
  weft_task *q[WEFT_MAX_STREAMS];
  for (uint32_t i = 0; i < k; i++) q[i] = take_batch(dev, ids[i]);
  if (dev->strategy == WEFT_STRATEGY_INTERLEAVE && k > 1 && !isolated) {
    /* Every task on the first stream, round-robin over the batches. A
     * moved task (of batch i > 0) waits for its slot's last stream wait
     * (gate); the last position each batch took is what its slot's
     * barriers wait for (barrier_waits). */
    weft_stream *s = dev->streams[ids[0]];
    chain ch = {NULL, NULL};
    uint64_t gate[WEFT_MAX_STREAMS], last[WEFT_MAX_STREAMS];
    gate[0] = 0;
    for (uint32_t i = 1; i < k; i++) gate[i] = dev->ms.gate[ids[i]];
    for (bool more = true; more;) {
      more = false;
      for (uint32_t i = 0; i < k; i++) {
        weft_task *t = q[i];
        if (!t) continue;
        q[i] = weft_task_next(t);
        more |= q[i] != NULL;
        if (i) dev->stats.tasks_interleaved++;
        place(dev, s, (cmd *)t, UINT64_C(1) << ids[i], gate[i], &ch);
        last[i] = s->submitted;
      }
    }
    uint64_t *on = &dev->ms.away[(size_t)ids[0] * dev->max_streams];
    for (uint32_t i = 1; i < k; i++) {
      on[ids[i]] = last[i];
      dev->ms.away_mask[ids[i]] |= UINT64_C(1) << ids[0];
    }
    weft_stream_submit(s, ch.head, ch.tail);
    return;
  }
  for (uint32_t i = 0; i < k; i++) { /* each batch on its own stream */
    weft_stream *s = dev->streams[ids[i]];
    weft_task *tail = place_chain(dev, s, q[i], UINT64_C(1) << ids[i]);
    weft_stream_submit(s, q[i], tail);
  }
}

void weft__ms_flush(weft_device *dev, uint32_t slot) {
  weft__ms_execute(dev, &slot, 1);
}

/* Idle or draining: every batch on its own stream. Interleaving merges only
 * batches that a task's buffers relate (align) or a synchronous operation
 * names; merging unrelated streams here would make independent work wait
 * behind a long kernel it shares nothing with. */
void weft__ms_flush_all(weft_device *dev) {
  for (uint32_t i = 0; i < dev->max_streams; i++)
    if (dev->ms.batches[i].n) weft__ms_flush(dev, i);
}

void weft__ms_align(weft_device *dev, uint32_t slot, const cmd *c) {
  uint64_t bit = UINT64_C(1) << slot, others = 0;
  uint32_t ids[WEFT_MAX_STREAMS], k = 0;
  for (uint32_t i = 0, n = weft__ms_nbufs(c); i < n; i++) {
    const weft_buf *b = c->bufs[i];
    uint64_t m = b ? b->pend_mask & ~bit & ~others : 0;
    others |= m;
    for (; m; m &= m - 1) ids[k++] = (uint32_t)__builtin_ctzll(m);
  }
  if (!k) return;
  dev->stats.align_flushes++;
  if (__builtin_expect(dev->trace != NULL, 0)) weft__trace_mark(dev, WEFT_TRACE_ALIGN, slot, k, 0);
  weft__ms_execute(dev, ids, k);
}

void weft__ms_batch_full(weft_device *dev, uint32_t slot) {
  dev->stats.batches_full++;
  weft__ms_flush(dev, slot);
}

/* ---- streams, created lazily ----------------------------------------------------------- */

/* Drop-queue fences on the host backend: a stream's sequence number. */
static uint64_t fence_make(void *ctx) {
  struct weft_slot_ref *r = ctx;
  return r->dev->streams[r->slot]->submitted;
}

static void fence_wait(void *ctx, uint64_t seq) {
  struct weft_slot_ref *r = ctx;
  weft__ms_flush(r->dev, r->slot); /* the work the fence covers must reach the worker */
  weft_stream_wait_for(r->dev->streams[r->slot], seq);
}

weft_stream *weft__stream_create(weft_device *dev, uint32_t slot, weft_status *err) {
  weft_status st = dev->backend->vt->stream_create(dev->backend, slot, &dev->streams[slot]);
  if (st) {
    *err = st;
    return NULL;
  }
  dev->slot_refs[slot] = (struct weft_slot_ref){dev, slot};
  weft_drop_queue_init(&dev->drops[slot], &dev->alloc,
                       (weft_drop_fence_ops){fence_make, fence_wait, &dev->slot_refs[slot]});
  dev->drops[slot].held = &dev->staged_bytes;
  dev->stats.streams_created++;
  if (__builtin_expect(dev->trace != NULL, 0)) weft__trace_stamp(dev->streams[slot], true);
  WEFT_LOGF(WEFT_LOG_INFO, "stream slot %u created (%llu of %u)", slot,
            (unsigned long long)dev->stats.streams_created, dev->max_streams);
  return dev->streams[slot];
}
