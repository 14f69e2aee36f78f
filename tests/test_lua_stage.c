/* test_lua_stage.c - the Lua stages of src/script (lua_stage.c: map and
 * filter on N worker threads; lua_reader.c: a source written in Lua), run
 * against the test double tests/lua/sluice/worker.lua (raw FFI, no `sluice`
 * package): ordered output identical for 1, 2 and 4 threads, unordered as a
 * multiset, filter, errors at their position with message and traceback,
 * sticky errors, reset and destroy at any moment, the map schema known at
 * construction, prefetching while the consumer sleeps, parallel speed-up and
 * the per-sample overhead.
 *
 * The double calls libsluice through ffi.C, so this executable must export
 * the sl_* symbols (ENABLE_EXPORTS / -rdynamic). */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "script/lua_host.h"

#include <lauxlib.h>
#include <lualib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>

/* --- the decorators under test, declared in a "consumer" state ------------ */

/* Line numbers matter: the tests look for "test_fns.lua:<line>". */
static const char FNS[] =
    "local T = {}\n"                                                   /* 1 */
    "function T.times10(s) return { i = s.i * 10 } end\n"              /* 2 */
    "function T.identity(s) return s end\n"                            /* 3 */
    "function T.to_x(s) return { x = s.i + 0.5 } end\n"                /* 4 */
    "function T.even(s) return s.i % 2 == 0 end\n"                     /* 5 */
    "function T.boom500(s)\n"                                          /* 6 */
    "  if s.i == 500 and (s.p or 0) == 0 then\n"                       /* 7 */
    "    error('boom at ' .. s.i)\n"                                   /* 8 */
    "  end\n"                                                          /* 9 */
    "  return { i = s.i * 10 }\n"                                      /* 10 */
    "end\n"                                                            /* 11 */
    "function T.boom0(s) error('boom at ' .. s.i) end\n"               /* 12 */
    "function T.spin(s, n)\n"                                          /* 13 */
    "  local acc = 0\n"                                                /* 14 */
    "  for k = 1, n do acc = (acc * 31 + k + s.i) % 1000003 end\n"     /* 15 */
    "  return acc\n"                                                   /* 16 */
    "end\n"                                                            /* 17 */
    "function T.slow(s)\n"                                             /* 18 */
    "  local spin = function(n)\n"                                     /* 19 */
    "    local acc = 0\n"                                              /* 20 */
    "    for k = 1, n do acc = (acc * 31 + k + s.i) % 1000003 end\n"   /* 21 */
    "    return acc\n"                                                 /* 22 */
    "  end\n"                                                          /* 23 */
    "  spin(200000)\n"                                                 /* 24 */
    "  return { i = s.i * 10 }\n"                                      /* 25 */
    "end\n"                                                            /* 26 */
    "function T.busy(s)\n"                                             /* 27 */
    "  local acc, i = 0, s.i\n"                                        /* 28 */
    "  for k = 1, 20000 do acc = (acc * 31 + k + i) % 1000003 end\n"   /* 29 */
    "  return { i = s.i * 10 }\n"                                      /* 30 */
    "end\n"                                                            /* 31 */
    "function T.rename5(s)\n"                                          /* 32 */
    "  if s.i == 5 then return { x = 1.5 } end\n"                      /* 33 */
    "  return { i = s.i }\n"                                           /* 34 */
    "end\n"                                                            /* 35 */
    "function T.nothing(s) end\n"                                      /* 36 */
    "function T.rows100()\n"                                           /* 37 */
    "  calls = (calls or 0) + 1\n"                                     /* 38 */
    "  local k, c = 0, calls\n"                                        /* 39 */
    "  return function()\n"                                            /* 40 */
    "    k = k + 1\n"                                                  /* 41 */
    "    if k <= 100 then return { i = k, c = c } end\n"               /* 42 */
    "  end\n"                                                          /* 43 */
    "end\n"                                                            /* 44 */
    "function T.rows_err()\n"                                          /* 45 */
    "  local k = 0\n"                                                  /* 46 */
    "  return function()\n"                                            /* 47 */
    "    k = k + 1\n"                                                  /* 48 */
    "    if k == 50 then error('row boom at ' .. k) end\n"             /* 49 */
    "    return { i = k }\n"                                           /* 50 */
    "  end\n"                                                          /* 51 */
    "end\n"                                                            /* 52 */
    "function T.rows_forever()\n"                                      /* 53 */
    "  local k = 0\n"                                                  /* 54 */
    "  return function() k = k + 1; return { i = k } end\n"            /* 55 */
    "end\n"                                                            /* 56 */
    "function T.rows_none() return function() return nil end end\n"    /* 57 */
    "function T.rows_fail_first()\n"                                   /* 58 */
    "  return function() error('no rows today') end\n"                 /* 59 */
    "end\n"                                                            /* 60 */
    "function T.heavy(s)\n"                                            /* 61 */
    "  local acc, i = 0, s.i\n"                                        /* 62 */
    "  for k = 1, 2000000 do acc = (acc * 31 + k + i) % 1000003 end\n" /* 63 */
    "  return { i = acc }\n"                                           /* 64 */
    "end\n"                                                            /* 65 */
    "function T.rare(s) return s.i % 1000 == 999 end\n"                /* 66 */
    "function T.stamped(s)\n"                                          /* 67 */
    "  local ffi = require('ffi')\n"                                   /* 68 */
    "  if not STAMP_CDEF then\n"                                       /* 69 */
    "    ffi.cdef('struct sl_ts { long s, ns; };'\n"                   /* 70 */
    "      .. 'int clock_gettime(int, struct sl_ts *);')\n"            /* 71 */
    "    STAMP_CDEF = true\n"                                          /* 72 */
    "  end\n"                                                          /* 73 */
    "  local acc, i = 0, s.i\n"                                        /* 74 */
    "  for k = 1, 20000 do acc = (acc * 31 + k + i) % 1000003 end\n"   /* 75 */
    "  local ts = ffi.new('struct sl_ts')\n"                           /* 76 */
    "  ffi.C.clock_gettime(1, ts)\n" /* CLOCK_MONOTONIC */             /* 77 */
    "  return { i = s.i * 10, x_t = tonumber(ts.s) + tonumber(ts.ns) * 1e-9 }\n"
    "end\n" /* 79 */
    "function T.ctx_note(s, ctx)\n"                                    /* 80 */
    "  return { i = s.i, ix = ctx.index, ep = ctx.epoch,\n"             /* 81 */
    "           sd = ctx.seed }\n"                                      /* 82 */
    "end\n"                                                            /* 83 */
    "function T.ctx_third(s, ctx) return ctx.index % 3 == 0 end\n"      /* 84 */
    "return T\n";

