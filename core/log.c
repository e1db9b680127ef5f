/* Process-wide logging (core/log.h): the level every message site tests,
 * the hook and where WEFT_LOG comes in. */
#include "core/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "core/config.h"

_Atomic int weft__log_level = WEFT_LOG_WARN;

/* The hook and its user, swapped together under the write side of |hook_lock|
 * and read together under its read side: a message never sees a new fn with
 * the old user, and weft_set_log returns only once no call of the old hook
 * runs (so the caller may free the old user). The lock is taken only by a
 * message that passed the level test, never on a path that logs nothing.
 * Writers are preferred (glibc's default prefers readers, and threads that
 * log without pause would hold weft_set_log off indefinitely); a reader
 * never takes it twice, since a hook must not call weft. */
static pthread_rwlock_t hook_lock = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static weft_log_fn hook_fn;
static void *hook_user;

/* weft_set_log was called: WEFT_LOG no longer applies. */
static atomic_bool explicit_level;
/* The unknown WEFT_LOG value was reported (once per process). */
static atomic_bool env_warned;
static _Atomic uint64_t formatted;

static const char *const level_names[] = {"error", "warn", "info", "debug"};

const char *weft_log_level_name(int level) {
  return level >= WEFT_LOG_ERROR && level <= WEFT_LOG_DEBUG ? level_names[level] : "?";
}

static void emit(int level, const char *msg) {
  pthread_rwlock_rdlock(&hook_lock);
  if (hook_fn)
    hook_fn(hook_user, level, msg);
  else
    fprintf(stderr, "weft: %s: %s\n", weft_log_level_name(level), msg);
  pthread_rwlock_unlock(&hook_lock);
}

void weft__log(int level, const char *fmt, ...) {
  char msg[WEFT_LOG_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap); /* a longer message is cut, never refused */
  va_end(ap);
  atomic_fetch_add_explicit(&formatted, 1, memory_order_relaxed);
  emit(level, msg);
}

uint64_t weft__log_formatted(void) {
  return atomic_load_explicit(&formatted, memory_order_relaxed);
}

void weft_set_log(weft_log_fn fn, void *user, int level) {
  int clamped = level < WEFT_LOG_ERROR   ? WEFT_LOG_ERROR
                : level > WEFT_LOG_DEBUG ? WEFT_LOG_DEBUG
                                         : level;
  pthread_rwlock_wrlock(&hook_lock);
  hook_fn = fn;
  hook_user = user;
  pthread_rwlock_unlock(&hook_lock);
  atomic_store_explicit(&explicit_level, true, memory_order_relaxed);
  atomic_store_explicit(&weft__log_level, clamped, memory_order_relaxed);
  if (clamped != level) /* through the new hook: the caller hears of its own mistake */
    WEFT_LOGF(WEFT_LOG_WARN,
              "weft_set_log: level %d is not 0 (error) .. 3 (debug); %d (%s) is used", level,
              clamped, weft_log_level_name(clamped));
}

void weft__log_apply_env(void) {
  const char *bad = NULL;
  int level = weft_config_log_level(&bad);
  if (level == WEFT_CONFIG_LOG_INVALID) {
    if (!atomic_exchange_explicit(&env_warned, true, memory_order_relaxed))
      WEFT_LOGF(WEFT_LOG_WARN, "WEFT_LOG='%s' is not error, warn, info or debug; it is ignored",
                bad);
    return;
  }
  if (level == WEFT_CONFIG_LOG_UNSET || atomic_load_explicit(&explicit_level, memory_order_relaxed))
    return;
  atomic_store_explicit(&weft__log_level, level, memory_order_relaxed);
}
