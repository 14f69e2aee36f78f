/*
 * lua_value.h - a plain Lua value as bytes, and back: what a state holds of
 * a Lua `scan`'s accumulator (lua_flow.c, docs/RESUME.md).
 *
 * Plain: nil, a boolean, a number, a string, or a table of plain keys and
 * values without a metatable, each table reached once (no cycle, no table
 * shared by two places: both would come back as two tables), nested at
 * most SL__LUA_VALUE_DEPTH deep.  Anything else - a function, a userdata
 * or cdata (an FFI object, a 64-bit integer), a coroutine - is not plain.
 * Encoding: a tag byte per value ('n', 'f', 't'; 'd' and the double's 8
 * bytes, little-endian; 's', an 8-byte length and the bytes; 'T', key and
 * value pairs in lua_next's order, 'e').
 *
 * Threads: the caller's lua_State, used by one thread at a time.
 */
#ifndef SLUICE_LUA_VALUE_H
#define SLUICE_LUA_VALUE_H

#include <lua.h>

#include <stdbool.h>
#include <stddef.h>

#define SL__LUA_VALUE_DEPTH 64

/* A growing byte string (sl__malloc'd; free p with sl__free). */
typedef struct sl__lua_bytes {
  unsigned char *p;
  size_t n, cap;
} sl__lua_bytes;

/* Appends the value at `idx` of L to *out.  True, or false with *why set
 * to what is not plain ("a function", "a table with a metatable", ...: a
 * static string) or "out of memory"; *out then holds a partial encoding
 * (reset n before reuse).  Leaves L's stack as it found it. */
bool sl__lua_value_encode(lua_State *L, int idx, sl__lua_bytes *out,
                          const char **why);

/* Pushes the value encoded in p[0..n).  True, or false with nothing pushed
 * when the bytes are not one whole encoding (a bad tag, cut short, bytes
 * after it, a nil or NaN key, deeper than SL__LUA_VALUE_DEPTH). */
bool sl__lua_value_decode(lua_State *L, const unsigned char *p, size_t n);

#endif
