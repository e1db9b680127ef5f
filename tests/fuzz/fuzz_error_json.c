/* fuzz_error_json: weft_error_from_json and weft_error_to_json.
 *
 * The first byte picks the mode:
 *   even: the rest is a JSON document for weft_error_from_json. A refusal
 *         must be InvalidArgument with *out left NULL. An accepted document
 *         must round-trip: to_json of the parsed error parses again, and the
 *         second to_json is byte for byte the first; the clone serializes to
 *         the same text; both copies format to the same text and answer
 *         every accessor and predicate alike.
 *   odd:  the rest is a program that builds an error with the public
 *         constructors (make, make_sized, wrap, several, unwritten, clone) on
 *         a small stack; what it builds must survive to_json -> from_json ->
 *         to_json unchanged, format the same before and after, and free
 *         cleanly. Built errors nest up to MAX_NEST deep, far past what
 *         from_json parses (64): to_json must refuse (NULL) exactly the
 *         errors a reference count of the JSON nesting puts deeper than
 *         that, and cloning, formatting and freeing must survive any depth
 *         (item 27 of issue 12: constant stack). */
#include "fuzz/fuzz_support.h"

#include <string.h>

#define STACK          8
#define MAX_NEST       1000
#define JSON_MAX_DEPTH 64 /* weft_error_from_json's limit (core/error_json.c) */
#define TEXT_SIZE      8192
#define MAX_NODES      2048

/* Compares every accessor of |a| and |b| (recursively, bounded by |depth|). */
static void same_error(weft_status a, weft_status b, int depth) {
  FZ_CHECK((a == NULL) == (b == NULL), "one of two copies is NULL");
  if (!a || depth > 256) return;
  FZ_CHECK(weft_error_kind_of(a) == weft_error_kind_of(b), "kinds %s vs %s",
           weft_error_kind_name(weft_error_kind_of(a)),
           weft_error_kind_name(weft_error_kind_of(b)));
  FZ_CHECK(!strcmp(weft_error_message(a), weft_error_message(b)), "messages '%s' vs '%s'",
           weft_error_message(a), weft_error_message(b));
  FZ_CHECK(weft_error_size(a) == weft_error_size(b), "sizes differ");
  FZ_CHECK(weft_error_count(a) == weft_error_count(b), "counts differ");
  FZ_CHECK(weft_error_failure_id(a) == weft_error_failure_id(b), "failure ids differ");
  FZ_CHECK(weft_error_claimed(a) == weft_error_claimed(b), "claimed differ");
  FZ_CHECK(weft_error_chain_length(a) == weft_error_chain_length(b), "chain lengths differ");
  for (size_t i = 0; i < weft_error_chain_length(a); i++)
    FZ_CHECK(!strcmp(weft_error_chain_at(a, i), weft_error_chain_at(b, i)), "hop %zu differs", i);
  FZ_CHECK(weft_error_may_succeed_after_reclaim(a) == weft_error_may_succeed_after_reclaim(b),
           "may_succeed_after_reclaim differs");
  FZ_CHECK(weft_error_is_device_poisoned(a) == weft_error_is_device_poisoned(b),
           "is_device_poisoned differs");
  FZ_CHECK(weft_error_is_refusal(a) == weft_error_is_refusal(b), "is_refusal differs");
  same_error(weft_error_source(a), weft_error_source(b), depth + 1);
  same_error(weft_error_root(a), weft_error_root(b), depth + 1);
  for (size_t i = 0; i < weft_error_count(a) && i < 64; i++)
    same_error(weft_error_at(a, i), weft_error_at(b, i), depth + 1);
}

static void same_text(weft_status a, weft_status b) {
  static char ta[TEXT_SIZE], tb[TEXT_SIZE];
  size_t na = weft_error_format(a, ta, sizeof(ta));
  size_t nb = weft_error_format(b, tb, sizeof(tb));
  FZ_CHECK(na == nb && !strcmp(ta, tb), "formats differ:\n  %s\n  %s", ta, tb);
  FZ_CHECK(na >= sizeof(ta) || strlen(ta) == na, "format returned %zu for %zu bytes", na,
           strlen(ta));
}

/* The JSON nesting of |e| at |depth|, as the parser counts it (each object
 * and each array one level): an error's source at +1, its Several items at
 * +2 (inside "errors"), an Unwritten's root at +1 and its "chain" at +1. */
