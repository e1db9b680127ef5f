/* Failure handling on a device, one behaviour per test: failpoints (launch,
 * kernel, alloc and poison entries, from the options, from WEFT_FAILPOINTS and
 * from weft_device_set_failpoints; malformed specs; determinism), device
 * poisoning (what stops, who wakes, the callback, later calls, close),
 * failures found when a kernel runs (skips on every stream, the chain of
 * skipped launches, independent work, a bounded graph under a failure storm,
 * partial writes) and the write scope (an empty write set mints nothing,
 * weft_check without a barrier, repeated failures keep the graph constant).
 * Every device runs on a counting allocator that must end with zero live
 * blocks. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

/* ---- helpers --------------------------------------------------------------------------- */

/* Closes the device (buffers never released included): nothing may leak. */
static weft_device_stats stats_of(weft_device *dev) {
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(dev, &s));
  return s;
}

/* A barrier on every slot (streams fold: 0..max_streams-1 cover them). */
static void sync_all(env *e) {
  for (weft_stream_id s = 0; s < e->opts.max_streams; s++) EXPECT_OK(weft_sync(e->dev, s));
}

static weft_buffer make_buffer(weft_device *dev, weft_stream_id stream, uint64_t size) {
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(dev, stream, size, &b));
  return b;
}

static void sleep_ms(unsigned ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const uint32_t one[3] = {1, 1, 1};

static char *text_of(weft_status st, char *buf, size_t cap) {
  weft_error_format(st, buf, cap);
  return buf;
}

/* The single Unwritten inside the Several a failed read returns (borrowed). */
static weft_status only_unwritten(weft_status st, int line) {
  char text[4096];
  text_of(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "line %d: expected Several, got %s", line,
               text);
  cr_assert_eq(weft_error_count(st), 1, "line %d: expected one error in %s", line, text);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN, "line %d: expected Unwritten in %s", line,
               text);
  cr_assert_neq(weft_error_failure_id(u), 0, "line %d: failure id 0", line);
  cr_assert_not_null(weft_error_root(u), "line %d: Unwritten without a root", line);
  return u;
}
#define ONLY_UNWRITTEN(st) only_unwritten((st), __LINE__)

/* The read fails with one Unwritten whose root has |kind| and a message
 * containing |msg| (and |msg2| when not NULL); returns its failure id. */
static uint64_t expect_read_root(weft_device *dev, weft_stream_id stream, weft_buffer b,
                                 uint64_t off, uint64_t len, weft_error_kind kind, const char *msg,
                                 const char *msg2, int line) {
  uint8_t *dst = calloc(len ? len : 1, 1);
  weft_status st = weft_buffer_read(dev, stream, b, off, dst, len);
  free(dst);
  cr_assert_not_null(st, "line %d: the read of [%" PRIu64 ", +%" PRIu64 ") succeeded", line, off,
                     len);
  weft_status u = only_unwritten(st, line);
  weft_status root = weft_error_root(u);
  char text[4096];
  text_of(st, text, sizeof(text));
  cr_assert_eq(weft_error_kind_of(root), kind, "line %d: root kind %s, expected %s: %s", line,
               weft_error_kind_name(weft_error_kind_of(root)), weft_error_kind_name(kind), text);
  cr_assert_not_null(strstr(weft_error_message(root), msg),
                     "line %d: root message '%s' does not mention '%s'", line,
                     weft_error_message(root), msg);
  if (msg2)
    cr_assert_not_null(strstr(weft_error_message(root), msg2),
                       "line %d: root message '%s' does not mention '%s'", line,
                       weft_error_message(root), msg2);
  uint64_t id = weft_error_failure_id(u);
  weft_error_free(st);
  return id;
}
#define EXPECT_READ_ROOT(dev, s, b, off, len, kind, msg, msg2)                                     \
  expect_read_root((dev), (s), (b), (off), (len), (kind), (msg), (msg2), __LINE__)

/* |st| is DevicePoisoned (through sources, roots or Several); frees it. */
static void expect_poisoned(weft_status st, const char *what, int line) {
  char text[2048];
  cr_assert_not_null(st, "line %d: %s succeeded on a poisoned device", line, what);
  cr_assert(weft_error_is_device_poisoned(st), "line %d: %s: expected DevicePoisoned, got %s", line,
            what, text_of(st, text, sizeof(text)));
  weft_error_free(st);
}
#define EXPECT_POISONED(call) expect_poisoned((call), #call, __LINE__)

/* ---- kernels ---------------------------------------------------------------------------- */

/* A gate a kernel waits on before doing anything: work queued behind it is
 * really queued when the kernel fails. */
typedef struct gate {
  _Atomic int open;
  _Atomic int entered;
} gate;

static void gate_open(gate *g) {
  atomic_store(&g->open, 1);
}

/* Waits (bounded) until a kernel is inside the gate. */
static void gate_wait_entered(gate *g) {
  double t0 = now_s();
  while (!atomic_load(&g->entered)) {
    cr_assert_lt(now_s() - t0, 10.0, "no kernel reached the gate");
    sleep_ms(1);
  }
}

typedef struct kstate {
  _Atomic uint32_t calls; /* block-0 invocations */
  gate *gate;             /* optional */
} kstate;

static void k_enter(const weft_kernel_ctx *ctx, kstate *ks) {
  if (!ks || ctx->block_idx[0] || ctx->block_idx[1] || ctx->block_idx[2]) return;
  atomic_fetch_add(&ks->calls, 1);
  if (ks->gate) {
    atomic_store(&ks->gate->entered, 1);
    while (!atomic_load(&ks->gate->open)) sleep_ms(1);
  }
}

/* Binding 0: every byte becomes scalars[0]. */
static weft_status k_fill(const weft_kernel_ctx *ctx, void *user) {
  k_enter(ctx, user);
  uint8_t v = ctx->scalar_bytes ? *(const uint8_t *)ctx->scalars : 0;
  memset(ctx->buffers[0], v, (size_t)ctx->sizes[0]);
  return NULL;
}

/* Binding 0 in, every later binding out: out[i] = in[i % |in|] + 1. */
static weft_status k_inc(const weft_kernel_ctx *ctx, void *user) {
  k_enter(ctx, user);
  const uint8_t *in = ctx->buffers[0];
  uint64_t n = ctx->sizes[0];
  for (size_t b = 1; b < ctx->num_buffers; b++) {
    uint8_t *out = ctx->buffers[b];
    for (uint64_t i = 0; i < ctx->sizes[b]; i++) out[i] = n ? (uint8_t)(in[i % n] + 1) : 1;
  }
  return NULL;
}

/* Fails with Validation "boom <scalars[0] as uint32>" (writes nothing). */
static weft_status k_boom(const weft_kernel_ctx *ctx, void *user) {
  k_enter(ctx, user);
  uint32_t tag = 0;
  if (ctx->scalar_bytes >= 4) memcpy(&tag, ctx->scalars, 4);
  return weft_error_make(WEFT_ERR_VALIDATION, "boom %" PRIu32, tag);
}

static weft_kernel make_kernel(weft_device *dev, const char *name, weft_host_kernel_fn fn,
                               kstate *ks) {
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(dev, name, fn, ks, &k));
  return k;
}

static void fill(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer b, uint8_t v) {
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(dev, s, k, one, one, &bd, 1, &v, 1));
}

static void inc(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer in,
                weft_buffer out) {
  weft_binding bd[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  EXPECT_OK(weft_launch(dev, s, k, one, one, bd, 2, NULL, 0));
}

static void boom(weft_device *dev, weft_stream_id s, weft_kernel k, weft_buffer out, uint64_t off,
                 uint64_t len, uint32_t tag) {
  weft_binding bd = {out, off, len, WEFT_WRITE};
  EXPECT_OK(weft_launch(dev, s, k, one, one, &bd, 1, &tag, sizeof(tag)));
}

static void expect_bytes(weft_device *dev, weft_stream_id s, weft_buffer b, uint64_t off,
                         uint64_t len, uint8_t want, const char *what) {
  uint8_t *p = calloc(len ? len : 1, 1);
  EXPECT_OK(weft_buffer_read(dev, s, b, off, p, len));
  for (uint64_t i = 0; i < len; i++)
    cr_assert_eq(p[i], want, "%s: byte %" PRIu64 " is %u, expected %u", what, off + i, p[i], want);
  free(p);
}

/* How reports name a buffer. */
static void buf_name_of(weft_buffer b, char *out, size_t cap) {
  snprintf(out, cap, "buffer #%" PRIu32, (uint32_t)b.id);
}

/* ---- failpoints: launch, kernel, alloc --------------------------------------------------- */

Test(failpoint, launch_k_fails_exactly_the_kth_launch, .timeout = 30) {
  env e = env_new();
  static kstate ks;
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, &ks);
  EXPECT_OK(weft_device_set_failpoints(e.dev, "launch#3=Validation"));
  weft_buffer b[5];
  for (int i = 0; i < 5; i++) {
    b[i] = make_buffer(e.dev, (weft_stream_id)i, 64);
    fill(e.dev, (weft_stream_id)i, kf, b[i], (uint8_t)(10 + i));
  }
  for (int i = 0; i < 5; i++) {
    if (i == 2) continue;
    expect_bytes(e.dev, 0, b[i], 0, 64, (uint8_t)(10 + i), "a launch no failpoint names");
  }
  uint8_t got[64];
  weft_status st = weft_buffer_read(e.dev, 1, b[2], 0, got, 64);
  weft_status u = ONLY_UNWRITTEN(st);
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_VALIDATION);
  cr_assert_not_null(strstr(weft_error_message(root), "failpoint"), "root '%s'",
                     weft_error_message(root));
  cr_assert_not_null(strstr(weft_error_message(root), "launch 3"), "root '%s'",
                     weft_error_message(root));
  cr_assert_eq(weft_error_chain_length(u), 0);
  cr_assert_str_eq(weft_error_origin(u), "kernel 'fill' (launch 3)");
  weft_error_free(st);
  sync_all(&e);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_run, 4);
  cr_assert_eq(atomic_load(&ks.calls), 4, "the failpointed launch ran its kernel");
  cr_assert_eq(s.failures_live, 1);
  env_close(&e);
}

