/* stress_embed: issue 15's embedding calls racing weft_device_close. A plain
 * main() so that it runs under ThreadSanitizer (and ASan, and plainly), in
 * either scheduler mode (WEFT_SCHEDULER=combining).
 *
 *   stress_embed [rounds]     (default 60)
 *
 * Each round opens a device and starts client threads, each on its own
 * stream, looping over: an import of bytes the thread malloc'ed (the release
 * callback frees them, so ASan sees any touch after it ran), copies and a
 * fill between the import and a device buffer, a native kernel over both, a
 * labelled weft_launch_ex, a read_async of the result waited with a short
 * timeout (which may time out) and checked, and an event another stream
 * waits for. One more thread exports a buffer (the pin DLPack uses) and
 * holds the export until after close, then drops it: the last unexport
 * finishes the device's teardown. The main thread closes the device while
 * the clients run: every call must succeed, time out where a timeout was
 * given, or be refused as closing; no call may hang (a watchdog); each
 * import's release callback runs exactly once by the time close returns
 * (every import the close has no export pinning); a read_async destination
 * is never written once close has returned; and close (with the last
 * unexport) gives back every block (counting allocator; the device's own
 * block is kept until the round ends, as in stress_close, for the calls
 * that learn of the close from a refusal).
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
#include <time.h>
#include <unistd.h>

#include <weft/weft.h>

#include "scheduler/export.h"

enum { CLIENTS = 3, BYTES = 256 };

static _Atomic int failed;

static void fail(const char *what, weft_status st) {
  char buf[1024] = "";
  if (st) weft_error_format(st, buf, sizeof(buf));
  if (!atomic_exchange(&failed, 1)) fprintf(stderr, "stress_embed: %s %s\n", what, buf);
  weft_error_free(st);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "stress_embed: a call or close hung (watchdog)\n";
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

/* ---- imports: the caller's bytes, freed by their release callback ---- */

typedef struct owned {
  uint8_t *bytes;
  _Atomic int *released;
} owned;

static void release_owned(void *user) {
  owned *o = user;
  atomic_fetch_add(o->released, 1);
  free(o->bytes);
  free(o);
}

/* out = in + 1 for every byte (the native kernel's "library call"). */
static weft_status native_inc(const weft_native_ctx *ctx, void *user) {
  (void)user;
  const uint8_t *in = (const uint8_t *)(uintptr_t)ctx->addresses[0];
  uint8_t *out = (uint8_t *)(uintptr_t)ctx->addresses[1];
  for (uint64_t i = 0; i < ctx->sizes[1]; i++) out[i] = (uint8_t)(in[i] + 1);
  return NULL;
}

/* ---- the clients ---- */

typedef struct client {
  weft_device *dev;
  weft_kernel native;
  weft_stream_id stream;
  _Atomic int imports;   /* successful imports (each must be released once) */
  _Atomic int refused;   /* refused imports (their callback ran in the call) */
  _Atomic int released;  /* release callbacks run */
  uint8_t dst[BYTES];    /* read_async's destination */
  _Atomic int dst_owner; /* 1 while a read_async may write dst */
  _Atomic uint64_t progress;
} client;

/* true while the device takes calls; false once refused as closing. */
static bool answer(weft_status st, const char *what) {
  if (!st) return true;
  char text[1024];
  weft_error_format(st, text, sizeof(text));
  bool closing = weft_error_kind_of(st) == WEFT_ERR_INVALID_ARGUMENT &&
                 (strstr(text, "device is closing") || strstr(text, "device is closed"));
  if (!closing)
    fail(what, st);
  else
    weft_error_free(st);
  return false;
}

