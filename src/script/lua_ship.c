/*
 * lua_ship.c - ships a Lua function from the declaring state to worker
 * states: bytecode plus upvalues, turned into bytes once and rebuilt in as
 * many worker states as a stage has threads.
 *
 * Two lua_States share nothing, so a function travels as bytes: its
 * bytecode (lua_dump; LuaJIT keeps the debug info, so tracebacks in the
 * worker still name the decorator's source line) and its upvalues encoded
 * in the tagged format below.  The blob is written once, never changed, and
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
 *                                           (n bytes of lua_dump output)
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
 * then fills it.  Upvalue cells are identified with lua_upvalueid: a cell
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
 * than SHIP_MAX_DEPTH tables/functions is refused: the writer and reader
 * recurse on the C stack, and worker threads may have small stacks.
 *
 * A string "module.function" (or "module:function") ships as a name: split
 * at the last '.' or ':', require the module in the worker, fetch the field,
 * which must be a function.  A name without a separator is a module that
 * is itself a function.
 *
 * Both directions run inside lua_pcall of a C function kept in the state's
 * registry (made once under lua_cpcall: making a closure allocates), so Lua
 * errors and memory errors become SL_ELUA / SL_ENOMEM, never a panic, and
 * the caller's stack is left as it was.
 */
#include "core/internal.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>

#include <stdarg.h>
#include <stdint.h>

/* lua_type() of an FFI cdata object in LuaJIT; lua.h has no name for it. */
#define SL_LUA_TCDATA 10

#define SHIP_MAX_DEPTH 200
#define PATH_CAP 256
#define WHERE_CAP (LUA_IDSIZE + 16)

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

/* An upvalue cell is remembered as fid * UPV_SCALE + k; LuaJIT allows at
 * most 60 upvalues a function. */
#define UPV_SCALE 256.0

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

/* "<short_src>:<linedefined>" of the function at idx. */
static void function_where(lua_State *L, int idx, char *buf, size_t cap) {
  lua_Debug ar;
  lua_pushvalue(L, idx);
  if (lua_getinfo(L, ">S", &ar)) {
    snprintf(buf, cap, "%s:%d", ar.short_src, ar.linedefined);
  } else {
    snprintf(buf, cap, "?");
  }
}

/* The type name used in messages. */
static const char *value_kind(lua_State *L, int idx) {
  switch (lua_type(L, idx)) {
  case LUA_TFUNCTION:
    return lua_iscfunction(L, idx) ? "C function" : "function";
  case LUA_TUSERDATA:
  case LUA_TLIGHTUSERDATA:
    return "userdata";
  case LUA_TTHREAD:
    return "thread";
  case SL_LUA_TCDATA:
    return "cdata";
  default:
    return lua_typename(L, lua_type(L, idx));
  }
}

/* --- writing (in the declaring state) ------------------------------------- */

typedef struct writer {
  lua_State *L;
  const char *what;
  unsigned char *buf;
  size_t len, cap;
  uint32_t nrefs; /* reference ids handed out */
  int depth;
  int failed; /* an unshippable value: the error detail is set */
  int nomem;  /* the byte buffer could not grow */
  /* Stack slots of the ship_cp frame (see there). */
  int memo, upmemo, loaded_inv, field_inv;
  /* For messages: the innermost function being encoded and the path of
   * the upvalue being encoded, which starts at path[pbase]. */
  const char *fwhere;
  size_t pbase, plen;
  char path[PATH_CAP];
  char root_where[WHERE_CAP];
} writer;

/* Unwinds to ship's lua_pcall; the flags in `w` say why. */
static void w_raise(writer *w) {
  lua_pushboolean(w->L, 0);
  lua_error(w->L);
}

static int w_reserve(writer *w, size_t n) {
  if (w->cap - w->len >= n) return 0;
  size_t cap = w->cap ? w->cap : 256;
  while (cap - w->len < n) {
    if (cap > SIZE_MAX / 2) return -1;
    cap *= 2;
  }
  unsigned char *b = sl__realloc(w->buf, cap);
  if (!b) return -1;
  w->buf = b;
  w->cap = cap;
  return 0;
}

