/* The model-based randomized test of failure handling: random
 * programs of create / write / launch (random bindings over random byte
 * ranges, random streams folded onto four slots) / injected faults (a kernel
 * that returns an error, `launch#K=KIND` failpoints set at open or just before
 * launch K, a `kernel:flaky=KIND` failpoint) / read / release / cleanup / sync
 * / check run on weft and on a small reference model written here, and every
 * read must agree with the model: the exact bytes, or the failure the model
 * says covers them (root kind and message, the failure id learned on first
 * sight and then held to, and the chain of skipped launches).
 *
 * The model is sequential: commands come from one thread, so each is ordered
 * after the ones submitted before it (linearizable submission). Per buffer it
 * keeps the bytes, which bytes are defined, and a failure per byte:
 *   - a launch whose READ range (READ or READ_WRITE binding, in binding order)
 *     touches a failed byte is skipped; its WRITE ranges take the root failure
 *     of the first such input, a skip record {kernel, launch, needed, produced}
 *     is appended to that failure;
 *   - a launch that fails (the `fail` kernel, a failpoint) gives its WRITE
 *     ranges a new failure (none when every WRITE range is empty);
 *   - a successful launch or write clears the failures of the bytes it writes.
 * A read range touching failures reports one of them: weft answers a read with
 * the first claim of the buffer's taint list that intersects the range
 * (core/taint.h `failure(r)`; the list order follows
 * core/taint.c: a new failure takes the first slot if free, else is appended,
 * a claim that empties is removed by moving the last one into its slot), and
 * a skip takes the first claim of its first tainted input the same way, so the
 * model keeps that order for the execution view (what the workers decide skips
 * with) and for the scheduler's view (what reads are answered from).
 * A read range covering several failures reports each of them once, in the
 * order of the first byte each covers (docs/errors.md).
 *
 * Failure ids are minted by weft and not predicted: the first report of a
 * model failure learns its id; later reports must name the same id, two model
 * failures never share one, and ids increase in the order the failures were
 * made. The chain is checked exactly while the failure has at most 16 skip
 * records (the records kept); past that, every hop must be one the model knows
 * and the last one must name the failed launch. After a barrier on every
 * stream the device statistics must match the model: launches run / failed /
 * skipped, live buffers, `failures_live` (the distinct failures live buffers
 * carry), and every kernel's invocation count. At the end every buffer is
 * released and `failures_live` must be 0; the counting allocator ends with no
 * live block.
 *
 * Environment: WEFT_MODEL_SEEDS (programs, split over the two tests),
 * WEFT_MODEL_SEED_BASE (first seed), WEFT_MODEL_STEPS (steps per program),
 * WEFT_MODEL_TRACE=1 (print every command), WEFT_MODEL_ALL_FAILURES=1 (a read
 * must report every failure covering its bytes). A mismatch prints the seed,
 * the step and the last commands; rerun it alone with
 * WEFT_MODEL_SEED_BASE=<seed> WEFT_MODEL_SEEDS=1. */
#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <weft/weft.h>

#include "support/asan_criterion.h"

#ifdef HAVE_ASAN
/* ASan runs the programs several times slower: fewer of them by default. */
#define DEFAULT_SEEDS 3000
#else
#define DEFAULT_SEEDS 8000
#endif

#define DEFAULT_STEPS 400
#define PARTS         2 /* tests sharing the seeds (Criterion runs them in parallel) */

#define MAX_BUFS     24
#define MIN_SIZE     16
#define MAX_SIZE     4096
#define MAX_BIND     5 /* 1-3 inputs + 1-2 outputs */
#define NSTREAMS     6 /* logical streams 0..5 ... */
#define SLOTS        4 /* ... folded onto 4 slots */
#define SKIP_KEEP    16
#define MAX_LAUNCHFP 16 /* core/failpoints.h: WEFT_FAILPOINTS_MAX launch entries */
#define PROVISIONAL  UINT32_MAX
#define TRACE        48

/* ---- random numbers ---------------------------------------------------------------------- */

typedef struct rng {
  uint64_t s;
} rng;

