/* The host backend: streams run on a pool of threads.
 *
 * A stream is in one of four states. IDLE: no work, in no queue. QUEUED: in
 * the pool's ready queue (at most once). RUNNING: one pool thread owns it and
 * runs its tasks in order. BLOCKED: its next task waits on another stream's
 * position; the thread that completes that position requeues it.
 *
 * Lost wake-ups are excluded by store-then-load pairs, each a store, a
 * seq_cst fence (or seq_cst accesses throughout), then a load, on both sides,
 * so that one side always sees the other's store (docs/architecture.md, "The
 * wake-up protocol"):
 *  - the owner pushes tasks then reads the state; a running thread going
 *    IDLE stores the state then rereads the inbox (the inbox head is a ck
 *    load: both sides need the explicit fence);
 *  - a stream going BLOCKED stores the state then rereads the origin's
 *    cursor; a completing thread stores the cursor then scans for BLOCKED
 *    streams (skipped while no stream is blocked): seq_cst accesses only;
 *  - a push publishes its cell then reads |spinners|; a looking thread
 *    raises |spinners| (and, before parking, the event count's sleepers)
 *    then reads the queue.
 * A thread leaving a stream publishes IDLE before it raises progress, so
 * whoever the raise wakes sees the stream idle.
 * The ready queue is a bounded multi-producer / multi-consumer ring
 * (core/ready_ring.h); it never fills, since a stream is queued at most
 * once. Idle threads park on an event count; a push wakes one. A park
 * is timed: a thread that times out and finds a stream left with work and no
 * thread counts it (weft_host_pool_recovered) and requeues it. */
#include "streams/stream.h"

#include <sched.h>

#include <inttypes.h>
#include <stdio.h>

#include "core/alloc.h"
#include "core/ready_ring.h"

#define READY_CAP    128u /* a power of two above WEFT_MAX_STREAMS */
#define RUN_BUDGET   256u /* tasks a thread runs on one stream before others get a turn */
#define SPIN_LOOKING 128u /* pauses a looking thread spins, when it has a core of its own */
#define WEFT_PARK_NS (100u * 1000u * 1000u) /* an idle thread looks around every 100 ms */

struct weft_host_pool {
  const weft_allocator *alloc;
  weft_signal *progress;
  void *ctx;
  weft_ready_ring ready; /* of weft_stream *, in |cells| */
  _Alignas(64) weft_ready_cell cells[READY_CAP];
  weft_eventcount ready_ec;
  _Atomic uint32_t nblocked;  /* streams BLOCKED (or about to be) */
  _Atomic uint32_t spinners;  /* threads looking for a ready stream before parking */
  _Atomic uint64_t recovered; /* timed-out parks that found a stream stranded (should stay 0) */
  _Atomic uint32_t stop;
  _Atomic uint32_t nstreams;
  _Atomic uint32_t nstarted; /* threads that took an index in |tstate| */
  struct {
    _Alignas(64) _Atomic uint32_t v; /* what each thread does (dumps only; a line each) */
  } tstate[WEFT_MAX_STREAMS];
  weft_stream *streams[WEFT_MAX_STREAMS]; /* published by nstreams (release) */
  pthread_t threads[WEFT_MAX_STREAMS];
  uint32_t nthreads, max_threads;
  uint32_t ncpu;         /* CPUs the process may run on, at create */
  _Atomic uint32_t spin; /* pauses a looking thread spins before parking */
};

/* A pool thread's state, for the dump a lost wake-up prints (relaxed). */
enum { T_LOOKING, T_SPINNING, T_PARKED, T_RUNNING }; /* T_RUNNING | slot << 8 */
static _Thread_local uint32_t thread_index;

static void thread_state(weft_host_pool *p, uint32_t st) {
  atomic_store_explicit(&p->tstate[thread_index].v, st, memory_order_relaxed);
}

