/*
 * tfrecord_reader.c - the `tfrecord` reader: a TFRecord file, plain or
 * GZIP-compressed, as one sample per record (docs/FORMATS.md).
 *
 * Bytes.  A plain file is mapped (fmt_map.c).  A plain file named by URL
 * is read through a ranged byte source (source_http.c) record by record -
 * the 12-byte header, then the data and its CRC into a buffer of the
 * record's own - so memory is the read-ahead block plus the records in
 * flight.  A GZIP file (told by its magic, or sl_tfrecord_opts.
 * compression), local or by URL, is inflated as it is read
 * (gzip_stream.c: every member, in order), record by record into buffers
 * of their own grown as the bytes arrive: memory is the records in flight
 * whatever the file inflates to, and a damaged file fails at its first
 * bad record.  Every record's two masked CRC32Cs are checked as it is
 * read (tfrecord.c).
 *
 * Samples.  With sl_tfrecord_opts.features, each record is decoded as a
 * tf.train.Example and the named features become the fields
 * (tfrecord_example.c, protobuf-c); without, the sample is {record:
 * bytes}, a view of the record (for a Lua map, or another protobuf).
 *
 * Saving (stages/state.h): the byte offset of the next record in the
 * (inflated) stream, from a log of each output's offset (sl__state_log);
 * further behind than the log, the restore walks the record headers from
 * the start; a GZIP stream is inflated again from its start up to that
 * offset.  The record holds the file's identity (sl__state_put_file_ids:
 * device, inode, size, mtime; a URL's validators), checked before any
 * stage changes.
 *
 * Memory budget: the reader's own buffers - a GZIP stream's input block,
 * zlib's state and window (sl__gz_held), a URL's read-ahead block
 * (sl__source_held) - are the stage's resident charge, measured again
 * after each record read; a mapped file's pages are not counted.
 */
#include "transport/fmt_map.h"
#include "transport/http.h"
#include "formats/offset_log.h"
#include "formats/tfrecord.h"
#include "sync/resident.h"

#define MAX_FEATURES 64

typedef struct tf_state {
  char *path;
  sl_buffer *bytes;
  sl__source *src; /* a plain file by URL: read by ranges; or NULL */
  sl__gz *gz;      /* a GZIP file: inflated as read; or NULL */
  sl__file_id id;  /* the file (URL) as opened: what a state checks */
  const unsigned char *p;
  size_t n;
  uint64_t off, rec;
  sl__tf_feature f[MAX_FEATURES];
  int nf; /* 0: {record: bytes} */
  sl_schema *schema;
  sl__offset_log offs;
  sl__resident held; /* the stream's / source's buffers, charged */
} tf_state;

/* Charges the reader's buffers as they are now (the reading thread). */
static void charge(tf_state *s) {
  sl__resident_set(&s->held,
                   s->gz ? sl__gz_held(s->gz) : sl__source_held(s->src));
}

static void tf_budget(void *st, sl__budget_acct *acct) {
  /* charged from the next record read (the reading thread's) */
  sl__resident_account(&((tf_state *)st)->held, acct);
}

/* Record `rec` at s->off from the mapping, the URL source or the GZIP
 * stream: its data in *d, in a buffer of its own (*own) from a source,
 * none when skipped. */
static int read_record(tf_state *s, bool skip, uint64_t rec,
                       const unsigned char **d, uint64_t *len,
                       sl_buffer **own) {
  *own = NULL;
  if (!s->gz && !s->src)
    return sl__tfrecord_next(s->p, s->n, &s->off, d, len, s->path, rec);
  int rc =
      s->gz ? sl__tfrecord_read_gz(s->gz, &s->off, own, len, skip, s->path, rec)
            : sl__tfrecord_read(s->src, &s->off, own, len, skip, s->path, rec);
  *d = *own ? sl_buffer_data(*own) : NULL;
  return rc;
}

