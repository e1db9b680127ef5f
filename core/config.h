/* Every WEFT_* environment variable the library reads, parsed in one place
 * (docs/configuration.md is the table: name, values, default, effect).
 *
 * The process settings are read once, at the first call of any accessor
 * below, and kept for the life of the process: setting a variable after weft
 * first looked has no effect. Reading is thread-safe (the first callers race
 * on a mutex; later ones pay one acquire load) and never fails: a value that
 * does not parse gets the documented answer (a warning on stderr and the
 * default for the hunting numbers; InvalidArgument at open for
 * WEFT_SCHEDULER), never an abort.
 *
 * WEFT_FAILPOINTS and WEFT_TRACE are read at each device open instead
 * (weft_config_failpoints, weft_config_trace): the first's documented
 * contract is "open installs options.failpoints, then WEFT_FAILPOINTS", the
 * second names the file of each device's trace, and programs change both
 * between opens. */
#ifndef WEFT_CORE_CONFIG_H
#define WEFT_CORE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include <weft/weft.h>

/* Longest WEFT_CUDA_DRIVER value kept, in bytes (PATH_MAX less the NUL). */
#define WEFT_CONFIG_PATH_MAX 4095

/* The hunting build's settings (core/hunt.h; read in every build, used only
 * by -DWEFT_HUNT=ON). */
typedef struct weft_config_hunt {
  int chaos;       /* WEFT_CHAOS: 1 in N hunt points perturbed; 0: none */
  int delay_site;  /* WEFT_DELAY_SITE: the site that sleeps; -1: none */
  int delay_us;    /* WEFT_DELAY_US: its sleep (default 1000) */
  int delay_p;     /* WEFT_DELAY_P: 1 in P visits sleeps (default 1) */
  int64_t park_ms; /* WEFT_PARK_MS: timed parks' length; -1: the built-in 100 ms */
  int drop_kind;   /* WEFT_HUNT_DROP's kind (WEFT_HUNT_READY...); 0: none */
  int drop_every;  /* WEFT_HUNT_DROP's N: every Nth notification (>= 1) */
  bool verbose;    /* WEFT_HUNT_VERBOSE: print the site counts at exit */
} weft_config_hunt;

/* WEFT_LOG: the log level (0 error .. 3 debug) devices opened later apply
 * (core/log.h), from a level name in any case ("warning" too) or a value of
 * the boolean it used to be ("1", "on", "yes", "true": info, where each
 * recorded failure is printed; "0", "off", "no", "false": unset). Unset or
 * empty: WEFT_CONFIG_LOG_UNSET. Anything else: WEFT_CONFIG_LOG_INVALID, and
 * *bad (when |bad| is not NULL) is the value, quoted back (cut at 63
 * bytes); otherwise *bad is NULL. */
#define WEFT_CONFIG_LOG_UNSET   (-1)
#define WEFT_CONFIG_LOG_INVALID (-2)
int weft_config_log_level(const char **bad);

/* WEFT_STRICT_WAKEUPS: a recovered lost wake-up fails the process (core/sync.c). */
bool weft_config_strict_wakeups(void);

/* WEFT_NVTX: the CUDA backend brackets each launch's enqueue in an NVTX range
 * named by the launch's label or kernel (streams/cuda/backend_cuda.c). */
bool weft_config_nvtx(void);

/* The scheduler mode WEFT_SCHEDULER gives devices left at
 * WEFT_SCHEDULER_DEFAULT: *out is WEFT_SCHEDULER_THREAD when the variable is
 * unset, empty or "thread", WEFT_SCHEDULER_COMBINING for "combining". Any
 * other value is InvalidArgument naming it, *out untouched. */
WEFT_MUST_USE_RESULT weft_status weft_config_scheduler(weft_scheduler_mode *out);

/* WEFT_HOST_THREADS: the host pool's thread cap for devices opened with
 * options.host_threads 0; 0 when unset (one thread per stream). A value that
 * is not 0..64 warns and counts as unset. */
uint32_t weft_config_host_threads(void);

/* WEFT_CUDA_DRIVER: the driver library to dlopen, or NULL when the variable
 * is unset or empty (the loader then opens libcuda.so.1). A value longer than
 * WEFT_CONFIG_PATH_MAX gives a path that names the problem and cannot open,
 * so the load fails with UnsupportedIoOperation saying so. */
const char *weft_config_cuda_driver(void);

/* WEFT_FAILPOINTS as it is now (read at each call, see above), or NULL when
 * unset. The string belongs to the environment: use it before the next
 * setenv. */
const char *weft_config_failpoints(void);
/* WEFT_TRACE: the file every device opened now records its whole life into
 * (written at close; scheduler/trace.c), or NULL when unset or empty. Read
 * at each open. */
const char *weft_config_trace(void);
/* WEFT_TRACE_CLOCK=monotonic: traces stamp with clock_gettime, never the
 * time-stamp counter (read at a process's first recording). */
bool weft_config_trace_monotonic(void);

/* The hunting settings (never NULL). */
const weft_config_hunt *weft_config_hunting(void);

/* For tests: forget the settings read so far, so that the next accessor
 * reads the environment again. Not thread-safe: no other thread may be
 * inside weft (or hold a string from weft_config_cuda_driver) meanwhile. */
void weft__config_reload(void);

#endif /* WEFT_CORE_CONFIG_H */
