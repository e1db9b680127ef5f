/* fuzz_failpoints: failpoint specs through the three ways in.
 *
 * Input: one byte picks the route, the rest is the spec text:
 *   route 0: weft_device_set_failpoints on an open device (a NUL byte in the
 *            text splits it into successive calls, which accumulate);
 *   route 1: weft_device_options.failpoints at open;
 *   route 2: the WEFT_FAILPOINTS environment variable at open.
 * A reference parser written here from the normative syntax (SPEC §5.10,
 * core/failpoints.h) says whether each spec is valid; weft must agree, refuse
 * with InvalidArgument naming the bad entry, and a refused call must change
 * nothing. A KIND of TornDown, Skipped, Unwritten or Several is invalid (weft
 * reports those itself: item 30 of issue 12), and through the API a spec with
 * no entry ("", " ; ;") clears every failpoint set so far (item 20).
 *
 * A device that accepted the failpoints then runs a fixed program: one
 * 64-byte buffer, RUNS launches of kernel "k" that each overwrite it whole
 * with their number, and a read. The model predicts the read: poisoned when
 * a poison#K entry has K <= RUNS, the kind of the failpoint that hits the
 * last launch (launch#RUNS first, then kernel:k) as the root of the one
 * Unwritten, else the last launch's bytes. alloc#N entries with N <= 4 (the
 * reservation of the buffer) leave the outcome free, but a successful read
 * must still return the right bytes. */
#include "fuzz/fuzz_support.h"

#include <ctype.h>

#define RUNS      6
#define SPEC_MAX  4096
#define MAX_EACH  16 /* core/failpoints.h: WEFT_FAILPOINTS_MAX */
#define BUF_BYTES 64

/* ---- the reference parser ----------------------------------------------------------------- */

typedef struct ref {
  uint64_t launch_n[MAX_EACH];
  weft_error_kind launch_kind[MAX_EACH];
  weft_error_kind kernel_k; /* first kernel:k entry; WEFT_OK when none */
  uint64_t alloc_min;       /* smallest alloc#N; UINT64_MAX when none */
  uint64_t poison_min;      /* smallest poison#K */
  uint32_t nallocs, nlaunches, nkernels, npoison;
} ref;

static void ref_init(ref *r) {
  memset(r, 0, sizeof(*r));
  r->alloc_min = r->poison_min = UINT64_MAX;
}

static bool ref_count(const char *s, size_t len, uint64_t *out) {
  if (len == 0 || len > 20) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    unsigned d = (unsigned)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return v >= 1;
}

static bool ref_kind(const char *s, size_t len, weft_error_kind *out) {
  for (int k = 1; k < WEFT_ERROR_KIND_COUNT; k++) {
    const char *name = weft_error_kind_name((weft_error_kind)k);
    if (strlen(name) == len && !memcmp(name, s, len)) {
      *out = (weft_error_kind)k;
      return k != WEFT_ERR_TORN_DOWN && k != WEFT_ERR_SKIPPED && k != WEFT_ERR_UNWRITTEN &&
             k != WEFT_ERR_SEVERAL;
    }
  }
  return false;
}

static bool prefix(const char *e, size_t lhs, const char *p) {
  size_t n = strlen(p);
  return lhs > n && !memcmp(e, p, n);
}

static bool ref_entry(const char *e, size_t len, ref *r) {
  const char *eq = memchr(e, '=', len);
  size_t lhs = eq ? (size_t)(eq - e) : len;
  weft_error_kind k = WEFT_OK;
  if (eq && !ref_kind(eq + 1, len - lhs - 1, &k)) return false;
  uint64_t n;
  if (prefix(e, lhs, "alloc#")) {
    if (!eq || !ref_count(e + 6, lhs - 6, &n) || r->nallocs == MAX_EACH) return false;
    r->nallocs++;
    if (n < r->alloc_min) r->alloc_min = n;
  } else if (prefix(e, lhs, "launch#")) {
    if (!eq || !ref_count(e + 7, lhs - 7, &n) || r->nlaunches == MAX_EACH) return false;
    r->launch_n[r->nlaunches] = n;
    r->launch_kind[r->nlaunches++] = k;
  } else if (prefix(e, lhs, "kernel:")) {
    if (!eq || lhs - 7 > 255 || r->nkernels == MAX_EACH) return false;
    if (lhs - 7 == 1 && e[7] == 'k' && r->kernel_k == WEFT_OK) r->kernel_k = k;
    r->nkernels++;
  } else if (prefix(e, lhs, "poison#")) {
    if (eq || !ref_count(e + 7, lhs - 7, &n) || r->npoison == MAX_EACH) return false;
    r->npoison++;
    if (n < r->poison_min) r->poison_min = n;
  } else {
    return false;
  }
  return true;
}

