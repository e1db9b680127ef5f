/* Task graphs (docs/graphs.md): a DAG of launches built once, submitted many times.
 *
 * Edges are derived when a node is added: it depends on every earlier node
 * with a binding on the same buffer whose byte range overlaps one of its own,
 * where either side writes. Lanes: a node continues the lane of its first
 * predecessor that still ends that lane (a chain stays on one stream);
 * otherwise it opens a new lane, up to the device's max_streams, then reuses
 * lanes round-robin. Submission checks every buffer, builds every command,
 * then queues them as one chain: the device's usual rules order the lanes
 * where buffers cross them, and each node runs in its own write scope.
 *
 * A graph is a client-side object: it is not thread-safe (build and submit
 * from one thread at a time), and it touches the device only to submit. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/launch.h"
#include "scheduler/submit.h"
#include "scheduler/struct_size.h"

typedef struct tg_node {
  weft_kernel kernel;
  uint32_t grid[3], block[3];
  weft_binding *bindings; /* WEFT_WHOLE resolved */
  uint32_t nb;
  void *scalars;
  size_t scalar_bytes;
  uint32_t lane, ndeps;
} tg_node;

struct weft_taskgraph {
  weft_device *dev;
  weft_allocator alloc; /* the device's, copied: destroy touches no device */
  tg_node *nodes;
  uint32_t n, cap;
  uint32_t (*edges)[2];
  uint32_t ne, ecap;
  uint32_t max_lanes, nlanes, rr;
  uint32_t lane_tail[WEFT_MAX_STREAMS]; /* last node of each lane + 1 (0: empty) */
};

weft_status weft_taskgraph_create(weft_device *dev, weft_taskgraph **out) {
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  weft_taskgraph *g = weft__calloc(&dev->alloc, sizeof(*g), 16);
  if (!g) return weft__oom(sizeof(*g), "a task graph");
  g->dev = dev;
  g->alloc = dev->alloc;
  g->max_lanes = dev->max_streams;
  *out = g;
  return NULL;
}

static void node_free(weft_taskgraph *g, tg_node *nd) {
  weft__free(&g->alloc, nd->bindings, sizeof(weft_binding) * nd->nb, 16);
  weft__free(&g->alloc, nd->scalars, nd->scalar_bytes, 16);
}

/* The graph is the caller's alone: before or after the device closes,
 * destroy frees it and nothing else. */
void weft_taskgraph_destroy(weft_taskgraph *g) {
  if (!g) return;
  const weft_allocator *a = &g->alloc;
  for (uint32_t i = 0; i < g->n; i++) node_free(g, &g->nodes[i]);
  weft__free(a, g->nodes, sizeof(tg_node) * g->cap, 16);
  weft__free(a, g->edges, sizeof(uint32_t[2]) * g->ecap, 16);
  weft__free(a, g, sizeof(*g), 16);
}

/* Read-after-write, write-after-read or write-after-write on shared bytes. */
static bool conflicts(const weft_binding *a, const weft_binding *b) {
  return a->buffer.id == b->buffer.id && ((a->access | b->access) & WEFT_WRITE) &&
         a->offset < b->offset + b->size && b->offset < a->offset + a->size;
}

static bool depends(const tg_node *later, const tg_node *earlier) {
  for (uint32_t i = 0; i < later->nb; i++)
    for (uint32_t j = 0; j < earlier->nb; j++)
      if (conflicts(&later->bindings[i], &earlier->bindings[j])) return true;
  return false;
}

