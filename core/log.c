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

/* The hook is running on this thread (it holds the read side): a message
 * from a weft call the hook makes would take the lock again (a deadlock
 * behind a waiting weft_set_log) and call the hook inside itself, and a
 * weft_set_log it makes would wait for itself. So the first goes to stderr,
 * and the second is kept here and applied once the hook has returned. */
static _Thread_local bool in_hook;
static _Thread_local struct {
  bool set;
  weft_log_fn fn;
  void *user;
  int level;
} deferred;

static void emit(int level, const char *msg) {
  if (in_hook) {
    fprintf(stderr, "weft: %s: %s (from a call the log hook made)\n", weft_log_level_name(level),
            msg);
    return;
  }
  pthread_rwlock_rdlock(&hook_lock);
  if (hook_fn) {
    in_hook = true;
    hook_fn(hook_user, level, msg);
    in_hook = false;
  } else {
    fprintf(stderr, "weft: %s: %s\n", weft_log_level_name(level), msg);
  }
  pthread_rwlock_unlock(&hook_lock);
  if (deferred.set) { /* the hook called weft_set_log: now it can wait */
    deferred.set = false;
    weft_set_log(deferred.fn, deferred.user, deferred.level);
  }
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
  if (in_hook) { /* from the hook itself: applied when it returns (emit) */
    deferred.set = true;
    deferred.fn = fn;
    deferred.user = user;
    deferred.level = level;
    return;
  }
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
