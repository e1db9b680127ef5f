/* Concurrent clients of one device: threads submitting on their own or
 * shared streams and buffers (every result verified), submissions ordered
 * across threads by a C11 atomic or a barrier (linearizable: what one thread
 * submitted before signalling is seen by what another submits after), racing
 * releases and registrations, and closing a device with work still queued or
 * buffers never released (drained, nothing leaked on the counting
 * allocator). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

/* ---- helpers --------------------------------------------------------------------------- */

/* Worker threads cannot use cr_assert (it longjmps on the main thread's
 * context): they record the first failure here and the test checks it. */
typedef struct failure_note {
  _Atomic int set;
  char text[1024];
} failure_note;

static failure_note note;

static void note_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note_fail(const char *fmt, ...) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&note.set, &expected, 1)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(note.text, sizeof(note.text), fmt, ap);
  va_end(ap);
}

/* In a worker: false (and a note) when |st| is an error. */
static bool ok(weft_status st, const char *what, int line) {
  if (!st) return true;
  char text[512];
  weft_error_format(st, text, sizeof(text));
  note_fail("line %d: %s failed: %s", line, what, text);
  weft_error_free(st);
  return false;
}
#define OK(call) ok((call), #call, __LINE__)

static void assert_no_note(void) {
  cr_assert_eq(atomic_load(&note.set), 0, "%s", note.text);
}

static env env_new_streams(uint32_t max_streams) {
  env e;
  env_options(&e);
  e.opts.max_streams = max_streams;
  env_open(&e);
  return e;
}

static const uint32_t one[3] = {1, 1, 1};

enum { ELEMS = 512, BYTES = ELEMS * 4 };

/* out = in + scalars[0] (uint32). Binding 0 in, 1 out; block b does its
 * slice of block[0] elements. */
static weft_status add_kernel(const weft_kernel_ctx *ctx, void *user) {
  _Atomic uint64_t *calls = user;
  if (calls) atomic_fetch_add_explicit(calls, 1, memory_order_relaxed);
  uint32_t k;
  memcpy(&k, ctx->scalars, 4);
  const uint32_t *in = ctx->buffers[0];
  uint32_t *out = ctx->buffers[1];
  uint64_t n = ctx->sizes[1] / 4, per = ctx->block[0], start = ctx->block_idx[0] * per;
  for (uint64_t i = start; i < start + per && i < n; i++) out[i] = in[i] + k;
  return NULL;
}

/* Fills binding 0 with scalars[0]. */
static weft_status fill_kernel(const weft_kernel_ctx *ctx, void *user) {
  _Atomic uint64_t *calls = user;
  if (calls) atomic_fetch_add_explicit(calls, 1, memory_order_relaxed);
  uint32_t v;
  memcpy(&v, ctx->scalars, 4);
  uint32_t *p = ctx->buffers[0];
  for (uint64_t i = 0; i < ctx->sizes[0] / 4; i++) p[i] = v;
  return NULL;
}

static weft_status boom_kernel(const weft_kernel_ctx *ctx, void *user) {
  _Atomic uint64_t *calls = user;
  (void)ctx;
  if (calls) atomic_fetch_add_explicit(calls, 1, memory_order_relaxed);
  return weft_error_make(WEFT_ERR_GENERIC, "injected");
}

