/* Captures when memory runs out (found by fuzz_api in OOM mode).
 *
 * weft_capture_destroy without memory for its command: destroy allocated its command, and when that
 * failed it returned without doing anything ("close frees it"), so the capture stayed live
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
#include <string.h>

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
  weft_device_stats s = {0};
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
  const uint32_t one[3] = {1, 1, 1};
  /* Stream 1 exists before memory runs out: its launches are recorded. */
  cr_assert_null(weft_launch(dev, rec, k, one, one, NULL, 0, NULL, 0));
  cr_assert_null(weft_sync(dev, rec));
  weft_capture *cap = NULL, *idle = NULL;
  cr_assert_null(weft_capture_prepare(dev, &rec, 1, &cap));
  cr_assert_null(weft_capture_prepare(dev, &other, 1, &idle));
  cr_assert_null(weft_capture_begin(cap));
  cr_assert_eq(captures_live(dev), 2);

  /* Recorded launches keep their commands: launch until one finds neither a
   * free command nor memory for a new one. */
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

/* A launch on a recording stream whose stream cannot be created (found by
 * fuzz_api in OOM mode): the launch failed before the recording hook, so it
 * was neither recorded nor dooming, and end reported a ready capture that
 * replays without it. It must doom the recording like any launch that fails
 * inside the window. */
Test(capture, a_launch_that_cannot_start_inside_the_window_dooms_the_recording, .timeout = 60) {
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
  weft_stream_id rec = 1; /* nothing ran on it: its stream does not exist yet */
  weft_capture *cap = NULL;
  cr_assert_null(weft_capture_prepare(dev, &rec, 1, &cap));
  cr_assert_null(weft_capture_begin(cap));

  /* Every allocation fails: the launch's command comes from the pool (or the
   * launch is refused, and is tried again once the pool has one back). */
  const uint32_t one[3] = {1, 1, 1};
  atomic_store(&fa.failing, true);
  weft_status st = NULL;
  for (int tries = 0; tries < 1000; tries++) {
    st = weft_launch(dev, rec, k, one, one, NULL, 0, NULL, 0);
    if (!st) break;
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY, "%s", weft_error_message(st));
    weft_error_free(st);
    atomic_store(&fa.failing, false);
    weft_error_free(weft_sync(dev, 0)); /* a command comes back to the pool */
    atomic_store(&fa.failing, true);
  }
  cr_assert_null(st, "no launch got a command");
  /* End, as soon as a command is free (the failed launch gives its own back). */
  for (int tries = 0; tries < 100000; tries++) {
    st = weft_capture_end(cap);
    if (!st || !strstr(weft_error_message(st), "a capture command")) break;
    weft_error_free(st);
  }
  atomic_store(&fa.failing, false);
  cr_assert_not_null(st, "end kept a recording of %zu launches that lacks the one that failed",
                     weft_capture_launches(cap));
  cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_ABORTED);
  weft_error_free(st);
  weft_capture_destroy(cap);
  weft_device_close(dev);
  cr_assert_eq(atomic_load(&fa.live), 0, "%llu blocks outlive the device",
               (unsigned long long)atomic_load(&fa.live));
  ASSERT_NO_LEAKS();
}
