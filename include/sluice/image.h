/*
 * sluice/image.h - images: JPEG/PNG decoding, the image reader.  Part of
 * sluice.h: include <sluice.h>, whose opening comment states the conventions
 * that hold here.
 */
#ifndef SLUICE_API_IMAGE_H
#define SLUICE_API_IMAGE_H

#include "open.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* --- images --- JPEG/PNG decoding, the image reader (docs/IMAGES.md)        */
/* ------------------------------------------------------------------------ */

/* Encoded image formats, told apart by their first bytes. */
typedef enum sl_image_format {
  SL_IMAGE_UNKNOWN = 0,
  SL_IMAGE_JPEG = 1, /* FF D8 FF */
  SL_IMAGE_PNG = 2   /* 89 'P' 'N' 'G' 0D 0A 1A 0A */
} sl_image_format;

/* Resize filters (exact arithmetic in docs/IMAGES.md). */
typedef enum sl_resize_filter {
  SL_RESIZE_NONE = 0,    /* keep the decoded size */
  SL_RESIZE_NEAREST = 1, /* nearest neighbour, pixel centres aligned */
  SL_RESIZE_BILINEAR = 2 /* bilinear, pixel centres aligned, 11-bit weights */
} sl_resize_filter;

/* What a decoded image looks like: u8 [height, width, channels].  A plain
 * struct (no size field) used inside sl_image_opts; all zeros = as stored. */
typedef struct sl_image_shape {
  int channels;           /* 1 (gray), 3 (RGB), or 0: as stored (1 for a
                             grayscale image, 3 otherwise); alpha dropped */
  uint32_t height, width; /* with resize: the output size (both required);
                             without: a declared size checked against every
                             image (0 = any), a mismatch is SL_ESHAPE */
  sl_resize_filter resize;
} sl_image_shape;

/* The format of `size` bytes at `data` by their magic (NULL data is
 * SL_IMAGE_UNKNOWN).  Pure function; thread-safe. */
SL_API sl_image_format sl_image_sniff(const void *data, size_t size);

/* Decodes one JPEG or PNG image (`size` bytes at `data`, borrowed) into
 * `out`, a new u8 [H, W, C] tensor in its own buffer, owned by the caller
 * (sl_tensor_clear it).  `shape` (may be NULL: as stored) chooses channels,
 * resizes or checks the size.  `what` (may be NULL: "image") names the image
 * in every message.  Returns SL_OK, or with `out` zeroed: SL_ECORRUPT for
 * bytes that are not a JPEG or PNG, a damaged or truncated image (any libjpeg
 * warning included), or one that would decode to more than 256 MiB; the
 * message is "<what>: jpeg: <TurboJPEG's message>" or "<what>: png:
 * <libspng's message>"; SL_ESHAPE when the image's size differs from a
 * declared height/width (without resize); SL_EINVAL for bad arguments;
 * SL_ENOMEM.  Thread-safe (each call uses its own decoder). */
SL_API int sl_image_decode(const void *data, size_t size,
                           const sl_image_shape *shape, const char *what,
                           sl_tensor *out);

/* Resizes `in` (u8 [H, W, C], 1 <= C <= 4, borrowed) to `height` x `width`
 * with `filter` (SL_RESIZE_NEAREST or SL_RESIZE_BILINEAR) into `out`, a new
 * tensor owned by the caller.  Returns SL_OK, or with `out` zeroed:
 * SL_ESHAPE (not such a tensor), SL_EINVAL (bad filter or size, 1..65535),
 * SL_ENOMEM.  Deterministic to the byte.  Thread-safe. */
SL_API int sl_image_resize(const sl_tensor *in, uint32_t height, uint32_t width,
                           sl_resize_filter filter, sl_tensor *out);

/* Options of sl_decode_image and sl_image_reader.  Extensible like
 * sl_open_opts: `size` must be sizeof(sl_image_opts) (SL_IMAGE_OPTS_INIT
 * sets it and the defaults). */
typedef struct sl_image_opts {
  size_t size;              /* sizeof(sl_image_opts) */
  sl_image_shape shape;     /* channels, size, resize (zeros: as stored) */
  const char *field;        /* sl_decode_image: the field of encoded images,
                               bytes or u8 (NULL = "image"); the reader's field
                               is always "image".  Borrowed for the call. */
  uint32_t threads;         /* decoding worker threads, 1..the thread limit
                               (0 = 1): 1024, or SLUICE_MAX_THREADS; more
                               than 4 x the CPUs (at least 8) is accepted
                               with a notice; SL_THREADS_AUTO: tuned at run
                               time (reader.h) */
  uint32_t window;          /* samples in flight, pulled and not yet consumed:
                               the bound on decoded images held, 0..65536
                               (0 = 4 x threads; at least threads) */
  int unordered;            /* 0: upstream's order, identical for any number
                               of threads; 1: as soon as decoded */
  sl_corrupt_policy policy; /* SL_CORRUPT_FAIL: an image that fails to
                               decode ends the pass with its error;
                               SL_CORRUPT_SKIP_CHUNK: it is left out and
                               counted (SL_ECORRUPT and SL_ESHAPE failures
                               only) */
  uint32_t max_bad;         /* skip: fail the pass with SL_ECORRUPT when more
                               than this many are left out in one pass
                               (0 = 16) */
} sl_image_opts;
/* clang-format off */
#define SL_IMAGE_OPTS_INIT                                                     \
  {sizeof(sl_image_opts), {0, 0, 0, SL_RESIZE_NONE}, NULL /* field */,        \
   0 /* threads */, 0 /* window */, 0 /* unordered */, SL_CORRUPT_FAIL,       \
   0 /* max_bad */}
