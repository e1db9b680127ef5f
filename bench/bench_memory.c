/* Memory benchmarks: the memory manager (memory/memory.h) on host storage,
 * driven directly (no device, no scheduler), against the allocator a
 * program without weft would call. See docs/benchmarks.md, "Memory".
 *
 *   mem_reserve_release_<layout>  ns per weft_mm_reserve + weft_mm_free on a
 *                                 warm manager, a fixed mixed size set (64 B
 *                                 .. 4 MiB) through a window of 32 live
 *                                 allocations; baseline mem_mallocx_dallocx,
 *                                 the same sizes through the same window.
 *                                 Counts the storage allocations the timed
 *                                 runs make: the target is none.
 *   mem_reserve_release_*_w256, _w4096
 *                                 the same with 256 / 4096 live allocations:
 *                                 how the cost grows with what a manager
 *                                 holds (baselines mem_mallocx_dallocx_w256,
 *                                 _w4096).
 *   mem_trace_<layout>            ns per pass of an ML-like trace (a CNN's
 *                                 weights, two training steps, a shrink);
 *                                 the peaks of a cold pass go to the
 *                                 "memory trace" table and the JSON's
 *                                 "memory_trace" array.
 *   mem_relocation                ns per MiB that weft_mm_relocate moves off
 *                                 outdated arena pages (ops/s = MiB/s), on
 *                                 storage pages already faulted in; baseline
 *                                 mem_memcpy, a memcpy between two malloc'd
 *                                 buffers. mem_relocation_fresh_pages: on
 *                                 pages as the allocator hands them out
 *                                 (fresh), against a memcpy into fresh pages.
 *   mem_buffer_create_release_1k, _200k
 *                                 ns per weft_buffer_create + release on a
 *                                 host device holding 1000 / 200000 live
 *                                 buffers (device level, unlike the rest);
 *                                 the 200k row's ratio must stay under 1.5.
 *
 * Counter groups (tables after the main one, and JSON members):
 * "memory_storage_calls", "memory_trace", "memory_relocation". A pooled
 * layout (SUBSLICES, ADAPTIVE) that makes a storage call once warm fails the
 * run (wb_warn: exit 1 after the reports). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include "bench/harness.h"
#include "memory/memory.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

/* splitmix64: deterministic, the same sequence on every platform. */
static uint64_t rng_next(uint64_t *s) {
  uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
  z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
  z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
  return z ^ (z >> 31);
}

static double mib(uint64_t bytes) {
  return (double)bytes / (double)MiB;
}

/* ---- layouts and managers ------------------------------------------------------------------ */

enum { L_SUBSLICES, L_EXCLUSIVE, L_ADAPTIVE, L_CUSTOM };

/* CUSTOM: what a user might write: zero-size requests apart, 32 MiB pages
 * carved into slices of at most 8 MiB, an exclusive page for anything up to
 * 256 MiB beyond (idle pages returned after 5000 reservations). */
static const weft_pool_config custom_pools[] = {
    {.kind = WEFT_POOL_EXCLUSIVE, .max_alloc_size = 0, .dealloc_period = WEFT_NO_PERIOD},
    {.kind = WEFT_POOL_SLICED, .page_size = 32 * MiB, .max_slice_size = 8 * MiB},
    {.kind = WEFT_POOL_EXCLUSIVE, .max_alloc_size = 256 * MiB, .dealloc_period = 5000},
};

static weft_layout layout_of(int l) {
  switch (l) {
  case L_SUBSLICES:
    return (weft_layout){.kind = WEFT_LAYOUT_SUBSLICES};
  case L_EXCLUSIVE:
    return (weft_layout){.kind = WEFT_LAYOUT_EXCLUSIVE_PAGES};
  case L_ADAPTIVE:
    return (weft_layout){.kind = WEFT_LAYOUT_ADAPTIVE};
  default:
    return (weft_layout){.kind = WEFT_LAYOUT_CUSTOM,
                         .pools = custom_pools,
                         .num_pools = sizeof(custom_pools) / sizeof(custom_pools[0])};
  }
}

/* A manager as a device's stream slot would have it: host storage on the
 * default allocator (a private jemalloc arena where weft has jemalloc), no
 * capacity, pages up to 4 GiB (an uncapped host device). */
typedef struct mm_env {
  weft_allocator alloc; /* the storage keeps a pointer to it: an env never moves */
  weft_storage *storage;
  weft_mm *mm;
} mm_env;

static void env_open_storage(mm_env *e) {
  e->alloc = weft_allocator_default();
  wb_check(weft_storage_host_create(&e->alloc, 0, &e->storage), "weft_storage_host_create");
}

static void env_open_mm(mm_env *e, int layout) {
  weft_mm_config cfg = {.layout = layout_of(layout),
                        .max_page = UINT64_C(4) << 30,
                        .device_bytes = 0,
                        .persistent = WEFT_PERSISTENT_ENABLED};
  wb_check(weft_mm_create(&cfg, e->storage, &e->alloc, &e->mm), "weft_mm_create");
}

static void env_close(mm_env *e) {
  weft_mm_destroy(e->mm);
  e->mm = NULL;
  weft_storage_destroy(e->storage);
  e->storage = NULL;
}

static uint64_t storage_calls(const mm_env *e) {
  return weft_storage_host_alloc_calls(e->storage);
}

static void check_valid(const mm_env *e, const char *what) {
  wb_check(weft_mm_validate(e->mm), what);
}

/* ---- the baseline allocator -------------------------------------------------------------------
 *
 * weft_allocator_default() is, where weft has jemalloc, mallocx(size,
 * MALLOCX_ARENA(a private arena made by arenas.create) | MALLOCX_TCACHE_NONE)
 * and dallocx(p, MALLOCX_TCACHE_NONE) (core/alloc.c): exactly the baseline,
 * behind one indirect call. weft-bench is not compiled with WEFT_HAVE_JEMALLOC,
 * so it goes through that allocator rather than calling mallocx itself; in a
 * build without jemalloc the same calls are posix_memalign/free, and the
 * report says so. Alignment 1 adds no MALLOCX_ALIGN flag. */

static weft_allocator base_alloc;

static void note_baseline_allocator(wb_ctx *c) {
  wb_note(c, "baseline allocator: %s",
          weft_allocator_default_is_jemalloc()
              ? "jemalloc mallocx/dallocx on weft's private arena "
                "(MALLOCX_ARENA | MALLOCX_TCACHE_NONE)"
              : "libc posix_memalign/free: this build has no jemalloc, so mem_mallocx_dallocx "
                "and mem_trace_mallocx measure libc");
}

