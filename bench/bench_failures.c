/* Failure-path benchmarks: what the taint scope costs a launch on the
 * success path, what a skipped launch costs, and a failure storm. See
 * docs/benchmarks.md, "Failures".
 *
 *   launch_0bindings          ns per no-op host launch with no binding
 *                             (nothing to check, no write scope), one
 *                             stream, submit to completion
 *   launch_4bindings_noscope  the same with 2 READ bindings (256 B) and 2
 *                             WRITE bindings of 0 bytes: every step of a
 *                             4-binding launch (handle lookup, ordering,
 *                             pinning, read check) but an empty write set,
 *                             which mints no scope; baseline launch_0bindings
 *   launch_4bindings_success  2 READ + 2 WRITE bindings of 256 B, each launch
 *                             in a write scope; baseline launch_0bindings.
 *                             success / noscope - 1 is the scope's overhead
 *                             (target < 10%), in the "failures" section
 *   launch_4bindings_skip     the same launch with a failed input (a failing
 *                             kernel wrote it once in setup): every launch is
 *                             skipped at execution and propagates the root;
 *                             baseline launch_4bindings_success. Teardown
 *                             checks launches_skipped grew by every launch
 *                             and failures_live stayed constant
 *   failure_storm             4 client threads on streams 0..3; per thread,
 *                             blocks of 100 launches: 1 failing (failpoint
 *                             kernel:wb_storm_fail=Unknown), 3 dependents
 *                             (a chain reading the failed output: skipped),
 *                             96 successful 4-binding launches; ns per launch
 *                             and failures_live sampled during and after the
 *                             runs (bounded by the live buffers); baseline
 *                             failure_storm_0pct, the same with no failpoint
 *
 * Allocations per launch: each launch benchmark's setup also drives its
 * launch on a device whose options.allocator is a counting allocator, in
 * steady state, and the section reports allocations per launch; the write
 * scope's own is success - noscope (target 0).
 *
 * The "failures" report section also gives the ratios as medians of paired
 * per-round ratios, for wall time and for process CPU time per launch, and
 * the graph sizes; the JSON gets them as the top-level member "failures". */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/harness.h"

void wb_register_failures(void); /* called by bench/main.c */

#define SMALL_BYTES  256u
#define NSTREAMS     4u
#define ITERS_LAUNCH 100000u
#define ITERS_STORM  100000u

#define ALLOC_WARM     2000u  /* launches before the counted window */
#define ALLOC_LAUNCHES 10000u /* launches in the counted window */

#define STORM_BLOCK        100u /* launches per block: 1 fails, STORM_CHAIN skip, the rest run */
#define STORM_CHAIN        3u
#define STORM_SAMPLE_EVERY 512u /* thread 0 samples failures_live every so many of its launches */
#define STORM_MAX_SAMPLES  256u /* samples kept of the latest run */
#define STORM_BUFFERS      (1u + STORM_CHAIN + 4u) /* per thread */

static const uint32_t one3[3] = {1, 1, 1};

static weft_status noop_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return NULL;
}

static weft_status failing_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return weft_error_make(WEFT_ERR_UNKNOWN, "weft-bench: the failing kernel");
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n, size);
  if (!p) wb_fatal("out of memory (%zu x %zu bytes)", n, size);
  return p;
}

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats st;
  wb_check(weft_device_stats_get(dev, &st), "weft_device_stats_get");
  return st;
}

static weft_buffer small_buffer(weft_device *dev, weft_stream_id stream) {
  weft_buffer b;
  wb_check(weft_buffer_create(dev, stream, SMALL_BYTES, &b), "weft_buffer_create");
  unsigned char zero[SMALL_BYTES] = {0};
  wb_check(weft_buffer_write(dev, stream, b, 0, zero, sizeof(zero)), "weft_buffer_write");
  return b;
}

static weft_binding bind(weft_buffer b, uint64_t size, weft_access access) {
  return (weft_binding){.buffer = b, .offset = 0, .size = size, .access = access};
}

/* The failure |buf| carries (weft_check: Several{Unwritten #id}), 0 if none. */
static uint64_t carried_failure(weft_device *dev, weft_buffer buf) {
  weft_status st = weft_check(dev, &buf, 1);
  if (!st) return 0;
  uint64_t id = 0;
  if (weft_error_kind_of(st) == WEFT_ERR_SEVERAL && weft_error_count(st) >= 1 &&
      weft_error_kind_of(weft_error_at(st, 0)) == WEFT_ERR_UNWRITTEN)
    id = weft_error_failure_id(weft_error_at(st, 0));
  weft_error_free(st);
  return id;
}

/* A growable list of one benchmark's ns/op samples, every run in order
 * (warm-up runs included): the section pairs them round by round. */
typedef struct sample_list {
  double *v;
  size_t n, cap;
} sample_list;

static void sample_push(sample_list *l, double x) {
  if (l->n == l->cap) {
    size_t nc = l->cap ? l->cap * 2 : 16;
    double *v = realloc(l->v, nc * sizeof(double));
    if (!v) wb_fatal("out of memory for samples");
    l->v = v;
    l->cap = nc;
  }
  l->v[l->n++] = x;
}

