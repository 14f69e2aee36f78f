/*
 * state.c - sl_reader_save / sl_reader_restore: the walk over a chain of
 * readers, the record of each stage and the byte format of a saved state
 * (the protocol each stage follows is in state.h; docs/RESUME.md for users).
 *
 * Format (little-endian, version 1):
 *
 *   header   "SLUICEST" u32(version) u32(0) u64(body bytes)
 *   body     record of the outermost reader, its upstreams' records after
 *            it, depth first in link order:
 *   record   u32(n) name  u32(n) identity  u64(pass) u64(k)
 *            u32(upstreams) u64(n) payload
 *   trailer  u32 CRC32C of header and body
 *
 * Saving builds the tree of records in memory (a stage's save op writes its
 * payload and saves its upstreams in any order it likes), then writes it out
 * in one buffer.  Restoring parses the whole state and checks it against
 * the chain - checksum, version, then each stage's name, identity and
 * number of upstreams, top down - before any stage changes, so a state of
 * another pipeline is refused with the chain left as it was; only then are
 * the stages' restore ops run.
 */
#include "stages/stage.h"

#include "core/bytes.h"
#include "core/crc32c.h"
#include "sync/engine.h"

#include <pthread.h>
#include <stdarg.h>

#define STATE_MAGIC "SLUICEST"
#define STATE_VERSION 1u
#define HEADER_BYTES 24
#define MAX_DEPTH 256
#define IDENT_CAP 512

/* --- one stage's record ----------------------------------------------------
 */

typedef struct record {
  sl_reader *r; /* the live stage (save; restore: set by the check) */
  const char *name;
  size_t name_len;
  char *ident; /* saving: owned copy; restoring: points into the state */
  size_t ident_len;
  uint64_t pass, k;
  /* payload: saving, an owned growing buffer; restoring, into the state */
  unsigned char *data;
  size_t size, cap;
  struct record *kids; /* nkids records, in link order */
  size_t nkids, kids_cap;
} record;

static void record_free(record *rec, bool owned) {
  for (size_t i = 0; i < rec->nkids; i++)
    record_free(&rec->kids[i], owned);
  sl__free(rec->kids);
  if (owned) {
    sl__free(rec->ident);
    sl__free(rec->data);
  }
}

struct sl__state_in {
  const record *rec;
  size_t pos;      /* read position in rec's payload */
  size_t next_kid; /* the next upstream record to restore */
};

/* --- saving ------------------------------------------------------------------
 */

struct sl__state_out {
  record *cur; /* the record being written */
  int depth;
  int replayed; /* > 0: below a stage that reads its upstream again */
};

static int put(record *rec, const void *p, size_t n) {
  if (rec->size + n > rec->cap) {
    size_t cap = rec->cap ? rec->cap * 2 : 64;
    while (cap < rec->size + n)
      cap *= 2;
    unsigned char *d = sl__realloc(rec->data, cap);
    SL_RETURN_ERROR_IF(!d, SL_ENOMEM,
                       "save: out of memory writing the state of stage '%s'",
                       rec->name);
    rec->data = d;
    rec->cap = cap;
  }
  memcpy(rec->data + rec->size, p, n);
  rec->size += n;
  return SL_OK;
}

int sl__state_put_u64(sl__state_out *w, uint64_t v) {
  unsigned char b[8];
  sl__put64(b, v);
  return put(w->cur, b, 8);
}

int sl__state_put_bytes(sl__state_out *w, const void *data, size_t n) {
  return put(w->cur, data, n);
}

static void identity_of(sl_reader *r, char *buf, size_t cap) {
  void *st;
  const sl__stage_ops *ops = sl__reader_state_ops(r, &st);
  buf[0] = '\0';
  if (ops && ops->identity) ops->identity(r, st, buf, cap);
}

static int save_record(sl__state_out *w, record *rec) {
  sl_reader *r = rec->r;
  rec->name = sl_reader_name(r);
  rec->name_len = strlen(rec->name);
  void *st;
  const sl__stage_ops *ops = sl__reader_state_ops(r, &st);
  SL_RETURN_ERROR_IF(!ops || !ops->save, SL_EUNSUPPORTED,
                     "save: stage '%s' cannot save its position (it has no "
                     "state; readers made with sl_reader_new have none)",
                     rec->name);
  SL_RETURN_ERROR_IF(w->depth >= MAX_DEPTH, SL_EUNSUPPORTED,
                     "save: the chain is deeper than %d stages", MAX_DEPTH);
  char ident[IDENT_CAP];
  identity_of(r, ident, sizeof ident);
  rec->ident_len = strlen(ident);
  rec->ident = sl__strdup(ident);
  SL_RETURN_ERROR_IF(!rec->ident, SL_ENOMEM, "save: out of memory");
  record *outer = w->cur;
  w->cur = rec;
  w->depth++;
  int rc = ops->save(r, st, rec->pass, rec->k, w);
  w->depth--;
  w->cur = outer;
  SL_FORWARD_IF_ERROR(rc);
  size_t nups = 0;
  while (sl__reader_up(r, nups))
    nups++;
  SL_RETURN_ERROR_IF(rec->nkids != nups, SL_EINVAL,
                     "save: stage '%s' saved %zu of its %zu upstreams "
                     "(a bug in the stage)",
                     rec->name, rec->nkids, nups);
  return SL_OK;
}

