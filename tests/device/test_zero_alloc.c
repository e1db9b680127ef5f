/* The steady-state launch path allocates nothing: commands come from the
 * device's free lists and the client threads' caches of them, the write
 * scope is pooled and payload-free, taint views hold one claim inline.
 * Proven with a counting allocator, from one producer and from four on four
 * crossing streams, in the scheduler mode WEFT_SCHEDULER selects (CTest runs
 * the suite in both).
 *
 * The warm-up does not depend on timing: every budget is filled once (each
 * stream held by a gated kernel, its producer parked in back-pressure), so
 * every pool that grows with the work in flight reaches the bound that
 * back-pressure puts on it; the smallest command class is made at open for
 * budgets this small (command.c). */
#include <criterion/criterion.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include <weft/weft.h>

#define OK(x) cr_assert_null((x))

static _Atomic int gate;
static _Atomic uint64_t calls;

static weft_status hold(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate)) sched_yield();
  return NULL;
}

/* o = x + y: 3 bindings (the smallest command class on 4 streams). */
static weft_status add(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const float *x = ctx->buffers[0], *y = ctx->buffers[1];
  float *o = ctx->buffers[2];
  o[0] = x[0] + y[0];
  atomic_fetch_add(&calls, 1);
  return NULL;
}

/* out[0] += 1; it binds (for reading) two buffers other producers'
 * streams write, so that the scheduler orders it against their work. */
static weft_status step(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint64_t *out = ctx->buffers[0];
  out[0] += 1;
  atomic_fetch_add(&calls, 1);
  return NULL;
}

static weft_device *open_counted(weft_counting_allocator **ca, weft_allocator *a, uint32_t cap) {
  OK(weft_counting_allocator_create(ca));
  *a = weft_counting_allocator_get(*ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = a;
  o.max_streams = 4;
  o.max_pending_commands = cap;
  weft_device *dev;
  OK(weft_device_open(&o, &dev));
  return dev;
}

/* Opens the gate once |parked| clients have waited in back-pressure. */
typedef struct opener {
  weft_device *dev;
  uint64_t parked;
} opener;

static void *open_gate_when_parked(void *arg) {
  opener *o = arg;
  weft_device_stats st = {0};
  do {
    sched_yield();
    OK(weft_device_stats_get(o->dev, &st));
  } while (st.backpressure_waits < o->parked);
  atomic_store(&gate, 1);
  return NULL;
}

/* |traced|: recording a trace from the start (its ring allocated at begin,
 * nothing per event), written at the end. */
static void one_producer(bool traced) {
  enum { CAP = 128, BATCH = 100, N = 100000 };
  weft_counting_allocator *ca;
  weft_allocator a;
  weft_device *dev = open_counted(&ca, &a, CAP);
  if (traced) OK(weft_trace_begin(dev, 0));
  weft_kernel kh, k;
  OK(weft_kernel_host(dev, "hold", hold, NULL, &kh));
  OK(weft_kernel_host(dev, "add", add, NULL, &k));
  weft_buffer b[3];
  for (int i = 0; i < 3; i++) OK(weft_buffer_create(dev, 0, 64, &b[i]));
  float one = 1;
  OK(weft_buffer_write(dev, 0, b[0], 0, &one, sizeof(one)));
  OK(weft_buffer_write(dev, 0, b[1], 0, &one, sizeof(one)));
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd[3] = {{b[0], 0, WEFT_WHOLE, WEFT_READ},
                        {b[1], 0, WEFT_WHOLE, WEFT_READ},
                        {b[2], 0, WEFT_WHOLE, WEFT_WRITE}};
  /* Warm-up: the held stream's budget filled (this thread parks), then the
   * measured workload once. */
  atomic_store(&gate, 0);
  atomic_store(&calls, 0);
  opener op = {dev, 1};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, open_gate_when_parked, &op), 0);
  OK(weft_launch(dev, 0, kh, g, g, NULL, 0, NULL, 0));
  for (int i = 0; i < 2 * CAP; i++) OK(weft_launch(dev, 0, k, g, g, bd, 3, NULL, 0));
  pthread_join(t, NULL);
  OK(weft_sync(dev, 0));
  for (int i = 0; i < N / BATCH; i++) {
    for (int j = 0; j < BATCH; j++) OK(weft_launch(dev, 0, k, g, g, bd, 3, NULL, 0));
    OK(weft_sync(dev, 0));
  }
  weft_device_stats st = {0};
  OK(weft_device_stats_get(dev, &st));
  weft_alloc_counts before = weft_counting_allocator_counts(ca);
  for (int i = 0; i < N / BATCH; i++) {
    for (int j = 0; j < BATCH; j++) OK(weft_launch(dev, 0, k, g, g, bd, 3, NULL, 0));
    OK(weft_sync(dev, 0));
  }
  OK(weft_device_stats_get(dev, &st));
  weft_alloc_counts after = weft_counting_allocator_counts(ca);
  cr_assert_eq(after.allocs, before.allocs, "%llu allocations over %d launches once warm",
               (unsigned long long)(after.allocs - before.allocs), N);
  cr_assert_eq(atomic_load(&calls), (uint64_t)(2 * CAP + 2 * N));
  cr_assert_eq(st.launches_failed + st.launches_skipped, 0);
  cr_assert_leq(st.pending_peak, (uint64_t)CAP, "peak %llu over a cap of %d",
                (unsigned long long)st.pending_peak, CAP);
  float got = 0;
  OK(weft_buffer_read(dev, 0, b[2], 0, &got, sizeof(got)));
  cr_assert_eq(got, 2.0f);
  if (traced) {
    char path[64];
    snprintf(path, sizeof(path), "/tmp/weft-zero-alloc-%d.json", (int)getpid());
    OK(weft_trace_end(dev, path));
    remove(path);
  }
  weft_device_close(dev);
  cr_assert_eq(weft_counting_allocator_counts(ca).live_blocks, 0);
  weft_counting_allocator_destroy(ca);
}

