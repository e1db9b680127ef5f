/* The CUDA backend behind weft_backend_vtable: opening (driver, context,
 * storage), the lanes its streams run on, modules and CUDA kernels, the
 * launch, copy and read bodies its tasks enqueue, pinned staging for
 * copies, fault polling (a sticky driver error poisons the device through
 * the sink), and capture graphs. Task bodies only enqueue: the backend is
 * deferred, and its lanes' cursors move by polling (progress) and by
 * completion marks (arm). See docs/cuda.md. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/config.h"
#include "core/error.h"
#include "streams/backend.h"
#include "streams/cuda/lane.h"
#include "streams/cuda/storage_cuda.h"

/* NVTX3 is header-only: its first call looks for a tool's injection library
 * (NVTX_INJECTION64_PATH, set by Nsight Systems) and is a no-op without one.
 * Built in when CMake found the header (WEFT_HAVE_NVTX). */
#if WEFT_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

#define MAX_MODULES     1024u
#define MAX_PARAMS      64u
#define MAX_SIGNATURE   255u /* bytes of a parameter signature */
#define MAX_PARAM_ALIGN 256u /* a by-value struct's alignment, at most */
#define STAGING_MIN     ((size_t)4096)
#define STAGING_CLASSES 13u /* 4 KiB .. 16 MiB; larger copies go through the driver */
#define STAGING_CAP     (UINT64_C(256) << 20) /* pinned bytes at most: page-locked memory is scarce */

/* A CUDA kernel's payload (weft_backend_launch.impl): its CUfunction and
 * parameter layout. */
typedef struct cuda_kernel {
  CUfunction fn;
  char params[MAX_SIGNATURE + 1]; /* the signature: 'b', '1', '2', '4', '8', "{N,A}" */
  bool binding[MAX_PARAMS];       /* parameter i is a binding's address (else a scalar) */
  uint16_t param_off[MAX_PARAMS]; /* a scalar's offset in the scalar block */
  uint32_t nparams, nbindings;
  uint32_t scalar_min, scalar_max; /* accepted scalar block sizes (struct padding) */
} cuda_kernel;

typedef struct cuda_backend {
  weft_backend_base base; /* first */
  const weft_allocator *alloc;
  weft_backend_sink sink;
  uint32_t tag; /* the device's: module ids carry it */
  weft_storage *storage;
  weft_lanes *lanes;
  weft_cuda_stream *mem_stream; /* the storage's: stream-ordered allocation, copies */
  int ordinal, driver_version;
  uint64_t capacity;
  pthread_mutex_t lock; /* module loads (client threads) */
  weft_cuda_module *modules[MAX_MODULES];
  _Atomic uint32_t nmodules;
  /* Pinned blocks for copies, by class; a free block's first bytes link it. */
  void *staging[STAGING_CLASSES];
  uint64_t pinned; /* bytes of staging allocated (pooled or in use) */
  /* A launch's enqueue is observed: bracketed by an NVTX range (WEFT_NVTX,
   * at open, in a build with NVTX), timed on the device (while tracing:
   * trace_timing, on the scheduler thread, which also enqueues). */
  bool nvtx, timing;
} cuda_backend;

static cuda_backend *cuda_of(weft_backend_base *b) {
  return (cuda_backend *)b;
}

static weft_cuda_context *ctx_of(cuda_backend *g) {
  return weft_lanes_context(g->lanes);
}

/* ---- open and close ---------------------------------------------------------------------- */

static void cuda_enter(weft_backend_base *b) {
  weft_error_free(weft_cuda_context_make_current(ctx_of(cuda_of(b))));
}

