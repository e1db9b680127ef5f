/* The storage interface: where the bytes of a device live. Host storage is
 * the first implementation; the CUDA backend adds device storage behind the
 * same vtable. Storage is owned by the scheduler thread: no call here is
 * thread-safe on its own.
 *
 * Errors: a request that can never fit is BufferTooBig,
 * one that does not fit now is OutOfMemory (a driver out-of-memory is always
 * the latter: reclaiming and retrying may help). */
#ifndef WEFT_MEMORY_STORAGE_H
#define WEFT_MEMORY_STORAGE_H

#include <weft/weft.h>

typedef struct weft_storage_handle {
  uint64_t id;   /* storage id, non-zero while allocated */
  uint64_t size; /* bytes requested */
  void *ptr;     /* host-addressable pointer (host storage) */
} weft_storage_handle;

typedef struct weft_storage weft_storage;
typedef struct weft_storage_vtable {
  /* Allocates |size| bytes aligned to alignment(). */
  weft_status (*alloc)(weft_storage *s, uint64_t size, weft_storage_handle *out);
  /* Releases an allocation (possibly deferred until flush). */
  void (*dealloc)(weft_storage *s, weft_storage_handle *h);
  /* Completes deferred deallocations. */
  void (*flush)(weft_storage *s);
  /* Resolves a handle to its address; StorageHandleNotFound if it is gone. */
  weft_status (*get)(weft_storage *s, const weft_storage_handle *h, void **out);
  /* Copies |len| bytes between two allocations (relocation). */
  weft_status (*copy)(weft_storage *s, const weft_storage_handle *src, uint64_t src_off,
                      const weft_storage_handle *dst, uint64_t dst_off, uint64_t len);
  uint64_t (*alignment)(const weft_storage *s);
  uint64_t (*bytes_allocated)(const weft_storage *s);
  void (*destroy)(weft_storage *s);
} weft_storage_vtable;

struct weft_storage {
  const weft_storage_vtable *vt;
};

/* Host storage on |alloc| (the device's allocator). |capacity| 0: no cap;
 * otherwise allocations past it fail with OutOfMemory and single requests
 * larger than it with BufferTooBig. */
WEFT_MUST_USE_RESULT weft_status weft_storage_host_create(const weft_allocator *alloc,
                                                          uint64_t capacity, weft_storage **out);

static inline WEFT_MUST_USE_RESULT weft_status weft_storage_alloc(weft_storage *s, uint64_t size,
                                                                  weft_storage_handle *out) {
  return s->vt->alloc(s, size, out);
}
static inline void weft_storage_dealloc(weft_storage *s, weft_storage_handle *h) {
  s->vt->dealloc(s, h);
}
static inline WEFT_MUST_USE_RESULT weft_status weft_storage_get(weft_storage *s,
                                                                const weft_storage_handle *h,
                                                                void **out) {
  return s->vt->get(s, h, out);
}
static inline void weft_storage_flush(weft_storage *s) {
  s->vt->flush(s);
}
static inline uint64_t weft_storage_alignment(const weft_storage *s) {
  return s->vt->alignment(s);
}
static inline uint64_t weft_storage_bytes_allocated(const weft_storage *s) {
  return s->vt->bytes_allocated(s);
}
static inline WEFT_MUST_USE_RESULT weft_status weft_storage_copy(weft_storage *s,
                                                                 const weft_storage_handle *src,
                                                                 uint64_t src_off,
                                                                 const weft_storage_handle *dst,
                                                                 uint64_t dst_off, uint64_t len) {
  return s->vt->copy(s, src, src_off, dst, dst_off, len);
}
/* Failpoint: the |n|th allocation from now (1-based) fails with |kind|; 0 disarms. */
void weft_storage_host_fail_at(weft_storage *s, uint64_t n, weft_error_kind kind);
/* Failpoint: allocation call number |n| (absolute, 1-based since creation)
 * fails with |kind|. At most 16 are kept; false when full. |n| == 0 clears
 * every one set this way. */
bool weft_storage_host_fail_call(weft_storage *s, uint64_t n, weft_error_kind kind);
/* The number of alloc calls this storage has served or refused. */
uint64_t weft_storage_host_alloc_calls(const weft_storage *s);
static inline void weft_storage_destroy(weft_storage *s) {
  if (s) s->vt->destroy(s);
}

#endif
