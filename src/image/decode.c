/*
 * decode.c - one encoded image (JPEG or PNG, told apart by their magic
 * bytes) into a u8 tensor [height, width, channels], by libjpeg-turbo's
 * TurboJPEG API and libspng.
 *
 * Channels: 1 (gray) or 3 (RGB) as asked, or 0 for "as stored": 1 for a
 * grayscale JPEG or PNG, 3 for anything else.  Alpha is dropped, not
 * composited.  A gray image asked as RGB repeats its value; an RGB PNG asked
 * as gray is converted with the ITU-R BT.601 luma weights (what a JPEG's Y
 * channel holds, which TurboJPEG hands out directly for a color JPEG asked
 * as gray), rounded: (299 R + 587 G + 114 B + 500) / 1000.
 *
 * Strictness: a libjpeg warning ("Premature end of JPEG file", "Corrupt JPEG
 * data: 3 extraneous bytes") fails the decode like an error: the pixels of
 * a damaged image are partly invented by the decoder, and training on them
 * silently is worse than skipping them (which the skip policy offers).
 * A TurboJPEG handle that failed an image is destroyed, never reused: its
 * libjpeg state and message would spill onto the next image (jpeg_fail).
 * Progressive JPEGs are limited to 500 scans (TJFLAG_LIMITSCANS), PNGs to
 * 64 MiB per chunk; either decoded size is bounded by SL__IMAGE_MAX_BYTES
 * before the output is allocated.
 */
#include "image/image.h"

#include <limits.h>
#include <spng.h>
#include <turbojpeg.h>

sl_image_format sl_image_sniff(const void *data, size_t size) {
  static const unsigned char png[8] = {0x89, 'P',  'N',  'G',
                                       0x0D, 0x0A, 0x1A, 0x0A};
  const unsigned char *p = data;
  if (!p) return SL_IMAGE_UNKNOWN;
  if (size >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF)
    return SL_IMAGE_JPEG;
  if (size >= 8 && memcmp(p, png, 8) == 0) return SL_IMAGE_PNG;
  return SL_IMAGE_UNKNOWN;
}

void sl__image_decoder_fini(sl__image_decoder *d) {
  if (d && d->tj) tjDestroy(d->tj);
  if (d) d->tj = NULL;
}

void sl__image_schema_dims(const sl_image_shape *shape, int64_t dims[3]) {
  dims[0] = shape && shape->height ? (int64_t)shape->height : SL_DIM_VAR;
  dims[1] = shape && shape->width ? (int64_t)shape->width : SL_DIM_VAR;
  dims[2] = shape && shape->channels ? (int64_t)shape->channels : SL_DIM_VAR;
}

int sl__image_shape_check(const char *stage, const sl_image_shape *shape) {
  if (!shape) return SL_OK;
  SL_RETURN_ERROR_IF(shape->channels != 0 && shape->channels != 1 &&
                         shape->channels != 3,
                     SL_EINVAL,
                     "%s: channels must be 0 (as stored), 1 (gray) or 3 "
                     "(RGB), not %d",
                     stage, shape->channels);
  SL_RETURN_ERROR_IF(
      shape->resize != SL_RESIZE_NONE && shape->resize != SL_RESIZE_NEAREST &&
          shape->resize != SL_RESIZE_BILINEAR,
      SL_EINVAL, "%s: unknown resize filter %d", stage, (int)shape->resize);
  SL_RETURN_ERROR_IF(shape->resize != SL_RESIZE_NONE &&
                         (shape->height == 0 || shape->width == 0),
                     SL_EINVAL,
                     "%s: resizing needs both a height and a width (got "
                     "%ux%u)",
                     stage, shape->height, shape->width);
  SL_RETURN_ERROR_IF(shape->height > 65535 || shape->width > 65535, SL_EINVAL,
                     "%s: height and width are at most 65535 (got %ux%u)",
                     stage, shape->height, shape->width);
  return SL_OK;
}

/* A new u8 [h, w, c] tensor (its buffer from `pool`, may be NULL),
 * refusing sizes above the bound. */
static int alloc_pixels(sl__buffer_pool *pool, const char *what, uint32_t h,
                        uint32_t w, uint32_t c, sl_tensor *t) {
  uint64_t bytes = (uint64_t)h * w * c;
  SL_RETURN_ERROR_IF(h == 0 || w == 0, SL_ECORRUPT,
                     "%s: the header declares an empty %ux%u image", what, h,
                     w);
  SL_RETURN_ERROR_IF(bytes > SL__IMAGE_MAX_BYTES, SL_ECORRUPT,
                     "%s: %ux%ux%u pixels are %llu bytes, more than the "
                     "%llu MiB an image may take",
                     what, h, w, c, (unsigned long long)bytes,
                     (unsigned long long)(SL__IMAGE_MAX_BYTES >> 20));
  int64_t shape[3] = {h, w, c};
  int rc = sl__tensor_alloc_pooled(pool, t, SL_U8, 3, shape);
  if (rc < 0) return sl_wrap_error(rc, "%s", what);
  return SL_OK;
}

