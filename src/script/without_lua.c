/*
 * without_lua.c - the embedding API of a libsluice configured with
 * -DSLUICE_WITH_LUA=OFF (no LuaJIT): CMake builds this file instead of the
 * rest of src/script/.  The symbols stay, so a program linked against a
 * full libsluice still loads; opening a pipeline answers SL_EUNSUPPORTED
 * saying how this library was built (and `sluice run` prints it).
 */
#include "core/internal.h"

static int without_lua(const char *what, sl_reader **out) {
  if (out) *out = NULL;
  return sl_set_error(SL_EUNSUPPORTED,
                      "%s: this libsluice (%s) was built without Lua "
                      "(cmake -DSLUICE_WITH_LUA=OFF: no LuaJIT), so it "
                      "cannot run pipeline scripts",
                      what, SL_VERSION_STRING);
}

int sl_pipeline_open_file(const char *path, int argc, const char *const *argv,
                          sl_reader **out) {
  return without_lua(path ? path : "sl_pipeline_open_file", out);
}

int sl_pipeline_open_string(const char *code, const char *chunkname, int argc,
                            const char *const *argv, sl_reader **out) {
  return without_lua(chunkname && *chunkname ? chunkname : "pipeline", out);
}
