/* The MLP workload of examples/mlp: every kernel against a naive reference on
 * small random shapes (row splits that do not divide evenly across a grid of
 * several blocks, empty blocks, rows wider than the matmul's column chunk),
 * size, scalar and label mismatches (InvalidArgument, through a device and
 * called directly), one weft step against mlp_reference_step, deterministic
 * training to a loss threshold, an injected failure (Unwritten with the root
 * and the chain of skipped kernels while the evaluation branch reads back),
 * recovery by rewriting the weights, a recorded step replayed through
 * weft_launch, and mlp_destroy leaving no buffer, failure or byte behind.
 * Every device runs on a counting allocator that must end with zero live
 * blocks. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

#include "mlp/mlp.h"

/* ---- helpers --------------------------------------------------------------------------- */

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s;
}

static void sync_all(env *e) {
  for (weft_stream_id s = 0; s < e->opts.max_streams; s++) EXPECT_OK(weft_sync(e->dev, s));
}

/* |got| within 1e-5 relative of |want| (an absolute floor for values near 0). */
static bool close_to(float got, float want) {
  double g = got, w = want;
  return fabs(g - w) <= 1e-5 * fmax(fabs(g), fabs(w)) + 1e-9;
}

static void expect_close(const float *got, const float *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++)
    cr_assert(close_to(got[i], want[i]), "%s[%zu]: got %.9g, want %.9g", what, i, (double)got[i],
              (double)want[i]);
}

static float *randf(uint64_t *s, size_t n) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  cr_assert_not_null(p);
  for (size_t i = 0; i < n; i++) p[i] = 2.0f * mlp_rng_uniform(s) - 1.0f;
  return p;
}

static int32_t *randlabels(uint64_t *s, size_t n, uint32_t classes) {
  int32_t *p = malloc((n ? n : 1) * sizeof(int32_t));
  cr_assert_not_null(p);
  for (size_t i = 0; i < n; i++) p[i] = (int32_t)(mlp_rng_next(s) % classes);
  return p;
}

static uint32_t rand_in(uint64_t *s, uint32_t lo, uint32_t hi) {
  return lo + (uint32_t)(mlp_rng_next(s) % (hi - lo + 1));
}

/* One host array bound to a launch. */
typedef struct hb {
  void *host;
  uint64_t bytes;
  weft_access access;
} hb;

/* Runs |fn| once on the device over a grid of |blocks|: creates a buffer per
 * binding, uploads the readable ones, launches, reads the writable ones back
 * and releases everything. Returns the first read error (NULL: all read). */
static weft_status run_kernel(env *e, const char *name, weft_host_kernel_fn fn, uint32_t blocks,
                              hb *b, size_t nb, const void *args, size_t args_bytes) {
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e->dev, name, fn, NULL, &k));
  weft_buffer bufs[8];
  weft_binding bind[8];
  cr_assert_leq(nb, 8);
  for (size_t i = 0; i < nb; i++) {
    EXPECT_OK(weft_buffer_create(e->dev, i % 2, b[i].bytes, &bufs[i]));
    if (b[i].access & WEFT_READ)
      EXPECT_OK(weft_buffer_write(e->dev, i % 2, bufs[i], 0, b[i].host, b[i].bytes));
    bind[i] = (weft_binding){bufs[i], 0, WEFT_WHOLE, b[i].access};
  }
  const uint32_t grid[3] = {blocks, 1, 1}, block[3] = {1, 1, 1};
  EXPECT_OK(weft_launch(e->dev, 1, k, grid, block, bind, nb, args, args_bytes));
  weft_status first = NULL;
  for (size_t i = 0; i < nb; i++) {
    if (b[i].access & WEFT_WRITE) {
      weft_status st = weft_buffer_read(e->dev, 0, bufs[i], 0, b[i].host, b[i].bytes);
      if (st && !first)
        first = st;
      else
        weft_error_free(st);
    }
  }
  for (size_t i = 0; i < nb; i++) EXPECT_OK(weft_buffer_release(e->dev, bufs[i]));
  return first;
}

/* The read failed with one Unwritten whose root has |kind| and whose message
 * contains |msg|; frees |st|. */
static void expect_unwritten_root(weft_status st, weft_error_kind kind, const char *msg, int line) {
  char text[4096];
  cr_assert_not_null(st, "line %d: the read succeeded", line);
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "line %d: %s", line, text);
  cr_assert_eq(weft_error_count(st), 1, "line %d: %s", line, text);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN, "line %d: %s", line, text);
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), kind, "line %d: root %s", line, text);
  cr_assert_not_null(strstr(weft_error_message(root), msg), "line %d: '%s' lacks '%s'", line,
                     weft_error_message(root), msg);
  weft_error_free(st);
}
#define EXPECT_UNWRITTEN_ROOT(st, kind, msg) expect_unwritten_root((st), (kind), (msg), __LINE__)

/* ---- kernels against naive references ------------------------------------------------------ */

