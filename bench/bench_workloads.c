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
 *   sched_w1_chain_traced W1 while a trace records (and _combining_traced):
 *                         the ratio to W1 in the same run is tracing's cost
 *   sched_w4_submit_Np    time inside weft_launch alone (no completion), from
 *                         1, 2 or 4 client threads, each on its own stream with
 *                         W2's launch; a producer times chunks of W4_CHUNK calls
 *                         and drains its stream (untimed) between chunks
 *
 * Every run checks what the kernels computed (blocking reads after the
 * timed part) against a host model of the same arithmetic, on both sides.
 * One operation = one launch (one baseline task). The weft workloads report
 * the cross-stream waits issued and elided and the back-pressure waits
 * (weft_device_stats_get deltas over the runs) to the "sched_workloads"
 * group, and carry their targets (target_ns, informational). Every workload
 * is accounted per thread class (wb_account); W1-W3 name their peers on
 * oneTBB's flow graph (bench/peers/, when built with it). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench/baseline_queue.h"
#include "bench/harness.h"
#include "bench/peers/workloads.h"

#define W4_CHUNK     4096u /* weft_launch calls per timed chunk of a W4 producer */
#define ITERS_SUBMIT 1000000u

/* Issue 14: weft at most half of oneTBB's flow graph's wall time per task,
 * and three quarters of its CPU time (the peers of bench/peers/). */
#define PEER_WALL_TARGET 0.5
#define PEER_CPU_TARGET  0.75

static const uint32_t one3[3] = {1, 1, 1};

/* The counters of the weft workloads (weft_device_stats_get deltas over every run). */
enum { K_WAITS, K_ELIDED, K_BP_WAITS, K_PENDING_PEAK };

static const wb_group waits_group = {
    .title = "scheduler workloads: waits (weft_device_stats_get deltas over every run, warm-up "
             "included; per operation = per launch)",
    .json_key = "sched_workloads",
    .legend = "waits_issued = stats.cross_stream_waits, waits_elided = stats.waits_elided, per "
              "launch; bp_waits = stats.backpressure_waits (a client found max_pending_commands "
              "pending); pending_peak = stats.pending_peak after the latest run.\n"
              "W4 times only the weft_launch / bq_submit calls, in chunks of 4096 per producer, "
              "each drained untimed; ns per call = time inside the calls summed over the "
              "producers / calls",
    .counters = {{"waits_issued", WB_PER_OP, 3},
                 {"waits_elided", WB_PER_OP, 3},
                 {"bp_waits", WB_TOTAL, 0},
                 {"pending_peak", WB_LAST, 0}}};

/* ---- the kernels: bench/peers/workloads.h's bodies, shared with the baselines and peers ---- */

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

/* ---- weft side --------------------------------------------------------------------------- */

#define MAX_BUFS (2u * FAN_WIDTH)

typedef struct ws {
  wb_ctx *c;
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
  weft_device_stats st = {0};
  wb_check(weft_device_stats_get(dev, &st), "weft_device_stats_get");
  return st;
}

static uint64_t read_u64(ws *s, uint32_t i, weft_stream_id stream) {
  uint64_t v;
  wb_check(weft_buffer_read(s->dev, stream, s->bufs[i], 0, &v, sizeof(v)), "weft_buffer_read");
  return v;
}

/* arg of a weft workload: COMBINING for the combining scheduler; W4: | its producers. */
#define COMBINING 0x10

