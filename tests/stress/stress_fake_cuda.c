/* stress_fake_cuda: the fake CUDA driver (tests/fake_cuda) hammered from
 * several threads. A plain main() so that it runs under ThreadSanitizer
 * (configure with -DWEFT_SANITIZE=thread: the fake library is instrumented
 * too).
 *
 *   stress_fake_cuda [rounds]      rounds per thread (default 200)
 *
 * 4 threads share the primary context. Each owns two streams and a buffer
 * chain: every round it fills A on its first stream (behind a short spin),
 * records an event, makes its second stream wait on it, computes B = 2A + B
 * there, reads B back asynchronously, and either synchronises at once or
 * leaves the round queued and checks it later through the event. Every
 * round also queries streams and events of the others (NOT_READY or
 * SUCCESS), allocates and frees with cuMemAllocAsync/cuMemFreeAsync, and
 * every 16th round replays a captured graph of the same work. Results are
 * checked exactly; at the end every counter must be back to zero.
 *
 * Exit status 0 on success; 1 with a message on the first mismatch; 77 if
 * the fake library is not built (no cuda.h). */
#include <stdio.h>
#include <stdlib.h>

#ifndef FAKE_CUDA_PATH
int main(void) {
  puts("stress_fake_cuda: the fake CUDA driver is not built (no cuda.h)");
  return 77;
}
#else

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "fake_cuda_control.h"
#include "weft_test_kernels_ptx.h"

enum { THREADS = 4, N = 512 };

static struct {
  PFN_cuGetProcAddress_v12000 GetProcAddress;
  PFN_cuInit_v2000 Init;
  PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 DevicePrimaryCtxRelease;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
  PFN_cuCtxSynchronize_v2000 CtxSynchronize;
  PFN_cuStreamCreate_v2000 StreamCreate;
  PFN_cuStreamDestroy_v4000 StreamDestroy;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize;
  PFN_cuStreamQuery_v2000 StreamQuery;
  PFN_cuStreamWaitEvent_v3020 StreamWaitEvent;
  PFN_cuEventCreate_v2000 EventCreate;
  PFN_cuEventDestroy_v4000 EventDestroy;
  PFN_cuEventRecord_v2000 EventRecord;
  PFN_cuEventQuery_v2000 EventQuery;
  PFN_cuEventSynchronize_v2000 EventSynchronize;
  PFN_cuMemAlloc_v3020 MemAlloc;
  PFN_cuMemFree_v3020 MemFree;
  PFN_cuMemAllocAsync_v11020 MemAllocAsync;
  PFN_cuMemFreeAsync_v11020 MemFreeAsync;
  PFN_cuMemcpyHtoDAsync_v3020 MemcpyHtoDAsync;
  PFN_cuMemcpyDtoHAsync_v3020 MemcpyDtoHAsync;
  PFN_cuMemsetD8Async_v3020 MemsetD8Async;
  PFN_cuModuleLoadData_v2000 ModuleLoadData;
  PFN_cuModuleUnload_v2000 ModuleUnload;
  PFN_cuModuleGetFunction_v2000 ModuleGetFunction;
  PFN_cuLaunchKernel_v4000 LaunchKernel;
  PFN_cuLaunchHostFunc_v10000 LaunchHostFunc;
  PFN_cuStreamBeginCapture_v10010 StreamBeginCapture;
  PFN_cuStreamEndCapture_v10000 StreamEndCapture;
  PFN_cuGraphInstantiateWithFlags_v11040 GraphInstantiateWithFlags;
  PFN_cuGraphLaunch_v10000 GraphLaunch;
  PFN_cuGraphExecDestroy_v10000 GraphExecDestroy;
  PFN_cuGraphDestroy_v10000 GraphDestroy;
} cu;

static fake_cuda_reset_fn fc_reset;
static fake_cuda_stat_fn fc_stat;
static CUcontext ctx;
static CUfunction f_fill, f_axpy, f_spin;
static CUstream streams[THREADS][2];
/* Every thread's capture ends before any thread queries the others'
 * streams: querying a capturing stream invalidates its capture. */
static pthread_barrier_t captured;
static CUevent events[THREADS];
static atomic_int failed;
static atomic_uint host_calls;

static void die(const char *what, int line, CUresult r) {
  fprintf(stderr, "stress_fake_cuda:%d: %s = %d\n", line, what, (int)r);
  exit(1);
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) die(#call, __LINE__, r_);                                              \
  } while (0)

