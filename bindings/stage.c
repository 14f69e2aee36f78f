/*
 * stage.c - the readers that run Lua code on sluice's threads
 * (lua_host.h: sl__lua_stage, sl__lua_reader).
 *
 *   core.map(up_addr, shipped, env, opts, schema_addr)
 *       up_addr      the upstream sl_reader* as a Lua number (the facade
 *                    passes tonumber(ffi.cast("uintptr_t", r))); TAKEN, on
 *                    success and on every failure, including argument
 *                    errors, so the facade disowns its cdata (ffi.gc(r,
 *                    nil)) before calling and never has to guess.
 *       shipped      a "sluice.shipped" (core.ship)
 *       env          a "sluice.env" (core.env)
 *       opts         nil or {kind = "map"|"filter"|"parse" (default "map";
 *                    "parse": a text file's Lua parser, lua_host.h),
 *                    threads = n >= 1 (1), ordered = bool (true),
 *                    queue = n >= 0 (0: the stage's default),
 *                    deadline = seconds per call (0: none),
 *                    seed_hi, seed_lo = ctx.seed's halves (0),
 *                    epoch = ctx's first epoch (0)}; the
 *                    ranges are checked by sl__lua_stage (one place)
 *       schema_addr  nil, or an sl_schema* as a number (borrowed; the stage
 *                    retains it)
 *     Returns the new sl_reader* as a lightuserdata, owned by the caller
 *     (the facade converts it with ffi.cast("sl_reader*", lud) and attaches
 *     sl_reader_destroy with ffi.gc).  A failure of the stage raises exactly
 *     sl_last_error().
 *
 *   core.reader(shipped, env, buffer, schema_addr)
 *       A source running the Lua reader creator `shipped` in a worker state,
 *       prefetching into a channel of `buffer` (>= 1) samples.  Returns a
 *       lightuserdata sl_reader* like core.map.
 *
 * Readers are not userdata here: the facade owns them as FFI cdata, so that
 * the hot path (sl_reader_next) is a plain FFI call.
 *
 * Taking `up` while validating with luaL_check* (which raise) is done with a
 * guard: a small "sluice.reader_guard" userdata holds `up` from the moment
 * it is parsed until it is handed to sl__lua_stage, and its __gc destroys
 * the reader if an argument error unwound the call.  So no raise ever leaves
 * a reader that nothing owns.
 */
#include "bindings.h"

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct slb_guard {
  sl_reader *r; /* owned until disarmed; NULL once handed over */
} slb_guard;

/* __gc of the guard: destroys a reader left behind by an argument error.
 * Never raises. */
static int guard_gc(lua_State *L) {
  slb_guard *g = luaL_testudata(L, 1, SLB_GUARD_MT);
  if (g != NULL) {
    sl_reader_destroy(g->r);
    g->r = NULL;
  }
  return 0;
}

/* An address passed as a Lua number.  A double holds integers up to 2^53
 * exactly, which covers every user-space address of the 64-bit platforms
 * LuaJIT runs on; anything else is a caller's bug, not a pointer. */
static void *check_addr(lua_State *L, int idx, const char *what) {
  const lua_Number n = luaL_checknumber(L, idx);
  if (!(n > 0 && n < 9007199254740992.0 && n == floor(n)))
    luaL_argerror(L, idx, lua_pushfstring(L, "%s address expected", what));
  return (void *)(uintptr_t)n;
}

static void *opt_addr(lua_State *L, int idx, const char *what) {
  return lua_isnoneornil(L, idx) ? NULL : check_addr(L, idx, what);
}

/* Integer field `name` of the options table at `idx`, or `def` when absent;
 * raises an argument error naming the field when it is not an integer in
 * [min, max]. */
static lua_Integer opt_int_field(lua_State *L, int idx, const char *name,
                                 lua_Integer def, lua_Integer min,
                                 lua_Integer max) {
  lua_getfield(L, idx, name);
  lua_Integer v = def;
  if (!lua_isnil(L, -1)) {
    const lua_Number n = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || n != floor(n) ||
        n < (lua_Number)min || n > (lua_Number)max)
      luaL_argerror(L, idx,
                    lua_pushfstring(L, "opts.%s must be an integer in [%d, %d]",
                                    name, (int)min, (int)max));
    v = (lua_Integer)n;
  }
  lua_pop(L, 1);
  return v;
}

/* Number field `name` of the options table at `idx`, or `def`; raises an
 * argument error naming the field unless it is a number in [min, max] (or
 * NaN, which the caller checks). */
static lua_Number opt_num_field(lua_State *L, int idx, const char *name,
                                lua_Number def, lua_Number min,
                                lua_Number max) {
  lua_getfield(L, idx, name);
  lua_Number v = def;
  if (!lua_isnil(L, -1)) {
    v = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || v < min || v > max)
      luaL_argerror(L, idx,
                    lua_pushfstring(L, "opts.%s must be a number in [%f, %f]",
                                    name, min, max));
  }
  lua_pop(L, 1);
  return v;
}

