/* The trace (weft_trace_begin / weft_trace_end, WEFT_TRACE): the file is
 * Chrome trace-event JSON (a schema check of every phase weft writes), and
 * it agrees with the device: one launch event per launch run, failed or
 * skipped; a failure and its skipped dependents share a failure id and are
 * joined by flow arrows; cross-stream waits are flows; a wrapped ring keeps
 * the newest events and counts the dropped ones; refusals lose nothing; a
 * binding and a buffer event name a labelled buffer by the label it had at
 * that event (weft_buffer_set_label, before or during the recording). In
 * the scheduler mode WEFT_SCHEDULER selects (CTest runs both). */
#include <criterion/criterion.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"
#include "support/trace_json.h"

static const uint32_t G1[3] = {1, 1, 1};

/* out[i] = in[i] + 1 over the first binding's bytes (in) into the last's (out). */
static weft_status inc(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const uint8_t *in = ctx->buffers[0];
  uint8_t *out = ctx->buffers[ctx->num_buffers - 1];
  for (size_t i = 0; i < ctx->sizes[ctx->num_buffers - 1]; i++) out[i] = (uint8_t)(in[i] + 1);
  return NULL;
}

static weft_kernel kernel(weft_device *dev, const char *name) {
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(dev, name, inc, NULL, &k));
  return k;
}

static weft_buffer buffer(weft_device *dev, weft_stream_id s, uint64_t size) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(dev, s, size, &b));
  return b;
}

static void launch(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer in,
                   weft_buffer out) {
  weft_binding bd[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(dev, s, k, G1, G1, bd, 2, NULL, 0));
}

static weft_device_stats stats(weft_device *dev) {
  weft_device_stats st = {0};
  memset(&st, 0, sizeof(st));
  EXPECT_OK(weft_device_stats_get(dev, &st));
  return st;
}

/* A path for this test's file (removed by the test). */
static void trace_path(char *out, size_t cap, const char *what) {
  snprintf(out, cap, "%s/weft-trace-%d-%s.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getpid(), what);
}

/* Parses |path| and checks the format; the caller frees. */
static jv *load_checked(const char *path) {
  const char *err = NULL;
  jv *root = jv_parse_file(path, &err);
  cr_assert_not_null(root, "%s is not JSON: %s", path, err ? err : "?");
  char why[256];
  const char *bad = trace_check(root, why, sizeof(why));
  cr_assert_null(bad, "%s breaks the trace-event format: %s", path, bad);
  return root;
}

static size_t count_events(const jv *root, const char *ph, const char *cat) {
  const jv *evs = trace_events(root);
  size_t n = 0;
  for (size_t i = 0; i < evs->n; i++) {
    const char *p = jv_str(evs->kids[i], "ph"), *c = jv_str(evs->kids[i], "cat");
    if (p && !strcmp(p, ph) && (!cat || (c && !strcmp(c, cat)))) n++;
  }
  return n;
}

/* The launch event numbered |no|, or NULL. */
static const jv *launch_event(const jv *root, double no) {
  const jv *evs = trace_events(root);
  for (size_t i = 0; i < evs->n; i++) {
    const jv *e = evs->kids[i];
    double n;
    const char *c = jv_str(e, "cat");
    if (c && !strcmp(c, "launch") && jv_num(jv_get(e, "args"), "launch", &n) && n == no) return e;
  }
  return NULL;
}

static bool encloses(const jv *x, const jv *point) {
  double xt = 0, xd = 0, xtid = -1, pt = -1, ptid = -2;
  jv_num(x, "ts", &xt);
  jv_num(x, "dur", &xd);
  jv_num(x, "tid", &xtid);
  jv_num(point, "ts", &pt);
  jv_num(point, "tid", &ptid);
  return xtid == ptid && xt <= pt && pt <= xt + xd;
}

/* True when a flow of |cat| starts in |from| and finishes in |to|. */
static bool flow_between(const jv *root, const char *cat, const jv *from, const jv *to) {
  const jv *evs = trace_events(root);
  for (size_t i = 0; i < evs->n; i++) {
    const jv *s = evs->kids[i];
    const char *ph = jv_str(s, "ph"), *c = jv_str(s, "cat");
    if (!ph || strcmp(ph, "s") || !c || strcmp(c, cat) || !encloses(from, s)) continue;
    double id = -1;
    jv_num(s, "id", &id);
    for (size_t j = 0; j < evs->n; j++) {
      const jv *f = evs->kids[j];
      const char *fph = jv_str(f, "ph");
      double fid;
      if (fph && !strcmp(fph, "f") && jv_num(f, "id", &fid) && fid == id && encloses(to, f))
        return true;
    }
  }
  return false;
}

static const char *outcome_of(const jv *e) {
  return jv_str(jv_get(e, "args"), "outcome");
}

static double failure_of(const jv *e) {
  double f = 0;
  jv_num(jv_get(e, "args"), "failure", &f);
  return f;
}

/* ---- the format, and agreement with the device ----------------------------------------- */

Test(trace, a_mixed_run_is_valid_trace_json_with_one_event_per_launch, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  weft_buffer b[4];
  for (int i = 0; i < 4; i++) b[i] = buffer(e.dev, (weft_stream_id)i, 256);
  uint8_t zero[256] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, b[0], 0, zero, sizeof(zero)));
  EXPECT_OK(weft_device_set_failpoints(e.dev, "launch#7=Validation"));
  for (int r = 0; r < 10; r++)
    for (int i = 0; i < 3; i++) launch(e.dev, (weft_stream_id)(i + r) % 4, k, b[i], b[i + 1]);
  EXPECT_OK(weft_sync(e.dev, 0));
  uint8_t got[256];
  weft_error_free(weft_buffer_read(e.dev, 1, b[3], 0, got, sizeof(got))); /* tainted: refused */
  EXPECT_OK(weft_buffer_release(e.dev, b[2]));
  char path[256];
  trace_path(path, sizeof(path), "mixed");
  EXPECT_OK(weft_trace_end(e.dev, path));
  weft_device_stats st = stats(e.dev);
  cr_assert_gt(st.launches_failed, 0);
  cr_assert_gt(st.launches_skipped, 0);
  jv *root = load_checked(path);
  size_t launches = count_events(root, "X", "launch");
  cr_assert_eq(launches, st.launches_run + st.launches_failed + st.launches_skipped,
               "%zu launch events against %" PRIu64 " run + %" PRIu64 " failed + %" PRIu64
               " skipped",
               launches, st.launches_run, st.launches_failed, st.launches_skipped);
  cr_assert_eq(count_events(root, "X", "copy"), 2, "the write and the read");
  cr_assert_geq(count_events(root, "i", "memory"), 5, "4 creates and a release at least");
  cr_assert_gt(count_events(root, "C", NULL), 0, "memory and occupancy counters");
  cr_assert_gt(count_events(root, "i", "scheduler"), 0, "batches flushed");
  /* Every stream slot that ran work has its named track. */
  const jv *evs = trace_events(root);
  size_t named = 0;
  for (size_t i = 0; i < evs->n; i++) {
    const char *n = jv_str(evs->kids[i], "name");
    if (n && !strcmp(n, "thread_name")) named++;
  }
  cr_assert_eq(named, 5, "4 stream slots and the scheduler");
  double dropped = -1;
  jv_num(jv_get(root, "otherData"), "events_dropped", &dropped);
  cr_assert_eq(dropped, 0);
  jv_free(root);
  remove(path);
  env_close(&e);
}

