/* weft-mlp_train: the project's main demo. Trains the MLP of examples/mlp on
 * the host backend as a task graph, captured once and replayed per step.
 *
 * 1. One training step (a 16-64-4 MLP, full-batch SGD on 512 synthetic
 *    points in 4 clusters: 26 host-kernel launches) is recorded into a task
 *    graph through the step's launch hook. The graph derives the
 *    dependencies from the bindings and puts independent chains on their
 *    own lanes (streams); `--dot FILE` writes it as Graphviz.
 * 2. The graph is captured: prepare, one eager warm-up step, begin, the
 *    graph's submission (recorded, not run), end. Training then replays the
 *    capture once per step; the loss is printed every 20 steps and the run
 *    fails if it does not fall below the threshold.
 * 3. Per-step time, submission to completion, of eager launches, graph
 *    submission and replay, measured in the same run.
 * 4. One more step, eager, with an injected failure in the check of the
 *    logits: reading the loss and the weights reports the root and the chain
 *    of skipped launches, while the evaluation branch reads back. With
 *    `--trace FILE`, that step is recorded as a Chrome trace-event timeline
 *    (weft_trace_begin / weft_trace_end; docs/observability.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "mlp/mlp.h"

#define STEPS          200
#define PRINT_EVERY    20
#define LOSS_THRESHOLD 0.15f
#define TIMED_STEPS    100
#define GRAPH_BASE     0 /* the graph's lanes are streams 0.. */

/* The step's launch hook: records into a task graph instead of launching. */
static weft_status add_to_graph(void *ctx, weft_stream_id stream, weft_kernel k,
                                const uint32_t grid[3], const uint32_t block[3],
                                const weft_binding *b, size_t nb, const void *scalars,
                                size_t scalar_bytes) {
  (void)stream; /* the graph assigns lanes itself */
  return weft_taskgraph_add_launch(ctx, k, grid, block, b, nb, scalars, scalar_bytes, NULL);
}