static uint64_t rng_next(rng *r) { /* splitmix64 */
  uint64_t z = (r->s += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}

static uint32_t below(rng *r, uint32_t n) {
  return n ? (uint32_t)(rng_next(r) % n) : 0;
}

static bool chance(rng *r, uint32_t percent) {
  return below(r, 100) < percent;
}

/* ---- kernels ---------------------------------------------------------------------------- */

enum { K_ADD, K_MIX, K_COPY, K_FAIL, K_FLAKY, NK };
static const char *const kname[NK] = {"add", "mix", "copy", "fail", "flaky"};

/* What a launch passes in its scalars: the access of each binding (the
 * kernel context does not tell) and the constant; `fail` adds its error. */
typedef struct kdesc {
  uint32_t serial; /* fail: its message is "model failure <serial>" */
  uint8_t nb, c, kind, pad;
  uint8_t access[MAX_BIND];
} kdesc;

typedef struct kern {
  int op;
  _Atomic uint64_t *calls; /* block 0 invocations */
} kern;

static weft_error_kind const kinds[] = {
    WEFT_ERR_VALIDATION,
    WEFT_ERR_GENERIC,
    WEFT_ERR_LAUNCH_COMPILATION,
    WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES,
    WEFT_ERR_UNKNOWN,
    WEFT_ERR_OUT_OF_MEMORY,
    WEFT_ERR_BUFFER_TOO_BIG,
    WEFT_ERR_NOT_FOUND,
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* Which input byte output byte |j| uses (input |r| of |size| bytes). */
static uint64_t in_index(int op, uint32_t r, uint64_t j, uint64_t size) {
  return op == K_MIX ? (j * 3u + r) % size : j % size;
}

/* Output |o|'s byte |j| from the inputs (READ-access bindings in binding
 * order). The same function computes the kernel's bytes and the model's: what
 * is tested is that the bytes flow through weft, not the arithmetic. */
static uint8_t out_byte(int op, uint8_t c, uint32_t o, const uint8_t *const *in,
                        const uint64_t *insz, uint32_t nin, uint64_t j) {
  if (op == K_COPY) {
    for (uint32_t r = 0; r < nin; r++)
      if (insz[r]) return in[r][in_index(op, r, j, insz[r])];
    return c;
  }
  uint8_t acc = op == K_MIX ? (uint8_t)(c ^ (o * 0x5bu)) : (uint8_t)(c + 17u * o);
  for (uint32_t r = 0; r < nin; r++) {
    if (!insz[r]) continue;
    uint8_t v = in[r][in_index(op, r, j, insz[r])];
    if (op == K_MIX)
      acc = (uint8_t)(((acc << 1) | (acc >> 7)) ^ v);
    else
      acc = (uint8_t)(acc + (r + 1u) * v);
  }
  return acc;
}

/* Grid (g, 1, 1): block 0 does the work; `fail` scribbles over its first
 * WRITE binding in block 0 and fails in the last block. Inputs are copied
 * first, so outputs aliasing inputs see the launch's inputs. */
static weft_status model_kernel(const weft_kernel_ctx *ctx, void *user) {
  const kern *k = user;
  const kdesc *d = ctx->scalars;
  bool last = ctx->block_idx[0] + 1 == ctx->grid[0];
  if (ctx->block_idx[0] == 0) {
    atomic_fetch_add_explicit(k->calls, 1, memory_order_relaxed);
    if (k->op == K_FAIL) {
      for (uint32_t i = 0; i < d->nb; i++)
        if (d->access[i] == WEFT_WRITE) {
          memset(ctx->buffers[i], 0xEE, (size_t)(ctx->sizes[i] / 2));
          break;
        }
    } else {
      static _Thread_local uint8_t snap[MAX_BIND][MAX_SIZE];
      const uint8_t *in[MAX_BIND];
      uint64_t insz[MAX_BIND];
      uint32_t nin = 0;
      for (uint32_t i = 0; i < d->nb; i++)
        if (d->access[i] & WEFT_READ) {
          memcpy(snap[nin], ctx->buffers[i], (size_t)ctx->sizes[i]);
          in[nin] = snap[nin];
          insz[nin++] = ctx->sizes[i];
        }
      uint32_t o = 0;
      for (uint32_t i = 0; i < d->nb; i++) {
        if (!(d->access[i] & WEFT_WRITE)) continue;
        uint8_t *out = ctx->buffers[i];
        for (uint64_t j = 0; j < ctx->sizes[i]; j++)
          out[j] = out_byte(k->op, d->c, o, in, insz, nin, j);
        o++;
      }
    }
  }
  if (k->op == K_FAIL && last)
    return weft_error_make((weft_error_kind)d->kind, "model failure %" PRIu32, d->serial);
  return NULL;
}

/* ---- the model ------------------------------------------------------------------------ */

/* One taint view of a buffer: the failure of every byte (0: none) and the
 * claim list in weft's order (slot 0 may be empty; the others are dense). */
typedef struct view {
  uint32_t *fail;
  uint32_t *slots;
  uint32_t n, cap;
} view;

typedef struct mbuf {
  bool live;
  weft_buffer h;
  uint32_t size;
  weft_stream_id stream;
  uint8_t *data, *def;
  view ex; /* the execution view: what a worker decides skips with */
  view sc; /* the scheduler's view: what reads are answered from */
} mbuf;

typedef struct mrec {
  uint32_t kernel;
  uint64_t launch, needed;
  uint32_t np;
  uint64_t produced[MAX_BIND];
} mrec;

typedef struct mfail {
  weft_error_kind kind;
  char msg[128];
  bool failpoint;
  uint32_t kernel; /* the failed launch */
  uint64_t launch;
  uint64_t real; /* the id weft gave it, once learned */
  mrec *recs;
  uint32_t nrecs, cap;
} mfail;

typedef struct model {
  uint64_t seed;
  uint32_t step, steps;
  rng r;
  bool trace_all, all_failures;
  weft_counting_allocator *ca;
  weft_allocator alloc;
  weft_device *dev;
  weft_kernel k[NK];
  kern kern[NK];
  _Atomic uint64_t calls[NK];
  uint64_t want_calls[NK];
  mbuf bufs[MAX_BUFS];
  mfail *fails; /* 1-based */
  uint32_t nfails, fcap;
  uint64_t launches, run, failed, skipped, serial;
  uint64_t fp_launch[MAX_LAUNCHFP];
  weft_error_kind fp_kind[MAX_LAUNCHFP];
  uint32_t nfp;
  weft_error_kind flaky_kind;
  uint32_t fail_pct, flaky_pct, fp_pct; /* the program's failure profile */
  bool fragment;                        /* short ranges: many failures per buffer */
  char trace[TRACE][256];
  uint32_t ntrace;
} model;

/* Totals over every program of a test, printed at its end. */
typedef struct tally {
  uint64_t programs, steps, launches, skipped, failed, reads_ok, reads_failed, chains_exact,
      chains_loose, hops, under_reported, checks, learned, max_claims;
} tally;

static tally T;

static void tracef(model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tracef(model *m, const char *fmt, ...) {
  char *line = m->trace[m->ntrace++ % TRACE];
  int n = snprintf(line, 256, "%4u: ", m->step);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line + n, 256 - (size_t)n, fmt, ap);
  va_end(ap);
  if (m->trace_all) fprintf(stderr, "[seed %" PRIu64 "] %s\n", m->seed, line);
}

static void model_fail(model *m, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void model_fail(model *m, int line, const char *fmt, ...) {
  char msg[3072];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nMODEL MISMATCH: seed %" PRIu64 ", step %u (test_model.c:%d)\n%s\n", m->seed,
          m->step, line, msg);
  fprintf(stderr, "last commands:\n");
  uint32_t first = m->ntrace > TRACE ? m->ntrace - TRACE : 0;
  for (uint32_t i = first; i < m->ntrace; i++) fprintf(stderr, "  %s\n", m->trace[i % TRACE]);
  fprintf(stderr, "rerun: WEFT_MODEL_SEED_BASE=%" PRIu64 " WEFT_MODEL_SEEDS=1 (steps %u)\n\n",
          m->seed, m->steps);
  cr_assert_fail("model mismatch: seed %" PRIu64 ", step %u: %s", m->seed, m->step, msg);
}
#define MFAIL(m, ...) model_fail((m), __LINE__, __VA_ARGS__)

static char *fmt_status(weft_status st, char *buf, size_t cap) {
  weft_error_format(st, buf, cap);
  return buf;
}

static void must_ok(model *m, weft_status st, const char *what) {
  if (!st) return;
  char text[2048];
  fmt_status(st, text, sizeof(text));
  weft_error_free(st);
  MFAIL(m, "%s failed: %s", what, text);
}

static void *xcalloc(size_t n, size_t size) {
  void *p = calloc(n ? n : 1, size);
  cr_assert_not_null(p, "out of memory in the test");
  return p;
}

/* ---- taint views (mirroring core/taint.c's claim order) ---------------------------------- */

static void view_init(view *v, uint32_t size) {
  v->fail = xcalloc(size, sizeof(uint32_t));
  v->cap = 8;
  v->slots = xcalloc(v->cap, sizeof(uint32_t));
  v->n = 1; /* slot 0 (the inline claim) always exists, maybe empty */
}

static void view_free(view *v) {
  free(v->fail);
  free(v->slots);
  memset(v, 0, sizeof(*v));
}

static bool any_inside(const view *v, uint32_t f, uint32_t a, uint32_t b) {
  for (uint32_t j = a; j < b; j++)
    if (v->fail[j] == f) return true;
  return false;
}

static bool only_inside(const view *v, uint32_t size, uint32_t f, uint32_t a, uint32_t b) {
  for (uint32_t j = 0; j < a; j++)
    if (v->fail[j] == f) return false;
  for (uint32_t j = b; j < size; j++)
    if (v->fail[j] == f) return false;
  return true;
}

static void view_drop(view *v, uint32_t i) {
  if (i == 0) {
    v->slots[0] = 0;
  } else {
    v->slots[i] = v->slots[v->n - 1];
    v->n--;
  }
}

/* taint(range, f): other claims lose the bytes (emptied ones are dropped in
 * list order), then f's claim takes them (slot 0 if free, else appended). */
static void view_set(view *v, uint32_t size, uint32_t a, uint32_t b, uint32_t f) {
  if (a >= b || !f) return;
  for (int64_t i = 0; i < (int64_t)v->n; i++) {
    uint32_t c = v->slots[i];
    if (!c || c == f) continue;
    if (only_inside(v, size, c, a, b)) {
      view_drop(v, (uint32_t)i);
      i--;
    }
  }
  bool have = false;
  for (uint32_t i = 0; i < v->n && !have; i++) have = v->slots[i] == f;
  if (!have) {
    if (!v->slots[0]) {
      v->slots[0] = f;
    } else {
      if (v->n == v->cap) {
        v->cap *= 2;
        v->slots = realloc(v->slots, sizeof(uint32_t) * v->cap);
        cr_assert_not_null(v->slots);
      }
      v->slots[v->n++] = f;
    }
  }
  for (uint32_t j = a; j < b; j++) v->fail[j] = f;
}

/* written(range): every claim loses the bytes; emptied ones are dropped. */
static void view_written(view *v, uint32_t size, uint32_t a, uint32_t b) {
  if (a >= b) return;
  for (int64_t i = 0; i < (int64_t)v->n; i++) {
    uint32_t c = v->slots[i];
    if (!c || !any_inside(v, c, a, b)) continue;
    if (only_inside(v, size, c, a, b)) {
      view_drop(v, (uint32_t)i);
      i--;
    }
  }
  for (uint32_t j = a; j < b; j++) v->fail[j] = 0;
}

/* failure(range): the first claim intersecting the range. */
static uint32_t view_failure(const view *v, uint32_t a, uint32_t b) {
  if (a >= b) return 0;
  for (uint32_t i = 0; i < v->n; i++)
    if (v->slots[i] && any_inside(v, v->slots[i], a, b)) return v->slots[i];
  return 0;
}

/* The model's own invariant: the claims are exactly the failures the bytes
 * carry, each once, and both views agree byte for byte. */
static void buf_selfcheck(model *m, const mbuf *b, uint32_t idx) {
  if (memcmp(b->ex.fail, b->sc.fail, sizeof(uint32_t) * b->size) != 0)
    MFAIL(m, "model bug: the views of b%u disagree", idx);
  uint64_t claims = b->sc.n - (b->sc.slots[0] == 0);
  if (claims > T.max_claims) T.max_claims = claims;
  const view *vs[2] = {&b->ex, &b->sc};
  for (int k = 0; k < 2; k++) {
    const view *v = vs[k];
    for (uint32_t i = 0; i < v->n; i++) {
      if (i > 0 && !v->slots[i]) MFAIL(m, "model bug: b%u has a hole in its claims", idx);
      if (v->slots[i] && !any_inside(v, v->slots[i], 0, b->size))
        MFAIL(m, "model bug: b%u keeps an empty claim", idx);
      for (uint32_t j = 0; j < i; j++)
        if (v->slots[i] && v->slots[i] == v->slots[j])
          MFAIL(m, "model bug: b%u claims a failure twice", idx);
    }
    for (uint32_t j = 0; j < b->size; j++) {
      if (!v->fail[j]) continue;
      bool found = false;
      for (uint32_t i = 0; i < v->n && !found; i++) found = v->slots[i] == v->fail[j];
      if (!found) MFAIL(m, "model bug: b%u byte %u carries an unclaimed failure", idx, j);
    }
  }
}

/* ---- model state ------------------------------------------------------------------------- */

static uint32_t nlive(const model *m) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < MAX_BUFS; i++) n += m->bufs[i].live;
  return n;
}

