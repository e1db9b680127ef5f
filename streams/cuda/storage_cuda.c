/* Device storage on cuMemAllocAsync / cuMemFreeAsync (stream-ordered) or
 * cuMemAlloc / cuMemFree; see storage_cuda.h. */
#include "streams/cuda/storage_cuda.h"

#include <inttypes.h>
#include <string.h>

#include "core/alloc.h"

typedef struct pending_free {
  CUdeviceptr ptr;
  uint64_t bytes;
  bool async; /* stream-ordered: freed with cuMemFreeAsync */
} pending_free;

typedef struct cuda_storage {
  weft_storage base;
  const weft_allocator *alloc;
  const weft_cuda_driver *d;
  weft_cuda_poison *poison;
  CUstream stream;
  uint64_t total, allocated, next_id;
  uint64_t calls, fail_at; /* failpoint: the fail_at-th call fails (0: never) */
  weft_error_kind fail_kind;
  uint64_t fail_calls[16]; /* more failpoints: absolute call numbers (alloc#N) */
  weft_error_kind fail_kinds[16];
  uint32_t nfail;
  bool capped; /* total is the caller's cap, below the device's memory */
  bool async;  /* stream-ordered allocation on |stream| (weft_storage_cuda_use_async) */
  pending_free *pending;
  uint32_t npending, cap_pending;
} cuda_storage;

static uint64_t padded(uint64_t size) {
  if (!size) size = 1;
  return (size + WEFT_STORAGE_CUDA_ALIGN - 1) & ~(uint64_t)(WEFT_STORAGE_CUDA_ALIGN - 1);
}

static weft_status cu_alloc(weft_storage *s, uint64_t size, weft_storage_handle *out) {
  cuda_storage *c = (cuda_storage *)s;
  if (++c->calls == c->fail_at)
    return weft_error_make_sized(c->fail_kind, size, "failpoint: CUDA storage allocation %" PRIu64,
                                 c->calls);
  for (uint32_t i = 0; i < c->nfail; i++)
    if (c->fail_calls[i] == c->calls)
      return weft_error_make_sized(c->fail_kinds[i], size,
                                   "failpoint: CUDA storage allocation %" PRIu64, c->calls);
  if (size > c->total || padded(size) > c->total)
    return weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, size,
                                 "%" PRIu64 " bytes requested but the CUDA device has %" PRIu64
                                 " bytes in all",
                                 size, c->total);
  uint64_t bytes = padded(size);
  if (c->capped && bytes > c->total - c->allocated)
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, size,
                                 "%" PRIu64 " bytes requested; %" PRIu64 " of the %" PRIu64
                                 " bytes weft may use on the CUDA device are taken",
                                 size, c->allocated, c->total);
  if (bytes > SIZE_MAX)
    return weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, size, "size does not fit size_t");
  CUdeviceptr p = 0;
  bool async = c->async;
  CUresult r = CUDA_SUCCESS;
  if (async) {
    /* Stream-ordered, then synchronised with its (otherwise idle) stream:
     * the memory is usable from every stream when this returns. */
    r = c->d->cuMemAllocAsync(&p, (size_t)bytes, c->stream);
    if (r == CUDA_SUCCESS) {
      r = c->d->cuStreamSynchronize(c->stream);
      if (r != CUDA_SUCCESS) {
        if (c->d->cuMemFreeAsync(p, c->stream) != CUDA_SUCCESS) c->d->cuMemFree(p);
        p = 0;
      }
    } else if (r == CUDA_ERROR_NOT_SUPPORTED) { /* no memory pools here: the plain call */
      c->async = async = false;
    }
  }
  if (!async) r = c->d->cuMemAlloc(&p, (size_t)bytes);
  if (r != CUDA_SUCCESS)
    return weft_cuda_error_ex(c->d, c->poison, WEFT_CUDA_OP_ANY, r, size, "%s(%" PRIu64 " bytes)",
                              async ? "cuMemAllocAsync" : "cuMemAlloc", bytes);
  c->allocated += bytes;
  /* The id's low bit says how it was allocated (and so how to free it). */
  out->id = (++c->next_id << 1) | (async ? 1u : 0u);
  out->size = size;
  out->ptr = (void *)(uintptr_t)p;
  return NULL;
}