/* Parses |spec| on top of |r|: true (and |r| updated) when it is valid.
 * |clears|: a spec with no entry empties |r| (weft_device_set_failpoints). */
static bool ref_parse(const char *spec, ref *r, bool clears) {
  ref t = *r;
  bool any = false;
  for (const char *s = spec; *s;) {
    const char *end = strchr(s, ';');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    const char *e = s;
    while (len && isspace((unsigned char)*e)) e++, len--;
    while (len && isspace((unsigned char)e[len - 1])) len--;
    if (len && !ref_entry(e, len, &t)) return false;
    any |= len != 0;
    s = end ? end + 1 : s + strlen(s);
  }
  if (!any && clears) ref_init(&t);
  *r = t;
  return true;
}

/* ---- the device side ---------------------------------------------------------------------- */

static weft_status fill_kernel(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  uint8_t v;
  memcpy(&v, ctx->scalars, 1);
  memset(ctx->buffers[0], v, (size_t)ctx->sizes[0]);
  return NULL;
}

static void check_verdict(weft_status st, bool valid, const char *spec) {
  FZ_CHECK(!st == valid, "weft %s the spec the reference %s: '%.300s' (%s)",
           st ? "refused" : "accepted", valid ? "accepts" : "refuses", spec,
           st ? fz_text(st) : "Ok");
  if (st) {
    FZ_CHECK(weft_error_kind_of(st) == WEFT_ERR_INVALID_ARGUMENT, "refusal of kind %s: %s",
             weft_error_kind_name(weft_error_kind_of(st)), fz_text(st));
    FZ_CHECK(strstr(weft_error_message(st), "failpoint") || strstr(weft_error_message(st), "many"),
             "the refusal names no entry: %s", fz_text(st));
  }
}

