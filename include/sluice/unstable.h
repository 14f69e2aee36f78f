/*
 * sluice/unstable.h - the sl__ functions libsluice exports for sluice's
 * own CLI, Lua facade and Python binding.  Not installed and not part of
 * sluice.h: only code in this source tree includes it.
 */
#ifndef SLUICE_API_UNSTABLE_H
#define SLUICE_API_UNSTABLE_H

#include "pipeline.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ======================================================================== */
/* BEGIN UNSTABLE                                                           */
/* Unstable: for sluice's own CLI and Lua facade; may change in any release. */
/* ======================================================================== */
/* libsluice is built with hidden visibility: it exports the SL_API
 * functions above and, besides them, only the sl__ functions of this
 * section.  They are internal (their types and full documentation are in
 * the src/ header named with each group), not part of the API or ABI that
 * the version number describes: a program or plugin outside this source
 * tree must not call them.  They are exported rather than linked statically
 * because their users load libsluice.so itself: the `sluice` command's
 * `run` executes scripts whose Lua facade calls libsluice through the
 * LuaJIT FFI, and a second, static copy of the library in the process
 * would have its own error slots and registries (docs/EMBEDDING.md, "ABI").
 * CTest `abi` fails when libsluice.so exports an sl__ symbol this section does
 * not name, or this section names one it does not export. */

/* sl_reader_save as of `back` outputs ago in the current pass: outputs
 * sl_reader_next handed out that the caller has not used (the Python
 * binding's batch of an interrupted next, docs/PYTHON.md).  SL_EINVAL when
 * fewer were handed out in this pass.  src/stages/state.h. */
SL_API int sl__reader_save_back(sl_reader *r, uint64_t back, void **state,
                                size_t *len);
struct sl__pack_opts;
typedef struct sl__lua_env sl__lua_env;
typedef struct sl__shipped sl__shipped;
/* The Lua stages' kinds and options and what a Lua sample pins (their
 * documentation: src/script/lua_host.h). */
typedef enum sl__lua_kind {
  SL__LUA_MAP,
  SL__LUA_FILTER,
  SL__LUA_PARSE
} sl__lua_kind;

typedef enum sl__lua_flow_kind {
  SL__LUA_FLAT_MAP,
  SL__LUA_TAKE_WHILE,
  SL__LUA_SCAN
} sl__lua_flow_kind;

typedef struct sl__lua_stage_opts {
  int threads;  /* worker threads, 1..the thread limit (sl__threads_check:
                   1024, or SLUICE_MAX_THREADS); -1: "auto" (tuned at run
                   time, SL_THREADS_AUTO) */
  int ordered;  /* 1: keep upstream order (default); 0: as soon as ready
                   (a parser is always ordered) */
  size_t queue; /* samples in flight, 0 = max(128, 32 * threads) */
  /* Seconds one call of fn (one sample) may run, 0 = no limit (the
   * default).  A call past it fails with SL_ELUA "... deadline of S s
   * exceeded (the call was running SOURCE:LINE)" at that sample's place;
   * the worker states then run without the JIT compiler (lua_deadline.c).
   * With a deadline, destroy and reset also interrupt a running call.
   * At most SL__LUA_DEADLINE_MAX. */
  double deadline;
  /* What a function taking a second parameter gets as ctx (docs/LUA.md,
   * "Randomness"): ctx.seed = seed, ctx.epoch = epoch + the stage's resets
   * since construction, ctx.index = the sample's sequence number in the
   * pass (its position in what the stage receives), ctx.rng the
   * counter-based generator keyed by the three (sluice.rng).  A function
   * with one parameter gets none of it and pays nothing. */
  uint64_t seed;
  uint64_t epoch; /* at most 2^53 - 1 (a Lua number) */
  /* map / filter (not a parser): 0 an error raised by fn ends the pass;
   * N > 0 a sample whose call fails (SL_ELUA: an error, the deadline) is
   * left out and counted, at most N per pass, the next ends the pass with
   * SL_ELUA naming the count, the cap and the last message;
   * SL_IGNORE_ALL: no cap (sl_parallel_opts.ignore_errors' rule). */
  uint64_t ignore_errors;
} sl__lua_stage_opts;

#define SL__LUA_PIN_SLOTS 8
typedef struct sl__lua_pins {
  const void *last[SL__LUA_PIN_SLOTS]; /* buffers counted lately (a ring) */
  unsigned next;                       /* the ring's next slot */
  double *total; /* where new bytes are added (shared by a Lua state) */
} sl__lua_pins;

