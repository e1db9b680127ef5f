/* Launch behaviour on the host backend: real results through long chains of
 * dependent launches across streams, what a kernel sees (grid, blocks,
 * bindings, scalars), cross-stream ordering (read-after-write,
 * write-after-read, write-after-write), failures (root, id, chain of skipped
 * launches, clearing, weft_check), memory capacity, streams and statistics.
 * Every device runs on a counting allocator that must end with zero live
 * blocks. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

/* ---- helpers --------------------------------------------------------------------------- */

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s;
}

static weft_buffer make_buffer(weft_device *dev, weft_stream_id stream, uint64_t size) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(dev, stream, size, &b));
  return b;
}

static weft_kernel make_kernel(weft_device *dev, const char *name, weft_host_kernel_fn fn,
                               void *user) {
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(dev, name, fn, user, &k));
  return k;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static const uint32_t one[3] = {1, 1, 1};

/* The single Unwritten inside the Several a failed read returns. */
static weft_status only_unwritten(weft_status st, int line) {
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "line %d: expected Several, got %s", line,
               text);
  cr_assert_eq(weft_error_count(st), 1, "line %d: expected one error in %s", line, text);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN, "line %d: expected Unwritten in %s", line,
               text);
  cr_assert_neq(weft_error_failure_id(u), 0, "line %d: failure id 0", line);
  cr_assert_not_null(weft_error_root(u), "line %d: Unwritten without a root", line);
  return u;
}
#define ONLY_UNWRITTEN(st) only_unwritten((st), __LINE__)
/* |st| is Several{one Unwritten}; frees it. */
#define EXPECT_UNWRITTEN_FREE(st)                                                                  \
  do {                                                                                             \
    (void)only_unwritten((st), __LINE__);                                                          \
    weft_error_free(st);                                                                           \
  } while (0)

/* ---- kernels ------------------------------------------------------------------------------ */

/* y = a * x + b over floats; block b handles block[0] elements from
 * block_idx[0] * block[0]. Binding 0: x (read), 1: y (write). */
typedef struct axpb_args {
  float a, b;
} axpb_args;

static float axpb_step(float x, float a, float b) {
  float ax = a * x; /* two roundings, as in the kernel: no contraction */
  return ax + b;
}

static weft_status axpb_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  if (ctx->num_buffers != 2 || ctx->scalar_bytes != sizeof(axpb_args))
    return weft_error_make(WEFT_ERR_VALIDATION, "axpb: bad arguments");
  axpb_args s;
  memcpy(&s, ctx->scalars, sizeof(s));
  const float *x = ctx->buffers[0];
  float *y = ctx->buffers[1];
  size_t n = (size_t)(ctx->sizes[1] / sizeof(float));
  size_t start = (size_t)ctx->block_idx[0] * ctx->block[0];
  for (size_t i = start; i < start + ctx->block[0] && i < n; i++) y[i] = axpb_step(x[i], s.a, s.b);
  return NULL;
}

/* Fills binding 0 with the uint32 in scalars[0], after sleeping scalars[1] ms. */
static weft_status fill_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint32_t s[2];
  memcpy(s, ctx->scalars, sizeof(s));
  if (s[1]) sleep_ms(s[1]);
  uint32_t *p = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0] / 4; i++) p[i] = s[0];
  return NULL;
}

/* out = in + scalars[0] (uint32), after sleeping scalars[1] ms. Binding 0 in, 1 out. */
static weft_status add_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint32_t s[2];
  memcpy(s, ctx->scalars, sizeof(s));
  if (s[1]) sleep_ms(s[1]);
  const uint32_t *in = ctx->buffers[0];
  uint32_t *out = ctx->buffers[1];
  for (uint64_t i = 0; i < ctx->sizes[1] / 4; i++) out[i] = in[i] + s[0];
  return NULL;
}

static void fill(weft_device *dev, weft_stream_id stream, weft_kernel k, weft_buffer b,
                 uint32_t value, uint32_t sleep) {
  uint32_t s[2] = {value, sleep};
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(dev, stream, k, one, one, &bd, 1, s, sizeof(s)));
}

static void add(weft_device *dev, weft_stream_id stream, weft_kernel k, weft_buffer in,
                weft_buffer out, uint32_t value, uint32_t sleep) {
  uint32_t s[2] = {value, sleep};
  weft_binding bd[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(dev, stream, k, one, one, bd, 2, s, sizeof(s)));
}

static void assert_all_u32(weft_device *dev, weft_stream_id stream, weft_buffer b, size_t n,
                           uint32_t want, const char *what) {
  uint32_t *p = calloc(n, 4);
  EXPECT_OK(weft_buffer_read(dev, stream, b, 0, p, n * 4));
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(p[i], want, "%s: element %zu is %" PRIu32 ", expected %" PRIu32, what, i, p[i],
                 want);
  free(p);
}

/* ---- real results ------------------------------------------------------------------------- */

enum { N_FLOATS = 4096, BLOCK = 256, CHAIN = 1000 };

/* CHAIN dependent launches ping-ponging between two buffers, on streams
 * 0..3 in turn: every launch reads what the previous one (on another
 * stream) wrote, and overwrites what the one before it read. */
