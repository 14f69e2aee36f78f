/*
 * wds_shard.c - WebDataset samples from a tar shard (wds.h).
 *
 * WebDataset's convention: consecutive members whose names share a key -
 * the path up to the first dot of the last component - form one sample,
 * one field per extension (the rest of the name: "a/b.x.npy" is key "a/b",
 * field "x.npy").  Members without an extension are passed over.
 *
 * Field types by extension: "cls" is an integer written as text -> i64
 * scalar; an extension ending in "npy" is a .npy array -> its dtype and
 * rank (every dimension variable in the schema); anything else ("txt",
 * "json", "jpg", "png", ...) -> bytes, for decode_image or a Lua map to
 * interpret.  A `__key__` bytes field carries the key.  Every sample must
 * have the first sample's fields: a missing or extra one is an error
 * naming the shard and key - except that an image field (jpg, jpeg, png)
 * takes any of the three, so a mixed folder's shards read.  Fields asked
 * for (sl_wds_opts.fields) hold alternatives, WebDataset's "jpg;png": the
 * sample's one member among them; other members are passed over, and a
 * sample without every field fails or, under SL_WDS_MISSING_SKIP, is no
 * sample at all (sl__wds_group_complete, used by the counts too).
 *
 * Samples are views of the mapping (bytes and npy fields) plus one small
 * buffer for the key and the cls values.  A shard named by URL is read
 * through a ranged byte source instead of being fetched whole: the walk
 * reads headers by read_at, and each member a sample needs is read into a
 * buffer of its own, so memory is the source's read-ahead block plus the
 * samples in flight, whatever the shard's size.
 *
 * A set identity (wds.h: the member __sluice_set__, which has no
 * extension and so is passed over as above) is read by sl__wds_shard_set
 * and compared across a set's local shards by sl__wds_set_check.
 */
#include "transport/fmt_map.h"
#include "transport/http.h"
#include "formats/npy.h"
#include "formats/wds.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

int sl__wds_shard_open(const char *path, sl__wds_shard **out) {
  *out = NULL;
  sl__wds_shard *sh = sl__calloc(1, sizeof *sh);
  SL_RETURN_ERROR_IF(!sh, SL_ENOMEM, "wds: out of memory");
  sh->path = sl__strdup(path);
  int rc = !sh->path          ? sl_set_error(SL_ENOMEM, "wds: out of memory")
           : sl__is_url(path) ? sl__source_open_url("wds", path, &sh->src)
                              : sl__map_file("wds", path, &sh->map, &sh->id);
  if (rc < 0) {
    sl__wds_shard_close(sh);
    return rc;
  }
  if (sh->src) {
    sh->id = sh->src->id;
    sh->size = sh->src->size;
    sl__tar_init_source(&sh->tar, sh->src);
  } else {
    sh->size = sl_buffer_size(sh->map);
    sl__tar_init(&sh->tar, sl_buffer_data(sh->map), sl_buffer_size(sh->map));
  }
  *out = sh;
  return SL_OK;
}

/* Drops the member bytes read for the group read last. */
static void drop_members(sl__wds_shard *sh) {
  for (int i = 0; i < sh->nm; i++) {
    sl_buffer_release(sh->m[i].buf);
    sh->m[i].buf = NULL;
  }
}

void sl__wds_shard_close(sl__wds_shard *sh) {
  if (!sh) return;
  drop_members(sh);
  sl__tar_fini(&sh->tar);
  sl_buffer_release(sh->map);
  sl__source_close(sh->src);
  SL__FREE(sh->key, sh->path, sh);
}

uint64_t sl__wds_shard_held(const sl__wds_shard *sh) {
  return sh ? sl__tar_held(&sh->tar) + sh->key_cap : 0;
}

void sl__wds_shard_seek(sl__wds_shard *sh, uint64_t off, uint64_t index) {
  sh->tar.off = off;
  sh->index = index;
}

static int set_key(sl__wds_shard *sh, const char *k, size_t kl) {
  if (kl + 1 > sh->key_cap) {
    char *p = sl__realloc(sh->key, kl + 1);
    SL_RETURN_ERROR_IF(!p, SL_ENOMEM, "wds: out of memory");
    sh->key = p;
    sh->key_cap = kl + 1;
  }
  memcpy(sh->key, k, kl);
  sh->key[kl] = 0;
  return SL_OK;
}

