/* The error graph (core/error_graph.h): nodes refcounted
 * by their carriers and removed the moment none is left, prune and replace,
 * reports that walk the skip chain back to the root, the skip cap, ids that
 * are never reused, de-duplicated Several reports, unallocated claims, holds,
 * and a table that survives churn without growing or allocating. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "core/error.h"
#include "core/error_graph.h"
#include "core/taint.h"
#include "fs_test_util.h"

TestSuite(error_graph, .timeout = 30);

/* A skip record: kernel |k| read |needed| and would have written |produced|. */
static weft_skip_record skip(uint32_t k, uint64_t launch, uint64_t needed, uint64_t produced) {
  weft_skip_record r = {.kernel = k, .launch = launch, .needed = needed, .nproduced = 1};
  r.produced[0] = produced;
  return r;
}

static const char *kernel_names(void *ctx, uint32_t k) {
  (void)ctx;
  static const char *names[] = {"fill", "scale", "gather", "reduce"};
  return k < 4 ? names[k] : NULL;
}

/* ---- the error graph -------------------------------------------------------------------- */

Test(error_graph, a_node_lives_while_something_carries_it_and_no_longer) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f = weft_graph_insert(&g, boom("launch failed"), NULL);
  cr_assert_neq(f, 0);
  cr_assert_eq(weft_graph_len(&g), 1);
  cr_assert_eq(fs_tagged(&g, f), 0, "a new node starts untagged");

  /* Two allocations carry it. */
  weft_taint a = {0}, b = {0};
  weft_taint_set(&a, &e.a, &g, R(0, 64), f);
  weft_taint_set(&b, &e.a, &g, R(0, 64), f);
  cr_assert_eq(fs_tagged(&g, f), 2);

  weft_taint_clear(&a, &e.a, &g);
  cr_assert_eq(fs_tagged(&g, f), 1, "one carrier left");
  cr_assert_not_null(weft_graph_error(&g, f), "still carried: still there");
  cr_assert_eq(weft_graph_len(&g), 1);

  weft_taint_clear(&b, &e.a, &g);
  cr_assert_null(weft_graph_node_of(&g, f), "removed the moment the last carrier let go");
  cr_assert_null(weft_graph_error(&g, f));
  cr_assert_eq(weft_graph_len(&g), 0);

  /* The same through bare tag/untag. */
  weft_failure_id h = weft_graph_insert(&g, boom("again"), NULL);
  weft_graph_tag(&g, h);
  weft_graph_tag(&g, h);
  weft_graph_untag(&g, h);
  cr_assert_eq(fs_tagged(&g, h), 1);
  weft_graph_untag(&g, h);
  cr_assert_null(weft_graph_node_of(&g, h));
  cr_assert_eq(weft_graph_len(&g), 0);

  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, a_failure_that_tainted_nothing_is_pruned) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f = weft_graph_insert(&g, boom("nothing to claim"), NULL);
  cr_assert_eq(weft_graph_len(&g), 1);
  /* Tainting only empty ranges claims nothing; prune then removes it. */
  weft_taint a = {0};
  weft_taint_set(&a, &e.a, &g, R(8, 8), f);
  cr_assert(weft_taint_is_clean(&a));
  weft_graph_prune(&g, f);
  cr_assert_null(weft_graph_node_of(&g, f));
  cr_assert_null(weft_graph_error(&g, f));
  cr_assert_eq(weft_graph_len(&g), 0);

  /* Through the store: every target is unheld or empty. */
  weft_failures fs;
  weft_failures_init(&fs, &e.a);
  weft_target w[] = {T(NULL, 1, 0, 64), T(&a, 2, 16, 16)};
  weft_failures_taint(&fs, boom("claims nothing"), w, 2);
  cr_assert_eq(weft_graph_len(&fs.graph), 0, "base::taint prunes a failure that claimed nothing");
  cr_assert(weft_taint_is_clean(&a));
  weft_failures_destroy(&fs);

  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, replacing_an_error_leaves_the_carriers_pointing_at_the_new_one) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f = weft_graph_insert(&g, weft__error_torn_down(), NULL);
  weft_taint a = {0}, b = {0};
  weft_taint_set(&a, &e.a, &g, R(0, 32), f);
  weft_taint_set(&b, &e.a, &g, R(100, 200), f);
  cr_assert_eq(weft_error_kind_of(weft_graph_error(&g, f)), WEFT_ERR_TORN_DOWN);

  weft_graph_replace(&g, f, weft_error_make(WEFT_ERR_VALIDATION, "bad grid"));
  cr_assert_eq(weft_taint_failure(&a, R(0, 32)), f, "the carriers keep the id");
  cr_assert_eq(weft_taint_failure(&b, R(150, 151)), f);
  cr_assert_eq(fs_tagged(&g, f), 2, "replace does not touch the count");
  weft_status now = weft_graph_error(&g, f);
  cr_assert_eq(weft_error_kind_of(now), WEFT_ERR_VALIDATION);
  cr_assert_str_eq(weft_error_message(now), "bad grid");

  weft_status r = weft_graph_report(&g, f, 7);
  expect_unwritten(r, f, 2, WEFT_ERR_VALIDATION, "bad grid");
  weft_error_free(r);

  /* Replacing a missing node is a no-op (the error is freed). */
  weft_graph_replace(&g, f + 100, boom("nobody reads this"));
  cr_assert_eq(weft_graph_len(&g), 1);

  weft_taint_clear(&a, &e.a, &g);
  weft_taint_clear(&b, &e.a, &g);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, a_report_walks_the_skip_chain_back_to_the_root) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  /* root on memory 1; fill(1)->2, scale(2)->3, gather(3)->4; an unrelated
   * reduce(1)->9 between them. */
  weft_failure_id f = weft_graph_insert(&g, boom("root cause"), NULL);
  weft_graph_tag(&g, f);
  weft_skip_record r0 = skip(0, 11, 1, 2), r1 = skip(1, 12, 2, 3), rx = skip(3, 13, 1, 9),
                   r2 = skip(2, 14, 3, 4);
  weft_graph_skipped(&g, f, &r0);
  weft_graph_skipped(&g, f, &r1);
  weft_graph_skipped(&g, f, &rx);
  weft_graph_skipped(&g, f, &r2);

  weft_status r = weft_graph_report(&g, f, 4);
  expect_unwritten(r, f, 1, WEFT_ERR_GENERIC, "root cause");
  cr_assert_eq(weft_error_chain_length(r), 3, "three hops, the unrelated skip left out");
  cr_assert_str_eq(weft_error_chain_at(r, 0), "skipped kernel #2 (launch 14): it needed memory 3");
  cr_assert_str_eq(weft_error_chain_at(r, 1), "skipped kernel #1 (launch 12): it needed memory 2");
  cr_assert_str_eq(weft_error_chain_at(r, 2), "skipped kernel #0 (launch 11): it needed memory 1");
  EXPECT_CONTAINS(r, "root cause");
  cr_assert_null(weft_error_origin(r), "no launch failed yet");
  weft_error_free(r);

  /* Named kernels, and the launch that failed: the origin, not a hop. */
  g.namer = (weft_graph_namer){.kernel = kernel_names, .ctx = NULL};
  weft_graph_set_origin(&g, f, 3, 10);
  r = weft_graph_report(&g, f, 4);
  cr_assert_eq(weft_error_chain_length(r), 3, "only the skipped hops");
  cr_assert(strstr(weft_error_chain_at(r, 0), "'gather'") != NULL, "%s", weft_error_chain_at(r, 0));
  cr_assert(strstr(weft_error_chain_at(r, 2), "'fill'") != NULL, "%s", weft_error_chain_at(r, 2));
  cr_assert_str_eq(weft_error_origin(r), "kernel 'reduce' (launch 10)");
  EXPECT_CONTAINS(r, "; failed: kernel 'reduce' (launch 10); chain: skipped kernel 'gather'");
  weft_error_free(r);
  g.namer = (weft_graph_namer){0};
  weft_graph_node *nd = (weft_graph_node *)weft_graph_node_of(&g, f);
  nd->has_origin = false;

  /* A buffer in the middle: only the hops behind it. */
  r = weft_graph_report(&g, f, 3);
  cr_assert_eq(weft_error_chain_length(r), 2);
  cr_assert_str_eq(weft_error_chain_at(r, 0), "skipped kernel #1 (launch 12): it needed memory 2");
  weft_error_free(r);

  /* A buffer no record produced: the root alone. */
  r = weft_graph_report(&g, f, 1);
  expect_unwritten(r, f, 1, WEFT_ERR_GENERIC, "root cause");
  cr_assert_eq(weft_error_chain_length(r), 0);
  weft_error_free(r);

  /* A gone node reports nothing. */
  weft_graph_untag(&g, f);
  cr_assert_null(weft_graph_report(&g, f, 4));
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, the_skip_cap_keeps_the_newest_records) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f = weft_graph_insert(&g, boom("root"), NULL);
  weft_graph_tag(&g, f);
  /* 20 hops: kernel i read memory 100+i and wrote 100+i+1. */
  for (uint32_t i = 0; i < 20; i++) {
    weft_skip_record r = skip(i, i + 1, 100 + i, 100 + i + 1);
    weft_graph_skipped(&g, f, &r);
  }
  const weft_graph_node *nd = weft_graph_node_of(&g, f);
  cr_assert_eq(nd->nskips, WEFT_SKIP_KEEP);
  cr_assert_eq(nd->nskips, 16);
  cr_assert_eq(nd->skipped_total, 20);

  /* The newest buffer: its 16 kept hops (kernels 19..4), then the note. */
  weft_status r = weft_graph_report(&g, f, 120);
  cr_assert_eq(weft_error_chain_length(r), 17);
  cr_assert_str_eq(weft_error_chain_at(r, 0),
                   "skipped kernel #19 (launch 20): it needed memory 119");
  cr_assert_str_eq(weft_error_chain_at(r, 15),
                   "skipped kernel #4 (launch 5): it needed memory 104");
  cr_assert(strstr(weft_error_chain_at(r, 16), "4 older") != NULL, "%s",
            weft_error_chain_at(r, 16));
  cr_assert(strstr(weft_error_chain_at(r, 16), "dropped") != NULL, "%s",
            weft_error_chain_at(r, 16));
  weft_error_free(r);

  /* A buffer only a dropped record produced: the root alone, no note. */
  r = weft_graph_report(&g, f, 102);
  cr_assert_eq(weft_error_chain_length(r), 0);
  weft_error_free(r);

  weft_graph_untag(&g, f);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, pruning_leaves_a_carried_failure_alone) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f = weft_graph_insert(&g, boom("carried"), NULL);
  weft_taint a = {0};
  weft_taint_set(&a, &e.a, &g, R(0, 10), f);
  weft_graph_prune(&g, f);
  cr_assert_not_null(weft_graph_node_of(&g, f), "a carried node is left alone");
  cr_assert_str_eq(weft_error_message(weft_graph_error(&g, f)), "carried");
  cr_assert_eq(fs_tagged(&g, f), 1);
  cr_assert_eq(weft_taint_failure(&a, R(0, 10)), f);

  weft_taint_written(&a, &e.a, &g, R(0, 10));
  cr_assert_null(weft_graph_node_of(&g, f));
  weft_graph_prune(&g, f); /* a missing node: no-op */
  weft_graph_untag(&g, 0); /* untag(None): no-op */
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