static int32_t pick_live(model *m) {
  uint32_t n = nlive(m);
  if (!n) return -1;
  uint32_t k = below(&m->r, n);
  for (uint32_t i = 0; i < MAX_BUFS; i++)
    if (m->bufs[i].live && k-- == 0) return (int32_t)i;
  return -1;
}

static uint32_t new_failure(model *m, weft_error_kind kind, bool failpoint, uint32_t kernel,
                            uint64_t launch, const char *msg) {
  if (m->nfails + 2 > m->fcap) {
    m->fcap = m->fcap ? m->fcap * 2 : 64;
    m->fails = realloc(m->fails, sizeof(mfail) * m->fcap);
    cr_assert_not_null(m->fails);
  }
  uint32_t f = ++m->nfails;
  mfail *F = &m->fails[f];
  memset(F, 0, sizeof(*F));
  F->kind = kind;
  F->failpoint = failpoint;
  F->kernel = kernel;
  F->launch = launch;
  snprintf(F->msg, sizeof(F->msg), "%s", msg);
  return f;
}

static void add_record(mfail *F, const mrec *rec) {
  if (F->nrecs == F->cap) {
    F->cap = F->cap ? F->cap * 2 : 8;
    F->recs = realloc(F->recs, sizeof(mrec) * F->cap);
    cr_assert_not_null(F->recs);
  }
  F->recs[F->nrecs++] = *rec;
}

/* The distinct failures live buffers carry: what failures_live must say
 * once every submitted command has completed. */
static uint64_t live_failures(const model *m) {
  uint8_t *seen = xcalloc(m->nfails + 1, 1);
  uint64_t n = 0;
  for (uint32_t i = 0; i < MAX_BUFS; i++) {
    const mbuf *b = &m->bufs[i];
    if (!b->live) continue;
    for (uint32_t s = 0; s < b->sc.n; s++) {
      uint32_t f = b->sc.slots[s];
      if (f && !seen[f]) {
        seen[f] = 1;
        n++;
      }
    }
  }
  free(seen);
  return n;
}

/* ---- reports ------------------------------------------------------------------------------ */

static void hop_line(const mrec *rec, char *out, size_t cap) {
  snprintf(out, cap, "skipped kernel '%s' (launch %" PRIu64 "): it needed buffer #%" PRIu32,
           kname[rec->kernel], rec->launch, (uint32_t)rec->needed);
}

static bool produced(const mrec *rec, uint64_t memory) {
  for (uint32_t i = 0; i < rec->np; i++)
    if (rec->produced[i] == memory) return true;
  return false;
}

/* The chain weft must report for failure |f| read through |memory| (newest
 * hop first, then the drop note); exact while nothing was dropped. The
 * launch that failed is the origin, never a hop. */
