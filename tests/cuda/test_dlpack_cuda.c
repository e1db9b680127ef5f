/* DLPack on the CUDA backend (the fake driver, tests/fake_cuda): exports are
 * kDLCUDA tensors on the device's ordinal whose data is the CUdeviceptr,
 * imports take kDLCUDA tensors of that ordinal only (kDLCPU, another
 * ordinal: InvalidArgument, the deleter called once), an export imported
 * again aliases the bytes with no copy, a tainted range fails the export as
 * a read would, and an export outlives the buffer's release and the
 * device's close. */
#include <criterion/criterion.h>

#if !defined(FAKE_CUDA_PATH) || !defined(WEFT_HAVE_CUDA)
Test(cuda_dlpack, skipped_no_cuda) {
  cr_skip_test("weft or the fake driver was built without cuda.h: no CUDA backend to test");
}
#else

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/dlpack.h>
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
    cr_assert(strstr(text, needle) != NULL, "line %d: '%s' lacks '%s'", line, text, needle);
  weft_error_free(st);
}
#define EXPECT_KIND(kind, needle, call) expect_kind((call), (kind), (needle), __LINE__)

typedef struct cenv {
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_device *dev;
  weft_module mod;
  weft_kernel fill, fault;
} cenv;

static cenv cenv_new(void) {
  const char *path = driver_path();
  setenv("WEFT_CUDA_DRIVER", path, 1);
  fake_cuda_open(path);
  need_fake("the suite checks the fake's device memory");
  unsetenv("FAKE_CUDA_FAIL_INIT");
  unsetenv("FAKE_CUDA_DEVICES");
  unsetenv("FAKE_CUDA_MEMORY_BYTES");
  fake_reset();
  cenv e;
  memset(&e, 0, sizeof(e));
  OK(weft_counting_allocator_create(&e.ca));
  e.alloc = weft_counting_allocator_get(e.ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &e.alloc;
  o.backend = WEFT_BACKEND_CUDA;
  OK(weft_device_open(&o, &e.dev));
  OK(weft_module_load(e.dev, weft_test_kernels_ptx, weft_test_kernels_ptx_len, &e.mod));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_fill_f32", "b44", &e.fill));
  OK(weft_kernel_cuda(e.dev, e.mod, "weft_noop", "", &e.fault));
  return e;
}

static void cenv_close(cenv *e) {
  if (e->dev) weft_device_close(e->dev);
  e->dev = NULL;
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%llu blocks leaked", (unsigned long long)c.live_blocks);
  weft_counting_allocator_destroy(e->ca);
  cr_assert_eq(stat_of("live_allocations"), 0, "device memory left in the driver");
  ASSERT_NO_LEAKS();
}

static const DLDataType f32 = {.code = kDLFloat, .bits = 32, .lanes = 1};

/* weft_fill_f32(float *out, float value, unsigned n) over |n| floats of |b|. */
static void fill(cenv *e, weft_stream_id s, weft_buffer b, float v, uint32_t n) {
  const weft_binding bd = {.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = WEFT_WRITE};
  struct {
    float v;
    uint32_t n;
  } sc = {v, n};
  const uint32_t grid[3] = {(n + 255) / 256, 1, 1}, block[3] = {256, 1, 1};
  OK(weft_launch(e->dev, s, e->fill, grid, block, &bd, 1, &sc, sizeof(sc)));
}

static void expect_all(cenv *e, weft_stream_id s, weft_buffer b, float v, uint32_t n) {
  float *got = malloc(n * sizeof(float));
  OK(weft_buffer_read(e->dev, s, b, 0, got, n * sizeof(float)));
  for (uint32_t i = 0; i < n; i++) cr_assert_eq(got[i], v, "element %u: %g", i, (double)got[i]);
  free(got);
}

Test(cuda_dlpack, an_export_is_a_kdlcuda_tensor_on_the_ordinal_at_the_device_address,
     .timeout = 60) {
  cenv e = cenv_new();
  weft_buffer b;
  OK(weft_buffer_create(e.dev, 0, 1024 * sizeof(float), &b));
  fill(&e, 0, b, 3.0f, 1024);
  const int64_t shape[2] = {32, 32};
  DLManagedTensor *t = NULL;
  OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 2, &t));
  uint64_t addr = 0;
  OK(weft_buffer_address(e.dev, b, &addr));
  cr_assert_eq(t->dl_tensor.device.device_type, kDLCUDA);
  cr_assert_eq(t->dl_tensor.device.device_id, 0);
  cr_assert_eq((uint64_t)(uintptr_t)t->dl_tensor.data, addr, "the CUdeviceptr, no copy");
  /* The fake's device memory is host memory: the fill is visible in it. */
  cr_assert_eq(((const float *)t->dl_tensor.data)[1023], 3.0f);
  OK(weft_buffer_release(e.dev, b));
  t->deleter(t);
  cenv_close(&e);
}

