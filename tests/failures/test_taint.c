/* Byte-range taint of one allocation (core/taint.h): a
 * partial write releases only its bytes, disjoint claims coexist, a new
 * failure takes the bytes it claims, re-taint counts once, adjacent claims
 * fuse, clear releases everything, empty ranges claim nothing; checked
 * against a byte-array model, for allocations in the common case, without a
 * graph (the execution view), and when memory runs out mid-split. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "core/error.h"
#include "core/error_graph.h"
#include "core/taint.h"
#include "fs_test_util.h"

TestSuite(taint, .timeout = 30);

/* Asserts claim |i| of |t| is failure |f| over exactly the |n| ranges given
 * as start, end pairs. */
static void expect_claim(const weft_taint *t, uint32_t i, weft_failure_id f, uint32_t n,
                         const uint64_t *se) {
  const weft_claim_ranges *c = weft_taint_claim(t, i);
  cr_assert_not_null(c, "no claim %" PRIu32, i);
  cr_assert_eq(c->failure, f, "claim %" PRIu32 " is #%" PRIu64 ", expected #%" PRIu64, i,
               c->failure, f);
  cr_assert_eq(c->n, n, "#%" PRIu64 " has %" PRIu32 " ranges, expected %" PRIu32, f, c->n, n);
  const weft_range *v = c->cap ? c->many : &c->one;
  for (uint32_t k = 0; k < n; k++)
    cr_assert(v[k].start == se[2 * k] && v[k].end == se[2 * k + 1],
              "#%" PRIu64 " range %" PRIu32 " is [%" PRIu64 ",%" PRIu64 "), expected [%" PRIu64
              ",%" PRIu64 ")",
              f, k, v[k].start, v[k].end, se[2 * k], se[2 * k + 1]);
}

static weft_failure_id fresh(weft_error_graph *g, const char *what) {
  return weft_graph_insert(g, boom(what), NULL);
}

/* ---- taint -------------------------------------------------------------------------------- */

