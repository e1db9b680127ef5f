/* The CUDA suites' hold on the driver they run against: $WEFT_CUDA_DRIVER,
 * else the fake driver built in tests/fake_cuda (FAKE_CUDA_PATH), and the
 * fake's control API when the loaded library has it (a real driver: the
 * tests that need it skip, saying so). Include after fake_cuda_control.h. */
#ifndef WEFT_TESTS_SUPPORT_FAKE_CUDA_FIXTURE_H
#define WEFT_TESTS_SUPPORT_FAKE_CUDA_FIXTURE_H

#include <dlfcn.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

static void *keep;   /* our handle on the driver: its control API, and never unmapped early */
static bool is_fake; /* the loaded driver has the fake's control API */
static fake_cuda_fail_next_fn fail_next;
static fake_cuda_fault_fn fault;
static fake_cuda_reset_fn fake_reset;
static fake_cuda_stat_fn stat_of;

static const char *driver_path(void) {
  const char *p = getenv("WEFT_CUDA_DRIVER");
  return p && *p ? p : FAKE_CUDA_PATH;
}

static void *fake_sym(const char *name) {
  return keep ? dlsym(keep, name) : NULL;
}

/* dlopens the driver at |path| (skips the test when there is none) and
 * resolves the fake's control API when it has one. Resets nothing. */
static void fake_cuda_open(const char *path) {
  keep = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!keep) cr_skip_test("no CUDA driver at %s: %s", path, dlerror());
  void *p = fake_sym("fake_cuda_reset");
  is_fake = p != NULL;
  if (!is_fake) return;
  memcpy(&fake_reset, &p, sizeof p);
  p = fake_sym("fake_cuda_fail_next");
  memcpy(&fail_next, &p, sizeof p);
  p = fake_sym("fake_cuda_fault");
  memcpy(&fault, &p, sizeof p);
  p = fake_sym("fake_cuda_stat");
  memcpy(&stat_of, &p, sizeof p);
}

static void need_fake(const char *why) {
  if (!is_fake) cr_skip_test("needs the fake driver's control API (%s)", why);
}

#endif
