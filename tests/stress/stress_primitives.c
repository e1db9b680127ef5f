/* stress_primitives: the lock-free primitives of core/ hammered from several
 * threads, with invariant checks. A plain main() so that it runs under
 * ThreadSanitizer (and ASan, and plainly).
 *
 *   stress_primitives [scale]     (default 1: a few seconds on 2 loaded cores)
 *
 * Phases, each under a watchdog (a hang, such as a lost wake-up, fails the
 * program instead of stalling it):
 *  - freelist: threads pop and push the same nodes, singly and as chains.
 *    No node is held by two threads at once, none is lost, and a node's
 *    plain payload written by one holder is seen by the next (the TSan
 *    annotations order the hand-off).
 *  - inbox: producers push items and chains while the consumer takes and
 *    parks on the inbox's event count (untimed). Every item is taken exactly
 *    once, each producer's in its push order.
 *  - ready_ring: producers and consumers on a small ring (full and empty
 *    often). Every item popped exactly once; one consumer sees each
 *    producer's items in push order; the payload an item points to arrives.
 *  - handles: clients acquire, look up, kill and look up again; the owner
 *    thread recycles what they killed (sent to it on a ready ring). No slot
 *    is live twice, a slot's generation only grows, stale handles are
 *    refused, lookups of other clients' handles give their value or
 *    nothing, and freed slots are reused.
 *  - eventcount: producers add work and notify (one or all); consumers take
 *    work or park (untimed). All work is taken; a lost wake-up hangs a
 *    consumer and the watchdog fails the run.
 *
 * Exit status 0 on success; 1 with a message on the first failure. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/freelist.h"
#include "core/handles.h"
#include "core/inbox.h"
#include "core/ready_ring.h"
#include "core/sync.h"

enum { WATCHDOG_S = 120 };

static int scale = 1;
static _Atomic int failures;
static const char *volatile phase = "start";

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      if (atomic_fetch_add(&failures, 1) < 10) {                                                   \
        fprintf(stderr, "stress_primitives: %s: ", phase);                                         \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
      }                                                                                            \
    }                                                                                              \
  } while (0)

static void on_alarm(int sig) {
  (void)sig;
  static const char a[] = "stress_primitives: watchdog: phase ", b[] = " hung (a lost wake-up?)\n";
  const char *p = phase;
  ssize_t n = write(2, a, sizeof(a) - 1);
  n = write(2, p, strlen(p));
  n = write(2, b, sizeof(b) - 1);
  (void)n;
  _exit(1);
}

static void start_phase(const char *name) {
  phase = name;
  alarm(WATCHDOG_S);
}

static void run_threads(int n, void *(*fn)(void *), pthread_t *th) {
  for (intptr_t i = 0; i < n; i++) {
    if (pthread_create(&th[i], NULL, fn, (void *)i) != 0) {
      fprintf(stderr, "stress_primitives: %s: cannot start a thread\n", phase);
      exit(1);
    }
  }
}

static void join_threads(int n, pthread_t *th) {
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
}

/* ---- freelist ---------------------------------------------------------------- */

enum { FL_THREADS = 4, FL_NODES = 128, FL_ROUNDS = 40000 };

typedef struct fl_node {
  ck_stack_entry_t link;
  _Atomic int held; /* 1 while some thread holds the node */
  int last_holder;  /* plain: written by each holder, read by the next */
  uint64_t stamp;   /* plain: last_holder's count of holds */
} fl_node;

static weft_freelist fl;
static fl_node fl_nodes[FL_NODES];

