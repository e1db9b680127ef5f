/* weft: a scheduler-driven multi-stream executor for GPUs and CPUs.
 *
 * This is the only public header. Every call validates its arguments and
 * returns a weft_status: NULL means success, anything else is an error the
 * caller owns and frees with weft_error_free. No call aborts on bad input.
 *
 * Thread-safety: every call on a weft_device may be made from any thread
 * concurrently, except weft_device_close, which must be the last call on
 * that device. Error objects are plain values: one thread at a time. */
#ifndef WEFT_WEFT_H
#define WEFT_WEFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(WEFT_STATIC_DEFINE)
#define WEFT_API
#elif defined(WEFT_BUILDING)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

/* On every call returning a weft_status: ignoring one leaks it and loses the
 * failure. Consume a status with weft_error_free (gcc ignores a (void) cast
 * for this attribute). */
#if defined(__GNUC__) || defined(__clang__)
#define WEFT_MUST_USE_RESULT __attribute__((warn_unused_result))
#else
#define WEFT_MUST_USE_RESULT
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0

/* "MAJOR.MINOR.PATCH" of the library actually linked. */
WEFT_API const char *weft_version(void);

/* ---- status and errors ---------------------------------------------------------- */

typedef struct weft_error *weft_status; /* NULL == OK; else owned by caller */

typedef enum weft_error_kind {
  WEFT_OK = 0,
  /* memory and IO: what storage and the memory manager report */
  WEFT_ERR_BUFFER_TOO_BIG,        /* {size}: can never fit */
  WEFT_ERR_OUT_OF_MEMORY,         /* {size}: not now; reclaim and retry may help */
  WEFT_ERR_PAGE_UPDATE_FORBIDDEN, /* {size}: no room and pages may not be added */
  WEFT_ERR_PAGE_SIZES_EXHAUSTED,  /* {size}: too many page sizes held */
  WEFT_ERR_UNSUPPORTED_STRIDES,
  WEFT_ERR_NOT_FOUND,                /* {reason}: stale, released or forged handle */
  WEFT_ERR_STORAGE_HANDLE_NOT_FOUND, /* {reason} */
  WEFT_ERR_STORAGE_MAPPING_FAILED,   /* {size, source} */
  WEFT_ERR_DEVICE_POISONED,          /* {poison reason, optional source} */
  WEFT_ERR_UNKNOWN,                  /* {description} */
  WEFT_ERR_UNSUPPORTED_IO_OPERATION,
  /* server level */
  WEFT_ERR_INVALID_ARGUMENT, /* API misuse: NULL, bad size/offset, closed device... */
  WEFT_ERR_VALIDATION,
  WEFT_ERR_GENERIC,
  WEFT_ERR_LAUNCH_COMPILATION,
  WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES,
  WEFT_ERR_TORN_DOWN, /* payload-free: a write scope never finished */
  WEFT_ERR_SKIPPED,   /* payload-free: an input carried a failure */
  WEFT_ERR_UNWRITTEN, /* {failure id, claimed, chain, root} */
  WEFT_ERR_SEVERAL,   /* {errors} */
  WEFT_ERR_TIMEOUT,   /* {message}: a bounded wait ran out of time (weft_event_wait) */
} weft_error_kind;

#define WEFT_ERROR_KIND_COUNT ((int)WEFT_ERR_TIMEOUT + 1)

/* Makes an error of |kind| with a printf-formatted message (the reason,
 * description or message of the kind; NULL fmt: none). Captures a backtrace
 * (raw frames; symbolized only when formatted). Never returns NULL for a
 * kind other than WEFT_OK: if memory runs out, a static error of the same
 * kind without message is returned (freeing it is a no-op). WEFT_OK and
 * out-of-range kinds give an InvalidArgument error. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_make(weft_error_kind kind, const char *fmt,
                                                          ...)
    __attribute__((format(printf, 2, 3)));
/* As weft_error_make, with the |size| field of kinds that have one. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_make_sized(weft_error_kind kind, uint64_t size,
                                                                const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Wraps |source| (ownership transfers, may be NULL) as the cause of a new
 * error of |kind|: StorageMappingFailed{size, source}, DevicePoisoned{poison,
 * source}, or any kind with a cause chain. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_wrap(weft_error_kind kind, uint64_t size,
                                                          weft_status source, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Several{errors}: takes ownership of the |n| errors in |errors| (NULL entries
 * are skipped); the array itself stays the caller's. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_several(weft_status *errors, size_t n);
/* Unwritten{failure, claimed, chain, root}: takes ownership of |root|; copies
 * the |chain_len| strings of |chain| (newest hop first). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_unwritten(uint64_t failure_id,
                                                               uint32_t claimed, weft_status root,
                                                               const char *const *chain,
                                                               size_t chain_len);
/* A deep copy (backtrace included). NULL for NULL. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_clone(weft_status st);

WEFT_API weft_error_kind weft_error_kind_of(weft_status st); /* WEFT_OK for NULL */
/* CamelCase names ("BufferTooBig", ..., "Several"; "Ok" for WEFT_OK; "Invalid"
 * for a value outside the enum). */
WEFT_API const char *weft_error_kind_name(weft_error_kind kind);
/* The kind named |name| (exact CamelCase); false if there is none. */
WEFT_API bool weft_error_kind_from_name(const char *name, weft_error_kind *out);
/* One-line description, snprintf rules: writes at most |cap| bytes including
 * the NUL, returns the length the full text needs. NULL st formats "Ok". */
WEFT_API size_t weft_error_format(weft_status st, char *buf, size_t cap);
/* As weft_error_format followed by the symbolized backtrace of |st| and of
 * each error in its cause chain, one frame per line. */
WEFT_API size_t weft_error_format_backtrace(weft_status st, char *buf, size_t cap);
/* The message / reason / description (borrowed; "" when none). */
WEFT_API const char *weft_error_message(weft_status st);
WEFT_API uint64_t weft_error_size(weft_status st);       /* the size field where the kind has one */
WEFT_API size_t weft_error_count(weft_status st);        /* Several: how many; else 0 */
WEFT_API uint64_t weft_error_failure_id(weft_status st); /* Unwritten: the #id */
WEFT_API uint32_t weft_error_claimed(weft_status st);    /* Unwritten: buffers carrying it */
WEFT_API size_t weft_error_chain_length(weft_status st); /* Unwritten: hops, newest first */
/* Borrowed: the cause, Several's item |i|, Unwritten's root (NULL: none). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_source(weft_status st);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_at(weft_status st, size_t i);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_root(weft_status st);
WEFT_API const char *weft_error_chain_at(weft_status st, size_t i);
/* Unwritten: the launch that failed, "kernel 'NAME' (launch N)", or "launch
 * 'LABEL' of kernel 'NAME' (launch N)" for a labelled one (weft_launch_ex)
 * (borrowed); NULL when the failure came from no launch (a failed
 * reservation). */
