/*
 * idx_reader.c - the `idx` file reader: an MNIST-style images file and its
 * labels file as one reader of {image, label} samples, so examples run on
 * the data sets as shipped, without packing them into SLR first.
 *
 * Both files are loaded whole by the idx parser (idx.c: plain or gzip,
 * elements in host order), as `sluice pack idx` does: Fashion-MNIST's
 * largest file is 47 MB, and loading once makes reset free and every sample
 * a pair of zero-copy views (image i at i * item_bytes of the images buffer,
 * label i in an i64 buffer widened once here, because i64 is what trainers
 * index with).  The buffers are refcounted, so samples outlive the reader.
 *
 * Memory budget: both buffers are the reader's own memory, its stage's
 * resident charge from the first sample read (counted whole, also while
 * samples - counted where they are held - still refer to them).
 *
 * The labels file is named by the caller or derived from the images file's
 * name by the data sets' own convention ("t10k-images-idx3-ubyte.gz" ->
 * "t10k-labels-idx1-ubyte.gz"); see sl_idx_reader in sluice.h.
 *
 * Saving (stages/state.h): the position alone (sample k is image k); the
 * record holds the count, a CRC32C of both files' elements and the files'
 * identities (sl__state_put_file_ids, taken right after loading), so a
 * state of files changed since is refused (SL_ECORRUPT naming them).
 */
#include "core/crc32c.h"
#include "formats/idx.h"
#include "stages/indexed.h"
#include "sync/resident.h"

#include <errno.h>
#include <unistd.h>

typedef struct idx_state {
  sl__indexed ix;    /* n: the images */
  sl_buffer *images; /* count * item_bytes */
  sl_buffer *labels; /* count i64 */
  size_t item_bytes;
  sl_dtype dtype;
  int rank; /* of one image: the file's rank - 1 */
  int64_t shape[SL_MAX_RANK];
  sl_schema *schema;
  char *images_name, *labels_name; /* base names, for states */
  char *paths[2];                  /* images, labels: as given */
  sl__file_id ids[2];              /* theirs, after loading */
  uint64_t fingerprint;            /* of the elements; 0: not computed */
  sl__resident held;               /* both buffers, charged */
} idx_state;

/* The memory budget: the files in memory, from the next sample read. */
static void idx_budget(void *st, sl__budget_acct *acct) {
  sl__resident_account(&((idx_state *)st)->held, acct);
}

static int idx_get(void *st, uint64_t pos, sl_sample **out) {
  idx_state *s = st;
  sl__resident_set(&s->held, (uint64_t)sl_buffer_size(s->images) +
                                 sl_buffer_size(s->labels));
  sl_sample *smp = sl_sample_new(s->schema);
  SL_RETURN_ERROR_IF(!smp, SL_ENOMEM, "idx: cannot allocate a sample");
  sl_tensor t;
  int rc = sl_tensor_view(&t, s->dtype, s->rank, s->shape, s->images,
                          (size_t)pos * s->item_bytes);
  if (rc == SL_OK && (rc = sl_sample_set_move(smp, 0, &t)) < 0)
    sl_tensor_clear(&t);
  if (rc == SL_OK)
    rc = sl_tensor_view(&t, SL_I64, 0, NULL, s->labels,
                        (size_t)pos * sizeof(int64_t));
  if (rc == SL_OK && (rc = sl_sample_set_move(smp, 1, &t)) < 0)
    sl_tensor_clear(&t);
  if (rc < 0)
    rc = sl_wrap_error(rc, "idx: sample %llu", (unsigned long long)pos);
  return sl__sample_out(rc, smp, out);
}

static void idx_destroy(void *st) {
  idx_state *s = st;
  if (!s) return;
  sl_buffer_release(s->images);
  sl_buffer_release(s->labels);
  SL__FREE(s->images_name, s->labels_name, s->paths[0], s->paths[1]);
  sl__stage_free(s, NULL, s->schema);
}

/* CRC32C of the images' and the labels' elements (computed once: the
 * buffers never change). */
static uint64_t idx_fingerprint(idx_state *s) {
  if (!s->fingerprint) {
    uint32_t a = sl__crc32c(0, sl_buffer_data(s->images),
                            (size_t)s->ix.n * s->item_bytes);
    uint32_t b = sl__crc32c(0, sl_buffer_data(s->labels),
                            (size_t)s->ix.n * sizeof(int64_t));
    s->fingerprint = ((uint64_t)a << 32 | b) | ((uint64_t)1 << 63);
  }
  return s->fingerprint;
}