static void *fl_thread(void *arg) {
  int me = (int)(intptr_t)arg;
  uint64_t holds = 0;
  ck_stack_entry_t *mine[8];
  for (int r = 0; r < FL_ROUNDS * scale; r++) {
    int want = 1 + (r * 7 + me) % 8, got = 0;
    while (got < want) {
      ck_stack_entry_t *e = weft_freelist_pop(&fl);
      /* At most 4 x 8 nodes are out at once: the list is never empty. */
      CHECK(e, "a pop found the list empty with nodes free");
      if (!e) break;
      fl_node *n = (fl_node *)e;
      CHECK(n >= fl_nodes && n < fl_nodes + FL_NODES, "a pop returned a foreign node");
      CHECK(!atomic_exchange_explicit(&n->held, 1, memory_order_relaxed),
            "node %td popped while another thread held it", n - fl_nodes);
      CHECK(n->last_holder >= -1 && n->last_holder < FL_THREADS, "node %td's payload is torn",
            n - fl_nodes);
      n->last_holder = me;
      n->stamp = ++holds;
      mine[got++] = e;
    }
    for (int i = 0; i < got; i++)
      atomic_store_explicit(&((fl_node *)mine[i])->held, 0, memory_order_relaxed);
    if (got == 0) continue;
    if (r % 3 == 0) {
      for (int i = 0; i < got; i++) weft_freelist_push(&fl, mine[i]);
    } else {
      for (int i = 0; i + 1 < got; i++) mine[i]->next = mine[i + 1];
      weft_freelist_push_chain(&fl, mine[0], mine[got - 1]);
    }
  }
  return NULL;
}

static void stress_freelist(void) {
  start_phase("freelist");
  weft_freelist_init(&fl);
  for (int i = 0; i < FL_NODES; i++) {
    fl_nodes[i].last_holder = -1;
    weft_freelist_push(&fl, &fl_nodes[i].link);
  }
  pthread_t th[FL_THREADS];
  run_threads(FL_THREADS, fl_thread, th);
  join_threads(FL_THREADS, th);
  static uint8_t seen[FL_NODES];
  int count = 0;
  for (ck_stack_entry_t *e; (e = weft_freelist_pop(&fl)); count++) {
    ptrdiff_t i = (fl_node *)e - fl_nodes;
    if (i < 0 || i >= FL_NODES || seen[i]++) {
      CHECK(0, "node %td came back twice or was never pushed", i);
      break;
    }
  }
  CHECK(count == FL_NODES, "%d of %d nodes came back", count, FL_NODES);
}

/* ---- inbox -------------------------------------------------------------------- */

enum { IB_PRODUCERS = 3, IB_PER_PRODUCER = 20000 };

typedef struct ib_item {
  ck_stack_entry_t link;
  uint32_t producer, index; /* plain: written before the push */
} ib_item;

static weft_inbox ib;
static ib_item *ib_items; /* [IB_PRODUCERS][per] */
static uint32_t ib_per;
static uint64_t ib_parks;
static _Atomic uint32_t ib_taken[IB_PRODUCERS]; /* per producer, published by the consumer */

static void *ib_producer(void *arg) {
  uint32_t p = (uint32_t)(intptr_t)arg;
  ib_item *it = ib_items + (size_t)p * ib_per;
  for (uint32_t i = 0; i < ib_per;) {
    uint32_t n = 1 + (i / 7 + p) % 4;
    if (i + n > ib_per) n = ib_per - i;
    for (uint32_t j = 0; j < n; j++) {
      it[i + j].producer = p;
      it[i + j].index = i + j;
      if (j + 1 < n) it[i + j].link.next = &it[i + j + 1].link;
    }
    weft_inbox_push_chain(&ib, &it[i].link, &it[i + n - 1].link);
    i += n;
    /* Wait until the consumer has the chain, so that it parks again before
     * the next push: were this push's wake-up lost, nothing would come
     * later to cover for it, and the watchdog fires. */
    while (atomic_load_explicit(&ib_taken[p], memory_order_acquire) < i) sched_yield();
  }
  return NULL;
}

