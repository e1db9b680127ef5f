/* Copies and the questions that wait for a stream: writes, reads, syncs and
 * checks, in the order each happens (client call, scheduler, a stream's
 * worker, retirement). A read answers from the error graph once every
 * failure it depends on has been applied; a check answers at once from
 * what completed work has shown so far. */
#include "scheduler/copy.h"

#include <string.h>

#include "core/alloc.h"
#include "scheduler/buffers.h"
#include "scheduler/window.h"
#include "scheduler/command.h"
#include "scheduler/events.h"
#include "scheduler/export.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/multistream.h"
#include "scheduler/scope.h"
#include "scheduler/submit.h"

static void write_answer(cmd *c);
static void run_write(weft_task *t, weft_stream *on);
static void run_read(weft_task *t, weft_stream *on);
static void run_barrier(weft_task *t, weft_stream *on);

/* ---- 1. client calls ----------------------------------------------------------------------- */

/* Takes |len| bytes of the staging window; false when they do not fit. */
static bool staging_take(weft_device *dev, uint64_t len) {
  uint64_t cur = atomic_load_explicit(&dev->staged_bytes, memory_order_relaxed);
  do {
    if (cur > WEFT_STAGING_WINDOW || len > WEFT_STAGING_WINDOW - cur) return false;
  } while (!atomic_compare_exchange_weak_explicit(&dev->staged_bytes, &cur, cur + len,
                                                  memory_order_relaxed, memory_order_relaxed));
  return true;
}

weft_status weft_buffer_write(weft_device *dev, weft_stream_id stream, weft_buffer buf,
                              uint64_t offset, const void *src, uint64_t len) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  uint64_t size;
  if ((st = weft__buf_lookup(dev, buf, &size))) return st;
  if (!src && len) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "src is NULL");
  if ((st = weft__check_range(size, offset, len, "write"))) return st;
  if (len == 0) return NULL;
  bool staged = len > WEFT_WRITE_INLINE, direct = false;
  if (staged) {
    /* Staged (the call returns at once) within the staging window; a write
     * past WEFT_WRITE_STAGE_MAX or the window is copied by the worker from
     * |src| while this thread waits. A thread the device's progress depends
     * on (the scheduler: a reclaim callback; a worker: a kernel) stages. */
    bool may_wait = weft__dev_scheduling() != dev && weft_stream_worker_ctx() != dev;
    direct = may_wait && (len > WEFT_WRITE_STAGE_MAX || !staging_take(dev, len));
    if (!may_wait) atomic_fetch_add_explicit(&dev->staged_bytes, len, memory_order_relaxed);
    staged = !direct;
  }
  size_t extra = weft__align8(sizeof(weft_buf *)) +
                 weft__align8(sizeof(weft_stream_wait) * dev->max_streams) +
                 (staged || direct ? 0 : (size_t)len);
  cmd *c = weft__cmd_new_on(dev, CMD_WRITE, extra, stream);
  if (!c) {
    if (staged) atomic_fetch_sub_explicit(&dev->staged_bytes, len, memory_order_relaxed);
    return weft__oom(extra, "a write command");
  }
  char *p = (char *)c + weft__align8(sizeof(cmd));
  c->bufs = (weft_buf **)p;
  p += weft__align8(sizeof(weft_buf *));
  c->task.waits = (weft_stream_wait *)p;
  p += weft__align8(sizeof(weft_stream_wait) * dev->max_streams);
  if (staged) { /* a separate block: the drop queue keeps it until the stream consumed it */
    p = len <= SIZE_MAX ? weft__alloc(&dev->alloc, (size_t)len, 16) : NULL;
    if (!p) {
      atomic_fetch_sub_explicit(&dev->staged_bytes, len, memory_order_relaxed);
      weft__cmd_free(c);
      return weft__oom((size_t)len, "staging a write");
    }
  }
  c->staged = staged;
  c->stream = stream;
  c->buffer = buf.id;
  c->offset = offset;
  c->len = len;
  if (direct) { /* no copy here: the worker reads |src| before answering */
    weft_token tok;
    weft__token_init(&tok);
    c->token = &tok;
    c->data = (void *)(uintptr_t)src;
    weft__cmd_submit(dev, c);
    return weft__token_wait(&tok);
  }
  c->data = p;
  memcpy(p, src, len);
  weft__cmd_submit(dev, c);
  return NULL;
}

