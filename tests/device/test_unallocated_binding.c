/* A launch bound to a buffer whose reservation failed while the failure
 * itself could not be recorded (found by fuzz_api in OOM mode): when
 * memory runs out for the stream's memory manager and then for the error
 * graph's record of the unallocated buffer, the buffer is left with no
 * address and no failure, and the read check let the launch run: the kernel
 * got a NULL binding (UBSan: applying zero offset to null pointer in buf_ptr;
 * any kernel touching it crashes). The launch must fail instead, and a read
 * of its output must say so. */
#include <criterion/criterion.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"

/* From the |countdown|th allocation on, every allocation fails (until
 * disarmed): the scheduler's allocations right after a create fail too. */
typedef struct sticky_alloc {
  _Atomic uint64_t countdown, live;
} sticky_alloc;

static void *sticky_alloc_fn(void *self, size_t size, size_t align) {
  sticky_alloc *a = self;
  uint64_t c = atomic_load(&a->countdown);
  while (c > 1 && !atomic_compare_exchange_weak(&a->countdown, &c, c - 1)) {
  }
  if (c == 1) return NULL;
  void *p = NULL;
  if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
    return NULL;
  atomic_fetch_add(&a->live, 1);
  return p;
}

static void sticky_free_fn(void *self, void *ptr, size_t size, size_t align) {
  sticky_alloc *a = self;
  (void)size, (void)align;
  if (!ptr) return;
  free(ptr);
  atomic_fetch_sub(&a->live, 1);
}

static _Atomic int null_bindings;

static weft_status copy_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  for (size_t i = 0; i < ctx->num_buffers; i++)
    if (!ctx->buffers[i] && ctx->sizes[i]) {
      atomic_fetch_add(&null_bindings, 1);
      return NULL;
    }
  memcpy(ctx->buffers[1], ctx->buffers[0], (size_t)ctx->sizes[1]);
  return NULL;
}

Test(launch, a_binding_whose_failed_reservation_left_no_record_never_runs) {
  const uint32_t one[3] = {1, 1, 1};
  for (uint64_t n = 1; n <= 48; n++) {
    sticky_alloc sa = {0};
    weft_allocator alloc = {.self = &sa, .alloc = sticky_alloc_fn, .free = sticky_free_fn};
    weft_device_options o;
    weft_device_options_init(&o);
    o.allocator = &alloc;
    o.max_streams = 2;
    o.scheduler = WEFT_SCHEDULER_THREAD;
    weft_device *dev;
    cr_assert_null(weft_device_open(&o, &dev));
    weft_kernel k;
    cr_assert_null(weft_kernel_host(dev, "copy", copy_kernel, NULL, &k));
    weft_buffer out;
    uint8_t bytes[64] = {1};
    cr_assert_null(weft_buffer_create(dev, 0, sizeof(bytes), &out));
    cr_assert_null(weft_buffer_write(dev, 0, out, 0, bytes, sizeof(bytes)));
    cr_assert_null(weft_sync(dev, 0));
    /* Stream 1's memory does not exist yet: its manager, then the record of
     * the failure, are the next allocations the scheduler makes. */
    atomic_store(&sa.countdown, n);
    weft_buffer in;
    weft_status st = weft_buffer_create(dev, 1, sizeof(bytes), &in);
    weft_error_free(weft_sync(dev, 1));
    atomic_store(&sa.countdown, 0);
    if (!st) {
      weft_binding b[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
      weft_status ls = weft_launch(dev, 0, k, one, one, b, 2, NULL, 0);
      if (!ls) {
        uint8_t got[64];
        weft_status rs = weft_buffer_read(dev, 0, out, 0, got, sizeof(got));
        cr_assert_eq(atomic_load(&null_bindings), 0,
                     "n = %llu: the kernel ran with the unallocated buffer's NULL address",
                     (unsigned long long)n);
        weft_status cs = weft_buffer_read(dev, 0, in, 0, got, sizeof(got));
        /* Which allocation failed depends on timing; when the input never got
         * memory (its read fails), the output cannot read back either. */
        cr_assert(!cs || rs,
                  "n = %llu: the output of a launch whose input is unallocated read back",
                  (unsigned long long)n);
        weft_error_free(cs);
        weft_error_free(rs);
      }
      weft_error_free(ls);
      weft_error_free(weft_buffer_release(dev, in));
    }
    weft_error_free(st);
    weft_error_free(weft_buffer_release(dev, out));
    weft_device_close(dev);
    cr_assert_eq(atomic_load(&sa.live), 0, "n = %llu: %llu blocks outlive the device",
                 (unsigned long long)n, (unsigned long long)atomic_load(&sa.live));
  }
  ASSERT_NO_LEAKS();
}
