/*
 * tfrecord_example.c - tf.train.Example records into samples (tfrecord.h).
 *
 * The Example is decoded by protobuf-c from example.proto/feature.proto
 * (src/formats/proto/, written from TensorFlow's published schema and compiled
 * by protoc-c at build time), not by a hand-written wire parser: protobuf
 * has enough corner cases (unpacked repeated scalars, unknown fields,
 * repeated map keys) that a well-kept library is the safer reader of
 * untrusted bytes.  protobuf-c is optional (CMakeLists.txt: Debian's
 * libprotobuf-c-dev and protobuf-c-compiler); without it SLUICE_HAVE_
 * PROTOBUF_C is unset and decoding is SL_EUNSUPPORTED, saying so, while the
 * records themselves still read (as raw bytes).
 *
 * Feature kinds: bytes <- bytes_list (exactly one value), integer dtypes <-
 * int64_list (range-checked), f32/f64 <- float_list.  A scalar wants one
 * value, a fixed shape its element count, [-1] any count.  A map that
 * repeats a key takes its last entry, as protobuf's own maps do.
 */
#include "formats/tfrecord.h"

#if SLUICE_HAVE_PROTOBUF_C
#include "example.pb-c.h"

bool sl__tf_can_decode(void) {
  return true;
}

static const Tensorflow__Feature *find(const Tensorflow__Example *ex,
                                       const char *name) {
  const Tensorflow__Features *fs = ex->features;
  const Tensorflow__Feature *hit = NULL;
  for (size_t i = 0; fs && i < fs->n_feature; i++)
    if (fs->feature[i]->key && strcmp(fs->feature[i]->key, name) == 0)
      hit = fs->feature[i]->value;
  return hit;
}

static const char *kind_name(const Tensorflow__Feature *f) {
  switch (f->kind_case) {
  case TENSORFLOW__FEATURE__KIND_BYTES_LIST:
    return "bytes_list";
  case TENSORFLOW__FEATURE__KIND_FLOAT_LIST:
    return "float_list";
  case TENSORFLOW__FEATURE__KIND_INT64_LIST:
    return "int64_list";
  default:
    return "no list";
  }
}

static bool int_fits(sl_dtype dt, int64_t v) {
  switch (dt) {
  case SL_I8:
    return v >= INT8_MIN && v <= INT8_MAX;
  case SL_U8:
    return v >= 0 && v <= UINT8_MAX;
  case SL_I16:
    return v >= INT16_MIN && v <= INT16_MAX;
  case SL_U16:
    return v >= 0 && v <= UINT16_MAX;
  case SL_I32:
    return v >= INT32_MIN && v <= INT32_MAX;
  case SL_U32:
    return v >= 0 && v <= (int64_t)UINT32_MAX;
  case SL_U64:
    return v >= 0;
  default:
    return true;
  }
}

/* Checks feature x of ex against f: its list and value count; *count. */
static int check_feature(const char *what, const Tensorflow__Feature *x,
                         const sl__tf_feature *f, size_t *count) {
  SL_RETURN_ERROR_IF(!x, SL_EINVAL, "tfrecord: %s: no feature '%s'", what,
                     f->name);
  int want = f->dtype == SL_BYTES                       ? 1
             : f->dtype == SL_F32 || f->dtype == SL_F64 ? 2
                                                        : 3;
  SL_RETURN_ERROR_IF((int)x->kind_case != want, SL_EINVAL,
                     "tfrecord: %s: feature '%s' is a %s, %s wants a %s", what,
                     f->name, kind_name(x), sl_dtype_name(f->dtype),
                     want == 1   ? "bytes_list"
                     : want == 2 ? "float_list"
                                 : "int64_list");
  size_t n = want == 1   ? x->bytes_list->n_value
             : want == 2 ? x->float_list->n_value
                         : x->int64_list->n_value;
  size_t expect = 1;
  bool any = f->rank == 1 && f->shape[0] == -1;
  for (int d = 0; d < f->rank && !any; d++)
    expect *= (size_t)f->shape[d];
  SL_RETURN_ERROR_IF(!any && n != expect, SL_EINVAL,
                     "tfrecord: %s: feature '%s' has %zu values, %s wants "
                     "%zu",
                     what, f->name, n, f->rank ? "its shape" : "a scalar",
                     expect);
  *count = n;
  return SL_OK;
}