/* The bytes of member m: *buf (borrowed) at byte *off.  Mapped: the
 * mapping at the member's offset; from a source: read once into m->buf. */
static int member_bytes(sl__wds_shard *sh, sl__wds_member *m, sl_buffer **buf,
                        size_t *off) {
  if (!sh->src) {
    *buf = sh->map;
    *off = (size_t)m->data;
    return SL_OK;
  }
  if (!m->buf) {
    SL_RETURN_ERROR_IF(m->size > SIZE_MAX / 2, SL_ENOMEM,
                       "wds: %s: member .%s of %llu bytes", sh->path, m->ext,
                       (unsigned long long)m->size);
    sl_buffer *b = sl_buffer_new((size_t)m->size);
    SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "wds: %s: out of memory (%llu bytes)",
                       sh->path, (unsigned long long)m->size);
    int rc =
        sh->src->read_at(sh->src, m->data, sl_buffer_data(b), (size_t)m->size);
    if (rc < 0) {
      sl_buffer_release(b);
      return sl_wrap_error(rc, "wds: %s: sample '%s', member %s", sh->path,
                           sh->key, m->ext);
    }
    m->buf = b;
  }
  *buf = m->buf;
  *off = 0;
  return SL_OK;
}

int sl__wds_shard_group(sl__wds_shard *sh) {
  drop_members(sh);
  sh->nm = 0;
  for (;;) {
    uint64_t before = sh->tar.off;
    int rc = sl__tar_next(&sh->tar, sh->path);
    if (rc == SL_EOF) break;
    SL_FORWARD_IF_ERROR(rc);
    const char *name = sh->tar.name, *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name, *dot = strchr(base, '.');
    if (!dot || dot == base) continue; /* no key or no extension */
    size_t kl = (size_t)(dot - name);
    const char *ext = dot + 1;
    if (sh->nm > 0 && (strlen(sh->key) != kl || memcmp(sh->key, name, kl))) {
      sh->tar.off = before; /* the next sample's first member */
      break;
    }
    if (sh->nm == 0) {
      SL_FORWARD_IF_ERROR(set_key(sh, name, kl));
      sh->group_off = sh->tar.header;
    }
    SL_RETURN_ERROR_IF(strlen(ext) >= SL__WDS_EXT_MAX, SL_EINVAL,
                       "wds: %s: member %s: extension longer than %d bytes",
                       sh->path, name, SL__WDS_EXT_MAX - 1);
    for (int i = 0; i < sh->nm; i++)
      SL_RETURN_ERROR_IF(strcmp(sh->m[i].ext, ext) == 0, SL_EINVAL,
                         "wds: %s: sample '%s' has two '%s' members", sh->path,
                         sh->key, ext);
    SL_RETURN_ERROR_IF(sh->nm == SL__WDS_MAX_FIELDS - 1, SL_EUNSUPPORTED,
                       "wds: %s: sample '%s' has more than %d members",
                       sh->path, sh->key, SL__WDS_MAX_FIELDS - 1);
    sl__wds_member *m = &sh->m[sh->nm++];
    snprintf(m->ext, sizeof m->ext, "%s", ext);
    m->buf = NULL;
    m->data = sh->tar.data;
    m->size = sh->tar.size;
    if (sh->src && !sh->headers_only) { /* in file order: see wds.h */
      sl_buffer *b;
      size_t bo;
      SL_FORWARD_IF_ERROR(member_bytes(sh, m, &b, &bo));
    }
  }
  if (sh->nm == 0) return SL_EOF;
  sh->index++;
  return SL_OK;
}

int sl__wds_shard_count(const char *path, const sl__wds_layout *lay,
                        uint64_t *n) {
  *n = 0;
  sl__wds_shard *sh;
  SL_FORWARD_IF_ERROR(sl__wds_shard_open(path, &sh));
  sh->headers_only = true;
  uint64_t c = 0;
  int rc;
  while ((rc = sl__wds_shard_group(sh)) == SL_OK)
    c += !lay->skip_incomplete || sl__wds_group_complete(sh, lay);
  sl__wds_shard_close(sh);
  if (rc != SL_EOF) return rc;
  *n = c;
  return SL_OK;
}

