/* The four pool kinds over one page structure (see pool.h). Placement is
 * deterministic: the first page in index order, the first slice in offset
 * order (a sliced pool finds both by descending trees, see pool.h). */
#include <inttypes.h>
#include <stdatomic.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "memory/mm_internal.h"

/* A descriptor, unplaced; ids are unique in the process (the pools key on them). */
static _Atomic uint64_t mem_ids = 0;

void weft_mem_init(weft_mem *m, uint64_t size) {
  memset(m, 0, sizeof(*m));
  m->id = atomic_fetch_add_explicit(&mem_ids, 1, memory_order_relaxed) + 1;
  m->size = size;
}

const char *weft_pool_kind_name(weft_pool_kind k) {
  switch (k) {
  case WEFT_POOL_SLICED:
    return "sliced";
  case WEFT_POOL_EXCLUSIVE:
    return "exclusive";
  case WEFT_POOL_DIRECT:
    return "direct";
  case WEFT_POOL_PERSISTENT:
    return "persistent";
  }
  return "unknown";
}

/* ---- small dynamic arrays ---------------------------------------------------------------- */

static weft_status no_meta(void) {
  return weft_error_make(WEFT_ERR_OUT_OF_MEMORY, "no memory for pool metadata");
}

/* ---- pages ------------------------------------------------------------------------------- */

#define FOR_SLICES(pg, s) for (uint32_t s = (pg)->head; s != WEFT_NIL; s = (pg)->slices[s].next)

static bool is_tombstone(const weft_page *pg) {
  return pg->nslices == 0;
}

bool weft_page_is_free(const weft_page *pg) {
  if (is_tombstone(pg)) return true;
  FOR_SLICES(pg, s) {
    if (pg->slices[s].owner) return false;
  }
  return true;
}

uint64_t weft_page_live(const weft_page *pg) {
  uint64_t n = 0;
  if (is_tombstone(pg)) return 0;
  FOR_SLICES(pg, s) {
    n += pg->slices[s].owner != NULL;
  }
  return n;
}

/* ---- slots ------------------------------------------------------------------------------- */

/* A slot for a new slice of |pg| (the spare chain first); false when the
 * slot array cannot grow. May move pg->slices. */
static bool slot_take(const weft_allocator *a, weft_page *pg, uint32_t *out) {
  if (pg->spare != WEFT_NIL) {
    *out = pg->spare;
    pg->spare = pg->slices[*out].next;
    return true;
  }
  if (pg->top == UINT32_MAX - 1 ||
      !weft__grow(a, (void **)&pg->slices, &pg->cap, pg->top + 1, sizeof(weft_slice)))
    return false;
  *out = pg->top++;
  return true;
}

static void slot_put(weft_page *pg, uint32_t s) {
  pg->slices[s] =
      (weft_slice){.next = pg->spare, .prev = WEFT_NIL, .left = WEFT_NIL, .right = WEFT_NIL};
  pg->spare = s;
}

/* Takes slice |s| out of the offset-ordered links (it covers no bytes any more). */
static void unlink_slice(weft_page *pg, uint32_t s) {
  weft_slice *S = pg->slices;
  uint32_t prev = S[s].prev, next = S[s].next;
  if (prev != WEFT_NIL)
    S[prev].next = next;
  else
    pg->head = next;
  if (next != WEFT_NIL) S[next].prev = prev;
  pg->nslices--;
}

/* ---- the treap of a sliced page's free slices ---------------------------------------------
 *
 * Keys are offsets (free slices are disjoint and never empty, so they are
 * distinct); |max| is the largest capacity in a subtree, which first fit
 * descends. Priorities come from a per-page sequence: deterministic, and
 * copied when one slice takes another's place (carve, merge) so the shape
 * stays a treap. Each operation is one descent; |visits| counts the slices
 * read. */

typedef struct tree {
  weft_slice *S;
  uint64_t visits;
} tree;

static uint32_t prio_next(weft_page *pg) {
  uint32_t x = ++pg->prio_seq * UINT32_C(0x9E3779B1);
  x ^= x >> 16;
  x *= UINT32_C(0x85EBCA6B);
  x ^= x >> 13;
  return x;
}

static inline void fix(weft_slice *S, uint32_t x) {
  uint64_t m = S[x].size;
  uint32_t l = S[x].left, r = S[x].right;
  if (l != WEFT_NIL && S[l].max > m) m = S[l].max;
  if (r != WEFT_NIL && S[r].max > m) m = S[r].max;
  S[x].max = m;
}

static uint32_t rot_right(weft_slice *S, uint32_t t) {
  uint32_t l = S[t].left;
  S[t].left = S[l].right;
  S[l].right = t;
  fix(S, t);
  fix(S, l);
  return l;
}

