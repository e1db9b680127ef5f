/* weft on the CUDA backend: the same calls as on the host, kernels from a
 * PTX module.
 *
 * 1. Opens a CUDA device (the driver from WEFT_CUDA_DRIVER, else
 *    libcuda.so.1). Without one it says why and exits 0: the host backend
 *    is the default, a GPU is optional.
 * 2. x = 1 on stream 0 and y = 2 on stream 1, then y = 3x + y on stream 2
 *    (the scheduler orders the streams with events only where x and y
 *    cross), read back on stream 3.
 * 3. The step captured once as a CUDA graph and replayed 100 times with x
 *    refreshed in place.
 * 4. A launch the driver refuses (1024x2 threads per block): reading its
 *    output reports the root error and the launch that was skipped after
 *    it, while an unrelated buffer reads back fine.
 *
 * The kernels are tests/fake_cuda/kernels.ptx (generated from kernels.cu by
 * nvcc), embedded at build time; under the fake driver (tests/fake_cuda)
 * they run as C emulations. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "weft_example_kernels_ptx.h"

#define N 65536u

typedef struct {
  float value;
  unsigned n;
} fill_args;
typedef struct {
  float a;
  unsigned n;
} axpy_args;

static weft_device *dev;
static weft_kernel k_fill, k_axpy;
static const uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};

static int fail(weft_status st, const char *what) {
  char buf[2048];
  weft_error_format(st, buf, sizeof(buf));
  fprintf(stderr, "cuda_axpy: %s failed: %s\n", what, buf);
  weft_error_free(st);
  weft_device_close(dev);
  return 1;
}

static weft_status fill(weft_stream_id s, weft_buffer b, float v) {
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  fill_args a = {v, N};
  return weft_launch(dev, s, k_fill, grid, block, &bd, 1, &a, sizeof(a));
}

static weft_status axpy(weft_stream_id s, float alpha, weft_buffer x, weft_buffer y,
                        const uint32_t blk[3]) {
  weft_binding bd[2] = {{x, 0, WEFT_WHOLE, WEFT_READ}, {y, 0, WEFT_WHOLE, WEFT_READ_WRITE}};
  axpy_args a = {alpha, N};
  return weft_launch(dev, s, k_axpy, grid, blk, bd, 2, &a, sizeof(a));
}

/* Every element of |b| equals |want|. */
static weft_status check(weft_stream_id s, weft_buffer b, float want, float *host, int *bad) {
  weft_status st = weft_buffer_read(dev, s, b, 0, host, N * sizeof(float));
  *bad = 0;
  for (unsigned i = 0; !st && i < N; i++) *bad += host[i] != want;
  return st;
}

int main(void) {
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_CUDA;
  weft_status st = weft_device_open(&o, &dev);
  if (st) {
    char buf[1024];
    weft_error_format(st, buf, sizeof(buf));
    printf("cuda_axpy: no CUDA device, nothing to show (%s)\n", buf);
    weft_error_free(st);
    return 0;
  }
  weft_device_info info = {0};
  if ((st = weft_device_info_get(dev, &info))) return fail(st, "device info");
  printf("cuda_axpy: %s, %.1f GiB, driver %d.%d\n", info.name,
         (double)info.total_memory / (1 << 30), info.driver_version / 1000,
         info.driver_version % 1000 / 10);

  weft_module m;
  if ((st = weft_module_load(dev, weft_example_kernels_ptx, weft_example_kernels_ptx_len, &m)))
    return fail(st, "loading the PTX module");
  if ((st = weft_kernel_cuda(dev, m, "weft_fill_f32", "b44", &k_fill)) ||
      (st = weft_kernel_cuda(dev, m, "weft_axpy_f32", "4bb4", &k_axpy)))
    return fail(st, "registering the kernels");

  float *host = malloc(N * sizeof(float));
  weft_buffer x, y, z;
  if (!host) return fail(NULL, "malloc");
  if ((st = weft_buffer_create(dev, 0, N * sizeof(float), &x)) ||
      (st = weft_buffer_create(dev, 1, N * sizeof(float), &y)) ||
      (st = weft_buffer_create(dev, 2, N * sizeof(float), &z)))
    return fail(st, "creating buffers");

  /* 2. Eager, across four streams. */
  int bad = 0;
  if ((st = fill(0, x, 1.0f)) || (st = fill(1, y, 2.0f)) || (st = axpy(2, 3.0f, x, y, block)) ||
      (st = check(3, y, 5.0f, host, &bad)))
    return fail(st, "the eager step");
  printf("eager: y = 3x + y over %u floats on 4 streams: %s\n", N,
         bad ? "WRONG" : "5.0 everywhere");

  /* 3. Captured once, replayed with x refreshed in place. */
  weft_stream_id s0 = 0;
  weft_capture *cap = NULL;
  if ((st = weft_capture_prepare(dev, &s0, 1, &cap)) || (st = fill(0, y, 0.0f)) ||
      (st = axpy(0, 2.0f, x, y, block)) || (st = weft_capture_begin(cap)) ||
      (st = fill(0, y, 0.0f)) || (st = axpy(0, 2.0f, x, y, block)) || (st = weft_capture_end(cap)))
    return fail(st, "capturing the step");
  int wrong = 0;
  for (int r = 1; r <= 100 && !st; r++) {
    for (unsigned i = 0; i < N; i++) host[i] = (float)r;
    if ((st = weft_buffer_write(dev, 0, x, 0, host, N * sizeof(float))) ||
        (st = weft_capture_replay(cap)))
      break;
    if (r % 25 == 0 && !(st = check(0, y, 2.0f * (float)r, host, &bad))) wrong += bad;
  }
  if (st) return fail(st, "replaying");
  weft_device_stats stats = {0};
  if ((st = weft_device_stats_get(dev, &stats))) return fail(st, "stats");
  printf("replay: 100 replays of a %zu-launch CUDA graph, x refreshed in place: %s\n",
         weft_capture_launches(cap), wrong ? "WRONG" : "y = 2x every time");
  weft_capture_destroy(cap);

  /* 4. A refused launch and what it leaves behind. */
  const uint32_t too_big[3] = {1024, 2, 1}; /* 2048 threads per block */
  if ((st = fill(1, z, 7.0f)) || (st = axpy(1, 1.0f, x, y, too_big)) ||
      (st = axpy(2, 1.0f, y, x, block)))
    return fail(st, "submitting the failing step");
  st = weft_buffer_read(dev, 3, x, 0, host, N * sizeof(float));
  char report[2048] = "(read succeeded)";
  if (st) weft_error_format(st, report, sizeof(report));
  weft_error_free(st);
  printf("refused launch: reading x reports:\n  %s\n", report);
  if ((st = check(3, z, 7.0f, host, &bad))) return fail(st, "reading the unrelated buffer");
  printf("the unrelated buffer z reads back fine: %s\n", bad ? "WRONG" : "7.0 everywhere");

  if ((st = weft_device_stats_get(dev, &stats))) return fail(st, "stats");
  printf("stats: %llu launches (%llu failed, %llu skipped), %llu cross-stream waits (%llu as "
         "event waits, %llu already complete, %llu elided), %llu completion marks\n",
         (unsigned long long)stats.launches, (unsigned long long)stats.launches_failed,
         (unsigned long long)stats.launches_skipped, (unsigned long long)stats.cross_stream_waits,
         (unsigned long long)stats.gpu_event_waits, (unsigned long long)stats.gpu_waits_complete,
         (unsigned long long)stats.waits_elided, (unsigned long long)stats.gpu_marks);
  free(host);
  weft_device_close(dev);
  return wrong ? 1 : 0;
}
