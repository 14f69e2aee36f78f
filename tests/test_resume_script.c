/*
 * test_resume_script.c - sl_reader_save / sl_reader_restore over the stages
 * that run on the parallel engine (docs/RESUME.md): the Lua map,
 * filter and parser (src/script/lua_stage.c) ordered at 1, 2 and 4 threads
 * and unordered, the Lua reader (lua_reader.c: a replay of its pass), and
 * the C sl_map_parallel / sl_filter_parallel (stages/parallel.c).
 *
 * Ordered stages must give, after a restore into a fresh chain, exactly the
 * rest of the uninterrupted run (test_resume_check), ctx (index, epoch and
 * ctx.rng's draws) included, whatever the thread count on either side.
 * Unordered stages must deliver each remaining sample exactly once, and
 * refuse to save under a stage that needs their order again (a shuffle).
 *
 * The Lua functions run against the test double tests/lua/sluice/worker.lua
 * (no `sluice` package), except those needing ctx.rng or the parser, which
 * run against the real lua/sluice/worker.lua (the executable links the
 * whole static libsluice for its FFI: CMakeLists.txt).
 */
#include "test.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

/* --- C callbacks ---------------------------------------------------------- */

static int c_times3(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  int64_t v = test_sample_i64(in, 0);
  int rc = test_i64_sample(sl_sample_schema(in), v * 3 + 1, out);
  sl_sample_release(in);
  return rc;
}

static int c_not_thirds(void *ud, const sl_sample *s) {
  (void)ud;
  return test_sample_i64(s, 0) % 3 != 0;
}

typedef struct par_case {
  bool filter, unordered;
  int threads;
  bool repeated; /* shuffled below, repeated 3 times, a shuffle above */
} par_case;

static sl_reader *build_par(void *ud) {
  const par_case *c = ud;
  sl_reader *r = test_range_reader(100);
  if (c->repeated && sl_shuffle(r, 8, 3, &r) != SL_OK) return NULL;
  sl_parallel_opts o = SL_PARALLEL_OPTS_INIT;
  o.threads = (unsigned)c->threads;
  o.unordered = c->unordered;
  int rc = c->filter ? sl_filter_parallel(r, c_not_thirds, NULL, NULL, &o, &r)
                     : sl_map_parallel(r, c_times3, NULL, NULL, NULL, &o, &r);
  if (rc == SL_OK && c->repeated) rc = sl_multi_pass(r, 3, &r);
  if (rc == SL_OK && c->repeated) rc = sl_shuffle(r, 24, 11, &r);
  return rc == SL_OK ? r : NULL;
}

static const uint64_t k_cuts[] = {0, 1, 33, 99, 100, 101, 150, 299};
#define NCUTS (sizeof k_cuts / sizeof *k_cuts)

TEST(c_parallel_map_and_filter_resume_exactly) {
  for (int t = 1; t <= 4; t *= 2) {
    par_case m = {false, false, t, false}, f = {true, false, t, false};
    test_resume_check(build_par, &m, 3, k_cuts, NCUTS, 4096);
    test_resume_check(build_par, &f, 3, k_cuts, NCUTS, 4096);
  }
}

/* Under a repeat, with a shuffle above holding samples from before each
 * reset: the engine stages are saved in their pass before, their shuffled
 * upstream at that pass (a map at its position, a filter replaying that
 * pass: its log is the current pass's). */
TEST(c_parallel_map_and_filter_under_a_repeat_resume_exactly) {
  const uint64_t cuts[] = {0, 60, 66, 70, 76, 90, 100, 101, 110, 120, 132,
                           140, 160, 198, 200, 210, 230, 299};
  for (int t = 1; t <= 2; t++) {
    par_case m = {false, false, t, true}, f = {true, false, t, true};
    test_resume_check(build_par, &m, 2, cuts, sizeof cuts / sizeof *cuts,
                      4096);
    test_resume_check(build_par, &f, 2, cuts, sizeof cuts / sizeof *cuts,
                      4096);
  }
}

/* Reads n samples of `a` (field 0 into got[] unless NULL), saves into
 * *st / *len and destroys `a`. */
