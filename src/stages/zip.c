/*
 * zip.c - the samples of several readers side by side (Paddle's compose).
 *
 * Protocol: each next pulls one sample from every reader, in order, and
 * builds one sample whose fields are reader 0's, then reader 1's, ...; the
 * tensors are shared (buffers retained), never copied.  The output schema is
 * built the same way at construction, so field names must be distinct across
 * readers; metadata is merged, the first reader to set a key winning.
 *
 * Ends: when every reader ends together the pass ends.  When some end and
 * others still have samples, the pass fails with SL_ELENGTH naming both,
 * unless `truncate`, where it simply ends with the shortest.  Samples already
 * pulled for an incomplete row are released.  Errors from any reader pass
 * through.  Reset resets every reader.  The stage takes every reader it is
 * given, also when construction fails.
 */
#include "stages/stage.h"

typedef struct zip_state {
  sl_reader **readers; /* n readers, all owned */
  size_t n;
  int *nfields;            /* fields contributed by each reader */
  sl_sample **pulled;      /* the row being assembled, n slots */
  const sl_schema *schema; /* the output schema, kept alive by our reader */
  bool truncate;
  uint64_t count; /* samples yielded in this pass */
} zip_state;

/* Builds the output sample from a complete row, sharing its tensors. */
static int assemble(zip_state *z, sl_sample **out) {
  sl_sample *s = sl_sample_new((sl_schema *)z->schema);
  if (!s) return sl_last_error_code() ? sl_last_error_code() : SL_ENOMEM;
  int f = 0;
  for (size_t i = 0; i < z->n; i++) {
    for (int k = 0; k < z->nfields[i]; k++, f++) {
      int rc = sl_sample_set(s, f, sl_sample_at_const(z->pulled[i], k));
      if (rc < 0) {
        sl_sample_release(s);
        return sl_wrap_error(rc, "zip: sample %llu from reader %zu",
                             (unsigned long long)z->count, i);
      }
    }
  }
  *out = s;
  return SL_OK;
}

/* Reader `i` has ended (the ones before it yielded a sample): decides
 * whether the pass ends cleanly or the lengths disagree. */
static int row_ended(zip_state *z, size_t i) {
  if (z->truncate) return SL_EOF;
  unsigned long long count = (unsigned long long)z->count;
  if (i > 0)
    return sl_set_error(SL_ELENGTH,
                        "zip: reader %zu ended after %llu samples while "
                        "reader 0 has more",
                        i, count);
  /* Reader 0 ended first: peek at the others, which keeps their samples for
   * a later next should the consumer reset. */
  for (size_t j = 1; j < z->n; j++) {
    int more = sl_reader_has_next(z->readers[j]);
    if (more < 0) return more;
    if (more)
      return sl_set_error(SL_ELENGTH,
                          "zip: reader 0 ended after %llu samples while "
                          "reader %zu has more",
                          count, j);
  }
  return SL_EOF;
}

static int zip_next(void *st, sl_sample **out) {
  zip_state *z = st;
  size_t got = 0;
  int rc = SL_OK;
  while (got < z->n) {
    rc = sl_reader_next(z->readers[got], &z->pulled[got]);
    if (rc != SL_OK) break;
    got++;
  }
  if (rc == SL_OK)
    rc = assemble(z, out);
  else if (rc == SL_EOF)
    rc = row_ended(z, got);
  /* The output holds its own references to the tensors. */
  for (size_t i = 0; i < got; i++) {
    sl_sample_release(z->pulled[i]);
    z->pulled[i] = NULL;
  }
  if (rc == SL_OK) z->count++;
  return rc;
}

static int zip_reset(void *st) {
  zip_state *z = st;
  z->count = 0;
  return sl__reset_readers(z->readers, z->n);
}

static void zip_destroy(void *st) {
  zip_state *z = st;
  if (!z) return;
  sl__destroy_readers(z->readers, z->n);
  SL__FREE(z->readers, z->nfields, z->pulled, z);
}

/* The readers' common length; with truncate, the shortest.  Different
 * lengths without truncate are SL_ELENGTH, as the pass would end. */
