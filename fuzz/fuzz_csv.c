/*
 * fuzz_csv.c - libFuzzer target: the RFC 4180 parser and the csv: reader.
 *
 * Input: one mode byte (bit 0: delimiter ';' instead of ','; bit 1: the
 * columns option "a:f32,b:i64,c:bytes" instead of guessing; bit 2: no
 * header, with columns "a,b,c"), then the file.  Oracles: fuzz_formats.h.
 */
#include "fuzz_formats.h"

static int open_csv(const char *path, void *ud, sl_reader **out) {
  return sl_csv_reader(path, ud, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned mode = data[0];
  sl_csv_opts o = SL_CSV_OPTS_INIT;
  if (mode & 1) o.delimiter = ';';
  if (mode & 2) o.columns = "a:f32,b:i64,c:bytes";
  if (mode & 4) {
    o.no_header = 1;
    o.columns = "a,b,c";
  }
  fuzz_two_passes("csv", open_csv, fuzz_file(0, data + 1, size - 1), &o);
  return 0;
}