static void *base_malloc(uint64_t size) {
  void *p = base_alloc.alloc(base_alloc.self, (size_t)size, 1);
  if (!p) wb_fatal("the baseline allocator refused %" PRIu64 " bytes", size);
  return p;
}

static void base_free(void *p, uint64_t size) {
  base_alloc.free(base_alloc.self, p, (size_t)size, 1);
}

/* ---- reserve + release ------------------------------------------------------------------------
 *
 * A pass: RR_PASS reservations; reservation k takes window slot
 * rr_pick[k] % window (releasing what lives there first) with size
 * rr_size[k]; the pass ends by releasing what the window still holds. A run
 * of n operations is n reservations and n releases: whole passes, then a
 * prefix of one, each from an empty window. Sizes are log-uniform over 64 B
 * .. 4 MiB (an exponent 6..21, then uniform within the octave: most are not
 * multiples of 64). The main window holds 32 live allocations; the _w256
 * rows hold 256 and the _w4096 rows 4096, to show how the cost grows with
 * what a manager holds. A pass is RR_PASS reservations, or 16 windows when
 * that is more (the w4096 pass: 65536), so the window is full (95% after
 * three windows' worth) for most of it. */

#define RR_PASS       4096u
#define RR_WINDOW     32u
#define RR_WIDE       256u
#define RR_HUGE       4096u
#define RR_MAX_WINDOW RR_HUGE
#define RR_SEQ        (16u * RR_MAX_WINDOW) /* reservations of the longest pass */
#define RR_ITERS      (5u * RR_PASS)        /* 20480: 5 passes */
#define RR_HUGE_ITERS (16u * RR_HUGE)       /* 65536: one w4096 pass */
#define RR_SEED       UINT64_C(0x5EED0001)
#define RR_WARMUP_MAX 8u /* warm-up passes until one adds no page */

static uint64_t rr_size[RR_SEQ];
static uint32_t rr_pick[RR_SEQ];
static bool rr_built;

static void rr_build(void) {
  if (rr_built) return;
  uint64_t s = RR_SEED;
  for (uint32_t k = 0; k < RR_SEQ; k++) { /* the first RR_PASS: as they always were */
    unsigned e = 6 + (unsigned)(rng_next(&s) % 16);
    uint64_t lo = UINT64_C(1) << e;
    rr_size[k] = lo + rng_next(&s) % lo;
    rr_pick[k] = (uint32_t)rng_next(&s);
  }
  rr_built = true;
}

enum { K_WINDOW, K_WARMUP_PASSES, K_CALLS_COLD, K_RESERVED, K_CALLS_WARM };

static const wb_group storage_group = {
    .title = "memory: storage allocations once warm (mem_reserve_release_*; target 0)",
    .json_key = "memory_storage_calls",
    .legend = "warmup_passes: passes in setup until one made no storage allocation (calls_cold "
              "of them); reserved_mib: bytes_reserved once warm; calls_warm: storage allocations "
              "during every run after setup (target 0)",
    .counters = {{"window", WB_LAST, 0},
                 {"warmup_passes", WB_LAST, 0},
                 {"calls_cold", WB_LAST, 0},
                 {"reserved_mib", WB_LAST, 1},
                 {"calls_warm", WB_TOTAL, 0}}};

typedef struct rr_state {
  mm_env env;
  int layout;
  uint32_t window;
  uint64_t calls_warm; /* storage allocations during the runs */
  weft_mem mem[RR_MAX_WINDOW];
} rr_state;

static void rr_pass_mm(rr_state *s, uint32_t count) {
  weft_mm *mm = s->env.mm;
  for (uint32_t k = 0; k < count; k++) {
    weft_mem *m = &s->mem[rr_pick[k] % s->window];
    if (weft_mem_is_placed(m)) weft_mm_free(mm, m);
    weft_mem_init(m, rr_size[k]);
    weft_status st = weft_mm_reserve(mm, m, WEFT_RESERVE_ALLOW);
    if (st) wb_check(st, "weft_mm_reserve");
  }
  for (uint32_t j = 0; j < s->window; j++)
    if (weft_mem_is_placed(&s->mem[j])) weft_mm_free(mm, &s->mem[j]);
}

/* The reservations of one pass through a window of |window|. */
static uint32_t rr_pass_len(uint32_t window) {
  return 16 * window > RR_PASS ? 16 * window : RR_PASS;
}

/* arg of a reserve+release benchmark: the layout, | WIDE for the window of
 * 256, | HUGE for 4096. */
#define WIDE 0x10
#define HUGE 0x20

static uint32_t rr_window_of(int arg) {
  return arg & HUGE ? RR_HUGE : arg & WIDE ? RR_WIDE : RR_WINDOW;
}

static void rr_setup(void **state, wb_ctx *c) {
  int layout = wb_arg(c) & ~(WIDE | HUGE);
  uint32_t window = rr_window_of(wb_arg(c));
  rr_build();
  rr_state *s = wb_calloc(1, sizeof(*s));
  s->layout = layout;
  s->window = window;
  env_open_storage(&s->env);
  env_open_mm(&s->env, layout);
  /* Warm-up: whole passes until one needs no new storage (the first pass
   * places everything; ADAPTIVE's first pass also grows the arena's page,
   * so its second pass fills the new page size from scratch). */
  unsigned passes = 0;
  uint64_t cold = 0;
  for (;;) {
    uint64_t before = storage_calls(&s->env);
    rr_pass_mm(s, rr_pass_len(window));
    passes++;
    uint64_t made = storage_calls(&s->env) - before;
    cold += made;
    if (made == 0) break;
    if (passes == RR_WARMUP_MAX) break; /* the runs will show the calls */
  }
  check_valid(&s->env, "weft_mm_validate after the warm-up");
  wb_report(c, K_WINDOW, window);
  wb_report(c, K_WARMUP_PASSES, passes);
  wb_report(c, K_CALLS_COLD, (double)cold);
  wb_report(c, K_RESERVED, mib(weft_mm_usage(s->env.mm).bytes_reserved));
  *state = s;
}

static uint64_t rr_run(void *state, uint64_t n, wb_ctx *c) {
  rr_state *s = state;
  uint64_t calls0 = storage_calls(&s->env);
  uint64_t t0 = wb_now_ns();
  uint32_t pass = rr_pass_len(s->window);
  for (uint64_t done = 0; done < n;) {
    uint32_t c = n - done < pass ? (uint32_t)(n - done) : pass;
    rr_pass_mm(s, c);
    done += c;
  }
  uint64_t t1 = wb_now_ns();
  uint64_t calls = storage_calls(&s->env) - calls0;
  s->calls_warm += calls;
  wb_report(c, K_CALLS_WARM, (double)calls);
  weft_memory_usage u = weft_mm_usage(s->env.mm);
  if (u.number_allocs || u.bytes_in_use)
    wb_fatal("%s: %" PRIu64 " allocations still live after a run", wb_name(c), u.number_allocs);
  return t1 - t0;
}