static void run_axpb_chain(env *e) {
  weft_device *dev = e->dev;
  weft_kernel k = make_kernel(dev, "axpb", axpb_kernel, NULL);
  weft_buffer p = make_buffer(dev, 0, N_FLOATS * sizeof(float));
  weft_buffer q = make_buffer(dev, 1, N_FLOATS * sizeof(float));
  float *host = malloc(N_FLOATS * sizeof(float));
  float *got = malloc(N_FLOATS * sizeof(float));
  for (int i = 0; i < N_FLOATS; i++) host[i] = (float)i * 0.25f - 100.0f;
  EXPECT_OK(weft_buffer_write(dev, 3, p, 0, host, N_FLOATS * sizeof(float)));
  const uint32_t grid[3] = {N_FLOATS / BLOCK, 1, 1}, block[3] = {BLOCK, 1, 1};
  for (int i = 0; i < CHAIN; i++) {
    axpb_args s = {i % 3 == 0 ? 1.5f : 0.5f, (float)(i % 10) - 4.0f};
    weft_buffer src = i % 2 ? q : p, dst = i % 2 ? p : q;
    weft_binding bd[2] = {{src, 0, WEFT_WHOLE, WEFT_READ}, {dst, 0, WEFT_WHOLE, WEFT_WRITE}};
    EXPECT_OK(weft_launch(dev, (weft_stream_id)(i % 4), k, grid, block, bd, 2, &s, sizeof(s)));
    for (int j = 0; j < N_FLOATS; j++) host[j] = axpb_step(host[j], s.a, s.b);
  }
  /* CHAIN is even: the last launch wrote p. Read it on a stream no launch used. */
  EXPECT_OK(weft_buffer_read(dev, 5, p, 0, got, N_FLOATS * sizeof(float)));
  for (int j = 0; j < N_FLOATS; j++)
    cr_assert_eq(got[j], host[j], "element %d is %.9g, expected %.9g", j, (double)got[j],
                 (double)host[j]);
  weft_device_stats st = stats_of(dev);
  cr_assert_eq(st.launches_run, CHAIN);
  cr_assert_eq(st.launches_failed, 0);
  cr_assert_eq(st.launches_skipped, 0);
  cr_assert_gt(st.cross_stream_waits, 0, "a chain across streams made no cross-stream wait");
  EXPECT_OK(weft_buffer_release(dev, p));
  EXPECT_OK(weft_buffer_release(dev, q));
  free(host);
  free(got);
}

Test(launch, chain_of_dependent_launches_across_four_streams_computes_axpb, .timeout = 60) {
  env e = env_new();
  run_axpb_chain(&e);
  env_close(&e);
}

Test(launch, chain_is_exact_with_one_task_batches_and_folded_streams, .timeout = 60) {
  /* max_tasks 1 flushes every task at once; 3 slots fold streams 0 and 3. */
  env e;
  env_options(&e);
  e.opts.max_tasks = 1;
  e.opts.max_streams = 3;
  env_open(&e);
  run_axpb_chain(&e);
  env_close(&e);
}

Test(launch, chain_is_exact_with_the_sequential_strategy, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.strategy = WEFT_STRATEGY_SEQUENTIAL;
  e.opts.max_streams = 64;
  env_open(&e);
  run_axpb_chain(&e);
  env_close(&e);
}

/* ---- what a kernel sees ------------------------------------------------------------------- */

typedef struct grid_probe {
  uint32_t grid[3], block[3];
  _Atomic uint32_t calls;
  uint32_t count[64]; /* calls per linear block index */
  uint32_t order[64]; /* the call number of each block */
  _Atomic uint32_t bad;
  _Atomic uint32_t scalars_non_null;
} grid_probe;

static weft_status grid_kernel(const weft_kernel_ctx *ctx, void *user) {
  grid_probe *p = user;
  if (memcmp(ctx->grid, p->grid, sizeof(p->grid)) || memcmp(ctx->block, p->block, sizeof(p->block)))
    atomic_fetch_add(&p->bad, 1);
  if (ctx->block_idx[0] >= ctx->grid[0] || ctx->block_idx[1] >= ctx->grid[1] ||
      ctx->block_idx[2] >= ctx->grid[2]) {
    atomic_fetch_add(&p->bad, 1);
    return NULL;
  }
  if (ctx->scalars || ctx->scalar_bytes) atomic_fetch_add(&p->scalars_non_null, 1);
  uint32_t lin =
      (ctx->block_idx[2] * ctx->grid[1] + ctx->block_idx[1]) * ctx->grid[0] + ctx->block_idx[0];
  uint32_t n = atomic_fetch_add(&p->calls, 1);
  if (lin < 64) {
    p->count[lin]++;
    p->order[lin] = n;
  }
  return NULL;
}

Test(launch, every_block_runs_exactly_once_x_fastest_with_its_dims) {
  env e = env_new();
  static grid_probe p;
  memset(&p, 0, sizeof(p));
  const uint32_t grid[3] = {3, 2, 4}, block[3] = {8, 4, 2};
  memcpy(p.grid, grid, sizeof(grid));
  memcpy(p.block, block, sizeof(block));
  weft_kernel k = make_kernel(e.dev, "grid_probe", grid_kernel, &p);
  EXPECT_OK(weft_launch(e.dev, 2, k, grid, block, NULL, 0, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 2));
  cr_assert_eq(atomic_load(&p.bad), 0, "a block saw the wrong grid, block or index");
  cr_assert_eq(atomic_load(&p.calls), 24);
  cr_assert_eq(atomic_load(&p.scalars_non_null), 0, "no scalars were passed");
  for (uint32_t i = 0; i < 24; i++) {
    cr_assert_eq(p.count[i], 1, "block %u ran %u times", i, p.count[i]);
    cr_assert_eq(p.order[i], i, "block %u ran as call %u (x fastest expected)", i, p.order[i]);
  }
  env_close(&e);
}