weft_status weft_taskgraph_add_launch(weft_taskgraph *g, weft_kernel kernel, const uint32_t grid[3],
                                      const uint32_t block[3], const weft_binding *bindings,
                                      size_t num_bindings, const void *scalars, size_t scalar_bytes,
                                      uint32_t *node) {
  if (!g) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "graph is NULL");
  if (g->n == UINT32_MAX - 1)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "the graph is full");
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(g->dev, &in);
  if (st) return st;
  weft_binding resolved[WEFT_MAX_BINDINGS];
  st = weft__launch_check(g->dev, kernel, grid, block, bindings, num_bindings, scalars,
                          scalar_bytes, resolved);
  if (st) return st;
  const weft_allocator *a = &g->dev->alloc;
  if (!weft__grow(a, (void **)&g->nodes, &g->cap, g->n + 1, sizeof(tg_node)))
    return weft__oom(sizeof(tg_node), "a graph node");
  tg_node nd = {.kernel = kernel, .nb = (uint32_t)num_bindings, .scalar_bytes = scalar_bytes};
  memcpy(nd.grid, grid, sizeof(nd.grid));
  memcpy(nd.block, block, sizeof(nd.block));
  if (num_bindings) {
    nd.bindings = weft__alloc(a, sizeof(weft_binding) * num_bindings, 16);
    if (!nd.bindings)
      return weft__oom(sizeof(weft_binding) * num_bindings, "a graph node's bindings");
    memcpy(nd.bindings, resolved, sizeof(weft_binding) * num_bindings);
  }
  if (scalar_bytes) {
    nd.scalars = weft__alloc(a, scalar_bytes, 16);
    if (!nd.scalars) {
      node_free(g, &nd);
      return weft__oom(scalar_bytes, "a graph node's scalars");
    }
    memcpy(nd.scalars, scalars, scalar_bytes);
  }
  /* Edges from every earlier node it conflicts with; the lane of the first
   * predecessor that still ends its lane. */
  uint32_t me = g->n, ne0 = g->ne;
  int64_t lane = -1;
  for (uint32_t j = 0; j < me; j++) {
    if (!depends(&nd, &g->nodes[j])) continue;
    if (!weft__grow(a, (void **)&g->edges, &g->ecap, g->ne + 1, sizeof(uint32_t[2]))) {
      g->ne = ne0;
      node_free(g, &nd);
      return weft__oom(sizeof(uint32_t[2]), "a graph edge");
    }
    g->edges[g->ne][0] = j;
    g->edges[g->ne][1] = me;
    g->ne++;
    nd.ndeps++;
    uint32_t l = g->nodes[j].lane;
    if (lane < 0 && g->lane_tail[l] == j + 1) lane = l;
  }
  if (lane < 0) {
    if (g->nlanes < g->max_lanes)
      lane = g->nlanes++;
    else
      lane = g->rr++ % g->max_lanes;
  }
  nd.lane = (uint32_t)lane;
  g->lane_tail[nd.lane] = me + 1;
  g->nodes[me] = nd;
  g->n++;
  if (node) *node = me;
  return NULL;
}

weft_status weft_taskgraph_submit(weft_taskgraph *g, weft_stream_id base) {
  if (!g) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "graph is NULL");
  weft_device *dev = g->dev;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st || !g->n) return st;
  /* Every buffer still live first: a graph naming a dead one is not queued
   * at all. */
  for (uint32_t i = 0; i < g->n; i++) {
    const tg_node *nd = &g->nodes[i];
    for (uint32_t b = 0; b < nd->nb; b++)
      if (!weft_handles_lookup(&dev->buffers, nd->bindings[b].buffer.id, NULL))
        return weft_error_make(WEFT_ERR_NOT_FOUND,
                               "graph node %" PRIu32 ": buffer #%" PRIu32
                               " is not a live buffer of this device (released, stale or forged)",
                               i, (uint32_t)nd->bindings[b].buffer.id);
  }
  /* Chunks keep a large graph under the back-pressure limit; one thread
   * pushing them in order keeps the graph's order. A submitter never waits
   * for room while it holds commands it has not pushed: those count against
   * the budgets, and submitters each holding part of one would wait for one
   * another forever. So the chunk built so far is pushed first. */
  uint32_t chunk = dev->cmds.max_pending / 2 ? (uint32_t)(dev->cmds.max_pending / 2) : 1;
  if (chunk > 1024) chunk = 1024;
  bool queued = false; /* some nodes were pushed */
  for (uint32_t at = 0; at < g->n; at += chunk) {
    uint32_t end = g->n - at > chunk ? at + chunk : g->n;
    cmd *first = NULL, *last = NULL;
    for (uint32_t i = at; i < end; i++) {
      const tg_node *nd = &g->nodes[i];
      cmd *c = weft__launch_build(dev, base + nd->lane, nd->kernel, nd->grid, nd->block,
                                  nd->bindings, nd->nb, nd->scalars, nd->scalar_bytes, !first);
      if (!c && first) { /* no room (or no memory): push what is built, then wait */
        weft__cmd_submit_chain(dev, first, last);
        first = last = NULL;
        queued = true;
        c = weft__launch_build(dev, base + nd->lane, nd->kernel, nd->grid, nd->block, nd->bindings,
                               nd->nb, nd->scalars, nd->scalar_bytes, true);
      }
      if (!c) {
        for (cmd *x = first, *nx; x; x = nx) {
          nx = weft__cmd_next(x);
          weft__cmd_free(x);
        }
        return weft__oom(sizeof(cmd),
                         queued ? "the rest of a graph submission (the first nodes were queued)"
                                : "a graph submission");
      }
      c->task.link.next = NULL;
      if (last)
        last->task.link.next = &c->task.link;
      else
        first = c;
      last = c;
    }
    if (first) weft__cmd_submit_chain(dev, first, last);
    queued = true;
  }
  return NULL;
}