/* clang-format on */

/* Decodes the encoded images of upstream's field opts->field (bytes or u8,
 * e.g. what `sluice pack images` stores) on opts->threads worker threads
 * into u8 [H, W, C] tensors.  The output schema is upstream's with that
 * field turned into u8 [height or -1, width or -1, channels or -1] (schema
 * metadata kept); every other field is passed on by reference.  At most
 * opts->window samples are in flight.  Workers start at the first next of
 * a pass and keep decoding ahead of the consumer; reset and destroy stop
 * and join them first, and are safe at any moment.  A worker thread that
 * cannot be started fails that next with SL_ENOMEM ("decode_image: cannot
 * start a worker thread: ..."); the stage never runs with fewer threads.
 *
 * Errors arrive in order (ordered mode), after the samples before them: a
 * decode failure is "decode_image: sample N of the pass (field 'image'):
 * jpeg: <decoder message>" (N counts from 0 in each pass; for a packed SLR
 * file read whole it is the record number) with the code of
 * sl_image_decode; upstream errors pass through unchanged.  Under
 * SL_CORRUPT_SKIP_CHUNK, images failing with SL_ECORRUPT or SL_ESHAPE are
 * left out (the stage's samples_in - samples_out in sl_reader_stats counts
 * them) until more than max_bad in one pass: then SL_ECORRUPT "decode_image:
 * 17 images failed to decode in this pass, more than max_bad (16); the
 * last: ...".
 *
 * Takes `up` (destroyed also on failure).  `opts` NULL means
 * SL_IMAGE_OPTS_INIT.  Returns SL_OK and *out, or SL_EINVAL (NULL
 * arguments, no such field, bad options), SL_ESHAPE (the field is not bytes
 * or u8), SL_EUNSUPPORTED (options from a newer header), SL_ENOMEM.  The
 * reader, like any, is used by one thread at a time. */
SL_API int sl_decode_image(sl_reader *up, const sl_image_opts *opts,
                           sl_reader **out);

/* A reader over the JPEG and PNG images of folder `path`, or of the one
 * image file `path`.  A folder is listed once, now: every regular file
 * named *.jpg, *.jpeg or *.png (any case; hidden files and folders left
 * out) at any depth, sorted by path (strcmp).  When the folder has
 * sub-folders they are the classes (ImageFolder): their sorted names,
 * joined by ',', are the schema metadata "classes", and each image's label
 * is the index of its first-level sub-folder; an image directly in the
 * folder is then SL_EINVAL.  Samples are {image: u8[H, W, C], label: i64[]}
 * (a folder without sub-folders, or one file: {image} alone), decoded as
 * by sl_decode_image with `opts` (threads, order, policy; field must be
 * NULL or "image"), with decode errors naming the file: "image: PATH: jpeg:
 * ...".  Metadata: source=image, root=PATH, classes=...
 *
 * Borrows `path` and `opts`.  Returns SL_OK and *out, or SL_EIO (a missing
 * path, an unreadable folder), SL_EINVAL (no images, a stray image, a class
 * name holding ',' or a newline, bad options), SL_ENOMEM.  A file that
 * cannot be read later is SL_EIO at its place in the pass. */
SL_API int sl_image_reader(const char *path, const sl_image_opts *opts,
                           sl_reader **out);

/* Options of sl_random_crop_flip.  Extensible: `size` must be
 * sizeof(sl_crop_flip_opts) (SL_CROP_FLIP_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_crop_flip_opts {
  size_t size;            /* sizeof(sl_crop_flip_opts) */
  const char *field;      /* u8 [H, W, C] field (NULL = "image"); borrowed */
  uint32_t height, width; /* crop size (both, or 0 and 0: no crop) */
  int flip;               /* 1: flip horizontally with probability 1/2 */
  uint64_t seed;          /* of the draws */
  uint64_t epoch;         /* the epoch of the first pass; each reset adds 1 */
} sl_crop_flip_opts;
/* clang-format off */
#define SL_CROP_FLIP_OPTS_INIT                                                 \
  {sizeof(sl_crop_flip_opts), NULL /* field */, 0, 0 /* height, width */,     \
   1 /* flip */, 0 /* seed */, 0 /* epoch */}
/* clang-format on */

/* Crops a random height x width window out of each image and flips it
 * horizontally with probability 1/2, on the consumer's thread.  The draws
 * of sample i of pass p are a pure function of (seed, epoch + p, i)
 * (docs/IMAGES.md gives it), so they do not depend on thread timing: after
 * an ordered decode_image the output is the same for any thread count and
 * in every run.  The output image is a new buffer; other fields pass by
 * reference.  An image smaller than the crop is SL_ESHAPE naming the sample.
 * Takes `up` (destroyed also on failure); `opts` NULL means
 * SL_CROP_FLIP_OPTS_INIT.  Returns SL_OK and *out, or SL_EINVAL (NULL
 * arguments, no such field, one of height/width 0), SL_ESHAPE (the field is
 * not u8 of rank 3), SL_EUNSUPPORTED, SL_ENOMEM.  One thread at a time. */
SL_API int sl_random_crop_flip(sl_reader *up, const sl_crop_flip_opts *opts,
                               sl_reader **out);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_IMAGE_H */