/* Copies the scalars into binding 0 (block 0 only). */
static weft_status scalar_echo_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  if (ctx->scalar_bytes > ctx->sizes[0])
    return weft_error_make(WEFT_ERR_VALIDATION, "%zu scalar bytes", ctx->scalar_bytes);
  if (ctx->block_idx[0] == 0) memcpy(ctx->buffers[0], ctx->scalars, ctx->scalar_bytes);
  uint64_t *tail = (uint64_t *)((char *)ctx->buffers[0] + ctx->sizes[0] - 8);
  *tail = ctx->scalar_bytes;
  return NULL;
}

Test(launch, scalars_are_delivered_and_copied_at_submission) {
  env e = env_new();
  enum { OUT = WEFT_MAX_SCALAR_BYTES + 8 };
  weft_kernel k = make_kernel(e.dev, "scalar_echo", scalar_echo_kernel, NULL);
  weft_buffer out = make_buffer(e.dev, 0, OUT);
  static uint8_t scalars[WEFT_MAX_SCALAR_BYTES], got[OUT];
  const size_t sizes[] = {1, 7, 8, 100, WEFT_MAX_SCALAR_BYTES};
  for (size_t t = 0; t < sizeof(sizes) / sizeof(sizes[0]); t++) {
    for (size_t i = 0; i < sizeof(scalars); i++) scalars[i] = (uint8_t)(i * 31 + t);
    weft_binding bd = {out, 0, WEFT_WHOLE, WEFT_WRITE};
    /* The worker is held up so the launch is still queued when the scalars change. */
    weft_kernel slow = make_kernel(e.dev, "slow_fill", fill_kernel, NULL);
    uint32_t s[2] = {0, 20};
    weft_buffer scratch = make_buffer(e.dev, 0, 16);
    weft_binding sb = {scratch, 0, WEFT_WHOLE, WEFT_WRITE};
    EXPECT_OK(weft_launch(e.dev, 0, slow, one, one, &sb, 1, s, sizeof(s)));
    const uint32_t grid[3] = {3, 1, 1};
    EXPECT_OK(weft_launch(e.dev, 0, k, grid, one, &bd, 1, scalars, sizes[t]));
    memset(scalars, 0xcc, sizeof(scalars)); /* too late to matter */
    EXPECT_OK(weft_buffer_read(e.dev, 1, out, 0, got, OUT));
    for (size_t i = 0; i < sizes[t]; i++)
      cr_assert_eq(got[i], (uint8_t)(i * 31 + t), "scalar byte %zu of %zu", i, sizes[t]);
    uint64_t n;
    memcpy(&n, got + OUT - 8, 8);
    cr_assert_eq(n, sizes[t]);
    EXPECT_OK(weft_buffer_release(e.dev, scratch));
  }
  EXPECT_OK(weft_buffer_release(e.dev, out));
  env_close(&e);
}

Test(launch, write_copies_its_source_before_returning) {
  env e = env_new();
  weft_kernel slow = make_kernel(e.dev, "slow_fill", fill_kernel, NULL);
  weft_buffer b = make_buffer(e.dev, 0, 4096), scratch = make_buffer(e.dev, 0, 16);
  static uint8_t src[4096], got[4096];
  for (int i = 0; i < 4096; i++) src[i] = (uint8_t)(i ^ 0x5a);
  fill(e.dev, 0, slow, scratch, 1, 20); /* keeps stream 0 busy */
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, src, sizeof(src)));
  memset(src, 0, sizeof(src));
  EXPECT_OK(weft_buffer_read(e.dev, 1, b, 0, got, sizeof(got)));
  for (int i = 0; i < 4096; i++) cr_assert_eq(got[i], (uint8_t)(i ^ 0x5a), "byte %d", i);
  env_close(&e);
}

typedef struct binding_probe {
  void *ptr[4];
  uint64_t size[4];
  size_t n;
} binding_probe;

/* Records what it sees, then fills binding i with the byte 0xA0 + i. */
static weft_status binding_kernel(const weft_kernel_ctx *ctx, void *user) {
  binding_probe *p = user;
  p->n = ctx->num_buffers;
  for (size_t i = 0; i < ctx->num_buffers && i < 4; i++) {
    p->ptr[i] = ctx->buffers[i];
    p->size[i] = ctx->sizes[i];
    memset(ctx->buffers[i], 0xA0 + (int)i, (size_t)ctx->sizes[i]);
  }
  return NULL;
}

