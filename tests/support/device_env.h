/* A device for Criterion tests: opened on a counting allocator, and closed
 * with a check that it leaked nothing (and, under ASan, that LSan agrees).
 * Include after <criterion/criterion.h> and "support/asan_criterion.h". */
#ifndef WEFT_TESTS_DEVICE_ENV_H
#define WEFT_TESTS_DEVICE_ENV_H

#include <inttypes.h>
#include <string.h>

#include <weft/weft.h>

static inline void expect_ok(weft_status st, const char *call, int line) {
  if (st) {
    char text[2048];
    weft_error_format(st, text, sizeof(text));
    cr_assert_fail("line %d: %s failed: %s", line, call, text);
  }
}
#define EXPECT_OK(call) expect_ok((call), #call, __LINE__)

typedef struct env {
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_device_options opts;
  weft_device *dev;
} env;

/* Default options on a fresh counting allocator; the device is not open. */
static inline void env_options(env *e) {
  memset(e, 0, sizeof(*e));
  EXPECT_OK(weft_counting_allocator_create(&e->ca));
  e->alloc = weft_counting_allocator_get(e->ca);
  weft_device_options_init(&e->opts);
  e->opts.allocator = &e->alloc;
}

static inline void env_open(env *e) {
  EXPECT_OK(weft_device_open(&e->opts, &e->dev));
  cr_assert_not_null(e->dev);
}

static inline env env_new(void) {
  env e;
  env_options(&e);
  env_open(&e);
  return e;
}

/* Closes the device; every block it allocated must be back. */
static inline void env_close(env *e) {
  weft_device_close(e->dev);
  e->dev = NULL;
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%" PRIu64 " blocks (%" PRIu64 " bytes) leaked by the device",
               c.live_blocks, c.live_bytes);
  cr_assert_eq(c.live_bytes, 0);
  cr_assert_eq(c.allocs, c.frees);
  weft_counting_allocator_destroy(e->ca);
  e->ca = NULL;
  ASSERT_NO_LEAKS();
}

#endif