/* A pooled layout (SUBSLICES, ADAPTIVE) that calls the storage once warm
 * fails the run; EXCLUSIVE_PAGES returns idle pages on purpose. */
static void rr_teardown(void *state, wb_ctx *c) {
  rr_state *s = state;
  check_valid(&s->env, "weft_mm_validate after the runs");
  if (s->calls_warm && (s->layout == L_SUBSLICES || s->layout == L_ADAPTIVE))
    wb_warn(c, "%s: %" PRIu64 " storage calls once warm (target 0): the run fails", wb_name(c),
            s->calls_warm);
  else if (s->calls_warm)
    wb_note(c,
            "%s: %" PRIu64 " storage calls once warm (exclusive pools return idle pages every "
            "dealloc_period/5 reservations)",
            wb_name(c), s->calls_warm);
  env_close(&s->env);
  free(s);
}

/* The baselines: the same passes on the baseline allocator. */
typedef struct rrb_state {
  uint32_t window;
  void *p[RR_MAX_WINDOW];
  uint64_t size[RR_MAX_WINDOW];
} rrb_state;

static void rrb_pass(rrb_state *s, uint32_t count) {
  for (uint32_t k = 0; k < count; k++) {
    uint32_t j = rr_pick[k] % s->window;
    if (s->p[j]) base_free(s->p[j], s->size[j]);
    s->p[j] = base_malloc(rr_size[k]);
    s->size[j] = rr_size[k];
  }
  for (uint32_t j = 0; j < s->window; j++)
    if (s->p[j]) {
      base_free(s->p[j], s->size[j]);
      s->p[j] = NULL;
    }
}

/* arg: WIDE for the window of 256, HUGE for 4096. */
static void rrb_setup(void **state, wb_ctx *c) {
  rr_build();
  rrb_state *s = wb_calloc(1, sizeof(*s));
  s->window = rr_window_of(wb_arg(c));
  if (s->window == RR_WINDOW) note_baseline_allocator(c);
  rrb_pass(s, rr_pass_len(s->window)); /* the same warm-up as the managers' first pass */
  *state = s;
}

static uint64_t rrb_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  rrb_state *s = state;
  uint64_t t0 = wb_now_ns();
  uint32_t pass = rr_pass_len(s->window);
  for (uint64_t done = 0; done < n;) {
    uint32_t c = n - done < pass ? (uint32_t)(n - done) : pass;
    rrb_pass(s, c);
    done += c;
  }
  return wb_now_ns() - t0;
}

static void rrb_teardown(void *state, wb_ctx *c) {
  (void)c;
  free(state);
}

/* ---- the ML-like trace ------------------------------------------------------------------------
 *
 * A ResNet-style CNN trained in fp32 at batch 8: a 7x7 stem (3 -> 64
 * channels, 224 -> 112 pixels), four stages of three 3x3 convolutions (64,
 * 128, 256, 512 channels at 56, 28, 14, 7 pixels; pooling and strides,
 * which allocate nothing here, take the pixels down), a 512 -> 1000
 * classifier: 14 layers.
 *
 *   build     per layer, in order: weights (37 KiB .. 9 MiB, growing with
 *             the stages), bias, batch-norm affine and running statistics
 *   step x2   forward: the input batch; per layer an im2col workspace
 *             (one sample's, freed at once) and the output activation
 *             (kept for backward); the loss.
 *             backward, last layer first: weight/bias/batch-norm gradients
 *             (kept for the optimizer), a workspace (freed at once), the
 *             input gradient; then the output gradient and the saved
 *             activation go.
 *             optimizer: momentum buffers (first step only, kept), then
 *             every gradient goes.
 *   shrink    the optimizer state goes; one inference pass at batch 1 (an
 *             activation goes as soon as the next layer has consumed it);
 *             then the model, last layer first.
 *
 * Every allocation of a pass is released within it. */

#define TR_MAX_EVENTS 1024u
#define TR_LAYERS     14u
#define TR_BATCH      8u
#define TR_ITERS      20u

typedef struct tr_event {
  uint32_t idx;  /* the allocation */
  uint64_t size; /* > 0: reserve it with this size; 0: release it */
} tr_event;

static tr_event tr_ev[TR_MAX_EVENTS];
static uint32_t tr_nev, tr_nalloc;
static uint64_t tr_peak_live; /* the peak of the sum of live sizes */
static bool tr_built;

typedef struct tr_layer {
  uint32_t cin, cout, k, s_out;
} tr_layer;

/* Appends a reservation of |size| (recorded in |sizes| by allocation index). */
static uint32_t tb_alloc(uint64_t size, uint64_t *sizes, uint64_t *live) {
  if (tr_nev == TR_MAX_EVENTS)
    wb_fatal("the memory trace holds more than %u events", TR_MAX_EVENTS);
  sizes[tr_nalloc] = size;
  tr_ev[tr_nev++] = (tr_event){.idx = tr_nalloc, .size = size};
  *live += size;
  if (*live > tr_peak_live) tr_peak_live = *live;
  return tr_nalloc++;
}

static void tb_free(uint32_t idx, const uint64_t *sizes, uint64_t *live) {
  if (tr_nev == TR_MAX_EVENTS)
    wb_fatal("the memory trace holds more than %u events", TR_MAX_EVENTS);
  tr_ev[tr_nev++] = (tr_event){.idx = idx, .size = 0};
  *live -= sizes[idx];
}

