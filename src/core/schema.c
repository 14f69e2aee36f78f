/*
 * schema.c - schemas: ordered named fields with dtype and shape (SL_DIM_VAR
 * for a variable dimension) plus user metadata.  Mutable until frozen; frozen
 * schemas are shared read-only between threads.
 */
#include "internal.h"

#include <time.h>

#define SL_NAME_MAX 63

typedef struct field {
  char name[SL_NAME_MAX + 1];
  sl_dtype dtype;
  int rank;
  int64_t shape[SL_MAX_RANK];
  bool var;
} field;

typedef struct meta {
  char *key;
  char *value;
  uint64_t hash;
} meta;

/* Metadata keys are found through an open-addressing hash table (linear
 * probing, at most half full) keyed by a hash seeded per schema, so setting
 * or finding a key is O(1) on average and a file's keys cannot be chosen to
 * collide without knowing the seed: reading 65 536 entries is linear, not
 * quadratic. */
struct sl_schema {
  sl__refcnt refs;
  atomic_bool frozen;
  int nfields, cap;
  field *fields;
  int nmeta, meta_cap;
  meta *meta;
  uint32_t *slots; /* meta index + 1, 0 = empty; slot_cap entries */
  uint32_t slot_cap;
  uint64_t seed;
};

static uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static uint64_t key_hash(const sl_schema *s, const char *key) {
  uint64_t h = s->seed;
  for (const unsigned char *p = (const unsigned char *)key; *p; p++)
    h = (h ^ *p) * 0x100000001b3ull;
  return mix64(h);
}

/* The index of `key` in s->meta, or -1. */
static int meta_find(const sl_schema *s, const char *key, uint64_t h) {
  if (!s->slot_cap) return -1;
  uint32_t mask = s->slot_cap - 1;
  for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
    uint32_t v = s->slots[i];
    if (!v) return -1;
    const meta *m = &s->meta[v - 1];
    if (m->hash == h && strcmp(m->key, key) == 0) return (int)(v - 1);
  }
}

static void slot_put(uint32_t *slots, uint32_t cap, uint64_t h, uint32_t v) {
  uint32_t mask = cap - 1, i = (uint32_t)h & mask;
  while (slots[i])
    i = (i + 1) & mask;
  slots[i] = v;
}

/* Makes room in the table for one more entry. */
static int slots_reserve(sl_schema *s) {
  if ((uint64_t)(s->nmeta + 1) * 2 <= s->slot_cap) return SL_OK;
  uint32_t cap = s->slot_cap ? s->slot_cap * 2 : 16;
  uint32_t *t = sl__calloc(cap, sizeof *t);
  SL_RETURN_ERROR_IF(!t, SL_ENOMEM, "schema: cannot grow the metadata index");
  for (int i = 0; i < s->nmeta; i++)
    slot_put(t, cap, s->meta[i].hash, (uint32_t)i + 1);
  sl__free(s->slots);
  s->slots = t;
  s->slot_cap = cap;
  return SL_OK;
}

sl_schema *sl_schema_new(void) {
  sl_schema *s = sl__calloc(1, sizeof *s);
  if (!s) {
    sl_set_error(SL_ENOMEM, "schema: cannot allocate");
    return NULL;
  }
  sl__ref_init(&s->refs);
  atomic_init(&s->frozen, false);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  s->seed = mix64((uint64_t)(uintptr_t)s ^ mix64((uint64_t)ts.tv_nsec ^
                                                  (uint64_t)ts.tv_sec << 32));
  return s;
}

static bool is_frozen(const sl_schema *s) {
  return atomic_load_explicit(&((sl_schema *)s)->frozen, memory_order_acquire);
}