static void *sym(void *lib, const char *name) {
  void *p = dlsym(lib, name);
  if (!p) {
    fprintf(stderr, "stress_fake_cuda: dlsym(%s) failed\n", name);
    exit(1);
  }
  return p;
}

static void resolve(const char *name, int version, void *slot) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st;
  if (cu.GetProcAddress(name, &p, version, 0, &st) != CUDA_SUCCESS || !p) {
    fprintf(stderr, "stress_fake_cuda: cuGetProcAddress(%s, %d) failed\n", name, version);
    exit(1);
  }
  memcpy(slot, &p, sizeof p);
}
#define R(field, version) resolve("cu" #field, version, &cu.field)

static void CUDA_CB count_host(void *arg) {
  (void)arg;
  atomic_fetch_add(&host_calls, 1);
}

static void check(const float *out, float want, int t, int round) {
  for (int i = 0; i < N; i++)
    if (out[i] != want) {
      fprintf(stderr, "stress_fake_cuda: thread %d round %d: out[%d] = %f, want %f\n", t, round, i,
              (double)out[i], (double)want);
      atomic_store(&failed, 1);
      exit(1);
    }
}

struct work {
  int t;
  int rounds;
};

static void *run(void *arg) {
  struct work *w = arg;
  int t = w->t;
  CK(cu.CtxSetCurrent(ctx));
  CUstream s0 = streams[t][0], s1 = streams[t][1];
  CUevent ev = events[t];
  CUdeviceptr a, b;
  CK(cu.MemAlloc(&a, N * sizeof(float)));
  CK(cu.MemAlloc(&b, N * sizeof(float)));
  float *out = malloc(N * sizeof(float));
  unsigned n = N, us = 50;
  float two = 2.0f, zero = 0.0f;
  void *spin_p[] = {&us};
  void *fill_b[] = {&b, &zero, &n};
  void *axpy_p[] = {&two, &a, &b, &n};
  float value, expect_b = 0.0f;
  void *fill_a[] = {&a, &value, &n};

  /* a captured round: b = 2a + b on s1, read back */
  CUgraphExec exec;
  CUgraph g;
  CK(cu.StreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CK(cu.LaunchKernel(f_axpy, N / 128, 1, 1, 128, 1, 1, 0, s1, axpy_p, NULL));
  CK(cu.MemcpyDtoHAsync(out, b, N * sizeof(float), s1));
  CK(cu.StreamEndCapture(s1, &g));
  CK(cu.GraphInstantiateWithFlags(&exec, g, 0));
  CK(cu.GraphDestroy(g));
  pthread_barrier_wait(&captured);

  CK(cu.LaunchKernel(f_fill, N / 128, 1, 1, 128, 1, 1, 0, s1, fill_b, NULL));
  for (int round = 0; round < w->rounds; round++) {
    value = (float)(round % 7);
    CK(cu.LaunchKernel(f_spin, 1, 1, 1, 32, 1, 1, 0, s0, spin_p, NULL));
    CK(cu.LaunchKernel(f_fill, N / 128, 1, 1, 128, 1, 1, 0, s0, fill_a, NULL));
    CK(cu.EventRecord(ev, s0));
    CK(cu.StreamWaitEvent(s1, ev, 0));
    if (round % 16 == 15) {
      CK(cu.GraphLaunch(exec, s1));
    } else {
      CK(cu.LaunchKernel(f_axpy, N / 128, 1, 1, 128, 1, 1, 0, s1, axpy_p, NULL));
      CK(cu.MemcpyDtoHAsync(out, b, N * sizeof(float), s1));
    }
    CK(cu.LaunchHostFunc(s1, count_host, NULL));
    expect_b = 2.0f * value + expect_b;
    if (expect_b > 1000.0f) { /* keep the values exact */
      CK(cu.LaunchKernel(f_fill, N / 128, 1, 1, 128, 1, 1, 0, s1, fill_b, NULL));
    }

    /* stream-ordered scratch memory */
    CUdeviceptr scratch;
    CK(cu.MemAllocAsync(&scratch, 4096, s0));
    CK(cu.MemsetD8Async(scratch, (unsigned char)round, 4096, s0));
    CK(cu.MemFreeAsync(scratch, s0));

    /* look at the other threads' work */
    int o = (t + 1 + round) % THREADS;
    CUresult q = cu.StreamQuery(streams[o][round & 1]);
    if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) die("cuStreamQuery(other)", __LINE__, q);
    q = cu.EventQuery(events[o]);
    if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY) die("cuEventQuery(other)", __LINE__, q);

    CK(cu.StreamSynchronize(s1));
    check(out, expect_b, t, round);
    if (expect_b > 1000.0f) expect_b = 0.0f;
    if (round % 8 == 0) CK(cu.EventSynchronize(ev));
  }
  CK(cu.StreamSynchronize(s0));
  CK(cu.GraphExecDestroy(exec));
  CK(cu.MemFree(a));
  CK(cu.MemFree(b));
  free(out);
  return NULL;
}

