/*
 * sample.c - samples: one tensor per schema field in a single allocation,
 * refcounted, immutable once published.
 *
 * A sample's block depends only on its field count, so a released block
 * of up to SPARE_CLASSES fields waits among the spares of its count for the
 * next sl_sample_new of that count: a pipeline in steady state makes its
 * samples without malloc (a reader's sample per record, a map's output
 * sample, a batch), whichever threads make and release them.  The spares
 * are process-wide, one list and mutex per field count (a schema's own
 * would live as long as the schema, which Lua keeps until its collector
 * runs, and scatter small blocks over the heap between the large chunk
 * buffers: spec/17-pinning's RSS doubled), at most SPARE_MAX a count.
 * Under ASan a spare is poisoned but for its link word, so a sample used
 * after its release is still reported.  fork: the handlers take every
 * list's mutex around it, so a child never inherits one held.
 */
#include "internal.h"

#include <pthread.h>

#if defined(__SANITIZE_ADDRESS__)
#define SPARE_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SPARE_ASAN 1
#endif
#endif
#ifdef SPARE_ASAN
#include <sanitizer/asan_interface.h>
#define SPARE_POISON(p, n) ASAN_POISON_MEMORY_REGION(p, n)
#define SPARE_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION(p, n)
#else
#define SPARE_POISON(p, n) ((void)(p), (void)(n))
#define SPARE_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

struct sl_sample {
  sl__refcnt refs;
  int nfields;
  sl_schema *schema; /* retained, frozen */
  sl_tensor fields[];
};

#define SPARE_CLASSES 16
#define SPARE_MAX 4096

typedef struct {
  pthread_mutex_t mu;
  void *head; /* linked through each block's first word */
  int n;
} spare_list;
static spare_list spares[SPARE_CLASSES];
static pthread_once_t spares_once = PTHREAD_ONCE_INIT;

static void spares_lock_all(void) {
  for (int i = 0; i < SPARE_CLASSES; i++) pthread_mutex_lock(&spares[i].mu);
}
static void spares_unlock_all(void) {
  for (int i = SPARE_CLASSES - 1; i >= 0; i--)
    pthread_mutex_unlock(&spares[i].mu);
}
static void spares_init(void) {
  for (int i = 0; i < SPARE_CLASSES; i++)
    pthread_mutex_init(&spares[i].mu, NULL);
  pthread_atfork(spares_lock_all, spares_unlock_all, spares_unlock_all);
}

static size_t block_size(int nfields) {
  return sizeof(sl_sample) + (size_t)nfields * sizeof(sl_tensor);
}

/* A spare block of `nfields` fields, or NULL. */
static sl_sample *spare_take(int nfields) {
  if (nfields < 1 || nfields > SPARE_CLASSES) return NULL;
  pthread_once(&spares_once, spares_init);
  spare_list *c = &spares[nfields - 1];
  pthread_mutex_lock(&c->mu);
  void *b = c->head;
  if (b) {
    SPARE_UNPOISON(b, block_size(nfields));
    c->head = *(void **)b;
    c->n--;
  }
  pthread_mutex_unlock(&c->mu);
  return b;
}

/* Keeps `s`'s block for the next sample of its field count; false when
 * there are enough (the caller frees it). */
static bool spare_put(sl_sample *s) {
  int nfields = s->nfields;
  if (nfields < 1 || nfields > SPARE_CLASSES) return false;
  pthread_once(&spares_once, spares_init);
  spare_list *c = &spares[nfields - 1];
  pthread_mutex_lock(&c->mu);
  bool kept = c->n < SPARE_MAX;
  if (kept) {
    void *b = s;
    *(void **)b = c->head;
    SPARE_POISON((char *)b + sizeof(void *),
                 block_size(nfields) - sizeof(void *));
    c->head = b;
    c->n++;
  }
  pthread_mutex_unlock(&c->mu);
  return kept;
}


sl_sample *sl_sample_new(sl_schema *schema) {
  if (!schema) {
    sl_set_error(SL_EINVAL, "sample: NULL schema");
    return NULL;
  }
  int n = sl_schema_nfields(schema);
  sl_sample *s = spare_take(n);
  if (!s) s = sl__malloc(block_size(n));
  if (!s) {
    sl_set_error(SL_ENOMEM, "sample: cannot allocate %d fields", n);
    return NULL;
  }
  sl__ref_init(&s->refs);
  s->nfields = n;
  sl_schema_freeze(schema);
  s->schema = sl_schema_retain(schema);
  memset(s->fields, 0, (size_t)n * sizeof(sl_tensor));
  for (int i = 0; i < n; i++)
    s->fields[i].dtype = sl_schema_field_dtype(schema, i);
  return s;
}

