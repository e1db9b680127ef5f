/* Logging (core/log.h, weft_set_log, WEFT_LOG): every level reaches the
 * hook, a level filters what is above it, NULL sends messages to stderr,
 * WEFT_LOG's values (and the old boolean's) give their levels, and nothing
 * is formatted on the launch path at the default level. Criterion runs each
 * test in its own process, so the process-wide state starts fresh in each. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/log.h"
#include "support/asan_criterion.h"
#include "support/device_env.h"

static _Atomic int gate;

static weft_status hold(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx, (void)user;
  while (!atomic_load(&gate)) sched_yield();
  return NULL;
}

static weft_status bump(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  ((uint64_t *)ctx->buffers[0])[0]++;
  return NULL;
}

#define MAX_SEEN 64

typedef struct seen {
  int n;
  int level[MAX_SEEN];
  char text[MAX_SEEN][WEFT_LOG_MAX];
} seen;

static void collect(void *user, int level, const char *message) {
  seen *s = user;
  if (s->n < MAX_SEEN) {
    s->level[s->n] = level;
    snprintf(s->text[s->n], WEFT_LOG_MAX, "%s", message);
  }
  s->n++;
}

/* The index of the first message containing |part|, or -1. */
static int find(const seen *s, const char *part) {
  for (int i = 0; i < s->n && i < MAX_SEEN; i++)
    if (strstr(s->text[i], part)) return i;
  return -1;
}

static void emit_each_level(void) {
  WEFT_LOGF(WEFT_LOG_ERROR, "an error %d", 0);
  WEFT_LOGF(WEFT_LOG_WARN, "a warning %d", 1);
  WEFT_LOGF(WEFT_LOG_INFO, "some info %d", 2);
  WEFT_LOGF(WEFT_LOG_DEBUG, "a detail %d", 3);
}

Test(log, every_level_reaches_the_hook_at_debug) {
  seen s = {0};
  weft_set_log(collect, &s, WEFT_LOG_DEBUG);
  emit_each_level();
  cr_assert_eq(s.n, 4);
  const char *want[] = {"an error 0", "a warning 1", "some info 2", "a detail 3"};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(s.level[i], i);
    cr_assert_str_eq(s.text[i], want[i]);
  }
}

Test(log, a_level_filters_the_messages_above_it) {
  for (int level = WEFT_LOG_ERROR; level <= WEFT_LOG_DEBUG; level++) {
    seen s = {0};
    weft_set_log(collect, &s, level);
    emit_each_level();
    cr_assert_eq(s.n, level + 1, "level %d let %d messages through", level, s.n);
    for (int i = 0; i < s.n; i++) cr_assert_leq(s.level[i], level);
  }
}

Test(log, the_default_level_is_warn_and_arguments_above_it_are_not_evaluated) {
  int evaluated = 0;
  uint64_t before = weft__log_formatted();
  WEFT_LOGF(WEFT_LOG_DEBUG, "%d", ++evaluated);
  WEFT_LOGF(WEFT_LOG_INFO, "%d", ++evaluated);
  cr_assert_eq(evaluated, 0, "a filtered message's arguments were evaluated");
  cr_assert_eq(weft__log_formatted(), before);
  cr_assert(weft_log_on(WEFT_LOG_WARN));
  cr_assert_not(weft_log_on(WEFT_LOG_INFO));
}

Test(log, a_null_hook_writes_to_stderr, .init = cr_redirect_stderr) {
  weft_set_log(NULL, NULL, WEFT_LOG_INFO);
  WEFT_LOGF(WEFT_LOG_INFO, "stream slot %u created", 3u);
  WEFT_LOGF(WEFT_LOG_DEBUG, "filtered");
  WEFT_LOGF(WEFT_LOG_ERROR, "poisoned");
  fflush(stderr);
  cr_assert_stderr_eq_str("weft: info: stream slot 3 created\nweft: error: poisoned\n");
}

Test(log, a_long_message_is_cut_not_refused) {
  seen s = {0};
  weft_set_log(collect, &s, WEFT_LOG_WARN);
  char big[2 * WEFT_LOG_MAX];
  memset(big, 'x', sizeof(big) - 1);
  big[sizeof(big) - 1] = '\0';
  WEFT_LOGF(WEFT_LOG_WARN, "%s", big);
  cr_assert_eq(s.n, 1);
  cr_assert_eq(strlen(s.text[0]), WEFT_LOG_MAX - 1);
}

