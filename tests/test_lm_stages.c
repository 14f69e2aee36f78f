/*
 * test_lm_stages.c - the language-model stages: window, pack, padded_batch,
 * bucket_batch and mix (boundaries, remainders, empty and one-token
 * documents, documents longer than a row, realised mixture weights, the
 * same output for any number of threads upstream, save/restore).
 */
#include "test_util.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define SL_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SL_MAX(a, b) ((a) > (b) ? (a) : (b))

/* --- documents -------------------------------------------------------------
 * Document d of a list holds tokens d*100 + 1, d*100 + 2, ... (never 0, the
 * pad), in field "ids" (i32[-1]); field "doc" (i64) is d. */

static sl_schema *doc_schema(sl_dtype dt) {
  sl_schema *s = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  ASSERT_OK(sl_schema_add(s, "ids", dt, 1, &var));
  ASSERT_OK(sl_schema_add(s, "doc", SL_I64, 0, NULL));
  return s;
}

static int32_t doc_tok(int d, int i) {
  return d * 100 + i + 1;
}

static sl_reader *docs_reader_dt(const int *lens, size_t n, sl_dtype dt) {
  sl_schema *schema = doc_schema(dt);
  sl_sample **v = calloc(n ? n : 1, sizeof *v);
  for (size_t d = 0; d < n; d++) {
    v[d] = sl_sample_new(schema);
    int64_t len = lens[d];
    void *data = NULL;
    ASSERT_OK(sl_sample_alloc(v[d], 0, 1, &len, &data));
    for (int i = 0; i < lens[d]; i++) {
      if (dt == SL_U16)
        ((uint16_t *)data)[i] = (uint16_t)doc_tok((int)d, i);
      else
        ((int32_t *)data)[i] = doc_tok((int)d, i);
    }
    void *dd = NULL;
    ASSERT_OK(sl_sample_alloc(v[d], 1, 0, NULL, &dd));
    *(int64_t *)dd = (int64_t)d;
  }
  sl_reader *r = NULL;
  ASSERT_OK(sl_reader_from_array(v, n, schema, &r));
  for (size_t d = 0; d < n; d++)
    sl_sample_release(v[d]);
  free(v);
  sl_schema_release(schema);
  return r;
}

static sl_reader *docs_reader(const int *lens, size_t n) {
  return docs_reader_dt(lens, n, SL_I32);
}

/* The stream of every token of the documents, in order. */
static size_t stream_of(const int *lens, size_t n, int32_t *v) {
  size_t k = 0;
  for (size_t d = 0; d < n; d++)
    for (int i = 0; i < lens[d]; i++)
      v[k++] = doc_tok((int)d, i);
  return k;
}

static const sl_tensor *field(const sl_sample *s, const char *name) {
  const sl_tensor *t = sl_sample_field(s, name);
  ASSERT_NOT_NULL(t);
  return t;
}

/* --- window --------------------------------------------------------------- */

/* tf.data's window(size, shift, drop_remainder) + flat_map over the stream,
 * written out: every start j*stride < n, its values up to size. */
