/* The 23 invariants of failure handling, each its own test, exercised through
 * the failure-store surface (weft_failures_*) over targets backed by taints
 * this file owns: a taint stands for the allocation a binding resolves to
 * (in whichever stream's memory it lives), NULL for one whose stream never
 * started, and the memory ids are chosen here. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "core/error.h"
#include "core/error_graph.h"
#include "core/taint.h"
#include "fs_test_util.h"
#include "core/failures.h"

TestSuite(invariant, .timeout = 30);

/* ---- environment: a store and six allocations ------------------------------------------- */

enum { NT = 6 };
#define MA 101 /* memory ids of the six allocations */
#define MB 102
#define MC 103
#define MD 104
#define ME 105
#define MF 106

typedef struct inv {
  fs_env e;
  weft_failures fs;
  weft_taint t[NT];
  weft_taint *all[NT];
} inv;

static void inv_open(inv *v) {
  memset(v, 0, sizeof *v);
  fs_open(&v->e);
  weft_failures_init(&v->fs, &v->e.a);
  for (int i = 0; i < NT; i++) v->all[i] = &v->t[i];
}

/* Invariant 1 over the six allocations (|p|: an open scope's provisional). */
static void inv_check(inv *v, weft_failure_id p) {
  fs_check_refcounts(&v->fs.graph, v->all, NT, p);
}

/* Frees every allocation (shedding its claims): the graph must be empty. */
static void inv_close(inv *v) {
  inv_check(v, 0);
  for (int i = 0; i < NT; i++) weft_taint_clear(&v->t[i], &v->e.a, &v->fs.graph);
  while (v->fs.graph.unallocated_len)
    weft_graph_forget_unallocated(&v->fs.graph, v->fs.graph.unallocated[0].memory);
  cr_assert_eq(weft_graph_len(&v->fs.graph), 0, "%" PRIu64 " nodes outlived their carriers",
               weft_graph_len(&v->fs.graph));
  weft_failures_destroy(&v->fs);
  fs_close(&v->e);
}

#define TA(s, e) T(&v.t[0], MA, (s), (e))
#define TB(s, e) T(&v.t[1], MB, (s), (e))
#define TC(s, e) T(&v.t[2], MC, (s), (e))
#define TD(s, e) T(&v.t[3], MD, (s), (e))
#define TE(s, e) T(&v.t[4], ME, (s), (e))
#define TF(s, e) T(&v.t[5], MF, (s), (e))
#define N(arr)   (sizeof(arr) / sizeof((arr)[0]))

static weft_failure_id carried(const weft_target *t) {
  return t->taint ? weft_taint_failure(t->taint, t->range) : 0;
}

/* ensure_written on one target: Ok, or Several{one Unwritten #f}. */
static void expect_reads_as(weft_failures *fs, weft_target t, weft_failure_id f,
                            weft_error_kind root) {
  weft_status st = weft_failures_ensure_written(fs, &t, 1);
  if (!f) {
    char buf[1024] = "";
    cr_assert_null(st, "memory %" PRIu64 " reads Ok, got %s", t.memory,
                   st ? fmt(st, buf, sizeof buf) : "");
    return;
  }
  EXPECT_SEVERAL(st, 1);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_failure_id(u), f, "memory %" PRIu64 ": #%" PRIu64 ", expected #%" PRIu64,
               t.memory, weft_error_failure_id(u), f);
  cr_assert_eq(weft_error_kind_of(weft_error_root(u)), root, "root of #%" PRIu64 " is %s", f,
               weft_error_kind_name(weft_error_kind_of(weft_error_root(u))));
  weft_error_free(st);
}

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* ---- 1-2: the refcount ------------------------------------------------------------------ */

Test(invariant, i01_refcount_exactness) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target ab[] = {TA(0, 100), TB(0, 100)};
  weft_failures_taint(fs, boom("e1"), ab, 2);
  weft_failure_id f1 = carried(&ab[0]);
  cr_assert_eq(fs_tagged(&fs->graph, f1), 2);
  inv_check(&v, 0);

  /* Between enter and exit the provisional is counted like any failure. */
  weft_target bc[] = {TB(50, 150), TC(0, 10)};
  weft_failure_id p = weft_failures_enter_write(fs, 0, bc, 2);
  cr_assert_eq(fs_tagged(&fs->graph, p), 2);
  cr_assert_eq(fs_tagged(&fs->graph, f1), 2, "B still carries f1 on [0,50)");
  inv_check(&v, p);
  weft_failures_exit_write(fs, p, bc, 2, weft_error_make(WEFT_ERR_VALIDATION, "v"));
  inv_check(&v, 0);

  /* A skip adds the outputs to the root's carriers. */
  weft_read_failure found;
  weft_target rc = TC(0, 10);
  cr_assert(weft_failures_read_failure(fs, &rc, 1, &found));
  weft_target d = TD(0, 64);
  weft_failures_propagate(fs, &found, 1, 1, &d, 1);
  cr_assert_eq(fs_tagged(&fs->graph, p), 3);
  inv_check(&v, 0);

  /* An unallocated record is a carrier; so are the outputs of a skip on it. */
  weft_failures_fail_unallocated(fs, 900, boom("no room"));
  inv_check(&v, 0);
  weft_target un = UNALLOC(900), te = TE(0, 8);
  cr_assert(weft_failures_read_failure(fs, &un, 1, &found));
  weft_failures_propagate(fs, &found, 2, 2, &te, 1);
  cr_assert_eq(fs_tagged(&fs->graph, found.failure), 2);
  inv_check(&v, 0);

  /* A provisional tainting nothing: untagged only inside its scope. */
  weft_target unheld = T(NULL, 555, 0, 64);
  weft_failure_id q = weft_failures_enter_write(fs, 0, &unheld, 1);
  cr_assert_neq(q, 0);
  cr_assert_eq(fs_tagged(&fs->graph, q), 0);
  inv_check(&v, q);
  weft_failures_exit_write(fs, q, &unheld, 1, NULL);
  cr_assert_null(weft_graph_node_of(&fs->graph, q));
  inv_check(&v, 0);

  /* Random traffic over the surface: exact after every operation. */
  uint64_t s = 0x2545f4914f6cdd1du;
  for (int step = 0; step < 3000; step++) {
    weft_target w[3];
    size_t n = 1 + rng_next(&s) % 3;
    for (size_t i = 0; i < n; i++) {
      uint64_t k = rng_next(&s) % NT, a = rng_next(&s) % 128, len = rng_next(&s) % 64;
      w[i] = T(&v.t[k], MA + k, a, a + len);
      if (rng_next(&s) % 16 == 0) w[i].taint = NULL; /* a stream never started */
    }
    switch (rng_next(&s) % 6) {
    case 0:
      weft_failures_taint(fs, boom("t"), w, n);
      break;
    case 1:
      weft_failures_written(fs, w, n);
      break;
    case 2: {
      weft_failure_id pp = weft_failures_enter_write(fs, 0, w, n);
      inv_check(&v, pp);
      weft_failures_exit_write(fs, pp, w, n, rng_next(&s) % 2 ? NULL : boom("x"));
      break;
    }
    case 3: {
      uint64_t k = rng_next(&s) % NT;
      weft_target r = T(&v.t[k], MA + k, 0, 128);
      if (weft_failures_read_failure(fs, &r, 1, &found))
        weft_failures_propagate(fs, &found, 3, (uint64_t)step, w, n);
      break;
    }
    case 4:
      weft_taint_clear(&v.t[rng_next(&s) % NT], &v.e.a, &fs->graph);
      break;
    default: {
      weft_status st = weft_failures_ensure_written(fs, w, n);
      weft_error_free(st);
      break;
    }
    }
    inv_check(&v, 0);
  }
  inv_close(&v);
}