/* mode 0: C = A·B, 1: C = A^T·B, 2: C = A·B^T. */
static void naive_mm(int mode, const float *A, const float *B, float *C, uint32_t m, uint32_t k,
                     uint32_t n) {
  for (uint32_t i = 0; i < m; i++)
    for (uint32_t j = 0; j < n; j++) {
      double s = 0;
      for (uint32_t p = 0; p < k; p++) {
        double a = mode == 1 ? A[(size_t)p * m + i] : A[(size_t)i * k + p];
        double b = mode == 2 ? B[(size_t)j * k + p] : B[(size_t)p * n + j];
        s += a * b;
      }
      C[(size_t)i * n + j] = (float)s;
    }
}

Test(kernels, matmuls_match_the_reference_on_uneven_row_splits, .timeout = 120) {
  env e = env_new();
  uint64_t s = 42;
  static const weft_host_kernel_fn fns[3] = {mlp_k_matmul, mlp_k_matmul_tn, mlp_k_matmul_nt};
  static const char *names[3] = {"matmul", "matmul_tn", "matmul_nt"};
  for (int trial = 0; trial < 12; trial++) {
    int mode = trial % 3;
    mlp_mm_args a = {rand_in(&s, 1, 13), rand_in(&s, 1, 9), rand_in(&s, 1, 19)};
    if (trial >= 9) a.n = 300 + (uint32_t)trial; /* wider than the kernels' column chunk */
    uint32_t blocks = rand_in(&s, 2, 6);         /* often more blocks than rows */
    size_t na = (size_t)a.m * a.k, nb = mode == 2 ? (size_t)a.n * a.k : (size_t)a.k * a.n;
    float *A = randf(&s, na), *B = randf(&s, nb), *C = calloc((size_t)a.m * a.n, sizeof(float));
    float *want = calloc((size_t)a.m * a.n, sizeof(float));
    naive_mm(mode, A, B, want, a.m, a.k, a.n);
    hb b[3] = {
        {A, na * 4, WEFT_READ}, {B, nb * 4, WEFT_READ}, {C, (uint64_t)a.m * a.n * 4, WEFT_WRITE}};
    EXPECT_OK(run_kernel(&e, names[mode], fns[mode], blocks, b, 3, &a, sizeof(a)));
    char what[96];
    snprintf(what, sizeof(what), "%s %ux%ux%u over %u blocks", names[mode], a.m, a.k, a.n, blocks);
    expect_close(C, want, (size_t)a.m * a.n, what);
    free(A);
    free(B);
    free(C);
    free(want);
  }
  env_close(&e);
}

Test(kernels, elementwise_kernels_match_the_reference, .timeout = 120) {
  env e = env_new();
  uint64_t s = 7;
  for (int trial = 0; trial < 4; trial++) {
    mlp_rc_args a = {rand_in(&s, 1, 11), rand_in(&s, 1, 9)};
    uint32_t blocks = rand_in(&s, 2, 5);
    size_t n = (size_t)a.rows * a.cols;
    float *X = randf(&s, n), *bias = randf(&s, a.cols), *Y = calloc(n, 4), *G = randf(&s, n);
    float *want = malloc(n * 4), *got = malloc(n * 4);
    /* bias_add (X is read-write) */
    memcpy(got, X, n * 4);
    for (size_t i = 0; i < n; i++) want[i] = X[i] + bias[i % a.cols];
    hb ba[2] = {{got, n * 4, WEFT_READ_WRITE}, {bias, a.cols * 4u, WEFT_READ}};
    EXPECT_OK(run_kernel(&e, "bias_add", mlp_k_bias_add, blocks, ba, 2, &a, sizeof(a)));
    expect_close(got, want, n, "bias_add");
    /* relu */
    for (size_t i = 0; i < n; i++) want[i] = X[i] > 0 ? X[i] : 0;
    hb br[2] = {{X, n * 4, WEFT_READ}, {Y, n * 4, WEFT_WRITE}};
    EXPECT_OK(run_kernel(&e, "relu", mlp_k_relu, blocks, br, 2, &a, sizeof(a)));
    expect_close(Y, want, n, "relu");
    /* relu_grad: G where the ReLU's output is positive */
    memcpy(got, G, n * 4);
    for (size_t i = 0; i < n; i++) want[i] = Y[i] > 0 ? G[i] : 0;
    hb bg[2] = {{got, n * 4, WEFT_READ_WRITE}, {Y, n * 4, WEFT_READ}};
    EXPECT_OK(run_kernel(&e, "relu_grad", mlp_k_relu_grad, blocks, bg, 2, &a, sizeof(a)));
    expect_close(got, want, n, "relu_grad");
    /* sgd */
    mlp_scaled_args sa = {a.rows, a.cols, 0.25f};
    memcpy(got, X, n * 4);
    for (size_t i = 0; i < n; i++) want[i] = X[i] - 0.25f * G[i];
    hb bs[2] = {{got, n * 4, WEFT_READ_WRITE}, {G, n * 4, WEFT_READ}};
    EXPECT_OK(run_kernel(&e, "sgd", mlp_k_sgd, blocks, bs, 2, &sa, sizeof(sa)));
    expect_close(got, want, n, "sgd");
    /* bias_grad: column sums, columns split across blocks */
    for (uint32_t j = 0; j < a.cols; j++) {
      double c = 0;
      for (uint32_t i = 0; i < a.rows; i++) c += G[(size_t)i * a.cols + j];
      want[j] = (float)c;
    }
    hb bb[2] = {{G, n * 4, WEFT_READ}, {got, a.cols * 4u, WEFT_WRITE}};
    EXPECT_OK(run_kernel(&e, "bias_grad", mlp_k_bias_grad, blocks, bb, 2, &a, sizeof(a)));
    expect_close(got, want, a.cols, "bias_grad");
    /* mean (block 0 of any grid) */
    double m = 0;
    for (size_t i = 0; i < n; i++) m += X[i];
    float mean = 0, want_mean = (float)(m / (double)n);
    hb bm[2] = {{X, n * 4, WEFT_READ}, {&mean, 4, WEFT_WRITE}};
    EXPECT_OK(run_kernel(&e, "mean", mlp_k_mean, blocks, bm, 2, &a, sizeof(a)));
    cr_assert(close_to(mean, want_mean), "mean %g, want %g", (double)mean, (double)want_mean);
    free(X);
    free(bias);
    free(Y);
    free(G);
    free(want);
    free(got);
  }
  env_close(&e);
}

