/* fuzz_api: the input is a program of API calls on a host device, run on weft
 * and on a small model written here (SPEC §7: "a fuzz target over the same
 * op-sequence interpreter" as the model-based test).
 *
 * The first bytes configure the device (1..4 streams, scheduler mode, batch
 * size, strategy); then each op byte picks a call and the bytes after it its
 * operands: create, write, read, release, launches of three kernels with
 * random bindings (live, released and forged handles, any range, any access),
 * grids, blocks, scalars and streams, sync, check, stats, memory usage,
 * reports, cleanup, allocation modes, layouts (valid ones and fuzzed ones),
 * dry runs, captures (prepare, begin, end, abort, replay, destroy), task
 * graphs (create, add, submit, queries, destroy), failpoints, and close.
 *
 * The model keeps, per buffer, every byte's value and state: known, unknown
 * (written from unknown bytes, or never written), failed (a read must fail)
 * or maybe-failed (a read may fail or succeed), with the error kinds that
 * may be the root. Launches are applied in submission order (weft is
 * linearizable for one client): a launch reading a failed byte is skipped
 * and its outputs fail with the same roots; the "fail" kernel and a
 * kernel:flaky failpoint fail their outputs; a successful launch or write
 * makes its bytes known again. Every call's verdict is predicted where the
 * contract is precise (argument errors and their kinds, released and forged
 * handles refused with NotFound, transitions out of order refused with
 * Generic, reads inside a capture window refused) and every read is checked:
 * known bytes must come back exactly, a failed range must fail with Several
 * of Unwritten whose roots are kinds the model allows. Captures record the
 * launches on their streams and the model replays them; dry runs drop
 * launches, writes and graph submissions. After a poison failpoint, or where
 * the model cannot follow (a fuzzed layout, a graph submitted during a
 * recording), it lets outcomes go but still checks that successful reads of
 * known bytes are right. At the end every capture and graph is destroyed,
 * every buffer released, and after a sync of every stream no failure may be
 * live; the device then closes and its allocator must be empty.
 *
 * OOM mode (bit 6 of the first byte): from the Nth allocation on (once, or
 * every later one) the device's allocator fails; every outcome is then free
 * but a successful read must still return the model's bytes, and nothing may
 * crash, hang or leak (replays included: items 7 and 28 of issue 12).
 *
 * A replay inside a dry run is dropped and changes no byte (item 31). Stream
 * ids are any, folded onto slots: a capture records exactly the launches on
 * the ids it was opened on (item 15), while creates on other ids of its
 * slots may still be Forbidden. A failed read is judged with its origin
 * (item 16): the chain holds only "skipped kernel" hops, newest first, after
 * the launch the origin names; the output of a launch that failed by itself
 * reads back with no hop and that launch as its origin. Failpoint specs
 * naming a kind weft reserves (TornDown, Skipped, Unwritten, Several) are
 * refused, and "" or NULL clears every failpoint (items 30 and 20). */
#include "fuzz/fuzz_support.h"

#include <inttypes.h>

#define MAXB      16  /* buffers the model tracks */
#define MAXSZ     512 /* bytes per buffer */
#define MAXBIND   4
#define MAXCAP    2
#define MAXREC    32
#define MAXGRAPH  2
#define MAXNODES  12
#define MAXOPS    400
#define EXTRA_MAX 64

enum { S_KNOWN, S_UNKNOWN, S_FAILED, S_MAYBE };
enum { K_MIX, K_FAIL, K_FLAKY, NKERN };
static const char *const kernel_names[NKERN] = {"mix", "fail", "flaky"};

/* The kinds the "fail" kernel returns and kernel:flaky failpoints name; the
 * last four are weft's own (item 30 of issue 12): a failpoint naming one is
 * refused, and a kernel returning one fails as its own launch (Generic). */
static const weft_error_kind fail_kinds[] = {
    WEFT_ERR_VALIDATION,    WEFT_ERR_GENERIC,   WEFT_ERR_UNKNOWN,   WEFT_ERR_LAUNCH_COMPILATION,
    WEFT_ERR_OUT_OF_MEMORY, WEFT_ERR_NOT_FOUND, WEFT_ERR_TORN_DOWN, WEFT_ERR_SKIPPED,
    WEFT_ERR_UNWRITTEN,     WEFT_ERR_SEVERAL,
};
#define NFAIL_KINDS (sizeof(fail_kinds) / sizeof(fail_kinds[0]))

static bool reserved_kind(weft_error_kind k) {
  return k == WEFT_ERR_TORN_DOWN || k == WEFT_ERR_SKIPPED || k == WEFT_ERR_UNWRITTEN ||
         k == WEFT_ERR_SEVERAL;
}

/* The root a read reports for a launch that failed with |k|. */
static weft_error_kind reported_kind(weft_error_kind k) {
  return reserved_kind(k) ? WEFT_ERR_GENERIC : k;
}

/* Where a failed byte's failure came from: a launch that failed by itself
 * (its output reads back with no hop), a launch skipped over a failure (at
 * least one hop), or anything else (not judged). */
enum { P_OTHER, P_DIRECT, P_HOP };

#define BIT(k) (UINT32_C(1) << (unsigned)(k))
#define MEM_BITS                                                                                   \
  (BIT(WEFT_ERR_BUFFER_TOO_BIG) | BIT(WEFT_ERR_OUT_OF_MEMORY) |                                    \
   BIT(WEFT_ERR_PAGE_UPDATE_FORBIDDEN) | BIT(WEFT_ERR_PAGE_SIZES_EXHAUSTED) |                      \
   BIT(WEFT_ERR_STORAGE_MAPPING_FAILED))
#define ALL_BITS UINT32_MAX

/* What a launch passes in its scalars: each binding's access (the kernel
 * context does not tell) and the constant; "fail" adds its kind. */
typedef struct kdesc {
  uint8_t nb, c, kind, pad;
  uint8_t access[MAXBIND];
} kdesc;

/* ---- the kernel ---------------------------------------------------------------------------- */

static uint8_t out_byte(uint8_t c, uint32_t o, const uint8_t *const *in, const uint32_t *insz,
                        uint32_t nin, uint32_t j) {
  uint8_t acc = (uint8_t)(c + 17u * o);
  for (uint32_t r = 0; r < nin; r++)
    if (insz[r]) acc = (uint8_t)(acc + (r + 1u) * in[r][j % insz[r]]);
  return acc;
}

/* Block 0 does the work: inputs are copied first, so outputs aliasing inputs
 * see the launch's inputs; outputs are written in binding order. */