int sl__tf_example_sample(const char *what, const unsigned char *data, size_t n,
                          const sl__tf_feature *f, int nf, sl_schema *schema,
                          sl_sample **out) {
  *out = NULL;
  Tensorflow__Example *ex = tensorflow__example__unpack(NULL, n, data);
  SL_RETURN_ERROR_IF(!ex, SL_ECORRUPT,
                     "tfrecord: %s: not a tf.train.Example (the protobuf "
                     "does not decode)",
                     what);
  /* One buffer for every field: sizes first. */
  size_t counts[64], offs[64], total = 0;
  const Tensorflow__Feature *xs[64];
  int rc =
      nf <= 64 ? SL_OK : sl_set_error(SL_EINVAL, "tfrecord: too many features");
  for (int i = 0; i < nf && rc == SL_OK; i++) {
    xs[i] = find(ex, f[i].name);
    rc = check_feature(what, xs[i], &f[i], &counts[i]);
    if (rc < 0) break;
    size_t bytes = f[i].dtype == SL_BYTES
                       ? xs[i]->bytes_list->value[0].len
                       : counts[i] * sl_dtype_size(f[i].dtype);
    total = (total + 7) & ~(size_t)7;
    offs[i] = total;
    total += bytes;
  }
  sl_buffer *b = rc == SL_OK ? sl_buffer_new(total) : NULL;
  if (rc == SL_OK && !b)
    rc = sl_set_error(SL_ENOMEM, "tfrecord: out of memory");
  sl_sample *s = rc == SL_OK ? sl_sample_new(schema) : NULL;
  if (rc == SL_OK && !s)
    rc = sl_set_error(SL_ENOMEM, "tfrecord: out of memory");
  unsigned char *base = b ? sl_buffer_data(b) : NULL;
  for (int i = 0; i < nf && rc == SL_OK; i++) {
    unsigned char *dst = base + offs[i];
    const sl__tf_feature *x = &f[i];
    if (x->dtype == SL_BYTES) {
      const ProtobufCBinaryData *v = &xs[i]->bytes_list->value[0];
      if (v->len) memcpy(dst, v->data, v->len);
      counts[i] = v->len;
    } else if (x->dtype == SL_F32) {
      if (counts[i]) /* an empty list may have no array at all */
        memcpy(dst, xs[i]->float_list->value, counts[i] * sizeof(float));
    } else if (x->dtype == SL_F64) {
      for (size_t k = 0; k < counts[i]; k++) {
        double d = xs[i]->float_list->value[k];
        memcpy(dst + 8 * k, &d, 8);
      }
    } else {
      size_t sz = sl_dtype_size(x->dtype);
      for (size_t k = 0; k < counts[i] && rc == SL_OK; k++) {
        int64_t v = xs[i]->int64_list->value[k];
        if (!int_fits(x->dtype, v)) {
          rc = sl_set_error(SL_EINVAL,
                            "tfrecord: %s: feature '%s': %lld does not fit "
                            "%s",
                            what, x->name, (long long)v,
                            sl_dtype_name(x->dtype));
          break;
        }
        /* Little-endian truncation to the element size. */
        for (size_t byte = 0; byte < sz; byte++)
          dst[sz * k + byte] = (unsigned char)((uint64_t)v >> (8 * byte));
      }
    }
    if (rc < 0) break;
    sl_tensor t;
    int64_t len = (int64_t)counts[i];
    if (x->dtype == SL_BYTES || (x->rank == 1 && x->shape[0] == -1))
      rc = sl_tensor_view(&t, x->dtype, 1, &len, b, offs[i]);
    else
      rc = sl_tensor_view(&t, x->dtype, x->rank, x->shape, b, offs[i]);
    if (rc == SL_OK && (rc = sl_sample_set_move(s, i, &t)) < 0)
      sl_tensor_clear(&t);
  }
  sl_buffer_release(b);
  tensorflow__example__free_unpacked(ex, NULL);
  return sl__sample_out(rc, s, out);
}

#else /* !SLUICE_HAVE_PROTOBUF_C */

bool sl__tf_can_decode(void) {
  return false;
}

int sl__tf_example_sample(const char *what, const unsigned char *data, size_t n,
                          const sl__tf_feature *f, int nf, sl_schema *schema,
                          sl_sample **out) {
  (void)data;
  (void)n;
  (void)f;
  (void)nf;
  (void)schema;
  *out = NULL;
  return sl_set_error(SL_EUNSUPPORTED,
                      "tfrecord: %s: decoding tf.train.Example needs "
                      "protobuf-c, and this libsluice was built without it "
                      "(apt-get install libprotobuf-c-dev "
                      "protobuf-c-compiler, then rebuild); without the "
                      "features option the records read as bytes",
                      what);
}

#endif
