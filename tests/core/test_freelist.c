/* weft_freelist (core/freelist.h): a ck_stack popped with ck_stack_pop_mpmc,
 * plus weft's chain push. Single-thread order and generation rules, then
 * threads that pop and push the same nodes. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stdalign.h>
#include <stddef.h>
#include <string.h>

#include "core/freelist.h"

TestSuite(freelist, .timeout = 60);

typedef struct node {
  ck_stack_entry_t link;
  int id;
} node;

#define NODE_OF(e) ((node *)((char *)(e)-offsetof(node, link)))

static int pop_id(weft_freelist *f) {
  ck_stack_entry_t *e = weft_freelist_pop(f);
  return e ? NODE_OF(e)->id : -1;
}

Test(freelist, a_new_list_is_empty_whether_initialised_or_zero_filled) {
  weft_freelist a, b;
  weft_freelist_init(&a);
  memset(&b, 0, sizeof(b));
  cr_assert_null(weft_freelist_pop(&a));
  cr_assert_null(weft_freelist_pop(&b));
}

Test(freelist, the_head_and_generation_pair_is_16_byte_aligned) {
  /* cmpxchg16b faults on a misaligned operand. */
  struct {
    char c;
    weft_freelist f;
  } s;
  cr_assert_eq(alignof(weft_freelist), 16);
  cr_assert_eq((uintptr_t)&s.f.stack % 16, 0);
}