static uint32_t rot_left(weft_slice *S, uint32_t t) {
  uint32_t r = S[t].right;
  S[t].right = S[r].left;
  S[r].left = t;
  fix(S, t);
  fix(S, r);
  return r;
}

/* Inserts |x| (left = right = NIL, prio set) under |t|; the new subtree root. */
static uint32_t t_insert(tree *c, uint32_t t, uint32_t x) {
  weft_slice *S = c->S;
  if (t == WEFT_NIL) {
    S[x].max = S[x].size;
    return x;
  }
  c->visits++;
  if (S[x].offset < S[t].offset) {
    S[t].left = t_insert(c, S[t].left, x);
    if (S[S[t].left].prio > S[t].prio) return rot_right(S, t);
  } else {
    S[t].right = t_insert(c, S[t].right, x);
    if (S[S[t].right].prio > S[t].prio) return rot_left(S, t);
  }
  fix(S, t);
  return t;
}

/* Joins two treaps, every key of |a| below every key of |b|. */
static uint32_t t_join(tree *c, uint32_t a, uint32_t b) {
  weft_slice *S = c->S;
  if (a == WEFT_NIL) return b;
  if (b == WEFT_NIL) return a;
  c->visits++;
  if (S[a].prio > S[b].prio) {
    S[a].right = t_join(c, S[a].right, b);
    fix(S, a);
    return a;
  }
  S[b].left = t_join(c, a, S[b].left);
  fix(S, b);
  return b;
}

/* Removes the slice keyed |off| from under |t| (it is there). */
static uint32_t t_erase(tree *c, uint32_t t, uint64_t off) {
  weft_slice *S = c->S;
  c->visits++;
  if (S[t].offset == off) return t_join(c, S[t].left, S[t].right);
  if (off < S[t].offset)
    S[t].left = t_erase(c, S[t].left, off);
  else
    S[t].right = t_erase(c, S[t].right, off);
  fix(S, t);
  return t;
}

/* Slice |y| takes the place of the slice keyed |off| (there): no free slice
 * lies between their offsets, so the order holds. |y|'s size is final. */
static uint32_t t_replace(tree *c, uint32_t t, uint64_t off, uint32_t y) {
  weft_slice *S = c->S;
  c->visits++;
  if (S[t].offset == off) {
    S[y].left = S[t].left;
    S[y].right = S[t].right;
    S[y].prio = S[t].prio;
    fix(S, y);
    return y;
  }
  if (off < S[t].offset)
    S[t].left = t_replace(c, S[t].left, off, y);
  else
    S[t].right = t_replace(c, S[t].right, off, y);
  fix(S, t);
  return t;
}

/* The slice keyed |off| grew: its ancestors' |max| follows. */
static void t_grown(tree *c, uint32_t t, uint64_t off) {
  weft_slice *S = c->S;
  c->visits++;
  if (S[t].offset != off) t_grown(c, off < S[t].offset ? S[t].left : S[t].right, off);
  fix(S, t);
}

/* The free slice of lowest offset whose capacity is at least |eff|
 * (the tree's max is at least |eff|). */
static uint32_t t_first_fit(tree *c, uint32_t t, uint64_t eff) {
  const weft_slice *S = c->S;
  for (;;) {
    c->visits++;
    uint32_t l = S[t].left;
    if (l != WEFT_NIL && S[l].max >= eff)
      t = l;
    else if (S[t].size >= eff)
      return t;
    else
      t = S[t].right;
  }
}

/* First fit and carve in one descent: takes the free slice of lowest offset
 * under |t| whose capacity is at least |eff| (the tree's max is), returns it
 * in |*f|, and puts in its place the remainder |r| (a spare slot, filled
 * here) or, when nothing remains, no slice (then *r_used is false). */
static uint32_t t_take(tree *c, uint32_t t, uint64_t eff, uint32_t r, uint32_t *f, bool *r_used) {
  weft_slice *S = c->S;
  c->visits++;
  uint32_t l = S[t].left;
  if (l != WEFT_NIL && S[l].max >= eff) {
    S[t].left = t_take(c, l, eff, r, f, r_used);
  } else if (S[t].size >= eff) {
    *f = t;
    if (S[t].size == eff) {
      *r_used = false;
      return t_join(c, l, S[t].right);
    }
    *r_used = true;
    S[r].offset = S[t].offset + eff;
    S[r].size = S[t].size - eff;
    S[r].left = l;
    S[r].right = S[t].right;
    S[r].prio = S[t].prio;
    fix(S, r);
    return r;
  } else {
    S[t].right = t_take(c, S[t].right, eff, r, f, r_used);
  }
  fix(S, t);
  return t;
}

/* ---- the page tree of a sliced pool ------------------------------------------------------ */

