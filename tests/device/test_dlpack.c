/* DLPack on the host backend (include/weft/dlpack.h), one behaviour per
 * test. In: a tensor becomes a buffer with no copy (address, byte_offset,
 * strides, ndim 0), its deleter runs exactly once, after the buffer's
 * release and the retirement of its work, at close, and at once on every
 * refusal and failed import. Out: an export is ordered after the work before
 * it, fails as a read would on a tainted range, checks its shape and range,
 * and keeps the memory alive past release and close until its deleter runs.
 * Every device runs on a counting allocator that must end with zero live
 * blocks (the exports' tensors included). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/dlpack.h>
#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

/* ---- helpers --------------------------------------------------------------------------- */

static const uint32_t one[3] = {1, 1, 1};
static const DLDataType f32 = {.code = kDLFloat, .bits = 32, .lanes = 1};

static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, int line) {
  char text[2048] = "Ok";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: got '%s', expected %s", line, text,
               weft_error_kind_name(kind));
  if (needle)
    cr_assert(strstr(text, needle) != NULL, "line %d: '%s' does not say '%s'", line, text, needle);
  weft_error_free(st);
}
#define EXPECT_KIND(kind, needle, call) expect_kind((call), (kind), (needle), __LINE__)

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* A producer's tensor: malloc'd bytes, a counting deleter that frees them. */
typedef struct tensor {
  DLManagedTensor mt;
  int64_t shape[4], strides[4];
  void *bytes;
  _Atomic int deleted;
} tensor;

static void tensor_deleter(DLManagedTensor *self) {
  tensor *t = self->manager_ctx;
  atomic_fetch_add(&t->deleted, 1);
  free(t->bytes);
  t->bytes = NULL;
}

/* A compact float tensor of |ndim| extents over |bytes| malloc'd bytes
 * (filled with 0..n-1 as floats), on kDLCPU. */
static void tensor_init(tensor *t, const int64_t *shape, int ndim, size_t bytes) {
  memset(t, 0, sizeof(*t));
  t->bytes = malloc(bytes);
  cr_assert_not_null(t->bytes);
  for (size_t i = 0; i < bytes / sizeof(float); i++) ((float *)t->bytes)[i] = (float)i;
  for (int i = 0; i < ndim; i++) t->shape[i] = shape[i];
  t->mt.dl_tensor = (DLTensor){.data = t->bytes,
                               .device = {kDLCPU, 0},
                               .ndim = ndim,
                               .dtype = f32,
                               .shape = t->shape,
                               .strides = NULL,
                               .byte_offset = 0};
  t->mt.manager_ctx = t;
  t->mt.deleter = tensor_deleter;
}

static int deleted(tensor *t) {
  return atomic_load(&t->deleted);
}

/* x[i] += 1 over the binding (float). */
static weft_status add_one(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  float *x = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0] / sizeof(float); i++) x[i] += 1.0f;
  return NULL;
}

/* Waits until *user is set (a test's gate), then x[i] += 1. */
static weft_status gated_add_one(const weft_kernel_ctx *ctx, void *user) {
  _Atomic int *gate = user;
  while (!atomic_load(gate)) sleep_ms(1);
  return add_one(ctx, NULL);
}

static weft_status refuse(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return weft_error_make(WEFT_ERR_GENERIC, "the kernel said no");
}

static void launch1(env *e, weft_kernel k, weft_buffer b, weft_access access) {
  const weft_binding bd = {.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = access};
  EXPECT_OK(weft_launch(e->dev, 0, k, one, one, &bd, 1, NULL, 0));
}

static weft_buffer make_buffer(env *e, uint64_t size) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e->dev, 0, size, &b));
  return b;
}

static void write_floats(env *e, weft_buffer b, uint32_t n) {
  float *v = malloc(n * sizeof(float));
  for (uint32_t i = 0; i < n; i++) v[i] = (float)i * 0.5f;
  EXPECT_OK(weft_buffer_write(e->dev, 0, b, 0, v, n * sizeof(float)));
  free(v);
}

/* ---- from_dlpack ----------------------------------------------------------------------- */

