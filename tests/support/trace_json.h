/* A small JSON reader and a Chrome trace-event format check, for the trace
 * tests (tests/device/test_trace.c, tests/stress/stress_trace.c). No
 * dependency on Criterion: the checks return a message (NULL: it passed).
 *
 *   jv *root = jv_parse_file(path, &err);    // NULL: err says where it broke
 *   const char *why = trace_check(root);      // the format's rules
 *   jv_free(root);
 */
#ifndef WEFT_TESTS_TRACE_JSON_H
#define WEFT_TESTS_TRACE_JSON_H

#include <ctype.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ } jv_type;

typedef struct jv {
  jv_type t;
  double num;
  bool b;
  char *str;        /* JV_STR */
  struct jv **kids; /* JV_ARR, JV_OBJ (values) */
  char **keys;      /* JV_OBJ */
  size_t n, cap;
} jv;

typedef struct jp {
  const char *s, *end;
  const char *err;
} jp;

static void jv_free(jv *v) {
  if (!v) return;
  for (size_t i = 0; i < v->n; i++) {
    jv_free(v->kids[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->kids);
  free(v->keys);
  free(v->str);
  free(v);
}

static void jp_ws(jp *p) {
  while (p->s < p->end && isspace((unsigned char)*p->s)) p->s++;
}

static jv *jp_value(jp *p, int depth);

static char *jp_string(jp *p) {
  if (p->s >= p->end || *p->s != '"') {
    p->err = "a string expected";
    return NULL;
  }
  p->s++;
  size_t cap = 16, n = 0;
  char *out = malloc(cap);
  while (p->s < p->end && *p->s != '"') {
    char c = *p->s++;
    if ((unsigned char)c < 0x20) {
      p->err = "a control character in a string";
      free(out);
      return NULL;
    }
    if (c == '\\') {
      if (p->s >= p->end) break;
      char e = *p->s++;
      switch (e) {
      case '"':
      case '\\':
      case '/':
        c = e;
        break;
      case 'b':
        c = '\b';
        break;
      case 'f':
        c = '\f';
        break;
      case 'n':
        c = '\n';
        break;
      case 'r':
        c = '\r';
        break;
      case 't':
        c = '\t';
        break;
      case 'u': {
        if (p->end - p->s < 4) {
          p->err = "a short \\u escape";
          free(out);
          return NULL;
        }
        for (int i = 0; i < 4; i++)
          if (!isxdigit((unsigned char)p->s[i])) {
            p->err = "a bad \\u escape";
            free(out);
            return NULL;
          }
        c = '?'; /* the checks never need the code point */
        p->s += 4;
        break;
      }
      default:
        p->err = "a bad escape";
        free(out);
        return NULL;
      }
    }
    if (n + 2 > cap) out = realloc(out, cap *= 2);
    out[n++] = c;
  }
  if (p->s >= p->end) {
    p->err = "an unterminated string";
    free(out);
    return NULL;
  }
  p->s++;
  out[n] = 0;
  return out;
}

static void jv_push(jv *v, jv *kid, char *key) {
  if (v->n == v->cap) {
    v->cap = v->cap ? 2 * v->cap : 8;
    v->kids = realloc(v->kids, v->cap * sizeof(*v->kids));
    if (v->t == JV_OBJ) v->keys = realloc(v->keys, v->cap * sizeof(*v->keys));
  }
  v->kids[v->n] = kid;
  if (v->t == JV_OBJ) v->keys[v->n] = key;
  v->n++;
}

static jv *jp_value(jp *p, int depth) {
  jp_ws(p);
  if (p->s >= p->end) {
    p->err = "a value expected";
    return NULL;
  }
  if (depth > 64) {
    p->err = "nested too deep";
    return NULL;
  }
  jv *v = calloc(1, sizeof(*v));
  char c = *p->s;
  if (c == '{' || c == '[') {
    v->t = c == '{' ? JV_OBJ : JV_ARR;
    char close = c == '{' ? '}' : ']';
    p->s++;
    jp_ws(p);
    if (p->s < p->end && *p->s == close) {
      p->s++;
      return v;
    }
    for (;;) {
      char *key = NULL;
      if (v->t == JV_OBJ) {
        jp_ws(p);
        if (!(key = jp_string(p))) break;
        jp_ws(p);
        if (p->s >= p->end || *p->s != ':') {
          p->err = "':' expected";
          free(key);
          break;
        }
        p->s++;
      }
      jv *kid = jp_value(p, depth + 1);
      if (!kid) {
        free(key);
        break;
      }
      jv_push(v, kid, key);
      jp_ws(p);
      if (p->s < p->end && *p->s == ',') {
        p->s++;
        continue;
      }
      if (p->s < p->end && *p->s == close) {
        p->s++;
        return v;
      }
      p->err = "',' or a closing bracket expected";
      break;
    }
    jv_free(v);
    return NULL;
  }
  if (c == '"') {
    v->t = JV_STR;
    if (!(v->str = jp_string(p))) {
      free(v);
      return NULL;
    }
    return v;
  }
  if (!strncmp(p->s, "true", 4) || !strncmp(p->s, "false", 5)) {
    v->t = JV_BOOL;
    v->b = *p->s == 't';
    p->s += v->b ? 4 : 5;
    return v;
  }
  if (!strncmp(p->s, "null", 4)) {
    p->s += 4;
    return v;
  }
  char *e;
  v->t = JV_NUM;
  v->num = strtod(p->s, &e);
  if (e == p->s || !(c == '-' || isdigit((unsigned char)c))) {
    p->err = "a value expected";
    free(v);
    return NULL;
  }
  p->s = e;
  return v;
}

/* The document in |text|, or NULL (|*err|: what broke). */
static jv *jv_parse(const char *text, size_t len, const char **err) {
  jp p = {text, text + len, NULL};
  jv *v = jp_value(&p, 0);
  jp_ws(&p);
  if (v && p.s != p.end) {
    p.err = "text after the document";
    jv_free(v);
    v = NULL;
  }
  if (err) *err = p.err;
  return v;
}

static jv *jv_parse_file(const char *path, const char **err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    *err = "the file cannot be opened";
    return NULL;
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  size_t got = fread(buf, 1, (size_t)n, f);
  fclose(f);
  jv *v = jv_parse(buf, got, err);
  free(buf);
  return v;
}

static const jv *jv_get(const jv *o, const char *key) {
  if (!o || o->t != JV_OBJ) return NULL;
  for (size_t i = 0; i < o->n; i++)
    if (!strcmp(o->keys[i], key)) return o->kids[i];
  return NULL;
}

static const char *jv_str(const jv *o, const char *key) {
  const jv *v = jv_get(o, key);
  return v && v->t == JV_STR ? v->str : NULL;
}

static bool jv_num(const jv *o, const char *key, double *out) {
  const jv *v = jv_get(o, key);
  if (!v || v->t != JV_NUM) return false;
  if (out) *out = v->num;
  return true;
}

static const jv *trace_events(const jv *root) {
  const jv *a = jv_get(root, "traceEvents");
  return a && a->t == JV_ARR ? a : NULL;
}

/* The Chrome trace-event format's rules for what a trace uses: required
 * fields per phase, "X" with dur >= 0, B/E matched per track, every flow id
 * with exactly one start and one finish (the finish binding to the
 * enclosing slice, at or after its start). Returns NULL, or what is wrong
 * (|buf| holds it). */
static const char *trace_check(const jv *root, char *buf, size_t cap) {
  if (!root || root->t != JV_OBJ) return "the document is not an object";
  const jv *evs = trace_events(root);
  if (!evs) return "no traceEvents array";
  const jv *other = jv_get(root, "otherData");
  if (!other || other->t != JV_OBJ) return "no otherData object";
  if (!jv_num(other, "events_dropped", NULL)) return "otherData has no events_dropped";
  size_t nflows = 0;
  for (size_t i = 0; i < evs->n; i++)
    if (jv_str(evs->kids[i], "ph") &&
        (!strcmp(jv_str(evs->kids[i], "ph"), "s") || !strcmp(jv_str(evs->kids[i], "ph"), "f")))
      nflows++;
  struct flow_end {
    double id, ts;
    int starts, finishes;
    double ts_s, ts_f;
  } *flows = calloc(nflows + 1, sizeof(*flows));
  size_t nf = 0;
  struct open_b {
    double pid, tid;
    int depth;
  } *opens = calloc(evs->n + 1, sizeof(*opens));
  size_t no = 0;
  const char *why = NULL;
  for (size_t i = 0; i < evs->n && !why; i++) {
    const jv *e = evs->kids[i];
    const char *ph = jv_str(e, "ph");
    double pid, tid, ts, dur, id;
#define FAIL(...) (snprintf(buf, cap, __VA_ARGS__), why = buf)
    if (e->t != JV_OBJ || !ph) {
      FAIL("event %zu: not an object with a phase", i);
      break;
    }
    if (!jv_num(e, "pid", &pid) || !jv_num(e, "tid", &tid)) {
      FAIL("event %zu (%s): no pid or tid", i, ph);
      break;
    }
    if (!strcmp(ph, "M")) {
      const jv *args = jv_get(e, "args");
      if (!jv_str(e, "name") || !args || args->t != JV_OBJ)
        FAIL("event %zu: metadata without a name or args", i);
      continue;
    }
    if (!jv_num(e, "ts", &ts) || ts < 0) {
      FAIL("event %zu (%s): no ts >= 0", i, ph);
      break;
    }
    if (!jv_str(e, "name")) {
      FAIL("event %zu (%s): no name", i, ph);
      break;
    }
    if (!strcmp(ph, "X")) {
      if (!jv_num(e, "dur", &dur) || !(dur >= 0)) FAIL("event %zu: X without dur >= 0", i);
    } else if (!strcmp(ph, "i")) {
      const char *s = jv_str(e, "s");
      if (s && strcmp(s, "t") && strcmp(s, "p") && strcmp(s, "g"))
        FAIL("event %zu: instant with scope '%s'", i, s);
    } else if (!strcmp(ph, "C")) {
      const jv *args = jv_get(e, "args");
      if (!args || args->t != JV_OBJ || !args->n) {
        FAIL("event %zu: counter without args", i);
        break;
      }
      for (size_t k = 0; k < args->n; k++)
        if (args->kids[k]->t != JV_NUM)
          FAIL("event %zu: counter '%s' is not a number", i, args->keys[k]);
    } else if (!strcmp(ph, "B") || !strcmp(ph, "E")) {
      size_t k = 0;
      while (k < no && (opens[k].pid != pid || opens[k].tid != tid)) k++;
      if (k == no) opens[no++] = (struct open_b){pid, tid, 0};
      opens[k].depth += ph[0] == 'B' ? 1 : -1;
      if (opens[k].depth < 0) FAIL("event %zu: E without its B", i);
    } else if (!strcmp(ph, "s") || !strcmp(ph, "f")) {
      if (!jv_num(e, "id", &id) || !jv_str(e, "cat")) {
        FAIL("event %zu: flow without id or cat", i);
        break;
      }
      if (ph[0] == 'f' && (!jv_str(e, "bp") || strcmp(jv_str(e, "bp"), "e")))
        FAIL("event %zu: flow finish without bp 'e'", i);
      size_t k = 0;
      while (k < nf && flows[k].id != id) k++;
      if (k == nf) flows[nf++] = (struct flow_end){id, 0, 0, 0, 0, 0};
      if (ph[0] == 's') {
        flows[k].starts++;
        flows[k].ts_s = ts;
      } else {
        flows[k].finishes++;
        flows[k].ts_f = ts;
      }
    } else {
      FAIL("event %zu: phase '%s' not used by weft", i, ph);
    }
#undef FAIL
  }
  for (size_t k = 0; k < nf && !why; k++) {
    if (flows[k].starts != 1 || flows[k].finishes != 1) {
      snprintf(buf, cap, "flow %.0f: %d starts, %d finishes", flows[k].id, flows[k].starts,
               flows[k].finishes);
      why = buf;
    } else if (flows[k].ts_f < flows[k].ts_s) {
      snprintf(buf, cap, "flow %.0f finishes (%.3f) before it starts (%.3f)", flows[k].id,
               flows[k].ts_f, flows[k].ts_s);
      why = buf;
    }
  }
  for (size_t k = 0; k < no && !why; k++)
    if (opens[k].depth) {
      snprintf(buf, cap, "a B without its E on track %.0f", opens[k].tid);
      why = buf;
    }
  free(flows);
  free(opens);
  return why;
}

#endif
