/*
 * fuzz_idx.c - libFuzzer target: the idx parser (MNIST's format, plain or
 * gzip) and the `idx` reader over an images file and a labels file.
 *
 * Input: one mode byte, then the content.
 *   bit 0   reader mode: a little-endian u16 L, then the images file (L
 *           bytes) and the labels file (the rest), read with sl_idx_reader
 *           for two passes; clear: one file loaded with sl__idx_load_limit
 *   bit 1   gzip the file(s) here first, so mutations of the content still
 *           go through zlib (gzipped seeds fuzz the gzip layer itself)
 * Oracles: only documented errors; a loaded file holds dims[0] items of
 * item_bytes, every byte readable; the reader yields exactly one sample per
 * item, each fitting its schema, the same in both passes.
 */
#include "fuzz_util.h"
#include "formats/idx.h"

#include <zlib.h>

/* Single-file mode refuses headers declaring more (keeps inputs cheap). */
#define FUZZ_IDX_MAX_BYTES ((uint64_t)1 << 20)

/* gzip of data[0..n) in a malloc'd buffer. */
static unsigned char *gzip(const uint8_t *data, size_t n, size_t *out_n) {
  z_stream z;
  memset(&z, 0, sizeof z);
  /* The smallest window and hash: the inputs are small, and a big deflate
   * state (fresh pages under ASan) costs more than the parse itself. */
  FUZZ_CHECK(deflateInit2(&z, 1, Z_DEFLATED, 9 + 16, 1, Z_DEFAULT_STRATEGY) ==
                 Z_OK,
             "deflateInit2");
  size_t cap = deflateBound(&z, (uLong)n) + 32;
  unsigned char *b = malloc(cap);
  FUZZ_CHECK(b != NULL, "out of memory");
  z.next_in = (Bytef *)data;
  z.avail_in = (uInt)n;
  z.next_out = b;
  z.avail_out = (uInt)cap;
  FUZZ_CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END, "deflate");
  *out_n = cap - z.avail_out;
  deflateEnd(&z);
  return b;
}

static const char *put_file(int slot, const uint8_t *data, size_t n, bool gz) {
  if (!gz) return fuzz_file(slot, data, n);
  size_t zn;
  unsigned char *z = gzip(data, n, &zn);
  const char *path = fuzz_file(slot, z, zn);
  free(z);
  return path;
}

static void load_one(const char *path) {
  sl__idx x;
  int rc = sl__idx_load_limit(path, FUZZ_IDX_MAX_BYTES, &x);
  FUZZ_DEBUG("idx load: %s %s\n", sl_err_name(rc),
             rc < 0 ? sl_last_error() : "");
  if (rc < 0) {
    fuzz_expect_error(rc, "idx load", SL_ECORRUPT, SL_EINVAL, SL_EIO, 0);
    FUZZ_CHECK(strstr(sl_last_error(), path) != NULL,
               "idx load: the message does not name the file");
    return;
  }
  FUZZ_CHECK(x.rank >= 1 && x.rank <= SL_MAX_RANK, "rank %d", x.rank);
  FUZZ_CHECK(x.count == x.dims[0], "count %llu, dims[0] %u",
             (unsigned long long)x.count, x.dims[0]);
  uint64_t item = sl_dtype_size(x.dtype);
  for (int d = 1; d < x.rank; d++)
    item *= x.dims[d];
  FUZZ_CHECK(item == x.item_bytes, "item bytes %zu, dims say %llu",
             x.item_bytes, (unsigned long long)item);
  FUZZ_CHECK(sl_buffer_size(x.data) == x.count * x.item_bytes,
             "buffer of %zu bytes for %llu items of %zu",
             sl_buffer_size(x.data), (unsigned long long)x.count, x.item_bytes);
  fuzz_sink = fuzz_hash(0, sl_buffer_data(x.data), sl_buffer_size(x.data));
  sl__idx_free(&x);
}

static void read_pair(const char *images, const char *labels) {
  sl_reader *r;
  int rc = sl_idx_reader(images, labels, &r);
  FUZZ_DEBUG("idx reader: %s %s\n", sl_err_name(rc),
             rc < 0 ? sl_last_error() : "");
  if (rc < 0) {
    fuzz_expect_error(rc, "idx reader", SL_ECORRUPT, SL_EINVAL, SL_EIO, 0);
    return;
  }
  const sl_schema *schema = sl_reader_schema(r);
  uint64_t count0 = 0, hash0 = 0;
  for (int pass = 0; pass < 2; pass++) {
    uint64_t count = 0, hash = 0;
    sl_sample *s;
    while ((rc = sl_reader_next(r, &s)) == SL_OK) {
      hash = hash * 31 + fuzz_touch_sample(schema, s);
      sl_sample_release(s);
      count++;
    }
    FUZZ_CHECK(rc == SL_EOF, "idx reader: pass ended with %s", sl_err_name(rc));
    if (pass == 0) {
      count0 = count, hash0 = hash;
    } else {
      FUZZ_CHECK(count == count0 && hash == hash0,
                 "idx reader: the second pass differs");
    }
    FUZZ_CHECK(sl_reader_reset(r) == SL_OK, "idx reader: reset failed");
  }
  sl_reader_destroy(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned mode = data[0];
  data++, size--;
  bool gz = (mode & 2) != 0;
  if (mode & 1) {
    size_t split = size >= 2 ? (size_t)(data[0] | data[1] << 8) : 0;
    const uint8_t *p = data + (size >= 2 ? 2 : size);
    size_t rest = size >= 2 ? size - 2 : 0;
    if (split > rest) split = rest;
    const char *images = put_file(0, p, split, gz);
    const char *labels = put_file(1, p + split, rest - split, gz);
    read_pair(images, labels);
  } else {
    load_one(put_file(0, data, size, gz));
  }
  sl_clear_error();
  return 0;
}
