/* The CUDA backend: what weft adds on top of the driver, with the driver
 * called directly (through weft's own loader) as the baseline, in the same
 * run. The kernels are tests/fake_cuda/kernels.ptx (embedded by
 * bench/CMakeLists.txt), so the same benchmarks run on a real GPU and on the
 * fake driver (WEFT_CUDA_DRIVER=<build>/tests/fake_cuda/libcuda.so.1), where
 * the times say nothing about a GPU but the counters and checks still hold.
 *
 *   cuda_launch_noop            weft_launch of weft_noop (grid/block 1) on one
 *                               stream, then weft_sync; per launch
 *   cuda_raw_launch_noop        cuLaunchKernel of the same function on one
 *                               CUstream, then cuStreamSynchronize; per launch
 *   cuda_cross_stream_fan       rounds of a producer on stream 0 (weft_fill_f32
 *                               of P) and three consumers on streams 1..3
 *                               (weft_vec_add_f32 out_i = P + B); the next
 *                               round's fill waits for the consumers (it
 *                               overwrites what they read); per launch
 *   cuda_raw_cross_stream_fan   the same launches on four CUstreams, ordered
 *                               the naive way: an event recorded after the
 *                               fill and waited by each consumer, and one
 *                               recorded after each consumer and waited by
 *                               stream 0 before the next fill (6 waits a round)
 *   cuda_replay_chain           a 64-node chain (weft_fill_f32 of y, then 63
 *                               weft_axpy_f32 y += x) captured on stream 0 and
 *                               replayed; per node
 *   cuda_eager_chain            the same 64 nodes as weft_launch calls; per node
 *
 * One run submits every operation, then waits (weft_sync / stream sync) and
 * checks the results it can (the fan's last outputs, the chain's y); the
 * checks are outside the timed part. The "cuda" group notes the driver and
 * the device, and gives for each weft benchmark the device statistics per
 * launch (cross-stream waits issued / elided, GPU event waits, waits found
 * complete on the host, events created, completion marks), counted from the
 * end of its setup over every run (warm-up included).
 *
 * Without a usable CUDA device (no driver, the toolkit stub, no GPU, or a
 * weft whose device refuses the CUDA backend) every cuda_* benchmark is
 * skipped: one line on stderr and one in the report say why, the table
 * prints "skipped" and no ratio, and the program does not fail. */
#include <dlfcn.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/harness.h"
#include "weft_bench_kernels_ptx.h"

#ifdef WEFT_HAVE_CUDA
#include "streams/cuda/driver.h"
#include "streams/cuda/stream_cuda.h"
#endif

#define FAN_CONSUMERS 3u
#define FAN_STREAMS   (FAN_CONSUMERS + 1u)
#define CHAIN_NODES   64u
#define VEC_N         1024u /* floats per buffer */
#define VEC_BLOCK     256u

static const uint32_t one3[3] = {1, 1, 1};
static const uint32_t vec_grid[3] = {VEC_N / VEC_BLOCK, 1, 1};
static const uint32_t vec_block[3] = {VEC_BLOCK, 1, 1};

/* Scalar blocks, laid out as the kernels' signatures say. */
typedef struct {
  float v;
  unsigned n;
} fill_args; /* weft_fill_f32 "b44" */
typedef struct {
  unsigned n;
} add_args; /* weft_vec_add_f32 "bbb4" */
typedef struct {
  float a;
  unsigned n;
} axpy_args; /* weft_axpy_f32 "4bb4" */

/* ---- availability: one probe for every cuda_* benchmark ------------------------------------ */

static struct {
  bool probed, ok;
  char why[1024];     /* the reason when !ok */
  char driver[256];   /* the library asked for */
  char device[256];   /* device 0's name ("" when unknown) */
  int driver_version; /* cuDriverGetVersion, 0 when unknown */
} avail;