int sl__state_save_up(sl__state_out *w, sl_reader *up, uint64_t pass,
                      uint64_t k) {
  record *rec = w->cur;
  SL_RETURN_ERROR_IF(sl__reader_up(rec->r, rec->nkids) != up, SL_EINVAL,
                     "save: stage '%s' saved an upstream out of link order "
                     "(a bug in the stage)",
                     rec->name);
  if (rec->nkids == rec->kids_cap) {
    size_t cap = rec->kids_cap ? rec->kids_cap * 2 : 2;
    record *kids = sl__realloc(rec->kids, cap * sizeof *kids);
    SL_RETURN_ERROR_IF(!kids, SL_ENOMEM, "save: out of memory");
    rec->kids = kids;
    rec->kids_cap = cap;
  }
  record *kid = &rec->kids[rec->nkids++];
  memset(kid, 0, sizeof *kid);
  kid->r = up;
  kid->pass = pass;
  kid->k = k;
  kid->name = sl_reader_name(up);
  return save_record(w, kid);
}

int sl__state_save_up_replayed(sl__state_out *w, sl_reader *up, uint64_t pass,
                               uint64_t k) {
  w->replayed++;
  int rc = sl__state_save_up(w, up, pass, k);
  w->replayed--;
  return rc;
}

bool sl__state_replayed(const sl__state_out *w) {
  return w->replayed > 0;
}

uint64_t sl__state_up_pass(const sl_reader *r, const sl_reader *up,
                           uint64_t pass) {
  uint64_t now = sl__reader_pass(r), up_now = sl__reader_pass(up);
  uint64_t back = pass < now ? now - pass : 0;
  return back < up_now ? up_now - back : 0;
}

int sl__state_save_1to1(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                        sl__state_out *w) {
  sl_reader *up = sl__reader_up(r, 0);
  return sl__state_save_up(w, up, sl__state_up_pass(r, up, pass), k);
}

int sl__state_save_position(sl_reader *r, void *state, uint64_t pass,
                            uint64_t k, sl__state_out *w) {
  return SL_OK;
}

int sl__state_check_at(const char *stage, uint64_t k, uint64_t n) {
  SL_RETURN_ERROR_IF(k > n, SL_ECORRUPT,
                     "restore: %s: position %llu is past its %llu samples",
                     stage, (unsigned long long)k, (unsigned long long)n);
  return SL_OK;
}

int sl__state_restore_1to1(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                           sl__state_in *in) {
  return sl__state_restore_up_at(in, sl__reader_up(r, 0), k);
}

static size_t record_bytes(const record *rec) {
  size_t n = 4 + rec->name_len + 4 + rec->ident_len + 8 + 8 + 4 + 8 + rec->size;
  for (size_t i = 0; i < rec->nkids; i++)
    n += record_bytes(&rec->kids[i]);
  return n;
}

static unsigned char *write_record(unsigned char *p, const record *rec) {
  sl__put32(p, (uint32_t)rec->name_len);
  memcpy(p + 4, rec->name, rec->name_len);
  p += 4 + rec->name_len;
  sl__put32(p, (uint32_t)rec->ident_len);
  memcpy(p + 4, rec->ident, rec->ident_len);
  p += 4 + rec->ident_len;
  sl__put64(p, rec->pass);
  sl__put64(p + 8, rec->k);
  sl__put32(p + 16, (uint32_t)rec->nkids);
  sl__put64(p + 20, rec->size);
  p += 28;
  if (rec->size) memcpy(p, rec->data, rec->size);
  p += rec->size;
  for (size_t i = 0; i < rec->nkids; i++)
    p = write_record(p, &rec->kids[i]);
  return p;
}

/* The state of `r` at output k of its current pass (k <= delivered: the
 * protocol of state.h lets every stage save a position behind what it has
 * handed out). */
static int save_at(sl_reader *r, uint64_t k, void **state, size_t *len) {
  record root;
  memset(&root, 0, sizeof root);
  root.r = r;
  root.pass = sl__reader_pass(r);
  root.k = k;
  sl__state_out w = {&root, 0, 0};
  int rc = save_record(&w, &root);
  if (rc == SL_OK) {
    size_t body = record_bytes(&root);
    size_t total = HEADER_BYTES + body + 4;
    unsigned char *buf = sl__malloc(total);
    if (!buf) {
      rc = sl_set_error(SL_ENOMEM,
                        "save: cannot allocate a state of %zu "
                        "bytes",
                        total);
    } else {
      memcpy(buf, STATE_MAGIC, 8);
      sl__put32(buf + 8, STATE_VERSION);
      sl__put32(buf + 12, 0);
      sl__put64(buf + 16, body);
      write_record(buf + HEADER_BYTES, &root);
      sl__put32(buf + HEADER_BYTES + body, sl__crc32c(0, buf, HEADER_BYTES + body));
      *state = buf;
      *len = total;
    }
  }
  record_free(&root, true);
  return rc;
}

static int save_check(sl_reader *r, void **state, size_t *len) {
  if (state) *state = NULL;
  if (len) *len = 0;
  SL_RETURN_ERROR_IF(!r || !state || !len, SL_EINVAL, "save: NULL %s",
                     !r       ? "reader"
                     : !state ? "state pointer"
                              : "length pointer");
  return SL_OK;
}

int sl_reader_save(sl_reader *r, void **state, size_t *len) {
  SL_FORWARD_IF_ERROR(save_check(r, state, len));
  return save_at(r, sl__reader_delivered(r), state, len);
}

int sl__reader_save_back(sl_reader *r, uint64_t back, void **state,
                         size_t *len) {
  SL_FORWARD_IF_ERROR(save_check(r, state, len));
  uint64_t k = sl__reader_delivered(r);
  SL_RETURN_ERROR_IF(back > k, SL_EINVAL,
                     "save: cannot save %llu output(s) back: stage '%s' has "
                     "handed out %llu in this pass",
                     (unsigned long long)back, sl_reader_name(r),
                     (unsigned long long)k);
  return save_at(r, k - back, state, len);
}

void sl_free(void *p) {
  sl__free(p);
}

