/*
 * lua_deadline.c - the per-sample deadline of the Lua stages: a decorator
 * call that runs longer than `deadline` seconds (an infinite loop, a
 * pathological input) is stopped and reported instead of hanging the
 * pipeline - and, with it, the training job and its shutdown.
 *
 * Protocol:
 *
 *   install   sl__lua_deadline_set, once per worker state, after the state
 *             is set up: a full userdata holding the settings is stored in
 *             the registry (so it is freed with the state), the JIT
 *             compiler is turned off for the decorator's code (below), and
 *             a count hook (LUA_MASKCOUNT, every HOOK_COUNT instructions) is
 *             set.
 *   arm       sl__lua_pcall arms the deadline around each protected call it
 *             makes (the start time is taken then; the hook function being
 *             set is how it knows, at the cost of one lua_gethook for
 *             states without a deadline) and disarms it afterwards.
 *   fire      the hook reads the monotonic clock; past the deadline (or
 *             when the stage is stopping, its `stop` flag set) it fires at
 *             every instruction from then on, and raises a Lua error naming
 *             the deadline and the source line running at the first of them
 *             that belongs to the decorator (below); so a pcall inside the
 *             decorator cannot swallow the error and go on: the next
 *             instruction outside it raises again.  The error leaves
 *             through sl__lua_pcall as any error does: SL_ELUA, "map
 *             (<where the function is defined>): deadline of 0.5 s exceeded
 *             (the call was running <source:line>)" plus the traceback.
 *
 * Why the JIT is off for the decorator: LuaJIT calls hooks from the
 * interpreter only.  A loop compiled into a trace (a `while true do end` is,
 * after 56 iterations) never returns to the interpreter, so no hook would
 * ever fire.  So the decorator's code runs interpreted: the function, the
 * functions nested in it (LUAJIT_MODE_ALLFUNC) and whatever its upvalues
 * reach, through tables too - every loop the user shipped.  A trace being
 * recorded elsewhere aborts when it meets a function with the JIT off, so
 * that code is never compiled.  Modules (values of package.loaded: sluice's
 * own sample accessors, the FFI helpers, what the decorator requires) keep
 * the JIT: they are the library, and their calls return.  A function of a
 * required module that never returns is therefore not stopped; neither is
 * one long call into C.  The price is interpreter speed for the
 * decorator's own bytecode (docs/RELIABILITY.md gives measured costs);
 * stages without a deadline are untouched.
 *
 * Only in the decorator's code.  The library code around the call -
 * sluice.worker's per-sample protocol, the sample accessors - moves sample
 * references between C and Lua in steps (a light userdata becomes a cdata
 * with a finalizer; a finalizer is removed and the pointer stored in C's
 * slot), and an error raised between two steps would leak a reference
 * (found by the shutdown stress test: a stop arriving as a worker entered
 * worker.map).  So the hook raises only while the running function comes
 * from a chunk of the decorator: install records the chunk names (the
 * interned `source` strings, compared by address with no allocation) of
 * every function it turns the JIT off for, in a registry table.  Elsewhere
 * the hook returns and looks again at the next instruction: a fired call
 * ends at the decorator's next instruction, or returns normally if the
 * decorator has already returned (the stage then sees `stop` itself).
 *
 * Threading: a worker state is used by one thread at a time (lua_host.h),
 * and so is its deadline.  `stop` is read with a relaxed load: it only
 * needs to be seen eventually.
 */
#include "core/internal.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>
#include <luajit.h>

#include <math.h>
#include <time.h>

/* Instructions between two looks at the clock: ~10 us of interpreted code,
 * so reading the clock (~20 ns) costs well under 1%. */
#define HOOK_COUNT 10000

/* The count in force: HOOK_COUNT, or a test's (sl__lua_deadline_hook_count)
 * to make the hook land anywhere in short calls. */
static atomic_int hook_count = HOOK_COUNT;

