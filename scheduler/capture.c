/* Capture and replay (docs/graphs.md).
 *
 * A capture owns a set of stream slots from prepare to end. prepare starts
 * isolation (no interleaving onto or off those slots) and keeps the memory of
 * every buffer released on them until begin (warm-up primes the pools with
 * its whole working set). begin drains the device (so the checks below see
 * what warm-up left), frees the primed buffers and makes reservations on the
 * slots Forbidden. Between begin and end a launch on a capturing slot is
 * recorded, not run: the command itself is kept, with its buffers pinned.
 * Anything a replay could not reproduce dooms the capture (end then fails with
 * the first reason): a launch that fails to resolve or carries a failpoint,
 * an input that carries a failure, a buffer created or written on the slots,
 * a read or sync on them (refused as well: no host sync inside a window).
 * A replay is one command. The scheduler runs a ready-made copy of the
 * recording (an instance: end builds up to WEFT_REPLAY_INSTANCES of them, so
 * that back-to-back replays overlap; a replayer waits for a free one past
 * that) or, when memory for the instances ran out, clones the recording into
 * pooled commands. On the host, end also computes the fused replay's plan
 * (build_plan): an instance is then placed whole, one pre-linked chain per
 * lane, ordered per buffer against the work around it (replay_fused), and
 * retired a segment at a time (retire.c). Otherwise each launch is
 * registered on its stream, where the usual rules order it.
 *
 * Everything here runs on the scheduler, except the client calls at the end. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "scheduler/buffers.h"
#include "scheduler/capture.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/kernels.h"
#include "scheduler/launch.h"
#include "scheduler/loop.h"
#include "scheduler/multistream.h"
#include "scheduler/submit.h"
#include "scheduler/trace.h"
#include "scheduler/window.h"

enum { CAP_PREPARE, CAP_BEGIN, CAP_END, CAP_ABORT, CAP_DESTROY };

static const char *state_name(uint32_t st) {
  switch (st) {
  case WEFT_CAPTURE_PREPARED:
    return "prepared";
  case WEFT_CAPTURE_RECORDING:
    return "recording";
  case WEFT_CAPTURE_READY:
    return "ready";
  case WEFT_CAPTURE_ABORTED:
    return "aborted";
  default:
    return "none";
  }
}

/* ---- transitions ------------------------------------------------------------------------ */

static void free_primed(weft_device *dev, weft_capture *cap) {
  for (uint32_t i = 0; i < cap->nprimed; i++) weft__buf_free(dev, cap->primed[i]);
  weft__free(&dev->alloc, cap->primed, sizeof(weft_buf *) * cap->primed_cap, 16);
  cap->primed = NULL;
  cap->nprimed = cap->primed_cap = 0;
}

/* What a replay runs: the recorded launches, or on a backend with capture
 * graphs (CUDA) the one launch of their graph. */
static cmd *run_list(const weft_capture *cap) {
  return cap->graph ? cap->graph : cap->rec_head;
}

static uint64_t run_count(const weft_capture *cap) {
  return cap->graph ? 1 : atomic_load(&cap->nrec);
}

/* ---- the fused replay's plan ---------------------------------------------------------------- */

static void free_plan(weft_device *dev, weft_capture *cap) {
  replay_plan *pl = cap->plan;
  if (!pl) return;
  const weft_allocator *a = &dev->alloc;
  weft__free(a, pl->nodes, sizeof(replay_node) * pl->n, 16);
  weft__free(a, pl->bufs, sizeof(replay_buf) * (pl->nbufs ? pl->nbufs : 1), 16);
  if (pl->iwaits) weft__free(a, pl->iwaits, sizeof(replay_pos) * pl->cap_iwaits, 16);
  if (pl->reads) weft__free(a, pl->reads, sizeof(replay_pos) * pl->cap_reads, 16);
  if (pl->segs) weft__free(a, pl->segs, sizeof(replay_segdef) * pl->cap_segs, 16);
  if (pl->pins) weft__free(a, pl->pins, sizeof(weft_replay_pin) * pl->cap_pins, 16);
  weft__free(a, pl, sizeof(*pl), 16);
  cap->plan = NULL;
}

static int ptr_cmp(const void *a, const void *b) {
  uintptr_t x = (uintptr_t) * (weft_buf *const *)a, y = (uintptr_t) * (weft_buf *const *)b;
  return x < y ? -1 : x > y;
}

