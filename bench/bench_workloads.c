/* Scheduler workloads (issue 5): what a launch costs weft in four shapes of
 * work, each against the naive mutex + condvar executor of baseline_queue.c
 * doing the same work in the same run. See docs/benchmarks.md, "Scheduler
 * workloads".
 *
 *   sched_w1_chain        one stream; launch k reads the 8-byte buffer launch
 *                         k-1 wrote and writes the other one (ping-pong of two
 *                         buffers; body: out = in + 1); submit to completion
 *   sched_w2_independent  one client thread, launches round-robin over
 *                         streams 0..3; stream s only touches its own buffer
 *                         (READ_WRITE, body: ++*p); submit to completion
 *   sched_w3_fan          layers of 8 launches; launch j of layer L reads
 *                         buffers j and j+1 (mod 8) of layer L-1 and writes its
 *                         own buffer j (double-buffered sets; body: out = a +
 *                         2b + 1), on stream (j + 2L) mod 4, so that both of
 *                         its inputs come from other streams; submit to
 *                         completion
 *   sched_w4_submit_Np    time inside weft_launch alone (no completion), from
 *                         1, 2 or 4 client threads, each on its own stream with
 *                         W2's launch; a producer times chunks of W4_CHUNK calls
 *                         and drains its stream (untimed) between chunks
 *
 * Every run checks what the kernels computed (blocking reads after the
 * timed part) against a host model of the same arithmetic, on both sides.
 * One operation = one launch (one baseline task). The "sched_workloads"
 * report section gives the cross-stream waits issued and elided and the
 * back-pressure waits (weft_device_stats_get deltas over the runs) and every
 * workload against its target (informational). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench/baseline_queue.h"
#include "bench/harness.h"

void wb_register_workloads(void); /* called by bench/main.c */

#define NSTREAMS  4u
#define FAN_WIDTH 8u
#define W4_CHUNK  4096u /* weft_launch calls per timed chunk of a W4 producer */

#define ITERS_CHAIN       1000000u
#define ITERS_INDEPENDENT 1000000u
#define ITERS_FAN         200000u /* scaled down: the baseline's layer barrier, ~6 us a task */
#define ITERS_SUBMIT      1000000u

static const uint32_t one3[3] = {1, 1, 1};

/* ---- the benchmarks, their summaries for the section ------------------------------------- */

enum {
  B_CHAIN,
  B_CHAIN_BASE,
  B_INDEP,
  B_INDEP_BASE,
  B_FAN,
  B_FAN_BASE,
  B_SUB1,
  B_SUB1_BASE,
  B_SUB2,
  B_SUB2_BASE,
  B_SUB4,
  B_SUB4_BASE,
  /* the same weft workloads with the combining scheduler */
  B_CHAIN_C,
  B_INDEP_C,
  B_FAN_C,
  B_SUB1_C,
  NBENCH
};

static const char *const bench_names[NBENCH] = {"sched_w1_chain",
                                                "baseline_w1_chain",
                                                "sched_w2_independent",
                                                "baseline_w2_independent",
                                                "sched_w3_fan",
                                                "baseline_w3_fan",
                                                "sched_w4_submit_1producer",
                                                "baseline_w4_submit_1producer",
                                                "sched_w4_submit_2producers",
                                                "baseline_w4_submit_2producers",
                                                "sched_w4_submit_4producers",
                                                "baseline_w4_submit_4producers",
                                                "sched_w1_chain_combining",
                                                "sched_w2_independent_combining",
                                                "sched_w3_fan_combining",
                                                "sched_w4_submit_1producer_combining"};

static bool combining(int id) {
  return id >= B_CHAIN_C;
}

/* What one benchmark did over all its runs (warm-up runs included). */
typedef struct summary {
  bool ran;
  uint64_t runs, ops;
  uint64_t waits, elided; /* weft: cross-stream waits, stats deltas over the runs */
  uint64_t bp_waits;      /* weft: back-pressure waits of the clients, the same way */
  uint64_t pending_peak;  /* weft: stats.pending_peak after the latest run */
  double *samples;        /* ns/op of every run, in order */
  size_t nsamples, cap;
} summary;

static summary sums[NBENCH];

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p) wb_fatal("out of memory (%zu x %zu bytes)", n, size);
  return p;
}

static void record(int id, uint64_t ns, uint64_t ops) {
  summary *s = &sums[id];
  if (s->nsamples == s->cap) {
    size_t nc = s->cap ? s->cap * 2 : 16;
    double *v = realloc(s->samples, nc * sizeof(double));
    if (!v) wb_fatal("out of memory for samples");
    s->samples = v;
    s->cap = nc;
  }
  s->samples[s->nsamples++] = (double)ns / (double)ops;
  s->ran = true;
  s->runs++;
  s->ops += ops;
}

/* ---- the kernels' arithmetic, shared by both sides --------------------------------------- */

static inline void chain_step(const void *in, void *out) {
  uint64_t v;
  memcpy(&v, in, sizeof(v));
  v++;
  memcpy(out, &v, sizeof(v));
}

static inline void indep_step(void *p) {
  uint64_t v;
  memcpy(&v, p, sizeof(v));
  v++;
  memcpy(p, &v, sizeof(v));
}