Test(taint, a_partial_write_releases_only_the_bytes_it_covers) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_taint t = {0};

  weft_failure_id f = fresh(&g, "f");
  weft_taint_set(&t, &e.a, &g, R(0, 100), f);
  weft_taint_written(&t, &e.a, &g, R(40, 60));
  expect_claim(&t, 0, f, 2, (uint64_t[]){0, 40, 60, 100});
  cr_assert_eq(fs_tagged(&g, f), 1, "one tag per (allocation, failure), split or not");
  cr_assert_eq(weft_taint_failure(&t, R(40, 60)), 0, "the written bytes are clean");
  cr_assert_eq(weft_taint_failure(&t, R(39, 40)), f);
  cr_assert_eq(weft_taint_failure(&t, R(60, 61)), f);
  cr_assert_eq(weft_taint_failure(&t, R(30, 70)), f);

  weft_taint_written(&t, &e.a, &g, R(0, 40));
  expect_claim(&t, 0, f, 1, (uint64_t[]){60, 100});
  cr_assert_not_null(weft_graph_node_of(&g, f), "kept until the last byte is released");
  weft_taint_written(&t, &e.a, &g, R(60, 99));
  cr_assert_eq(fs_tagged(&g, f), 1);
  weft_taint_written(&t, &e.a, &g, R(99, 100));
  cr_assert(weft_taint_is_clean(&t));
  cr_assert_null(weft_graph_node_of(&g, f), "released with the last byte");
  cr_assert_eq(weft_graph_len(&g), 0);

  weft_taint_clear(&t, &e.a, &g);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(taint, disjoint_claims_keep_their_own_failures) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_taint t = {0};

  weft_failure_id f1 = fresh(&g, "one"), f2 = fresh(&g, "two"), f3 = fresh(&g, "three");
  weft_taint_set(&t, &e.a, &g, R(0, 50), f1);
  weft_taint_set(&t, &e.a, &g, R(50, 100), f2);
  weft_taint_set(&t, &e.a, &g, R(200, 300), f3);
  cr_assert_eq(weft_taint_claims(&t), 3);
  cr_assert_eq(weft_taint_failure(&t, R(0, 50)), f1);
  cr_assert_eq(weft_taint_failure(&t, R(49, 50)), f1);
  cr_assert_eq(weft_taint_failure(&t, R(50, 51)), f2);
  cr_assert_eq(weft_taint_failure(&t, R(60, 100)), f2);
  cr_assert_eq(weft_taint_failure(&t, R(250, 251)), f3);
  cr_assert_eq(weft_taint_failure(&t, R(100, 200)), 0, "the gap is clean");
  weft_failure_id both = weft_taint_failure(&t, R(40, 60));
  cr_assert(both == f1 || both == f2, "a read across both names one of them");
  cr_assert_eq(fs_tagged(&g, f1), 1);
  cr_assert_eq(fs_tagged(&g, f2), 1);
  cr_assert_eq(fs_tagged(&g, f3), 1);
  fs_check_taint(&t, true);

  /* Writing one region leaves the others alone. */
  weft_taint_written(&t, &e.a, &g, R(50, 100));
  cr_assert_null(weft_graph_node_of(&g, f2));
  cr_assert_eq(weft_taint_failure(&t, R(0, 1)), f1);
  cr_assert_eq(weft_taint_failure(&t, R(299, 300)), f3);

  weft_taint_clear(&t, &e.a, &g);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(taint, a_new_failure_takes_the_bytes_it_claims) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_taint t = {0};

  weft_failure_id old = fresh(&g, "old"), now = fresh(&g, "new");
  weft_taint_set(&t, &e.a, &g, R(0, 100), old);
  weft_taint_set(&t, &e.a, &g, R(25, 75), now);
  expect_claim(&t, 0, old, 2, (uint64_t[]){0, 25, 75, 100});
  expect_claim(&t, 1, now, 1, (uint64_t[]){25, 75});
  cr_assert_eq(weft_taint_failure(&t, R(25, 75)), now);
  cr_assert_eq(weft_taint_failure(&t, R(24, 25)), old);
  cr_assert_eq(weft_taint_failure(&t, R(75, 76)), old);
  cr_assert_eq(fs_tagged(&g, old), 1);
  cr_assert_eq(fs_tagged(&g, now), 1);

  weft_taint_set(&t, &e.a, &g, R(0, 100), now);
  cr_assert_null(weft_graph_node_of(&g, old), "every byte taken: the old failure is gone");
  cr_assert_eq(weft_taint_claims(&t), 1);
  expect_claim(&t, 0, now, 1, (uint64_t[]){0, 100});
  cr_assert_eq(fs_tagged(&g, now), 1);

  weft_taint_clear(&t, &e.a, &g);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(taint, retainting_the_same_bytes_counts_once) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_taint a = {0}, b = {0};

  weft_failure_id f = fresh(&g, "f");
  for (int i = 0; i < 10; i++) weft_taint_set(&a, &e.a, &g, R(0, 100), f);
  cr_assert_eq(weft_taint_claims(&a), 1);
  expect_claim(&a, 0, f, 1, (uint64_t[]){0, 100});
  cr_assert_eq(fs_tagged(&g, f), 1);
  weft_taint_set(&a, &e.a, &g, R(10, 20), f); /* inside: nothing changes */
  expect_claim(&a, 0, f, 1, (uint64_t[]){0, 100});
  cr_assert_eq(fs_tagged(&g, f), 1);

  for (int i = 0; i < 10; i++) weft_taint_set(&b, &e.a, &g, R(5, 6), f);
  cr_assert_eq(fs_tagged(&g, f), 2, "one tag per allocation");

  weft_taint_written(&a, &e.a, &g, R(0, 100));
  cr_assert_eq(fs_tagged(&g, f), 1, "one write releases what ten taints claimed");
  weft_taint_clear(&b, &e.a, &g);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_taint_clear(&a, &e.a, &g);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(taint, adjacent_claims_of_one_failure_fuse) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_taint t = {0};

  weft_failure_id f = fresh(&g, "f");
  weft_taint_set(&t, &e.a, &g, R(0, 10), f);
  weft_taint_set(&t, &e.a, &g, R(20, 30), f);
  expect_claim(&t, 0, f, 2, (uint64_t[]){0, 10, 20, 30});
  weft_taint_set(&t, &e.a, &g, R(10, 20), f);
  expect_claim(&t, 0, f, 1, (uint64_t[]){0, 30});
  cr_assert_eq(fs_tagged(&g, f), 1);

  /* Overlaps fuse too, across several ranges, and order is kept. */
  weft_taint_set(&t, &e.a, &g, R(40, 50), f);
  weft_taint_set(&t, &e.a, &g, R(60, 70), f);
  weft_taint_set(&t, &e.a, &g, R(80, 90), f);
  weft_taint_set(&t, &e.a, &g, R(35, 36), f);
  expect_claim(&t, 0, f, 5, (uint64_t[]){0, 30, 35, 36, 40, 50, 60, 70, 80, 90});
  weft_taint_set(&t, &e.a, &g, R(45, 85), f);
  expect_claim(&t, 0, f, 3, (uint64_t[]){0, 30, 35, 36, 40, 90});
  weft_taint_set(&t, &e.a, &g, R(30, 35), f); /* touches both neighbours */
  expect_claim(&t, 0, f, 2, (uint64_t[]){0, 36, 40, 90});
  fs_check_taint(&t, true);

  weft_taint_clear(&t, &e.a, &g);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(taint, clearing_releases_every_claim) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_taint t = {0}, other = {0};

  weft_failure_id f[4];
  for (int i = 0; i < 4; i++) f[i] = fresh(&g, "f");
  for (uint64_t i = 0; i < 4; i++) {
    weft_taint_set(&t, &e.a, &g, R(i * 100, i * 100 + 10), f[i]);
    weft_taint_set(&t, &e.a, &g, R(i * 100 + 20, i * 100 + 30), f[i]); /* many ranges */
  }
  weft_taint_set(&other, &e.a, &g, R(0, 1), f[3]); /* f[3] is carried elsewhere too */
  cr_assert_eq(weft_taint_claims(&t), 4);
  cr_assert_eq(weft_graph_len(&g), 4);

  weft_taint_clear(&t, &e.a, &g);
  cr_assert(weft_taint_is_clean(&t));
  cr_assert_eq(weft_taint_claims(&t), 0);
  cr_assert_eq(weft_taint_failure(&t, R(0, UINT64_MAX)), 0);
  for (int i = 0; i < 3; i++) cr_assert_null(weft_graph_node_of(&g, f[i]));
  cr_assert_eq(fs_tagged(&g, f[3]), 1, "the other allocation still carries it");
  cr_assert_eq(weft_graph_len(&g), 1);

  /* A cleared taint is reusable (the slot rebound to another identity). */
  weft_taint_set(&t, &e.a, &g, R(0, 8), f[3]);
  cr_assert_eq(fs_tagged(&g, f[3]), 2);
  weft_taint_clear(&t, &e.a, &g);
  weft_taint_clear(&other, &e.a, &g);
  weft_taint_clear(&other, &e.a, &g); /* twice: no-op */
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(taint, an_empty_range_claims_nothing) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_taint t = {0};

  weft_failure_id f = fresh(&g, "f");
  weft_taint_set(&t, &e.a, &g, R(10, 10), f);
  cr_assert(weft_taint_is_clean(&t));
  cr_assert_eq(fs_tagged(&g, f), 0);
  weft_taint_set(&t, &e.a, &g, R(20, 10), f); /* inverted: empty as well */
  cr_assert(weft_taint_is_clean(&t));

  weft_taint_set(&t, &e.a, &g, R(0, 100), f);
  cr_assert_eq(weft_taint_failure(&t, R(50, 50)), 0, "an empty range never trips a claim");
  cr_assert_eq(weft_taint_failure(&t, R(0, 0)), 0);
  weft_taint_written(&t, &e.a, &g, R(50, 50));
  expect_claim(&t, 0, f, 1, (uint64_t[]){0, 100});
  weft_failure_id h = fresh(&g, "h");
  weft_taint_set(&t, &e.a, &g, R(30, 30), h); /* takes no bytes from f */
  expect_claim(&t, 0, f, 1, (uint64_t[]){0, 100});
  cr_assert_eq(weft_taint_claims(&t), 1);
  weft_taint_set(&t, &e.a, &g, R(5, 6), 0); /* no failure: nothing */
  cr_assert_eq(weft_taint_claims(&t), 1);
  weft_graph_prune(&g, h);
  cr_assert_eq(weft_graph_len(&g), 1);

  weft_taint_clear(&t, &e.a, &g);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