static void free_now(cuda_storage *c, CUdeviceptr p, uint64_t bytes, bool async) {
  /* cuMemFree synchronises the whole device; a stream-ordered free does not
   * (the memory's users have all completed: weft frees only retired memory). */
  CUresult r = async ? c->d->cuMemFreeAsync(p, c->stream) : c->d->cuMemFree(p);
  if (r != CUDA_SUCCESS && async) r = c->d->cuMemFree(p); /* e.g. a faulted context */
  /* The driver releases the memory even when it reports a sticky error. */
  if (r != CUDA_SUCCESS) {
    weft_status st = weft_cuda_error_ex(c->d, c->poison, WEFT_CUDA_OP_ANY, r, bytes,
                                        "cuMemFree(%" PRIu64 " bytes)", bytes);
    weft_error_free(st);
  }
  c->allocated -= bytes;
}

static void cu_dealloc(weft_storage *s, weft_storage_handle *h) {
  cuda_storage *c = (cuda_storage *)s;
  if (!h->id) return;
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)h->ptr;
  uint64_t bytes = padded(h->size);
  bool async = (h->id & 1u) != 0;
  h->id = 0;
  h->ptr = NULL;
  if (!weft__grow(c->alloc, (void **)&c->pending, &c->cap_pending, c->npending + 1,
                  sizeof(*c->pending))) {
    free_now(c, p, bytes, async); /* no room to defer: free now */
    return;
  }
  c->pending[c->npending++] = (pending_free){p, bytes, async};
}

static void cu_flush(weft_storage *s) {
  cuda_storage *c = (cuda_storage *)s;
  bool any_async = false;
  for (uint32_t i = 0; i < c->npending; i++) {
    free_now(c, c->pending[i].ptr, c->pending[i].bytes, c->pending[i].async);
    any_async |= c->pending[i].async;
  }
  /* Stream-ordered frees return their memory once the stream gets there:
   * wait for it, so a retry after a flush sees the memory. A fault drops
   * what was queued: those are freed again, directly (a failure for the
   * ones that did run is harmless). */
  CUresult r = any_async ? c->d->cuStreamSynchronize(c->stream) : CUDA_SUCCESS;
  if (r != CUDA_SUCCESS) {
    weft_error_free(weft_cuda_error_ex(c->d, c->poison, WEFT_CUDA_OP_ANY, r, 0,
                                       "cuStreamSynchronize (stream-ordered frees)"));
    for (uint32_t i = 0; i < c->npending; i++)
      if (c->pending[i].async) c->d->cuMemFree(c->pending[i].ptr);
  }
  c->npending = 0;
}

static weft_status cu_get(weft_storage *s, const weft_storage_handle *h, void **out) {
  (void)s;
  if (!h->id || !h->ptr)
    return weft_error_make(WEFT_ERR_STORAGE_HANDLE_NOT_FOUND,
                           "CUDA storage holds no allocation for storage id %" PRIu64, h->id);
  *out = h->ptr; /* a CUdeviceptr, not a host address */
  return NULL;
}

static weft_status cu_copy(weft_storage *s, const weft_storage_handle *src, uint64_t src_off,
                           const weft_storage_handle *dst, uint64_t dst_off, uint64_t len) {
  cuda_storage *c = (cuda_storage *)s;
  void *a = NULL, *b = NULL;
  weft_status st = cu_get(s, src, &a);
  if (!st) st = cu_get(s, dst, &b);
  if (st) return st;
  if (src_off > src->size || len > src->size - src_off || dst_off > dst->size ||
      len > dst->size - dst_off)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "CUDA storage copy of %" PRIu64 " bytes out of range", len);
  if (!len) return NULL;
  CUdeviceptr from = (CUdeviceptr)(uintptr_t)a + src_off, to = (CUdeviceptr)(uintptr_t)b + dst_off;
  CUresult r = c->d->cuMemcpyDtoDAsync(to, from, (size_t)len, c->stream);
  if (r != CUDA_SUCCESS)
    return weft_cuda_error_ex(c->d, c->poison, WEFT_CUDA_OP_ANY, r, 0,
                              "cuMemcpyDtoDAsync(%" PRIu64 " bytes)", len);
  r = c->d->cuStreamSynchronize(c->stream);
  return weft_cuda_error_ex(c->d, c->poison, WEFT_CUDA_OP_ANY, r, 0,
                            "cuStreamSynchronize after a %" PRIu64 "-byte storage copy", len);
}