static int zip_length(const sl_reader *r, void *st, uint64_t *n) {
  const zip_state *z = st;
  uint64_t len = 0;
  for (size_t i = 0; i < z->n; i++) {
    uint64_t k;
    SL_FORWARD_IF_ERROR(sl_reader_length(z->readers[i], &k));
    if (i == 0 || (z->truncate && k < len)) {
      len = k;
    } else if (!z->truncate && k != len) {
      return sl_set_error(SL_ELENGTH,
                          "zip: reader %zu yields %llu samples but reader 0 "
                          "yields %llu (zip them with truncate to end with "
                          "the shortest)",
                          i, (unsigned long long)k, (unsigned long long)len);
    }
  }
  *n = len;
  return SL_OK;
}

static int zip_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w) {
  zip_state *z = st;
  for (size_t i = 0; i < z->n; i++)
    SL_FORWARD_IF_ERROR(sl__state_save_up(
        w, z->readers[i], sl__state_up_pass(r, z->readers[i], pass), k));
  return SL_OK;
}

static int zip_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  zip_state *z = st;
  for (size_t i = 0; i < z->n; i++)
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, z->readers[i]));
  z->count = k;
  return SL_OK;
}

static void zip_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  snprintf(buf, cap, "truncate=%d", ((zip_state *)st)->truncate ? 1 : 0);
}

static const sl__stage_ops zip_ops = {
    .name = "zip",
    .next = zip_next,
    .reset = zip_reset,
    .destroy = zip_destroy,
    .length = zip_length,
    .save = zip_save,
    .restore = zip_restore,
    .identity = zip_identity,
};

/* The reader that contributed output field `f`. */
static size_t owner_of(const zip_state *z, int f) {
  size_t i = 0;
  while (f >= z->nfields[i])
    f -= z->nfields[i++];
  return i;
}

/* Appends the fields and metadata of every reader to `schema`, recording
 * each reader's field count. */
static int build_schema(zip_state *z, sl_schema *schema) {
  for (size_t i = 0; i < z->n; i++) {
    const sl_schema *in = sl_reader_schema(z->readers[i]);
    z->nfields[i] = sl_schema_nfields(in);
    for (int k = 0; k < z->nfields[i]; k++) {
      const char *name = sl_schema_field_name(in, k);
      int dup = sl_schema_find(schema, name);
      if (dup >= 0)
        return sl_set_error(SL_EINVAL,
                            "zip: field '%s' appears in reader %zu and "
                            "reader %zu",
                            name, owner_of(z, dup), i);
      int rc = sl_schema_add(schema, name, sl_schema_field_dtype(in, k),
                             sl_schema_field_rank(in, k),
                             sl_schema_field_shape(in, k));
      if (rc < 0) return sl_wrap_error(rc, "zip: reader %zu", i);
    }
    for (int k = 0; k < sl_schema_meta_count(in); k++) {
      const char *key, *value;
      if (sl_schema_meta_at(in, k, &key, &value) < 0 ||
          sl_schema_meta(schema, key))
        continue;
      SL_FORWARD_IF_ERROR(sl_schema_set_meta(schema, key, value));
    }
  }
  return SL_OK;
}

int sl_zip(sl_reader **readers, size_t n, int truncate, sl_reader **out) {
  SL_FORWARD_IF_ERROR(sl__check_readers("zip", readers, n, out));
  zip_state *z = sl__calloc(1, sizeof *z);
  if (z) {
    z->readers = sl__calloc(n, sizeof *z->readers);
    z->nfields = sl__calloc(n, sizeof *z->nfields);
    z->pulled = sl__calloc(n, sizeof *z->pulled);
  }
  if (!z || !z->readers || !z->nfields || !z->pulled) {
    if (z) {
      SL__FREE(z->readers, z->nfields, z->pulled, z);
    }
    sl__destroy_readers(readers, n);
    return sl_set_error(SL_ENOMEM, "zip: cannot allocate %zu readers", n);
  }
  /* From here on zip_destroy frees the readers with the state. */
  memcpy(z->readers, readers, n * sizeof *readers);
  z->n = n;
  z->truncate = truncate != 0;
  sl_schema *schema = sl_schema_new();
  int rc = schema ? build_schema(z, schema)
                  : sl_set_error(SL_ENOMEM, "zip: cannot allocate a schema");
  if (rc < 0) {
    sl_schema_release(schema);
    zip_destroy(z);
    return rc;
  }
  z->schema = schema;
  rc = sl__stage_new(&zip_ops, z, schema, z->readers, n, NULL, out);
  sl_schema_release(schema);
  return rc;
}
