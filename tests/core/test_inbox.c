/* weft_inbox (core/inbox.h): many producers, one consumer that takes
 * everything at once, oldest first. Order, chains, the notify rule, then
 * producers racing a consumer. */
#include <criterion/criterion.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/inbox.h"

TestSuite(inbox, .timeout = 60);

typedef struct item {
  ck_stack_entry_t link;
  int id;
} item;

#define ITEM_OF(e) ((item *)((char *)(e)-offsetof(item, link)))

/* Takes everything and writes the ids, oldest first; returns the count. */
static int take_ids(weft_inbox *q, int *ids, int cap) {
  int n = 0;
  for (ck_stack_entry_t *e = weft_inbox_take(q); e; e = e->next) {
    cr_assert_lt(n, cap, "more entries than were pushed");
    ids[n++] = ITEM_OF(e)->id;
  }
  return n;
}

Test(inbox, a_new_inbox_is_empty_and_takes_nothing) {
  weft_inbox q;
  weft_inbox_init(&q);
  cr_assert(weft_inbox_empty(&q));
  cr_assert_null(weft_inbox_take(&q));
  ck_stack_entry_t *tail = (ck_stack_entry_t *)&q;
  cr_assert_null(weft_inbox_take_tail(&q, &tail));
  cr_assert_eq(tail, (ck_stack_entry_t *)&q, "an empty take leaves |tail| alone");
}

Test(inbox, entries_are_taken_oldest_first) {
  weft_inbox q;
  weft_inbox_init(&q);
  item it[5];
  for (int i = 0; i < 5; i++) {
    it[i].id = i;
    weft_inbox_push(&q, &it[i].link);
  }
  cr_assert_not(weft_inbox_empty(&q));
  int ids[5], n = take_ids(&q, ids, 5);
  cr_assert_eq(n, 5);
  for (int i = 0; i < 5; i++) cr_assert_eq(ids[i], i);
  cr_assert(weft_inbox_empty(&q), "a take takes everything");
}

Test(inbox, a_chain_keeps_its_order_and_stops_at_its_last_entry) {
  weft_inbox q;
  weft_inbox_init(&q);
  item before = {.id = 0}, c[3] = {{.id = 1}, {.id = 2}, {.id = 3}}, after = {.id = 4};
  item beyond = {.id = 99};
  weft_inbox_push(&q, &before.link);
  c[0].link.next = &c[1].link;
  c[1].link.next = &c[2].link;
  c[2].link.next = &beyond.link; /* past |last|: not part of the chain */
  weft_inbox_push_chain(&q, &c[0].link, &c[2].link);
  weft_inbox_push(&q, &after.link);
  int ids[8], n = take_ids(&q, ids, 8);
  cr_assert_eq(n, 5);
  for (int i = 0; i < 5; i++) cr_assert_eq(ids[i], i);
}

Test(inbox, take_tail_gives_the_newest_entry) {
  weft_inbox q;
  weft_inbox_init(&q);
  item it[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
  for (int i = 0; i < 3; i++) weft_inbox_push(&q, &it[i].link);
  ck_stack_entry_t *tail = NULL, *e = weft_inbox_take_tail(&q, &tail);
  cr_assert_eq(e, &it[0].link);
  cr_assert_eq(tail, &it[2].link);
  cr_assert_null(tail->next, "the newest ends the batch");
}

Test(inbox, batches_are_taken_whole_and_in_order) {
  weft_inbox q;
  weft_inbox_init(&q);
  item it[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};
  weft_inbox_push(&q, &it[0].link);
  weft_inbox_push(&q, &it[1].link);
  int ids[4];
  cr_assert_eq(take_ids(&q, ids, 4), 2);
  cr_assert(ids[0] == 0 && ids[1] == 1);
  weft_inbox_push(&q, &it[2].link);
  weft_inbox_push(&q, &it[3].link);
  cr_assert_eq(take_ids(&q, ids, 4), 2);
  cr_assert(ids[0] == 2 && ids[1] == 3);
}

Test(inbox, a_push_notifies_only_a_parked_consumer) {
  weft_inbox q;
  weft_inbox_init(&q);
  item a = {.id = 0}, b = {.id = 1};
  weft_inbox_push(&q, &a.link);
  cr_assert_eq(atomic_load(&q.ec.epoch), 0, "no sleeper: no notification");
  uint32_t k = weft__ec_prepare(&q.ec);
  weft_inbox_push(&q, &b.link);
  cr_assert_eq(atomic_load(&q.ec.epoch), k + 1, "a prepared consumer is notified");
  weft__ec_wait(&q.ec, k); /* returns at once: the epoch moved */
  cr_assert_eq(atomic_load(&q.ec.sleepers), 0);
}

Test(inbox, a_quiet_push_never_notifies) {
  weft_inbox q;
  weft_inbox_init(&q);
  item a = {.id = 0};
  uint32_t k = weft__ec_prepare(&q.ec);
  weft_inbox_push_chain_quiet(&q, &a.link, &a.link);
  cr_assert_eq(atomic_load(&q.ec.epoch), k);
  cr_assert_not(weft_inbox_empty(&q));
  weft__ec_cancel(&q.ec);
  cr_assert_eq(take_ids(&q, (int[1]){0}, 1), 1);
}

/* ---- producers racing the consumer ---- */

enum { PRODUCERS = 3, PER_PRODUCER = 20000 };

static weft_inbox racing;
static item racing_items[PRODUCERS][PER_PRODUCER];

static void *produce(void *arg) {
  int p = (int)(intptr_t)arg;
  for (int i = 0; i < PER_PRODUCER;) {
    int n = 1 + i % 3; /* single pushes and chains of 2 and 3 */
    if (i + n > PER_PRODUCER) n = PER_PRODUCER - i;
    for (int j = 0; j < n; j++) {
      racing_items[p][i + j].id = p * PER_PRODUCER + i + j;
      if (j + 1 < n) racing_items[p][i + j].link.next = &racing_items[p][i + j + 1].link;
    }
    weft_inbox_push_chain(&racing, &racing_items[p][i].link, &racing_items[p][i + n - 1].link);
    i += n;
  }
  return NULL;
}

Test(inbox, racing_producers_lose_nothing_and_keep_their_own_order) {
  weft_inbox_init(&racing);
  pthread_t th[PRODUCERS];
  for (int p = 0; p < PRODUCERS; p++)
    cr_assert_eq(pthread_create(&th[p], NULL, produce, (void *)(intptr_t)p), 0);
  int next[PRODUCERS] = {0}, total = 0;
  while (total < PRODUCERS * PER_PRODUCER) {
    ck_stack_entry_t *e = weft_inbox_take(&racing);
    if (!e) {
      uint32_t k = weft__ec_prepare(&racing.ec);
      if (weft_inbox_empty(&racing))
        cr_assert(weft__ec_wait_ns(&racing.ec, k, UINT64_C(10000000000)),
                  "the consumer was not woken for 10 s with %d of %d taken", total,
                  PRODUCERS * PER_PRODUCER);
      else
        weft__ec_cancel(&racing.ec);
      continue;
    }
    for (; e; e = e->next, total++) {
      int id = ITEM_OF(e)->id, p = id / PER_PRODUCER, i = id % PER_PRODUCER;
      cr_assert_eq(i, next[p], "producer %d: got item %d, expected %d", p, i, next[p]);
      next[p]++;
    }
  }
  for (int p = 0; p < PRODUCERS; p++) pthread_join(th[p], NULL);
  cr_assert(weft_inbox_empty(&racing));
  for (int p = 0; p < PRODUCERS; p++) cr_assert_eq(next[p], PER_PRODUCER);
}