static uint64_t cu_alignment(const weft_storage *s) {
  (void)s;
  return WEFT_STORAGE_CUDA_ALIGN;
}

static uint64_t cu_bytes(const weft_storage *s) {
  return ((const cuda_storage *)s)->allocated;
}

static void cu_destroy(weft_storage *s) {
  cuda_storage *c = (cuda_storage *)s;
  cu_flush(s);
  weft__free(c->alloc, c->pending, (size_t)c->cap_pending * sizeof(*c->pending),
             16); /* weft__grow aligns to 16 */
  weft__free(c->alloc, c, sizeof(*c), WEFT_CACHELINE);
}

static const weft_storage_vtable cuda_vt = {
    .alloc = cu_alloc,
    .dealloc = cu_dealloc,
    .flush = cu_flush,
    .get = cu_get,
    .copy = cu_copy,
    .alignment = cu_alignment,
    .bytes_allocated = cu_bytes,
    .destroy = cu_destroy,
};

weft_status weft_storage_cuda_create(const weft_allocator *alloc, const weft_cuda_driver *d,
                                     uint64_t *capacity_out, weft_storage **out) {
  if (!alloc || !d || !d->lib || !out)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_storage_cuda_create: NULL allocator, driver or out, or an "
                           "unloaded driver");
  size_t free_b = 0, total = 0;
  CUresult r = d->cuMemGetInfo(&free_b, &total);
  if (r != CUDA_SUCCESS) return weft_cuda_error(d, r, "cuMemGetInfo (CUDA storage creation)");
  cuda_storage *c = weft__calloc(alloc, sizeof(*c), WEFT_CACHELINE);
  if (!c) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*c), "CUDA storage");
  c->base.vt = &cuda_vt;
  c->alloc = alloc;
  c->d = d;
  c->total = total;
  if (capacity_out) *capacity_out = total;
  *out = &c->base;
  return NULL;
}

void weft_storage_cuda_set_stream(weft_storage *s, CUstream stream) {
  ((cuda_storage *)s)->stream = stream;
}

bool weft_storage_cuda_use_async(weft_storage *s) {
  cuda_storage *c = (cuda_storage *)s;
  c->async = c->stream && c->d->cuMemAllocAsync && c->d->cuMemFreeAsync;
  return c->async;
}

void weft_storage_cuda_set_poison(weft_storage *s, weft_cuda_poison *poison) {
  ((cuda_storage *)s)->poison = poison;
}

void weft_storage_cuda_fail_at(weft_storage *s, uint64_t n, weft_error_kind kind) {
  cuda_storage *c = (cuda_storage *)s;
  c->fail_at = n ? c->calls + n : 0;
  c->fail_kind = kind;
}

bool weft_storage_cuda_fail_call(weft_storage *s, uint64_t n, weft_error_kind kind) {
  cuda_storage *c = (cuda_storage *)s;
  if (n == 0) {
    c->nfail = 0;
    return true;
  }
  if (c->nfail == 16) return false;
  c->fail_calls[c->nfail] = n;
  c->fail_kinds[c->nfail++] = kind;
  return true;
}

void weft_storage_cuda_cap(weft_storage *s, uint64_t capacity) {
  cuda_storage *c = (cuda_storage *)s;
  if (capacity && capacity < c->total) {
    c->total = capacity;
    c->capped = true;
  }
}

uint64_t weft_storage_cuda_pending(const weft_storage *s) {
  return ((const cuda_storage *)s)->npending;
}

weft_status weft_cuda_pinned_alloc(const weft_cuda_driver *d, size_t size, void **out) {
  if (!d || !out)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "weft_cuda_pinned_alloc: NULL argument");
  *out = NULL;
  CUresult r = d->cuMemHostAlloc(out, size ? size : 1, CU_MEMHOSTALLOC_PORTABLE);
  if (r != CUDA_SUCCESS) {
    *out = NULL;
    return weft_cuda_error_ex(d, NULL, WEFT_CUDA_OP_ANY, r, size, "cuMemHostAlloc(%zu bytes)",
                              size);
  }
  return NULL;
}

weft_status weft_cuda_pinned_free(const weft_cuda_driver *d, void *p) {
  if (!p) return NULL;
  return weft_cuda_error(d, d->cuMemFreeHost(p), "cuMemFreeHost");
}
