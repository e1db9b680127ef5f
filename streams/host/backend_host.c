/* The host backend: buffers in host memory (memory/storage_host.c), streams
 * on the host pool (streams/host/pool.c), host kernels run over their grid
 * by the pool thread running the stream, copies with memcpy. Everything a
 * task body does is done when it returns, so the backend is not deferred
 * and leaves the polling entries NULL: a stream raises the progress signal
 * itself. It has no modules and no capture graphs (replays re-run the
 * recorded launches). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "streams/backend.h"

typedef struct host_backend {
  weft_backend_base base; /* first */
  const weft_allocator *alloc;
  weft_storage *storage;
  weft_host_pool *pool;
  uint64_t capacity; /* options.memory_capacity (0: none) */
} host_backend;

static host_backend *host_of(weft_backend_base *b) {
  return (host_backend *)b;
}

static void host_destroy(weft_backend_base *b) {
  host_backend *h = host_of(b);
  if (h->storage) weft_storage_destroy(h->storage);
  weft_host_pool_destroy(h->pool); /* and its streams */
  weft__free(h->alloc, h, sizeof(*h), WEFT_CACHELINE);
}

static weft_storage *host_storage(weft_backend_base *b) {
  return host_of(b)->storage;
}

static uint64_t host_capacity(weft_backend_base *b) {
  return host_of(b)->capacity;
}

static void host_enter(weft_backend_base *b) {
  (void)b; /* any thread may use host memory and the pool */
}

static weft_status host_stream_create(weft_backend_base *b, uint32_t slot, weft_stream **out) {
  return weft_stream_host_create(host_of(b)->pool, slot, out);
}

static bool host_fail_call(weft_backend_base *b, uint64_t n, weft_error_kind kind) {
  return weft_storage_host_fail_call(host_of(b)->storage, n, kind);
}

static void host_info(weft_backend_base *b, weft_device_info *out) {
  out->backend = WEFT_BACKEND_HOST;
  snprintf(out->name, sizeof(out->name), "host");
  out->total_memory = host_of(b)->capacity;
}

static void host_stats(weft_backend_base *b, weft_device_stats *out) {
  out->streams_recovered = weft_host_pool_recovered(host_of(b)->pool);
}

static void host_dump(weft_backend_base *b, FILE *f) {
  weft_host_pool_dump(host_of(b)->pool, f);
}

static weft_status host_kernels(weft_backend_base *b) {
  (void)b;
  return NULL;
}

static weft_status host_module_load(weft_backend_base *b, const void *image, size_t bytes,
                                    weft_module *out) {
  (void)b, (void)image, (void)bytes, (void)out;
  return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                         "modules run on the CUDA backend; this device is a host device "
                         "(weft_kernel_host)");
}

static weft_status host_kernel_resolve(weft_backend_base *b, weft_module module, const char *entry,
                                       const char *params, void **out_impl) {
  (void)b, (void)module, (void)entry, (void)params, (void)out_impl;
  return weft_error_make(WEFT_ERR_UNSUPPORTED_IO_OPERATION,
                         "CUDA kernels run on the CUDA backend; this device is a host device "
                         "(weft_kernel_host)");
}

/* A built-in kernel's body: a copy, a fill, or the embedder's function
 * (once, with host addresses and no stream). */
static weft_status host_builtin(const weft_backend_launch *l, const uint64_t *sizes) {
  const weft_backend_kernel *k = l->kernel;
  switch (k->builtin) {
  case WEFT_BUILTIN_COPY: /* {src READ, dst WRITE}, equal sizes; may share a buffer, not bytes */
    memmove(l->addrs[1], l->addrs[0], (size_t)sizes[1]);
    return NULL;
  case WEFT_BUILTIN_FILL:
    memset(l->addrs[0], *(const uint8_t *)l->scalars, (size_t)sizes[0]);
    return NULL;
  default: {
    uint64_t addrs[WEFT_MAX_BINDINGS];
    for (uint32_t i = 0; i < l->nb; i++) addrs[i] = (uint64_t)(uintptr_t)l->addrs[i];
    weft_native_ctx ctx = {.stream = NULL,
                           .addresses = addrs,
                           .sizes = sizes,
                           .num_buffers = l->nb,
                           .scalars = l->scalar_bytes ? l->scalars : NULL,
                           .scalar_bytes = l->scalar_bytes};
    return k->native(&ctx, k->user);
  }
  }
}