static bool ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The kind a member's extension gives its field. */
static sl__wds_kind kind_of(const char *ext) {
  return strcmp(ext, "cls") == 0 ? SL__WDS_CLS
         : ends_with(ext, "npy") ? SL__WDS_NPY
                                 : SL__WDS_BYTES;
}

/* The image extensions a field of the first sample's takes in any later
 * sample: a folder of JPEG and PNG files packs into shards of both. */
static const char k_image_alts[] = ";jpg;jpeg;png;";

/* Whether `ext` is one of alts = ";a;b;". */
static bool is_alt(const char *alts, const char *ext) {
  size_t n = strlen(ext);
  if (n == 0 || strchr(ext, ';')) return false;
  for (const char *p = strstr(alts, ext); p; p = strstr(p + 1, ext))
    if (p > alts && p[-1] == ';' && p[n] == ';') return true;
  return false;
}

/* The field of `lay` that member extension `ext` belongs to, or -1. */
static int field_of(const sl__wds_layout *lay, const char *ext) {
  for (int f = 1; f < lay->nf; f++)
    if (is_alt(lay->alts[f], ext)) return f;
  return -1;
}

static int cmp_member(const void *a, const void *b) {
  return strcmp((*(sl__wds_member *const *)a)->ext,
                (*(sl__wds_member *const *)b)->ext);
}

void sl__wds_layout_free(sl__wds_layout *lay) {
  if (!lay) return;
  sl_schema_release(lay->schema);
  sl__free(lay->fields);
  sl__free(lay);
}

/* One field of a fields list, spec[0..n) = "EXT;EXT..." or "NAME=EXT;...",
 * into field f of lay. */
static int parse_field(sl__wds_layout *lay, int f, const char *spec, size_t n) {
  const char *eq = memchr(spec, '=', n);
  const char *alts = eq ? eq + 1 : spec;
  size_t name_len = eq ? (size_t)(eq - spec) : n;
  size_t al = n - (size_t)(alts - spec);
  SL_RETURN_ERROR_IF(name_len == 0 || name_len >= SL__WDS_EXT_MAX || al == 0 ||
                         al + 3 > SL__WDS_ALTS_MAX,
                     SL_EINVAL,
                     "wds: fields: '%.*s' is not EXT, EXT;EXT... or "
                     "NAME=EXT;... (names below %d bytes, alternatives below "
                     "%d)",
                     (int)n, spec, SL__WDS_EXT_MAX, SL__WDS_ALTS_MAX - 2);
  snprintf(lay->name[f], SL__WDS_EXT_MAX, "%.*s", (int)name_len, spec);
  snprintf(lay->alts[f], SL__WDS_ALTS_MAX, ";%.*s;", (int)al, alts);
  /* Every alternative non-empty, of one kind, and in no other field. */
  const char *a = lay->alts[f] + 1;
  int kind = -1;
  while (*a) {
    const char *e = strchr(a, ';');
    char ext[SL__WDS_EXT_MAX];
    size_t el = (size_t)(e - a);
    SL_RETURN_ERROR_IF(el == 0 || el >= SL__WDS_EXT_MAX, SL_EINVAL,
                       "wds: fields: '%.*s': an empty or too long "
                       "extension",
                       (int)n, spec);
    snprintf(ext, sizeof ext, "%.*s", (int)el, a);
    SL_RETURN_ERROR_IF(kind >= 0 && (int)kind_of(ext) != kind, SL_EINVAL,
                       "wds: fields: '%.*s' mixes extensions of different "
                       "types (cls, *npy and the rest are read apart)",
                       (int)n, spec);
    kind = (int)kind_of(ext);
    int g = field_of(lay, ext);
    SL_RETURN_ERROR_IF(g >= 0 && g < f, SL_EINVAL,
                       "wds: fields: extension '%s' is in two fields", ext);
    for (int h = 0; h < f; h++)
      SL_RETURN_ERROR_IF(strcmp(lay->name[h], lay->name[f]) == 0, SL_EINVAL,
                         "wds: fields: two fields named '%s'", lay->name[f]);
    a = e + 1;
  }
  lay->kind[f] = (sl__wds_kind)kind;
  return SL_OK;
}

