/* The device, its scheduler thread and the public calls that feed it.
 *
 * Client side (any thread, no lock): validate the arguments against the
 * lock-free handle table, build one command, push it on the inbox. Blocking
 * calls then wait on a token on their own stack.
 *
 * Scheduler side (one thread): resolve handles to buffers, order the task
 * after the work it depends on (a wait on another stream's cursor only where
 * a buffer crosses streams), batch it on its stream, and, when the worker
 * hands it back, apply its outcome to the scheduler's taint view and free
 * what it kept alive. */
#include "scheduler/device.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "core/error.h"

/* ---- commands -------------------------------------------------------------------------- */

static size_t align8(size_t n) {
  return (n + 7u) & ~(size_t)7u;
}

/* Commands come from per-size-class free lists, so a device in steady state
 * allocates nothing per launch: the scheduler returns every command to its
 * class when it is done with it. Larger commands use the allocator. */
static uint32_t cmd_class(size_t bytes) {
  for (uint32_t k = 0; k < WEFT_CMD_CLASSES; k++)
    if (bytes <= (WEFT_CMD_CLASS_MIN << k)) return k;
  return WEFT_CMD_CLASSES;
}

static void combine(weft_device *dev);

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
  return atomic_load_explicit(&r->dev->pending[r->budget].n, memory_order_acquire) <
         r->dev->max_pending;
}

/* Waits (spin, then park on the room event count, which every retirement
 * pass signals) until |ready|. Combining clients first help retire; a pool
 * thread never takes the scheduler role (it could end up waiting for the
 * kernel it runs). */
void weft__wait_room(weft_device *dev, bool (*ready)(void *), void *arg) {
  if (ready(arg)) return;
  if (dev->combining && weft_stream_worker_ctx() != dev) {
    combine(dev);
    weft__signal_raise(&dev->wake);
  }
  for (int i = 0; i < 64; i++) {
    if (ready(arg)) return;
    weft__cpu_relax();
  }
  while (!ready(arg)) {
    WEFT_HUNT_POINT(46);
    uint32_t k = weft__ec_prepare(&dev->room);
    if (ready(arg)) {
      weft__ec_cancel(&dev->room);
      return;
    }
    weft__ec_wait(&dev->room, k);
  }
}

/* false: no room, and the caller may not wait (|wait| false) or must not. */
static bool wait_for_room(weft_device *dev, uint32_t budget, bool wait) {
  room_arg r = {dev, budget};
  if (room_for_one(&r)) return true;
  if (weft__dev_scheduling() == dev || weft_stream_worker_ctx() == dev) return true;
  if (!wait) return false;
  atomic_fetch_add_explicit(&dev->backpressure_waits, 1, memory_order_relaxed);
  weft__wait_room(dev, room_for_one, &r);
  return true;
}

static uint32_t slot_of(weft_device *dev, weft_stream_id id);

static cmd *cmd_alloc(weft_device *dev, cmd_kind kind, size_t extra, uint32_t budget, bool wait) {
  if (!wait_for_room(dev, budget, wait)) return NULL;
  size_t bytes = align8(sizeof(cmd)) + extra;
  uint32_t k = cmd_class(bytes);
  cmd *c = NULL;
  if (k < WEFT_CMD_CLASSES) {
    ck_stack_entry_t *e = weft_freelist_pop(&dev->cmd_pool[k]);
    c = e ? (cmd *)WEFT_TASK_OF(e) : NULL;
    bytes = WEFT_CMD_CLASS_MIN << k;
  }
  if (!c) c = weft__alloc(&dev->alloc, bytes, 16);
  if (!c) return NULL;
  memset(c, 0, sizeof(*c));
  c->kind = kind;
  c->budget = (uint16_t)budget;
  c->bytes = bytes;
  c->dev = dev;
  uint64_t n = atomic_fetch_add_explicit(&dev->pending[budget].n, 1, memory_order_relaxed) + 1;
  uint64_t peak = atomic_load_explicit(&dev->pending_peak, memory_order_relaxed);
  while (n > peak &&
         !atomic_compare_exchange_weak_explicit(&dev->pending_peak, &peak, n, memory_order_relaxed,
                                                memory_order_relaxed)) {
  }
  return c;
}

cmd *weft__cmd_new(weft_device *dev, cmd_kind kind, size_t extra) {
  return cmd_alloc(dev, kind, extra, WEFT_MAX_STREAMS, true);
}

cmd *weft__cmd_new_on(weft_device *dev, cmd_kind kind, size_t extra, weft_stream_id stream) {
  return cmd_alloc(dev, kind, extra, slot_of(dev, stream), true);
}

/* Lowers a budget's count by |n| and wakes its waiters. */
static void budget_release(weft_device *dev, uint32_t budget, uint64_t n) {
  atomic_fetch_sub_explicit(&dev->pending[budget].n, n, memory_order_seq_cst);
  weft__ec_notify(&dev->room);
}

/* Returns the scheduler's retired commands to their classes (one push per
 * class) and lowers the pending count once. */
static void cmd_free_flush(weft_device *dev) {
  if (!dev->fc_n) return;
  for (uint32_t k = 0; k < WEFT_CMD_CLASSES; k++) {
    if (!dev->fc_head[k]) continue;
    weft_freelist_push_chain(&dev->cmd_pool[k], dev->fc_head[k], dev->fc_tail[k]);
    dev->fc_head[k] = dev->fc_tail[k] = NULL;
  }
  dev->fc_n = 0;
  for (uint64_t m = dev->fc_budgets; m; m &= m - 1) {
    uint32_t b = (uint32_t)__builtin_ctzll(m);
    atomic_fetch_sub_explicit(&dev->pending[b].n, dev->fc_pending[b], memory_order_seq_cst);
    dev->fc_pending[b] = 0;
  }
  dev->fc_budgets = 0;
  if (dev->fc_pending[WEFT_MAX_STREAMS]) {
    atomic_fetch_sub_explicit(&dev->pending[WEFT_MAX_STREAMS].n, dev->fc_pending[WEFT_MAX_STREAMS],
                              memory_order_seq_cst);
    dev->fc_pending[WEFT_MAX_STREAMS] = 0;
  }
  WEFT_HUNT_POINT(45);
  /* A waiting client may need room for several commands (a replay): wake
   * waiters on every pass; without one, this is a fence and a load. */
  weft__ec_notify(&dev->room);
}

void weft__cmd_free(cmd *c) {
  if (!c->bytes) return; /* on close's stack */
  weft_device *dev = c->dev;
  uint32_t k = cmd_class(c->bytes);
  bool pooled = k < WEFT_CMD_CLASSES && c->bytes == (WEFT_CMD_CLASS_MIN << k);
  if (pooled && weft__dev_scheduling() == dev) { /* batched: see cmd_free_flush */
    c->task.link.next = NULL;
    if (dev->fc_tail[k])
      dev->fc_tail[k]->next = &c->task.link;
    else
      dev->fc_head[k] = &c->task.link;
    dev->fc_tail[k] = &c->task.link;
    if (!c->detached) {
      dev->fc_pending[c->budget]++;
      if (c->budget < WEFT_MAX_STREAMS) dev->fc_budgets |= UINT64_C(1) << c->budget;
    }
    if (++dev->fc_n >= 256) cmd_free_flush(dev);
    return;
  }
  bool counted = !c->detached;
  uint32_t budget = c->budget; /* |c| is gone below */
  if (pooled)
    weft_freelist_push(&dev->cmd_pool[k], &c->task.link);
  else
    weft__free(&dev->alloc, c, c->bytes, 16);
  if (counted) budget_release(dev, budget, 1);
}

void weft__cmd_detach(weft_device *dev, cmd *c) {
  c->detached = true;
  budget_release(dev, c->budget, 1);
}

/* Close: every command is back in its class; free them all. */
static void cmd_pool_destroy(weft_device *dev) {
  for (uint32_t k = 0; k < WEFT_CMD_CLASSES; k++) {
    ck_stack_entry_t *e;
    while ((e = weft_freelist_pop(&dev->cmd_pool[k])))
      weft__free(&dev->alloc, WEFT_TASK_OF(e), WEFT_CMD_CLASS_MIN << k, 16);
  }
}

void weft__cmd_submit_chain(weft_device *dev, cmd *first, cmd *last) {
  if (!dev->combining) {
    weft_inbox_push_chain(&dev->inbox, &first->task.link, &last->task.link);
    return;
  }
  weft_inbox_push_chain_quiet(&dev->inbox, &first->task.link, &last->task.link);
  if (weft__dev_scheduling() == dev) return; /* the holder's own loop takes it */
  if (weft_stream_worker_ctx() == dev) {     /* a pool thread never schedules: it could */
    weft__signal_raise(&dev->wake);          /* end up waiting for itself */
    return;
  }
  WEFT_HUNT_POINT(43);
  /* Push, fence, load the role (role_try), against the holder's release,
   * fence, inbox load (combine, combining_thread): the holder sees this
   * command, or this thread sees the role free and takes it. */
  atomic_thread_fence(memory_order_seq_cst);
  combine(dev);
}

void weft__cmd_submit(weft_device *dev, cmd *c) {
  weft__cmd_submit_chain(dev, c, c);
}

static void cmd_submit(weft_device *dev, cmd *c) {
  weft__cmd_submit(dev, c);
}

static weft_status install_failpoints(weft_device *dev, const char *spec);
static weft_status clear_failpoints(weft_device *dev);

static weft_status oom(size_t bytes, const char *what) {
  return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, bytes, "no memory for %s", what);
}

/* ---- argument checks (client side) ---------------------------------------------------------- */

/* ---- callers inside (see weft__enter in device.h) ---- */

static _Atomic uint32_t caller_shards = 0;
static _Thread_local uint32_t caller_shard = 0; /* this thread's line + 1; 0: none yet */

/* Counts the caller in unless the device is closing (the poisoned state is
 * the caller's to check). */
static inline weft_status enter_open(weft_device *dev, weft_inside *in) {
  in->dev = NULL;
  if (!dev) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "device is NULL");
  uint32_t s = caller_shard;
  if (!s)
    s = caller_shard =
        atomic_fetch_add_explicit(&caller_shards, 1, memory_order_relaxed) % WEFT_CALLER_SHARDS + 1;
  /* seq_cst increment, then seq_cst load of |closing|, against close's store
   * of |closing|, then loads of the counts: either close sees this caller
   * or this caller sees close. */
  atomic_fetch_add_explicit(&dev->callers[s - 1].n, 1, memory_order_seq_cst);
  in->shard = s - 1;
  in->dev = dev;
  if (atomic_load_explicit(&dev->closing, memory_order_seq_cst))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "device is closing");
  return NULL;
}

static inline weft_status enter(weft_device *dev, weft_inside *in) {
  weft_status st = enter_open(dev, in);
  if (!st && atomic_load_explicit(&dev->poisoned, memory_order_acquire) == 1)
    st = weft_error_clone(dev->poison_error);
  return st;
}

/* The caller's last touch of the device: close may free it right after. */
void weft__leave(weft_inside *in) {
  if (in->dev) atomic_fetch_sub_explicit(&in->dev->callers[in->shard].n, 1, memory_order_release);
  in->dev = NULL;
}

/* A blocking call made on the device's scheduler thread (from a reclaim
 * callback) would wait for itself. */
static weft_status enter_blocking(weft_device *dev, weft_inside *in) {
  weft_status st = enter(dev, in);
  if (!st && weft__dev_scheduling() == dev)
    st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "a blocking call from the device's own scheduler thread would deadlock");
  return st;
}

weft_status weft__enter(weft_device *dev, weft_inside *in) {
  return enter(dev, in);
}

weft_status weft__enter_open(weft_device *dev, weft_inside *in) {
  return enter_open(dev, in);
}

weft_status weft__enter_blocking(weft_device *dev, weft_inside *in) {
  return enter_blocking(dev, in);
}

/* Close: waits until every caller that entered has left (a blocked read
 * waits for its kernel: the scheduler still runs). A leaving caller touches
 * nothing after its decrement, so this polls, backing off to 1 ms. */
