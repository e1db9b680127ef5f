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
 *                             (target < 10%), in the paired-ratio table
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
 * steady state, and reports allocations per launch; the write scope's own
 * is success - noscope (target 0: more fails the run).
 *
 * The harness gives success / noscope (the "versus" pair) and every ratio
 * as paired per-round ratios, for wall time and for process CPU time. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"

#define SMALL_BYTES  256u
#define NSTREAMS     4u
#define ITERS_LAUNCH 100000u
#define ITERS_STORM  100000u

#define ALLOC_WARM     2000u  /* launches before the counted window */
#define ALLOC_LAUNCHES 10000u /* launches in the counted window */

#define STORM_BLOCK        100u /* launches per block: 1 fails, STORM_CHAIN skip, the rest run */
#define STORM_CHAIN        3u
#define STORM_SAMPLE_EVERY 512u /* thread 0 samples failures_live every so many of its launches */
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

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats st = {0};
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

/* ---- one-stream launches ------------------------------------------------------------------- */

enum { V_0B, V_NOSCOPE, V_SUCCESS, V_SKIP, NVARIANTS };

enum { K_ALLOCS, K_FREES, K_LIVE };

static const wb_group launch_group = {
    .title = "failures: allocations per launch (counting allocator as options.allocator; 10000 "
             "launches + sync after 2000 warm-up launches) and stats.failures_live after each run",
    .json_key = "failures",
    .legend = "commands come from the device's pools (returned by the scheduler once a launch "
              "completed): what remains is pool growth; counts exclude a window's sync and stats "
              "query",
    .counters = {{"allocs_per_launch", WB_LAST, 3},
                 {"frees_per_launch", WB_LAST, 3},
                 {"failures_live", WB_RANGE, 0}}};

typedef struct lb_state {
  int variant;
  const char *name;
  weft_device *dev;
  weft_kernel noop, fail;
  weft_buffer in[2], out[2];
  weft_binding b[4];
  size_t nb;
  weft_device_stats base; /* after setup's launches */
  uint64_t launched;      /* launches since base */
  uint64_t live_min, live_max;
} lb_state;

/* Allocations of each variant's counted window, less a window without
 * launches (-1: that variant did not run); the write scope's own is
 * success - noscope. */
static int64_t lb_allocs[NVARIANTS] = {-1, -1, -1, -1};

static void lb_launch(lb_state *s) {
  wb_check(weft_launch(s->dev, 0, s->noop, one3, one3, s->nb ? s->b : NULL, s->nb, NULL, 0),
           "weft_launch");
}

/* A device (host backend, |alloc| or the default allocator) with the
 * variant's buffers and bindings, its stream warmed up; for V_SKIP, input 0
 * was written by a failing launch and one launch has been skipped. */
static lb_state *lb_open(int variant, const char *name, const weft_allocator *alloc) {
  lb_state *s = wb_calloc(1, sizeof(*s));
  s->variant = variant;
  s->name = name;
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
             name, s->base.launches_failed, s->base.launches_skipped, s->base.failures_live);
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
             s->name, s->launched, ran, failed, skipped, st.failures_live, s->base.failures_live);
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

/* Drives the variant's launch on a device over a counting allocator and
 * reports its allocations and frees per launch, once warm. */
static void measure_allocs(int variant, wb_ctx *c) {
  weft_counting_allocator *ca;
  wb_check(weft_counting_allocator_create(&ca), "weft_counting_allocator_create");
  weft_allocator a = weft_counting_allocator_get(ca);
  lb_state *s = lb_open(variant, wb_name(c), &a);
  (void)alloc_window(s, ca, ALLOC_WARM);
  (void)alloc_window(s, ca, 0);
  weft_alloc_counts fixed = alloc_window(s, ca, 0); /* the sync and the stats query */
  weft_alloc_counts w = alloc_window(s, ca, ALLOC_LAUNCHES);
  lb_verify(s);
  lb_close(s);
  weft_alloc_counts end = weft_counting_allocator_counts(ca);
  if (end.live_blocks)
    wb_fatal("%s: %" PRIu64 " blocks still live on the counting allocator after close", wb_name(c),
             end.live_blocks);
  weft_counting_allocator_destroy(ca);
  uint64_t allocs = minus(w.allocs, fixed.allocs);
  lb_allocs[variant] = (int64_t)allocs;
  wb_report(c, K_ALLOCS, (double)allocs / ALLOC_LAUNCHES);
  wb_report(c, K_FREES, (double)minus(w.frees, fixed.frees) / ALLOC_LAUNCHES);
}

/* arg: the variant. */
static void lb_setup(void **state, wb_ctx *c) {
  measure_allocs(wb_arg(c), c);
  *state = lb_open(wb_arg(c), wb_name(c), NULL);
}