WEFT_API const char *weft_error_origin(weft_status st);
/* Number of raw frames captured (0 for static fallbacks and parsed errors). */
WEFT_API size_t weft_error_backtrace_depth(weft_status st);
/* true: OutOfMemory, PageSizesExhausted (reclaim may help). */
WEFT_API bool weft_error_may_succeed_after_reclaim(weft_status st);
/* true: DevicePoisoned, found through sources, Unwritten roots and Several. */
WEFT_API bool weft_error_is_device_poisoned(weft_status st);
/* true: LaunchCompilation, LaunchTooManyResources, through Unwritten roots;
 * Several only when non-empty and every element is a refusal. */
WEFT_API bool weft_error_is_refusal(weft_status st);
/* JSON object of the error (backtrace excluded); free with weft_free. NULL st
 * gives "null". NULL when memory runs out, or when the error nests deeper
 * than weft_error_from_json accepts (64 levels of objects and arrays): what
 * it writes always parses back. */
WEFT_API char *weft_error_to_json(weft_status st);
/* Parses what weft_error_to_json wrote. *out receives the error (NULL for
 * "null"); a malformed document returns InvalidArgument and leaves *out NULL. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_error_from_json(const char *json, weft_status *out);
WEFT_API void weft_error_free(weft_status st); /* NULL is a no-op */
WEFT_API void weft_free(void *p);              /* frees strings weft returns */

/* ---- allocator injection ----------------------------------------------------------- */

/* The allocator weft uses for its internal structures and host storage.
 * |alloc| returns memory aligned to |align| (a power of two) or NULL; |free|
 * receives the same size and alignment. Both may be called from any thread. */
typedef struct weft_allocator {
  void *self;
  void *(*alloc)(void *self, size_t size, size_t align);
  void (*free)(void *self, void *ptr, size_t size, size_t align);
} weft_allocator;

/* The default: a private jemalloc arena (never process-wide malloc
 * replacement), or libc where weft was built without jemalloc. */
WEFT_API weft_allocator weft_allocator_default(void);
WEFT_API weft_allocator weft_allocator_libc(void);
/* true when weft_allocator_default is backed by jemalloc. */
WEFT_API bool weft_allocator_default_is_jemalloc(void);

/* A thread-safe counting allocator forwarding to libc: live blocks and bytes,
 * total calls, and an optional failure injection (the Nth call fails). */
typedef struct weft_counting_allocator weft_counting_allocator;
typedef struct weft_alloc_counts {
  uint64_t allocs, frees, live_blocks, live_bytes, failed;
} weft_alloc_counts;
WEFT_API WEFT_MUST_USE_RESULT weft_status
weft_counting_allocator_create(weft_counting_allocator **out);
WEFT_API weft_allocator weft_counting_allocator_get(weft_counting_allocator *ca);
WEFT_API weft_alloc_counts weft_counting_allocator_counts(const weft_counting_allocator *ca);
/* The |n|th allocation from now (1-based) returns NULL; 0 disarms. */
WEFT_API void weft_counting_allocator_fail_at(weft_counting_allocator *ca, uint64_t n);
WEFT_API void weft_counting_allocator_destroy(weft_counting_allocator *ca);

/* ---- device ------------------------------------------------------------------------ */

typedef enum { WEFT_BACKEND_HOST = 0, WEFT_BACKEND_CUDA = 1 } weft_backend;
typedef enum { WEFT_STRATEGY_INTERLEAVE = 0, WEFT_STRATEGY_SEQUENTIAL = 1 } weft_strategy;
/* Who runs the scheduler. THREAD: a dedicated thread takes every command from
 * the queue (a launch returns as soon as it is queued). COMBINING: the
 * submitting thread that finds the scheduler free drains the queue for
 * everyone, so a lone producer schedules its own commands while they are
 * still in its cache; the dedicated thread then only flushes idle streams and
 * retires work nobody else is around to retire. Both are lock-free for
 * producers and linearizable; docs/benchmarks.md compares them. */
typedef enum {
  WEFT_SCHEDULER_DEFAULT = 0, /* THREAD, unless the WEFT_SCHEDULER variable says "combining" */
  WEFT_SCHEDULER_THREAD = 1,
  WEFT_SCHEDULER_COMBINING = 2,
} weft_scheduler_mode;

typedef struct weft_device_options {
  /* Set by weft_device_options_init. Only the sizes the struct has had are
   * accepted, sizes at field boundaries: the end of |failpoints| or of any
   * later field, or sizeof(weft_device_options). Any other size (one ending
   * inside a field) is InvalidArgument. */
  uint32_t struct_size;
  weft_backend backend; /* default HOST */
  int ordinal;          /* CUDA device index */
  uint32_t max_streams; /* stream pool size (default 4, at most 64) */
  uint32_t max_tasks;   /* batch size before a stream is flushed (default 32) */
  weft_strategy strategy;
  uint64_t memory_capacity; /* host backend: bytes the device may hold; 0 = no cap */
  const char *failpoints;   /* optional; same syntax as the WEFT_FAILPOINTS variable */
  /* ---- additions (the struct only grows at the end) ---- */
  const weft_allocator *allocator;         /* NULL: weft_allocator_default() */
  const struct weft_layout *memory_layout; /* NULL: SUBSLICES; copied at open */
  int persistent_memory;                   /* a weft_persistent_policy; default ENABLED */
  /* Back-pressure, per stream: at most this many commands submitted on one
   * stream slot (launches, writes, reads, syncs, creates) and not yet
   * retired; a client past it spins, then parks, until that stream catches
   * up (nothing is dropped). Clients of other streams never wait for it: a
   * kernel that blocks stalls only its own stream's submitters (and streams
   * whose work waits for it through shared buffers). Commands on no stream
   * (release, check, stats, memory, failpoint calls, capture transitions)
   * have one budget of the same size; a replay counts against the first of
   * its capture's streams. The device thus holds at most
   * (max_streams + 1) * max_pending_commands commands. A host kernel
   * submitting to its own device never waits. 0: 16384 (8 MiB of commands
   * per stream: more only evicts the caches the pipeline runs in). */
  uint32_t max_pending_commands;
  weft_scheduler_mode scheduler; /* default: DEFAULT */
  /* Host backend: at most this many pool threads run the streams (0, the
   * default: one per stream). Fewer threads than streams mean fewer context
   * switches on a machine with few cores; but a kernel that blocks holds its
   * thread, so host_threads blocked kernels stall every stream. */
  uint32_t host_threads;
} weft_device_options;