static int tf_next(void *st, sl_sample **out) {
  tf_state *s = st;
  const unsigned char *d;
  uint64_t len;
  sl_buffer *own; /* from a source: the record's bytes */
  int rc = read_record(s, false, s->rec, &d, &len, &own);
  charge(s);
  if (rc != SL_OK) return rc;
  sl_buffer *base = own ? own : s->bytes;
  size_t boff = own ? 0 : (size_t)(d - s->p);
  char what[600];
  snprintf(what, sizeof what, "%s: record %llu", s->path,
           (unsigned long long)s->rec);
  s->rec++;
  if (s->nf) {
    rc = sl__tf_example_sample(what, d, (size_t)len, s->f, s->nf, s->schema,
                               out);
  } else {
    sl_sample *smp = sl_sample_new(s->schema);
    rc = smp ? SL_OK : sl_set_error(SL_ENOMEM, "tfrecord: out of memory");
    sl_tensor t;
    int64_t l = (int64_t)len;
    if (rc == SL_OK) rc = sl_tensor_view(&t, SL_BYTES, 1, &l, base, boff);
    if (rc == SL_OK && (rc = sl_sample_set_move(smp, 0, &t)) < 0)
      sl_tensor_clear(&t);
    rc = sl__sample_out(rc, smp, out);
  }
  sl_buffer_release(own);
  if (rc < 0) return rc;
  sl__state_log_note(&s->offs.log, s->off);
  return SL_OK;
}

static int tf_reset(void *st) {
  tf_state *s = st;
  s->off = s->rec = 0;
  sl__offset_log_start(&s->offs, 0, 0);
  if (s->gz) sl__gz_rewind(s->gz);
  return SL_OK;
}

static void tf_destroy(void *st) {
  tf_state *s = st;
  if (!s) return;
  sl_buffer_release(s->bytes);
  sl__source_close(s->src);
  sl__gz_close(s->gz);
  sl__free(s->path);
  sl__stage_free(s, NULL, s->schema);
}

static int tf_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                   sl__state_out *w) {
  tf_state *s = st;
  return sl__offset_log_save(&s->offs, k, &s->id, w);
}

/* The file unchanged and the offset inside its bytes (a GZIP stream's are
 * in the inflated bytes, whose size the restore's skip finds out). */
static int tf_check(const sl_reader *r, void *st, sl__state_in *in) {
  const tf_state *s = st;
  uint64_t off;
  return sl__offset_log_read(in, "tfrecord", s->path, &s->id,
                             s->gz ? UINT64_MAX : s->n, &off);
}

static int tf_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                      sl__state_in *in) {
  tf_state *s = st;
  uint64_t off;
  SL_FORWARD_IF_ERROR(sl__offset_log_read(in, "tfrecord", s->path, &s->id,
                                          s->gz ? UINT64_MAX : s->n, &off));
  SL_RETURN_ERROR_IF(!s->gz && k > s->n, SL_ECORRUPT,
                     "restore: corrupt state: tfrecord %s: record %llu of a "
                     "%zu-byte file",
                     s->path, (unsigned long long)k, s->n);
  tf_reset(s);
  if (off == UINT64_MAX) {
    for (uint64_t i = 0; i < k; i++) {
      const unsigned char *d;
      uint64_t len;
      sl_buffer *none;
      int rc = read_record(s, true, i, &d, &len, &none);
      SL_RETURN_ERROR_IF(rc == SL_EOF, SL_ECORRUPT,
                         "restore: tfrecord %s: ended after %llu records, "
                         "the state needs %llu",
                         s->path, (unsigned long long)i, (unsigned long long)k);
      SL_FORWARD_IF_ERROR(rc);
    }
  } else if (s->gz) {
    uint64_t got;
    SL_FORWARD_IF_ERROR(sl__gz_skip(s->gz, off, &got));
    SL_RETURN_ERROR_IF(got < off, SL_ECORRUPT,
                       "restore: tfrecord %s: the stream ends at %llu bytes, "
                       "the state's position is at %llu",
                       s->path, (unsigned long long)got,
                       (unsigned long long)off);
    s->off = off;
  } else {
    s->off = off;
  }
  s->rec = k;
  sl__offset_log_start(&s->offs, k, s->off);
  charge(s);
  return SL_OK;
}