Test(launch, whole_and_offset_bindings_see_the_right_pointer_and_size) {
  env e = env_new();
  enum { SIZE = 1000 };
  static binding_probe p;
  weft_kernel k = make_kernel(e.dev, "bindings", binding_kernel, &p);
  weft_buffer b = make_buffer(e.dev, 0, SIZE), c = make_buffer(e.dev, 1, 64);
  static uint8_t zeros[SIZE], got[SIZE];
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, zeros, SIZE));
  EXPECT_OK(weft_buffer_write(e.dev, 1, c, 0, zeros, 64));
  weft_binding bd[4] = {{b, 100, WEFT_WHOLE, WEFT_WRITE},
                        {b, 10, 20, WEFT_READ_WRITE},
                        {c, 0, WEFT_WHOLE, WEFT_WRITE},
                        {b, SIZE, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(e.dev, 2, k, one, one, bd, 4, NULL, 0));
  EXPECT_OK(weft_buffer_read(e.dev, 3, b, 0, got, SIZE));
  cr_assert_eq(p.n, 4);
  cr_assert_eq(p.size[0], SIZE - 100);
  cr_assert_eq(p.size[1], 20);
  cr_assert_eq(p.size[2], 64);
  cr_assert_eq(p.size[3], 0);
  cr_assert_eq((char *)p.ptr[0] - (char *)p.ptr[1], 90, "offsets 100 and 10 of one buffer");
  cr_assert_eq((char *)p.ptr[3] - (char *)p.ptr[0], SIZE - 100, "offset SIZE is the end");
  for (int i = 0; i < SIZE; i++) {
    uint8_t want = i < 10 ? 0 : i < 30 ? 0xA1 : i < 100 ? 0 : 0xA0;
    cr_assert_eq(got[i], want, "byte %d is %#x, expected %#x", i, got[i], want);
  }
  uint8_t cgot[64];
  EXPECT_OK(weft_buffer_read(e.dev, 3, c, 0, cgot, 64));
  for (int i = 0; i < 64; i++) cr_assert_eq(cgot[i], 0xA2);
  /* A read of a sub-range at an offset. */
  uint8_t part[8];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 26, part, 8));
  const uint8_t want_part[8] = {0xA1, 0xA1, 0xA1, 0xA1, 0, 0, 0, 0};
  cr_assert_arr_eq(part, want_part, 8);
  env_close(&e);
}

/* ---- cross-stream order --------------------------------------------------------------------- */

enum { ELEMS = 1024 };

Test(order, read_after_write_across_streams_sees_the_writes, .timeout = 60) {
  env e = env_new();
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_kernel ka = make_kernel(e.dev, "add", add_kernel, NULL);
  weft_buffer a = make_buffer(e.dev, 0, ELEMS * 4), b = make_buffer(e.dev, 1, ELEMS * 4),
              c = make_buffer(e.dev, 2, ELEMS * 4);
  for (uint32_t it = 0; it < 10; it++) {
    fill(e.dev, 0, kf, a, 7 + it, it % 2 ? 15 : 0); /* slow producer */
    add(e.dev, 1, ka, a, b, 1, 0);
    add(e.dev, 2, ka, b, c, 1, 0);
    assert_all_u32(e.dev, 3, c, ELEMS, 9 + it, "c = (a + 1) + 1");
  }
  env_close(&e);
}

Test(order, write_after_read_across_streams_waits_for_the_reader, .timeout = 60) {
  env e = env_new();
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_kernel ka = make_kernel(e.dev, "add", add_kernel, NULL);
  weft_buffer a = make_buffer(e.dev, 0, ELEMS * 4), b = make_buffer(e.dev, 1, ELEMS * 4),
              c = make_buffer(e.dev, 1, ELEMS * 4);
  for (uint32_t it = 0; it < 10; it++) {
    fill(e.dev, 0, kf, a, 100 + it, 0);
    add(e.dev, 1, ka, a, b, 0, 20); /* slow reader of a */
    add(e.dev, 3, ka, a, c, 0, 10); /* another slow reader of a */
    fill(e.dev, 2, kf, a, 5000, 0); /* must wait for both readers */
    assert_all_u32(e.dev, 3, b, ELEMS, 100 + it, "b read a before it was overwritten");
    assert_all_u32(e.dev, 0, c, ELEMS, 100 + it, "c read a before it was overwritten");
    assert_all_u32(e.dev, 1, a, ELEMS, 5000, "a was overwritten");
  }
  env_close(&e);
}

Test(order, write_after_write_across_streams_keeps_the_last_write, .timeout = 60) {
  env e = env_new();
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_buffer a = make_buffer(e.dev, 0, ELEMS * 4);
  static uint32_t host[ELEMS];
  for (uint32_t it = 0; it < 10; it++) {
    fill(e.dev, 0, kf, a, 1, 20); /* slow first writer */
    fill(e.dev, 1, kf, a, 2, 5);
    fill(e.dev, 2, kf, a, 3, 0);
    assert_all_u32(e.dev, 3, a, ELEMS, 3, "the last of three launches");
    fill(e.dev, 0, kf, a, 4, 20);
    for (int i = 0; i < ELEMS; i++) host[i] = 40 + it;
    EXPECT_OK(weft_buffer_write(e.dev, 1, a, 0, host, sizeof(host)));
    assert_all_u32(e.dev, 2, a, ELEMS, 40 + it, "a host write after a slow launch");
    EXPECT_OK(weft_buffer_write(e.dev, 3, a, 0, host, sizeof(host)));
    fill(e.dev, 1, kf, a, 50 + it, 0);
    assert_all_u32(e.dev, 0, a, ELEMS, 50 + it, "a launch after a host write");
  }
  env_close(&e);
}

/* ---- failures ------------------------------------------------------------------------------- */

static weft_status explode_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  _Atomic uint32_t *calls = user;
  if (calls) atomic_fetch_add(calls, 1);
  return weft_error_make(WEFT_ERR_VALIDATION, "boom %d", 42);
}

static weft_status count_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  atomic_fetch_add((_Atomic uint32_t *)user, 1);
  return NULL;
}

