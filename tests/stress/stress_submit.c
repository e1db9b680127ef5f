/* stress_submit: many producer threads on few streams, checked against a host
 * model. A plain main() (no Criterion) so that it runs under ThreadSanitizer.
 *
 *   stress_submit [scale [seed]]     scale: a positive number (default 1)
 *
 * 8 producer threads share one device of 4 streams. Each owns a few buffers
 * and runs a seeded random program of launches (1-2 inputs from its own or
 * shared buffers, random streams, so dependencies cross streams all the time),
 * injected kernel failures, host writes (full and partial), reads, checks,
 * syncs and release/re-create, keeping a host model of every buffer: its
 * bytes, or the failure it carries. Every read is checked against the model
 * (data, or the root error and id of the failure), every kernel call is
 * counted (no launch lost or run twice, no skipped launch run), and the
 * device's statistics must match the model's counts. Finally every producer
 * queues a burst of launches and the device is closed with them still queued:
 * close must run all of them and give back every block it took.
 *
 * Then the thread caches (submit.c): rounds of short-lived threads, more
 * than a device has credit seats, launch on random streams of six devices
 * (more than a thread caches for at once: slots are reused) and exit holding
 * cached credits and commands; midway through each round a device is closed
 * while they are alive and cache for it, and a new one takes its place.
 * Every launch must run once, and in the end every stream budget must take
 * exactly max_pending commands from a new thread: no credit lost.
 *
 * Exit status 0 on success; 1 with a message on the first mismatch. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

enum {
  THREADS = 8,
  STREAMS = 4,
  OWN = 6,     /* buffers per producer */
  SHARED = 4,  /* read-only buffers every producer may read */
  ELEMS = 256, /* uint32 per buffer */
  GRID = 4,    /* blocks per launch */
  MAX_FAILS = 4096,
  BURST = 300, /* launches left queued at close, per producer */
};

#define BYTES (ELEMS * sizeof(uint32_t))

/* ---- reporting --------------------------------------------------------------------------- */

static _Atomic int failed;
static char failure_text[2048];
static long ops_per_thread; /* set by main before any producer starts */

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...) {
  int expected = 0;
  if (!atomic_compare_exchange_strong(&failed, &expected, 1)) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(failure_text, sizeof(failure_text), fmt, ap);
  va_end(ap);
}

static bool ok(weft_status st, const char *what, int t, int line) {
  if (!st) return true;
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  fail("thread %d, line %d: %s failed: %s", t, line, what, text);
  weft_error_free(st);
  return false;
}
#define OK(t, call) ok((call), #call, (t), __LINE__)

/* ---- the kernel ---------------------------------------------------------------------------- */

/* Bindings: 0 = out (WRITE, or READ_WRITE when MIX_ACCUMULATE), 1 = in1,
 * [2 = in2 when MIX_TWO_INPUTS]. out[i] = a * in1[i] + (in2[i]) + c (+ out[i]).
 * MIX_FAIL: the first block returns an error named "t<thread>-f<failure>". */
enum { MIX_TWO_INPUTS = 1, MIX_ACCUMULATE = 2, MIX_FAIL = 4 };

typedef struct mix_args {
  uint32_t a, c, flags, thread, failure;
} mix_args;

static _Atomic uint64_t kernel_calls;

