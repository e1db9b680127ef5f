/* weft_freelist: a lock-free multi-producer / multi-consumer free list of
 * intrusive nodes: a ck_stack whose pops are ck's own ck_stack_pop_mpmc (a
 * 16-byte CAS of head and generation, so a pop never suffers ABA). The one
 * thing ck lacks is a chain push; weft_freelist_push_chain is it.
 *
 * Invariants:
 *  - only pops advance the generation. A push cannot cause ABA: it installs
 *    its own node whatever the head was, and links that node to exactly the
 *    head its CAS compared against. A pop's CAS fails if any pop (the only
 *    thing that can take a node out and let it come back) ran in between.
 *  - nodes are never freed while the list is in use: a pop may read the link
 *    of a node another thread just took, which is harmless because the
 *    memory stays valid and the pop's CAS then fails.
 *  - a zero-filled weft_freelist is an empty list (weft_freelist_init is the
 *    same as memset 0).
 *
 *   weft_freelist_push(&fl, &node->link);             // any thread
 *   weft_freelist_push_chain(&fl, first, last);       // any thread
 *   ck_stack_entry_t *e = weft_freelist_pop(&fl);     // any thread, NULL if empty
 *
 * Progress: lock-free (a CAS fails only because another push or pop
 * succeeded). TSan cannot see ck's inline-asm CAS: a push releases the list
 * before its CAS and a pop acquires it after its own, which is what hands the
 * node's contents from pusher to popper. */
#ifndef WEFT_CORE_FREELIST_H
#define WEFT_CORE_FREELIST_H

#include "core/ckstack.h"
#include "core/sync.h"

#ifndef CK_F_STACK_POP_MPMC
#error "weft_freelist needs ck_stack_pop_mpmc (a double-width CAS: ck_pr_cas_ptr_2_value)"
#endif

typedef struct weft_freelist {
  /* cmpxchg16b needs the {head, generation} pair 16-byte aligned; ck_stack_t
   * itself carries no alignment. */
  _Alignas(16) ck_stack_t stack;
} weft_freelist;

static inline void weft_freelist_init(weft_freelist *f) {
  ck_stack_init(&f->stack);
}

/* Any thread: pushes first..last, already linked through ->next (last->next
 * is overwritten), with one 8-byte CAS on the head; |first| is popped first.
 * As ck_stack_push_upmc, for a chain: last->next is set to the head the CAS
 * compares against, and published by the store fence before it. */
static inline void weft_freelist_push_chain(weft_freelist *f, ck_stack_entry_t *first,
                                            ck_stack_entry_t *last) {
  ck_stack_entry_t *head = ck_pr_load_ptr(&f->stack.head);
  for (;;) {
    last->next = head;
    ck_pr_fence_store();
    WEFT_TSAN_RELEASE(f);
    if (ck_pr_cas_ptr_value(&f->stack.head, head, first, &head)) return;
    ck_pr_stall();
  }
}

/* Any thread: pushes one node. */
static inline void weft_freelist_push(weft_freelist *f, ck_stack_entry_t *e) {
  weft_freelist_push_chain(f, e, e);
}

/* Any thread: the most recently pushed node, or NULL if the list is empty. */
static inline ck_stack_entry_t *weft_freelist_pop(weft_freelist *f) {
  ck_stack_entry_t *e = ck_stack_pop_mpmc(&f->stack);
  if (e) WEFT_TSAN_ACQUIRE(f);
  return e;
}

#endif
