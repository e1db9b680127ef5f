/* Calls a reclaim callback makes back into weft (weft_memory_set_reclaim):
 * releasing the buffer being reserved, releasing a buffer whose create is
 * still queued, creating, writing and launching from inside the callback,
 * and the blocking calls it is refused. The callback runs on the scheduler
 * thread (or, combining, on whichever thread holds the scheduler role), so
 * every buffer it acts on is one it created itself or one created before
 * the failing create: nothing here depends on timing. Every device runs on
 * a counting allocator that must end with zero live blocks (and, under
 * ASan, LeakSanitizer must agree). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

#define MiB (UINT64_C(1) << 20)

enum { HOGS = 4, REQUEST = 1000000 };

static weft_error_kind kind_free(weft_status st) {
  weft_error_kind k = weft_error_kind_of(st);
  weft_error_free(st);
  return k;
}

static void expect_kind(weft_status st, weft_error_kind kind, const char *call, int line) {
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: expected %s, got %s", line, call,
               weft_error_kind_name(kind), text);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind) expect_kind((call), (kind), #call, __LINE__)

static weft_buffer make_buffer(weft_device *dev, weft_stream_id stream, uint64_t size) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(dev, stream, size, &b));
  return b;
}

static uint8_t pattern_byte(uint32_t seed, size_t i) {
  return (uint8_t)(seed * 131u + (uint32_t)i * 7u + (uint32_t)(i >> 9) * 13u + 1u);
}

static void write_pattern(weft_device *dev, weft_stream_id stream, weft_buffer b, size_t n,
                          uint32_t seed) {
  uint8_t *p = malloc(n);
  cr_assert_not_null(p);
  for (size_t i = 0; i < n; i++) p[i] = pattern_byte(seed, i);
  EXPECT_OK(weft_buffer_write(dev, stream, b, 0, p, n));
  free(p);
}

static void read_check(weft_device *dev, weft_stream_id stream, weft_buffer b, size_t n,
                       uint32_t seed, const char *what) {
  uint8_t *p = malloc(n);
  cr_assert_not_null(p);
  EXPECT_OK(weft_buffer_read(dev, stream, b, 0, p, n));
  for (size_t i = 0; i < n; i++)
    if (p[i] != pattern_byte(seed, i))
      cr_assert_fail("%s: byte %zu is %u, expected %u", what, i, p[i], pattern_byte(seed, i));
  free(p);
}

/* A read of |b| fails with Several{Unwritten{root: |kind|}}. */
static void expect_read_root(weft_device *dev, weft_stream_id stream, weft_buffer b,
                             weft_error_kind kind, int line) {
  uint8_t byte;
  weft_status st = weft_buffer_read(dev, stream, b, 0, &byte, 1);
  char text[4096];
  weft_error_format(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "line %d: expected Several, got %s", line,
               text);
  weft_status root = weft_error_root(weft_error_at(st, 0));
  cr_assert_eq(weft_error_kind_of(root), kind, "line %d: expected root %s in %s", line,
               weft_error_kind_name(kind), text);
  weft_error_free(st);
}
#define EXPECT_READ_ROOT(dev, stream, b, kind)                                                     \
  expect_read_root((dev), (stream), (b), (kind), __LINE__)

static weft_memory_usage usage_of(weft_device *dev) {
  weft_memory_usage u = {0};
  EXPECT_OK(weft_memory_usage_get(dev, &u));
  return u;
}

static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s;
}

/* A 4 MiB device (its own small layout: 1 MiB sliced pages) full of four
 * 1 MiB hogs on stream 0, each written with its pattern. */
static void open_full_device(env *e, weft_buffer *hogs) {
  env_options(e);
  e->opts.memory_capacity = HOGS * MiB;
  env_open(e);
  for (int i = 0; i < HOGS; i++) {
    hogs[i] = make_buffer(e->dev, 0, 1 * MiB);
    write_pattern(e->dev, 0, hogs[i], 4096, (uint32_t)(100 + i));
  }
  EXPECT_OK(weft_sync(e->dev, 0));
  weft_memory_usage u = usage_of(e->dev);
  cr_assert_eq(u.number_allocs, HOGS);
  cr_assert_eq(u.bytes_reserved, HOGS * MiB, "the hogs should fill the device exactly");
}

/* ---- releasing the buffer being reserved ------------------------------------------------- */

typedef struct self_probe {
  weft_device *dev;
  weft_buffer hog;   /* released with the buffer being reserved */
  weft_buffer later; /* created by the first call: its create queues behind the failing one */
  int calls;
  uint64_t bytes[2];
  weft_error_kind create_kind, release_kind, again_kind, hog_kind;
} self_probe;

/* Call 1 (the first create failing) creates |later|, which cannot fit
 * either; call 2 is |later|'s own reservation: it releases |later| (the
 * buffer being reserved) and a hog. */