#ifdef WEFT_HAVE_CUDA
/* The raw baselines' loader: loaded once, never unloaded (neither is the
 * library: the real driver keeps threads running in it). */
static weft_cuda_driver raw_driver;
static bool raw_driver_loaded;
static weft_allocator raw_alloc;
#endif

static void cuda_probe_device_name(void) {
#ifdef WEFT_HAVE_CUDA
  weft_status st = weft_cuda_driver_load(&raw_driver);
  if (st) {
    weft_error_free(st);
    return;
  }
  raw_driver_loaded = true;
  raw_alloc = weft_allocator_libc();
  int version = 0;
  if (raw_driver.cuDriverGetVersion(&version) == CUDA_SUCCESS) avail.driver_version = version;
  CUdevice d;
  if (raw_driver.cuInit(0) == CUDA_SUCCESS && raw_driver.cuDeviceGet(&d, 0) == CUDA_SUCCESS &&
      raw_driver.cuDeviceGetName(avail.device, (int)sizeof(avail.device), d) != CUDA_SUCCESS)
    avail.device[0] = '\0';
#endif
}

/* Whether the cuda_* benchmarks run: a weft device with the CUDA backend
 * opens (and, built with CUDA, the raw loader loaded). The first call notes
 * the driver and device, and why not when they do not run. */
static bool cuda_available(wb_ctx *c) {
  if (avail.probed) return avail.ok;
  avail.probed = true;
  const char *path = getenv("WEFT_CUDA_DRIVER");
  snprintf(avail.driver, sizeof(avail.driver), "%s", path && *path ? path : "libcuda.so.1");
  /* An extra reference for the whole run: devices closing must never unmap
   * the driver under its own threads. A failure is reported by the open. */
  (void)dlopen(avail.driver, RTLD_NOW | RTLD_LOCAL);
  cuda_probe_device_name();

  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_CUDA;
  weft_device *dev = NULL;
  weft_status st = weft_device_open(&o, &dev);
  if (st) {
    weft_error_format(st, avail.why, sizeof(avail.why));
    weft_error_free(st);
  } else {
    weft_device_close(dev);
#ifdef WEFT_HAVE_CUDA
    if (!raw_driver_loaded)
      snprintf(avail.why, sizeof(avail.why),
               "the weft device opened, but the raw baselines could not load the driver %s",
               avail.driver);
    else
      avail.ok = true;
#else
    snprintf(avail.why, sizeof(avail.why),
             "weft-bench was built without cuda.h: no raw-driver baselines");
#endif
  }
  char version[32] = "";
  if (avail.driver_version)
    snprintf(version, sizeof(version), " (version %d.%d)", avail.driver_version / 1000,
             avail.driver_version % 1000 / 10);
  wb_note(c, "cuda: driver %s%s, device 0: %s", avail.driver, version,
          avail.device[0] ? avail.device : "unknown");
  if (!avail.ok) {
    fprintf(stderr, "weft-bench: cuda_* benchmarks skipped (driver %s): %s\n", avail.driver,
            avail.why);
    wb_note(c, "cuda: SKIPPED, no cuda_* benchmark ran (their rows read \"skipped\"): %s",
            avail.why);
  }
  return avail.ok;
}

/* ---- the device statistics ---------------------------------------------------------------- */

enum { K_LAUNCHES, K_CROSS, K_ELIDED, K_EVENT_WAITS, K_COMPLETE, K_CREATED, K_MARKS };

static const wb_group cuda_group = {
    .title = "cuda: device statistics per launch (replays: per replayed node), from the end of "
             "setup over every run",
    .json_key = "cuda",
    .legend = "the fan's naive baseline (cuda_raw_cross_stream_fan) issues 6 event waits per "
              "round of 4 launches: 1.500 per launch",
    .counters = {{"launches", WB_LAST, 0},
                 {"cross_stream_waits", WB_LAST, 3},
                 {"waits_elided", WB_LAST, 3},
                 {"gpu_event_waits", WB_LAST, 3},
                 {"gpu_waits_complete", WB_LAST, 3},
                 {"gpu_events_created", WB_LAST, 3},
                 {"gpu_marks", WB_LAST, 3}}};

