/*
 * test_source_shapes.c - the shared shapes of the format sources: an
 * indexed source (readers/indexed.h: npy, idx, image files) and an offset
 * log (io/offset_log.h: tfrecord, wds, csv), each on a toy stage: a state
 * restores the position it saved, and one whose position or data identity
 * does not fit the reader is refused (SL_ECORRUPT) with the reader left as
 * it was.
 */
#include "formats/offset_log.h"
#include "stages/indexed.h"
#include "test.h"
#include "test_util.h"

static sl_schema *i64_schema(void) {
  sl_schema *s = sl_schema_new();
  ASSERT_OK(sl_schema_add(s, "x", SL_I64, 0, NULL));
  return s;
}

static void save(sl_reader *r, void **st, size_t *len) {
  ASSERT_OK(sl_reader_save(r, st, len));
}

/* --- indexed: sample i is 10 i; the record holds `ident` ---------------- */

typedef struct toy {
  sl__indexed ix;
  sl_schema *schema;
  uint64_t ident;
} toy;

static int toy_get(void *st, uint64_t i, sl_sample **out) {
  return test_i64_sample(((toy *)st)->schema, (int64_t)i * 10, out);
}

static int toy_put(void *st, sl__state_out *w) {
  return sl__state_put_u64(w, ((toy *)st)->ident);
}

static int toy_check(void *st, sl__state_in *in) {
  uint64_t v;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &v));
  SL_RETURN_ERROR_IF(v != ((toy *)st)->ident, SL_ECORRUPT, "toy: changed");
  return SL_OK;
}

static void toy_destroy(void *st) {
  sl_schema_release(((toy *)st)->schema);
  sl__free(st);
}

static const sl__stage_ops toy_ops = {
    .name = "toy",
    SL__INDEXED_OPS,
    .fetch = sl__indexed_fetch,
    .destroy = toy_destroy,
};

static sl_reader *toy_reader(uint64_t n, uint64_t ident) {
  toy *t = sl__calloc(1, sizeof *t);
  t->ix = (sl__indexed){.get = toy_get,
                        .put = toy_put,
                        .check = toy_check,
                        .stage = "toy",
                        .name = "t",
                        .unit = "things",
                        .n = n};
  t->schema = i64_schema();
  t->ident = ident;
  sl_reader *r;
  ASSERT_OK(sl__stage_new(&toy_ops, t, t->schema, NULL, 0, NULL, &r));
  return r;
}

static int64_t next_i64(sl_reader *r) {
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  int64_t v = test_sample_i64(s, 0);
  sl_sample_release(s);
  return v;
}

TEST(indexed_source_restores_its_position_and_fetches) {
  sl_reader *a = toy_reader(8, 7), *b = toy_reader(8, 7);
  ASSERT_EQ(test_length_checked(a), 8);
  for (int i = 0; i < 3; i++)
    ASSERT_EQ(next_i64(a), i * 10);
  void *st;
  size_t len;
  save(a, &st, &len);
  ASSERT_OK(sl_reader_restore(b, st, len));
  for (int i = 3; i < 8; i++)
    ASSERT_EQ(next_i64(b), i * 10);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(b, &s), SL_EOF);
  ASSERT_OK(sl__reader_fetch(b, 0, 5, &s)); /* random access: no move */
  ASSERT_EQ(test_sample_i64(s, 0), 50);
  sl_sample_release(s);
  ASSERT_RC(sl__reader_fetch(b, 0, 8, &s), SL_ECORRUPT);
  ASSERT_STREQ(sl_last_error(), "toy t: sample 8 is past its 8 things");
  ASSERT_OK(sl_reader_reset(a));
  ASSERT_EQ(next_i64(a), 0);
  sl_free(st);
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}