/* The index of |b| in the sorted unique buffers |u| (it is there). */
static uint32_t buf_index(weft_buf *const *u, uint32_t n, const weft_buf *b) {
  uint32_t lo = 0, hi = n;
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if ((uintptr_t)u[mid] <= (uintptr_t)b)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* Scratch of the plan's simulation, freed when it ends. */
typedef struct plan_scratch {
  weft_buf **u;      /* unique buffers, sorted */
  uint32_t *lw_slot; /* [u]: last writer in the replay */
  uint32_t *lw_pos;  /* [u]; 0: none */
  uint32_t *rd;      /* [u * max_streams]: last read per slot since that write */
  uint32_t *synced;  /* [me * max_streams + s]: position on s that me waited for */
  uint32_t *seen;    /* [u]: the segment (+1) that last counted it */
  uint32_t *pin;     /* [u]: its entry in that segment's pins */
  uint32_t *next;    /* [node]: the next node of its segment, or UINT32_MAX */
  size_t nu, nb, n, ms;
} plan_scratch;

static void scratch_free(weft_device *dev, plan_scratch *x) {
  const weft_allocator *a = &dev->alloc;
  size_t nu = x->nu ? x->nu : 1;
  weft__free(a, x->u, sizeof(weft_buf *) * (x->nb ? x->nb : 1), 16);
  weft__free(a, x->lw_slot, sizeof(uint32_t) * nu, 16);
  weft__free(a, x->lw_pos, sizeof(uint32_t) * nu, 16);
  weft__free(a, x->rd, sizeof(uint32_t) * nu * x->ms, 16);
  weft__free(a, x->synced, sizeof(uint32_t) * x->ms * x->ms, 16);
  weft__free(a, x->seen, sizeof(uint32_t) * nu, 16);
  weft__free(a, x->pin, sizeof(uint32_t) * nu, 16);
  weft__free(a, x->next, sizeof(uint32_t) * x->n, 16);
}

/* Runs multistream.c's rules (order, set_waits) over the recording once,
 * each lane on its own stream, with positions relative to the replay: every
 * launch's position and waits inside the replay, the segments (a lane's
 * runs of launches of which only the first waits), the buffers touched and
 * where the replay leaves them. NULL when memory runs out (replays then
 * register launch by launch). */
static replay_plan *build_plan(weft_device *dev, weft_capture *cap) {
  const weft_allocator *a = &dev->alloc;
  uint32_t ms = dev->max_streams;
  plan_scratch x = {.n = run_count(cap), .ms = ms};
  if (!x.n || x.n > UINT32_MAX / 2) return NULL;
  for (const cmd *r = cap->rec_head; r; r = weft__cmd_next(r)) {
    x.nb += r->nb;
    if (!dev->streams[weft__slot_of(dev, r->stream)]) return NULL;
  }
  replay_plan *pl = weft__calloc(a, sizeof(*pl), 16);
  if (!pl) return NULL;
  cap->plan = pl;
  if (!(x.u = weft__alloc(a, sizeof(weft_buf *) * (x.nb ? x.nb : 1), 16))) goto oom;
  for (const cmd *r = cap->rec_head; r; r = weft__cmd_next(r))
    for (uint32_t j = 0; j < r->nb; j++) x.u[x.nu++] = r->bufs[j];
  qsort(x.u, x.nu, sizeof(weft_buf *), ptr_cmp);
  size_t k = 0;
  for (size_t i = 0; i < x.nu; i++)
    if (!k || x.u[i] != x.u[k - 1]) x.u[k++] = x.u[i];
  x.nu = k;
  size_t nu = x.nu ? x.nu : 1;
  x.lw_slot = weft__calloc(a, sizeof(uint32_t) * nu, 16);
  x.lw_pos = weft__calloc(a, sizeof(uint32_t) * nu, 16);
  x.rd = weft__calloc(a, sizeof(uint32_t) * nu * ms, 16);
  x.synced = weft__calloc(a, sizeof(uint32_t) * ms * ms, 16);
  x.seen = weft__calloc(a, sizeof(uint32_t) * nu, 16);
  x.pin = weft__calloc(a, sizeof(uint32_t) * nu, 16);
  x.next = weft__alloc(a, sizeof(uint32_t) * x.n, 16);
  pl->n = (uint32_t)x.n;
  pl->nbufs = (uint32_t)x.nu;
  pl->nodes = weft__calloc(a, sizeof(replay_node) * x.n, 16);
  pl->bufs = weft__calloc(a, sizeof(replay_buf) * nu, 16);
  if (!x.lw_slot || !x.lw_pos || !x.rd || !x.synced || !x.seen || !x.pin || !x.next || !pl->nodes ||
      !pl->bufs)
    goto oom;
  for (uint32_t u = 0; u < x.nu; u++) pl->bufs[u].b = x.u[u];
  uint32_t cur[WEFT_MAX_STREAMS]; /* each lane's open segment */
  uint32_t i = 0;
  for (const cmd *r = cap->rec_head; r; r = weft__cmd_next(r), i++) {
    uint32_t me = weft__slot_of(dev, r->stream), pos = ++pl->lane_n[me];
    uint64_t bit = UINT64_C(1) << me;
    replay_node *nd = &pl->nodes[i];
    weft_wait_set w;
    w.mask = 0;
    pl->lanes |= bit;
    for (uint32_t j = 0; j < r->nb; j++) {
      uint32_t u = buf_index(x.u, (uint32_t)x.nu, r->bufs[j]);
      bool write = weft__is_write(r->bindings[j].access);
      replay_buf *pb = &pl->bufs[u];
      uint32_t *rd = &x.rd[(size_t)u * ms];
      nd->writes |= write && r->bindings[j].size;
      pb->pins++;
      pb->touch |= bit;
      if (x.lw_pos[u]) weft__wait_need(&w, me, x.lw_slot[u], x.lw_pos[u]);
      if (write) {
        pb->write |= bit;
        for (uint32_t s = 0; s < ms; s++) {
          if (rd[s]) weft__wait_need(&w, me, s, rd[s]);
          rd[s] = 0;
        }
        x.lw_slot[u] = me;
        x.lw_pos[u] = pos;
      } else if (pos > rd[me]) {
        rd[me] = pos;
      }
    }
    nd->slot = me;
    nd->pos = pos;
    nd->wait0 = pl->niwaits;
    for (uint64_t m = w.mask; m; m &= m - 1) {
      uint32_t s = (uint32_t)__builtin_ctzll(m);
      uint32_t *sy = &x.synced[(size_t)me * ms + s];
      if (*sy >= w.seq[s]) continue; /* an earlier wait of this lane covers it */
      *sy = (uint32_t)w.seq[s];
      if (!weft__grow(a, (void **)&pl->iwaits, &pl->cap_iwaits, pl->niwaits + 1,
                      sizeof(replay_pos)))
        goto oom;
      pl->iwaits[pl->niwaits++] = (replay_pos){s, (uint32_t)w.seq[s]};
      nd->nwaits++;
    }
    x.next[i] = UINT32_MAX;
    if (pos == 1 || nd->nwaits) { /* a lane's first launch, or one that waits: a new segment */
      if (!weft__grow(a, (void **)&pl->segs, &pl->cap_segs, pl->nsegs + 1, sizeof(replay_segdef)))
        goto oom;
      pl->segs[pl->nsegs] = (replay_segdef){.head = i, .tail = i};
      cur[me] = pl->nsegs++;
    } else {
      x.next[pl->segs[cur[me]].tail] = i;
      pl->segs[cur[me]].tail = i;
    }
    nd->seg = cur[me];
    pl->segs[cur[me]].n++;
    pl->segs[cur[me]].launches += weft__launch_count(dev, r);
  }
  /* Each segment's buffers, with their bindings counted. */
  cmd **byi = weft__alloc(a, sizeof(cmd *) * x.n, 16);
  if (!byi) goto oom;
  i = 0;
  for (cmd *r = cap->rec_head; r; r = weft__cmd_next(r)) byi[i++] = r;
  for (uint32_t g = 0; g < pl->nsegs; g++) {
    replay_segdef *sd = &pl->segs[g];
    sd->pin0 = pl->npins;
    for (uint32_t v = sd->head; v != UINT32_MAX; v = x.next[v])
      for (uint32_t j = 0; j < byi[v]->nb; j++) {
        uint32_t u = buf_index(x.u, (uint32_t)x.nu, byi[v]->bufs[j]);
        if (x.seen[u] != g + 1) {
          if (!weft__grow(a, (void **)&pl->pins, &pl->cap_pins, pl->npins + 1,
                          sizeof(weft_replay_pin))) {
            weft__free(a, byi, sizeof(cmd *) * x.n, 16);
            goto oom;
          }
          x.seen[u] = g + 1;
          x.pin[u] = pl->npins;
          pl->pins[pl->npins++] = (weft_replay_pin){x.u[u], 0, false};
        }
        pl->pins[x.pin[u]].pins++;
        pl->pins[x.pin[u]].writes |= weft__is_write(byi[v]->bindings[j].access);
      }
    sd->npins = pl->npins - sd->pin0;
  }
  weft__free(a, byi, sizeof(cmd *) * x.n, 16);
  /* Where the replay leaves each buffer. */
  for (uint32_t u = 0; u < x.nu; u++) {
    replay_buf *pb = &pl->bufs[u];
    pb->lw = (replay_pos){x.lw_slot[u], x.lw_pos[u]};
    pb->rd0 = pl->nreads;
    for (uint32_t s = 0; s < ms; s++) {
      uint32_t p = x.rd[(size_t)u * ms + s];
      if (!p) continue;
      if (!weft__grow(a, (void **)&pl->reads, &pl->cap_reads, pl->nreads + 1, sizeof(replay_pos)))
        goto oom;
      pl->reads[pl->nreads++] = (replay_pos){s, p};
    }
    pb->nrd = pl->nreads - pb->rd0;
  }
  scratch_free(dev, &x);
  return pl;
oom:
  scratch_free(dev, &x);
  free_plan(dev, cap);
  return NULL;
}

/* ---- instances ------------------------------------------------------------------------------ */

static size_t segs_bytes(const weft_capture *cap) {
  return sizeof(weft_replay_seg) * (cap->plan ? cap->plan->nsegs : 1);
}

static void free_instances(weft_device *dev, weft_capture *cap) {
  for (uint32_t k = 0; k < cap->ninst; k++) {
    replay_instance *in = &cap->inst[k];
    uint32_t i = 0;
    for (cmd *r = run_list(cap); r; r = weft__cmd_next(r), i++)
      weft__free(&dev->alloc, in->cmds[i], r->bytes, 16);
    weft__free(&dev->alloc, in->cmds, sizeof(cmd *) * run_count(cap), 16);
    if (in->segs != &in->whole) weft__free(&dev->alloc, in->segs, segs_bytes(cap), 16);
    in->cmds = NULL;
    in->segs = NULL;
    in->count.inflight = 0;
  }
  cap->ninst = 0;
}

/* Builds one more replay instance; NULL when at the limit or out of memory
 * (replays beyond the instances built then clone into pooled commands).
 * Each command belongs to a segment: the plan's, or one for the whole
 * instance without a plan (never armed: it retires launch by launch). */
static replay_instance *build_instance(weft_device *dev, weft_capture *cap) {
  uint64_t n = run_count(cap);
  if (cap->ninst == WEFT_REPLAY_INSTANCES || !n) return NULL;
  replay_instance *in = &cap->inst[cap->ninst];
  const replay_plan *pl = cap->plan;
  in->count.outstanding = &cap->outstanding;
  in->count.inflight = 0;
  in->cmds = weft__calloc(&dev->alloc, sizeof(cmd *) * n, 16);
  in->segs = pl ? weft__calloc(&dev->alloc, segs_bytes(cap), 16) : &in->whole;
  if (!in->cmds || !in->segs) goto oom;
  uint32_t i = 0;
  for (cmd *r = run_list(cap); r; r = weft__cmd_next(r), i++) {
    cmd *c = weft__alloc(&dev->alloc, r->bytes, 16);
    if (!c) goto oom;
    c->bytes = 0; /* never returned to a pool */
    weft__launch_copy(c, r);
    c->instance = pl ? &in->segs[pl->nodes[i].seg] : &in->whole;
    in->cmds[i] = c;
  }
  if (pl) {
    for (uint32_t g = 0; g < pl->nsegs; g++)
      in->segs[g] = (weft_replay_seg){.count = &in->count,
                                      .head = in->cmds[pl->segs[g].head],
                                      .tail = in->cmds[pl->segs[g].tail],
                                      .launches = pl->segs[g].launches,
                                      .pins = &pl->pins[pl->segs[g].pin0],
                                      .n = pl->segs[g].n,
                                      .npins = pl->segs[g].npins};
  } else {
    in->whole = (weft_replay_seg){.count = &in->count, .n = (uint32_t)n};
  }
  cap->ninst++;
  return in;
oom:
  if (in->cmds) {
    uint32_t j = 0;
    for (cmd *r = run_list(cap); r && in->cmds[j]; r = weft__cmd_next(r), j++)
      weft__free(&dev->alloc, in->cmds[j], r->bytes, 16);
    weft__free(&dev->alloc, in->cmds, sizeof(cmd *) * n, 16);
  }
  if (in->segs && in->segs != &in->whole) weft__free(&dev->alloc, in->segs, segs_bytes(cap), 16);
  in->cmds = NULL;
  in->segs = NULL;
  return NULL;
}

static void free_recording(weft_device *dev, weft_capture *cap) {
  free_instances(dev, cap);
  free_plan(dev, cap);
  if (cap->graph) {
    dev->backend->vt->graph_free(dev->backend, cap->graph->graph);
    cap->graph->graph = NULL;
    weft__cmd_free(cap->graph);
  }
  cap->graph = NULL;
  for (cmd *c = cap->rec_head, *next; c; c = next) {
    next = weft__cmd_next(c);
    weft__launch_discard(dev, c);
  }
  cap->rec_head = cap->rec_tail = NULL;
  atomic_store_explicit(&cap->nrec, 0, memory_order_relaxed);
}

/* Reservations on the slots: Forbidden while recording (room already held only). */
static void set_modes(weft_device *dev, weft_capture *cap, bool forbid) {
  if (forbid)
    dev->window.forbid_mask |= cap->mask;
  else
    dev->window.forbid_mask &= ~cap->mask;
}

/* Ends the window (if open): isolation off, slots free, modes back. */
static void release_slots(weft_device *dev, weft_capture *cap) {
  uint32_t st = state_of(cap);
  if (st == WEFT_CAPTURE_RECORDING) set_modes(dev, cap, false);
  if (st == WEFT_CAPTURE_PREPARED) free_primed(dev, cap);
  if (st == WEFT_CAPTURE_PREPARED || st == WEFT_CAPTURE_RECORDING)
    for (uint32_t s = 0; s < dev->max_streams; s++)
      if (cap->mask & (UINT64_C(1) << s)) {
        dev->window.capture_of[s] = NULL;
        dev->ms.isolated &= ~(UINT64_C(1) << s);
      }
}

static bool instances_busy(const weft_capture *cap) {
  for (uint32_t k = 0; k < cap->ninst; k++)
    if (cap->inst[k].count.inflight) return true;
  return false;
}

static void abort_capture(weft_device *dev, weft_capture *cap) {
  for (uint32_t k = 0; k < cap->ninst; k++) /* replays still use an instance */
    if (cap->inst[k].count.inflight) weft__dev_drain(dev);
  release_slots(dev, cap);
  free_recording(dev, cap);
  weft_error_free(cap->doom);
  cap->doom = NULL;
  set_state(cap, WEFT_CAPTURE_ABORTED);
}

static weft_status out_of_order(const char *op, uint32_t st, const char *allowed) {
  return weft_error_make(WEFT_ERR_GENERIC, "capture: %s is only allowed %s (state: %s)", op,
                         allowed, state_name(st));
}

static weft_status do_prepare(weft_device *dev, weft_capture *cap) {
  for (uint32_t s = 0; s < dev->max_streams; s++)
    if ((cap->mask & (UINT64_C(1) << s)) && dev->window.capture_of[s])
      return weft_error_make(WEFT_ERR_GENERIC,
                             "capture: stream slot %" PRIu32 " is already in a capture window", s);
  /* Work already batched on the slots runs before the window. */
  uint32_t ids[WEFT_MAX_STREAMS], k = 0;
  for (uint32_t s = 0; s < dev->max_streams; s++)
    if (cap->mask & (UINT64_C(1) << s)) ids[k++] = s;
  for (uint32_t i = 0; i < k; i++) weft__ms_flush(dev, ids[i]);
  for (uint32_t i = 0; i < k; i++) dev->window.capture_of[ids[i]] = cap;
  dev->ms.isolated |= cap->mask;
  cap->next_live = dev->window.captures;
  dev->window.captures = cap;
  dev->stats.captures_live++;
  set_state(cap, WEFT_CAPTURE_PREPARED);
  return NULL;
}

static weft_status do_begin(weft_device *dev, weft_capture *cap) {
  uint32_t st = state_of(cap);
  if (st != WEFT_CAPTURE_PREPARED) return out_of_order("begin", st, "after prepare");
  weft__dev_drain(dev); /* the window's checks see everything warm-up did */
  free_primed(dev, cap);
  set_modes(dev, cap, true);
  set_state(cap, WEFT_CAPTURE_RECORDING);
  return NULL;
}

/* The recording |rec| as one launch of a backend graph (vt->capture),
 * bound to every recorded binding so that a replay is ordered against other
 * work like any launch. Generic when a launch binds an unallocated buffer
 * (the window dooms those; never captured) or the backend refuses one. */
static weft_status capture_graph(weft_device *dev, cmd *rec, cmd **out) {
  *out = NULL;
  size_t nb = 0, n = 0;
  for (const cmd *r = rec; r; r = weft__cmd_next(r), n++) {
    nb += r->nb;
    for (uint32_t i = 0; i < r->nb; i++)
      if (!r->bufs[i] || !r->bufs[i]->ptr)
        return weft_error_make(WEFT_ERR_GENERIC,
                               "capture: launch %" PRIu64 " binds an unallocated buffer",
                               r->launch_no);
  }
  /* The replay command: every recorded binding, in order. */
  size_t bytes = sizeof(weft_binding) * (nb ? nb : 1);
  weft_binding *all = weft__alloc(&dev->alloc, bytes, 16);
  if (!all) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, bytes, "a capture's bindings");
  size_t k = 0;
  for (const cmd *r = rec; r; r = weft__cmd_next(r))
    for (uint32_t i = 0; i < r->nb; i++) all[k++] = r->bindings[i];
  weft_kernel kid = {((uint64_t)dev->tag << 32) | (rec->kernel + 1u)};
  const uint32_t one[3] = {1, 1, 1};
  cmd *g = weft__launch_build(dev, rec->stream, kid, one, one, all, nb, NULL, 0, true);
  weft__free(&dev->alloc, all, bytes, 16);
  if (!g) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, nb, "a capture's replay command");
  weft__cmd_detach(dev, g); /* kept for the capture's life */
  k = 0;
  for (const cmd *r = rec; r; r = weft__cmd_next(r))
    for (uint32_t i = 0; i < r->nb; i++) g->bufs[k++] = r->bufs[i];
  /* The launches as the backend sees them, in recording order. */
  size_t dbytes = sizeof(weft_capture_launch) * n;
  weft_capture_launch *d = weft__alloc(&dev->alloc, dbytes, 16);
  if (!d) {
    weft__cmd_free(g);
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, dbytes, "a capture");
  }
  k = 0;
  for (cmd *r = rec; r; r = weft__cmd_next(r), k++) {
    weft__launch_desc(dev, r, &d[k].launch);
    d[k].slot = weft__slot_of(dev, r->stream);
    d[k].launch_no = r->launch_no;
  }
  void *graph = NULL;
  weft_status st = dev->backend->vt->capture(dev->backend, d, n, &graph);
  weft__free(&dev->alloc, d, dbytes, 16);
  if (st) {
    weft__cmd_free(g);
    return st;
  }
  g->graph = graph;
  *out = g;
  return NULL;
}