static void stress_inbox(void) {
  start_phase("inbox");
  ib_per = IB_PER_PRODUCER * (uint32_t)scale;
  ib_items = calloc((size_t)IB_PRODUCERS * ib_per, sizeof(*ib_items));
  if (!ib_items) {
    fprintf(stderr, "stress_primitives: out of memory\n");
    exit(1);
  }
  weft_inbox_init(&ib);
  pthread_t th[IB_PRODUCERS];
  run_threads(IB_PRODUCERS, ib_producer, th);
  uint32_t next[IB_PRODUCERS] = {0};
  uint64_t total = 0, want = (uint64_t)IB_PRODUCERS * ib_per;
  while (total < want) {
    ck_stack_entry_t *e = weft_inbox_take(&ib);
    if (!e) {
      uint32_t k = weft__ec_prepare(&ib.ec);
      if (!weft_inbox_empty(&ib)) {
        weft__ec_cancel(&ib.ec);
        continue;
      }
      ib_parks++;
      weft__ec_wait(&ib.ec, k); /* untimed: a lost wake-up is the watchdog's */
      continue;
    }
    for (; e; e = e->next, total++) {
      ib_item *it = (ib_item *)e;
      CHECK(it->producer < IB_PRODUCERS, "an item with a torn payload");
      if (it->producer >= IB_PRODUCERS) return;
      CHECK(it->index == next[it->producer], "producer %u: item %u taken, %u expected",
            it->producer, it->index, next[it->producer]);
      next[it->producer] = it->index + 1;
      atomic_store_explicit(&ib_taken[it->producer], next[it->producer], memory_order_release);
    }
  }
  join_threads(IB_PRODUCERS, th);
  CHECK(weft_inbox_empty(&ib), "items left after all were taken");
  CHECK(atomic_load(&ib.ec.sleepers) == 0, "%u sleepers left", atomic_load(&ib.ec.sleepers));
  free(ib_items);
}

/* ---- ready ring ------------------------------------------------------------------ */

enum { RR_PRODUCERS = 3, RR_CONSUMERS = 2, RR_PER_PRODUCER = 50000, RR_CAP = 16 };

typedef struct rr_item {
  uint32_t producer, index; /* plain: written before the push */
  uint32_t check;           /* plain: producer ^ index ^ 0x5a5a5a5a */
} rr_item;

static weft_ready_ring rr;
static weft_ready_cell rr_cells[RR_CAP];
static rr_item *rr_items;
static _Atomic uint8_t *rr_seen;
static uint32_t rr_per;
static _Atomic uint64_t rr_taken;

static void *rr_producer(void *arg) {
  uint32_t p = (uint32_t)(intptr_t)arg;
  for (uint32_t i = 0; i < rr_per; i++) {
    rr_item *it = &rr_items[(size_t)p * rr_per + i];
    it->producer = p;
    it->index = i;
    it->check = p ^ i ^ 0x5a5a5a5au;
    while (!weft_ready_ring_push(&rr, it)) sched_yield(); /* full */
  }
  return NULL;
}

static void *rr_consumer(void *arg) {
  (void)arg;
  int64_t last[RR_PRODUCERS];
  for (int p = 0; p < RR_PRODUCERS; p++) last[p] = -1;
  uint64_t want = (uint64_t)RR_PRODUCERS * rr_per;
  while (atomic_load(&rr_taken) < want) {
    rr_item *it = weft_ready_ring_pop(&rr);
    if (!it) {
      sched_yield();
      continue;
    }
    CHECK(it->producer < RR_PRODUCERS && it->check == (it->producer ^ it->index ^ 0x5a5a5a5au),
          "an item's payload did not arrive");
    if (it->producer >= RR_PRODUCERS) return NULL;
    CHECK(!atomic_exchange(&rr_seen[(size_t)it->producer * rr_per + it->index], 1),
          "producer %u's item %u popped twice", it->producer, it->index);
    CHECK((int64_t)it->index > last[it->producer],
          "producer %u: item %u popped after item %" PRId64, it->producer, it->index,
          last[it->producer]);
    last[it->producer] = it->index;
    atomic_fetch_add(&rr_taken, 1);
  }
  return NULL;
}

