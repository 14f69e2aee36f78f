/*
 * fuzz_tar.c - libFuzzer target: the tar walker (ustar, GNU long names,
 * pax) over memory and over a byte source (as the wds: reader walks a URL's
 * shards), and the wds: reader grouping its members into samples.
 *
 * Input: the tar file.  Oracles: fuzz_formats.h; every member the walker
 * returns lies inside the input; the walk through a source gives the same
 * members (name, header, data, size) and ends the same way as the walk
 * over memory, except that a source refuses a long-name or pax record over
 * 1 MiB (which it would have to read into memory).
 */
#include "fuzz_formats.h"
#include "formats/tar.h"

static int open_wds(const char *path, void *ud, sl_reader **out) {
  (void)ud;
  return sl_wds_reader(path, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__tar t, u;
  sl__source *src = fuzz_mem_source_new(data, size, "fuzz-src");
  sl__tar_init(&t, data, size);
  sl__tar_init_source(&u, src);
  int rc, ru, n = 0;
  while (n++ < 4096) {
    rc = sl__tar_next(&t, "fuzz");
    ru = sl__tar_next(&u, "fuzz");
    if (ru < 0 && ru != SL_EOF)
      fuzz_expect_error(ru, "tar walk (source)", SL_ECORRUPT, SL_EIO, 0);
    if (rc != SL_OK) break;
    FUZZ_CHECK(t.data <= size && t.size <= size - t.data && t.name,
               "tar: member past the end");
    if (ru == SL_ECORRUPT && strstr(sl_last_error(), "more than")) break;
    FUZZ_CHECK(ru == SL_OK && strcmp(t.name, u.name) == 0 &&
                   t.header == u.header && t.data == u.data &&
                   t.size == u.size,
               "tar: member %d differs through a source (%s)", n,
               sl_err_name(ru));
  }
  if (rc < 0 && rc != SL_EOF) fuzz_expect_error(rc, "tar walk", SL_ECORRUPT, 0);
  if (rc != SL_OK)
    FUZZ_CHECK(ru == rc || (ru == SL_ECORRUPT &&
                            strstr(sl_last_error(), "more than")),
               "tar: the walk ends %s over memory, %s through a source",
               sl_err_name(rc), sl_err_name(ru));
  sl__tar_fini(&t);
  sl__tar_fini(&u);
  sl__source_close(src);
  fuzz_two_passes("wds", open_wds, fuzz_file(0, data, size), NULL);
  return 0;
}