/* ---- ids ---------------------------------------------------------------------------------- */

Test(error_graph, ids_are_non_zero_increasing_and_never_reused_across_removals) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id last = 0;
  for (int i = 0; i < 200; i++) {
    weft_status err = NULL;
    weft_failure_id f = weft_graph_insert(&g, weft__error_torn_down(), &err);
    cr_assert_null(err);
    cr_assert_neq(f, 0);
    cr_assert_gt(f, last, "ids increase: #%" PRIu64 " after #%" PRIu64, f, last);
    last = f;
    if (i % 3 == 0) weft_graph_prune(&g, f); /* removed at once: the id is not handed out again */
  }
  cr_assert_eq(last, 200, "ids are minted from 1 and never skip nor repeat");
  weft_status err = NULL;
  weft_failure_id m = weft_graph_mint(&g, &err);
  cr_assert_eq(m, 201);
  cr_assert(weft_graph_insert_as(&g, m, boom("pre-minted")));
  cr_assert_not(weft_graph_insert_as(&g, m, boom("twice")), "a live id is not taken twice");
  cr_assert_not(weft_graph_insert_as(&g, 0, boom("zero")), "0 is no id");
  cr_assert_str_eq(weft_error_message(weft_graph_error(&g, m)), "pre-minted");
  cr_assert_gt(weft_graph_insert(&g, weft__error_torn_down(), NULL), m);

  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, minting_past_the_last_id_is_a_clear_error) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  g.minted = UINT64_MAX - 2;
  weft_status err = NULL;
  weft_failure_id f = weft_graph_mint(&g, &err);
  cr_assert_neq(f, 0, "the last id is still handed out");
  cr_assert_null(err);
  cr_assert_neq(f, FS_TOMB);

  f = weft_graph_mint(&g, &err);
  cr_assert_eq(f, 0, "no id past the last");
  cr_assert_not_null(err, "the exhaustion is reported");
  cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_GENERIC);
  EXPECT_CONTAINS(err, "exhausted");
  weft_error_free(err);

  /* insert fails the same way and frees the error it was given. */
  err = NULL;
  cr_assert_eq(weft_graph_insert(&g, boom("lost"), &err), 0);
  cr_assert_eq(weft_error_kind_of(err), WEFT_ERR_GENERIC);
  weft_error_free(err);
  cr_assert_eq(weft_graph_len(&g), 0);

  weft_graph_destroy(&g);
  fs_close(&e);
}