static inline uint64_t fan_value(uint64_t a, uint64_t b) {
  return a + 2u * b + 1u; /* wraps: order-sensitive and cheap */
}

static inline void fan_step(const void *a, const void *b, void *out) {
  uint64_t x, y;
  memcpy(&x, a, sizeof(x));
  memcpy(&y, b, sizeof(y));
  uint64_t v = fan_value(x, y);
  memcpy(out, &v, sizeof(v));
}

/* weft host kernels: bindings in launch order. */
static weft_status chain_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  chain_step(ctx->buffers[0], ctx->buffers[1]);
  return NULL;
}

static weft_status indep_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  indep_step(ctx->buffers[0]);
  return NULL;
}

static weft_status fan_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  fan_step(ctx->buffers[0], ctx->buffers[1], ctx->buffers[2]);
  return NULL;
}

/* Baseline tasks: the baseline has no buffers, |user| points at the operands. */
typedef struct task_args {
  const uint64_t *a, *b;
  uint64_t *out;
} task_args;

static weft_status chain_task(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  const task_args *t = user;
  chain_step(t->a, t->out);
  return NULL;
}

static weft_status indep_task(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  indep_step(user);
  return NULL;
}

static weft_status fan_task(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  const task_args *t = user;
  fan_step(t->a, t->b, t->out);
  return NULL;
}

/* The host model of W3: model[set][j]; layer L writes set L % 2. */
typedef struct fan_pos {
  uint64_t layer; /* the layer being launched (1-based: layer 0 is the initial values) */
  uint32_t j;     /* the next launch in it */
} fan_pos;

static uint32_t fan_stream(uint64_t layer, uint32_t j) {
  return (uint32_t)((j + 2u * layer) % NSTREAMS);
}

static void fan_model_step(uint64_t model[2][FAN_WIDTH], fan_pos *p) {
  uint32_t cur = (uint32_t)(p->layer % 2u), prev = cur ^ 1u;
  model[cur][p->j] = fan_value(model[prev][p->j], model[prev][(p->j + 1u) % FAN_WIDTH]);
  if (++p->j == FAN_WIDTH) {
    p->j = 0;
    p->layer++;
  }
}

static void fan_model_init(uint64_t model[2][FAN_WIDTH]) {
  for (uint32_t j = 0; j < FAN_WIDTH; j++) {
    model[0][j] = 1000u + j; /* layer 0 */
    model[1][j] = 0;
  }
}

/* Of the |n| launches round-robin over NSTREAMS from index |first|, how many go to |k|. */
static uint64_t rr_share(uint64_t first, uint64_t n, uint32_t k) {
  uint64_t ahead = (k + NSTREAMS - first % NSTREAMS) % NSTREAMS; /* k's first slot in the run */
  return n / NSTREAMS + (ahead < n % NSTREAMS);
}

/* ---- weft side --------------------------------------------------------------------------- */

#define MAX_BUFS (2u * FAN_WIDTH)

typedef struct ws {
  int id;
  weft_device *dev;
  weft_kernel kernel;
  weft_buffer bufs[MAX_BUFS];
  uint32_t nbufs;
  uint64_t expect[MAX_BUFS]; /* W1: [0] = launches so far; W2, W4: per-stream counters */
  uint64_t fan_model[2][FAN_WIDTH];
  fan_pos fan;
  uint64_t rr;       /* W2: the next launch's index */
  uint64_t launched; /* launches accepted since the device opened */
  weft_device_stats last;
  unsigned nproducers;          /* W4 */
  uint64_t thread_ns[NSTREAMS]; /* W4: time inside weft_launch, per producer */
} ws;

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats st;
  wb_check(weft_device_stats_get(dev, &st), "weft_device_stats_get");
  return st;
}

static uint64_t read_u64(ws *s, uint32_t i, weft_stream_id stream) {
  uint64_t v;
  wb_check(weft_buffer_read(s->dev, stream, s->bufs[i], 0, &v, sizeof(v)), "weft_buffer_read");
  return v;
}

static ws *ws_open(int id, const char *kname, weft_host_kernel_fn fn, uint32_t nbufs) {
  ws *s = xcalloc(1, sizeof(*s));
  s->id = id;
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_HOST;
  if (o.max_streams < NSTREAMS) o.max_streams = NSTREAMS;
  o.scheduler = combining(id) ? WEFT_SCHEDULER_COMBINING : WEFT_SCHEDULER_THREAD;
  wb_check(weft_device_open(&o, &s->dev), "weft_device_open");
  wb_check(weft_kernel_host(s->dev, kname, fn, NULL, &s->kernel), "weft_kernel_host");
  s->nbufs = nbufs;
  for (uint32_t i = 0; i < nbufs; i++) {
    wb_check(weft_buffer_create(s->dev, 0, sizeof(uint64_t), &s->bufs[i]), "weft_buffer_create");
    uint64_t zero = 0;
    wb_check(weft_buffer_write(s->dev, 0, s->bufs[i], 0, &zero, sizeof(zero)), "weft_buffer_write");
  }
  return s;
}

