/* test_lua_faults.c - Lua decorators that fail (src/script: lua_stage.c,
 * lua_env.c's sl__lua_pcall, lua_deadline.c): errors raised with strings
 * and with non-string values, a decorator running out of memory, and a
 * runaway decorator (an infinite loop, compiled or not, even one that
 * swallows errors with pcall) stopped by the per-sample deadline.  In every
 * case the samples before the failure arrive, then the error at its place
 * with a message naming the decorator's source line, and the stage can be
 * reset and destroyed: nothing hangs.
 *
 * Like test_lua_stage.c, the stages run against the test double
 * tests/lua/sluice/worker.lua (the executable exports the sl_* symbols). */
#include "test.h"
#include "test_util.h"

#include "core/internal.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>
#include <lualib.h>
#include <time.h>

/* Line numbers matter: the tests look for "lua_faults.lua:<line>".  Every
 * function fails at sample 3 of pass 0 only (s.p is the pass). */
static const char FNS[] =
    "local T = {}\n"                                                   /* 1 */
    "local function at3(s) return s.i == 3 and s.p == 0 end\n"         /* 2 */
    "function T.err_string(s)\n"                                       /* 3 */
    "  if at3(s) then error('bad sample ' .. s.i) end\n"               /* 4 */
    "  return { i = s.i }\n"                                           /* 5 */
    "end\n"                                                            /* 6 */
    "function T.err_table(s)\n"                                        /* 7 */
    "  if at3(s) then error({ code = 7 }) end\n"                       /* 8 */
    "  return { i = s.i }\n"                                           /* 9 */
    "end\n"                                                            /* 10 */
    "function T.err_nil(s)\n"                                          /* 11 */
    "  if at3(s) then error(nil) end\n"                                /* 12 */
    "  return { i = s.i }\n"                                           /* 13 */
    "end\n"                                                            /* 14 */
    "function T.err_number(s)\n"                                       /* 15 */
    "  if at3(s) then error(42.5) end\n"                               /* 16 */
    "  return { i = s.i }\n"                                           /* 17 */
    "end\n"                                                            /* 18 */
    "function T.err_tostring(s)\n"                                     /* 19 */
    "  if at3(s) then\n"                                               /* 20 */
    "    error(setmetatable({}, { __tostring = function()\n"           /* 21 */
    "      return 'custom error object' end }))\n"                     /* 22 */
    "  end\n"                                                          /* 23 */
    "  return { i = s.i }\n"                                           /* 24 */
    "end\n"                                                            /* 25 */
    "function T.err_bad_tostring(s)\n"                                 /* 26 */
    "  if at3(s) then\n"                                               /* 27 */
    "    error(setmetatable({}, { __tostring = function()\n"           /* 28 */
    "      error('tostring fails too') end }))\n"                      /* 29 */
    "  end\n"                                                          /* 30 */
    "  return { i = s.i }\n"                                           /* 31 */
    "end\n"                                                            /* 32 */
    "function T.oom(s)\n"                                              /* 33 */
    "  if at3(s) then return { i = #string.rep('x', 2^31 - 2) } end\n" /* 34 */
    "  return { i = s.i }\n"                                           /* 35 */
    "end\n"                                                            /* 36 */
    "function T.spin(s)\n"                                             /* 37 */
    "  if at3(s) then\n"                                               /* 38 */
    "    while true do end\n"                                          /* 39 */
    "  end\n"                                                          /* 40 */
    "  return { i = s.i }\n"                                           /* 41 */
    "end\n"                                                            /* 42 */
    "function T.spin_swallow(s)\n"                                     /* 43 */
    "  if at3(s) then\n"                                               /* 44 */
    "    while true do pcall(function() while true do end end) end\n"  /* 45 */
    "  end\n"                                                          /* 46 */
    "  return { i = s.i }\n"                                           /* 47 */
    "end\n"                                                            /* 48 */
    "local function helper(n)\n"                                       /* 49 */
    "  local acc = 0\n"                                                /* 50 */
    "  while true do acc = (acc + n) % 7 end\n"                        /* 51 */
    "end\n"                                                            /* 52 */
    "function T.spin_in_helper(s)\n"                                   /* 53 */
    "  if at3(s) then helper(s.i) end\n"                               /* 54 */
    "  return { i = s.i }\n"                                           /* 55 */
    "end\n"                                                            /* 56 */
    "function T.spin_filter(s)\n"                                      /* 57 */
    "  if at3(s) then while true do end end\n"                         /* 58 */
    "  return true\n"                                                  /* 59 */
    "end\n"                                                            /* 60 */
    "function T.busy(s)\n"                                             /* 61 */
    "  local acc = 0\n"                                                /* 62 */
    "  for k = 1, 2000 do acc = (acc * 31 + k + s.i) % 1000003 end\n"  /* 63 */
    "  return { i = s.i, acc = acc }\n"                                /* 64 */
    "end\n"                                                            /* 65 */
    "function T.spin_all(s) while true do end end\n"                   /* 66 */
    "function T.identity(s) return s end\n"                           /* 67 */
    "return T\n";

