#include "core/error_graph.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/error.h"

#define TOMB   UINT64_MAX
#define MAX_ID WEFT_GRAPH_MAX_ID

static bool rehash(weft_error_graph *g, uint64_t cap);

void weft_graph_init(weft_error_graph *g, const weft_allocator *alloc) {
  memset(g, 0, sizeof(*g));
  g->alloc = alloc;
  rehash(g, 64); /* if this fails, the first insert tries again */
}

static void free_skips(weft_error_graph *g, weft_graph_node *nd) {
  weft__free(g->alloc, nd->skips, sizeof(weft_skip_record) * WEFT_SKIP_KEEP, 16);
  nd->skips = NULL;
}

void weft_graph_destroy(weft_error_graph *g) {
  for (uint64_t i = 0; i < g->cap; i++)
    if (g->nodes[i].id && g->nodes[i].id != TOMB) {
      weft_error_free(g->nodes[i].error);
      free_skips(g, &g->nodes[i]);
    }
  weft__free(g->alloc, g->nodes, sizeof(weft_graph_node) * g->cap, 16);
  weft__free(g->alloc, g->unallocated, sizeof(*g->unallocated) * g->unallocated_cap, 16);
  memset(g, 0, sizeof(*g));
}

static uint64_t hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdu;
  x ^= x >> 33;
  return x;
}

static weft_graph_node *find(const weft_error_graph *g, weft_failure_id id) {
  if (!id || id == TOMB || !g->cap) return NULL;
  for (uint64_t i = hash(id) & (g->cap - 1), n = 0; n < g->cap; i = (i + 1) & (g->cap - 1), n++) {
    weft_graph_node *nd = &g->nodes[i];
    if (nd->id == id) return nd;
    if (nd->id == 0) return NULL;
  }
  return NULL;
}

/* Rehashes into a table of |cap| slots (tombstones dropped). */
static bool rehash(weft_error_graph *g, uint64_t cap) {
  weft_graph_node *n = weft__calloc(g->alloc, sizeof(*n) * cap, 16);
  if (!n) return false;
  for (uint64_t i = 0; i < g->cap; i++) {
    weft_graph_node *o = &g->nodes[i];
    if (!o->id || o->id == TOMB) continue;
    uint64_t j = hash(o->id) & (cap - 1);
    while (n[j].id) j = (j + 1) & (cap - 1);
    n[j] = *o;
  }
  weft__free(g->alloc, g->nodes, sizeof(weft_graph_node) * g->cap, 16);
  g->nodes = n;
  g->cap = cap;
  g->used = g->len;
  return true;
}

weft_failure_id weft__graph_mint_exhausted(const weft_error_graph *g, weft_status *err) {
  if (err)
    *err = weft_error_make(WEFT_ERR_GENERIC, "failure ids are exhausted (%" PRIu64 " minted)",
                           g->minted);
  return 0;
}

bool weft_graph_insert_as(weft_error_graph *g, weft_failure_id id, weft_status error) {
  if (!id || id == TOMB || find(g, id)) {
    weft_error_free(error);
    return false;
  }
  /* At most half full counting tombstones; a rehash drops the tombstones
   * and keeps live nodes under a quarter, so churn never allocates. */
  if ((g->used + 1) * 2 > g->cap) {
    uint64_t cap = g->cap ? g->cap : 64;
    while ((g->len + 1) * 4 > cap) cap *= 2;
    if (!rehash(g, cap)) {
      weft_error_free(error);
      return false;
    }
  }
  uint64_t i = hash(id) & (g->cap - 1);
  while (g->nodes[i].id && g->nodes[i].id != TOMB) i = (i + 1) & (g->cap - 1);
  if (g->nodes[i].id == 0) g->used++;
  weft_graph_node *nd = &g->nodes[i];
  memset(nd, 0, sizeof(*nd));
  nd->id = id;
  nd->error = error;
  g->len++;
  return true;
}

