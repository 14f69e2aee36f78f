/*
 * fuzz_slr.c - libFuzzer target: an SLR file as it lies on disk, read from
 * memory through the file API and the `slr` reader (fuzz_slr_common.h).
 *
 * Input: one mode byte, then the file.
 *   bit 0   repair the CRCs first (fuzz_slr_fix_crcs), so mutations reach
 *           the checks behind the checksums; clear: the raw bytes, so the
 *           checksum paths themselves are fuzzed
 *   bit 1   corruption policy skip_chunk (else fail)
 *   bits 4-5  max_bad_chunks (0 = the default, 16)
 * Seeds: tests/data/golden-v1.slr and small generated files, in both modes
 * (fuzz/make_seeds.c).
 */
#include "fuzz_slr_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned mode = data[0];
  size_t n = size - 1;
  unsigned char *buf = malloc(n ? n : 1);
  FUZZ_CHECK(buf != NULL, "out of memory");
  if (n) memcpy(buf, data + 1, n);
  if (mode & 1) fuzz_slr_fix_crcs(buf, n);
  uint64_t pick = fuzz_hash(14695981039346656037ull, data, size);
  fuzz_slr_run(buf, n, (mode & 2) ? SL_CORRUPT_SKIP_CHUNK : SL_CORRUPT_FAIL,
               (mode >> 4) & 3, pick);
  free(buf);
  sl_clear_error();
  return 0;
}