Test(invariant, i02_bounded_graph) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target a = TA(0, 64), b = TB(0, 64), c = TC(0, 64), d = TD(0, 64);
  weft_failures_taint(fs, boom("e1"), &a, 1);
  weft_failures_taint(fs, boom("e2"), &b, 1);
  weft_failures_taint(fs, boom("e3"), &c, 1);
  weft_read_failure found;
  cr_assert(weft_failures_read_failure(fs, &a, 1, &found));
  weft_failures_propagate(fs, &found, 0, 1, &d, 1);
  cr_assert_eq(weft_graph_len(&fs->graph), 3, "three distinct failures claimed");
  weft_status st = weft_failures_ensure_written(fs, (weft_target[]){a, b, c, d}, 4);
  weft_error_free(st);
  cr_assert_eq(weft_graph_len(&fs->graph), 3, "reading changes nothing");

  /* Rewriting every tainted buffer returns it to 0. */
  weft_failures_written(fs, (weft_target[]){a, b, c, d}, 4);
  cr_assert_eq(weft_graph_len(&fs->graph), 0);

  /* A loop failing identically each iteration keeps len constant. */
  for (int i = 0; i < 1000; i++) {
    weft_failure_id p = weft_failures_enter_write(fs, 0, &a, 1);
    weft_failures_exit_write(fs, p, &a, 1, boom("every time"));
    cr_assert_eq(weft_graph_len(&fs->graph), 1, "iteration %d", i);
  }
  /* A loop carrying a tainted buffer forward: skips, len constant. */
  for (int i = 0; i < 1000; i++) {
    weft_target r = i % 2 ? b : a, w = i % 2 ? a : b;
    if (weft_failures_read_failure(fs, &r, 1, &found))
      weft_failures_propagate(fs, &found, 1, (uint64_t)i, &w, 1);
    cr_assert_eq(weft_graph_len(&fs->graph), 1, "iteration %d", i);
  }
  inv_check(&v, 0);

  /* Dropping every tainted buffer returns it to 0. */
  weft_taint_clear(&v.t[0], &v.e.a, &fs->graph);
  weft_taint_clear(&v.t[1], &v.e.a, &fs->graph);
  cr_assert_eq(weft_graph_len(&fs->graph), 0);
  inv_close(&v);
}

/* ---- 3: ids -------------------------------------------------------------------------------- */

Test(invariant, i03_ids_are_non_zero_increasing_never_reused) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_failure_id last = 0;
  weft_target a = TA(0, 64), b = TB(0, 64);
  for (int i = 0; i < 300; i++) {
    weft_failure_id p = weft_failures_enter_write(fs, 0, &a, 1);
    cr_assert_neq(p, 0);
    cr_assert_gt(p, last, "#%" PRIu64 " after #%" PRIu64, p, last);
    last = p;
    weft_failures_exit_write(fs, p, &a, 1, i % 3 ? NULL : boom("f"));
    if (i % 5 == 0) { /* a failure from taint() draws from the same ids */
      weft_failures_taint(fs, boom("t"), &b, 1);
      weft_failure_id t = carried(&b);
      cr_assert_gt(t, last);
      last = t;
    }
  }
  cr_assert_eq(last, fs->graph.minted, "every id was minted once, in order");

  /* A pre-minted id is taken as given. */
  weft_status err = NULL;
  weft_failure_id pre = weft_graph_mint(&fs->graph, &err);
  cr_assert_gt(pre, last);
  cr_assert_eq(weft_failures_enter_write(fs, pre, &a, 1), pre);
  weft_failures_exit_write(fs, pre, &a, 1, NULL);

  /* Overflow is an error, never a wrap to a used id. */
  fs->graph.minted = UINT64_MAX - 2;
  weft_failure_id p = weft_failures_enter_write(fs, 0, &a, 1);
  cr_assert_eq(p, UINT64_MAX - 1, "the last id");
  weft_failures_exit_write(fs, p, &a, 1, NULL);
  cr_assert_eq(weft_graph_mint(&fs->graph, &err), 0);
  cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_GENERIC);
  EXPECT_CONTAINS(err, "exhausted");
  weft_error_free(err);
  cr_assert_eq(weft_failures_enter_write(fs, 0, &a, 1), 0, "no id is handed out past the last");
  cr_assert_eq(fs->graph.minted, UINT64_MAX - 1);
  inv_close(&v);
}

/* ---- 4-7: write scopes -------------------------------------------------------------------- */