static weft_status launch_add(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer in,
                              weft_buffer out, uint32_t v) {
  weft_binding bd[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  const uint32_t grid[3] = {4, 1, 1}, block[3] = {ELEMS / 4, 1, 1};
  return weft_launch(dev, s, k, grid, block, bd, 2, &v, 4);
}

static weft_status launch_fill(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer b,
                               uint32_t v) {
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  return weft_launch(dev, s, k, one, one, &bd, 1, &v, 4);
}

/* In a worker: reads |b| and checks every element is |want|. */
static bool check_all(weft_device *dev, weft_stream_id s, weft_buffer b, uint32_t want,
                      const char *what) {
  uint32_t got[ELEMS];
  if (!OK(weft_buffer_read(dev, s, b, 0, got, BYTES))) return false;
  for (int i = 0; i < ELEMS; i++) {
    if (got[i] != want) {
      note_fail("%s: element %d is %" PRIu32 ", expected %" PRIu32, what, i, got[i], want);
      return false;
    }
  }
  return true;
}

/* ---- independent and shared submitters ------------------------------------------------------- */

enum { THREADS = 4, CHAIN = 300 };

typedef struct client {
  weft_device *dev;
  weft_kernel add, fill;
  int t;
  bool share_streams; /* all clients on streams 0..3 instead of their own */
  weft_buffer shared; /* SHARED input (or {0}) */
  uint32_t shared_value;
  pthread_barrier_t *start;
} client;

static void *chain_client(void *arg) {
  client *c = arg;
  weft_device *dev = c->dev;
  uint32_t t = (uint32_t)c->t;
  weft_buffer p, q;
  if (!OK(weft_buffer_create(dev, 2 * t, BYTES, &p)) ||
      !OK(weft_buffer_create(dev, 2 * t + 1, BYTES, &q)))
    return NULL;
  pthread_barrier_wait(c->start);
  for (int round = 0; round < 3; round++) {
    uint32_t v = t * 100000 + (uint32_t)round * 1000;
    uint32_t host[ELEMS];
    for (int i = 0; i < ELEMS; i++) host[i] = v;
    if (!OK(weft_buffer_write(dev, weft_stream_current(), p, 0, host, BYTES))) return NULL;
    for (int i = 0; i < CHAIN; i++) {
      weft_stream_id s = c->share_streams ? (weft_stream_id)((i + c->t) % 4)
                                          : (weft_stream_id)(2 * t + (uint32_t)(i % 2));
      weft_buffer src = i % 2 ? q : p, dst = i % 2 ? p : q;
      if (!OK(launch_add(dev, s, c->add, src, dst, t + 1))) return NULL;
      v += t + 1;
    }
    /* CHAIN is even: the result is in p. */
    if (!check_all(dev, weft_stream_current(), p, v, "chain result")) return NULL;
  }
  OK(weft_buffer_release(dev, p));
  OK(weft_buffer_release(dev, q));
  return NULL;
}

static void run_clients(void *(*fn)(void *), bool share_streams, uint32_t max_streams) {
  env e = env_new_streams(max_streams);
  memset(&note, 0, sizeof(note));
  static _Atomic uint64_t calls;
  atomic_store(&calls, 0);
  weft_kernel add, fill;
  EXPECT_OK(weft_kernel_host(e.dev, "add", add_kernel, (void *)&calls, &add));
  EXPECT_OK(weft_kernel_host(e.dev, "fill", fill_kernel, NULL, &fill));
  weft_buffer shared;
  EXPECT_OK(weft_buffer_create(e.dev, 0, BYTES, &shared));
  EXPECT_OK(launch_fill(e.dev, 0, fill, shared, 4242));
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, THREADS);
  client cl[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    cl[t] = (client){.dev = e.dev,
                     .add = add,
                     .fill = fill,
                     .t = t,
                     .share_streams = share_streams,
                     .shared = shared,
                     .shared_value = 4242,
                     .start = &start};
    cr_assert_eq(pthread_create(&th[t], NULL, fn, &cl[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&start);
  assert_no_note();
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.launches_failed, 0);
  cr_assert_eq(s.launches_skipped, 0);
  EXPECT_OK(weft_buffer_release(e.dev, shared));
  env_close(&e);
}

Test(concurrency, four_threads_with_their_own_buffers_and_streams, .timeout = 120) {
  run_clients(chain_client, false, 8);
}

Test(concurrency, four_threads_sharing_the_stream_pool, .timeout = 120) {
  run_clients(chain_client, true, 4);
}

Test(concurrency, four_threads_on_one_folded_stream, .timeout = 120) {
  /* Every stream id folds onto the single slot. */
  run_clients(chain_client, true, 1);
}

/* Every client reads one shared input on its own stream, many times. */
static void *shared_input_client(void *arg) {
  client *c = arg;
  weft_device *dev = c->dev;
  uint32_t t = (uint32_t)c->t;
  weft_buffer out, out2;
  if (!OK(weft_buffer_create(dev, t, BYTES, &out)) || !OK(weft_buffer_create(dev, t, BYTES, &out2)))
    return NULL;
  pthread_barrier_wait(c->start);
  for (uint32_t i = 0; i < 200; i++) {
    weft_stream_id s = t + 4 * (i % 2); /* slots t and t + 4 of 8 */
    if (!OK(launch_add(dev, s, c->add, c->shared, out, t + i))) return NULL;
    if (!OK(launch_add(dev, s + 1, c->add, out, out2, 1))) return NULL;
    if (i % 20 == 0 || i == 199) {
      if (!check_all(dev, weft_stream_current(), out, c->shared_value + t + i, "shared + t + i"))
        return NULL;
      if (!check_all(dev, s, out2, c->shared_value + t + i + 1, "shared + t + i + 1")) return NULL;
    }
  }
  OK(weft_buffer_release(dev, out));
  OK(weft_buffer_release(dev, out2));
  return NULL;
}

Test(concurrency, four_threads_reading_one_shared_input, .timeout = 120) {
  run_clients(shared_input_client, false, 8);
}

Test(concurrency, shared_input_is_overwritten_only_after_every_reader, .timeout = 120) {
  /* Readers on four streams, then one writer on a fifth: the write waits
   * for every reader (write-after-read across streams). */
  env e = env_new_streams(8);
  weft_kernel add, fill;
  EXPECT_OK(weft_kernel_host(e.dev, "add", add_kernel, NULL, &add));
  EXPECT_OK(weft_kernel_host(e.dev, "fill", fill_kernel, NULL, &fill));
  weft_buffer in, out[4];
  EXPECT_OK(weft_buffer_create(e.dev, 0, BYTES, &in));
  for (int i = 0; i < 4; i++)
    EXPECT_OK(weft_buffer_create(e.dev, (weft_stream_id)i, BYTES, &out[i]));
  memset(&note, 0, sizeof(note));
  for (uint32_t it = 0; it < 50; it++) {
    EXPECT_OK(launch_fill(e.dev, 5, fill, in, it));
    for (int i = 0; i < 4; i++)
      EXPECT_OK(launch_add(e.dev, (weft_stream_id)i, add, in, out[i], (uint32_t)i));
    uint32_t host[ELEMS];
    for (int i = 0; i < ELEMS; i++) host[i] = 999999;
    EXPECT_OK(weft_buffer_write(e.dev, 4, in, 0, host, BYTES));
    for (int i = 0; i < 4; i++)
      cr_assert(check_all(e.dev, 6, out[i], it + (uint32_t)i, "reader of the old input"), "%s",
                note.text);
    cr_assert(check_all(e.dev, 7, in, 999999, "the new input"), "%s", note.text);
  }
  env_close(&e);
}

/* ---- linearizable submission across threads ---------------------------------------------------
 */

enum { HANDOFFS = 300 };

typedef struct handoff {
  weft_device *dev;
  weft_kernel add, fill;
  weft_buffer buf, out;
  _Atomic uint32_t posted, acked;
  bool by_launch;             /* A produces with a launch instead of a host write */
  pthread_barrier_t *barrier; /* NULL: the atomics hand off */
} handoff;

/* Both sides always complete the hand-off protocol (so neither can strand
 * the other on the barrier); a failure only stops the work. */
static void *producer_a(void *arg) {
  handoff *h = arg;
  weft_stream_id s = weft_stream_current();
  uint32_t host[ELEMS];
  for (uint32_t it = 1; it <= HANDOFFS; it++) {
    if (!atomic_load(&note.set)) {
      if (h->by_launch) {
        OK(launch_fill(h->dev, s, h->fill, h->buf, it * 7));
      } else {
        for (int i = 0; i < ELEMS; i++) host[i] = it * 7 + (uint32_t)(i % 3);
        OK(weft_buffer_write(h->dev, s, h->buf, 0, host, BYTES));
      }
    }
    /* The submission returned: anything submitted after this signal, by
     * any thread, is ordered after it. */
    if (h->barrier) {
      pthread_barrier_wait(h->barrier); /* posted */
      pthread_barrier_wait(h->barrier); /* B has submitted its reader */
    } else {
      atomic_store_explicit(&h->posted, it, memory_order_release);
      while (atomic_load_explicit(&h->acked, memory_order_acquire) != it) {
      }
    }
  }
  return NULL;
}

static void consume_one(handoff *h, weft_stream_id s, uint32_t it, weft_status launched) {
  uint32_t got[ELEMS];
  if (!OK(launched)) return;
  if (!OK(weft_buffer_read(h->dev, s, h->out, 0, got, BYTES))) return;
  for (int i = 0; i < ELEMS; i++) {
    uint32_t want = h->by_launch ? it * 7 : it * 7 + (uint32_t)(i % 3);
    if (got[i] != want) {
      note_fail("hand-off %" PRIu32 ": element %d is %" PRIu32 ", expected %" PRIu32
                " (an older value: the reader was not ordered after the producer)",
                it, i, got[i], want);
      return;
    }
  }
}

static void *consumer_b(void *arg) {
  handoff *h = arg;
  weft_stream_id s = weft_stream_current();
  for (uint32_t it = 1; it <= HANDOFFS; it++) {
    if (h->barrier) {
      pthread_barrier_wait(h->barrier);
    } else {
      while (atomic_load_explicit(&h->posted, memory_order_acquire) != it) {
      }
    }
    /* Another stream: the launch must be ordered after A's write/launch. */
    weft_status st = NULL;
    bool live = !atomic_load(&note.set);
    if (live) st = launch_add(h->dev, s, h->add, h->buf, h->out, 0);
    if (h->barrier)
      pthread_barrier_wait(h->barrier);
    else
      atomic_store_explicit(&h->acked, it, memory_order_release);
    if (live) consume_one(h, s, it, st);
  }
  return NULL;
}

static void run_handoff(bool by_launch, bool use_barrier) {
  env e = env_new_streams(4);
  memset(&note, 0, sizeof(note));
  static handoff h;
  memset(&h, 0, sizeof(h));
  h.dev = e.dev;
  h.by_launch = by_launch;
  EXPECT_OK(weft_kernel_host(e.dev, "add", add_kernel, NULL, &h.add));
  EXPECT_OK(weft_kernel_host(e.dev, "fill", fill_kernel, NULL, &h.fill));
  EXPECT_OK(weft_buffer_create(e.dev, 0, BYTES, &h.buf));
  EXPECT_OK(weft_buffer_create(e.dev, 1, BYTES, &h.out));
  pthread_barrier_t barrier;
  if (use_barrier) {
    pthread_barrier_init(&barrier, NULL, 2);
    h.barrier = &barrier;
  }
  pthread_t a, b;
  cr_assert_eq(pthread_create(&a, NULL, producer_a, &h), 0);
  cr_assert_eq(pthread_create(&b, NULL, consumer_b, &h), 0);
  pthread_join(b, NULL);
  pthread_join(a, NULL);
  if (use_barrier) pthread_barrier_destroy(&barrier);
  assert_no_note();
  env_close(&e);
}

Test(linearizable, write_then_atomic_signal_is_seen_by_a_launch_on_another_stream, .timeout = 120) {
  run_handoff(false, false);
}

Test(linearizable, launch_then_atomic_signal_is_seen_by_a_launch_on_another_stream,
     .timeout = 120) {
  run_handoff(true, false);
}

Test(linearizable, write_then_barrier_is_seen_by_a_launch_on_another_stream, .timeout = 120) {
  run_handoff(false, true);
}

/* ---- racing releases and registrations --------------------------------------------------------
 */

typedef struct racer {
  weft_device *dev;
  weft_buffer *bufs;
  int n;
  _Atomic int *wins;
  _Atomic int *not_found;
  pthread_barrier_t *start;
} racer;

static void *release_racer(void *arg) {
  racer *r = arg;
  pthread_barrier_wait(r->start);
  for (int i = 0; i < r->n; i++) {
    weft_status st = weft_buffer_release(r->dev, r->bufs[i]);
    if (!st) {
      atomic_fetch_add(&r->wins[i], 1);
    } else if (weft_error_kind_of(st) == WEFT_ERR_NOT_FOUND) {
      atomic_fetch_add(r->not_found, 1);
      weft_error_free(st);
    } else {
      ok(st, "weft_buffer_release", __LINE__);
    }
  }
  return NULL;
}

Test(concurrency, racing_releases_of_one_handle_succeed_exactly_once, .timeout = 120) {
  enum { N = 2000, R = 4 };
  env e = env_new_streams(4);
  memset(&note, 0, sizeof(note));
  static weft_buffer bufs[N];
  static _Atomic int wins[N];
  static _Atomic int not_found;
  atomic_store(&not_found, 0);
  for (int i = 0; i < N; i++) {
    atomic_store(&wins[i], 0);
    EXPECT_OK(weft_buffer_create(e.dev, (weft_stream_id)i, 64, &bufs[i]));
    if (i % 3 == 0) {
      uint8_t b[64] = {(uint8_t)i};
      EXPECT_OK(weft_buffer_write(e.dev, (weft_stream_id)i, bufs[i], 0, b, 64));
    }
  }
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, R);
  racer r[R];
  pthread_t th[R];
  for (int t = 0; t < R; t++) {
    r[t] = (racer){e.dev, bufs, N, wins, &not_found, &start};
    cr_assert_eq(pthread_create(&th[t], NULL, release_racer, &r[t]), 0);
  }
  for (int t = 0; t < R; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&start);
  assert_no_note();
  for (int i = 0; i < N; i++)
    cr_assert_eq(atomic_load(&wins[i]), 1, "buffer %d released %d times", i, atomic_load(&wins[i]));
  cr_assert_eq(atomic_load(&not_found), N * (R - 1));
  for (weft_stream_id s = 0; s < 4; s++) EXPECT_OK(weft_sync(e.dev, s));
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.buffers_live, 0);
  env_close(&e);
}

