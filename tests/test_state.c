/*
 * test_state.c - sl_reader_save / sl_reader_restore over the
 * format-independent stages (docs/RESUME.md): every cut point gives, after
 * a restore into a fresh chain, exactly the rest of the uninterrupted run;
 * foreign, corrupt and truncated states are refused with the chain left as
 * it was.
 */
#include "stages/state.h"
#include "test.h"
#include "test_util.h"

#include "core/crc32c.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* --- callbacks ----------------------------------------------------------- */

/* i -> i * 3 + 1 (a new sample: the map's output differs from its input). */
static int times3(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0);
  int rc = test_i64_sample(sl_sample_schema(in), v * 3 + 1, out);
  sl_sample_release(in);
  return rc;
}

/* i -> {j: i * 3 + 1} in the schema ud. */
static int times3_j(void *ud, sl_sample *in, sl_sample **out) {
  int64_t v = test_sample_i64(in, 0);
  int rc = test_i64_sample(ud, v * 3 + 1, out);
  sl_sample_release(in);
  return rc;
}

/* Keeps i where i % 3 != 0. */
static int not_thirds(void *ud, const sl_sample *s) {
  (void)ud;
  return test_sample_i64(s, 0) % 3 != 0;
}

/* --- the chains under test ----------------------------------------------- */

typedef enum {
  CH_RANGE,
  CH_MAP,
  CH_FILTER,
  CH_TAKE_SKIP,
  CH_CHAIN,
  CH_ZIP,
  CH_REPEAT,
  CH_SHUFFLE,
  CH_SHUFFLE_SMALL,
  CH_BATCH,
  CH_PREFETCH,
  CH_MULTI_PASS,
  CH_CACHE,
  CH_THREADED,
  CH_DEMO, /* shuffle > batch > prefetch over a filtered map */
  CH_DOUBLE_BUFFER,
  /* a repeat whose upstream's pass changes the order (a shuffle under a
   * 1:1 map, a filter, a batch), under a shuffle that holds samples from
   * before the repeat's reset: saved at the upstream's previous pass */
  CH_REPEAT_HELD_MAP,
  CH_REPEAT_HELD_FILTER,
  CH_REPEAT_HELD_BATCH,
  CH_REPEAT_HELD_SHUFFLE, /* the shuffle itself under the repeat */
  CH_REPEAT_HELD_CHAIN,   /* two shuffled readers one after the other */
  /* a pass of 20 under a window of 40: saves two passes back, where the
   * filter's log of this pass knows the same positions */
  CH_REPEAT_SPANNED_FILTER,
  CH_REPEAT_NESTED, /* a repeat under a repeat: refused, naming it */
} chain_kind;

#define OK(expr)                                                               \
  do {                                                                         \
    if ((expr) != SL_OK) return NULL;                                          \
  } while (0)

