/* The host pool's thread cap (options.host_threads): streams share fewer
 * threads and still run in order, cross-stream hazards still hold, a chain
 * longer than a thread's run budget stays correct, and a bad cap is refused. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdint.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"
#include "support/uint_kernels.h"

static weft_device *open_with_threads(uint32_t threads, uint32_t streams) {
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = streams;
  o.host_threads = threads;
  weft_device *dev = NULL;
  EXPECT_OK(weft_device_open(&o, &dev));
  return dev;
}

Test(host_threads, a_cap_above_the_stream_limit_is_refused) {
  weft_device_options o;
  weft_device_options_init(&o);
  o.host_threads = 65; /* WEFT_MAX_STREAMS is 64 */
  weft_device *dev = (weft_device *)1;
  weft_status st = weft_device_open(&o, &dev);
  cr_assert_not_null(st);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_null(dev);
  weft_error_free(st);
}

/* One thread for four streams: every stream's chain completes, and a chain
 * that reads across streams (the cross-stream wait of a stream that shares
 * the only thread) does not deadlock. */
Test(host_threads, one_thread_runs_four_streams_with_cross_stream_reads, .timeout = 60) {
  weft_device *dev = open_with_threads(1, 4);
  kernels k = make_kernels(dev);
  weft_buffer x[4];
  for (int s = 0; s < 4; s++) x[s] = make_buffer(dev, (weft_stream_id)s);
  for (int s = 0; s < 4; s++) set(dev, &k, (weft_stream_id)s, x[s], (uint32_t)s, 200);
  for (int round = 0; round < 50; round++)
    for (int s = 0; s < 4; s++) inc(dev, &k, (weft_stream_id)s, x[s], 1, 0);
  /* Each stream now reads its neighbour's buffer: waits on a stream that may
   * be queued behind it on the same thread. */
  weft_buffer y[4];
  for (int s = 0; s < 4; s++) y[s] = make_buffer(dev, (weft_stream_id)s);
  for (int s = 0; s < 4; s++) add(dev, &k, (weft_stream_id)s, x[(s + 1) % 4], y[s], 1000, 0);
  for (int s = 0; s < 4; s++)
    expect_all(dev, (weft_stream_id)s, y[s], (uint32_t)((s + 1) % 4) + 50 + 1000, "y");
  weft_device_stats st = {0};
  EXPECT_OK(weft_device_stats_get(dev, &st));
  cr_assert_eq(st.streams_created, 4);
  cr_assert_geq(st.cross_stream_waits, 1);
  for (int s = 0; s < 4; s++) EXPECT_OK(weft_buffer_release(dev, x[s]));
  for (int s = 0; s < 4; s++) EXPECT_OK(weft_buffer_release(dev, y[s]));
  weft_device_close(dev);
}

/* A chain of 3000 launches on one stream (past the pool's run budget of 256,
 * where a thread offers the stream to others) beside a second stream's. */
Test(host_threads, chains_past_the_run_budget_stay_in_order, .timeout = 60) {
  weft_device *dev = open_with_threads(2, 2);
  kernels k = make_kernels(dev);
  weft_buffer a = make_buffer(dev, 0), b = make_buffer(dev, 1);
  set(dev, &k, 0, a, 0, 0);
  set(dev, &k, 1, b, 0, 0);
  for (int i = 0; i < 3000; i++) {
    inc(dev, &k, 0, a, 1, 0);
    if (i % 3 == 0) inc(dev, &k, 1, b, 1, 0);
  }
  expect_all(dev, 0, a, 3000, "a");
  expect_all(dev, 1, b, 1000, "b");
  EXPECT_OK(weft_buffer_release(dev, a));
  EXPECT_OK(weft_buffer_release(dev, b));
  weft_device_close(dev);
}
