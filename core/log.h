/* Process-wide logging of streaming and memory decisions (weft_set_log,
 * WEFT_LOG; docs/observability.md, "Logging").
 *
 *   WEFT_LOGF(WEFT_LOG_INFO, "stream %u created", slot);
 *
 * WEFT_LOGF tests the level (one relaxed load) before it evaluates its
 * arguments or formats anything, so a message above the current level costs
 * a load and a predictable branch: nothing is formatted at the default level
 * (warn) on any path that only logs at info or debug. A message that passes
 * is formatted into a stack buffer (at most WEFT_LOG_MAX - 1 bytes, cut
 * beyond) and handed to the hook, or written to stderr as
 * "weft: <level>: <message>\n". Nothing here allocates.
 *
 * Thread-safety: any thread may log and any thread may swap the hook. The
 * hook runs on the thread that logs (the scheduler, a pool thread, a client)
 * under a shared lock, so weft_set_log returns only once no call of the
 * previous hook is still running; a hook must therefore not call weft (not
 * even weft_set_log: it would wait for itself). */
#ifndef WEFT_CORE_LOG_H
#define WEFT_CORE_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <weft/weft.h>

#define WEFT_LOG_ERROR 0
#define WEFT_LOG_WARN  1
#define WEFT_LOG_INFO  2
#define WEFT_LOG_DEBUG 3

/* Longest message passed to a hook, with its NUL. */
#define WEFT_LOG_MAX 512

/* The level messages must be at or below to be emitted (default WARN). */
extern _Atomic int weft__log_level;

static inline bool weft_log_on(int level) {
  return level <= atomic_load_explicit(&weft__log_level, memory_order_relaxed);
}

/* Formats and emits a message whose level the caller has tested. */
void weft__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define WEFT_LOGF(level, ...)                                                                      \
  do {                                                                                             \
    if (weft_log_on(level)) weft__log((level), __VA_ARGS__);                                       \
  } while (0)

/* "error", "warn", "info" or "debug" ("?" for anything else). */
const char *weft_log_level_name(int level);

/* Applies WEFT_LOG's level, unless weft_set_log has set one (the program's
 * explicit choice wins over the environment). Called at each device open;
 * an unknown WEFT_LOG value is reported once, as a warning, and ignored. */
void weft__log_apply_env(void);

/* Messages formatted since the process started (for tests: proves a path
 * formatted nothing). */
uint64_t weft__log_formatted(void);

#endif /* WEFT_CORE_LOG_H */
