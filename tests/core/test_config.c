/* core/config: every WEFT_* variable parsed once, with the documented answer
 * to bad values. Criterion runs each test in its own process, so a test may
 * set the environment freely; each one starts from a clean slate (the
 * variables unset, the settings forgotten by weft__config_reload). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setenv, unsetenv */
#endif
#include <criterion/criterion.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <weft/weft.h>

#include "core/config.h"
#include "core/hunt.h"

static const char *const variables[] = {
    "WEFT_LOG",          "WEFT_STRICT_WAKEUPS", "WEFT_NVTX",    "WEFT_SCHEDULER",
    "WEFT_CUDA_DRIVER",  "WEFT_FAILPOINTS",     "WEFT_CHAOS",   "WEFT_DELAY_SITE",
    "WEFT_DELAY_US",     "WEFT_DELAY_P",        "WEFT_PARK_MS", "WEFT_HUNT_DROP",
    "WEFT_HUNT_VERBOSE", "WEFT_HOST_THREADS",
};

static void clean(void) {
  for (size_t i = 0; i < sizeof variables / sizeof variables[0]; i++) unsetenv(variables[i]);
  weft__config_reload();
}

/* Sets |name| to |value| and makes weft read the environment again. */
static void set(const char *name, const char *value) {
  cr_assert_eq(setenv(name, value, 1), 0);
  weft__config_reload();
}

/* What stderr received while |fn| ran, in a buffer the caller frees. */
static char *stderr_of(void (*fn)(void)) {
  fflush(stderr);
  FILE *tmp = tmpfile();
  cr_assert_not_null(tmp);
  int saved = dup(STDERR_FILENO);
  cr_assert_geq(saved, 0);
  cr_assert_geq(dup2(fileno(tmp), STDERR_FILENO), 0);
  fn();
  fflush(stderr);
  cr_assert_geq(dup2(saved, STDERR_FILENO), 0);
  close(saved);
  long n = ftell(tmp);
  cr_assert_geq(n, 0);
  char *s = calloc((size_t)n + 1, 1);
  cr_assert_not_null(s);
  rewind(tmp);
  cr_assert_eq(fread(s, 1, (size_t)n, tmp), (size_t)n);
  fclose(tmp);
  return s;
}

static weft_scheduler_mode scheduler_ok(void) {
  weft_scheduler_mode m = WEFT_SCHEDULER_DEFAULT;
  weft_status st = weft_config_scheduler(&m);
  cr_assert_null(st, "%s", weft_error_message(st));
  return m;
}

/* The hunting numbers at their defaults (unset, or a bad value). */
static void expect_hunting_numbers_default(const weft_config_hunt *h) {
  cr_assert_eq(h->chaos, 0);
  cr_assert_eq(h->delay_site, -1);
  cr_assert_eq(h->delay_us, 1000);
  cr_assert_eq(h->delay_p, 1);
  cr_assert_eq(h->park_ms, -1);
}

TestSuite(config, .init = clean);

Test(config, unset_variables_give_the_defaults) {
  cr_assert_eq(weft_config_log_level(NULL), WEFT_CONFIG_LOG_UNSET);
  cr_assert_not(weft_config_strict_wakeups());
  cr_assert_not(weft_config_nvtx());
  cr_assert_eq(scheduler_ok(), WEFT_SCHEDULER_THREAD);
  cr_assert_null(weft_config_cuda_driver());
  cr_assert_null(weft_config_failpoints());
  const weft_config_hunt *h = weft_config_hunting();
  expect_hunting_numbers_default(h);
  cr_assert_eq(h->drop_kind, 0);
  cr_assert_eq(h->drop_every, 1);
  cr_assert_not(h->verbose);
}

Test(config, a_flag_is_on_for_any_value_but_empty_or_zero) {
  static const struct {
    const char *value;
    bool on;
  } cases[] = {{"1", true}, {"yes", true}, {"00", true}, {"0", false}, {"", false}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    set("WEFT_STRICT_WAKEUPS", cases[i].value);
    set("WEFT_HUNT_VERBOSE", cases[i].value);
    set("WEFT_NVTX", cases[i].value);
    cr_assert_eq(weft_config_strict_wakeups(), cases[i].on, "'%s'", cases[i].value);
    cr_assert_eq(weft_config_nvtx(), cases[i].on, "WEFT_NVTX='%s'", cases[i].value);
    cr_assert_eq(weft_config_hunting()->verbose, cases[i].on, "'%s'", cases[i].value);
  }
}

