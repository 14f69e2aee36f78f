/*
 * lua_ship.c - ships a Lua function from the declaring state to worker
 * states: bytecode plus upvalues, turned into bytes once and rebuilt in as
 * many worker states as a stage has threads.
 *
 * Two lua_States share nothing, so a function travels as bytes: its
 * bytecode (string.dump; LuaJIT keeps the debug info, so tracebacks in the
 * worker still name the decorator's source line) and its upvalues encoded
 * in the tagged format below.
 *
 * Who does what.  The ENCODER is Lua: lua/sluice/ship.lua (`sluice.ship`),
 * the only one; the facade calls it and hands the bytes to
 * sl__shipped_new through the FFI, and sl__lua_ship (for C callers: tests,
 * embedders) calls it in the given state.  The DECODER is this file's
 * sl__lua_unship, run by worker states.  Everything below describes the
 * bytes both sides agree on; a change to it changes both files.  The blob is written once, never changed, and
 * only read afterwards, so several worker threads may unship it into their
 * own states at the same time; the only mutable word is the atomic
 * refcount.
 *
 * The format (in-process only: it never reaches a file or another process,
 * so fixed-width fields are in host byte order and there is no version):
 *
 *   value    := NIL | FALSE | TRUE
 *             | NUMBER  f64                 8 bytes, the double's exact bits
 *             | STRING  varint(n) byte*n    any bytes, \0 included
 *             | TABLE      varint(narr) varint(nrec) pair* END
 *             | TABLE_META varint(narr) varint(nrec) pair* END value
 *                                           (the last value: its metatable)
 *             | FUNCTION u32(n) byte*n varint(nups) upval*nups
 *                                           (n bytes of string.dump output)
 *             | MODULE  varint(n) name      require(name)
 *             | FIELD   varint(n) module varint(m) field
 *                                           require(module)[field]
 *             | REF     varint(id)          a table/function seen before
 *   pair     := value(key) value(value)     keys are never nil, so END
 *                                           cannot be mistaken for one
 *   upval    := JOIN varint(id) varint(k)   shares upvalue k (1-based) of
 *                                           function `id`
 *             | value
 *   varint   := unsigned LEB128 (7 bits a byte, low first, 0x80 = more)
 *
 *   tags: NIL 0, FALSE 1, TRUE 2, NUMBER 3, STRING 4, TABLE 5, TABLE_META 6,
 *         FUNCTION 7, MODULE 8, FIELD 9, REF 10, JOIN 11, END 12.
 *
 * Identity.  TABLE, TABLE_META, FUNCTION, MODULE and FIELD each define the
 * next reference id (0, 1, 2, ... in the order their tags appear), before
 * their contents, so a table or function reached twice - through a cycle,
 * a shared sub-table, mutual or self recursion - is one object in the
 * worker: the reader creates the table / loads the closure, records it,
 * then fills it.  Upvalue cells are identified with debug.upvalueid: a cell
 * already written (two closures over the same local) is a JOIN, rebuilt
 * with lua_upvaluejoin, so a counter shared by two shipped closures stays
 * shared.
 *
 * Modules.  A table or function rawequal to package.loaded[name] in the
 * declaring state ships as MODULE name (`local ffi = require "ffi"`,
 * `local m = math`).  Values that cannot be copied - C functions, userdata,
 * cdata - ship as FIELD when they are a field of a loaded module, one level
 * deep (`local floor = math.floor`, `local print = print` via package.loaded
 * ._G, `local C = ffi.C`, `local out = io.stdout`): the worker gets its own
 * module's value of that name.  When a value has several names, the least
 * (module, field) pair in byte order wins, so shipping is deterministic.
 * Lua functions and tables are always copied, even when some module also
 * exports them: the contract promises copies, and only whole modules are
 * shipped by name.
 * Anything else (a coroutine, a C function or userdata or cdata nobody
 * exports) is an error naming the upvalue path, its type and the source
 * line of the innermost function that captures it.
 *
 * Functions run in the worker with the worker's globals as their
 * environment (a setfenv'd environment is not shipped).  Nesting deeper
 * than SHIP_MAX_DEPTH (200) tables/functions is refused by the encoder, with
 * a message: the reader recurses on the C stack, and worker threads may
 * have small stacks (it treats deeper data as corrupt).
 *
 * A string "module.function" (or "module:function") ships as a name: split
 * at the last '.' or ':', require the module in the worker, fetch the field,
 * which must be a function.  A name without a separator is a module that
 * is itself a function.
 *
 * Both directions run inside lua_pcall of a C function kept in the state's
 * registry (made once under lua_cpcall: making a closure allocates), so Lua
 * errors and memory errors become SL_ELUA / SL_ENOMEM, never a panic, and
 * the caller's stack is left as it was.  (sl__lua_ship's protected
 * function requires "sluice.ship": the state's package.path must reach
 * lua/, as every state that runs the facade's does.)
 */