Test(log, an_out_of_range_level_is_clamped_with_a_warning) {
  seen s = {0};
  weft_set_log(collect, &s, 9);
  cr_assert(weft_log_on(WEFT_LOG_DEBUG));
  cr_assert_eq(s.n, 1);
  cr_assert_eq(s.level[0], WEFT_LOG_WARN);
  cr_assert_not_null(strstr(s.text[0], "level 9 is not 0 (error) .. 3 (debug); 3 (debug)"), "%s",
                     s.text[0]);
  seen t = {0};
  weft_set_log(collect, &t, -4);
  cr_assert_not(weft_log_on(WEFT_LOG_WARN));
  cr_assert(weft_log_on(WEFT_LOG_ERROR));
  cr_assert_eq(t.n, 0, "at error, the warning about the level is itself filtered");
}

/* ---- WEFT_LOG ------------------------------------------------------------------------------ */

/* The level a device open applies with WEFT_LOG=|value| (this process's first read). */
static int level_after_open(const char *value) {
  cr_assert_eq(setenv("WEFT_LOG", value, 1), 0);
  weft__config_reload();
  env e = env_new();
  int level = atomic_load(&weft__log_level);
  env_close(&e);
  return level;
}

Test(log, weft_log_names_set_the_level_of_devices_opened_later) {
  static const struct {
    const char *value;
    int level;
  } cases[] = {{"error", 0}, {"warn", 1}, {"WARNING", 1}, {"Info", 2}, {"debug", 3}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    atomic_store(&weft__log_level, WEFT_LOG_WARN);
    cr_assert_eq(level_after_open(cases[i].value), cases[i].level, "WEFT_LOG=%s", cases[i].value);
  }
}

Test(log, the_old_boolean_values_keep_their_meaning) {
  static const struct {
    const char *value;
    int level;
  } cases[] = {{"1", WEFT_LOG_INFO},    {"yes", WEFT_LOG_INFO}, {"on", WEFT_LOG_INFO},
               {"true", WEFT_LOG_INFO}, {"0", WEFT_LOG_WARN},   {"off", WEFT_LOG_WARN},
               {"", WEFT_LOG_WARN}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    atomic_store(&weft__log_level, WEFT_LOG_WARN);
    cr_assert_eq(level_after_open(cases[i].value), cases[i].level, "WEFT_LOG='%s'", cases[i].value);
  }
}

Test(log, weft_log_at_info_prints_each_recorded_failure, .init = cr_redirect_stderr) {
  cr_assert_eq(setenv("WEFT_LOG", "1", 1), 0);
  env e = env_new();
  EXPECT_OK(weft_device_set_failpoints(e.dev, "launch#1=Generic"));
  weft_kernel k;
  EXPECT_OK(weft_kernel_host(e.dev, "bump", bump, NULL, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  const uint32_t g[3] = {1, 1, 1};
  EXPECT_OK(weft_launch(e.dev, 0, k, g, g, &bd, 1, NULL, 0));
  EXPECT_OK(weft_sync(e.dev, 0));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  env_close(&e);
  fflush(stderr);
  char out[4096] = "";
  FILE *f = cr_get_redirected_stderr();
  size_t n = fread(out, 1, sizeof(out) - 1, f);
  out[n] = '\0';
  cr_assert_not_null(strstr(out, "weft: info: failure #"), "%s", out);
}

Test(log, an_unknown_weft_log_value_is_reported_once_and_ignored) {
  seen s = {0};
  weft_set_log(collect, &s, WEFT_LOG_WARN);
  cr_assert_eq(setenv("WEFT_LOG", "loud", 1), 0);
  weft__config_reload();
  for (int i = 0; i < 3; i++) {
    env e = env_new();
    env_close(&e);
  }
  cr_assert_eq(s.n, 1, "%d warnings", s.n);
  cr_assert_eq(s.level[0], WEFT_LOG_WARN);
  cr_assert_str_eq(s.text[0], "WEFT_LOG='loud' is not error, warn, info or debug; it is ignored");
  cr_assert_eq(atomic_load(&weft__log_level), WEFT_LOG_WARN);
}

Test(log, weft_set_log_wins_over_weft_log) {
  seen s = {0};
  cr_assert_eq(setenv("WEFT_LOG", "debug", 1), 0);
  weft_set_log(collect, &s, WEFT_LOG_ERROR);
  env e = env_new();
  cr_assert_eq(atomic_load(&weft__log_level), WEFT_LOG_ERROR);
  env_close(&e);
}

/* ---- what the device logs ----------------------------------------------------------------- */

Test(log, a_device_logs_its_streaming_and_memory_decisions_at_info_and_debug) {
  seen s = {0};
  weft_set_log(collect, &s, WEFT_LOG_DEBUG);
  env e = env_new();
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 1, 4096, &b));
  uint64_t v = 7;
  EXPECT_OK(weft_buffer_write(e.dev, 1, b, 0, &v, sizeof(v)));
  EXPECT_OK(weft_sync(e.dev, 1));
  EXPECT_OK(weft_buffer_release(e.dev, b));
  EXPECT_OK(weft_memory_cleanup(e.dev, 1));
  env_close(&e);
  int opened = find(&s, "device opened: host backend");
  int stream = find(&s, "stream slot 1 created");
  int added = find(&s, "added: ");
  int released = find(&s, "released: ");
  cr_assert_geq(opened, 0);
  cr_assert_geq(stream, 0);
  cr_assert_geq(added, 0, "no page-added line");
  cr_assert_geq(released, 0, "no page-released line");
  cr_assert_eq(s.level[opened], WEFT_LOG_INFO);
  cr_assert_eq(s.level[stream], WEFT_LOG_INFO);
  cr_assert_eq(s.level[added], WEFT_LOG_DEBUG);
  cr_assert_lt(added, released);
}