/* 1 + the largest free capacity of page |i|; 0: none, or it serves nothing new. */
static uint64_t page_key(const weft_page *pg) {
  if (pg->guards || is_tombstone(pg) || pg->root == WEFT_NIL) return 0;
  return pg->slices[pg->root].max + 1;
}

static void seg_update(weft_pool *p, uint32_t i) {
  if (!p->seg || p->seg_stale) return;
  uint32_t k = p->seg_leaves + i;
  uint64_t v = page_key(&p->pages[i]);
  if (p->seg[k] == v) return;
  p->seg[k] = v;
  for (k >>= 1; k; k >>= 1) {
    uint64_t a = p->seg[2 * k], b = p->seg[2 * k + 1], m = a > b ? a : b;
    if (p->seg[k] == m) break; /* the ancestors hold already */
    p->seg[k] = m;
  }
}

static void seg_rebuild(weft_pool *p) {
  p->seg_stale = false;
  if (!p->seg) return;
  uint32_t n = p->seg_leaves;
  for (uint32_t i = 0; i < n; i++) p->seg[n + i] = i < p->npages ? page_key(&p->pages[i]) : 0;
  for (uint32_t k = n; k-- > 1;) {
    uint64_t a = p->seg[2 * k], b = p->seg[2 * k + 1];
    p->seg[k] = a > b ? a : b;
  }
}

/* Room in the page tree for |npages| pages (before the page is added, so a
 * failure leaves the pool as it was). */
static bool seg_reserve(weft_pool *p, uint32_t npages) {
  if (npages <= p->seg_leaves) return true;
  uint32_t n = p->seg_leaves ? p->seg_leaves : 1;
  while (n < npages) n *= 2;
  uint64_t *seg = weft__calloc(p->mm->alloc, (size_t)2 * n * sizeof(uint64_t), 16);
  if (!seg) return false;
  weft__free(p->mm->alloc, p->seg, (size_t)2 * p->seg_leaves * sizeof(uint64_t), 16);
  p->seg = seg;
  p->seg_leaves = n;
  seg_rebuild(p);
  return true;
}

/* The first page, in index order, whose largest free slice holds |eff|; UINT32_MAX: none. */
static uint32_t seg_first_fit(weft_pool *p, uint64_t eff) {
  if (!p->seg) return UINT32_MAX;
  if (p->seg_stale) seg_rebuild(p);
  if (p->seg[1] <= eff) return UINT32_MAX;
  uint32_t k = 1;
  while (k < p->seg_leaves) k = p->seg[2 * k] > eff ? 2 * k : 2 * k + 1;
  return k - p->seg_leaves;
}

/* ---- pages: adding and releasing ------------------------------------------------------------ */

/* Rewrites the location of every owner on page |idx| (after the page moved). */
static void renumber_page(weft_pool *p, uint32_t idx) {
  weft_page *pg = &p->pages[idx];
  p->mm->slice_visits += pg->nslices;
  FOR_SLICES(pg, s) {
    weft_mem *o = pg->slices[s].owner;
    if (o) {
      o->pool = p;
      o->page = idx;
      o->slice = s;
    }
  }
}

static void set_owner(weft_pool *p, uint32_t page, uint32_t s, weft_mem *m, uint64_t size,
                      uint64_t padding) {
  weft_slice *sl = &p->pages[page].slices[s];
  sl->owner = m;
  sl->owner_id = m->id;
  sl->size = size;
  sl->padding = (uint32_t)padding; /* below the alignment */
  m->pool = p;
  m->page = page;
  m->slice = s;
  if (size > p->largest_alloc) p->largest_alloc = size;
}

/* Appends a page of |size| bytes, mapped now or lazily (dry run), with one
 * free slice covering it. Returns its index via |*idx|. */