/* One round of the embedding calls; false once the device refuses. */
static bool client_step(client *c, uint64_t i) {
  weft_device *dev = c->dev;
  weft_stream_id s = c->stream;
  owned *o = malloc(sizeof(*o));
  uint8_t *bytes = malloc(BYTES);
  if (!o || !bytes) {
    fail("malloc", NULL);
    free(o), free(bytes);
    return false;
  }
  memset(bytes, (int)(i & 0x7f), BYTES);
  o->bytes = bytes;
  o->released = &c->released;
  weft_buffer imp, mine;
  weft_status st =
      weft_buffer_import(dev, s, (uint64_t)(uintptr_t)bytes, BYTES, release_owned, o, &imp);
  if (st) { /* the callback ran (and freed o): nothing to release */
    atomic_fetch_add(&c->refused, 1);
    return answer(st, "import");
  }
  atomic_fetch_add(&c->imports, 1);
  bool ok = true;
  if ((st = weft_buffer_create(dev, s, BYTES, &mine))) {
    ok = answer(st, "create");
    mine.id = 0;
  }
  if (ok) ok = answer(weft_buffer_set_label(dev, imp, "caller.bytes"), "label");
  if (ok) ok = answer(weft_buffer_fill(dev, s, mine, 0, BYTES, 0), "fill");
  if (ok) ok = answer(weft_buffer_copy(dev, s, imp, 0, mine, 0, BYTES / 2), "copy");
  weft_binding bd[2] = {{imp, 0, BYTES / 2, WEFT_READ}, {mine, BYTES / 2, BYTES / 2, WEFT_WRITE}};
  weft_launch_desc d = {.struct_size = sizeof d,
                        .stream = s,
                        .kernel = c->native,
                        .grid = {1, 1, 1},
                        .block = {1, 1, 1},
                        .bindings = bd,
                        .num_bindings = 2,
                        .label = i % 2 ? "native.odd" : "native.even"};
  if (ok) ok = answer(weft_launch_ex(dev, &d), "launch_ex");
  weft_event rd = {0}, ev = {0};
  if (ok) {
    atomic_store(&c->dst_owner, 1);
    ok = answer(weft_buffer_read_async(dev, s, mine, 0, c->dst, BYTES, &rd), "read_async");
    if (!ok) atomic_store(&c->dst_owner, 0);
  }
  if (ok) {
    /* Short timeouts first (they may run out: the event stays valid), then
     * no limit. */
    st = NULL;
    bool done = false;
    for (int t = 0; t < 3 && !done; t++) {
      st = weft_event_wait(dev, rd, (uint64_t)(t + 1) * 20000);
      done = weft_error_kind_of(st) != WEFT_ERR_TIMEOUT;
      if (!done) weft_error_free(st);
    }
    if (!done) st = weft_event_wait(dev, rd, UINT64_MAX);
    ok = answer(st, "wait read");
    if (ok) {
      uint8_t want = (uint8_t)(i & 0x7f);
      for (int b = 0; b < BYTES; b++)
        if (c->dst[b] != (uint8_t)(want + (b >= BYTES / 2))) {
          fail("read_async returned wrong bytes", NULL);
          ok = false;
          break;
        }
    }
    atomic_store(&c->dst_owner, 0);
  }
  if (ok) ok = answer(weft_event_record(dev, s, &ev), "record");
  if (ok) ok = answer(weft_stream_wait_event(dev, s + CLIENTS, ev), "stream_wait_event");
  if (rd.id) answer(weft_event_release(dev, rd), "release read event");
  if (ev.id) answer(weft_event_release(dev, ev), "release event");
  /* Releases may be refused as closing: close then releases the buffer. */
  answer(weft_buffer_release(dev, imp), "release import");
  if (mine.id) answer(weft_buffer_release(dev, mine), "release");
  return ok;
}

static void *client_main(void *arg) {
  client *c = arg;
  for (uint64_t i = 0;; i++) {
    if (!client_step(c, i)) return NULL;
    atomic_store_explicit(&c->progress, i + 1, memory_order_release);
  }
}

/* ---- the exporter: a pin that outlives close ---- */

typedef struct exporter {
  weft_device *dev;
  struct weft_export *held;
  uint8_t *bytes;
  _Atomic int released;
  _Atomic int ready;
} exporter;

static void release_export_bytes(void *user) {
  exporter *x = user;
  atomic_fetch_add(&x->released, 1);
}

static void *exporter_main(void *arg) {
  exporter *x = arg;
  weft_buffer b;
  weft_status st = weft_buffer_import(x->dev, 7, (uint64_t)(uintptr_t)x->bytes, BYTES,
                                      release_export_bytes, x, &b);
  if (st) {
    answer(st, "export import");
    atomic_store(&x->ready, 1);
    return NULL;
  }
  uint64_t addr = 0;
  if (answer(weft_buffer_fill(x->dev, 7, b, 0, BYTES, 0x5c), "export fill") &&
      answer(weft__buffer_export(x->dev, 7, b, 0, BYTES, &addr, &x->held), "export")) {
    if (addr != (uint64_t)(uintptr_t)x->bytes) fail("export address", NULL);
    answer(weft_buffer_release(x->dev, b), "export release");
  } else {
    x->held = NULL;
  }
  atomic_store(&x->ready, 1);
  return NULL;
}

