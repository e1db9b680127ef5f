/* The error model: construction, accessors, predicates, formatting, clone and
 * free. See core/error.h for the shape of an error and which kinds carry which
 * fields; JSON lives in core/error_json.c.
 *
 * Everything here allocates with libc, never with the injected allocator: an
 * allocator that has run dry must still be able to say so. When even libc
 * fails, constructors return the static error of the kind, so the kind (what
 * callers branch on) survives while the message and backtrace are lost. */
#include "core/error.h"

#include <execinfo.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ERROR_FLAG_STATIC 1u

struct weft_error {
  weft_error_kind kind;
  uint32_t flags;
  uint64_t size;
  char *message; /* NULL: none */
  struct weft_error *source;
  struct weft_error **items; /* Several */
  size_t count;
  uint64_t failure_id; /* Unwritten */
  uint32_t claimed;
  uint32_t depth; /* raw frames captured */
  char **chain;   /* Unwritten: newest hop first */
  size_t chain_len;
  struct weft_error *root;
  char *origin;                 /* Unwritten: the launch that failed, NULL when none did */
  struct weft_error *free_next; /* weft_error_free's work list, so freeing never recurses */
  /* The error that owns this one and where (a WEFT__ROLE_*), so that every
   * walk over the tree climbs back up instead of recursing. Static errors,
   * which several parents may share, have none: they have no children. */
  struct weft_error *parent;
  size_t role;
  void *frames[WEFT__ERROR_MAX_FRAMES];
};

/* ---- kinds ------------------------------------------------------------------------------ */

enum { KIND_SIZE = 1u, KIND_PAYLOAD_FREE = 2u };

/* For each kind: its CamelCase name and the text of its formatted form. Kinds
 * with a size read "<before><size><after>"; the others read "<before>". */
static const struct kind_info {
  const char *name;
  const char *before;
  const char *after;
  unsigned flags;
} kinds[WEFT_ERROR_KIND_COUNT] = {
    [WEFT_OK] = {"Ok", "no error", "", 0},
    [WEFT_ERR_BUFFER_TOO_BIG] = {"BufferTooBig", "buffer of ", " bytes exceeds the max available",
                                 KIND_SIZE},
    [WEFT_ERR_OUT_OF_MEMORY] = {"OutOfMemory",
                                "the device had no memory left for an allocation of ", " bytes",
                                KIND_SIZE},
    [WEFT_ERR_PAGE_UPDATE_FORBIDDEN] = {"PageUpdateForbidden", "no room for an allocation of ",
                                        " bytes in the pages held, and the reservation may not "
                                        "add a page",
                                        KIND_SIZE},
    [WEFT_ERR_PAGE_SIZES_EXHAUSTED] = {"PageSizesExhausted", "an allocation of ",
                                       " bytes needs pages of a new size, and the memory holds "
                                       "as many page sizes as it tracks",
                                       KIND_SIZE},
    [WEFT_ERR_UNSUPPORTED_STRIDES] = {"UnsupportedStrides",
                                      "strides aren't supported for this copy operation on this "
                                      "runtime",
                                      "", 0},
    [WEFT_ERR_NOT_FOUND] = {"NotFound", "memory wasn't found in the memory pool", "", 0},
    [WEFT_ERR_STORAGE_HANDLE_NOT_FOUND] = {"StorageHandleNotFound",
                                           "the storage holds no allocation for the handle's "
                                           "storage id",
                                           "", 0},
    [WEFT_ERR_STORAGE_MAPPING_FAILED] = {"StorageMappingFailed", "an allocation of ",
                                         " bytes carved under a dry run could not be given "
                                         "device backing",
                                         KIND_SIZE},
    [WEFT_ERR_DEVICE_POISONED] = {"DevicePoisoned", "the device is poisoned", "", 0},
    [WEFT_ERR_UNKNOWN] = {"Unknown", "unknown error during execution", "", 0},
    [WEFT_ERR_UNSUPPORTED_IO_OPERATION] = {"UnsupportedIoOperation",
                                           "the IO operation is not supported", "", 0},
    [WEFT_ERR_INVALID_ARGUMENT] = {"InvalidArgument", "invalid argument", "", 0},
    [WEFT_ERR_VALIDATION] = {"Validation", "validation failed", "", 0},
    [WEFT_ERR_GENERIC] = {"Generic", "server error", "", 0},
    [WEFT_ERR_LAUNCH_COMPILATION] = {"LaunchCompilation", "the kernel could not be compiled", "",
                                     0},
    [WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES] = {"LaunchTooManyResources",
                                            "the launch needs more resources than the device "
                                            "offers",
                                            "", 0},
    [WEFT_ERR_TORN_DOWN] = {"TornDown", "a write scope never finished", "", KIND_PAYLOAD_FREE},
    [WEFT_ERR_SKIPPED] = {"Skipped", "the work did not run because an input carried a failure", "",
                          KIND_PAYLOAD_FREE},
    [WEFT_ERR_UNWRITTEN] = {"Unwritten", "", "", 0}, /* formatted by format_into */
    [WEFT_ERR_SEVERAL] = {"Several", "", "", 0},     /* formatted by format_into */
    [WEFT_ERR_TIMEOUT] = {"Timeout", "the wait ran out of time", "", 0},
};