/* Boolean field `name` of the options table at `idx`, or `def`. */
static int opt_bool_field(lua_State *L, int idx, const char *name, int def) {
  lua_getfield(L, idx, name);
  int v = def;
  if (!lua_isnil(L, -1)) {
    if (!lua_isboolean(L, -1))
      luaL_argerror(L, idx,
                    lua_pushfstring(L, "opts.%s must be a boolean", name));
    v = lua_toboolean(L, -1);
  }
  lua_pop(L, 1);
  return v;
}

static sl__lua_kind opt_kind_field(lua_State *L, int idx) {
  lua_getfield(L, idx, "kind");
  sl__lua_kind kind = SL__LUA_MAP;
  if (!lua_isnil(L, -1)) {
    const char *s = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : "";
    if (strcmp(s, "map") == 0)
      kind = SL__LUA_MAP;
    else if (strcmp(s, "filter") == 0)
      kind = SL__LUA_FILTER;
    else if (strcmp(s, "parse") == 0)
      kind = SL__LUA_PARSE;
    else
      luaL_argerror(L, idx,
                    "opts.kind must be \"map\", \"filter\" or \"parse\"");
  }
  lua_pop(L, 1);
  return kind;
}

static int stage_map(lua_State *L) {
  lua_settop(L, 5);
  /* The guard exists before `up` is parsed, so there is no moment at which
   * `up` is taken but unowned. */
  slb_guard *g = lua_newuserdata(L, sizeof *g);
  g->r = NULL;
  luaL_getmetatable(L, SLB_GUARD_MT);
  lua_setmetatable(L, -2);
  g->r = check_addr(L, 1, "sl_reader*");

  sl__shipped *fn = slb_check_shipped(L, 2);
  sl__lua_env *env = slb_check_env(L, 3);
  sl__lua_stage_opts opts = {.threads = 1, .ordered = 1, .queue = 0};
  sl__lua_kind kind = SL__LUA_MAP;
  if (!lua_isnil(L, 4)) {
    luaL_checktype(L, 4, LUA_TTABLE);
    kind = opt_kind_field(L, 4);
    /* Only what the C types need: the ranges are the stage's (one place:
     * sl__lua_stage and its engine). */
    opts.threads = (int)opt_int_field(L, 4, "threads", 1, 1, INT_MAX);
    opts.ordered = opt_bool_field(L, 4, "ordered", 1);
    opts.queue = (size_t)opt_int_field(L, 4, "queue", 0, 0, INT_MAX);
    opts.deadline =
        (double)opt_num_field(L, 4, "deadline", 0, -HUGE_VAL, HUGE_VAL);
    /* ctx.seed in two 32-bit halves (a Lua number holds 53 bits); ctx's
     * first epoch (its range is the stage's). */
    const lua_Integer hi = opt_int_field(L, 4, "seed_hi", 0, 0, 0xFFFFFFFF);
    const lua_Integer lo = opt_int_field(L, 4, "seed_lo", 0, 0, 0xFFFFFFFF);
    opts.seed = ((uint64_t)hi << 32) | (uint64_t)lo;
    const lua_Number ep =
        opt_num_field(L, 4, "epoch", 0, 0, 18446744073709551615.0);
    if (ep != floor(ep))
      luaL_argerror(L, 4, "opts.epoch must be an integer");
    opts.epoch = ep < 18446744073709551615.0 ? (uint64_t)ep : UINT64_MAX;
  }
  sl_schema *schema = opt_addr(L, 5, "sl_schema*");

  /* Hand `up` over: from here sl__lua_stage owns it, also on failure. */
  sl_reader *up = g->r;
  g->r = NULL;
  sl_reader *out = NULL;
  const int rc = sl__lua_stage(up, kind, fn, env, &opts, schema, &out);
  if (rc != SL_OK) return slb_raise_last(L, rc);
  lua_pushlightuserdata(L, out);
  return 1;
}

static int stage_reader(lua_State *L) {
  sl__shipped *fn = slb_check_shipped(L, 1);
  sl__lua_env *env = slb_check_env(L, 2);
  const lua_Integer buffer = luaL_checkinteger(L, 3);
  luaL_argcheck(L, buffer >= 1, 3, "buffer must be >= 1");
  sl_schema *schema = opt_addr(L, 4, "sl_schema*");

  sl_reader *out = NULL;
  const int rc = sl__lua_reader(fn, env, (size_t)buffer, schema, &out);
  if (rc != SL_OK) return slb_raise_last(L, rc);
  lua_pushlightuserdata(L, out);
  return 1;
}

void slb_stage_open(lua_State *L) {
  static const luaL_Reg funcs[] = {
      {"map", stage_map},
      {"reader", stage_reader},
      {NULL, NULL},
  };
  luaL_newmetatable(L, SLB_GUARD_MT);
  lua_pushcfunction(L, guard_gc);
  lua_setfield(L, -2, "__gc");
  lua_pushliteral(L, SLB_GUARD_MT);
  lua_setfield(L, -2, "__metatable");
  lua_pop(L, 1);
  luaL_setfuncs(L, funcs, 0);
}
