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
 * Then the moved phase (rounds / 4 of them, at least 2, alternating the
 * Interleave and Sequential strategies): client threads each submit, over
 * and over, a task graph whose stream 2 task align interleaves onto stream
 * 0's queue behind a slow kernel, then a barrier on stream 2 (weft_sync, a
 * record waited for, a read_async of another buffer) that must not return
 * before that task ran; or a kernel on stream 3 stamping a counter, a
 * record, stream 2 made to wait for it, and a graph whose stream 2 task,
 * moved onto stream 1's queue, checks the stamp is there.
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

/* ---- the moved phase: barriers cover tasks Interleave placed on other queues ---- */

static _Atomic uint64_t moved_ran[CLIENTS]; /* the moved task's runs, per client */

static weft_status slow_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  for (int i = 0; i < 20; i++) sched_yield(); /* holds stream 0's queue a while */
  return NULL;
}

static weft_status nothing_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return NULL;
}

static weft_status moved_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const stamp_args *a = ctx->scalars;
  atomic_fetch_add_explicit(&moved_ran[a->client], 1, memory_order_release);
  return NULL;
}

typedef struct mover {
  weft_device *dev;
  weft_kernel slow, moved, nothing, stamp, check;
  weft_buffer x, y, w, u, v, z;
  uint32_t index, iterations;
  bool failed_here;
} mover;

static weft_binding bind(weft_buffer b, weft_access a) {
  return (weft_binding){b, 0, WEFT_WHOLE, a};
}

static bool add(weft_taskgraph *g, weft_kernel k, const weft_binding *b, size_t n,
                const stamp_args *a) {
  weft_status st = weft_taskgraph_add_launch(g, k, one, one, b, n, a, a ? sizeof(*a) : 0, NULL);
  if (st) fail("taskgraph_add_launch", st);
  return !st;
}

/* Lane L on stream L: the slow kernel on 0 (writes x, u), a task on 1
 * (writes y), the moved task on 2 (writes w), a task on 0 after the slow
 * one (reads u), and one on 1 binding x then w: align executes the batches
 * of 0 and 2 together, and Interleave puts stream 2's task behind the slow
 * kernel on stream 0's queue. */
static bool submit_behind_slow(mover *m) {
  weft_taskgraph *g = NULL;
  weft_status st = weft_taskgraph_create(m->dev, &g);
  if (st) {
    fail("taskgraph_create", st);
    return false;
  }
  stamp_args a = {m->index, 0};
  weft_binding slow_b[2] = {bind(m->x, WEFT_WRITE), bind(m->u, WEFT_WRITE)};
  weft_binding y_b = bind(m->y, WEFT_WRITE), w_b = bind(m->w, WEFT_WRITE);
  weft_binding after_b[2] = {bind(m->u, WEFT_READ), bind(m->v, WEFT_WRITE)};
  weft_binding cons_b[3] = {bind(m->x, WEFT_READ), bind(m->w, WEFT_READ), bind(m->y, WEFT_WRITE)};
  bool ok = add(g, m->slow, slow_b, 2, NULL) && add(g, m->nothing, &y_b, 1, NULL) &&
            add(g, m->moved, &w_b, 1, &a) && add(g, m->nothing, after_b, 2, NULL) &&
            add(g, m->nothing, cons_b, 3, NULL);
  if (ok && (st = weft_taskgraph_submit(g, 0))) {
    fail("taskgraph_submit", st);
    ok = false;
  }
  weft_taskgraph_destroy(g);
  return ok;
}

/* A stamp on 3, a record, stream 2 ordered after it, then one push: tasks
 * on 0 (writes v) and 1 (writes y), stream 2's check of the stamp (writes
 * w), and one on 0 binding y then w: Interleave runs the check on stream
 * 1's queue, where it must still wait for the event. */
static bool submit_after_wait(mover *m, uint64_t value) {
  stamp_args a = {m->index, value};
  weft_binding zb = bind(m->z, WEFT_READ);
  weft_status st = weft_launch(m->dev, 3, m->stamp, one, one, &zb, 1, &a, sizeof(a));
  weft_event ev = {0};
  if (!st) st = weft_event_record(m->dev, 3, &ev);
  if (!st) st = weft_stream_wait_event(m->dev, 2, ev);
  if (ev.id) {
    weft_status rel = weft_event_release(m->dev, ev);
    if (!st)
      st = rel;
    else
      weft_error_free(rel);
  }
  if (st) {
    fail("stamp, record and stream_wait_event", st);
    return false;
  }
  weft_taskgraph *g = NULL;
  if ((st = weft_taskgraph_create(m->dev, &g))) {
    fail("taskgraph_create", st);
    return false;
  }
  weft_binding v_b = bind(m->v, WEFT_WRITE), y_b = bind(m->y, WEFT_WRITE),
               w_b = bind(m->w, WEFT_WRITE);
  weft_binding cons_b[3] = {bind(m->y, WEFT_READ), bind(m->w, WEFT_READ), bind(m->v, WEFT_WRITE)};
  bool ok = add(g, m->nothing, &v_b, 1, NULL) && add(g, m->nothing, &y_b, 1, NULL) &&
            add(g, m->check, &w_b, 1, &a) && add(g, m->nothing, cons_b, 3, NULL);
  if (ok && (st = weft_taskgraph_submit(g, 0))) {
    fail("taskgraph_submit", st);
    ok = false;
  }
  weft_taskgraph_destroy(g);
  return ok;
}