Test(kernels, softmax_xent_grad_accuracy_and_check_match_the_reference, .timeout = 120) {
  env e = env_new();
  uint64_t s = 99;
  for (int trial = 0; trial < 4; trial++) {
    mlp_rc_args a = {rand_in(&s, 1, 17), rand_in(&s, 2, 6)};
    uint32_t blocks = rand_in(&s, 2, 5);
    size_t n = (size_t)a.rows * a.cols;
    float *Z = randf(&s, n), *P = calloc(n, 4), *L = calloc(a.rows, 4), *D = calloc(n, 4);
    for (size_t i = 0; i < n; i++) Z[i] *= 4.0f;
    int32_t *y = randlabels(&s, a.rows, a.cols);
    float *wantP = malloc(n * 4), *wantL = malloc(a.rows * 4u), *wantD = malloc(n * 4);
    uint32_t correct = 0;
    for (uint32_t i = 0; i < a.rows; i++) {
      const float *z = Z + (size_t)i * a.cols;
      double mx = z[0], sum = 0;
      uint32_t arg = 0;
      for (uint32_t j = 1; j < a.cols; j++)
        if (z[j] > z[arg]) arg = j, mx = z[j];
      correct += arg == (uint32_t)y[i];
      for (uint32_t j = 0; j < a.cols; j++) sum += exp(z[j] - mx);
      for (uint32_t j = 0; j < a.cols; j++) {
        double p = exp(z[j] - mx) / sum;
        wantP[(size_t)i * a.cols + j] = (float)p;
        wantD[(size_t)i * a.cols + j] =
            (float)((p - ((uint32_t)y[i] == j ? 1.0 : 0.0)) / (double)a.rows);
      }
      wantL[i] = (float)-log(exp(z[y[i]] - mx) / sum);
    }
    hb bx[4] = {{Z, n * 4, WEFT_READ},
                {y, a.rows * 4u, WEFT_READ},
                {P, n * 4, WEFT_WRITE},
                {L, a.rows * 4u, WEFT_WRITE}};
    EXPECT_OK(run_kernel(&e, "softmax_xent", mlp_k_softmax_xent, blocks, bx, 4, &a, sizeof(a)));
    expect_close(P, wantP, n, "softmax");
    for (uint32_t i = 0; i < a.rows; i++)
      cr_assert(fabs(L[i] - wantL[i]) <= 1e-5 * fabs(wantL[i]) + 1e-6, "loss[%u] %g want %g", i,
                (double)L[i], (double)wantL[i]);
    mlp_scaled_args ga = {a.rows, a.cols, 1.0f / (float)a.rows};
    hb bg[3] = {{P, n * 4, WEFT_READ}, {y, a.rows * 4u, WEFT_READ}, {D, n * 4, WEFT_WRITE}};
    EXPECT_OK(run_kernel(&e, "xent_grad", mlp_k_xent_grad, blocks, bg, 3, &ga, sizeof(ga)));
    for (size_t i = 0; i < n; i++)
      cr_assert(fabs(D[i] - wantD[i]) <= 1e-5 * fabs(wantD[i]) + 1e-7, "dlogits[%zu] %g want %g", i,
                (double)D[i], (double)wantD[i]);
    float acc = -1;
    hb ba[3] = {{Z, n * 4, WEFT_READ}, {y, a.rows * 4u, WEFT_READ}, {&acc, 4, WEFT_WRITE}};
    EXPECT_OK(run_kernel(&e, "accuracy", mlp_k_accuracy, blocks, ba, 3, &a, sizeof(a)));
    cr_assert_eq(acc, (float)((double)correct / a.rows));
    /* check_finite passes finite values through unchanged */
    mlp_check_args ca = {a.rows, a.cols, 0, 0, 5};
    memcpy(D, Z, n * 4);
    hb bc[1] = {{D, n * 4, WEFT_READ_WRITE}};
    EXPECT_OK(run_kernel(&e, "check_finite", mlp_k_check_finite, blocks, bc, 1, &ca, sizeof(ca)));
    cr_assert_eq(memcmp(D, Z, n * 4), 0);
    free(Z);
    free(P);
    free(L);
    free(D);
    free(y);
    free(wantP);
    free(wantL);
    free(wantD);
  }
  env_close(&e);
}

