/* The CUDA backend's building blocks (streams/cuda)
 * against the fake driver (tests/fake_cuda; CTest points WEFT_CUDA_DRIVER
 * at it). With WEFT_CUDA_DRIVER=libcuda.so.1 the same suite runs against a
 * real driver: the tests that need the fake's control API (fake_cuda_reset,
 * fault injection, counters, its memory cap) skip there, saying so. */
#include <criterion/criterion.h>

#if !defined(FAKE_CUDA_PATH) || !defined(WEFT_HAVE_CUDA)
Test(cuda_backend, skipped_no_cuda) {
  cr_skip_test("weft or the fake driver was built without cuda.h (WEFT_WITH_CUDA=OFF or no "
               "toolkit): no CUDA backend to test");
}
#else

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "streams/cuda/driver.h"
#include "streams/cuda/errors.h"
#include "core/error.h"
#include "fake_cuda_control.h"
#include "streams/cuda/storage_cuda.h"
#include "streams/cuda/stream_cuda.h"
#include "support/asan_criterion.h"
#include "support/fake_cuda_fixture.h"
#include "weft_test_kernels_ptx.h"

/* ---- fixture ------------------------------------------------------------------------------ */

static weft_cuda_driver drv;
static weft_allocator alloc;

/* Loads the driver (skips the test when there is none) and resets the fake. */
static void load(void) {
  alloc = weft_allocator_libc();
  const char *path = driver_path();
  fake_cuda_open(path);
  if (is_fake) fake_reset();
  weft_status st = weft_cuda_driver_open(&drv, path, 0);
  cr_assert_null(st, "load %s: %s", path, weft_error_message(st));
}

static uint64_t stat(const char *name) {
  return is_fake ? stat_of(name) : 0;
}

/* The context on ordinal 0, or a skip when the driver has no usable device. */
static weft_cuda_context *open_context(void) {
  weft_cuda_context *c = NULL;
  weft_status st = weft_cuda_context_create(&alloc, &drv, 0, &c);
  if (st && !is_fake) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", weft_error_message(st));
    weft_error_free(st);
    cr_skip_test("no usable CUDA device: %s", msg);
  }
  cr_assert_null(st, "context: %s", weft_error_message(st));
  return c;
}