/* ---- reports ------------------------------------------------------------------------------ */

Test(error_graph, reports_name_each_failure_once_in_first_seen_order) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f1 = weft_graph_insert(&g, boom("one"), NULL);
  weft_failure_id f2 = weft_graph_insert(&g, boom("two"), NULL);
  weft_failure_id f3 = weft_graph_insert(&g, boom("three"), NULL);
  weft_graph_tag(&g, f1);
  weft_graph_tag(&g, f2);
  weft_graph_tag(&g, f2);
  weft_graph_tag(&g, f3);

  weft_claim claims[] = {{.failure = f2, .memory = 1}, {.failure = f1, .memory = 2},
                         {.failure = f2, .memory = 3}, {.failure = 0, .memory = 9},
                         {.failure = f1, .memory = 4}, {.failure = f3, .memory = 5}};
  weft_status st = weft_graph_reports(&g, claims, 6);
  EXPECT_SEVERAL(st, 3);
  expect_unwritten(weft_error_at(st, 0), f2, 2, WEFT_ERR_GENERIC, "two");
  expect_unwritten(weft_error_at(st, 1), f1, 1, WEFT_ERR_GENERIC, "one");
  expect_unwritten(weft_error_at(st, 2), f3, 1, WEFT_ERR_GENERIC, "three");
  weft_error_free(st);

  /* Three buffers carrying one failure: one error. */
  weft_claim same[] = {
      {.failure = f1, .memory = 1}, {.failure = f1, .memory = 2}, {.failure = f1, .memory = 3}};
  st = weft_graph_reports(&g, same, 3);
  EXPECT_SEVERAL(st, 1);
  weft_error_free(st);

  /* A claim whose node is gone says nothing. */
  weft_graph_untag(&g, f3);
  weft_claim gone[] = {{.failure = f3, .memory = 5}};
  cr_assert_null(weft_graph_reports(&g, gone, 1));

  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, a_single_failure_is_still_wrapped_in_several) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f = weft_graph_insert(&g, boom("alone"), NULL);
  weft_graph_tag(&g, f);
  weft_claim c = {.failure = f, .memory = 42};
  weft_status st = weft_graph_reports(&g, &c, 1);
  EXPECT_SEVERAL(st, 1);
  expect_unwritten(weft_error_at(st, 0), f, 1, WEFT_ERR_GENERIC, "alone");
  weft_error_free(st);

  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, no_claims_report_ok) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  cr_assert_null(weft_graph_reports(&g, NULL, 0));
  weft_claim none[] = {{.failure = 0, .memory = 1}, {.failure = 0, .memory = 2}};
  cr_assert_null(weft_graph_reports(&g, none, 2), "claims of no failure are not reported");

  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, an_unwritten_report_names_the_failure_its_carriers_and_its_root) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f = weft_graph_insert(
      &g, weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 4096, "reserving the output"), NULL);
  for (int i = 0; i < 3; i++) weft_graph_tag(&g, f);
  weft_skip_record r0 = skip(5, 1, 10, 20), r1 = skip(6, 2, 20, 30);
  weft_graph_skipped(&g, f, &r0);
  weft_graph_skipped(&g, f, &r1);

  weft_status u = weft_graph_report(&g, f, 30);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN);
  cr_assert_eq(weft_error_failure_id(u), f);
  cr_assert_eq(weft_error_claimed(u), 3, "claimed is the node's tagged count");
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), WEFT_ERR_OUT_OF_MEMORY);
  cr_assert_eq(weft_error_size(root), 4096);
  cr_assert_str_eq(weft_error_message(root), "reserving the output");
  cr_assert_neq(root, weft_graph_error(&g, f), "the root is a copy, not the node's error");
  cr_assert_eq(weft_error_chain_length(u), 2);
  cr_assert(strstr(weft_error_chain_at(u, 0), "#6") != NULL, "newest hop first: %s",
            weft_error_chain_at(u, 0));
  cr_assert(strstr(weft_error_chain_at(u, 1), "#5") != NULL, "%s", weft_error_chain_at(u, 1));
  char hash[32];
  snprintf(hash, sizeof hash, "#%" PRIu64, f);
  EXPECT_CONTAINS(u, hash);
  EXPECT_CONTAINS(u, "reserving the output");
  weft_error_free(u);

  /* Freeing the report left the node's error alone. */
  cr_assert_str_eq(weft_error_message(weft_graph_error(&g, f)), "reserving the output");
  weft_graph_destroy(&g);
  fs_close(&e);
}