static sl_reader *build(void *ud) {
  chain_kind kind = (chain_kind)(intptr_t)ud;
  sl_reader *r = test_range_reader(100), *r2 = NULL;
  switch (kind) {
  case CH_RANGE:
    return r;
  case CH_MAP:
    OK(sl_map(r, times3, NULL, NULL, NULL, &r));
    return r;
  case CH_FILTER:
    OK(sl_filter(r, not_thirds, NULL, NULL, &r));
    return r;
  case CH_TAKE_SKIP:
    OK(sl_skip(r, 7, &r));
    OK(sl_take(r, 50, &r));
    return r;
  case CH_CHAIN: {
    sl_reader *v[3] = {r, test_range_reader(0), test_range_reader(30)};
    OK(sl_chain(v, 3, &r));
    return r;
  }
  case CH_ZIP: {
    static sl_schema *j_schema;
    if (!j_schema) {
      j_schema = sl_schema_new();
      OK(sl_schema_add(j_schema, "j", SL_I64, 0, NULL));
    }
    OK(sl_map(test_range_reader(100), times3_j, j_schema, NULL, j_schema, &r2));
    OK(sl_shuffle(r2, 5, 1, &r2));
    sl_reader *v[2] = {r, r2};
    OK(sl_zip(v, 2, 0, &r));
    return r;
  }
  case CH_REPEAT:
    OK(sl_shuffle(r, 10, 5, &r));
    OK(sl_repeat_first(r, 20, &r));
    return r;
  case CH_SHUFFLE:
    OK(sl_shuffle(r, 16, 42, &r));
    return r;
  case CH_SHUFFLE_SMALL:
    OK(sl_shuffle(r, 1000, 42, &r)); /* the window outgrows the data */
    return r;
  case CH_BATCH:
    OK(sl_batch(r, 8, NULL, &r)); /* 12 full batches and a partial one */
    return r;
  case CH_PREFETCH:
    OK(sl_prefetch(r, 4, &r));
    return r;
  case CH_MULTI_PASS:
    OK(sl_shuffle(r, 8, 3, &r));
    OK(sl_multi_pass(r, 3, &r));
    return r;
  case CH_CACHE:
    OK(sl_shuffle(r, 8, 3, &r));
    OK(sl_cache(r, &r));
    OK(sl_shuffle(r, 8, 4, &r));
    return r;
  case CH_THREADED:
    OK(sl_threaded(r, &r));
    return r;
  case CH_DOUBLE_BUFFER: {
    sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
    o.device = "cpu";
    OK(sl_shuffle(r, 16, 2, &r));
    OK(sl_batch(r, 4, NULL, &r));
    OK(sl_double_buffer(r, &o, &r));
    return r;
  }
  case CH_REPEAT_HELD_MAP:
  case CH_REPEAT_HELD_FILTER:
  case CH_REPEAT_HELD_BATCH:
    OK(sl_shuffle(r, 8, 3, &r));
    if (kind == CH_REPEAT_HELD_MAP)
      OK(sl_map(r, times3, NULL, NULL, NULL, &r));
    else if (kind == CH_REPEAT_HELD_FILTER)
      OK(sl_filter(r, not_thirds, NULL, NULL, &r));
    else
      OK(sl_batch(r, 4, NULL, &r));
    OK(sl_multi_pass(r, 3, &r));
    OK(sl_shuffle(r, 24, 11, &r));
    return r;
  case CH_REPEAT_HELD_SHUFFLE:
    OK(sl_shuffle(r, 8, 3, &r));
    OK(sl_multi_pass(r, 3, &r));
    OK(sl_shuffle(r, 24, 11, &r));
    return r;
  case CH_REPEAT_HELD_CHAIN: {
    sl_reader *v[2] = {r, test_range_reader(30)};
    OK(sl_shuffle(v[0], 8, 3, &v[0]));
    OK(sl_shuffle(v[1], 4, 5, &v[1]));
    OK(sl_chain(v, 2, &r));
    OK(sl_multi_pass(r, 3, &r));
    OK(sl_shuffle(r, 24, 11, &r));
    return r;
  }
  case CH_REPEAT_SPANNED_FILTER:
    sl_reader_destroy(r);
    r = test_range_reader(30);
    OK(sl_shuffle(r, 8, 3, &r));
    OK(sl_filter(r, not_thirds, NULL, NULL, &r));
    OK(sl_multi_pass(r, 3, &r));
    OK(sl_shuffle(r, 40, 11, &r));
    return r;
  case CH_REPEAT_NESTED:
    OK(sl_shuffle(r, 8, 3, &r));
    OK(sl_multi_pass(r, 2, &r));
    OK(sl_multi_pass(r, 2, &r));
    OK(sl_shuffle(r, 24, 11, &r));
    return r;
  case CH_DEMO:
    OK(sl_map(r, times3, NULL, NULL, NULL, &r));
    OK(sl_filter(r, not_thirds, NULL, NULL, &r));
    OK(sl_shuffle(r, 20, 9, &r));
    OK(sl_batch(r, 6, NULL, &r));
    OK(sl_prefetch(r, 2, &r));
    return r;
  }
  return NULL;
}

static const uint64_t k_cuts[] = {0, 1, 5, 17, 50, 99, 100, 101, 150, 233, 299};

static void check_kind(chain_kind kind) {
  test_resume_check(build, (void *)(intptr_t)kind, 3, k_cuts,
                    sizeof k_cuts / sizeof *k_cuts, 4096);
}

/* Cuts in every pass of the repeat (and past its passes' ends) over the
 * span the shuffle above holds. */