/* --- parsing
 * ------------------------------------------------------------------ */

typedef struct parser {
  const unsigned char *p, *end;
  size_t records;
} parser;

static int parse_record(parser *ps, record *rec, int depth) {
  SL_RETURN_ERROR_IF(depth >= MAX_DEPTH, SL_ECORRUPT,
                     "restore: corrupt state: deeper than %d stages",
                     MAX_DEPTH);
#define NEED(n)                                                                \
  SL_RETURN_ERROR_IF((size_t)(ps->end - ps->p) < (size_t)(n), SL_ECORRUPT,     \
                     "restore: corrupt state: record %zu is cut short",        \
                     ps->records)
  NEED(4);
  rec->name_len = sl__get32(ps->p);
  NEED(4 + rec->name_len);
  rec->name = (const char *)ps->p + 4;
  ps->p += 4 + rec->name_len;
  NEED(4);
  rec->ident_len = sl__get32(ps->p);
  NEED(4 + rec->ident_len);
  rec->ident = (char *)ps->p + 4;
  ps->p += 4 + rec->ident_len;
  NEED(28);
  rec->pass = sl__get64(ps->p);
  rec->k = sl__get64(ps->p + 8);
  size_t nkids = sl__get32(ps->p + 16);
  uint64_t size = sl__get64(ps->p + 20);
  ps->p += 28;
  NEED(size);
  rec->data = (unsigned char *)ps->p;
  rec->size = (size_t)size;
  ps->p += size;
#undef NEED
  ps->records++;
  /* Each upstream record takes at least 36 bytes: a count beyond what is
   * left is corrupt, and is refused before allocating for it. */
  SL_RETURN_ERROR_IF(nkids > (size_t)(ps->end - ps->p) / 36, SL_ECORRUPT,
                     "restore: corrupt state: record %zu claims %zu upstreams",
                     ps->records - 1, nkids);
  if (nkids) {
    rec->kids = sl__calloc(nkids, sizeof *rec->kids);
    SL_RETURN_ERROR_IF(!rec->kids, SL_ENOMEM, "restore: out of memory");
  }
  for (size_t i = 0; i < nkids; i++) {
    rec->nkids = i + 1;
    SL_FORWARD_IF_ERROR(parse_record(ps, &rec->kids[i], depth + 1));
  }
  rec->nkids = nkids;
  return SL_OK;
}

static int parse(const void *state, size_t len, record *root) {
  const unsigned char *b = state;
  SL_RETURN_ERROR_IF(len < HEADER_BYTES + 4 || memcmp(b, STATE_MAGIC, 8) != 0,
                     SL_ECORRUPT,
                     "restore: not a sluice state (%zu bytes, no SLUICEST "
                     "header)",
                     len);
  uint32_t version = sl__get32(b + 8);
  SL_RETURN_ERROR_IF(version != STATE_VERSION, SL_EUNSUPPORTED,
                     "restore: state format version %u; this sluice reads "
                     "version %u",
                     version, STATE_VERSION);
  uint64_t body = sl__get64(b + 16);
  SL_RETURN_ERROR_IF(body != len - HEADER_BYTES - 4, SL_ECORRUPT,
                     "restore: corrupt state: %zu bytes, the header says %llu "
                     "(cut short or padded)",
                     len, (unsigned long long)(body + HEADER_BYTES + 4));
  uint32_t want = sl__get32(b + len - 4);
  uint32_t got = sl__crc32c(0, b, len - 4);
  SL_RETURN_ERROR_IF(want != got, SL_ECORRUPT,
                     "restore: corrupt state: checksum %08x, expected %08x",
                     got, want);
  parser ps = {b + HEADER_BYTES, b + len - 4, 0};
  SL_FORWARD_IF_ERROR(parse_record(&ps, root, 0));
  SL_RETURN_ERROR_IF(ps.p != ps.end, SL_ECORRUPT,
                     "restore: corrupt state: %zu bytes after the last record",
                     (size_t)(ps.end - ps.p));
  return SL_OK;
}

/* --- checking the state against the chain --------------------------------- */

/* The stages from the top to `depth` ("batch > shuffle > range"). */
typedef struct trail {
  const char *names[MAX_DEPTH];
  int n;
} trail;

static void trail_text(const trail *t, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < t->n && used < cap; i++) {
    int w =
        snprintf(buf + used, cap - used, "%s%s", i ? " > " : "", t->names[i]);
    if (w < 0) break;
    used += (size_t)w;
  }
}

static bool same(const char *a, size_t alen, const char *b) {
  return strlen(b) == alen && memcmp(a, b, alen) == 0;
}

