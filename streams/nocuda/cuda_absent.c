/* Compiled when weft is built without the CUDA headers (WEFT_WITH_CUDA=OFF,
 * or AUTO without a toolkit): the CUDA backend reports why it is missing. */
#include "streams/cuda_backend.h"

weft_status weft_cuda_probe(int ordinal, char *device_name, size_t cap) {
  (void)ordinal;
  if (device_name && cap) device_name[0] = '\0';
  return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                         "weft was built without the CUDA loader (WEFT_WITH_CUDA=OFF or no cuda.h "
                         "at build time)");
}
