/*
 * image.h - what the files of the image layer share (src/image/): the
 * decoder context each thread keeps, the resize kernels, the schema helper
 * of the decorators, the folder listing of the reader and the packer, and
 * the parallel decode stage the reader is built on.  The public face is the
 * "images" section of sluice.h; docs/IMAGES.md explains the whole layer.
 */
#ifndef SLUICE_IMAGE_H
#define SLUICE_IMAGE_H

#include "core/internal.h"

/* The most bytes one decoded image may take (256 MiB: a 9459 x 9459 RGB
 * image).  A header declaring more is SL_ECORRUPT before anything is
 * allocated, so a 100-byte file cannot make a decoder ask for gigabytes. */
#define SL__IMAGE_MAX_BYTES ((uint64_t)256 << 20)

/* One thread's decoders.  The TurboJPEG handle is made on the first JPEG
 * and reused (making one allocates libjpeg's tables) until an image fails,
 * then made again for the next one (decode.c); libspng contexts are
 * cheap and made per image.  Zero-initialise, then sl__image_decoder_fini.
 * Used by one thread at a time. */
typedef struct sl__image_decoder {
  void *tj;              /* tjhandle, or NULL until the first JPEG */
  sl__buffer_pool *pool; /* where the pixels' buffers come from (borrowed,
                            thread-safe, shared by a stage's workers), or
                            NULL for plain allocations */
} sl__image_decoder;

void sl__image_decoder_fini(sl__image_decoder *d);

/* sl_image_decode with a reusable context: decodes `size` bytes at `data`
 * into `out` (a new u8 [H, W, C] tensor the caller clears), `what` naming
 * the image in every message ("image: train/cat/1.jpg").  `shape` may be
 * NULL (as stored, no check, no resize). */
int sl__image_decode(sl__image_decoder *d, const void *data, size_t size,
                     const sl_image_shape *shape, const char *what,
                     sl_tensor *out);

/* Resizes u8 HWC pixels `src` (sh x sw x c) into `dst` (dh x dw x c) with
 * `filter` (nearest or bilinear, see resize.c for the exact arithmetic). */
void sl__resize_u8(const uint8_t *src, uint32_t sh, uint32_t sw, uint32_t c,
                   uint8_t *dst, uint32_t dh, uint32_t dw,
                   sl_resize_filter filter);

/* A new schema like `up` (fields, metadata) with field `field` replaced by
 * `dtype` of `rank` dims `shape`.  Returns SL_OK and *out (a reference the
 * caller takes) or SL_ENOMEM / SL_EINVAL. */
int sl__schema_with_field(const sl_schema *up, int field, sl_dtype dtype,
                          int rank, const int64_t *shape, sl_schema **out);

/* The index of upstream schema `up`'s field `name`, the image field a
 * decorator works on; or SL_EINVAL "<stage>: upstream has no field '<name>'
 * (schema ...)". */
int sl__image_field(const char *stage, const sl_schema *up, const char *name);

/* The output schema dims of an image: [height or var, width or var,
 * channels or var]. */
void sl__image_schema_dims(const sl_image_shape *shape, int64_t dims[3]);

/* Checks a decode shape request (channels 0, 1 or 3; resize needs both
 * sizes); `stage` names the caller in the SL_EINVAL message. */
int sl__image_shape_check(const char *stage, const sl_image_shape *shape);

/* --- folders of images ----------------------------------------------------
 * The files of an image folder (image_reader.c): every regular file whose
 * name ends in .jpg, .jpeg or .png (any case), below `root` at any depth,
 * sorted by path (strcmp).  When `root` has sub-folders, each file's label
 * is the index of its first-level sub-folder in the sorted list of those
 * (ImageFolder); a file directly in such a root is SL_EINVAL.  When `root`
 * is a file, the list is that one file, without labels. */
typedef struct sl__image_list {
  char **paths;    /* n owned paths, each "root/..." */
  int64_t *labels; /* n labels, or NULL when there are no classes */
  size_t n;
  char **classes; /* nclasses owned names, sorted */
  size_t nclasses;
  bool is_dir;
} sl__image_list;

/* Lists `root` (see above).  `stage` prefixes messages.  SL_EIO (cannot
 * read a folder), SL_EINVAL (no images, a stray file, a class name holding
 * ',' or a newline), SL_ENOMEM.  On failure `out` is zeroed. */
int sl__image_list_make(const char *stage, const char *root,
                        sl__image_list *out);
void sl__image_list_free(sl__image_list *l);
/* The classes joined by ',' into a new string (sl__free it), or NULL. */
char *sl__image_classes_join(const sl__image_list *l);

/* --- the parallel decode stage (decode_image.c) --------------------------
 * sl_decode_image, plus what the image reader needs: `names` (n entries,
 * borrowed: they must outlive the stage, e.g. owned by its upstream) name
 * sample i of a pass in messages instead of "sample i", and `stage` is the
 * reader name ("decode_image" or "image"). */
int sl__decode_image_make(sl_reader *up, const sl_image_opts *opts,
                          const char *stage, const char *const *names,
                          size_t nnames, sl_reader **out);

/* --- packing (pack_images.c) ---------------------------------------------- */
struct sl__pack_opts;
/* The images of folder `root` (as listed above) into records {image:
 * bytes[-1] (the file's bytes, unchanged), label: i64[]} with schema
 * metadata source=image, root=<basename>, classes=<joined by ','>.  Every
 * file is sniffed (a file that is not a JPEG or PNG fails the pack naming
 * it); its pixels are not decoded.  On failure nothing is left under the
 * output name(s). */
SL_API int sl__pack_images(const char *root, const char *out,
                           const struct sl__pack_opts *o, uint64_t *records);

#endif