static uint32_t expected_chain(const model *m, uint32_t f, uint64_t memory, char lines[][384],
                               bool *exact) {
  const mfail *F = &m->fails[f];
  *exact = F->nrecs <= SKIP_KEEP;
  uint32_t lo = F->nrecs > SKIP_KEEP ? F->nrecs - SKIP_KEEP : 0, upper = F->nrecs, n = 0;
  uint64_t target = memory;
  for (;;) {
    const mrec *hit = NULL;
    uint32_t i = upper;
    while (i-- > lo)
      if (produced(&F->recs[i], target)) {
        hit = &F->recs[i];
        break;
      }
    if (!hit) break;
    hop_line(hit, lines[n++], 384);
    target = hit->needed;
    upper = i;
  }
  if (n > 0 && F->nrecs > SKIP_KEEP)
    snprintf(lines[n++], 384, "%" PRIu32 " older skip records were dropped", F->nrecs - SKIP_KEEP);
  return n;
}

/* Checks one Unwritten against model failure |f| read through |memory|. */
static void check_unwritten(model *m, weft_status u, uint32_t f, uint64_t memory,
                            const char *what) {
  char text[4096];
  fmt_status(u, text, sizeof(text));
  if (weft_error_kind_of(u) != WEFT_ERR_UNWRITTEN)
    MFAIL(m, "%s: expected Unwritten (model failure f%u), got %s", what, f, text);
  const mfail *F = &m->fails[f];
  uint64_t id = weft_error_failure_id(u);
  if (!id) MFAIL(m, "%s: failure id 0 in %s", what, text);
  /* The id: learned on first sight, then held to; one id per failure; ids
   * increase in the order the failures were made. */
  if (F->real != id) {
    if (F->real)
      MFAIL(m, "%s: model failure f%u was reported as #%" PRIu64 " before, now #%" PRIu64 ": %s",
            what, f, F->real, id, text);
    for (uint32_t g = 1; g <= m->nfails; g++) {
      const mfail *G = &m->fails[g];
      if (!G->real) continue;
      if (G->real == id)
        MFAIL(m, "%s: #%" PRIu64 " names model failure f%u, expected f%u (%s): %s", what, id, g, f,
              F->msg, text);
      if ((g < f && G->real > id) || (g > f && G->real < id))
        MFAIL(m, "%s: ids do not increase: f%u is #%" PRIu64 ", f%u is #%" PRIu64, what, g, G->real,
              f, id);
    }
    m->fails[f].real = id;
    T.learned++;
  }
  if (weft_error_claimed(u) < 1) MFAIL(m, "%s: claimed 0 in %s", what, text);
  /* The root. */
  weft_status root = weft_error_root(u);
  if (weft_error_kind_of(root) != F->kind)
    MFAIL(m, "%s: root kind %s, expected %s (f%u: %s): %s", what,
          weft_error_kind_name(weft_error_kind_of(root)), weft_error_kind_name(F->kind), f, F->msg,
          text);
  const char *msg = weft_error_message(root);
  if (F->failpoint) {
    char want[160];
    snprintf(want, sizeof(want), "launch %" PRIu64 " of kernel '%s'", F->launch, kname[F->kernel]);
    if (!strstr(msg, "failpoint") || !strstr(msg, want))
      MFAIL(m, "%s: root message '%s' should mention the failpoint and '%s' (f%u)", what, msg, want,
            f);
  } else if (strcmp(msg, F->msg) != 0) {
    MFAIL(m, "%s: root message '%s', expected '%s' (f%u)", what, msg, F->msg, f);
  }
  /* The origin: the launch that failed, when one did. */
  const char *origin = weft_error_origin(u);
  if (F->launch) {
    char want[384];
    snprintf(want, sizeof(want), "kernel '%s' (launch %" PRIu64 ")", kname[F->kernel], F->launch);
    if (!origin || strcmp(origin, want) != 0)
      MFAIL(m, "%s: origin of f%u is '%s', expected '%s'", what, f, origin ? origin : "(none)",
            want);
  } else if (origin) {
    MFAIL(m, "%s: f%u came from no launch but names origin '%s'", what, f, origin);
  }
  /* The chain. */
  static char lines[SKIP_KEEP + 1][384];
  bool exact;
  uint32_t n = expected_chain(m, f, memory, lines, &exact);
  size_t got = weft_error_chain_length(u);
  if (exact) {
    T.chains_exact++;
    bool same = got == n;
    for (uint32_t i = 0; same && i < n; i++) same = !strcmp(weft_error_chain_at(u, i), lines[i]);
    if (!same) {
      char want[4096] = "";
      size_t w = 0;
      for (uint32_t i = 0; i < n && w < sizeof(want); i++)
        w += (size_t)snprintf(want + w, sizeof(want) - w, "\n    want[%u] %s", i, lines[i]);
      char have[4096] = "";
      size_t h = 0;
      for (size_t i = 0; i < got && h < sizeof(have); i++)
        h += (size_t)snprintf(have + h, sizeof(have) - h, "\n    got[%zu]  %s", i,
                              weft_error_chain_at(u, i));
      MFAIL(m, "%s: chain of f%u (#%" PRIu64 ", %u records) differs:%s%s", what, f, id, F->nrecs,
            want, have);
    }
  } else {
    /* Records were dropped: every hop must be a known one and the drop note
     * must not claim more than were made. */
    T.chains_loose++;
    for (size_t i = 0; i < got; i++) {
      const char *line = weft_error_chain_at(u, i);
      if (!strncmp(line, "skipped kernel ", 15)) {
        bool known = false;
        char hl[384];
        for (uint32_t r = 0; r < F->nrecs && !known; r++) {
          hop_line(&F->recs[r], hl, sizeof(hl));
          known = !strcmp(hl, line);
        }
        if (!known) MFAIL(m, "%s: hop %zu '%s' is no skip of f%u", what, i, line, f);
      } else if (strstr(line, "older skip records were dropped")) {
        unsigned long long k = strtoull(line, NULL, 10);
        if (k < 1 || k > F->nrecs - SKIP_KEEP)
          MFAIL(m, "%s: '%s' but f%u has %u records", what, line, f, F->nrecs);
      } else {
        MFAIL(m, "%s: unexpected hop %zu '%s' (f%u)", what, i, line, f);
      }
    }
  }
  T.hops += got;
}

/* ---- commands ------------------------------------------------------------------------------ */

static int32_t op_create(model *m) {
  int32_t i = 0;
  while (m->bufs[i].live) i++;
  mbuf *b = &m->bufs[i];
  memset(b, 0, sizeof(*b));
  b->size = MIN_SIZE + below(&m->r, MAX_SIZE - MIN_SIZE + 1);
  b->stream = below(&m->r, NSTREAMS);
  must_ok(m, weft_buffer_create(m->dev, b->stream, b->size, &b->h), "weft_buffer_create");
  b->live = true;
  b->data = xcalloc(b->size, 1);
  b->def = xcalloc(b->size, 1);
  view_init(&b->ex, b->size);
  view_init(&b->sc, b->size);
  tracef(m, "create b%d = #%" PRIu32 " (%u bytes) on s%" PRIu64, i, (uint32_t)b->h.id, b->size,
         b->stream);
  return i;
}

