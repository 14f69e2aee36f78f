/* test_lua_ship.c - the Lua host's lower half: worker states and their env,
 * shipping functions between Lua states (bytecode + upvalues, identity,
 * modules, named functions, the unshippable-upvalue messages), concurrent
 * unshipping of one blob, and sl__lua_pcall's messages and tracebacks.
 *
 * Every function is shipped from a declaring state that is closed before
 * the blob is unshipped, so nothing can silently point back into it.
 * Chunks are loaded as "=test.lua", so short_src is "test.lua" and line
 * numbers in the expected messages count the "\n"s of the chunk. */
#include "test.h"

#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <math.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

/* --- helpers -------------------------------------------------------------- */

static lua_State *new_state(void) {
  lua_State *L = luaL_newstate();
  ASSERT_NOT_NULL(L);
  luaL_openlibs(L);
  return L;
}

/* Runs `src` (chunk name "=test.lua") and leaves its one result on top. */
static void run_chunk(lua_State *L, const char *src) {
  if (luaL_loadbuffer(L, src, strlen(src), "=test.lua") != 0 ||
      lua_pcall(L, 0, 1, 0) != 0)
    test_fail(__FILE__, __LINE__, "chunk failed: %s", lua_tostring(L, -1));
}

/* Ships the function returned by `src` out of a fresh state, closed before
 * returning. */
static sl__shipped *ship_src(const char *src) {
  lua_State *A = new_state();
  run_chunk(A, src);
  int top = lua_gettop(A);
  sl__shipped *f = NULL;
  ASSERT_OK(sl__lua_ship(A, -1, "map", &f));
  ASSERT_EQ(lua_gettop(A), top);
  ASSERT_NOT_NULL(f);
  lua_close(A);
  return f;
}

/* Shipping `src`'s function fails with exactly `msg`. */
static void expect_ship_error(const char *src, const char *msg) {
  lua_State *A = new_state();
  run_chunk(A, src);
  int top = lua_gettop(A);
  sl__shipped *f = (sl__shipped *)1;
  ASSERT_RC(sl__lua_ship(A, -1, "map", &f), SL_ELUA);
  ASSERT_NULL(f);
  ASSERT_STREQ(sl_last_error(), msg);
  ASSERT_EQ(lua_gettop(A), top);
  lua_close(A);
}

/* A fresh state with the shipped function on top. */
static lua_State *unship_new(const sl__shipped *f) {
  lua_State *B = new_state();
  ASSERT_OK(sl__lua_unship(B, f));
  ASSERT_EQ(lua_gettop(B), 1);
  ASSERT_TRUE(lua_isfunction(B, -1));
  return B;
}

/* Calls the function on top of L with no arguments, expecting `n` results. */
static void call0(lua_State *L, int n) {
  if (lua_pcall(L, 0, n, 0) != 0)
    test_fail(__FILE__, __LINE__, "call failed: %s", lua_tostring(L, -1));
}

/* Ships `src`, unships into a fresh state, calls with no arguments and
 * checks that every one of its `n` results is true. */
static void expect_all_true(const char *src, int n) {
  sl__shipped *f = ship_src(src);
  lua_State *B = unship_new(f);
  call0(B, n);
  for (int i = 1; i <= n; i++)
    if (lua_toboolean(B, i) != 1)
      test_fail(__FILE__, __LINE__, "result %d of the shipped function is %s",
                i, luaL_typename(B, i));
  lua_close(B);
  sl__shipped_release(f);
}

/* A scratch directory for module files; removed by tmp_cleanup. */
static char g_tmp[64];
static char g_files[8][128];
static int g_nfiles;

static void tmp_make(void) {
  snprintf(g_tmp, sizeof g_tmp, "/tmp/sluice_ship_XXXXXX");
  ASSERT_NOT_NULL(mkdtemp(g_tmp));
  g_nfiles = 0;
}

static void tmp_write(const char *rel, const char *text) {
  ASSERT_TRUE(g_nfiles < 8);
  char *p = g_files[g_nfiles++];
  snprintf(p, sizeof g_files[0], "%s/%s", g_tmp, rel);
  FILE *fp = fopen(p, "w");
  ASSERT_NOT_NULL(fp);
  fputs(text, fp);
  fclose(fp);
}

static void tmp_mkdir(const char *rel) {
  ASSERT_TRUE(g_nfiles < 8);
  char *p = g_files[g_nfiles++];
  snprintf(p, sizeof g_files[0], "%s/%s", g_tmp, rel);
  ASSERT_EQ(mkdir(p, 0700), 0);
}

static void tmp_cleanup(void) {
  for (int i = g_nfiles - 1; i >= 0; i--)
    remove(g_files[i]);
  rmdir(g_tmp);
}

/* "<tmp>/?.lua" */
static void tmp_path(char *buf, size_t cap) {
  snprintf(buf, cap, "%s/?.lua", g_tmp);
}

/* A bare worker (standard libraries and ffi) with package.path = path. */
static lua_State *bare_worker(const char *path) {
  sl__lua_env *e = sl__lua_env_new(path, NULL);
  ASSERT_NOT_NULL(e);
  ASSERT_OK(sl__lua_env_set_preload(e, 0));
  lua_State *W = NULL;
  ASSERT_OK(sl__lua_worker_new(e, &W));
  sl__lua_env_release(e);
  return W;
}

/* --- round trips ---------------------------------------------------------- */