static lua_State *g_decl; /* the declaring state (this thread only) */

static void close_decl(void) {
  if (g_decl) lua_close(g_decl);
  g_decl = NULL;
}

static lua_State *decl_state(void) {
  if (g_decl) return g_decl;
  lua_State *L = luaL_newstate();
  ASSERT_NOT_NULL(L);
  luaL_openlibs(L);
  if (luaL_loadbuffer(L, FNS, sizeof FNS - 1, "@test_fns.lua") != 0 ||
      lua_pcall(L, 0, 1, 0) != 0)
    test_fail(__FILE__, __LINE__, "loading the test functions: %s",
              lua_tostring(L, -1));
  lua_setglobal(L, "T");
  g_decl = L;
  atexit(close_decl);
  return L;
}

/* Ships T[name]. */
static sl__shipped *ship(const char *name, const char *what) {
  lua_State *L = decl_state();
  lua_getglobal(L, "T");
  lua_getfield(L, -1, name);
  if (!lua_isfunction(L, -1))
    test_fail(__FILE__, __LINE__, "no test function %s", name);
  sl__shipped *f = NULL;
  ASSERT_OK(sl__lua_ship(L, -1, what, &f));
  lua_pop(L, 2);
  return f;
}

/* Worker states find the double on package.path, without `sluice`. */
static sl__lua_env *test_env(void) {
  sl__lua_env *e = sl__lua_env_new(SLUICE_SOURCE_DIR "/tests/lua/?.lua", NULL);
  ASSERT_NOT_NULL(e);
  ASSERT_OK(sl__lua_env_set_preload(e, 0));
  return e;
}

static sl_reader *lua_stage(sl_reader *up, sl__lua_kind kind, const char *fn,
                            int threads, int ordered, size_t queue,
                            sl_schema *schema) {
  sl__shipped *f = ship(fn, kind == SL__LUA_MAP ? "map" : "filter");
  sl__lua_env *e = test_env();
  sl__lua_stage_opts o = {.threads = threads, .ordered = ordered, .queue = queue};
  sl_reader *r = NULL;
  int rc = sl__lua_stage(up, kind, f, e, &o, schema, &r);
  sl__shipped_release(f);
  sl__lua_env_release(e);
  if (rc < 0)
    test_fail(__FILE__, __LINE__, "sl__lua_stage(%s): %s (%s)", fn,
              sl_err_name(rc), sl_last_error());
  return r;
}

static sl_reader *map(sl_reader *up, const char *fn, int threads, int ordered) {
  return lua_stage(up, SL__LUA_MAP, fn, threads, ordered, 0, NULL);
}

static sl_reader *range(int64_t n) {
  sl_reader *r;
  ASSERT_OK(sl_reader_range(n, &r));
  return r;
}

/* --- helpers -------------------------------------------------------------- */

static int64_t field_i64(sl_sample *s, const char *name) {
  int k = sl_sample_index(s, name);
  if (k < 0) test_fail(__FILE__, __LINE__, "no field %s", name);
  const sl_tensor *t = sl_sample_at(s, k);
  ASSERT_EQ(t->dtype, SL_I64);
  return *(const int64_t *)t->data;
}

static double cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Expects field i = mul * k for k = first .. end-1, then EOF (twice). */
static void expect_pass(sl_reader *r, int64_t first, int64_t end, int64_t mul) {
  for (int64_t k = first; k < end; k++) {
    sl_sample *s = NULL;
    int rc = sl_reader_next(r, &s);
    if (rc != SL_OK)
      test_fail(__FILE__, __LINE__, "sample %lld: %s (%s)", (long long)k,
                sl_err_name(rc), sl_last_error());
    if (field_i64(s, "i") != mul * k)
      test_fail(__FILE__, __LINE__, "sample %lld: got %lld", (long long)k,
                (long long)field_i64(s, "i"));
    sl_sample_release(s);
  }
  sl_sample *s = (sl_sample *)1;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_NULL(s);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
}

static void read_n(sl_reader *r, int64_t n, int64_t mul) {
  for (int64_t k = 0; k < n; k++) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    ASSERT_EQ(field_i64(s, "i"), mul * k);
    sl_sample_release(s);
  }
}

/* Reads a whole pass in any order: every k in [0, n) exactly once. */
static void expect_multiset(sl_reader *r, int64_t n, int64_t mul) {
  char *seen = calloc((size_t)n, 1);
  ASSERT_NOT_NULL(seen);
  for (int64_t k = 0; k < n; k++) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    int64_t v = field_i64(s, "i");
    ASSERT_EQ(v % mul, 0);
    v /= mul;
    ASSERT_TRUE(v >= 0 && v < n);
    ASSERT_EQ(seen[v], 0);
    seen[v] = 1;
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  free(seen);
}

/* A generator of {i: i64, p: i64}: i = 0..n-1, p = the pass (0, 1, ...),
 * failing with SL_EIO at i == fail_at (when >= 0). */
typedef struct gen {
  sl_schema *schema;
  int64_t n, k, pass, fail_at;
} gen;

static int gen_next(void *ud, sl_sample **out) {
  gen *g = ud;
  if (g->k == g->fail_at)
    return sl_set_error(SL_EIO, "gen: broken at %lld", (long long)g->k);
  if (g->k == g->n) return SL_EOF;
  sl_sample *s = sl_sample_new(g->schema);
  if (!s) return SL_ENOMEM;
  void *d;
  int rc = sl_sample_alloc(s, 0, 0, NULL, &d);
  if (rc == SL_OK) *(int64_t *)d = g->k;
  if (rc == SL_OK) rc = sl_sample_alloc(s, 1, 0, NULL, &d);
  if (rc == SL_OK) *(int64_t *)d = g->pass;
  if (rc < 0) {
    sl_sample_release(s);
    return rc;
  }
  g->k++;
  *out = s;
  return SL_OK;
}