typedef struct registrar {
  weft_device *dev;
  int t;
  weft_kernel ks[64];
  pthread_barrier_t *start;
} registrar;

static void *register_and_launch(void *arg) {
  registrar *r = arg;
  pthread_barrier_wait(r->start);
  weft_buffer b;
  if (!OK(weft_buffer_create(r->dev, weft_stream_current(), BYTES, &b))) return NULL;
  for (int i = 0; i < 64; i++) {
    char name[32];
    snprintf(name, sizeof(name), "fill_%d_%d", r->t, i);
    if (!OK(weft_kernel_host(r->dev, name, fill_kernel, NULL, &r->ks[i]))) return NULL;
    if (!OK(launch_fill(r->dev, weft_stream_current(), r->ks[i], b, (uint32_t)(r->t * 1000 + i))))
      return NULL;
  }
  check_all(r->dev, weft_stream_current(), b, (uint32_t)(r->t * 1000 + 63), "last fill");
  OK(weft_buffer_release(r->dev, b));
  return NULL;
}

Test(concurrency, kernels_registered_concurrently_are_distinct_and_launch, .timeout = 120) {
  env e = env_new_streams(4);
  memset(&note, 0, sizeof(note));
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, THREADS);
  static registrar r[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    r[t] = (registrar){.dev = e.dev, .t = t, .start = &start};
    cr_assert_eq(pthread_create(&th[t], NULL, register_and_launch, &r[t]), 0);
  }
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&start);
  assert_no_note();
  for (int t = 0; t < THREADS; t++)
    for (int i = 0; i < 64; i++)
      for (int u = 0; u <= t; u++)
        for (int j = 0; j < (u == t ? i : 64); j++)
          cr_assert_neq(r[t].ks[i].id, r[u].ks[j].id, "two registrations got one kernel id");
  env_close(&e);
}