TEST(constants_of_every_type) {
  sl__shipped *f = ship_src(
      "local n, t, fl = nil, true, false\n"
      "local s = 'a\\0b\\255'\n"
      "local i, x, tiny, big = 42, 0.1, 5e-324, 2^53 + 2\n"
      "local nz, nan, inf = -0.0, 0/0, -math.huge\n"
      "local empty = ''\n"
      "return function() return n, t, fl, s, i, x, tiny, big, nz, nan, inf,"
      " empty end\n");
  lua_State *B = unship_new(f);
  call0(B, 12);
  ASSERT_TRUE(lua_isnil(B, 1));
  ASSERT_TRUE(lua_isboolean(B, 2) && lua_toboolean(B, 2));
  ASSERT_TRUE(lua_isboolean(B, 3) && !lua_toboolean(B, 3));
  size_t n;
  const char *s = lua_tolstring(B, 4, &n);
  ASSERT_EQ(n, 4);
  ASSERT_TRUE(memcmp(s, "a\0b\xff", 4) == 0);
  const double want[] = {42, 0.1, 5e-324, 9007199254740994.0};
  for (int i = 0; i < 4; i++) {
    double got = lua_tonumber(B, 5 + i);
    ASSERT_TRUE(memcmp(&got, &want[i], sizeof got) == 0);
  }
  double nz = lua_tonumber(B, 9);
  ASSERT_TRUE(nz == 0 && signbit(nz));
  ASSERT_TRUE(isnan(lua_tonumber(B, 10)));
  ASSERT_TRUE(isinf(lua_tonumber(B, 11)) && lua_tonumber(B, 11) < 0);
  ASSERT_EQ(lua_objlen(B, 12), 0);
  ASSERT_TRUE(lua_type(B, 12) == LUA_TSTRING);
  lua_close(B);
  sl__shipped_release(f);
}

TEST(tables_keep_shared_and_cyclic_references) {
  expect_all_true(
      "local shared = {v = 1}\n"
      "local cyc = {name = 'c'}\n"
      "cyc.self = cyc\n"
      "local cfg = {a = shared, b = shared, c = cyc, list = {1, 2, 3, 'x'},\n"
      "  [true] = 't', [1.5] = 'f', [shared] = 'k', ['a b'] = 'sp',\n"
      "  deep = {x = {y = {z = 42}}}}\n"
      "local other = {s = shared}\n"
      "return function()\n"
      "  return rawequal(cfg.a, cfg.b), rawequal(cfg.c.self, cfg.c),\n"
      "    cfg.c.self.self.name == 'c', #cfg.list == 4, cfg.list[4] == 'x',\n"
      "    cfg[true] == 't', cfg[1.5] == 'f', cfg[cfg.a] == 'k',\n"
      "    cfg['a b'] == 'sp', cfg.deep.x.y.z == 42,\n"
      "    rawequal(other.s, cfg.a), cfg.a.v == 1\n"
      "end\n",
      12);
}

/* The encoder is Lua (sluice.ship) and the decoder C: a tricky value graph
 * - shared and cyclic tables, table keys, a metatable shared by two
 * tables, mutually recursive closures, two closures over one cell, a
 * module and a module field - is described the same way (DFS order, one
 * id per table/function, "@id" for a second visit) on both sides. */
#define DESCRIBE_SRC                                                        \
  "local function describe(root)\n"                                        \
  "  local ids, n, out = {}, 0, {}\n"                                      \
  "  local function key(k) return type(k) == 'table' and 'T' or\n"         \
  "    tostring(k) end\n"                                                  \
  "  local function walk(v)\n"                                             \
  "    local t = type(v)\n"                                                \
  "    if t ~= 'table' and t ~= 'function' then\n"                         \
  "      out[#out + 1] = t .. ':' .. tostring(v) return end\n"             \
  "    if ids[v] then out[#out + 1] = '@' .. ids[v] return end\n"          \
  "    n = n + 1 ids[v] = n\n"                                             \
  "    if v == math or v == math.floor then\n"                              \
  "      out[#out + 1] = v == math and 'math' or 'floor' return end\n"     \
  "    if t == 'function' then out[#out + 1] = 'fn' return end\n"          \
  "    local ks = {}\n"                                                    \
  "    for k in pairs(v) do ks[#ks + 1] = k end\n"                         \
  "    table.sort(ks, function(a, b) return key(a) < key(b) end)\n"        \
  "    out[#out + 1] = '{'\n"                                              \
  "    for _, k in ipairs(ks) do\n"                                        \
  "      out[#out + 1] = key(k) .. '='; walk(v[k]) end\n"                   \
  "    out[#out + 1] = 'mt'; walk(getmetatable(v))\n"                       \
  "    out[#out + 1] = '}'\n"                                              \
  "  end\n"                                                                \
  "  walk(root)\n"                                                         \
  "  return table.concat(out, ' ')\n"                                      \
  "end\n"

TEST(lua_encoder_blob_rebuilds_the_same_graph) {
  const char *src =
      DESCRIBE_SRC
      "local shared = {v = 1, s = 'x\\0y'}\n"
      "local meta = {__index = shared}\n"
      "local a = setmetatable({name = 'a'}, meta)\n"
      "local b = setmetatable({name = 'b', peer = a}, meta)\n"
      "a.peer = b\n"
      "local n = 0\n"
      "local function inc() n = n + 1 return n end\n"
      "local function get() return n end\n"
      "local even, odd\n"
      "function even(k) if k == 0 then return true end return odd(k - 1) end\n"
      "function odd(k) if k == 0 then return false end return even(k - 1) end\n"
      "local g = {a = a, b = b, list = {shared, shared, 1.5, true},\n"
      "  [shared] = 'key', m = math, floor = math.floor, inc = inc,\n"
      "  get = get}\n"
      "g.self = g\n"
      "return function()\n"
      "  inc() inc()\n"
      "  return describe(g), get() == 2 and n == 2, even(10), odd(7),\n"
      "    rawequal(g.m, math) and rawequal(g.floor, math.floor)\n"
      "end\n";
  lua_State *A = new_state();
  run_chunk(A, src);
  /* The declaring state's description (before the call changes n). */
  lua_pushvalue(A, -1);
  call0(A, 5);
  const char *want = lua_tostring(A, -5);
  ASSERT_NOT_NULL(want);
  ASSERT_TRUE(lua_toboolean(A, -4));
  char want_copy[2048];
  ASSERT_TRUE(strlen(want) < sizeof want_copy);
  snprintf(want_copy, sizeof want_copy, "%s", want);
  lua_pop(A, 5);
  /* Shipped after the call: n is 2 in the declaring state now. */
  sl__shipped *f = NULL;
  ASSERT_OK(sl__lua_ship(A, -1, "map", &f));
  lua_close(A);

  lua_State *B = unship_new(f);
  call0(B, 5);
  ASSERT_STREQ(lua_tostring(B, 1), want_copy);
  for (int i = 3; i <= 5; i++)
    ASSERT_TRUE(lua_toboolean(B, i));
  /* n was 2 when shipped: two more calls of inc make get() 4. */
  ASSERT_TRUE(!lua_toboolean(B, 2));
  lua_close(B);
  sl__shipped_release(f);
}