static void put_bytes(writer *w, const void *p, size_t n) {
  if (w_reserve(w, n) != 0) {
    w->nomem = 1;
    w_raise(w);
    return;
  }
  if (n) memcpy(w->buf + w->len, p, n);
  w->len += n;
}

static void put_u8(writer *w, unsigned v) {
  unsigned char b = (unsigned char)v;
  put_bytes(w, &b, 1);
}

static void put_varint(writer *w, uint64_t v) {
  unsigned char b[10];
  size_t n = 0;
  do {
    b[n] = (unsigned char)(v & 0x7f);
    v >>= 7;
    if (v) b[n] |= 0x80;
    n++;
  } while (v);
  put_bytes(w, b, n);
}

static void put_lstring(writer *w, const char *s, size_t n) {
  put_varint(w, n);
  put_bytes(w, s, n);
}

/* lua_dump's writer: returns non-zero (which stops the dump) instead of
 * raising, since it runs inside LuaJIT's bytecode writer. */
static int dump_writer(lua_State *L, const void *p, size_t n, void *ud) {
  (void)L;
  writer *w = ud;
  if (w_reserve(w, n) != 0) {
    w->nomem = 1;
    return 1;
  }
  memcpy(w->buf + w->len, p, n);
  w->len += n;
  return 0;
}

/* --- the upvalue path, for messages --------------------------------------- */

static void path_printf(writer *w, const char *fmt, ...) SL_PRINTF(2, 3);
static void path_printf(writer *w, const char *fmt, ...) {
  if (w->plen >= PATH_CAP - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(w->path + w->plen, PATH_CAP - w->plen, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if (w->plen + (size_t)n >= PATH_CAP - 1) {
    /* Cut: say so, and let later appends do nothing. */
    w->plen = PATH_CAP - 1;
    memcpy(w->path + PATH_CAP - 4, "...", 4);
    return;
  }
  w->plen += (size_t)n;
}

static void path_restore(writer *w, size_t len) {
  w->plen = len;
  w->path[len] = '\0';
}

static int is_identifier(const char *s, size_t n) {
  static const char *const keywords[] = {
      "and", "break",    "do",     "else", "elseif", "end",   "false",
      "for", "function", "if",     "in",   "local",  "nil",   "not",
      "or",  "repeat",   "return", "then", "true",   "until", "while"};
  if (n == 0 || (s[0] >= '0' && s[0] <= '9')) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
          (c >= '0' && c <= '9')))
      return 0;
  }
  for (size_t i = 0; i < sizeof keywords / sizeof *keywords; i++)
    if (strlen(keywords[i]) == n && memcmp(keywords[i], s, n) == 0) return 0;
  return 1;
}

/* Appends the table key at kidx as Lua would write the access:
 * .name, ["any string"], [3], [true], or [?] for a table/function key. */
static void path_push_key(writer *w, int kidx) {
  lua_State *L = w->L;
  switch (lua_type(L, kidx)) {
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, kidx, &n);
    if (is_identifier(s, n)) {
      path_printf(w, ".%.*s", (int)n, s);
      return;
    }
    path_printf(w, "[\"");
    for (size_t i = 0; i < n && w->plen < PATH_CAP - 1; i++) {
      unsigned char c = (unsigned char)s[i];
      if (c == '"' || c == '\\') {
        path_printf(w, "\\%c", c);
      } else if (c >= 0x20 && c < 0x7f) {
        path_printf(w, "%c", c);
      } else {
        path_printf(w, "\\%u", c);
      }
    }
    path_printf(w, "\"]");
    return;
  }
  case LUA_TNUMBER:
    path_printf(w, "[%.14g]", lua_tonumber(L, kidx));
    return;
  case LUA_TBOOLEAN:
    path_printf(w, "[%s]", lua_toboolean(L, kidx) ? "true" : "false");
    return;
  default:
    path_printf(w, "[?]");
    return;
  }
}

