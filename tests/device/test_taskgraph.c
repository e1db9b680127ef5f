/* Task graphs: dependencies derived from bindings (every hazard kind, partial
 * and disjoint byte ranges), lanes that keep independent chains apart, graph
 * results equal to eager launches, repeated submission, failures that skip
 * exactly a failing node's dependents, introspection and DOT, bad input. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"
#include "support/device_env.h"
#include "support/uint_kernels.h"

static uint32_t add_node(weft_taskgraph *g, weft_kernel k, const weft_binding *b, size_t nb,
                         uint32_t value) {
  args a = {value, 0};
  uint32_t id = UINT32_MAX;
  EXPECT_OK(weft_taskgraph_add_launch(g, k, one, one, b, nb, &a, sizeof(a), &id));
  return id;
}

static bool has_edge(const weft_taskgraph *g, uint32_t from, uint32_t to) {
  for (size_t i = 0; i < weft_taskgraph_edge_count(g); i++) {
    uint32_t f, t;
    EXPECT_OK(weft_taskgraph_edge(g, i, &f, &t));
    if (f == from && t == to) return true;
  }
  return false;
}

static weft_binding bd(weft_buffer b, uint64_t off, uint64_t size, weft_access a) {
  return (weft_binding){b, off, size, a};
}

Test(dependencies, every_hazard_kind_makes_an_edge_and_two_readers_do_not, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 0), z = make_buffer(e.dev, 0);
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_binding w_x = bd(x, 0, WEFT_WHOLE, WEFT_WRITE);
  uint32_t n0 = add_node(g, k.set, &w_x, 1, 1); /* writes x */
  weft_binding r_x_w_y[2] = {bd(x, 0, WEFT_WHOLE, WEFT_READ), bd(y, 0, WEFT_WHOLE, WEFT_WRITE)};
  uint32_t n1 = add_node(g, k.add, r_x_w_y, 2, 1); /* RAW on x */
  weft_binding r_x_w_z[2] = {bd(x, 0, WEFT_WHOLE, WEFT_READ), bd(z, 0, WEFT_WHOLE, WEFT_WRITE)};
  uint32_t n2 = add_node(g, k.add, r_x_w_z, 2, 2); /* RAW on x */
  uint32_t n3 = add_node(g, k.set, &w_x, 1, 9);    /* WAR after n1, n2; WAW after n0 */
  weft_binding w_y = bd(y, 0, WEFT_WHOLE, WEFT_WRITE);
  uint32_t n4 = add_node(g, k.set, &w_y, 1, 5); /* WAW on y after n1 */
  cr_assert(has_edge(g, n0, n1), "read-after-write");
  cr_assert(has_edge(g, n0, n2), "read-after-write");
  cr_assert(!has_edge(g, n1, n2), "two readers of x are independent");
  cr_assert(has_edge(g, n1, n3) && has_edge(g, n2, n3), "write-after-read");
  cr_assert(has_edge(g, n0, n3), "write-after-write");
  cr_assert(has_edge(g, n1, n4), "write-after-write on y");
  cr_assert(!has_edge(g, n0, n4) && !has_edge(g, n2, n4), "n4 shares nothing else");
  cr_assert_eq(weft_taskgraph_edge_count(g), 6);
  weft_taskgraph_node_info info = {0};
  EXPECT_OK(weft_taskgraph_node(g, n3, &info));
  cr_assert_eq(info.ndeps, 3);
  cr_assert_eq(info.nbindings, 1);
  cr_assert_eq(info.kernel.id, k.set.id);
  weft_taskgraph_destroy(g);
  weft_buffer all[3] = {x, y, z};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(dependencies, byte_ranges_decide_partial_overlaps_and_disjoint_halves, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0); /* 256 bytes */
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_binding lo = bd(x, 0, 128, WEFT_WRITE), hi = bd(x, 128, 128, WEFT_WRITE);
  weft_binding mid = bd(x, 120, 16, WEFT_READ), edge = bd(x, 127, 1, WEFT_READ);
  weft_binding whole = bd(x, 0, WEFT_WHOLE, WEFT_READ);
  uint32_t a = add_node(g, k.set, &lo, 1, 1);
  uint32_t b = add_node(g, k.set, &hi, 1, 2);
  uint32_t c = add_node(g, k.set, &mid, 1, 3); /* reads [120, 136): both halves */
  uint32_t d = add_node(g, k.set, &edge, 1, 4);
  uint32_t w = add_node(g, k.set, &whole, 1, 5);
  cr_assert(!has_edge(g, a, b), "disjoint halves of one buffer are independent");
  cr_assert(has_edge(g, a, c) && has_edge(g, b, c), "a partial overlap with each half");
  cr_assert(has_edge(g, a, d) && !has_edge(g, b, d), "byte 127 belongs to the low half only");
  cr_assert(has_edge(g, a, w) && has_edge(g, b, w));
  cr_assert(!has_edge(g, c, d) && !has_edge(g, c, w), "readers never depend on readers");
  weft_taskgraph_destroy(g);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