/* Brings streams 0..n-1 to life (a stream's worker starts on first use). */
static void ws_sync_streams(ws *s, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) wb_check(weft_sync(s->dev, i), "weft_sync");
}

/* Adds the run's stats deltas to the summary (untimed). Called right after the
 * timed part, before the run's check, whose reads are not the workload's: the
 * run takes a new s->last after its check. */
static void ws_account(ws *s, uint64_t ns, uint64_t n) {
  weft_device_stats now = stats_of(s->dev);
  summary *sm = &sums[s->id];
  sm->waits += now.cross_stream_waits - s->last.cross_stream_waits;
  sm->elided += now.waits_elided - s->last.waits_elided;
  sm->bp_waits += now.backpressure_waits - s->last.backpressure_waits;
  sm->pending_peak = now.pending_peak;
  s->last = now;
  record(s->id, ns, n);
}

static void ws_teardown(void *state) {
  ws *s = state;
  weft_device_stats st = stats_of(s->dev);
  if (st.launches_run != s->launched || st.launches_failed || st.launches_skipped)
    wb_fatal("%s: weft ran %" PRIu64 " of %" PRIu64 " launches (%" PRIu64 " failed, %" PRIu64
             " skipped)",
             bench_names[s->id], st.launches_run, s->launched, st.launches_failed,
             st.launches_skipped);
  for (uint32_t i = 0; i < s->nbufs; i++)
    wb_check(weft_buffer_release(s->dev, s->bufs[i]), "weft_buffer_release");
  weft_device_close(s->dev);
  free(s);
}

/* W1: launch k (k = launches so far) reads bufs[k % 2] and writes bufs[(k + 1) % 2]. */
static inline void chain_launch(ws *s) {
  uint64_t k = s->expect[0]++;
  weft_binding b[2] = {
      {.buffer = s->bufs[k % 2], .offset = 0, .size = WEFT_WHOLE, .access = WEFT_READ},
      {.buffer = s->bufs[(k + 1) % 2], .offset = 0, .size = WEFT_WHOLE, .access = WEFT_WRITE}};
  wb_check(weft_launch(s->dev, 0, s->kernel, one3, one3, b, 2, NULL, 0), "weft_launch");
}

static void chain_check(ws *s) {
  uint64_t k = s->expect[0];
  uint64_t v = read_u64(s, (uint32_t)(k % 2), 0);
  if (v != k)
    wb_fatal("sched_w1_chain: the chain holds %" PRIu64 " after %" PRIu64 " launches", v, k);
}

static void chain_setup_id(void **state, int id) {
  ws *s = ws_open(id, "wb_chain", chain_kernel, 2);
  for (int i = 0; i < 16; i++) chain_launch(s);
  ws_sync_streams(s, 1);
  s->launched = 16;
  chain_check(s);
  s->last = stats_of(s->dev);
  *state = s;
}

static void chain_setup(void **state) {
  chain_setup_id(state, B_CHAIN);
}

static void chain_setup_c(void **state) {
  chain_setup_id(state, B_CHAIN_C);
}

static uint64_t chain_run(void *state, uint64_t n) {
  ws *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) chain_launch(s);
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  uint64_t t1 = wb_now_ns();
  s->launched += n;
  ws_account(s, t1 - t0, n);
  chain_check(s);
  s->last = stats_of(s->dev);
  return t1 - t0;
}

/* W2 and W4: one READ_WRITE binding of stream |k|'s own buffer. */
static inline void indep_launch(ws *s, uint32_t k) {
  weft_binding b = {
      .buffer = s->bufs[k], .offset = 0, .size = WEFT_WHOLE, .access = WEFT_READ_WRITE};
  wb_check(weft_launch(s->dev, k, s->kernel, one3, one3, &b, 1, NULL, 0), "weft_launch");
}

static void indep_check(ws *s, uint32_t nstreams) {
  for (uint32_t k = 0; k < nstreams; k++) {
    uint64_t v = read_u64(s, k, k);
    if (v != s->expect[k])
      wb_fatal("%s: stream %u's buffer holds %" PRIu64 ", expected %" PRIu64, bench_names[s->id], k,
               v, s->expect[k]);
  }
}

static ws *indep_open(int id, uint32_t nstreams) {
  ws *s = ws_open(id, "wb_indep", indep_kernel, nstreams);
  for (uint32_t k = 0; k < nstreams; k++)
    for (int i = 0; i < 4; i++) {
      indep_launch(s, k);
      s->expect[k]++;
      s->launched++;
    }
  ws_sync_streams(s, nstreams);
  indep_check(s, nstreams);
  s->last = stats_of(s->dev);
  return s;
}

static void indep_setup(void **state) {
  *state = indep_open(B_INDEP, NSTREAMS);
}

static void indep_setup_c(void **state) {
  *state = indep_open(B_INDEP_C, NSTREAMS);
}

static uint64_t indep_run(void *state, uint64_t n) {
  ws *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) indep_launch(s, (uint32_t)(s->rr++ % NSTREAMS));
  ws_sync_streams(s, NSTREAMS);
  uint64_t t1 = wb_now_ns();
  for (uint32_t k = 0; k < NSTREAMS; k++) s->expect[k] += rr_share(s->rr - n, n, k);
  s->launched += n;
  ws_account(s, t1 - t0, n);
  indep_check(s, NSTREAMS);
  s->last = stats_of(s->dev);
  return t1 - t0;
}