static weft_status add_page(weft_pool *p, uint64_t size, uint32_t *idx) {
  weft_mm *mm = p->mm;
  uint32_t at = p->npages;
  bool sliced = p->cfg.kind == WEFT_POOL_SLICED;
  if (p->nvacant)
    at = p->vacant[--p->nvacant];
  else if (!weft__grow(mm->alloc, (void **)&p->pages, &p->cap, p->npages + 1, sizeof(weft_page)) ||
           (sliced && !seg_reserve(p, p->npages + 1)))
    return no_meta();
  weft_page pg;
  memset(&pg, 0, sizeof(pg));
  pg.size = size;
  pg.id = ++mm->page_ids;
  if (!weft__grow(mm->alloc, (void **)&pg.slices, &pg.cap, 1, sizeof(weft_slice))) {
    if (at != p->npages) p->vacant[p->nvacant++] = at;
    return no_meta();
  }
  if (!mm->dry_run) {
    weft_status st = weft_storage_alloc(mm->storage, size, &pg.mem);
    if (st) {
      weft__free(mm->alloc, pg.slices, (size_t)pg.cap * sizeof(weft_slice), 16);
      if (at != p->npages) p->vacant[p->nvacant++] = at;
      return st;
    }
    pg.mapped = true;
  }
  pg.nslices = 1;
  pg.top = 1;
  pg.head = 0;
  pg.spare = WEFT_NIL;
  pg.slices[0] = (weft_slice){.offset = 0,
                              .size = size,
                              .max = size,
                              .prev = WEFT_NIL,
                              .next = WEFT_NIL,
                              .left = WEFT_NIL,
                              .right = WEFT_NIL};
  pg.root = WEFT_NIL;
  if (sliced) {
    pg.slices[0].prio = prio_next(&pg);
    pg.root = 0;
    pg.nfree = 1;
  }
  p->pages[at] = pg;
  if (at == p->npages) p->npages++;
  uint64_t live = p->npages - p->nvacant;
  if (live > p->pages_peak) p->pages_peak = live;
  if (sliced) seg_update(p, at);
  WEFT_LOGF(WEFT_LOG_DEBUG, "page %" PRIu64 " added: %" PRIu64 " bytes to a %s pool%s (%" PRIu64
            " pages)", pg.id, size, weft_pool_kind_name(p->cfg.kind),
            mm->dry_run ? ", unmapped (dry run)" : "", live);
  *idx = at;
  return NULL;
}

static void free_page_storage(weft_pool *p, weft_page *pg) {
  WEFT_LOGF(WEFT_LOG_DEBUG, "page %" PRIu64 " released: %" PRIu64 " bytes of a %s pool", pg->id,
            pg->size, weft_pool_kind_name(p->cfg.kind));
  if (pg->mapped) weft_storage_dealloc(p->mm->storage, &pg->mem);
  weft__free(p->mm->alloc, pg->slices, (size_t)pg->cap * sizeof(weft_slice), 16);
  memset(pg, 0, sizeof(*pg));
  pg->head = pg->spare = pg->root = WEFT_NIL;
}

void weft_pool_release_page(weft_pool *p, uint32_t idx) {
  free_page_storage(p, &p->pages[idx]);
  if (p->cfg.kind == WEFT_POOL_DIRECT) {
    /* A tombstone: the indices of live pages never move. */
    if (weft__grow(p->mm->alloc, (void **)&p->vacant, &p->vacant_cap, p->nvacant + 1,
                   sizeof(uint32_t)))
      p->vacant[p->nvacant++] = idx;
    return;
  }
  memmove(&p->pages[idx], &p->pages[idx + 1], (size_t)(p->npages - idx - 1) * sizeof(weft_page));
  p->npages--;
  for (uint32_t i = idx; i < p->npages; i++) renumber_page(p, i);
  p->seg_stale = true; /* rebuilt once, at the next placement */
}

void weft_pool_guard(weft_pool *p, uint32_t page, int delta) {
  weft_page *pg = &p->pages[page];
  if (delta > 0)
    pg->guards++;
  else if (pg->guards)
    pg->guards--;
  if (p->cfg.kind == WEFT_POOL_SLICED) seg_update(p, page);
}

weft_status weft_pool_materialize(weft_pool *p, weft_page *pg, uint64_t size) {
  if (pg->mapped) return NULL;
  weft_status st = weft_storage_alloc(p->mm->storage, pg->size, &pg->mem);
  if (st)
    return weft_error_wrap(WEFT_ERR_STORAGE_MAPPING_FAILED, size, st,
                           "the page of %" PRIu64 " bytes it was carved from in a dry run could "
                           "not be backed",
                           pg->size);
  pg->mapped = true;
  return NULL;
}

/* ---- slices ------------------------------------------------------------------------------ */

/* Links remainder slot |r| (offset and size set) right after slice |f|. */
static void link_after(weft_page *pg, uint32_t f, uint32_t r) {
  weft_slice *S = pg->slices;
  uint32_t next = S[f].next;
  S[r].prev = f;
  S[r].next = next;
  S[r].owner = NULL;
  S[r].owner_id = 0;
  S[r].padding = 0;
  if (next != WEFT_NIL) S[next].prev = r;
  S[f].next = r;
  pg->nslices++;
}

/* Serves |m| (effective bytes |eff|) from the first free slice of sliced
 * page |page| that holds it (its largest free slice does): that slice
 * becomes the allocation, and the remainder, a new slice right after it,
 * takes its place among the free slices. False (and nothing changed) when
 * no slot is left for a remainder. */
