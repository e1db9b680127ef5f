/* stress_close: weft_device_close racing calls on other threads. A plain
 * main() so that it runs under ThreadSanitizer (and ASan, and plainly).
 *
 *   stress_close [rounds]     (default 200)
 *
 * Each round opens a device with a tiny back-pressure limit, starts client
 * threads that loop over every kind of call (launches, writes, blocking
 * reads and syncs, stats, creates and releases, capture replays) and closes
 * the device from the main thread while they run. Every call must either
 * succeed or be refused with InvalidArgument "device is closing"; no call
 * may hang (a watchdog fails the program), and close must give back every
 * block (counting allocator).
 *
 * The device's own block is the one thing kept: the test's allocator defers
 * its free to the end of the round, so a client that starts a call after
 * close returned (which the threads cannot avoid: they learn of the close
 * from a refusal) reads a closed device rather than freed memory. Every
 * other block close frees is freed at once, so ASan still sees any call that
 * touches one.
 *
 * Exit status 0 on success; 1 with a message on the first failure. */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/weft.h>

enum { CLIENTS = 4, ELEMS = 16 };

static _Atomic int failed;
static const uint32_t one[3] = {1, 1, 1};

static void fail(const char *what, weft_status st) {
  char buf[1024] = "";
  if (st) weft_error_format(st, buf, sizeof(buf));
  if (!atomic_exchange(&failed, 1)) fprintf(stderr, "stress_close: %s %s\n", what, buf);
  weft_error_free(st);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "stress_close: a call or close hung (watchdog)\n";
  ssize_t n = write(2, msg, sizeof(msg) - 1);
  (void)n;
  _exit(1);
}

/* ---- the allocator: counting, with the device block's free deferred ---- */

typedef struct keeper {
  weft_allocator inner;
  _Atomic(void *) keep; /* the device block: freed by the test after the round */
  void *kept;
  size_t kept_size, kept_align;
} keeper;

static void *keeper_alloc(void *self, size_t size, size_t align) {
  keeper *k = self;
  return k->inner.alloc(k->inner.self, size, align);
}

static void keeper_free(void *self, void *p, size_t size, size_t align) {
  keeper *k = self;
  if (p && p == atomic_load(&k->keep)) {
    k->kept = p, k->kept_size = size, k->kept_align = align;
    return;
  }
  k->inner.free(k->inner.self, p, size, align);
}

/* ---- the clients ---- */

static weft_status inc_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint32_t *x = ctx->buffers[0];
  for (size_t i = 0; i < ctx->sizes[0] / 4; i++) x[i]++;
  return NULL;
}

typedef struct client {
  weft_device *dev;
  weft_kernel inc;
  weft_capture *cap; /* replayed by client 0 */
  weft_buffer own;
  weft_stream_id stream;
  uint64_t calls;
  _Atomic uint64_t progress;
} client;

/* true while the device takes calls; false once refused as closing. */
static bool answer(weft_status st, const char *what) {
  if (!st) return true;
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  /* "device is closing"; a capture call once close is over: "device is closed". */
  bool closing = weft_error_kind_of(st) == WEFT_ERR_INVALID_ARGUMENT &&
                 (strstr(text, "device is closing") || strstr(text, "device is closed"));
  if (!closing) {
    fail(what, st);
    return false;
  }
  weft_error_free(st);
  return false;
}

