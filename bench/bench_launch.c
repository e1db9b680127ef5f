/* Launch cost: no-op launches from submit to completion, on weft and on the
 * naive mutex + condvar queue of baseline_queue.c, which calls the very same
 * no-op function.
 *
 * One operation = one launch (or one baseline task). A run submits all its
 * operations, then waits for completion (weft_sync / bq_sync), and reports
 * the elapsed time of the whole: ns/op is the amortized cost of moving one
 * launch through submit -> schedule -> run -> complete, pipelined as a client
 * that submits a burst and then waits would see it.
 *
 * 4-producer benchmarks: ns/op = wall time (first producer's start to last
 * producer's end, its sync included) / launches of all producers. weft runs
 * streams 0..3 of one device (max_streams 4: four stream workers behind one
 * scheduler thread); the baseline it is compared to gives each producer its
 * own queue and worker (four "streams", each in order, as weft's are). The
 * informational row baseline_mutex_condvar_4producers_1queue shares one
 * queue and one worker among the four producers. */
#include <stdatomic.h>
#include <stdlib.h>

#include "bench/baseline_queue.h"
#include "bench/harness.h"

#define NPRODUCERS         4u
#define SMALL_BUFFER_BYTES 256u

/* The no-op both sides run. */
static weft_status noop_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return NULL;
}

static const uint32_t one3[3] = {1, 1, 1};

/* ---- weft ----------------------------------------------------------------------------------- */

typedef struct wl_state {
  weft_device *dev;
  weft_kernel kernel;
  bool with_binding;
  weft_buffer buf;           /* with_binding: a small buffer, bound READ_WRITE */
  _Atomic uint64_t launched; /* launches accepted, warm-up included */
} wl_state;

static void launch_one(wl_state *s, weft_stream_id stream) {
  weft_binding b = {.buffer = s->buf, .offset = 0, .size = WEFT_WHOLE, .access = WEFT_READ_WRITE};
  wb_check(weft_launch(s->dev, stream, s->kernel, one3, one3, s->with_binding ? &b : NULL,
                       s->with_binding ? 1 : 0, NULL, 0),
           "weft_launch");
}

/* arg: the streams to warm up, | WITH_BINDING for a READ_WRITE binding per launch. */
#define WITH_BINDING 0x100

/* A device with default options (max_streams 4 at least: the 4-producer
 * benchmark needs four slots); streams 0..nstreams-1 are warmed up. */
static void wl_setup(void **state, wb_ctx *c) {
  uint32_t nstreams = (uint32_t)wb_arg(c) & 0xffu;
  bool with_binding = wb_arg(c) & WITH_BINDING;
  wl_state *s = wb_calloc(1, sizeof(*s));
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_HOST;
  if (o.max_streams < NPRODUCERS) o.max_streams = NPRODUCERS;
  wb_check(weft_device_open(&o, &s->dev), "weft_device_open");
  wb_check(weft_kernel_host(s->dev, "noop", noop_kernel, NULL, &s->kernel), "weft_kernel_host");
  s->with_binding = with_binding;
  if (with_binding) {
    wb_check(weft_buffer_create(s->dev, 0, SMALL_BUFFER_BYTES, &s->buf), "weft_buffer_create");
    unsigned char zero[SMALL_BUFFER_BYTES] = {0};
    wb_check(weft_buffer_write(s->dev, 0, s->buf, 0, zero, sizeof(zero)), "weft_buffer_write");
  }
  /* Bring every stream to life (its worker thread starts on first use). */
  for (uint32_t i = 0; i < nstreams; i++) {
    launch_one(s, i);
    wb_check(weft_sync(s->dev, i), "weft_sync");
  }
  atomic_init(&s->launched, nstreams);
  *state = s;
}

static uint64_t wl_run_1stream(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  wl_state *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) launch_one(s, 0);
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  uint64_t t1 = wb_now_ns();
  atomic_fetch_add(&s->launched, n);
  return t1 - t0;
}

static void wl_producer(void *state, unsigned idx, uint64_t count) {
  wl_state *s = state;
  for (uint64_t i = 0; i < count; i++) launch_one(s, idx);
  wb_check(weft_sync(s->dev, idx), "weft_sync");
  atomic_fetch_add(&s->launched, count);
}

static uint64_t wl_run_4producers(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  return wb_run_threads(NPRODUCERS, n, wl_producer, state);
}

/* Checks that every launch ran, and nothing failed or was skipped. */
static void wl_teardown(void *state, wb_ctx *c) {
  (void)c;
  wl_state *s = state;
  weft_device_stats st = {0};
  wb_check(weft_device_stats_get(s->dev, &st), "weft_device_stats_get");
  uint64_t launched = atomic_load(&s->launched);
  if (st.launches_run != launched || st.launches_failed || st.launches_skipped)
    wb_fatal("weft ran %llu of %llu launches (%llu failed, %llu skipped)",
             (unsigned long long)st.launches_run, (unsigned long long)launched,
             (unsigned long long)st.launches_failed, (unsigned long long)st.launches_skipped);
  if (s->with_binding) wb_check(weft_buffer_release(s->dev, s->buf), "weft_buffer_release");
  weft_device_close(s->dev);
  free(s);
}