typedef struct weft_device weft_device;

WEFT_API void weft_device_options_init(weft_device_options *opts);
/* Opens a device. NULL opts: defaults. *out is NULL on failure. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_device_open(const weft_device_options *opts,
                                                           weft_device **out);
/* Drains every submitted command, joins the device's threads and frees
 * everything, buffers the caller never released included. NULL is a no-op.
 * Calls racing close on other threads: a call already inside weft when close
 * starts completes normally before close goes on (a read blocked on a kernel
 * gets its answer, a client parked in back-pressure is served), and close
 * keeps the device's memory until every such caller has left; a call that
 * starts after close began is refused with InvalidArgument "device is
 * closing". Once close has returned the device pointer is freed: a call that
 * begins then is a use after free, as after free(). Close from a kernel or a
 * reclaim callback would wait for itself: don't. */
WEFT_API void weft_device_close(weft_device *dev);

/* ---- streams, buffers, kernels, launches ------------------------------------------------- */

typedef uint64_t weft_stream_id; /* any value; folded onto the pool */
typedef struct {
  uint64_t id;
} weft_buffer; /* value handle, checked on every use */
typedef struct {
  uint64_t id;
} weft_kernel;
typedef enum { WEFT_READ = 1, WEFT_WRITE = 2, WEFT_READ_WRITE = 3 } weft_access;
#define WEFT_WHOLE UINT64_MAX /* binding size: to the end of the buffer */
typedef struct {
  weft_buffer buffer;
  uint64_t offset, size;
  weft_access access;
} weft_binding;

#define WEFT_MAX_BINDINGS     64u                 /* bindings per launch */
#define WEFT_MAX_SCALAR_BYTES 4096u               /* scalar bytes per launch */
#define WEFT_MAX_BUFFER_SIZE  (UINT64_C(1) << 48) /* larger sizes are InvalidArgument */

/* The calling thread's default stream. "Distinct for each thread": the first
 * call on a thread takes the next value of one process-wide counter (0, 1,
 * 2, ... in the order threads first ask), so no two threads get the same id,
 * on any device. A device still folds ids onto its max_streams slots
 * (id % max_streams): threads whose ids share a slot share its queue and
 * memory, so their work is ordered on one stream; but a capture opened on
 * one thread's id records only that id's launches, never another thread's. */
WEFT_API weft_stream_id weft_stream_current(void);

/* Creates a buffer of |size| bytes living on |stream|'s memory. Async: the
 * reservation happens later; a failure to reserve is reported by reads of the
 * buffer and by launches that read it. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_create(weft_device *dev,
                                                             weft_stream_id stream, uint64_t size,
                                                             weft_buffer *out);
/* Stream-ordered; |src| may be reused once the call returns. Up to 64 KiB,
 * and up to 4 MiB while the device's staging window (64 MiB of staged bytes
 * the streams have not consumed yet) has room, the bytes are copied and the
 * call returns at once (async). A larger write, or one that finds the window
 * full, is copied by the stream straight from |src| and the call waits until
 * it has been (after the work submitted before it on |stream|): no staged
 * copy, so memory stays bounded. From a kernel or a reclaim callback a write
 * never waits (it is staged whatever its size). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_write(weft_device *dev, weft_stream_id stream,
                                                            weft_buffer buf, uint64_t offset,
                                                            const void *src, uint64_t len);
/* Blocks until the bytes are copied into |dst|. Stream-ordered: the read runs
 * on |stream| after every command submitted on |stream| before it (work on
 * other buffers included), and after the last command submitted before it
 * that writes any part of |buf| on any stream (a write, or a launch with a
 * WRITE binding on |buf|). It does not wait for other streams' commands that
 * do not write |buf|: their launches on other buffers, their reads of |buf|.
 * "Before": a call that returned before this one began, from any thread.
 * Fails with Several{Unwritten...} when the bytes were left unwritten by a
 * failed launch. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_read(weft_device *dev, weft_stream_id stream,
                                                           weft_buffer buf, uint64_t offset,
                                                           void *dst, uint64_t len);
/* The handle is dead at once; the memory goes once pending work is done. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_release(weft_device *dev, weft_buffer buf);

/* ---- memory the caller owns ---- */
typedef void (*weft_release_fn)(void *user);
/* Wraps |size| bytes at |address| (a host pointer on the host backend, a CUdeviceptr on
 * CUDA) as a buffer living on |stream|. weft never frees the bytes: |release| (may be NULL)
 * is called exactly once, after weft_buffer_release and the retirement of the last work
 * that uses them (or at close). The buffer behaves like any other (bindings, ordering,
 * taint, pinning, captures), except that weft never reserves, moves or frees its bytes and
 * counts them in no pool's usage. |address| 0, |size| 0 or above WEFT_MAX_BUFFER_SIZE are
 * InvalidArgument. Every path calls |release| once: when this call fails (for any reason,
 * a closing or poisoned device included), it has run when the call returns. The bytes must stay
 * valid until then. It runs on weft's scheduler thread, or the thread that closes the device: it
 * must not call into the device. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_import(weft_device *dev,
                                                             weft_stream_id stream,
                                                             uint64_t address, uint64_t size,
                                                             weft_release_fn release, void *user,
                                                             weft_buffer *out);
/* The buffer's address (host pointer or CUdeviceptr), valid until it is released; blocks
 * until it is reserved; a failed reservation reports its error (as a read of the buffer
 * would). It waits for no stream: only for the buffer's creation to be processed. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_address(weft_device *dev, weft_buffer buf,
                                                              uint64_t *out);

/* ---- events ---- */
/* Events are handles like buffers: a released, stale or forged one is NotFound. Every
 * call may be made from any thread; weft_event_query never blocks, from anywhere. */