/* The fields list "SPEC,SPEC,..." into lay's fields 1.. */
static int parse_fields(sl__wds_layout *lay, const char *fields) {
  SL_RETURN_ERROR_IF(!(lay->fields = sl__strdup(fields)), SL_ENOMEM,
                     "wds: out of memory");
  const char *p = fields;
  for (;;) {
    const char *c = strchr(p, ',');
    size_t n = c ? (size_t)(c - p) : strlen(p);
    SL_RETURN_ERROR_IF(lay->nf == SL__WDS_MAX_FIELDS, SL_EINVAL,
                       "wds: fields: more than %d", SL__WDS_MAX_FIELDS - 1);
    SL_FORWARD_IF_ERROR(parse_field(lay, lay->nf, p, n));
    lay->nf++;
    if (!c) return SL_OK;
    p = c + 1;
  }
}

bool sl__wds_group_complete(const sl__wds_shard *sh,
                            const sl__wds_layout *lay) {
  for (int f = 1; f < lay->nf; f++) {
    int i = 0;
    while (i < sh->nm && !is_alt(lay->alts[f], sh->m[i].ext))
      i++;
    if (i == sh->nm) return false;
  }
  return true;
}

/* The member of field f in the group just read, or NULL (several: an
 * error). */
static int member_of(sl__wds_shard *sh, const sl__wds_layout *lay, int f,
                     sl__wds_member **out) {
  *out = NULL;
  for (int i = 0; i < sh->nm; i++) {
    if (!is_alt(lay->alts[f], sh->m[i].ext)) continue;
    SL_RETURN_ERROR_IF(*out, SL_EINVAL,
                       "wds: %s: sample '%s' has a '%s' and a '%s' member, "
                       "both for field '%s' (one of %.*s)",
                       sh->path, sh->key, (*out)->ext, sh->m[i].ext,
                       lay->name[f], (int)strlen(lay->alts[f]) - 2,
                       lay->alts[f] + 1);
    *out = &sh->m[i];
  }
  return SL_OK;
}