Test(failpoint, kernel_name_fails_every_launch_of_that_kernel, .timeout = 30) {
  env e;
  env_options(&e);
  e.opts.failpoints = "kernel:bad=LaunchCompilation";
  env_open(&e);
  static kstate kbad, kgood;
  weft_kernel bad = make_kernel(e.dev, "bad", k_fill, &kbad);
  weft_kernel good = make_kernel(e.dev, "good", k_fill, &kgood);
  weft_kernel bad2 = make_kernel(e.dev, "badly", k_fill, NULL); /* a longer name: not matched */
  weft_buffer out[7];
  for (int i = 0; i < 7; i++) {
    out[i] = make_buffer(e.dev, (weft_stream_id)i, 128);
    fill(e.dev, (weft_stream_id)i, i == 6 ? bad2 : i % 2 ? good : bad, out[i], (uint8_t)i);
  }
  for (int i = 0; i < 7; i++) {
    if (i % 2 || i == 6) {
      expect_bytes(e.dev, 0, out[i], 0, 128, (uint8_t)i, "another kernel");
      continue;
    }
    uint8_t got[128];
    weft_status st = weft_buffer_read(e.dev, 3, out[i], 0, got, 128);
    weft_status u = ONLY_UNWRITTEN(st);
    weft_status root = weft_error_root(u);
    cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_LAUNCH_COMPILATION);
    cr_assert_not_null(strstr(weft_error_message(root), "failpoint"), "'%s'",
                       weft_error_message(root));
    cr_assert_not_null(strstr(weft_error_message(root), "'bad'"), "'%s'", weft_error_message(root));
    cr_assert(weft_error_is_refusal(st), "a LaunchCompilation root is a refusal");
    char hop[96];
    snprintf(hop, sizeof(hop), "kernel 'bad' (launch %d)", i + 1);
    cr_assert_str_eq(weft_error_origin(u), hop);
    weft_error_free(st);
  }
  cr_assert_eq(atomic_load(&kbad.calls), 0, "a kernel:NAME failpoint let the kernel run");
  cr_assert_eq(atomic_load(&kgood.calls), 3);
  sync_all(&e);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 3);
  cr_assert_eq(s.launches_run, 4);
  env_close(&e);
}

/* The first buffer's page is storage allocation 1; buffers that fit the same
 * page take no allocation; a page too small for a buffer adds one; another
 * stream's memory has its own pages. */
Test(failpoint, alloc_n_fails_the_nth_storage_allocation, .timeout = 30) {
  struct {
    const char *spec;
    int fails; /* index of the buffer whose reservation fails, -1: none */
  } cases[] = {
      {"alloc#1=BufferTooBig", 0},
      {"alloc#2=BufferTooBig", 3},
      {"alloc#3=BufferTooBig", 4},
      {"alloc#4=BufferTooBig", -1},
  };
  const uint64_t sizes[5] = {64, 64, 100000, UINT64_C(64) << 20, 64};
  const weft_stream_id streams[5] = {0, 0, 0, 0, 1};
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
    env e;
    env_options(&e);
    e.opts.failpoints = cases[c].spec;
    env_open(&e);
    for (int i = 0; i < 5; i++) {
      weft_buffer b = make_buffer(e.dev, streams[i], sizes[i]);
      if (i == cases[c].fails) {
        char num[48];
        snprintf(num, sizeof(num), "storage allocation %s", cases[c].spec + 6);
        *strchr(num, '=') = '\0';
        EXPECT_READ_ROOT(e.dev, 0, b, 0, 8, WEFT_ERR_BUFFER_TOO_BIG, "failpoint", num);
      } else {
        uint8_t got[8];
        weft_status st = weft_buffer_read(e.dev, 0, b, 0, got, 8);
        char text[1024];
        cr_assert_null(st, "%s: buffer %d: %s", cases[c].spec, i,
                       st ? text_of(st, text, sizeof(text)) : "");
      }
    }
    weft_device_stats s = stats_of(e.dev);
    cr_assert_eq(s.failures_live, cases[c].fails >= 0 ? 1u : 0u, "%s", cases[c].spec);
    env_close(&e);
  }
}

/* OutOfMemory may succeed after reclaim: the ladder retries once, so one
 * failing allocation is rescued by the next; two in a row leave the buffer
 * unallocated, reads report the OutOfMemory root, launches reading it are
 * skipped, and releasing it empties the graph. */
Test(failpoint, alloc_out_of_memory_is_retried_once_then_reported, .timeout = 30) {
  env e;
  env_options(&e);
  e.opts.failpoints = "alloc#1=OutOfMemory";
  env_open(&e);
  weft_buffer a = make_buffer(e.dev, 0, 64);
  uint8_t v = 5;
  EXPECT_OK(weft_buffer_write(e.dev, 0, a, 0, &v, 1));
  expect_bytes(e.dev, 0, a, 0, 1, 5, "a rescued buffer");
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.reclaims, 1);
  cr_assert_eq(s.reclaims_rescued, 1);
  cr_assert_eq(s.failures_live, 0);
  env_close(&e);

  env_options(&e);
  e.opts.failpoints = "alloc#1=OutOfMemory;alloc#2=OutOfMemory";
  env_open(&e);
  static kstate ks;
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, &ks);
  weft_buffer x = make_buffer(e.dev, 0, 64);
  weft_buffer y = make_buffer(e.dev, 1, 64);
  inc(e.dev, 1, ki, x, y);
  uint64_t id = EXPECT_READ_ROOT(e.dev, 0, x, 0, 64, WEFT_ERR_OUT_OF_MEMORY, "failpoint", NULL);
  uint8_t got[64];
  weft_status st = weft_buffer_read(e.dev, 2, y, 0, got, 64);
  weft_status u = ONLY_UNWRITTEN(st);
  cr_assert_eq(weft_error_failure_id(u), id, "the skip carries the unallocated buffer's failure");
  cr_assert_eq(weft_error_kind_of(weft_error_root(u)), WEFT_ERR_OUT_OF_MEMORY);
  char name[48], hop[128];
  buf_name_of(x, name, sizeof(name));
  snprintf(hop, sizeof(hop), "skipped kernel 'inc' (launch 1): it needed %s", name);
  cr_assert_eq(weft_error_chain_length(u), 1, "no launch failed: only the skip");
  cr_assert_str_eq(weft_error_chain_at(u, 0), hop);
  weft_error_free(st);
  cr_assert_eq(atomic_load(&ks.calls), 0);
  sync_all(&e);
  s = stats_of(e.dev);
  cr_assert_eq(s.launches_skipped, 1);
  cr_assert_eq(s.failures_live, 1);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, y));
  s = stats_of(e.dev);
  cr_assert_eq(s.failures_live, 0, "released: the unallocated failure is gone");
  env_close(&e);
}

/* ---- failpoints: where they come from ---------------------------------------------------- */

static void three_fills(env *e, weft_buffer out[3]) {
  weft_kernel kf = make_kernel(e->dev, "fill", k_fill, NULL);
  for (int i = 0; i < 3; i++) {
    out[i] = make_buffer(e->dev, (weft_stream_id)i, 32);
    fill(e->dev, (weft_stream_id)i, kf, out[i], 1);
  }
}

Test(failpoint, options_failpoints_apply_from_open, .timeout = 30) {
  env e;
  env_options(&e);
  e.opts.failpoints = " launch#2=Generic ; ";
  env_open(&e);
  weft_buffer b[3];
  three_fills(&e, b);
  expect_bytes(e.dev, 0, b[0], 0, 32, 1, "launch 1");
  EXPECT_READ_ROOT(e.dev, 0, b[1], 0, 32, WEFT_ERR_GENERIC, "failpoint", "launch 2");
  expect_bytes(e.dev, 0, b[2], 0, 32, 1, "launch 3");
  env_close(&e);
}

