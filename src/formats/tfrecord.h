/* tfrecord.h - TFRecord files (tfrecord.c: the record framing, parsed from
 * memory) and tf.train.Example decoding (tfrecord_example.c, with
 * protobuf-c), for the tfrecord: reader (tfrecord_reader.c) and the fuzz
 * target. */
#ifndef SLUICE_IO_TFRECORD_H
#define SLUICE_IO_TFRECORD_H

#include "core/internal.h"
#include "formats/gzip_stream.h"
#include "transport/source.h"

/* The record at p[*off..n): on SL_OK *data and *len are its bytes and *off is
 * past it; SL_EOF at n; SL_ECORRUPT naming `what`, the record number `rec`
 * and the offset: a header or record cut short, a masked CRC32C of the
 * length or of the data that does not match. */
int sl__tfrecord_next(const unsigned char *p, size_t n, uint64_t *off,
                      const unsigned char **data, uint64_t *len,
                      const char *what, uint64_t rec);
/* The record at *off of `src` (a URL read by ranges): reads its 12-byte
 * header and checks the length's CRC; then, unless `skip`, reads the data
 * and its CRC into a new buffer *rec (the data at byte 0, *len bytes;
 * release it) and checks that CRC.  With `skip` (a restore walking to a
 * saved count) *rec is NULL and the data is not read.  On SL_OK *off is
 * past the record; SL_EOF at the source's end; SL_ECORRUPT as
 * sl__tfrecord_next; SL_EIO from the source (naming it); SL_ENOMEM. */
int sl__tfrecord_read(sl__source *src, uint64_t *off, sl_buffer **rec,
                      uint64_t *len, bool skip, const char *what, uint64_t n);
/* The same from a gzip stream (gzip_stream.h) positioned at *off, the
 * record's offset in the inflated stream: its data arrive in a buffer
 * grown as they are inflated (a length claimed but not there costs only
 * what is there), so a damaged stream fails at its first bad record with
 * memory bounded by the records read.  SL_EOF at the stream's end;
 * SL_ECORRUPT as sl__tfrecord_next (a record running past the end of the
 * stream) or from the stream (damaged gzip data, naming the compressed
 * offset); SL_EIO from the source; SL_ENOMEM. */
int sl__tfrecord_read_gz(sl__gz *g, uint64_t *off, sl_buffer **rec,
                         uint64_t *len, bool skip, const char *what,
                         uint64_t n);
/* TFRecord's masked CRC32C. */
uint32_t sl__tfrecord_mask(uint32_t crc);

/* One feature to take from each Example. */
typedef struct sl__tf_feature {
  char name[64];
  sl_dtype dtype; /* bytes: a bytes_list; integers: int64_list; f32, f64:
                     float_list */
  int rank;       /* 0: exactly one value */
  int64_t shape[SL_MAX_RANK]; /* fixed, or {-1} (rank 1): any count */
} sl__tf_feature;

/* Parses "image:bytes,label:i64,x:f32[3],ids:i64[-1]" into f[0..*nf).
 * SL_EINVAL naming the bad part. */
int sl__tf_features_parse(const char *spec, sl__tf_feature *f, int max,
                          int *nf);
/* The schema of those features (new reference). */
int sl__tf_features_schema(const sl__tf_feature *f, int nf, sl_schema **out);
/* Whether this libsluice decodes Examples (built with protobuf-c). */
bool sl__tf_can_decode(void);
/* The sample of the serialized tf.train.Example data[0..n) by f[0..nf):
 * SL_OK and *out; SL_ECORRUPT (not an Example), SL_EINVAL (a feature
 * missing, of another kind, with another count of values, an integer out
 * of its dtype's range), SL_EUNSUPPORTED (built without protobuf-c),
 * SL_ENOMEM; every message starts with `what` (file and record). */
int sl__tf_example_sample(const char *what, const unsigned char *data, size_t n,
                          const sl__tf_feature *f, int nf, sl_schema *schema,
                          sl_sample **out);

#endif