sl_sample *sl_sample_retain(sl_sample *s) {
  if (s) sl__ref_inc(&s->refs);
  return s;
}

void sl_sample_release(sl_sample *s) {
  if (!s || !sl__ref_dec(&s->refs)) return;
  for (int i = 0; i < s->nfields; i++) {
    sl_buffer_release(s->fields[i].buf);
    sl_buffer_release(s->fields[i].lod_buf);
  }
  sl_schema_release(s->schema);
  if (!spare_put(s)) sl__free(s);
}

int sl_sample_refcount(const sl_sample *s) {
  return s ? atomic_load_explicit(&((sl_sample *)s)->refs, memory_order_relaxed)
           : 0;
}

const sl_schema *sl_sample_schema(const sl_sample *s) {
  return s ? s->schema : NULL;
}

int sl_sample_nfields(const sl_sample *s) {
  return s ? s->nfields : 0;
}

sl_tensor *sl_sample_at(sl_sample *s, int i) {
  return (s && i >= 0 && i < s->nfields) ? &s->fields[i] : NULL;
}

const sl_tensor *sl_sample_at_const(const sl_sample *s, int i) {
  return (s && i >= 0 && i < s->nfields) ? &s->fields[i] : NULL;
}

int sl_sample_index(const sl_sample *s, const char *name) {
  SL_RETURN_ERROR_IF(!s || !name, SL_EINVAL, "sample: NULL sample or name");
  int i = sl_schema_find(s->schema, name);
  if (i >= 0) return i;
  char fields[512];
  sl_schema_describe(s->schema, fields, sizeof fields);
  return sl_set_error(SL_ENOTFOUND, "sample: no field '%s' in %s", name,
                      fields);
}

const sl_tensor *sl_sample_field(const sl_sample *s, const char *name) {
  int i = sl_sample_index(s, name);
  return i >= 0 ? &s->fields[i] : NULL;
}

int sl_sample_set_move(sl_sample *s, int i, sl_tensor *t) {
  SL_RETURN_ERROR_IF(!s || !t, SL_EINVAL, "sample: NULL sample or tensor");
  SL_RETURN_ERROR_IF(i < 0 || i >= s->nfields, SL_EINVAL,
                     "sample: field index %d out of range (%d fields)", i,
                     s->nfields);
  SL_FORWARD_IF_ERROR(sl_schema_check(s->schema, i, t));
  sl_tensor old = s->fields[i];
  s->fields[i] = *t;
  memset(t, 0, sizeof *t);
  sl_buffer_release(old.buf);
  sl_buffer_release(old.lod_buf);
  return SL_OK;
}

int sl_sample_set(sl_sample *s, int i, const sl_tensor *t) {
  SL_RETURN_ERROR_IF(!t, SL_EINVAL, "sample: NULL tensor");
  sl_tensor ref;
  sl_tensor_copy_ref(&ref, t);
  int rc = sl_sample_set_move(s, i, &ref);
  if (rc < 0) sl_tensor_clear(&ref);
  return rc;
}

int sl_sample_alloc(sl_sample *s, int i, int rank, const int64_t *shape,
                    void **data) {
  SL_RETURN_ERROR_IF(!s || i < 0 || i >= s->nfields, SL_EINVAL,
                     "sample: field index %d out of range", i);
  sl_tensor t;
  SL_FORWARD_IF_ERROR(
      sl_tensor_alloc(&t, sl_schema_field_dtype(s->schema, i), rank, shape));
  int rc = sl_sample_set_move(s, i, &t);
  if (rc < 0) {
    sl_tensor_clear(&t);
    return rc;
  }
  if (data) *data = s->fields[i].data;
  return SL_OK;
}

size_t sl_sample_nbytes(const sl_sample *s) {
  if (!s) return 0;
  size_t n = 0;
  for (int i = 0; i < s->nfields; i++)
    n +=
        s->fields[i].nbytes +
        (s->fields[i].lod ? (size_t)s->fields[i].lod_len * sizeof(int64_t) : 0);
  return n;
}