static void stress_ready_ring(void) {
  start_phase("ready_ring");
  rr_per = RR_PER_PRODUCER * (uint32_t)scale;
  rr_items = calloc((size_t)RR_PRODUCERS * rr_per, sizeof(*rr_items));
  rr_seen = calloc((size_t)RR_PRODUCERS * rr_per, sizeof(*rr_seen));
  if (!rr_items || !rr_seen) {
    fprintf(stderr, "stress_primitives: out of memory\n");
    exit(1);
  }
  weft_status st = weft_ready_ring_init(&rr, rr_cells, RR_CAP);
  if (st) {
    fprintf(stderr, "stress_primitives: %s\n", weft_error_message(st));
    exit(1);
  }
  pthread_t pt[RR_PRODUCERS], ct[RR_CONSUMERS];
  run_threads(RR_CONSUMERS, rr_consumer, ct);
  run_threads(RR_PRODUCERS, rr_producer, pt);
  join_threads(RR_PRODUCERS, pt);
  join_threads(RR_CONSUMERS, ct);
  uint64_t missing = 0;
  for (size_t i = 0; i < (size_t)RR_PRODUCERS * rr_per; i++) missing += !atomic_load(&rr_seen[i]);
  CHECK(missing == 0 || atomic_load(&failures), "%" PRIu64 " items never popped", missing);
  CHECK(weft_ready_ring_empty(&rr) && !weft_ready_ring_pop(&rr), "items left in the ring");
  free(rr_items);
  free((void *)rr_seen);
}

/* ---- handles ------------------------------------------------------------------ */

enum { HD_CLIENTS = 3, HD_LIVE = 6, HD_CYCLES = 30000, HD_SLOTS = 256, HD_RING = 64 };

static weft_allocator hd_alloc;
static weft_handles hd;
static _Atomic uint32_t hd_holder[HD_SLOTS + 1]; /* index + 1 -> client + 1 holding it */
static _Atomic uint32_t hd_gen[HD_SLOTS + 1];    /* the highest generation handed out */
static _Atomic uint64_t hd_published[HD_CLIENTS];
static weft_ready_ring hd_killed; /* clients -> owner: ids to recycle */
static weft_ready_cell hd_killed_cells[HD_RING];
static _Atomic int hd_clients_done;

static void *hd_client(void *arg) {
  uint32_t me = (uint32_t)(intptr_t)arg;
  uint64_t ids[HD_LIVE] = {0};
  for (int c = 0; c < HD_CYCLES * scale; c++) {
    int k = c % HD_LIVE;
    if (ids[k]) {
      uint64_t id = ids[k];
      atomic_store(&hd_holder[(uint32_t)id], 0);
      CHECK(weft_handles_kill(&hd, id), "a live handle could not be killed");
      CHECK(!weft_handles_lookup(&hd, id, NULL), "a killed handle looked up");
      CHECK(!weft_handles_kill(&hd, id), "a handle was killed twice");
      while (!weft_ready_ring_push(&hd_killed, (void *)(uintptr_t)id)) sched_yield();
      ids[k] = 0;
    }
    uint64_t value = ((uint64_t)me << 32) | (uint32_t)c, id = 0, v = 0;
    weft_status st = weft_handles_acquire(&hd, value, &id);
    CHECK(!st, "acquire failed: %s", weft_error_message(st));
    if (st) {
      weft_error_free(st);
      break;
    }
    uint32_t idx1 = (uint32_t)id, g = (uint32_t)(id >> 32), none = 0;
    CHECK(idx1 >= 1 && idx1 <= HD_SLOTS, "slot %u: freed slots were not reused", idx1);
    if (idx1 < 1 || idx1 > HD_SLOTS) break;
    CHECK(atomic_compare_exchange_strong(&hd_holder[idx1], &none, me + 1),
          "slot %u handed to client %u while client %u held it", idx1, me, none - 1);
    uint32_t prev = atomic_exchange(&hd_gen[idx1], g);
    CHECK(g & 1u, "a live handle with an even generation");
    CHECK(prev == 0 || (int32_t)(g - prev) > 0, "slot %u's generation went from %u to %u", idx1,
          prev, g);
    CHECK(weft_handles_lookup(&hd, id, &v) && v == value, "a new handle did not look up");
    ids[k] = id;
    atomic_store(&hd_published[me], id);
    uint32_t other = (me + 1) % HD_CLIENTS;
    uint64_t oid = atomic_load(&hd_published[other]);
    if (oid && weft_handles_lookup(&hd, oid, &v))
      CHECK(v >> 32 == other, "client %u's handle looked up to client %" PRIu64 "'s value", other,
            v >> 32);
  }
  for (int k = 0; k < HD_LIVE; k++)
    if (ids[k]) {
      atomic_store(&hd_holder[(uint32_t)ids[k]], 0);
      CHECK(weft_handles_kill(&hd, ids[k]), "a live handle could not be killed");
      while (!weft_ready_ring_push(&hd_killed, (void *)(uintptr_t)ids[k])) sched_yield();
    }
  atomic_fetch_add(&hd_clients_done, 1);
  return NULL;
}

