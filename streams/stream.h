/* Streams: in-order queues of tasks, each drained by a backend. The scheduler
 * (one thread) is the only producer of a stream; the backend's worker is its
 * only consumer. Cross-stream order is expressed as waits on another stream's
 * completion cursor (the host backend's events): a task runs only once every
 * stream it waits on has completed the named sequence number.
 *
 *   task->run = fn; task->waits = ...;          // scheduler
 *   weft_stream_submit(s, first, last);         // scheduler, a chain in order
 *   ... worker: wait, run, completed = seq (release)
 *
 * Completion sends no message: the owner keeps the tasks it submitted in
 * order and retires those at or below the stream's cursor. A worker wakes
 * the owner (the |progress| event count) after a task marked |notify| and
 * whenever it runs out of work, so the owner parks instead of polling. */
#ifndef WEFT_STREAMS_STREAM_H
#define WEFT_STREAMS_STREAM_H

#include <pthread.h>
#include <stddef.h>

#include "core/inbox.h"
#include <weft/weft.h>

#define WEFT_MAX_STREAMS 64u

typedef struct weft_stream weft_stream;
typedef struct weft_task weft_task;

typedef struct weft_stream_wait {
  weft_stream *stream;
  uint64_t seq;
} weft_stream_wait;

struct weft_task {
  ck_stack_entry_t link; /* inbox link; owned by whoever holds the task */
  void (*run)(weft_task *t);
  uint64_t seq; /* position on its stream, 1-based */
  uint32_t nwaits;
  bool notify;      /* someone waits for this task's retirement: wake the owner */
  weft_task *fnext; /* the owner's list of submitted tasks (never touched by the worker) */
  weft_stream_wait *waits;
};

#define WEFT_TASK_OF(entry) ((weft_task *)((char *)(entry)-offsetof(weft_task, link)))

struct weft_stream {
  uint32_t slot;
  uint64_t submitted; /* scheduler-owned: the last sequence number handed out */
  _Atomic uint64_t completed;
  weft_eventcount done_ec;        /* cross-stream waiters park here */
  _Atomic uint64_t waits_blocked; /* waits that found the origin not yet done */
  weft_inbox inbox;
  _Atomic uint32_t stop;
  pthread_t thread;
  weft_eventcount *progress; /* the owner parks here */
  void *ctx;
  const weft_allocator *alloc;
};

/* The |ctx| of the stream whose worker is the calling thread, or NULL: lets
 * the owner tell its own workers from client threads. */
void *weft_stream_worker_ctx(void);

/* Starts a host stream (a worker thread). |ctx| is what
 * weft_stream_worker_ctx answers on the worker. */
weft_status weft_stream_host_create(const weft_allocator *alloc, uint32_t slot,
                                    weft_eventcount *progress, void *ctx, weft_stream **out);
/* Scheduler: hands a chain of tasks (linked through link.next, in order). */
static inline void weft_stream_submit(weft_stream *s, weft_task *first, weft_task *last) {
  weft_inbox_push_chain(&s->inbox, &first->link, &last->link);
}
/* Runs every task already submitted, then stops the worker and frees the stream. */
void weft_stream_destroy(weft_stream *s);
/* Blocks until |s| has completed |seq| (spin briefly, then park). */
void weft_stream_wait_for(weft_stream *s, uint64_t seq);

#endif
