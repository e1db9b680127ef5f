/* The fake CUDA driver (tests/fake_cuda, libcuda.so.1) on its own: no weft
 * code. Loads the library by absolute path like weft's loader will
 * (dlopen + cuGetProcAddress_v2 by base name at each PFN typedef's ABI
 * version, dlsym of the exported versioned names as the fallback) and checks
 * every emulated behaviour: memory capacity, modules and kernels, streams,
 * events and their ordering, stream capture and graphs, error injection,
 * sticky faults and reset. Every test starts with fake_cuda_reset(). */
#include <criterion/criterion.h>

#ifndef FAKE_CUDA_PATH
/* Built without cuda.h: nothing to test. */
Test(fake_driver, skipped_no_cuda_h) {
  cr_skip_test("cuda.h not found at configure time: the fake CUDA driver is not built");
}
#else

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include "fake_cuda_control.h"
#include "support/asan_criterion.h"
#include "weft_test_kernels_ptx.h"

/* ---- loading ----------------------------------------------------------------------------- */

static struct {
  PFN_cuGetProcAddress_v12000 GetProcAddress;
  PFN_cuInit_v2000 Init;
  PFN_cuDriverGetVersion_v2020 DriverGetVersion;
  PFN_cuDeviceGetCount_v2000 DeviceGetCount;
  PFN_cuDeviceGet_v2000 DeviceGet;
  PFN_cuDeviceGetName_v2000 DeviceGetName;
  PFN_cuDeviceTotalMem_v3020 DeviceTotalMem;
  PFN_cuDeviceGetAttribute_v2000 DeviceGetAttribute;
  PFN_cuDevicePrimaryCtxRetain_v7000 DevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 DevicePrimaryCtxRelease;
  PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
  PFN_cuCtxGetCurrent_v4000 CtxGetCurrent;
  PFN_cuCtxSynchronize_v2000 CtxSynchronize;
  PFN_cuGetErrorName_v6000 GetErrorName;
  PFN_cuGetErrorString_v6000 GetErrorString;
  PFN_cuStreamCreate_v2000 StreamCreate;
  PFN_cuStreamCreateWithPriority_v5050 StreamCreateWithPriority;
  PFN_cuStreamDestroy_v4000 StreamDestroy;
  PFN_cuStreamSynchronize_v2000 StreamSynchronize;
  PFN_cuStreamQuery_v2000 StreamQuery;
  PFN_cuStreamWaitEvent_v3020 StreamWaitEvent;
  PFN_cuEventCreate_v2000 EventCreate;
  PFN_cuEventDestroy_v4000 EventDestroy;
  PFN_cuEventRecord_v2000 EventRecord;
  PFN_cuEventQuery_v2000 EventQuery;
  PFN_cuEventSynchronize_v2000 EventSynchronize;
  PFN_cuEventElapsedTime_v12080 EventElapsedTime;
  PFN_cuMemGetInfo_v3020 MemGetInfo;
  PFN_cuMemAlloc_v3020 MemAlloc;
  PFN_cuMemFree_v3020 MemFree;
  PFN_cuMemAllocAsync_v11020 MemAllocAsync;
  PFN_cuMemFreeAsync_v11020 MemFreeAsync;
  PFN_cuMemcpyHtoD_v3020 MemcpyHtoD;
  PFN_cuMemcpyDtoH_v3020 MemcpyDtoH;
  PFN_cuMemcpyHtoDAsync_v3020 MemcpyHtoDAsync;
  PFN_cuMemcpyDtoHAsync_v3020 MemcpyDtoHAsync;
  PFN_cuMemcpyDtoDAsync_v3020 MemcpyDtoDAsync;
  PFN_cuMemsetD8Async_v3020 MemsetD8Async;
  PFN_cuMemHostAlloc_v2020 MemHostAlloc;
  PFN_cuMemFreeHost_v2000 MemFreeHost;
  PFN_cuLaunchHostFunc_v10000 LaunchHostFunc;
  PFN_cuModuleLoadData_v2000 ModuleLoadData;
  PFN_cuModuleUnload_v2000 ModuleUnload;
  PFN_cuModuleGetFunction_v2000 ModuleGetFunction;
  PFN_cuLaunchKernel_v4000 LaunchKernel;
  PFN_cuStreamBeginCapture_v10010 StreamBeginCapture;
  PFN_cuStreamEndCapture_v10000 StreamEndCapture;
  PFN_cuStreamIsCapturing_v10000 StreamIsCapturing;
  PFN_cuStreamGetCaptureInfo_v12030 StreamGetCaptureInfo;
  PFN_cuGraphGetNodes_v10000 GraphGetNodes;
  PFN_cuGraphNodeGetType_v10000 GraphNodeGetType;
  PFN_cuGraphInstantiateWithFlags_v11040 GraphInstantiateWithFlags;
  PFN_cuGraphLaunch_v10000 GraphLaunch;
  PFN_cuGraphExecDestroy_v10000 GraphExecDestroy;
  PFN_cuGraphDestroy_v10000 GraphDestroy;
} cu;

static void *lib;
static fake_cuda_fail_next_fn fail_next;
static fake_cuda_fault_fn fault;
static fake_cuda_reset_fn reset;
static fake_cuda_stat_fn counter;

static void *sym(const char *name) {
  void *p = dlsym(lib, name);
  cr_assert_not_null(p, "dlsym(%s): %s", name, dlerror());
  return p;
}

/* cuGetProcAddress_v2 by base name at the PFN typedef's version. */
static void resolve(const char *name, int version, void *slot, size_t size) {
  void *p = NULL;
  CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = cu.GetProcAddress(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &st);
  cr_assert(r == CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SUCCESS && p,
            "cuGetProcAddress(%s, %d) = %d, status %d", name, version, (int)r, (int)st);
  cr_assert_eq(size, sizeof p);
  memcpy(slot, &p, size);
}

#define R(field, version) resolve("cu" #field, version, &cu.field, sizeof cu.field)

static void load(void) {
  lib = dlopen(FAKE_CUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  cr_assert_not_null(lib, "dlopen(%s): %s", FAKE_CUDA_PATH, dlerror());
  void *p = sym("cuGetProcAddress_v2");
  memcpy(&cu.GetProcAddress, &p, sizeof p);
  p = sym("fake_cuda_fail_next");
  memcpy(&fail_next, &p, sizeof p);
  p = sym("fake_cuda_fault");
  memcpy(&fault, &p, sizeof p);
  p = sym("fake_cuda_reset");
  memcpy(&reset, &p, sizeof p);
  p = sym("fake_cuda_stat");
  memcpy(&counter, &p, sizeof p);
  R(Init, 2000);
  R(DriverGetVersion, 2020);
  R(DeviceGetCount, 2000);
  R(DeviceGet, 2000);
  R(DeviceGetName, 2000);
  R(DeviceTotalMem, 3020);
  R(DeviceGetAttribute, 2000);
  R(DevicePrimaryCtxRetain, 7000);
  R(DevicePrimaryCtxRelease, 11000);
  R(CtxSetCurrent, 4000);
  R(CtxGetCurrent, 4000);
  R(CtxSynchronize, 2000);
  R(GetErrorName, 6000);
  R(GetErrorString, 6000);
  R(StreamCreate, 2000);
  R(StreamCreateWithPriority, 5050);
  R(StreamDestroy, 4000);
  R(StreamSynchronize, 2000);
  R(StreamQuery, 2000);
  R(StreamWaitEvent, 3020);
  R(EventCreate, 2000);
  R(EventDestroy, 4000);
  R(EventRecord, 2000);
  R(EventQuery, 2000);
  R(EventSynchronize, 2000);
  R(EventElapsedTime, 12080);
  R(MemGetInfo, 3020);
  R(MemAlloc, 3020);
  R(MemFree, 3020);
  R(MemAllocAsync, 11020);
  R(MemFreeAsync, 11020);
  R(MemcpyHtoD, 3020);
  R(MemcpyDtoH, 3020);
  R(MemcpyHtoDAsync, 3020);
  R(MemcpyDtoHAsync, 3020);
  R(MemcpyDtoDAsync, 3020);
  R(MemsetD8Async, 3020);
  R(MemHostAlloc, 2020);
  R(MemFreeHost, 2000);
  R(LaunchHostFunc, 10000);
  R(ModuleLoadData, 2000);
  R(ModuleUnload, 2000);
  R(ModuleGetFunction, 2000);
  R(LaunchKernel, 4000);
  R(StreamBeginCapture, 10010);
  R(StreamEndCapture, 10000);
  R(StreamIsCapturing, 10000);
  R(StreamGetCaptureInfo, 12030);
  R(GraphGetNodes, 10000);
  R(GraphNodeGetType, 10000);
  R(GraphInstantiateWithFlags, 11040);
  R(GraphLaunch, 10000);
  R(GraphExecDestroy, 10000);
  R(GraphDestroy, 10000);
}

static const char *ename(CUresult r) {
  const char *s = NULL;
  cu.GetErrorName(r, &s);
  return s ? s : "?";
}

#define CK(call)                                                                                   \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    cr_assert_eq(r_, CUDA_SUCCESS, "%s = %s", #call, ename(r_));                                   \
  } while (0)