static weft_status do_end(weft_device *dev, weft_capture *cap) {
  uint32_t st = state_of(cap);
  if (st != WEFT_CAPTURE_RECORDING) return out_of_order("end", st, "after begin");
  release_slots(dev, cap);
  if (cap->doom) {
    weft_status why = cap->doom;
    cap->doom = NULL;
    free_recording(dev, cap);
    set_state(cap, WEFT_CAPTURE_ABORTED);
    return why;
  }
  /* The recording becomes one backend graph (CUDA: stream capture). */
  if (dev->backend->vt->capture && cap->rec_head) {
    weft_status why = capture_graph(dev, cap->rec_head, &cap->graph);
    if (why) {
      free_recording(dev, cap);
      set_state(cap, WEFT_CAPTURE_ABORTED);
      return why;
    }
  }
  /* A deferred backend's streams keep their own order of events: its
   * replays register launch by launch. */
  if (!cap->graph && !dev->backend->deferred) cap->plan = build_plan(dev, cap);
  /* All now, so that a replay allocates nothing: up to WEFT_REPLAY_INSTANCES,
   * fewer past WEFT_REPLAY_INSTANCE_BYTES (a large recording). */
  size_t bytes = 0, each = sizeof(cmd *) * run_count(cap) + segs_bytes(cap);
  for (cmd *r = run_list(cap); r; r = weft__cmd_next(r)) each += r->bytes;
  while ((cap->ninst < WEFT_REPLAY_INSTANCES_MIN || bytes + each <= WEFT_REPLAY_INSTANCE_BYTES) &&
         build_instance(dev, cap))
    bytes += each;
  cap->limit = cap->ninst > WEFT_REPLAY_INSTANCES_MIN ? cap->ninst : WEFT_REPLAY_INSTANCES_MIN;
  set_state(cap, WEFT_CAPTURE_READY);
  return NULL;
}