TEST(metatables_travel_with_their_tables) {
  expect_all_true("local Point = {}\n"
                  "Point.__index = Point\n"
                  "function Point.norm2(p) return p.x * p.x + p.y * p.y end\n"
                  "local a = setmetatable({x = 3, y = 4}, Point)\n"
                  "local b = setmetatable({x = 1, y = 0}, Point)\n"
                  "return function()\n"
                  "  return a:norm2() == 25, b:norm2() == 1,\n"
                  "    rawequal(getmetatable(a), getmetatable(b))\n"
                  "end\n",
                  3);
}

TEST(closure_counter_keeps_state_and_shared_cells) {
  /* inc and get close over the same `n`: in the worker they must still
   * share one cell, starting from the value n had when shipped. */
  sl__shipped *f = ship_src("local n = 10\n"
                            "local function inc() n = n + 1 return n end\n"
                            "local function get() return n end\n"
                            "return function() inc() inc() return get(), "
                            "inc() end\n");
  lua_State *B = new_state();
  ASSERT_OK(sl__lua_unship(B, f));
  ASSERT_OK(sl__lua_unship(B, f)); /* a second, independent instance */
  lua_pushvalue(B, 1);
  call0(B, 2);
  ASSERT_EQ(lua_tonumber(B, -2), 12);
  ASSERT_EQ(lua_tonumber(B, -1), 13);
  lua_pop(B, 2);
  lua_pushvalue(B, 1);
  call0(B, 2);
  ASSERT_EQ(lua_tonumber(B, -2), 15);
  ASSERT_EQ(lua_tonumber(B, -1), 16);
  lua_pop(B, 2);
  call0(B, 2); /* the second instance starts from 10 again */
  ASSERT_EQ(lua_tonumber(B, -2), 12);
  ASSERT_EQ(lua_tonumber(B, -1), 13);
  lua_close(B);
  sl__shipped_release(f);
}

TEST(upvalue_shared_with_the_root_function) {
  /* The root's own upvalue `n` is the cell of `bump`'s upvalue. */
  expect_all_true("local n = 0\n"
                  "local function bump() n = n + 1 end\n"
                  "return function() bump() bump() return n == 2 end\n",
                  1);
}

TEST(mutually_recursive_local_functions) {
  sl__shipped *f = ship_src(
      "local even, odd\n"
      "function even(n) if n == 0 then return true end return odd(n - 1) "
      "end\n"
      "function odd(n) if n == 0 then return false end return even(n - 1) "
      "end\n"
      "return function(k) return even(k), odd(k) end\n");
  lua_State *B = unship_new(f);
  lua_pushvalue(B, 1);
  lua_pushnumber(B, 10);
  ASSERT_EQ(lua_pcall(B, 1, 2, 0), 0);
  ASSERT_TRUE(lua_toboolean(B, -2) && !lua_toboolean(B, -1));
  lua_pop(B, 2);
  lua_pushnumber(B, 7);
  ASSERT_EQ(lua_pcall(B, 1, 2, 0), 0);
  ASSERT_TRUE(!lua_toboolean(B, -2) && lua_toboolean(B, -1));
  lua_close(B);
  sl__shipped_release(f);
}

TEST(self_recursive_local_function) {
  sl__shipped *f = ship_src("local function fact(n)\n"
                            "  if n <= 1 then return 1 end\n"
                            "  return n * fact(n - 1)\n"
                            "end\n"
                            "return fact\n");
  ASSERT_STREQ(sl__shipped_where(f), "test.lua:1");
  lua_State *B = unship_new(f);
  lua_pushnumber(B, 10);
  ASSERT_EQ(lua_pcall(B, 1, 1, 0), 0);
  ASSERT_EQ(lua_tonumber(B, -1), 3628800);
  lua_close(B);
  sl__shipped_release(f);
}

TEST(ffi_module_upvalue_works_in_the_worker) {
  sl__shipped *f = ship_src("local ffi = require 'ffi'\n"
                            "return function(n)\n"
                            "  local a = ffi.new('int[?]', n)\n"
                            "  for i = 0, n - 1 do a[i] = i * i end\n"
                            /* 2LL is a cdata constant inside the bytecode */
                            "  return tonumber(a[n - 1] + 2LL - 2),\n"
                            "    rawequal(ffi, require 'ffi')\n"
                            "end\n");
  lua_State *W = bare_worker(NULL);
  ASSERT_OK(sl__lua_unship(W, f));
  lua_pushnumber(W, 10);
  ASSERT_EQ(lua_pcall(W, 1, 2, 0), 0);
  ASSERT_EQ(lua_tonumber(W, -2), 81);
  ASSERT_TRUE(lua_toboolean(W, -1));
  lua_close(W);
  sl__shipped_release(f);
}