Test(invariant, i04_successful_scope) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  /* Over clean buffers: len unchanged, the provisional gone. */
  weft_target w[] = {TA(0, 64), TB(0, 64)};
  uint64_t len = weft_graph_len(&fs->graph);
  weft_failure_id p = weft_failures_enter_write(fs, 0, w, 2);
  cr_assert_eq(weft_graph_len(&fs->graph), len + 1);
  weft_failures_exit_write(fs, p, w, 2, NULL);
  cr_assert_eq(weft_graph_len(&fs->graph), len);
  cr_assert_null(weft_graph_node_of(&fs->graph, p));
  expect_reads_as(fs, w[0], 0, WEFT_OK);

  /* An older failure also carried elsewhere: released here, kept there. */
  weft_target ac[] = {TA(0, 64), TC(0, 64)};
  weft_failures_taint(fs, boom("old"), ac, 2);
  weft_failure_id old = carried(&ac[0]);
  len = weft_graph_len(&fs->graph);
  p = weft_failures_enter_write(fs, 0, w, 2);
  weft_failures_exit_write(fs, p, w, 2, NULL);
  cr_assert_eq(weft_graph_len(&fs->graph), len);
  cr_assert_eq(fs_tagged(&fs->graph, old), 1, "untagged by the scope's allocation only");
  expect_reads_as(fs, w[0], 0, WEFT_OK);
  expect_reads_as(fs, ac[1], old, WEFT_ERR_GENERIC);
  inv_check(&v, 0);

  /* The last claim of an older failure: released and removed. */
  weft_target c = TC(0, 64);
  p = weft_failures_enter_write(fs, 0, &c, 1);
  weft_failures_exit_write(fs, p, &c, 1, NULL);
  cr_assert_null(weft_graph_node_of(&fs->graph, old));
  cr_assert_eq(weft_graph_len(&fs->graph), 0);

  /* Only the written range is cleaned. */
  weft_target whole = TD(0, 100), part = TD(20, 40);
  weft_failures_taint(fs, boom("old"), &whole, 1);
  old = carried(&whole);
  p = weft_failures_enter_write(fs, 0, &part, 1);
  weft_failures_exit_write(fs, p, &part, 1, NULL);
  expect_reads_as(fs, part, 0, WEFT_OK);
  expect_reads_as(fs, TD(0, 20), old, WEFT_ERR_GENERIC);
  expect_reads_as(fs, TD(40, 100), old, WEFT_ERR_GENERIC);
  inv_close(&v);
}

Test(invariant, i05_failed_scope) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target a = TA(0, 100);
  weft_failures_taint(fs, boom("old"), &a, 1);
  weft_failure_id old = carried(&a);

  weft_target w[] = {TA(0, 100), TB(0, 50)};
  weft_failure_id p = weft_failures_enter_write(fs, 0, w, 2);
  weft_failures_exit_write(fs, p, w, 2, weft_error_make(WEFT_ERR_VALIDATION, "grid too big"));
  cr_assert_eq(carried(&w[0]), p, "the written ranges carry exactly the provisional id");
  cr_assert_eq(carried(&w[1]), p);
  cr_assert_eq(weft_taint_claims(&v.t[0]), 1, "the older claim was displaced");
  cr_assert_null(weft_graph_node_of(&fs->graph, old));
  weft_status err = weft_graph_error(&fs->graph, p);
  cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_VALIDATION, "error(id) is the real error");
  cr_assert_str_eq(weft_error_message(err), "grid too big");

  weft_status st = weft_failures_ensure_written(fs, w, 2);
  EXPECT_SEVERAL(st, 1);
  expect_unwritten(weft_error_at(st, 0), p, 2, WEFT_ERR_VALIDATION, "grid too big");
  weft_error_free(st);
  inv_check(&v, 0);

  /* A scope over part of an older claim displaces only those bytes. */
  weft_target c = TC(0, 100), half = TC(0, 50);
  weft_failures_taint(fs, boom("older"), &c, 1);
  old = carried(&c);
  p = weft_failures_enter_write(fs, 0, &half, 1);
  weft_failures_exit_write(fs, p, &half, 1, boom("half"));
  expect_reads_as(fs, half, p, WEFT_ERR_GENERIC);
  expect_reads_as(fs, TC(50, 100), old, WEFT_ERR_GENERIC);
  cr_assert_str_eq(weft_error_message(weft_graph_error(&fs->graph, old)), "older");
  inv_close(&v);
}

Test(invariant, i06_torn_scope) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  /* The body returned early: exit_write never ran. */
  weft_target w[] = {TA(0, 64), TB(8, 16)};
  weft_failure_id p = weft_failures_enter_write(fs, 0, w, 2);
  cr_assert_eq(carried(&w[0]), p);
  cr_assert_eq(carried(&w[1]), p);
  cr_assert_eq(weft_error_kind_of(weft_graph_error(&fs->graph, p)), WEFT_ERR_TORN_DOWN);
  expect_reads_as(fs, w[0], p, WEFT_ERR_TORN_DOWN);
  expect_reads_as(fs, w[1], p, WEFT_ERR_TORN_DOWN);
  expect_reads_as(fs, TB(0, 8), 0, WEFT_OK);
  weft_read_failure found;
  cr_assert(weft_failures_read_failure(fs, w, 2, &found), "a reader of a torn output skips");
  cr_assert_eq(found.failure, p);
  inv_check(&v, p);

  /* Whatever comes next still sees TornDown until something writes them. */
  weft_target other = TC(0, 64);
  weft_failure_id q = weft_failures_enter_write(fs, 0, &other, 1);
  weft_failures_exit_write(fs, q, &other, 1, NULL);
  expect_reads_as(fs, w[0], p, WEFT_ERR_TORN_DOWN);
  weft_failures_written(fs, w, 2);
  cr_assert_null(weft_graph_node_of(&fs->graph, p));
  inv_close(&v);
}

Test(invariant, i07_empty_write_set) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target a = TA(0, 64);
  weft_failures_taint(fs, boom("there before"), &a, 1);
  uint64_t minted = fs->graph.minted, len = weft_graph_len(&fs->graph);

  weft_target *ws = weft_failures_write_set(fs, 4);
  cr_assert_not_null(ws);
  cr_assert_eq(weft_failures_enter_write(fs, 0, ws, 0), 0, "no write set: no id");
  cr_assert_eq(fs->graph.minted, minted, "nothing minted");
  cr_assert_eq(weft_graph_len(&fs->graph), len);
  weft_failures_exit_write(fs, 0, ws, 0, NULL);
  weft_failures_exit_write(fs, 0, ws, 0, boom("dry run failed")); /* logged, then freed */
  cr_assert_eq(fs->graph.minted, minted);
  cr_assert_eq(weft_graph_len(&fs->graph), len);
  cr_assert_eq(weft_failures_write_set(fs, 4), ws, "the pooled vector comes back");
  cr_assert_eq(weft_failures_write_set(fs, 1), ws, "capacity kept");

  /* Zero-sized bindings only: nothing to claim, nothing minted. */
  ws[0] = TB(16, 16);
  ws[1] = TC(0, 0);
  cr_assert_eq(weft_failures_enter_write(fs, 0, ws, 2), 0);
  cr_assert_eq(fs->graph.minted, minted);
  expect_reads_as(fs, a, carried(&a), WEFT_ERR_GENERIC);
  inv_close(&v);
}