static void callers_drain(weft_device *dev) {
  for (unsigned spins = 0;; spins += spins < 192) {
    uint64_t n = 0;
    for (uint32_t i = 0; i < WEFT_CALLER_SHARDS; i++)
      n += atomic_load_explicit(&dev->callers[i].n, memory_order_seq_cst);
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

/* A buffer as reports print it: the slot index names a live buffer. */
static void buf_name(uint64_t id, char *buf, size_t cap) {
  snprintf(buf, cap, "buffer #%" PRIu32, (uint32_t)id);
}

static weft_status lookup_buffer(weft_device *dev, weft_buffer b, uint64_t *size) {
  if (!weft_handles_lookup(&dev->buffers, b.id, size)) {
    char name[48];
    buf_name(b.id, name, sizeof(name));
    return weft_error_make(WEFT_ERR_NOT_FOUND,
                           "%s is not a live buffer of this device (released, stale or forged)",
                           name);
  }
  return NULL;
}

static weft_status check_range(uint64_t size, uint64_t offset, uint64_t len, const char *what) {
  if (offset > size || len > size - offset)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "%s [%" PRIu64 ", +%" PRIu64 ") is outside the buffer of %" PRIu64
                           " bytes",
                           what, offset, len, size);
  return NULL;
}

/* ---- buffers (scheduler side) ------------------------------------------------------------------
 */

static weft_buf *resolve(weft_device *dev, uint64_t id) {
  weft_handle_slot *s = weft_handles_slot(&dev->buffers, id);
  weft_buf *b = s ? s->obj : NULL;
  return b && b->id == id && !b->released ? b : NULL;
}

static weft_status not_found(uint64_t id) {
  char name[48];
  buf_name(id, name, sizeof(name));
  return weft_error_make(WEFT_ERR_NOT_FOUND, "%s was released before this command reached it",
                         name);
}

static void buf_free(weft_device *dev, weft_buf *b) {
  /* Freeing sheds every claim: a freed tainted buffer leaves no node behind. */
  weft_taint_clear(&b->taint, &dev->alloc, &dev->failures.graph);
  weft_taint_clear(&b->exec, &dev->alloc, NULL);
  if (b->unalloc) weft_graph_forget_unallocated(&dev->failures.graph, b->id);
  if (b->allocated) weft_mm_free(b->mm, &b->mem);
  dev->stats.buffers_live--;
  weft_handles_recycle(&dev->buffers, b->id);
  weft__free(&dev->alloc, b, sizeof(*b) + sizeof(uint64_t) * dev->max_streams, 16);
}

/* The reservation (or the late mapping) of |b| failed: it is unallocated and
 * carries the reason, which reads and launches report. */
static void buf_unallocated(weft_device *dev, weft_buf *b, weft_status why) {
  /* A late mapping failure leaves the slice placed: it goes back now, or it
   * would point at this buffer after it is freed. */
  if (weft_mem_is_placed(&b->mem)) weft_mm_free(b->mm, &b->mem);
  b->allocated = false;
  b->ptr = NULL;
  weft_failures_fail_unallocated(&dev->failures, b->id, why);
  b->unalloc = weft_graph_unallocated_failure(&dev->failures.graph, b->id);
}

void weft__buf_free(weft_device *dev, weft_buf *b) {
  buf_free(dev, b);
}

/* A released buffer's memory goes back, unless a capture's warm-up keeps it. */
static void buf_drop(weft_device *dev, weft_buf *b) {
  if (!weft__capture_keep(dev, b)) buf_free(dev, b);
}

static void buf_unpin(weft_device *dev, weft_buf *b) {
  if (--b->pending == 0 && b->released) buf_drop(dev, b);
}

static void do_create(weft_device *dev, cmd *c) {
  weft_handle_slot *s = weft_handles_slot(&dev->buffers, c->buffer);
  weft_buf *b = c->data; /* allocated by the client, which reported a failure to */
  b->id = c->buffer;
  b->size = c->len;
  b->last_read = (uint64_t *)(b + 1);
  weft_mem_init(&b->mem, c->len);
  b->mem.handle_refs = 1;
  dev->stats.buffers_live++;
  s->obj = b;
  weft__capture_on_create(dev, c->stream, b->id);
  b->pending++; /* a reclaim callback may release it: the reservation keeps it alive */
  weft_status st = weft__dev_reserve(dev, b, slot_of(dev, c->stream));
  b->pending--;
  if (b->released) { /* by the reclaim callback: the create ends, holding nothing */
    if (!st) b->allocated = true;
    weft_error_free(st);
    if (b->pending == 0) buf_drop(dev, b);
    return;
  }
  if (!st) {
    b->allocated = true;
    return;
  }
  buf_unallocated(dev, b, st);
}

void weft__dev_release_now(weft_device *dev, uint64_t buffer) {
  weft_handle_slot *s = weft_handles_slot(&dev->buffers, buffer);
  weft_buf *b = s ? s->obj : NULL;
  if (!b || b->id != buffer) {
    /* Its creation ran out of memory: only the handle is left. */
    weft_handles_recycle(&dev->buffers, buffer);
    return;
  }
  b->released = true;
  b->mem.handle_refs = 0;
  if (b->pending == 0) buf_drop(dev, b);
}

/* ---- streams and batches ------------------------------------------------------------------------
 */

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

static weft_stream *stream_get(weft_device *dev, uint32_t slot, weft_status *err) {
  if (!dev->streams[slot]) {
    weft_status st = dev->gpu ? weft__gpu_stream_create(dev, slot, &dev->streams[slot])
                              : weft_stream_host_create(dev->pool, slot, &dev->streams[slot]);
    if (st) {
      *err = st;
      return NULL;
    }
    dev->slot_refs[slot] = (struct weft_slot_ref){dev, slot};
    weft_drop_queue_init(&dev->drops[slot], &dev->alloc,
                         (weft_drop_fence_ops){fence_make, fence_wait, &dev->slot_refs[slot]});
    dev->drops[slot].held = &dev->staged_bytes;
    dev->stats.streams_created++;
  }
  return dev->streams[slot];
}

/* Frees a write's staged bytes that never reached a stream. */
static void unstage(weft_device *dev, cmd *c) {
  if (c->kind == CMD_WRITE && c->staged) {
    weft__free(&dev->alloc, c->data, (size_t)c->len, 16);
    atomic_fetch_sub_explicit(&dev->staged_bytes, c->len, memory_order_relaxed);
  }
  c->staged = false;
}

static uint32_t slot_of(weft_device *dev, weft_stream_id id) {
  /* Clients now fold every launch's stream (its budget): no division for the usual ids. */
  return id < dev->max_streams ? (uint32_t)id : (uint32_t)(id % (uint64_t)dev->max_streams);
}

/* ---- task bodies (run on a stream's worker)
 * ---------------------------------------------------------- */

static void *buf_ptr(weft_buf *b, uint64_t offset) {
  return (char *)b->ptr + offset;
}

static bool is_write(weft_access a) {
  return (a & WEFT_WRITE) != 0;
}

static weft_range range_of(uint64_t offset, uint64_t size) {
  return (weft_range){offset, offset + size};
}

/* 1 once the poison error is published (2 while it is being written). */
static bool poisoned(const weft_device *dev) {
  return atomic_load_explicit(&dev->poisoned, memory_order_acquire) == 1;
}

/* Poisons the device once: the error is published before the flag, and the
 * embedder hears of it. Every later task completes as a no-op. */
static void poison(weft_device *dev, weft_status why) {
  uint32_t expected = 0;
  if (!atomic_compare_exchange_strong(&dev->poisoned, &expected, 2)) {
    weft_error_free(why);
    return;
  }
  dev->poison_error = why;
  atomic_store_explicit(&dev->poisoned, 1, memory_order_release);
  weft_poison_fn fn = atomic_load_explicit(&dev->on_poison, memory_order_acquire);
  if (fn) fn(atomic_load_explicit(&dev->on_poison_user, memory_order_acquire), why);
}

void weft__dev_poison(weft_device *dev, weft_status why) {
  poison(dev, why);
}

bool weft__dev_poisoned(const weft_device *dev) {
  return poisoned(dev);
}

static void write_bytes(cmd *c, weft_stream *on) {
  weft_buf *b = c->bufs[0];
  if (poisoned(c->dev)) {
    c->result = OUT_POISONED;
    return;
  }
  c->result = OUT_RUN;
  if (!b->ptr) return; /* unallocated: the buffer keeps the reason */
  if (c->dev->gpu) {
    weft_status err = weft__gpu_write(c->dev, c, on);
    if (err) { /* the bytes were not written: the range carries why */
      c->result = OUT_FAILED;
      c->error = err;
      weft_taint_set(&b->exec, &c->dev->alloc, NULL, range_of(c->offset, c->len), c->p);
      return;
    }
  } else {
    memcpy(buf_ptr(b, c->offset), c->data, c->len);
  }
  weft_taint_written(&b->exec, &c->dev->alloc, NULL, range_of(c->offset, c->len));
}

/* A write with a token is a direct one (weft_buffer_write): its caller waits
 * until the bytes were taken from its memory, which they now are. */
static void write_answer(cmd *c) {
  weft_token *tok = c->token;
  if (!tok) return;
  c->token = NULL; /* the caller's stack: not touched once answered */
  weft__token_complete(tok,
                       c->result == OUT_POISONED ? weft_error_clone(c->dev->poison_error) : NULL);
}

static void run_write(weft_task *t, weft_stream *on) {
  cmd *c = (cmd *)t;
  write_bytes(c, on);
  /* A GPU copy from pageable memory may still be reading |src| (the driver
   * need not stage it before returning): answered when the write retires. */
  if (!c->dev->gpu) write_answer(c);
}

/* The bytes are copied here; whether they can be trusted is answered by the
 * scheduler from the error graph when the read completes, after every
 * failure it depends on has been applied. */
static void run_read(weft_task *t, weft_stream *on) {
  cmd *c = (cmd *)t;
  weft_buf *b = c->bufs[0];
  if (poisoned(c->dev)) {
    c->result = OUT_POISONED;
    return;
  }
  c->result = OUT_RUN;
  if (!b->ptr || !c->len) return;
  if (!c->dev->gpu) {
    memcpy(c->data, buf_ptr(b, c->offset), c->len);
    return;
  }
  weft_status err = weft__gpu_read(c->dev, c, on);
  if (err) {
    c->result = OUT_FAILED;
    c->error = err;
  }
}

static void run_barrier(weft_task *t, weft_stream *on) {
  (void)on;
  cmd *c = (cmd *)t;
  c->result = poisoned(c->dev) ? OUT_POISONED : OUT_RUN;
  if (c->dev->gpu || !c->token) return; /* a GPU barrier is answered when it retires */
  weft__token_complete(c->token,
                       c->result == OUT_POISONED ? weft_error_clone(c->dev->poison_error) : NULL);
}

/* The execution view of every output takes |f| over its bytes. */
static void exec_taint_outputs(cmd *c, weft_failure_id f) {
  for (uint32_t i = 0; f && i < c->nb; i++)
    if (c->bufs[i] && is_write(c->bindings[i].access))
      weft_taint_set(&c->bufs[i]->exec, &c->dev->alloc, NULL,
                     range_of(c->bindings[i].offset, c->bindings[i].size), f);
}

static void fail_launch(cmd *c, weft_status err) {
  c->result = OUT_FAILED;
  c->error = err;
  exec_taint_outputs(c, c->p); /* the scope's id: tainted unless proven written */
}

/* The launch whose host kernel this thread is running: a blocking call the
 * kernel makes must not wait for it. */
static _Thread_local const cmd *running_kernel = NULL;

const cmd *weft__running_kernel(const weft_device *dev) {
  const cmd *k = running_kernel;
  return k && k->dev == dev ? k : NULL;
}

weft_status weft__refuse_in_kernel(const weft_device *dev, const char *call, const char *why) {
  const cmd *k = weft__running_kernel(dev);
  if (!k) return NULL;
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "%s from kernel '%s' (launch %" PRIu64 ") would wait for that kernel: %s",
                         call, dev->kernels[k->kernel].name, k->launch_no, why);
}

/* A blocking call on the running kernel's own stream waits for that kernel. */
static weft_status refuse_on_own_stream(weft_device *dev, weft_stream_id stream, const char *call,
                                        const char *why) {
  const cmd *k = weft__running_kernel(dev);
  if (!k || slot_of(dev, k->stream) != slot_of(dev, stream)) return NULL;
  return weft__refuse_in_kernel(dev, call, why);
}

