/* The CUDA backend seen through the public API: a weft_device opened with
 * WEFT_BACKEND_CUDA on the fake driver (tests/fake_cuda; CTest points
 * WEFT_CUDA_DRIVER at it), one behaviour per test: opening (and why it
 * fails), kernels from modules and their parameter signatures, exact results
 * on 64 Ki floats, cross-stream ordering with GPU events, device memory
 * (too big, out of memory, capacity, nothing left in the driver at close),
 * launches the driver refuses, failpoints, sticky faults poisoning the
 * device, capture and replay, a task graph, and a launch path that allocates
 * nothing once warm.
 *
 * With WEFT_CUDA_DRIVER=libcuda.so.1 the same suite runs on a real GPU: the
 * tests that need the fake's control API (fake_cuda_reset, its environment,
 * fault injection, counters) skip there, saying so. */
#include <criterion/criterion.h>

#if !defined(FAKE_CUDA_PATH) || !defined(WEFT_HAVE_CUDA)
Test(cuda_device, skipped_no_cuda) {
  cr_skip_test("weft or the fake driver was built without cuda.h (WEFT_WITH_CUDA=OFF or no "
               "toolkit): no CUDA backend to test");
}
#else

#include <dlfcn.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include <weft/weft.h>

#include "fake_cuda_control.h"
#include "support/asan_criterion.h"
#include "support/fake_cuda_fixture.h"
#include "support/trace_json.h"
#include "core/config.h"
#include "weft_test_kernels_ptx.h"

/* ---- fixture ------------------------------------------------------------------------------ */

/* Loads the driver weft will load (skips the test when there is none),
 * resets the fake and clears its environment. */
static void load(void) {
  const char *path = driver_path();
  setenv("WEFT_CUDA_DRIVER", path, 1); /* run by hand: the device loads the same library */
  fake_cuda_open(path);
  if (is_fake) {
    unsetenv("FAKE_CUDA_FAIL_INIT");
    unsetenv("FAKE_CUDA_DEVICES");
    unsetenv("FAKE_CUDA_MEMORY_BYTES");
    fake_reset();
  }
}

static uint64_t fstat(const char *name) {
  return is_fake ? stat_of(name) : 0;
}

static char *text_of(weft_status st, char *buf, size_t cap) {
  weft_error_format(st, buf, cap);
  return buf;
}

static void expect_ok(weft_status st, const char *call, int line) {
  if (st) {
    char text[2048];
    cr_assert_fail("line %d: %s failed: %s", line, call, text_of(st, text, sizeof(text)));
  }
}
#define OK(call)                        expect_ok((call), #call, __LINE__)