Test(kernels, check_finite_fails_on_request_and_on_nan) {
  env e = env_new();
  float x[6] = {1, 2, 3, 4, 5, 6};
  mlp_check_args ca = {3, 2, 1, 0, 17};
  hb b[1] = {{x, sizeof(x), WEFT_READ_WRITE}};
  EXPECT_UNWRITTEN_ROOT(
      run_kernel(&e, "check_finite", mlp_k_check_finite, 2, b, 1, &ca, sizeof(ca)),
      WEFT_ERR_GENERIC, "injected failure at step 17");
  ca.fail = 0;
  x[5] = NAN;
  EXPECT_UNWRITTEN_ROOT(
      run_kernel(&e, "check_finite", mlp_k_check_finite, 2, b, 1, &ca, sizeof(ca)),
      WEFT_ERR_VALIDATION, "row 2, column 1");
  env_close(&e);
}

/* ---- mismatches ------------------------------------------------------------------------------ */

/* A launch whose binding is smaller than its shape says fails the launch
 * with InvalidArgument naming the kernel and the binding: the output reads
 * as Unwritten, the device stays usable. */
Test(mismatch, a_launch_with_a_wrong_binding_size_is_invalid_argument_at_read) {
  env e = env_new();
  float A[6] = {0}, B[6] = {0}, C[3] = {0};
  mlp_mm_args a = {2, 3, 2}; /* C should be 2x2 */
  hb b[3] = {{A, sizeof(A), WEFT_READ}, {B, sizeof(B), WEFT_READ}, {C, sizeof(C), WEFT_WRITE}};
  EXPECT_UNWRITTEN_ROOT(run_kernel(&e, "matmul", mlp_k_matmul, 2, b, 3, &a, sizeof(a)),
                        WEFT_ERR_INVALID_ARGUMENT,
                        "matmul: binding 2 (C) is 12 bytes, expected 16");
  int32_t y[3] = {0, 5, 1};
  float Z[6] = {0}, P[6], L[3];
  mlp_rc_args r = {3, 2};
  hb bx[4] = {{Z, sizeof(Z), WEFT_READ},
              {y, sizeof(y), WEFT_READ},
              {P, sizeof(P), WEFT_WRITE},
              {L, sizeof(L), WEFT_WRITE}};
  EXPECT_UNWRITTEN_ROOT(run_kernel(&e, "softmax_xent", mlp_k_softmax_xent, 1, bx, 4, &r, sizeof(r)),
                        WEFT_ERR_INVALID_ARGUMENT, "label 5 of row 1");
  /* still usable */
  mlp_mm_args ok = {2, 3, 1};
  hb b2[3] = {{A, sizeof(A), WEFT_READ}, {B, 12, WEFT_READ}, {C, 8, WEFT_WRITE}};
  EXPECT_OK(run_kernel(&e, "matmul", mlp_k_matmul, 2, b2, 3, &ok, sizeof(ok)));
  env_close(&e);
}

/* Every kernel called directly: valid arguments succeed; each binding one
 * element short, a wrong scalar size, a wrong binding count and an empty
 * shape each return InvalidArgument (and nothing crashes). */
typedef struct kcase {
  const char *name;
  weft_host_kernel_fn fn;
  size_t nb;
  uint64_t sizes[4];
  const void *args;
  size_t args_bytes;
} kcase;

static weft_status call_direct(const kcase *c, const uint64_t *sizes, size_t nb, size_t args_bytes,
                               const void *args) {
  static float store[4][64];
  void *bufs[4] = {store[0], store[1], store[2], store[3]};
  memset(store, 0, sizeof(store));
  weft_kernel_ctx ctx = {.grid = {3, 1, 1},
                         .block = {1, 1, 1},
                         .block_idx = {1, 0, 0},
                         .buffers = bufs,
                         .sizes = sizes,
                         .num_buffers = nb,
                         .scalars = args,
                         .scalar_bytes = args_bytes};
  return c->fn(&ctx, NULL);
}

