/* Small uint32 kernels and helpers shared by the scheduler, capture and task
 * graph suites: set, add, sum and in-place inc over 64-element buffers, each
 * with an optional delay before it touches memory (so that a consumer the
 * scheduler failed to order would read old bytes). Include after
 * <criterion/criterion.h> and "support/device_env.h". */
#ifndef WEFT_TESTS_UINT_KERNELS_H
#define WEFT_TESTS_UINT_KERNELS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include <weft/weft.h>

enum { ELEMS = 64 };
#define BYTES (ELEMS * sizeof(uint32_t))

static const uint32_t one[3] __attribute__((unused)) = {1, 1, 1};

static inline weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s;
}

static inline weft_buffer make_buffer(weft_device *dev, weft_stream_id stream) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(dev, stream, BYTES, &b));
  return b;
}

static inline void sleep_us(unsigned us) {
  struct timespec ts = {us / 1000000u, (long)(us % 1000000u) * 1000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

/* ---- kernels ------------------------------------------------------------------------------
 * Scalars: {value, delay_us}. The delay runs before the kernel touches memory,
 * so a consumer that is not ordered after it reads the old bytes. */
typedef struct args {
  uint32_t value, delay_us;
} args;

static _Atomic uint64_t kernel_calls __attribute__((unused));

/* out = value (binding 0, write). */
static inline weft_status k_set(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const args *a = ctx->scalars;
  atomic_fetch_add(&kernel_calls, 1);
  if (a->delay_us) sleep_us(a->delay_us);
  uint32_t *out = ctx->buffers[0];
  for (size_t i = 0; i < ctx->sizes[0] / 4; i++) out[i] = a->value;
  return NULL;
}

/* out = in + value (binding 0 read, 1 write). */
static inline weft_status k_add(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const args *a = ctx->scalars;
  atomic_fetch_add(&kernel_calls, 1);
  if (a->delay_us) sleep_us(a->delay_us);
  const uint32_t *in = ctx->buffers[0];
  uint32_t *out = ctx->buffers[1];
  for (size_t i = 0; i < ctx->sizes[1] / 4; i++) out[i] = in[i] + a->value;
  return NULL;
}

/* out = in0 + in1 (bindings 0, 1 read; 2 write). */
static inline weft_status k_sum(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const args *a = ctx->scalars;
  atomic_fetch_add(&kernel_calls, 1);
  if (a->delay_us) sleep_us(a->delay_us);
  const uint32_t *x = ctx->buffers[0], *y = ctx->buffers[1];
  uint32_t *out = ctx->buffers[2];
  for (size_t i = 0; i < ctx->sizes[2] / 4; i++) out[i] = x[i] + y[i];
  return NULL;
}

/* x += value in place (binding 0, read-write). */
static inline weft_status k_inc(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const args *a = ctx->scalars;
  atomic_fetch_add(&kernel_calls, 1);
  if (a->delay_us) sleep_us(a->delay_us);
  uint32_t *x = ctx->buffers[0];
  for (size_t i = 0; i < ctx->sizes[0] / 4; i++) x[i] += a->value;
  return NULL;
}

typedef struct kernels {
  weft_kernel set, add, sum, inc;
} kernels;

static inline kernels make_kernels(weft_device *dev) {
  kernels k;
  EXPECT_OK(weft_kernel_host(dev, "set", k_set, NULL, &k.set));
  EXPECT_OK(weft_kernel_host(dev, "add", k_add, NULL, &k.add));
  EXPECT_OK(weft_kernel_host(dev, "sum", k_sum, NULL, &k.sum));
  EXPECT_OK(weft_kernel_host(dev, "inc", k_inc, NULL, &k.inc));
  return k;
}

static inline void set(weft_device *dev, const kernels *k, weft_stream_id s, weft_buffer out,
                       uint32_t value, uint32_t delay_us) {
  weft_binding b = {out, 0, WEFT_WHOLE, WEFT_WRITE};
  args a = {value, delay_us};
  EXPECT_OK(weft_launch(dev, s, k->set, one, one, &b, 1, &a, sizeof(a)));
}

static inline void add(weft_device *dev, const kernels *k, weft_stream_id s, weft_buffer in,
                       weft_buffer out, uint32_t value, uint32_t delay_us) {
  weft_binding b[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  args a = {value, delay_us};
  EXPECT_OK(weft_launch(dev, s, k->add, one, one, b, 2, &a, sizeof(a)));
}

static inline void sum(weft_device *dev, const kernels *k, weft_stream_id s, weft_buffer x,
                       weft_buffer y, weft_buffer out, uint32_t delay_us) {
  weft_binding b[3] = {{x, 0, WEFT_WHOLE, WEFT_READ},
                       {y, 0, WEFT_WHOLE, WEFT_READ},
                       {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  args a = {0, delay_us};
  EXPECT_OK(weft_launch(dev, s, k->sum, one, one, b, 3, &a, sizeof(a)));
}

static inline void inc(weft_device *dev, const kernels *k, weft_stream_id s, weft_buffer x,
                       uint32_t value, uint32_t delay_us) {
  weft_binding b = {x, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  args a = {value, delay_us};
  EXPECT_OK(weft_launch(dev, s, k->inc, one, one, &b, 1, &a, sizeof(a)));
}

/* Every element of |buf| equals |want|. */
static inline void expect_all(weft_device *dev, weft_stream_id s, weft_buffer buf, uint32_t want,
                              const char *what) {
  uint32_t got[ELEMS];
  EXPECT_OK(weft_buffer_read(dev, s, buf, 0, got, BYTES));
  for (int i = 0; i < ELEMS; i++)
    cr_assert_eq(got[i], want, "%s: element %d is %u, expected %u", what, i, got[i], want);
}

/* Holding the scheduler, so that launches submitted meanwhile reach it in
 * one take (no idle flush between them): a slow kernel runs on |slow_stream|
 * and another thread asks for a memory cleanup of |stream|, which makes the
 * scheduler drain (wait for that kernel) while the caller submits. |ms| is
 * the kernel's length; hold_end joins the thread. */
typedef struct hold {
  weft_device *dev;
  weft_stream_id stream;
  pthread_t thread;
} hold;

static inline void *hold_cleanup(void *arg) {
  hold *h = arg;
  weft_error_free(weft_memory_cleanup(h->dev, h->stream));
  return NULL;
}

static inline void hold_begin(hold *h, weft_device *dev, const kernels *k, weft_buffer slow_buf,
                              weft_stream_id slow_stream, weft_stream_id stream, unsigned ms) {
  h->dev = dev;
  h->stream = stream;
  inc(dev, k, slow_stream, slow_buf, 1, ms * 1000u);
  cr_assert_eq(pthread_create(&h->thread, NULL, hold_cleanup, h), 0);
  sleep_us(ms * 1000u / 4); /* the scheduler is draining by now */
}

static inline void hold_end(hold *h) {
  pthread_join(h->thread, NULL);
}

#endif
