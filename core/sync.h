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
void weft__futex_wake(_Atomic uint32_t *word, int count);
/* As weft__futex_wait, for at most |ns|; false when it timed out. */
bool weft__futex_wait_ns(_Atomic uint32_t *word, uint32_t expected, uint64_t ns);
/* The futex system calls this process made so far (waits, timed or not; wakes). */
void weft__futex_counts(uint64_t *waits, uint64_t *wakes);
/* One CPU relax hint. */
void weft__cpu_relax(void);

/* An event count: lets a consumer park until "something changed" without a
 * lost wake-up. Consumer: k = prepare(); if (!condition) wait(k); else cancel().
 * Producer: make the condition true, then notify(). */
typedef struct weft_eventcount {
  _Atomic uint32_t epoch;
  _Atomic uint32_t sleepers;
} weft_eventcount;

static inline uint32_t weft__ec_prepare(weft_eventcount *ec) {
  uint32_t k = atomic_load_explicit(&ec->epoch, memory_order_acquire);
  WEFT_HUNT_POINT(1);
  atomic_fetch_add_explicit(&ec->sleepers, 1, memory_order_seq_cst);
  /* seq_cst pairs with notify's fence: either the producer sees sleepers > 0
   * or the consumer's recheck sees the producer's condition. */
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
 * counted among the sleepers: a producer still between making the work
 * visible and notifying (preempted there) finds this thread and wakes it,
 * which is a late wake-up, not a lost one. Only when that park times out too
 * and |owed(arg, 1)| still holds was a notification lost.
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

static inline void weft__ec_notify(weft_eventcount *ec) {
  WEFT_HUNT_POINT(4);
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&ec->sleepers, memory_order_relaxed) != 0) {
    atomic_fetch_add_explicit(&ec->epoch, 1, memory_order_release);
    WEFT_HUNT_POINT(5);
    weft__futex_wake(&ec->epoch, 0x7fffffff);
  }
}

/* Wakes one parked consumer (for a pool of interchangeable consumers). */
static inline void weft__ec_notify_one(weft_eventcount *ec) {
  WEFT_HUNT_POINT(6);
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(&ec->sleepers, memory_order_relaxed) != 0) {
    atomic_fetch_add_explicit(&ec->epoch, 1, memory_order_release);
    WEFT_HUNT_POINT(7);
    weft__futex_wake(&ec->epoch, 1);
  }
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
