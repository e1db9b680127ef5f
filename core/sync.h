/* Parking and hand-off primitives on Linux futexes: nothing here takes a
 * lock. A waiter spins briefly (cheap when the answer is imminent), then
 * parks in the kernel; a waker issues a futex wake only when someone parks.
 *
 * TSan: these are C11 atomics, which TSan sees; ck hand-offs are annotated in
 * inbox.h and freelist.h. */
#ifndef WEFT_CORE_SYNC_H
#define WEFT_CORE_SYNC_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/hunt.h"

#if defined(__SANITIZE_THREAD__)
#define WEFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif

#ifdef WEFT_TSAN
void __tsan_acquire(void *addr);
void __tsan_release(void *addr);
#define WEFT_TSAN_ACQUIRE(p) __tsan_acquire((void *)(p))
#define WEFT_TSAN_RELEASE(p) __tsan_release((void *)(p))
#else
#define WEFT_TSAN_ACQUIRE(p) ((void)0)
#define WEFT_TSAN_RELEASE(p) ((void)0)
#endif

/* Blocks while *word == expected (spurious returns allowed). */
void weft__futex_wait(_Atomic uint32_t *word, uint32_t expected);
/* Returns how many threads it woke. */
int weft__futex_wake(_Atomic uint32_t *word, int count);
/* As weft__futex_wait, for at most |ns|; false when it timed out. */
bool weft__futex_wait_ns(_Atomic uint32_t *word, uint32_t expected, uint64_t ns);
/* The futex system calls this process made so far (waits, timed or not; wakes). */
void weft__futex_counts(uint64_t *waits, uint64_t *wakes);
/* One CPU relax hint. */
void weft__cpu_relax(void);

/* An event count: lets a consumer park until "something changed" without a
 * lost wake-up. Consumer: k = prepare(); if (!condition) wait(k); else cancel().
 * Producer: make the condition true, then notify().
 *
 * |epoch|'s bit 0 is the PARKED bit: a consumer sets it in prepare; the first
 * notifier after it clears it (bumping the count in bits 1..31) and makes the
 * one wake system call; later notifiers see it clear and make none, until a
 * consumer prepares again. (The old design woke whenever a sleeper count was
 * non-zero, and only the sleeper decremented it once back on a CPU: every
 * notify in between made a system call.) |sleepers| counts consumers between
 * prepare and their return, for dumps and the hunting build; no notifier
 * reads it to decide.
 *
 * Why no wake-up is lost (each consumer's k is the epoch after its own
 * fetch_or, bit set):
 *  - Consumer: C1 fetch_or(PARKED) (seq_cst RMW), C2 seq_cst fence, C3 load
 *    the condition, C4 futex_wait(epoch, k): sleeps only if epoch == k still.
 *  - Producer: P1 store the condition, P2 seq_cst fence, P3 load epoch, P4 if
 *    PARKED: CAS it to (e + 1) (bit clear, count + 1), P5 futex_wake.
 *  The two fences order C1 before C3 and P1 before P3, so (store buffering is
 *  excluded between seq_cst fences) either C3 sees P1 (the consumer cancels),
 *  or P3 reads C1's write or a later one in epoch's modification order. Every
 *  later write is a bump, or a fetch_or that changes nothing while the bit is
 *  set, so P3 reads k itself (PARKED: P4/P5 move the epoch off k and wake, so
 *  C4 returns whether it entered the kernel before P5 or after P4) or a value
 *  some notifier already moved off k (C4 does not sleep). The count only
 *  repeats after 2^31 notifications inside one consumer's prepare..wait.
 *  A cancelled consumer leaves the bit set: the next notifier pays one
 *  needless wake, bounded by one per prepare. */
typedef struct weft_eventcount {
  _Atomic uint32_t epoch; /* bit 0: PARKED; the futex word */
  _Atomic uint32_t sleepers;
} weft_eventcount;

#define WEFT_EC_PARKED 1u