/* |st| is an error of |kind| whose formatted text contains |needle|; frees it. */
static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, const char *what,
                        int line) {
  char text[2048] = "Ok";
  if (st) text_of(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: got '%s', expected %s", line, what, text,
               weft_error_kind_name(kind));
  if (needle)
    cr_assert_not_null(strstr(text, needle), "line %d: %s: '%s' lacks '%s'", line, what, text,
                       needle);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind, needle) expect_kind((call), (kind), (needle), #call, __LINE__)

/* |st| is DevicePoisoned (through sources, roots or Several); frees it. */
static void expect_poisoned(weft_status st, const char *what, int line) {
  char text[2048];
  cr_assert_not_null(st, "line %d: %s succeeded on a poisoned device", line, what);
  cr_assert(weft_error_is_device_poisoned(st), "line %d: %s: expected DevicePoisoned, got %s", line,
            what, text_of(st, text, sizeof(text)));
  weft_error_free(st);
}
#define EXPECT_POISONED(call)           expect_poisoned((call), #call, __LINE__)

/* The single Unwritten inside the Several a failed read returns (borrowed). */
static weft_status only_unwritten(weft_status st, int line) {
  char text[4096] = "Ok";
  if (st) text_of(st, text, sizeof(text));
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
#define ONLY_UNWRITTEN(st)              only_unwritten((st), __LINE__)

static void sleep_us(unsigned us) {
  struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- a CUDA device on a counting allocator ------------------------------------------------ */

typedef struct kernels {
  weft_kernel fill, add, axpy, noop, fault, spin;
} kernels;

typedef struct cenv {
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_device_options opts;
  weft_device *dev;
  weft_module mod;
  kernels k;
} cenv;

/* Loads the driver; CUDA options on ordinal 0 over a fresh counting allocator. */
static void cenv_options(cenv *e) {
  load();
  memset(e, 0, sizeof(*e));
  OK(weft_counting_allocator_create(&e->ca));
  e->alloc = weft_counting_allocator_get(e->ca);
  weft_device_options_init(&e->opts);
  e->opts.allocator = &e->alloc;
  e->opts.backend = WEFT_BACKEND_CUDA;
  e->opts.ordinal = 0;
  e->opts.max_streams = 4;
}

/* Opens the device (a real driver without a usable device: skip) and
 * registers the six test kernels. */
static void cenv_open(cenv *e) {
  weft_status st = weft_device_open(&e->opts, &e->dev);
  if (st && !is_fake) {
    char text[1024];
    text_of(st, text, sizeof(text));
    weft_error_free(st);
    cr_skip_test("no usable CUDA device: %s", text);
  }
  OK(st);
  cr_assert_not_null(e->dev);
  OK(weft_module_load(e->dev, weft_test_kernels_ptx, weft_test_kernels_ptx_len, &e->mod));
  OK(weft_kernel_cuda(e->dev, e->mod, "weft_fill_f32", "b44", &e->k.fill));
  OK(weft_kernel_cuda(e->dev, e->mod, "weft_vec_add_f32", "bbb4", &e->k.add));
  OK(weft_kernel_cuda(e->dev, e->mod, "weft_axpy_f32", "4bb4", &e->k.axpy));
  OK(weft_kernel_cuda(e->dev, e->mod, "weft_noop", "", &e->k.noop));
  OK(weft_kernel_cuda(e->dev, e->mod, "weft_fault", "", &e->k.fault));
  OK(weft_kernel_cuda(e->dev, e->mod, "weft_spin_us", "4", &e->k.spin));
}

static cenv cenv_new(void) {
  cenv e;
  cenv_options(&e);
  cenv_open(&e);
  return e;
}

/* Everything the fake tracks is gone: the device gave back every object
 * itself (the last primary-context release would destroy leftovers, and
 * counts them). */
static void expect_driver_clean(const char *when) {
  if (!is_fake) return;
  const char *names[] = {"live_allocations", "streams_live",     "events_live",
                         "modules_live",     "host_allocs_live", "graphs_live",
                         "graph_execs_live", "ctx_refs",         "leaked_at_ctx_release"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
    cr_assert_eq(fstat(names[i]), 0, "%s: fake %s = %" PRIu64, when, names[i], fstat(names[i]));
}

/* Closes the device: no block of the allocator and nothing in the driver left. */
static void cenv_close(cenv *e) {
  weft_device_close(e->dev);
  e->dev = NULL;
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%" PRIu64 " blocks (%" PRIu64 " bytes) leaked by the device",
               c.live_blocks, c.live_bytes);
  weft_counting_allocator_destroy(e->ca);
  e->ca = NULL;
  expect_driver_clean("after weft_device_close");
  ASSERT_NO_LEAKS();
}

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s = {0};
  OK(weft_device_stats_get(dev, &s));
  return s;
}

static void sync_all(cenv *e) {
  for (weft_stream_id s = 0; s < e->opts.max_streams; s++) OK(weft_sync(e->dev, s));
}

static weft_buffer make_buffer(weft_device *dev, weft_stream_id s, uint64_t bytes) {
  weft_buffer b;
  OK(weft_buffer_create(dev, s, bytes, &b));
  return b;
}

/* ---- launches ----------------------------------------------------------------------------- */

enum { TPB = 256 };
static const uint32_t ONE[3] = {1, 1, 1};

static void geometry(uint32_t n, uint32_t grid[3], uint32_t block[3]) {
  grid[0] = n ? (n + TPB - 1) / TPB : 1, grid[1] = grid[2] = 1;
  block[0] = TPB, block[1] = block[2] = 1;
}

typedef struct {
  float value;
  uint32_t n;
} fill_args;
typedef struct {
  uint32_t n;
} add_args;
typedef struct {
  float a;
  uint32_t n;
} axpy_args;

/* out[off/4 + i] = value for i < n (the binding covers exactly those bytes). */
static void fill_at(cenv *e, weft_stream_id s, weft_buffer out, uint64_t off, uint32_t n,
                    float value) {
  uint32_t g[3], b[3];
  geometry(n, g, b);
  weft_binding bd = {out, off, (uint64_t)n * 4, WEFT_WRITE};
  fill_args a = {value, n};
  OK(weft_launch(e->dev, s, e->k.fill, g, b, &bd, 1, &a, sizeof(a)));
}
#define fill(e, s, out, n, value)       fill_at((e), (s), (out), 0, (n), (value))

/* out = x + y over n floats. */
static void vec_add(cenv *e, weft_stream_id s, weft_buffer x, weft_buffer y, weft_buffer out,
                    uint32_t n) {
  uint32_t g[3], b[3];
  geometry(n, g, b);
  weft_binding bd[3] = {{x, 0, (uint64_t)n * 4, WEFT_READ},
                        {y, 0, (uint64_t)n * 4, WEFT_READ},
                        {out, 0, (uint64_t)n * 4, WEFT_WRITE}};
  add_args a = {n};
  OK(weft_launch(e->dev, s, e->k.add, g, b, bd, 3, &a, sizeof(a)));
}

/* y = alpha * x + y over n floats. */
static void axpy(cenv *e, weft_stream_id s, float alpha, weft_buffer x, weft_buffer y, uint32_t n) {
  uint32_t g[3], b[3];
  geometry(n, g, b);
  weft_binding bd[2] = {{x, 0, (uint64_t)n * 4, WEFT_READ},
                        {y, 0, (uint64_t)n * 4, WEFT_READ_WRITE}};
  axpy_args a = {alpha, n};
  OK(weft_launch(e->dev, s, e->k.axpy, g, b, bd, 2, &a, sizeof(a)));
}

static void spin(cenv *e, weft_stream_id s, uint32_t us) {
  OK(weft_launch(e->dev, s, e->k.spin, ONE, ONE, NULL, 0, &us, sizeof(us)));
}

static void noop(cenv *e, weft_stream_id s) {
  OK(weft_launch(e->dev, s, e->k.noop, ONE, ONE, NULL, 0, NULL, 0));
}

/* Reads n floats at element |first| of |buf| (caller frees). */
static float *read_f32(cenv *e, weft_stream_id s, weft_buffer buf, uint32_t first, uint32_t n) {
  float *got = malloc((size_t)n * 4 + 4);
  cr_assert_not_null(got);
  OK(weft_buffer_read(e->dev, s, buf, (uint64_t)first * 4, got, (uint64_t)n * 4));
  return got;
}

/* Elements [first, first + n) of |buf| all equal |want| exactly. */
static void expect_all(cenv *e, weft_stream_id s, weft_buffer buf, uint32_t first, uint32_t n,
                       float want, const char *what) {
  float *got = read_f32(e, s, buf, first, n);
  for (uint32_t i = 0; i < n; i++)
    if (got[i] != want) {
      float g = got[i];
      free(got);
      cr_assert_fail("%s: element %u is %g, expected %g", what, first + i, (double)g, (double)want);
    }
  free(got);
}

/* |buf| holds exactly |want| (n floats). */
static void expect_floats(cenv *e, weft_stream_id s, weft_buffer buf, const float *want, uint32_t n,
                          const char *what) {
  float *got = read_f32(e, s, buf, 0, n);
  for (uint32_t i = 0; i < n; i++)
    if (got[i] != want[i]) {
      float g = got[i];
      free(got);
      cr_assert_fail("%s: element %u is %g, expected %g", what, i, (double)g, (double)want[i]);
    }
  free(got);
}

/* ---- opening ------------------------------------------------------------------------------ */

/* A failed open leaves *out NULL, no allocator block and no context held. */
static void expect_open_fails(weft_device_options *o, weft_counting_allocator *ca,
                              weft_error_kind kind, const char *needle, int line) {
  weft_device *dev = (weft_device *)(uintptr_t)1; /* must be overwritten */
  weft_status st = weft_device_open(o, &dev);
  cr_assert_null(dev, "line %d: *out is not NULL after a failed open", line);
  expect_kind(st, kind, needle, "weft_device_open", line);
  cr_assert_eq(weft_counting_allocator_counts(ca).live_blocks, 0, "line %d: the open leaked", line);
  if (is_fake) cr_assert_eq(fstat("ctx_refs"), 0, "line %d: a context is still retained", line);
}
#define EXPECT_OPEN_FAILS(o, ca, kind, needle)                                                     \
  expect_open_fails((o), (ca), (kind), (needle), __LINE__)

/* The host backend still opens and runs in this process. */
static void host_device_still_works(void) {
  weft_device *host;
  OK(weft_device_open(NULL, &host));
  weft_buffer b;
  OK(weft_buffer_create(host, 0, 64, &b));
  uint8_t in[64], out[64];
  memset(in, 0x5a, sizeof(in));
  OK(weft_buffer_write(host, 0, b, 0, in, sizeof(in)));
  OK(weft_buffer_read(host, 1, b, 0, out, sizeof(out)));
  cr_assert_arr_eq(in, out, sizeof(in));
  weft_device_close(host);
}

Test(open, info_names_the_device_its_memory_and_the_driver, .timeout = 30) {
  cenv e;
  cenv_options(&e);
  e.opts.memory_capacity = 256u << 20;
  cenv_open(&e);
  weft_device_info info = {0};
  OK(weft_device_info_get(e.dev, &info));
  cr_assert_eq(info.backend, WEFT_BACKEND_CUDA);
  cr_assert_gt(strlen(info.name), 0);
  cr_assert_gt(info.total_memory, 0);
  cr_assert_gt(info.driver_version, 0);
  cr_assert_eq(info.ordinal, 0);
  cr_assert_eq(info.max_streams, e.opts.max_streams);
  cr_assert_eq(info.memory_align, 256);
  cr_assert_eq(info.capacity, info.total_memory < (256u << 20) ? info.total_memory : 256u << 20);
  if (is_fake) {
    cr_assert_str_eq(info.name, "Fake CUDA Device");
    cr_assert_eq(info.driver_version, 13000);
    cr_assert_eq(info.total_memory, UINT64_C(1) << 30);
  }
  cenv_close(&e);
}

/* With WEFT_CUDA_DRIVER at |path|, opening a CUDA device fails with
 * UnsupportedIoOperation saying |needle|, leaks nothing, and the host
 * backend still works. */
static void expect_driver_refused(const char *path, const char *needle, int line) {
  setenv("WEFT_CUDA_DRIVER", path, 1);
  weft_counting_allocator *ca;
  OK(weft_counting_allocator_create(&ca));
  weft_allocator a = weft_counting_allocator_get(ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &a;
  o.backend = WEFT_BACKEND_CUDA;
  o.ordinal = 0;
  expect_open_fails(&o, ca, WEFT_ERR_UNSUPPORTED_IO_OPERATION, needle, line);
  weft_counting_allocator_destroy(ca);
  host_device_still_works();
  ASSERT_NO_LEAKS();
}

Test(open, a_missing_driver_is_unsupported_and_the_host_backend_still_opens, .timeout = 30) {
  expect_driver_refused("/nonexistent/weft-test/libcuda.so.1", "no CUDA driver", __LINE__);
}

Test(open, the_toolkit_stub_is_unsupported_saying_so, .timeout = 30) {
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) cr_skip_test("no toolkit stub at %s", stub);
  expect_driver_refused(stub, "stub", __LINE__);
}

Test(open, a_library_that_is_not_a_driver_is_unsupported_naming_what_it_lacks, .timeout = 30) {
  expect_driver_refused("libm.so.6", "lacks", __LINE__);
}

Test(open, a_failing_cuInit_is_unsupported, .timeout = 30) {
  cenv e;
  cenv_options(&e);
  need_fake("FAKE_CUDA_FAIL_INIT");
  setenv("FAKE_CUDA_FAIL_INIT", "1", 1);
  EXPECT_OPEN_FAILS(&e.opts, e.ca, WEFT_ERR_UNSUPPORTED_IO_OPERATION, NULL);
  weft_counting_allocator_destroy(e.ca);
  host_device_still_works();
  ASSERT_NO_LEAKS();
}

Test(open, a_driver_without_devices_is_unsupported_saying_no_cuda_device, .timeout = 30) {
  cenv e;
  cenv_options(&e);
  need_fake("FAKE_CUDA_DEVICES");
  setenv("FAKE_CUDA_DEVICES", "0", 1);
  EXPECT_OPEN_FAILS(&e.opts, e.ca, WEFT_ERR_UNSUPPORTED_IO_OPERATION, "no CUDA device");
  weft_counting_allocator_destroy(e.ca);
  host_device_still_works();
  ASSERT_NO_LEAKS();
}

Test(open, an_ordinal_past_the_devices_is_invalid_argument, .timeout = 30) {
  cenv e;
  cenv_options(&e);
  e.opts.ordinal = is_fake ? 7 : 4096; /* the fake has one device; no real machine has 4097 */
  EXPECT_OPEN_FAILS(&e.opts, e.ca, WEFT_ERR_INVALID_ARGUMENT, NULL);
  e.opts.ordinal = -1;
  EXPECT_OPEN_FAILS(&e.opts, e.ca, WEFT_ERR_INVALID_ARGUMENT, NULL);
  /* The same options with ordinal 0 open. */
  e.opts.ordinal = 0;
  cenv_open(&e);
  cenv_close(&e);
}

/* ---- kernels: modules, entries, signatures ------------------------------------------------- */

static weft_status host_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return NULL;
}

Test(kernels, host_kernels_are_refused_on_a_cuda_device, .timeout = 30) {
  cenv e = cenv_new();
  weft_kernel k = {0};
  EXPECT_KIND(weft_kernel_host(e.dev, "host", host_kernel, NULL, &k),
              WEFT_ERR_UNSUPPORTED_IO_OPERATION, NULL);
  cenv_close(&e);
}

Test(kernels, modules_and_cuda_kernels_are_refused_on_a_host_device, .timeout = 30) {
  weft_device *host;
  OK(weft_device_open(NULL, &host));
  weft_module m = {0};
  EXPECT_KIND(weft_module_load(host, weft_test_kernels_ptx, weft_test_kernels_ptx_len, &m),
              WEFT_ERR_UNSUPPORTED_IO_OPERATION, NULL);
  weft_kernel k = {0};
  EXPECT_KIND(weft_kernel_cuda(host, (weft_module){1}, "weft_noop", "", &k),
              WEFT_ERR_UNSUPPORTED_IO_OPERATION, NULL);
  /* The host device is unharmed. */
  OK(weft_kernel_host(host, "fine", host_kernel, NULL, &k));
  OK(weft_launch(host, 0, k, ONE, ONE, NULL, 0, NULL, 0));
  OK(weft_sync(host, 0));
  weft_device_close(host);
  ASSERT_NO_LEAKS();
}

Test(kernels, a_bad_module_image_is_launch_compilation, .timeout = 30) {
  cenv e = cenv_new();
  static const char garbage[] = "this is neither PTX nor a cubin nor a fatbin";
  weft_module m;
  EXPECT_KIND(weft_module_load(e.dev, garbage, sizeof(garbage) - 1, &m),
              WEFT_ERR_LAUNCH_COMPILATION, NULL);
  static const char future[] = ".version 99.0\n.target sm_90\n.address_size 64\n";
  EXPECT_KIND(weft_module_load(e.dev, future, sizeof(future) - 1, &m), WEFT_ERR_LAUNCH_COMPILATION,
              NULL);
  /* The device still loads a good module and runs its kernels. */
  weft_buffer b = make_buffer(e.dev, 0, 1024 * 4);
  fill(&e, 0, b, 1024, 2.5f);
  expect_all(&e, 1, b, 0, 1024, 2.5f, "after refused modules");
  cenv_close(&e);
}

Test(kernels, ptx_without_a_terminating_nul_loads, .timeout = 30) {
  cenv e = cenv_new();
  /* Exactly the text's bytes, no NUL after them (ASan sees any overread). */
  char *ptx = malloc(weft_test_kernels_ptx_len);
  cr_assert_not_null(ptx);
  memcpy(ptx, weft_test_kernels_ptx, weft_test_kernels_ptx_len);
  weft_module m;
  weft_kernel k;
  OK(weft_module_load(e.dev, ptx, weft_test_kernels_ptx_len, &m));
  free(ptx); /* the image is not needed after the call */
  OK(weft_kernel_cuda(e.dev, m, "weft_fill_f32", "b44", &k));
  weft_buffer b = make_buffer(e.dev, 0, 4096 * 4);
  uint32_t g[3], bl[3];
  geometry(4096, g, bl);
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  fill_args a = {-3.0f, 4096};
  OK(weft_launch(e.dev, 0, k, g, bl, &bd, 1, &a, sizeof(a)));
  expect_all(&e, 0, b, 0, 4096, -3.0f, "a kernel of the second module");
  cenv_close(&e);
}

Test(kernels, an_unknown_entry_is_not_found, .timeout = 30) {
  cenv e = cenv_new();
  weft_kernel k;
  EXPECT_KIND(weft_kernel_cuda(e.dev, e.mod, "weft_no_such_kernel", "", &k), WEFT_ERR_NOT_FOUND,
              "weft_no_such_kernel");
  cenv_close(&e);
}

Test(kernels, malformed_param_signatures_are_invalid_argument, .timeout = 30) {
  cenv e = cenv_new();
  weft_kernel k;
  char many[80];
  memset(many, 'b', 65);
  many[65] = '\0';
  EXPECT_KIND(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", "bx", &k), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  EXPECT_KIND(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", NULL, &k), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  EXPECT_KIND(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", many, &k), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  EXPECT_KIND(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", "b34", &k), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  EXPECT_KIND(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", "B44", &k), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  EXPECT_KIND(weft_kernel_cuda(e.dev, e.mod, NULL, "b44", &k), WEFT_ERR_INVALID_ARGUMENT, NULL);
  /* 64 parameters are the limit, not past it. */
  many[64] = '\0';
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", many, &k));
  cenv_close(&e);
}

Test(launch, a_wrong_binding_count_or_scalar_size_is_refused_and_queues_nothing, .timeout = 30) {
  cenv e = cenv_new();
  enum { N = 1024 };
  weft_buffer x = make_buffer(e.dev, 0, N * 4), y = make_buffer(e.dev, 0, N * 4);
  fill(&e, 0, x, N, 1.0f);
  fill(&e, 0, y, N, 2.0f);
  sync_all(&e);
  weft_device_stats before = stats_of(e.dev);
  uint64_t fake_launches = fstat("launches");
  uint32_t g[3], b[3];
  geometry(N, g, b);
  weft_binding one_b[1] = {{x, 0, WEFT_WHOLE, WEFT_WRITE}};
  weft_binding two_b[2] = {{x, 0, WEFT_WHOLE, WEFT_READ}, {y, 0, WEFT_WHOLE, WEFT_WRITE}};
  fill_args fa = {9.0f, N};
  uint8_t scal[16] = {0};
  /* fill "b44": one binding, 8 scalar bytes. */
  EXPECT_KIND(weft_launch(e.dev, 0, e.k.fill, g, b, NULL, 0, &fa, sizeof(fa)),
              WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_launch(e.dev, 0, e.k.fill, g, b, two_b, 2, &fa, sizeof(fa)),
              WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_launch(e.dev, 0, e.k.fill, g, b, one_b, 1, &fa, 4), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  EXPECT_KIND(weft_launch(e.dev, 0, e.k.fill, g, b, one_b, 1, scal, 16), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  EXPECT_KIND(weft_launch(e.dev, 0, e.k.fill, g, b, one_b, 1, NULL, 0), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  /* vec_add "bbb4": three bindings, 4 bytes. */
  EXPECT_KIND(weft_launch(e.dev, 1, e.k.add, g, b, two_b, 2, scal, 4), WEFT_ERR_INVALID_ARGUMENT,
              NULL);
  /* noop "": nothing at all. */
  EXPECT_KIND(weft_launch(e.dev, 2, e.k.noop, ONE, ONE, one_b, 1, NULL, 0),
              WEFT_ERR_INVALID_ARGUMENT, NULL);
  EXPECT_KIND(weft_launch(e.dev, 2, e.k.noop, ONE, ONE, NULL, 0, scal, 4),
              WEFT_ERR_INVALID_ARGUMENT, NULL);
  /* spin "4": 4 bytes, no binding. */
  EXPECT_KIND(weft_launch(e.dev, 3, e.k.spin, ONE, ONE, NULL, 0, scal, 8),
              WEFT_ERR_INVALID_ARGUMENT, NULL);
  sync_all(&e);
  weft_device_stats after = stats_of(e.dev);
  cr_assert_eq(after.launches, before.launches, "a refused launch was accepted");
  cr_assert_eq(fstat("launches"), fake_launches, "a refused launch reached cuLaunchKernel");
  expect_all(&e, 0, x, 0, N, 1.0f, "x untouched");
  expect_all(&e, 0, y, 0, N, 2.0f, "y untouched");
  cenv_close(&e);
}

/* ---- results ------------------------------------------------------------------------------ */

Test(compute, fill_vec_add_and_axpy_on_64k_floats_are_exact, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 16 };
  weft_buffer x = make_buffer(e.dev, 0, N * 4), y = make_buffer(e.dev, 0, N * 4),
              z = make_buffer(e.dev, 0, N * 4);
  float *host = malloc(N * 4), *want = malloc(N * 4);
  cr_assert(host && want);
  for (uint32_t i = 0; i < N; i++) host[i] = (float)(i % 1000) - 500.0f;
  OK(weft_buffer_write(e.dev, 0, x, 0, host, N * 4));
  fill(&e, 0, y, N, 0.5f);
  vec_add(&e, 0, x, y, z, N); /* z = x + 0.5 */
  axpy(&e, 0, 2.0f, x, z, N); /* z = 2x + (x + 0.5) */
  for (uint32_t i = 0; i < N; i++) want[i] = 2.0f * host[i] + (host[i] + 0.5f);
  expect_floats(&e, 1, z, want, N, "z = 3x + 0.5");
  expect_all(&e, 2, y, 0, N, 0.5f, "y = fill 0.5");
  expect_floats(&e, 3, x, host, N, "x as written");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_run, 3);
  cr_assert_eq(s.launches_failed + s.launches_skipped, 0);
  free(host);
  free(want);
  cenv_close(&e);
}

Test(compute, a_binding_with_an_offset_addresses_base_plus_offset, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 14, HALF = N / 2, M = 1000 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4), c = make_buffer(e.dev, 1, N * 4);
  fill(&e, 0, a, N, 1.0f);
  fill(&e, 1, c, N, 0.0f);
  fill_at(&e, 0, a, 1024, HALF, 7.0f); /* elements 256 .. 256 + HALF */
  fill_at(&e, 0, a, 12, 2, 5.0f);      /* elements 3, 4: an offset no page alignment explains */
  float *want = malloc(N * 4);
  cr_assert_not_null(want);
  for (uint32_t i = 0; i < N; i++) want[i] = i >= 256 && i < 256 + HALF ? 7.0f : 1.0f;
  want[3] = want[4] = 5.0f;
  expect_floats(&e, 2, a, want, N, "offset fills");
  /* c[1024 + i] = a[256 + i] + a[i] for i < M: three different offsets. */
  uint32_t g[3], b[3];
  geometry(M, g, b);
  weft_binding bd[3] = {
      {a, 1024, M * 4, WEFT_READ}, {a, 0, M * 4, WEFT_READ}, {c, 4096, M * 4, WEFT_WRITE}};
  add_args aa = {M};
  OK(weft_launch(e.dev, 1, e.k.add, g, b, bd, 3, &aa, sizeof(aa)));
  float *cw = calloc(N, 4);
  cr_assert_not_null(cw);
  for (uint32_t i = 0; i < M; i++) cw[1024 + i] = want[256 + i] + want[i];
  expect_floats(&e, 3, c, cw, N, "vec_add over offset bindings");
  /* A partial read at an offset sees the same bytes. */
  expect_all(&e, 0, c, 1024 + 10, 100, 8.0f, "a read at an offset");
  free(want);
  free(cw);
  cenv_close(&e);
}

Test(compute, writes_then_reads_round_trip_small_staged_and_at_offsets, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 16 };
  weft_buffer b = make_buffer(e.dev, 0, N * 4);
  float *host = malloc(N * 4), *want = malloc(N * 4);
  cr_assert(host && want);
  for (uint32_t i = 0; i < N; i++) want[i] = host[i] = (float)i;
  OK(weft_buffer_write(e.dev, 0, b, 0, host, N * 4)); /* larger than 64 KiB: staged */
  for (uint32_t i = 0; i < N; i++) host[i] = -1.0f;   /* the write copied its source */
  expect_floats(&e, 1, b, want, N, "a whole write");
  float small[4] = {10, 20, 30, 40};
  OK(weft_buffer_write(e.dev, 2, b, 4 * 100, small, sizeof(small)));
  memcpy(want + 100, small, sizeof(small));
  float got[6];
  OK(weft_buffer_read(e.dev, 3, b, 4 * 99, got, sizeof(got)));
  cr_assert_arr_eq(got, want + 99, sizeof(got), "a small write at an offset");
  /* A kernel after a write, a write after a kernel, reads on other streams. */
  fill_at(&e, 1, b, 4 * 1000, 100, 3.0f);
  for (uint32_t i = 1000; i < 1100; i++) want[i] = 3.0f;
  OK(weft_buffer_write(e.dev, 2, b, 4 * 1050, small, sizeof(small)));
  memcpy(want + 1050, small, sizeof(small));
  expect_floats(&e, 3, b, want, N, "write, fill, write");
  free(host);
  free(want);
  cenv_close(&e);
}

Test(compute, copies_past_the_pinned_staging_size_round_trip_through_the_driver, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 5 << 20 }; /* 20 MiB: above the 16 MiB staging blocks */
  weft_buffer b = make_buffer(e.dev, 0, (uint64_t)N * 4);
  float *host = malloc((size_t)N * 4), *want = malloc((size_t)N * 4);
  cr_assert(host && want);
  for (uint32_t i = 0; i < N; i++) want[i] = host[i] = (float)(i % 1000003u);
  OK(weft_buffer_write(e.dev, 0, b, 0, host, (uint64_t)N * 4));
  memset(host, 0, (size_t)N * 4); /* the write copied its source */
  expect_floats(&e, 1, b, want, N, "a 20 MiB write read back");
  /* Many writes in flight at once, each through its own pinned block. */
  for (uint32_t k = 0; k < 64; k++) {
    float v[256];
    for (uint32_t i = 0; i < 256; i++) v[i] = (float)(k * 256 + i);
    OK(weft_buffer_write(e.dev, k % 3, b, (uint64_t)k * sizeof(v), v, sizeof(v)));
    memcpy(want + k * 256, v, sizeof(v));
  }
  expect_floats(&e, 2, b, want, N, "64 small writes on 3 streams");
  free(host);
  free(want);
  cenv_close(&e);
}