/* ---- baseline ------------------------------------------------------------------------------- */

typedef struct base_state {
  unsigned nqueues;
  bq_queue *q[NPRODUCERS];
  _Atomic uint64_t submitted;
} base_state;

/* arg: the queues, one worker each. */
static void base_setup(void **state, wb_ctx *c) {
  base_state *s = wb_calloc(1, sizeof(*s));
  s->nqueues = (unsigned)wb_arg(c);
  for (unsigned i = 0; i < s->nqueues; i++) s->q[i] = bq_create();
  atomic_init(&s->submitted, 0);
  *state = s;
}

static uint64_t base_run_1stream(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  base_state *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) bq_submit(s->q[0], noop_kernel, NULL);
  bq_sync(s->q[0]);
  uint64_t t1 = wb_now_ns();
  atomic_fetch_add(&s->submitted, n);
  return t1 - t0;
}

static void base_producer(void *state, unsigned idx, uint64_t count) {
  base_state *s = state;
  bq_queue *q = s->q[idx % s->nqueues];
  for (uint64_t i = 0; i < count; i++) bq_submit(q, noop_kernel, NULL);
  bq_sync(q);
  atomic_fetch_add(&s->submitted, count);
}

static uint64_t base_run_4producers(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  return wb_run_threads(NPRODUCERS, n, base_producer, state);
}

static void base_teardown(void *state, wb_ctx *c) {
  (void)c;
  base_state *s = state;
  uint64_t done = 0, failed = 0;
  for (unsigned i = 0; i < s->nqueues; i++) {
    done += bq_completed(s->q[i]);
    failed += bq_failed(s->q[i]);
    bq_destroy(s->q[i]);
  }
  uint64_t submitted = atomic_load(&s->submitted);
  if (done != submitted || failed)
    wb_fatal("the baseline ran %llu of %llu tasks (%llu failed)", (unsigned long long)done,
             (unsigned long long)submitted, (unsigned long long)failed);
  free(s);
}

/* ---- registration --------------------------------------------------------------------------- */

#define ITERS_1STREAM    200000u
#define ITERS_4PRODUCERS 200000u

static const wb_bench benches[] = {
    {.name = "launch_noop_1stream",
     .description = "weft: no-op host launch (grid 1,1,1, no bindings) on one stream, "
                    "submit to completion",
     .baseline = "baseline_mutex_condvar_1stream",
     .iterations = ITERS_1STREAM,
     .arg = 1,
     .setup = wl_setup,
     .run = wl_run_1stream,
     .teardown = wl_teardown},
    {.name = "launch_noop_1stream_1binding",
     .description =
         "weft: as launch_noop_1stream, with one READ_WRITE binding of a 256-byte buffer",
     .baseline = "baseline_mutex_condvar_1stream",
     .iterations = ITERS_1STREAM,
     .arg = 1 | WITH_BINDING,
     .setup = wl_setup,
     .run = wl_run_1stream,
     .teardown = wl_teardown},
    {.name = "baseline_mutex_condvar_1stream",
     .description = "naive queue: mutex+condvar FIFO, malloc per task, one worker; one producer",
     .iterations = ITERS_1STREAM,
     .arg = 1,
     .setup = base_setup,
     .run = base_run_1stream,
     .teardown = base_teardown},
    {.name = "launch_noop_4producers",
     .description = "weft: 4 client threads, each launching no-ops on its own stream (0..3) of "
                    "one device",
     .baseline = "baseline_mutex_condvar_4producers",
     .iterations = ITERS_4PRODUCERS,
     .arg = NPRODUCERS,
     .setup = wl_setup,
     .run = wl_run_4producers,
     .teardown = wl_teardown},
    {.name = "baseline_mutex_condvar_4producers",
     .description = "naive queue: 4 producers, each with its own mutex+condvar queue and worker",
     .iterations = ITERS_4PRODUCERS,
     .arg = NPRODUCERS,
     .setup = base_setup,
     .run = base_run_4producers,
     .teardown = base_teardown},
    {.name = "baseline_mutex_condvar_4producers_1queue",
     .description = "naive queue: 4 producers sharing one mutex+condvar queue and one worker",
     .iterations = ITERS_4PRODUCERS,
     .arg = 1,
     .setup = base_setup,
     .run = base_run_4producers,
     .teardown = base_teardown},
};

void wb_register_launch(void) {
  for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) wb_register(&benches[i]);
}