/* ---- weft ---------------------------------------------------------------------------------- */

typedef enum { W_NOOP, W_FAN, W_REPLAY, W_EAGER } wkind;

typedef struct ws {
  wkind kind;
  bool skipped;
  weft_device *dev;
  weft_kernel k_noop, k_fill, k_add, k_axpy;
  weft_buffer p, b, out[FAN_CONSUMERS]; /* the fan */
  weft_buffer x, y;                     /* the chain */
  weft_capture *cap;
  uint64_t rounds;   /* fan rounds issued so far (the fill's value follows it) */
  uint64_t launches; /* kernels issued since the setup's snapshot */
  weft_device_stats snap;
} ws;

static weft_binding bind(weft_buffer b, weft_access a) {
  return (weft_binding){.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = a};
}

static void w_sync(ws *s, uint32_t nstreams) {
  for (uint32_t i = 0; i < nstreams; i++) wb_check(weft_sync(s->dev, i), "weft_sync");
}

static float fan_value(uint64_t round) {
  return (float)(round % 1000u);
}

static void w_fan_round(ws *s) {
  fill_args fa = {.v = fan_value(s->rounds), .n = VEC_N};
  weft_binding fb = bind(s->p, WEFT_WRITE);
  wb_check(weft_launch(s->dev, 0, s->k_fill, vec_grid, vec_block, &fb, 1, &fa, sizeof(fa)),
           "weft_launch(weft_fill_f32)");
  add_args aa = {.n = VEC_N};
  for (uint32_t i = 0; i < FAN_CONSUMERS; i++) {
    weft_binding ab[3] = {bind(s->p, WEFT_READ), bind(s->b, WEFT_READ),
                          bind(s->out[i], WEFT_WRITE)};
    wb_check(weft_launch(s->dev, i + 1, s->k_add, vec_grid, vec_block, ab, 3, &aa, sizeof(aa)),
             "weft_launch(weft_vec_add_f32)");
  }
  s->rounds++;
}

/* Every consumer's output holds the last round's value + 1 (B is all 1). */
static void w_fan_check(ws *s) {
  float got[VEC_N];
  float want = fan_value(s->rounds - 1) + 1.0f;
  for (uint32_t i = 0; i < FAN_CONSUMERS; i++) {
    wb_check(weft_buffer_read(s->dev, i + 1, s->out[i], 0, got, sizeof(got)), "weft_buffer_read");
    for (uint32_t j = 0; j < VEC_N; j++)
      if (got[j] != want)
        wb_fatal("cuda_cross_stream_fan: out%u[%u] = %g, expected %g", i + 1, j, (double)got[j],
                 (double)want);
  }
}

/* The chain's 64 nodes: y = 0, then 63 times y += 1 * x (x is all 1). */
static void w_chain_step(ws *s) {
  fill_args fa = {.v = 0.0f, .n = VEC_N};
  weft_binding fb = bind(s->y, WEFT_WRITE);
  wb_check(weft_launch(s->dev, 0, s->k_fill, vec_grid, vec_block, &fb, 1, &fa, sizeof(fa)),
           "weft_launch(weft_fill_f32)");
  axpy_args xa = {.a = 1.0f, .n = VEC_N};
  weft_binding xb[2] = {bind(s->x, WEFT_READ), bind(s->y, WEFT_READ_WRITE)};
  for (uint32_t i = 1; i < CHAIN_NODES; i++)
    wb_check(weft_launch(s->dev, 0, s->k_axpy, vec_grid, vec_block, xb, 2, &xa, sizeof(xa)),
             "weft_launch(weft_axpy_f32)");
}

