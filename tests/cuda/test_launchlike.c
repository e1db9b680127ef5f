/* Issue 15's launch-like operations on the CUDA backend, against the fake
 * driver: device-side copies and fills (cuMemcpyDtoDAsync, cuMemsetD8Async;
 * exact bytes, skipped and tainted like launches, recorded by a capture and
 * replayed from its graph), native kernels (called in stream order with the
 * launch's CUstream, their own driver work ordered with weft's launches; an
 * error fails the launch), by-value struct parameters in a kernel's
 * signature ("{N,A}": the bytes the driver's cuLaunchKernel sees) and
 * their bad spellings, and shared_bytes reaching cuLaunchKernel. */
#include <criterion/criterion.h>

#if !defined(FAKE_CUDA_PATH) || !defined(WEFT_HAVE_CUDA)
Test(cuda_launchlike, skipped_no_cuda) {
  cr_skip_test("weft or the fake driver was built without cuda.h: no CUDA backend to test");
}
#else

#include <dlfcn.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "fake_cuda_control.h"
#include "support/asan_criterion.h"
#include "support/fake_cuda_fixture.h"
#include "weft_test_kernels_ptx.h"

static void expect_ok(weft_status st, const char *call, int line) {
  if (st) {
    char text[2048];
    weft_error_format(st, text, sizeof(text));
    cr_assert_fail("line %d: %s failed: %s", line, call, text);
  }
}
#define OK(call)                        expect_ok((call), #call, __LINE__)

static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, int line) {
  char text[2048] = "Ok";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: got '%s', expected %s", line, text,
               weft_error_kind_name(kind));
  if (needle)
    cr_assert_not_null(strstr(text, needle), "line %d: '%s' lacks '%s'", line, text, needle);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind, needle) expect_kind((call), (kind), (needle), __LINE__)

typedef struct cenv {
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_device *dev;
  weft_module mod;
  weft_kernel fill, axpy, spin;
} cenv;

/* A CUDA device on the fake driver (reset) over a counting allocator. */
static cenv cenv_new(void) {
  const char *path = driver_path();
  setenv("WEFT_CUDA_DRIVER", path, 1);
  fake_cuda_open(path);
  need_fake("counters and the fake's emulated kernels");
  fake_reset();
  cenv e;
  memset(&e, 0, sizeof(e));
  OK(weft_counting_allocator_create(&e.ca));
  e.alloc = weft_counting_allocator_get(e.ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &e.alloc;
  o.backend = WEFT_BACKEND_CUDA;
  o.max_streams = 4;
  OK(weft_device_open(&o, &e.dev));
  OK(weft_module_load(e.dev, weft_test_kernels_ptx, weft_test_kernels_ptx_len, &e.mod));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", "b44", &e.fill));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_axpy_f32", "4bb4", &e.axpy));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_spin_us", "4", &e.spin));
  return e;
}

