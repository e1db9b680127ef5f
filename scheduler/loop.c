/* The scheduler loop: the scheduler thread, the combining role (a client
 * that finds it free schedules its own command), parking and waking, and
 * the drain. Everything a command does when it arrives is its kind's
 * (weft__cmd_ops); everything done at completion is retirement's.
 *
 * The role, when combining, is one flag. Whoever takes it owns the device
 * state until it lets go; a producer that finds it taken leaves its command
 * to the holder, which looks at the inbox again after letting go (store,
 * then load, both seq_cst, against the producer's push, then role check). */
#include "scheduler/loop.h"

#include <inttypes.h>
#include <sched.h>
#include <stdio.h>

#include "core/hunt.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/multistream.h"
#include "scheduler/retire.h"

#ifndef WEFT_TAKE_BACKOFF
#define WEFT_TAKE_BACKOFF 32
#endif

/* The scheduler's queue: what it took from the inbox and has not processed
 * yet, in submission order. Commands are popped one at a time so that a
 * drain (which runs in the middle of one) sees the completions behind it. */
static void held_append(weft_device *dev, ck_stack_entry_t *first, ck_stack_entry_t *last) {
  if (dev->loop.held_tail)
    dev->loop.held_tail->next = first;
  else
    dev->loop.held_head = first;
  dev->loop.held_tail = last;
}

/* One command reaching the scheduler: through the command table, so the
 * loop depends on no kind's file. In line in the loops below: it is on every
 * command's path. */
static inline __attribute__((always_inline)) void dev_process(weft_device *dev, cmd *c) {
  if (__builtin_expect(c->cancelled, 0)) { /* a kernel's call, refused while it was queued */
    weft__cmd_free(c);
    return;
  }
  dev->stats.commands++;
  weft__check_fault(dev, false); /* a sticky error any call met */
  const weft_cmd_ops *ops = &weft__cmd_ops[c->kind];
  if (__builtin_expect(ops->retire_first, 0)) weft__retire_all(dev);
  ops->process(dev, c);
}

void weft__dev_process(weft_device *dev, cmd *c) {
  dev_process(dev, c);
}

/* ---- parking: the scheduler waits for commands and completions ----------------------------- */

/* The scheduler's view, for a lost wake-up's report (role holder only). */
static void dev_dump(weft_device *dev) {
  uint64_t pending = 0; /* over every stream's budget and the shared one */
  for (uint32_t i = 0; i <= WEFT_MAX_STREAMS; i++) pending += atomic_load(&dev->cmds.pending[i].n);
  fprintf(stderr,
          "  scheduler (%s): role %u, wake raised %u, inbox %s (parked %u, epoch %u), "
          "held %s, pending %" PRIu64 ", inflight %" PRIu64 ", shutdown %d\n",
          dev->loop.combining ? "combining" : "thread", atomic_load(&dev->loop.role),
          atomic_load(&dev->loop.wake.raised),
          weft_inbox_empty(&dev->loop.inbox) ? "empty" : "non-empty",
          atomic_load(&dev->loop.inbox.ec.sleepers), atomic_load(&dev->loop.inbox.ec.epoch),
          dev->loop.held_head ? "commands" : "none", pending, dev->ms.inflight, dev->loop.shutdown);
  for (uint32_t i = 0; i < dev->max_streams; i++) {
    if (!dev->streams[i]) continue;
    weft_task *h = dev->ms.fifo[i].head, *t = dev->ms.fifo[i].tail;
    fprintf(stderr,
            "  slot %u: batch %u, placed %" PRIu64 ", unretired %" PRIu64 "..%" PRIu64
            ", completed %" PRIu64 "\n",
            i, dev->ms.batches[i].n, dev->streams[i]->submitted, h ? h->seq : 0, t ? t->seq : 0,
            atomic_load(&dev->streams[i]->completed));
  }
  if (dev->backend->vt->dump) dev->backend->vt->dump(dev->backend, stderr);
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
  return (pr->inbox && !weft_inbox_empty(&pr->dev->loop.inbox)) ||
         atomic_load_explicit(&pr->dev->loop.wake.raised, memory_order_acquire) ||
         weft__completions_owed(pr->dev);
}

/* Parks the scheduler until a command arrives or (|completions|) a worker
 * completes something. */
