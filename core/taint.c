#include "core/taint.h"

#include <string.h>

#include "core/alloc.h"

static weft_range *ranges_of(weft_claim_ranges *c) {
  return c->cap ? c->many : &c->one;
}

static const weft_range *cranges_of(const weft_claim_ranges *c) {
  return c->cap ? c->many : &c->one;
}

/* Room for |need| ranges; false when memory runs out. */
static bool reserve(weft_claim_ranges *c, const weft_allocator *a, uint32_t need) {
  uint32_t cap = c->cap ? c->cap : 1;
  if (need <= cap) return true;
  uint32_t nc = cap * 2 < 4 ? 4 : cap * 2;
  while (nc < need) nc *= 2;
  weft_range *n = weft__alloc(a, sizeof(*n) * nc, 16);
  if (!n) return false;
  memcpy(n, ranges_of(c), sizeof(*n) * c->n);
  if (c->cap) weft__free(a, c->many, sizeof(*n) * c->cap, 16);
  c->many = n;
  c->cap = nc;
  return true;
}

static void release(weft_claim_ranges *c, const weft_allocator *a) {
  if (c->cap) weft__free(a, c->many, sizeof(weft_range) * c->cap, 16);
  memset(c, 0, sizeof(*c));
}

/* Removes [r.start, r.end) from the claim's ranges. A range split in two
 * needs one more slot; without memory it stays whole (still tainted). */
static void subtract(weft_claim_ranges *c, const weft_allocator *a, weft_range r) {
  for (uint32_t i = 0; i < c->n; i++) {
    weft_range *v = ranges_of(c);
    weft_range x = v[i];
    if (r.end <= x.start || r.start >= x.end) continue;
    bool left = x.start<r.start, right = x.end> r.end;
    if (left && right) {
      if (!reserve(c, a, c->n + 1)) continue;
      v = ranges_of(c);
      memmove(&v[i + 2], &v[i + 1], sizeof(*v) * (c->n - i - 1));
      v[i] = (weft_range){x.start, r.start};
      v[i + 1] = (weft_range){r.end, x.end};
      c->n++;
      i++;
    } else if (left) {
      v[i].end = r.start;
    } else if (right) {
      v[i].start = r.end;
    } else {
      memmove(&v[i], &v[i + 1], sizeof(*v) * (c->n - i - 1));
      c->n--;
      i--;
    }
  }
}

/* Adds |r|, fusing every range it overlaps or touches; keeps the order. */
static void add(weft_claim_ranges *c, const weft_allocator *a, weft_range r) {
  weft_range *v = ranges_of(c);
  uint32_t lo = 0;
  while (lo < c->n && v[lo].end < r.start) lo++;
  uint32_t hi = lo;
  while (hi < c->n && v[hi].start <= r.end) {
    if (v[hi].start < r.start) r.start = v[hi].start;
    if (v[hi].end > r.end) r.end = v[hi].end;
    hi++;
  }
  if (hi > lo) { /* replace v[lo, hi) by r */
    v[lo] = r;
    memmove(&v[lo + 1], &v[hi], sizeof(*v) * (c->n - hi));
    c->n -= hi - lo - 1;
    return;
  }
  if (!reserve(c, a, c->n + 1)) {
    /* No room for a separate range: widen the nearest one over it. */
    if (c->n == 0) return;
    uint32_t k = lo < c->n ? lo : c->n - 1;
    if (r.start < v[k].start) v[k].start = r.start;
    if (r.end > v[k].end) v[k].end = r.end;
    return;
  }
  v = ranges_of(c);
  memmove(&v[lo + 1], &v[lo], sizeof(*v) * (c->n - lo));
  v[lo] = r;
  c->n++;
}

static bool intersects(const weft_claim_ranges *c, weft_range r) {
  const weft_range *v = cranges_of(c);
  for (uint32_t i = 0; i < c->n; i++)
    if (r.start < v[i].end && v[i].start < r.end) return true;
  return false;
}

/* Claim |i|: 0 is the inline one, then the overflow list. */
static weft_claim_ranges *claim_at(weft_taint *t, uint32_t i) {
  return i == 0 ? &t->first : &t->more[i - 1];
}