static void w_chain_check(ws *s, const char *name) {
  float got[VEC_N];
  wb_check(weft_buffer_read(s->dev, 0, s->y, 0, got, sizeof(got)), "weft_buffer_read");
  for (uint32_t j = 0; j < VEC_N; j++)
    if (got[j] != (float)(CHAIN_NODES - 1))
      wb_fatal("%s: y[%u] = %g, expected %u", name, j, (double)got[j], CHAIN_NODES - 1);
}

static void w_buffer(ws *s, weft_stream_id stream, float value, weft_buffer *out) {
  float v[VEC_N];
  for (uint32_t j = 0; j < VEC_N; j++) v[j] = value;
  wb_check(weft_buffer_create(s->dev, stream, sizeof(v), out), "weft_buffer_create");
  wb_check(weft_buffer_write(s->dev, stream, *out, 0, v, sizeof(v)), "weft_buffer_write");
}

/* arg: the wkind. */
static void w_setup(void **state, wb_ctx *c) {
  wkind kind = (wkind)wb_arg(c);
  ws *s = wb_calloc(1, sizeof(*s));
  *state = s;
  s->kind = kind;
  if (!cuda_available(c)) {
    s->skipped = true;
    return;
  }
  weft_device_options o;
  weft_device_options_init(&o);
  o.backend = WEFT_BACKEND_CUDA;
  if (o.max_streams < FAN_STREAMS) o.max_streams = FAN_STREAMS;
  wb_check(weft_device_open(&o, &s->dev), "weft_device_open(CUDA)");
  weft_module m;
  wb_check(weft_module_load(s->dev, weft_bench_kernels_ptx, weft_bench_kernels_ptx_len, &m),
           "weft_module_load(kernels.ptx)");
  wb_check(weft_kernel_cuda(s->dev, m, "weft_noop", "", &s->k_noop), "weft_kernel_cuda(noop)");
  wb_check(weft_kernel_cuda(s->dev, m, "weft_fill_f32", "b44", &s->k_fill),
           "weft_kernel_cuda(fill)");
  wb_check(weft_kernel_cuda(s->dev, m, "weft_vec_add_f32", "bbb4", &s->k_add),
           "weft_kernel_cuda(vec_add)");
  wb_check(weft_kernel_cuda(s->dev, m, "weft_axpy_f32", "4bb4", &s->k_axpy),
           "weft_kernel_cuda(axpy)");
  switch (kind) {
  case W_NOOP:
    wb_check(weft_launch(s->dev, 0, s->k_noop, one3, one3, NULL, 0, NULL, 0), "weft_launch(noop)");
    w_sync(s, 1);
    break;
  case W_FAN:
    w_buffer(s, 0, 0.0f, &s->p);
    w_buffer(s, 0, 1.0f, &s->b);
    for (uint32_t i = 0; i < FAN_CONSUMERS; i++) w_buffer(s, i + 1, 0.0f, &s->out[i]);
    w_fan_round(s); /* every stream started, every event pool warm */
    w_sync(s, FAN_STREAMS);
    w_fan_check(s);
    break;
  case W_EAGER:
  case W_REPLAY:
    w_buffer(s, 0, 1.0f, &s->x);
    w_buffer(s, 0, 0.0f, &s->y);
    if (kind == W_REPLAY) {
      weft_stream_id lanes[1] = {0};
      wb_check(weft_capture_prepare(s->dev, lanes, 1, &s->cap), "weft_capture_prepare");
      w_chain_step(s); /* the eager warm-up */
      w_sync(s, 1);
      w_chain_check(s, "cuda_replay_chain warm-up");
      wb_check(weft_capture_begin(s->cap), "weft_capture_begin");
      w_chain_step(s);
      wb_check(weft_capture_end(s->cap), "weft_capture_end");
      if (weft_capture_launches(s->cap) != CHAIN_NODES)
        wb_fatal("cuda_replay_chain: the capture recorded %zu launches, expected %u",
                 weft_capture_launches(s->cap), CHAIN_NODES);
      wb_check(weft_capture_replay(s->cap), "weft_capture_replay");
    } else {
      w_chain_step(s);
    }
    w_sync(s, 1);
    w_chain_check(s, kind == W_REPLAY ? "cuda_replay_chain" : "cuda_eager_chain");
    break;
  }
  wb_check(weft_device_stats_get(s->dev, &s->snap), "weft_device_stats_get");
}

