/* Out-of-memory sweeps over a fixed, ML-like workload (weights in a
 * persistent window, activations of mixed sizes freed out of order, metadata,
 * zero-size tensors, a dedicated probe, cleanups and a relocation), on each
 * layout: SUBSLICES, EXCLUSIVE_PAGES, ADAPTIVE and a CUSTOM one ending in a
 * direct pool.
 *
 * - Storage failpoint: for k = 1, 2, ... the k-th storage allocation of a
 *   fresh manager fails. Every failure returned is OutOfMemory, leaves the
 *   descriptor unplaced and the counters unchanged; an explicit cleanup and a
 *   retry then succeed; the manager validates after every step, every live
 *   allocation keeps its bytes, and everything freed and cleaned up leaves no
 *   page, no storage byte and no allocator block.
 * - Capacity: host storage smaller than the workload's peak. What does not
 *   fit now is OutOfMemory; only a request larger than max_page is
 *   BufferTooBig.
 * - Allocator: the k-th allocation of the manager's own allocator fails
 *   (create included): the same guarantees. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "memory/memory.h"

#define KiB      (UINT64_C(1) << 10)
#define MiB      (UINT64_C(1) << 20)
#define MAX_PAGE (32 * MiB)
#define SLOTS    24
#define WINDOW   (4 * KiB) /* bytes written and checked at each end of an allocation */

TestSuite(oom_sweep, .timeout = 60);

/* ---- the workload ---------------------------------------------------------------------------- */

typedef enum op_kind { RES, FREE, MODE, CLEAN, RELOC, TOOBIG } op_kind;
typedef struct op {
  op_kind kind;
  int slot;
  uint64_t size;
  weft_alloc_mode mode;
} op;

#define R(s, n)                                                                                    \
  { RES, (s), (n), WEFT_ALLOC_AUTO }
#define F(s)                                                                                       \
  { FREE, (s), 0, WEFT_ALLOC_AUTO }
#define M(m)                                                                                       \
  { MODE, 0, 0, (m) }

static const op workload[] = {
    /* weights */
    M(WEFT_ALLOC_PERSISTENT),
    R(0, 3 * MiB),
    R(1, 3 * MiB),
    R(2, 1 * MiB + 4096),
    R(3, 256 * KiB),
    R(4, 1 * KiB),
    M(WEFT_ALLOC_AUTO),
    /* a first step */
    R(5, 4 * MiB),
    R(6, 512),
    R(7, 4 * KiB),
    R(8, 10 * MiB),
    R(9, 10 * MiB),
    F(5),
    R(10, 20 * MiB),
    F(8),
    R(11, 0),
    R(12, 2 * MiB + 3),
    F(9),
    F(6),
    R(13, 100 * KiB),
    F(10),
    F(13),
    F(11),
    F(7),
    /* a second step, other shapes */
    R(5, 6 * MiB),
    R(6, 700),
    R(8, 12 * MiB),
    R(9, 300 * KiB),
    F(12),
    R(10, 24 * MiB),
    F(5),
    R(14, 1 * MiB),
    F(8),
    /* a dedicated probe */
    M(WEFT_ALLOC_DEDICATED),
    R(15, 6 * MiB),
    M(WEFT_ALLOC_AUTO),
    F(15),
    {CLEAN, 0, 0, WEFT_ALLOC_AUTO},
    R(16, 64 * KiB),
    R(17, 64 * KiB + 1),
    R(18, 8 * MiB),
    R(19, 0),
    {RELOC, 0, 0, WEFT_ALLOC_AUTO},
    {TOOBIG, 20, MAX_PAGE + 1, WEFT_ALLOC_AUTO},
    F(9),
    F(10),
    F(14),
    F(16),
    F(17),
    F(18),
    F(19),
    F(6),
    /* the weights go last */
    F(0),
    F(1),
    F(2),
    F(3),
    F(4),
};
#define NOPS (sizeof workload / sizeof workload[0])

/* ---- layouts --------------------------------------------------------------------------------- */