Test(failpoint, environment_failpoints_apply_from_open, .timeout = 30) {
  /* Criterion runs each test in its own process: the variable is ours. */
  cr_assert_eq(setenv("WEFT_FAILPOINTS", "launch#3=Unknown", 1), 0);
  env e = env_new();
  unsetenv("WEFT_FAILPOINTS");
  weft_buffer b[3];
  three_fills(&e, b);
  expect_bytes(e.dev, 0, b[0], 0, 32, 1, "launch 1");
  expect_bytes(e.dev, 0, b[1], 0, 32, 1, "launch 2");
  EXPECT_READ_ROOT(e.dev, 0, b[2], 0, 32, WEFT_ERR_UNKNOWN, "failpoint", "launch 3");
  /* Read at open only: a device opened now has none. */
  env f = env_new();
  weft_buffer c[3];
  three_fills(&f, c);
  for (int i = 0; i < 3; i++) expect_bytes(f.dev, 0, c[i], 0, 32, 1, "no failpoints");
  env_close(&f);
  env_close(&e);
}

Test(failpoint, options_environment_and_api_failpoints_add_up, .timeout = 30) {
  cr_assert_eq(setenv("WEFT_FAILPOINTS", "launch#2=Validation", 1), 0);
  env e;
  env_options(&e);
  e.opts.failpoints = "launch#1=Generic";
  env_open(&e);
  unsetenv("WEFT_FAILPOINTS");
  EXPECT_OK(weft_device_set_failpoints(e.dev, "launch#3=LaunchTooManyResources"));
  weft_buffer b[3];
  three_fills(&e, b);
  EXPECT_READ_ROOT(e.dev, 0, b[0], 0, 32, WEFT_ERR_GENERIC, "failpoint", "launch 1");
  EXPECT_READ_ROOT(e.dev, 0, b[1], 0, 32, WEFT_ERR_VALIDATION, "failpoint", "launch 2");
  EXPECT_READ_ROOT(e.dev, 0, b[2], 0, 32, WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES, "failpoint",
                   "launch 3");
  env_close(&e);
}

/* Malformed specs: InvalidArgument naming the bad entry, and nothing of the
 * spec applies (its valid entries included). */
Test(failpoint, malformed_specs_are_rejected_naming_the_entry, .timeout = 30) {
  static const struct {
    const char *spec, *entry;
  } bad[] = {
      {"launch#0=Validation", "launch#0=Validation"},
      {"launch#x=Validation", "launch#x=Validation"},
      {"launch#=Validation", "launch#=Validation"},
      {"launch#3", "launch#3"},
      {"launch#3=", "launch#3="},
      {"launch#3=NoSuchKind", "launch#3=NoSuchKind"},
      {"launch#3=Ok", "launch#3=Ok"},
      {"launch#99999999999999999999999=Generic", "launch#99999999999999999999999=Generic"},
      {"alloc#1", "alloc#1"},
      {"alloc#0=OutOfMemory", "alloc#0=OutOfMemory"},
      {"kernel:=Validation", "kernel:=Validation"},
      {"kernel:name", "kernel:name"},
      {"poison#2=Validation", "poison#2=Validation"},
      {"poison#0", "poison#0"},
      {"poison#", "poison#"},
      {"bogus", "bogus"},
      {"launch#1=Validation;frob#2", "frob#2"},
      {"launch#1=Validation; launch#2=validation", "launch#2=validation"},
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    env e = env_new();
    weft_status st = weft_device_set_failpoints(e.dev, bad[i].spec);
    char text[1024];
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "'%s' gave %s", bad[i].spec,
                 st ? text_of(st, text, sizeof(text)) : "success");
    cr_assert_not_null(strstr(weft_error_message(st), bad[i].entry),
                       "'%s': the error '%s' does not name '%s'", bad[i].spec,
                       weft_error_message(st), bad[i].entry);
    weft_error_free(st);
    /* Changes nothing: launch 1 (named by some rejected specs) runs. */
    weft_buffer b[3];
    three_fills(&e, b);
    for (int k = 0; k < 3; k++) expect_bytes(e.dev, 0, b[k], 0, 32, 1, bad[i].spec);
    env_close(&e);
  }
  weft_status st = weft_device_set_failpoints(NULL, "launch#1=Generic");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "a NULL device");
  weft_error_free(st);
  env e = env_new();
  /* Too many entries of one kind: the 17th launch entry is refused. */
  char many[1024] = "";
  size_t w = 0;
  for (int k = 1; k <= 17; k++)
    w += (size_t)snprintf(many + w, sizeof(many) - w, "%slaunch#%d=Generic", k > 1 ? ";" : "",
                          100 + k);
  st = weft_device_set_failpoints(e.dev, many);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "17 launch entries");
  cr_assert_not_null(strstr(weft_error_message(st), "launch#117=Generic"), "'%s'",
                     weft_error_message(st));
  weft_error_free(st);
  env_close(&e);
}

Test(failpoint, malformed_options_or_environment_specs_fail_the_open, .timeout = 30) {
  env e;
  env_options(&e);
  e.opts.failpoints = "launch#2=Generic;nonsense";
  weft_device *dev = (void *)&e; /* must be reset to NULL */
  weft_status st = weft_device_open(&e.opts, &dev);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "nonsense"), "'%s'", weft_error_message(st));
  cr_assert_null(dev);
  weft_error_free(st);
  weft_alloc_counts c = weft_counting_allocator_counts(e.ca);
  cr_assert_eq(c.live_blocks, 0, "a refused open leaked %" PRIu64 " blocks", c.live_blocks);

  e.opts.failpoints = NULL;
  cr_assert_eq(setenv("WEFT_FAILPOINTS", "poison#1;kernel:x=Nope", 1), 0);
  dev = (void *)&e;
  st = weft_device_open(&e.opts, &dev);
  unsetenv("WEFT_FAILPOINTS");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "kernel:x=Nope"), "'%s'",
                     weft_error_message(st));
  cr_assert_null(dev);
  weft_error_free(st);
  c = weft_counting_allocator_counts(e.ca);
  cr_assert_eq(c.live_blocks, 0, "a refused open leaked %" PRIu64 " blocks", c.live_blocks);
  weft_counting_allocator_destroy(e.ca);
  ASSERT_NO_LEAKS();
}

Test(failpoint, a_bad_environment_spec_says_it_came_from_WEFT_FAILPOINTS, .timeout = 30) {
  env e;
  env_options(&e);
  cr_assert_eq(setenv("WEFT_FAILPOINTS", "launch#1=Generic;frob", 1), 0);
  weft_device *dev = NULL;
  weft_status st = weft_device_open(&e.opts, &dev);
  unsetenv("WEFT_FAILPOINTS");
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "WEFT_FAILPOINTS"), "'%s'",
                     weft_error_message(st));
  cr_assert_not_null(strstr(weft_error_message(st), "'frob'"), "'%s'", weft_error_message(st));
  cr_assert_null(dev);
  weft_error_free(st);
  /* The same entry from the options names the options. */
  e.opts.failpoints = "frob";
  st = weft_device_open(&e.opts, &dev);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(st), "options.failpoints"), "'%s'",
                     weft_error_message(st));
  cr_assert_null(strstr(weft_error_message(st), "WEFT_FAILPOINTS"), "'%s'", weft_error_message(st));
  weft_error_free(st);
  weft_counting_allocator_destroy(e.ca);
  ASSERT_NO_LEAKS();
}

Test(failpoint, kinds_only_weft_reports_are_refused_as_failpoint_kinds, .timeout = 30) {
  static const char *const kinds[] = {"TornDown", "Skipped", "Unwritten", "Several"};
  static const char *const sites[] = {"launch#1", "alloc#1", "kernel:fill"};
  env e = env_new();
  for (size_t k = 0; k < 4; k++)
    for (size_t w = 0; w < 3; w++) {
      char spec[64];
      snprintf(spec, sizeof(spec), "%s=%s", sites[w], kinds[k]);
      weft_status st = weft_device_set_failpoints(e.dev, spec);
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "'%s' was accepted", spec);
      cr_assert_not_null(strstr(weft_error_message(st), spec), "'%s'", weft_error_message(st));
      weft_error_free(st);
    }
  /* Nothing was installed: the first launches and allocations succeed. */
  weft_buffer b[3];
  three_fills(&e, b);
  for (int i = 0; i < 3; i++) expect_bytes(e.dev, 0, b[i], 0, 32, 1, "no failpoint");
  env_close(&e);
}