#define EXPECT(call, want)                                                                         \
  do {                                                                                             \
    CUresult r_ = (call), w_ = (want);                                                             \
    cr_assert_eq(r_, w_, "%s = %s, want %s", #call, ename(r_), ename(w_));                         \
  } while (0)

static CUcontext ctx;

/* Loads the library, clears the FAKE_CUDA_* environment (unless keep_env),
 * resets, and with init, initialises and makes the primary context current. */
static void start_with(bool init, bool keep_env) {
  load();
  if (!keep_env) {
    unsetenv("FAKE_CUDA_FAIL_INIT");
    unsetenv("FAKE_CUDA_DEVICES");
    unsetenv("FAKE_CUDA_MEMORY_BYTES");
  }
  reset();
  if (!init) return;
  CUdevice dev;
  CK(cu.Init(0));
  CK(cu.DeviceGet(&dev, 0));
  CK(cu.DevicePrimaryCtxRetain(&ctx, dev));
  CK(cu.CtxSetCurrent(ctx));
}

static void start(void) {
  start_with(true, false);
}

/* Reset, then LSan must find nothing of the fake's. */
static void finish(void) {
  reset();
  cr_assert_eq(counter("live_allocations"), 0);
  cr_assert_eq(counter("streams_live"), 0);
  ASSERT_NO_LEAKS();
}

static CUmodule load_ptx(void) {
  CUmodule m;
  CK(cu.ModuleLoadData(&m, weft_test_kernels_ptx));
  return m;
}

static CUfunction fn(CUmodule m, const char *name) {
  CUfunction f;
  CK(cu.ModuleGetFunction(&f, m, name));
  return f;
}

static CUresult launch(CUfunction f, unsigned grid, unsigned block, CUstream s, void **params) {
  return cu.LaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, params, NULL);
}

static CUresult fill(CUfunction f, CUdeviceptr out, float v, unsigned n, CUstream s) {
  void *params[] = {&out, &v, &n};
  return launch(f, (n + 127) / 128, 128, s, params);
}

static CUresult spin(CUfunction f, unsigned us, CUstream s) {
  void *params[] = {&us};
  return launch(f, 1, 32, s, params);
}

/* ---- entry points and loading ------------------------------------------------------------ */