static void tr_build(void) {
  if (tr_built) return;
  tr_layer L[TR_LAYERS];
  uint32_t n = 0;
  L[n++] = (tr_layer){3, 64, 7, 112};
  uint32_t cin = 64;
  for (uint32_t st = 0; st < 4; st++)
    for (uint32_t j = 0; j < 3; j++) {
      uint32_t c = 64u << st;
      L[n++] = (tr_layer){cin, c, 3, 56u >> st};
      cin = c;
    }
  L[n++] = (tr_layer){512, 1000, 1, 1};
  const uint64_t f = 4; /* bytes per fp32 */
  /* Sizes by allocation index, to release with the right size. */
  static uint64_t sizes[TR_MAX_EVENTS];
  uint64_t live = 0;
#define A(sz) tb_alloc((sz), sizes, &live)
#define F(i)  tb_free((i), sizes, &live)
  uint32_t w[TR_LAYERS], b[TR_LAYERS], bn[TR_LAYERS], bs[TR_LAYERS], mom[TR_LAYERS];
  for (uint32_t l = 0; l < TR_LAYERS; l++) {
    w[l] = A((uint64_t)L[l].cin * L[l].cout * L[l].k * L[l].k * f);
    b[l] = A((uint64_t)L[l].cout * f);
    bn[l] = A(2 * (uint64_t)L[l].cout * f);
    bs[l] = A(2 * (uint64_t)L[l].cout * f);
  }
  for (uint32_t step = 0; step < 2; step++) {
    uint64_t act[TR_LAYERS + 1];
    uint32_t saved[TR_LAYERS + 1];
    act[0] = (uint64_t)TR_BATCH * 3 * 224 * 224 * f;
    saved[0] = A(act[0]);
    for (uint32_t l = 0; l < TR_LAYERS; l++) {
      uint32_t ws = A((uint64_t)L[l].cin * L[l].k * L[l].k * L[l].s_out * L[l].s_out * f);
      act[l + 1] = (uint64_t)TR_BATCH * L[l].cout * L[l].s_out * L[l].s_out * f;
      saved[l + 1] = A(act[l + 1]);
      F(ws);
    }
    uint32_t loss = A((uint64_t)TR_BATCH * f);
    uint32_t g = A(act[TR_LAYERS]);
    F(loss);
    uint32_t gw[TR_LAYERS], gb[TR_LAYERS], gbn[TR_LAYERS];
    for (uint32_t l = TR_LAYERS; l-- > 0;) {
      gw[l] = A((uint64_t)L[l].cin * L[l].cout * L[l].k * L[l].k * f);
      gb[l] = A((uint64_t)L[l].cout * f);
      gbn[l] = A(2 * (uint64_t)L[l].cout * f);
      uint32_t ws = A((uint64_t)L[l].cin * L[l].k * L[l].k * L[l].s_out * L[l].s_out * f);
      uint32_t gin = A(act[l]);
      F(ws);
      F(g);
      F(saved[l + 1]);
      g = gin;
    }
    F(g);
    F(saved[0]);
    for (uint32_t l = 0; l < TR_LAYERS; l++) {
      if (step == 0) mom[l] = A((uint64_t)L[l].cin * L[l].cout * L[l].k * L[l].k * f);
      F(gw[l]);
      F(gb[l]);
      F(gbn[l]);
    }
  }
  /* The shrink. */
  for (uint32_t l = 0; l < TR_LAYERS; l++) F(mom[l]);
  uint32_t prev = A((uint64_t)3 * 224 * 224 * f);
  for (uint32_t l = 0; l < TR_LAYERS; l++) {
    uint32_t ws = A((uint64_t)L[l].cin * L[l].k * L[l].k * L[l].s_out * L[l].s_out * f);
    uint32_t out = A((uint64_t)L[l].cout * L[l].s_out * L[l].s_out * f);
    F(ws);
    F(prev);
    prev = out;
  }
  F(prev);
  for (uint32_t l = TR_LAYERS; l-- > 0;) {
    F(bs[l]);
    F(bn[l]);
    F(b[l]);
    F(w[l]);
  }
#undef A
#undef F
  if (live != 0) wb_fatal("the memory trace leaks %" PRIu64 " bytes", live);
  tr_built = true;
}

enum {
  K_ALLOCATIONS,
  K_PEAK_RESERVED,
  K_PEAK_IN_USE,
  K_OVERHEAD,
  K_TR_CALLS_COLD,
  K_TR_CALLS_WARM,
  K_RESERVED_END
};

static const wb_group trace_group = {
    .title = "memory trace (ResNet-style CNN, fp32, batch 8: build, 2 training steps, shrink; "
             "peaks of the cold pass)",
    .json_key = "memory_trace",
    .legend = "ratio = peak reserved / peak in use (1.00: no overhead; the baseline has only the "
              "peak in use); calls = storage allocations (cold: the first pass on a fresh "
              "manager; warm: all timed passes); reserved_end_mib: bytes_reserved after the last "
              "pass",
    .counters = {{"allocations", WB_LAST, 0},
                 {"peak_reserved_mib", WB_LAST, 1},
                 {"peak_in_use_mib", WB_LAST, 1},
                 {"ratio", WB_LAST, 2},
                 {"calls_cold", WB_LAST, 0},
                 {"calls_warm", WB_TOTAL, 0},
                 {"reserved_end_mib", WB_LAST, 1}}};

typedef struct tr_state {
  mm_env env;
  const char *name;
  weft_mem *mem;                       /* [tr_nalloc] */
  uint64_t peak_reserved, peak_in_use; /* of the cold pass */
} tr_state;

/* One pass; |peaks|: poll the usage after every reservation (the cold pass). */
static void tr_pass_mm(tr_state *s, bool peaks) {
  weft_mm *mm = s->env.mm;
  uint64_t live = 0;
  for (uint32_t i = 0; i < tr_nev; i++) {
    const tr_event *e = &tr_ev[i];
    weft_mem *m = &s->mem[e->idx];
    if (e->size == 0) {
      if (peaks) live -= m->size;
      weft_mm_free(mm, m);
      continue;
    }
    weft_mem_init(m, e->size);
    weft_status st = weft_mm_reserve(mm, m, WEFT_RESERVE_ALLOW);
    if (st) wb_check(st, "weft_mm_reserve (memory trace)");
    if (!peaks) continue;
    live += e->size;
    weft_memory_usage u = weft_mm_usage(mm);
    if (u.bytes_in_use != live)
      wb_fatal("%s: bytes_in_use %" PRIu64 " but %" PRIu64 " bytes are live", s->name,
               u.bytes_in_use, live);
    if (u.bytes_reserved > s->peak_reserved) s->peak_reserved = u.bytes_reserved;
    if (u.bytes_in_use > s->peak_in_use) s->peak_in_use = u.bytes_in_use;
  }
}

/* arg: the layout. */
static void tr_setup(void **state, wb_ctx *c) {
  tr_build();
  tr_state *s = wb_calloc(1, sizeof(*s));
  s->name = wb_name(c);
  s->mem = wb_calloc(tr_nalloc, sizeof(weft_mem));
  env_open_storage(&s->env);
  env_open_mm(&s->env, wb_arg(c));
  tr_pass_mm(s, true); /* cold: a fresh manager, peaks polled */
  check_valid(&s->env, "weft_mm_validate after the cold trace");
  wb_report(c, K_ALLOCATIONS, tr_nalloc);
  wb_report(c, K_PEAK_RESERVED, mib(s->peak_reserved));
  wb_report(c, K_PEAK_IN_USE, mib(s->peak_in_use));
  wb_report(c, K_OVERHEAD,
            s->peak_in_use ? (double)s->peak_reserved / (double)s->peak_in_use : 0.0);
  wb_report(c, K_TR_CALLS_COLD, (double)storage_calls(&s->env));
  *state = s;
}