/* ---- a byte model ------------------------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

enum { MODEL_BYTES = 256, MODEL_SLOTS = 8, MODEL_TAINTS = 2 };

static weft_range random_range(uint64_t *s) {
  uint64_t a = rng_next(s) % (MODEL_BYTES + 1);
  uint64_t len;
  switch (rng_next(s) % 4) {
  case 0:
    len = 0;
    break; /* empty */
  case 1:
    len = 1 + rng_next(s) % 4;
    break; /* a few bytes */
  case 2:
    len = 1 + rng_next(s) % 32;
    break; /* a block */
  default:
    len = rng_next(s) % MODEL_BYTES;
    break; /* anything */
  }
  uint64_t b = a + len > MODEL_BYTES ? MODEL_BYTES : a + len;
  return R(a, b);
}

static void check_model(const weft_error_graph *g, weft_taint *const *t,
                        uint64_t model[][MODEL_BYTES], uint64_t *s, int step) {
  uint64_t seen[MODEL_TAINTS * MODEL_BYTES];
  size_t nseen = 0;
  for (int k = 0; k < MODEL_TAINTS; k++) {
    fs_check_taint(t[k], true);
    for (uint64_t b = 0; b < MODEL_BYTES; b++) {
      weft_failure_id got = weft_taint_failure(t[k], R(b, b + 1));
      cr_assert_eq(got, model[k][b],
                   "step %d, allocation %d, byte %" PRIu64 ": #%" PRIu64 ", model #%" PRIu64, step,
                   k, b, got, model[k][b]);
      if (!model[k][b]) continue;
      bool dup = false;
      for (size_t i = 0; i < nseen && !dup; i++) dup = seen[i] == model[k][b];
      if (!dup) seen[nseen++] = model[k][b];
    }
    /* A wider read names some failure present in that range, or none. */
    weft_range r = random_range(s);
    weft_failure_id got = weft_taint_failure(t[k], r);
    bool any = false, present = false;
    for (uint64_t b = r.start; b < r.end; b++) {
      any |= model[k][b] != 0;
      present |= got && model[k][b] == got;
    }
    cr_assert_eq(got != 0, any, "step %d: read [%" PRIu64 ",%" PRIu64 ")", step, r.start, r.end);
    if (got) cr_assert(present, "step %d: #%" PRIu64 " does not claim that range", step, got);
  }
  cr_assert_eq(weft_graph_len(g), nseen, "step %d: %" PRIu64 " nodes, %zu failures claimed", step,
               weft_graph_len(g), nseen);
  for (size_t i = 0; i < nseen; i++) {
    uint32_t carriers = 0;
    for (int k = 0; k < MODEL_TAINTS; k++) {
      bool in = false;
      for (uint64_t b = 0; b < MODEL_BYTES && !in; b++) in = model[k][b] == seen[i];
      carriers += in;
    }
    const weft_graph_node *nd = weft_graph_node_of(g, seen[i]);
    cr_assert_not_null(nd, "step %d: #%" PRIu64 " is claimed but has no node", step, seen[i]);
    cr_assert_eq(nd->tagged, carriers, "step %d: #%" PRIu64 " tagged %" PRIu32 ", carried by %u",
                 step, seen[i], nd->tagged, carriers);
  }
}