static size_t json_depth(weft_status e, size_t depth) {
  if (!e) return 0;
  size_t max = depth;
  weft_error_kind k = weft_error_kind_of(e);
  if (k == WEFT_ERR_SEVERAL || k == WEFT_ERR_UNWRITTEN) max = depth + 1;
  size_t d = json_depth(weft_error_source(e), depth + 1);
  if (d > max) max = d;
  for (size_t i = 0; i < weft_error_count(e); i++)
    if ((d = json_depth(weft_error_at(e, i), depth + 2)) > max) max = d;
  if (k == WEFT_ERR_UNWRITTEN && (d = json_depth(weft_error_root(e), depth + 1)) > max) max = d;
  return max;
}

/* to_json -> from_json -> to_json must be stable; returns nothing, checks. */
static void round_trip(weft_status e) {
  char *j1 = weft_error_to_json(e);
  size_t depth = json_depth(e, 1);
  FZ_CHECK(!j1 == (depth > JSON_MAX_DEPTH), "to_json %s an error nesting %zu deep",
           j1 ? "wrote" : "refused", depth);
  if (!j1) { /* too deep to write: the clone and the formats must still hold */
    weft_status copy = weft_error_clone(e);
    FZ_CHECK(!weft_error_to_json(copy), "the clone of a too-deep error serializes");
    same_text(e, copy);
    static char bt[TEXT_SIZE];
    weft_error_format_backtrace(e, bt, sizeof(bt));
    weft_error_free(copy);
    return;
  }
  weft_status back = NULL;
  weft_status st = weft_error_from_json(j1, &back);
  FZ_CHECK(!st, "to_json wrote what from_json refuses: %s\n  document: %.2000s", fz_text(st), j1);
  char *j2 = weft_error_to_json(back);
  FZ_CHECK(j2 && !strcmp(j1, j2), "round trip changed the document:\n  %.2000s\n  %.2000s", j1,
           j2 ? j2 : "(null)");
  same_error(e, back, 0);
  same_text(e, back);
  weft_status copy = weft_error_clone(e);
  char *j3 = weft_error_to_json(copy);
  FZ_CHECK(j3 && !strcmp(j1, j3), "the clone serializes differently:\n  %.2000s\n  %.2000s", j1,
           j3 ? j3 : "(null)");
  same_error(e, copy, 0);
  weft_free(j3);
  weft_error_free(copy);
  weft_free(j2);
  weft_error_free(back);
  weft_free(j1);
}

static void parse_mode(const uint8_t *data, size_t size) {
  char *doc = malloc(size + 1);
  if (!doc) return;
  memcpy(doc, data, size);
  doc[size] = '\0';
  weft_status out = (weft_status)(uintptr_t)1; /* must be overwritten */
  weft_status st = weft_error_from_json(doc, &out);
  if (st) {
    FZ_CHECK(weft_error_kind_of(st) == WEFT_ERR_INVALID_ARGUMENT, "refusal of kind %s: %s",
             weft_error_kind_name(weft_error_kind_of(st)), fz_text(st));
    FZ_CHECK(out == NULL, "a refused document left *out set");
    weft_error_free(st);
  } else {
    round_trip(out);
    static char bt[TEXT_SIZE];
    weft_error_format_backtrace(out, bt, sizeof(bt));
    FZ_CHECK(weft_error_backtrace_depth(out) == 0, "a parsed error has a backtrace");
    weft_error_free(out);
  }
  free(doc);
}

/* ---- builder mode ------------------------------------------------------------------------- */

typedef struct slot {
  weft_status e;
  int nest;     /* JSON nesting of its document */
  size_t nodes; /* errors in its tree (clones double it: kept bounded) */
} slot;

static weft_error_kind any_kind(fz *f) {
  uint8_t k = fz_u8(f);
  if (k < 250) return (weft_error_kind)(k % WEFT_ERROR_KIND_COUNT);
  return (weft_error_kind)(int)(k - 250 + WEFT_ERROR_KIND_COUNT); /* out of range */
}

