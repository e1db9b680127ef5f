/* The steady-state launch path allocates nothing: commands come from the
 * device's free lists, the write scope is pooled and payload-free, taint
 * views hold one claim inline. Proven with a counting allocator. */
#include <criterion/criterion.h>
#include <stdatomic.h>

#include <weft/weft.h>

static _Atomic int gate;
static _Atomic uint64_t calls;

static weft_status hold(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate)) {
  }
  return NULL;
}

static weft_status axpy(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const float *x = ctx->buffers[0], *y = ctx->buffers[1];
  float *o = ctx->buffers[2], *p = ctx->buffers[3];
  o[0] = x[0] + y[0];
  p[0] = o[0] * 2;
  atomic_fetch_add(&calls, 1);
  return NULL;
}

#define OK(x) cr_assert_null((x))

Test(zero_alloc, one_hundred_thousand_launches_allocate_nothing_once_warm, .timeout = 120) {
  weft_counting_allocator *ca;
  OK(weft_counting_allocator_create(&ca));
  weft_allocator a = weft_counting_allocator_get(ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &a;
  weft_device *dev;
  OK(weft_device_open(&o, &dev));
  weft_kernel kh, k;
  OK(weft_kernel_host(dev, "hold", hold, NULL, &kh));
  OK(weft_kernel_host(dev, "axpy", axpy, NULL, &k));
  weft_buffer b[4];
  for (int i = 0; i < 4; i++) OK(weft_buffer_create(dev, 0, 64, &b[i]));
  float one = 1;
  OK(weft_buffer_write(dev, 0, b[0], 0, &one, sizeof(one)));
  OK(weft_buffer_write(dev, 0, b[1], 0, &one, sizeof(one)));
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd[4] = {{b[0], 0, WEFT_WHOLE, WEFT_READ},
                        {b[1], 0, WEFT_WHOLE, WEFT_READ},
                        {b[2], 0, WEFT_WHOLE, WEFT_WRITE},
                        {b[3], 0, WEFT_WHOLE, WEFT_WRITE}};
  /* Warm-up: a held stream keeps 1000 launches outstanding at once, so the
   * command pool holds more than the measured batches ever need, even when
   * the thread that retires them is preempted for a while on a loaded
   * machine (a combining device under ASan in CI once needed a 301st). */
  enum { BATCH = 100, WARM = 1000, N = 100000 };
  atomic_store(&gate, 0);
  OK(weft_launch(dev, 0, kh, g, g, NULL, 0, NULL, 0));
  for (int i = 0; i < WARM; i++) OK(weft_launch(dev, 0, k, g, g, bd, 4, NULL, 0));
  atomic_store(&gate, 1);
  OK(weft_sync(dev, 0));
  /* Then the measured workload itself once: the pools' high-water mark
   * depends on how far retirement lags (more with a combining scheduler),
   * and growth up to it is not a per-launch cost. */
  for (int i = 0; i < 10 + N / BATCH; i++) {
    for (int j = 0; j < BATCH; j++) OK(weft_launch(dev, 0, k, g, g, bd, 4, NULL, 0));
    OK(weft_sync(dev, 0));
  }
  weft_device_stats st;
  OK(weft_device_stats_get(dev, &st));
  weft_alloc_counts before = weft_counting_allocator_counts(ca);
  for (int i = 0; i < N / BATCH; i++) {
    for (int j = 0; j < BATCH; j++) OK(weft_launch(dev, 0, k, g, g, bd, 4, NULL, 0));
    OK(weft_sync(dev, 0));
  }
  OK(weft_device_stats_get(dev, &st));
  weft_alloc_counts after = weft_counting_allocator_counts(ca);
  cr_assert_eq(after.allocs, before.allocs, "%llu allocations over %d launches once warm",
               (unsigned long long)(after.allocs - before.allocs), N);
  cr_assert_eq(atomic_load(&calls), (uint64_t)(WARM + 10 * BATCH + 2 * N));
  cr_assert_eq(st.launches_failed + st.launches_skipped, 0);
  float got = 0;
  OK(weft_buffer_read(dev, 0, b[3], 0, &got, sizeof(got)));
  cr_assert_eq(got, 4.0f);
  weft_device_close(dev);
  cr_assert_eq(weft_counting_allocator_counts(ca).live_blocks, 0);
  weft_counting_allocator_destroy(ca);
}
