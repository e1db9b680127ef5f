/* mlp: kernels, data, the reference step and the model on a device. See mlp.h. */
#include "mlp.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- configuration ----------------------------------------------------------------------- */

void mlp_config_default(mlp_config *cfg) {
  if (!cfg) return;
  memset(cfg, 0, sizeof(*cfg));
  cfg->n = 512;
  cfg->n_eval = 256;
  cfg->d = 16;
  cfg->h = 64;
  cfg->k = 4;
  cfg->blocks = 4;
  cfg->lr = 0.1f;
  cfg->seed = UINT64_C(0x5eed0f3e1f7a11ce);
}

#define MLP_MAX_DIM (1u << 20)

weft_status mlp_config_check(const mlp_config *cfg) {
  if (!cfg) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp: NULL config");
  const struct {
    const char *name;
    uint32_t v;
  } dims[] = {{"n", cfg->n}, {"n_eval", cfg->n_eval}, {"d", cfg->d},
              {"h", cfg->h}, {"k", cfg->k},           {"blocks", cfg->blocks}};
  for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++)
    if (dims[i].v == 0 || dims[i].v > MLP_MAX_DIM)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "mlp: config.%s = %" PRIu32 " is outside [1, %u]", dims[i].name,
                             dims[i].v, MLP_MAX_DIM);
  if (cfg->k < 2)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "mlp: config.k = %" PRIu32 " classes; at least 2 are needed", cfg->k);
  if ((uint64_t)cfg->n * cfg->h > (UINT64_C(1) << 32) ||
      (uint64_t)cfg->n_eval * cfg->h > (UINT64_C(1) << 32) ||
      (uint64_t)cfg->n * cfg->d > (UINT64_C(1) << 32) ||
      (uint64_t)cfg->n_eval * cfg->d > (UINT64_C(1) << 32) ||
      (uint64_t)cfg->d * cfg->h > (UINT64_C(1) << 32) ||
      (uint64_t)cfg->h * cfg->k > (UINT64_C(1) << 32))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp: config shapes are too large");
  if (!isfinite(cfg->lr) || cfg->lr <= 0.0f)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp: config.lr = %g must be positive",
                           (double)cfg->lr);
  return NULL;
}

/* ---- randomness and data ---------------------------------------------------------------- */

uint64_t mlp_rng_next(uint64_t *state) {
  uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
  z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
  return z ^ (z >> 31);
}

float mlp_rng_uniform(uint64_t *state) {
  return (float)(mlp_rng_next(state) >> 40) * (1.0f / 16777216.0f);
}

float mlp_rng_normal(uint64_t *state) {
  /* The sum of 4 uniforms has mean 2 and variance 1/3. */
  float s = 0.0f;
  for (int i = 0; i < 4; i++) s += mlp_rng_uniform(state);
  return (s - 2.0f) * 1.7320508f;
}

/* Cluster centres: one normal draw per coordinate, scaled. */
#define MLP_CENTER_SCALE 0.8f

void mlp_dataset_generate(const mlp_config *cfg, bool eval, float *x, int32_t *y) {
  if (!cfg || !x || !y) return;
  uint64_t cs = cfg->seed ^ UINT64_C(0xc1a55e5c1a55e5);
  uint64_t ps = cfg->seed ^ (eval ? UINT64_C(0xe7a1e7a1e7a1) : UINT64_C(0x7ea1ae7ea1a));
  uint32_t rows = eval ? cfg->n_eval : cfg->n;
  for (uint32_t i = 0; i < rows; i++) {
    int32_t c = (int32_t)(mlp_rng_next(&ps) % cfg->k);
    y[i] = c;
    /* The centre of class c, regenerated from its own stream (no table). */
    uint64_t cc = cs + (uint64_t)c * UINT64_C(0x100000001b3);
    for (uint32_t j = 0; j < cfg->d; j++) {
      float centre = MLP_CENTER_SCALE * mlp_rng_normal(&cc);
      x[(size_t)i * cfg->d + j] = centre + mlp_rng_normal(&ps);
    }
  }
}

bool mlp_params_alloc(const mlp_config *cfg, mlp_params *p) {
  if (!cfg || !p) return false;
  memset(p, 0, sizeof(*p));
  p->w1 = calloc((size_t)cfg->d * cfg->h, sizeof(float));
  p->b1 = calloc(cfg->h, sizeof(float));
  p->w2 = calloc((size_t)cfg->h * cfg->k, sizeof(float));
  p->b2 = calloc(cfg->k, sizeof(float));
  if (!p->w1 || !p->b1 || !p->w2 || !p->b2) {
    mlp_params_free(p);
    return false;
  }
  return true;
}

void mlp_params_free(mlp_params *p) {
  if (!p) return;
  free(p->w1);
  free(p->b1);
  free(p->w2);
  free(p->b2);
  memset(p, 0, sizeof(*p));
}

static void glorot(uint64_t *s, float *w, uint32_t fan_in, uint32_t fan_out) {
  float a = sqrtf(6.0f / (float)(fan_in + fan_out));
  for (size_t i = 0; i < (size_t)fan_in * fan_out; i++)
    w[i] = (2.0f * mlp_rng_uniform(s) - 1.0f) * a;
}

void mlp_params_init(const mlp_config *cfg, mlp_params *p) {
  if (!cfg || !p) return;
  uint64_t s = cfg->seed ^ UINT64_C(0x3e1a7e3e1a7e);
  glorot(&s, p->w1, cfg->d, cfg->h);
  glorot(&s, p->w2, cfg->h, cfg->k);
  memset(p->b1, 0, (size_t)cfg->h * sizeof(float));
  memset(p->b2, 0, (size_t)cfg->k * sizeof(float));
}

