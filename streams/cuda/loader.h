/* The CUDA driver loaded at run time: one table of entry points resolved with
 * cuGetProcAddress at the ABI version of each prototype used (falling back to
 * dlsym of the exported versioned name). libcuda is never linked. */
#ifndef WEFT_STREAMS_CUDA_LOADER_H
#define WEFT_STREAMS_CUDA_LOADER_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include <weft/weft.h>

typedef struct weft_cuda_driver {
  void *lib;
  char path[256];
  PFN_cuInit_v2000 cuInit;
  PFN_cuDriverGetVersion_v2020 cuDriverGetVersion;
  PFN_cuDeviceGetCount_v2000 cuDeviceGetCount;
  PFN_cuDeviceGet_v2000 cuDeviceGet;
  PFN_cuDeviceGetName_v2000 cuDeviceGetName;
  PFN_cuGetErrorName_v6000 cuGetErrorName;
  PFN_cuGetErrorString_v6000 cuGetErrorString;
} weft_cuda_driver;

/* Opens and resolves the driver; on failure names what is missing. */
weft_status weft_cuda_driver_load(weft_cuda_driver *d);
void weft_cuda_driver_unload(weft_cuda_driver *d);
/* "NAME (code): description" of a CUresult, through the driver when it can. */
void weft_cuda_describe(const weft_cuda_driver *d, CUresult r, char *buf, size_t cap);

#endif