/* CPU time of the whole process (every thread) in nanoseconds. */
static uint64_t cpu_now_ns(void) {
  struct timespec ts;
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0) wb_fatal("clock_gettime failed");
  return (uint64_t)ts.tv_sec * UINT64_C(1000000000) + (uint64_t)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median_sorted(double *v, size_t n) {
  qsort(v, n, sizeof(double), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

/* The median of every sample; 0 when none. */
static double median_of(const sample_list *l) {
  if (l->n == 0) return 0.0;
  double *v = xcalloc(l->n, sizeof(double));
  memcpy(v, l->v, l->n * sizeof(double));
  double m = median_sorted(v, l->n);
  free(v);
  return m;
}

/* The median over the rounds both ran of a[k] / b[k]; 0 when none. */
static double paired_ratio(const sample_list *a, const sample_list *b, size_t *rounds) {
  size_t n = a->n < b->n ? a->n : b->n;
  *rounds = n;
  if (n == 0) return 0.0;
  double *r = xcalloc(n, sizeof(double));
  for (size_t k = 0; k < n; k++) r[k] = b->v[k] > 0.0 ? a->v[k] / b->v[k] : 0.0;
  double m = median_sorted(r, n);
  free(r);
  return m;
}

/* ---- one-stream launches ----------------------------------------------------------------------
 */

enum { V_0B, V_NOSCOPE, V_SUCCESS, V_SKIP, NVARIANTS };

static const char *const variant_names[NVARIANTS] = {"launch_0bindings", "launch_4bindings_noscope",
                                                     "launch_4bindings_success",
                                                     "launch_4bindings_skip"};
static const char *const variant_bindings[NVARIANTS] = {
    "none", "2 R 256 B + 2 W 0 B", "2 R + 2 W, 256 B each", "2 R (1 failed) + 2 W, 256 B"};

typedef struct lb_state {
  int variant;
  weft_device *dev;
  weft_kernel noop, fail;
  weft_buffer in[2], out[2];
  weft_binding b[4];
  size_t nb;
  weft_device_stats base; /* after setup's launches */
  uint64_t launched;      /* launches since base */
  uint64_t live_min, live_max;
} lb_state;

/* Allocations per launch, from a device on a counting allocator. */
typedef struct alloc_fig {
  bool ran;
  uint64_t launches;
  uint64_t allocs, frees; /* in the window, less a window without launches */
} alloc_fig;

/* What the skip benchmark showed. */
typedef struct skip_summary {
  bool ran;
  uint64_t launched, skipped;
  uint64_t live_setup, live_min, live_max;
  uint64_t root_in, root_out0, root_out1; /* the failure the input and outputs carry */
} skip_summary;

static sample_list lb_samples[NVARIANTS];
static sample_list lb_cpu[NVARIANTS]; /* process CPU ns per launch, every run */
static alloc_fig lb_allocs[NVARIANTS];
static skip_summary skip_sum;

static void lb_launch(lb_state *s) {
  wb_check(weft_launch(s->dev, 0, s->noop, one3, one3, s->nb ? s->b : NULL, s->nb, NULL, 0),
           "weft_launch");
}

/* A device (host backend, |alloc| or the default allocator) with the
 * variant's buffers and bindings, its stream warmed up; for V_SKIP, input 0
 * was written by a failing launch and one launch has been skipped. */
static lb_state *lb_open(int variant, const weft_allocator *alloc) {
  lb_state *s = xcalloc(1, sizeof(*s));
  s->variant = variant;
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_HOST;
  o.allocator = alloc;
  wb_check(weft_device_open(&o, &s->dev), "weft_device_open");
  wb_check(weft_kernel_host(s->dev, "wb_noop", noop_kernel, NULL, &s->noop), "weft_kernel_host");
  wb_check(weft_kernel_host(s->dev, "wb_fail", failing_kernel, NULL, &s->fail), "weft_kernel_host");
  if (variant != V_0B) {
    for (int i = 0; i < 2; i++) s->in[i] = small_buffer(s->dev, 0);
    for (int i = 0; i < 2; i++) s->out[i] = small_buffer(s->dev, 0);
    uint64_t wsize = variant == V_NOSCOPE ? 0 : SMALL_BYTES;
    s->b[0] = bind(s->in[0], SMALL_BYTES, WEFT_READ);
    s->b[1] = bind(s->in[1], SMALL_BYTES, WEFT_READ);
    s->b[2] = bind(s->out[0], wsize, WEFT_WRITE);
    s->b[3] = bind(s->out[1], wsize, WEFT_WRITE);
    s->nb = 4;
  }
  if (variant == V_SKIP) {
    weft_binding w = bind(s->in[0], SMALL_BYTES, WEFT_WRITE);
    wb_check(weft_launch(s->dev, 0, s->fail, one3, one3, &w, 1, NULL, 0), "weft_launch");
  }
  lb_launch(s); /* starts the stream's worker (V_SKIP: the first skip) */
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  s->base = stats_of(s->dev);
  bool skip = variant == V_SKIP;
  if (s->base.launches_failed != (skip ? 1u : 0u) || s->base.launches_skipped != (skip ? 1u : 0u) ||
      (skip ? s->base.failures_live == 0 : s->base.failures_live != 0))
    wb_fatal("%s: setup: %" PRIu64 " launches failed, %" PRIu64 " skipped, %" PRIu64
             " failures live",
             variant_names[variant], s->base.launches_failed, s->base.launches_skipped,
             s->base.failures_live);
  s->live_min = UINT64_MAX;
  return s;
}

/* Every launch since setup ran (or, V_SKIP, was skipped), and the graph
 * holds what setup left in it. */
static void lb_verify(lb_state *s) {
  weft_device_stats st = stats_of(s->dev);
  uint64_t ran = st.launches_run - s->base.launches_run;
  uint64_t failed = st.launches_failed - s->base.launches_failed;
  uint64_t skipped = st.launches_skipped - s->base.launches_skipped;
  bool skip = s->variant == V_SKIP;
  if (ran != (skip ? 0 : s->launched) || failed || skipped != (skip ? s->launched : 0) ||
      st.failures_live != s->base.failures_live)
    wb_fatal("%s: of %" PRIu64 " launches, %" PRIu64 " ran, %" PRIu64 " failed, %" PRIu64
             " were skipped; failures live %" PRIu64 " (after setup %" PRIu64 ")",
             variant_names[s->variant], s->launched, ran, failed, skipped, st.failures_live,
             s->base.failures_live);
}

static void lb_close(lb_state *s) {
  if (s->variant != V_0B)
    for (int i = 0; i < 2; i++) {
      wb_check(weft_buffer_release(s->dev, s->in[i]), "weft_buffer_release");
      wb_check(weft_buffer_release(s->dev, s->out[i]), "weft_buffer_release");
    }
  weft_device_close(s->dev);
  free(s);
}

#define ALLOC_BATCH 64

/* Allocations and frees of the counting allocator over |n| launches, a sync
 * and a stats query (which returns once the scheduler has applied the
 * completions the sync waited for, so their frees are counted). */
static weft_alloc_counts alloc_window(lb_state *s, weft_counting_allocator *ca, uint64_t n) {
  weft_alloc_counts c0 = weft_counting_allocator_counts(ca);
  /* Synced every ALLOC_BATCH launches, so the backlog (and with it the
   * command pool the device recycles) stays bounded. */
  for (uint64_t i = 0; i < n; i++) {
    lb_launch(s);
    if ((i + 1) % ALLOC_BATCH == 0) wb_check(weft_sync(s->dev, 0), "weft_sync");
  }
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  (void)stats_of(s->dev);
  weft_alloc_counts c1 = weft_counting_allocator_counts(ca);
  s->launched += n;
  return (weft_alloc_counts){.allocs = c1.allocs - c0.allocs, .frees = c1.frees - c0.frees};
}

static uint64_t minus(uint64_t a, uint64_t b) {
  return a > b ? a - b : 0;
}

static void measure_allocs(int variant) {
  weft_counting_allocator *ca;
  wb_check(weft_counting_allocator_create(&ca), "weft_counting_allocator_create");
  weft_allocator a = weft_counting_allocator_get(ca);
  lb_state *s = lb_open(variant, &a);
  (void)alloc_window(s, ca, ALLOC_WARM);
  (void)alloc_window(s, ca, 0);
  weft_alloc_counts fixed = alloc_window(s, ca, 0); /* the sync and the stats query */
  weft_alloc_counts w = alloc_window(s, ca, ALLOC_LAUNCHES);
  lb_verify(s);
  lb_close(s);
  weft_alloc_counts end = weft_counting_allocator_counts(ca);
  if (end.live_blocks)
    wb_fatal("%s: %" PRIu64 " blocks still live on the counting allocator after close",
             variant_names[variant], end.live_blocks);
  weft_counting_allocator_destroy(ca);
  lb_allocs[variant] = (alloc_fig){.ran = true,
                                   .launches = ALLOC_LAUNCHES,
                                   .allocs = minus(w.allocs, fixed.allocs),
                                   .frees = minus(w.frees, fixed.frees)};
}

static void lb_setup(void **state, int variant) {
  measure_allocs(variant);
  *state = lb_open(variant, NULL);
}

static void lb_setup_0b(void **state) {
  lb_setup(state, V_0B);
}
static void lb_setup_noscope(void **state) {
  lb_setup(state, V_NOSCOPE);
}
static void lb_setup_success(void **state) {
  lb_setup(state, V_SUCCESS);
}
static void lb_setup_skip(void **state) {
  lb_setup(state, V_SKIP);
}

static uint64_t lb_run(void *state, uint64_t n) {
  lb_state *s = state;
  uint64_t c0 = cpu_now_ns();
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) lb_launch(s);
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  uint64_t t1 = wb_now_ns();
  uint64_t c1 = cpu_now_ns();
  sample_push(&lb_cpu[s->variant], n ? (double)(c1 - c0) / (double)n : 0.0);
  s->launched += n;
  uint64_t live = stats_of(s->dev).failures_live;
  if (live < s->live_min) s->live_min = live;
  if (live > s->live_max) s->live_max = live;
  sample_push(&lb_samples[s->variant], n ? (double)(t1 - t0) / (double)n : 0.0);
  return t1 - t0;
}

static void lb_teardown(void *state) {
  lb_state *s = state;
  lb_verify(s);
  if (s->variant == V_SKIP) {
    weft_device_stats st = stats_of(s->dev);
    skip_sum = (skip_summary){.ran = true,
                              .launched = s->launched,
                              .skipped = st.launches_skipped - s->base.launches_skipped,
                              .live_setup = s->base.failures_live,
                              .live_min = s->live_min,
                              .live_max = s->live_max,
                              .root_in = carried_failure(s->dev, s->in[0]),
                              .root_out0 = carried_failure(s->dev, s->out[0]),
                              .root_out1 = carried_failure(s->dev, s->out[1])};
    if (s->live_min != s->base.failures_live || s->live_max != s->base.failures_live)
      wb_fatal("launch_4bindings_skip: failures_live went %" PRIu64 "..%" PRIu64
               " during the runs (after setup: %" PRIu64 ")",
               s->live_min, s->live_max, s->base.failures_live);
    if (!skip_sum.root_in || skip_sum.root_out0 != skip_sum.root_in ||
        skip_sum.root_out1 != skip_sum.root_in)
      wb_fatal("launch_4bindings_skip: the input carries failure #%" PRIu64
               ", the outputs #%" PRIu64 " and #%" PRIu64 " (expected the same root)",
               skip_sum.root_in, skip_sum.root_out0, skip_sum.root_out1);
  }
  lb_close(s);
}

/* ---- the failure storm -------------------------------------------------------------------------
 */

enum { S_FAIL, S_NOFAIL, NSTORMS };

static const char *const storm_names[NSTORMS] = {"failure_storm", "failure_storm_0pct"};

typedef struct storm_thread {
  weft_buffer f, c[STORM_CHAIN], in[2], out[2];
  weft_binding b4[4];
  uint64_t failing, dependent, plain; /* launches of each kind submitted (timed runs) */
} storm_thread;

typedef struct storm_state {
  int variant;
  weft_device *dev;
  weft_kernel noop, fail;
  storm_thread t[NSTREAMS];
  weft_device_stats base;
  /* failures_live samples of the current run (thread 0 writes them) */
  uint64_t cur[STORM_MAX_SAMPLES];
  uint32_t ncur;
  uint64_t cur_min, cur_max, cur_buffers;
} storm_state;

typedef struct storm_summary {
  bool ran;
  uint64_t runs, launches, failed, skipped, run;
  uint64_t samples;    /* failures_live samples taken during the runs */
  uint64_t during_min; /* the smallest and largest of them */
  uint64_t during_max;
  uint64_t live_max;       /* the largest, during or after a run */
  uint64_t live_after;     /* after the latest run */
  uint64_t live_after_max; /* the largest after a run */
  uint64_t buffers_live;
  uint64_t last[STORM_MAX_SAMPLES]; /* the samples of the latest run */
  uint32_t nlast;
} storm_summary;

static sample_list storm_samples[NSTORMS];
static storm_summary storm_sums[NSTORMS];

static void storm_setup(void **state, int variant) {
  storm_state *s = xcalloc(1, sizeof(*s));
  s->variant = variant;
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_HOST;
  if (o.max_streams < NSTREAMS) o.max_streams = NSTREAMS;
  if (variant == S_FAIL) o.failpoints = "kernel:wb_storm_fail=Unknown";
  wb_check(weft_device_open(&o, &s->dev), "weft_device_open");
  wb_check(weft_kernel_host(s->dev, "wb_noop", noop_kernel, NULL, &s->noop), "weft_kernel_host");
  /* Its body succeeds: only the failpoint makes it fail. */
  wb_check(weft_kernel_host(s->dev, "wb_storm_fail", noop_kernel, NULL, &s->fail),
           "weft_kernel_host");
  for (uint32_t i = 0; i < NSTREAMS; i++) {
    storm_thread *t = &s->t[i];
    t->f = small_buffer(s->dev, i);
    for (uint32_t k = 0; k < STORM_CHAIN; k++) t->c[k] = small_buffer(s->dev, i);
    for (int k = 0; k < 2; k++) t->in[k] = small_buffer(s->dev, i);
    for (int k = 0; k < 2; k++) t->out[k] = small_buffer(s->dev, i);
    t->b4[0] = bind(t->in[0], SMALL_BYTES, WEFT_READ);
    t->b4[1] = bind(t->in[1], SMALL_BYTES, WEFT_READ);
    t->b4[2] = bind(t->out[0], SMALL_BYTES, WEFT_WRITE);
    t->b4[3] = bind(t->out[1], SMALL_BYTES, WEFT_WRITE);
    /* Bring the stream to life. */
    wb_check(weft_launch(s->dev, i, s->noop, one3, one3, NULL, 0, NULL, 0), "weft_launch");
    wb_check(weft_sync(s->dev, i), "weft_sync");
  }
  s->base = stats_of(s->dev);
  storm_sums[variant] = (storm_summary){.ran = true, .during_min = UINT64_MAX};
  *state = s;
}

static void storm_setup_fail(void **state) {
  storm_setup(state, S_FAIL);
}
static void storm_setup_nofail(void **state) {
  storm_setup(state, S_NOFAIL);
}

/* failures_live now; exits when the graph holds more failures than there
 * are live buffers (each failure is carried by at least one). */
static uint64_t storm_sample(storm_state *s, uint64_t *buffers) {
  weft_device_stats st = stats_of(s->dev);
  if (st.failures_live > st.buffers_live)
    wb_fatal("%s: the error graph holds %" PRIu64 " failures for %" PRIu64 " live buffers",
             storm_names[s->variant], st.failures_live, st.buffers_live);
  *buffers = st.buffers_live;
  return st.failures_live;
}

static void storm_launch(storm_state *s, unsigned idx, weft_kernel k, const weft_binding *b,
                         size_t nb) {
  wb_check(weft_launch(s->dev, idx, k, one3, one3, b, nb, NULL, 0), "weft_launch");
}

/* Thread |idx| on stream |idx|: blocks of STORM_BLOCK launches, from a
 * block's start: the failing kernel writes f; STORM_CHAIN dependents, each
 * reading the previous one's output (f first) and writing the next c; the
 * rest successful 4-binding launches on buffers of their own. */
static void storm_body(void *state, unsigned idx, uint64_t count) {
  storm_state *s = state;
  storm_thread *t = &s->t[idx];
  for (uint64_t i = 0; i < count; i++) {
    uint64_t k = i % STORM_BLOCK;
    if (k == 0) {
      weft_binding w = bind(t->f, SMALL_BYTES, WEFT_WRITE);
      storm_launch(s, idx, s->fail, &w, 1);
      t->failing++;
    } else if (k <= STORM_CHAIN) {
      weft_binding b[2] = {bind(k == 1 ? t->f : t->c[k - 2], SMALL_BYTES, WEFT_READ),
                           bind(t->c[k - 1], SMALL_BYTES, WEFT_WRITE)};
      storm_launch(s, idx, s->noop, b, 2);
      t->dependent++;
    } else {
      storm_launch(s, idx, s->noop, t->b4, 4);
      t->plain++;
    }
    if (idx == 0 && (i + 1) % STORM_SAMPLE_EVERY == 0) {
      uint64_t live = storm_sample(s, &s->cur_buffers);
      if (s->ncur < STORM_MAX_SAMPLES) s->cur[s->ncur++] = live;
      if (live < s->cur_min) s->cur_min = live;
      if (live > s->cur_max) s->cur_max = live;
    }
  }
  wb_check(weft_sync(s->dev, idx), "weft_sync");
}

static uint64_t storm_run(void *state, uint64_t n) {
  storm_state *s = state;
  s->ncur = 0;
  s->cur_min = UINT64_MAX;
  s->cur_max = 0;
  uint64_t ns = wb_run_threads(NSTREAMS, n, storm_body, s);
  storm_summary *sum = &storm_sums[s->variant];
  uint64_t buffers;
  uint64_t after = storm_sample(s, &buffers);
  sum->runs++;
  sum->launches += n;
  sum->samples += s->ncur;
  if (s->ncur && s->cur_min < sum->during_min) sum->during_min = s->cur_min;
  if (s->ncur && s->cur_max > sum->during_max) sum->during_max = s->cur_max;
  if (s->cur_max > sum->live_max) sum->live_max = s->cur_max;
  if (after > sum->live_max) sum->live_max = after;
  if (after > sum->live_after_max) sum->live_after_max = after;
  sum->live_after = after;
  sum->buffers_live = buffers;
  memcpy(sum->last, s->cur, sizeof(uint64_t) * s->ncur);
  sum->nlast = s->ncur;
  sample_push(&storm_samples[s->variant], n ? (double)ns / (double)n : 0.0);
  return ns;
}

/* Every launch had the outcome its kind calls for. */
static void storm_teardown(void *state) {
  storm_state *s = state;
  uint64_t failing = 0, dependent = 0, plain = 0;
  for (uint32_t i = 0; i < NSTREAMS; i++) {
    failing += s->t[i].failing;
    dependent += s->t[i].dependent;
    plain += s->t[i].plain;
  }
  weft_device_stats st = stats_of(s->dev);
  uint64_t ran = st.launches_run - s->base.launches_run;
  uint64_t failed = st.launches_failed - s->base.launches_failed;
  uint64_t skipped = st.launches_skipped - s->base.launches_skipped;
  bool fails = s->variant == S_FAIL;
  uint64_t want_ran = fails ? plain : plain + failing + dependent;
  if (ran != want_ran || failed != (fails ? failing : 0) || skipped != (fails ? dependent : 0))
    wb_fatal("%s: %" PRIu64 " launches ran, %" PRIu64 " failed, %" PRIu64
             " were skipped; expected %" PRIu64 ", %" PRIu64 ", %" PRIu64,
             storm_names[s->variant], ran, failed, skipped, want_ran, fails ? failing : 0,
             fails ? dependent : 0);
  if (!fails && st.failures_live)
    wb_fatal("failure_storm_0pct: %" PRIu64 " failures live without a failure", st.failures_live);
  storm_summary *sum = &storm_sums[s->variant];
  sum->failed = failed;
  sum->skipped = skipped;
  sum->run = ran;
  for (uint32_t i = 0; i < NSTREAMS; i++) {
    storm_thread *t = &s->t[i];
    weft_buffer all[STORM_BUFFERS] = {t->f,     t->c[0],  t->c[1],   t->c[2],
                                      t->in[0], t->in[1], t->out[0], t->out[1]};
    for (uint32_t k = 0; k < STORM_BUFFERS; k++)
      wb_check(weft_buffer_release(s->dev, all[k]), "weft_buffer_release");
  }
  weft_device_close(s->dev);
  free(s);
}

/* ---- the report section ------------------------------------------------------------------------
 */

#define SCOPE_TARGET_PCT 10.0

static bool any_allocs(void) {
  for (int v = 0; v < NVARIANTS; v++)
    if (lb_allocs[v].ran) return true;
  return false;
}

static double per_launch(const alloc_fig *a, uint64_t count) {
  return a->launches ? (double)count / (double)a->launches : 0.0;
}

/* The scope's own allocations per launch (success - noscope), when both ran. */
static bool scope_allocs(double *out) {
  const alloc_fig *a = &lb_allocs[V_SUCCESS], *b = &lb_allocs[V_NOSCOPE];
  if (!a->ran || !b->ran) return false;
  *out = (double)((int64_t)a->allocs - (int64_t)b->allocs) / (double)a->launches;
  return true;
}

static const char *rule(void) {
  return "----------------------------------------------------------------------------------------"
         "------------";
}

static bool print_failures(FILE *f) {
  bool ok = true;
  bool any = any_allocs() || skip_sum.ran;
  for (int v = 0; v < NSTORMS; v++) any |= storm_sums[v].ran && storm_sums[v].runs;
  if (!any) return true;

  if (any_allocs()) {
    fprintf(f,
            "\nfailures: allocations per launch (counting allocator as options.allocator; %u "
            "launches + sync after %u warm-up launches)\n\n",
            ALLOC_LAUNCHES, ALLOC_WARM);
    fprintf(f, "%-26s  %-28s  %13s  %12s\n", "benchmark", "bindings", "allocs/launch",
            "frees/launch");
    fprintf(f, "%.*s\n", 86, rule());
    for (int v = 0; v < NVARIANTS; v++) {
      const alloc_fig *a = &lb_allocs[v];
      if (!a->ran) continue;
      fprintf(f, "%-26s  %-28s  %13.3f  %12.3f\n", variant_names[v], variant_bindings[v],
              per_launch(a, a->allocs), per_launch(a, a->frees));
    }
    double scope;
    if (scope_allocs(&scope)) {
      /* The command pool may still grow by a block now and then while the
       * backlog reaches a new depth: that is not a per-launch allocation.
       * tests/device/test_zero_alloc.c proves 0 deterministically. */
      bool met = scope < 0.01;
      fprintf(f,
              "the write scope's own allocations per launch (success - noscope): %.3f (target 0): "
              "%s\n",
              scope, met ? "ok" : "WARNING: the scope allocates");
      if (!met) ok = false;
    }
    if (lb_allocs[V_SUCCESS].ran && lb_allocs[V_0B].ran)
      fprintf(f, "4 bindings and their scope together (success - 0bindings): %.3f per launch\n",
              (double)((int64_t)lb_allocs[V_SUCCESS].allocs - (int64_t)lb_allocs[V_0B].allocs) /
                  (double)lb_allocs[V_SUCCESS].launches);
    fputs("commands come from the device's pools (returned by the scheduler once a launch "
          "completed): what remains is pool growth; counts exclude a window's sync and stats "
          "query\n",
          f);
  }

  struct {
    int a, b;
    const char *what;
  } pairs[] = {
      {V_SUCCESS, V_NOSCOPE, "the write scope (target < 10%)"},
      {V_SUCCESS, V_0B, "4 bindings + the scope vs nothing to check"},
      {V_NOSCOPE, V_0B, "4 bindings without a scope vs nothing to check"},
      {V_SKIP, V_SUCCESS, "the skip path vs the success path"},
  };
  bool header = false;
  for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
    size_t rounds, crounds;
    double r = paired_ratio(&lb_samples[pairs[i].a], &lb_samples[pairs[i].b], &rounds);
    double c = paired_ratio(&lb_cpu[pairs[i].a], &lb_cpu[pairs[i].b], &crounds);
    if (!rounds) continue;
    if (!header) {
      fputs("\nfailures: launch cost ratios (median over the rounds of the paired ratio, warm-up "
            "rounds included; wall: ns per launch as in the table; cpu: process CPU time per "
            "launch, every thread)\n\n",
            f);
      fprintf(f, "%-38s  %6s  %6s  %7s  %6s  %7s  %s\n", "ratio", "rounds", "wall", "adds", "cpu",
              "adds", "what");
      fprintf(f, "%.*s\n", 110, rule());
      header = true;
    }
    char name[96];
    snprintf(name, sizeof(name), "%s / %s", variant_names[pairs[i].a] + 7,
             variant_names[pairs[i].b] + 7);
    fprintf(f, "%-38s  %6zu  %6.3f  %6.1f%%  %6.3f  %6.1f%%  %s", name, rounds, r,
            (r - 1.0) * 100.0, c, (c - 1.0) * 100.0, pairs[i].what);
    if (i == 0)
      fprintf(f, ": wall %s, cpu %s", (r - 1.0) * 100.0 < SCOPE_TARGET_PCT ? "met" : "NOT MET",
              (c - 1.0) * 100.0 < SCOPE_TARGET_PCT ? "met" : "NOT MET");
    fputc('\n', f);
  }
  if (header) {
    fputs("median per launch (ns, all runs):", f);
    for (int v = 0; v < NVARIANTS; v++) {
      if (!lb_samples[v].n) continue;
      fprintf(f, " %s wall %.0f cpu %.0f;", variant_names[v] + 7, median_of(&lb_samples[v]),
              median_of(&lb_cpu[v]));
    }
    fputs("\nthe scope target is a timing on a shared machine: it does not fail the run\n", f);
  }

  if (skip_sum.ran) {
    fprintf(f,
            "\nfailures: launch_4bindings_skip: %" PRIu64 " launches, %" PRIu64
            " skipped; failures_live %" PRIu64 " after setup, %" PRIu64 "..%" PRIu64
            " after each run (constant: ok); input and outputs carry root #%" PRIu64 "\n",
            skip_sum.launched, skip_sum.skipped, skip_sum.live_setup, skip_sum.live_min,
            skip_sum.live_max, skip_sum.root_in);
  }

  bool storm_header = false;
  for (int v = 0; v < NSTORMS; v++) {
    const storm_summary *s = &storm_sums[v];
    if (!s->ran || !s->runs) continue;
    if (!storm_header) {
      fprintf(f,
              "\nfailures: storm (4 threads on streams 0..3; per block of %u launches: 1 failing, "
              "%u skipped dependents, %u successful; all runs)\n\n",
              STORM_BLOCK, STORM_CHAIN, STORM_BLOCK - 1 - STORM_CHAIN);
      fprintf(f, "%-20s  %10s  %8s  %8s  %10s  %7s  %11s  %10s  %12s\n", "benchmark", "launches",
              "failed", "skipped", "ran", "samples", "live during", "live after", "buffers live");
      fprintf(f, "%.*s\n", 110, rule());
      storm_header = true;
    }
    char during[48] = "-";
    if (s->samples)
      snprintf(during, sizeof(during), "%" PRIu64 "..%" PRIu64, s->during_min, s->during_max);
    fprintf(f,
            "%-20s  %10" PRIu64 "  %8" PRIu64 "  %8" PRIu64 "  %10" PRIu64 "  %7" PRIu64
            "  %11s  %10" PRIu64 "  %12" PRIu64 "\n",
            storm_names[v], s->launches, s->failed, s->skipped, s->run, s->samples, during,
            s->live_after, s->buffers_live);
  }
  if (storm_header)
    fprintf(f,
            "live = stats.failures_live (the error graph's nodes), sampled every %u launches of "
            "thread 0 during the runs and after each run; bounded: every sample <= buffers live "
            "(checked), whatever the launch count\n",
            STORM_SAMPLE_EVERY);
  return ok;
}