static const weft_pool_config custom_pools[] = {
    {.kind = WEFT_POOL_SLICED,
     .page_size = 4 * MiB,
     .max_slice_size = 1 * MiB,
     .dealloc_period = WEFT_NO_PERIOD,
     .reclaim_at = WEFT_NO_CEILING},
    {.kind = WEFT_POOL_DIRECT, .dealloc_period = WEFT_NO_PERIOD, .reclaim_at = 32 * MiB},
};

typedef struct layout_case {
  const char *name;
  weft_layout layout;
  bool preset; /* presets refuse anything past max_page with BufferTooBig */
} layout_case;

static layout_case layout_of(weft_layout_kind kind) {
  layout_case lc;
  memset(&lc, 0, sizeof lc);
  lc.layout.kind = kind;
  lc.preset = kind != WEFT_LAYOUT_CUSTOM;
  switch (kind) {
  case WEFT_LAYOUT_SUBSLICES:
    lc.name = "SUBSLICES";
    break;
  case WEFT_LAYOUT_EXCLUSIVE_PAGES:
    lc.name = "EXCLUSIVE_PAGES";
    break;
  case WEFT_LAYOUT_ADAPTIVE:
    lc.name = "ADAPTIVE";
    break;
  case WEFT_LAYOUT_CUSTOM:
    lc.name = "CUSTOM(sliced 4 MiB, direct)";
    lc.layout.pools = custom_pools;
    lc.layout.num_pools = sizeof custom_pools / sizeof custom_pools[0];
    break;
  }
  return lc;
}

/* ---- a storage that remembers its peak ---------------------------------------------------- */

/* Forwards to host storage and records the most bytes it ever held, inside
 * a call (a relocation allocates its targets before it releases what it
 * emptied) as well as between them. */
typedef struct spy_storage {
  weft_storage base;
  weft_storage *inner;
  uint64_t peak;
} spy_storage;

static weft_status spy_alloc(weft_storage *s, uint64_t size, weft_storage_handle *out) {
  spy_storage *spy = (spy_storage *)s;
  weft_status st = weft_storage_alloc(spy->inner, size, out);
  uint64_t b = weft_storage_bytes_allocated(spy->inner);
  if (b > spy->peak) spy->peak = b;
  return st;
}
static void spy_dealloc(weft_storage *s, weft_storage_handle *h) {
  weft_storage_dealloc(((spy_storage *)s)->inner, h);
}
static void spy_flush(weft_storage *s) {
  weft_storage_flush(((spy_storage *)s)->inner);
}
static weft_status spy_get(weft_storage *s, const weft_storage_handle *h, void **out) {
  return weft_storage_get(((spy_storage *)s)->inner, h, out);
}
static weft_status spy_copy(weft_storage *s, const weft_storage_handle *src, uint64_t src_off,
                            const weft_storage_handle *dst, uint64_t dst_off, uint64_t len) {
  return weft_storage_copy(((spy_storage *)s)->inner, src, src_off, dst, dst_off, len);
}
static uint64_t spy_alignment(const weft_storage *s) {
  return weft_storage_alignment(((const spy_storage *)s)->inner);
}
static uint64_t spy_bytes(const weft_storage *s) {
  return weft_storage_bytes_allocated(((const spy_storage *)s)->inner);
}
static void spy_destroy(weft_storage *s) {
  (void)s; /* the run destroys the inner storage itself */
}
static const weft_storage_vtable spy_vt = {
    .alloc = spy_alloc,
    .dealloc = spy_dealloc,
    .flush = spy_flush,
    .get = spy_get,
    .copy = spy_copy,
    .alignment = spy_alignment,
    .bytes_allocated = spy_bytes,
    .destroy = spy_destroy,
};

/* ---- a run ----------------------------------------------------------------------------------- */

typedef enum fault { FAULT_NONE, FAULT_STORAGE, FAULT_ALLOCATOR, FAULT_CAPACITY } fault;