static void cenv_close(cenv *e) {
  weft_device_close(e->dev);
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%" PRIu64 " blocks leaked by the device", c.live_blocks);
  weft_counting_allocator_destroy(e->ca);
  const char *names[] = {"live_allocations", "streams_live",     "events_live",
                         "graphs_live",      "graph_execs_live", "ctx_refs"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    cr_assert_eq(stat_of(names[i]), 0, "fake %s = %" PRIu64 " after close", names[i],
                 stat_of(names[i]));
  ASSERT_NO_LEAKS();
}

static const uint32_t one[3] = {1, 1, 1};

static weft_buffer make(cenv *e, weft_stream_id s, uint64_t size) {
  weft_buffer b;
  OK(weft_buffer_create(e->dev, s, size, &b));
  return b;
}

/* y[0..n) = v (weft_fill_f32). */
static void fill_f32(cenv *e, weft_stream_id s, weft_buffer y, uint32_t n, float v) {
  weft_binding b = {y, 0, WEFT_WHOLE, WEFT_WRITE};
  struct {
    float v;
    uint32_t n;
  } sc = {v, n};
  const uint32_t grid[3] = {(n + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
  OK(weft_launch(e->dev, s, e->fill, grid, block, &b, 1, &sc, sizeof(sc)));
}

static void spin(cenv *e, weft_stream_id s, uint32_t us) {
  OK(weft_launch(e->dev, s, e->spin, one, one, NULL, 0, &us, sizeof(us)));
}

/* ---- copies and fills ---------------------------------------------------------------------- */

Test(copy_fill, are_memcpy_dtod_and_memset_d8_on_the_stream_with_exact_bytes, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 4096 };
  weft_buffer a = make(&e, 0, N * 4), b = make(&e, 1, N * 4);
  spin(&e, 0, 20000); /* a slow producer: the copy must wait for the fill behind it */
  fill_f32(&e, 0, a, N, 1.5f);
  uint64_t memcpys = stat_of("memcpys"), memsets = stat_of("memsets");
  OK(weft_buffer_fill(e.dev, 1, b, 0, N * 4, 0));
  OK(weft_buffer_copy(e.dev, 1, a, 16, b, 64, 1024));
  OK(weft_buffer_fill(e.dev, 2, b, 8, 4, 0xff));
  OK(weft_sync(e.dev, 1));
  OK(weft_sync(e.dev, 2));
  cr_assert_eq(stat_of("memcpys") - memcpys, 1, "one cuMemcpyDtoDAsync");
  cr_assert_eq(stat_of("memsets") - memsets, 2, "two cuMemsetD8Async");
  float *got = malloc(N * 4);
  OK(weft_buffer_read(e.dev, 3, b, 0, got, N * 4));
  for (int i = 0; i < N; i++) {
    float want = i >= 16 && i < 16 + 256 ? 1.5f : 0.0f;
    if (i == 2) {
      uint32_t bits;
      memcpy(&bits, &got[i], 4);
      cr_assert_eq(bits, 0xffffffffu, "the second fill's bytes");
      continue;
    }
    cr_assert_eq(got[i], want, "element %d: %f", i, (double)got[i]);
  }
  free(got);
  EXPECT_KIND(weft_buffer_copy(e.dev, 0, b, 0, b, 100, 200), WEFT_ERR_INVALID_ARGUMENT, "overlap");
  EXPECT_KIND(weft_buffer_fill(e.dev, 0, b, N * 4 - 1, 2, 0), WEFT_ERR_INVALID_ARGUMENT,
              "fill range");
  weft_device_stats s;
  OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.launches_run, 5);
  cenv_close(&e);
}

Test(copy_fill, a_copy_of_tainted_bytes_is_skipped_and_a_fill_clears_what_it_writes,
     .timeout = 60) {
  cenv e = cenv_new();
  OK(weft_device_set_failpoints(e.dev, "launch#1=Validation"));
  weft_buffer a = make(&e, 0, 256), b = make(&e, 0, 256);
  fill_f32(&e, 0, a, 64, 2.0f);                    /* launch 1 fails */
  OK(weft_buffer_copy(e.dev, 1, a, 0, b, 0, 256)); /* launch 2: skipped */
  OK(weft_buffer_fill(e.dev, 2, b, 0, 128, 0x3c)); /* launch 3 clears half */
  uint8_t got[256];
  OK(weft_buffer_read(e.dev, 0, b, 0, got, 128));
  for (int i = 0; i < 128; i++) cr_assert_eq(got[i], 0x3c, "byte %d", i);
  weft_status st = weft_buffer_read(e.dev, 0, b, 128, got, 128);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_status u = weft_error_at(st, 0);
  cr_assert_str_eq(weft_error_origin(u), "kernel 'weft_fill_f32' (launch 1)");
  char hop[128];
  snprintf(hop, sizeof(hop), "skipped kernel 'copy' (launch 2): it needed buffer #%" PRIu32,
           (uint32_t)a.id);
  cr_assert_str_eq(weft_error_chain_at(u, 0), hop);
  weft_error_free(st);
  cenv_close(&e);
}

Test(copy_fill, a_capture_records_them_into_its_graph_and_replays_them, .timeout = 60) {
  cenv e = cenv_new();
  weft_buffer a = make(&e, 0, 1024), b = make(&e, 0, 1024);
  weft_stream_id s0 = 0;
  weft_capture *cap;
  OK(weft_capture_prepare(e.dev, &s0, 1, &cap));
  OK(weft_capture_begin(cap));
  uint64_t memsets = stat_of("memsets"), memcpys = stat_of("memcpys");
  OK(weft_buffer_fill(e.dev, 0, b, 0, 1024, 0x22));
  OK(weft_buffer_copy(e.dev, 0, a, 0, b, 512, 256));
  OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_launches(cap), 2);
  cr_assert_eq(stat_of("memsets"), memsets, "a recorded fill ran eagerly");
  cr_assert_eq(stat_of("memcpys"), memcpys, "a recorded copy ran eagerly");
  for (int r = 0; r < 3; r++) {
    uint8_t in[1024];
    memset(in, 0x50 + r, sizeof(in));
    OK(weft_buffer_write(e.dev, 0, a, 0, in, sizeof(in)));
    uint64_t graphs = stat_of("graph_launches");
    OK(weft_capture_replay(cap));
    uint8_t got[1024];
    OK(weft_buffer_read(e.dev, 0, b, 0, got, sizeof(got)));
    cr_assert_eq(stat_of("graph_launches") - graphs, 1, "replayed from the graph");
    for (int i = 0; i < 1024; i++)
      cr_assert_eq(got[i], i >= 512 && i < 768 ? 0x50 + r : 0x22, "replay %d byte %d", r, i);
  }
  weft_capture_destroy(cap);
  cenv_close(&e);
}