/* ---- ordering across streams -------------------------------------------------------------- */

Test(order, read_after_write_across_streams_sees_a_slow_producer, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 14 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4), b = make_buffer(e.dev, 1, N * 4);
  fill(&e, 0, a, N, 0.0f);
  sync_all(&e);
  for (uint32_t r = 1; r <= 5; r++) {
    spin(&e, 0, 20000);          /* the producer's stream is busy for 20 ms */
    fill(&e, 0, a, N, (float)r); /* ... then writes a */
    vec_add(&e, 1, a, a, b, N);  /* the consumer on another stream */
    expect_all(&e, 2, b, 0, N, 2.0f * (float)r, "b = a + a after the slow fill");
  }
  weft_device_stats s = stats_of(e.dev);
  cr_assert_gt(s.gpu_event_waits, 0, "a crossing behind a busy producer issued no event wait");
  cr_assert_gt(s.cross_stream_waits, 0);
  if (is_fake) cr_assert_gt(fstat("event_waits"), 0, "no cuStreamWaitEvent reached the driver");
  cenv_close(&e);
}

Test(order, write_after_read_across_streams_waits_for_a_slow_reader, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 14 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4), b = make_buffer(e.dev, 1, N * 4);
  for (uint32_t r = 1; r <= 5; r++) {
    fill(&e, 0, a, N, (float)r);
    spin(&e, 1, 20000);         /* the reader's stream is busy for 20 ms */
    vec_add(&e, 1, a, a, b, N); /* ... then reads a */
    fill(&e, 2, a, N, -100.0f); /* must wait for that read */
    expect_all(&e, 3, b, 0, N, 2.0f * (float)r, "b read a before it was overwritten");
    expect_all(&e, 0, a, 0, N, -100.0f, "a was overwritten");
  }
  weft_device_stats s = stats_of(e.dev);
  cr_assert_gt(s.gpu_event_waits, 0);
  cenv_close(&e);
}

/* One round: a slow producer, a consumer on another stream, an overwrite on
 * a third, a read on a fourth. */
static void crossing_round(cenv *e, weft_buffer a, weft_buffer b, uint32_t n, uint32_t r) {
  spin(e, 0, 5000);
  fill(e, 0, a, n, (float)r);
  vec_add(e, 1, a, a, b, n);
  fill(e, 2, a, n, -1.0f);
  expect_all(e, 3, b, 0, n, 2.0f * (float)r, "a crossing round");
}

Test(order, crossings_issue_event_waits_and_events_stay_flat_once_warm, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 4096, WARM = 5, ROUNDS = 20 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4), b = make_buffer(e.dev, 1, N * 4);
  for (uint32_t r = 0; r < WARM; r++) crossing_round(&e, a, b, N, r);
  sync_all(&e);
  weft_device_stats before = stats_of(e.dev);
  uint64_t events_live = fstat("events_live");
  for (uint32_t r = 0; r < ROUNDS; r++) crossing_round(&e, a, b, N, 100 + r);
  sync_all(&e);
  weft_device_stats after = stats_of(e.dev);
  cr_assert_geq(after.gpu_event_waits - before.gpu_event_waits, ROUNDS,
                "%" PRIu64 " event waits over %d rounds behind a busy producer",
                after.gpu_event_waits - before.gpu_event_waits, ROUNDS);
  /* The pools' high-water mark depends on timing (how many records are in
   * flight when a crossing comes): over 200 rounds it rose by one, once, at a
   * random round. A record that created an event would add one per round. */
  cr_assert_leq(after.gpu_events_created - before.gpu_events_created, 2,
                "%" PRIu64 " events created over %d rounds after warm-up",
                after.gpu_events_created - before.gpu_events_created, ROUNDS);
  cr_assert_gt(before.gpu_events_created, 0, "crossings used no event at all");
  if (is_fake)
    cr_assert_leq(fstat("events_live") - events_live, 2, "the driver holds %" PRIu64 " more events",
                  fstat("events_live") - events_live);
  cenv_close(&e);
}