static int gen_reset(void *ud) {
  gen *g = ud;
  g->k = 0;
  g->pass++;
  return SL_OK;
}

static void gen_free(void *ud) {
  gen *g = ud;
  sl_schema_release(g->schema);
  free(g);
}

static sl_reader *gen_reader(int64_t n, int64_t fail_at) {
  gen *g = calloc(1, sizeof *g);
  ASSERT_NOT_NULL(g);
  g->n = n;
  g->fail_at = fail_at;
  g->schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(g->schema, "i", SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_add(g->schema, "p", SL_I64, 0, NULL));
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(g->schema, gen_next, gen_reset, gen_free,
                                     g, &r));
  return r;
}

/* --- map and filter: results ---------------------------------------------- */

TEST(map_ordered_identical_for_1_2_4_threads) {
  int threads[] = {1, 2, 4};
  for (int t = 0; t < 3; t++) {
    sl_reader *r = map(range(10000), "times10", threads[t], 1);
    expect_pass(r, 0, 10000, 10);
    ASSERT_OK(sl_reader_reset(r));
    expect_pass(r, 0, 10000, 10); /* and again after a reset */
    sl_reader_destroy(r);
  }
  /* Small windows: a queue of 1 and 2 with several threads. */
  for (size_t q = 1; q <= 3; q++) {
    sl_reader *r =
        lua_stage(range(2000), SL__LUA_MAP, "times10", 3, 1, q, NULL);
    expect_pass(r, 0, 2000, 10);
    sl_reader_destroy(r);
  }
}

TEST(map_unordered_gives_the_same_multiset) {
  int threads[] = {1, 2, 4};
  for (int t = 0; t < 3; t++) {
    sl_reader *r = map(range(10000), "times10", threads[t], 0);
    expect_multiset(r, 10000, 10);
    ASSERT_OK(sl_reader_reset(r));
    expect_multiset(r, 10000, 10);
    sl_reader_destroy(r);
  }
  sl_reader *r = lua_stage(range(3000), SL__LUA_MAP, "times10", 4, 0, 1, NULL);
  expect_multiset(r, 3000, 10);
  sl_reader_destroy(r);
}

TEST(map_identity_passes_the_sample_through) {
  sl_reader *up = range(100);
  const sl_schema *us = sl_reader_schema(up);
  sl_reader *r = map(up, "identity", 2, 1);
  ASSERT_PTR_EQ(sl_reader_schema(r), us);
  expect_pass(r, 0, 100, 1);
  sl_reader_destroy(r);
}

TEST(filter_keeps_the_even_ones_in_order) {
  int threads[] = {1, 2, 4};
  for (int t = 0; t < 3; t++) {
    sl_reader *up = range(10000);
    const sl_schema *us = sl_reader_schema(up);
    sl_reader *r =
        lua_stage(up, SL__LUA_FILTER, "even", threads[t], 1, 0, NULL);
    ASSERT_PTR_EQ(sl_reader_schema(r), us);
    for (int pass = 0; pass < 2; pass++) {
      for (int64_t k = 0; k < 10000; k += 2) {
        sl_sample *s = NULL;
        ASSERT_RC(sl_reader_next(r, &s), SL_OK);
        ASSERT_EQ(field_i64(s, "i"), k);
        sl_sample_release(s);
      }
      sl_sample *s = NULL;
      ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
  /* Unordered: the same set. */
  sl_reader *r = lua_stage(range(10000), SL__LUA_FILTER, "even", 2, 0, 0, NULL);
  char *seen = calloc(10000, 1);
  int64_t n = 0;
  sl_sample *s = NULL;
  int rc;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    int64_t v = field_i64(s, "i");
    ASSERT_EQ(v % 2, 0);
    ASSERT_EQ(seen[v], 0);
    seen[v] = 1;
    n++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_EOF);
  ASSERT_EQ(n, 5000);
  free(seen);
  sl_reader_destroy(r);
}

TEST(filter_dropping_long_runs) {
  /* Whole windows of dropped samples, small queues: the consumer skips
   * them and must keep the workers going. */
  for (int threads = 1; threads <= 3; threads++) {
    for (int ordered = 0; ordered < 2; ordered++) {
      sl_reader *r = lua_stage(range(20000), SL__LUA_FILTER, "rare", threads,
                               ordered, (size_t)threads, NULL);
      for (int pass = 0; pass < 2; pass++) {
        int64_t n = 0, sum = 0;
        sl_sample *s = NULL;
        int rc;
        while ((rc = sl_reader_next(r, &s)) == SL_OK) {
          int64_t v = field_i64(s, "i");
          ASSERT_EQ(v % 1000, 999);
          if (ordered) ASSERT_EQ(v, 1000 * n + 999);
          sum += v;
          n++;
          sl_sample_release(s);
        }
        ASSERT_RC(rc, SL_EOF);
        ASSERT_EQ(n, 20);
        ASSERT_EQ(sum, 20 * 999 + 1000 * (19 * 20 / 2));
        ASSERT_OK(sl_reader_reset(r));
      }
      sl_reader_destroy(r);
    }
  }
}

TEST(map_schema_known_at_construction) {
  sl_reader *r = map(range(1000), "to_x", 2, 1);
  const sl_schema *sch = sl_reader_schema(r);
  ASSERT_EQ(sl_schema_nfields(sch), 1);
  ASSERT_STREQ(sl_schema_field_name(sch, 0), "x");
  ASSERT_EQ(sl_schema_field_dtype(sch, 0), SL_F64);
  ASSERT_EQ(sl_schema_field_rank(sch, 0), 0);
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t k = 0; k < 1000; k++) {
      sl_sample *s = NULL;
      ASSERT_RC(sl_reader_next(r, &s), SL_OK);
      const sl_tensor *t = sl_sample_field(s, "x");
      ASSERT_NOT_NULL(t);
      ASSERT_TRUE(*(const double *)t->data == (double)k + 0.5);
      sl_sample_release(s);
    }
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
  /* Unordered too. */
  r = map(range(1000), "to_x", 2, 0);
  ASSERT_STREQ(sl_schema_field_name(sl_reader_schema(r), 0), "x");
  sl_reader_destroy(r);
}