/* ---- the reference step ----------------------------------------------------------------- */

bool mlp_reference_step(const mlp_config *cfg, const float *x, const int32_t *y, mlp_params *p,
                        float *loss, float *acc) {
  if (!cfg || !x || !y || !p) return false;
  const size_t n = cfg->n, d = cfg->d, h = cfg->h, k = cfg->k;
  float *a1 = malloc(n * h * sizeof(float)), *z2 = malloc(n * k * sizeof(float));
  float *pr = malloc(n * k * sizeof(float)), *dz2 = malloc(n * k * sizeof(float));
  float *da1 = malloc(n * h * sizeof(float)), *rl = malloc(n * sizeof(float));
  float *dw1 = malloc(d * h * sizeof(float)), *db1 = malloc(h * sizeof(float));
  float *dw2 = malloc(h * k * sizeof(float)), *db2 = malloc(k * sizeof(float));
  bool ok = a1 && z2 && pr && dz2 && da1 && rl && dw1 && db1 && dw2 && db2;
  if (ok) {
    /* forward */
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < h; j++) {
        double s = 0;
        for (size_t q = 0; q < d; q++) s += (double)x[i * d + q] * (double)p->w1[q * h + j];
        float z = (float)s + p->b1[j];
        a1[i * h + j] = z > 0.0f ? z : 0.0f;
      }
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < k; j++) {
        double s = 0;
        for (size_t q = 0; q < h; q++) s += (double)a1[i * h + q] * (double)p->w2[q * k + j];
        z2[i * k + j] = (float)s + p->b2[j];
      }
    size_t correct = 0;
    for (size_t i = 0; i < n; i++) {
      const float *z = z2 + i * k;
      float mx = z[0];
      size_t arg = 0;
      for (size_t j = 1; j < k; j++)
        if (z[j] > mx) mx = z[j], arg = j;
      correct += arg == (size_t)y[i];
      double s = 0;
      for (size_t j = 0; j < k; j++) s += exp((double)(z[j] - mx));
      for (size_t j = 0; j < k; j++) pr[i * k + j] = (float)(exp((double)(z[j] - mx)) / s);
      rl[i] = (float)(log(s) - (double)(z[y[i]] - mx));
    }
    double ls = 0;
    for (size_t i = 0; i < n; i++) ls += rl[i];
    if (loss) *loss = (float)(ls / (double)n);
    if (acc) *acc = (float)((double)correct / (double)n);
    /* backward */
    float scale = 1.0f / (float)n;
    for (size_t i = 0; i < n; i++)
      for (size_t j = 0; j < k; j++)
        dz2[i * k + j] = (pr[i * k + j] - ((size_t)y[i] == j ? 1.0f : 0.0f)) * scale;
    for (size_t a = 0; a < h; a++)
      for (size_t b = 0; b < k; b++) {
        double s = 0;
        for (size_t i = 0; i < n; i++) s += (double)a1[i * h + a] * (double)dz2[i * k + b];
        dw2[a * k + b] = (float)s;
      }
    for (size_t b = 0; b < k; b++) {
      double s = 0;
      for (size_t i = 0; i < n; i++) s += dz2[i * k + b];
      db2[b] = (float)s;
    }
    for (size_t i = 0; i < n; i++)
      for (size_t a = 0; a < h; a++) {
        double s = 0;
        for (size_t b = 0; b < k; b++) s += (double)dz2[i * k + b] * (double)p->w2[a * k + b];
        da1[i * h + a] = a1[i * h + a] > 0.0f ? (float)s : 0.0f;
      }
    for (size_t q = 0; q < d; q++)
      for (size_t a = 0; a < h; a++) {
        double s = 0;
        for (size_t i = 0; i < n; i++) s += (double)x[i * d + q] * (double)da1[i * h + a];
        dw1[q * h + a] = (float)s;
      }
    for (size_t a = 0; a < h; a++) {
      double s = 0;
      for (size_t i = 0; i < n; i++) s += da1[i * h + a];
      db1[a] = (float)s;
    }
    /* update */
    const float lr = cfg->lr;
    for (size_t i = 0; i < d * h; i++) p->w1[i] = p->w1[i] - lr * dw1[i];
    for (size_t i = 0; i < h; i++) p->b1[i] = p->b1[i] - lr * db1[i];
    for (size_t i = 0; i < h * k; i++) p->w2[i] = p->w2[i] - lr * dw2[i];
    for (size_t i = 0; i < k; i++) p->b2[i] = p->b2[i] - lr * db2[i];
  }
  free(a1);
  free(z2);
  free(pr);
  free(dz2);
  free(da1);
  free(rl);
  free(dw1);
  free(db1);
  free(dw2);
  free(db2);
  return ok;
}

/* ---- kernel helpers --------------------------------------------------------------------- */