/* Raises the owner's progress signal (a hunting build may drop the notify). */
static void raise_progress(weft_host_pool *p) {
#ifdef WEFT_HUNT
  atomic_store_explicit(&p->progress->raised, 1, memory_order_release);
  if (WEFT_HUNT_DROP(WEFT_HUNT_PROGRESS, &p->progress->ec->sleepers)) return;
#endif
  weft__signal_raise(p->progress);
}

static void ready_push(weft_host_pool *p, weft_stream *s) {
  /* A stream is queued at most once, so the ring never fills: a refusal
   * means a consumer is still freeing the cell. */
  while (!weft_ready_ring_push(&p->ready, s)) weft__cpu_relax();
  WEFT_HUNT_POINT(21);
  /* A thread still looking will take it: no wake-up (a system call) needed.
   * Otherwise wake one, even if others run streams: their kernels may take
   * long, or block. Publish, fence, load |spinners|, against a looking
   * thread's spinners++ then queue load: a thread this push does not wake
   * still sees the cell (or, once it gives up looking, the event count's
   * recheck does). */
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&p->spinners, memory_order_relaxed) == 0 &&
      !WEFT_HUNT_DROP(WEFT_HUNT_READY, &p->ready_ec.sleepers))
    weft__ec_notify_one(&p->ready_ec);
}