weft_failure_id weft_graph_insert(weft_error_graph *g, weft_status error, weft_status *err) {
  weft_failure_id id = weft_graph_mint(g, err);
  if (!id) {
    weft_error_free(error);
    return 0;
  }
  if (!weft_graph_insert_as(g, id, error)) {
    if (err) *err = weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory for the error graph");
    return 0;
  }
  return id;
}

/* Backward-shift deletion (linear probing): the rest of the probe run moves
 * back over the freed slot, so no tombstone is left behind and churn never
 * triggers a rehash, which would allocate a new table every few dozen
 * failures. Moves other nodes: no node pointer survives a removal. */
static void remove_node(weft_error_graph *g, weft_graph_node *nd) {
  weft_error_free(nd->error);
  free_skips(g, nd);
  uint64_t mask = g->cap - 1, hole = (uint64_t)(nd - g->nodes);
  for (uint64_t j = (hole + 1) & mask; g->nodes[j].id; j = (j + 1) & mask) {
    uint64_t home = hash(g->nodes[j].id) & mask;
    /* The node at j stays iff its home lies cyclically in (hole, j]. */
    bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    g->nodes[hole] = g->nodes[j];
    hole = j;
  }
  memset(&g->nodes[hole], 0, sizeof(g->nodes[hole]));
  g->len--;
  g->used--;
}

void weft_graph_tag(weft_error_graph *g, weft_failure_id id) {
  weft_graph_node *nd = find(g, id);
  if (nd) nd->tagged++;
}

void weft_graph_untag(weft_error_graph *g, weft_failure_id id) {
  weft_graph_node *nd = find(g, id);
  if (!nd) return;
  if (nd->tagged) nd->tagged--;
  if (nd->tagged == 0 && nd->holds == 0) remove_node(g, nd); /* at once, never deferred */
}

void weft_graph_prune(weft_error_graph *g, weft_failure_id id) {
  weft_graph_node *nd = find(g, id);
  if (nd && nd->tagged == 0 && nd->holds == 0) remove_node(g, nd);
}

void weft_graph_replace(weft_error_graph *g, weft_failure_id id, weft_status error) {
  weft_graph_node *nd = find(g, id);
  if (!nd) {
    weft_error_free(error); /* nothing can read it */
    return;
  }
  weft_error_free(nd->error);
  nd->error = error;
}

weft_status weft_graph_error(const weft_error_graph *g, weft_failure_id id) {
  weft_graph_node *nd = find(g, id);
  return nd ? nd->error : NULL;
}

const weft_graph_node *weft_graph_node_of(const weft_error_graph *g, weft_failure_id id) {
  return find(g, id);
}

void weft_graph_skipped(weft_error_graph *g, weft_failure_id id, const weft_skip_record *rec) {
  weft_graph_node *nd = find(g, id);
  if (!nd) return;
  if (!nd->skips) {
    nd->skips = weft__alloc(g->alloc, sizeof(weft_skip_record) * WEFT_SKIP_KEEP, 16);
    if (!nd->skips) { /* no room for records: the count still tells */
      nd->skipped_total++;
      return;
    }
  }
  nd->skipped_total++;
  /* The records of the newest launches are kept, sorted by launch number:
   * skips on different streams are applied in whatever order they complete,
   * and the report must not depend on it. */
  uint32_t n = nd->nskips;
  if (n == WEFT_SKIP_KEEP) {
    if (rec->launch < nd->skips[0].launch) return; /* older than every record kept */
    memmove(&nd->skips[0], &nd->skips[1], sizeof(*rec) * (n - 1));
    n--;
  }
  uint32_t at = n;
  while (at > 0 && nd->skips[at - 1].launch > rec->launch) at--;
  memmove(&nd->skips[at + 1], &nd->skips[at], sizeof(*rec) * (n - at));
  nd->skips[at] = *rec;
  nd->nskips = n + 1;
}