/* Runs a host kernel over its grid, block by block (x fastest). */
static weft_status run_host_kernel(weft_device *dev, cmd *c) {
  uint64_t sizes[WEFT_MAX_BINDINGS];
  for (uint32_t i = 0; i < c->nb; i++) {
    c->ptrs[i] = buf_ptr(c->bufs[i], c->bindings[i].offset);
    sizes[i] = c->bindings[i].size;
  }
  weft_kernel_ctx ctx = {.buffers = c->ptrs,
                         .sizes = sizes,
                         .num_buffers = c->nb,
                         .scalars = c->scalar_bytes ? c->scalars : NULL,
                         .scalar_bytes = c->scalar_bytes};
  memcpy(ctx.grid, c->grid, sizeof(ctx.grid));
  memcpy(ctx.block, c->block, sizeof(ctx.block));
  const weft_kernel_entry *k = &dev->kernels[c->kernel];
  weft_status err = NULL;
  running_kernel = c;
  for (uint32_t z = 0; z < c->grid[2] && !err; z++)
    for (uint32_t y = 0; y < c->grid[1] && !err; y++)
      for (uint32_t x = 0; x < c->grid[0] && !err; x++) {
        ctx.block_idx[0] = x, ctx.block_idx[1] = y, ctx.block_idx[2] = z;
        err = k->fn(&ctx, k->user);
      }
  /* The kinds weft reports about other failures would make this launch's
   * report contradict itself ("root: Skipped"): such a return is the
   * launch's own failure. */
  weft_error_kind kind = weft_error_kind_of(err);
  if (weft__error_kind_is_derived(kind))
    err = weft_error_wrap(WEFT_ERR_GENERIC, 0, err,
                          "kernel '%s' returned %s, a kind only weft itself reports", k->name,
                          weft_error_kind_name(kind));
  running_kernel = NULL;
  return err;
}

static void run_launch(weft_task *t, weft_stream *on) {
  cmd *c = (cmd *)t;
  weft_device *dev = c->dev;
  if (poisoned(dev)) {
    c->result = OUT_POISONED;
    return;
  }
  if (c->preset) {
    weft_status err = c->preset;
    c->preset = NULL;
    fail_launch(c, err);
    return;
  }
  if (c->poison) { /* the fault is the launch itself: it strikes whatever the inputs hold */
    poison(dev, weft_error_make(WEFT_ERR_DEVICE_POISONED,
                                "failpoint: poisoned by launch %" PRIu64 " ('%s')", c->launch_no,
                                dev->kernels[c->kernel].name));
    c->result = OUT_POISONED;
    return;
  }
  /* The read check: an input left unwritten by a failure (or never
   * allocated) stops the launch; its outputs carry the root failure. A
   * garbage input could be a grid size or gather indices: never run on it. */
  for (uint32_t i = 0; i < c->nb; i++) {
    weft_buf *b = c->bufs[i];
    const weft_binding *bd = &c->bindings[i];
    weft_failure_id f = 0;
    if (!b->ptr && !b->unalloc) {
      /* Unallocated, and memory ran out for the record of why too: the
       * kernel must never see a NULL binding; the launch fails instead. */
      char name[48];
      buf_name(b->id, name, sizeof(name));
      fail_launch(c, weft_error_make(WEFT_ERR_NOT_FOUND, "%s was never allocated", name));
      return;
    }
    if (!b->ptr)
      f = b->unalloc;
    else if (bd->access & WEFT_READ)
      f = weft_taint_failure(&b->exec, range_of(bd->offset, bd->size));
    if (!f) continue;
    c->result = OUT_SKIPPED;
    c->skip = (weft_read_failure){f, b->id};
    exec_taint_outputs(c, f);
    return;
  }
  if (c->inject != WEFT_OK) {
    fail_launch(c, weft_error_make(c->inject, "failpoint: launch %" PRIu64 " of kernel '%s'",
                                   c->launch_no, dev->kernels[c->kernel].name));
    return;
  }
  /* A GPU launch is enqueued (its refusal is known now); a host kernel runs. */
  weft_status err = dev->gpu ? weft__gpu_launch(dev, c, on) : run_host_kernel(dev, c);
  if (err) {
    fail_launch(c, err);
    return;
  }
  for (uint32_t i = 0; i < c->nb; i++)
    if (is_write(c->bindings[i].access))
      weft_taint_written(&c->bufs[i]->exec, &dev->alloc, NULL,
                         range_of(c->bindings[i].offset, c->bindings[i].size));
  c->result = OUT_RUN;
}

/* ---- scheduler: submissions
 * ------------------------------------------------------------------------- */

/* A stream that cannot start leaves the bytes its work should have written
 * with the reason. Nothing may run meanwhile (workers touch execution
 * views), so in-flight work finishes first: this path is rare. */
static void fail_unstarted(weft_device *dev, weft_status err, weft_buf *const *bufs,
                           const weft_binding *bindings, uint32_t n) {
  weft__dev_drain(dev);
  weft_error_graph *g = &dev->failures.graph;
  weft_failure_id f = weft_graph_insert(g, err, NULL);
  for (uint32_t i = 0; f && i < n; i++) {
    if (!bufs[i] || !bufs[i]->allocated || !is_write(bindings[i].access)) continue;
    weft_range r = range_of(bindings[i].offset, bindings[i].size);
    weft_taint_set(&bufs[i]->taint, &dev->alloc, g, r, f);
    weft_taint_set(&bufs[i]->exec, &dev->alloc, NULL, r, f);
  }
  weft_graph_prune(g, f); /* claimed nothing: gone */
}

static weft_stream *stream_or_fail(weft_device *dev, cmd *c, weft_buf *b, bool write) {
  weft_status err = NULL;
  weft_stream *s = stream_get(dev, slot_of(dev, c->stream), &err);
  if (s) return s;
  if (c->token) {
    weft__token_complete(c->token, err);
  } else {
    weft_binding bd = {
        .offset = c->offset, .size = c->len, .access = write ? WEFT_WRITE : WEFT_READ};
    fail_unstarted(dev, err, &b, &bd, 1);
  }
  return NULL;
}

/* Gives an allocated buffer its address, mapping a lazy (dry-run) page on
 * first use; a page that cannot be backed leaves the buffer carrying the
 * StorageMappingFailed error over all its bytes. */
static void buf_map(weft_device *dev, weft_buf *b) {
  if (!b->allocated || b->ptr) return;
  weft_status st = weft_mm_resolve(b->mm, &b->mem, &b->ptr);
  if (st) buf_unallocated(dev, b, st);
}

/* The id of the write scope the task will run in: minted now (the worker
 * writes it into execution views), inserted into the graph only if needed.
 * An empty write set mints nothing. */
static weft_failure_id scope_id(weft_device *dev, const cmd *c) {
  bool writes = c->kind == CMD_WRITE;
  for (uint32_t i = 0; i < c->nb && !writes; i++)
    writes = is_write(c->bindings[i].access) && c->bindings[i].size;
  if (!writes) return 0;
  weft_status err = NULL;
  weft_failure_id p = weft_graph_mint(&dev->failures.graph, &err);
  weft_error_free(err); /* exhausted ids: the scope runs without a provisional */
  return p;
}

/* The launch's write scope id and its failpoints, as it is about to be scheduled. */
static void launch_arm(weft_device *dev, cmd *c) {
  c->p = scope_id(dev, c);
  const char *kname = dev->kernels[c->kernel].name;
  c->inject = weft_failpoints_launch(&dev->failpoints, c->launch_no, kname);
  c->poison = weft_failpoints_poisons(&dev->failpoints, c->launch_no);
}

static void sched_launch(weft_device *dev, cmd *c) {
  dev->stats.launches++;
  if (dev->dry_depth) { /* measured, not run: resolves no resource */
    dev->stats.launches_dry++;
    weft__cmd_free(c);
    return;
  }
  weft_status err = NULL;
  weft_stream *s = stream_get(dev, slot_of(dev, c->stream), &err);
  if (!s) { /* no worker to run it: the outputs carry why (and a recording, that it lacks it) */
    weft__capture_on_unstarted(dev, c, err);
    for (uint32_t i = 0; i < c->nb; i++) c->bufs[i] = resolve(dev, c->bindings[i].buffer.id);
    fail_unstarted(dev, err, c->bufs, c->bindings, c->nb);
    dev->stats.launches_failed++;
    weft__cmd_free(c);
    return;
  }
  for (uint32_t i = 0; i < c->nb; i++) {
    weft_buf *b = resolve(dev, c->bindings[i].buffer.id);
    c->bufs[i] = b;
    if (!b) {
      if (!c->preset) c->preset = not_found(c->bindings[i].buffer.id);
      continue;
    }
    buf_map(dev, b);
    b->pending++;
  }
  launch_arm(dev, c);
  if (weft__capture_record(dev, c)) return; /* recorded, not run */
  c->task.run = run_launch;
  weft__ms_register(dev, s->slot, c);
}

void weft__launch_register(weft_device *dev, cmd *c) {
  dev->stats.launches += c->graph ? weft__gpu_graph_launches(c->graph) : 1;
  launch_arm(dev, c);
  c->task.run = run_launch;
  weft__ms_register(dev, slot_of(dev, c->stream), c);
}

void weft__launch_discard(weft_device *dev, cmd *c) {
  weft_error_free(c->preset);
  c->preset = NULL;
  for (uint32_t i = 0; i < c->nb; i++)
    if (c->bufs[i]) buf_unpin(dev, c->bufs[i]);
  weft__cmd_free(c);
}

void weft__launch_fail(weft_device *dev, const cmd *r, weft_status err) {
  dev->stats.launches_failed++;
  fail_unstarted(dev, err, r->bufs, r->bindings, r->nb);
}

void weft__launch_copy(cmd *c, const cmd *r) {
  size_t bytes = c->bytes;
  /* The scalars end the used part of the command (its budget is |r|'s: a
   * clone is made on |r|'s stream). */
  memcpy(c, r, (size_t)((const char *)r->scalars + r->scalar_bytes - (const char *)r));
  c->bytes = bytes;
  /* Every array lives inside the command: rebase it. */
  ptrdiff_t d = (char *)c - (const char *)r;
  c->bindings = (weft_binding *)((char *)r->bindings + d);
  c->bufs = (weft_buf **)((char *)r->bufs + d);
  c->ptrs = (void **)((char *)r->ptrs + d);
  c->task.waits = (weft_stream_wait *)((char *)r->task.waits + d);
  c->scalars = (const char *)r->scalars + d;
}

void weft__launch_replay(weft_device *dev, cmd *c, weft_replay_count *instance) {
  memset(&c->task.link, 0, sizeof(c->task.link));
  c->task.nwaits = 0;
  c->task.fnext = NULL;
  c->task.notify = false;
  c->result = OUT_NONE;
  c->error = NULL;
  c->preset = NULL;
  c->instance = instance;
  if (instance) instance->inflight++;
  c->launch_no = atomic_fetch_add_explicit(&dev->launches_submitted, 1, memory_order_relaxed) + 1;
  for (uint32_t i = 0; i < c->nb; i++) /* the recording keeps them alive; each run pins them */
    if (c->bufs[i]) c->bufs[i]->pending++;
  dev->stats.launches_replayed += c->graph ? weft__gpu_graph_launches(c->graph) : 1;
  weft__launch_register(dev, c);
}

/* A kernel's blocking call refused: the kernel |k| that made it, and why. */
static weft_status kernel_refusal(weft_device *dev, const cmd *k, const char *call,
                                  const char *why) {
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "%s from kernel '%s' (launch %" PRIu64 ") would wait for that kernel: %s",
                         call, dev->kernels[k->kernel].name, k->launch_no, why);
}

/* True when the placed task |t| cannot complete before the running launch
 * |k| does: it follows |k| on its stream, or waits, through any chain of
 * cross-stream waits, for a position at or past it. Walks the tasks not yet
 * retired, each once (a rare path: a kernel's own read or sync). */
static bool waits_for_kernel(weft_device *dev, const cmd *t, const cmd *k) {
  uint64_t need[WEFT_MAX_STREAMS] = {0};
  const weft_task *at[WEFT_MAX_STREAMS];
  for (uint32_t s = 0; s < dev->max_streams; s++) at[s] = dev->fifo[s].head;
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
  if (!c->caller || !waits_for_kernel(dev, c, c->caller)) return;
  weft_token *tok = c->token;
  weft_status st = kernel_refusal(dev, c->caller, call,
                                  "it is ordered, through the buffers streams share, after work "
                                  "that runs only once the kernel has returned");
  c->token = NULL;
  c->len = 0;
  weft__token_complete(tok, st);
}

