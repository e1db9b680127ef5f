/* stress_replay: captures replayed from several threads while other threads
 * launch eagerly and submit task graphs, on one device. A plain main() so
 * that it runs under ThreadSanitizer.
 *
 *   stress_replay [rounds]     (default 300)
 *
 * Thread r (0..2) owns a buffer and a capture of "x += 1" x 8 on its own
 * stream and replays it |rounds| times, reading the buffer every 16 replays;
 * thread 3 launches increments on two streams into its own buffer; thread 4
 * submits a 2-lane task graph over two more buffers. Every read is checked
 * against the count of work issued before it; at the end every count must
 * be exact, the device's replayed-launch counter must match, and closing
 * must give back every block (counting allocator).
 *
 * Exit status 0 on success; 1 with a message on the first mismatch. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <weft/weft.h>

enum { REPLAYERS = 3, NODES = 8, THREADS = REPLAYERS + 2 };

static _Atomic int failed;
static const uint32_t one[3] = {1, 1, 1};

static void fail(const char *what, weft_status st) {
  char buf[1024] = "";
  if (st) weft_error_format(st, buf, sizeof(buf));
  if (!atomic_exchange(&failed, 1)) fprintf(stderr, "stress_replay: %s %s\n", what, buf);
  weft_error_free(st);
}

static weft_status inc_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint64_t v;
  memcpy(&v, ctx->buffers[0], sizeof(v));
  v++;
  memcpy(ctx->buffers[0], &v, sizeof(v));
  return NULL;
}

typedef struct shared {
  weft_device *dev;
  weft_kernel inc;
  long rounds;
  weft_buffer bufs[THREADS + 1];
} shared;

typedef struct worker {
  shared *sh;
  int id;
} worker;

static uint64_t read_u64(weft_device *dev, weft_stream_id s, weft_buffer b) {
  uint64_t v = 0;
  weft_status st = weft_buffer_read(dev, s, b, 0, &v, sizeof(v));
  if (st) fail("read", st);
  return v;
}

static void expect(uint64_t got, uint64_t want, const char *what, int id) {
  if (got != want && !atomic_exchange(&failed, 1))
    fprintf(stderr, "stress_replay: thread %d: %s holds %" PRIu64 ", expected %" PRIu64 "\n", id,
            what, got, want);
}

static void *replayer(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  weft_stream_id s = (weft_stream_id)w->id;
  weft_buffer x = sh->bufs[w->id];
  weft_capture *cap = NULL;
  weft_status st = weft_capture_prepare(sh->dev, &s, 1, &cap);
  if (st) return fail("prepare", st), NULL;
  weft_binding b = {x, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  if ((st = weft_capture_begin(cap))) fail("begin", st);
  for (int i = 0; i < NODES; i++)
    if ((st = weft_launch(sh->dev, s, sh->inc, one, one, &b, 1, NULL, 0))) fail("record", st);
  if ((st = weft_capture_end(cap))) fail("end", st);
  for (long r = 1; r <= sh->rounds && !atomic_load(&failed); r++) {
    if ((st = weft_capture_replay(cap))) fail("replay", st);
    if (r % 16 == 0) expect(read_u64(sh->dev, s, x), (uint64_t)r * NODES, "its buffer", w->id);
  }
  weft_capture_destroy(cap);
  return NULL;
}

static void *launcher(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  weft_buffer x = sh->bufs[w->id];
  weft_binding b = {x, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  for (long r = 1; r <= sh->rounds * NODES && !atomic_load(&failed); r++) {
    weft_status st =
        weft_launch(sh->dev, (weft_stream_id)(4 + r % 2), sh->inc, one, one, &b, 1, NULL, 0);
    if (st) fail("launch", st);
    if (r % 256 == 0) expect(read_u64(sh->dev, 6, x), (uint64_t)r, "its buffer", w->id);
  }
  return NULL;
}

static void *grapher(void *arg) {
  worker *w = arg;
  shared *sh = w->sh;
  weft_taskgraph *g = NULL;
  weft_status st = weft_taskgraph_create(sh->dev, &g);
  if (st) return fail("graph", st), NULL;
  for (int i = 0; i < NODES; i++) {
    weft_binding b = {sh->bufs[w->id + (i % 2)], 0, WEFT_WHOLE, WEFT_READ_WRITE};
    if ((st = weft_taskgraph_add_launch(g, sh->inc, one, one, &b, 1, NULL, 0, NULL)))
      fail("add", st);
  }
  for (long r = 1; r <= sh->rounds && !atomic_load(&failed); r++) {
    if ((st = weft_taskgraph_submit(g, 8))) fail("submit", st);
    if (r % 32 == 0)
      expect(read_u64(sh->dev, 7, sh->bufs[w->id + 1]), (uint64_t)r * NODES / 2, "lane 1's buffer",
             w->id);
  }
  weft_taskgraph_destroy(g);
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
  o.max_streams = 12;
  o.max_pending_commands = 512;
  o.allocator = &alloc;
  shared sh = {.rounds = rounds};
  weft_status st = weft_device_open(&o, &sh.dev);
  if (st) return fail("open", st), 1;
  if ((st = weft_kernel_host(sh.dev, "inc", inc_kernel, NULL, &sh.inc))) fail("kernel", st);
  for (int i = 0; i <= THREADS; i++) {
    uint64_t zero = 0;
    if ((st = weft_buffer_create(sh.dev, (weft_stream_id)i, sizeof(zero), &sh.bufs[i])) ||
        (st = weft_buffer_write(sh.dev, (weft_stream_id)i, sh.bufs[i], 0, &zero, sizeof(zero))))
      fail("buffer", st);
  }
  pthread_t th[THREADS];
  worker w[THREADS];
  for (int t = 0; t < THREADS; t++) {
    w[t] = (worker){&sh, t};
    void *(*fn)(void *) = t < REPLAYERS ? replayer : t == REPLAYERS ? launcher : grapher;
    if (pthread_create(&th[t], NULL, fn, &w[t])) return fprintf(stderr, "no thread\n"), 1;
  }
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  if (!atomic_load(&failed)) {
    for (int r = 0; r < REPLAYERS; r++)
      expect(read_u64(sh.dev, 0, sh.bufs[r]), (uint64_t)rounds * NODES, "final", r);
    expect(read_u64(sh.dev, 0, sh.bufs[REPLAYERS]), (uint64_t)rounds * NODES, "final", REPLAYERS);
    for (int k = 0; k < 2; k++)
      expect(read_u64(sh.dev, 0, sh.bufs[REPLAYERS + 1 + k]), (uint64_t)rounds * NODES / 2, "final",
             REPLAYERS + 1);
    weft_device_stats s = {0};
    if ((st = weft_device_stats_get(sh.dev, &s))) fail("stats", st);
    expect(s.launches_replayed, (uint64_t)REPLAYERS * rounds * NODES, "launches_replayed", -1);
    expect(s.captures_live, 0, "captures_live", -1);
    /* A lost wake-up is recovered after a timed park rather than hanging;
     * when hunting for one, WEFT_STRICT_WAKEUPS=1 makes it a failure. */
    const char *strict = getenv("WEFT_STRICT_WAKEUPS");
    if (strict && *strict && strcmp(strict, "0") && (s.wakeups_recovered || s.streams_recovered) &&
        !atomic_exchange(&failed, 1))
      fprintf(stderr,
              "stress_replay: a parked thread recovered a lost wake-up (scheduler %" PRIu64
              ", streams %" PRIu64 ")\n",
              s.wakeups_recovered, s.streams_recovered);
  }
  for (int i = 0; i <= THREADS; i++) weft_error_free(weft_buffer_release(sh.dev, sh.bufs[i]));
  weft_device_close(sh.dev);
  weft_alloc_counts c = weft_counting_allocator_counts(ca);
  if (c.live_blocks && !atomic_exchange(&failed, 1))
    fprintf(stderr, "stress_replay: %" PRIu64 " blocks leaked\n", c.live_blocks);
  weft_counting_allocator_destroy(ca);
  if (atomic_load(&failed)) return 1;
  printf("stress_replay: OK (%ld rounds)\n", rounds);
  return 0;
}
