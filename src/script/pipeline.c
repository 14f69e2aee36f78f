/*
 * pipeline.c - the embedding API: a C program opens a pipeline declared by a
 * Lua script (a file or a string) and pulls batches from it without any Lua
 * of its own.
 *
 * Opening.  A fresh lua_State private to the pipeline (luaL_newstate, the
 * standard libraries; package.path/cpath are LuaJIT's - LUA_PATH/LUA_CPATH
 * from the environment when set - and sluice's own Lua folders (the build
 * tree's, or those of the prefix libsluice was loaded from) come first when
 * LUA_PATH is not set, last when it is set but cannot find sluice: see
 * lua_path.c).  The global `arg` is the script name at 0 and the
 * arguments at 1..n; the chunk is called with the arguments as `...`.  The
 * script runs under sl__lua_pcall, so a runtime error carries the Lua
 * message and a traceback naming the script's line.  Everything that
 * allocates in the state runs inside one lua_cpcall, so running out of
 * memory ends as SL_ENOMEM rather than a panic.
 *
 * Taking the reader.  The script returns a sluice.Pipeline; sluice._embed
 * (lua/sluice/init.lua) stores its sl_reader* into the C slot it is given
 * and marks the Lua object consumed ("the C embedding"), removing its
 * finalizer: from then on the C side owns the reader.  Anything else
 * returned is SL_EINVAL, "pipeline script X returned a <type>, not a
 * pipeline".
 *
 * The reader owns the state (sl__reader_own): the embedding API is the
 * reader API.  sl_reader_destroy destroys the chain (joining its threads)
 * before lua_close, whose finalizers may still call into libsluice for
 * objects the script made and dropped.  The state is idle meanwhile: Lua
 * stages of the chain run in worker states of their own, so an error in a
 * Lua decorator arrives as the reader's SL_ELUA with message and traceback.
 */
#include "core/internal.h"
#include "stages/stage.h"
#include "script/lua_host.h"
#include "script/lua_internal.h"

#include <lauxlib.h>
#include <lualib.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct open_ctx {
  const char *code; /* NULL: load the file `name` */
  size_t code_len;
  const char *name;      /* file path, or the string's chunk name */
  const char *chunkname; /* for luaL_loadbuffer ("=name" or "@name") */
  int argc;
  const char *const *argv;
  int rc;            /* SL_OK or the error (detail already set) */
  sl_reader *reader; /* on SL_OK */
} open_ctx;

static int load_error(lua_State *L, int st, const char *name) {
  const char *msg = lua_tostring(L, -1);
  if (!msg) msg = "(no message)";
  int code = st == LUA_ERRMEM    ? SL_ENOMEM
             : st == LUA_ERRFILE ? SL_EIO
                                 : SL_ELUA;
  sl_set_error(code, "pipeline script %s: %s", name, msg);
  lua_pop(L, 1);
  return code;
}

/* Called with the script's chunk: its short source name and the lines of
 * its tail calls ("3" or "3/5"), or nothing when LuaJIT's jit.util cannot
 * be loaded.  Bytecode only: nothing of the script runs again. */
static const char TAIL_LINES_SRC[] =
    "local f = ...\n"
    "local okj, ju = pcall(require, 'jit.util')\n"
    "local okv, vmdef = pcall(require, 'jit.vmdef')\n"
    "if not (okj and okv) then return end\n"
    "local lines, seen, pc = {}, {}, 1\n"
    "while true do\n"
    "  local ins = ju.funcbc(f, pc)\n"
    "  if not ins then break end\n"
    "  local op = ins % 256\n"
    "  local name = vmdef.bcnames:sub(op * 6 + 1, op * 6 + 6)\n"
    "  if name == 'CALLT ' or name == 'CALLMT' then\n"
    "    local l = ju.funcinfo(f, pc).currentline\n"
    "    if l and not seen[l] then seen[l] = true; lines[#lines + 1] = l end\n"
    "  end\n"
    "  pc = pc + 1\n"
    "end\n"
    "if #lines > 0 then\n"
    "  return debug.getinfo(f, 'S').short_src, table.concat(lines, '/')\n"
    "end\n";