/* ---- unallocated memory ------------------------------------------------------------------- */

Test(error_graph, unallocated_memory_reports_its_recorded_reason) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_graph_fail_unallocated(
      &g, 7, weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, 64, "reservation refused"));
  weft_failure_id f = weft_graph_unallocated_failure(&g, 7);
  cr_assert_neq(f, 0);
  cr_assert_eq(fs_tagged(&g, f), 1, "the record is its one carrier");
  cr_assert_eq(weft_graph_len(&g), 1);
  cr_assert_eq(weft_graph_unallocated_failure(&g, 8), 0);

  weft_claim c[] = {{.memory = 7, .unallocated = true}, {.memory = 7, .unallocated = true}};
  weft_status st = weft_graph_reports(&g, c, 2);
  EXPECT_SEVERAL(st, 1);
  expect_unwritten(weft_error_at(st, 0), f, 1, WEFT_ERR_OUT_OF_MEMORY, "reservation refused");
  weft_error_free(st);

  /* A second reason replaces the first on the same node. */
  weft_graph_fail_unallocated(&g, 7, weft_error_make(WEFT_ERR_PAGE_UPDATE_FORBIDDEN, "capturing"));
  cr_assert_eq(weft_graph_unallocated_failure(&g, 7), f);
  cr_assert_eq(weft_graph_len(&g), 1);
  cr_assert_eq(weft_error_kind_of(weft_graph_error(&g, f)), WEFT_ERR_PAGE_UPDATE_FORBIDDEN);

  /* Dropping the handle forgets the record and the node with it. */
  weft_graph_forget_unallocated(&g, 7);
  cr_assert_eq(weft_graph_unallocated_failure(&g, 7), 0);
  cr_assert_null(weft_graph_node_of(&g, f));
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_forget_unallocated(&g, 7); /* twice: no-op */

  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, unallocated_memory_without_a_reason_still_fails) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_claim c[] = {{.memory = 8, .unallocated = true},
                    {.memory = 8, .unallocated = true},
                    {.memory = 9, .unallocated = true}};
  weft_status st = weft_graph_reports(&g, c, 3);
  EXPECT_SEVERAL(st, 2); /* each memory once */
  weft_status first = weft_error_at(st, 0);
  cr_assert_eq(weft_error_kind_of(first), WEFT_ERR_NOT_FOUND);
  EXPECT_CONTAINS(first, "8");
  EXPECT_CONTAINS(first, "never allocated");
  EXPECT_CONTAINS(weft_error_at(st, 1), "9");
  weft_error_free(st);
  cr_assert_eq(weft_graph_len(&g), 0, "answering minted nothing");

  /* Mixed with a recorded one and a failed buffer: first-seen order. */
  weft_graph_fail_unallocated(&g, 5, boom("no room"));
  weft_failure_id f = weft_graph_insert(&g, boom("kernel failed"), NULL);
  weft_graph_tag(&g, f);
  weft_claim m[] = {{.failure = f, .memory = 1},
                    {.memory = 8, .unallocated = true},
                    {.memory = 5, .unallocated = true}};
  st = weft_graph_reports(&g, m, 3);
  EXPECT_SEVERAL(st, 3);
  cr_assert_eq(weft_error_failure_id(weft_error_at(st, 0)), f);
  cr_assert_eq(weft_error_kind_of(weft_error_at(st, 1)), WEFT_ERR_NOT_FOUND);
  expect_unwritten(weft_error_at(st, 2), weft_graph_unallocated_failure(&g, 5), 1, WEFT_ERR_GENERIC,
                   "no room");
  weft_error_free(st);

  weft_graph_destroy(&g);
  fs_close(&e);
}