static void read_then_save(sl_reader *a, uint64_t n, int64_t *got, void **st,
                           size_t *len) {
  for (uint64_t i = 0; i < n; i++) {
    sl_sample *s = NULL;
    ASSERT_OK(sl_reader_next(a, &s));
    if (got) got[i] = test_sample_i64(s, 0);
    sl_sample_release(s);
  }
  ASSERT_OK(sl_reader_save(a, st, len));
  sl_reader_destroy(a);
}

/* Reads `cut` samples of chain `a`, saves, destroys it; restores into `b`
 * and reads the rest of the pass: every value of want[0..n) exactly once
 * over both (field 0). */
static void expect_each_once(sl_reader *a, sl_reader *b, uint64_t cut,
                             const int64_t *want, size_t n) {
  int64_t *got = calloc(n + 1, sizeof *got);
  ASSERT_NOT_NULL(got);
  ASSERT_TRUE(cut <= n);
  size_t m = (size_t)cut;
  void *st = NULL;
  size_t len = 0;
  read_then_save(a, cut, got, &st, &len);
  ASSERT_OK(sl_reader_restore(b, st, len));
  sl_free(st);
  for (;;) {
    sl_sample *s = NULL;
    int rc = sl_reader_next(b, &s);
    if (rc == SL_EOF) break;
    if (rc != SL_OK)
      test_fail(__FILE__, __LINE__, "after the restore: %s (%s)",
                sl_err_name(rc), sl_last_error());
    if (m == n) test_fail(__FILE__, __LINE__, "more than %zu samples", n);
    got[m++] = test_sample_i64(s, 0);
    sl_sample_release(s);
  }
  sl_reader_destroy(b);
  ASSERT_EQ(m, n);
  char *seen = calloc(n, 1);
  ASSERT_NOT_NULL(seen);
  for (size_t i = 0; i < m; i++) {
    size_t j = 0;
    while (j < n && (want[j] != got[i] || seen[j]))
      j++;
    if (j == n)
      test_fail(__FILE__, __LINE__, "cut %llu: value %lld twice or unexpected",
                (unsigned long long)cut, (long long)got[i]);
    seen[j] = 1;
  }
  free(seen);
  free(got);
}

/* The values a C unordered case yields over range(100). */
static size_t par_want(bool filter, int64_t *want) {
  size_t n = 0;
  for (int64_t i = 0; i < 100; i++)
    if (!filter)
      want[n++] = i * 3 + 1;
    else if (i % 3 != 0)
      want[n++] = i;
  return n;
}

TEST(c_parallel_unordered_delivers_each_remaining_sample_once) {
  int64_t want[100];
  for (int f = 0; f <= 1; f++) {
    size_t n = par_want(f, want);
    for (size_t c = 0; c < 5; c++) {
      uint64_t cut = (uint64_t[]){0, 1, 20, 50, n}[c];
      par_case a = {f, true, 4, false}, b = {f, true, 1 + (int)c % 3, false};
      expect_each_once(build_par(&a), build_par(&b), cut, want, n);
    }
  }
}

TEST(an_unordered_stage_under_a_shuffle_refuses_to_save) {
  par_case c = {false, true, 2, false};
  sl_reader *r = build_par(&c);
  ASSERT_OK(sl_shuffle(r, 16, 1, &r));
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  void *st = NULL;
  size_t len = 0;
  ASSERT_RC(sl_reader_save(r, &st, &len), SL_EUNSUPPORTED);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "ordered=false"));
  ASSERT_NOT_NULL(strstr(sl_last_error(), "use ordered=true"));
  sl_reader_destroy(r);
}

#if SLUICE_WITH_LUA
#include "script/lua_host.h"

#include <lauxlib.h>
#include <lualib.h>