/* W3: launch j of layer L, on stream (j + 2L) % 4. */
static inline void fan_launch(ws *s) {
  uint64_t L = s->fan.layer;
  uint32_t j = s->fan.j, cur = (uint32_t)(L % 2u) * FAN_WIDTH, prev = FAN_WIDTH - cur;
  weft_binding b[3] = {
      {.buffer = s->bufs[prev + j], .offset = 0, .size = WEFT_WHOLE, .access = WEFT_READ},
      {.buffer = s->bufs[prev + (j + 1u) % FAN_WIDTH],
       .offset = 0,
       .size = WEFT_WHOLE,
       .access = WEFT_READ},
      {.buffer = s->bufs[cur + j], .offset = 0, .size = WEFT_WHOLE, .access = WEFT_WRITE}};
  wb_check(weft_launch(s->dev, fan_stream(L, j), s->kernel, one3, one3, b, 3, NULL, 0),
           "weft_launch");
  fan_model_step(s->fan_model, &s->fan);
}

static void fan_check(ws *s) {
  for (uint32_t set = 0; set < 2; set++)
    for (uint32_t j = 0; j < FAN_WIDTH; j++) {
      uint64_t v = read_u64(s, set * FAN_WIDTH + j, 0);
      if (v != s->fan_model[set][j])
        wb_fatal("sched_w3_fan: buffer %u of set %u holds %" PRIu64 ", expected %" PRIu64
                 " (layer %" PRIu64 ", launch %u)",
                 j, set, v, s->fan_model[set][j], s->fan.layer, s->fan.j);
    }
}

static void fan_setup_id(void **state, int id) {
  ws *s = ws_open(id, "wb_fan", fan_kernel, 2u * FAN_WIDTH);
  fan_model_init(s->fan_model);
  for (uint32_t set = 0; set < 2; set++)
    for (uint32_t j = 0; j < FAN_WIDTH; j++)
      wb_check(weft_buffer_write(s->dev, 0, s->bufs[set * FAN_WIDTH + j], 0, &s->fan_model[set][j],
                                 sizeof(uint64_t)),
               "weft_buffer_write");
  s->fan.layer = 1;
  for (uint32_t i = 0; i < 4u * FAN_WIDTH; i++) fan_launch(s); /* 4 layers: every stream lives */
  s->launched = 4u * FAN_WIDTH;
  ws_sync_streams(s, NSTREAMS);
  fan_check(s);
  s->last = stats_of(s->dev);
  *state = s;
}

static void fan_setup(void **state) {
  fan_setup_id(state, B_FAN);
}

static void fan_setup_c(void **state) {
  fan_setup_id(state, B_FAN_C);
}

static uint64_t fan_run(void *state, uint64_t n) {
  ws *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) fan_launch(s);
  ws_sync_streams(s, NSTREAMS);
  uint64_t t1 = wb_now_ns();
  s->launched += n;
  ws_account(s, t1 - t0, n);
  fan_check(s); /* its reads on stream 0 wait on the other streams: not the workload's */
  s->last = stats_of(s->dev);
  return t1 - t0;
}

/* W4: producer |idx| launches |count| times on its own stream, timing only the calls. */
static void submit_producer(void *state, unsigned idx, uint64_t count) {
  ws *s = state;
  uint64_t spent = 0;
  for (uint64_t done = 0; done < count;) {
    uint64_t chunk = count - done < W4_CHUNK ? count - done : W4_CHUNK;
    uint64_t t0 = wb_now_ns();
    for (uint64_t i = 0; i < chunk; i++) indep_launch(s, idx);
    spent += wb_now_ns() - t0;
    wb_check(weft_sync(s->dev, idx), "weft_sync"); /* the drain: untimed */
    done += chunk;
  }
  s->thread_ns[idx] = spent;
  s->expect[idx] += count;
}

static void submit_setup(void **state, int id, unsigned nproducers) {
  ws *s = indep_open(id, nproducers);
  s->nproducers = nproducers;
  *state = s;
}

static void submit_setup_1(void **state) {
  submit_setup(state, B_SUB1, 1);
}

static void submit_setup_2(void **state) {
  submit_setup(state, B_SUB2, 2);
}

static void submit_setup_4(void **state) {
  submit_setup(state, B_SUB4, 4);
}

static void submit_setup_1c(void **state) {
  submit_setup(state, B_SUB1_C, 1);
}

/* ns per call = time all producers spent inside weft_launch / calls. */
static uint64_t submit_run(void *state, uint64_t n) {
  ws *s = state;
  wb_run_threads(s->nproducers, n, submit_producer, s);
  uint64_t ns = 0;
  for (unsigned p = 0; p < s->nproducers; p++) ns += s->thread_ns[p];
  s->launched += n;
  ws_account(s, ns, n);
  indep_check(s, s->nproducers);
  s->last = stats_of(s->dev);
  return ns;
}

/* ---- baseline side ----------------------------------------------------------------------- */

