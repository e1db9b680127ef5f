/* weft and DLPack: a framework's tensors as weft buffers, and weft buffers
 * as tensors a framework can take, with no copy either way.
 *
 * Built and installed only when weft was configured with <dlpack/dlpack.h>
 * (Debian's libdlpack-dev, DLPack 0.6; CMake: find_package(weft COMPONENTS
 * dlpack), pkg-config: `pkg-config --variable=dlpack weft` says yes).
 * docs/embedding.md shows both directions with PyTorch. */
#ifndef WEFT_DLPACK_H
#define WEFT_DLPACK_H

#include <dlpack/dlpack.h>

#include <weft/weft.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Zero copy: the tensor's bytes become a buffer (device kDLCPU on the host
 * backend, kDLCUDA with the device's ordinal on CUDA; a non-compact tensor is
 * UnsupportedStrides).
 * weft calls t->deleter exactly once, when the buffer is released and its
 * work retired.
 *
 * The buffer starts at data + byte_offset and holds the tensor's bytes:
 * product(shape) * ceil(bits * lanes / 8) (an ndim 0 tensor is one element;
 * NULL strides mean compact, row-major; explicit strides must be those of a
 * compact tensor, a dimension of extent 1 may have any stride). It is made by
 * weft_buffer_import, so it behaves like any imported buffer: ordered,
 * pinned, tainted like the others, never freed or moved by weft. Refused with
 * InvalidArgument: NULL |t| or |out|, a NULL data pointer, ndim < 0 or a NULL
 * shape with ndim > 0, a negative extent, bits or lanes of 0, a size that
 * overflows 64 bits or exceeds WEFT_MAX_BUFFER_SIZE, and a tensor on another
 * device type or ordinal. An empty tensor (an extent of 0) is InvalidArgument
 * too: weft has no buffers of 0 bytes. On every refusal and every failure
 * t->deleter (when not NULL) is called exactly once before the call returns,
 * as DLPack's consumer contract asks: the tensor is weft's from the call on.
 * The deleter runs on weft's scheduler thread, on the thread that closes
 * the device, on the thread of the export deleter that finishes a closed
 * device's teardown, or (refused) on the caller's; it must not call into the
 * device (it may free, decref, signal). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_from_dlpack(weft_device *dev,
                                                                  weft_stream_id stream,
                                                                  DLManagedTensor *t,
                                                                  weft_buffer *out);

/* Exports |buf| from |offset| as a compact tensor of |dtype| and |shape|,
 * after the work submitted before it on |stream| (a tainted range fails as a
 * read would). The export keeps the memory alive until its deleter runs, even
 * past weft_buffer_release.
 *
 * The call blocks, as weft_buffer_read does, until the work that writes the
 * range before it is done; then the range is pinned (no reclaim, cleanup or
 * relocation moves it) and *out is a new DLManagedTensor: data is the
 * buffer's address plus |offset| (a host pointer, or a CUdeviceptr for
 * kDLCUDA), byte_offset 0, strides NULL, shape a copy of |shape| (|ndim|
 * extents; ndim 0 is a scalar of one element). The range is
 * product(shape) * ceil(bits * lanes / 8) bytes and must lie inside the
 * buffer. Writes to the buffer after the export are not ordered against the
 * framework's use of the tensor: order them yourself (weft_sync, events).
 *
 * The tensor and its shape array are weft's allocation; the consumer calls
 * (*out)->deleter(*out) exactly once, from any thread, and that unpins the
 * range and frees them. The deleter works after weft_buffer_release and after
 * weft_device_close too (close leaves exported memory alone and the last
 * deleter frees it); it never calls back into the device's work.
 *
 * Errors: InvalidArgument (NULL device or out, a NULL shape with ndim > 0,
 * ndim < 0 or over 32, a negative or zero extent, bits or lanes of 0, an
 * overflowing size, a range past the buffer, an export on a host kernel's own
 * stream), NotFound (a released, stale or forged handle), the read's
 * Several{Unwritten...} when the range carries a failure, and what the
 * buffer's reservation failed with. *out is NULL on every error. */
WEFT_API WEFT_MUST_USE_RESULT weft_status
weft_buffer_to_dlpack(weft_device *dev, weft_stream_id stream, weft_buffer buf, uint64_t offset,
                      DLDataType dtype, const int64_t *shape, int32_t ndim, DLManagedTensor **out);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_DLPACK_H */