/* Includes WEFT_OK: the kind_info table covers it. */
static bool kind_in_enum(weft_error_kind kind) {
  return (unsigned)kind < (unsigned)WEFT_ERROR_KIND_COUNT;
}

bool weft__error_kind_is_valid(weft_error_kind kind) {
  return kind_in_enum(kind) && kind != WEFT_OK;
}

bool weft__error_kind_has_size(weft_error_kind kind) {
  return kind_in_enum(kind) && (kinds[kind].flags & KIND_SIZE);
}

bool weft__error_kind_is_payload_free(weft_error_kind kind) {
  return kind_in_enum(kind) && (kinds[kind].flags & KIND_PAYLOAD_FREE);
}

bool weft__error_kind_is_derived(weft_error_kind kind) {
  return kind == WEFT_ERR_TORN_DOWN || kind == WEFT_ERR_SKIPPED || kind == WEFT_ERR_UNWRITTEN ||
         kind == WEFT_ERR_SEVERAL;
}

const char *weft_error_kind_name(weft_error_kind kind) {
  return kind_in_enum(kind) ? kinds[kind].name : "Invalid";
}

bool weft_error_kind_from_name(const char *name, weft_error_kind *out) {
  if (!name) return false;
  for (int k = 0; k < WEFT_ERROR_KIND_COUNT; k++) {
    if (strcmp(name, kinds[k].name) == 0) {
      if (out) *out = (weft_error_kind)k;
      return true;
    }
  }
  return false;
}

/* ---- static errors ----------------------------------------------------------------------- */

/* Read-only: several threads may hold the same one, and nothing ever writes
 * to an error after construction. */
#define STATIC_ERROR(k) [k] = {.kind = k, .flags = ERROR_FLAG_STATIC}
static const struct weft_error static_errors[WEFT_ERROR_KIND_COUNT] = {
    STATIC_ERROR(WEFT_ERR_BUFFER_TOO_BIG),
    STATIC_ERROR(WEFT_ERR_OUT_OF_MEMORY),
    STATIC_ERROR(WEFT_ERR_PAGE_UPDATE_FORBIDDEN),
    STATIC_ERROR(WEFT_ERR_PAGE_SIZES_EXHAUSTED),
    STATIC_ERROR(WEFT_ERR_UNSUPPORTED_STRIDES),
    STATIC_ERROR(WEFT_ERR_NOT_FOUND),
    STATIC_ERROR(WEFT_ERR_STORAGE_HANDLE_NOT_FOUND),
    STATIC_ERROR(WEFT_ERR_STORAGE_MAPPING_FAILED),
    STATIC_ERROR(WEFT_ERR_DEVICE_POISONED),
    STATIC_ERROR(WEFT_ERR_UNKNOWN),
    STATIC_ERROR(WEFT_ERR_UNSUPPORTED_IO_OPERATION),
    STATIC_ERROR(WEFT_ERR_INVALID_ARGUMENT),
    STATIC_ERROR(WEFT_ERR_VALIDATION),
    STATIC_ERROR(WEFT_ERR_GENERIC),
    STATIC_ERROR(WEFT_ERR_LAUNCH_COMPILATION),
    STATIC_ERROR(WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES),
    STATIC_ERROR(WEFT_ERR_TORN_DOWN),
    STATIC_ERROR(WEFT_ERR_SKIPPED),
    STATIC_ERROR(WEFT_ERR_UNWRITTEN),
    STATIC_ERROR(WEFT_ERR_SEVERAL),
    STATIC_ERROR(WEFT_ERR_TIMEOUT),
};

weft_status weft__error_static(weft_error_kind kind) {
  if (!weft__error_kind_is_valid(kind)) kind = WEFT_ERR_INVALID_ARGUMENT;
  /* The cast drops const; static errors are never written (see above). */
  return (weft_status)&static_errors[kind];
}

bool weft__error_is_static(weft_status st) {
  return st && (st->flags & ERROR_FLAG_STATIC);
}

weft_status weft__error_torn_down(void) {
  return weft__error_static(WEFT_ERR_TORN_DOWN);
}

weft_status weft__error_skipped(void) {
  return weft__error_static(WEFT_ERR_SKIPPED);
}

/* ---- free --------------------------------------------------------------------------------- */

static void push_free(struct weft_error **list, struct weft_error *e) {
  if (!e || weft__error_is_static(e)) return;
  e->free_next = *list;
  *list = e;
}