static weft_status model_kernel(const weft_kernel_ctx *ctx, void *user) {
  int op = (int)(intptr_t)user;
  kdesc d;
  FZ_CHECK(ctx->scalar_bytes >= sizeof(d), "%zu scalar bytes", ctx->scalar_bytes);
  memcpy(&d, ctx->scalars, sizeof(d));
  FZ_CHECK(d.nb == ctx->num_buffers, "%u bindings described, %zu passed", d.nb, ctx->num_buffers);
  if (ctx->block_idx[0] | ctx->block_idx[1] | ctx->block_idx[2]) return NULL;
  if (op == K_FAIL) return weft_error_make(fail_kinds[d.kind % NFAIL_KINDS], "kernel fail %u", d.c);
  static _Thread_local uint8_t snap[MAXBIND][MAXSZ];
  const uint8_t *in[MAXBIND];
  uint32_t insz[MAXBIND], nin = 0;
  for (uint32_t i = 0; i < d.nb; i++)
    if (d.access[i] & WEFT_READ) {
      FZ_CHECK(ctx->sizes[i] <= MAXSZ, "binding of %" PRIu64 " bytes", ctx->sizes[i]);
      memcpy(snap[nin], ctx->buffers[i], (size_t)ctx->sizes[i]);
      in[nin] = snap[nin];
      insz[nin++] = (uint32_t)ctx->sizes[i];
    }
  uint32_t o = 0;
  for (uint32_t i = 0; i < d.nb; i++) {
    if (!(d.access[i] & WEFT_WRITE)) continue;
    uint8_t *out = ctx->buffers[i];
    for (uint32_t j = 0; j < ctx->sizes[i]; j++) out[j] = out_byte(d.c, o, in, insz, nin, j);
    o++;
  }
  return NULL;
}

/* ---- the model ------------------------------------------------------------------------------ */

typedef struct mbuf {
  weft_buffer h;
  bool used, live;
  bool suspect; /* its reservation may fail (a fuzzed layout was installed) */
  uint32_t size;
  uint8_t v[MAXSZ], st[MAXSZ];
  uint32_t mask[MAXSZ]; /* root kinds a failed or maybe-failed byte may report */
  uint8_t prov[MAXSZ];  /* P_*: where a failed byte's failure came from */
} mbuf;

typedef struct mlaunch {
  int kernel;
  weft_stream_id stream;
  uint32_t grid[3], block[3];
  uint32_t nb;
  weft_binding b[MAXBIND];
  int bi[MAXBIND]; /* model buffer of each binding; -1: forged */
  kdesc d;
  uint8_t extra[EXTRA_MAX];
  uint32_t extra_len;
} mlaunch;

typedef struct mcap {
  weft_capture *h;
  weft_capture_state state;
  uint64_t slots;        /* bit per slot */
  weft_stream_id ids[2]; /* the ids it was opened on: only their launches are recorded */
  uint32_t nids;
  bool doomed, maybe_doomed;
  bool lost; /* a graph was submitted while it recorded: replays are unknown */
  mlaunch rec[MAXREC];
  int nrec;
} mcap;

typedef struct mgraph {
  weft_taskgraph *h;
  mlaunch nodes[MAXNODES];
  int n;
} mgraph;

typedef struct model {
  weft_device *dev;
  weft_kernel k[NKERN];
  uint32_t streams;
  mbuf b[MAXB];
  mcap caps[MAXCAP];
  mgraph graphs[MAXGRAPH];
  weft_buffer dead[8]; /* released handles, reused as stale ones */
  uint32_t ndead;
  int dry;
  bool chaos;                      /* a poison failpoint is set: outcomes are free */
  bool oom;                        /* allocations fail from some point on: outcomes are free */
  bool layout_fuzzed;              /* later creations are suspect */
  weft_error_kind flaky;           /* kernel:flaky fails with it (WEFT_OK: none) */
  bool flaky_maybe;                /* a later entry of another kind may win */
  uint32_t nkernel_fp, npoison_fp; /* at most 16 of each (core/failpoints.h) */
  uint64_t stats_commands, stats_launches;
  int step;
} model;

static int trace_on;
#define TRACE(...)                                                                                 \
  do {                                                                                             \
    if (trace_on) fprintf(stderr, __VA_ARGS__);                                                    \
  } while (0)

/* An error the model lets go: DevicePoisoned after a poison failpoint, any
 * error once allocations fail (OOM mode). */
static bool excused(const model *m, weft_status st) {
  return st && (m->oom || (m->chaos && weft_error_is_device_poisoned(st)));
}

static void expect_kind(weft_status st, weft_error_kind want, const char *what, model *m) {
  if (excused(m, st)) return;
  FZ_CHECK(st && weft_error_kind_of(st) == want, "step %d: %s: expected %s, got %s", m->step, what,
           weft_error_kind_name(want), st ? fz_text(st) : "Ok");
}

/* True when |st| is Ok; an excused error is freed and gives false. */
static bool expect_ok(weft_status st, const char *what, model *m) {
  if (excused(m, st)) {
    weft_error_free(st);
    return false;
  }
  FZ_CHECK(!st, "step %d: %s failed: %s", m->step, what, fz_text(st));
  return true;
}

static uint64_t slot_bit(const model *m, weft_stream_id s) {
  return UINT64_C(1) << (s % m->streams);
}

/* The capture recording stream id |s| (opened on it), or NULL. */
static mcap *recording_on(model *m, weft_stream_id s) {
  for (int i = 0; i < MAXCAP; i++) {
    mcap *c = &m->caps[i];
    if (!c->h || c->state != WEFT_CAPTURE_RECORDING) continue;
    for (uint32_t k = 0; k < c->nids; k++)
      if (c->ids[k] == s) return c;
  }
  return NULL;
}

/* Is |s|'s slot in a recording (whichever ids the capture was opened on)? */
static bool slot_recording(const model *m, weft_stream_id s) {
  for (int i = 0; i < MAXCAP; i++)
    if (m->caps[i].h && m->caps[i].state == WEFT_CAPTURE_RECORDING &&
        (m->caps[i].slots & slot_bit(m, s)))
      return true;
  return false;
}

static bool any_recording(const model *m) {
  for (int i = 0; i < MAXCAP; i++)
    if (m->caps[i].h && m->caps[i].state == WEFT_CAPTURE_RECORDING) return true;
  return false;
}

static weft_stream_id pick_stream(model *m, fz *f) {
  uint8_t sel = fz_u8(f);
  if (sel < 200) return sel % m->streams;
  return sel < 240 ? sel : fz_u64(f);
}

/* A handle: a model buffer (index in *bi), a released one or a forged one. */
static weft_buffer pick_handle(model *m, fz *f, int *bi) {
  uint8_t sel = fz_u8(f);
  *bi = -1;
  if (sel < 224) {
    int i = sel % MAXB;
    if (m->b[i].used) {
      *bi = i;
      return m->b[i].h;
    }
  }
  if (sel < 240 && m->ndead) return m->dead[sel % m->ndead];
  if (sel < 248) {
    int i = sel % MAXB;
    if (m->b[i].used) return (weft_buffer){m->b[i].h.id ^ (UINT64_C(1) << (sel % 64))};
  }
  return (weft_buffer){fz_u64(f)};
}

/* ---- reads ----------------------------------------------------------------------------------- */

/* The launch number in "kernel 'NAME' (launch N)" at the end of |text|
 * (after |lead|), with NAME one of the model's kernels; 0 when malformed. */