static uint64_t tr_run(void *state, uint64_t n, wb_ctx *c) {
  tr_state *s = state;
  uint64_t calls0 = storage_calls(&s->env);
  uint64_t t0 = wb_now_ns();
  for (uint64_t k = 0; k < n; k++) tr_pass_mm(s, false);
  uint64_t t1 = wb_now_ns();
  wb_report(c, K_TR_CALLS_WARM, (double)(storage_calls(&s->env) - calls0));
  weft_memory_usage u = weft_mm_usage(s->env.mm);
  if (u.number_allocs)
    wb_fatal("%s: %" PRIu64 " allocations still live after a pass", s->name, u.number_allocs);
  return t1 - t0;
}

static void tr_teardown(void *state, wb_ctx *c) {
  tr_state *s = state;
  check_valid(&s->env, "weft_mm_validate after the trace runs");
  wb_report(c, K_RESERVED_END, mib(weft_mm_usage(s->env.mm).bytes_reserved));
  env_close(&s->env);
  free(s->mem);
  free(s);
}

/* The baseline: the same trace on the baseline allocator. */
typedef struct trb_state {
  void **p;
  uint64_t *size;
} trb_state;

static void trb_pass(trb_state *s) {
  for (uint32_t i = 0; i < tr_nev; i++) {
    const tr_event *e = &tr_ev[i];
    if (e->size == 0) {
      base_free(s->p[e->idx], s->size[e->idx]);
      s->p[e->idx] = NULL;
    } else {
      s->p[e->idx] = base_malloc(e->size);
      s->size[e->idx] = e->size;
    }
  }
}

static void trb_setup(void **state, wb_ctx *c) {
  tr_build();
  trb_state *s = wb_calloc(1, sizeof(*s));
  s->p = wb_calloc(tr_nalloc, sizeof(void *));
  s->size = wb_calloc(tr_nalloc, sizeof(uint64_t));
  note_baseline_allocator(c);
  wb_report(c, K_ALLOCATIONS, tr_nalloc);
  wb_report(c, K_PEAK_IN_USE, mib(tr_peak_live));
  trb_pass(s); /* the same cold pass as the managers' */
  *state = s;
}

static uint64_t trb_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  trb_state *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t k = 0; k < n; k++) trb_pass(s);
  return wb_now_ns() - t0;
}

static void trb_teardown(void *state, wb_ctx *c) {
  (void)c;
  trb_state *s = state;
  free(s->p);
  free(s->size);
  free(s);
}

/* ---- relocation -------------------------------------------------------------------------------
 *
 * Each run, untimed: a fresh ADAPTIVE manager; allocations of 96 KiB .. 1 MiB
 * (past the small pool's 64 KiB slices: they land in the arena, on its first
 * 2 MiB pages) until they hold 4/3 of the run's MiB; every fourth is
 * released again (holes, as real pages have), the rest is filled with a
 * pattern; then one 8 MiB allocation grows the arena's page to 9 MiB, which
 * outdates every 2 MiB page. Timed: weft_mm_relocate(mm, true), which moves
 * every live allocation into 9 MiB pages (adding them as it goes). Untimed
 * again: every moved allocation must hold its pattern.
 *
 * One operation = one MiB moved: a run of n operations targets n MiB of live
 * bytes and returns its time scaled to exactly n MiB (time x n MiB / bytes
 * moved), so ns/op is ns per MiB and ops/s is MiB/s.
 *
 * Host storage gets its bytes from the process's allocator, and jemalloc
 * hands back to the OS the pages a previous run freed (decay), so new pages
 * are usually fresh: the copy into them then pays one page fault per 4 KiB,
 * which on a GPU (cuMemAlloc'd pages) it would not. mem_relocation therefore
 * runs its storage on a recycling allocator (freed blocks are kept and
 * handed out again for the same size: from the second run on, every page is
 * already faulted in), and compares with a memcpy between two pre-faulted
 * buffers; mem_relocation_fresh_pages runs it on the default allocator and
 * compares with a memcpy into a freshly mmap'd buffer. Both count the minor
 * page faults of the timed part (getrusage). */

#define RL_ITERS    128u /* MiB moved per run */
#define RL_SEED     UINT64_C(0x5EED0003)
#define RL_MIN_SIZE (96 * KiB)
#define RL_MAX_SIZE MiB
#define RL_GROW     (8 * MiB)

static uint64_t minor_faults(void) {
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return (uint64_t)ru.ru_minflt;
}

/* A recycling allocator over the default one: a freed block waits for the
 * next request of the same size and alignment. */
typedef struct rc_block {
  void *p;
  size_t size, align;
} rc_block;

typedef struct recycler {
  weft_allocator inner;
  rc_block *blocks;
  size_t n, cap;
} recycler;

static void *rc_alloc(void *self, size_t size, size_t align) {
  recycler *r = self;
  for (size_t i = r->n; i-- > 0;)
    if (r->blocks[i].size == size && r->blocks[i].align == align) {
      void *p = r->blocks[i].p;
      r->blocks[i] = r->blocks[--r->n];
      return p;
    }
  return r->inner.alloc(r->inner.self, size, align);
}

static void rc_free(void *self, void *p, size_t size, size_t align) {
  recycler *r = self;
  if (r->n == r->cap) {
    size_t nc = r->cap ? r->cap * 2 : 256;
    rc_block *nb = realloc(r->blocks, nc * sizeof(rc_block));
    if (!nb) {
      r->inner.free(r->inner.self, p, size, align);
      return;
    }
    r->blocks = nb;
    r->cap = nc;
  }
  r->blocks[r->n++] = (rc_block){.p = p, .size = size, .align = align};
}

static void rc_destroy(recycler *r) {
  for (size_t i = 0; i < r->n; i++)
    r->inner.free(r->inner.self, r->blocks[i].p, r->blocks[i].size, r->blocks[i].align);
  free(r->blocks);
  r->blocks = NULL;
  r->n = r->cap = 0;
}

enum { RL_WARM, RL_FRESH, RL_VARIANTS };

enum { K_MIB_MOVED, K_MOVED, K_PAGES_BEFORE, K_PAGES_AFTER, K_MIB_S, K_FAULTS };