TEST(module_fields_and_globals_travel_by_name) {
  /* C functions, userdata and modules cannot be copied; they ship as the
   * name under which package.loaded exports them. */
  expect_all_true(
      "local floor, fmt, pr, m = math.floor, string.format, print, math\n"
      "local out, C = io.stdout, require('ffi').C\n"
      "return function()\n"
      "  return floor(3.7) == 3, fmt('%03d', 7) == '007',\n"
      "    rawequal(pr, print), rawequal(m, math),\n"
      "    rawequal(floor, math.floor), io.type(out) == 'file',\n"
      "    rawequal(out, io.stdout), rawequal(C, require('ffi').C)\n"
      "end\n",
      8);
}

TEST(named_function_string_rep) {
  lua_State *A = new_state();
  const char *names[] = {"string.rep", "string:rep"};
  for (int i = 0; i < 2; i++) {
    lua_pushstring(A, names[i]);
    sl__shipped *f = NULL;
    ASSERT_OK(sl__lua_ship(A, -1, "map", &f));
    lua_pop(A, 1);
    ASSERT_EQ(lua_gettop(A), 0);
    ASSERT_STREQ(sl__shipped_where(f), names[i]);
    lua_State *B = unship_new(f);
    lua_pushstring(B, "ab");
    lua_pushnumber(B, 3);
    ASSERT_EQ(lua_pcall(B, 2, 1, 0), 0);
    ASSERT_STREQ(lua_tostring(B, -1), "ababab");
    lua_close(B);
    sl__shipped_release(f);
  }
  lua_close(A);
}

TEST(c_function_root_ships_by_name) {
  lua_State *A = new_state();
  lua_getglobal(A, "tostring");
  sl__shipped *f = NULL;
  ASSERT_OK(sl__lua_ship(A, -1, "map", &f));
  ASSERT_STREQ(sl__shipped_where(f), "_G.tostring");
  lua_close(A);
  lua_State *B = unship_new(f);
  lua_pushnumber(B, 5);
  ASSERT_EQ(lua_pcall(B, 1, 1, 0), 0);
  ASSERT_STREQ(lua_tostring(B, -1), "5");
  lua_close(B);
  sl__shipped_release(f);
}

TEST(named_function_in_a_module_on_package_path) {
  tmp_make();
  tmp_write("shipmod.lua", "local M = {k = 5}\n"
                           "function M.twice(x) return 2 * x + M.k - 5 end\n"
                           "return M\n");
  tmp_mkdir("pkg");
  tmp_write("pkg/sub.lua", "return {neg = function(x) return -x end}\n");
  char path[128];
  tmp_path(path, sizeof path);

  lua_State *A = new_state();
  /* The scratch folder first, then the default path: it reaches lua/,
   * where sl__lua_ship finds its encoder (sluice.ship). */
  lua_getglobal(A, "package");
  lua_getfield(A, -1, "path");
  lua_pushfstring(A, "%s;%s", path, lua_tostring(A, -1));
  lua_setfield(A, -3, "path");
  lua_pop(A, 2);
  sl__shipped *named = NULL, *nested = NULL, *fn = NULL;
  lua_pushstring(A, "shipmod.twice");
  ASSERT_OK(sl__lua_ship(A, -1, "map", &named));
  lua_pushstring(A, "pkg.sub.neg");
  ASSERT_OK(sl__lua_ship(A, -1, "map", &nested));
  lua_pop(A, 2);
  /* A function whose upvalue is that module: the worker requires it. */
  run_chunk(A, "local m = require 'shipmod'\n"
               "return function(x) return m.twice(x) + m.k end\n");
  ASSERT_OK(sl__lua_ship(A, -1, "map", &fn));
  sl__lua_env *env = sl__lua_env_capture(A);
  ASSERT_NOT_NULL(env);
  ASSERT_OK(sl__lua_env_set_preload(env, 0));
  lua_close(A);

  lua_State *W = NULL;
  ASSERT_OK(sl__lua_worker_new(env, &W));
  sl__lua_env_release(env);
  ASSERT_OK(sl__lua_unship(W, named));
  lua_pushnumber(W, 21);
  ASSERT_EQ(lua_pcall(W, 1, 1, 0), 0);
  ASSERT_EQ(lua_tonumber(W, -1), 42);
  ASSERT_OK(sl__lua_unship(W, nested));
  lua_pushnumber(W, 3);
  ASSERT_EQ(lua_pcall(W, 1, 1, 0), 0);
  ASSERT_EQ(lua_tonumber(W, -1), -3);
  ASSERT_OK(sl__lua_unship(W, fn));
  lua_pushnumber(W, 1);
  ASSERT_EQ(lua_pcall(W, 1, 1, 0), 0);
  ASSERT_EQ(lua_tonumber(W, -1), 7);
  lua_close(W);
  sl__shipped_release(named);
  sl__shipped_release(nested);
  sl__shipped_release(fn);
  tmp_cleanup();
}

/* Unshipping `f` into a fresh bare worker fails; returns the message. */
static const char *unship_error(sl__shipped *f) {
  lua_State *W = bare_worker(NULL);
  ASSERT_RC(sl__lua_unship(W, f), SL_ELUA);
  ASSERT_EQ(lua_gettop(W), 0);
  lua_close(W);
  return sl_last_error();
}