static int check(record *rec, sl_reader *r, trail *t) {
  t->names[t->n++] = sl_reader_name(r);
  char where[1024];
  trail_text(t, where, sizeof where);
  rec->r = r;
  const char *name = sl_reader_name(r);
  SL_RETURN_ERROR_IF(!same(rec->name, rec->name_len, name), SL_EINVAL,
                     "restore: the state is of another pipeline: stage %d "
                     "from the top (%s) is '%s' here but '%.*s' in the state; "
                     "the pipeline is unchanged",
                     t->n, where, name, (int)rec->name_len, rec->name);
  char ident[IDENT_CAP];
  identity_of(r, ident, sizeof ident);
  SL_RETURN_ERROR_IF(!same(rec->ident, rec->ident_len, ident), SL_EINVAL,
                     "restore: the state is of another pipeline: stage %d "
                     "from the top (%s) is '%s' here but '%.*s' in the "
                     "state; the pipeline is unchanged",
                     t->n, where, ident, (int)rec->ident_len, rec->ident);
  size_t nups = 0;
  while (sl__reader_up(r, nups))
    nups++;
  SL_RETURN_ERROR_IF(nups != rec->nkids, SL_EINVAL,
                     "restore: the state is of another pipeline: stage %d "
                     "from the top (%s) has %zu upstreams here but %zu in the "
                     "state; the pipeline is unchanged",
                     t->n, where, nups, rec->nkids);
  void *st;
  const sl__stage_ops *ops = sl__reader_state_ops(r, &st);
  SL_RETURN_ERROR_IF(!ops || !ops->restore, SL_EUNSUPPORTED,
                     "restore: stage %d from the top (%s) cannot restore a "
                     "position",
                     t->n, where);
  /* A position past what one pass of the stage yields (when it knows) is
   * no position of this pipeline: refused before a replay could run
   * towards it. */
  uint64_t len;
  if (sl_reader_length(r, &len) == SL_OK) {
    SL_RETURN_ERROR_IF(rec->k > len, SL_ECORRUPT,
                       "restore: corrupt state: stage %d from the top (%s) "
                       "is at sample %llu of a pass of %llu; the pipeline is "
                       "unchanged",
                       t->n, where, (unsigned long long)rec->k,
                       (unsigned long long)len);
  } else {
    sl_clear_error();
  }
  /* A stage that yields its upstream's k-th sample as its own saved that
   * upstream at its own k: a state that says otherwise was not saved by
   * this pipeline. */
  if (ops->save == sl__state_save_1to1 && nups == 1)
    SL_RETURN_ERROR_IF(rec->kids[0].k != rec->k, SL_ECORRUPT,
                       "restore: corrupt state: stage %d from the top (%s) "
                       "is at sample %llu but its upstream at %llu; the "
                       "pipeline is unchanged",
                       t->n, where, (unsigned long long)rec->k,
                       (unsigned long long)rec->kids[0].k);
  sl__state_check_fn check_fn = sl__reader_ops(r)->check;
  if (check_fn) {
    /* A source's data against its record: SL_ECORRUPT naming the file. */
    sl__state_in in = {rec, 0, 0};
    SL_FORWARD_IF_ERROR(check_fn(r, st, &in));
  }
  for (size_t i = 0; i < nups; i++)
    SL_FORWARD_IF_ERROR(check(&rec->kids[i], sl__reader_up(r, i), t));
  t->n--;
  return SL_OK;
}

/* --- restoring
 * ------------------------------------------------------------------ */

int sl__state_get_u64(sl__state_in *in, uint64_t *v) {
  SL_RETURN_ERROR_IF(in->rec->size - in->pos < 8, SL_ECORRUPT,
                     "restore: corrupt state: the record of stage '%.*s' is "
                     "cut short",
                     (int)in->rec->name_len, in->rec->name);
  *v = sl__get64(in->rec->data + in->pos);
  in->pos += 8;
  return SL_OK;
}

int sl__state_get_bytes(sl__state_in *in, const void **data, size_t n) {
  SL_RETURN_ERROR_IF(in->rec->size - in->pos < n, SL_ECORRUPT,
                     "restore: corrupt state: the record of stage '%.*s' is "
                     "cut short",
                     (int)in->rec->name_len, in->rec->name);
  *data = in->rec->data + in->pos;
  in->pos += n;
  return SL_OK;
}

int sl__state_put_sample(sl__state_out *w, const sl_sample *s,
                         const char *stage) {
  for (int i = 0; i < sl_sample_nfields(s); i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    SL_RETURN_ERROR_IF(t->lod, SL_EUNSUPPORTED,
                       "save: %s: field %d of a held sample has LoD, which "
                       "a state does not hold",
                       stage, i);
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, (uint64_t)t->rank));
    for (int d = 0; d < t->rank; d++)
      SL_FORWARD_IF_ERROR(sl__state_put_u64(w, (uint64_t)t->shape[d]));
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, t->nbytes));
    SL_FORWARD_IF_ERROR(sl__state_put_bytes(w, t->data, t->nbytes));
  }
  return SL_OK;
}

/* Field i of a held sample into o (see sl__state_get_sample). */
static int get_field(sl__state_in *in, const sl_schema *schema,
                     const char *stage, sl_sample *o, int i) {
  uint64_t rank, nbytes, elems = 1, v;
  int64_t shape[SL_MAX_RANK];
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &rank));
  SL_RETURN_ERROR_IF(
      rank != (uint64_t)sl_schema_field_rank(schema, i), SL_ECORRUPT,
      "restore: corrupt state: %s: a held sample's field %d "
      "has rank %llu, the schema %d",
      stage, i, (unsigned long long)rank, sl_schema_field_rank(schema, i));
  for (uint64_t d = 0; d < rank; d++) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &v));
    SL_RETURN_ERROR_IF(v > ((uint64_t)1 << 40) || (v && elems > UINT64_MAX / v),
                       SL_ECORRUPT,
                       "restore: corrupt state: %s: a held sample's field %d "
                       "has dimension %llu",
                       stage, i, (unsigned long long)v);
    shape[d] = (int64_t)v;
    elems *= v;
  }
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &nbytes));
  size_t es = sl_dtype_size(sl_schema_field_dtype(schema, i));
  SL_RETURN_ERROR_IF(elems > UINT64_MAX / es || nbytes != elems * es ||
                         nbytes > sl__state_left(in),
                     SL_ECORRUPT,
                     "restore: corrupt state: %s: a held sample's field %d "
                     "has %llu bytes for %llu elements (%zu left in the "
                     "record)",
                     stage, i, (unsigned long long)nbytes,
                     (unsigned long long)elems, sl__state_left(in));
  const void *src;
  void *dst = NULL;
  SL_FORWARD_IF_ERROR(sl__state_get_bytes(in, &src, (size_t)nbytes));
  int rc = sl_sample_alloc(o, i, (int)rank, shape, &dst);
  if (rc < 0)
    return sl_wrap_error(SL_ECORRUPT, "restore: %s: a held sample's field %d",
                         stage, i);
  if (nbytes) memcpy(dst, src, (size_t)nbytes);
  return SL_OK;
}

