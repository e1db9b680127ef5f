/* The host backend: one worker thread per stream slot, running its tasks in
 * order. Idle workers park on a futex (no busy spinning when there is
 * nothing to do); a submission wakes one only if it parked. */
#include "streams/stream.h"

#include "core/alloc.h"

void weft_stream_wait_for(weft_stream *s, uint64_t seq) {
  if (atomic_load_explicit(&s->completed, memory_order_acquire) >= seq) return;
  atomic_fetch_add_explicit(&s->waits_blocked, 1, memory_order_relaxed);
  for (int i = 0; i < 256; i++) {
    if (atomic_load_explicit(&s->completed, memory_order_acquire) >= seq) return;
    weft__cpu_relax();
  }
  while (atomic_load_explicit(&s->completed, memory_order_acquire) < seq) {
    uint32_t k = weft__ec_prepare(&s->done_ec);
    if (atomic_load_explicit(&s->completed, memory_order_acquire) >= seq) {
      weft__ec_cancel(&s->done_ec);
      return;
    }
    weft__ec_wait(&s->done_ec, k);
  }
}

static _Thread_local void *worker_ctx = NULL;

void *weft_stream_worker_ctx(void) {
  return worker_ctx;
}

static void *worker(void *arg) {
  weft_stream *s = arg;
  worker_ctx = s->ctx;
  for (;;) {
    ck_stack_entry_t *e = weft_inbox_take(&s->inbox);
    if (!e) {
      if (atomic_load_explicit(&s->stop, memory_order_acquire) && weft_inbox_empty(&s->inbox))
        break;
      weft_inbox_wait(&s->inbox, &s->stop);
      continue;
    }
    while (e) {
      ck_stack_entry_t *next = e->next;
      weft_task *t = WEFT_TASK_OF(e);
      for (uint32_t i = 0; i < t->nwaits; i++)
        weft_stream_wait_for(t->waits[i].stream, t->waits[i].seq);
      uint64_t seq = t->seq; /* the task belongs to the owner once completed */
      bool notify = t->notify;
      t->run(t);
      /* release: waiters on this stream and the owner see everything the task wrote. */
      atomic_store_explicit(&s->completed, seq, memory_order_release);
      weft__ec_notify(&s->done_ec);
      if (notify) weft__ec_notify(s->progress);
      e = next;
    }
    weft__ec_notify(s->progress); /* out of work: the owner retires the batch */
  }
  return NULL;
}

weft_status weft_stream_host_create(const weft_allocator *alloc, uint32_t slot,
                                    weft_eventcount *progress, void *ctx, weft_stream **out) {
  weft_stream *s = weft__calloc(alloc, sizeof(*s), WEFT_CACHELINE);
  if (!s) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*s), "stream %u", slot);
  s->slot = slot;
  s->alloc = alloc;
  s->progress = progress;
  s->ctx = ctx;
  atomic_init(&s->completed, 0);
  atomic_init(&s->done_ec.epoch, 0);
  atomic_init(&s->done_ec.sleepers, 0);
  atomic_init(&s->waits_blocked, 0);
  atomic_init(&s->stop, 0);
  weft_inbox_init(&s->inbox);
  int rc = pthread_create(&s->thread, NULL, worker, s);
  if (rc != 0) {
    weft__free(alloc, s, sizeof(*s), WEFT_CACHELINE);
    return weft_error_make(WEFT_ERR_GENERIC, "cannot start the worker of stream %u (error %d)",
                           slot, rc);
  }
  *out = s;
  return NULL;
}

void weft_stream_destroy(weft_stream *s) {
  if (!s) return;
  atomic_store_explicit(&s->stop, 1, memory_order_release);
  weft__ec_notify(&s->inbox.ec);
  pthread_join(s->thread, NULL);
  weft__free(s->alloc, s, sizeof(*s), WEFT_CACHELINE);
}
