/* stress_trace: tracing while client threads launch on crossing streams.
 * A plain main() so that it runs under ThreadSanitizer (and ASan, and plainly).
 *
 *   stress_trace [rounds]     (default 12)
 *
 * Each round opens a device (the scheduler mode WEFT_SCHEDULER selects),
 * starts client threads that launch on their own streams over buffers they
 * share (cross-stream waits), with a kernel that fails now and then (its
 * dependents are skipped), while a tracer thread begins and ends traces with
 * small rings (they wrap) and checks each file against the trace-event
 * format. The ring is written by the scheduler role and the run stamps by
 * the threads running the tasks: TSan sees every access. At the end of the
 * round a last trace must hold one launch event per launch the device
 * counted in it.
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

#include "support/trace_json.h"

enum { CLIENTS = 3, LAUNCHES = 2000, ELEMS = 16 };

static _Atomic int failed;
static const uint32_t one[3] = {1, 1, 1};

static void fail(const char *what, weft_status st) {
  char buf[1024] = "";
  if (st) weft_error_format(st, buf, sizeof(buf));
  if (!atomic_exchange(&failed, 1)) fprintf(stderr, "stress_trace: %s %s\n", what, buf);
  weft_error_free(st);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "stress_trace: a call hung (watchdog)\n";
  ssize_t n = write(2, msg, sizeof(msg) - 1);
  (void)n;
  _exit(1);
}

static weft_status add1(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const uint32_t *in = ctx->buffers[0];
  uint32_t *out = ctx->buffers[1];
  for (int i = 0; i < ELEMS; i++) out[i] = in[i] + 1;
  return NULL;
}

typedef struct round_state {
  weft_device *dev;
  weft_kernel k, kf;
  weft_buffer shared[CLIENTS + 1];
  _Atomic int clients_done;
  int id;
} round_state;

typedef struct client {
  round_state *r;
  int me;
} client;

static void *client_main(void *arg) {
  client *c = arg;
  round_state *r = c->r;
  for (int i = 0; i < LAUNCHES && !atomic_load(&failed); i++) {
    /* Read a neighbour's buffer, write one's own: crossing streams. */
    weft_binding bd[2] = {{r->shared[(c->me + 1) % (CLIENTS + 1)], 0, WEFT_WHOLE, WEFT_READ},
                          {r->shared[c->me], 0, WEFT_WHOLE, WEFT_WRITE}};
    weft_kernel k = i % 97 == 13 ? r->kf : r->k; /* fails now and then */
    weft_status st = weft_launch(r->dev, (weft_stream_id)c->me, k, one, one, bd, 2, NULL, 0);
    if (st) fail("launch", st);
    if (i % 50 == 49) {
      /* A write clears the taint the failing kernel left. */
      uint32_t z[ELEMS] = {0};
      if ((st =
               weft_buffer_write(r->dev, (weft_stream_id)c->me, r->shared[c->me], 0, z, sizeof(z))))
        fail("write", st);
    }
  }
  atomic_fetch_add(&r->clients_done, 1);
  return NULL;
}

static void check_file(const char *path, const char *when) {
  const char *err = NULL;
  jv *root = jv_parse_file(path, &err);
  if (!root) {
    fprintf(stderr, "stress_trace: %s: %s is not JSON: %s\n", when, path, err ? err : "?");
    atomic_store(&failed, 1);
    return;
  }
  char why[256];
  const char *bad = trace_check(root, why, sizeof(why));
  if (bad) {
    fprintf(stderr, "stress_trace: %s: %s: %s\n", when, path, bad);
    atomic_store(&failed, 1);
  }
  jv_free(root);
}

static void *tracer_main(void *arg) {
  round_state *r = arg;
  char path[128];
  snprintf(path, sizeof(path), "/tmp/stress-trace-%d-%d.json", (int)getpid(), r->id);
  for (int i = 0; atomic_load(&r->clients_done) < CLIENTS && !atomic_load(&failed); i++) {
    weft_status st = weft_trace_begin(r->dev, i % 2 ? 1024 : 8192);
    if (st) {
      fail("trace_begin", st);
      break;
    }
    usleep(2000);
    if ((st = weft_trace_end(r->dev, path))) {
      fail("trace_end", st);
      break;
    }
    check_file(path, "during the run");
  }
  remove(path);
  return NULL;
}