/* ---- holds -------------------------------------------------------------------------------- */

Test(error_graph, a_hold_keeps_an_untagged_node_alive) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  weft_failure_id f = weft_graph_insert(&g, boom("held"), NULL);
  weft_graph_tag(&g, f);
  weft_graph_hold(&g, f);
  weft_graph_untag(&g, f);
  cr_assert_not_null(weft_graph_node_of(&g, f), "held: still answering");
  weft_graph_prune(&g, f);
  cr_assert_not_null(weft_graph_node_of(&g, f), "prune leaves a held node alone");
  weft_status r = weft_graph_report(&g, f, 1);
  expect_unwritten(r, f, 0, WEFT_ERR_GENERIC, "held");
  weft_error_free(r);

  weft_graph_unhold(&g, f);
  cr_assert_null(weft_graph_node_of(&g, f), "the last hold let go of an untagged node");
  cr_assert_eq(weft_graph_len(&g), 0);

  /* A hold on a tagged node: unhold leaves it to its carrier. */
  weft_failure_id h = weft_graph_insert(&g, boom("tagged"), NULL);
  weft_graph_tag(&g, h);
  weft_graph_hold(&g, h);
  weft_graph_unhold(&g, h);
  cr_assert_not_null(weft_graph_node_of(&g, h));
  weft_graph_unhold(&g, h); /* unbalanced: no-op */
  cr_assert_not_null(weft_graph_node_of(&g, h));
  weft_graph_untag(&g, h);
  cr_assert_eq(weft_graph_len(&g), 0);

  weft_graph_destroy(&g);
  fs_close(&e);
}

