/* A library call the embedder brings, inside weft's order and failure
 * model: a native kernel (weft_kernel_native) whose body is CBLAS's
 * cblas_sgemm (Debian's libopenblas-dev). weft orders it by its bindings
 * like any launch, pins what it uses, and when the call fails it taints its
 * output: the launch that depends on it is skipped, and the read names the
 * root. docs/embedding.md shows the CUDA version (cublasSgemm on
 * ctx->stream).
 *
 *   weft-native_sgemm        exits 0 when every check below holds */
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

/* The launch's scalars: C (m x n) = alpha A (m x k) B (k x n), row-major. */
typedef struct gemm_dims {
  int32_t m, n, k;
  float alpha;
} gemm_dims;

/* The native kernel: checks the bindings against the dimensions (a library
 * call trusts its arguments; weft's launch does not know what they mean),
 * then hands the addresses to CBLAS. A non-NULL return fails the launch. */
static weft_status sgemm_native(const weft_native_ctx *ctx, void *user) {
  (void)user;
  gemm_dims d;
  if (ctx->num_buffers != 3 || ctx->scalar_bytes != sizeof(d))
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "sgemm: 3 bindings and gemm_dims expected");
  memcpy(&d, ctx->scalars, sizeof(d));
  const uint64_t need[3] = {(uint64_t)d.m * (uint64_t)d.k * sizeof(float),
                            (uint64_t)d.k * (uint64_t)d.n * sizeof(float),
                            (uint64_t)d.m * (uint64_t)d.n * sizeof(float)};
  static const char *const names[3] = {"A", "B", "C"};
  for (int i = 0; i < 3; i++)
    if (ctx->sizes[i] < need[i])
      return weft_error_make(
          WEFT_ERR_INVALID_ARGUMENT, "sgemm %dx%dx%d: %s holds %llu bytes, it needs %llu", d.m, d.n,
          d.k, names[i], (unsigned long long)ctx->sizes[i], (unsigned long long)need[i]);
  const float *a = (const float *)(uintptr_t)ctx->addresses[0];
  const float *b = (const float *)(uintptr_t)ctx->addresses[1];
  float *c = (float *)(uintptr_t)ctx->addresses[2];
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, d.m, d.n, d.k, d.alpha, a, d.k, b, d.n,
              0.0f, c, d.n);
  return NULL;
}