TEST(missing_module_or_function_is_a_clear_error) {
  lua_State *A = new_state();
  const char *names[] = {"nosuchmod.fn", "string.nosuch", "math.pi",
                         "nosuchmod"};
  sl__shipped *f[4];
  for (int i = 0; i < 4; i++) {
    lua_pushstring(A, names[i]);
    ASSERT_OK(sl__lua_ship(A, -1, "map", &f[i]));
    lua_pop(A, 1);
  }
  /* A module the declaring state has but the worker cannot load. */
  run_chunk(A, "package.loaded.ghost = {}\n"
               "local g = require 'ghost'\n"
               "return function() return g end\n");
  sl__shipped *ghost = NULL;
  ASSERT_OK(sl__lua_ship(A, -1, "map", &ghost));
  lua_close(A);

  const char *msg = unship_error(f[0]);
  const char *want = "map: 'nosuchmod.fn': module 'nosuchmod' not found:";
  ASSERT_TRUE(strncmp(msg, want, strlen(want)) == 0);
  ASSERT_STREQ(unship_error(f[1]),
               "map: 'string.nosuch': module 'string' has no function "
               "'nosuch'");
  ASSERT_STREQ(unship_error(f[2]),
               "map: 'math.pi': module 'math' has no function 'pi'");
  msg = unship_error(f[3]);
  want = "map: 'nosuchmod': module 'nosuchmod' not found:";
  ASSERT_TRUE(strncmp(msg, want, strlen(want)) == 0);
  msg = unship_error(ghost);
  want = "map (test.lua:3): module 'ghost' not found:";
  ASSERT_TRUE(strncmp(msg, want, strlen(want)) == 0);
  for (int i = 0; i < 4; i++)
    sl__shipped_release(f[i]);
  sl__shipped_release(ghost);
}

TEST(malformed_names_and_wrong_types) {
  lua_State *A = new_state();
  const char *bad[] = {"", ".rep", "string.", "a.b:"};
  for (int i = 0; i < 4; i++) {
    lua_pushstring(A, bad[i]);
    sl__shipped *f = NULL;
    ASSERT_RC(sl__lua_ship(A, -1, "filter", &f), SL_EINVAL);
    ASSERT_NULL(f);
    lua_pop(A, 1);
  }
  ASSERT_STREQ(sl_last_error(),
               "filter: 'a.b:' is not a \"module.function\" name");
  lua_newtable(A);
  sl__shipped *f = NULL;
  ASSERT_RC(sl__lua_ship(A, -1, "reader", &f), SL_EINVAL);
  ASSERT_STREQ(sl_last_error(), "reader: expected a function or a "
                                "\"module.function\" name, got a table");
  ASSERT_EQ(lua_gettop(A), 1);
  lua_close(A);
}

/* --- unshippable upvalues ------------------------------------------------- */

static int test_cfunction(lua_State *L) {
  lua_pushnumber(L, 1);
  return 1;
}

TEST(unshippable_userdata_cdata_thread) {
  expect_ship_error("local u = newproxy(true)\n"
                    "return function() return u end\n",
                    "map: cannot ship upvalue 'u' (a userdata) of the "
                    "function defined at test.lua:2");
  expect_ship_error("local ffi = require 'ffi'\n"
                    "local c = ffi.new('int', 3)\n"
                    "return function() return ffi, c end\n",
                    "map: cannot ship upvalue 'c' (a cdata) of the function "
                    "defined at test.lua:3");
  expect_ship_error("local co = coroutine.create(function() end)\n"
                    "\n"
                    "return function() return co end\n",
                    "map: cannot ship upvalue 'co' (a thread) of the function "
                    "defined at test.lua:3");
}

TEST(unregistered_c_function_is_unshippable) {
  lua_State *A = new_state();
  /* One closure object throughout: each lua_pushcfunction makes a new one,
   * and names are found by identity. */
  lua_pushcfunction(A, test_cfunction);
  const char *src = "local f = ...\n"
                    "return function() return f() end\n";
  ASSERT_EQ(luaL_loadbuffer(A, src, strlen(src), "=test.lua"), 0);
  lua_pushvalue(A, 1);
  ASSERT_EQ(lua_pcall(A, 1, 1, 0), 0);
  sl__shipped *f = NULL;
  ASSERT_RC(sl__lua_ship(A, 2, "map", &f), SL_ELUA);
  ASSERT_STREQ(sl_last_error(), "map: cannot ship upvalue 'f' (a C function) "
                                "of the function defined at test.lua:2");
  ASSERT_EQ(lua_gettop(A), 2);
  /* As the root, too. */
  ASSERT_RC(sl__lua_ship(A, 1, "map", &f), SL_ELUA);
  ASSERT_STREQ(sl_last_error(), "map: cannot ship a C function that is not "
                                "a field of a loaded module");
  ASSERT_EQ(lua_gettop(A), 2);
  /* A global of the declaring state only: it ships as _G.test_cfn, and the
   * worker, which lacks that global, says so. */
  lua_pushvalue(A, 1);
  lua_setglobal(A, "test_cfn");
  ASSERT_OK(sl__lua_ship(A, 2, "map", &f));
  ASSERT_STREQ(unship_error(f),
               "map (test.lua:2): module '_G' has no field 'test_cfn'");
  sl__shipped_release(f);
  lua_close(A);
}

TEST(unshippable_values_nested_in_tables_name_the_path) {
  expect_ship_error("local cfg = {n = 1, inner = {f = newproxy()}}\n"
                    "return function() return cfg end\n",
                    "map: cannot ship upvalue 'cfg.inner.f' (a userdata) of "
                    "the function defined at test.lua:2");
  expect_ship_error("local cfg = {list = {1, 2, coroutine.create(print)}}\n"
                    "return function() return cfg end\n",
                    "map: cannot ship upvalue 'cfg.list[3]' (a thread) of "
                    "the function defined at test.lua:2");
  expect_ship_error("local cfg = {['a b'] = {['end'] = newproxy()}}\n"
                    "return function() return cfg end\n",
                    "map: cannot ship upvalue 'cfg[\"a b\"][\"end\"]' (a "
                    "userdata) of the function defined at test.lua:2");
  expect_ship_error("local obj = setmetatable({}, {__index = newproxy()})\n"
                    "return function() return obj end\n",
                    "map: cannot ship upvalue 'getmetatable(obj).__index' (a "
                    "userdata) of the function defined at test.lua:2");
}