static bool carve(weft_pool *p, uint32_t page, weft_mem *m, uint64_t eff) {
  weft_page *pg = &p->pages[page];
  tree c = {.S = NULL, .visits = 0};
  uint32_t f = WEFT_NIL, r;
  bool r_used = false;
  if (slot_take(p->mm->alloc, pg, &r)) { /* the common case: one descent */
    c.S = pg->slices;
    pg->root = t_take(&c, pg->root, eff, r, &f, &r_used);
    if (r_used)
      link_after(pg, f, r);
    else
      slot_put(pg, r);
  } else { /* no slot to spare: only an exact fit can be served */
    c.S = pg->slices;
    f = t_first_fit(&c, pg->root, eff);
    if (pg->slices[f].size != eff) {
      p->mm->slice_visits += c.visits;
      return false;
    }
    pg->root = t_erase(&c, pg->root, pg->slices[f].offset);
  }
  if (!r_used) pg->nfree--;
  p->mm->slice_visits += c.visits;
  /* Padding keeps every byte of the slice's capacity: nothing is lost on reuse. */
  set_owner(p, page, f, m, m->size, eff - m->size);
  seg_update(p, page);
  return true;
}

/* Frees owned slice |s| of sliced page |page|: its capacity merges with a
 * free neighbour on either side (the merged slice keeps the slot of its
 * lowest part), or joins the free slices. Never allocates. */
static void vacate_sliced(weft_pool *p, uint32_t page, uint32_t s) {
  weft_page *pg = &p->pages[page];
  weft_slice *S = pg->slices;
  tree c = {.S = S, .visits = 2}; /* the two neighbours */
  S[s].owner = NULL;
  S[s].owner_id = 0;
  S[s].size += S[s].padding; /* a free slice's capacity is all size */
  S[s].padding = 0;
  uint32_t prev = S[s].prev, next = S[s].next;
  bool pf = prev != WEFT_NIL && !S[prev].owner, nf = next != WEFT_NIL && !S[next].owner;
  if (pf) {
    S[prev].size += S[s].size;
    unlink_slice(pg, s);
    slot_put(pg, s);
    if (nf) {
      S[prev].size += S[next].size;
      pg->root = t_erase(&c, pg->root, S[next].offset);
      unlink_slice(pg, next);
      slot_put(pg, next);
      pg->nfree--;
    }
    t_grown(&c, pg->root, S[prev].offset);
  } else if (nf) {
    S[s].size += S[next].size;
    pg->root = t_replace(&c, pg->root, S[next].offset, s);
    unlink_slice(pg, next);
    slot_put(pg, next);
  } else if (S[s].size == 0) {
    /* A zero-size allocation between two live ones: no bytes to hand out,
     * so the slice goes (free slices are never empty: their offsets key the
     * tree). */
    unlink_slice(pg, s);
    slot_put(pg, s);
  } else {
    S[s].left = S[s].right = WEFT_NIL;
    S[s].prio = prio_next(pg);
    pg->root = t_insert(&c, pg->root, s);
    pg->nfree++;
  }
  p->mm->slice_visits += c.visits;
  seg_update(p, page);
}

weft_slice *weft_pool_find(const weft_pool *p, const weft_mem *m, weft_page **page) {
  if (m->pool != p || m->page >= p->npages) return NULL;
  weft_page *pg = &p->pages[m->page];
  if (m->slice >= pg->top) return NULL;
  weft_slice *sl = &pg->slices[m->slice];
  if (sl->owner != m || sl->owner_id != m->id) return NULL;
  if (page) *page = pg;
  return sl;
}

/* ---- creation ---------------------------------------------------------------------------- */

weft_pool *weft_pool_new(weft_mm *mm, const weft_pool_config *cfg) {
  weft_pool *p = weft__calloc(mm->alloc, sizeof(*p), 16);
  if (!p) return NULL;
  p->mm = mm;
  p->cfg = *cfg;
  p->max_pages = UINT32_MAX;
  if (cfg->kind == WEFT_POOL_SLICED && cfg->max_pool_size) {
    uint64_t cap = cfg->max_pool_size;
    if (cap < p->cfg.page_size) {
      uint64_t page = cap / mm->align * mm->align;
      p->cfg.page_size = page > mm->align ? page : mm->align;
      if (p->cfg.max_slice_size > p->cfg.page_size) p->cfg.max_slice_size = p->cfg.page_size;
    }
    uint64_t n = cap / p->cfg.page_size;
    p->max_pages = (uint32_t)(n > 65535 ? 65535 : n);
  }
  return p;
}