static uint64_t launch_named(const char *text, const char *lead, const char **kernel) {
  size_t n = strlen(lead);
  if (strncmp(text, lead, n)) return 0;
  text += n;
  for (int k = 0; k < NKERN; k++) {
    char head[32];
    snprintf(head, sizeof(head), "'%s' (launch ", kernel_names[k]);
    size_t hn = strlen(head);
    if (strncmp(text, head, hn)) continue;
    char *end;
    unsigned long long v = strtoull(text + hn, &end, 10);
    if (end == text + hn || *end != ')') return 0;
    *kernel = kernel_names[k];
    return v;
  }
  return 0;
}

/* Item 16 of issue 12: the chain holds only the skipped hops (plus a note
 * that older records were dropped), and the origin names the launch that
 * failed. (Launch numbers are not compared: a replay numbers its launches
 * when the scheduler runs it, after launches the client submitted later.)
 * |prov|: P_DIRECT when every failed byte read came from a launch that
 * failed by itself (no hop, an origin), P_HOP when every one came from a
 * skipped launch (a hop at least). */
static void check_unwritten(const model *m, weft_status u, int prov) {
  const char *okernel = NULL, *origin = weft_error_origin(u);
  FZ_CHECK(!origin || launch_named(origin, "kernel ", &okernel), "step %d: origin '%s'", m->step,
           origin);
  size_t n = weft_error_chain_length(u);
  for (size_t i = 0; i < n; i++) {
    const char *hop = weft_error_chain_at(u, i), *k = NULL;
    if (i + 1 == n && i > 0 && strstr(hop, "older skip records were dropped")) break;
    FZ_CHECK(launch_named(hop, "skipped kernel ", &k),
             "step %d: hop %zu is no skipped launch: '%s'", m->step, i, hop);
  }
  if (prov == P_DIRECT)
    FZ_CHECK(n == 0 && origin && (!strcmp(okernel, "fail") || !strcmp(okernel, "flaky")),
             "step %d: the output of a failed launch reads with %zu hops, origin %s", m->step, n,
             origin ? origin : "none");
  if (prov == P_HOP)
    FZ_CHECK(n >= 1, "step %d: the output of a skipped launch reads with no hop", m->step);
}

static void check_read(model *m, int bi, uint32_t off, uint32_t len, const uint8_t *got,
                       weft_status st) {
  mbuf *b = &m->b[bi];
  bool must_fail = false, may_fail = b->suspect;
  uint32_t mask = b->suspect ? MEM_BITS : 0;
  int prov = -1; /* the one provenance of every failed byte; P_OTHER when mixed */
  for (uint32_t j = off; j < off + len; j++) {
    if (b->st[j] == S_FAILED) must_fail = true;
    if (b->st[j] == S_FAILED || b->st[j] == S_MAYBE) {
      may_fail = true;
      mask |= b->mask[j];
      int p = b->st[j] == S_FAILED ? b->prov[j] : P_OTHER;
      prov = prov < 0 || prov == p ? p : P_OTHER;
    }
  }
  if (b->suspect) prov = P_OTHER;
  if (st) {
    if (m->chaos || m->oom) return;
    FZ_CHECK(may_fail, "step %d: read of buffer %d [%u, +%u) failed: %s", m->step, bi, off, len,
             fz_text(st));
    FZ_CHECK(weft_error_kind_of(st) == WEFT_ERR_SEVERAL && weft_error_count(st) >= 1,
             "step %d: a failed read is not Several: %s", m->step, fz_text(st));
    for (size_t i = 0; i < weft_error_count(st); i++) {
      weft_status u = weft_error_at(st, i);
      FZ_CHECK(weft_error_kind_of(u) == WEFT_ERR_UNWRITTEN, "step %d: element %zu: %s", m->step, i,
               fz_text(st));
      weft_error_kind rk = weft_error_kind_of(weft_error_root(u));
      FZ_CHECK(rk < 32 && (mask & BIT(rk)), "step %d: root %s is none the model allows: %s",
               m->step, weft_error_kind_name(rk), fz_text(st));
      check_unwritten(m, u, prov);
    }
    return;
  }
  FZ_CHECK(!must_fail || m->chaos || m->oom,
           "step %d: read of buffer %d [%u, +%u) succeeded over a failure", m->step, bi, off, len);
  for (uint32_t j = off; j < off + len; j++)
    FZ_CHECK(b->st[j] != S_KNOWN || got[j - off] == b->v[j],
             "step %d: buffer %d byte %u is %u, the model says %u", m->step, bi, j, got[j - off],
             b->v[j]);
}

/* ---- launches in the model ----------------------------------------------------------------------
 */

/* The verdict weft must give the launch's arguments (Ok, NotFound or
 * InvalidArgument), as weft__launch_check orders its checks. */
static weft_error_kind launch_verdict(const model *m, const mlaunch *l) {
  for (int a = 0; a < 3; a++)
    if (!l->grid[a] || !l->block[a]) return WEFT_ERR_INVALID_ARGUMENT;
  for (uint32_t i = 0; i < l->nb; i++) {
    const weft_binding *b = &l->b[i];
    if (b->access != WEFT_READ && b->access != WEFT_WRITE && b->access != WEFT_READ_WRITE)
      return WEFT_ERR_INVALID_ARGUMENT;
    if (l->bi[i] < 0 || !m->b[l->bi[i]].live) return WEFT_ERR_NOT_FOUND;
    uint64_t size = m->b[l->bi[i]].size;
    if (b->offset > size) return WEFT_ERR_INVALID_ARGUMENT;
    uint64_t len = b->size == WEFT_WHOLE ? size - b->offset : b->size;
    if (len > size - b->offset) return WEFT_ERR_INVALID_ARGUMENT;
  }
  return WEFT_OK;
}

static uint32_t bind_len(const model *m, const mlaunch *l, uint32_t i) {
  uint64_t size = m->b[l->bi[i]].size;
  return (uint32_t)(l->b[i].size == WEFT_WHOLE ? size - l->b[i].offset : l->b[i].size);
}

/* Applies a launch (arguments already valid) to the model. |unsure| makes
 * every output maybe-failed with unknown bytes. */
