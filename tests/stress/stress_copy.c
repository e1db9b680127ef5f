/* stress_copy: copies and fills from several threads on shared buffers,
 * checked. A plain main() (no Criterion) so that it runs under
 * ThreadSanitizer.
 *
 *   stress_copy [rounds]     rounds per thread (default 300)
 *
 * THREADS threads share a device of 4 streams and two shared buffers X and
 * Y, each cut into one segment per thread. Every round a thread fills its
 * segment of X with a value of its own (sometimes in two halves, on two
 * streams), copies it to its segment of Y and from there to a private
 * buffer, each step on a random stream, and reads back one of the three
 * (on a random stream): every byte must be that round's value. Every
 * eighth round the segment of X is written by a failing kernel instead:
 * the copies are skipped, the read fails with the kernel's root, and the
 * next round's fill clears the taint. Same-buffer copies (X's segment
 * halves) and copies between the shared buffers run while other threads
 * use other segments of them. At the end the device's launch counts must
 * add up and the counting allocator must get every block back.
 *
 * Exit status 0 on success; 1 with a message on the first mismatch. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

enum { THREADS = 6, STREAMS = 4, SEG = 512 };

static _Atomic int failed;

static void fail(const char *what, weft_status st) {
  char text[1024] = "";
  if (st) weft_error_format(st, text, sizeof(text));
  if (atomic_exchange(&failed, 1) == 0) fprintf(stderr, "stress_copy: %s: %s\n", what, text);
  weft_error_free(st);
}

typedef struct shared {
  weft_device *dev;
  weft_kernel bad;
  weft_buffer x, y;
  long rounds;
  _Atomic uint64_t submitted; /* launches (copies, fills, kernels) accepted */
} shared;

typedef struct worker {
  shared *sh;
  int t;
  uint64_t rng;
} worker;

static uint32_t next(worker *w) {
  w->rng ^= w->rng << 13;
  w->rng ^= w->rng >> 7;
  w->rng ^= w->rng << 17;
  return (uint32_t)w->rng;
}

static weft_status bad_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return weft_error_make(WEFT_ERR_VALIDATION, "stress: the producer failed");
}

static bool check(worker *w, weft_buffer b, uint64_t off, uint8_t want, bool tainted,
                  const char *what) {
  uint8_t got[SEG];
  weft_status st = weft_buffer_read(w->sh->dev, next(w) % STREAMS, b, off, got, SEG);
  if (tainted) {
    weft_status u = weft_error_kind_of(st) == WEFT_ERR_SEVERAL ? weft_error_at(st, 0) : NULL;
    bool ok = u && weft_error_kind_of(u) == WEFT_ERR_UNWRITTEN &&
              strcmp(weft_error_message(weft_error_root(u)), "stress: the producer failed") == 0;
    if (!ok) {
      char m[96];
      snprintf(m, sizeof(m), "thread %d: the read of %s succeeded or failed otherwise", w->t, what);
      fail(m, st);
      return false;
    }
    weft_error_free(st);
    return true;
  }
  if (st) {
    fail(what, st);
    return false;
  }
  for (int i = 0; i < SEG; i++)
    if (got[i] != want) {
      char m[128];
      snprintf(m, sizeof(m), "thread %d: %s byte %d is %u, want %u", w->t, what, i, got[i], want);
      fail(m, NULL);
      return false;
    }
  return true;
}

static weft_status count(shared *sh, weft_status st, uint64_t n) {
  if (!st) atomic_fetch_add(&sh->submitted, n);
  return st;
}

