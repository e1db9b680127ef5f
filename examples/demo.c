/* weft demo on the host backend.
 *
 * 1. A multi-stream workload: four batches of a small feature pipeline
 *    (standardize -> check_finite -> affine -> relu), one batch per stream,
 *    then a reduction on stream 0 that reads every batch's output, so the
 *    scheduler orders streams only where those buffers cross.
 * 2. The same workload with a NaN injected into batch 2: check_finite fails
 *    on stream 2, everything downstream of it is skipped, and the read of the
 *    reduction reports the root error and the chain of skipped launches,
 *    while batch 1, which shares no buffer with the failure, reads back fine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#define BATCHES  4
#define FEATURES 4096
#define BLOCKS   8

static int fail(weft_status st, const char *what) {
  char buf[1024];
  weft_error_format(st, buf, sizeof(buf));
  fprintf(stderr, "demo: %s failed: %s\n", what, buf);
  weft_error_free(st);
  return 1;
}
#define TRY(call)                                                                                  \
  do {                                                                                             \
    weft_status st_ = (call);                                                                      \
    if (st_) return fail(st_, #call);                                                              \
  } while (0)

/* The slice [lo, hi) of n elements that block |ctx->block_idx[0]| handles. */
static void span(const weft_kernel_ctx *ctx, size_t n, size_t *lo, size_t *hi) {
  size_t per = (n + ctx->grid[0] - 1) / ctx->grid[0];
  *lo = ctx->block_idx[0] * per;
  *hi = *lo + per > n ? n : *lo + per;
  if (*lo > n) *lo = n;
}

/* out = (in - mean) / 4: the batch statistic is a scalar computed upstream. */
static weft_status k_standardize(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const float *in = ctx->buffers[0];
  float *out = ctx->buffers[1], mean;
  memcpy(&mean, ctx->scalars, sizeof(mean));
  size_t lo, hi;
  span(ctx, ctx->sizes[0] / sizeof(float), &lo, &hi);
  for (size_t i = lo; i < hi; i++) out[i] = (in[i] - mean) / 4.0f;
  return NULL;
}

/* Validation: refuses to pass a non-finite value downstream. */
static weft_status k_check_finite(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const float *in = ctx->buffers[0];
  float *out = ctx->buffers[1];
  size_t lo, hi;
  span(ctx, ctx->sizes[0] / sizeof(float), &lo, &hi);
  for (size_t i = lo; i < hi; i++) {
    if (!isfinite(in[i]))
      return weft_error_make(WEFT_ERR_VALIDATION, "non-finite activation %f at element %zu",
                             (double)in[i], i);
    out[i] = in[i];
  }
  return NULL;
}

/* out = 1.5 * in + 0.25 */
static weft_status k_affine(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const float *in = ctx->buffers[0];
  float *out = ctx->buffers[1];
  size_t lo, hi;
  span(ctx, ctx->sizes[0] / sizeof(float), &lo, &hi);
  for (size_t i = lo; i < hi; i++) out[i] = 1.5f * in[i] + 0.25f;
  return NULL;
}

static weft_status k_relu(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  float *x = ctx->buffers[0];
  size_t lo, hi;
  span(ctx, ctx->sizes[0] / sizeof(float), &lo, &hi);
  for (size_t i = lo; i < hi; i++) x[i] = x[i] > 0 ? x[i] : 0;
  return NULL;
}

/* out[b] = sum of batch b's features; one block, reads every batch. */
static weft_status k_reduce(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  double *out = ctx->buffers[ctx->num_buffers - 1];
  for (size_t b = 0; b + 1 < ctx->num_buffers; b++) {
    const float *x = ctx->buffers[b];
    double s = 0;
    for (size_t i = 0; i < ctx->sizes[b] / sizeof(float); i++) s += x[i];
    out[b] = s;
  }
  return NULL;
}

typedef struct demo {
  weft_device *dev;
  weft_kernel standardize, check, affine, relu, reduce;
  weft_buffer input[BATCHES], tmp[BATCHES], act[BATCHES], out;
} demo;