/* ---- memory ------------------------------------------------------------------------------- */

Test(memory, a_buffer_larger_than_the_device_reads_back_buffer_too_big, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  uint64_t size = UINT64_C(1) << 46; /* 64 TiB: larger than any real device */
  if (is_fake) {
    setenv("FAKE_CUDA_MEMORY_BYTES", "67108864", 1); /* 64 MiB */
    size = UINT64_C(1) << 30;
  }
  cenv_open(&e);
  weft_buffer big = make_buffer(e.dev, 0, size);
  uint8_t got[16];
  weft_status st = weft_buffer_read(e.dev, 1, big, 0, got, sizeof(got));
  weft_status root = weft_error_root(ONLY_UNWRITTEN(st));
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_BUFFER_TOO_BIG, "root is %s: %s",
               weft_error_kind_name(weft_error_kind_of(root)), weft_error_message(root));
  cr_assert_eq(weft_error_size(root), size);
  cr_assert(!weft_error_may_succeed_after_reclaim(root));
  weft_error_free(st);
  /* The device still serves what fits. */
  weft_buffer fits = make_buffer(e.dev, 0, 1 << 20);
  fill(&e, 0, fits, 1 << 18, 4.0f);
  expect_all(&e, 1, fits, 0, 1 << 18, 4.0f, "a buffer that fits");
  OK(weft_buffer_release(e.dev, big));
  cenv_close(&e);
}

Test(memory, filling_the_device_runs_out_of_memory_and_released_memory_comes_back, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  need_fake("FAKE_CUDA_MEMORY_BYTES");
  setenv("FAKE_CUDA_MEMORY_BYTES", "67108864", 1); /* 64 MiB */
  cenv_open(&e);
  enum { MIB = 1 << 20, PIECE = 4 * MIB, MAX = 64 };
  weft_buffer live[MAX];
  int n = 0;
  weft_status fail = NULL;
  while (n < MAX) {
    live[n] = make_buffer(e.dev, 0, PIECE);
    float v = (float)n;
    fill(&e, 0, live[n], 1, v); /* touch it */
    float got = -1;
    fail = weft_buffer_read(e.dev, 1, live[n], 0, &got, 4);
    n++;
    if (fail) break;
    cr_assert_eq(got, v);
  }
  cr_assert_not_null(fail, "%d buffers of 4 MiB fit a 64 MiB device", n);
  cr_assert_gt(n, 1, "not even one 4 MiB buffer fit a 64 MiB device");
  cr_assert_leq(n, 17, "%d buffers of 4 MiB in 64 MiB", n);
  weft_status root = weft_error_root(ONLY_UNWRITTEN(fail));
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_OUT_OF_MEMORY, "root is %s: %s",
               weft_error_kind_name(weft_error_kind_of(root)), weft_error_message(root));
  cr_assert(weft_error_may_succeed_after_reclaim(root));
  weft_error_free(fail);
  cr_assert_leq(fstat("peak_bytes"), UINT64_C(64) << 20);
  /* Release everything; a new buffer of the same size fits and works. */
  for (int i = 0; i < n; i++) OK(weft_buffer_release(e.dev, live[i]));
  weft_buffer again = make_buffer(e.dev, 2, PIECE);
  fill(&e, 2, again, PIECE / 4, 6.0f);
  expect_all(&e, 3, again, 0, PIECE / 4, 6.0f, "a buffer created after memory was released");
  /* And many of them: the memory is really back. */
  weft_buffer more[8];
  for (int i = 0; i < 8; i++) {
    more[i] = make_buffer(e.dev, 1, PIECE);
    fill(&e, 1, more[i], 1, (float)i);
  }
  for (int i = 0; i < 8; i++) expect_all(&e, 0, more[i], 0, 1, (float)i, "after the release");
  cenv_close(&e);
}

Test(memory, memory_capacity_caps_what_the_device_holds, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  enum { MIB = 1 << 20 };
  e.opts.memory_capacity = 16 * MIB;
  cenv_open(&e);
  /* Larger than the capacity: never fits. */
  weft_buffer big = make_buffer(e.dev, 0, 32 * MIB);
  uint8_t got[16];
  weft_status st = weft_buffer_read(e.dev, 1, big, 0, got, sizeof(got));
  weft_status root = weft_error_root(ONLY_UNWRITTEN(st));
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_BUFFER_TOO_BIG, "root is %s: %s",
               weft_error_kind_name(weft_error_kind_of(root)), weft_error_message(root));
  weft_error_free(st);
  OK(weft_buffer_release(e.dev, big));
  /* 1 MiB pieces run out at the capacity, well before the device does. */
  weft_buffer live[64];
  int n = 0;
  weft_status fail = NULL;
  while (n < 64) {
    live[n] = make_buffer(e.dev, 0, MIB);
    fail = weft_buffer_read(e.dev, 1, live[n], 0, got, sizeof(got));
    n++;
    if (fail) break;
  }
  cr_assert_not_null(fail, "%d MiB fit under a 16 MiB capacity", n);
  cr_assert_leq(n, 17);
  root = weft_error_root(ONLY_UNWRITTEN(fail));
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_OUT_OF_MEMORY, "root is %s",
               weft_error_kind_name(weft_error_kind_of(root)));
  weft_error_free(fail);
  if (is_fake) cr_assert_leq(fstat("peak_bytes"), UINT64_C(16) * MIB, "the driver held more");
  for (int i = 0; i < n; i++) OK(weft_buffer_release(e.dev, live[i]));
  cenv_close(&e);
}

Test(memory, a_cleanup_gives_free_pages_back_to_the_driver, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  need_fake("the fake's allocation counters");
  cenv_open(&e);
  enum { N = 6 << 20 }; /* 24 MiB each */
  weft_buffer b[8];
  for (int i = 0; i < 8; i++) b[i] = make_buffer(e.dev, 1, N * 4);
  for (int i = 0; i < 8; i++) fill(&e, 1, b[i], N, (float)i);
  expect_all(&e, 1, b[7], 0, N, 7.0f, "the last fill");
  uint64_t held = fstat("live_bytes");
  cr_assert_gt(held, 0);
  for (int i = 0; i < 8; i++) OK(weft_buffer_release(e.dev, b[i]));
  OK(weft_memory_cleanup(e.dev, 1));
  weft_memory_usage u = {0};
  OK(weft_memory_usage_get(e.dev, &u));
  cr_assert_eq(u.bytes_reserved, 0, "%" PRIu64 " bytes still reserved", u.bytes_reserved);
  cr_assert_eq(fstat("live_bytes"), 0, "the driver still holds %" PRIu64 " of %" PRIu64 " bytes",
               fstat("live_bytes"), held);
  /* The device goes on: memory comes back from the driver. */
  weft_buffer again = make_buffer(e.dev, 1, N * 4);
  fill(&e, 1, again, N, 5.0f);
  expect_all(&e, 2, again, 0, N, 5.0f, "a buffer after the cleanup");
  cr_assert_gt(fstat("live_bytes"), 0);
  cenv_close(&e);
}

Test(memory, a_dry_run_allocates_nothing_in_the_driver_until_a_read_needs_it, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  need_fake("the fake's allocation counters");
  cenv_open(&e);
  enum { N = 1 << 16 };
  weft_buffer w = make_buffer(e.dev, 0, N * 4);
  fill(&e, 0, w, N, 3.0f);
  OK(weft_sync(e.dev, 0));
  uint64_t allocs = fstat("mem_alloc_calls"), kernels = fstat("kernels_run");
  OK(weft_memory_dry_run(e.dev, true));
  weft_buffer a = make_buffer(e.dev, 1, 64 << 20), c = make_buffer(e.dev, 1, 64 << 20);
  fill(&e, 1, a, N, 1.0f); /* measured, not run */
  fill(&e, 0, w, N, 9.0f);
  OK(weft_sync(e.dev, 1));
  OK(weft_sync(e.dev, 0));
  cr_assert_eq(fstat("mem_alloc_calls"), allocs, "a dry run allocated device memory");
  cr_assert_eq(fstat("kernels_run"), kernels, "a kernel ran in a dry run");
  weft_pool_report r[WEFT_MAX_POOL_REPORTS] = {0};
  size_t n = WEFT_MAX_POOL_REPORTS;
  OK(weft_memory_report_get(e.dev, 1, r, &n));
  uint64_t in_use = 0;
  for (size_t i = 0; i < n && i < WEFT_MAX_POOL_REPORTS; i++) in_use += r[i].usage.bytes_in_use;
  cr_assert_geq(in_use, UINT64_C(128) << 20, "the dry run measured %" PRIu64 " bytes", in_use);
  OK(weft_memory_dry_run(e.dev, false));
  expect_all(&e, 0, w, 0, N, 3.0f, "a buffer a dropped launch would have filled");
  OK(weft_buffer_release(e.dev, a));
  OK(weft_buffer_release(e.dev, c));
  cenv_close(&e);
}

Test(memory, close_leaves_nothing_in_the_driver, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  need_fake("the fake's object counters");
  cenv_open(&e);
  enum { N = 1 << 15 };
  weft_buffer buf[8];
  for (int i = 0; i < 8; i++) buf[i] = make_buffer(e.dev, (weft_stream_id)(i % 4), N * 4);
  float *host = calloc(N, 4);
  cr_assert_not_null(host);
  for (int i = 0; i < 8; i++)
    OK(weft_buffer_write(e.dev, (weft_stream_id)i, buf[i], 0, host, N * 4));
  for (int r = 0; r < 4; r++) {
    spin(&e, (weft_stream_id)r, 2000);
    vec_add(&e, (weft_stream_id)r, buf[r], buf[(r + 1) % 8], buf[4 + r], N);
    axpy(&e, (weft_stream_id)(r + 1), 2.0f, buf[4 + r], buf[(r + 2) % 4], N);
  }
  OK(weft_buffer_read(e.dev, 3, buf[7], 0, host, N * 4));
  for (int i = 0; i < 4; i++) OK(weft_buffer_release(e.dev, buf[i])); /* the rest: close frees */
  /* A capture (a graph in the driver) left for close to destroy. */
  weft_stream_id s0 = 0;
  weft_capture *cap;
  OK(weft_capture_prepare(e.dev, &s0, 1, &cap));
  fill(&e, 0, buf[4], N, 1.0f);
  OK(weft_capture_begin(cap));
  fill(&e, 0, buf[4], N, 2.0f);
  OK(weft_capture_end(cap));
  OK(weft_capture_replay(cap));
  /* No sync: close drains what is in flight. */
  free(host);
  cr_assert_gt(fstat("streams_live"), 0);
  cr_assert_gt(fstat("modules_live"), 0);
  cr_assert_gt(fstat("live_allocations"), 0);
  weft_device_close(e.dev);
  e.dev = NULL;
  weft_capture_destroy(cap); /* after close: frees the caller's object alone */
  cenv_close(&e);            /* checks every counter */
}

/* ---- a driver call that fails once ------------------------------------------------------- */

/* One round: x written on stream 0, y filled on 1 (both behind a 100 ms
 * kernel: long enough that a loaded machine still submits the rest first),
 * z = x + y on 2, read on 3. Returns the read's status (NULL: z was checked exactly). */