/* ---- native kernels ------------------------------------------------------------------------ */

typedef CUresult (*memcpy_dtod_fn)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
typedef CUresult (*memset_d8_fn)(CUdeviceptr, unsigned char, size_t, CUstream);

/* The embedder's "library call": out = in (cuMemcpyDtoDAsync), then its
 * first 4 bytes set to 0x40 (cuMemsetD8Async), both enqueued on the
 * launch's stream and nothing waited for. */
typedef struct lib {
  memcpy_dtod_fn copy;
  memset_d8_fn set;
  _Atomic int calls;
  void *stream;
} lib;

static weft_status library_call(const weft_native_ctx *ctx, void *user) {
  lib *l = user;
  atomic_fetch_add(&l->calls, 1);
  l->stream = ctx->stream;
  if (!ctx->stream) return weft_error_make(WEFT_ERR_GENERIC, "no stream");
  CUresult r = l->copy(ctx->addresses[1], ctx->addresses[0], ctx->sizes[1], ctx->stream);
  if (r == CUDA_SUCCESS) r = l->set(ctx->addresses[1], 0x40, 4, ctx->stream);
  return r == CUDA_SUCCESS ? NULL : weft_error_make(WEFT_ERR_GENERIC, "CUresult %d", (int)r);
}

static weft_status library_refuses(const weft_native_ctx *ctx, void *user) {
  (void)ctx;
  atomic_fetch_add(&((lib *)user)->calls, 1);
  return weft_error_make(WEFT_ERR_VALIDATION, "cublasSgemm: CUBLAS_STATUS_INVALID_VALUE");
}

static lib library(void) {
  lib l = {0};
  void *p = fake_sym("cuMemcpyDtoDAsync_v2");
  memcpy(&l.copy, &p, sizeof(p));
  p = fake_sym("cuMemsetD8Async");
  memcpy(&l.set, &p, sizeof(p));
  cr_assert(l.copy && l.set);
  return l;
}

Test(native, its_driver_work_is_ordered_between_weft_launches, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 8192 };
  lib l = library();
  weft_kernel k;
  OK(weft_kernel_native(e.dev, "lib_copy", library_call, &l, &k));
  weft_buffer x = make(&e, 0, N * 4), y = make(&e, 1, N * 4), z = make(&e, 2, N * 4);
  spin(&e, 0, 30000); /* the producer is slow: unordered work would copy zeros */
  fill_f32(&e, 0, x, N, 3.0f);
  weft_binding bd[2] = {{x, 0, WEFT_WHOLE, WEFT_READ}, {y, 0, WEFT_WHOLE, WEFT_WRITE}};
  OK(weft_launch(e.dev, 1, k, one, one, bd, 2, NULL, 0)); /* y = x, y[0] bytes 0x40 */
  fill_f32(&e, 2, z, N, 1.0f);
  /* z = 2 y + z on stream 3: after the native work on stream 1 */
  weft_binding ax[2] = {{y, 0, WEFT_WHOLE, WEFT_READ}, {z, 0, WEFT_WHOLE, WEFT_READ_WRITE}};
  struct {
    float a;
    uint32_t n;
  } sc = {2.0f, N};
  const uint32_t grid[3] = {N / 256, 1, 1}, block[3] = {256, 1, 1};
  OK(weft_launch(e.dev, 3, e.axpy, grid, block, ax, 2, &sc, sizeof(sc)));
  float *got = malloc(N * 4);
  OK(weft_buffer_read(e.dev, 0, z, 0, got, N * 4));
  float first;
  memset(&first, 0x40, 4);
  cr_assert_eq(got[0], 2.0f * first + 1.0f);
  for (int i = 1; i < N; i++) cr_assert_eq(got[i], 7.0f, "element %d: %f", i, (double)got[i]);
  free(got);
  cr_assert_eq(atomic_load(&l.calls), 1);
  cr_assert_not_null(l.stream, "a CUDA native kernel gets the launch's CUstream");
  cenv_close(&e);
}