TEST(map_first_result_error_or_eof_keeps_the_upstream_schema) {
  for (int ordered = 0; ordered < 2; ordered++) {
    sl_reader *up = range(100);
    const sl_schema *us = sl_reader_schema(up);
    sl_reader *r = map(up, "boom0", 2, ordered);
    ASSERT_PTR_EQ(sl_reader_schema(r), us);
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
    ASSERT_CONTAINS(sl_last_error(), "boom at");
    if (ordered) ASSERT_CONTAINS(sl_last_error(), "boom at 0");
    ASSERT_RC(sl_reader_next(r, &s), SL_ELUA); /* sticky */
    sl_reader_destroy(r);

    up = range(0);
    us = sl_reader_schema(up);
    r = map(up, "to_x", 2, ordered);
    ASSERT_PTR_EQ(sl_reader_schema(r), us);
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    ASSERT_OK(sl_reader_reset(r));
    ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
    sl_reader_destroy(r);
  }
}

TEST(map_output_schema_is_checked) {
  /* Fields change at sample 5: named at its position. */
  for (int threads = 1; threads <= 2; threads++) {
    sl_reader *r = map(range(100), "rename5", threads, 1);
    read_n(r, 5, 1);
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
    ASSERT_CONTAINS(sl_last_error(), "map (test_fns.lua:32): sample 5:");
    ASSERT_CONTAINS(sl_last_error(), "{x: f64[]}");
    ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
    sl_reader_destroy(r);
  }
  /* A declared schema the outputs do not fit: the field is named. */
  sl_schema *want = sl_schema_new();
  ASSERT_OK(sl_schema_add(want, "i", SL_F64, 0, NULL));
  sl_reader *r = lua_stage(range(10), SL__LUA_MAP, "times10", 2, 1, 0, want);
  ASSERT_PTR_EQ(sl_reader_schema(r), want);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_ESHAPE);
  ASSERT_CONTAINS(sl_last_error(), "map (test_fns.lua:2): sample 0: field 'i': "
                                   "expected f64[], got i64[]");
  sl_reader_destroy(r);
  sl_schema_release(want);
}

TEST(map_returning_nothing_is_an_error) {
  sl_reader *r = map(range(10), "nothing", 1, 1);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
  ASSERT_CONTAINS(sl_last_error(), "map (test_fns.lua:36)");
  ASSERT_CONTAINS(sl_last_error(), "returned nothing");
  sl_reader_destroy(r);
}

/* --- errors -------------------------------------------------------------- */

static void expect_boom_at_500(sl_reader *r) {
  read_n(r, 500, 10);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
  ASSERT_NULL(s);
  const char *m = sl_last_error();
  ASSERT_CONTAINS(m, "map (test_fns.lua:6): ");
  ASSERT_CONTAINS(m, "test_fns.lua:8: boom at 500");
  ASSERT_CONTAINS(m, "stack traceback:");
  ASSERT_CONTAINS(m, "worker.lua");
  char first[1024];
  snprintf(first, sizeof first, "%s", m);
  /* Sticky: same code, same message. */
  ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
  ASSERT_STREQ(sl_last_error(), first);
  ASSERT_EQ(sl_reader_has_next(r), SL_ELUA);
}

TEST(map_error_reaches_the_consumer_in_order) {
  int threads[] = {1, 2, 4};
  for (int t = 0; t < 3; t++) {
    /* p = pass: boom500 fails only in pass 0. */
    sl_reader *r = map(gen_reader(10000, -1), "boom500", threads[t], 1);
    expect_boom_at_500(r);
    /* Reset after the error: a clean full pass. */
    ASSERT_OK(sl_reader_reset(r));
    expect_pass(r, 0, 10000, 10);
    sl_reader_destroy(r);
  }
}

TEST(map_error_unordered) {
  sl_reader *r = map(gen_reader(10000, -1), "boom500", 2, 0);
  sl_sample *s = NULL;
  int rc, n = 0;
  while ((rc = sl_reader_next(r, &s)) == SL_OK) {
    n++;
    sl_sample_release(s);
  }
  ASSERT_RC(rc, SL_ELUA);
  ASSERT_CONTAINS(sl_last_error(), "boom at 500");
  ASSERT_LE(n, 10000);
  ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
  ASSERT_OK(sl_reader_reset(r));
  expect_multiset(r, 10000, 10);
  sl_reader_destroy(r);
}

TEST(filter_error_in_order) {
  /* boom500 as a filter: keeps everything (a table is truthy) until 500. */
  sl_reader *r =
      lua_stage(gen_reader(1000, -1), SL__LUA_FILTER, "boom500", 2, 1, 0, NULL);
  read_n(r, 500, 1);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
  ASSERT_CONTAINS(sl_last_error(), "filter (test_fns.lua:6): ");
  ASSERT_CONTAINS(sl_last_error(), "boom at 500");
  ASSERT_OK(sl_reader_reset(r));
  read_n(r, 1000, 1);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}

TEST(upstream_error_passes_through_in_order) {
  for (int ordered = 0; ordered < 2; ordered++) {
    for (int threads = 1; threads <= 4; threads *= 2) {
      sl_reader *r = map(gen_reader(1000, 300), "times10", threads, ordered);
      sl_sample *s = NULL;
      if (ordered) {
        read_n(r, 300, 10);
      } else {
        char seen[300] = {0};
        for (int k = 0; k < 300; k++) {
          ASSERT_RC(sl_reader_next(r, &s), SL_OK);
          int64_t v = field_i64(s, "i") / 10;
          ASSERT_TRUE(v >= 0 && v < 300 && !seen[v]);
          seen[v] = 1;
          sl_sample_release(s);
        }
      }
      ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
      ASSERT_CONTAINS(sl_last_error(), "gen: broken at 300");
      ASSERT_RC(sl_reader_next(r, &s), SL_EIO);
      sl_reader_destroy(r);
    }
  }
}