/* The replay's slot goes back (its instance, if any, is free or retiring). */
static void replay_done(weft_device *dev, weft_capture *cap) {
  atomic_fetch_sub_explicit(&cap->outstanding, 1, memory_order_release);
  weft__ec_notify(&dev->cmds.room);
}

/* The waits of a lane's first launch |c| on |me|: the work before the
 * replay on every buffer the lane touches (its last writer; and every reader
 * since, where the lane writes it), and its own waits inside the replay;
 * elided where |me| already waited for as much (multistream.c's set_waits). */
static void head_waits(weft_device *dev, const replay_plan *pl, const replay_node *nd, cmd *c,
                       const uint64_t *base) {
  uint32_t me = nd->slot;
  uint64_t bit = UINT64_C(1) << me;
  weft_wait_set w;
  w.mask = 0;
  for (uint32_t u = 0; u < pl->nbufs; u++) {
    const replay_buf *pb = &pl->bufs[u];
    if (!(pb->touch & bit)) continue;
    const weft_buf *b = pb->b;
    if (b->lw_seq) weft__wait_need(&w, me, b->lw_slot, b->lw_seq);
    if (pb->write & bit)
      for (uint64_t m = b->read_mask; m; m &= m - 1) { /* the slots that read it */
        uint32_t s = (uint32_t)__builtin_ctzll(m);
        weft__wait_need(&w, me, s, b->last_read[s]);
      }
  }
  for (uint32_t k = 0; k < nd->nwaits; k++) {
    const replay_pos *iw = &pl->iwaits[nd->wait0 + k];
    weft__wait_need(&w, me, iw->slot, base[iw->slot] + iw->pos);
  }
  uint64_t *synced = &dev->ms.synced[(size_t)me * dev->max_streams];
  c->task.nwaits = 0;
  for (uint64_t m = w.mask; m; m &= m - 1) {
    uint32_t s = (uint32_t)__builtin_ctzll(m);
    if (synced[s] >= w.seq[s]) {
      dev->stats.waits_elided++;
      continue;
    }
    synced[s] = w.seq[s];
    c->task.waits[c->task.nwaits++] = (weft_stream_wait){dev->streams[s], w.seq[s]};
    dev->stats.cross_stream_waits++;
  }
}

