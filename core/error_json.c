/* JSON form of errors: weft_error_to_json and its strict inverse.
 *
 * An error is an object holding its "kind" name and exactly the fields that
 * kind has, in this order: "size", "message" (only when set), "source" (only
 * when set), "errors", "failure_id", "claimed", "chain", "origin" (only when
 * set), "root" (null when absent). Backtraces are not serialized; a parsed error has none.
 *
 * Strings are written byte for byte except for '"', '\\' and control
 * characters, which are escaped; bytes above 0x7f pass through unchanged, so
 * a message that is not valid UTF-8 still round-trips. The parser accepts
 * what the writer produces plus insignificant whitespace, members in any order
 * and every JSON string escape (\uXXXX, surrogate pairs included, becomes
 * UTF-8). It rejects everything else: unknown or duplicate members, a field
 * the kind does not have, a missing one, wrong types, signs, fractions and
 * exponents, integers that overflow their field, \u0000 (C strings cannot
 * hold it), nesting deeper than WEFT__ERROR_JSON_MAX_DEPTH and trailing
 * bytes. The writer refuses (NULL) an error nesting deeper than that limit,
 * so that everything it writes parses back; both sides use bounded stack
 * (the writer walks iteratively, the parser recurses at most that deep). */
#include "core/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writer ------------------------------------------------------------------------------- */

/* A growable libc string; |failed| latches the first allocation failure. */
typedef struct jbuf {
  char *data;
  size_t len, cap;
  bool failed;
} jbuf;

static void jb_put_n(jbuf *b, const char *p, size_t n) {
  if (b->failed) return;
  if (n >= b->cap - b->len || !b->data) {
    size_t cap = b->cap ? b->cap : 128;
    while (cap - b->len <= n) {
      if (cap > SIZE_MAX / 2) {
        b->failed = true;
        return;
      }
      cap *= 2;
    }
    char *d = realloc(b->data, cap);
    if (!d) {
      b->failed = true;
      return;
    }
    b->data = d;
    b->cap = cap;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
  b->data[b->len] = '\0';
}

static void jb_put(jbuf *b, const char *p) {
  jb_put_n(b, p, strlen(p));
}

static void jb_u64(jbuf *b, uint64_t v) {
  char num[24];
  snprintf(num, sizeof(num), "%" PRIu64, v);
  jb_put(b, num);
}

static void jb_string(jbuf *b, const char *s) {
  jb_put(b, "\"");
  const char *run = s;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    const char *esc = NULL;
    char hex[8];
    switch (c) {
    case '"':
      esc = "\\\"";
      break;
    case '\\':
      esc = "\\\\";
      break;
    case '\b':
      esc = "\\b";
      break;
    case '\f':
      esc = "\\f";
      break;
    case '\n':
      esc = "\\n";
      break;
    case '\r':
      esc = "\\r";
      break;
    case '\t':
      esc = "\\t";
      break;
    default:
      if (c < 0x20) {
        snprintf(hex, sizeof(hex), "\\u%04x", (unsigned)c);
        esc = hex;
      }
      break;
    }
    if (esc) {
      jb_put_n(b, run, (size_t)(s - run));
      jb_put(b, esc);
      run = s + 1;
    }
  }
  jb_put_n(b, run, (size_t)(s - run));
  jb_put(b, "\"");
}

/* The writer walks the tree (core/error.c, constant stack) in member order:
 * the error's own fields, its source, its items, then Unwritten's fields and
 * root. It refuses what the parser would: nesting deeper than
 * WEFT__ERROR_JSON_MAX_DEPTH, counted as the parser counts (each object and
 * each array one level). */
typedef struct jwriter {
  jbuf b;
  size_t depth; /* of the object being written */
  bool too_deep;
} jwriter;

static size_t json_step(weft_status parent, size_t role) {
  return !parent ? 0 : role >= WEFT__ROLE_ITEM0 ? 2 : 1; /* items sit inside "errors":[] */
}

static weft__walk_step jw_enter(void *ctx, weft_status st, weft_status parent, size_t role) {
  jwriter *w = ctx;
  jbuf *b = &w->b;
  weft_error_kind kind = weft_error_kind_of(st);
  size_t depth = parent ? w->depth + json_step(parent, role) : 1;
  bool array = kind == WEFT_ERR_SEVERAL || kind == WEFT_ERR_UNWRITTEN;
  if (depth + (array ? 1 : 0) > WEFT__ERROR_JSON_MAX_DEPTH) {
    w->too_deep = true;
    return WEFT__WALK_STOP;
  }
  w->depth = depth;
  jb_put(b, "{\"kind\":");
  jb_string(b, weft_error_kind_name(kind));
  if (weft__error_kind_has_size(kind)) {
    jb_put(b, ",\"size\":");
    jb_u64(b, weft_error_size(st));
  }
  const char *message = weft__error_message_raw(st);
  if (message) {
    jb_put(b, ",\"message\":");
    jb_string(b, message);
  }
  return WEFT__WALK_DESCEND;
}