/* Line numbers matter: tracebacks name "resume_fns.lua:<line>". */
static const char
    FNS[] = "local T = {}\n"            /* 1 */
            "function T.note(s, ctx)\n" /* 2 */
            "  return { i = s.i * 10, ix = ctx.index, ep = ctx.epoch }\n" /* 3
                                                                           */
            "end\n"                                                    /* 4 */
            "function T.third(s, ctx) return ctx.index % 3 ~= 1 end\n" /* 5 */
            "function T.times10(s) return { i = s.i * 10 } end\n"      /* 6 */
            "function T.even(s) return s.i % 2 == 0 end\n"             /* 7 */
            "function T.random(s, ctx)\n"                              /* 8 */
            "  s.u, s.n = ctx.rng:random(), ctx.rng:random(9) return s\n" /* 9
                                                                           */
            "end\n"                                      /* 10 */
            "function T.parse(line, ctx)\n"              /* 11 */
            "  local v = tonumber(line)\n"               /* 12 */
            "  if v % 4 == 0 then return nil end\n"      /* 13 */
            "  return { i = v, u = ctx.rng:random() }\n" /* 14 */
            "end\n"                                      /* 15 */
            "function T.rows()\n"                        /* 16 */
            "  local k = 0\n"                            /* 17 */
            "  return function()\n"                      /* 18 */
            "    k = k + 1\n"                            /* 19 */
            "    if k == 7 and io.open(os.getenv('SLUICE_TEST_BOOM') or '') "
            "then\n"                                     /* 20 */
            "      error('row boom at ' .. k)\n"         /* 21 */
            "    end\n"                                  /* 22 */
            "    if k <= 60 then return { i = k } end\n" /* 23 */
            "  end\n"                                    /* 24 */
            "end\n"                                      /* 25 */
            "function T.even_boom(s)\n"                  /* 26 */
            "  if s.i == 100 and io.open(os.getenv('SLUICE_TEST_BOOM') or '') "
            "then\n"
            "    error('filter boom at ' .. s.i)\n" /* 28 */
            "  end\n"
            "  return s.i % 2 == 0\n"
            "end\n"
            "return T\n";

static lua_State *g_decl;

static void close_decl(void) {
  if (g_decl) lua_close(g_decl);
  g_decl = NULL;
}

static sl__shipped *ship(const char *name, const char *what) {
  if (!g_decl) {
    lua_State *L = luaL_newstate();
    ASSERT_NOT_NULL(L);
    luaL_openlibs(L);
    /* sl__lua_ship runs the Lua encoder (require "sluice.ship"). */
    lua_getglobal(L, "package");
    lua_pushstring(L, SLUICE_SOURCE_DIR "/lua/?.lua;" SLUICE_SOURCE_DIR
                                        "/lua/?/init.lua");
    lua_setfield(L, -2, "path");
    lua_pop(L, 1);
    if (luaL_loadbuffer(L, FNS, sizeof FNS - 1, "@resume_fns.lua") != 0 ||
        lua_pcall(L, 0, 1, 0) != 0)
      test_fail(__FILE__, __LINE__, "loading the functions: %s",
                lua_tostring(L, -1));
    lua_setglobal(L, "T");
    g_decl = L;
    atexit(close_decl);
  }
  lua_getglobal(g_decl, "T");
  lua_getfield(g_decl, -1, name);
  sl__shipped *f = NULL;
  ASSERT_OK(sl__lua_ship(g_decl, -1, what, &f));
  lua_pop(g_decl, 2);
  return f;
}

/* real: the `sluice` package (ctx.rng, the parser), else the test double. */
static sl__lua_env *env(bool real) {
  sl__lua_env *e =
      real ? sl__lua_env_new(SLUICE_SOURCE_DIR "/lua/?.lua;" SLUICE_SOURCE_DIR
                                               "/lua/?/init.lua",
                             NULL)
           : sl__lua_env_new(SLUICE_SOURCE_DIR "/tests/lua/?.lua", NULL);
  ASSERT_NOT_NULL(e);
  if (!real) ASSERT_OK(sl__lua_env_set_preload(e, 0));
  return e;
}

typedef struct lua_case {
  sl__lua_kind kind;
  const char *fn;
  int threads, ordered;
  bool real;
  uint64_t seed, epoch;
} lua_case;

/* {line: bytes} samples "0".."n-1", the parser's input. */
static sl_reader *lines(int n) {
  sl_schema *sc = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  ASSERT_OK(sl_schema_add(sc, "line", SL_BYTES, 1, &var));
  sl_sample **v = calloc((size_t)n, sizeof *v);
  ASSERT_NOT_NULL(v);
  for (int i = 0; i < n; i++) {
    char buf[16];
    int len = snprintf(buf, sizeof buf, "%d", i);
    int64_t shape = len;
    void *d;
    v[i] = sl_sample_new(sc);
    ASSERT_NOT_NULL(v[i]);
    ASSERT_OK(sl_sample_alloc(v[i], 0, 1, &shape, &d));
    memcpy(d, buf, (size_t)len);
  }
  sl_reader *r = NULL;
  ASSERT_OK(sl_reader_from_array(v, (size_t)n, sc, &r));
  for (int i = 0; i < n; i++)
    sl_sample_release(v[i]);
  free(v);
  sl_schema_release(sc);
  return r;
}

