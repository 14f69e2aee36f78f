/*
 * consumer.c - a program outside the project built against an INSTALLED
 * sluice (tests/install/run.sh builds it with pkg-config and with
 * find_package).  It uses only the public header and the shared library:
 * the version, and a tiny pipeline range(10) -> batch(4), checking that the
 * batches carry 0..9 in order with a partial last batch.
 */
#include <sluice.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what, int rc) {
  fprintf(stderr, "consumer: %s failed: %s (%s)\n", what, sl_err_name(rc),
          sl_last_error());
  return 1;
}

int main(void) {
  if (strcmp(sl_version(), SL_VERSION_STRING) != 0) {
    fprintf(stderr, "consumer: header %s but library %s\n", SL_VERSION_STRING,
            sl_version());
    return 1;
  }

  sl_reader *range = NULL, *r = NULL;
  int rc = sl_reader_range(10, &range);
  if (rc != SL_OK) return fail("sl_reader_range", rc);
  rc = sl_batch(range, 4, NULL, &r); /* takes `range`, also on failure */
  if (rc != SL_OK) return fail("sl_batch", rc);

  int64_t expect = 0, batches = 0;
  sl_sample *s = NULL;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    const sl_tensor *t = sl_sample_field(s, "i");
    if (t == NULL || t->dtype != SL_I64 || t->rank != 1) {
      fprintf(stderr, "consumer: batch %lld has no i64[n] field 'i'\n",
              (long long)batches);
      sl_sample_release(s);
      sl_reader_destroy(r);
      return 1;
    }
    const int64_t *v = t->data;
    for (int64_t k = 0; k < t->shape[0]; k++) {
      if (v[k] != expect) {
        fprintf(stderr, "consumer: got %lld, expected %lld\n", (long long)v[k],
                (long long)expect);
        sl_sample_release(s);
        sl_reader_destroy(r);
        return 1;
      }
      expect++;
    }
    batches++;
    sl_sample_release(s);
  }
  sl_reader_destroy(r);
  if (rc != SL_EOF) return fail("sl_reader_next", rc);
  if (expect != 10 || batches != 3) {
    fprintf(stderr,
            "consumer: %lld samples in %lld batches, expected 10 in 3\n",
            (long long)expect, (long long)batches);
    return 1;
  }
  printf("consumer: sluice %s, range(10) -> batch(4): %lld batches ok\n",
         sl_version(), (long long)batches);
  return 0;
}