/* ---- 8-12: taint rules through the store --------------------------------------------------- */

Test(invariant, i08_taint_is_a_set) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target src = TA(0, 8);
  weft_failures_taint(fs, boom("root"), &src, 1);
  weft_read_failure found;
  cr_assert(weft_failures_read_failure(fs, &src, 1, &found));

  weft_target b = TB(0, 100);
  for (int i = 0; i < 10; i++) weft_failures_propagate(fs, &found, 1, (uint64_t)i, &b, 1);
  cr_assert_eq(weft_taint_claims(&v.t[1]), 1, "one entry");
  cr_assert_eq(weft_taint_claim(&v.t[1], 0)->n, 1);
  cr_assert_eq(fs_tagged(&fs->graph, found.failure), 2, "one tag for A, one for B");

  /* [0,10) + [20,30) + [10,20): one range [0,30). */
  weft_target c[] = {TC(0, 10), TC(20, 30), TC(10, 20)};
  for (int i = 0; i < 3; i++) weft_failures_propagate(fs, &found, 2, 1, &c[i], 1);
  const weft_claim_ranges *cl = weft_taint_claim(&v.t[2], 0);
  cr_assert_eq(cl->n, 1);
  const weft_range *r = cl->cap ? cl->many : &cl->one;
  cr_assert(r[0].start == 0 && r[0].end == 30, "[%" PRIu64 ",%" PRIu64 ")", r[0].start, r[0].end);
  cr_assert_eq(fs_tagged(&fs->graph, found.failure), 3);
  inv_close(&v);
}

Test(invariant, i09_partial_write) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target a = TA(0, 100);
  weft_failures_taint(fs, boom("f"), &a, 1);
  weft_failure_id f = carried(&a);
  weft_target mid = TA(40, 60);
  weft_failures_written(fs, &mid, 1);
  const weft_claim_ranges *cl = weft_taint_claim(&v.t[0], 0);
  cr_assert_eq(cl->n, 2);
  const weft_range *r = cl->cap ? cl->many : &cl->one;
  cr_assert(r[0].start == 0 && r[0].end == 40 && r[1].start == 60 && r[1].end == 100,
            "[%" PRIu64 ",%" PRIu64 ") [%" PRIu64 ",%" PRIu64 ")", r[0].start, r[0].end, r[1].start,
            r[1].end);
  expect_reads_as(fs, mid, 0, WEFT_OK);
  expect_reads_as(fs, TA(0, 40), f, WEFT_ERR_GENERIC);
  expect_reads_as(fs, TA(60, 100), f, WEFT_ERR_GENERIC);

  weft_failures_written(fs, (weft_target[]){TA(0, 40)}, 1);
  cr_assert_not_null(weft_graph_node_of(&fs->graph, f), "kept until the last byte");
  weft_failures_written(fs, (weft_target[]){TA(60, 99)}, 1);
  cr_assert_not_null(weft_graph_node_of(&fs->graph, f));
  weft_failures_written(fs, (weft_target[]){TA(99, 100)}, 1);
  cr_assert_null(weft_graph_node_of(&fs->graph, f));
  inv_close(&v);
}

Test(invariant, i10_takeover) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target a = TA(0, 100), mid = TA(25, 75);
  weft_failures_taint(fs, boom("old"), &a, 1);
  weft_failure_id old = carried(&a);
  weft_failures_taint(fs, boom("new"), &mid, 1);
  weft_failure_id now = carried(&mid);
  cr_assert_neq(now, old);
  expect_reads_as(fs, TA(0, 25), old, WEFT_ERR_GENERIC);
  expect_reads_as(fs, TA(75, 100), old, WEFT_ERR_GENERIC);
  expect_reads_as(fs, mid, now, WEFT_ERR_GENERIC);
  const weft_claim_ranges *cl = weft_taint_claim(&v.t[0], 0);
  cr_assert_eq(cl->failure, old);
  cr_assert_eq(cl->n, 2, "old was split");

  /* Tainting [0,100) with new afterwards removes old from the graph. */
  weft_read_failure found = {.failure = now, .needed = MA};
  weft_failures_propagate(fs, &found, 1, 1, &a, 1);
  cr_assert_null(weft_graph_node_of(&fs->graph, old));
  expect_reads_as(fs, a, now, WEFT_ERR_GENERIC);
  cr_assert_eq(weft_graph_len(&fs->graph), 1);
  inv_close(&v);
}

Test(invariant, i11_disjoint_failures_coexist) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target lo = TA(0, 50), hi = TA(50, 100), other = TB(0, 10);
  weft_failures_taint(fs, boom("low"), &lo, 1);
  weft_failures_taint(fs, boom("high"), &hi, 1);
  weft_failures_taint(fs, boom("other"), &other, 1);
  weft_failure_id fl = carried(&lo), fh = carried(&hi), fo = carried(&other);
  cr_assert(fl && fh && fo && fl != fh && fh != fo);

  weft_status st = weft_failures_ensure_written(fs, &lo, 1);
  EXPECT_SEVERAL(st, 1);
  expect_unwritten(weft_error_at(st, 0), fl, 1, WEFT_ERR_GENERIC, "low");
  weft_error_free(st);
  st = weft_failures_ensure_written(fs, &hi, 1);
  EXPECT_SEVERAL(st, 1);
  expect_unwritten(weft_error_at(st, 0), fh, 1, WEFT_ERR_GENERIC, "high");
  weft_error_free(st);

  /* Rewriting one region leaves the other its failure. */
  weft_failures_written(fs, &lo, 1);
  expect_reads_as(fs, lo, 0, WEFT_OK);
  expect_reads_as(fs, hi, fh, WEFT_ERR_GENERIC);
  expect_reads_as(fs, other, fo, WEFT_ERR_GENERIC);
  inv_close(&v);
}

Test(invariant, i12_empty_ranges) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  /* An empty range claims nothing: the failure is pruned at once. */
  weft_target empty = TA(10, 10);
  weft_failures_taint(fs, boom("zero-sized"), &empty, 1);
  cr_assert(weft_taint_is_clean(&v.t[0]));
  cr_assert_eq(weft_graph_len(&fs->graph), 0);

  /* And never trips a claim. */
  weft_target a = TA(0, 100);
  weft_failures_taint(fs, boom("f"), &a, 1);
  expect_reads_as(fs, TA(50, 50), 0, WEFT_OK);
  weft_read_failure found;
  weft_target z = TA(50, 50);
  cr_assert_not(weft_failures_read_failure(fs, &z, 1, &found));

  /* A zero-sized write releases nothing, a zero-sized output takes nothing. */
  weft_failures_written(fs, &z, 1);
  expect_reads_as(fs, TA(50, 51), carried(&a), WEFT_ERR_GENERIC);
  cr_assert(weft_failures_read_failure(fs, &a, 1, &found));
  weft_target zb = TB(0, 0);
  weft_failures_propagate(fs, &found, 1, 1, &zb, 1);
  cr_assert(weft_taint_is_clean(&v.t[1]));
  cr_assert_eq(fs_tagged(&fs->graph, found.failure), 1);
  inv_close(&v);
}

