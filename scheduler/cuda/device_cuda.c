/* The device on the CUDA backend: opening (driver, context, storage), the
 * lanes its streams run on, modules and CUDA kernels, the launch, copy and
 * read bodies its tasks enqueue, pinned staging for copies, and poisoning
 * from sticky driver errors. The scheduler (device.c, multistream.c) is the
 * same as on the host backend; see docs/cuda.md. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "memory/cuda/storage_cuda.h"
#include "scheduler/command.h"
#include "scheduler/gpu.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/launch.h"
#include "scheduler/multistream.h"
#include "scheduler/submit.h"
#include "streams/cuda/lane.h"

#define MAX_MODULES     1024u
#define STAGING_MIN     ((size_t)4096)
#define STAGING_CLASSES 13u /* 4 KiB .. 16 MiB; larger copies go through the driver */
#define STAGING_CAP     (UINT64_C(256) << 20) /* pinned bytes at most: page-locked memory is scarce */

struct weft_gpu {
  weft_lanes *lanes;
  weft_cuda_stream *mem_stream; /* the storage's: stream-ordered allocation, copies */
  int ordinal, driver_version;
  uint64_t capacity;
  pthread_mutex_t lock; /* module loads (client threads) */
  weft_cuda_module *modules[MAX_MODULES];
  _Atomic uint32_t nmodules;
  /* Pinned blocks for reads, by class; a free block's first bytes link it. */
  void *staging[STAGING_CLASSES];
  uint64_t pinned; /* bytes of staging allocated (pooled or in use) */
};

static weft_cuda_context *ctx_of(weft_device *dev) {
  return weft_lanes_context(dev->gpu->lanes);
}

/* ---- open and close ---------------------------------------------------------------------- */

weft_status weft__gpu_open(weft_device *dev, const weft_device_options *o) {
  struct weft_gpu *g = weft__calloc(&dev->alloc, sizeof(*g), WEFT_CACHELINE);
  if (!g) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*g), "the CUDA backend");
  pthread_mutex_init(&g->lock, NULL);
  weft_status st = weft_lanes_open(&dev->alloc, o->ordinal, &dev->loop.wake, &g->lanes);
  uint64_t total = 0;
  if (!st) st = weft_cuda_stream_create(weft_lanes_context(g->lanes), &g->mem_stream);
  if (!st)
    st = weft_storage_cuda_create(&dev->alloc, weft_lanes_driver(g->lanes), &total,
                                  &dev->mem.storage);
  if (st) {
    weft_cuda_stream_destroy(g->mem_stream);
    weft_lanes_close(g->lanes);
    pthread_mutex_destroy(&g->lock);
    weft__free(&dev->alloc, g, sizeof(*g), WEFT_CACHELINE);
    return st;
  }
  weft_storage_cuda_set_poison(dev->mem.storage,
                               weft_cuda_context_poison(weft_lanes_context(g->lanes)));
  weft_storage_cuda_cap(dev->mem.storage, o->memory_capacity);
  weft_storage_cuda_set_stream(dev->mem.storage, weft_cuda_stream_handle(g->mem_stream));
  weft_storage_cuda_use_async(dev->mem.storage); /* frees then never synchronise the device */
  g->capacity = o->memory_capacity && o->memory_capacity < total ? o->memory_capacity : total;
  g->ordinal = o->ordinal;
  if (weft_lanes_driver(g->lanes)->cuDriverGetVersion(&g->driver_version) != CUDA_SUCCESS)
    g->driver_version = 0;
  dev->gpu = g;
  return NULL;
}

void weft__gpu_enter(weft_device *dev) {
  weft_error_free(weft_cuda_context_make_current(ctx_of(dev)));
}

void weft__gpu_close(weft_device *dev) {
  struct weft_gpu *g = dev->gpu;
  weft__gpu_enter(dev);
  uint32_t n = atomic_load(&g->nmodules);
  for (uint32_t i = 0; i < n; i++) weft_cuda_module_unload(g->modules[i]);
  const weft_cuda_driver *d = weft_lanes_driver(g->lanes);
  for (uint32_t k = 0; k < STAGING_CLASSES; k++)
    for (void *p = g->staging[k], *nx; p; p = nx) {
      memcpy(&nx, p, sizeof(nx));
      weft_error_free(weft_cuda_pinned_free(d, p));
    }
  weft_cuda_stream_destroy(g->mem_stream); /* the storage is gone already */
  weft_lanes_close(g->lanes);
  pthread_mutex_destroy(&g->lock);
  dev->gpu = NULL;
  weft__free(&dev->alloc, g, sizeof(*g), WEFT_CACHELINE);
}