TEST(unshippable_value_in_an_inner_function_names_its_line) {
  expect_ship_error("local co = coroutine.create(print)\n"
                    "local function helper()\n"
                    "  return co\n"
                    "end\n"
                    "local cfg = {k = 1}\n"
                    "return function() return helper(), cfg end\n",
                    "map: cannot ship upvalue 'co' (a thread) of the function "
                    "defined at test.lua:2");
  /* Through a table of the outer function: the path restarts at the inner
   * function's own upvalue. */
  expect_ship_error("local ffi = require 'ffi'\n"
                    "local box = {v = ffi.new('double', 1)}\n"
                    "local hooks = {pre = function() return box end}\n"
                    "return function() return hooks end\n",
                    "map: cannot ship upvalue 'box.v' (a cdata) of the "
                    "function defined at test.lua:3");
}

TEST(too_deep_nesting_is_refused) {
  lua_State *A = new_state();
  run_chunk(A, "local t = {}\n"
               "local cur = t\n"
               "for i = 1, 300 do cur.n = {} cur = cur.n end\n"
               "return function() return t end\n");
  sl__shipped *f = NULL;
  ASSERT_RC(sl__lua_ship(A, -1, "map", &f), SL_ELUA);
  /* The path is cut (with "...") to fit the message. */
  const char *msg = sl_last_error();
  const char *want = "map: cannot ship upvalue 't.n.n.n.n.n.n.n.n.n.n.n.n.";
  ASSERT_TRUE(strncmp(msg, want, strlen(want)) == 0);
  ASSERT_CONTAINS(msg, "...' of the function defined at test.lua:4: "
                       "nested more than 200 tables/functions deep");
  ASSERT_EQ(lua_gettop(A), 1);
  lua_close(A);
  /* A long shared chain that cycles back is not deep: one back-reference. */
  expect_all_true("local a = {}\n"
                  "a.next = {next = a}\n"
                  "return function() return rawequal(a.next.next, a) end\n",
                  1);
}

/* --- allocation failures -------------------------------------------------- */

long sl__alloc_fail_after(long n);

TEST(allocation_failures_are_reported_cleanly) {
  lua_State *A = new_state();
  run_chunk(A, "local big = string.rep('x', 5000)\n"
               "local cfg = {a = {1, 2, 3}, s = big, t = {u = {v = true}}}\n"
               "return function() return #cfg.s + #cfg.a end\n");
  lua_pushliteral(A, "string.rep");
  int done = 0;
  for (long k = 0; k < 64 && done != 3; k++) {
    done = 0;
    for (int which = 0; which < 3; which++) {
      sl__shipped *f = NULL;
      sl__lua_env *e = NULL;
      sl__alloc_fail_after(k);
      int rc;
      if (which == 2) {
        e = sl__lua_env_capture(A);
        rc = e ? SL_OK : SL_ENOMEM;
      } else {
        rc = sl__lua_ship(A, 1 + which, "map", &f);
      }
      sl__alloc_fail_after(-1);
      ASSERT_EQ(lua_gettop(A), 2);
      if (rc == SL_OK) {
        done++;
        if (which < 2) {
          lua_State *B = unship_new(f);
          lua_close(B);
        }
      } else {
        ASSERT_RC(rc, SL_ENOMEM);
        ASSERT_NULL(f);
        ASSERT_TRUE(strstr(sl_last_error(), "out of memory") != NULL);
      }
      sl__shipped_release(f);
      sl__lua_env_release(e);
    }
  }
  ASSERT_EQ(done, 3);
  lua_close(A);
}

/* --- concurrency ---------------------------------------------------------- */

typedef struct worker_arg {
  sl__shipped *f;
  sl__lua_env *env;
  int ok;
  char msg[256];
} worker_arg;

static void *worker_main(void *p) {
  worker_arg *a = p;
  sl__shipped *f = sl__shipped_retain(a->f);
  sl__lua_env *e = sl__lua_env_retain(a->env);
  lua_State *W = NULL;
  int rc = sl__lua_worker_new(e, &W);
  sl__lua_env_release(e);
  if (rc != SL_OK) {
    snprintf(a->msg, sizeof a->msg, "worker: %s", sl_last_error());
    sl__shipped_release(f);
    return NULL;
  }
  a->ok = 1;
  for (int round = 0; round < 3 && a->ok; round++) {
    if (sl__lua_unship(W, f) != SL_OK) {
      snprintf(a->msg, sizeof a->msg, "unship: %s", sl_last_error());
      a->ok = 0;
      break;
    }
    for (int i = 0; i < 200; i++) {
      lua_pushvalue(W, -1);
      lua_pushnumber(W, i);
      if (sl__lua_pcall(W, 1, 1, "map", sl__shipped_where(f)) != SL_OK) {
        snprintf(a->msg, sizeof a->msg, "call: %s", sl_last_error());
        a->ok = 0;
        break;
      }
      double want = 610 + 3 * i + 3 + 1;
      if (lua_tonumber(W, -1) != want) {
        snprintf(a->msg, sizeof a->msg, "call %d: %g != %g", i,
                 lua_tonumber(W, -1), want);
        a->ok = 0;
        break;
      }
      lua_pop(W, 1);
    }
    lua_pop(W, 1);
  }
  lua_close(W);
  sl__shipped_release(f);
  return NULL;
}