typedef struct bs {
  int id;
  unsigned nqueues;
  bq_queue *q[NSTREAMS];
  uint64_t submitted;
  uint64_t mem[2][FAN_WIDTH]; /* W1: mem[0][0..1]; W2, W4: mem[0][k]; W3: the two sets */
  uint64_t expect[NSTREAMS];
  uint64_t chain_k;
  uint64_t rr;
  task_args args[2][FAN_WIDTH]; /* W1: args[0][k % 2]; W3: args[set][j] */
  uint64_t fan_model[2][FAN_WIDTH];
  fan_pos fan;
  uint64_t thread_ns[NSTREAMS];
} bs;

static bs *bs_open(int id, unsigned nqueues) {
  bs *s = xcalloc(1, sizeof(*s));
  s->id = id;
  s->nqueues = nqueues;
  for (unsigned i = 0; i < nqueues; i++) s->q[i] = bq_create();
  return s;
}

static void bs_sync_all(bs *s) {
  for (unsigned i = 0; i < s->nqueues; i++) bq_sync(s->q[i]);
}

static void bs_teardown(void *state) {
  bs *s = state;
  uint64_t done = 0, failed = 0;
  for (unsigned i = 0; i < s->nqueues; i++) {
    done += bq_completed(s->q[i]);
    failed += bq_failed(s->q[i]);
    bq_destroy(s->q[i]);
  }
  if (done != s->submitted || failed)
    wb_fatal("%s: the baseline ran %" PRIu64 " of %" PRIu64 " tasks (%" PRIu64 " failed)",
             bench_names[s->id], done, s->submitted, failed);
  free(s);
}

/* W1: task k reads mem[0][k % 2] and writes mem[0][(k + 1) % 2], one queue. */
static void bchain_setup(void **state) {
  bs *s = bs_open(B_CHAIN_BASE, 1);
  for (int k = 0; k < 2; k++)
    s->args[0][k] = (task_args){.a = &s->mem[0][k], .out = &s->mem[0][(k + 1) % 2]};
  *state = s;
}

static uint64_t bchain_run(void *state, uint64_t n) {
  bs *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) bq_submit(s->q[0], chain_task, &s->args[0][s->chain_k++ % 2]);
  bq_sync(s->q[0]);
  uint64_t t1 = wb_now_ns();
  s->submitted += n;
  if (s->mem[0][s->chain_k % 2] != s->chain_k)
    wb_fatal("baseline_w1_chain: the chain holds %" PRIu64 " after %" PRIu64 " tasks",
             s->mem[0][s->chain_k % 2], s->chain_k);
  record(s->id, t1 - t0, n);
  return t1 - t0;
}

static void bindep_check(bs *s) {
  for (unsigned k = 0; k < s->nqueues; k++)
    if (s->mem[0][k] != s->expect[k])
      wb_fatal("%s: queue %u's counter is %" PRIu64 ", expected %" PRIu64, bench_names[s->id], k,
               s->mem[0][k], s->expect[k]);
}

/* W2: one producer, round-robin over 4 queues (one worker each), own counter per queue. */
static void bindep_setup(void **state) {
  *state = bs_open(B_INDEP_BASE, NSTREAMS);
}

static uint64_t bindep_run(void *state, uint64_t n) {
  bs *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) {
    uint32_t k = (uint32_t)(s->rr++ % NSTREAMS);
    bq_submit(s->q[k], indep_task, &s->mem[0][k]);
  }
  bs_sync_all(s);
  uint64_t t1 = wb_now_ns();
  s->submitted += n;
  for (uint32_t k = 0; k < NSTREAMS; k++) s->expect[k] += rr_share(s->rr - n, n, k);
  bindep_check(s);
  record(s->id, t1 - t0, n);
  return t1 - t0;
}

/* W3: 4 queues; task j of layer L on queue (j + 2L) % 4, as weft's streams; the naive
 * executor cannot order across queues, so it syncs every queue between layers. */
static void bfan_setup(void **state) {
  bs *s = bs_open(B_FAN_BASE, NSTREAMS);
  fan_model_init(s->fan_model);
  memcpy(s->mem, s->fan_model, sizeof(s->mem));
  for (uint32_t set = 0; set < 2; set++)
    for (uint32_t j = 0; j < FAN_WIDTH; j++)
      s->args[set][j] = (task_args){.a = &s->mem[set ^ 1u][j],
                                    .b = &s->mem[set ^ 1u][(j + 1u) % FAN_WIDTH],
                                    .out = &s->mem[set][j]};
  s->fan.layer = 1;
  *state = s;
}

static uint64_t bfan_run(void *state, uint64_t n) {
  bs *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) {
    uint64_t L = s->fan.layer;
    uint32_t j = s->fan.j;
    if (j == 0 && i > 0) bs_sync_all(s); /* the layer barrier (a run starts drained) */
    bq_submit(s->q[fan_stream(L, j)], fan_task, &s->args[L % 2u][j]);
    fan_model_step(s->fan_model, &s->fan);
  }
  bs_sync_all(s);
  uint64_t t1 = wb_now_ns();
  s->submitted += n;
  if (memcmp(s->mem, s->fan_model, sizeof(s->mem)) != 0)
    wb_fatal("baseline_w3_fan: the buffers differ from the model at layer %" PRIu64, s->fan.layer);
  record(s->id, t1 - t0, n);
  return t1 - t0;
}