int sl__state_get_sample(sl__state_in *in, const sl_schema *schema,
                         const char *stage, sl_sample **out) {
  sl_sample *o = sl_sample_new((sl_schema *)schema);
  SL_RETURN_ERROR_IF(!o, SL_ENOMEM, "restore: %s: cannot allocate", stage);
  int rc = SL_OK;
  for (int i = 0; i < sl_schema_nfields(schema) && rc == SL_OK; i++)
    rc = get_field(in, schema, stage, o, i);
  if (rc < 0) {
    sl_sample_release(o);
    return rc;
  }
  *out = o;
  return SL_OK;
}

size_t sl__state_left(const sl__state_in *in) {
  return in->rec->size - in->pos;
}

static int restore_record(const record *rec) {
  sl_reader *r = rec->r;
  void *st;
  const sl__stage_ops *ops = sl__reader_state_ops(r, &st);
  sl__state_in in = {rec, 0, 0};
  sl__reader_restore_begin(r);
  int rc = ops->restore(r, st, rec->pass, rec->k, &in);
  if (rc == SL_OK && in.next_kid != rec->nkids)
    rc = sl_set_error(SL_EINVAL,
                      "restore: stage '%s' restored %zu of its %zu upstreams "
                      "(a bug in the stage)",
                      sl_reader_name(r), in.next_kid, rec->nkids);
  return sl__reader_restore_end(r, rc, rec->pass, rec->k);
}

int sl__state_restore_up(sl__state_in *in, sl_reader *up) {
  SL_RETURN_ERROR_IF(in->next_kid >= in->rec->nkids ||
                         in->rec->kids[in->next_kid].r != up,
                     SL_EINVAL,
                     "restore: stage '%.*s' restored an upstream out of link "
                     "order (a bug in the stage)",
                     (int)in->rec->name_len, in->rec->name);
  return restore_record(&in->rec->kids[in->next_kid++]);
}

uint64_t sl__state_position(const sl__state_in *in) {
  return in->rec->k;
}

int sl__state_up_position(const sl__state_in *in, uint64_t *k) {
  SL_RETURN_ERROR_IF(in->next_kid >= in->rec->nkids, SL_ECORRUPT,
                     "restore: corrupt state: stage '%.*s' has no upstream "
                     "record left",
                     (int)in->rec->name_len, in->rec->name);
  *k = in->rec->kids[in->next_kid].k;
  return SL_OK;
}

int sl__state_restore_up_at(sl__state_in *in, sl_reader *up, uint64_t k) {
  if (in->next_kid < in->rec->nkids) {
    const record *kid = &in->rec->kids[in->next_kid];
    SL_RETURN_ERROR_IF(kid->k != k, SL_ECORRUPT,
                       "restore: corrupt state: stage '%.*s' is at position "
                       "%llu, which puts its upstream '%s' at %llu, but the "
                       "state has that upstream at %llu",
                       (int)in->rec->name_len, in->rec->name,
                       (unsigned long long)in->rec->k, sl_reader_name(up),
                       (unsigned long long)k, (unsigned long long)kid->k);
  }
  return sl__state_restore_up(in, up);
}

/* --- file identity ---------------------------------------------------------
 */

#define FILE_ID_WORDS 5

static void file_id_words(const sl__file_id *id, uint64_t v[FILE_ID_WORDS]) {
  v[0] = id->dev;
  v[1] = id->ino;
  v[2] = id->size;
  v[3] = (uint64_t)id->mtime_s;
  v[4] = (uint64_t)id->mtime_ns;
}