Test(fake_driver, proc_address_versions_and_exported_names) {
  start_with(false, false);
  void *p, *q;
  CUdriverProcAddressQueryResult st;

  /* base name at the PFN's version -> the versioned export */
  CK(cu.GetProcAddress("cuMemAlloc", &p, 3020, 0, &st));
  cr_assert_eq(st, CU_GET_PROC_ADDRESS_SUCCESS);
  cr_assert_eq(p, sym("cuMemAlloc_v2"));
  CK(cu.GetProcAddress("cuMemAlloc", &p, CUDA_VERSION, 0, &st));
  cr_assert_eq(p, sym("cuMemAlloc_v2"));
  CK(cu.GetProcAddress("cuLaunchKernel", &p, 4000, 0, &st));
  cr_assert_eq(p, sym("cuLaunchKernel"));
  CK(cu.GetProcAddress("cuStreamDestroy", &p, 4000, 0, &st));
  cr_assert_eq(p, sym("cuStreamDestroy_v2"));
  CK(cu.GetProcAddress("cuDevicePrimaryCtxRelease", &p, 11000, 0, &st));
  cr_assert_eq(p, sym("cuDevicePrimaryCtxRelease_v2"));
  CK(cu.GetProcAddress("cuStreamGetCaptureInfo", &p, 12030, 0, &st));
  cr_assert_eq(p, sym("cuStreamGetCaptureInfo_v3"));
  CK(cu.GetProcAddress("cuGraphInstantiate", &p, 12000, 0, &st));
  cr_assert_eq(p, sym("cuGraphInstantiateWithFlags"));
  /* the version picks the ABI: CUDA 13 changed cuCtxSynchronize's signature */
  CK(cu.GetProcAddress("cuCtxSynchronize", &p, 2000, 0, &st));
  CK(cu.GetProcAddress("cuCtxSynchronize", &q, 13000, 0, &st));
  cr_assert_eq(p, sym("cuCtxSynchronize"));
  cr_assert_eq(q, sym("cuCtxSynchronize_v2"));
  cr_assert_neq(p, q);

  /* an older ABI than the fake implements */
  p = (void *)&st;
  EXPECT(cu.GetProcAddress("cuMemAlloc", &p, 2000, 0, &st), CUDA_ERROR_NOT_FOUND);
  cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  cr_assert_null(p);
  EXPECT(cu.GetProcAddress("cuStreamBeginCapture", &p, 10000, 0, &st), CUDA_ERROR_NOT_FOUND);
  cr_assert_eq(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  /* unknown */
  EXPECT(cu.GetProcAddress("cuNoSuchFunction", &p, 13000, 0, &st), CUDA_ERROR_NOT_FOUND);
  cr_assert_eq(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  cr_assert_null(p);
  EXPECT(cu.GetProcAddress(NULL, &p, 13000, 0, &st), CUDA_ERROR_INVALID_VALUE);

  /* the dlsym fallback: the exported versioned names */
  static const char *const exported[] = {"cuInit",
                                         "cuDriverGetVersion",
                                         "cuDeviceGetCount",
                                         "cuDeviceGet",
                                         "cuDeviceGetName",
                                         "cuDeviceTotalMem_v2",
                                         "cuDeviceGetAttribute",
                                         "cuDevicePrimaryCtxRetain",
                                         "cuDevicePrimaryCtxRelease_v2",
                                         "cuCtxSetCurrent",
                                         "cuCtxGetCurrent",
                                         "cuCtxSynchronize",
                                         "cuGetErrorName",
                                         "cuGetErrorString",
                                         "cuStreamCreate",
                                         "cuStreamCreateWithPriority",
                                         "cuStreamDestroy_v2",
                                         "cuStreamSynchronize",
                                         "cuStreamQuery",
                                         "cuStreamWaitEvent",
                                         "cuEventCreate",
                                         "cuEventDestroy_v2",
                                         "cuEventRecord",
                                         "cuEventQuery",
                                         "cuEventSynchronize",
                                         "cuEventElapsedTime_v2",
                                         "cuMemGetInfo_v2",
                                         "cuMemAlloc_v2",
                                         "cuMemFree_v2",
                                         "cuMemAllocAsync",
                                         "cuMemFreeAsync",
                                         "cuMemcpyHtoD_v2",
                                         "cuMemcpyDtoH_v2",
                                         "cuMemcpyHtoDAsync_v2",
                                         "cuMemcpyDtoHAsync_v2",
                                         "cuMemcpyDtoDAsync_v2",
                                         "cuMemsetD8Async",
                                         "cuMemHostAlloc",
                                         "cuMemFreeHost",
                                         "cuLaunchHostFunc",
                                         "cuModuleLoadData",
                                         "cuModuleUnload",
                                         "cuModuleGetFunction",
                                         "cuLaunchKernel",
                                         "cuStreamBeginCapture_v2",
                                         "cuStreamEndCapture",
                                         "cuStreamIsCapturing",
                                         "cuStreamGetCaptureInfo_v3",
                                         "cuGraphGetNodes",
                                         "cuGraphNodeGetType",
                                         "cuGraphInstantiateWithFlags",
                                         "cuGraphLaunch",
                                         "cuGraphExecDestroy",
                                         "cuGraphDestroy",
                                         "cuGetProcAddress_v2"};
  for (size_t i = 0; i < sizeof exported / sizeof exported[0]; i++) sym(exported[i]);
  cr_assert_null(dlsym(lib, "fc_kernel_find"), "internal symbols are hidden");
  finish();
}

Test(fake_driver, dlsym_fallback_drives_the_driver) {
  start();
  PFN_cuMemAlloc_v3020 alloc;
  PFN_cuMemcpyHtoDAsync_v3020 htod;
  PFN_cuMemcpyDtoH_v3020 dtoh;
  PFN_cuMemFree_v3020 mfree;
  void *p = sym("cuMemAlloc_v2");
  memcpy(&alloc, &p, sizeof p);
  p = sym("cuMemcpyHtoDAsync_v2");
  memcpy(&htod, &p, sizeof p);
  p = sym("cuMemcpyDtoH_v2");
  memcpy(&dtoh, &p, sizeof p);
  p = sym("cuMemFree_v2");
  memcpy(&mfree, &p, sizeof p);
  CUdeviceptr d;
  int in[4] = {1, 2, 3, 4}, out[4] = {0};
  CK(alloc(&d, sizeof in));
  CK(htod(d, in, sizeof in, NULL));
  CK(dtoh(out, d, sizeof out));
  cr_assert_arr_eq(in, out, sizeof in);
  CK(mfree(d));
  finish();
}

/* ---- initialisation, device, context, errors --------------------------------------------- */

Test(fake_driver, init_device_and_context) {
  start_with(false, false);
  int v, n;
  CUdevice dev;
  CK(cu.DriverGetVersion(&v));
  cr_assert_eq(v, 13000);
  EXPECT(cu.DeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  EXPECT(cu.Init(1), CUDA_ERROR_INVALID_VALUE);
  CK(cu.Init(0));
  CK(cu.Init(0));
  CK(cu.DeviceGetCount(&n));
  cr_assert_eq(n, 1);
  EXPECT(cu.DeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
  CK(cu.DeviceGet(&dev, 0));
  char name[64];
  CK(cu.DeviceGetName(name, sizeof name, dev));
  cr_assert_str_eq(name, "Fake CUDA Device");
  size_t total;
  CK(cu.DeviceTotalMem(&total, dev));
  cr_assert_eq(total, (size_t)1 << 30);

  static const struct {
    CUdevice_attribute a;
    int v;
  } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
      {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 0},
  };
  for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
    CK(cu.DeviceGetAttribute(&v, attrs[i].a, dev));
    cr_assert_eq(v, attrs[i].v, "attribute %d", (int)attrs[i].a);
  }
  CK(cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  cr_assert_gt(v, 0);
  EXPECT(cu.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, dev), CUDA_ERROR_INVALID_VALUE);

  /* no current context yet */
  CUdeviceptr d;
  CUcontext c = (CUcontext)&v;
  CK(cu.CtxGetCurrent(&c));
  cr_assert_null(c);
  EXPECT(cu.MemAlloc(&d, 256), CUDA_ERROR_INVALID_CONTEXT);
  CK(cu.DevicePrimaryCtxRetain(&ctx, dev));
  CK(cu.CtxSetCurrent(ctx));
  CK(cu.CtxGetCurrent(&c));
  cr_assert_eq(c, ctx);
  EXPECT(cu.CtxSetCurrent((CUcontext)&v), CUDA_ERROR_INVALID_CONTEXT);
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemFree(d));
  CK(cu.CtxSynchronize());
  cr_assert_eq(counter("ctx_refs"), 1);
  finish();
}

static void *other_thread(void *arg) {
  CUdeviceptr d;
  *(CUresult *)arg = cu.MemAlloc(&d, 256);
  return NULL;
}

Test(fake_driver, context_is_per_thread) {
  start();
  pthread_t t;
  CUresult r = CUDA_SUCCESS;
  pthread_create(&t, NULL, other_thread, &r);
  pthread_join(t, NULL);
  EXPECT(r, CUDA_ERROR_INVALID_CONTEXT);
  finish();
}

Test(fake_driver, env_fail_init_and_no_devices) {
  start_with(false, false);
  setenv("FAKE_CUDA_FAIL_INIT", "1", 1);
  reset();
  EXPECT(cu.Init(0), CUDA_ERROR_NO_DEVICE);
  int n;
  EXPECT(cu.DeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  unsetenv("FAKE_CUDA_FAIL_INIT");
  setenv("FAKE_CUDA_DEVICES", "0", 1);
  reset();
  CK(cu.Init(0));
  CK(cu.DeviceGetCount(&n));
  cr_assert_eq(n, 0);
  CUdevice dev;
  EXPECT(cu.DeviceGet(&dev, 0), CUDA_ERROR_INVALID_DEVICE);
  unsetenv("FAKE_CUDA_DEVICES");
  finish();
}

Test(fake_driver, error_names_and_strings) {
  start_with(false, false);
  const char *s;
  CK(cu.GetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  cr_assert_str_eq(s, "CUDA_ERROR_OUT_OF_MEMORY");
  CK(cu.GetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  cr_assert_str_eq(s, "out of memory");
  CK(cu.GetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
  cr_assert_str_eq(s, "CUDA_ERROR_ILLEGAL_ADDRESS");
  CK(cu.GetErrorString(CUDA_ERROR_ILLEGAL_ADDRESS, &s));
  cr_assert_str_eq(s, "an illegal memory access was encountered");
  CK(cu.GetErrorName(CUDA_SUCCESS, &s));
  cr_assert_str_eq(s, "CUDA_SUCCESS");
  CK(cu.GetErrorName(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, &s));
  cr_assert_str_eq(s, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  CK(cu.GetErrorName(CUDA_ERROR_UNKNOWN, &s));
  cr_assert_str_eq(s, "CUDA_ERROR_UNKNOWN");
  s = "x";
  EXPECT(cu.GetErrorName((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
  cr_assert_null(s);
  s = "x";
  EXPECT(cu.GetErrorString((CUresult)12345, &s), CUDA_ERROR_INVALID_VALUE);
  cr_assert_null(s);
  int named = 0;
  for (int r = 0; r < 1000; r++) {
    const char *name = NULL, *text = NULL;
    CUresult a = cu.GetErrorName((CUresult)r, &name), b = cu.GetErrorString((CUresult)r, &text);
    cr_assert_eq(a, b, "%d", r);
    if (a != CUDA_SUCCESS) continue;
    named++;
    cr_assert(strncmp(name, "CUDA_", 5) == 0 && text && *text, "%d: %s", r, name);
  }
  cr_assert_geq(named, 90);
  finish();
}

/* ---- memory ------------------------------------------------------------------------------ */

Test(fake_driver, capacity_oom_and_invalid_frees) {
  setenv("FAKE_CUDA_MEMORY_BYTES", "1048576", 1);
  start_with(true, true);
  size_t fr, total;
  CK(cu.MemGetInfo(&fr, &total));
  cr_assert_eq(total, 1048576);
  cr_assert_eq(fr, 1048576);
  CUdeviceptr a, b, c;
  CK(cu.MemAlloc(&a, 512 * 1024));
  cr_assert_eq(a % 256, 0);
  CK(cu.MemAlloc(&b, 512 * 1024 - 256));
  CK(cu.MemGetInfo(&fr, &total));
  cr_assert_eq(fr, 256);
  EXPECT(cu.MemAlloc(&c, 257), CUDA_ERROR_OUT_OF_MEMORY);
  CK(cu.MemAlloc(&c, 1)); /* 256 bytes accounted */
  EXPECT(cu.MemAlloc(&c, 1), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(cu.MemAlloc(&c, 0), CUDA_ERROR_INVALID_VALUE);
  cr_assert_eq(counter("live_allocations"), 3);
  cr_assert_eq(counter("live_bytes"), 1048576);
  cr_assert_eq(counter("mem_alloc_calls"), 3);

  EXPECT(cu.MemFree(a + 256), CUDA_ERROR_INVALID_VALUE); /* interior pointer */
  EXPECT(cu.MemFree((CUdeviceptr)0x1000), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.MemFree(0), CUDA_ERROR_INVALID_VALUE);
  CK(cu.MemFree(a));
  EXPECT(cu.MemFree(a), CUDA_ERROR_INVALID_VALUE); /* double free */
  CK(cu.MemAlloc(&a, 512 * 1024));                 /* the space is back */
  CK(cu.MemFree(a));
  CK(cu.MemFree(b));
  CK(cu.MemFree(c));
  CK(cu.MemGetInfo(&fr, &total));
  cr_assert_eq(fr, 1048576);
  cr_assert_eq(counter("live_bytes"), 0);
  cr_assert_eq(counter("peak_bytes"), 1048576);
  finish();
}

Test(fake_driver, copies_memset_and_pointer_validation) {
  start();
  CUstream s;
  CK(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a, b;
  CK(cu.MemAlloc(&a, 1024));
  CK(cu.MemAlloc(&b, 1024));
  unsigned char *h;
  CK(cu.MemHostAlloc((void **)&h, 1024, 0));
  for (int i = 0; i < 1024; i++) h[i] = (unsigned char)i;
  CK(cu.MemcpyHtoD(a, h, 1024));
  CK(cu.MemcpyDtoDAsync(b, a, 1024, s));
  CK(cu.MemsetD8Async(b + 100, 0xEE, 50, s));
  unsigned char out[1024];
  CK(cu.MemcpyDtoHAsync(out, b, 1024, s));
  CK(cu.StreamSynchronize(s));
  for (int i = 0; i < 1024; i++)
    cr_assert_eq(out[i], i >= 100 && i < 150 ? 0xEE : (unsigned char)i, "byte %d", i);
  memset(h, 7, 1024);
  CK(cu.MemcpyHtoDAsync(a, h, 1024, s));
  CK(cu.StreamSynchronize(s));
  CK(cu.MemcpyDtoH(out, a, 1024));
  cr_assert_eq(out[1023], 7);

  /* device pointers must lie inside one live allocation */
  EXPECT(cu.MemcpyHtoD(a + 1000, h, 25), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.MemcpyHtoD((CUdeviceptr)(uintptr_t)h, h, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.MemcpyDtoH(out, a - 1, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.MemcpyHtoDAsync(b + 1024, h, 1, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.MemcpyDtoHAsync(out, 0, 1, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.MemcpyDtoDAsync(a, b + 1, 1024, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.MemsetD8Async(a + 1, 0, 1024, s), CUDA_ERROR_INVALID_VALUE);
  CK(cu.MemcpyHtoD(a + 1020, h, 4)); /* the last bytes are fine */
  CK(cu.MemcpyHtoD(a, h, 0));

  EXPECT(cu.MemFreeHost(out), CUDA_ERROR_INVALID_VALUE);
  CK(cu.MemFreeHost(h));
  EXPECT(cu.MemFreeHost(h), CUDA_ERROR_INVALID_VALUE);
  cr_assert_eq(counter("host_allocs_live"), 0);
  CK(cu.MemFree(a));
  CK(cu.MemFree(b));
  EXPECT(cu.MemcpyHtoD(a, out, 4), CUDA_ERROR_INVALID_VALUE); /* freed */
  CK(cu.StreamDestroy(s));
  finish();
}

Test(fake_driver, stream_ordered_alloc_and_free) {
  start();
  CUmodule m = load_ptx();
  CUfunction f_fill = fn(m, "weft_fill_f32"), f_spin = fn(m, "weft_spin_us");
  CUstream s;
  CK(cu.StreamCreate(&s, 0));
  CUdeviceptr d;
  CK(cu.MemAllocAsync(&d, 64 * sizeof(float), s));
  CK(spin(f_spin, 100000, s));
  CK(fill(f_fill, d, 3.0f, 64, s));
  float out[64];
  CK(cu.MemcpyDtoHAsync(out, d, sizeof out, s));
  CK(cu.MemFreeAsync(d, s));
  EXPECT(cu.MemFreeAsync(d, s), CUDA_ERROR_INVALID_VALUE); /* already being freed */
  EXPECT(cu.MemFree(d), CUDA_ERROR_INVALID_VALUE);
  cr_assert_eq(counter("live_allocations"), 1, "freed in stream order, not yet");
  CK(cu.StreamSynchronize(s));
  cr_assert_eq(counter("live_allocations"), 0);
  for (int i = 0; i < 64; i++) cr_assert_eq(out[i], 3.0f);
  EXPECT(cu.MemAllocAsync(&d, 0, s), CUDA_ERROR_INVALID_VALUE);
  CK(cu.StreamDestroy(s));
  CK(cu.ModuleUnload(m));
  finish();
}

/* ---- modules and kernels ----------------------------------------------------------------- */

Test(fake_driver, module_loading) {
  start();
  CUmodule m = load_ptx();
  static const char *const names[] = {"weft_fill_f32", "weft_vec_add_f32", "weft_axpy_f32",
                                      "weft_noop",     "weft_fault",       "weft_spin_us"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) fn(m, names[i]);
  CUfunction f;
  EXPECT(cu.ModuleGetFunction(&f, m, "weft_nope"), CUDA_ERROR_NOT_FOUND);
  EXPECT(cu.ModuleGetFunction(&f, m, "weft_fill"), CUDA_ERROR_NOT_FOUND);
  cr_assert_eq(counter("modules_live"), 1);

  CUmodule bad;
  EXPECT(cu.ModuleLoadData(&bad, "this is not PTX"), CUDA_ERROR_INVALID_IMAGE);
  EXPECT(cu.ModuleLoadData(&bad, ".version 99.0\n.target sm_75\n"),
         CUDA_ERROR_UNSUPPORTED_PTX_VERSION);

  /* a PTX entry the fake cannot run: loads, found, refuses to launch */
  CUmodule other;
  CK(cu.ModuleLoadData(&other, "//\n.version 9.0\n.target sm_75\n.address_size 64\n"
                               ".visible .entry my_kernel(\n.param .u32 n\n)\n{\nret;\n}\n"
                               ".entry   weft_noop ()\n{\nret;\n}\n"));
  CK(cu.ModuleGetFunction(&f, other, "my_kernel"));
  EXPECT(launch(f, 1, 1, NULL, NULL), CUDA_ERROR_NOT_SUPPORTED);
  CK(cu.ModuleGetFunction(&f, other, "weft_noop"));
  CK(launch(f, 1, 1, NULL, NULL));
  CK(cu.ModuleUnload(other));
  EXPECT(launch(f, 1, 1, NULL, NULL), CUDA_ERROR_INVALID_HANDLE); /* unloaded */
  EXPECT(cu.ModuleUnload(other), CUDA_ERROR_INVALID_HANDLE);

  /* a cubin: an ELF whose string table names the kernels */
  unsigned char elf[512] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  static const char strtab[] = "\0.shstrtab\0weft_vec_add_f32\0weft_noop\0other";
  size_t strofs = 64, shofs = 64 + 64;
  memcpy(elf + strofs, strtab, sizeof strtab);
  elf[0x28] = (unsigned char)shofs; /* e_shoff */
  elf[0x3a] = 64;                   /* e_shentsize */
  elf[0x3c] = 1;                    /* e_shnum */
  unsigned char *sh = elf + shofs;
  sh[4] = 3;                               /* SHT_STRTAB */
  sh[0x18] = (unsigned char)strofs;        /* sh_offset */
  sh[0x20] = (unsigned char)sizeof strtab; /* sh_size */
  CUmodule cubin;
  CK(cu.ModuleLoadData(&cubin, elf));
  CK(cu.ModuleGetFunction(&f, cubin, "weft_vec_add_f32"));
  CK(cu.ModuleGetFunction(&f, cubin, "weft_noop"));
  EXPECT(cu.ModuleGetFunction(&f, cubin, "weft_fill_f32"), CUDA_ERROR_NOT_FOUND);
  CK(cu.ModuleUnload(cubin));

  CK(cu.CtxSynchronize());
  CK(cu.ModuleUnload(m));
  cr_assert_eq(counter("modules_live"), 0);
  finish();
}

Test(fake_driver, kernels_compute) {
  start();
  CUmodule m = load_ptx();
  CUfunction f_fill = fn(m, "weft_fill_f32"), f_add = fn(m, "weft_vec_add_f32"),
             f_axpy = fn(m, "weft_axpy_f32"), f_noop = fn(m, "weft_noop");
  enum { N = 1000 }; /* not a multiple of the block */
  CUstream s;
  CK(cu.StreamCreateWithPriority(&s, 0, -1));
  CUdeviceptr a, b, c;
  CK(cu.MemAlloc(&a, N * sizeof(float)));
  CK(cu.MemAlloc(&b, N * sizeof(float)));
  CK(cu.MemAlloc(&c, N * sizeof(float)));
  float ha[N], hb[N], out[N];
  for (int i = 0; i < N; i++) ha[i] = (float)i, hb[i] = (float)(2 * i);
  CK(cu.MemcpyHtoDAsync(a, ha, sizeof ha, s));
  CK(cu.MemcpyHtoDAsync(b, hb, sizeof hb, s));
  unsigned n = N;
  void *add_params[] = {&a, &b, &c, &n};
  CK(launch(f_add, (N + 255) / 256, 256, s, add_params));
  CK(cu.MemcpyDtoHAsync(out, c, sizeof out, s));
  CK(cu.StreamSynchronize(s));
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], (float)(3 * i), "vec_add[%d]", i);

  float alpha = 0.5f;
  void *axpy_params[] = {&alpha, &a, &c, &n}; /* c = 0.5 a + c */
  CK(launch(f_axpy, (N + 127) / 128, 128, s, axpy_params));
  CK(cu.MemcpyDtoHAsync(out, c, sizeof out, s));
  CK(cu.StreamSynchronize(s));
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], 3.5f * (float)i, "axpy[%d]", i);

  CK(fill(f_fill, c, -1.25f, N - 1, s)); /* n guards the last element */
  CK(cu.MemcpyDtoHAsync(out, c, sizeof out, s));
  CK(cu.StreamSynchronize(s));
  for (int i = 0; i < N - 1; i++) cr_assert_eq(out[i], -1.25f);
  cr_assert_eq(out[N - 1], 3.5f * (N - 1));
  CK(launch(f_noop, 65535, 1024, s, NULL));
  CK(cu.StreamSynchronize(s));
  cr_assert_eq(counter("launches"), 4);
  cr_assert_eq(counter("kernels_run"), 4);

  /* launch validation */
  EXPECT(cu.LaunchKernel(f_noop, 0, 1, 1, 1, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.LaunchKernel(f_noop, 1, 1, 1, 0, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.LaunchKernel(f_noop, 1, 1, 1, 1025, 1, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.LaunchKernel(f_noop, 1, 1, 1, 32, 33, 1, 0, s, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
  EXPECT(cu.LaunchKernel(f_noop, 1, 1, 1, 32, 1, 1, 48 * 1024 + 1, s, NULL, NULL),
         CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
  CK(cu.LaunchKernel(f_noop, 1, 1, 1, 32, 32, 1, 48 * 1024, s, NULL, NULL));
  void *extra[] = {CU_LAUNCH_PARAM_END};
  EXPECT(cu.LaunchKernel(f_noop, 1, 1, 1, 1, 1, 1, 0, s, NULL, extra), CUDA_ERROR_INVALID_VALUE);
  EXPECT(launch(f_add, 1, 1, s, NULL), CUDA_ERROR_INVALID_VALUE); /* parameters missing */
  EXPECT(launch((CUfunction)&n, 1, 1, s, NULL), CUDA_ERROR_INVALID_HANDLE);
  EXPECT(launch(f_noop, 1, 1, (CUstream)&n, NULL), CUDA_ERROR_INVALID_HANDLE);
  CK(cu.StreamSynchronize(s));
  cr_assert_eq(counter("sticky"), 0);

  CK(cu.StreamDestroy(s));
  CK(cu.MemFree(a));
  CK(cu.MemFree(b));
  CK(cu.MemFree(c));
  CK(cu.ModuleUnload(m));
  finish();
}

Test(fake_driver, out_of_bounds_kernel_is_an_illegal_address) {
  start();
  CUmodule m = load_ptx();
  CUdeviceptr d;
  CK(cu.MemAlloc(&d, 100 * sizeof(float)));
  CK(fill(fn(m, "weft_fill_f32"), d, 1.0f, 101, NULL)); /* one element too many */
  EXPECT(cu.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  finish();
}

/* ---- streams, events, ordering ------------------------------------------------------------ */

Test(fake_driver, queries_are_not_ready_while_work_is_pending) {
  start();
  CUmodule m = load_ptx();
  CUfunction f_spin = fn(m, "weft_spin_us");
  CUstream s;
  CUevent e, never;
  CK(cu.StreamCreate(&s, 0));
  CK(cu.EventCreate(&e, 0));
  CK(cu.EventCreate(&never, CU_EVENT_DISABLE_TIMING));
  CK(cu.EventQuery(never)); /* never recorded: complete */
  CK(cu.StreamQuery(s));
  CK(spin(f_spin, 300000, s));
  CK(cu.EventRecord(e, s));
  EXPECT(cu.StreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT(cu.EventQuery(e), CUDA_ERROR_NOT_READY);
  CK(cu.EventSynchronize(e));
  CK(cu.EventQuery(e));
  CK(cu.StreamQuery(s));
  CK(cu.StreamDestroy(s));
  EXPECT(cu.StreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  CK(cu.EventDestroy(e));
  CK(cu.EventDestroy(never));
  EXPECT(cu.EventQuery(e), CUDA_ERROR_INVALID_HANDLE);
  CK(cu.ModuleUnload(m));
  finish();
}

Test(fake_driver, elapsed_time) {
  start();
  CUmodule m = load_ptx();
  CUstream s;
  CUevent a, b, untimed;
  CK(cu.StreamCreate(&s, 0));
  CK(cu.EventCreate(&a, 0));
  CK(cu.EventCreate(&b, 0));
  CK(cu.EventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  float ms;
  EXPECT(cu.EventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE); /* not recorded */
  CK(cu.EventRecord(a, s));
  CK(spin(fn(m, "weft_spin_us"), 20000, s));
  CK(cu.EventRecord(b, s));
  CK(cu.EventRecord(untimed, s));
  CK(cu.StreamSynchronize(s));
  CK(cu.EventElapsedTime(&ms, a, b));
  cr_assert_geq(ms, 15.0f);
  EXPECT(cu.EventElapsedTime(&ms, a, untimed), CUDA_ERROR_INVALID_HANDLE);
  CK(cu.EventDestroy(a));
  CK(cu.EventDestroy(b));
  CK(cu.EventDestroy(untimed));
  CK(cu.StreamDestroy(s));
  CK(cu.ModuleUnload(m));
  finish();
}

Test(fake_driver, cross_stream_event_wait_orders_work) {
  start();
  CUmodule m = load_ptx();
  CUfunction f_fill = fn(m, "weft_fill_f32"), f_spin = fn(m, "weft_spin_us"),
             f_axpy = fn(m, "weft_axpy_f32");
  enum { N = 4096 };
  CUstream producer, consumer;
  CUevent ready;
  CK(cu.StreamCreate(&producer, CU_STREAM_NON_BLOCKING));
  CK(cu.StreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
  CK(cu.EventCreate(&ready, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr x, y;
  CK(cu.MemAlloc(&x, N * sizeof(float)));
  CK(cu.MemAlloc(&y, N * sizeof(float)));
  CK(fill(f_fill, x, 0.0f, N, producer));
  CK(fill(f_fill, y, 1.0f, N, consumer));
  CK(cu.CtxSynchronize());

  /* a slow producer: x = 7 after 200 ms; the consumer waits, then y = 2x + y */
  CK(spin(f_spin, 200000, producer));
  CK(fill(f_fill, x, 7.0f, N, producer));
  CK(cu.EventRecord(ready, producer));
  CK(cu.StreamWaitEvent(consumer, ready, 0));
  CK(cu.EventDestroy(ready)); /* the queued record and wait keep it alive */
  float two = 2.0f;
  unsigned n = N;
  void *params[] = {&two, &x, &y, &n};
  CK(launch(f_axpy, N / 256, 256, consumer, params));
  float out[N];
  CK(cu.MemcpyDtoHAsync(out, y, sizeof out, consumer));
  EXPECT(cu.StreamQuery(consumer), CUDA_ERROR_NOT_READY);
  CK(cu.StreamSynchronize(consumer));
  CK(cu.StreamQuery(producer)); /* the consumer could only finish after it */
  for (int i = 0; i < N; i++) cr_assert_eq(out[i], 15.0f, "y[%d] = %f", i, (double)out[i]);
  cr_assert_eq(counter("event_waits"), 1);
  cr_assert_eq(counter("events_live"), 0);

  CK(cu.StreamDestroy(producer));
  CK(cu.StreamDestroy(consumer));
  CK(cu.MemFree(x));
  CK(cu.MemFree(y));
  CK(cu.ModuleUnload(m));
  finish();
}

Test(fake_driver, legacy_stream_waits_for_blocking_streams) {
  start();
  CUmodule m = load_ptx();
  CUstream s;
  CK(cu.StreamCreate(&s, 0)); /* blocking */
  CUdeviceptr x;
  CK(cu.MemAlloc(&x, 256 * sizeof(float)));
  CK(spin(fn(m, "weft_spin_us"), 100000, s));
  CK(fill(fn(m, "weft_fill_f32"), x, 5.0f, 256, s));
  float out[256];
  CK(cu.MemcpyDtoH(out, x, sizeof out)); /* legacy stream: after s's work */
  for (int i = 0; i < 256; i++) cr_assert_eq(out[i], 5.0f);
  CK(cu.StreamDestroy(s));
  CK(cu.MemFree(x));
  CK(cu.ModuleUnload(m));
  finish();
}

struct host_check {
  const float *dev; /* device memory is host memory in the fake */
  float seen;
  atomic_int calls;
};

static void CUDA_CB host_fn(void *arg) {
  struct host_check *h = arg;
  h->seen = h->dev[0];
  atomic_fetch_add(&h->calls, 1);
}

Test(fake_driver, host_function_runs_in_stream_order) {
  start();
  CUmodule m = load_ptx();
  CUstream s;
  CK(cu.StreamCreate(&s, 0));
  CUdeviceptr x;
  CK(cu.MemAlloc(&x, 64 * sizeof(float)));
  struct host_check h = {.dev = (const float *)(uintptr_t)x};
  CK(spin(fn(m, "weft_spin_us"), 100000, s));
  CK(fill(fn(m, "weft_fill_f32"), x, 9.0f, 64, s));
  CK(cu.LaunchHostFunc(s, host_fn, &h));
  cr_assert_eq(atomic_load(&h.calls), 0);
  EXPECT(cu.LaunchHostFunc(s, NULL, &h), CUDA_ERROR_INVALID_VALUE);
  CK(cu.StreamSynchronize(s));
  cr_assert_eq(atomic_load(&h.calls), 1);
  cr_assert_eq(h.seen, 9.0f);
  CK(cu.StreamDestroy(s));
  CK(cu.MemFree(x));
  CK(cu.ModuleUnload(m));
  finish();
}

Test(fake_driver, destroying_a_stream_drains_it) {
  start();
  CUmodule m = load_ptx();
  CUstream s;
  CK(cu.StreamCreate(&s, 0));
  CUdeviceptr x;
  CK(cu.MemAlloc(&x, 64 * sizeof(float)));
  CK(spin(fn(m, "weft_spin_us"), 50000, s));
  CK(fill(fn(m, "weft_fill_f32"), x, 4.0f, 64, s));
  cr_assert_eq(counter("streams_live"), 1);
  CK(cu.StreamDestroy(s));
  cr_assert_eq(counter("streams_live"), 0);
  cr_assert_eq(counter("kernels_run"), 2);
  float out[64];
  CK(cu.MemcpyDtoH(out, x, sizeof out));
  cr_assert_eq(out[63], 4.0f);
  CK(cu.MemFree(x));
  CK(cu.ModuleUnload(m));
  finish();
}

/* ---- capture and graphs ------------------------------------------------------------------ */

Test(fake_driver, capture_and_replay_match_eager_launches) {
  start();
  CUmodule m = load_ptx();
  CUfunction f_add = fn(m, "weft_vec_add_f32"), f_axpy = fn(m, "weft_axpy_f32");
  enum { N = 777 };
  CUstream s;
  CK(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a, b, c;
  CK(cu.MemAlloc(&a, N * sizeof(float)));
  CK(cu.MemAlloc(&b, N * sizeof(float)));
  CK(cu.MemAlloc(&c, N * sizeof(float)));
  float *ha, *hb, *hout;
  CK(cu.MemHostAlloc((void **)&ha, N * sizeof(float), 0));
  CK(cu.MemHostAlloc((void **)&hb, N * sizeof(float), 0));
  CK(cu.MemHostAlloc((void **)&hout, N * sizeof(float), 0));
  unsigned n = N;
  float half = 0.5f;
  void *add_params[] = {&a, &b, &c, &n};
  void *axpy_params[] = {&half, &a, &c, &n};

  /* the work: c = a + b; c += 0.5 a; out = c */
#define WORK()                                                                                     \
  do {                                                                                             \
    CK(cu.MemcpyHtoDAsync(a, ha, N * sizeof(float), s));                                           \
    CK(cu.MemcpyHtoDAsync(b, hb, N * sizeof(float), s));                                           \
    CK(launch(f_add, (N + 63) / 64, 64, s, add_params));                                           \
    CK(launch(f_axpy, (N + 63) / 64, 64, s, axpy_params));                                         \
    CK(cu.MemcpyDtoHAsync(hout, c, N * sizeof(float), s));                                         \
  } while (0)

  for (int i = 0; i < N; i++) ha[i] = (float)i, hb[i] = 1.0f;
  WORK();
  CK(cu.StreamSynchronize(s));
  float eager[N];
  memcpy(eager, hout, sizeof eager);
  for (int i = 0; i < N; i++) cr_assert_eq(eager[i], 1.5f * (float)i + 1.0f);

  CUstreamCaptureStatus st;
  CK(cu.StreamIsCapturing(s, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
  uint64_t launches = counter("launches"), memcpys = counter("memcpys");
  memset(hout, 0, N * sizeof(float));
  CK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_ILLEGAL_STATE);
  CK(cu.StreamIsCapturing(s, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  WORK();
  cuuint64_t id = 0;
  CUgraph g = NULL;
  const CUgraphNode *deps = NULL;
  size_t ndeps = 0;
  CK(cu.StreamGetCaptureInfo(s, &st, &id, &g, &deps, NULL, &ndeps));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  cr_assert_neq(id, 0);
  cr_assert_not_null(g);
  cr_assert_eq(ndeps, 1);
  CUgraphNodeType type;
  CK(cu.GraphNodeGetType(deps[0], &type));
  cr_assert_eq(type, CU_GRAPH_NODE_TYPE_MEMCPY);
  CUgraph graph;
  CK(cu.StreamEndCapture(s, &graph));
  EXPECT(cu.StreamEndCapture(s, &graph), CUDA_ERROR_ILLEGAL_STATE);
  cr_assert_eq(counter("launches"), launches, "nothing ran during the capture");
  cr_assert_eq(counter("memcpys"), memcpys);
  cr_assert_eq(hout[1], 0.0f);

  size_t count = 0;
  CK(cu.GraphGetNodes(graph, NULL, &count));
  cr_assert_eq(count, 5);
  CUgraphNode nodes[8];
  count = 8;
  CK(cu.GraphGetNodes(graph, nodes, &count));
  cr_assert_eq(count, 5);
  static const CUgraphNodeType want[] = {CU_GRAPH_NODE_TYPE_MEMCPY, CU_GRAPH_NODE_TYPE_MEMCPY,
                                         CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_KERNEL,
                                         CU_GRAPH_NODE_TYPE_MEMCPY};
  for (size_t i = 0; i < count; i++) {
    CK(cu.GraphNodeGetType(nodes[i], &type));
    cr_assert_eq(type, want[i], "node %zu", i);
  }
  CUgraphExec exec;
  CK(cu.GraphInstantiateWithFlags(&exec, graph, 0));
  CK(cu.GraphDestroy(graph)); /* the executable graph is independent */

  CK(cu.GraphLaunch(exec, s));
  CK(cu.StreamSynchronize(s));
  cr_assert_arr_eq(hout, eager, sizeof eager, "replay = eager");

  /* inputs refreshed in place: the replay copies them again */
  for (int r = 1; r <= 3; r++) {
    for (int i = 0; i < N; i++) ha[i] = (float)(r * i), hb[i] = (float)r;
    CK(cu.GraphLaunch(exec, s));
    CK(cu.StreamSynchronize(s));
    for (int i = 0; i < N; i++)
      cr_assert_eq(hout[i], 1.5f * (float)(r * i) + (float)r, "replay %d, [%d]", r, i);
  }
  cr_assert_eq(counter("graph_launches"), 4);
  cr_assert_eq(counter("captures"), 1);
  CK(cu.GraphExecDestroy(exec));
  EXPECT(cu.GraphLaunch(exec, s), CUDA_ERROR_INVALID_HANDLE);
  cr_assert_eq(counter("graphs_live"), 0);
  cr_assert_eq(counter("graph_execs_live"), 0);
#undef WORK

  CK(cu.MemFreeHost(ha));
  CK(cu.MemFreeHost(hb));
  CK(cu.MemFreeHost(hout));
  CK(cu.MemFree(a));
  CK(cu.MemFree(b));
  CK(cu.MemFree(c));
  CK(cu.StreamDestroy(s));
  CK(cu.ModuleUnload(m));
  finish();
}

Test(fake_driver, captured_memory_nodes_are_visible_and_events_are_only_dependencies) {
  start();
  CUmodule m = load_ptx();
  CUstream s;
  CUevent e;
  CK(cu.StreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cu.EventCreate(&e, 0));
  CK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CUdeviceptr d;
  CK(cu.MemAllocAsync(&d, 128 * sizeof(float), s));
  CK(fill(fn(m, "weft_fill_f32"), d, 2.0f, 128, s));
  CK(cu.MemsetD8Async(d, 0, 4, s));
  CK(cu.EventRecord(e, s));        /* inside a capture: a dependency, as on a real */
  CK(cu.StreamWaitEvent(s, e, 0)); /* driver, no node */
  CK(cu.MemFreeAsync(d, s));
  CUgraph graph;
  CK(cu.StreamEndCapture(s, &graph));
  CK(cu.EventQuery(e)); /* recorded into the capture, not on the stream */
  size_t count = 8;
  CUgraphNode nodes[8];
  CK(cu.GraphGetNodes(graph, nodes, &count));
  cr_assert_eq(count, 4);
  static const CUgraphNodeType want[] = {CU_GRAPH_NODE_TYPE_MEM_ALLOC, CU_GRAPH_NODE_TYPE_KERNEL,
                                         CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEM_FREE};
  for (size_t i = 0; i < count; i++) {
    CUgraphNodeType type;
    CK(cu.GraphNodeGetType(nodes[i], &type));
    cr_assert_eq(type, want[i], "node %zu", i);
  }
  CUgraphExec exec;
  CK(cu.GraphInstantiateWithFlags(&exec, graph, 0)); /* accepted (weft rejects it itself) */
  CK(cu.GraphExecDestroy(exec));
  cr_assert_eq(counter("live_allocations"), 1, "the graph owns the captured allocation");
  CK(cu.GraphDestroy(graph));
  cr_assert_eq(counter("live_allocations"), 0);
  CK(cu.EventDestroy(e));
  CK(cu.StreamDestroy(s));
  CK(cu.ModuleUnload(m));
  finish();
}

Test(fake_driver, a_capture_forks_into_another_stream_and_joins_back) {
  start();
  CUmodule m = load_ptx();
  CUfunction f = fn(m, "weft_fill_f32"), add = fn(m, "weft_vec_add_f32");
  CUstream a, b, run;
  CUevent fork, join;
  CK(cu.StreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CK(cu.StreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CK(cu.StreamCreate(&run, CU_STREAM_NON_BLOCKING));
  CK(cu.EventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CK(cu.EventCreate(&join, CU_EVENT_DISABLE_TIMING));
  enum { N = 1000 };
  CUdeviceptr x, y, z;
  CK(cu.MemAlloc(&x, N * 4));
  CK(cu.MemAlloc(&y, N * 4));
  CK(cu.MemAlloc(&z, N * 4));
  CK(cu.StreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CK(cu.EventRecord(fork, a));
  CK(cu.StreamWaitEvent(b, fork, 0)); /* b joins a's capture */
  CUstreamCaptureStatus st;
  CK(cu.StreamIsCapturing(b, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_ACTIVE, "the forked stream captures");
  CK(fill(f, x, 1.5f, N, a));
  CK(fill(f, y, 2.0f, N, b));
  CK(cu.EventRecord(join, b));
  CK(cu.StreamWaitEvent(a, join, 0)); /* ... and joins back */
  unsigned n = N;
  void *params[] = {&x, &y, &z, &n};
  CK(launch(add, (N + 127) / 128, 128, a, params));
  CUgraph graph;
  cr_assert_eq(cu.StreamEndCapture(b, &graph), CUDA_ERROR_STREAM_CAPTURE_UNMATCHED,
               "only the origin ends a capture");
  CK(cu.StreamEndCapture(a, &graph));
  CK(cu.StreamIsCapturing(b, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE, "the forked stream left with the origin");
  size_t count = 8;
  CUgraphNode nodes[8];
  CK(cu.GraphGetNodes(graph, nodes, &count));
  cr_assert_eq(count, 3, "the kernels of both streams, no event node");
  cr_assert_eq(counter("kernels_run"), 0, "captured, not run");
  CUgraphExec exec;
  CK(cu.GraphInstantiateWithFlags(&exec, graph, 0));
  CK(cu.GraphLaunch(exec, run));
  CK(cu.StreamSynchronize(run));
  float got[N];
  CK(cu.MemcpyDtoH(got, z, sizeof(got)));
  for (int i = 0; i < N; i++) cr_assert_eq(got[i], 3.5f, "element %d", i);
  CK(cu.GraphExecDestroy(exec));
  CK(cu.GraphDestroy(graph));
  CK(cu.MemFree(x));
  CK(cu.MemFree(y));
  CK(cu.MemFree(z));
  CK(cu.EventDestroy(fork));
  CK(cu.EventDestroy(join));
  CK(cu.StreamDestroy(a));
  CK(cu.StreamDestroy(b));
  CK(cu.StreamDestroy(run));
  CK(cu.ModuleUnload(m));
  finish();
}

Test(fake_driver, a_fork_never_joined_back_fails_the_capture) {
  start();
  CUmodule m = load_ptx();
  CUstream a, b;
  CUevent fork;
  CK(cu.StreamCreate(&a, CU_STREAM_NON_BLOCKING));
  CK(cu.StreamCreate(&b, CU_STREAM_NON_BLOCKING));
  CK(cu.EventCreate(&fork, CU_EVENT_DISABLE_TIMING));
  CUdeviceptr x;
  CK(cu.MemAlloc(&x, 64 * 4));
  CK(cu.StreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CK(cu.EventRecord(fork, a));
  CK(cu.StreamWaitEvent(b, fork, 0));
  CK(fill(fn(m, "weft_fill_f32"), x, 1.0f, 64, b)); /* work on b that a never waits for */
  CUgraph graph = (CUgraph)1;
  cr_assert_eq(cu.StreamEndCapture(a, &graph), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
  cr_assert_null(graph);
  CUstreamCaptureStatus st;
  CK(cu.StreamIsCapturing(b, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
  CK(fill(fn(m, "weft_fill_f32"), x, 1.0f, 64, b)); /* b runs eagerly again */
  CK(cu.StreamSynchronize(b));
  cr_assert_eq(counter("graphs_live"), 0);
  CK(cu.MemFree(x));
  CK(cu.EventDestroy(fork));
  CK(cu.StreamDestroy(a));
  CK(cu.StreamDestroy(b));
  CK(cu.ModuleUnload(m));
  finish();
}

static void check_invalidated(CUstream s, CUfunction noop) {
  CUstreamCaptureStatus st;
  CK(cu.StreamIsCapturing(s, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  EXPECT(launch(noop, 1, 1, s, NULL), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  CUgraph g = (CUgraph)&st;
  EXPECT(cu.StreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  cr_assert_null(g);
  CK(cu.StreamIsCapturing(s, &st));
  cr_assert_eq(st, CU_STREAM_CAPTURE_STATUS_NONE);
}

Test(fake_driver, synchronous_calls_invalidate_a_capture) {
  start();
  CUmodule m = load_ptx();
  CUfunction noop = fn(m, "weft_noop");
  CUstream s;
  CK(cu.StreamCreate(&s, 0));
  CUdeviceptr d;
  CK(cu.MemAlloc(&d, 256));
  char h[16] = {0};

  CK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(launch(noop, 1, 1, s, NULL));
  EXPECT(cu.StreamSynchronize(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  check_invalidated(s, noop);

  CK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT(cu.MemcpyHtoD(d, h, sizeof h), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  check_invalidated(s, noop);

  CK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  EXPECT(cu.CtxSynchronize(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  check_invalidated(s, noop);

  CK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT(cu.StreamQuery(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  check_invalidated(s, noop);

  CUdeviceptr x;
  CK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  EXPECT(cu.MemAlloc(&x, 256), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  check_invalidated(s, noop);

  /* relaxed mode allows a synchronous allocation, but the legacy stream may
   * not depend on a capturing blocking stream */
  CK(cu.StreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CK(cu.MemAlloc(&x, 256));
  CK(cu.MemFree(x));
  EXPECT(launch(noop, 1, 1, NULL, NULL), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT);
  check_invalidated(s, noop);

  /* the legacy stream cannot capture */
  EXPECT(cu.StreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL),
         CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  cr_assert_eq(counter("graphs_live"), 0);
  CK(cu.MemFree(d));
  CK(cu.StreamDestroy(s));
  CK(cu.ModuleUnload(m));
  finish();
}

/* ---- error injection, sticky faults, reset ------------------------------------------------ */

Test(fake_driver, injected_errors_fire_once) {
  start();
  CUdeviceptr d;
  fail_next("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY, 0);
  EXPECT(cu.MemAlloc(&d, 256), CUDA_ERROR_OUT_OF_MEMORY);
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemFree(d));

  fail_next("cuMemAlloc_v2", CUDA_ERROR_UNKNOWN, 2); /* the third call */
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemFree(d));
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemFree(d));
  EXPECT(cu.MemAlloc(&d, 256), CUDA_ERROR_UNKNOWN);
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemFree(d));

  CUstream s;
  fail_next("cuStreamCreate", CUDA_ERROR_OUT_OF_MEMORY, 0);
  fail_next("cuStreamCreate", CUDA_ERROR_INVALID_VALUE, 0);
  EXPECT(cu.StreamCreate(&s, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT(cu.StreamCreate(&s, 0), CUDA_ERROR_INVALID_VALUE);
  CK(cu.StreamCreate(&s, 0));
  fail_next("cuStreamSynchronize", CUDA_ERROR_LAUNCH_FAILED, 0);
  EXPECT(cu.StreamSynchronize(s), CUDA_ERROR_LAUNCH_FAILED);
  CK(cu.StreamSynchronize(s));
  fail_next("cuInit", CUDA_ERROR_NO_DEVICE, 0);
  EXPECT(cu.Init(0), CUDA_ERROR_NO_DEVICE);
  CK(cu.Init(0));
  cr_assert_eq(counter("injected_failures"), 6);
  cr_assert_eq(counter("sticky"), 0, "injected errors are not sticky");
  CK(cu.StreamDestroy(s));

  fail_next("cuLaunchKernel", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 0);
  reset(); /* clears pending injections */
  start();
  CUmodule m = load_ptx();
  CK(launch(fn(m, "weft_noop"), 1, 1, NULL, NULL));
  finish();
}

Test(fake_driver, fault_kernel_is_sticky_and_reported_at_the_next_sync) {
  start();
  CUmodule m = load_ptx();
  CUfunction f_fault = fn(m, "weft_fault"), f_noop = fn(m, "weft_noop"),
             f_spin = fn(m, "weft_spin_us");
  CUstream s, t;
  CUevent e;
  CK(cu.StreamCreate(&s, 0));
  CK(cu.StreamCreate(&t, CU_STREAM_NON_BLOCKING));
  CK(cu.EventCreate(&e, 0));
  CUdeviceptr d;
  CK(cu.MemAlloc(&d, 256));
  CK(spin(f_spin, 100000, s));
  CK(launch(f_fault, 1, 1, s, NULL)); /* asynchronous: the launch itself succeeds */
  CK(launch(f_noop, 1, 1, s, NULL));  /* queued behind it: never runs */
  EXPECT(cu.StreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT(cu.StreamSynchronize(s), CUDA_ERROR_ILLEGAL_ADDRESS);
  cr_assert_eq(counter("sticky"), CUDA_ERROR_ILLEGAL_ADDRESS);
  cr_assert_eq(counter("kernels_run"), 2, "the kernel after the fault did not run");

  /* from now on, every call touching the context */
  CUdeviceptr x;
  char h[4];
  EXPECT(cu.StreamSynchronize(t), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.StreamQuery(t), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.CtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.MemAlloc(&x, 256), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.MemcpyHtoD(d, h, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.MemcpyDtoHAsync(h, d, 4, t), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(launch(f_noop, 1, 1, t, NULL), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.EventRecord(e, t), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.EventQuery(e), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.EventSynchronize(e), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.StreamCreate(&s, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.ModuleLoadData(&m, weft_test_kernels_ptx), CUDA_ERROR_ILLEGAL_ADDRESS);
  /* destroying still releases, and reports the error */
  EXPECT(cu.MemFree(d), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.EventDestroy(e), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT(cu.StreamDestroy(t), CUDA_ERROR_ILLEGAL_ADDRESS);
  cr_assert_eq(counter("live_allocations"), 0);
  cr_assert_eq(counter("events_live"), 0);
  cr_assert_eq(counter("streams_live"), 1);
  /* context-free calls still work */
  const char *name;
  CK(cu.GetErrorName(CUDA_ERROR_ILLEGAL_ADDRESS, &name));
  int v;
  CK(cu.DriverGetVersion(&v));

  /* reset: usable again */
  reset();
  start();
  m = load_ptx();
  CK(cu.StreamCreate(&s, 0));
  CK(launch(fn(m, "weft_noop"), 1, 1, s, NULL));
  CK(cu.StreamSynchronize(s));
  cr_assert_eq(counter("sticky"), 0);
  finish();
}

Test(fake_driver, fault_api_makes_the_context_sticky_now) {
  start();
  CUstream s;
  CK(cu.StreamCreate(&s, 0));
  fault(CUDA_ERROR_LAUNCH_FAILED);
  CUdeviceptr d;
  EXPECT(cu.MemAlloc(&d, 256), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT(cu.StreamQuery(s), CUDA_ERROR_LAUNCH_FAILED);
  EXPECT(cu.CtxSynchronize(), CUDA_ERROR_LAUNCH_FAILED);
  fault(CUDA_ERROR_ILLEGAL_ADDRESS); /* the first sticky error stays */
  EXPECT(cu.StreamSynchronize(s), CUDA_ERROR_LAUNCH_FAILED);
  finish();
}

Test(fake_driver, reset_frees_everything) {
  start();
  CUmodule m = load_ptx();
  CUfunction f_spin = fn(m, "weft_spin_us");
  CUstream s[3];
  CUevent e[3];
  for (int i = 0; i < 3; i++) {
    CK(cu.StreamCreate(&s[i], 0));
    CK(cu.EventCreate(&e[i], 0));
  }
  CK(spin(f_spin, 100000, s[0]));
  CK(cu.EventRecord(e[0], s[0]));
  CK(cu.StreamWaitEvent(s[1], e[0], 0));
  CK(spin(f_spin, 100000, s[1]));
  CUdeviceptr d;
  void *h;
  CK(cu.MemAlloc(&d, 4096));
  CK(cu.MemAllocAsync(&d, 4096, s[2]));
  CK(cu.MemHostAlloc(&h, 4096, 0));
  CK(cu.StreamBeginCapture(s[2], CU_STREAM_CAPTURE_MODE_GLOBAL));
  CK(cu.MemAllocAsync(&d, 4096, s[2]));
  CK(launch(fn(m, "weft_noop"), 1, 1, s[2], NULL));
  CUgraph g;
  CUgraphExec x;
  CK(cu.StreamEndCapture(s[2], &g));
  CK(cu.GraphInstantiateWithFlags(&x, g, 0));
  CK(cu.StreamBeginCapture(s[2], CU_STREAM_CAPTURE_MODE_GLOBAL)); /* left capturing */
  fail_next("cuMemAlloc", CUDA_ERROR_UNKNOWN, 5);
  cr_assert_eq(counter("streams_live"), 3);
  cr_assert_eq(counter("live_allocations"), 3);

  reset();
  static const char *const zero[] = {
      "streams_live", "events_live",      "modules_live",     "graphs_live", "graph_execs_live",
      "live_bytes",   "live_allocations", "host_allocs_live", "ctx_refs",    "launches",
      "sticky"};
  for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++)
    cr_assert_eq(counter(zero[i]), 0, "%s", zero[i]);
  cr_assert_eq(counter("no_such_counter"), UINT64_MAX);
  int n;
  EXPECT(cu.DeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED); /* cuInit forgotten */
  start();
  CK(cu.MemAlloc(&d, 256)); /* the injection is gone */
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemAlloc(&d, 256));
  CK(cu.MemAlloc(&d, 256));
  finish();
}

Test(fake_driver, last_context_release_destroys_what_is_left) {
  start();
  CUstream s;
  CUevent e;
  CUdeviceptr d;
  CK(cu.StreamCreate(&s, 0));
  CK(cu.EventCreate(&e, 0));
  CK(cu.MemAlloc(&d, 256));
  CUcontext again;
  CK(cu.DevicePrimaryCtxRetain(&again, 0));
  cr_assert_eq(again, ctx);
  CK(cu.DevicePrimaryCtxRelease(0));
  cr_assert_eq(counter("streams_live"), 1);
  CK(cu.DevicePrimaryCtxRelease(0));
  cr_assert_eq(counter("leaked_at_ctx_release"), 3);
  cr_assert_eq(counter("streams_live"), 0);
  cr_assert_eq(counter("live_allocations"), 0);
  EXPECT(cu.MemAlloc(&d, 256), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT(cu.DevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
  CK(cu.DevicePrimaryCtxRetain(&again, 0));
  CK(cu.MemAlloc(&d, 256));
  EXPECT(cu.StreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  finish();
}

#endif
