#include "core/failpoints.h"
#include "core/error.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

static weft_status bad(const char *entry, size_t len, const char *why) {
  return weft_error_make(WEFT_ERR_INVALID_ARGUMENT, "failpoint entry '%.*s': %s", (int)len, entry,
                         why);
}

/* A decimal count >= 1 spanning exactly [s, s + len). */
static bool count(const char *s, size_t len, uint64_t *out) {
  if (len == 0 || len > 20) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (!isdigit((unsigned char)s[i])) return false;
    uint64_t d = (uint64_t)(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  *out = v;
  return v >= 1;
}

static bool kind(const char *s, size_t len, weft_error_kind *out) {
  char name[64];
  if (len == 0 || len >= sizeof(name)) return false;
  memcpy(name, s, len);
  name[len] = '\0';
  return weft_error_kind_from_name(name, out) && *out != WEFT_OK;
}

static weft_status entry(const char *e, size_t len, weft_failpoints *fp) {
  const char *eq = memchr(e, '=', len);
  size_t lhs = eq ? (size_t)(eq - e) : len;
  weft_error_kind k = WEFT_OK;
  if (eq && !kind(eq + 1, len - lhs - 1, &k)) return bad(e, len, "unknown error kind");
  if (eq && weft__error_kind_is_derived(k))
    return bad(e, len,
               "TornDown, Skipped, Unwritten and Several are reported by weft, not injected");
  uint64_t n;
  if (lhs > 6 && !strncmp(e, "alloc#", 6)) {
    if (!eq) return bad(e, len, "alloc#N needs =KIND");
    if (!count(e + 6, lhs - 6, &n)) return bad(e, len, "N must be a count >= 1");
    if (fp->nallocs == WEFT_FAILPOINTS_MAX) return bad(e, len, "too many alloc failpoints");
    fp->allocs[fp->nallocs].n = n;
    fp->allocs[fp->nallocs++].kind = k;
  } else if (lhs > 7 && !strncmp(e, "launch#", 7)) {
    if (!eq) return bad(e, len, "launch#K needs =KIND");
    if (!count(e + 7, lhs - 7, &n)) return bad(e, len, "K must be a count >= 1");
    if (fp->nlaunches == WEFT_FAILPOINTS_MAX) return bad(e, len, "too many launch failpoints");
    fp->launches[fp->nlaunches].n = n;
    fp->launches[fp->nlaunches++].kind = k;
  } else if (lhs > 7 && !strncmp(e, "kernel:", 7)) {
    if (!eq) return bad(e, len, "kernel:NAME needs =KIND");
    if (lhs - 7 > 255) return bad(e, len, "kernel name longer than 255 bytes");
    if (fp->nkernels == WEFT_FAILPOINTS_MAX) return bad(e, len, "too many kernel failpoints");
    memcpy(fp->kernels[fp->nkernels].name, e + 7, lhs - 7);
    fp->kernels[fp->nkernels].name[lhs - 7] = '\0';
    fp->kernels[fp->nkernels++].kind = k;
  } else if (lhs > 7 && !strncmp(e, "poison#", 7)) {
    if (eq) return bad(e, len, "poison#K takes no kind");
    if (!count(e + 7, lhs - 7, &n)) return bad(e, len, "K must be a count >= 1");
    if (fp->npoison == WEFT_FAILPOINTS_MAX) return bad(e, len, "too many poison failpoints");
    fp->poison[fp->npoison++] = n;
  } else {
    return bad(e, len, "expected alloc#N=KIND, launch#K=KIND, kernel:NAME=KIND or poison#K");
  }
  return NULL;
}

bool weft_failpoints_spec_is_empty(const char *spec) {
  for (const char *s = spec; s && *s; s++)
    if (*s != ';' && !isspace((unsigned char)*s)) return false;
  return true;
}

weft_status weft_failpoints_parse(const char *spec, weft_failpoints *out) {
  weft_failpoints fp = *out;
  for (const char *s = spec; s && *s;) {
    const char *end = strchr(s, ';');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    const char *e = s;
    while (len && isspace((unsigned char)*e)) e++, len--;
    while (len && isspace((unsigned char)e[len - 1])) len--;
    if (len) {
      weft_status st = entry(e, len, &fp);
      if (st) return st;
    }
    s = end ? end + 1 : s + strlen(s);
  }
  *out = fp;
  return NULL;
}

weft_error_kind weft_failpoints_launch(const weft_failpoints *fp, uint64_t k, const char *name) {
  for (uint32_t i = 0; i < fp->nlaunches; i++)
    if (fp->launches[i].n == k) return fp->launches[i].kind;
  for (uint32_t i = 0; name && i < fp->nkernels; i++)
    if (!strcmp(fp->kernels[i].name, name)) return fp->kernels[i].kind;
  return WEFT_OK;
}

bool weft_failpoints_poisons(const weft_failpoints *fp, uint64_t k) {
  for (uint32_t i = 0; i < fp->npoison; i++)
    if (fp->poison[i] == k) return true;
  return false;
}