TEST(one_blob_unshipped_by_four_threads_at_once) {
  sl__shipped *f = ship_src(
      "local ffi = require 'ffi'\n"
      "local cfg = {mult = 3, tbl = {1, 2, 3}}\n"
      "local function fib(n) if n < 2 then return n end\n"
      "  return fib(n - 1) + fib(n - 2) end\n"
      "return function(x)\n"
      "  return fib(15) + cfg.mult * x + #cfg.tbl + tonumber(ffi.new('int', "
      "1))\n"
      "end\n");
  enum { N = 4 };
  pthread_t th[N];
  worker_arg args[N];
  memset(args, 0, sizeof args);
  sl__lua_env *env = sl__lua_env_new(NULL, NULL);
  ASSERT_NOT_NULL(env);
  ASSERT_OK(sl__lua_env_set_preload(env, 0));
  for (int i = 0; i < N; i++) {
    args[i].f = f;
    args[i].env = env;
    ASSERT_EQ(pthread_create(&th[i], NULL, worker_main, &args[i]), 0);
  }
  for (int i = 0; i < N; i++)
    ASSERT_EQ(pthread_join(th[i], NULL), 0);
  for (int i = 0; i < N; i++)
    if (!args[i].ok)
      test_fail(__FILE__, __LINE__, "thread %d: %s", i, args[i].msg);
  sl__lua_env_release(env);
  sl__shipped_release(f);
}

/* --- sl__lua_pcall -------------------------------------------------------- */

/* Loads `src` (a chunk returning a function) into L, calls that function
 * through sl__lua_pcall and expects SL_ELUA.  Returns the message. */
static const char *pcall_error(lua_State *L, const char *src) {
  run_chunk(L, src);
  int top = lua_gettop(L) - 1;
  lua_pushnumber(L, 1); /* one argument, ignored */
  ASSERT_RC(sl__lua_pcall(L, 1, 1, "map", "test.lua:1"), SL_ELUA);
  ASSERT_EQ(lua_gettop(L), top);
  return sl_last_error();
}

/* The message's first line is `first`, and its traceback names `line`. */
static void expect_first_line(const char *msg, const char *first,
                              const char *line) {
  const char *nl = strchr(msg, '\n');
  ASSERT_NOT_NULL(nl);
  if ((size_t)(nl - msg) != strlen(first) ||
      strncmp(msg, first, strlen(first)) != 0)
    test_fail(__FILE__, __LINE__, "first line of \"%s\" is not \"%s\"", msg,
              first);
  ASSERT_CONTAINS(nl, "\nstack traceback:\n");
  ASSERT_CONTAINS(nl, line);
}

TEST(pcall_error_objects_and_tracebacks) {
  lua_State *L = new_state();
  expect_first_line(pcall_error(L, "return function()\n"
                                   "  error('boom')\n"
                                   "end\n"),
                    "map (test.lua:1): test.lua:2: boom", "\n\ttest.lua:2:");
  expect_first_line(
      pcall_error(L, "local E = setmetatable({}, {__tostring = function()\n"
                     "  return 'custom error' end})\n"
                     "return function() error(E) end\n"),
      "map (test.lua:1): custom error", "\n\ttest.lua:3:");
  expect_first_line(pcall_error(L, "return function()\n"
                                   "\n"
                                   "  error(nil)\n"
                                   "end\n"),
                    "map (test.lua:1): (error object is a nil value)",
                    "\n\ttest.lua:3:");
  expect_first_line(pcall_error(L, "return function() error({}) end\n"),
                    "map (test.lua:1): (error object is a table value)",
                    "\n\ttest.lua:1:");
  expect_first_line(pcall_error(L, "return function() error(true) end\n"),
                    "map (test.lua:1): (error object is a boolean value)",
                    "\n\ttest.lua:1:");
  expect_first_line(pcall_error(L, "return function()\n"
                                   "  local t = nil\n"
                                   "  return t.x\n"
                                   "end\n"),
                    "map (test.lua:1): test.lua:3: attempt to index local 't' "
                    "(a nil value)",
                    "\n\ttest.lua:3:");
  lua_close(L);
}

TEST(pcall_success_leaves_only_the_results) {
  lua_State *L = new_state();
  lua_pushliteral(L, "below");
  run_chunk(L, "return function(a, b) return a + b, a * b end\n");
  lua_pushnumber(L, 3);
  lua_pushnumber(L, 4);
  ASSERT_OK(sl__lua_pcall(L, 2, 2, "map", "test.lua:1"));
  ASSERT_EQ(lua_gettop(L), 3);
  ASSERT_EQ(lua_tonumber(L, 2), 7);
  ASSERT_EQ(lua_tonumber(L, 3), 12);
  ASSERT_STREQ(lua_tostring(L, 1), "below");
  lua_settop(L, 1);
  run_chunk(L, "return function() return 1, 2, 3 end\n");
  ASSERT_OK(sl__lua_pcall(L, 0, LUA_MULTRET, "map", "test.lua:1"));
  ASSERT_EQ(lua_gettop(L), 4);
  lua_close(L);
}

TEST(shipped_function_errors_keep_their_source_line) {
  /* The bytecode keeps its debug info: a traceback in the worker names the
   * declaring chunk's line. */
  sl__shipped *f = ship_src("local limit = 2\n"
                            "return function(x)\n"
                            "  if x > limit then\n"
                            "    error('too big: ' .. x)\n"
                            "  end\n"
                            "  return x\n"
                            "end\n");
  ASSERT_STREQ(sl__shipped_where(f), "test.lua:2");
  lua_State *W = bare_worker(NULL);
  ASSERT_OK(sl__lua_unship(W, f));
  lua_pushnumber(W, 5);
  ASSERT_RC(sl__lua_pcall(W, 1, 1, "map", sl__shipped_where(f)), SL_ELUA);
  expect_first_line(sl_last_error(), "map (test.lua:2): test.lua:4: too big: 5",
                    "\n\ttest.lua:4: in function <test.lua:2>");
  ASSERT_EQ(lua_gettop(W), 0);
  lua_close(W);
  sl__shipped_release(f);
}

