#include "core/cuda/driver.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/cuda/errors.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

/* Base name, ABI version of the field's PFN typedef, exported versioned name. */
#define SYM(field, version, exported)                                                              \
  { #field, version, exported, offsetof(weft_cuda_driver, field), false }
#define OPT(field, version, exported)                                                              \
  { #field, version, exported, offsetof(weft_cuda_driver, field), true }

static const weft_cuda_driver_symbol symbols[] = {
    SYM(cuInit, 2000, "cuInit"),
    SYM(cuDriverGetVersion, 2020, "cuDriverGetVersion"),
    SYM(cuDeviceGetCount, 2000, "cuDeviceGetCount"),
    SYM(cuDeviceGet, 2000, "cuDeviceGet"),
    SYM(cuDeviceGetName, 2000, "cuDeviceGetName"),
    SYM(cuDeviceTotalMem, 3020, "cuDeviceTotalMem_v2"),
    SYM(cuDeviceGetAttribute, 2000, "cuDeviceGetAttribute"),
    SYM(cuDevicePrimaryCtxRetain, 7000, "cuDevicePrimaryCtxRetain"),
    SYM(cuDevicePrimaryCtxRelease, 11000, "cuDevicePrimaryCtxRelease_v2"),
    SYM(cuCtxSetCurrent, 4000, "cuCtxSetCurrent"),
    /* 2000, not 13000: cuCtxSynchronize_v2 takes a CUcontext. */
    SYM(cuCtxSynchronize, 2000, "cuCtxSynchronize"),
    SYM(cuGetErrorName, 6000, "cuGetErrorName"),
    SYM(cuGetErrorString, 6000, "cuGetErrorString"),
    SYM(cuStreamCreate, 2000, "cuStreamCreate"),
    SYM(cuStreamDestroy, 4000, "cuStreamDestroy_v2"),
    SYM(cuStreamSynchronize, 2000, "cuStreamSynchronize"),
    SYM(cuStreamQuery, 2000, "cuStreamQuery"),
    SYM(cuStreamWaitEvent, 3020, "cuStreamWaitEvent"),
    SYM(cuEventCreate, 2000, "cuEventCreate"),
    SYM(cuEventDestroy, 4000, "cuEventDestroy_v2"),
    SYM(cuEventRecord, 2000, "cuEventRecord"),
    SYM(cuEventQuery, 2000, "cuEventQuery"),
    SYM(cuEventSynchronize, 2000, "cuEventSynchronize"),
    SYM(cuMemAlloc, 3020, "cuMemAlloc_v2"),
    SYM(cuMemFree, 3020, "cuMemFree_v2"),
    SYM(cuMemGetInfo, 3020, "cuMemGetInfo_v2"),
    SYM(cuMemcpyHtoDAsync, 3020, "cuMemcpyHtoDAsync_v2"),
    SYM(cuMemcpyDtoHAsync, 3020, "cuMemcpyDtoHAsync_v2"),
    SYM(cuMemcpyDtoDAsync, 3020, "cuMemcpyDtoDAsync_v2"),
    SYM(cuMemHostAlloc, 2020, "cuMemHostAlloc"),
    SYM(cuMemFreeHost, 2000, "cuMemFreeHost"),
    SYM(cuModuleLoadData, 2000, "cuModuleLoadData"),
    SYM(cuModuleUnload, 2000, "cuModuleUnload"),
    SYM(cuModuleGetFunction, 2000, "cuModuleGetFunction"),
    SYM(cuLaunchKernel, 4000, "cuLaunchKernel"),
    SYM(cuLaunchHostFunc, 10000, "cuLaunchHostFunc"),
    SYM(cuStreamBeginCapture, 10010, "cuStreamBeginCapture_v2"),
    SYM(cuStreamEndCapture, 10000, "cuStreamEndCapture"),
    SYM(cuGraphGetNodes, 10000, "cuGraphGetNodes"),
    SYM(cuGraphNodeGetType, 10000, "cuGraphNodeGetType"),
    SYM(cuGraphInstantiateWithFlags, 11040, "cuGraphInstantiateWithFlags"),
    SYM(cuGraphLaunch, 10000, "cuGraphLaunch"),
    SYM(cuGraphExecDestroy, 10000, "cuGraphExecDestroy"),
    SYM(cuGraphDestroy, 10000, "cuGraphDestroy"),
    OPT(cuMemAllocAsync, 11020, "cuMemAllocAsync"),
    OPT(cuMemFreeAsync, 11020, "cuMemFreeAsync"),
};

const weft_cuda_driver_symbol *weft_cuda_driver_symbols(size_t *count) {
  *count = sizeof(symbols) / sizeof(symbols[0]);
  return symbols;
}

/* Resolves one row: cuGetProcAddress_v2 first, else dlsym of the exported name. */
static void *resolve(weft_cuda_driver *d, get_proc_fn gpa, const weft_cuda_driver_symbol *s) {
  void *fn = NULL;
  if (gpa) {
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (gpa(s->name, &fn, s->version, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS &&
        q == CU_GET_PROC_ADDRESS_SUCCESS && fn) {
      d->resolved_gpa++;
      return fn;
    }
  }
  fn = dlsym(d->lib, s->exported);
  if (fn) d->resolved_dlsym++;
  return fn;
}

weft_status weft_cuda_driver_open(weft_cuda_driver *d, const char *path, unsigned flags) {
  memset(d, 0, sizeof(*d));
  if (!path || !*path) path = weft_config_cuda_driver();
  if (!path || !*path) path = "libcuda.so.1"; /* never libcuda.so: the dev symlink or stub */
  snprintf(d->path, sizeof(d->path), "%s", path);
  d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib)
    return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                           "no CUDA driver: dlopen(\"%s\") failed: %s", path, dlerror());
  get_proc_fn gpa = NULL;
  if (!(flags & WEFT_CUDA_LOAD_DLSYM_ONLY)) {
    void *g = dlsym(d->lib, "cuGetProcAddress_v2");
    memcpy(&gpa, &g, sizeof(g));
  }
  for (size_t i = 0; i < sizeof(symbols) / sizeof(symbols[0]); i++) {
    void *p = resolve(d, gpa, &symbols[i]);
    if (!p && !symbols[i].optional) {
      weft_status st =
          weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                          "CUDA driver %s lacks %s (ABI %d, exported as %s): not a usable libcuda",
                          d->path, symbols[i].name, symbols[i].version, symbols[i].exported);
      weft_cuda_driver_unload(d);
      return st;
    }
    memcpy((char *)d + symbols[i].offset, &p, sizeof(p));
  }
  return NULL;
}

weft_status weft_cuda_driver_load(weft_cuda_driver *d) {
  return weft_cuda_driver_open(d, NULL, 0);
}

void weft_cuda_driver_unload(weft_cuda_driver *d) {
  if (!d) return;
  if (d->lib) dlclose(d->lib);
  memset(d, 0, sizeof(*d));
}

void weft_cuda_describe(const weft_cuda_driver *d, CUresult r, char *buf, size_t cap) {
  const char *name = NULL, *desc = NULL;
  if (d && d->cuGetErrorName && d->cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (d && d->cuGetErrorString && d->cuGetErrorString(r, &desc) != CUDA_SUCCESS) desc = NULL;
  if (!name) name = weft_cuda_result_name(r);
  snprintf(buf, cap, "%s (%d)%s%s", name ? name : "CUresult", (int)r, desc ? ": " : "",
           desc ? desc : "");
}
