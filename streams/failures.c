#include "streams/failures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

void weft_failures_init(weft_failures *fs, const weft_allocator *alloc) {
  memset(fs, 0, sizeof(*fs));
  fs->alloc = alloc;
  weft_graph_init(&fs->graph, alloc);
  const char *log = getenv("WEFT_LOG");
  fs->log = log && *log && strcmp(log, "0") != 0;
}

void weft_failures_destroy(weft_failures *fs) {
  weft_graph_destroy(&fs->graph);
  weft__free(fs->alloc, fs->scratch, sizeof(weft_target) * fs->scratch_cap, 16);
  memset(fs, 0, sizeof(*fs));
}

weft_status weft_failures_ensure_written(weft_failures *fs, const weft_target *t, size_t n) {
  weft_claim stack[16] = {{0}}, *claims = n <= 16 ? stack : malloc(sizeof(weft_claim) * n);
  if (!claims) return weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory to check %zu buffers", n);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (!t[i].allocated) {
      claims[k++] = (weft_claim){.memory = t[i].memory, .unallocated = true};
      continue;
    }
    weft_failure_id f = t[i].taint ? weft_taint_failure(t[i].taint, t[i].range) : 0;
    if (f) claims[k++] = (weft_claim){.failure = f, .memory = t[i].memory};
  }
  weft_status st = weft_graph_reports(&fs->graph, claims, k);
  if (claims != stack) free(claims);
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

static void log_once(weft_failures *fs, weft_failure_id f, weft_status error) {
  fs->logged++;
  if (!fs->log) return;
  char msg[512];
  weft_error_format(error, msg, sizeof(msg));
  fprintf(stderr, "weft: failure #%llu: %s\n", (unsigned long long)f, msg);
}

void weft_failures_taint(weft_failures *fs, weft_status error, const weft_target *w, size_t n) {
  weft_status why = NULL;
  weft_failure_id f = weft_graph_insert(&fs->graph, error, &why);
  if (!f) { /* the graph cannot hold it: say so rather than lose it silently */
    char msg[256];
    weft_error_format(why, msg, sizeof(msg));
    fprintf(stderr, "weft: a failure could not be recorded: %s\n", msg);
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