/* ---- closing with work pending ------------------------------------------------------------------
 */

Test(close, with_thousands_of_queued_launches_drains_them_and_leaks_nothing, .timeout = 120) {
  enum { LAUNCHES = 8000, BUFS = 8 };
  env e = env_new_streams(4);
  static _Atomic uint64_t calls;
  atomic_store(&calls, 0);
  weft_kernel add, fill;
  EXPECT_OK(weft_kernel_host(e.dev, "add", add_kernel, (void *)&calls, &add));
  EXPECT_OK(weft_kernel_host(e.dev, "fill", fill_kernel, (void *)&calls, &fill));
  weft_buffer b[BUFS];
  for (int i = 0; i < BUFS; i++) {
    EXPECT_OK(weft_buffer_create(e.dev, (weft_stream_id)i, BYTES, &b[i]));
    EXPECT_OK(launch_fill(e.dev, (weft_stream_id)i, fill, b[i], (uint32_t)i));
  }
  uint64_t blocks = BUFS;
  /* Dependent launches criss-crossing the streams; nobody waits. */
  for (int i = 0; i < LAUNCHES; i++) {
    EXPECT_OK(
        launch_add(e.dev, (weft_stream_id)(i % 4), add, b[i % BUFS], b[(i * 3 + 1) % BUFS], 1));
    blocks += 4;
  }
  /* Released with work pending: freed once the work is done. */
  for (int i = 0; i < BUFS / 2; i++) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  env_close(&e); /* asserts live_blocks == 0 */
  cr_assert_eq(atomic_load(&calls), blocks, "close dropped or repeated kernel calls");
}