/* The storage is destroyed first: its frees need the context and the lanes. */
static void cuda_destroy(weft_backend_base *b) {
  cuda_backend *g = cuda_of(b);
  weft_storage_destroy(g->storage);
  cuda_enter(b);
  uint32_t n = atomic_load(&g->nmodules);
  for (uint32_t i = 0; i < n; i++) weft_cuda_module_unload(g->modules[i]);
  const weft_cuda_driver *d = weft_lanes_driver(g->lanes);
  for (uint32_t k = 0; k < STAGING_CLASSES; k++)
    for (void *p = g->staging[k], *nx; p; p = nx) {
      memcpy(&nx, p, sizeof(nx));
      weft_error_free(weft_cuda_pinned_free(d, p));
    }
  weft_cuda_stream_destroy(g->mem_stream);
  weft_lanes_close(g->lanes);
  pthread_mutex_destroy(&g->lock);
  weft__free(g->alloc, g, sizeof(*g), WEFT_CACHELINE);
}

static weft_storage *cuda_storage(weft_backend_base *b) {
  return cuda_of(b)->storage;
}

static uint64_t cuda_capacity(weft_backend_base *b) {
  return cuda_of(b)->capacity;
}

static weft_status cuda_stream_create(weft_backend_base *b, uint32_t slot, weft_stream **out) {
  return weft_lanes_stream_create(cuda_of(b)->lanes, slot, out);
}

static bool cuda_fail_call(weft_backend_base *b, uint64_t n, weft_error_kind kind) {
  return weft_storage_cuda_fail_call(cuda_of(b)->storage, n, kind);
}

static void cuda_info(weft_backend_base *b, weft_device_info *out) {
  cuda_backend *g = cuda_of(b);
  out->backend = WEFT_BACKEND_CUDA;
  snprintf(out->name, sizeof(out->name), "%s", weft_lanes_device_name(g->lanes));
  out->total_memory = weft_lanes_total_memory(g->lanes);
  out->capacity = g->capacity;
  out->driver_version = g->driver_version;
  out->ordinal = g->ordinal;
}

static void cuda_stats(weft_backend_base *b, weft_device_stats *out) {
  weft_lanes_stats s;
  weft_lanes_get_stats(cuda_of(b)->lanes, &s);
  out->gpu_event_waits = s.event_waits;
  out->gpu_waits_complete = s.waits_complete;
  out->gpu_events_created = s.events_created;
  out->gpu_marks = s.marks;
}

static bool cuda_progress(weft_backend_base *b) {
  return weft_lanes_progress(cuda_of(b)->lanes);
}

static void cuda_arm(weft_backend_base *b) {
  weft_lanes_arm(cuda_of(b)->lanes);
}

/* ---- faults ------------------------------------------------------------------------------ */

static void cuda_check_fault(weft_backend_base *b, bool query) {
  cuda_backend *g = cuda_of(b);
  weft_lanes *l = g->lanes;
  if (!(query ? weft_lanes_poll(l) : weft_lanes_poisoned(l))) return;
  if (!g->sink.poisoned(g->sink.ctx)) {
    weft_status why = weft_cuda_context_poisoned(ctx_of(g));
    if (!why) why = weft_error_make(WEFT_ERR_DEVICE_POISONED, "CUDA context faulted");
    g->sink.poison(g->sink.ctx, why);
  }
  weft_lanes_force_complete(l); /* nothing will complete what was queued */
}

static void cuda_sync_point(weft_backend_base *b, weft_stream *s) {
  cuda_backend *g = cuda_of(b);
  if (!s || g->sink.poisoned(g->sink.ctx)) return;
  bool idle = false;
  weft_error_free(weft_cuda_stream_query(weft_lane_cuda_stream(s), &idle));
  cuda_check_fault(b, false);
}

/* ---- modules and kernels ----------------------------------------------------------------- */

static weft_status cuda_host_kernels(weft_backend_base *b) {
  (void)b;
  return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                         "host kernels run on the host backend; a CUDA device runs kernels "
                         "from modules (weft_module_load, weft_kernel_cuda)");
}