#include "core/internal.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>

#include <stdint.h>
#include <string.h>

/* The decoder's bound on nesting; the encoder (sluice.ship) refuses deeper
 * values with a message. */
#define SHIP_MAX_DEPTH 200

enum {
  TAG_NIL = 0,
  TAG_FALSE = 1,
  TAG_TRUE = 2,
  TAG_NUMBER = 3,
  TAG_STRING = 4,
  TAG_TABLE = 5,
  TAG_TABLE_META = 6,
  TAG_FUNCTION = 7,
  TAG_MODULE = 8,
  TAG_FIELD = 9,
  TAG_REF = 10,
  TAG_JOIN = 11,
  TAG_END = 12
};

struct sl__shipped {
  sl__refcnt ref;
  char *what;  /* "map", "filter", "reader": for messages */
  char *where; /* "<short_src>:<line>", or the name */
  /* A named function: module and field (NULL: the module itself). */
  char *module;
  char *field;
  /* A shipped function: the encoded root value. */
  unsigned char *data;
  size_t size;
};

/* --- the shipped object --------------------------------------------------- */

static void shipped_free(sl__shipped *f) {
  SL__FREE(f->what, f->where, f->module, f->field, f->data, f);
}

static sl__shipped *shipped_alloc(const char *what, const char *where) {
  sl__shipped *f = sl__calloc(1, sizeof *f);
  if (!f) return NULL;
  sl__ref_init(&f->ref);
  f->what = sl__strdup(what);
  f->where = sl__strdup(where);
  if (!f->what || !f->where) {
    shipped_free(f);
    return NULL;
  }
  return f;
}

/* "module.function" / "module:function": split at the last separator. */
static int ship_name(const char *s, const char *what, sl__shipped **out) {
  const size_t n = strlen(s);
  const char *sep = NULL;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '.' || s[i] == ':') sep = s + i;
  SL_RETURN_ERROR_IF(n == 0 || sep == s || sep == s + n - 1, SL_EINVAL,
                     "%s: '%s' is not a \"module.function\" name", what, s);
  sl__shipped *f = shipped_alloc(what, s);
  if (!f) goto nomem;
  if (sep) {
    f->module = sl__malloc((size_t)(sep - s) + 1);
    f->field = sl__strdup(sep + 1);
    if (!f->module || !f->field) goto nomem;
    memcpy(f->module, s, (size_t)(sep - s));
    f->module[sep - s] = '\0';
  } else if (!(f->module = sl__strdup(s))) {
    goto nomem;
  }
  *out = f;
  return SL_OK;
nomem:
  if (f) shipped_free(f);
  return sl_set_error(SL_ENOMEM, "%s: out of memory shipping '%s'", what, s);
}