Test(taint, many_ranges_and_failures_behave_like_a_byte_model) {
  fs_env e;
  fs_open(&e);
  for (uint64_t seed = 1; seed <= 6; seed++) {
    weft_error_graph g;
    weft_graph_init(&g, &e.a);
    weft_taint a = {0}, b = {0};
    weft_taint *t[MODEL_TAINTS] = {&a, &b};
    uint64_t model[MODEL_TAINTS][MODEL_BYTES] = {{0}};
    weft_failure_id slot[MODEL_SLOTS] = {0};
    uint64_t s = 0x9e3779b97f4a7c15u * seed;
    uint32_t most_claims = 0, most_ranges = 0;

    for (int step = 0; step < 3000; step++) {
      int k = (int)(rng_next(&s) % MODEL_TAINTS);
      uint64_t op = rng_next(&s) % 100;
      weft_range r = random_range(&s);
      if (op < 55) { /* taint with one of 8 failures */
        int i = (int)(rng_next(&s) % MODEL_SLOTS);
        if (!slot[i] || !weft_graph_node_of(&g, slot[i])) /* gone: a new failure takes the slot */
          slot[i] = fresh(&g, "model");
        weft_taint_set(t[k], &e.a, &g, r, slot[i]);
        weft_graph_prune(&g, slot[i]); /* an empty range claimed nothing */
        for (uint64_t x = r.start; x < r.end; x++) model[k][x] = slot[i];
      } else if (op < 98) {
        weft_taint_written(t[k], &e.a, &g, r);
        for (uint64_t x = r.start; x < r.end; x++) model[k][x] = 0;
      } else {
        weft_taint_clear(t[k], &e.a, &g);
        memset(model[k], 0, sizeof model[k]);
      }
      for (int j = 0; j < MODEL_SLOTS; j++) /* a failure absent from the model has no node */
        if (slot[j] && !weft_graph_node_of(&g, slot[j])) {
          for (int kk = 0; kk < MODEL_TAINTS; kk++)
            for (uint64_t x = 0; x < MODEL_BYTES; x++)
              cr_assert_neq(model[kk][x], slot[j], "#%" PRIu64 " lost its node", slot[j]);
        }
      check_model(&g, t, model, &s, step);
      uint32_t nc = weft_taint_claims(t[k]);
      if (nc > most_claims) most_claims = nc;
      for (uint32_t i = 0; i < nc; i++)
        if (weft_taint_claim(t[k], i)->n > most_ranges) most_ranges = weft_taint_claim(t[k], i)->n;
    }
    cr_assert_geq(most_claims, 4, "the run went past the inline claim (%" PRIu32 ")", most_claims);
    cr_assert_geq(most_ranges, 4, "the run went past the inline range (%" PRIu32 ")", most_ranges);
    weft_taint_clear(&a, &e.a, &g);
    weft_taint_clear(&b, &e.a, &g);
    cr_assert_eq(weft_graph_len(&g), 0, "seed %" PRIu64 ": clearing both emptied the graph", seed);
    weft_graph_destroy(&g);
  }
  fs_close(&e);
}

