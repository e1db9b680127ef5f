#include "streams/cuda/loader.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "streams/cuda_backend.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t,
                                CUdriverProcAddressQueryResult *);

/* Resolves |name| at ABI |version| through cuGetProcAddress, else dlsym of
 * |exported| (the versioned symbol the library exports). */
static void *resolve(void *lib, get_proc_fn gpa, const char *name, int version,
                     const char *exported) {
  void *fn = NULL;
  if (gpa) {
    CUdriverProcAddressQueryResult q;
    if (gpa(name, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS &&
        q == CU_GET_PROC_ADDRESS_SUCCESS && fn)
      return fn;
  }
  return dlsym(lib, exported);
}

#define LOAD(field, name, version, exported)                                                       \
  do {                                                                                             \
    void *p_ = resolve(d->lib, gpa, name, version, exported);                                      \
    if (!p_) {                                                                                     \
      missing = name;                                                                              \
      goto unresolved;                                                                             \
    }                                                                                              \
    memcpy(&d->field, &p_, sizeof(p_));                                                            \
  } while (0)

weft_status weft_cuda_driver_load(weft_cuda_driver *d) {
  memset(d, 0, sizeof(*d));
  const char *path = getenv("WEFT_CUDA_DRIVER");
  if (!path || !*path) path = "libcuda.so.1"; /* never libcuda.so: the dev symlink or stub */
  snprintf(d->path, sizeof(d->path), "%s", path);
  d->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!d->lib)
    return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                           "no CUDA driver: dlopen(\"%s\") failed: %s", path, dlerror());
  get_proc_fn gpa = NULL;
  void *g = dlsym(d->lib, "cuGetProcAddress_v2");
  memcpy(&gpa, &g, sizeof(g));
  const char *missing = NULL;
  LOAD(cuInit, "cuInit", 2000, "cuInit");
  LOAD(cuDriverGetVersion, "cuDriverGetVersion", 2020, "cuDriverGetVersion");
  LOAD(cuDeviceGetCount, "cuDeviceGetCount", 2000, "cuDeviceGetCount");
  LOAD(cuDeviceGet, "cuDeviceGet", 2000, "cuDeviceGet");
  LOAD(cuDeviceGetName, "cuDeviceGetName", 2000, "cuDeviceGetName");
  LOAD(cuGetErrorName, "cuGetErrorName", 6000, "cuGetErrorName");
  LOAD(cuGetErrorString, "cuGetErrorString", 6000, "cuGetErrorString");
  return NULL;
unresolved:;
  weft_status st =
      weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                      "CUDA driver %s lacks %s: not a usable libcuda", d->path, missing);
  weft_cuda_driver_unload(d);
  return st;
}

void weft_cuda_driver_unload(weft_cuda_driver *d) {
  if (d->lib) dlclose(d->lib);
  d->lib = NULL;
}

void weft_cuda_describe(const weft_cuda_driver *d, CUresult r, char *buf, size_t cap) {
  const char *name = NULL, *desc = NULL;
  if (d->cuGetErrorName && d->cuGetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
  if (d->cuGetErrorString && d->cuGetErrorString(r, &desc) != CUDA_SUCCESS) desc = NULL;
  if (!name && r == CUDA_ERROR_STUB_LIBRARY) name = "CUDA_ERROR_STUB_LIBRARY";
  if (!name && r == CUDA_ERROR_NO_DEVICE) name = "CUDA_ERROR_NO_DEVICE";
  snprintf(buf, cap, "%s (%d)%s%s", name ? name : "CUresult", (int)r, desc ? ": " : "",
           desc ? desc : "");
}

weft_status weft_cuda_probe(int ordinal, char *device_name, size_t cap) {
  if (device_name && cap) device_name[0] = '\0';
  weft_cuda_driver d;
  weft_status st = weft_cuda_driver_load(&d);
  if (st) return st;
  char why[256];
  CUresult r = d.cuInit(0);
  if (r != CUDA_SUCCESS) {
    weft_cuda_describe(&d, r, why, sizeof(why));
    const char *hint = r == CUDA_ERROR_STUB_LIBRARY
                           ? " - this is the toolkit stub, not a real driver"
                       : r == CUDA_ERROR_NO_DEVICE ? " - no CUDA-capable device"
                                                   : "";
    st = weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                         "CUDA driver %s present but cuInit failed: %s%s", d.path, why, hint);
    weft_cuda_driver_unload(&d);
    return st;
  }
  int count = 0;
  r = d.cuDeviceGetCount(&count);
  if (r != CUDA_SUCCESS || count == 0 || ordinal < 0 || ordinal >= count) {
    st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "CUDA device %d does not exist (%d device%s)",
                         ordinal, count, count == 1 ? "" : "s");
    weft_cuda_driver_unload(&d);
    return st;
  }
  CUdevice dev;
  if (device_name && cap && d.cuDeviceGet(&dev, ordinal) == CUDA_SUCCESS)
    d.cuDeviceGetName(device_name, (int)(cap > 1024 ? 1024 : cap), dev);
  weft_cuda_driver_unload(&d);
  return NULL;
}