static lua_State *g_decl;

static void close_decl(void) {
  if (g_decl) lua_close(g_decl);
  g_decl = NULL;
}

static sl__shipped *ship(const char *name, const char *what) {
  if (!g_decl) {
    g_decl = luaL_newstate();
    ASSERT_NOT_NULL(g_decl);
    luaL_openlibs(g_decl);
    if (luaL_loadbuffer(g_decl, FNS, sizeof FNS - 1, "@lua_faults.lua") != 0 ||
        lua_pcall(g_decl, 0, 1, 0) != 0)
      test_fail(__FILE__, __LINE__, "loading the test functions: %s",
                lua_tostring(g_decl, -1));
    lua_setglobal(g_decl, "T");
    atexit(close_decl);
  }
  lua_getglobal(g_decl, "T");
  lua_getfield(g_decl, -1, name);
  ASSERT_TRUE(lua_isfunction(g_decl, -1));
  sl__shipped *f = NULL;
  ASSERT_OK(sl__lua_ship(g_decl, -1, what, &f));
  lua_pop(g_decl, 2);
  return f;
}

/* {i: i64, p: i64}: i = 0..n-1, p = the pass. */
typedef struct gen {
  sl_schema *schema;
  int64_t n, k, pass;
} gen;

static int gen_next(void *ud, sl_sample **out) {
  gen *g = ud;
  if (g->k == g->n) return SL_EOF;
  sl_sample *s = sl_sample_new(g->schema);
  int64_t *i, *p;
  if (!s) return SL_ENOMEM;
  int rc = sl_sample_alloc(s, 0, 0, NULL, (void **)&i);
  if (rc == SL_OK) rc = sl_sample_alloc(s, 1, 0, NULL, (void **)&p);
  if (rc < 0) {
    sl_sample_release(s);
    return rc;
  }
  *i = g->k++;
  *p = g->pass;
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

static sl_reader *numbers(int64_t n) {
  gen *g = calloc(1, sizeof *g);
  ASSERT_NOT_NULL(g);
  g->n = n;
  g->schema = sl_schema_new();
  ASSERT_OK(sl_schema_add(g->schema, "i", SL_I64, 0, NULL));
  ASSERT_OK(sl_schema_add(g->schema, "p", SL_I64, 0, NULL));
  sl_reader *r;
  ASSERT_OK(sl_reader_from_generator(g->schema, gen_next, gen_reset, gen_free,
                                     g, &r));
  return r;
}

static sl_reader *stage(sl__lua_kind kind, const char *fn, int threads,
                        double deadline, int64_t n) {
  sl__shipped *f = ship(fn, kind == SL__LUA_MAP ? "map" : "filter");
  sl__lua_env *e = sl__lua_env_new(SLUICE_SOURCE_DIR "/tests/lua/?.lua", NULL);
  ASSERT_NOT_NULL(e);
  ASSERT_OK(sl__lua_env_set_preload(e, 0));
  sl__lua_stage_opts o = {
      .threads = threads, .ordered = 1, .deadline = deadline};
  sl_reader *r = NULL;
  int rc = sl__lua_stage(numbers(n), kind, f, e, &o, NULL, &r);
  sl__shipped_release(f);
  sl__lua_env_release(e);
  if (rc < 0)
    test_fail(__FILE__, __LINE__, "sl__lua_stage(%s): %s (%s)", fn,
              sl_err_name(rc), sl_last_error());
  return r;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Samples 0, 1, 2 arrive, then sample 3's error: returns its code, the
 * message in msg.  The error is sticky. */
static int first_three_then_error(sl_reader *r, char *msg, size_t size) {
  for (int64_t k = 0; k < 3; k++) {
    sl_sample *s;
    int rc = sl_reader_next(r, &s);
    if (rc != SL_OK)
      test_fail(__FILE__, __LINE__, "sample %lld: %s (%s)", (long long)k,
                sl_err_name(rc), sl_last_error());
    ASSERT_EQ(test_sample_i64(s, sl_sample_index(s, "i")), k);
    sl_sample_release(s);
  }
  sl_sample *s = NULL;
  int rc = sl_reader_next(r, &s);
  ASSERT_NULL(s);
  snprintf(msg, size, "%s", sl_last_error());
  /* Sticky: the same code and message again. */
  ASSERT_RC(sl_reader_next(r, &s), rc);
  ASSERT_STREQ(sl_last_error(), msg);
  return rc;
}

/* After the failing pass, a reset gives a complete pass (the functions
 * fail in pass 0 only): the stage and its worker states survived. */
static void full_pass_after_reset(sl_reader *r, int64_t n) {
  ASSERT_OK(sl_reader_reset(r));
  for (int64_t k = 0; k < n; k++) {
    sl_sample *s;
    ASSERT_OK(sl_reader_next(r, &s));
    sl_sample_release(s);
  }
  sl_sample *s;
  ASSERT_RC(sl_reader_next(r, &s), SL_EOF);
}

/* --- errors --------------------------------------------------------------- */

TEST(errors_of_every_type_arrive_in_order_with_their_message) {
  static const struct {
    const char *fn, *want;
    int line; /* of the error() call: the traceback names it */
  } cases[] = {
      {"err_string", "lua_faults.lua:4: bad sample 3", 4},
      {"err_table", "(error object is a table value)", 8},
      {"err_nil", "(error object is a nil value)", 12},
      {"err_number", "42.5", 16},
      {"err_tostring", "custom error object", 21},
      /* __tostring raising inside the handler: still a clean error */
      {"err_bad_tostring", "lua_faults.lua:", 0},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
    for (int threads = 1; threads <= 3; threads += 2) {
      sl_reader *r = stage(SL__LUA_MAP, cases[c].fn, threads, 0, 20);
      char msg[1024];
      ASSERT_RC(first_three_then_error(r, msg, sizeof msg), SL_ELUA);
      ASSERT_CONTAINS(msg, "map (lua_faults.lua:");
      ASSERT_CONTAINS(msg, cases[c].want);
      if (cases[c].line) {
        char at[64];
        snprintf(at, sizeof at, "lua_faults.lua:%d", cases[c].line);
        ASSERT_CONTAINS(msg, at);
      }
      full_pass_after_reset(r, 20);
      sl_reader_destroy(r);
    }
}

TEST(out_of_memory_in_a_decorator_is_reported_and_recovers) {
  sl_reader *r = stage(SL__LUA_MAP, "oom", 2, 0, 20);
  char msg[1024];
  ASSERT_RC(first_three_then_error(r, msg, sizeof msg), SL_ENOMEM);
  ASSERT_CONTAINS(msg, "map (lua_faults.lua:33): not enough memory");
  full_pass_after_reset(r, 20);
  sl_reader_destroy(r);
}

/* --- the deadline ----------------------------------------------------------
 */

/* A runaway call is stopped after about `deadline`; the message names the
 * stage (and where its function is defined), the deadline and the line
 * that was running. */
static void expect_deadline(sl__lua_kind kind, const char *fn, int threads,
                            const char *defined, const char *running) {
  double t0 = now_s();
  sl_reader *r = stage(kind, fn, threads, 0.2, 20);
  char msg[1024];
  ASSERT_RC(first_three_then_error(r, msg, sizeof msg), SL_ELUA);
  double took = now_s() - t0;
  ASSERT_CONTAINS(msg, defined);
  ASSERT_CONTAINS(msg, "deadline of 0.2 s exceeded");
  ASSERT_CONTAINS(msg, running);
  ASSERT_TRUE(took >= 0.2 && took < 30);
  printf("%s: stopped after %.2f s: %.120s...\n", fn, took, msg);
  full_pass_after_reset(r, 20);
  sl_reader_destroy(r);
}

TEST(runaway_map_is_stopped_by_its_deadline) {
  expect_deadline(SL__LUA_MAP, "spin", 1, "map (lua_faults.lua:37)",
                  "running lua_faults.lua:39");
  expect_deadline(SL__LUA_MAP, "spin", 3, "map (lua_faults.lua:37)",
                  "running lua_faults.lua:39");
}

TEST(deadline_cannot_be_swallowed_by_pcall) {
  expect_deadline(SL__LUA_MAP, "spin_swallow", 2, "map (lua_faults.lua:43)",
                  "deadline of 0.2 s");
}

TEST(deadline_stops_loops_in_called_functions) {
  expect_deadline(SL__LUA_MAP, "spin_in_helper", 1, "map (lua_faults.lua:53)",
                  "running lua_faults.lua:51");
}

TEST(runaway_filter_is_stopped_by_its_deadline) {
  expect_deadline(SL__LUA_FILTER, "spin_filter", 2,
                  "filter (lua_faults.lua:57)", "running lua_faults.lua:58");
}

/* With a deadline set, calls within it give exactly what they give without
 * one (the JIT is off, nothing else changes). */
TEST(deadline_leaves_calls_within_it_alone) {
  sl_reader *a = stage(SL__LUA_MAP, "busy", 2, 0, 500);
  sl_reader *b = stage(SL__LUA_MAP, "busy", 2, 30, 500);
  for (int64_t k = 0; k < 500; k++) {
    sl_sample *x, *y;
    ASSERT_OK(sl_reader_next(a, &x));
    ASSERT_OK(sl_reader_next(b, &y));
    int ia = sl_sample_index(x, "acc"), ib = sl_sample_index(y, "acc");
    ASSERT_EQ(test_sample_i64(x, ia), test_sample_i64(y, ib));
    sl_sample_release(x);
    sl_sample_release(y);
  }
  sl_reader_destroy(a);
  sl_reader_destroy(b);
}

/* Destroying a stage whose workers are deep in long calls does not wait
 * for the deadline: the hook sees the stage stopping. */
TEST(destroy_interrupts_running_calls_when_a_deadline_is_set) {
  /* (No sample is read: a worker deposits a batch at its end, so samples
   * batched with the runaway one would wait for it.) */
  sl_reader *r = stage(SL__LUA_MAP, "spin", 2, 600, 20);
  struct timespec nap = {0, 100 * 1000000}; /* let a worker enter the loop */
  nanosleep(&nap, NULL);
  double t0 = now_s();
  sl_reader_destroy(r);
  double took = now_s() - t0;
  printf("destroy during a runaway call: %.3f s\n", took);
  ASSERT_TRUE(took < 10);
  /* Reset too: every call of every worker runs away, and reset returns.
   * (A filter: a map without a schema would wait for its first output.) */
  r = stage(SL__LUA_FILTER, "spin_all", 2, 600, 20);
  nanosleep(&nap, NULL);
  t0 = now_s();
  ASSERT_OK(sl_reader_reset(r));
  sl_reader_destroy(r);
  ASSERT_TRUE(now_s() - t0 < 10);
}

/* The deadline (or a stop) raises only in the decorator's own code, never
 * in the library code around it: sluice.worker's per-sample protocol moves
 * sample references between C and Lua in steps, and an error between two
 * steps would leak one.  A "library" module runs 30000 interpreted steps,
 * calls the decorator, then 30000 more; with the deadline already past
 * (and the hook then firing at every instruction) the error must come from
 * the decorator's first line, after all of the library's first steps. */
static const char LIB[] =
    "local M = { steps = 0 }\n"
    "function M.call(fn, x)\n"
    "  for k = 1, 30000 do M.steps = M.steps + 1 end\n"
    "  local r = fn(x)\n"
    "  for k = 1, 30000 do M.steps = M.steps + 1 end\n"
    "  return r\n"
    "end\n"
    "jit.off(M.call)\n"
    "return M\n";

static void expect_raised_in_decorator(double seconds, bool stop,
                                       const char *want) {
  lua_State *L = luaL_newstate();
  ASSERT_NOT_NULL(L);
  luaL_openlibs(L);
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  ASSERT_EQ(luaL_loadbuffer(L, LIB, sizeof LIB - 1, "@lib.lua"), 0);
  ASSERT_EQ(lua_pcall(L, 0, 1, 0), 0);
  lua_setfield(L, -2, "lib"); /* a module: package.loaded.lib */
  lua_pop(L, 2);
  static const char USER[] = "return function(x)\n  return x + 1\nend\n";
  ASSERT_EQ(luaL_loadbuffer(L, USER, sizeof USER - 1, "@user.lua"), 0);
  ASSERT_EQ(lua_pcall(L, 0, 1, 0), 0);
  int fn_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  atomic_bool stopping = stop;
  ASSERT_OK(sl__lua_deadline_set(L, seconds, &stopping, fn_ref, "map",
                                 "user.lua:1"));
  lua_getglobal(L, "package");
  lua_getfield(L, -1, "loaded");
  lua_getfield(L, -1, "lib");
  int lib = lua_gettop(L);
  lua_getfield(L, lib, "call");
  lua_rawgeti(L, LUA_REGISTRYINDEX, fn_ref);
  lua_pushnumber(L, 1);
  ASSERT_RC(sl__lua_pcall(L, 2, 1, "map", "user.lua:1"), SL_ELUA);
  ASSERT_CONTAINS(sl_last_error(), want);
  ASSERT_CONTAINS(sl_last_error(), "(the call was running user.lua:2)");
  lua_getfield(L, lib, "steps");
  ASSERT_EQ((long)lua_tonumber(L, -1), 30000L);
  lua_close(L);
}

TEST(deadline_fires_in_the_decorator_never_in_the_library_around_it) {
  expect_raised_in_decorator(1e-9, false, "deadline of 1e-09 s exceeded");
  expect_raised_in_decorator(3600, true, "stopped: the stage is closing");
}

/* The same at the stage: stops arriving while workers run a cheap map
 * through sluice.worker's hand-over, with the hook looking every 7
 * instructions so that it lands in every step of it.  Before the fix this
 * leaked a sample in about 1 destroy in 15 (found by the leak check after
 * each destroy, under ASan). */
TEST(stopping_mid_call_never_leaks_a_sample) {
  sl__lua_deadline_hook_count(7);
  for (int it = 0; it < 300; it++) {
    sl__shipped *f = ship("identity", "map");
    sl__lua_env *e =
        sl__lua_env_new(SLUICE_SOURCE_DIR "/tests/lua/?.lua", NULL);
    ASSERT_NOT_NULL(e);
    ASSERT_OK(sl__lua_env_set_preload(e, 0));
    sl__lua_stage_opts o = {
        .threads = 2, .ordered = it % 2, .deadline = 600, .queue = 4};
    sl_reader *r = NULL;
    ASSERT_OK(sl__lua_stage(numbers(1000000), SL__LUA_MAP, f, e, &o, NULL, &r));
    sl__shipped_release(f);
    sl__lua_env_release(e);
    for (int k = 0; k < 50 + it % 200; k++) {
      sl_sample *s;
      ASSERT_OK(sl_reader_next(r, &s));
      sl_sample_release(s);
    }
    sl_reader_destroy(r); /* workers are mid-call: the consumer kept them
                             busy */
    if (test_leaked())
      test_fail(__FILE__, __LINE__, "destroy %d leaked", it);
  }
  sl__lua_deadline_hook_count(0);
}

TEST(deadline_option_is_checked) {
  sl__shipped *f = ship("spin", "map");
  sl__lua_env *e = sl__lua_env_new(SLUICE_SOURCE_DIR "/tests/lua/?.lua", NULL);
  ASSERT_NOT_NULL(e);
  double bad[] = {-1, 1e12, 1e6 + 1, 0.0 / 0.0};
  for (int i = 0; i < 4; i++) {
    sl__lua_stage_opts o = {.threads = 1, .ordered = 1, .deadline = bad[i]};
    sl_reader *r = NULL;
    ASSERT_RC(sl__lua_stage(numbers(5), SL__LUA_MAP, f, e, &o, NULL, &r),
              SL_EINVAL);
    ASSERT_CONTAINS(sl_last_error(),
                    "option 'deadline' must be a number of seconds in [0, "
                    "1e+06]");
    ASSERT_NULL(r);
  }
  sl__shipped_release(f);
  sl__lua_env_release(e);
}