static void run_program(weft_device *dev, const ref *r) {
  weft_kernel k;
  weft_status st = weft_kernel_host(dev, "k", fill_kernel, NULL, &k);
  FZ_CHECK(!st, "kernel_host: %s", fz_text(st));
  weft_buffer b;
  st = weft_buffer_create(dev, 0, BUF_BYTES, &b);
  if (st) {
    /* Only a poisoned device refuses a create here. */
    FZ_CHECK(weft_error_is_device_poisoned(st), "create: %s", fz_text(st));
    weft_error_free(st);
    return;
  }
  const uint32_t one[3] = {1, 1, 1};
  for (uint8_t i = 1; i <= RUNS; i++) {
    weft_binding bind = {b, 0, WEFT_WHOLE, WEFT_WRITE};
    st = weft_launch(dev, (weft_stream_id)(i % 3), k, one, one, &bind, 1, &i, 1);
    if (st) { /* launches after the poison may be refused with it */
      FZ_CHECK(r->poison_min < i && weft_error_is_device_poisoned(st), "launch %u: %s", i,
               fz_text(st));
      weft_error_free(st);
    }
  }
  uint8_t got[BUF_BYTES];
  st = weft_buffer_read(dev, 0, b, 0, got, sizeof(got));
  weft_status poison = weft_device_poisoned(dev);
  bool poisoned = r->poison_min <= RUNS;
  FZ_CHECK(!poison == !poisoned, "poison#%llu with %d launches, device says %s",
           (unsigned long long)r->poison_min, RUNS, poison ? fz_text(poison) : "healthy");
  weft_error_free(poison);
  weft_error_kind last = WEFT_OK;
  for (uint32_t i = 0; i < r->nlaunches && last == WEFT_OK; i++)
    if (r->launch_n[i] == RUNS) last = r->launch_kind[i];
  if (last == WEFT_OK) last = r->kernel_k;
  bool free_outcome = r->alloc_min <= 4;
  if (poisoned) {
    FZ_CHECK(st && weft_error_is_device_poisoned(st), "read on a poisoned device: %s",
             st ? fz_text(st) : "Ok");
  } else if (st) {
    FZ_CHECK(free_outcome || last != WEFT_OK, "the read failed: %s", fz_text(st));
    if (!free_outcome) {
      FZ_CHECK(weft_error_kind_of(st) == WEFT_ERR_SEVERAL && weft_error_count(st) == 1 &&
                   weft_error_kind_of(weft_error_at(st, 0)) == WEFT_ERR_UNWRITTEN,
               "the read of a failed launch's output: %s", fz_text(st));
      weft_status root = weft_error_root(weft_error_at(st, 0));
      FZ_CHECK(weft_error_kind_of(root) == last, "root %s, the failpoint said %s", fz_text(root),
               weft_error_kind_name(last));
    }
  } else {
    FZ_CHECK(last == WEFT_OK, "the read of launch %d (failpoint %s) succeeded", RUNS,
             weft_error_kind_name(last));
    for (size_t i = 0; i < sizeof(got); i++)
      FZ_CHECK(got[i] == RUNS, "byte %zu is %u, not %u", i, got[i], RUNS);
  }
  weft_error_free(st);
  st = weft_buffer_release(dev, b);
  FZ_CHECK(!st || poisoned, "release: %s", fz_text(st));
  weft_error_free(st);
}

static void check_no_leak(weft_counting_allocator *ca) {
  weft_alloc_counts c = weft_counting_allocator_counts(ca);
  FZ_CHECK(c.live_blocks == 0, "%llu blocks (%llu bytes) outlive the device",
           (unsigned long long)c.live_blocks, (unsigned long long)c.live_bytes);
  weft_counting_allocator_destroy(ca);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size || size > SPEC_MAX) return 0;
  unsigned route = data[0] % 3;
  static char spec[SPEC_MAX + 1];
  memcpy(spec, data + 1, size - 1);
  spec[size - 1] = '\0';
  size_t len = size - 1;

  weft_counting_allocator *ca;
  if (weft_counting_allocator_create(&ca)) return 0;
  weft_allocator alloc = weft_counting_allocator_get(ca);
  weft_device_options o;
  weft_device_options_init(&o);
  o.allocator = &alloc;
  ref r;
  ref_init(&r);
  weft_device *dev = NULL;
  weft_status st;
  if (route == 0) {
    st = weft_device_open(&o, &dev);
    FZ_CHECK(!st, "open: %s", fz_text(st));
    /* Each NUL-separated piece is one call; a refused one changes nothing. */
    for (size_t at = 0; at <= len;) {
      const char *piece = spec + at;
      bool valid = ref_parse(piece, &r, true); /* a refused one leaves |r| as it was */
      st = weft_device_set_failpoints(dev, piece);
      check_verdict(st, valid, piece);
      weft_error_free(st);
      at += strlen(piece) + 1;
    }
  } else {
    bool valid = ref_parse(spec, &r, false);
    if (route == 1) {
      o.failpoints = spec;
    } else if (setenv("WEFT_FAILPOINTS", spec, 1)) {
      weft_counting_allocator_destroy(ca);
      return 0;
    }
    st = weft_device_open(&o, &dev);
    if (route == 2) unsetenv("WEFT_FAILPOINTS");
    check_verdict(st, valid, spec);
    FZ_CHECK(!st == !!dev, "open returned %s with device %p", fz_text(st), (void *)dev);
    weft_error_free(st);
  }
  if (dev) run_program(dev, &r);
  weft_device_close(dev);
  check_no_leak(ca);
  return 0;
}