int sl__shipped_new(const char *what, const char *where, const void *data,
                    size_t size, const char *name, sl__shipped **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "sl__shipped_new: out is NULL");
  *out = NULL;
  if (!what) what = "lua";
  if (name) return ship_name(name, what, out);
  SL_RETURN_ERROR_IF(!where || !data || size == 0, SL_EINVAL,
                     "%s: sl__shipped_new needs where and data, or a name",
                     what);
  sl__shipped *f = shipped_alloc(what, where);
  if (f) f->data = sl__malloc(size);
  if (!f || !f->data) {
    if (f) shipped_free(f);
    return sl_set_error(SL_ENOMEM, "%s: out of memory shipping a function",
                        what);
  }
  memcpy(f->data, data, size);
  f->size = size;
  *out = f;
  return SL_OK;
}

/* --- sl__lua_ship: the Lua encoder, called from C ------------------------- */

/* lua_pcall'd in the declaring state: 1 = the value, 2 = what.  Returns
 * require("sluice.ship").encode(value, what)'s three results. */
static int ship_cp(lua_State *L) {
  lua_settop(L, 2);
  lua_getfield(L, LUA_GLOBALSINDEX, "require");
  lua_pushliteral(L, "sluice.ship");
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "encode");
  lua_pushvalue(L, 1);
  lua_pushvalue(L, 2);
  lua_call(L, 2, 3);
  return 3;
}

/* Registry keys of the protected workers: their addresses. */
static const char ship_key, unship_key;

int sl__lua_ship(lua_State *L, int idx, const char *what, sl__shipped **out) {
  *out = NULL;
  if (!what) what = "lua";
  const int top = lua_gettop(L);
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = top + idx + 1;
  int st = -1;
  if (lua_checkstack(L, 6) &&
      sl__lua_push_cached_cfunction(L, &ship_key, ship_cp) == 0) {
    lua_pushvalue(L, idx);
    lua_pushstring(L, what); /* cannot fail: the stack has room */
    st = lua_pcall(L, 2, 3, 0);
  }
  int rc;
  if (st != 0) {
    if (st < 0 || st == LUA_ERRMEM) {
      rc = sl_set_error(SL_ENOMEM, "%s: out of memory shipping a function",
                        what);
    } else {
      const char *msg = lua_tostring(L, -1);
      rc = sl_set_error(SL_ELUA, "%s: cannot ship the function: %s", what,
                        msg ? msg : "(no message)");
    }
  } else if (lua_type(L, -3) != LUA_TSTRING) {
    /* nil, message, code: the message is copied before the stack is reset. */
    const char *msg = lua_tostring(L, -2);
    const char *code = lua_tostring(L, -1);
    rc = sl_set_error(code && strcmp(code, "EINVAL") == 0 ? SL_EINVAL : SL_ELUA,
                      "%s", msg ? msg : "(no message)");
  } else {
    size_t n = 0;
    const char *where = lua_tostring(L, -3);
    const char *data = lua_tolstring(L, -2, &n);
    const char *name = lua_tostring(L, -1);
    rc = sl__shipped_new(what, where, data, n, name, out);
  }
  lua_settop(L, top);
  return rc;
}

sl__shipped *sl__shipped_retain(sl__shipped *f) {
  if (f) sl__ref_inc(&f->ref);
  return f;
}

void sl__shipped_release(sl__shipped *f) {
  if (f && sl__ref_dec(&f->ref)) shipped_free(f);
}

const char *sl__shipped_where(const sl__shipped *f) {
  return f ? f->where : "?";
}

/* --- reading (in a worker state) ------------------------------------------ */

typedef struct reader {
  lua_State *L;
  const unsigned char *p, *end;
  int memo;       /* stack slot: reference id + 1 -> object */
  uint32_t nrefs; /* ids handed out */
  int depth;
} reader;

/* The blob is ours, so this never fires unless memory was overwritten; the
 * checks keep a bug from turning into reads past the buffer. */
static void r_corrupt(reader *r) {
  luaL_error(r->L, "corrupt shipped function data");
}