/* ---- 13-16: skips and reports -----------------------------------------------------------------
 */

Test(invariant, i13_skip_propagation) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target a = TA(0, 64);
  weft_failures_taint(fs, weft_error_make(WEFT_ERR_LAUNCH_COMPILATION, "no such intrinsic"), &a, 1);
  weft_failure_id root = carried(&a);
  weft_read_failure found;
  weft_target reads[] = {TF(0, 64), a}; /* the clean read is passed over */
  cr_assert(weft_failures_read_failure(fs, reads, 2, &found));
  cr_assert_eq(found.failure, root);
  cr_assert_eq(found.needed, MA);

  uint64_t minted = fs->graph.minted, len = weft_graph_len(&fs->graph);
  weft_target out[] = {TB(0, 32), TC(0, 32)};
  weft_failures_propagate(fs, &found, 3, 7, out, 2);
  cr_assert_eq(fs->graph.minted, minted, "no node minted");
  cr_assert_eq(weft_graph_len(&fs->graph), len);
  cr_assert_eq(carried(&out[0]), root, "the outputs carry the root id");
  cr_assert_eq(carried(&out[1]), root);
  const weft_graph_node *nd = weft_graph_node_of(&fs->graph, root);
  cr_assert_eq(nd->nskips, 1, "one Skipped record");
  cr_assert_eq(nd->skipped_total, 1);
  const weft_skip_record *rec = &nd->skips[0];
  cr_assert_eq(rec->kernel, 3);
  cr_assert_eq(rec->needed, MA);
  cr_assert_eq(rec->nproduced, 2);
  cr_assert(rec->produced[0] == MB && rec->produced[1] == MC);
  cr_assert_eq(nd->tagged, 3);

  weft_status st = weft_failures_ensure_written(fs, &out[1], 1);
  EXPECT_SEVERAL(st, 1);
  weft_status u = weft_error_at(st, 0);
  expect_unwritten(u, root, 3, WEFT_ERR_LAUNCH_COMPILATION, "no such intrinsic");
  cr_assert_eq(weft_error_chain_length(u), 1);
  cr_assert_str_eq(weft_error_chain_at(u, 0), "skipped kernel #3 (launch 7): it needed memory 101");
  cr_assert(weft_error_is_refusal(st), "the root's nature survives the hop");
  weft_error_free(st);
  inv_close(&v);
}

static const char *kernel_names(void *ctx, uint32_t k) {
  (void)ctx;
  static const char *names[] = {"produce", "stage_a", "stage_b", "stage_c"};
  return k < 4 ? names[k] : NULL;
}

Test(invariant, i14_skip_chain) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;
  fs->graph.namer = (weft_graph_namer){.kernel = kernel_names, .ctx = NULL};

  /* root (on A) -> stage_a writes B -> stage_b writes C -> stage_c writes D. */
  weft_target a = TA(0, 64), b = TB(0, 64), c = TC(0, 64), d = TD(0, 64);
  weft_failures_taint(fs, boom("the root text"), &a, 1);
  weft_failure_id root = carried(&a);
  weft_target hops[][2] = {{a, b}, {b, c}, {c, d}};
  for (uint32_t i = 0; i < 3; i++) {
    weft_read_failure found;
    cr_assert(weft_failures_read_failure(fs, &hops[i][0], 1, &found));
    weft_failures_propagate(fs, &found, i + 1, 10 + i, &hops[i][1], 1);
  }
  weft_status st = weft_failures_ensure_written(fs, &d, 1);
  EXPECT_SEVERAL(st, 1);
  weft_status u = weft_error_at(st, 0);
  expect_unwritten(u, root, 4, WEFT_ERR_GENERIC, "the root text");
  cr_assert_eq(weft_error_chain_length(u), 3);
  cr_assert(strstr(weft_error_chain_at(u, 0), "'stage_c'") != NULL, "newest first: %s",
            weft_error_chain_at(u, 0));
  cr_assert(strstr(weft_error_chain_at(u, 1), "'stage_b'") != NULL, "%s",
            weft_error_chain_at(u, 1));
  cr_assert(strstr(weft_error_chain_at(u, 2), "'stage_a'") != NULL, "%s",
            weft_error_chain_at(u, 2));
  cr_assert(strstr(weft_error_chain_at(u, 0), "needed memory 103") != NULL, "%s",
            weft_error_chain_at(u, 0));
  EXPECT_CONTAINS(u, "the root text");
  weft_error_free(st);

  /* A buffer no record produced: only the root. */
  st = weft_failures_ensure_written(fs, &a, 1);
  EXPECT_SEVERAL(st, 1);
  expect_unwritten(weft_error_at(st, 0), root, 4, WEFT_ERR_GENERIC, "the root text");
  cr_assert_eq(weft_error_chain_length(weft_error_at(st, 0)), 0);
  weft_error_free(st);
  inv_close(&v);
}

Test(invariant, i15_skip_cap) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  enum { HOPS = 20 };
  weft_taint t[HOPS + 1];
  memset(t, 0, sizeof t);
  weft_target first = T(&t[0], 1000, 0, 16);
  weft_failures_taint(fs, boom("root"), &first, 1);
  weft_failure_id root = carried(&first);
  for (uint32_t i = 0; i < HOPS; i++) {
    weft_target in = T(&t[i], 1000 + i, 0, 16), out = T(&t[i + 1], 1000 + i + 1, 0, 16);
    weft_read_failure found;
    cr_assert(weft_failures_read_failure(fs, &in, 1, &found));
    weft_failures_propagate(fs, &found, i, i + 1, &out, 1);
  }
  const weft_graph_node *nd = weft_graph_node_of(&fs->graph, root);
  cr_assert_eq(nd->nskips, 16, "16 of 20 records kept");
  cr_assert_eq(nd->skipped_total, HOPS);

  weft_target newest = T(&t[HOPS], 1000 + HOPS, 0, 16);
  weft_status st = weft_failures_ensure_written(fs, &newest, 1);
  EXPECT_SEVERAL(st, 1);
  weft_status u = weft_error_at(st, 0);
  cr_assert_eq(weft_error_chain_length(u), 17, "16 hops and the note");
  cr_assert_str_eq(weft_error_chain_at(u, 0),
                   "skipped kernel #19 (launch 20): it needed memory 1019");
  cr_assert(strstr(weft_error_chain_at(u, 16), "4 older") != NULL, "%s",
            weft_error_chain_at(u, 16));
  cr_assert(strstr(weft_error_chain_at(u, 16), "dropped") != NULL, "%s",
            weft_error_chain_at(u, 16));
  weft_error_free(st);

  for (int i = 0; i <= HOPS; i++) weft_taint_clear(&t[i], &v.e.a, &fs->graph);
  inv_close(&v);
}