Test(from_dlpack, is_zero_copy_and_the_deleter_runs_once_after_release_and_retirement,
     .timeout = 60) {
  env e = env_new();
  tensor t;
  const int64_t shape[2] = {4, 8};
  tensor_init(&t, shape, 2, 32 * sizeof(float));
  void *data = t.bytes;
  weft_buffer b;
  EXPECT_OK(weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b));
  uint64_t addr = 0;
  EXPECT_OK(weft_buffer_address(e.dev, b, &addr));
  cr_assert_eq(addr, (uint64_t)(uintptr_t)data, "the buffer is the tensor's bytes");

  _Atomic int gate = 0;
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "gated_add_one", gated_add_one, (void *)&gate, &k));
  launch1(&e, k, b, WEFT_READ_WRITE);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  sleep_ms(20);
  cr_assert_eq(deleted(&t), 0, "the deleter ran while a kernel still used the bytes");
  atomic_store(&gate, 1);
  EXPECT_OK(weft_sync(e.dev, 0));
  for (int i = 0; i < 200 && deleted(&t) == 0; i++) sleep_ms(5);
  cr_assert_eq(deleted(&t), 1, "the deleter runs once the work retired");
  env_close(&e);
  cr_assert_eq(deleted(&t), 1, "and only once");
}

Test(from_dlpack, the_kernel_sees_the_tensor_and_the_tensor_sees_the_kernel, .timeout = 60) {
  env e = env_new();
  tensor t;
  const int64_t shape[1] = {64};
  tensor_init(&t, shape, 1, 64 * sizeof(float));
  float *x = t.bytes;
  weft_buffer b;
  EXPECT_OK(weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b));
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "add_one", add_one, NULL, &k));
  launch1(&e, k, b, WEFT_READ_WRITE);
  float got[64];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, got, sizeof(got)));
  for (int i = 0; i < 64; i++) {
    cr_assert_eq(got[i], (float)i + 1.0f);
    cr_assert_eq(x[i], (float)i + 1.0f, "the kernel wrote the tensor's own bytes");
  }
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
  cr_assert_eq(deleted(&t), 1);
}

Test(from_dlpack, byte_offset_moves_the_start_and_the_size_is_the_tensors, .timeout = 60) {
  env e = env_new();
  tensor t;
  const int64_t shape[1] = {16};
  tensor_init(&t, shape, 1, 32 * sizeof(float));
  t.mt.dl_tensor.byte_offset = 8 * sizeof(float);
  weft_buffer b;
  EXPECT_OK(weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b));
  uint64_t addr = 0;
  EXPECT_OK(weft_buffer_address(e.dev, b, &addr));
  cr_assert_eq(addr, (uint64_t)(uintptr_t)t.bytes + 8 * sizeof(float));
  float got[16];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, got, sizeof(got)));
  for (int i = 0; i < 16; i++) cr_assert_eq(got[i], (float)(i + 8));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, NULL,
              weft_buffer_read(e.dev, 0, b, 0, got, sizeof(got) + 4)); /* 16 floats, no more */
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
  cr_assert_eq(deleted(&t), 1);
}

Test(from_dlpack, compact_strides_and_unit_extents_are_accepted, .timeout = 60) {
  env e = env_new();
  const int64_t shape[3] = {2, 1, 3};
  const int64_t strides[][3] = {{3, 3, 1}, {3, 77, 1}}; /* extent 1: any stride */
  for (int i = 0; i < 2; i++) {
    tensor t;
    tensor_init(&t, shape, 3, 6 * sizeof(float));
    memcpy(t.strides, strides[i], sizeof(strides[i]));
    t.mt.dl_tensor.strides = t.strides;
    weft_buffer b;
    EXPECT_OK(weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b));
    float got[6];
    EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, got, sizeof(got)));
    cr_assert_eq(got[5], 5.0f);
    EXPECT_OK(weft_buffer_release(e.dev, b));
    EXPECT_OK(weft_sync(e.dev, 0));
    for (int k = 0; k < 200 && deleted(&t) == 0; k++) sleep_ms(5);
    cr_assert_eq(deleted(&t), 1);
  }
  env_close(&e);
}

Test(from_dlpack, a_scalar_and_vector_lanes_size_as_dlpack_says, .timeout = 60) {
  env e = env_new();
  tensor t;
  tensor_init(&t, NULL, 0, 16);
  t.mt.dl_tensor.shape = NULL; /* ndim 0: one element */
  t.mt.dl_tensor.dtype = (DLDataType){.code = kDLFloat, .bits = 32, .lanes = 4};
  weft_buffer b;
  EXPECT_OK(weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b));
  float got[4];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, got, 16));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, NULL, weft_buffer_read(e.dev, 0, b, 0, got, 17));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
  cr_assert_eq(deleted(&t), 1);
}