/* A blocking call on the running kernel's own stream waits for that kernel. */
static weft_status refuse_on_own_stream(weft_device *dev, weft_stream_id stream, const char *call,
                                        const char *why) {
  const cmd *k = weft__running_kernel(dev);
  if (!k || weft__slot_of(dev, k->stream) != weft__slot_of(dev, stream)) return NULL;
  return weft__refuse_in_kernel(dev, call, why);
}

weft_status weft_buffer_read(weft_device *dev, weft_stream_id stream, weft_buffer buf,
                             uint64_t offset, void *dst, uint64_t len) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  uint64_t size;
  if ((st = weft__buf_lookup(dev, buf, &size))) return st;
  if (!dst && len) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "dst is NULL");
  if ((st = weft__check_range(size, offset, len, "read"))) return st;
  if ((st = refuse_on_own_stream(dev, stream, "weft_buffer_read on the kernel's own stream",
                                 "the read is ordered after every command submitted there "
                                 "before it, the kernel included")))
    return st;
  size_t extra = weft__align8(sizeof(weft_buf *)) + sizeof(weft_stream_wait) * dev->max_streams;
  cmd *c = weft__cmd_new_on(dev, CMD_READ, extra, stream);
  if (!c) return weft__oom(extra, "a read command");
  char *p = (char *)c + weft__align8(sizeof(cmd));
  c->bufs = (weft_buf **)p;
  c->task.waits = (weft_stream_wait *)(p + weft__align8(sizeof(weft_buf *)));
  c->stream = stream;
  c->buffer = buf.id;
  c->offset = offset;
  c->len = len;
  c->data = dst;
  return weft__cmd_call(dev, c);
}

weft_status weft_buffer_read_async(weft_device *dev, weft_stream_id stream, weft_buffer buf,
                                   uint64_t offset, void *dst, uint64_t len, weft_event *done) {
  if (done) done->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!done) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "done is NULL");
  uint64_t size;
  if ((st = weft__buf_lookup(dev, buf, &size))) return st;
  if (!dst && len) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "dst is NULL");
  if ((st = weft__check_range(size, offset, len, "read"))) return st;
  if (len > SIZE_MAX) return weft__oom(SIZE_MAX, "staging a read");
  weft_event_obj *e = weft__event_new(dev, done, &st);
  if (!e) return st;
  /* The worker copies into the staging block; retirement moves the bytes to
   * |dst| only once the read is known good (weft__event_complete). */
  e->staging = len ? weft__alloc(&dev->alloc, (size_t)len, 16) : NULL;
  e->dst = dst;
  e->len = len;
  size_t extra = weft__align8(sizeof(weft_buf *)) + sizeof(weft_stream_wait) * dev->max_streams;
  cmd *c = len && !e->staging ? NULL : weft__cmd_new_on(dev, CMD_READ, extra, stream);
  if (!c) {
    bool staging = !len || e->staging;
    weft__event_discard(dev, e); /* frees the staging block too */
    done->id = 0;
    return staging ? weft__oom(extra, "a read command") : weft__oom((size_t)len, "staging a read");
  }
  char *p = (char *)c + weft__align8(sizeof(cmd));
  c->bufs = (weft_buf **)p;
  c->task.waits = (weft_stream_wait *)(p + weft__align8(sizeof(weft_buf *)));
  c->rd = RD_ASYNC;
  c->event = e;
  c->stream = stream;
  c->buffer = buf.id;
  c->offset = offset;
  c->len = len;
  c->data = e->staging;
  weft__cmd_submit(dev, c);
  return NULL;
}

