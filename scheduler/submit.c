/* The client side of the queue: back-pressure credits and waiting for
 * room, the per-thread caches of credits and commands, new commands, and
 * submission to the scheduler's inbox. A combining client runs the
 * scheduler itself when it can take the role (loop.c). */
#include "scheduler/submit.h"

#include <pthread.h>

#include "core/hunt.h"
#include "core/log.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/loop.h"

/* Back-pressure is per stream: a command on a stream counts against that
 * stream slot's budget of max_pending commands, one on no stream against
 * the device's own. A stream stalled behind a blocked kernel fills only its
 * own budget, so clients of unrelated streams keep going. Only clients
 * wait: the scheduler thread and the device's workers retire commands, so
 * making them wait could stall the device.
 *
 * Credits: a budget's count |pending| covers its commands not yet retired
 * and the credits client threads hold for commands they have yet to make.
 * A thread takes credits with one CAS that never lifts the count past
 * max_pending: a block of up to weft_tcache.block when it holds one of the
 * device's WEFT_TC_SEATS seats, one otherwise. So a budget's commands never
 * exceed max_pending (the device's own threads, which never wait, excepted:
 * one each past it), and the unused credits of all seated threads together
 * stay below half of it (block <= max_pending / (2 * WEFT_TC_SEATS)): a
 * client that finds the budget full always has commands ahead of it that
 * retire, even when every other thread holding credits has gone idle. */
typedef struct room_arg {
  weft_device *dev;
  uint32_t budget;
} room_arg;

static bool room_for_one(void *arg) {
  const room_arg *r = arg;
  return atomic_load_explicit(&r->dev->cmds.pending[r->budget].n, memory_order_acquire) <
         r->dev->cmds.max_pending;
}

/* Waits (spin, then park on the room event count, which every retirement
 * pass signals) until |ready|. Combining clients first help retire; a pool
 * thread never takes the scheduler role (it could end up waiting for the
 * kernel it runs). */
void weft__wait_room(weft_device *dev, bool (*ready)(void *), void *arg) {
  if (ready(arg)) return;
  if (dev->loop.combining && weft_stream_worker_ctx() != dev) {
    weft__combine(dev);
    weft__signal_raise(&dev->loop.wake);
  }
  for (int i = 0; i < 64; i++) {
    if (ready(arg)) return;
    weft__cpu_relax();
  }
  while (!ready(arg)) {
    WEFT_HUNT_POINT(46);
    uint32_t k = weft__ec_prepare(&dev->cmds.room);
    if (ready(arg)) {
      weft__ec_cancel(&dev->cmds.room);
      return;
    }
    weft__ec_wait(&dev->cmds.room, k);
  }
}

/* pending_peak: raised when a take lifts a budget's count past it (once
 * per block, not per launch; a load of a line that stops changing once the
 * peak is reached). */