/* FNV-1a over the identities' words: one hash for a long list. */
static uint64_t file_ids_fold(const sl__file_id *ids, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) {
    uint64_t v[FILE_ID_WORDS];
    file_id_words(&ids[i], v);
    for (int j = 0; j < FILE_ID_WORDS; j++)
      for (int b = 0; b < 8; b++)
        h = (h ^ ((v[j] >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  return h;
}

int sl__state_put_file_ids(sl__state_out *w, const sl__file_id *ids,
                           size_t n) {
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, n));
  if (n > SL__STATE_FILE_IDS)
    return sl__state_put_u64(w, file_ids_fold(ids, n));
  for (size_t i = 0; i < n; i++) {
    uint64_t v[FILE_ID_WORDS];
    file_id_words(&ids[i], v);
    for (int j = 0; j < FILE_ID_WORDS; j++)
      SL_FORWARD_IF_ERROR(sl__state_put_u64(w, v[j]));
  }
  return SL_OK;
}

/* What differs between `then` (the state's) and `now`, or NULL when
 * nothing does and the identity says so; `url`: validators, not inodes. */
static const char *file_id_change(const sl__file_id *then,
                                  const sl__file_id *now, bool url, char *buf,
                                  size_t cap) {
  if (url) {
    bool unknown = then->dev == 0 && then->mtime_s <= 0;
    if (then->ino != now->ino)
      snprintf(buf, cap, "it is another URL");
    else if (then->dev != now->dev)
      snprintf(buf, cap, "its ETag differs%s",
               !then->dev ? " (none then)" : !now->dev ? " (none now)" : "");
    else if (then->size != now->size)
      snprintf(buf, cap, "its size (%llu bytes then, %llu now)",
               (unsigned long long)then->size, (unsigned long long)now->size);
    else if (then->mtime_s != now->mtime_s)
      snprintf(buf, cap, "its Last-Modified (%lld then, %lld now)",
               (long long)then->mtime_s, (long long)now->mtime_s);
    else if (unknown)
      snprintf(buf, cap,
               "the server sends neither an ETag nor a Last-Modified, so a "
               "change cannot be ruled out");
    else
      return NULL;
    return buf;
  }
  if (then->dev != now->dev || then->ino != now->ino)
    snprintf(buf, cap,
             "it is another file (device %llu inode %llu then, device %llu "
             "inode %llu now: replaced, or a copy)",
             (unsigned long long)then->dev, (unsigned long long)then->ino,
             (unsigned long long)now->dev, (unsigned long long)now->ino);
  else if (then->size != now->size)
    snprintf(buf, cap, "its size (%llu bytes then, %llu now)",
             (unsigned long long)then->size, (unsigned long long)now->size);
  else if (then->mtime_s != now->mtime_s || then->mtime_ns != now->mtime_ns)
    snprintf(buf, cap,
             "its modification time (%lld.%09lld then, %lld.%09lld now: "
             "rewritten)",
             (long long)then->mtime_s, (long long)then->mtime_ns,
             (long long)now->mtime_s, (long long)now->mtime_ns);
  else
    return NULL;
  return buf;
}

int sl__state_check_file_ids(sl__state_in *in, const char *stage,
                             const char *const *paths, const sl__file_id *ids,
                             size_t n) {
  uint64_t m;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &m));
  SL_RETURN_ERROR_IF(m != n, SL_ECORRUPT,
                     "restore: %s %s: the state was saved over %llu files, "
                     "this reader reads %zu",
                     stage, n ? paths[0] : "(no file)", (unsigned long long)m,
                     n);
  if (n > SL__STATE_FILE_IDS) {
    uint64_t h;
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &h));
    SL_RETURN_ERROR_IF(h != file_ids_fold(ids, n), SL_ECORRUPT,
                       "restore: %s: one of its %zu files (%s ... %s) "
                       "changed since the state was saved (replaced, "
                       "rewritten or resized)",
                       stage, n, paths[0], paths[n - 1]);
    return SL_OK;
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t v[FILE_ID_WORDS];
    for (int j = 0; j < FILE_ID_WORDS; j++)
      SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &v[j]));
    sl__file_id then = {v[0], v[1], v[2], (int64_t)v[3], (int64_t)v[4]};
    char what[256];
    const char *change =
        file_id_change(&then, &ids[i], sl__is_url(paths[i]), what, sizeof what);
    SL_RETURN_ERROR_IF(change, SL_ECORRUPT,
                       "restore: %s %s: the file changed since the state was "
                       "saved: %s",
                       stage, paths[i], change);
  }
  return SL_OK;
}

int sl__state_check_file_id(sl__state_in *in, const char *stage,
                            const char *path, const sl__file_id *id) {
  return sl__state_check_file_ids(in, stage, &path, id, 1);
}

int sl__state_replay(sl__state_next_fn next, void *st, uint64_t n,
                     const char *what) {
  for (uint64_t i = 0; i < n; i++) {
    sl_sample *s = NULL;
    int rc = next(st, &s);
    if (rc == SL_EOF)
      return sl_set_error(SL_ECORRUPT,
                          "restore: %s ended after %llu samples, the state "
                          "needs %llu (did the data change since the save?)",
                          what, (unsigned long long)i, (unsigned long long)n);
    SL_FORWARD_IF_ERROR(rc);
    sl_sample_release(s);
  }
  return SL_OK;
}

static int reader_next_fn(void *st, sl_sample **out) {
  return sl_reader_next(st, out);
}

int sl__state_skip(sl_reader *up, uint64_t n, const char *stage) {
  char what[256];
  snprintf(what, sizeof what, "%s: its upstream '%s'", stage,
           sl_reader_name(up));
  return sl__state_replay(reader_next_fn, up, n, what);
}

int sl_reader_restore(sl_reader *r, const void *state, size_t len) {
  SL_RETURN_ERROR_IF(!r || !state, SL_EINVAL, "restore: NULL %s",
                     !r ? "reader" : "state");
  record root;
  memset(&root, 0, sizeof root);
  int rc = parse(state, len, &root);
  if (rc == SL_OK) {
    trail t = {{0}, 0};
    rc = check(&root, r, &t);
  }
  if (rc == SL_OK) rc = restore_record(&root);
  record_free(&root, false);
  return rc;
}

/* --- one state's outermost record ----------------------------------------- */

typedef struct root_priv {
  record rec;
  sl__state_in in;
} root_priv;

int sl__state_root_parse(const void *state, size_t len, sl__state_root *out) {
  memset(out, 0, sizeof *out);
  SL_RETURN_ERROR_IF(!state, SL_EINVAL, "restore: NULL state");
  root_priv *p = sl__calloc(1, sizeof *p);
  SL_RETURN_ERROR_IF(!p, SL_ENOMEM, "restore: out of memory");
  int rc = parse(state, len, &p->rec);
  if (rc < 0) {
    record_free(&p->rec, false);
    sl__free(p);
    return rc;
  }
  p->in = (sl__state_in){&p->rec, 0, 0};
  out->name = p->rec.name;
  out->name_len = p->rec.name_len;
  out->ident = p->rec.ident;
  out->ident_len = p->rec.ident_len;
  out->nups = p->rec.nkids;
  out->pass = p->rec.pass;
  out->k = p->rec.k;
  out->in = &p->in;
  out->priv = p;
  return SL_OK;
}

int sl__state_push_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x) {
  if (*n == *cap) {
    size_t c = *cap ? 2 * *cap : 8;
    uint64_t *a = sl__realloc(*v, c * sizeof *a);
    SL_RETURN_ERROR_IF(!a, SL_ENOMEM, "out of memory noting a position");
    *v = a;
    *cap = c;
  }
  (*v)[(*n)++] = x;
  return SL_OK;
}