static weft_status cuda_module_load(weft_backend_base *b, const void *image, size_t bytes,
                                    weft_module *out) {
  cuda_backend *g = cuda_of(b);
  if (!image || !bytes)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "the module image is %s",
                           image ? "empty" : "NULL");
  pthread_mutex_lock(&g->lock);
  uint32_t n = atomic_load_explicit(&g->nmodules, memory_order_relaxed);
  if (n == MAX_MODULES) {
    pthread_mutex_unlock(&g->lock);
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "too many modules (at most %u per device)",
                           MAX_MODULES);
  }
  weft_cuda_module *m = NULL;
  weft_status st = weft_cuda_module_load(ctx_of(g), image, bytes, &m);
  if (!st) {
    g->modules[n] = m;
    atomic_store_explicit(&g->nmodules, n + 1, memory_order_release);
    out->id = ((uint64_t)g->tag << 32) | (n + 1u);
  }
  pthread_mutex_unlock(&g->lock);
  return st;
}

/* Reads the decimal number at |*p| (at most 5 digits: larger is refused
 * by the limits anyway) into |*out|; false when there is none. */
static bool param_number(const char **p, uint32_t *out) {
  uint32_t v = 0, digits = 0;
  while (**p >= '0' && **p <= '9') {
    if (++digits > 5) return false;
    v = v * 10u + (uint32_t)(**p - '0');
    (*p)++;
  }
  *out = v;
  return digits > 0;
}

/* A by-value struct "{N,A}" at |*p| (past its '{'): N bytes aligned to A. */
static weft_status param_struct(const char **p, uint32_t i, uint32_t *size, uint32_t *align) {
  const char *at = *p;
  if (!param_number(p, size) || **p != ',' || (++*p, !param_number(p, align)) || **p != '}')
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel parameter %u is a struct spelled \"{%.16s\": write \"{N,A}\" "
                           "(N bytes aligned to A, both decimal)",
                           i, at);
  ++*p;
  if (*size == 0 || *size > WEFT_MAX_SCALAR_BYTES)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel parameter %u is a struct of %u bytes: 1..%u", i, *size,
                           WEFT_MAX_SCALAR_BYTES);
  if (*align == 0 || (*align & (*align - 1)) || *align > MAX_PARAM_ALIGN)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel parameter %u is a struct aligned to %u: a power of two up to %u",
                           i, *align, MAX_PARAM_ALIGN);
  if (*size % *align)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel parameter %u is a struct of %u bytes aligned to %u: a C "
                           "struct's size is a multiple of its alignment",
                           i, *size, *align);
  return NULL;
}

/* Parses a parameter signature into |k|: 'b' a binding, '1' '2' '4' '8' a
 * scalar of that size (and alignment), "{N,A}" a struct of N bytes aligned
 * to A, passed by value from the scalar block. */
static weft_status parse_params(const char *params, cuda_kernel *k) {
  size_t len = strnlen(params, MAX_SIGNATURE + 1);
  if (len > MAX_SIGNATURE)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "the parameter signature is longer than %u bytes", MAX_SIGNATURE);
  uint32_t off = 0, align = 1, n = 0;
  for (const char *p = params; *p;) {
    if (n == MAX_PARAMS)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "more than %u kernel parameters",
                             MAX_PARAMS);
    char ch = *p++;
    if (ch == 'b') {
      k->binding[n++] = true;
      k->nbindings++;
      continue;
    }
    uint32_t size = ch == '1' ? 1 : ch == '2' ? 2 : ch == '4' ? 4 : ch == '8' ? 8 : 0, a = size;
    weft_status st;
    if (ch == '{' && (st = param_struct(&p, n, &size, &a))) return st;
    if (!size)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "kernel parameter %u is '%c': a signature holds 'b' (a binding), "
                             "'1', '2', '4', '8' (scalars of that many bytes) and \"{N,A}\" (a "
                             "struct of N bytes aligned to A)",
                             n, ch);
    off = (off + a - 1) & ~(a - 1);
    if (off + size > WEFT_MAX_SCALAR_BYTES)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "kernel parameter %u ends at scalar byte %u: past a launch's %u", n,
                             off + size, WEFT_MAX_SCALAR_BYTES);
    k->param_off[n++] = (uint16_t)off;
    off += size;
    if (a > align) align = a;
  }
  if (k->nbindings > WEFT_MAX_BINDINGS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "the signature exceeds a launch's limits");
  uint32_t max = (off + align - 1) & ~(align - 1); /* a C struct's trailing padding */
  if (max > WEFT_MAX_SCALAR_BYTES) max = off;
  memcpy(k->params, params, len);
  k->params[len] = '\0';
  k->nparams = n;
  k->scalar_min = off;
  k->scalar_max = max;
  return NULL;
}