static void check_windows(const int *lens, size_t nd, size_t size,
                          size_t stride, int drop, sl_dtype dt) {
  int32_t stream[4096];
  size_t n = stream_of(lens, nd, stream);
  sl_reader *r = docs_reader_dt(lens, nd, dt);
  ASSERT_OK(sl_window(r, "ids", size, stride, drop, &r));
  size_t st = stride ? stride : size, count = 0;
  for (size_t start = 0; start < n; start += st) {
    size_t len = SL_MIN(size, n - start);
    if (len < size && drop) break;
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    const sl_tensor *t = field(s, "ids");
    ASSERT_EQ(t->dtype, dt);
    ASSERT_EQ(t->shape[0], (int64_t)len);
    for (size_t i = 0; i < len; i++) {
      int64_t got =
          dt == SL_U16 ? ((uint16_t *)t->data)[i] : ((int32_t *)t->data)[i];
      if (got != stream[start + i])
        test_fail(__FILE__, __LINE__,
                  "size %zu stride %zu: window %zu value %zu: %lld != %d", size,
                  stride, count, i, (long long)got, stream[start + i]);
    }
    sl_sample_release(s);
    count++;
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_EQ(sl_schema_nfields(sl_reader_schema(r)), 1);
  sl_reader_destroy(r);
}

TEST(window_cuts_across_sample_boundaries_with_every_stride) {
  const int lens[] = {3, 0, 1, 7, 0, 0, 2, 1, 11, 4};
  const size_t sizes[] = {1, 2, 4, 5, 9, 64};
  const size_t strides[] = {0, 1, 3, 4, 6, 13};
  for (size_t a = 0; a < 6; a++)
    for (size_t b = 0; b < 6; b++)
      for (int drop = 0; drop <= 1; drop++)
        check_windows(lens, 10, sizes[a], strides[b], drop, SL_I32);
  check_windows(lens, 10, 4, 2, 0, SL_U16);
}

TEST(window_over_empty_or_one_token_documents) {
  const int none[] = {0, 0, 0};
  check_windows(none, 3, 4, 0, 0, SL_I32);
  check_windows(none, 0, 4, 0, 0, SL_I32);
  const int ones[] = {1, 1, 1, 1, 1};
  check_windows(ones, 5, 2, 0, 0, SL_I32);
  check_windows(ones, 5, 2, 0, 1, SL_I32);
  check_windows(ones, 5, 8, 1, 1, SL_I32); /* size beyond the stream */
}

TEST(window_refuses_unusable_fields) {
  const int lens[] = {3};
  sl_reader *r = docs_reader(lens, 1);
  ASSERT_RC(sl_window(r, "doc", 4, 0, 0, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "rank-1");
  r = docs_reader(lens, 1);
  ASSERT_RC(sl_window(r, "nope", 4, 0, 0, &r), SL_EINVAL);
  r = docs_reader(lens, 1);
  ASSERT_RC(sl_window(r, "ids", 0, 0, 0, &r), SL_EINVAL);
}

/* A window's length is known when its field has a fixed length per sample
 * (tf.data knows window's cardinality): equal to the windows a pass yields,
 * for every size, stride and drop_remainder (issue 24, item 24: the length
 * was not known). */
TEST(window_knows_its_length_over_a_fixed_length_field) {
  const size_t sizes[] = {1, 2, 3, 5, 7, 40};
  const size_t strides[] = {0, 1, 2, 4, 9};
  const int64_t ns[] = {0, 1, 5, 13};
  for (size_t a = 0; a < 6; a++)
    for (size_t b = 0; b < 5; b++)
      for (size_t c = 0; c < 4; c++)
        for (int drop = 0; drop <= 1; drop++) {
          /* ns[c] samples of a fixed i64[3] field "i" */
          sl_batch_opts bo = {.drop_last = 1};
          sl_reader *r = NULL;
          ASSERT_OK(sl_batch(test_range_reader(3 * ns[c]), 3, &bo, &r));
          ASSERT_OK(sl_window(r, "i", sizes[a], strides[b], drop, &r));
          uint64_t len = 0;
          ASSERT_OK(sl_reader_length(r, &len));
          uint64_t got = 0;
          sl_sample *s = NULL;
          while (sl_reader_next(r, &s) == SL_OK) {
            got++;
            sl_sample_release(s);
          }
          ASSERT_EQ(len, got);
          sl_reader_destroy(r);
        }
  /* A field of varying length: not known, saying why. */
  const int lens[] = {3, 1};
  sl_reader *r = NULL;
  ASSERT_OK(sl_window(docs_reader(lens, 2), "ids", 2, 0, 0, &r));
  uint64_t len = 0;
  ASSERT_RC(sl_reader_length(r, &len), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "window: field 'ids' varies in length");
  sl_reader_destroy(r);
}

/* --- pack ----------------------------------------------------------------- */

typedef struct packed {
  int nrows;
  int32_t ids[256][64], seg[256][64], pos[256][64];
} packed;

static void read_packed(sl_reader *r, int64_t T, packed *p) {
  p->nrows = 0;
  sl_sample *s = NULL;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    ASSERT_TRUE(p->nrows < 256);
    ASSERT_EQ(field(s, "ids")->shape[0], T);
    memcpy(p->ids[p->nrows], field(s, "ids")->data, 4 * (size_t)T);
    memcpy(p->seg[p->nrows], field(s, "segment_ids")->data, 4 * (size_t)T);
    memcpy(p->pos[p->nrows], field(s, "positions")->data, 4 * (size_t)T);
    p->nrows++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
}

/* Every row: segments 1, 2, ... in order then only padding (0, id 0,
 * position 0); positions count 0, 1, ... within each segment; every
 * document (with eos, split into pieces of T) appears exactly once, in one
 * segment of one row, pieces of a document in order. */
static void check_packing(const int *lens, size_t nd, int64_t T, int eos,
                          int truncate, const packed *p, double *eff) {
  /* piece k of document d: found where? */
  int found[64][16] = {{0}};
  long tokens = 0;
  for (int r = 0; r < p->nrows; r++) {
    int32_t want_seg = 1;
    int64_t t = 0;
    while (t < T && p->seg[r][t] != 0) {
      ASSERT_EQ(p->seg[r][t], want_seg);
      int64_t start = t;
      int32_t first = p->ids[r][t];
      int d = (first - 1) / 100;
      while (t < T && p->seg[r][t] == want_seg) {
        ASSERT_EQ(p->pos[r][t], t - start);
        t++;
      }
      int64_t len = t - start;
      /* which piece: from the first token */
      int piece = (first == eos) ? -1 : ((first - 1) % 100) / (int)T;
      if (piece < 0) { /* a piece that is the eos alone: the last */
        ASSERT_TRUE(eos >= 0);
        ASSERT_EQ(len, 1);
        tokens += len;
        want_seg++;
        continue;
      }
      ASSERT_TRUE(d >= 0 && (size_t)d < nd && piece < 16);
      found[d][piece]++;
      int64_t doc_total = lens[d] + (eos >= 0 ? 1 : 0);
      for (int64_t i = 0; i < len; i++) {
        int64_t at = (int64_t)piece * T + i;
        int32_t want = at < lens[d] ? doc_tok(d, (int)at) : eos;
        ASSERT_EQ(p->ids[r][start + i], want);
      }
      if (truncate)
        ASSERT_EQ(len, SL_MIN(doc_total, T));
      else
        ASSERT_EQ(len, SL_MIN(T, doc_total - (int64_t)piece * T));
      tokens += len;
      want_seg++;
    }
    for (; t < T; t++) {
      ASSERT_EQ(p->seg[r][t], 0);
      ASSERT_EQ(p->ids[r][t], 0);
      ASSERT_EQ(p->pos[r][t], 0);
    }
  }
  for (size_t d = 0; d < nd; d++) {
    int64_t doc_total = lens[d] + (eos >= 0 ? 1 : 0);
    int pieces = truncate ? (doc_total > 0) : (int)((doc_total + T - 1) / T);
    for (int k = 0; k < pieces; k++) {
      /* an eos-only last piece is not recognisable by its first token */
      bool eos_only = eos >= 0 && (int64_t)k * T == lens[d];
      if (!eos_only && found[d][k] != 1)
        test_fail(__FILE__, __LINE__, "document %zu piece %d found %d times", d,
                  k, found[d][k]);
    }
  }
  if (eff) *eff = (double)tokens / ((double)p->nrows * (double)T);
}

static sl_reader *packer(const int *lens, size_t nd, int64_t T, int eos,
                         size_t lookahead, int truncate) {
  sl_reader *r = docs_reader(lens, nd);
  sl_pack_opts o = SL_PACK_OPTS_INIT;
  o.seq_len = T;
  o.has_eos = eos >= 0;
  o.eos = eos;
  o.lookahead = lookahead;
  o.truncate = truncate;
  ASSERT_OK(sl_pack(r, &o, &r));
  return r;
}

TEST(pack_fills_rows_of_exactly_T_with_segments_and_positions) {
  const int lens[] = {5, 0, 1, 12, 3, 7, 7, 2, 30, 1, 9, 4, 0, 6};
  static packed p;
  for (int eos = -1; eos <= 0; eos++) /* eos 0 would read as padding: -1 */
    for (int truncate = 0; truncate <= 1; truncate++)
      for (size_t la = 1; la <= 8; la *= 2) {
        int e = eos == 0 ? 99999 : -1;
        sl_reader *r = packer(lens, 14, 8, e, la, truncate);
        read_packed(r, 8, &p);
        double eff = 0, eff2 = 0;
        check_packing(lens, 14, 8, e, truncate, &p, &eff);
        uint64_t rows, toks;
        ASSERT_OK(sl_pack_stats(r, &rows, &toks, &eff2));
        ASSERT_EQ(rows, p.nrows);
        ASSERT_TRUE(fabs(eff - eff2) < 1e-12);
        ASSERT_TRUE(eff > 0.5 && eff <= 1.0);
        sl_reader_destroy(r);
      }
}

TEST(pack_first_fit_fills_earlier_rows_and_more_lookahead_packs_tighter) {
  /* T = 10: 6, 6, 4, 4 - greedy in order (lookahead 1) needs 3 rows, first
   * fit with 2 open rows needs 2: [6 4] [6 4]. */
  const int lens[] = {6, 6, 4, 4};
  static packed p;
  sl_reader *r = packer(lens, 4, 10, -1, 1, 0);
  read_packed(r, 10, &p);
  ASSERT_EQ(p.nrows, 3);
  sl_reader_destroy(r);
  r = packer(lens, 4, 10, -1, 2, 0);
  read_packed(r, 10, &p);
  ASSERT_EQ(p.nrows, 2);
  ASSERT_EQ(p.ids[0][6], doc_tok(2, 0));
  ASSERT_EQ(p.seg[0][6], 2);
  ASSERT_EQ(p.ids[1][6], doc_tok(3, 0));
  double eff;
  ASSERT_OK(sl_pack_stats(r, NULL, NULL, &eff));
  ASSERT_TRUE(eff == 1.0);
  sl_reader_destroy(r);
}

TEST(pack_with_T_larger_than_every_document_and_empty_input) {
  const int lens[] = {1, 1, 2};
  static packed p;
  sl_reader *r = packer(lens, 3, 64, -1, 4, 0);
  read_packed(r, 64, &p);
  ASSERT_EQ(p.nrows, 1);
  check_packing(lens, 3, 64, -1, 0, &p, NULL);
  sl_reader_destroy(r);
  const int none[] = {0, 0};
  r = packer(none, 2, 4, -1, 4, 0);
  read_packed(r, 4, &p);
  ASSERT_EQ(p.nrows, 0);
  double eff = 1;
  ASSERT_OK(sl_pack_stats(r, NULL, NULL, &eff));
  ASSERT_TRUE(eff == 0);
  sl_reader_destroy(r);
  /* a pack stage is found below other stages; none is SL_ENOTFOUND */
  r = packer(lens, 3, 4, -1, 1, 0);
  ASSERT_OK(sl_batch(r, 2, NULL, &r));
  ASSERT_OK(sl_pack_stats(r, NULL, NULL, NULL));
  sl_reader_destroy(r);
  r = test_range_reader(3);
  ASSERT_RC(sl_pack_stats(r, NULL, NULL, NULL), SL_ENOTFOUND);
  sl_reader_destroy(r);
}

TEST(pack_checks_its_fields) {
  const int lens[] = {3};
  sl_reader *r = docs_reader(lens, 1);
  sl_pack_opts o = SL_PACK_OPTS_INIT;
  ASSERT_RC(sl_pack(r, &o, &r), SL_EINVAL); /* seq_len 0 */
  r = docs_reader(lens, 1);
  o.seq_len = 4;
  const char *f[] = {"doc"};
  o.fields = f;
  o.nfields = 1;
  ASSERT_RC(sl_pack(r, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "'doc'");
}

TEST(pack_refuses_eos_and_pad_outside_i32) {
  /* The rows are i32: an eos or pad id that does not fit would wrap
   * (2^31 became -2^31) - refused, naming the option and the value. */
  const int lens[] = {3};
  const int64_t bad[] = {(int64_t)INT32_MAX + 1, (int64_t)INT32_MIN - 1,
                         (int64_t)1 << 40};
  for (int which = 0; which < 2; which++)
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
      sl_reader *r = docs_reader(lens, 1);
      sl_pack_opts o = SL_PACK_OPTS_INIT;
      o.seq_len = 4;
      if (which == 0) {
        o.has_eos = 1;
        o.eos = bad[k];
      } else {
        o.pad = bad[k];
      }
      ASSERT_RC(sl_pack(r, &o, &r), SL_EINVAL);
      ASSERT_CONTAINS(sl_last_error(), which == 0 ? "pack: eos" : "pack: pad");
      ASSERT_CONTAINS(sl_last_error(), "i32");
    }
  /* the extremes that fit are taken; eos without has_eos is not looked at */
  sl_reader *r = docs_reader(lens, 1);
  sl_pack_opts o = SL_PACK_OPTS_INIT;
  o.seq_len = 4;
  o.has_eos = 1;
  o.eos = INT32_MIN;
  o.pad = INT32_MAX;
  ASSERT_OK(sl_pack(r, &o, &r));
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(r, &s));
  const int32_t *ids = field(s, "ids")->data;
  ASSERT_EQ(ids[3], INT32_MIN); /* the document's 3 tokens, then eos */
  sl_sample_release(s);
  sl_reader_destroy(r);
  r = docs_reader(lens, 1);
  o = (sl_pack_opts)SL_PACK_OPTS_INIT;
  o.seq_len = 8;
  o.eos = (int64_t)1 << 40; /* has_eos 0 */
  o.pad = -1;
  ASSERT_OK(sl_pack(r, &o, &r));
  ASSERT_OK(sl_reader_next(r, &s));
  ids = field(s, "ids")->data;
  ASSERT_EQ(ids[7], -1);
  sl_sample_release(s);
  sl_reader_destroy(r);
}

/* --- padded_batch --------------------------------------------------------- */

TEST(padded_batch_pads_to_the_longest_or_to_T_with_lengths) {
  const int lens[] = {3, 0, 5, 1, 2};
  sl_pad_value pad = {"ids", -7};
  for (int to = 0; to <= 6; to += 6) {
    sl_reader *r = docs_reader(lens, 5);
    sl_padded_batch_opts o = SL_PADDED_BATCH_OPTS_INIT;
    o.to = to;
    o.pad = &pad;
    o.npad = 1;
    ASSERT_OK(sl_padded_batch(r, 2, &o, &r));
    ASSERT_EQ(test_length_checked(r), 3);
    for (int b = 0; b < 3; b++) {
      sl_sample *s = NULL;
      ASSERT_OK(sl_reader_next(r, &s));
      const sl_tensor *ids = field(s, "ids"), *len = field(s, "ids_len");
      const sl_tensor *doc = field(s, "doc");
      int rows = b < 2 ? 2 : 1;
      int64_t L = 0;
      for (int j = 0; j < rows; j++)
        L = SL_MAX(L, lens[2 * b + j]);
      if (to) L = to;
      ASSERT_EQ(ids->shape[0], rows);
      ASSERT_EQ(ids->shape[1], L);
      ASSERT_EQ(doc->shape[0], rows);
      for (int j = 0; j < rows; j++) {
        int d = 2 * b + j;
        ASSERT_EQ(((int64_t *)len->data)[j], lens[d]);
        ASSERT_EQ(((int64_t *)doc->data)[j], d);
        for (int64_t i = 0; i < L; i++)
          ASSERT_EQ(((int32_t *)ids->data)[j * L + i],
                    i < lens[d] ? doc_tok(d, (int)i) : -7);
      }
      sl_sample_release(s);
    }
    sl_reader_destroy(r);
  }
}

TEST(padded_batch_drop_remainder_and_errors) {
  const int lens[] = {3, 9, 5};
  sl_reader *r = docs_reader(lens, 3);
  sl_padded_batch_opts o = SL_PADDED_BATCH_OPTS_INIT;
  o.drop_remainder = 1;
  ASSERT_OK(sl_padded_batch(r, 2, &o, &r));
  ASSERT_EQ(sl_schema_field_shape(sl_reader_schema(r), 0)[0], 2);
  ASSERT_EQ(test_length_checked(r), 1);
  sl_reader_destroy(r);
  r = docs_reader(lens, 3);
  o.drop_remainder = 0;
  o.to = 4; /* 9 is longer */
  ASSERT_OK(sl_padded_batch(r, 2, &o, &r));
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "length 9 is longer than the padded "
                                   "length 4");
  sl_reader_destroy(r);
  r = docs_reader(lens, 3);
  sl_pad_value bad = {"nope", 1};
  o.to = 0;
  o.pad = &bad;
  o.npad = 1;
  ASSERT_RC(sl_padded_batch(r, 2, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "'nope'");
}

/* --- bucket_batch --------------------------------------------------------- */

/* Options over field "ids" with `nb` boundaries. */
static sl_bucket_batch_opts bucket_opts(const int64_t *bounds, size_t nb,
                                        const size_t *sizes, int ptb,
                                        int drop) {
  sl_bucket_batch_opts o = SL_BUCKET_BATCH_OPTS_INIT;
  o.length = "ids";
  o.boundaries = bounds;
  o.nboundaries = nb;
  o.batch_sizes = sizes;
  o.pad_to_bucket = ptb;
  o.drop_remainder = drop;
  return o;
}

TEST(bucket_batch_groups_by_length_and_flushes_in_bucket_order) {
  /* boundaries 3, 6: buckets [0,3) [3,6) [6,inf) with sizes 2, 2, 1 */
  const int lens[] = {1, 4, 7, 2, 5, 0, 3, 8, 9, 1};
  const int64_t bounds[] = {3, 6};
  const size_t sizes[] = {2, 2, 1};
  for (int ptb = 0; ptb <= 1; ptb++)
    for (int drop = 0; drop <= 1; drop++) {
      sl_reader *r = docs_reader(lens, 10);
      sl_bucket_batch_opts o = bucket_opts(bounds, 2, sizes, ptb, drop);
      ASSERT_OK(sl_bucket_batch(r, &o, &r));
      /* expected: 7 -> [2]; 1,2 -> [0,3]; 4,5 -> [1,4]; 8 -> [7]; 9 -> [8];
       * 0,3? 0 is len 1 -> bucket0 with doc 5 (len 0): [0..] order:
       * docs in arrival: 0(b0) 1(b1) 2(b2 emit [2]) 3(b0 emit [0,3])
       * 4(b1 emit [1,4]) 5(b0) 6(b1) 7(b2 emit [7]) 8(b2 emit [8]) 9(b0
       * emit [5,9]); end: b1 holds [6]. */
      const int want[][2] = {{2, -1}, {0, 3}, {1, 4}, {7, -1},
                             {8, -1}, {5, 9}, {6, -1}};
      const int bucket[] = {2, 0, 1, 2, 2, 0, 1};
      int nwant = drop ? 6 : 7;
      for (int b = 0; b < nwant; b++) {
        sl_sample *s = NULL;
        ASSERT_OK(sl_reader_next(r, &s));
        const sl_tensor *doc = field(s, "doc"), *ids = field(s, "ids");
        int rows = want[b][1] < 0 ? 1 : 2;
        ASSERT_EQ(doc->shape[0], rows);
        int64_t L = 0;
        for (int j = 0; j < rows; j++) {
          ASSERT_EQ(((int64_t *)doc->data)[j], want[b][j]);
          L = SL_MAX(L, lens[want[b][j]]);
        }
        if (ptb && bucket[b] < 2) L = bounds[bucket[b]] - 1;
        ASSERT_EQ(ids->shape[1], L);
        sl_sample_release(s);
      }
      sl_sample *s = NULL;
      ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
      sl_reader_destroy(r);
    }
}

TEST(bucket_batch_refuses_bad_boundaries) {
  const int lens[] = {1};
  const int64_t bounds[] = {5, 5};
  const size_t sizes[] = {1, 1, 1};
  sl_reader *r = docs_reader(lens, 1);
  sl_bucket_batch_opts o = SL_BUCKET_BATCH_OPTS_INIT;
  o.boundaries = bounds;
  o.nboundaries = 2;
  o.batch_sizes = sizes;
  ASSERT_RC(sl_bucket_batch(r, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "increasing");
  r = docs_reader(lens, 1);
  const int64_t negative[] = {-1, 5};
  o.boundaries = negative;
  ASSERT_RC(sl_bucket_batch(r, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "boundary 0 is -1");
  r = docs_reader(lens, 1);
  o.batch_sizes = NULL;
  ASSERT_RC(sl_bucket_batch(r, &o, &r), SL_EINVAL);
}

/* tf.data's bucket_by_sequence_length accepts a boundary of 0 (its test
 * uses [0, ...]): that bucket (length < 0) never holds a sample, and the
 * others are as without it (issue 24, item 24: this was SL_EINVAL). */
TEST(bucket_batch_accepts_a_boundary_of_zero) {
  const int lens[] = {0, 2, 4, 1, 5, 3};
  const int64_t bounds[] = {0, 3};
  const size_t sizes[] = {1, 2, 2};
  sl_reader *r = docs_reader(lens, 6);
  sl_bucket_batch_opts o = bucket_opts(bounds, 2, sizes, 1, 0);
  ASSERT_OK(sl_bucket_batch(r, &o, &r));
  /* [0,3): docs 0, 1 then 3 (+ end); [3,inf): docs 2, 4 then 5 (+ end). */
  const int want[][2] = {{0, 1}, {2, 4}, {3, -1}, {5, -1}};
  const int64_t width[] = {2, 5, 2, 3};
  for (int b = 0; b < 4; b++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    const sl_tensor *doc = field(s, "doc"), *ids = field(s, "ids");
    int rows = want[b][1] < 0 ? 1 : 2;
    ASSERT_EQ(doc->shape[0], rows);
    for (int j = 0; j < rows; j++)
      ASSERT_EQ(((int64_t *)doc->data)[j], want[b][j]);
    ASSERT_EQ(ids->shape[1], width[b]);
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}

/* --- mix ------------------------------------------------------------------ */

/* Readers of i64 samples: reader i yields i*1e6 + 0, 1, ... (n each). */
static sl_reader *offset_range(int i, int64_t n);

static int add_offset(void *ud, sl_sample *in, sl_sample **out) {
  int64_t off = (int64_t)(intptr_t)ud;
  sl_sample *o = sl_sample_new((sl_schema *)sl_sample_schema(in));
  void *d = NULL;
  ASSERT_OK(sl_sample_alloc(o, 0, 0, NULL, &d));
  *(int64_t *)d = test_sample_i64(in, 0) + off;
  sl_sample_release(in);
  *out = o;
  return SL_OK;
}

static sl_reader *offset_range(int i, int64_t n) {
  sl_reader *r = test_range_reader(n);
  ASSERT_OK(
      sl_map(r, add_offset, (void *)(intptr_t)(i * 1000000), NULL, NULL, &r));
  return r;
}

static sl_reader *mixture(const int64_t *n, const double *w, size_t k,
                          uint64_t seed, int stop) {
  sl_reader *rs[8];
  for (size_t i = 0; i < k; i++)
    rs[i] = offset_range((int)i, n[i]);
  sl_mix_opts o = SL_MIX_OPTS_INIT;
  o.weights = w;
  o.seed = seed;
  o.stop = stop;
  sl_reader *r = NULL;
  ASSERT_OK(sl_mix(rs, k, &o, &r));
  return r;
}

TEST(mix_realises_its_weights_over_100000_draws) {
  const int64_t n[] = {1000, 1000, 1000};
  const double w[] = {0.7, 0.2, 0.1};
  sl_reader *r = mixture(n, w, 3, 1, SL_MIX_STOP_NEVER);
  uint64_t seen[3] = {0};
  int64_t next[3] = {0};
  for (int j = 0; j < 100000; j++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(r, &s));
    int64_t v = test_sample_i64(s, 0);
    int i = (int)(v / 1000000);
    ASSERT_EQ(v % 1000000, next[i]); /* each reader in its own order */
    next[i] = (next[i] + 1) % 1000;  /* ... restarted after its end */
    seen[i]++;
    sl_sample_release(s);
  }
  uint64_t counts[3];
  size_t k;
  ASSERT_OK(sl_mix_counts(r, counts, 3, &k));
  ASSERT_EQ(k, 3);
  for (int i = 0; i < 3; i++) {
    ASSERT_EQ(counts[i], seen[i]);
    /* binomial sd at 1e5 draws is <= 0.0015: 0.005 is over 3 sd */
    double share = (double)seen[i] / 100000.0;
    if (fabs(share - w[i]) > 0.005)
      test_fail(__FILE__, __LINE__, "reader %d: share %.4f, weight %.2f", i,
                share, w[i]);
  }
  sl_reader_destroy(r);
}

static size_t drain_all(sl_reader *r, int64_t *v, size_t cap) {
  size_t n;
  ASSERT_RC(test_drain_i64(r, v, cap, &n), SL_EOF);
  return n;
}

TEST(mix_is_reproducible_and_its_stops_end_as_asked) {
  const int64_t n[] = {50, 20};
  const double w[] = {1, 1};
  static int64_t a[200], b[200];
  sl_reader *r1 = mixture(n, w, 2, 9, SL_MIX_STOP_ALL);
  sl_reader *r2 = mixture(n, w, 2, 9, SL_MIX_STOP_ALL);
  size_t na = drain_all(r1, a, 200), nb = drain_all(r2, b, 200);
  ASSERT_EQ(na, 70); /* all: every sample of both */
  ASSERT_EQ(nb, 70);
  ASSERT_TRUE(memcmp(a, b, na * 8) == 0);
  ASSERT_OK(sl_reader_reset(r1));
  nb = drain_all(r1, b, 200);
  ASSERT_EQ(nb, 70);
  ASSERT_TRUE(memcmp(a, b, na * 8) != 0); /* another pass, another order */
  sl_reader_destroy(r1);
  sl_reader_destroy(r2);
  /* first: ends when a drawn reader ends: before 70, after at least 20 */
  r1 = mixture(n, w, 2, 9, SL_MIX_STOP_FIRST);
  na = drain_all(r1, a, 200);
  ASSERT_TRUE(na >= 20 && na < 70);
  int64_t from1 = 0;
  for (size_t j = 0; j < na; j++)
    from1 += a[j] >= 1000000;
  ASSERT_EQ(from1, 20); /* it ended on the second reader's end */
  sl_reader_destroy(r1);
  /* a weight of 0 is never drawn */
  const double w0[] = {0, 1};
  r1 = mixture(n, w0, 2, 9, SL_MIX_STOP_ALL);
  na = drain_all(r1, a, 200);
  ASSERT_EQ(na, 20);
  sl_reader_destroy(r1);
}

/* keep_order: every pass draws pass 0's order, as tf.data's
 * sample_from_datasets does unless rerandomize_each_iteration (issue 24,
 * item 24); the default draws a new one.  A restore to pass 1 followed by a
 * reset draws pass 2's order, the one the saving run drew: pass 0's with
 * keep_order, a third one without. */
TEST(mix_keeps_one_order_when_asked_and_restores_repeat_it) {
  const int64_t n[] = {30, 30};
  const double w[] = {1, 1};
  static int64_t pass[2][3][100], got[100];
  for (int keep = 0; keep <= 1; keep++) {
    sl_reader *rs[2] = {offset_range(0, n[0]), offset_range(1, n[1])};
    sl_mix_opts o = SL_MIX_OPTS_INIT;
    o.weights = w;
    o.seed = 5;
    o.stop = SL_MIX_STOP_ALL;
    o.keep_order = keep;
    sl_reader *r = NULL;
    ASSERT_OK(sl_mix(rs, 2, &o, &r));
    void *st = NULL;
    size_t len = 0;
    for (int p = 0; p < 3; p++) {
      if (p) ASSERT_OK(sl_reader_reset(r));
      if (p == 1) { /* saved 7 outputs into pass 1 */
        sl_sample *s = NULL;
        for (int j = 0; j < 7; j++) {
          ASSERT_OK(sl_reader_next(r, &s));
          pass[keep][p][j] = test_sample_i64(s, 0);
          sl_sample_release(s);
        }
        ASSERT_OK(sl_reader_save(r, &st, &len));
        ASSERT_EQ(drain_all(r, pass[keep][p] + 7, 93), 53);
      } else {
        ASSERT_EQ(drain_all(r, pass[keep][p], 100), 60);
      }
    }
    sl_reader_destroy(r);
    bool same01 = memcmp(pass[keep][0], pass[keep][1], 60 * 8) == 0;
    bool same02 = memcmp(pass[keep][0], pass[keep][2], 60 * 8) == 0;
    ASSERT_EQ(same01, keep == 1);
    ASSERT_EQ(same02, keep == 1);
    /* A new pipeline restored to pass 1, output 7: the rest of pass 1,
     * then after a reset pass 2's order. */
    rs[0] = offset_range(0, n[0]);
    rs[1] = offset_range(1, n[1]);
    ASSERT_OK(sl_mix(rs, 2, &o, &r));
    ASSERT_OK(sl_reader_restore(r, st, len));
    ASSERT_EQ(drain_all(r, got, 100), 53);
    ASSERT_TRUE(memcmp(got, pass[keep][1] + 7, 53 * 8) == 0);
    ASSERT_OK(sl_reader_reset(r));
    ASSERT_EQ(drain_all(r, got, 100), 60);
    ASSERT_TRUE(memcmp(got, pass[keep][2], 60 * 8) == 0);
    sl_reader_destroy(r);
    /* The setting is part of the state's identity. */
    rs[0] = offset_range(0, n[0]);
    rs[1] = offset_range(1, n[1]);
    o.keep_order = !keep;
    ASSERT_OK(sl_mix(rs, 2, &o, &r));
    ASSERT_TRUE(sl_reader_restore(r, st, len) < 0);
    sl_reader_destroy(r);
    sl_free(st);
  }
}

TEST(mix_refuses_other_schemas_and_bad_weights) {
  sl_reader *rs[2] = {test_range_reader(3), NULL};
  const int lens[] = {1};
  rs[1] = docs_reader(lens, 1);
  sl_reader *r = NULL;
  ASSERT_RC(sl_mix(rs, 2, NULL, &r), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "one schema");
  rs[0] = test_range_reader(3);
  rs[1] = test_range_reader(3);
  const double w[] = {-1, 1};
  sl_mix_opts o = SL_MIX_OPTS_INIT;
  o.weights = w;
  ASSERT_RC(sl_mix(rs, 2, &o, &r), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "weight 0 is -1");
}

/* --- save and restore ----------------------------------------------------- */

enum {
  R_WINDOW,
  R_WINDOW_HELD,
  R_PACK,
  R_PADDED,
  R_BUCKET,
  R_MIX,
  R_MIX_NEVER,
  R_ALL
};

static sl_reader *build(void *ud) {
  static const int lens[] = {5, 0, 1, 12, 3, 7, 7, 2,  30, 1, 9, 4, 0,
                             6, 3, 3, 8,  1, 1, 2, 11, 4,  6, 5, 2};
  const size_t nd = sizeof lens / sizeof lens[0];
  sl_reader *r = docs_reader(lens, nd);
  switch ((int)(intptr_t)ud) {
  case R_WINDOW:
    ASSERT_OK(sl_shuffle(r, 5, 3, &r));
    ASSERT_OK(sl_window(r, "ids", 4, 3, 0, &r));
    return r;
  case R_WINDOW_HELD: /* windows held above: saved from the log */
    ASSERT_OK(sl_window(r, "ids", 5, 7, 0, &r));
    ASSERT_OK(sl_batch(r, 2, NULL, &r));
    ASSERT_OK(sl_prefetch(r, 3, &r));
    return r;
  case R_PACK: {
    sl_pack_opts o = SL_PACK_OPTS_INIT;
    o.seq_len = 8;
    o.lookahead = 3;
    ASSERT_OK(sl_shuffle(r, 7, 5, &r));
    ASSERT_OK(sl_pack(r, &o, &r));
    ASSERT_OK(sl_batch(r, 2, NULL, &r));
    return r;
  }
  case R_PADDED:
    ASSERT_OK(sl_shuffle(r, 7, 5, &r));
    ASSERT_OK(sl_padded_batch(r, 3, NULL, &r));
    return r;
  case R_BUCKET: {
    const int64_t b[] = {3, 8};
    const size_t sz[] = {3, 2, 1};
    sl_bucket_batch_opts o = SL_BUCKET_BATCH_OPTS_INIT;
    o.boundaries = b;
    o.nboundaries = 2;
    o.batch_sizes = sz;
    ASSERT_OK(sl_shuffle(r, 7, 5, &r));
    ASSERT_OK(sl_bucket_batch(r, &o, &r));
    return r;
  }
  default: {
    sl_reader_destroy(r);
    const int64_t n[] = {40, 25, 10};
    const double w[] = {0.5, 0.3, 0.2};
    r = mixture(n, w, 3, 4,
                (int)(intptr_t)ud == R_MIX ? SL_MIX_STOP_ALL
                                           : SL_MIX_STOP_NEVER);
    if ((int)(intptr_t)ud == R_MIX_NEVER) ASSERT_OK(sl_take(r, 60, &r));
    return r;
  }
  }
}

TEST(the_lm_stages_resume_exactly) {
  const uint64_t cuts[] = {0, 1, 2, 5, 11, 20, 33, 47, 60, 75};
  for (int k = 0; k < R_ALL; k++)
    test_resume_check(build, (void *)(intptr_t)k, 3, cuts, 10, 0);
}

/* --- threads ---------------------------------------------------------------
 */

static int identity(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  *out = in;
  return SL_OK;
}

static uint64_t run_digest(uint32_t threads) {
  const int lens[] = {5, 0, 1, 12, 3, 7, 7, 2, 30, 1, 9, 4, 0, 6, 3, 3, 8};
  sl_parallel_opts po = SL_PARALLEL_OPTS_INIT;
  po.threads = threads;
  sl_reader *a = docs_reader(lens, 17);
  ASSERT_OK(sl_map_parallel(a, identity, NULL, NULL, NULL, &po, &a));
  sl_pack_opts o = SL_PACK_OPTS_INIT;
  o.seq_len = 8;
  ASSERT_OK(sl_pack(a, &o, &a));
  sl_reader *b = docs_reader(lens, 17);
  ASSERT_OK(sl_map_parallel(b, identity, NULL, NULL, NULL, &po, &b));
  ASSERT_OK(sl_window(b, "ids", 8, 0, 1, &b));
  ASSERT_OK(sl_pack(b, &o, &b));
  sl_reader *rs[2] = {a, b};
  sl_mix_opts mo = SL_MIX_OPTS_INIT;
  mo.seed = 17;
  mo.stop = SL_MIX_STOP_ALL;
  sl_reader *r = NULL;
  ASSERT_OK(sl_mix(rs, 2, &mo, &r));
  ASSERT_OK(sl_padded_batch(r, 3, NULL, &r));
  ASSERT_OK(sl_prefetch(r, 2, &r));
  uint64_t h = 1469598103934665603ull;
  for (int pass = 0; pass < 2; pass++) {
    sl_sample *s = NULL;
    int rc;
    while ((rc = sl_reader_next(r, &s)) == SL_OK) {
      h = (h ^ test_sample_digest(s)) * 1099511628211ull;
      sl_sample_release(s);
    }
    ASSERT_RC(rc, SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  return h;
}

TEST(the_same_output_for_1_2_and_4_threads_upstream) {
  uint64_t one = run_digest(1);
  ASSERT_TRUE(run_digest(2) == one);
  ASSERT_TRUE(run_digest(4) == one);
}
