/*
 * lua_value.c - a plain Lua value as bytes, and back (lua_value.h).
 */
#include "script/lua_value.h"

#include "core/bytes.h"
#include "core/internal.h"

#include <math.h>
#include <string.h>

static bool put(sl__lua_bytes *b, const void *p, size_t n, const char **why) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n)
      cap *= 2;
    unsigned char *q = sl__realloc(b->p, cap);
    if (!q) {
      *why = "out of memory";
      return false;
    }
    b->p = q;
    b->cap = cap;
  }
  memcpy(b->p + b->n, p, n);
  b->n += n;
  return true;
}

static bool put_tag(sl__lua_bytes *b, char tag, const char **why) {
  return put(b, &tag, 1, why);
}

static bool put_u64(sl__lua_bytes *b, uint64_t v, const char **why) {
  unsigned char x[8];
  sl__put64(x, v);
  return put(b, x, 8, why);
}

/* `seen` (absolute index): the tables met so far. */
static bool encode(lua_State *L, int idx, sl__lua_bytes *b, int depth, int seen,
                   const char **why) {
  switch (lua_type(L, idx)) {
  case LUA_TNIL:
    return put_tag(b, 'n', why);
  case LUA_TBOOLEAN:
    return put_tag(b, lua_toboolean(L, idx) ? 't' : 'f', why);
  case LUA_TNUMBER: {
    double d = lua_tonumber(L, idx);
    uint64_t bits;
    memcpy(&bits, &d, 8);
    return put_tag(b, 'd', why) && put_u64(b, bits, why);
  }
  case LUA_TSTRING: {
    size_t n;
    const char *s = lua_tolstring(L, idx, &n);
    return put_tag(b, 's', why) && put_u64(b, n, why) && put(b, s, n, why);
  }
  case LUA_TTABLE:
    break;
  default:
    *why = lua_typename(L, lua_type(L, idx));
    return false;
  }
  if (depth >= SL__LUA_VALUE_DEPTH) {
    *why = "tables nested too deep";
    return false;
  }
  if (!lua_checkstack(L, 4)) {
    *why = "out of memory";
    return false;
  }
  if (lua_getmetatable(L, idx)) {
    lua_pop(L, 1);
    *why = "a table with a metatable";
    return false;
  }
  lua_pushvalue(L, idx);
  lua_rawget(L, seen);
  bool twice = !lua_isnil(L, -1);
  lua_pop(L, 1);
  if (twice) {
    *why = "a table reached twice (shared, or a cycle)";
    return false;
  }
  lua_pushvalue(L, idx);
  lua_pushboolean(L, 1);
  lua_rawset(L, seen);
  if (!put_tag(b, 'T', why)) return false;
  lua_pushnil(L);
  while (lua_next(L, idx)) {
    int top = lua_gettop(L);
    if (!encode(L, top - 1, b, depth + 1, seen, why) ||
        !encode(L, top, b, depth + 1, seen, why)) {
      lua_pop(L, 2);
      return false;
    }
    lua_pop(L, 1);
  }
  return put_tag(b, 'e', why);
}

bool sl__lua_value_encode(lua_State *L, int idx, sl__lua_bytes *out,
                          const char **why) {
  int top = lua_gettop(L);
  if (idx < 0) idx = top + 1 + idx;
  if (!lua_checkstack(L, 4)) {
    *why = "out of memory";
    return false;
  }
  lua_newtable(L);
  bool ok = encode(L, idx, out, 0, top + 1, why);
  lua_settop(L, top);
  return ok;
}

typedef struct reader {
  const unsigned char *p;
  size_t n, at;
} reader;

static bool decode(lua_State *L, reader *r, int depth) {
  if (r->at >= r->n || !lua_checkstack(L, 4)) return false;
  char tag = (char)r->p[r->at++];
  switch (tag) {
  case 'n':
    lua_pushnil(L);
    return true;
  case 'f':
  case 't':
    lua_pushboolean(L, tag == 't');
    return true;
  case 'd':
  case 's': {
    if (r->n - r->at < 8) return false;
    uint64_t v = sl__get64(r->p + r->at);
    r->at += 8;
    if (tag == 'd') {
      double d;
      memcpy(&d, &v, 8);
      lua_pushnumber(L, d);
      return true;
    }
    if (v > r->n - r->at) return false;
    lua_pushlstring(L, (const char *)r->p + r->at, (size_t)v);
    r->at += (size_t)v;
    return true;
  }
  case 'T':
    break;
  default:
    return false;
  }
  if (depth >= SL__LUA_VALUE_DEPTH) return false;
  lua_newtable(L);
  for (;;) {
    if (r->at >= r->n) break;
    if (r->p[r->at] == 'e') {
      r->at++;
      return true;
    }
    if (!decode(L, r, depth + 1)) break;
    if (lua_isnil(L, -1) ||
        (lua_type(L, -1) == LUA_TNUMBER && isnan(lua_tonumber(L, -1)))) {
      lua_pop(L, 1);
      break;
    }
    if (!decode(L, r, depth + 1)) {
      lua_pop(L, 1);
      break;
    }
    lua_rawset(L, -3);
  }
  lua_pop(L, 1);
  return false;
}

bool sl__lua_value_decode(lua_State *L, const unsigned char *p, size_t n) {
  reader r = {p, n, 0};
  if (!decode(L, &r, 0)) return false;
  if (r.at != n) {
    lua_pop(L, 1);
    return false;
  }
  return true;
}