Test(mismatch, every_kernel_refuses_mismatched_bindings_and_scalars) {
  mlp_mm_args mm = {2, 3, 4};
  mlp_rc_args rc = {3, 4};
  mlp_scaled_args sc = {3, 4, 0.5f};
  mlp_check_args ck = {3, 4, 0, 0, 1};
  kcase cases[] = {
      {"matmul", mlp_k_matmul, 3, {24, 48, 32}, &mm, sizeof(mm)},
      {"matmul_tn", mlp_k_matmul_tn, 3, {24, 48, 32}, &mm, sizeof(mm)},
      {"matmul_nt", mlp_k_matmul_nt, 3, {24, 48, 32}, &mm, sizeof(mm)},
      {"bias_add", mlp_k_bias_add, 2, {48, 16}, &rc, sizeof(rc)},
      {"relu", mlp_k_relu, 2, {48, 48}, &rc, sizeof(rc)},
      {"relu_grad", mlp_k_relu_grad, 2, {48, 48}, &rc, sizeof(rc)},
      {"softmax_xent", mlp_k_softmax_xent, 4, {48, 12, 48, 12}, &rc, sizeof(rc)},
      {"mean", mlp_k_mean, 2, {48, 4}, &rc, sizeof(rc)},
      {"xent_grad", mlp_k_xent_grad, 3, {48, 12, 48}, &sc, sizeof(sc)},
      {"bias_grad", mlp_k_bias_grad, 2, {48, 16}, &rc, sizeof(rc)},
      {"sgd", mlp_k_sgd, 2, {48, 48}, &sc, sizeof(sc)},
      {"check_finite", mlp_k_check_finite, 1, {48}, &ck, sizeof(ck)},
      {"accuracy", mlp_k_accuracy, 3, {48, 12, 4}, &rc, sizeof(rc)},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    kcase *c = &cases[i];
    EXPECT_OK(call_direct(c, c->sizes, c->nb, c->args_bytes, c->args));
    for (size_t b = 0; b < c->nb; b++) {
      uint64_t sizes[4];
      memcpy(sizes, c->sizes, sizeof(sizes));
      sizes[b] -= 4;
      weft_status st = call_direct(c, sizes, c->nb, c->args_bytes, c->args);
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s, binding %zu short",
                   c->name, b);
      char want[64];
      snprintf(want, sizeof(want), "%s: binding %zu", c->name, b);
      cr_assert_not_null(strstr(weft_error_message(st), want), "'%s' lacks '%s'",
                         weft_error_message(st), want);
      weft_error_free(st);
      sizes[b] += 8;
      st = call_direct(c, sizes, c->nb, c->args_bytes, c->args);
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s, binding %zu long",
                   c->name, b);
      weft_error_free(st);
    }
    weft_status st = call_direct(c, c->sizes, c->nb, c->args_bytes - 4, c->args);
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s, short scalars", c->name);
    weft_error_free(st);
    st = call_direct(c, c->sizes, c->nb - 1, c->args_bytes, c->args);
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s, one binding less",
                 c->name);
    weft_error_free(st);
    st = call_direct(c, c->sizes, c->nb, c->args_bytes, NULL);
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s, NULL scalars", c->name);
    weft_error_free(st);
    uint32_t zero[8];
    cr_assert_leq(c->args_bytes, sizeof(zero));
    memcpy(zero, c->args, c->args_bytes);
    zero[0] = 0; /* the first dimension of every args struct */
    st = call_direct(c, c->sizes, c->nb, c->args_bytes, zero);
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s, empty shape", c->name);
    weft_error_free(st);
  }
  ASSERT_NO_LEAKS();
}

/* ---- the model ------------------------------------------------------------------------------- */

static mlp_config small_config(void) {
  mlp_config c;
  mlp_config_default(&c);
  return c;
}

static float *train_x(const mlp_config *c, int32_t **y) {
  float *x = malloc((size_t)c->n * c->d * sizeof(float));
  *y = malloc((size_t)c->n * sizeof(int32_t));
  cr_assert(x && *y);
  mlp_dataset_generate(c, false, x, *y);
  return x;
}

static void expect_params_close(const mlp_config *c, const mlp_params *got,
                                const mlp_params *want) {
  expect_close(got->w1, want->w1, (size_t)c->d * c->h, "W1");
  expect_close(got->b1, want->b1, c->h, "b1");
  expect_close(got->w2, want->w2, (size_t)c->h * c->k, "W2");
  expect_close(got->b2, want->b2, c->k, "b2");
}

Test(model, config_and_arguments_are_checked) {
  env e = env_new();
  mlp *m = (mlp *)1;
  mlp_config c = small_config();
  c.h = 0;
  weft_status st = mlp_create(e.dev, &c, &m);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "config.h"));
  cr_assert_null(m);
  weft_error_free(st);
  c = small_config();
  c.lr = NAN;
  st = mlp_create(e.dev, &c, &m);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  st = mlp_create(NULL, NULL, &m);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  st = mlp_step_enqueue(NULL, NULL);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  mlp_destroy(NULL);
  cr_assert_eq(stats_of(e.dev).buffers_live, 0);
  env_close(&e);
}

Test(model, the_data_set_and_the_initial_weights_are_deterministic) {
  mlp_config c = small_config();
  int32_t *y1, *y2;
  float *x1 = train_x(&c, &y1), *x2 = train_x(&c, &y2);
  cr_assert_eq(memcmp(x1, x2, (size_t)c.n * c.d * 4), 0);
  cr_assert_eq(memcmp(y1, y2, (size_t)c.n * 4), 0);
  uint32_t count[4] = {0};
  for (uint32_t i = 0; i < c.n; i++) {
    cr_assert(y1[i] >= 0 && y1[i] < 4);
    count[y1[i]]++;
  }
  for (int k = 0; k < 4; k++)
    cr_assert_gt(count[k], c.n / 8, "class %d has %u points", k, count[k]);
  mlp_params p1, p2;
  cr_assert(mlp_params_alloc(&c, &p1) && mlp_params_alloc(&c, &p2));
  mlp_params_init(&c, &p1);
  mlp_params_init(&c, &p2);
  cr_assert_eq(memcmp(p1.w1, p2.w1, (size_t)c.d * c.h * 4), 0);
  cr_assert_eq(memcmp(p1.w2, p2.w2, (size_t)c.h * c.k * 4), 0);
  c.seed++;
  mlp_params_init(&c, &p2);
  cr_assert_neq(memcmp(p1.w1, p2.w1, (size_t)c.d * c.h * 4), 0, "another seed, other weights");
  mlp_params_free(&p1);
  mlp_params_free(&p2);
  free(x1);
  free(x2);
  free(y1);
  free(y2);
  ASSERT_NO_LEAKS();
}

