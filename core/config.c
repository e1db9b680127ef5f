/* The WEFT_* environment variables, read once (core/config.h; the table is
 * docs/configuration.md). Nothing else in the library calls getenv. */
#include "core/config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/hunt.h"

/* What a too-long WEFT_CUDA_DRIVER turns into: an absolute path under a
 * directory that does not exist, so dlopen fails and its message says why. */
#define DRIVER_TOO_LONG "/WEFT_CUDA_DRIVER is longer than 4095 bytes"

/* Longest WEFT_SCHEDULER value quoted back in the error. */
#define QUOTE_MAX 63

typedef struct config {
  int log_level;                 /* WEFT_LOG: 0..3, WEFT_CONFIG_LOG_UNSET or _INVALID */
  char log_value[QUOTE_MAX + 4]; /* the bad value, "..." when cut */
  bool strict_wakeups;
  bool nvtx;                     /* WEFT_NVTX */
  weft_scheduler_mode scheduler; /* THREAD or COMBINING when valid */
  bool scheduler_invalid;
  char scheduler_value[QUOTE_MAX + 4]; /* the bad value, "..." when cut */
  uint32_t host_threads;               /* WEFT_HOST_THREADS; 0: unset */
  bool has_cuda_driver;
  char cuda_driver[WEFT_CONFIG_PATH_MAX + 1];
  weft_config_hunt hunt;
} config;

static config cfg;
/* Double-checked: |loaded| is published with release after |cfg| is
 * written under |lock|, so a reader that sees it true (acquire) sees every
 * field. pthread_once would do, but cannot be reset for the tests. */
static atomic_bool loaded;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A flag is on when the variable is set to anything but "" or "0". */
static bool flag(const char *name) {
  const char *v = getenv(name);
  return v && *v && strcmp(v, "0") != 0;
}

/* |v| as a decimal integer in [lo, hi]; false (and a warning naming |name|)
 * when it is not one. */
static bool parse_int(const char *name, const char *v, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (end == v || *end || errno || n < lo || n > hi) {
    fprintf(stderr,
            "weft: %s='%s' is not a whole number from %" PRId64 " to %" PRId64
            "; the default is used\n",
            name, v, lo, hi);
    return false;
  }
  *out = n;
  return true;
}

/* The variable |name| as an int in [lo, hi], |dflt| when unset, empty or bad. */
static int64_t number(const char *name, int64_t lo, int64_t hi, int64_t dflt) {
  const char *v = getenv(name);
  int64_t n;
  return v && *v && parse_int(name, v, lo, hi, &n) ? n : dflt;
}

/* WEFT_LOG: a level name (any case), or one of the values of the flag it
 * was: "1", "on", "yes", "true" meant "print each failure" (now info);
 * "0", "off", "no", "false" meant off (the default level). */
static void read_log(config *c) {
  static const char *const on[] = {"1", "on", "yes", "true"};
  static const char *const off[] = {"0", "off", "no", "false"};
  static const char *const names[] = {"error", "warn", "info", "debug", "warning"};
  const char *v = getenv("WEFT_LOG");
  c->log_level = WEFT_CONFIG_LOG_UNSET;
  if (!v || !*v) return;
  for (int i = 0; i < 5; i++)
    if (!strcasecmp(v, names[i])) {
      c->log_level = i == 4 ? 1 : i;
      return;
    }
  for (int i = 0; i < 4; i++) {
    if (!strcasecmp(v, on[i])) {
      c->log_level = 2;
      return;
    }
    if (!strcasecmp(v, off[i])) return;
  }
  c->log_level = WEFT_CONFIG_LOG_INVALID;
  size_t n = strlen(v);
  snprintf(c->log_value, sizeof(c->log_value), "%.*s%s", QUOTE_MAX, v, n > QUOTE_MAX ? "..." : "");
}

static void read_scheduler(config *c) {
  const char *v = getenv("WEFT_SCHEDULER");
  c->scheduler = WEFT_SCHEDULER_THREAD;
  if (!v || !*v || !strcmp(v, "thread")) return;
  if (!strcmp(v, "combining")) {
    c->scheduler = WEFT_SCHEDULER_COMBINING;
    return;
  }
  c->scheduler_invalid = true;
  size_t n = strlen(v);
  snprintf(c->scheduler_value, sizeof(c->scheduler_value), "%.*s%s", QUOTE_MAX, v,
           n > QUOTE_MAX ? "..." : "");
}

