#include "core/failure.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

weft_failure *weft_failure_new(uint64_t id, weft_status root) {
  weft_failure *f = calloc(1, sizeof(*f));
  if (!f) {
    weft_error_free(root);
    return NULL;
  }
  atomic_init(&f->refs, 1);
  atomic_init(&f->carriers, 0);
  f->id = id;
  f->root = root;
  ck_spinlock_fas_init(&f->lock);
  return f;
}

void weft_failure_retain(weft_failure *f) {
  atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
}

void weft_failure_release(weft_failure *f) {
  if (!f) return;
  /* acq_rel: the last owner sees every write made through other references. */
  if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) != 1) return;
  weft_error_free(f->root);
  free(f);
}

static void lock(weft_failure *f) {
  ck_spinlock_fas_lock(&f->lock);
  WEFT_TSAN_ACQUIRE_LOCK(&f->lock);
}
static void unlock(weft_failure *f) {
  WEFT_TSAN_RELEASE_LOCK(&f->lock);
  ck_spinlock_fas_unlock(&f->lock);
}

void weft_failure_skipped(weft_failure *f, const weft_skip_record *rec) {
  lock(f);
  f->skipped_total++;
  if (f->nskips == WEFT_SKIP_KEEP) {
    f->skips[f->first] = *rec;
    f->first = (f->first + 1) % WEFT_SKIP_KEEP;
  } else {
    f->skips[(f->first + f->nskips++) % WEFT_SKIP_KEEP] = *rec;
  }
  unlock(f);
}

int weft_failure_buffer_name(char *buf, size_t cap, uint64_t buffer) {
  /* The slot index names a live buffer uniquely. */
  return snprintf(buf, cap, "buffer #%" PRIu32, (uint32_t)buffer);
}

static bool produced(const weft_skip_record *r, uint64_t buffer) {
  for (uint32_t i = 0; i < r->nproduced; i++)
    if (r->produced[i] == buffer) return true;
  return false;
}

weft_status weft_failure_report(weft_failure *f, uint64_t buffer) {
  char hops[WEFT_SKIP_KEEP + 2][192];
  const char *chain[WEFT_SKIP_KEEP + 2];
  size_t n = 0;
  lock(f);
  uint64_t target = buffer;
  uint32_t upper = f->nskips;
  for (;;) {
    /* The newest record before |upper| that produced |target|. */
    uint32_t i = upper;
    const weft_skip_record *hit = NULL;
    while (i-- > 0) {
      const weft_skip_record *r = &f->skips[(f->first + i) % WEFT_SKIP_KEEP];
      if (produced(r, target)) {
        hit = r;
        break;
      }
    }
    if (!hit) break;
    char needed[48];
    weft_failure_buffer_name(needed, sizeof(needed), hit->needed);
    snprintf(hops[n], sizeof(hops[n]), "skipped kernel '%s' (launch %" PRIu64 "): it needed %s",
             hit->kernel, hit->launch, needed);
    chain[n] = hops[n];
    n++;
    target = hit->needed;
    upper = i;
  }
  if (f->origin_kernel) {
    snprintf(hops[n], sizeof(hops[n]), "failed: kernel '%s' (launch %" PRIu64 ")", f->origin_kernel,
             f->origin_launch);
    chain[n] = hops[n];
    n++;
  }
  if (n > 0 && f->skipped_total > f->nskips) {
    snprintf(hops[n], sizeof(hops[n]), "%" PRIu64 " older skip records were dropped",
             f->skipped_total - f->nskips);
    chain[n] = hops[n];
    n++;
  }
  unlock(f);
  return weft_error_unwritten(f->id, atomic_load_explicit(&f->carriers, memory_order_relaxed),
                              weft_error_clone(f->root), chain, n);
}

weft_status weft_failure_reports(weft_failure *const *fs, const uint64_t *buffers, size_t n) {
  size_t distinct = 0;
  for (size_t i = 0; i < n; i++) {
    if (!fs[i]) continue;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++) seen = fs[j] == fs[i];
    distinct += !seen;
  }
  if (distinct == 0) return NULL;
  weft_status stack_errs[8];
  weft_status *errs = distinct <= 8 ? stack_errs : calloc(distinct, sizeof(*errs));
  if (!errs) return weft_error_make(WEFT_ERR_SEVERAL, NULL);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    if (!fs[i]) continue;
    bool seen = false;
    for (size_t j = 0; j < i && !seen; j++) seen = fs[j] == fs[i];
    if (!seen) errs[k++] = weft_failure_report(fs[i], buffers[i]);
  }
  weft_status st = weft_error_several(errs, k);
  if (errs != stack_errs) free(errs);
  return st;
}

/* ---- the per-buffer taint view ------------------------------------------------------- */

static void drop(weft_taint *t, bool carrier) {
  if (!t->f) return;
  if (carrier) atomic_fetch_sub_explicit(&t->f->carriers, 1, memory_order_relaxed);
  weft_failure_release(t->f);
  t->f = NULL;
  t->start = t->end = 0;
}

void weft_taint_set(weft_taint *t, uint64_t start, uint64_t end, weft_failure *f, bool carrier) {
  if (start >= end || !f) return;
  if (t->f == f) { /* a set: re-taint changes nothing, ranges of one failure fuse */
    if (start < t->start) t->start = start;
    if (end > t->end) t->end = end;
    return;
  }
  uint64_t s = start, e = end;
  if (t->f && !(start <= t->start && end >= t->end)) {
    /* The old failure keeps bytes the new one does not claim; one range per
     * view cannot say so exactly, so the newer failure takes the hull. */
    if (t->start < s) s = t->start;
    if (t->end > e) e = t->end;
  }
  weft_failure_retain(f);
  if (carrier) atomic_fetch_add_explicit(&f->carriers, 1, memory_order_relaxed);
  drop(t, carrier);
  t->f = f;
  t->start = s;
  t->end = e;
}

void weft_taint_written(weft_taint *t, uint64_t start, uint64_t end, bool carrier) {
  if (!t->f || start >= end || end <= t->start || start >= t->end) return;
  if (start <= t->start && end >= t->end) {
    drop(t, carrier);
  } else if (start <= t->start) {
    t->start = end;
  } else if (end >= t->end) {
    t->end = start;
  }
  /* A write strictly inside the range leaves it tainted (conservative). */
}

weft_failure *weft_taint_get(const weft_taint *t, uint64_t start, uint64_t end) {
  if (!t->f || start >= end || end <= t->start || start >= t->end) return NULL;
  return t->f;
}

void weft_taint_clear(weft_taint *t, bool carrier) {
  drop(t, carrier);
}
