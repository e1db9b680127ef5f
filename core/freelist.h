/* weft_freelist: a lock-free multi-producer / multi-consumer free list of
 * intrusive nodes (a Treiber stack whose head carries a generation, swapped
 * with one 16-byte CAS, so a pop never suffers ABA). Nodes are never freed
 * while the list is in use: a pop may read the link of a node another thread
 * just took, which is harmless because the memory stays valid and the CAS
 * then fails.
 *
 *   weft_freelist_push(&fl, &node->link);   // any thread
 *   ck_stack_entry_t *e = weft_freelist_pop(&fl);   // any thread, NULL if empty */
#ifndef WEFT_CORE_FREELIST_H
#define WEFT_CORE_FREELIST_H

#include <ck_pr.h>
#include <ck_stack.h>

#include "core/sync.h"

typedef struct weft_freelist {
  ck_stack_entry_t *head;
  uint64_t gen;
} CK_CC_ALIGN(16) weft_freelist;

#ifndef CK_F_PR_CAS_PTR_2
#error "weft_freelist needs a double-width CAS (ck_pr_cas_ptr_2)"
#endif

/* Pushes first..last, already linked through ->next, with one CAS. */
static inline void weft_freelist_push_chain(weft_freelist *f, ck_stack_entry_t *first,
                                            ck_stack_entry_t *last) {
  weft_freelist o, n;
  for (;;) {
    o.gen = ck_pr_load_64(&f->gen);
    ck_pr_fence_load();
    o.head = ck_pr_load_ptr(&f->head);
    last->next = o.head;
    n.head = first;
    n.gen = o.gen + 1;
    ck_pr_fence_store();
    WEFT_TSAN_RELEASE(f);
    if (ck_pr_cas_ptr_2(f, &o, &n)) return;
    ck_pr_stall();
  }
}

static inline void weft_freelist_push(weft_freelist *f, ck_stack_entry_t *e) {
  weft_freelist_push_chain(f, e, e);
}

static inline ck_stack_entry_t *weft_freelist_pop(weft_freelist *f) {
  weft_freelist o, n;
  for (;;) {
    o.gen = ck_pr_load_64(&f->gen);
    ck_pr_fence_load();
    o.head = ck_pr_load_ptr(&f->head);
    if (!o.head) return NULL;
    ck_pr_fence_load();
    n.head = ck_pr_load_ptr(&o.head->next);
    n.gen = o.gen + 1;
    if (ck_pr_cas_ptr_2(f, &o, &n)) {
      WEFT_TSAN_ACQUIRE(f);
      return o.head;
    }
    ck_pr_stall();
  }
}

#endif