static weft_status mix_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  atomic_fetch_add_explicit(&kernel_calls, 1, memory_order_relaxed);
  mix_args m;
  if (ctx->scalar_bytes != sizeof(m)) return weft_error_make(WEFT_ERR_VALIDATION, "scalars");
  memcpy(&m, ctx->scalars, sizeof(m));
  if (m.flags & MIX_FAIL)
    return weft_error_make(WEFT_ERR_GENERIC, "t%" PRIu32 "-f%" PRIu32, m.thread, m.failure);
  size_t want = (m.flags & MIX_TWO_INPUTS) ? 3 : 2;
  if (ctx->num_buffers != want) return weft_error_make(WEFT_ERR_VALIDATION, "bindings");
  uint32_t *out = ctx->buffers[0];
  const uint32_t *in1 = ctx->buffers[1];
  const uint32_t *in2 = (m.flags & MIX_TWO_INPUTS) ? ctx->buffers[2] : NULL;
  uint32_t per = ctx->block[0], start = ctx->block_idx[0] * per;
  for (uint32_t i = start; i < start + per && i < ELEMS; i++) {
    uint32_t v = m.a * in1[i] + m.c;
    if (in2) v += in2[i];
    if (m.flags & MIX_ACCUMULATE) v += out[i];
    out[i] = v;
  }
  return NULL;
}

/* ---- the model ------------------------------------------------------------------------------ */

typedef struct model_buf {
  weft_buffer h;
  uint32_t data[ELEMS];
  uint32_t fail; /* 0: clean; else the index of the failure it carries (its thread's table) */
  uint32_t fail_thread;
} model_buf;

typedef struct producer {
  int t;
  weft_device *dev;
  weft_kernel mix;
  model_buf own[OWN];
  model_buf *shared; /* [SHARED], read-only */
  uint64_t rng;
  uint32_t nfails;
  uint32_t nkernels; /* kernels this thread registered */
  /* the model's counts */
  uint64_t launches, run, failed, skipped, calls, reads_checked, failures_seen;
  pthread_barrier_t *phase;
} producer;

/* Failure ids as observed, per thread and failure index: ids never change. */
static _Atomic uint64_t failure_ids[THREADS][MAX_FAILS + 1];

static uint64_t next(producer *p) {
  uint64_t x = p->rng;
  x ^= x << 13, x ^= x >> 7, x ^= x << 17;
  return p->rng = x;
}

static uint32_t below(producer *p, uint32_t n) {
  return (uint32_t)(next(p) % n);
}

static weft_stream_id pick_stream(producer *p) {
  /* any id folds onto the 4 slots; the thread's own id sometimes */
  if (below(p, 5) == 0) return weft_stream_current();
  return (weft_stream_id)below(p, 3 * STREAMS) + (uint64_t)below(p, 4) * 1000003u;
}

static model_buf *pick_input(producer *p, const model_buf * not ) {
  for (;;) {
    model_buf *b = below(p, 4) == 0 ? &p->shared[below(p, SHARED)] : &p->own[below(p, OWN)];
    if (b != not ) return b;
  }
}

/* Submits one launch and applies it to the model. */
static bool do_launch(producer *p, bool may_fail) {
  model_buf *out = &p->own[below(p, OWN)];
  model_buf *in1 = pick_input(p, out), *in2 = NULL;
  mix_args m = {.a = below(p, 7) + 1, .c = (uint32_t)next(p), .thread = (uint32_t)p->t};
  if (below(p, 2)) {
    in2 = pick_input(p, out);
    m.flags |= MIX_TWO_INPUTS;
  }
  if (below(p, 4) == 0) m.flags |= MIX_ACCUMULATE;
  if (may_fail && p->nfails < MAX_FAILS) {
    m.flags |= MIX_FAIL;
    m.failure = p->nfails + 1;
  }
  weft_binding bd[3] = {
      {out->h, 0, WEFT_WHOLE, (m.flags & MIX_ACCUMULATE) ? WEFT_READ_WRITE : WEFT_WRITE},
      {in1->h, 0, BYTES, WEFT_READ},
      {in2 ? in2->h : in1->h, 0, WEFT_WHOLE, WEFT_READ}};
  const uint32_t grid[3] = {GRID, 1, 1}, block[3] = {ELEMS / GRID, 1, 1};
  if (!OK(p->t,
          weft_launch(p->dev, pick_stream(p), p->mix, grid, block, bd, in2 ? 3 : 2, &m, sizeof(m))))
    return false;
  p->launches++;
  /* The read check, in binding order: the first input carrying a failure. */
  const model_buf *reads[3];
  int nr = 0;
  if (m.flags & MIX_ACCUMULATE) reads[nr++] = out;
  reads[nr++] = in1;
  if (in2) reads[nr++] = in2;
  for (int i = 0; i < nr; i++) {
    if (reads[i]->fail) {
      out->fail = reads[i]->fail;
      out->fail_thread = reads[i]->fail_thread;
      p->skipped++;
      return true;
    }
  }
  if (m.flags & MIX_FAIL) {
    p->nfails++;
    out->fail = m.failure;
    out->fail_thread = (uint32_t)p->t;
    p->failed++;
    p->calls++; /* the first block fails, the rest never run */
    return true;
  }
  for (int i = 0; i < ELEMS; i++) {
    uint32_t v = m.a * in1->data[i] + m.c;
    if (in2) v += in2->data[i];
    if (m.flags & MIX_ACCUMULATE) v += out->data[i];
    out->data[i] = v;
  }
  out->fail = 0;
  p->run++;
  p->calls += GRID;
  return true;
}