static void sched_rw(weft_device *dev, cmd *c, bool write) {
  weft_buf *b = resolve(dev, c->buffer);
  if (!b) { /* released meanwhile: a staged write's copy and window bytes go back too */
    if (c->token) weft__token_complete(c->token, not_found(c->buffer));
    unstage(dev, c);
    weft__cmd_free(c);
    return;
  }
  if (write && dev->dry_depth) { /* measured, not run: maps nothing */
    unstage(dev, c);
    write_answer(c);
    weft__cmd_free(c);
    return;
  }
  if (!write) {
    weft_status refused = weft__capture_refuse_sync(dev, c->stream, "read");
    if (refused) {
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
  buf_map(dev, b);
  b->pending++;
  if (write) c->p = scope_id(dev, c);
  c->task.run = write ? run_write : run_read;
  c->task.notify = !write; /* the reader waits for the retirement, which answers it */
  bool staged = c->staged, waited = c->token != NULL; /* a read, or a direct write */
  c->staged = false; /* from here on, the drop queue owns the bytes */
  weft__ms_register(dev, s->slot, c);
  /* A synchronous operation flushes its stream; so does a staged write,
   * whose bytes the drop queue fences with its position on the stream. */
  if (waited || staged) weft__ms_flush(dev, s->slot);
  if (!write) refuse_if_waits_for_caller(dev, c, "weft_buffer_read");
  if (staged) {
    weft_drop_queue_push(&dev->drops[s->slot], c->data, (size_t)c->len);
    if (weft_drop_queue_should_flush(&dev->drops[s->slot]))
      weft_drop_queue_flush(&dev->drops[s->slot]);
  }
}

static void sched_sync(weft_device *dev, cmd *c) {
  uint32_t slot = slot_of(dev, c->stream);
  weft_status refused = weft__capture_refuse_sync(dev, c->stream, "sync");
  if (refused) {
    weft__token_complete(c->token, refused);
    weft__cmd_free(c);
    return;
  }
  if (!dev->streams[slot]) {
    /* Nothing ever ran there; a question never creates a stream. */
    weft__token_complete(c->token, poisoned(dev) ? weft_error_clone(dev->poison_error) : NULL);
    weft__cmd_free(c);
    return;
  }
  c->task.run = run_barrier;
  weft__ms_register(dev, slot, c);
  weft__ms_flush(dev, slot);
  refuse_if_waits_for_caller(dev, c, "weft_sync");
}

/* A target for the failure store: the buffer's graph-tagged taint. */
static weft_target target(weft_buf *b, uint64_t offset, uint64_t size) {
  return (weft_target){.taint = &b->taint,
                       .memory = b->id,
                       .range = range_of(offset, size),
                       .allocated = b->allocated};
}

static void sched_check(weft_device *dev, cmd *c) {
  /* Answered from the error graph, without a barrier: what completed work
   * has shown so far. */
  weft_target *t = weft_failures_write_set(&dev->failures, c->nb);
  if (!t) {
    weft__token_complete(c->token, oom(sizeof(weft_target) * c->nb, "a check"));
    weft__cmd_free(c);
    return;
  }
  for (uint32_t i = 0; i < c->nb; i++) {
    weft_buf *b = resolve(dev, c->handles[i]);
    if (!b) {
      weft__token_complete(c->token, not_found(c->handles[i]));
      weft__cmd_free(c);
      return;
    }
    t[i] = target(b, 0, b->size);
  }
  weft__token_complete(c->token, weft_failures_ensure_written(&dev->failures, t, c->nb));
  weft__cmd_free(c);
}

/* ---- scheduler: completions
 * ------------------------------------------------------------------------------ */

/* A successful write scope: enter_write then exit_write. When no written
 * byte carries a claim the pair is a no-op (the provisional would be
 * inserted, tagged, untagged and removed with nothing able to observe it),
 * so the common case skips straight to the same end state. */
static void run_scope(weft_failures *fs, weft_failure_id p, const weft_target *w, uint32_t n) {
  bool clean = true;
  for (uint32_t i = 0; i < n && clean; i++) clean = !w[i].taint || weft_taint_is_clean(w[i].taint);
  if (clean) return;
  weft_failures_exit_write(fs, weft_failures_enter_write(fs, p, w, n), w, n, NULL);
}

/* Applies a launch's outcome to the error graph, in the order the work ran:
 * every launch runs inside enter_write/exit_write; a skip never enters a
 * scope, it propagates the root. */
static void complete_launch(weft_device *dev, cmd *c) {
  weft_failures *fs = &dev->failures;
  weft_target *w = weft_failures_write_set(fs, c->nb);
  uint32_t nw = 0;
  for (uint32_t i = 0; w && i < c->nb; i++)
    if (c->bufs[i] && is_write(c->bindings[i].access))
      w[nw++] = target(c->bufs[i], c->bindings[i].offset, c->bindings[i].size);
  switch (c->result) {
  case OUT_RUN:
    dev->stats.launches_run += c->graph ? weft__gpu_graph_launches(c->graph) : 1;
    if (w) run_scope(fs, c->p, w, nw);
    break;
  case OUT_FAILED: {
    dev->stats.launches_failed++;
    weft_failure_id p = w ? weft_failures_enter_write(fs, c->p, w, nw) : 0;
    if (p) weft_graph_set_origin(&fs->graph, p, c->kernel, c->launch_no);
    weft_failures_exit_write(fs, p, w, nw, c->error);
    c->error = NULL;
    break;
  }
  case OUT_SKIPPED:
    dev->stats.launches_skipped++;
    if (w) weft_failures_propagate(fs, &c->skip, c->kernel, c->launch_no, w, nw);
    break;
  default: /* poisoned: the device answers every later question itself */
    break;
  }
  weft_error_free(c->error);
  weft_error_free(c->preset);
  for (uint32_t i = 0; i < c->nb; i++)
    if (c->bufs[i]) buf_unpin(dev, c->bufs[i]);
}

static void complete(weft_device *dev, cmd *c) {
  dev->inflight--;
  if (dev->gpu && (c->kind == CMD_SYNC || c->kind == CMD_READ))
    weft__gpu_sync_point(dev, dev->streams[slot_of(dev, c->stream)]); /* what the device hit */
  /* A GPU fault stops everything queued: nothing retired after the device
   * was poisoned can be trusted to have run. */
  if (dev->gpu && poisoned(dev) && c->result != OUT_NONE) {
    weft_error_free(c->error);
    c->error = NULL;
    c->result = OUT_POISONED;
  }
  switch (c->kind) {
  case CMD_LAUNCH:
    complete_launch(dev, c);
    break;
  case CMD_WRITE: {
    weft_buf *b = c->bufs[0];
    write_answer(c); /* host: answered when it ran; GPU: the copy is done now */
    if (dev->gpu) weft__gpu_staging_done(dev, c, false);
    weft_target t = target(b, c->offset, c->len);
    if (c->result == OUT_RUN && b->allocated) { /* a host copy runs in a write scope too */
      run_scope(&dev->failures, c->p, &t, 1);
    } else if (c->result == OUT_FAILED) { /* a GPU copy the driver refused */
      weft_failures_exit_write(
          &dev->failures, weft_failures_enter_write(&dev->failures, c->p, &t, 1), &t, 1, c->error);
      c->error = NULL;
    }
    buf_unpin(dev, b);
    break;
  }
  case CMD_READ: {
    weft_buf *b = c->bufs[0];
    weft_status st;
    if (c->result == OUT_POISONED) {
      st = weft_error_clone(dev->poison_error);
    } else if (c->result == OUT_FAILED) { /* the copy back failed; the buffer is intact */
      st = c->error;
      c->error = NULL;
    } else {
      weft_target t = target(b, c->offset, c->len);
      st = weft_failures_ensure_written(&dev->failures, &t, 1);
      if (!st && !b->allocated) { /* no memory was left to record why: still say it */
        char name[48];
        buf_name(b->id, name, sizeof(name));
        st = weft_error_make(WEFT_ERR_NOT_FOUND, "%s was never allocated", name);
      }
    }
    if (dev->gpu) weft__gpu_staging_done(dev, c, !st);
    if (c->token)
      weft__token_complete(c->token, st);
    else /* refused: its kernel had the answer */
      weft_error_free(st);
    buf_unpin(dev, b);
    break;
  }
  case CMD_SYNC:
    if (dev->gpu && c->token) /* the barrier's position on the stream has completed */
      weft__token_complete(c->token,
                           c->result == OUT_POISONED ? weft_error_clone(dev->poison_error) : NULL);
    break;
  default:
    break;
  }
  if (c->instance) {                    /* a replay instance's command: the capture keeps it */
    if (--c->instance->inflight == 0) { /* the instance is free: a replayer may wait for it */
      atomic_fetch_sub_explicit(c->instance->outstanding, 1, memory_order_release);
      weft__ec_notify(&dev->room);
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
  struct weft_fifo *f = &dev->fifo[slot];
  weft_task *t;
  while ((t = f->head) && t->seq <= upto && t->placed < before) {
    for (uint32_t i = 0; i < t->nwaits; i++)
      retire(dev, t->waits[i].stream->slot, t->waits[i].seq, UINT64_MAX);
    if (((cmd *)t)->kind == CMD_READ) {
      /* A read answers after every completed task placed before it, on any
       * stream, so its report does not depend on which stream's completions
       * the scheduler happened to look at first. Later work stays out. */
      for (uint32_t s = 0; s < dev->max_streams; s++)
        if (s != slot && dev->fifo[s].head)
          retire(dev, s, atomic_load_explicit(&dev->streams[s]->completed, memory_order_acquire),
                 t->placed);
    }
    f->head = t->fnext;
    if (!f->head) f->tail = NULL;
    complete(dev, (cmd *)t);
  }
}

/* Retires everything the workers completed; true if anything was. */
static bool retire_all(weft_device *dev) {
  bool any = false;
  if (dev->gpu) { /* a fault first: before any forced completion retires */
    weft__gpu_check_poison(dev, false);
    weft__gpu_progress(dev);
  }
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    weft_task *t = dev->fifo[i].head;
    if (!t) continue;
    uint64_t done = atomic_load_explicit(&dev->streams[i]->completed, memory_order_acquire);
    if (t->seq > done) continue;
    retire(dev, i, done, UINT64_MAX);
    any = true;
  }
  cmd_free_flush(dev);
  return any;
}

static bool completions_ready(weft_device *dev) {
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    weft_task *t = dev->fifo[i].head;
    if (t && t->seq <= atomic_load_explicit(&dev->streams[i]->completed, memory_order_acquire))
      return true;
  }
  return false;
}

/* Completed work the scheduler was owed a wake-up for: the pool raises
 * progress after a task marked |notify| and when it leaves a stream (IDLE),
 * not after every task, so completions on a stream still running are not
 * (a long kernel after a short one is no lost wake-up). Host streams only:
 * the CUDA backend's completions have their own polling. */
static bool completions_owed(weft_device *dev) {
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    weft_task *t = dev->fifo[i].head;
    if (!t || dev->gpu) continue;
    uint64_t done = atomic_load_explicit(&dev->streams[i]->completed, memory_order_acquire);
    if (t->seq > done) continue;
    if (atomic_load_explicit(&dev->streams[i]->state, memory_order_acquire) == WEFT_STREAM_IDLE)
      return true;
    for (; t && t->seq <= done; t = t->fnext)
      if (t->notify) return true;
  }
  return false;
}

/* The scheduler's view, for a lost wake-up's report (role holder only). */
static void dev_dump(weft_device *dev) {
  uint64_t pending = 0; /* over every stream's budget and the shared one */
  for (uint32_t i = 0; i <= WEFT_MAX_STREAMS; i++) pending += atomic_load(&dev->pending[i].n);
  fprintf(stderr,
          "  scheduler (%s): role %u, wake raised %u, inbox %s (parked %u, epoch %u), "
          "held %s, pending %" PRIu64 ", inflight %" PRIu64 ", shutdown %d\n",
          dev->combining ? "combining" : "thread", atomic_load(&dev->role),
          atomic_load(&dev->wake.raised), weft_inbox_empty(&dev->inbox) ? "empty" : "non-empty",
          atomic_load(&dev->inbox.ec.sleepers), atomic_load(&dev->inbox.ec.epoch),
          dev->held_head ? "commands" : "none", pending, dev->inflight, dev->shutdown);
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    if (!dev->streams[i]) continue;
    weft_task *h = dev->fifo[i].head, *t = dev->fifo[i].tail;
    fprintf(stderr,
            "  slot %u: batch %u, placed %" PRIu64 ", unretired %" PRIu64 "..%" PRIu64
            ", completed %" PRIu64 "\n",
            i, dev->batches[i].n, dev->streams[i]->submitted, h ? h->seq : 0, t ? t->seq : 0,
            atomic_load(&dev->streams[i]->completed));
  }
  weft_host_pool_dump(dev->pool, stderr);
}