void weft_pool_destroy(weft_pool *p) {
  if (!p) return;
  for (uint32_t i = 0; i < p->npages; i++) {
    weft_page *pg = &p->pages[i];
    if (is_tombstone(pg)) continue;
    FOR_SLICES(pg, s) { /* live descriptors become unplaced */
      if (pg->slices[s].owner) pg->slices[s].owner->pool = NULL;
    }
    free_page_storage(p, pg);
  }
  const weft_allocator *a = p->mm->alloc;
  weft__free(a, p->pages, (size_t)p->cap * sizeof(weft_page), 16);
  weft__free(a, p->vacant, (size_t)p->vacant_cap * sizeof(uint32_t), 16);
  weft__free(a, p->seg, (size_t)2 * p->seg_leaves * sizeof(uint64_t), 16);
  weft__free(a, p, sizeof(*p), 16);
}

/* ---- policies ---------------------------------------------------------------------------- */

bool weft_pool_accept(const weft_pool *p, uint64_t size) {
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED: {
    uint64_t page = p->cfg.page_size, ms = p->cfg.max_slice_size;
    if (size <= (ms < page ? ms : page)) return true;
    /* Uncapped: within 20% of a page is served by a page of its own. */
    return !p->cfg.strict && p->max_pages == UINT32_MAX && size <= page && (page - size) * 5 < page;
  }
  case WEFT_POOL_EXCLUSIVE:
    return size <= p->cfg.max_alloc_size;
  case WEFT_POOL_DIRECT:
  case WEFT_POOL_PERSISTENT:
    return true;
  }
  return false;
}

static uint64_t effective(const weft_pool *p, uint64_t size) {
  return weft_align_up(size, p->mm->align);
}

/* First fit: the first page, in index order, with a free slice that holds
 * |eff| (the page tree), and its first such slice (the page's treap). */
static bool sliced_try(weft_pool *p, weft_mem *m) {
  if (m->size > UINT64_MAX - p->mm->align) return false; /* no page holds it */
  uint64_t eff = effective(p, m->size);
  uint32_t i = seg_first_fit(p, eff);
  if (i == UINT32_MAX) return false;
  return carve(p, i, m, eff);
}

static bool exclusive_try(weft_pool *p, weft_mem *m) {
  uint64_t eff = effective(p, m->size);
  int64_t best = -1;
  for (uint32_t i = 0; i < p->npages; i++) {
    weft_page *pg = &p->pages[i];
    if (pg->slices[0].owner || pg->size < eff) continue;
    if (best < 0 || pg->size < p->pages[best].size) best = i; /* best fit, first on ties */
  }
  if (best < 0) return false;
  weft_page *pg = &p->pages[best];
  if (pg->free_count) pg->free_count--;
  set_owner(p, (uint32_t)best, 0, m, m->size, eff - m->size);
  return true;
}

/* Persistent and direct: a free page of exactly the effective size. */
static bool exact_try(weft_pool *p, weft_mem *m) {
  uint64_t eff = effective(p, m->size);
  for (uint32_t i = 0; i < p->npages; i++) {
    weft_page *pg = &p->pages[i];
    if (is_tombstone(pg) || pg->slices[0].owner || pg->size != eff) continue;
    set_owner(p, i, 0, m, m->size, eff - m->size);
    return true;
  }
  return false;
}

bool weft_pool_try_reserve(weft_pool *p, weft_mem *m) {
  if (p->outdated) return false;
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED:
    return sliced_try(p, m);
  case WEFT_POOL_EXCLUSIVE:
    return exclusive_try(p, m);
  case WEFT_POOL_DIRECT:
  case WEFT_POOL_PERSISTENT:
    return exact_try(p, m);
  }
  return false;
}

static uint64_t reserved_bytes(const weft_pool *p) {
  uint64_t r = 0;
  for (uint32_t i = 0; i < p->npages; i++)
    if (!is_tombstone(&p->pages[i])) r += p->pages[i].size;
  return r;
}

static uint64_t in_use_bytes(const weft_pool *p) {
  weft_memory_usage u = {0};
  weft_pool_usage(p, &u);
  return u.bytes_in_use;
}