static ws *ws_open(wb_ctx *c, const char *kname, weft_host_kernel_fn fn, uint32_t nbufs) {
  ws *s = wb_calloc(1, sizeof(*s));
  s->c = c;
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_HOST;
  if (o.max_streams < NSTREAMS) o.max_streams = NSTREAMS;
  o.scheduler = wb_arg(c) & COMBINING ? WEFT_SCHEDULER_COMBINING : WEFT_SCHEDULER_THREAD;
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

/* Reports the run's stats deltas (untimed). Called right after the timed
 * part, before the run's check, whose reads are not the workload's: the run
 * takes a new s->last after its check. */
static void ws_account(ws *s) {
  weft_device_stats now = stats_of(s->dev);
  wb_report(s->c, K_WAITS, (double)(now.cross_stream_waits - s->last.cross_stream_waits));
  wb_report(s->c, K_ELIDED, (double)(now.waits_elided - s->last.waits_elided));
  wb_report(s->c, K_BP_WAITS, (double)(now.backpressure_waits - s->last.backpressure_waits));
  wb_report(s->c, K_PENDING_PEAK, (double)now.pending_peak);
  s->last = now;
}

static void ws_teardown(void *state, wb_ctx *c) {
  (void)c;
  ws *s = state;
  weft_device_stats st = stats_of(s->dev);
  if (st.launches_run != s->launched || st.launches_failed || st.launches_skipped)
    wb_fatal("%s: weft ran %" PRIu64 " of %" PRIu64 " launches (%" PRIu64 " failed, %" PRIu64
             " skipped)",
             wb_name(s->c), st.launches_run, s->launched, st.launches_failed, st.launches_skipped);
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

static void chain_setup(void **state, wb_ctx *c) {
  ws *s = ws_open(c, "wb_chain", chain_kernel, 2);
  for (int i = 0; i < 16; i++) chain_launch(s);
  ws_sync_streams(s, 1);
  s->launched = 16;
  chain_check(s);
  s->last = stats_of(s->dev);
  *state = s;
}

/* W1 with a trace recording (weft_trace_begin's default ring, about 1M
 * events: a run's launches wrap it, as a long recording would); the
 * recording is dropped, unwritten, when the device closes. */
static void chain_traced_setup(void **state, wb_ctx *c) {
  chain_setup(state, c);
  ws *s = *state;
  wb_check(weft_trace_begin(s->dev, 0), "weft_trace_begin");
}

static uint64_t chain_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  ws *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) chain_launch(s);
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  uint64_t t1 = wb_now_ns();
  s->launched += n;
  ws_account(s);
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
      wb_fatal("%s: stream %u's buffer holds %" PRIu64 ", expected %" PRIu64, wb_name(s->c), k, v,
               s->expect[k]);
  }
}

static ws *indep_open(wb_ctx *c, uint32_t nstreams) {
  ws *s = ws_open(c, "wb_indep", indep_kernel, nstreams);
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

static void indep_setup(void **state, wb_ctx *c) {
  *state = indep_open(c, NSTREAMS);
}

static uint64_t indep_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  ws *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) indep_launch(s, (uint32_t)(s->rr++ % NSTREAMS));
  ws_sync_streams(s, NSTREAMS);
  uint64_t t1 = wb_now_ns();
  for (uint32_t k = 0; k < NSTREAMS; k++) s->expect[k] += rr_share(s->rr - n, n, k);
  s->launched += n;
  ws_account(s);
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

static void fan_setup(void **state, wb_ctx *c) {
  ws *s = ws_open(c, "wb_fan", fan_kernel, 2u * FAN_WIDTH);
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

static uint64_t fan_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  ws *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) fan_launch(s);
  ws_sync_streams(s, NSTREAMS);
  uint64_t t1 = wb_now_ns();
  s->launched += n;
  ws_account(s);
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

static void submit_setup(void **state, wb_ctx *c) {
  unsigned nproducers = (unsigned)wb_arg(c) & 0xfu;
  ws *s = indep_open(c, nproducers);
  s->nproducers = nproducers;
  *state = s;
}

/* ns per call = time all producers spent inside weft_launch / calls. */
static uint64_t submit_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  ws *s = state;
  wb_run_threads(s->nproducers, n, submit_producer, s);
  uint64_t ns = 0;
  for (unsigned p = 0; p < s->nproducers; p++) ns += s->thread_ns[p];
  s->launched += n;
  ws_account(s);
  indep_check(s, s->nproducers);
  s->last = stats_of(s->dev);
  return ns;
}

/* ---- baseline side ----------------------------------------------------------------------- */