static int fail(weft_status st, const char *what) {
  char buf[2048];
  weft_error_format(st, buf, sizeof(buf));
  fprintf(stderr, "mlp_train: %s failed: %s\n", what, buf);
  weft_error_free(st);
  return 1;
}
#define TRY(call)                                                                                  \
  do {                                                                                             \
    weft_status st_ = (call);                                                                      \
    if (st_) {                                                                                     \
      rc = fail(st_, #call);                                                                       \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_failure(const char *what, weft_status st) {
  char buf[2048];
  printf("  %s: %s\n", what, weft_error_kind_name(weft_error_kind_of(st)));
  for (size_t i = 0; i < weft_error_count(st); i++) {
    weft_status u = weft_error_at(st, i);
    weft_error_format(weft_error_root(u), buf, sizeof(buf));
    printf("    failure #%llu, claimed by %u buffer(s)\n",
           (unsigned long long)weft_error_failure_id(u), (unsigned)weft_error_claimed(u));
    printf("    root cause: %s\n", buf);
    if (weft_error_origin(u)) printf("    failed: %s\n", weft_error_origin(u));
    for (size_t h = 0; h < weft_error_chain_length(u); h++)
      printf("    %s %s\n", h == 0 ? "chain:" : "      ", weft_error_chain_at(u, h));
  }
}

typedef enum { EAGER, GRAPH, REPLAY } mode;

/* One training step, the way |how| says. */
static weft_status run_step(mode how, mlp *m, const mlp_streams *eager, weft_taskgraph *g,
                            weft_capture *cap) {
  switch (how) {
  case EAGER:
    return mlp_step_enqueue(m, eager);
  case GRAPH:
    return weft_taskgraph_submit(g, GRAPH_BASE);
  default:
    return weft_capture_replay(cap);
  }
}

int main(int argc, char **argv) {
  int rc = 0;
  weft_device *dev = NULL;
  mlp *m = NULL;
  weft_taskgraph *g = NULL;
  weft_capture *cap = NULL;
  const char *dot_path = NULL, *trace_path = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--dot") && i + 1 < argc) {
      dot_path = argv[++i];
    } else if (!strcmp(argv[i], "--trace") && i + 1 < argc) {
      trace_path = argv[++i]; /* the failure step's timeline (docs/observability.md) */
    } else {
      fprintf(stderr, "usage: %s [--dot FILE] [--trace FILE]\n", argv[0]);
      return 2;
    }
  }
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = MLP_STREAMS;
  weft_status st0 = weft_device_open(&o, &dev);
  if (st0) return fail(st0, "weft_device_open");

  mlp_config cfg;
  mlp_config_default(&cfg);
  TRY(mlp_create(dev, &cfg, &m));
  mlp_streams streams;
  mlp_streams_default(&streams, 0);

  /* 1. The step as a task graph. */
  TRY(weft_taskgraph_create(dev, &g));
  mlp_streams recorder = streams;
  recorder.launch = add_to_graph;
  recorder.launch_ctx = g;
  TRY(mlp_step_enqueue(m, &recorder));
  printf("== 1. one training step as a task graph: %zu launches, %zu dependencies, %u lanes ==\n",
         weft_taskgraph_node_count(g), weft_taskgraph_edge_count(g), weft_taskgraph_lane_count(g));
  for (uint32_t lane = 0; lane < weft_taskgraph_lane_count(g); lane++) {
    size_t n = 0;
    for (size_t i = 0; i < weft_taskgraph_node_count(g); i++) {
      weft_taskgraph_node_info info = {0};
      TRY(weft_taskgraph_node(g, (uint32_t)i, &info));
      n += info.lane == lane;
    }
    printf("  lane %u: %zu launches\n", lane, n);
  }
  if (dot_path) {
    char *dot = NULL;
    TRY(weft_taskgraph_to_dot(g, &dot));
    FILE *f = fopen(dot_path, "w");
    if (!f || fputs(dot, f) < 0) {
      fprintf(stderr, "mlp_train: cannot write %s\n", dot_path);
      rc = 1;
    }
    if (f) fclose(f);
    weft_free(dot);
    if (rc) goto out;
    printf("  written as Graphviz to %s (dot -Tsvg %s > step.svg)\n", dot_path, dot_path);
  }

  /* 2. Captured once, replayed per step. */
  weft_stream_id lanes[MLP_STREAMS];
  uint32_t nlanes = weft_taskgraph_lane_count(g);
  for (uint32_t i = 0; i < nlanes; i++) lanes[i] = GRAPH_BASE + i;
  TRY(weft_capture_prepare(dev, lanes, nlanes, &cap));
  TRY(weft_taskgraph_submit(g, GRAPH_BASE)); /* warm-up: step 1, eager */
  float first_loss = 0, loss = 0, acc = 0, eval_acc = 0;
  TRY(mlp_loss(m, &first_loss));
  TRY(weft_capture_begin(cap));
  TRY(weft_taskgraph_submit(g, GRAPH_BASE)); /* recorded, not run */
  TRY(weft_capture_end(cap));
  printf("\n== 2. training: %u points, %u-%u-%u MLP, lr %.2f, %d steps, each a replay of the "
         "captured graph (%zu launches) ==\n",
         cfg.n, cfg.d, cfg.h, cfg.k, (double)cfg.lr, STEPS, weft_capture_launches(cap));
  printf("  step %3d  loss %.4f  (the warm-up, before the capture)\n", 1, (double)first_loss);
  double t0 = now_s();
  for (int s = 2; s <= STEPS; s++) {
    TRY(weft_capture_replay(cap));
    if (s % PRINT_EVERY == 0) {
      TRY(mlp_loss(m, &loss));
      printf("  step %3d  loss %.4f\n", s, (double)loss);
    }
  }
  double train_s = now_s() - t0;
  TRY(mlp_accuracy(m, &acc));
  TRY(mlp_eval_accuracy(m, &eval_acc));
  printf("  final: loss %.4f (from %.4f), training accuracy %.1f%%, held-out accuracy %.1f%% "
         "(%u points); %.1f ms for %d steps\n",
         (double)loss, (double)first_loss, 100.0 * acc, 100.0 * eval_acc, cfg.n_eval, train_s * 1e3,
         STEPS);
  if (!(loss < LOSS_THRESHOLD) || !(loss < first_loss)) {
    fprintf(stderr, "mlp_train: the loss %.4f did not fall below %.2f\n", (double)loss,
            (double)LOSS_THRESHOLD);
    rc = 1;
    goto out;
  }

  /* 3. Per-step time, three ways, in the same run (rounds interleaved so
   * that machine noise hits all three alike). */
  printf("\n== 3. per-step time, submission to completion (%d steps each, interleaved) ==\n",
         TIMED_STEPS);
  static const char *const names[3] = {"eager launches", "graph submission", "capture replay"};
  double total[3] = {0, 0, 0};
  for (int round = 0; round < TIMED_STEPS / 10; round++)
    for (int how = 0; how < 3; how++) {
      double a = now_s();
      for (int s = 0; s < 10; s++) TRY(run_step((mode)how, m, &streams, g, cap));
      TRY(mlp_loss(m, &loss));
      total[how] += now_s() - a;
    }
  for (int how = 0; how < 3; how++)
    printf("  %-17s %7.1f us per step (%5.2f us per launch)  %.2fx eager\n", names[how],
           total[how] * 1e6 / TIMED_STEPS, total[how] * 1e6 / (TIMED_STEPS * MLP_STEP_LAUNCHES),
           total[how] / total[EAGER]);
  weft_device_stats stats = {0};
  TRY(weft_device_stats_get(dev, &stats));
  printf("  device totals: %llu launches run (%llu replayed); cross-stream waits %llu issued, "
         "%llu elided\n",
         (unsigned long long)stats.launches_run, (unsigned long long)stats.launches_replayed,
         (unsigned long long)stats.cross_stream_waits, (unsigned long long)stats.waits_elided);

  printf("\n== 4. one eager step with an injected failure in fwd.check_finite ==\n");
  float before_eval = 0;
  TRY(mlp_eval_accuracy(m, &before_eval));
  if (trace_path) TRY(weft_trace_begin(dev, 0)); /* the failure step, as a timeline */
  TRY(mlp_inject_failure(m, true));
  TRY(mlp_step_enqueue(m, &streams));
  weft_status st = mlp_loss(m, &loss);
  if (!st) {
    fprintf(stderr, "mlp_train: the loss read should have failed\n");
    rc = 1;
    goto out;
  }
  print_failure("reading the loss", st);
  weft_error_free(st);
  float *w1 = malloc((size_t)cfg.d * cfg.h * sizeof(float));
  if (!w1) {
    rc = 1;
    goto out;
  }
  st = weft_buffer_read(dev, 0, mlp_buffer(m, MLP_BUF_W1), 0, w1,
                        (uint64_t)cfg.d * cfg.h * sizeof(float));
  free(w1);
  if (!st) {
    fprintf(stderr, "mlp_train: the W1 read should have failed\n");
    rc = 1;
    goto out;
  }
  print_failure("reading W1 (its update was skipped)", st);
  char line[4096];
  weft_error_format(st, line, sizeof(line));
  printf("  as one line: %s\n", line);
  weft_error_free(st);
  st = mlp_eval_accuracy(m, &eval_acc);
  if (st) {
    rc = fail(st, "the evaluation branch's read (independent of the failure)");
    goto out;
  }
  printf("the evaluation branch on stream 3 read only the weights before the failed step: its "
         "accuracy reads back fine (%.1f%%, %.1f%% one step earlier)\n",
         100.0 * eval_acc, 100.0 * before_eval);
  TRY(weft_device_stats_get(dev, &stats));
  printf("device totals: %llu launches run, %llu failed, %llu skipped\n",
         (unsigned long long)stats.launches_run, (unsigned long long)stats.launches_failed,
         (unsigned long long)stats.launches_skipped);
  if (trace_path) {
    TRY(weft_trace_end(dev, trace_path));
    printf("the failure step's trace: %s (open it in https://ui.perfetto.dev or "
           "chrome://tracing: the failed launch, the skipped ones joined by arrows)\n",
           trace_path);
  }
out:
  weft_capture_destroy(cap);
  weft_taskgraph_destroy(g);
  mlp_destroy(m);
  weft_device_close(dev);
  return rc;
}