static void peak_raise(weft_device *dev, uint64_t n) {
  uint64_t peak = atomic_load_explicit(&dev->cmds.pending_peak, memory_order_relaxed);
  while (n > peak &&
         !atomic_compare_exchange_weak_explicit(&dev->cmds.pending_peak, &peak, n,
                                                memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* Up to |want| credits on |budget| while the count stays within max_pending;
 * 0 when it is full. Lock-free: a CAS fails only because another take or a
 * retirement changed the count. */
static uint64_t credits_take(weft_device *dev, uint32_t budget, uint64_t want) {
  _Atomic uint64_t *p = &dev->cmds.pending[budget].n;
  uint64_t max = dev->cmds.max_pending, n = atomic_load_explicit(p, memory_order_relaxed);
  while (n < max) {
    uint64_t k = max - n < want ? max - n : want;
    if (atomic_compare_exchange_weak_explicit(p, &n, n + k, memory_order_relaxed,
                                              memory_order_relaxed)) {
      peak_raise(dev, n + k);
      return k;
    }
  }
  return 0;
}

/* ---- thread caches ------------------------------------------------------------------------ */

/* A thread caches for WEFT_TC_DEVICES devices at once; a further device
 * takes over the slot used longest ago (round robin), handing its credits
 * and commands back. Binding, unbinding and every device's list of caches
 * are under one process-wide lock: it is taken when a thread first uses a
 * device, switches slots, exits, and when a device closes, never on the
 * way of a launch that finds its cache. */
_Thread_local weft_tc_slots weft__tc_tls;
static pthread_mutex_t tc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t tc_once = PTHREAD_ONCE_INIT;
static pthread_key_t tc_key;
static bool tc_key_ok;

/* Under tc_lock: |tc|'s credits and commands go back to its device, and it
 * leaves the device's list. The device is alive: close unbinds every cache
 * of its own (under this lock) before it frees anything. */
static void tc_unbind_locked(weft_tcache *tc) {
  weft_device *dev = atomic_load_explicit(&tc->dev, memory_order_relaxed);
  if (!dev) return;
  weft__cmd_cache_return(dev, tc);
  bool returned = false;
  for (uint32_t b = 0; b <= WEFT_MAX_STREAMS; b++) {
    if (!tc->credits[b]) continue;
    atomic_fetch_sub_explicit(&dev->cmds.pending[b].n, tc->credits[b], memory_order_seq_cst);
    tc->credits[b] = 0;
    returned = true;
  }
  if (returned) weft__ec_notify(&dev->cmds.room);
  if (tc->seated) dev->cmds.seats--;
  tc->seated = false;
  for (weft_tcache **p = &dev->cmds.caches; *p; p = &(*p)->next)
    if (*p == tc) {
      *p = tc->next;
      break;
    }
  tc->next = NULL;
  atomic_store_explicit(&tc->dev, NULL, memory_order_relaxed);
}

/* A thread's exit: every cache it holds goes back (glibc runs key
 * destructors before it frees the thread's TLS). */
static void tc_thread_exit(void *arg) {
  weft_tc_slots *s = arg;
  pthread_mutex_lock(&tc_lock);
  for (uint32_t i = 0; i < WEFT_TC_DEVICES; i++) tc_unbind_locked(&s->tc[i]);
  pthread_mutex_unlock(&tc_lock);
  s->keyed = false; /* a later destructor's call into weft arms it again */
}

static void tc_key_make(void) {
  tc_key_ok = pthread_key_create(&tc_key, tc_thread_exit) == 0;
}

/* The calling thread's cache for |dev| (bound now if it had none), or NULL
 * (no thread-exit hook could be armed: the thread goes uncached). */
static __attribute__((noinline)) weft_tcache *tc_bind(weft_device *dev) {
  weft_tc_slots *s = &weft__tc_tls;
  if (!s->keyed) {
    pthread_once(&tc_once, tc_key_make);
    if (!tc_key_ok || pthread_setspecific(tc_key, s) != 0) return NULL;
    s->keyed = true;
  }
  pthread_mutex_lock(&tc_lock);
  weft_tcache *tc = NULL;
  for (uint32_t i = 0; i < WEFT_TC_DEVICES && !tc; i++)
    if (!atomic_load_explicit(&s->tc[i].dev, memory_order_relaxed)) tc = &s->tc[i];
  if (!tc) {
    tc = &s->tc[s->next_victim];
    s->next_victim = (s->next_victim + 1) % WEFT_TC_DEVICES;
    tc_unbind_locked(tc);
  }
  /* A pool thread of the device takes its credits one at a time. */
  tc->seated = dev->cmds.seats < WEFT_TC_SEATS && weft_stream_worker_ctx() != dev;
  if (tc->seated) dev->cmds.seats++;
  uint64_t block = dev->cmds.max_pending / (2 * WEFT_TC_SEATS);
  tc->block = !tc->seated || block < 1 ? 1
              : block > WEFT_TC_BLOCK  ? WEFT_TC_BLOCK
                                       : (uint16_t)block;
  tc->next = dev->cmds.caches;
  dev->cmds.caches = tc;
  atomic_store_explicit(&tc->dev, dev, memory_order_relaxed);
  pthread_mutex_unlock(&tc_lock);
  return tc;
}

/* The calling thread's cache for |dev| (the caller is inside it). */
static inline weft_tcache *tc_get(weft_device *dev) {
  weft_tcache *tc = weft__tcache_find(dev);
  return tc ? tc : tc_bind(dev);
}

void weft__tcache_close(weft_device *dev) {
  pthread_mutex_lock(&tc_lock);
  while (dev->cmds.caches) tc_unbind_locked(dev->cmds.caches);
  pthread_mutex_unlock(&tc_lock);
}

/* ---- taking a command --------------------------------------------------------------------- */

/* One credit on |budget| when the calling thread's cache has none: a new
 * block, waiting for room. A pool thread of the device never waits (it
 * takes one, room or not). false: no room, and |wait| is false. The cache
 * is looked up again after a wait (a combining client runs the scheduler
 * meanwhile, which may call into other devices and reuse the slot). */
static __attribute__((noinline)) bool credit_refill(weft_device *dev, weft_tcache **tcp,
                                                    uint32_t budget, bool wait) {
  if (weft_stream_worker_ctx() == dev) {
    peak_raise(
        dev, atomic_fetch_add_explicit(&dev->cmds.pending[budget].n, 1, memory_order_relaxed) + 1);
    return true;
  }
  weft_tcache *tc = *tcp;
  bool waited = false;
  for (;;) {
    uint64_t k = credits_take(dev, budget, tc ? tc->block : 1);
    if (k) {
      if (tc) tc->credits[budget] = (uint16_t)(k - 1);
      return true;
    }
    if (!wait) return false;
    if (!waited) {
      atomic_fetch_add_explicit(&dev->cmds.backpressure_waits, 1, memory_order_relaxed);
      if (budget < WEFT_MAX_STREAMS)
        WEFT_LOGF(WEFT_LOG_DEBUG,
                  "back-pressure: a client waits for stream slot %u to retire "
                  "commands",
                  budget);
      else
        WEFT_LOGF(WEFT_LOG_DEBUG, "back-pressure: a client waits for commands on no stream to "
                                  "retire");
    }
    waited = true;
    room_arg r = {dev, budget};
    weft__wait_room(dev, room_for_one, &r);
    *tcp = tc = tc_get(dev);
  }
}

/* Commands first: a refill that fails leaves the cache no credits beyond
 * the block less one it may hold at rest (weft__cmd_take_cached's caller
 * spends one at once). */
bool weft__tcache_refill(weft_device *dev, weft_tcache *tc, uint32_t budget, uint32_t k) {
  if (!tc->cmds[k] && !weft__cmd_cache_fill(dev, tc, k)) return false; /* the pool grows */
  if (tc->credits[budget]) return true;
  if (!tc->seated) return false; /* one credit at a time, or a pool thread: weft__cmd_take */
  uint64_t n = credits_take(dev, budget, tc->block);
  if (!n) return false; /* no room: weft__cmd_take waits for it */
  tc->credits[budget] = (uint16_t)n;
  return true;
}

/* The command goes back to the cache, its credit to the budget: a seated
 * cache then still holds at most block - 1 unused credits, so idle threads'
 * credits never fill a budget that has nothing in flight to free it. */
void weft__cmd_untake_cached(weft_device *dev, weft_tcache *tc, cmd *c, uint32_t k) {
  uint32_t budget = c->budget;
  c->task.link.next = tc->cmds[k];
  tc->cmds[k] = &c->task.link;
  tc->ncmds[k]++;
  weft__budget_release(dev, budget, 1);
}

/* The scheduler (a thread that runs past close's unbinding) never waits
 * and caches nothing: one credit, room or not. */
static __attribute__((noinline)) cmd *take_scheduling(weft_device *dev, cmd_kind kind, size_t extra,
                                                      uint32_t budget) {
  peak_raise(dev,
             atomic_fetch_add_explicit(&dev->cmds.pending[budget].n, 1, memory_order_relaxed) + 1);
  cmd *c = weft__cmd_alloc(dev, NULL, kind, extra, budget);
  if (!c) weft__budget_release(dev, budget, 1);
  return c;
}

cmd *weft__cmd_take(weft_device *dev, cmd_kind kind, size_t extra, uint32_t budget, bool wait) {
  if (weft__dev_scheduling() == dev) return take_scheduling(dev, kind, extra, budget);
  weft_tcache *tc = tc_get(dev);
  if (tc && tc->credits[budget])
    tc->credits[budget]--;
  else if (!credit_refill(dev, &tc, budget, wait))
    return NULL;
  cmd *c = weft__cmd_alloc(dev, tc, kind, extra, budget);
  if (!c) { /* the credit goes back */
    if (tc)
      tc->credits[budget]++;
    else
      weft__budget_release(dev, budget, 1);
  }
  return c;
}

cmd *weft__cmd_new(weft_device *dev, cmd_kind kind, size_t extra) {
  return weft__cmd_take(dev, kind, extra, WEFT_MAX_STREAMS, true);
}

cmd *weft__cmd_new_on(weft_device *dev, cmd_kind kind, size_t extra, weft_stream_id stream) {
  return weft__cmd_take(dev, kind, extra, weft__slot_of(dev, stream), true);
}

void weft__cmd_submit_chain(weft_device *dev, cmd *first, cmd *last) {
  if (!dev->loop.combining) {
    weft_inbox_push_chain(&dev->loop.inbox, &first->task.link, &last->task.link);
    return;
  }
  weft_inbox_push_chain_quiet(&dev->loop.inbox, &first->task.link, &last->task.link);
  weft__cmd_combine_pushed(dev);
}

void weft__cmd_combine_pushed(weft_device *dev) {
  if (weft__dev_scheduling() == dev) return; /* the holder's own loop takes it */
  if (weft_stream_worker_ctx() == dev) {     /* a pool thread never schedules: it could */
    weft__signal_raise(&dev->loop.wake);     /* end up waiting for itself */
    return;
  }
  WEFT_HUNT_POINT(43);
  /* Push, fence, load the role (role_try), against the holder's release,
   * fence, inbox load (combine, combining_thread): the holder sees this
   * command, or this thread sees the role free and takes it. */
  atomic_thread_fence(memory_order_seq_cst);
  weft__combine(dev);
}

weft_status weft__cmd_call(weft_device *dev, cmd *c) {
  weft_token tok;
  weft__token_init(&tok);
  c->token = &tok;
  c->caller = weft__running_kernel(dev);
  weft__cmd_submit(dev, c);
  return weft__token_wait(&tok);
}
