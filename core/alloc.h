/* Allocator injection: every internal and host-storage allocation of a device
 * goes through one weft_allocator (see weft.h). Errors are the exception: they
 * use libc so that an allocation failure can still be reported. */
#ifndef WEFT_CORE_ALLOC_H
#define WEFT_CORE_ALLOC_H

#include <weft/weft.h>

#define WEFT_CACHELINE 64

static inline void *weft__alloc(const weft_allocator *a, size_t size, size_t align) {
  return a->alloc(a->self, size, align);
}
static inline void weft__free(const weft_allocator *a, void *p, size_t size, size_t align) {
  if (p) a->free(a->self, p, size, align);
}
/* Zeroed allocation. */
void *weft__calloc(const weft_allocator *a, size_t size, size_t align);
/* Grows the array |*arr| of |*cap| elements of |elem| bytes (doubling, from
 * 4) until it holds |need|, keeping the first |*cap| elements. false when
 * memory runs out (the array is unchanged). */
bool weft__grow(const weft_allocator *a, void **arr, uint32_t *cap, uint32_t need, size_t elem);

#endif