static void dev_lost_wakeup(weft_device *dev, const char *what) {
  dev->stats.wakeups_recovered++;
  if (weft__wakeup_lost_report(what)) dev_dump(dev);
}

typedef struct sched_probe {
  weft_device *dev;
  bool inbox;
} sched_probe;

/* The scheduler thread (or a draining role holder) after a timed-out park:
 * work it should have been woken for. It alone consumes what it checks, so
 * the same check after the grace park finds the same work. */
static bool sched_owed(void *arg, int pass) {
  sched_probe *pr = arg;
  (void)pass;
  return (pr->inbox && !weft_inbox_empty(&pr->dev->inbox)) ||
         atomic_load_explicit(&pr->dev->wake.raised, memory_order_acquire) ||
         completions_owed(pr->dev);
}

/* Parks the scheduler until a command arrives or (|completions|) a worker
 * completes something. */
static void sched_wait(weft_device *dev, bool inbox) {
  if (dev->gpu && dev->inflight) weft__gpu_arm(dev); /* the GPU wakes the scheduler when done */
  for (int i = 0; i < 128; i++) {
    if ((inbox && !weft_inbox_empty(&dev->inbox)) || completions_ready(dev)) return;
    weft__cpu_relax();
  }
  WEFT_HUNT_POINT(40);
  uint32_t k = weft__ec_prepare(&dev->inbox.ec);
  if ((inbox && !weft_inbox_empty(&dev->inbox)) || completions_ready(dev) ||
      weft__signal_take(&dev->wake)) {
    weft__ec_cancel(&dev->inbox.ec);
    return;
  }
  /* A GPU fault stops the completion marks: while GPU work is outstanding,
   * look for one every few milliseconds. */
  if (dev->gpu && dev->inflight) {
    if (!weft__ec_wait_ns(&dev->inbox.ec, k, UINT64_C(2000000))) weft__gpu_check_poison(dev, true);
    return;
  }
  /* Timed: a wake-up that never came costs 100 ms (and a grace park), not
   * a hang; counted only when it was owed (sched_owed), never for a late one. */
  sched_probe pr = {dev, inbox};
  if (weft__ec_wait_owed(&dev->inbox.ec, k, WEFT_HUNT_PARK(UINT64_C(100000000)), sched_owed, &pr) ==
      WEFT_PARK_LOST)
    dev_lost_wakeup(dev, "the scheduler's park timed out with work it was owed a wake-up for");
}

void weft__dev_process(weft_device *dev, cmd *c) {
  if (c->cancelled) { /* a kernel's call, refused while it was queued */
    weft__cmd_free(c);
    return;
  }
  dev->stats.commands++;
  if (dev->gpu) weft__gpu_check_poison(dev, false); /* a sticky error any call met */
  switch (c->kind) {
  case CMD_CREATE: /* a reservation sees the memory completed work gave back */
    retire_all(dev);
    do_create(dev, c);
    weft__cmd_free(c);
    break;
  case CMD_RELEASE:
    weft__dev_release_now(dev, c->buffer);
    weft__cmd_free(c);
    break;
  case CMD_LAUNCH:
    sched_launch(dev, c);
    break;
  case CMD_WRITE:
    sched_rw(dev, c, true);
    break;
  case CMD_READ:
    sched_rw(dev, c, false);
    break;
  case CMD_SYNC:
    sched_sync(dev, c);
    break;
  case CMD_CHECK: /* questions answer from everything completed so far */
    retire_all(dev);
    sched_check(dev, c);
    break;
  case CMD_STATS:
    retire_all(dev);
    dev->stats.failures_live = weft_graph_len(&dev->failures.graph);
    dev->stats.pending_peak = atomic_load(&dev->pending_peak);
    dev->stats.backpressure_waits = atomic_load(&dev->backpressure_waits);
    dev->stats.streams_recovered = dev->pool ? weft_host_pool_recovered(dev->pool) : 0;
    if (dev->gpu) weft__gpu_stats(dev, &dev->stats);
    *c->stats_out = dev->stats;
    weft__token_complete(c->token, NULL);
    weft__cmd_free(c);
    break;
  case CMD_SHUTDOWN:
    dev->shutdown = true;
    weft__cmd_free(c);
    weft__signal_raise(&dev->wake); /* a combining client may have taken it */
    break;
  case CMD_MEMORY:
    retire_all(dev);
    weft__dev_memory_call(dev, c);
    weft__cmd_free(c);
    break;
  case CMD_FAILPOINTS:
    weft__token_complete(c->token, weft_failpoints_spec_is_empty(c->data)
                                       ? clear_failpoints(dev)
                                       : install_failpoints(dev, c->data));
    weft__cmd_free(c);
    break;
  case CMD_CAPTURE:
  case CMD_REPLAY:
    weft__capture_process(dev, c);
    weft__cmd_free(c);
    break;
  }
}

#ifndef WEFT_TAKE_BACKOFF
#define WEFT_TAKE_BACKOFF 32
#endif

static _Thread_local weft_device *scheduling = NULL;

weft_device *weft__dev_scheduling(void) {
  return scheduling;
}

/* The scheduler's queue: what it took from the inbox and has not processed
 * yet, in submission order. Commands are popped one at a time so that a
 * drain (which runs in the middle of one) sees the completions behind it. */
static void held_append(weft_device *dev, ck_stack_entry_t *first, ck_stack_entry_t *last) {
  if (dev->held_tail)
    dev->held_tail->next = first;
  else
    dev->held_head = first;
  dev->held_tail = last;
}

static void *scheduler_thread(weft_device *dev) {
  scheduling = dev;
  uint32_t took = 0; /* commands in the last take */
  for (;;) {
    if (!dev->held_head) {
      retire_all(dev);
      /* A small take while clients stream commands in: every take pulls the
       * inbox's line away from the producers, so give them a moment (a few
       * hundred nanoseconds, not touching the line) to fill a batch. */
      if (took && took < 8)
        for (int i = 0; i < WEFT_TAKE_BACKOFF; i++) weft__cpu_relax();
      took = 0;
      ck_stack_entry_t *tail, *e = weft_inbox_take_tail(&dev->inbox, &tail);
      if (!e) {
        /* Idle: hand every partial batch to its worker before parking. */
        weft__dev_flush_all(dev);
        if (dev->shutdown && dev->inflight == 0) break;
        if (!retire_all(dev)) sched_wait(dev, true);
        continue;
      }
      held_append(dev, e, tail);
    }
    ck_stack_entry_t *e = dev->held_head;
    dev->held_head = e->next;
    if (!dev->held_head) dev->held_tail = NULL;
    e->next = NULL;
    took++;
    weft__dev_process(dev, (cmd *)WEFT_TASK_OF(e));
  }
  cmd_free_flush(dev);
  return NULL;
}

/* ---- the combining scheduler ---------------------------------------------------------------
 * The role is one flag. Whoever takes it owns the device state until it lets
 * go; a producer that finds it taken leaves its command to the holder, which
 * looks at the inbox again after letting go (store, then load, both seq_cst,
 * against the producer's push, then role check). */

static bool role_try(weft_device *dev) {
  return !atomic_load_explicit(&dev->role, memory_order_relaxed) &&
         !atomic_exchange_explicit(&dev->role, 1, memory_order_acquire);
}

/* Lets go of the role (release: the next holder sees the device state),
 * then fences: the holder's inbox load that follows pairs with a producer's
 * push, fence, role load (weft__cmd_submit_chain). The inbox head is a ck
 * load, not a seq_cst atomic, so without the fence the load could be
 * satisfied before the store is visible (C11; x86 only happened not to,
 * the store being an xchg), and both would miss each other: a stranded
 * command. A release store and the fence cost what the seq_cst store did. */
static void role_release(weft_device *dev) {
  atomic_store_explicit(&dev->role, 0, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst);
}

/* Processes every command in the inbox, in order (role held). */
static void process_inbox(weft_device *dev) {
  for (;;) {
    if (!dev->held_head) {
      ck_stack_entry_t *tail, *e = weft_inbox_take_tail(&dev->inbox, &tail);
      if (!e) return;
      held_append(dev, e, tail);
    }
    ck_stack_entry_t *e = dev->held_head;
    dev->held_head = e->next;
    if (!dev->held_head) dev->held_tail = NULL;
    e->next = NULL;
    weft__dev_process(dev, (cmd *)WEFT_TASK_OF(e));
  }
}

/* A client's pass: schedule what is queued, start streams that have nothing
 * to run (a running stream's partial batch waits for more work, or for the
 * scheduler thread when that stream goes idle), retire now and then. */
static void combine(weft_device *dev) {
  while (role_try(dev)) {
    scheduling = dev;
    process_inbox(dev);
    WEFT_HUNT_POINT(44);
    /* A batch on a stream still running stays: the pool publishes IDLE,
     * then raises progress, which wakes the combining thread to flush it. */
    for (uint32_t i = 0; i < dev->max_streams; i++)
      if (dev->batches[i].n && weft_stream_is_idle(dev->streams[i])) weft__ms_flush(dev, i);
    if ((++dev->combines & 15u) == 0)
      retire_all(dev);
    else
      cmd_free_flush(dev);
    scheduling = NULL;
    role_release(dev); /* and fence: then the inbox load */
    WEFT_HUNT_POINT(41);
    if (weft_inbox_empty(&dev->inbox)) return;
  }
}

/* The combining thread after a timed-out park: work it should have been
 * woken for. A command left in the inbox with the role free (its pusher
 * found the role taken and the holder missed it), a raise whose notify did
 * not come, a partial batch on an idle host stream, owed completions. The
 * last two are role state: it takes the role to look (a client holding it
 * is doing the work), and a command pushed meanwhile was left to it, so it
 * then reports nothing owed and goes to process it. */
typedef struct combining_probe {
  weft_device *dev;
  ck_stack_entry_t *head;
} combining_probe;

static bool combining_owed(void *arg, int pass) {
  combining_probe *pr = arg;
  weft_device *dev = pr->dev;
  ck_stack_entry_t *head = ck_pr_load_ptr(&dev->inbox.stack.head);
  if (head && !atomic_load_explicit(&dev->role, memory_order_seq_cst)) {
    bool same = pass == 0 || head == pr->head;
    pr->head = head;
    if (same) return true;
  }
  if (atomic_load_explicit(&dev->wake.raised, memory_order_acquire)) return true;
  if (!role_try(dev)) return false;
  scheduling = dev;
  bool owed = completions_owed(dev);
  for (uint32_t i = 0; i < dev->max_streams && !owed; i++)
    owed = dev->batches[i].n && !dev->gpu && weft_stream_is_idle(dev->streams[i]);
  scheduling = NULL;
  role_release(dev);
  return owed && weft_inbox_empty(&dev->inbox);
}

/* The scheduler thread of a combining device: woken by the pool (a stream
 * left by its thread, a task someone waits for) and by clients that cannot
 * schedule (pool threads, back-pressure), it flushes every partial batch and
 * retires what completed. */
static void *combining_thread(weft_device *dev) {
  for (;;) {
    while (!role_try(dev)) sched_yield();
    scheduling = dev;
    process_inbox(dev);
    retire_all(dev);
    weft__dev_flush_all(dev);
    bool done = dev->shutdown && dev->inflight == 0;
    scheduling = NULL;
    role_release(dev); /* and fence: then the inbox load */
    WEFT_HUNT_POINT(42);
    if (done) break;
    if (!weft_inbox_empty(&dev->inbox)) continue;
    uint32_t k = weft__ec_prepare(&dev->inbox.ec);
    if (weft__signal_take(&dev->wake) ||
        (!weft_inbox_empty(&dev->inbox) && !atomic_load(&dev->role))) {
      weft__ec_cancel(&dev->inbox.ec);
      continue;
    }
    /* Timed, then looks around anyway; counted when it was owed work. */
    combining_probe pr = {dev, NULL};
    if (weft__ec_wait_owed(&dev->inbox.ec, k, WEFT_HUNT_PARK(UINT64_C(100000000)), combining_owed,
                           &pr) == WEFT_PARK_LOST) {
      while (!role_try(dev)) sched_yield();
      scheduling = dev;
      dev_lost_wakeup(dev, "the combining thread's park timed out with work it was owed a "
                           "wake-up for");
      scheduling = NULL;
      role_release(dev);
    }
  }
  return NULL;
}