static void json_u64_or_null(FILE *f, bool have, uint64_t v) {
  if (have)
    fprintf(f, "%" PRIu64, v);
  else
    fputs("null", f);
}

static void json_failures(FILE *f) {
  fputs("{\"allocations\": [", f);
  bool first = true;
  for (int v = 0; v < NVARIANTS; v++) {
    const alloc_fig *a = &lb_allocs[v];
    if (!a->ran) continue;
    fputs(first ? "\n    {\"name\": " : ",\n    {\"name\": ", f);
    first = false;
    wb_json_string(f, variant_names[v]);
    fprintf(f,
            ", \"launches\": %" PRIu64 ", \"allocs\": %" PRIu64 ", \"frees\": %" PRIu64
            ", \"allocs_per_launch\": ",
            a->launches, a->allocs, a->frees);
    wb_json_number(f, per_launch(a, a->allocs));
    fputs(", \"frees_per_launch\": ", f);
    wb_json_number(f, per_launch(a, a->frees));
    fputc('}', f);
  }
  fputs(first ? "]" : "\n  ]", f);

  double scope;
  bool have_scope = scope_allocs(&scope);
  fputs(",\n  \"scope_allocs_per_launch\": ", f);
  if (have_scope)
    wb_json_number(f, scope);
  else
    fputs("null", f);
  fprintf(f, ", \"scope_allocs_target_met\": %s",
          have_scope ? (scope <= 0.0 ? "true" : "false") : "null");

  size_t rounds;
  double r = paired_ratio(&lb_samples[V_SUCCESS], &lb_samples[V_NOSCOPE], &rounds);
  fputs(",\n  \"scope_overhead\": ", f);
  if (rounds) {
    fputs("{\"benchmark\": \"launch_4bindings_success\", \"versus\": "
          "\"launch_4bindings_noscope\", \"paired_ratio\": ",
          f);
    wb_json_number(f, r);
    fputs(", \"overhead_pct\": ", f);
    wb_json_number(f, (r - 1.0) * 100.0);
    fprintf(f, ", \"target_pct\": %g, \"target_met\": %s, \"rounds\": %zu}", SCOPE_TARGET_PCT,
            (r - 1.0) * 100.0 < SCOPE_TARGET_PCT ? "true" : "false", rounds);
  } else {
    fputs("null", f);
  }
  r = paired_ratio(&lb_samples[V_SKIP], &lb_samples[V_SUCCESS], &rounds);
  fputs(",\n  \"skip_vs_success_paired_ratio\": ", f);
  if (rounds)
    wb_json_number(f, r);
  else
    fputs("null", f);

  fputs(",\n  \"skip\": ", f);
  if (skip_sum.ran)
    fprintf(f,
            "{\"name\": \"launch_4bindings_skip\", \"launches\": %" PRIu64
            ", \"launches_skipped\": %" PRIu64 ", \"failures_live_setup\": %" PRIu64
            ", \"failures_live_min\": %" PRIu64 ", \"failures_live_max\": %" PRIu64
            ", \"root_id\": %" PRIu64 ", \"outputs_carry_root\": true}",
            skip_sum.launched, skip_sum.skipped, skip_sum.live_setup, skip_sum.live_min,
            skip_sum.live_max, skip_sum.root_in);
  else
    fputs("null", f);

  fputs(",\n  \"storm\": [", f);
  first = true;
  for (int v = 0; v < NSTORMS; v++) {
    const storm_summary *s = &storm_sums[v];
    if (!s->ran || !s->runs) continue;
    fputs(first ? "\n    {\"name\": " : ",\n    {\"name\": ", f);
    first = false;
    wb_json_string(f, storm_names[v]);
    fprintf(f,
            ", \"runs\": %" PRIu64 ", \"launches\": %" PRIu64 ", \"failed\": %" PRIu64
            ", \"skipped\": %" PRIu64 ", \"ran\": %" PRIu64 ", \"failures_live_samples\": [",
            s->runs, s->launches, s->failed, s->skipped, s->run);
    for (uint32_t k = 0; k < s->nlast; k++) fprintf(f, "%s%" PRIu64, k ? ", " : "", s->last[k]);
    fputs("], \"failures_live_during_min\": ", f);
    json_u64_or_null(f, s->samples != 0, s->during_min);
    fputs(", \"failures_live_during_max\": ", f);
    json_u64_or_null(f, s->samples != 0, s->during_max);
    fprintf(f, ", \"failures_live_samples_total\": %" PRIu64 ", \"failures_live_max\": %" PRIu64,
            s->samples, s->live_max);
    fprintf(f,
            ", \"failures_live_after\": %" PRIu64 ", \"failures_live_after_max\": %" PRIu64
            ", \"buffers_live\": %" PRIu64 ", \"bounded\": %s}",
            s->live_after, s->live_after_max, s->buffers_live,
            s->live_max <= s->buffers_live ? "true" : "false");
  }
  fputs(first ? "]}" : "\n  ]}", f);
}