static void drop_claim(weft_taint *t, const weft_allocator *a, weft_error_graph *g, uint32_t i) {
  weft_claim_ranges *c = claim_at(t, i);
  weft_failure_id f = c->failure;
  release(c, a);
  if (i > 0) { /* keep the overflow list dense */
    t->more[i - 1] = t->more[t->nmore - 1];
    memset(&t->more[t->nmore - 1], 0, sizeof(t->more[0]));
    t->nmore--;
  }
  if (g) weft_graph_untag(g, f);
}

void weft_taint_set(weft_taint *t, const weft_allocator *a, weft_error_graph *g, weft_range r,
                    weft_failure_id f) {
  if (r.start >= r.end || !f) return; /* an empty range claims nothing */
  for (uint32_t i = 0; i <= t->nmore; i++) {
    weft_claim_ranges *c = claim_at(t, i);
    if (!c->failure || c->failure == f) continue;
    subtract(c, a, r); /* a new failure takes the bytes it claims */
    if (c->n == 0) {
      drop_claim(t, a, g, i);
      i--; /* the slot now holds another claim (or is empty) */
    }
  }
  /* Drops may have moved claims: find f's. */
  weft_claim_ranges *mine = NULL;
  for (uint32_t i = 0; i <= t->nmore && !mine; i++)
    if (claim_at(t, i)->failure == f) mine = claim_at(t, i);
  if (mine) {
    add(mine, a, r);
    return;
  }
  if (!t->first.failure) {
    mine = &t->first;
  } else {
    if (t->nmore == t->more_cap) {
      uint32_t nc = t->more_cap ? t->more_cap * 2 : 2;
      weft_claim_ranges *n = weft__calloc(a, sizeof(*n) * nc, 16);
      if (!n) { /* no room for a new claim: the bytes stay claimed by the first one */
        add(&t->first, a, r);
        return;
      }
      if (t->more) {
        memcpy(n, t->more, sizeof(*n) * t->nmore);
        weft__free(a, t->more, sizeof(*n) * t->more_cap, 16);
      }
      t->more = n;
      t->more_cap = nc;
    }
    mine = &t->more[t->nmore++];
  }
  memset(mine, 0, sizeof(*mine));
  mine->failure = f;
  mine->n = 1;
  mine->one = r;
  if (g) weft_graph_tag(g, f); /* one tag per (allocation, failure) */
}

void weft__taint_written_claims(weft_taint *t, const weft_allocator *a, weft_error_graph *g,
                                weft_range r) {
  if (r.start >= r.end) return;
  for (uint32_t i = 0; i <= t->nmore; i++) {
    weft_claim_ranges *c = claim_at(t, i);
    if (!c->failure || !intersects(c, r)) continue;
    subtract(c, a, r);
    if (c->n == 0) {
      drop_claim(t, a, g, i);
      i--;
    }
  }
}

weft_failure_id weft__taint_failure_claims(const weft_taint *t, weft_range r) {
  if (r.start >= r.end) return 0; /* empty ranges never match */
  if (t->first.failure && intersects(&t->first, r)) return t->first.failure;
  for (uint32_t i = 0; i < t->nmore; i++)
    if (t->more[i].failure && intersects(&t->more[i], r)) return t->more[i].failure;
  return 0;
}

void weft_taint_clear(weft_taint *t, const weft_allocator *a, weft_error_graph *g) {
  while (t->nmore) drop_claim(t, a, g, t->nmore);
  if (t->first.failure) drop_claim(t, a, g, 0);
  weft__free(a, t->more, sizeof(weft_claim_ranges) * t->more_cap, 16);
  memset(t, 0, sizeof(*t));
}

uint32_t weft_taint_claims(const weft_taint *t) {
  return (t->first.failure ? 1u : 0u) + t->nmore;
}

const weft_claim_ranges *weft_taint_claim(const weft_taint *t, uint32_t i) {
  if (t->first.failure) {
    if (i == 0) return &t->first;
    i--;
  }
  return i < t->nmore ? &t->more[i] : NULL;
}