Test(invariant, i16_reports_deduplicate) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target three[] = {TA(0, 8), TB(0, 8), TC(0, 8)};
  weft_failures_taint(fs, boom("shared"), three, 3);
  weft_failure_id f = carried(&three[0]);
  weft_status st = weft_failures_ensure_written(fs, three, 3);
  EXPECT_SEVERAL(st, 1);
  expect_unwritten(weft_error_at(st, 0), f, 3, WEFT_ERR_GENERIC, "shared");
  weft_error_free(st);

  weft_target d = TD(0, 8);
  weft_failures_taint(fs, boom("second"), &d, 1);
  weft_failure_id g = carried(&d);
  weft_target mixed[] = {TD(0, 8), TE(0, 8), TA(0, 8), TB(0, 8), TD(0, 8)};
  st = weft_failures_ensure_written(fs, mixed, 5);
  EXPECT_SEVERAL(st, 2);
  cr_assert_eq(weft_error_failure_id(weft_error_at(st, 0)), g, "first seen first");
  cr_assert_eq(weft_error_failure_id(weft_error_at(st, 1)), f);
  weft_error_free(st);

  st = weft_failures_ensure_written(fs, &d, 1);
  EXPECT_SEVERAL(st, 1); /* wrapped even when alone */
  weft_error_free(st);

  cr_assert_null(weft_failures_ensure_written(fs, (weft_target[]){TE(0, 8), TF(0, 8)}, 2));
  cr_assert_null(weft_failures_ensure_written(fs, NULL, 0));
  inv_close(&v);
}

/* ---- 17-19: where failures live -------------------------------------------------------------- */

Test(invariant, i17_cross_stream_landing) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  /* A launch "on stream A" fails writing a buffer allocated on stream B: the
   * binding resolves to B's allocation, and the failure lands there. */
  weft_target on_b = TB(0, 64);
  weft_failure_id p = weft_failures_enter_write(fs, 0, &on_b, 1);
  weft_failures_exit_write(fs, p, &on_b, 1, boom("failed on stream A"));

  /* Any reader of that allocation sees it, through its own binding. */
  weft_target reader = TB(16, 17);
  expect_reads_as(fs, reader, p, WEFT_ERR_GENERIC);
  weft_read_failure found;
  cr_assert(weft_failures_read_failure(fs, &reader, 1, &found));
  cr_assert_eq(found.failure, p);
  cr_assert_eq(found.needed, MB);

  /* An allocation whose stream never started: nothing lands, nothing is
   * created, and reading it claims nothing. */
  weft_target absent = T(NULL, 777, 0, 64);
  weft_failures_taint(fs, boom("nowhere to land"), &absent, 1);
  cr_assert_eq(weft_graph_len(&fs->graph), 1);
  cr_assert_null(absent.taint);
  expect_reads_as(fs, absent, 0, WEFT_OK);
  cr_assert_not(weft_failures_read_failure(fs, &absent, 1, &found));
  inv_close(&v);
}

Test(invariant, i18_no_stream_creation) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target absent[] = {T(NULL, 801, 0, 64), T(NULL, 802, 8, 16)};
  uint64_t minted = fs->graph.minted;
  cr_assert_null(weft_failures_ensure_written(fs, absent, 2), "claims nothing");
  weft_read_failure found;
  cr_assert_not(weft_failures_read_failure(fs, absent, 2, &found));
  cr_assert_eq(fs->graph.minted, minted, "questions mint nothing");
  cr_assert(absent[0].taint == NULL && absent[1].taint == NULL, "and create nothing");

  weft_failures_taint(fs, boom("t"), absent, 2);
  weft_failures_written(fs, absent, 2);
  weft_failure_id p = weft_failures_enter_write(fs, 0, absent, 2);
  cr_assert_eq(fs_tagged(&fs->graph, p), 0);
  weft_failures_exit_write(fs, p, absent, 2, boom("x"));
  cr_assert_eq(weft_graph_len(&fs->graph), 0, "no claim: every failure pruned");

  weft_target a = TA(0, 8);
  weft_failures_taint(fs, boom("real"), &a, 1);
  cr_assert(weft_failures_read_failure(fs, &a, 1, &found));
  weft_failures_propagate(fs, &found, 1, 1, absent, 2);
  cr_assert_eq(fs_tagged(&fs->graph, found.failure), 1, "the skip claimed nothing there");

  /* ...unless the memory was never allocated: that is reported. */
  weft_target never = UNALLOC(803);
  weft_status st = weft_failures_ensure_written(fs, &never, 1);
  EXPECT_SEVERAL(st, 1);
  cr_assert_eq(weft_error_kind_of(weft_error_at(st, 0)), WEFT_ERR_NOT_FOUND);
  weft_error_free(st);
  inv_close(&v);
}

