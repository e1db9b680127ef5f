/* ck's stack, as weft includes it. ck_stack_pop_mpmc keeps its ABA
 * generation in a char * it increments from NULL ("update.generation =
 * original.generation + 1"): a counter, never dereferenced, but clang's
 * -fsanitize=pointer-overflow reports the arithmetic on a null pointer.
 * That check is off for ck's stack functions only (gcc does not report it). */
#ifndef WEFT_CORE_CKSTACK_H
#define WEFT_CORE_CKSTACK_H

#include <ck_pr.h>

#if defined(__clang__)
#pragma clang attribute push(__attribute__((no_sanitize("pointer-overflow"))), apply_to = function)
#endif
#include <ck_stack.h>
#if defined(__clang__)
#pragma clang attribute pop
#endif

#endif