Test(from_dlpack, a_non_compact_tensor_is_unsupported_strides_and_goes_back_at_once) {
  env e = env_new();
  const int64_t shape[2] = {4, 4};
  const int64_t strides[][2] = {{1, 4}, {8, 1}, {4, 2}}; /* transposed, padded rows, strided */
  for (int i = 0; i < 3; i++) {
    tensor t;
    tensor_init(&t, shape, 2, 64 * sizeof(float));
    memcpy(t.strides, strides[i], sizeof(strides[i]));
    t.mt.dl_tensor.strides = t.strides;
    weft_buffer b = {.id = 77};
    EXPECT_KIND(WEFT_ERR_UNSUPPORTED_STRIDES, "compact",
                weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b));
    cr_assert_eq(b.id, 0, "*out is cleared on failure");
    cr_assert_eq(deleted(&t), 1, "a refused tensor is given back before the call returns");
  }
  env_close(&e);
}

/* Each malformed tensor: InvalidArgument naming the problem, deleter once. */
Test(from_dlpack, malformed_tensors_are_invalid_argument_and_go_back_at_once) {
  env e = env_new();
  const int64_t shape[2] = {4, 4};
  const struct {
    const char *what, *needle;
  } cases[] = {
      {"a CUDA tensor on the host backend", "kDLCUDA"},
      {"an OpenCL tensor", "kDLOpenCL"},
      {"a negative extent", "negative"},
      {"ndim < 0", "ndim"},
      {"NULL shape with ndim 2", "shape is NULL"},
      {"0 bits", "bits"},
      {"0 lanes", "lanes"},
      {"a size that overflows", "overflows"},
      {"a size above WEFT_MAX_BUFFER_SIZE", "WEFT_MAX_BUFFER_SIZE"},
      {"an empty tensor", "empty"},
      {"NULL data", "data is NULL"},
      {"data + byte_offset overflows", "byte_offset"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    tensor t;
    tensor_init(&t, shape, 2, 16 * sizeof(float));
    DLTensor *d = &t.mt.dl_tensor;
    void *keep_bytes = t.bytes;
    switch (i) {
    case 0:
      d->device = (DLDevice){kDLCUDA, 0};
      break;
    case 1:
      d->device = (DLDevice){kDLOpenCL, 0};
      break;
    case 2:
      t.shape[1] = -4;
      break;
    case 3:
      d->ndim = -1;
      break;
    case 4:
      d->shape = NULL;
      break;
    case 5:
      d->dtype.bits = 0;
      break;
    case 6:
      d->dtype.lanes = 0;
      break;
    case 7:
      t.shape[0] = t.shape[1] = INT64_C(1) << 40;
      break;
    case 8:
      t.shape[0] = INT64_C(1) << 24, t.shape[1] = INT64_C(1) << 24;
      break;
    case 9:
      t.shape[0] = 0;
      break;
    case 10:
      d->data = NULL;
      break;
    case 11:
      d->byte_offset = UINT64_MAX - 8;
      break;
    }
    weft_buffer b;
    EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, cases[i].needle,
                weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b));
    cr_assert_eq(deleted(&t), 1, "%s: the deleter ran %d times", cases[i].what, deleted(&t));
    cr_assert_null(t.bytes, "%s", cases[i].what);
    (void)keep_bytes;
  }
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.buffers_live, 0, "no refused tensor left a buffer");
  env_close(&e);
}

Test(from_dlpack, null_arguments_are_invalid_argument_and_the_tensor_goes_back) {
  env e = env_new();
  const int64_t shape[1] = {4};
  weft_buffer b;
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "tensor", weft_buffer_from_dlpack(e.dev, 0, NULL, &b));
  tensor t;
  tensor_init(&t, shape, 1, 16);
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "out", weft_buffer_from_dlpack(e.dev, 0, &t.mt, NULL));
  cr_assert_eq(deleted(&t), 1);
  tensor_init(&t, shape, 1, 16);
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, NULL, weft_buffer_from_dlpack(NULL, 0, &t.mt, &b));
  cr_assert_eq(deleted(&t), 1);
  tensor_init(&t, shape, 1, 16);
  t.mt.deleter = NULL; /* DLPack allows a tensor without one */
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "out", weft_buffer_from_dlpack(e.dev, 0, &t.mt, NULL));
  free(t.bytes);
  env_close(&e);
}