/* Three weft steps against three reference steps: the weights, the loss and
 * the accuracy of each step agree to 1e-5 relative. */
Test(model, a_weft_step_equals_the_reference_step, .timeout = 120) {
  env e = env_new();
  mlp_config c = small_config();
  mlp *m;
  EXPECT_OK(mlp_create(e.dev, &c, &m));
  int32_t *y;
  float *x = train_x(&c, &y);
  mlp_params ref, got;
  cr_assert(mlp_params_alloc(&c, &ref) && mlp_params_alloc(&c, &got));
  mlp_params_init(&c, &ref);
  EXPECT_OK(mlp_params_read(m, &got));
  expect_params_close(&c, &got, &ref);
  mlp_streams s;
  mlp_streams_default(&s, 0);
  for (int step = 0; step < 3; step++) {
    float want_loss, want_acc, loss, acc;
    cr_assert(mlp_reference_step(&c, x, y, &ref, &want_loss, &want_acc));
    EXPECT_OK(mlp_step_enqueue(m, &s));
    EXPECT_OK(mlp_loss(m, &loss));
    EXPECT_OK(mlp_accuracy(m, &acc));
    cr_assert(close_to(loss, want_loss), "step %d: loss %.9g, reference %.9g", step, (double)loss,
              (double)want_loss);
    cr_assert_eq(acc, want_acc, "step %d: accuracy", step);
    EXPECT_OK(mlp_params_read(m, &got));
    expect_params_close(&c, &got, &ref);
  }
  cr_assert_eq(mlp_steps(m), 3);
  mlp_params_free(&ref);
  mlp_params_free(&got);
  free(x);
  free(y);
  mlp_destroy(m);
  env_close(&e);
}

#define TRAIN_STEPS 60
#define THRESHOLD   0.25f

/* Trains TRAIN_STEPS steps; |losses| gets the loss every 10 steps. */
static void train(float losses[TRAIN_STEPS / 10], mlp_params *final, float *eval_acc) {
  env e = env_new();
  mlp_config c = small_config();
  mlp *m;
  EXPECT_OK(mlp_create(e.dev, &c, &m));
  mlp_streams s;
  mlp_streams_default(&s, 0);
  for (int step = 1; step <= TRAIN_STEPS; step++) {
    EXPECT_OK(mlp_step_enqueue(m, &s));
    if (step % 10 == 0) EXPECT_OK(mlp_loss(m, &losses[step / 10 - 1]));
  }
  cr_assert(mlp_params_alloc(&c, final));
  EXPECT_OK(mlp_params_read(m, final));
  EXPECT_OK(mlp_eval_accuracy(m, eval_acc));
  mlp_destroy(m);
  env_close(&e);
}

Test(model, training_reaches_the_threshold_with_the_same_bits_twice, .timeout = 240) {
  float l1[TRAIN_STEPS / 10], l2[TRAIN_STEPS / 10], ea1, ea2;
  mlp_params p1, p2;
  train(l1, &p1, &ea1);
  train(l2, &p2, &ea2);
  for (int i = 0; i < TRAIN_STEPS / 10; i++) {
    cr_assert_eq(memcmp(&l1[i], &l2[i], sizeof(float)), 0, "loss at step %d: %.9g vs %.9g",
                 (i + 1) * 10, (double)l1[i], (double)l2[i]);
    if (i) cr_assert_lt(l1[i], l1[i - 1], "the loss falls: step %d", (i + 1) * 10);
  }
  cr_assert_lt(l1[TRAIN_STEPS / 10 - 1], THRESHOLD, "loss %.4f after %d steps",
               (double)l1[TRAIN_STEPS / 10 - 1], TRAIN_STEPS);
  mlp_config c = small_config();
  cr_assert_eq(memcmp(p1.w1, p2.w1, (size_t)c.d * c.h * 4), 0, "W1 bits");
  cr_assert_eq(memcmp(p1.w2, p2.w2, (size_t)c.h * c.k * 4), 0, "W2 bits");
  cr_assert_eq(memcmp(p1.b1, p2.b1, (size_t)c.h * 4), 0, "b1 bits");
  cr_assert_eq(memcmp(p1.b2, p2.b2, (size_t)c.k * 4), 0, "b2 bits");
  cr_assert_eq(memcmp(&ea1, &ea2, 4), 0);
  cr_assert_gt(ea1, 0.75f, "held-out accuracy %.3f", (double)ea1);
  mlp_params_free(&p1);
  mlp_params_free(&p2);
}

/* The chain hops must name these kernels, newest first (the skip records of
 * other buffers may interleave, so each is searched after the previous). */
static void expect_chain(weft_status u, const char *const *kernels, size_t n, int line) {
  size_t len = weft_error_chain_length(u), at = 0;
  for (size_t i = 0; i < n; i++) {
    char want[96];
    snprintf(want, sizeof(want), "kernel '%s'", kernels[i]);
    while (at < len && !strstr(weft_error_chain_at(u, at), want)) at++;
    cr_assert_lt(at, len, "line %d: the chain lacks %s (after hop %zu)", line, want, i);
    at++;
  }
  const char *origin = weft_error_origin(u);
  cr_assert(origin && strstr(origin, "kernel 'fwd.check_finite'"), "line %d: the origin is '%s'",
            line, origin ? origin : "(none)");
}

