/* Helpers shared by the memory-manager suites: a manager on host storage over
 * a counting allocator, pool and layout builders, usage and report checks,
 * and error expectations. Every test closes its environment with mm_close(),
 * which checks the manager's invariants (weft_mm_validate), destroys the
 * manager and the storage, and asserts that no allocator block is left. */
#ifndef WEFT_TESTS_MEMORY_MM_TEST_UTIL_H
#define WEFT_TESTS_MEMORY_MM_TEST_UTIL_H

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"

#define KIB   (UINT64_C(1) << 10)
#define MIB   (UINT64_C(1) << 20)
#define GIB   (UINT64_C(1) << 30)
#define ALIGN UINT64_C(64) /* host storage alignment */

#define MAX_REPORTS 512

static inline uint64_t align_up(uint64_t n) {
  return (n + ALIGN - 1) / ALIGN * ALIGN;
}

/* ---- errors ----------------------------------------------------------------------------- */

static inline void describe(weft_status st, char *buf, size_t cap) {
  weft_error_format(st, buf, cap);
}

/* Fails the test with the formatted error when |st| is not NULL. */
#define EXPECT_OK(expr)                                                                            \
  do {                                                                                             \
    weft_status st_ok_ = (expr);                                                                   \
    if (st_ok_) {                                                                                  \
      char buf_ok_[1024];                                                                          \
      describe(st_ok_, buf_ok_, sizeof buf_ok_);                                                   \
      weft_error_free(st_ok_);                                                                     \
      cr_assert_fail("%s failed: %s", #expr, buf_ok_);                                             \
    }                                                                                              \
  } while (0)

/* Asserts that |expr| fails with |kind|; frees the error. */
#define EXPECT_KIND(expr, kind)                                                                    \
  do {                                                                                             \
    weft_status st_k_ = (expr);                                                                    \
    weft_error_kind got_k_ = weft_error_kind_of(st_k_);                                            \
    char buf_k_[1024] = "Ok";                                                                      \
    if (st_k_) describe(st_k_, buf_k_, sizeof buf_k_);                                             \
    weft_error_free(st_k_);                                                                        \
    cr_assert_eq(got_k_, (kind), "%s: expected %s, got %s (%s)", #expr,                            \
                 weft_error_kind_name(kind), weft_error_kind_name(got_k_), buf_k_);                \
  } while (0)

/* Asserts that |st| is an error of |kind| (and keeps it). */
static inline void expect_kind_of(weft_status st, weft_error_kind kind, const char *what) {
  char buf[1024] = "Ok";
  if (st) describe(st, buf, sizeof buf);
  cr_assert_eq(weft_error_kind_of(st), kind, "%s: expected %s, got %s (%s)", what,
               weft_error_kind_name(kind), weft_error_kind_name(weft_error_kind_of(st)), buf);
}

/* ---- pool configs --------------------------------------------------------------------------- */

static inline weft_pool_config sliced_pool(uint64_t page, uint64_t max_slice, uint64_t cap) {
  weft_pool_config c;
  memset(&c, 0, sizeof c);
  c.kind = WEFT_POOL_SLICED;
  c.page_size = page;
  c.max_slice_size = max_slice;
  c.max_pool_size = cap;
  c.dealloc_period = WEFT_NO_PERIOD;
  c.reclaim_at = WEFT_NO_CEILING;
  return c;
}

static inline weft_pool_config strict_sliced_pool(uint64_t page, uint64_t max_slice, uint64_t cap) {
  weft_pool_config c = sliced_pool(page, max_slice, cap);
  c.strict = true;
  return c;
}

static inline weft_pool_config exclusive_pool(uint64_t max_alloc, uint64_t period) {
  weft_pool_config c;
  memset(&c, 0, sizeof c);
  c.kind = WEFT_POOL_EXCLUSIVE;
  c.max_alloc_size = max_alloc;
  c.dealloc_period = period;
  c.reclaim_at = WEFT_NO_CEILING;
  return c;
}

static inline weft_pool_config direct_pool(uint64_t ceiling) {
  weft_pool_config c;
  memset(&c, 0, sizeof c);
  c.kind = WEFT_POOL_DIRECT;
  c.dealloc_period = WEFT_NO_PERIOD;
  c.reclaim_at = ceiling;
  return c;
}

static inline weft_layout custom_layout(const weft_pool_config *pools, size_t n) {
  weft_layout l;
  memset(&l, 0, sizeof l);
  l.kind = WEFT_LAYOUT_CUSTOM;
  l.pools = pools;
  l.num_pools = n;
  return l;
}

static inline weft_layout preset_layout(weft_layout_kind kind) {
  weft_layout l;
  memset(&l, 0, sizeof l);
  l.kind = kind;
  return l;
}

static inline weft_mm_config mm_config(weft_layout layout, uint64_t max_page) {
  weft_mm_config c;
  memset(&c, 0, sizeof c);
  c.layout = layout;
  c.max_page = max_page;
  c.device_bytes = 0;
  c.persistent = WEFT_PERSISTENT_ENABLED;
  return c;
}

/* ---- the environment ------------------------------------------------------------------------- */

typedef struct mm_env {
  weft_counting_allocator *ca;
  weft_storage *storage;
  weft_mm *mm;
} mm_env;

/* What a test that failed before mm_close() left behind: the suites' .fini
 * (mm_fini) tears it down so that a failing test reports its assertion, not
 * a leak. The allocator handle is static too: the storage and the manager
 * keep a pointer to it, which must outlive a test body left by an assertion. */
static mm_env mm_live_env;
static weft_allocator mm_live_alloc;

/* The counting allocator of the current environment. */
static inline const weft_allocator *env_alloc(void) {
  return &mm_live_alloc;
}

static inline void env_track(const mm_env *e) {
  mm_live_env.ca = e->ca;
  mm_live_env.storage = e->storage;
  mm_live_env.mm = e->mm;
}

static inline void mm_fini(void) {
  if (mm_live_env.mm) weft_mm_destroy(mm_live_env.mm);
  if (mm_live_env.storage) weft_storage_destroy(mm_live_env.storage);
  if (mm_live_env.ca) weft_counting_allocator_destroy(mm_live_env.ca);
  memset(&mm_live_env, 0, sizeof mm_live_env);
}

/* Counting allocator and host storage of |capacity| (0: none), no manager. */
static inline void env_storage(mm_env *e, uint64_t capacity) {
  memset(e, 0, sizeof *e);
  EXPECT_OK(weft_counting_allocator_create(&e->ca));
  env_track(e);
  mm_live_alloc = weft_counting_allocator_get(e->ca);
  EXPECT_OK(weft_storage_host_create(env_alloc(), capacity, &e->storage));
  env_track(e);
}

/* A manager for |cfg| on fresh host storage of |capacity| (0: uncapped). */
static inline void mm_open_cfg(mm_env *e, const weft_mm_config *cfg, uint64_t capacity) {
  env_storage(e, capacity);
  EXPECT_OK(weft_mm_create(cfg, e->storage, env_alloc(), &e->mm));
  env_track(e);
  cr_assert_not_null(e->mm);
}

/* A manager over a CUSTOM list of pools (max_page 1 GiB). */
static inline void mm_open(mm_env *e, const weft_pool_config *pools, size_t n) {
  weft_mm_config cfg = mm_config(custom_layout(pools, n), GIB);
  mm_open_cfg(e, &cfg, 0);
}

/* Invariants, teardown, and no leaked allocator block. */
static inline void mm_close(mm_env *e) {
  memset(&mm_live_env, 0, sizeof mm_live_env); /* torn down here, not by .fini */
  if (e->mm) {
    weft_status st = weft_mm_validate(e->mm);
    if (st) {
      char buf[1024];
      describe(st, buf, sizeof buf);
      weft_error_free(st);
      cr_expect_fail("weft_mm_validate: %s", buf);
    }
    weft_mm_destroy(e->mm);
    e->mm = NULL;
  }
  if (e->storage) {
    cr_expect_eq(weft_storage_bytes_allocated(e->storage), 0,
                 "the manager's destruction left %" PRIu64 " storage bytes allocated",
                 weft_storage_bytes_allocated(e->storage));
    weft_storage_destroy(e->storage);
    e->storage = NULL;
  }
  if (e->ca) {
    weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
    cr_expect_eq(c.live_blocks, 0, "%" PRIu64 " allocator blocks leaked (%" PRIu64 " bytes)",
                 c.live_blocks, c.live_bytes);
    weft_counting_allocator_destroy(e->ca);
    e->ca = NULL;
  }
}

/* ---- descriptors --------------------------------------------------------------------------- */

/* Initializes |m| for |size| bytes and reserves it (mode ALLOW), or fails. */
static inline void reserve_ok(weft_mm *mm, weft_mem *m, uint64_t size) {
  weft_mem_init(m, size);
  weft_status st = weft_mm_reserve(mm, m, WEFT_RESERVE_ALLOW);
  if (st) {
    char buf[1024];
    describe(st, buf, sizeof buf);
    weft_error_free(st);
    cr_assert_fail("reserve of %" PRIu64 " bytes failed: %s", size, buf);
  }
  cr_assert(weft_mem_is_placed(m), "a successful reservation places the descriptor");
}

/* Initializes |m| for |size| bytes and reserves it in |mode|; returns the status. */
static inline weft_status reserve_mode(weft_mm *mm, weft_mem *m, uint64_t size,
                                       weft_reserve_mode mode) {
  weft_mem_init(m, size);
  return weft_mm_reserve(mm, m, mode);
}

/* The address of |m|, which must resolve; its |size| bytes are written so that a
 * sanitizer build catches an address outside the backing. */
static inline char *resolve_ok(weft_mm *mm, weft_mem *m) {
  void *p = NULL;
  weft_status st = weft_mm_resolve(mm, m, &p);
  if (st) {
    char buf[1024];
    describe(st, buf, sizeof buf);
    weft_error_free(st);
    cr_assert_fail("resolve failed: %s", buf);
  }
  cr_assert_not_null(p);
  if (m->size) memset(p, 0xA5, (size_t)m->size);
  return p;
}

/* ---- usage and reports ------------------------------------------------------------------------
 */

static inline void expect_usage_of(weft_memory_usage u, uint64_t allocs, uint64_t in_use,
                                   uint64_t padding, uint64_t reserved, const char *what) {
  cr_assert_eq(u.number_allocs, allocs, "%s: number_allocs %" PRIu64 ", expected %" PRIu64, what,
               u.number_allocs, allocs);
  cr_assert_eq(u.bytes_in_use, in_use, "%s: bytes_in_use %" PRIu64 ", expected %" PRIu64, what,
               u.bytes_in_use, in_use);
  cr_assert_eq(u.bytes_padding, padding, "%s: bytes_padding %" PRIu64 ", expected %" PRIu64, what,
               u.bytes_padding, padding);
  cr_assert_eq(u.bytes_reserved, reserved, "%s: bytes_reserved %" PRIu64 ", expected %" PRIu64,
               what, u.bytes_reserved, reserved);
}

/* The whole manager's usage. */
#define EXPECT_USAGE(mm, allocs, in_use, padding, reserved, what)                                  \
  expect_usage_of(weft_mm_usage(mm), (allocs), (in_use), (padding), (reserved), (what))

/* Number of reports (routing-order pools, then persistent, then dedicated). */
static inline size_t report_count(const weft_mm *mm) {
  static weft_pool_report out[MAX_REPORTS];
  size_t n = MAX_REPORTS;
  weft_mm_report(mm, out, &n);
  cr_assert_leq(n, MAX_REPORTS);
  return n;
}

static inline weft_pool_report report_at(const weft_mm *mm, size_t i) {
  static weft_pool_report out[MAX_REPORTS];
  size_t n = MAX_REPORTS;
  weft_mm_report(mm, out, &n);
  cr_assert_lt(i, n, "report %zu asked, %zu written", i, n);
  return out[i];
}

static inline weft_pool_report persistent_report(const weft_mm *mm) {
  size_t n = report_count(mm);
  cr_assert_geq(n, 2);
  weft_pool_report r = report_at(mm, n - 2);
  cr_assert_eq(r.kind, WEFT_POOL_PERSISTENT, "the next-to-last report is the persistent pool");
  return r;
}

static inline weft_pool_report dedicated_report(const weft_mm *mm) {
  size_t n = report_count(mm);
  cr_assert_geq(n, 2);
  weft_pool_report r = report_at(mm, n - 1);
  cr_assert_eq(r.kind, WEFT_POOL_DIRECT, "the last report is the dedicated (direct) pool");
  return r;
}

static inline uint64_t alloc_calls(const mm_env *e) {
  return weft_storage_host_alloc_calls(e->storage);
}

#endif
