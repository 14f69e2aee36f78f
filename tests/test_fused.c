/* test_fused.c - map and batch fused (src/stages/rows.h): a C parallel map
 * right below a batch writes its outputs into the batch's rows.  Fused or
 * not (sl_batch_opts.no_fuse), the batches are the same bit for bit for 1,
 * 2 and 4 threads, an error ends the same batch with the same message, the
 * resume contract holds, and the statistics count the fused rows; so with
 * ignore_errors (the rows after a skip move up); unordered, every sample
 * comes once.  In the TSan suite (make tsan). */
#include "test.h"
#include "test_util.h"

/* v -> {v: i64, sq: f32[5] = v, v^2, ..., -v} (a new sample); fails at the
 * value *ud when ud is not NULL. */
static sl_schema *g_out;
/* The values that fail: one value, or (with `mod`) every value v with
 * v % mod == rem and every v in [lo, hi]. */
typedef struct fails {
  int64_t at, mod, rem, lo, hi;
} fails;
static bool fails_at(const fails *f, int64_t v) {
  return f && (f->mod ? v % f->mod == f->rem || (v >= f->lo && v <= f->hi)
                      : v == f->at);
}
static int widen(void *ud, sl_sample *in, sl_sample **out) {
  int64_t v = test_sample_i64(in, 0);
  sl_sample_release(in);
  if (fails_at(ud, v))
    return sl_set_error(SL_ECORRUPT, "widen: cannot widen %lld", (long long)v);
  sl_sample *s = sl_sample_new(g_out);
  sl_tensor a, b;
  int64_t five = 5;
  if (!s || sl_tensor_alloc(&a, SL_I64, 0, NULL) < 0 ||
      sl_tensor_alloc(&b, SL_F32, 1, &five) < 0)
    return sl_set_error(SL_ENOMEM, "widen");
  *(int64_t *)a.data = v;
  float *f = b.data;
  for (int k = 0; k < 5; k++)
    f[k] = (float)(k == 4 ? -v : v * (k + 1));
  if (sl_sample_set_move(s, 0, &a) < 0 || sl_sample_set_move(s, 1, &b) < 0) {
    sl_sample_release(s);
    return sl_set_error(SL_ENOMEM, "widen");
  }
  *out = s;
  return SL_OK;
}