static unsigned get_u8(reader *r) {
  if (r->p >= r->end) r_corrupt(r);
  return *r->p++;
}

static uint64_t get_varint(reader *r) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    unsigned b = get_u8(r);
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  r_corrupt(r);
  return 0;
}

static const char *get_bytes(reader *r, size_t n) {
  if ((size_t)(r->end - r->p) < n) r_corrupt(r);
  const char *s = (const char *)r->p;
  r->p += n;
  return s;
}

/* Records the object on top as the next reference id. */
static void r_memo_add(reader *r) {
  lua_pushvalue(r->L, -1);
  lua_rawseti(r->L, r->memo, (int)++r->nrefs);
}

static void r_require(lua_State *L, const char *name, size_t n) {
  lua_getfield(L, LUA_GLOBALSINDEX, "require");
  lua_pushlstring(L, name, n);
  lua_call(L, 1, 1);
}

typedef struct load_state {
  const char *p;
  size_t n;
} load_state;

static const char *load_reader(lua_State *L, void *ud, size_t *size) {
  (void)L;
  load_state *s = ud;
  *size = s->n;
  s->n = 0;
  return *size ? s->p : NULL;
}

static void r_enter(reader *r) {
  if (++r->depth > SHIP_MAX_DEPTH) r_corrupt(r);
  luaL_checkstack(r->L, 8, "shipped function nested too deep");
}

static void decode_value(reader *r);

static void decode_table(reader *r, int meta) {
  lua_State *L = r->L;
  r_enter(r);
  uint64_t narr = get_varint(r), nrec = get_varint(r);
  lua_createtable(L, (int)SL_MIN(narr, (uint64_t)1 << 24),
                  (int)SL_MIN(nrec, (uint64_t)1 << 24));
  r_memo_add(r);
  int t = lua_gettop(L);
  for (;;) {
    if (r->p < r->end && *r->p == TAG_END) {
      r->p++;
      break;
    }
    decode_value(r); /* key */
    if (lua_isnil(L, -1)) r_corrupt(r);
    decode_value(r); /* value */
    lua_rawset(L, t);
  }
  if (meta) {
    decode_value(r);
    if (!lua_istable(L, -1)) r_corrupt(r);
    lua_setmetatable(L, t);
  }
  r->depth--;
}

static void decode_function(reader *r) {
  lua_State *L = r->L;
  r_enter(r);
  uint32_t blen;
  memcpy(&blen, get_bytes(r, sizeof blen), sizeof blen);
  load_state ls = {get_bytes(r, blen), blen};
  /* The chunk name is unused: the bytecode carries its own source name. */
  if (lua_load(L, load_reader, &ls, "=shipped") != 0) lua_error(L);
  r_memo_add(r);
  int fi = lua_gettop(L);
  uint64_t nups = get_varint(r);
  for (uint64_t k = 1; k <= nups; k++) {
    /* lua_getupvalue also checks k against the loaded closure: setting or
     * joining past its upvalues would write out of bounds. */
    if (!lua_getupvalue(L, fi, (int)k)) r_corrupt(r);
    lua_pop(L, 1);
    if (r->p < r->end && *r->p == TAG_JOIN) {
      r->p++;
      uint64_t id = get_varint(r), ok = get_varint(r);
      if (id >= r->nrefs) r_corrupt(r);
      lua_rawgeti(L, r->memo, (int)id + 1);
      if (!lua_isfunction(L, -1) || lua_iscfunction(L, -1) ||
          !lua_getupvalue(L, -1, (int)ok))
        r_corrupt(r);
      lua_pop(L, 1);
      lua_upvaluejoin(L, fi, (int)k, -1, (int)ok);
      lua_pop(L, 1);
      continue;
    }
    decode_value(r);
    lua_setupvalue(L, fi, (int)k);
  }
  r->depth--;
}

