/* CUDA streams for the device to drive: a context (the primary context of
 * one device, retained), streams with pooled events and an in-order
 * completion cursor, kernel launches, modules and stream capture into
 * graphs. No scheduler knowledge here.
 *
 * Threads: the context may be used from any thread: every call that needs it
 * makes it current on the calling thread first (cuCtxSetCurrent, cached per
 * thread). A stream, its events and its modules/graphs are driven by one
 * thread at a time (the scheduler's); the event pool and the completion
 * cursor are safe against the driver's callback thread and against
 * weft_cuda_event_release from another thread.
 *
 * Errors map through streams/cuda/errors.h. Every call that gets a sticky
 * CUresult (ILLEGAL_ADDRESS, LAUNCH_FAILED, ...) records it on the context:
 * weft_cuda_context_poisoned answers the first one, and the device poisons
 * itself with it. */
#ifndef WEFT_STREAMS_CUDA_STREAM_CUDA_H
#define WEFT_STREAMS_CUDA_STREAM_CUDA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "streams/cuda/driver.h"
#include "streams/cuda/errors.h"

/* ---- context ------------------------------------------------------------------------------ */

typedef struct weft_cuda_context weft_cuda_context;

/* cuInit, then retains device |ordinal|'s primary context and makes it
 * current on the calling thread. UnsupportedIoOperation when the driver
 * cannot initialise (the toolkit stub, no device, ...), InvalidArgument for
 * an ordinal that does not exist. |alloc| and |d| must outlive the context. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_context_create(const weft_allocator *alloc,
                                                          const weft_cuda_driver *d, int ordinal,
                                                          weft_cuda_context **out);
/* Releases the primary context. Destroy every stream, module, graph and
 * storage of the context first. NULL is a no-op. */
void weft_cuda_context_destroy(weft_cuda_context *c);
/* Makes the context current on the calling thread (a no-op when weft already
 * did so on this thread). */
WEFT_MUST_USE_RESULT weft_status weft_cuda_context_make_current(weft_cuda_context *c);
/* cuCtxSynchronize: waits for all the context's work. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_context_sync(weft_cuda_context *c);
/* A clone of the first sticky error any call on this context got, or NULL. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_context_poisoned(weft_cuda_context *c);
/* Whether some call on this context got a sticky error (no allocation). */
bool weft_cuda_context_is_poisoned(const weft_cuda_context *c);
/* The context's poison sink, for storage (weft_storage_cuda_set_poison). */
weft_cuda_poison *weft_cuda_context_poison(weft_cuda_context *c);
const weft_cuda_driver *weft_cuda_context_driver(const weft_cuda_context *c);
CUdevice weft_cuda_context_device(const weft_cuda_context *c);

/* ---- streams and events ------------------------------------------------------------------- */

typedef struct weft_cuda_stream weft_cuda_stream;
/* A pooled event, recorded at a stream position; owned by whoever recorded
 * it until weft_cuda_event_release. */
typedef struct weft_cuda_event weft_cuda_event;

/* A non-blocking stream (CU_STREAM_NON_BLOCKING: no implicit ordering with
 * the legacy stream). */
WEFT_MUST_USE_RESULT weft_status weft_cuda_stream_create(weft_cuda_context *c,
                                                         weft_cuda_stream **out);
/* Synchronises the stream (every host function has run), destroys it and
 * its events. Release or forget every event first: outstanding tokens
 * dangle afterwards. NULL is a no-op. */
void weft_cuda_stream_destroy(weft_cuda_stream *s);
CUstream weft_cuda_stream_handle(const weft_cuda_stream *s);

/* Records a pooled event at the stream's current position. The pool only
 * creates events while every pooled one is held (warm-up); later records
 * create none. InvalidArgument during a capture. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_stream_record(weft_cuda_stream *s,
                                                         weft_cuda_event **out);
/* Makes |consumer| wait (on the device) for the work before |ev|. The wait
 * binds to the record as it is now: the event may be released right after. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_stream_wait(weft_cuda_stream *consumer,
                                                       const weft_cuda_event *ev);
/* Whether the work before |ev| has completed (cuEventQuery; NOT_READY is
 * false, not an error). */
WEFT_MUST_USE_RESULT weft_status weft_cuda_event_done(const weft_cuda_event *ev, bool *done);
/* Blocks the calling thread until the work before |ev| has completed. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_event_sync(const weft_cuda_event *ev);
/* Returns the event to its stream's pool. NULL is a no-op. */
void weft_cuda_event_release(weft_cuda_event *ev);
/* Events this stream's pool has created in all (for tests and stats). */
uint64_t weft_cuda_stream_events_created(const weft_cuda_stream *s);

/* Blocks until the stream's work has completed. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_stream_sync(weft_cuda_stream *s);
/* Whether the stream is idle (cuStreamQuery; NOT_READY is false). */
WEFT_MUST_USE_RESULT weft_status weft_cuda_stream_query(weft_cuda_stream *s, bool *idle);

/* Asynchronous copies on the stream. With pageable host memory the driver
 * stages the bytes (an HtoD returns once they are staged, a DtoH may block);
 * use weft_cuda_pinned_alloc buffers for truly asynchronous ones. The host
 * buffer must stay valid until the stream passes the copy. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_copy_htod(weft_cuda_stream *s, CUdeviceptr dst,
                                                     const void *src, size_t len);
WEFT_MUST_USE_RESULT weft_status weft_cuda_copy_dtoh(weft_cuda_stream *s, void *dst,
                                                     CUdeviceptr src, size_t len);
/* Device-to-device (cuMemcpyDtoDAsync) and a byte fill (cuMemsetD8Async) on
 * the stream; both may be captured. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_copy_dtod(weft_cuda_stream *s, CUdeviceptr dst,
                                                     CUdeviceptr src, size_t len);
WEFT_MUST_USE_RESULT weft_status weft_cuda_memset8(weft_cuda_stream *s, CUdeviceptr dst,
                                                   unsigned char value, size_t len);

/* ---- launches and host functions ---------------------------------------------------------- */

