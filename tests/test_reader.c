/* test_reader.c - the reader contract: sources, sticky errors, EOF, has_next,
 * reset, and readers implemented outside the library through a vtable. */
#include "test.h"
#include "test_util.h"

#include "stages/stage.h"

static int64_t value(sl_sample *s) {
  return *(int64_t *)sl_sample_at(s, 0)->data;
}

TEST(range_yields_values_then_repeatable_eof) {
  sl_reader *r;
  ASSERT_OK(sl_reader_range(3, &r));
  ASSERT_STREQ(sl_reader_name(r), "range");
  char d[64];
  ASSERT_STREQ(sl_schema_describe(sl_reader_schema(r), d, sizeof d),
               "{i: i64[]}");
  for (int64_t i = 0; i < 3; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    ASSERT_EQ(value(s), i);
    sl_sample_release(s);
  }
  sl_sample *s = (sl_sample *)1;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_NULL(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(value(s), 0);
  sl_sample_release(s);
  sl_reader_destroy(r);
  sl_reader_destroy(NULL);
  ASSERT_RC(sl_reader_range(-1, &r), SL_EINVAL);
}

TEST(has_next_peeks_one_sample) {
  sl_reader *r;
  ASSERT_OK(sl_reader_range(2, &r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  ASSERT_EQ(sl_reader_has_next(r), 1); /* idempotent */
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(value(s), 0);
  sl_sample_release(s);
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(value(s), 1);
  sl_sample_release(s);
  ASSERT_EQ(sl_reader_has_next(r), 0);
  /* A peeked sample is dropped by reset and by destroy. */
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(sl_reader_has_next(r), 1);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(value(s), 0);
  sl_sample_release(s);
  ASSERT_EQ(sl_reader_has_next(r), 1);
  sl_reader_destroy(r);
}

TEST(array_source_replays_and_checks_schemas) {
  sl_reader *src;
  ASSERT_OK(sl_reader_range(4, &src));
  sl_sample *items[4];
  for (int i = 0; i < 4; i++)
    ASSERT_OK(sl_reader_next(src, &items[i]));
  sl_reader *r;
  ASSERT_OK(sl_reader_from_array(items, 4, NULL, &r));
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < 4; i++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_PTR_EQ(s, items[i]); /* shared, not copied */
      sl_sample_release(s);
    }
    ASSERT_RC(sl_reader_next(r, NULL), SL_EINVAL);
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  /* A sample with another schema is refused. */
  sl_schema *other = sl_schema_new();
  sl_schema_add(other, "x", SL_F32, 0, NULL);
  sl_sample *odd = sl_sample_new(other);
  sl_sample *mixed[2] = {items[0], odd};
  ASSERT_RC(sl_reader_from_array(mixed, 2, NULL, &r), SL_ESHAPE);
  ASSERT_STREQ(sl_last_error(),
               "array: sample 1 has schema {x: f32[]}, expected {i: i64[]}");
  ASSERT_NULL(r);
  ASSERT_RC(sl_reader_from_array(NULL, 0, NULL, &r), SL_EINVAL);
  ASSERT_OK(sl_reader_from_array(NULL, 0, other, &r));
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  sl_sample_release(odd);
  sl_schema_release(other);
  for (int i = 0; i < 4; i++)
    sl_sample_release(items[i]);
  sl_reader_destroy(src);
}

/* A generator yielding 0..limit-1 then failing with an I/O error. */
typedef struct gen {
  sl_schema *schema;
  int64_t i, limit;
  int fail_code;
  int resets, freed;
} gen;

static int gen_next(void *ud, sl_sample **out) {
  gen *g = ud;
  if (g->i == g->limit) {
    if (g->fail_code)
      return sl_set_error(g->fail_code, "gen: read failed at record %lld",
                          (long long)g->i);
    return SL_EOF;
  }
  sl_sample *s = sl_sample_new(g->schema);
  void *p;
  ASSERT_OK(sl_sample_alloc(s, 0, 0, NULL, &p));
  *(int64_t *)p = g->i++;
  *out = s;
  return SL_OK;
}

static int gen_reset(void *ud) {
  gen *g = ud;
  g->i = 0;
  g->resets++;
  return SL_OK;
}

static void gen_free(void *ud) {
  ((gen *)ud)->freed++;
}

static sl_schema *i64_schema(void) {
  sl_schema *s = sl_schema_new();
  sl_schema_add(s, "i", SL_I64, 0, NULL);
  return s;
}

TEST(errors_are_sticky_with_their_message_until_reset) {
  gen g = {i64_schema(), 0, 2, SL_EIO, 0, 0};
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(g.schema, gen_next, gen_reset, gen_free,
                                     &g, &r));
  sl_sample *s;
  for (int i = 0; i < 2; i++) {
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "gen: read failed at record 2");
  sl_clear_error();
  ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
  ASSERT_STREQ(sl_last_error(), "gen: read failed at record 2");
  ASSERT_RC(sl_reader_has_next(r), SL_EIO);
  ASSERT_EQ(g.i, 2); /* the generator was not called again */
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_EQ(g.resets, 1);
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(value(s), 0);
  sl_sample_release(s);
  sl_reader_destroy(r);
  ASSERT_EQ(g.freed, 1);
  sl_schema_release(g.schema);
}

TEST(generator_without_reset_is_unsupported_on_reset) {
  gen g = {i64_schema(), 0, 1, 0, 0, 0};
  sl_reader *r;
  ASSERT_OK(
      sl_reader_from_generator(g.schema, gen_next, NULL, gen_free, &g, &r));
  ASSERT_RC(sl_reader_reset(r), SL_EUNSUPPORTED);
  ASSERT_STREQ(sl_last_error(), "generator: no reset callback was given");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EUNSUPPORTED); /* sticky */
  sl_reader_destroy(r);
  ASSERT_EQ(g.freed, 1);
  /* Bad arguments still free the user data. */
  ASSERT_RC(sl_reader_from_generator(NULL, gen_next, NULL, gen_free, &g, &r),
            SL_EINVAL);
  ASSERT_EQ(g.freed, 2);
  sl_schema_release(g.schema);
}

