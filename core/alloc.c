/* The allocators: a private jemalloc arena (default), libc (sanitizer
 * builds, where ASan and valgrind are blind inside mallocx memory), and a
 * counting allocator for tests. */
#include "core/alloc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_HAVE_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

void *weft__calloc(const weft_allocator *a, size_t size, size_t align) {
  void *p = weft__alloc(a, size, align);
  if (p) memset(p, 0, size);
  return p;
}

bool weft__grow(const weft_allocator *a, void **arr, uint32_t *cap, uint32_t need, size_t elem) {
  if (need <= *cap) return true;
  uint32_t nc = *cap ? *cap * 2 : 4;
  while (nc < need) nc *= 2;
  void *n = weft__alloc(a, (size_t)nc * elem, 16);
  if (!n) return false;
  if (*arr) {
    memcpy(n, *arr, (size_t)*cap * elem);
    weft__free(a, *arr, (size_t)*cap * elem, 16);
  }
  *arr = n;
  *cap = nc;
  return true;
}

/* ---- libc ------------------------------------------------------------------------------- */

static void *libc_alloc(void *self, size_t size, size_t align) {
  (void)self;
  void *p = NULL;
  if (size == 0) size = 1;
  if (align < sizeof(void *)) align = sizeof(void *);
  if (posix_memalign(&p, align, size) != 0) return NULL;
  return p;
}

static void libc_free(void *self, void *p, size_t size, size_t align) {
  (void)self, (void)size, (void)align;
  free(p);
}

weft_allocator weft_allocator_libc(void) {
  return (weft_allocator){.self = NULL, .alloc = libc_alloc, .free = libc_free};
}

/* ---- jemalloc: one private arena per process, created on first use ------------------------ */

#ifdef WEFT_HAVE_JEMALLOC
static unsigned je_arena;
static bool je_ok;
static pthread_once_t je_once = PTHREAD_ONCE_INIT;

static void je_init(void) {
  size_t sz = sizeof(je_arena);
  je_ok = mallctl("arenas.create", &je_arena, &sz, NULL, 0) == 0;
}

static void *je_alloc(void *self, size_t size, size_t align) {
  (void)self;
  if (size == 0) size = 1;
  /* No thread cache: the arena may be freed into from any thread (workers,
   * the scheduler), and tcache-less calls keep the arena's stats exact. */
  return mallocx(size, MALLOCX_ARENA(je_arena) | MALLOCX_TCACHE_NONE |
                           MALLOCX_ALIGN(align < 1 ? 1 : align));
}

/* Sized deallocation: every caller passes the size and alignment it
 * allocated with, so jemalloc skips the extent lookup dallocx would make.
 * The flags repeat the allocation's (a zero size was allocated as 1). */
static void je_free(void *self, void *p, size_t size, size_t align) {
  (void)self;
  sdallocx(p, size == 0 ? 1 : size, MALLOCX_TCACHE_NONE | MALLOCX_ALIGN(align < 1 ? 1 : align));
}
#endif

bool weft_allocator_default_is_jemalloc(void) {
#ifdef WEFT_HAVE_JEMALLOC
  pthread_once(&je_once, je_init);
  return je_ok;
#else
  return false;
#endif
}

weft_allocator weft_allocator_default(void) {
#ifdef WEFT_HAVE_JEMALLOC
  if (weft_allocator_default_is_jemalloc())
    return (weft_allocator){.self = NULL, .alloc = je_alloc, .free = je_free};
#endif
  return weft_allocator_libc();
}

/* ---- counting allocator (tests) ------------------------------------------------------------ */

struct weft_counting_allocator {
  _Atomic uint64_t allocs, frees, live_blocks, live_bytes, failed;
  _Atomic uint64_t fail_countdown; /* 0: disarmed; 1: the next call fails */
};

static void *count_alloc(void *self, size_t size, size_t align) {
  weft_counting_allocator *ca = self;
  uint64_t c = atomic_load_explicit(&ca->fail_countdown, memory_order_relaxed);
  while (c != 0) {
    if (atomic_compare_exchange_weak_explicit(&ca->fail_countdown, &c, c - 1, memory_order_relaxed,
                                              memory_order_relaxed)) {
      if (c == 1) {
        atomic_fetch_add_explicit(&ca->failed, 1, memory_order_relaxed);
        return NULL;
      }
      break;
    }
  }
  void *p = libc_alloc(NULL, size, align);
  if (!p) return NULL;
  atomic_fetch_add_explicit(&ca->allocs, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&ca->live_blocks, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&ca->live_bytes, size, memory_order_relaxed);
  return p;
}

static void count_free(void *self, void *p, size_t size, size_t align) {
  weft_counting_allocator *ca = self;
  (void)align;
  atomic_fetch_add_explicit(&ca->frees, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&ca->live_blocks, 1, memory_order_relaxed);
  atomic_fetch_sub_explicit(&ca->live_bytes, size, memory_order_relaxed);
  free(p);
}

weft_status weft_counting_allocator_create(weft_counting_allocator **out) {
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = calloc(1, sizeof(**out));
  if (!*out)
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(**out), "counting allocator");
  return NULL;
}

weft_allocator weft_counting_allocator_get(weft_counting_allocator *ca) {
  return (weft_allocator){.self = ca, .alloc = count_alloc, .free = count_free};
}

weft_alloc_counts weft_counting_allocator_counts(const weft_counting_allocator *ca) {
  weft_alloc_counts c = {0};
  if (!ca) return c;
  weft_counting_allocator *m = (weft_counting_allocator *)ca;
  c.allocs = atomic_load(&m->allocs);
  c.frees = atomic_load(&m->frees);
  c.live_blocks = atomic_load(&m->live_blocks);
  c.live_bytes = atomic_load(&m->live_bytes);
  c.failed = atomic_load(&m->failed);
  return c;
}

void weft_counting_allocator_fail_at(weft_counting_allocator *ca, uint64_t n) {
  if (ca) atomic_store(&ca->fail_countdown, n);
}

void weft_counting_allocator_destroy(weft_counting_allocator *ca) {
  free(ca);
}