Test(trace, a_failure_and_its_skipped_dependents_share_an_id_joined_by_flows, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64), c = buffer(e.dev, 1, 64),
              d = buffer(e.dev, 2, 64);
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  EXPECT_OK(weft_device_set_failpoints(e.dev, "kernel:fails=Validation"));
  weft_kernel kf = kernel(e.dev, "fails");
  launch(e.dev, 0, kf, a, b); /* fails: b carries it */
  launch(e.dev, 1, k, b, c);  /* skipped: c carries it */
  launch(e.dev, 2, k, c, d);  /* skipped, on a third stream */
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_sync(e.dev, 1));
  EXPECT_OK(weft_sync(e.dev, 2));
  char path[256];
  trace_path(path, sizeof(path), "chain");
  EXPECT_OK(weft_trace_end(e.dev, path));
  weft_device_stats st = stats(e.dev);
  cr_assert_eq(st.launches_failed, 1);
  cr_assert_eq(st.launches_skipped, 2);
  jv *root = load_checked(path);
  const jv *evs = trace_events(root);
  const jv *failed = NULL, *skip1 = NULL, *skip2 = NULL;
  for (size_t i = 0; i < evs->n; i++) {
    const jv *x = evs->kids[i];
    const char *cat = jv_str(x, "cat"), *o = outcome_of(x);
    if (!cat || strcmp(cat, "launch") || !o) continue;
    if (!strcmp(o, "failed"))
      failed = x;
    else if (!strcmp(o, "skipped"))
      *(skip1 ? &skip2 : &skip1) = x;
  }
  cr_assert(failed && skip1 && skip2, "a failed launch and two skipped ones");
  cr_assert_str_eq(jv_str(failed, "name"), "fails");
  cr_assert_neq(failure_of(failed), 0);
  cr_assert_eq(failure_of(skip1), failure_of(failed), "the skip names the root failure");
  cr_assert_eq(failure_of(skip2), failure_of(failed));
  const char *err = jv_str(jv_get(failed, "args"), "error");
  cr_assert(err && strstr(err, "failpoint"), "the failure's message: %s", err ? err : "none");
  const char *root_msg = jv_str(jv_get(skip2, "args"), "root");
  cr_assert(root_msg && strstr(root_msg, "failpoint"), "the root message on a skipped launch");
  cr_assert(jv_str(jv_get(skip1, "args"), "skipped_because"));
  cr_assert(flow_between(root, "failure", failed, skip1), "failed -> first skipped");
  cr_assert(flow_between(root, "failure", skip1, skip2), "first skipped -> second");
  cr_assert(!flow_between(root, "failure", failed, skip2), "the path goes through the carrier");
  /* Each skipped launch's bindings are listed with their access. */
  const jv *bds = jv_get(jv_get(skip2, "args"), "bindings");
  cr_assert(bds && bds->t == JV_ARR && bds->n == 2);
  cr_assert_str_eq(jv_str(bds->kids[0], "access"), "read");
  cr_assert_str_eq(jv_str(bds->kids[1], "access"), "write");
  jv_free(root);
  remove(path);
  env_close(&e);
}