static weft_status cuda_kernel_resolve(weft_backend_base *b, weft_module module, const char *entry,
                                       const char *params, void **out_impl) {
  cuda_backend *g = cuda_of(b);
  *out_impl = NULL;
  if (!entry) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "entry is NULL");
  if (!params)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "params is NULL (\"\" for a kernel without parameters)");
  uint32_t idx = (uint32_t)module.id - 1u;
  if ((uint32_t)(module.id >> 32) != g->tag || (uint32_t)module.id == 0 ||
      idx >= atomic_load_explicit(&g->nmodules, memory_order_acquire))
    return weft_error_make(WEFT_ERR_NOT_FOUND, "module %#" PRIx64 " is not a module of this device",
                           module.id);
  cuda_kernel k;
  memset(&k, 0, sizeof(k));
  weft_status st = parse_params(params, &k);
  if (!st) st = weft_cuda_module_function(g->modules[idx], entry, &k.fn);
  if (st) return st;
  cuda_kernel *p = weft__alloc(g->alloc, sizeof(*p), 16);
  if (!p) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*p), "a CUDA kernel");
  *p = k;
  *out_impl = p;
  return NULL;
}

static void cuda_kernel_free(weft_backend_base *b, void *impl) {
  weft__free(cuda_of(b)->alloc, impl, sizeof(cuda_kernel), 16);
}

static weft_status cuda_check_launch(weft_backend_base *b, const void *impl, const char *name,
                                     size_t nb, size_t scalar_bytes) {
  (void)b;
  const cuda_kernel *k = impl;
  if (nb != k->nbindings)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel '%s' (parameters \"%s\") takes %u binding%s; got %zu", name,
                           k->params, k->nbindings, k->nbindings == 1 ? "" : "s", nb);
  if (scalar_bytes < k->scalar_min || scalar_bytes > k->scalar_max)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel '%s' (parameters \"%s\") takes %u scalar bytes%s; got %zu", name,
                           k->params, k->scalar_min,
                           k->scalar_max > k->scalar_min ? " (or with its struct padding)" : "",
                           scalar_bytes);
  return NULL;
}

/* ---- task bodies: enqueue on the lane the task was placed on ------------------------------ */

/* A built-in kernel on |cs|: a copy, a fill, or the embedder's function,
 * called now (in stream order: everything weft ordered before it is already
 * enqueued) to enqueue its work on the stream. */