static int bad_shape_next(void *ud, sl_sample **out) {
  sl_schema *s = sl_schema_new();
  int64_t shape[1] = {2};
  sl_schema_add(s, "i", SL_I64, 1, shape);
  *out = sl_sample_new(s);
  sl_schema_release(s);
  (void)ud;
  return SL_OK;
}

TEST(generator_output_is_checked_against_its_schema) {
  sl_schema *schema = i64_schema();
  sl_reader *r;
  ASSERT_OK(
      sl_reader_from_generator(schema, bad_shape_next, NULL, NULL, NULL, &r));
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
  ASSERT_STREQ(sl_last_error(), "generator: sample schema {i: i64[2]} does "
                                "not match declared {i: i64[]}");
  sl_reader_destroy(r);
  sl_schema_release(schema);
}

/* A reader written outside the library, through the vtable. */
typedef struct countdown {
  int n, start;
  sl_schema *schema;
  int *destroyed;
} countdown;

static int cd_next(void *st, sl_sample **out) {
  countdown *c = st;
  if (c->n == 0) return SL_EOF;
  sl_sample *s = sl_sample_new(c->schema);
  void *p;
  sl_sample_alloc(s, 0, 0, NULL, &p);
  *(int64_t *)p = c->n--;
  *out = s;
  return SL_OK;
}

static int cd_reset(void *st) {
  countdown *c = st;
  c->n = c->start;
  return SL_OK;
}

static void cd_destroy(void *st) {
  countdown *c = st;
  (*c->destroyed)++;
  sl_schema_release(c->schema);
  free(c);
}

static const sl_reader_vtable cd_vt = {"countdown", cd_next, cd_reset,
                                       cd_destroy};

TEST(external_reader_through_vtable) {
  int destroyed = 0;
  countdown *c = malloc(sizeof *c);
  *c = (countdown){3, 3, i64_schema(), &destroyed};
  sl_reader *r = sl_reader_new(&cd_vt, c, c->schema);
  ASSERT_NOT_NULL(r);
  ASSERT_STREQ(sl_reader_name(r), "countdown");
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t want = 3; want >= 1; want--) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_EQ(value(s), want);
      sl_sample_release(s);
    }
    sl_sample *s;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  ASSERT_EQ(destroyed, 1);
  /* A failing sl_reader_new still destroys the state it was given. */
  c = malloc(sizeof *c);
  *c = (countdown){1, 1, i64_schema(), &destroyed};
  sl_schema *keep = sl_schema_retain(c->schema);
  ASSERT_NULL(sl_reader_new(&cd_vt, c, NULL));
  ASSERT_EQ(sl_last_error_code(), SL_EINVAL);
  ASSERT_EQ(destroyed, 2);
  sl_schema_release(keep);
}

static int ok_without_sample(void *st, sl_sample **out) {
  (void)st, (void)out;
  return SL_OK;
}
static const sl_reader_vtable broken_vt = {"broken", ok_without_sample, NULL,
                                           NULL};