/* After the script (its chunk at -1) raised an error: when no frame of the
 * script is in the message's traceback, the script was left by a tail call
 * (`return sluice.open_files(...)`: the callee's frame replaces the
 * script's), and the message gets the script's line(s) that make tail calls
 * - "pipeline script (X): X:3: <message>" and a traceback line - as
 * docs/EMBEDDING.md promises for every error raised by the script.  Leaves
 * the error as it is when it cannot tell. */
static void name_tail_call(lua_State *L, const char *name) {
  const char *err = sl_last_error();
  size_t at = strlen("pipeline script (") + strlen(name) + strlen("): ");
  if (sl_last_error_code() != SL_ELUA || !strstr(err, "\nstack traceback:") ||
      strlen(err) < at || strncmp(err + at - 3, "): ", 3) != 0)
    return;
  int top = lua_gettop(L);
  if (luaL_loadbuffer(L, TAIL_LINES_SRC, sizeof TAIL_LINES_SRC - 1,
                      "=sluice embedding") != 0) {
    lua_settop(L, top);
    return;
  }
  lua_pushvalue(L, top);
  if (lua_pcall(L, 1, 2, 0) != 0 || !lua_isstring(L, -2) ||
      !lua_isstring(L, -1)) {
    lua_settop(L, top);
    return;
  }
  const char *src = lua_tostring(L, -2), *lines = lua_tostring(L, -1);
  const char *frame = lua_pushfstring(L, "\n\t%s:", src);
  char *saved = strstr(err, frame) ? NULL : sl__strdup(err);
  if (saved) {
    sl_set_error(SL_ELUA, "%.*s%s:%s: %s\n\t%s:%s: in main chunk (tail call)",
                 (int)at, saved, src, lines, saved + at, src, lines);
    sl__free(saved);
  }
  lua_settop(L, top);
}

static int open_cp(lua_State *L) {
  open_ctx *c = lua_touserdata(L, 1);
  luaL_openlibs(L);
  /* sluice's own Lua folders: first unless the user set LUA_PATH, then only
   * when that path cannot find sluice (lua_path.c). */
  sl__lua_add_own_path(L, getenv("LUA_PATH") == NULL);

  lua_createtable(L, c->argc, 1);
  lua_pushstring(L, c->name);
  lua_rawseti(L, -2, 0);
  for (int i = 0; i < c->argc; i++) {
    lua_pushstring(L, c->argv[i] ? c->argv[i] : "");
    lua_rawseti(L, -2, i + 1);
  }
  lua_setfield(L, LUA_GLOBALSINDEX, "arg");

  int st = c->code ? luaL_loadbuffer(L, c->code, c->code_len, c->chunkname)
                   : luaL_loadfile(L, c->name);
  if (st != 0) {
    c->rc = load_error(L, st, c->name);
    return 0;
  }
  luaL_checkstack(L, c->argc + 5, "pipeline script: too many arguments");
  lua_pushvalue(L, -1); /* the chunk, kept for name_tail_call */
  for (int i = 0; i < c->argc; i++)
    lua_pushstring(L, c->argv[i] ? c->argv[i] : "");
  c->rc = sl__lua_pcall(L, c->argc, 1, "pipeline script", c->name);
  if (c->rc != SL_OK) {
    name_tail_call(L, c->name);
    return 0;
  }

  /* The value is at the top: sluice._embed(value, &c->reader) takes it. */
  int v = lua_gettop(L);
  lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
  lua_getfield(L, -1, "sluice");
  if (lua_istable(L, v) && lua_istable(L, -1)) {
    lua_getfield(L, -1, "_embed");
    lua_pushvalue(L, v);
    lua_pushlightuserdata(L, &c->reader);
    c->rc = sl__lua_pcall(L, 2, 1, "pipeline script", c->name);
    if (c->rc != SL_OK || c->reader) return 0;
    if (lua_isstring(L, -1)) {
      c->rc = sl_set_error(SL_EINVAL,
                           "pipeline script %s returned a pipeline that is %s",
                           c->name, lua_tostring(L, -1));
      return 0;
    }
  }
  c->rc = sl_set_error(SL_EINVAL,
                       "pipeline script %s returned a %s, not a pipeline",
                       c->name, luaL_typename(L, v));
  return 0;
}