typedef struct run_result {
  uint64_t failures;      /* reservations that returned an error (TOOBIG excluded) */
  uint64_t storage_calls; /* storage allocation calls the run made */
  uint64_t allocator_calls;
  uint64_t peak;                 /* the most storage bytes ever held */
  uint64_t reloc_from, reloc_to; /* storage calls made before and after the RELOC op */
  bool create_failed;
} run_result;

typedef struct run {
  const layout_case *lc;
  fault fault;
  uint64_t k; /* FAULT_STORAGE / FAULT_ALLOCATOR: the failing call; FAULT_CAPACITY: bytes */
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_storage *storage; /* the host storage */
  spy_storage spy;       /* what the manager uses */
  weft_mm *mm;
  weft_mem mem[SLOTS + 1];
  bool live[SLOTS + 1];
  uint64_t allocs, in_use; /* the model */
  run_result out;
  char where[160];
} run;

static unsigned char pattern(uint64_t seed, uint64_t i) {
  return (unsigned char)(seed * 151u + i * 13u + (i >> 8));
}

static void status_text(weft_status st, char *buf, size_t cap) {
  if (st)
    weft_error_format(st, buf, cap);
  else
    snprintf(buf, cap, "Ok");
}

static void validate(run *r) {
  weft_status st = weft_mm_validate(r->mm);
  if (!st) return;
  char buf[1024];
  status_text(st, buf, sizeof buf);
  weft_error_free(st);
  cr_assert_fail("%s: weft_mm_validate: %s", r->where, buf);
}

static unsigned char *resolve(run *r, int s) {
  void *p = NULL;
  weft_status st = weft_mm_resolve(r->mm, &r->mem[s], &p);
  if (st) {
    char buf[1024];
    status_text(st, buf, sizeof buf);
    weft_error_free(st);
    cr_assert_fail("%s: slot %d does not resolve: %s", r->where, s, buf);
  }
  cr_assert(p != NULL || r->mem[s].size == 0, "%s: slot %d resolved to NULL", r->where, s);
  return p;
}

static void write_slot(run *r, int s) {
  uint64_t n = r->mem[s].size, w = n < WINDOW ? n : WINDOW;
  if (!n) return;
  unsigned char *p = resolve(r, s);
  for (uint64_t i = 0; i < w; i++) p[i] = pattern((uint64_t)s, i);
  for (uint64_t i = n - w; i < n; i++) p[i] = pattern((uint64_t)s, i);
}

static void check_slot(run *r, int s) {
  uint64_t n = r->mem[s].size, w = n < WINDOW ? n : WINDOW;
  weft_status st = weft_mm_find(r->mm, &r->mem[s]);
  cr_assert_null(st, "%s: live slot %d is not found (%s)", r->where, s,
                 weft_error_kind_name(weft_error_kind_of(st)));
  if (!n) return;
  const unsigned char *p = resolve(r, s);
  for (uint64_t i = 0; i < w; i++)
    cr_assert_eq(p[i], pattern((uint64_t)s, i), "%s: slot %d lost byte %" PRIu64, r->where, s, i);
  for (uint64_t i = n - w; i < n; i++)
    cr_assert_eq(p[i], pattern((uint64_t)s, i), "%s: slot %d lost byte %" PRIu64, r->where, s, i);
}

static void check_all(run *r) {
  for (int s = 0; s <= SLOTS; s++)
    if (r->live[s]) check_slot(r, s);
}

static void check_model(run *r) {
  weft_memory_usage u = weft_mm_usage(r->mm);
  cr_assert_eq(u.number_allocs, r->allocs, "%s: %" PRIu64 " allocations counted, %" PRIu64 " live",
               r->where, u.number_allocs, r->allocs);
  cr_assert_eq(u.bytes_in_use, r->in_use, "%s: %" PRIu64 " bytes in use counted, %" PRIu64 " live",
               r->where, u.bytes_in_use, r->in_use);
}