static bool host_write(producer *p, model_buf *b, uint32_t offset, uint32_t n) {
  uint32_t src[ELEMS];
  for (uint32_t i = 0; i < n; i++) src[i] = (uint32_t)next(p);
  if (!OK(p->t, weft_buffer_write(p->dev, pick_stream(p), b->h, offset * 4u, src, n * 4u)))
    return false;
  memcpy(b->data + offset, src, n * 4u);
  if (n == ELEMS) b->fail = 0; /* a full write clears any failure */
  return true;
}

/* Reads |b| and compares with the model: the bytes, or the failure. */
static bool verify(producer *p, const model_buf *b, const char *when, bool whole) {
  uint32_t got[ELEMS];
  uint32_t first = 0, n = ELEMS;
  if (!whole) { /* a random non-empty sub-range */
    first = below(p, ELEMS);
    n = below(p, ELEMS - first) + 1;
  }
  weft_status st = weft_buffer_read(p->dev, pick_stream(p), b->h, first * 4u, got, n * 4u);
  p->reads_checked++;
  if (!b->fail) {
    if (!OK(p->t, st)) return false;
    for (uint32_t i = 0; i < n; i++) {
      if (got[i] != b->data[first + i]) {
        fail("thread %d (%s): element %" PRIu32 " is %" PRIu32 ", the model says %" PRIu32, p->t,
             when, first + i, got[i], b->data[first + i]);
        return false;
      }
    }
    return true;
  }
  p->failures_seen++;
  char text[2048];
  weft_error_format(st, text, sizeof(text));
  if (weft_error_kind_of(st) != WEFT_ERR_SEVERAL || weft_error_count(st) != 1) {
    fail("thread %d (%s): expected failure t%" PRIu32 "-f%" PRIu32 ", read returned %s", p->t, when,
         b->fail_thread, b->fail, st ? text : "Ok");
    weft_error_free(st);
    return false;
  }
  weft_status u = weft_error_at(st, 0), root = weft_error_root(u);
  char want[64];
  snprintf(want, sizeof(want), "t%" PRIu32 "-f%" PRIu32, b->fail_thread, b->fail);
  bool good = weft_error_kind_of(u) == WEFT_ERR_UNWRITTEN &&
              weft_error_kind_of(root) == WEFT_ERR_GENERIC &&
              strcmp(weft_error_message(root), want) == 0 && weft_error_failure_id(u) != 0 &&
              weft_error_claimed(u) >= 1;
  bool named = weft_error_origin(u) && strncmp(weft_error_origin(u), "kernel 'mix", 11) == 0;
  if (!good || !named) {
    fail("thread %d (%s): expected Unwritten{root Generic '%s', the failed launch named}, got %s",
         p->t, when, want, text);
    weft_error_free(st);
    return false;
  }
  uint64_t id = weft_error_failure_id(u), seen = 0;
  _Atomic uint64_t *slot = &failure_ids[b->fail_thread][b->fail];
  if (!atomic_compare_exchange_strong(slot, &seen, id) && seen != id) {
    fail("thread %d (%s): failure %s was #%" PRIu64 ", now #%" PRIu64, p->t, when, want, seen, id);
    weft_error_free(st);
    return false;
  }
  weft_error_free(st);
  return true;
}