void weft_graph_set_origin(weft_error_graph *g, weft_failure_id id, uint32_t kernel,
                           uint64_t launch) {
  weft_graph_node *nd = find(g, id);
  if (!nd) return;
  nd->origin_kernel = kernel;
  nd->origin_launch = launch;
  nd->origin_label = NULL;
  nd->has_origin = true;
}

void weft_graph_label_origin(weft_error_graph *g, weft_failure_id id, const char *label) {
  weft_graph_node *nd = find(g, id);
  if (nd && nd->has_origin) nd->origin_label = label;
}

void weft_graph_label_skip(weft_error_graph *g, weft_failure_id id, uint64_t launch,
                           const char *label) {
  weft_graph_node *nd = find(g, id);
  if (!nd || !nd->skips) return;
  for (uint32_t i = nd->nskips; i-- > 0;)
    if (nd->skips[i].launch == launch) {
      nd->skips[i].label = label;
      return;
    }
}

void weft_graph_hold(weft_error_graph *g, weft_failure_id id) {
  weft_graph_node *nd = find(g, id);
  if (nd) nd->holds++;
}

void weft_graph_unhold(weft_error_graph *g, weft_failure_id id) {
  weft_graph_node *nd = find(g, id);
  if (!nd || !nd->holds) return;
  if (--nd->holds == 0 && nd->tagged == 0) remove_node(g, nd);
}

uint64_t weft_graph_len(const weft_error_graph *g) {
  return g->len;
}

/* ---- reports ---------------------------------------------------------------------------- */

static bool produced(const weft_skip_record *r, uint64_t memory) {
  uint32_t n = r->nproduced < WEFT_SKIP_PRODUCED ? r->nproduced : WEFT_SKIP_PRODUCED;
  for (uint32_t i = 0; i < n; i++)
    if (r->produced[i] == memory) return true;
  return false;
}

/* "kernel 'NAME'", or "launch 'LABEL' of kernel 'NAME'" for a labelled launch. */
static void kernel_name(const weft_error_graph *g, uint32_t k, const char *label, char *buf,
                        size_t cap) {
  const char *name = g->namer.kernel ? g->namer.kernel(g->namer.ctx, k) : NULL;
  int n = label ? snprintf(buf, cap, "launch '%s' of ", label) : 0;
  if (n < 0 || (size_t)n >= cap) return;
  if (name)
    snprintf(buf + n, cap - (size_t)n, "kernel '%s'", name);
  else
    snprintf(buf + n, cap - (size_t)n, "kernel #%" PRIu32, k);
}

weft_status weft_graph_report(const weft_error_graph *g, weft_failure_id id, uint64_t memory) {
  const weft_graph_node *nd = find(g, id);
  if (!nd) return NULL;
  char hops[WEFT_SKIP_KEEP + 1][768];
  const char *chain[WEFT_SKIP_KEEP + 1];
  size_t n = 0;
  uint64_t target = memory;
  uint32_t upper = nd->skips ? nd->nskips : 0;
  char name[448]; /* "launch 'LABEL' of kernel 'NAME'" */
  for (;;) {
    /* The newest record before |upper| that produced |target|. */
    const weft_skip_record *hit = NULL;
    uint32_t i = upper;
    while (i-- > 0) {
      const weft_skip_record *r = &nd->skips[i];
      if (produced(r, target)) {
        hit = r;
        break;
      }
    }
    if (!hit) break;
    kernel_name(g, hit->kernel, hit->label, name, sizeof(name));
    char mem[192]; /* "buffer 'LABEL' (#N)" */
    if (g->namer.memory)
      g->namer.memory(g->namer.ctx, hit->needed, mem, sizeof(mem));
    else
      snprintf(mem, sizeof(mem), "memory %" PRIu64, hit->needed);
    snprintf(hops[n], sizeof(hops[n]), "skipped %s (launch %" PRIu64 "): it needed %s", name,
             hit->launch, mem);
    chain[n] = hops[n];
    n++;
    target = hit->needed;
    upper = i;
  }
  if (n > 0 && nd->skipped_total > nd->nskips) {
    snprintf(hops[n], sizeof(hops[n]), "%" PRIu64 " older skip records were dropped",
             nd->skipped_total - nd->nskips);
    chain[n] = hops[n];
    n++;
  }
  char origin[sizeof(name) + 40];
  if (nd->has_origin) {
    kernel_name(g, nd->origin_kernel, nd->origin_label, name, sizeof(name));
    snprintf(origin, sizeof(origin), "%s (launch %" PRIu64 ")", name, nd->origin_launch);
  }
  return weft__error_unwritten(id, nd->tagged, weft_error_clone(nd->error), chain, n,
                               nd->has_origin ? origin : NULL);
}