/* A fused replay: the plan's launches placed straight onto their lanes'
 * streams, one pre-linked chain per lane, each segment armed to retire in
 * one step. What multistream.c does per launch (align, order, set_waits)
 * is done per buffer here, against the plan. */
static void replay_fused(weft_device *dev, weft_capture *cap, replay_instance *in) {
  const replay_plan *pl = cap->plan;
  uint32_t ms = dev->max_streams;
  /* Work registered before the replay on its lanes, or on any buffer it
   * binds, is placed first (align). */
  uint64_t flush = pl->lanes;
  for (uint32_t u = 0; u < pl->nbufs; u++) flush |= pl->bufs[u].b->pend_mask;
  for (uint64_t m = flush; m; m &= m - 1) {
    uint32_t s = (uint32_t)__builtin_ctzll(m);
    if (dev->ms.batches[s].n) weft__ms_flush(dev, s);
  }
  uint64_t base[WEFT_MAX_STREAMS];
  cmd *head[WEFT_MAX_STREAMS], *tail[WEFT_MAX_STREAMS];
  for (uint64_t m = pl->lanes; m; m &= m - 1) {
    uint32_t s = (uint32_t)__builtin_ctzll(m);
    base[s] = dev->streams[s]->submitted;
    dev->streams[s]->submitted += pl->lane_n[s];
    head[s] = tail[s] = NULL;
  }
  uint64_t placed = dev->ms.placed, n = pl->n;
  dev->ms.placed += n;
  uint64_t no = dev->cmds.launches_numbered; /* scheduler only (launch.c numbers launches) */
  dev->cmds.launches_numbered += n;
  const weft_failpoints *fp = &dev->failpoints;
  bool armed = fp->nlaunches || fp->nkernels || fp->npoison;
  weft_error_graph *graph = &dev->failures.graph;
  for (uint32_t i = 0; i < n; i++) {
    const replay_node *nd = &pl->nodes[i];
    cmd *c = in->cmds[i];
    uint32_t me = nd->slot;
    c->task.seq = base[me] + nd->pos;
    c->task.placed = placed + i + 1;
    c->launch_no = no + i + 1;
    c->task.notify = false;
    c->result = OUT_NONE;
    c->error = NULL;
    c->preset = NULL;
    c->on_slot = (uint16_t)me;
    c->p = nd->writes ? weft_graph_mint(graph, NULL) : 0;
    c->inject =
        armed ? weft_failpoints_launch(fp, c->launch_no, dev->kernels[c->kernel].k.name) : WEFT_OK;
    c->poison = armed && weft_failpoints_poisons(fp, c->launch_no);
    if (nd->pos == 1) {
      head_waits(dev, pl, nd, c, base);
    } else {
      uint64_t *synced = &dev->ms.synced[(size_t)me * ms];
      c->task.nwaits = nd->nwaits;
      for (uint32_t k = 0; k < nd->nwaits; k++) {
        const replay_pos *iw = &pl->iwaits[nd->wait0 + k];
        uint64_t seq = base[iw->slot] + iw->pos;
        c->task.waits[k] = (weft_stream_wait){dev->streams[iw->slot], seq};
        synced[iw->slot] = seq; /* later than any wait before: the plan elided the rest */
      }
      dev->stats.cross_stream_waits += nd->nwaits;
    }
    weft_replay_seg *g = c->instance;
    g->last_seq = c->task.seq;
    g->last_placed = c->task.placed;
    c->task.link.next = NULL;
    c->task.fnext = NULL;
    if (tail[me]) {
      tail[me]->task.link.next = &c->task.link;
      tail[me]->task.fnext = &c->task;
    } else {
      head[me] = c;
    }
    tail[me] = c;
  }
  /* Each buffer pinned once per binding, and left as the replay leaves it
   * (after the head waits above read how the work before left it). */
  for (uint32_t u = 0; u < pl->nbufs; u++) {
    const replay_buf *pb = &pl->bufs[u];
    weft_buf *b = pb->b;
    b->pending += pb->pins;
    if (pb->lw.pos) {
      memset(b->last_read, 0, sizeof(uint64_t) * ms);
      b->read_mask = 0;
      b->lw_slot = pb->lw.slot;
      b->lw_seq = base[pb->lw.slot] + pb->lw.pos;
    }
    for (uint32_t k = 0; k < pb->nrd; k++) {
      const replay_pos *rp = &pl->reads[pb->rd0 + k];
      uint64_t seq = base[rp->slot] + rp->pos;
      if (seq > b->last_read[rp->slot]) {
        b->last_read[rp->slot] = seq;
        b->read_mask |= UINT64_C(1) << rp->slot;
      }
    }
  }
  for (uint32_t g = 0; g < pl->nsegs; g++) in->segs[g].armed = true;
  in->count.inflight = (uint32_t)n;
  dev->ms.inflight += n;
  dev->stats.launches += n;
  dev->stats.launches_replayed += n;
  for (uint64_t m = pl->lanes; m; m &= m - 1) {
    uint32_t s = (uint32_t)__builtin_ctzll(m);
    struct weft_fifo *f = &dev->ms.fifo[s];
    if (f->tail)
      f->tail->fnext = &head[s]->task;
    else
      f->head = &head[s]->task;
    f->tail = &tail[s]->task;
    weft_stream_submit(dev->streams[s], &head[s]->task, &tail[s]->task);
  }
}