static sl_reader *lua_stage_on(sl_reader *up, const lua_case *c) {
  sl__shipped *f = ship(c->fn, c->kind == SL__LUA_FILTER  ? "filter"
                               : c->kind == SL__LUA_PARSE ? "parser"
                                                          : "map");
  sl__lua_env *e = env(c->real);
  sl__lua_stage_opts o = {.threads = c->threads,
                          .ordered = c->ordered,
                          .seed = c->seed,
                          .epoch = c->epoch};
  sl_reader *r = NULL;
  int rc = sl__lua_stage(up, c->kind, f, e, &o, NULL, &r);
  sl__shipped_release(f);
  sl__lua_env_release(e);
  if (rc < 0)
    test_fail(__FILE__, __LINE__, "sl__lua_stage(%s): %s (%s)", c->fn,
              sl_err_name(rc), sl_last_error());
  return r;
}

static sl_reader *build_lua(void *ud) {
  const lua_case *c = ud;
  return lua_stage_on(
      c->kind == SL__LUA_PARSE ? lines(100) : test_range_reader(100), c);
}

static void
t_ordered_lua_map_filter_and_parser_resume_exactly_at_1_2_4_threads(void) {
  for (int t = 1; t <= 4; t *= 2) {
    lua_case m = {SL__LUA_MAP, "note", t, 1, false, 5, 2};
    lua_case f = {SL__LUA_FILTER, "third", t, 1, false, 0, 0};
    lua_case p = {SL__LUA_PARSE, "parse", t, 1, true, 9, 0};
    test_resume_check(build_lua, &m, 3, k_cuts, NCUTS, 4096);
    test_resume_check(build_lua, &f, 3, k_cuts, NCUTS, 4096);
    test_resume_check(build_lua, &p, 3, k_cuts, NCUTS, 4096);
  }
}

static void
t_a_random_map_draws_after_a_restore_what_it_drew_uninterrupted(void) {
  lua_case m = {SL__LUA_MAP, "random", 2, 1, true, 42, 7};
  test_resume_check(build_lua, &m, 3, k_cuts, NCUTS, 4096);
}

/* The digests of the rest of an uninterrupted run of `c` after `cut`
 * samples (one pass), into d[] (returns how many). */
static size_t rest_digests(const lua_case *c, uint64_t cut, uint64_t *d,
                           size_t cap) {
  sl_reader *r = build_lua((void *)c);
  size_t n = 0;
  for (uint64_t i = 0;; i++) {
    sl_sample *s = NULL;
    int rc = sl_reader_next(r, &s);
    if (rc == SL_EOF) break;
    ASSERT_OK(rc);
    if (i >= cut) {
      ASSERT_TRUE(n < cap);
      d[n++] = test_sample_digest(s);
    }
    sl_sample_release(s);
  }
  sl_reader_destroy(r);
  return n;
}

static void t_a_state_saved_with_4_threads_restores_into_1_or_2(void) {
  for (int kind = 0; kind < 2; kind++) {
    lua_case four = {kind ? SL__LUA_FILTER : SL__LUA_MAP,
                     kind ? "third" : "note",
                     4,
                     1,
                     false,
                     3,
                     1};
    uint64_t want[100];
    size_t n = rest_digests(&four, 37, want, 100);
    for (int t = 1; t <= 2; t++) {
      void *st = NULL;
      size_t len = 0;
      read_then_save(build_lua(&four), 37, NULL, &st, &len);
      lua_case fewer = four;
      fewer.threads = t;
      sl_reader *b = build_lua(&fewer);
      ASSERT_OK(sl_reader_restore(b, st, len));
      sl_free(st);
      for (size_t i = 0; i < n; i++) {
        sl_sample *s = NULL;
        ASSERT_OK(sl_reader_next(b, &s));
        ASSERT_EQ(test_sample_digest(s), want[i]);
        sl_sample_release(s);
      }
      sl_sample *s = NULL;
      ASSERT_RC(sl_reader_next(b, &s), SL_EOF);
      sl_reader_destroy(b);
    }
  }
}