Test(native, an_error_it_returns_fails_the_launch_and_its_dependents_are_skipped, .timeout = 60) {
  cenv e = cenv_new();
  lib bad = {0}, good = library();
  weft_kernel kb, kg;
  OK(weft_kernel_native(e.dev, "sgemm", library_refuses, &bad, &kb));
  OK(weft_kernel_native(e.dev, "lib_copy", library_call, &good, &kg));
  weft_buffer x = make(&e, 0, 64), y = make(&e, 0, 64), z = make(&e, 0, 64);
  weft_binding w[2] = {{x, 0, WEFT_WHOLE, WEFT_READ}, {y, 0, WEFT_WHOLE, WEFT_WRITE}};
  OK(weft_buffer_fill(e.dev, 0, x, 0, 64, 1));
  OK(weft_launch(e.dev, 0, kb, one, one, w, 2, NULL, 0)); /* launch 2 fails */
  weft_binding w2[2] = {{y, 0, WEFT_WHOLE, WEFT_READ}, {z, 0, WEFT_WHOLE, WEFT_WRITE}};
  OK(weft_launch(e.dev, 1, kg, one, one, w2, 2, NULL, 0)); /* launch 3 skipped */
  uint8_t got[64];
  weft_status st = weft_buffer_read(e.dev, 0, z, 0, got, 64);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_status u = weft_error_at(st, 0);
  cr_assert_str_eq(weft_error_message(weft_error_root(u)),
                   "cublasSgemm: CUBLAS_STATUS_INVALID_VALUE");
  cr_assert_str_eq(weft_error_origin(u), "kernel 'sgemm' (launch 2)");
  weft_error_free(st);
  cr_assert_eq(atomic_load(&good.calls), 0, "a skipped native kernel was called");
  const uint32_t two[3] = {2, 1, 1};
  EXPECT_KIND(weft_launch(e.dev, 0, kg, two, one, w2, 2, NULL, 0), WEFT_ERR_INVALID_ARGUMENT,
              "{1,1,1}");
  cenv_close(&e);
}

/* ---- by-value struct parameters and shared memory ------------------------------------------ */

static const char probe_ptx[] = ".version 7.5\n.target sm_75\n.address_size 64\n"
                                ".visible .entry weft_struct_probe(\n"
                                "  .param .u64 out, .param .align 8 .b8 s[24], .param .u32 tail)\n"
                                "{\n  ret;\n}\n";

Test(params, a_struct_parameter_reaches_cuLaunchKernel_byte_for_byte, .timeout = 60) {
  cenv e = cenv_new();
  weft_module m;
  OK(weft_module_load(e.dev, probe_ptx, sizeof(probe_ptx), &m));
  weft_kernel k;
  OK(weft_kernel_cuda(e.dev, m, "weft_struct_probe", "b{24,8}4", &k));
  /* The scalar block as C lays it out: the struct at 0, the u32 at 24,
   * padded to 32 (the struct's alignment). */
  struct {
    struct {
      uint64_t a;
      uint32_t b;
      uint8_t c[12];
    } s;
    uint32_t tail;
  } sc;
  _Static_assert(sizeof(sc) == 32 && sizeof(sc.s) == 24, "the layout the signature describes");
  memset(&sc, 0, sizeof(sc));
  sc.s.a = 0x0102030405060708ull;
  sc.s.b = 0xa0b0c0d0u;
  for (int i = 0; i < 12; i++) sc.s.c[i] = (uint8_t)(0xe0 + i);
  sc.tail = 0xfeedbeefu;
  weft_buffer out = make(&e, 0, 28);
  weft_binding b = {out, 0, WEFT_WHOLE, WEFT_WRITE};
  OK(weft_launch(e.dev, 0, k, one, one, &b, 1, &sc, sizeof(sc)));
  OK(weft_launch(e.dev, 0, k, one, one, &b, 1, &sc, 28)); /* without the trailing padding */
  uint8_t got[28];
  OK(weft_buffer_read(e.dev, 0, out, 0, got, 28));
  cr_assert_arr_eq(got, &sc.s, 24, "the struct's bytes");
  cr_assert_arr_eq(got + 24, &sc.tail, 4, "the scalar after it");
  EXPECT_KIND(weft_launch(e.dev, 0, k, one, one, &b, 1, &sc, 24), WEFT_ERR_INVALID_ARGUMENT,
              "takes 28 scalar bytes (or with its struct padding); got 24");
  EXPECT_KIND(weft_launch(e.dev, 0, k, one, one, &b, 1, &sc, 33), WEFT_ERR_INVALID_ARGUMENT,
              "takes 28 scalar bytes");
  cenv_close(&e);
}