static int count_launches(const char *path) {
  const char *err = NULL;
  jv *root = jv_parse_file(path, &err);
  if (!root) return -1;
  const jv *evs = trace_events(root);
  int n = 0;
  for (size_t i = 0; evs && i < evs->n; i++) {
    const char *ph = jv_str(evs->kids[i], "ph"), *cat = jv_str(evs->kids[i], "cat");
    if (ph && !strcmp(ph, "X") && cat && !strcmp(cat, "launch")) n++;
  }
  jv_free(root);
  return n;
}

static void run_round(int id) {
  round_state r = {.id = id};
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = CLIENTS + 1;
  o.max_pending_commands = 64;
  weft_status st = weft_device_open(&o, &r.dev);
  if (st) {
    fail("open", st);
    return;
  }
  if ((st = weft_kernel_host(r.dev, "add1", add1, NULL, &r.k)) ||
      (st = weft_kernel_host(r.dev, "add1_fails", add1, NULL, &r.kf)) ||
      (st = weft_device_set_failpoints(r.dev, "kernel:add1_fails=Generic"))) {
    fail("setup", st);
    weft_device_close(r.dev);
    return;
  }
  uint32_t z[ELEMS] = {0};
  for (int i = 0; i <= CLIENTS; i++) {
    if ((st = weft_buffer_create(r.dev, (weft_stream_id)i, sizeof(z), &r.shared[i])) ||
        (st = weft_buffer_write(r.dev, (weft_stream_id)i, r.shared[i], 0, z, sizeof(z)))) {
      fail("buffers", st);
      weft_device_close(r.dev);
      return;
    }
  }
  pthread_t th[CLIENTS], tr;
  client cl[CLIENTS];
  pthread_create(&tr, NULL, tracer_main, &r);
  for (int i = 0; i < CLIENTS; i++) {
    cl[i] = (client){&r, i};
    pthread_create(&th[i], NULL, client_main, &cl[i]);
  }
  for (int i = 0; i < CLIENTS; i++) pthread_join(th[i], NULL);
  pthread_join(tr, NULL);
  /* A last trace over a known amount of work: every launch is in it. */
  char path[128];
  snprintf(path, sizeof(path), "/tmp/stress-trace-%d-%d-last.json", (int)getpid(), id);
  weft_device_stats s0, s1;
  memset(&s0, 0, sizeof(s0));
  memset(&s1, 0, sizeof(s1));
  for (int i = 0; i <= CLIENTS; i++) weft_error_free(weft_sync(r.dev, (weft_stream_id)i));
  if ((st = weft_device_stats_get(r.dev, &s0)) || (st = weft_trace_begin(r.dev, 0))) {
    fail("last trace", st);
  } else {
    weft_binding bd[2] = {{r.shared[CLIENTS], 0, WEFT_WHOLE, WEFT_READ},
                          {r.shared[0], 0, WEFT_WHOLE, WEFT_WRITE}};
    for (int i = 0; i < 50; i++)
      if ((st = weft_launch(r.dev, (weft_stream_id)(i % (CLIENTS + 1)), r.k, one, one, bd, 2, NULL,
                            0)))
        fail("launch", st);
    if ((st = weft_trace_end(r.dev, path))) fail("last trace_end", st);
    for (int i = 0; i <= CLIENTS; i++) weft_error_free(weft_sync(r.dev, (weft_stream_id)i));
    if ((st = weft_device_stats_get(r.dev, &s1))) fail("stats", st);
    check_file(path, "the last trace");
    uint64_t counted = (s1.launches_run + s1.launches_failed + s1.launches_skipped) -
                       (s0.launches_run + s0.launches_failed + s0.launches_skipped);
    int got = count_launches(path);
    if (got != (int)counted) {
      fprintf(stderr,
              "stress_trace: the last trace holds %d launches, the device counted %" PRIu64 "\n",
              got, counted);
      atomic_store(&failed, 1);
    }
    remove(path);
  }
  weft_device_close(r.dev);
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 12;
  signal(SIGALRM, on_alarm);
  alarm(280);
  for (int i = 0; i < rounds && !atomic_load(&failed); i++) run_round(i);
  if (atomic_load(&failed)) return 1;
  printf("stress_trace: %d rounds ok\n", rounds);
  return 0;
}