static void apply_launch(model *m, const mlaunch *l, bool unsure) {
  bool skipped = false, maybe = unsure;
  uint32_t mask = unsure ? ALL_BITS : 0;
  for (uint32_t i = 0; i < l->nb; i++) {
    mbuf *b = &m->b[l->bi[i]];
    uint32_t off = (uint32_t)l->b[i].offset, len = bind_len(m, l, i);
    if (b->suspect) {
      maybe = true;
      mask |= MEM_BITS;
    }
    if (!(l->b[i].access & WEFT_READ)) continue;
    for (uint32_t j = off; j < off + len; j++) {
      if (b->st[j] == S_FAILED) skipped = true;
      if (b->st[j] == S_FAILED || b->st[j] == S_MAYBE) {
        maybe = true;
        mask |= b->mask[j];
      }
    }
  }
  bool fails = false;
  if (l->kernel == K_FAIL) {
    fails = true;
    mask |= BIT(reported_kind(fail_kinds[l->d.kind % NFAIL_KINDS]));
  } else if (l->kernel == K_FLAKY && m->flaky != WEFT_OK) {
    mask |= BIT(m->flaky);
    if (m->flaky_maybe)
      maybe = true;
    else
      fails = true;
  }
  /* Values from a snapshot of the inputs (outputs may alias them). */
  static uint8_t inv[MAXBIND][MAXSZ], ins[MAXBIND][MAXSZ];
  const uint8_t *in[MAXBIND];
  uint32_t insz[MAXBIND], nin = 0;
  for (uint32_t i = 0; i < l->nb; i++) {
    if (!(l->b[i].access & WEFT_READ)) continue;
    mbuf *b = &m->b[l->bi[i]];
    uint32_t off = (uint32_t)l->b[i].offset, len = bind_len(m, l, i);
    memcpy(inv[nin], b->v + off, len);
    memcpy(ins[nin], b->st + off, len);
    in[nin] = inv[nin];
    insz[nin++] = len;
  }
  uint32_t o = 0;
  for (uint32_t i = 0; i < l->nb; i++) {
    if (!(l->b[i].access & WEFT_WRITE)) continue;
    mbuf *b = &m->b[l->bi[i]];
    uint32_t off = (uint32_t)l->b[i].offset, len = bind_len(m, l, i);
    for (uint32_t j = 0; j < len; j++) {
      uint8_t *st = &b->st[off + j];
      if (skipped || fails) {
        *st = S_FAILED;
        b->mask[off + j] = mask;
        b->prov[off + j] = maybe ? P_OTHER : skipped ? P_HOP : P_DIRECT;
        continue;
      }
      b->prov[off + j] = P_OTHER;
      bool known = true;
      for (uint32_t r = 0; r < nin; r++)
        if (insz[r] && ins[r][j % insz[r]] != S_KNOWN) known = false;
      b->v[off + j] = out_byte(l->d.c, o, in, insz, nin, j);
      if (maybe) {
        *st = S_MAYBE;
        b->mask[off + j] = mask;
      } else {
        *st = known ? S_KNOWN : S_UNKNOWN;
        b->mask[off + j] = 0;
      }
    }
    o++;
  }
}

/* Draws a launch's operands from the input. */
static void draw_launch(model *m, fz *f, mlaunch *l) {
  memset(l, 0, sizeof(*l));
  l->kernel = fz_u8(f) % NKERN;
  l->stream = pick_stream(m, f);
  uint8_t g = fz_u8(f);
  l->grid[0] = g == 0xFF ? 0 : 1u + g % 3u;
  l->grid[1] = 1u + (g >> 2) % 2u;
  l->grid[2] = 1;
  uint8_t bl = fz_u8(f);
  l->block[0] = bl == 0xFF ? 0 : bl < 200 ? 1u + bl % 8u : fz_u32(f) | 1u;
  l->block[1] = l->block[2] = 1;
  l->nb = fz_below(f, MAXBIND + 1);
  for (uint32_t i = 0; i < l->nb; i++) {
    l->b[i].buffer = pick_handle(m, f, &l->bi[i]);
    uint8_t a = fz_u8(f);
    l->b[i].access = a < 250 ? (weft_access)(1 + a % 3) : (weft_access)(a & 7);
    uint32_t size = l->bi[i] >= 0 ? m->b[l->bi[i]].size : MAXSZ;
    uint8_t r = fz_u8(f);
    if (r < 96) {
      l->b[i].offset = 0;
      l->b[i].size = WEFT_WHOLE;
    } else if (r < 240) {
      l->b[i].offset = fz_below(f, size + 1);
      l->b[i].size = fz_below(f, (uint32_t)(size - l->b[i].offset) + 1);
    } else {
      l->b[i].offset = fz_size(f);
      l->b[i].size = fz_size(f);
    }
    l->d.access[i] = (uint8_t)l->b[i].access;
  }
  l->d.nb = (uint8_t)l->nb;
  l->d.c = fz_u8(f);
  l->d.kind = fz_u8(f);
  l->extra_len = fz_below(f, EXTRA_MAX + 1);
  for (uint32_t i = 0; i < l->extra_len; i++) l->extra[i] = (uint8_t)i;
}

static weft_status issue_launch(model *m, const mlaunch *l) {
  uint8_t scalars[sizeof(kdesc) + EXTRA_MAX];
  memcpy(scalars, &l->d, sizeof(kdesc));
  memcpy(scalars + sizeof(kdesc), l->extra, l->extra_len);
  return weft_launch(m->dev, l->stream, m->k[l->kernel], l->grid, l->block, l->b, l->nb, scalars,
                     sizeof(kdesc) + l->extra_len);
}

/* Does any input binding of |l| carry a failure (definitely / maybe)? */
static void input_taint(const model *m, const mlaunch *l, bool *definite, bool *maybe) {
  *definite = *maybe = false;
  for (uint32_t i = 0; i < l->nb; i++) {
    const mbuf *b = &m->b[l->bi[i]];
    if (b->suspect) *maybe = true;
    if (!(l->b[i].access & WEFT_READ)) continue;
    uint32_t off = (uint32_t)l->b[i].offset, len = bind_len(m, l, i);
    for (uint32_t j = off; j < off + len; j++) {
      if (b->st[j] == S_FAILED) *definite = true;
      if (b->st[j] == S_MAYBE) *maybe = true;
    }
  }
}

static void op_launch(model *m, fz *f) {
  mlaunch l;
  draw_launch(m, f, &l);
  weft_error_kind want = launch_verdict(m, &l);
  mcap *rec = recording_on(m, l.stream);
  if (rec && want == WEFT_OK && rec->nrec == MAXREC) return; /* the model keeps MAXREC */
  TRACE("%d: launch %s on %" PRIu64 " (%u bindings) -> %s\n", m->step, kernel_names[l.kernel],
        l.stream, l.nb, weft_error_kind_name(want));
  for (uint32_t i = 0; i < l.nb; i++)
    TRACE("    binding %u: buffer %d [%" PRIu64 ", +%" PRIu64 ") access %d\n", i, l.bi[i],
          l.b[i].offset, l.b[i].size, (int)l.b[i].access);
  weft_status st = issue_launch(m, &l);
  if (want != WEFT_OK) {
    expect_kind(st, want, "launch", m);
    weft_error_free(st);
    return;
  }
  if (!expect_ok(st, "launch", m)) return;
  if (m->dry) return; /* measured, not run */
  if (rec) {
    bool definite, maybe;
    input_taint(m, &l, &definite, &maybe);
    rec->doomed |= definite;
    rec->maybe_doomed |= maybe || (l.kernel == K_FLAKY && m->flaky != WEFT_OK);
    rec->rec[rec->nrec++] = l;
    return;
  }
  apply_launch(m, &l, false);
}

/* ---- buffers -----------------------------------------------------------------------------------
 */

static void doom_create_or_write(model *m, weft_stream_id s) {
  mcap *rec = recording_on(m, s);
  if (rec) rec->doomed = true;
}