static void close_state(void *L) {
  lua_close(L);
}

static int open_common(open_ctx *c, sl_reader **out) {
  lua_State *L = luaL_newstate();
  SL_RETURN_ERROR_IF(!L, SL_ENOMEM, "pipeline: cannot create a Lua state");
  c->rc = SL_ELUA;
  c->reader = NULL;
  int st = lua_cpcall(L, open_cp, c);
  if (st != 0) {
    /* Only a memory error (or an error inside an error handler) gets here;
     * a reader taken before it would have been assigned last, so none is. */
    const char *msg = lua_tostring(L, -1);
    int code = st == LUA_ERRMEM ? SL_ENOMEM : SL_ELUA;
    sl_set_error(code, "pipeline script %s: %s", c->name,
                 msg ? msg : "(no message)");
    lua_close(L);
    return code;
  }
  if (c->rc != SL_OK) {
    int code = c->rc;
    /* lua_close runs finalizers that may call sluice and so clobber the
     * detail message: keep it across. */
    char *saved = sl__strdup(sl_last_error());
    lua_close(L);
    if (saved) {
      sl_set_error(code, "%s", saved);
      sl__free(saved);
    }
    return code;
  }
  sl__reader_own(c->reader, close_state, L);
  *out = c->reader;
  return SL_OK;
}

static int check_args(int argc, const char *const *argv, sl_reader **out,
                      const char *what) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "%s: out is NULL", what);
  *out = NULL;
  SL_RETURN_ERROR_IF(argc < 0 || (argc > 0 && !argv), SL_EINVAL,
                     "%s: argc %d with %s argv", what, argc,
                     argv ? "an" : "a NULL");
  return SL_OK;
}

int sl_pipeline_open_file(const char *path, int argc, const char *const *argv,
                          sl_reader **out) {
  int rc = check_args(argc, argv, out, "sl_pipeline_open_file");
  if (rc != SL_OK) return rc;
  SL_RETURN_ERROR_IF(!path, SL_EINVAL, "sl_pipeline_open_file: path is NULL");
  open_ctx c = {0};
  c.name = path;
  c.argc = argc;
  c.argv = argv;
  return open_common(&c, out);
}

int sl_pipeline_open_string(const char *code, const char *chunkname, int argc,
                            const char *const *argv, sl_reader **out) {
  int rc = check_args(argc, argv, out, "sl_pipeline_open_string");
  if (rc != SL_OK) return rc;
  SL_RETURN_ERROR_IF(!code, SL_EINVAL, "sl_pipeline_open_string: code is NULL");
  if (!chunkname || !chunkname[0]) chunkname = "pipeline";
  /* "=name": messages and tracebacks show the name as given. */
  size_t n = strlen(chunkname);
  char *cn = sl__malloc(n + 2);
  SL_RETURN_ERROR_IF(!cn, SL_ENOMEM, "sl_pipeline_open_string: out of memory");
  cn[0] = '=';
  memcpy(cn + 1, chunkname, n + 1);
  open_ctx c = {0};
  c.code = code;
  c.code_len = strlen(code);
  c.name = chunkname;
  c.chunkname = cn;
  c.argc = argc;
  c.argv = argv;
  rc = open_common(&c, out);
  sl__free(cn);
  return rc;
}