static weft_status injected_round(cenv *e, float base) {
  enum { N = 4096 };
  weft_buffer x = make_buffer(e->dev, 0, N * 4), y = make_buffer(e->dev, 1, N * 4),
              z = make_buffer(e->dev, 2, N * 4);
  float *host = malloc(N * 4);
  cr_assert_not_null(host);
  for (uint32_t i = 0; i < N; i++) host[i] = base + (float)i;
  /* Slow producers: the consumer's waits are issued on the device, and the
   * scheduler parks (arming completion marks) while it waits for them. */
  spin(e, 0, 100000);
  spin(e, 1, 100000);
  OK(weft_buffer_write(e->dev, 0, x, 0, host, N * 4));
  fill(e, 1, y, N, 0.5f);
  vec_add(e, 2, x, y, z, N);
  weft_status st = weft_buffer_read(e->dev, 3, z, 0, host, N * 4);
  for (uint32_t i = 0; !st && i < N; i++)
    cr_assert_eq(host[i], base + (float)i + 0.5f, "element %u after a round that read fine", i);
  free(host);
  OK(weft_buffer_release(e->dev, x));
  OK(weft_buffer_release(e->dev, y));
  OK(weft_buffer_release(e->dev, z));
  return st;
}

Test(driver_faults, each_driver_call_failing_once_is_reported_or_absorbed_and_the_device_goes_on,
     .timeout = 120) {
  cenv e;
  load();
  need_fake("fake_cuda_fail_next");
  /* warm: also called by a round on a device whose streams, pools and
   * pages exist already. */
  static const struct {
    const char *fn;
    CUresult r;
    bool warm;
  } calls[] = {
      {"cuStreamCreate", CUDA_ERROR_OUT_OF_MEMORY, false},
      {"cuMemAllocAsync", CUDA_ERROR_OUT_OF_MEMORY, false},
      {"cuMemHostAlloc", CUDA_ERROR_OUT_OF_MEMORY, false},
      {"cuMemcpyHtoDAsync", CUDA_ERROR_INVALID_VALUE, true},
      {"cuLaunchKernel", CUDA_ERROR_INVALID_VALUE, true},
      {"cuStreamWaitEvent", CUDA_ERROR_INVALID_VALUE, true},
      {"cuEventRecord", CUDA_ERROR_INVALID_VALUE, true},
      {"cuEventQuery", CUDA_ERROR_INVALID_VALUE, true},
      {"cuLaunchHostFunc", CUDA_ERROR_INVALID_VALUE, true},
      {"cuMemcpyDtoHAsync", CUDA_ERROR_INVALID_VALUE, true},
      {"cuStreamQuery", CUDA_ERROR_INVALID_VALUE, true},
      {"cuStreamSynchronize", CUDA_ERROR_INVALID_VALUE, false},
  };
  /* Each call on a fresh device (the injection meets it where the first
   * streams, pools and pages are made) and on a warm one (on the submit,
   * completion and copy paths). */
  for (size_t k = 0; k < 2 * sizeof(calls) / sizeof(calls[0]); k++) {
    size_t i = k / 2;
    if (k % 2 && !calls[i].warm) continue;
    cenv_options(&e);
    cenv_open(&e);
    if (k % 2) OK(injected_round(&e, 7.0f));
    uint64_t injected = fstat("injected_failures");
    fail_next(calls[i].fn, calls[i].r, 0);
    weft_status st = injected_round(&e, 1.0f);
    cr_assert_eq(fstat("injected_failures"), injected + 1, "%s was not called in a round (%s)",
                 calls[i].fn, k % 2 ? "warm" : "fresh");
    if (st) { /* reported: a clear error, never a poisoned device */
      char text[2048];
      cr_assert(!weft_error_is_device_poisoned(st), "%s: %s", calls[i].fn,
                text_of(st, text, sizeof(text)));
      weft_error_free(st);
    }
    /* The device goes on: the next round reads exactly. */
    OK(injected_round(&e, 100.0f));
    cenv_close(&e);
  }
}

/* ---- launches that fail ------------------------------------------------------------------- */

/* |u|'s chain: |len| skipped hops, newest first, |first| a prefix of hop 0;
 * the launch that failed is its origin, |origin|. */
static void expect_chain(weft_status u, size_t len, const char *first, const char *origin) {
  cr_assert_eq(weft_error_chain_length(u), len, "chain of %zu hops, expected %zu",
               weft_error_chain_length(u), len);
  if (first)
    cr_assert_not_null(strstr(weft_error_chain_at(u, 0), first), "hop 0 '%s' lacks '%s'",
                       weft_error_chain_at(u, 0), first);
  cr_assert_not_null(weft_error_origin(u));
  cr_assert_str_eq(weft_error_origin(u), origin);
}

Test(failure, a_launch_the_driver_refuses_is_launch_too_many_resources_with_a_chain,
     .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 4096 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4), b = make_buffer(e.dev, 0, N * 4),
              c = make_buffer(e.dev, 1, N * 4), d = make_buffer(e.dev, 1, N * 4);
  fill(&e, 1, c, N, 5.0f); /* launch 1 */
  /* Launch 2: 2048 threads per block, which the driver refuses. */
  const uint32_t grid[3] = {2, 1, 1}, block[3] = {2048, 1, 1};
  weft_binding bd = {a, 0, WEFT_WHOLE, WEFT_WRITE};
  fill_args fa = {1.0f, N};
  OK(weft_launch(e.dev, 0, e.k.fill, grid, block, &bd, 1, &fa, sizeof(fa)));
  vec_add(&e, 2, a, a, b, N); /* launch 3: reads the unwritten a */
  vec_add(&e, 1, c, c, d, N); /* launch 4: independent */
  expect_all(&e, 3, d, 0, N, 10.0f, "independent work");
  uint8_t got[64];
  weft_status st = weft_buffer_read(e.dev, 3, a, 0, got, sizeof(got));
  weft_status u = ONLY_UNWRITTEN(st);
  uint64_t id = weft_error_failure_id(u);
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES, "root is %s: %s",
               weft_error_kind_name(weft_error_kind_of(root)), weft_error_message(root));
  cr_assert_not_null(strstr(weft_error_message(root), "CUDA_ERROR_INVALID_VALUE"), "root '%s'",
                     weft_error_message(root));
  cr_assert(weft_error_is_refusal(st));
  cr_assert(!weft_error_is_device_poisoned(st));
  expect_chain(u, 0, NULL, "kernel 'weft_fill_f32' (launch 2)");
  weft_error_free(st);
  st = weft_buffer_read(e.dev, 0, b, 0, got, sizeof(got));
  u = ONLY_UNWRITTEN(st);
  cr_assert_eq(weft_error_failure_id(u), id, "the skip carries the refusal's failure");
  cr_assert_eq(weft_error_kind_of(weft_error_root(u)), WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES);
  expect_chain(u, 1, "skipped kernel 'weft_vec_add_f32' (launch 3)",
               "kernel 'weft_fill_f32' (launch 2)");
  weft_error_free(st);
  sync_all(&e);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_skipped, 1);
  cr_assert_eq(s.launches_run, 2);
  weft_status p = weft_device_poisoned(e.dev);
  cr_assert_null(p, "a refused launch poisoned the device");
  /* A good launch rewrites a: the failure is gone. */
  fill(&e, 0, a, N, 3.0f);
  expect_all(&e, 1, a, 0, N, 3.0f, "a rewritten");
  cenv_close(&e);
}

Test(failure, an_injected_launch_out_of_resources_fails_only_that_launch, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  need_fake("fake_cuda_fail_next");
  cenv_open(&e);
  enum { N = 4096 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4), b = make_buffer(e.dev, 1, N * 4);
  fill(&e, 0, a, N, 1.0f);
  sync_all(&e);
  /* Nothing else may reach cuLaunchKernel before the refused launch does:
   * launches on other streams race to the driver. */
  fail_next("cuLaunchKernel", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 0);
  fill(&e, 0, a, N, 2.0f); /* refused by the driver */
  uint8_t got[16];
  weft_status st = weft_buffer_read(e.dev, 2, a, 0, got, sizeof(got));
  weft_status root = weft_error_root(ONLY_UNWRITTEN(st));
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES, "root is %s: %s",
               weft_error_kind_name(weft_error_kind_of(root)), weft_error_message(root));
  cr_assert_not_null(strstr(weft_error_message(root), "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
                     "root '%s'", weft_error_message(root));
  cr_assert(weft_error_is_refusal(st));
  fill(&e, 1, b, N, 3.0f);
  expect_all(&e, 2, b, 0, N, 3.0f, "the next launch runs");
  weft_error_free(st);
  cr_assert_eq(fstat("injected_failures"), 1);
  cr_assert_null(weft_device_poisoned(e.dev));
  fill(&e, 0, a, N, 4.0f);
  expect_all(&e, 3, a, 0, N, 4.0f, "a rewritten after the refusal");
  cenv_close(&e);
}

Test(failure, an_alloc_failpoint_out_of_memory_is_rescued_by_the_retry, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  e.opts.failpoints = "alloc#1=OutOfMemory";
  cenv_open(&e);
  weft_buffer a = make_buffer(e.dev, 0, 4096 * 4);
  fill(&e, 0, a, 4096, 5.0f);
  expect_all(&e, 1, a, 0, 4096, 5.0f, "a rescued buffer");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.reclaims, 1);
  cr_assert_eq(s.reclaims_rescued, 1);
  cr_assert_eq(s.failures_live, 0);
  cenv_close(&e);

  cenv_options(&e);
  e.opts.failpoints = "alloc#1=OutOfMemory;alloc#2=OutOfMemory";
  cenv_open(&e);
  weft_buffer x = make_buffer(e.dev, 0, 4096 * 4);
  uint8_t got[16];
  weft_status st = weft_buffer_read(e.dev, 1, x, 0, got, sizeof(got));
  weft_status root = weft_error_root(ONLY_UNWRITTEN(st));
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_OUT_OF_MEMORY, "root is %s: %s",
               weft_error_kind_name(weft_error_kind_of(root)), weft_error_message(root));
  cr_assert_not_null(strstr(weft_error_message(root), "failpoint"), "'%s'",
                     weft_error_message(root));
  weft_error_free(st);
  OK(weft_buffer_release(e.dev, x));
  cenv_close(&e);
}

Test(failure, a_launch_failpoint_fails_exactly_the_second_launch, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  e.opts.failpoints = "launch#2=LaunchTooManyResources";
  cenv_open(&e);
  enum { N = 1024 };
  weft_buffer b[4];
  for (int i = 0; i < 4; i++) {
    b[i] = make_buffer(e.dev, (weft_stream_id)i, N * 4);
    fill(&e, (weft_stream_id)i, b[i], N, (float)(10 + i));
  }
  for (int i = 0; i < 4; i++)
    if (i != 1) expect_all(&e, 0, b[i], 0, N, (float)(10 + i), "a launch no failpoint names");
  uint8_t got[16];
  weft_status st = weft_buffer_read(e.dev, 2, b[1], 0, got, sizeof(got));
  weft_status u = ONLY_UNWRITTEN(st);
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES);
  cr_assert_not_null(strstr(weft_error_message(root), "failpoint"), "'%s'",
                     weft_error_message(root));
  cr_assert_not_null(strstr(weft_error_message(root), "launch 2"), "'%s'",
                     weft_error_message(root));
  expect_chain(u, 0, NULL, "kernel 'weft_fill_f32' (launch 2)");
  weft_error_free(st);
  sync_all(&e);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_run, 3);
  cenv_close(&e);
}

/* ---- poisoning ---------------------------------------------------------------------------- */

typedef struct poison_seen {
  _Atomic uint32_t calls;
  weft_error_kind kind;
  char text[512];
} poison_seen;