static void make_schema(void) {
  if (g_out) return;
  int64_t five = 5;
  g_out = sl_schema_new();
  ASSERT_OK(sl_schema_add(g_out, "v", SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_add(g_out, "sq", SL_F32, 1, &five));
}

typedef struct chain {
  int64_t n;
  uint32_t threads;
  size_t size;
  int no_fuse, unordered, drop_last;
  const fails *fail_at;
  uint64_t ignore_errors;
} chain;

static sl_reader *build(void *ud) {
  const chain *c = ud;
  make_schema();
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  o.threads = c->threads;
  o.unordered = c->unordered;
  o.ignore_errors = c->ignore_errors;
  sl_reader *m, *b;
  ASSERT_OK(sl_map_parallel(test_range_reader(c->n), widen,
                            (void *)c->fail_at, NULL, g_out, &o, &m));
  sl_batch_opts bo = {.drop_last = c->drop_last, .no_fuse = c->no_fuse};
  ASSERT_OK(sl_batch(m, c->size, &bo, &b));
  return b;
}

static uint64_t fused_rows(sl_reader *r) {
  sl_stage_stats st[8];
  size_t n = 0;
  ASSERT_OK(sl_reader_stats(r, st, 8, &n));
  uint64_t f = 0;
  for (size_t i = 0; i < n && i < 8; i++)
    f += st[i].samples_fused;
  return f;
}

/* Skips in most batches (v % 7 == 3) and a run of 8 (a half batch). */
static const fails g_some = {.mod = 7, .rem = 3, .lo = 40, .hi = 47};

/* Reads two passes of chain a fused and unfused side by side: the same
 * codes and batches bit for bit, the same rows in all; returns the rows
 * the fused one wrote straight into its batches (in place). */
static uint64_t same_as_unfused(chain a, int64_t want_rows) {
  chain b = a;
  b.no_fuse = 1;
  sl_reader *ra = build(&a), *rb = build(&b);
  for (int pass = 0; pass < 2; pass++) {
    int64_t rows = 0;
    for (;;) {
      sl_sample *x = NULL, *y = NULL;
      int rx = sl_reader_next(ra, &x), ry = sl_reader_next(rb, &y);
      ASSERT_EQ(rx, ry);
      if (rx != SL_OK) break;
      ASSERT_EQ(test_sample_digest(x), test_sample_digest(y));
      rows += sl_sample_at(x, 0)->shape[0];
      sl_sample_release(x);
      sl_sample_release(y);
    }
    ASSERT_EQ(rows, want_rows);
    if (pass == 1) break; /* no third pass running while the rows are counted */
    ASSERT_OK(sl_reader_reset(ra));
    ASSERT_OK(sl_reader_reset(rb));
  }
  uint64_t fused = fused_rows(ra);
  ASSERT_EQ(fused_rows(rb), 0);
  sl_reader_destroy(ra);
  sl_reader_destroy(rb);
  return fused;
}

TEST(fused_batches_equal_unfused_bit_for_bit) {
  for (uint32_t t = 1; t <= 4; t *= 2)
    for (int drop = 0; drop <= 1; drop++) {
      chain a = {1001, t, 16, 0, 0, drop, NULL, 0};
      ASSERT_TRUE(same_as_unfused(a, drop ? 1001 / 16 * 16 : 1001) > 0);
    }
}

TEST(an_error_ends_the_same_batch_with_the_same_message) {
  static const fails bad = {.at = 77}; /* batch 4 of 16 */
  for (uint32_t t = 1; t <= 4; t *= 2) {
    char msg[2][512];
    for (int fuse = 0; fuse <= 1; fuse++) {
      chain c = {300, t, 16, !fuse, 0, 0, &bad, 0};
      sl_reader *r = build(&c);
      int batches = 0, rc;
      sl_sample *s;
      while ((rc = sl_reader_next(r, &s)) == SL_OK) {
        sl_sample_release(s);
        batches++;
      }
      ASSERT_RC(rc, SL_ECORRUPT);
      ASSERT_EQ(batches, 4);
      snprintf(msg[fuse], sizeof msg[fuse], "%s", sl_last_error());
      ASSERT_CONTAINS(msg[fuse], "widen: cannot widen 77");
      sl_reader_destroy(r);
    }
    ASSERT_STREQ(msg[0], msg[1]);
  }
}

TEST(the_resume_contract_holds_fused) {
  static const uint64_t cuts[] = {0, 1, 3, 62, 63, 64, 100};
  for (uint32_t t = 1; t <= 4; t *= 2) {
    chain c = {1001, t, 16, 0, 0, 0, NULL, 0};
    test_resume_check(build, &c, 2, cuts, sizeof cuts / sizeof *cuts, 0);
  }
}

/* r's state, saved (r destroyed), restored into a new chain b. */
static sl_reader *moved(sl_reader *r, chain *b) {
  void *state;
  size_t len;
  ASSERT_OK(sl_reader_save(r, &state, &len));
  sl_reader_destroy(r);
  r = build(b);
  ASSERT_OK(sl_reader_restore(r, state, len));
  sl_free(state);
  return r;
}

/* A state saved after 17 batches of 10 fused restores unfused, and one
 * saved unfused restores fused: the rest of the pass as a whole run gives
 * it (`batches` in all), then SL_EOF. */
static void restores_across_the_fusion(const fails *f, uint64_t ignore,
                                       int batches) {
  for (int from = 0; from <= 1; from++) {
    chain a = {500, 2, 10, from, 0, 0, f, ignore}, b = a;
    b.no_fuse = !from;
    sl_reader *whole = build(&b);
    sl_sample *s;
    uint64_t want[64];
    int n = 0;
    while (n < 64 && sl_reader_next(whole, &s) == SL_OK) {
      want[n++] = test_sample_digest(s);
      sl_sample_release(s);
    }
    sl_reader_destroy(whole);
    ASSERT_EQ(n, batches);
    sl_reader *r = build(&a);
    for (int k = 0; k < 17; k++) {
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    r = moved(r, &b);
    for (int k = 17; k < n; k++) {
      ASSERT_OK(sl_reader_next(r, &s));
      ASSERT_EQ(test_sample_digest(s), want[k]);
      sl_sample_release(s);
    }
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    sl_reader_destroy(r);
  }
}

TEST(a_state_saved_fused_restores_unfused_and_back) {
  restores_across_the_fusion(NULL, 0, 50);
}

TEST(an_ignore_errors_map_is_fused_and_equals_unfused) {
  int64_t bad = 0;
  for (int64_t v = 0; v < 1001; v++)
    bad += fails_at(&g_some, v);
  for (uint32_t t = 1; t <= 4; t *= 2)
    for (int drop = 0; drop <= 1; drop++) {
      chain a = {1001, t, 16, 0, 0, drop, &g_some, SL_IGNORE_ALL};
      int64_t rows = drop ? (1001 - bad) / 16 * 16 : 1001 - bad;
      ASSERT_TRUE(same_as_unfused(a, rows) > 0);
    }
  /* every sample fails: no batch, fused or not */
  static const fails all = {.mod = 1};
  chain none = {100, 2, 16, 0, 0, 0, &all, SL_IGNORE_ALL};
  ASSERT_EQ(same_as_unfused(none, 0), 0);
}

/* A skip seen moves the later items' places up: only the rows placed
 * before it was seen (about the items in flight: window + caches; twice
 * that allowed, for the timing of a slow build) are moved by the consumer;
 * the statistics count the rows that stayed.  Without the move up, all
 * but the first 100 rows of a pass would be moved. */
TEST(a_skip_moves_only_the_rows_in_flight) {
  static const fails one = {.at = 100};
  for (uint32_t t = 1; t <= 4; t *= 2) {
    chain a = {20000, t, 16, 0, 0, 0, &one, SL_IGNORE_ALL};
    uint64_t fused = same_as_unfused(a, 19999);
    uint64_t inflight = 2 * 2 * ((32 * t > 128 ? 32 * t : 128) + 16 + 16);
    ASSERT_TRUE(fused >= 2 * 19999 - inflight);
    ASSERT_TRUE(fused <= 2 * 19999);
  }
}

TEST(an_ignore_errors_map_past_its_cap_fails_the_same_batch_fused) {
  for (uint32_t t = 1; t <= 4; t *= 2) {
    char msg[2][512];
    int batches[2];
    for (int fuse = 0; fuse <= 1; fuse++) {
      /* the 6th failure (v = 38, after 33 rows) ends the pass in batch 2 */
      chain c = {300, t, 16, !fuse, 0, 0, &g_some, 5};
      sl_reader *r = build(&c);
      int rc;
      sl_sample *s;
      batches[fuse] = 0;
      while ((rc = sl_reader_next(r, &s)) == SL_OK) {
        sl_sample_release(s);
        batches[fuse]++;
      }
      ASSERT_TRUE(rc < 0);
      snprintf(msg[fuse], sizeof msg[fuse], "%s", sl_last_error());
      ASSERT_CONTAINS(msg[fuse], "cannot widen 38");
      sl_reader_destroy(r);
    }
    ASSERT_EQ(batches[0], batches[1]);
    ASSERT_EQ(batches[1], 2);
    ASSERT_STREQ(msg[0], msg[1]);
  }
}

TEST(the_resume_contract_holds_fused_with_skips) {
  static const uint64_t cuts[] = {0, 1, 2, 3, 5, 20, 40};
  for (uint32_t t = 1; t <= 4; t *= 2) {
    chain c = {1001, t, 16, 0, 0, 0, &g_some, SL_IGNORE_ALL};
    test_resume_check(build, &c, 2, cuts, sizeof cuts / sizeof *cuts, 0);
  }
}

TEST(a_state_with_skips_saved_fused_restores_unfused_and_back) {
  restores_across_the_fusion(&g_some, SL_IGNORE_ALL, 43); /* 422 rows: 500
                                                             less 78 */
}

/* Reads up to `max` batches of r (all: -1): every row is whole (sq is v,
 * 2v, 3v, 4v, -v) and seen[v] counts its v.  Returns the batches read
 * (the pass must end at SL_EOF when max < 0). */
static int read_rows(sl_reader *r, int max, int *seen, int64_t n) {
  int batches = 0;
  sl_sample *s;
  while (max < 0 || batches < max) {
    int rc = sl_reader_next(r, &s);
    if (rc == SL_EOF && max < 0) break;
    ASSERT_OK(rc);
    const sl_tensor *v = sl_sample_at_const(s, 0), *q = sl_sample_at_const(s, 1);
    for (int64_t j = 0; j < v->shape[0]; j++) {
      int64_t x = ((const int64_t *)v->data)[j];
      const float *f = (const float *)q->data + 5 * j;
      ASSERT_TRUE(x >= 0 && x < n);
      for (int k = 0; k < 5; k++)
        ASSERT_TRUE(f[k] == (float)(k == 4 ? -x : x * (k + 1)));
      seen[x]++;
    }
    sl_sample_release(s);
    batches++;
  }
  return batches;
}

/* Unordered, the map hands its rows on in the order it finished them
 * (tickets, rows.h): every sample comes once (none, skipped), every row
 * whole; on one thread that is the upstream order. */
TEST(an_unordered_map_is_fused_and_gives_every_sample_once) {
  enum { N = 2000 };
  static int seen[N];
  for (uint32_t t = 1; t <= 4; t *= 2)
    for (int skips = 0; skips <= 1; skips++) {
      chain c = {N, t, 16, 0, 1, 0, skips ? &g_some : NULL,
                 skips ? SL_IGNORE_ALL : 0};
      sl_reader *r = build(&c);
      for (int pass = 0; pass < 2; pass++) {
        memset(seen, 0, sizeof seen);
        read_rows(r, -1, seen, N);
        for (int64_t v = 0; v < N; v++)
          ASSERT_EQ(seen[v], skips && fails_at(&g_some, v) ? 0 : 1);
        if (pass == 0) ASSERT_OK(sl_reader_reset(r));
      }
      ASSERT_TRUE(fused_rows(r) > 0);
      sl_reader_destroy(r);
    }
  for (int skips = 0; skips <= 1; skips++) {
    chain a = {N, 1, 16, 0, 1, 0, skips ? &g_some : NULL,
               skips ? SL_IGNORE_ALL : 0};
    int64_t rows = N;
    for (int64_t v = 0; skips && v < N; v++)
      rows -= fails_at(&g_some, v);
    ASSERT_TRUE(same_as_unfused(a, rows) > 0); /* b: ordered, unfused */
  }
}

/* A pass cut anywhere and restored (fused, or unfused and back) gives every
 * sample once, with and without skips. */
TEST(an_unordered_fused_map_resumes_exactly_once) {
  enum { N = 700 };
  static int seen[N];
  static const int cuts[] = {0, 1, 2, 5, 17};
  for (uint32_t t = 1; t <= 4; t *= 2)
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++)
      for (int mode = 0; mode < 3; mode++) {
        /* 0: fused both ways; 1: saved fused, restored unfused; 2: back */
        chain a = {N, t, 10, mode == 2, 1, 0, mode ? &g_some : NULL,
                   mode ? SL_IGNORE_ALL : 0};
        chain b = a;
        b.no_fuse = mode == 1;
        memset(seen, 0, sizeof seen);
        sl_reader *r = build(&a);
        ASSERT_EQ(read_rows(r, cuts[i], seen, N), cuts[i]);
        r = moved(r, &b);
        read_rows(r, -1, seen, N);
        for (int64_t v = 0; v < N; v++)
          ASSERT_EQ(seen[v], mode && fails_at(&g_some, v) ? 0 : 1);
        sl_reader_destroy(r);
      }
}

TEST(an_unordered_fused_map_error_ends_the_pass) {
  static const fails bad = {.at = 500};
  for (uint32_t t = 1; t <= 4; t *= 2) {
    chain c = {2000, t, 16, 0, 1, 0, &bad, 0};
    sl_reader *r = build(&c);
    sl_sample *s;
    int rc;
    while ((rc = sl_reader_next(r, &s)) == SL_OK)
      sl_sample_release(s);
    ASSERT_RC(rc, SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), "cannot widen 500");
    ASSERT_OK(sl_reader_reset(r)); /* and the next pass starts clean */
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
    sl_reader_destroy(r);
  }
}

TEST(destroying_mid_pass_with_rows_in_flight) {
  for (uint32_t t = 1; t <= 8; t *= 2) {
    /* t = 8: unordered, with tokens held for their tickets */
    chain c = {100000, t > 4 ? 4 : t, 8, 0, t > 4, 0, NULL, 0};
    sl_reader *r = build(&c);
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
    test_sleep_us(2000); /* let the workers fill the window */
    sl_reader_destroy(r);
  }
}