/* The owner: the only thread that recycles, as the scheduler is. */
static void *hd_owner(void *arg) {
  (void)arg;
  for (;;) {
    void *x = weft_ready_ring_pop(&hd_killed);
    if (x) {
      uint64_t id = (uint64_t)(uintptr_t)x;
      CHECK(weft_handles_slot(&hd, id), "the owner cannot find a killed slot");
      CHECK(!weft_handles_lookup(&hd, id, NULL), "a handle sent for recycling is live");
      weft_handles_recycle(&hd, id);
      continue;
    }
    if (atomic_load(&hd_clients_done) == HD_CLIENTS && weft_ready_ring_empty(&hd_killed)) break;
    sched_yield();
  }
  return NULL;
}

static void stress_handles(void) {
  start_phase("handles");
  hd_alloc = weft_allocator_libc();
  weft_handles_init(&hd, &hd_alloc);
  hd.gen_base = 2654435761u * 3u; /* as a device's tag makes it */
  weft_status st = weft_ready_ring_init(&hd_killed, hd_killed_cells, HD_RING);
  if (st) {
    fprintf(stderr, "stress_primitives: %s\n", weft_error_message(st));
    exit(1);
  }
  pthread_t ct[HD_CLIENTS], ot;
  run_threads(1, hd_owner, &ot);
  run_threads(HD_CLIENTS, hd_client, ct);
  join_threads(HD_CLIENTS, ct);
  join_threads(1, &ot);
  uint32_t fresh = atomic_load(&hd.fresh);
  CHECK(fresh <= HD_SLOTS, "%u slots handed out for %u live handles", fresh, HD_CLIENTS * HD_LIVE);
  for (uint32_t i = 1; i <= fresh && i <= HD_SLOTS; i++) {
    uint32_t g = atomic_load(&hd_gen[i]);
    if (g) CHECK(!weft_handles_lookup(&hd, ((uint64_t)g << 32) | i, NULL), "slot %u still live", i);
  }
  weft_handles_destroy(&hd);
}

/* ---- eventcount ------------------------------------------------------------------ */

/* Four consumers: a notify_one that wakes one of several parked consumers
 * leaves the PARKED bit set for the others (core/sync.h). */
enum { EC_PRODUCERS = 2, EC_CONSUMERS = 4, EC_PER_PRODUCER = 10000 };

static weft_eventcount ec;
static bool ec_notify_all; /* this round: weft__ec_notify, else weft__ec_notify_one */
static _Atomic int64_t ec_work;
static _Atomic uint64_t ec_added, ec_taken, ec_parks;
static _Atomic int ec_done;