Test(failpoint, an_empty_or_null_spec_clears_every_failpoint, .timeout = 30) {
  for (int how = 0; how < 2; how++) {
    cr_assert_eq(setenv("WEFT_FAILPOINTS", "launch#3=Unknown", 1), 0);
    env e;
    env_options(&e);
    e.opts.failpoints = "launch#2=Generic;kernel:fill=Validation";
    env_open(&e);
    unsetenv("WEFT_FAILPOINTS");
    EXPECT_OK(weft_device_set_failpoints(e.dev, "alloc#1=BufferTooBig;poison#4"));
    EXPECT_OK(weft_device_set_failpoints(e.dev, how ? NULL : " ; "));
    /* Allocation 1 and launches 1-4 (fill each) would all have failed. */
    weft_buffer b[3];
    three_fills(&e, b);
    weft_kernel kf = make_kernel(e.dev, "fill", k_fill, NULL);
    fill(e.dev, 0, kf, b[0], 1);
    for (int i = 0; i < 3; i++) expect_bytes(e.dev, 0, b[i], 0, 32, 1, how ? "NULL" : "' ; '");
    weft_status poisoned = weft_device_poisoned(e.dev);
    cr_assert_null(poisoned, "poison#4 was cleared");
    /* Failpoints set after clearing count launches from the open. */
    EXPECT_OK(weft_device_set_failpoints(e.dev, "launch#6=Generic"));
    fill(e.dev, 0, kf, b[1], 2); /* launch 5 */
    fill(e.dev, 0, kf, b[2], 2); /* launch 6 */
    expect_bytes(e.dev, 0, b[1], 0, 32, 2, "launch 5");
    EXPECT_READ_ROOT(e.dev, 0, b[2], 0, 32, WEFT_ERR_GENERIC, "failpoint", "launch 6");
    env_close(&e);
  }
}

/* The same program with the same failpoints fails the same way twice: the
 * same buffers, roots, failure ids, claims and chains. */
static void deterministic_program(char *out, size_t cap) {
  env e;
  env_options(&e);
  e.opts.failpoints = "launch#4=Validation;kernel:bad=Generic;launch#11=Unknown";
  env_open(&e);
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, NULL);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, NULL);
  weft_kernel kb = make_kernel(e.dev, "bad", k_fill, NULL);
  enum { N = 8 };
  weft_buffer b[N];
  for (int i = 0; i < N; i++) b[i] = make_buffer(e.dev, (weft_stream_id)i, 256);
  for (int i = 0; i < N; i++) fill(e.dev, (weft_stream_id)(i % 5), kf, b[i], (uint8_t)i);
  /* launches 9..: a web of readers across streams, one 'bad' in the middle */
  for (int r = 0; r < 3; r++)
    for (int i = 0; i < N; i++) {
      weft_stream_id s = (weft_stream_id)((i + r) % 6);
      if (r == 1 && i == 3)
        fill(e.dev, s, kb, b[(i + 5) % N], 9);
      else
        inc(e.dev, s, ki, b[i], b[(i + 1 + r) % N]);
    }
  sync_all(&e);
  size_t w = 0;
  for (int i = 0; i < N; i++) {
    uint8_t got[256];
    weft_status st = weft_buffer_read(e.dev, 0, b[i], 0, got, 256);
    char text[2048];
    if (st)
      text_of(st, text, sizeof(text));
    else
      snprintf(text, sizeof(text), "ok %u %u", got[0], got[255]);
    w += (size_t)snprintf(out + w, cap - w, "%d: %s\n", i, text);
    weft_error_free(st);
  }
  weft_device_stats s = stats_of(e.dev);
  snprintf(out + w, cap - w, "run %" PRIu64 " failed %" PRIu64 " skipped %" PRIu64 " live %" PRIu64,
           s.launches_run, s.launches_failed, s.launches_skipped, s.failures_live);
  env_close(&e);
}

Test(failpoint, the_same_program_fails_the_same_way_twice, .timeout = 60) {
  static char first[32768], again[32768];
  deterministic_program(first, sizeof(first));
  cr_assert_not_null(strstr(first, "failpoint"), "the program hit no failpoint:\n%s", first);
  cr_assert_not_null(strstr(first, "skipped kernel"), "the program skipped nothing:\n%s", first);
  for (int i = 0; i < 5; i++) {
    deterministic_program(again, sizeof(again));
    cr_assert_str_eq(first, again, "run %d differs:\n%s\n---\n%s", i + 2, first, again);
  }
}

/* ---- poisoning ---------------------------------------------------------------------------- */

typedef struct poison_seen {
  _Atomic uint32_t calls;
  weft_error_kind kind;
  char message[256];
  _Atomic int poisoned_inside; /* weft_device_poisoned inside the callback */
  weft_device *dev;
} poison_seen;

static void on_poison(void *user, weft_status poison) {
  poison_seen *p = user;
  if (atomic_fetch_add(&p->calls, 1) == 0) {
    p->kind = weft_error_kind_of(poison);
    snprintf(p->message, sizeof(p->message), "%s", weft_error_message(poison));
    weft_status again = weft_device_poisoned(p->dev); /* does not block */
    atomic_store(&p->poisoned_inside, again && weft_error_is_device_poisoned(again));
    weft_error_free(again);
  }
}

Test(poison, poison_k_stops_launch_k_and_every_later_one, .timeout = 30) {
  env e = env_new();
  static kstate ks;
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, &ks);
  EXPECT_OK(weft_device_set_failpoints(e.dev, "poison#5"));
  cr_assert_null(weft_device_poisoned(e.dev), "healthy before launch 5");
  weft_buffer b[10];
  for (int i = 0; i < 10; i++) b[i] = make_buffer(e.dev, 0, 16);
  for (int i = 0; i < 10; i++) { /* one stream: 1..4 run first, in order */
    /* Launch 5 may poison the device before the later ones are submitted
     * (a combining client starts the stream at once): those are refused
     * with the poison, which is what the device owes. */
    weft_binding bd = {b[i], 0, WEFT_WHOLE, WEFT_WRITE};
    uint8_t v = 1;
    weft_status st = weft_launch(e.dev, 0, kf, one, one, &bd, 1, &v, 1);
    cr_assert(!st || weft_error_is_device_poisoned(st));
    weft_error_free(st);
  }
  EXPECT_POISONED(weft_sync(e.dev, 0));
  cr_assert_eq(atomic_load(&ks.calls), 4, "launches 1-4 run, 5 and later never do");
  weft_status p = weft_device_poisoned(e.dev);
  cr_assert_eq(weft_error_kind_of(p), WEFT_ERR_DEVICE_POISONED);
  cr_assert_not_null(strstr(weft_error_message(p), "failpoint"), "'%s'", weft_error_message(p));
  cr_assert_not_null(strstr(weft_error_message(p), "launch 5"), "'%s'", weft_error_message(p));
  weft_error_free(p);
  sleep_ms(20);
  cr_assert_eq(atomic_load(&ks.calls), 4);
  env_close(&e);
}

/* Readers and barriers pending on many streams, behind cross-stream work that
 * depends on the poisoning launch: every one wakes with DevicePoisoned. */
enum { POISON_STREAMS = 8 };

typedef struct waiter {
  weft_device *dev;
  weft_stream_id stream;
  weft_buffer buf; /* id 0: a sync */
  weft_status result;
  _Atomic int *done;
} waiter;

static void *wait_thread(void *arg) {
  waiter *w = arg;
  uint8_t got[64];
  w->result = w->buf.id ? weft_buffer_read(w->dev, w->stream, w->buf, 0, got, sizeof(got))
                        : weft_sync(w->dev, w->stream);
  atomic_fetch_add(w->done, 1);
  return NULL;
}