/* Record: the count, the fingerprint and the files' identities. */
static int idx_put(void *st, sl__state_out *w) {
  idx_state *s = st;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, s->ix.n));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, idx_fingerprint(s)));
  return sl__state_put_file_ids(w, s->ids, 2);
}

static int idx_check(void *st, sl__state_in *in) {
  idx_state *s = st;
  uint64_t count, fp;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &count));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &fp));
  SL_RETURN_ERROR_IF(count != s->ix.n || fp != idx_fingerprint(s), SL_ECORRUPT,
                     "restore: idx %s, %s: the files changed since the state "
                     "was saved (%llu samples then, %llu now%s)",
                     s->images_name, s->labels_name, (unsigned long long)count,
                     (unsigned long long)s->ix.n,
                     count == s->ix.n ? ", other contents" : "");
  return sl__state_check_file_ids(in, "idx", (const char *const *)s->paths,
                                  s->ids, 2);
}

static void idx_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const idx_state *s = st;
  snprintf(buf, cap, "%s %s", s->images_name, s->labels_name);
}

/* Random access (stages/state.h): views of the files in memory. */
static const sl__stage_ops idx_ops = {
    .name = "idx",
    SL__INDEXED_OPS,
    .fetch = sl__indexed_fetch,
    .destroy = idx_destroy,
    .identity = idx_identity,
    .budget = idx_budget,
};

static bool exists(const char *path) {
  return access(path, F_OK) == 0;
}

/* The labels file for `images` by the data sets' naming convention, into
 * buf: the last "images-idx3" / "images.idx3" of the base name becomes
 * "labels-idx1" / "labels.idx1".  When that file does not exist but the
 * name with ".gz" toggled does (plain images, gzipped labels, or the other
 * way round), that one.  SL_EINVAL when the name does not follow the
 * convention. */
static int derive_labels(const char *images, char *buf, size_t size) {
  const char *base = sl__basename(images), *hit = NULL;
  for (const char *p = base; (p = strstr(p, "images")) != NULL; p++)
    if ((p[6] == '-' || p[6] == '.') && strncmp(p + 7, "idx3", 4) == 0) hit = p;
  size_t n = strlen(images);
  SL_RETURN_ERROR_IF(!hit, SL_EINVAL,
                     "idx: %s: cannot derive the labels file from this name "
                     "(expected ...images-idx3... as in "
                     "t10k-images-idx3-ubyte.gz): set the labels option",
                     images);
  SL_RETURN_ERROR_IF(n + 4 > size, SL_EINVAL, "idx: %s: name too long", images);
  memcpy(buf, images, n + 1);
  size_t at = (size_t)(hit - images);
  memcpy(buf + at, "labels", 6);
  memcpy(buf + at + 7, "idx1", 4);
  if (exists(buf)) return SL_OK;
  char alt[4096];
  bool gz = n > 3 && strcmp(buf + n - 3, ".gz") == 0;
  if (gz)
    snprintf(alt, sizeof alt, "%.*s", (int)(n - 3), buf);
  else
    snprintf(alt, sizeof alt, "%s.gz", buf);
  if (exists(alt)) snprintf(buf, size, "%s", alt);
  return SL_OK; /* a missing file is the loader's error, naming it */
}

/* {image: dtype[dims 1..], label: i64[]} with the files' names as
 * metadata, as `sluice pack idx` writes. */
static int make_schema(idx_state *s, const char *images, const char *labels) {
  sl_schema *sc = s->schema = sl_schema_new();
  SL_RETURN_ERROR_IF(!sc, SL_ENOMEM, "idx: cannot allocate a schema");
  int rc = sl_schema_add(sc, "image", s->dtype, s->rank, s->shape);
  if (rc >= 0) rc = sl_schema_add(sc, "label", SL_I64, 0, NULL);
  if (rc >= 0) rc = sl_schema_set_meta(sc, "source", "idx");
  if (rc >= 0) rc = sl_schema_set_meta(sc, "images", sl__basename(images));
  if (rc >= 0) rc = sl_schema_set_meta(sc, "labels", sl__basename(labels));
  return rc < 0 ? sl_wrap_error(rc, "idx: %s: building the schema", images)
                : SL_OK;
}