static weft_status builtin_on(const weft_backend_launch *l, weft_cuda_stream *cs) {
  const weft_backend_kernel *k = l->kernel;
  switch (k->builtin) {
  case WEFT_BUILTIN_COPY:
    return weft_cuda_copy_dtod(cs, (CUdeviceptr)(uintptr_t)l->addrs[1],
                               (CUdeviceptr)(uintptr_t)l->addrs[0], (size_t)l->bindings[1].size);
  case WEFT_BUILTIN_FILL:
    return weft_cuda_memset8(cs, (CUdeviceptr)(uintptr_t)l->addrs[0],
                             *(const unsigned char *)l->scalars, (size_t)l->bindings[0].size);
  default: {
    uint64_t addrs[WEFT_MAX_BINDINGS], sizes[WEFT_MAX_BINDINGS];
    for (uint32_t i = 0; i < l->nb; i++) {
      addrs[i] = (uint64_t)(uintptr_t)l->addrs[i];
      sizes[i] = l->bindings[i].size;
    }
    weft_native_ctx ctx = {.stream = (void *)weft_cuda_stream_handle(cs),
                           .addresses = addrs,
                           .sizes = sizes,
                           .num_buffers = l->nb,
                           .scalars = l->scalar_bytes ? l->scalars : NULL,
                           .scalar_bytes = l->scalar_bytes};
    weft_status err = k->native(&ctx, k->user);
    /* As for a host kernel: a kind weft reports about other failures would
     * make this launch's report contradict itself. */
    weft_error_kind kind = weft_error_kind_of(err);
    if (weft__error_kind_is_derived(kind))
      err = weft_error_wrap(WEFT_ERR_GENERIC, 0, err,
                            "kernel '%s' returned %s, a kind only weft itself reports", k->name,
                            weft_error_kind_name(kind));
    return err;
  }
  }
}

/* Enqueues launch |l| on |cs|. */
static weft_status launch_on(const weft_backend_launch *l, weft_cuda_stream *cs) {
  if (l->graph) return weft_cuda_graph_launch(l->graph, cs);
  if (__builtin_expect(l->kernel->builtin != WEFT_BUILTIN_NONE, 0)) return builtin_on(l, cs);
  const cuda_kernel *k = l->kernel->impl;
  CUdeviceptr ptrs[WEFT_MAX_BINDINGS];
  void *args[MAX_PARAMS];
  uint32_t bi = 0;
  for (uint32_t i = 0; i < k->nparams; i++) {
    if (k->binding[i]) {
      ptrs[bi] = (CUdeviceptr)(uintptr_t)l->addrs[bi];
      args[i] = &ptrs[bi++];
    } else {
      args[i] = (char *)(uintptr_t)l->scalars + k->param_off[i];
    }
  }
  weft_cuda_dim3 grid = {l->grid[0], l->grid[1], l->grid[2]};
  weft_cuda_dim3 block = {l->block[0], l->block[1], l->block[2]};
  return weft_cuda_launch(cs, k->fn, grid, block, l->shared_bytes, args);
}

/* A launch with an NVTX range named by its label or kernel, and timing
 * events around it when tracing. */
static __attribute__((noinline)) weft_status launch_observed(cuda_backend *g, weft_stream *on,
                                                             const weft_backend_launch *l) {
#if WEFT_HAVE_NVTX
  if (g->nvtx) nvtxRangePushA(l->label ? l->label : l->kernel->name);
#endif
  bool timed = g->timing && weft_lane_time_start(on);
  weft_status st = launch_on(l, weft_lane_cuda_stream(on));
  if (timed) weft_lane_time_end(on);
#if WEFT_HAVE_NVTX
  if (g->nvtx) nvtxRangePop();
#endif
  return st;
}

static weft_status cuda_launch(weft_backend_base *b, weft_stream *on,
                               const weft_backend_launch *l) {
  cuda_backend *g = cuda_of(b);
  if (__builtin_expect(g->nvtx | g->timing, 0)) return launch_observed(g, on, l);
  return launch_on(l, weft_lane_cuda_stream(on));
}

static void cuda_trace_timing(weft_backend_base *b, bool on) {
  cuda_backend *g = cuda_of(b);
  g->timing = on;
  if (!on) weft_lanes_timing_drop(g->lanes);
}

static bool cuda_device_ms(weft_backend_base *b, weft_stream *s, uint64_t seq, double *ms) {
  (void)b;
  return weft_lane_device_ms(s, seq, ms);
}