static weft_status bad(const char *kernel, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static weft_status bad(const char *kernel, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s: %s", kernel, text);
}

/* Checks the number of bindings and of scalar bytes, copies the scalars. */
static weft_status take(const weft_kernel_ctx *ctx, const char *kernel, size_t bindings, void *args,
                        size_t args_bytes) {
  if (!ctx) return bad(kernel, "no kernel context");
  if (ctx->num_buffers != bindings)
    return bad(kernel, "%zu bindings, expected %zu", ctx->num_buffers, bindings);
  if (bindings && (!ctx->buffers || !ctx->sizes)) return bad(kernel, "no bindings passed");
  if (ctx->scalar_bytes != args_bytes || !ctx->scalars)
    return bad(kernel, "%zu scalar bytes, expected %zu", ctx->scalar_bytes, args_bytes);
  memcpy(args, ctx->scalars, args_bytes);
  return NULL;
}

/* Binding |i| must hold exactly rows x cols elements of |elem| bytes, aligned. */
static weft_status expect(const weft_kernel_ctx *ctx, const char *kernel, size_t i,
                          const char *what, uint64_t rows, uint64_t cols, uint64_t elem) {
  if (rows == 0 || cols == 0)
    return bad(kernel, "binding %zu (%s): empty shape %" PRIu64 "x%" PRIu64, i, what, rows, cols);
  if (rows > UINT64_MAX / cols || rows * cols > UINT64_MAX / elem)
    return bad(kernel, "binding %zu (%s): shape %" PRIu64 "x%" PRIu64 " overflows", i, what, rows,
               cols);
  uint64_t want = rows * cols * elem;
  if (ctx->sizes[i] != want)
    return bad(kernel,
               "binding %zu (%s) is %" PRIu64 " bytes, expected %" PRIu64 " for %" PRIu64
               "x%" PRIu64 " elements of %" PRIu64 " bytes",
               i, what, ctx->sizes[i], want, rows, cols, elem);
  if (!ctx->buffers[i] || (uintptr_t)ctx->buffers[i] % elem != 0)
    return bad(kernel, "binding %zu (%s) is not aligned to %" PRIu64 " bytes", i, what, elem);
  return NULL;
}

#define CHECK(call)                                                                                \
  do {                                                                                             \
    weft_status st_ = (call);                                                                      \
    if (st_) return st_;                                                                           \
  } while (0)

/* The slice [lo, hi) of |n| items that this block handles: ceil(n / blocks)
 * per block, the last ones short or empty. */
static void span(const weft_kernel_ctx *ctx, uint64_t n, uint64_t *lo, uint64_t *hi) {
  uint64_t gx = ctx->grid[0] ? ctx->grid[0] : 1, gy = ctx->grid[1] ? ctx->grid[1] : 1;
  uint64_t gz = ctx->grid[2] ? ctx->grid[2] : 1;
  uint64_t blocks = gx * gy * gz;
  uint64_t idx = ctx->block_idx[0] + gx * (ctx->block_idx[1] + gy * (uint64_t)ctx->block_idx[2]);
  uint64_t per = n / blocks + (n % blocks != 0);
  *lo = idx * per < n ? idx * per : n;
  *hi = *lo + per < n ? *lo + per : n;
}

static bool first_block(const weft_kernel_ctx *ctx) {
  return ctx->block_idx[0] == 0 && ctx->block_idx[1] == 0 && ctx->block_idx[2] == 0;
}

/* Labels must be class indices. */
static weft_status check_labels(const char *kernel, const int32_t *y, uint64_t lo, uint64_t hi,
                                uint32_t classes) {
  for (uint64_t i = lo; i < hi; i++)
    if (y[i] < 0 || (uint32_t)y[i] >= classes)
      return bad(kernel, "label %" PRId32 " of row %" PRIu64 " is outside [0, %" PRIu32 ")", y[i],
                 i, classes);
  return NULL;
}

#define CHUNK 256

/* ---- kernels ------------------------------------------------------------------------------ */

/* C[i, :] = sum_p A(i, p) B[p, :] over this block's rows, where A(i, p) is
 * A[i * ai + p * ap] (A, or A transposed); B is row-major k x n. */
static void matmul_rows(const weft_kernel_ctx *ctx, const mlp_mm_args *a, uint64_t ai,
                        uint64_t ap) {
  const float *A = ctx->buffers[0], *B = ctx->buffers[1];
  float *C = ctx->buffers[2];
  uint64_t lo, hi;
  span(ctx, a->m, &lo, &hi);
  double acc[CHUNK];
  for (uint64_t i = lo; i < hi; i++)
    for (uint64_t j0 = 0; j0 < a->n; j0 += CHUNK) {
      uint64_t jn = a->n - j0 < CHUNK ? a->n - j0 : CHUNK;
      for (uint64_t j = 0; j < jn; j++) acc[j] = 0;
      for (uint64_t p = 0; p < a->k; p++) {
        double x = A[i * ai + p * ap];
        const float *b = B + p * a->n + j0;
        for (uint64_t j = 0; j < jn; j++) acc[j] += x * (double)b[j];
      }
      for (uint64_t j = 0; j < jn; j++) C[i * a->n + j0 + j] = (float)acc[j];
    }
}

weft_status mlp_k_matmul(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "matmul";
  mlp_mm_args a;
  CHECK(take(ctx, kn, 3, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "A", a.m, a.k, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "B", a.k, a.n, sizeof(float)));
  CHECK(expect(ctx, kn, 2, "C", a.m, a.n, sizeof(float)));
  matmul_rows(ctx, &a, a.k, 1);
  return NULL;
}

weft_status mlp_k_matmul_tn(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "matmul_tn";
  mlp_mm_args a;
  CHECK(take(ctx, kn, 3, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "A", a.k, a.m, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "B", a.k, a.n, sizeof(float)));
  CHECK(expect(ctx, kn, 2, "C", a.m, a.n, sizeof(float)));
  matmul_rows(ctx, &a, 1, a.m);
  return NULL;
}

weft_status mlp_k_matmul_nt(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "matmul_nt";
  mlp_mm_args a;
  CHECK(take(ctx, kn, 3, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "A", a.m, a.k, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "B", a.n, a.k, sizeof(float)));
  CHECK(expect(ctx, kn, 2, "C", a.m, a.n, sizeof(float)));
  const float *A = ctx->buffers[0], *B = ctx->buffers[1];
  float *C = ctx->buffers[2];
  uint64_t lo, hi;
  span(ctx, a.m, &lo, &hi);
  for (uint64_t i = lo; i < hi; i++)
    for (uint64_t j = 0; j < a.n; j++) {
      const float *x = A + i * a.k, *b = B + j * a.k;
      double s = 0;
      for (uint64_t p = 0; p < a.k; p++) s += (double)x[p] * (double)b[p];
      C[i * a.n + j] = (float)s;
    }
  return NULL;
}

weft_status mlp_k_bias_add(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "bias_add";
  mlp_rc_args a;
  CHECK(take(ctx, kn, 2, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "X", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "b", 1, a.cols, sizeof(float)));
  float *X = ctx->buffers[0];
  const float *b = ctx->buffers[1];
  uint64_t lo, hi;
  span(ctx, a.rows, &lo, &hi);
  for (uint64_t i = lo; i < hi; i++)
    for (uint64_t j = 0; j < a.cols; j++) X[i * a.cols + j] += b[j];
  return NULL;
}

weft_status mlp_k_relu(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "relu";
  mlp_rc_args a;
  CHECK(take(ctx, kn, 2, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "X", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "Y", a.rows, a.cols, sizeof(float)));
  const float *X = ctx->buffers[0];
  float *Y = ctx->buffers[1];
  uint64_t lo, hi;
  span(ctx, a.rows, &lo, &hi);
  for (uint64_t i = lo * a.cols; i < hi * a.cols; i++) Y[i] = X[i] > 0.0f ? X[i] : 0.0f;
  return NULL;
}

weft_status mlp_k_relu_grad(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "relu_grad";
  mlp_rc_args a;
  CHECK(take(ctx, kn, 2, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "G", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "A", a.rows, a.cols, sizeof(float)));
  float *G = ctx->buffers[0];
  const float *A = ctx->buffers[1];
  uint64_t lo, hi;
  span(ctx, a.rows, &lo, &hi);
  for (uint64_t i = lo * a.cols; i < hi * a.cols; i++) G[i] = A[i] > 0.0f ? G[i] : 0.0f;
  return NULL;
}

weft_status mlp_k_softmax_xent(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "softmax_xent";
  mlp_rc_args a;
  CHECK(take(ctx, kn, 4, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "logits", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "labels", a.rows, 1, sizeof(int32_t)));
  CHECK(expect(ctx, kn, 2, "probs", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 3, "row_loss", a.rows, 1, sizeof(float)));
  const float *Z = ctx->buffers[0];
  const int32_t *y = ctx->buffers[1];
  float *P = ctx->buffers[2], *L = ctx->buffers[3];
  uint64_t lo, hi;
  span(ctx, a.rows, &lo, &hi);
  CHECK(check_labels(kn, y, lo, hi, a.cols));
  for (uint64_t i = lo; i < hi; i++) {
    const float *z = Z + i * a.cols;
    float mx = z[0];
    for (uint64_t j = 1; j < a.cols; j++)
      if (z[j] > mx) mx = z[j];
    double s = 0;
    for (uint64_t j = 0; j < a.cols; j++) s += exp((double)(z[j] - mx));
    for (uint64_t j = 0; j < a.cols; j++) P[i * a.cols + j] = (float)(exp((double)(z[j] - mx)) / s);
    L[i] = (float)(log(s) - (double)(z[y[i]] - mx));
  }
  return NULL;
}

weft_status mlp_k_mean(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "mean";
  mlp_rc_args a;
  CHECK(take(ctx, kn, 2, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "x", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "out", 1, 1, sizeof(float)));
  if (!first_block(ctx)) return NULL;
  const float *x = ctx->buffers[0];
  uint64_t n = (uint64_t)a.rows * a.cols;
  double s = 0;
  for (uint64_t i = 0; i < n; i++) s += x[i];
  *(float *)ctx->buffers[1] = (float)(s / (double)n);
  return NULL;
}

weft_status mlp_k_xent_grad(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "xent_grad";
  mlp_scaled_args a;
  CHECK(take(ctx, kn, 3, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "probs", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "labels", a.rows, 1, sizeof(int32_t)));
  CHECK(expect(ctx, kn, 2, "dlogits", a.rows, a.cols, sizeof(float)));
  const float *P = ctx->buffers[0];
  const int32_t *y = ctx->buffers[1];
  float *D = ctx->buffers[2];
  uint64_t lo, hi;
  span(ctx, a.rows, &lo, &hi);
  CHECK(check_labels(kn, y, lo, hi, a.cols));
  for (uint64_t i = lo; i < hi; i++)
    for (uint64_t j = 0; j < a.cols; j++)
      D[i * a.cols + j] = (P[i * a.cols + j] - ((uint64_t)y[i] == j ? 1.0f : 0.0f)) * a.scale;
  return NULL;
}

weft_status mlp_k_bias_grad(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "bias_grad";
  mlp_rc_args a;
  CHECK(take(ctx, kn, 2, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "G", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "db", 1, a.cols, sizeof(float)));
  const float *G = ctx->buffers[0];
  float *db = ctx->buffers[1];
  uint64_t lo, hi;
  span(ctx, a.cols, &lo, &hi);
  for (uint64_t j = lo; j < hi; j++) {
    double s = 0;
    for (uint64_t i = 0; i < a.rows; i++) s += G[i * a.cols + j];
    db[j] = (float)s;
  }
  return NULL;
}

weft_status mlp_k_sgd(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "sgd";
  mlp_scaled_args a;
  CHECK(take(ctx, kn, 2, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "W", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "G", a.rows, a.cols, sizeof(float)));
  if (!isfinite(a.scale)) return bad(kn, "learning rate %g is not finite", (double)a.scale);
  float *W = ctx->buffers[0];
  const float *G = ctx->buffers[1];
  uint64_t lo, hi;
  span(ctx, a.rows, &lo, &hi);
  for (uint64_t i = lo * a.cols; i < hi * a.cols; i++) W[i] = W[i] - a.scale * G[i];
  return NULL;
}

weft_status mlp_k_check_finite(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "check_finite";
  mlp_check_args a;
  CHECK(take(ctx, kn, 1, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "X", a.rows, a.cols, sizeof(float)));
  if (a.fail) return weft_error_make(WEFT_ERR_GENERIC, "injected failure at step %" PRIu64, a.step);
  const float *X = ctx->buffers[0];
  uint64_t lo, hi;
  span(ctx, a.rows, &lo, &hi);
  for (uint64_t i = lo * a.cols; i < hi * a.cols; i++)
    if (!isfinite(X[i]))
      return weft_error_make(WEFT_ERR_VALIDATION,
                             "non-finite value %f at row %" PRIu64 ", column %" PRIu64
                             " (step %" PRIu64 ")",
                             (double)X[i], i / a.cols, i % a.cols, a.step);
  return NULL;
}

weft_status mlp_k_accuracy(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  static const char kn[] = "accuracy";
  mlp_rc_args a;
  CHECK(take(ctx, kn, 3, &a, sizeof(a)));
  CHECK(expect(ctx, kn, 0, "logits", a.rows, a.cols, sizeof(float)));
  CHECK(expect(ctx, kn, 1, "labels", a.rows, 1, sizeof(int32_t)));
  CHECK(expect(ctx, kn, 2, "out", 1, 1, sizeof(float)));
  if (!first_block(ctx)) return NULL;
  const float *Z = ctx->buffers[0];
  const int32_t *y = ctx->buffers[1];
  CHECK(check_labels(kn, y, 0, a.rows, a.cols));
  uint64_t correct = 0;
  for (uint64_t i = 0; i < a.rows; i++) {
    const float *z = Z + i * a.cols;
    uint64_t arg = 0;
    for (uint64_t j = 1; j < a.cols; j++)
      if (z[j] > z[arg]) arg = j;
    correct += arg == (uint64_t)y[i];
  }
  *(float *)ctx->buffers[2] = (float)((double)correct / (double)a.rows);
  return NULL;
}

/* ---- the model on a device ---------------------------------------------------------------- */

/* One kernel per role in a step (launch order). */
enum role {
  R_EV_MM1,
  R_EV_BIAS1,
  R_EV_RELU,
  R_EV_MM2,
  R_EV_BIAS2,
  R_EV_ACC,
  R_FW_MM1,
  R_FW_BIAS1,
  R_FW_RELU,
  R_FW_MM2,
  R_FW_BIAS2,
  R_FW_CHECK,
  R_FW_XENT,
  R_LOSS_MEAN,
  R_LOSS_ACC,
  R_BW_XGRAD,
  R_BW_DW2,
  R_BW_DB2,
  R_BW_DA1,
  R_SGD_W2,
  R_SGD_B2,
  R_BW_RELU,
  R_BW_DW1,
  R_BW_DB1,
  R_SGD_W1,
  R_SGD_B1,
  R_COUNT
};

static const struct {
  const char *name;
  weft_host_kernel_fn fn;
} roles[R_COUNT] = {
    [R_EV_MM1] = {"eval.matmul_z1", mlp_k_matmul},
    [R_EV_BIAS1] = {"eval.bias_add_b1", mlp_k_bias_add},
    [R_EV_RELU] = {"eval.relu_a1", mlp_k_relu},
    [R_EV_MM2] = {"eval.matmul_z2", mlp_k_matmul},
    [R_EV_BIAS2] = {"eval.bias_add_b2", mlp_k_bias_add},
    [R_EV_ACC] = {"eval.accuracy", mlp_k_accuracy},
    [R_FW_MM1] = {"fwd.matmul_z1", mlp_k_matmul},
    [R_FW_BIAS1] = {"fwd.bias_add_b1", mlp_k_bias_add},
    [R_FW_RELU] = {"fwd.relu_a1", mlp_k_relu},
    [R_FW_MM2] = {"fwd.matmul_z2", mlp_k_matmul},
    [R_FW_BIAS2] = {"fwd.bias_add_b2", mlp_k_bias_add},
    [R_FW_CHECK] = {"fwd.check_finite", mlp_k_check_finite},
    [R_FW_XENT] = {"fwd.softmax_xent", mlp_k_softmax_xent},
    [R_LOSS_MEAN] = {"loss.mean", mlp_k_mean},
    [R_LOSS_ACC] = {"loss.accuracy", mlp_k_accuracy},
    [R_BW_XGRAD] = {"bwd2.xent_grad", mlp_k_xent_grad},
    [R_BW_DW2] = {"bwd2.matmul_tn_dw2", mlp_k_matmul_tn},
    [R_BW_DB2] = {"bwd2.bias_grad_db2", mlp_k_bias_grad},
    [R_BW_DA1] = {"bwd1.matmul_nt_da1", mlp_k_matmul_nt},
    [R_SGD_W2] = {"sgd.w2", mlp_k_sgd},
    [R_SGD_B2] = {"sgd.b2", mlp_k_sgd},
    [R_BW_RELU] = {"bwd1.relu_grad", mlp_k_relu_grad},
    [R_BW_DW1] = {"bwd1.matmul_tn_dw1", mlp_k_matmul_tn},
    [R_BW_DB1] = {"bwd1.bias_grad_db1", mlp_k_bias_grad},
    [R_SGD_W1] = {"sgd.w1", mlp_k_sgd},
    [R_SGD_B1] = {"sgd.b1", mlp_k_sgd},
};

enum buf {
  B_X,
  B_Y,
  B_XE,
  B_YE,
  B_W1,
  B_B1,
  B_W2,
  B_B2,
  B_Z1,
  B_A1,
  B_Z2,
  B_P,
  B_ROWLOSS,
  B_LOSS,
  B_ACC,
  B_DZ2,
  B_DW2,
  B_DB2,
  B_DA1,
  B_DW1,
  B_DB1,
  B_EZ1,
  B_EA1,
  B_EZ2,
  B_EACC,
  B_COUNT
};

struct mlp {
  weft_device *dev;
  mlp_config cfg;
  weft_kernel k[R_COUNT];
  weft_buffer b[B_COUNT];
  weft_stream_id home[B_COUNT]; /* the stream that created each buffer */
  uint64_t steps;
  bool inject;
};

void mlp_streams_default(mlp_streams *st, weft_stream_id base) {
  if (!st) return;
  memset(st, 0, sizeof(*st));
  for (int i = 0; i < MLP_STREAMS; i++) st->s[i] = base + (weft_stream_id)i;
}

weft_status mlp_launch_eager(void *ctx, weft_stream_id stream, weft_kernel k,
                             const uint32_t grid[3], const uint32_t block[3], const weft_binding *b,
                             size_t nb, const void *scalars, size_t scalar_bytes) {
  return weft_launch(ctx, stream, k, grid, block, b, nb, scalars, scalar_bytes);
}

const mlp_config *mlp_get_config(const mlp *m) {
  return m ? &m->cfg : NULL;
}

uint64_t mlp_steps(const mlp *m) {
  return m ? m->steps : 0;
}

const char *mlp_kernel_name(const mlp *m, weft_kernel k) {
  if (!m) return NULL;
  for (int r = 0; r < R_COUNT; r++)
    if (m->k[r].id == k.id) return roles[r].name;
  return NULL;
}

weft_buffer mlp_buffer(const mlp *m, mlp_buffer_id which) {
  weft_buffer none = {0};
  if (!m) return none;
  switch (which) {
  case MLP_BUF_W1:
    return m->b[B_W1];
  case MLP_BUF_B1:
    return m->b[B_B1];
  case MLP_BUF_W2:
    return m->b[B_W2];
  case MLP_BUF_B2:
    return m->b[B_B2];
  case MLP_BUF_LOSS:
    return m->b[B_LOSS];
  case MLP_BUF_ACC:
    return m->b[B_ACC];
  case MLP_BUF_EVAL_ACC:
    return m->b[B_EACC];
  case MLP_BUF_EVAL_LOGITS:
    return m->b[B_EZ2];
  case MLP_BUF_LOGITS:
    return m->b[B_Z2];
  }
  return none;
}

void mlp_destroy(mlp *m) {
  if (!m) return;
  for (int i = 0; i < B_COUNT; i++)
    if (m->b[i].id) {
      weft_error_free(weft_buffer_release(m->dev, m->b[i]));
      m->b[i].id = 0;
    }
  free(m);
}

weft_status mlp_create(weft_device *dev, const mlp_config *cfg, mlp **out) {
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp_create: NULL out");
  *out = NULL;
  if (!dev) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp_create: NULL device");
  mlp_config c;
  if (cfg)
    c = *cfg;
  else
    mlp_config_default(&c);
  CHECK(mlp_config_check(&c));
  mlp *m = calloc(1, sizeof(*m));
  if (!m) return weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "mlp_create: no memory for the model");
  m->dev = dev;
  m->cfg = c;
  weft_status st = NULL;
  for (int r = 0; r < R_COUNT && !st; r++)
    st = weft_kernel_host(dev, roles[r].name, roles[r].fn, NULL, &m->k[r]);

  const uint64_t n = c.n, ne = c.n_eval, d = c.d, h = c.h, k = c.k, f = sizeof(float);
  const struct {
    enum buf id;
    weft_stream_id home;
    uint64_t bytes;
  } shapes[B_COUNT] = {
      {B_X, 0, n * d * f},    {B_Y, 0, n * sizeof(int32_t)},
      {B_XE, 3, ne * d * f},  {B_YE, 3, ne * sizeof(int32_t)},
      {B_W1, 0, d * h * f},   {B_B1, 2, h * f},
      {B_W2, 1, h * k * f},   {B_B2, 2, k * f},
      {B_Z1, 0, n * h * f},   {B_A1, 0, n * h * f},
      {B_Z2, 0, n * k * f},   {B_P, 0, n * k * f},
      {B_ROWLOSS, 0, n * f},  {B_LOSS, 1, f},
      {B_ACC, 1, f},          {B_DZ2, 0, n * k * f},
      {B_DW2, 1, h * k * f},  {B_DB2, 2, k * f},
      {B_DA1, 0, n * h * f},  {B_DW1, 0, d * h * f},
      {B_DB1, 2, h * f},      {B_EZ1, 3, ne * h * f},
      {B_EA1, 3, ne * h * f}, {B_EZ2, 3, ne * k * f},
      {B_EACC, 3, f},
  };
  for (int i = 0; i < B_COUNT && !st; i++) {
    m->home[shapes[i].id] = shapes[i].home;
    st = weft_buffer_create(dev, shapes[i].home, shapes[i].bytes, &m->b[shapes[i].id]);
  }

  /* Upload the data sets and the initial weights. */
  if (!st) {
    float *x = malloc(n * d * f), *xe = malloc(ne * d * f);
    int32_t *y = malloc(n * sizeof(int32_t)), *ye = malloc(ne * sizeof(int32_t));
    mlp_params p;
    bool have_params = mlp_params_alloc(&c, &p);
    if (!x || !xe || !y || !ye || !have_params) {
      st = weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "mlp_create: no memory for the data set");
    } else {
      mlp_dataset_generate(&c, false, x, y);
      mlp_dataset_generate(&c, true, xe, ye);
      mlp_params_init(&c, &p);
      st = weft_buffer_write(dev, m->home[B_X], m->b[B_X], 0, x, n * d * f);
      if (!st) st = weft_buffer_write(dev, m->home[B_Y], m->b[B_Y], 0, y, n * sizeof(int32_t));
      if (!st) st = weft_buffer_write(dev, m->home[B_XE], m->b[B_XE], 0, xe, ne * d * f);
      if (!st) st = weft_buffer_write(dev, m->home[B_YE], m->b[B_YE], 0, ye, ne * sizeof(int32_t));
      if (!st) st = mlp_params_write(m, &p);
    }
    free(x);
    free(xe);
    free(y);
    free(ye);
    if (have_params) mlp_params_free(&p);
  }
  if (st) {
    mlp_destroy(m);
    return st;
  }
  *out = m;
  return NULL;
}