static bool ec_take(void) {
  int64_t w = atomic_load(&ec_work);
  while (w > 0)
    if (atomic_compare_exchange_weak(&ec_work, &w, w - 1)) return true;
  return false;
}

static void *ec_producer(void *arg) {
  int p = (int)(intptr_t)arg;
  int total = EC_PER_PRODUCER * scale;
  for (int i = 0; i < total;) {
    int n = 1 + (i + p) % 3;
    if (i + n > total) n = total - i;
    uint64_t upto = atomic_fetch_add(&ec_added, (uint64_t)n) + (uint64_t)n;
    atomic_fetch_add(&ec_work, n);
    for (int j = 0; j < n; j++) { /* one notification per item, as a queue's pushes make */
      if (ec_notify_all)
        weft__ec_notify(&ec);
      else
        weft__ec_notify_one(&ec);
    }
    i += n;
    /* Wait until everything added so far is taken (the consumers then park
     * again): a lost wake-up leaves work with every consumer parked, nothing
     * comes later to cover for it, and the watchdog fires. */
    while (atomic_load(&ec_taken) < upto) sched_yield();
  }
  return NULL;
}

static void *ec_consumer(void *arg) {
  (void)arg;
  for (;;) {
    if (ec_take()) {
      atomic_fetch_add(&ec_taken, 1);
      continue;
    }
    if (atomic_load(&ec_done)) return NULL;
    uint32_t k = weft__ec_prepare(&ec);
    if (atomic_load(&ec_work) > 0 || atomic_load(&ec_done)) {
      weft__ec_cancel(&ec);
      continue;
    }
    atomic_fetch_add(&ec_parks, 1);
    weft__ec_wait(&ec, k); /* untimed: a lost wake-up is the watchdog's */
  }
}

static void stress_eventcount(bool notify_all) {
  start_phase(notify_all ? "eventcount (notify)" : "eventcount (notify_one)");
  ec_notify_all = notify_all;
  atomic_init(&ec.epoch, 0);
  atomic_init(&ec.sleepers, 0);
  atomic_store(&ec_work, 0);
  atomic_store(&ec_added, 0);
  atomic_store(&ec_taken, 0);
  atomic_store(&ec_done, 0);
  pthread_t pt[EC_PRODUCERS], ct[EC_CONSUMERS];
  run_threads(EC_CONSUMERS, ec_consumer, ct);
  run_threads(EC_PRODUCERS, ec_producer, pt);
  join_threads(EC_PRODUCERS, pt);
  /* All work is taken: this last notify only lets the consumers leave. */
  atomic_store(&ec_done, 1);
  weft__ec_notify(&ec);
  join_threads(EC_CONSUMERS, ct);
  uint64_t want = (uint64_t)EC_PRODUCERS * EC_PER_PRODUCER * (uint64_t)scale;
  CHECK(atomic_load(&ec_taken) == want && atomic_load(&ec_work) == 0,
        "%" PRIu64 " of %" PRIu64 " work items taken", atomic_load(&ec_taken), want);
  CHECK(atomic_load(&ec.sleepers) == 0, "%u sleepers left", atomic_load(&ec.sleepers));
}

int main(int argc, char **argv) {
  if (argc > 1) scale = atoi(argv[1]);
  if (scale < 1 || scale > 1000) {
    fprintf(stderr, "usage: stress_primitives [scale 1..1000]\n");
    return 2;
  }
  signal(SIGALRM, on_alarm);
  stress_freelist();
  stress_inbox();
  stress_ready_ring();
  stress_handles();
  stress_eventcount(false);
  stress_eventcount(true);
  alarm(0);
  if (atomic_load(&failures)) {
    fprintf(stderr, "stress_primitives: %d failures\n", atomic_load(&failures));
    return 1;
  }
  printf("stress_primitives: ok (inbox consumer parked %" PRIu64 " times, eventcount consumers "
         "%" PRIu64 " times)\n",
         ib_parks, atomic_load(&ec_parks));
  return 0;
}