static void do_replay(weft_device *dev, weft_capture *cap) {
  if (state_of(cap) != WEFT_CAPTURE_READY) { /* aborted in between: nothing to run */
    replay_done(dev, cap);
    return;
  }
  if (dev->mem.dry_depth) { /* a dry run drops launches: a replay's too (measured, not run) */
    uint64_t n = cap->graph ? weft__launch_count(dev, cap->graph) : run_count(cap);
    dev->stats.launches += n;
    dev->stats.launches_dry += n;
    replay_done(dev, cap);
    return;
  }
  /* The client waited until at most |limit| replays were outstanding, this
   * one included: an instance is free, unless memory for them ran out (or a
   * kernel replayed past the limit). */
  replay_instance *in = NULL;
  for (uint32_t k = 0; k < cap->ninst && !in; k++)
    if (!cap->inst[k].count.inflight) in = &cap->inst[k];
  if (in && cap->plan) {
    replay_fused(dev, cap, in);
    return;
  }
  uint32_t i = 0;
  for (cmd *r = run_list(cap); r; r = weft__cmd_next(r), i++) {
    cmd *c =
        in ? in->cmds[i] : weft__cmd_new_on(dev, CMD_LAUNCH, r->bytes - WEFT_CMD_HEADER, r->stream);
    if (!c) { /* no memory for a clone: the launch fails, its outputs carry why */
      weft__launch_fail(dev, r,
                        weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, r->bytes,
                                              "no memory to replay launch of '%s'",
                                              dev->kernels[r->kernel].k.name));
      continue;
    }
    if (!in) {
      weft__launch_copy(c, r);
      c->detached = false; /* the recording's was detached; this clone counts until it retires */
    }
    weft__launch_replay(dev, c, in ? c->instance : NULL);
  }
  /* Pooled clones tie up no instance; an instance that placed nothing is free. */
  if (!in || !in->count.inflight) replay_done(dev, cap);
}