static inline uint32_t weft__ec_prepare(weft_eventcount *ec) {
  atomic_fetch_add_explicit(&ec->sleepers, 1, memory_order_relaxed);
  WEFT_HUNT_POINT(1);
  uint32_t k =
      atomic_fetch_or_explicit(&ec->epoch, WEFT_EC_PARKED, memory_order_seq_cst) | WEFT_EC_PARKED;
  /* C2: orders the RMW before the caller's recheck of its condition. */
  atomic_thread_fence(memory_order_seq_cst);
  WEFT_HUNT_POINT(2);
  return k;
}
static inline void weft__ec_cancel(weft_eventcount *ec) {
  atomic_fetch_sub_explicit(&ec->sleepers, 1, memory_order_relaxed);
}
static inline void weft__ec_wait(weft_eventcount *ec, uint32_t k) {
  WEFT_HUNT_POINT(3);
  weft__futex_wait(&ec->epoch, k);
  atomic_fetch_sub_explicit(&ec->sleepers, 1, memory_order_relaxed);
}
/* As weft__ec_wait, for at most |ns|; false when it timed out. A parked
 * thread that owes the device progress (the scheduler, the host pool) waits
 * this way: a wake-up that never comes costs it |ns|, never a hang. */
static inline bool weft__ec_wait_ns(weft_eventcount *ec, uint32_t k, uint64_t ns) {
  WEFT_HUNT_POINT(3);
  bool woken = weft__futex_wait_ns(&ec->epoch, k, ns);
  atomic_fetch_sub_explicit(&ec->sleepers, 1, memory_order_relaxed);
  return woken;
}

/* A timed park that tells a lost wake-up from a late one, for the threads
 * that owe the device progress. Parks as weft__ec_wait_ns; when that times
 * out, asks |owed(arg, 0)| whether work is waiting that this thread should
 * have been woken for. If so, parks once more for WEFT_PARK_GRACE_NS, still
 * counted among the sleepers (the epoch is still k, PARKED): a producer still
 * between making the work visible and notifying (preempted there) finds this
 * thread and wakes it, which is a late wake-up, not a lost one. Only when
 * that park times out too and |owed(arg, 1)| still holds was a notification
 * lost.
 * WEFT_PARK_WOKEN: a notification came (or the epoch moved: another
 * consumer was woken for it); WEFT_PARK_TIMED_OUT: nothing owed, or a late
 * notification; WEFT_PARK_LOST: counted by the caller. */
typedef enum { WEFT_PARK_WOKEN, WEFT_PARK_TIMED_OUT, WEFT_PARK_LOST } weft_park;
#define WEFT_PARK_GRACE_NS (UINT64_C(100) * 1000u * 1000u)
weft_park weft__ec_wait_owed(weft_eventcount *ec, uint32_t k, uint64_t ns,
                             bool (*owed)(void *arg, int pass), void *arg);
/* WEFT_STRICT_WAKEUPS: true once per process, on the first lost wake-up a
 * parked thread recovered while the variable is set, after printing |what|
 * to stderr; the caller then prints the state it can see. */
bool weft__wakeup_lost_report(const char *what);

/* P3..P4: true when this notifier cleared the PARKED bit (and so owes the
 * wake system call); false when no consumer prepared since the last one. */
static inline bool weft__ec_claim(weft_eventcount *ec) {
  uint32_t e = atomic_load_explicit(&ec->epoch, memory_order_relaxed);
  while (e & WEFT_EC_PARKED)
    if (atomic_compare_exchange_weak_explicit(&ec->epoch, &e, e + 1u, memory_order_release,
                                              memory_order_relaxed))
      return true;
  return false;
}

static inline void weft__ec_notify(weft_eventcount *ec) {
  WEFT_HUNT_POINT(4);
  atomic_thread_fence(memory_order_seq_cst); /* P2 */
  if (weft__ec_claim(ec)) {
    WEFT_HUNT_POINT(5);
    weft__futex_wake(&ec->epoch, 0x7fffffff);
  }
}