int sl__wds_layout_make(sl__wds_shard *sh, const char *fields, int missing,
                        sl__wds_layout **out) {
  *out = NULL;
  sl__wds_layout *lay = sl__calloc(1, sizeof *lay);
  SL_RETURN_ERROR_IF(!lay, SL_ENOMEM, "wds: out of memory");
  sl__wds_member *m[SL__WDS_MAX_FIELDS] = {0};
  snprintf(lay->name[0], SL__WDS_EXT_MAX, "__key__");
  lay->kind[0] = SL__WDS_KEY;
  lay->nf = 1;
  lay->skip_incomplete = missing == SL_WDS_MISSING_SKIP;
  int rc = missing == SL_WDS_MISSING_FAIL || missing == SL_WDS_MISSING_SKIP
               ? SL_OK
               : sl_set_error(SL_EINVAL,
                              "wds: missing %d is not SL_WDS_MISSING_FAIL or "
                              "SL_WDS_MISSING_SKIP",
                              missing);
  if (fields && rc == SL_OK) {
    rc = parse_fields(lay, fields);
    for (int f = 1; f < lay->nf && rc == SL_OK; f++) {
      rc = member_of(sh, lay, f, &m[f]);
      /* Skipping incomplete samples, the first may be one, unless an npy
       * field needs its member's dtype and rank. */
      if (rc == SL_OK && !m[f] &&
          (!lay->skip_incomplete || lay->kind[f] == SL__WDS_NPY))
        rc = sl_set_error(SL_EINVAL,
                          "wds: %s: the first sample, '%s', has no member for "
                          "field '%s' (one of %.*s)",
                          sh->path, sh->key, lay->name[f],
                          (int)strlen(lay->alts[f]) - 2, lay->alts[f] + 1);
    }
  } else {
    for (int i = 0; i < sh->nm; i++)
      m[i + 1] = &sh->m[i];
    qsort(m + 1, (size_t)sh->nm, sizeof *m, cmp_member);
    int images = 0;
    for (int f = 1; f <= sh->nm; f++)
      images += is_alt(k_image_alts, m[f]->ext);
    for (int f = 1; f <= sh->nm; f++) {
      snprintf(lay->name[f], SL__WDS_EXT_MAX, "%s", m[f]->ext);
      if (images == 1 && is_alt(k_image_alts, m[f]->ext))
        snprintf(lay->alts[f], SL__WDS_ALTS_MAX, "%s", k_image_alts);
      else
        snprintf(lay->alts[f], SL__WDS_ALTS_MAX, ";%s;", m[f]->ext);
      lay->kind[f] = kind_of(m[f]->ext);
    }
    lay->nf = sh->nm + 1;
  }
  for (int f = 1; f < lay->nf && rc == SL_OK; f++) {
    if (lay->kind[f] != SL__WDS_NPY || !m[f]) continue;
    sl__npy h;
    char what[512];
    snprintf(what, sizeof what, "%s, sample '%s', member %s", sh->path, sh->key,
             m[f]->ext);
    sl_buffer *b;
    size_t bo;
    rc = member_bytes(sh, m[f], &b, &bo);
    if (rc == SL_OK)
      rc = sl__npy_parse(what, (const unsigned char *)sl_buffer_data(b) + bo,
                         (size_t)m[f]->size, &h);
    if (rc == SL_OK) {
      lay->dtype[f] = h.dtype;
      lay->rank[f] = h.rank;
    }
  }
  sl_schema *sc = lay->schema = rc == SL_OK ? sl_schema_new() : NULL;
  if (rc == SL_OK && !sc) rc = sl_set_error(SL_ENOMEM, "wds: out of memory");
  int64_t var[SL_MAX_RANK];
  for (int d = 0; d < SL_MAX_RANK; d++)
    var[d] = -1;
  for (int f = 0; f < lay->nf && rc >= 0; f++) {
    switch (lay->kind[f]) {
    case SL__WDS_CLS:
      rc = sl_schema_add(sc, lay->name[f], SL_I64, 0, NULL);
      break;
    case SL__WDS_NPY:
      rc = sl_schema_add(sc, lay->name[f], lay->dtype[f], lay->rank[f], var);
      break;
    default:
      rc = sl_schema_add(sc, lay->name[f], SL_BYTES, 1, var);
    }
  }
  if (rc >= 0) rc = sl_schema_set_meta(sc, "source", "wds");
  if (rc < 0) {
    sl__wds_layout_free(lay);
    return sl_wrap_error(rc, "wds: %s: the fields of sample '%s'", sh->path,
                         sh->key);
  }
  *out = lay;
  return SL_OK;
}

/* A .cls member: an integer written as text (spaces around allowed). */
static int parse_cls(sl__wds_shard *sh, sl__wds_member *m, int64_t *v) {
  sl_buffer *b;
  size_t bo;
  SL_FORWARD_IF_ERROR(member_bytes(sh, m, &b, &bo));
  const char *p = (const char *)sl_buffer_data(b) + bo;
  char tmp[32];
  size_t n = (size_t)m->size;
  while (n && (p[n - 1] == '\n' || p[n - 1] == '\r' || p[n - 1] == ' '))
    n--;
  while (n && *p == ' ') {
    p++;
    n--;
  }
  bool ok = n > 0 && n < sizeof tmp;
  char *end = NULL;
  if (ok) {
    memcpy(tmp, p, n);
    tmp[n] = 0;
    errno = 0;
    *v = strtoll(tmp, &end, 10);
    ok = end == tmp + n && errno == 0;
  }
  SL_RETURN_ERROR_IF(!ok, SL_EINVAL,
                     "wds: %s: sample '%s': member %s is not an integer",
                     sh->path, sh->key, m->ext);
  return SL_OK;
}

