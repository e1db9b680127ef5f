/* weft_ready_ring (core/ready_ring.h): a bounded MPMC FIFO of pointers in
 * caller-provided cells. Capacity checks, order, full and empty, wrapping,
 * then producers and consumers racing. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "core/ready_ring.h"

TestSuite(ready_ring, .timeout = 60);

#define ITEM(i) ((void *)(uintptr_t)(i))

static void init_ok(weft_ready_ring *r, weft_ready_cell *cells, uint32_t cap) {
  weft_status st = weft_ready_ring_init(r, cells, cap);
  cr_assert_null(st, "init(%u): %s", cap, weft_error_message(st));
}

Test(ready_ring, init_refuses_a_capacity_that_is_not_a_power_of_two) {
  weft_ready_ring r;
  weft_ready_cell cells[8];
  uint32_t bad[] = {0, 1, 3, 6, 100, 0x80000001u, 0xffffffffu};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    weft_status st = weft_ready_ring_init(&r, cells, bad[i]);
    cr_assert_not_null(st, "capacity %u accepted", bad[i]);
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
    cr_assert(strstr(weft_error_message(st), "power of two"), "%s", weft_error_message(st));
    weft_error_free(st);
  }
  weft_status st = weft_ready_ring_init(&r, NULL, 8);
  cr_assert_not_null(st, "no cells accepted");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
}

Test(ready_ring, a_new_ring_is_empty) {
  weft_ready_ring r;
  weft_ready_cell cells[4];
  init_ok(&r, cells, 4);
  cr_assert_eq(weft_ready_ring_capacity(&r), 4);
  cr_assert(weft_ready_ring_empty(&r));
  cr_assert_null(weft_ready_ring_pop(&r));
  cr_assert_eq(weft_ready_ring_enqueued(&r), 0);
  cr_assert_eq(weft_ready_ring_dequeued(&r), 0);
}

Test(ready_ring, items_come_out_in_push_order) {
  weft_ready_ring r;
  weft_ready_cell cells[8];
  init_ok(&r, cells, 8);
  for (uintptr_t i = 1; i <= 5; i++) cr_assert(weft_ready_ring_push(&r, ITEM(i)));
  cr_assert_not(weft_ready_ring_empty(&r));
  for (uintptr_t i = 1; i <= 5; i++) cr_assert_eq(weft_ready_ring_pop(&r), ITEM(i));
  cr_assert_null(weft_ready_ring_pop(&r));
  cr_assert(weft_ready_ring_empty(&r));
}

Test(ready_ring, a_full_ring_refuses_a_push_until_a_pop_frees_a_cell) {
  weft_ready_ring r;
  weft_ready_cell cells[4];
  init_ok(&r, cells, 4);
  for (uintptr_t i = 1; i <= 4; i++) cr_assert(weft_ready_ring_push(&r, ITEM(i)), "push %zu", i);
  cr_assert_not(weft_ready_ring_push(&r, ITEM(5)), "every cell holds an item");
  cr_assert_eq(weft_ready_ring_enqueued(&r), 4, "a refused push claims nothing");
  cr_assert_eq(weft_ready_ring_pop(&r), ITEM(1));
  cr_assert(weft_ready_ring_push(&r, ITEM(5)));
  for (uintptr_t i = 2; i <= 5; i++) cr_assert_eq(weft_ready_ring_pop(&r), ITEM(i));
  cr_assert_null(weft_ready_ring_pop(&r));
  cr_assert_eq(weft_ready_ring_dequeued(&r), 5, "an empty pop claims nothing");
}

Test(ready_ring, the_smallest_ring_holds_two) {
  weft_ready_ring r;
  weft_ready_cell cells[2];
  init_ok(&r, cells, 2);
  for (uintptr_t i = 1; i <= 10; i++) {
    cr_assert(weft_ready_ring_push(&r, ITEM(i)));
    cr_assert(weft_ready_ring_push(&r, ITEM(i + 100)));
    cr_assert_not(weft_ready_ring_push(&r, ITEM(i + 200)), "lap %zu: a third item fit", i);
    cr_assert_eq(weft_ready_ring_pop(&r), ITEM(i));
    cr_assert_eq(weft_ready_ring_pop(&r), ITEM(i + 100));
    cr_assert_null(weft_ready_ring_pop(&r));
  }
}

Test(ready_ring, positions_wrap_over_many_laps) {
  weft_ready_ring r;
  weft_ready_cell cells[8];
  init_ok(&r, cells, 8);
  uintptr_t next_in = 1, next_out = 1;
  for (int round = 0; round < 1000; round++) {
    int n = 1 + round % 8; /* varying fill levels land every lap on a new cell */
    for (int i = 0; i < n; i++) cr_assert(weft_ready_ring_push(&r, ITEM(next_in++)));
    for (int i = 0; i < n; i++) cr_assert_eq(weft_ready_ring_pop(&r), ITEM(next_out++));
  }
  cr_assert(weft_ready_ring_empty(&r));
  cr_assert_eq(weft_ready_ring_enqueued(&r), next_in - 1);
  cr_assert_eq(weft_ready_ring_dequeued(&r), next_out - 1);
}