static uint64_t w_run_noop(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  ws *s = state;
  if (s->skipped) return 0;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < n; i++)
    wb_check(weft_launch(s->dev, 0, s->k_noop, one3, one3, NULL, 0, NULL, 0), "weft_launch(noop)");
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  uint64_t t1 = wb_now_ns();
  s->launches += n;
  return t1 - t0;
}

/* One operation = one launch; whole rounds of 4, the time scaled to |n|. */
static uint64_t w_run_fan(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  ws *s = state;
  if (s->skipped) return 0;
  uint64_t rounds = (n + FAN_STREAMS - 1) / FAN_STREAMS;
  uint64_t t0 = wb_now_ns();
  for (uint64_t r = 0; r < rounds; r++) w_fan_round(s);
  w_sync(s, FAN_STREAMS);
  uint64_t t1 = wb_now_ns();
  w_fan_check(s);
  s->launches += rounds * FAN_STREAMS;
  return (t1 - t0) * n / (rounds * FAN_STREAMS);
}

/* One operation = one node; whole steps of 64, the time scaled to |n|. */
static uint64_t w_run_chain(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  ws *s = state;
  if (s->skipped) return 0;
  uint64_t steps = (n + CHAIN_NODES - 1) / CHAIN_NODES;
  uint64_t t0 = wb_now_ns();
  for (uint64_t i = 0; i < steps; i++) {
    if (s->kind == W_REPLAY)
      wb_check(weft_capture_replay(s->cap), "weft_capture_replay");
    else
      w_chain_step(s);
  }
  wb_check(weft_sync(s->dev, 0), "weft_sync");
  uint64_t t1 = wb_now_ns();
  w_chain_check(s, s->kind == W_REPLAY ? "cuda_replay_chain" : "cuda_eager_chain");
  s->launches += steps * CHAIN_NODES;
  return (t1 - t0) * n / (steps * CHAIN_NODES);
}

static double per(uint64_t v, uint64_t launches) {
  return launches ? (double)v / (double)launches : 0.0;
}

static void w_teardown(void *state, wb_ctx *c) {
  ws *s = state;
  if (!s->skipped) {
    weft_device_stats st = {0};
    wb_check(weft_device_stats_get(s->dev, &st), "weft_device_stats_get");
    const char *name = wb_name(c);
    if (st.launches_failed || st.launches_skipped)
      wb_fatal("%s: %" PRIu64 " launches failed and %" PRIu64 " were skipped", name,
               st.launches_failed, st.launches_skipped);
    if (s->kind != W_REPLAY && st.launches_run - s->snap.launches_run != s->launches)
      wb_fatal("%s: weft ran %" PRIu64 " of the %" PRIu64 " launches issued after setup", name,
               st.launches_run - s->snap.launches_run, s->launches);
    weft_status poisoned = weft_device_poisoned(s->dev);
    wb_check(poisoned, "the device is poisoned");
    uint64_t n = s->launches;
    wb_report(c, K_LAUNCHES, (double)n);
    wb_report(c, K_CROSS, per(st.cross_stream_waits - s->snap.cross_stream_waits, n));
    wb_report(c, K_ELIDED, per(st.waits_elided - s->snap.waits_elided, n));
    wb_report(c, K_EVENT_WAITS, per(st.gpu_event_waits - s->snap.gpu_event_waits, n));
    wb_report(c, K_COMPLETE, per(st.gpu_waits_complete - s->snap.gpu_waits_complete, n));
    wb_report(c, K_CREATED, per(st.gpu_events_created - s->snap.gpu_events_created, n));
    wb_report(c, K_MARKS, per(st.gpu_marks - s->snap.gpu_marks, n));
    weft_capture_destroy(s->cap);
    weft_device_close(s->dev);
  }
  free(s);
}