/* ---- churn -------------------------------------------------------------------------------- */

Test(error_graph, the_table_survives_heavy_churn_without_growing_or_allocating) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  /* A window of 8 live failures slides over 100k ids, plus 4 long-lived
   * ones: every step inserts, tags and untags (removing) one node. */
  enum { WINDOW = 8, CYCLES = 100000, WARM = 1000 };
  weft_failure_id keep[4], win[WINDOW] = {0};
  for (int i = 0; i < 4; i++) {
    keep[i] = weft_graph_insert(&g, boom("long-lived"), NULL);
    weft_graph_tag(&g, keep[i]);
  }
  uint64_t allocs = 0, cap = 0;
  weft_failure_id last = 0;
  for (uint64_t i = 0; i < WARM + CYCLES; i++) {
    if (i == WARM) {
      allocs = fs_allocs(&e);
      cap = g.cap;
    }
    weft_failure_id f = weft_graph_insert(&g, weft__error_torn_down(), NULL);
    cr_assert_gt(f, last);
    last = f;
    weft_graph_tag(&g, f);
    weft_failure_id old = win[i % WINDOW];
    if (old) {
      weft_graph_untag(&g, old);
      cr_assert_null(weft_graph_node_of(&g, old));
    }
    win[i % WINDOW] = f;
    cr_assert_leq(g.cap, 256, "the table grew to %" PRIu64 " slots for %" PRIu64 " nodes", g.cap,
                  g.len);
  }
  cr_assert_eq(weft_graph_len(&g), 4 + WINDOW);
  cr_assert_eq(g.cap, cap, "the table kept its size through the churn");
  cr_assert_eq(fs_allocs(&e), allocs, "%" PRIu64 " allocations during the churn",
               fs_allocs(&e) - allocs);
  for (int i = 0; i < 4; i++)
    cr_assert_str_eq(weft_error_message(weft_graph_error(&g, keep[i])), "long-lived");
  for (int i = 0; i < WINDOW; i++) cr_assert_not_null(weft_graph_node_of(&g, win[i]));

  for (int i = 0; i < WINDOW; i++) weft_graph_untag(&g, win[i]);
  for (int i = 0; i < 4; i++) weft_graph_untag(&g, keep[i]);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}

