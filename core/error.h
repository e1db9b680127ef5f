/* Private side of the error model (the public half is the "status and errors"
 * section of weft.h).
 *
 * An error is a libc-allocated tree: a kind, the fields that kind has (size,
 * message, an owned cause, Several's items, Unwritten's failure id / claimed /
 * chain / root) and up to WEFT__ERROR_MAX_FRAMES raw return addresses captured
 * at creation. Errors never use the injected allocator, so that running out of
 * memory can itself be reported.
 *
 * Static errors: one read-only object per kind, with no payload and no
 * backtrace. They are what a constructor returns when even the libc allocation
 * fails (the kind survives), and they are the only TornDown and Skipped errors
 * there are: those two kinds are payload-free by design, so making one never
 * allocates. Freeing a static error is a no-op and cloning one returns the
 * same pointer, so callers never need to tell them apart.
 *
 * Which fields each kind has:
 *   size      BufferTooBig, OutOfMemory, PageUpdateForbidden,
 *             PageSizesExhausted, StorageMappingFailed
 *   message   every kind except TornDown and Skipped (optional)
 *   source    every kind except TornDown and Skipped (optional)
 *   errors    Several
 *   failure_id, claimed, chain, root, origin (optional)    Unwritten
 * A constructor given a field the kind lacks drops it (a dropped cause is
 * freed); accessors answer 0 / NULL / "" for fields a kind lacks. */
#ifndef WEFT_CORE_ERROR_H
#define WEFT_CORE_ERROR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <weft/weft.h>

/* Raw frames kept per error. */
#define WEFT__ERROR_MAX_FRAMES 16
/* Deepest nesting of JSON objects and arrays weft_error_from_json accepts. */
#define WEFT__ERROR_JSON_MAX_DEPTH 64

/* true for the kinds of weft_error_kind other than WEFT_OK. */
bool weft__error_kind_is_valid(weft_error_kind kind);
/* true for the kinds that carry a size field. */
bool weft__error_kind_has_size(weft_error_kind kind);
/* true for TornDown and Skipped: no message, no cause, no backtrace. */
bool weft__error_kind_is_payload_free(weft_error_kind kind);
/* true for the kinds weft reports about other failures (TornDown, Skipped,
 * Unwritten, Several): a failpoint or a kernel producing one would make a
 * report contradict itself ("root: Skipped" for a launch that failed). */
bool weft__error_kind_is_derived(weft_error_kind kind);

/* The static error of |kind| (InvalidArgument's for WEFT_OK or a value outside
 * the enum). Never NULL; freeing it is a no-op. */
WEFT_MUST_USE_RESULT weft_status weft__error_static(weft_error_kind kind);
/* true when |st| is a static error (NULL is not). */
bool weft__error_is_static(weft_status st);
/* The payload-free singletons: no allocation, no string, no backtrace. Cheap
 * enough for the provisional error of every write scope. */
WEFT_MUST_USE_RESULT weft_status weft__error_torn_down(void);
WEFT_MUST_USE_RESULT weft_status weft__error_skipped(void);

/* Adds context to |st| without replacing it: the message becomes
 * "<message>; <annotation>" (just the annotation when there was none), and
 * the kind, size, cause chain, backtrace frames, Several's items and
 * Unwritten's fields all stay as they were. Returns the annotated error,
 * which is |st| itself except for a static error (no payload to extend),
 * whose annotated copy is a fresh error of the same kind carrying the
 * annotation and a backtrace from here. Ownership of |st| transfers to the
 * result. NULL |st| returns NULL without formatting or allocating; a NULL
 * |fmt| and the payload-free kinds (TornDown, Skipped) return |st| as it is.
 * If memory runs out the original comes back unchanged. |st| must be a
 * top-level error (not one borrowed from inside another). */