typedef struct {
  uint64_t id;
} weft_event;
/* A point on |stream|: done once everything submitted on it before is done. Async (the
 * caller does not block). Recorded while |stream| is in a capture window, it completes at
 * once with the refusal a weft_sync there would get. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_event_record(weft_device *dev, weft_stream_id stream,
                                                            weft_event *out);
/* *done: whether the event has completed (never blocks). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_event_query(weft_device *dev, weft_event ev,
                                                           bool *done);
/* Waits at most |timeout_ns| (UINT64_MAX: no limit). Returns the result of the operation
 * the event completes (NULL for a plain record; a read's Several{Unwritten} for
 * weft_buffer_read_async), or a WEFT_ERR_TIMEOUT error ("Timeout", a new kind after
 * Several) when the time ran out; the event stays valid then, and may be waited on again.
 * Each wait returns its own copy of the result. From a host kernel (or a reclaim callback)
 * that the event waits for (it is on the kernel's stream after it, or waits for it through
 * the buffers streams share), an unfinished event is refused with InvalidArgument rather
 * than deadlock. A timeout of 0 only asks. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_event_wait(weft_device *dev, weft_event ev,
                                                          uint64_t timeout_ns);
/* Orders |stream| after |ev| with no buffer in common: work placed on |stream| after this
 * call waits for the event's position on its stream (as a cross-stream wait, counted in
 * weft_device_stats.cross_stream_waits). Returns once the scheduler has placed the wait
 * (it does not wait for the event). Refused in a capture window, like weft_sync. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_stream_wait_event(weft_device *dev,
                                                                 weft_stream_id stream,
                                                                 weft_event ev);
/* The handle is dead at once. An event not yet complete is freed when it completes; a
 * thread already waiting on it still gets its result. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_event_release(weft_device *dev, weft_event ev);
/* A read that returns at once: |dst| is filled when |*done| completes. Ordered exactly like
 * weft_buffer_read; weft_event_wait on |*done| returns the read's error (Several{Unwritten}
 * for bytes a failed launch left unwritten). |dst| must stay valid until the event
 * completes. The bytes go through a host staging block of |len| bytes (allocated by this
 * call: OutOfMemory if it cannot be), and reach |dst| only when the read succeeded: a
 * failed read leaves |dst| untouched. The caller releases |*done|. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_read_async(weft_device *dev,
                                                                 weft_stream_id stream,
                                                                 weft_buffer buf, uint64_t offset,
                                                                 void *dst, uint64_t len,
                                                                 weft_event *done);

typedef struct weft_kernel_ctx {
  uint32_t grid[3], block[3], block_idx[3]; /* this call runs one block */
  void *const *buffers;                     /* one per binding, at its offset */
  const uint64_t *sizes;                    /* bytes per binding */
  size_t num_buffers;
  const void *scalars;
  size_t scalar_bytes;
} weft_kernel_ctx;
/* Called once per block, in order x fastest; a non-NULL return fails the
 * launch (ownership of the error transfers to weft) and stops its blocks.
 *
 * A kernel may call its own device. Submissions (launch, write, create,
 * release, task-graph submit, replay) never wait. A blocking call that could
 * wait for the kernel making it fails with InvalidArgument naming the call
 * and the reason: a read or sync on the kernel's own stream, or on a stream
 * whose work waits (through buffers streams share) for the kernel, such as
 * a read of the kernel's own output; weft_memory_cleanup and
 * weft_memory_install_layout on any stream, weft_capture_begin, and
 * weft_capture_abort while replays of that capture are in flight (each waits
 * for every running kernel). weft_capture_destroy from a kernel does not
 * wait: the device frees the capture once its replays are done. Other
 * blocking calls are answered, except when another thread's call needs the
 * device quiescent (cleanup, layout install, capture begin or destroy, a
 * reservation's reclaim) while the kernel's call is still queued behind it:
 * that call then fails with InvalidArgument (the device waits for every
 * running kernel, and never for one that waits for it), and can be retried
 * once the kernel has returned. Two kernels each waiting for the other's
 * stream are not detected. */
typedef weft_status (*weft_host_kernel_fn)(const weft_kernel_ctx *ctx, void *user);

/* Registers a host kernel; |name| is copied (1..255 bytes). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_kernel_host(weft_device *dev, const char *name,
                                                           weft_host_kernel_fn fn, void *user,
                                                           weft_kernel *out);
/* ---- CUDA kernels (WEFT_BACKEND_CUDA) -----------------------------------------------------
 * A CUDA device runs kernels from modules; host kernels run on the host
 * backend only (each call answers UnsupportedIoOperation on the other). */
typedef struct {
  uint64_t id;
} weft_module;
/* Loads a PTX text, cubin or fatbin image of |bytes| bytes
 * (cuModuleLoadData; PTX need not be NUL-terminated). A bad image or a JIT
 * failure is LaunchCompilation. Modules live until the device closes. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_module_load(weft_device *dev, const void *image,
                                                           size_t bytes, weft_module *out);
/* The kernel |entry| of |module| (NotFound when the module has none), named
 * |entry| in reports. |params| spells cuLaunchKernel's parameters in order:
 * 'b' is the next binding's device address (its buffer's base plus the
 * binding's offset), '1' '2' '4' '8' the next scalar of that many bytes from
 * the launch's scalar block, "{N,A}" the next struct of N bytes aligned to A
 * passed by value (N 1..4096, a multiple of A; A a power of two up to 256),
 * laid out like a C struct (each at a multiple of its alignment). E.g.
 * axpy(float a, const float *x, float *y, unsigned n) is "4bb4" with the
 * scalars struct { float a; unsigned n; }, and k(float *out, struct { double
 * lo, hi; int n; } r) is "b{24,8}". weft_launch then checks the bindings and
 * scalar bytes against it. At most 64 parameters (255 bytes of signature). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_kernel_cuda(weft_device *dev, weft_module module,
                                                           const char *entry, const char *params,
                                                           weft_kernel *out);

/* Async; returns only argument errors (bad handles, ranges, dimensions).
 * Execution failures taint the launch's written bindings. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_launch(weft_device *dev, weft_stream_id stream,
                                                      weft_kernel kernel, const uint32_t grid[3],
                                                      const uint32_t block[3],
                                                      const weft_binding *bindings,
                                                      size_t num_bindings, const void *scalars,
                                                      size_t scalar_bytes);
/* Barrier: returns once everything submitted on |stream| before the call has
 * completed. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_sync(weft_device *dev, weft_stream_id stream);
/* No barrier: reports the failures the |n| buffers carry now (as a read
 * would, Several{...}), or NULL when none is known to carry one. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_check(weft_device *dev, const weft_buffer *bufs,
                                                     size_t n);

/* ---- copies, fills, native kernels, launch descriptors --------------------------------- */