/* A random range of a |size|-byte buffer: sometimes empty, often whole,
 * else anywhere (short ones when the program fragments its buffers). */
static void rand_range(const model *m, rng *r, uint32_t size, uint32_t empty_pct, uint32_t *a,
                       uint32_t *len) {
  uint32_t u = below(r, 100);
  if (u < empty_pct) {
    *a = below(r, size + 1);
    *len = 0;
  } else if (u < (m->fragment ? 10u : 30u)) {
    *a = 0;
    *len = size;
  } else {
    *a = below(r, size);
    uint32_t room = size - *a;
    if (m->fragment && room > size / 8) room = size / 8 ? size / 8 : 1;
    *len = 1 + below(r, room);
  }
}

static void op_write(model *m, int32_t bi, bool whole) {
  mbuf *b = &m->bufs[bi];
  uint32_t a = 0, len = b->size;
  if (!whole) rand_range(m, &m->r, b->size, 3, &a, &len);
  weft_stream_id s = below(&m->r, NSTREAMS);
  uint8_t *src = xcalloc(len, 1);
  for (uint32_t j = 0; j < len; j++) src[j] = (uint8_t)rng_next(&m->r);
  tracef(m, "write b%d [%u,+%u) on s%" PRIu64, bi, a, len, s);
  must_ok(m, weft_buffer_write(m->dev, s, b->h, a, src, len), "weft_buffer_write");
  memcpy(b->data + a, src, len);
  memset(b->def + a, 1, len);
  free(src);
  view_written(&b->ex, b->size, a, a + len);
  view_set(&b->sc, b->size, a, a + len, PROVISIONAL); /* the write scope */
  view_written(&b->sc, b->size, a, a + len);
  buf_selfcheck(m, b, (uint32_t)bi);
}

typedef struct mbind {
  int32_t buf;
  uint32_t a, len;
  weft_access access;
} mbind;

static weft_error_kind launch_failpoint(const model *m, uint64_t launch, int kernel) {
  for (uint32_t i = 0; i < m->nfp; i++)
    if (m->fp_launch[i] == launch) return m->fp_kind[i];
  if (kernel == K_FLAKY) return m->flaky_kind;
  return WEFT_OK;
}

static bool fp_used(const model *m, uint64_t launch) {
  for (uint32_t i = 0; i < m->nfp; i++)
    if (m->fp_launch[i] == launch) return true;
  return false;
}