int sl__wds_shard_sample(sl__wds_shard *sh, const sl__wds_layout *lay,
                         sl_sample **out) {
  *out = NULL;
  /* Every field needs one member; a member of no field is an error, or
   * passed over when the fields were asked for. */
  sl__wds_member *by_field[SL__WDS_MAX_FIELDS] = {0};
  int ncls = 0;
  for (int i = 0; i < sh->nm && !lay->fields; i++)
    SL_RETURN_ERROR_IF(field_of(lay, sh->m[i].ext) < 0, SL_EINVAL,
                       "wds: %s: sample '%s' has a '%s' member, which the "
                       "data set's first sample has not (every sample needs "
                       "the same fields; sl_wds_opts.fields selects some)",
                       sh->path, sh->key, sh->m[i].ext);
  for (int f = 1; f < lay->nf; f++) {
    SL_FORWARD_IF_ERROR(member_of(sh, lay, f, &by_field[f]));
    SL_RETURN_ERROR_IF(!by_field[f], SL_EINVAL,
                       "wds: %s: sample '%s' has no '%s' member (the data "
                       "set's first sample has one: one of %.*s; every sample "
                       "needs the same fields)",
                       sh->path, sh->key, lay->name[f],
                       (int)strlen(lay->alts[f]) - 2, lay->alts[f] + 1);
    ncls += lay->kind[f] == SL__WDS_CLS;
  }
  size_t kl = strlen(sh->key);
  sl_buffer *own = sl_buffer_new(8 * (size_t)ncls + kl);
  SL_RETURN_ERROR_IF(!own, SL_ENOMEM, "wds: out of memory");
  unsigned char *od = sl_buffer_data(own);
  memcpy(od + 8 * (size_t)ncls, sh->key, kl);
  sl_sample *s = sl_sample_new(lay->schema);
  int rc = s ? SL_OK : sl_set_error(SL_ENOMEM, "wds: out of memory");
  int cls_at = 0;
  for (int f = 0; f < lay->nf && rc == SL_OK; f++) {
    sl__wds_member *m = by_field[f];
    sl_tensor t;
    int64_t len;
    sl_buffer *b = NULL;
    size_t bo = 0;
    switch (lay->kind[f]) {
    case SL__WDS_KEY:
      len = (int64_t)kl;
      rc = sl_tensor_view(&t, SL_BYTES, 1, &len, own, 8 * (size_t)ncls);
      break;
    case SL__WDS_CLS: {
      int64_t v = 0;
      rc = parse_cls(sh, m, &v);
      if (rc == SL_OK) {
        memcpy(od + 8 * (size_t)cls_at, &v, 8);
        rc = sl_tensor_view(&t, SL_I64, 0, NULL, own, 8 * (size_t)cls_at++);
      }
      break;
    }
    case SL__WDS_NPY: {
      sl__npy h;
      char what[512];
      snprintf(what, sizeof what, "%s, sample '%s', member %s", sh->path,
               sh->key, m->ext);
      rc = member_bytes(sh, m, &b, &bo);
      if (rc == SL_OK)
        rc = sl__npy_parse(what, (const unsigned char *)sl_buffer_data(b) + bo,
                           (size_t)m->size, &h);
      if (rc == SL_OK && (h.dtype != lay->dtype[f] || h.rank != lay->rank[f]))
        rc = sl_set_error(SL_EINVAL,
                          "wds: %s: an array of %s, rank %d, where the data "
                          "set's first sample has %s, rank %d",
                          what, sl_dtype_name(h.dtype), h.rank,
                          sl_dtype_name(lay->dtype[f]), lay->rank[f]);
      if (rc == SL_OK)
        rc = sl_tensor_view(&t, h.dtype, h.rank, h.shape, b,
                            bo + (size_t)h.data_off);
      break;
    }
    default:
      len = (int64_t)m->size;
      rc = member_bytes(sh, m, &b, &bo);
      if (rc == SL_OK) rc = sl_tensor_view(&t, SL_BYTES, 1, &len, b, bo);
    }
    if (rc == SL_OK && (rc = sl_sample_set_move(s, f, &t)) < 0)
      sl_tensor_clear(&t);
  }
  sl_buffer_release(own);
  return sl__sample_out(rc, s, out);
}

size_t sl__wds_set_text(const char *id, uint32_t shards, uint32_t index,
                        char *buf) {
  int n = snprintf(buf, SL__WDS_SET_MAX, "id %s\nshards %u\nindex %u\n", id,
                   shards, index);
  return n < 0 ? 0 : (size_t)n;
}

