/* The JSON writer (core/json_writer.h). */
#include "core/json_writer.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void weft_json_init(weft_json *j) {
  memset(j, 0, sizeof(*j));
}

static void put_n(weft_json *j, const char *p, size_t n) {
  if (j->failed) return;
  if (!j->data || n >= j->cap - j->len) {
    size_t cap = j->cap ? j->cap : 1024;
    while (cap - j->len <= n) {
      if (cap > SIZE_MAX / 2) {
        j->failed = true;
        return;
      }
      cap *= 2;
    }
    char *d = realloc(j->data, cap);
    if (!d) {
      j->failed = true;
      return;
    }
    j->data = d;
    j->cap = cap;
  }
  memcpy(j->data + j->len, p, n);
  j->len += n;
  j->data[j->len] = '\0';
}

static void put(weft_json *j, const char *s) {
  put_n(j, s, strlen(s));
}

/* Before an item (a value, or a member's key): the comma it needs. */
static void item(weft_json *j) {
  if (j->after_key) {
    j->after_key = false;
    return;
  }
  uint64_t bit = UINT64_C(1) << j->depth;
  if (j->filled & bit) put(j, ",");
  j->filled |= bit;
}

static void open_(weft_json *j, const char *c) {
  item(j);
  if (j->depth == WEFT_JSON_MAX_DEPTH) {
    j->failed = true;
    return;
  }
  put(j, c);
  j->depth++;
  j->filled &= ~(UINT64_C(1) << j->depth);
}

static void close_(weft_json *j, const char *c) {
  if (j->depth == 0) {
    j->failed = true;
    return;
  }
  j->depth--;
  put(j, c);
}

void weft_json_begin_object(weft_json *j) {
  open_(j, "{");
}
void weft_json_end_object(weft_json *j) {
  close_(j, "}");
}
void weft_json_begin_array(weft_json *j) {
  open_(j, "[");
}
void weft_json_end_array(weft_json *j) {
  close_(j, "]");
}

static void string_body(weft_json *j, const char *s) {
  put(j, "\"");
  const char *run = s;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c != '"' && c != '\\' && c >= 0x20) continue;
    put_n(j, run, (size_t)(s - run));
    char esc[8];
    if (c == '"' || c == '\\')
      snprintf(esc, sizeof(esc), "\\%c", c);
    else if (c == '\n')
      snprintf(esc, sizeof(esc), "\\n");
    else if (c == '\t')
      snprintf(esc, sizeof(esc), "\\t");
    else
      snprintf(esc, sizeof(esc), "\\u%04x", c);
    put(j, esc);
    run = s + 1;
  }
  put_n(j, run, (size_t)(s - run));
  put(j, "\"");
}

void weft_json_key(weft_json *j, const char *key) {
  item(j);
  string_body(j, key);
  put(j, ":");
  j->after_key = true;
}

void weft_json_u64(weft_json *j, uint64_t v) {
  char num[24];
  snprintf(num, sizeof(num), "%" PRIu64, v);
  item(j);
  put(j, num);
}

void weft_json_bool(weft_json *j, bool v) {
  item(j);
  put(j, v ? "true" : "false");
}

void weft_json_null(weft_json *j) {
  item(j);
  put(j, "null");
}

void weft_json_string(weft_json *j, const char *s) {
  if (!s) {
    weft_json_null(j);
    return;
  }
  item(j);
  string_body(j, s);
}

void weft_json_kv_u64(weft_json *j, const char *key, uint64_t v) {
  weft_json_key(j, key);
  weft_json_u64(j, v);
}

void weft_json_kv_bool(weft_json *j, const char *key, bool v) {
  weft_json_key(j, key);
  weft_json_bool(j, v);
}

void weft_json_kv_string(weft_json *j, const char *key, const char *s) {
  weft_json_key(j, key);
  weft_json_string(j, s);
}

char *weft_json_finish(weft_json *j) {
  char *out = j->failed || j->depth || !j->data ? NULL : j->data;
  if (!out) free(j->data);
  weft_json_init(j);
  return out;
}

void weft_json_discard(weft_json *j) {
  free(j->data);
  weft_json_init(j);
}