Test(config, settings_are_read_once_until_reloaded) {
  cr_assert_eq(weft_config_log_level(NULL), WEFT_CONFIG_LOG_UNSET);
  cr_assert_eq(setenv("WEFT_LOG", "debug", 1), 0);
  cr_assert_eq(setenv("WEFT_SCHEDULER", "combining", 1), 0);
  cr_assert_eq(weft_config_log_level(NULL), WEFT_CONFIG_LOG_UNSET,
               "a variable set after the first read is not seen");
  cr_assert_eq(scheduler_ok(), WEFT_SCHEDULER_THREAD);
  weft__config_reload();
  cr_assert_eq(weft_config_log_level(NULL), 3);
  cr_assert_eq(scheduler_ok(), WEFT_SCHEDULER_COMBINING);
}

Test(config, failpoints_are_read_at_each_call) {
  cr_assert_null(weft_config_failpoints());
  cr_assert_eq(setenv("WEFT_FAILPOINTS", "launch#1=Generic", 1), 0);
  cr_assert_str_eq(weft_config_failpoints(), "launch#1=Generic");
  cr_assert_eq(unsetenv("WEFT_FAILPOINTS"), 0);
  cr_assert_null(weft_config_failpoints());
}

Test(config, scheduler_takes_thread_or_combining_and_empty_means_thread) {
  set("WEFT_SCHEDULER", "thread");
  cr_assert_eq(scheduler_ok(), WEFT_SCHEDULER_THREAD);
  set("WEFT_SCHEDULER", "combining");
  cr_assert_eq(scheduler_ok(), WEFT_SCHEDULER_COMBINING);
  set("WEFT_SCHEDULER", "");
  cr_assert_eq(scheduler_ok(), WEFT_SCHEDULER_THREAD);
}

Test(config, a_bad_scheduler_is_invalid_argument_naming_it_and_leaves_out_alone) {
  set("WEFT_SCHEDULER", "Combining");
  weft_scheduler_mode m = (weft_scheduler_mode)77;
  weft_status st = weft_config_scheduler(&m);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  cr_assert_str_eq(weft_error_message(st),
                   "WEFT_SCHEDULER is 'Combining'; it must be 'thread' or 'combining'");
  cr_assert_eq((int)m, 77);
  weft_error_free(st);
  /* Every call answers the same (one read, many opens). */
  st = weft_config_scheduler(&m);
  cr_assert_eq(weft_error_kind_of(st), WEFT_ERR_INVALID_ARGUMENT);
  weft_error_free(st);
}

Test(config, a_long_bad_scheduler_is_quoted_cut_short) {
  char v[200];
  memset(v, 'x', sizeof v - 1);
  v[sizeof v - 1] = '\0';
  set("WEFT_SCHEDULER", v);
  weft_scheduler_mode m;
  weft_status st = weft_config_scheduler(&m);
  char want[160];
  snprintf(want, sizeof want, "WEFT_SCHEDULER is '%.63s...'; it must be 'thread' or 'combining'",
           v);
  cr_assert_str_eq(weft_error_message(st), want);
  weft_error_free(st);
}

Test(config, cuda_driver_is_the_path_given_and_empty_means_none) {
  set("WEFT_CUDA_DRIVER", "/opt/driver/libcuda.so.1");
  cr_assert_str_eq(weft_config_cuda_driver(), "/opt/driver/libcuda.so.1");
  set("WEFT_CUDA_DRIVER", "");
  cr_assert_null(weft_config_cuda_driver());
}