/* ---- the raw driver (baselines) ------------------------------------------------------------ */

typedef enum { R_NOOP, R_FAN } rkind;

typedef struct rs {
  rkind kind;
  bool skipped;
  uint64_t rounds;
#ifdef WEFT_HAVE_CUDA
  weft_cuda_context *ctx;
  weft_cuda_stream *s[FAN_STREAMS];
  weft_cuda_module *m;
  CUfunction f_noop, f_fill, f_add;
  CUdeviceptr p, b, out[FAN_CONSUMERS];
#endif
} rs;

#ifdef WEFT_HAVE_CUDA
static void r_check(CUresult r, const char *what) {
  if (r == CUDA_SUCCESS) return;
  char why[256];
  weft_cuda_describe(&raw_driver, r, why, sizeof(why));
  wb_fatal("%s: %s", what, why);
}

static CUdeviceptr r_buffer(rs *s, float value) {
  float v[VEC_N];
  for (uint32_t j = 0; j < VEC_N; j++) v[j] = value;
  CUdeviceptr p;
  r_check(raw_driver.cuMemAlloc(&p, sizeof(v)), "cuMemAlloc");
  wb_check(weft_cuda_copy_htod(s->s[0], p, v, sizeof(v)), "weft_cuda_copy_htod");
  wb_check(weft_cuda_stream_sync(s->s[0]), "weft_cuda_stream_sync");
  return p;
}

static void r_fan_round(rs *s) {
  static const weft_cuda_dim3 grid = {VEC_N / VEC_BLOCK, 1, 1}, block = {VEC_BLOCK, 1, 1};
  float v = fan_value(s->rounds);
  unsigned n = VEC_N;
  void *fill_params[] = {&s->p, &v, &n};
  wb_check(weft_cuda_launch(s->s[0], s->f_fill, grid, block, 0, fill_params),
           "weft_cuda_launch(weft_fill_f32)");
  weft_cuda_event *ev;
  wb_check(weft_cuda_stream_record(s->s[0], &ev), "weft_cuda_stream_record");
  for (uint32_t i = 0; i < FAN_CONSUMERS; i++) {
    wb_check(weft_cuda_stream_wait(s->s[i + 1], ev), "weft_cuda_stream_wait");
    void *add_params[] = {&s->p, &s->b, &s->out[i], &n};
    wb_check(weft_cuda_launch(s->s[i + 1], s->f_add, grid, block, 0, add_params),
             "weft_cuda_launch(weft_vec_add_f32)");
  }
  weft_cuda_event_release(ev);
  /* The next fill overwrites P: stream 0 waits for every consumer. */
  for (uint32_t i = 0; i < FAN_CONSUMERS; i++) {
    wb_check(weft_cuda_stream_record(s->s[i + 1], &ev), "weft_cuda_stream_record");
    wb_check(weft_cuda_stream_wait(s->s[0], ev), "weft_cuda_stream_wait");
    weft_cuda_event_release(ev);
  }
  s->rounds++;
}

static void r_fan_check(rs *s) {
  float got[VEC_N];
  float want = fan_value(s->rounds - 1) + 1.0f;
  for (uint32_t i = 0; i < FAN_CONSUMERS; i++) {
    wb_check(weft_cuda_copy_dtoh(s->s[i + 1], got, s->out[i], sizeof(got)), "weft_cuda_copy_dtoh");
    wb_check(weft_cuda_stream_sync(s->s[i + 1]), "weft_cuda_stream_sync");
    for (uint32_t j = 0; j < VEC_N; j++)
      if (got[j] != want)
        wb_fatal("cuda_raw_cross_stream_fan: out%u[%u] = %g, expected %g", i + 1, j, (double)got[j],
                 (double)want);
  }
}