static void assert_boom_root(weft_status u, int line) {
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_VALIDATION, "line %d: root is %s", line,
               weft_error_kind_name(weft_error_kind_of(root)));
  cr_assert_str_eq(weft_error_message(root), "boom 42", "line %d", line);
}

Test(failure, failed_kernel_taints_its_output_with_its_error, .timeout = 60) {
  env e = env_new();
  static _Atomic uint32_t calls;
  weft_kernel boom = make_kernel(e.dev, "explode", explode_kernel, &calls);
  weft_buffer x = make_buffer(e.dev, 0, 256);
  weft_binding bd = {x, 0, WEFT_WHOLE, WEFT_WRITE};
  const uint32_t grid[3] = {4, 2, 1};
  EXPECT_OK(weft_launch(e.dev, 0, boom, grid, one, &bd, 1, NULL, 0)); /* async: accepted */
  uint8_t got[256];
  weft_status st = weft_buffer_read(e.dev, 1, x, 0, got, 256);
  weft_status u = ONLY_UNWRITTEN(st);
  assert_boom_root(u, __LINE__);
  cr_assert_eq(weft_error_chain_length(u), 0, "a direct failure has no skipped hop");
  cr_assert_not_null(weft_error_origin(u), "a direct failure names the failed launch");
  cr_assert_not_null(strstr(weft_error_origin(u), "kernel 'explode'"), "origin '%s'",
                     weft_error_origin(u));
  cr_assert_geq(weft_error_claimed(u), 1);
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  cr_assert_not_null(strstr(text, "boom 42"), "the report '%s' hides the root", text);
  weft_error_free(st);
  cr_assert_eq(atomic_load(&calls), 1, "a failing block stops the launch's other blocks");
  /* Any part of the range fails, and again on a later read. */
  st = weft_buffer_read(e.dev, 2, x, 255, got, 1);
  EXPECT_UNWRITTEN_FREE(st);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_run, 0);
  env_close(&e);
}

Test(failure, skipped_launch_reports_root_failure_and_chain, .timeout = 60) {
  env e = env_new();
  static _Atomic uint32_t consumed, independent;
  weft_kernel boom = make_kernel(e.dev, "explode", explode_kernel, NULL);
  weft_kernel consume = make_kernel(e.dev, "consume", count_kernel, (void *)&consumed);
  weft_kernel ka = make_kernel(e.dev, "add", add_kernel, NULL);
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_kernel indep = make_kernel(e.dev, "independent", count_kernel, (void *)&independent);
  weft_buffer x = make_buffer(e.dev, 0, 256), y = make_buffer(e.dev, 1, 256),
              z = make_buffer(e.dev, 2, 256), w = make_buffer(e.dev, 3, 256);

  weft_binding bx = {x, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, boom, one, one, &bx, 1, NULL, 0));
  /* consume reads x on another stream and writes y: skipped, never runs. */
  weft_binding bxy[2] = {{x, 0, WEFT_WHOLE, WEFT_READ}, {y, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(e.dev, 1, consume, one, one, bxy, 2, NULL, 0));
  /* add reads y and writes z on a third stream: skipped too, two hops. */
  add(e.dev, 2, ka, y, z, 1, 0);
  /* An independent buffer on another stream is unaffected. */
  fill(e.dev, 3, kf, w, 77, 0);
  weft_binding bw = {w, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(e.dev, 3, indep, one, one, &bw, 1, NULL, 0));

  uint8_t got[256];
  weft_status sx = weft_buffer_read(e.dev, 0, x, 0, got, 256);
  weft_status ux = ONLY_UNWRITTEN(sx);
  uint64_t id = weft_error_failure_id(ux);
  assert_boom_root(ux, __LINE__);

  weft_status sy = weft_buffer_read(e.dev, 1, y, 0, got, 256);
  weft_status uy = ONLY_UNWRITTEN(sy);
  cr_assert_eq(weft_error_failure_id(uy), id, "the skip propagates the root failure's id");
  assert_boom_root(uy, __LINE__);
  cr_assert_eq(weft_error_chain_length(uy), 1, "y <- consume (skipped) <- explode (failed)");
  cr_assert_not_null(strstr(weft_error_chain_at(uy, 0), "skipped kernel 'consume'"),
                     "hop '%s' names no kernel", weft_error_chain_at(uy, 0));
  cr_assert_str_eq(weft_error_origin(uy), weft_error_origin(ux));

  weft_status sz = weft_buffer_read(e.dev, 3, z, 0, got, 256);
  weft_status uz = ONLY_UNWRITTEN(sz);
  cr_assert_eq(weft_error_failure_id(uz), id);
  assert_boom_root(uz, __LINE__);
  cr_assert_eq(weft_error_chain_length(uz), 2, "z <- add <- y <- consume <- x <- explode");
  cr_assert_not_null(strstr(weft_error_chain_at(uz, 0), "skipped kernel 'add'"),
                     "newest hop first: '%s'", weft_error_chain_at(uz, 0));
  cr_assert_not_null(strstr(weft_error_chain_at(uz, 1), "skipped kernel 'consume'"), "'%s'",
                     weft_error_chain_at(uz, 1));
  cr_assert_not_null(strstr(weft_error_origin(uz), "kernel 'explode'"), "'%s'",
                     weft_error_origin(uz));
  cr_assert_geq(weft_error_claimed(uz), 3, "x, y and z carry the failure");
  weft_error_free(sx);
  weft_error_free(sy);
  weft_error_free(sz);

  assert_all_u32(e.dev, 0, w, 64, 77, "an independent buffer");
  cr_assert_eq(atomic_load(&consumed), 0, "a skipped launch ran its kernel");
  cr_assert_eq(atomic_load(&independent), 1);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_skipped, 2);
  cr_assert_eq(s.launches_run, 2);
  env_close(&e);
}