#define OK(expr)                                                                                   \
  do {                                                                                             \
    weft_status st_ = (expr);                                                                      \
    cr_assert_null(st_, "%s: %s", #expr, weft_error_message(st_));                                 \
  } while (0)

/* Checks |st| is an error of |kind| whose message contains |needle|; frees it. */
static void expect(weft_status st, weft_error_kind kind, const char *needle) {
  cr_assert_not_null(st, "expected %s", weft_error_kind_name(kind));
  cr_assert_eq(weft_error_kind_of(st), kind, "kind %s, expected %s: %s",
               weft_error_kind_name(weft_error_kind_of(st)), weft_error_kind_name(kind),
               weft_error_message(st));
  if (needle)
    cr_assert(strstr(weft_error_message(st), needle), "\"%s\" lacks \"%s\"", weft_error_message(st),
              needle);
  weft_error_free(st);
}

/* Everything the fake tracks is gone. */
static void expect_fake_clean(void) {
  if (!is_fake) return;
  const char *names[] = {"streams_live",     "events_live",      "modules_live",    "graphs_live",
                         "graph_execs_live", "live_allocations", "host_allocs_live"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    cr_assert_eq(stat(names[i]), 0, "%s = %llu", names[i], (unsigned long long)stat(names[i]));
}

static void finish(weft_cuda_context *c) {
  weft_cuda_context_destroy(c);
  if (is_fake) cr_assert_eq(stat("ctx_refs"), 0);
  weft_cuda_driver_unload(&drv);
  ASSERT_NO_LEAKS();
}

static weft_cuda_module *load_kernels(weft_cuda_context *c) {
  weft_cuda_module *m = NULL;
  OK(weft_cuda_module_load(c, weft_test_kernels_ptx, sizeof weft_test_kernels_ptx, &m));
  return m;
}

static const weft_cuda_dim3 one = {1, 1, 1};

/* ---- loader ------------------------------------------------------------------------------- */

Test(cuda_loader, resolves_every_entry_point_through_cuGetProcAddress) {
  load();
  size_t n;
  const weft_cuda_driver_symbol *syms = weft_cuda_driver_symbols(&n);
  cr_assert_geq(n, 46);
  for (size_t i = 0; i < n; i++) {
    void *p;
    memcpy(&p, (const char *)&drv + syms[i].offset, sizeof p);
    cr_assert(p || syms[i].optional, "%s unresolved", syms[i].name);
  }
  if (is_fake) {
    cr_assert_eq(drv.resolved_gpa, n, "%u of %zu through cuGetProcAddress", drv.resolved_gpa, n);
    cr_assert_eq(drv.resolved_dlsym, 0);
  } else {
    cr_assert_gt(drv.resolved_gpa, 0);
  }
  weft_cuda_driver_unload(&drv);
  cr_assert_null(drv.lib);
}

Test(cuda_loader, dlsym_fallback_finds_the_same_functions) {
  load();
  weft_cuda_driver alt;
  OK(weft_cuda_driver_open(&alt, driver_path(), WEFT_CUDA_LOAD_DLSYM_ONLY));
  size_t n;
  const weft_cuda_driver_symbol *syms = weft_cuda_driver_symbols(&n);
  cr_assert_eq(alt.resolved_gpa, 0);
  cr_assert_eq(alt.resolved_dlsym + 0u, (unsigned)n, "%u of %zu found by dlsym", alt.resolved_dlsym,
               n);
  for (size_t i = 0; i < n && is_fake; i++) {
    /* The fake hands out its exported functions: same ABI, same pointer. */
    void *a, *b;
    memcpy(&a, (const char *)&drv + syms[i].offset, sizeof a);
    memcpy(&b, (const char *)&alt + syms[i].offset, sizeof b);
    cr_assert_eq(a, b, "%s at ABI %d is not %s", syms[i].name, syms[i].version, syms[i].exported);
  }
  /* The fallback table works: initialise and count devices through it. */
  cr_assert_eq(alt.cuInit(0), CUDA_SUCCESS);
  int count = -1;
  cr_assert_eq(alt.cuDeviceGetCount(&count), CUDA_SUCCESS);
  cr_assert_geq(count, 1);
  weft_cuda_driver_unload(&alt);
  weft_cuda_driver_unload(&drv);
}

Test(cuda_loader, missing_driver_is_a_clear_unsupported_error) {
  const char *path = "/nonexistent/weft-test/libcuda.so.1";
  setenv("WEFT_CUDA_DRIVER", path, 1);
  weft_cuda_driver d;
  weft_status st = weft_cuda_driver_load(&d);
  cr_assert_null(d.lib);
  cr_assert(st && strstr(weft_error_message(st), "dlopen(\"/nonexistent/weft-test/libcuda.so.1\")"),
            "%s", weft_error_message(st));
  expect(st, WEFT_ERR_UNSUPPORTED_IO_OPERATION, path);
}

Test(cuda_loader, a_library_that_is_not_libcuda_is_refused) {
  weft_cuda_driver d;
  expect(weft_cuda_driver_open(&d, "libm.so.6", 0), WEFT_ERR_UNSUPPORTED_IO_OPERATION,
         "lacks cuInit");
  cr_assert_null(d.lib);
}

Test(cuda_loader, toolkit_stub_reports_itself) {
  const char *stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
  if (access(stub, R_OK) != 0) cr_skip_test("no toolkit stub at %s", stub);
  alloc = weft_allocator_libc();
  weft_cuda_driver d;
  weft_status st = weft_cuda_driver_open(&d, stub, 0);
  if (st) { /* a stub lacking an entry point is refused at load: also clear */
    expect(st, WEFT_ERR_UNSUPPORTED_IO_OPERATION, stub);
    return;
  }
  weft_cuda_context *c = NULL;
  st = weft_cuda_context_create(&alloc, &d, 0, &c);
  cr_assert_null(c);
  cr_assert(st && strstr(weft_error_message(st), "CUDA_ERROR_STUB_LIBRARY"), "%s",
            weft_error_message(st));
  expect(st, WEFT_ERR_UNSUPPORTED_IO_OPERATION, "toolkit stub");
  weft_cuda_driver_unload(&d);
}

Test(cuda_loader, no_device_when_init_fails) {
  load();
  need_fake("FAKE_CUDA_FAIL_INIT");
  setenv("FAKE_CUDA_FAIL_INIT", "1", 1);
  fake_reset();
  weft_cuda_context *c = NULL;
  weft_status st = weft_cuda_context_create(&alloc, &drv, 0, &c);
  cr_assert_null(c);
  cr_assert(st && strstr(weft_error_message(st), "CUDA_ERROR_NO_DEVICE"), "%s",
            weft_error_message(st));
  expect(st, WEFT_ERR_UNSUPPORTED_IO_OPERATION, "no CUDA-capable device");
  unsetenv("FAKE_CUDA_FAIL_INIT");
  setenv("FAKE_CUDA_DEVICES", "0", 1);
  fake_reset();
  expect(weft_cuda_context_create(&alloc, &drv, 0, &c), WEFT_ERR_UNSUPPORTED_IO_OPERATION,
         "0 devices");
  unsetenv("FAKE_CUDA_DEVICES");
  fake_reset();
  expect(weft_cuda_context_create(&alloc, &drv, 7, &c), WEFT_ERR_INVALID_ARGUMENT,
         "CUDA device 7 does not exist");
  weft_cuda_driver_unload(&drv);
}

/* ---- the error table ---------------------------------------------------------------------- */

static const struct {
  CUresult code;
  const char *name, *desc;
} all_results[] = {
#define X(name, desc) {name, #name, desc},
#include "fake_cuda_errors.inc"
#undef X
};

Test(cuda_errors, every_cuda_result_maps_to_a_kind_and_is_named) {
  load();
  size_t rows;
  weft_cuda_error_table(&rows);
  size_t n = sizeof all_results / sizeof all_results[0];
  cr_assert_eq(rows, n - 1, "the table has %zu rows, cuda.h %zu errors", rows, n - 1);
  for (size_t i = 0; i < n; i++) {
    CUresult r = all_results[i].code;
    cr_assert_str_eq(weft_cuda_result_name(r), all_results[i].name);
    if (r == CUDA_SUCCESS) {
      cr_assert_null(weft_cuda_error(&drv, r, "x"));
      cr_assert_eq(weft_cuda_error_kind(r, WEFT_CUDA_OP_ANY), WEFT_OK);
      continue;
    }
    for (int op = WEFT_CUDA_OP_ANY; op <= WEFT_CUDA_OP_LAUNCH; op++) {
      weft_error_kind k = weft_cuda_error_kind(r, (weft_cuda_op)op);
      cr_assert(weft__error_kind_is_valid(k), "%s -> %d", all_results[i].name, (int)k);
      cr_assert_eq(k == WEFT_ERR_DEVICE_POISONED, weft_cuda_is_sticky(r), "%s",
                   all_results[i].name);
    }
    /* Without a driver the table names it; through the driver the text follows. */
    char want[256];
    snprintf(want, sizeof want, "op(1): %s (%d)", all_results[i].name, (int)r);
    weft_status st = weft_cuda_error(NULL, r, "op(%d)", 1);
    cr_assert_eq(weft_error_kind_of(st), weft_cuda_error_kind(r, WEFT_CUDA_OP_ANY));
    cr_assert_str_eq(weft_error_message(st), want);
    weft_error_free(st);
    st = weft_cuda_error(&drv, r, "op(%d)", 1);
    cr_assert(strstr(weft_error_message(st), want) == weft_error_message(st), "%s",
              weft_error_message(st));
    if (is_fake) {
      char full[1024];
      snprintf(full, sizeof full, "%s: %s", want, all_results[i].desc);
      cr_assert_str_eq(weft_error_message(st), full);
    }
    weft_error_free(st);
  }
  weft_cuda_driver_unload(&drv);
  ASSERT_NO_LEAKS();
}

Test(cuda_errors, the_mappings_that_matter) {
  load();
  weft_status st = weft_cuda_error_ex(&drv, NULL, WEFT_CUDA_OP_ANY, CUDA_ERROR_OUT_OF_MEMORY,
                                      1048576, "cuMemAlloc(%d bytes)", 1048576);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(weft_error_size(st), 1048576);
  cr_assert(weft_error_may_succeed_after_reclaim(st));
  if (is_fake)
    cr_assert_str_eq(weft_error_message(st),
                     "cuMemAlloc(1048576 bytes): CUDA_ERROR_OUT_OF_MEMORY (2): out of memory");
  weft_error_free(st);

  cr_assert_eq(weft_cuda_error_kind(CUDA_ERROR_INVALID_VALUE, WEFT_CUDA_OP_ANY), WEFT_ERR_UNKNOWN);
  cr_assert_eq(weft_cuda_error_kind(CUDA_ERROR_INVALID_VALUE, WEFT_CUDA_OP_LAUNCH),
               WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES);
  cr_assert_eq(weft_cuda_error_kind(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, WEFT_CUDA_OP_ANY),
               WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES);
  st = weft_cuda_error_ex(&drv, NULL, WEFT_CUDA_OP_LAUNCH, CUDA_ERROR_INVALID_VALUE, 0, "launch");
  cr_assert(weft_error_is_refusal(st));
  weft_error_free(st);
  const struct {
    CUresult r;
    weft_error_kind k;
  } cases[] = {
      {CUDA_ERROR_INVALID_PTX, WEFT_ERR_LAUNCH_COMPILATION},
      {CUDA_ERROR_UNSUPPORTED_PTX_VERSION, WEFT_ERR_LAUNCH_COMPILATION},
      {CUDA_ERROR_NO_BINARY_FOR_GPU, WEFT_ERR_LAUNCH_COMPILATION},
      {CUDA_ERROR_INVALID_IMAGE, WEFT_ERR_LAUNCH_COMPILATION},
      {CUDA_ERROR_JIT_COMPILER_NOT_FOUND, WEFT_ERR_LAUNCH_COMPILATION},
      {CUDA_ERROR_NOT_FOUND, WEFT_ERR_NOT_FOUND},
      {CUDA_ERROR_ILLEGAL_ADDRESS, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_MISALIGNED_ADDRESS, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_LAUNCH_FAILED, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_LAUNCH_TIMEOUT, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_HARDWARE_STACK_ERROR, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_ILLEGAL_INSTRUCTION, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_INVALID_ADDRESS_SPACE, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_INVALID_PC, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_ECC_UNCORRECTABLE, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_ASSERT, WEFT_ERR_DEVICE_POISONED},
      {CUDA_ERROR_TOO_MANY_PEERS, WEFT_ERR_UNKNOWN},
      {CUDA_ERROR_STUB_LIBRARY, WEFT_ERR_UNSUPPORTED_IO_OPERATION},
      {CUDA_ERROR_NO_DEVICE, WEFT_ERR_UNSUPPORTED_IO_OPERATION},
      {CUDA_ERROR_NOT_INITIALIZED, WEFT_ERR_UNSUPPORTED_IO_OPERATION},
      {CUDA_ERROR_DEINITIALIZED, WEFT_ERR_UNSUPPORTED_IO_OPERATION},
      {CUDA_ERROR_INVALID_DEVICE, WEFT_ERR_UNSUPPORTED_IO_OPERATION},
      {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, WEFT_ERR_GENERIC},
      {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, WEFT_ERR_GENERIC},
      {CUDA_ERROR_UNKNOWN, WEFT_ERR_UNKNOWN},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    cr_assert_eq(weft_cuda_error_kind(cases[i].r, WEFT_CUDA_OP_ANY), cases[i].k, "%s",
                 weft_cuda_result_name(cases[i].r));
  st = weft_cuda_error(&drv, CUDA_ERROR_ILLEGAL_ADDRESS, "sync");
  cr_assert(weft_error_is_device_poisoned(st));
  weft_error_free(st);
  /* A value outside cuda.h's enum. */
  st = weft_cuda_error(NULL, (CUresult)123456, "call");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_UNKNOWN);
  cr_assert_str_eq(weft_error_message(st), "call: CUresult (123456)");
  cr_assert(!weft_cuda_is_sticky((CUresult)123456));
  weft_error_free(st);
  weft_cuda_driver_unload(&drv);
  ASSERT_NO_LEAKS();
}

Test(cuda_errors, poison_sink_keeps_the_first_sticky_error) {
  weft_cuda_poison p = {NULL};
  cr_assert_null(weft_cuda_poison_get(&p));
  weft_status a = weft_cuda_error_ex(NULL, &p, WEFT_CUDA_OP_ANY, CUDA_ERROR_OUT_OF_MEMORY, 8, "a");
  cr_assert_null(weft_cuda_poison_get(&p), "OutOfMemory is not sticky");
  weft_status b =
      weft_cuda_error_ex(NULL, &p, WEFT_CUDA_OP_ANY, CUDA_ERROR_ILLEGAL_ADDRESS, 0, "b");
  weft_status c = weft_cuda_error_ex(NULL, &p, WEFT_CUDA_OP_ANY, CUDA_ERROR_LAUNCH_FAILED, 0, "c");
  weft_status got = weft_cuda_poison_get(&p);
  cr_assert_eq(weft_error_kind_of(got), WEFT_ERR_DEVICE_POISONED);
  cr_assert_str_eq(weft_error_message(got), "b: CUDA_ERROR_ILLEGAL_ADDRESS (700)");
  weft_error_free(got);
  weft_error_free(a);
  weft_error_free(b);
  weft_error_free(c);
  weft_cuda_poison_clear(&p);
  cr_assert_null(weft_cuda_poison_get(&p));
  ASSERT_NO_LEAKS();
}

/* ---- storage ------------------------------------------------------------------------------ */

Test(cuda_storage, alloc_get_dealloc_flush) {
  load();
  weft_cuda_context *c = open_context();
  weft_storage *s = NULL;
  uint64_t cap = 0;
  OK(weft_storage_cuda_create(&alloc, &drv, &cap, &s));
  cr_assert_gt(cap, 0);
  if (is_fake) cr_assert_eq(cap, 1ull << 30);
  cr_assert_eq(weft_storage_alignment(s), 256);
  weft_storage_handle h = {0}, z = {0};
  OK(weft_storage_alloc(s, 1000, &h));
  OK(weft_storage_alloc(s, 0, &z));
  cr_assert_neq(h.id, 0);
  cr_assert_eq(h.size, 1000);
  cr_assert_eq(weft_storage_bytes_allocated(s), 1024 + 256);
  void *p = NULL;
  OK(weft_storage_get(s, &h, &p));
  cr_assert_not_null(p);
  cr_assert_eq((uintptr_t)p % 256, 0);
  cr_assert_eq(stat("live_allocations"), is_fake ? 2 : 0);
  weft_storage_dealloc(s, &h);
  weft_storage_dealloc(s, &z);
  cr_assert_eq(h.id, 0);
  expect(weft_storage_get(s, &h, &p), WEFT_ERR_STORAGE_HANDLE_NOT_FOUND, "storage id 0");
  cr_assert_eq(weft_storage_cuda_pending(s), 2);
  cr_assert_eq(weft_storage_bytes_allocated(s), 1024 + 256, "queued bytes still count");
  weft_storage_flush(s);
  cr_assert_eq(weft_storage_cuda_pending(s), 0);
  cr_assert_eq(weft_storage_bytes_allocated(s), 0);
  cr_assert_eq(stat("live_allocations"), 0);
  /* Destroy flushes what is still queued. */
  OK(weft_storage_alloc(s, 4096, &h));
  weft_storage_dealloc(s, &h);
  weft_storage_destroy(s);
  expect_fake_clean();
  finish(c);
}

Test(cuda_storage, out_of_memory_and_buffer_too_big) {
  load();
  need_fake("FAKE_CUDA_MEMORY_BYTES and fake_cuda_fail_next");
  setenv("FAKE_CUDA_MEMORY_BYTES", "1048576", 1);
  fake_reset();
  weft_cuda_context *c = open_context();
  weft_storage *s = NULL;
  uint64_t cap = 0;
  OK(weft_storage_cuda_create(&alloc, &drv, &cap, &s));
  cr_assert_eq(cap, 1048576);
  weft_storage_handle a = {0}, b = {0};
  OK(weft_storage_alloc(s, 768 * 1024, &a));
  weft_status st = weft_storage_alloc(s, 512 * 1024, &b);
  cr_assert_eq(weft_error_size(st), 512 * 1024);
  cr_assert(weft_error_may_succeed_after_reclaim(st));
  expect(st, WEFT_ERR_OUT_OF_MEMORY, "cuMemAlloc(524288 bytes): CUDA_ERROR_OUT_OF_MEMORY (2)");
  st = weft_storage_alloc(s, 2u << 20, &b);
  cr_assert_eq(weft_error_size(st), 2u << 20);
  cr_assert(!weft_error_may_succeed_after_reclaim(st));
  expect(st, WEFT_ERR_BUFFER_TOO_BIG, "1048576 bytes in all");
  /* Reclaim, then it fits. */
  weft_storage_dealloc(s, &a);
  weft_storage_flush(s);
  OK(weft_storage_alloc(s, 512 * 1024, &b));
  /* An injected driver OOM and the storage's own failpoint. */
  fail_next("cuMemAlloc", CUDA_ERROR_OUT_OF_MEMORY, 0);
  expect(weft_storage_alloc(s, 256, &a), WEFT_ERR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY");
  weft_storage_cuda_fail_at(s, 2, WEFT_ERR_OUT_OF_MEMORY);
  OK(weft_storage_alloc(s, 256, &a));
  weft_storage_handle x = {0};
  expect(weft_storage_alloc(s, 256, &x), WEFT_ERR_OUT_OF_MEMORY, "failpoint");
  weft_storage_dealloc(s, &a);
  weft_storage_dealloc(s, &b);
  weft_storage_destroy(s);
  unsetenv("FAKE_CUDA_MEMORY_BYTES");
  expect_fake_clean();
  finish(c);
}

Test(cuda_storage, copy_between_allocations_and_pinned_staging) {
  load();
  weft_cuda_context *c = open_context();
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  weft_storage *s = NULL;
  OK(weft_storage_cuda_create(&alloc, &drv, NULL, &s));
  weft_storage_cuda_set_stream(s, weft_cuda_stream_handle(q));
  weft_storage_handle a = {0}, b = {0};
  OK(weft_storage_alloc(s, 64, &a));
  OK(weft_storage_alloc(s, 64, &b));
  unsigned char *pin = NULL;
  OK(weft_cuda_pinned_alloc(&drv, 64, (void **)&pin));
  cr_assert_eq(stat("host_allocs_live"), is_fake ? 1 : 0);
  for (int i = 0; i < 64; i++) pin[i] = (unsigned char)i;
  void *pa, *pb;
  OK(weft_storage_get(s, &a, &pa));
  OK(weft_storage_get(s, &b, &pb));
  OK(weft_cuda_copy_htod(q, (CUdeviceptr)(uintptr_t)pa, pin, 64));
  static const unsigned char zeros[64]; /* valid until the stream has passed the copy */
  OK(weft_cuda_copy_htod(q, (CUdeviceptr)(uintptr_t)pb, zeros, 64));
  OK(weft_cuda_stream_sync(q));
  OK(weft_storage_copy(s, &a, 8, &b, 16, 32));
  expect(weft_storage_copy(s, &a, 40, &b, 0, 32), WEFT_ERR_INVALID_ARGUMENT, "out of range");
  memset(pin, 0xee, 64);
  OK(weft_cuda_copy_dtoh(q, pin, (CUdeviceptr)(uintptr_t)pb, 64));
  OK(weft_cuda_stream_sync(q));
  for (int i = 0; i < 64; i++)
    cr_assert_eq(pin[i], i >= 16 && i < 48 ? i - 8 : 0, "byte %d = %d", i, pin[i]);
  OK(weft_cuda_pinned_free(&drv, pin));
  weft_storage_dealloc(s, &a);
  weft_storage_dealloc(s, &b);
  weft_storage_destroy(s);
  weft_cuda_stream_destroy(q);
  expect_fake_clean();
  finish(c);
}

/* ---- streams and events ------------------------------------------------------------------- */

static void spin(weft_cuda_stream *q, weft_cuda_module *m, unsigned us) {
  CUfunction f;
  OK(weft_cuda_module_function(m, "weft_spin_us", &f));
  void *params[] = {&us};
  OK(weft_cuda_launch(q, f, one, one, 0, params));
}

Test(cuda_stream, events_order_streams_and_are_pooled) {
  load();
  need_fake("weft_spin_us and the events_live counter");
  weft_cuda_context *c = open_context();
  weft_cuda_module *m = load_kernels(c);
  weft_cuda_stream *a = NULL, *b = NULL;
  OK(weft_cuda_stream_create(c, &a));
  OK(weft_cuda_stream_create(c, &b));
  weft_storage *s = NULL;
  OK(weft_storage_cuda_create(&alloc, &drv, NULL, &s));
  weft_storage_handle h = {0};
  OK(weft_storage_alloc(s, 4 * sizeof(float), &h));
  void *dp;
  OK(weft_storage_get(s, &h, &dp));
  CUdeviceptr out = (CUdeviceptr)(uintptr_t)dp;

  spin(a, m, 200000);
  weft_cuda_event *ev = NULL;
  OK(weft_cuda_stream_record(a, &ev));
  bool done = true, idle = true;
  OK(weft_cuda_event_done(ev, &done));
  cr_assert(!done, "a 200 ms kernel finished at once");
  OK(weft_cuda_stream_query(a, &idle));
  cr_assert(!idle);
  /* b waits on the device for a's spin, then fills. */
  OK(weft_cuda_stream_wait(b, ev));
  CUfunction fill;
  OK(weft_cuda_module_function(m, "weft_fill_f32", &fill));
  float value = 7.0f;
  unsigned n = 4;
  void *params[] = {&out, &value, &n};
  OK(weft_cuda_launch(b, fill, one, (weft_cuda_dim3){4, 1, 1}, 0, params));
  OK(weft_cuda_stream_sync(b));
  OK(weft_cuda_event_done(ev, &done));
  cr_assert(done, "b's work completed before the event it waited on");
  OK(weft_cuda_stream_query(a, &idle));
  cr_assert(idle);
  float host[4];
  OK(weft_cuda_copy_dtoh(b, host, out, sizeof host));
  OK(weft_cuda_stream_sync(b));
  for (int i = 0; i < 4; i++) cr_assert_eq(host[i], 7.0f);
  OK(weft_cuda_event_sync(ev));
  weft_cuda_event_release(ev);

  /* Pool: hold three at once, then 100 record/release cycles create none. */
  weft_cuda_event *held[3];
  for (int i = 0; i < 3; i++) OK(weft_cuda_stream_record(a, &held[i]));
  for (int i = 0; i < 3; i++) weft_cuda_event_release(held[i]);
  uint64_t created = weft_cuda_stream_events_created(a), live = stat("events_live");
  cr_assert_eq(created, 3);
  for (int i = 0; i < 100; i++) {
    weft_cuda_event *e;
    OK(weft_cuda_stream_record(a, &e));
    OK(weft_cuda_stream_wait(b, e));
    weft_cuda_event_release(e);
  }
  cr_assert_eq(weft_cuda_stream_events_created(a), created);
  cr_assert_eq(stat("events_live"), live, "events_live %llu -> %llu", (unsigned long long)live,
               (unsigned long long)stat("events_live"));
  OK(weft_cuda_stream_sync(b));

  weft_storage_dealloc(s, &h);
  weft_storage_destroy(s);
  weft_cuda_stream_destroy(a);
  weft_cuda_stream_destroy(b);
  weft_cuda_module_unload(m);
  expect_fake_clean();
  finish(c);
}

typedef struct thread_arg {
  weft_cuda_stream *q;
  weft_cuda_module *m;
  weft_status st;
} thread_arg;

static void *other_thread(void *p) {
  thread_arg *t = p;
  CUfunction f;
  t->st = weft_cuda_module_function(t->m, "weft_noop", &f);
  if (!t->st) t->st = weft_cuda_launch(t->q, f, one, one, 0, NULL);
  if (!t->st) t->st = weft_cuda_stream_sync(t->q);
  return NULL;
}

Test(cuda_stream, calls_from_another_thread_make_the_context_current) {
  load();
  weft_cuda_context *c = open_context();
  weft_cuda_module *m = load_kernels(c);
  thread_arg t = {.m = m};
  OK(weft_cuda_stream_create(c, &t.q));
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, other_thread, &t), 0);
  pthread_join(th, NULL);
  OK(t.st);
  weft_cuda_stream_destroy(t.q);
  weft_cuda_module_unload(m);
  expect_fake_clean();
  finish(c);
}

/* ---- launches ------------------------------------------------------------------------------ */

static void vec_add(weft_cuda_stream *q, CUfunction f, CUdeviceptr a, CUdeviceptr b,
                    CUdeviceptr out, unsigned n) {
  void *params[] = {&a, &b, &out, &n};
  OK(weft_cuda_launch(q, f, (weft_cuda_dim3){(n + 127) / 128, 1, 1}, (weft_cuda_dim3){128, 1, 1}, 0,
                      params));
}

Test(cuda_launch, vec_add_from_embedded_ptx_with_and_without_nul) {
  load();
  weft_cuda_context *c = open_context();
  /* The embedded PTX ends with its NUL; a copy without one must work too. */
  size_t len = sizeof weft_test_kernels_ptx - 1;
  cr_assert_eq(weft_test_kernels_ptx[len], '\0');
  char *bare = malloc(len);
  memcpy(bare, weft_test_kernels_ptx, len);
  weft_cuda_module *m1 = load_kernels(c), *m2 = NULL;
  OK(weft_cuda_module_load(c, bare, len, &m2));
  free(bare);
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  weft_storage *s = NULL;
  OK(weft_storage_cuda_create(&alloc, &drv, NULL, &s));
  enum { N = 1000 };
  weft_storage_handle h[3] = {{0}};
  CUdeviceptr d[3];
  for (int i = 0; i < 3; i++) {
    void *p;
    OK(weft_storage_alloc(s, N * sizeof(float), &h[i]));
    OK(weft_storage_get(s, &h[i], &p));
    d[i] = (CUdeviceptr)(uintptr_t)p;
  }
  static float x[N], y[N], z[N];
  for (int i = 0; i < N; i++) x[i] = (float)i, y[i] = 0.5f * (float)i;
  OK(weft_cuda_copy_htod(q, d[0], x, sizeof x));
  OK(weft_cuda_copy_htod(q, d[1], y, sizeof y));
  weft_cuda_module *mods[2] = {m1, m2};
  for (int k = 0; k < 2; k++) {
    CUfunction f;
    OK(weft_cuda_module_function(mods[k], "weft_vec_add_f32", &f));
    vec_add(q, f, d[0], d[1], d[2], N);
    memset(z, 0, sizeof z);
    OK(weft_cuda_copy_dtoh(q, z, d[2], sizeof z));
    OK(weft_cuda_stream_sync(q));
    for (int i = 0; i < N; i++) cr_assert_eq(z[i], 1.5f * (float)i, "z[%d] = %f", i, z[i]);
  }
  for (int i = 0; i < 3; i++) weft_storage_dealloc(s, &h[i]);
  weft_storage_destroy(s);
  weft_cuda_stream_destroy(q);
  weft_cuda_module_unload(m1);
  weft_cuda_module_unload(m2);
  expect_fake_clean();
  finish(c);
}

Test(cuda_launch, refused_configurations_are_launch_too_many_resources) {
  load();
  weft_cuda_context *c = open_context();
  weft_cuda_module *m = load_kernels(c);
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  CUfunction f;
  OK(weft_cuda_module_function(m, "weft_noop", &f));
  /* 2048 threads per block: INVALID_VALUE at a launch. */
  weft_status st = weft_cuda_launch(q, f, one, (weft_cuda_dim3){2048, 1, 1}, 0, NULL);
  cr_assert(weft_error_is_refusal(st));
  expect(st, WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES, "block 2048x1x1");
  /* 1 MiB of shared memory: LAUNCH_OUT_OF_RESOURCES (or INVALID_VALUE on a real GPU). */
  expect(weft_cuda_launch(q, f, one, one, 1u << 20, NULL), WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES,
         "1048576 shared bytes");
  /* Refusals do not poison: the stream still works. */
  OK(weft_cuda_launch(q, f, one, one, 0, NULL));
  OK(weft_cuda_stream_sync(q));
  cr_assert_null(weft_cuda_context_poisoned(c));
  weft_cuda_stream_destroy(q);
  weft_cuda_module_unload(m);
  expect_fake_clean();
  finish(c);
}

Test(cuda_launch, module_errors) {
  load();
  weft_cuda_context *c = open_context();
  weft_cuda_module *m = load_kernels(c), *bad = NULL;
  CUfunction f;
  expect(weft_cuda_module_function(m, "no_such_kernel", &f), WEFT_ERR_NOT_FOUND,
         "cuModuleGetFunction(\"no_such_kernel\"): CUDA_ERROR_NOT_FOUND");
  const char ptx99[] = ".version 99.0\n.target sm_75\n.address_size 64\n"
                       ".visible .entry weft_noop()\n{\n\tret;\n}\n";
  weft_status st = weft_cuda_module_load(c, ptx99, sizeof ptx99 - 1, &bad);
  cr_assert_null(bad);
  cr_assert(weft_error_is_refusal(st));
  expect(st, WEFT_ERR_LAUNCH_COMPILATION, "cuModuleLoadData");
  expect(weft_cuda_module_load(c, "garbage", 7, &bad), WEFT_ERR_LAUNCH_COMPILATION, "PTX image");
  expect(weft_cuda_module_load(c, NULL, 0, &bad), WEFT_ERR_INVALID_ARGUMENT, NULL);
  weft_cuda_module_unload(m);
  expect_fake_clean();
  finish(c);
}

/* ---- the completion cursor ------------------------------------------------------------------ */

static void CUDA_CB count_cb(void *arg) {
  atomic_fetch_add((_Atomic int *)arg, 1);
}

Test(cuda_cursor, marks_complete_in_order) {
  load();
  weft_cuda_context *c = open_context();
  weft_cuda_module *m = load_kernels(c);
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  cr_assert_eq(weft_cuda_stream_completed(q), 0);
  CUfunction noop;
  OK(weft_cuda_module_function(m, "weft_noop", &noop));
  for (uint64_t seq = 1; seq <= 100; seq++) {
    OK(weft_cuda_launch(q, noop, one, one, 0, NULL));
    OK(weft_cuda_stream_mark(q, seq));
  }
  OK(weft_cuda_stream_sync(q));
  cr_assert_eq(weft_cuda_stream_completed(q), 100);
  _Atomic int calls = 0;
  OK(weft_cuda_host_callback(q, count_cb, (void *)&calls));
  if (is_fake) {
    /* The cursor lags behind a long kernel, then catches up. */
    spin(q, m, 150000);
    OK(weft_cuda_stream_mark(q, 101));
    cr_assert_eq(weft_cuda_stream_completed(q), 100);
  }
  OK(weft_cuda_stream_sync(q));
  cr_assert_eq(weft_cuda_stream_completed(q), is_fake ? 101 : 100);
  cr_assert_eq(atomic_load(&calls), 1);
  cr_assert_eq(stat("host_funcs"), is_fake ? 102 : 0);
  weft_cuda_stream_destroy(q);
  weft_cuda_module_unload(m);
  expect_fake_clean();
  finish(c);
}

/* ---- capture -------------------------------------------------------------------------------- */

Test(cuda_capture, graph_replays_with_refreshed_inputs) {
  load();
  weft_cuda_context *c = open_context();
  weft_cuda_module *m = load_kernels(c);
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  weft_storage *s = NULL;
  OK(weft_storage_cuda_create(&alloc, &drv, NULL, &s));
  enum { N = 256 };
  weft_storage_handle h[3] = {{0}};
  CUdeviceptr d[3];
  for (int i = 0; i < 3; i++) {
    void *p;
    OK(weft_storage_alloc(s, N * sizeof(float), &h[i]));
    OK(weft_storage_get(s, &h[i], &p));
    d[i] = (CUdeviceptr)(uintptr_t)p;
  }
  CUfunction f;
  OK(weft_cuda_module_function(m, "weft_vec_add_f32", &f));
  uint64_t before = stat("kernels_run");
  OK(weft_cuda_capture_begin(q));
  expect(weft_cuda_capture_begin(q), WEFT_ERR_INVALID_ARGUMENT, "already capturing");
  weft_cuda_event *ev = NULL;
  expect(weft_cuda_stream_record(q, &ev), WEFT_ERR_INVALID_ARGUMENT, "during a capture");
  expect(weft_cuda_stream_mark(q, 1), WEFT_ERR_INVALID_ARGUMENT, "during a capture");
  vec_add(q, f, d[0], d[1], d[2], N);
  weft_cuda_graph *g = NULL;
  OK(weft_cuda_capture_end(q, &g));
  cr_assert_eq(weft_cuda_graph_nodes(g), 1);
  cr_assert_eq(stat("kernels_run"), before, "captured work does not run");
  static float x[N], y[N], z[N];
  for (int round = 1; round <= 3; round++) {
    for (int i = 0; i < N; i++) x[i] = (float)(round * i), y[i] = (float)round;
    OK(weft_cuda_copy_htod(q, d[0], x, sizeof x));
    OK(weft_cuda_copy_htod(q, d[1], y, sizeof y));
    OK(weft_cuda_graph_launch(g, q));
    OK(weft_cuda_copy_dtoh(q, z, d[2], sizeof z));
    OK(weft_cuda_stream_sync(q));
    for (int i = 0; i < N; i++)
      cr_assert_eq(z[i], (float)(round * i + round), "round %d: z[%d] = %f", round, i, z[i]);
  }
  if (is_fake) cr_assert_eq(stat("kernels_run"), before + 3);
  weft_cuda_graph_destroy(g);
  for (int i = 0; i < 3; i++) weft_storage_dealloc(s, &h[i]);
  weft_storage_destroy(s);
  weft_cuda_stream_destroy(q);
  weft_cuda_module_unload(m);
  expect_fake_clean();
  finish(c);
}

Test(cuda_capture, memory_nodes_are_rejected) {
  load();
  if (!drv.cuMemAllocAsync || !drv.cuMemFreeAsync)
    cr_skip_test("the driver has no cuMemAllocAsync");
  weft_cuda_context *c = open_context();
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  OK(weft_cuda_capture_begin(q));
  CUdeviceptr p = 0;
  cr_assert_eq(drv.cuMemAllocAsync(&p, 1024, weft_cuda_stream_handle(q)), CUDA_SUCCESS);
  cr_assert_eq(drv.cuMemFreeAsync(p, weft_cuda_stream_handle(q)), CUDA_SUCCESS);
  weft_cuda_graph *g = (weft_cuda_graph *)&g;
  expect(weft_cuda_capture_end(q, &g), WEFT_ERR_GENERIC,
         "2 memory nodes (1 MEM_ALLOC, 1 MEM_FREE)");
  cr_assert_null(g);
  /* The stream left capture mode and works. */
  OK(weft_cuda_stream_sync(q));
  weft_cuda_stream_destroy(q);
  expect_fake_clean();
  finish(c);
}

Test(cuda_capture, an_invalidated_capture_is_an_error) {
  load();
  weft_cuda_context *c = open_context();
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  OK(weft_cuda_capture_begin(q));
  /* cuMemAlloc is unsafe under a global capture: it fails and invalidates it. */
  weft_storage *s = NULL;
  OK(weft_storage_cuda_create(&alloc, &drv, NULL, &s));
  weft_storage_handle h = {0};
  expect(weft_storage_alloc(s, 256, &h), WEFT_ERR_GENERIC, "CUDA_ERROR_STREAM_CAPTURE_");
  weft_cuda_graph *g = NULL;
  expect(weft_cuda_capture_end(q, &g), WEFT_ERR_GENERIC, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
  cr_assert_null(g);
  expect(weft_cuda_capture_end(q, &g), WEFT_ERR_INVALID_ARGUMENT, "not capturing");
  OK(weft_cuda_stream_sync(q));
  weft_storage_destroy(s);
  weft_cuda_stream_destroy(q);
  expect_fake_clean();
  finish(c);
}

Test(cuda_capture, edges_fork_and_join_and_a_fork_left_unjoined_fails_end) {
  load();
  weft_cuda_context *c = open_context();
  weft_cuda_module *m = load_kernels(c);
  CUfunction noop;
  OK(weft_cuda_module_function(m, "weft_noop", &noop));
  weft_cuda_stream *a = NULL, *b = NULL;
  OK(weft_cuda_stream_create(c, &a));
  OK(weft_cuda_stream_create(c, &b));
  expect(weft_cuda_capture_edge(a, a, b), WEFT_ERR_INVALID_ARGUMENT, "capture"); /* none begun */
  OK(weft_cuda_capture_begin(a));
  expect(weft_cuda_capture_edge(a, a, a), WEFT_ERR_INVALID_ARGUMENT, "differ");
  expect(weft_cuda_capture_edge(a, b, a), WEFT_ERR_INVALID_ARGUMENT, "capture"); /* b not in it */
  OK(weft_cuda_capture_edge(a, a, b));                                           /* the fork */
  weft_cuda_event *ev = NULL;
  expect(weft_cuda_stream_record(b, &ev), WEFT_ERR_INVALID_ARGUMENT, "capture");
  OK(weft_cuda_launch(a, noop, one, one, 0, NULL));
  OK(weft_cuda_launch(b, noop, one, one, 0, NULL));
  OK(weft_cuda_capture_edge(a, b, a)); /* the join */
  weft_cuda_graph *g = NULL;
  OK(weft_cuda_capture_end(a, &g));
  cr_assert_eq(weft_cuda_graph_nodes(g), 2);
  OK(weft_cuda_graph_launch(g, b)); /* b is out of the capture: it runs the graph */
  OK(weft_cuda_stream_sync(b));
  weft_cuda_graph_destroy(g);
  /* A fork with work that nobody joins back. */
  OK(weft_cuda_capture_begin(a));
  OK(weft_cuda_capture_edge(a, a, b));
  OK(weft_cuda_launch(b, noop, one, one, 0, NULL));
  expect(weft_cuda_capture_end(a, &g), WEFT_ERR_GENERIC, "CUDA_ERROR_STREAM_CAPTURE_UNJOINED");
  cr_assert_null(g);
  OK(weft_cuda_stream_record(b, &ev)); /* b left the capture with a */
  weft_cuda_event_release(ev);
  OK(weft_cuda_stream_sync(b));
  weft_cuda_stream_destroy(a);
  weft_cuda_stream_destroy(b);
  weft_cuda_module_unload(m);
  expect_fake_clean();
  finish(c);
}

/* ---- sticky faults ------------------------------------------------------------------------ */

Test(cuda_sticky, a_faulting_kernel_poisons_the_context) {
  load();
  need_fake("the weft_fault kernel (a real fault would poison the whole process)");
  weft_cuda_context *c = open_context();
  weft_cuda_module *m = load_kernels(c);
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  weft_storage *s = NULL;
  OK(weft_storage_cuda_create(&alloc, &drv, NULL, &s));
  weft_storage_cuda_set_poison(s, weft_cuda_context_poison(c));
  weft_storage_handle h = {0};
  OK(weft_storage_alloc(s, 256, &h));
  OK(weft_cuda_stream_mark(q, 1));
  /* The fake runs the stream on its own thread: a kernel ahead of the fault
   * keeps it from faulting before mark 2 is enqueued (a sticky error makes
   * every later call fail, the enqueue included). */
  spin(q, m, 100000);
  CUfunction f;
  OK(weft_cuda_module_function(m, "weft_fault", &f));
  OK(weft_cuda_launch(q, f, one, one, 0, NULL));
  OK(weft_cuda_stream_mark(q, 2)); /* never runs: the driver drops work after the fault */
  cr_assert_null(weft_cuda_context_poisoned(c));
  weft_status st = weft_cuda_stream_sync(q);
  cr_assert(weft_error_is_device_poisoned(st));
  expect(st, WEFT_ERR_DEVICE_POISONED, "cuStreamSynchronize: CUDA_ERROR_ILLEGAL_ADDRESS (700)");
  weft_status first = weft_cuda_context_poisoned(c);
  cr_assert_eq(weft_error_kind_of(first), WEFT_ERR_DEVICE_POISONED);
  cr_assert(strstr(weft_error_message(first), "CUDA_ERROR_ILLEGAL_ADDRESS"));
  /* Later calls fail the same way and keep the first error. */
  weft_storage_handle h2 = {0};
  expect(weft_storage_alloc(s, 256, &h2), WEFT_ERR_DEVICE_POISONED, "cuMemAlloc");
  weft_cuda_event *ev;
  expect(weft_cuda_stream_record(q, &ev), WEFT_ERR_DEVICE_POISONED, NULL);
  weft_status again = weft_cuda_context_poisoned(c);
  cr_assert_str_eq(weft_error_message(again), weft_error_message(first));
  cr_assert_eq(weft_cuda_stream_completed(q), 1);
  weft_error_free(first);
  weft_error_free(again);
  /* Teardown still releases everything. */
  weft_storage_dealloc(s, &h);
  weft_storage_destroy(s);
  weft_cuda_stream_destroy(q);
  weft_cuda_module_unload(m);
  expect_fake_clean();
  finish(c);
}

Test(cuda_sticky, injected_fault_reaches_every_call) {
  load();
  need_fake("fake_cuda_fault");
  weft_cuda_context *c = open_context();
  weft_cuda_stream *q = NULL;
  OK(weft_cuda_stream_create(c, &q));
  fault(CUDA_ERROR_LAUNCH_FAILED);
  bool idle;
  expect(weft_cuda_stream_query(q, &idle), WEFT_ERR_DEVICE_POISONED, "CUDA_ERROR_LAUNCH_FAILED");
  expect(weft_cuda_context_sync(c), WEFT_ERR_DEVICE_POISONED, "cuCtxSynchronize");
  weft_status p = weft_cuda_context_poisoned(c);
  cr_assert(strstr(weft_error_message(p), "cuStreamQuery"), "%s", weft_error_message(p));
  weft_error_free(p);
  weft_cuda_stream_destroy(q);
  expect_fake_clean();
  finish(c);
}

#endif
