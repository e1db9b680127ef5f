/* weft_launch_ex and labels: a descriptor launch runs like weft_launch; its
 * struct_size, shared_bytes and label are checked; a label names the launch
 * in its failure's origin and skip hops (unlabelled launches keep their
 * text); weft_buffer_set_label names buffers in the hops; the device interns
 * at most WEFT's limit of launch labels; and once warm, labelled launches,
 * copies and fills allocate nothing (counting allocator). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, int line) {
  cr_assert_not_null(st, "line %d: the call succeeded", line);
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: %s", line,
               weft_error_kind_name(weft_error_kind_of(st)), weft_error_message(st));
  cr_assert_not_null(strstr(weft_error_message(st), needle), "line %d: '%s' lacks '%s'", line,
                     weft_error_message(st), needle);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind, needle) expect_kind((call), (kind), (needle), __LINE__)

static _Atomic uint64_t runs;

/* out[0] = in[0] + 1 (uint32), or out[0] = 1 with no input. */
static weft_status inc(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint32_t *out = ctx->buffers[ctx->num_buffers - 1];
  out[0] = ctx->num_buffers > 1 ? ((const uint32_t *)ctx->buffers[0])[0] + 1 : 1;
  atomic_fetch_add(&runs, 1);
  return NULL;
}

static weft_status fails(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  return weft_error_make(WEFT_ERR_VALIDATION, "failed on purpose");
}

static weft_launch_desc desc_of(weft_kernel k, weft_stream_id s, const weft_binding *b, size_t n,
                                const char *label) {
  weft_launch_desc d = {.struct_size = sizeof(weft_launch_desc),
                        .stream = s,
                        .kernel = k,
                        .grid = {1, 1, 1},
                        .block = {1, 1, 1},
                        .bindings = b,
                        .num_bindings = n,
                        .label = label};
  return d;
}

Test(launch_ex, runs_like_weft_launch, .timeout = 60) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  weft_buffer a, b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &b));
  weft_binding w = {a, 0, WEFT_WHOLE, WEFT_WRITE};
  weft_launch_desc d = desc_of(k, 0, &w, 1, NULL);
  EXPECT_OK(weft_launch_ex(e.dev, &d));
  weft_binding rw[2] = {{a, 0, 4, WEFT_READ}, {b, 0, 4, WEFT_WRITE}};
  d = desc_of(k, 1, rw, 2, "step.two");
  EXPECT_OK(weft_launch_ex(e.dev, &d));
  uint32_t got = 0;
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, &got, 4));
  cr_assert_eq(got, 2);
  env_close(&e);
}

Test(launch_ex, bad_descriptors_are_refused, .timeout = 60) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  weft_buffer a;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &a));
  weft_binding w = {a, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_KIND(weft_launch_ex(e.dev, NULL), WEFT_ERR_INVALID_ARGUMENT, "desc is NULL");
  weft_launch_desc d = desc_of(k, 0, &w, 1, NULL);
  uint32_t sizes[] = {0, 4, (uint32_t)sizeof(d) - 8, (uint32_t)sizeof(d) + 8, UINT32_MAX};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    d.struct_size = sizes[i];
    EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "struct_size");
  }
  d = desc_of(k, 0, &w, 1, NULL);
  d.shared_bytes = 1;
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT,
              "kernel 'inc' is not a module kernel");
  d = desc_of(k, 0, &w, 1, "");
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "label must be 1..127 bytes");
  char longer[200];
  memset(longer, 'x', sizeof(longer) - 1);
  longer[sizeof(longer) - 1] = '\0';
  d = desc_of(k, 0, &w, 1, longer);
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "label must be 1..127 bytes");
  d = desc_of(k, 0, &w, 1, NULL);
  d.grid[1] = 0;
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "grid has a zero dimension");
  d = desc_of((weft_kernel){42}, 0, &w, 1, NULL);
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_NOT_FOUND, "not a kernel of this device");
  d = desc_of(k, 0, NULL, 1, NULL);
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "bindings is NULL");
  EXPECT_OK(weft_sync(e.dev, 0));
  weft_device_stats s;
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.launches, 0);
  env_close(&e);
}