weft_status mlp_params_write(mlp *m, const mlp_params *p) {
  if (!m || !p || !p->w1 || !p->b1 || !p->w2 || !p->b2)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp_params_write: NULL argument");
  const uint64_t d = m->cfg.d, h = m->cfg.h, k = m->cfg.k, f = sizeof(float);
  CHECK(weft_buffer_write(m->dev, m->home[B_W1], m->b[B_W1], 0, p->w1, d * h * f));
  CHECK(weft_buffer_write(m->dev, m->home[B_B1], m->b[B_B1], 0, p->b1, h * f));
  CHECK(weft_buffer_write(m->dev, m->home[B_W2], m->b[B_W2], 0, p->w2, h * k * f));
  CHECK(weft_buffer_write(m->dev, m->home[B_B2], m->b[B_B2], 0, p->b2, k * f));
  return NULL;
}

weft_status mlp_params_read(mlp *m, mlp_params *p) {
  if (!m || !p || !p->w1 || !p->b1 || !p->w2 || !p->b2)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp_params_read: NULL argument");
  const uint64_t d = m->cfg.d, h = m->cfg.h, k = m->cfg.k, f = sizeof(float);
  CHECK(weft_buffer_read(m->dev, m->home[B_W1], m->b[B_W1], 0, p->w1, d * h * f));
  CHECK(weft_buffer_read(m->dev, m->home[B_B1], m->b[B_B1], 0, p->b1, h * f));
  CHECK(weft_buffer_read(m->dev, m->home[B_W2], m->b[B_W2], 0, p->w2, h * k * f));
  CHECK(weft_buffer_read(m->dev, m->home[B_B2], m->b[B_B2], 0, p->b2, k * f));
  return NULL;
}