Test(invariant, i19_shedding) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  /* Freeing (cleanup, tombstoning, coalescing): the carrier lets go. */
  weft_target a = TA(0, 64);
  weft_failures_taint(fs, boom("freed"), &a, 1);
  cr_assert_eq(weft_graph_len(&fs->graph), 1);
  weft_taint_clear(&v.t[0], &v.e.a, &fs->graph);
  cr_assert_eq(weft_graph_len(&fs->graph), 0, "a freed tainted buffer leaves no node");

  /* Rebinding: the slot takes another identity and starts clean. */
  weft_target b = TB(0, 64);
  weft_failures_taint(fs, boom("old identity"), &b, 1);
  weft_taint_clear(&v.t[1], &v.e.a, &fs->graph);
  weft_target rebound = T(&v.t[1], 999, 0, 64);
  expect_reads_as(fs, rebound, 0, WEFT_OK);
  cr_assert_eq(weft_graph_len(&fs->graph), 0);

  /* Relocation: another allocation takes the claims over, then the old one
   * is shed; the failure is counted once throughout and still reads. */
  weft_target c[] = {TC(0, 10), TC(20, 30)}, d = TD(0, 64);
  weft_failures_taint(fs, boom("moved"), c, 2);
  weft_failures_taint(fs, boom("stays"), &d, 1);
  weft_failure_id f = carried(&c[0]);
  weft_taint *from = &v.t[2], *to = &v.t[4];
  for (uint32_t i = 0; i < weft_taint_claims(from); i++) {
    const weft_claim_ranges *cl = weft_taint_claim(from, i);
    const weft_range *r = cl->cap ? cl->many : &cl->one;
    for (uint32_t k = 0; k < cl->n; k++) weft_taint_set(to, &v.e.a, &fs->graph, r[k], cl->failure);
  }
  cr_assert_eq(fs_tagged(&fs->graph, f), 2);
  weft_taint_clear(from, &v.e.a, &fs->graph);
  cr_assert_eq(fs_tagged(&fs->graph, f), 1);
  expect_reads_as(fs, TE(20, 30), f, WEFT_ERR_GENERIC);
  expect_reads_as(fs, TE(10, 20), 0, WEFT_OK);
  inv_check(&v, 0);

  /* Freeing everything: only what other memory still carries is left. */
  weft_taint_clear(to, &v.e.a, &fs->graph);
  cr_assert_null(weft_graph_node_of(&fs->graph, f));
  cr_assert_eq(weft_graph_len(&fs->graph), 1);
  inv_close(&v);
}

/* ---- 20-21: graph edges and unallocated memory ---------------------------------------------- */

Test(invariant, i20_prune_replace_untag_and_error_edges) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  weft_target a = TA(0, 64);
  weft_failure_id p = weft_failures_enter_write(fs, 0, &a, 1);
  weft_graph_prune(&fs->graph, p);
  cr_assert_not_null(weft_graph_node_of(&fs->graph, p), "prune leaves a carried node alone");
  weft_failures_exit_write(fs, p, &a, 1, boom("kept"));
  weft_graph_prune(&fs->graph, p);
  cr_assert_str_eq(weft_error_message(weft_graph_error(&fs->graph, p)), "kept");

  uint64_t len = weft_graph_len(&fs->graph);
  weft_graph_replace(&fs->graph, p + 1000, boom("nobody")); /* missing: no-op, freed */
  cr_assert_eq(weft_graph_len(&fs->graph), len);
  cr_assert_null(weft_graph_node_of(&fs->graph, p + 1000));
  weft_graph_untag(&fs->graph, 0); /* untag(None) */
  cr_assert_eq(weft_graph_len(&fs->graph), len);
  cr_assert_eq(fs_tagged(&fs->graph, p), 1);

  /* error() of a pruned id is None, and a reader treats it as no failure. */
  weft_failure_id q = weft_graph_insert(&fs->graph, boom("never claimed"), NULL);
  weft_graph_prune(&fs->graph, q);
  cr_assert_null(weft_graph_error(&fs->graph, q));
  weft_taint_set(&v.t[1], &v.e.a, NULL, R(0, 8), q); /* an execution-view id, no node */
  weft_read_failure found;
  weft_target b = TB(0, 8);
  cr_assert_not(weft_failures_read_failure(fs, &b, 1, &found), "a missing node is skipped");
  cr_assert_null(weft_failures_ensure_written(fs, &b, 1));
  weft_taint_clear(&v.t[1], &v.e.a, NULL);
  inv_close(&v);
}

Test(invariant, i21_unallocated_memory) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  uint64_t len = weft_graph_len(&fs->graph);
  weft_failures_fail_unallocated(
      fs, 900, weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 1 << 20, "1 MiB refused"));
  weft_target h = UNALLOC(900);
  weft_status st = weft_failures_ensure_written(fs, &h, 1);
  EXPECT_SEVERAL(st, 1);
  weft_failure_id f = weft_error_failure_id(weft_error_at(st, 0));
  expect_unwritten(weft_error_at(st, 0), f, 1, WEFT_ERR_OUT_OF_MEMORY, "1 MiB refused");
  weft_error_free(st);

  /* A launch reading h is skipped, and its outputs carry that failure. */
  weft_read_failure found;
  weft_target reads[] = {TA(0, 8), h};
  cr_assert(weft_failures_read_failure(fs, reads, 2, &found));
  cr_assert_eq(found.failure, f);
  cr_assert_eq(found.needed, 900);
  weft_target out = TB(0, 8);
  weft_failures_propagate(fs, &found, 1, 1, &out, 1);
  expect_reads_as(fs, out, f, WEFT_ERR_OUT_OF_MEMORY);
  inv_check(&v, 0);

  /* Dropping h drops the record; the outputs still carry it until written. */
  weft_graph_forget_unallocated(&fs->graph, 900);
  expect_reads_as(fs, out, f, WEFT_ERR_OUT_OF_MEMORY);
  weft_failures_written(fs, &out, 1);
  cr_assert_eq(weft_graph_len(&fs->graph), len, "back to its previous value");

  /* Dropped without anything read: the record and node go at once. */
  weft_failures_fail_unallocated(fs, 901, boom("refused"));
  cr_assert_eq(weft_graph_len(&fs->graph), len + 1);
  weft_graph_forget_unallocated(&fs->graph, 901);
  cr_assert_eq(weft_graph_len(&fs->graph), len);

  /* Never allocated, no reason recorded: the read still fails. */
  weft_target never = UNALLOC(902);
  st = weft_failures_ensure_written(fs, &never, 1);
  EXPECT_SEVERAL(st, 1);
  cr_assert_eq(weft_error_kind_of(weft_error_at(st, 0)), WEFT_ERR_NOT_FOUND);
  EXPECT_CONTAINS(weft_error_at(st, 0), "never allocated");
  weft_error_free(st);
  inv_close(&v);
}

/* ---- 22-23: capture and the success path ------------------------------------------------ */

static weft_status i22_fail_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return weft_error_make(WEFT_ERR_VALIDATION, "failed eagerly");
}

static weft_status i22_noop_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return NULL;
}

/* A recording on stream 0 with one launch of |k| (reading |in|, writing
 * |out|) inside the window; returns end's status, or abort's when |abandon|. */