/* Device-side copies and fills. Each is a launch of one of the device's
 * built-in kernels ('copy', 'fill'): ordered by its buffers like any launch,
 * pinning what it uses, counted in the launch stats, recorded by a capture
 * and replayed. A copy reading bytes a failure left unwritten is skipped, and
 * its destination range takes the failure's root with a hop naming the copy
 * ("skipped kernel 'copy' (launch N)"); a fill clears the taint of exactly
 * the bytes it writes. Host: memmove / memset on a pool thread; CUDA:
 * cuMemcpyDtoDAsync / cuMemsetD8Async on the stream (capture-safe).
 * Async; returns only argument errors: a bad handle (NotFound), a range
 * outside its buffer or whose offset + len overflows (InvalidArgument). A
 * copy within one buffer whose ranges overlap is InvalidArgument. |len| 0
 * is a no-op: NULL after the handles are checked, nothing submitted. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_copy(weft_device *dev, weft_stream_id stream,
                                                           weft_buffer src, uint64_t src_offset,
                                                           weft_buffer dst, uint64_t dst_offset,
                                                           uint64_t len);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_fill(weft_device *dev, weft_stream_id stream,
                                                           weft_buffer buf, uint64_t offset,
                                                           uint64_t len, uint8_t value);

/* ---- the embedder's own code in weft's order: cuBLAS, cuDNN, NCCL, ... ---- */
typedef struct weft_native_ctx {
  void *stream;              /* the CUstream this launch is ordered on (CUDA); NULL on host */
  const uint64_t *addresses; /* one per binding, at its offset */
  const uint64_t *sizes;     /* bytes per binding */
  size_t num_buffers;
  const void *scalars;
  size_t scalar_bytes;
} weft_native_ctx;
/* A native kernel's body. A non-NULL return fails the launch (ownership of
 * the error transfers to weft): its written bindings carry the error, as a
 * host kernel's would. */
typedef weft_status (*weft_native_fn)(const weft_native_ctx *ctx, void *user);
/* A kernel whose body is the caller's function |fn|, launched with
 * weft_launch or weft_launch_ex with grid and block {1,1,1} (anything else is
 * InvalidArgument), with any bindings and scalars. Its bindings are ordered,
 * pinned, skipped and tainted like any launch's; |fn| is not called when the
 * launch is skipped.
 *  - Host: |fn| runs once on a pool thread, as a host kernel does (the rules
 *    for host kernels above hold: it may call its device, blocking calls that
 *    could wait for it are refused); ctx->stream is NULL and the addresses
 *    are host pointers.
 *  - CUDA: |fn| is called in stream order on the thread that enqueues the
 *    stream's work (the device's scheduler thread), with the device's context
 *    current, ctx->stream the CUstream the launch is ordered on and the
 *    addresses CUdeviceptr values. It enqueues its work there (a cuBLAS
 *    handle's cublasSetStream(h, ctx->stream), then the call) and returns
 *    without synchronising: work weft orders after the launch waits for
 *    that stream. It must not call weft on the same device (the scheduler
 *    thread is waiting for it: such a call is refused or deadlocks), must
 *    not synchronise the context or other streams, and must enqueue only on
 *    ctx->stream. An error it returns fails the launch; a fault of the work
 *    it enqueued poisons the device, as a kernel's would.
 * |name| is copied (1..255 bytes); |user| is passed to every call. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_kernel_native(weft_device *dev, const char *name,
                                                             weft_native_fn fn, void *user,
                                                             weft_kernel *out);

/* ---- a launch that can grow ---- */
typedef struct weft_launch_desc {
  uint32_t struct_size; /* sizeof(weft_launch_desc): the struct only grows at the end */
  weft_stream_id stream;
  weft_kernel kernel;
  uint32_t grid[3], block[3];
  uint32_t shared_bytes; /* dynamic shared memory per block (CUDA) */
  const weft_binding *bindings;
  size_t num_bindings;
  const void *scalars;
  size_t scalar_bytes;
  const char *label; /* optional: names this launch in reports and traces */
} weft_launch_desc;
/* weft_launch from a descriptor. |struct_size| must be sizeof(weft_launch_desc)
 * of this release or of an older one (a layout that ends at one of its
 * fields: a later release accepts this one); anything else is
 * InvalidArgument. |shared_bytes| goes to cuLaunchKernel for a module
 * kernel (the driver refuses what the device lacks: the launch fails with
 * LaunchTooManyResources); a host, native or built-in kernel has none, and
 * a non-zero value for one is InvalidArgument. |label| (NULL: none; else
 * 1..127 bytes) names the launch in its failure's report ("launch 'attn.qk'
 * of kernel 'gemm' (launch 7)") and in traces. Labels are interned per
 * device: the first launch with a new label copies it (the only allocation;
 * the caller's string need not outlive the call), later ones allocate
 * nothing; a device holds at most 4096 distinct launch labels (then
 * InvalidArgument). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_launch_ex(weft_device *dev,
                                                         const weft_launch_desc *desc);
/* Names a buffer in reports and traces ("buffer 'attn.q' (#38)"); |label| is
 * copied (1..127 bytes; NULL removes the name). Ordered like a command: the
 * reports of failures that read the buffer after the call name it so. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_buffer_set_label(weft_device *dev, weft_buffer buf,
                                                                const char *label);

/* ---- memory: pools, layouts, modes, reports
 * --------------------------------------------------------
 *
 * Each stream slot has its own memory manager; a buffer lives in the manager
 * of the stream that created it. Pools and layouts are described in
 * docs/memory.md. Every memory call is ordered after the commands submitted
 * before it and blocks until the scheduler has answered. */

typedef enum weft_pool_kind {
  WEFT_POOL_SLICED = 0,
  WEFT_POOL_EXCLUSIVE = 1,
  WEFT_POOL_DIRECT = 2,
  WEFT_POOL_PERSISTENT = 3, /* one per manager, not in layouts */
} weft_pool_kind;

#define WEFT_NO_PERIOD  UINT64_MAX /* exclusive: only explicit cleanups free */
#define WEFT_NO_CEILING UINT64_MAX /* direct: never reclaims on allocation */

typedef struct weft_pool_config {
  weft_pool_kind kind;
  uint64_t page_size;      /* sliced */
  uint64_t max_slice_size; /* sliced; 0: page_size */
  uint64_t max_pool_size;  /* sliced; 0: uncapped */
  bool strict;             /* sliced: no near-page acceptance */
  uint64_t max_alloc_size; /* exclusive */
  uint64_t dealloc_period; /* exclusive; WEFT_NO_PERIOD */
  uint64_t reclaim_at;     /* direct; WEFT_NO_CEILING */
} weft_pool_config;

typedef enum weft_layout_kind {
  WEFT_LAYOUT_SUBSLICES = 0, /* the default ladder */
  WEFT_LAYOUT_EXCLUSIVE_PAGES = 1,
  WEFT_LAYOUT_ADAPTIVE = 2,
  WEFT_LAYOUT_CUSTOM = 3,
} weft_layout_kind;