static const wb_group reloc_group = {
    .title = "memory: relocation (ADAPTIVE: live allocations of 96 KiB .. 1 MiB moved off "
             "outdated 2 MiB pages into 9 MiB pages; medians over the runs, warm-up included)",
    .json_key = "memory_relocation",
    .legend = "mib_per_s: bytes moved / time of weft_mm_relocate; faults_per_mib: minor page "
              "faults in the timed part (256 per MiB: every 4 KiB page fresh)",
    .counters = {{"mib_moved", WB_MEDIAN, 1},
                 {"allocations", WB_MEDIAN, 0},
                 {"pages_before", WB_MEDIAN, 0},
                 {"pages_after", WB_MEDIAN, 0},
                 {"mib_per_s", WB_MEDIAN, 0},
                 {"faults_per_mib", WB_MEDIAN, 1}}};

typedef struct rl_state {
  int variant;
  recycler rc;
  mm_env env;
  weft_mem *mem; /* [cap] */
  uint32_t cap;
} rl_state;

/* arg: RL_WARM or RL_FRESH. */
static void rl_setup(void **state, wb_ctx *c) {
  rl_state *s = wb_calloc(1, sizeof(*s));
  s->variant = wb_arg(c);
  env_open_storage(&s->env);
  if (s->variant == RL_WARM) {
    /* The storage keeps &s->env.alloc: point it at the recycler. */
    s->rc.inner = s->env.alloc;
    s->env.alloc = (weft_allocator){.self = &s->rc, .alloc = rc_alloc, .free = rc_free};
  }
  *state = s;
}

static unsigned char rl_byte(uint32_t i, uint64_t at) {
  return (unsigned char)(i * 131u + at * 7u + 1u);
}

static void *rl_resolve(rl_state *s, weft_mem *m) {
  void *p = NULL;
  wb_check(weft_mm_resolve(s->env.mm, m, &p), "weft_mm_resolve (relocation)");
  return p;
}

static uint64_t pages_of(const weft_mm *mm) {
  weft_pool_report r[WEFT_MAX_POOL_REPORTS] = {0};
  size_t n = WEFT_MAX_POOL_REPORTS;
  weft_mm_report(mm, r, &n);
  uint64_t pages = 0;
  for (size_t i = 0; i < n && i < WEFT_MAX_POOL_REPORTS; i++) pages += r[i].pages;
  return pages;
}

static uint64_t rl_run(void *state, uint64_t n, wb_ctx *c) {
  rl_state *s = state;
  uint64_t want = n * MiB, total = 0, seed = RL_SEED; /* every run the same sizes */
  uint32_t count = 0;
  /* The sizes first: descriptors must not move once placed (slices point at
   * them), so the array is sized before the first reservation. */
  while (total < want + want / 3) {
    if (count == s->cap) {
      uint32_t nc = s->cap ? s->cap * 2 : 256;
      weft_mem *nm = realloc(s->mem, nc * sizeof(weft_mem));
      if (!nm) wb_fatal("out of memory");
      s->mem = nm;
      s->cap = nc;
    }
    uint64_t size = RL_MIN_SIZE + rng_next(&seed) % (RL_MAX_SIZE - RL_MIN_SIZE + 1);
    weft_mem_init(&s->mem[count++], size);
    total += size;
  }
  env_open_mm(&s->env, L_ADAPTIVE);
  for (uint32_t i = 0; i < count; i++)
    wb_check(weft_mm_reserve(s->env.mm, &s->mem[i], WEFT_RESERVE_ALLOW),
             "weft_mm_reserve (relocation)");
  uint64_t live = 0, nlive = 0;
  for (uint32_t i = 0; i < count; i++) {
    weft_mem *m = &s->mem[i];
    if (i % 4 == 3) {
      weft_mm_free(s->env.mm, m);
      continue;
    }
    unsigned char *p = rl_resolve(s, m);
    memset(p, rl_byte(i, 0), m->size); /* every source byte written: faulted in */
    for (uint64_t at = 0; at < m->size; at += 4096) p[at] = rl_byte(i, at);
    p[m->size - 1] = rl_byte(i, m->size - 1);
    live += m->size;
    nlive++;
  }
  uint64_t pages_before = pages_of(s->env.mm);
  weft_mem big;
  weft_mem_init(&big, RL_GROW);
  wb_check(weft_mm_reserve(s->env.mm, &big, WEFT_RESERVE_ALLOW), "weft_mm_reserve (growth)");
  if (weft_mm_page_size(s->env.mm) <= 2 * MiB)
    wb_fatal("mem_relocation: the growth did not outdate the arena's pages");

  uint64_t f0 = minor_faults();
  uint64_t t0 = wb_now_ns();
  uint64_t moved = weft_mm_relocate(s->env.mm, true);
  uint64_t t1 = wb_now_ns();
  uint64_t f1 = minor_faults();

  if (moved != nlive)
    wb_fatal("mem_relocation: %" PRIu64 " of %" PRIu64 " live allocations moved", moved, nlive);
  for (uint32_t i = 0; i < count; i++) {
    if (i % 4 == 3) continue;
    weft_mem *m = &s->mem[i];
    const unsigned char *p = rl_resolve(s, m);
    bool ok = p[m->size - 1] == rl_byte(i, m->size - 1) && p[1] == rl_byte(i, 0);
    for (uint64_t at = 0; ok && at < m->size; at += 4096) ok = p[at] == rl_byte(i, at);
    if (!ok) wb_fatal("mem_relocation: allocation %u lost its bytes in the move", i);
  }
  check_valid(&s->env, "weft_mm_validate after relocation");
  wb_report(c, K_MIB_MOVED, mib(live));
  wb_report(c, K_MOVED, (double)moved);
  wb_report(c, K_PAGES_BEFORE, (double)pages_before);
  wb_report(c, K_PAGES_AFTER, (double)pages_of(s->env.mm));
  wb_report(c, K_MIB_S, mib(live) / ((double)(t1 - t0 ? t1 - t0 : 1) / 1e9));
  wb_report(c, K_FAULTS, (double)(f1 - f0) / mib(live));
  weft_mm_destroy(s->env.mm);
  s->env.mm = NULL;
  return (uint64_t)((double)(t1 - t0) * (double)want / (double)live + 0.5);
}

static void rl_teardown(void *state, wb_ctx *c) {
  (void)c;
  rl_state *s = state;
  env_close(&s->env);
  rc_destroy(&s->rc);
  free(s->mem);
  free(s);
}

/* The baselines: one memcpy of n MiB between two malloc'd buffers, written
 * once beforehand (no page fault in the timed copy); or, _fresh_pages, into
 * a destination mmap'd anew for every run (a page fault per 4 KiB). */