weft_status weft__buffer_export(weft_device *dev, weft_stream_id stream, weft_buffer buf,
                                uint64_t offset, uint64_t len, uint64_t *address,
                                struct weft_export **out) {
  if (out) *out = NULL;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  if (!address || !out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "address or out is NULL");
  uint64_t size;
  if ((st = weft__buf_lookup(dev, buf, &size))) return st;
  if ((st = weft__check_range(size, offset, len, "export"))) return st;
  if ((st = refuse_on_own_stream(dev, stream, "an export on the kernel's own stream",
                                 "it is ordered after every command submitted there before it, "
                                 "the kernel included")))
    return st;
  struct weft_export *e = weft__calloc(&dev->alloc, sizeof(*e), 16);
  if (!e) return weft__oom(sizeof(*e), "an export");
  size_t extra = weft__align8(sizeof(weft_buf *)) + sizeof(weft_stream_wait) * dev->max_streams;
  cmd *c = weft__cmd_new_on(dev, CMD_READ, extra, stream);
  if (!c) {
    weft__free(&dev->alloc, e, sizeof(*e), 16);
    return weft__oom(extra, "an export command");
  }
  char *p = (char *)c + weft__align8(sizeof(cmd));
  c->bufs = (weft_buf **)p;
  c->task.waits = (weft_stream_wait *)(p + weft__align8(sizeof(weft_buf *)));
  c->rd = RD_EXPORT;
  c->export = e;
  c->stream = stream;
  c->buffer = buf.id;
  c->offset = offset;
  c->len = len;
  c->data = NULL; /* nothing is copied: the read's order and answer only */
  e->dev = dev;
  if ((st = weft__cmd_call(dev, c))) {
    weft__free(&dev->alloc, e, sizeof(*e), 16); /* never pinned: the scheduler let it go */
    return st;
  }
  *address = e->address;
  *out = e;
  return NULL;
}

weft_status weft_sync(weft_device *dev, weft_stream_id stream) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  if ((st = refuse_on_own_stream(dev, stream, "weft_sync on the kernel's own stream",
                                 "the barrier waits for everything submitted there before it, "
                                 "the kernel included")))
    return st;
  /* Room for a wait per slot: the barrier waits for its stream's tasks that
   * Interleave placed on other queues (multistream.c, barrier_waits). */
  size_t extra = sizeof(weft_stream_wait) * dev->max_streams;
  cmd *c = weft__cmd_new_on(dev, CMD_SYNC, extra, stream);
  if (!c) return weft__oom(sizeof(cmd) + extra, "a sync command");
  c->task.waits = (weft_stream_wait *)((char *)c + weft__align8(sizeof(cmd)));
  c->stream = stream;
  return weft__cmd_call(dev, c);
}

weft_status weft_check(weft_device *dev, const weft_buffer *bufs, size_t n) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  if (n && !bufs) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "bufs is NULL");
  if (n > UINT32_MAX) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "too many buffers");
  for (size_t i = 0; i < n; i++)
    if ((st = weft__buf_lookup(dev, bufs[i], NULL))) return st;
  if (n == 0) return NULL;
  size_t extra = sizeof(uint64_t) * n;
  cmd *c = weft__cmd_new(dev, CMD_CHECK, extra);
  if (!c) return weft__oom(extra, "a check command");
  c->handles = (uint64_t *)((char *)c + weft__align8(sizeof(cmd)));
  for (size_t i = 0; i < n; i++) c->handles[i] = bufs[i].id;
  c->nb = (uint32_t)n;
  return weft__cmd_call(dev, c);
}

/* ---- 2. scheduler -------------------------------------------------------------------------- */

/* Frees a write's staged bytes that never reached a stream. */
static void unstage(weft_device *dev, cmd *c) {
  if (c->kind == CMD_WRITE && c->staged) {
    weft__free(&dev->alloc, c->data, (size_t)c->len, 16);
    atomic_fetch_sub_explicit(&dev->staged_bytes, c->len, memory_order_relaxed);
  }
  c->staged = false;
}

static weft_stream *stream_or_fail(weft_device *dev, cmd *c, weft_buf *b, bool write) {
  weft_status err = NULL;
  weft_stream *s = weft__stream_get(dev, weft__slot_of(dev, c->stream), &err);
  if (s) return s;
  if (c->token) {
    weft__token_complete(c->token, err);
  } else if (!write && c->rd == RD_ASYNC) {
    weft__event_complete(dev, c->event, err);
  } else {
    weft_binding bd = {
        .offset = c->offset, .size = c->len, .access = write ? WEFT_WRITE : WEFT_READ};
    weft__fail_unstarted(dev, err, &b, &bd, 1);
  }
  return NULL;
}

/* True when the placed task |t| cannot complete before the running launch
 * |k| does: it follows |k| on its stream, or waits, through any chain of
 * cross-stream waits, for a position at or past it. Walks the tasks not yet
 * retired, each once (a rare path: a kernel's own read or sync). */
