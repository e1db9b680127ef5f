/* The device on the CUDA backend: opening (driver, context, storage), the
 * lanes its streams run on, modules and CUDA kernels, the launch, copy and
 * read bodies its tasks enqueue, pinned staging for reads, and poisoning
 * from sticky driver errors. The scheduler (device.c, multistream.c) is the
 * same as on the host backend; see docs/cuda.md. */
#include <inttypes.h>
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "memory/cuda/storage_cuda.h"
#include "scheduler/device.h"
#include "streams/cuda/lane.h"

#define MAX_MODULES     1024u
#define STAGING_MIN     ((size_t)4096)
#define STAGING_CLASSES 13u /* 4 KiB .. 16 MiB; larger reads copy straight to the caller */

struct weft_gpu {
  weft_lanes *lanes;
  uint64_t capacity;
  pthread_mutex_t lock; /* module loads (client threads) */
  weft_cuda_module *modules[MAX_MODULES];
  _Atomic uint32_t nmodules;
  /* Pinned blocks for reads, by class; a free block's first bytes link it. */
  void *staging[STAGING_CLASSES];
};

static weft_cuda_context *ctx_of(weft_device *dev) {
  return weft_lanes_context(dev->gpu->lanes);
}

/* ---- open and close ---------------------------------------------------------------------- */

weft_status weft__gpu_open(weft_device *dev, const weft_device_options *o) {
  struct weft_gpu *g = weft__calloc(&dev->alloc, sizeof(*g), WEFT_CACHELINE);
  if (!g) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*g), "the CUDA backend");
  pthread_mutex_init(&g->lock, NULL);
  weft_status st = weft_lanes_open(&dev->alloc, o->ordinal, &dev->wake, &g->lanes);
  uint64_t total = 0;
  if (!st)
    st = weft_storage_cuda_create(&dev->alloc, weft_lanes_driver(g->lanes), &total, &dev->storage);
  if (st) {
    weft_lanes_close(g->lanes);
    pthread_mutex_destroy(&g->lock);
    weft__free(&dev->alloc, g, sizeof(*g), WEFT_CACHELINE);
    return st;
  }
  weft_storage_cuda_set_poison(dev->storage,
                               weft_cuda_context_poison(weft_lanes_context(g->lanes)));
  weft_storage_cuda_cap(dev->storage, o->memory_capacity);
  g->capacity = o->memory_capacity && o->memory_capacity < total ? o->memory_capacity : total;
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
  weft_lanes_close(g->lanes);
  pthread_mutex_destroy(&g->lock);
  dev->gpu = NULL;
  weft__free(&dev->alloc, g, sizeof(*g), WEFT_CACHELINE);
}

weft_status weft__gpu_stream_create(weft_device *dev, uint32_t slot, weft_stream **out) {
  return weft_lanes_stream_create(dev->gpu->lanes, slot, out);
}

bool weft__gpu_fail_call(weft_device *dev, uint64_t n, weft_error_kind kind) {
  return weft_storage_cuda_fail_call(dev->storage, n, kind);
}

uint64_t weft__gpu_capacity(weft_device *dev) {
  return dev->gpu->capacity;
}

void weft__gpu_stats(weft_device *dev, weft_device_stats *out) {
  weft_lanes_stats s;
  weft_lanes_get_stats(dev->gpu->lanes, &s);
  out->gpu_event_waits = s.event_waits;
  out->gpu_waits_complete = s.waits_complete;
  out->gpu_events_created = s.events_created;
  out->gpu_marks = s.marks;
}

/* ---- poisoning --------------------------------------------------------------------------- */

void weft__gpu_check_poison(weft_device *dev, bool poll) {
  weft_lanes *l = dev->gpu->lanes;
  if (!(poll ? weft_lanes_poll(l) : weft_lanes_poisoned(l))) return;
  if (!weft__dev_poisoned(dev)) {
    weft_status why = weft_cuda_context_poisoned(ctx_of(dev));
    if (!why) why = weft_error_make(WEFT_ERR_DEVICE_POISONED, "CUDA context faulted");
    weft__dev_poison(dev, why);
  }
  weft_lanes_force_complete(l); /* nothing will complete what was queued */
}

/* ---- modules and kernels ----------------------------------------------------------------- */

weft_status weft_module_load(weft_device *dev, const void *image, size_t bytes, weft_module *out) {
  if (out) out->id = 0;
  weft_status st = weft__check_device(dev);
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
  weft_status st = weft__check_device(dev);
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

weft_status weft__gpu_launch(weft_device *dev, cmd *c) {
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
  return weft_cuda_launch(weft_lane_cuda_stream(c->task.on), (CUfunction)k->gpu_fn, grid, block, 0,
                          args);
}

weft_status weft__gpu_write(weft_device *dev, cmd *c) {
  (void)dev;
  if (!c->len) return NULL;
  /* A pageable source is staged by the driver before the call returns. */
  return weft_cuda_copy_htod(weft_lane_cuda_stream(c->task.on),
                             (CUdeviceptr)(uintptr_t)c->bufs[0]->ptr + c->offset, c->data,
                             (size_t)c->len);
}

weft_status weft__gpu_read(weft_device *dev, cmd *c) {
  struct weft_gpu *g = dev->gpu;
  weft_cuda_stream *cs = weft_lane_cuda_stream(c->task.on);
  CUdeviceptr src = (CUdeviceptr)(uintptr_t)c->bufs[0]->ptr + c->offset;
  uint32_t k = 0;
  while (k < STAGING_CLASSES && (STAGING_MIN << k) < c->len) k++;
  if (k < STAGING_CLASSES) { /* pinned: the copy is asynchronous, the scheduler goes on */
    void *p = g->staging[k];
    if (p) {
      memcpy(&g->staging[k], p, sizeof(void *));
    } else {
      weft_status st = weft_cuda_pinned_alloc(weft_lanes_driver(g->lanes), STAGING_MIN << k, &p);
      if (st) {
        weft_error_free(st);
        p = NULL; /* no pinned memory: copy straight to the caller (the driver blocks) */
      }
    }
    if (p) {
      c->staging = p;
      c->staging_class = k;
      return weft_cuda_copy_dtoh(cs, p, src, (size_t)c->len);
    }
  }
  return weft_cuda_copy_dtoh(cs, c->data, src, (size_t)c->len);
}

void weft__gpu_read_done(weft_device *dev, cmd *c, bool deliver) {
  void *p = c->staging;
  if (!p) return;
  if (deliver) memcpy(c->data, p, (size_t)c->len);
  struct weft_gpu *g = dev->gpu;
  memcpy(p, &g->staging[c->staging_class], sizeof(void *));
  g->staging[c->staging_class] = p;
  c->staging = NULL;
}