/* ---- allocation ------------------------------------------------------------------------- */

Test(taint, one_claim_with_one_range_allocates_nothing) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_failure_id f = fresh(&g, "f"); /* the graph's table is allocated here */
  weft_failure_id h = fresh(&g, "h");

  uint64_t before = fs_allocs(&e);
  weft_taint t = {0};
  for (int i = 0; i < 1000; i++) {
    weft_taint_set(&t, &e.a, &g, R(0, 100), f);
    weft_taint_set(&t, &e.a, &g, R(0, 100), f);  /* re-taint */
    weft_taint_set(&t, &e.a, &g, R(50, 150), f); /* grows the one range */
    cr_assert_eq(weft_taint_failure(&t, R(10, 20)), f);
    weft_taint_set(&t, &e.a, &g, R(0, 150), h); /* takeover of every byte */
    weft_taint_written(&t, &e.a, &g, R(0, 50)); /* trims, no split */
    cr_assert_eq(weft_taint_failure(&t, R(60, 61)), h);
    if (i % 2)
      weft_taint_written(&t, &e.a, &g, R(0, 150));
    else
      weft_taint_clear(&t, &e.a, &g);
    cr_assert(weft_taint_is_clean(&t));
    if (!weft_graph_node_of(&g, f)) f = fresh(&g, "f");
    if (!weft_graph_node_of(&g, h)) h = fresh(&g, "h");
  }
  cr_assert_eq(fs_allocs(&e), before, "%" PRIu64 " allocations in the common case",
               fs_allocs(&e) - before);

  weft_graph_prune(&g, f);
  weft_graph_prune(&g, h);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(taint, the_execution_view_without_a_graph_answers_the_same) {
  fs_env e;
  fs_open(&e);
  weft_taint t = {0};

  weft_taint_set(&t, &e.a, NULL, R(0, 100), 7);
  weft_taint_set(&t, &e.a, NULL, R(25, 75), 9);
  weft_taint_set(&t, &e.a, NULL, R(200, 210), 7);
  cr_assert_eq(weft_taint_failure(&t, R(0, 1)), 7);
  cr_assert_eq(weft_taint_failure(&t, R(30, 31)), 9);
  cr_assert_eq(weft_taint_failure(&t, R(205, 206)), 7);
  cr_assert_eq(weft_taint_failure(&t, R(100, 200)), 0);
  expect_claim(&t, 0, 7, 3, (uint64_t[]){0, 25, 75, 100, 200, 210});
  expect_claim(&t, 1, 9, 1, (uint64_t[]){25, 75});

  weft_taint_written(&t, &e.a, NULL, R(25, 75));
  cr_assert_eq(weft_taint_claims(&t), 1, "the emptied claim is dropped");
  cr_assert_eq(weft_taint_failure(&t, R(30, 31)), 0);
  weft_taint_set(&t, &e.a, NULL, R(0, 300), 9);
  cr_assert_eq(weft_taint_claims(&t), 1);
  cr_assert_eq(weft_taint_failure(&t, R(0, 1)), 9);
  weft_taint_set(&t, &e.a, NULL, R(5, 5), 11);
  cr_assert_eq(weft_taint_failure(&t, R(5, 5)), 0);
  weft_taint_clear(&t, &e.a, NULL);
  cr_assert(weft_taint_is_clean(&t));
  cr_assert_eq(weft_taint_failure(&t, R(0, 300)), 0);
  fs_close(&e);
}