weft_status weft__gpu_stream_create(weft_device *dev, uint32_t slot, weft_stream **out) {
  return weft_lanes_stream_create(dev->gpu->lanes, slot, out);
}

bool weft__gpu_fail_call(weft_device *dev, uint64_t n, weft_error_kind kind) {
  return weft_storage_cuda_fail_call(dev->mem.storage, n, kind);
}

uint64_t weft__gpu_capacity(weft_device *dev) {
  return dev->gpu->capacity;
}

void weft__gpu_info(weft_device *dev, weft_device_info *out) {
  struct weft_gpu *g = dev->gpu;
  out->backend = WEFT_BACKEND_CUDA;
  snprintf(out->name, sizeof(out->name), "%s", weft_lanes_device_name(g->lanes));
  out->total_memory = weft_lanes_total_memory(g->lanes);
  out->capacity = g->capacity;
  out->driver_version = g->driver_version;
  out->ordinal = g->ordinal;
}

void weft__gpu_stats(weft_device *dev, weft_device_stats *out) {
  weft_lanes_stats s;
  weft_lanes_get_stats(dev->gpu->lanes, &s);
  out->gpu_event_waits = s.event_waits;
  out->gpu_waits_complete = s.waits_complete;
  out->gpu_events_created = s.events_created;
  out->gpu_marks = s.marks;
}

void weft__gpu_progress(weft_device *dev) {
  weft_lanes_progress(dev->gpu->lanes);
}

void weft__gpu_arm(weft_device *dev) {
  weft_lanes_arm(dev->gpu->lanes);
}

/* ---- poisoning --------------------------------------------------------------------------- */

void weft__gpu_check_poison(weft_device *dev, bool poll) {
  weft_lanes *l = dev->gpu->lanes;
  if (!(poll ? weft_lanes_poll(l) : weft_lanes_poisoned(l))) return;
  if (!weft__poisoned(dev)) {
    weft_status why = weft_cuda_context_poisoned(ctx_of(dev));
    if (!why) why = weft_error_make(WEFT_ERR_DEVICE_POISONED, "CUDA context faulted");
    weft__dev_poison(dev, why);
  }
  weft_lanes_force_complete(l); /* nothing will complete what was queued */
}

void weft__gpu_sync_point(weft_device *dev, weft_stream *s) {
  if (!s || weft__poisoned(dev)) return;
  bool idle = false;
  weft_error_free(weft_cuda_stream_query(weft_lane_cuda_stream(s), &idle));
  weft__gpu_check_poison(dev, false);
}

/* ---- modules and kernels ----------------------------------------------------------------- */

weft_status weft_module_load(weft_device *dev, const void *image, size_t bytes, weft_module *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if (!dev->gpu)
    return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                           "modules run on the CUDA backend; this device is a host device "
                           "(weft_kernel_host)");
  if (!image || !bytes)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "the module image is %s",
                           image ? "empty" : "NULL");
  struct weft_gpu *g = dev->gpu;
  pthread_mutex_lock(&g->lock);
  uint32_t n = atomic_load_explicit(&g->nmodules, memory_order_relaxed);
  if (n == MAX_MODULES) {
    pthread_mutex_unlock(&g->lock);
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "too many modules (at most %u per device)",
                           MAX_MODULES);
  }
  weft_cuda_module *m = NULL;
  st = weft_cuda_module_load(ctx_of(dev), image, bytes, &m);
  if (!st) {
    g->modules[n] = m;
    atomic_store_explicit(&g->nmodules, n + 1, memory_order_release);
    out->id = ((uint64_t)dev->tag << 32) | (n + 1u);
  }
  pthread_mutex_unlock(&g->lock);
  return st;
}

/* Parses a parameter signature into |k|. */
static weft_status parse_params(const char *params, weft_kernel_entry *k) {
  size_t n = strnlen(params, WEFT_GPU_MAX_PARAMS + 1);
  if (n > WEFT_GPU_MAX_PARAMS)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "more than %u kernel parameters",
                           WEFT_GPU_MAX_PARAMS);
  uint32_t off = 0, align = 1;
  for (size_t i = 0; i < n; i++) {
    char ch = params[i];
    if (ch == 'b') {
      k->nbindings++;
      continue;
    }
    uint32_t size = ch == '1' ? 1 : ch == '2' ? 2 : ch == '4' ? 4 : ch == '8' ? 8 : 0;
    if (!size)
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "kernel parameter %zu is '%c': a signature holds 'b' (a binding) "
                             "and '1', '2', '4', '8' (scalars of that many bytes)",
                             i, ch);
    off = (off + size - 1) & ~(size - 1);
    k->param_off[i] = (uint16_t)off;
    off += size;
    if (size > align) align = size;
  }
  if (k->nbindings > WEFT_MAX_BINDINGS || off > WEFT_MAX_SCALAR_BYTES)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "the signature exceeds a launch's limits");
  memcpy(k->params, params, n);
  k->params[n] = '\0';
  k->nparams = (uint32_t)n;
  k->scalar_min = off;
  k->scalar_max = (off + align - 1) & ~(align - 1); /* a C struct's trailing padding */
  return NULL;
}

