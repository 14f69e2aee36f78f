/*
 * tar_writer.c - writing tar archives for `sluice pack images --format
 * wds` (tar.h): ustar headers, a GNU long-name record before a member
 * whose name exceeds 100 bytes, members padded to 512 bytes, two zero
 * blocks at the end (what GNU tar and Python's tarfile read).  Metadata is
 * fixed (mode 0644, owner 0, mtime 0), so the same input gives the same
 * bytes.  The archive is an output file (output.h): written under its
 * temporary name, the set renames it.
 */
#include "formats/tar.h"

#define BLOCK 512

static void octal(unsigned char *f, size_t len, uint64_t v) {
  /* len - 1 digits and a NUL */
  for (size_t i = len - 1; i-- > 0;) {
    f[i] = (unsigned char)('0' + (v & 7));
    v >>= 3;
  }
  f[len - 1] = 0;
}

static int put_header(sl__out_file *f, const char *name, size_t nl,
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
  return sl__out_write(f, h, BLOCK);
}

static int put_data(sl__out_file *f, const void *data, size_t n) {
  static const unsigned char zero[BLOCK];
  if (n) SL_FORWARD_IF_ERROR(sl__out_write(f, data, n));
  size_t pad = (BLOCK - n % BLOCK) % BLOCK;
  return pad ? sl__out_write(f, zero, pad) : SL_OK;
}

int sl__tar_write_member(sl__out_file *f, const char *name, const void *data,
                         size_t n) {
  size_t nl = strlen(name);
  if (nl > 100) {
    SL_FORWARD_IF_ERROR(put_header(f, "././@LongLink", 13, nl + 1, 'L'));
    SL_FORWARD_IF_ERROR(put_data(f, name, nl + 1));
  }
  SL_FORWARD_IF_ERROR(put_header(f, name, nl, n, '0'));
  return put_data(f, data, n);
}

int sl__tar_write_end(sl__out_file *f) {
  static const unsigned char zero[2 * BLOCK];
  return sl__out_write(f, zero, sizeof zero);
}