/* ---- the launch path ---------------------------------------------------------------------- */

typedef struct opener {
  weft_device *dev;
} opener;

static void *open_gate_when_parked(void *arg) {
  opener *o = arg;
  weft_device_stats st;
  do {
    sched_yield();
    EXPECT_OK(weft_device_stats_get(o->dev, &st));
  } while (st.backpressure_waits == 0);
  atomic_store(&gate, 1);
  return NULL;
}

/* Launches that go through a back-pressure wait (a debug-only message
 * site on the submit path): returns the messages formatted meanwhile. */
static uint64_t launches_formatted(seen *s, uint64_t *waits) {
  env e;
  env_options(&e);
  e.opts.max_pending_commands = 8;
  env_open(&e);
  weft_kernel kh, k;
  EXPECT_OK(weft_kernel_host(e.dev, "hold", hold, NULL, &kh));
  EXPECT_OK(weft_kernel_host(e.dev, "bump", bump, NULL, &k));
  weft_buffer b;
  EXPECT_OK(weft_buffer_create(e.dev, 0, 64, &b));
  uint64_t zero = 0;
  EXPECT_OK(weft_buffer_write(e.dev, 0, b, 0, &zero, sizeof(zero)));
  EXPECT_OK(weft_sync(e.dev, 0)); /* the stream exists: its creation is not counted below */
  const uint32_t g[3] = {1, 1, 1};
  weft_binding bd = {b, 0, WEFT_WHOLE, WEFT_WRITE};
  s->n = 0;
  uint64_t before = weft__log_formatted();
  atomic_store(&gate, 0);
  opener op = {e.dev};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, open_gate_when_parked, &op), 0);
  EXPECT_OK(weft_launch(e.dev, 0, kh, g, g, NULL, 0, NULL, 0));
  for (int i = 0; i < 1000; i++) EXPECT_OK(weft_launch(e.dev, 0, k, g, g, &bd, 1, NULL, 0));
  pthread_join(t, NULL);
  EXPECT_OK(weft_sync(e.dev, 0));
  uint64_t formatted = weft__log_formatted() - before;
  weft_device_stats st;
  EXPECT_OK(weft_device_stats_get(e.dev, &st));
  *waits = st.backpressure_waits;
  uint64_t got = 0;
  EXPECT_OK(weft_buffer_read(e.dev, 0, b, 0, &got, sizeof(got)));
  cr_assert_eq(got, 1000);
  env_close(&e);
  return formatted;
}

Test(log, nothing_is_formatted_on_the_launch_path_at_the_default_level, .timeout = 60) {
  seen s = {0};
  weft_set_log(collect, &s, WEFT_LOG_WARN);
  uint64_t waits = 0;
  cr_assert_eq(launches_formatted(&s, &waits), 0);
  cr_assert_eq(s.n, 0);
  cr_assert_gt(waits, 0, "the debug-only back-pressure site was never reached");
  /* The same run at debug formats the back-pressure lines: the sites are live. */
  weft_set_log(collect, &s, WEFT_LOG_DEBUG);
  cr_assert_gt(launches_formatted(&s, &waits), 0);
  cr_assert_geq(find(&s, "back-pressure: a client waits for stream slot 0"), 0);
}
