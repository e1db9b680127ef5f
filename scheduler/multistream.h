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
/* The waits a task needs, per slot: only the slots in |mask| are set, so a
 * placement clears one word instead of a WEFT_MAX_STREAMS-entry vector
 * (placement here, a replay's plan in capture.c). */
typedef struct weft_wait_set {
  uint64_t mask;
  uint64_t seq[WEFT_MAX_STREAMS];
} weft_wait_set;

/* Adds a wait on (slot, seq) to |w| unless it is on |me|: the later position
 * on a slot wins. */
static inline __attribute__((always_inline)) void weft__wait_need(weft_wait_set *w, uint32_t me,
                                                                  uint32_t slot, uint64_t seq) {
  if (slot == me) return;
  uint64_t bit = UINT64_C(1) << slot;
  if (!(w->mask & bit) || seq > w->seq[slot]) w->seq[slot] = seq;
  w->mask |= bit;
}

/* execute: hands the batches of |slots| to their streams (strategy).
 * flush: executes |slot|'s partial batch. */
void weft__ms_execute(weft_device *dev, const uint32_t *slots, uint32_t n);
void weft__ms_flush(weft_device *dev, uint32_t slot);
void weft__ms_flush_all(weft_device *dev);

/* The buffers a command touches are c->bufs[0..weft__ms_nbufs(c)) (an entry
 * is NULL when its binding did not resolve): a launch's bindings', a write's
 * or a read's one buffer. */
static inline uint32_t weft__ms_nbufs(const cmd *c) {
  return c->kind == CMD_LAUNCH ? c->nb : (c->kind == CMD_WRITE || c->kind == CMD_READ) ? 1u : 0u;
}
/* Align (register's rare path): executes, in the order |c|'s buffers name
 * them, every other slot's batch holding a task that binds one of them. */
void weft__ms_align(weft_device *dev, uint32_t slot, const cmd *c);
/* |slot|'s batch reached max_tasks: executed. */
void weft__ms_batch_full(weft_device *dev, uint32_t slot);
/* Register's first step for one buffer: marks |b| as bound by a task of the
 * batch whose slot bit is |bit| (0: no mark); returns the other slots whose
 * batch binds it (align executes those first). */
static inline uint64_t weft__ms_mark(weft_buf *b, uint64_t bit) {
  uint64_t m = b->pend_mask;
  b->pend_mask = m | bit;
  return m & ~bit;
}
/* Register's second step, for a command whose buffers weft__ms_mark marked
 * with |slot|'s bit (|others|: what it returned, ORed): align, then batch
 * on |slot|, executing the batch once it is full. */
static inline void weft__ms_register_marked(weft_device *dev, uint32_t slot, cmd *c,
                                            uint64_t others) {
  if (__builtin_expect(others != 0, 0)) weft__ms_align(dev, slot, c);
  weft_batch *bt = &dev->ms.batches[slot];
  c->task.link.next = NULL;
  if (bt->tail)
    bt->tail->link.next = &c->task.link;
  else
    bt->head = &c->task;
  bt->tail = &c->task;
  if (__builtin_expect(++bt->n >= dev->max_tasks, 0)) weft__ms_batch_full(dev, slot);
}
/* register: align, then batch on |slot| (whose stream exists), executing
 * the batch once it is full. One pass marks the buffers with the slot (the
 * other slots' batches, executed by align, clear only their own bits) and
 * notes whether another slot's batch binds one of them. */
static inline void weft__ms_register(weft_device *dev, uint32_t slot, cmd *c) {
  uint64_t bit = UINT64_C(1) << slot, others = 0;
  weft_buf *const *bufs = c->bufs;
  for (uint32_t i = 0, n = weft__ms_nbufs(c); i < n; i++)
    if (bufs[i]) others |= weft__ms_mark(bufs[i], bit);
  weft__ms_register_marked(dev, slot, c, others);
}

#endif