static uint64_t release_self_cb(void *user, weft_stream_id stream, uint64_t bytes) {
  (void)stream;
  self_probe *p = user;
  if (p->calls < 2) p->bytes[p->calls] = bytes;
  p->calls++;
  if (p->calls == 1) {
    p->create_kind = kind_free(weft_buffer_create(p->dev, 1, REQUEST + 4096, &p->later));
    return 0;
  }
  if (p->calls == 2) {
    p->release_kind = kind_free(weft_buffer_release(p->dev, p->later));
    p->again_kind = kind_free(weft_buffer_release(p->dev, p->later));
    p->hog_kind = kind_free(weft_buffer_release(p->dev, p->hog));
    return 1 * MiB;
  }
  return 0;
}

Test(reclaim_reentry, releasing_the_buffer_being_reserved_ends_its_create_without_a_leak,
     .timeout = 60) {
  env e;
  weft_buffer hogs[HOGS];
  open_full_device(&e, hogs);
  weft_device *dev = e.dev;
  self_probe p = {.dev = dev, .hog = hogs[0]};
  EXPECT_OK(weft_memory_set_reclaim(dev, release_self_cb, &p));

  weft_buffer first = make_buffer(dev, 1, REQUEST);
  EXPECT_READ_ROOT(dev, 1, first, WEFT_ERR_OUT_OF_MEMORY);
  /* Call 1 queued |later|'s create before the read was processed, so before
   * this question: both creates have run when it is answered. */
  weft_device_stats s = stats_of(dev);
  cr_assert_eq(p.calls, 2, "the callback ran %d times", p.calls);
  cr_assert_eq(p.bytes[0], REQUEST);
  cr_assert_eq(p.bytes[1], REQUEST + 4096, "call 2 was not for the create made in call 1");
  cr_assert_eq(p.create_kind, WEFT_OK, "a create inside the callback: %s",
               weft_error_kind_name(p.create_kind));
  cr_assert_eq(p.release_kind, WEFT_OK, "releasing the buffer being reserved: %s",
               weft_error_kind_name(p.release_kind));
  cr_assert_eq(p.again_kind, WEFT_ERR_NOT_FOUND, "a second release of it: %s",
               weft_error_kind_name(p.again_kind));
  cr_assert_eq(p.hog_kind, WEFT_OK);

  /* Its create ended there: no retry, nothing reserved for a dead handle,
   * the handle is refused, and no failure of it stays in the graph. */
  cr_assert_eq(s.reclaims, 2);
  cr_assert_eq(s.reclaims_rescued, 0, "the released buffer's create was counted as rescued");
  cr_assert_eq(s.buffers_live, HOGS - 1 + 1, "%" PRIu64 " buffers live", s.buffers_live);
  uint8_t byte;
  EXPECT_KIND(weft_buffer_read(dev, 1, p.later, 0, &byte, 1), WEFT_ERR_NOT_FOUND);
  EXPECT_KIND(weft_buffer_release(dev, p.later), WEFT_ERR_NOT_FOUND);
  weft_memory_usage u = usage_of(dev);
  cr_assert_eq(u.number_allocs, HOGS - 1, "%" PRIu64 " allocations (three hogs expected)",
               u.number_allocs);

  /* The hog's page went back: a new create fits without the ladder. */
  weft_buffer fits = make_buffer(dev, 2, REQUEST);
  write_pattern(dev, 2, fits, REQUEST, 7);
  read_check(dev, 2, fits, REQUEST, 7, "the create after");
  cr_assert_eq(p.calls, 2, "the create after needed the ladder");
  for (int i = 1; i < HOGS; i++) read_check(dev, 0, hogs[i], 4096, (uint32_t)(100 + i), "hog");

  EXPECT_OK(weft_buffer_release(dev, first));
  EXPECT_OK(weft_buffer_release(dev, fits));
  s = stats_of(dev);
  cr_assert_eq(s.failures_live, 0, "%" PRIu64 " failures left in the graph", s.failures_live);
  env_close(&e);
}

/* ---- releasing a buffer whose create is still queued ------------------------------------- */

typedef struct queued_probe {
  weft_device *dev;
  weft_buffer hogs[3]; /* released by call 1: room for the first create and two more */
  weft_buffer gone, kept;
  int calls;
  weft_error_kind gone_create, gone_release, gone_again, kept_create, write_kind;
} queued_probe;

/* Call 1 frees three hogs, then creates |gone| (queued), releases it at
 * once, and creates |kept| (queued, and given a handle slot right after
 * |gone|'s was killed). */