static weft_status unwritten_of(weft_status st, int line) {
  char text[4096];
  cr_assert_not_null(st, "line %d: the read succeeded", line);
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "line %d: %s", line, text);
  cr_assert_eq(weft_error_count(st), 1, "line %d: %s", line, text);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN, "line %d: %s", line, text);
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_GENERIC, "line %d: %s", line, text);
  cr_assert_str_eq(weft_error_message(root), "injected failure at step 3", "line %d", line);
  return u;
}

Test(failure, an_injected_failure_taints_the_step_and_spares_the_evaluation_branch,
     .timeout = 120) {
  env e = env_new();
  mlp_config c = small_config();
  mlp *m;
  EXPECT_OK(mlp_create(e.dev, &c, &m));
  mlp_streams s;
  mlp_streams_default(&s, 0);
  for (int i = 0; i < 3; i++) EXPECT_OK(mlp_step_enqueue(m, &s));
  mlp_params before;
  cr_assert(mlp_params_alloc(&c, &before));
  EXPECT_OK(mlp_params_read(m, &before));
  float eval_before, loss, acc;
  EXPECT_OK(mlp_eval_accuracy(m, &eval_before));

  EXPECT_OK(mlp_inject_failure(m, true));
  EXPECT_OK(mlp_step_enqueue(m, &s)); /* step 3 (counted from 0) */

  /* The loss: mean <- softmax_xent <- check_finite (failed). */
  weft_status st = mlp_loss(m, &loss);
  weft_status u = unwritten_of(st, __LINE__);
  uint64_t id = weft_error_failure_id(u);
  static const char *const loss_chain[] = {"loss.mean", "fwd.softmax_xent"};
  expect_chain(u, loss_chain, 2, __LINE__);
  cr_assert_eq(weft_error_chain_length(u), 2);
  weft_error_free(st);
  st = mlp_accuracy(m, &acc);
  u = unwritten_of(st, __LINE__);
  cr_assert_eq(weft_error_failure_id(u), id, "one failure");
  weft_error_free(st);

  /* W1: its update was skipped, through the whole layer-1 backward. */
  float *w1 = malloc((size_t)c.d * c.h * 4);
  st = weft_buffer_read(e.dev, 2, mlp_buffer(m, MLP_BUF_W1), 0, w1, (uint64_t)c.d * c.h * 4);
  free(w1);
  u = unwritten_of(st, __LINE__);
  cr_assert_eq(weft_error_failure_id(u), id);
  static const char *const w1_chain[] = {"sgd.w1",         "bwd1.matmul_tn_dw1",
                                         "bwd1.relu_grad", "bwd1.matmul_nt_da1",
                                         "bwd2.xent_grad", "fwd.softmax_xent"};
  expect_chain(u, w1_chain, 6, __LINE__);
  cr_assert_eq(weft_error_chain_length(u), 6);
  weft_error_free(st);
  /* b2 went through the layer-2 bias gradient on another stream. */
  float b2[4];
  st = weft_buffer_read(e.dev, 3, mlp_buffer(m, MLP_BUF_B2), 0, b2, sizeof(b2));
  u = unwritten_of(st, __LINE__);
  static const char *const b2_chain[] = {"sgd.b2", "bwd2.bias_grad_db2", "bwd2.xent_grad"};
  expect_chain(u, b2_chain, 3, __LINE__);
  weft_error_free(st);

  /* The evaluation branch read only the weights before the failed step. */
  float eval_after;
  EXPECT_OK(mlp_eval_accuracy(m, &eval_after));
  cr_assert_gt(eval_after, 0.0f);
  float *ez2 = malloc((size_t)c.n_eval * c.k * 4);
  EXPECT_OK(weft_buffer_read(e.dev, 1, mlp_buffer(m, MLP_BUF_EVAL_LOGITS), 0, ez2,
                             (uint64_t)c.n_eval * c.k * 4));
  free(ez2);
  sync_all(&e);
  weft_device_stats ds = stats_of(e.dev);
  cr_assert_eq(ds.launches_failed, 1);
  cr_assert_eq(ds.launches_skipped, 14, "every launch downstream of the logits");
  cr_assert_geq(ds.failures_live, 1);

  /* Recovery: rewriting the weights clears them; the next step is clean and
   * equals the reference step from the same weights. */
  EXPECT_OK(mlp_params_write(m, &before));
  EXPECT_OK(mlp_step_enqueue(m, &s));
  EXPECT_OK(mlp_loss(m, &loss));
  int32_t *y;
  float *x = train_x(&c, &y);
  float want_loss;
  cr_assert(mlp_reference_step(&c, x, y, &before, &want_loss, NULL));
  cr_assert(close_to(loss, want_loss), "loss %.9g, reference %.9g", (double)loss,
            (double)want_loss);
  mlp_params got;
  cr_assert(mlp_params_alloc(&c, &got));
  EXPECT_OK(mlp_params_read(m, &got));
  expect_params_close(&c, &got, &before);
  free(x);
  free(y);
  mlp_params_free(&got);
  mlp_params_free(&before);
  mlp_destroy(m);
  sync_all(&e);
  cr_assert_eq(stats_of(e.dev).failures_live, 0, "no buffer carries the failure any more");
  env_close(&e);
}

