/* The client side of the queue (submit.c). */
#ifndef WEFT_SCHEDULER_SUBMIT_H
#define WEFT_SCHEDULER_SUBMIT_H

#include "core/inbox.h"
#include "scheduler/device_internal.h"
#include "scheduler/inside.h"

/* A command of |kind| with |extra| bytes after it, from the device's pools.
 * A client past the back-pressure limit waits here (the scheduler thread and
 * the device's own workers never wait: they are what frees room). Commands
 * on a stream count against that stream's budget (_on), others against the
 * device's own: a stream stalled behind a blocked kernel holds up only its
 * own clients. */
cmd *weft__cmd_new(weft_device *dev, cmd_kind kind, size_t extra);
cmd *weft__cmd_new_on(weft_device *dev, cmd_kind kind, size_t extra, weft_stream_id stream);
/* A command counted against |budget| (weft__cmd_alloc) once the calling
 * thread has a credit for it (from its cache, or a block from the budget,
 * waiting for room); |wait| false: NULL at once (as for no memory) when
 * the budget is full. */
cmd *weft__cmd_take(weft_device *dev, cmd_kind kind, size_t extra, uint32_t budget, bool wait);

/* ---- the launch's fast path (launch.c): a command from the thread's cache ---- */
/* A thread caches for WEFT_TC_DEVICES devices at once (submit.c binds them). */
#define WEFT_TC_DEVICES 4u
typedef struct weft_tc_slots {
  uint32_t next_victim;
  bool keyed; /* the exit destructor is armed */
  weft_tcache tc[WEFT_TC_DEVICES];
} weft_tc_slots;
extern _Thread_local weft_tc_slots weft__tc_tls;

/* The calling thread's cache for |dev| when one is bound, else NULL (the
 * caller is inside |dev|; binding is weft__cmd_take's). */
static inline weft_tcache *weft__tcache_find(const weft_device *dev) {
  weft_tc_slots *s = &weft__tc_tls;
  for (uint32_t i = 0; i < WEFT_TC_DEVICES; i++)
    if (atomic_load_explicit(&s->tc[i].dev, memory_order_relaxed) == dev) return &s->tc[i];
  return NULL;
}

/* Out of line: a seated cache |tc| out of credits for |budget| takes a
 * block without waiting, and one out of commands of class |k| takes
 * WEFT_TC_BATCH of them from the pool; false when either is still lacking (no room, an empty
 * pool, a thread without a seat: weft__cmd_take's cases). */
__attribute__((noinline)) bool weft__tcache_refill(weft_device *dev, weft_tcache *tc,
                                                   uint32_t budget, uint32_t k);

/* As weft__cmd_take of a command of class |k| (< WEFT_TC_CLASSES) on
 * |budget| from the calling thread's cache, a credit for |budget| and a free
 * command of that class, refilling the cache without waiting (credits come
 * in blocks, so most calls take no atomic for them; a command is one pool
 * pop, WEFT_TC_BATCH being 1). Only the allocation's fields are set (kind, budget, bytes,
 * dev); the caller sets every other field its command's readers read. NULL,
 * taking nothing, when the thread has no cache for |dev| yet, schedules
 * |dev| (its commands are counted apart) or would have to wait or allocate:
 * the caller takes weft__cmd_take's path. */
static inline cmd *weft__cmd_take_cached(weft_device *dev, cmd_kind kind, uint32_t budget,
                                         uint32_t k, weft_tcache **tcp) {
  weft_tcache *tc = weft__tcache_find(dev);
  if (!tc || weft__dev_scheduling() == dev) return NULL;
  if (__builtin_expect(!tc->credits[budget] || !tc->cmds[k], 0) &&
      !weft__tcache_refill(dev, tc, budget, k))
    return NULL;
  ck_stack_entry_t *e = tc->cmds[k];
  tc->cmds[k] = e->next;
  tc->ncmds[k]--;
  tc->credits[budget]--;
  cmd *c = (cmd *)WEFT_TASK_OF(e);
  c->kind = kind;
  c->budget = (uint16_t)budget;
  c->bytes = WEFT_CMD_CLASS_MIN << k;
  c->dev = dev;
  *tcp = tc;
  return c;
}
/* Undoes weft__cmd_take_cached (a launch refused after it took them): the
 * command goes back to |tc|, its credit to its budget. Out of line: only a
 * refused launch comes here. */
__attribute__((noinline, cold)) void weft__cmd_untake_cached(weft_device *dev, weft_tcache *tc,
                                                             cmd *c, uint32_t k);

/* Clients that wait for room (back-pressure, a free replay instance).
 * |ready| may take what it waits for: it is called until it returns true,
 * and never again after. */
void weft__wait_room(weft_device *dev, bool (*ready)(void *), void *arg);
/* Close, once every caller has left: every thread's cache for |dev| hands
 * back its credits and commands and is unbound. */
void weft__tcache_close(weft_device *dev);
/* Combining: after a push, the pusher takes the scheduler role if it is
 * free (or leaves the command to the holder). */
void weft__cmd_combine_pushed(weft_device *dev);
/* Queues |c| for the scheduler (and, when combining, schedules it). Inline:
 * every launch ends here. */
static inline void weft__cmd_submit(weft_device *dev, cmd *c) {
  if (!dev->loop.combining) {
    weft_inbox_push(&dev->loop.inbox, &c->task.link);
    return;
  }
  weft_inbox_push_quiet(&dev->loop.inbox, &c->task.link);
  weft__cmd_combine_pushed(dev);
}
/* A blocking call: submits |c| and waits for its answer. The kernel the
 * calling thread runs, if any, is recorded (c->caller), so that a call that
 * would wait for it is refused instead. */
WEFT_MUST_USE_RESULT weft_status weft__cmd_call(weft_device *dev, cmd *c);
/* Queues a chain of commands (linked through task.link, in order) at once. */
void weft__cmd_submit_chain(weft_device *dev, cmd *first, cmd *last);

#endif
