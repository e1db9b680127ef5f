/* struct_size of the structs weft writes into: 0 (this release's layout)
 * and sizeof are accepted and weft writes exactly that many bytes (guard
 * bytes after the struct stay as they were); any other size is
 * InvalidArgument and leaves the struct untouched. Each struct has had one
 * layout so far, so no smaller boundary is meaningful yet. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"

#define GUARD      64u
#define GUARD_BYTE 0xA5u

/* A struct of |size| bytes followed by GUARD guard bytes, every byte
 * GUARD_BYTE except the leading struct_size. */
typedef struct guarded {
  _Alignas(16) unsigned char bytes[1024 + GUARD];
  size_t size;
} guarded;

static void guarded_init(guarded *g, size_t size, uint32_t struct_size) {
  cr_assert_leq(size, sizeof(g->bytes) - GUARD);
  memset(g->bytes, GUARD_BYTE, sizeof(g->bytes));
  memcpy(g->bytes, &struct_size, sizeof(struct_size));
  g->size = size;
}

static uint32_t guarded_struct_size(const guarded *g) {
  uint32_t v;
  memcpy(&v, g->bytes, sizeof(v));
  return v;
}

static void expect_guard_intact(const guarded *g, size_t from, const char *what) {
  for (size_t i = from; i < sizeof(g->bytes); i++)
    cr_assert_eq(g->bytes[i], GUARD_BYTE, "%s: byte %zu (past struct_size %zu) was written", what,
                 i, from);
}

/* Every byte after struct_size is still GUARD_BYTE: nothing was written. */
static void expect_untouched(const guarded *g, uint32_t struct_size, const char *what) {
  cr_assert_eq(guarded_struct_size(g), struct_size, "%s: struct_size changed", what);
  expect_guard_intact(g, sizeof(uint32_t), what);
}

/* The call under test, on a device, into |out|. */
typedef weft_status (*getter)(weft_device *dev, void *out);

static weft_status get_stats(weft_device *dev, void *out) {
  return weft_device_stats_get(dev, out);
}
static weft_status get_info(weft_device *dev, void *out) {
  return weft_device_info_get(dev, out);
}
static weft_status get_usage(weft_device *dev, void *out) {
  return weft_memory_usage_get(dev, out);
}
static weft_status get_report(weft_device *dev, void *out) {
  size_t n = 1;
  return weft_memory_report_get(dev, 0, out, &n);
}

typedef struct out_case {
  const char *name;
  getter get;
  size_t size;
} out_case;