static void read_cuda_driver(config *c) {
  const char *v = getenv("WEFT_CUDA_DRIVER");
  if (!v || !*v) return;
  c->has_cuda_driver = true;
  size_t n = strlen(v);
  snprintf(c->cuda_driver, sizeof(c->cuda_driver), "%s",
           n <= WEFT_CONFIG_PATH_MAX ? v : DRIVER_TOO_LONG);
}

/* WEFT_HUNT_DROP=KIND[:N]. A bad kind drops nothing; a bad N drops every one. */
static void read_hunt_drop(weft_config_hunt *h) {
  h->drop_every = 1;
  const char *d = getenv("WEFT_HUNT_DROP");
  if (!d || !*d) return;
  size_t n = strcspn(d, ":");
  if (n == 5 && !strncmp(d, "ready", n))
    h->drop_kind = WEFT_HUNT_READY;
  else if (n == 8 && !strncmp(d, "progress", n))
    h->drop_kind = WEFT_HUNT_PROGRESS;
  else if (n == 5 && !strncmp(d, "inbox", n))
    h->drop_kind = WEFT_HUNT_INBOX;
  else
    fprintf(stderr,
            "weft: WEFT_HUNT_DROP='%s': the kind must be ready, progress or inbox; nothing is "
            "dropped\n",
            d);
  int64_t every;
  if (d[n] == ':' && parse_int("WEFT_HUNT_DROP's N", d + n + 1, 1, INT_MAX, &every))
    h->drop_every = (int)every;
}

static void read_all(config *c) {
  memset(c, 0, sizeof(*c));
  read_log(c);
  c->strict_wakeups = flag("WEFT_STRICT_WAKEUPS");
  c->nvtx = flag("WEFT_NVTX");
  read_scheduler(c);
  read_cuda_driver(c);
  c->host_threads = (uint32_t)number("WEFT_HOST_THREADS", 0, 64, 0);
  weft_config_hunt *h = &c->hunt;
  h->chaos = (int)number("WEFT_CHAOS", 0, INT_MAX, 0);
  h->delay_site = (int)number("WEFT_DELAY_SITE", -1, INT_MAX, -1);
  h->delay_us = (int)number("WEFT_DELAY_US", 0, INT_MAX, 1000);
  h->delay_p = (int)number("WEFT_DELAY_P", 1, INT_MAX, 1);
  /* Bounded so that M * 1e6 ns fits in 64 bits. */
  h->park_ms = number("WEFT_PARK_MS", 0, (int64_t)(UINT64_MAX / 1000000u), -1);
  read_hunt_drop(h);
  h->verbose = flag("WEFT_HUNT_VERBOSE");
}

static const config *get(void) {
  if (!atomic_load_explicit(&loaded, memory_order_acquire)) {
    pthread_mutex_lock(&lock);
    if (!atomic_load_explicit(&loaded, memory_order_relaxed)) {
      read_all(&cfg);
      atomic_store_explicit(&loaded, true, memory_order_release); /* publishes |cfg| */
    }
    pthread_mutex_unlock(&lock);
  }
  return &cfg;
}

int weft_config_log_level(const char **bad) {
  const config *c = get();
  if (bad) *bad = c->log_level == WEFT_CONFIG_LOG_INVALID ? c->log_value : NULL;
  return c->log_level;
}

bool weft_config_strict_wakeups(void) {
  return get()->strict_wakeups;
}

bool weft_config_nvtx(void) {
  return get()->nvtx;
}

weft_status weft_config_scheduler(weft_scheduler_mode *out) {
  const config *c = get();
  if (c->scheduler_invalid)
    return weft_error_make(WEFT_ERR_INVALID_ARGUMENT,
                           "WEFT_SCHEDULER is '%s'; it must be 'thread' or 'combining'",
                           c->scheduler_value);
  *out = c->scheduler;
  return NULL;
}

uint32_t weft_config_host_threads(void) {
  return get()->host_threads;
}

const char *weft_config_cuda_driver(void) {
  const config *c = get();
  return c->has_cuda_driver ? c->cuda_driver : NULL;
}

const char *weft_config_failpoints(void) {
  return getenv("WEFT_FAILPOINTS");
}

const char *weft_config_trace(void) {
  const char *p = getenv("WEFT_TRACE");
  return p && *p ? p : NULL;
}

bool weft_config_trace_monotonic(void) {
  const char *v = getenv("WEFT_TRACE_CLOCK");
  return v && !strcmp(v, "monotonic");
}

const weft_config_hunt *weft_config_hunting(void) {
  return &get()->hunt;
}

void weft__config_reload(void) {
  pthread_mutex_lock(&lock);
  atomic_store_explicit(&loaded, false, memory_order_relaxed);
  pthread_mutex_unlock(&lock);
}