typedef struct mc_state {
  bool fresh;
  unsigned char *src, *dst;
  uint64_t bytes;
} mc_state;

/* arg: RL_FRESH for a destination mmap'd anew each run. */
static void mc_setup(void **state, wb_ctx *c) {
  mc_state *s = wb_calloc(1, sizeof(mc_state));
  s->fresh = wb_arg(c) == RL_FRESH;
  *state = s;
}

static uint64_t mc_run(void *state, uint64_t n, wb_ctx *c) {
  mc_state *s = state;
  uint64_t bytes = n * MiB;
  if (bytes > s->bytes) {
    free(s->src);
    if (!s->fresh) free(s->dst);
    s->src = malloc(bytes);
    s->dst = s->fresh ? NULL : malloc(bytes);
    if (!s->src || (!s->fresh && !s->dst)) wb_fatal("out of memory (2 x %" PRIu64 " MiB)", n);
    memset(s->src, 0x5A, bytes);
    if (s->dst) memset(s->dst, 0, bytes);
    s->bytes = bytes;
  }
  unsigned char *dst = s->dst;
  if (s->fresh) {
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) wb_fatal("mmap of %" PRIu64 " MiB failed", n);
    dst = m;
  }
  s->src[bytes - 1] = (unsigned char)n;
  uint64_t f0 = minor_faults();
  uint64_t t0 = wb_now_ns();
  memcpy(dst, s->src, bytes);
  uint64_t t1 = wb_now_ns();
  uint64_t f1 = minor_faults();
  if (dst[bytes - 1] != (unsigned char)n || dst[0] != 0x5A) wb_fatal("mem_memcpy: bad copy");
  if (s->fresh) munmap(dst, bytes);
  wb_report(c, K_MIB_MOVED, mib(bytes));
  wb_report(c, K_FAULTS, (double)(f1 - f0) / mib(bytes));
  return t1 - t0;
}

static void mc_teardown(void *state, wb_ctx *c) {
  (void)c;
  mc_state *s = state;
  free(s->src);
  free(s->dst);
  free(s);
}

/* ---- buffer creation against live buffers ------------------------------------------------
 *
 * Device level (the whole path: handle table, command, scheduler, the
 * stream's memory manager). Setup opens a host device with default options
 * and creates |live| buffers of CL_SIZE bytes on stream 0, kept to the end.
 * One op = weft_buffer_create + weft_buffer_release of one more buffer of
 * the same size; a run ends with weft_sync, so ns/op includes the scheduler's
 * reservation and free. The 200k row's ratio to the 1k row is the growth with
 * live buffers (target < 1.5: creation is O(1) amortised). Teardown checks
 * that exactly the |live| buffers are left. */

#define CL_SIZE  256u
#define CL_ITERS 20000u

typedef struct cl_state {
  weft_device *dev;
  weft_buffer *live;
  uint32_t nlive;
} cl_state;

/* arg: the live buffers. */
static void cl_setup(void **state, wb_ctx *c) {
  uint32_t nlive = (uint32_t)wb_arg(c);
  cl_state *s = wb_calloc(1, sizeof(*s));
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_HOST;
  wb_check(weft_device_open(&o, &s->dev), "weft_device_open");
  s->live = wb_calloc(nlive, sizeof(weft_buffer));
  s->nlive = nlive;
  for (uint32_t i = 0; i < nlive; i++)
    wb_check(weft_buffer_create(s->dev, 0, CL_SIZE, &s->live[i]), "weft_buffer_create (live)");
  wb_check(weft_sync(s->dev, 0), "weft_sync (setup)");
  *state = s;
}

static uint64_t cl_run(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  cl_state *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) {
    weft_buffer b;
    wb_check(weft_buffer_create(s->dev, 0, CL_SIZE, &b), "weft_buffer_create");
    wb_check(weft_buffer_release(s->dev, b), "weft_buffer_release");
  }
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  return wb_now_ns() - t0;
}

static void cl_teardown(void *state, wb_ctx *c) {
  (void)c;
  cl_state *s = state;
  weft_memory_usage u = {0};
  wb_check(weft_memory_usage_get(s->dev, &u), "weft_memory_usage_get");
  if (u.number_allocs != s->nlive)
    wb_fatal("buffer create/release: %" PRIu64 " allocations live, expected %" PRIu32,
             u.number_allocs, s->nlive);
  for (uint32_t i = 0; i < s->nlive; i++)
    wb_check(weft_buffer_release(s->dev, s->live[i]), "weft_buffer_release (live)");
  weft_device_close(s->dev);
  free(s->live);
  free(s);
}