static void op_launch(model *m) {
  rng *r = &m->r;
  /* The kernel and whether a launch failpoint is set just before it. */
  uint32_t u = below(r, 100);
  uint32_t ok = 100 - m->fail_pct - m->flaky_pct;
  int kernel = u < ok * 4 / 10        ? K_ADD
               : u < ok * 7 / 10      ? K_MIX
               : u < ok               ? K_COPY
               : u < ok + m->fail_pct ? K_FAIL
                                      : K_FLAKY;
  uint64_t launch = m->launches + 1;
  if (m->nfp < MAX_LAUNCHFP && !fp_used(m, launch) && chance(r, m->fp_pct)) {
    weft_error_kind kind = kinds[below(r, NKINDS)];
    char spec[96];
    snprintf(spec, sizeof(spec), "launch#%" PRIu64 "=%s", launch, weft_error_kind_name(kind));
    tracef(m, "set failpoints \"%s\"", spec);
    must_ok(m, weft_device_set_failpoints(m->dev, spec), "weft_device_set_failpoints");
    m->fp_launch[m->nfp] = launch;
    m->fp_kind[m->nfp++] = kind;
  }
  /* Bindings: 1-3 inputs, 1-2 outputs, shuffled. */
  mbind bd[MAX_BIND];
  uint32_t nin = 1 + below(r, 3), nout = 1 + below(r, 2), nb = nin + nout;
  for (uint32_t i = 0; i < nb; i++) {
    bd[i].buf = pick_live(m);
    const mbuf *b = &m->bufs[bd[i].buf];
    bd[i].access = i < nin ? WEFT_READ : chance(r, 30) ? WEFT_READ_WRITE : WEFT_WRITE;
    rand_range(m, r, b->size, i < nin ? 5 : 3, &bd[i].a, &bd[i].len);
  }
  for (uint32_t i = nb - 1; i > 0; i--) {
    uint32_t j = below(r, i + 1);
    mbind t = bd[i];
    bd[i] = bd[j];
    bd[j] = t;
  }
  kdesc d;
  memset(&d, 0, sizeof(d));
  d.nb = (uint8_t)nb;
  d.c = (uint8_t)rng_next(r);
  d.kind = (uint8_t)kinds[below(r, NKINDS)];
  d.serial = (uint32_t)++m->serial;
  weft_binding wb[MAX_BIND];
  for (uint32_t i = 0; i < nb; i++) {
    d.access[i] = (uint8_t)bd[i].access;
    wb[i] = (weft_binding){m->bufs[bd[i].buf].h, bd[i].a, bd[i].len, bd[i].access};
  }
  uint32_t grid[3] = {1 + (chance(r, 20) ? below(r, 3) : 0), 1, 1}, block[3] = {1, 1, 1};
  weft_stream_id s = below(r, NSTREAMS);
  char desc[200];
  size_t w = (size_t)snprintf(desc, sizeof(desc), "launch %" PRIu64 " '%s' s%" PRIu64 " [", launch,
                              kname[kernel], s);
  for (uint32_t i = 0; i < nb && w < sizeof(desc); i++)
    w += (size_t)snprintf(desc + w, sizeof(desc) - w, "%s%s b%d[%u,+%u)", i ? " " : "",
                          bd[i].access == WEFT_READ    ? "R"
                          : bd[i].access == WEFT_WRITE ? "W"
                                                       : "RW",
                          bd[i].buf, bd[i].a, bd[i].len);
  must_ok(m, weft_launch(m->dev, s, m->k[kernel], grid, block, wb, nb, &d, sizeof(d)),
          "weft_launch");
  m->launches = launch;
  T.launches++;

  /* What happens when it runs: the read check on the execution view first. */
  uint32_t root = 0;
  int32_t needed = -1;
  for (uint32_t i = 0; i < nb && !root; i++) {
    if (!(bd[i].access & WEFT_READ)) continue;
    const mbuf *b = &m->bufs[bd[i].buf];
    root = view_failure(&b->ex, bd[i].a, bd[i].a + bd[i].len);
    if (root) needed = bd[i].buf;
  }
  if (root) {
    mrec rec;
    memset(&rec, 0, sizeof(rec));
    rec.kernel = (uint32_t)kernel;
    rec.launch = launch;
    rec.needed = m->bufs[needed].h.id;
    for (uint32_t i = 0; i < nb; i++)
      if (bd[i].access & WEFT_WRITE) rec.produced[rec.np++] = m->bufs[bd[i].buf].h.id;
    add_record(&m->fails[root], &rec);
    for (uint32_t i = 0; i < nb; i++) {
      if (!(bd[i].access & WEFT_WRITE)) continue;
      mbuf *b = &m->bufs[bd[i].buf];
      view_set(&b->ex, b->size, bd[i].a, bd[i].a + bd[i].len, root);
      view_set(&b->sc, b->size, bd[i].a, bd[i].a + bd[i].len, root);
    }
    m->skipped++;
    T.skipped++;
    tracef(m, "%s] -> skipped: f%u needed b%d", desc, root, needed);
  } else {
    weft_error_kind inject = launch_failpoint(m, launch, kernel);
    if (inject != WEFT_OK || kernel == K_FAIL) {
      bool writes = false;
      for (uint32_t i = 0; i < nb; i++) writes |= (bd[i].access & WEFT_WRITE) && bd[i].len;
      uint32_t f = 0;
      if (writes) {
        char msg[64];
        snprintf(msg, sizeof(msg), "model failure %" PRIu32, d.serial);
        f = new_failure(m, inject != WEFT_OK ? inject : (weft_error_kind)d.kind, inject != WEFT_OK,
                        (uint32_t)kernel, launch, msg);
      }
      for (uint32_t i = 0; i < nb; i++) {
        if (!(bd[i].access & WEFT_WRITE)) continue;
        mbuf *b = &m->bufs[bd[i].buf];
        view_set(&b->ex, b->size, bd[i].a, bd[i].a + bd[i].len, f);
        view_set(&b->sc, b->size, bd[i].a, bd[i].a + bd[i].len, f);
        memset(b->def + bd[i].a, 0, bd[i].len); /* scribbled or not: unknown */
      }
      if (inject == WEFT_OK) m->want_calls[K_FAIL]++;
      m->failed++;
      T.failed++;
      tracef(m, "%s] -> fails (%s%s) as f%u", desc, inject != WEFT_OK ? "failpoint " : "",
             weft_error_kind_name(inject != WEFT_OK ? inject : (weft_error_kind)d.kind), f);
    } else {
      /* Runs: inputs are read first, outputs written in binding order. */
      uint8_t *in[MAX_BIND], *indef[MAX_BIND];
      uint64_t insz[MAX_BIND];
      uint32_t ni = 0;
      for (uint32_t i = 0; i < nb; i++) {
        if (!(bd[i].access & WEFT_READ)) continue;
        const mbuf *b = &m->bufs[bd[i].buf];
        in[ni] = xcalloc(bd[i].len, 1);
        indef[ni] = xcalloc(bd[i].len, 1);
        memcpy(in[ni], b->data + bd[i].a, bd[i].len);
        memcpy(indef[ni], b->def + bd[i].a, bd[i].len);
        insz[ni++] = bd[i].len;
      }
      uint32_t o = 0;
      for (uint32_t i = 0; i < nb; i++) {
        if (!(bd[i].access & WEFT_WRITE)) continue;
        mbuf *b = &m->bufs[bd[i].buf];
        for (uint32_t j = 0; j < bd[i].len; j++) {
          b->data[bd[i].a + j] = out_byte(kernel, d.c, o, (const uint8_t *const *)in, insz, ni, j);
          bool def = true;
          for (uint32_t q = 0; q < ni && def; q++) {
            if (!insz[q]) continue;
            def = indef[q][in_index(kernel, q, j, insz[q])] != 0;
            if (kernel == K_COPY) break; /* copy reads its first non-empty input only */
          }
          b->def[bd[i].a + j] = def;
        }
        o++;
      }
      for (uint32_t q = 0; q < ni; q++) {
        free(in[q]);
        free(indef[q]);
      }
      /* The views: the worker marks the bytes written; the scheduler runs
       * the launch in a write scope (a provisional over every output, then
       * every output written). */
      for (uint32_t i = 0; i < nb; i++)
        if (bd[i].access & WEFT_WRITE) {
          mbuf *b = &m->bufs[bd[i].buf];
          view_written(&b->ex, b->size, bd[i].a, bd[i].a + bd[i].len);
        }
      for (uint32_t i = 0; i < nb; i++)
        if (bd[i].access & WEFT_WRITE) {
          mbuf *b = &m->bufs[bd[i].buf];
          view_set(&b->sc, b->size, bd[i].a, bd[i].a + bd[i].len, PROVISIONAL);
        }
      for (uint32_t i = 0; i < nb; i++)
        if (bd[i].access & WEFT_WRITE) {
          mbuf *b = &m->bufs[bd[i].buf];
          view_written(&b->sc, b->size, bd[i].a, bd[i].a + bd[i].len);
        }
      m->want_calls[kernel]++;
      m->run++;
      tracef(m, "%s] -> runs", desc);
    }
  }
  for (uint32_t i = 0; i < nb; i++) buf_selfcheck(m, &m->bufs[bd[i].buf], (uint32_t)bd[i].buf);
}

/* The failures the model says cover [a, a+len) of |b|, distinct. */
static uint32_t covering(const mbuf *b, uint32_t a, uint32_t len, uint32_t *out, uint32_t cap) {
  uint32_t n = 0;
  for (uint32_t j = a; j < a + len; j++) {
    uint32_t f = b->sc.fail[j];
    if (!f) continue;
    bool seen = false;
    for (uint32_t i = 0; i < n && !seen; i++) seen = out[i] == f;
    if (!seen && n < cap) out[n++] = f;
  }
  return n;
}