static float input_value(int b, int i) {
  return (float)((i * 7 + b * 13) % 101) - 40.0f;
}

/* The host reference of one batch's sum. */
static double reference(int b) {
  double mean = 0, s = 0;
  for (int i = 0; i < FEATURES; i++) mean += input_value(b, i);
  float m = (float)(mean / FEATURES);
  for (int i = 0; i < FEATURES; i++) {
    float x = 1.5f * ((input_value(b, i) - m) / 4.0f) + 0.25f;
    s += x > 0 ? x : 0;
  }
  return s;
}

static int setup(demo *d) {
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = BATCHES;
  TRY(weft_device_open(&o, &d->dev));
  TRY(weft_kernel_host(d->dev, "standardize", k_standardize, NULL, &d->standardize));
  TRY(weft_kernel_host(d->dev, "check_finite", k_check_finite, NULL, &d->check));
  TRY(weft_kernel_host(d->dev, "affine", k_affine, NULL, &d->affine));
  TRY(weft_kernel_host(d->dev, "relu", k_relu, NULL, &d->relu));
  TRY(weft_kernel_host(d->dev, "reduce", k_reduce, NULL, &d->reduce));
  for (int b = 0; b < BATCHES; b++) {
    TRY(weft_buffer_create(d->dev, (weft_stream_id)b, FEATURES * sizeof(float), &d->input[b]));
    TRY(weft_buffer_create(d->dev, (weft_stream_id)b, FEATURES * sizeof(float), &d->tmp[b]));
    TRY(weft_buffer_create(d->dev, (weft_stream_id)b, FEATURES * sizeof(float), &d->act[b]));
  }
  TRY(weft_buffer_create(d->dev, 0, BATCHES * sizeof(double), &d->out));
  return 0;
}