static uint64_t lb_run(void *state, uint64_t n, wb_ctx *c) {
  lb_state *s = state;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++) lb_launch(s);
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  uint64_t t1 = wb_now_ns();
  s->launched += n;
  uint64_t live = stats_of(s->dev).failures_live;
  if (live < s->live_min) s->live_min = live;
  if (live > s->live_max) s->live_max = live;
  wb_report(c, K_LIVE, (double)live);
  return t1 - t0;
}

/* The write scope's own allocations (success - noscope), when both ran. */
static void report_scope_allocs(wb_ctx *c) {
  if (lb_allocs[V_NOSCOPE] >= 0) {
    double scope = (double)(lb_allocs[V_SUCCESS] - lb_allocs[V_NOSCOPE]) / ALLOC_LAUNCHES;
    /* The command pool may still grow by a block now and then while the
     * backlog reaches a new depth: that is not a per-launch allocation.
     * tests/device/test_zero_alloc.c proves 0 deterministically. */
    if (scope < 0.01)
      wb_note(c,
              "the write scope's own allocations per launch (success - noscope): %.3f (target "
              "0): ok",
              scope);
    else
      wb_warn(c,
              "the write scope allocates: %.3f allocations per launch (success - noscope; "
              "target 0)",
              scope);
  }
  if (lb_allocs[V_0B] >= 0)
    wb_note(c, "4 bindings and their scope together (success - 0bindings): %.3f per launch",
            (double)(lb_allocs[V_SUCCESS] - lb_allocs[V_0B]) / ALLOC_LAUNCHES);
}

static void lb_teardown(void *state, wb_ctx *c) {
  lb_state *s = state;
  lb_verify(s);
  if (s->variant == V_SUCCESS) report_scope_allocs(c);
  if (s->variant == V_SKIP) {
    weft_device_stats st = stats_of(s->dev);
    uint64_t root = carried_failure(s->dev, s->in[0]);
    uint64_t out0 = carried_failure(s->dev, s->out[0]), out1 = carried_failure(s->dev, s->out[1]);
    if (s->live_min != s->base.failures_live || s->live_max != s->base.failures_live)
      wb_fatal("launch_4bindings_skip: failures_live went %" PRIu64 "..%" PRIu64
               " during the runs (after setup: %" PRIu64 ")",
               s->live_min, s->live_max, s->base.failures_live);
    if (!root || out0 != root || out1 != root)
      wb_fatal("launch_4bindings_skip: the input carries failure #%" PRIu64
               ", the outputs #%" PRIu64 " and #%" PRIu64 " (expected the same root)",
               root, out0, out1);
    wb_note(c,
            "failures: launch_4bindings_skip: %" PRIu64 " launches, %" PRIu64
            " skipped; failures_live %" PRIu64 " after setup, %" PRIu64 "..%" PRIu64
            " after each run (constant: ok); input and outputs carry root #%" PRIu64,
            s->launched, st.launches_skipped - s->base.launches_skipped, s->base.failures_live,
            s->live_min, s->live_max, root);
  }
  lb_close(s);
}

/* ---- the failure storm --------------------------------------------------------------------- */

enum { S_FAIL, S_NOFAIL };

enum { K_FAILED, K_SKIPPED, K_RAN, K_SAMPLES, K_DURING, K_AFTER, K_BUFFERS };

static const wb_group storm_group = {
    .title = "failures: storm (4 threads on streams 0..3; per block of 100 launches: 1 failing, 3 "
             "skipped dependents, 96 successful; all runs)",
    .json_key = "failures_storm",
    .legend = "live = stats.failures_live (the error graph's nodes), sampled every 512 launches of "
              "thread 0 during the runs (live_during) and after each run (live_after: the "
              "latest); bounded: every sample <= buffers_live (checked), whatever the launch "
              "count",
    .counters = {{"failed", WB_TOTAL, 0},
                 {"skipped", WB_TOTAL, 0},
                 {"ran", WB_TOTAL, 0},
                 {"samples", WB_TOTAL, 0},
                 {"live_during", WB_RANGE, 0},
                 {"live_after", WB_LAST, 0},
                 {"buffers_live", WB_LAST, 0}}};

typedef struct storm_thread {
  weft_buffer f, c[STORM_CHAIN], in[2], out[2];
  weft_binding b4[4];
  uint64_t failing, dependent, plain; /* launches of each kind submitted (timed runs) */
} storm_thread;

typedef struct storm_state {
  int variant;
  const char *name;
  weft_device *dev;
  weft_kernel noop, fail;
  storm_thread t[NSTREAMS];
  weft_device_stats base;
  /* failures_live samples of the current run (thread 0 takes them) */
  uint64_t ncur, cur_min, cur_max;
} storm_state;

/* arg: S_FAIL or S_NOFAIL. */
static void storm_setup(void **state, wb_ctx *c) {
  int variant = wb_arg(c);
  storm_state *s = wb_calloc(1, sizeof(*s));
  s->variant = variant;
  s->name = wb_name(c);
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
  *state = s;
}