static void *run(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  weft_device *dev = sh->dev;
  uint64_t off = (uint64_t)w->t * SEG;
  weft_buffer mine;
  weft_status st = weft_buffer_create(dev, (weft_stream_id)w->t, SEG, &mine);
  if (st) return fail("create", st), NULL;
  const uint32_t one[3] = {1, 1, 1};
  for (long r = 0; r < sh->rounds && !atomic_load(&failed); r++) {
    uint8_t v = (uint8_t)(w->t * 37 + r);
    bool taint = r % 8 == 7;
    weft_stream_id s1 = next(w) % STREAMS, s2 = next(w) % STREAMS, s3 = next(w) % STREAMS;
    if (taint) {
      weft_binding b = {sh->x, off, SEG, WEFT_WRITE};
      st = count(sh, weft_launch(dev, s1, sh->bad, one, one, &b, 1, NULL, 0), 1);
    } else if (next(w) % 2) {
      st = count(sh, weft_buffer_fill(dev, s1, sh->x, off, SEG, v), 1);
    } else { /* two halves on two streams, then one half copied onto the other */
      st = count(sh, weft_buffer_fill(dev, s1, sh->x, off, SEG / 2, v), 1);
      if (!st) st = count(sh, weft_buffer_fill(dev, s2, sh->x, off + SEG / 2, SEG / 2, 0), 1);
      if (!st)
        st = count(sh, weft_buffer_copy(dev, s3, sh->x, off, sh->x, off + SEG / 2, SEG / 2), 1);
    }
    if (!st) st = count(sh, weft_buffer_copy(dev, s2, sh->x, off, sh->y, off, SEG), 1);
    if (!st) st = count(sh, weft_buffer_copy(dev, s3, sh->y, off, mine, 0, SEG), 1);
    if (st) {
      fail("submit", st);
      break;
    }
    switch (next(w) % 3) {
    case 0:
      check(w, sh->x, off, v, taint, "X's segment");
      break;
    case 1:
      check(w, sh->y, off, v, taint, "Y's segment");
      break;
    default:
      check(w, mine, 0, v, taint, "the private buffer");
      break;
    }
  }
  st = weft_buffer_release(dev, mine);
  if (st) fail("release", st);
  return NULL;
}

int main(int argc, char **argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 300;
  if (rounds < 1) return fprintf(stderr, "usage: %s [rounds > 0]\n", argv[0]), 2;
  weft_counting_allocator *ca = NULL;
  if (weft_counting_allocator_create(&ca)) return fprintf(stderr, "no allocator\n"), 1;
  weft_allocator alloc = weft_counting_allocator_get(ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = STREAMS;
  o.max_pending_commands = 256;
  o.allocator = &alloc;
  shared sh = {.rounds = rounds};
  weft_status st = weft_device_open(&o, &sh.dev);
  if (st) return fail("open", st), 1;
  if ((st = weft_kernel_host(sh.dev, "producer", bad_kernel, NULL, &sh.bad)) ||
      (st = weft_buffer_create(sh.dev, 0, THREADS * SEG, &sh.x)) ||
      (st = weft_buffer_create(sh.dev, 1, THREADS * SEG, &sh.y)) ||
      (st = weft_buffer_set_label(sh.dev, sh.x, "stress.x")))
    return fail("setup", st), 1;
  pthread_t th[THREADS];
  worker w[THREADS];
  for (int t = 0; t < THREADS; t++) {
    w[t] = (worker){&sh, t, 0x9e3779b97f4a7c15ull * (uint64_t)(t + 1)};
    if (pthread_create(&th[t], NULL, run, &w[t])) return fprintf(stderr, "no thread\n"), 1;
  }
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  for (weft_stream_id s = 0; s < STREAMS && !atomic_load(&failed); s++)
    if ((st = weft_sync(sh.dev, s))) fail("sync", st);
  weft_device_stats ds;
  if (!atomic_load(&failed) && !(st = weft_device_stats_get(sh.dev, &ds))) {
    uint64_t sub = atomic_load(&sh.submitted);
    if (ds.launches != sub || ds.launches_run + ds.launches_failed + ds.launches_skipped != sub) {
      fprintf(stderr,
              "stress_copy: %" PRIu64 " launches submitted; the device counts %" PRIu64 " (%" PRIu64
              " run, %" PRIu64 " failed, %" PRIu64 " skipped)\n",
              sub, ds.launches, ds.launches_run, ds.launches_failed, ds.launches_skipped);
      atomic_store(&failed, 1);
    }
  } else if (st) {
    fail("stats", st);
  }
  weft_device_close(sh.dev);
  weft_alloc_counts c = weft_counting_allocator_counts(ca);
  if (c.live_blocks) {
    fprintf(stderr, "stress_copy: %" PRIu64 " blocks leaked\n", c.live_blocks);
    atomic_store(&failed, 1);
  }
  weft_counting_allocator_destroy(ca);
  if (atomic_load(&failed)) return 1;
  printf("stress_copy: %d threads x %ld rounds of fills and copies: ok\n", THREADS, rounds);
  return 0;
}