static void op_read(model *m) {
  int32_t bi = pick_live(m);
  mbuf *b = &m->bufs[bi];
  uint32_t a, len;
  rand_range(m, &m->r, b->size, 4, &a, &len);
  weft_stream_id s = below(&m->r, NSTREAMS);
  uint8_t *dst = xcalloc(len, 1);
  uint32_t want = view_failure(&b->sc, a, a + len);
  tracef(m, "read b%d [%u,+%u) on s%" PRIu64 " (model: %s f%u)", bi, a, len, s,
         want ? "fails with" : "bytes", want);
  weft_status st = weft_buffer_read(m->dev, s, b->h, a, dst, len);
  char what[96];
  snprintf(what, sizeof(what), "read b%d [%u,+%u)", bi, a, len);
  if (!want) {
    if (st) {
      char text[4096];
      fmt_status(st, text, sizeof(text));
      weft_error_free(st);
      free(dst);
      MFAIL(m, "%s: the model has clean bytes, weft says %s", what, text);
    }
    for (uint32_t j = 0; j < len; j++)
      if (b->def[a + j] && dst[j] != b->data[a + j]) {
        uint8_t got = dst[j];
        free(dst);
        MFAIL(m, "%s: byte %u is 0x%02x, the model says 0x%02x", what, a + j, got, b->data[a + j]);
      }
    T.reads_ok++;
    free(dst);
    return;
  }
  free(dst);
  char text[4096];
  fmt_status(st, text, sizeof(text));
  if (weft_error_kind_of(st) != WEFT_ERR_SEVERAL || weft_error_count(st) == 0) {
    weft_error_free(st);
    MFAIL(m, "%s: expected Several{Unwritten f%u}, got %s", what, want, text);
  }
  /* Every failure covering the bytes is reported once, in the order of the
   * first byte each covers (ensure_written walks the range in byte order). */
  uint32_t cover[64];
  uint32_t ncover = covering(b, a, len, cover, 64);
  size_t n = weft_error_count(st);
  uint32_t reported[64];
  (void)want;
  for (size_t i = 0; i < n && i < 64; i++) {
    weft_status u = weft_error_at(st, i);
    uint64_t id = weft_error_failure_id(u);
    uint32_t f = i < ncover ? cover[i] : 0;
    if (!f) {
      weft_error_free(st);
      MFAIL(m, "%s: entry %zu (#%" PRIu64 ") is not a failure over these bytes: %s", what, i, id,
            text);
    }
    for (size_t k = 0; k < i; k++)
      if (reported[k] == f) {
        weft_error_free(st);
        MFAIL(m, "%s: f%u reported twice: %s", what, f, text);
      }
    reported[i] = f;
    check_unwritten(m, u, f, b->h.id, what);
  }
  if (n < ncover) {
    T.under_reported++;
    {
      weft_error_free(st);
      MFAIL(m, "%s: %u failures cover the bytes, %zu reported: %s", what, ncover, n, text);
    }
  }
  weft_error_free(st);
  T.reads_failed++;
}

static void op_release(model *m) {
  int32_t bi = pick_live(m);
  mbuf *b = &m->bufs[bi];
  tracef(m, "release b%d (#%" PRIu32 ")", bi, (uint32_t)b->h.id);
  must_ok(m, weft_buffer_release(m->dev, b->h), "weft_buffer_release");
  b->live = false;
  free(b->data);
  free(b->def);
  view_free(&b->ex);
  view_free(&b->sc);
}

/* A barrier on every slot; then the statistics must match the model. */
static void op_sync_all(model *m) {
  tracef(m, "sync every stream, compare the statistics");
  for (weft_stream_id s = 0; s < SLOTS; s++) must_ok(m, weft_sync(m->dev, s), "weft_sync");
  weft_device_stats st = {0};
  must_ok(m, weft_device_stats_get(m->dev, &st), "weft_device_stats_get");
  uint64_t live = live_failures(m);
  if (st.failures_live != live)
    MFAIL(m,
          "failures_live is %" PRIu64 ", the model's live buffers carry %" PRIu64
          " distinct failures",
          st.failures_live, live);
  if (st.buffers_live != nlive(m))
    MFAIL(m, "buffers_live is %" PRIu64 ", the model holds %u", st.buffers_live, nlive(m));
  if (st.launches != m->launches || st.launches_run != m->run || st.launches_failed != m->failed ||
      st.launches_skipped != m->skipped)
    MFAIL(m,
          "launches %" PRIu64 " run %" PRIu64 " failed %" PRIu64 " skipped %" PRIu64
          "; the model: %" PRIu64 " / %" PRIu64 " / %" PRIu64 " / %" PRIu64,
          st.launches, st.launches_run, st.launches_failed, st.launches_skipped, m->launches,
          m->run, m->failed, m->skipped);
  for (int k = 0; k < NK; k++) {
    uint64_t calls = atomic_load(&m->calls[k]);
    if (calls != m->want_calls[k])
      MFAIL(m, "kernel '%s' ran %" PRIu64 " times, the model says %" PRIu64, kname[k], calls,
            m->want_calls[k]);
  }
}

/* weft_check (no barrier) after a barrier: every buffer's first claim, each
 * failure once, in first-seen order, reported through the first buffer
 * carrying it. */
static void op_check(model *m) {
  op_sync_all(m);
  uint32_t n = 1 + below(&m->r, 3);
  weft_buffer hs[3];
  int32_t idx[3];
  /* Every failure each buffer carries, in byte order, each once overall. */
  uint32_t want[3 * 64], via[3 * 64], nwant = 0;
  for (uint32_t i = 0; i < n; i++) {
    idx[i] = pick_live(m);
    const mbuf *b = &m->bufs[idx[i]];
    hs[i] = b->h;
    uint32_t cov[64];
    uint32_t nc = covering(b, 0, b->size, cov, 64);
    for (uint32_t c = 0; c < nc; c++) {
      bool seen = false;
      for (uint32_t k = 0; k < nwant && !seen; k++) seen = want[k] == cov[c];
      if (!seen) {
        want[nwant] = cov[c];
        via[nwant++] = (uint32_t)idx[i];
      }
    }
  }
  tracef(m, "check b%d%s%s (model: %u failures)", idx[0], n > 1 ? " and more" : "",
         n > 2 ? " (3)" : "", nwant);
  weft_status st = weft_check(m->dev, hs, n);
  char text[4096];
  fmt_status(st, text, sizeof(text));
  if (!nwant) {
    if (st) {
      weft_error_free(st);
      MFAIL(m, "check: the model has clean buffers, weft says %s", text);
    }
    T.checks++;
    return;
  }
  if (weft_error_kind_of(st) != WEFT_ERR_SEVERAL || weft_error_count(st) != nwant) {
    weft_error_free(st);
    MFAIL(m, "check: expected Several of %u Unwritten, got %s", nwant, text);
  }
  for (uint32_t k = 0; k < nwant; k++)
    check_unwritten(m, weft_error_at(st, k), want[k], m->bufs[via[k]].h.id, "check");
  weft_error_free(st);
  T.checks++;
}

/* ---- programs -------------------------------------------------------------------------------- */

static uint64_t env_u64(const char *name, uint64_t def) {
  const char *v = getenv(name);
  if (!v || !*v) return def;
  char *end;
  unsigned long long x = strtoull(v, &end, 0);
  cr_assert(*end == '\0', "%s=%s is not a number", name, v);
  return x;
}