static void
t_unordered_lua_map_and_filter_deliver_each_remaining_sample_once(void) {
  int64_t mapped[100], kept[100];
  size_t nk = 0;
  for (int64_t i = 0; i < 100; i++) {
    mapped[i] = i * 10;
    if (i % 2 == 0) kept[nk++] = i;
  }
  for (size_t c = 0; c < 4; c++) {
    uint64_t cut = (uint64_t[]){0, 1, 30, 50}[c];
    lua_case m4 = {SL__LUA_MAP, "times10", 4, 0, false, 0, 0};
    lua_case m1 = m4, f4 = {SL__LUA_FILTER, "even", 4, 0, false, 0, 0};
    lua_case f2 = f4;
    m1.threads = 1;
    f2.threads = 2;
    expect_each_once(build_lua(&m4), build_lua(&m1), cut, mapped, 100);
    expect_each_once(build_lua(&f4), build_lua(&f2), cut, kept, nk);
  }
}

static void
t_an_unordered_lua_map_under_a_shuffle_refuses_with_a_message(void) {
  lua_case m = {SL__LUA_MAP, "times10", 2, 0, false, 0, 0};
  sl_reader *r = build_lua(&m);
  ASSERT_OK(sl_shuffle(r, 8, 1, &r));
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(r, &s));
  sl_sample_release(s);
  void *st = NULL;
  size_t len = 0;
  ASSERT_RC(sl_reader_save(r, &st, &len), SL_EUNSUPPORTED);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "map (resume_fns.lua:6)"));
  ASSERT_NOT_NULL(strstr(sl_last_error(), "not reproducible"));
  ASSERT_NOT_NULL(strstr(sl_last_error(), "use ordered=true"));
  sl_reader_destroy(r);
}

static sl_reader *build_rows(void *ud) {
  (void)ud;
  sl__shipped *f = ship("rows", "reader");
  sl__lua_env *e = env(false);
  sl_reader *r = NULL;
  int rc = sl__lua_reader(f, e, 4, NULL, &r);
  sl__shipped_release(f);
  sl__lua_env_release(e);
  if (rc < 0)
    test_fail(__FILE__, __LINE__, "sl__lua_reader: %s (%s)", sl_err_name(rc),
              sl_last_error());
  return r;
}

static void t_the_lua_reader_resumes_by_replaying_its_pass(void) {
  static const uint64_t cuts[] = {0, 1, 30, 59, 60, 61, 100, 179};
  test_resume_check(build_rows, NULL, 3, cuts, sizeof cuts / sizeof *cuts,
                    4096);
}

/* The functions above fail while the file $SLUICE_TEST_BOOM exists: the
 * variable is set here, before any thread runs (getenv in the workers then
 * races with nothing); the file is made by boom(true). */
static const char *boom_path(void) {
  const char *path = test_tmppath("resume_script", "boom");
  setenv("SLUICE_TEST_BOOM", path, 1);
  return path;
}

static void boom(const char *path, bool on) {
  if (on)
    test_write_file(path, "", 0);
  else
    remove(path);
}

static void
t_an_error_in_lua_during_the_restores_replay_carries_its_traceback(void) {
  const char *path = boom_path();
  void *st = NULL;
  size_t len = 0;
  read_then_save(build_rows(NULL), 20, NULL, &st, &len);
  sl_reader *b = build_rows(NULL);
  boom(path, true);
  int rc = sl_reader_restore(b, st, len);
  /* The replay runs on the restoring thread (prefetch is stopped). */
  if (rc == SL_OK) {
    sl_sample *s = NULL;
    rc = sl_reader_next(b, &s);
  }
  boom(path, false);
  ASSERT_RC(rc, SL_ELUA);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "row boom at 7"));
  ASSERT_NOT_NULL(strstr(sl_last_error(), "resume_fns.lua:21"));
  ASSERT_NOT_NULL(strstr(sl_last_error(), "traceback"));
  sl_free(st);
  sl_reader_destroy(b);
}

/* A Lua filter far behind the position it is saved at (a prefetch of big
 * batches above it holds more than its log of 1024): the restore replays
 * the pass from its start through the Lua function. */