void sl__lua_deadline_hook_count(int n) {
  atomic_store(&hook_count, n > 0 ? n : HOOK_COUNT);
}

typedef struct deadline {
  uint64_t limit_ns;       /* the deadline, in nanoseconds */
  const atomic_bool *stop; /* the stage stopping; may be NULL */
  bool armed;              /* inside a protected call of sl__lua_pcall */
  bool fired;              /* raised in this call: the hook runs per
                              instruction until disarmed */
  uint64_t end_ns;         /* armed: when this call's time is up */
  char limit_text[32];     /* "0.5 s", for messages */
} deadline;

/* The registry keys: the addresses are what matter.  deadline_key: the
 * settings (userdata); sources_key: the decorator's chunk names, a table
 * of light userdata (a `source` string's address) -> true. */
static const char deadline_key, sources_key;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The state's deadline, or NULL.  Allocation-free (a raw get with a light
 * userdata key), so safe inside the hook. */
static deadline *get_deadline(lua_State *L) {
  lua_pushlightuserdata(L, (void *)&deadline_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  deadline *d = lua_touserdata(L, -1);
  lua_pop(L, 1);
  return d;
}

/* Whether the function running at `ar` comes from one of the decorator's
 * chunks.  Allocation-free. */
static bool in_decorator(lua_State *L, lua_Debug *ar) {
  if (!lua_getinfo(L, "S", ar) || !ar->source) return false;
  lua_pushlightuserdata(L, (void *)&sources_key);
  lua_rawget(L, LUA_REGISTRYINDEX);
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return false;
  }
  lua_pushlightuserdata(L, (void *)ar->source);
  lua_rawget(L, -2);
  bool yes = lua_toboolean(L, -1);
  lua_pop(L, 2);
  return yes;
}

static void hook(lua_State *L, lua_Debug *ar) {
  deadline *d = get_deadline(L);
  if (!d || !d->armed) return;
  bool stopping =
      d->stop && atomic_load_explicit(d->stop, memory_order_relaxed);
  if (!stopping && !d->fired && now_ns() < d->end_ns) return;
  if (!d->fired) {
    /* From now on at every instruction: see the banner. */
    d->fired = true;
    lua_sethook(L, hook, LUA_MASKCOUNT, 1);
  }
  if (!in_decorator(L, ar)) return; /* library code: see the banner */
  char where[LUA_IDSIZE + 32] = "?";
  if (lua_getinfo(L, "Sl", ar) && ar->currentline > 0)
    snprintf(where, sizeof where, "%s:%d", ar->short_src, ar->currentline);
  /* lua_pushfstring + lua_error rather than luaL_error, whose position
   * prefix would name the caller of the running function. */
  if (stopping)
    lua_pushfstring(L,
                    "stopped: the stage is closing (the call was running "
                    "%s)",
                    where);
  else
    lua_pushfstring(L, "deadline of %s exceeded (the call was running %s)",
                    d->limit_text, where);
  lua_error(L);
}

typedef struct set_args {
  double seconds;
  const atomic_bool *stop;
  int fn_ref;
} set_args;

/* Turns the JIT compiler off for the Lua function or table at stack index
 * `idx` and what it reaches: a function's nested functions
 * (LUAJIT_MODE_ALLFUNC) and upvalues, a table's keys and values; records
 * each function's chunk name in the table at stack index `srcs`.  `seen`
 * (a stack index) is a table of what was visited; modules (the values of
 * package.loaded) are put in it first, so they keep the JIT: they are the
 * library the decorator calls, not the decorator. */