/* ---- registration ------------------------------------------------------------------------------
 */

static const wb_bench benches[] = {
    {.name = "launch_0bindings",
     .description = "weft: no-op host launch with no binding (nothing to check, no write scope), "
                    "one stream, submit to completion",
     .iterations = ITERS_LAUNCH,
     .setup = lb_setup_0b,
     .run = lb_run,
     .teardown = lb_teardown},
    {.name = "launch_4bindings_noscope",
     .description = "as launch_0bindings with 2 READ bindings (256 B) and 2 WRITE bindings of 0 "
                    "bytes: all the binding work, an empty write set (no scope)",
     .baseline = "launch_0bindings",
     .iterations = ITERS_LAUNCH,
     .setup = lb_setup_noscope,
     .run = lb_run,
     .teardown = lb_teardown},
    {.name = "launch_4bindings_success",
     .description = "as launch_0bindings with 2 READ + 2 WRITE bindings of 256 B: each launch "
                    "runs in a write scope",
     .baseline = "launch_0bindings",
     .iterations = ITERS_LAUNCH,
     .setup = lb_setup_success,
     .run = lb_run,
     .teardown = lb_teardown},
    {.name = "launch_4bindings_skip",
     .description = "launch_4bindings_success with a failed input: every launch is skipped and "
                    "propagates the root",
     .baseline = "launch_4bindings_success",
     .iterations = ITERS_LAUNCH,
     .setup = lb_setup_skip,
     .run = lb_run,
     .teardown = lb_teardown},
    {.name = "failure_storm",
     .description = "4 threads on streams 0..3: 1% of launches fail, each followed by 3 skipped "
                    "dependents, the rest succeed (4 bindings); ns per launch",
     .baseline = "failure_storm_0pct",
     .iterations = ITERS_STORM,
     .setup = storm_setup_fail,
     .run = storm_run,
     .teardown = storm_teardown},
    {.name = "failure_storm_0pct",
     .description = "failure_storm's launches with no failpoint: every launch succeeds",
     .iterations = ITERS_STORM,
     .setup = storm_setup_nofail,
     .run = storm_run,
     .teardown = storm_teardown},
};

static const wb_section section = {
    .json_key = "failures", .print_table = print_failures, .print_json = json_failures};

void wb_register_failures(void) {
  for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) wb_register(&benches[i]);
  wb_register_section(&section);
}
