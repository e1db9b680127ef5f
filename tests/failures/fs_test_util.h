/* Helpers shared by the failure-store suites (error graph, taint, the
 * failures surface): a counting allocator that every test closes with no
 * block left, ranges and targets, error expectations, and the structural
 * check behind invariant 1 (every node's tagged count equals its carriers,
 * no node is left untagged). */
#ifndef WEFT_TESTS_FAILURES_FS_TEST_UTIL_H
#define WEFT_TESTS_FAILURES_FS_TEST_UTIL_H

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <weft/weft.h>

#include "core/error.h"
#include "core/error_graph.h"
#include "core/taint.h"
#include "core/failures.h"

#include "support/asan_criterion.h"

#define FS_TOMB UINT64_MAX /* error_graph.c's tombstone id */

/* ---- allocator ------------------------------------------------------------------------- */

typedef struct fs_env {
  weft_counting_allocator *ca;
  weft_allocator a;
} fs_env;

static inline void fs_open(fs_env *e) {
  memset(e, 0, sizeof *e);
  weft_status st = weft_counting_allocator_create(&e->ca);
  cr_assert_null(st, "counting allocator");
  e->a = weft_counting_allocator_get(e->ca);
}

static inline uint64_t fs_allocs(const fs_env *e) {
  return weft_counting_allocator_counts(e->ca).allocs;
}

/* Every block returned, then the allocator goes (and LSan is asked). */
static inline void fs_close(fs_env *e) {
  weft_alloc_counts c = weft_counting_allocator_counts(e->ca);
  cr_assert_eq(c.live_blocks, 0, "%" PRIu64 " allocator blocks left (%" PRIu64 " bytes)",
               c.live_blocks, c.live_bytes);
  weft_counting_allocator_destroy(e->ca);
  e->ca = NULL;
  ASSERT_NO_LEAKS();
}

/* ---- ranges, targets, errors ----------------------------------------------------------- */

static inline weft_range R(uint64_t start, uint64_t end) {
  return (weft_range){start, end};
}

/* An allocated target over [start, end) of the allocation whose taint is |t|. */
static inline weft_target T(weft_taint *t, uint64_t memory, uint64_t start, uint64_t end) {
  return (weft_target){.taint = t, .memory = memory, .range = {start, end}, .allocated = true};
}

/* A target whose memory was never allocated. */
static inline weft_target UNALLOC(uint64_t memory) {
  return (weft_target){.taint = NULL, .memory = memory, .range = {0, 0}, .allocated = false};
}

static inline weft_status boom(const char *what) {
  return weft_error_make(WEFT_ERR_GENERIC, "%s", what);
}

/* The formatted error (a static buffer per call site is enough for tests). */
static inline const char *fmt(weft_status st, char *buf, size_t cap) {
  weft_error_format(st, buf, cap);
  return buf;
}

#define EXPECT_CONTAINS(st, needle)                                                                \
  do {                                                                                             \
    char buf_c_[4096];                                                                             \
    fmt((st), buf_c_, sizeof buf_c_);                                                              \
    cr_assert(strstr(buf_c_, (needle)) != NULL, "'%s' does not mention '%s'", buf_c_, (needle));   \
  } while (0)

/* Asserts |st| is Several{n errors}. */
#define EXPECT_SEVERAL(st, n)                                                                      \
  do {                                                                                             \
    char buf_s_[4096] = "Ok";                                                                      \
    if (st) fmt((st), buf_s_, sizeof buf_s_);                                                      \
    cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_SEVERAL, "expected Several, got %s", buf_s_);    \
    cr_assert_eq(weft_error_count(st), (size_t)(n), "expected %zu errors in %s", (size_t)(n),      \
                 buf_s_);                                                                          \
  } while (0)

/* Asserts |u| is Unwritten{#id, claimed, root of |kind| with |message|}. */
static inline void expect_unwritten(weft_status u, weft_failure_id id, uint32_t claimed,
                                    weft_error_kind kind, const char *message) {
  char buf[4096] = "NULL";
  if (u) fmt(u, buf, sizeof buf);
  cr_assert_eq(weft_error_kind_of(u), WEFT_ERR_UNWRITTEN, "expected Unwritten, got %s", buf);
  cr_assert_eq(weft_error_failure_id(u), id, "failure id in %s (expected #%" PRIu64 ")", buf, id);
  cr_assert_eq(weft_error_claimed(u), claimed, "claimed in %s (expected %" PRIu32 ")", buf,
               claimed);
  weft_status root = weft_error_root(u);
  cr_assert_eq(weft_error_kind_of(root), kind, "root kind in %s (expected %s)", buf,
               weft_error_kind_name(kind));
  if (message) cr_assert_str_eq(weft_error_message(root), message, "root message in %s", buf);
  char hash[32];
  snprintf(hash, sizeof hash, "#%" PRIu64, id);
  cr_assert(strstr(buf, hash) != NULL, "'%s' does not name %s", buf, hash);
}