static void *client_main(void *arg) {
  client *c = arg;
  weft_device *dev = c->dev;
  uint32_t data[ELEMS] = {0};
  weft_binding b = {c->own, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (uint64_t i = 0;; i++) {
    weft_status st = NULL;
    const char *what = "";
    switch (i % 8) {
    case 0:
    case 1:
    case 2:
      what = "launch";
      st = weft_launch(dev, c->stream, c->inc, one, one, &b, 1, NULL, 0);
      break;
    case 3:
      what = "write";
      st = weft_buffer_write(dev, c->stream, c->own, 0, data, sizeof(data));
      break;
    case 4:
      what = "read";
      st = weft_buffer_read(dev, c->stream, c->own, 0, data, sizeof(data));
      break;
    case 5: {
      what = "create";
      weft_buffer tmp;
      st = weft_buffer_create(dev, c->stream, 256, &tmp);
      if (!st) {
        what = "release";
        st = weft_buffer_release(dev, tmp);
      }
      break;
    }
    case 6:
      what = c->cap ? "replay" : "sync";
      st = c->cap ? weft_capture_replay(c->cap) : weft_sync(dev, c->stream);
      break;
    default: {
      what = "stats";
      weft_device_stats s = {0};
      st = weft_device_stats_get(dev, &s);
      break;
    }
    }
    if (!answer(st, what)) return NULL;
    atomic_store_explicit(&c->progress, i + 1, memory_order_release);
  }
}

static bool run_round(int round) {
  keeper k = {0};
  weft_counting_allocator *ca = NULL;
  weft_status st = weft_counting_allocator_create(&ca);
  if (st) {
    fail("counting allocator", st);
    return false;
  }
  k.inner = weft_counting_allocator_get(ca);
  weft_allocator a = {&k, keeper_alloc, keeper_free};
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &a;
  o.max_pending_commands = 1 + (uint64_t)(round % 4); /* clients park in back-pressure */
  weft_device *dev = NULL;
  if ((st = weft_device_open(&o, &dev))) {
    fail("open", st);
    weft_counting_allocator_destroy(ca);
    return false;
  }
  atomic_store(&k.keep, dev);
  client cl[CLIENTS];
  memset(cl, 0, sizeof(cl));
  weft_kernel inc;
  bool ok = !(st = weft_kernel_host(dev, "inc", inc_kernel, NULL, &inc));
  if (!ok) fail("kernel", st);
  for (int t = 0; ok && t < CLIENTS; t++) {
    cl[t].dev = dev;
    cl[t].inc = inc;
    cl[t].stream = (weft_stream_id)t;
    if ((st = weft_buffer_create(dev, cl[t].stream, ELEMS * 4, &cl[t].own))) {
      fail("create", st);
      ok = false;
    }
  }
  if (ok) { /* client 0 replays a capture of two increments on its stream */
    weft_binding b = {cl[0].own, 0, WEFT_WHOLE, WEFT_READ_WRITE};
    weft_capture *cap = NULL;
    ok = !(st = weft_capture_prepare(dev, &cl[0].stream, 1, &cap));
    if (ok) ok = !(st = weft_capture_begin(cap));
    for (int i = 0; ok && i < 2; i++)
      ok = !(st = weft_launch(dev, 0, inc, one, one, &b, 1, NULL, 0));
    if (ok) ok = !(st = weft_capture_end(cap));
    if (!ok) fail("capture", st);
    cl[0].cap = cap;
  }
  pthread_t th[CLIENTS];
  int started = 0;
  for (int t = 0; ok && t < CLIENTS; t++, started++)
    if (pthread_create(&th[t], NULL, client_main, &cl[t]) != 0) {
      fail("pthread_create", NULL);
      ok = false;
    }
  /* Close once every client is making calls (a few rounds close sooner). */
  uint64_t want = (uint64_t)(round % 5) * 16;
  for (int t = 0; ok && t < started; t++)
    while (atomic_load_explicit(&cl[t].progress, memory_order_acquire) < want &&
           !atomic_load(&failed))
      sched_yield();
  weft_device_close(dev);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  /* Close took the capture's recording; destroy frees the caller's object. */
  weft_capture_destroy(cl[0].cap);
  if (k.kept) k.inner.free(k.inner.self, k.kept, k.kept_size, k.kept_align);
  weft_alloc_counts n = weft_counting_allocator_counts(ca);
  if (!k.kept) {
    fail("close did not free the device", NULL);
    ok = false;
  }
  if (n.live_blocks || n.live_bytes) {
    char what[128];
    snprintf(what, sizeof(what), "round %d: %" PRIu64 " blocks (%" PRIu64 " bytes) leaked", round,
             n.live_blocks, n.live_bytes);
    fail(what, NULL);
    ok = false;
  }
  weft_counting_allocator_destroy(ca);
  return ok && !atomic_load(&failed);
}

int main(int argc, char **argv) {
  long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 200;
  if (rounds <= 0) rounds = 200;
  signal(SIGALRM, on_alarm);
  for (long r = 0; r < rounds; r++) {
    alarm(60); /* per round: a hang fails the program, never CI */
    if (!run_round((int)r)) return 1;
  }
  alarm(0);
  printf("stress_close: %ld rounds, every racing call answered\n", rounds);
  return 0;
}