/* Phase 2: the threads keep streams busy until a weft_fault kernel, launched
 * by main, turns the context sticky; every thread must then see
 * CUDA_ERROR_ILLEGAL_ADDRESS, and fake_cuda_reset must clean up the streams
 * left with queued work. */
static CUfunction f_noop, f_fault;

static void *busy(void *arg) {
  int t = *(int *)arg;
  if (cu.CtxSetCurrent(ctx) != CUDA_SUCCESS) die("cuCtxSetCurrent", __LINE__, CUDA_ERROR_UNKNOWN);
  CUstream s0 = streams[t][0], s1 = streams[t][1];
  unsigned us = 200;
  void *spin_p[] = {&us};
  for (long i = 0;; i++) {
    CUresult r = cu.LaunchKernel(f_spin, 1, 1, 1, 1, 1, 1, 0, s0, spin_p, NULL);
    if (r == CUDA_SUCCESS) r = cu.EventRecord(events[t], s0);
    if (r == CUDA_SUCCESS) r = cu.StreamWaitEvent(s1, events[t], 0);
    if (r == CUDA_SUCCESS) r = cu.LaunchKernel(f_noop, 1, 1, 1, 1, 1, 1, 0, s1, NULL, NULL);
    if (r == CUDA_SUCCESS) {
      r = cu.StreamQuery(s1);
      if (r == CUDA_ERROR_NOT_READY) r = CUDA_SUCCESS;
    }
    if (r == CUDA_SUCCESS && i % 4 == 3) r = cu.StreamSynchronize(s1);
    if (r == CUDA_ERROR_ILLEGAL_ADDRESS) return NULL;
    if (r != CUDA_SUCCESS) die("busy thread", __LINE__, r);
  }
}

