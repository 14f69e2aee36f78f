/*
 * sluice/pipeline.h - embedding: pipelines declared by Lua scripts.  Part of
 * sluice.h: include <sluice.h>, whose opening comment states the conventions
 * that hold here.
 */
#ifndef SLUICE_API_PIPELINE_H
#define SLUICE_API_PIPELINE_H

#include "reader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Embedding: pipelines declared by Lua scripts (docs/EMBEDDING.md)          */
/* ------------------------------------------------------------------------ */

/* A pipeline declared by a Lua script, pulled from C.  The script runs in a
 * Lua state private to the pipeline (the C program needs no Lua of its own):
 * a fresh LuaJIT state with the standard libraries, whose package.path and
 * package.cpath are LuaJIT's (LUA_PATH / LUA_CPATH from the environment when
 * set, else LuaJIT's defaults, which search the Lua 5.1 tree under
 * /usr/local: set them when sluice's Lua files are installed elsewhere).  The
 * script sees its arguments as `...` (strings) and as the global table `arg`
 * (arg[0] = the script path or chunk name, arg[1..argc] = the arguments),
 * and must return a pipeline object (`require "sluice"`, then e.g.
 * `return sluice.range(n):batch(b)`); the C side takes its reader over.
 *
 * The pipeline is a reader (the whole sl_reader API applies: next, reset,
 * schema, length, save, restore, stats) that owns the private state:
 * sl_reader_destroy destroys the chain (joining its threads, at any moment:
 * mid-pass, busy workers) and then the state.  The state is only used while
 * opening and closing: pulling runs the C reader chain (Lua decorators in
 * it run in worker states of their own), never the script's state, so a
 * Lua decorator's error is SL_ELUA at that sample's position, with the Lua
 * message and a traceback naming the decorator's source line.  Saving
 * (docs/RESUME.md): the reader's state holds every stage's positions,
 * including the pass number; restore it into a pipeline opened from the
 * same script with the same arguments.  Thread safety: one thread at a time
 * per pipeline (like a reader); distinct pipelines are independent.  Error
 * details are in the calling thread's sl_last_error(). */

/* Runs the script file `path` with `argc` arguments `argv` (borrowed; copied
 * into Lua; a NULL entry passes "") and sets *out to a new reader owned by
 * the caller (sl_reader_destroy it).  On any error *out is NULL and nothing
 * is leaked.  Returns SL_OK, or:
 *   SL_EINVAL   NULL out or path, argc < 0, argc > 0 with NULL argv; or the
 *               script returned something else than a live pipeline
 *               ("pipeline script PATH returned a number, not a pipeline";
 *               a closed or consumed pipeline is named as such);
 *   SL_EIO      the file cannot be read ("pipeline script PATH: cannot open
 *               PATH..." with the system's reason);
 *   SL_ELUA     a syntax error (Lua's message, with the line), or an error
 *               raised while the script runs: "pipeline script (PATH): " +
 *               the Lua message + a traceback naming the script's lines;
 *   SL_ENOMEM   out of memory (C or Lua);
 *   SL_EUNSUPPORTED  a libsluice built without Lua. */
SL_API int sl_pipeline_open_file(const char *path, int argc,
                                 const char *const *argv, sl_reader **out);
/* Like sl_pipeline_open_file for the script text `code` (NUL-terminated,
 * Lua source or bytecode; borrowed).  `chunkname` (NULL or "" = "pipeline")
 * names the chunk in messages and tracebacks and is arg[0].  Same returns,
 * less SL_EIO. */
SL_API int sl_pipeline_open_string(const char *code, const char *chunkname,
                                   int argc, const char *const *argv,
                                   sl_reader **out);

/* Deprecated (sluice 0.1: a pipeline was an sl_pipeline with functions of
 * its own); kept for source compatibility for one release. */
typedef sl_reader sl_pipeline;
#define sl_pipeline_next sl_reader_next
#define sl_pipeline_reset sl_reader_reset
#define sl_pipeline_schema sl_reader_schema
#define sl_pipeline_length sl_reader_length
#define sl_pipeline_save sl_reader_save
#define sl_pipeline_restore sl_reader_restore
#define sl_pipeline_stats sl_reader_stats
#define sl_pipeline_close sl_reader_destroy

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_PIPELINE_H */