static void *unexport_main(void *arg) {
  exporter *x = arg;
  weft__buffer_unexport(x->held);
  return NULL;
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
  o.max_streams = 8;
  o.max_pending_commands = round % 3 ? 0 : 4; /* some rounds park clients in back-pressure */
  weft_device *dev = NULL;
  if ((st = weft_device_open(&o, &dev))) {
    fail("open", st);
    weft_counting_allocator_destroy(ca);
    return false;
  }
  atomic_store(&k.keep, dev);
  static client cl[CLIENTS];
  memset(cl, 0, sizeof(cl));
  weft_kernel native;
  bool ok = !(st = weft_kernel_native(dev, "inc", native_inc, NULL, &native));
  if (!ok) fail("kernel", st);
  exporter x = {.dev = dev, .bytes = calloc(1, BYTES)};
  pthread_t th[CLIENTS], xt;
  int started = 0;
  bool xstarted = ok && pthread_create(&xt, NULL, exporter_main, &x) == 0;
  for (int t = 0; ok && t < CLIENTS; t++, started++) {
    cl[t].dev = dev;
    cl[t].native = native;
    cl[t].stream = (weft_stream_id)t;
    if (pthread_create(&th[t], NULL, client_main, &cl[t]) != 0) {
      fail("pthread_create", NULL);
      ok = false;
    }
  }
  uint64_t want = (uint64_t)(round % 4) * 8;
  for (int t = 0; ok && t < started; t++)
    while (atomic_load_explicit(&cl[t].progress, memory_order_acquire) < want &&
           !atomic_load(&failed))
      sched_yield();
  while (xstarted && !atomic_load(&x.ready)) sched_yield();
  weft_device_close(dev);
  /* Once close returned, no read_async writes a destination: mark them and
   * look again after the clients stopped. */
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  if (xstarted) pthread_join(xt, NULL);
  for (int t = 0; t < started; t++) {
    memset(cl[t].dst, 0xa5, BYTES);
    int imports = atomic_load(&cl[t].imports), refused = atomic_load(&cl[t].refused);
    int released = atomic_load(&cl[t].released);
    if (released != imports + refused) {
      char what[160];
      snprintf(what, sizeof what, "round %d client %d: %d imports, %d refused, %d callbacks", round,
               t, imports, refused, released);
      fail(what, NULL);
    }
  }
  /* The exported import: released only when its pin goes, on another thread. */
  if (x.held && atomic_load(&x.released) != 0) fail("a pinned import was released by close", NULL);
  if (x.held && x.bytes[0] != 0x5c) fail("the export's bytes were not filled", NULL);
  pthread_t ut;
  if (x.held) {
    if (pthread_create(&ut, NULL, unexport_main, &x) != 0) {
      fail("pthread_create", NULL);
      weft__buffer_unexport(x.held);
    } else {
      pthread_join(ut, NULL);
    }
    if (atomic_load(&x.released) != 1)
      fail("unexport after close did not release the import", NULL);
  } else if (xstarted && atomic_load(&x.released) != 1) {
    fail("a refused export's import was not released once", NULL);
  }
  free(x.bytes);
  struct timespec ts = {0, 2000000};
  nanosleep(&ts, NULL);
  for (int t = 0; t < started; t++)
    for (int b = 0; b < BYTES; b++)
      if (cl[t].dst[b] != 0xa5) {
        fail("a read_async wrote its destination after close returned", NULL);
        break;
      }
  if (k.kept) k.inner.free(k.inner.self, k.kept, k.kept_size, k.kept_align);
  weft_alloc_counts n = weft_counting_allocator_counts(ca);
  if (!k.kept) fail("close (with the last unexport) did not free the device", NULL);
  if (n.live_blocks || n.live_bytes) {
    char what[128];
    snprintf(what, sizeof(what), "round %d: %" PRIu64 " blocks (%" PRIu64 " bytes) leaked", round,
             n.live_blocks, n.live_bytes);
    fail(what, NULL);
  }
  weft_counting_allocator_destroy(ca);
  return ok && !atomic_load(&failed);
}

int main(int argc, char **argv) {
  long rounds = argc > 1 ? strtol(argv[1], NULL, 10) : 60;
  if (rounds <= 0) rounds = 60;
  signal(SIGALRM, on_alarm);
  for (long r = 0; r < rounds; r++) {
    alarm(60); /* per round: a hang fails the program, never CI */
    if (!run_round((int)r)) return 1;
  }
  alarm(0);
  printf("stress_embed: %ld rounds, every racing call answered\n", rounds);
  return 0;
}
