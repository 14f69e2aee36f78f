/*
 * fuzz_tfrecord.c - libFuzzer target: TFRecord framing (both masked
 * CRC32Cs) and tf.train.Example decoding through protobuf-c.
 *
 * Input: one mode byte, then the records' payloads.  The framing's CRCs
 * would stop almost every mutation, so the target frames the input itself:
 * bit 0 clear: the rest is split at 0xFF bytes into Example payloads, each
 * framed with correct lengths and CRCs (the decoder is fuzzed); set: the
 * rest is the file as is (the framing is fuzzed).  Bit 1: gzip the file.
 * Oracles: fuzz_formats.h, read with the features "a:bytes,b:i64[-1],
 * c:f32[-1]" (raw records when built without protobuf-c).
 */
#include "fuzz_formats.h"
#include "io/tfrecord.h"

#include <zlib.h>

static int open_tf(const char *path, void *ud, sl_reader **out) {
  return sl_tfrecord_reader(path, ud, out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned mode = data[0];
  data++, size--;
  /* Each input byte may end a record: 16 bytes of framing per byte. */
  unsigned char *file = malloc(17 * size + 64);
  FUZZ_CHECK(file != NULL, "out of memory");
  size_t n = 0;
  if (mode & 1) {
    memcpy(file, data, size);
    n = size;
  } else {
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
      if (i < size && data[i] != 0xFF) continue;
      size_t l = i - start;
      sl__put64(file + n, l);
      sl__put32(file + n + 8, sl__tfrecord_mask(sl__crc32c(0, file + n, 8)));
      memcpy(file + n + 12, data + start, l);
      sl__put32(file + n + 12 + l,
                sl__tfrecord_mask(sl__crc32c(0, data + start, l)));
      n += 16 + l;
      start = i + 1;
    }
  }
  const char *path;
  if (mode & 2) {
    uLongf zn = compressBound((uLong)n) + 64;
    unsigned char *z = malloc(zn);
    FUZZ_CHECK(z != NULL, "out of memory");
    z_stream s;
    memset(&s, 0, sizeof s);
    FUZZ_CHECK(deflateInit2(&s, 1, Z_DEFLATED, 9 + 16, 1, Z_DEFAULT_STRATEGY) ==
                   Z_OK,
               "deflateInit2");
    s.next_in = file;
    s.avail_in = (uInt)n;
    s.next_out = z;
    s.avail_out = (uInt)zn;
    FUZZ_CHECK(deflate(&s, Z_FINISH) == Z_STREAM_END, "deflate");
    path = fuzz_file(0, z, zn - s.avail_out);
    deflateEnd(&s);
    free(z);
  } else {
    path = fuzz_file(0, file, n);
  }
  free(file);
  sl_tfrecord_opts o = SL_TFRECORD_OPTS_INIT;
  if (sl__tf_can_decode()) o.features = "a:bytes,b:i64[-1],c:f32[-1]";
  fuzz_two_passes("tfrecord", open_tf, path, &o);
  return 0;
}
