/* Shared pieces of the libFuzzer targets (docs/fuzzing.md).
 *
 * An input is read as a stream of little-endian integers and byte strings
 * (fz_*); once it runs out every read answers 0, so any prefix of an input is
 * an input. FZ_CHECK is the harnesses' assertion: it prints what disagreed
 * and aborts, which libFuzzer reports as a crash with the input saved. */
#ifndef WEFT_TESTS_FUZZ_SUPPORT_H
#define WEFT_TESTS_FUZZ_SUPPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sanitizer/common_interface_defs.h>
#include <weft/weft.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_CHECK(cond, ...)                                                                        \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "fuzz check failed at %s:%d: %s\n  ", __FILE__, __LINE__, #cond);            \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fputc('\n', stderr);                                                                         \
      abort();                                                                                     \
    }                                                                                              \
  } while (0)

/* ---- reading the input ------------------------------------------------------------------- */

typedef struct fz {
  const uint8_t *p;
  size_t n;
} fz;

static inline uint64_t fz_bits(fz *f, unsigned bytes) {
  uint64_t v = 0;
  for (unsigned i = 0; i < bytes && f->n; i++, f->p++, f->n--) v |= (uint64_t)*f->p << (8 * i);
  return v;
}
static inline uint8_t fz_u8(fz *f) {
  return (uint8_t)fz_bits(f, 1);
}
static inline uint16_t fz_u16(fz *f) {
  return (uint16_t)fz_bits(f, 2);
}
static inline uint32_t fz_u32(fz *f) {
  return (uint32_t)fz_bits(f, 4);
}
static inline uint64_t fz_u64(fz *f) {
  return fz_bits(f, 8);
}
static inline bool fz_bool(fz *f) {
  return fz_u8(f) & 1;
}
/* A value in [0, n) (0 for n == 0). */
static inline uint32_t fz_below(fz *f, uint32_t n) {
  return n ? (uint32_t)(fz_u16(f) % n) : 0;
}

/* Sizes a fuzzer should try: small ones, powers of two and their
 * neighbours, the limits weft.h names, and values near UINT64_MAX. */
static inline uint64_t fz_size(fz *f) {
  static const uint64_t special[] = {0,
                                     1,
                                     2,
                                     7,
                                     8,
                                     63,
                                     64,
                                     65,
                                     255,
                                     256,
                                     512,
                                     4095,
                                     4096,
                                     4097,
                                     65536,
                                     UINT64_C(1) << 20,
                                     (UINT64_C(1) << 20) + 1,
                                     UINT64_C(16) << 20,
                                     UINT64_C(1) << 30,
                                     UINT64_C(4) << 30,
                                     WEFT_MAX_BUFFER_SIZE,
                                     WEFT_MAX_BUFFER_SIZE + 1,
                                     UINT64_C(1) << 58,
                                     UINT64_C(1) << 63,
                                     UINT64_MAX - 64,
                                     UINT64_MAX - 63,
                                     UINT64_MAX - 1,
                                     UINT64_MAX};
  uint8_t sel = fz_u8(f);
  size_t ns = sizeof(special) / sizeof(special[0]);
  if (sel < 128) return special[sel % ns];
  if (sel < 192) return fz_u16(f);
  if (sel < 240) return fz_u32(f);
  return fz_u64(f);
}

/* A NUL-terminated copy of the next |len|-prefixed string (at most |cap| - 1
 * bytes); NUL bytes inside are kept, so the C string may end early. */
static inline size_t fz_str(fz *f, char *out, size_t cap) {
  size_t len = fz_u8(f);
  if (len > f->n) len = f->n;
  if (len > cap - 1) len = cap - 1;
  memcpy(out, f->p, len);
  out[len] = '\0';
  f->p += len;
  f->n -= len;
  return len;
}

/* ---- small helpers ------------------------------------------------------------------------ */

/* Formats |st| into a static buffer (for FZ_CHECK messages). */
static inline const char *fz_text(weft_status st) {
  static char text[2048];
  weft_error_format(st, text, sizeof(text));
  return text;
}

/* A pool configuration of any kind from the input. */
static inline weft_pool_config fz_pool(fz *f) {
  weft_pool_config p;
  memset(&p, 0, sizeof(p));
  uint8_t k = fz_u8(f);
  p.kind = k < 250 ? (weft_pool_kind)(k % 3) : (weft_pool_kind)k;
  p.page_size = fz_size(f);
  p.max_slice_size = fz_bool(f) ? fz_size(f) : 0;
  p.max_pool_size = fz_bool(f) ? fz_size(f) : 0;
  p.strict = fz_bool(f);
  p.max_alloc_size = fz_size(f);
  p.dealloc_period = fz_bool(f) ? WEFT_NO_PERIOD : fz_u16(f);
  p.reclaim_at = fz_bool(f) ? WEFT_NO_CEILING : fz_size(f);
  return p;
}