/* Iterative, so that a cause chain of any length frees in constant stack. */
void weft_error_free(weft_status st) {
  struct weft_error *pending = NULL;
  push_free(&pending, st);
  while (pending) {
    struct weft_error *e = pending;
    pending = e->free_next;
    push_free(&pending, e->source);
    push_free(&pending, e->root);
    for (size_t i = 0; i < e->count; i++) push_free(&pending, e->items[i]);
    for (size_t i = 0; i < e->chain_len; i++) free(e->chain[i]);
    free(e->chain);
    free(e->items);
    free(e->message);
    free(e->origin);
    free(e);
  }
}

void weft_free(void *p) {
  free(p);
}

/* ---- construction ------------------------------------------------------------------------- */

static char *dup_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* NULL when formatting fails or memory runs out: the error then has no
 * message, which is better than no error. */
static char *vformat(const char *fmt, va_list ap) {
  va_list again;
  va_copy(again, ap);
  int n = vsnprintf(NULL, 0, fmt, ap);
  char *s = NULL;
  if (n >= 0 && (s = malloc((size_t)n + 1)) != NULL) {
    if (vsnprintf(s, (size_t)n + 1, fmt, again) < 0) {
      free(s);
      s = NULL;
    }
  }
  va_end(again);
  return s;
}

/* noinline keeps the frame count stable: exactly this function is skipped. */
__attribute__((noinline)) static void capture_backtrace(struct weft_error *e) {
  void *raw[WEFT__ERROR_MAX_FRAMES + 1];
  int n = backtrace(raw, WEFT__ERROR_MAX_FRAMES + 1);
  if (n <= 1) return;
  e->depth = (uint32_t)(n - 1);
  memcpy(e->frames, raw + 1, (size_t)(n - 1) * sizeof(void *));
}

/* Records that |parent| owns |child| as its |role|. */
static void adopt(struct weft_error *parent, struct weft_error *child, size_t role) {
  if (!child || weft__error_is_static(child)) return;
  child->parent = parent;
  child->role = role;
}

static void free_parts(weft__error_parts *p) {
  free(p->message);
  weft_error_free(p->source);
  weft_error_free(p->root);
  if (p->errors)
    for (size_t i = 0; i < p->count; i++) weft_error_free(p->errors[i]);
  free(p->errors);
  if (p->chain)
    for (size_t i = 0; i < p->chain_len; i++) free(p->chain[i]);
  free(p->chain);
  free(p->origin);
  memset(p, 0, sizeof(*p));
}

weft_status weft__error_assemble(weft__error_parts *p, bool backtrace) {
  if (!p) return NULL;
  weft_error_kind kind = p->kind;
  if (!weft__error_kind_is_valid(kind) || weft__error_kind_is_payload_free(kind)) {
    free_parts(p);
    return weft__error_kind_is_valid(kind) ? weft__error_static(kind) : NULL;
  }
  struct weft_error *e = calloc(1, sizeof(*e));
  if (!e) {
    free_parts(p);
    return NULL;
  }
  e->kind = kind;
  if (weft__error_kind_has_size(kind)) e->size = p->size;
  e->message = p->message;
  e->source = p->source;
  p->message = NULL;
  p->source = NULL;
  if (kind == WEFT_ERR_SEVERAL && p->errors) {
    /* Compact the owned array in place, dropping NULL entries. */
    size_t n = 0;
    for (size_t i = 0; i < p->count; i++)
      if (p->errors[i]) p->errors[n++] = p->errors[i];
    if (n > 0) {
      e->items = p->errors;
      e->count = n;
      p->errors = NULL;
    }
    p->count = 0;
  }
  if (kind == WEFT_ERR_UNWRITTEN) {
    e->failure_id = p->failure_id;
    e->claimed = p->claimed;
    e->root = p->root;
    p->root = NULL;
    e->origin = p->origin;
    p->origin = NULL;
    if (p->chain) {
      size_t n = 0;
      for (size_t i = 0; i < p->chain_len; i++)
        if (p->chain[i]) p->chain[n++] = p->chain[i];
      if (n > 0) {
        e->chain = p->chain;
        e->chain_len = n;
        p->chain = NULL;
      }
      p->chain_len = 0;
    }
  }
  free_parts(p); /* whatever the kind does not have */
  adopt(e, e->source, WEFT__ROLE_SOURCE);
  adopt(e, e->root, WEFT__ROLE_ROOT);
  for (size_t i = 0; i < e->count; i++) adopt(e, e->items[i], WEFT__ROLE_ITEM0 + i);
  if (backtrace) capture_backtrace(e);
  return e;
}

/* The InvalidArgument answer to a kind that is not an error kind; keeps
 * |source| as its cause so that no ownership the caller handed over is lost. */
static weft_status invalid_kind(const char *fn, weft_error_kind kind, weft_status source) {
  weft__error_parts p = {.kind = WEFT_ERR_INVALID_ARGUMENT, .source = source};
  char text[96];
  if (kind == WEFT_OK)
    snprintf(text, sizeof(text), "%s: WEFT_OK (0) is not an error kind", fn);
  else
    snprintf(text, sizeof(text), "%s: kind %d is outside weft_error_kind", fn, (int)kind);
  p.message = dup_string(text);
  weft_status st = weft__error_assemble(&p, true);
  return st ? st : weft__error_static(WEFT_ERR_INVALID_ARGUMENT);
}

