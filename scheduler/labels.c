/* Labels: the per-device table of interned launch labels (weft_launch_ex),
 * and buffer labels (weft_buffer_set_label), set by a command so that only
 * the scheduler, which prints them in reports, touches them. */
#include "scheduler/labels.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "scheduler/buffers.h"
#include "scheduler/command.h"
#include "scheduler/inside.h"
#include "scheduler/submit.h"
#include "scheduler/trace.h"

_Static_assert((WEFT_MAX_LABELS & (WEFT_MAX_LABELS - 1)) == 0, "a power of two: probes mask");

/* Checks |label| and measures it. */
static weft_status label_len(const char *label, const char *what, size_t *len) {
  size_t n = strnlen(label, WEFT_MAX_LABEL_LEN + 1);
  if (n == 0 || n > WEFT_MAX_LABEL_LEN)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "%s must be 1..%u bytes (got %s)", what,
                           WEFT_MAX_LABEL_LEN, n ? "more" : "an empty string");
  *len = n;
  return NULL;
}

/* FNV-1a: labels are short; any spread will do. */
static uint32_t label_hash(const char *s, size_t n) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
  return h;
}

/* The table, made by the first label (a racing maker frees its own). */
static _Atomic(char *) *label_table(weft_device *dev) {
  _Atomic(char *) *t = atomic_load_explicit(&dev->labels, memory_order_acquire);
  if (t) return t;
  size_t bytes = sizeof(*t) * WEFT_MAX_LABELS;
  _Atomic(char *) *made = weft__calloc(&dev->alloc, bytes, 64);
  if (!made) return NULL;
  if (atomic_compare_exchange_strong_explicit(&dev->labels, &t, made, memory_order_acq_rel,
                                              memory_order_acquire))
    return made;
  weft__free(&dev->alloc, made, bytes, 64);
  return t;
}

weft_status weft__label_intern(weft_device *dev, const char *label, const char **out) {
  *out = NULL;
  if (!label) return NULL;
  size_t n = 0;
  weft_status st = label_len(label, "label", &n);
  if (st) return st;
  _Atomic(char *) *t = label_table(dev);
  if (!t) return weft__oom(sizeof(*t) * WEFT_MAX_LABELS, "the launch label table");
  char *mine = NULL; /* our copy, made once we must place it */
  uint32_t at = label_hash(label, n);
  for (uint32_t probe = 0; probe < WEFT_MAX_LABELS; probe++, at++) {
    _Atomic(char *) *slot = &t[at & (WEFT_MAX_LABELS - 1)];
    char *s = atomic_load_explicit(slot, memory_order_acquire);
    while (!s) {
      if (!mine) {
        mine = weft__alloc(&dev->alloc, n + 1, 1);
        if (!mine) return weft__oom(n + 1, "a launch label");
        memcpy(mine, label, n);
        mine[n] = '\0';
      }
      if (atomic_compare_exchange_strong_explicit(slot, &s, mine, memory_order_acq_rel,
                                                  memory_order_acquire)) {
        *out = mine;
        return NULL;
      }
      /* another label took the slot first: it may be this one */
    }
    if (strncmp(s, label, n + 1) == 0) {
      if (mine) weft__free(&dev->alloc, mine, n + 1, 1);
      *out = s;
      return NULL;
    }
  }
  if (mine) weft__free(&dev->alloc, mine, n + 1, 1);
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                         "label '%s' is new and the device holds %u launch labels already (the "
                         "most it interns)",
                         label, WEFT_MAX_LABELS);
}

void weft__labels_destroy(weft_device *dev) {
  _Atomic(char *) *t = atomic_load(&dev->labels);
  if (!t) return;
  for (uint32_t i = 0; i < WEFT_MAX_LABELS; i++) {
    char *s = atomic_load_explicit(&t[i], memory_order_relaxed);
    if (s) weft__free(&dev->alloc, s, strlen(s) + 1, 1);
  }
  weft__free(&dev->alloc, t, sizeof(*t) * WEFT_MAX_LABELS, 64);
  atomic_store(&dev->labels, NULL);
}

/* ---- buffer labels ------------------------------------------------------------------------- */

weft_status weft_buffer_set_label(weft_device *dev, weft_buffer buf, const char *label) {
  WEFT_INSIDE in = {0};
  weft_status st = weft__enter(dev, &in);
  if (st) return st;
  if ((st = weft__buf_lookup(dev, buf, NULL))) return st;
  size_t n = 0;
  if (label && (st = label_len(label, "label", &n))) return st;
  char *copy = NULL;
  if (label) {
    copy = weft__alloc(&dev->alloc, n + 1, 1);
    if (!copy) return weft__oom(n + 1, "a buffer label");
    memcpy(copy, label, n);
    copy[n] = '\0';
  }
  cmd *c = weft__cmd_new(dev, CMD_LABEL, 0);
  if (!c) {
    if (copy) weft__free(&dev->alloc, copy, n + 1, 1);
    return weft__oom(sizeof(cmd), "a label command");
  }
  c->buffer = buf.id;
  c->data = copy;
  weft__cmd_submit(dev, c);
  return NULL;
}

static void label_free(weft_device *dev, char *s) {
  if (s) weft__free(&dev->alloc, s, strlen(s) + 1, 1);
}

void weft__label_process(weft_device *dev, cmd *c) {
  char *label = c->data;
  weft_buf *b = weft__buf_resolve(dev, c->buffer);
  if (b) { /* else released (or its creation failed) before the label reached it */
    label_free(dev, b->label);
    b->label = label;
    if (__builtin_expect(dev->trace != NULL, 0)) weft__trace_buf_label(dev, b);
  } else {
    label_free(dev, label);
  }
  weft__cmd_free(c);
}

void weft__buf_label_name(weft_device *dev, uint64_t id, char *buf, size_t cap) {
  /* A released buffer still bound by work keeps its label until it is freed. */
  weft_handle_slot *s = weft_handles_slot(&dev->buffers, id);
  const weft_buf *b = s ? s->obj : NULL;
  if (b && b->id == id && b->label)
    snprintf(buf, cap, "buffer '%s' (#%" PRIu32 ")", b->label, (uint32_t)id);
  else
    weft__buf_name(id, buf, cap);
}