static void sched_wait(weft_device *dev, bool inbox) {
  /* A deferred backend's streams wake the scheduler when done. */
  if (dev->ms.inflight && dev->backend->vt->arm) dev->backend->vt->arm(dev->backend);
  uint32_t spin = weft__spin_budget(&dev->loop.spin);
  for (uint32_t i = 0; i < spin; i++) {
    if ((inbox && !weft_inbox_empty(&dev->loop.inbox)) || weft__completions_ready(dev)) {
      weft__spin_learn(&dev->loop.spin, spin, true);
      return;
    }
    weft__cpu_relax();
  }
  weft__spin_learn(&dev->loop.spin, spin, false);
  WEFT_HUNT_POINT(40);
  uint32_t k = weft__ec_prepare(&dev->loop.inbox.ec);
  if ((inbox && !weft_inbox_empty(&dev->loop.inbox)) || weft__completions_ready(dev) ||
      weft__signal_take(&dev->loop.wake)) {
    weft__ec_cancel(&dev->loop.inbox.ec);
    return;
  }
  /* A fault stops a deferred backend's completion marks: while its work is
   * outstanding, look for one every few milliseconds. */
  if (dev->backend->deferred && dev->ms.inflight) {
    if (!weft__ec_wait_ns(&dev->loop.inbox.ec, k, UINT64_C(2000000))) weft__check_fault(dev, true);
    return;
  }
  /* Timed: a wake-up that never came costs 100 ms (and a grace park), not
   * a hang; counted only when it was owed (sched_owed), never for a late one. */
  sched_probe pr = {dev, inbox};
  if (weft__ec_wait_owed(&dev->loop.inbox.ec, k, WEFT_HUNT_PARK(UINT64_C(100000000)), sched_owed,
                         &pr) == WEFT_PARK_LOST)
    dev_lost_wakeup(dev, "the scheduler's park timed out with work it was owed a wake-up for");
}

/* ---- the scheduler thread ------------------------------------------------------------------ */

static void *scheduler_thread(weft_device *dev) {
  weft__scheduling = dev;
  uint32_t took = 0; /* commands in the last take */
  for (;;) {
    if (!dev->loop.held_head) {
      weft__retire_all(dev);
      /* A small take while clients stream commands in: every take pulls the
       * inbox's line away from the producers, so give them a moment (a few
       * hundred nanoseconds, not touching the line) to fill a batch. */
      if (took && took < 8)
        for (int i = 0; i < WEFT_TAKE_BACKOFF; i++) weft__cpu_relax();
      took = 0;
      ck_stack_entry_t *tail, *e = weft_inbox_take_tail(&dev->loop.inbox, &tail);
      if (!e) {
        /* Idle: hand every partial batch to its worker before parking. */
        weft__ms_flush_all(dev);
        if (dev->loop.shutdown && dev->ms.inflight == 0) break;
        if (!weft__retire_all(dev)) sched_wait(dev, true);
        continue;
      }
      held_append(dev, e, tail);
    }
    ck_stack_entry_t *e = dev->loop.held_head;
    dev->loop.held_head = e->next;
    if (!dev->loop.held_head) dev->loop.held_tail = NULL;
    e->next = NULL;
    took++;
    dev_process(dev, (cmd *)WEFT_TASK_OF(e));
  }
  weft__cmd_free_flush(dev);
  return NULL;
}

/* ---- the combining scheduler --------------------------------------------------------------- */

static bool role_try(weft_device *dev) {
  return !atomic_load_explicit(&dev->loop.role, memory_order_relaxed) &&
         !atomic_exchange_explicit(&dev->loop.role, 1, memory_order_acquire);
}

/* Lets go of the role (release: the next holder sees the device state),
 * then fences: the holder's inbox load that follows pairs with a producer's
 * push, fence, role load (weft__cmd_submit_chain). The inbox head is a ck
 * load, not a seq_cst atomic, so without the fence the load could be
 * satisfied before the store is visible (C11; x86 only happened not to,
 * the store being an xchg), and both would miss each other: a stranded
 * command. A release store and the fence cost what the seq_cst store did. */
static void role_release(weft_device *dev) {
  atomic_store_explicit(&dev->loop.role, 0, memory_order_release);
  atomic_thread_fence(memory_order_seq_cst);
}

/* Processes every command in the inbox, in order (role held). */
static void process_inbox(weft_device *dev) {
  for (;;) {
    if (!dev->loop.held_head) {
      ck_stack_entry_t *tail, *e = weft_inbox_take_tail(&dev->loop.inbox, &tail);
      if (!e) return;
      held_append(dev, e, tail);
    }
    ck_stack_entry_t *e = dev->loop.held_head;
    dev->loop.held_head = e->next;
    if (!dev->loop.held_head) dev->loop.held_tail = NULL;
    e->next = NULL;
    dev_process(dev, (cmd *)WEFT_TASK_OF(e));
  }
}

/* A client's pass: schedule what is queued, start streams that have nothing
 * to run (a running stream's partial batch waits for more work, or for the
 * scheduler thread when that stream goes idle), retire now and then. */
