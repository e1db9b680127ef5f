#include "core/failures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"
#include "core/log.h"

void weft_failures_init(weft_failures *fs, const weft_allocator *alloc) {
  memset(fs, 0, sizeof(*fs));
  fs->alloc = alloc;
  weft_graph_init(&fs->graph, alloc);
}

void weft_failures_destroy(weft_failures *fs) {
  weft_graph_destroy(&fs->graph);
  weft__free(fs->alloc, fs->scratch, sizeof(weft_target) * fs->scratch_cap, 16);
  memset(fs, 0, sizeof(*fs));
}

/* The first byte of |r| a claim covers, or UINT64_MAX. */
static uint64_t first_byte(const weft_claim_ranges *c, weft_range r) {
  const weft_range *v = c->cap ? c->many : &c->one;
  for (uint32_t i = 0; i < c->n; i++)
    if (r.start < v[i].end && v[i].start < r.end)
      return v[i].start > r.start ? v[i].start : r.start;
  return UINT64_MAX;
}

/* A growable list of claims that starts on the caller's stack. */
typedef struct claim_list {
  weft_claim *v, *stack;
  size_t n, cap;
} claim_list;

static bool claim_push(claim_list *l, weft_claim c) {
  if (l->n == l->cap) {
    weft_claim *m = malloc(sizeof(*m) * l->cap * 2);
    if (!m) return false;
    memcpy(m, l->v, sizeof(*m) * l->n);
    if (l->v != l->stack) free(l->v);
    l->v = m;
    l->cap *= 2;
  }
  l->v[l->n++] = c;
  return true;
}

/* The end of the range of |c| that covers byte |at|. */
static uint64_t range_end_at(const weft_claim_ranges *c, uint64_t at) {
  const weft_range *v = c->cap ? c->many : &c->one;
  for (uint32_t j = 0; j < c->n; j++)
    if (v[j].start <= at && at < v[j].end) return v[j].end;
  return at + 1;
}

weft_status weft_failures_ensure_written(weft_failures *fs, const weft_target *t, size_t n) {
  weft_claim stack[16];
  claim_list l = {.v = stack, .stack = stack, .n = 0, .cap = 16};
  bool ok = true;
  for (size_t i = 0; i < n && ok; i++) {
    if (!t[i].allocated) {
      ok = claim_push(&l, (weft_claim){.memory = t[i].memory, .unallocated = true});
      continue;
    }
    if (!t[i].taint) continue;
    /* Every failure claiming bytes of the range, in byte order. */
    for (uint64_t from = t[i].range.start; ok && from < t[i].range.end;) {
      const weft_claim_ranges *best = NULL;
      uint64_t at = UINT64_MAX;
      for (uint32_t j = 0; j < weft_taint_claims(t[i].taint); j++) {
        const weft_claim_ranges *c = weft_taint_claim(t[i].taint, j);
        uint64_t b = first_byte(c, (weft_range){from, t[i].range.end});
        if (b < at) at = b, best = c;
      }
      if (!best) break;
      ok = claim_push(&l, (weft_claim){.failure = best->failure, .memory = t[i].memory});
      from = range_end_at(best, at);
    }
  }
  weft_status st = ok ? weft_graph_reports(&fs->graph, l.v, l.n)
                      : weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory to report failures");
  if (l.v != stack) free(l.v);
  return st;
}

bool weft_failures_read_failure(weft_failures *fs, const weft_target *t, size_t n,
                                weft_read_failure *out) {
  for (size_t i = 0; i < n; i++) {
    weft_failure_id f = 0;
    if (!t[i].allocated)
      f = weft_graph_unallocated_failure(&fs->graph, t[i].memory);
    else if (t[i].taint)
      f = weft_taint_failure(t[i].taint, t[i].range);
    if (!f || !weft_graph_node_of(&fs->graph, f)) continue; /* a missing node: go on */
    *out = (weft_read_failure){f, t[i].memory};
    return true;
  }
  return false;
}

/* Taints each held target with |f| (the allocating stream's memory; a target
 * not held anywhere is skipped: questions and taints create nothing). */
static void taint_with(weft_failures *fs, weft_failure_id f, const weft_target *w, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (w[i].taint && w[i].allocated)
      weft_taint_set(w[i].taint, fs->alloc, &fs->graph, w[i].range, f);
}

