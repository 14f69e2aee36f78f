/*
 * fuzz_tar.c - libFuzzer target: the tar walker (ustar, GNU long names,
 * pax) and the wds: reader grouping its members into samples.
 *
 * Input: the tar file.  Oracles: fuzz_formats.h; every member the walker
 * returns lies inside the input.
 */
#include "fuzz_formats.h"
#include "io/tar.h"

static int open_wds(const char *path, void *ud, sl_reader **out) {
  (void)ud;
  return sl_wds_reader(path, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__tar t;
  sl__tar_init(&t, data, size);
  int rc, n = 0;
  while (n++ < 4096 && (rc = sl__tar_next(&t, "fuzz")) == SL_OK)
    FUZZ_CHECK(t.data <= size && t.size <= size - t.data && t.name,
               "tar: member past the end");
  if (rc < 0 && rc != SL_EOF) fuzz_expect_error(rc, "tar walk", SL_ECORRUPT, 0);
  sl__tar_fini(&t);
  fuzz_two_passes("wds", open_wds, fuzz_file(0, data, size), NULL);
  return 0;
}
