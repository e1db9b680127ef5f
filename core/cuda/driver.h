/* The CUDA driver loaded at run time: one table of entry points resolved with
 * cuGetProcAddress_v2 by base name at the ABI version of the PFN typedef each
 * is called through, falling back to dlsym of the exported versioned name
 * (cuMemAlloc_v2, cuStreamDestroy_v2, ...). libcuda is never linked.
 *
 * The table is read-only once loaded: any thread may call through it. The
 * ABI versions are pinned here, never CUDA_VERSION: asking for the newest ABI
 * would hand back e.g. cuCtxSynchronize_v2(CUcontext) (13000) for a pointer
 * typed as cuCtxSynchronize(void) (2000). */
#ifndef WEFT_CORE_CUDA_DRIVER_H
#define WEFT_CORE_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include <weft/weft.h>

typedef struct weft_cuda_driver {
  void *lib;
  char path[256];
  /* How the entry points were found: through cuGetProcAddress_v2 or dlsym. */
  unsigned resolved_gpa, resolved_dlsym;
  /* initialisation and devices */
  PFN_cuInit_v2000 cuInit;
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount;
  PFN_cuDeviceGet_v2000 cuDeviceGet;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName;
  PFN_cuDeviceTotalMem_v3020 cuDeviceTotalMem;
  PFN_cuDeviceGetAttribute_v2000 cuDeviceGetAttribute;
  /* the primary context */
  PFN_cuDevicePrimaryCtxRetain_v7000 cuDevicePrimaryCtxRetain;
  PFN_cuDevicePrimaryCtxRelease_v11000 cuDevicePrimaryCtxRelease;
  PFN_cuCtxSetCurrent_v4000 cuCtxSetCurrent;
  PFN_cuCtxSynchronize_v2000 cuCtxSynchronize;
  /* errors */
  PFN_cuGetErrorName_v6000 cuGetErrorName;
  PFN_cuGetErrorString_v6000 cuGetErrorString;
  /* streams and events */
  PFN_cuStreamCreate_v2000 cuStreamCreate;
  PFN_cuStreamDestroy_v4000 cuStreamDestroy;
  PFN_cuStreamSynchronize_v2000 cuStreamSynchronize;
  PFN_cuStreamQuery_v2000 cuStreamQuery;
  PFN_cuStreamWaitEvent_v3020 cuStreamWaitEvent;
  PFN_cuEventCreate_v2000 cuEventCreate;
  PFN_cuEventDestroy_v4000 cuEventDestroy;
  PFN_cuEventRecord_v2000 cuEventRecord;
  PFN_cuEventQuery_v2000 cuEventQuery;
  PFN_cuEventSynchronize_v2000 cuEventSynchronize;
  /* memory */
  PFN_cuMemAlloc_v3020 cuMemAlloc;
  PFN_cuMemFree_v3020 cuMemFree;
  PFN_cuMemGetInfo_v3020 cuMemGetInfo;
  PFN_cuMemcpyHtoDAsync_v3020 cuMemcpyHtoDAsync;
  PFN_cuMemcpyDtoHAsync_v3020 cuMemcpyDtoHAsync;
  PFN_cuMemcpyDtoDAsync_v3020 cuMemcpyDtoDAsync;
  PFN_cuMemHostAlloc_v2020 cuMemHostAlloc;
  PFN_cuMemFreeHost_v2000 cuMemFreeHost;
  /* modules and launches */
  PFN_cuModuleLoadData_v2000 cuModuleLoadData;
  PFN_cuModuleUnload_v2000 cuModuleUnload;
  PFN_cuModuleGetFunction_v2000 cuModuleGetFunction;
  PFN_cuLaunchKernel_v4000 cuLaunchKernel;
  PFN_cuLaunchHostFunc_v10000 cuLaunchHostFunc;
  /* capture and graphs */
  PFN_cuStreamBeginCapture_v10010 cuStreamBeginCapture;
  PFN_cuStreamEndCapture_v10000 cuStreamEndCapture;
  PFN_cuGraphGetNodes_v10000 cuGraphGetNodes;
  PFN_cuGraphNodeGetType_v10000 cuGraphNodeGetType;
  PFN_cuGraphInstantiateWithFlags_v11040 cuGraphInstantiateWithFlags;
  PFN_cuGraphLaunch_v10000 cuGraphLaunch;
  PFN_cuGraphExecDestroy_v10000 cuGraphExecDestroy;
  PFN_cuGraphDestroy_v10000 cuGraphDestroy;
  /* optional (NULL when the driver lacks them; callers fall back) */
  PFN_cuMemAllocAsync_v11020 cuMemAllocAsync;
  PFN_cuMemFreeAsync_v11020 cuMemFreeAsync;
} weft_cuda_driver;

/* One row of the resolution table: the base name asked of cuGetProcAddress,
 * the ABI version (that of the PFN typedef of the field), the exported name
 * dlsym falls back to, and where the pointer lives in weft_cuda_driver. */
typedef struct weft_cuda_driver_symbol {
  const char *name;
  int version;
  const char *exported;
  size_t offset;
  bool optional;
} weft_cuda_driver_symbol;

/* The resolution table (|*count| rows). */
const weft_cuda_driver_symbol *weft_cuda_driver_symbols(size_t *count);

/* Flags of weft_cuda_driver_open. */
enum {
  /* Ignore cuGetProcAddress_v2 and resolve everything with dlsym (tests). */
  WEFT_CUDA_LOAD_DLSYM_ONLY = 1u << 0,
};

/* Opens the driver at |path| (NULL: $WEFT_CUDA_DRIVER, else libcuda.so.1;
 * never libcuda.so, the development symlink or the toolkit stub) and
 * resolves every entry point. UnsupportedIoOperation naming the path when
 * the library cannot be opened or lacks a required entry point. Does not
 * call cuInit. On failure |d| is left unloaded. */
weft_status weft_cuda_driver_open(weft_cuda_driver *d, const char *path, unsigned flags);
/* weft_cuda_driver_open(d, NULL, 0). */
weft_status weft_cuda_driver_load(weft_cuda_driver *d);
/* dlcloses the library; NULL or an unloaded driver is a no-op. */
void weft_cuda_driver_unload(weft_cuda_driver *d);
/* "NAME (code): description" of a CUresult, through the driver when it can
 * (the toolkit stub names nothing: the name then comes from weft's table). */
void weft_cuda_describe(const weft_cuda_driver *d, CUresult r, char *buf, size_t cap);

#endif