/* Each recorded failure once, at info (what WEFT_LOG=1 printed before levels). */
static void log_once(weft_failures *fs, weft_failure_id f, weft_status error) {
  fs->logged++;
  if (!weft_log_on(WEFT_LOG_INFO)) return;
  char msg[WEFT_LOG_MAX - 32];
  weft_error_format(error, msg, sizeof(msg));
  weft__log(WEFT_LOG_INFO, "failure #%llu: %s", (unsigned long long)f, msg);
}

void weft_failures_taint(weft_failures *fs, weft_status error, const weft_target *w, size_t n) {
  weft_status why = NULL;
  weft_failure_id f = weft_graph_insert(&fs->graph, error, &why);
  if (!f) { /* the graph cannot hold it: say so rather than lose it silently */
    char msg[256];
    weft_error_format(why, msg, sizeof(msg));
    weft__log(WEFT_LOG_ERROR, "a failure could not be recorded: %s", msg);
    weft_error_free(why);
    return;
  }
  log_once(fs, f, weft_graph_error(&fs->graph, f));
  taint_with(fs, f, w, n);
  weft_graph_prune(&fs->graph, f); /* claimed nothing: gone */
}

void weft_failures_written(weft_failures *fs, const weft_target *w, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (w[i].taint && w[i].allocated)
      weft_taint_written(w[i].taint, fs->alloc, &fs->graph, w[i].range);
}

void weft_failures_fail_unallocated(weft_failures *fs, uint64_t memory, weft_status error) {
  weft_graph_fail_unallocated(&fs->graph, memory, error);
}

void weft_failures_propagate(weft_failures *fs, const weft_read_failure *found, uint32_t kernel,
                             uint64_t launch, const weft_target *w, size_t n) {
  weft_skip_record rec = {.kernel = kernel, .launch = launch, .needed = found->needed};
  for (size_t i = 0; i < n; i++) {
    if (rec.nproduced < WEFT_SKIP_PRODUCED) rec.produced[rec.nproduced] = w[i].memory;
    rec.nproduced++;
  }
  weft_graph_skipped(&fs->graph, found->failure, &rec);
  if (weft_graph_node_of(&fs->graph, found->failure)) taint_with(fs, found->failure, w, n);
}

weft_target *weft_failures_write_set(weft_failures *fs, size_t n) {
  if (n > fs->scratch_cap) {
    uint32_t nc = fs->scratch_cap ? fs->scratch_cap : 8;
    while (nc < n) nc *= 2;
    weft_target *t = weft__alloc(fs->alloc, sizeof(*t) * nc, 16);
    if (!t) return NULL;
    weft__free(fs->alloc, fs->scratch, sizeof(*t) * fs->scratch_cap, 16);
    fs->scratch = t;
    fs->scratch_cap = nc;
  }
  return fs->scratch;
}

weft_failure_id weft_failures_enter_write(weft_failures *fs, weft_failure_id id,
                                          const weft_target *w, size_t n) {
  bool any = false;
  for (size_t i = 0; i < n && !any; i++) any = w[i].range.start < w[i].range.end;
  if (!any) return 0; /* an empty write set mints nothing */
  /* The provisional is payload-free: no string, no backtrace, no allocation. */
  weft_status torn = weft__error_torn_down();
  weft_failure_id p = id;
  if (p) {
    if (!weft_graph_insert_as(&fs->graph, p, torn)) return 0;
  } else if (!(p = weft_graph_insert(&fs->graph, torn, NULL))) {
    return 0;
  }
  taint_with(fs, p, w, n);
  return p;
}

void weft_failures_exit_write(weft_failures *fs, weft_failure_id p, const weft_target *w, size_t n,
                              weft_status error) {
  if (!error) {
    weft_failures_written(fs, w, n); /* every claim on these bytes, older ones included */
  } else if (p) {
    log_once(fs, p, error);
    weft_graph_replace(&fs->graph, p, error);
  } else {
    /* No provisional: an empty write set (nothing to taint), or no room was
     * left for one — then the error still lands on the bytes to be written. */
    bool any = false;
    for (size_t i = 0; i < n && !any; i++) any = w[i].range.start < w[i].range.end;
    if (any)
      weft_failures_taint(fs, error, w, n);
    else
      weft_error_free(error);
  }
  if (p) weft_graph_prune(&fs->graph, p);
}