Test(config, a_cuda_driver_path_too_long_to_keep_names_the_problem) {
  char *v = malloc(WEFT_CONFIG_PATH_MAX + 2);
  cr_assert_not_null(v);
  memset(v, 'a', WEFT_CONFIG_PATH_MAX + 1);
  v[WEFT_CONFIG_PATH_MAX + 1] = '\0';
  set("WEFT_CUDA_DRIVER", v);
  const char *p = weft_config_cuda_driver();
  cr_assert_not_null(p);
  cr_assert_eq(p[0], '/', "an absolute path, never searched for: %s", p);
  cr_assert_not_null(strstr(p, "WEFT_CUDA_DRIVER is longer than"), "%s", p);
  /* The longest value kept is kept whole. */
  v[WEFT_CONFIG_PATH_MAX] = '\0';
  set("WEFT_CUDA_DRIVER", v);
  cr_assert_str_eq(weft_config_cuda_driver(), v);
  free(v);
}

Test(config, hunting_numbers_parse_in_their_ranges) {
  set("WEFT_CHAOS", "16");
  set("WEFT_DELAY_SITE", "22");
  set("WEFT_DELAY_US", "100000");
  set("WEFT_DELAY_P", "3");
  set("WEFT_PARK_MS", "100000000");
  const weft_config_hunt *h = weft_config_hunting();
  cr_assert_eq(h->chaos, 16);
  cr_assert_eq(h->delay_site, 22);
  cr_assert_eq(h->delay_us, 100000);
  cr_assert_eq(h->delay_p, 3);
  cr_assert_eq(h->park_ms, 100000000);
  set("WEFT_PARK_MS", "0");
  cr_assert_eq(weft_config_hunting()->park_ms, 0);
}

static void read_settings(void) {
  (void)weft_config_hunting(); /* the first read parses and warns */
}

Test(config, a_bad_number_warns_and_gives_the_default) {
  static const struct {
    const char *name, *value;
  } bad[] = {
      {"WEFT_CHAOS", "-1"},      {"WEFT_DELAY_SITE", "twelve"},
      {"WEFT_DELAY_US", "10ms"}, {"WEFT_DELAY_P", "0"},
      {"WEFT_PARK_MS", "-5"},    {"WEFT_PARK_MS", "99999999999999999999"},
      {"WEFT_DELAY_SITE", "-2"}, {"WEFT_DELAY_US", " "},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    clean();
    set(bad[i].name, bad[i].value);
    char *err = stderr_of(read_settings);
    char want[128];
    snprintf(want, sizeof want, "weft: %s='%s' is not a whole number", bad[i].name, bad[i].value);
    cr_assert_not_null(strstr(err, want), "%s='%s': stderr was '%s'", bad[i].name, bad[i].value,
                       err);
    cr_assert_not_null(strstr(err, "the default is used"), "%s", err);
    free(err);
    const weft_config_hunt *h = weft_config_hunting();
    expect_hunting_numbers_default(h);
  }
}

/* Threads of this process named |name| (/proc/self/task/N/comm). */
static int threads_named(const char *name) {
  DIR *d = opendir("/proc/self/task");
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[64] = "";
    snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(path, "r");
    if (!f) continue; /* the thread has exited */
    if (fgets(comm, sizeof comm, f)) comm[strcspn(comm, "\n")] = 0;
    fclose(f);
    n += strcmp(comm, name) == 0;
  }
  closedir(d);
  return n;
}

static void read_host_threads(void) {
  (void)weft_config_host_threads();
}

Test(config, host_threads_takes_0_to_64_and_a_bad_value_warns_and_means_unset) {
  cr_assert_eq(weft_config_host_threads(), 0, "unset: one thread per stream");
  set("WEFT_HOST_THREADS", "2");
  cr_assert_eq(weft_config_host_threads(), 2);
  set("WEFT_HOST_THREADS", "64");
  cr_assert_eq(weft_config_host_threads(), 64);
  const char *bad[] = {"65", "-1", "two", "3x"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    set("WEFT_HOST_THREADS", bad[i]);
    char *err = stderr_of(read_host_threads);
    cr_assert(strstr(err, "WEFT_HOST_THREADS"), "'%s' warns naming the variable: %s", bad[i], err);
    free(err);
    cr_assert_eq(weft_config_host_threads(), 0, "'%s' counts as unset", bad[i]);
  }
}

/* A device left at host_threads 0 takes the variable's cap; one that names
 * its cap keeps it. The cap only changes how many threads run the streams:
 * results are the same. */