typedef struct weft_layout {
  weft_layout_kind kind;
  const weft_pool_config *pools; /* CUSTOM */
  size_t num_pools;
} weft_layout;

/* How a reservation may change the pages a stream's memory holds. */
typedef enum weft_reserve_mode {
  WEFT_RESERVE_ALLOW = 0,     /* may add and release pages */
  WEFT_RESERVE_ADD_ONLY = 1,  /* may add pages, releases none */
  WEFT_RESERVE_FORBIDDEN = 2, /* only room already held: else PageUpdateForbidden */
} weft_reserve_mode;

/* Allocation windows (weft_memory_mode): a stack; AUTO pops, the innermost decides. */
typedef enum weft_alloc_mode {
  WEFT_ALLOC_AUTO = 0,
  WEFT_ALLOC_PERSISTENT = 1,
  WEFT_ALLOC_DEDICATED = 2,
} weft_alloc_mode;

/* Where AUTO allocations may use the persistent pool. */
typedef enum weft_persistent_policy {
  WEFT_PERSISTENT_ENABLED = 0, /* persistent only inside windows */
  WEFT_PERSISTENT_SIZE_MATCH = 1,
  WEFT_PERSISTENT_DISABLED = 2,
  WEFT_PERSISTENT_ENFORCED = 3,
} weft_persistent_policy;

typedef struct weft_memory_usage {
  uint64_t number_allocs, bytes_in_use, bytes_padding, bytes_reserved;
} weft_memory_usage;

typedef struct weft_pool_report {
  weft_pool_kind kind;
  weft_memory_usage usage;
  uint64_t pages, pages_peak, pages_unmapped, largest_alloc;
  uint64_t page_size; /* sliced: its page size; 0 otherwise */
  bool outdated;      /* an arena pool that serves nothing new */
} weft_pool_report;

/* Called on the scheduler thread when a reservation on |stream| still fails
 * after weft's own reclaim steps (drop-queue flushes, releasing free pages of
 * every stream, relocation), with an error reclaiming may fix; |bytes| is the
 * request. Inside it, weft_buffer_release takes effect at once (so what it
 * releases can serve the retry; commands already queued that bind it fail
 * with NotFound). Releasing the buffer being reserved ends its create: there
 * is no retry, it holds nothing and its handle is dead. A buffer whose create
 * is still queued holds no memory yet: its release is queued behind the
 * create (its queued work runs first). Creates, writes and launches are
 * queued and run after the reservation; blocking calls on the device (read,
 * sync, check, the memory calls, stats, failpoints, captures) are refused
 * with InvalidArgument. Returns the bytes it released (informational). */
typedef uint64_t (*weft_reclaim_fn)(void *user, weft_stream_id stream, uint64_t bytes);

#define WEFT_MAX_POOL_REPORTS (254u + 64u + 2u)

/* Usage summed over every stream's memory. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_usage_get(weft_device *dev,
                                                                weft_memory_usage *out);
/* Per-pool reports of |stream|'s memory (routing order, then arena slots,
 * then the persistent and dedicated pools). |*n| in: capacity of |out|; out:
 * the number of pools (more than the capacity: only that many written). A
 * stream that never allocated reports 0 pools (questions create nothing). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_report_get(weft_device *dev,
                                                                 weft_stream_id stream,
                                                                 weft_pool_report *out, size_t *n);
/* Waits for in-flight work, flushes the drop queue twice, relocates live
 * allocations off outdated pages and frees every free page of |stream|'s
 * memory. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_cleanup(weft_device *dev,
                                                              weft_stream_id stream);
/* Installs |layout| on |stream|'s memory (refused with Validation while its
 * pools hold live memory) and makes it the layout of streams created later. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_install_layout(weft_device *dev,
                                                                     weft_stream_id stream,
                                                                     const weft_layout *layout);
/* Opens (PERSISTENT, DEDICATED) or closes (AUTO) an allocation window on
 * |stream|'s memory. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_mode(weft_device *dev, weft_stream_id stream,
                                                           weft_alloc_mode mode);
/* Dry runs nest: while one is open, new pages get identities but no backing
 * until a read resolves them, and launches and writes are validated and
 * dropped (measured, not run). weft_memory_report_get then tells the peak. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_dry_run(weft_device *dev, bool begin);
/* Sets (NULL fn: clears) the reclaim callback. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_set_reclaim(weft_device *dev,
                                                                  weft_reclaim_fn fn, void *user);

/* ---- failures: injection and poisoning
 * ----------------------------------------------------------- */

/* Called once when the device is poisoned (a sticky fault): every pending
 * and later operation then fails with DevicePoisoned and every waiter wakes.
 * |poison| is borrowed for the call. Called on the thread that found the
 * fault (a stream worker): it must not block on the device. */
typedef void (*weft_poison_fn)(void *user, weft_status poison);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_device_set_poison_callback(weft_device *dev,
                                                                          weft_poison_fn fn,
                                                                          void *user);
/* Failpoint syntax (options.failpoints, the WEFT_FAILPOINTS variable and
 * weft_device_set_failpoints; docs/errors.md): entries separated by ';',
 * whitespace around an entry ignored, empty entries skipped, each one of
 *   alloc#N=KIND      the device's Nth storage allocation fails with KIND
 *   launch#K=KIND     the device's Kth launch (in the scheduler's order) fails with KIND
 *   kernel:NAME=KIND  every launch of the kernel named NAME fails with KIND
 *   poison#K          the device is poisoned when its Kth launch executes
 * N and K are decimal counts from 1, counted from the device's open (launches
 * at submission); NAME is 1..255 bytes; KIND is a kind name as
 * weft_error_kind_name spells it (e.g. "OutOfMemory", "Generic"). At most 16
 * entries of each form. A launch matching both a launch# and a kernel: entry
 * fails with the launch# entry's kind; one whose input already carries a
 * failure is skipped instead, as usual. Open reads options.failpoints, then
 * WEFT_FAILPOINTS.
 *
 * weft_device_set_failpoints adds failpoints in that syntax, counted from the
 * device's open. A malformed
 * spec is InvalidArgument naming the bad entry and changes nothing. KIND may
 * not be TornDown, Skipped, Unwritten or Several (weft reports those). NULL
 * or a spec with no entry ("") clears every failpoint the device has, those
 * of the options and of WEFT_FAILPOINTS included. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_device_set_failpoints(weft_device *dev,
                                                                     const char *spec);
/* The device's poison (a clone the caller frees), or NULL if it is healthy. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_device_poisoned(weft_device *dev);

/* ---- capture and replay ---------------------------------------------------------------
 * Records the launches issued on a set of streams once, replays them many
 * times. The window follows CUDA stream capture:
 *
 *   weft_capture_prepare(dev, streams, n, &cap);  // isolation starts: no interleaving
 *   ... warm-up: run the step eagerly once (reads and syncs allowed); every buffer
 *       released now keeps its memory until begin, so the pools hold the step's
 *       whole working set
 *   weft_capture_begin(cap);                      // reservations on the streams: Forbidden
 *   ... the step: launches on the streams are recorded, not run
 *   weft_capture_end(cap);                        // replayable, or the reason it is not
 *   weft_buffer_write(...); weft_capture_replay(cap); weft_buffer_read(...); ...
 *   weft_capture_destroy(cap);                    // waits for replays in flight
 *
 * Inside the window (after begin): a launch whose arguments fail to resolve, a
 * failpoint, or an input that carries a failure dooms the capture (end then
 * fails with the reason and nothing is kept); so do a buffer created or
 * written on a capturing stream (a recording must not allocate, and a write
 * would replay stale bytes: refresh inputs between replays instead) and a
 * read or sync on one (no host sync inside a window: the call fails).
 * A capture records exactly the launches submitted on the stream ids it was
 * opened on; work on other ids that fold onto the same slots runs normally
 * (the slots' memory rules, Forbidden and cleanup, still cover those ids).
 * Memory cleanup of a capturing stream is a no-op. Every buffer a recording
 * uses stays alive until destroy, released or not. A transition out of order
 * fails with Generic and changes nothing; abort ends the window from any state
 * and returns everything the capture held (aborting a doomed recording
 * returns Several: the reason it was doomed, and the abandonment). */
