/*
 * pack_images.c - `sluice pack images`: a folder of JPEG and PNG files into
 * SLR records {image: bytes[-1], label: i64[]} holding each file's bytes
 * unchanged (no decoding, no re-encoding: the images are decoded on read by
 * sl_decode_image), with the folder's classes in the schema metadata.
 *
 * The listing is the image reader's (sl__image_list: sorted paths,
 * ImageFolder labels).  With o->shuffle (the CLI's default) the records are
 * written in a seeded random order (sl__pack_order), so that a folder
 * sorted by class does not become a class-sorted file; without it record k
 * of the file is sample k of `image:FOLDER`.  Each file is checked to start
 * like a JPEG or PNG, so a stray file fails the pack naming it instead of
 * every later epoch.
 */
#include "core/rng.h"
#include "image/image.h"
#include "pack/import.h"

#include <errno.h>
#include <stdlib.h>

int sl__pack_slurp_image(const char *path, unsigned char **buf, size_t *cap,
                         size_t *len) {
  FILE *f = fopen(path, "rb");
  SL_RETURN_ERROR_IF(!f, SL_EIO, "pack images: %s: cannot open: %s", path,
                     strerror(errno));
  size_t n = 0;
  int rc = SL_OK;
  for (;;) {
    if (n == *cap) {
      size_t c = *cap ? 2 * *cap : (size_t)1 << 16;
      if (c > SL__IMAGE_MAX_BYTES + 1) c = SL__IMAGE_MAX_BYTES + 1;
      if (c == *cap) {
        rc =
            sl_set_error(SL_EINVAL,
                         "pack images: %s: more than the %llu MiB an "
                         "encoded image may take",
                         path, (unsigned long long)(SL__IMAGE_MAX_BYTES >> 20));
        break;
      }
      unsigned char *b = sl__realloc(*buf, c);
      if (!b) {
        rc = sl_set_error(SL_ENOMEM, "pack images: %s: cannot allocate", path);
        break;
      }
      *buf = b;
      *cap = c;
    }
    size_t got = fread(*buf + n, 1, *cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (rc == SL_OK && ferror(f))
    rc = sl_set_error(SL_EIO, "pack images: %s: read failed: %s", path,
                      strerror(errno));
  fclose(f);
  *len = n;
  return rc;
}

uint64_t *sl__pack_order(size_t n, const sl__pack_opts *o) {
  uint64_t *order = sl__malloc((n ? n : 1) * sizeof *order);
  if (order && o && o->shuffle) {
    sl__permute_u64(o->seed, order, n);
  } else {
    for (size_t i = 0; order && i < n; i++)
      order[i] = i;
  }
  return order;
}

int sl__pack_images(const char *root, const char *out,
                    const struct sl__pack_opts *o, uint64_t *records) {
  if (records) *records = 0;
  SL_RETURN_ERROR_IF(!root || !out, SL_EINVAL,
                     "pack images: no input folder or no output");
  sl__image_list l;
  SL_FORWARD_IF_ERROR(sl__image_list_make("pack images", root, &l));
  sl_schema *schema = sl_schema_new();
  int rc = schema ? SL_OK : SL_ENOMEM;
  int64_t var = SL_DIM_VAR;
  if (rc >= 0) rc = sl_schema_add(schema, "image", SL_BYTES, 1, &var);
  if (rc >= 0 && l.labels) rc = sl_schema_add(schema, "label", SL_I64, 0, NULL);
  if (rc >= 0) rc = sl_schema_set_meta(schema, "source", "image");
  if (rc >= 0) rc = sl_schema_set_meta(schema, "root", sl__basename(root));
  if (rc >= 0 && l.labels) {
    char *classes = sl__image_classes_join(&l);
    rc = classes ? sl_schema_set_meta(schema, "classes", classes) : SL_ENOMEM;
    sl__free(classes);
  }
  if (rc < 0) rc = sl_set_error(rc, "pack images: cannot build the schema");
  sl__pack_sink *sink = NULL;
  if (rc >= 0)
    rc = sl__sink_open(out, schema, l.n, o, (const char *const *)l.paths, l.n,
                       &sink);
  if (rc >= 0) {
    sl_sample *s = sl_sample_new(schema);
    uint64_t *order = sl__pack_order(l.n, o);
    unsigned char *buf = NULL;
    size_t cap = 0;
    rc = s && order ? SL_OK
                    : sl_set_error(SL_ENOMEM, "pack images: cannot allocate");
    for (size_t k = 0; k < l.n && rc == SL_OK; k++) {
      size_t i = (size_t)order[k], len = 0;
      rc = sl__pack_slurp_image(l.paths[i], &buf, &cap, &len);
      if (rc == SL_OK && sl_image_sniff(buf, len) == SL_IMAGE_UNKNOWN)
        rc = sl_set_error(SL_ECORRUPT,
                          "pack images: %s: not a JPEG or PNG image (%zu "
                          "bytes)",
                          l.paths[i], len);
      if (rc < 0) break;
      /* A view of the reused buffer: the writer encodes it before the next
       * file is read. */
      sl_buffer *b = sl_buffer_wrap(buf, len, NULL, NULL);
      sl_tensor t;
      int64_t shape[1] = {(int64_t)len};
      rc = b ? sl_tensor_view(&t, SL_BYTES, 1, shape, b, 0) : SL_ENOMEM;
      sl_buffer_release(b);
      if (rc == SL_OK && (rc = sl_sample_set_move(s, 0, &t)) < 0)
        sl_tensor_clear(&t);
      if (rc == SL_OK && l.labels) {
        int64_t *lab;
        rc = sl_sample_alloc(s, 1, 0, NULL, (void **)&lab);
        if (rc == SL_OK) *lab = l.labels[i];
      }
      if (rc == SL_OK) rc = sl__sink_append(sink, s);
      if (rc < 0) rc = sl_wrap_error(rc, "pack images: %s", l.paths[i]);
    }
    /* Drop the view of `buf` before freeing it. */
    sl_tensor empty = {.dtype = SL_BYTES, .rank = 1};
    if (s) sl_sample_set(s, 0, &empty);
    sl_sample_release(s);
    sl__free(order);
    sl__free(buf);
    rc = sl__sink_finish(sink, rc, records);
  }
  sl_schema_release(schema);
  sl__image_list_free(&l);
  return rc < 0 ? rc : SL_OK;
}