static weft_status i22_record(weft_device *dev, weft_kernel k, weft_buffer in, weft_buffer out,
                              bool abandon) {
  static const uint32_t one3[3] = {1, 1, 1};
  weft_stream_id s = 0;
  weft_capture *cap = NULL;
  weft_status st = weft_capture_prepare(dev, &s, 1, &cap);
  cr_assert_null(st);
  cr_assert_null(weft_capture_begin(cap));
  weft_binding b[2] = {{in, 0, WEFT_WHOLE, WEFT_READ}, {out, 0, WEFT_WHOLE, WEFT_WRITE}};
  cr_assert_null(weft_launch(dev, s, k, one3, one3, b, 2, NULL, 0));
  st = abandon ? weft_capture_abort(cap) : weft_capture_end(cap);
  if (st) cr_assert_eq(weft_capture_state_of(cap), WEFT_CAPTURE_ABORTED, "nothing is kept");
  weft_capture_destroy(cap);
  return st;
}

Test(invariant, i22_capture_is_doomed_by_a_failed_or_skipped_launch) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;
  /* What the capture relies on from this level: a skip is decided before
   * any scope is entered (read_failure finds the failure), and a failed
   * scope leaves its real error on the write set. */
  weft_target a = TA(0, 8), b = TB(0, 8);
  weft_failure_id p = weft_failures_enter_write(fs, 0, &a, 1);
  weft_failures_exit_write(fs, p, &a, 1, boom("failed while recording"));
  expect_reads_as(fs, a, p, WEFT_ERR_GENERIC);
  weft_read_failure found;
  cr_assert(weft_failures_read_failure(fs, &a, 1, &found), "the next launch would be skipped");
  weft_failures_propagate(fs, &found, 1, 1, &b, 1);
  expect_reads_as(fs, b, p, WEFT_ERR_GENERIC);
  weft_failures_written(fs, (weft_target[]){a, b}, 2);
  inv_close(&v);

  /* On a device: a launch inside the window that would be skipped (its input
   * carries a failure) or that fails (a failpoint) makes end fail; doomed
   * and abandoned, the capture reports Several. */
  weft_device *dev = NULL;
  cr_assert_null(weft_device_open(NULL, &dev));
  weft_kernel kf, kn;
  cr_assert_null(weft_kernel_host(dev, "fails", i22_fail_kernel, NULL, &kf));
  cr_assert_null(weft_kernel_host(dev, "noop", i22_noop_kernel, NULL, &kn));
  weft_buffer bad, clean, out;
  cr_assert_null(weft_buffer_create(dev, 0, 64, &bad));
  cr_assert_null(weft_buffer_create(dev, 0, 64, &clean));
  cr_assert_null(weft_buffer_create(dev, 0, 64, &out));
  static const uint32_t one3[3] = {1, 1, 1};
  weft_binding w = {bad, 0, WEFT_WHOLE, WEFT_WRITE};
  cr_assert_null(weft_launch(dev, 0, kf, one3, one3, &w, 1, NULL, 0)); /* bad is tainted */
  uint8_t zero[64] = {0};
  cr_assert_null(weft_buffer_write(dev, 0, clean, 0, zero, sizeof(zero)));

  weft_status st = i22_record(dev, kn, bad, out, false); /* skipped inside the window */
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_GENERIC);
  cr_assert_not_null(strstr(weft_error_message(st), "would be skipped"), "%s",
                     weft_error_message(st));
  weft_error_free(st);

  weft_device_stats s = {0};
  cr_assert_null(weft_device_stats_get(dev, &s));
  char spec[64];
  snprintf(spec, sizeof(spec), "launch#%" PRIu64 "=Unknown", s.launches + 1);
  cr_assert_null(weft_device_set_failpoints(dev, spec));
  st = i22_record(dev, kn, clean, out, false); /* fails inside the window */
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_GENERIC);
  cr_assert_not_null(strstr(weft_error_message(st), "failpoint"), "%s", weft_error_message(st));
  weft_error_free(st);

  st = i22_record(dev, kn, bad, out, true); /* doomed, then abandoned */
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL);
  cr_assert_eq(weft_error_count(st), 2);
  cr_assert_not_null(strstr(weft_error_message(weft_error_at(st, 0)), "would be skipped"));
  cr_assert_not_null(strstr(weft_error_message(weft_error_at(st, 1)), "abandoned"));
  weft_error_free(st);

  st = i22_record(dev, kn, clean, out, false); /* clean: kept */
  cr_assert_null(st);
  weft_device_close(dev);
}

Test(invariant, i23_success_path_allocates_nothing) {
  inv v;
  inv_open(&v);
  weft_failures *fs = &v.fs;

  /* Something else is failed on the device, so the graph is not empty. */
  weft_target f = TF(0, 8);
  weft_failures_taint(fs, boom("unrelated"), &f, 1);

  weft_target set[] = {TA(0, 64), TB(0, 128), TC(32, 64), TD(0, 4096)};
  weft_target *ws = weft_failures_write_set(fs, 4);
  memcpy(ws, set, sizeof set);
  weft_failure_id p = weft_failures_enter_write(fs, 0, ws, 4); /* warm-up scope */
  weft_failures_exit_write(fs, p, ws, 4, NULL);

  uint64_t allocs = fs_allocs(&v.e), len = weft_graph_len(&fs->graph);
  weft_failure_id last = p;
  for (int i = 0; i < 10000; i++) {
    weft_target *w = weft_failures_write_set(fs, 4);
    cr_assert_eq(w, ws, "the write set is pooled");
    memcpy(w, set, sizeof set);
    p = weft_failures_enter_write(fs, 0, w, 4);
    cr_assert_gt(p, last);
    last = p;
    weft_status torn = weft_graph_error(&fs->graph, p);
    if (i == 0 || i == 9999) {
      cr_assert_eq(weft_error_kind_of(torn), WEFT_ERR_TORN_DOWN);
      cr_assert_eq(torn, weft__error_torn_down(), "the payload-free singleton");
      cr_assert_eq(weft_error_backtrace_depth(torn), 0, "no stack walk");
      cr_assert_str_eq(weft_error_message(torn), "", "no formatted string");
      cr_assert(weft__error_is_static(torn));
    }
    weft_failures_exit_write(fs, p, w, 4, NULL);
  }
  cr_assert_eq(fs_allocs(&v.e), allocs, "%" PRIu64 " allocations on the success path",
               fs_allocs(&v.e) - allocs);
  cr_assert_eq(weft_graph_len(&fs->graph), len);
  for (int i = 0; i < 4; i++) expect_reads_as(fs, set[i], 0, WEFT_OK);
  inv_close(&v);
}
