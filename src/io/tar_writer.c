/*
 * tar_writer.c - writing tar archives for `sluice pack images --format
 * wds` (tar.h): ustar headers, a GNU long-name record before a member
 * whose name exceeds 100 bytes, members padded to 512 bytes, two zero
 * blocks at the end (what GNU tar and Python's tarfile read).  Metadata is
 * fixed (mode 0644, owner 0, mtime 0), so the same input gives the same
 * bytes.
 */
#include "io/tar.h"

#include <errno.h>
#include <stdio.h>

#define BLOCK 512

static void octal(unsigned char *f, size_t len, uint64_t v) {
  /* len - 1 digits and a NUL */
  for (size_t i = len - 1; i-- > 0;) {
    f[i] = (unsigned char)('0' + (v & 7));
    v >>= 3;
  }
  f[len - 1] = 0;
}

static int put_header(FILE *f, const char *what, const char *name, size_t nl,
                      uint64_t size, char type) {
  unsigned char h[BLOCK];
  memset(h, 0, sizeof h);
  memcpy(h, name, nl < 100 ? nl : 100);
  octal(h + 100, 8, 0644);
  octal(h + 108, 8, 0);
  octal(h + 116, 8, 0);
  if (size < (1ull << 33)) {
    octal(h + 124, 12, size);
  } else { /* GNU base-256 */
    h[124] = 0x80;
    for (int i = 11; i >= 1; i--, size >>= 8)
      h[124 + i] = (unsigned char)size;
  }
  octal(h + 136, 12, 0);
  memset(h + 148, ' ', 8);
  h[156] = (unsigned char)type;
  memcpy(h + 257, "ustar", 6); /* POSIX: "ustar\0" "00" */
  memcpy(h + 263, "00", 2);
  unsigned sum = 0;
  for (int i = 0; i < BLOCK; i++)
    sum += h[i];
  octal(h + 148, 7, sum);
  h[155] = ' ';
  SL_RETURN_ERROR_IF(fwrite(h, 1, BLOCK, f) != BLOCK, SL_EIO,
                     "tar: %s: write: %s", what, strerror(errno));
  return SL_OK;
}

static int put_data(FILE *f, const char *what, const void *data, size_t n) {
  static const unsigned char zero[BLOCK];
  SL_RETURN_ERROR_IF(n && fwrite(data, 1, n, f) != n, SL_EIO,
                     "tar: %s: write: %s", what, strerror(errno));
  size_t pad = (BLOCK - n % BLOCK) % BLOCK;
  SL_RETURN_ERROR_IF(pad && fwrite(zero, 1, pad, f) != pad, SL_EIO,
                     "tar: %s: write: %s", what, strerror(errno));
  return SL_OK;
}

int sl__tar_write_member(FILE *f, const char *what, const char *name,
                         const void *data, size_t n) {
  size_t nl = strlen(name);
  if (nl > 100) {
    SL_FORWARD_IF_ERROR(put_header(f, what, "././@LongLink", 13, nl + 1, 'L'));
    SL_FORWARD_IF_ERROR(put_data(f, what, name, nl + 1));
  }
  SL_FORWARD_IF_ERROR(put_header(f, what, name, nl, n, '0'));
  return put_data(f, what, data, n);
}

int sl__tar_write_end(FILE *f, const char *what) {
  static const unsigned char zero[2 * BLOCK];
  SL_RETURN_ERROR_IF(fwrite(zero, 1, sizeof zero, f) != sizeof zero, SL_EIO,
                     "tar: %s: write: %s", what, strerror(errno));
  return SL_OK;
}