static void unlink_live(weft_device *dev, weft_capture *cap) {
  for (weft_capture **p = &dev->window.captures; *p; p = &(*p)->next_live)
    if (*p == cap) {
      *p = cap->next_live;
      dev->stats.captures_live--;
      return;
    }
}

static void do_destroy(weft_device *dev, weft_capture *cap) {
  /* Replays in flight run on clones; waiting for them keeps destroy's
   * promise that nothing of the capture is running when it returns. */
  weft__dev_drain(dev);
  abort_capture(dev, cap);
  unlink_live(dev, cap);
}

void weft__capture_process(weft_device *dev, cmd *c) {
  weft_capture *cap = c->data;
  if (c->kind == CMD_REPLAY) {
    do_replay(dev, cap);
    return;
  }
  weft_status st = NULL;
  switch ((int)c->offset) {
  case CAP_PREPARE:
    st = do_prepare(dev, cap);
    break;
  case CAP_BEGIN:
    st = do_begin(dev, cap);
    break;
  case CAP_END:
    st = do_end(dev, cap);
    break;
  case CAP_ABORT:
    if (c->caller && instances_busy(cap)) { /* aborting drains: it would wait for the caller */
      st = weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_capture_abort from kernel '%s' (launch %" PRIu64
                           ") would wait for that kernel: replays of the capture are in flight, "
                           "and aborting waits for every running kernel",
                           dev->kernels[c->caller->kernel].k.name, c->caller->launch_no);
      break;
    }
    if (state_of(cap) == WEFT_CAPTURE_RECORDING && cap->doom) {
      /* Doomed and abandoned: both are reported (tests/failures/test_invariants.c, i22). */
      weft_status both[2] = {
          cap->doom, weft_error_make(WEFT_ERR_GENERIC, "capture: abandoned while recording")};
      cap->doom = NULL;
      st = weft_error_several(both, 2);
    }
    if (state_of(cap) != WEFT_CAPTURE_ABORTED) abort_capture(dev, cap);
    break;
  default:
    do_destroy(dev, cap);
    if (!c->token) { /* from a kernel, which did not wait: the capture is freed here */
      weft__free(&cap->alloc, cap, sizeof(*cap), 16);
      return;
    }
    break;
  }
  weft__token_complete(c->token, st);
}

/* The caller or the device lets go of |cap|; the last frees it. */
static void capture_unown(weft_capture *cap) {
  if (atomic_fetch_sub_explicit(&cap->owners, 1, memory_order_acq_rel) == 1)
    weft__free(&cap->alloc, cap, sizeof(*cap), 16);
}

/* Close: every capture still alive ends and gives back what it held; the
 * object itself stays the caller's until it destroys it. */
void weft__capture_close_all(weft_device *dev) {
  while (dev->window.captures) {
    weft_capture *cap = dev->window.captures;
    abort_capture(dev, cap);
    unlink_live(dev, cap);
    if (cap->destroy_cmd) weft__cmd_free(cap->destroy_cmd);
    cap->destroy_cmd = NULL;
    atomic_store_explicit(&cap->closed, 1, memory_order_release);
    capture_unown(cap);
  }
}

static weft_status device_closed(void) {
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "the capture's device is closed");
}

/* ---- client calls ----------------------------------------------------------------------- */

static weft_status call(weft_capture *cap, int op) {
  if (!cap) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "capture is NULL");
  if (atomic_load_explicit(&cap->closed, memory_order_acquire)) return device_closed();
  weft_device *dev = cap->dev;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  if (op == CAP_BEGIN && (st = weft__refuse_in_kernel(dev, "weft_capture_begin",
                                                      "beginning waits for every running kernel")))
    return st;
  cmd *c = weft__cmd_new(dev, CMD_CAPTURE, 0);
  if (!c) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(cmd), "a capture command");
  c->data = cap;
  c->offset = (uint64_t)op;
  return weft__cmd_call(dev, c);
}