typedef struct weft_capture weft_capture;
typedef enum {
  WEFT_CAPTURE_PREPARED = 1, /* warm-up */
  WEFT_CAPTURE_RECORDING,    /* between begin and end */
  WEFT_CAPTURE_READY,        /* ended: replayable */
  WEFT_CAPTURE_ABORTED,      /* aborted, or end failed: only destroy is left */
} weft_capture_state;
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_capture_prepare(weft_device *dev,
                                                               const weft_stream_id *streams,
                                                               size_t n, weft_capture **out);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_capture_begin(weft_capture *cap);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_capture_end(weft_capture *cap);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_capture_abort(weft_capture *cap);
/* Asynchronous, like a launch: returns only state errors (and OutOfMemory
 * for its command). Any number of threads may replay one capture. Inside a
 * dry run (weft_memory_dry_run) a replay is dropped like every launch:
 * counted in launches and launches_dry, not run. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_capture_replay(weft_capture *cap);
WEFT_API weft_capture_state weft_capture_state_of(const weft_capture *cap); /* 0 for NULL */
WEFT_API size_t weft_capture_launches(const weft_capture *cap);             /* recorded launches */
/* Waits until no replay of |cap| runs, then frees it and everything it holds;
 * from a host kernel it does not wait (the device frees the capture once its
 * replays are done). NULL is a no-op. Either order with weft_device_close is
 * safe: close ends every live capture and frees what the device owns (the
 * recording, its instances, the buffers it kept alive), leaving the
 * weft_capture object to the caller; destroy after close then frees only that
 * object (it touches no device; the device's allocator must still work).
 * After close every other call on the capture fails with InvalidArgument
 * ("device is closed"), and its state reads ABORTED. */
WEFT_API void weft_capture_destroy(weft_capture *cap);

/* ---- task graphs ---------------------------------------------------------------
 * A DAG of launches built once and submitted many times. Edges come from the
 * bindings: a node depends on every earlier node whose binding overlaps one of
 * its own on the same buffer where either writes (read-after-write,
 * write-after-read, write-after-write). Independent chains go to different
 * lanes (at most max_streams); submission issues each node on stream
 * base + lane, where the device orders every crossing with its usual rules
 * and runs every node in its own write scope (a failing node skips exactly
 * its dependents). The graph copies bindings and scalars; its buffers must be
 * live at submission. */
typedef struct weft_taskgraph weft_taskgraph;
typedef struct weft_taskgraph_node_info {
  weft_kernel kernel;
  uint32_t lane;  /* stream offset from the submission's base */
  uint32_t ndeps; /* direct predecessors */
  size_t nbindings;
} weft_taskgraph_node_info;
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_taskgraph_create(weft_device *dev,
                                                                weft_taskgraph **out);
/* Appends a launch; *node (optional) receives its index. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_taskgraph_add_launch(
    weft_taskgraph *g, weft_kernel kernel, const uint32_t grid[3], const uint32_t block[3],
    const weft_binding *bindings, size_t num_bindings, const void *scalars, size_t scalar_bytes,
    uint32_t *node);
/* Issues every node, in order, as one submission (one queue push). */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_taskgraph_submit(weft_taskgraph *g,
                                                                weft_stream_id base);
WEFT_API size_t weft_taskgraph_node_count(const weft_taskgraph *g);
WEFT_API size_t weft_taskgraph_edge_count(const weft_taskgraph *g);
WEFT_API uint32_t weft_taskgraph_lane_count(const weft_taskgraph *g);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_taskgraph_node(const weft_taskgraph *g,
                                                              uint32_t node,
                                                              weft_taskgraph_node_info *out);
/* Edge |i| (0..edge_count-1), in order of the dependent node. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_taskgraph_edge(const weft_taskgraph *g, size_t i,
                                                              uint32_t *from, uint32_t *to);
/* Graphviz text (free with weft_free): nodes named by kernel, lanes as colors. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_taskgraph_to_dot(const weft_taskgraph *g,
                                                                char **out);
/* Frees the graph (NULL is a no-op). A graph is the caller's alone, so
 * destroy may come before or after weft_device_close: after close it frees
 * only the graph and touches no device (the device's allocator must still
 * work). Every other call on a graph needs its device open. */
WEFT_API void weft_taskgraph_destroy(weft_taskgraph *g);

/* ---- observability: traces ----------------------------------------------------------- */

/* Starts recording device events into a preallocated ring of |max_events| (0: a default
 * of about 1M); recording allocates nothing per event. Refused while already recording.
 * A record is one event (a launch, a copy, a batch flushed, a buffer created...) or one
 * of its details (two bindings, three cross-stream waits, 56 bytes of a failure's
 * message): when the ring wraps, the oldest records go first and the file says how many
 * events were dropped. docs/observability.md, "Recording a trace". */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_trace_begin(weft_device *dev, uint64_t max_events);