static void check_held_kind(chain_kind kind, uint64_t up_pass) {
  uint64_t cuts[64];
  size_t n = test_cuts_after_ends(cuts, 63, up_pass, 3, 24, 3);
  cuts[n++] = 5;
  test_resume_check(build, (void *)(intptr_t)kind, 2, cuts, n, 4096);
}

TEST(range_resumes_exactly) {
  check_kind(CH_RANGE);
}
TEST(map_resumes_exactly) {
  check_kind(CH_MAP);
}
TEST(filter_resumes_exactly) {
  check_kind(CH_FILTER);
}
TEST(take_and_skip_resume_exactly) {
  check_kind(CH_TAKE_SKIP);
}
TEST(chain_resumes_exactly) {
  check_kind(CH_CHAIN);
}
TEST(zip_resumes_exactly) {
  check_kind(CH_ZIP);
}
TEST(repeat_first_resumes_exactly) {
  check_kind(CH_REPEAT);
}
TEST(shuffle_resumes_exactly) {
  check_kind(CH_SHUFFLE);
}
TEST(shuffle_larger_than_its_data_resumes_exactly) {
  check_kind(CH_SHUFFLE_SMALL);
}
TEST(batch_resumes_exactly) {
  check_kind(CH_BATCH);
}
TEST(prefetch_resumes_exactly) {
  check_kind(CH_PREFETCH);
}
TEST(multi_pass_resumes_exactly) {
  check_kind(CH_MULTI_PASS);
}
TEST(cache_resumes_exactly) {
  check_kind(CH_CACHE);
}
TEST(threaded_resumes_exactly) {
  check_kind(CH_THREADED);
}
TEST(a_demo_like_chain_resumes_exactly) {
  check_kind(CH_DEMO);
}
TEST(double_buffer_resumes_exactly) {
  check_kind(CH_DOUBLE_BUFFER);
}

/* A stage below a repeat saved at its previous pass (the repeat reset it,
 * the shuffle above still holds samples from before) saves its own
 * upstream at that pass too: the restore reads the order of that pass. */
TEST(a_map_under_a_repeat_saved_at_its_previous_pass_resumes_exactly) {
  check_held_kind(CH_REPEAT_HELD_MAP, 100);
}
TEST(a_filter_under_a_repeat_saved_at_its_previous_pass_resumes_exactly) {
  check_held_kind(CH_REPEAT_HELD_FILTER, 66);
}
TEST(a_batch_under_a_repeat_saved_at_its_previous_pass_resumes_exactly) {
  check_held_kind(CH_REPEAT_HELD_BATCH, 25);
}
TEST(a_shuffle_under_a_repeat_saved_at_its_previous_pass_resumes_exactly) {
  check_held_kind(CH_REPEAT_HELD_SHUFFLE, 100);
}
TEST(a_chain_under_a_repeat_saved_at_its_previous_pass_resumes_exactly) {
  check_held_kind(CH_REPEAT_HELD_CHAIN, 130);
}
TEST(a_filter_saved_two_passes_back_resumes_exactly) {
  uint64_t cuts[61];
  for (uint64_t i = 0; i <= 60; i++)
    cuts[i] = i;
  test_resume_check(build, (void *)(intptr_t)CH_REPEAT_SPANNED_FILTER, 2,
                    cuts, 61, 4096);
}

/* A stage that keeps only this pass's placement (a repeat's own ends)
 * asked for its pass before refuses the save, naming itself, rather than
 * saving a wrong position; a save where it is not asked works. */
TEST(a_repeat_asked_for_its_pass_before_refuses_naming_itself) {
  sl_reader *r = build((void *)(intptr_t)CH_REPEAT_NESTED);
  void *st = NULL;
  size_t len = 0;
  int refused = 0, saved = 0;
  for (int i = 0; i < 400; i++) {
    sl_sample *s = NULL;
    int rc = sl_reader_next(r, &s);
    if (rc == SL_EOF) break;
    ASSERT_OK(rc);
    sl_sample_release(s);
    rc = sl_reader_save(r, &st, &len);
    if (rc == SL_OK) {
      saved++;
      sl_free(st);
      continue;
    }
    ASSERT_RC(rc, SL_EUNSUPPORTED);
    ASSERT_CONTAINS(sl_last_error(), "multi_pass: the position is in its pass");
    refused++;
  }
  ASSERT_TRUE(refused > 0);
  ASSERT_TRUE(saved > 0);
  sl_reader_destroy(r);
}