static void op_create(model *m, fz *f) {
  weft_stream_id s = pick_stream(m, f);
  uint8_t sel = fz_u8(f);
  uint64_t size = sel < 250 ? 1u + fz_below(f, MAXSZ) : fz_size(f);
  int slot = -1;
  for (int i = 0; i < MAXB && slot < 0; i++)
    if (!m->b[i].used) slot = i;
  if (slot < 0 && size >= 1 && size <= MAXSZ) return;
  weft_buffer h;
  weft_status st = weft_buffer_create(m->dev, s, size, &h);
  TRACE("%d: create %" PRIu64 " bytes on %" PRIu64 " -> %s\n", m->step, size, s,
        st ? fz_text(st) : "Ok");
  if (size == 0 || size > WEFT_MAX_BUFFER_SIZE) {
    expect_kind(st, WEFT_ERR_INVALID_ARGUMENT, "create", m);
    weft_error_free(st);
    return;
  }
  if (size > MAXSZ) { /* big ones are released at once: the model tracks small ones */
    if (st) {
      FZ_CHECK(fz_memory_kind(weft_error_kind_of(st)) || m->chaos || m->oom,
               "create of %" PRIu64 ": %s", size, fz_text(st));
      weft_error_free(st);
      return;
    }
    expect_ok(weft_buffer_release(m->dev, h), "release", m);
    return;
  }
  if (!expect_ok(st, "create", m)) return;
  mbuf *b = &m->b[slot];
  memset(b, 0, sizeof(*b));
  b->h = h;
  b->used = b->live = true;
  b->size = (uint32_t)size;
  memset(b->st, S_UNKNOWN, sizeof(b->st));
  /* A fuzzed layout, or a reservation on a recording slot (Forbidden, for
   * every id folded onto it), may fail; a create on a recording id dooms the
   * capture. */
  b->suspect = m->layout_fuzzed || slot_recording(m, s);
  doom_create_or_write(m, s);
}

static void op_write(model *m, fz *f) {
  int bi;
  weft_buffer h = pick_handle(m, f, &bi);
  weft_stream_id s = pick_stream(m, f);
  uint32_t size = bi >= 0 ? m->b[bi].size : MAXSZ;
  uint64_t off = fz_below(f, size + 1), len = fz_below(f, (uint32_t)(size - off) + 1);
  if (fz_u8(f) == 0xFF) len = fz_size(f);
  uint8_t seed = fz_u8(f);
  static uint8_t src[MAXSZ];
  uint64_t n = len < MAXSZ ? len : MAXSZ;
  for (uint64_t j = 0; j < n; j++) src[j] = (uint8_t)(seed + j * 13u);
  if (len > MAXSZ) len = n + 1; /* past every model buffer: must be refused */
  weft_status st = weft_buffer_write(m->dev, s, h, off, src, len);
  TRACE("%d: write %d [%" PRIu64 ", +%" PRIu64 ") on %" PRIu64 " -> %s\n", m->step, bi, off, len, s,
        st ? fz_text(st) : "Ok");
  if (bi < 0 || !m->b[bi].live) {
    expect_kind(st, WEFT_ERR_NOT_FOUND, "write of a dead handle", m);
    weft_error_free(st);
    return;
  }
  if (off + len > size) {
    expect_kind(st, WEFT_ERR_INVALID_ARGUMENT, "write out of range", m);
    weft_error_free(st);
    return;
  }
  if (!expect_ok(st, "write", m)) return;
  if (m->dry) return;
  mbuf *b = &m->b[bi];
  mcap *rec = recording_on(m, s);
  for (uint64_t j = 0; j < len; j++) {
    b->v[off + j] = src[j];
    b->st[off + j] = rec ? S_UNKNOWN : S_KNOWN;
    b->mask[off + j] = 0;
    b->prov[off + j] = P_OTHER;
  }
  doom_create_or_write(m, s);
}

static void op_read(model *m, fz *f) {
  int bi;
  weft_buffer h = pick_handle(m, f, &bi);
  weft_stream_id s = pick_stream(m, f);
  uint32_t size = bi >= 0 ? m->b[bi].size : MAXSZ;
  uint64_t off = fz_below(f, size + 1), len = fz_below(f, (uint32_t)(size - off) + 1);
  if (fz_u8(f) == 0xFF) off = fz_size(f);
  static uint8_t got[MAXSZ + 1];
  uint64_t cap = len <= MAXSZ ? len : 0;
  weft_status st = weft_buffer_read(m->dev, s, h, off, got, cap);
  TRACE("%d: read %d [%" PRIu64 ", +%" PRIu64 ") on %" PRIu64 " -> %s\n", m->step, bi, off, cap, s,
        st ? fz_text(st) : "Ok");
  mcap *rec = recording_on(m, s);
  if (bi < 0 || !m->b[bi].live) {
    /* A dead handle: NotFound (or refused first as a host sync in a window). */
    if (!rec) expect_kind(st, WEFT_ERR_NOT_FOUND, "read of a dead handle", m);
    FZ_CHECK(st, "read of a dead handle succeeded");
  } else if (off > size || cap > size - off) {
    if (!rec) expect_kind(st, WEFT_ERR_INVALID_ARGUMENT, "read out of range", m);
    FZ_CHECK(st, "read out of range succeeded");
  } else if (rec) {
    FZ_CHECK(st || m->chaos || m->oom, "step %d: a read on a recording stream succeeded", m->step);
    rec->doomed = true;
  } else {
    check_read(m, bi, (uint32_t)off, (uint32_t)cap, got, st);
  }
  weft_error_free(st);
}

static void op_release(model *m, fz *f) {
  int bi;
  weft_buffer h = pick_handle(m, f, &bi);
  weft_status st = weft_buffer_release(m->dev, h);
  TRACE("%d: release %d -> %s\n", m->step, bi, st ? fz_text(st) : "Ok");
  if (bi < 0 || !m->b[bi].live) {
    expect_kind(st, WEFT_ERR_NOT_FOUND, "release of a dead handle", m);
    weft_error_free(st);
    return;
  }
  if (!expect_ok(st, "release", m)) return;
  m->b[bi].live = false;
  m->dead[m->ndead < 8 ? m->ndead++ : (uint32_t)m->step % 8] = h;
  /* The slot is reused only when no capture or graph may name it. */
  bool named = false;
  for (int c = 0; c < MAXCAP; c++)
    for (int i = 0; m->caps[c].h && i < m->caps[c].nrec; i++)
      for (uint32_t k = 0; k < m->caps[c].rec[i].nb; k++) named |= m->caps[c].rec[i].bi[k] == bi;
  for (int g = 0; g < MAXGRAPH; g++)
    for (int i = 0; m->graphs[g].h && i < m->graphs[g].n; i++)
      for (uint32_t k = 0; k < m->graphs[g].nodes[i].nb; k++)
        named |= m->graphs[g].nodes[i].bi[k] == bi;
  if (!named) m->b[bi].used = false;
}

/* ---- the rest of the API --------------------------------------------------------------------- */

static void op_sync(model *m, fz *f) {
  weft_stream_id s = pick_stream(m, f);
  weft_status st = weft_sync(m->dev, s);
  mcap *rec = recording_on(m, s);
  if (rec) {
    FZ_CHECK(st || m->chaos || m->oom, "step %d: a sync on a recording stream succeeded", m->step);
    rec->doomed = true;
    weft_error_free(st);
    return;
  }
  expect_ok(st, "sync", m);
}

