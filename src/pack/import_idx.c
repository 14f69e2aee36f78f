/*
 * import_idx.c - packs an idx image file and its label file (MNIST,
 * Fashion-MNIST) into SLR records {image: u8[rows, cols], label: i64[]}.
 *
 * Both files are loaded whole (the largest, Fashion-MNIST's training images,
 * is 47 MB) and every record is a pair of zero-copy views into them, so the
 * packer's cost is the writer's: encoding and zstd.  Labels are widened to
 * i64 once, up front, because that is the dtype trainers index with.
 */
#include "formats/idx.h"
#include "pack/import.h"

static int make_schema(const sl__idx *im, const char *images,
                       const char *labels, sl_schema **out) {
  *out = NULL;
  sl_schema *s = sl_schema_new();
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "pack idx: cannot allocate a schema");
  int64_t shape[2] = {im->dims[1], im->dims[2]};
  int rc;
  if ((rc = sl_schema_add(s, "image", SL_U8, 2, shape)) < 0 ||
      (rc = sl_schema_add(s, "label", SL_I64, 0, NULL)) < 0 ||
      (rc = sl_schema_set_meta(s, "source", "idx")) < 0 ||
      (rc = sl_schema_set_meta(s, "images", sl__basename(images))) < 0 ||
      (rc = sl_schema_set_meta(s, "labels", sl__basename(labels))) < 0) {
    sl_schema_release(s);
    return rc;
  }
  *out = s;
  return SL_OK;
}

/* Writes every record into the sink. */
static int pack_records(const sl__idx *im, sl_buffer *lab, sl_schema *schema,
                        sl__pack_sink *sink) {
  sl_sample *s = sl_sample_new(schema);
  if (!s) return SL_ENOMEM;
  int64_t shape[2] = {im->dims[1], im->dims[2]};
  int rc = SL_OK;
  for (uint64_t i = 0; i < im->count && rc == SL_OK; i++) {
    sl_tensor t;
    rc = sl_tensor_view(&t, SL_U8, 2, shape, im->data, i * im->item_bytes);
    if (rc == SL_OK && (rc = sl_sample_set_move(s, 0, &t)) < 0)
      sl_tensor_clear(&t);
    if (rc == SL_OK)
      rc = sl_tensor_view(&t, SL_I64, 0, NULL, lab, i * sizeof(int64_t));
    if (rc == SL_OK && (rc = sl_sample_set_move(s, 1, &t)) < 0)
      sl_tensor_clear(&t);
    if (rc == SL_OK) rc = sl__sink_append(sink, s);
  }
  sl_sample_release(s);
  return rc;
}

int sl__pack_idx(const char *images, const char *labels, const char *out,
                 const sl__pack_opts *o, uint64_t *records) {
  if (records) *records = 0;
  SL_RETURN_ERROR_IF(!images || !labels || !out, SL_EINVAL,
                     "pack idx: NULL file name");
  sl__idx im, lb;
  sl_schema *schema = NULL;
  sl_buffer *lab = NULL;
  sl__pack_sink *sink = NULL;
  memset(&lb, 0, sizeof lb);
  int rc = sl__idx_load(images, &im);
  if (rc == SL_OK) rc = sl__idx_expect(&im, "images", SL_U8, 3);
  if (rc == SL_OK) rc = sl__idx_load(labels, &lb);
  if (rc == SL_OK) rc = sl__idx_expect(&lb, "labels", SL_U8, 1);
  if (rc == SL_OK) rc = sl__idx_same_count(&im, &lb, "", images, labels);
  if (rc == SL_OK && (im.dims[1] == 0 || im.dims[2] == 0))
    rc = sl_set_error(SL_EINVAL, "%s: images of %ux%u pixels are empty", images,
                      im.dims[1], im.dims[2]);
  if (rc == SL_OK) {
    lab = sl_buffer_new((size_t)lb.count * sizeof(int64_t));
    if (!lab) rc = SL_ENOMEM;
  }
  if (rc == SL_OK) {
    const unsigned char *src = sl_buffer_data(lb.data);
    int64_t *dst = sl_buffer_data(lab);
    for (uint64_t i = 0; i < lb.count; i++)
      dst[i] = src[i];
    rc = make_schema(&im, images, labels, &schema);
  }
  const char *inputs[2] = {images, labels};
  if (rc == SL_OK)
    rc = sl__sink_open(out, schema, im.count, o, inputs, 2, &sink);
  if (rc == SL_OK) {
    rc = pack_records(&im, lab, schema, sink);
    if (rc != SL_OK)
      rc = sl_wrap_error(rc, "pack idx: record %llu",
                         (unsigned long long)sl__sink_records(sink));
    rc = sl__sink_finish(sink, rc, records);
  }
  sl_schema_release(schema);
  sl_buffer_release(lab);
  sl__idx_free(&im);
  sl__idx_free(&lb);
  return rc;
}