/* A filter saved far behind its log (a shuffle above holds old samples)
 * replays its pass: still exact. */
static sl_reader *build_filter_under_big_shuffle(void *ud) {
  (void)ud;
  sl_reader *r = test_range_reader(5000);
  OK(sl_filter(r, not_thirds, NULL, NULL, &r));
  OK(sl_shuffle(r, 2000, 1, &r));
  return r;
}

TEST(filter_far_behind_replays_exactly) {
  const uint64_t cuts[] = {10, 3000, 4000};
  test_resume_check(build_filter_under_big_shuffle, NULL, 2, cuts, 3, 4096);
}

/* --- saving behind what was handed out ----------------------------------- */

/* sl__reader_save_back(r, 1) after n outputs is the position before the
 * n-th: a fresh chain restored to it yields that output, then the rest of
 * the pass, as the saved chain does (issue 24 item 3: the Python binding's
 * batch of an interrupted next). */
static void check_save_back(chain_kind kind, int n) {
  sl_reader *a = build((void *)(intptr_t)kind);
  ASSERT_TRUE(a != NULL);
  int64_t last = -1;
  for (int i = 0; i < n; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(a, &s));
    last = test_sample_i64(s, 0);
    sl_sample_release(s);
  }
  void *st = NULL;
  size_t len = 0;
  ASSERT_OK(sl__reader_save_back(a, 1, &st, &len));
  sl_reader *b = build((void *)(intptr_t)kind);
  ASSERT_OK(sl_reader_restore(b, st, len));
  sl_free(st);
  sl_sample *s;
  ASSERT_OK(sl_reader_next(b, &s));
  ASSERT_EQ(test_sample_i64(s, 0), last);
  sl_sample_release(s);
  for (;;) {
    sl_sample *x, *y;
    int ra = sl_reader_next(a, &x), rb = sl_reader_next(b, &y);
    ASSERT_EQ(ra, rb);
    if (ra != SL_OK) break;
    ASSERT_EQ(test_sample_i64(x, 0), test_sample_i64(y, 0));
    sl_sample_release(x);
    sl_sample_release(y);
  }
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}

TEST(save_back_one_is_the_position_before_the_last_output) {
  static const chain_kind kinds[] = {
      CH_RANGE, CH_MAP,      CH_FILTER, CH_CHAIN,    CH_SHUFFLE,
      CH_BATCH, CH_PREFETCH, CH_CACHE,  CH_THREADED, CH_DEMO};
  static const int cuts[] = {1, 2, 9};
  for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++)
    for (size_t c = 0; c < sizeof cuts / sizeof *cuts; c++)
      check_save_back(kinds[k], cuts[c]);
}

TEST(save_back_further_than_handed_out_is_refused) {
  sl_reader *r = build((void *)(intptr_t)CH_SHUFFLE);
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  void *st = (void *)1;
  size_t len = 1;
  ASSERT_EQ(sl__reader_save_back(r, 2, &st, &len), SL_EINVAL);
  ASSERT_TRUE(st == NULL && len == 0);
  ASSERT_TRUE(strstr(sl_last_error(), "cannot save 2 output(s) back") != NULL);
  ASSERT_OK(sl__reader_save_back(r, 1, &st, &len)); /* the pass's start */
  sl_free(st);
  sl_reader_destroy(r);
}

/* --- refusals
 * ----------------------------------------------------------------- */