static const out_case cases[] = {
    {"weft_device_stats", get_stats, sizeof(weft_device_stats)},
    {"weft_device_info", get_info, sizeof(weft_device_info)},
    {"weft_memory_usage", get_usage, sizeof(weft_memory_usage)},
    {"weft_pool_report", get_report, sizeof(weft_pool_report)},
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* A device with one buffer on stream 0 (so stream 0 has a pool to report). */
static env env_with_buffer(weft_buffer *buf) {
  env e = env_new();
  EXPECT_OK(weft_buffer_create(e.dev, 0, 4096, buf));
  uint8_t one = 1;
  EXPECT_OK(weft_buffer_write(e.dev, 0, *buf, 0, &one, 1));
  EXPECT_OK(weft_sync(e.dev, 0));
  return e;
}

static void close_with_buffer(env *e, weft_buffer buf) {
  EXPECT_OK(weft_buffer_release(e->dev, buf));
  env_close(e);
}

Test(struct_size, zero_means_this_release_and_writes_exactly_sizeof) {
  weft_buffer buf;
  env e = env_with_buffer(&buf);
  for (size_t i = 0; i < NCASES; i++) {
    guarded g;
    guarded_init(&g, cases[i].size, 0);
    EXPECT_OK(cases[i].get(e.dev, g.bytes));
    cr_assert_eq(guarded_struct_size(&g), cases[i].size,
                 "%s: struct_size 0 must come back as the size written", cases[i].name);
    expect_guard_intact(&g, cases[i].size, cases[i].name);
  }
  close_with_buffer(&e, buf);
}

Test(struct_size, sizeof_is_accepted_and_nothing_past_it_is_written) {
  weft_buffer buf;
  env e = env_with_buffer(&buf);
  for (size_t i = 0; i < NCASES; i++) {
    guarded g;
    guarded_init(&g, cases[i].size, (uint32_t)cases[i].size);
    EXPECT_OK(cases[i].get(e.dev, g.bytes));
    cr_assert_eq(guarded_struct_size(&g), cases[i].size, "%s", cases[i].name);
    expect_guard_intact(&g, cases[i].size, cases[i].name);
  }
  close_with_buffer(&e, buf);
}

Test(struct_size, the_fields_are_written_as_before) {
  weft_buffer buf;
  env e = env_with_buffer(&buf);
  weft_device_stats s = {0};
  EXPECT_OK(weft_device_stats_get(e.dev, &s));
  cr_assert_eq(s.buffers_live, 1);
  cr_assert_geq(s.commands, 3);
  weft_device_info info = {0};
  EXPECT_OK(weft_device_info_get(e.dev, &info));
  cr_assert_eq(info.backend, WEFT_BACKEND_HOST);
  cr_assert_str_eq(info.name, "host");
  cr_assert_eq(info.max_streams, e.opts.max_streams);
  weft_memory_usage u = {.struct_size = sizeof(u)};
  EXPECT_OK(weft_memory_usage_get(e.dev, &u));
  cr_assert_eq(u.number_allocs, 1);
  cr_assert_geq(u.bytes_in_use, 4096);
  weft_pool_report r[WEFT_MAX_POOL_REPORTS] = {0};
  size_t n = WEFT_MAX_POOL_REPORTS;
  EXPECT_OK(weft_memory_report_get(e.dev, 0, r, &n));
  cr_assert_gt(n, 0);
  uint64_t allocs = 0, in_use = 0;
  for (size_t i = 0; i < n; i++) {
    cr_assert_eq(r[i].struct_size, sizeof(r[i]), "report %zu carries the size written", i);
    cr_assert_eq(r[i].usage.struct_size, sizeof(r[i].usage), "report %zu's usage", i);
    allocs += r[i].usage.number_allocs;
    in_use += r[i].usage.bytes_in_use;
  }
  cr_assert_eq(allocs, u.number_allocs, "the reports sum to the usage");
  cr_assert_eq(in_use, u.bytes_in_use);
  close_with_buffer(&e, buf);
}

/* Sizes no release of these structs has had: inside a field, one past the
 * end, a uint32_t of garbage (an uninitialised struct). */
static const uint32_t bogus[] = {1, 4, 7, 9, UINT32_MAX, 0xA5A5A5A5u};

Test(struct_size, a_size_the_struct_never_had_is_invalid_argument_and_writes_nothing) {
  weft_buffer buf;
  env e = env_with_buffer(&buf);
  for (size_t i = 0; i < NCASES; i++) {
    const uint32_t sizes[] = {(uint32_t)cases[i].size - 1, (uint32_t)cases[i].size + 1,
                              (uint32_t)cases[i].size + 8, (uint32_t)cases[i].size / 2};
    for (size_t k = 0; k < sizeof(bogus) / sizeof(bogus[0]) + 4; k++) {
      uint32_t size = k < 4 ? sizes[k] : bogus[k - 4];
      guarded g;
      guarded_init(&g, cases[i].size, size);
      weft_status st = cases[i].get(e.dev, g.bytes);
      cr_assert_not_null(st, "%s: struct_size %u was accepted", cases[i].name, size);
      cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "%s: %s", cases[i].name,
                   weft_error_kind_name(weft_error_kind_of(st)));
      cr_assert(strstr(weft_error_message(st), "struct_size") != NULL,
                "%s: the message must name struct_size: %s", cases[i].name, weft_error_message(st));
      cr_assert(strstr(weft_error_message(st), cases[i].name) != NULL,
                "%s: the message must name the struct: %s", cases[i].name, weft_error_message(st));
      weft_error_free(st);
      expect_untouched(&g, size, cases[i].name);
    }
  }
  close_with_buffer(&e, buf);
}

/* An array of reports: the first element's struct_size sets the stride, and
 * the elements past the capacity are never written, not even their
 * struct_size. */
