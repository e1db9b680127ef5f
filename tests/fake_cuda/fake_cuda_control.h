/* Control API of the fake CUDA driver (tests/fake_cuda, libcuda.so.1 in the
 * build tree). Tests load the library at run time and resolve these with
 * dlsym(handle, "fake_cuda_reset") etc.; the typedefs below are for that.
 * Plain C, default visibility, never linked directly. */
#ifndef FAKE_CUDA_CONTROL_H
#define FAKE_CUDA_CONTROL_H

#include <stdint.h>

#include <cuda.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The (after_n_calls + 1)-th next call of the driver function fn_base_name
 * ("cuMemAlloc", "cuLaunchKernel", ...; a versioned name such as
 * "cuMemAlloc_v2" means the same) returns r without doing anything, once.
 * Several injections may be pending, also for the same function. */
void fake_cuda_fail_next(const char *fn_base_name, CUresult r, unsigned after_n_calls);

/* Puts the context into a sticky error state now: every later call that
 * touches the context returns `sticky` until fake_cuda_reset(). The emulated
 * kernel weft_fault does the same asynchronously, with
 * CUDA_ERROR_ILLEGAL_ADDRESS, when it runs. */
void fake_cuda_fault(CUresult sticky);

/* Back to a freshly loaded library: drains and destroys every stream, frees
 * every event, module, graph and allocation, clears injections, the sticky
 * error, the counters and the primary context's reference count, and forgets
 * cuInit (the FAKE_CUDA_* environment is read again by the next cuInit).
 * Call it while no other thread is inside the driver. */
void fake_cuda_reset(void);

/* A counter by name (UINT64_MAX for an unknown name): launches, kernels_run,
 * mem_alloc_calls, mem_free_calls, live_allocations, live_bytes, peak_bytes,
 * memcpys, memsets, host_funcs, event_waits, event_records, graph_launches,
 * captures, streams_live, events_live, modules_live, graphs_live,
 * graph_execs_live, host_allocs_live, injected_failures, sticky (the current
 * sticky CUresult, 0 if none), ctx_refs, leaked_at_ctx_release, last_shared_bytes (the
 * sharedMemBytes of the last accepted cuLaunchKernel, captured ones included). */
uint64_t fake_cuda_stat(const char *name);

typedef void (*fake_cuda_fail_next_fn)(const char *, CUresult, unsigned);
typedef void (*fake_cuda_fault_fn)(CUresult);
typedef void (*fake_cuda_reset_fn)(void);
typedef uint64_t (*fake_cuda_stat_fn)(const char *);

#ifdef __cplusplus
}
#endif

#endif
