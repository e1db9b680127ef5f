/* weft_kernel_native on the host backend: the function runs once per launch
 * with host addresses, sizes and scalars and no stream; grid and block must
 * be {1,1,1}; a non-NULL return fails the launch and taints its outputs; a
 * tainted input skips it without calling the function; it follows the host
 * kernel rules (a read that would wait for it is refused). */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

static const uint32_t one[3] = {1, 1, 1};

static void expect_kind(weft_status st, weft_error_kind kind, const char *needle, int line) {
  cr_assert_not_null(st, "line %d: the call succeeded", line);
  cr_assert_eq(weft_error_kind_of(st), kind, "line %d: %s: %s", line,
               weft_error_kind_name(weft_error_kind_of(st)), weft_error_message(st));
  cr_assert_not_null(strstr(weft_error_message(st), needle), "line %d: '%s' lacks '%s'", line,
                     weft_error_message(st), needle);
  weft_error_free(st);
}
#define EXPECT_KIND(call, kind, needle) expect_kind((call), (kind), (needle), __LINE__)

typedef struct seen {
  _Atomic int calls;
  void *stream;
  size_t num_buffers, scalar_bytes;
  uint64_t sizes[4];
} seen;

/* out[i] = in[i] * scale (floats), the "library call" the embedder brings;
 * records what it was given. */
static weft_status scale(const weft_native_ctx *ctx, void *user) {
  seen *s = user;
  atomic_fetch_add(&s->calls, 1);
  s->stream = ctx->stream;
  s->num_buffers = ctx->num_buffers;
  s->scalar_bytes = ctx->scalar_bytes;
  for (size_t i = 0; i < ctx->num_buffers && i < 4; i++) s->sizes[i] = ctx->sizes[i];
  const float *in = (const float *)(uintptr_t)ctx->addresses[0];
  float *out = (float *)(uintptr_t)ctx->addresses[1];
  float k;
  memcpy(&k, ctx->scalars, sizeof(k));
  for (uint64_t i = 0; i < ctx->sizes[1] / sizeof(float); i++) out[i] = in[i] * k;
  return NULL;
}

static weft_status refuses(const weft_native_ctx *ctx, void *user) {
  (void)ctx;
  atomic_fetch_add(&((seen *)user)->calls, 1);
  return weft_error_make(WEFT_ERR_VALIDATION, "the library call failed");
}

Test(native, runs_once_with_host_addresses_sizes_and_scalars, .timeout = 60) {
  env e = env_new();
  seen s = {0};
  weft_kernel k;
  EXPECT_OK(weft_kernel_native(e.dev, "scale", scale, &s, &k));
  weft_buffer in, out;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &in));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &out));
  float v[16];
  for (int i = 0; i < 16; i++) v[i] = (float)i;
  EXPECT_OK(weft_buffer_write(e.dev, 0, in, 0, v, sizeof(v)));
  weft_binding bd[2] = {{in, 16, 32, WEFT_READ}, {out, 0, 32, WEFT_WRITE}};
  float three = 3;
  EXPECT_OK(weft_launch(e.dev, 0, k, one, one, bd, 2, &three, sizeof(three)));
  float got[8];
  EXPECT_OK(weft_buffer_read(e.dev, 0, out, 0, got, sizeof(got)));
  for (int i = 0; i < 8; i++) cr_assert_eq(got[i], 3.0f * (float)(i + 4), "element %d", i);
  cr_assert_eq(atomic_load(&s.calls), 1);
  cr_assert_null(s.stream, "a host native kernel has no stream");
  cr_assert_eq(s.num_buffers, 2);
  cr_assert_eq(s.sizes[0], 32);
  cr_assert_eq(s.sizes[1], 32);
  cr_assert_eq(s.scalar_bytes, sizeof(float));
  env_close(&e);
}