weft_status weft_capture_prepare(weft_device *dev, const weft_stream_id *streams, size_t n,
                                 weft_capture **out) {
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "out is NULL");
  *out = NULL;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_blocking(dev, &in);
  if (st) return st;
  if (n == 0) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "a capture needs a stream");
  if (!streams) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "streams is NULL");
  weft_capture *cap = weft__calloc(&dev->alloc, sizeof(*cap), 16);
  if (!cap) return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(*cap), "a capture");
  if (!(cap->destroy_cmd = weft__cmd_new(dev, CMD_CAPTURE, 0))) {
    weft__free(&dev->alloc, cap, sizeof(*cap), 16);
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(cmd),
                                 "a capture's destroy command");
  }
  weft__cmd_detach(dev, cap->destroy_cmd);
  cap->dev = dev;
  cap->alloc = dev->alloc;
  atomic_init(&cap->owners, 2);
  for (size_t i = 0; i < n; i++) {
    cap->mask |= UINT64_C(1) << weft__slot_of(dev, streams[i]);
    if (opened_on(cap, streams[i])) continue;
    if (cap->nids == WEFT_MAX_STREAMS) {
      weft__cmd_free(cap->destroy_cmd);
      weft__free(&dev->alloc, cap, sizeof(*cap), 16);
      return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                             "a capture is opened on at most %u distinct stream ids",
                             WEFT_MAX_STREAMS);
    }
    cap->ids[cap->nids++] = streams[i];
  }
  if ((st = call(cap, CAP_PREPARE))) {
    weft__cmd_free(cap->destroy_cmd);
    weft__free(&dev->alloc, cap, sizeof(*cap), 16);
    return st;
  }
  *out = cap;
  return NULL;
}

weft_status weft_capture_begin(weft_capture *cap) {
  return call(cap, CAP_BEGIN);
}

weft_status weft_capture_end(weft_capture *cap) {
  return call(cap, CAP_END);
}

weft_status weft_capture_abort(weft_capture *cap) {
  return call(cap, CAP_ABORT);
}

/* Takes a replay slot, if one of the WEFT_REPLAY_INSTANCES is free: the
 * check and the increment are one step, so concurrent replayers of one
 * capture never take more slots than there are instances. */
static bool instance_take(void *arg) {
  weft_capture *cap = arg;
  uint32_t n = atomic_load_explicit(&cap->outstanding, memory_order_relaxed);
  while (n < cap->limit)
    if (atomic_compare_exchange_weak_explicit(&cap->outstanding, &n, n + 1, memory_order_acquire,
                                              memory_order_relaxed))
      return true;
  return false;
}

weft_status weft_capture_replay(weft_capture *cap) {
  if (!cap) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "capture is NULL");
  if (atomic_load_explicit(&cap->closed, memory_order_acquire)) return device_closed();
  weft_device *dev = cap->dev;
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  uint32_t s = state_of(cap);
  if (s != WEFT_CAPTURE_READY) return out_of_order("replay", s, "after a successful end");
  /* Back-pressure: at most WEFT_REPLAY_INSTANCES replays of one capture in
   * flight, from any number of threads (the wait takes the slot). A kernel
   * never waits (the replays in flight may wait for it), nor does the
   * scheduler's own thread (an import's release callback, the OOM observer,
   * a CUDA native kernel: the replays wait for it to process them): it takes
   * a slot regardless, and past the instances its replays run on clones. */
  if (weft__running_kernel(dev) || weft__dev_scheduling() == dev)
    atomic_fetch_add_explicit(&cap->outstanding, 1, memory_order_relaxed);
  else
    weft__wait_room(dev, instance_take, cap);
  /* Counted against the first stream the replay runs on, like its launches. */
  cmd *c = weft__cmd_new_on(dev, CMD_REPLAY, 0, (weft_stream_id)__builtin_ctzll(cap->mask));
  if (!c) { /* the slot goes back: the replay never happened */
    atomic_fetch_sub_explicit(&cap->outstanding, 1, memory_order_release);
    weft__ec_notify(&dev->cmds.room);
    return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, sizeof(cmd), "a replay command");
  }
  c->data = cap;
  weft__cmd_submit(dev, c);
  return NULL;
}

weft_capture_state weft_capture_state_of(const weft_capture *cap) {
  return cap ? (weft_capture_state)state_of(cap) : (weft_capture_state)0;
}

size_t weft_capture_launches(const weft_capture *cap) {
  return cap ? (size_t)atomic_load_explicit(&cap->nrec, memory_order_relaxed) : 0;
}

void weft_capture_destroy(weft_capture *cap) {
  if (!cap) return;
  /* After close: the device took everything the capture held; only the
   * object is left, on the device's allocator (copied). */
  if (atomic_load_explicit(&cap->closed, memory_order_acquire)) {
    capture_unown(cap);
    return;
  }
  weft_device *dev = cap->dev;
  /* Destroy cannot fail: even a poisoned device's scheduler takes it, and its
   * command was taken at prepare. A device that is closing ends the capture
   * itself (close_all, which frees that command): the caller only lets go of
   * the object. */
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter_open(dev, &in);
  if (st) {
    weft_error_free(st);
    capture_unown(cap);
    return;
  }
  cmd *c = cap->destroy_cmd;
  cap->destroy_cmd = NULL; /* the scheduler frees it (uncounted: detached) */
  c->data = cap;
  c->offset = CAP_DESTROY;
  /* Destroying waits for every running kernel, and for the scheduler: from a
   * kernel, or from a reclaim callback on the scheduler's own thread, it does
   * not wait; the scheduler frees the capture once the caller has returned. */
  if (weft__running_kernel(dev) || weft__dev_scheduling() == dev) {
    weft__cmd_submit(dev, c);
    return;
  }
  weft_token tok;
  weft__token_init(&tok);
  c->token = &tok;
  weft__cmd_submit(dev, c);
  weft_error_free(weft__token_wait(&tok));
  /* The scheduler unlinked it: the device let go, and so does the caller. */
  weft__free(&cap->alloc, cap, sizeof(*cap), 16);
}