static void jit_off_reachable(lua_State *L, int idx, int seen, int srcs,
                              int depth) {
  int t = lua_type(L, idx);
  if ((t != LUA_TFUNCTION && t != LUA_TTABLE) || lua_iscfunction(L, idx) ||
      depth > 100)
    return;
  lua_pushvalue(L, idx);
  lua_rawget(L, seen);
  bool visited = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (visited) return;
  lua_pushvalue(L, idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, seen);
  luaL_checkstack(L, 4, "deadline: nesting too deep");
  if (t == LUA_TFUNCTION) {
    lua_pushvalue(L, idx);
    luaJIT_setmode(L, -1, LUAJIT_MODE_ALLFUNC | LUAJIT_MODE_OFF);
    lua_Debug ar;
    if (lua_getinfo(L, ">S", &ar) && ar.source) { /* pops the function */
      lua_pushlightuserdata(L, (void *)ar.source);
      lua_pushboolean(L, 1);
      lua_rawset(L, srcs);
    }
    for (int i = 1; lua_getupvalue(L, idx, i) != NULL; i++) {
      jit_off_reachable(L, lua_gettop(L), seen, srcs, depth + 1);
      lua_pop(L, 1);
    }
    return;
  }
  lua_pushnil(L);
  while (lua_next(L, idx) != 0) {
    jit_off_reachable(L, lua_gettop(L) - 1, seen, srcs, depth + 1);
    jit_off_reachable(L, lua_gettop(L), seen, srcs, depth + 1);
    lua_pop(L, 1);
  }
}

/* Runs under lua_cpcall: creating the userdata and the `seen` table
 * allocates. */
static int set_cp(lua_State *L) {
  const set_args *a = lua_touserdata(L, 1);
  lua_pushlightuserdata(L, (void *)&deadline_key);
  deadline *d = lua_newuserdata(L, sizeof *d);
  memset(d, 0, sizeof *d);
  double ns = a->seconds * 1e9;
  d->limit_ns = ns >= 1.8e19 ? UINT64_MAX : (uint64_t)ns;
  d->stop = a->stop;
  snprintf(d->limit_text, sizeof d->limit_text, "%g s", a->seconds);
  lua_rawset(L, LUA_REGISTRYINDEX);

  lua_newtable(L);
  int seen = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  if (lua_istable(L, -1)) {
    lua_pushnil(L);
    while (lua_next(L, -2) != 0) {
      lua_pushboolean(L, 1);
      lua_rawset(L, seen); /* seen[module] = true; pops the value */
    }
  }
  lua_pop(L, 1);
  lua_pushlightuserdata(L, (void *)&sources_key);
  lua_newtable(L);
  int srcs = lua_gettop(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, a->fn_ref);
  jit_off_reachable(L, lua_gettop(L), seen, srcs, 0);
  lua_pop(L, 1);
  lua_rawset(L, LUA_REGISTRYINDEX); /* registry[sources_key] = srcs */
  return 0;
}

int sl__lua_deadline_set(lua_State *L, double seconds, const atomic_bool *stop,
                         int fn_ref, const char *what, const char *where) {
  SL_RETURN_ERROR_IF(!(seconds > 0) || isinf(seconds), SL_EINVAL,
                     "%s (%s): deadline must be a positive number of seconds",
                     what, where);
  set_args a = {seconds, stop, fn_ref};
  if (lua_cpcall(L, set_cp, &a) != 0) {
    lua_pop(L, 1);
    return sl_set_error(SL_ENOMEM, "%s (%s): cannot set the deadline", what,
                        where);
  }
  lua_sethook(L, hook, LUA_MASKCOUNT, atomic_load(&hook_count));
  return SL_OK;
}

void *sl__lua_deadline_arm(lua_State *L) {
  if (lua_gethook(L) != hook) return NULL;
  deadline *d = get_deadline(L);
  if (!d) return NULL;
  uint64_t now = now_ns();
  d->end_ns = d->limit_ns > UINT64_MAX - now ? UINT64_MAX : now + d->limit_ns;
  d->fired = false;
  d->armed = true;
  return d;
}

void sl__lua_deadline_disarm(lua_State *L, void *armed) {
  deadline *d = armed;
  if (!d) return;
  d->armed = false;
  if (d->fired) {
    d->fired = false;
    lua_sethook(L, hook, LUA_MASKCOUNT, atomic_load(&hook_count));
  }
}