Test(zero_alloc, one_hundred_thousand_launches_allocate_nothing_once_warm, .timeout = 120) {
  one_producer(false);
}

Test(zero_alloc, a_traced_run_allocates_nothing_per_event, .timeout = 120) {
  one_producer(true);
}

/* ---- four producers on four crossing streams ---------------------------------------------- */

enum { P = 4, CAP4 = 64, BATCH4 = 50, WARM_ROUNDS = 40, ROUNDS = 400 };

typedef struct producer {
  weft_device *dev;
  weft_kernel k;
  weft_buffer *b; /* [P]: b[i] is written on stream i */
  uint32_t i;
  pthread_barrier_t *phase;
  uint64_t launched;
} producer;

/* Producer i's launch writes b[i] on stream i and reads b[i+1] and b[i+2],
 * which the next two producers' streams write: every launch orders against
 * other streams' work. */
static void launch_step(producer *p) {
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd[3] = {{p->b[p->i], 0, WEFT_WHOLE, WEFT_READ_WRITE},
                        {p->b[(p->i + 1) % P], 0, WEFT_WHOLE, WEFT_READ},
                        {p->b[(p->i + 2) % P], 0, WEFT_WHOLE, WEFT_READ}};
  OK(weft_launch(p->dev, p->i, p->k, g, g, bd, 3, NULL, 0));
  p->launched++;
}

static void rounds(producer *p, int n) {
  for (int r = 0; r < n; r++) {
    for (int j = 0; j < BATCH4; j++) launch_step(p);
    OK(weft_sync(p->dev, p->i));
  }
}

static void *produce(void *arg) {
  producer *p = arg;
  /* Warm-up 1: twice the budget behind the held stream (this thread parks). */
  for (int j = 0; j < 2 * CAP4; j++) launch_step(p);
  OK(weft_sync(p->dev, p->i));
  /* Warm-up 2: the measured workload, then the measure between barriers. */
  rounds(p, WARM_ROUNDS);
  pthread_barrier_wait(p->phase);
  pthread_barrier_wait(p->phase);
  rounds(p, ROUNDS);
  pthread_barrier_wait(p->phase);
  return NULL;
}

Test(zero_alloc, four_producers_on_four_crossing_streams_allocate_nothing_once_warm,
     .timeout = 120) {
  weft_counting_allocator *ca;
  weft_allocator a;
  weft_device *dev = open_counted(&ca, &a, CAP4);
  weft_kernel kh, k;
  OK(weft_kernel_host(dev, "hold", hold, NULL, &kh));
  OK(weft_kernel_host(dev, "step", step, NULL, &k));
  weft_buffer b[P];
  uint64_t zero = 0;
  for (uint32_t i = 0; i < P; i++) {
    OK(weft_buffer_create(dev, i, sizeof(uint64_t), &b[i]));
    OK(weft_buffer_write(dev, i, b[i], 0, &zero, sizeof(zero)));
  }
  const uint32_t g[3] = {1, 1, 1};
  atomic_store(&gate, 0);
  atomic_store(&calls, 0);
  for (uint32_t i = 0; i < P; i++) OK(weft_launch(dev, i, kh, g, g, NULL, 0, NULL, 0));
  pthread_barrier_t phase;
  pthread_barrier_init(&phase, NULL, P + 1);
  producer p[P];
  pthread_t t[P];
  for (uint32_t i = 0; i < P; i++) {
    p[i] = (producer){.dev = dev, .k = k, .b = b, .i = i, .phase = &phase};
    cr_assert_eq(pthread_create(&t[i], NULL, produce, &p[i]), 0);
  }
  opener op = {dev, P}; /* every producer parked behind its held stream */
  open_gate_when_parked(&op);
  pthread_barrier_wait(&phase); /* warm */
  weft_alloc_counts before = weft_counting_allocator_counts(ca);
  pthread_barrier_wait(&phase); /* go */
  pthread_barrier_wait(&phase); /* done */
  weft_alloc_counts after = weft_counting_allocator_counts(ca);
  for (uint32_t i = 0; i < P; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&phase);
  cr_assert_eq(after.allocs, before.allocs, "%llu allocations over %d launches once warm",
               (unsigned long long)(after.allocs - before.allocs), P * ROUNDS * BATCH4);
  weft_device_stats st = {0};
  OK(weft_device_stats_get(dev, &st));
  cr_assert_eq(st.launches_failed + st.launches_skipped, 0);
  cr_assert_gt(st.cross_stream_waits, 0, "the streams never waited for one another");
  cr_assert_leq(st.pending_peak, (uint64_t)CAP4, "peak %llu over a cap of %d",
                (unsigned long long)st.pending_peak, CAP4);
  uint64_t total = 0;
  for (uint32_t i = 0; i < P; i++) {
    uint64_t got = 0;
    OK(weft_buffer_read(dev, i, b[i], 0, &got, sizeof(got)));
    cr_assert_eq(got, p[i].launched, "stream %u: %llu of %llu launches ran", i,
                 (unsigned long long)got, (unsigned long long)p[i].launched);
    total += p[i].launched;
  }
  cr_assert_eq(atomic_load(&calls), total);
  weft_device_close(dev);
  cr_assert_eq(weft_counting_allocator_counts(ca).live_blocks, 0);
  weft_counting_allocator_destroy(ca);
}