weft_status weft_kernel_cuda(weft_device *dev, weft_module module, const char *entry,
                             const char *params, weft_kernel *out) {
  if (out) out->id = 0;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  if (!dev->gpu)
    return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                           "CUDA kernels run on the CUDA backend; this device is a host device "
                           "(weft_kernel_host)");
  if (!entry) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "entry is NULL");
  if (!params)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "params is NULL (\"\" for a kernel without parameters)");
  struct weft_gpu *g = dev->gpu;
  uint32_t idx = (uint32_t)module.id - 1u;
  if ((uint32_t)(module.id >> 32) != dev->tag || (uint32_t)module.id == 0 ||
      idx >= atomic_load_explicit(&g->nmodules, memory_order_acquire))
    return weft_error_make(WEFT_ERR_NOT_FOUND, "module %#" PRIx64 " is not a module of this device",
                           module.id);
  weft_kernel_entry e;
  memset(&e, 0, sizeof(e));
  if ((st = parse_params(params, &e))) return st;
  CUfunction f = NULL;
  if ((st = weft_cuda_module_function(g->modules[idx], entry, &f))) return st;
  e.gpu_fn = (void *)f;
  return weft__kernel_register(dev, entry, &e, out);
}

weft_status weft__gpu_check_launch(const weft_kernel_entry *k, size_t nb, size_t scalar_bytes) {
  if (!k->gpu_fn) return NULL;
  if (nb != k->nbindings)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel '%s' (parameters \"%s\") takes %u binding%s; got %zu", k->name,
                           k->params, k->nbindings, k->nbindings == 1 ? "" : "s", nb);
  if (scalar_bytes < k->scalar_min || scalar_bytes > k->scalar_max)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "kernel '%s' (parameters \"%s\") takes %u scalar bytes%s; got %zu",
                           k->name, k->params, k->scalar_min,
                           k->scalar_max > k->scalar_min ? " (or with its struct padding)" : "",
                           scalar_bytes);
  return NULL;
}

/* ---- task bodies: enqueue on the lane the task was placed on ------------------------------ */

static CUdeviceptr dptr(const cmd *c, uint32_t i) {
  return (CUdeviceptr)(uintptr_t)c->bufs[i]->ptr + c->bindings[i].offset;
}

/* Enqueues launch |c| on |cs|. */
static weft_status launch_on(weft_device *dev, const cmd *c, weft_cuda_stream *cs) {
  if (c->graph) return weft_cuda_graph_launch(c->graph, cs);
  const weft_kernel_entry *k = &dev->kernels[c->kernel];
  CUdeviceptr ptrs[WEFT_MAX_BINDINGS];
  void *args[WEFT_GPU_MAX_PARAMS];
  uint32_t bi = 0;
  for (uint32_t i = 0; i < k->nparams; i++) {
    if (k->params[i] == 'b') {
      ptrs[bi] = dptr(c, bi);
      args[i] = &ptrs[bi++];
    } else {
      args[i] = (char *)c->scalars + k->param_off[i];
    }
  }
  weft_cuda_dim3 grid = {c->grid[0], c->grid[1], c->grid[2]};
  weft_cuda_dim3 block = {c->block[0], c->block[1], c->block[2]};
  return weft_cuda_launch(cs, (CUfunction)k->gpu_fn, grid, block, 0, args);
}

weft_status weft__gpu_launch(weft_device *dev, cmd *c, weft_stream *on) {
  return launch_on(dev, c, weft_lane_cuda_stream(on));
}

/* ---- capture ----------------------------------------------------------------------------- */

/* What the capture knows of a buffer: the private stream that last wrote
 * it (-1: none yet) and those that read it since. */
typedef struct cap_track {
  const weft_buf *b;
  int writer;
  uint64_t readers;
} cap_track;

static cap_track *cap_find(cap_track *t, size_t *n, const weft_buf *b) {
  for (size_t i = 0; i < *n; i++)
    if (t[i].b == b) return &t[i];
  t[*n] = (cap_track){b, -1, 0};
  return &t[(*n)++];
}