/* W4: producer |idx| submits to its own queue, timing only bq_submit. */
static void bsubmit_producer(void *state, unsigned idx, uint64_t count) {
  bs *s = state;
  uint64_t spent = 0;
  for (uint64_t done = 0; done < count;) {
    uint64_t chunk = count - done < W4_CHUNK ? count - done : W4_CHUNK;
    uint64_t t0 = wb_now_ns();
    for (uint64_t i = 0; i < chunk; i++) bq_submit(s->q[idx], indep_task, &s->mem[0][idx]);
    spent += wb_now_ns() - t0;
    bq_sync(s->q[idx]);
    done += chunk;
  }
  s->thread_ns[idx] = spent;
  s->expect[idx] += count;
}

static void bsubmit_setup_1(void **state) {
  *state = bs_open(B_SUB1_BASE, 1);
}

static void bsubmit_setup_2(void **state) {
  *state = bs_open(B_SUB2_BASE, 2);
}

static void bsubmit_setup_4(void **state) {
  *state = bs_open(B_SUB4_BASE, 4);
}

static uint64_t bsubmit_run(void *state, uint64_t n) {
  bs *s = state;
  wb_run_threads(s->nqueues, n, bsubmit_producer, s);
  uint64_t ns = 0;
  for (unsigned p = 0; p < s->nqueues; p++) ns += s->thread_ns[p];
  s->submitted += n;
  bindep_check(s);
  record(s->id, ns, n);
  return ns;
}

/* ---- the report section ------------------------------------------------------------------ */

typedef struct target_row {
  const char *workload;
  int weft, base;
  double target_ns;
} target_row;

static const target_row targets[] = {
    {"W1 chain", B_CHAIN, B_CHAIN_BASE, 100.0},
    {"W2 independent", B_INDEP, B_INDEP_BASE, 100.0},
    {"W3 fan", B_FAN, B_FAN_BASE, 300.0},
    {"W4 submit, 1 producer", B_SUB1, B_SUB1_BASE, 100.0},
    {"W4 submit, 2 producers", B_SUB2, B_SUB2_BASE, 0.0},
    {"W4 submit, 4 producers", B_SUB4, B_SUB4_BASE, 0.0},
    {"W1 chain, combining", B_CHAIN_C, B_CHAIN_BASE, 100.0},
    {"W2 independent, combining", B_INDEP_C, B_INDEP_BASE, 100.0},
    {"W3 fan, combining", B_FAN_C, B_FAN_BASE, 300.0},
    {"W4 submit 1p, combining", B_SUB1_C, B_SUB1_BASE, 100.0},
};
#define NTARGETS (sizeof(targets) / sizeof(targets[0]))

static const int wait_rows[] = {B_CHAIN, B_INDEP,   B_FAN,     B_SUB1,  B_SUB2,
                                B_SUB4,  B_CHAIN_C, B_INDEP_C, B_FAN_C, B_SUB1_C};

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of a benchmark's samples (every run); 0 when it did not run. */
static double median_of(int id) {
  const summary *s = &sums[id];
  if (!s->nsamples) return 0.0;
  double *v = xcalloc(s->nsamples, sizeof(double));
  memcpy(v, s->samples, s->nsamples * sizeof(double));
  qsort(v, s->nsamples, sizeof(double), cmp_double);
  size_t n = s->nsamples;
  double m = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
  free(v);
  return m;
}

static double per_op(uint64_t count, uint64_t ops) {
  return ops ? (double)count / (double)ops : 0.0;
}

static const char *rule(void) {
  return "--------------------------------------------------------------------------------"
         "------------------------------------------------------------";
}