static void *scheduler_main(void *arg) {
  weft_device *dev = arg;
  if (dev->gpu) weft__gpu_enter(dev); /* storage and lanes need the context here */
  return dev->combining ? combining_thread(dev) : scheduler_thread(dev);
}

static const char *call_name(const cmd *c) {
  switch (c->kind) {
  case CMD_READ:
    return "weft_buffer_read";
  case CMD_SYNC:
    return "weft_sync";
  case CMD_CHECK:
    return "weft_check";
  case CMD_STATS:
    return "weft_device_stats_get";
  case CMD_FAILPOINTS:
    return "weft_device_set_failpoints";
  case CMD_CAPTURE:
    return "a capture call";
  default:
    return "a memory call";
  }
}

/* A drain waits for every running kernel. A kernel's blocking call still
 * queued (behind the command that drains) would keep that kernel, and so
 * the drain, waiting forever: it is refused now, its kernel goes on, and the
 * command is processed later as a no-op. Scans the queue from |e|. */
static void refuse_queued_from(weft_device *dev, ck_stack_entry_t *e) {
  for (; e; e = e->next) {
    cmd *c = (cmd *)WEFT_TASK_OF(e);
    if (c->kind == CMD_LAUNCH || !c->caller || !c->token || c->cancelled) continue;
    c->cancelled = true;
    weft__token_complete(c->token,
                         kernel_refusal(dev, c->caller, call_name(c),
                                        "the device is waiting for every running kernel to "
                                        "finish (for another call), this one included"));
  }
}

void weft__dev_drain(weft_device *dev) {
  weft__dev_flush_all(dev);
  refuse_queued_from(dev, dev->held_head);
  while (dev->inflight) {
    if (retire_all(dev)) continue;
    /* What arrived joins the queue, in order, and is looked at. A worker's
     * push raises the wake signal when combining (clients' pushes are quiet
     * then), and wakes the inbox otherwise. */
    ck_stack_entry_t *tail, *e = weft_inbox_take_tail(&dev->inbox, &tail);
    if (e) {
      held_append(dev, e, tail);
      refuse_queued_from(dev, e);
      continue;
    }
    sched_wait(dev, !dev->combining);
  }
}

/* ---- device ------------------------------------------------------------------------------------
 */

const char *weft_version(void) {
  return "0.1.0";
}

void weft_device_options_init(weft_device_options *opts) {
  if (!opts) return;
  memset(opts, 0, sizeof(*opts));
  opts->struct_size = sizeof(*opts);
  opts->backend = WEFT_BACKEND_HOST;
  opts->max_streams = 4;
  opts->max_tasks = 32;
  opts->strategy = WEFT_STRATEGY_INTERLEAVE;
}

static _Atomic uint32_t device_tags = 0;

/* The sizes weft_device_options has had, one per release that grew it (each
 * field added at the end starts where the struct used to end; a field's end
 * counts too, for the padding after it). A size inside a field would copy
 * part of it: half of a caller's pointer is a wild one. */
static bool options_size_known(uint32_t size) {
  static const size_t sizes[] = {
      offsetof(weft_device_options, allocator),
      offsetof(weft_device_options, memory_layout),
      offsetof(weft_device_options, persistent_memory),
      offsetof(weft_device_options, max_pending_commands),
      offsetof(weft_device_options, scheduler),
      offsetof(weft_device_options, scheduler) + sizeof(weft_scheduler_mode),
      sizeof(weft_device_options),
  };
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
    if (size == sizes[i]) return true;
  return false;
}

static weft_status validate_options(const weft_device_options *o, weft_device_options *out) {
  weft_device_options_init(out);
  if (!o) o = out;
  if (!options_size_known(o->struct_size))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "options.struct_size is %u: call weft_device_options_init first",
                           o->struct_size);
  if (o != out) memcpy(out, o, o->struct_size);
  out->struct_size = sizeof(*out);
  if (out->backend != WEFT_BACKEND_HOST && out->backend != WEFT_BACKEND_CUDA)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown backend %d", (int)out->backend);
  if (out->max_streams == 0 || out->max_streams > WEFT_MAX_STREAMS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "max_streams is %u; it must be 1..%u",
                           out->max_streams, WEFT_MAX_STREAMS);
  if (out->max_tasks == 0)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "max_tasks must be at least 1");
  if (out->strategy != WEFT_STRATEGY_INTERLEAVE && out->strategy != WEFT_STRATEGY_SEQUENTIAL)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown strategy %d", (int)out->strategy);
  /* WEFT_SCHEDULER picks the mode of devices left at the default (to run a
   * whole program or test suite under either). */
  const char *env = getenv("WEFT_SCHEDULER");
  if (out->scheduler == WEFT_SCHEDULER_DEFAULT) {
    out->scheduler = WEFT_SCHEDULER_THREAD;
    if (env && !strcmp(env, "combining"))
      out->scheduler = WEFT_SCHEDULER_COMBINING;
    else if (env && *env && strcmp(env, "thread"))
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "WEFT_SCHEDULER is '%s'; it must be 'thread' or 'combining'", env);
  }
  if (out->scheduler != WEFT_SCHEDULER_THREAD && out->scheduler != WEFT_SCHEDULER_COMBINING)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown scheduler mode %d",
                           (int)out->scheduler);
  if (out->allocator && (!out->allocator->alloc || !out->allocator->free))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "allocator has a NULL function");
  return NULL;
}

/* The memory configuration every stream's manager starts from; a custom
 * layout is copied and validated now, so a bad one fails the open. */
static weft_status memory_config(weft_device *dev, const weft_device_options *o) {
  weft_mm_config *cfg = &dev->mm_config;
  /* A capped device can hold a buffer as large as its capacity; a GPU is
   * capped by its memory (and the option, when lower). */
  uint64_t cap = dev->gpu ? weft__gpu_capacity(dev) : o->memory_capacity;
  cfg->max_page = cap ? cap : (UINT64_C(4) << 30);
  cfg->device_bytes = cap;
  if (o->persistent_memory < WEFT_PERSISTENT_ENABLED ||
      o->persistent_memory > WEFT_PERSISTENT_ENFORCED)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "unknown persistent_memory policy %d",
                           o->persistent_memory);
  cfg->persistent = (weft_persistent_policy)o->persistent_memory;
  cfg->layout = (weft_layout){.kind = WEFT_LAYOUT_SUBSLICES};
  uint64_t align = weft_storage_alignment(dev->storage);
  if (!dev->gpu && cap && cap < align)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "memory_capacity %" PRIu64 " is below the storage alignment (%" PRIu64
                           " bytes): the device could hold no buffer",
                           cap, align);
  if (!o->memory_layout && cap && cap < (UINT64_C(128) << 20)) {
    /* A device below the default ladder's first rungs would give every
     * buffer an exclusive page: small buffers share quarter-device pages. */
    uint64_t page = cap / 4 ? cap / 4 : 1;
    dev->layout_pools = weft__alloc(&dev->alloc, sizeof(weft_pool_config) * 3, 16);
    if (!dev->layout_pools) return oom(sizeof(weft_pool_config) * 3, "the memory layout");
    dev->layout_pools[0] =
        (weft_pool_config){.kind = WEFT_POOL_EXCLUSIVE, .dealloc_period = WEFT_NO_PERIOD};
    dev->layout_pools[1] = (weft_pool_config){
        .kind = WEFT_POOL_SLICED, .page_size = page, .max_slice_size = page / 2 ? page / 2 : 1};
    dev->layout_pools[2] = (weft_pool_config){
        .kind = WEFT_POOL_EXCLUSIVE, .max_alloc_size = cap, .dealloc_period = 5000};
    cfg->layout =
        (weft_layout){.kind = WEFT_LAYOUT_CUSTOM, .pools = dev->layout_pools, .num_pools = 3};
  } else if (o->memory_layout) {
    cfg->layout = *o->memory_layout;
    if (cfg->layout.kind == WEFT_LAYOUT_CUSTOM && cfg->layout.pools && cfg->layout.num_pools &&
        cfg->layout.num_pools < 255) {
      size_t bytes = sizeof(weft_pool_config) * cfg->layout.num_pools;
      dev->layout_pools = weft__alloc(&dev->alloc, bytes, 16);
      if (!dev->layout_pools) return oom(bytes, "the memory layout");
      memcpy(dev->layout_pools, cfg->layout.pools, bytes);
      cfg->layout.pools = dev->layout_pools;
    } else if (cfg->layout.kind != WEFT_LAYOUT_CUSTOM) {
      cfg->layout.pools = NULL;
      cfg->layout.num_pools = 0;
    } /* else a custom list the probe refuses (none, or too many), as given */
  }
  weft_mm *probe; /* builds no page: validates the layout against this device */
  weft_status st = weft_mm_create(cfg, dev->storage, &dev->alloc, &probe);
  if (st) {
    if (!dev->layout_pools) cfg->layout = (weft_layout){.kind = cfg->layout.kind};
    return st;
  }
  weft_mm_destroy(probe);
  return NULL;
}

static const char *kernel_name(void *ctx, uint32_t k) {
  weft_device *dev = ctx;
  return k < WEFT_MAX_KERNELS ? dev->kernels[k].name : NULL;
}

static void memory_name(void *ctx, uint64_t memory, char *buf, size_t cap) {
  (void)ctx;
  buf_name(memory, buf, cap);
}

/* Parses |spec| into the device's failpoints; storage ones go to the storage. */
static weft_status install_failpoints(weft_device *dev, const char *spec) {
  weft_failpoints fp = dev->failpoints;
  uint32_t before = fp.nallocs;
  weft_status st = weft_failpoints_parse(spec, &fp);
  if (st) return st;
  for (uint32_t i = before; i < fp.nallocs; i++)
    if (!(dev->gpu ? weft__gpu_fail_call(dev, fp.allocs[i].n, fp.allocs[i].kind)
                   : weft_storage_host_fail_call(dev->storage, fp.allocs[i].n, fp.allocs[i].kind)))
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "too many alloc failpoints");
  dev->failpoints = fp;
  return NULL;
}

/* Every failpoint goes, wherever it came from (options, environment, API). */
static weft_status clear_failpoints(weft_device *dev) {
  memset(&dev->failpoints, 0, sizeof(dev->failpoints));
  if (dev->gpu)
    weft__gpu_fail_call(dev, 0, WEFT_OK);
  else
    weft_storage_host_fail_call(dev->storage, 0, WEFT_OK);
  return NULL;
}

/* A spec refused at open says where it came from. */
static weft_status failpoints_from(weft_status st, const char *where) {
  if (!st) return NULL;
  weft_status named =
      weft_error_make(weft_error_kind_of(st), "%s: %s", where, weft_error_message(st));
  weft_error_free(st);
  return named;
}

