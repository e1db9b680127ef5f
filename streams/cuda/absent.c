/* Compiled when weft is built without the CUDA headers (WEFT_WITH_CUDA=OFF,
 * or no cuda.h at build time): the CUDA backend's line in the backend table
 * opens to an error that says so. */
#include "streams/backend.h"

weft_status weft_backend_cuda_open(const weft_backend_config *cfg, weft_backend_base **out) {
  (void)cfg;
  *out = NULL;
  return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                         "weft was built without the CUDA loader (WEFT_WITH_CUDA=OFF or no cuda.h "
                         "at build time)");
}