static void on_poison(void *user, weft_status poison) {
  poison_seen *p = user;
  if (atomic_fetch_add(&p->calls, 1) == 0) {
    p->kind = weft_error_kind_of(poison);
    weft_error_format(poison, p->text, sizeof(p->text));
  }
}

/* After poisoning every call listed fails with DevicePoisoned (those that do
 * not are listed together). */
static void collect_poisoned(weft_status st, const char *what, char *bad, size_t cap) {
  if (st && weft_error_is_device_poisoned(st)) {
    weft_error_free(st);
    return;
  }
  char text[512];
  size_t n = strlen(bad);
  snprintf(bad + n, cap - n, "\n  %s -> %s", what, st ? text_of(st, text, sizeof(text)) : "Ok");
  weft_error_free(st);
}
#define COLLECT(call) collect_poisoned((call), #call, bad, sizeof(bad))

/* The device's poison names |cuda_name|; the callback ran once with it. */
static void expect_poison(cenv *e, poison_seen *seen, const char *cuda_name) {
  weft_status p = weft_device_poisoned(e->dev);
  char text[1024];
  cr_assert_eq(weft_error_kind_of(p), WEFT_ERR_DEVICE_POISONED, "poison: %s",
               p ? text_of(p, text, sizeof(text)) : "none");
  text_of(p, text, sizeof(text));
  cr_assert_not_null(strstr(text, cuda_name), "poison '%s' lacks %s", text, cuda_name);
  weft_error_free(p);
  cr_assert_eq(atomic_load(&seen->calls), 1, "the callback ran %u times",
               atomic_load(&seen->calls));
  cr_assert_eq(seen->kind, WEFT_ERR_DEVICE_POISONED);
  cr_assert_not_null(strstr(seen->text, cuda_name), "callback got '%s'", seen->text);
}

Test(poison, a_faulting_kernel_poisons_the_device_and_every_later_call, .timeout = 60) {
  cenv e = cenv_new();
  static poison_seen seen;
  OK(weft_device_set_poison_callback(e.dev, on_poison, &seen));
  enum { N = 1024 };
  weft_buffer b = make_buffer(e.dev, 0, N * 4);
  fill(&e, 0, b, N, 1.0f);
  expect_all(&e, 1, b, 0, N, 1.0f, "before the fault");
  OK(weft_launch(e.dev, 0, e.k.fault, ONE, ONE, NULL, 0, NULL, 0));
  EXPECT_POISONED(weft_sync(e.dev, 0));
  expect_poison(&e, &seen, "ILLEGAL_ADDRESS");
  static char bad[4096];
  bad[0] = '\0';
  float host[N] = {0};
  weft_buffer nb;
  weft_module m;
  weft_kernel k;
  uint32_t g[3], bl[3];
  geometry(N, g, bl);
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  fill_args fa = {2.0f, N};
  COLLECT(weft_launch(e.dev, 1, e.k.fill, g, bl, &bd, 1, &fa, sizeof(fa)));
  COLLECT(weft_buffer_read(e.dev, 2, b, 0, host, sizeof(host)));
  COLLECT(weft_buffer_create(e.dev, 3, N * 4, &nb));
  COLLECT(weft_buffer_write(e.dev, 0, b, 0, host, sizeof(host)));
  COLLECT(weft_sync(e.dev, 1));
  COLLECT(weft_sync(e.dev, 0));
  COLLECT(weft_module_load(e.dev, weft_test_kernels_ptx, weft_test_kernels_ptx_len, &m));
  COLLECT(weft_kernel_cuda(e.dev, e.mod, "weft_noop", "", &k));
  cr_assert_eq(bad[0], '\0', "calls that did not fail with DevicePoisoned:%s", bad);
  sleep_us(20000);
  cr_assert_eq(atomic_load(&seen.calls), 1, "the callback ran again");
  if (is_fake) cr_assert_eq(fstat("sticky"), CUDA_ERROR_ILLEGAL_ADDRESS);
  cenv_close(&e); /* returns: nothing waits on the dead context */
}

Test(poison, an_injected_sticky_ecc_error_mid_stream_poisons_the_device, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  need_fake("fake_cuda_fault");
  cenv_open(&e);
  static poison_seen seen;
  OK(weft_device_set_poison_callback(e.dev, on_poison, &seen));
  enum { N = 1024 };
  weft_buffer b[4];
  for (int i = 0; i < 4; i++) b[i] = make_buffer(e.dev, (weft_stream_id)i, N * 4);
  for (int i = 0; i < 4; i++) fill(&e, (weft_stream_id)i, b[i], N, 1.0f);
  sync_all(&e); /* everything reserved and run */
  spin(&e, 0, 50000);
  sleep_us(10000);
  fault(CUDA_ERROR_ECC_UNCORRECTABLE); /* while stream 0 is busy */
  /* Launches submitted now may be refused with the poison already. */
  for (int i = 0; i < 4; i++) {
    uint32_t g[3], bl[3];
    geometry(N, g, bl);
    weft_binding bd = {b[i], 0, WEFT_WHOLE, WEFT_WRITE};
    fill_args fa = {2.0f, N};
    weft_status st =
        weft_launch(e.dev, (weft_stream_id)i, e.k.fill, g, bl, &bd, 1, &fa, sizeof(fa));
    cr_assert(!st || weft_error_is_device_poisoned(st));
    weft_error_free(st);
  }
  EXPECT_POISONED(weft_sync(e.dev, 0));
  for (int i = 0; i < 4; i++) {
    float got[4];
    EXPECT_POISONED(weft_buffer_read(e.dev, (weft_stream_id)i, b[i], 0, got, sizeof(got)));
  }
  expect_poison(&e, &seen, "ECC_UNCORRECTABLE");
  cenv_close(&e);
}

/* The fault comes before the scheduler has reserved the buffers or issued
 * the launches submitted just before it: the first driver call after it
 * (an allocation, here) meets the sticky error, and a sync submitted after
 * all that must not report success. */
Test(poison, a_sticky_error_met_by_a_reservation_fails_the_next_sync, .timeout = 60) {
  cenv e;
  cenv_options(&e);
  need_fake("fake_cuda_fault");
  cenv_open(&e);
  static poison_seen seen;
  OK(weft_device_set_poison_callback(e.dev, on_poison, &seen));
  enum { N = 1024 };
  weft_buffer b[4];
  for (int i = 0; i < 4; i++) b[i] = make_buffer(e.dev, (weft_stream_id)i, N * 4);
  for (int i = 0; i < 4; i++) {
    weft_binding bd = {b[i], 0, WEFT_WHOLE, WEFT_WRITE};
    fill_args fa = {1.0f, N};
    uint32_t g[3], bl[3];
    geometry(N, g, bl);
    weft_status st =
        weft_launch(e.dev, (weft_stream_id)i, e.k.fill, g, bl, &bd, 1, &fa, sizeof(fa));
    cr_assert(!st || weft_error_is_device_poisoned(st));
    weft_error_free(st);
  }
  fault(CUDA_ERROR_ECC_UNCORRECTABLE);
  EXPECT_POISONED(weft_sync(e.dev, 0));
  float got[4];
  EXPECT_POISONED(weft_buffer_read(e.dev, 1, b[1], 0, got, sizeof(got)));
  expect_poison(&e, &seen, "ECC_UNCORRECTABLE");
  cenv_close(&e);
}

typedef struct waiter {
  weft_device *dev;
  weft_stream_id stream;
  weft_buffer buf; /* id 0: a sync */
  weft_status result;
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  float got[16];
  w->result = w->buf.id ? weft_buffer_read(w->dev, w->stream, w->buf, 0, got, sizeof(got))
                        : weft_sync(w->dev, w->stream);
  return NULL;
}

Test(poison, reads_and_syncs_pending_behind_the_fault_wake_with_device_poisoned, .timeout = 60) {
  cenv e = cenv_new();
  static poison_seen seen;
  OK(weft_device_set_poison_callback(e.dev, on_poison, &seen));
  enum { N = 1024 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4), b = make_buffer(e.dev, 1, N * 4);
  fill(&e, 0, a, N, 1.0f);
  sync_all(&e);
  spin(&e, 0, 50000); /* the fault runs 50 ms from now */
  OK(weft_launch(e.dev, 0, e.k.fault, ONE, ONE, NULL, 0, NULL, 0));
  fill(&e, 0, a, N, 2.0f);    /* behind the fault */
  vec_add(&e, 1, a, a, b, N); /* another stream, waiting on it */
  waiter w[4] = {
      {e.dev, 0, {0}, NULL}, {e.dev, 2, a, NULL}, {e.dev, 3, b, NULL}, {e.dev, 1, {0}, NULL}};
  pthread_t th[4];
  for (int i = 0; i < 4; i++) cr_assert_eq(pthread_create(&th[i], NULL, wait_thread, &w[i]), 0);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 4; i++) {
    char what[64];
    snprintf(what, sizeof(what), "waiter %d (%s on stream %" PRIu64 ")", i,
             w[i].buf.id ? "read" : "sync", w[i].stream);
    expect_poisoned(w[i].result, what, __LINE__);
  }
  expect_poison(&e, &seen, "ILLEGAL_ADDRESS");
  cenv_close(&e);
}

/* ---- capture and replay ------------------------------------------------------------------- */

/* The step: z = x + x; z = 3x + z (so z = 5x). */
static void step(cenv *e, weft_stream_id s, weft_buffer x, weft_buffer z, uint32_t n) {
  vec_add(e, s, x, x, z, n);
  axpy(e, s, 3.0f, x, z, n);
}

static void inputs(float *host, uint32_t n, uint32_t round) {
  for (uint32_t i = 0; i < n; i++) host[i] = (float)((i * 7 + round * 13) % 1024) - 100.0f;
}

Test(capture, replays_with_inputs_refreshed_in_place_equal_an_eager_run, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 14 };
  weft_buffer x = make_buffer(e.dev, 0, N * 4), z = make_buffer(e.dev, 0, N * 4);
  weft_buffer xe = make_buffer(e.dev, 1, N * 4), ze = make_buffer(e.dev, 1, N * 4);
  float *host = malloc(N * 4), *want = malloc(N * 4), *got = NULL;
  cr_assert(host && want);
  weft_stream_id s0 = 0;
  weft_capture *cap;
  OK(weft_capture_prepare(e.dev, &s0, 1, &cap));
  inputs(host, N, 0);
  OK(weft_buffer_write(e.dev, 0, x, 0, host, N * 4));
  step(&e, 0, x, z, N); /* warm-up, eager */
  for (uint32_t i = 0; i < N; i++) want[i] = 5.0f * host[i];
  expect_floats(&e, 0, z, want, N, "the warm-up");
  OK(weft_capture_begin(cap));
  uint64_t kernels_before = fstat("kernels_run");
  step(&e, 0, x, z, N);
  OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_READY);
  cr_assert_eq(weft_capture_launches(cap), 2);
  cr_assert_eq(fstat("kernels_run"), kernels_before, "a recorded launch ran");
  for (uint32_t r = 1; r <= 3; r++) {
    inputs(host, N, r);
    OK(weft_buffer_write(e.dev, 0, x, 0, host, N * 4)); /* refreshed in place */
    OK(weft_capture_replay(cap));
    /* The same step run eagerly on other buffers. */
    OK(weft_buffer_write(e.dev, 1, xe, 0, host, N * 4));
    step(&e, 1, xe, ze, N);
    float *eager = read_f32(&e, 1, ze, 0, N);
    got = read_f32(&e, 0, z, 0, N);
    cr_assert_arr_eq(got, eager, N * 4, "replay %u differs from the eager run", r);
    for (uint32_t i = 0; i < N; i++)
      cr_assert_eq(got[i], 5.0f * host[i], "replay %u, element %u", r, i);
    free(eager);
    free(got);
  }
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_recorded, 2);
  cr_assert_eq(s.launches_replayed, 6);
  cr_assert_eq(s.launches_failed + s.launches_skipped, 0);
  weft_capture_destroy(cap);
  free(host);
  free(want);
  cenv_close(&e);
}