typedef struct bs {
  wb_ctx *c;
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

/* arg of a baseline: its queues (one worker each). */
static bs *bs_open(wb_ctx *c) {
  unsigned nqueues = (unsigned)wb_arg(c);
  bs *s = wb_calloc(1, sizeof(*s));
  s->c = c;
  s->nqueues = nqueues;
  for (unsigned i = 0; i < nqueues; i++) s->q[i] = bq_create();
  return s;
}

static void bs_sync_all(bs *s) {
  for (unsigned i = 0; i < s->nqueues; i++) bq_sync(s->q[i]);
}

static void bs_teardown(void *state, wb_ctx *c) {
  (void)c;
  bs *s = state;
  uint64_t done = 0, failed = 0;
  for (unsigned i = 0; i < s->nqueues; i++) {
    done += bq_completed(s->q[i]);
    failed += bq_failed(s->q[i]);
    bq_destroy(s->q[i]);
  }
  if (done != s->submitted || failed)
    wb_fatal("%s: the baseline ran %" PRIu64 " of %" PRIu64 " tasks (%" PRIu64 " failed)",
             wb_name(s->c), done, s->submitted, failed);
  free(s);
}

/* W1: task k reads mem[0][k % 2] and writes mem[0][(k + 1) % 2], one queue. */
static void bchain_setup(void **state, wb_ctx *c) {
  bs *s = bs_open(c);
  for (int k = 0; k < 2; k++)
    s->args[0][k] = (task_args){.a = &s->mem[0][k], .out = &s->mem[0][(k + 1) % 2]};
  *state = s;
}

static uint64_t bchain_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  bs *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) bq_submit(s->q[0], chain_task, &s->args[0][s->chain_k++ % 2]);
  bq_sync(s->q[0]);
  uint64_t t1 = wb_now_ns();
  s->submitted += n;
  if (s->mem[0][s->chain_k % 2] != s->chain_k)
    wb_fatal("baseline_w1_chain: the chain holds %" PRIu64 " after %" PRIu64 " tasks",
             s->mem[0][s->chain_k % 2], s->chain_k);
  return t1 - t0;
}

static void bindep_check(bs *s) {
  for (unsigned k = 0; k < s->nqueues; k++)
    if (s->mem[0][k] != s->expect[k])
      wb_fatal("%s: queue %u's counter is %" PRIu64 ", expected %" PRIu64, wb_name(s->c), k,
               s->mem[0][k], s->expect[k]);
}

/* W2: one producer, round-robin over 4 queues (one worker each), own counter per queue. */
static void bindep_setup(void **state, wb_ctx *c) {
  *state = bs_open(c);
}

static uint64_t bindep_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
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
  return t1 - t0;
}

/* W3: 4 queues; task j of layer L on queue (j + 2L) % 4, as weft's streams; the naive
 * executor cannot order across queues, so it syncs every queue between layers. */
static void bfan_setup(void **state, wb_ctx *c) {
  bs *s = bs_open(c);
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

static uint64_t bfan_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
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

static void bsubmit_setup(void **state, wb_ctx *c) {
  *state = bs_open(c);
}

static uint64_t bsubmit_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  bs *s = state;
  wb_run_threads(s->nqueues, n, bsubmit_producer, s);
  uint64_t ns = 0;
  for (unsigned p = 0; p < s->nqueues; p++) ns += s->thread_ns[p];
  s->submitted += n;
  bindep_check(s);
  return ns;
}

/* ---- registration ------------------------------------------------------------------------ */

