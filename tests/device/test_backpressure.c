/* Back-pressure: a client past max_pending_commands waits until the
 * scheduler catches up; nothing is dropped, the device never stalls, and the
 * device's own threads (workers) never wait. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"

#define OK(x) cr_assert_null((x))

static _Atomic uint64_t calls;

static weft_status inc(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint64_t *x = ctx->buffers[0];
  x[0]++;
  for (volatile int i = 0; i < 200; i++) {
  }
  atomic_fetch_add(&calls, 1);
  return NULL;
}

typedef struct producer {
  weft_device *dev;
  weft_kernel k;
  weft_buffer b;
  weft_stream_id stream;
  int n;
} producer;

static void *produce(void *arg) {
  producer *p = arg;
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd = {p->b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (int i = 0; i < p->n; i++) OK(weft_launch(p->dev, p->stream, p->k, g, g, &bd, 1, NULL, 0));
  return NULL;
}

static weft_device *open_capped(weft_counting_allocator **ca, weft_allocator *a, uint32_t cap) {
  OK(weft_counting_allocator_create(ca));
  *a = weft_counting_allocator_get(*ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = a;
  o.max_pending_commands = cap;
  weft_device *dev;
  OK(weft_device_open(&o, &dev));
  return dev;
}

static void close_capped(weft_device *dev, weft_counting_allocator *ca) {
  weft_device_close(dev);
  cr_assert_eq(weft_counting_allocator_counts(ca).live_blocks, 0);
  weft_counting_allocator_destroy(ca);
  ASSERT_NO_LEAKS();
}

Test(backpressure, eight_producers_over_a_small_cap_lose_nothing, .timeout = 120) {
  enum { P = 8, N = 4000, CAP = 32 };
  weft_counting_allocator *ca;
  weft_allocator a;
  weft_device *dev = open_capped(&ca, &a, CAP);
  weft_kernel k;
  OK(weft_kernel_host(dev, "inc", inc, NULL, &k));
  producer p[P];
  pthread_t t[P];
  atomic_store(&calls, 0);
  for (int i = 0; i < P; i++) {
    p[i] = (producer){.dev = dev, .k = k, .stream = (weft_stream_id)i, .n = N};
    OK(weft_buffer_create(dev, p[i].stream, sizeof(uint64_t), &p[i].b));
    uint64_t zero = 0;
    OK(weft_buffer_write(dev, p[i].stream, p[i].b, 0, &zero, sizeof(zero)));
  }
  for (int i = 0; i < P; i++) cr_assert_eq(pthread_create(&t[i], NULL, produce, &p[i]), 0);
  for (int i = 0; i < P; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < P; i++) {
    uint64_t got = 0;
    OK(weft_buffer_read(dev, p[i].stream, p[i].b, 0, &got, sizeof(got)));
    cr_assert_eq(got, (uint64_t)N, "producer %d: %llu of %d launches ran", i,
                 (unsigned long long)got, N);
  }
  weft_device_stats st = {0};
  OK(weft_device_stats_get(dev, &st));
  cr_assert_eq(atomic_load(&calls), (uint64_t)P * N);
  /* Producers that saw room at the same moment may overshoot by one each. */
  cr_assert_leq(st.pending_peak, (uint64_t)CAP + P + 2, "peak %llu over a cap of %d",
                (unsigned long long)st.pending_peak, CAP);
  cr_assert_gt(st.backpressure_waits, 0, "8 producers on 2 cores never hit a cap of 32?");
  close_capped(dev, ca);
}

/* A kernel that submits to its own device: its worker must not wait for
 * room, since it is what the device needs to make room. */
static weft_device *self_dev;
static weft_kernel self_inc;
static weft_buffer self_buf;

static weft_status submit_more(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd = {self_buf, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (int i = 0; i < 64; i++) {
    weft_status st = weft_launch(self_dev, 1, self_inc, g, g, &bd, 1, NULL, 0);
    if (st) return st;
  }
  return NULL;
}

Test(backpressure, a_worker_submitting_to_its_own_device_never_waits, .timeout = 60) {
  weft_counting_allocator *ca;
  weft_allocator a;
  weft_device *dev = open_capped(&ca, &a, 4);
  self_dev = dev;
  weft_kernel more;
  OK(weft_kernel_host(dev, "inc", inc, NULL, &self_inc));
  OK(weft_kernel_host(dev, "submit_more", submit_more, NULL, &more));
  OK(weft_buffer_create(dev, 1, sizeof(uint64_t), &self_buf));
  uint64_t zero = 0;
  OK(weft_buffer_write(dev, 1, self_buf, 0, &zero, sizeof(zero)));
  const uint32_t g[3] = {1, 1, 1};
  for (int i = 0; i < 8; i++) OK(weft_launch(dev, 0, more, g, g, NULL, 0, NULL, 0));
  OK(weft_sync(dev, 0));
  OK(weft_sync(dev, 1));
  uint64_t got = 0;
  OK(weft_buffer_read(dev, 1, self_buf, 0, &got, sizeof(got)));
  cr_assert_eq(got, 8 * 64);
  close_capped(dev, ca);
}

/* ---- budgets per stream ---------------------------------------------------------------- */

static _Atomic int gate_open;

static weft_status wait_for_gate(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate_open)) sched_yield();
  return NULL;
}

typedef struct flooder {
  producer p;
  _Atomic int done;
} flooder;