Test(close, with_queued_failures_and_skips_leaks_nothing, .timeout = 120) {
  enum { LAUNCHES = 3000, BUFS = 6 };
  env e = env_new_streams(4);
  static _Atomic uint64_t calls;
  atomic_store(&calls, 0);
  weft_kernel add, fill, boom;
  EXPECT_OK(weft_kernel_host(e.dev, "add", add_kernel, (void *)&calls, &add));
  EXPECT_OK(weft_kernel_host(e.dev, "fill", fill_kernel, (void *)&calls, &fill));
  EXPECT_OK(weft_kernel_host(e.dev, "boom", boom_kernel, (void *)&calls, &boom));
  weft_buffer b[BUFS];
  for (int i = 0; i < BUFS; i++)
    EXPECT_OK(weft_buffer_create(e.dev, (weft_stream_id)i, BYTES, &b[i]));
  for (int i = 0; i < LAUNCHES; i++) {
    weft_stream_id s = (weft_stream_id)(i % 4);
    if (i % 97 == 0)
      EXPECT_OK(launch_fill(e.dev, s, boom, b[i % BUFS], 0));
    else if (i % 13 == 0)
      EXPECT_OK(launch_fill(e.dev, s, fill, b[i % BUFS], (uint32_t)i));
    else
      EXPECT_OK(launch_add(e.dev, s, add, b[i % BUFS], b[(i + 1) % BUFS], 1));
  }
  env_close(&e);
}