static weft_status vmake(const char *fn, weft_error_kind kind, uint64_t size, weft_status source,
                         const char *fmt, va_list ap) {
  if (!weft__error_kind_is_valid(kind)) return invalid_kind(fn, kind, source);
  if (weft__error_kind_is_payload_free(kind)) {
    weft_error_free(source);
    return weft__error_static(kind);
  }
  weft__error_parts p = {.kind = kind, .size = size, .source = source};
  if (fmt) p.message = vformat(fmt, ap);
  weft_status st = weft__error_assemble(&p, true);
  return st ? st : weft__error_static(kind);
}

weft_status weft__error_vmake(weft_error_kind kind, uint64_t size, weft_status source,
                              const char *fmt, va_list ap) {
  return vmake("weft_error_make", kind, size, source, fmt, ap);
}

weft_status weft_error_make(weft_error_kind kind, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft_status st = vmake("weft_error_make", kind, 0, NULL, fmt, ap);
  va_end(ap);
  return st;
}

weft_status weft_error_make_sized(weft_error_kind kind, uint64_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft_status st = vmake("weft_error_make_sized", kind, size, NULL, fmt, ap);
  va_end(ap);
  return st;
}

weft_status weft_error_wrap(weft_error_kind kind, uint64_t size, weft_status source,
                            const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  weft_status st = vmake("weft_error_wrap", kind, size, source, fmt, ap);
  va_end(ap);
  return st;
}

/* weft_error_annotate and _sized: |set_size| says whether |size| replaces
 * the size field (kinds that have one). */
static weft_status vannotate(weft_status st, bool set_size, uint64_t size, const char *fmt,
                             va_list ap) {
  if (!st || weft__error_kind_is_payload_free(st->kind)) return st;
  set_size = set_size && weft__error_kind_has_size(st->kind) && st->size != size;
  if (!fmt && !set_size) return st;
  char *note = fmt ? vformat(fmt, ap) : NULL; /* NULL when memory ran out: no annotation */
  if (weft__error_is_static(st)) {
    if (fmt && !note) return st;
    /* Static errors are shared and read-only: the annotation goes on a copy,
     * which loses nothing (a static error has no payload). */
    weft__error_parts p = {.kind = st->kind, .size = set_size ? size : 0, .message = note};
    weft_status e = weft__error_assemble(&p, true);
    return e ? e : st;
  }
  if (set_size) st->size = size;
  if (note && st->message && *st->message) {
    size_t a = strlen(st->message), b = strlen(note);
    char *m = malloc(a + 2 + b + 1);
    if (!m) {
      free(note);
      return st;
    }
    memcpy(m, st->message, a);
    memcpy(m + a, "; ", 2);
    memcpy(m + a + 2, note, b + 1);
    free(note);
    note = m;
  }
  if (note) {
    free(st->message);
    st->message = note;
  }
  return st;
}

weft_status weft_error_annotate(weft_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st = vannotate(st, false, 0, fmt, ap);
  va_end(ap);
  return st;
}

weft_status weft_error_annotate_sized(weft_status st, uint64_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  st = vannotate(st, true, size, fmt, ap);
  va_end(ap);
  return st;
}

weft_status weft_error_several(weft_status *errors, size_t n) {
  if (!errors && n > 0)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "weft_error_several: errors is NULL but n is %zu", n);
  weft__error_parts p = {.kind = WEFT_ERR_SEVERAL};
  size_t live = 0;
  for (size_t i = 0; i < n; i++) live += errors[i] != NULL;
  if (live > 0) {
    p.errors = malloc(live * sizeof(*p.errors));
    if (!p.errors) {
      for (size_t i = 0; i < n; i++) weft_error_free(errors[i]);
      return weft__error_static(WEFT_ERR_SEVERAL);
    }
    for (size_t i = 0; i < n; i++)
      if (errors[i]) p.errors[p.count++] = errors[i];
  }
  weft_status st = weft__error_assemble(&p, true);
  return st ? st : weft__error_static(WEFT_ERR_SEVERAL);
}

weft_status weft_error_unwritten(uint64_t failure_id, uint32_t claimed, weft_status root,
                                 const char *const *chain, size_t chain_len) {
  return weft__error_unwritten(failure_id, claimed, root, chain, chain_len, NULL);
}