/* Submits the whole workload; |nan_batch| >= 0 injects a NaN there. */
static int submit(demo *d, int nan_batch) {
  static float host[FEATURES];
  const uint32_t grid[3] = {BLOCKS, 1, 1}, block[3] = {256, 1, 1}, one[3] = {1, 1, 1};
  for (int b = 0; b < BATCHES; b++) {
    weft_stream_id s = (weft_stream_id)b;
    double mean = 0;
    for (int i = 0; i < FEATURES; i++) mean += (host[i] = input_value(b, i));
    float m = (float)(mean / FEATURES);
    if (b == nan_batch) host[FEATURES / 3] = NAN;
    TRY(weft_buffer_write(d->dev, s, d->input[b], 0, host, sizeof(host)));
    weft_binding std_b[2] = {{d->input[b], 0, WEFT_WHOLE, WEFT_READ},
                             {d->tmp[b], 0, WEFT_WHOLE, WEFT_WRITE}};
    TRY(weft_launch(d->dev, s, d->standardize, grid, block, std_b, 2, &m, sizeof(m)));
    weft_binding chk_b[2] = {{d->tmp[b], 0, WEFT_WHOLE, WEFT_READ},
                             {d->act[b], 0, WEFT_WHOLE, WEFT_WRITE}};
    TRY(weft_launch(d->dev, s, d->check, grid, block, chk_b, 2, NULL, 0));
    weft_binding aff_b[2] = {{d->act[b], 0, WEFT_WHOLE, WEFT_READ},
                             {d->tmp[b], 0, WEFT_WHOLE, WEFT_WRITE}};
    TRY(weft_launch(d->dev, s, d->affine, grid, block, aff_b, 2, NULL, 0));
    weft_binding relu_b[1] = {{d->tmp[b], 0, WEFT_WHOLE, WEFT_READ_WRITE}};
    TRY(weft_launch(d->dev, s, d->relu, grid, block, relu_b, 1, NULL, 0));
  }
  weft_binding red_b[BATCHES + 1];
  for (int b = 0; b < BATCHES; b++) red_b[b] = (weft_binding){d->tmp[b], 0, WEFT_WHOLE, WEFT_READ};
  red_b[BATCHES] = (weft_binding){d->out, 0, WEFT_WHOLE, WEFT_WRITE};
  TRY(weft_launch(d->dev, 0, d->reduce, one, one, red_b, BATCHES + 1, NULL, 0));
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void print_failure(weft_status st) {
  char buf[2048];
  printf("  read failed: %s\n", weft_error_kind_name(weft_error_kind_of(st)));
  for (size_t i = 0; i < weft_error_count(st); i++) {
    weft_status u = weft_error_at(st, i);
    weft_status root = weft_error_root(u);
    weft_error_format(root, buf, sizeof(buf));
    printf("  failure #%llu, claimed by %u buffer(s)\n",
           (unsigned long long)weft_error_failure_id(u), (unsigned)weft_error_claimed(u));
    printf("    root cause: %s\n", buf);
    if (weft_error_origin(u)) printf("    failed: %s\n", weft_error_origin(u));
    for (size_t h = 0; h < weft_error_chain_length(u); h++)
      printf("    %s %s\n", h == 0 ? "chain:" : "      ", weft_error_chain_at(u, h));
  }
}

int main(void) {
  demo d;
  memset(&d, 0, sizeof(d));
  if (setup(&d)) return 1;
  double sums[BATCHES];

  printf("== 1. multi-stream workload: %d batches x %d features, one stream each ==\n", BATCHES,
         FEATURES);
  const int rounds = 50;
  double t0 = now_s();
  for (int r = 0; r < rounds; r++)
    if (submit(&d, -1)) return 1;
  TRY(weft_buffer_read(d.dev, 0, d.out, 0, sums, sizeof(sums)));
  double dt = now_s() - t0;
  int ok = 1;
  for (int b = 0; b < BATCHES; b++) {
    double want = reference(b);
    int good = fabs(sums[b] - want) <= 1e-3 * fabs(want) + 1e-3;
    ok &= good;
    printf("  batch %d on stream %d: sum %.3f (host reference %.3f) %s\n", b, b, sums[b], want,
           good ? "ok" : "MISMATCH");
  }
  weft_device_stats stats = {0};
  TRY(weft_device_stats_get(d.dev, &stats));
  printf("  %d rounds, %llu launches in %.1f ms (%.2f us per launch); cross-stream waits: %llu "
         "issued, %llu elided; %llu streams\n",
         rounds, (unsigned long long)stats.launches_run, dt * 1e3,
         dt * 1e6 / (double)stats.launches_run, (unsigned long long)stats.cross_stream_waits,
         (unsigned long long)stats.waits_elided, (unsigned long long)stats.streams_created);
  if (!ok) return 1;

  printf("\n== 2. injected failure: a NaN in batch 2's input ==\n");
  if (submit(&d, 2)) return 1;
  weft_status st = weft_buffer_read(d.dev, 0, d.out, 0, sums, sizeof(sums));
  if (!st) {
    fprintf(stderr, "demo: the read of the reduction should have failed\n");
    return 1;
  }
  printf("reading the reduction (stream 0), which needed batch 2's activations:\n");
  print_failure(st);
  char line[2048];
  weft_error_format(st, line, sizeof(line));
  printf("  as one line: %s\n", line);
  char *json = weft_error_to_json(st);
  printf("  as JSON: %s\n", json ? json : "(out of memory)");
  weft_free(json);
  weft_error_free(st);

  float x[FEATURES];
  st = weft_buffer_read(d.dev, 1, d.tmp[1], 0, x, sizeof(x));
  if (st) return fail(st, "read of batch 1 (independent of the failure)");
  double s1 = 0;
  for (int i = 0; i < FEATURES; i++) s1 += x[i];
  printf("batch 1 shares no buffer with the failure: its activations read back fine "
         "(sum %.3f, reference %.3f)\n",
         s1, reference(1));
  TRY(weft_device_stats_get(d.dev, &stats));
  printf("device totals: %llu launches run, %llu failed, %llu skipped\n",
         (unsigned long long)stats.launches_run, (unsigned long long)stats.launches_failed,
         (unsigned long long)stats.launches_skipped);
  weft_device_close(d.dev);
  return 0;
}