static void r_sync(rs *s, uint32_t nstreams) {
  for (uint32_t i = 0; i < nstreams; i++)
    wb_check(weft_cuda_stream_sync(s->s[i]), "weft_cuda_stream_sync");
}
#endif

/* arg: the rkind. */
static void r_setup(void **state, wb_ctx *c) {
  rkind kind = (rkind)wb_arg(c);
  rs *s = wb_calloc(1, sizeof(*s));
  *state = s;
  s->kind = kind;
  if (!cuda_available(c)) {
    s->skipped = true;
    return;
  }
#ifdef WEFT_HAVE_CUDA
  wb_check(weft_cuda_context_create(&raw_alloc, &raw_driver, 0, &s->ctx),
           "weft_cuda_context_create");
  uint32_t nstreams = kind == R_FAN ? FAN_STREAMS : 1;
  for (uint32_t i = 0; i < nstreams; i++)
    wb_check(weft_cuda_stream_create(s->ctx, &s->s[i]), "weft_cuda_stream_create");
  wb_check(weft_cuda_module_load(s->ctx, weft_bench_kernels_ptx, weft_bench_kernels_ptx_len, &s->m),
           "weft_cuda_module_load(kernels.ptx)");
  wb_check(weft_cuda_module_function(s->m, "weft_noop", &s->f_noop), "weft_noop");
  wb_check(weft_cuda_module_function(s->m, "weft_fill_f32", &s->f_fill), "weft_fill_f32");
  wb_check(weft_cuda_module_function(s->m, "weft_vec_add_f32", &s->f_add), "weft_vec_add_f32");
  if (kind == R_FAN) {
    wb_check(weft_cuda_context_make_current(s->ctx), "weft_cuda_context_make_current");
    s->p = r_buffer(s, 0.0f);
    s->b = r_buffer(s, 1.0f);
    for (uint32_t i = 0; i < FAN_CONSUMERS; i++) s->out[i] = r_buffer(s, 0.0f);
    r_fan_round(s);
    r_sync(s, FAN_STREAMS);
    r_fan_check(s);
  } else {
    static const weft_cuda_dim3 one = {1, 1, 1};
    wb_check(weft_cuda_launch(s->s[0], s->f_noop, one, one, 0, NULL), "weft_cuda_launch(noop)");
    r_sync(s, 1);
  }
#endif
}

static uint64_t r_run_noop(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  rs *s = state;
  if (s->skipped) return 0;
  uint64_t t0 = wb_now_ns();
#ifdef WEFT_HAVE_CUDA
  static const weft_cuda_dim3 one = {1, 1, 1};
  for (uint64_t i = 0; i < n; i++)
    wb_check(weft_cuda_launch(s->s[0], s->f_noop, one, one, 0, NULL), "weft_cuda_launch(noop)");
  r_sync(s, 1);
#else
  (void)n;
#endif
  return wb_now_ns() - t0;
}

static uint64_t r_run_fan(void *state, uint64_t n, wb_ctx *c) {
  (void)c;
  rs *s = state;
  if (s->skipped) return 0;
  uint64_t rounds = (n + FAN_STREAMS - 1) / FAN_STREAMS;
  uint64_t t0 = wb_now_ns();
#ifdef WEFT_HAVE_CUDA
  for (uint64_t r = 0; r < rounds; r++) r_fan_round(s);
  r_sync(s, FAN_STREAMS);
#endif
  uint64_t t1 = wb_now_ns();
#ifdef WEFT_HAVE_CUDA
  r_fan_check(s);
#endif
  return (t1 - t0) * n / (rounds * FAN_STREAMS);
}

