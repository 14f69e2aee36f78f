/*
 * fuzz_npy.c - libFuzzer target: the .npy header parser (npy.c, the one
 * parser of it), the npy: reader over .npy and .npz (zip, stored and
 * deflated) files, and the tokens: reader's .npy shards (whose header goes
 * through the same parser).
 *
 * Input: the file's bytes.  Oracles: fuzz_formats.h; a header that parses
 * describes elements that fit the input; the tokens: reader accepts a .npy
 * only when the parser does, as a 1-D u2/u4 array exactly filling the
 * file, and then reads two equal passes of windows.
 */
#include "fuzz_formats.h"
#include "formats/npy.h"

static int open_npy(const char *path, void *ud, sl_reader **out) {
  (void)ud;
  return sl_npy_reader(path, NULL, out);
}

static int open_tokens(const char *path, void *ud, sl_reader **out) {
  (void)ud;
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  o.seq_len = 3;
  return sl_tokens_reader(&path, 1, &o, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  sl__npy h;
  bool ok = sl__npy_parse("fuzz", data, size, &h) == SL_OK;
  if (ok)
    FUZZ_CHECK(h.data_off <= size && h.nbytes <= size - h.data_off,
               "npy: elements past the end");
  else
    fuzz_expect_error(sl_last_error_code(), "npy parse", SL_ECORRUPT,
                      SL_EUNSUPPORTED, 0);
  const char *path = fuzz_file(0, data, size);
  fuzz_two_passes("npy", open_npy, path, NULL);
  if (size >= 6 && memcmp(data, "\x93NUMPY", 6) == 0) {
    int rc = fuzz_two_passes("tokens", open_tokens, path, NULL);
    if (rc == SL_OK)
      FUZZ_CHECK(ok && h.rank == 1 &&
                     (h.dtype == SL_U16 || h.dtype == SL_U32) &&
                     h.data_off + h.nbytes == size,
                 "tokens: accepted a .npy the header parser does not "
                 "describe as a 1-D u2/u4 array filling the file");
    else
      FUZZ_CHECK(rc == SL_ECORRUPT || rc == SL_EIO,
                 "tokens: %s for a .npy (documented: SL_ECORRUPT)",
                 sl_err_name(rc));
  }
  return 0;
}