TEST(worker_state_failure_reaches_the_consumer) {
  /* No sluice.worker on the path: every worker fails to start; the error
   * takes the first position, construction does not hang, reset retries. */
  sl__lua_env *bad = sl__lua_env_new("/nonexistent/?.lua", NULL);
  ASSERT_NOT_NULL(bad);
  ASSERT_OK(sl__lua_env_set_preload(bad, 0));
  sl__shipped *f = ship("times10", "map");
  for (int threads = 1; threads <= 3; threads++) {
    sl_reader *up = range(100);
    const sl_schema *us = sl_reader_schema(up);
    sl__lua_stage_opts o = {.threads = threads, .ordered = threads != 2};
    sl_reader *r = NULL;
    ASSERT_OK(sl__lua_stage(up, SL__LUA_MAP, f, bad, &o, NULL, &r));
    ASSERT_PTR_EQ(sl_reader_schema(r), us);
    for (int pass = 0; pass < 2; pass++) {
      sl_sample *s = NULL;
      ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
      ASSERT_CONTAINS(sl_last_error(), "map (test_fns.lua:2)");
      ASSERT_CONTAINS(sl_last_error(), "sluice.worker");
      ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
  }
  sl__shipped_release(f);
  /* The reader: with no schema, construction fails; with one, the error
   * is the first thing read. */
  f = ship("rows100", "reader");
  sl_reader *r = NULL;
  ASSERT_RC(sl__lua_reader(f, bad, 4, NULL, &r), SL_ELUA);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "reader (test_fns.lua:37)");
  sl_schema *sch = sl_schema_new();
  ASSERT_OK(sl_schema_add(sch, "i", SL_I64, 0, NULL));
  ASSERT_OK(sl__lua_reader(f, bad, 4, sch, &r));
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
  ASSERT_CONTAINS(sl_last_error(), "sluice.worker");
  sl_reader_destroy(r);
  sl_schema_release(sch);
  sl__shipped_release(f);
  sl__lua_env_release(bad);
}

TEST(bad_arguments) {
  sl__shipped *f = ship("times10", "map");
  sl__lua_env *e = test_env();
  sl__lua_stage_opts o = {.threads = 0, .ordered = 1};
  sl_reader *r = (sl_reader *)1;
  /* threads 0: SL_EINVAL, and the upstream is taken (ASan: no leak). */
  ASSERT_RC(sl__lua_stage(range(10), SL__LUA_MAP, f, e, &o, NULL, &r),
            SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "threads");
  o.threads = 1;
  ASSERT_RC(sl__lua_stage(range(10), SL__LUA_MAP, NULL, e, &o, NULL, &r),
            SL_EINVAL);
  ASSERT_RC(sl__lua_stage(NULL, SL__LUA_MAP, f, e, &o, NULL, &r), SL_EINVAL);
  ASSERT_RC(sl__lua_stage(range(10), SL__LUA_MAP, f, e, NULL, NULL, &r),
            SL_EINVAL);
  ASSERT_RC(sl__lua_reader(f, e, 0, NULL, &r), SL_EINVAL);
  ASSERT_RC(sl__lua_reader(NULL, e, 4, NULL, &r), SL_EINVAL);
  sl__lua_env_release(e);
  sl__shipped_release(f);
}

/* A thread that cannot be started fails the stage: at construction (the
 * workers start there) and at a reset, never a stage with fewer threads
 * (issue 13 item 12); the count itself is checked against the limit. */
TEST(thread_start_failure_fails_the_stage) {
  sl__shipped *f = ship("times10", "map");
  sl__lua_env *e = test_env();
  for (long ok = 0; ok < 3; ok++) {
    sl__lua_stage_opts o = {.threads = 4, .ordered = 1};
    sl_reader *r = (sl_reader *)1;
    sl__thread_fail_after(ok);
    int rc = sl__lua_stage(range(100), SL__LUA_MAP, f, e, &o, NULL, &r);
    sl__thread_fail_after(-1);
    ASSERT_RC(rc, SL_ENOMEM);
    ASSERT_NULL(r);
    ASSERT_CONTAINS(sl_last_error(), "map (test_fns.lua:");
    ASSERT_CONTAINS(sl_last_error(), "thread");
  }
  /* At a reset: the reset fails; once threads can start, the next works. */
  sl_reader *r = map(range(100), "times10", 2, 1);
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  sl__thread_fail_after(1);
  int rc = sl_reader_reset(r);
  sl__thread_fail_after(-1);
  ASSERT_RC(rc, SL_ENOMEM);
  ASSERT_CONTAINS(sl_last_error(), "thread");
  ASSERT_OK(sl_reader_reset(r));
  expect_pass(r, 0, 100, 10);
  sl_reader_destroy(r);
  /* Beyond the limit: the engine's message, the upstream taken. */
  sl__lua_stage_opts o = {.threads = (int)sl__thread_limit() + 1, .ordered = 1};
  r = (sl_reader *)1;
  ASSERT_RC(sl__lua_stage(range(10), SL__LUA_MAP, f, e, &o, NULL, &r),
            SL_EINVAL);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "more than the limit");
  sl__lua_env_release(e);
  sl__shipped_release(f);
}

/* --- reset and destroy --------------------------------------------------- */

TEST(reset_mid_pass) {
  for (int ordered = 0; ordered < 2; ordered++) {
    sl_reader *r = map(range(10000), "times10", 4, ordered);
    for (int k = 0; k < 5; k++) {
      int64_t n = 0;
      for (int64_t j = 0; j < 1000 * k + 1; j++) {
        sl_sample *s = NULL;
        ASSERT_RC(sl_reader_next(r, &s), SL_OK);
        if (ordered) ASSERT_EQ(field_i64(s, "i"), 10 * j);
        n++;
        sl_sample_release(s);
      }
      if (k & 1) test_sleep_us(2000); /* let the window fill */
      ASSERT_OK(sl_reader_reset(r));
    }
    if (ordered)
      expect_pass(r, 0, 10000, 10);
    else
      expect_multiset(r, 10000, 10);
    sl_reader_destroy(r);
  }
}

/* A function with a second parameter gets ctx (lua_host.h,
 * sl__lua_stage_opts.seed/epoch): index = the sample's sequence number in
 * the pass (after a filter upstream: its position among the kept ones),
 * epoch = opts.epoch + the resets, seed = opts.seed; for any thread count,
 * ordered or not. */