Test(config, a_device_takes_the_host_threads_variable_only_when_it_names_none) {
  set("WEFT_HOST_THREADS", "1");
  weft_device *dev = NULL;
  weft_device_options o;
  weft_device_options_init(&o);
  o.max_streams = 4;
  cr_assert_null(weft_device_open(&o, &dev));
  weft_buffer b[4];
  for (int s = 0; s < 4; s++) {
    cr_assert_null(weft_buffer_create(dev, (weft_stream_id)s, 8, &b[s]));
    uint64_t v = (uint64_t)s;
    cr_assert_null(weft_buffer_write(dev, (weft_stream_id)s, b[s], 0, &v, 8));
  }
  for (int s = 0; s < 4; s++) {
    uint64_t v = 0;
    cr_assert_null(weft_buffer_read(dev, (weft_stream_id)s, b[s], 0, &v, 8));
    cr_assert_eq(v, (uint64_t)s);
    cr_assert_null(weft_buffer_release(dev, b[s]));
  }
  cr_assert_eq(threads_named("weft-pool"), 1, "four streams, one pool thread");
  weft_device_close(dev);
  o.host_threads = 2;
  cr_assert_null(weft_device_open(&o, &dev));
  for (int s = 0; s < 4; s++) { /* a write starts the stream */
    uint64_t v = 7;
    cr_assert_null(weft_buffer_create(dev, (weft_stream_id)s, 8, &b[s]));
    cr_assert_null(weft_buffer_write(dev, (weft_stream_id)s, b[s], 0, &v, 8));
    cr_assert_null(weft_buffer_read(dev, (weft_stream_id)s, b[s], 0, &v, 8));
    cr_assert_null(weft_buffer_release(dev, b[s]));
  }
  cr_assert_eq(threads_named("weft-pool"), 2, "the option wins over the variable");
  weft_device_close(dev);
}

Test(config, hunt_drop_takes_a_kind_and_an_optional_count) {
  static const struct {
    const char *value;
    int kind, every;
  } cases[] = {
      {"ready", WEFT_HUNT_READY, 1},
      {"progress:7", WEFT_HUNT_PROGRESS, 7},
      {"inbox:3", WEFT_HUNT_INBOX, 3},
      {"", 0, 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    set("WEFT_HUNT_DROP", cases[i].value);
    const weft_config_hunt *h = weft_config_hunting();
    cr_assert_eq(h->drop_kind, cases[i].kind, "'%s'", cases[i].value);
    cr_assert_eq(h->drop_every, cases[i].every, "'%s'", cases[i].value);
  }
}

Test(config, a_bad_hunt_drop_kind_drops_nothing_and_a_bad_count_drops_every_one) {
  set("WEFT_HUNT_DROP", "readyish:2");
  char *err = stderr_of(read_settings);
  cr_assert_not_null(strstr(err, "WEFT_HUNT_DROP='readyish:2': the kind must be ready, progress "
                                 "or inbox; nothing is dropped"),
                     "%s", err);
  free(err);
  cr_assert_eq(weft_config_hunting()->drop_kind, 0);
  set("WEFT_HUNT_DROP", "inbox:0");
  err = stderr_of(read_settings);
  cr_assert_not_null(strstr(err, "WEFT_HUNT_DROP's N='0' is not a whole number"), "%s", err);
  free(err);
  cr_assert_eq(weft_config_hunting()->drop_kind, WEFT_HUNT_INBOX);
  cr_assert_eq(weft_config_hunting()->drop_every, 1);
}

static void *read_delay(void *arg) {
  (void)arg;
  return (void *)(intptr_t)weft_config_hunting()->delay_us;
}

Test(config, the_first_readers_race_safely_and_all_see_the_same_settings) {
  set("WEFT_DELAY_US", "4321");
  pthread_t t[8];
  for (int i = 0; i < 8; i++) cr_assert_eq(pthread_create(&t[i], NULL, read_delay, NULL), 0);
  for (int i = 0; i < 8; i++) {
    void *v;
    cr_assert_eq(pthread_join(t[i], &v), 0);
    cr_assert_eq((intptr_t)v, 4321, "thread %d", i);
  }
}