weft_status weft_graph_reports(const weft_error_graph *g, const weft_claim *claims, size_t n) {
  weft_status stack[8], *errs = stack;
  size_t k = 0, cap = 8;
  for (size_t i = 0; i < n; i++) {
    const weft_claim *c = &claims[i];
    weft_failure_id f = c->unallocated ? weft_graph_unallocated_failure(g, c->memory) : c->failure;
    if (!c->unallocated && !f) continue;
    bool seen = false; /* first-seen order, each failure once */
    for (size_t j = 0; j < i && !seen; j++) {
      const weft_claim *d = &claims[j];
      weft_failure_id e =
          d->unallocated ? weft_graph_unallocated_failure(g, d->memory) : d->failure;
      seen = f ? e == f : (d->unallocated && !e && d->memory == c->memory);
    }
    if (seen) continue;
    weft_status r = f ? weft_graph_report(g, f, c->memory) : NULL;
    if (!r && c->unallocated)
      r = weft_error_make(WEFT_ERR_NOT_FOUND, "memory %" PRIu64 " was never allocated", c->memory);
    if (!r) continue; /* a missing node: nothing can be said of it */
    if (k == cap) {
      weft_status *m = malloc(sizeof(*m) * cap * 2); /* errors live in libc memory */
      if (!m) {
        weft_error_free(r);
        continue;
      }
      memcpy(m, errs, sizeof(*m) * k);
      if (errs != stack) free(errs);
      errs = m;
      cap *= 2;
    }
    errs[k++] = r;
  }
  weft_status st = k ? weft_error_several(errs, k) : NULL;
  if (errs != stack) free(errs);
  return st;
}

/* ---- unallocated memory ------------------------------------------------------------------- */

static struct weft_unallocated *unalloc_find(const weft_error_graph *g, uint64_t memory) {
  for (uint32_t i = 0; i < g->unallocated_len; i++)
    if (g->unallocated[i].memory == memory) return &g->unallocated[i];
  return NULL;
}

void weft_graph_fail_unallocated(weft_error_graph *g, uint64_t memory, weft_status error) {
  struct weft_unallocated *u = unalloc_find(g, memory);
  if (u) { /* a new reason replaces the old one */
    weft_graph_replace(g, u->failure, error);
    return;
  }
  if (!weft__grow(g->alloc, (void **)&g->unallocated, &g->unallocated_cap, g->unallocated_len + 1,
                  sizeof(*g->unallocated))) {
    weft_error_free(error);
    return;
  }
  weft_failure_id f = weft_graph_insert(g, error, NULL);
  if (!f) return;
  weft_graph_tag(g, f); /* the record is its carrier */
  g->unallocated[g->unallocated_len++] = (struct weft_unallocated){memory, f};
}

weft_failure_id weft_graph_unallocated_failure(const weft_error_graph *g, uint64_t memory) {
  struct weft_unallocated *u = unalloc_find(g, memory);
  return u && find(g, u->failure) ? u->failure : 0;
}

void weft_graph_forget_unallocated(weft_error_graph *g, uint64_t memory) {
  struct weft_unallocated *u = unalloc_find(g, memory);
  if (!u) return;
  weft_failure_id f = u->failure;
  *u = g->unallocated[--g->unallocated_len];
  weft_graph_untag(g, f);
}