TEST(ctx_index_epoch_seed_for_1_2_4_threads) {
  for (int threads = 1; threads <= 4; threads *= 2) {
    for (int ordered = 0; ordered < 2; ordered++) {
      sl__shipped *fkeep = ship("ctx_third", "filter");
      sl__shipped *fnote = ship("ctx_note", "map");
      sl__lua_env *e = test_env();
      sl__lua_stage_opts fo = {.threads = threads, .ordered = 1, .seed = 1};
      sl__lua_stage_opts mo = {.threads = threads,
                               .ordered = ordered,
                               .queue = 16,
                               .seed = ((uint64_t)5 << 32) | 7,
                               .epoch = 3};
      sl_reader *f = NULL, *r = NULL;
      ASSERT_OK(sl__lua_stage(range(300), SL__LUA_FILTER, fkeep, e, &fo, NULL,
                              &f));
      ASSERT_OK(sl__lua_stage(f, SL__LUA_MAP, fnote, e, &mo, NULL, &r));
      sl__shipped_release(fkeep);
      sl__shipped_release(fnote);
      sl__lua_env_release(e);
      for (int pass = 0; pass < 3; pass++) {
        bool seen[100] = {false};
        sl_sample *s = NULL;
        int n = 0, rc;
        while ((rc = sl_reader_next(r, &s)) == SL_OK) {
          int64_t i = field_i64(s, "i"), ix = field_i64(s, "ix");
          ASSERT_EQ(i % 3, 0);
          ASSERT_EQ(ix, i / 3); /* its position among the kept samples */
          ASSERT_TRUE(ix >= 0 && ix < 100 && !seen[ix]);
          seen[ix] = true;
          ASSERT_EQ(field_i64(s, "ep"), 3 + pass);
          ASSERT_EQ(field_i64(s, "sd"), ((int64_t)5 << 32) + 7);
          if (ordered) ASSERT_EQ(ix, n);
          n++;
          sl_sample_release(s);
        }
        ASSERT_RC(rc, SL_EOF);
        ASSERT_EQ(n, 100);
        ASSERT_OK(sl_reader_reset(r));
      }
      sl_reader_destroy(r);
    }
  }
  /* Out of range: the stage's one check. */
  sl__shipped *fnote = ship("ctx_note", "map");
  sl__lua_env *e = test_env();
  sl__lua_stage_opts o = {.threads = 1, .ordered = 1, .epoch = (uint64_t)1 << 53};
  sl_reader *r = NULL;
  ASSERT_RC(sl__lua_stage(range(3), SL__LUA_MAP, fnote, e, &o, NULL, &r),
            SL_EINVAL);
  ASSERT_CONTAINS(sl_last_error(), "option 'epoch' must be an integer");
  sl__shipped_release(fnote);
  sl__lua_env_release(e);
}

TEST(destroy_mid_pass_200_times) {
  for (int k = 0; k < 200; k++) {
    int threads = 1 + k % 4;
    int ordered = (k / 4) % 2 == 0;
    sl_reader *r =
        lua_stage(range(100000), SL__LUA_MAP, k % 3 ? "busy" : "times10",
                  threads, ordered, (size_t)(1 + k % 7), NULL);
    switch (k % 5) {
    case 0: /* at once: workers busy, windows filling */
      break;
    case 1: /* a few samples in */
      for (int j = 0; j < 3; j++) {
        sl_sample *s = NULL;
        ASSERT_RC(sl_reader_next(r, &s), SL_OK);
        sl_sample_release(s);
      }
      break;
    case 2: /* full windows, idle workers */
      test_sleep_us(3000);
      break;
    case 3: /* after a reset */
      ASSERT_OK(sl_reader_reset(r));
      break;
    default: /* peeked */
      ASSERT_EQ(sl_reader_has_next(r), 1);
      break;
    }
    sl_reader_destroy(r);
  }
  /* And a filter. */
  for (int k = 0; k < 20; k++) {
    sl_reader *r =
        lua_stage(range(100000), SL__LUA_FILTER, "even", 2, k & 1, 4, NULL);
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    sl_sample_release(s);
    sl_reader_destroy(r);
  }
}