/* A launch_ex with |label| from |in| into |out| on stream 0. */
static void launch_labelled(weft_device *dev, weft_kernel k, weft_buffer in, weft_buffer out,
                            const char *label) {
  weft_binding bd[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  weft_launch_desc d = {.struct_size = sizeof(d),
                        .stream = 0,
                        .kernel = k,
                        .grid = {1, 1, 1},
                        .block = {1, 1, 1},
                        .bindings = bd,
                        .num_bindings = 2,
                        .label = label};
  EXPECT_OK(weft_launch_ex(dev, &d));
}

Test(trace, a_labelled_launch_is_named_by_its_label_and_its_kernel_is_an_argument, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64), c = buffer(e.dev, 0, 64);
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  uint64_t first = stats(e.dev).launches + 1;
  char spec[64];
  snprintf(spec, sizeof(spec), "launch#%" PRIu64 "=Validation", first + 2);
  EXPECT_OK(weft_device_set_failpoints(e.dev, spec));
  launch_labelled(e.dev, k, a, b, "attn.qk"); /* ran: the straight-line record */
  launch(e.dev, 0, k, b, c);                  /* no label */
  launch_labelled(e.dev, k, a, c, "attn.v");  /* failed: the general record */
  EXPECT_OK(weft_sync(e.dev, 0));
  char path[256];
  trace_path(path, sizeof(path), "label");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  const char *names[3] = {"attn.qk", "inc", "attn.v"}, *outcomes[3] = {"ran", "ran", "failed"};
  for (int i = 0; i < 3; i++) {
    const jv *ev = launch_event(root, (double)(first + (uint64_t)i));
    cr_assert_not_null(ev, "launch %d", i);
    cr_assert_str_eq(jv_str(ev, "name"), names[i]);
    cr_assert_str_eq(outcome_of(ev), outcomes[i]);
    const char *kn = jv_str(jv_get(ev, "args"), "kernel");
    if (i == 1)
      cr_assert_null(kn, "an unlabelled launch is named by its kernel already");
    else
      cr_assert(kn && !strcmp(kn, "inc"), "the kernel of '%s' is an argument", names[i]);
  }
  jv_free(root);
  remove(path);
  env_close(&e);
}

/* A chain's launches are stamped once each where they run back to back:
 * on their stream's track they follow one another, never overlapping, and
 * each lasts at least as long as zero. */
Test(trace, a_chains_launches_follow_one_another_on_their_track, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 1, 64), b = buffer(e.dev, 1, 64);
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 1, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  enum { N = 3000 };
  for (int i = 0; i < N; i++) launch(e.dev, 1, k, i % 2 ? b : a, i % 2 ? a : b);
  EXPECT_OK(weft_sync(e.dev, 1));
  char path[256];
  trace_path(path, sizeof(path), "chain");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  const jv *evs = trace_events(root);
  double end = -1, seq = 0;
  size_t seen = 0;
  for (size_t i = 0; i < evs->n; i++) { /* in retirement order: stream order on one track */
    const jv *ev = evs->kids[i];
    const char *c = jv_str(ev, "cat");
    if (!c || strcmp(c, "launch")) continue;
    double ts = -1, dur = -1, s = 0;
    jv_num(ev, "ts", &ts);
    jv_num(ev, "dur", &dur);
    jv_num(jv_get(ev, "args"), "seq", &s);
    cr_assert_gt(s, seq, "stream order");
    cr_assert_geq(dur, 0);
    /* Microseconds with 3 decimals: allow the rounding of both numbers. */
    cr_assert_geq(ts + 0.002, end, "launch at seq %.0f starts at %.3f before the last ended (%.3f)",
                  s, ts, end);
    end = ts + dur;
    seq = s;
    seen++;
  }
  cr_assert_eq(seen, N);
  jv_free(root);
  remove(path);
  env_close(&e);
}

Test(trace, a_cross_stream_wait_is_a_flow_from_the_producer, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.strategy = WEFT_STRATEGY_SEQUENTIAL; /* each batch on its own stream: a real wait */
  env_open(&e);
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64), c = buffer(e.dev, 1, 64);
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  launch(e.dev, 0, k, a, b); /* launch 1 of the trace */
  launch(e.dev, 1, k, b, c); /* waits for it on another stream */
  EXPECT_OK(weft_sync(e.dev, 1));
  char path[256];
  trace_path(path, sizeof(path), "wait");
  EXPECT_OK(weft_trace_end(e.dev, path));
  weft_device_stats st = stats(e.dev);
  cr_assert_geq(st.cross_stream_waits, 1);
  jv *root = load_checked(path);
  const jv *evs = trace_events(root);
  const jv *prod = NULL, *cons = NULL;
  for (size_t i = 0; i < evs->n; i++) {
    const jv *x = evs->kids[i];
    const char *cat = jv_str(x, "cat");
    if (!cat || strcmp(cat, "launch")) continue;
    *(prod ? &cons : &prod) = x;
  }
  cr_assert(prod && cons);
  double tp, tc;
  jv_num(prod, "tid", &tp);
  jv_num(cons, "tid", &tc);
  cr_assert_neq(tp, tc, "on two stream tracks");
  cr_assert(flow_between(root, "wait", prod, cons));
  cr_assert_str_eq(outcome_of(cons), "ran");
  jv_free(root);
  remove(path);
  env_close(&e);
}

