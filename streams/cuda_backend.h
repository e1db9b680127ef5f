/* The CUDA backend as the rest of weft sees it: no CUDA types here. */
#ifndef WEFT_STREAMS_CUDA_BACKEND_H
#define WEFT_STREAMS_CUDA_BACKEND_H

#include <weft/weft.h>

/* Loads the driver (dlopen of $WEFT_CUDA_DRIVER or libcuda.so.1; libcuda is
 * never linked), initializes it and checks device |ordinal|. Returns an error
 * naming what is missing: no driver, the toolkit stub, no device, a bad
 * ordinal, or a build without the CUDA loader. */
weft_status weft_cuda_probe(int ordinal, char *device_name, size_t cap);

#endif
