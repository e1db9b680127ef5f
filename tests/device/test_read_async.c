/* weft_buffer_read_async on the host backend: the bytes arrive when the
 * event completes, ordered like weft_buffer_read; a read of bytes a failed
 * launch left unwritten completes with Several{Unwritten} and leaves the
 * destination untouched; bad arguments are refused with no event made;
 * running out of memory loses nothing. Counting allocator: zero live blocks
 * at close. */
#include <criterion/criterion.h>

#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

static void expect_kind(weft_status st, weft_error_kind kind, const char *call, int line) {
  char text[2048] = "success";
  if (st) weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: expected %s, got %s", line, call,
               weft_error_kind_name(kind), text);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind) expect_kind((call), (kind), #call, __LINE__)

static const uint32_t one[3] = {1, 1, 1};

/* Waits for its gate, then fills its binding with the byte |fill|. */
typedef struct gate {
  _Atomic int open;
  uint8_t fill;
} gate;

static weft_status gated_fill(const weft_kernel_ctx *ctx, void *user) {
  gate *g = user;
  while (!atomic_load(&g->open)) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  memset(ctx->buffers[0], g->fill, ctx->sizes[0]);
  return NULL;
}

static weft_status fails(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return weft_error_make(WEFT_ERR_GENERIC, "the kernel failed on purpose");
}

static void launch_write(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer b) {
  weft_binding bd = {.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = WEFT_WRITE};
  EXPECT_OK(weft_launch(dev, s, k, one, one, &bd, 1, NULL, 0));
}

Test(read_async, the_bytes_arrive_when_the_event_completes_and_not_before) {
  env e = env_new();
  gate g = {.fill = 0x5a};
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "fill", gated_fill, &g, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 256, &b));
  uint8_t src[256];
  for (int i = 0; i < 256; i++) src[i] = (uint8_t)i;
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, src, sizeof(src)));
  launch_write(e.dev, 1, k, b); /* another stream: the read is ordered after it by the buffer */
  uint8_t dst[128];
  memset(dst, 0xee, sizeof(dst));
  weft_event ev;
  EXPECT_OK(weft_buffer_read_async(e.dev, 0, b, 64, dst, sizeof(dst), &ev));
  EXPECT_KIND(weft_event_wait(e.dev, ev, 10u * 1000u * 1000u), WEFT_ERR_TIMEOUT);
  for (size_t i = 0; i < sizeof(dst); i++) cr_assert_eq(dst[i], 0xee, "dst[%zu] written early", i);
  atomic_store(&g.open, 1);
  EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX));
  for (size_t i = 0; i < sizeof(dst); i++) cr_assert_eq(dst[i], 0x5a, "dst[%zu]", i);
  EXPECT_OK(weft_event_release(e.dev, ev));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(read_async, reads_what_was_written_before_it_like_a_blocking_read) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 1u << 20, &b));
  static uint8_t src[1u << 20], dst[1u << 20], want[1u << 20];
  for (size_t i = 0; i < sizeof(src); i++) src[i] = (uint8_t)(i * 7u + 3u);
  EXPECT_OK(weft_buffer_write(e.dev, 2, b, 0, src, sizeof(src)));
  weft_event ev;
  EXPECT_OK(weft_buffer_read_async(e.dev, 3, b, 0, dst, sizeof(dst), &ev));
  EXPECT_OK(weft_buffer_read(e.dev, 3, b, 0, want, sizeof(want)));
  EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX));
  cr_assert_eq(memcmp(dst, src, sizeof(dst)), 0);
  cr_assert_eq(memcmp(want, src, sizeof(dst)), 0);
  weft_event empty;
  EXPECT_OK(weft_buffer_read_async(e.dev, 0, b, 5, NULL, 0, &empty)); /* nothing to copy */
  EXPECT_OK(weft_event_wait(e.dev, empty, UINT64_MAX));
  EXPECT_OK(weft_event_release(e.dev, empty));
  EXPECT_OK(weft_event_release(e.dev, ev));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(read_async, a_read_of_unwritten_bytes_fails_and_leaves_dst_untouched) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "fails", fails, NULL, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  uint8_t src[64];
  memset(src, 1, sizeof(src));
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, src, sizeof(src)));
  launch_write(e.dev, 0, k, b);
  uint8_t dst[64];
  memset(dst, 0xee, sizeof(dst));
  weft_event ev;
  EXPECT_OK(weft_buffer_read_async(e.dev, 0, b, 0, dst, sizeof(dst), &ev));
  weft_status st = weft_event_wait(e.dev, ev, UINT64_MAX);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  cr_assert_eq(weft_error_kind_of(weft_error_at(st, 0)), WEFT_ERR_UNWRITTEN);
  weft_error_free(st);
  /* Each wait gets its own copy of the answer. */
  EXPECT_KIND(weft_event_wait(e.dev, ev, 0), WEFT_ERR_SEVERAL);
  for (size_t i = 0; i < sizeof(dst); i++) cr_assert_eq(dst[i], 0xee, "dst[%zu] written", i);
  EXPECT_OK(weft_event_release(e.dev, ev));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

Test(read_async, bad_arguments_are_refused_and_make_no_event) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  uint8_t dst[64];
  weft_event ev = {77};
  EXPECT_KIND(weft_buffer_read_async(e.dev, 0, b, 0, dst, 8, NULL), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_buffer_read_async(e.dev, 0, b, 0, NULL, 8, &ev), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_eq(ev.id, 0);
  ev.id = 77;
  EXPECT_KIND(weft_buffer_read_async(e.dev, 0, b, 60, dst, 8, &ev), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_eq(ev.id, 0);
  EXPECT_KIND(weft_buffer_read_async(e.dev, 0, b, UINT64_MAX, dst, 2, &ev),
              WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_KIND(weft_buffer_read_async(NULL, 0, b, 0, dst, 8, &ev), WEFT_ERR_INVALID_ARGUMENT);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_KIND(weft_buffer_read_async(e.dev, 0, b, 0, dst, 8, &ev), WEFT_ERR_NOT_FOUND);
  cr_assert_eq(ev.id, 0);
  env_close(&e);
}

Test(read_async, running_out_of_memory_loses_nothing) {
  for (uint64_t n = 1; n <= 4; n++) {
    env e = env_new();
    weft_buffer b;
    EXPECT_OK(weft_buffer_create(e.dev, 0, 4096, &b));
    uint8_t src[4096], dst[4096];
    memset(src, 9, sizeof(src));
    memset(dst, 0, sizeof(dst));
    EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, src, sizeof(src)));
    weft_counting_allocator_fail_at(e.ca, n);
    weft_event ev = {1};
    weft_status st = weft_buffer_read_async(e.dev, 0, b, 0, dst, sizeof(dst), &ev);
    weft_counting_allocator_fail_at(e.ca, 0);
    if (st) {
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_OUT_OF_MEMORY);
      cr_assert_eq(ev.id, 0);
      weft_error_free(st);
    } else {
      EXPECT_OK(weft_event_wait(e.dev, ev, UINT64_MAX));
      cr_assert_eq(memcmp(src, dst, sizeof(dst)), 0);
      EXPECT_OK(weft_event_release(e.dev, ev));
    }
    EXPECT_OK(weft_buffer_release(e.dev, b));
    env_close(&e);
  }
}

Test(read_async, a_read_left_unwaited_and_unreleased_is_freed_at_close) {
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  static uint8_t dst[64]; /* valid until close: the read may still deliver then */
  weft_event ev;
  EXPECT_OK(weft_buffer_read_async(e.dev, 0, b, 0, dst, sizeof(dst), &ev));
  env_close(&e);
}