static weft_status slow_inc(const weft_kernel_ctx *ctx, void *user) {
  usleep(20000);
  return inc(ctx, user);
}

/* A launch chained behind its stream's previous one may take that one's end
 * as its start, but not when it waits for another stream: it starts after
 * its producer ended (the flush wraps a batch before placement gives the
 * launch its waits; a stale test drew the wait's arrow backwards). */
Test(trace, a_launch_that_waits_behind_a_chain_starts_after_its_producer, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.strategy = WEFT_STRATEGY_SEQUENTIAL; /* each batch on its own stream: a real wait */
  env_open(&e);
  weft_kernel k = kernel(e.dev, "inc"), ks;
  EXPECT_OK(weft_kernel_host(e.dev, "slow_inc", slow_inc, NULL, &ks));
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64), c = buffer(e.dev, 1, 64),
              d = buffer(e.dev, 1, 64), x = buffer(e.dev, 1, 64);
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_buffer_write(e.dev, 1, c, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_sync(e.dev, 1));
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  launch(e.dev, 0, ks, a, a); /* 20 ms */
  launch(e.dev, 0, k, a, b);  /* the producer: starts after it */
  enum { CHAIN = 200 };       /* a chain on stream 1 that ends long before */
  for (int i = 0; i < CHAIN; i++) launch(e.dev, 1, k, i % 2 ? d : c, i % 2 ? c : d);
  launch(e.dev, 1, k, b, x); /* waits for the producer, behind the chain */
  EXPECT_OK(weft_sync(e.dev, 1));
  char path[256];
  trace_path(path, sizeof(path), "wait-chain");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path); /* the schema check: no flow finishes before it starts */
  const jv *prod = launch_event(root, 2), *cons = launch_event(root, 2 + CHAIN + 1);
  const jv *slow = launch_event(root, 1);
  cr_assert(prod && cons && slow);
  /* The clock's ticks became microseconds: the 20 ms sleep lasts at least that. */
  double ds = 0;
  jv_num(slow, "dur", &ds);
  cr_assert(ds >= 20000 && ds < 20e6, "a 20 ms kernel lasted %.3f us", ds);
  double tp = 0, dp = 0, tc = 0;
  jv_num(prod, "ts", &tp);
  jv_num(prod, "dur", &dp);
  jv_num(cons, "ts", &tc);
  cr_assert_geq(tc + 0.002, tp + dp,
                "the waiting launch starts at %.3f, before its producer ended (%.3f)", tc, tp + dp);
  cr_assert(flow_between(root, "wait", prod, cons));
  jv_free(root);
  remove(path);
  env_close(&e);
}

/* ---- buffer labels (weft_buffer_set_label) ------------------------------------------------ */

/* The binding of |ev| (a launch or copy event) to |b|, or NULL. */
static const jv *binding_of(const jv *ev, weft_buffer b) {
  const jv *bds = jv_get(jv_get(ev, "args"), "bindings");
  cr_assert(bds && bds->t == JV_ARR, "the event lists its bindings");
  for (size_t i = 0; i < bds->n; i++) {
    double id = 0;
    if (jv_num(bds->kids[i], "buffer", &id) && id == (double)(uint32_t)b.id) return bds->kids[i];
  }
  return NULL;
}

/* |o| (a binding, or a buffer event's args) names |b| as reports do: by
 * |label| with a "label" key, or (NULL) as "buffer #N" with none. */
static void expect_named(const jv *o, weft_buffer b, const char *label, const char *what) {
  cr_assert_not_null(o, "%s: no such binding or event", what);
  char want[256];
  if (label)
    snprintf(want, sizeof(want), "buffer '%s' (#%" PRIu32 ")", label, (uint32_t)b.id);
  else
    snprintf(want, sizeof(want), "buffer #%" PRIu32, (uint32_t)b.id);
  const char *name = jv_str(o, "name"), *got = jv_str(o, "label");
  cr_assert(name && !strcmp(name, want), "%s: named '%s', not '%s'", what, name ? name : "(none)",
            want);
  if (label)
    cr_assert(got && !strcmp(got, label), "%s: label '%s', not '%s'", what, got ? got : "(none)",
              label);
  else
    cr_assert_null(jv_get(o, "label"), "%s: a label key (%s) on an unlabelled buffer", what,
                   got ? got : "not a string");
}

