/* Streams: in-order queues of tasks, run by a backend. The owner (the
 * device's scheduler, one thread) is a stream's only producer.
 * Cross-stream order is expressed as waits on another stream's completion
 * cursor (the host backend's events): a task runs only once every stream it
 * waits on has completed the named position.
 *
 *   task->run = fn; task->waits = ...;          // owner
 *   weft_stream_submit(s, first, last);         // owner, a chain in order
 *   ... a pool thread: check waits, run, completed = seq (release)
 *
 * Completion sends no message: the owner keeps the tasks it submitted in
 * order and retires those at or below the stream's cursor. The pool raises
 * the owner's |progress| signal after a task marked |notify| and whenever a
 * thread leaves a stream (out of work, or its budget spent), so the owner
 * parks instead of polling.
 *
 * The host backend runs streams on a pool of threads rather than a thread
 * per stream: a stream whose next task waits on another stream gives its
 * thread back and is requeued by whichever thread completes what it waits
 * for. No thread ever blocks on a cross-stream wait, so the pool stays busy
 * with more streams (and more runnable threads) than cores. The pool holds
 * one thread per stream, so a host kernel that blocks never starves the
 * other streams. */
#ifndef WEFT_STREAMS_STREAM_H
#define WEFT_STREAMS_STREAM_H

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>

#include "core/clock.h"
#include "core/inbox.h"
#include <weft/weft.h>

#define WEFT_MAX_STREAMS 64u

typedef struct weft_stream weft_stream;
typedef struct weft_task weft_task;
typedef struct weft_host_pool weft_host_pool;

/* Scheduling states of a stream (streams/host/pool.c). */
enum { WEFT_STREAM_IDLE, WEFT_STREAM_QUEUED, WEFT_STREAM_RUNNING, WEFT_STREAM_BLOCKED };

/* How a backend runs its streams: the host pool (streams/host/pool.c) and
 * the CUDA backend's lanes (streams/cuda/lane.h) each implement these. Every
 * stream has them; the owner calls them (weft_stream_submit & co). */
typedef struct weft_stream_ops {
  /* Hands a chain of tasks (linked through link.next, in order). */
  void (*submit)(weft_stream *s, weft_task *first, weft_task *last);
  /* Blocks until |s| has completed |seq| (called once the cursor is below). */
  void (*wait_for)(weft_stream *s, uint64_t seq);
  /* No thread runs |s| and none will without a new submission. */
  bool (*is_idle)(weft_stream *s);
} weft_stream_ops;

typedef struct weft_stream_wait {
  weft_stream *stream;
  uint64_t seq;
} weft_stream_wait;

struct weft_task {
  ck_stack_entry_t link;                      /* queue link; owned by whoever holds the task */
  void (*run)(weft_task *t, weft_stream *on); /* |on|: the stream running it */
  uint64_t seq;                               /* position on its stream, 1-based */
  uint32_t nwaits;
  bool notify;      /* someone waits for this task's retirement: wake the owner */
  weft_task *fnext; /* the owner's list of submitted tasks (never touched by the pool) */
  uint64_t placed;  /* the owner's order of placement, over every stream */
  weft_stream_wait *waits;
};

/* A task's run interval in weft_clock_ticks (core/clock.h), stamped by the
 * thread that runs it while its stream stamps (weft_stream_stamp_at). */
typedef struct weft_task_stamp {
  uint64_t t0, t1;
} weft_task_stamp;

#define WEFT_TASK_OF(entry) ((weft_task *)((char *)(entry)-offsetof(weft_task, link)))

/* The task after |t| in a chain linked through link.next, or NULL. */
static inline weft_task *weft_task_next(const weft_task *t) {
  return t->link.next ? WEFT_TASK_OF(t->link.next) : NULL;
}