Test(lanes, independent_chains_get_their_own_lanes_and_a_chain_keeps_one, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_streams = 4;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer a = make_buffer(e.dev, 0), b = make_buffer(e.dev, 0), c = make_buffer(e.dev, 0);
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_binding wa = bd(a, 0, WEFT_WHOLE, WEFT_READ_WRITE),
               wb = bd(b, 0, WEFT_WHOLE, WEFT_READ_WRITE);
  uint32_t chain_a[3], chain_b[3];
  for (int i = 0; i < 3; i++) { /* two chains, interleaved in the program */
    chain_a[i] = add_node(g, k.inc, &wa, 1, 1);
    chain_b[i] = add_node(g, k.inc, &wb, 1, 1);
  }
  weft_binding join[3] = {bd(a, 0, WEFT_WHOLE, WEFT_READ), bd(b, 0, WEFT_WHOLE, WEFT_READ),
                          bd(c, 0, WEFT_WHOLE, WEFT_WRITE)};
  uint32_t j = add_node(g, k.sum, join, 3, 0);
  weft_taskgraph_node_info ia = {0}, ib = {0}, ij = {0};
  EXPECT_OK(weft_taskgraph_node(g, chain_a[0], &ia));
  EXPECT_OK(weft_taskgraph_node(g, chain_b[0], &ib));
  cr_assert_neq(ia.lane, ib.lane, "independent chains on different lanes");
  for (int i = 1; i < 3; i++) {
    weft_taskgraph_node_info x = {0};
    EXPECT_OK(weft_taskgraph_node(g, chain_a[i], &x));
    cr_assert_eq(x.lane, ia.lane, "a chain stays on its lane");
    EXPECT_OK(weft_taskgraph_node(g, chain_b[i], &x));
    cr_assert_eq(x.lane, ib.lane);
  }
  EXPECT_OK(weft_taskgraph_node(g, j, &ij));
  cr_assert_eq(ij.lane, ia.lane, "a join continues its first predecessor's lane");
  cr_assert_eq(weft_taskgraph_lane_count(g), 2);
  /* More independent nodes than streams: lanes are reused, never more than 4. */
  weft_buffer extra[6];
  for (int i = 0; i < 6; i++) {
    extra[i] = make_buffer(e.dev, 0);
    weft_binding w = bd(extra[i], 0, WEFT_WHOLE, WEFT_WRITE);
    add_node(g, k.set, &w, 1, (uint32_t)i);
  }
  cr_assert_eq(weft_taskgraph_lane_count(g), 4);
  for (size_t i = 0; i < weft_taskgraph_node_count(g); i++) {
    weft_taskgraph_node_info x = {0};
    EXPECT_OK(weft_taskgraph_node(g, (uint32_t)i, &x));
    cr_assert_lt(x.lane, 4);
  }
  /* Submitted at base 10: the chains run, on streams 10 and 11. */
  set(e.dev, &k, 0, a, 0, 0);
  set(e.dev, &k, 0, b, 100, 0);
  EXPECT_OK(weft_taskgraph_submit(g, 10));
  expect_all(e.dev, 0, c, 3 + 103, "the join");
  weft_taskgraph_destroy(g);
  for (int i = 0; i < 6; i++) EXPECT_OK(weft_buffer_release(e.dev, extra[i]));
  weft_buffer all[3] = {a, b, c};
  for (int i = 0; i < 3; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

/* A seeded random DAG over NB buffers, built as a graph and run eagerly on a
 * second device: the same values, submission after submission. */
enum { NB = 10, NODES = 120 };

static uint64_t rng(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct op {
  int kind, x, y, z;
  uint32_t v;
} op;

static void program(op *ops, uint64_t seed) {
  for (int i = 0; i < NODES; i++) {
    uint64_t r = rng(&seed);
    op o = {(int)(r % 4), (int)((r >> 8) % NB), (int)((r >> 16) % NB), (int)((r >> 24) % NB),
            (uint32_t)(r >> 40) % 1000};
    if (o.y == o.x) o.y = (o.x + 1) % NB;
    if (o.z == o.x || o.z == o.y) o.z = (o.y + 1) % NB == o.x ? (o.y + 2) % NB : (o.y + 1) % NB;
    ops[i] = o;
  }
}

static void emit(weft_device *dev, weft_taskgraph *g, const kernels *k, weft_buffer *b, const op *o,
                 weft_stream_id s) {
  args a = {o->v, 0};
  weft_binding x[3];
  weft_kernel kern;
  size_t n;
  switch (o->kind) {
  case 0:
    kern = k->set, n = 1, x[0] = bd(b[o->x], 0, WEFT_WHOLE, WEFT_WRITE);
    break;
  case 1:
    kern = k->add, n = 2, x[0] = bd(b[o->x], 0, WEFT_WHOLE, WEFT_READ),
    x[1] = bd(b[o->y], 0, WEFT_WHOLE, WEFT_WRITE);
    break;
  case 2:
    kern = k->sum, n = 3, x[0] = bd(b[o->x], 0, WEFT_WHOLE, WEFT_READ),
    x[1] = bd(b[o->y], 0, WEFT_WHOLE, WEFT_READ), x[2] = bd(b[o->z], 0, WEFT_WHOLE, WEFT_WRITE);
    break;
  default:
    kern = k->inc, n = 1, x[0] = bd(b[o->x], 0, WEFT_WHOLE, WEFT_READ_WRITE);
    break;
  }
  if (g)
    EXPECT_OK(weft_taskgraph_add_launch(g, kern, one, one, x, n, &a, sizeof(a), NULL));
  else
    EXPECT_OK(weft_launch(dev, s, kern, one, one, x, n, &a, sizeof(a)));
}

static void read_all(weft_device *dev, weft_buffer *b, uint32_t *out) {
  for (int i = 0; i < NB; i++) {
    uint32_t got[ELEMS];
    EXPECT_OK(weft_buffer_read(dev, 0, b[i], 0, got, BYTES));
    out[i] = got[0];
  }
}

Test(results, a_graph_gives_what_eager_launches_give_every_time_it_runs, .timeout = 120) {
  for (uint64_t seed = 1; seed <= 4; seed++) {
    static op ops[NODES];
    program(ops, seed);
    env e = env_new(), f = env_new();
    kernels ke = make_kernels(e.dev), kf = make_kernels(f.dev);
    weft_buffer be[NB], bf[NB];
    for (int i = 0; i < NB; i++) {
      be[i] = make_buffer(e.dev, 0);
      bf[i] = make_buffer(f.dev, 0);
      set(e.dev, &ke, 0, be[i], (uint32_t)i, 0);
      set(f.dev, &kf, 0, bf[i], (uint32_t)i, 0);
    }
    weft_taskgraph *g;
    EXPECT_OK(weft_taskgraph_create(e.dev, &g));
    for (int i = 0; i < NODES; i++) emit(e.dev, g, &ke, be, &ops[i], 0);
    cr_assert_gt(weft_taskgraph_lane_count(g), 1, "a random DAG has parallel chains");
    for (int run = 0; run < 3; run++) {
      EXPECT_OK(weft_taskgraph_submit(g, (weft_stream_id)run));
      for (int i = 0; i < NODES; i++) emit(f.dev, NULL, &kf, bf, &ops[i], (weft_stream_id)(i % 3));
      uint32_t ve[NB], vf[NB];
      read_all(e.dev, be, ve);
      read_all(f.dev, bf, vf);
      cr_assert_arr_eq(ve, vf, sizeof(ve), "seed %" PRIu64 ", run %d", seed, run);
    }
    weft_taskgraph_destroy(g);
    for (int i = 0; i < NB; i++) {
      EXPECT_OK(weft_buffer_release(e.dev, be[i]));
      EXPECT_OK(weft_buffer_release(f.dev, bf[i]));
    }
    env_close(&e);
    env_close(&f);
  }
}

static weft_status k_fail(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return weft_error_make(WEFT_ERR_VALIDATION, "graph node failed on purpose");
}

Test(failures, a_failing_node_skips_exactly_its_dependents, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_kernel kfail;
  EXPECT_OK(weft_kernel_host(e.dev, "fails", k_fail, NULL, &kfail));
  weft_buffer a = make_buffer(e.dev, 0), b = make_buffer(e.dev, 0), c = make_buffer(e.dev, 0),
              d = make_buffer(e.dev, 0);
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_binding wa = bd(a, 0, WEFT_WHOLE, WEFT_WRITE), wc = bd(c, 0, WEFT_WHOLE, WEFT_WRITE);
  add_node(g, kfail, &wa, 1, 0); /* fails: a unwritten */
  weft_binding ab[2] = {bd(a, 0, WEFT_WHOLE, WEFT_READ), bd(b, 0, WEFT_WHOLE, WEFT_WRITE)};
  add_node(g, k.add, ab, 2, 1);  /* skipped */
  add_node(g, k.set, &wc, 1, 7); /* independent branch */
  weft_binding cd[2] = {bd(c, 0, WEFT_WHOLE, WEFT_READ), bd(d, 0, WEFT_WHOLE, WEFT_WRITE)};
  add_node(g, k.add, cd, 2, 1);
  EXPECT_OK(weft_taskgraph_submit(g, 0));
  expect_all(e.dev, 1, d, 8, "the independent branch completes");
  uint32_t got[ELEMS];
  weft_status st = weft_buffer_read(e.dev, 0, b, 0, got, BYTES);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN);
  cr_assert_eq(weft_error_kind_of(weft_error_root(u)), WEFT_ERR_VALIDATION);
  cr_assert_eq(weft_error_chain_length(u), 1, "skipped 'add'; 'fails' is the origin");
  cr_assert_not_null(strstr(weft_error_chain_at(u, 0), "skipped kernel 'add'"));
  cr_assert_not_null(weft_error_origin(u));
  cr_assert_not_null(strstr(weft_error_origin(u), "kernel 'fails'"), "%s", weft_error_origin(u));
  weft_error_free(st);
  weft_device_stats s = stats_of(e.dev);
  cr_assert_eq(s.launches_failed, 1);
  cr_assert_eq(s.launches_skipped, 1);
  weft_taskgraph_destroy(g);
  weft_buffer all[4] = {a, b, c, d};
  for (int i = 0; i < 4; i++) EXPECT_OK(weft_buffer_release(e.dev, all[i]));
  env_close(&e);
}

Test(introspection, dot_names_every_node_and_edge, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_kernel q;
  EXPECT_OK(weft_kernel_host(e.dev, "say \"hi\"", k_set, NULL, &q));
  weft_buffer x = make_buffer(e.dev, 0);
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_binding w = bd(x, 0, WEFT_WHOLE, WEFT_WRITE), r = bd(x, 0, WEFT_WHOLE, WEFT_READ_WRITE);
  add_node(g, q, &w, 1, 1);
  add_node(g, k.inc, &r, 1, 1);
  char *dot = NULL;
  EXPECT_OK(weft_taskgraph_to_dot(g, &dot));
  cr_assert_not_null(strstr(dot, "digraph weft {"));
  cr_assert_not_null(strstr(dot, "n0 [label=\"0: say \\\"hi\\\"\\nlane 0\""), "%s", dot);
  cr_assert_not_null(strstr(dot, "n1 [label=\"1: inc\\nlane 0\""), "%s", dot);
  cr_assert_not_null(strstr(dot, "n0 -> n1;"), "%s", dot);
  weft_free(dot);
  weft_taskgraph_destroy(g);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

Test(bad_input, every_call_refuses_bad_arguments_and_a_stale_buffer_queues_nothing, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_taskgraph *g = (void *)&e;
  weft_status st = weft_taskgraph_create(NULL, &g);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  cr_assert_null(g, "*out is reset on failure");
  st = weft_taskgraph_create(e.dev, NULL);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_buffer x = make_buffer(e.dev, 0), y = make_buffer(e.dev, 0);
  weft_binding w = bd(x, 0, WEFT_WHOLE, WEFT_WRITE);
  args a = {1, 0};
  st = weft_taskgraph_add_launch(NULL, k.set, one, one, &w, 1, &a, sizeof(a), NULL);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  weft_binding past = bd(x, BYTES, 1, WEFT_WRITE);
  st = weft_taskgraph_add_launch(g, k.set, one, one, &past, 1, &a, sizeof(a), NULL);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT, "a binding past the end");
  weft_error_free(st);
  st = weft_taskgraph_add_launch(g, (weft_kernel){12345}, one, one, &w, 1, &a, sizeof(a), NULL);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_NOT_FOUND, "an unknown kernel");
  weft_error_free(st);
  cr_assert_eq(weft_taskgraph_node_count(g), 0, "refused nodes leave the graph unchanged");
  weft_taskgraph_node_info info = {0};
  st = weft_taskgraph_node(g, 0, &info);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  uint32_t f, t;
  st = weft_taskgraph_edge(g, 0, &f, &t);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  EXPECT_OK(weft_taskgraph_submit(g, 0)); /* empty: nothing to do */
  /* A graph whose second node names a buffer released since: NotFound, and
   * not even its first node runs. */
  set(e.dev, &k, 0, y, 5, 0);
  weft_binding wy = bd(y, 0, WEFT_WHOLE, WEFT_WRITE);
  add_node(g, k.set, &wy, 1, 42);
  add_node(g, k.set, &w, 1, 43);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  st = weft_taskgraph_submit(g, 0);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_NOT_FOUND);
  weft_error_free(st);
  expect_all(e.dev, 0, y, 5, "nothing of the graph was queued");
  st = weft_taskgraph_submit(NULL, 0);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  char *dot;
  st = weft_taskgraph_to_dot(NULL, &dot);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
  cr_assert_eq(weft_taskgraph_node_count(NULL), 0);
  weft_taskgraph_destroy(NULL);
  weft_taskgraph_destroy(g);
  EXPECT_OK(weft_buffer_release(e.dev, y));
  env_close(&e);
}