/* Stream-captures |rec| (|nb| bindings in all) into one graph, on private
 * streams, one per stream slot the recording used, on this (the
 * scheduler's) thread: the first slot's stream begins the capture and forks
 * into the others; a launch waits (an edge) for the streams that last wrote
 * what it reads or writes, or read what it writes, as the scheduler would
 * order them; at the end every stream joins back. Replays keep the
 * recording's concurrency across slots. */
static weft_status capture_graph(weft_device *dev, const cmd *rec, size_t nb,
                                 weft_cuda_graph **out) {
  *out = NULL;
  weft_cuda_stream *cs[WEFT_MAX_STREAMS] = {NULL};
  int idx[WEFT_MAX_STREAMS];
  uint64_t count[WEFT_MAX_STREAMS] = {0};                    /* launches on each stream */
  uint64_t seen[WEFT_MAX_STREAMS][WEFT_MAX_STREAMS] = {{0}}; /* [i][k]: count[k] i waited for */
  uint32_t ns = 0;
  for (uint32_t k = 0; k < WEFT_MAX_STREAMS; k++) idx[k] = -1;
  size_t tbytes = sizeof(cap_track) * (nb ? nb : 1);
  cap_track *track = weft__alloc(&dev->alloc, tbytes, 16);
  size_t ntrack = 0;
  weft_status st =
      track ? NULL : weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, tbytes, "a capture");
  for (const cmd *r = rec; r && !st; r = weft__cmd_next(r)) {
    uint32_t slot = weft__slot_of(dev, r->stream);
    if (idx[slot] >= 0) continue;
    idx[slot] = (int)ns;
    st = weft_cuda_stream_create(ctx_of(dev), &cs[ns++]);
  }
  if (!st) st = weft_cuda_capture_begin(cs[0]);
  if (st) {
    for (uint32_t k = 0; k < ns; k++) weft_cuda_stream_destroy(cs[k]);
    weft__free(&dev->alloc, track, tbytes, 16);
    return st;
  }
  weft_status first = NULL; /* the first failure while capturing */
  for (uint32_t k = 1; k < ns && !first; k++) first = weft_cuda_capture_edge(cs[0], cs[0], cs[k]);
  for (const cmd *r = rec; r && !first; r = weft__cmd_next(r)) {
    uint32_t i = (uint32_t)idx[weft__slot_of(dev, r->stream)];
    uint64_t need = 0;
    for (uint32_t j = 0; j < r->nb; j++) {
      cap_track *t = cap_find(track, &ntrack, r->bufs[j]);
      if (t->writer >= 0) need |= UINT64_C(1) << t->writer;
      if (r->bindings[j].access & WEFT_WRITE) need |= t->readers;
    }
    need &= ~(UINT64_C(1) << i);
    for (uint32_t k = 0; need && k < ns && !first; k++)
      if ((need >> k & 1) && seen[i][k] < count[k]) { /* not waited for that far yet */
        first = weft_cuda_capture_edge(cs[0], cs[k], cs[i]);
        seen[i][k] = count[k];
      }
    if (first) break;
    weft_status e = launch_on(dev, r, cs[i]);
    if (e) {
      first = weft_error_make(WEFT_ERR_GENERIC,
                              "capture: launch %" PRIu64 " ('%s') refused while capturing: %s",
                              r->launch_no, dev->kernels[r->kernel].name, weft_error_message(e));
      weft_error_free(e);
      break;
    }
    count[i]++;
    for (uint32_t j = 0; j < r->nb; j++) {
      cap_track *t = cap_find(track, &ntrack, r->bufs[j]);
      if (r->bindings[j].access & WEFT_WRITE) {
        t->writer = (int)i;
        t->readers = 0;
      } else {
        t->readers |= UINT64_C(1) << i;
      }
    }
  }
  for (uint32_t k = 1; k < ns && !first; k++) first = weft_cuda_capture_edge(cs[0], cs[k], cs[0]);
  st = weft_cuda_capture_end(cs[0], out); /* every stream leaves capture mode, even on error */
  if (first) {
    weft_error_free(st);
    weft_cuda_graph_destroy(*out);
    *out = NULL;
    st = first;
  }
  for (uint32_t k = 0; k < ns; k++) weft_cuda_stream_destroy(cs[k]);
  weft__free(&dev->alloc, track, tbytes, 16);
  return st;
}