/* Wakes one parked consumer (for a pool of interchangeable consumers). While
 * some consumer sleeps in the kernel, the bit stays set and a wake of one
 * wakes it (the others stay parked, still marked). Only when that wake finds
 * nobody asleep (every marked consumer is between prepare and its wait, or
 * gone) does the notifier clear the bit, so that those consumers do not
 * sleep, and wake every consumer that entered the kernel in between (rare:
 * they re-prepare). The argument above holds: a consumer owed this
 * notification is woken by the first wake, or is stopped by the clear, or is
 * woken by the second. */
static inline void weft__ec_notify_one(weft_eventcount *ec) {
  WEFT_HUNT_POINT(6);
  atomic_thread_fence(memory_order_seq_cst);
  if (!(atomic_load_explicit(&ec->epoch, memory_order_relaxed) & WEFT_EC_PARKED)) return;
  WEFT_HUNT_POINT(7);
  if (weft__futex_wake(&ec->epoch, 1) > 0) return;
  if (weft__ec_claim(ec)) weft__futex_wake(&ec->epoch, 0x7fffffff);
}

/* Adaptive spinning, for a waiter that spins before it parks: a spin that
 * found what it waited for lets the next one spin twice as long (up to
 * |max|), one that did not halves it. On a loaded or oversubscribed machine
 * the producer is often not running while we spin, so the budget falls to 0
 * and the waiter parks at once; every 16th wait at 0 spins a little to
 * learn whether that changed. One waiter per weft_spin (not shared). */
typedef struct weft_spin {
  uint32_t n, max, probes;
} weft_spin;

static inline void weft__spin_init(weft_spin *s, uint32_t max) {
  s->n = s->max = max;
  s->probes = 0;
}
static inline uint32_t weft__spin_budget(weft_spin *s) {
  if (s->n == 0 && s->max && (++s->probes & 15u) == 0) return s->max < 16u ? s->max : 16u;
  return s->n;
}
static inline void weft__spin_learn(weft_spin *s, uint32_t budget, bool found) {
  if (!found && s->n == 0) return; /* a probe that did not pay: still 0 */
  uint32_t n = found ? 2u * budget + 16u : budget / 2u;
  s->n = n < s->max ? n : s->max;
}

/* A wake-up request for one parked consumer that also watches other
 * conditions: raise() sets the flag and notifies the event count; the
 * consumer treats a taken flag as "something happened". */
typedef struct weft_signal {
  _Atomic uint32_t raised;
  weft_eventcount *ec;
} weft_signal;

static inline void weft__signal_raise(weft_signal *s) {
  if (!atomic_load_explicit(&s->raised, memory_order_relaxed))
    atomic_store_explicit(&s->raised, 1, memory_order_release);
  WEFT_HUNT_POINT(8);
  weft__ec_notify(s->ec); /* its seq_cst fence orders the flag before the sleepers check */
}

static inline bool weft__signal_take(weft_signal *s) {
  return atomic_load_explicit(&s->raised, memory_order_relaxed) &&
         atomic_exchange_explicit(&s->raised, 0, memory_order_acquire);
}

/* A one-shot completion a blocking caller waits on (it lives on the caller's
 * stack). The completer publishes |result| with release, then wakes. */
typedef struct weft_token {
  _Atomic uint32_t done;
  void *result; /* published by done=1 (release) */
} weft_token;

static inline void weft__token_init(weft_token *t) {
  atomic_init(&t->done, 0);
  t->result = 0;
}
static inline void weft__token_complete(weft_token *t, void *result) {
  t->result = result;
  atomic_store_explicit(&t->done, 1, memory_order_release);
  WEFT_HUNT_POINT(9);
  weft__futex_wake(&t->done, 1);
}
/* Spins a little, then parks until completed; returns the result. */
void *weft__token_wait(weft_token *t);

#endif
