/* stress_cuda_device: a CUDA device (on the fake driver, tests/fake_cuda)
 * driven by several client threads at once. A plain main() so that it runs
 * under ThreadSanitizer: the scheduler thread, the fake's stream workers and
 * its host-function thread (completion marks) all touch weft state.
 *
 *   stress_cuda_device [rounds]      rounds per thread (default 2000)
 *
 * Main fills a shared buffer C on stream 0. 4 threads, each on its own
 * stream, loop: fill X with a round-dependent value, Y = X + C on the next
 * thread's stream (so every round crosses streams, and each stream carries
 * two threads' work), every 16th round read Y and check it exactly; every
 * 64th round a weft_check and a stats snapshot. A fifth thread syncs stream
 * 0 meanwhile, and a sixth replays a capture (one CUDA graph) with its input
 * refreshed in place, checking every 8th replay. At the end the device
 * closes and the driver must hold no stream, event, module or allocation.
 *
 * Exit status 0 on success, 1 on the first mismatch, 77 when weft or the
 * fake is built without cuda.h. */
#include <stdio.h>
#include <stdlib.h>

#if !defined(FAKE_CUDA_PATH) || !defined(WEFT_HAVE_CUDA)
int main(void) {
  puts("stress_cuda_device: weft or the fake driver is built without cuda.h");
  return 77;
}
#else

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include <weft/weft.h>

#include "fake_cuda_control.h"
#include "weft_test_kernels_ptx.h"

#define NTHREADS 4
#define N        4096u

typedef struct {
  float v;
  unsigned n;
} fill_args;

static weft_device *dev;
static weft_kernel k_fill, k_add, k_axpy;
static weft_buffer shared_c;
static int rounds = 2000;
static _Atomic int failed;
static _Atomic int done_threads;

static void fail(const char *what, weft_status st) {
  fprintf(stderr, "stress_cuda_device: %s: %s\n", what, st ? weft_error_message(st) : "mismatch");
  weft_error_free(st);
  atomic_store(&failed, 1);
}

static const uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};

static void *client(void *arg) {
  weft_stream_id s = (weft_stream_id)(uintptr_t)arg;
  weft_stream_id other = s % NTHREADS + 1; /* the next thread's stream: every add crosses */
  weft_buffer x, y;
  weft_status st;
  if ((st = weft_buffer_create(dev, s, N * 4, &x)) ||
      (st = weft_buffer_create(dev, s, N * 4, &y))) {
    fail("create", st);
    return NULL;
  }
  float *got = malloc(N * 4);
  for (int r = 0; r < rounds && !atomic_load(&failed); r++) {
    fill_args fa = {(float)(r + (int)s), N};
    weft_binding bx = {x, 0, WEFT_WHOLE, WEFT_WRITE};
    weft_binding add[3] = {{x, 0, WEFT_WHOLE, WEFT_READ},
                           {shared_c, 0, WEFT_WHOLE, WEFT_READ},
                           {y, 0, WEFT_WHOLE, WEFT_WRITE}};
    unsigned n = N;
    if ((st = weft_launch(dev, s, k_fill, grid, block, &bx, 1, &fa, sizeof(fa))) ||
        (st = weft_launch(dev, other, k_add, grid, block, add, 3, &n, sizeof(n)))) {
      fail("launch", st);
      break;
    }
    if (r % 16 == 15) {
      if ((st = weft_buffer_read(dev, s, y, 0, got, N * 4))) {
        fail("read", st);
        break;
      }
      for (unsigned i = 0; i < N; i++)
        if (got[i] != fa.v + 0.5f) {
          fprintf(stderr, "round %d stream %u element %u: %f, want %f\n", r, (unsigned)s, i,
                  (double)got[i], (double)(fa.v + 0.5f));
          fail("value", NULL);
          break;
        }
    }
    if (r % 64 == 63) {
      weft_device_stats stats = {0};
      if ((st = weft_check(dev, &y, 1)) || (st = weft_device_stats_get(dev, &stats))) {
        fail("check", st);
        break;
      }
    }
  }
  free(got);
  weft_error_free(weft_buffer_release(dev, x));
  weft_error_free(weft_buffer_release(dev, y));
  atomic_fetch_add(&done_threads, 1);
  return NULL;
}

/* A capture of { b = 1; b = 2a + b } on its own stream, replayed with a
 * refreshed in place every round while the clients run. */