weft_status weft__error_unwritten(uint64_t failure_id, uint32_t claimed, weft_status root,
                                  const char *const *chain, size_t chain_len, const char *origin) {
  if (!chain && chain_len > 0) {
    weft__error_parts bad = {.kind = WEFT_ERR_INVALID_ARGUMENT, .source = root};
    char text[96];
    snprintf(text, sizeof(text), "weft_error_unwritten: chain is NULL but chain_len is %zu",
             chain_len);
    bad.message = dup_string(text);
    weft_status st = weft__error_assemble(&bad, true);
    return st ? st : weft__error_static(WEFT_ERR_INVALID_ARGUMENT);
  }
  weft__error_parts p = {
      .kind = WEFT_ERR_UNWRITTEN, .failure_id = failure_id, .claimed = claimed, .root = root};
  if (origin) p.origin = dup_string(origin); /* out of memory: the report names no launch */
  if (chain_len > 0 && (p.chain = calloc(chain_len, sizeof(*p.chain))) != NULL) {
    p.chain_len = chain_len;
    for (size_t i = 0; i < chain_len; i++) {
      if (!chain[i]) continue;
      if (!(p.chain[i] = dup_string(chain[i]))) {
        /* Out of memory: keep the error and its root, drop the chain. */
        for (size_t j = 0; j < i; j++) free(p.chain[j]);
        free(p.chain);
        p.chain = NULL;
        p.chain_len = 0;
        break;
      }
    }
  }
  weft_status st = weft__error_assemble(&p, true);
  return st ? st : weft__error_static(WEFT_ERR_UNWRITTEN);
}

/* ---- walks ------------------------------------------------------------------------------ */

static struct weft_error *child_of(struct weft_error *e, size_t role) {
  if (role == WEFT__ROLE_ROOT) return e->root;
  if (role == WEFT__ROLE_SOURCE) return e->source;
  return e->items[role - WEFT__ROLE_ITEM0];
}

/* The children of |e| in walk order: root, items, source; or source, items,
 * root. Index |i| of e->count + 2. */
static size_t role_at(struct weft_error *e, size_t i, bool source_first) {
  if (i == 0) return source_first ? WEFT__ROLE_SOURCE : WEFT__ROLE_ROOT;
  if (i == e->count + 1) return source_first ? WEFT__ROLE_ROOT : WEFT__ROLE_SOURCE;
  return WEFT__ROLE_ITEM0 + (i - 1);
}

static size_t index_of(struct weft_error *e, size_t role, bool source_first) {
  if (role == WEFT__ROLE_ROOT) return source_first ? e->count + 1 : 0;
  if (role == WEFT__ROLE_SOURCE) return source_first ? 0 : e->count + 1;
  return 1 + (role - WEFT__ROLE_ITEM0);
}

/* A static error has no children: its slots are visited in place. */
static void walk_static(const weft__error_walk_ops *ops, void *ctx, struct weft_error *e,
                        struct weft_error *parent, size_t role) {
  for (size_t i = 0; i < 2; i++) {
    size_t r = role_at(e, i, ops->source_first);
    if (ops->before) ops->before(ctx, e, r, NULL);
    if (ops->after) ops->after(ctx, e, r, NULL);
  }
  if (ops->leave) ops->leave(ctx, e, parent, role);
}

/* Depth-first, in constant stack: down through the children, back up
 * through the parent pointers. */
void weft__error_walk(weft_status top, const weft__error_walk_ops *ops, void *ctx) {
  if (!top) return;
  if (ops->enter(ctx, top, NULL, 0) != WEFT__WALK_DESCEND) return;
  if (weft__error_is_static(top)) {
    walk_static(ops, ctx, top, NULL, 0);
    return;
  }
  struct weft_error *e = top;
  size_t i = 0;
  for (;;) {
    if (i < e->count + 2) {
      size_t role = role_at(e, i, ops->source_first);
      struct weft_error *c = child_of(e, role);
      bool visit = ops->before ? ops->before(ctx, e, role, c) : true;
      if (visit && c) {
        weft__walk_step step = ops->enter(ctx, c, e, role);
        if (step == WEFT__WALK_STOP) return;
        if (step == WEFT__WALK_DESCEND) {
          if (!weft__error_is_static(c)) {
            e = c;
            i = 0;
            continue;
          }
          walk_static(ops, ctx, c, e, role);
        }
      }
      if (ops->after) ops->after(ctx, e, role, c);
      i++;
      continue;
    }
    struct weft_error *parent = e == top ? NULL : e->parent;
    if (ops->leave) ops->leave(ctx, e, parent, e->role);
    if (!parent) return;
    if (ops->after) ops->after(ctx, parent, e->role, e);
    i = index_of(parent, e->role, ops->source_first) + 1;
    e = parent;
  }
}

/* ---- clone ------------------------------------------------------------------------------ */

/* Deep copy, built top-down as the walk goes. Out of memory part-way gives
 * a degraded copy (a static error of the same kind where a node could not
 * be allocated, its subtree dropped), never NULL. */
typedef struct clone_ctx {
  struct weft_error *top, *at; /* the copy, and the copy of the error being walked */
} clone_ctx;

/* Hangs |c| under the copy of its parent; false when that copy has no room
 * for it (its items array could not be allocated). */