int sl_schema_add(sl_schema *s, const char *name, sl_dtype dtype, int rank,
                  const int64_t *shape) {
  SL_RETURN_ERROR_IF(!s, SL_EINVAL, "schema: NULL schema");
  SL_RETURN_ERROR_IF(is_frozen(s), SL_ESTATE,
                     "schema: cannot add field '%s' to a frozen schema",
                     name ? name : "(null)");
  SL_RETURN_ERROR_IF(!name || !name[0] || strlen(name) > SL_NAME_MAX, SL_EINVAL,
                     "schema: field name must be 1..%d bytes", SL_NAME_MAX);
  SL_RETURN_ERROR_IF(sl_schema_find(s, name) >= 0, SL_EINVAL,
                     "schema: duplicate field '%s'", name);
  SL_RETURN_ERROR_IF(sl_dtype_size(dtype) == 0, SL_EINVAL,
                     "schema: field '%s' has an invalid dtype %d", name,
                     (int)dtype);
  SL_RETURN_ERROR_IF(rank < 0 || rank > SL_MAX_RANK || (rank && !shape),
                     SL_EINVAL, "schema: field '%s' has rank %d (max %d)", name,
                     rank, SL_MAX_RANK);
  bool var = false;
  for (int i = 0; i < rank; i++) {
    SL_RETURN_ERROR_IF(shape[i] < 0 && shape[i] != SL_DIM_VAR, SL_EINVAL,
                       "schema: field '%s' dim %d is %lld (use -1 for a "
                       "variable dimension)",
                       name, i, (long long)shape[i]);
    if (shape[i] == SL_DIM_VAR) var = true;
  }
  if (s->nfields == s->cap) {
    int cap = s->cap ? s->cap * 2 : 4;
    field *f = sl__realloc(s->fields, (size_t)cap * sizeof *f);
    SL_RETURN_ERROR_IF(!f, SL_ENOMEM, "schema: cannot grow to %d fields", cap);
    s->fields = f;
    s->cap = cap;
  }
  field *f = &s->fields[s->nfields];
  memset(f, 0, sizeof *f);
  memcpy(f->name, name, strlen(name) + 1);
  f->dtype = dtype;
  f->rank = rank;
  for (int i = 0; i < rank; i++)
    f->shape[i] = shape[i];
  f->var = var;
  return s->nfields++;
}

int sl_schema_set_meta(sl_schema *s, const char *key, const char *value) {
  SL_RETURN_ERROR_IF(!s || !key || !value, SL_EINVAL,
                     "schema: NULL metadata argument");
  SL_RETURN_ERROR_IF(is_frozen(s), SL_ESTATE,
                     "schema: cannot set metadata '%s' on a frozen schema",
                     key);
  uint64_t h = key_hash(s, key);
  int at = meta_find(s, key, h);
  SL_RETURN_ERROR_IF(at < 0 && s->nmeta >= SL_MAX_META, SL_EINVAL,
                     "schema: cannot add metadata '%.64s': at most %d entries",
                     key, SL_MAX_META);
  char *v = sl__strdup(value);
  SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "schema: cannot copy metadata '%.64s'",
                     key);
  if (at >= 0) {
    sl__free(s->meta[at].value);
    s->meta[at].value = v;
    return SL_OK;
  }
  if (slots_reserve(s) < 0) {
    sl__free(v);
    return SL_ENOMEM;
  }
  char *k = sl__strdup(key);
  if (!k) {
    sl__free(v);
    return sl_set_error(SL_ENOMEM, "schema: cannot copy metadata '%s'", key);
  }
  if (s->nmeta == s->meta_cap) {
    int cap = s->meta_cap ? s->meta_cap * 2 : 4;
    meta *m = sl__realloc(s->meta, (size_t)cap * sizeof *m);
    if (!m) {
      sl__free(k);
      sl__free(v);
      return sl_set_error(SL_ENOMEM, "schema: cannot grow metadata");
    }
    s->meta = m;
    s->meta_cap = cap;
  }
  s->meta[s->nmeta].key = k;
  s->meta[s->nmeta].value = v;
  s->meta[s->nmeta].hash = h;
  s->nmeta++;
  slot_put(s->slots, s->slot_cap, h, (uint32_t)s->nmeta);
  return SL_OK;
}

const char *sl_schema_meta(const sl_schema *s, const char *key) {
  if (!s || !key) return NULL;
  int i = meta_find(s, key, key_hash(s, key));
  return i < 0 ? NULL : s->meta[i].value;
}

int sl_schema_meta_count(const sl_schema *s) {
  return s ? s->nmeta : 0;
}

int sl_schema_meta_at(const sl_schema *s, int i, const char **key,
                      const char **value) {
  SL_RETURN_ERROR_IF(!s || i < 0 || i >= s->nmeta, SL_EINVAL,
                     "schema: metadata index %d out of range", i);
  if (key) *key = s->meta[i].key;
  if (value) *value = s->meta[i].value;
  return SL_OK;
}

void sl_schema_freeze(sl_schema *s) {
  if (s) atomic_store_explicit(&s->frozen, true, memory_order_release);
}