static void tf_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const tf_state *s = st;
  snprintf(buf, cap, "%s features=%d", sl__basename(s->path), s->nf);
}

static const sl__stage_ops tf_ops = {
    .name = "tfrecord",
    .next = tf_next,
    .reset = tf_reset,
    .destroy = tf_destroy,
    .save = tf_save,
    .restore = tf_restore,
    .identity = tf_identity,
    .check = tf_check,
    .budget = tf_budget,
};

static int load(tf_state *s, int compression) {
  bool url = sl__is_url(s->path);
  sl__source *src = NULL;
  /* A URL, or a file that may be GZIP, through a byte source. */
  if (url)
    SL_FORWARD_IF_ERROR(sl__source_open_url("tfrecord", s->path, &src));
  else if (compression != SL_TFRECORD_NONE &&
           sl__source_open_file(s->path, &src) < 0)
    return sl_wrap_error(sl_last_error_code(), "tfrecord");
  if (src) {
    unsigned char magic[2] = {0, 0};
    int rc = SL_OK;
    if (compression == SL_TFRECORD_AUTO && src->size >= 2)
      rc = src->read_at(src, 0, magic, 2);
    if (rc == SL_OK && src->size > SIZE_MAX)
      rc = sl_set_error(SL_EUNSUPPORTED, "tfrecord: %s: too large", s->path);
    if (rc < 0) {
      sl__source_close(src);
      return rc;
    }
    s->n = (size_t)src->size;
    s->id = src->id; /* what a saved state checks */
    if (compression == SL_TFRECORD_GZIP ||
        (compression == SL_TFRECORD_AUTO && magic[0] == 0x1f &&
         magic[1] == 0x8b))
      return sl__gz_open(src, &s->gz);
    if (url) {
      s->src = src;
      return SL_OK;
    }
    sl__source_close(src);
  }
  SL_FORWARD_IF_ERROR(sl__map_file("tfrecord", s->path, &s->bytes, &s->id));
  s->p = sl_buffer_data(s->bytes);
  s->n = sl_buffer_size(s->bytes);
  return SL_OK;
}

int sl_tfrecord_reader(const char *path, const sl_tfrecord_opts *opts,
                       sl_reader **out) {
  SL_SOURCE_ARGS("tfrecord", path, out);
  sl_tfrecord_opts o = SL_TFRECORD_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(sl__opts_copy("sl_tfrecord_opts", &o, sizeof o, opts));
  SL_RETURN_ERROR_IF(
      o.compression < SL_TFRECORD_AUTO || o.compression > SL_TFRECORD_GZIP,
      SL_EINVAL, "tfrecord: unknown compression %d", o.compression);
  tf_state *s = sl__calloc(1, sizeof *s);
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "tfrecord: cannot allocate a reader");
  sl__resident_init(&s->held);
  s->path = sl__strdup(path);
  int rc = s->path ? SL_OK : sl_set_error(SL_ENOMEM, "tfrecord: out of memory");
  if (rc == SL_OK && o.features && o.features[0]) {
    rc = sl__tf_features_parse(o.features, s->f, MAX_FEATURES, &s->nf);
    if (rc == SL_OK && !sl__tf_can_decode())
      rc = sl__tf_example_sample(path, NULL, 0, s->f, s->nf, NULL, NULL);
    if (rc == SL_OK) rc = sl__tf_features_schema(s->f, s->nf, &s->schema);
  } else if (rc == SL_OK) {
    int64_t var = -1;
    s->schema = sl_schema_new();
    rc = s->schema ? sl_schema_add(s->schema, "record", SL_BYTES, 1, &var)
                   : SL_ENOMEM;
    if (rc >= 0) rc = sl_schema_set_meta(s->schema, "source", "tfrecord");
    if (rc < 0) rc = sl_wrap_error(rc, "tfrecord: the schema");
  }
  if (rc == SL_OK) rc = load(s, o.compression);
  if (rc < 0) {
    tf_destroy(s);
    return rc;
  }
  return sl__stage_new(&tf_ops, s, s->schema, NULL, 0, NULL, out);
}
