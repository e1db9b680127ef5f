/* Device storage on the CUDA driver (stream-ordered cuMemAllocAsync /
 * cuMemFreeAsync once weft_storage_cuda_use_async succeeds, else cuMemAlloc /
 * cuMemFree) behind the storage vtable of memory/storage.h, and pinned host
 * staging buffers.
 *
 * Like every storage it belongs to one thread (the scheduler's), and that
 * thread must have the device's context current (weft_cuda_context makes it
 * so) for create, alloc, flush, copy and destroy.
 *
 * Handles: weft_storage_handle.ptr holds the CUdeviceptr cast to void *. It
 * is NOT a host address: never dereference it on the host; pass it to
 * kernels (as a CUdeviceptr parameter) and to cuMemcpy*.
 *
 * Errors: a request larger than the device's total memory is BufferTooBig,
 * CUDA_ERROR_OUT_OF_MEMORY is OutOfMemory (both with the size requested);
 * other driver errors map through streams/cuda/errors.h, and a sticky one is
 * recorded on the poison sink given with weft_storage_cuda_set_poison. */
#ifndef WEFT_STREAMS_CUDA_STORAGE_CUDA_H
#define WEFT_STREAMS_CUDA_STORAGE_CUDA_H

#include "streams/cuda/driver.h"
#include "streams/cuda/errors.h"
#include "memory/storage.h"

/* Allocations are aligned (and accounted) to this many bytes. */
#define WEFT_STORAGE_CUDA_ALIGN 256u

/* Device storage for the context current on the calling thread.
 * |*capacity_out| (optional) receives the device's total memory
 * (cuMemGetInfo), the bound past which a request is BufferTooBig. */
weft_status weft_storage_cuda_create(const weft_allocator *alloc, const weft_cuda_driver *d,
                                     uint64_t *capacity_out, weft_storage **out);
/* The stream copies run on (NULL: the legacy stream, the default). */
void weft_storage_cuda_set_stream(weft_storage *s, CUstream stream);
/* Allocates stream-ordered from now on (cuMemAllocAsync / cuMemFreeAsync on
 * the storage's stream, set first), when the driver has them: a free then
 * does not synchronise the whole device as cuMemFree does. False when it
 * cannot (no stream, or an old driver). A driver without memory pools
 * (NOT_SUPPORTED) turns it off at the first allocation. */
bool weft_storage_cuda_use_async(weft_storage *s);
/* Where sticky driver errors are recorded (NULL: nowhere). */
void weft_storage_cuda_set_poison(weft_storage *s, weft_cuda_poison *poison);
/* Failpoint: the |n|th allocation from now (1-based) fails with |kind|
 * without calling the driver; 0 disarms. */
void weft_storage_cuda_fail_at(weft_storage *s, uint64_t n, weft_error_kind kind);
/* Failpoint: allocation call number |n| (absolute, 1-based since creation)
 * fails with |kind|. At most 16 are kept; false when full. |n| == 0 clears
 * every one set this way. */
bool weft_storage_cuda_fail_call(weft_storage *s, uint64_t n, weft_error_kind kind);
/* Caps the bytes the storage may hand out below the device's total (0: no
 * cap): a single request above the cap is BufferTooBig. */
void weft_storage_cuda_cap(weft_storage *s, uint64_t capacity);
/* Deallocations queued for the next flush. */
uint64_t weft_storage_cuda_pending(const weft_storage *s);

/* dealloc only queues the pointer; flush frees the queue, each allocation
 * the way it was made: cuMemFreeAsync on the storage's stream, then one
 * synchronisation of that stream, or cuMemFree, which waits for the device's
 * queued work (so flush after the work that used the memory has been
 * submitted, not in the middle of a capture).
 * bytes_allocated counts queued bytes until they are freed. copy runs
 * cuMemcpyDtoDAsync on the storage's stream and synchronises that stream. */

/* Pinned (page-locked, portable) host memory for staging copies:
 * cuMemHostAlloc / cuMemFreeHost. OutOfMemory with the size when the driver
 * has none left. Needs a current context. */
weft_status weft_cuda_pinned_alloc(const weft_cuda_driver *d, size_t size, void **out);
weft_status weft_cuda_pinned_free(const weft_cuda_driver *d, void *p);

#endif
