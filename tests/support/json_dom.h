/* A strict little JSON parser for tests: the whole text into a tree of
 * nodes (libc memory), or NULL when it is not one JSON value (RFC 8259;
 * numbers kept as doubles and, when they are unsigned integers, exactly as
 * uint64_t). Header-only; one file per test binary includes it.
 *
 *   jnode *root = jparse(text);            // NULL: malformed
 *   uint64_t n = jget(root, "usage")->...;  // jget: a member, or NULL
 *   jfree(root); */
#ifndef WEFT_TESTS_JSON_DOM_H
#define WEFT_TESTS_JSON_DOM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jnode {
  jtype type;
  bool b;
  double num;
  uint64_t u; /* J_NUM: the value when it is an unsigned integer */
  bool is_uint;
  char *str;            /* J_STR */
  char **keys;          /* J_OBJ */
  struct jnode **items; /* J_ARR, J_OBJ: n children */
  size_t n;
} jnode;

typedef struct jparser {
  const char *p;
  int depth;
} jparser;

static inline void jfree(jnode *n) {
  if (!n) return;
  for (size_t i = 0; i < n->n; i++) {
    jfree(n->items[i]);
    if (n->keys) free(n->keys[i]);
  }
  free(n->items);
  free(n->keys);
  free(n->str);
  free(n);
}

static inline void jws(jparser *q) {
  while (*q->p == ' ' || *q->p == '\t' || *q->p == '\n' || *q->p == '\r') q->p++;
}

static inline jnode *jvalue(jparser *q);

static inline char *jstring(jparser *q) {
  if (*q->p != '"') return NULL;
  q->p++;
  size_t cap = 16, len = 0;
  char *s = malloc(cap);
  while (s && *q->p != '"') {
    unsigned char c = (unsigned char)*q->p;
    if (c < 0x20) break; /* unescaped control character or end of text */
    char out = (char)c;
    if (c == '\\') {
      q->p++;
      switch (*q->p) {
      case '"':
        out = '"';
        break;
      case '\\':
        out = '\\';
        break;
      case '/':
        out = '/';
        break;
      case 'b':
        out = '\b';
        break;
      case 'f':
        out = '\f';
        break;
      case 'n':
        out = '\n';
        break;
      case 'r':
        out = '\r';
        break;
      case 't':
        out = '\t';
        break;
      case 'u': {
        unsigned v = 0;
        for (int i = 1; i <= 4; i++) {
          char h = q->p[i];
          v = v * 16 + (unsigned)(h >= '0' && h <= '9'   ? h - '0'
                                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                                         : 99);
          if (v > 0xffff) goto bad;
        }
        q->p += 4;
        out = v < 0x80 ? (char)v : '?'; /* tests only look at ASCII */
        break;
      }
      default:
        goto bad;
      }
    }
    if (len + 2 > cap) {
      char *t = realloc(s, cap *= 2);
      if (!t) goto bad;
      s = t;
    }
    s[len++] = out;
    q->p++;
  }
  if (!s || *q->p != '"') goto bad;
  q->p++;
  s[len] = '\0';
  return s;
bad:
  free(s);
  return NULL;
}

static inline bool jpush(jnode *n, jnode *child, char *key) {
  jnode **items = realloc(n->items, sizeof(*items) * (n->n + 1));
  if (!items) return false;
  n->items = items;
  if (n->type == J_OBJ) {
    char **keys = realloc(n->keys, sizeof(*keys) * (n->n + 1));
    if (!keys) return false;
    n->keys = keys;
    n->keys[n->n] = key;
  }
  n->items[n->n++] = child;
  return true;
}

static inline jnode *jcontainer(jparser *q, jtype type) {
  char close = type == J_OBJ ? '}' : ']';
  jnode *n = calloc(1, sizeof(*n));
  if (!n || ++q->depth > 200) goto bad;
  n->type = type;
  q->p++;
  jws(q);
  if (*q->p == close) {
    q->p++;
    q->depth--;
    return n;
  }
  for (;;) {
    char *key = NULL;
    jws(q);
    if (type == J_OBJ) {
      if (!(key = jstring(q))) goto bad;
      jws(q);
      if (*q->p != ':') {
        free(key);
        goto bad;
      }
      q->p++;
    }
    jnode *child = jvalue(q);
    if (!child || !jpush(n, child, key)) {
      jfree(child);
      free(key);
      goto bad;
    }
    jws(q);
    if (*q->p == ',') {
      q->p++;
      continue;
    }
    if (*q->p != close) goto bad;
    q->p++;
    q->depth--;
    return n;
  }
bad:
  jfree(n);
  return NULL;
}

static inline jnode *jvalue(jparser *q) {
  jws(q);
  char c = *q->p;
  if (c == '{') return jcontainer(q, J_OBJ);
  if (c == '[') return jcontainer(q, J_ARR);
  jnode *n = calloc(1, sizeof(*n));
  if (!n) return NULL;
  if (c == '"') {
    n->type = J_STR;
    if (!(n->str = jstring(q))) goto bad;
    return n;
  }
  static const struct {
    const char *word;
    jtype type;
    bool b;
  } words[] = {{"null", J_NULL, false}, {"true", J_BOOL, true}, {"false", J_BOOL, false}};
  for (size_t i = 0; i < 3; i++)
    if (!strncmp(q->p, words[i].word, strlen(words[i].word))) {
      q->p += strlen(words[i].word);
      n->type = words[i].type;
      n->b = words[i].b;
      return n;
    }
  /* A number, checked against the grammar before strtod reads it. */
  const char *s = q->p;
  if (*s == '-') s++;
  if (*s == '0')
    s++;
  else if (*s >= '1' && *s <= '9')
    while (*s >= '0' && *s <= '9') s++;
  else
    goto bad;
  bool integral = *q->p != '-';
  if (*s == '.') {
    integral = false;
    if (!(*++s >= '0' && *s <= '9')) goto bad;
    while (*s >= '0' && *s <= '9') s++;
  }
  if (*s == 'e' || *s == 'E') {
    integral = false;
    s++;
    if (*s == '+' || *s == '-') s++;
    if (!(*s >= '0' && *s <= '9')) goto bad;
    while (*s >= '0' && *s <= '9') s++;
  }
  n->type = J_NUM;
  n->num = strtod(q->p, NULL);
  if (integral) {
    n->is_uint = true;
    n->u = strtoull(q->p, NULL, 10);
  }
  q->p = s;
  return n;
bad:
  free(n);
  return NULL;
}

static inline jnode *jparse(const char *text) {
  if (!text) return NULL;
  jparser q = {text, 0};
  jnode *n = jvalue(&q);
  jws(&q);
  if (n && *q.p) { /* trailing bytes */
    jfree(n);
    return NULL;
  }
  return n;
}

/* The member |key| of object |n|, or NULL. */
static inline jnode *jget(const jnode *n, const char *key) {
  if (!n || n->type != J_OBJ) return NULL;
  for (size_t i = 0; i < n->n; i++)
    if (!strcmp(n->keys[i], key)) return n->items[i];
  return NULL;
}

/* The unsigned integer member |key| of |n|, or UINT64_MAX when absent or not one. */
static inline uint64_t jget_u64(const jnode *n, const char *key) {
  const jnode *m = jget(n, key);
  return m && m->type == J_NUM && m->is_uint ? m->u : UINT64_MAX;
}

/* The string member |key| of |n|, or NULL. */
static inline const char *jget_str(const jnode *n, const char *key) {
  const jnode *m = jget(n, key);
  return m && m->type == J_STR ? m->str : NULL;
}

#endif /* WEFT_TESTS_JSON_DOM_H */