weft_status weft__gpu_capture(weft_device *dev, const cmd *rec, cmd **out) {
  *out = NULL;
  size_t nb = 0;
  for (const cmd *r = rec; r; r = weft__cmd_next(r)) {
    nb += r->nb;
    for (uint32_t i = 0; i < r->nb; i++)
      if (!r->bufs[i] || !r->bufs[i]->ptr) /* the window dooms these; never capture them */
        return weft_error_make(WEFT_ERR_GENERIC,
                               "capture: launch %" PRIu64 " binds an "
                               "unallocated buffer",
                               r->launch_no);
  }
  /* The replay command: every recorded binding, in order. */
  size_t bytes = sizeof(weft_binding) * (nb ? nb : 1);
  weft_binding *all = weft__alloc(&dev->alloc, bytes, 16);
  if (!all) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, bytes, "a capture's bindings");
  size_t k = 0;
  for (const cmd *r = rec; r; r = weft__cmd_next(r))
    for (uint32_t i = 0; i < r->nb; i++) all[k++] = r->bindings[i];
  weft_kernel kid = {((uint64_t)dev->tag << 32) | (rec->kernel + 1u)};
  const uint32_t one[3] = {1, 1, 1};
  cmd *g = weft__launch_build(dev, rec->stream, kid, one, one, all, nb, NULL, 0, true);
  weft__free(&dev->alloc, all, bytes, 16);
  if (!g) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, nb, "a capture's replay command");
  weft__cmd_detach(dev, g); /* kept for the capture's life */
  k = 0;
  for (const cmd *r = rec; r; r = weft__cmd_next(r))
    for (uint32_t i = 0; i < r->nb; i++) g->bufs[k++] = r->bufs[i];
  weft_cuda_graph *graph = NULL;
  weft_status st = capture_graph(dev, rec, nb, &graph);
  if (st) {
    weft__cmd_free(g);
    return st;
  }
  g->graph = graph;
  *out = g;
  return NULL;
}

uint32_t weft__gpu_graph_launches(const void *graph) {
  return (uint32_t)weft_cuda_graph_nodes(graph); /* a captured launch is one kernel node */
}

void weft__gpu_capture_free(weft_device *dev, cmd *g) {
  (void)dev;
  weft_cuda_graph_destroy(g->graph);
  g->graph = NULL;
  weft__cmd_free(g);
}

/* A pinned block of at least |len| bytes for |c| (c->staging), from the
 * pools; false when none (too large, or the driver has no pinned memory). */
/* The staging class of a copy of |len| bytes (STAGING_CLASSES: too large). */
static uint32_t staging_class(uint64_t len) {
  uint32_t k = 0;
  while (k < STAGING_CLASSES && (STAGING_MIN << k) < len) k++;
  return k;
}

static bool staging_take(weft_device *dev, cmd *c, uint64_t len) {
  struct weft_gpu *g = dev->gpu;
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
  c->staging = p;
  return true;
}

weft_status weft__gpu_write(weft_device *dev, cmd *c, weft_stream *on) {
  if (!c->len) return NULL;
  weft_cuda_stream *cs = weft_lane_cuda_stream(on);
  CUdeviceptr dst = (CUdeviceptr)(uintptr_t)c->bufs[0]->ptr + c->offset;
  /* Pinned: the copy is asynchronous and the block is kept until the write
   * retires. Otherwise the driver stages the pageable bytes before returning. */
  if (staging_take(dev, c, c->len)) {
    memcpy(c->staging, c->data, (size_t)c->len);
    return weft_cuda_copy_htod(cs, dst, c->staging, (size_t)c->len);
  }
  return weft_cuda_copy_htod(cs, dst, c->data, (size_t)c->len);
}

weft_status weft__gpu_read(weft_device *dev, cmd *c, weft_stream *on) {
  weft_cuda_stream *cs = weft_lane_cuda_stream(on);
  CUdeviceptr src = (CUdeviceptr)(uintptr_t)c->bufs[0]->ptr + c->offset;
  /* Pinned: asynchronous, copied to the caller when the read retires.
   * Otherwise straight to the caller (the driver blocks until it is done). */
  if (staging_take(dev, c, c->len)) return weft_cuda_copy_dtoh(cs, c->staging, src, (size_t)c->len);
  return weft_cuda_copy_dtoh(cs, c->data, src, (size_t)c->len);
}

void weft__gpu_staging_done(weft_device *dev, cmd *c, bool deliver) {
  void *p = c->staging;
  if (!p) return;
  if (deliver) memcpy(c->data, p, (size_t)c->len);
  struct weft_gpu *g = dev->gpu;
  uint32_t k = staging_class(c->len); /* the class it was taken from */
  memcpy(p, &g->staging[k], sizeof(void *));
  g->staging[k] = p;
  c->staging = NULL;
}