/* Fails the JPEG being decoded with `code`: "<what>: jpeg: <found>
 * (<TurboJPEG's message>)", or without `found` ("") the message alone; then
 * drops the handle.  A failed tjDecompressHeader3 (libjpeg-turbo 2.1: it
 * longjmps out without jpeg_abort_decompress) leaves libjpeg's state in the
 * middle of a header, with the stream's "end of input reached" flag set:
 * the next header read on that handle "succeeds" with a 0x0 image and the
 * old message, so the next good JPEG failed too, blamed with the broken
 * file's error (issue 13 item 4).  The handle's message is stale as well
 * (tjGetErrorStr2 keeps the last error).  Failures are rare; a fresh handle
 * for the next image costs one tjInitDecompress. */
static int jpeg_fail(sl__image_decoder *d, int code, const char *what,
                     const char *found) {
  const char *msg = tjGetErrorStr2(d->tj);
  int rc = msg && strcmp(msg, "No error") != 0
               ? sl_set_error(code, "%s: jpeg: %s%s%s%s", what, found,
                              *found ? " (" : "", msg,
                              *found ? ")" : "")
               : sl_set_error(code, "%s: jpeg: %s", what,
                              *found ? found : "cannot decode");
  tjDestroy(d->tj);
  d->tj = NULL;
  return rc;
}

static int decode_jpeg(sl__image_decoder *d, const unsigned char *data,
                       size_t size, int channels, const char *what,
                       sl_tensor *out) {
  if (!d->tj) {
    d->tj = tjInitDecompress();
    SL_RETURN_ERROR_IF(!d->tj, SL_ENOMEM,
                       "%s: jpeg: cannot start a decoder: %s", what,
                       tjGetErrorStr2(NULL));
  }
  tjhandle tj = d->tj;
  SL_RETURN_ERROR_IF(size > (size_t)ULONG_MAX, SL_EINVAL,
                     "%s: jpeg: %zu bytes is too large", what, size);
  int w = 0, h = 0, subsamp = 0, colorspace = 0;
  if (tjDecompressHeader3(tj, data, (unsigned long)size, &w, &h, &subsamp,
                          &colorspace) < 0)
    return jpeg_fail(d, SL_ECORRUPT, what, "");
  /* A stream that ends before its frame header "succeeds" with a warning
   * and no size. */
  if (w <= 0 || h <= 0) return jpeg_fail(d, SL_ECORRUPT, what, "no frame header");
  if (channels == 0) channels = subsamp == TJSAMP_GRAY ? 1 : 3;
  SL_FORWARD_IF_ERROR(
      alloc_pixels(d->pool, what, (uint32_t)h, (uint32_t)w, (uint32_t)channels,
                   out));
  int pf = channels == 1 ? TJPF_GRAY : TJPF_RGB;
  /* The default (accurate, "islow") IDCT, as djpeg uses. */
  int flags = TJFLAG_LIMITSCANS;
  if (tjDecompress2(tj, data, (unsigned long)size, out->data, w, 0, h, pf,
                    flags) < 0) {
    /* tjGetErrorCode: TJERR_WARNING for a damaged but decodable stream;
     * both are refused (see the banner). */
    sl_tensor_clear(out);
    return jpeg_fail(d, SL_ECORRUPT, what, "");
  }
  return SL_OK;
}

static int png_fail(spng_ctx *ctx, int err, const char *what, sl_tensor *out) {
  int rc = sl_set_error(err == SPNG_EMEM ? SL_ENOMEM : SL_ECORRUPT,
                        "%s: png: %s", what, spng_strerror(err));
  spng_ctx_free(ctx);
  sl_tensor_clear(out);
  return rc;
}