static bool jw_before(void *ctx, weft_status st, size_t role, weft_status child) {
  jbuf *b = &((jwriter *)ctx)->b;
  weft_error_kind kind = weft_error_kind_of(st);
  if (role == WEFT__ROLE_SOURCE) {
    if (child) jb_put(b, ",\"source\":");
  } else if (role >= WEFT__ROLE_ITEM0) {
    jb_put(b, role == WEFT__ROLE_ITEM0 ? ",\"errors\":[" : ",");
  } else if (kind == WEFT_ERR_SEVERAL) { /* the root slot comes last: close the items */
    jb_put(b, weft_error_count(st) == 0 ? ",\"errors\":[]" : "]");
  } else if (kind == WEFT_ERR_UNWRITTEN) {
    jb_put(b, ",\"failure_id\":");
    jb_u64(b, weft_error_failure_id(st));
    jb_put(b, ",\"claimed\":");
    jb_u64(b, weft_error_claimed(st));
    jb_put(b, ",\"chain\":[");
    for (size_t i = 0; i < weft_error_chain_length(st); i++) {
      if (i) jb_put(b, ",");
      jb_string(b, weft_error_chain_at(st, i));
    }
    jb_put(b, "]");
    if (weft_error_origin(st)) {
      jb_put(b, ",\"origin\":");
      jb_string(b, weft_error_origin(st));
    }
    jb_put(b, child ? ",\"root\":" : ",\"root\":null");
  }
  return true;
}

static void jw_leave(void *ctx, weft_status st, weft_status parent, size_t role) {
  jwriter *w = ctx;
  (void)st;
  jb_put(&w->b, "}");
  w->depth -= json_step(parent, role);
}

char *weft_error_to_json(weft_status st) {
  static const weft__error_walk_ops ops = {
      .source_first = true, .enter = jw_enter, .before = jw_before, .leave = jw_leave};
  jwriter w = {0};
  if (st)
    weft__error_walk(st, &ops, &w);
  else
    jb_put(&w.b, "null");
  if (w.b.failed || w.too_deep) {
    free(w.b.data);
    return NULL;
  }
  return w.b.data;
}

/* ---- parser ------------------------------------------------------------------------------- */

typedef struct parser {
  const char *s;
  size_t pos;
  int depth;
  bool oom;
  const char *what; /* the first failure: a static description */
  size_t where;     /* and its offset */
} parser;

/* Records the first failure only: later ones are consequences of it. */
static bool fail(parser *p, const char *what) {
  if (!p->what) {
    p->what = what;
    p->where = p->pos;
  }
  return false;
}

static bool fail_oom(parser *p) {
  p->oom = true;
  return fail(p, "out of memory");
}

static void skip_ws(parser *p) {
  while (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' ||
         p->s[p->pos] == '\r')
    p->pos++;
}

static bool expect(parser *p, char c, const char *what) {
  skip_ws(p);
  if (p->s[p->pos] != c) return fail(p, what);
  p->pos++;
  return true;
}

static bool enter(parser *p) {
  if (p->depth >= WEFT__ERROR_JSON_MAX_DEPTH)
    return fail(p, "nesting deeper than WEFT__ERROR_JSON_MAX_DEPTH (64)");
  p->depth++;
  return true;
}

static bool literal(parser *p, const char *word) {
  size_t n = strlen(word);
  if (strncmp(p->s + p->pos, word, n) != 0) return false;
  p->pos += n;
  return true;
}

static int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static bool hex4(parser *p, unsigned *out) {
  unsigned v = 0;
  for (int i = 0; i < 4; i++) {
    int d = hex_digit(p->s[p->pos]);
    if (d < 0) return fail(p, "\\u must be followed by four hex digits");
    v = v << 4 | (unsigned)d;
    p->pos++;
  }
  *out = v;
  return true;
}