static void decode_value(reader *r) {
  lua_State *L = r->L;
  unsigned tag = get_u8(r);
  switch (tag) {
  case TAG_NIL:
    lua_pushnil(L);
    return;
  case TAG_FALSE:
  case TAG_TRUE:
    lua_pushboolean(L, tag == TAG_TRUE);
    return;
  case TAG_NUMBER: {
    lua_Number d;
    memcpy(&d, get_bytes(r, sizeof d), sizeof d);
    lua_pushnumber(L, d);
    return;
  }
  case TAG_STRING: {
    size_t n = (size_t)get_varint(r);
    const char *s = get_bytes(r, n);
    lua_pushlstring(L, s, n);
    return;
  }
  case TAG_TABLE:
  case TAG_TABLE_META:
    decode_table(r, tag == TAG_TABLE_META);
    return;
  case TAG_FUNCTION:
    decode_function(r);
    return;
  case TAG_MODULE: {
    size_t n = (size_t)get_varint(r);
    const char *s = get_bytes(r, n);
    r_require(L, s, n);
    r_memo_add(r);
    return;
  }
  case TAG_FIELD: {
    size_t mn = (size_t)get_varint(r);
    const char *m = get_bytes(r, mn);
    size_t fn = (size_t)get_varint(r);
    const char *fld = get_bytes(r, fn);
    lua_pushlstring(L, m, mn);
    int base = lua_gettop(L);
    lua_pushlstring(L, fld, fn);
    r_require(L, m, mn);
    lua_pushvalue(L, base + 1);
    lua_gettable(L, -2); /* not raw: a module may load fields lazily */
    if (lua_isnil(L, -1))
      luaL_error(L, "module '%s' has no field '%s'", lua_tostring(L, base),
                 lua_tostring(L, base + 1));
    lua_replace(L, base);
    lua_settop(L, base);
    r_memo_add(r);
    return;
  }
  case TAG_REF: {
    uint64_t id = get_varint(r);
    if (id >= r->nrefs) r_corrupt(r);
    lua_rawgeti(L, r->memo, (int)id + 1);
    return;
  }
  default:
    r_corrupt(r);
  }
}

/* lua_pcall'd in the worker state: 1 = the shipped object.  Returns the
 * function. */
static int unship_cp(lua_State *L) {
  const sl__shipped *f = lua_touserdata(L, 1);
  lua_settop(L, 1);
  if (f->module) {
    r_require(L, f->module, strlen(f->module));
    if (f->field) {
      lua_getfield(L, -1, f->field);
      if (!lua_isfunction(L, -1))
        return luaL_error(L, "module '%s' has no function '%s'", f->module,
                          f->field);
    } else if (!lua_isfunction(L, -1)) {
      return luaL_error(L, "module '%s' is not a function", f->module);
    }
    return 1;
  }
  lua_newtable(L);
  reader r = {L, f->data, f->data + f->size, 2, 0, 0};
  decode_value(&r);
  if (r.p != r.end || !lua_isfunction(L, -1)) r_corrupt(&r);
  return 1;
}

int sl__lua_unship(lua_State *W, const sl__shipped *f) {
  int st = -1;
  if (lua_checkstack(W, 4) &&
      sl__lua_push_cached_cfunction(W, &unship_key, unship_cp) == 0) {
    lua_pushlightuserdata(W, (void *)f);
    st = lua_pcall(W, 1, 1, 0);
  }
  if (st == 0) return SL_OK;
  const char *msg = st > 0 ? lua_tostring(W, -1) : NULL;
  if (!msg) msg = "out of memory";
  int code = st < 0 || st == LUA_ERRMEM ? SL_ENOMEM : SL_ELUA;
  if (f->module) {
    sl_set_error(code, "%s: '%s': %s", f->what, f->where, msg);
  } else {
    sl_set_error(code, "%s (%s): %s", f->what, f->where, msg);
  }
  if (st > 0) lua_pop(W, 1);
  return code;
}
