/* The oneTBB peers of weft's W1-W3 as weft-bench benchmarks (tbb_w1_chain,
 * tbb_w2_independent, tbb_w3_fan): sched_w1/w2/w3 name them as their peers,
 * and weft-bench --peers runs both in the same rounds (docs/benchmarks.md,
 * "Peers"). The graphs are in tbb_flow.cpp; this file owns the buffers, the
 * timing (submit to completion, as weft's runs) and the checks, against the
 * same host models as weft's (bench/peers/workloads.h).
 *
 * Buffers: 8 bytes each, as weft's, but each on its own cache line, so that
 * no task of one stream shares a line with another's (false sharing would
 * count against TBB, not for weft). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"
#include "bench/peers/tbb_flow.h"
#include "bench/peers/workloads.h"

#define NBUFS (2u * FAN_WIDTH)

typedef struct wp_line {
  _Alignas(64) uint64_t v;
} wp_line;

typedef struct ps {
  wb_ctx *c;
  wp_tbb *graph;
  wp_line *line;                    /* [NBUFS] */
  uint64_t tasks;                   /* tasks run since setup */
  uint64_t expect[NSTREAMS];        /* W2: per-stream counters */
  uint64_t fan_model[2][FAN_WIDTH]; /* W3 */
  fan_pos fan;
} ps;

static void ps_run_tasks(ps *s, uint64_t n) {
  char err[256];
  if (wp_tbb_run(s->graph, n, err, sizeof(err)) != 0) wb_fatal("%s: %s", wb_name(s->c), err);
}

/* The model after |n| more tasks, then the buffers against it. */
static void ps_check(ps *s, uint64_t n) {
  uint64_t first = s->tasks;
  s->tasks += n;
  switch ((wp_workload)wb_arg(s->c)) {
  case WP_W1_CHAIN: {
    uint64_t v = s->line[s->tasks % 2].v;
    if (v != s->tasks)
      wb_fatal("tbb_w1_chain: the chain holds %" PRIu64 " after %" PRIu64 " tasks", v, s->tasks);
    break;
  }
  case WP_W2_INDEPENDENT:
    for (uint32_t k = 0; k < NSTREAMS; k++) {
      s->expect[k] += rr_share(first, n, k);
      if (s->line[k].v != s->expect[k])
        wb_fatal("tbb_w2_independent: stream %u's buffer holds %" PRIu64 ", expected %" PRIu64, k,
                 s->line[k].v, s->expect[k]);
    }
    break;
  case WP_W3_FAN:
    for (uint64_t i = 0; i < n; i++) fan_model_step(s->fan_model, &s->fan);
    for (uint32_t set = 0; set < 2; set++)
      for (uint32_t j = 0; j < FAN_WIDTH; j++)
        if (s->line[set * FAN_WIDTH + j].v != s->fan_model[set][j])
          wb_fatal("tbb_w3_fan: buffer %u of set %u holds %" PRIu64 ", expected %" PRIu64
                   " (layer %" PRIu64 ", task %u)",
                   j, set, s->line[set * FAN_WIDTH + j].v, s->fan_model[set][j], s->fan.layer,
                   s->fan.j);
    break;
  }
}

static void ps_setup(void **state, wb_ctx *c) {
  ps *s = wb_calloc(1, sizeof(*s));
  s->c = c;
  s->line = aligned_alloc(_Alignof(wp_line), NBUFS * sizeof(wp_line));
  if (!s->line) wb_fatal("%s: out of memory for the buffers", wb_name(c));
  memset(s->line, 0, NBUFS * sizeof(wp_line));
  fan_model_init(s->fan_model);
  s->fan.layer = 1;
  if (wb_arg(c) == WP_W3_FAN)
    for (uint32_t set = 0; set < 2; set++)
      for (uint32_t j = 0; j < FAN_WIDTH; j++)
        s->line[set * FAN_WIDTH + j].v = s->fan_model[set][j];
  uint64_t *bufs[NBUFS];
  for (uint32_t i = 0; i < NBUFS; i++) bufs[i] = &s->line[i].v;
  char err[256];
  s->graph = wp_tbb_open((wp_workload)wb_arg(c), bufs, err, sizeof(err));
  if (!s->graph) wb_fatal("%s: %s", wb_name(c), err);
  /* As weft's setups: a few tasks first, so that the workers exist before the first run. */
  uint64_t warm = wb_arg(c) == WP_W3_FAN ? 4u * FAN_WIDTH : 16u;
  ps_run_tasks(s, warm);
  ps_check(s, warm);
  if (wb_arg(c) == WP_W1_CHAIN)
    wb_note(c,
            "peers: oneTBB %s, default concurrency %d (the client thread joins in "
            "wait_for_all); every buffer on its own cache line",
            wp_tbb_version(), wp_tbb_concurrency());
  *state = s;
}

static uint64_t ps_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  ps *s = state;
  uint64_t t0 = wb_now_ns();
  ps_run_tasks(s, n);
  uint64_t t1 = wb_now_ns();
  ps_check(s, n);
  return t1 - t0;
}

static void ps_teardown(void *state, wb_ctx *c) {
  (void)c;
  ps *s = state;
  wp_tbb_close(s->graph);
  free(s->line);
  free(s);
}

static const wb_bench peers[] = {
    {.name = "tbb_w1_chain",
     .description = "oneTBB flow graph: W1's chain, one serial function_node fed by try_put from "
                    "the client; submit to completion",
     .iterations = ITERS_CHAIN,
     .arg = WP_W1_CHAIN,
     .account = WB_ACCOUNT_THREADS,
     .setup = ps_setup,
     .run = ps_run,
     .teardown = ps_teardown},
    {.name = "tbb_w2_independent",
     .description = "oneTBB flow graph: W2, four serial function_nodes fed round-robin by try_put; "
                    "submit to completion",
     .iterations = ITERS_INDEPENDENT,
     .arg = WP_W2_INDEPENDENT,
     .account = WB_ACCOUNT_THREADS,
     .setup = ps_setup,
     .run = ps_run,
     .teardown = ps_teardown},
    {.name = "tbb_w3_fan",
     .description = "oneTBB flow graph: W3's layers as a reused graph of continue_nodes with the "
                    "bindings' edges, started block by block; submit to completion",
     .iterations = ITERS_FAN,
     .arg = WP_W3_FAN,
     .account = WB_ACCOUNT_THREADS,
     .setup = ps_setup,
     .run = ps_run,
     .teardown = ps_teardown},
};

void wb_register_peers(void) {
  for (size_t i = 0; i < sizeof(peers) / sizeof(peers[0]); i++) wb_register(&peers[i]);
}
