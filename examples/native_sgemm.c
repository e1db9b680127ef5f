/* weft-native_sgemm: a library call the embedder brings, inside weft's order
 * and failure model. A native kernel (weft_kernel_native) wraps CBLAS's
 * cblas_sgemm (OpenBLAS or the reference BLAS, loaded at run time: $WEFT_CBLAS,
 * else libopenblas.so.0, else libblas.so.3), weft orders it by its buffers
 * between a fill and a host kernel, and a call the wrapper refuses fails its
 * launch: the dependent launch is skipped and the read says why.
 *
 *   weft-native_sgemm        exit 0 on success (also when no CBLAS is found:
 *                            it says so and skips)
 *
 * On a CUDA device the same wrapper would call cublasSetStream(h,
 * ctx->stream) and cublasSgemm on ctx->addresses (docs/cuda.md). */
#include <dlfcn.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111 }; /* CBLAS_ORDER, CBLAS_TRANSPOSE values */
typedef void (*cblas_sgemm_fn)(int order, int ta, int tb, int m, int n, int k, float alpha,
                               const float *a, int lda, const float *b, int ldb, float beta,
                               float *c, int ldc);

typedef struct gemm_args {
  int32_t m, n, k;
  float alpha, beta;
} gemm_args;

/* C[m x n] = alpha A[m x k] B[k x n] + beta C, with bindings {A, B, C}. */
static weft_status sgemm(const weft_native_ctx *ctx, void *user) {
  cblas_sgemm_fn f = *(cblas_sgemm_fn *)user;
  const gemm_args *g = ctx->scalars;
  if (ctx->num_buffers != 3 || ctx->scalar_bytes != sizeof(*g))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "sgemm: bindings {A, B, C} and gemm_args");
  uint64_t need[3] = {(uint64_t)g->m * g->k, (uint64_t)g->k * g->n, (uint64_t)g->m * g->n};
  for (int i = 0; i < 3; i++)
    if (ctx->sizes[i] < need[i] * sizeof(float))
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "sgemm: binding %d holds %" PRIu64
                             " bytes, %d x %d x %d needs %" PRIu64,
                             i, ctx->sizes[i], g->m, g->n, g->k, need[i] * sizeof(float));
  f(ROW_MAJOR, NO_TRANS, NO_TRANS, g->m, g->n, g->k, g->alpha,
    (const float *)(uintptr_t)ctx->addresses[0], g->k, (const float *)(uintptr_t)ctx->addresses[1],
    g->n, g->beta, (float *)(uintptr_t)ctx->addresses[2], g->n);
  return NULL;
}

/* out = relu(in), elementwise (a host kernel after the library call). */
static weft_status relu(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const float *in = ctx->buffers[0];
  float *out = ctx->buffers[1];
  for (uint64_t i = 0; i < ctx->sizes[1] / sizeof(float); i++) out[i] = in[i] > 0 ? in[i] : 0;
  return NULL;
}

static int check(weft_status st, const char *what) {
  if (!st) return 0;
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  fprintf(stderr, "weft-native_sgemm: %s: %s\n", what, text);
  weft_error_free(st);
  return 1;
}

static cblas_sgemm_fn load_cblas(const char **from) {
  const char *names[] = {getenv("WEFT_CBLAS"), "libopenblas.so.0", "libblas.so.3"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (!names[i] || !*names[i]) continue;
    void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    void *f = h ? dlsym(h, "cblas_sgemm") : NULL;
    if (f) {
      *from = names[i];
      cblas_sgemm_fn fn;
      memcpy(&fn, &f, sizeof(fn));
      return fn; /* the library stays loaded for the process */
    }
    if (h) dlclose(h);
  }
  return NULL;
}