static void r_teardown(void *state, wb_ctx *c) {
  (void)c;
  rs *s = state;
#ifdef WEFT_HAVE_CUDA
  if (!s->skipped) {
    weft_status poisoned = weft_cuda_context_poisoned(s->ctx);
    wb_check(poisoned, "the raw baseline's context is poisoned");
    for (uint32_t i = 0; i < FAN_STREAMS; i++) weft_cuda_stream_destroy(s->s[i]);
    if (s->kind == R_FAN) {
      wb_check(weft_cuda_context_make_current(s->ctx), "weft_cuda_context_make_current");
      CUdeviceptr ptrs[] = {s->p, s->b, s->out[0], s->out[1], s->out[2]};
      for (size_t i = 0; i < sizeof(ptrs) / sizeof(ptrs[0]); i++)
        r_check(raw_driver.cuMemFree(ptrs[i]), "cuMemFree");
    }
    weft_cuda_module_unload(s->m);
    weft_cuda_context_destroy(s->ctx);
  }
#endif
  free(s);
}

/* ---- registration -------------------------------------------------------------------------- */

#define ITERS_NOOP  20000u
#define ITERS_FAN   (FAN_STREAMS * 2000u)
#define ITERS_CHAIN (CHAIN_NODES * 200u)

static const wb_bench benches[] = {
    {.name = "cuda_launch_noop",
     .description = "weft, CUDA backend: weft_launch of weft_noop (grid/block 1, no bindings) on "
                    "one stream, then weft_sync; per launch",
     .baseline = "cuda_raw_launch_noop",
     .group = &cuda_group,
     .iterations = ITERS_NOOP,
     .arg = W_NOOP,
     .setup = w_setup,
     .run = w_run_noop,
     .teardown = w_teardown},
    {.name = "cuda_raw_launch_noop",
     .description = "driver: cuLaunchKernel of weft_noop on one CUstream, then "
                    "cuStreamSynchronize (weft's loader); per launch",
     .group = &cuda_group,
     .iterations = ITERS_NOOP,
     .arg = R_NOOP,
     .setup = r_setup,
     .run = r_run_noop,
     .teardown = r_teardown},
    {.name = "cuda_cross_stream_fan",
     .description = "weft, CUDA: fill on stream 0, vec_add reading it on streams 1..3, "
                    "repeated (the fill waits for the readers); per launch",
     .baseline = "cuda_raw_cross_stream_fan",
     .group = &cuda_group,
     .iterations = ITERS_FAN,
     .arg = W_FAN,
     .setup = w_setup,
     .run = w_run_fan,
     .teardown = w_teardown},
    {.name = "cuda_raw_cross_stream_fan",
     .description = "driver: the same fan on 4 CUstreams, an event record + wait for each "
                    "crossing (6 a round); per launch",
     .group = &cuda_group,
     .iterations = ITERS_FAN,
     .arg = R_FAN,
     .setup = r_setup,
     .run = r_run_fan,
     .teardown = r_teardown},
    {.name = "cuda_replay_chain",
     .description = "weft, CUDA: a 64-node fill + 63 axpy chain on one stream, captured and "
                    "replayed; per node",
     .baseline = "cuda_eager_chain",
     .group = &cuda_group,
     .iterations = ITERS_CHAIN,
     .arg = W_REPLAY,
     .setup = w_setup,
     .run = w_run_chain,
     .teardown = w_teardown},
    {.name = "cuda_eager_chain",
     .description = "weft, CUDA: the same 64 nodes as weft_launch calls; per node",
     .group = &cuda_group,
     .iterations = ITERS_CHAIN,
     .arg = W_EAGER,
     .setup = w_setup,
     .run = w_run_chain,
     .teardown = w_teardown},
};

void wb_register_cuda(void) {
  for (size_t i = 0; i < sizeof(benches) / sizeof(benches[0]); i++) wb_register(&benches[i]);
}
