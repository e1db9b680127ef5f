/* Small buffers on devices with a large memory capacity (issue 12, item 29):
 * the default (SUBSLICES) layout's ladder grows one rung per factor of 4 of
 * the capacity, and each rung's largest slice used to halve once more per
 * rung, so at 2^58 bytes a 177-byte buffer reserved a 64 MiB page and a
 * 1 MiB buffer a 16 GiB one. A rung's largest slice is now at least a 32nd of
 * its page (the default layout up to 16 GiB is unchanged), so a buffer
 * reserves at most its size times 128, or the smallest page (below 32 MiB).
 * Every device runs a dry run: pages get identities, never backing. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

#define KiB (UINT64_C(1) << 10)
#define MiB (UINT64_C(1) << 20)

TestSuite(small_buffers, .timeout = 60);

/* The most a fresh stream may reserve for one buffer of |size| bytes: the
 * smallest page is below 32 MiB on every device of 128 MiB or more (the
 * ladder stops once a page falls below it); above that page's largest slice
 * a buffer lands in the first rung whose largest slice holds it, a page at
 * most 4 (the step between rungs) * 32 (the page / slice ratio) = 128 times
 * its size, the worst case the 16 GiB ladder always had (512 KiB + 1 byte
 * in a 64 MiB page). */
static uint64_t bound_for(uint64_t size) {
  return 128 * size > 32 * MiB ? 128 * size : 32 * MiB;
}

#define MAX_REPORTS 32

Test(small_buffers, a_buffer_on_a_huge_device_reserves_a_page_bounded_by_its_size) {
  static const uint64_t capacities[] = {UINT64_C(1) << 34, UINT64_C(141) * 1000 * 1000 * 1000,
                                        UINT64_C(1) << 40, UINT64_C(1) << 50,
                                        UINT64_C(1) << 58, UINT64_C(1) << 62};
  static const uint64_t sizes[] = {1, 177, 4 * KiB, 1 * MiB};
  for (size_t c = 0; c < sizeof capacities / sizeof capacities[0]; c++) {
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
      env e;
      env_options(&e);
      e.opts.memory_capacity = capacities[c];
      env_open(&e);
      EXPECT_OK(weft_memory_dry_run(e.dev, true));
      weft_buffer b;
      EXPECT_OK(weft_buffer_create(e.dev, 0, sizes[s], &b));
      weft_memory_usage u = {0};
      EXPECT_OK(weft_memory_usage_get(e.dev, &u));
      cr_assert_eq(u.number_allocs, 1);
      cr_assert_eq(u.bytes_in_use, sizes[s]);
      cr_assert_leq(u.bytes_reserved, bound_for(sizes[s]),
                    "capacity %" PRIu64 ": a %" PRIu64 "-byte buffer reserves %" PRIu64
                    " bytes (at most %" PRIu64 ")",
                    capacities[c], sizes[s], u.bytes_reserved, bound_for(sizes[s]));

      /* One page, in a sliced rung of the ladder, and only an identity. */
      weft_pool_report r[MAX_REPORTS] = {0};
      size_t n = MAX_REPORTS;
      EXPECT_OK(weft_memory_report_get(e.dev, 0, r, &n));
      cr_assert_leq(n, MAX_REPORTS, "capacity %" PRIu64 ": %zu pools", capacities[c], n);
      uint64_t pages = 0;
      for (size_t i = 0; i < n; i++) {
        pages += r[i].pages;
        cr_assert_eq(r[i].pages_unmapped, r[i].pages, "a dry run mapped a page");
        if (r[i].usage.number_allocs) {
          cr_assert_eq(r[i].kind, WEFT_POOL_SLICED, "capacity %" PRIu64 ": %" PRIu64 " bytes",
                       capacities[c], sizes[s]);
          cr_assert_eq(r[i].page_size, u.bytes_reserved);
        }
      }
      cr_assert_eq(pages, 1);
      weft_alloc_counts counts = weft_counting_allocator_counts(e.ca);
      cr_assert_lt(counts.live_bytes, 8 * MiB, "the device holds %" PRIu64 " bytes",
                   counts.live_bytes);

      EXPECT_OK(weft_buffer_release(e.dev, b));
      EXPECT_OK(weft_memory_dry_run(e.dev, false));
      env_close(&e);
    }
  }
}

Test(small_buffers, a_small_buffer_on_a_huge_device_is_real_and_small) {
  /* Not a dry run: the 177-byte buffer of the report, on a 2^58-byte host
   * device, holds its bytes in a page of at most 32 MiB. */
  env e;
  env_options(&e);
  e.opts.memory_capacity = UINT64_C(1) << 58;
  env_open(&e);
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 177, &b));
  uint8_t in[177], out[177];
  for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(i * 7 + 1);
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, in, sizeof in));
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, out, sizeof out));
  cr_assert_arr_eq(in, out, sizeof in);
  weft_memory_usage u = {0};
  EXPECT_OK(weft_memory_usage_get(e.dev, &u));
  cr_assert_leq(u.bytes_reserved, 32 * MiB, "177 bytes reserve %" PRIu64 " bytes",
                u.bytes_reserved);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}