Test(failure, later_full_write_or_successful_launch_clears_the_failure, .timeout = 60) {
  env e = env_new();
  weft_kernel boom = make_kernel(e.dev, "explode", explode_kernel, NULL);
  weft_kernel ka = make_kernel(e.dev, "add", add_kernel, NULL);
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_buffer x = make_buffer(e.dev, 0, ELEMS * 4), y = make_buffer(e.dev, 1, ELEMS * 4);
  weft_binding bx = {x, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, boom, one, one, &bx, 1, NULL, 0));
  add(e.dev, 1, ka, x, y, 1, 0); /* skipped: y carries the failure */
  uint32_t v;
  weft_status st = weft_buffer_read(e.dev, 2, x, 0, &v, 4);
  EXPECT_UNWRITTEN_FREE(st);

  /* A full host write of x clears it; y still carries the failure. */
  static uint32_t host[ELEMS];
  for (int i = 0; i < ELEMS; i++) host[i] = 1000;
  EXPECT_OK(weft_buffer_write(e.dev, 3, x, 0, host, sizeof(host)));
  assert_all_u32(e.dev, 0, x, ELEMS, 1000, "x after a full write");
  st = weft_buffer_read(e.dev, 2, y, 0, &v, 4);
  EXPECT_UNWRITTEN_FREE(st);
  /* Now a launch reading x runs, and its successful write clears y. */
  add(e.dev, 1, ka, x, y, 5, 0);
  assert_all_u32(e.dev, 2, y, ELEMS, 1005, "y after a successful launch");
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_sync(e.dev, 1));
  EXPECT_OK(weft_sync(e.dev, 3));
  weft_buffer both[2] = {x, y};
  EXPECT_OK(weft_check(e.dev, both, 2));
  /* And a failure comes back after a successful fill, cleared by a launch. */
  EXPECT_OK(weft_launch(e.dev, 2, boom, one, one, &bx, 1, NULL, 0));
  st = weft_buffer_read(e.dev, 0, x, 0, &v, 4);
  EXPECT_UNWRITTEN_FREE(st);
  fill(e.dev, 3, kf, x, 9, 0);
  assert_all_u32(e.dev, 1, x, ELEMS, 9, "x after a successful fill");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 2);
  cr_assert_eq(s.launches_skipped, 1);
  cr_assert_eq(s.launches_run, 2);
  env_close(&e);
}

Test(failure, two_failures_are_reported_once_each_in_first_seen_order, .timeout = 60) {
  env e = env_new();
  weft_kernel boom = make_kernel(e.dev, "explode", explode_kernel, NULL);
  weft_buffer a = make_buffer(e.dev, 0, 64), b = make_buffer(e.dev, 1, 64),
              c = make_buffer(e.dev, 2, 64);
  weft_binding ba = {a, 0, WEFT_WHOLE, WEFT_WRITE}, bb = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, boom, one, one, &ba, 1, NULL, 0));
  EXPECT_OK(weft_launch(e.dev, 1, boom, one, one, &bb, 1, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_sync(e.dev, 1));
  weft_buffer bufs[5] = {c, b, a, b, c};
  weft_status st = weft_check(e.dev, bufs, 5);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  cr_assert_eq(weft_error_count(st), 2, "each failure once");
  weft_status first = weft_error_at(st, 0), second = weft_error_at(st, 1);
  cr_assert_eq(weft_error_kind_of(first), WEFT_ERR_UNWRITTEN);
  cr_assert_eq(weft_error_kind_of(second), WEFT_ERR_UNWRITTEN);
  cr_assert_neq(weft_error_failure_id(first), weft_error_failure_id(second));
  /* first-seen order: b's failure, then a's */
  uint32_t v;
  weft_status sb = weft_buffer_read(e.dev, 3, b, 0, &v, 4);
  cr_assert_eq(weft_error_failure_id(ONLY_UNWRITTEN(sb)), weft_error_failure_id(first));
  weft_error_free(sb);
  weft_error_free(st);
  env_close(&e);
}