Test(from_dlpack, a_failed_import_calls_the_deleter_once, .timeout = 60) {
  env e = env_new();
  const int64_t shape[1] = {4};
  uint32_t failures = 0;
  for (uint64_t k = 1; k < 64; k++) { /* the kth allocation of the import fails */
    tensor t;
    tensor_init(&t, shape, 1, 16);
    weft_counting_allocator_fail_at(e.ca, k);
    weft_buffer b;
    weft_status st = weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b);
    weft_counting_allocator_fail_at(e.ca, 0);
    if (!st) {
      EXPECT_OK(weft_buffer_release(e.dev, b));
      EXPECT_OK(weft_sync(e.dev, 0));
      for (int i = 0; i < 200 && deleted(&t) == 0; i++) sleep_ms(5);
      cr_assert_eq(deleted(&t), 1);
      break;
    }
    failures++;
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY, "%s",
                 weft_error_kind_name(weft_error_kind_of(st)));
    weft_error_free(st);
    cr_assert_eq(deleted(&t), 1, "allocation %" PRIu64 " failed: the deleter ran %d times", k,
                 deleted(&t));
  }
  cr_assert_gt(failures, 0, "no allocation of the import could be made to fail");
  env_close(&e);
}

Test(from_dlpack, close_gives_back_a_tensor_never_released, .timeout = 60) {
  env e = env_new();
  tensor t;
  const int64_t shape[1] = {256};
  tensor_init(&t, shape, 1, 1024);
  weft_buffer b;
  EXPECT_OK(weft_buffer_from_dlpack(e.dev, 0, &t.mt, &b));
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "add_one", add_one, NULL, &k));
  launch1(&e, k, b, WEFT_READ_WRITE);
  env_close(&e);
  cr_assert_eq(deleted(&t), 1);
}

/* ---- to_dlpack ------------------------------------------------------------------------- */