weft_status weft_device_open(const weft_device_options *opts, weft_device **out) {
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  weft_device_options o;
  weft_status st = validate_options(opts, &o);
  if (st) return st;
  weft_allocator alloc = o.allocator ? *o.allocator : weft_allocator_default();
  weft_device *dev = weft__calloc(&alloc, sizeof(*dev), WEFT_CACHELINE);
  if (!dev) return oom(sizeof(*dev), "the device");
  dev->alloc = alloc;
  dev->max_streams = o.max_streams;
  dev->max_tasks = o.max_tasks;
  dev->strategy = o.strategy;
  /* A CUDA device keeps one scheduler thread: it is the only thread that
   * enqueues on the device's streams (with the context current). */
  dev->combining = o.scheduler == WEFT_SCHEDULER_COMBINING && o.backend == WEFT_BACKEND_HOST;
  dev->wake.ec = &dev->inbox.ec;
  dev->max_pending = o.max_pending_commands ? o.max_pending_commands : 16384;
  dev->tag = atomic_fetch_add(&device_tags, 1) + 1;
  weft_inbox_init(&dev->inbox);
  weft_handles_init(&dev->buffers, &dev->alloc);
  dev->buffers.gen_base = dev->tag * 2654435761u;
  size_t kbytes = sizeof(weft_kernel_entry) * WEFT_MAX_KERNELS;
  dev->kernels = weft__calloc(&dev->alloc, kbytes, WEFT_CACHELINE);
  dev->streams = weft__calloc(&dev->alloc, sizeof(weft_stream *) * o.max_streams, 16);
  dev->batches = weft__calloc(&dev->alloc, sizeof(weft_batch) * o.max_streams, 16);
  if (!dev->kernels || !dev->streams || !dev->batches) st = oom(kbytes, "the device tables");
  if (!st && o.backend == WEFT_BACKEND_CUDA) st = weft__gpu_open(dev, &o);
  if (!st && !dev->gpu)
    st = weft_storage_host_create(&dev->alloc, o.memory_capacity, &dev->storage);
  if (!st && !dev->gpu) st = weft_host_pool_create(&dev->alloc, &dev->wake, dev, &dev->pool);
  if (!st) {
    dev->mms = weft__calloc(&dev->alloc, sizeof(weft_mm *) * o.max_streams, 16);
    dev->synced = weft__calloc(&dev->alloc, sizeof(uint64_t) * o.max_streams * o.max_streams, 16);
    dev->drops = weft__calloc(&dev->alloc, sizeof(weft_drop_queue) * o.max_streams, 16);
    dev->slot_refs = weft__calloc(&dev->alloc, sizeof(struct weft_slot_ref) * o.max_streams, 16);
    if (!dev->mms || !dev->drops || !dev->slot_refs || !dev->synced)
      st = oom(sizeof(weft_drop_queue) * o.max_streams, "the memory managers");
  }
  if (!st) st = memory_config(dev, &o);
  weft_failures_init(&dev->failures, &dev->alloc);
  dev->failures.graph.namer =
      (weft_graph_namer){.kernel = kernel_name, .memory = memory_name, .ctx = dev};
  if (!st) st = failpoints_from(install_failpoints(dev, o.failpoints), "options.failpoints");
  if (!st)
    st = failpoints_from(install_failpoints(dev, getenv("WEFT_FAILPOINTS")),
                         "the WEFT_FAILPOINTS environment variable");
  if (!st) {
    int rc = pthread_create(&dev->thread, NULL, scheduler_main, dev);
    if (rc != 0)
      st = weft_error_make(WEFT_ERR_GENERIC, "cannot start the scheduler thread (error %d)", rc);
  }
  if (st) {
    weft_failures_destroy(&dev->failures);
    weft__free(&dev->alloc, dev->mms, sizeof(weft_mm *) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->synced, sizeof(uint64_t) * o.max_streams * o.max_streams, 16);
    weft__free(&dev->alloc, dev->drops, sizeof(weft_drop_queue) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->slot_refs, sizeof(struct weft_slot_ref) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->layout_pools,
               sizeof(weft_pool_config) * dev->mm_config.layout.num_pools, 16);
    if (dev->storage) weft_storage_destroy(dev->storage);
    if (dev->gpu) weft__gpu_close(dev);
    weft_host_pool_destroy(dev->pool);
    weft__free(&dev->alloc, dev->batches, sizeof(weft_batch) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->streams, sizeof(weft_stream *) * o.max_streams, 16);
    weft__free(&dev->alloc, dev->kernels, kbytes, WEFT_CACHELINE);
    weft_handles_destroy(&dev->buffers);
    weft__free(&dev->alloc, dev, sizeof(*dev), WEFT_CACHELINE);
    return st;
  }
  *out = dev;
  return NULL;
}

void weft_device_close(weft_device *dev) {
  if (!dev) return;
  /* From here every call is refused; the calls already inside finish first,
   * their commands ahead of the shutdown (see weft__enter). */
  atomic_store_explicit(&dev->closing, 1, memory_order_seq_cst);
  callers_drain(dev);
  /* Close cannot fail: the shutdown command lives on this stack (bytes 0,
   * never freed), which is safe because close waits for the scheduler. */
  cmd c_stack;
  memset(&c_stack, 0, sizeof(c_stack));
  c_stack.kind = CMD_SHUTDOWN;
  c_stack.dev = dev;
  cmd *c = &c_stack;
  cmd_submit(dev, c);
  pthread_join(dev->thread, NULL);
  for (uint32_t i = 0; i < dev->max_streams; i++)
    if (dev->streams[i]) weft_drop_queue_destroy(&dev->drops[i]);
  weft_host_pool_destroy(dev->pool);  /* and its streams */
  if (dev->gpu) weft__gpu_enter(dev); /* storage and lanes are torn down on this thread */
  weft__capture_close_all(dev);       /* recordings unpin their buffers */
  /* Every buffer the caller never released. */
  uint32_t n = atomic_load(&dev->buffers.fresh);
  for (uint32_t i = 0; i < n; i++) {
    weft_handle_slot *s = weft_handles_slot(&dev->buffers, ((uint64_t)1 << 32) | (i + 1u));
    weft_buf *b = s ? s->obj : NULL;
    if (b) {
      b->pending = 0;
      buf_free(dev, b);
    }
  }
  for (uint32_t i = 0; i < atomic_load(&dev->nkernels) && i < WEFT_MAX_KERNELS; i++) {
    weft_kernel_entry *k = &dev->kernels[i];
    weft__free(&dev->alloc, k->name, k->name_cap, 1);
  }
  weft__dev_mm_destroy_all(dev);
  weft_failures_destroy(&dev->failures);
  weft_error_free(dev->poison_error);
  weft__free(&dev->alloc, dev->mms, sizeof(weft_mm *) * dev->max_streams, 16);
  weft__free(&dev->alloc, dev->synced, sizeof(uint64_t) * dev->max_streams * dev->max_streams, 16);
  weft__free(&dev->alloc, dev->drops, sizeof(weft_drop_queue) * dev->max_streams, 16);
  weft__free(&dev->alloc, dev->slot_refs, sizeof(struct weft_slot_ref) * dev->max_streams, 16);
  weft__free(&dev->alloc, dev->layout_pools,
             sizeof(weft_pool_config) * dev->mm_config.layout.num_pools, 16);
  weft_storage_destroy(dev->storage);
  if (dev->gpu) weft__gpu_close(dev); /* modules, lanes, the context */
  weft_allocator alloc = dev->alloc;
  weft__free(&alloc, dev->batches, sizeof(weft_batch) * dev->max_streams, 16);
  weft__free(&alloc, dev->streams, sizeof(weft_stream *) * dev->max_streams, 16);
  weft__free(&alloc, dev->kernels, sizeof(weft_kernel_entry) * WEFT_MAX_KERNELS, WEFT_CACHELINE);
  weft_handles_destroy(&dev->buffers);
  cmd_pool_destroy(dev);
  weft__free(&alloc, dev, sizeof(*dev), WEFT_CACHELINE);
}

/* ---- public calls ------------------------------------------------------------------------------
 */

static _Atomic uint64_t thread_streams = 0;
static _Thread_local uint64_t this_thread_stream = 0;

weft_stream_id weft_stream_current(void) {
  if (this_thread_stream == 0)
    this_thread_stream = atomic_fetch_add_explicit(&thread_streams, 1, memory_order_relaxed) + 1;
  return this_thread_stream - 1;
}

weft_status weft_buffer_create(weft_device *dev, weft_stream_id stream, uint64_t size,
                               weft_buffer *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if (size == 0) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "buffer size is 0");
  if (size > WEFT_MAX_BUFFER_SIZE)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "buffer size %" PRIu64 " exceeds the largest supported (%" PRIu64 ")",
                           size, (uint64_t)WEFT_MAX_BUFFER_SIZE);
  /* The buffer's bookkeeping is allocated here, so running out of memory for
   * it is the caller's error now rather than a mystery later. */
  size_t bytes = sizeof(weft_buf) + sizeof(uint64_t) * dev->max_streams;
  weft_buf *b = weft__calloc(&dev->alloc, bytes, 16);
  if (!b) return oom(bytes, "a buffer");
  cmd *c = weft__cmd_new_on(dev, CMD_CREATE, 0, stream);
  if (!c) {
    weft__free(&dev->alloc, b, bytes, 16);
    return oom(sizeof(cmd), "a create command");
  }
  uint64_t id;
  st = weft_handles_acquire(&dev->buffers, size, &id);
  if (st) {
    weft__free(&dev->alloc, b, bytes, 16);
    weft__cmd_free(c);
    return st;
  }
  c->data = b;
  c->stream = stream;
  c->buffer = id;
  c->len = size;
  cmd_submit(dev, c);
  out->id = id;
  return NULL;
}

weft_status weft_buffer_release(weft_device *dev, weft_buffer buf) {
  WEFT_INSIDE in = {0};
  weft_status st = enter(dev, &in);
  if (st) return st;
  if ((st = lookup_buffer(dev, buf, NULL))) return st;
  if (weft__dev_scheduling() == dev && dev->in_reclaim &&
      weft_handles_slot(&dev->buffers, buf.id)->obj) {
    /* From the reclaim callback: takes effect at once, so the retry can use it.
     * A buffer whose create is still queued holds no memory yet: its release
     * is queued behind the create, as from any other thread. */
    if (!weft_handles_kill(&dev->buffers, buf.id)) return not_found(buf.id);
    weft__dev_release_now(dev, buf.id);
    return NULL;
  }
  cmd *c = weft__cmd_new(dev, CMD_RELEASE, 0);
  if (!c) return oom(sizeof(cmd), "a release command");
  if (!weft_handles_kill(&dev->buffers, buf.id)) { /* another thread released it first */
    weft__cmd_free(c);
    return not_found(buf.id);
  }
  c->buffer = buf.id;
  cmd_submit(dev, c);
  return NULL;
}

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
  weft_status st = enter(dev, &in);
  if (st) return st;
  uint64_t size;
  if ((st = lookup_buffer(dev, buf, &size))) return st;
  if (!src && len) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "src is NULL");
  if ((st = check_range(size, offset, len, "write"))) return st;
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
  size_t extra = align8(sizeof(weft_buf *)) + align8(sizeof(weft_stream_wait) * dev->max_streams) +
                 (staged || direct ? 0 : (size_t)len);
  cmd *c = weft__cmd_new_on(dev, CMD_WRITE, extra, stream);
  if (!c) {
    if (staged) atomic_fetch_sub_explicit(&dev->staged_bytes, len, memory_order_relaxed);
    return oom(extra, "a write command");
  }
  char *p = (char *)c + align8(sizeof(cmd));
  c->bufs = (weft_buf **)p;
  p += align8(sizeof(weft_buf *));
  c->task.waits = (weft_stream_wait *)p;
  p += align8(sizeof(weft_stream_wait) * dev->max_streams);
  if (staged) { /* a separate block: the drop queue keeps it until the stream consumed it */
    p = len <= SIZE_MAX ? weft__alloc(&dev->alloc, (size_t)len, 16) : NULL;
    if (!p) {
      atomic_fetch_sub_explicit(&dev->staged_bytes, len, memory_order_relaxed);
      weft__cmd_free(c);
      return oom((size_t)len, "staging a write");
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
    cmd_submit(dev, c);
    return weft__token_wait(&tok);
  }
  c->data = p;
  memcpy(p, src, len);
  cmd_submit(dev, c);
  return NULL;
}

weft_status weft_buffer_read(weft_device *dev, weft_stream_id stream, weft_buffer buf,
                             uint64_t offset, void *dst, uint64_t len) {
  WEFT_INSIDE in = {0};
  weft_status st = enter_blocking(dev, &in);
  if (st) return st;
  uint64_t size;
  if ((st = lookup_buffer(dev, buf, &size))) return st;
  if (!dst && len) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "dst is NULL");
  if ((st = check_range(size, offset, len, "read"))) return st;
  if ((st = refuse_on_own_stream(dev, stream, "weft_buffer_read on the kernel's own stream",
                                 "the read is ordered after every command submitted there "
                                 "before it, the kernel included")))
    return st;
  size_t extra = align8(sizeof(weft_buf *)) + sizeof(weft_stream_wait) * dev->max_streams;
  cmd *c = weft__cmd_new_on(dev, CMD_READ, extra, stream);
  if (!c) return oom(extra, "a read command");
  char *p = (char *)c + align8(sizeof(cmd));
  c->bufs = (weft_buf **)p;
  c->task.waits = (weft_stream_wait *)(p + align8(sizeof(weft_buf *)));
  weft_token tok;
  weft__token_init(&tok);
  c->token = &tok;
  c->stream = stream;
  c->buffer = buf.id;
  c->offset = offset;
  c->len = len;
  c->data = dst;
  c->caller = weft__running_kernel(dev);
  cmd_submit(dev, c);
  return weft__token_wait(&tok);
}