TEST(indexed_source_refuses_a_wrong_position_or_identity) {
  sl_reader *a = toy_reader(8, 7);
  for (int i = 0; i < 5; i++)
    next_i64(a);
  void *st;
  size_t len;
  save(a, &st, &len);
  /* Other data: the check refuses before anything moves. */
  sl_reader *other = toy_reader(8, 9);
  ASSERT_EQ(next_i64(other), 0);
  ASSERT_RC(sl_reader_restore(other, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "toy: changed");
  ASSERT_EQ(next_i64(other), 10);
  /* Fewer samples than the position (the length tells the base first). */
  sl_reader *fewer = toy_reader(4, 7);
  ASSERT_RC(sl_reader_restore(fewer, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "(toy) is at sample 5 of a pass of 4");
  ASSERT_EQ(next_i64(fewer), 0);
  sl_free(st);
  sl_reader_destroy(a);
  sl_reader_destroy(other);
  sl_reader_destroy(fewer);
}

/* --- offset log ----------------------------------------------------------- */

TEST(offset_log_finds_the_offsets_it_kept) {
  static sl__offset_log l;
  sl__offset_log_start(&l, 0, 100);
  ASSERT_EQ(sl__offset_log_find(&l, 0), 100);
  ASSERT_EQ(sl__offset_log_find(&l, 1), UINT64_MAX); /* not read yet */
  for (uint64_t i = 1; i <= 3000; i++)
    sl__state_log_note(&l.log, 100 + 10 * i); /* after output i - 1 */
  ASSERT_EQ(sl__offset_log_find(&l, 3000), 100 + 10 * 3000);
  uint64_t oldest = 3000 - (SL__STATE_LOG - 2);
  ASSERT_EQ(sl__offset_log_find(&l, oldest), 100 + 10 * oldest);
  ASSERT_EQ(sl__offset_log_find(&l, oldest - 1), UINT64_MAX);
  ASSERT_EQ(sl__offset_log_find(&l, 0), 100); /* the pass's start */
  ASSERT_EQ(sl__offset_log_find(&l, 3001), UINT64_MAX);
  /* A restored pass knows its start and what it reads after. */
  sl__offset_log_start(&l, 50, 7);
  ASSERT_EQ(sl__offset_log_find(&l, 50), 7);
  ASSERT_EQ(sl__offset_log_find(&l, 49), UINT64_MAX);
  ASSERT_EQ(sl__offset_log_find(&l, 0), UINT64_MAX);
  sl__state_log_note(&l.log, 17);
  ASSERT_EQ(sl__offset_log_find(&l, 51), 17);
}

/* Records of 10 bytes: output i at offset 10 i of a file `id`. */
typedef struct tape {
  sl__offset_log offs;
  sl_schema *schema;
  sl__file_id id;
  uint64_t off, size;
} tape;

static int tape_next(void *st, sl_sample **out) {
  tape *t = st;
  if (t->off >= t->size) return SL_EOF;
  SL_FORWARD_IF_ERROR(test_i64_sample(t->schema, (int64_t)t->off, out));
  t->off += 10;
  sl__state_log_note(&t->offs.log, t->off);
  return SL_OK;
}

static int tape_reset(void *st) {
  tape *t = st;
  t->off = 0;
  sl__offset_log_start(&t->offs, 0, 0);
  return SL_OK;
}

static int tape_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w) {
  tape *t = st;
  return sl__offset_log_save(&t->offs, k, &t->id, w);
}

static int tape_check(const sl_reader *r, void *st, sl__state_in *in) {
  const tape *t = st;
  uint64_t off;
  return sl__offset_log_read(in, "tape", "t.bin", &t->id, t->size, &off);
}

static int tape_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  tape *t = st;
  uint64_t off;
  SL_FORWARD_IF_ERROR(
      sl__offset_log_read(in, "tape", "t.bin", &t->id, t->size, &off));
  tape_reset(t);
  t->off = off == UINT64_MAX ? 10 * k : off; /* the walk, for a tape */
  sl__offset_log_start(&t->offs, k, t->off);
  return SL_OK;
}

static void tape_destroy(void *st) {
  sl_schema_release(((tape *)st)->schema);
  sl__free(st);
}

static const sl__stage_ops tape_ops = {
    .name = "tape",
    .next = tape_next,
    .reset = tape_reset,
    .destroy = tape_destroy,
    .save = tape_save,
    .restore = tape_restore,
    .check = tape_check,
};

static sl_reader *tape_reader(uint64_t size, int64_t mtime) {
  tape *t = sl__calloc(1, sizeof *t);
  t->schema = i64_schema();
  t->size = size;
  t->id = (sl__file_id){1, 2, 1000, mtime, 0};
  sl_reader *r;
  ASSERT_OK(sl__stage_new(&tape_ops, t, t->schema, NULL, 0, NULL, &r));
  return r;
}

TEST(offset_log_restores_and_refuses_a_wrong_offset_or_file) {
  sl_reader *a = tape_reader(1000, 5);
  for (int i = 0; i < 4; i++)
    ASSERT_EQ(next_i64(a), 10 * i);
  void *st;
  size_t len;
  save(a, &st, &len);
  sl_reader *b = tape_reader(1000, 5);
  ASSERT_OK(sl_reader_restore(b, st, len));
  ASSERT_EQ(next_i64(b), 40);
  /* Another file (its modification time): refused, nothing moved. */
  sl_reader *other = tape_reader(1000, 6);
  ASSERT_RC(sl_reader_restore(other, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(), "t.bin");
  ASSERT_EQ(next_i64(other), 0);
  /* An offset past the bytes there are. */
  sl_reader *shorter = tape_reader(30, 5);
  ASSERT_RC(sl_reader_restore(shorter, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(),
                  "restore: corrupt state: tape t.bin: offset 40 of 30 bytes");
  sl_free(st);
  sl_reader_destroy(a);
  sl_reader_destroy(b);
  sl_reader_destroy(other);
  sl_reader_destroy(shorter);
}