static uint64_t release_queued_cb(void *user, weft_stream_id stream, uint64_t bytes) {
  (void)stream;
  (void)bytes;
  queued_probe *p = user;
  if (p->calls++) return 0;
  for (int i = 0; i < 3; i++) weft_error_free(weft_buffer_release(p->dev, p->hogs[i]));
  p->gone_create = kind_free(weft_buffer_create(p->dev, 2, REQUEST, &p->gone));
  /* A write to it, queued before the release, is dropped with it. */
  uint8_t bytes4[4] = {1, 2, 3, 4};
  p->write_kind = kind_free(weft_buffer_write(p->dev, 2, p->gone, 0, bytes4, sizeof(bytes4)));
  p->gone_release = kind_free(weft_buffer_release(p->dev, p->gone));
  p->gone_again = kind_free(weft_buffer_release(p->dev, p->gone));
  p->kept_create = kind_free(weft_buffer_create(p->dev, 3, REQUEST, &p->kept));
  return 3 * MiB;
}

Test(reclaim_reentry, releasing_a_buffer_whose_create_is_queued_frees_it_after_its_create,
     .timeout = 60) {
  env e;
  weft_buffer hogs[HOGS];
  open_full_device(&e, hogs);
  weft_device *dev = e.dev;
  queued_probe p = {.dev = dev, .hogs = {hogs[0], hogs[1], hogs[2]}};
  EXPECT_OK(weft_memory_set_reclaim(dev, release_queued_cb, &p));

  weft_buffer first = make_buffer(dev, 1, REQUEST);
  write_pattern(dev, 1, first, REQUEST, 11);
  read_check(dev, 1, first, REQUEST, 11, "the create the callback rescued");
  cr_assert_eq(p.calls, 1);
  cr_assert_eq(p.gone_create, WEFT_OK);
  cr_assert_eq(p.write_kind, WEFT_OK);
  cr_assert_eq(p.gone_release, WEFT_OK, "releasing a buffer whose create is queued: %s",
               weft_error_kind_name(p.gone_release));
  cr_assert_eq(p.gone_again, WEFT_ERR_NOT_FOUND);
  cr_assert_eq(p.kept_create, WEFT_OK);
  cr_assert_neq(p.gone.id, p.kept.id);

  /* |kept| is an ordinary buffer; |gone| is dead and holds nothing. */
  write_pattern(dev, 3, p.kept, REQUEST, 12);
  read_check(dev, 0, p.kept, REQUEST, 12, "the buffer created after the release");
  uint8_t byte;
  EXPECT_KIND(weft_buffer_read(dev, 2, p.gone, 0, &byte, 1), WEFT_ERR_NOT_FOUND);
  EXPECT_KIND(weft_buffer_release(dev, p.gone), WEFT_ERR_NOT_FOUND);
  weft_device_stats s = stats_of(dev);
  cr_assert_eq(s.buffers_live, 3, "%" PRIu64 " buffers live (hog 3, first, kept)", s.buffers_live);
  weft_memory_usage u = usage_of(dev);
  cr_assert_eq(u.number_allocs, 3, "%" PRIu64 " allocations: the released buffer was orphaned",
               u.number_allocs);
  read_check(dev, 0, hogs[3], 4096, 103, "hog 3");

  /* Releasing everything leaves nothing in use. */
  EXPECT_OK(weft_buffer_release(dev, first));
  EXPECT_OK(weft_buffer_release(dev, p.kept));
  EXPECT_OK(weft_buffer_release(dev, hogs[3]));
  EXPECT_OK(weft_sync(dev, 0));
  u = usage_of(dev);
  cr_assert_eq(u.bytes_in_use, 0, "%" PRIu64 " bytes stay in use after every release",
               u.bytes_in_use);
  cr_assert_eq(u.number_allocs, 0);
  env_close(&e);
}

/* ---- other calls from inside the callback ----------------------------------------------- */

static weft_status add_one(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint8_t *b = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0]; i++) b[i] = (uint8_t)(b[i] + 1);
  return NULL;
}

typedef struct calls_probe {
  weft_device *dev;
  weft_buffer live, victim, made;
  weft_kernel k;
  int calls;
  weft_error_kind create, write_live, write_made, launch, release;
  weft_error_kind read, sync, cleanup, usage, check, set_reclaim, install, dry_run, failpoints,
      capture;
} calls_probe;