size_t weft_taskgraph_node_count(const weft_taskgraph *g) {
  return g ? g->n : 0;
}

size_t weft_taskgraph_edge_count(const weft_taskgraph *g) {
  return g ? g->ne : 0;
}

uint32_t weft_taskgraph_lane_count(const weft_taskgraph *g) {
  return g ? g->nlanes : 0;
}

weft_status weft_taskgraph_node(const weft_taskgraph *g, uint32_t node,
                                weft_taskgraph_node_info *out) {
  if (!g || !out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "graph or out is NULL");
  if (node >= g->n)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "node %" PRIu32 " of %" PRIu32, node, g->n);
  uint32_t size;
  weft_status st =
      weft__out_struct_size(out->struct_size, sizeof(*out), "weft_taskgraph_node_info", &size);
  if (st) return st;
  const tg_node *nd = &g->nodes[node];
  const weft_taskgraph_node_info info = {.struct_size = size,
                                         .kernel = nd->kernel,
                                         .lane = nd->lane,
                                         .ndeps = nd->ndeps,
                                         .nbindings = nd->nb};
  memcpy(out, &info, size);
  return NULL;
}

weft_status weft_taskgraph_edge(const weft_taskgraph *g, size_t i, uint32_t *from, uint32_t *to) {
  if (!g || !from || !to) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "NULL argument");
  if (i >= g->ne)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "edge %zu of %" PRIu32, i, g->ne);
  *from = g->edges[i][0];
  *to = g->edges[i][1];
  return NULL;
}

/* A growing string on libc (the caller frees it with weft_free). */
typedef struct sbuf {
  char *p;
  size_t len, cap;
  bool failed;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if (b->p && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t nc = b->cap ? b->cap * 2 : 1024;
    while (nc < b->len + (size_t)n + 1) nc *= 2;
    char *q = realloc(b->p, nc);
    if (!q) {
      b->failed = true;
      return;
    }
    b->p = q;
    b->cap = nc;
  }
}

weft_status weft_taskgraph_to_dot(const weft_taskgraph *g, char **out) {
  if (!g || !out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "graph or out is NULL");
  *out = NULL;
  static const char *const colors[] = {"lightblue", "palegreen",   "khaki", "lightpink",
                                       "plum",      "lightsalmon", "wheat", "lightcyan"};
  sbuf b = {0};
  sb_printf(&b, "digraph weft {\n  node [shape=box, style=filled];\n");
  for (uint32_t i = 0; i < g->n; i++) {
    const tg_node *nd = &g->nodes[i];
    uint32_t k = (uint32_t)nd->kernel.id - 1u;
    const char *name = k < WEFT_MAX_KERNELS ? g->dev->kernels[k].k.name : NULL;
    char esc[2 * 256 + 1]; /* kernel names are at most 255 bytes */
    size_t e = 0;
    for (const char *q = name ? name : "?"; *q && e + 2 < sizeof(esc); q++) {
      if (*q == '"' || *q == '\\') esc[e++] = '\\';
      esc[e++] = *q;
    }
    esc[e] = 0;
    sb_printf(&b, "  n%" PRIu32 " [label=\"%" PRIu32 ": %s\\nlane %" PRIu32 "\", fillcolor=%s];\n",
              i, i, esc, nd->lane, colors[nd->lane % 8]);
  }
  for (uint32_t e = 0; e < g->ne; e++)
    sb_printf(&b, "  n%" PRIu32 " -> n%" PRIu32 ";\n", g->edges[e][0], g->edges[e][1]);
  sb_printf(&b, "}\n");
  if (b.failed) {
    free(b.p);
    return weft__oom(b.cap, "the DOT text");
  }
  *out = b.p;
  return NULL;
}
