/* stress_events: events from several threads at once. A plain main() so
 * that it runs under ThreadSanitizer (and ASan, and plainly), in either
 * scheduler mode (WEFT_SCHEDULER=combining).
 *
 *   stress_events [rounds]     (default 40)
 *
 * Each round opens a device and starts client threads, each on its own
 * stream, looping over: a write then a read_async of it (waited without a
 * limit, or polled with short timeouts that may time out), checking the
 * bytes; a kernel that stamps a counter, an event recorded after it, another
 * stream made to wait for the event, and a kernel there (sharing no buffer)
 * that checks the stamp is already there; a record released at once (racing
 * its completion); a record queried and waited with a zero timeout. The
 * main thread closes the device while the clients run: every call must
 * succeed, time out where a timeout was given, or be refused as closing; no
 * call may hang (a watchdog), and close gives back every block (counting
 * allocator; the device's own block is kept until the round ends, as in
 * stress_close, for the calls that learn of the close from a refusal).
 *
 * Exit status 0 on success; 1 with a message on the first failure. */
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/weft.h>

enum { CLIENTS = 3, ELEMS = 64 };

static _Atomic int failed;
static const uint32_t one[3] = {1, 1, 1};

static void fail(const char *what, weft_status st) {
  char buf[1024] = "";
  if (st) weft_error_format(st, buf, sizeof(buf));
  if (!atomic_exchange(&failed, 1)) fprintf(stderr, "stress_events: %s %s\n", what, buf);
  weft_error_free(st);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "stress_events: a call or close hung (watchdog)\n";
  ssize_t n = write(2, msg, sizeof(msg) - 1);
  (void)n;
  _exit(1);
}

/* ---- the allocator: counting, with the device block's free deferred ---- */

typedef struct keeper {
  weft_allocator inner;
  _Atomic(void *) keep;
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

/* ---- kernels: a stamp, and a check of it on another stream ---- */

static _Atomic uint64_t stamps[CLIENTS];

typedef struct stamp_args {
  uint32_t client;
  uint64_t value;
} stamp_args;

static weft_status stamp_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const stamp_args *a = ctx->scalars;
  atomic_store_explicit(&stamps[a->client], a->value, memory_order_release);
  return NULL;
}

static weft_status check_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const stamp_args *a = ctx->scalars;
  uint64_t seen = atomic_load_explicit(&stamps[a->client], memory_order_acquire);
  if (seen < a->value) {
    char what[128];
    snprintf(what, sizeof(what),
             "client %u: stream_wait_event let a kernel run early (%" PRIu64 " < %" PRIu64 ")",
             a->client, seen, a->value);
    fail(what, NULL);
  }
  return NULL;
}

typedef struct client {
  weft_device *dev;
  weft_kernel stamp, check;
  weft_buffer own, scratch;
  uint32_t index;
  weft_stream_id stream, other;
  uint32_t dst[ELEMS]; /* read_async's destination: lives until the round ends */
  _Atomic uint64_t progress;
} client;

/* true when |st| is NULL; false (and nothing wrong) when the device is closing. */
static bool answer(weft_status st, const char *what) {
  if (!st) return true;
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  bool closing = weft_error_kind_of(st) == WEFT_ERR_INVALID_ARGUMENT &&
                 (strstr(text, "device is closing") || strstr(text, "device is closed"));
  if (!closing) {
    fail(what, st);
    return false;
  }
  weft_error_free(st);
  return false;
}

/* Waits for |ev| with no limit (|patient|) or in 50 us slices that may time out. */
static weft_status wait_for(weft_device *dev, weft_event ev, bool patient) {
  if (patient) return weft_event_wait(dev, ev, UINT64_MAX);
  for (;;) {
    weft_status st = weft_event_wait(dev, ev, 50u * 1000u);
    if (weft_error_kind_of(st) != WEFT_ERR_TIMEOUT) return st;
    weft_error_free(st); /* still valid: wait again */
  }
}

