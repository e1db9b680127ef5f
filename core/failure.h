/* Failure records: what a failed launch left unwritten, and the chain of
 * launches skipped because they needed those bytes.
 *
 * A record is created by whoever sees the failure first (a worker running a
 * kernel, or the scheduler when a reservation fails), is reference counted
 * atomically by the buffers that carry it (one reference per taint view) and
 * by in-flight tasks, and is freed with libc by the last release, on any
 * thread. Its skip records are appended by workers on other streams too, so
 * they sit behind a small spinlock (failure path only, never the success
 * path).
 *
 * weft_taint is the per-buffer taint view: one failure over one byte range.
 * It is exact for whole-buffer failures and conservative for partial ones
 * (a write in the middle of a tainted range keeps the whole range tainted). */
#ifndef WEFT_CORE_FAILURE_H
#define WEFT_CORE_FAILURE_H

#include <ck_spinlock.h>

#include "core/sync.h"
#include <stdatomic.h>

#include <weft/weft.h>

#define WEFT_SKIP_KEEP 16 /* the newest skip records kept per failure */

typedef struct weft_skip_record {
  const char *kernel; /* kernel name; lives as long as the device */
  uint64_t launch;    /* the launch's number on its device (1-based) */
  uint64_t needed;    /* the buffer whose failure stopped it */
  uint32_t nproduced;
  uint64_t produced[WEFT_MAX_BINDINGS]; /* the buffers it would have written */
} weft_skip_record;

typedef struct weft_failure {
  _Atomic uint32_t refs;
  _Atomic uint32_t carriers; /* buffers whose execution view it claims */
  uint64_t id;               /* #id: non-zero, increasing, never reused */
  weft_status root;          /* owned */
  const char *origin_kernel; /* the launch that failed, if one did (the last hop) */
  uint64_t origin_launch;
  ck_spinlock_fas_t lock; /* guards the skip records */
  uint32_t nskips, first; /* ring of the newest WEFT_SKIP_KEEP */
  uint64_t skipped_total;
  weft_skip_record skips[WEFT_SKIP_KEEP];
} weft_failure;

/* Takes ownership of |root|. NULL when memory runs out (|root| is freed). */
weft_failure *weft_failure_new(uint64_t id, weft_status root);
void weft_failure_retain(weft_failure *f);
void weft_failure_release(weft_failure *f);
/* Appends a skip record (the oldest is dropped past WEFT_SKIP_KEEP). */
void weft_failure_skipped(weft_failure *f, const weft_skip_record *rec);
/* Unwritten{#id, claimed, chain newest hop first, root} for a read of
 * |buffer|: walks the skip records back from the launch that produced it,
 * and ends with the launch that failed when there is one. */
weft_status weft_failure_report(weft_failure *f, uint64_t buffer);
/* Several{...} of the distinct failures in |fs| (first-seen order, each with
 * the first buffer that carries it), or NULL when every entry is NULL. */
weft_status weft_failure_reports(weft_failure *const *fs, const uint64_t *buffers, size_t n);
/* A buffer id as the reports print it. */
int weft_failure_buffer_name(char *buf, size_t cap, uint64_t buffer);

typedef struct weft_taint {
  weft_failure *f; /* a reference, or NULL */
  uint64_t start, end;
} weft_taint;

/* |carrier|: this view counts in the failure's carriers. */
void weft_taint_set(weft_taint *t, uint64_t start, uint64_t end, weft_failure *f, bool carrier);
void weft_taint_written(weft_taint *t, uint64_t start, uint64_t end, bool carrier);
/* The failure claiming any byte of [start, end), or NULL. Empty ranges never match. */
weft_failure *weft_taint_get(const weft_taint *t, uint64_t start, uint64_t end);
void weft_taint_clear(weft_taint *t, bool carrier);

#endif