/* The args of the |nth| (0-based) instant named |name| about buffer |b|, or NULL. */
static const jv *buffer_event(const jv *root, const char *name, weft_buffer b, int nth) {
  const jv *evs = trace_events(root);
  for (size_t i = 0; i < evs->n; i++) {
    const char *n = jv_str(evs->kids[i], "name");
    const jv *args = jv_get(evs->kids[i], "args");
    double id = 0;
    if (n && !strcmp(n, name) && jv_num(args, "buffer", &id) && id == (double)(uint32_t)b.id &&
        nth-- == 0)
      return args;
  }
  return NULL;
}

Test(trace, a_labelled_buffers_binding_carries_its_label, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64);
  const char *label = "attn \"weights\"\\v1"; /* escaped in the file */
  EXPECT_OK(weft_buffer_set_label(e.dev, b, label));
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  uint64_t no = stats(e.dev).launches + 1;
  launch(e.dev, 0, k, a, b);
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_sync(e.dev, 0));
  char path[256];
  trace_path(path, sizeof(path), "buflabel");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  const jv *ev = launch_event(root, (double)no);
  cr_assert_not_null(ev);
  expect_named(binding_of(ev, b), b, label, "the launch's binding of the labelled buffer");
  expect_named(binding_of(ev, a), a, NULL, "the launch's binding of the other one");
  /* A write's binding, and the buffer's events from its label on. */
  const jv *evs = trace_events(root), *copy = NULL;
  for (size_t i = 0; i < evs->n; i++) {
    const char *c = jv_str(evs->kids[i], "cat");
    if (c && !strcmp(c, "copy") && binding_of(evs->kids[i], b)) copy = evs->kids[i];
  }
  cr_assert_not_null(copy, "the write into the labelled buffer");
  expect_named(binding_of(copy, b), b, label, "the write's binding");
  expect_named(buffer_event(root, "buffer create", b, 0), b, NULL,
               "its creation, before the label");
  expect_named(buffer_event(root, "buffer label", b, 0), b, label, "the label event");
  expect_named(buffer_event(root, "buffer release", b, 0), b, label, "its release");
  expect_named(buffer_event(root, "buffer free", b, 0), b, label, "its free");
  jv_free(root);
  remove(path);
  env_close(&e);
}

Test(trace, a_label_set_before_the_trace_began_shows, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 1, 64), c = buffer(e.dev, 0, 64);
  EXPECT_OK(weft_buffer_set_label(e.dev, a, "input"));
  EXPECT_OK(weft_buffer_set_label(e.dev, b, "output"));
  EXPECT_OK(weft_buffer_set_label(e.dev, c, "gone"));
  EXPECT_OK(weft_buffer_set_label(e.dev, c, NULL)); /* cleared before the recording */
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  uint64_t no = stats(e.dev).launches + 1;
  launch(e.dev, 0, k, a, b);
  launch(e.dev, 0, k, a, c);
  EXPECT_OK(weft_sync(e.dev, 0));
  char path[256];
  trace_path(path, sizeof(path), "labelbefore");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  const jv *first = launch_event(root, (double)no), *second = launch_event(root, (double)no + 1);
  cr_assert(first && second);
  expect_named(binding_of(first, a), a, "input", "the read binding");
  expect_named(binding_of(first, b), b, "output", "the write binding");
  expect_named(binding_of(second, c), c, NULL, "a buffer whose label was cleared before");
  const jv *set = buffer_event(root, "buffer label", b, 0);
  expect_named(set, b, "output", "the begin's label event");
  const jv *before = jv_get(set, "set_before_recording");
  cr_assert(before && before->t == JV_BOOL && before->b, "said to be set before the recording");
  cr_assert_null(buffer_event(root, "buffer label", c, 0), "no label event for an unlabelled one");
  jv_free(root);
  remove(path);
  env_close(&e);
}

Test(trace, a_relabel_mid_trace_changes_later_events_only, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc"), ks;
  EXPECT_OK(weft_kernel_host(e.dev, "slow_inc", slow_inc, NULL, &ks));
  weft_buffer a = buffer(e.dev, 0, 64), x = buffer(e.dev, 0, 64);
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_buffer_set_label(e.dev, x, "first"));
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  uint64_t no = stats(e.dev).launches + 1;
  /* Still running (20 ms) when the relabel is taken: it retires after the
   * label's record, and shows the label it was launched with. */
  launch(e.dev, 0, ks, a, x);
  EXPECT_OK(weft_buffer_set_label(e.dev, x, "second"));
  launch(e.dev, 0, k, a, x);
  EXPECT_OK(weft_buffer_set_label(e.dev, x, NULL));
  launch(e.dev, 0, k, a, x);
  EXPECT_OK(weft_buffer_set_label(e.dev, x, "third"));
  EXPECT_OK(weft_sync(e.dev, 0));
  char path[256];
  trace_path(path, sizeof(path), "relabel");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  const char *want[3] = {"first", "second", NULL};
  for (int i = 0; i < 3; i++) {
    const jv *ev = launch_event(root, (double)(no + (uint64_t)i));
    cr_assert_not_null(ev, "launch %d", i);
    char what[64];
    snprintf(what, sizeof(what), "launch %d's binding", i);
    expect_named(binding_of(ev, x), x, want[i], what);
    expect_named(binding_of(ev, a), a, NULL, what);
  }
  expect_named(buffer_event(root, "buffer label", x, 0), x, "first", "the label at begin");
  expect_named(buffer_event(root, "buffer label", x, 1), x, "second", "the relabel");
  expect_named(buffer_event(root, "buffer label", x, 2), x, NULL, "the label cleared");
  expect_named(buffer_event(root, "buffer label", x, 3), x, "third", "the last label");
  jv_free(root);
  remove(path);
  env_close(&e);
}