Test(failure, check_reports_a_completed_failure_without_a_barrier, .timeout = 60) {
  env e = env_new();
  weft_kernel boom = make_kernel(e.dev, "explode", explode_kernel, NULL);
  weft_kernel ka = make_kernel(e.dev, "add", add_kernel, NULL);
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_buffer x = make_buffer(e.dev, 0, 256), y = make_buffer(e.dev, 1, 256),
              clean = make_buffer(e.dev, 2, 256);
  fill(e.dev, 2, kf, clean, 3, 0);
  weft_binding bx = {x, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, boom, one, one, &bx, 1, NULL, 0));
  add(e.dev, 1, ka, x, y, 1, 0);
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_sync(e.dev, 1));
  EXPECT_OK(weft_sync(e.dev, 2));
  /* Clean buffers: NULL. */
  EXPECT_OK(weft_check(e.dev, &clean, 1));
  /* The failed output and the skipped one's both carry the failure. */
  weft_status sx = weft_check(e.dev, &x, 1);
  weft_status ux = ONLY_UNWRITTEN(sx);
  assert_boom_root(ux, __LINE__);
  weft_status sy = weft_check(e.dev, &y, 1);
  weft_status uy = ONLY_UNWRITTEN(sy);
  cr_assert_eq(weft_error_failure_id(uy), weft_error_failure_id(ux));
  cr_assert_eq(weft_error_chain_length(uy), 1, "y <- add (skipped) <- explode (failed)");
  weft_buffer three[3] = {clean, x, y};
  weft_status s3 = weft_check(e.dev, three, 3);
  cr_assert_eq(weft_error_failure_id(ONLY_UNWRITTEN(s3)), weft_error_failure_id(ux),
               "one failure in x and y, reported once");
  /* A check does not consume the failure: a read still reports it. */
  uint8_t got[256];
  weft_status rx = weft_buffer_read(e.dev, 3, x, 0, got, 256);
  cr_assert_eq(weft_error_failure_id(ONLY_UNWRITTEN(rx)), weft_error_failure_id(ux));
  weft_error_free(rx);
  weft_error_free(sx);
  weft_error_free(sy);
  weft_error_free(s3);
  env_close(&e);
}

Test(failure, partial_binding_failure_taints_only_its_range, .timeout = 60) {
  env e = env_new();
  weft_kernel boom = make_kernel(e.dev, "explode", explode_kernel, NULL);
  weft_kernel ka = make_kernel(e.dev, "add", add_kernel, NULL);
  weft_buffer x = make_buffer(e.dev, 0, 1024), y = make_buffer(e.dev, 1, 512);
  static uint8_t host[1024];
  memset(host, 0, sizeof(host));
  host[0] = 1;
  EXPECT_OK(weft_buffer_write(e.dev, 0, x, 0, host, sizeof(host)));
  weft_binding half = {x, 512, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 1, boom, one, one, &half, 1, NULL, 0));
  uint8_t got[512];
  /* The untouched half reads back; the failed half does not. */
  EXPECT_OK(weft_buffer_read(e.dev, 2, x, 0, got, 512));
  cr_assert_eq(got[0], 1);
  weft_status st = weft_buffer_read(e.dev, 2, x, 511, got, 2);
  EXPECT_UNWRITTEN_FREE(st);
  /* A launch reading the clean half runs. */
  uint32_t s[2] = {1, 0};
  weft_binding bd[2] = {{x, 0, 512, WEFT_READ}, {y, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(e.dev, 3, ka, one, one, bd, 2, s, sizeof(s)));
  uint32_t first;
  EXPECT_OK(weft_buffer_read(e.dev, 0, y, 0, &first, 4));
  cr_assert_eq(first, 2u);
  env_close(&e);
}

/* ---- memory capacity ------------------------------------------------------------------------ */

Test(memory, buffer_larger_than_the_capacity_reads_back_buffer_too_big, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.memory_capacity = 64 * 1024;
  env_open(&e);
  weft_buffer big = make_buffer(e.dev, 0, 128 * 1024);
  uint8_t got[16];
  weft_status st = weft_buffer_read(e.dev, 1, big, 0, got, 16);
  weft_status u = ONLY_UNWRITTEN(st);
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_BUFFER_TOO_BIG, "root is %s",
               weft_error_kind_name(weft_error_kind_of(root)));
  cr_assert_eq(weft_error_size(root), 128 * 1024);
  cr_assert(!weft_error_may_succeed_after_reclaim(root));
  weft_error_free(st);
  /* A write to it is accepted and changes nothing. */
  EXPECT_OK(weft_buffer_write(e.dev, 0, big, 0, got, 16));
  st = weft_buffer_read(e.dev, 1, big, 0, got, 16);
  cr_assert_eq(weft_error_kind_of(weft_error_root(ONLY_UNWRITTEN(st))), WEFT_ERR_BUFFER_TOO_BIG);
  weft_error_free(st);
  /* The device still serves buffers that fit. */
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_buffer fits = make_buffer(e.dev, 0, 64 * 1024);
  fill(e.dev, 0, kf, fits, 6, 0);
  assert_all_u32(e.dev, 1, fits, 16 * 1024, 6, "a buffer of exactly the capacity");
  EXPECT_OK(weft_buffer_release(e.dev, big));
  env_close(&e);
}

