/*
 * fuzz_npy.c - libFuzzer target: the .npy header parser and the npy:
 * reader over .npy and .npz (zip, stored and deflated) files.
 *
 * Input: the file's bytes.  Oracles: fuzz_formats.h; a header that parses
 * describes elements that fit the input.
 */
#include "fuzz_formats.h"
#include "io/npy.h"

static int open_npy(const char *path, void *ud, sl_reader **out) {
  (void)ud;
  return sl_npy_reader(path, NULL, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__npy h;
  if (sl__npy_parse("fuzz", data, size, &h) == SL_OK)
    FUZZ_CHECK(h.data_off <= size && h.nbytes <= size - h.data_off,
               "npy: elements past the end");
  else
    fuzz_expect_error(sl_last_error_code(), "npy parse", SL_ECORRUPT,
                      SL_EUNSUPPORTED, 0);
  fuzz_two_passes("npy", open_npy, fuzz_file(0, data, size), NULL);
  return 0;
}