Test(trace, an_unlabelled_buffer_has_no_label_key, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64), l = buffer(e.dev, 0, 64);
  EXPECT_OK(weft_buffer_set_label(e.dev, l, "labelled")); /* the only one */
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  uint64_t no = stats(e.dev).launches + 1;
  launch(e.dev, 0, k, a, b);
  launch(e.dev, 0, k, l, b);
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_sync(e.dev, 0));
  char path[256];
  trace_path(path, sizeof(path), "nolabel");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  const jv *first = launch_event(root, (double)no), *second = launch_event(root, (double)no + 1);
  cr_assert(first && second);
  expect_named(binding_of(first, a), a, NULL, "an unlabelled input");
  expect_named(binding_of(first, b), b, NULL, "an unlabelled output");
  expect_named(binding_of(second, b), b, NULL, "the output, next to a labelled input");
  expect_named(binding_of(second, l), l, "labelled", "the labelled input");
  expect_named(buffer_event(root, "buffer create", b, 0), b, NULL, "its creation");
  expect_named(buffer_event(root, "buffer release", b, 0), b, NULL, "its release");
  jv_free(root);
  remove(path);
  env_close(&e);
}

/* True when the |n| bytes at |s| are UTF-8 as RFC 3629 has it (no overlong
 * form, no surrogate, nothing past U+10FFFF): what JSON text must be. */
static bool valid_utf8(const unsigned char *s, size_t n, size_t *bad) {
  for (size_t i = 0; i < n;) {
    unsigned c = s[i], k = c < 0x80             ? 0
                           : (c & 0xe0) == 0xc0 ? 1
                           : (c & 0xf0) == 0xe0 ? 2
                           : (c & 0xf8) == 0xf0 ? 3
                                                : 4;
    uint32_t cp = k == 0 ? c : k == 1 ? c & 0x1f : k == 2 ? c & 0x0f : c & 0x07;
    bool ok = k < 4 && i + k < n;
    for (unsigned j = 1; ok && j <= k; j++) {
      ok = (s[i + j] & 0xc0) == 0x80;
      cp = cp << 6 | (s[i + j] & 0x3f);
    }
    static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
    if (!ok || cp < least[k] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
      *bad = i;
      return false;
    }
    i += k + 1;
  }
  return true;
}

Test(trace, a_label_whose_bytes_are_not_utf8_leaves_the_file_valid_utf8, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64);
  /* Latin-1, a lone continuation byte, a truncated sequence, an overlong
   * '/', a surrogate, and valid UTF-8 that must stay as it is. */
  const char *odd = "caf\xe9 \x80 \xe2\x82 \xc0\xaf \xed\xa0\x80 ok \xc3\xa9\xe2\x82\xac";
  EXPECT_OK(weft_buffer_set_label(e.dev, a, odd)); /* before the recording */
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  EXPECT_OK(weft_buffer_set_label(e.dev, b, "\xff\xfe"));
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  launch(e.dev, 0, k, a, b);
  EXPECT_OK(weft_sync(e.dev, 0));
  char path[256];
  trace_path(path, sizeof(path), "oddlabel");
  EXPECT_OK(weft_trace_end(e.dev, path));
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f);
  static unsigned char bytes[1 << 20];
  size_t n = fread(bytes, 1, sizeof(bytes), f);
  fclose(f);
  size_t bad = 0;
  cr_assert(valid_utf8(bytes, n, &bad),
            "the trace is not UTF-8 (JSON text must be) at byte %zu: 0x%02x in \"%.40s\"", bad,
            bytes[bad], (const char *)bytes + (bad > 20 ? bad - 20 : 0));
  cr_assert_not_null(memmem(bytes, n, "\xc3\xa9\xe2\x82\xac", 5),
                     "valid UTF-8 in a label is written as it is");
  jv *root = load_checked(path);
  const jv *args = buffer_event(root, "buffer label", a, 0);
  cr_assert_not_null(args, "the label set before the recording");
  const char *label = jv_str(args, "label");
  cr_assert(label && !strncmp(label, "caf", 3), "its label: %s", label ? label : "(none)");
  jv_free(root);
  remove(path);
  EXPECT_OK(weft_buffer_release(e.dev, a));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}

/* ---- the ring ---------------------------------------------------------------------------- */