void sl__state_root_free(sl__state_root *root) {
  root_priv *p = root->priv;
  if (p) {
    record_free(&p->rec, false);
    sl__free(p);
  }
  memset(root, 0, sizeof *root);
}

/* --- stages on the parallel engine ------------------------------------------
 */

#define EPOS_MAX_BITS                                                          \
  ((uint64_t)1 << 24) /* a saved done set: 2 MiB at most                       \
                       */

void sl__engine_pos_init(sl__engine_pos *p, sl__epos_mode mode,
                         const char *what) {
  memset(p, 0, sizeof *p);
  p->mode = mode;
  p->what = what;
  pthread_mutex_init(&p->mu, NULL);
}

void sl__engine_pos_fini(sl__engine_pos *p) {
  sl__free(p->bits);
  p->bits = NULL;
  pthread_mutex_destroy(&p->mu);
}

void sl__engine_pos_reset(sl__engine_pos *p) {
  p->log.count = 0;
  p->count = p->known = p->low = 0;
  p->skipping = false;
  if (p->bits) memset(p->bits, 0, p->nbytes);
}

/* Marks seq done (p->mu held).  A set that cannot grow loses the mark, so
 * it remembers that it lost one (low = UINT64_MAX): a later save of this
 * pass fails rather than deliver that seq twice. */
static void epos_mark(sl__engine_pos *p, uint64_t seq) {
  if (seq < p->low || p->low == UINT64_MAX) return;
  uint64_t off = seq - p->low;
  if (off / 8 >= p->nbytes) {
    size_t n = p->nbytes ? p->nbytes : 64;
    while (off / 8 >= n)
      n *= 2;
    unsigned char *b = sl__realloc(p->bits, n);
    if (!b) {
      p->low = UINT64_MAX; /* lost: the next save fails */
      return;
    }
    memset(b + p->nbytes, 0, n - p->nbytes);
    p->bits = b;
    p->nbytes = n;
  }
  p->bits[off / 8] |= (unsigned char)(1u << (off % 8));
  size_t full = 0;
  while (full < p->nbytes && p->bits[full] == 0xFF)
    full++;
  if (full) {
    memmove(p->bits, p->bits + full, p->nbytes - full);
    memset(p->bits + p->nbytes - full, 0, full);
    p->low += 8 * (uint64_t)full;
  }
}

void sl__engine_pos_delivered(sl__engine_pos *p, uint64_t seq) {
  if (p->mode == SL__EPOS_LOG) {
    sl__state_log_note(&p->log, seq);
  } else if (p->mode == SL__EPOS_UNORDERED) {
    p->ring[p->count++ % SL__STATE_LOG] = seq;
    pthread_mutex_lock(&p->mu);
    epos_mark(p, seq);
    pthread_mutex_unlock(&p->mu);
  }
}

void sl__engine_pos_dropped(sl__engine_pos *p, uint64_t seq) {
  pthread_mutex_lock(&p->mu);
  epos_mark(p, seq);
  pthread_mutex_unlock(&p->mu);
}

bool sl__engine_pos_skip(sl__engine_pos *p, uint64_t seq) {
  if (!p->skipping) return false;
  pthread_mutex_lock(&p->mu);
  bool done = seq < p->low ||
              ((seq - p->low) / 8 < p->nbytes &&
               (p->bits[(seq - p->low) / 8] >> ((seq - p->low) % 8)) & 1);
  pthread_mutex_unlock(&p->mu);
  return done;
}

/* UNORDERED: the done set at output position k (see state.h) into *low,
 * *set (sl__malloc'd bitmap over [*low, *low + *nbits)). */
static int epos_done_at(sl__engine_pos *p, uint64_t k, uint64_t *low,
                        unsigned char **set, uint64_t *nbits) {
  if (k > p->count)
    return sl_set_error(SL_EINVAL, "save: %s: position %llu is ahead of %llu",
                        p->what, (unsigned long long)k,
                        (unsigned long long)p->count);
  if (k < p->known || p->count - k > SL__STATE_LOG)
    return sl_set_error(
        SL_EUNSUPPORTED,
        "save: %s (ordered=false): the position to save is %llu samples "
        "behind its last delivery, beyond the log of the %d it keeps%s; "
        "save with less held above it, or use ordered=true",
        p->what, (unsigned long long)(p->count - k), SL__STATE_LOG,
        k < p->known ? " (or before the position it was restored to)" : "");
  pthread_mutex_lock(&p->mu);
  uint64_t lo = p->low;
  if (lo == UINT64_MAX) {
    pthread_mutex_unlock(&p->mu);
    return sl_set_error(SL_ENOMEM,
                        "save: %s: its set of delivered samples "
                        "could not grow",
                        p->what);
  }
  for (uint64_t q = k; q < p->count; q++)
    lo = SL_MIN(lo, p->ring[q % SL__STATE_LOG]);
  uint64_t n = (p->low - lo) + 8 * (uint64_t)p->nbytes;
  if (n > EPOS_MAX_BITS) {
    pthread_mutex_unlock(&p->mu);
    return sl_set_error(SL_EUNSUPPORTED,
                        "save: %s (ordered=false): %llu samples in flight, "
                        "more than a state holds",
                        p->what, (unsigned long long)n);
  }
  unsigned char *b = sl__calloc(n / 8 + 1, 1);
  if (!b) {
    pthread_mutex_unlock(&p->mu);
    return sl_set_error(SL_ENOMEM, "save: %s: cannot allocate", p->what);
  }
  for (uint64_t i = 0; i < n; i++) {
    uint64_t s = lo + i;
    bool done =
        s < p->low ||
        ((p->bits[(s - p->low) / 8] >> (unsigned)((s - p->low) % 8)) & 1);
    if (done) b[i / 8] |= (unsigned char)(1u << (i % 8));
  }
  for (uint64_t q = k; q < p->count; q++) {
    uint64_t i = p->ring[q % SL__STATE_LOG] - lo;
    b[i / 8] &= (unsigned char)~(1u << (i % 8));
  }
  pthread_mutex_unlock(&p->mu);
  /* Tighten: from the first seq not done to the last one done. */
  uint64_t first = 0;
  while (first < n && ((b[first / 8] >> (first % 8)) & 1))
    first++;
  uint64_t last = n;
  while (last > first && !((b[(last - 1) / 8] >> ((last - 1) % 8)) & 1))
    last--;
  uint64_t nb = last - first;
  unsigned char *t = sl__calloc(nb / 8 + 1, 1);
  if (!t) {
    sl__free(b);
    return sl_set_error(SL_ENOMEM, "save: %s: cannot allocate", p->what);
  }
  for (uint64_t i = 0; i < nb; i++)
    if ((b[(first + i) / 8] >> ((first + i) % 8)) & 1)
      t[i / 8] |= (unsigned char)(1u << (i % 8));
  sl__free(b);
  *low = lo + first;
  *set = t;
  *nbits = nb;
  return SL_OK;
}

