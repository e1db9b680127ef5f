/* A small streaming JSON writer on libc memory: the text weft hands out
 * (weft_memory_snapshot, the OOM observer) is freed with weft_free, which is
 * libc's free.
 *
 *   weft_json j;
 *   weft_json_init(&j);
 *   weft_json_begin_object(&j);
 *   weft_json_key(&j, "bytes"); weft_json_u64(&j, 42);
 *   weft_json_end_object(&j);
 *   char *text = weft_json_finish(&j);  // NULL: memory ran out (nothing leaks)
 *
 * Commas are placed by the writer. Strings are escaped as RFC 8259 asks
 * ('"', '\\' and control characters); other bytes pass through. The first
 * allocation failure latches: later calls do nothing and finish returns
 * NULL. Nesting is limited to WEFT_JSON_MAX_DEPTH (deeper: failure). Not
 * thread-safe: one writer, one thread. */
#ifndef WEFT_CORE_JSON_WRITER_H
#define WEFT_CORE_JSON_WRITER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WEFT_JSON_MAX_DEPTH 63

typedef struct weft_json {
  char *data;
  size_t len, cap;
  bool failed;
  bool after_key;  /* a key was written: its value takes no comma */
  uint32_t depth;  /* open objects and arrays */
  uint64_t filled; /* bit d: the container at depth d already holds an item */
} weft_json;

void weft_json_init(weft_json *j);
void weft_json_begin_object(weft_json *j);
void weft_json_end_object(weft_json *j);
void weft_json_begin_array(weft_json *j);
void weft_json_end_array(weft_json *j);
/* A member's key; the next call writes its value. */
void weft_json_key(weft_json *j, const char *key);
void weft_json_u64(weft_json *j, uint64_t v);
void weft_json_bool(weft_json *j, bool v);
void weft_json_null(weft_json *j);
/* |s| NULL: null. */
void weft_json_string(weft_json *j, const char *s);
/* Shorthands: a key and its value. */
void weft_json_kv_u64(weft_json *j, const char *key, uint64_t v);
void weft_json_kv_bool(weft_json *j, const char *key, bool v);
void weft_json_kv_string(weft_json *j, const char *key, const char *s);
/* The text (NUL-terminated, libc memory, the caller frees it), or NULL when
 * an allocation failed or containers are left open; either way |j| is
 * emptied. */
char *weft_json_finish(weft_json *j);
/* Frees what |j| holds without handing it out. */
void weft_json_discard(weft_json *j);

#endif /* WEFT_CORE_JSON_WRITER_H */
