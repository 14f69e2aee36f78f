/*
 * without_lua.c - the embedding API of a libsluice configured with
 * -DSLUICE_WITH_LUA=OFF (no LuaJIT): CMake builds this file instead of the
 * rest of src/script/.  The symbols stay, so a program linked against a
 * full libsluice still loads; opening a pipeline answers SL_EUNSUPPORTED
 * saying how this library was built (and `sluice run` prints it).  No
 * sl_pipeline can exist here, so the calls taking one treat NULL as the
 * full library does and anything else as unsupported.
 */
#include "core/internal.h"

static int without_lua(const char *what) {
  return sl_set_error(SL_EUNSUPPORTED,
                      "%s: this libsluice (%s) was built without Lua "
                      "(cmake -DSLUICE_WITH_LUA=OFF: no LuaJIT), so it "
                      "cannot run pipeline scripts",
                      what, SL_VERSION_STRING);
}

int sl_pipeline_open_file(const char *path, int argc, const char *const *argv,
                          sl_pipeline **out) {
  SL_UNUSED(argc);
  SL_UNUSED(argv);
  if (out) *out = NULL;
  return without_lua(path ? path : "sl_pipeline_open_file");
}

int sl_pipeline_open_string(const char *code, const char *chunkname, int argc,
                            const char *const *argv, sl_pipeline **out) {
  SL_UNUSED(code);
  SL_UNUSED(argc);
  SL_UNUSED(argv);
  if (out) *out = NULL;
  return without_lua(chunkname && *chunkname ? chunkname : "pipeline");
}

int sl_pipeline_next(sl_pipeline *p, sl_sample **batch) {
  if (batch) *batch = NULL;
  SL_RETURN_ERROR_IF(!p || !batch, SL_EINVAL,
                     "sl_pipeline_next: NULL argument");
  return without_lua("sl_pipeline_next");
}

int sl_pipeline_reset(sl_pipeline *p) {
  SL_RETURN_ERROR_IF(!p, SL_EINVAL, "sl_pipeline_reset: NULL pipeline");
  return without_lua("sl_pipeline_reset");
}

const sl_schema *sl_pipeline_schema(const sl_pipeline *p) {
  SL_UNUSED(p);
  return NULL;
}

int sl_pipeline_length(const sl_pipeline *p, uint64_t *n) {
  if (n) *n = 0;
  SL_RETURN_ERROR_IF(!p || !n, SL_EINVAL, "sl_pipeline_length: NULL argument");
  return without_lua("sl_pipeline_length");
}

void sl_pipeline_close(sl_pipeline *p) {
  SL_UNUSED(p);
}

int sl_pipeline_stats(const sl_pipeline *p, sl_stage_stats *out, size_t cap,
                      size_t *count) {
  SL_UNUSED(out);
  SL_UNUSED(cap);
  if (count) *count = 0;
  SL_RETURN_ERROR_IF(!p || !count, SL_EINVAL,
                     "sl_pipeline_stats: NULL argument");
  return without_lua("sl_pipeline_stats");
}

int sl_pipeline_save(sl_pipeline *p, void **state, size_t *len) {
  if (state) *state = NULL;
  if (len) *len = 0;
  SL_RETURN_ERROR_IF(!p || !state || !len, SL_EINVAL,
                     "sl_pipeline_save: NULL argument");
  return without_lua("sl_pipeline_save");
}

int sl__pipeline_save_back(sl_pipeline *p, uint64_t back, void **state,
                           size_t *len) {
  (void)back;
  return sl_pipeline_save(p, state, len);
}

int sl_pipeline_restore(sl_pipeline *p, const void *state, size_t len) {
  SL_UNUSED(len);
  SL_RETURN_ERROR_IF(!p || !state, SL_EINVAL,
                     "sl_pipeline_restore: NULL argument");
  return without_lua("sl_pipeline_restore");
}
