/*
 * wds_pack.c - converting to and from WebDataset tar shards (wds_pack.h):
 * `sluice pack wds` reads shards with sl_wds_open into the SLR importers'
 * sink (import_sink.c); `sluice pack images --format wds` writes an image
 * folder as tar shards with the tar writer (tar_writer.c): members
 * KEY.jpg or KEY.png by the image's format, and KEY.cls with its class
 * number, whose names go to a file beside the shards, OUT-classes.txt
 * (sl__wds_classes_name), one a line in class order.  Every shard starts
 * with the member __sluice_set__, the run's set identity (formats/wds.h), which
 * sl_wds_open checks across the shards it reads.  The shards and the
 * classes file are one output set (transport/output.h: unique temporaries,
 * inputs refused as outputs, folders made, all renamed together, signal
 * cleanup).
 */
#include "pack/wds_pack.h"
#include "image/image.h"
#include "formats/tar.h"
#include "formats/wds.h"

#include <errno.h>
#include <stdio.h>

int sl__pack_wds(const char *const *names, size_t n, const char *out,
                 const sl__pack_opts *o, uint64_t *records) {
  if (records) *records = 0;
  SL_RETURN_ERROR_IF(!names || n == 0 || !out, SL_EINVAL,
                     "pack wds: no input shards or no output");
  sl_wds_opts wo = SL_WDS_OPTS_INIT;
  wo.threads = 1;
  wo.world = 1;
  sl_reader *r;
  SL_FORWARD_IF_ERROR(sl_wds_open(names, n, &wo, &r));
  sl_schema *schema = sl_schema_copy(sl_reader_schema(r));
  int rc = schema ? SL_OK : sl_set_error(SL_ENOMEM, "pack wds: out of memory");
  sl__pack_sink *sink = NULL;
  if (rc == SL_OK)
    rc = sl__sink_open(out, schema, SL__TOTAL_UNKNOWN, o, names, n, &sink);
  if (rc == SL_OK) {
    sl_sample *s;
    while ((rc = sl_reader_next(r, &s)) == SL_OK) {
      rc = sl__sink_append(sink, s);
      sl_sample_release(s);
      if (rc < 0) break;
    }
    if (rc == SL_EOF) rc = SL_OK;
    rc = sl__sink_finish(sink, rc, records);
  }
  sl_schema_release(schema);
  sl_reader_destroy(r);
  return rc < 0 ? sl_wrap_error(rc, "pack wds") : SL_OK;
}

int sl__wds_shard_name(const char *out, uint32_t i, char *buf, size_t size) {
  size_t n = strlen(out);
  if (n >= 4 && strcmp(out + n - 4, ".tar") == 0) n -= 4;
  int len = snprintf(buf, size, "%.*s-%06u.tar", (int)n, out, i);
  SL_RETURN_ERROR_IF(len < 0 || (size_t)len >= size, SL_EINVAL,
                     "pack: output name '%s' is too long", out);
  return SL_OK;
}

/* SLUICE_WITH_IMAGES is set for this file by CMakeLists.txt: the image
 * folder's listing lives in the optional image layer. */
#if !SLUICE_WITH_IMAGES
int sl__pack_images_wds(const char *root, const char *out,
                        const sl__pack_opts *o, uint64_t *records) {
  if (records) *records = 0;
  return sl_set_error(SL_EUNSUPPORTED,
                      "pack images: this libsluice was built without image "
                      "support (SLUICE_WITH_IMAGES=OFF)");
}
#else
/* The k output names of `out` (OUT itself, or OUT-%06u.tar) as one output
 * set (output.h): the images are its inputs. */
static int open_outputs(const char *out, uint32_t k, bool sharded,
                        const sl__image_list *l, sl__out_set **set) {
  /* Outputs 0..k-1: the shards; output k, with class folders: the class
   * names beside the first shard (sl__wds_classes_name). */
  uint32_t n = k + (l->labels ? 1 : 0);
  char **names = sl__calloc(n, sizeof *names);
  size_t cap = strlen(out) + 32;
  int rc =
      names ? SL_OK : sl_set_error(SL_ENOMEM, "pack images: out of memory");
  for (uint32_t i = 0; i < n && rc == SL_OK; i++) {
    names[i] = sl__malloc(cap);
    if (!names[i])
      rc = sl_set_error(SL_ENOMEM, "pack images: out of memory");
    else if (i == k)
      rc = sl__wds_classes_name(names[0], names[i], cap);
    else if (sharded)
      rc = sl__wds_shard_name(out, i, names[i], cap);
    else
      snprintf(names[i], cap, "%s", out);
  }
  if (rc == SL_OK)
    rc = sl__out_set_open("pack images", (const char *const *)names, n,
                          (const char *const *)l->paths, l->n, set);
  /* Records are dealt among the shards: every file is open from the
   * start. */
  for (uint32_t i = 0; i < n && rc == SL_OK; i++)
    if (!sl__out_set_file(*set, i)) {
      rc = sl_last_error_code();
      sl__out_set_abort(*set);
      *set = NULL;
    }
  for (uint32_t i = 0; names && i < n; i++)
    sl__free(names[i]);
  sl__free(names);
  return rc;
}