/* Spins briefly, then parks on the stream's event count. */
static void host_wait_for(weft_stream *s, uint64_t seq) {
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

/* Requeues the streams blocked on |o| at or below |done|. */
static void wake_blocked(weft_host_pool *p, weft_stream *o, uint64_t done) {
  uint32_t n = atomic_load_explicit(&p->nstreams, memory_order_acquire);
  for (uint32_t i = 0; i < n; i++) {
    weft_stream *x = p->streams[i];
    if (atomic_load_explicit(&x->state, memory_order_seq_cst) != WEFT_STREAM_BLOCKED) continue;
    if (atomic_load_explicit(&x->block_on, memory_order_relaxed) != o ||
        atomic_load_explicit(&x->block_seq, memory_order_relaxed) > done)
      continue;
    uint32_t e = WEFT_STREAM_BLOCKED;
    if (atomic_compare_exchange_strong(&x->state, &e, WEFT_STREAM_QUEUED)) {
      atomic_fetch_sub_explicit(&p->nblocked, 1, memory_order_relaxed);
      ready_push(p, x);
    }
  }
}

/* The first wait of |t| not yet satisfied, or NULL. */
static const weft_stream_wait *unmet_wait(const weft_task *t) {
  for (uint32_t i = 0; i < t->nwaits; i++)
    if (atomic_load_explicit(&t->waits[i].stream->completed, memory_order_acquire) <
        t->waits[i].seq)
      return &t->waits[i];
  return NULL;
}

/* Runs |s| (this thread owns it) until it is out of work, blocked, or has
 * used its budget. */
static void run_stream(weft_host_pool *p, weft_stream *s) {
  atomic_store_explicit(&s->state, WEFT_STREAM_RUNNING, memory_order_relaxed);
  thread_state(p, T_RUNNING | s->slot << 8);
  uint64_t last = 0; /* the end of the task run just before (stamping: weft_stream_run_task) */
  for (uint32_t budget = RUN_BUDGET;;) {
    if (!s->local) {
      last = 0; /* a refill: the next task's start is read, not assumed */
      s->local = weft_inbox_take(&s->inbox);
      if (!s->local) {
        /* Out of work: publish IDLE, then raise progress (the owner retires
         * the batch). In that order: a combining client's pass that saw the
         * stream RUNNING left its partial batch to whoever the raise wakes,
         * and that pass must come after the IDLE; raised first, the
         * scheduler's pass could run before the client's and nobody would
         * flush the batch until a timed park. */
        atomic_store_explicit(&s->state, WEFT_STREAM_IDLE, memory_order_seq_cst);
        WEFT_HUNT_POINT(22);
        raise_progress(p);
        WEFT_HUNT_POINT(23);
        /* Store IDLE, fence, load the inbox, against the owner's push,
         * fence, load the state (host_submit): one of the two sees
         * the other's store. The head is a ck load, so the pair needs the
         * fence to hold in C11, not only on x86. */
        atomic_thread_fence(memory_order_seq_cst);
        if (weft_inbox_empty(&s->inbox)) return;
        uint32_t e = WEFT_STREAM_IDLE;
        if (!atomic_compare_exchange_strong(&s->state, &e, WEFT_STREAM_RUNNING))
          return; /* queued */
        continue;
      }
    }
    weft_task *t = WEFT_TASK_OF(s->local);
    const weft_stream_wait *w = unmet_wait(t);
    if (w) {
      weft_stream *o = w->stream;
      uint64_t need = w->seq;
      atomic_store_explicit(&s->block_on, o, memory_order_relaxed);
      atomic_store_explicit(&s->block_seq, need, memory_order_relaxed);
      atomic_fetch_add_explicit(&p->nblocked, 1, memory_order_seq_cst);
      /* Store BLOCKED, load the origin's cursor, against the completer's
       * cursor store, then nblocked and state loads (all seq_cst): either
       * this load sees the position reached, or the completer sees BLOCKED
       * and requeues the stream. */
      atomic_store_explicit(&s->state, WEFT_STREAM_BLOCKED, memory_order_seq_cst);
      WEFT_HUNT_POINT(24);
      if (atomic_load_explicit(&o->completed, memory_order_seq_cst) < need) return;
      uint32_t e = WEFT_STREAM_BLOCKED;
      if (!atomic_compare_exchange_strong(&s->state, &e, WEFT_STREAM_RUNNING))
        return; /* requeued */
      atomic_fetch_sub_explicit(&p->nblocked, 1, memory_order_relaxed);
      continue;
    }
    if (budget-- == 0) {
      raise_progress(p); /* the owner retires what ran, even under load */
      /* Fairness: let the other ready streams run. With none waiting, keep
       * the stream: a chain stays on one thread (and its caches) instead of
       * hopping to another every RUN_BUDGET tasks. */
      budget = RUN_BUDGET;
      if (!weft_ready_ring_empty(&p->ready)) {
        atomic_store_explicit(&s->state, WEFT_STREAM_QUEUED, memory_order_relaxed);
        ready_push(p, s);
        return;
      }
    }
    s->local = s->local->next;
    uint64_t seq = t->seq; /* the task belongs to the owner once completed */
    bool notify = t->notify;
    weft_stream_run_task(s, t, &last);
    /* Waiters and the owner see everything the task wrote. */
    atomic_store_explicit(&s->completed, seq, memory_order_seq_cst);
    WEFT_HUNT_POINT(25);
    weft__ec_notify(&s->done_ec);
    if (notify) raise_progress(p);
    WEFT_HUNT_POINT(26);
    if (atomic_load_explicit(&p->nblocked, memory_order_seq_cst)) wake_blocked(p, s, seq);
  }
}

/* True when |x| has work and no thread: idle with queued tasks, or blocked
 * on a position its origin has reached. */
static bool stream_stranded(weft_stream *x, uint32_t st) {
  if (st == WEFT_STREAM_IDLE) return !weft_inbox_empty(&x->inbox);
  if (st == WEFT_STREAM_BLOCKED)
    return atomic_load_explicit(&atomic_load(&x->block_on)->completed, memory_order_seq_cst) >=
           atomic_load(&x->block_seq);
  return false;
}

/* Defense in depth, after a park timed out: requeues any stream left with
 * work and no thread. The protocol above should leave none; the park that
 * found one counts it (pool_owed). */
static void rescue(weft_host_pool *p) {
  uint32_t n = atomic_load_explicit(&p->nstreams, memory_order_acquire);
  for (uint32_t i = 0; i < n; i++) {
    weft_stream *x = p->streams[i];
    uint32_t st = atomic_load_explicit(&x->state, memory_order_seq_cst), e = st;
    if (!stream_stranded(x, st) ||
        !atomic_compare_exchange_strong(&x->state, &e, WEFT_STREAM_QUEUED))
      continue;
    if (st == WEFT_STREAM_BLOCKED) atomic_fetch_sub_explicit(&p->nblocked, 1, memory_order_relaxed);
    ready_push(p, x);
  }
}

uint64_t weft_host_pool_recovered(const weft_host_pool *p) {
  return p ? atomic_load_explicit(&((weft_host_pool *)p)->recovered, memory_order_relaxed) : 0;
}

static const char *state_name(uint32_t st) {
  static const char *const names[] = {"IDLE", "QUEUED", "RUNNING", "BLOCKED"};
  return st < 4 ? names[st] : "?";
}

void weft_host_pool_dump(const weft_host_pool *cp, FILE *f) {
  weft_host_pool *p = (weft_host_pool *)cp;
  if (!p) return;
  uint64_t enq = weft_ready_ring_enqueued(&p->ready), deq = weft_ready_ring_dequeued(&p->ready);
  fprintf(f,
          "  pool: ready queue enq %" PRIu64 " deq %" PRIu64 " (%" PRIu64 " queued), spinners %u, "
          "parked %u (epoch %u), blocked %u, recovered %" PRIu64 ", stop %u\n",
          enq, deq, enq - deq, atomic_load(&p->spinners), atomic_load(&p->ready_ec.sleepers),
          atomic_load(&p->ready_ec.epoch), atomic_load(&p->nblocked), atomic_load(&p->recovered),
          atomic_load(&p->stop));
  uint32_t nt = atomic_load(&p->nstarted);
  for (uint32_t i = 0; i < nt && i < WEFT_MAX_STREAMS; i++) {
    uint32_t t = atomic_load_explicit(&p->tstate[i].v, memory_order_relaxed);
    static const char *const tn[] = {"looking", "spinning", "parked", "running"};
    if ((t & 0xffu) == T_RUNNING)
      fprintf(f, "  pool thread %u: running stream slot %u\n", i, t >> 8);
    else
      fprintf(f, "  pool thread %u: %s\n", i, (t & 0xffu) < 4 ? tn[t & 0xffu] : "?");
  }
  uint32_t n = atomic_load_explicit(&p->nstreams, memory_order_acquire);
  for (uint32_t i = 0; i < n; i++) {
    weft_stream *x = p->streams[i];
    uint32_t st = atomic_load(&x->state);
    fprintf(f, "  stream slot %u: %s, completed %" PRIu64 ", inbox %s", x->slot, state_name(st),
            atomic_load(&x->completed), weft_inbox_empty(&x->inbox) ? "empty" : "non-empty");
    if (st == WEFT_STREAM_BLOCKED) {
      weft_stream *o = atomic_load(&x->block_on);
      fprintf(f, ", waits for slot %u position %" PRIu64 " (at %" PRIu64 ")", o->slot,
              atomic_load(&x->block_seq), atomic_load(&o->completed));
    }
    fputc('\n', f);
  }
}

/* What a timed-out park found: a stream queued that no thread took (every
 * thread parked), and streams stranded (stream_stranded). Pass 1 (after the
 * grace park) keeps only what is still there: the same queue position
 * untaken, the same streams still stranded. */
typedef struct pool_probe {
  weft_host_pool *p;
  uint64_t deq;
  bool ready;
  uint64_t stranded; /* a bit per stream index */
} pool_probe;

static bool pool_owed(void *arg, int pass) {
  pool_probe *pr = arg;
  weft_host_pool *p = pr->p;
  uint64_t deq = weft_ready_ring_dequeued(&p->ready), mask = 0;
  bool ready = !weft_ready_ring_empty(&p->ready);
  uint32_t n = atomic_load_explicit(&p->nstreams, memory_order_acquire);
  for (uint32_t i = 0; i < n; i++) {
    weft_stream *x = p->streams[i];
    if (stream_stranded(x, atomic_load_explicit(&x->state, memory_order_seq_cst)))
      mask |= UINT64_C(1) << i;
  }
  if (pass == 0) {
    pr->deq = deq, pr->ready = ready, pr->stranded = mask;
  } else {
    pr->ready = pr->ready && ready && deq == pr->deq;
    pr->stranded &= mask;
  }
  return pr->ready || pr->stranded;
}

static void lost_wakeup(weft_host_pool *p, const pool_probe *pr) {
  atomic_fetch_add_explicit(&p->recovered, 1, memory_order_relaxed);
  char what[160];
  snprintf(what, sizeof(what),
           "a host pool thread's park timed out with %s%s (stranded slots mask 0x%" PRIx64 ")",
           pr->ready ? "a stream queued and every thread parked" : "",
           pr->ready && pr->stranded ? ", and " : (pr->stranded ? "streams left with work" : ""),
           pr->stranded);
  if (weft__wakeup_lost_report(what)) weft_host_pool_dump(p, stderr);
}

static void *pool_main(void *arg) {
  weft_host_pool *p = arg;
  weft_spin learn;
  weft__spin_init(&learn, SPIN_LOOKING);
  worker_ctx = p->ctx;
  thread_index = atomic_fetch_add_explicit(&p->nstarted, 1, memory_order_relaxed);
  for (;;) {
    /* NULL also when the next cell's producer has not published yet: it
     * wakes a thread once it has. */
    weft_stream *s = weft_ready_ring_pop(&p->ready);
    if (s) {
      /* A push that found this thread still looking woke nobody: if more
       * streams wait, pass the wake-up on, so none waits behind this one
       * (whose kernels may block). */
      WEFT_HUNT_POINT(27);
      if (!weft_ready_ring_empty(&p->ready) &&
          !WEFT_HUNT_DROP(WEFT_HUNT_READY, &p->ready_ec.sleepers))
        weft__ec_notify_one(&p->ready_ec);
      run_stream(p, s);
      thread_state(p, T_LOOKING);
      continue;
    }
    if (atomic_load_explicit(&p->stop, memory_order_acquire)) break;
    bool found = false;
    thread_state(p, T_SPINNING);
    atomic_fetch_add_explicit(&p->spinners, 1, memory_order_seq_cst);
    /* The pool's cap (0 when oversubscribed), then what spinning has paid. */
    learn.max = atomic_load_explicit(&p->spin, memory_order_relaxed);
    uint32_t spin = weft__spin_budget(&learn);
    for (uint32_t i = 0; i < spin && !found; i++) {
      found = !weft_ready_ring_empty(&p->ready);
      weft__cpu_relax();
      WEFT_HUNT_POINT(28);
    }
    atomic_fetch_sub_explicit(&p->spinners, 1, memory_order_seq_cst);
    thread_state(p, T_LOOKING);
    weft__spin_learn(&learn, spin, found);
    if (found) continue;
    WEFT_HUNT_POINT(29);
    uint32_t k = weft__ec_prepare(&p->ready_ec);
    if (!weft_ready_ring_empty(&p->ready) || atomic_load_explicit(&p->stop, memory_order_acquire)) {
      weft__ec_cancel(&p->ready_ec);
      continue;
    }
    thread_state(p, T_PARKED);
    pool_probe pr = {.p = p};
    weft_park r = weft__ec_wait_owed(&p->ready_ec, k, WEFT_HUNT_PARK(WEFT_PARK_NS), pool_owed, &pr);
    thread_state(p, T_LOOKING);
    if (r == WEFT_PARK_WOKEN) continue;
    if (r == WEFT_PARK_LOST) lost_wakeup(p, &pr);
    rescue(p);
  }
  return NULL;
}

weft_status weft_host_pool_create(const weft_allocator *alloc, weft_signal *progress, void *ctx,
                                  uint32_t max_threads, weft_host_pool **out) {
  weft_host_pool *p = weft__calloc(alloc, sizeof(*p), WEFT_CACHELINE);
  if (!p) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*p), "the stream pool");
  p->alloc = alloc;
  p->progress = progress;
  p->ctx = ctx;
  p->max_threads = max_threads ? max_threads : WEFT_MAX_STREAMS;
  cpu_set_t cpus;
  p->ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? (uint32_t)CPU_COUNT(&cpus) : 1u;
  weft_status st = weft_ready_ring_init(&p->ready, p->cells, READY_CAP);
  if (st) {
    weft__free(alloc, p, sizeof(*p), WEFT_CACHELINE);
    return st;
  }
  *out = p;
  return NULL;
}