Test(error_graph, removals_in_any_order_keep_every_other_node_findable) {
  fs_env e;
  fs_open(&e);
  weft_error_graph g;
  weft_graph_init(&g, &e.a);

  /* Random inserts and removals over up to 300 live nodes (clusters, wraps
   * around the table's end, growth): every live id is found with its own
   * error, every removed one is gone. */
  enum { MAXLIVE = 300 };
  weft_failure_id live[MAXLIVE];
  size_t n = 0;
  uint64_t s = 88172645463325252u;
  for (int step = 0; step < 20000; step++) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    if (n < MAXLIVE && (n == 0 || s % 100 < 55)) {
      char msg[32];
      snprintf(msg, sizeof msg, "%" PRIu64, g.minted + 1);
      weft_failure_id f = weft_graph_insert(&g, boom(msg), NULL);
      weft_graph_tag(&g, f);
      live[n++] = f;
    } else {
      size_t i = (s >> 8) % n;
      weft_failure_id f = live[i];
      live[i] = live[--n];
      weft_graph_untag(&g, f);
      cr_assert_null(weft_graph_node_of(&g, f));
    }
    if (step % 97 == 0 || n < 4) {
      cr_assert_eq(weft_graph_len(&g), n);
      cr_assert_eq(fs_count_nodes(&g), n);
      for (size_t i = 0; i < n; i++) {
        char msg[32];
        snprintf(msg, sizeof msg, "%" PRIu64, live[i]);
        const weft_graph_node *nd = weft_graph_node_of(&g, live[i]);
        cr_assert_not_null(nd, "step %d: #%" PRIu64 " lost", step, live[i]);
        cr_assert_eq(nd->tagged, 1);
        cr_assert_str_eq(weft_error_message(nd->error), msg);
      }
    }
  }
  while (n) weft_graph_untag(&g, live[--n]);
  cr_assert_eq(weft_graph_len(&g), 0);
  weft_graph_destroy(&g);
  fs_close(&e);
}