static void *client_main(void *arg) {
  client *c = arg;
  weft_device *dev = c->dev;
  uint32_t src[ELEMS];
  for (uint64_t i = 1;; i++) {
    weft_event ev;
    switch (i % 4) {
    case 0: { /* a write, then its bytes back through read_async */
      for (int j = 0; j < ELEMS; j++) src[j] = (uint32_t)(i * 131u + (uint64_t)j);
      if (!answer(weft_buffer_write(dev, c->stream, c->own, 0, src, sizeof(src)), "write"))
        return NULL;
      if (!answer(weft_buffer_read_async(dev, c->stream, c->own, 0, c->dst, sizeof(c->dst), &ev),
                  "read_async"))
        return NULL;
      bool ok = answer(wait_for(dev, ev, (i / 4) % 2), "wait read_async");
      if (ok && memcmp(src, c->dst, sizeof(src)) != 0) fail("read_async: wrong bytes", NULL);
      if (!answer(weft_event_release(dev, ev), "release") || !ok) return NULL;
      break;
    }
    case 1: { /* a stamp, an event after it, the other stream ordered after the event */
      stamp_args a = {c->index, i};
      weft_binding own = {c->own, 0, WEFT_WHOLE, WEFT_READ_WRITE};
      weft_binding scratch = {c->scratch, 0, WEFT_WHOLE, WEFT_READ_WRITE};
      if (!answer(weft_launch(dev, c->stream, c->stamp, one, one, &own, 1, &a, sizeof(a)),
                  "launch stamp"))
        return NULL;
      if (!answer(weft_event_record(dev, c->stream, &ev), "record")) return NULL;
      bool ok = answer(weft_stream_wait_event(dev, c->other, ev), "stream_wait_event");
      if (ok)
        ok = answer(weft_launch(dev, c->other, c->check, one, one, &scratch, 1, &a, sizeof(a)),
                    "launch check");
      if (!answer(weft_event_release(dev, ev), "release") || !ok) return NULL;
      break;
    }
    case 2: /* released at once: races the record's completion */
      if (!answer(weft_event_record(dev, c->stream, &ev), "record")) return NULL;
      if (!answer(weft_event_release(dev, ev), "release")) return NULL;
      break;
    case 3: { /* asked, never parked */
      if (!answer(weft_event_record(dev, c->other, &ev), "record")) return NULL;
      bool done = false;
      bool ok = answer(weft_event_query(dev, ev, &done), "query");
      if (ok) {
        weft_status st = weft_event_wait(dev, ev, 0);
        if (weft_error_kind_of(st) == WEFT_ERR_TIMEOUT) {
          if (done) fail("a done event timed out", NULL);
          weft_error_free(st);
        } else {
          ok = answer(st, "wait 0");
        }
      }
      if (!answer(weft_event_release(dev, ev), "release") || !ok) return NULL;
      break;
    }
    }
    atomic_store_explicit(&c->progress, i, memory_order_release);
    if (atomic_load(&failed)) return NULL;
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
  o.max_streams = 4;
  weft_device *dev = NULL;
  if ((st = weft_device_open(&o, &dev))) {
    fail("open", st);
    weft_counting_allocator_destroy(ca);
    return false;
  }
  atomic_store(&k.keep, dev);
  static client cl[CLIENTS];
  memset(cl, 0, sizeof(cl));
  weft_kernel stamp, check;
  bool ok = !(st = weft_kernel_host(dev, "stamp", stamp_kernel, NULL, &stamp));
  if (ok) ok = !(st = weft_kernel_host(dev, "check", check_kernel, NULL, &check));
  if (!ok) fail("kernel", st);
  for (int t = 0; ok && t < CLIENTS; t++) {
    atomic_store(&stamps[t], 0);
    cl[t].dev = dev;
    cl[t].stamp = stamp;
    cl[t].check = check;
    cl[t].index = (uint32_t)t;
    cl[t].stream = (weft_stream_id)t;
    cl[t].other = (weft_stream_id)((t + 1) % 4);
    if ((st = weft_buffer_create(dev, cl[t].stream, ELEMS * 4, &cl[t].own)) ||
        (st = weft_buffer_create(dev, cl[t].other, 64, &cl[t].scratch))) {
      fail("create", st);
      ok = false;
    }
  }
  pthread_t th[CLIENTS];
  int started = 0;
  for (int t = 0; ok && t < CLIENTS; t++, started++)
    if (pthread_create(&th[t], NULL, client_main, &cl[t]) != 0) {
      fail("pthread_create", NULL);
      ok = false;
    }
  uint64_t want = 50 + (uint64_t)(round % 5) * 200;
  for (int t = 0; ok && t < started; t++)
    while (atomic_load_explicit(&cl[t].progress, memory_order_acquire) < want &&
           !atomic_load(&failed))
      sched_yield();
  weft_device_close(dev);
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
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
  long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 40;
  if (rounds <= 0) rounds = 40;
  signal(SIGALRM, on_alarm);
  for (long r = 0; r < rounds; r++) {
    alarm(60);
    if (!run_round((int)r)) return 1;
  }
  alarm(0);
  printf("stress_events: %ld rounds, every event answered in order\n", rounds);
  return 0;
}
