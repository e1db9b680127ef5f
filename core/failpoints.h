/* Failpoints: deterministic fault injection. The syntax, documented for users
 * in docs/errors.md and in weft.h: entries separated by ';', each one of
 *   alloc#N=KIND      the device's Nth storage allocation (1-based) fails with KIND
 *   launch#K=KIND     the device's Kth launch (1-based, counted at submission) fails
 *   kernel:NAME=KIND  every launch of the kernel named NAME fails with KIND
 *   poison#K          the device is poisoned when its Kth launch executes
 * KIND is a name weft_error_kind_name returns, except the kinds only weft
 * itself reports (TornDown, Skipped, Unwritten, Several), which are refused.
 * Whitespace around entries is ignored; an empty spec is valid. */
#ifndef WEFT_CORE_FAILPOINTS_H
#define WEFT_CORE_FAILPOINTS_H

#include <weft/weft.h>

#define WEFT_FAILPOINTS_MAX 16

typedef struct weft_failpoints {
  struct {
    uint64_t n;
    weft_error_kind kind;
  } allocs[WEFT_FAILPOINTS_MAX], launches[WEFT_FAILPOINTS_MAX];
  struct {
    char name[256];
    weft_error_kind kind;
  } kernels[WEFT_FAILPOINTS_MAX];
  uint64_t poison[WEFT_FAILPOINTS_MAX];
  uint32_t nallocs, nlaunches, nkernels, npoison;
} weft_failpoints;

/* Parses |spec| (NULL: empty) and appends to |out|; InvalidArgument naming
 * the bad entry, with |out| unchanged. */
WEFT_MUST_USE_RESULT weft_status weft_failpoints_parse(const char *spec, weft_failpoints *out);
/* true when |spec| holds no entry (NULL, empty, only blanks and ';'). */
bool weft_failpoints_spec_is_empty(const char *spec);
/* The kind launch |k| of kernel |name| fails with, or WEFT_OK. */
weft_error_kind weft_failpoints_launch(const weft_failpoints *fp, uint64_t k, const char *name);
bool weft_failpoints_poisons(const weft_failpoints *fp, uint64_t k);

#endif