Test(cuda_dlpack, an_export_imported_again_aliases_the_device_bytes, .timeout = 60) {
  cenv e = cenv_new();
  weft_buffer b;
  OK(weft_buffer_create(e.dev, 0, 256 * sizeof(float), &b));
  fill(&e, 0, b, 1.0f, 256);
  const int64_t shape[1] = {256};
  DLManagedTensor *t = NULL;
  OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 1, &t));
  weft_buffer alias;
  OK(weft_buffer_from_dlpack(e.dev, 1, t, &alias));
  fill(&e, 1, alias, 9.0f, 256);
  OK(weft_sync(e.dev, 1));
  expect_all(&e, 0, b, 9.0f, 256);
  OK(weft_buffer_release(e.dev, alias));
  OK(weft_buffer_release(e.dev, b));
  cenv_close(&e);
}

static _Atomic int host_deleted;
static void host_deleter(DLManagedTensor *self) {
  (void)self;
  atomic_fetch_add(&host_deleted, 1);
}

Test(cuda_dlpack, a_cpu_tensor_or_another_ordinal_is_refused_and_given_back, .timeout = 60) {
  cenv e = cenv_new();
  static float bytes[16];
  int64_t shape[1] = {16};
  const DLDevice devices[] = {{kDLCPU, 0}, {kDLCUDA, 1}, {kDLCUDAHost, 0}};
  const char *needles[] = {"kDLCPU", "kDLCUDA device 1", "kDLCUDAHost"};
  for (int i = 0; i < 3; i++) {
    atomic_store(&host_deleted, 0);
    DLManagedTensor t = {
        .dl_tensor = {.data = bytes, .device = devices[i], .ndim = 1, .dtype = f32, .shape = shape},
        .deleter = host_deleter};
    weft_buffer b;
    EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, needles[i], weft_buffer_from_dlpack(e.dev, 0, &t, &b));
    cr_assert_eq(atomic_load(&host_deleted), 1);
  }
  cenv_close(&e);
}

Test(cuda_dlpack, a_tainted_range_fails_the_export_and_an_export_outlives_close, .timeout = 60) {
  cenv e = cenv_new();
  OK(weft_device_set_failpoints(e.dev, "kernel:weft_fill_f32=Generic"));
  weft_buffer bad, good;
  OK(weft_buffer_create(e.dev, 0, 64 * sizeof(float), &bad));
  fill(&e, 0, bad, 2.0f, 64);
  const int64_t shape[1] = {64};
  DLManagedTensor *t = NULL;
  EXPECT_KIND(WEFT_ERR_SEVERAL, "weft_fill_f32",
              weft_buffer_to_dlpack(e.dev, 0, bad, 0, f32, shape, 1, &t));
  cr_assert_null(t);
  OK(weft_device_set_failpoints(e.dev, NULL));
  OK(weft_buffer_create(e.dev, 0, 64 * sizeof(float), &good));
  fill(&e, 0, good, 5.0f, 64);
  OK(weft_buffer_to_dlpack(e.dev, 0, good, 0, f32, shape, 1, &t));
  weft_device_close(e.dev); /* |good| never released; the export keeps it */
  e.dev = NULL;
  cr_assert_eq(((const float *)t->dl_tensor.data)[63], 5.0f, "the device bytes after close");
  cr_assert_gt(stat_of("live_allocations"), 0, "close left the exported memory");
  t->deleter(t);
  cenv_close(&e);
}

#endif
