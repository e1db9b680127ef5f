/* Back-pressure: a client past max_pending_commands waits until the
 * scheduler catches up; nothing is dropped, the device never stalls, and the
 * device's own threads (workers) never wait. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"

#define OK(x) cr_assert_null((x))

static _Atomic uint64_t calls;

static weft_status inc(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint64_t *x = ctx->buffers[0];
  x[0]++;
  for (volatile int i = 0; i < 200; i++) {
  }
  atomic_fetch_add(&calls, 1);
  return NULL;
}

typedef struct producer {
  weft_device *dev;
  weft_kernel k;
  weft_buffer b;
  weft_stream_id stream;
  int n;
} producer;

static void *produce(void *arg) {
  producer *p = arg;
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd = {p->b, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (int i = 0; i < p->n; i++) OK(weft_launch(p->dev, p->stream, p->k, g, g, &bd, 1, NULL, 0));
  return NULL;
}

static weft_device *open_capped(weft_counting_allocator **ca, weft_allocator *a, uint32_t cap) {
  OK(weft_counting_allocator_create(ca));
  *a = weft_counting_allocator_get(*ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = a;
  o.max_pending_commands = cap;
  weft_device *dev;
  OK(weft_device_open(&o, &dev));
  return dev;
}

static void close_capped(weft_device *dev, weft_counting_allocator *ca) {
  weft_device_close(dev);
  cr_assert_eq(weft_counting_allocator_counts(ca).live_blocks, 0);
  weft_counting_allocator_destroy(ca);
  ASSERT_NO_LEAKS();
}

Test(backpressure, eight_producers_over_a_small_cap_lose_nothing, .timeout = 120) {
  enum { P = 8, N = 4000, CAP = 32 };
  weft_counting_allocator *ca;
  weft_allocator a;
  weft_device *dev = open_capped(&ca, &a, CAP);
  weft_kernel k;
  OK(weft_kernel_host(dev, "inc", inc, NULL, &k));
  producer p[P];
  pthread_t t[P];
  atomic_store(&calls, 0);
  for (int i = 0; i < P; i++) {
    p[i] = (producer){.dev = dev, .k = k, .stream = (weft_stream_id)i, .n = N};
    OK(weft_buffer_create(dev, p[i].stream, sizeof(uint64_t), &p[i].b));
    uint64_t zero = 0;
    OK(weft_buffer_write(dev, p[i].stream, p[i].b, 0, &zero, sizeof(zero)));
  }
  for (int i = 0; i < P; i++) cr_assert_eq(pthread_create(&t[i], NULL, produce, &p[i]), 0);
  for (int i = 0; i < P; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < P; i++) {
    uint64_t got = 0;
    OK(weft_buffer_read(dev, p[i].stream, p[i].b, 0, &got, sizeof(got)));
    cr_assert_eq(got, (uint64_t)N, "producer %d: %llu of %d launches ran", i,
                 (unsigned long long)got, N);
  }
  weft_device_stats st;
  OK(weft_device_stats_get(dev, &st));
  cr_assert_eq(atomic_load(&calls), (uint64_t)P * N);
  /* Producers that saw room at the same moment may overshoot by one each. */
  cr_assert_leq(st.pending_peak, (uint64_t)CAP + P + 2, "peak %llu over a cap of %d",
                (unsigned long long)st.pending_peak, CAP);
  cr_assert_gt(st.backpressure_waits, 0, "8 producers on 2 cores never hit a cap of 32?");
  close_capped(dev, ca);
}

/* A kernel that submits to its own device: its worker must not wait for
 * room, since it is what the device needs to make room. */
static weft_device *self_dev;
static weft_kernel self_inc;
static weft_buffer self_buf;

static weft_status submit_more(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd = {self_buf, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (int i = 0; i < 64; i++) {
    weft_status st = weft_launch(self_dev, 1, self_inc, g, g, &bd, 1, NULL, 0);
    if (st) return st;
  }
  return NULL;
}

Test(backpressure, a_worker_submitting_to_its_own_device_never_waits, .timeout = 60) {
  weft_counting_allocator *ca;
  weft_allocator a;
  weft_device *dev = open_capped(&ca, &a, 4);
  self_dev = dev;
  weft_kernel more;
  OK(weft_kernel_host(dev, "inc", inc, NULL, &self_inc));
  OK(weft_kernel_host(dev, "submit_more", submit_more, NULL, &more));
  OK(weft_buffer_create(dev, 1, sizeof(uint64_t), &self_buf));
  uint64_t zero = 0;
  OK(weft_buffer_write(dev, 1, self_buf, 0, &zero, sizeof(zero)));
  const uint32_t g[3] = {1, 1, 1};
  for (int i = 0; i < 8; i++) OK(weft_launch(dev, 0, more, g, g, NULL, 0, NULL, 0));
  OK(weft_sync(dev, 0));
  OK(weft_sync(dev, 1));
  uint64_t got = 0;
  OK(weft_buffer_read(dev, 1, self_buf, 0, &got, sizeof(got)));
  cr_assert_eq(got, 8 * 64);
  close_capped(dev, ca);
}