static const wb_bench benches[] = {
    {.name = "mem_buffer_create_release_1k",
     .description = "weft_buffer_create + weft_buffer_release of a 256 B buffer on a host device "
                    "holding 1000 live buffers (run ends with weft_sync)",
     .iterations = CL_ITERS,
     .arg = 1000,
     .setup = cl_setup,
     .run = cl_run,
     .teardown = cl_teardown},
    {.name = "mem_buffer_create_release_200k",
     .target_ratio = 1.5 /* creation does not grow with live buffers */,
     .description = "as mem_buffer_create_release_1k with 200000 live buffers (target: ratio < "
                    "1.5)",
     .baseline = "mem_buffer_create_release_1k",
     .iterations = CL_ITERS,
     .arg = 200000,
     .setup = cl_setup,
     .run = cl_run,
     .teardown = cl_teardown},
    {.name = "mem_reserve_release_subslices",
     .target_ratio = 1.0 /* issue 14: at most mallocx (jemalloc builds) at 32, 256, 4096 live */,
     .group = &storage_group,
     .description = "weft_mm_reserve + weft_mm_free, SUBSLICES, warm; 64 B .. 4 MiB through a "
                    "window of 32 live allocations",
     .baseline = "mem_mallocx_dallocx",
     .iterations = RR_ITERS,
     .arg = L_SUBSLICES,
     .setup = rr_setup,
     .run = rr_run,
     .teardown = rr_teardown},
    {.name = "mem_reserve_release_adaptive",
     .target_ratio = 1.0,
     .group = &storage_group,
     .description = "as mem_reserve_release_subslices, ADAPTIVE layout",
     .baseline = "mem_mallocx_dallocx",
     .iterations = RR_ITERS,
     .arg = L_ADAPTIVE,
     .setup = rr_setup,
     .run = rr_run,
     .teardown = rr_teardown},
    {.name = "mem_reserve_release_exclusive_pages",
     .group = &storage_group,
     .description = "as mem_reserve_release_subslices, EXCLUSIVE_PAGES layout",
     .baseline = "mem_mallocx_dallocx",
     .iterations = RR_ITERS,
     .arg = L_EXCLUSIVE,
     .setup = rr_setup,
     .run = rr_run,
     .teardown = rr_teardown},
    {.name = "mem_mallocx_dallocx",
     .group = &storage_group,
     .description = "baseline: the same sizes and window on mallocx/dallocx, private jemalloc "
                    "arena, no tcache (libc where weft has no jemalloc)",
     .iterations = RR_ITERS,
     .setup = rrb_setup,
     .run = rrb_run,
     .teardown = rrb_teardown},
    {.name = "mem_reserve_release_subslices_w256",
     .target_ratio = 1.0,
     .group = &storage_group,
     .description = "as mem_reserve_release_subslices, a window of 256 live allocations",
     .baseline = "mem_mallocx_dallocx_w256",
     .iterations = RR_ITERS,
     .arg = L_SUBSLICES | WIDE,
     .setup = rr_setup,
     .run = rr_run,
     .teardown = rr_teardown},
    {.name = "mem_reserve_release_adaptive_w256",
     .target_ratio = 1.0,
     .group = &storage_group,
     .description = "as mem_reserve_release_adaptive, a window of 256 live allocations",
     .baseline = "mem_mallocx_dallocx_w256",
     .iterations = RR_ITERS,
     .arg = L_ADAPTIVE | WIDE,
     .setup = rr_setup,
     .run = rr_run,
     .teardown = rr_teardown},
    {.name = "mem_mallocx_dallocx_w256",
     .group = &storage_group,
     .description = "baseline: as mem_mallocx_dallocx, a window of 256 live allocations",
     .iterations = RR_ITERS,
     .arg = WIDE,
     .setup = rrb_setup,
     .run = rrb_run,
     .teardown = rrb_teardown},
    {.name = "mem_reserve_release_subslices_w4096",
     .target_ratio = 1.0,
     .group = &storage_group,
     .description = "as mem_reserve_release_subslices, a window of 4096 live allocations",
     .baseline = "mem_mallocx_dallocx_w4096",
     .iterations = RR_HUGE_ITERS,
     .arg = L_SUBSLICES | HUGE,
     .setup = rr_setup,
     .run = rr_run,
     .teardown = rr_teardown},
    {.name = "mem_reserve_release_adaptive_w4096",
     .target_ratio = 1.0,
     .group = &storage_group,
     .description = "as mem_reserve_release_adaptive, a window of 4096 live allocations",
     .baseline = "mem_mallocx_dallocx_w4096",
     .iterations = RR_HUGE_ITERS,
     .arg = L_ADAPTIVE | HUGE,
     .setup = rr_setup,
     .run = rr_run,
     .teardown = rr_teardown},
    {.name = "mem_mallocx_dallocx_w4096",
     .group = &storage_group,
     .description = "baseline: as mem_mallocx_dallocx, a window of 4096 live allocations",
     .iterations = RR_HUGE_ITERS,
     .arg = HUGE,
     .setup = rrb_setup,
     .run = rrb_run,
     .teardown = rrb_teardown},
    {.name = "mem_trace_subslices",
     .group = &trace_group,
     .description = "one pass of the ML-like trace (CNN build, 2 training steps, shrink), "
                    "SUBSLICES, warm; peaks in the memory trace table",
     .baseline = "mem_trace_mallocx",
     .iterations = TR_ITERS,
     .arg = L_SUBSLICES,
     .setup = tr_setup,
     .run = tr_run,
     .teardown = tr_teardown},
    {.name = "mem_trace_exclusive_pages",
     .group = &trace_group,
     .description = "as mem_trace_subslices, EXCLUSIVE_PAGES layout",
     .baseline = "mem_trace_mallocx",
     .iterations = TR_ITERS,
     .arg = L_EXCLUSIVE,
     .setup = tr_setup,
     .run = tr_run,
     .teardown = tr_teardown},
    {.name = "mem_trace_adaptive",
     .group = &trace_group,
     .description = "as mem_trace_subslices, ADAPTIVE layout",
     .baseline = "mem_trace_mallocx",
     .iterations = TR_ITERS,
     .arg = L_ADAPTIVE,
     .setup = tr_setup,
     .run = tr_run,
     .teardown = tr_teardown},
    {.name = "mem_trace_custom",
     .group = &trace_group,
     .description = "as mem_trace_subslices, a CUSTOM layout (32 MiB pages, slices <= 8 MiB, "
                    "exclusive pages beyond)",
     .baseline = "mem_trace_mallocx",
     .iterations = TR_ITERS,
     .arg = L_CUSTOM,
     .setup = tr_setup,
     .run = tr_run,
     .teardown = tr_teardown},
    {.name = "mem_trace_mallocx",
     .group = &trace_group,
     .description = "baseline: one pass of the ML-like trace on mallocx/dallocx (libc where weft "
                    "has no jemalloc)",
     .iterations = TR_ITERS,
     .setup = trb_setup,
     .run = trb_run,
     .teardown = trb_teardown},
    {.name = "mem_relocation",
     .group = &reloc_group,
     .description = "weft_mm_relocate(mm, true) off outdated 2 MiB ADAPTIVE pages, storage pages "
                    "recycled (faulted in); one op = 1 MiB moved (ops/s = MiB/s)",
     .baseline = "mem_memcpy",
     .iterations = RL_ITERS,
     .arg = RL_WARM,
     .setup = rl_setup,
     .run = rl_run,
     .teardown = rl_teardown},
    {.name = "mem_memcpy",
     .group = &reloc_group,
     .description = "baseline: memcpy between two malloc'd, pre-faulted buffers; one op = 1 MiB",
     .iterations = RL_ITERS,
     .arg = RL_WARM,
     .setup = mc_setup,
     .run = mc_run,
     .teardown = mc_teardown},
    {.name = "mem_relocation_fresh_pages",
     .group = &reloc_group,
     .description = "as mem_relocation, storage on the default allocator (new pages are usually "
                    "fresh: a page fault per 4 KiB)",
     .baseline = "mem_memcpy_fresh_pages",
     .iterations = RL_ITERS,
     .arg = RL_FRESH,
     .setup = rl_setup,
     .run = rl_run,
     .teardown = rl_teardown},
    {.name = "mem_memcpy_fresh_pages",
     .group = &reloc_group,
     .description = "baseline: memcpy into a buffer mmap'd anew each run; one op = 1 MiB",
     .iterations = RL_ITERS,
     .arg = RL_FRESH,
     .setup = mc_setup,
     .run = mc_run,
     .teardown = mc_teardown},
};

void wb_register_memory(void) {
  base_alloc = weft_allocator_default();
  for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) wb_register(&benches[i]);
}