static const wb_bench benches[] = {
    {.name = "sched_w1_chain",
     .account = WB_ACCOUNT_WEFT,
     .peer = "tbb_w1_chain",
     .peer_target = PEER_WALL_TARGET,
     .peer_cpu_target = PEER_CPU_TARGET,
     .group = &waits_group,
     .target_ns = 100,
     .description = "W1: one stream, each launch reads the 8-byte buffer the previous one wrote "
                    "(R + W binding, out = in + 1); submit to completion",
     .baseline = "baseline_w1_chain",
     .iterations = ITERS_CHAIN,
     .setup = chain_setup,
     .run = chain_run,
     .teardown = ws_teardown},
    {.name = "sched_w1_chain_traced",
     .account = WB_ACCOUNT_WEFT,
     .group = &waits_group,
     .description = "W1 while a trace records (weft_trace_begin): the tracing's cost is its ratio "
                    "to sched_w1_chain",
     .baseline = "sched_w1_chain",
     .iterations = ITERS_CHAIN,
     .setup = chain_traced_setup,
     .run = chain_run,
     .teardown = ws_teardown},
    {.name = "baseline_w1_chain",
     .account = WB_ACCOUNT_THREADS,
     .description = "naive queue: W1's chain as tasks on one mutex+condvar queue and worker",
     .iterations = ITERS_CHAIN,
     .arg = 1,
     .setup = bchain_setup,
     .run = bchain_run,
     .teardown = bs_teardown},
    {.name = "sched_w2_independent",
     .account = WB_ACCOUNT_WEFT,
     .peer = "tbb_w2_independent",
     .peer_target = PEER_WALL_TARGET,
     .peer_cpu_target = PEER_CPU_TARGET,
     .group = &waits_group,
     .target_ns = 100,
     .description = "W2: one client, launches round-robin over streams 0..3, each stream its own "
                    "buffer (READ_WRITE, ++); submit to completion",
     .baseline = "baseline_w2_independent",
     .iterations = ITERS_INDEPENDENT,
     .setup = indep_setup,
     .run = indep_run,
     .teardown = ws_teardown},
    {.name = "baseline_w2_independent",
     .account = WB_ACCOUNT_THREADS,
     .description = "naive queue: W2's tasks round-robin over 4 queues, one worker each",
     .iterations = ITERS_INDEPENDENT,
     .arg = NSTREAMS,
     .setup = bindep_setup,
     .run = bindep_run,
     .teardown = bs_teardown},
    {.name = "sched_w3_fan",
     .account = WB_ACCOUNT_WEFT,
     .peer = "tbb_w3_fan",
     .peer_target = PEER_WALL_TARGET,
     .peer_cpu_target = PEER_CPU_TARGET,
     .group = &waits_group,
     .target_ns = 300,
     .description = "W3: layers of 8 launches, each reads 2 buffers of the previous layer and "
                    "writes its own; layers spread over 4 streams, every input crosses streams",
     .baseline = "baseline_w3_fan",
     .iterations = ITERS_FAN,
     .setup = fan_setup,
     .run = fan_run,
     .teardown = ws_teardown},
    {.name = "baseline_w3_fan",
     .account = WB_ACCOUNT_THREADS,
     .description = "naive queue: W3's tasks on 4 queues (one worker each), every queue synced "
                    "between layers",
     .iterations = ITERS_FAN,
     .arg = NSTREAMS,
     .setup = bfan_setup,
     .run = bfan_run,
     .teardown = bs_teardown},
    {.name = "sched_w4_submit_1producer",
     .account = WB_ACCOUNT_WEFT,
     .group = &waits_group,
     .target_ns = 100,
     .description = "W4: ns inside weft_launch (W2's launch, no completion), 1 client thread on "
                    "its own stream",
     .baseline = "baseline_w4_submit_1producer",
     .iterations = ITERS_SUBMIT,
     .arg = 1,
     .setup = submit_setup,
     .run = submit_run,
     .teardown = ws_teardown},
    {.name = "baseline_w4_submit_1producer",
     .account = WB_ACCOUNT_THREADS,
     .description = "naive queue: ns inside bq_submit, 1 producer on its own queue",
     .iterations = ITERS_SUBMIT,
     .arg = 1,
     .setup = bsubmit_setup,
     .run = bsubmit_run,
     .teardown = bs_teardown},
    {.name = "sched_w4_submit_2producers",
     .account = WB_ACCOUNT_WEFT,
     .group = &waits_group,
     .description = "W4: ns inside weft_launch, 2 client threads, each on its own stream",
     .baseline = "baseline_w4_submit_2producers",
     .iterations = ITERS_SUBMIT,
     .arg = 2,
     .setup = submit_setup,
     .run = submit_run,
     .teardown = ws_teardown},
    {.name = "baseline_w4_submit_2producers",
     .account = WB_ACCOUNT_THREADS,
     .description = "naive queue: ns inside bq_submit, 2 producers, each on its own queue",
     .iterations = ITERS_SUBMIT,
     .arg = 2,
     .setup = bsubmit_setup,
     .run = bsubmit_run,
     .teardown = bs_teardown},
    {.name = "sched_w4_submit_4producers",
     .account = WB_ACCOUNT_WEFT,
     .group = &waits_group,
     .description = "W4: ns inside weft_launch, 4 client threads, each on its own stream",
     .baseline = "baseline_w4_submit_4producers",
     .iterations = ITERS_SUBMIT,
     .arg = 4,
     .setup = submit_setup,
     .run = submit_run,
     .teardown = ws_teardown},
    {.name = "baseline_w4_submit_4producers",
     .account = WB_ACCOUNT_THREADS,
     .description = "naive queue: ns inside bq_submit, 4 producers, each on its own queue",
     .iterations = ITERS_SUBMIT,
     .arg = 4,
     .setup = bsubmit_setup,
     .run = bsubmit_run,
     .teardown = bs_teardown},
    {.name = "sched_w1_chain_combining",
     .account = WB_ACCOUNT_WEFT,
     .peer = "tbb_w1_chain",
     .peer_target = PEER_WALL_TARGET,
     .peer_cpu_target = PEER_CPU_TARGET,
     .group = &waits_group,
     .target_ns = 100,
     .description = "W1 with the combining scheduler (the client schedules its own launches)",
     .baseline = "baseline_w1_chain",
     .iterations = ITERS_CHAIN,
     .arg = COMBINING,
     .setup = chain_setup,
     .run = chain_run,
     .teardown = ws_teardown},
    {.name = "sched_w1_chain_combining_traced",
     .account = WB_ACCOUNT_WEFT,
     .group = &waits_group,
     .description =
         "W1, combining scheduler, while a trace records: its ratio to sched_w1_chain_combining",
     .baseline = "sched_w1_chain_combining",
     .iterations = ITERS_CHAIN,
     .arg = COMBINING,
     .setup = chain_traced_setup,
     .run = chain_run,
     .teardown = ws_teardown},
    {.name = "sched_w2_independent_combining",
     .account = WB_ACCOUNT_WEFT,
     .peer = "tbb_w2_independent",
     .peer_target = PEER_WALL_TARGET,
     .peer_cpu_target = PEER_CPU_TARGET,
     .group = &waits_group,
     .target_ns = 100,
     .description = "W2 with the combining scheduler",
     .baseline = "baseline_w2_independent",
     .iterations = ITERS_INDEPENDENT,
     .arg = COMBINING,
     .setup = indep_setup,
     .run = indep_run,
     .teardown = ws_teardown},
    {.name = "sched_w3_fan_combining",
     .account = WB_ACCOUNT_WEFT,
     .peer = "tbb_w3_fan",
     .peer_target = PEER_WALL_TARGET,
     .peer_cpu_target = PEER_CPU_TARGET,
     .group = &waits_group,
     .target_ns = 300,
     .description = "W3 with the combining scheduler",
     .baseline = "baseline_w3_fan",
     .iterations = ITERS_FAN,
     .arg = COMBINING,
     .setup = fan_setup,
     .run = fan_run,
     .teardown = ws_teardown},
    {.name = "sched_w4_submit_1producer_combining",
     .account = WB_ACCOUNT_WEFT,
     .group = &waits_group,
     .target_ns = 100,
     .description = "W4 (1 producer) with the combining scheduler: weft_launch now includes "
                    "scheduling",
     .baseline = "baseline_w4_submit_1producer",
     .iterations = ITERS_SUBMIT,
     .arg = 1 | COMBINING,
     .setup = submit_setup,
     .run = submit_run,
     .teardown = ws_teardown},
};

void wb_register_workloads(void) {
  for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) wb_register(&benches[i]);
}
