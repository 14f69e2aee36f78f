/* resume_fixture.h - helpers of the resume tests of the sources
 * (test_resume_sources.c, test_resume_open.c). */
#ifndef SLUICE_TEST_RESUME_FIXTURE_H
#define SLUICE_TEST_RESUME_FIXTURE_H

#include "test.h"
#include "test_util.h"

#include <stdio.h>

/* Flips a byte inside the payload of chunk c of the SLR file at p, so that
 * the chunk fails its CRC (a policy skip_chunk reader skips it). */
static inline void fix_corrupt_chunk(const char *p, uint64_t c) {
  sl_slr_file *f;
  if (sl_slr_open(p, NULL, &f) != SL_OK)
    test_fail(__FILE__, __LINE__, "open: %s", sl_last_error());
  sl_slr_chunk_info info;
  if (sl_slr_chunk_info_get(f, c, &info) != SL_OK)
    test_fail(__FILE__, __LINE__, "chunk info: %s", sl_last_error());
  sl_slr_close(f);
  FILE *fp = fopen(p, "r+b");
  if (!fp) test_fail(__FILE__, __LINE__, "cannot open %s", p);
  long at = (long)(info.offset + info.stored_size / 2 + 40);
  fseek(fp, at, SEEK_SET);
  int ch = fgetc(fp);
  fseek(fp, at, SEEK_SET);
  fputc(ch ^ 0x5a, fp);
  fclose(fp);
}

#endif