/* Labels of any integer idx type, widened to i64. */
static int widen_labels(const sl__idx *lb, idx_state *s) {
  SL_RETURN_ERROR_IF(lb->rank != 1, SL_EINVAL,
                     "idx: %s: expected labels: an idx file with 1 dimension, "
                     "found %d",
                     lb->path, lb->rank);
  sl_dtype dt = lb->dtype;
  SL_RETURN_ERROR_IF(dt != SL_U8 && dt != SL_I8 && dt != SL_I16 && dt != SL_I32,
                     SL_EINVAL, "idx: %s: labels must be integers, found %s",
                     lb->path, sl_dtype_name(dt));
  s->labels = sl_buffer_new((size_t)lb->count * sizeof(int64_t));
  SL_RETURN_ERROR_IF(!s->labels, SL_ENOMEM,
                     "idx: %s: cannot allocate %llu labels", lb->path,
                     (unsigned long long)lb->count);
  int64_t *dst = sl_buffer_data(s->labels);
  const void *src = sl_buffer_data(lb->data);
  for (uint64_t i = 0; i < lb->count; i++)
    dst[i] = dt == SL_U8    ? ((const uint8_t *)src)[i]
             : dt == SL_I8  ? ((const int8_t *)src)[i]
             : dt == SL_I16 ? ((const int16_t *)src)[i]
                            : ((const int32_t *)src)[i];
  return SL_OK;
}

/* Loads both files into `s`. */
static int load(idx_state *s, const char *images, const char *labels,
                bool derived) {
  sl__idx im, lb;
  memset(&lb, 0, sizeof lb);
  int rc = sl__idx_load(images, &im);
  if (rc < 0) return sl_wrap_error(rc, "idx");
  if (im.rank < 2)
    rc = sl_set_error(SL_EINVAL,
                      "idx: %s: expected images: an idx file with at least 2 "
                      "dimensions (count, then each image's), found %d",
                      images, im.rank);
  if (rc == SL_OK && (rc = sl__idx_load(labels, &lb)) < 0)
    sl_wrap_error(rc, "idx: labels for %s%s", images,
                  derived ? " (derived from its name; set the labels "
                            "option to choose the file)"
                          : "");
  if (rc == SL_OK) rc = sl__idx_same_count(&im, &lb, "idx: ", images, labels);
  if (rc == SL_OK) rc = widen_labels(&lb, s);
  if (rc == SL_OK) {
    s->dtype = im.dtype;
    s->rank = im.rank - 1;
    for (int d = 1; d < im.rank; d++)
      s->shape[d - 1] = im.dims[d];
    s->item_bytes = im.item_bytes;
    s->ix.n = im.count;
    s->images = sl_buffer_retain(im.data);
    rc = make_schema(s, images, labels);
  }
  sl__idx_free(&im);
  sl__idx_free(&lb);
  return rc;
}

int sl_idx_reader(const char *images, const char *labels, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "idx: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!images || !images[0], SL_EINVAL, "idx: %s images path",
                     images ? "empty" : "NULL");
  char derived[4096];
  if (!labels || !labels[0]) {
    SL_FORWARD_IF_ERROR(derive_labels(images, derived, sizeof derived));
  }
  idx_state *s = sl__calloc(1, sizeof *s);
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "idx: cannot allocate a reader");
  sl__resident_init(&s->held);
  bool by_name = !labels || !labels[0];
  s->ix =
      (sl__indexed){idx_get, idx_put, idx_check, "idx", NULL, "samples", 0, 0};
  int rc = load(s, images, by_name ? derived : labels, by_name);
  if (rc == SL_OK) {
    s->ix.name = s->images_name = sl__strdup(sl__basename(images));
    s->labels_name = sl__strdup(sl__basename(by_name ? derived : labels));
    s->paths[0] = sl__strdup(images);
    s->paths[1] = sl__strdup(by_name ? derived : labels);
    if (!s->images_name || !s->labels_name || !s->paths[0] || !s->paths[1])
      rc = sl_set_error(SL_ENOMEM, "idx: cannot allocate a reader");
  }
  for (int i = 0; i < 2 && rc == SL_OK; i++) {
    struct stat st;
    if (stat(s->paths[i], &st) != 0)
      rc = sl_set_error(SL_EIO, "idx: %s: %s", s->paths[i], strerror(errno));
    else
      s->ids[i] = sl__file_id_of(&st);
  }
  if (rc < 0) {
    idx_destroy(s);
    return rc;
  }
  return sl__stage_new(&idx_ops, s, s->schema, NULL, 0, NULL, out);
}
