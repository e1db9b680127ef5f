/* weft-mlp_train: trains the MLP of examples/mlp on the host backend.
 *
 * 1. A 16-64-4 MLP with full-batch SGD on 512 synthetic points (4 clusters),
 *    one step = 26 host-kernel launches spread over 4 streams (forward and
 *    layer-1 backward on stream 0, layer-2 gradient and update on 1, bias
 *    gradients and updates on 2, a held-out evaluation forward on 3). The loss
 *    is printed every 20 steps; the run fails if it does not fall below the
 *    threshold.
 * 2. Per-step cost of eager launches: submission only, and submission to
 *    completion.
 * 3. One more step with an injected failure in the check of the logits:
 *    reading the loss and the weights reports the root and the chain of
 *    skipped launches, while the evaluation branch on stream 3 reads back. */
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
    for (size_t h = 0; h < weft_error_chain_length(u); h++)
      printf("    %s %s\n", h == 0 ? "chain:" : "      ", weft_error_chain_at(u, h));
  }
}

int main(void) {
  int rc = 0;
  weft_device *dev = NULL;
  mlp *m = NULL;
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

  printf("== 1. training: %u points, %u-%u-%u MLP, lr %.2f, %u steps, %u launches per step on "
         "%d streams ==\n",
         cfg.n, cfg.d, cfg.h, cfg.k, (double)cfg.lr, STEPS, MLP_STEP_LAUNCHES, MLP_STREAMS);
  float first_loss = 0, loss = 0, acc = 0, eval_acc = 0;
  double t0 = now_s();
  for (int s = 1; s <= STEPS; s++) {
    TRY(mlp_step_enqueue(m, &streams));
    if (s == 1 || s % PRINT_EVERY == 0) {
      TRY(mlp_loss(m, &loss));
      if (s == 1) first_loss = loss;
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

  printf("\n== 2. per-step cost of eager launches (%d steps) ==\n", TIMED_STEPS);
  double submit = 0;
  t0 = now_s();
  for (int s = 0; s < TIMED_STEPS; s++) {
    double a = now_s();
    TRY(mlp_step_enqueue(m, &streams));
    submit += now_s() - a;
  }
  TRY(mlp_loss(m, &loss));
  double total = now_s() - t0;
  weft_device_stats stats;
  TRY(weft_device_stats_get(dev, &stats));
  printf("  submission %.1f us per step (%.2f us per launch); submission to completion %.3f ms "
         "per step\n",
         submit * 1e6 / TIMED_STEPS, submit * 1e6 / (TIMED_STEPS * MLP_STEP_LAUNCHES),
         total * 1e3 / TIMED_STEPS);
  printf("  device totals: %llu launches run; cross-stream waits %llu issued, %llu elided\n",
         (unsigned long long)stats.launches_run, (unsigned long long)stats.cross_stream_waits,
         (unsigned long long)stats.waits_elided);

  printf("\n== 3. one step with an injected failure in fwd.check_finite ==\n");
  float before_eval = 0;
  TRY(mlp_eval_accuracy(m, &before_eval));
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
out:
  mlp_destroy(m);
  weft_device_close(dev);
  return rc;
}