static int fault_phase(int rounds) {
  (void)rounds;
  CK(cu.Init(0));
  CK(cu.DevicePrimaryCtxRetain(&ctx, 0));
  CK(cu.CtxSetCurrent(ctx));
  CUmodule m;
  CK(cu.ModuleLoadData(&m, weft_test_kernels_ptx));
  CK(cu.ModuleGetFunction(&f_spin, m, "weft_spin_us"));
  CK(cu.ModuleGetFunction(&f_noop, m, "weft_noop"));
  CK(cu.ModuleGetFunction(&f_fault, m, "weft_fault"));
  for (int t = 0; t < THREADS; t++) {
    CK(cu.StreamCreate(&streams[t][0], 0));
    CK(cu.StreamCreate(&streams[t][1], CU_STREAM_NON_BLOCKING));
    CK(cu.EventCreate(&events[t], 0));
  }
  pthread_t th[THREADS];
  int ids[THREADS];
  for (int t = 0; t < THREADS; t++) {
    ids[t] = t;
    pthread_create(&th[t], NULL, busy, &ids[t]);
  }
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  CUstream s;
  CK(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cu.LaunchKernel(f_fault, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
  CUresult r = cu.StreamSynchronize(s);
  if (r != CUDA_ERROR_ILLEGAL_ADDRESS) die("cuStreamSynchronize after weft_fault", __LINE__, r);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  if (fc_stat("sticky") != CUDA_ERROR_ILLEGAL_ADDRESS) {
    fprintf(stderr, "stress_fake_cuda: not sticky after weft_fault\n");
    return 1;
  }
  fc_reset(); /* streams, events, module still there, some with queued work */
  static const char *const zero[] = {"streams_live", "events_live", "modules_live", "sticky"};
  for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
    if (fc_stat(zero[i]) != 0) {
      fprintf(stderr, "stress_fake_cuda: %s = %llu after reset\n", zero[i],
              (unsigned long long)fc_stat(zero[i]));
      return 1;
    }
  printf("stress_fake_cuda: sticky fault seen by %d busy threads, reset: ok\n", THREADS);
  return 0;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 200;
  if (rounds <= 0) rounds = 200;
  void *lib = dlopen(FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "stress_fake_cuda: dlopen(%s): %s\n", FAKE_CUDA_PATH, dlerror());
    return 1;
  }
  void *p = sym(lib, "cuGetProcAddress_v2");
  memcpy(&cu.GetProcAddress, &p, sizeof p);
  p = sym(lib, "fake_cuda_reset");
  memcpy(&fc_reset, &p, sizeof p);
  p = sym(lib, "fake_cuda_stat");
  memcpy(&fc_stat, &p, sizeof p);
  R(Init, 2000);
  R(DevicePrimaryCtxRetain, 7000);
  R(DevicePrimaryCtxRelease, 11000);
  R(CtxSetCurrent, 4000);
  R(CtxSynchronize, 2000);
  R(StreamCreate, 2000);
  R(StreamDestroy, 4000);
  R(StreamSynchronize, 2000);
  R(StreamQuery, 2000);
  R(StreamWaitEvent, 3020);
  R(EventCreate, 2000);
  R(EventDestroy, 4000);
  R(EventRecord, 2000);
  R(EventQuery, 2000);
  R(EventSynchronize, 2000);
  R(MemAlloc, 3020);
  R(MemFree, 3020);
  R(MemAllocAsync, 11020);
  R(MemFreeAsync, 11020);
  R(MemcpyHtoDAsync, 3020);
  R(MemcpyDtoHAsync, 3020);
  R(MemsetD8Async, 3020);
  R(ModuleLoadData, 2000);
  R(ModuleUnload, 2000);
  R(ModuleGetFunction, 2000);
  R(LaunchKernel, 4000);
  R(LaunchHostFunc, 10000);
  R(StreamBeginCapture, 10010);
  R(StreamEndCapture, 10000);
  R(GraphInstantiateWithFlags, 11040);
  R(GraphLaunch, 10000);
  R(GraphExecDestroy, 10000);
  R(GraphDestroy, 10000);

  fc_reset();
  CK(cu.Init(0));
  CK(cu.DevicePrimaryCtxRetain(&ctx, 0));
  CK(cu.CtxSetCurrent(ctx));
  CUmodule m;
  CK(cu.ModuleLoadData(&m, weft_test_kernels_ptx));
  CK(cu.ModuleGetFunction(&f_fill, m, "weft_fill_f32"));
  CK(cu.ModuleGetFunction(&f_axpy, m, "weft_axpy_f32"));
  CK(cu.ModuleGetFunction(&f_spin, m, "weft_spin_us"));
  for (int t = 0; t < THREADS; t++) {
    CK(cu.StreamCreate(&streams[t][0], CU_STREAM_NON_BLOCKING));
    CK(cu.StreamCreate(&streams[t][1], t % 2 ? CU_STREAM_NON_BLOCKING : 0));
    CK(cu.EventCreate(&events[t], CU_EVENT_DISABLE_TIMING));
  }
  pthread_t th[THREADS];
  struct work w[THREADS];
  pthread_barrier_init(&captured, NULL, THREADS);
  for (int t = 0; t < THREADS; t++) {
    w[t] = (struct work){t, rounds};
    pthread_create(&th[t], NULL, run, &w[t]);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&captured);
  CK(cu.CtxSynchronize());
  for (int t = 0; t < THREADS; t++) {
    CK(cu.StreamDestroy(streams[t][0]));
    CK(cu.StreamDestroy(streams[t][1]));
    CK(cu.EventDestroy(events[t]));
  }
  CK(cu.ModuleUnload(m));
  unsigned want = (unsigned)(THREADS * rounds);
  if (atomic_load(&host_calls) != want) {
    fprintf(stderr, "stress_fake_cuda: %u host functions ran, want %u\n", atomic_load(&host_calls),
            want);
    return 1;
  }
  static const char *const zero[] = {"streams_live", "events_live",      "modules_live",
                                     "graphs_live",  "graph_execs_live", "live_allocations",
                                     "sticky"};
  for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
    if (fc_stat(zero[i]) != 0) {
      fprintf(stderr, "stress_fake_cuda: %s = %llu at the end\n", zero[i],
              (unsigned long long)fc_stat(zero[i]));
      return 1;
    }
  printf("stress_fake_cuda: %d threads x %d rounds, %llu kernels, %llu graph launches: ok\n",
         THREADS, rounds, (unsigned long long)fc_stat("kernels_run"),
         (unsigned long long)fc_stat("graph_launches"));
  CK(cu.DevicePrimaryCtxRelease(0));
  fc_reset();
  return fault_phase(rounds) || atomic_load(&failed);
}
#endif