weft_status weft__kernel_register(weft_device *dev, const char *name, const weft_kernel_entry *e,
                                  weft_kernel *out) {
  if (!name) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "kernel name is NULL");
  size_t len = strnlen(name, 256);
  if (len == 0 || len > 255)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "kernel name must be 1..255 bytes");
  char *copy = weft__alloc(&dev->alloc, len + 1, 1);
  if (!copy) return oom(len + 1, "a kernel name");
  memcpy(copy, name, len + 1);
  uint32_t idx = atomic_fetch_add_explicit(&dev->nkernels, 1, memory_order_relaxed);
  if (idx >= WEFT_MAX_KERNELS) {
    atomic_fetch_sub_explicit(&dev->nkernels, 1, memory_order_relaxed);
    weft__free(&dev->alloc, copy, len + 1, 1);
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "too many kernels (at most %u per device)",
                           WEFT_MAX_KERNELS);
  }
  weft_kernel_entry *k = &dev->kernels[idx];
  memcpy(k, e, sizeof(*k));
  atomic_init(&k->ready, 0);
  k->name = copy;
  k->name_cap = len + 1;
  /* release: a thread that sees ready sees the entry. */
  atomic_store_explicit(&k->ready, 1, memory_order_release);
  out->id = ((uint64_t)dev->tag << 32) | (idx + 1u);
  return NULL;
}

weft_status weft_kernel_host(weft_device *dev, const char *name, weft_host_kernel_fn fn, void *user,
                             weft_kernel *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if (dev->gpu)
    return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                           "host kernels run on the host backend; a CUDA device runs kernels "
                           "from modules (weft_module_load, weft_kernel_cuda)");
  if (!fn) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "kernel function is NULL");
  weft_kernel_entry e;
  memset(&e, 0, sizeof(e));
  e.fn = fn;
  e.user = user;
  return weft__kernel_register(dev, name, &e, out);
}

static weft_status check_dims(const uint32_t d[3], const char *what) {
  if (!d) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  if (!d[0] || !d[1] || !d[2])
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s has a zero dimension (%u, %u, %u)", what,
                           d[0], d[1], d[2]);
  return NULL;
}

/* Checks a launch's arguments (the caller is inside the device); |resolved|
 * (num_bindings entries) receives the bindings with WEFT_WHOLE sizes resolved. */
weft_status weft__launch_check(weft_device *dev, weft_kernel kernel, const uint32_t grid[3],
                               const uint32_t block[3], const weft_binding *bindings,
                               size_t num_bindings, const void *scalars, size_t scalar_bytes,
                               weft_binding *resolved) {
  weft_status st;
  uint32_t kidx = (uint32_t)kernel.id - 1u;
  if ((uint32_t)(kernel.id >> 32) != dev->tag || (uint32_t)kernel.id == 0 ||
      kidx >= WEFT_MAX_KERNELS ||
      !atomic_load_explicit(&dev->kernels[kidx].ready, memory_order_acquire))
    return weft_error_make(WEFT_ERR_NOT_FOUND, "kernel %#" PRIx64 " is not a kernel of this device",
                           kernel.id);
  if ((st = check_dims(grid, "grid")) || (st = check_dims(block, "block"))) return st;
  if (num_bindings > WEFT_MAX_BINDINGS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%zu bindings; at most %u per launch",
                           num_bindings, WEFT_MAX_BINDINGS);
  if (num_bindings && !bindings)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "bindings is NULL");
  if (scalar_bytes > WEFT_MAX_SCALAR_BYTES)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%zu scalar bytes; at most %u per launch",
                           scalar_bytes, WEFT_MAX_SCALAR_BYTES);
  if (scalar_bytes && !scalars)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "scalars is NULL");
  if (dev->gpu && (st = weft__gpu_check_launch(&dev->kernels[kidx], num_bindings, scalar_bytes)))
    return st;
  for (size_t i = 0; i < num_bindings; i++) {
    weft_binding b = bindings[i];
    uint64_t size;
    if (b.access != WEFT_READ && b.access != WEFT_WRITE && b.access != WEFT_READ_WRITE)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "binding %zu has an invalid access %d", i,
                             (int)b.access);
    if ((st = lookup_buffer(dev, b.buffer, &size))) return st;
    if (b.offset > size)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "binding %zu: offset %" PRIu64
                             " is past the end of the buffer (%" PRIu64 " bytes)",
                             i, b.offset, size);
    if (b.size == WEFT_WHOLE) b.size = size - b.offset;
    if ((st = check_range(size, b.offset, b.size, "binding"))) return st;
    resolved[i] = b;
  }
  return NULL;
}

/* A launch command from checked arguments (not numbered, not submitted). */
cmd *weft__launch_build(weft_device *dev, weft_stream_id stream, weft_kernel kernel,
                        const uint32_t grid[3], const uint32_t block[3],
                        const weft_binding *resolved, size_t nb, const void *scalars,
                        size_t scalar_bytes, bool wait) {
  size_t extra = align8(sizeof(weft_binding) * nb) + align8(sizeof(weft_buf *) * nb) +
                 align8(sizeof(void *) * nb) + align8(sizeof(weft_stream_wait) * dev->max_streams) +
                 scalar_bytes;
  cmd *c = cmd_alloc(dev, CMD_LAUNCH, extra, slot_of(dev, stream), wait);
  if (!c) return NULL;
  char *p = (char *)c + align8(sizeof(cmd));
  c->bindings = (weft_binding *)p;
  p += align8(sizeof(weft_binding) * nb);
  c->bufs = (weft_buf **)p;
  p += align8(sizeof(weft_buf *) * nb);
  c->ptrs = (void **)p;
  p += align8(sizeof(void *) * nb);
  c->task.waits = (weft_stream_wait *)p;
  p += align8(sizeof(weft_stream_wait) * dev->max_streams);
  if (nb) memcpy(c->bindings, resolved, sizeof(weft_binding) * nb);
  if (scalar_bytes) memcpy(p, scalars, scalar_bytes);
  c->scalars = p;
  c->scalar_bytes = scalar_bytes;
  c->nb = (uint32_t)nb;
  c->kernel = (uint32_t)kernel.id - 1u;
  memcpy(c->grid, grid, sizeof(c->grid));
  memcpy(c->block, block, sizeof(c->block));
  c->stream = stream;
  return c;
}

weft_status weft_launch(weft_device *dev, weft_stream_id stream, weft_kernel kernel,
                        const uint32_t grid[3], const uint32_t block[3],
                        const weft_binding *bindings, size_t num_bindings, const void *scalars,
                        size_t scalar_bytes) {
  WEFT_INSIDE in = {0};
  weft_status st = enter(dev, &in);
  if (st) return st;
  weft_binding resolved[WEFT_MAX_BINDINGS];
  st = weft__launch_check(dev, kernel, grid, block, bindings, num_bindings, scalars, scalar_bytes,
                          resolved);
  if (st) return st;
  cmd *c = weft__launch_build(dev, stream, kernel, grid, block, resolved, num_bindings, scalars,
                              scalar_bytes, true);
  if (!c) return oom(sizeof(cmd), "a launch command");
  c->launch_no = atomic_fetch_add_explicit(&dev->launches_submitted, 1, memory_order_relaxed) + 1;
  cmd_submit(dev, c);
  return NULL;
}

weft_status weft_sync(weft_device *dev, weft_stream_id stream) {
  WEFT_INSIDE in = {0};
  weft_status st = enter_blocking(dev, &in);
  if (st) return st;
  if ((st = refuse_on_own_stream(dev, stream, "weft_sync on the kernel's own stream",
                                 "the barrier waits for everything submitted there before it, "
                                 "the kernel included")))
    return st;
  cmd *c = weft__cmd_new_on(dev, CMD_SYNC, 0, stream);
  if (!c) return oom(sizeof(cmd), "a sync command");
  weft_token tok;
  weft__token_init(&tok);
  c->token = &tok;
  c->stream = stream;
  c->caller = weft__running_kernel(dev);
  cmd_submit(dev, c);
  return weft__token_wait(&tok);
}

weft_status weft_check(weft_device *dev, const weft_buffer *bufs, size_t n) {
  WEFT_INSIDE in = {0};
  weft_status st = enter_blocking(dev, &in);
  if (st) return st;
  if (n && !bufs) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "bufs is NULL");
  if (n > UINT32_MAX) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "too many buffers");
  for (size_t i = 0; i < n; i++)
    if ((st = lookup_buffer(dev, bufs[i], NULL))) return st;
  if (n == 0) return NULL;
  size_t extra = sizeof(uint64_t) * n;
  cmd *c = weft__cmd_new(dev, CMD_CHECK, extra);
  if (!c) return oom(extra, "a check command");
  c->handles = (uint64_t *)((char *)c + align8(sizeof(cmd)));
  for (size_t i = 0; i < n; i++) c->handles[i] = bufs[i].id;
  c->nb = (uint32_t)n;
  c->caller = weft__running_kernel(dev);
  weft_token tok;
  weft__token_init(&tok);
  c->token = &tok;
  cmd_submit(dev, c);
  return weft__token_wait(&tok);
}

weft_status weft_device_info_get(weft_device *dev, weft_device_info *out) {
  WEFT_INSIDE in = {0};
  weft_status st = enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  memset(out, 0, sizeof(*out));
  out->max_streams = dev->max_streams;
  out->memory_align = (uint32_t)weft_storage_alignment(dev->storage);
  out->capacity = dev->mm_config.device_bytes;
  if (dev->gpu) {
    weft__gpu_info(dev, out);
  } else {
    out->backend = WEFT_BACKEND_HOST;
    snprintf(out->name, sizeof(out->name), "host");
    out->total_memory = dev->mm_config.device_bytes;
  }
  return NULL;
}

weft_status weft_device_stats_get(weft_device *dev, weft_device_stats *out) {
  WEFT_INSIDE in = {0};
  weft_status st = enter_blocking(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  cmd *c = weft__cmd_new(dev, CMD_STATS, 0);
  if (!c) return oom(sizeof(cmd), "a stats command");
  weft_token tok;
  weft__token_init(&tok);
  c->token = &tok;
  c->stats_out = out;
  c->caller = weft__running_kernel(dev);
  cmd_submit(dev, c);
  return weft__token_wait(&tok);
}

weft_status weft_device_set_poison_callback(weft_device *dev, weft_poison_fn fn, void *user) {
  WEFT_INSIDE in = {0};
  weft_status st = enter_open(dev, &in);
  if (st) return st;
  /* release: a worker that loads the function sees its user pointer. */
  atomic_store_explicit(&dev->on_poison_user, user, memory_order_release);
  atomic_store_explicit(&dev->on_poison, fn, memory_order_release);
  return NULL;
}

weft_status weft_device_set_failpoints(weft_device *dev, const char *spec) {
  WEFT_INSIDE in = {0};
  weft_status st = enter_blocking(dev, &in);
  if (st) return st;
  if (!spec) spec = ""; /* clears, as an empty spec does */
  size_t len = strlen(spec);
  cmd *c = weft__cmd_new(dev, CMD_FAILPOINTS, len + 1);
  if (!c) return oom(len + 1, "a failpoints command");
  c->data = (char *)c + align8(sizeof(cmd));
  memcpy(c->data, spec, len + 1);
  c->caller = weft__running_kernel(dev);
  weft_token tok;
  weft__token_init(&tok);
  c->token = &tok;
  cmd_submit(dev, c);
  return weft__token_wait(&tok);
}

weft_status weft_device_poisoned(weft_device *dev) {
  if (!dev) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "device is NULL");
  WEFT_INSIDE in = {0};
  weft_status st = enter_open(dev, &in);
  if (st) return st;
  if (!poisoned(dev)) return NULL;
  return weft_error_clone(dev->poison_error);
}
