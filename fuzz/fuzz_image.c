/*
 * fuzz_image.c - libFuzzer target: the image decoder entry point
 * (sl_image_decode: JPEG through TurboJPEG, PNG through libspng, the
 * resize kernels, the declared-shape check).
 *
 * Input: one mode byte, then the encoded image.
 *   bits 0-1  channels: 0 as stored, 1 gray, 2 -> 3 (RGB), 3 -> 1 (gray)
 *   bit 2     resize to 13 x 17 (height x width)
 *   bit 3     with bit 2: bilinear, else nearest; without bit 2: declare
 *             the height and width 28 x 28 (checked, SL_ESHAPE otherwise)
 * Oracles: only documented errors (SL_ECORRUPT, SL_ESHAPE), each with a
 * message naming the image; a decoded image is u8 [H, W, C] with the
 * channels asked, the resize size when resizing, the declared size when
 * declared, nbytes = H * W * C, every byte readable; decoding the same
 * bytes twice gives the same pixels.
 *
 * Seeds (fuzz/corpus/image/): small gray and RGB PNGs and JPEGs made with
 * the encoders of tests/image_fixture.h (libspng, TurboJPEG) from a
 * Fashion-MNIST image, and truncated copies.
 */
#include "fuzz_util.h"

#include "image/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  unsigned mode = data[0];
  data++;
  size--;
  static const int channels[4] = {0, 1, 3, 1};
  sl_image_shape shape = {channels[mode & 3], 0, 0, SL_RESIZE_NONE};
  if (mode & 4) {
    shape.height = 13;
    shape.width = 17;
    shape.resize = mode & 8 ? SL_RESIZE_BILINEAR : SL_RESIZE_NEAREST;
  } else if (mode & 8) {
    shape.height = shape.width = 28;
  }
  sl_tensor t;
  int rc = sl_image_decode(data, size, &shape, "fuzz.img", &t);
  FUZZ_DEBUG("image decode (mode %u): %s %s\n", mode, sl_err_name(rc),
             rc < 0 ? sl_last_error() : "");
  if (rc < 0) {
    fuzz_expect_error(rc, "image decode", SL_ECORRUPT, SL_ESHAPE, 0);
    FUZZ_CHECK(strstr(sl_last_error(), "fuzz.img") != NULL,
               "error does not name the image: %s", sl_last_error());
    FUZZ_CHECK(t.data == NULL && t.buf == NULL, "error left a tensor");
    return 0;
  }
  FUZZ_CHECK(t.dtype == SL_U8 && t.rank == 3, "not u8 of rank 3");
  FUZZ_CHECK(t.shape[0] > 0 && t.shape[1] > 0, "empty image");
  FUZZ_CHECK(t.shape[2] == 1 || t.shape[2] == 3, "%lld channels",
             (long long)t.shape[2]);
  if (shape.channels)
    FUZZ_CHECK(t.shape[2] == shape.channels, "channels %lld, asked %d",
               (long long)t.shape[2], shape.channels);
  if (shape.height)
    FUZZ_CHECK(t.shape[0] == shape.height && t.shape[1] == shape.width,
               "%lldx%lld, asked %ux%u", (long long)t.shape[0],
               (long long)t.shape[1], shape.height, shape.width);
  FUZZ_CHECK(t.nbytes == (size_t)(t.shape[0] * t.shape[1] * t.shape[2]),
             "nbytes %zu disagrees with the shape", t.nbytes);
  uint64_t h = fuzz_hash(14695981039346656037ull, t.data, t.nbytes);
  sl_tensor again;
  FUZZ_CHECK(sl_image_decode(data, size, &shape, "fuzz.img", &again) == SL_OK,
             "second decode failed: %s", sl_last_error());
  FUZZ_CHECK(again.nbytes == t.nbytes &&
                 fuzz_hash(14695981039346656037ull, again.data, again.nbytes) ==
                     h,
             "two decodes of the same bytes differ");
  fuzz_sink = h;
  sl_tensor_clear(&again);
  sl_tensor_clear(&t);
  return 0;
}