/* A reservation failed with |st|: the kind a fault of this run may give. */
static void expect_memory_error(run *r, weft_status st, uint64_t size) {
  char buf[1024];
  status_text(st, buf, sizeof buf);
  weft_error_kind kind = weft_error_kind_of(st);
  weft_error_free(st);
  cr_assert_neq(r->fault, FAULT_NONE, "%s: a run without faults failed: %s", r->where, buf);
  cr_assert_eq(kind, WEFT_ERR_OUT_OF_MEMORY,
               "%s: a reservation of %" PRIu64 " bytes (at most max_page) failed with %s, "
               "expected OutOfMemory: %s",
               r->where, size, weft_error_kind_name(kind), buf);
}

static void do_reserve(run *r, int s, uint64_t size) {
  weft_mem *m = &r->mem[s];
  cr_assert(!r->live[s], "workload bug: slot %d reserved twice", s);
  weft_mem_init(m, size);
  weft_status st = weft_mm_reserve(r->mm, m, WEFT_RESERVE_ALLOW);
  if (st) {
    r->out.failures++;
    expect_memory_error(r, st, size);
    cr_assert(!weft_mem_is_placed(m), "%s: a failed reservation placed its descriptor", r->where);
    weft_status f = weft_mm_find(r->mm, m);
    cr_assert_eq(weft_error_kind_of(f), WEFT_ERR_NOT_FOUND,
                 "%s: an unplaced descriptor must be NotFound", r->where);
    weft_error_free(f);
    validate(r);
    check_model(r);
    check_all(r);
    if (r->fault == FAULT_CAPACITY) return; /* it would fail again: leave the slot empty */
    /* The reclaim ladder: an explicit cleanup, then one retry, which succeeds
     * since the failpoint fires once. */
    weft_mm_cleanup(r->mm);
    validate(r);
    weft_mem_init(m, size);
    st = weft_mm_reserve(r->mm, m, WEFT_RESERVE_ALLOW);
    if (st) {
      char buf[1024];
      status_text(st, buf, sizeof buf);
      weft_error_free(st);
      cr_assert_fail("%s: the retry after a cleanup failed: %s", r->where, buf);
    }
  }
  cr_assert(weft_mem_is_placed(m), "%s: a successful reservation left the descriptor unplaced",
            r->where);
  r->live[s] = true;
  r->allocs++;
  r->in_use += size;
  write_slot(r, s);
}

static void do_free(run *r, int s) {
  if (!r->live[s]) return; /* its reservation failed for good (capacity runs) */
  check_slot(r, s);
  weft_mm_free(r->mm, &r->mem[s]);
  r->live[s] = false;
  r->allocs--;
  r->in_use -= r->mem[s].size;
  weft_status f = weft_mm_find(r->mm, &r->mem[s]);
  cr_assert_eq(weft_error_kind_of(f), WEFT_ERR_NOT_FOUND, "%s: a freed descriptor still resolves",
               r->where);
  weft_error_free(f);
}

static void execute(run *r, size_t i) {
  const op *o = &workload[i];
  switch (o->kind) {
  case RES:
    do_reserve(r, o->slot, o->size);
    break;
  case FREE:
    do_free(r, o->slot);
    break;
  case MODE:
    weft_mm_mode(r->mm, o->mode);
    break;
  case CLEAN:
    weft_mm_cleanup(r->mm);
    check_all(r);
    break;
  case RELOC:
    r->out.reloc_from = weft_storage_host_alloc_calls(r->storage);
    (void)weft_mm_relocate(r->mm, true);
    r->out.reloc_to = weft_storage_host_alloc_calls(r->storage);
    check_all(r);
    break;
  case TOOBIG: {
    if (!r->lc->preset) break; /* a direct pool accepts every size */
    weft_mem *m = &r->mem[o->slot];
    weft_mem_init(m, o->size);
    weft_status st = weft_mm_reserve(r->mm, m, WEFT_RESERVE_ALLOW);
    char buf[1024];
    status_text(st, buf, sizeof buf);
    weft_error_kind kind = weft_error_kind_of(st);
    weft_error_free(st);
    cr_assert_eq(kind, WEFT_ERR_BUFFER_TOO_BIG,
                 "%s: %" PRIu64 " bytes, past max_page, gave %s, expected BufferTooBig: %s",
                 r->where, o->size, weft_error_kind_name(kind), buf);
    cr_assert(!weft_mem_is_placed(m), "%s", r->where);
    break;
  }
  }
}