Test(params, bad_struct_spellings_are_invalid_argument_saying_why, .timeout = 60) {
  cenv e = cenv_new();
  weft_kernel k = {0};
  static const struct {
    const char *spec, *needle;
  } bad[] = {
      {"b{0,8}", "a struct of 0 bytes: 1..4096"},
      {"b{4097,1}", "a struct of 4097 bytes"},
      {"b{99999999,8}", "write \"{N,A}\""},
      {"b{24,3}", "aligned to 3: a power of two up to 256"},
      {"b{24,0}", "aligned to 0"},
      {"b{512,512}", "aligned to 512"},
      {"b{20,8}", "a multiple of its alignment"},
      {"b{24}", "write \"{N,A}\""},
      {"b{24,8", "write \"{N,A}\""},
      {"b{,8}", "write \"{N,A}\""},
      {"b{x,8}", "write \"{N,A}\""},
      {"b}", "is '}'"},
      {"b{4096,8}4", "ends at scalar byte 4100: past a launch's 4096"},
      {"b{2048,8}{2048,8}8", "ends at scalar byte 4104"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    EXPECT_KIND(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", bad[i].spec, &k),
                WEFT_ERR_INVALID_ARGUMENT, bad[i].needle);
  cr_assert_eq(k.id, 0);
  /* The largest struct fits, and so does a spelling at the limits. */
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", "b{4096,256}", &k));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", "b{16,16}b{1,1}8", &k));
  cenv_close(&e);
}

Test(params, shared_bytes_and_the_label_of_weft_launch_ex_reach_the_driver_and_the_report,
     .timeout = 60) {
  cenv e = cenv_new();
  weft_buffer y = make(&e, 0, 1024);
  weft_binding b = {y, 0, WEFT_WHOLE, WEFT_WRITE};
  struct {
    float v;
    uint32_t n;
  } sc = {4.0f, 256};
  weft_launch_desc d = {.struct_size = sizeof(d),
                        .stream = 0,
                        .kernel = e.fill,
                        .grid = {1, 1, 1},
                        .block = {256, 1, 1},
                        .shared_bytes = 4096,
                        .bindings = &b,
                        .num_bindings = 1,
                        .scalars = &sc,
                        .scalar_bytes = sizeof(sc),
                        .label = "init.y"};
  OK(weft_launch_ex(e.dev, &d));
  OK(weft_sync(e.dev, 0));
  cr_assert_eq(stat_of("last_shared_bytes"), 4096);
  spin(&e, 0, 1);
  OK(weft_sync(e.dev, 0));
  cr_assert_eq(stat_of("last_shared_bytes"), 0, "weft_launch passes no shared memory");
  /* More than the device has: the driver refuses the launch, which fails,
   * named by its label. */
  d.shared_bytes = 1u << 20;
  OK(weft_launch_ex(e.dev, &d));
  float got;
  weft_status st = weft_buffer_read(e.dev, 0, y, 0, &got, 4);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(weft_error_root(u)), WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES);
  cr_assert_str_eq(weft_error_origin(u), "launch 'init.y' of kernel 'weft_fill_f32' (launch 3)");
  weft_error_free(st);
  cenv_close(&e);
}

#endif