/* ---- graph inspection ------------------------------------------------------------------- */

static inline bool fs_live(const weft_graph_node *nd) {
  return nd->id != 0 && nd->id != FS_TOMB;
}

/* Live nodes found by walking the table (must agree with weft_graph_len). */
static inline uint64_t fs_count_nodes(const weft_error_graph *g) {
  uint64_t n = 0;
  for (uint64_t i = 0; i < g->cap; i++) n += fs_live(&g->nodes[i]);
  return n;
}

static inline uint32_t fs_tagged(const weft_error_graph *g, weft_failure_id id) {
  const weft_graph_node *nd = weft_graph_node_of(g, id);
  return nd ? nd->tagged : 0;
}

/* The ranges of |t|'s claim by |f| must be sorted, disjoint, non-empty and
 * fused (no two touching); the claims carry distinct ids and, when
 * |partition| is set, never overlap one another. */
static inline void fs_check_taint(const weft_taint *t, bool partition) {
  uint32_t n = weft_taint_claims(t);
  for (uint32_t i = 0; i < n; i++) {
    const weft_claim_ranges *c = weft_taint_claim(t, i);
    cr_assert_not_null(c);
    cr_assert_neq(c->failure, 0, "claim %" PRIu32 " has no failure", i);
    cr_assert_gt(c->n, 0, "claim %" PRIu32 " (#%" PRIu64 ") is empty", i, c->failure);
    const weft_range *v = c->cap ? c->many : &c->one;
    for (uint32_t k = 0; k < c->n; k++) {
      cr_assert_lt(v[k].start, v[k].end, "#%" PRIu64 ": empty range", c->failure);
      if (k)
        cr_assert_lt(v[k - 1].end, v[k].start,
                     "#%" PRIu64 ": ranges [%" PRIu64 ",%" PRIu64 ") [%" PRIu64 ",%" PRIu64
                     ") unsorted, overlapping or not fused",
                     c->failure, v[k - 1].start, v[k - 1].end, v[k].start, v[k].end);
    }
    for (uint32_t j = 0; j < i; j++) {
      const weft_claim_ranges *d = weft_taint_claim(t, j);
      cr_assert_neq(d->failure, c->failure, "two claims by #%" PRIu64, c->failure);
      if (!partition) continue;
      const weft_range *w = d->cap ? d->many : &d->one;
      for (uint32_t k = 0; k < c->n; k++)
        for (uint32_t l = 0; l < d->n; l++)
          cr_assert(v[k].end <= w[l].start || w[l].end <= v[k].start,
                    "#%" PRIu64 " and #%" PRIu64 " claim the same bytes", c->failure, d->failure);
    }
  }
}

static inline bool fs_claims(const weft_taint *t, weft_failure_id f) {
  for (uint32_t i = 0; i < weft_taint_claims(t); i++)
    if (weft_taint_claim(t, i)->failure == f) return true;
  return false;
}

/* Invariant 1 over the carriers |taints|: every node is tagged exactly once
 * per taint claiming bytes by it plus once per unallocated record naming it;
 * every claimed id has a node; no node is left untagged and unheld except
 * |provisional| (0: none). */
static inline void fs_check_refcounts(const weft_error_graph *g, weft_taint *const *taints,
                                      size_t n, weft_failure_id provisional) {
  cr_assert_eq(fs_count_nodes(g), weft_graph_len(g), "len disagrees with the table");
  for (uint64_t i = 0; i < g->cap; i++) {
    const weft_graph_node *nd = &g->nodes[i];
    if (!fs_live(nd)) continue;
    uint32_t carriers = 0;
    for (size_t k = 0; k < n; k++) carriers += fs_claims(taints[k], nd->id);
    for (uint64_t k = 0; k < g->unallocated_len; k++)
      carriers += g->unallocated[k].memory && g->unallocated[k].failure == nd->id;
    cr_assert_eq(nd->tagged, carriers, "#%" PRIu64 ": tagged %" PRIu32 ", carried by %" PRIu32,
                 nd->id, nd->tagged, carriers);
    if (nd->id != provisional)
      cr_assert(nd->tagged > 0 || nd->holds > 0, "#%" PRIu64 " is left untagged", nd->id);
  }
  for (size_t k = 0; k < n; k++) {
    fs_check_taint(taints[k], true);
    for (uint32_t i = 0; i < weft_taint_claims(taints[k]); i++) {
      weft_failure_id f = weft_taint_claim(taints[k], i)->failure;
      cr_assert_not_null(weft_graph_node_of(g, f), "a taint claims #%" PRIu64 " with no node", f);
    }
  }
}

#endif
