/*
 * resize.c - u8 HWC images to a fixed height x width: nearest neighbour and
 * bilinear, with pixel centres aligned (a destination pixel's centre maps to
 * the source point that divides the image in the same proportion, as
 * OpenCV's INTER_NEAREST_EXACT / INTER_LINEAR and PyTorch's
 * align_corners=False do).
 *
 * Nearest: source row floor((2y + 1) * sh / (2 dh)), in integers, so the
 * choice is exact.
 *
 * Bilinear: source coordinate s = (y + 0.5) * sh / dh - 0.5, clamped to
 * [0, sh - 1]; the two taps are floor(s) and floor(s) + 1 (clamped), the
 * weight of the second is frac(s) in 11-bit fixed point (rounded to
 * multiples of 1/2048).  The four products are summed in integers and
 * rounded half up: (sum + 2^21) >> 22.  The whole computation is integer
 * after the weights, so every machine gives the same bytes.  Downscaling by
 * more than 2 aliases (two taps, no prefilter): resize once, or decode at
 * the size you need.
 */
#include "image/image.h"

#define WBITS 11
#define WONE (1 << WBITS)

/* Tap positions and weights along one axis. */
typedef struct taps {
  uint32_t i0, i1;
  uint32_t w1; /* weight of i1, 0..WONE */
} taps;

static void linear_taps(uint32_t n_src, uint32_t n_dst, taps *t) {
  double scale = (double)n_src / (double)n_dst;
  for (uint32_t i = 0; i < n_dst; i++) {
    double s = ((double)i + 0.5) * scale - 0.5;
    if (s < 0) s = 0;
    if (s > (double)(n_src - 1)) s = (double)(n_src - 1);
    uint32_t i0 = (uint32_t)s;
    double f = s - (double)i0;
    uint32_t w = (uint32_t)(f * WONE + 0.5);
    if (w > WONE) w = WONE;
    t[i].i0 = i0;
    t[i].i1 = i0 + 1 < n_src ? i0 + 1 : i0;
    t[i].w1 = w;
  }
}

static void resize_nearest(const uint8_t *src, uint32_t sh, uint32_t sw,
                           uint32_t c, uint8_t *dst, uint32_t dh, uint32_t dw) {
  for (uint32_t y = 0; y < dh; y++) {
    uint32_t sy = (uint32_t)(((uint64_t)2 * y + 1) * sh / ((uint64_t)2 * dh));
    const uint8_t *row = src + (size_t)sy * sw * c;
    uint8_t *out = dst + (size_t)y * dw * c;
    for (uint32_t x = 0; x < dw; x++) {
      uint32_t sx = (uint32_t)(((uint64_t)2 * x + 1) * sw / ((uint64_t)2 * dw));
      memcpy(out + (size_t)x * c, row + (size_t)sx * c, c);
    }
  }
}

static void resize_bilinear(const uint8_t *src, uint32_t sh, uint32_t sw,
                            uint32_t c, uint8_t *dst, uint32_t dh, uint32_t dw,
                            taps *ty, taps *tx) {
  linear_taps(sh, dh, ty);
  linear_taps(sw, dw, tx);
  for (uint32_t y = 0; y < dh; y++) {
    const uint8_t *r0 = src + (size_t)ty[y].i0 * sw * c;
    const uint8_t *r1 = src + (size_t)ty[y].i1 * sw * c;
    uint32_t wy1 = ty[y].w1, wy0 = WONE - wy1;
    uint8_t *out = dst + (size_t)y * dw * c;
    for (uint32_t x = 0; x < dw; x++) {
      size_t a = (size_t)tx[x].i0 * c, b = (size_t)tx[x].i1 * c;
      uint32_t wx1 = tx[x].w1, wx0 = WONE - wx1;
      for (uint32_t k = 0; k < c; k++) {
        uint32_t top = r0[a + k] * wx0 + r0[b + k] * wx1;
        uint32_t bot = r1[a + k] * wx0 + r1[b + k] * wx1;
        /* at most 255 * 2^22: fits 32 bits */
        uint32_t v =
            (top * wy0 + bot * wy1 + (1u << (2 * WBITS - 1))) >> (2 * WBITS);
        out[(size_t)x * c + k] = (uint8_t)v;
      }
    }
  }
}

void sl__resize_u8(const uint8_t *src, uint32_t sh, uint32_t sw, uint32_t c,
                   uint8_t *dst, uint32_t dh, uint32_t dw,
                   sl_resize_filter filter) {
  if (filter == SL_RESIZE_NEAREST) {
    resize_nearest(src, sh, sw, c, dst, dh, dw);
    return;
  }
  /* (dh + dw) taps: at most 2 * 65535 entries, about 1.5 MB. */
  taps *ty = sl__malloc(sizeof *ty * ((size_t)dh + dw));
  if (!ty) { /* out of memory for the taps: nearest still gives an image */
    resize_nearest(src, sh, sw, c, dst, dh, dw);
    return;
  }
  resize_bilinear(src, sh, sw, c, dst, dh, dw, ty, ty + dh);
  sl__free(ty);
}

int sl_image_resize(const sl_tensor *in, uint32_t height, uint32_t width,
                    sl_resize_filter filter, sl_tensor *out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "image_resize: NULL out tensor");
  memset(out, 0, sizeof *out);
  SL_RETURN_ERROR_IF(!in, SL_EINVAL, "image_resize: NULL input tensor");
  SL_RETURN_ERROR_IF(in->dtype != SL_U8 || in->rank != 3 || in->shape[0] < 1 ||
                         in->shape[1] < 1 || in->shape[2] < 1 ||
                         in->shape[0] > 65535 || in->shape[1] > 65535 ||
                         in->shape[2] > 4,
                     SL_ESHAPE,
                     "image_resize: the input must be u8[H,W,C] with 1 <= "
                     "H, W <= 65535 and 1 <= C <= 4");
  SL_RETURN_ERROR_IF(
      filter != SL_RESIZE_NEAREST && filter != SL_RESIZE_BILINEAR, SL_EINVAL,
      "image_resize: filter must be SL_RESIZE_NEAREST or "
      "SL_RESIZE_BILINEAR (got %d)",
      (int)filter);
  SL_RETURN_ERROR_IF(height < 1 || width < 1 || height > 65535 || width > 65535,
                     SL_EINVAL,
                     "image_resize: the size must be 1..65535 on each side "
                     "(got %ux%u)",
                     height, width);
  int64_t shape[3] = {height, width, in->shape[2]};
  SL_FORWARD_IF_ERROR(sl_tensor_alloc(out, SL_U8, 3, shape));
  sl__resize_u8(in->data, (uint32_t)in->shape[0], (uint32_t)in->shape[1],
                (uint32_t)in->shape[2], out->data, height, width, filter);
  return SL_OK;
}