/* A host kernel after it: y = max(x, 0) (binding 0 read, 1 written). */
static weft_status relu(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const float *x = ctx->buffers[0];
  float *y = ctx->buffers[1];
  for (uint64_t i = 0; i < ctx->sizes[1] / sizeof(float); i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  return NULL;
}

static int failed(weft_status st, const char *what) {
  if (!st) return 0;
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  fprintf(stderr, "native_sgemm: %s failed: %s\n", what, text);
  weft_error_free(st);
  return 1;
}
#define CHECK(call)                                                                                \
  do {                                                                                             \
    if (failed((call), #call)) goto out;                                                           \
  } while (0)

static const uint32_t one[3] = {1, 1, 1};

static weft_binding bind(weft_buffer b, weft_access access) {
  return (weft_binding){.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = access};
}

int main(void) {
  enum { M = 96, N = 64, K = 80 };
  int rc = 1;
  weft_device *dev = NULL;
  float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
  float *c = malloc(sizeof(float) * M * N), *want = malloc(sizeof(float) * M * N);
  weft_buffer ba = {0}, bb = {0}, bc = {0}, bd = {0}, bsmall = {0};
  if (!a || !b || !c || !want) goto out;
  for (int i = 0; i < M * K; i++) a[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
  for (int i = 0; i < K * N; i++) b[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
  for (int i = 0; i < M; i++) /* the naive reference */
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int p = 0; p < K; p++) s += (double)a[i * K + p] * b[p * N + j];
      want[i * N + j] = (float)(2.0 * s);
    }

  CHECK(weft_device_open(NULL, &dev));
  weft_kernel sgemm, post;
  CHECK(weft_kernel_native(dev, "cblas_sgemm", sgemm_native, NULL, &sgemm));
  CHECK(weft_kernel_host(dev, "relu", relu, NULL, &post));
  const weft_stream_id s = 0;
  CHECK(weft_buffer_create(dev, s, sizeof(float) * M * K, &ba));
  CHECK(weft_buffer_create(dev, s, sizeof(float) * K * N, &bb));
  CHECK(weft_buffer_create(dev, s, sizeof(float) * M * N, &bc));
  CHECK(weft_buffer_create(dev, s, sizeof(float) * M * N, &bd));
  CHECK(weft_buffer_write(dev, s, ba, 0, a, sizeof(float) * M * K));
  CHECK(weft_buffer_write(dev, s, bb, 0, b, sizeof(float) * K * N));

  /* 1. The library call in weft's order: C = 2 A B, then D = relu(C). */
  const gemm_dims dims = {M, N, K, 2.0f};
  weft_binding g[3] = {bind(ba, WEFT_READ), bind(bb, WEFT_READ), bind(bc, WEFT_WRITE)};
  CHECK(weft_launch(dev, s, sgemm, one, one, g, 3, &dims, sizeof(dims)));
  weft_binding r[2] = {bind(bc, WEFT_READ), bind(bd, WEFT_WRITE)};
  CHECK(weft_launch(dev, s, post, one, one, r, 2, NULL, 0));
  CHECK(weft_buffer_read(dev, s, bc, 0, c, sizeof(float) * M * N));
  double worst = 0;
  for (int i = 0; i < M * N; i++) {
    double err = fabs((double)c[i] - want[i]) / (1.0 + fabs((double)want[i]));
    if (err > worst) worst = err;
  }
  printf("cblas_sgemm %dx%dx%d in weft's order: max relative error %.2g against the naive "
         "reference\n",
         M, N, K, worst);
  if (worst > 1e-5) {
    fprintf(stderr, "native_sgemm: cblas_sgemm disagrees with the reference\n");
    goto out;
  }
  CHECK(weft_buffer_read(dev, s, bd, 0, want, sizeof(float) * M * N)); /* D over the reference */
  for (int i = 0; i < M * N; i++)
    if (want[i] != (c[i] > 0.0f ? c[i] : 0.0f)) {
      fprintf(stderr, "native_sgemm: relu(C)[%d] = %g, C[%d] = %g\n", i, (double)want[i], i,
              (double)c[i]);
      goto out;
    }
  printf("relu after it saw the product: D = max(C, 0) everywhere\n");

  /* 2. The failure path: a C too small for the product. The native call
   * refuses, its output is tainted, relu after it is skipped, and the read
   * of relu's output names the root: the library call's own message. */
  CHECK(weft_buffer_create(dev, s, sizeof(float) * 16, &bsmall));
  weft_binding bad[3] = {bind(ba, WEFT_READ), bind(bb, WEFT_READ), bind(bsmall, WEFT_WRITE)};
  CHECK(weft_launch(dev, s, sgemm, one, one, bad, 3, &dims, sizeof(dims)));
  weft_binding dep[2] = {bind(bsmall, WEFT_READ), bind(bd, WEFT_WRITE)};
  CHECK(weft_launch(dev, s, post, one, one, dep, 2, NULL, 0));
  weft_status st = weft_buffer_read(dev, s, bd, 0, c, sizeof(float) * M * N);
  if (weft_error_kind_of(st) != WEFT_ERR_SEVERAL ||
      weft_error_kind_of(weft_error_at(st, 0)) != WEFT_ERR_UNWRITTEN) {
    fprintf(stderr, "native_sgemm: the read of a skipped launch's output must be Unwritten\n");
    weft_error_free(st);
    goto out;
  }
  weft_status u = weft_error_at(st, 0);
  const char *root = weft_error_message(weft_error_root(u));
  const char *origin = weft_error_origin(u);
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  printf("the failing call tainted its output; relu was skipped; the read says:\n  %s\n", text);
  int named = strstr(root, "C holds 64 bytes") != NULL && origin &&
              strstr(origin, "cblas_sgemm") != NULL && weft_error_chain_length(u) >= 1;
  weft_error_free(st);
  if (!named) {
    fprintf(stderr, "native_sgemm: the read must name the root (the sgemm's message) and origin\n");
    goto out;
  }
  /* A's and B's bytes were only read: they are fine. */
  CHECK(weft_buffer_read(dev, s, ba, 0, a, sizeof(float) * M * K));
  printf("native_sgemm: OK\n");
  rc = 0;
out:
  if (dev) {
    weft_buffer all[5] = {ba, bb, bc, bd, bsmall};
    for (int i = 0; i < 5; i++)
      if (all[i].id) weft_error_free(weft_buffer_release(dev, all[i]));
    weft_device_close(dev);
  }
  free(a);
  free(b);
  free(c);
  free(want);
  return rc;
}