/* A layout from the input; CUSTOM pools go to |pools| (|cap| entries). */
static inline weft_layout fz_layout(fz *f, weft_pool_config *pools, size_t cap) {
  weft_layout l;
  uint8_t k = fz_u8(f);
  l.kind = k < 250 ? (weft_layout_kind)(k % 4) : (weft_layout_kind)k;
  l.pools = NULL;
  l.num_pools = 0;
  if (l.kind == WEFT_LAYOUT_CUSTOM || fz_bool(f)) {
    size_t n = fz_below(f, (uint32_t)cap + 1);
    for (size_t i = 0; i < n; i++) pools[i] = fz_pool(f);
    l.pools = fz_u8(f) == 0xFF ? NULL : pools;
    l.num_pools = fz_u8(f) == 0xFF ? fz_u16(f) % 300 : n;
    if (l.num_pools > n && l.pools) l.num_pools = n;
  }
  return l;
}

/* ---- a bounded, counting allocator -----------------------------------------------------------
 * libFuzzer reports any single allocation over -malloc_limit_mb (default: the
 * RSS limit) as a crash, but a layout may legitimately ask for a 1 TiB page:
 * devices under test allocate through this one, which refuses blocks over
 * FZ_ALLOC_MAX and more than FZ_ALLOC_TOTAL live bytes (weft then reports
 * OutOfMemory, as on a machine that has no more), and counts what is live so
 * that a close leaving a block behind fails the input. */

#define FZ_ALLOC_MAX   (UINT64_C(256) << 20)
#define FZ_ALLOC_TOTAL (UINT64_C(768) << 20)

typedef struct fz_alloc_state {
  _Atomic uint64_t live_blocks, live_bytes;
  _Atomic uint64_t countdown; /* 0: off; else the allocation that fails */
  bool sticky;                /* ... and every one after it */
} fz_alloc_state;

static inline void *fz_alloc_fn(void *self, size_t size, size_t align) {
  fz_alloc_state *a = self;
  if (size > FZ_ALLOC_MAX) return NULL;
  uint64_t c = atomic_load(&a->countdown);
  while (c > 1 && !atomic_compare_exchange_weak(&a->countdown, &c, c - 1)) {
  }
  if (c == 1) {
    if (!a->sticky) atomic_store(&a->countdown, 0);
    if (getenv("FZ_ALLOC_TRACE")) { /* where the injected failures land */
      fprintf(stderr, "fuzz: allocation of %zu bytes fails here:\n", size);
      __sanitizer_print_stack_trace();
    }
    return NULL;
  }
  uint64_t before = atomic_fetch_add(&a->live_bytes, size);
  void *p = NULL;
  if (before + size <= FZ_ALLOC_TOTAL) {
    if (align < sizeof(void *)) align = sizeof(void *);
    if (posix_memalign(&p, align, size ? size : 1)) p = NULL;
  }
  if (!p) {
    atomic_fetch_sub(&a->live_bytes, size);
    return NULL;
  }
  atomic_fetch_add(&a->live_blocks, 1);
  return p;
}

static inline void fz_free_fn(void *self, void *ptr, size_t size, size_t align) {
  fz_alloc_state *a = self;
  (void)align;
  if (!ptr) return;
  free(ptr);
  atomic_fetch_sub(&a->live_blocks, 1);
  atomic_fetch_sub(&a->live_bytes, size);
}

static inline weft_allocator fz_allocator(fz_alloc_state *a) {
  atomic_store(&a->live_blocks, 0);
  atomic_store(&a->live_bytes, 0);
  atomic_store(&a->countdown, 0);
  a->sticky = false;
  return (weft_allocator){.self = a, .alloc = fz_alloc_fn, .free = fz_free_fn};
}

/* The |n|th allocation from now fails (n >= 1); |sticky|: every later one too. */
static inline void fz_alloc_fail_at(fz_alloc_state *a, uint64_t n, bool sticky) {
  a->sticky = sticky;
  atomic_store(&a->countdown, n);
}

/* After weft_device_close: nothing the device allocated may be left. */
static inline void fz_alloc_check_empty(fz_alloc_state *a) {
  uint64_t blocks = atomic_load(&a->live_blocks), bytes = atomic_load(&a->live_bytes);
  FZ_CHECK(blocks == 0 && bytes == 0, "%llu blocks (%llu bytes) outlive the device",
           (unsigned long long)blocks, (unsigned long long)bytes);
}

/* The memory kinds a reservation may fail with. */
static inline bool fz_memory_kind(weft_error_kind k) {
  return k == WEFT_ERR_BUFFER_TOO_BIG || k == WEFT_ERR_OUT_OF_MEMORY ||
         k == WEFT_ERR_PAGE_UPDATE_FORBIDDEN || k == WEFT_ERR_PAGE_SIZES_EXHAUSTED ||
         k == WEFT_ERR_STORAGE_MAPPING_FAILED;
}

/* A read that failed because the buffer's reservation did: Several of one
 * Unwritten whose root is a memory kind. */
static inline bool fz_reservation_failure(weft_status st) {
  if (weft_error_kind_of(st) != WEFT_ERR_SEVERAL || weft_error_count(st) < 1) return false;
  for (size_t i = 0; i < weft_error_count(st); i++) {
    weft_status u = weft_error_at(st, i);
    if (weft_error_kind_of(u) != WEFT_ERR_UNWRITTEN) return false;
    if (!fz_memory_kind(weft_error_kind_of(weft_error_root(u)))) return false;
  }
  return true;
}

#endif