static void *replayer(void *arg) {
  weft_stream_id s = (weft_stream_id)(uintptr_t)arg;
  weft_buffer a, b;
  weft_status st;
  if ((st = weft_buffer_create(dev, s, N * 4, &a)) ||
      (st = weft_buffer_create(dev, s, N * 4, &b))) {
    fail("replayer create", st);
    return NULL;
  }
  float *host = malloc(N * 4);
  weft_capture *cap = NULL;
  fill_args one = {1.0f, N};
  struct {
    float a;
    unsigned n;
  } two = {2.0f, N};
  weft_binding wb = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  weft_binding ax[2] = {{a, 0, WEFT_WHOLE, WEFT_READ}, {b, 0, WEFT_WHOLE, WEFT_READ_WRITE}};
  for (unsigned i = 0; i < N; i++) host[i] = 0.0f;
  int replays = rounds / 4;
  if ((st = weft_buffer_write(dev, s, a, 0, host, N * 4)) ||
      (st = weft_capture_prepare(dev, &s, 1, &cap)) ||
      (st = weft_launch(dev, s, k_fill, grid, block, &wb, 1, &one, sizeof(one))) || /* warm-up */
      (st = weft_launch(dev, s, k_axpy, grid, block, ax, 2, &two, sizeof(two))) ||
      (st = weft_capture_begin(cap)) ||
      (st = weft_launch(dev, s, k_fill, grid, block, &wb, 1, &one, sizeof(one))) ||
      (st = weft_launch(dev, s, k_axpy, grid, block, ax, 2, &two, sizeof(two))) ||
      (st = weft_capture_end(cap))) {
    fail("replayer capture", st);
    replays = 0;
  }
  for (int r = 0; r < replays && !atomic_load(&failed); r++) {
    for (unsigned i = 0; i < N; i++) host[i] = (float)(r % 97);
    if ((st = weft_buffer_write(dev, s, a, 0, host, N * 4)) || (st = weft_capture_replay(cap))) {
      fail("replay", st);
      break;
    }
    if (r % 8 == 7) {
      if ((st = weft_buffer_read(dev, s, b, 0, host, N * 4))) {
        fail("replay read", st);
        break;
      }
      for (unsigned i = 0; i < N; i++)
        if (host[i] != 2.0f * (float)(r % 97) + 1.0f) {
          fprintf(stderr, "replay %d element %u: %f\n", r, i, (double)host[i]);
          fail("replay value", NULL);
          break;
        }
    }
  }
  weft_capture_destroy(cap);
  free(host);
  weft_error_free(weft_buffer_release(dev, a));
  weft_error_free(weft_buffer_release(dev, b));
  return NULL;
}

static void *syncer(void *arg) {
  (void)arg;
  while (atomic_load(&done_threads) < NTHREADS && !atomic_load(&failed)) {
    weft_status st = weft_sync(dev, 0);
    if (st) fail("sync", st);
  }
  return NULL;
}

int main(int argc, char **argv) {
  if (argc > 1) rounds = atoi(argv[1]);
  const char *path = getenv("WEFT_CUDA_DRIVER");
  if (!path || !*path) setenv("WEFT_CUDA_DRIVER", path = FAKE_CUDA_PATH, 1);
  void *lib = dlopen(path, RTLD_NOW);
  fake_cuda_stat_fn stat = lib ? (fake_cuda_stat_fn)(uintptr_t)dlsym(lib, "fake_cuda_stat") : NULL;
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_CUDA;
  o.max_streams = NTHREADS + 2;
  weft_status st = weft_device_open(&o, &dev);
  if (st) {
    fail("open", st);
    return 1;
  }
  weft_module m;
  if ((st = weft_module_load(dev, weft_test_kernels_ptx, weft_test_kernels_ptx_len, &m)) ||
      (st = weft_kernel_cuda(dev, m, "weft_fill_f32", "b44", &k_fill)) ||
      (st = weft_kernel_cuda(dev, m, "weft_vec_add_f32", "bbb4", &k_add)) ||
      (st = weft_kernel_cuda(dev, m, "weft_axpy_f32", "4bb4", &k_axpy)) ||
      (st = weft_buffer_create(dev, 0, N * 4, &shared_c))) {
    fail("setup", st);
    weft_device_close(dev);
    return 1;
  }
  fill_args half = {0.5f, N};
  weft_binding bc = {shared_c, 0, WEFT_WHOLE, WEFT_WRITE};
  if ((st = weft_launch(dev, 0, k_fill, grid, block, &bc, 1, &half, sizeof(half))))
    fail("fill", st);
  pthread_t t[NTHREADS + 2];
  for (uintptr_t i = 0; i < NTHREADS; i++) pthread_create(&t[i], NULL, client, (void *)(i + 1));
  pthread_create(&t[NTHREADS], NULL, syncer, NULL);
  pthread_create(&t[NTHREADS + 1], NULL, replayer, (void *)(uintptr_t)(NTHREADS + 1));
  for (int i = 0; i <= NTHREADS + 1; i++) pthread_join(t[i], NULL);
  weft_device_stats s = {0};
  if ((st = weft_device_stats_get(dev, &s))) fail("stats", st);
  printf("stress_cuda_device: %d rounds x %d threads: %llu launches, %llu cross-stream waits "
         "(%llu event waits, %llu already complete, %llu elided), %llu events created, %llu "
         "marks\n",
         rounds, NTHREADS, (unsigned long long)s.launches, (unsigned long long)s.cross_stream_waits,
         (unsigned long long)s.gpu_event_waits, (unsigned long long)s.gpu_waits_complete,
         (unsigned long long)s.waits_elided, (unsigned long long)s.gpu_events_created,
         (unsigned long long)s.gpu_marks);
  weft_error_free(weft_buffer_release(dev, shared_c));
  weft_device_close(dev);
  if (stat) {
    const char *names[] = {"streams_live", "events_live", "modules_live", "live_allocations",
                           "host_allocs_live"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
      if (stat(names[i]) != 0) {
        fprintf(stderr, "stress_cuda_device: %s is %llu after close\n", names[i],
                (unsigned long long)stat(names[i]));
        atomic_store(&failed, 1);
      }
  }
  return atomic_load(&failed) ? 1 : 0;
}
#endif