TEST(stacked_stages) {
  /* filter(map(map(range))) with different thread counts. */
  sl_reader *r = map(range(3000), "times10", 2, 1);
  r = map(r, "identity", 3, 1);
  r = lua_stage(r, SL__LUA_FILTER, "even", 2, 1, 0, NULL);
  for (int pass = 0; pass < 2; pass++) {
    expect_pass(r, 0, 3000, 10); /* all i*10 are even */
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

/* --- scheduling ---------------------------------------------------------- */

static atomic_long g_pulled; /* samples the stage took from upstream */

static int count_pull(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  atomic_fetch_add(&g_pulled, 1);
  *out = in;
  return SL_OK;
}

static double field_f64(sl_sample *s, const char *name) {
  int k = sl_sample_index(s, name);
  if (k < 0) test_fail(__FILE__, __LINE__, "no field %s", name);
  const sl_tensor *t = sl_sample_at(s, k);
  ASSERT_EQ(t->dtype, SL_F64);
  return *(const double *)t->data;
}

TEST(prefetches_while_the_consumer_sleeps) {
  /* "stamped" costs tens of microseconds per sample and records when it
   * finished.  While the consumer sleeps, the workers fill the window of Q:
   * the stage pulls Q samples ahead of the consumer, and the samples read
   * after the sleep were computed before it ended.  No timing is asserted:
   * the test waits (up to 10 s) for the window to fill, so a loaded host
   * only makes it slower. */
  const int Q = 64;
  atomic_store(&g_pulled, 0);
  sl_reader *up = range(100000), *counted = NULL;
  ASSERT_OK(sl_map(up, count_pull, NULL, NULL, NULL, &counted));
  sl_reader *r = lua_stage(counted, SL__LUA_MAP, "stamped", 2, 1, Q, NULL);
  int64_t next = 0;
  for (int round = 0; round < 3; round++) {
    double deadline = test_now_s() + 10;
    while (atomic_load(&g_pulled) < next + Q && test_now_s() < deadline)
      test_sleep_us(2000);
    long ahead = atomic_load(&g_pulled) - (long)next;
    ASSERT_TRUE(ahead >= Q); /* the window filled while nobody read */
    /* and never past it, plus what the consumer's cache holds (16) */
    ASSERT_TRUE(ahead <= Q + 16);
    test_sleep_us(50000); /* the last pulled batch finishes */
    double woke = test_now_s();
    int before = 0;
    for (int k = 0; k < Q; k++, next++) {
      sl_sample *s = NULL;
      ASSERT_RC(sl_reader_next(r, &s), SL_OK);
      ASSERT_EQ(field_i64(s, "i"), 10 * next);
      if (field_f64(s, "x_t") < woke) before++;
      sl_sample_release(s);
    }
    printf("  round %d: %d of %d samples computed while the consumer slept\n",
           round, before, Q);
    ASSERT_TRUE(before >= Q / 2); /* a last batch may still be running */
  }
  sl_reader_destroy(r);
}

static double throughput(const char *fn, int threads, int64_t n) {
  sl_reader *r = map(range(n), fn, threads, 1);
  double t0 = test_now_s();
  sl_sample *s = NULL;
  int64_t k = 0;
  while (sl_reader_next(r, &s) == SL_OK) {
    sl_sample_release(s);
    k++;
  }
  double dt = test_now_s() - t0;
  ASSERT_EQ(k, n);
  sl_reader_destroy(r);
  return (double)n / dt;
}

/* What the machine gives two CPU-bound threads right now, against one: the
 * same pure C loop run once, then twice at the same time.  On a shared
 * host the other core may be busy; the test then asks for a speed-up
 * relative to what the machine can give. */
static void *c_spin(void *arg) {
  volatile double acc = 0;
  for (long k = 0; k < 40000000; k++)
    acc = acc * 0.5 + (double)k;
  (void)arg;
  return NULL;
}

static double machine_speedup(void) {
  double t0 = test_now_s();
  c_spin(NULL);
  c_spin(NULL);
  double one = test_now_s() - t0;
  pthread_t a, b;
  t0 = test_now_s();
  pthread_create(&a, NULL, c_spin, NULL);
  pthread_create(&b, NULL, c_spin, NULL);
  pthread_join(a, NULL);
  pthread_join(b, NULL);
  return one / (test_now_s() - t0);
}

TEST(cpu_heavy_map_scales_with_threads) {
  /* "heavy": about 20 ms of JIT-compiled Lua per sample.  Up to three
   * attempts: one run of a few seconds on a shared host can lose a core to
   * a neighbour between the machine's measurement and the map's. */
  int64_t n = 160;
  throughput("heavy", 2, 8); /* warm up */
  double got = 0, want = 0;
  for (int attempt = 0; attempt < 3; attempt++) {
    double m0 = machine_speedup();
    double t1 = throughput("heavy", 1, n);
    double t2 = throughput("heavy", 2, n);
    double m1 = machine_speedup();
    double m = m0 < m1 ? m0 : m1;
    printf("  heavy map: %.1f samples/s with 1 thread, %.1f with 2: %.2fx "
           "(the machine gives two C threads %.2fx / %.2fx)\n",
           t1, t2, t2 / t1, m0, m1);
    /* >= 1.3x on a quiet 2-core machine; on a busy one, 80% of what two C
     * threads got. */
    got = t2 / t1;
    want = m >= 1.6 ? 1.3 : 0.8 * m;
    if (got >= want) return;
  }
  test_fail(__FILE__, __LINE__, "speed-up %.2fx < %.2fx", got, want);
}

/* The cost of the per-sample protocol itself, without threads: worker.map
 * of the double called through sl__lua_pcall on one state, n times. */
static double lua_call_ns(int64_t n) {
  sl__lua_env *e = test_env();
  lua_State *W = NULL;
  ASSERT_OK(sl__lua_worker_new(e, &W));
  sl__lua_env_release(e);
  sl__shipped *f = ship("identity", "map");
  lua_getglobal(W, "require");
  lua_pushliteral(W, "sluice.worker");
  ASSERT_EQ(lua_pcall(W, 1, 1, 0), 0);
  lua_getfield(W, -1, "map");
  int op = luaL_ref(W, LUA_REGISTRYINDEX);
  ASSERT_OK(sl__lua_unship(W, f));
  int fn = luaL_ref(W, LUA_REGISTRYINDEX);
  lua_settop(W, 0);
  sl_reader *r = range(1);
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample *slot = NULL;
  double t0 = test_now_s();
  for (int64_t k = 0; k < n; k++) {
    lua_rawgeti(W, LUA_REGISTRYINDEX, op);
    lua_rawgeti(W, LUA_REGISTRYINDEX, fn);
    lua_pushlightuserdata(W, sl_sample_retain(s));
    lua_pushlightuserdata(W, &slot);
    ASSERT_OK(sl__lua_pcall(W, 3, 0, "map", "here"));
    ASSERT_PTR_EQ(slot, s);
    sl_sample_release(slot);
  }
  double dt = test_now_s() - t0;
  sl_sample_release(s);
  sl_reader_destroy(r);
  sl__shipped_release(f);
  lua_close(W);
  return dt / (double)n * 1e9;
}

static void overhead(size_t queue) {
  /* Wall time and CPU time (all threads) per sample, and context switches:
   * the wall figure suffers on a loaded machine, the CPU one much less. */
  int64_t n = 300000;
  sl_reader *r = range(n);
  double t0 = test_now_s(), c0 = cpu_s();
  sl_sample *s = NULL;
  while (sl_reader_next(r, &s) == SL_OK)
    sl_sample_release(s);
  double base = (test_now_s() - t0) / (double)n;
  double cbase = (cpu_s() - c0) / (double)n;
  sl_reader_destroy(r);
  double best = 1e9, cbest = 1e9, sw = 0;
  for (int rep = 0; rep < 3; rep++) {
    struct rusage u0, u1;
    getrusage(RUSAGE_SELF, &u0);
    c0 = cpu_s();
    r = lua_stage(range(n), SL__LUA_MAP, "identity", 1, 1, queue, NULL);
    t0 = test_now_s();
    int64_t k = 0;
    while (sl_reader_next(r, &s) == SL_OK) {
      sl_sample_release(s);
      k++;
    }
    double per = (test_now_s() - t0) / (double)n;
    ASSERT_EQ(k, n);
    sl_reader_destroy(r);
    double cper = (cpu_s() - c0) / (double)n;
    getrusage(RUSAGE_SELF, &u1);
    if (per < best) {
      best = per;
      sw = (double)(u1.ru_nvcsw - u0.ru_nvcsw + u1.ru_nivcsw - u0.ru_nivcsw) /
           (double)n;
    }
    if (cper < cbest) cbest = cper;
  }
  printf("  identity map, 1 worker, queue %zu: %.0f ns/sample wall (range "
         "alone %.0f): %.0f ns overhead; CPU %.0f ns/sample (range alone "
         "%.0f); %.3f context switches/sample\n",
         queue, best * 1e9, base * 1e9, (best - base) * 1e9, cbest * 1e9,
         cbase * 1e9, sw);
  ASSERT_TRUE(best - base < 20e-6); /* loose: sanitizer builds, loaded hosts */
}

TEST(identity_map_overhead) {
  printf("  the double's worker.map through sl__lua_pcall, no threads: %.0f "
         "ns/call\n",
         lua_call_ns(300000));
  overhead(0);
  overhead(64);
}

/* --- the Lua reader ------------------------------------------------------ */

static sl_reader *lua_reader(const char *fn, size_t buffer, sl_schema *schema,
                             int *rc_out) {
  sl__shipped *f = ship(fn, "reader");
  sl__lua_env *e = test_env();
  sl_reader *r = NULL;
  int rc = sl__lua_reader(f, e, buffer, schema, &r);
  sl__shipped_release(f);
  sl__lua_env_release(e);
  if (rc_out)
    *rc_out = rc;
  else if (rc < 0)
    test_fail(__FILE__, __LINE__, "sl__lua_reader(%s): %s (%s)", fn,
              sl_err_name(rc), sl_last_error());
  return r;
}

static void expect_rows(sl_reader *r, int64_t calls) {
  for (int64_t k = 1; k <= 100; k++) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    ASSERT_EQ(field_i64(s, "i"), k);
    ASSERT_EQ(field_i64(s, "c"), calls);
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
}

TEST(reader_yields_rows_then_eof) {
  size_t buffers[] = {1, 4, 1000};
  for (int b = 0; b < 3; b++) {
    sl_reader *r = lua_reader("rows100", buffers[b], NULL, NULL);
    const sl_schema *sch = sl_reader_schema(r);
    ASSERT_EQ(sl_schema_nfields(sch), 2);
    ASSERT_STREQ(sl_schema_field_name(sch, 0), "c");
    ASSERT_STREQ(sl_schema_field_name(sch, 1), "i");
    ASSERT_EQ(sl_schema_field_dtype(sch, 1), SL_I64);
    expect_rows(r, 1);
    /* Reset calls fn() again, in the same state: calls = 2, 3. */
    ASSERT_OK(sl_reader_reset(r));
    expect_rows(r, 2);
    ASSERT_OK(sl_reader_reset(r));
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK); /* mid-pass reset */
    sl_sample_release(s);
    ASSERT_OK(sl_reader_reset(r));
    expect_rows(r, 4);
    sl_reader_destroy(r);
  }
}

TEST(reader_with_a_schema) {
  sl_schema *sch = sl_schema_new();
  ASSERT_OK(sl_schema_add(sch, "c", SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_add(sch, "i", SL_I64, 0, NULL));
  sl_reader *r = lua_reader("rows100", 8, sch, NULL);
  ASSERT_PTR_EQ(sl_reader_schema(r), sch);
  expect_rows(r, 1);
  sl_reader_destroy(r);
  /* Rows that do not fit the declared schema. */
  r = lua_reader("rows_forever", 8, sch, NULL);
  sl_sample *s = NULL;
  ASSERT_TRUE(sl_reader_next(r, &s) < 0);
  ASSERT_CONTAINS(sl_last_error(), "reader (test_fns.lua:53)");
  sl_reader_destroy(r);
  sl_schema_release(sch);
}

TEST(reader_iterator_error) {
  sl_reader *r = lua_reader("rows_err", 4, NULL, NULL);
  for (int pass = 0; pass < 2; pass++) {
    for (int64_t k = 1; k < 50; k++) {
      sl_sample *s = NULL;
      ASSERT_RC(sl_reader_next(r, &s), SL_OK);
      ASSERT_EQ(field_i64(s, "i"), k);
      sl_sample_release(s);
    }
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_ELUA);
    ASSERT_CONTAINS(sl_last_error(), "reader (test_fns.lua:45): ");
    ASSERT_CONTAINS(sl_last_error(), "test_fns.lua:49: row boom at 50");
    ASSERT_CONTAINS(sl_last_error(), "stack traceback:");
    ASSERT_RC(sl_reader_next(r, &s), SL_ELUA); /* sticky */
    ASSERT_OK(sl_reader_reset(r));
  }
  sl_reader_destroy(r);
}

TEST(reader_empty_or_failing_first_row) {
  /* No rows, no schema: a reader with no fields that ends at once. */
  sl_reader *r = lua_reader("rows_none", 4, NULL, NULL);
  ASSERT_EQ(sl_schema_nfields(sl_reader_schema(r)), 0);
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  ASSERT_OK(sl_reader_reset(r));
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
  /* Failing before the first row with no schema: construction fails. */
  int rc = 0;
  r = lua_reader("rows_fail_first", 4, NULL, &rc);
  ASSERT_RC(rc, SL_ELUA);
  ASSERT_NULL(r);
  ASSERT_CONTAINS(sl_last_error(), "no rows today");
}

TEST(reader_destroy_while_blocked) {
  for (int k = 0; k < 50; k++) {
    sl_schema *sch = NULL;
    if (k & 1) {
      sch = sl_schema_new();
      ASSERT_OK(sl_schema_add(sch, "i", SL_I64, 0, NULL));
    }
    sl_reader *r = lua_reader("rows_forever", 1 + (size_t)(k % 4), sch, NULL);
    if (k % 3 == 1) test_sleep_us(1000); /* blocked on the full channel */
    if (k % 3 == 2) {
      sl_sample *s = NULL;
      ASSERT_RC(sl_reader_next(r, &s), SL_OK);
      sl_sample_release(s);
      ASSERT_OK(sl_reader_reset(r));
    }
    sl_reader_destroy(r);
    sl_schema_release(sch);
  }
}

TEST(reader_feeds_a_map) {
  sl_reader *r = lua_reader("rows100", 16, NULL, NULL);
  r = map(r, "times10", 2, 1);
  for (int64_t k = 1; k <= 100; k++) {
    sl_sample *s = NULL;
    ASSERT_RC(sl_reader_next(r, &s), SL_OK);
    ASSERT_EQ(field_i64(s, "i"), 10 * k);
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
  sl_reader_destroy(r);
}