static void fail_unshippable(writer *w, int idx) {
  sl_set_error(SL_ELUA,
               "%s: cannot ship upvalue '%s' (a %s) of the function defined "
               "at %s",
               w->what, w->path + w->pbase, value_kind(w->L, idx), w->fwhere);
  w->failed = 1;
  w_raise(w);
}

/* Depth and stack space for one more nested table or function. */
static void w_enter(writer *w) {
  if (++w->depth > SHIP_MAX_DEPTH || !lua_checkstack(w->L, 8)) {
    sl_set_error(SL_ELUA,
                 "%s: cannot ship upvalue '%s' of the function defined at %s: "
                 "nested more than %d tables/functions deep",
                 w->what, w->path + w->pbase, w->fwhere, SHIP_MAX_DEPTH);
    w->failed = 1;
    w_raise(w);
  }
}

/* --- identity ------------------------------------------------------------- */

/* The reference id of the object at idx, or -1 if not seen yet. */
static long memo_get(writer *w, int idx) {
  lua_State *L = w->L;
  lua_pushvalue(L, idx);
  lua_rawget(L, w->memo);
  long id = lua_type(L, -1) == LUA_TNUMBER ? (long)lua_tonumber(L, -1) : -1;
  lua_pop(L, 1);
  return id;
}

static uint32_t memo_add(writer *w, int idx) {
  lua_State *L = w->L;
  uint32_t id = w->nrefs++;
  lua_pushvalue(L, idx);
  lua_pushnumber(L, (lua_Number)id);
  lua_rawset(L, w->memo);
  return id;
}

/* --- names of loaded modules and their fields ----------------------------- */

static int name_less(const char *a, size_t an, const char *b, size_t bn) {
  int c = memcmp(a, b, SL_MIN(an, bn));
  return c < 0 || (c == 0 && an < bn);
}

/* inv[value at vidx] = string at sidx, unless it has a smaller name. */
static void inv_put(lua_State *L, int inv, int vidx, int sidx) {
  lua_pushvalue(L, vidx);
  lua_rawget(L, inv);
  if (lua_type(L, -1) == LUA_TSTRING) {
    size_t an, bn;
    const char *a = lua_tolstring(L, sidx, &an);
    const char *b = lua_tolstring(L, -1, &bn);
    if (!name_less(a, an, b, bn)) {
      lua_pop(L, 1);
      return;
    }
  }
  lua_pop(L, 1);
  lua_pushvalue(L, vidx);
  lua_pushvalue(L, sidx);
  lua_rawset(L, inv);
}

static int is_uncopyable(int t) {
  return t == LUA_TFUNCTION || t == LUA_TUSERDATA || t == LUA_TLIGHTUSERDATA ||
         t == SL_LUA_TCDATA;
}

/* field_inv[v] = "module\0field" for every C function, userdata or cdata
 * field of the module table at midx (one level: that is what a decorator
 * captures with `local floor = math.floor`).  Lua functions are left out:
 * they ship as bytecode, as the contract says. */
static void scan_fields(writer *w, int nidx, int midx) {
  lua_State *L = w->L;
  lua_pushnil(L);
  while (lua_next(L, midx)) {
    int t = lua_type(L, -1);
    if (lua_type(L, -2) == LUA_TSTRING && is_uncopyable(t) &&
        !(t == LUA_TFUNCTION && !lua_iscfunction(L, -1))) {
      int v = lua_gettop(L);
      lua_pushvalue(L, nidx);
      lua_pushlstring(L, "", 1); /* the \0 separator */
      lua_pushvalue(L, v - 1);
      lua_concat(L, 3);
      inv_put(L, w->field_inv, v, v + 1);
      lua_pop(L, 1);
    }
    lua_pop(L, 1);
  }
}

