/* Host storage: allocations on the device's allocator (a private jemalloc
 * arena by default), with an optional capacity so that out-of-memory is
 * testable without a GPU. Deallocation is immediate: host memory has no
 * in-flight device work once the scheduler frees it. */
#include <inttypes.h>
#include <string.h>

#include "core/alloc.h"
#include "memory/storage.h"

#define HOST_ALIGN 64u

typedef struct host_storage {
  weft_storage base;
  const weft_allocator *alloc;
  uint64_t capacity, allocated, next_id;
  uint64_t calls, fail_at; /* failpoint: the fail_at-th call fails (0: never) */
  weft_error_kind fail_kind;
  uint64_t fail_calls[16]; /* more failpoints: absolute call numbers */
  weft_error_kind fail_kinds[16];
  uint32_t nfail;
} host_storage;

static uint64_t padded(uint64_t size) {
  return (size + HOST_ALIGN - 1) & ~(uint64_t)(HOST_ALIGN - 1);
}

static weft_status host_alloc(weft_storage *s, uint64_t size, weft_storage_handle *out) {
  host_storage *h = (host_storage *)s;
  uint64_t bytes = padded(size ? size : 1);
  if (++h->calls == h->fail_at)
    return weft_error_make_sized(h->fail_kind, size, "failpoint: storage allocation %" PRIu64,
                                 h->calls);
  for (uint32_t i = 0; i < h->nfail; i++)
    if (h->fail_calls[i] == h->calls)
      return weft_error_make_sized(h->fail_kinds[i], size, "failpoint: storage allocation %" PRIu64,
                                   h->calls);
  if (h->capacity && bytes > h->capacity)
    return weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, size,
                                 "the host device holds at most %" PRIu64 " bytes", h->capacity);
  if (h->capacity && h->allocated + bytes > h->capacity)
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, size,
                                 "%" PRIu64 " of %" PRIu64 " bytes of the host device in use",
                                 h->allocated, h->capacity);
  void *p = bytes <= SIZE_MAX ? weft__alloc(h->alloc, (size_t)bytes, HOST_ALIGN) : NULL;
  if (!p)
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, size, "the host allocator is exhausted");
  h->allocated += bytes;
  out->id = ++h->next_id;
  out->size = size;
  out->ptr = p;
  return NULL;
}

static void host_dealloc(weft_storage *s, weft_storage_handle *sh) {
  host_storage *h = (host_storage *)s;
  if (!sh->id) return;
  uint64_t bytes = padded(sh->size ? sh->size : 1);
  weft__free(h->alloc, sh->ptr, (size_t)bytes, HOST_ALIGN);
  h->allocated -= bytes;
  sh->id = 0;
  sh->ptr = NULL;
}

static void host_flush(weft_storage *s) {
  (void)s; /* nothing is deferred on the host */
}

static weft_status host_get(weft_storage *s, const weft_storage_handle *sh, void **out) {
  (void)s;
  if (!sh->id || !sh->ptr)
    return weft_error_make(WEFT_ERR_STORAGE_HANDLE_NOT_FOUND,
                           "host storage holds no allocation for storage id %" PRIu64, sh->id);
  *out = sh->ptr;
  return NULL;
}

static weft_status host_copy(weft_storage *s, const weft_storage_handle *src, uint64_t src_off,
                             const weft_storage_handle *dst, uint64_t dst_off, uint64_t len) {
  void *a = NULL, *b = NULL;
  weft_status st = host_get(s, src, &a);
  if (!st) st = host_get(s, dst, &b);
  if (st) return st;
  if (src_off > src->size || len > src->size - src_off || dst_off > dst->size ||
      len > dst->size - dst_off)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "storage copy of %" PRIu64 " bytes out of range", len);
  memmove((char *)b + dst_off, (const char *)a + src_off, len);
  return NULL;
}

void weft_storage_host_fail_at(weft_storage *s, uint64_t n, weft_error_kind kind) {
  host_storage *h = (host_storage *)s;
  h->fail_at = n ? h->calls + n : 0;
  h->fail_kind = kind;
}

bool weft_storage_host_fail_call(weft_storage *s, uint64_t n, weft_error_kind kind) {
  host_storage *h = (host_storage *)s;
  if (n == 0) {
    h->nfail = 0;
    return true;
  }
  if (h->nfail == 16) return false;
  h->fail_calls[h->nfail] = n;
  h->fail_kinds[h->nfail++] = kind;
  return true;
}

uint64_t weft_storage_host_alloc_calls(const weft_storage *s) {
  return ((const host_storage *)s)->calls;
}

static uint64_t host_alignment(const weft_storage *s) {
  (void)s;
  return HOST_ALIGN;
}

static uint64_t host_bytes(const weft_storage *s) {
  return ((const host_storage *)s)->allocated;
}

static void host_destroy(weft_storage *s) {
  host_storage *h = (host_storage *)s;
  weft__free(h->alloc, h, sizeof(*h), WEFT_CACHELINE);
}

static const weft_storage_vtable host_vt = {
    .alloc = host_alloc,
    .dealloc = host_dealloc,
    .flush = host_flush,
    .get = host_get,
    .copy = host_copy,
    .alignment = host_alignment,
    .bytes_allocated = host_bytes,
    .destroy = host_destroy,
};

weft_status weft_storage_host_create(const weft_allocator *alloc, uint64_t capacity,
                                     weft_storage **out) {
  host_storage *h = weft__calloc(alloc, sizeof(*h), WEFT_CACHELINE);
  if (!h) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*h), "host storage");
  h->base.vt = &host_vt;
  h->alloc = alloc;
  h->capacity = capacity;
  *out = &h->base;
  return NULL;
}