/* failures_live now; exits when the graph holds more failures than there
 * are live buffers (each failure is carried by at least one). */
static uint64_t storm_sample(storm_state *s, uint64_t *buffers) {
  weft_device_stats st = stats_of(s->dev);
  if (st.failures_live > st.buffers_live)
    wb_fatal("%s: the error graph holds %" PRIu64 " failures for %" PRIu64 " live buffers", s->name,
             st.failures_live, st.buffers_live);
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
      uint64_t buffers;
      uint64_t live = storm_sample(s, &buffers);
      s->ncur++;
      if (live < s->cur_min) s->cur_min = live;
      if (live > s->cur_max) s->cur_max = live;
    }
  }
  wb_check(weft_sync(s->dev, idx), "weft_sync");
}

static uint64_t storm_run(void *state, uint64_t n, wb_ctx *c) {
  storm_state *s = state;
  s->ncur = 0;
  s->cur_min = UINT64_MAX;
  s->cur_max = 0;
  uint64_t ns = wb_run_threads(NSTREAMS, n, storm_body, s);
  uint64_t buffers;
  uint64_t after = storm_sample(s, &buffers);
  wb_report(c, K_SAMPLES, (double)s->ncur);
  if (s->ncur) {
    wb_report(c, K_DURING, (double)s->cur_min);
    wb_report(c, K_DURING, (double)s->cur_max);
  }
  wb_report(c, K_AFTER, (double)after);
  wb_report(c, K_BUFFERS, (double)buffers);
  return ns;
}

/* Every launch had the outcome its kind calls for. */
static void storm_teardown(void *state, wb_ctx *c) {
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
             s->name, ran, failed, skipped, want_ran, fails ? failing : 0, fails ? dependent : 0);
  if (!fails && st.failures_live)
    wb_fatal("failure_storm_0pct: %" PRIu64 " failures live without a failure", st.failures_live);
  wb_report(c, K_FAILED, (double)failed);
  wb_report(c, K_SKIPPED, (double)skipped);
  wb_report(c, K_RAN, (double)ran);
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

/* ---- registration -------------------------------------------------------------------------- */

static const wb_bench benches[] = {
    {.name = "launch_0bindings",
     .description = "weft: no-op host launch with no binding (nothing to check, no write scope), "
                    "one stream, submit to completion",
     .iterations = ITERS_LAUNCH,
     .group = &launch_group,
     .arg = V_0B,
     .setup = lb_setup,
     .run = lb_run,
     .teardown = lb_teardown},
    {.name = "launch_4bindings_noscope",
     .description = "as launch_0bindings with 2 READ bindings (256 B) and 2 WRITE bindings of 0 "
                    "bytes: all the binding work, an empty write set (no scope)",
     .baseline = "launch_0bindings",
     .iterations = ITERS_LAUNCH,
     .group = &launch_group,
     .arg = V_NOSCOPE,
     .setup = lb_setup,
     .run = lb_run,
     .teardown = lb_teardown},
    {.name = "launch_4bindings_success",
     .description = "as launch_0bindings with 2 READ + 2 WRITE bindings of 256 B: each launch "
                    "runs in a write scope",
     .baseline = "launch_0bindings",
     /* success / noscope - 1 is the write scope's own cost: target < 10% */
     .versus = "launch_4bindings_noscope",
     .versus_target = 1.10,
     .iterations = ITERS_LAUNCH,
     .group = &launch_group,
     .arg = V_SUCCESS,
     .setup = lb_setup,
     .run = lb_run,
     .teardown = lb_teardown},
    {.name = "launch_4bindings_skip",
     .description = "launch_4bindings_success with a failed input: every launch is skipped and "
                    "propagates the root",
     .baseline = "launch_4bindings_success",
     .iterations = ITERS_LAUNCH,
     .group = &launch_group,
     .arg = V_SKIP,
     .setup = lb_setup,
     .run = lb_run,
     .teardown = lb_teardown},
    {.name = "failure_storm",
     .description = "4 threads on streams 0..3: 1% of launches fail, each followed by 3 skipped "
                    "dependents, the rest succeed (4 bindings); ns per launch",
     .baseline = "failure_storm_0pct",
     .iterations = ITERS_STORM,
     .group = &storm_group,
     .arg = S_FAIL,
     .setup = storm_setup,
     .run = storm_run,
     .teardown = storm_teardown},
    {.name = "failure_storm_0pct",
     .description = "failure_storm's launches with no failpoint: every launch succeeds",
     .iterations = ITERS_STORM,
     .group = &storm_group,
     .arg = S_NOFAIL,
     .setup = storm_setup,
     .run = storm_run,
     .teardown = storm_teardown},
};

void wb_register_failures(void) {
  for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) wb_register(&benches[i]);
}