static void build_inverses(writer *w) {
  lua_State *L = w->L;
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED"); /* package.loaded */
  if (!lua_istable(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  int loaded = lua_gettop(L);
  lua_pushnil(L);
  while (lua_next(L, loaded)) {
    int t = lua_type(L, -1);
    size_t n = 0;
    const char *name =
        lua_type(L, -2) == LUA_TSTRING ? lua_tolstring(L, -2, &n) : NULL;
    if (name && (t == LUA_TTABLE || is_uncopyable(t)) &&
        !memchr(name, '\0', n)) {
      int v = lua_gettop(L);
      inv_put(L, w->loaded_inv, v, v - 1);
      if (t == LUA_TTABLE) scan_fields(w, v - 1, v);
    }
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
}

/* Encodes MODULE or FIELD when the value at idx has a name in the declaring
 * state; returns 0 if it has none.  `name` (optional) receives the name as
 * "module" or "module.field". */
static int encode_named(writer *w, int idx, char *name, size_t cap) {
  lua_State *L = w->L;
  size_t n;
  lua_pushvalue(L, idx);
  lua_rawget(L, w->loaded_inv);
  if (lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tolstring(L, -1, &n);
    memo_add(w, idx);
    put_u8(w, TAG_MODULE);
    put_lstring(w, s, n);
    if (name) snprintf(name, cap, "%s", s);
    lua_pop(L, 1);
    return 1;
  }
  lua_pop(L, 1);
  if (lua_type(L, idx) == LUA_TTABLE ||
      (lua_type(L, idx) == LUA_TFUNCTION && !lua_iscfunction(L, idx)))
    return 0; /* copied, not named */
  lua_pushvalue(L, idx);
  lua_rawget(L, w->field_inv);
  if (lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tolstring(L, -1, &n);
    size_t mn = strlen(s); /* the module part ends at the \0 */
    memo_add(w, idx);
    put_u8(w, TAG_FIELD);
    put_lstring(w, s, mn);
    put_lstring(w, s + mn + 1, n - mn - 1);
    if (name) snprintf(name, cap, "%s.%s", s, s + mn + 1);
    lua_pop(L, 1);
    return 1;
  }
  lua_pop(L, 1);
  return 0;
}

/* --- values --------------------------------------------------------------- */

static void encode_value(writer *w, int idx);

static void encode_table(writer *w, int idx) {
  lua_State *L = w->L;
  w_enter(w);
  memo_add(w, idx);
  int has_meta = lua_getmetatable(L, idx); /* pushes it when there is one */
  put_u8(w, has_meta ? TAG_TABLE_META : TAG_TABLE);
  size_t narr = lua_objlen(L, idx), total = 0;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    total++;
    lua_pop(L, 1);
  }
  put_varint(w, narr);
  put_varint(w, total > narr ? total - narr : 0);
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int k = lua_gettop(L) - 1;
    size_t saved = w->plen;
    path_push_key(w, k);
    encode_value(w, k);
    encode_value(w, k + 1);
    path_restore(w, saved);
    lua_pop(L, 1);
  }
  put_u8(w, TAG_END);
  if (has_meta) {
    /* The path becomes getmetatable(<path>). */
    char inner[PATH_CAP];
    size_t saved = w->plen;
    memcpy(inner, w->path + w->pbase, saved - w->pbase + 1);
    path_restore(w, w->pbase);
    path_printf(w, "getmetatable(%s)", inner);
    encode_value(w, lua_gettop(L));
    memcpy(w->path + w->pbase, inner, saved - w->pbase + 1);
    w->plen = saved;
    lua_pop(L, 1);
  }
  w->depth--;
}

static void encode_function(writer *w, int idx) {
  lua_State *L = w->L;
  w_enter(w);
  uint32_t fid = memo_add(w, idx);
  char where[WHERE_CAP];
  function_where(L, idx, where, sizeof where);

  put_u8(w, TAG_FUNCTION);
  size_t lenpos = w->len;
  uint32_t blen = 0;
  put_bytes(w, &blen, sizeof blen); /* patched after the dump */
  lua_pushvalue(L, idx);
  int rc = lua_dump(L, dump_writer, w);
  lua_pop(L, 1);
  if (w->nomem) w_raise(w);
  if (rc != 0 || w->len - lenpos - sizeof blen > UINT32_MAX) {
    sl_set_error(SL_ELUA, "%s: cannot dump the function defined at %s", w->what,
                 where);
    w->failed = 1;
    w_raise(w);
  }
  blen = (uint32_t)(w->len - lenpos - sizeof blen);
  memcpy(w->buf + lenpos, &blen, sizeof blen);

  int nups = 0;
  while (lua_getupvalue(L, idx, nups + 1)) {
    lua_pop(L, 1);
    nups++;
  }
  put_varint(w, (uint64_t)nups);

  /* Upvalue paths of this function start after the current path, and
   * messages name this function. */
  const char *saved_fwhere = w->fwhere;
  size_t saved_pbase = w->pbase, saved_plen = w->plen;
  w->fwhere = where;
  w->pbase = w->plen;
  for (int k = 1; k <= nups; k++) {
    void *cell = lua_upvalueid(L, idx, k);
    lua_pushlightuserdata(L, cell);
    lua_rawget(L, w->upmemo);
    if (lua_type(L, -1) == LUA_TNUMBER) {
      /* A cell shared with a closure already written. */
      double code = lua_tonumber(L, -1);
      uint64_t ofid = (uint64_t)(code / UPV_SCALE);
      put_u8(w, TAG_JOIN);
      put_varint(w, ofid);
      put_varint(w, (uint64_t)(code - (double)ofid * UPV_SCALE));
      lua_pop(L, 1);
      continue;
    }
    lua_pop(L, 1);
    lua_pushlightuserdata(L, cell);
    lua_pushnumber(L, (double)fid * UPV_SCALE + k);
    lua_rawset(L, w->upmemo);
    const char *name = lua_getupvalue(L, idx, k);
    path_restore(w, w->pbase);
    path_printf(w, "%s", name && *name ? name : "?");
    encode_value(w, lua_gettop(L));
    lua_pop(L, 1);
  }
  w->fwhere = saved_fwhere;
  w->pbase = saved_pbase;
  path_restore(w, saved_plen);
  w->depth--;
}

static void encode_value(writer *w, int idx) {
  lua_State *L = w->L;
  int t = lua_type(L, idx);
  switch (t) {
  case LUA_TNIL:
    put_u8(w, TAG_NIL);
    return;
  case LUA_TBOOLEAN:
    put_u8(w, lua_toboolean(L, idx) ? TAG_TRUE : TAG_FALSE);
    return;
  case LUA_TNUMBER: {
    lua_Number d = lua_tonumber(L, idx);
    put_u8(w, TAG_NUMBER);
    put_bytes(w, &d, sizeof d);
    return;
  }
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    put_u8(w, TAG_STRING);
    put_lstring(w, s, n);
    return;
  }
  default:
    break;
  }
  long id = memo_get(w, idx);
  if (id >= 0) {
    put_u8(w, TAG_REF);
    put_varint(w, (uint64_t)id);
    return;
  }
  if (t != LUA_TTHREAD && encode_named(w, idx, NULL, 0)) return;
  if (t == LUA_TTABLE) {
    encode_table(w, idx);
  } else if (t == LUA_TFUNCTION && !lua_iscfunction(L, idx)) {
    encode_function(w, idx);
  } else {
    fail_unshippable(w, idx);
  }
}

