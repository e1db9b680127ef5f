/* The CUDA driver loaded at run time: one table of entry points resolved with
 * cuGetProcAddress_v2 by base name at the ABI version of the PFN typedef each
 * is called through, falling back to dlsym of the exported versioned name
 * (cuMemAlloc_v2, cuStreamDestroy_v2, ...). libcuda is never linked.
 *
 * The table is read-only once loaded: any thread may call through it. The
 * ABI versions are pinned here, never CUDA_VERSION: asking for the newest ABI
 * would hand back e.g. cuCtxSynchronize_v2(CUcontext) (13000) for a pointer
 * typed as cuCtxSynchronize(void) (2000). */
#ifndef WEFT_STREAMS_CUDA_DRIVER_H
#define WEFT_STREAMS_CUDA_DRIVER_H

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
#define WEFT_CU_SYM(name, version, exported) PFN_##name##_v##version name;
#define WEFT_CU_OPT                          WEFT_CU_SYM /* optional: NULL when the driver lacks it */
#include "streams/cuda/driver_symbols.inc"
#undef WEFT_CU_SYM
#undef WEFT_CU_OPT
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

/* The library weft loads: |path|, else $WEFT_CUDA_DRIVER, else libcuda.so.1
 * (see driver.c for why never libcuda.so). Lane loading keys on it. */
const char *weft_cuda_driver_path(const char *path);
/* Opens the driver at weft_cuda_driver_path(|path|) and resolves every entry point.
 * UnsupportedIoOperation naming the path when the library cannot be opened or lacks a required
 * entry point. Does not call cuInit. On failure |d| is left unloaded. */
weft_status weft_cuda_driver_open(weft_cuda_driver *d, const char *path, unsigned flags);
/* weft_cuda_driver_open(d, NULL, 0). */
weft_status weft_cuda_driver_load(weft_cuda_driver *d);
/* dlcloses the library; NULL or an unloaded driver is a no-op. */
void weft_cuda_driver_unload(weft_cuda_driver *d);

#endif
