/* Task graphs and replay (issue 6): what one node costs, submitted three ways,
 * in the same run.
 *
 *   launches_chain / _wide   the nodes as individual weft_launch calls
 *   graph_chain / _wide      one weft_taskgraph_submit of the same nodes
 *   replay_chain / _wide     one weft_capture_replay of a capture of the graph
 *
 *   *_submit                 the same three, timing only the submitting calls
 *                            (the thread's cost per node; each step is drained,
 *                            untimed, before the next)
 *
 * chain: 64 nodes, each incrementing one 8-byte buffer in place (one lane).
 * wide: 64 nodes in 16 independent chains of 4 (16 buffers; the graph spreads
 * them over 4 lanes). Kernels are one-word bodies, so the figures are the
 * executor's cost. One operation = one node, submission to completion: a
 * run issues whole steps of 64 nodes and syncs the lanes at its end. Every
 * run checks the buffers' counts. The replays' baseline is the launches;
 * the target (target_ratio 0.5) is a replay at least 2x cheaper per node. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"

#define NODES  64u
#define CHAINS 16u
#define LANES  4u

typedef enum { LAUNCHES, GRAPH, REPLAY } way;

typedef struct gs {
  way how;
  bool wide;
  weft_device *dev;
  weft_kernel k;
  weft_buffer bufs[CHAINS];
  uint32_t nbufs;
  weft_taskgraph *g;
  weft_capture *cap;
  uint64_t steps; /* steps issued since the counters were last zero */
} gs;

static const uint32_t one3[3] = {1, 1, 1};

static weft_status inc_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint64_t v;
  memcpy(&v, ctx->buffers[0], sizeof(v));
  v++;
  memcpy(ctx->buffers[0], &v, sizeof(v));
  return NULL;
}

/* Node i's buffer and lane-stream for the eager launches (the graph's lanes
 * are its own: chain -> 1 lane; wide -> chains over 4 lanes). */
static uint32_t node_buf(const gs *s, uint32_t i) {
  return s->wide ? i % CHAINS : 0;
}

static void emit_step(gs *s) {
  for (uint32_t i = 0; i < NODES; i++) {
    weft_binding b = {s->bufs[node_buf(s, i)], 0, WEFT_WHOLE, WEFT_READ_WRITE};
    wb_check(weft_launch(s->dev, node_buf(s, i) % LANES, s->k, one3, one3, &b, 1, NULL, 0),
             "weft_launch");
  }
}

static void sync_lanes(gs *s) {
  for (uint32_t l = 0; l < LANES; l++) wb_check(weft_sync(s->dev, l), "weft_sync");
}

static void step(gs *s) {
  switch (s->how) {
  case LAUNCHES:
    emit_step(s);
    break;
  case GRAPH:
    wb_check(weft_taskgraph_submit(s->g, 0), "weft_taskgraph_submit");
    break;
  default:
    wb_check(weft_capture_replay(s->cap), "weft_capture_replay");
    break;
  }
  s->steps++;
}

static void check(gs *s) {
  for (uint32_t b = 0; b < s->nbufs; b++) {
    uint64_t v;
    wb_check(weft_buffer_read(s->dev, 0, s->bufs[b], 0, &v, sizeof(v)), "weft_buffer_read");
    uint64_t want = s->steps * (NODES / s->nbufs);
    if (v != want)
      wb_fatal("graph bench: buffer %u holds %" PRIu64 ", expected %" PRIu64, b, v, want);
  }
}

/* arg: the way, | WIDE for the 16 chains. */
#define WIDE 0x10

static void gs_setup(void **state, wb_ctx *c) {
  way how = (way)(wb_arg(c) & ~WIDE);
  bool wide = wb_arg(c) & WIDE;
  gs *s = wb_calloc(1, sizeof(*s));
  s->how = how;
  s->wide = wide;
  s->nbufs = wide ? CHAINS : 1;
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = LANES;
  wb_check(weft_device_open(&o, &s->dev), "weft_device_open");
  wb_check(weft_kernel_host(s->dev, "inc", inc_kernel, NULL, &s->k), "weft_kernel_host");
  for (uint32_t b = 0; b < s->nbufs; b++) {
    wb_check(weft_buffer_create(s->dev, 0, sizeof(uint64_t), &s->bufs[b]), "weft_buffer_create");
    uint64_t zero = 0;
    wb_check(weft_buffer_write(s->dev, 0, s->bufs[b], 0, &zero, sizeof(zero)), "weft_buffer_write");
  }
  if (how != LAUNCHES) {
    wb_check(weft_taskgraph_create(s->dev, &s->g), "weft_taskgraph_create");
    for (uint32_t i = 0; i < NODES; i++) {
      weft_binding b = {s->bufs[node_buf(s, i)], 0, WEFT_WHOLE, WEFT_READ_WRITE};
      wb_check(weft_taskgraph_add_launch(s->g, s->k, one3, one3, &b, 1, NULL, 0, NULL),
               "weft_taskgraph_add_launch");
    }
  }
  if (how == REPLAY) {
    weft_stream_id lanes[LANES] = {0, 1, 2, 3};
    wb_check(weft_capture_prepare(s->dev, lanes, LANES, &s->cap), "weft_capture_prepare");
    wb_check(weft_taskgraph_submit(s->g, 0), "warm-up"); /* eager */
    s->steps++;
    wb_check(weft_capture_begin(s->cap), "weft_capture_begin");
    wb_check(weft_taskgraph_submit(s->g, 0), "recording");
    wb_check(weft_capture_end(s->cap), "weft_capture_end");
  }
  step(s); /* warm: every stream started */
  sync_lanes(s);
  check(s);
  *state = s;
}