static void build_mode(fz *f) {
  slot st[STACK];
  size_t n = 0;
  char msg[300];
  while (f->n) {
    uint8_t op = fz_u8(f) % 7;
    weft_status e = NULL;
    int nest = 1;
    size_t nodes = 1;
    switch (op) {
    case 0: /* make */
    case 1: /* make_sized */ {
      weft_error_kind k = any_kind(f);
      uint64_t size = fz_size(f);
      fz_str(f, msg, sizeof(msg));
      bool none = fz_bool(f);
      if (op == 0)
        e = none ? weft_error_make(k, NULL) : weft_error_make(k, "%s", msg);
      else
        e = none ? weft_error_make_sized(k, size, NULL) : weft_error_make_sized(k, size, "%s", msg);
      if (k <= WEFT_OK || k >= WEFT_ERROR_KIND_COUNT)
        FZ_CHECK(weft_error_kind_of(e) == WEFT_ERR_INVALID_ARGUMENT,
                 "make of kind %d gave %s, not InvalidArgument", (int)k, fz_text(e));
      else
        FZ_CHECK(weft_error_kind_of(e) == k, "make of %s gave %s", weft_error_kind_name(k),
                 fz_text(e));
      break;
    }
    case 2: { /* wrap the top (or NULL) */
      weft_error_kind k = any_kind(f);
      uint64_t size = fz_size(f);
      fz_str(f, msg, sizeof(msg));
      weft_status src = NULL;
      if (n && fz_bool(f)) {
        if (st[n - 1].nest + 1 > MAX_NEST) break;
        src = st[--n].e;
        nest = st[n].nest + 1;
        nodes += st[n].nodes;
      }
      e = weft_error_wrap(k, size, src, "%s", msg);
      break;
    }
    case 3: { /* several of the top k */
      size_t k = fz_below(f, (uint32_t)n + 1);
      weft_status errs[STACK];
      int inner = 0;
      for (size_t i = 0; i < k; i++)
        if (st[n - k + i].nest > inner) inner = st[n - k + i].nest;
      if (inner + 2 > MAX_NEST) break;
      for (size_t i = 0; i < k; i++) {
        errs[i] = st[n - k + i].e;
        nodes += st[n - k + i].nodes;
      }
      if (k && fz_bool(f)) errs[fz_below(f, (uint32_t)k)] = NULL; /* a NULL entry is skipped */
      for (size_t i = 0; i < k; i++)
        if (!errs[i]) weft_error_free(st[n - k + i].e);
      n -= k;
      e = weft_error_several(errs, k);
      nest = inner + 2;
      break;
    }
    case 4: { /* unwritten with the top as root */
      weft_status root = NULL;
      if (n && fz_bool(f)) {
        if (st[n - 1].nest + 1 > MAX_NEST) break;
        root = st[--n].e;
        nest = st[n].nest + 1;
        nodes += st[n].nodes;
      }
      char hops[4][64];
      const char *chain[4];
      size_t len = fz_below(f, 5);
      for (size_t i = 0; i < len; i++) {
        fz_str(f, hops[i], sizeof(hops[i]));
        chain[i] = hops[i];
      }
      if (nest < 2) nest = 2;
      e = weft_error_unwritten(fz_u64(f), fz_u32(f), root, chain, len);
      FZ_CHECK(weft_error_chain_length(e) == len || weft_error_kind_of(e) != WEFT_ERR_UNWRITTEN,
               "chain of %zu hops kept %zu", len, weft_error_chain_length(e));
      break;
    }
    case 5: /* clone the top */
      if (!n || st[n - 1].nodes > MAX_NODES / 2) break;
      e = weft_error_clone(st[n - 1].e);
      nest = st[n - 1].nest;
      nodes = st[n - 1].nodes;
      same_error(st[n - 1].e, e, 0);
      break;
    case 6: /* check and drop the top */
      if (!n) break;
      round_trip(st[n - 1].e);
      weft_error_free(st[--n].e);
      break;
    }
    if (!e) continue;
    if (n == STACK) weft_error_free(st[--n].e);
    st[n].e = e;
    st[n].nodes = nodes;
    st[n++].nest = nest;
  }
  while (n) {
    round_trip(st[n - 1].e);
    weft_error_free(st[--n].e);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!size) return 0;
  if (!(data[0] & 1)) {
    parse_mode(data + 1, size - 1);
  } else {
    fz f = {data + 1, size - 1};
    build_mode(&f);
  }
  return 0;
}