/* Runs a host kernel over its grid, block by block (x fastest). */
static weft_status host_grid(const weft_backend_launch *l, const uint64_t *sizes) {
  const weft_backend_kernel *k = l->kernel;
  weft_kernel_ctx ctx = {.buffers = l->addrs,
                         .sizes = sizes,
                         .num_buffers = l->nb,
                         .scalars = l->scalar_bytes ? l->scalars : NULL,
                         .scalar_bytes = l->scalar_bytes};
  memcpy(ctx.grid, l->grid, sizeof(ctx.grid));
  memcpy(ctx.block, l->block, sizeof(ctx.block));
  weft_status err = NULL;
  for (uint32_t z = 0; z < l->grid[2] && !err; z++)
    for (uint32_t y = 0; y < l->grid[1] && !err; y++)
      for (uint32_t x = 0; x < l->grid[0] && !err; x++) {
        ctx.block_idx[0] = x, ctx.block_idx[1] = y, ctx.block_idx[2] = z;
        err = k->fn(&ctx, k->user);
      }
  return err;
}

/* A host kernel, or a built-in kernel's body. */
static weft_status host_launch(weft_backend_base *b, weft_stream *on,
                               const weft_backend_launch *l) {
  (void)b, (void)on;
  uint64_t sizes[WEFT_MAX_BINDINGS];
  for (uint32_t i = 0; i < l->nb; i++) sizes[i] = l->bindings[i].size;
  const weft_backend_kernel *k = l->kernel;
  weft_status err = __builtin_expect(k->builtin != WEFT_BUILTIN_NONE, 0) ? host_builtin(l, sizes)
                                                                         : host_grid(l, sizes);
  /* The kinds weft reports about other failures would make this launch's
   * report contradict itself ("root: Skipped"): such a return is the
   * launch's own failure. */
  weft_error_kind kind = weft_error_kind_of(err);
  if (weft__error_kind_is_derived(kind))
    err = weft_error_wrap(WEFT_ERR_GENERIC, 0, err,
                          "kernel '%s' returned %s, a kind only weft itself reports", k->name,
                          weft_error_kind_name(kind));
  return err;
}

static weft_status host_write(weft_backend_base *b, weft_stream *on, const weft_copy_desc *c) {
  (void)b, (void)on;
  memcpy(c->device, c->host, (size_t)c->len);
  return NULL;
}

static weft_status host_read(weft_backend_base *b, weft_stream *on, const weft_copy_desc *c) {
  (void)b, (void)on;
  memcpy(c->host, c->device, (size_t)c->len);
  return NULL;
}

static const weft_backend_vtable host_vtable = {
    .destroy = host_destroy,
    .storage = host_storage,
    .capacity = host_capacity,
    .enter = host_enter,
    .stream_create = host_stream_create,
    .fail_call = host_fail_call,
    .info = host_info,
    .stats = host_stats,
    .dump = host_dump,
    .host_kernels = host_kernels,
    .module_load = host_module_load,
    .kernel_resolve = host_kernel_resolve,
    .launch = host_launch,
    .write = host_write,
    .read = host_read,
};

weft_status weft_backend_host_open(const weft_backend_config *cfg, weft_backend_base **out) {
  *out = NULL;
  host_backend *h = weft__calloc(cfg->alloc, sizeof(*h), WEFT_CACHELINE);
  if (!h) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*h), "the host backend");
  h->base.vt = &host_vtable;
  h->alloc = cfg->alloc;
  h->capacity = cfg->options->memory_capacity;
  weft_status st = weft_storage_host_create(cfg->alloc, h->capacity, &h->storage);
  if (!st && h->capacity && h->capacity < weft_storage_alignment(h->storage))
    st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "memory_capacity %" PRIu64 " is below the storage alignment (%" PRIu64
                         " bytes): the device could hold no buffer",
                         h->capacity, weft_storage_alignment(h->storage));
  if (!st)
    st = weft_host_pool_create(cfg->alloc, cfg->progress, cfg->worker_ctx,
                               cfg->options->host_threads, &h->pool);
  if (st) {
    host_destroy(&h->base);
    return st;
  }
  *out = &h->base;
  return NULL;
}