Test(poison, pending_reads_and_syncs_on_every_stream_wake_with_device_poisoned, .timeout = 30) {
  env e;
  env_options(&e);
  e.opts.max_streams = POISON_STREAMS;
  e.opts.max_tasks = 4;
  env_open(&e);
  static poison_seen seen;
  seen.dev = e.dev;
  EXPECT_OK(weft_device_set_poison_callback(e.dev, on_poison, &seen));
  static gate g;
  static kstate kgate, krun;
  kgate.gate = &g;
  weft_kernel kg = make_kernel(e.dev, "gate", k_fill, &kgate);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, &krun);
  EXPECT_OK(weft_device_set_failpoints(e.dev, "poison#2"));
  weft_buffer x = make_buffer(e.dev, 0, 64), y = make_buffer(e.dev, 0, 64);
  fill(e.dev, 0, kg, x, 1); /* launch 1: held at the gate */
  inc(e.dev, 0, ki, x, y);  /* launch 2: poisons */
  /* Cross-stream work: every stream reads y, then its neighbour's output. */
  weft_buffer z[POISON_STREAMS], zz[POISON_STREAMS];
  for (int s = 1; s < POISON_STREAMS; s++) {
    z[s] = make_buffer(e.dev, (weft_stream_id)s, 64);
    zz[s] = make_buffer(e.dev, (weft_stream_id)s, 64);
    inc(e.dev, (weft_stream_id)s, ki, y, z[s]);
  }
  for (int s = 1; s < POISON_STREAMS; s++)
    for (int r = 0; r < 5; r++)
      inc(e.dev, (weft_stream_id)s, ki, z[1 + (s + r) % (POISON_STREAMS - 1)], zz[s]);
  gate_wait_entered(&g);
  static _Atomic int done;
  static waiter w[3 * POISON_STREAMS];
  pthread_t th[3 * POISON_STREAMS];
  int n = 0;
  for (int s = 0; s < POISON_STREAMS; s++) {
    w[n++] = (waiter){e.dev, (weft_stream_id)s, {0}, NULL, &done}; /* sync */
    w[n++] = (waiter){e.dev, (weft_stream_id)(s + 3), s ? zz[s] : y, NULL, &done};
    if (s) w[n++] = (waiter){e.dev, (weft_stream_id)(s + 5), z[s], NULL, &done};
  }
  for (int i = 0; i < n; i++) cr_assert_eq(pthread_create(&th[i], NULL, wait_thread, &w[i]), 0);
  sleep_ms(100);
  cr_assert_eq(atomic_load(&done), 0, "a waiter returned while everything is held at the gate");
  cr_assert_eq(atomic_load(&seen.calls), 0);
  gate_open(&g);
  for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < n; i++) {
    char what[64];
    snprintf(what, sizeof(what), "waiter %d (%s on stream %" PRIu64 ")", i,
             w[i].buf.id ? "read" : "sync", w[i].stream);
    expect_poisoned(w[i].result, what, __LINE__);
  }
  cr_assert_eq(atomic_load(&kgate.calls), 1);
  cr_assert_eq(atomic_load(&krun.calls), 0, "a launch after the poison ran");
  cr_assert_eq(atomic_load(&seen.calls), 1, "the callback runs once");
  cr_assert_eq(seen.kind, WEFT_ERR_DEVICE_POISONED);
  cr_assert_not_null(strstr(seen.message, "launch 2"), "callback got '%s'", seen.message);
  cr_assert(atomic_load(&seen.poisoned_inside), "weft_device_poisoned inside the callback");
  env_close(&e);
}

/* After poisoning every call on the device fails with DevicePoisoned (the
 * calls that do not are listed together). */
static void collect_poisoned(weft_status st, const char *what, char *bad, size_t cap) {
  if (st && weft_error_is_device_poisoned(st)) {
    weft_error_free(st);
    return;
  }
  char text[512];
  size_t n = strlen(bad);
  snprintf(bad + n, cap - n, "\n  %s -> %s", what, st ? text_of(st, text, sizeof(text)) : "Ok");
  weft_error_free(st);
}
#define COLLECT(call) collect_poisoned((call), #call, bad, sizeof(bad))

Test(poison, every_later_call_returns_device_poisoned, .timeout = 30) {
  env e = env_new();
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, NULL);
  weft_buffer b = make_buffer(e.dev, 0, 64);
  EXPECT_OK(weft_device_set_failpoints(e.dev, "poison#1"));
  fill(e.dev, 0, kf, b, 1);
  EXPECT_POISONED(weft_sync(e.dev, 0));
  uint8_t bytes[64] = {0};
  weft_buffer nb;
  weft_kernel nk;
  weft_device_stats s = {0};
  weft_memory_usage usage = {0};
  weft_pool_report reports[4] = {0};
  size_t nrep = 4;
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  weft_layout layout = {.kind = WEFT_LAYOUT_EXCLUSIVE_PAGES};
  static char bad[4096];
  bad[0] = '\0';
  COLLECT(weft_buffer_create(e.dev, 0, 64, &nb));
  COLLECT(weft_buffer_write(e.dev, 1, b, 0, bytes, 64));
  COLLECT(weft_buffer_read(e.dev, 2, b, 0, bytes, 64));
  COLLECT(weft_launch(e.dev, 3, kf, one, one, &bd, 1, bytes, 1));
  COLLECT(weft_sync(e.dev, 4));
  COLLECT(weft_sync(e.dev, 0));
  COLLECT(weft_check(e.dev, &b, 1));
  COLLECT(weft_device_stats_get(e.dev, &s));
  COLLECT(weft_kernel_host(e.dev, "late", k_fill, NULL, &nk));
  COLLECT(weft_device_set_failpoints(e.dev, "launch#9=Generic"));
  COLLECT(weft_memory_usage_get(e.dev, &usage));
  COLLECT(weft_memory_report_get(e.dev, 0, reports, &nrep));
  COLLECT(weft_memory_cleanup(e.dev, 0));
  COLLECT(weft_memory_mode(e.dev, 0, WEFT_ALLOC_PERSISTENT));
  COLLECT(weft_memory_dry_run(e.dev, true));
  COLLECT(weft_memory_install_layout(e.dev, 5, &layout));
  COLLECT(weft_buffer_release(e.dev, b));
  weft_status p = weft_device_poisoned(e.dev);
  cr_assert(weft_error_is_device_poisoned(p));
  weft_error_free(p);
  env_close(&e);
  cr_assert_eq(bad[0], '\0', "calls that did not fail with DevicePoisoned:%s", bad);
}

Test(poison, the_callback_runs_once_however_many_launches_poison, .timeout = 30) {
  env e;
  env_options(&e);
  e.opts.failpoints = "poison#2;poison#3;poison#4";
  env_open(&e);
  static poison_seen seen;
  seen.dev = e.dev;
  EXPECT_OK(weft_device_set_poison_callback(e.dev, on_poison, &seen));
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, NULL);
  weft_buffer b[6];
  for (int i = 0; i < 6; i++) b[i] = make_buffer(e.dev, (weft_stream_id)i, 16);
  for (int i = 0; i < 6; i++) { /* independent: 2, 3, 4 race */
    /* Launch 2 may poison the device before the later ones are submitted:
     * those are then refused with the poison, which is what the device owes. */
    weft_binding bd = {b[i], 0, WEFT_WHOLE, WEFT_WRITE};
    uint8_t v = 1;
    weft_status st = weft_launch(e.dev, (weft_stream_id)i, kf, one, one, &bd, 1, &v, 1);
    cr_assert(!st || weft_error_is_device_poisoned(st));
    weft_error_free(st);
  }
  for (int i = 0; i < 6; i++) {
    weft_status st = weft_sync(e.dev, (weft_stream_id)i);
    weft_error_free(st);
  }
  /* Launches on other streams may still be finishing their no-op: wait for
   * every stream to have answered a barrier, then count. */
  double t0 = now_s();
  while (!atomic_load(&seen.calls) && now_s() - t0 < 10) sleep_ms(1);
  sleep_ms(20);
  cr_assert_eq(atomic_load(&seen.calls), 1, "the poison callback ran %u times",
               atomic_load(&seen.calls));
  cr_assert_eq(seen.kind, WEFT_ERR_DEVICE_POISONED);
  weft_status p = weft_device_poisoned(e.dev);
  cr_assert_eq(weft_error_kind_of(p), WEFT_ERR_DEVICE_POISONED);
  cr_assert_str_eq(weft_error_message(p), seen.message,
                   "weft_device_poisoned returns the poison the callback saw");
  weft_error_free(p);
  env_close(&e);
}

/* Close drains a poisoned device with work queued on every stream and
 * buffers never released: nothing hangs, nothing leaks. */
Test(poison, a_poisoned_device_closes_without_leaks, .timeout = 30) {
  env e;
  env_options(&e);
  e.opts.max_streams = 6;
  env_open(&e);
  static gate g;
  static kstate kgate;
  kgate.gate = &g;
  weft_kernel kg = make_kernel(e.dev, "gate", k_fill, &kgate);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, NULL);
  EXPECT_OK(weft_device_set_failpoints(e.dev, "poison#2"));
  weft_buffer x = make_buffer(e.dev, 0, 4096);
  fill(e.dev, 0, kg, x, 1);
  weft_buffer prev = x;
  for (int i = 0; i < 300; i++) {
    weft_buffer out = make_buffer(e.dev, (weft_stream_id)(i % 9), 512);
    inc(e.dev, (weft_stream_id)(i % 7), ki, prev, out);
    uint8_t bytes[100] = {0};
    EXPECT_OK(weft_buffer_write(e.dev, (weft_stream_id)(i % 5), out, 0, bytes, sizeof(bytes)));
    prev = out;
  }
  gate_wait_entered(&g);
  gate_open(&g);
  env_close(&e);
}

/* ---- failures found when kernels run ------------------------------------------------------ */

/* A kernel on stream A fails while work that reads its output is already
 * queued behind it on A and on B: that work is skipped when it runs and
 * passes the root on; an independent chain on C completes meanwhile. */
