/* Large host writes: a write past the staging limit holds no staged copy of
 * the caller's bytes, stays stream-ordered, and leaves the caller free to
 * reuse its memory when it returns; a kernel (a worker thread, which must
 * not wait for its own device) may still write large buffers. Every device
 * runs on a counting allocator that must end with zero live blocks. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

#define MiB (UINT64_C(1) << 20)

enum { BIG = 32 * MiB, WORDS = BIG / 4 };

static weft_buffer make_buffer(weft_device *dev, weft_stream_id stream, uint64_t size) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(dev, stream, size, &b));
  return b;
}

static uint32_t *words(uint32_t seed) {
  uint32_t *p = malloc(BIG);
  cr_assert_not_null(p);
  for (uint32_t i = 0; i < WORDS; i++) p[i] = seed + i * 2654435761u;
  return p;
}

Test(large_writes, a_write_past_the_staging_limit_holds_no_staged_copy, .timeout = 60) {
  env e = env_new();
  weft_device *dev = e.dev;
  weft_buffer b = make_buffer(dev, 0, BIG);
  uint32_t *src = words(1);
  EXPECT_OK(weft_buffer_write(dev, 0, b, 0, src, 4096)); /* the stream and its page exist */
  EXPECT_OK(weft_sync(dev, 0));
  uint64_t before = weft_counting_allocator_counts(e.ca).live_bytes;
  EXPECT_OK(weft_buffer_write(dev, 0, b, 0, src, BIG));
  uint64_t after = weft_counting_allocator_counts(e.ca).live_bytes;
  cr_assert_lt(after - before, 1 * MiB,
               "a %u MiB write left %" PRIu64 " bytes more allocated when it returned (a staged "
               "copy of the caller's bytes)",
               (unsigned)(BIG / MiB), after - before);
  uint32_t *got = malloc(BIG);
  cr_assert_not_null(got);
  EXPECT_OK(weft_buffer_read(dev, 1, b, 0, got, BIG));
  cr_assert(memcmp(got, src, BIG) == 0, "the bytes read differ from the bytes written");
  free(got);
  free(src);
  EXPECT_OK(weft_buffer_release(dev, b));
  env_close(&e);
}

/* Adds 1 to every uint32 of binding 0. */
static weft_status inc_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint32_t *p = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0] / 4; i++) p[i] += 1;
  return NULL;
}

Test(large_writes, a_large_write_is_stream_ordered_and_the_caller_may_reuse_its_bytes,
     .timeout = 60) {
  env e = env_new();
  weft_device *dev = e.dev;
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(dev, "inc", inc_kernel, NULL, &k));
  static const uint32_t one[3] = {1, 1, 1};
  weft_buffer b = make_buffer(dev, 0, BIG);
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  uint32_t *src = words(7);
  /* inc, write, inc: the first inc's result is overwritten; the second sees
   * the written words. */
  EXPECT_OK(weft_launch(dev, 0, k, one, one, &bd, 1, NULL, 0));
  EXPECT_OK(weft_buffer_write(dev, 0, b, 0, src, BIG));
  memset(src, 0xee, BIG); /* the caller's memory is its own again */
  EXPECT_OK(weft_launch(dev, 0, k, one, one, &bd, 1, NULL, 0));
  uint32_t *got = malloc(BIG);
  cr_assert_not_null(got);
  EXPECT_OK(weft_buffer_read(dev, 0, b, 0, got, BIG));
  for (uint32_t i = 0; i < WORDS; i++)
    if (got[i] != 7 + i * 2654435761u + 1)
      cr_assert_fail("word %" PRIu32 " is %" PRIu32 ", expected %" PRIu32, i, got[i],
                     7 + i * 2654435761u + 1);
  /* A write across streams is ordered after the writer's earlier work. */
  weft_buffer c = make_buffer(dev, 1, BIG);
  uint32_t *src2 = words(9);
  EXPECT_OK(weft_buffer_write(dev, 1, c, 0, src2, BIG));
  EXPECT_OK(weft_buffer_read(dev, 0, c, 0, got, BIG));
  cr_assert(memcmp(got, src2, BIG) == 0, "the cross-stream read differs");
  free(src2);
  free(got);
  free(src);
  EXPECT_OK(weft_buffer_release(dev, b));
  EXPECT_OK(weft_buffer_release(dev, c));
  env_close(&e);
}

typedef struct writer {
  weft_device *dev;
  weft_buffer target;
  const uint32_t *src;
  weft_error_kind kind;
} writer;

/* A kernel that writes a large buffer on its own stream: a worker must not
 * wait for its device, so the write is staged and the kernel goes on. */
static weft_status writer_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  writer *w = user;
  weft_status st = weft_buffer_write(w->dev, 0, w->target, 0, w->src, BIG);
  w->kind = weft_error_kind_of(st);
  weft_error_free(st);
  return NULL;
}

Test(large_writes, a_kernel_writing_a_large_buffer_on_its_own_stream_does_not_wait, .timeout = 60) {
  env e = env_new();
  weft_device *dev = e.dev;
  uint32_t *src = words(3);
  writer w = {.dev = dev, .src = src, .kind = WEFT_ERR_GENERIC};
  w.target = make_buffer(dev, 0, BIG);
  weft_buffer dummy = make_buffer(dev, 0, 64);
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(dev, "writer", writer_kernel, &w, &k));
  static const uint32_t one[3] = {1, 1, 1};
  weft_binding bd = {dummy, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  EXPECT_OK(weft_launch(dev, 0, k, one, one, &bd, 1, NULL, 0));
  EXPECT_OK(weft_sync(dev, 0));
  cr_assert_eq(w.kind, WEFT_OK, "the kernel's write: %s", weft_error_kind_name(w.kind));
  uint32_t *got = malloc(BIG);
  cr_assert_not_null(got);
  EXPECT_OK(weft_buffer_read(dev, 0, w.target, 0, got, BIG));
  cr_assert(memcmp(got, src, BIG) == 0, "the kernel's write did not land");
  free(got);
  free(src);
  EXPECT_OK(weft_buffer_release(dev, w.target));
  EXPECT_OK(weft_buffer_release(dev, dummy));
  env_close(&e);
}