struct weft_stream {
  uint32_t slot;
  uint64_t submitted; /* owner-owned: the last position handed out */
  weft_host_pool *pool;
  const weft_stream_ops *ops; /* the backend's: how it runs */
  void *impl;                 /* the backend's state */
  /* Written by the thread running the stream, read by every waiter. */
  _Alignas(64) _Atomic uint64_t completed;
  weft_eventcount done_ec; /* the owner's waits (weft_stream_wait_for) park here */
  /* The owner pushes, the running thread takes. */
  _Alignas(64) weft_inbox inbox;
  /* Scheduling state (see streams/host/pool.c). */
  _Alignas(64) _Atomic uint32_t state;
  _Atomic(weft_stream *) block_on; /* BLOCKED: the origin and position it waits for */
  _Atomic uint64_t block_seq;
  ck_stack_entry_t *local; /* the running thread's tasks taken from the inbox, in order */
  /* 0, or where in each task's object (bytes from the task) the thread that
   * runs it stamps its weft_task_stamp: the owner's trace (weft_stream_stamp_at). */
  _Atomic uint32_t stamp_at;
};

/* Stamps every task run from now on at |offset| bytes from the task (0:
 * stops). The owner's call; a task handed over after it is stamped. A task
 * that follows the previous one its thread ran on this stream, with no
 * cross-stream wait, starts when that one ended (one clock read a task);
 * the first after the stream went idle, a refill, or a wait reads the clock
 * at its start too. */
static inline void weft_stream_stamp_at(weft_stream *s, uint32_t offset) {
  atomic_store_explicit(&s->stamp_at, offset, memory_order_relaxed);
}

/* Runs |t| on |s|, stamping it when |s| stamps; |*last| is the end of the
 * task this thread ran just before on |s| (0: none, or not back to back). */
static inline void weft_stream_run_task(weft_stream *s, weft_task *t, uint64_t *last) {
  uint32_t at = atomic_load_explicit(&s->stamp_at, memory_order_relaxed);
  if (__builtin_expect(at == 0, 1)) {
    t->run(t, s);
    return;
  }
  uint64_t t0 = *last && !t->nwaits ? *last : weft_clock_ticks();
  t->run(t, s);
  uint64_t t1 = weft_clock_ticks();
  weft_task_stamp *st = (weft_task_stamp *)(void *)((char *)t + at);
  st->t0 = t0;
  st->t1 = t1;
  *last = t1;
}

/* The |ctx| of the pool whose thread is calling, or NULL: lets the owner tell
 * its own pool's threads from client threads. */
void *weft_stream_worker_ctx(void);

/* A pool of host threads for a device's streams (none started yet): one
 * thread per stream, at most |max_threads| of them (0: no cap). */
WEFT_MUST_USE_RESULT weft_status weft_host_pool_create(const weft_allocator *alloc,
                                                       weft_signal *progress, void *ctx,
                                                       uint32_t max_threads, weft_host_pool **out);
/* Stops the pool's threads and frees its streams (every stream must be idle:
 * the owner retired all it submitted). */
void weft_host_pool_destroy(weft_host_pool *p);
/* Timed-out parks of the pool's threads that found a stream left with work
 * and no thread: queued while every thread parked, idle with tasks, or
 * blocked on a position its origin reached (should stay 0). */
uint64_t weft_host_pool_recovered(const weft_host_pool *p);
/* Prints the pool's threads, streams and ready-queue counters (any thread;
 * a racy snapshot, for a lost wake-up's report). */
void weft_host_pool_dump(const weft_host_pool *p, FILE *f);
/* Starts a host stream on |pool| (and one more thread, below the cap). */
WEFT_MUST_USE_RESULT weft_status weft_stream_host_create(weft_host_pool *pool, uint32_t slot,
                                                         weft_stream **out);
/* True when no thread runs |s| and none will without a new submission
 * (a lane: when it has completed all it was handed). */
static inline bool weft_stream_is_idle(weft_stream *s) {
  return s->ops->is_idle(s);
}
/* Owner: hands a chain of tasks (linked through link.next, in order). */
static inline void weft_stream_submit(weft_stream *s, weft_task *first, weft_task *last) {
  s->ops->submit(s, first, last);
}
/* Blocks until |s| has completed |seq| (the host pool spins briefly, then
 * parks; a lane synchronises its CUDA stream). */
static inline void weft_stream_wait_for(weft_stream *s, uint64_t seq) {
  if (atomic_load_explicit(&s->completed, memory_order_acquire) >= seq) return;
  s->ops->wait_for(s, seq);
}

#endif