static void *mover_main(void *arg) {
  mover *m = arg;
  weft_device *dev = m->dev;
  uint32_t dst[ELEMS];
  for (uint64_t i = 1; i <= m->iterations && !atomic_load(&failed); i++) {
    if (i % 4 == 3) {
      if (!submit_after_wait(m, i)) return NULL;
      continue;
    }
    uint64_t before = atomic_load_explicit(&moved_ran[m->index], memory_order_acquire);
    if (!submit_behind_slow(m)) return NULL;
    weft_status st;
    weft_event ev = {0};
    const char *what;
    switch (i % 4) {
    case 0:
      what = "weft_sync(2)";
      st = weft_sync(dev, 2);
      break;
    case 1:
      what = "a record on 2";
      st = weft_event_record(dev, 2, &ev);
      if (!st) st = wait_for(dev, ev, (i / 4) % 2);
      break;
    default:
      what = "a read_async on 2";
      st = weft_buffer_read_async(dev, 2, m->z, 0, dst, sizeof(dst), &ev);
      if (!st) st = wait_for(dev, ev, (i / 4) % 2);
      break;
    }
    if (ev.id) {
      weft_status rel = weft_event_release(dev, ev);
      if (!st)
        st = rel;
      else
        weft_error_free(rel);
    }
    if (st) {
      fail(what, st);
      return NULL;
    }
    if (atomic_load_explicit(&moved_ran[m->index], memory_order_acquire) <= before) {
      char text[160];
      snprintf(text, sizeof(text),
               "client %u: %s completed before stream 2's task (placed on stream 0's queue) ran",
               m->index, what);
      fail(text, NULL);
      return NULL;
    }
  }
  return NULL;
}

static bool run_moved_round(int round, uint32_t iterations) {
  weft_counting_allocator *ca = NULL;
  weft_status st = weft_counting_allocator_create(&ca);
  if (st) {
    fail("counting allocator", st);
    return false;
  }
  weft_allocator a = weft_counting_allocator_get(ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &a;
  o.max_streams = 4;
  o.strategy = round % 2 ? WEFT_STRATEGY_SEQUENTIAL : WEFT_STRATEGY_INTERLEAVE;
  weft_device *dev = NULL;
  if ((st = weft_device_open(&o, &dev))) {
    fail("open", st);
    weft_counting_allocator_destroy(ca);
    return false;
  }
  static mover mv[CLIENTS];
  memset(mv, 0, sizeof(mv));
  weft_kernel k[5];
  bool ok = !(st = weft_kernel_host(dev, "slow", slow_kernel, NULL, &k[0])) &&
            !(st = weft_kernel_host(dev, "moved", moved_kernel, NULL, &k[1])) &&
            !(st = weft_kernel_host(dev, "nothing", nothing_kernel, NULL, &k[2])) &&
            !(st = weft_kernel_host(dev, "stamp", stamp_kernel, NULL, &k[3])) &&
            !(st = weft_kernel_host(dev, "check", check_kernel, NULL, &k[4]));
  if (!ok) fail("kernel", st);
  for (int t = 0; ok && t < CLIENTS; t++) {
    mover *m = &mv[t];
    atomic_store(&stamps[t], 0);
    *m = (mover){.dev = dev,
                 .slow = k[0],
                 .moved = k[1],
                 .nothing = k[2],
                 .stamp = k[3],
                 .check = k[4],
                 .index = (uint32_t)t,
                 .iterations = iterations};
    weft_buffer *all[] = {&m->x, &m->y, &m->w, &m->u, &m->v, &m->z};
    for (size_t b = 0; ok && b < sizeof(all) / sizeof(all[0]); b++)
      if ((st = weft_buffer_create(dev, (weft_stream_id)b, ELEMS * 4, all[b]))) {
        fail("create", st);
        ok = false;
      }
    uint32_t src[ELEMS] = {0};
    if (ok && (st = weft_buffer_write(dev, 3, m->z, 0, src, sizeof(src)))) {
      fail("write", st);
      ok = false;
    }
  }
  pthread_t th[CLIENTS];
  int started = 0;
  for (int t = 0; ok && t < CLIENTS; t++, started++)
    if (pthread_create(&th[t], NULL, mover_main, &mv[t]) != 0) {
      fail("pthread_create", NULL);
      ok = false;
    }
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  weft_device_stats s = {0};
  if (ok && (st = weft_device_stats_get(dev, &s))) {
    fail("stats", st);
    ok = false;
  }
  if (ok && !atomic_load(&failed) && o.strategy == WEFT_STRATEGY_INTERLEAVE &&
      s.tasks_interleaved == 0) {
    fail("the moved phase interleaved nothing: its premise did not hold", NULL);
    ok = false;
  }
  weft_device_close(dev);
  weft_alloc_counts n = weft_counting_allocator_counts(ca);
  if (n.live_blocks || n.live_bytes) {
    char what[128];
    snprintf(what, sizeof(what), "moved round %d: %" PRIu64 " blocks (%" PRIu64 " bytes) leaked",
             round, n.live_blocks, n.live_bytes);
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
  long moved = rounds / 4 > 2 ? rounds / 4 : 2;
  for (long r = 0; r < moved; r++) {
    alarm(60);
    if (!run_moved_round((int)r, 120)) return 1;
  }
  alarm(0);
  printf("stress_events: %ld rounds, every event answered in order; %ld moved rounds, every "
         "barrier after the work moved off its stream\n",
         rounds, moved);
  return 0;
}