static bool clone_attach(clone_ctx *k, struct weft_error *c, size_t role) {
  if (!k->at) {
    k->top = c;
    return true;
  }
  if (role == WEFT__ROLE_ROOT) {
    k->at->root = c;
  } else if (role == WEFT__ROLE_SOURCE) {
    k->at->source = c;
  } else {
    if (role - WEFT__ROLE_ITEM0 >= k->at->count) return false;
    k->at->items[role - WEFT__ROLE_ITEM0] = c;
  }
  adopt(k->at, c, role);
  return true;
}

static weft__walk_step clone_enter(void *ctx, weft_status e, weft_status parent, size_t role) {
  clone_ctx *k = ctx;
  (void)parent;
  if (e->flags & ERROR_FLAG_STATIC) {
    clone_attach(k, e, role);
    return WEFT__WALK_SKIP;
  }
  struct weft_error *c = calloc(1, sizeof(*c));
  if (!c) {
    clone_attach(k, weft__error_static(e->kind), role);
    return WEFT__WALK_SKIP;
  }
  if (!clone_attach(k, c, role)) {
    free(c);
    return WEFT__WALK_SKIP;
  }
  c->kind = e->kind;
  c->size = e->size;
  c->failure_id = e->failure_id;
  c->claimed = e->claimed;
  c->depth = e->depth;
  memcpy(c->frames, e->frames, sizeof(c->frames));
  if (e->message) c->message = dup_string(e->message);
  if (e->origin) c->origin = dup_string(e->origin);
  if (e->count > 0 && (c->items = calloc(e->count, sizeof(*c->items))) != NULL) c->count = e->count;
  if (e->chain_len > 0 && (c->chain = malloc(e->chain_len * sizeof(*c->chain))) != NULL) {
    for (size_t i = 0; i < e->chain_len; i++) {
      if (!(c->chain[c->chain_len] = dup_string(e->chain[i]))) break;
      c->chain_len++;
    }
  }
  k->at = c;
  return WEFT__WALK_DESCEND;
}

static void clone_leave(void *ctx, weft_status e, weft_status parent, size_t role) {
  clone_ctx *k = ctx;
  (void)e, (void)parent, (void)role;
  /* Items whose copy failed leave holes: close them up. */
  size_t n = 0;
  for (size_t i = 0; i < k->at->count; i++)
    if (k->at->items[i]) {
      k->at->items[n] = k->at->items[i];
      adopt(k->at, k->at->items[n], WEFT__ROLE_ITEM0 + n);
      n++;
    }
  k->at->count = n;
  k->at = k->at->parent;
}

weft_status weft_error_clone(weft_status st) {
  static const weft__error_walk_ops ops = {.enter = clone_enter, .leave = clone_leave};
  clone_ctx k = {0};
  weft__error_walk(st, &ops, &k);
  return k.top;
}

/* ---- accessors ---------------------------------------------------------------------------- */

weft_error_kind weft_error_kind_of(weft_status st) {
  return st ? st->kind : WEFT_OK;
}

const char *weft__error_message_raw(weft_status st) {
  return st ? st->message : NULL;
}

const char *weft_error_message(weft_status st) {
  return st && st->message ? st->message : "";
}

/* Constructors only set fields the kind has, so plain reads are exact. */
uint64_t weft_error_size(weft_status st) {
  return st ? st->size : 0;
}

weft_status weft_error_source(weft_status st) {
  return st ? st->source : NULL;
}

size_t weft_error_count(weft_status st) {
  return st ? st->count : 0;
}

weft_status weft_error_at(weft_status st, size_t i) {
  return st && i < st->count ? st->items[i] : NULL;
}

uint64_t weft_error_failure_id(weft_status st) {
  return st ? st->failure_id : 0;
}

uint32_t weft_error_claimed(weft_status st) {
  return st ? st->claimed : 0;
}

weft_status weft_error_root(weft_status st) {
  return st ? st->root : NULL;
}

size_t weft_error_chain_length(weft_status st) {
  return st ? st->chain_len : 0;
}

const char *weft_error_chain_at(weft_status st, size_t i) {
  return st && i < st->chain_len ? st->chain[i] : NULL;
}

const char *weft_error_origin(weft_status st) {
  return st ? st->origin : NULL;
}

size_t weft_error_backtrace_depth(weft_status st) {
  return st ? st->depth : 0;
}

/* ---- predicates --------------------------------------------------------------------------- */

bool weft_error_may_succeed_after_reclaim(weft_status st) {
  weft_error_kind k = weft_error_kind_of(st);
  return k == WEFT_ERR_OUT_OF_MEMORY || k == WEFT_ERR_PAGE_SIZES_EXHAUSTED;
}

static weft__walk_step poisoned_enter(void *ctx, weft_status e, weft_status parent, size_t role) {
  (void)parent, (void)role;
  if (e->kind != WEFT_ERR_DEVICE_POISONED) return WEFT__WALK_DESCEND;
  *(bool *)ctx = true;
  return WEFT__WALK_STOP;
}