static void put_utf8(jbuf *b, unsigned cp) {
  char u[4];
  size_t n;
  if (cp < 0x80) {
    u[0] = (char)cp;
    n = 1;
  } else if (cp < 0x800) {
    u[0] = (char)(0xc0 | cp >> 6);
    u[1] = (char)(0x80 | (cp & 0x3f));
    n = 2;
  } else if (cp < 0x10000) {
    u[0] = (char)(0xe0 | cp >> 12);
    u[1] = (char)(0x80 | (cp >> 6 & 0x3f));
    u[2] = (char)(0x80 | (cp & 0x3f));
    n = 3;
  } else {
    u[0] = (char)(0xf0 | cp >> 18);
    u[1] = (char)(0x80 | (cp >> 12 & 0x3f));
    u[2] = (char)(0x80 | (cp >> 6 & 0x3f));
    u[3] = (char)(0x80 | (cp & 0x3f));
    n = 4;
  }
  jb_put_n(b, u, n);
}

/* A JSON string into a fresh libc string (*out, owned by the caller). */
static bool parse_string(parser *p, char **out) {
  skip_ws(p);
  if (p->s[p->pos] != '"') return fail(p, "expected a string");
  p->pos++;
  jbuf b = {0};
  jb_put_n(&b, "", 0); /* an empty string is still a string */
  for (;;) {
    unsigned char c = (unsigned char)p->s[p->pos];
    if (c == '"') {
      p->pos++;
      break;
    }
    if (c == '\0') {
      free(b.data);
      return fail(p, "unterminated string");
    }
    if (c < 0x20) {
      free(b.data);
      return fail(p, "control character in a string (it must be escaped)");
    }
    if (c != '\\') {
      size_t run = p->pos;
      while ((unsigned char)p->s[p->pos] >= 0x20 && p->s[p->pos] != '"' && p->s[p->pos] != '\\')
        p->pos++;
      jb_put_n(&b, p->s + run, p->pos - run);
      continue;
    }
    p->pos++;
    char e = p->s[p->pos++];
    switch (e) {
    case '"':
      jb_put_n(&b, "\"", 1);
      break;
    case '\\':
      jb_put_n(&b, "\\", 1);
      break;
    case '/':
      jb_put_n(&b, "/", 1);
      break;
    case 'b':
      jb_put_n(&b, "\b", 1);
      break;
    case 'f':
      jb_put_n(&b, "\f", 1);
      break;
    case 'n':
      jb_put_n(&b, "\n", 1);
      break;
    case 'r':
      jb_put_n(&b, "\r", 1);
      break;
    case 't':
      jb_put_n(&b, "\t", 1);
      break;
    case 'u': {
      unsigned cp, lo;
      if (!hex4(p, &cp)) {
        free(b.data);
        return false;
      }
      if (cp >= 0xdc00 && cp <= 0xdfff) {
        free(b.data);
        return fail(p, "unpaired low surrogate");
      }
      if (cp >= 0xd800 && cp <= 0xdbff) {
        if (p->s[p->pos] != '\\' || p->s[p->pos + 1] != 'u') {
          free(b.data);
          return fail(p, "high surrogate without its low surrogate");
        }
        p->pos += 2;
        if (!hex4(p, &lo)) {
          free(b.data);
          return false;
        }
        if (lo < 0xdc00 || lo > 0xdfff) {
          free(b.data);
          return fail(p, "high surrogate without its low surrogate");
        }
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      if (cp == 0) {
        free(b.data);
        return fail(p, "\\u0000: strings cannot hold NUL");
      }
      put_utf8(&b, cp);
      break;
    }
    default:
      p->pos--;
      free(b.data);
      return fail(p, "invalid escape in a string");
    }
  }
  if (b.failed) {
    free(b.data);
    return fail_oom(p);
  }
  *out = b.data;
  return true;
}

/* An unsigned integer no larger than |max|: digits only, no leading zero. */
static bool parse_uint(parser *p, uint64_t max, uint64_t *out) {
  skip_ws(p);
  const char *s = p->s;
  if (s[p->pos] < '0' || s[p->pos] > '9') return fail(p, "expected an unsigned integer");
  if (s[p->pos] == '0' && s[p->pos + 1] >= '0' && s[p->pos + 1] <= '9')
    return fail(p, "leading zero in an integer");
  uint64_t v = 0;
  while (s[p->pos] >= '0' && s[p->pos] <= '9') {
    unsigned d = (unsigned)(s[p->pos] - '0');
    if (v > (max - d) / 10) return fail(p, "integer too large for its field");
    v = v * 10 + d;
    p->pos++;
  }
  if (s[p->pos] == '.' || s[p->pos] == 'e' || s[p->pos] == 'E')
    return fail(p, "expected an unsigned integer, not a fraction or exponent");
  *out = v;
  return true;
}

static bool parse_error(parser *p, weft_status *out);

/* An error or null. */
static bool parse_error_or_null(parser *p, weft_status *out) {
  skip_ws(p);
  if (literal(p, "null")) {
    *out = NULL;
    return true;
  }
  return parse_error(p, out);
}

/* Grows |*arr| (elements of |size| bytes) so that one more fits after |len|. */
static bool grow(parser *p, void **arr, size_t size, size_t len, size_t *cap) {
  if (len < *cap) return true;
  size_t n = *cap ? *cap * 2 : 4;
  void *a = realloc(*arr, n * size);
  if (!a) return fail_oom(p);
  *arr = a;
  *cap = n;
  return true;
}

/* The "errors" array: a JSON array of error objects. */
static bool parse_errors(parser *p, weft__error_parts *parts) {
  if (!expect(p, '[', "\"errors\" must be an array") || !enter(p)) return false;
  size_t cap = 0;
  skip_ws(p);
  if (p->s[p->pos] == ']') {
    p->pos++;
  } else {
    for (;;) {
      weft_status e = NULL;
      if (!parse_error(p, &e)) return false;
      void *arr = parts->errors;
      bool room = grow(p, &arr, sizeof(*parts->errors), parts->count, &cap);
      parts->errors = arr;
      if (!room) {
        weft_error_free(e);
        return false;
      }
      parts->errors[parts->count++] = e;
      skip_ws(p);
      if (p->s[p->pos] == ']') {
        p->pos++;
        break;
      }
      if (!expect(p, ',', "expected ',' or ']' in \"errors\"")) return false;
    }
  }
  p->depth--;
  return true;
}

/* The "chain" array: a JSON array of strings. */
static bool parse_chain(parser *p, weft__error_parts *parts) {
  if (!expect(p, '[', "\"chain\" must be an array") || !enter(p)) return false;
  size_t cap = 0;
  skip_ws(p);
  if (p->s[p->pos] == ']') {
    p->pos++;
  } else {
    for (;;) {
      char *hop = NULL;
      if (!parse_string(p, &hop)) return false;
      void *arr = parts->chain;
      bool room = grow(p, &arr, sizeof(*parts->chain), parts->chain_len, &cap);
      parts->chain = arr;
      if (!room) {
        free(hop);
        return false;
      }
      parts->chain[parts->chain_len++] = hop;
      skip_ws(p);
      if (p->s[p->pos] == ']') {
        p->pos++;
        break;
      }
      if (!expect(p, ',', "expected ',' or ']' in \"chain\"")) return false;
    }
  }
  p->depth--;
  return true;
}

enum {
  F_KIND = 1u << 0,
  F_SIZE = 1u << 1,
  F_MESSAGE = 1u << 2,
  F_SOURCE = 1u << 3,
  F_ERRORS = 1u << 4,
  F_FAILURE_ID = 1u << 5,
  F_CLAIMED = 1u << 6,
  F_CHAIN = 1u << 7,
  F_ROOT = 1u << 8,
  F_ORIGIN = 1u << 9,
};

static const struct field {
  const char *name;
  unsigned bit;
} fields[] = {
    {"kind", F_KIND},       {"size", F_SIZE},     {"message", F_MESSAGE},
    {"source", F_SOURCE},   {"errors", F_ERRORS}, {"failure_id", F_FAILURE_ID},
    {"claimed", F_CLAIMED}, {"chain", F_CHAIN},   {"root", F_ROOT},
    {"origin", F_ORIGIN},
};

/* The members |kind| must have and those it may have. */
static void kind_fields(weft_error_kind kind, unsigned *required, unsigned *allowed) {
  *required = F_KIND;
  *allowed = F_KIND;
  if (weft__error_kind_is_payload_free(kind)) return;
  *allowed |= F_MESSAGE | F_SOURCE;
  if (weft__error_kind_has_size(kind)) *required |= F_SIZE;
  if (kind == WEFT_ERR_SEVERAL) *required |= F_ERRORS;
  if (kind == WEFT_ERR_UNWRITTEN) {
    *required |= F_FAILURE_ID | F_CLAIMED | F_CHAIN | F_ROOT;
    *allowed |= F_ORIGIN;
  }
  *allowed |= *required;
}

static bool parse_member(parser *p, unsigned bit, weft__error_parts *parts) {
  char *name = NULL;
  uint64_t v = 0;
  switch (bit) {
  case F_KIND: {
    skip_ws(p);
    size_t at = p->pos;
    if (!parse_string(p, &name)) return false;
    bool known = weft_error_kind_from_name(name, &parts->kind) && parts->kind != WEFT_OK;
    free(name);
    if (!known) {
      p->pos = at;
      return fail(p, "\"kind\" names no error kind");
    }
    return true;
  }
  case F_SIZE:
    return parse_uint(p, UINT64_MAX, &parts->size);
  case F_MESSAGE:
    return parse_string(p, &parts->message);
  case F_SOURCE:
    return parse_error_or_null(p, &parts->source);
  case F_ERRORS:
    return parse_errors(p, parts);
  case F_FAILURE_ID:
    return parse_uint(p, UINT64_MAX, &parts->failure_id);
  case F_CLAIMED:
    if (!parse_uint(p, UINT32_MAX, &v)) return false;
    parts->claimed = (uint32_t)v;
    return true;
  case F_CHAIN:
    return parse_chain(p, parts);
  case F_ROOT:
    return parse_error_or_null(p, &parts->root);
  case F_ORIGIN:
    return parse_string(p, &parts->origin);
  default:
    return fail(p, "unknown member");
  }
}

/* Releases what a partly parsed object holds, through the one function that
 * knows how to free parts: assembling them as a kind-less error (which gives
 * NULL; freeing it keeps the must-use contract honest). */
static void drop_parts(weft__error_parts *parts) {
  parts->kind = WEFT_OK;
  weft_error_free(weft__error_assemble(parts, false));
}

static bool parse_error(parser *p, weft_status *out) {
  *out = NULL;
  if (!expect(p, '{', "expected an error object or null") || !enter(p)) return false;
  weft__error_parts parts = {.kind = WEFT_OK};
  unsigned seen = 0;
  size_t open = p->pos - 1;
  skip_ws(p);
  if (p->s[p->pos] == '}') {
    p->pos++;
  } else {
    for (;;) {
      char *key = NULL;
      skip_ws(p);
      size_t key_at = p->pos;
      if (p->s[p->pos] != '"') {
        drop_parts(&parts);
        return fail(p, "expected a member name");
      }
      if (!parse_string(p, &key)) {
        drop_parts(&parts);
        return false;
      }
      unsigned bit = 0;
      for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (strcmp(key, fields[i].name) == 0) bit = fields[i].bit;
      free(key);
      if (bit == 0 || (seen & bit)) {
        p->pos = key_at;
        drop_parts(&parts);
        return fail(p, bit ? "duplicate member" : "unknown member");
      }
      seen |= bit;
      if (!expect(p, ':', "expected ':' after a member name") || !parse_member(p, bit, &parts)) {
        drop_parts(&parts);
        return false;
      }
      skip_ws(p);
      if (p->s[p->pos] == '}') {
        p->pos++;
        break;
      }
      if (!expect(p, ',', "expected ',' or '}' in an error object")) {
        drop_parts(&parts);
        return false;
      }
    }
  }
  p->depth--;

  size_t end = p->pos;
  p->pos = open; /* report shape problems at the object's opening brace */
  unsigned required, allowed;
  if (!(seen & F_KIND)) {
    drop_parts(&parts);
    return fail(p, "error object without \"kind\"");
  }
  kind_fields(parts.kind, &required, &allowed);
  if (seen & ~allowed) {
    drop_parts(&parts);
    return fail(p, "member not allowed for this kind");
  }
  if (required & ~seen) {
    drop_parts(&parts);
    return fail(p, "member missing for this kind");
  }
  if (parts.kind == WEFT_ERR_SEVERAL)
    for (size_t i = 0; i < parts.count; i++)
      if (!parts.errors[i]) {
        drop_parts(&parts);
        return fail(p, "null in \"errors\"");
      }
  p->pos = end;
  *out = weft__error_assemble(&parts, false);
  if (!*out) return fail_oom(p);
  return true;
}

weft_status weft_error_from_json(const char *json, weft_status *out) {
  if (out) *out = NULL;
  if (!out) return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "weft_error_from_json: out is NULL");
  if (!json)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "weft_error_from_json: json is NULL");
  parser p = {.s = json};
  weft_status st = NULL;
  bool ok = parse_error_or_null(&p, &st);
  if (ok) {
    skip_ws(&p);
    if (p.s[p.pos] != '\0') ok = fail(&p, "trailing bytes after the document");
  }
  if (!ok) {
    weft_error_free(st);
    if (p.oom)
      return weft_error_make(WEFT_ERR_OUT_OF_MEMORY,
                             "weft_error_from_json: out of memory at offset %zu", p.where);
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "weft_error_from_json: at offset %zu: %s",
                           p.where, p.what ? p.what : "malformed document");
  }
  *out = st;
  return NULL;
}