static int decode_png(sl__image_decoder *d, const unsigned char *data,
                      size_t size, int channels, const char *what,
                      sl_tensor *out) {
  spng_ctx *ctx = spng_ctx_new(0);
  SL_RETURN_ERROR_IF(!ctx, SL_ENOMEM, "%s: png: cannot start a decoder", what);
  int err = spng_set_image_limits(ctx, 65535, 65535);
  if (!err)
    err = spng_set_chunk_limits(ctx, (size_t)64 << 20, (size_t)64 << 20);
  /* Damaged ancillary chunks (text, time) do not spoil the pixels: only
   * critical chunks must pass their CRC. */
  if (!err) err = spng_set_crc_action(ctx, SPNG_CRC_ERROR, SPNG_CRC_DISCARD);
  if (!err) err = spng_set_png_buffer(ctx, data, size);
  struct spng_ihdr ihdr;
  if (!err) err = spng_get_ihdr(ctx, &ihdr);
  if (err) return png_fail(ctx, err, what, out);
  bool gray = ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE ||
              ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE_ALPHA;
  if (channels == 0) channels = gray ? 1 : 3;
  /* libspng hands out 8-bit gray only for 8-bit-or-less gray sources;
   * everything else is decoded as RGB and reduced here. */
  bool direct_gray = channels == 1 &&
                     ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE &&
                     ihdr.bit_depth <= 8;
  int fmt = direct_gray ? SPNG_FMT_G8 : SPNG_FMT_RGB8;
  int rc = alloc_pixels(d->pool, what, ihdr.height, ihdr.width,
                        (uint32_t)channels, out);
  if (rc < 0) {
    spng_ctx_free(ctx);
    return rc;
  }
  size_t npix = (size_t)ihdr.height * ihdr.width;
  if (channels == 3 || direct_gray) {
    err = spng_decode_image(ctx, out->data, out->nbytes, fmt, SPNG_DECODE_TRNS);
    if (err) return png_fail(ctx, err, what, out);
  } else {
    uint8_t *rgb = sl__malloc(npix * 3);
    if (!rgb) {
      spng_ctx_free(ctx);
      sl_tensor_clear(out);
      return sl_set_error(SL_ENOMEM, "%s: png: cannot allocate %zu bytes", what,
                          npix * 3);
    }
    err = spng_decode_image(ctx, rgb, npix * 3, SPNG_FMT_RGB8, 0);
    if (err) {
      sl__free(rgb);
      return png_fail(ctx, err, what, out);
    }
    uint8_t *g = out->data;
    for (size_t i = 0; i < npix; i++)
      g[i] = (uint8_t)((299u * rgb[3 * i] + 587u * rgb[3 * i + 1] +
                        114u * rgb[3 * i + 2] + 500u) /
                       1000u);
    sl__free(rgb);
  }
  spng_ctx_free(ctx);
  return SL_OK;
}

/* The first bytes of a file that is neither, for the message. */
static void magic_text(const unsigned char *p, size_t size, char *buf,
                       size_t cap) {
  size_t k = 0;
  buf[0] = 0;
  for (size_t i = 0; i < size && i < 8 && k + 4 < cap; i++)
    k += (size_t)snprintf(buf + k, cap - k, "%s%02x", i ? " " : "", p[i]);
  if (size == 0) snprintf(buf, cap, "an empty file");
}

int sl__image_decode(sl__image_decoder *d, const void *data, size_t size,
                     const sl_image_shape *shape, const char *what,
                     sl_tensor *out) {
  static const sl_image_shape as_stored = {0, 0, 0, SL_RESIZE_NONE};
  if (!shape) shape = &as_stored;
  if (!what) what = "image";
  memset(out, 0, sizeof *out);
  SL_FORWARD_IF_ERROR(sl__image_shape_check("decode", shape));
  sl_image_format f = sl_image_sniff(data, size);
  if (f == SL_IMAGE_UNKNOWN) {
    char m[64];
    magic_text(data, data ? size : 0, m, sizeof m);
    return sl_set_error(SL_ECORRUPT,
                        "%s: not a JPEG or PNG image (%zu bytes, starting "
                        "%s)",
                        what, size, m);
  }
  /* Zeroed: a decoder failing before it allocates clears it (png_fail). */
  sl_tensor px;
  memset(&px, 0, sizeof px);
  int rc = f == SL_IMAGE_JPEG
               ? decode_jpeg(d, data, size, shape->channels, what, &px)
               : decode_png(d, data, size, shape->channels, what, &px);
  if (rc < 0) return rc;
  uint32_t h = (uint32_t)px.shape[0], w = (uint32_t)px.shape[1],
           c = (uint32_t)px.shape[2];
  if (shape->resize != SL_RESIZE_NONE) {
    if (h == shape->height && w == shape->width) {
      *out = px;
      return SL_OK;
    }
    rc = alloc_pixels(d->pool, what, shape->height, shape->width, c, out);
    if (rc == SL_OK)
      sl__resize_u8(px.data, h, w, c, out->data, shape->height, shape->width,
                    shape->resize);
    sl_tensor_clear(&px);
    return rc;
  }
  if ((shape->height && shape->height != h) ||
      (shape->width && shape->width != w)) {
    sl_tensor_clear(&px);
    char want_h[16] = "*", want_w[16] = "*";
    if (shape->height) snprintf(want_h, sizeof want_h, "%u", shape->height);
    if (shape->width) snprintf(want_w, sizeof want_w, "%u", shape->width);
    return sl_set_error(SL_ESHAPE,
                        "%s: the image is %ux%u (height x width), the "
                        "declared shape is %sx%s (resize it, or declare "
                        "another)",
                        what, h, w, want_h, want_w);
  }
  *out = px;
  return SL_OK;
}

int sl_image_decode(const void *data, size_t size, const sl_image_shape *shape,
                    const char *what, sl_tensor *out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "image_decode: NULL out tensor");
  memset(out, 0, sizeof *out);
  SL_RETURN_ERROR_IF(!data && size > 0, SL_EINVAL,
                     "image_decode: NULL data with size %zu", size);
  sl__image_decoder d = {0};
  int rc = sl__image_decode(&d, data, size, shape, what, out);
  sl__image_decoder_fini(&d);
  return rc;
}
