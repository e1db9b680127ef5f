/* weft_capture_destroy when memory has run out (found by fuzz_api in OOM
 * mode): destroy allocated its command, and when that failed it returned
 * without doing anything ("close frees it"), so the capture stayed live
 * (captures_live 1) and its window kept its slots isolated, their
 * reservations Forbidden, until weft_device_close. Destroy cannot report a
 * failure: it must end the capture whatever the allocator says.
 *
 * To reach an empty command pool deterministically, the recording itself
 * takes the commands: every launch on a recording stream keeps its command
 * until the capture ends, so once a launch is refused for want of memory
 * the pool of that command size (the one destroy uses) is empty. */
#include <criterion/criterion.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"

/* While |failing|, every allocation fails. */
typedef struct failing_alloc {
  _Atomic bool failing;
  _Atomic uint64_t live;
} failing_alloc;

static void *failing_alloc_fn(void *self, size_t size, size_t align) {
  failing_alloc *a = self;
  if (atomic_load(&a->failing)) return NULL;
  void *p = NULL;
  if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align, size ? size : 1))
    return NULL;
  atomic_fetch_add(&a->live, 1);
  return p;
}

static void failing_free_fn(void *self, void *ptr, size_t size, size_t align) {
  failing_alloc *a = self;
  (void)size, (void)align;
  if (!ptr) return;
  free(ptr);
  atomic_fetch_sub(&a->live, 1);
}

static weft_status nop_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return NULL;
}

static uint64_t captures_live(weft_device *dev) {
  weft_device_stats s;
  weft_status st = weft_device_stats_get(dev, &s);
  cr_assert_null(st, "stats: %s", weft_error_message(st));
  return s.captures_live;
}

Test(capture, destroy_without_memory_for_its_command_still_ends_the_capture, .timeout = 60) {
  failing_alloc fa = {0};
  weft_allocator alloc = {.self = &fa, .alloc = failing_alloc_fn, .free = failing_free_fn};
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &alloc;
  o.max_streams = 2;
  weft_device *dev;
  cr_assert_null(weft_device_open(&o, &dev));
  weft_kernel k;
  cr_assert_null(weft_kernel_host(dev, "nop", nop_kernel, NULL, &k));

  weft_stream_id rec = 1, other = 0;
  weft_capture *cap = NULL, *idle = NULL;
  cr_assert_null(weft_capture_prepare(dev, &rec, 1, &cap));
  cr_assert_null(weft_capture_prepare(dev, &other, 1, &idle));
  cr_assert_null(weft_capture_begin(cap));
  cr_assert_eq(captures_live(dev), 2);

  /* Recorded launches keep their commands: launch until one finds neither a
   * free command nor memory for a new one. */
  const uint32_t one[3] = {1, 1, 1};
  atomic_store(&fa.failing, true);
  weft_status st = NULL;
  size_t launched = 0;
  while (!st && launched < 100000) {
    st = weft_launch(dev, rec, k, one, one, NULL, 0, NULL, 0);
    if (!st) launched++;
  }
  cr_assert_not_null(st, "%zu launches were recorded without memory", launched);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY, "%s", weft_error_message(st));
  weft_error_free(st);

  /* Neither destroy can allocate; both must end their capture. */
  weft_capture_destroy(idle);
  weft_capture_destroy(cap);
  atomic_store(&fa.failing, false);
  cr_assert_eq(captures_live(dev), 0,
               "destroy without memory left the captures live (their windows too)");

  /* The slots are out of every window: a buffer on them reserves and reads. */
  weft_buffer b;
  uint8_t bytes[16] = {7}, got[16] = {0};
  cr_assert_null(weft_buffer_create(dev, rec, sizeof(bytes), &b));
  cr_assert_null(weft_buffer_write(dev, rec, b, 0, bytes, sizeof(bytes)));
  st = weft_buffer_read(dev, rec, b, 0, got, sizeof(got));
  cr_assert_null(st, "read on a slot the destroyed capture held: %s", weft_error_message(st));
  cr_assert_eq(got[0], 7);
  cr_assert_null(weft_buffer_release(dev, b));
  weft_device_close(dev);
  cr_assert_eq(atomic_load(&fa.live), 0, "%llu blocks outlive the device",
               (unsigned long long)atomic_load(&fa.live));
  ASSERT_NO_LEAKS();
}