void weft__combine(weft_device *dev) {
  while (role_try(dev)) {
    weft__scheduling = dev;
    process_inbox(dev);
    WEFT_HUNT_POINT(44);
    /* A batch on a stream still running stays: the pool publishes IDLE,
     * then raises progress, which wakes the combining thread to flush it. */
    for (uint32_t i = 0; i < dev->max_streams; i++)
      if (dev->ms.batches[i].n && weft_stream_is_idle(dev->streams[i])) weft__ms_flush(dev, i);
    if ((++dev->loop.combines & 15u) == 0)
      weft__retire_all(dev);
    else
      weft__cmd_free_flush(dev);
    weft__scheduling = NULL;
    role_release(dev); /* and fence: then the inbox load */
    WEFT_HUNT_POINT(41);
    if (weft_inbox_empty(&dev->loop.inbox)) return;
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
  ck_stack_entry_t *head = ck_pr_load_ptr(&dev->loop.inbox.stack.head);
  if (head && !atomic_load_explicit(&dev->loop.role, memory_order_seq_cst)) {
    bool same = pass == 0 || head == pr->head;
    pr->head = head;
    if (same) return true;
  }
  if (atomic_load_explicit(&dev->loop.wake.raised, memory_order_acquire)) return true;
  if (!role_try(dev)) return false;
  weft__scheduling = dev;
  bool owed = weft__completions_owed(dev);
  for (uint32_t i = 0; i < dev->max_streams && !owed; i++)
    owed = dev->ms.batches[i].n && !dev->backend->deferred && weft_stream_is_idle(dev->streams[i]);
  weft__scheduling = NULL;
  role_release(dev);
  return owed && weft_inbox_empty(&dev->loop.inbox);
}

/* The scheduler thread of a combining device: woken by the pool (a stream
 * left by its thread, a task someone waits for) and by clients that cannot
 * schedule (pool threads, back-pressure), it flushes every partial batch and
 * retires what completed. */
static void *combining_thread(weft_device *dev) {
  for (;;) {
    while (!role_try(dev)) sched_yield();
    weft__scheduling = dev;
    process_inbox(dev);
    weft__retire_all(dev);
    weft__ms_flush_all(dev);
    bool done = dev->loop.shutdown && dev->ms.inflight == 0;
    weft__scheduling = NULL;
    role_release(dev); /* and fence: then the inbox load */
    WEFT_HUNT_POINT(42);
    if (done) break;
    if (!weft_inbox_empty(&dev->loop.inbox)) continue;
    uint32_t k = weft__ec_prepare(&dev->loop.inbox.ec);
    if (weft__signal_take(&dev->loop.wake) ||
        (!weft_inbox_empty(&dev->loop.inbox) && !atomic_load(&dev->loop.role))) {
      weft__ec_cancel(&dev->loop.inbox.ec);
      continue;
    }
    /* Timed, then looks around anyway; counted when it was owed work. */
    combining_probe pr = {dev, NULL};
    if (weft__ec_wait_owed(&dev->loop.inbox.ec, k, WEFT_HUNT_PARK(UINT64_C(100000000)),
                           combining_owed, &pr) == WEFT_PARK_LOST) {
      while (!role_try(dev)) sched_yield();
      weft__scheduling = dev;
      dev_lost_wakeup(dev, "the combining thread's park timed out with work it was owed a "
                           "wake-up for");
      weft__scheduling = NULL;
      role_release(dev);
    }
  }
  return NULL;
}

void *weft__scheduler_main(void *arg) {
  weft_device *dev = arg;
  dev->backend->vt->enter(dev->backend); /* CUDA: storage and lanes need the context here */
  return dev->loop.combining ? combining_thread(dev) : scheduler_thread(dev);
}

/* ---- drain --------------------------------------------------------------------------------- */

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
                         weft__kernel_refusal(dev, c->caller, call_name(c),
                                              "the device is waiting for every running kernel to "
                                              "finish (for another call), this one included"));
  }
}

void weft__dev_drain(weft_device *dev) {
  weft__ms_flush_all(dev);
  refuse_queued_from(dev, dev->loop.held_head);
  while (dev->ms.inflight) {
    if (weft__retire_all(dev)) continue;
    /* What arrived joins the queue, in order, and is looked at. A worker's
     * push raises the wake signal when combining (clients' pushes are quiet
     * then), and wakes the inbox otherwise. */
    ck_stack_entry_t *tail, *e = weft_inbox_take_tail(&dev->loop.inbox, &tail);
    if (e) {
      held_append(dev, e, tail);
      refuse_queued_from(dev, e);
      continue;
    }
    sched_wait(dev, !dev->loop.combining);
  }
}
