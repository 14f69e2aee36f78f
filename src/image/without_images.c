/*
 * without_images.c - the image API of a libsluice configured with
 * -DSLUICE_WITH_IMAGES=OFF (no TurboJPEG, no libspng): CMake builds this
 * file instead of the rest of src/image/.  Every entry point keeps its
 * symbol, so a program linked against a full libsluice still loads, and
 * answers SL_EUNSUPPORTED saying how this library was built; the `image:`
 * tag of sl_open and `sluice pack images` reach the same answers.
 */
#include "image/image.h"

#define WITHOUT(what)                                                          \
  sl_set_error(SL_EUNSUPPORTED,                                                \
               "%s: this libsluice (%s) was built without image support "      \
               "(cmake -DSLUICE_WITH_IMAGES=OFF: no TurboJPEG, no libspng)",   \
               what, SL_VERSION_STRING)

/* Sniffing needs no decoder, but a C-only build reports every buffer as
 * unknown so that no caller goes on to a decode that cannot happen; the
 * detail message says why. */
sl_image_format sl_image_sniff(const void *data, size_t size) {
  SL_UNUSED(data);
  SL_UNUSED(size);
  WITHOUT("sl_image_sniff");
  return SL_IMAGE_UNKNOWN;
}

int sl_image_decode(const void *data, size_t size, const sl_image_shape *shape,
                    const char *what, sl_tensor *out) {
  SL_UNUSED(data);
  SL_UNUSED(size);
  SL_UNUSED(shape);
  SL_UNUSED(out);
  return WITHOUT(what && *what ? what : "sl_image_decode");
}

int sl_image_resize(const sl_tensor *in, uint32_t height, uint32_t width,
                    sl_resize_filter filter, sl_tensor *out) {
  SL_UNUSED(in);
  SL_UNUSED(height);
  SL_UNUSED(width);
  SL_UNUSED(filter);
  SL_UNUSED(out);
  return WITHOUT("sl_image_resize");
}

int sl_decode_image(sl_reader *up, const sl_image_opts *opts,
                    sl_reader **out) {
  SL_UNUSED(opts);
  if (out) *out = NULL;
  sl_reader_destroy(up); /* consumed, as on any failure */
  return WITHOUT("decode_image");
}

int sl_image_reader(const char *path, const sl_image_opts *opts,
                    sl_reader **out) {
  SL_UNUSED(opts);
  if (out) *out = NULL;
  return sl_set_error(SL_EUNSUPPORTED,
                      "image: %s: this libsluice (%s) was built without "
                      "image support (cmake -DSLUICE_WITH_IMAGES=OFF: no "
                      "TurboJPEG, no libspng)",
                      path ? path : "(null)", SL_VERSION_STRING);
}

int sl_random_crop_flip(sl_reader *up, const sl_crop_flip_opts *opts,
                        sl_reader **out) {
  SL_UNUSED(opts);
  if (out) *out = NULL;
  sl_reader_destroy(up);
  return WITHOUT("random_crop_flip");
}

int sl__pack_images(const char *root, const char *out,
                    const struct sl__pack_opts *o, uint64_t *records) {
  SL_UNUSED(root);
  SL_UNUSED(out);
  SL_UNUSED(o);
  if (records) *records = 0;
  return WITHOUT("pack images");
}