bool weft__waits_for_kernel(weft_device *dev, const cmd *t, const cmd *k) {
  uint64_t need[WEFT_MAX_STREAMS] = {0};
  const weft_task *at[WEFT_MAX_STREAMS];
  for (uint32_t s = 0; s < dev->max_streams; s++) at[s] = dev->ms.fifo[s].head;
  need[t->on_slot] = t->task.seq;
  for (bool more = true; more;) {
    more = false;
    for (uint32_t s = 0; s < dev->max_streams; s++)
      for (; at[s] && at[s]->seq <= need[s]; at[s] = at[s]->fnext)
        for (uint32_t i = 0; i < at[s]->nwaits; i++) {
          const weft_stream_wait *w = &at[s]->waits[i];
          if (w->seq > need[w->stream->slot]) {
            need[w->stream->slot] = w->seq;
            more = true;
          }
        }
  }
  return need[k->on_slot] >= k->task.seq;
}

/* A kernel's read or sync |c|, placed, that would wait for that kernel: it
 * is answered now and stays on its stream as a no-op. Nothing races: the
 * task cannot run before the kernel ends, which needs this answer first. */
static void refuse_if_waits_for_caller(weft_device *dev, cmd *c, const char *call) {
  if (!c->caller || !weft__waits_for_kernel(dev, c, c->caller)) return;
  weft_token *tok = c->token;
  weft_status st =
      weft__kernel_refusal(dev, c->caller, call,
                           "it is ordered, through the buffers streams share, after work "
                           "that runs only once the kernel has returned");
  c->token = NULL;
  c->len = 0;
  weft__token_complete(tok, st);
}

static void sched_rw(weft_device *dev, cmd *c, bool write) {
  weft_buf *b = weft__buf_resolve(dev, c->buffer);
  if (!b) { /* released meanwhile: a staged write's copy and window bytes go back too */
    if (c->token) weft__token_complete(c->token, weft__buf_not_found(c->buffer));
    if (!write && c->rd == RD_ASYNC)
      weft__event_complete(dev, c->event, weft__buf_not_found(c->buffer));
    unstage(dev, c);
    weft__cmd_free(c);
    return;
  }
  if (write && dev->mem.dry_depth) { /* measured, not run: maps nothing */
    unstage(dev, c);
    write_answer(c);
    weft__cmd_free(c);
    return;
  }
  if (!write) {
    weft_status refused = weft__capture_refuse_sync(dev, c->stream, "read");
    if (refused) {
      if (c->rd == RD_ASYNC)
        weft__event_complete(dev, c->event, refused);
      else
        weft__token_complete(c->token, refused);
      weft__cmd_free(c);
      return;
    }
  } else {
    weft__capture_on_write(dev, c->stream, b->id);
  }
  weft_stream *s = stream_or_fail(dev, c, b, write);
  if (!s) {
    unstage(dev, c);
    weft__cmd_free(c);
    return;
  }
  c->bufs[0] = b;
  weft__buf_map(dev, b);
  b->pending++;
  if (write) c->p = weft__scope_id(dev, c);
  c->task.run = write ? run_write : run_read;
  c->task.notify = !write; /* the reader waits for the retirement, which answers it */
  bool staged = c->staged, waited = c->token != NULL; /* a read, or a direct write */
  c->staged = false; /* from here on, the drop queue owns the bytes */
  weft__ms_register(dev, s->slot, c);
  /* An async read's event is a point on the stream as a record's is: placed
   * at once, so that weft_stream_wait_event orders another stream after the
   * read's position, and a kernel's wait on an event that waits for the
   * kernel is refused (events.c, weft__event_process_check), not parked. */
  bool async = !write && c->rd == RD_ASYNC;
  if (async) c->event->rec = c;
  /* A synchronous operation flushes its stream; so does a staged write,
   * whose bytes the drop queue fences with its position on the stream. */
  if (waited || staged || async) weft__ms_flush(dev, s->slot);
  if (!write) refuse_if_waits_for_caller(dev, c, "weft_buffer_read");
  if (staged) {
    weft_drop_queue_push(&dev->drops[s->slot], c->data, (size_t)c->len);
    if (weft_drop_queue_should_flush(&dev->drops[s->slot]))
      weft_drop_queue_flush(&dev->drops[s->slot]);
  }
}