Test(execution, queued_readers_on_every_stream_are_skipped_and_report_the_chain, .timeout = 30) {
  env e = env_new();
  static gate g;
  static kstate kfail, kinc, kfill;
  kfail.gate = &g;
  weft_kernel kb = make_kernel(e.dev, "gated_boom", k_boom, &kfail);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, &kinc);
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, &kfill);
  const weft_stream_id A = 0, B = 1, C = 2;
  weft_buffer x = make_buffer(e.dev, A, 64), y = make_buffer(e.dev, A, 64);
  weft_buffer z = make_buffer(e.dev, B, 64), w = make_buffer(e.dev, B, 64);
  weft_buffer p = make_buffer(e.dev, C, 64), q = make_buffer(e.dev, C, 64);
  boom(e.dev, A, kb, x, 0, WEFT_WHOLE, 7); /* launch 1, held at the gate, then fails */
  inc(e.dev, A, ki, x, y);                 /* 2: behind it on A */
  inc(e.dev, B, ki, y, z);                 /* 3: on B, waits for A */
  inc(e.dev, B, ki, z, w);                 /* 4 */
  fill(e.dev, C, kf, p, 7);                /* 5: independent, on C */
  inc(e.dev, C, ki, p, q);                 /* 6 */
  gate_wait_entered(&g);
  /* The independent chain completes while A is held; nothing has failed yet. */
  expect_bytes(e.dev, C, q, 0, 64, 8, "the independent chain");
  weft_buffer all[4] = {x, y, z, w};
  EXPECT_OK(weft_check(e.dev, all, 4));
  gate_open(&g);

  uint8_t got[64];
  weft_status st = weft_buffer_read(e.dev, 3, w, 0, got, 64);
  weft_status u = ONLY_UNWRITTEN(st);
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_VALIDATION);
  cr_assert_str_eq(weft_error_message(root), "boom 7");
  char nx[48], ny[48], nz[48], want[4][160];
  buf_name_of(x, nx, sizeof(nx));
  buf_name_of(y, ny, sizeof(ny));
  buf_name_of(z, nz, sizeof(nz));
  snprintf(want[0], sizeof(want[0]), "skipped kernel 'inc' (launch 4): it needed %s", nz);
  snprintf(want[1], sizeof(want[1]), "skipped kernel 'inc' (launch 3): it needed %s", ny);
  snprintf(want[2], sizeof(want[2]), "skipped kernel 'inc' (launch 2): it needed %s", nx);
  snprintf(want[3], sizeof(want[3]), "kernel 'gated_boom' (launch 1)");
  cr_assert_eq(weft_error_chain_length(u), 3, "w <- 4 <- z <- 3 <- y <- 2 <- x <- 1 (failed)");
  cr_assert_str_eq(weft_error_origin(u), want[3], "the failed launch is the origin");
  for (int i = 0; i < 3; i++)
    cr_assert_str_eq(weft_error_chain_at(u, (size_t)i), want[i], "hop %d (newest first)", i);
  cr_assert_eq(weft_error_claimed(u), 4, "x, y, z and w carry the failure");
  uint64_t id = weft_error_failure_id(u);
  weft_error_free(st);
  /* Every tainted buffer names the same failure, with a shorter chain. */
  weft_buffer mid[3] = {x, y, z};
  for (int i = 0; i < 3; i++) {
    st = weft_buffer_read(e.dev, (weft_stream_id)(4 + i), mid[i], 0, got, 64);
    u = ONLY_UNWRITTEN(st);
    cr_assert_eq(weft_error_failure_id(u), id);
    cr_assert_eq(weft_error_chain_length(u), (size_t)i);
    if (i > 0) cr_assert_str_eq(weft_error_chain_at(u, 0), want[3 - i]);
    cr_assert_str_eq(weft_error_origin(u), want[3]);
    weft_error_free(st);
  }
  sync_all(&e);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_skipped, 3);
  cr_assert_eq(s.launches_run, 2);
  cr_assert_eq(atomic_load(&kinc.calls), 1, "only the independent inc ran");
  cr_assert_eq(s.failures_live, 1);
  /* The graph empties once every tainted buffer is released or rewritten. */
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, y));
  sync_all(&e);
  cr_assert_eq(stats_of(e.dev).failures_live, 1, "z and w still carry it");
  uint8_t host[64];
  memset(host, 3, sizeof(host));
  EXPECT_OK(weft_buffer_write(e.dev, B, z, 0, host, 64));
  sync_all(&e);
  cr_assert_eq(stats_of(e.dev).failures_live, 1, "w still carries it");
  inc(e.dev, C, ki, z, w); /* a successful launch rewrites w */
  expect_bytes(e.dev, A, w, 0, 64, 4, "w rewritten");
  sync_all(&e);
  cr_assert_eq(stats_of(e.dev).failures_live, 0);
  env_close(&e);
}

/* 1% of 20,000 launches fail (half through a kernel:NAME failpoint, half
 * through a kernel that returns an error); skips spread the failures. The
 * graph never holds more failures than there are live buffers, and empties
 * once they are released. */
Test(execution, a_failure_storm_keeps_the_graph_bounded, .timeout = 120) {
  env e;
  env_options(&e);
  e.opts.failpoints = "kernel:storm=OutOfMemory";
  env_open(&e);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, NULL);
  weft_kernel kstorm = make_kernel(e.dev, "storm", k_inc, NULL);
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  enum { NBUF = 64, LAUNCHES = 20000, EVERY = 1000 };
  weft_buffer b[NBUF];
  uint8_t host[256];
  memset(host, 1, sizeof(host));
  for (int i = 0; i < NBUF; i++) {
    b[i] = make_buffer(e.dev, (weft_stream_id)i, 256);
    EXPECT_OK(weft_buffer_write(e.dev, (weft_stream_id)i, b[i], 0, host, sizeof(host)));
  }
  uint64_t r = 12345, storms = 0, booms = 0, peak = 0, writes = 0;
  for (int n = 1; n <= LAUNCHES + (int)writes; n++) {
    r = r * 6364136223846793005u + 1442695040888963407u;
    uint32_t in = (uint32_t)(r >> 33) % NBUF, out = (uint32_t)(r >> 17) % NBUF;
    weft_stream_id s = (r >> 50) % 8;
    if (in == out) out = (out + 1) % NBUF;
    if ((r >> 40) % 100 == 0) {
      if ((storms + booms) % 2 == 0) {
        storms++;
        weft_binding bd[2] = {{b[in], 0, WEFT_WHOLE, WEFT_READ},
                              {b[out], 0, WEFT_WHOLE, WEFT_WRITE}};
        EXPECT_OK(weft_launch(e.dev, s, kstorm, one, one, bd, 2, NULL, 0));
      } else {
        booms++;
        boom(e.dev, s, kb, b[out], 0, WEFT_WHOLE, (uint32_t)n);
      }
    } else if ((r >> 24) % 20 == 0) {
      writes++;
      EXPECT_OK(weft_buffer_write(e.dev, s, b[out], 0, host, sizeof(host))); /* heals */
    } else {
      inc(e.dev, s, ki, b[in], b[out]);
    }
    if (n % EVERY == 0) {
      sync_all(&e);
      weft_device_stats st = stats_of(e.dev);
      cr_assert_leq(st.failures_live, NBUF, "after %d launches the graph holds %" PRIu64, n,
                    st.failures_live);
      if (st.failures_live > peak) peak = st.failures_live;
    }
  }
  sync_all(&e);
  weft_device_stats st = stats_of(e.dev);
  cr_assert_eq(st.launches, LAUNCHES);
  /* A storm launch whose input carries a failure is skipped rather than failed. */
  cr_assert_geq(st.launches_failed, booms);
  cr_assert_leq(st.launches_failed, booms + storms);
  cr_assert_geq(booms + storms, LAUNCHES / 100 - 40, "about 1%% fail: %" PRIu64, booms + storms);
  cr_assert_gt(st.launches_skipped, 0);
  cr_assert_eq(st.launches_run + st.launches_failed + st.launches_skipped, LAUNCHES);
  cr_assert_gt(peak, 0, "the storm left no failure anywhere");
  for (int i = 0; i < NBUF; i++) EXPECT_OK(weft_buffer_release(e.dev, b[i]));
  sync_all(&e);
  st = stats_of(e.dev);
  cr_assert_eq(st.failures_live, 0, "every buffer released: %" PRIu64 " failures left",
               st.failures_live);
  cr_assert_eq(st.buffers_live, 0);
  env_close(&e);
}

/* A failing launch writing [0,50) of a 100-byte buffer taints only those
 * bytes; a later write of [10,20) releases only its bytes. */