bool weft_error_is_device_poisoned(weft_status st) {
  static const weft__error_walk_ops ops = {.enter = poisoned_enter};
  bool found = false;
  weft__error_walk(st, &ops, &found);
  return found;
}

/* A refusal through Unwritten roots and Several items (never causes): every
 * error reached must be a refusal kind, a Several with items or an
 * Unwritten with a root. */
static weft__walk_step refusal_enter(void *ctx, weft_status e, weft_status parent, size_t role) {
  (void)parent, (void)role;
  switch (e->kind) {
  case WEFT_ERR_LAUNCH_COMPILATION:
  case WEFT_ERR_LAUNCH_TOO_MANY_RESOURCES:
    return WEFT__WALK_SKIP;
  case WEFT_ERR_SEVERAL:
    if (e->count > 0) return WEFT__WALK_DESCEND;
    break;
  case WEFT_ERR_UNWRITTEN:
    if (e->root) return WEFT__WALK_DESCEND;
    break;
  default:
    break;
  }
  *(bool *)ctx = false;
  return WEFT__WALK_STOP;
}

static bool refusal_before(void *ctx, weft_status parent, size_t role, weft_status child) {
  (void)ctx, (void)parent, (void)child;
  return role != WEFT__ROLE_SOURCE;
}

bool weft_error_is_refusal(weft_status st) {
  static const weft__error_walk_ops ops = {.enter = refusal_enter, .before = refusal_before};
  bool all = st != NULL;
  weft__error_walk(st, &ops, &all);
  return all;
}

/* ---- formatting --------------------------------------------------------------------------- */

/* An snprintf-style destination: writes what fits (keeping room for the NUL)
 * and counts everything, so the caller learns the full length. */
typedef struct sink {
  char *buf;
  size_t cap;
  size_t len;
} sink;

static void put_n(sink *s, const char *p, size_t n) {
  if (s->cap > 0 && s->len < s->cap - 1) {
    size_t room = s->cap - 1 - s->len;
    memcpy(s->buf + s->len, p, n < room ? n : room);
  }
  s->len = n > SIZE_MAX - s->len ? SIZE_MAX : s->len + n;
}

static void put(sink *s, const char *p) {
  put_n(s, p, strlen(p));
}

static void put_u64(sink *s, uint64_t v) {
  char num[24];
  snprintf(num, sizeof(num), "%" PRIu64, v);
  put(s, num);
}

static void sink_finish(sink *s) {
  if (s->cap > 0) s->buf[s->len < s->cap ? s->len : s->cap - 1] = '\0';
}

/* The one-line form, in walk order: the error itself, then for Unwritten
 * its root, origin and chain, for Several its items, then its cause. */
static weft__walk_step format_enter(void *ctx, weft_status e, weft_status parent, size_t role) {
  sink *s = ctx;
  (void)parent, (void)role;
  const struct kind_info *ki = &kinds[kind_in_enum(e->kind) ? e->kind : WEFT_ERR_INVALID_ARGUMENT];
  put(s, ki->name);
  switch (e->kind) {
  case WEFT_ERR_SEVERAL:
    put(s, " (");
    put_u64(s, e->count);
    put(s, ")");
    break;
  case WEFT_ERR_UNWRITTEN:
    put(s, ": failure #");
    put_u64(s, e->failure_id);
    put(s, " (claimed by ");
    put_u64(s, e->claimed);
    put(s, e->claimed == 1 ? " buffer)" : " buffers)");
    put(s, " left these bytes unwritten");
    break;
  default:
    put(s, ": ");
    put(s, ki->before);
    if (ki->flags & KIND_SIZE) {
      put_u64(s, e->size);
      put(s, ki->after);
    }
    break;
  }
  if (e->message && e->message[0]) {
    put(s, ": ");
    put(s, e->message);
  }
  return WEFT__WALK_DESCEND;
}

static bool format_before(void *ctx, weft_status e, size_t role, weft_status child) {
  sink *s = ctx;
  if (role == WEFT__ROLE_ROOT) {
    if (e->kind == WEFT_ERR_UNWRITTEN) put(s, child ? "; root: " : "; root: none");
  } else if (role == WEFT__ROLE_SOURCE) {
    if (child) put(s, ": caused by: ");
  } else {
    put(s, role == WEFT__ROLE_ITEM0 ? ": [" : " [");
  }
  return true;
}

static void format_after(void *ctx, weft_status e, size_t role, weft_status child) {
  sink *s = ctx;
  (void)child;
  if (role >= WEFT__ROLE_ITEM0) {
    put(s, "]");
  } else if (role == WEFT__ROLE_ROOT && e->kind == WEFT_ERR_UNWRITTEN) {
    if (e->origin) {
      put(s, "; failed: ");
      put(s, e->origin);
    }
    for (size_t i = 0; i < e->chain_len; i++) {
      put(s, i == 0 ? "; chain: " : "; ");
      put(s, e->chain[i]);
    }
  }
}