void weft__copy_schedule_sync(weft_device *dev, cmd *c) {
  uint32_t slot = weft__slot_of(dev, c->stream);
  weft_status refused = weft__capture_refuse_sync(dev, c->stream, "sync");
  if (refused) {
    weft__token_complete(c->token, refused);
    weft__cmd_free(c);
    return;
  }
  if (!dev->streams[slot]) {
    /* Nothing ever ran there; a question never creates a stream. */
    weft__token_complete(c->token,
                         weft__poisoned(dev) ? weft_error_clone(dev->live.poison_error) : NULL);
    weft__cmd_free(c);
    return;
  }
  c->task.run = run_barrier;
  weft__ms_register(dev, slot, c);
  weft__ms_flush(dev, slot);
  refuse_if_waits_for_caller(dev, c, "weft_sync");
}

void weft__copy_check(weft_device *dev, cmd *c) {
  /* Answered from the error graph, without a barrier: what completed work
   * has shown so far. */
  weft_target *t = weft_failures_write_set(&dev->failures, c->nb);
  if (!t) {
    weft__token_complete(c->token, weft__oom(sizeof(weft_target) * c->nb, "a check"));
    weft__cmd_free(c);
    return;
  }
  for (uint32_t i = 0; i < c->nb; i++) {
    weft_buf *b = weft__buf_resolve(dev, c->handles[i]);
    if (!b) {
      weft__token_complete(c->token, weft__buf_not_found(c->handles[i]));
      weft__cmd_free(c);
      return;
    }
    t[i] = weft__target(b, 0, b->size);
  }
  weft__token_complete(c->token, weft_failures_ensure_written(&dev->failures, t, c->nb));
  weft__cmd_free(c);
}

/* ---- 3. a stream's worker ------------------------------------------------------------------ */

/* Copy |c| as its backend sees it (the buffer's bytes only once allocated). */
static weft_copy_desc copy_desc(cmd *c) {
  weft_buf *b = c->bufs[0];
  return (weft_copy_desc){.device = b->ptr ? weft__buf_ptr(b, c->offset) : NULL,
                          .host = c->data,
                          .len = c->len,
                          .state = &c->copy_state};
}

/* A write or read retired: the backend gives back what it kept for it. */
static void copy_done(weft_device *dev, cmd *c, bool deliver) {
  if (!dev->backend->vt->copy_done) return;
  weft_copy_desc d = copy_desc(c);
  dev->backend->vt->copy_done(dev->backend, &d, deliver);
}

static void write_bytes(cmd *c, weft_stream *on) {
  weft_buf *b = c->bufs[0];
  if (weft__poisoned(c->dev)) {
    c->result = OUT_POISONED;
    return;
  }
  c->result = OUT_RUN;
  if (!b->ptr) return; /* unallocated: the buffer keeps the reason */
  weft_backend_base *be = c->dev->backend;
  weft_copy_desc d = copy_desc(c);
  weft_status err = be->vt->write(be, on, &d);
  if (err) { /* the bytes were not written: the range carries why */
    c->result = OUT_FAILED;
    c->error = err;
    weft_taint_set(&b->exec, &c->dev->alloc, NULL, weft__range_of(c->offset, c->len), c->p);
    return;
  }
  weft_taint_written(&b->exec, &c->dev->alloc, NULL, weft__range_of(c->offset, c->len));
}

/* A write with a token is a direct one (weft_buffer_write): its caller waits
 * until the bytes were taken from its memory, which they now are. */
static void write_answer(cmd *c) {
  weft_token *tok = c->token;
  if (!tok) return;
  c->token = NULL; /* the caller's stack: not touched once answered */
  weft__token_complete(tok, c->result == OUT_POISONED ? weft_error_clone(c->dev->live.poison_error)
                                                      : NULL);
}

static void run_write(weft_task *t, weft_stream *on) {
  cmd *c = (cmd *)t;
  write_bytes(c, on);
  /* A deferred copy from pageable memory may still be reading |src| (the
   * CUDA driver need not stage it before returning): answered when the write
   * retires. */
  if (!c->dev->backend->deferred) write_answer(c);
}

/* The bytes are copied here; whether they can be trusted is answered by the
 * scheduler from the error graph when the read completes, after every
 * failure it depends on has been applied. */