Test(struct_size, a_report_array_is_written_at_the_first_elements_stride_up_to_the_capacity) {
  weft_buffer bufs[3];
  env e = env_new();
  /* Three sizes that go to different pools of the default ladder. */
  const uint64_t sizes[3] = {256, 70000, 3u << 20};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_create(e.dev, 0, sizes[i], &bufs[i]));
  EXPECT_OK(weft_sync(e.dev, 0));
  size_t total = 0;
  EXPECT_OK(weft_memory_report_get(e.dev, 0, NULL, &total));
  cr_assert_geq(total, 2, "the test needs at least two pools, got %zu", total);

  for (uint32_t first = 0; first <= 1; first++) {
    unsigned char bytes[2 * sizeof(weft_pool_report) + GUARD];
    memset(bytes, GUARD_BYTE, sizeof(bytes));
    uint32_t ss = first ? (uint32_t)sizeof(weft_pool_report) : 0;
    memcpy(bytes, &ss, sizeof(ss));
    size_t n = 2;
    EXPECT_OK(weft_memory_report_get(e.dev, 0, (weft_pool_report *)(void *)bytes, &n));
    cr_assert_eq(n, total, "the count of every pool");
    for (size_t i = 0; i < 2; i++) {
      weft_pool_report r;
      memcpy(&r, bytes + i * sizeof(r), sizeof(r));
      cr_assert_eq(r.struct_size, sizeof(r), "element %zu", i);
      cr_assert(r.kind <= WEFT_POOL_PERSISTENT, "element %zu has kind %d", i, (int)r.kind);
    }
    for (size_t i = 2 * sizeof(weft_pool_report); i < sizeof(bytes); i++)
      cr_assert_eq(bytes[i], GUARD_BYTE, "byte %zu past the capacity was written", i);
  }

  /* A bogus first struct_size refuses the whole call: nothing written, *n kept. */
  weft_pool_report r[2];
  memset(r, GUARD_BYTE, sizeof(r));
  r[0].struct_size = 3;
  size_t n = 2;
  weft_status st = weft_memory_report_get(e.dev, 0, r, &n);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  cr_assert_eq(n, 2, "*n is left alone on a refusal");
  const unsigned char *p = (const unsigned char *)r;
  for (size_t i = sizeof(uint32_t); i < sizeof(r); i++)
    cr_assert_eq(p[i], GUARD_BYTE, "byte %zu was written on a refusal", i);

  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, bufs[i]));
  env_close(&e);
}

static weft_status nop_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return NULL;
}

Test(struct_size, taskgraph_node_info_takes_zero_sizeof_and_refuses_others) {
  env e = env_new();
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "nop", nop_kernel, NULL, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  weft_taskgraph *g = NULL;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  const uint32_t one[3] = {1, 1, 1};
  const weft_binding bd = {.buffer = b, .offset = 0, .size = WEFT_WHOLE, .access = WEFT_WRITE};
  uint32_t node = 99;
  EXPECT_OK(weft_taskgraph_add_launch(g, k, one, one, &bd, 1, NULL, 0, &node));

  for (uint32_t ss = 0; ss <= 1; ss++) {
    guarded gd;
    guarded_init(&gd, sizeof(weft_taskgraph_node_info),
                 ss ? (uint32_t)sizeof(weft_taskgraph_node_info) : 0);
    EXPECT_OK(weft_taskgraph_node(g, node, (weft_taskgraph_node_info *)(void *)gd.bytes));
    weft_taskgraph_node_info info;
    memcpy(&info, gd.bytes, sizeof(info));
    cr_assert_eq(info.struct_size, sizeof(info));
    cr_assert_eq(info.kernel.id, k.id);
    cr_assert_eq(info.nbindings, 1);
    cr_assert_eq(info.ndeps, 0);
    expect_guard_intact(&gd, sizeof(info), "weft_taskgraph_node_info");
  }
  for (size_t i = 0; i < sizeof(bogus) / sizeof(bogus[0]); i++) {
    guarded gd;
    guarded_init(&gd, sizeof(weft_taskgraph_node_info), bogus[i]);
    weft_status st = weft_taskgraph_node(g, node, (weft_taskgraph_node_info *)(void *)gd.bytes);
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "struct_size %u", bogus[i]);
    cr_assert(strstr(weft_error_message(st), "weft_taskgraph_node_info.struct_size") != NULL, "%s",
              weft_error_message(st));
    weft_error_free(st);
    expect_untouched(&gd, bogus[i], "weft_taskgraph_node_info");
  }
  weft_taskgraph_destroy(g);
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
}