static void run_workload(const layout_case *lc, fault fault, uint64_t k, run_result *out) {
  static run r; /* the descriptors must not move while placed */
  memset(&r, 0, sizeof r);
  r.lc = lc;
  r.fault = fault;
  r.k = k;
  cr_assert_null(weft_counting_allocator_create(&r.ca));
  r.alloc = weft_counting_allocator_get(r.ca);
  cr_assert_null(weft_storage_host_create(&r.alloc, fault == FAULT_CAPACITY ? k : 0, &r.storage));
  r.spy.base.vt = &spy_vt;
  r.spy.inner = r.storage;

  weft_mm_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.layout = lc->layout;
  cfg.max_page = MAX_PAGE;
  cfg.persistent = WEFT_PERSISTENT_ENABLED;
  uint64_t allocator_base = weft_counting_allocator_counts(r.ca).allocs;
  if (fault == FAULT_ALLOCATOR) weft_counting_allocator_fail_at(r.ca, k);
  snprintf(r.where, sizeof r.where, "%s, fault %d at %" PRIu64 ", create", lc->name, (int)fault, k);
  weft_status st = weft_mm_create(&cfg, &r.spy.base, &r.alloc, &r.mm);
  if (st) {
    char buf[1024];
    status_text(st, buf, sizeof buf);
    weft_error_kind kind = weft_error_kind_of(st);
    weft_error_free(st);
    cr_assert_eq(fault, FAULT_ALLOCATOR, "%s: weft_mm_create failed: %s", r.where, buf);
    cr_assert_eq(kind, WEFT_ERR_OUT_OF_MEMORY, "%s: create failed with %s: %s", r.where,
                 weft_error_kind_name(kind), buf);
    r.out.create_failed = true;
    r.out.failures = 1;
  } else {
    cr_assert_not_null(r.mm);
    if (fault == FAULT_STORAGE) weft_storage_host_fail_at(r.storage, k, WEFT_ERR_OUT_OF_MEMORY);
    validate(&r);
    for (size_t i = 0; i < NOPS; i++) {
      snprintf(r.where, sizeof r.where, "%s, fault %d at %" PRIu64 ", op %zu", lc->name, (int)fault,
               k, i);
      execute(&r, i);
      validate(&r);
      check_model(&r);
    }
    snprintf(r.where, sizeof r.where, "%s, fault %d at %" PRIu64 ", end", lc->name, (int)fault, k);
    cr_assert_eq(weft_mm_current_mode(r.mm), WEFT_ALLOC_AUTO, "%s: windows left open", r.where);
    for (int s = 0; s <= SLOTS; s++) cr_assert(!r.live[s], "workload bug: slot %d still live", s);
    weft_mm_cleanup(r.mm);
    validate(&r);
    weft_memory_usage u = weft_mm_usage(r.mm);
    cr_assert(u.number_allocs == 0 && u.bytes_in_use == 0 && u.bytes_padding == 0,
              "%s: everything was freed, yet %" PRIu64 " allocations / %" PRIu64
              " bytes are counted",
              r.where, u.number_allocs, u.bytes_in_use);
    cr_assert_eq(u.bytes_reserved, 0, "%s: an explicit cleanup left %" PRIu64 " bytes reserved",
                 r.where, u.bytes_reserved);
    cr_assert_eq(weft_mm_storage_allocs(r.mm), 0, "%s: %" PRIu64 " storage allocations held",
                 r.where, weft_mm_storage_allocs(r.mm));
    cr_assert_eq(weft_storage_bytes_allocated(r.storage), 0, "%s: %" PRIu64 " storage bytes held",
                 r.where, weft_storage_bytes_allocated(r.storage));
    r.out.storage_calls = weft_storage_host_alloc_calls(r.storage);
    weft_mm_destroy(r.mm);
  }
  r.out.peak = r.spy.peak;
  r.out.allocator_calls = weft_counting_allocator_counts(r.ca).allocs - allocator_base;
  cr_assert_eq(weft_storage_bytes_allocated(r.storage), 0, "%s: storage bytes left", r.where);
  weft_storage_destroy(r.storage);
  weft_alloc_counts c = weft_counting_allocator_counts(r.ca);
  cr_assert_eq(c.live_blocks, 0, "%s: %" PRIu64 " allocator blocks leaked (%" PRIu64 " bytes)",
               r.where, c.live_blocks, c.live_bytes);
  weft_counting_allocator_destroy(r.ca);
  *out = r.out;
}