Test(labels, name_the_failed_launch_the_skipped_ones_and_the_buffers, .timeout = 60) {
  env e = env_new();
  weft_kernel kf, ki;
  EXPECT_OK(weft_kernel_host(e.dev, "gemm", fails, NULL, &kf));
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &ki));
  weft_buffer q, s, o;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &q));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &s));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &o));
  EXPECT_OK(weft_buffer_set_label(e.dev, q, "attn.old"));
  EXPECT_OK(weft_buffer_set_label(e.dev, q, "attn.q")); /* replaces (the old copy is freed) */
  EXPECT_OK(weft_buffer_set_label(e.dev, s, "attn.s"));
  weft_binding wq = {q, 0, WEFT_WHOLE, WEFT_WRITE};
  weft_launch_desc d = desc_of(kf, 0, &wq, 1, "attn.qk");
  EXPECT_OK(weft_launch_ex(e.dev, &d)); /* launch 1 fails */
  weft_binding b1[2] = {{q, 0, 4, WEFT_READ}, {s, 0, 4, WEFT_WRITE}};
  d = desc_of(ki, 1, b1, 2, "attn.softmax");
  EXPECT_OK(weft_launch_ex(e.dev, &d)); /* launch 2: skipped, labelled */
  weft_binding b2[2] = {{s, 0, 4, WEFT_READ}, {o, 0, 4, WEFT_WRITE}};
  const uint32_t one[3] = {1, 1, 1};
  EXPECT_OK(weft_launch(e.dev, 2, ki, one, one, b2, 2, NULL, 0)); /* launch 3: skipped */
  uint32_t got;
  weft_status st = weft_buffer_read(e.dev, 0, o, 0, &got, 4);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_status u = weft_error_at(st, 0);
  cr_assert_str_eq(weft_error_origin(u), "launch 'attn.qk' of kernel 'gemm' (launch 1)");
  cr_assert_eq(weft_error_chain_length(u), 2);
  char want[2][160];
  snprintf(want[0], sizeof(want[0]),
           "skipped kernel 'inc' (launch 3): it needed buffer 'attn.s' (#%" PRIu32 ")",
           (uint32_t)s.id);
  snprintf(want[1], sizeof(want[1]),
           "skipped launch 'attn.softmax' of kernel 'inc' (launch 2): it needed buffer 'attn.q' "
           "(#%" PRIu32 ")",
           (uint32_t)q.id);
  cr_assert_str_eq(weft_error_chain_at(u, 0), want[0]);
  cr_assert_str_eq(weft_error_chain_at(u, 1), want[1]);
  weft_error_free(st);
  /* A label removed: the buffer is named by its number again. */
  EXPECT_OK(weft_buffer_set_label(e.dev, s, NULL));
  st = weft_buffer_read(e.dev, 0, o, 0, &got, 4);
  snprintf(want[0], sizeof(want[0]), "skipped kernel 'inc' (launch 3): it needed buffer #%" PRIu32,
           (uint32_t)s.id);
  cr_assert_str_eq(weft_error_chain_at(weft_error_at(st, 0), 0), want[0]);
  weft_error_free(st);
  env_close(&e);
}

Test(labels, bad_buffer_labels_are_refused, .timeout = 60) {
  env e = env_new();
  weft_buffer a, dead;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &dead));
  EXPECT_OK(weft_buffer_release(e.dev, dead));
  EXPECT_KIND(weft_buffer_set_label(e.dev, dead, "x"), WEFT_ERR_NOT_FOUND, "not a live buffer");
  EXPECT_KIND(weft_buffer_set_label(e.dev, (weft_buffer){0}, "x"), WEFT_ERR_NOT_FOUND,
              "not a live buffer");
  EXPECT_KIND(weft_buffer_set_label(e.dev, a, ""), WEFT_ERR_INVALID_ARGUMENT, "1..127 bytes");
  char longer[129];
  memset(longer, 'y', 128);
  longer[128] = '\0';
  EXPECT_KIND(weft_buffer_set_label(e.dev, a, longer), WEFT_ERR_INVALID_ARGUMENT, "1..127 bytes");
  longer[127] = '\0'; /* 127 bytes: the longest accepted */
  EXPECT_OK(weft_buffer_set_label(e.dev, a, longer));
  /* Labelled, then released while labelled: the copy goes with the buffer. */
  EXPECT_OK(weft_buffer_release(e.dev, a));
  env_close(&e);
}