Test(to_dlpack, exports_after_the_work_before_it_with_no_copy, .timeout = 60) {
  env e = env_new();
  weft_buffer b = make_buffer(&e, 64 * sizeof(float));
  write_floats(&e, b, 64);
  _Atomic int gate = 0;
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "gated_add_one", gated_add_one, (void *)&gate, &k));
  launch1(&e, k, b, WEFT_READ_WRITE);
  atomic_store(&gate, 1); /* the export must wait for it */
  int64_t shape[2] = {8, 8};
  DLManagedTensor *t = NULL;
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 2, &t));
  cr_assert_not_null(t);
  shape[0] = shape[1] = 99; /* the export keeps its own copy */
  uint64_t addr = 0;
  EXPECT_OK(weft_buffer_address(e.dev, b, &addr));
  const DLTensor *d = &t->dl_tensor;
  cr_assert_eq((uint64_t)(uintptr_t)d->data, addr, "no copy: the buffer's bytes");
  cr_assert_eq(d->device.device_type, kDLCPU);
  cr_assert_eq(d->ndim, 2);
  cr_assert_eq(d->shape[0], 8);
  cr_assert_eq(d->shape[1], 8);
  cr_assert_null(d->strides, "compact");
  cr_assert_eq(d->byte_offset, 0);
  cr_assert_eq(d->dtype.code, kDLFloat);
  cr_assert_eq(d->dtype.bits, 32);
  const float *v = d->data;
  for (int i = 0; i < 64; i++) cr_assert_eq(v[i], (float)i * 0.5f + 1.0f, "element %d", i);
  t->deleter(t);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(to_dlpack, an_offset_exports_from_there_and_a_scalar_has_ndim_0, .timeout = 60) {
  env e = env_new();
  weft_buffer b = make_buffer(&e, 64 * sizeof(float));
  write_floats(&e, b, 64);
  DLManagedTensor *t = NULL;
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 63 * sizeof(float), f32, NULL, 0, &t));
  cr_assert_eq(t->dl_tensor.ndim, 0);
  cr_assert_eq(*(const float *)t->dl_tensor.data, 31.5f);
  DLManagedTensor *u = NULL;
  const int64_t shape[1] = {4};
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 8 * sizeof(float), f32, shape, 1, &u));
  cr_assert_eq(((const float *)u->dl_tensor.data)[0], 4.0f);
  u->deleter(u);
  t->deleter(t);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(to_dlpack, a_tainted_range_fails_as_a_read_would, .timeout = 60) {
  env e = env_new();
  weft_buffer b = make_buffer(&e, 64 * sizeof(float));
  write_floats(&e, b, 64);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "refuse", refuse, NULL, &k));
  const weft_binding bd = {
      .buffer = b, .offset = 0, .size = 32 * sizeof(float), .access = WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, k, one, one, &bd, 1, NULL, 0));
  const int64_t shape[1] = {64};
  DLManagedTensor *t = (DLManagedTensor *)&e;
  weft_status st = weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 1, &t);
  cr_assert_null(t, "*out is NULL on failure");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN);
  cr_assert_str_eq(weft_error_message(weft_error_root(u)), "the kernel said no");
  cr_assert(strstr(weft_error_origin(u), "refuse") != NULL, "%s", weft_error_origin(u));
  weft_error_free(st);
  /* The untainted half still exports. */
  const int64_t half[1] = {32};
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 32 * sizeof(float), f32, half, 1, &t));
  cr_assert_eq(((const float *)t->dl_tensor.data)[0], 16.0f);
  t->deleter(t);
  /* A failpoint on the kernel taints as well. */
  EXPECT_OK(weft_device_set_failpoints(e.dev, "kernel:add_one=Generic"));
  weft_kernel a;
  EXPECT_OK(weft_kernel_host(e.dev, "add_one", add_one, NULL, &a));
  weft_buffer c = make_buffer(&e, 16);
  launch1(&e, a, c, WEFT_WRITE);
  const int64_t four[1] = {4};
  EXPECT_KIND(WEFT_ERR_SEVERAL, "add_one", weft_buffer_to_dlpack(e.dev, 0, c, 0, f32, four, 1, &t));
  cr_assert_null(t);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_buffer_release(e.dev, c));
  env_close(&e);
}

Test(to_dlpack, bad_shapes_ranges_and_handles_are_refused_and_nothing_is_kept) {
  env e = env_new();
  weft_buffer b = make_buffer(&e, 64);
  const int64_t ok[1] = {16}, neg[2] = {4, -1}, big[1] = {17},
                huge[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  DLManagedTensor *t = NULL;
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "negative",
              weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, neg, 2, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "ndim",
              weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, ok, -1, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "ndim",
              weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, ok, 33, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "shape is NULL",
              weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, NULL, 1, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "bits",
              weft_buffer_to_dlpack(e.dev, 0, b, 0, (DLDataType){kDLFloat, 0, 1}, ok, 1, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "overflows",
              weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, huge, 2, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, NULL,
              weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, big, 1, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, NULL,
              weft_buffer_to_dlpack(e.dev, 0, b, 4, f32, ok, 1, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, NULL,
              weft_buffer_to_dlpack(e.dev, 0, b, UINT64_MAX - 2, f32, ok, 1, &t));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, "out",
              weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, ok, 1, NULL));
  EXPECT_KIND(WEFT_ERR_INVALID_ARGUMENT, NULL,
              weft_buffer_to_dlpack(NULL, 0, b, 0, f32, ok, 1, &t));
  weft_buffer forged = {.id = b.id + 1000};
  EXPECT_KIND(WEFT_ERR_NOT_FOUND, NULL, weft_buffer_to_dlpack(e.dev, 0, forged, 0, f32, ok, 1, &t));
  cr_assert_null(t);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_KIND(WEFT_ERR_NOT_FOUND, NULL, weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, ok, 1, &t));
  env_close(&e);
}