Test(results, a_graph_larger_than_the_back_pressure_limit_is_submitted_in_order, .timeout = 60) {
  env e;
  env_options(&e);
  e.opts.max_pending_commands = 16;
  env_open(&e);
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  weft_taskgraph *g;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  weft_binding r = bd(x, 0, WEFT_WHOLE, WEFT_READ_WRITE);
  for (int i = 0; i < 500; i++) add_node(g, k.inc, &r, 1, 1);
  EXPECT_OK(weft_taskgraph_submit(g, 0));
  EXPECT_OK(weft_taskgraph_submit(g, 0));
  expect_all(e.dev, 0, x, 1000, "1000 increments");
  weft_taskgraph_destroy(g);
  EXPECT_OK(weft_buffer_release(e.dev, x));
  env_close(&e);
}

Test(lifetime, destroy_after_close_frees_only_the_graph, .timeout = 60) {
  env e = env_new();
  kernels k = make_kernels(e.dev);
  weft_buffer x = make_buffer(e.dev, 0);
  set(e.dev, &k, 0, x, 0, 0);
  weft_taskgraph *g, *kept;
  EXPECT_OK(weft_taskgraph_create(e.dev, &g));
  EXPECT_OK(weft_taskgraph_create(e.dev, &kept));
  weft_binding r = bd(x, 0, WEFT_WHOLE, WEFT_READ_WRITE);
  for (int i = 0; i < 8; i++) add_node(g, k.inc, &r, 1, 1), add_node(kept, k.inc, &r, 1, 1);
  EXPECT_OK(weft_taskgraph_submit(g, 0));
  weft_taskgraph_destroy(g); /* before close: the graph goes, the device runs on */
  expect_all(e.dev, 0, x, 8, "the submitted graph ran");
  weft_device *dev = e.dev;
  e.dev = NULL;
  weft_device_close(dev); /* frees what the device owns, x included */
  weft_alloc_counts c = weft_counting_allocator_counts(e.ca);
  cr_assert_gt(c.live_blocks, 0, "the graph is the caller's: close leaves it");
  weft_taskgraph_destroy(kept); /* after close: frees the graph, touches no device */
  env_close(&e);                /* nothing left */
}
