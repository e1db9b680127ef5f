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
 * recording (an instance: end builds WEFT_REPLAY_INSTANCES of them, so that
 * back-to-back replays overlap; a replayer waits for a free one past that)
 * or, when memory for the instances ran out, clones the recording into
 * pooled commands. Each launch is registered on
 * its stream, where the usual rules order it.
 *
 * Everything here runs on the scheduler, except the client calls at the end. */
#include <inttypes.h>
#include <stdio.h>
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

static void free_instances(weft_device *dev, weft_capture *cap) {
  for (uint32_t k = 0; k < cap->ninst; k++) {
    uint32_t i = 0;
    for (cmd *r = run_list(cap); r; r = weft__cmd_next(r), i++)
      weft__free(&dev->alloc, cap->inst[k].cmds[i], r->bytes, 16);
    weft__free(&dev->alloc, cap->inst[k].cmds, sizeof(cmd *) * run_count(cap), 16);
    cap->inst[k].cmds = NULL;
    cap->inst[k].count.inflight = 0;
  }
  cap->ninst = 0;
}

/* Builds one more replay instance; NULL when at the limit or out of memory
 * (replays beyond the instances built then clone into pooled commands). */
static replay_instance *build_instance(weft_device *dev, weft_capture *cap) {
  uint64_t n = run_count(cap);
  if (cap->ninst == WEFT_REPLAY_INSTANCES || !n) return NULL;
  {
    replay_instance *in = &cap->inst[cap->ninst];
    in->count.outstanding = &cap->outstanding;
    in->cmds = weft__calloc(&dev->alloc, sizeof(cmd *) * n, 16);
    if (!in->cmds) return NULL;
    uint32_t i = 0;
    for (cmd *r = run_list(cap); r; r = weft__cmd_next(r), i++) {
      cmd *c = weft__alloc(&dev->alloc, r->bytes, 16);
      if (!c) {
        while (i-- > 0) weft__free(&dev->alloc, in->cmds[i], r->bytes, 16);
        weft__free(&dev->alloc, in->cmds, sizeof(cmd *) * n, 16);
        in->cmds = NULL;
        return NULL;
      }
      c->bytes = 0; /* never returned to a pool */
      weft__launch_copy(c, r);
      in->cmds[i] = c;
    }
    cap->ninst++;
    return in;
  }
}

static void free_recording(weft_device *dev, weft_capture *cap) {
  free_instances(dev, cap);
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
  while (build_instance(dev, cap)) { /* all now: a replay allocates nothing */
  }
  set_state(cap, WEFT_CAPTURE_READY);
  return NULL;
}

/* The replay's slot goes back (its instance, if any, is free or retiring). */
static void replay_done(weft_device *dev, weft_capture *cap) {
  atomic_fetch_sub_explicit(&cap->outstanding, 1, memory_order_release);
  weft__ec_notify(&dev->cmds.room);
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
  /* The client waited until at most WEFT_REPLAY_INSTANCES replays were
   * outstanding, this one included: an instance is free, unless memory for
   * them ran out. */
  replay_instance *in = NULL;
  for (uint32_t k = 0; k < cap->ninst && !in; k++)
    if (!cap->inst[k].count.inflight) in = &cap->inst[k];
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
    weft__launch_replay(dev, c, in ? &in->count : NULL);
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
  while (n < WEFT_REPLAY_INSTANCES)
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
   * never waits (the replays in flight may wait for it): it takes a slot
   * regardless, and past the instances its replays run on clones. */
  if (weft__running_kernel(dev))
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
