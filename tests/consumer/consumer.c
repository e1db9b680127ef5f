/* An out-of-tree consumer of weft: built by scripts/consumer.sh against a
 * fresh install prefix, with find_package(weft) (shared and static) and with
 * pkg-config, and with weft embedded by add_subdirectory. It opens a host device, writes a
 * buffer, launches a host kernel, reads the result back and checks it, then
 * formats a failed read's error with its backtrace. */
#include <weft/weft.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 1024u

static int fail(const char *what, weft_status st) {
  char msg[1024];
  weft_error_format(st, msg, sizeof msg);
  fprintf(stderr, "consumer: %s: %s\n", what, msg);
  weft_error_free(st);
  return 1;
}

/* y[i] = 2 * x[i] + 1, one block of 256 threads' worth of elements per call. */
static weft_status affine(const weft_kernel_ctx *ctx, void *user) {
  (void)user;
  const float *x = ctx->buffers[0];
  float *y = ctx->buffers[1];
  size_t per = ctx->block[0];
  size_t first = (size_t)ctx->block_idx[0] * per;
  for (size_t i = first; i < first + per && i < ctx->sizes[1] / sizeof(float); i++)
    y[i] = 2.0f * x[i] + 1.0f;
  return NULL;
}

static weft_status refuse(const weft_kernel_ctx *ctx, void *user) {
  (void)ctx;
  (void)user;
  return weft_error_make(WEFT_ERR_GENERIC, "consumer: injected failure");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0); /* each line out before anything that could crash */
  printf("consumer: weft %s (header %d.%d.%d), default allocator %s\n", weft_version(),
         WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH,
         weft_allocator_default_is_jemalloc() ? "jemalloc" : "libc");
  weft_device *dev = NULL;
  weft_status st = weft_device_open(NULL, &dev);
  if (st) return fail("open", st);

  weft_kernel k_affine, k_refuse;
  if ((st = weft_kernel_host(dev, "affine", affine, NULL, &k_affine))) return fail("kernel", st);
  if ((st = weft_kernel_host(dev, "refuse", refuse, NULL, &k_refuse))) return fail("kernel", st);

  float *host = malloc(N * sizeof(float));
  if (!host) return 1;
  for (unsigned i = 0; i < N; i++) host[i] = (float)i;

  weft_buffer x, y, z;
  if ((st = weft_buffer_create(dev, 0, N * sizeof(float), &x))) return fail("create x", st);
  if ((st = weft_buffer_create(dev, 0, N * sizeof(float), &y))) return fail("create y", st);
  if ((st = weft_buffer_create(dev, 1, N * sizeof(float), &z))) return fail("create z", st);
  if ((st = weft_buffer_write(dev, 0, x, 0, host, N * sizeof(float)))) return fail("write", st);

  weft_binding b[] = {{x, 0, WEFT_WHOLE, WEFT_READ}, {y, 0, WEFT_WHOLE, WEFT_WRITE}};
  if ((st = weft_launch(dev, 0, k_affine, (uint32_t[3]){N / 256, 1, 1}, (uint32_t[3]){256, 1, 1},
                        b, 2, NULL, 0)))
    return fail("launch", st);
  memset(host, 0, N * sizeof(float));
  if ((st = weft_buffer_read(dev, 0, y, 0, host, N * sizeof(float)))) return fail("read", st);
  for (unsigned i = 0; i < N; i++) {
    if (host[i] != 2.0f * (float)i + 1.0f) {
      fprintf(stderr, "consumer: y[%u] = %g, expected %g\n", i, host[i], 2.0 * i + 1.0);
      return 1;
    }
  }
  printf("consumer: host kernel result checked (%u floats)\n", N);

  /* A launch that fails: reading its output reports the root error. */
  weft_binding bz[] = {{z, 0, WEFT_WHOLE, WEFT_WRITE}};
  if ((st = weft_launch(dev, 1, k_refuse, (uint32_t[3]){1, 1, 1}, (uint32_t[3]){1, 1, 1}, bz, 1,
                        NULL, 0)))
    return fail("launch refuse", st);
  st = weft_buffer_read(dev, 1, z, 0, host, N * sizeof(float));
  if (!st) {
    fprintf(stderr, "consumer: reading a failed launch's output succeeded\n");
    return 1;
  }
  size_t need = weft_error_format_backtrace(st, NULL, 0);
  char *text = malloc(need + 1);
  if (!text) return 1;
  if (weft_error_format_backtrace(st, text, need + 1) != need || strlen(text) != need ||
      !strstr(text, "consumer: injected failure")) {
    fprintf(stderr, "consumer: unexpected report:\n%s\n", text);
    return 1;
  }
  printf("consumer: failed read reported (%s), backtrace report of %zu bytes\n",
         weft_error_kind_name(weft_error_kind_of(st)), need);
  free(text);
  weft_error_free(st);

  if ((st = weft_buffer_release(dev, x)) || (st = weft_buffer_release(dev, y)) ||
      (st = weft_buffer_release(dev, z)))
    return fail("release", st);
  weft_device_close(dev);
  free(host);
  printf("consumer: ok\n");
  return 0;
}