int sl__engine_pos_save(sl__engine_pos *p, sl__engine *e, sl_reader *r,
                        sl_reader *up, uint64_t pass, uint64_t k,
                        sl__state_out *w) {
  uint64_t u = k;
  bool replay = false, now = pass == sl__reader_pass(r);
  if (p->mode == SL__EPOS_LOG) {
    /* the log is this pass's: an earlier pass replays */
    replay = !now || !sl__state_log_find(&p->log, k, &u);
    SL_FORWARD_IF_ERROR(sl__state_put_u64(w, replay ? UINT64_MAX : u));
    if (replay) u = 0;
  } else if (p->mode == SL__EPOS_UNORDERED) {
    if (sl__state_replayed(w))
      return sl_set_error(
          SL_EUNSUPPORTED,
          "save: %s (ordered=false) under a shuffle (or another stage that "
          "reads it again in the same order: cache, repeat_first, a "
          "filter's replay): its order is not reproducible; use "
          "ordered=true",
          p->what);
    SL_RETURN_ERROR_IF(!now, SL_EUNSUPPORTED,
                       "save: %s (ordered=false): the position is in its "
                       "pass %llu, it is in pass %llu now (a repeat or a "
                       "mix above reset it while the stages above still "
                       "hold its outputs): what was done then is not "
                       "kept; use ordered=true",
                       p->what, (unsigned long long)pass,
                       (unsigned long long)sl__reader_pass(r));
    unsigned char *set = NULL;
    uint64_t nbits = 0;
    SL_FORWARD_IF_ERROR(epos_done_at(p, k, &u, &set, &nbits));
    int rc = sl__state_put_u64(w, u);
    if (rc == SL_OK) rc = sl__state_put_u64(w, nbits);
    if (rc == SL_OK) rc = sl__state_put_bytes(w, set, (size_t)(nbits + 7) / 8);
    sl__free(set);
    SL_FORWARD_IF_ERROR(rc);
  }
  sl__engine_hold_pulls(e);
  uint64_t up_pass = sl__state_up_pass(r, up, pass);
  int rc = replay ? sl__state_save_up_replayed(w, up, up_pass, u)
                  : sl__state_save_up(w, up, up_pass, u);
  sl__engine_release_pulls(e);
  return rc;
}

int sl__engine_pos_restore(sl__engine_pos *p, sl_reader *up, uint64_t k,
                           sl__state_in *in, uint64_t *start) {
  sl__engine_pos_reset(p);
  p->replay = false;
  *start = p->start = 0;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, up));
  uint64_t u = k, nbits = 0;
  if (p->mode == SL__EPOS_LOG) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &u));
    p->replay = u == UINT64_MAX;
    if (p->replay) {
      u = 0;
    } else {
      SL_RETURN_ERROR_IF(k && !u, SL_ECORRUPT,
                         "restore: %s: position 0 for output %llu", p->what,
                         (unsigned long long)k);
      p->log.count = k;
      if (k) p->log.up[(k - 1) % SL__STATE_LOG] = u - 1;
    }
  } else if (p->mode == SL__EPOS_UNORDERED) {
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &u));
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &nbits));
    SL_RETURN_ERROR_IF(nbits > EPOS_MAX_BITS, SL_ECORRUPT,
                       "restore: %s: a set of %llu samples is corrupt", p->what,
                       (unsigned long long)nbits);
    const void *set = NULL;
    size_t nb = (size_t)(nbits + 7) / 8;
    SL_FORWARD_IF_ERROR(sl__state_get_bytes(in, &set, nb));
    if (nb > p->nbytes) {
      unsigned char *b = sl__realloc(p->bits, nb);
      SL_RETURN_ERROR_IF(!b, SL_ENOMEM, "restore: %s: cannot allocate",
                         p->what);
      p->bits = b;
      p->nbytes = nb;
    }
    if (p->nbytes) memset(p->bits, 0, p->nbytes);
    if (nb) memcpy(p->bits, set, nb);
    p->low = u;
    p->count = p->known = k;
    p->skipping = nbits > 0;
  }
  *start = p->start = u;
  return SL_OK;
}

int sl__engine_pos_resume(sl__engine_pos *p, sl__engine *e, uint64_t k,
                          sl__state_next_fn next, void *st) {
  sl__engine_start_at(e, p->start);
  SL_FORWARD_IF_ERROR(sl__engine_start(e));
  if (p->replay) return sl__state_replay(next, st, k, p->what);
  return SL_OK;
}