static sl_reader *build_far(void *ud) {
  (void)ud;
  lua_case f = {SL__LUA_FILTER, "even_boom", 2, 1, false, 0, 0};
  sl_reader *r = lua_stage_on(test_range_reader(20000), &f);
  if (sl_batch(r, 1500, NULL, &r) < 0 || sl_prefetch(r, 3, &r) < 0) return NULL;
  return r;
}

static void t_a_lua_filter_far_behind_replays_its_pass_exactly(void) {
  static const uint64_t cuts[] = {1, 2, 5};
  /* the prefetch fills before each save: the filter is then far behind
   * (a save before that could see a log entry, and the second a replay) */
  test_resume_settle_us = 300000;
  test_resume_check(build_far, NULL, 2, cuts, sizeof cuts / sizeof *cuts, 0);
  test_resume_settle_us = 0;
}

static void
t_an_error_in_a_lua_filter_during_the_restores_replay_has_its_traceback(void) {
  const char *path = boom_path();
  sl_reader *a = build_far(NULL);
  ASSERT_NOT_NULL(a);
  void *st = NULL;
  size_t len = 0;
  sl_sample *s = NULL;
  ASSERT_OK(sl_reader_next(a, &s));
  sl_sample_release(s);
  test_sleep_us(300000); /* prefetch fills: the filter is far ahead */
  read_then_save(a, 0, NULL, &st, &len);
  sl_reader *b = build_far(NULL);
  ASSERT_NOT_NULL(b);
  boom(path, true);
  int rc = sl_reader_restore(b, st, len);
  boom(path, false);
  ASSERT_RC(rc, SL_ELUA);
  ASSERT_NOT_NULL(strstr(sl_last_error(), "filter boom at 100"));
  ASSERT_NOT_NULL(strstr(sl_last_error(), "resume_fns.lua:28"));
  ASSERT_NOT_NULL(strstr(sl_last_error(), "traceback"));
  sl_free(st);
  sl_reader_destroy(b);
}

#else /* the Lua layer left out: the Lua tests pass vacuously */
static void
t_ordered_lua_map_filter_and_parser_resume_exactly_at_1_2_4_threads(void) {}
static void
t_a_random_map_draws_after_a_restore_what_it_drew_uninterrupted(void) {}
static void t_a_state_saved_with_4_threads_restores_into_1_or_2(void) {}
static void
t_unordered_lua_map_and_filter_deliver_each_remaining_sample_once(void) {}
static void
t_an_unordered_lua_map_under_a_shuffle_refuses_with_a_message(void) {}
static void t_the_lua_reader_resumes_by_replaying_its_pass(void) {}
static void
t_an_error_in_lua_during_the_restores_replay_carries_its_traceback(void) {}
static void t_a_lua_filter_far_behind_replays_its_pass_exactly(void) {}
static void
t_an_error_in_a_lua_filter_during_the_restores_replay_has_its_traceback(void) {}
#endif

TEST(ordered_lua_map_filter_and_parser_resume_exactly_at_1_2_4_threads) {
  t_ordered_lua_map_filter_and_parser_resume_exactly_at_1_2_4_threads();
}
TEST(a_random_map_draws_after_a_restore_what_it_drew_uninterrupted) {
  t_a_random_map_draws_after_a_restore_what_it_drew_uninterrupted();
}
TEST(a_state_saved_with_4_threads_restores_into_1_or_2) {
  t_a_state_saved_with_4_threads_restores_into_1_or_2();
}
TEST(unordered_lua_map_and_filter_deliver_each_remaining_sample_once) {
  t_unordered_lua_map_and_filter_deliver_each_remaining_sample_once();
}
TEST(an_unordered_lua_map_under_a_shuffle_refuses_with_a_message) {
  t_an_unordered_lua_map_under_a_shuffle_refuses_with_a_message();
}
TEST(the_lua_reader_resumes_by_replaying_its_pass) {
  t_the_lua_reader_resumes_by_replaying_its_pass();
}
TEST(an_error_in_lua_during_the_restores_replay_carries_its_traceback) {
  t_an_error_in_lua_during_the_restores_replay_carries_its_traceback();
}
TEST(a_lua_filter_far_behind_replays_its_pass_exactly) {
  t_a_lua_filter_far_behind_replays_its_pass_exactly();
}
TEST(an_error_in_a_lua_filter_during_the_restores_replay_has_its_traceback) {
  t_an_error_in_a_lua_filter_during_the_restores_replay_has_its_traceback();
}