WEFT_MUST_USE_RESULT weft_status weft_error_annotate(weft_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* As weft_error_annotate, also setting the size field to |size| when the
 * kind has one (NULL |fmt|: the size alone): the size a caller acts on is
 * its request, not the page a lower layer asked for. If memory runs out
 * the annotation is lost and the size still set, except on a static error
 * (which needs a copy): that one comes back as it was. */
WEFT_MUST_USE_RESULT weft_status weft_error_annotate_sized(weft_status st, uint64_t size,
                                                           const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Returns the status of |expr| from the enclosing function when it is an
 * error; the one macro (with its _ANNOTATE sibling) that hides a return. */
#define WEFT_RETURN_IF_ERROR(expr)                                                                 \
  do {                                                                                             \
    weft_status weft__return_st = (expr);                                                          \
    if (weft__return_st) return weft__return_st;                                                   \
  } while (0)
/* As WEFT_RETURN_IF_ERROR, annotating the error first (weft_error_annotate's
 * format and arguments follow |expr|); the format is evaluated only on error. */
#define WEFT_RETURN_IF_ERROR_ANNOTATE(expr, ...)                                                   \
  do {                                                                                             \
    weft_status weft__return_st = (expr);                                                          \
    if (weft__return_st) return weft_error_annotate(weft__return_st, __VA_ARGS__);                 \
  } while (0)

/* As weft_error_wrap with a va_list, for modules that wrap it in their own
 * variadic helpers. Ownership of |source| transfers. */
WEFT_MUST_USE_RESULT weft_status weft__error_vmake(weft_error_kind kind, uint64_t size,
                                                   weft_status source, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Every field of an error, for weft__error_assemble. All pointers are owned
 * and allocated with libc malloc: |message|, the |chain| array and each of
 * its strings, the |errors| array, and each error in |errors|, |source| and
 * |root|. Fields the kind lacks are freed and ignored. */
typedef struct weft__error_parts {
  weft_error_kind kind;
  uint64_t size;
  char *message;
  weft_status source;
  weft_status *errors; /* Several; NULL entries are skipped */
  size_t count;
  uint64_t failure_id; /* Unwritten */
  uint32_t claimed;
  char **chain; /* newest hop first; NULL entries are skipped */
  size_t chain_len;
  weft_status root;
  char *origin; /* the launch that failed ("kernel 'NAME' (launch N)"); NULL: none */
} weft__error_parts;

/* Builds an error from |parts|, taking ownership of every part; the caller
 * must not touch them afterwards. Captures a backtrace when |backtrace| is
 * true (a deserialized error has none). Returns NULL only when the error
 * object itself could not be allocated, every part freed by then; an invalid
 * kind also gives NULL. TornDown and Skipped give their singletons. */
WEFT_MUST_USE_RESULT weft_status weft__error_assemble(weft__error_parts *parts, bool backtrace);

/* As weft_error_unwritten, naming the launch that failed (|origin|, copied;
 * NULL when the failure did not come from a launch). */
WEFT_MUST_USE_RESULT weft_status weft__error_unwritten(uint64_t failure_id, uint32_t claimed,
                                                       weft_status root, const char *const *chain,
                                                       size_t chain_len, const char *origin);

/* Where an error sits in its parent. */
#define WEFT__ROLE_ROOT   0u /* Unwritten's root */
#define WEFT__ROLE_SOURCE 1u /* the cause */
#define WEFT__ROLE_ITEM0  2u /* Several's item i is WEFT__ROLE_ITEM0 + i */

typedef enum weft__walk_step {
  WEFT__WALK_DESCEND, /* visit this error's children, then leave it */
  WEFT__WALK_SKIP,    /* neither its children nor its leave */
  WEFT__WALK_STOP,    /* end the walk now */
} weft__walk_step;

/* A depth-first walk over an error tree in constant stack (any depth, any
 * shape): enter each error, then for each of its children in order, before
 * (false: the child is not entered), the child's walk, after (called for
 * absent children too, with NULL), then leave. |parent| is NULL and |role|
 * 0 for the top. Children come root, items, source, or with |source_first|
 * source, items, root. Only |enter| is required. */
typedef struct weft__error_walk_ops {
  bool source_first;
  weft__walk_step (*enter)(void *ctx, weft_status e, weft_status parent, size_t role);
  bool (*before)(void *ctx, weft_status parent, size_t role, weft_status child);
  void (*after)(void *ctx, weft_status parent, size_t role, weft_status child);
  void (*leave)(void *ctx, weft_status e, weft_status parent, size_t role);
} weft__error_walk_ops;
void weft__error_walk(weft_status top, const weft__error_walk_ops *ops, void *ctx);

/* The message as stored: NULL when the error has none (weft_error_message
 * answers "" for both), so that serialization tells them apart. */
const char *weft__error_message_raw(weft_status st);

#endif /* WEFT_CORE_ERROR_H */