/* A dry run measures a replay as the launches its graph holds, and runs none. */
Test(capture, a_replay_during_a_dry_run_counts_its_graphs_launches, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 10 };
  weft_buffer x = make_buffer(e.dev, 0, N * 4), z = make_buffer(e.dev, 0, N * 4);
  weft_stream_id s0 = 0;
  weft_capture *cap;
  OK(weft_capture_prepare(e.dev, &s0, 1, &cap));
  step(&e, 0, x, z, N); /* warm-up, eager */
  OK(weft_capture_begin(cap));
  step(&e, 0, x, z, N);
  OK(weft_capture_end(cap));
  weft_device_stats before = stats_of(e.dev);
  uint64_t kernels_before = fstat("kernels_run");
  OK(weft_memory_dry_run(e.dev, true));
  for (int i = 0; i < 3; i++) OK(weft_capture_replay(cap));
  OK(weft_memory_dry_run(e.dev, false));
  weft_device_stats after = stats_of(e.dev);
  cr_assert_eq(after.launches_dry - before.launches_dry, 3 * 2, "every launch was measured");
  cr_assert_eq(after.launches - before.launches, 3 * 2);
  cr_assert_eq(after.launches_replayed, before.launches_replayed, "no replayed launch ran");
  cr_assert_eq(fstat("kernels_run"), kernels_before, "a kernel ran in a dry run");
  weft_capture_destroy(cap);
  cenv_close(&e);
}

Test(capture, creating_a_buffer_on_the_captured_stream_dooms_the_recording, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1024 };
  weft_buffer x = make_buffer(e.dev, 0, N * 4);
  fill(&e, 0, x, N, 1.0f);
  weft_stream_id s0 = 0;
  weft_capture *cap;
  OK(weft_capture_prepare(e.dev, &s0, 1, &cap));
  OK(weft_capture_begin(cap));
  weft_buffer fresh = make_buffer(e.dev, 0, N * 4); /* a reservation inside the window */
  fill(&e, 0, x, N, 2.0f);
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "the recording allocated");
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_ABORTED);
  cr_assert_eq(weft_capture_launches(cap), 0, "nothing is kept");
  weft_capture_destroy(cap);
  /* The stream works eagerly again, and so does a clean capture on it. */
  fill(&e, 0, x, N, 3.0f);
  expect_all(&e, 1, x, 0, N, 3.0f, "eager after the doomed capture");
  OK(weft_capture_prepare(e.dev, &s0, 1, &cap));
  fill(&e, 0, x, N, 4.0f);
  OK(weft_capture_begin(cap));
  fill(&e, 0, x, N, 5.0f);
  OK(weft_capture_end(cap));
  OK(weft_capture_replay(cap));
  expect_all(&e, 1, x, 0, N, 5.0f, "a clean capture replayed");
  weft_capture_destroy(cap);
  OK(weft_buffer_release(e.dev, fresh));
  cenv_close(&e);
}

/* The step of the two-stream capture below: b = 2x + 0.5 on stream 1 while a
 * = 1 on stream 0; c = a + b on 0 (waits for 1); d = 3c on 1 (waits for 0). */
static void two_stream_step(cenv *e, weft_buffer x, weft_buffer a, weft_buffer b, weft_buffer c,
                            weft_buffer d, uint32_t n) {
  fill(e, 0, a, n, 1.0f);
  fill(e, 1, b, n, 0.5f);
  axpy(e, 1, 2.0f, x, b, n);
  vec_add(e, 0, a, b, c, n);
  fill(e, 1, d, n, 0.0f);
  axpy(e, 1, 3.0f, c, d, n);
}

Test(capture, a_capture_over_two_streams_replays_as_one_graph_with_both_branches, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 4096 };
  weft_buffer x = make_buffer(e.dev, 0, N * 4), a = make_buffer(e.dev, 0, N * 4),
              b = make_buffer(e.dev, 1, N * 4), c = make_buffer(e.dev, 0, N * 4),
              d = make_buffer(e.dev, 1, N * 4);
  float *host = malloc(N * 4);
  cr_assert_not_null(host);
  for (uint32_t i = 0; i < N; i++) host[i] = 0.0f;
  OK(weft_buffer_write(e.dev, 0, x, 0, host, N * 4));
  weft_stream_id both[2] = {0, 1};
  weft_capture *cap;
  OK(weft_capture_prepare(e.dev, both, 2, &cap));
  two_stream_step(&e, x, a, b, c, d, N); /* warm-up */
  OK(weft_capture_begin(cap));
  two_stream_step(&e, x, a, b, c, d, N);
  OK(weft_capture_end(cap));
  cr_assert_eq(weft_capture_launches(cap), 6);
  uint64_t kernels = fstat("kernels_run"), graphs = fstat("graph_launches");
  for (uint32_t r = 1; r <= 5; r++) {
    for (uint32_t i = 0; i < N; i++) host[i] = (float)(r * 10 + i % 7);
    OK(weft_buffer_write(e.dev, 0, x, 0, host, N * 4)); /* refreshed in place */
    OK(weft_capture_replay(cap));
    float *got = read_f32(&e, 2, d, 0, N);
    for (uint32_t i = 0; i < N; i++)
      cr_assert_eq(got[i], 3.0f * (1.0f + 2.0f * host[i] + 0.5f), "replay %u, element %u", r, i);
    free(got);
  }
  if (is_fake) {
    cr_assert_eq(fstat("graph_launches") - graphs, 5, "one graph launch per replay");
    cr_assert_eq(fstat("kernels_run") - kernels, 30, "every recorded launch in every replay");
  }
  weft_device_stats st = stats_of(e.dev);
  cr_assert_eq(st.launches_failed + st.launches_skipped, 0);
  weft_capture_destroy(cap);
  free(host);
  cenv_close(&e);
}

Test(capture, a_launch_the_driver_refuses_while_capturing_fails_end_and_keeps_nothing,
     .timeout = 60) {
  cenv e;
  cenv_options(&e);
  need_fake("fake_cuda_fail_next");
  cenv_open(&e);
  enum { N = 1024 };
  weft_buffer x = make_buffer(e.dev, 0, N * 4), y = make_buffer(e.dev, 0, N * 4);
  fill(&e, 0, x, N, 1.0f);
  fill(&e, 0, y, N, 1.0f);
  weft_stream_id s0 = 0;
  weft_capture *cap;
  OK(weft_capture_prepare(e.dev, &s0, 1, &cap));
  OK(weft_capture_begin(cap));
  fill(&e, 0, x, N, 2.0f);
  axpy(&e, 0, 3.0f, x, y, N);
  /* Launches are recorded, not run: the driver sees them only at end, when
   * they are stream-captured. The second one is refused there. */
  uint64_t graphs = fstat("graph_execs_live");
  fail_next("cuLaunchKernel", CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, 1);
  EXPECT_KIND(weft_capture_end(cap), WEFT_ERR_GENERIC, "refused while capturing");
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_ABORTED);
  cr_assert_eq(fstat("graph_execs_live"), graphs, "an aborted capture kept a graph");
  cr_assert_eq(fstat("graphs_live"), 0, "the graph template was left");
  EXPECT_KIND(weft_capture_replay(cap), WEFT_ERR_GENERIC, NULL);
  weft_capture_destroy(cap);
  /* Nothing of the window ran, and the device goes on. */
  expect_all(&e, 1, x, 0, N, 1.0f, "x after the refused capture");
  axpy(&e, 0, 3.0f, x, y, N);
  expect_all(&e, 1, y, 0, N, 4.0f, "an eager launch after it");
  cenv_close(&e);
}

/* ---- the launch path allocates nothing once warm ------------------------------------------ */

static void noop_fill_rounds(cenv *e, weft_buffer b0, weft_buffer b1, uint32_t n, int batches) {
  for (int i = 0; i < batches; i++) {
    for (int j = 0; j < 25; j++) { /* 100 launches per batch */
      noop(e, 0);
      fill(e, 0, b0, n, (float)j);
      noop(e, 1);
      fill(e, 1, b1, n, (float)(j + 1));
    }
    OK(weft_sync(e->dev, 0));
    OK(weft_sync(e->dev, 1));
  }
}

Test(zero_alloc, ten_thousand_launches_over_two_streams_allocate_nothing_once_warm,
     .timeout = 120) {
  cenv e = cenv_new();
  enum { N = 256, BATCHES = 100 };
  weft_buffer b0 = make_buffer(e.dev, 0, N * 4), b1 = make_buffer(e.dev, 1, N * 4);
  /* Warm-up: both streams held behind a 100 ms kernel while 6 batches queue
   * up behind it (the pools grow past what the measure keeps in flight:
   * batches of 100 with a sync), then the measured workload itself once. */
  spin(&e, 0, 100000);
  spin(&e, 1, 100000);
  for (int j = 0; j < 150; j++) {
    noop(&e, 0);
    fill(&e, 0, b0, N, 0.0f);
    noop(&e, 1);
    fill(&e, 1, b1, N, 0.0f);
  }
  OK(weft_sync(e.dev, 0));
  OK(weft_sync(e.dev, 1));
  noop_fill_rounds(&e, b0, b1, N, BATCHES);
  weft_device_stats before = stats_of(e.dev);
  weft_alloc_counts ca0 = weft_counting_allocator_counts(e.ca);
  uint64_t driver_allocs = fstat("mem_alloc_calls"), kernels = fstat("kernels_run");
  noop_fill_rounds(&e, b0, b1, N, BATCHES);
  weft_alloc_counts ca1 = weft_counting_allocator_counts(e.ca);
  weft_device_stats after = stats_of(e.dev);
  cr_assert_eq(ca1.allocs, ca0.allocs, "%" PRIu64 " allocations over 10000 launches once warm",
               ca1.allocs - ca0.allocs);
  cr_assert_eq(after.launches - before.launches, 100 * BATCHES, "%" PRIu64 " launches accepted",
               after.launches - before.launches);
  cr_assert_eq(after.launches_failed + after.launches_skipped, 0,
               "%" PRIu64 " failed, %" PRIu64 " skipped", after.launches_failed,
               after.launches_skipped);
  cr_assert_eq(after.gpu_events_created, before.gpu_events_created);
  if (is_fake) {
    cr_assert_eq(fstat("mem_alloc_calls"), driver_allocs, "cuMemAlloc on the launch path");
    cr_assert_eq(fstat("kernels_run") - kernels, 100 * BATCHES);
  }
  expect_all(&e, 2, b0, 0, N, 24.0f, "the last fill of b0");
  expect_all(&e, 2, b1, 0, N, 25.0f, "the last fill of b1");
  cenv_close(&e);
}

/* ---- task graphs -------------------------------------------------------------------------- */

/* a = 1; b = 2; c = a + b; d = 10; d = 3c + d (19). With |g|: added to the
 * graph; otherwise launched eagerly on stream |s|. */
