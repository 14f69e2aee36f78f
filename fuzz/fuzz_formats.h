/*
 * fuzz_formats.h - what the fuzz targets of other programs' formats share
 * (fuzz_npy.c, fuzz_csv.c, fuzz_tar.c): the input becomes a file (memfd),
 * opened by a reader constructor, read for two passes; the oracles are
 * fuzz_util.h's (documented errors with messages, samples that fit their
 * schema and can be read in full) plus: both passes give the same samples
 * and end the same way.
 */
#ifndef SLUICE_FUZZ_FORMATS_H
#define SLUICE_FUZZ_FORMATS_H

#include "fuzz_util.h"

/* Samples read per pass at most. */
#define FUZZ_FORMATS_MAX 2048

typedef int (*fuzz_open_fn)(const char *path, void *ud, sl_reader **out);

/* Opens `path` with `open` and reads two passes; returns the open code. */
FUZZ_FN int fuzz_two_passes(const char *what, fuzz_open_fn open,
                            const char *path, void *ud) {
  sl_reader *r = NULL;
  int rc = open(path, ud, &r);
  if (rc < 0) {
    fuzz_expect_error(rc, what, SL_EINVAL, SL_ECORRUPT, SL_EUNSUPPORTED, SL_EIO,
                      0);
    return rc;
  }
  const sl_schema *sc = sl_reader_schema(r);
  uint64_t hash[2] = {0, 0}, count[2] = {0, 0};
  int end[2] = {0, 0};
  for (int pass = 0; pass < 2; pass++) {
    sl_sample *s;
    while (count[pass] < FUZZ_FORMATS_MAX &&
           (rc = sl_reader_next(r, &s)) == SL_OK) {
      hash[pass] = fuzz_hash(hash[pass] ^ fuzz_touch_sample(sc, s), "", 0);
      count[pass]++;
      sl_sample_release(s);
    }
    end[pass] = count[pass] == FUZZ_FORMATS_MAX ? SL_OK : rc;
    if (rc < 0 && rc != SL_EOF) {
      fuzz_expect_error(rc, what, SL_EINVAL, SL_ECORRUPT, SL_EUNSUPPORTED, 0);
    }
    if (sl_reader_reset(r) < 0) break;
  }
  FUZZ_CHECK(count[0] == count[1] && hash[0] == hash[1] && end[0] == end[1],
             "%s: two passes differ: %llu/%llu samples, end %s/%s", what,
             (unsigned long long)count[0], (unsigned long long)count[1],
             sl_err_name(end[0]), sl_err_name(end[1]));
  sl_reader_destroy(r);
  return SL_OK;
}

#endif