TEST(misbehaving_reader_is_reported_not_crashed) {
  sl_schema *s = i64_schema();
  sl_reader *r = sl_reader_new(&broken_vt, NULL, s);
  sl_sample *out;
  ASSERT_RC(sl_reader_next(r, &out), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "broken: next returned SL_OK without a sample");
  ASSERT_RC(sl_reader_reset(r), SL_EUNSUPPORTED);
  ASSERT_STREQ(sl_last_error(), "broken: this reader cannot be reset");
  sl_reader_destroy(r);
  sl_schema_release(s);
}

/* --- lengths (sl_reader_length) --------------------------------------------
 */

TEST(length_of_range_and_array_sources) {
  sl_reader *r = test_range_reader(7);
  ASSERT_EQ(test_length_checked(r), 7);
  ASSERT_EQ(test_length_checked(r), 7); /* every pass */
  sl_reader_destroy(r);
  r = test_range_reader(0);
  ASSERT_EQ(test_length_checked(r), 0);
  sl_reader_destroy(r);
  sl_schema *schema = i64_schema();
  sl_sample *items[3];
  for (int i = 0; i < 3; i++)
    ASSERT_OK(test_i64_sample(schema, i, &items[i]));
  ASSERT_OK(sl_reader_from_array(items, 3, NULL, &r));
  ASSERT_EQ(test_length_checked(r), 3);
  sl_reader_destroy(r);
  ASSERT_OK(sl_reader_from_array(NULL, 0, schema, &r));
  ASSERT_EQ(test_length_checked(r), 0);
  sl_reader_destroy(r);
  for (int i = 0; i < 3; i++)
    sl_sample_release(items[i]);
  sl_schema_release(schema);
}

TEST(length_is_unsupported_for_generators_and_external_readers) {
  gen g = {i64_schema(), 0, 3, 0, 0, 0};
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(g.schema, gen_next, gen_reset, gen_free,
                                     &g, &r));
  uint64_t n = 99;
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  ASSERT_EQ(n, 0);
  ASSERT_STREQ(sl_last_error(), "generator: the number of samples a pass "
                                "yields is not known before reading it");
  sl_reader_destroy(r);
  sl_schema_release(g.schema);
  int destroyed = 0;
  countdown *c = malloc(sizeof *c);
  *c = (countdown){3, 3, i64_schema(), &destroyed};
  r = sl_reader_new(&cd_vt, c, c->schema);
  ASSERT_NOT_NULL(r);
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "countdown: ");
  ASSERT_RC(sl_reader_length(r, NULL), SL_EINVAL);
  ASSERT_RC(sl_reader_length(NULL, &n), SL_EINVAL);
  sl_reader_destroy(r);
}

TEST(length_of_slr_files_is_their_record_range) {
  const char *path = test_tmppath("length_slr", "ids.slr");
  test_write_ids_slr(path, 0, 10, 3); /* chunks of 3, 3, 3, 1 */
  sl_reader *r;
  ASSERT_OK(sl_slr_reader(path, NULL, 0, UINT64_MAX, &r));
  ASSERT_EQ(test_length_checked(r), 10);
  sl_reader_destroy(r);
  ASSERT_OK(sl_slr_reader(path, NULL, 4, 5, &r));
  ASSERT_EQ(test_length_checked(r), 5);
  sl_reader_destroy(r);
  ASSERT_OK(sl_slr_reader(path, NULL, 8, 5, &r));
  ASSERT_EQ(test_length_checked(r), 2);
  sl_reader_destroy(r);
  ASSERT_OK(sl_slr_reader_chunks(path, NULL, 1, 3, &r));
  ASSERT_EQ(test_length_checked(r), 7);
  sl_reader_destroy(r);
  ASSERT_OK(sl_open(path, NULL, &r));
  ASSERT_EQ(test_length_checked(r), 10);
  sl_reader_destroy(r);
  /* Under skip_chunk a corrupt chunk would make a pass shorter. */
  sl_slr_open_opts o = {SL_CORRUPT_SKIP_CHUNK, 0, 0};
  ASSERT_OK(sl_slr_reader(path, &o, 0, UINT64_MAX, &r));
  uint64_t n;
  ASSERT_RC(sl_reader_length(r, &n), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "skip_chunk");
  ASSERT_CONTAINS(sl_last_error(), "ids.slr");
  sl_reader_destroy(r);
}

/* sl__reader_own: destroying the reader releases what it owns, once,
 * after the chain (an embedded pipeline's Lua state). */
static void count_release(void *p) {
  ++*(int *)p;
}

TEST(an_owned_resource_is_released_once_on_destroy) {
  sl_reader *r = NULL;
  ASSERT_OK(sl_reader_range(3, &r));
  int released = 0;
  sl__reader_own(r, count_release, &released);
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  ASSERT_EQ(released, 0);
  sl_reader_destroy(r);
  ASSERT_EQ(released, 1);
}