static void format_into(sink *s, weft_status e) {
  static const weft__error_walk_ops ops = {
      .enter = format_enter, .before = format_before, .after = format_after};
  weft__error_walk(e, &ops, s);
}

size_t weft_error_format(weft_status st, char *buf, size_t cap) {
  sink s = {buf, buf ? cap : 0, 0};
  if (st)
    format_into(&s, st);
  else
    put(&s, "Ok");
  sink_finish(&s);
  return s.len;
}

/* One section per error of the tree (pre-order): a heading naming the error
 * and where it sits ("error", "error.source", "error.errors[1].root", ...),
 * then one symbolized frame per line. The path grows and shrinks with the
 * walk; past PATH_SHOWN bytes a heading shows its tail and the depth. */
#define PATH_SHOWN 240

typedef struct backtrace_ctx {
  sink *s;
  char *path; /* libc; NUL-terminated, |len| bytes */
  size_t len, cap;
  size_t depth; /* errors above this one */
  size_t lost;  /* segments not appended (out of memory), innermost first */
} backtrace_ctx;

static size_t segment(size_t role, char *buf, size_t cap) {
  int n;
  if (role == WEFT__ROLE_ROOT)
    n = snprintf(buf, cap, ".root");
  else if (role == WEFT__ROLE_SOURCE)
    n = snprintf(buf, cap, ".source");
  else
    n = snprintf(buf, cap, ".errors[%zu]", role - WEFT__ROLE_ITEM0);
  return n > 0 ? (size_t)n : 0;
}

static void path_push(backtrace_ctx *b, size_t role) {
  char seg[40];
  size_t n = segment(role, seg, sizeof(seg));
  if (!b->lost && b->len + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1) cap *= 2;
    char *p = realloc(b->path, cap);
    if (p) {
      b->path = p;
      b->cap = cap;
    }
  }
  if (b->lost || b->len + n + 1 > b->cap) {
    b->lost++;
    return;
  }
  memcpy(b->path + b->len, seg, n + 1);
  b->len += n;
}

static void path_pop(backtrace_ctx *b, size_t role) {
  if (b->lost) {
    b->lost--;
    return;
  }
  char seg[40];
  b->len -= segment(role, seg, sizeof(seg));
  b->path[b->len] = '\0';
}

static weft__walk_step backtrace_enter(void *ctx, weft_status e, weft_status parent, size_t role) {
  backtrace_ctx *b = ctx;
  sink *s = b->s;
  if (parent) {
    path_push(b, role);
    b->depth++;
  }
  put(s, "\nbacktrace of ");
  if (b->len <= PATH_SHOWN && !b->lost) {
    put(s, b->path);
  } else {
    /* error…<the last segments> (depth N): the full path would make the
     * report quadratic in the depth of the tree. */
    const char *tail = b->path + b->len - (b->len < PATH_SHOWN ? b->len : PATH_SHOWN);
    const char *dot = strchr(tail, '.');
    put(s, "error\u2026");
    put(s, dot ? dot : tail);
    put(s, b->lost ? "\u2026 (depth " : " (depth ");
    put_u64(s, b->depth);
    put(s, ")");
  }
  put(s, " (");
  put(s, weft_error_kind_name(e->kind));
  put(s, "):");
  if (e->depth == 0) put(s, " none captured");
  char **symbols = e->depth ? backtrace_symbols(e->frames, (int)e->depth) : NULL;
  for (uint32_t i = 0; i < e->depth; i++) {
    char line[48];
    snprintf(line, sizeof(line), "\n  #%" PRIu32 " ", i);
    put(s, line);
    if (symbols) {
      put(s, symbols[i]);
    } else {
      snprintf(line, sizeof(line), "%p", e->frames[i]);
      put(s, line);
    }
  }
  free(symbols); /* libc's, like every allocation here */
  return WEFT__WALK_DESCEND;
}

static void backtrace_leave(void *ctx, weft_status e, weft_status parent, size_t role) {
  backtrace_ctx *b = ctx;
  (void)e;
  if (!parent) return;
  path_pop(b, role);
  b->depth--;
}

static void backtrace_into(sink *s, weft_status e) {
  static const weft__error_walk_ops ops = {.enter = backtrace_enter, .leave = backtrace_leave};
  backtrace_ctx b = {.s = s};
  b.path = malloc(256);
  if (b.path) {
    b.cap = 256;
    memcpy(b.path, "error", 6);
    b.len = 5;
  } else {
    b.lost = 1; /* the heading then shows only the depth */
  }
  weft__error_walk(e, &ops, &b);
  free(b.path);
}

size_t weft_error_format_backtrace(weft_status st, char *buf, size_t cap) {
  sink s = {buf, buf ? cap : 0, 0};
  if (st) {
    format_into(&s, st);
    backtrace_into(&s, st);
  } else {
    put(&s, "Ok");
  }
  sink_finish(&s);
  return s.len;
}