Test(trace, a_ring_that_wraps_keeps_the_newest_events_and_counts_the_dropped, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64);
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_trace_begin(e.dev, 1024)); /* the smallest ring */
  enum { N = 2000 };
  uint64_t first = stats(e.dev).launches + 1;
  for (int i = 0; i < N; i++) launch(e.dev, 0, k, a, b);
  EXPECT_OK(weft_sync(e.dev, 0));
  char path[256];
  trace_path(path, sizeof(path), "wrap");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  double dropped = 0, records = 0;
  jv_num(jv_get(root, "otherData"), "events_dropped", &dropped);
  jv_num(jv_get(root, "otherData"), "ring_records", &records);
  cr_assert_eq(records, 1024);
  cr_assert_gt(dropped, 0, "%d launches of 2 records each do not fit 1024", N);
  cr_assert_not_null(launch_event(root, (double)(first + N - 1)), "the newest launch is kept");
  cr_assert_null(launch_event(root, (double)first), "the oldest is dropped");
  size_t kept = count_events(root, "X", "launch");
  cr_assert_gt(kept, 300);
  cr_assert_lt(kept, N);
  jv_free(root);
  remove(path);
  env_close(&e);
}

/* The labels keep a ring of their own: the main ring's oldest records go
 * first when it wraps, and the labels set before the recording, or early
 * in it, would be among them while the events kept still use them. A
 * label set before the recording, one set during it on a buffer freed
 * before the end, and one changed late (each launch shows the label it was
 * launched with) all survive a wrap. */
Test(trace, a_wrapped_ring_keeps_the_labels_of_the_events_it_keeps, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64), c = buffer(e.dev, 0, 64);
  weft_buffer t = buffer(e.dev, 0, 64), plain = buffer(e.dev, 0, 64);
  uint8_t zero[64] = {0};
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, zero, sizeof(zero)));
  EXPECT_OK(weft_buffer_set_label(e.dev, a, "input"));
  EXPECT_OK(weft_buffer_set_label(e.dev, c, "before"));
  EXPECT_OK(weft_trace_begin(e.dev, 1024)); /* the smallest ring */
  EXPECT_OK(weft_buffer_set_label(e.dev, t, "scratch"));
  enum { N = 3000 };
  uint64_t first = stats(e.dev).launches + 1;
  for (int i = 0; i < N; i++) {
    if (i == N - 100) EXPECT_OK(weft_buffer_set_label(e.dev, c, "after"));
    launch(e.dev, 0, k, a, i < N / 2 ? t : i % 2 ? b : c);
    if (i == N / 2 - 1) EXPECT_OK(weft_buffer_release(e.dev, t)); /* freed once its work retires */
  }
  launch(e.dev, 0, k, a, plain);
  EXPECT_OK(weft_sync(e.dev, 0));
  char path[256];
  trace_path(path, sizeof(path), "wraplabel");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  cr_assert_null(launch_event(root, (double)first), "the ring wrapped");
  double dropped = -1;
  jv_num(jv_get(root, "otherData"), "label_events_dropped", &dropped);
  cr_assert_eq(dropped, 0, "the labels' ring lost %.0f", dropped);
  expect_named(buffer_event(root, "buffer label", a, 0), a, "input", "the begin's label event");
  /* The newest launch that wrote |c| before the relabel (kept, since the
   * client runs at most a few hundred launches ahead of retirement here or
   * the ring holds them), and the last one. */
  const jv *old_c = NULL, *new_c = launch_event(root, (double)(first + N - 2));
  for (uint64_t i = N - 100; i-- > N / 2 && !old_c;)
    if (i % 2 == 0) old_c = launch_event(root, (double)(first + i));
  cr_assert(old_c && new_c, "launches before and after the relabel are kept");
  expect_named(binding_of(new_c, a), a, "input", "a label set before the recording");
  expect_named(binding_of(new_c, c), c, "after", "a label set late in the recording");
  expect_named(binding_of(old_c, c), c, "before", "the label it had before the relabel");
  expect_named(binding_of(launch_event(root, (double)(first + N)), plain), plain, NULL,
               "an unlabelled buffer");
  expect_named(buffer_event(root, "buffer label", t, 0), t, "scratch", "a label set during it");
  const jv *freed = buffer_event(root, "buffer free", t, 0); /* the ring may have dropped it */
  if (freed) expect_named(freed, t, "scratch", "the freed buffer's free");
  jv_free(root);
  remove(path);
  env_close(&e);
}

/* ---- refusals: a clear error, nothing lost, nothing leaked ------------------------------- */

Test(trace, begin_twice_is_refused_and_the_first_recording_goes_on, .timeout = 30) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64);
  EXPECT_OK(weft_trace_begin(e.dev, 4096));
  launch(e.dev, 0, k, a, b);
  weft_status st = weft_trace_begin(e.dev, 0);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "already recording"), "%s",
                     weft_error_message(st));
  weft_error_free(st);
  char path[256];
  trace_path(path, sizeof(path), "twice");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  cr_assert_eq(count_events(root, "X", "launch"), 1, "the first recording kept its launch");
  jv_free(root);
  remove(path);
  env_close(&e);
}

Test(trace, end_without_begin_is_refused_and_writes_no_file, .timeout = 30) {
  env e = env_new();
  char path[256];
  trace_path(path, sizeof(path), "none");
  remove(path);
  weft_status st = weft_trace_end(e.dev, path);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "not recording"), "%s", weft_error_message(st));
  weft_error_free(st);
  cr_assert_neq(access(path, F_OK), 0, "a refused end leaves no file behind");
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  EXPECT_OK(weft_trace_end(e.dev, path));
  st = weft_trace_end(e.dev, path); /* ended already */
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  jv *root = load_checked(path); /* the second end left the first file alone */
  jv_free(root);
  remove(path);
  env_close(&e);
}