/* lua_pcall'd in the declaring state: 1 = the writer, 2 = the function.
 * Slots 3-6 hold the writer's tables:
 *   3 memo        object -> reference id
 *   4 upmemo      lua_upvalueid (light userdata) -> fid * UPV_SCALE + k
 *   5 loaded_inv  module value -> its name in package.loaded
 *   6 field_inv   C function / userdata / cdata -> "module\0field" */
static int ship_cp(lua_State *L) {
  writer *w = lua_touserdata(L, 1);
  lua_settop(L, 2);
  for (int i = 0; i < 4; i++)
    lua_newtable(L);
  w->memo = 3;
  w->upmemo = 4;
  w->loaded_inv = 5;
  w->field_inv = 6;
  build_inverses(w);
  if (lua_iscfunction(L, 2)) {
    /* `map(tostring)`: only a C function with a name can travel. */
    if (!encode_named(w, 2, w->root_where, sizeof w->root_where)) {
      sl_set_error(SL_ELUA,
                   "%s: cannot ship a C function that is not a field of a "
                   "loaded module",
                   w->what);
      w->failed = 1;
      w_raise(w);
    }
    return 0;
  }
  function_where(L, 2, w->root_where, sizeof w->root_where);
  w->fwhere = w->root_where;
  encode_value(w, 2);
  return 0;
}