Test(close, with_unreleased_buffers_frees_them, .timeout = 120) {
  env e;
  env_options(&e);
  e.opts.memory_capacity = 256 * 1024;
  env_open(&e);
  weft_kernel fill;
  EXPECT_OK(weft_kernel_host(e.dev, "fill", fill_kernel, NULL, &fill));
  weft_buffer b[300];
  for (int i = 0; i < 300; i++) {
    /* Some of these do not fit the capacity: never allocated. */
    EXPECT_OK(weft_buffer_create(e.dev, (weft_stream_id)i, 1024 + (uint64_t)i * 8, &b[i]));
    if (i % 2) EXPECT_OK(launch_fill(e.dev, (weft_stream_id)i, fill, b[i], (uint32_t)i));
    if (i % 5 == 0) {
      uint8_t bytes[64] = {1};
      EXPECT_OK(weft_buffer_write(e.dev, (weft_stream_id)i + 1, b[i], 0, bytes, 64));
    }
  }
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.buffers_live, 300);
  for (int i = 0; i < 300; i += 7) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  env_close(&e);
}

Test(close, right_after_open_and_with_idle_streams, .timeout = 60) {
  for (int round = 0; round < 20; round++) {
    env e = env_new_streams(64);
    for (weft_stream_id s = 0; s < (weft_stream_id)round * 3; s++) {
      weft_buffer b;
      EXPECT_OK(weft_buffer_create(e.dev, s, 64, &b));
      uint8_t bytes[64] = {0};
      EXPECT_OK(weft_buffer_write(e.dev, s, b, 0, bytes, 64));
    }
    env_close(&e);
  }
}

typedef struct closer_client {
  weft_device *dev;
  weft_kernel add;
  weft_buffer in, out;
  int t;
} closer_client;

static void *submit_burst(void *arg) {
  closer_client *c = arg;
  for (int i = 0; i < 1000; i++)
    if (!OK(launch_add(c->dev, (weft_stream_id)(c->t + i), c->add, c->in, c->out, 1))) break;
  return NULL;
}

Test(close, after_concurrent_bursts_with_nothing_synced, .timeout = 120) {
  env e = env_new_streams(4);
  memset(&note, 0, sizeof(note));
  static _Atomic uint64_t calls;
  atomic_store(&calls, 0);
  weft_kernel add, fill;
  EXPECT_OK(weft_kernel_host(e.dev, "add", add_kernel, (void *)&calls, &add));
  EXPECT_OK(weft_kernel_host(e.dev, "fill", fill_kernel, NULL, &fill));
  closer_client c[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    c[t] = (closer_client){.dev = e.dev, .add = add, .t = t};
    EXPECT_OK(weft_buffer_create(e.dev, (weft_stream_id)t, BYTES, &c[t].in));
    EXPECT_OK(weft_buffer_create(e.dev, (weft_stream_id)t, BYTES, &c[t].out));
    EXPECT_OK(launch_fill(e.dev, (weft_stream_id)t, fill, c[t].in, 1));
  }
  for (int t = 0; t < THREADS; t++)
    cr_assert_eq(pthread_create(&th[t], NULL, submit_burst, &c[t]), 0);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  assert_no_note();
  env_close(&e);
  cr_assert_eq(atomic_load(&calls), (uint64_t)THREADS * 1000 * 4);
}