Test(trace, a_bad_path_is_refused_by_name_and_the_recording_goes_on, .timeout = 30) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64);
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  launch(e.dev, 0, k, a, b);
  weft_status st = weft_trace_end(e.dev, NULL);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "path is NULL"));
  weft_error_free(st);
  st = weft_trace_end(e.dev, "");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "path is empty"));
  weft_error_free(st);
  const char *bad = "/nonexistent-weft-dir/trace.json";
  st = weft_trace_end(e.dev, bad);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), bad), "names the path: %s",
                     weft_error_message(st));
  weft_error_free(st);
  launch(e.dev, 0, k, b, a);
  char path[256];
  trace_path(path, sizeof(path), "badpath");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  cr_assert_eq(count_events(root, "X", "launch"), 2, "nothing recorded was lost");
  jv_free(root);
  remove(path);
  env_close(&e);
}

Test(trace, a_ring_larger_than_a_trace_holds_is_refused, .timeout = 30) {
  env e = env_new();
  weft_status st = weft_trace_begin(e.dev, UINT64_MAX);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "max_events"));
  weft_error_free(st);
  st = weft_trace_begin(NULL, 0);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  st = weft_trace_end(NULL, "x.json");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  env_close(&e);
}

Test(trace, a_recording_never_ended_is_dropped_at_close_without_a_leak, .timeout = 30) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64);
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  launch(e.dev, 0, k, a, b);
  env_close(&e); /* the counting allocator finds every block back */
}

/* ---- WEFT_TRACE: the device's whole life, written at close -------------------------------- */

Test(trace, weft_trace_records_the_whole_life_and_writes_at_close, .timeout = 60) {
  char path[256];
  trace_path(path, sizeof(path), "env");
  remove(path);
  setenv("WEFT_TRACE", path, 1);
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 1, 64);
  for (int i = 0; i < 5; i++)
    launch(e.dev, (weft_stream_id)(i % 2), k, i % 2 ? b : a, i % 2 ? a : b);
  weft_status st = weft_trace_begin(e.dev, 0);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "WEFT_TRACE is recording");
  weft_error_free(st);
  st = weft_trace_end(e.dev, path);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "WEFT_TRACE's ends at close");
  cr_assert_not_null(strstr(weft_error_message(st), "WEFT_TRACE"));
  weft_error_free(st);
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_sync(e.dev, 1));
  weft_device_stats s = stats(e.dev); /* every launch retired */
  env_close(&e);
  unsetenv("WEFT_TRACE");
  jv *root = load_checked(path);
  cr_assert_eq(count_events(root, "X", "launch"),
               s.launches_run + s.launches_failed + s.launches_skipped);
  cr_assert_eq(count_events(root, "X", "launch"), 5);
  /* Both buffers' creation and their frees at close. */
  const jv *evs = trace_events(root);
  size_t creates = 0;
  for (size_t i = 0; i < evs->n; i++) {
    const char *n = jv_str(evs->kids[i], "name");
    if (n && !strcmp(n, "buffer create")) creates++;
  }
  cr_assert_eq(creates, 2);
  jv_free(root);
  remove(path);
}

Test(trace, a_poisoned_device_still_ends_its_trace_with_the_poisoning, .timeout = 60) {
  env e = env_new();
  weft_kernel k = kernel(e.dev, "inc");
  weft_buffer a = buffer(e.dev, 0, 64), b = buffer(e.dev, 0, 64);
  EXPECT_OK(weft_trace_begin(e.dev, 0));
  uint64_t next = stats(e.dev).launches + 1;
  char spec[64];
  snprintf(spec, sizeof(spec), "poison#%" PRIu64, next + 1);
  EXPECT_OK(weft_device_set_failpoints(e.dev, spec));
  weft_binding bd[2] = {{a, 0, WEFT_WHOLE, WEFT_READ}, {b, 0, WEFT_WHOLE, WEFT_WRITE}};
  for (int i = 0; i < 4; i++) /* refused once the device is poisoned */
    weft_error_free(weft_launch(e.dev, 0, k, G1, G1, bd, 2, NULL, 0));
  weft_error_free(weft_sync(e.dev, 0));
  weft_status poison = weft_device_poisoned(e.dev);
  cr_assert_not_null(poison);
  weft_error_free(poison);
  char path[256];
  trace_path(path, sizeof(path), "poison");
  EXPECT_OK(weft_trace_end(e.dev, path));
  jv *root = load_checked(path);
  const jv *evs = trace_events(root);
  bool seen = false;
  for (size_t i = 0; i < evs->n; i++) {
    const char *n = jv_str(evs->kids[i], "name");
    if (n && !strcmp(n, "device poisoned")) seen = true;
  }
  cr_assert(seen, "the poisoning is an instant event");
  cr_assert_geq(count_events(root, "X", "launch"), 1);
  jv_free(root);
  remove(path);
  env_close(&e);
}