/* ---- recording a step ------------------------------------------------------------------------ */

typedef struct rec_launch {
  weft_stream_id stream;
  weft_kernel k;
  uint32_t grid[3], block[3];
  weft_binding b[8];
  size_t nb;
  uint8_t scalars[64];
  size_t scalar_bytes;
} rec_launch;

typedef struct recorder {
  rec_launch l[64];
  size_t n;
} recorder;

static weft_status record(void *ctx, weft_stream_id stream, weft_kernel k, const uint32_t grid[3],
                          const uint32_t block[3], const weft_binding *b, size_t nb,
                          const void *scalars, size_t scalar_bytes) {
  recorder *r = ctx;
  cr_assert_lt(r->n, 64);
  cr_assert_leq(nb, 8);
  cr_assert_leq(scalar_bytes, 64);
  rec_launch *l = &r->l[r->n++];
  l->stream = stream;
  l->k = k;
  memcpy(l->grid, grid, sizeof(l->grid));
  memcpy(l->block, block, sizeof(l->block));
  memcpy(l->b, b, nb * sizeof(*b));
  l->nb = nb;
  memcpy(l->scalars, scalars, scalar_bytes);
  l->scalar_bytes = scalar_bytes;
  return NULL;
}

/* A step recorded through the launch function and replayed with
 * weft_launch gives the same result as an eager step; the recording names
 * every kernel once and uses the four streams. */
Test(record, a_recorded_step_replays_to_the_eager_result, .timeout = 120) {
  env e = env_new();
  mlp_config c = small_config();
  mlp *m;
  EXPECT_OK(mlp_create(e.dev, &c, &m));
  static recorder r;
  mlp_streams s;
  mlp_streams_default(&s, 10);
  s.launch = record;
  s.launch_ctx = &r;
  EXPECT_OK(mlp_step_enqueue(m, &s));
  cr_assert_eq(r.n, MLP_STEP_LAUNCHES);
  bool used[4] = {false};
  for (size_t i = 0; i < r.n; i++) {
    const char *name = mlp_kernel_name(m, r.l[i].k);
    cr_assert_not_null(name, "launch %zu: unknown kernel", i);
    for (size_t j = 0; j < i; j++)
      cr_assert_neq(r.l[j].k.id, r.l[i].k.id, "one kernel per role: %s twice", name);
    cr_assert(r.l[i].stream >= 10 && r.l[i].stream < 14);
    used[r.l[i].stream - 10] = true;
  }
  for (int i = 0; i < 4; i++) cr_assert(used[i], "stream %d unused", 10 + i);
  cr_assert_str_eq(mlp_kernel_name(m, r.l[0].k), "eval.matmul_z1");
  cr_assert_str_eq(mlp_kernel_name(m, r.l[r.n - 1].k), "sgd.b1");
  for (size_t i = 0; i < r.n; i++)
    EXPECT_OK(weft_launch(e.dev, r.l[i].stream, r.l[i].k, r.l[i].grid, r.l[i].block, r.l[i].b,
                          r.l[i].nb, r.l[i].scalars, r.l[i].scalar_bytes));
  float loss;
  EXPECT_OK(mlp_loss(m, &loss));
  mlp_params got, ref;
  cr_assert(mlp_params_alloc(&c, &got) && mlp_params_alloc(&c, &ref));
  EXPECT_OK(mlp_params_read(m, &got));
  int32_t *y;
  float *x = train_x(&c, &y);
  mlp_params_init(&c, &ref);
  float want_loss;
  cr_assert(mlp_reference_step(&c, x, y, &ref, &want_loss, NULL));
  cr_assert(close_to(loss, want_loss));
  expect_params_close(&c, &got, &ref);
  free(x);
  free(y);
  mlp_params_free(&got);
  mlp_params_free(&ref);
  mlp_destroy(m);
  env_close(&e);
}

/* ---- destroy -------------------------------------------------------------------------------- */

Test(lifetime, destroy_leaves_no_buffer_and_no_byte_behind, .timeout = 120) {
  env e = env_new();
  mlp_config c = small_config();
  for (int round = 0; round < 2; round++) {
    mlp *m;
    EXPECT_OK(mlp_create(e.dev, &c, &m));
    cr_assert_eq(stats_of(e.dev).buffers_live, 25);
    mlp_streams s;
    mlp_streams_default(&s, 0);
    EXPECT_OK(mlp_step_enqueue(m, &s));
    if (round == 1) {
      EXPECT_OK(mlp_inject_failure(m, true));
      EXPECT_OK(mlp_step_enqueue(m, &s));
    }
    mlp_destroy(m); /* with work in flight */
    sync_all(&e);
    weft_device_stats ds = stats_of(e.dev);
    cr_assert_eq(ds.buffers_live, 0, "round %d: %" PRIu64 " buffers live", round, ds.buffers_live);
    cr_assert_eq(ds.failures_live, 0);
    weft_memory_usage u = {0};
    EXPECT_OK(weft_memory_usage_get(e.dev, &u));
    cr_assert_eq(u.bytes_in_use, 0, "round %d: %" PRIu64 " bytes in use", round, u.bytes_in_use);
    cr_assert_eq(u.number_allocs, 0);
  }
  env_close(&e);
}
