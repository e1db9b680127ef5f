/* stress_replay_slots: several threads replaying one capture never run more
 * replays at once than the capture has instances. A plain main() so that it
 * runs under ThreadSanitizer.
 *
 *   stress_replay_slots [replays per thread]     (default 3000)
 *
 * The capture records NREC increments of one buffer. A replay beyond the
 * instances would run on clones from the command pools, which count against
 * back-pressure all at once (NREC commands), so the device's pending peak
 * tells: with a limit of LIMIT commands and THREADS clients it stays below
 * LIMIT + THREADS + 1 unless a replay was cloned. Before the check and the
 * increment of the instance count were one step, two replayers that both
 * saw a free instance took it twice. At the end the buffer must hold
 * exactly NREC per replay.
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

enum { THREADS = 4, NREC = 64, LIMIT = 4 };

static const uint32_t one[3] = {1, 1, 1};
static _Atomic int failed;

static void fail(const char *what, weft_status st) {
  char buf[1024] = "";
  if (st) weft_error_format(st, buf, sizeof(buf));
  if (!atomic_exchange(&failed, 1)) fprintf(stderr, "stress_replay_slots: %s %s\n", what, buf);
  weft_error_free(st);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "stress_replay_slots: hung (watchdog)\n";
  ssize_t n = write(2, msg, sizeof(msg) - 1);
  (void)n;
  _exit(1);
}

/* x += 1; the first launch of each replay also yields a few times, so that
 * the instances stay busy and replayers queue for them. */
static weft_status inc_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  if (ctx->scalar_bytes)
    for (int i = 0; i < 20; i++) sched_yield();
  uint64_t v;
  memcpy(&v, ctx->buffers[0], sizeof(v));
  v++;
  memcpy(ctx->buffers[0], &v, sizeof(v));
  return NULL;
}

typedef struct shared {
  weft_capture *cap;
  long replays;
  pthread_barrier_t start;
} shared;

static void *replayer(void *arg) {
  shared *sh = arg;
  pthread_barrier_wait(&sh->start);
  for (long i = 0; i < sh->replays && !atomic_load(&failed); i++) {
    weft_status st = weft_capture_replay(sh->cap);
    if (st) fail("replay", st);
  }
  return NULL;
}

int main(int argc, char **argv) {
  long replays = argc > 1 ? strtol(argv[1], NULL, 10) : 3000;
  if (replays <= 0) replays = 3000;
  signal(SIGALRM, on_alarm);
  alarm(120);
  weft_counting_allocator *ca = NULL;
  weft_status st = weft_counting_allocator_create(&ca);
  if (st) {
    fail("counting allocator", st);
    return 1;
  }
  weft_allocator a = weft_counting_allocator_get(ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &a;
  o.max_pending_commands = LIMIT;
  weft_device *dev = NULL;
  if ((st = weft_device_open(&o, &dev))) {
    fail("open", st);
    return 1;
  }
  weft_kernel inc;
  weft_buffer x;
  weft_capture *cap = NULL;
  uint64_t zero = 0;
  weft_stream_id s0 = 0;
  if ((st = weft_kernel_host(dev, "inc", inc_kernel, NULL, &inc)) ||
      (st = weft_buffer_create(dev, 0, sizeof(uint64_t), &x)) ||
      (st = weft_buffer_write(dev, 0, x, 0, &zero, sizeof(zero))) ||
      (st = weft_capture_prepare(dev, &s0, 1, &cap)) || (st = weft_capture_begin(cap))) {
    fail("setup", st);
    return 1;
  }
  weft_binding b = {x, 0, WEFT_WHOLE, WEFT_READ_WRITE};
  uint32_t slow = 1;
  for (int i = 0; i < NREC && !st; i++)
    st = weft_launch(dev, 0, inc, one, one, &b, 1, &slow, i ? 0 : sizeof(slow));
  if (st || (st = weft_capture_end(cap))) {
    fail("capture", st);
    return 1;
  }
  shared sh = {.cap = cap, .replays = replays};
  pthread_barrier_init(&sh.start, NULL, THREADS);
  pthread_t th[THREADS];
  for (int t = 0; t < THREADS; t++) pthread_create(&th[t], NULL, replayer, &sh);
  for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
  pthread_barrier_destroy(&sh.start);
  uint64_t got = 0;
  weft_device_stats s = {0};
  if ((st = weft_buffer_read(dev, 0, x, 0, &got, sizeof(got))) ||
      (st = weft_device_stats_get(dev, &s))) {
    fail("read", st);
    return 1;
  }
  uint64_t want = (uint64_t)NREC * THREADS * (uint64_t)replays;
  if (!atomic_load(&failed) && got != want) {
    char what[128];
    snprintf(what, sizeof(what), "x is %" PRIu64 ", expected %" PRIu64, got, want);
    fail(what, NULL);
  }
  if (!atomic_load(&failed) && s.pending_peak > LIMIT + THREADS) {
    char what[160];
    snprintf(what, sizeof(what),
             "pending peak %" PRIu64 " (limit %d, %d clients): a replay ran beyond the instances",
             s.pending_peak, LIMIT, THREADS);
    fail(what, NULL);
  }
  weft_capture_destroy(cap);
  weft_error_free(weft_buffer_release(dev, x));
  weft_device_close(dev);
  weft_alloc_counts n = weft_counting_allocator_counts(ca);
  if (!atomic_load(&failed) && n.live_blocks) fail("leak after close", NULL);
  weft_counting_allocator_destroy(ca);
  if (atomic_load(&failed)) return 1;
  printf("stress_replay_slots: %d threads x %ld replays, peak %" PRIu64 " pending\n", THREADS,
         replays, s.pending_peak);
  return 0;
}
