/* weft_inbox: an intrusive multi-producer / single-consumer queue, lock-free
 * for producers (one CAS on ck_stack's head; a producer never waits for
 * another, unlike ck_ring's multi-producer modes, which commit in ticket
 * order and stall every producer behind a preempted one).
 *
 * The consumer takes everything at once (one atomic exchange) and reverses
 * the batch into submission order. Linearizable: if push(a) happens before
 * push(b), a is taken before b (b sits above a on the stack, and batches are
 * taken whole and in order).
 *
 *   weft_inbox_push(&q, &cmd->link);            // any thread
 *   for (ck_stack_entry_t *e = weft_inbox_take(&q); e; e = next) {...} // consumer
 *
 * Parking: a consumer whose take came back empty parks on |ec| (prepare,
 * recheck weft_inbox_empty, then wait or cancel); weft_inbox_push_chain
 * notifies it only if it parked, weft_inbox_push_chain_quiet never does (the
 * combining scheduler's producers, which decide themselves who takes it). */
#ifndef WEFT_CORE_INBOX_H
#define WEFT_CORE_INBOX_H

#include "core/ckstack.h"
#include "core/sync.h"

typedef struct weft_inbox {
  ck_stack_t stack;
  weft_eventcount ec;
} weft_inbox;

static inline void weft_inbox_init(weft_inbox *q) {
  ck_stack_init(&q->stack);
  atomic_init(&q->ec.epoch, 0);
  atomic_init(&q->ec.sleepers, 0);
}

/* Puts a chain, newest (|last|) first and linked down to |first|, on top. */
static inline void weft__inbox_cas(weft_inbox *q, ck_stack_entry_t *first, ck_stack_entry_t *last) {
  ck_stack_entry_t *head = ck_pr_load_ptr(&q->stack.head);
  for (;;) {
    first->next = head;
    ck_pr_fence_store();
    WEFT_TSAN_RELEASE(q);
    WEFT_HUNT_POINT(10);
    if (ck_pr_cas_ptr_value(&q->stack.head, head, last, &head)) break;
    ck_pr_stall();
  }
}

/* Any thread: pushes a chain first..last already linked through ->next, in
 * order (first is taken first), with one CAS. */
static inline void weft_inbox_push_chain_quiet(weft_inbox *q, ck_stack_entry_t *first,
                                               ck_stack_entry_t *last) {
  /* The stack holds newest first: reverse the chain so |last| ends on top. */
  ck_stack_entry_t *prev = NULL, *e = first;
  while (e) {
    ck_stack_entry_t *n = e->next;
    e->next = prev;
    prev = e;
    if (e == last) break;
    e = n;
  }
  weft__inbox_cas(q, first, last);
}

/* After a push: wakes the consumer if it parked. */
static inline void weft__inbox_notify(weft_inbox *q) {
  WEFT_HUNT_POINT(11);
  if (WEFT_HUNT_DROP(WEFT_HUNT_INBOX, &q->ec.sleepers)) return;
  weft__ec_notify(&q->ec);
}

/* As weft_inbox_push_chain_quiet, then wakes the consumer if it parked. */
static inline void weft_inbox_push_chain(weft_inbox *q, ck_stack_entry_t *first,
                                         ck_stack_entry_t *last) {
  weft_inbox_push_chain_quiet(q, first, last);
  weft__inbox_notify(q);
}

/* Any thread: one entry, without push_chain's walk (one CAS). Publishes the
 * entry (and what it points to) to the consumer. */
static inline void weft_inbox_push_quiet(weft_inbox *q, ck_stack_entry_t *e) {
  weft__inbox_cas(q, e, e);
}
static inline void weft_inbox_push(weft_inbox *q, ck_stack_entry_t *e) {
  weft__inbox_cas(q, e, e);
  weft__inbox_notify(q);
}

/* Consumer only: takes every entry pushed so far, oldest first, or NULL;
 * |*tail| (if not NULL) receives the newest. */
static inline ck_stack_entry_t *weft_inbox_take_tail(weft_inbox *q, ck_stack_entry_t **tail) {
  if (ck_pr_load_ptr(&q->stack.head) == NULL) return NULL;
  ck_stack_entry_t *e = ck_stack_batch_pop_upmc(&q->stack), *prev = NULL;
  if (tail) *tail = e; /* the newest: last once reversed */
  WEFT_TSAN_ACQUIRE(q);
  while (e) {
    ck_stack_entry_t *n = e->next;
    e->next = prev;
    prev = e;
    e = n;
  }
  return prev;
}

/* Consumer only: takes every entry pushed so far, oldest first, or NULL. */
static inline ck_stack_entry_t *weft_inbox_take(weft_inbox *q) {
  return weft_inbox_take_tail(q, NULL);
}

/* Any thread: true when nothing is waiting to be taken. */
static inline bool weft_inbox_empty(weft_inbox *q) {
  return ck_pr_load_ptr(&q->stack.head) == NULL;
}

#endif