static void host_submit(weft_stream *s, weft_task *first, weft_task *last) {
  weft_inbox_push_chain(&s->inbox, &first->link, &last->link);
  WEFT_HUNT_POINT(30);
  /* Push, fence, load the state, against run_stream's IDLE store, fence,
   * inbox load: a thread going idle sees these tasks, or this load sees
   * IDLE and queues the stream. */
  atomic_thread_fence(memory_order_seq_cst);
  uint32_t e = WEFT_STREAM_IDLE;
  if (atomic_load_explicit(&s->state, memory_order_seq_cst) == WEFT_STREAM_IDLE &&
      atomic_compare_exchange_strong(&s->state, &e, WEFT_STREAM_QUEUED))
    ready_push(s->pool, s);
}

static bool host_is_idle(weft_stream *s) {
  return atomic_load_explicit(&s->state, memory_order_acquire) == WEFT_STREAM_IDLE;
}

static const weft_stream_ops host_ops = {
    .submit = host_submit, .wait_for = host_wait_for, .is_idle = host_is_idle};

weft_status weft_stream_host_create(weft_host_pool *p, uint32_t slot, weft_stream **out) {
  uint32_t n = atomic_load_explicit(&p->nstreams, memory_order_relaxed);
  if (n >= WEFT_MAX_STREAMS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "at most %u streams", WEFT_MAX_STREAMS);
  weft_stream *s = weft__calloc(p->alloc, sizeof(*s), WEFT_CACHELINE);
  if (!s) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*s), "stream %u", slot);
  s->slot = slot;
  s->pool = p;
  s->ops = &host_ops;
  weft_inbox_init(&s->inbox);
  if (p->nthreads < p->max_threads) {
    int rc = pthread_create(&p->threads[p->nthreads], NULL, pool_main, p);
    if (rc != 0) {
      weft__free(p->alloc, s, sizeof(*s), WEFT_CACHELINE);
      return weft_error_make(WEFT_ERR_GENERIC, "cannot start a thread for stream %u (error %d)",
                             slot, rc);
    }
    pthread_setname_np(p->threads[p->nthreads], "weft-pool"); /* before anyone can look */
    p->nthreads++;
    /* Spin only while every pool thread, the scheduler and a client can each
     * have a core: on an oversubscribed machine a spinning thread takes the
     * CPU from the one that would produce what it waits for. */
    atomic_store_explicit(&p->spin, p->nthreads + 2 <= p->ncpu ? SPIN_LOOKING : 0,
                          memory_order_relaxed);
  }
  p->streams[n] = s;
  atomic_store_explicit(&p->nstreams, n + 1, memory_order_release);
  *out = s;
  return NULL;
}

void weft_host_pool_destroy(weft_host_pool *p) {
  if (!p) return;
  /* Every stream is idle: the owner retired all its work. Threads leave once
   * the ready queue is empty. */
  atomic_store_explicit(&p->stop, 1, memory_order_release);
  weft__ec_notify(&p->ready_ec);
  for (uint32_t i = 0; i < p->nthreads; i++) pthread_join(p->threads[i], NULL);
  uint32_t n = atomic_load_explicit(&p->nstreams, memory_order_acquire);
  for (uint32_t i = 0; i < n; i++)
    weft__free(p->alloc, p->streams[i], sizeof(weft_stream), WEFT_CACHELINE);
  weft__free(p->alloc, p, sizeof(*p), WEFT_CACHELINE);
}