Test(memory, buffer_that_does_not_fit_now_reads_back_out_of_memory_and_skips_readers,
     .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.memory_capacity = 64 * 1024;
  env_open(&e);
  static _Atomic uint32_t consumed;
  weft_kernel consume = make_kernel(e.dev, "consume", count_kernel, (void *)&consumed);
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_buffer hog = make_buffer(e.dev, 0, 48 * 1024);
  weft_buffer out = make_buffer(e.dev, 0, 1024);
  weft_buffer late = make_buffer(e.dev, 1, 32 * 1024); /* 49 + 32 KiB > 64 KiB */
  fill(e.dev, 0, kf, out, 1, 0);
  weft_binding bd[2] = {{late, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(e.dev, 2, consume, one, one, bd, 2, NULL, 0));
  uint8_t got[16];
  weft_status st = weft_buffer_read(e.dev, 1, late, 0, got, 16);
  weft_status u = ONLY_UNWRITTEN(st);
  cr_assert_eq(weft_error_kind_of(weft_error_root(u)), WEFT_ERR_OUT_OF_MEMORY, "root is %s",
               weft_error_kind_name(weft_error_kind_of(weft_error_root(u))));
  cr_assert_eq(weft_error_size(weft_error_root(u)), 32 * 1024);
  cr_assert(weft_error_may_succeed_after_reclaim(weft_error_root(u)));
  uint64_t id = weft_error_failure_id(u);
  weft_error_free(st);
  /* The reader was skipped, its output carries the same failure. */
  st = weft_buffer_read(e.dev, 3, out, 0, got, 16);
  weft_status uo = ONLY_UNWRITTEN(st);
  cr_assert_eq(weft_error_failure_id(uo), id);
  cr_assert_eq(weft_error_kind_of(weft_error_root(uo)), WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(weft_error_chain_length(uo), 1, "a failed reservation is no launch: one hop");
  cr_assert_not_null(strstr(weft_error_chain_at(uo, 0), "skipped kernel 'consume'"));
  weft_error_free(st);
  cr_assert_eq(atomic_load(&consumed), 0);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_skipped, 1);
  /* Once the hog is gone, a new buffer of the same size fits. */
  EXPECT_OK(weft_buffer_release(e.dev, hog));
  EXPECT_OK(weft_buffer_release(e.dev, late));
  weft_buffer again = make_buffer(e.dev, 1, 32 * 1024);
  fill(e.dev, 1, kf, again, 8, 0);
  assert_all_u32(e.dev, 2, again, 8 * 1024, 8, "a buffer created after memory was freed");
  env_close(&e);
}

/* ---- streams ------------------------------------------------------------------------------------
 */

static void *stream_ids(void *arg) {
  weft_stream_id *out = arg;
  out[0] = weft_stream_current();
  out[1] = weft_stream_current();
  return NULL;
}

Test(stream, current_differs_between_threads_and_is_stable_within_one) {
  enum { T = 8 };
  weft_stream_id mine = weft_stream_current();
  cr_assert_eq(weft_stream_current(), mine);
  weft_stream_id ids[T][2];
  pthread_t th[T];
  for (int i = 0; i < T; i++) cr_assert_eq(pthread_create(&th[i], NULL, stream_ids, ids[i]), 0);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < T; i++) {
    cr_assert_eq(ids[i][0], ids[i][1], "thread %d's stream changed", i);
    cr_assert_neq(ids[i][0], mine);
    for (int j = 0; j < i; j++) cr_assert_neq(ids[i][0], ids[j][0], "threads %d and %d", i, j);
  }
  cr_assert_eq(weft_stream_current(), mine);
}

Test(stream, current_stream_works_as_a_launch_stream) {
  env e = env_new();
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_buffer b = make_buffer(e.dev, weft_stream_current(), 64);
  fill(e.dev, weft_stream_current(), kf, b, 31, 0);
  EXPECT_OK(weft_sync(e.dev, weft_stream_current()));
  assert_all_u32(e.dev, UINT64_MAX, b, 16, 31, "a huge stream id folds onto the pool");
  env_close(&e);
}

/* ---- statistics
 * ----------------------------------------------------------------------------------- */

Test(stats, device_stats_count_what_happened, .timeout = 60) {
  env e = env_new();
  weft_device_stats s0 = stats_of(e.dev);
  cr_assert_eq(s0.launches, 0);
  cr_assert_eq(s0.buffers_live, 0);
  cr_assert_eq(s0.streams_created, 0);
  cr_assert_eq(s0.commands, 1, "the stats command itself");
  weft_kernel boom = make_kernel(e.dev, "explode", explode_kernel, NULL);
  weft_kernel ka = make_kernel(e.dev, "add", add_kernel, NULL);
  weft_kernel kf = make_kernel(e.dev, "fill", fill_kernel, NULL);
  weft_buffer a = make_buffer(e.dev, 0, 64), b = make_buffer(e.dev, 1, 64),
              c = make_buffer(e.dev, 2, 64);
  fill(e.dev, 0, kf, a, 1, 0);   /* run */
  add(e.dev, 1, ka, a, b, 1, 0); /* run, waits on stream 0 */
  weft_binding bc = {c, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 2, boom, one, one, &bc, 1, NULL, 0)); /* failed */
  add(e.dev, 5, ka, c, a, 1, 0); /* skipped (stream 5 folds onto slot 1) */
  for (weft_stream_id s = 0; s < 4; s++) EXPECT_OK(weft_sync(e.dev, s));
  weft_device_stats s1 = stats_of(e.dev);
  cr_assert_eq(s1.launches, 4, "launches accepted: %" PRIu64, s1.launches);
  cr_assert_eq(s1.launches_run, 2);
  cr_assert_eq(s1.launches_failed, 1);
  cr_assert_eq(s1.launches_skipped, 1);
  cr_assert_eq(s1.buffers_live, 3);
  cr_assert_eq(s1.streams_created, 3, "slots 0, 1 and 2");
  cr_assert_geq(s1.cross_stream_waits, 2, "b waits on a's writer, a's writer on c's");
  /* 3 creates + 4 launches + 4 syncs + 1 stats since the first snapshot */
  cr_assert_eq(s1.commands, s0.commands + 12, "commands: %" PRIu64, s1.commands);
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  weft_device_stats s2 = stats_of(e.dev);
  cr_assert_eq(s2.buffers_live, 1);
  cr_assert_eq(s2.commands, s1.commands + 3);
  EXPECT_OK(weft_buffer_release(e.dev, c));
  cr_assert_eq(stats_of(e.dev).buffers_live, 0);
  env_close(&e);
}