/* The staging class of a copy of |len| bytes (STAGING_CLASSES: too large). */
static uint32_t staging_class(uint64_t len) {
  uint32_t k = 0;
  while (k < STAGING_CLASSES && (STAGING_MIN << k) < len) k++;
  return k;
}

/* A pinned block of at least |len| bytes for a copy (*state), from the
 * pools; false when none (too large, or the driver has no pinned memory). */
static bool staging_take(cuda_backend *g, void **state, uint64_t len) {
  uint32_t k = staging_class(len);
  if (k == STAGING_CLASSES) return false;
  void *p = g->staging[k];
  if (p) {
    memcpy(&g->staging[k], p, sizeof(void *));
  } else {
    if (g->pinned + (STAGING_MIN << k) > STAGING_CAP) return false;
    weft_status st = weft_cuda_pinned_alloc(weft_lanes_driver(g->lanes), STAGING_MIN << k, &p);
    if (st) {
      weft_error_free(st);
      return false;
    }
    g->pinned += STAGING_MIN << k;
  }
  *state = p;
  return true;
}

static weft_status cuda_write(weft_backend_base *b, weft_stream *on, const weft_copy_desc *c) {
  if (!c->len) return NULL;
  weft_cuda_stream *cs = weft_lane_cuda_stream(on);
  CUdeviceptr dst = (CUdeviceptr)(uintptr_t)c->device;
  /* Pinned: the copy is asynchronous and the block is kept until the write
   * retires. Otherwise the driver stages the pageable bytes before returning. */
  if (staging_take(cuda_of(b), c->state, c->len)) {
    memcpy(*c->state, c->host, (size_t)c->len);
    return weft_cuda_copy_htod(cs, dst, *c->state, (size_t)c->len);
  }
  return weft_cuda_copy_htod(cs, dst, c->host, (size_t)c->len);
}

static weft_status cuda_read(weft_backend_base *b, weft_stream *on, const weft_copy_desc *c) {
  weft_cuda_stream *cs = weft_lane_cuda_stream(on);
  CUdeviceptr src = (CUdeviceptr)(uintptr_t)c->device;
  /* Pinned: asynchronous, copied to the caller when the read retires.
   * Otherwise straight to the caller (the driver blocks until it is done). */
  if (staging_take(cuda_of(b), c->state, c->len))
    return weft_cuda_copy_dtoh(cs, *c->state, src, (size_t)c->len);
  return weft_cuda_copy_dtoh(cs, c->host, src, (size_t)c->len);
}

static void cuda_copy_done(weft_backend_base *b, const weft_copy_desc *c, bool deliver) {
  void *p = *c->state;
  if (!p) return;
  if (deliver) memcpy(c->host, p, (size_t)c->len);
  cuda_backend *g = cuda_of(b);
  uint32_t k = staging_class(c->len); /* the class it was taken from */
  memcpy(p, &g->staging[k], sizeof(void *));
  g->staging[k] = p;
  *c->state = NULL;
}

/* ---- capture ----------------------------------------------------------------------------- */

/* What the capture knows of a buffer (by its address: live buffers have
 * distinct ones): the private stream that last wrote it (-1: none yet) and
 * those that read it since. */
typedef struct cap_track {
  const char *base;
  int writer;
  uint64_t readers;
} cap_track;

static cap_track *cap_find(cap_track *t, size_t *n, const weft_backend_launch *l, uint32_t j) {
  const char *base = (const char *)l->addrs[j] - l->bindings[j].offset;
  for (size_t i = 0; i < *n; i++)
    if (t[i].base == base) return &t[i];
  t[*n] = (cap_track){base, -1, 0};
  return &t[(*n)++];
}

/* Stream-captures |rec| into one graph, on private streams, one per stream
 * slot the recording used, on this (the scheduler's) thread: the first
 * slot's stream begins the capture and forks into the others; a launch
 * waits (an edge) for the streams that last wrote what it reads or writes,
 * or read what it writes, as the scheduler would order them; at the end
 * every stream joins back. Replays keep the recording's concurrency across
 * slots. */