static void op_check(model *m, fz *f) {
  weft_buffer hs[4];
  size_t n = fz_below(f, 5);
  bool dead = false;
  for (size_t i = 0; i < n; i++) {
    int bi;
    hs[i] = pick_handle(m, f, &bi);
    dead |= bi < 0 || !m->b[bi].live;
  }
  weft_status st = weft_check(m->dev, hs, n);
  if (st && !m->chaos && !m->oom) {
    weft_error_kind k = weft_error_kind_of(st);
    FZ_CHECK(k == WEFT_ERR_SEVERAL || (dead && k == WEFT_ERR_NOT_FOUND), "step %d: check: %s",
             m->step, fz_text(st));
  }
  weft_error_free(st);
}

static void op_stats(model *m) {
  weft_device_stats s = {0};
  weft_status st = weft_device_stats_get(m->dev, &s);
  if (!expect_ok(st, "stats", m)) return;
  uint64_t caps = 0;
  for (int i = 0; i < MAXCAP; i++) caps += m->caps[i].h != NULL;
  FZ_CHECK(s.captures_live == caps, "step %d: %" PRIu64 " captures live, the model has %" PRIu64,
           m->step, s.captures_live, caps);
  FZ_CHECK(s.commands >= m->stats_commands && s.launches >= m->stats_launches,
           "step %d: counters went backwards", m->step);
  FZ_CHECK(s.launches_run + s.launches_failed + s.launches_skipped <=
               s.launches + s.launches_replayed,
           "step %d: %" PRIu64 " run + %" PRIu64 " failed + %" PRIu64 " skipped > %" PRIu64
           " launches + %" PRIu64 " replayed",
           m->step, s.launches_run, s.launches_failed, s.launches_skipped, s.launches,
           s.launches_replayed);
  m->stats_commands = s.commands;
  m->stats_launches = s.launches;
}

static void op_memory(model *m, fz *f) {
  weft_stream_id s = pick_stream(m, f);
  switch (fz_u8(f) % 4) {
  case 0: {
    weft_memory_usage u = {0};
    weft_status st = weft_memory_usage_get(m->dev, &u);
    if (expect_ok(st, "usage", m))
      FZ_CHECK(u.bytes_in_use <= u.bytes_reserved, "in use %" PRIu64 " > reserved %" PRIu64,
               u.bytes_in_use, u.bytes_reserved);
    break;
  }
  case 1: {
    static weft_pool_report r[WEFT_MAX_POOL_REPORTS];
    size_t n = fz_below(f, WEFT_MAX_POOL_REPORTS + 1);
    weft_status st = weft_memory_report_get(m->dev, s, r, &n);
    expect_ok(st, "report", m);
    break;
  }
  case 2:
    expect_ok(weft_memory_cleanup(m->dev, s), "cleanup", m);
    break;
  default: {
    uint8_t mode = fz_u8(f);
    weft_status st = weft_memory_mode(m->dev, s, (weft_alloc_mode)(mode < 250 ? mode % 3 : mode));
    if (mode >= 250 && mode % 3 != mode) {
      expect_kind(st, WEFT_ERR_INVALID_ARGUMENT, "unknown mode", m);
      weft_error_free(st);
    } else {
      expect_ok(st, "mode", m);
    }
    break;
  }
  }
}

static void op_layout(model *m, fz *f) {
  weft_stream_id s = pick_stream(m, f);
  static weft_pool_config pools[8];
  weft_layout l;
  uint8_t sel = fz_u8(f);
  bool fuzzed = sel >= 192;
  if (fuzzed)
    l = fz_layout(f, pools, 8);
  else
    l = (weft_layout){.kind = (weft_layout_kind)(sel % 3)};
  weft_status st = weft_memory_install_layout(m->dev, s, &l);
  TRACE("%d: layout %s on %" PRIu64 " -> %s\n", m->step, fuzzed ? "fuzzed" : "builtin", s,
        st ? fz_text(st) : "Ok");
  if (st) {
    weft_error_kind k = weft_error_kind_of(st);
    FZ_CHECK(m->chaos || m->oom || k == WEFT_ERR_VALIDATION || k == WEFT_ERR_INVALID_ARGUMENT,
             "step %d: layout: %s", m->step, fz_text(st));
    weft_error_free(st);
    return;
  }
  if (fuzzed) m->layout_fuzzed = true;
}

static void op_dry(model *m, fz *f) {
  bool begin = fz_bool(f);
  if (begin && any_recording(m)) return; /* the model does not follow dry recordings */
  weft_status st = weft_memory_dry_run(m->dev, begin);
  if (!begin && m->dry == 0) {
    expect_kind(st, WEFT_ERR_INVALID_ARGUMENT, "dry run end without begin", m);
    weft_error_free(st);
    return;
  }
  if (!expect_ok(st, "dry run", m)) return;
  m->dry += begin ? 1 : -1;
}