int main(void) {
  const char *from = NULL;
  cblas_sgemm_fn fn = load_cblas(&from);
  if (!fn) {
    printf("weft-native_sgemm: no CBLAS found (set WEFT_CBLAS): skipped\n");
    return 0;
  }
  enum { M = 48, N = 32, K = 64 };
  weft_device *dev;
  weft_device_options o;
  weft_device_options_init(&o);
  if (check(weft_device_open(&o, &dev), "open")) return 1;
  weft_kernel k_gemm, k_relu;
  weft_buffer a, b, c, r;
  int bad = check(weft_kernel_native(dev, "sgemm", sgemm, &fn, &k_gemm), "native kernel") ||
            check(weft_kernel_host(dev, "relu", relu, NULL, &k_relu), "host kernel") ||
            check(weft_buffer_create(dev, 0, M * K * 4, &a), "A") ||
            check(weft_buffer_create(dev, 0, K * N * 4, &b), "B") ||
            check(weft_buffer_create(dev, 0, M * N * 4, &c), "C") ||
            check(weft_buffer_create(dev, 0, M * N * 4, &r), "R") ||
            check(weft_buffer_set_label(dev, c, "gemm.out"), "label");
  float *ha = malloc(sizeof(float) * M * K), *hb = malloc(sizeof(float) * K * N);
  float *want = malloc(sizeof(float) * M * N), *got = malloc(sizeof(float) * M * N);
  if (bad || !ha || !hb || !want || !got) return 1;
  for (int i = 0; i < M * K; i++) ha[i] = (float)((i * 7) % 13) - 6.0f;
  for (int i = 0; i < K * N; i++) hb[i] = (float)((i * 5) % 11) * 0.25f - 1.0f;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int p = 0; p < K; p++) s += (double)ha[i * K + p] * hb[p * N + j];
      want[i * N + j] = s > 0 ? (float)s : 0.0f;
    }
  const uint32_t one[3] = {1, 1, 1};
  weft_binding gb[3] = {
      {a, 0, WEFT_WHOLE, WEFT_READ}, {b, 0, WEFT_WHOLE, WEFT_READ}, {c, 0, WEFT_WHOLE, WEFT_WRITE}};
  weft_binding rb[2] = {{c, 0, WEFT_WHOLE, WEFT_READ}, {r, 0, WEFT_WHOLE, WEFT_WRITE}};
  gemm_args g = {M, N, K, 1.0f, 0.0f};
  weft_launch_desc d = {.struct_size = sizeof(d),
                        .stream = 1,
                        .kernel = k_gemm,
                        .grid = {1, 1, 1},
                        .block = {1, 1, 1},
                        .bindings = gb,
                        .num_bindings = 3,
                        .scalars = &g,
                        .scalar_bytes = sizeof(g),
                        .label = "layer0.gemm"};
  /* Inputs on stream 0, the library call on stream 1, relu on stream 2: weft
   * orders them by their buffers. */
  bad = check(weft_buffer_write(dev, 0, a, 0, ha, sizeof(float) * M * K), "write A") ||
        check(weft_buffer_write(dev, 0, b, 0, hb, sizeof(float) * K * N), "write B") ||
        check(weft_launch_ex(dev, &d), "sgemm launch") ||
        check(weft_launch(dev, 2, k_relu, one, one, rb, 2, NULL, 0), "relu launch") ||
        check(weft_buffer_read(dev, 0, r, 0, got, sizeof(float) * M * N), "read");
  if (bad) return 1;
  float worst = 0;
  for (int i = 0; i < M * N; i++) {
    float e = fabsf(got[i] - want[i]);
    if (e > worst) worst = e;
  }
  printf("weft-native_sgemm: relu(A B) through %s's cblas_sgemm: max error %g\n", from,
         (double)worst);
  if (worst > 1e-3f) return 1;
  /* A call the wrapper refuses (the scalars say K is larger than A holds):
   * its launch fails, relu after it is skipped, and the read says why. */
  g.k = 2 * K;
  if (check(weft_launch_ex(dev, &d), "sgemm launch") ||
      check(weft_launch(dev, 2, k_relu, one, one, rb, 2, NULL, 0), "relu launch"))
    return 1;
  weft_status st = weft_buffer_read(dev, 0, r, 0, got, sizeof(float) * M * N);
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  printf("weft-native_sgemm: the refused call's dependent read says: %s\n", text);
  weft_status u = weft_error_at(st, 0);
  int ok = u && weft_error_origin(u) &&
           strcmp(weft_error_origin(u), "launch 'layer0.gemm' of kernel 'sgemm' (launch 3)") == 0;
  weft_error_free(st);
  weft_device_close(dev);
  free(ha), free(hb), free(want), free(got);
  if (!ok) return fprintf(stderr, "weft-native_sgemm: the report does not name the call\n"), 1;
  printf("weft-native_sgemm: ok\n");
  return 0;
}