int sl__wds_shard_set(const char *path, sl__wds_set *out) {
  memset(out, 0, sizeof *out);
  sl__wds_shard *sh;
  SL_FORWARD_IF_ERROR(sl__wds_shard_open(path, &sh));
  int rc = sl__tar_next(&sh->tar, sh->path);
  bool is_set = rc == SL_OK && strcmp(sh->tar.name, SL__WDS_SET_MEMBER) == 0;
  char text[SL__WDS_SET_MAX + 1] = {0}, id[SL__SET_ID_LEN + 2] = {0};
  if (is_set && sh->tar.size >= SL__WDS_SET_MAX)
    rc = sl_set_error(SL_ECORRUPT,
                      "wds: %s: member %s of %llu bytes (a set identity "
                      "has below %d)",
                      path, SL__WDS_SET_MEMBER,
                      (unsigned long long)sh->tar.size, SL__WDS_SET_MAX);
  else if (is_set && sh->src)
    rc = sh->src->read_at(sh->src, sh->tar.data, text, (size_t)sh->tar.size);
  else if (is_set)
    memcpy(text, (const char *)sl_buffer_data(sh->map) + sh->tar.data,
           (size_t)sh->tar.size);
  if (rc == SL_OK && is_set) {
    unsigned shards = 0, index = 0;
    int end = -1;
    bool ok = strlen(text) == (size_t)sh->tar.size &&
              sscanf(text, "id %33[0-9a-f] shards %u index %u%n", id, &shards,
                     &index, &end) == 3 &&
              strlen(id) == SL__SET_ID_LEN && shards > 0 && index < shards &&
              (size_t)end + 1 == (size_t)sh->tar.size && text[end] == '\n';
    if (ok) {
      char want[SL__WDS_SET_MAX];
      sl__wds_set_text(id, shards, index, want);
      ok = strcmp(want, text) == 0; /* exactly the writer's form */
    }
    if (!ok)
      rc = sl_set_error(SL_ECORRUPT,
                        "wds: %s: member %s is not a set identity (\"id "
                        "HEX\\nshards K\\nindex I\\n\", I < K)",
                        path, SL__WDS_SET_MEMBER);
    else {
      out->has = true;
      snprintf(out->id, sizeof out->id, "%s", id);
      out->shards = shards;
      out->index = index;
    }
  }
  sl__wds_shard_close(sh);
  return rc == SL_EOF ? SL_OK : rc;
}

int sl__wds_set_check(const char *what, const char *const *paths, size_t n) {
  sl__wds_set first, set;
  size_t at = SIZE_MAX; /* the first local shard */
  for (size_t i = 0; i < n; i++) {
    if (sl__is_url(paths[i])) continue;
    SL_FORWARD_IF_ERROR(
        sl__wds_shard_set(paths[i], at == SIZE_MAX ? &first : &set));
    if (at == SIZE_MAX) {
      at = i;
      continue;
    }
    const char *p = paths[i], *q = paths[at];
    if (set.has != first.has) {
      const sl__wds_set *has = set.has ? &set : &first;
      return sl_set_error(
          SL_ECORRUPT,
          "%s: %s is shard %u of %u of set %s, but %s records no set "
          "identity: the shards are not one `sluice pack` run's set (a shard "
          "from elsewhere?)",
          what, set.has ? p : q, has->index, has->shards, has->id,
          set.has ? q : p);
    }
    if (set.has &&
        (strcmp(set.id, first.id) != 0 || set.shards != first.shards))
      return sl_set_error(
          SL_ECORRUPT,
          "%s: %s is shard %u of %u of set %s, but %s is shard %u of %u of "
          "set %s: shards of two `sluice pack` runs (one of them replaced, or "
          "a commit that failed halfway)",
          what, p, set.index, set.shards, set.id, q, first.index, first.shards,
          first.id);
  }
  return SL_OK;
}

int sl__wds_classes_name(const char *shard, char *buf, size_t size) {
  size_t n = strlen(shard);
  if (n >= 4 && strcmp(shard + n - 4, ".tar") == 0) n -= 4;
  size_t d = n;
  while (d > 0 && isdigit((unsigned char)shard[d - 1]))
    d--;
  if (n - d == 6 && d > 0 && shard[d - 1] == '-') n = d - 1; /* -NNNNNN */
  int len = snprintf(buf, size, "%.*s-classes.txt", (int)n, shard);
  SL_RETURN_ERROR_IF(len < 0 || (size_t)len >= size, SL_EINVAL,
                     "pack: output name '%s' is too long", shard);
  return SL_OK;
}