static void dag(cenv *e, weft_taskgraph *g, weft_stream_id s, const weft_buffer v[4], uint32_t n) {
  uint32_t gr[3], bl[3];
  geometry(n, gr, bl);
  fill_args f1 = {1.0f, n}, f2 = {2.0f, n}, f10 = {10.0f, n};
  add_args aa = {n};
  axpy_args ax = {3.0f, n};
  uint64_t bytes = (uint64_t)n * 4;
  weft_binding wa = {v[0], 0, bytes, WEFT_WRITE}, wb = {v[1], 0, bytes, WEFT_WRITE},
               wd = {v[3], 0, bytes, WEFT_WRITE};
  weft_binding add[3] = {
      {v[0], 0, bytes, WEFT_READ}, {v[1], 0, bytes, WEFT_READ}, {v[2], 0, bytes, WEFT_WRITE}};
  weft_binding ax2[2] = {{v[2], 0, bytes, WEFT_READ}, {v[3], 0, bytes, WEFT_READ_WRITE}};
  struct {
    weft_kernel k;
    const weft_binding *b;
    size_t nb;
    const void *sc;
    size_t bytes;
  } nodes[5] = {{e->k.fill, &wa, 1, &f1, sizeof(f1)},
                {e->k.fill, &wb, 1, &f2, sizeof(f2)},
                {e->k.add, add, 3, &aa, sizeof(aa)},
                {e->k.fill, &wd, 1, &f10, sizeof(f10)},
                {e->k.axpy, ax2, 2, &ax, sizeof(ax)}};
  for (int i = 0; i < 5; i++) {
    if (g)
      OK(weft_taskgraph_add_launch(g, nodes[i].k, gr, bl, nodes[i].b, nodes[i].nb, nodes[i].sc,
                                   nodes[i].bytes, NULL));
    else
      OK(weft_launch(e->dev, s, nodes[i].k, gr, bl, nodes[i].b, nodes[i].nb, nodes[i].sc,
                     nodes[i].bytes));
  }
}

Test(taskgraph, a_small_dag_submitted_twice_gives_what_eager_launches_give, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 14 };
  weft_buffer g[4], f[4];
  for (int i = 0; i < 4; i++) {
    g[i] = make_buffer(e.dev, 0, N * 4);
    f[i] = make_buffer(e.dev, 1, N * 4);
  }
  weft_taskgraph *tg;
  OK(weft_taskgraph_create(e.dev, &tg));
  dag(&e, tg, 0, g, N);
  cr_assert_eq(weft_taskgraph_node_count(tg), 5);
  cr_assert_gt(weft_taskgraph_lane_count(tg), 1, "independent chains share one lane");
  dag(&e, NULL, 1, f, N);
  const float want[4] = {1.0f, 2.0f, 3.0f, 19.0f};
  for (int i = 0; i < 4; i++) expect_all(&e, 2, f[i], 0, N, want[i], "eager");
  for (int run = 0; run < 2; run++) {
    for (int i = 0; i < 4; i++) fill(&e, 3, g[i], N, -7.0f); /* nothing left from before */
    OK(weft_taskgraph_submit(tg, (weft_stream_id)run));
    for (int i = 0; i < 4; i++) {
      float *gv = read_f32(&e, 3, g[i], 0, N), *fv = read_f32(&e, 3, f[i], 0, N);
      cr_assert_arr_eq(gv, fv, N * 4, "run %d, buffer %d differs from eager", run, i);
      free(gv);
      free(fv);
    }
  }
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed + s.launches_skipped, 0);
  weft_taskgraph_destroy(tg);
  cenv_close(&e);
}

/* ---- events, read_async, imported memory (issue 15) ---- */

Test(events, a_record_completes_once_the_gpu_work_before_it_retires_and_orders_another_stream,
     .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 12 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4), c = make_buffer(e.dev, 1, N * 4);
  fill(&e, 0, a, N, 3.0f);
  weft_event ev;
  OK(weft_event_record(e.dev, 0, &ev));
  OK(weft_stream_wait_event(e.dev, 1, ev));
  fill(&e, 1, c, N, 4.0f);
  OK(weft_event_wait(e.dev, ev, UINT64_MAX));
  bool done = false;
  OK(weft_event_query(e.dev, ev, &done));
  cr_assert(done);
  expect_all(&e, 1, c, 0, N, 4.0f, "the stream ordered after the event");
  expect_all(&e, 0, a, 0, N, 3.0f, "the stream the event was recorded on");
  OK(weft_event_release(e.dev, ev));
  cenv_close(&e);
}

Test(events, read_async_delivers_at_retirement_and_a_failed_read_leaves_dst_untouched,
     .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 12 };
  weft_buffer a = make_buffer(e.dev, 0, N * 4);
  fill(&e, 0, a, N, 1.5f);
  float *dst = malloc(N * 4);
  cr_assert_not_null(dst);
  weft_event ev;
  OK(weft_buffer_read_async(e.dev, 0, a, 0, dst, N * 4, &ev));
  OK(weft_event_wait(e.dev, ev, UINT64_MAX));
  for (uint32_t i = 0; i < N; i++) cr_assert_eq(dst[i], 1.5f, "dst[%u]", i);
  OK(weft_event_release(e.dev, ev));
  OK(weft_device_set_failpoints(e.dev, "kernel:weft_fill_f32=Generic"));
  fill(&e, 0, a, N, 9.0f); /* fails: the bytes are left unwritten */
  memset(dst, 0x7f, N * 4);
  OK(weft_buffer_read_async(e.dev, 0, a, 0, dst, N * 4, &ev));
  weft_status st = weft_event_wait(e.dev, ev, UINT64_MAX);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_error_free(st);
  for (uint32_t i = 0; i < N; i++)
    cr_assert_eq(((uint8_t *)dst)[i], 0x7f, "a failed read wrote dst byte %u", i);
  OK(weft_event_release(e.dev, ev));
  free(dst);
  cenv_close(&e);
}

static void count_release(void *user) {
  atomic_fetch_add((_Atomic int *)user, 1);
}

Test(import, a_wrapped_device_pointer_is_used_in_place_and_released_once, .timeout = 60) {
  cenv e = cenv_new();
  enum { N = 1 << 12 };
  weft_buffer owner = make_buffer(e.dev, 0, N * 4);
  uint64_t ptr = 0;
  OK(weft_buffer_address(e.dev, owner, &ptr));
  cr_assert_neq(ptr, 0);
  _Atomic int released = 0;
  weft_buffer wrap;
  OK(weft_buffer_import(e.dev, 1, ptr, N * 4, count_release, &released, &wrap));
  uint64_t again = 0;
  OK(weft_buffer_address(e.dev, wrap, &again));
  cr_assert_eq(again, ptr);
  fill(&e, 1, wrap, N, 6.0f);
  OK(weft_sync(e.dev, 1));
  expect_all(&e, 0, owner, 0, N, 6.0f, "the kernel wrote the wrapped CUdeviceptr");
  weft_memory_usage u = {0};
  OK(weft_memory_usage_get(e.dev, &u));
  cr_assert_eq(u.number_allocs, 1, "the import counted in a pool");
  OK(weft_buffer_release(e.dev, wrap));
  OK(weft_sync(e.dev, 1));
  OK(weft_device_stats_get(e.dev, &(weft_device_stats){0}));
  cr_assert_eq(atomic_load(&released), 1);
  cenv_close(&e);
  cr_assert_eq(atomic_load(&released), 1);
}

/* ---- the trace: device time and NVTX ranges ------------------------------------------------ */

/* |e|'s trace of: 3 launches (fill, vec_add, axpy) on stream 0, then
 * |more| fills on stream 1 with a sync every 100; the file at |path|. */
static void traced_run(cenv *e, uint32_t more, const char *path) {
  enum { N = 1 << 12 };
  weft_buffer x = make_buffer(e->dev, 0, N * 4), y = make_buffer(e->dev, 0, N * 4),
              z = make_buffer(e->dev, 0, N * 4), w = make_buffer(e->dev, 1, N * 4);
  float *host = malloc(N * 4), *want = malloc(N * 4);
  cr_assert(host && want);
  for (uint32_t i = 0; i < N; i++) host[i] = (float)(i % 100);
  OK(weft_buffer_write(e->dev, 0, x, 0, host, N * 4));
  OK(weft_trace_begin(e->dev, 0));
  fill(e, 0, y, N, 0.5f);
  vec_add(e, 0, x, y, z, N); /* z = x + 0.5 */
  axpy(e, 0, 2.0f, x, z, N); /* z = 3x + 0.5 */
  for (uint32_t i = 0; i < more; i++) {
    fill(e, 1, w, N, (float)i);
    if (i % 100 == 99) OK(weft_sync(e->dev, 1));
  }
  sync_all(e);
  OK(weft_trace_end(e->dev, path));
  for (uint32_t i = 0; i < N; i++) want[i] = 3.0f * host[i] + 0.5f;
  expect_floats(e, 2, z, want, N, "z = 3x + 0.5");
  if (more) expect_all(e, 1, w, 0, N, (float)(more - 1), "w = the last fill");
  free(host);
  free(want);
}

/* The launch events of the trace at |path|: how many, and how many carry a
 * device time (each checked: a number of milliseconds, not negative). */
static void launch_times(const char *path, size_t *launches, size_t *timed) {
  const char *err = NULL;
  jv *root = jv_parse_file(path, &err);
  cr_assert_not_null(root, "%s: %s", path, err ? err : "?");
  char why[256];
  const char *bad = trace_check(root, why, sizeof(why));
  cr_assert_null(bad, "%s breaks the trace-event format: %s", path, bad);
  const jv *evs = trace_events(root);
  *launches = *timed = 0;
  for (size_t i = 0; i < evs->n; i++) {
    const char *c = jv_str(evs->kids[i], "cat");
    if (!c || strcmp(c, "launch")) continue;
    (*launches)++;
    double ms = -1;
    if (!jv_num(jv_get(evs->kids[i], "args"), "device_ms", &ms)) continue;
    cr_assert_geq(ms, 0, "device time %f ms", ms);
    cr_assert_lt(ms, 60000, "device time %f ms", ms);
    (*timed)++;
  }
  jv_free(root);
}

static void trace_file(char *out, size_t cap, const char *what) {
  snprintf(out, cap, "%s/weft-cuda-trace-%d-%s.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid(), what);
}

Test(trace, every_traced_launch_carries_its_device_time_from_timing_events, .timeout = 60) {
  cenv e = cenv_new();
  char path[256];
  trace_file(path, sizeof(path), "time");
  /* 303 launches, past the 256 pairs a lane keeps: retirement frees them. */
  traced_run(&e, 300, path);
  size_t launches, timed;
  launch_times(path, &launches, &timed);
  cr_assert_eq(launches, 303);
  cr_assert_eq(timed, 303, "%zu of %zu launches have a device time", timed, launches);
  remove(path);
  /* A second recording reuses the pairs; between recordings, nothing is timed. */
  fill(&e, 0, make_buffer(e.dev, 0, 64), 16, 1.0f);
  traced_run(&e, 0, path);
  launch_times(path, &launches, &timed);
  cr_assert_eq(launches, 3);
  cr_assert_eq(timed, 3);
  remove(path);
  cenv_close(&e);
}

/* WEFT_NVTX=1: each launch's enqueue is an NVTX range. Without a tool's
 * injection library (here: a path that does not exist) NVTX does nothing,
 * and the device behaves as without it, traced or not. */
Test(trace, nvtx_ranges_on_change_nothing_the_device_does, .timeout = 60) {
  cr_assert_eq(setenv("WEFT_NVTX", "1", 1), 0);
  cr_assert_eq(setenv("NVTX_INJECTION64_PATH", "/nonexistent/libnvtx-tool.so", 1), 0);
  weft__config_reload();
  cr_assert(weft_config_nvtx());
  cenv e = cenv_new();
  char path[256];
  trace_file(path, sizeof(path), "nvtx");
  traced_run(&e, 50, path);
  size_t launches, timed;
  launch_times(path, &launches, &timed);
  cr_assert_eq(launches, 53);
  cr_assert_eq(timed, 53);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed + s.launches_skipped, 0);
  remove(path);
  cenv_close(&e);
  unsetenv("WEFT_NVTX");
  unsetenv("NVTX_INJECTION64_PATH");
  weft__config_reload();
}

#endif