static bool print_workloads(FILE *f) {
  bool any = false, any_w4 = false;
  for (size_t r = 0; r < NTARGETS; r++) {
    any |= sums[targets[r].weft].ran;
    any_w4 |=
        sums[targets[r].weft].ran && (targets[r].weft >= B_SUB1 && targets[r].weft <= B_SUB4_BASE);
  }
  if (!any) return true; /* none of the weft workloads ran */

  fputs("\nscheduler workloads: waits (weft_device_stats_get deltas over every run, warm-up "
        "included)\n\n",
        f);
  fprintf(f, "%-36s  %5s  %10s  %12s  %12s  %13s  %13s  %8s  %12s\n", "benchmark", "runs",
          "launches", "waits issued", "waits elided", "issued/launch", "elided/launch", "bp waits",
          "pending peak");
  fprintf(f, "%.*s\n", 135, rule());
  for (size_t r = 0; r < sizeof(wait_rows) / sizeof(wait_rows[0]); r++) {
    const summary *s = &sums[wait_rows[r]];
    if (!s->ran) continue;
    fprintf(f,
            "%-36s  %5" PRIu64 "  %10" PRIu64 "  %12" PRIu64 "  %12" PRIu64
            "  %13.3f  %13.3f  %8" PRIu64 "  %12" PRIu64 "\n",
            bench_names[wait_rows[r]], s->runs, s->ops, s->waits, s->elided,
            per_op(s->waits, s->ops), per_op(s->elided, s->ops), s->bp_waits, s->pending_peak);
  }
  fputs("waits issued = stats.cross_stream_waits, elided = stats.waits_elided; bp waits = "
        "stats.backpressure_waits (a client found max_pending_commands pending); pending peak = "
        "stats.pending_peak\n",
        f);

  fputs("\nscheduler workloads: ns per launch (W4: per weft_launch call) against the targets\n"
        "(median over every run, warm-up included; informational: a target never fails the "
        "run)\n\n",
        f);
  fprintf(f, "%-27s  %9s  %11s  %7s  %9s  %11s  %s\n", "workload", "weft ns", "baseline ns",
          "ratio", "target ns", "weft/target", "verdict");
  fprintf(f, "%.*s\n", 98, rule());
  for (size_t r = 0; r < NTARGETS; r++) {
    const target_row *t = &targets[r];
    if (!sums[t->weft].ran) continue;
    double w = median_of(t->weft), b = median_of(t->base);
    char bcell[32] = "-", rcell[32] = "-", tcell[32] = "-", gcell[32] = "-";
    const char *verdict = "no target";
    if (sums[t->base].ran) {
      snprintf(bcell, sizeof(bcell), "%.1f", b);
      if (b > 0.0) snprintf(rcell, sizeof(rcell), "%.2f", w / b);
    }
    if (t->target_ns > 0.0) {
      snprintf(tcell, sizeof(tcell), "%.0f", t->target_ns);
      snprintf(gcell, sizeof(gcell), "%.2fx", w / t->target_ns);
      verdict = w <= t->target_ns ? "met" : "NOT MET";
    }
    fprintf(f, "%-27s  %9.1f  %11s  %7s  %9s  %11s  %s\n", t->workload, w, bcell, rcell, tcell,
            gcell, verdict);
  }
  if (any_w4)
    fprintf(f,
            "W4 times only the weft_launch / bq_submit calls, in chunks of %u per producer, each "
            "drained untimed;\nns per call = time inside the calls summed over the producers / "
            "calls\n",
            W4_CHUNK);
  return true;
}

static void json_workloads(FILE *f) {
  fputs("{\"waits\": [", f);
  bool first = true;
  for (size_t r = 0; r < sizeof(wait_rows) / sizeof(wait_rows[0]); r++) {
    const summary *s = &sums[wait_rows[r]];
    if (!s->ran) continue;
    fputs(first ? "\n    {\"name\": " : ",\n    {\"name\": ", f);
    first = false;
    wb_json_string(f, bench_names[wait_rows[r]]);
    fprintf(f,
            ", \"runs\": %" PRIu64 ", \"launches\": %" PRIu64 ", \"waits_issued\": %" PRIu64
            ", \"waits_elided\": %" PRIu64 ", \"backpressure_waits\": %" PRIu64
            ", \"pending_peak\": %" PRIu64 ", \"issued_per_launch\": ",
            s->runs, s->ops, s->waits, s->elided, s->bp_waits, s->pending_peak);
    wb_json_number(f, per_op(s->waits, s->ops));
    fputs(", \"elided_per_launch\": ", f);
    wb_json_number(f, per_op(s->elided, s->ops));
    fputc('}', f);
  }
  fputs(first ? "]" : "\n  ]", f);
  fputs(",\n  \"targets\": [", f);
  first = true;
  for (size_t r = 0; r < NTARGETS; r++) {
    const target_row *t = &targets[r];
    if (!sums[t->weft].ran) continue;
    double w = median_of(t->weft), b = median_of(t->base);
    fputs(first ? "\n    {\"workload\": " : ",\n    {\"workload\": ", f);
    first = false;
    wb_json_string(f, t->workload);
    fputs(", \"name\": ", f);
    wb_json_string(f, bench_names[t->weft]);
    fputs(", \"baseline\": ", f);
    wb_json_string(f, bench_names[t->base]);
    fputs(", \"median_ns\": ", f);
    wb_json_number(f, w);
    fputs(", \"baseline_median_ns\": ", f);
    if (sums[t->base].ran)
      wb_json_number(f, b);
    else
      fputs("null", f);
    fputs(", \"ratio\": ", f);
    if (sums[t->base].ran && b > 0.0)
      wb_json_number(f, w / b);
    else
      fputs("null", f);
    fputs(", \"target_ns\": ", f);
    if (t->target_ns > 0.0) {
      wb_json_number(f, t->target_ns);
      fputs(", \"vs_target\": ", f);
      wb_json_number(f, w / t->target_ns);
      fprintf(f, ", \"target_met\": %s}", w <= t->target_ns ? "true" : "false");
    } else {
      fputs("null, \"vs_target\": null, \"target_met\": null}", f);
    }
  }
  fputs(first ? "]}" : "\n  ]}", f);
}

/* ---- registration ------------------------------------------------------------------------ */