static bool recreate(producer *p, model_buf *b) {
  if (!OK(p->t, weft_buffer_release(p->dev, b->h))) return false;
  if (!OK(p->t, weft_buffer_create(p->dev, pick_stream(p), BYTES, &b->h))) return false;
  b->fail = 0;
  return host_write(p, b, 0, ELEMS);
}

static void *producer_main(void *arg) {
  producer *p = arg;
  for (int i = 0; i < OWN; i++) {
    if (!OK(p->t, weft_buffer_create(p->dev, pick_stream(p), BYTES, &p->own[i].h))) goto out;
    if (!host_write(p, &p->own[i], 0, ELEMS)) goto out;
  }
  /* Phase 1: the random program. */
  for (long op = 0; op < ops_per_thread && !atomic_load(&failed); op++) {
    uint32_t r = below(p, 1000);
    bool good = true;
    if (r < 500) {
      good = do_launch(p, false);
    } else if (r < 520) {
      good = do_launch(p, true);
    } else if (r < 640) {
      good = host_write(p, &p->own[below(p, OWN)], 0, ELEMS);
    } else if (r < 680) {
      model_buf *b = &p->own[below(p, OWN)];
      if (!b->fail) {
        uint32_t off = below(p, ELEMS), n = below(p, ELEMS - off) + 1;
        good = host_write(p, b, off, n);
      }
    } else if (r < 830) {
      model_buf *b = below(p, 8) == 0 ? &p->shared[below(p, SHARED)] : &p->own[below(p, OWN)];
      good = verify(p, b, "random read", below(p, 2));
    } else if (r < 880) {
      /* No barrier: whatever completed work shows; only the shape is checked. */
      weft_buffer hs[OWN];
      for (int i = 0; i < OWN; i++) hs[i] = p->own[i].h;
      weft_status st = weft_check(p->dev, hs, OWN);
      if (st && weft_error_kind_of(st) != WEFT_ERR_SEVERAL)
        good = OK(p->t, st);
      else
        weft_error_free(st);
    } else if (r < 930) {
      good = OK(p->t, weft_sync(p->dev, pick_stream(p)));
    } else if (r < 960) {
      good = recreate(p, &p->own[below(p, OWN)]);
    } else if (r < 962 && p->nkernels < 40) {
      /* Registration races with every other thread's launches. */
      char name[32];
      snprintf(name, sizeof(name), "mix_%d_%u", p->t, p->nkernels++);
      good = OK(p->t, weft_kernel_host(p->dev, name, mix_kernel, NULL, &p->mix));
    } else {
      weft_device_stats s = {0};
      good = OK(p->t, weft_device_stats_get(p->dev, &s));
    }
    if (!good) goto out;
  }
  for (int i = 0; i < OWN && !atomic_load(&failed); i++) verify(p, &p->own[i], "final read", true);
out:
  /* Phase 2: main checks the statistics while nobody submits. */
  pthread_barrier_wait(p->phase);
  pthread_barrier_wait(p->phase);
  /* Phase 3: a burst left queued for close. */
  for (int i = 0; i < BURST && !atomic_load(&failed); i++)
    if (!do_launch(p, below(p, 50) == 0)) break;
  return NULL;
}

/* Spreads nearby seeds (1, 2, 3...) over unrelated xorshift states. */
static uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15u;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
  return x ^ (x >> 31);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- thread caches: exits, slot reuse, close while cached ---------------------------------- */