weft_status weft_pool_alloc(weft_pool *p, weft_mem *m, bool may_release, bool *cap_hit) {
  *cap_hit = false;
  uint64_t eff = effective(p, m->size), page_size = eff;
  uint32_t idx = 0;
  weft_status st;
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED:
    if (p->npages >= p->max_pages) {
      *cap_hit = true;
      p->cap_warned = true;
      return weft_error_make_sized(WEFT_ERR_OUT_OF_MEMORY, m->size,
                                   "pool capacity exceeded: %" PRIu32 " pages of %" PRIu64
                                   " bytes (cap %" PRIu64 ", %" PRIu64 " in use)",
                                   p->max_pages, p->cfg.page_size, p->cfg.max_pool_size,
                                   in_use_bytes(p));
    }
    page_size = p->cfg.page_size > eff ? p->cfg.page_size : eff;
    break;
  case WEFT_POOL_EXCLUSIVE:
    if (m->size > p->cfg.max_alloc_size)
      return weft_error_make_sized(WEFT_ERR_BUFFER_TOO_BIG, m->size,
                                   "the exclusive pool holds at most %" PRIu64 " bytes",
                                   p->cfg.max_alloc_size);
    /* From the request: a page of its effective size. (The reference sizes
     * it by a running average that starts at max_alloc_size / 2, so a wide
     * pool's first pages held several times what they served.) */
    page_size = eff;
    break;
  case WEFT_POOL_DIRECT:
    if (may_release && p->cfg.reclaim_at != WEFT_NO_CEILING) {
      /* Free in index order only until the new allocation fits the ceiling:
       * deterministic, and a watermark rather than a budget. */
      uint64_t reserved = reserved_bytes(p);
      for (uint32_t i = 0; i < p->npages && reserved + eff > p->cfg.reclaim_at; i++) {
        weft_page *pg = &p->pages[i];
        if (is_tombstone(pg) || pg->slices[0].owner) continue;
        reserved -= pg->size;
        weft_pool_release_page(p, i);
      }
    }
    break;
  case WEFT_POOL_PERSISTENT:
    break;
  }
  if ((st = add_page(p, page_size, &idx))) return st;
  weft_page *pg = &p->pages[idx];
  if (p->cfg.kind == WEFT_POOL_EXCLUSIVE) pg->free_count = 4;
  if (p->cfg.kind == WEFT_POOL_SLICED) {
    if (!carve(p, idx, m, eff)) {
      weft_pool_release_page(p, idx);
      return no_meta();
    }
  } else { /* padding is the alignment's; an exclusive page may hold more */
    set_owner(p, idx, 0, m, m->size, eff - m->size);
  }
  return NULL;
}

void weft_pool_free(weft_pool *p, weft_mem *m) {
  weft_page *pg;
  weft_slice *sl = weft_pool_find(p, m, &pg);
  if (!sl) return;
  if (p->cfg.kind == WEFT_POOL_SLICED) {
    vacate_sliced(p, m->page, m->slice);
  } else {
    sl->owner = NULL;
    sl->owner_id = 0;
  }
  m->pool = NULL;
}

void weft_pool_cleanup(weft_pool *p, bool explicit_, uint64_t reserves) {
  switch (p->cfg.kind) {
  case WEFT_POOL_SLICED:
    /* Explicit only, except outdated arena pools, which return each page
     * as soon as it empties, on any tick. */
    if (!explicit_ && !p->outdated) return;
    for (uint32_t i = p->npages; i-- > 0;)
      if (weft_page_is_free(&p->pages[i]) && !p->pages[i].guards) weft_pool_release_page(p, i);
    return;
  case WEFT_POOL_EXCLUSIVE: {
    uint64_t period = p->cfg.dealloc_period;
    bool due = period != WEFT_NO_PERIOD && reserves - p->last_check >= period / 5;
    if (!explicit_ && !due) return;
    if (due) p->last_check = reserves;
    for (uint32_t i = p->npages; i-- > 0;) {
      weft_page *pg = &p->pages[i];
      if (pg->slices[0].owner) continue;
      pg->free_count++;
      if (explicit_ || pg->free_count >= 5) weft_pool_release_page(p, i);
    }
    return;
  }
  case WEFT_POOL_DIRECT:
  case WEFT_POOL_PERSISTENT:
    if (!explicit_ && !p->release_free) return;
    for (uint32_t i = p->npages; i-- > 0;) {
      weft_page *pg = &p->pages[i];
      if (!is_tombstone(pg) && !pg->slices[0].owner) weft_pool_release_page(p, i);
    }
    return;
  }
}

/* ---- reports ----------------------------------------------------------------------------- */

void weft_pool_usage(const weft_pool *p, weft_memory_usage *u) {
  for (uint32_t i = 0; i < p->npages; i++) {
    const weft_page *pg = &p->pages[i];
    if (is_tombstone(pg)) continue;
    u->bytes_reserved += pg->size;
    FOR_SLICES(pg, s) {
      if (!pg->slices[s].owner) continue;
      u->number_allocs++;
      u->bytes_in_use += pg->slices[s].size;
      u->bytes_padding += pg->slices[s].padding;
    }
  }
}

void weft_pool_fill_report(const weft_pool *p, weft_pool_report *r) {
  memset(r, 0, sizeof(*r));
  r->kind = p->cfg.kind;
  weft_pool_usage(p, &r->usage);
  for (uint32_t i = 0; i < p->npages; i++) {
    if (is_tombstone(&p->pages[i])) continue;
    r->pages++;
    r->pages_unmapped += !p->pages[i].mapped;
  }
  r->pages_peak = p->pages_peak;
  r->largest_alloc = p->largest_alloc;
  r->page_size = p->cfg.kind == WEFT_POOL_SLICED ? p->cfg.page_size : 0;
  r->outdated = p->outdated;
}