Test(freelist, pops_return_the_most_recent_push_first) {
  weft_freelist f;
  weft_freelist_init(&f);
  node n[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
  for (int i = 0; i < 3; i++) weft_freelist_push(&f, &n[i].link);
  cr_assert_eq(pop_id(&f), 2);
  cr_assert_eq(pop_id(&f), 1);
  weft_freelist_push(&f, &n[1].link);
  cr_assert_eq(pop_id(&f), 1);
  cr_assert_eq(pop_id(&f), 0);
  cr_assert_eq(pop_id(&f), -1);
}

Test(freelist, a_chain_pops_first_to_last_then_the_older_nodes) {
  weft_freelist f;
  weft_freelist_init(&f);
  node old = {.id = 9}, c[3] = {{.id = 0}, {.id = 1}, {.id = 2}}, beyond = {.id = 7};
  weft_freelist_push(&f, &old.link);
  c[0].link.next = &c[1].link;
  c[1].link.next = &c[2].link;
  c[2].link.next = &beyond.link; /* past |last|: overwritten, never followed */
  weft_freelist_push_chain(&f, &c[0].link, &c[2].link);
  cr_assert_eq(c[2].link.next, &old.link, "the chain's last node links to the old head");
  int want[] = {0, 1, 2, 9, -1};
  for (int i = 0; i < 5; i++) cr_assert_eq(pop_id(&f), want[i], "pop %d", i);
}

Test(freelist, a_chain_of_one_is_a_push) {
  weft_freelist f;
  weft_freelist_init(&f);
  node a = {.id = 1}, b = {.id = 2};
  weft_freelist_push_chain(&f, &a.link, &a.link);
  weft_freelist_push_chain(&f, &b.link, &b.link);
  cr_assert_eq(pop_id(&f), 2);
  cr_assert_eq(pop_id(&f), 1);
  cr_assert_eq(pop_id(&f), -1);
}

Test(freelist, only_pops_advance_the_generation) {
  weft_freelist f;
  weft_freelist_init(&f);
  node n[2] = {{.id = 0}, {.id = 1}};
  char *g0 = f.stack.generation;
  weft_freelist_push(&f, &n[0].link);
  n[1].link.next = NULL;
  weft_freelist_push_chain(&f, &n[1].link, &n[1].link);
  cr_assert_eq(f.stack.generation, g0, "a push left the generation alone");
  (void)weft_freelist_pop(&f);
  cr_assert_eq(f.stack.generation, g0 + 1);
  (void)weft_freelist_pop(&f);
  cr_assert_eq(f.stack.generation, g0 + 2);
  (void)weft_freelist_pop(&f); /* empty: nothing taken, nothing advanced */
  cr_assert_eq(f.stack.generation, g0 + 2);
}

Test(freelist, a_pop_that_read_the_head_before_a_pop_and_push_back_fails_its_cas) {
  /* ABA: a popper reads {head A, next B}; meanwhile A and B are popped and A
   * is pushed back, so the head is A again but A->next is no longer B. The
   * stale pop's double-width CAS must fail, because the pops in between
   * advanced the generation. */
  weft_freelist f;
  weft_freelist_init(&f);
  node a = {.id = 1}, b = {.id = 2}, c = {.id = 3};
  weft_freelist_push(&f, &c.link);
  weft_freelist_push(&f, &b.link);
  weft_freelist_push(&f, &a.link);
  ck_stack_t stale = {.head = f.stack.head, .generation = f.stack.generation};
  cr_assert_eq(stale.head, &a.link);
  cr_assert_eq(pop_id(&f), 1);
  cr_assert_eq(pop_id(&f), 2);
  weft_freelist_push(&f, &a.link);
  cr_assert_eq(f.stack.head, &a.link, "the head is A again");
  ck_stack_t update = {.head = &b.link, .generation = stale.generation + 1}, seen;
  cr_assert_not(ck_pr_cas_ptr_2_value(&f.stack, &stale, &update, &seen),
                "the stale pop installed B, which another thread owns");
  cr_assert_eq(pop_id(&f), 1);
  cr_assert_eq(pop_id(&f), 3);
  cr_assert_eq(pop_id(&f), -1);
}

/* ---- threads ---- */

enum { THREADS = 4, NODES = 64, ROUNDS = 20000 };

typedef struct tnode {
  ck_stack_entry_t link;
  _Atomic int held; /* 1 while a thread holds it: two holders is a double pop */
} tnode;

static weft_freelist shared;
static tnode tnodes[NODES];
static _Atomic int double_pops, empties_with_nodes_free;

static void *churn(void *arg) {
  (void)arg;
  ck_stack_entry_t *mine[4];
  for (int r = 0; r < ROUNDS; r++) {
    int n = 1 + r % 4, got = 0;
    for (int i = 0; i < n; i++) {
      ck_stack_entry_t *e = weft_freelist_pop(&shared);
      if (!e) {
        /* Every thread holds at most 4 nodes, so 64 cannot all be out. */
        atomic_fetch_add(&empties_with_nodes_free, 1);
        break;
      }
      tnode *t = (tnode *)e;
      if (atomic_exchange(&t->held, 1)) atomic_fetch_add(&double_pops, 1);
      mine[got++] = e;
    }
    for (int i = 0; i < got; i++) atomic_store(&((tnode *)mine[i])->held, 0);
    if (got == 0) continue;
    if (r % 2) { /* give them back as one chain */
      for (int i = 0; i + 1 < got; i++) mine[i]->next = mine[i + 1];
      weft_freelist_push_chain(&shared, mine[0], mine[got - 1]);
    } else {
      for (int i = 0; i < got; i++) weft_freelist_push(&shared, mine[i]);
    }
  }
  return NULL;
}

Test(freelist, threads_popping_and_pushing_never_share_a_node_or_lose_one) {
  weft_freelist_init(&shared);
  for (int i = 0; i < NODES; i++) weft_freelist_push(&shared, &tnodes[i].link);
  pthread_t th[THREADS];
  for (int i = 0; i < THREADS; i++) cr_assert_eq(pthread_create(&th[i], NULL, churn, NULL), 0);
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  cr_assert_eq(atomic_load(&double_pops), 0, "two threads popped the same node");
  cr_assert_eq(atomic_load(&empties_with_nodes_free), 0, "a pop found the list empty");
  int seen[NODES] = {0}, count = 0;
  for (ck_stack_entry_t *e; (e = weft_freelist_pop(&shared)); count++) {
    ptrdiff_t i = (tnode *)e - tnodes;
    cr_assert(i >= 0 && i < NODES, "a node that was never pushed");
    cr_assert_eq(seen[i]++, 0, "node %td popped twice", i);
  }
  cr_assert_eq(count, NODES, "%d of %d nodes came back", count, NODES);
}
