/* weft_cuda_probe over the core loader (core/cuda/driver.h). */
#include "streams/cuda_backend.h"

#include "core/cuda/driver.h"

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