static void program(uint64_t seed, uint32_t steps) {
  static model mm;
  model *m = &mm;
  memset(m, 0, sizeof(*m));
  m->seed = seed;
  m->steps = steps;
  m->r.s = seed * 0x2545f4914f6cdd1du + 0x9e3779b97f4a7c15u;
  m->trace_all = env_u64("WEFT_MODEL_TRACE", 0) != 0;
  m->all_failures = env_u64("WEFT_MODEL_ALL_FAILURES", 0) != 0;
  must_ok(m, weft_counting_allocator_create(&m->ca), "weft_counting_allocator_create");
  m->alloc = weft_counting_allocator_get(m->ca);

  /* How often launches fail: rarely, sometimes or often (then failures
   * overlap inside buffers and the claim order matters). */
  static const uint32_t profiles[3][3] = {{2, 1, 1}, {4, 2, 2}, {10, 5, 5}};
  const uint32_t *prof = profiles[below(&m->r, 3)];
  m->fail_pct = prof[0];
  m->flaky_pct = prof[1];
  m->fp_pct = prof[2];
  m->fragment = chance(&m->r, 25);

  /* Failpoints at open: the flaky kernel always fails, and a few launches. */
  char spec[512];
  m->flaky_kind = kinds[below(&m->r, NKINDS)];
  size_t w =
      (size_t)snprintf(spec, sizeof(spec), "kernel:flaky=%s", weft_error_kind_name(m->flaky_kind));
  uint32_t nopen = below(&m->r, 4);
  for (uint32_t i = 0; i < nopen; i++) {
    uint64_t k = 1 + below(&m->r, steps / 2 + 1);
    if (fp_used(m, k)) continue;
    weft_error_kind kind = kinds[below(&m->r, NKINDS)];
    w += (size_t)snprintf(spec + w, sizeof(spec) - w, "; launch#%" PRIu64 "=%s", k,
                          weft_error_kind_name(kind));
    m->fp_launch[m->nfp] = k;
    m->fp_kind[m->nfp++] = kind;
  }
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &m->alloc;
  o.max_streams = SLOTS;
  static const uint32_t tasks[] = {1, 3, 32};
  o.max_tasks = tasks[below(&m->r, 3)];
  o.strategy = chance(&m->r, 50) ? WEFT_STRATEGY_INTERLEAVE : WEFT_STRATEGY_SEQUENTIAL;
  o.failpoints = spec;
  tracef(m, "open: max_tasks %u, %s, failing launches %u%%%s, failpoints \"%s\"", o.max_tasks,
         o.strategy == WEFT_STRATEGY_INTERLEAVE ? "interleave" : "sequential",
         m->fail_pct + m->flaky_pct + m->fp_pct, m->fragment ? ", short ranges" : "", spec);
  must_ok(m, weft_device_open(&o, &m->dev), "weft_device_open");
  for (int k = 0; k < NK; k++) {
    m->kern[k] = (kern){k == K_FLAKY ? K_ADD : k, &m->calls[k]};
    must_ok(m, weft_kernel_host(m->dev, kname[k], model_kernel, &m->kern[k], &m->k[k]),
            "weft_kernel_host");
  }

  for (m->step = 1; m->step <= steps; m->step++) {
    uint32_t live = nlive(m), u = below(&m->r, 100);
    if (live == 0 || (u < 10 && live < MAX_BUFS)) {
      int32_t bi = op_create(m);
      if (chance(&m->r, 50)) op_write(m, bi, true); /* else its bytes stay undefined */
    } else if (u < 28) {
      op_write(m, pick_live(m), chance(&m->r, 40));
    } else if (u < 62) {
      op_launch(m);
    } else if (u < 82) {
      op_read(m);
    } else if (u < 87) {
      op_release(m);
    } else if (u < 89) {
      weft_stream_id s = below(&m->r, NSTREAMS);
      tracef(m, "memory cleanup on s%" PRIu64, s);
      must_ok(m, weft_memory_cleanup(m->dev, s), "weft_memory_cleanup");
    } else if (u < 94) {
      weft_stream_id s = below(&m->r, NSTREAMS);
      tracef(m, "sync s%" PRIu64, s);
      must_ok(m, weft_sync(m->dev, s), "weft_sync");
    } else if (u < 97) {
      op_sync_all(m);
    } else {
      op_check(m);
    }
  }
  T.steps += steps;

  /* Every buffer released: the graph must be empty once the work is done. */
  for (uint32_t i = 0; i < MAX_BUFS; i++)
    if (m->bufs[i].live) {
      must_ok(m, weft_buffer_release(m->dev, m->bufs[i].h), "weft_buffer_release");
      m->bufs[i].live = false;
      free(m->bufs[i].data);
      free(m->bufs[i].def);
      view_free(&m->bufs[i].ex);
      view_free(&m->bufs[i].sc);
    }
  tracef(m, "release everything");
  op_sync_all(m);
  weft_device_stats st = {0};
  must_ok(m, weft_device_stats_get(m->dev, &st), "weft_device_stats_get");
  if (st.failures_live != 0 || st.buffers_live != 0)
    MFAIL(m, "every buffer released: failures_live %" PRIu64 ", buffers_live %" PRIu64,
          st.failures_live, st.buffers_live);
  /* A lost wake-up is recovered after 100 ms rather than hanging; when
   * hunting for one, WEFT_STRICT_WAKEUPS=1 makes it a failure. */
  if (getenv("WEFT_STRICT_WAKEUPS") && (st.wakeups_recovered || st.streams_recovered))
    MFAIL(m,
          "a parked thread recovered a lost wake-up (scheduler %" PRIu64 ", streams %" PRIu64 ")",
          st.wakeups_recovered, st.streams_recovered);
  weft_device_close(m->dev);
  weft_alloc_counts c = weft_counting_allocator_counts(m->ca);
  if (c.live_blocks)
    MFAIL(m, "%" PRIu64 " allocator blocks (%" PRIu64 " bytes) left after close", c.live_blocks,
          c.live_bytes);
  weft_counting_allocator_destroy(m->ca);
  for (uint32_t f = 1; f <= m->nfails; f++) free(m->fails[f].recs);
  free(m->fails);
  T.programs++;
}

static void run_part(uint32_t part) {
  uint64_t seeds = env_u64("WEFT_MODEL_SEEDS", DEFAULT_SEEDS);
  uint64_t base = env_u64("WEFT_MODEL_SEED_BASE", 1);
  uint32_t steps = (uint32_t)env_u64("WEFT_MODEL_STEPS", DEFAULT_STEPS);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (uint64_t i = part; i < seeds; i += PARTS) program(base + i, steps);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  fprintf(stderr,
          "model part %u: %" PRIu64 " programs (seeds %" PRIu64 "+%u+k*%u < %" PRIu64 "), %" PRIu64
          " steps, %.1f s: %" PRIu64 " launches (%" PRIu64 " failed, %" PRIu64
          " skipped), reads %" PRIu64 " ok / %" PRIu64 " failed, %" PRIu64
          " checks, chains %" PRIu64 " exact / %" PRIu64 " past the record cap, %" PRIu64
          " hops, %" PRIu64 " ids learned, %" PRIu64
          " reads reported fewer failures than cover their bytes, at most %" PRIu64
          " failures in one buffer\n",
          part, T.programs, base, part, PARTS, base + seeds, T.steps, secs, T.launches, T.failed,
          T.skipped, T.reads_ok, T.reads_failed, T.checks, T.chains_exact, T.chains_loose, T.hops,
          T.learned, T.under_reported, T.max_claims);
  ASSERT_NO_LEAKS();
}

Test(model, random_programs_agree_with_the_model_part_0, .timeout = 900) {
  run_part(0);
}

Test(model, random_programs_agree_with_the_model_part_1, .timeout = 900) {
  run_part(1);
}