/* ---- sweeps ---------------------------------------------------------------------------------- */

static void storage_sweep(weft_layout_kind kind) {
  layout_case lc = layout_of(kind);
  run_result clean;
  run_workload(&lc, FAULT_NONE, 0, &clean);
  cr_assert_eq(clean.failures, 0);
  uint64_t calls = clean.storage_calls;
  cr_assert_gt(calls, 0, "%s: the workload allocated no storage", lc.name);

  uint64_t first_clean = 0;
  for (uint64_t k = 1; k <= calls + 1 && !first_clean; k++) {
    run_result r;
    run_workload(&lc, FAULT_STORAGE, k, &r);
    cr_assert_leq(r.failures, 1, "%s: one failpoint gave %" PRIu64 " failures", lc.name,
                  r.failures);
    if (r.failures > 0) continue;
    if (k > calls) {
      first_clean = k;
      break;
    }
    /* The failpoint fired (placement is deterministic up to it) but nothing
     * was reported: only a relocation may absorb a refused target page, by
     * abandoning its plan. Every other storage allocation is a reservation's. */
    cr_assert(r.reloc_from < k && k <= r.reloc_to,
              "%s: the refused storage allocation %" PRIu64 " (of %" PRIu64
              ") was not reported, and it was not a relocation's (calls %" PRIu64 "..%" PRIu64 ")",
              lc.name, k, calls, r.reloc_from + 1, r.reloc_to);
  }
  cr_log_info("%s: %" PRIu64 " storage allocations, %" PRIu64 " allocator calls, peak %" PRIu64
              " KiB; the first clean run at k = %" PRIu64,
              lc.name, calls, clean.allocator_calls, clean.peak / KiB, first_clean);
  cr_assert_neq(first_clean, 0, "%s: no run completed without a failure", lc.name);
  cr_assert_leq(first_clean, calls + 1, "%s", lc.name);
}

static void capacity_sweep(weft_layout_kind kind) {
  layout_case lc = layout_of(kind);
  run_result clean;
  run_workload(&lc, FAULT_NONE, 0, &clean);
  cr_assert_gt(clean.peak, MAX_PAGE,
               "%s: the workload's peak (%" PRIu64 " bytes) must exceed "
               "max_page for this sweep to mean anything",
               lc.name, clean.peak);

  run_result r;
  run_workload(&lc, FAULT_CAPACITY, clean.peak, &r);
  cr_assert_eq(r.failures, 0, "%s: a storage of exactly the peak holds the workload", lc.name);

  const uint64_t step = (clean.peak - MAX_PAGE) / 8 ? (clean.peak - MAX_PAGE) / 8 : 1;
  for (uint64_t cap = MAX_PAGE; cap < clean.peak; cap += step) {
    run_workload(&lc, FAULT_CAPACITY, cap, &r);
    cr_assert_gt(r.failures, 0,
                 "%s: %" PRIu64 " bytes of storage, below the peak of %" PRIu64 ", refused nothing",
                 lc.name, cap, clean.peak);
  }
}