static weft_status cuda_capture(weft_backend_base *b, const weft_capture_launch *rec, size_t n,
                                void **out_graph) {
  cuda_backend *g = cuda_of(b);
  *out_graph = NULL;
  weft_cuda_graph *graph = NULL;
  weft_cuda_stream *cs[WEFT_MAX_STREAMS] = {NULL};
  int idx[WEFT_MAX_STREAMS];
  uint64_t count[WEFT_MAX_STREAMS] = {0};                    /* launches on each stream */
  uint64_t seen[WEFT_MAX_STREAMS][WEFT_MAX_STREAMS] = {{0}}; /* [i][k]: count[k] i waited for */
  uint32_t ns = 0;
  for (uint32_t k = 0; k < WEFT_MAX_STREAMS; k++) idx[k] = -1;
  size_t nb = 0;
  for (size_t r = 0; r < n; r++) nb += rec[r].launch.nb;
  size_t tbytes = sizeof(cap_track) * (nb ? nb : 1);
  cap_track *track = weft__alloc(g->alloc, tbytes, 16);
  size_t ntrack = 0;
  weft_status st =
      track ? NULL : weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, tbytes, "a capture");
  for (size_t r = 0; r < n && !st; r++) {
    uint32_t slot = rec[r].slot;
    if (idx[slot] >= 0) continue;
    idx[slot] = (int)ns;
    st = weft_cuda_stream_create(ctx_of(g), &cs[ns++]);
  }
  if (!st && ns) st = weft_cuda_capture_begin(cs[0]);
  if (st || !ns) {
    for (uint32_t k = 0; k < ns; k++) weft_cuda_stream_destroy(cs[k]);
    weft__free(g->alloc, track, tbytes, 16);
    return st ? st : weft_error_make(WEFT_ERR_GENERIC, "capture: nothing was recorded");
  }
  weft_status first = NULL; /* the first failure while capturing */
  for (uint32_t k = 1; k < ns && !first; k++) first = weft_cuda_capture_edge(cs[0], cs[0], cs[k]);
  for (size_t r = 0; r < n && !first; r++) {
    const weft_backend_launch *l = &rec[r].launch;
    uint32_t i = (uint32_t)idx[rec[r].slot];
    uint64_t need = 0;
    for (uint32_t j = 0; j < l->nb; j++) {
      cap_track *t = cap_find(track, &ntrack, l, j);
      if (t->writer >= 0) need |= UINT64_C(1) << t->writer;
      if (l->bindings[j].access & WEFT_WRITE) need |= t->readers;
    }
    need &= ~(UINT64_C(1) << i);
    for (uint32_t k = 0; need && k < ns && !first; k++)
      if ((need >> k & 1) && seen[i][k] < count[k]) { /* not waited for that far yet */
        first = weft_cuda_capture_edge(cs[0], cs[k], cs[i]);
        seen[i][k] = count[k];
      }
    if (first) break;
    weft_status e = launch_on(l, cs[i]);
    if (e) {
      first = weft_error_make(WEFT_ERR_GENERIC,
                              "capture: launch %" PRIu64 " ('%s') refused while capturing: %s",
                              rec[r].launch_no, l->kernel->name, weft_error_message(e));
      weft_error_free(e);
      break;
    }
    count[i]++;
    for (uint32_t j = 0; j < l->nb; j++) {
      cap_track *t = cap_find(track, &ntrack, l, j);
      if (l->bindings[j].access & WEFT_WRITE) {
        t->writer = (int)i;
        t->readers = 0;
      } else {
        t->readers |= UINT64_C(1) << i;
      }
    }
  }
  for (uint32_t k = 1; k < ns && !first; k++) first = weft_cuda_capture_edge(cs[0], cs[k], cs[0]);
  st = weft_cuda_capture_end(cs[0], &graph); /* every stream leaves capture mode, even on error */
  if (first) {
    weft_error_free(st);
    weft_cuda_graph_destroy(graph);
    graph = NULL;
    st = first;
  }
  for (uint32_t k = 0; k < ns; k++) weft_cuda_stream_destroy(cs[k]);
  weft__free(g->alloc, track, tbytes, 16);
  *out_graph = graph;
  return st;
}