enum { CHURN_DEVS = 6, CHURN_THREADS = 12, CHURN_CAP = 64, CHURN_LAUNCHES = 200 };

typedef struct churn_dev {
  weft_device *dev;
  weft_kernel inc, hold;
  weft_buffer buf[STREAMS]; /* buf[s] counts the launches on stream s */
  _Atomic uint64_t expect[STREAMS];
} churn_dev;

static churn_dev churn[CHURN_DEVS];
static weft_counting_allocator *churn_ca;
static _Atomic int churn_gate;
static pthread_barrier_t churn_mid;

static weft_status churn_inc(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  ((uint64_t *)ctx->buffers[0])[0]++;
  return NULL;
}

static weft_status churn_hold(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&churn_gate)) sched_yield();
  return NULL;
}

static bool churn_open(churn_dev *d) {
  weft_allocator a = weft_counting_allocator_get(churn_ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = STREAMS;
  o.max_pending_commands = CHURN_CAP; /* blocks of 4 credits for 8 seated threads */
  o.allocator = &a;
  if (!OK(-1, weft_device_open(&o, &d->dev)) ||
      !OK(-1, weft_kernel_host(d->dev, "inc", churn_inc, NULL, &d->inc)) ||
      !OK(-1, weft_kernel_host(d->dev, "hold", churn_hold, NULL, &d->hold)))
    return false;
  for (int s = 0; s < STREAMS; s++) {
    uint64_t zero = 0;
    atomic_store(&d->expect[s], 0);
    /* main submits on stream 0 only: the other streams' credits are the
     * churn threads' alone */
    if (!OK(-1, weft_buffer_create(d->dev, 0, sizeof(zero), &d->buf[s])) ||
        !OK(-1, weft_buffer_write(d->dev, 0, d->buf[s], 0, &zero, sizeof(zero))))
      return false;
  }
  return true;
}

/* Reads every stream's count (on stream 0, main's only stream: the read
 * orders after the writers) and compares it with the launches made. */
static bool churn_verify(churn_dev *d, const char *when) {
  for (int s = 0; s < STREAMS; s++) {
    uint64_t got = 0;
    if (!OK(-1, weft_buffer_read(d->dev, 0, d->buf[s], 0, &got, sizeof(got)))) return false;
    if (got != atomic_load(&d->expect[s])) {
      fail("thread caches (%s): stream %d ran %" PRIu64 " of %" PRIu64 " launches", when, s, got,
           atomic_load(&d->expect[s]));
      return false;
    }
  }
  return true;
}

static bool churn_launch(churn_dev *d, int s, int t) {
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd = {d->buf[s], 0, WEFT_WHOLE, WEFT_READ_WRITE};
  if (!OK(t, weft_launch(d->dev, (weft_stream_id)s, d->inc, g, g, &bd, 1, NULL, 0))) return false;
  atomic_fetch_add(&d->expect[s], 1);
  return true;
}

typedef struct churn_arg {
  int t;
  uint64_t rng;
} churn_arg;

/* Launches on random devices and streams, waits at the barrier while main
 * closes and replaces a device, launches again and exits without syncing:
 * its caches are handed back by the close and by its exit. */
static void *churn_thread(void *arg) {
  churn_arg *c = arg;
  for (int half = 0; half < 2; half++) {
    for (int i = 0; i < CHURN_LAUNCHES / 2 && !atomic_load(&failed); i++) {
      uint64_t x = c->rng;
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      c->rng = x;
      if (!churn_launch(&churn[x % CHURN_DEVS], (int)((x >> 8) % STREAMS), c->t)) break;
    }
    if (!half) { /* main closes and replaces a device in between */
      pthread_barrier_wait(&churn_mid);
      pthread_barrier_wait(&churn_mid);
    }
  }
  return NULL;
}

/* A new thread on stream |s| of |d|: a held kernel, then launches until it
 * parks; with no credit lost it parks after exactly max_pending commands. */
typedef struct fill_arg {
  churn_dev *d;
  int s;
  _Atomic uint64_t taken;
} fill_arg;

static void *churn_fill(void *arg) {
  fill_arg *f = arg;
  const uint32_t g[3] = {1, 1, 1};
  if (!OK(-1, weft_launch(f->d->dev, (weft_stream_id)f->s, f->d->hold, g, g, NULL, 0, NULL, 0)))
    return NULL;
  atomic_store(&f->taken, 1);
  for (int i = 0; i < 2 * CHURN_CAP && !atomic_load(&failed); i++) {
    if (!churn_launch(f->d, f->s, -1)) break;
    atomic_fetch_add(&f->taken, 1);
  }
  return NULL;
}

static bool churn_budget_intact(churn_dev *d, int s) {
  weft_device_stats st = {0};
  /* stats retires first: every retired command's credit is back */
  if (!OK(-1, weft_device_stats_get(d->dev, &st))) return false;
  uint64_t waits = st.backpressure_waits;
  atomic_store(&churn_gate, 0);
  fill_arg f = {.d = d, .s = s};
  pthread_t th;
  if (pthread_create(&th, NULL, churn_fill, &f) != 0) {
    fail("cannot start a fill thread");
    return false;
  }
  do {
    sched_yield();
    if (!OK(-1, weft_device_stats_get(d->dev, &st))) break;
  } while (st.backpressure_waits == waits && !atomic_load(&failed));
  uint64_t taken = atomic_load(&f.taken);
  atomic_store(&churn_gate, 1);
  pthread_join(th, NULL);
  if (!atomic_load(&failed) && taken != CHURN_CAP)
    fail("thread caches: stream %d took %" PRIu64 " commands before it was full, not %d: "
         "credits were lost or kept",
         s, taken, CHURN_CAP);
  return !atomic_load(&failed);
}

static void churn_close(churn_dev *d) {
  if (d->dev) {
    for (int s = 0; s < STREAMS; s++) OK(-1, weft_buffer_release(d->dev, d->buf[s]));
    weft_device_close(d->dev);
  }
  d->dev = NULL;
}

static void cache_churn(double scale, uint64_t seed) {
  int rounds = (int)(40 * scale);
  if (rounds < 2) rounds = 2;
  if (weft_counting_allocator_create(&churn_ca)) {
    fail("no allocator");
    return;
  }
  for (int d = 0; d < CHURN_DEVS; d++)
    if (!churn_open(&churn[d])) goto out;
  pthread_barrier_init(&churn_mid, NULL, CHURN_THREADS + 1);
  for (int r = 0; r < rounds && !atomic_load(&failed); r++) {
    pthread_t th[CHURN_THREADS];
    churn_arg args[CHURN_THREADS];
    for (int t = 0; t < CHURN_THREADS; t++) {
      args[t] =
          (churn_arg){.t = t, .rng = splitmix64(seed ^ ((uint64_t)r << 20) ^ (uint64_t)t) | 1};
      if (pthread_create(&th[t], NULL, churn_thread, &args[t]) != 0) {
        fprintf(stderr, "stress_submit: cannot start a churn thread\n");
        exit(1);
      }
    }
    /* Midway, the threads alive and caching for it: close one, open anew. */
    pthread_barrier_wait(&churn_mid);
    churn_dev *d = &churn[r % CHURN_DEVS];
    churn_verify(d, "before close");
    churn_close(d);
    churn_open(d);
    pthread_barrier_wait(&churn_mid);
    for (int t = 0; t < CHURN_THREADS; t++) pthread_join(th[t], NULL);
  }
  pthread_barrier_destroy(&churn_mid);
  for (int d = 0; d < CHURN_DEVS && !atomic_load(&failed); d++) {
    if (!churn_verify(&churn[d], "end")) break;
    for (int s = 1; s < STREAMS && churn_budget_intact(&churn[d], s); s++) {
    }
    churn_verify(&churn[d], "after the fills");
  }
  if (!atomic_load(&failed))
    printf("thread caches: %d rounds of %d threads over %d devices\n", rounds, CHURN_THREADS,
           CHURN_DEVS);
out:
  for (int d = 0; d < CHURN_DEVS; d++) churn_close(&churn[d]);
  weft_alloc_counts c = weft_counting_allocator_counts(churn_ca);
  if (!atomic_load(&failed) && c.live_blocks != 0)
    fail("thread caches: %" PRIu64 " blocks still live after close", c.live_blocks);
  weft_counting_allocator_destroy(churn_ca);
}

int main(int argc, char **argv) {
  double scale = argc > 1 ? atof(argv[1]) : 1.0;
  uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x5eed5eedu;
  if (!(scale > 0)) {
    fprintf(stderr, "usage: %s [scale > 0 [seed]]\n", argv[0]);
    return 2;
  }
  ops_per_thread = (long)(50000 * scale);
  if (ops_per_thread < 1) ops_per_thread = 1;
  double t0 = now_s();

  weft_counting_allocator *ca = NULL;
  if (weft_counting_allocator_create(&ca)) return fprintf(stderr, "no allocator\n"), 1;
  weft_allocator alloc = weft_counting_allocator_get(ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = STREAMS;
  o.max_pending_commands = 256; /* 8 producers hit it: back-pressure runs under TSan too */
  o.max_tasks = 8;
  o.allocator = &alloc;
  weft_device *dev = NULL;
  if (!ok(weft_device_open(&o, &dev), "weft_device_open", -1, __LINE__)) goto report;
  weft_kernel mix;
  if (!ok(weft_kernel_host(dev, "mix", mix_kernel, NULL, &mix), "weft_kernel_host", -1, __LINE__))
    goto report;

  static model_buf shared[SHARED];
  for (int i = 0; i < SHARED; i++) {
    for (int j = 0; j < ELEMS; j++) shared[i].data[j] = (uint32_t)(i * 1000003 + j * 7919);
    if (!ok(weft_buffer_create(dev, (weft_stream_id)i, BYTES, &shared[i].h), "create", -1,
            __LINE__) ||
        !ok(weft_buffer_write(dev, (weft_stream_id)i, shared[i].h, 0, shared[i].data, BYTES),
            "write", -1, __LINE__))
      goto report;
  }

  pthread_barrier_t phase;
  pthread_barrier_init(&phase, NULL, THREADS + 1);
  static producer prod[THREADS];
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) {
    prod[t] = (producer){.t = t,
                         .dev = dev,
                         .mix = mix,
                         .shared = shared,
                         .rng = splitmix64(seed + (uint64_t)t) | 1,
                         .phase = &phase};
    if (pthread_create(&th[t], NULL, producer_main, &prod[t]) != 0) {
      fprintf(stderr, "cannot start producer %d\n", t);
      return 1;
    }
  }
  /* Phase 1 runs; main polls the statistics and checks the shared buffers
   * concurrently (stats are scheduler snapshots; check has no barrier). */
  pthread_barrier_wait(&phase);
  /* Phase 2: nobody submits. Every slot synced, the counts are final. */
  for (weft_stream_id s = 0; s < STREAMS; s++) ok(weft_sync(dev, s), "weft_sync", -1, __LINE__);
  weft_device_stats st = {0};
  if (ok(weft_device_stats_get(dev, &st), "stats", -1, __LINE__) && !atomic_load(&failed)) {
    uint64_t launches = 0, run = 0, fl = 0, sk = 0, calls = 0;
    for (int t = 0; t < THREADS; t++) {
      launches += prod[t].launches, run += prod[t].run, fl += prod[t].failed;
      sk += prod[t].skipped, calls += prod[t].calls;
    }
    if (st.launches != launches || st.launches_run != run || st.launches_failed != fl ||
        st.launches_skipped != sk)
      fail("statistics: launches %" PRIu64 "/%" PRIu64 " run %" PRIu64 "/%" PRIu64
           " failed %" PRIu64 "/%" PRIu64 " skipped %" PRIu64 "/%" PRIu64 " (device/model)",
           st.launches, launches, st.launches_run, run, st.launches_failed, fl, st.launches_skipped,
           sk);
    if (atomic_load(&kernel_calls) != calls)
      fail("kernel calls: %" PRIu64 ", the model expects %" PRIu64
           " (a launch was lost, repeated, or a skipped one ran)",
           atomic_load(&kernel_calls), calls);
    if (st.buffers_live != SHARED + THREADS * OWN)
      fail("buffers_live %" PRIu64 ", expected %d", st.buffers_live, SHARED + THREADS * OWN);
    printf("phase 1: %" PRIu64 " launches (%" PRIu64 " run, %" PRIu64 " failed, %" PRIu64
           " skipped), %" PRIu64 " cross-stream waits, %" PRIu64 " kernel calls; wake-ups "
           "recovered: scheduler %" PRIu64 ", streams %" PRIu64 "\n",
           st.launches, st.launches_run, st.launches_failed, st.launches_skipped,
           st.cross_stream_waits, atomic_load(&kernel_calls), st.wakeups_recovered,
           st.streams_recovered);
    /* A lost wake-up is recovered after 100 ms rather than hanging; when
     * hunting for one, WEFT_STRICT_WAKEUPS=1 makes it a failure. */
    if (getenv("WEFT_STRICT_WAKEUPS") && (st.wakeups_recovered || st.streams_recovered))
      fail("a parked thread had to recover a lost wake-up");
  }
  for (int i = 0; i < SHARED && !atomic_load(&failed); i++) {
    uint32_t got[ELEMS];
    if (ok(weft_buffer_read(dev, (weft_stream_id)i + 1, shared[i].h, 0, got, BYTES), "read", -1,
           __LINE__) &&
        memcmp(got, shared[i].data, BYTES) != 0)
      fail("shared buffer %d changed", i);
  }
  pthread_barrier_wait(&phase);
  /* Phase 3: producers queue their bursts; close while launches are queued. */
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&phase);
  weft_device_close(dev);
  dev = NULL;
  {
    uint64_t calls = 0, launches = 0;
    for (int t = 0; t < THREADS; t++) calls += prod[t].calls, launches += prod[t].launches;
    if (!atomic_load(&failed) && atomic_load(&kernel_calls) != calls)
      fail("after close: %" PRIu64 " kernel calls, the model expects %" PRIu64
           ": close lost or repeated queued launches",
           atomic_load(&kernel_calls), calls);
    weft_alloc_counts c = weft_counting_allocator_counts(ca);
    if (!atomic_load(&failed) && c.live_blocks != 0)
      fail("after close: %" PRIu64 " blocks (%" PRIu64 " bytes) still live", c.live_blocks,
           c.live_bytes);
    uint64_t reads = 0, seen = 0;
    for (int t = 0; t < THREADS; t++) reads += prod[t].reads_checked, seen += prod[t].failures_seen;
    printf("total: %" PRIu64 " launches, %" PRIu64 " kernel calls, %" PRIu64
           " reads checked (%" PRIu64 " reported failures), seed %#" PRIx64 ", scale %g, %.2f s\n",
           launches, atomic_load(&kernel_calls), reads, seen, seed, scale, now_s() - t0);
  }

  cache_churn(scale, seed);

report:
  weft_device_close(dev);
  weft_counting_allocator_destroy(ca);
  if (atomic_load(&failed)) {
    fprintf(stderr, "stress_submit: FAILED: %s\n", failure_text);
    return 1;
  }
  printf("stress_submit: OK\n");
  return 0;
}