/* Only the submission is timed; the step is drained before the next one. */
static uint64_t gs_run_submit(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  gs *s = state;
  uint64_t steps = (n + NODES - 1) / NODES, ns = 0;
  for (uint64_t i = 0; i < steps; i++) {
    uint64_t t0 = wb_now_ns();
    step(s);
    ns += wb_now_ns() - t0;
    if (i % 16 == 15) sync_lanes(s);
  }
  sync_lanes(s);
  check(s);
  return ns * n / (steps * NODES);
}

static uint64_t gs_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  gs *s = state;
  uint64_t steps = (n + NODES - 1) / NODES;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < steps; i++) step(s);
  sync_lanes(s);
  uint64_t t1 = wb_now_ns();
  check(s);
  /* ns for |n| nodes, scaled from whole steps */
  return (t1 - t0) * n / (steps * NODES);
}

static void gs_teardown(void *state, wb_ctx *c) {
  (void)c;
  gs *s = state;
  weft_capture_destroy(s->cap);
  weft_taskgraph_destroy(s->g);
  for (uint32_t b = 0; b < s->nbufs; b++)
    wb_check(weft_buffer_release(s->dev, s->bufs[b]), "weft_buffer_release");
  weft_device_close(s->dev);
  free(s);
}

#define ITERS (64u * 4000u)

static const wb_bench benches[] = {
    {.name = "launches_chain",
     .description = "64-node in-place chain as 64 weft_launch calls (one-word body), per node",
     .iterations = ITERS,
     .arg = LAUNCHES,
     .setup = gs_setup,
     .run = gs_run,
     .teardown = gs_teardown},
    {.name = "graph_chain",
     .description = "the same chain as one weft_taskgraph_submit, per node",
     .baseline = "launches_chain",
     .iterations = ITERS,
     .arg = GRAPH,
     .setup = gs_setup,
     .run = gs_run,
     .teardown = gs_teardown},
    {.name = "replay_chain",
     .target_ratio = 0.5, /* issue 6: a replay at least 2x cheaper per node */
     .description = "the same chain as one replay of its capture, per node",
     .baseline = "launches_chain",
     .iterations = ITERS,
     .arg = REPLAY,
     .setup = gs_setup,
     .run = gs_run,
     .teardown = gs_teardown},
    {.name = "launches_chain_submit",
     .description = "the chain's 64 weft_launch calls alone (completion untimed), per node",
     .iterations = ITERS,
     .arg = LAUNCHES,
     .setup = gs_setup,
     .run = gs_run_submit,
     .teardown = gs_teardown},
    {.name = "graph_chain_submit",
     .description = "the chain's weft_taskgraph_submit call alone, per node",
     .baseline = "launches_chain_submit",
     .iterations = ITERS,
     .arg = GRAPH,
     .setup = gs_setup,
     .run = gs_run_submit,
     .teardown = gs_teardown},
    {.name = "replay_chain_submit",
     .description = "the chain's weft_capture_replay call alone, per node",
     .baseline = "launches_chain_submit",
     .iterations = ITERS,
     .arg = REPLAY,
     .setup = gs_setup,
     .run = gs_run_submit,
     .teardown = gs_teardown},
    {.name = "launches_wide",
     .description = "16 independent 4-node chains over 4 streams as 64 weft_launch calls, per node",
     .iterations = ITERS,
     .arg = LAUNCHES | WIDE,
     .setup = gs_setup,
     .run = gs_run,
     .teardown = gs_teardown},
    {.name = "graph_wide",
     .description = "the same wide DAG as one weft_taskgraph_submit (4 lanes), per node",
     .baseline = "launches_wide",
     .iterations = ITERS,
     .arg = GRAPH | WIDE,
     .setup = gs_setup,
     .run = gs_run,
     .teardown = gs_teardown},
    {.name = "replay_wide",
     .target_ratio = 0.5, /* issue 6: a replay at least 2x cheaper per node */
     .description = "the same wide DAG as one replay of its capture, per node",
     .baseline = "launches_wide",
     .iterations = ITERS,
     .arg = REPLAY | WIDE,
     .setup = gs_setup,
     .run = gs_run,
     .teardown = gs_teardown},
};

void wb_register_graph(void) {
  for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) wb_register(&benches[i]);
}