static uint64_t calls_cb(void *user, weft_stream_id stream, uint64_t bytes) {
  (void)stream;
  (void)bytes;
  calls_probe *p = user;
  if (p->calls++) return 0;
  weft_device *dev = p->dev;
  /* Asynchronous calls are queued and take effect in order, after the
   * create being reserved. */
  p->create = kind_free(weft_buffer_create(dev, 1, 4096, &p->made)); /* fits beside x */
  uint8_t pat[4096];
  memset(pat, 0x5a, sizeof(pat));
  p->write_made = kind_free(weft_buffer_write(dev, 1, p->made, 0, pat, sizeof(pat)));
  memset(pat, 0x20, sizeof(pat));
  p->write_live = kind_free(weft_buffer_write(dev, 0, p->live, 0, pat, sizeof(pat)));
  static const uint32_t one[3] = {1, 1, 1};
  weft_binding bd = {p->live, 0, 4096, WEFT_READ_WRITE};
  p->launch = kind_free(weft_launch(dev, 0, p->k, one, one, &bd, 1, NULL, 0));
  p->release = kind_free(weft_buffer_release(dev, p->victim));
  /* Calls that wait for the scheduler are refused: it is this thread. */
  uint8_t byte;
  p->read = kind_free(weft_buffer_read(dev, 0, p->live, 0, &byte, 1));
  p->sync = kind_free(weft_sync(dev, 0));
  p->cleanup = kind_free(weft_memory_cleanup(dev, 0));
  weft_memory_usage u = {0};
  p->usage = kind_free(weft_memory_usage_get(dev, &u));
  p->check = kind_free(weft_check(dev, &p->live, 1));
  p->set_reclaim = kind_free(weft_memory_set_reclaim(dev, NULL, NULL));
  weft_layout layout;
  memset(&layout, 0, sizeof(layout));
  layout.kind = WEFT_LAYOUT_SUBSLICES;
  p->install = kind_free(weft_memory_install_layout(dev, 0, &layout));
  p->dry_run = kind_free(weft_memory_dry_run(dev, true));
  p->failpoints = kind_free(weft_device_set_failpoints(dev, ""));
  weft_capture *cap = NULL;
  weft_stream_id zero = 0;
  p->capture = kind_free(weft_capture_prepare(dev, &zero, 1, &cap));
  return 1 * MiB;
}

Test(reclaim_reentry, asynchronous_calls_from_the_callback_work_and_blocking_ones_are_refused,
     .timeout = 60) {
  env e;
  weft_buffer hogs[HOGS];
  open_full_device(&e, hogs);
  weft_device *dev = e.dev;
  calls_probe p = {.dev = dev, .live = hogs[0], .victim = hogs[1]};
  EXPECT_OK(weft_kernel_host(dev, "add_one", add_one, NULL, &p.k));
  EXPECT_OK(weft_memory_set_reclaim(dev, calls_cb, &p));

  weft_buffer x = make_buffer(dev, 1, REQUEST);
  write_pattern(dev, 1, x, REQUEST, 21);
  read_check(dev, 1, x, REQUEST, 21, "the rescued create");
  cr_assert_eq(p.calls, 1);
  struct {
    const char *what;
    weft_error_kind got, want;
  } expect[] = {
      {"weft_buffer_create", p.create, WEFT_OK},
      {"weft_buffer_write (the buffer it created)", p.write_made, WEFT_OK},
      {"weft_buffer_write (a live buffer)", p.write_live, WEFT_OK},
      {"weft_launch", p.launch, WEFT_OK},
      {"weft_buffer_release", p.release, WEFT_OK},
      {"weft_buffer_read", p.read, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_sync", p.sync, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_memory_cleanup", p.cleanup, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_memory_usage_get", p.usage, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_check", p.check, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_memory_set_reclaim", p.set_reclaim, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_memory_install_layout", p.install, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_memory_dry_run", p.dry_run, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_device_set_failpoints", p.failpoints, WEFT_ERR_INVALID_ARGUMENT},
      {"weft_capture_prepare", p.capture, WEFT_ERR_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++)
    cr_expect_eq(expect[i].got, expect[i].want, "%s from the reclaim callback: %s, expected %s",
                 expect[i].what, weft_error_kind_name(expect[i].got),
                 weft_error_kind_name(expect[i].want));

  /* The queued work ran, in order: the write, then the launch. */
  uint8_t got[4096];
  EXPECT_OK(weft_buffer_read(dev, 2, p.made, 0, got, sizeof(got)));
  for (size_t i = 0; i < sizeof(got); i++) cr_assert_eq(got[i], 0x5a, "made: byte %zu", i);
  EXPECT_OK(weft_buffer_read(dev, 0, p.live, 0, got, sizeof(got)));
  for (size_t i = 0; i < sizeof(got); i++) cr_assert_eq(got[i], 0x21, "live: byte %zu", i);
  /* The refused calls changed nothing: the callback is still set. */
  EXPECT_OK(weft_buffer_release(dev, x));
  EXPECT_OK(weft_buffer_release(dev, p.made));
  weft_buffer y = make_buffer(dev, 1, 2 * MiB);
  EXPECT_READ_ROOT(dev, 1, y, WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(p.calls, 2, "the callback was cleared from inside itself");
  EXPECT_OK(weft_buffer_release(dev, y));
  env_close(&e);
}