typedef struct weft_cuda_dim3 {
  unsigned x, y, z;
} weft_cuda_dim3;

/* cuLaunchKernel on the stream; |params| as cuLaunchKernel takes them (an
 * array of pointers to each argument, copied at the call). A refused
 * configuration (too many threads or registers, too much shared memory,
 * zero or oversized dimensions: LAUNCH_OUT_OF_RESOURCES / INVALID_VALUE) is
 * LaunchTooManyResources. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_launch(weft_cuda_stream *s, CUfunction f,
                                                  weft_cuda_dim3 grid, weft_cuda_dim3 block,
                                                  unsigned shared_bytes, void **params);
/* Enqueues |fn(arg)| on the stream (cuLaunchHostFunc): it runs on a driver
 * thread once the work before it has completed, in stream order. A host
 * function must not call CUDA (the driver may deadlock or fail with
 * NOT_PERMITTED) and should return quickly: it holds up the stream. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_host_callback(weft_cuda_stream *s, CUhostFn fn,
                                                         void *arg);
/* The completion cursor: enqueues a host function that stores |seq| into
 * the stream's completed counter (release order) once the work before it is
 * done. |seq| must increase from mark to mark. Nodes are pooled (no
 * allocation after warm-up). InvalidArgument during a capture. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_stream_mark(weft_cuda_stream *s, uint64_t seq);
/* Whether a mark was enqueued and has not run yet (the stream's owner). */
bool weft_cuda_stream_mark_pending(const weft_cuda_stream *s);
/* The last |seq| whose mark has run (acquire order); 0 before any. Any
 * thread. */
uint64_t weft_cuda_stream_completed(const weft_cuda_stream *s);

/* Marks also store their |seq| into |cursor| (release) and then call
 * |on_mark(arg)| on the driver's callback thread (no CUDA calls there).
 * Set before the first mark. */
void weft_cuda_stream_set_cursor(weft_cuda_stream *s, _Atomic uint64_t *cursor,
                                 void (*on_mark)(void *), void *arg);

/* ---- modules ------------------------------------------------------------------------------ */

typedef struct weft_cuda_module weft_cuda_module;

/* cuModuleLoadData of a PTX text, cubin (ELF) or fatbin image of |len|
 * bytes. PTX must be NUL-terminated for the driver: when |image| is text
 * without a NUL within |len| bytes, a terminated copy is passed. Errors of
 * the image or the JIT are LaunchCompilation. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_module_load(weft_cuda_context *c, const void *image,
                                                       size_t len, weft_cuda_module **out);
/* The kernel |name| of the module; NotFound naming it when there is none. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_module_function(weft_cuda_module *m, const char *name,
                                                           CUfunction *out);
/* NULL is a no-op. */
void weft_cuda_module_unload(weft_cuda_module *m);

/* ---- capture and graphs ------------------------------------------------------------------- */

typedef struct weft_cuda_graph weft_cuda_graph;

/* Starts capturing the stream (CU_STREAM_CAPTURE_MODE_THREAD_LOCAL:
 * potentially unsafe calls such as cuMemAlloc from the capturing thread
 * invalidate it; other threads' work goes on). Until
 * capture_end, launches, copies and host callbacks on the stream are
 * recorded, not run; record and mark are refused. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_capture_begin(weft_cuda_stream *s);
/* During a capture begun on |origin|: makes |to| wait for the work captured
 * so far on |from| (the origin or a stream it forked into). A |to| not in
 * the capture yet joins it (a fork: its work becomes nodes of the same
 * graph); every forked stream must be joined back into the origin by an
 * edge before capture_end (else CUDA_ERROR_STREAM_CAPTURE_UNJOINED). The
 * edge's event lives until capture_end. A forked stream refuses record and
 * mark like the origin until then. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_capture_edge(weft_cuda_stream *origin,
                                                        weft_cuda_stream *from,
                                                        weft_cuda_stream *to);
/* Ends the capture (the stream leaves capture mode even on error), rejects a
 * graph holding memory nodes (cuMemAllocAsync / cuMemFreeAsync inside the
 * capture: such a graph launches once and fails every relaunch), then
 * instantiates it and destroys the template. Generic errors for an
 * invalidated capture and for memory nodes (saying how many). */
WEFT_MUST_USE_RESULT weft_status weft_cuda_capture_end(weft_cuda_stream *s, weft_cuda_graph **out);
/* Replays the graph on |s| (any stream of the context). The caller keeps
 * every buffer the graph uses alive, and refreshes inputs in place on the
 * same stream between replays. */
WEFT_MUST_USE_RESULT weft_status weft_cuda_graph_launch(weft_cuda_graph *g, weft_cuda_stream *s);
/* Number of nodes the graph was captured with. */
size_t weft_cuda_graph_nodes(const weft_cuda_graph *g);
/* cuGraphExecDestroy (an in-flight replay completes first, in the driver).
 * NULL is a no-op. */
void weft_cuda_graph_destroy(weft_cuda_graph *g);

#endif