int sl__pack_images_wds(const char *root, const char *out,
                        const sl__pack_opts *o, uint64_t *records) {
  if (records) *records = 0;
  SL_RETURN_ERROR_IF(!root || !out, SL_EINVAL,
                     "pack images: no input folder or no output");
  sl__image_list l;
  SL_FORWARD_IF_ERROR(sl__image_list_make("pack images", root, &l));
  uint32_t k = o && o->shards ? o->shards : 1;
  sl__out_set *set = NULL;
  uint64_t *order = sl__pack_order(l.n, o);
  int rc =
      order ? SL_OK : sl_set_error(SL_ENOMEM, "pack images: out of memory");
  if (rc == SL_OK) rc = open_outputs(out, k, o && o->shards, &l, &set);
  /* Every shard's first member: the set identity (wds.h), so readers
   * refuse shards of two runs. */
  char set_id[SL__SET_ID_LEN + 1], set_text[SL__WDS_SET_MAX];
  sl__new_set_id(set_id);
  for (uint32_t i = 0; i < k && rc == SL_OK; i++)
    rc = sl__tar_write_member(sl__out_set_file(set, i), SL__WDS_SET_MEMBER,
                              set_text,
                              sl__wds_set_text(set_id, k, i, set_text));
  /* Output k: the class names, one a line (line c: .cls value c). */
  if (rc == SL_OK && l.labels) {
    sl__out_file *cf = sl__out_set_file(set, k);
    rc = cf ? SL_OK : sl_last_error_code();
    for (size_t j = 0; j < l.nclasses && rc == SL_OK; j++) {
      rc = sl__out_write(cf, l.classes[j], strlen(l.classes[j]));
      if (rc == SL_OK) rc = sl__out_write(cf, "\n", 1);
    }
  }
  unsigned char *buf = NULL;
  size_t cap = 0;
  uint64_t bytes = 0;
  for (size_t r = 0; r < l.n && rc == SL_OK; r++) {
    size_t i = (size_t)order[r], len = 0;
    uint32_t sh = o && o->mode == SL__SHARD_CONTIGUOUS
                      ? (uint32_t)(r * k / (l.n ? l.n : 1))
                      : (uint32_t)(r % k);
    rc = sl__pack_slurp_image(l.paths[i], &buf, &cap, &len);
    if (rc == SL_OK && sl_image_sniff(buf, len) == SL_IMAGE_UNKNOWN)
      rc = sl_set_error(SL_ECORRUPT,
                        "pack images: %s: not a JPEG or PNG image (%zu bytes)",
                        l.paths[i], len);
    /* The member's extension is the image's format (not its file name's):
     * jpg or png, the image field's alternatives (wds_shard.c). */
    char name[64];
    snprintf(name, sizeof name, "%08zu.%s", r,
             sl_image_sniff(buf, len) == SL_IMAGE_PNG ? "png" : "jpg");
    if (rc == SL_OK)
      rc = sl__tar_write_member(sl__out_set_file(set, sh), name, buf, len);
    if (rc == SL_OK && l.labels) {
      char cls[32];
      int cl = snprintf(cls, sizeof cls, "%lld", (long long)l.labels[i]);
      snprintf(name, sizeof name, "%08zu.cls", r);
      rc = sl__tar_write_member(sl__out_set_file(set, sh), name, cls,
                                (size_t)cl);
    }
    bytes += len;
    if (rc == SL_OK && o && o->cancel && *o->cancel)
      rc = sl_set_error(SL_EKILLED, "pack images: interrupted");
    if (rc == SL_OK && o && o->progress)
      rc = o->progress(o->progress_ud, r + 1, bytes);
  }
  sl__free(buf);
  for (uint32_t i = 0; rc == SL_OK && i < k; i++)
    rc = sl__tar_write_end(sl__out_set_file(set, i));
  /* Every shard complete and synced, then the summary, then the renames. */
  if (rc == SL_OK) rc = sl__out_set_finish(set);
  if (rc == SL_OK && o && o->before_commit)
    rc = o->before_commit(o->progress_ud, l.n, sl__out_set_bytes(set));
  if (rc == SL_OK)
    rc = sl__out_set_commit(set);
  else
    sl__out_set_abort(set);
  if (rc == SL_OK && records) *records = l.n;
  sl__free(order);
  sl__image_list_free(&l);
  return rc;
}
#endif