static void *flood(void *arg) {
  flooder *f = arg;
  produce(&f->p);
  atomic_store(&f->done, 1);
  return NULL;
}

static uint64_t read_u64(weft_device *dev, weft_stream_id s, weft_buffer b) {
  uint64_t got = 0;
  OK(weft_buffer_read(dev, s, b, 0, &got, sizeof(got)));
  return got;
}

/* A kernel blocks stream 0 and a client fills stream 0's budget behind it
 * (it parks): launches on stream 1 still run, while the kernel is blocked. */
Test(backpressure, an_unrelated_stream_keeps_flowing_while_another_is_blocked, .timeout = 60) {
  enum { CAP = 64, N1 = 1000 };
  weft_counting_allocator *ca;
  weft_allocator a;
  weft_device *dev = open_capped(&ca, &a, CAP);
  weft_kernel k, gk;
  OK(weft_kernel_host(dev, "inc", inc, NULL, &k));
  OK(weft_kernel_host(dev, "gate", wait_for_gate, NULL, &gk));
  atomic_store(&gate_open, 0);
  flooder f = {.p = {.dev = dev, .k = k, .stream = 0, .n = 4 * CAP}};
  weft_buffer b1;
  OK(weft_buffer_create(dev, 0, sizeof(uint64_t), &f.p.b));
  OK(weft_buffer_create(dev, 1, sizeof(uint64_t), &b1));
  uint64_t zero = 0;
  OK(weft_buffer_write(dev, 0, f.p.b, 0, &zero, sizeof(zero)));
  OK(weft_buffer_write(dev, 1, b1, 0, &zero, sizeof(zero)));
  OK(weft_sync(dev, 0));
  OK(weft_sync(dev, 1));
  const uint32_t g[3] = {1, 1, 1};
  OK(weft_launch(dev, 0, gk, g, g, NULL, 0, NULL, 0));
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, flood, &f), 0);
  weft_device_stats st = {0};
  do { /* the flooder parks: stream 0's budget is full */
    sched_yield();
    OK(weft_device_stats_get(dev, &st));
  } while (st.backpressure_waits == 0);
  producer p1 = {.dev = dev, .k = k, .b = b1, .stream = 1, .n = N1};
  produce(&p1);
  OK(weft_sync(dev, 1));
  cr_assert_eq(read_u64(dev, 1, b1), (uint64_t)N1);
  cr_assert_eq(atomic_load(&f.done), 0, "stream 0 was never blocked");
  cr_assert_eq(atomic_load(&gate_open), 0);
  atomic_store(&gate_open, 1);
  pthread_join(t, NULL);
  cr_assert_eq(read_u64(dev, 0, f.p.b), (uint64_t)4 * CAP);
  OK(weft_device_stats_get(dev, &st));
  cr_assert_leq(st.pending_peak, (uint64_t)CAP + 2,
                "one stream held %llu commands over a cap of %d",
                (unsigned long long)st.pending_peak, CAP);
  OK(weft_buffer_release(dev, f.p.b));
  OK(weft_buffer_release(dev, b1));
  close_capped(dev, ca);
}

/* ---- task graphs against the budget ---------------------------------------------------- */

typedef struct graph_submitter {
  weft_device *dev;
  weft_kernel k;
  weft_buffer b;
  uint32_t nodes;
  int rounds;
} graph_submitter;

static void *submit_graphs(void *arg) {
  graph_submitter *s = arg;
  weft_taskgraph *g;
  OK(weft_taskgraph_create(s->dev, &g));
  const uint32_t one3[3] = {1, 1, 1};
  weft_binding bd = {s->b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (uint32_t i = 0; i < s->nodes; i++)
    OK(weft_taskgraph_add_launch(g, s->k, one3, one3, &bd, 1, NULL, 0, NULL));
  for (int r = 0; r < s->rounds; r++) OK(weft_taskgraph_submit(g, 0));
  weft_taskgraph_destroy(g);
  return NULL;
}

/* Three submitters of graphs larger than the budget: one that waited for
 * room while holding commands it had not pushed would wait, with the
 * others, for room only their pushes could make. */
Test(backpressure, three_graph_submitters_over_a_small_budget_never_deadlock, .timeout = 120) {
  enum { S = 3, ROUNDS = 40 };
  for (uint32_t cap = 64; cap <= 512; cap *= 2) {
    weft_counting_allocator *ca;
    weft_allocator a;
    weft_device *dev = open_capped(&ca, &a, cap);
    weft_kernel k;
    OK(weft_kernel_host(dev, "inc", inc, NULL, &k));
    graph_submitter s[S];
    pthread_t t[S];
    for (int i = 0; i < S; i++) {
      s[i] = (graph_submitter){.dev = dev, .k = k, .nodes = 2 * cap, .rounds = ROUNDS};
      OK(weft_buffer_create(dev, 0, sizeof(uint64_t), &s[i].b));
      uint64_t zero = 0;
      OK(weft_buffer_write(dev, 0, s[i].b, 0, &zero, sizeof(zero)));
    }
    for (int i = 0; i < S; i++) cr_assert_eq(pthread_create(&t[i], NULL, submit_graphs, &s[i]), 0);
    for (int i = 0; i < S; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < S; i++) {
      cr_assert_eq(read_u64(dev, 0, s[i].b), (uint64_t)ROUNDS * 2 * cap,
                   "cap %u, submitter %d: launches lost", cap, i);
      OK(weft_buffer_release(dev, s[i].b));
    }
    close_capped(dev, ca);
  }
}