static weft_status read_scalar(mlp *m, enum buf which, float *out) {
  if (!m || !out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp: NULL argument");
  return weft_buffer_read(m->dev, m->home[which], m->b[which], 0, out, sizeof(float));
}

weft_status mlp_loss(mlp *m, float *loss) {
  return read_scalar(m, B_LOSS, loss);
}

weft_status mlp_accuracy(mlp *m, float *acc) {
  return read_scalar(m, B_ACC, acc);
}

weft_status mlp_eval_accuracy(mlp *m, float *acc) {
  return read_scalar(m, B_EACC, acc);
}

weft_status mlp_inject_failure(mlp *m, bool on) {
  if (!m) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp_inject_failure: NULL model");
  m->inject = on;
  return NULL;
}

/* ---- one step ------------------------------------------------------------------------------ */

typedef struct launcher {
  mlp *m;
  mlp_launch_fn fn;
  void *ctx;
  uint32_t grid[3];
} launcher;

static const uint32_t one3[3] = {1, 1, 1};

static weft_binding rd(const mlp *m, enum buf b) {
  return (weft_binding){m->b[b], 0, WEFT_WHOLE, WEFT_READ};
}
static weft_binding wr(const mlp *m, enum buf b) {
  return (weft_binding){m->b[b], 0, WEFT_WHOLE, WEFT_WRITE};
}
static weft_binding rw(const mlp *m, enum buf b) {
  return (weft_binding){m->b[b], 0, WEFT_WHOLE, WEFT_READ_WRITE};
}

/* Row-split launches use the configured grid; single-block reductions one block. */
static weft_status go(const launcher *l, weft_stream_id s, enum role r, bool split,
                      const weft_binding *b, size_t nb, const void *args, size_t bytes) {
  return l->fn(l->ctx, s, l->m->k[r], split ? l->grid : one3, one3, b, nb, args, bytes);
}

#define GO(s, r, split, args, ...)                                                                 \
  do {                                                                                             \
    const weft_binding bb_[] = {__VA_ARGS__};                                                      \
    CHECK(go(&l, (s), (r), (split), bb_, sizeof(bb_) / sizeof(bb_[0]), &(args), sizeof(args)));    \
  } while (0)

weft_status mlp_step_enqueue(mlp *m, const mlp_streams *streams) {
  if (!m || !streams)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "mlp_step_enqueue: NULL argument");
  launcher l = {m, streams->launch, streams->launch_ctx, {m->cfg.blocks, 1, 1}};
  if (!l.fn) {
    l.fn = mlp_launch_eager;
    l.ctx = m->dev;
  }
  const weft_stream_id s0 = streams->s[0], s1 = streams->s[1], s2 = streams->s[2],
                       s3 = streams->s[3];
  const uint32_t n = m->cfg.n, ne = m->cfg.n_eval, d = m->cfg.d, h = m->cfg.h, k = m->cfg.k;
  const float lr = m->cfg.lr;

  /* s3: the evaluation forward, from the weights before this step's update. */
  mlp_mm_args ev1 = {ne, d, h}, ev2 = {ne, h, k};
  mlp_rc_args evh = {ne, h}, evk = {ne, k};
  GO(s3, R_EV_MM1, true, ev1, rd(m, B_XE), rd(m, B_W1), wr(m, B_EZ1));
  GO(s3, R_EV_BIAS1, true, evh, rw(m, B_EZ1), rd(m, B_B1));
  GO(s3, R_EV_RELU, true, evh, rd(m, B_EZ1), wr(m, B_EA1));
  GO(s3, R_EV_MM2, true, ev2, rd(m, B_EA1), rd(m, B_W2), wr(m, B_EZ2));
  GO(s3, R_EV_BIAS2, true, evk, rw(m, B_EZ2), rd(m, B_B2));
  GO(s3, R_EV_ACC, false, evk, rd(m, B_EZ2), rd(m, B_YE), wr(m, B_EACC));

  /* s0: the training forward. */
  mlp_mm_args f1 = {n, d, h}, f2 = {n, h, k};
  mlp_rc_args nh = {n, h}, nk = {n, k};
  mlp_check_args chk = {n, k, m->inject ? 1u : 0u, 0, m->steps};
  GO(s0, R_FW_MM1, true, f1, rd(m, B_X), rd(m, B_W1), wr(m, B_Z1));
  GO(s0, R_FW_BIAS1, true, nh, rw(m, B_Z1), rd(m, B_B1));
  GO(s0, R_FW_RELU, true, nh, rd(m, B_Z1), wr(m, B_A1));
  GO(s0, R_FW_MM2, true, f2, rd(m, B_A1), rd(m, B_W2), wr(m, B_Z2));
  GO(s0, R_FW_BIAS2, true, nk, rw(m, B_Z2), rd(m, B_B2));
  GO(s0, R_FW_CHECK, true, chk, rw(m, B_Z2));
  m->inject = false;
  GO(s0, R_FW_XENT, true, nk, rd(m, B_Z2), rd(m, B_Y), wr(m, B_P), wr(m, B_ROWLOSS));

  /* s1: the reductions the caller reads. */
  mlp_rc_args n1 = {n, 1};
  GO(s1, R_LOSS_MEAN, false, n1, rd(m, B_ROWLOSS), wr(m, B_LOSS));
  GO(s1, R_LOSS_ACC, false, nk, rd(m, B_Z2), rd(m, B_Y), wr(m, B_ACC));

  /* Layer 2 backward: dZ2 on s0, then its weight gradient (s1) and bias
   * gradient (s2) beside the layer-1 backward on s0. */
  mlp_scaled_args xg = {n, k, 1.0f / (float)n};
  GO(s0, R_BW_XGRAD, true, xg, rd(m, B_P), rd(m, B_Y), wr(m, B_DZ2));
  mlp_mm_args dw2 = {h, n, k};
  GO(s1, R_BW_DW2, true, dw2, rd(m, B_A1), rd(m, B_DZ2), wr(m, B_DW2));
  GO(s2, R_BW_DB2, true, nk, rd(m, B_DZ2), wr(m, B_DB2));
  mlp_mm_args da1 = {n, k, h};
  GO(s0, R_BW_DA1, true, da1, rd(m, B_DZ2), rd(m, B_W2), wr(m, B_DA1));
  /* The layer-2 update runs on s1/s2 while s0 continues (after dA1 read W2). */
  mlp_scaled_args u2 = {h, k, lr}, ub2 = {1, k, lr};
  GO(s1, R_SGD_W2, true, u2, rw(m, B_W2), rd(m, B_DW2));
  GO(s2, R_SGD_B2, false, ub2, rw(m, B_B2), rd(m, B_DB2));

  /* Layer 1 backward and update. */
  GO(s0, R_BW_RELU, true, nh, rw(m, B_DA1), rd(m, B_A1));
  mlp_mm_args dw1 = {d, n, h};
  GO(s0, R_BW_DW1, true, dw1, rd(m, B_X), rd(m, B_DA1), wr(m, B_DW1));
  GO(s2, R_BW_DB1, true, nh, rd(m, B_DA1), wr(m, B_DB1));
  mlp_scaled_args u1 = {d, h, lr}, ub1 = {1, h, lr};
  GO(s0, R_SGD_W1, true, u1, rw(m, B_W1), rd(m, B_DW1));
  GO(s2, R_SGD_B1, true, ub1, rw(m, B_B1), rd(m, B_DB1));
  m->steps++;
  return NULL;
}