static uint32_t cuda_graph_launches(const void *graph) {
  return (uint32_t)weft_cuda_graph_nodes(graph); /* a captured launch is one kernel node */
}

static void cuda_graph_free(weft_backend_base *b, void *graph) {
  (void)b;
  weft_cuda_graph_destroy(graph);
}

static const weft_backend_vtable cuda_vtable = {
    .destroy = cuda_destroy,
    .storage = cuda_storage,
    .capacity = cuda_capacity,
    .enter = cuda_enter,
    .stream_create = cuda_stream_create,
    .fail_call = cuda_fail_call,
    .info = cuda_info,
    .stats = cuda_stats,
    .host_kernels = cuda_host_kernels,
    .module_load = cuda_module_load,
    .kernel_resolve = cuda_kernel_resolve,
    .kernel_free = cuda_kernel_free,
    .check_launch = cuda_check_launch,
    .launch = cuda_launch,
    .write = cuda_write,
    .read = cuda_read,
    .copy_done = cuda_copy_done,
    .progress = cuda_progress,
    .arm = cuda_arm,
    .check_fault = cuda_check_fault,
    .sync_point = cuda_sync_point,
    .capture = cuda_capture,
    .graph_launches = cuda_graph_launches,
    .graph_free = cuda_graph_free,
    .trace_timing = cuda_trace_timing,
    .device_ms = cuda_device_ms,
};

weft_status weft_backend_cuda_open(const weft_backend_config *cfg, weft_backend_base **out) {
  *out = NULL;
  const weft_device_options *o = cfg->options;
  cuda_backend *g = weft__calloc(cfg->alloc, sizeof(*g), WEFT_CACHELINE);
  if (!g) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*g), "the CUDA backend");
  g->base.vt = &cuda_vtable;
  g->base.deferred = true;
  g->alloc = cfg->alloc;
  g->sink = cfg->sink;
  g->tag = cfg->tag;
#if WEFT_HAVE_NVTX
  g->nvtx = weft_config_nvtx();
#endif
  pthread_mutex_init(&g->lock, NULL);
  weft_status st = weft_lanes_open(cfg->alloc, o->ordinal, cfg->progress, &g->lanes);
  uint64_t total = 0;
  if (!st) st = weft_cuda_stream_create(weft_lanes_context(g->lanes), &g->mem_stream);
  if (!st)
    st = weft_storage_cuda_create(cfg->alloc, weft_lanes_driver(g->lanes), &total, &g->storage);
  if (st) {
    weft_cuda_stream_destroy(g->mem_stream);
    weft_lanes_close(g->lanes);
    pthread_mutex_destroy(&g->lock);
    weft__free(cfg->alloc, g, sizeof(*g), WEFT_CACHELINE);
    return st;
  }
  weft_storage_cuda_set_poison(g->storage, weft_cuda_context_poison(ctx_of(g)));
  weft_storage_cuda_cap(g->storage, o->memory_capacity);
  weft_storage_cuda_set_stream(g->storage, weft_cuda_stream_handle(g->mem_stream));
  weft_storage_cuda_use_async(g->storage); /* frees then never synchronise the device */
  g->capacity = o->memory_capacity && o->memory_capacity < total ? o->memory_capacity : total;
  g->ordinal = o->ordinal;
  if (weft_lanes_driver(g->lanes)->cuDriverGetVersion(&g->driver_version) != CUDA_SUCCESS)
    g->driver_version = 0;
  *out = &g->base;
  return NULL;
}