Test(to_dlpack, the_export_outlives_the_buffers_release, .timeout = 60) {
  env e = env_new();
  weft_buffer b = make_buffer(&e, 64 * sizeof(float));
  write_floats(&e, b, 64);
  const int64_t shape[1] = {64};
  DLManagedTensor *t = NULL;
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 1, &t));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_sync(e.dev, 0));
  /* Other buffers come and go; the exported bytes stay. */
  for (int i = 0; i < 8; i++) {
    weft_buffer o = make_buffer(&e, 64 * sizeof(float));
    EXPECT_OK(weft_buffer_write(e.dev, 0, o, 0, (float[4]){-1, -1, -1, -1}, 16));
    EXPECT_OK(weft_buffer_release(e.dev, o));
  }
  EXPECT_OK(weft_memory_cleanup(e.dev, 0));
  const float *v = t->dl_tensor.data;
  for (int i = 0; i < 64; i++) cr_assert_eq(v[i], (float)i * 0.5f);
  t->deleter(t);
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.buffers_live, 0, "the deleter let the released buffer go");
  env_close(&e);
}

Test(to_dlpack, the_deleter_works_after_close_and_frees_everything, .timeout = 60) {
  env e = env_new();
  weft_buffer b = make_buffer(&e, 64 * sizeof(float));
  write_floats(&e, b, 64);
  const int64_t shape[1] = {64};
  DLManagedTensor *t = NULL, *u = NULL;
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 1, &t));
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 1, &u));
  weft_device_close(e.dev); /* b never released; two exports live */
  e.dev = NULL;
  const float *v = t->dl_tensor.data;
  for (int i = 0; i < 64; i++) cr_assert_eq(v[i], (float)i * 0.5f, "exported bytes after close");
  weft_alloc_counts c = weft_counting_allocator_counts(e.ca);
  cr_assert_gt(c.live_blocks, 0, "close keeps exported memory");
  t->deleter(t);
  cr_assert_eq(((const float *)u->dl_tensor.data)[63], 31.5f, "the other export still holds it");
  u->deleter(u);
  env_close(&e); /* every block is back */
}

Test(to_dlpack, an_export_imported_again_round_trips_with_each_deleter_once, .timeout = 60) {
  env e = env_new();
  weft_buffer b = make_buffer(&e, 16 * sizeof(float));
  write_floats(&e, b, 16);
  const int64_t shape[1] = {16};
  DLManagedTensor *t = NULL;
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 1, &t));
  weft_buffer alias;
  EXPECT_OK(weft_buffer_from_dlpack(e.dev, 1, t, &alias)); /* weft's deleter now weft's */
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "add_one", add_one, NULL, &k));
  const weft_binding bd = {
      .buffer = alias, .offset = 0, .size = WEFT_WHOLE, .access = WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(e.dev, 1, k, one, one, &bd, 1, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 1));
  float got[16];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, got, sizeof(got)));
  for (int i = 0; i < 16; i++) cr_assert_eq(got[i], (float)i * 0.5f + 1.0f);
  EXPECT_OK(weft_buffer_release(e.dev, alias)); /* its release runs the export's deleter */
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

/* The same round trip left to close: close frees the import, whose release
 * is the export's deleter, while the export still pins the buffer it
 * exported. Nothing may leak (env_close counts every block). */
Test(to_dlpack, an_export_imported_again_and_left_to_close_frees_everything, .timeout = 60) {
  env e = env_new();
  weft_buffer b = make_buffer(&e, 16 * sizeof(float));
  write_floats(&e, b, 16);
  const int64_t shape[1] = {16};
  DLManagedTensor *t = NULL;
  EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 1, &t));
  weft_buffer alias;
  EXPECT_OK(weft_buffer_from_dlpack(e.dev, 1, t, &alias));
  env_close(&e); /* neither b nor alias released */
}

/* Both released first, in either order, then close. */
Test(to_dlpack, an_export_imported_again_released_in_either_order_frees_everything, .timeout = 60) {
  for (int order = 0; order < 2; order++) {
    env e = env_new();
    weft_buffer b = make_buffer(&e, 16 * sizeof(float));
    write_floats(&e, b, 16);
    const int64_t shape[1] = {16};
    DLManagedTensor *t = NULL;
    EXPECT_OK(weft_buffer_to_dlpack(e.dev, 0, b, 0, f32, shape, 1, &t));
    weft_buffer alias;
    EXPECT_OK(weft_buffer_from_dlpack(e.dev, 1, t, &alias));
    EXPECT_OK(weft_buffer_release(e.dev, order ? b : alias));
    EXPECT_OK(weft_buffer_release(e.dev, order ? alias : b));
    env_close(&e);
  }
}