static const wb_bench benches[] = {
    {.name = "sched_w1_chain",
     .description = "W1: one stream, each launch reads the 8-byte buffer the previous one wrote "
                    "(R + W binding, out = in + 1); submit to completion",
     .baseline = "baseline_w1_chain",
     .iterations = ITERS_CHAIN,
     .setup = chain_setup,
     .run = chain_run,
     .teardown = ws_teardown},
    {.name = "baseline_w1_chain",
     .description = "naive queue: W1's chain as tasks on one mutex+condvar queue and worker",
     .iterations = ITERS_CHAIN,
     .setup = bchain_setup,
     .run = bchain_run,
     .teardown = bs_teardown},
    {.name = "sched_w2_independent",
     .description = "W2: one client, launches round-robin over streams 0..3, each stream its own "
                    "buffer (READ_WRITE, ++); submit to completion",
     .baseline = "baseline_w2_independent",
     .iterations = ITERS_INDEPENDENT,
     .setup = indep_setup,
     .run = indep_run,
     .teardown = ws_teardown},
    {.name = "baseline_w2_independent",
     .description = "naive queue: W2's tasks round-robin over 4 queues, one worker each",
     .iterations = ITERS_INDEPENDENT,
     .setup = bindep_setup,
     .run = bindep_run,
     .teardown = bs_teardown},
    {.name = "sched_w3_fan",
     .description = "W3: layers of 8 launches, each reads 2 buffers of the previous layer and "
                    "writes its own; layers spread over 4 streams, every input crosses streams",
     .baseline = "baseline_w3_fan",
     .iterations = ITERS_FAN,
     .setup = fan_setup,
     .run = fan_run,
     .teardown = ws_teardown},
    {.name = "baseline_w3_fan",
     .description = "naive queue: W3's tasks on 4 queues (one worker each), every queue synced "
                    "between layers",
     .iterations = ITERS_FAN,
     .setup = bfan_setup,
     .run = bfan_run,
     .teardown = bs_teardown},
    {.name = "sched_w4_submit_1producer",
     .description = "W4: ns inside weft_launch (W2's launch, no completion), 1 client thread on "
                    "its own stream",
     .baseline = "baseline_w4_submit_1producer",
     .iterations = ITERS_SUBMIT,
     .setup = submit_setup_1,
     .run = submit_run,
     .teardown = ws_teardown},
    {.name = "baseline_w4_submit_1producer",
     .description = "naive queue: ns inside bq_submit, 1 producer on its own queue",
     .iterations = ITERS_SUBMIT,
     .setup = bsubmit_setup_1,
     .run = bsubmit_run,
     .teardown = bs_teardown},
    {.name = "sched_w4_submit_2producers",
     .description = "W4: ns inside weft_launch, 2 client threads, each on its own stream",
     .baseline = "baseline_w4_submit_2producers",
     .iterations = ITERS_SUBMIT,
     .setup = submit_setup_2,
     .run = submit_run,
     .teardown = ws_teardown},
    {.name = "baseline_w4_submit_2producers",
     .description = "naive queue: ns inside bq_submit, 2 producers, each on its own queue",
     .iterations = ITERS_SUBMIT,
     .setup = bsubmit_setup_2,
     .run = bsubmit_run,
     .teardown = bs_teardown},
    {.name = "sched_w4_submit_4producers",
     .description = "W4: ns inside weft_launch, 4 client threads, each on its own stream",
     .baseline = "baseline_w4_submit_4producers",
     .iterations = ITERS_SUBMIT,
     .setup = submit_setup_4,
     .run = submit_run,
     .teardown = ws_teardown},
    {.name = "baseline_w4_submit_4producers",
     .description = "naive queue: ns inside bq_submit, 4 producers, each on its own queue",
     .iterations = ITERS_SUBMIT,
     .setup = bsubmit_setup_4,
     .run = bsubmit_run,
     .teardown = bs_teardown},
    {.name = "sched_w1_chain_combining",
     .description = "W1 with the combining scheduler (the client schedules its own launches)",
     .baseline = "baseline_w1_chain",
     .iterations = ITERS_CHAIN,
     .setup = chain_setup_c,
     .run = chain_run,
     .teardown = ws_teardown},
    {.name = "sched_w2_independent_combining",
     .description = "W2 with the combining scheduler",
     .baseline = "baseline_w2_independent",
     .iterations = ITERS_INDEPENDENT,
     .setup = indep_setup_c,
     .run = indep_run,
     .teardown = ws_teardown},
    {.name = "sched_w3_fan_combining",
     .description = "W3 with the combining scheduler",
     .baseline = "baseline_w3_fan",
     .iterations = ITERS_FAN,
     .setup = fan_setup_c,
     .run = fan_run,
     .teardown = ws_teardown},
    {.name = "sched_w4_submit_1producer_combining",
     .description = "W4 (1 producer) with the combining scheduler: weft_launch now includes "
                    "scheduling",
     .baseline = "baseline_w4_submit_1producer",
     .iterations = ITERS_SUBMIT,
     .setup = submit_setup_1c,
     .run = submit_run,
     .teardown = ws_teardown},
};

static const wb_section section = {
    .json_key = "sched_workloads", .print_table = print_workloads, .print_json = json_workloads};

void wb_register_workloads(void) {
  for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) wb_register(&benches[i]);
  wb_register_section(&section);
}