static void op_capture(model *m, fz *f) {
  int ci = fz_u8(f) % MAXCAP;
  mcap *c = &m->caps[ci];
  uint8_t what = fz_u8(f) % 6;
  if (what == 0) { /* prepare */
    if (c->h || m->dry) return;
    weft_stream_id ids[2];
    size_t n = 1 + fz_below(f, 2);
    uint64_t slots = 0;
    for (size_t i = 0; i < n; i++) {
      ids[i] = pick_stream(m, f);
      slots |= slot_bit(m, ids[i]);
    }
    bool clash = false;
    for (int i = 0; i < MAXCAP; i++)
      if (m->caps[i].h &&
          (m->caps[i].state == WEFT_CAPTURE_PREPARED || m->caps[i].state == WEFT_CAPTURE_RECORDING))
        clash |= (m->caps[i].slots & slots) != 0;
    weft_status st = weft_capture_prepare(m->dev, ids, n, &c->h);
    TRACE("%d: capture %d prepare -> %s\n", m->step, ci, st ? fz_text(st) : "Ok");
    if (clash) {
      expect_kind(st, WEFT_ERR_GENERIC, "prepare on a slot in a window", m);
      weft_error_free(st);
      c->h = NULL;
      return;
    }
    if (!expect_ok(st, "prepare", m) || !c->h) return;
    c->state = WEFT_CAPTURE_PREPARED;
    c->slots = slots;
    c->nids = (uint32_t)n;
    memcpy(c->ids, ids, sizeof(ids));
    c->doomed = c->maybe_doomed = c->lost = false;
    c->nrec = 0;
    return;
  }
  if (!c->h) return;
  weft_status st = NULL;
  switch (what) {
  case 1: /* begin */
    if (m->dry) return;
    st = weft_capture_begin(c->h);
    TRACE("%d: capture %d begin -> %s\n", m->step, ci, st ? fz_text(st) : "Ok");
    if (c->state != WEFT_CAPTURE_PREPARED) {
      expect_kind(st, WEFT_ERR_GENERIC, "begin out of order", m);
    } else {
      if (!expect_ok(st, "begin", m)) return;
      st = NULL;
      c->state = WEFT_CAPTURE_RECORDING;
    }
    break;
  case 2: /* end */
    st = weft_capture_end(c->h);
    TRACE("%d: capture %d end -> %s\n", m->step, ci, st ? fz_text(st) : "Ok");
    if (c->state != WEFT_CAPTURE_RECORDING) {
      expect_kind(st, WEFT_ERR_GENERIC, "end out of order", m);
    } else if (c->doomed) {
      FZ_CHECK(st, "step %d: end of a doomed recording succeeded", m->step);
      c->state = WEFT_CAPTURE_ABORTED;
    } else if (st) {
      FZ_CHECK(c->maybe_doomed || m->chaos || m->oom, "step %d: end failed: %s", m->step,
               fz_text(st));
      c->state = WEFT_CAPTURE_ABORTED;
    } else {
      c->state = WEFT_CAPTURE_READY;
      FZ_CHECK(c->lost || weft_capture_launches(c->h) == (size_t)c->nrec,
               "step %d: capture recorded %zu launches, the model %d", m->step,
               weft_capture_launches(c->h), c->nrec);
    }
    FZ_CHECK(weft_capture_state_of(c->h) == c->state || m->chaos || m->oom,
             "step %d: capture state %d, the model %d", m->step, weft_capture_state_of(c->h),
             c->state);
    break;
  case 3: /* abort */
    st = weft_capture_abort(c->h);
    /* Out of memory for its command, abort reports it and changes nothing. */
    if (m->oom && weft_error_kind_of(st) == WEFT_ERR_OUT_OF_MEMORY &&
        weft_capture_state_of(c->h) == c->state)
      break;
    c->state = WEFT_CAPTURE_ABORTED;
    FZ_CHECK(weft_capture_state_of(c->h) == WEFT_CAPTURE_ABORTED, "step %d: abort left state %d",
             m->step, weft_capture_state_of(c->h));
    break;
  case 4: { /* replay */
    int times = 1 + (int)fz_below(f, 3);
    for (int t = 0; t < times; t++) {
      st = weft_capture_replay(c->h);
      if (c->state != WEFT_CAPTURE_READY) {
        expect_kind(st, WEFT_ERR_GENERIC, "replay out of order", m);
        break;
      }
      if (!expect_ok(st, "replay", m)) return;
      st = NULL;
      if (m->dry) continue; /* a dry run drops replays: no byte changes (item 31) */
      if (c->lost)
        for (int i = 0; i < MAXB; i++)
          for (uint32_t j = 0; j < m->b[i].size; j++) {
            m->b[i].st[j] = S_MAYBE;
            m->b[i].mask[j] = ALL_BITS;
          }
      for (int i = 0; i < c->nrec; i++) apply_launch(m, &c->rec[i], false);
    }
    break;
  }
  default: /* destroy */
    weft_capture_destroy(c->h);
    c->h = NULL;
    break;
  }
  weft_error_free(st);
}

static void op_graph(model *m, fz *f) {
  int gi = fz_u8(f) % MAXGRAPH;
  mgraph *g = &m->graphs[gi];
  uint8_t what = fz_u8(f) % 5;
  if (!g->h) {
    if (what != 0) return;
    if (!expect_ok(weft_taskgraph_create(m->dev, &g->h), "graph create", m)) g->h = NULL;
    g->n = 0;
    return;
  }
  weft_status st = NULL;
  switch (what) {
  case 0:
  case 1: { /* add */
    mlaunch l;
    draw_launch(m, f, &l);
    if (g->n == MAXNODES) return;
    weft_error_kind want = launch_verdict(m, &l);
    uint32_t node = UINT32_MAX;
    uint8_t scalars[sizeof(kdesc) + EXTRA_MAX];
    memcpy(scalars, &l.d, sizeof(kdesc));
    memcpy(scalars + sizeof(kdesc), l.extra, l.extra_len);
    st = weft_taskgraph_add_launch(g->h, m->k[l.kernel], l.grid, l.block, l.b, l.nb, scalars,
                                   sizeof(kdesc) + l.extra_len, &node);
    TRACE("%d: graph %d add %s -> %s\n", m->step, gi, kernel_names[l.kernel],
          st ? fz_text(st) : "Ok");
    if (want != WEFT_OK) {
      expect_kind(st, want, "graph add", m);
      break;
    }
    if (!expect_ok(st, "graph add", m)) return;
    st = NULL;
    FZ_CHECK(node == (uint32_t)g->n, "step %d: node %u, expected %d", m->step, node, g->n);
    g->nodes[g->n++] = l;
    break;
  }
  case 2: { /* submit */
    weft_stream_id base = pick_stream(m, f);
    bool dead = false;
    for (int i = 0; i < g->n; i++)
      for (uint32_t k = 0; k < g->nodes[i].nb; k++) dead |= !m->b[g->nodes[i].bi[k]].live;
    st = weft_taskgraph_submit(g->h, base);
    TRACE("%d: graph %d submit (%d nodes) -> %s\n", m->step, gi, g->n, st ? fz_text(st) : "Ok");
    if (dead) {
      FZ_CHECK(st || m->chaos || m->oom, "step %d: a graph naming a released buffer was submitted",
               m->step);
      break;
    }
    if (!expect_ok(st, "graph submit", m)) return;
    st = NULL;
    if (m->dry) break;
    bool recording = any_recording(m);
    for (int c = 0; c < MAXCAP && recording; c++)
      if (m->caps[c].h && m->caps[c].state == WEFT_CAPTURE_RECORDING) {
        /* Nodes on its slots may be recorded: the model gives up on it. */
        m->caps[c].maybe_doomed = true;
        m->caps[c].lost = true;
      }
    for (int i = 0; i < g->n; i++) apply_launch(m, &g->nodes[i], recording);
    break;
  }
  case 3: { /* queries */
    FZ_CHECK(weft_taskgraph_node_count(g->h) == (size_t)g->n, "step %d: %zu nodes, model %d",
             m->step, weft_taskgraph_node_count(g->h), g->n);
    size_t edges = weft_taskgraph_edge_count(g->h);
    FZ_CHECK(edges <= (size_t)g->n * (size_t)(g->n) / 2, "step %d: %zu edges for %d nodes", m->step,
             edges, g->n);
    for (size_t i = 0; i < edges; i++) {
      uint32_t from, to;
      if (!expect_ok(weft_taskgraph_edge(g->h, i, &from, &to), "edge", m)) return;
      FZ_CHECK(from < to && to < (uint32_t)g->n, "step %d: edge %u -> %u", m->step, from, to);
    }
    uint32_t lanes = weft_taskgraph_lane_count(g->h);
    FZ_CHECK(g->n == 0 || (lanes >= 1 && lanes <= m->streams), "step %d: %u lanes", m->step, lanes);
    for (int i = 0; i < g->n; i++) {
      weft_taskgraph_node_info info = {0};
      if (!expect_ok(weft_taskgraph_node(g->h, (uint32_t)i, &info), "node info", m)) return;
      FZ_CHECK(info.nbindings == g->nodes[i].nb && info.lane < lanes, "step %d: node %d info",
               m->step, i);
    }
    char *dot = NULL;
    if (!expect_ok(weft_taskgraph_to_dot(g->h, &dot), "to_dot", m)) return;
    FZ_CHECK(dot && strstr(dot, "digraph"), "step %d: dot text", m->step);
    weft_free(dot);
    break;
  }
  default:
    weft_taskgraph_destroy(g->h);
    g->h = NULL;
    break;
  }
  weft_error_free(st);
}