/* The `sluice` command (tools/): pack, verify, signal handling.
 * src/pack/import.h, src/transport/output.h, src/image/image.h,
 * src/open/shard_set.h. */
SL_API int sl__pack_idx(const char *images, const char *labels, const char *out,
                        const struct sl__pack_opts *o, uint64_t *records);
SL_API int sl__pack_text(const char *const *files, size_t n, const char *out,
                         const struct sl__pack_opts *o, uint64_t *records);
SL_API int sl__pack_images(const char *root, const char *out,
                           const struct sl__pack_opts *o, uint64_t *records);
SL_API int sl__shard_name(const char *out, uint32_t shard, uint32_t shards,
                          char *buf, size_t size);
SL_API void sl__out_remove_temps(void);
SL_API int sl__tokens_shard_name(const char *out, uint32_t shard,
                                 uint32_t shards, char *buf, size_t size);
/* Also exported, declared in src/transport/output.h and src/pack/import.h (their
 * types are internal): sl__out_signals_catch(), sl__out_signals_restore()
 * (the packing commands' signal handlers), sl__out_open(), sl__out_write(),
 * sl__out_commit(), sl__out_abort() (the output path, for the state files
 * of `run --save-state`) and sl__pack_tokens(). */
SL_API int sl__pack_wds(const char *const *names, size_t n, const char *out,
                        const struct sl__pack_opts *o, uint64_t *records);
SL_API int sl__pack_images_wds(const char *root, const char *out,
                               const struct sl__pack_opts *o,
                               uint64_t *records);
SL_API int sl__wds_shard_name(const char *out, uint32_t i, char *buf,
                              size_t size);
SL_API int sl__shard_set_check(const char *stage, const char *const *paths,
                               const sl_schema *const *schemas, size_t n);
/* The one redaction of a URL's user:password in what is shown (the error
 * slot, the CLI's output).  src/core/internal.h. */
SL_API size_t sl__redact_urls(const char *in, char *out, size_t cap);

/* The Lua facade through the FFI (lua/sluice/cdef.lua): shipped functions
 * (bytes made by lua/sluice/ship.lua), worker environments, the Lua
 * stages.  src/script/lua_host.h (absent from a build without the Lua
 * layer). */
SL_API sl__lua_env *sl__lua_env_new(const char *path, const char *cpath);
SL_API void sl__lua_env_release(sl__lua_env *e);
SL_API int sl__shipped_new(const char *what, const char *where,
                           const void *data, size_t size, const char *name,
                           sl__shipped **out);
SL_API void sl__shipped_release(sl__shipped *f);
SL_API int sl__lua_stage(sl_reader *up, sl__lua_kind kind, sl__shipped *fn,
                         sl__lua_env *env, const sl__lua_stage_opts *opts,
                         sl_schema *schema, sl_reader **out);
SL_API int sl__lua_reader(sl__shipped *fn, sl__lua_env *env, size_t buffer,
                          sl_schema *schema, sl_reader **out);
/* The Lua flow stages: flat_map, take_while, scan (`kind`: an
 * sl__lua_flow_kind; `init`: scan's shipped init function, else NULL).
 * src/script/lua_host.h, src/script/lua_flow.c. */
SL_API int sl__lua_flow(sl_reader *up, sl__lua_flow_kind kind, sl__shipped *fn,
                        sl__shipped *init, sl__lua_env *env,
                        const sl__lua_stage_opts *opts, sl_schema *schema,
                        sl_reader **out);

/* The Lua facade through the FFI (lua/sluice/cdef.lua): what a Lua sample
 * pins, compact copies, pooled tensor buffers.  src/script/lua_host.h. */
SL_API size_t sl__lua_sample_account(const sl_sample *s, sl__lua_pins *pins);
SL_API sl_sample *sl__lua_sample_clone(const sl_sample *s);
SL_API sl_buffer *sl__lua_buffer_new(size_t size, int zero);
/* A fused map's granted row for a new tensor (src/stages/rows.h). */
SL_API void *sl__lua_row_grant(int dtype, size_t nbytes, sl_buffer **buf);

/* ======================================================================== */
/* END UNSTABLE                                                             */
/* ======================================================================== */

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_UNSTABLE_H */