static void *save_after(sl_reader *r, int n, size_t *len) {
  for (int i = 0; i < n; i++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  void *st = NULL;
  ASSERT_OK(sl_reader_save(r, &st, len));
  ASSERT_TRUE(st != NULL);
  return st;
}

/* The chain is unchanged after a refused restore: it goes on from where it
 * was. */
static void assert_goes_on(sl_reader *r, int64_t want) {
  sl_sample *s;
  ASSERT_OK(sl_reader_next(r, &s));
  ASSERT_EQ(test_sample_i64(s, 0), want);
  sl_sample_release(s);
}

TEST(a_state_of_another_pipeline_is_refused_naming_the_stage) {
  sl_reader *a = test_range_reader(100);
  ASSERT_OK(sl_shuffle(a, 16, 42, &a));
  ASSERT_OK(sl_batch(a, 4, NULL, &a));
  size_t len;
  void *st = save_after(a, 3, &len);
  sl_reader_destroy(a);

  /* other options: the shuffle's buffer */
  sl_reader *b = test_range_reader(100);
  ASSERT_OK(sl_shuffle(b, 32, 42, &b));
  ASSERT_OK(sl_batch(b, 4, NULL, &b));
  ASSERT_RC(sl_reader_restore(b, st, len), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "stage 2 from the top (batch > shuffle)");
  ASSERT_CONTAINS(sl_last_error(), "buffer_size=32 seed=42");
  ASSERT_CONTAINS(sl_last_error(), "buffer_size=16 seed=42");
  sl_reader_destroy(b);

  /* another stage */
  sl_reader *c = test_range_reader(100);
  ASSERT_OK(sl_prefetch(c, 16, &c));
  ASSERT_OK(sl_batch(c, 4, NULL, &c));
  ASSERT_RC(sl_reader_restore(c, st, len), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "'prefetch' here but 'shuffle'");
  /* left as it was: the first batch starts at 0 */
  sl_sample *s;
  ASSERT_OK(sl_reader_next(c, &s));
  ASSERT_EQ(sl_sample_at_const(s, 0)->shape[0], 4);
  ASSERT_EQ(((const int64_t *)sl_sample_at_const(s, 0)->data)[0], 0);
  sl_sample_release(s);
  sl_reader_destroy(c);

  /* other data */
  sl_reader *d = test_range_reader(99);
  ASSERT_OK(sl_shuffle(d, 16, 42, &d));
  ASSERT_OK(sl_batch(d, 4, NULL, &d));
  ASSERT_RC(sl_reader_restore(d, st, len), SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "'n=99' here but 'n=100'");
  sl_reader_destroy(d);
  sl_free(st);
}

TEST(corrupt_and_truncated_states_are_refused) {
  sl_reader *a = test_range_reader(10);
  size_t len;
  unsigned char *st = save_after(a, 4, &len);
  /* every truncation */
  for (size_t n = 0; n < len; n++) {
    ASSERT_RC(sl_reader_restore(a, st, n), SL_ECORRUPT);
    ASSERT_TRUE(sl_last_error()[0] != '\0');
  }
  /* every flipped byte: refused (the checksum or the header) */
  for (size_t i = 0; i < len; i++) {
    st[i] ^= 0x40;
    int rc = sl_reader_restore(a, st, len);
    ASSERT_TRUE(rc == SL_ECORRUPT || rc == SL_EUNSUPPORTED);
    st[i] ^= 0x40;
  }
  /* left as it was after all that */
  assert_goes_on(a, 4);
  /* and the intact state still works */
  ASSERT_OK(sl_reader_restore(a, st, len));
  assert_goes_on(a, 4);
  assert_goes_on(a, 5);
  sl_free(st);
  sl_reader_destroy(a);
}

TEST(a_newer_format_version_is_refused) {
  sl_reader *a = test_range_reader(10);
  size_t len;
  unsigned char *st = save_after(a, 1, &len);
  st[8] = 2; /* the version; the checksum is checked after it */
  ASSERT_RC(sl_reader_restore(a, st, len), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "version 2");
  sl_free(st);
  sl_reader_destroy(a);
}

static int gen_next_fn(void *ud, sl_sample **out) {
  (void)ud;
  (void)out;
  return SL_EOF;
}

static int custom_next(void *st, sl_sample **out) {
  (void)st;
  (void)out;
  return SL_EOF;
}

TEST(a_stage_without_state_cannot_save_and_says_which) {
  static const sl_reader_vtable vt = {"my_reader", custom_next, NULL, NULL};
  sl_schema *sc = sl_schema_new();
  ASSERT_OK(sl_schema_add(sc, "i", SL_I64, 0, NULL));
  sl_reader *r = sl_reader_new(&vt, NULL, sc);
  ASSERT_OK(sl_batch(r, 2, NULL, &r));
  void *st = (void *)1;
  size_t len = 1;
  ASSERT_RC(sl_reader_save(r, &st, &len), SL_EUNSUPPORTED);
  ASSERT_CONTAINS(sl_last_error(), "'my_reader' cannot save");
  ASSERT_TRUE(st == NULL);
  ASSERT_EQ(len, 0);
  sl_reader_destroy(r);
  /* a generator can (by replay) */
  sl_reader *g;
  ASSERT_OK(sl_reader_from_generator(sc, gen_next_fn, NULL, NULL, NULL, &g));
  ASSERT_OK(sl_reader_save(g, &st, &len));
  sl_free(st);
  sl_reader_destroy(g);
  sl_schema_release(sc);
}

TEST(save_and_restore_reject_null_arguments) {
  void *st;
  size_t len;
  ASSERT_RC(sl_reader_save(NULL, &st, &len), SL_EINVAL);
  sl_reader *r = test_range_reader(3);
  ASSERT_RC(sl_reader_save(r, NULL, &len), SL_EINVAL);
  ASSERT_RC(sl_reader_save(r, &st, NULL), SL_EINVAL);
  ASSERT_RC(sl_reader_restore(r, NULL, 10), SL_EINVAL);
  ASSERT_RC(sl_reader_restore(NULL, "x", 1), SL_EINVAL);
  sl_free(NULL);
  sl_reader_destroy(r);
}

/* A state saved at the end of a pass restores to that end: the next call
 * is SL_EOF, and a reset starts the following pass, with that pass's
 * shuffle order. */
TEST(a_state_at_a_pass_end_restores_to_that_end) {
  sl_reader *a = test_range_reader(20);
  ASSERT_OK(sl_shuffle(a, 8, 1, &a));
  size_t len;
  void *st = save_after(a, 20, &len);
  sl_sample *s;
  ASSERT_RC(sl_reader_next(a, &s), SL_EOF);
  ASSERT_OK(sl_reader_reset(a));
  ASSERT_OK(sl_reader_next(a, &s));
  int64_t want = test_sample_i64(s, 0);
  sl_sample_release(s);
  sl_reader_destroy(a);

  sl_reader *b = test_range_reader(20);
  ASSERT_OK(sl_shuffle(b, 8, 1, &b));
  ASSERT_OK(sl_reader_restore(b, st, len));
  ASSERT_RC(sl_reader_next(b, &s), SL_EOF);
  ASSERT_OK(sl_reader_reset(b));
  assert_goes_on(b, want);
  sl_reader_destroy(b);
  sl_free(st);
}

/* Data that shrank since the save (a generator that now ends sooner): the
 * restore fails saying so, and the error is sticky until a reset. */
typedef struct counter {
  int64_t i, n;
  sl_schema *schema;
} counter;

static int count_next(void *ud, sl_sample **out) {
  counter *c = ud;
  if (c->i >= c->n) return SL_EOF;
  return test_i64_sample(c->schema, c->i++, out);
}

static int count_reset(void *ud) {
  ((counter *)ud)->i = 0;
  return SL_OK;
}

TEST(a_restore_over_shrunk_data_fails_clearly) {
  sl_schema *sc = sl_schema_new();
  ASSERT_OK(sl_schema_add(sc, "i", SL_I64, 0, NULL));
  counter big = {0, 100, sc}, small = {0, 40, sc};
  sl_reader *a;
  ASSERT_OK(
      sl_reader_from_generator(sc, count_next, count_reset, NULL, &big, &a));
  ASSERT_OK(sl_map(a, times3, NULL, NULL, NULL, &a));
  size_t len;
  void *st = save_after(a, 60, &len);
  sl_reader_destroy(a);
  sl_reader *b;
  ASSERT_OK(
      sl_reader_from_generator(sc, count_next, count_reset, NULL, &small, &b));
  ASSERT_OK(sl_map(b, times3, NULL, NULL, NULL, &b));
  ASSERT_RC(sl_reader_restore(b, st, len), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(),
                  "ended after 40 samples, the state needs 60");
  sl_sample *s;
  ASSERT_RC(sl_reader_next(b, &s), SL_ECORRUPT); /* sticky */
  ASSERT_OK(sl_reader_reset(b));
  assert_goes_on(b, 1);
  sl_reader_destroy(b);
  sl_free(st);
  sl_schema_release(sc);
}

/* --- tampered positions (issue 24 item 9) ---------------------------------
 * A state whose checksum is right but whose positions are not ones the
 * pipeline could have saved: each record's k is patched and the CRC32C
 * sealed again, as a hostile or buggy writer would. */

static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

static uint64_t rd64(const unsigned char *p) {
  return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

/* Sets k of record `rec` (0: the outermost, in file order) and reseals;
 * returns the k it had. */
static uint64_t patch_k(unsigned char *st, size_t len, int rec, uint64_t k) {
  uint64_t old = 0;
  size_t at = 24;
  for (int i = 0;; i++) {
    ASSERT_TRUE(at + 8 < len);
    at += 4 + rd32(st + at);     /* name */
    at += 4 + rd32(st + at);     /* identity */
    if (i == rec) {
      old = rd64(st + at + 8);
      for (int b = 0; b < 8; b++)
        st[at + 8 + b] = (unsigned char)(k >> (8 * b));
      break;
    }
    at += 8 + 8 + 4 + 8 + rd64(st + at + 20); /* pass, k, ups, payload */
  }
  uint32_t c = sl__crc32c(0, st, len - 4);
  for (int b = 0; b < 4; b++)
    st[len - 4 + b] = (unsigned char)(c >> (8 * b));
  return old;
}

/* The next sample of a and of b are the same (b was refused: unchanged). */
static void assert_same_next(sl_reader *a, sl_reader *b) {
  test_same_next(a, b, 1);
}

static sl_reader *shuffled(int over_generator, counter *c) {
  sl_reader *r;
  if (over_generator) { /* no length, no random access: the READ refill */
    c->i = 0;
    ASSERT_OK(sl_reader_from_generator(c->schema, count_next, count_reset,
                                       NULL, c, &r));
    ASSERT_OK(sl_map(r, times3, NULL, NULL, NULL, &r));
  } else { /* length known, random access: the FETCH refill */
    r = test_range_reader(100);
  }
  ASSERT_OK(sl_shuffle(r, 16, 42, &r));
  return r;
}

/* Before: k = 2^40 replayed the window's draws for minutes.  Now refused at
 * once, with the chain unchanged; an alarm fails the test if it hangs. */
TEST(a_huge_shuffle_position_is_refused_at_once) {
  sl_schema *sc = sl_schema_new();
  ASSERT_OK(sl_schema_add(sc, "i", SL_I64, 0, NULL));
  for (int gen = 0; gen < 2; gen++) {
    counter c1 = {0, 100, sc}, c2 = {0, 100, sc};
    sl_reader *a = shuffled(gen, &c1), *b = shuffled(gen, &c2);
    size_t len;
    unsigned char *st = save_after(a, 5, &len);
    sl_free(save_after(b, 5, &len));
    patch_k(st, len, 0, (uint64_t)1 << 40);
    alarm(20);
    double t0 = test_now_s();
    ASSERT_RC(sl_reader_restore(b, st, len), SL_ECORRUPT);
    alarm(0);
    ASSERT_TRUE(test_now_s() - t0 < 5);
    ASSERT_CONTAINS(sl_last_error(), "shuffle");
    ASSERT_CONTAINS(sl_last_error(), "1099511627776");
    assert_same_next(a, b);
    /* the upstream's position huge too (consistent with the shuffle's) */
    patch_k(st, len, 1, (uint64_t)1 << 40);
    alarm(20);
    ASSERT_TRUE(sl_reader_restore(b, st, len) == SL_ECORRUPT);
    alarm(0);
    sl_free(st);
    sl_reader_destroy(a);
    sl_reader_destroy(b);
  }
  sl_schema_release(sc);
}

/* Before: a smaller position that disagrees with the stage below it was
 * accepted and changed the pass (other samples, another count).  Now each
 * is refused, naming the stage, and the chain goes on as it was. */
TEST(an_inconsistent_position_between_stages_is_refused) {
  sl_schema *sc = sl_schema_new();
  ASSERT_OK(sl_schema_add(sc, "i", SL_I64, 0, NULL));
  for (int gen = 0; gen < 2; gen++) {
    /* rec 0 batch(4) at 5, rec 1 shuffle at 20, rec 2 its upstream */
    static const struct {
      int rec;
      uint64_t k;
      const char *names;
    } cases[] = {{0, 7, "batch"}, {1, 30, "batch"}, {1, 16, "batch"},
                 {2, 0, NULL}, {0, 26, "batch"}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
      counter c1 = {0, 100, sc}, c2 = {0, 100, sc};
      sl_reader *a = shuffled(gen, &c1), *b = shuffled(gen, &c2);
      ASSERT_OK(sl_batch(a, 4, NULL, &a));
      ASSERT_OK(sl_batch(b, 4, NULL, &b));
      size_t len;
      unsigned char *st = save_after(a, 5, &len);
      sl_free(save_after(b, 5, &len));
      if (cases[i].names) {
        patch_k(st, len, cases[i].rec, cases[i].k);
      } else { /* the shuffle's upstream one sample off */
        uint64_t old = patch_k(st, len, 2, 0);
        patch_k(st, len, 2, old ? old - 1 : 1);
      }
      ASSERT_RC(sl_reader_restore(b, st, len), SL_ECORRUPT);
      ASSERT_CONTAINS(sl_last_error(), "corrupt state");
      ASSERT_CONTAINS(sl_last_error(), cases[i].names  ? cases[i].names
                                       : gen ? "map"
                                             : "shuffle");
      assert_same_next(a, b);
      sl_free(st);
      sl_reader_destroy(a);
      sl_reader_destroy(b);
    }
  }
  sl_schema_release(sc);
}

/* --- the counting stages' bound (issue 25 item 1) ---------------------------
 * take and repeat_first share sl__state_check_at: a pass of n samples
 * restores at every position up to n, its end included, and refuses n + 1
 * naming the stage. */
TEST(state_check_at_bounds_a_position_by_the_pass) {
  ASSERT_OK(sl__state_check_at("take", 0, 0));
  ASSERT_OK(sl__state_check_at("take", 4, 4));
  ASSERT_RC(sl__state_check_at("take", 5, 4), SL_ECORRUPT);
  ASSERT_CONTAINS(sl_last_error(),
                  "restore: take: position 5 is past its 4 samples");
}

/* take(g, 4) (repeat = 0) or repeat_first(g, 4) over g, a generator of
 * 0..9 (no length: the base's check of a position against the length does
 * not run, the stage's own bound does). */
static sl_reader *counting(int repeat, counter *c) {
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(c->schema, count_next, count_reset, NULL,
                                     c, &r));
  ASSERT_OK(repeat ? sl_repeat_first(r, 4, &r) : sl_take(r, 4, &r));
  return r;
}

TEST(counting_stages_restore_at_their_end_and_refuse_past_it) {
  sl_schema *sc = sl_schema_new();
  ASSERT_OK(sl_schema_add(sc, "i", SL_I64, 0, NULL));
  for (int repeat = 0; repeat < 2; repeat++) {
    for (uint64_t k = 0; k <= 4; k++) {
      counter ca = {0, 10, sc}, cb = {0, 10, sc}, cc = {0, 10, sc};
      sl_reader *a = counting(repeat, &ca), *b = counting(repeat, &cb);
      size_t len;
      void *st = save_after(a, (int)k, &len);
      ASSERT_OK(sl_reader_restore(b, st, len));
      uint64_t left = 0;
      sl_sample *s;
      while (sl_reader_next(b, &s) == SL_OK) {
        ASSERT_EQ(test_sample_i64(s, 0), repeat ? 0 : (int64_t)(k + left));
        sl_sample_release(s);
        left++;
      }
      ASSERT_EQ(left, 4 - k);
      if (k == 4) { /* one past the end: both records moved on (take's
                       upstream is at its k) */
        patch_k(st, len, 0, 5);
        if (!repeat) patch_k(st, len, 1, 5);
        sl_reader *c = counting(repeat, &cc);
        ASSERT_RC(sl_reader_restore(c, st, len), SL_ECORRUPT);
        ASSERT_CONTAINS(sl_last_error(), repeat ? "repeat_first: position 5"
                                                : "take: position 5");
        ASSERT_CONTAINS(sl_last_error(), "past its 4 samples");
        sl_reader_destroy(c);
      }
      sl_free(st);
      sl_reader_destroy(a);
      sl_reader_destroy(b);
    }
  }
  sl_schema_release(sc);
}
