/* The error graph: every failure a device still holds, as nodes refcounted
 * by the allocations that carry them.
 *
 * A node is inserted with tagged == 0; the caller must taint with it or
 * prune it. tag/untag count the (allocation, failure) pairs that claim bytes;
 * untag removes the node the moment the count reaches zero, so the graph
 * leaks iff the program leaks memory. Skip records hold ids only.
 *
 * Owned by one thread (the scheduler): nothing here is thread-safe. The
 * nodes live in an open-addressing table sized at init and grown only when
 * it fills, so steady-state insert/remove allocate nothing. */
#ifndef WEFT_CORE_ERROR_GRAPH_H
#define WEFT_CORE_ERROR_GRAPH_H

#include <weft/weft.h>

#define WEFT_SKIP_KEEP     16 /* skip records kept per failure: those of the newest launches */
#define WEFT_SKIP_PRODUCED WEFT_MAX_BINDINGS /* every written id of a launch, inline */

typedef uint64_t weft_failure_id; /* 0: none */

typedef struct weft_skip_record {
  uint32_t kernel;    /* kernel index on its device */
  uint64_t launch;    /* launch number (1-based) */
  const char *label;  /* the launch's label (the device's, interned), or NULL */
  uint64_t needed;    /* memory id of the input that carried the failure */
  uint32_t nproduced; /* written ids (a launch has at most WEFT_SKIP_PRODUCED) */
  uint64_t produced[WEFT_SKIP_PRODUCED];
} weft_skip_record;

typedef struct weft_graph_node {
  weft_failure_id id; /* 0: empty slot; UINT64_MAX: tombstone */
  weft_status error;  /* owned */
  uint32_t tagged;
  uint32_t holds; /* readers that keep it alive while they answer */
  uint32_t nskips;
  uint64_t skipped_total;
  weft_skip_record *skips; /* WEFT_SKIP_KEEP by launch number, allocated by the first skip */
  /* the launch that failed, when one did (named after the skip hops) */
  uint32_t origin_kernel;
  uint64_t origin_launch;
  const char *origin_label; /* the failed launch's label (interned), or NULL */
  bool has_origin;
} weft_graph_node;

/* Names kernels and memory for reports; NULL: ids only. */
typedef struct weft_graph_namer {
  const char *(*kernel)(void *ctx, uint32_t kernel);
  void (*memory)(void *ctx, uint64_t memory, char *buf, size_t cap);
  void *ctx;
} weft_graph_namer;

typedef struct weft_error_graph {
  weft_graph_node *nodes;
  uint64_t cap, len, used; /* used: live + tombstones */
  weft_failure_id minted;
  uint32_t unallocated_len, unallocated_cap;
  struct weft_unallocated {
    uint64_t memory; /* 0: empty */
    weft_failure_id failure;
  } * unallocated;
  const weft_allocator *alloc;
  weft_graph_namer namer;
} weft_error_graph;

/* Sizes the node table for a few failures now, so the first failures of a
 * run allocate no table. */
void weft_graph_init(weft_error_graph *g, const weft_allocator *alloc);
void weft_graph_destroy(weft_error_graph *g);

/* Mints the next id (non-zero, increasing, never reused). 0 and an
 * InvalidArgument-free Generic error in |*err| when ids are exhausted.
 * Inline: every launch that writes mints one. */
#define WEFT_GRAPH_MAX_ID (UINT64_MAX - 1)
weft_failure_id weft__graph_mint_exhausted(const weft_error_graph *g, weft_status *err);
static inline weft_failure_id weft_graph_mint(weft_error_graph *g, weft_status *err) {
  if (__builtin_expect(g->minted >= WEFT_GRAPH_MAX_ID, 0))
    return weft__graph_mint_exhausted(g, err);
  return ++g->minted;
}
/* A new node (tagged 0) owning |error| with a fresh id; 0 when ids or memory
 * run out (|error| is freed, |*err| says why). */
weft_failure_id weft_graph_insert(weft_error_graph *g, weft_status error, weft_status *err);
/* As insert, with an id minted earlier by weft_graph_mint. */
bool weft_graph_insert_as(weft_error_graph *g, weft_failure_id id, weft_status error);
void weft_graph_tag(weft_error_graph *g, weft_failure_id id);
void weft_graph_untag(weft_error_graph *g, weft_failure_id id); /* 0: no-op */
void weft_graph_prune(weft_error_graph *g, weft_failure_id id); /* only if untagged, unheld */
void weft_graph_replace(weft_error_graph *g, weft_failure_id id, weft_status error);
WEFT_MUST_USE_RESULT weft_status weft_graph_error(const weft_error_graph *g,
                                                  weft_failure_id id); /* borrowed */
const weft_graph_node *weft_graph_node_of(const weft_error_graph *g, weft_failure_id id);
void weft_graph_skipped(weft_error_graph *g, weft_failure_id id, const weft_skip_record *rec);
void weft_graph_set_origin(weft_error_graph *g, weft_failure_id id, uint32_t kernel,
                           uint64_t launch);
/* The launch's label (a string that outlives the graph's reports: the
 * device's interned copy) names the origin, or the skip record of launch
 * |launch| (when it is still kept), in reports: "launch 'LABEL' of kernel
 * 'NAME' (launch N)". */
void weft_graph_label_origin(weft_error_graph *g, weft_failure_id id, const char *label);
void weft_graph_label_skip(weft_error_graph *g, weft_failure_id id, uint64_t launch,
                           const char *label);
void weft_graph_hold(weft_error_graph *g, weft_failure_id id);
void weft_graph_unhold(weft_error_graph *g, weft_failure_id id);
uint64_t weft_graph_len(const weft_error_graph *g);

/* Unwritten{#id, claimed, chain newest hop first, root} for a read of
 * |memory|; NULL when the node is gone. */
WEFT_MUST_USE_RESULT weft_status weft_graph_report(const weft_error_graph *g, weft_failure_id id,
                                                   uint64_t memory);

/* A claim a read or check makes: failure + memory, or an
 * unallocated memory (failure 0). */
typedef struct weft_claim {
  weft_failure_id failure;
  uint64_t memory;
  bool unallocated;
} weft_claim;
/* Several{...} of the distinct failures in first-seen order; NULL (Ok) when
 * there are none. Unallocated claims report the reason recorded by
 * fail_unallocated, or a "never allocated" error. */
WEFT_MUST_USE_RESULT weft_status weft_graph_reports(const weft_error_graph *g,
                                                    const weft_claim *claims, size_t n);

/* Unallocated memory: the reason its reservation failed. The record tags
 * its node (one claim) until weft_graph_forget_unallocated. */
void weft_graph_fail_unallocated(weft_error_graph *g, uint64_t memory, weft_status error);
weft_failure_id weft_graph_unallocated_failure(const weft_error_graph *g, uint64_t memory);
void weft_graph_forget_unallocated(weft_error_graph *g, uint64_t memory);

#endif