static weft_status bad(const weft_pool *p, uint32_t page, const char *what) {
  return weft_error_make(WEFT_ERR_VALIDATION, "pool (kind %d) page %" PRIu32 ": %s",
                         (int)p->cfg.kind, page, what);
}

/* In-order walk of the treap under |t| against the page's free slices in
 * offset order (|*cursor|: the next one expected); checks each node's max
 * and the heap order. NULL or what is wrong. */
static const char *check_tree(const weft_page *pg, uint32_t t, uint32_t *cursor, uint32_t depth) {
  const weft_slice *S = pg->slices;
  if (t == WEFT_NIL) return NULL;
  if (t >= pg->top || depth > pg->top) return "the free-slice tree links outside its slots";
  uint32_t l = S[t].left, r = S[t].right;
  if ((l != WEFT_NIL && S[l].prio > S[t].prio) || (r != WEFT_NIL && S[r].prio > S[t].prio))
    return "the free-slice tree breaks its heap order";
  const char *why = check_tree(pg, l, cursor, depth + 1);
  if (why) return why;
  if (t != *cursor) return "the free-slice tree does not hold the free slices in offset order";
  for (*cursor = S[t].next; *cursor != WEFT_NIL && S[*cursor].owner;) *cursor = S[*cursor].next;
  uint64_t m = S[t].size;
  if (l != WEFT_NIL && S[l].max > m) m = S[l].max;
  if (r != WEFT_NIL && S[r].max > m) m = S[r].max;
  if (S[t].max != m) return "a free-slice tree node's max is not its subtree's largest capacity";
  return check_tree(pg, r, cursor, depth + 1);
}

weft_status weft_pool_validate(const weft_pool *p) {
  bool sliced = p->cfg.kind == WEFT_POOL_SLICED;
  if (sliced && p->npages > p->seg_leaves) return bad(p, 0, "the page tree has too few leaves");
  for (uint32_t i = 0; i < p->npages; i++) {
    const weft_page *pg = &p->pages[i];
    if (is_tombstone(pg)) continue;
    uint64_t at = 0;
    uint32_t n = 0, nfree = 0, prev = WEFT_NIL, first_free = WEFT_NIL;
    for (uint32_t s = pg->head; s != WEFT_NIL; s = pg->slices[s].next) {
      if (s >= pg->top || ++n > pg->nslices) return bad(p, i, "the slice links run past the page");
      const weft_slice *sl = &pg->slices[s];
      if (sl->prev != prev) return bad(p, i, "a slice's prev link does not point back");
      if (sl->offset != at) return bad(p, i, "slices are not contiguous");
      at += sl->size + sl->padding;
      if (sl->owner) {
        const weft_mem *o = sl->owner;
        if (o->id != sl->owner_id) return bad(p, i, "a slice's owner changed identity");
        if (o->pool != p || o->page != i || o->slice != s)
          return bad(p, i, "an owner's location does not point back at its slice");
        if (o->size != sl->size) return bad(p, i, "a slice's size differs from its owner's");
      } else if (sliced) {
        if (prev != WEFT_NIL && !pg->slices[prev].owner)
          return bad(p, i, "two adjacent free slices");
        if (sl->size == 0 || sl->padding) return bad(p, i, "a free slice is empty or padded");
        if (first_free == WEFT_NIL) first_free = s;
        nfree++;
      }
      prev = s;
    }
    if (n != pg->nslices) return bad(p, i, "nslices is not the number of linked slices");
    if (!sliced && n > 1) return bad(p, i, "more than one slice");
    if (sliced ? at != pg->size : at > pg->size) return bad(p, i, "slices do not cover the page");
    uint32_t spares = 0;
    for (uint32_t s = pg->spare; s != WEFT_NIL; s = pg->slices[s].next)
      if (s >= pg->top || ++spares > pg->top) return bad(p, i, "the spare slots run past the page");
    if (spares + n != pg->top) return bad(p, i, "a slot is neither a slice nor spare");
    if (sliced) {
      if (nfree != pg->nfree) return bad(p, i, "nfree is not the number of free slices");
      uint32_t cursor = first_free;
      const char *why = check_tree(pg, pg->root, &cursor, 0);
      if (why) return bad(p, i, why);
      if (cursor != WEFT_NIL) return bad(p, i, "a free slice is missing from the free-slice tree");
      if (!p->seg_stale && p->seg[p->seg_leaves + i] != page_key(pg))
        return bad(p, i, "the page tree's leaf is not the page's largest free slice");
    }
    if (pg->mapped != (pg->mem.id != 0)) return bad(p, i, "mapped flag disagrees with storage");
  }
  return NULL;
}