/* --- the shipped object --------------------------------------------------- */

static void shipped_free(sl__shipped *f) {
  sl__free(f->what);
  sl__free(f->where);
  sl__free(f->module);
  sl__free(f->field);
  sl__free(f->data);
  sl__free(f);
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
static int ship_name(lua_State *L, int idx, const char *what,
                     sl__shipped **out) {
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  const char *sep = NULL;
  for (size_t i = 0; i < n; i++)
    if (s[i] == '.' || s[i] == ':') sep = s + i;
  SL_RETURN_ERROR_IF(
      n == 0 || memchr(s, '\0', n) || sep == s || sep == s + n - 1, SL_EINVAL,
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

/* Registry keys of the protected workers: their addresses. */
static const char ship_key, unship_key;

int sl__lua_ship(lua_State *L, int idx, const char *what, sl__shipped **out) {
  *out = NULL;
  if (!what) what = "lua";
  int top = lua_gettop(L);
  if (idx < 0 && idx > LUA_REGISTRYINDEX) idx = top + idx + 1;
  int t = lua_type(L, idx);
  if (t == LUA_TSTRING) return ship_name(L, idx, what, out);
  SL_RETURN_ERROR_IF(t != LUA_TFUNCTION, SL_EINVAL,
                     "%s: expected a function or a \"module.function\" name, "
                     "got a %s",
                     what, value_kind(L, idx));

  writer w;
  memset(&w, 0, sizeof w);
  w.L = L;
  w.what = what;
  w.fwhere = "?";
  int st = -1;
  if (lua_checkstack(L, 4) &&
      sl__lua_push_cached_cfunction(L, &ship_key, ship_cp) == 0) {
    lua_pushlightuserdata(L, &w);
    lua_pushvalue(L, idx);
    st = lua_pcall(L, 2, 0, 0);
  }
  int rc = SL_OK;
  if (st != 0) {
    if (w.failed) {
      rc = SL_ELUA; /* the message is set */
    } else if (st < 0 || w.nomem || st == LUA_ERRMEM) {
      rc = sl_set_error(SL_ENOMEM, "%s: out of memory shipping a function",
                        what);
    } else {
      const char *msg = lua_tostring(L, -1);
      rc = sl_set_error(SL_ELUA, "%s: cannot ship the function: %s", what,
                        msg ? msg : "(no message)");
    }
  }
  lua_settop(L, top);
  if (rc == SL_OK) {
    sl__shipped *f = shipped_alloc(what, w.root_where);
    if (!f) {
      rc = sl_set_error(SL_ENOMEM, "%s: out of memory shipping a function",
                        what);
    } else {
      /* Hand the buffer over, trimmed (it lives as long as the stage). */
      unsigned char *b = sl__realloc(w.buf, w.len ? w.len : 1);
      f->data = b ? b : w.buf;
      f->size = w.len;
      w.buf = NULL;
      *out = f;
    }
  }
  sl__free(w.buf);
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