Test(labels, a_device_interns_a_bounded_number_of_launch_labels, .timeout = 120) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  weft_buffer a;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4, &a));
  weft_binding w = {a, 0, WEFT_WHOLE, WEFT_WRITE};
  char label[32];
  for (int i = 0; i < 4096; i++) {
    snprintf(label, sizeof(label), "step.%d", i);
    weft_launch_desc d = desc_of(k, 0, &w, 1, label);
    EXPECT_OK(weft_launch_ex(e.dev, &d));
  }
  weft_launch_desc d = desc_of(k, 0, &w, 1, "one.too.many");
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "4096 launch labels");
  d = desc_of(k, 0, &w, 1, "step.17"); /* one already interned still works */
  EXPECT_OK(weft_launch_ex(e.dev, &d));
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(atomic_load(&runs) >= 4097, true);
  env_close(&e);
}

/* ---- zero allocations once warm ------------------------------------------------------------ */

static _Atomic int gate;

static weft_status hold(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate)) sched_yield();
  return NULL;
}

typedef struct opener {
  weft_device *dev;
  uint64_t parked;
} opener;

static void *open_gate_when_parked(void *arg) {
  opener *o = arg;
  weft_device_stats st;
  do {
    sched_yield();
    EXPECT_OK(weft_device_stats_get(o->dev, &st));
  } while (st.backpressure_waits < o->parked);
  atomic_store(&gate, 1);
  return NULL;
}

/* One round: a labelled launch (the label a fresh string each time, equal to
 * an interned one), a copy and a fill. */
static void round_of(weft_device *dev, weft_kernel k, const weft_buffer *b, int i) {
  char label[16];
  snprintf(label, sizeof(label), "layer.%d", i % 4);
  weft_binding bd[2] = {{b[0], 0, 4, WEFT_READ}, {b[1], 0, 4, WEFT_WRITE}};
  weft_launch_desc d = desc_of(k, 0, bd, 2, label);
  EXPECT_OK(weft_launch_ex(dev, &d));
  EXPECT_OK(weft_buffer_copy(dev, 0, b[1], 0, b[2], 0, 4));
  EXPECT_OK(weft_buffer_fill(dev, 0, b[2], 4, 60, (uint8_t)i));
}

Test(zero_alloc, labelled_launches_copies_and_fills_allocate_nothing_once_warm, .timeout = 120) {
  enum { CAP = 64, BATCH = 30, ROUNDS = 300 };
  env e;
  env_options(&e);
  e.opts.max_streams = 4;
  e.opts.max_pending_commands = CAP;
  env_open(&e);
  weft_kernel kh, k;
  EXPECT_OK(weft_kernel_host(e.dev, "hold", hold, NULL, &kh));
  EXPECT_OK(weft_kernel_host(e.dev, "inc", inc, NULL, &k));
  weft_buffer b[3];
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b[i]));
  uint32_t zero = 0;
  EXPECT_OK(weft_buffer_write(e.dev, 0, b[0], 0, &zero, 4));
  /* Warm-up: the stream's budget filled behind a held kernel (this thread
   * parks), then the measured workload once. */
  atomic_store(&gate, 0);
  opener op = {e.dev, 1};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, open_gate_when_parked, &op), 0);
  const uint32_t one[3] = {1, 1, 1};
  EXPECT_OK(weft_launch(e.dev, 0, kh, one, one, NULL, 0, NULL, 0));
  for (int i = 0; i < 2 * CAP; i++) round_of(e.dev, k, b, i);
  pthread_join(t, NULL);
  EXPECT_OK(weft_sync(e.dev, 0));
  for (int r = 0; r < ROUNDS / BATCH; r++) {
    for (int j = 0; j < BATCH; j++) round_of(e.dev, k, b, j);
    EXPECT_OK(weft_sync(e.dev, 0));
  }
  weft_alloc_counts before = weft_counting_allocator_counts(e.ca);
  for (int r = 0; r < ROUNDS / BATCH; r++) {
    for (int j = 0; j < BATCH; j++) round_of(e.dev, k, b, j);
    EXPECT_OK(weft_sync(e.dev, 0));
  }
  weft_alloc_counts after = weft_counting_allocator_counts(e.ca);
  cr_assert_eq(after.allocs, before.allocs, "%" PRIu64 " allocations over %d rounds once warm",
               after.allocs - before.allocs, ROUNDS);
  weft_device_stats s;
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.launches_failed + s.launches_skipped, 0);
  cr_assert_eq(s.launches_run, 1 + 3 * (2 * CAP + 2 * ROUNDS));
  uint8_t got[64];
  EXPECT_OK(weft_buffer_read(e.dev, 0, b[2], 0, got, 64));
  uint32_t v;
  memcpy(&v, got, 4);
  cr_assert_eq(v, 1, "the copy carried the launch's output");
  env_close(&e);
}