/* --- env and workers ------------------------------------------------------ */

TEST(env_capture_sets_package_paths_in_bare_workers) {
  lua_State *A = new_state();
  run_chunk(A, "package.path = '/nowhere/?.lua;/x/?/init.lua'\n"
               "package.cpath = '/nowhere/?.so'\n"
               "return 0\n");
  sl__lua_env *e = sl__lua_env_capture(A);
  lua_close(A);
  ASSERT_NOT_NULL(e);
  ASSERT_OK(sl__lua_env_set_preload(e, 0));
  lua_State *W = NULL;
  ASSERT_OK(sl__lua_worker_new(e, &W));
  run_chunk(W, "return package.path .. '|' .. package.cpath .. '|' ..\n"
               "  type(ffi) .. '|' .. type(sluice) .. '|' ..\n"
               "  tostring(rawequal(ffi, require 'ffi'))\n");
  ASSERT_STREQ(lua_tostring(W, -1),
               "/nowhere/?.lua;/x/?/init.lua|/nowhere/?.so|table|nil|true");
  lua_close(W);
  sl__lua_env_release(e);
}

TEST(env_new_with_defaults_keeps_luajit_paths) {
  lua_State *A = new_state();
  run_chunk(A, "return package.path\n");
  char want[1024];
  snprintf(want, sizeof want, "%s", lua_tostring(A, -1));
  lua_close(A);
  lua_State *W = bare_worker(NULL);
  run_chunk(W, "return package.path\n");
  ASSERT_STREQ(lua_tostring(W, -1), want);
  lua_close(W);
  ASSERT_RC(sl__lua_env_set_preload(NULL, 0), SL_EINVAL);
  sl__lua_env_release(NULL);
}

TEST(worker_with_sluice_preload) {
  /* Stand-ins for the Lua package, so this test does not depend on it. */
  tmp_make();
  tmp_write("sluice.lua", "return {name = 'fake sluice'}\n");
  tmp_mkdir("sluice");
  tmp_write("sluice/worker.lua", "return {name = 'fake worker'}\n");
  char path[128];
  tmp_path(path, sizeof path);
  sl__lua_env *e = sl__lua_env_new(path, "/nowhere/?.so");
  ASSERT_NOT_NULL(e);
  lua_State *W = NULL;
  ASSERT_OK(sl__lua_worker_new(e, &W));
  run_chunk(W, "return sluice.name .. '|' ..\n"
               "  debug.getregistry()['sluice.worker'].name .. '|' ..\n"
               "  type(ffi)\n");
  ASSERT_STREQ(lua_tostring(W, -1), "fake sluice|fake worker|table");
  lua_close(W);
  sl__lua_env_release(e);
  tmp_cleanup();

  /* A module the package needs is missing: an error saying which. */
  tmp_make();
  tmp_write("sluice.lua", "return require 'sluice_missing_dep'\n");
  tmp_path(path, sizeof path);
  e = sl__lua_env_new(path, "/nowhere/?.so");
  ASSERT_NOT_NULL(e);
  W = (lua_State *)1;
  ASSERT_RC(sl__lua_worker_new(e, &W), SL_ELUA);
  ASSERT_NULL(W);
  const char *want = "lua worker: ";
  ASSERT_TRUE(strncmp(sl_last_error(), want, strlen(want)) == 0);
  ASSERT_CONTAINS(sl_last_error(), "module 'sluice_missing_dep' not found:");
  sl__lua_env_release(sl__lua_env_retain(e));
  sl__lua_env_release(e);
  tmp_cleanup();
}

/* A worker that loads sluice, on a path that cannot find it, gets
 * libsluice's own Lua folders appended (lua_path.c; issue 24, item 25: it
 * failed "module 'sluice' not found"); a path that finds it, and a bare
 * state's path, are kept as they are. */
TEST(worker_path_without_sluice_gets_the_librarys_lua_folders) {
  const char *own = sl__lua_own_path();
  ASSERT_TRUE(own[0] != '\0');
  sl__lua_env *e = sl__lua_env_new("/nowhere/?.lua", "/nowhere/?.so");
  ASSERT_NOT_NULL(e);
  lua_State *W = NULL;
  int rc = sl__lua_worker_new(e, &W);
  /* The package is found (this executable may not export what it needs
   * from libsluice: then it fails loading, not finding it). */
  ASSERT_TRUE(strstr(sl_last_error(), "module 'sluice' not found") == NULL);
  if (rc == SL_OK) {
    run_chunk(W, "return package.path\n");
    char want[4096];
    snprintf(want, sizeof want, "/nowhere/?.lua;%s", own);
    ASSERT_STREQ(lua_tostring(W, -1), want);
    lua_close(W);
  }
  sl__lua_env_release(e);

  tmp_make();
  tmp_write("sluice.lua", "return {}\n");
  tmp_mkdir("sluice");
  tmp_write("sluice/worker.lua", "return {}\n");
  char path[128];
  tmp_path(path, sizeof path);
  e = sl__lua_env_new(path, "/nowhere/?.so");
  ASSERT_OK(sl__lua_worker_new(e, &W));
  run_chunk(W, "return package.path\n");
  ASSERT_STREQ(lua_tostring(W, -1), path);
  lua_close(W);
  sl__lua_env_release(e);
  tmp_cleanup();
  e = sl__lua_env_new("/nowhere/?.lua", "/nowhere/?.so");
  ASSERT_OK(sl__lua_env_set_preload(e, 0));
  ASSERT_OK(sl__lua_worker_new(e, &W));
  run_chunk(W, "return package.path\n");
  ASSERT_STREQ(lua_tostring(W, -1), "/nowhere/?.lua");
  lua_close(W);
  sl__lua_env_release(e);
}