Test(native, bad_registrations_and_launch_shapes_are_refused, .timeout = 60) {
  env e = env_new();
  seen s = {0};
  weft_kernel k = {99};
  EXPECT_KIND(weft_kernel_native(e.dev, "x", NULL, NULL, &k), WEFT_ERR_INVALID_ARGUMENT,
              "native function is NULL");
  cr_assert_eq(k.id, 0, "a refused registration leaves *out 0");
  EXPECT_KIND(weft_kernel_native(e.dev, NULL, scale, NULL, &k), WEFT_ERR_INVALID_ARGUMENT,
              "kernel name is NULL");
  EXPECT_KIND(weft_kernel_native(e.dev, "", scale, NULL, &k), WEFT_ERR_INVALID_ARGUMENT,
              "1..255 bytes");
  EXPECT_KIND(weft_kernel_native(e.dev, "x", scale, NULL, NULL), WEFT_ERR_INVALID_ARGUMENT,
              "out is NULL");
  EXPECT_OK(weft_kernel_native(e.dev, "scale", scale, &s, &k));
  weft_buffer in, out;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &in));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &out));
  weft_binding bd[2] = {{in, 0, 32, WEFT_READ}, {out, 0, 32, WEFT_WRITE}};
  float f = 1;
  const uint32_t two[3] = {2, 1, 1}, deep[3] = {1, 1, 4};
  EXPECT_KIND(weft_launch(e.dev, 0, k, two, one, bd, 2, &f, 4), WEFT_ERR_INVALID_ARGUMENT,
              "native kernel 'scale' runs once: grid and block must be {1,1,1}");
  EXPECT_KIND(weft_launch(e.dev, 0, k, one, deep, bd, 2, &f, 4), WEFT_ERR_INVALID_ARGUMENT,
              "block 1 x 1 x 4");
  weft_launch_desc d = {.struct_size = sizeof(d),
                        .kernel = k,
                        .grid = {1, 1, 1},
                        .block = {32, 1, 1},
                        .bindings = bd,
                        .num_bindings = 2,
                        .scalars = &f,
                        .scalar_bytes = 4};
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT, "{1,1,1}");
  d.block[0] = 1;
  d.shared_bytes = 64;
  EXPECT_KIND(weft_launch_ex(e.dev, &d), WEFT_ERR_INVALID_ARGUMENT,
              "kernel 'scale' is not a module kernel");
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_eq(atomic_load(&s.calls), 0);
  weft_device_stats st;
  EXPECT_OK(weft_device_stats_get(e.dev, &st));
  cr_assert_eq(st.launches, 0);
  env_close(&e);
}

Test(native, an_error_it_returns_fails_the_launch_and_a_tainted_input_skips_it, .timeout = 60) {
  env e = env_new();
  seen bad = {0}, good = {0};
  weft_kernel kb, kg;
  EXPECT_OK(weft_kernel_native(e.dev, "lib_call", refuses, &bad, &kb));
  EXPECT_OK(weft_kernel_native(e.dev, "scale", scale, &good, &kg));
  weft_buffer a, b, c;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &a));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &c));
  weft_binding w = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, kb, one, one, &w, 1, NULL, 0)); /* launch 1 fails */
  weft_binding bd[2] = {{b, 0, 64, WEFT_READ}, {c, 0, 64, WEFT_WRITE}};
  float f = 2;
  EXPECT_OK(weft_launch(e.dev, 1, kg, one, one, bd, 2, &f, 4)); /* launch 2 skipped */
  uint8_t got[64];
  weft_status st = weft_buffer_read(e.dev, 0, c, 0, got, 64);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_status u = weft_error_at(st, 0);
  cr_assert_str_eq(weft_error_message(weft_error_root(u)), "the library call failed");
  cr_assert_str_eq(weft_error_origin(u), "kernel 'lib_call' (launch 1)");
  char hop[128];
  snprintf(hop, sizeof(hop), "skipped kernel 'scale' (launch 2): it needed buffer #%" PRIu32,
           (uint32_t)b.id);
  cr_assert_str_eq(weft_error_chain_at(u, 0), hop);
  weft_error_free(st);
  cr_assert_eq(atomic_load(&bad.calls), 1);
  cr_assert_eq(atomic_load(&good.calls), 0, "a skipped native kernel was called");
  weft_device_stats s;
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_skipped, 1);
  env_close(&e);
}

typedef struct reentry {
  weft_device *dev;
  weft_buffer out;
  weft_status read; /* what the read of its own output said */
} reentry;

/* Follows the host kernel rules: a read of its own output would wait for it. */
static weft_status reads_itself(const weft_native_ctx *ctx, void *user) {
  (void)ctx;
  reentry *r = user;
  uint8_t b;
  r->read = weft_buffer_read(r->dev, 0, r->out, 0, &b, 1);
  return NULL;
}

Test(native, a_read_that_would_wait_for_it_is_refused, .timeout = 60) {
  env e = env_new();
  reentry r = {.dev = e.dev};
  weft_kernel k;
  EXPECT_OK(weft_kernel_native(e.dev, "reader", reads_itself, &r, &k));
  EXPECT_OK(weft_buffer_create(e.dev, 0, 8, &r.out));
  weft_binding w = {r.out, 0, WEFT_WHOLE, WEFT_WRITE};
  EXPECT_OK(weft_launch(e.dev, 0, k, one, one, &w, 1, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 0));
  cr_assert_not_null(r.read);
  cr_assert_eq(weft_error_kind_of(r.read), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_not_null(strstr(weft_error_message(r.read), "from kernel 'reader' (launch 1)"), "%s",
                     weft_error_message(r.read));
  weft_error_free(r.read);
  env_close(&e);
}