static void op_failpoints(model *m, fz *f) {
  uint8_t sel = fz_u8(f);
  char spec[64];
  const char *arg = spec;
  weft_error_kind k = fail_kinds[sel % NFAIL_KINDS];
  if (sel < 160) {
    snprintf(spec, sizeof(spec), "kernel:flaky=%s", weft_error_kind_name(k));
  } else if (sel < 200) { /* item 20: NULL or a spec with no entry clears them all */
    static const char *const clear[] = {NULL, "", " ; ;"};
    arg = clear[sel % 3];
  } else if (sel < 240) {
    snprintf(spec, sizeof(spec), "kernel:flaky=Nope"); /* refused, changes nothing */
  } else {
    snprintf(spec, sizeof(spec), "poison#%u", 1u + fz_below(f, 64));
  }
  weft_status st = weft_device_set_failpoints(m->dev, arg);
  TRACE("%d: failpoints '%s' -> %s\n", m->step, arg ? arg : "(null)", st ? fz_text(st) : "Ok");
  bool full = (sel < 160 && m->nkernel_fp == 16) || (sel >= 240 && m->npoison_fp == 16);
  /* Item 30: a kind weft reserves for itself is no failpoint kind. */
  bool bad = (sel >= 200 && sel < 240) || (sel < 160 && reserved_kind(k));
  if (bad || full) {
    expect_kind(st, WEFT_ERR_INVALID_ARGUMENT, "a bad failpoint", m);
    weft_error_free(st);
    return;
  }
  if (st && sel < 200 && (m->chaos || m->oom)) {
    weft_error_free(st);
    return;
  }
  if (!expect_ok(st, "failpoints", m)) return;
  if (sel < 160) {
    m->nkernel_fp++;
    /* The first kernel:flaky entry wins. */
    if (m->flaky == WEFT_OK)
      m->flaky = k;
    else if (m->flaky != k)
      m->flaky_maybe = true;
  } else if (sel < 200) {
    m->flaky = WEFT_OK; /* a poison already hit stays: chaos does not end */
    m->flaky_maybe = false;
    m->nkernel_fp = m->npoison_fp = 0;
  } else {
    m->npoison_fp++;
    m->chaos = true;
  }
}

/* Releases everything, checks that no failure outlives its buffers. */
static void teardown(model *m) {
  for (int i = 0; i < MAXCAP; i++)
    if (m->caps[i].h) {
      weft_capture_destroy(m->caps[i].h);
      m->caps[i].h = NULL;
    }
  for (int i = 0; i < MAXGRAPH; i++)
    if (m->graphs[i].h) {
      weft_taskgraph_destroy(m->graphs[i].h);
      m->graphs[i].h = NULL;
    }
  while (m->dry > 0) {
    expect_ok(weft_memory_dry_run(m->dev, false), "dry run end", m);
    m->dry--;
  }
  for (int i = 0; i < MAXB; i++)
    if (m->b[i].used && m->b[i].live) {
      expect_ok(weft_buffer_release(m->dev, m->b[i].h), "release", m);
      m->b[i].live = false;
    }
  for (weft_stream_id s = 0; s < m->streams; s++) expect_ok(weft_sync(m->dev, s), "sync", m);
  weft_device_stats s = {0};
  weft_status st = weft_device_stats_get(m->dev, &s);
  if (st) {
    FZ_CHECK(m->chaos || m->oom, "stats: %s", fz_text(st));
    weft_error_free(st);
    return;
  }
  FZ_CHECK(s.captures_live == 0, "%" PRIu64 " captures live after every destroy", s.captures_live);
  FZ_CHECK(s.failures_live == 0 || m->chaos || m->oom,
           "%" PRIu64 " failures live after every buffer was released", s.failures_live);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static bool init;
  if (!init) {
    trace_on = getenv("FZ_TRACE") != NULL;
    init = true;
  }
  fz f = {data, size};
  static model mm;
  model *m = &mm;
  memset(m, 0, sizeof(*m));
  fz_alloc_state as;
  weft_allocator alloc = fz_allocator(&as);
  weft_device_options o;
  weft_device_options_init(&o);
  uint8_t cfg = fz_u8(&f);
  o.max_streams = m->streams = 1u + cfg % 4u;
  o.scheduler = (cfg >> 2) & 1 ? WEFT_SCHEDULER_COMBINING : WEFT_SCHEDULER_THREAD;
  o.strategy = (cfg >> 3) & 1 ? WEFT_STRATEGY_SEQUENTIAL : WEFT_STRATEGY_INTERLEAVE;
  o.max_tasks = (cfg >> 4) & 1 ? 1 : 32;
  o.max_pending_commands = (cfg >> 5) & 1 ? 64 : 0;
  o.allocator = &alloc;
  weft_status st = weft_device_open(&o, &m->dev);
  FZ_CHECK(!st, "open: %s", fz_text(st));
  for (int k = 0; k < NKERN; k++) {
    st = weft_kernel_host(m->dev, kernel_names[k], model_kernel, (void *)(intptr_t)k, &m->k[k]);
    FZ_CHECK(!st, "kernel: %s", fz_text(st));
  }
  if (cfg & 0x40) { /* OOM mode: the Nth allocation from now fails (and, sticky, every later one) */
    uint16_t n = fz_u16(&f);
    fz_alloc_fail_at(&as, 1u + n % 2048u, (cfg & 0x80) != 0);
    m->oom = true;
  }
  bool closed = false;
  for (m->step = 0; f.n && m->step < MAXOPS && !closed; m->step++) {
    uint8_t op = fz_u8(&f) % 32;
    switch (op) {
    case 0:
    case 1:
    case 2:
      op_create(m, &f);
      break;
    case 3:
    case 4:
    case 5:
      op_write(m, &f);
      break;
    case 6:
    case 7:
    case 8:
    case 9:
      op_read(m, &f);
      break;
    case 10:
    case 11:
      op_release(m, &f);
      break;
    case 12:
    case 13:
    case 14:
    case 15:
    case 16:
    case 17:
      op_launch(m, &f);
      break;
    case 18:
      op_sync(m, &f);
      break;
    case 19:
      op_check(m, &f);
      break;
    case 20:
      op_stats(m);
      break;
    case 21:
    case 22:
      op_memory(m, &f);
      break;
    case 23:
      op_layout(m, &f);
      break;
    case 24:
      op_dry(m, &f);
      break;
    case 25:
    case 26:
    case 27:
      op_capture(m, &f);
      break;
    case 28:
    case 29:
      op_graph(m, &f);
      break;
    case 30:
      op_failpoints(m, &f);
      break;
    default:
      closed = fz_u8(&f) == 0xC1; /* close early (teardown first, as a user must) */
      break;
    }
  }
  teardown(m);
  weft_device_close(m->dev);
  fz_alloc_check_empty(&as);
  return 0;
}