static void allocator_sweep(weft_layout_kind kind) {
  layout_case lc = layout_of(kind);
  run_result clean;
  run_workload(&lc, FAULT_NONE, 0, &clean);
  uint64_t calls = clean.allocator_calls;
  cr_assert_gt(calls, 0);
  for (uint64_t k = 1; k <= calls + 1; k++) {
    run_result r;
    run_workload(&lc, FAULT_ALLOCATOR, k, &r);
    cr_assert_leq(r.failures, 1, "%s: one failing allocation gave %" PRIu64 " failures", lc.name,
                  r.failures);
    if (k > calls) cr_assert_eq(r.failures, 0, "%s", lc.name);
  }
}

/* ---- tests ----------------------------------------------------------------------------------- */

Test(oom_sweep, the_workload_is_deterministic_in_its_storage_allocations) {
  const weft_layout_kind kinds[] = {WEFT_LAYOUT_SUBSLICES, WEFT_LAYOUT_EXCLUSIVE_PAGES,
                                    WEFT_LAYOUT_ADAPTIVE, WEFT_LAYOUT_CUSTOM};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    layout_case lc = layout_of(kinds[i]);
    run_result a, b;
    run_workload(&lc, FAULT_NONE, 0, &a);
    run_workload(&lc, FAULT_NONE, 0, &b);
    cr_assert_eq(a.failures, 0, "%s", lc.name);
    cr_assert_eq(a.storage_calls, b.storage_calls, "%s", lc.name);
    cr_assert_eq(a.peak, b.peak, "%s", lc.name);
  }
}

Test(oom_sweep, a_storage_failure_anywhere_in_a_subslices_workload_is_a_clean_out_of_memory) {
  storage_sweep(WEFT_LAYOUT_SUBSLICES);
}

Test(oom_sweep,
     a_storage_failure_anywhere_in_an_exclusive_pages_workload_is_a_clean_out_of_memory) {
  storage_sweep(WEFT_LAYOUT_EXCLUSIVE_PAGES);
}

Test(oom_sweep, a_storage_failure_anywhere_in_an_adaptive_workload_is_a_clean_out_of_memory) {
  storage_sweep(WEFT_LAYOUT_ADAPTIVE);
}

Test(oom_sweep, a_storage_failure_anywhere_in_a_custom_direct_workload_is_a_clean_out_of_memory) {
  storage_sweep(WEFT_LAYOUT_CUSTOM);
}

Test(oom_sweep, a_subslices_workload_past_the_storage_capacity_gets_out_of_memory) {
  capacity_sweep(WEFT_LAYOUT_SUBSLICES);
}

Test(oom_sweep, an_exclusive_pages_workload_past_the_storage_capacity_gets_out_of_memory) {
  capacity_sweep(WEFT_LAYOUT_EXCLUSIVE_PAGES);
}

Test(oom_sweep, an_adaptive_workload_past_the_storage_capacity_gets_out_of_memory) {
  capacity_sweep(WEFT_LAYOUT_ADAPTIVE);
}

Test(oom_sweep, a_custom_direct_workload_past_the_storage_capacity_gets_out_of_memory) {
  capacity_sweep(WEFT_LAYOUT_CUSTOM);
}

Test(oom_sweep, an_allocator_failure_anywhere_in_a_subslices_workload_leaks_nothing) {
  allocator_sweep(WEFT_LAYOUT_SUBSLICES);
}

Test(oom_sweep, an_allocator_failure_anywhere_in_an_exclusive_pages_workload_leaks_nothing) {
  allocator_sweep(WEFT_LAYOUT_EXCLUSIVE_PAGES);
}

Test(oom_sweep, an_allocator_failure_anywhere_in_an_adaptive_workload_leaks_nothing) {
  allocator_sweep(WEFT_LAYOUT_ADAPTIVE);
}

Test(oom_sweep, an_allocator_failure_anywhere_in_a_custom_direct_workload_leaks_nothing) {
  allocator_sweep(WEFT_LAYOUT_CUSTOM);
}