/* Stops recording and writes what the ring holds to |path| as Chrome trace-event JSON
 * (it opens in Perfetto and chrome://tracing), after the work submitted before it has
 * retired. A path that cannot be written is refused and the recording goes on. Refused
 * from inside a kernel (it waits for every running kernel). WEFT_TRACE=path records a
 * device's whole life and writes the file at close. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_trace_end(weft_device *dev, const char *path);
/* ---- observability: logging and memory snapshots ------------------------------------- */

/* Process-wide logging of weft's streaming and memory decisions (stream
 * creation, the reclaim ladder's steps, relocations, pages added and
 * released, back-pressure waits, recorded failures, poisoning; the list and
 * the levels are in docs/observability.md). Levels: 0 error, 1 warn (the
 * default), 2 info, 3 debug; a message is emitted when its level is at most
 * |level| (clamped to 0..3, with a warning). |fn| NULL: messages go to
 * stderr as "weft: <level>: <message>". |message| is borrowed for the call.
 * The hook may be called from any weft thread (the scheduler, a pool
 * thread, a client inside a call), concurrently: it must be thread-safe and
 * must not call weft. weft_set_log returns once no call of the previous
 * hook is running, so its |user| may be freed then. The variable
 * WEFT_LOG=error|warn|info|debug sets the level for devices opened later,
 * unless the program has called weft_set_log (docs/configuration.md). */
typedef void (*weft_log_fn)(void *user, int level, const char *message);
WEFT_API void weft_set_log(weft_log_fn fn, void *user, int level);

/* A JSON view of every stream's memory (free with weft_free): the usage
 * totals (equal to weft_memory_usage_get's), and per stream its pools,
 * their pages and the slices covering each page (offset, size, padding,
 * state "free" / "in_use" / "pinned", buffer id and label, tainted byte
 * ranges with their failure ids), and the most recent reservation and
 * release events (a preallocated ring of WEFT_MEMORY_EVENTS). The fields
 * are in docs/observability.md. Ordered after the commands submitted
 * before it, like every memory call. *json_out is NULL on failure. */
#define WEFT_MEMORY_EVENTS 256u
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_snapshot(weft_device *dev, char **json_out);
/* Called once per reservation that fails for good: one of the kinds the
 * reclaim ladder handles (OutOfMemory, PageSizesExhausted) still failing
 * after the ladder and the reclaim callback, with the snapshot at that
 * moment (borrowed for the call; its "oom" member names the request).
 * Requests that can never fit (BufferTooBig) and refusals to add a page
 * (PageUpdateForbidden) climb no ladder and are not reported. Runs on the
 * scheduler thread: it must not block on the device (blocking calls, such
 * as weft_memory_snapshot, are refused with InvalidArgument there); it may
 * log, copy the snapshot, or queue work. NULL fn: clears it. */
typedef void (*weft_oom_fn)(void *user, weft_stream_id stream, uint64_t bytes,
                            const char *snapshot_json);
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_memory_set_oom_observer(weft_device *dev,
                                                                       weft_oom_fn fn, void *user);

/* ---- statistics ------------------------------------------------------------------------ */

typedef struct weft_device_stats {
  uint64_t commands;           /* commands the scheduler processed */
  uint64_t launches;           /* launches accepted */
  uint64_t launches_run;       /* launches whose kernel ran to success */
  uint64_t launches_failed;    /* launches whose kernel (or argument resolution) failed */
  uint64_t launches_skipped;   /* launches skipped because an input carried a failure */
  uint64_t launches_dry;       /* launches measured in a dry run and not run */
  uint64_t cross_stream_waits; /* waits a stream made on another stream's work */
  uint64_t waits_elided;       /* cross-stream orderings already covered by an earlier wait */
  uint64_t buffers_live;       /* buffers created and not yet freed */
  uint64_t streams_created;    /* pool slots brought to life */
  uint64_t reclaims;           /* reservations that went through the reclaim ladder */
  uint64_t reclaims_rescued;   /* ... and succeeded on the retry */
  uint64_t relocations;        /* allocations moved off outdated pages (ladder and cleanups) */
  uint64_t failures_live;      /* failures the error graph holds (0 when no buffer carries one) */
  uint64_t pending_peak;       /* most commands pending at once against one budget (with the
                                * credits client threads hold for their next launches) */
  uint64_t backpressure_waits; /* times a client waited for its stream to catch up */
  uint64_t batches_flushed;    /* per-stream batches handed to the backend */
  uint64_t batches_full;       /* ... of which because they reached max_tasks */
  uint64_t align_flushes;      /* registrations that first executed other streams' batches */
  uint64_t tasks_interleaved;  /* tasks run on another stream's queue (Interleave) */
  uint64_t launches_recorded;  /* launches recorded by captures (not run) */
  uint64_t launches_replayed;  /* launches issued by capture replays */
  uint64_t captures_live;      /* captures prepared and not yet destroyed */
  /* Parked threads wake every 100 ms to look for work a lost wake-up left
   * behind; these count the timed-out parks that found work they were owed a
   * wake-up for (a late wake-up is not counted): both stay 0 in a correct
   * program (docs/architecture.md, "The wake-up protocol"). */
  uint64_t wakeups_recovered; /* the scheduler (or combining thread) found such work */
  uint64_t streams_recovered; /* a host pool thread found a stream left with work */
  /* CUDA backend (0 on the host backend). */
  uint64_t gpu_event_waits;    /* cuStreamWaitEvent issued for cross-stream waits */
  uint64_t gpu_waits_complete; /* cross-stream waits already complete on the host: none issued */
  uint64_t gpu_events_created; /* events the streams' pools created (flat after warm-up) */
  uint64_t gpu_marks;          /* completion marks (host functions) enqueued */
} weft_device_stats;
/* A consistent snapshot taken by the scheduler after every command submitted
 * before the call. */
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_device_stats_get(weft_device *dev,
                                                                weft_device_stats *out);

/* What the device is; fixed at open, answered without a round trip. */
typedef struct weft_device_info {
  weft_backend backend;
  char name[256];        /* "host", or the CUDA device's name */
  uint64_t total_memory; /* CUDA: the device's memory; host: memory_capacity (0: none) */
  uint64_t capacity;     /* the most weft may allocate (0: no cap) */
  int driver_version;    /* CUDA: cuDriverGetVersion (e.g. 13000); host: 0 */
  int ordinal;           /* CUDA: the device index */
  uint32_t max_streams;  /* the stream pool's size */
  uint32_t memory_align; /* allocations are aligned to this many bytes */
} weft_device_info;
WEFT_API WEFT_MUST_USE_RESULT weft_status weft_device_info_get(weft_device *dev,
                                                               weft_device_info *out);

#ifdef __cplusplus
}
#endif
#endif /* WEFT_WEFT_H */