Test(ready_ring, a_claimed_but_unpublished_cell_reads_as_not_empty_and_pops_nothing) {
  /* A producer preempted between its claim and its publish: empty() counts
   * the claim, pop() cannot take the cell yet. */
  weft_ready_ring r;
  weft_ready_cell cells[4];
  init_ok(&r, cells, 4);
  atomic_store(&r.enq, 1); /* the claim of position 0, as the CAS makes it */
  cr_assert_not(weft_ready_ring_empty(&r));
  cr_assert_null(weft_ready_ring_pop(&r));
  cells[0].item = ITEM(7); /* the publish */
  atomic_store_explicit(&cells[0].seq, 1, memory_order_release);
  cr_assert_eq(weft_ready_ring_pop(&r), ITEM(7));
  cr_assert(weft_ready_ring_empty(&r));
}

/* ---- producers and consumers ---- */

enum { PRODUCERS = 2, CONSUMERS = 2, PER_PRODUCER = 20000, CAP = 8 };

static weft_ready_ring shared;
static weft_ready_cell shared_cells[CAP];
static _Atomic uint8_t seen[PRODUCERS][PER_PRODUCER];
static _Atomic int taken, duplicates, out_of_order;

static void *produce(void *arg) {
  uintptr_t p = (uintptr_t)arg;
  for (uintptr_t i = 0; i < PER_PRODUCER; i++) {
    /* item = producer, index; +1 keeps it non-NULL */
    while (!weft_ready_ring_push(&shared, ITEM((p * PER_PRODUCER + i) + 1))) sched_yield();
  }
  return NULL;
}

static void *consume(void *arg) {
  (void)arg;
  long last[PRODUCERS];
  for (int p = 0; p < PRODUCERS; p++) last[p] = -1;
  while (atomic_load(&taken) < PRODUCERS * PER_PRODUCER) {
    void *x = weft_ready_ring_pop(&shared);
    if (!x) {
      sched_yield();
      continue;
    }
    uintptr_t v = (uintptr_t)x - 1, p = v / PER_PRODUCER, i = v % PER_PRODUCER;
    if (atomic_exchange(&seen[p][i], 1)) atomic_fetch_add(&duplicates, 1);
    /* FIFO: one consumer sees each producer's items in push order. */
    if ((long)i <= last[p]) atomic_fetch_add(&out_of_order, 1);
    last[p] = (long)i;
    atomic_fetch_add(&taken, 1);
  }
  return NULL;
}

Test(ready_ring, racing_producers_and_consumers_move_every_item_once_in_order) {
  init_ok(&shared, shared_cells, CAP);
  pthread_t pt[PRODUCERS], ct[CONSUMERS];
  for (int i = 0; i < CONSUMERS; i++) cr_assert_eq(pthread_create(&ct[i], NULL, consume, NULL), 0);
  for (uintptr_t i = 0; i < PRODUCERS; i++)
    cr_assert_eq(pthread_create(&pt[i], NULL, produce, (void *)i), 0);
  for (int i = 0; i < PRODUCERS; i++) pthread_join(pt[i], NULL);
  for (int i = 0; i < CONSUMERS; i++) pthread_join(ct[i], NULL);
  cr_assert_eq(atomic_load(&duplicates), 0);
  cr_assert_eq(atomic_load(&out_of_order), 0);
  cr_assert_eq(atomic_load(&taken), PRODUCERS * PER_PRODUCER);
  for (int p = 0; p < PRODUCERS; p++)
    for (int i = 0; i < PER_PRODUCER; i++) cr_assert(atomic_load(&seen[p][i]), "lost %d/%d", p, i);
  cr_assert(weft_ready_ring_empty(&shared));
  cr_assert_null(weft_ready_ring_pop(&shared));
}