sl_schema *sl_schema_copy(const sl_schema *src) {
  if (!src) {
    sl_set_error(SL_EINVAL, "schema: NULL schema to copy");
    return NULL;
  }
  sl_schema *s = sl_schema_new();
  if (!s) return NULL;
  for (int i = 0; i < src->nfields; i++) {
    const field *f = &src->fields[i];
    if (sl_schema_add(s, f->name, f->dtype, f->rank, f->shape) < 0) goto fail;
  }
  for (int i = 0; i < src->nmeta; i++)
    if (sl_schema_set_meta(s, src->meta[i].key, src->meta[i].value) < 0)
      goto fail;
  return s;
fail:
  sl_schema_release(s);
  return NULL;
}

int sl_schema_nfields(const sl_schema *s) {
  return s ? s->nfields : 0;
}

int sl_schema_find(const sl_schema *s, const char *name) {
  if (!s || !name) return -1;
  for (int i = 0; i < s->nfields; i++)
    if (strcmp(s->fields[i].name, name) == 0) return i;
  return -1;
}

static const field *get(const sl_schema *s, int i) {
  return (s && i >= 0 && i < s->nfields) ? &s->fields[i] : NULL;
}

const char *sl_schema_field_name(const sl_schema *s, int i) {
  const field *f = get(s, i);
  return f ? f->name : NULL;
}
sl_dtype sl_schema_field_dtype(const sl_schema *s, int i) {
  const field *f = get(s, i);
  return f ? f->dtype : SL_DTYPE_INVALID;
}
int sl_schema_field_rank(const sl_schema *s, int i) {
  const field *f = get(s, i);
  return f ? f->rank : -1;
}
const int64_t *sl_schema_field_shape(const sl_schema *s, int i) {
  const field *f = get(s, i);
  return f ? f->shape : NULL;
}
int sl_schema_field_is_var(const sl_schema *s, int i) {
  const field *f = get(s, i);
  return f ? f->var : 0;
}

int sl_schema_equal(const sl_schema *a, const sl_schema *b) {
  if (a == b) return 1;
  if (!a || !b || a->nfields != b->nfields) return 0;
  for (int i = 0; i < a->nfields; i++) {
    const field *x = &a->fields[i], *y = &b->fields[i];
    if (strcmp(x->name, y->name) || x->dtype != y->dtype || x->rank != y->rank)
      return 0;
    for (int d = 0; d < x->rank; d++)
      if (x->shape[d] != y->shape[d]) return 0;
  }
  return 1;
}

static char *describe_field(const field *f, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "%s[", sl_dtype_name(f->dtype));
  for (int d = 0; d < f->rank && n < size; d++) {
    if (f->shape[d] == SL_DIM_VAR)
      n += (size_t)snprintf(buf + n, size - n, d ? ",-1" : "-1");
    else
      n += (size_t)snprintf(buf + n, size - n, d ? ",%lld" : "%lld",
                            (long long)f->shape[d]);
  }
  if (n < size) snprintf(buf + n, size - n, "]");
  return buf;
}

int sl_schema_check(const sl_schema *s, int i, const sl_tensor *t) {
  const field *f = get(s, i);
  SL_RETURN_ERROR_IF(!f, SL_EINVAL, "schema: field index %d out of range", i);
  bool ok = t && t->dtype == f->dtype && t->rank == f->rank;
  for (int d = 0; ok && d < f->rank; d++)
    if (f->shape[d] != SL_DIM_VAR && f->shape[d] != t->shape[d]) ok = false;
  if (ok) return SL_OK;
  char want[128], got[128];
  describe_field(f, want, sizeof want);
  sl_tensor_describe(t, got, sizeof got);
  return sl_set_error(SL_ESHAPE, "field '%s': expected %s, got %s", f->name,
                      want, got);
}

char *sl_schema_describe(const sl_schema *s, char *buf, size_t size) {
  if (!size) return buf;
  size_t n = (size_t)snprintf(buf, size, "{");
  for (int i = 0; s && i < s->nfields && n < size; i++) {
    char f[128];
    describe_field(&s->fields[i], f, sizeof f);
    n += (size_t)snprintf(buf + n, size - n, "%s%s: %s", i ? ", " : "",
                          s->fields[i].name, f);
  }
  if (n < size) snprintf(buf + n, size - n, "}");
  return buf;
}

sl_schema *sl_schema_retain(sl_schema *s) {
  if (s) sl__ref_inc(&s->refs);
  return s;
}

void sl_schema_release(sl_schema *s) {
  if (!s || !sl__ref_dec(&s->refs)) return;
  for (int i = 0; i < s->nmeta; i++) {
    sl__free(s->meta[i].key);
    sl__free(s->meta[i].value);
  }
  SL__FREE(s->meta, s->slots, s->fields, s);
}