Test(execution, a_failed_partial_write_taints_only_its_bytes, .timeout = 30) {
  env e = env_new();
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, NULL);
  weft_buffer x = make_buffer(e.dev, 0, 100), src = make_buffer(e.dev, 1, 100);
  uint8_t host[100];
  memset(host, 9, sizeof(host));
  EXPECT_OK(weft_buffer_write(e.dev, 0, x, 0, host, 100));
  boom(e.dev, 1, kb, x, 0, 50, 1);
  expect_bytes(e.dev, 2, x, 50, 50, 9, "[50,100) is untouched");
  EXPECT_READ_ROOT(e.dev, 2, x, 0, 50, WEFT_ERR_VALIDATION, "boom 1", NULL);
  EXPECT_READ_ROOT(e.dev, 3, x, 49, 2, WEFT_ERR_VALIDATION, "boom 1", NULL);
  EXPECT_READ_ROOT(e.dev, 3, x, 0, 1, WEFT_ERR_VALIDATION, "boom 1", NULL);
  memset(host, 4, sizeof(host));
  EXPECT_OK(weft_buffer_write(e.dev, 3, x, 10, host, 10));
  expect_bytes(e.dev, 0, x, 10, 10, 4, "[10,20) rewritten");
  EXPECT_READ_ROOT(e.dev, 1, x, 0, 10, WEFT_ERR_VALIDATION, "boom 1", NULL);
  EXPECT_READ_ROOT(e.dev, 1, x, 20, 30, WEFT_ERR_VALIDATION, "boom 1", NULL);
  EXPECT_READ_ROOT(e.dev, 1, x, 0, 100, WEFT_ERR_VALIDATION, "boom 1", NULL);
  EXPECT_READ_ROOT(e.dev, 1, x, 19, 2, WEFT_ERR_VALIDATION, "boom 1", NULL);
  expect_bytes(e.dev, 0, x, 50, 50, 9, "[50,100) still untouched");
  sync_all(&e);
  cr_assert_eq(stats_of(e.dev).failures_live, 1);
  /* A launch reading only clean bytes runs. */
  weft_binding rd[2] = {{x, 10, 10, WEFT_READ}, {src, 0, 10, WEFT_WRITE}};
  EXPECT_OK(weft_launch(e.dev, 2, ki, one, one, rd, 2, NULL, 0));
  expect_bytes(e.dev, 0, src, 0, 10, 5, "a launch over the clean bytes");
  /* A successful launch writing [0,10) and [20,50) releases the rest. */
  EXPECT_OK(weft_buffer_write(e.dev, 1, src, 0, host, 100));
  weft_binding wr[3] = {{src, 0, 100, WEFT_READ}, {x, 0, 10, WEFT_WRITE}, {x, 20, 30, WEFT_WRITE}};
  EXPECT_OK(weft_launch(e.dev, 3, ki, one, one, wr, 3, NULL, 0));
  expect_bytes(e.dev, 0, x, 0, 10, 5, "[0,10) rewritten");
  expect_bytes(e.dev, 0, x, 20, 30, 5, "[20,50) rewritten");
  sync_all(&e);
  cr_assert_eq(stats_of(e.dev).failures_live, 0);
  env_close(&e);
}

/* A chain of 20 skipped launches: the report keeps the newest 16 hops and
 * says how many older records were dropped. */
Test(execution, a_skip_chain_past_sixteen_records_says_how_many_were_dropped, .timeout = 30) {
  env e = env_new();
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, NULL);
  enum { HOPS = 20 };
  weft_buffer b[HOPS + 1];
  for (int i = 0; i <= HOPS; i++) b[i] = make_buffer(e.dev, (weft_stream_id)i, 32);
  boom(e.dev, 0, kb, b[0], 0, WEFT_WHOLE, 3);
  for (int i = 1; i <= HOPS; i++) inc(e.dev, (weft_stream_id)i, ki, b[i - 1], b[i]);
  uint8_t got[32];
  weft_status st = weft_buffer_read(e.dev, 0, b[HOPS], 0, got, 32);
  weft_status u = ONLY_UNWRITTEN(st);
  cr_assert_eq(weft_error_chain_length(u), 17, "16 hops and the drop note");
  for (int i = 0; i < 16; i++) {
    char name[48], hop[160];
    buf_name_of(b[HOPS - 1 - i], name, sizeof(name));
    snprintf(hop, sizeof(hop), "skipped kernel 'inc' (launch %d): it needed %s", HOPS + 1 - i,
             name);
    cr_assert_str_eq(weft_error_chain_at(u, (size_t)i), hop, "hop %d", i);
  }
  cr_assert_str_eq(weft_error_chain_at(u, 16), "4 older skip records were dropped");
  cr_assert_str_eq(weft_error_origin(u), "kernel 'boom' (launch 1)");
  weft_error_free(st);
  env_close(&e);
}

Test(report, a_direct_read_of_a_failed_output_has_no_hop_and_names_the_origin, .timeout = 30) {
  env e = env_new();
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, NULL);
  weft_buffer x = make_buffer(e.dev, 0, 32), y = make_buffer(e.dev, 1, 32);
  boom(e.dev, 0, kb, x, 0, WEFT_WHOLE, 5); /* launch 1 */
  inc(e.dev, 1, ki, x, y);                 /* launch 2: skipped */
  uint8_t got[32];
  weft_status st = weft_buffer_read(e.dev, 0, x, 0, got, 32);
  weft_status u = ONLY_UNWRITTEN(st);
  cr_assert_eq(weft_error_chain_length(u), 0, "no launch was skipped on the way to x");
  cr_assert_null(weft_error_chain_at(u, 0));
  cr_assert_str_eq(weft_error_origin(u), "kernel 'boom' (launch 1)");
  char text[2048];
  text_of(u, text, sizeof(text));
  cr_assert_not_null(strstr(text, "root: Validation: validation failed: boom 5; failed: kernel "
                                  "'boom' (launch 1)"),
                     "the report keeps the origin: %s", text);
  cr_assert_null(strstr(text, "chain:"), "%s", text);
  weft_error_free(st);
  st = weft_buffer_read(e.dev, 1, y, 0, got, 32);
  u = ONLY_UNWRITTEN(st);
  cr_assert_eq(weft_error_chain_length(u), 1, "one skipped hop");
  cr_assert_not_null(strstr(weft_error_chain_at(u, 0), "skipped kernel 'inc' (launch 2)"), "%s",
                     weft_error_chain_at(u, 0));
  cr_assert_str_eq(weft_error_origin(u), "kernel 'boom' (launch 1)");
  weft_error_free(st);
  env_close(&e);
}

Test(report, a_failed_reservation_names_no_origin, .timeout = 30) {
  env e;
  env_options(&e);
  e.opts.failpoints = "alloc#1=BufferTooBig";
  env_open(&e);
  weft_buffer b = make_buffer(e.dev, 0, 64);
  uint8_t got[8];
  weft_status st = weft_buffer_read(e.dev, 0, b, 0, got, 8);
  weft_status u = ONLY_UNWRITTEN(st);
  cr_assert_null(weft_error_origin(u));
  cr_assert_eq(weft_error_chain_length(u), 0);
  weft_error_free(st);
  env_close(&e);
}

Test(execution, every_output_of_a_skipped_launch_keeps_its_hop, .timeout = 30) {
  env e = env_new();
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  weft_kernel ki = make_kernel(e.dev, "inc", k_inc, NULL);
  enum { OUTS = WEFT_MAX_BINDINGS - 1 };
  weft_buffer x = make_buffer(e.dev, 0, 16), out[OUTS];
  weft_binding bd[WEFT_MAX_BINDINGS] = {{x, 0, WEFT_WHOLE, WEFT_READ}};
  for (int i = 0; i < OUTS; i++) {
    out[i] = make_buffer(e.dev, 0, 16);
    bd[1 + i] = (weft_binding){out[i], 0, WEFT_WHOLE, WEFT_WRITE};
  }
  boom(e.dev, 0, kb, x, 0, WEFT_WHOLE, 9);                                        /* launch 1 */
  EXPECT_OK(weft_launch(e.dev, 1, ki, one, one, bd, WEFT_MAX_BINDINGS, NULL, 0)); /* launch 2 */
  char name[48], hop[160];
  buf_name_of(x, name, sizeof(name));
  snprintf(hop, sizeof(hop), "skipped kernel 'inc' (launch 2): it needed %s", name);
  for (int i = 0; i < OUTS; i++) {
    uint8_t got[16];
    weft_status st = weft_buffer_read(e.dev, 0, out[i], 0, got, 16);
    weft_status u = ONLY_UNWRITTEN(st);
    cr_assert_eq(weft_error_chain_length(u), 1, "output %d (binding %d) lost its hop", i, i + 1);
    cr_assert_str_eq(weft_error_chain_at(u, 0), hop, "output %d", i);
    weft_error_free(st);
  }
  env_close(&e);
}

static weft_status k_reserved(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint32_t which = 0;
  if (ctx->scalar_bytes >= 4) memcpy(&which, ctx->scalars, 4);
  switch (which) {
  case 0:
    return weft_error_make(WEFT_ERR_TORN_DOWN, "ignored");
  case 1:
    return weft_error_make(WEFT_ERR_SKIPPED, NULL);
  case 2:
    return weft_error_unwritten(7, 1, NULL, NULL, 0);
  default: {
    weft_status one_error = weft_error_make(WEFT_ERR_UNKNOWN, "inner");
    return weft_error_several(&one_error, 1);
  }
  }
}