static void run_read(weft_task *t, weft_stream *on) {
  cmd *c = (cmd *)t;
  weft_buf *b = c->bufs[0];
  if (weft__poisoned(c->dev)) {
    c->result = OUT_POISONED;
    return;
  }
  c->result = OUT_RUN;
  if (!b->ptr || !c->len || !c->data) return; /* an export copies nothing */
  weft_backend_base *be = c->dev->backend;
  weft_copy_desc d = copy_desc(c);
  weft_status err = be->vt->read(be, on, &d);
  if (err) {
    c->result = OUT_FAILED;
    c->error = err;
    return;
  }
  /* An async read on the host fills |dst| as it runs, when the bytes are
   * clean by the run-time taint (the one launches are skipped by, which the
   * error graph's verdict at retirement agrees with): so work that
   * weft_stream_wait_event orders after the read finds |dst| filled. Tainted
   * bytes wait for the verdict, and a failed read leaves |dst| untouched. A
   * deferred backend's bytes land in the staging block later: it fills |dst|
   * at retirement. */
  if (c->rd == RD_ASYNC && !be->deferred &&
      !weft_taint_failure(&b->exec, weft__range_of(c->offset, c->len))) {
    weft_event_obj *e = c->event;
    memcpy(e->dst, c->data, (size_t)c->len);
    e->filled = true;
  }
}

static void run_barrier(weft_task *t, weft_stream *on) {
  (void)on;
  cmd *c = (cmd *)t;
  c->result = weft__poisoned(c->dev) ? OUT_POISONED : OUT_RUN;
  /* A deferred backend's barrier is answered when it retires. */
  if (c->dev->backend->deferred || !c->token) return;
  weft__token_complete(
      c->token, c->result == OUT_POISONED ? weft_error_clone(c->dev->live.poison_error) : NULL);
}

void weft__copy_schedule_write(weft_device *dev, cmd *c) {
  sched_rw(dev, c, true);
}

void weft__copy_schedule_read(weft_device *dev, cmd *c) {
  sched_rw(dev, c, false);
}

/* ---- 4. scheduler, at retirement ------------------------------------------------------ */

void weft__copy_complete_write(weft_device *dev, cmd *c) {
  weft_buf *b = c->bufs[0];
  write_answer(c); /* host: answered when it ran; deferred: the copy is done now */
  copy_done(dev, c, false);
  weft_target t = weft__target(b, c->offset, c->len);
  if (c->result == OUT_RUN && b->allocated) { /* a host copy runs in a write scope too */
    weft__run_scope(&dev->failures, c->p, &t, 1);
  } else if (c->result == OUT_FAILED) { /* a copy the backend refused */
    weft_failures_exit_write(&dev->failures, weft_failures_enter_write(&dev->failures, c->p, &t, 1),
                             &t, 1, c->error);
    c->error = NULL;
  }
  weft__buf_unpin(dev, b);
}

void weft__copy_complete_read(weft_device *dev, cmd *c) {
  weft_buf *b = c->bufs[0];
  weft_status st;
  if (c->result == OUT_POISONED) {
    st = weft_error_clone(dev->live.poison_error);
  } else if (c->result == OUT_FAILED) { /* the copy back failed; the buffer is intact */
    st = c->error;
    c->error = NULL;
  } else {
    weft_target t = weft__target(b, c->offset, c->len);
    st = weft_failures_ensure_written(&dev->failures, &t, 1);
    if (!st && !b->allocated) { /* no memory was left to record why: still say it */
      char name[48];
      weft__buf_name(b->id, name, sizeof(name));
      st = weft_error_make(WEFT_ERR_NOT_FOUND, "%s was never allocated", name);
    }
  }
  copy_done(dev, c, !st);
  if (c->rd == RD_ASYNC) {
    weft__event_complete(dev, c->event, st); /* the staged bytes reach the caller if |st| is NULL */
  } else if (c->token) {
    if (c->rd == RD_EXPORT && !st) weft__export_pin(dev, c->export, b, c->offset);
    weft__token_complete(c->token, st);
  } else { /* refused: its kernel had the answer */
    weft_error_free(st);
  }
  weft__buf_unpin(dev, b);
}

void weft__copy_complete_sync(weft_device *dev, cmd *c) {
  if (dev->backend->deferred && c->token) /* the barrier's position has completed */
    weft__token_complete(
        c->token, c->result == OUT_POISONED ? weft_error_clone(dev->live.poison_error) : NULL);
}