Test(taint, running_out_of_memory_while_splitting_keeps_the_bytes_tainted) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);
  weft_taint t = {0};

  /* A write in the middle needs a second range: refused, the whole range
   * stays tainted (tainted unless proven written). */
  weft_failure_id f = fresh(&g, "f");
  weft_taint_set(&t, &e.a, &g, R(0, 100), f);
  weft_counting_allocator_fail_at(e.ca, 1);
  weft_taint_written(&t, &e.a, &g, R(40, 60));
  cr_assert_eq(weft_counting_allocator_counts(e.ca).failed, 1, "the split asked for memory");
  for (uint64_t b = 0; b < 100; b++)
    cr_assert_eq(weft_taint_failure(&t, R(b, b + 1)), f, "byte %" PRIu64 " lost its taint", b);
  cr_assert_eq(fs_tagged(&g, f), 1);

  /* A new failure in the middle: the old one cannot split, and both claim
   * the middle bytes; nothing is released. */
  weft_failure_id h = fresh(&g, "h");
  weft_counting_allocator_fail_at(e.ca, 1);
  weft_taint_set(&t, &e.a, &g, R(25, 75), h);
  weft_graph_prune(&g, h);
  for (uint64_t b = 0; b < 100; b++)
    cr_assert_neq(weft_taint_failure(&t, R(b, b + 1)), 0, "byte %" PRIu64 " lost its taint", b);
  cr_assert_eq(fs_tagged(&g, f), 1);
  cr_assert_leq(fs_tagged(&g, h), 1);
  fs_check_taint(&t, false);
  weft_taint_clear(&t, &e.a, &g);
  cr_assert_eq(weft_graph_len(&g), 0);

  /* No room for a second range of one failure: the nearest widens over it. */
  f = fresh(&g, "f");
  weft_taint_set(&t, &e.a, &g, R(0, 10), f);
  weft_counting_allocator_fail_at(e.ca, 1);
  weft_taint_set(&t, &e.a, &g, R(20, 30), f);
  for (uint64_t b = 20; b < 30; b++)
    cr_assert_eq(weft_taint_failure(&t, R(b, b + 1)), f, "byte %" PRIu64 " lost its taint", b);
  cr_assert_eq(weft_taint_failure(&t, R(0, 1)), f);
  cr_assert_eq(fs_tagged(&g, f), 1);
  weft_taint_clear(&t, &e.a, &g);

  /* No room for a second claim: the bytes stay claimed by the first. */
  f = fresh(&g, "f");
  h = fresh(&g, "h");
  weft_taint_set(&t, &e.a, &g, R(0, 10), f);
  weft_counting_allocator_fail_at(e.ca, 1);
  weft_taint_set(&t, &e.a, &g, R(20, 30), h);
  weft_graph_prune(&g, h);
  for (uint64_t b = 20; b < 30; b++)
    cr_assert_neq(weft_taint_failure(&t, R(b, b + 1)), 0, "byte %" PRIu64 " lost its taint", b);
  fs_check_refcounts(&g, (weft_taint *const[]){&t}, 1, 0);
  weft_counting_allocator_fail_at(e.ca, 0);
  weft_taint_clear(&t, &e.a, &g);
  cr_assert_eq(weft_graph_len(&g), 0);

  weft_graph_destroy(&g);
  fs_close(&e);
}