Test(report, a_kernel_returning_a_kind_only_weft_reports_fails_as_its_own_launch, .timeout = 30) {
  static const weft_error_kind returned[] = {WEFT_ERR_TORN_DOWN, WEFT_ERR_SKIPPED,
                                             WEFT_ERR_UNWRITTEN, WEFT_ERR_SEVERAL};
  env e = env_new();
  weft_kernel k = make_kernel(e.dev, "liar", k_reserved, NULL);
  for (uint32_t i = 0; i < 4; i++) {
    weft_buffer b = make_buffer(e.dev, 0, 32);
    weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
    EXPECT_OK(weft_launch(e.dev, 0, k, one, one, &bd, 1, &i, sizeof(i)));
    uint8_t got[32];
    weft_status st = weft_buffer_read(e.dev, 0, b, 0, got, 32);
    weft_status u = ONLY_UNWRITTEN(st);
    weft_status root = weft_error_root(u);
    char text[2048];
    text_of(st, text, sizeof(text));
    cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_GENERIC, "%s", text);
    cr_assert_not_null(strstr(weft_error_message(root), "kernel 'liar'"), "%s", text);
    cr_assert_eq(weft_error_kind_of(weft_error_source(root)), returned[i],
                 "the kernel's error is kept as the cause: %s", text);
    char want[64];
    snprintf(want, sizeof(want), "kernel 'liar' (launch %u)", i + 1);
    cr_assert_str_eq(weft_error_origin(u), want);
    cr_assert_null(strstr(text, "root: Skipped"), "%s", text);
    cr_assert_null(strstr(text, "root: TornDown"), "%s", text);
    cr_assert_null(strstr(text, "root: Unwritten"), "%s", text);
    cr_assert_null(strstr(text, "root: Several"), "%s", text);
    weft_error_free(st);
    EXPECT_OK(weft_buffer_release(e.dev, b));
  }
  env_close(&e);
}

/* ---- the write scope ------------------------------------------------------------------------ */

/* A failing launch that writes nothing (only READ bindings, or a zero-sized
 * WRITE binding) mints no failure: failures_live is unchanged. */
Test(scope, a_failing_launch_with_an_empty_write_set_mints_nothing, .timeout = 30) {
  env e = env_new();
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, NULL);
  weft_buffer in = make_buffer(e.dev, 0, 64), other = make_buffer(e.dev, 1, 64);
  fill(e.dev, 0, kf, in, 2);
  uint64_t launches = 1, failed = 0;
  for (int round = 0; round < 2; round++) {
    sync_all(&e);
    uint64_t before = stats_of(e.dev).failures_live;
    cr_assert_eq(before, (uint64_t)round, "round 1 starts with one failure");
    weft_binding rd[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {in, 10, 20, WEFT_READ}};
    uint32_t tag = 1;
    EXPECT_OK(weft_launch(e.dev, 1, kb, one, one, rd, 2, &tag, 4));
    weft_binding empty[2] = {{in, 0, 64, WEFT_READ}, {other, 64, 0, WEFT_WRITE}};
    EXPECT_OK(weft_launch(e.dev, 2, kb, one, one, empty, 2, &tag, 4));
    launches += 2;
    char spec[48];
    snprintf(spec, sizeof(spec), "launch#%" PRIu64 "=Generic", ++launches);
    EXPECT_OK(weft_device_set_failpoints(e.dev, spec));
    EXPECT_OK(weft_launch(e.dev, 3, kf, one, one, rd, 1, &tag, 1)); /* failpoint, reads only */
    failed += 3;
    sync_all(&e);
    weft_device_stats s = stats_of(e.dev);
    cr_assert_eq(s.failures_live, before, "round %d: a failure that wrote nothing was kept", round);
    cr_assert_eq(s.launches_failed, failed);
    cr_assert_eq(s.launches, launches);
    expect_bytes(e.dev, 0, in, 0, 64, 2, "the inputs are untouched");
    if (round == 0) { /* round 1 starts with a failure on another buffer */
      boom(e.dev, 0, kb, other, 0, WEFT_WHOLE, 5);
      launches++;
      failed++;
    }
  }
  env_close(&e);
}

/* weft_check has no barrier: it reports a failure once the failed work has
 * completed (polled here without any sync), and NULL for clean buffers. */
Test(scope, check_reports_a_completed_failure_without_a_barrier, .timeout = 30) {
  env e = env_new();
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, NULL);
  weft_buffer x = make_buffer(e.dev, 0, 64), clean = make_buffer(e.dev, 1, 64);
  fill(e.dev, 1, kf, clean, 1);
  boom(e.dev, 0, kb, x, 0, WEFT_WHOLE, 11);
  weft_status st = NULL;
  double t0 = now_s();
  while (!(st = weft_check(e.dev, &x, 1))) {
    cr_assert_lt(now_s() - t0, 10.0, "weft_check never reported the completed failure");
    sleep_ms(1);
  }
  weft_status u = ONLY_UNWRITTEN(st);
  cr_assert_str_eq(weft_error_message(weft_error_root(u)), "boom 11");
  cr_assert_eq(weft_error_chain_length(u), 0);
  cr_assert_str_eq(weft_error_origin(u), "kernel 'boom' (launch 2)");
  weft_error_free(st);
  for (int i = 0; i < 10; i++) EXPECT_OK(weft_check(e.dev, &clean, 1)); /* before and after */
  EXPECT_OK(weft_sync(e.dev, 1));
  EXPECT_OK(weft_check(e.dev, &clean, 1));
  weft_buffer both[3] = {clean, x, clean};
  st = weft_check(e.dev, both, 3);
  (void)ONLY_UNWRITTEN(st);
  weft_error_free(st);
  env_close(&e);
}

/* The same failing launch over the same buffers, again and again: each
 * failure takes the bytes of the one before, so the graph holds one. */
Test(scope, rerunning_a_failing_launch_keeps_failures_live_constant, .timeout = 60) {
  env e = env_new();
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  weft_kernel kf = make_kernel(e.dev, "fill", k_fill, NULL);
  weft_buffer in = make_buffer(e.dev, 0, 64), x = make_buffer(e.dev, 1, 64),
              y = make_buffer(e.dev, 2, 64);
  fill(e.dev, 0, kf, in, 1);
  uint64_t last = 0;
  for (uint32_t i = 0; i < 200; i++) {
    weft_binding bd[3] = {
        {in, 0, WEFT_WHOLE, WEFT_READ}, {x, 0, WEFT_WHOLE, WEFT_WRITE}, {y, 8, 32, WEFT_WRITE}};
    EXPECT_OK(weft_launch(e.dev, (weft_stream_id)(i % 3), kb, one, one, bd, 3, &i, 4));
    if (i % 20 != 19) continue;
    sync_all(&e);
    cr_assert_eq(stats_of(e.dev).failures_live, 1, "after %u failing runs", i + 1);
    char msg[32];
    snprintf(msg, sizeof(msg), "boom %" PRIu32, i);
    uint64_t id = EXPECT_READ_ROOT(e.dev, 0, x, 0, 64, WEFT_ERR_VALIDATION, msg, NULL);
    cr_assert_gt(id, last, "failure ids increase");
    last = id;
    cr_assert_eq(EXPECT_READ_ROOT(e.dev, 1, y, 0, 64, WEFT_ERR_VALIDATION, msg, NULL), id);
  }
  EXPECT_OK(weft_buffer_release(e.dev, x));
  EXPECT_OK(weft_buffer_release(e.dev, y));
  sync_all(&e);
  cr_assert_eq(stats_of(e.dev).failures_live, 0);
  env_close(&e);
}

/* docs/errors.md: a read "returns Several with one Unwritten per distinct
 * failure (first seen first)". Bytes [0,50) and [50,100) of one buffer left
 * unwritten by two different failures: a read over both names both. */
Test(report, a_read_over_two_failures_reports_each_of_them, .timeout = 30) {
  env e = env_new();
  weft_kernel kb = make_kernel(e.dev, "boom", k_boom, NULL);
  weft_buffer x = make_buffer(e.dev, 0, 100);
  boom(e.dev, 0, kb, x, 0, 50, 1);
  boom(e.dev, 1, kb, x, 50, 50, 2);
  uint64_t first = EXPECT_READ_ROOT(e.dev, 2, x, 0, 50, WEFT_ERR_VALIDATION, "boom 1", NULL);
  uint64_t second = EXPECT_READ_ROOT(e.dev, 2, x, 50, 50, WEFT_ERR_VALIDATION, "boom 2", NULL);
  cr_assert_neq(first, second);
  uint8_t got[100];
  weft_status st = weft_buffer_read(e.dev, 3, x, 0, got, 100);
  char text[4096];
  text_of(st, text, sizeof(text));
  weft_error_kind kind = weft_error_kind_of(st);
  size_t n = weft_error_count(st);
  uint64_t ids[2] = {n > 0 ? weft_error_failure_id(weft_error_at(st, 0)) : 0,
                     n > 1 ? weft_error_failure_id(weft_error_at(st, 1)) : 0};
  weft_error_free(st);
  env_close(&e);
  cr_assert_eq(kind, WEFT_ERR_SEVERAL, "%s", text);
  cr_assert_eq(n, 2, "a read over bytes left unwritten by two failures reports %zu of them: %s", n,
               text);
  cr_assert_eq(ids[0], first, "first seen first: %s", text);
  cr_assert_eq(ids[1], second, "%s", text);
}
