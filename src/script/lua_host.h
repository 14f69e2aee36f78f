/*
 * lua_host.h - the Lua host inside libsluice: worker Lua states, shipping
 * Lua functions to them, and the stages that run Lua code on sluice's
 * threads (map, filter, reader).  Internal: the Lua facade (through the
 * LuaJIT FFI, lua/sluice/cdef.lua) and the embedding API call these; users
 * see them through `require "sluice"`.
 *
 * Threading rule: a lua_State is only ever touched by one thread at a time.
 * The declaring (consumer) state is touched only during sl__lua_ship; after
 * that, the stages use worker states they own, never the consumer's.
 *
 * The per-sample protocol between a stage and its worker state goes through
 * the pure-Lua module `sluice.worker` (lua/sluice/worker.lua), loaded in
 * every worker state:
 *
 *   worker.map(fn, sample, slot)    sample: sl_sample*, a reference
 *                                   handed to Lua (Lua releases it); slot:
 *                                   sl_sample** into which Lua stores the
 *                                   result with a reference for C.  Both
 *                                   are passed as numbers (the address,
 *                                   which LuaJIT's compiler can cast) or,
 *                                   where an address is not exact in a
 *                                   double, light userdata.  Raises on
 *                                   error (including "returned nothing").
 *   worker.filter(fn, sample)       returns true to keep; releases `sample`.
 *   worker.export(value, slot, schema)
 *                                   converts a value yielded by a Lua reader
 *                                   (a sample object, or a table of field ->
 *                                   number/string/array) to an sl_sample*
 *                                   stored in slot (with a reference for C);
 *                                   schema: lightuserdata sl_schema* the
 *                                   value must match, or nil (then the
 *                                   value's own inferred schema is used).
 *
 * Stages call these under lua_pcall with debug.traceback as the message
 * handler, so an error carries the original message and a traceback that
 * points at the decorator's source line.
 */
#ifndef SLUICE_LUA_HOST_H
#define SLUICE_LUA_HOST_H

#include "sluice.h"
#include "sluice/unstable.h"

#include <lua.h>

/* The functions below are internal.  Those the Lua facade calls through
 * the FFI are exported (marked SL_API) and declared again in
 * include/sluice/unstable.h (whence the FFI's declarations are generated,
 * with the types they share); the others are not exported (the C tests
 * link the static library). */

/* --- the environment a worker state starts from --------------------------- */

/* What a worker state copies from the declaring state: package.path and
 * package.cpath.  Immutable once made; shared by the stages of a pipeline
 * (refcounted). */
typedef struct sl__lua_env sl__lua_env;

/* An environment from explicit strings (either may be NULL = LuaJIT's
 * default; both are copied).  The facade passes its package.path and
 * package.cpath, read in Lua at declaration time.  NULL on SL_ENOMEM. */
SL_API sl__lua_env *sl__lua_env_new(const char *path, const char *cpath);
/* The same from package.path / package.cpath of L (C callers).  NULL on
 * SL_ENOMEM. */
sl__lua_env *sl__lua_env_capture(lua_State *L);
sl__lua_env *sl__lua_env_retain(sl__lua_env *e);
SL_API void sl__lua_env_release(sl__lua_env *e);
/* What sl__lua_worker_new preloads: 1 (the default) = `ffi`, `sluice` and
 * `sluice.worker`; 0 = a bare state with the standard libraries and `ffi`
 * only (the C tests of the host itself, which must not depend on the Lua
 * package).  Call it before the env is shared: it is the one mutation an
 * env allows.  SL_OK, or SL_EINVAL for a NULL env. */
int sl__lua_env_set_preload(sl__lua_env *e, int load_sluice);

/* A new worker state: standard libraries, package.path/cpath from `env`,
 * globals `ffi` and `sluice` (require "sluice"), and `sluice.worker`
 * loaded.  SL_OK, SL_ENOMEM or SL_ELUA (require failed: message says why). */
int sl__lua_worker_new(const sl__lua_env *env, lua_State **out);

/* --- shipped functions -------------------------------------------------------
 * A Lua function turned into bytes by the Lua encoder `sluice.ship`
 * (lua/sluice/ship.lua; the format: src/script/lua_ship.c): its bytecode
 * (string.dump, with debug info so tracebacks name the source line) plus
 * its upvalues, recursively:
 * nil, booleans, numbers, strings, tables of those (copied; shared and
 * cyclic references preserved), other shippable Lua functions, and modules
 * (a table that is package.loaded[name] in the declaring state is shipped as
 * "require(name)").  A string "module.function" (or "module:function")
 * ships as a name to require in the worker. */
typedef struct sl__shipped sl__shipped;

/* A shipped function from what `sluice.ship` made: `data`/`size` (the
 * encoded bytes, copied) and `where` ("<source>:<line>", copied), or, when
 * `name` is not NULL, the "module.function" name (copied; data and where
 * are then ignored).  `what` names the decorator for messages.  SL_OK with
 * a reference in *out; SL_EINVAL ("<what>: '<name>' is not a
 * \"module.function\" name", or missing data) or SL_ENOMEM, *out NULL. */
SL_API int sl__shipped_new(const char *what, const char *where,
                           const void *data, size_t size, const char *name,
                           sl__shipped **out);
/* Ships the value at stack index `idx` of L (a Lua function or a
 * "module.function" string) by calling require("sluice.ship").encode in L
 * (so L's package.path must reach lua/).  `what` names the decorator for
 * messages ("map", "filter", "reader").  On an unshippable upvalue: SL_ELUA
 * with "<what>: cannot ship upvalue '<name>' (a <type>) of the function
 * defined at <source>:<line>" (nested paths name the chain, e.g. 'cfg.f' or
 * the inner function's line); SL_EINVAL for a value of another type;
 * SL_ENOMEM.  Does not raise; leaves L's stack as it was. */
int sl__lua_ship(lua_State *L, int idx, const char *what, sl__shipped **out);
sl__shipped *sl__shipped_retain(sl__shipped *f);
SL_API void sl__shipped_release(sl__shipped *f);
/* "<source>:<line>" of the shipped function (or the module.function name),
 * for messages.  Borrowed. */
const char *sl__shipped_where(const sl__shipped *f);

/* Pushes the function onto worker state W (rebuilding upvalues, or
 * requiring the named module).  SL_OK, or SL_ELUA with the message (then
 * nothing is pushed). */
int sl__lua_unship(lua_State *W, const sl__shipped *f);

/* Calls the function at the top of W's stack area set up by the caller with
 * `nargs` arguments and `nres` results under debug.traceback; on error
 * returns SL_ELUA with "<what> (<where>): <message + traceback>" as this
 * thread's detail message (SL_ENOMEM "<what> (<where>): not enough memory"
 * for a Lua memory error, which has no traceback) and pops the error.  Like
 * lua_pcall otherwise.  In a state with a deadline (sl__lua_deadline_set)
 * the call is bounded by it. */
int sl__lua_pcall(lua_State *W, int nargs, int nres, const char *what,
                  const char *where);

/* --- stages
 * --------------------------------------------------------------------- */

/* SL__LUA_PARSE: the Lua parser of text files (sluice.open{parser = fn}).
 * Its upstream yields {line: bytes[-1]} samples, one per line of each file
 * (the text reader: every line, so the N-th sample since the file's schema
 * last changed is line N, and the schema's "sluice.path" metadata names the
 * file).  fn(line) returns a row, a sample, or nil to skip the line:
 *   worker.parser(fn, line_ptr, line_len, slot, schema) -> true (a sample in
 * *slot) or false (skip); schema: the stage schema once known, else nil (the
 * row's is inferred with variable leading dimensions). Errors read "parser
 * (<where>): <file>:<line>: <message + traceback>". Its length is not known
 * (lines may be skipped). */

#define SL__LUA_DEADLINE_MAX 1e6 /* seconds: the largest deadline */

/* sl__lua_kind, sl__lua_stage_opts (include/sluice/unstable.h). */

/* A map or filter stage running `fn` (retained) in `opts->threads` worker
 * states created from `env` (retained), over `up` (taken, also on failure),
 * on the parallel-stage engine (sync/engine.h).  A worker thread that cannot
 * be started fails the construction or the reset with SL_ENOMEM: the stage
 * never runs with fewer threads.
 * Output schema: `schema` when given (retained); else, for filter, the
 * upstream's; for map, the schema of the first output (construction pulls
 * and maps the first sample, which is then yielded first - so map's schema
 * is known before any consumer asks).  Errors raised by fn reach the
 * consumer at that sample's position as SL_ELUA with message and
 * traceback. */
SL_API int sl__lua_stage(sl_reader *up, sl__lua_kind kind, sl__shipped *fn,
                         sl__lua_env *env, const sl__lua_stage_opts *opts,
                         sl_schema *schema, sl_reader **out);

/* --- flow stages (lua_flow.c; its banner states the protocols) -------------
 *   SL__LUA_FLAT_MAP    fn(s[, ctx]) returns an array of samples or tables
 *                       of fields (nil or {} for none), on `opts->threads`
 *                       engine workers, upstream order when opts->ordered.
 *                       Schema: `schema`, else the first output's (the
 *                       constructor runs fn until one output), else
 *                       upstream's.  Length: not known.  A save of an
 *                       unordered one is SL_EUNSUPPORTED.
 *   SL__LUA_TAKE_WHILE  upstream's samples while fn(s[, ctx]) is truthy;
 *                       the first falsy one ends the pass (upstream is not
 *                       read further).  `schema` must be NULL (upstream's).
 *   SL__LUA_SCAN        state, out = fn(state, s[, ctx]); each pass starts
 *                       from a copy of init() (`init`: a shipped function,
 *                       scan's only).  Schema as flat_map's (the first
 *                       output is made by the constructor).  Length:
 *                       upstream's.  A restore replays the pass.
 * take_while and scan run their one worker state on the thread that pulls
 * them (no thread of their own; threads, ordered and queue are ignored).
 * Ownership and errors as sl__lua_stage: `up` is taken also on failure,
 * `fn`, `init`, `env` and `schema` are retained; messages read "<what>
 * (<where>): sample N: <message + traceback>". */

SL_API int sl__lua_flow(sl_reader *up, sl__lua_flow_kind kind,
                        sl__shipped *fn, sl__shipped *init, sl__lua_env *env,
                        const sl__lua_stage_opts *opts, sl_schema *schema,
                        sl_reader **out);

/* --- what a Lua sample pins (lua_pin.c) -------------------------------------
 * A sample's fields are views into buffers that may be far larger than the
 * fields (a decoded SLR chunk).  The consumer's Lua state accounts the
 * buffers its samples pin, so that its collector runs in proportion to the
 * C memory its garbage holds (docs/LUA.md, "Lifetime"). */

/* sl_sample_nbytes(s), and adds to *pins->total the size of every buffer of
 * s's fields (data and LoD) not among pins->last, which then remembers it:
 * the samples of one chunk count its buffer once. */
SL_API size_t sl__lua_sample_account(const sl_sample *s, sl__lua_pins *pins);

/* A copy of s whose fields (data and LoD offsets) live in one new buffer
 * of their own size: it pins nothing of s.  Same schema.  NULL with
 * SL_ENOMEM (or SL_EINVAL for a NULL s) set. */
SL_API sl_sample *sl__lua_sample_clone(const sl_sample *s);

/* A buffer of `size` bytes for a tensor made by Lua code (sluice.tensor,
 * v:clone()), zero-filled when `zero`: from one process-wide pool, so that
 * the tensors a map makes per sample come back to it when the pipeline
 * releases them, often on another thread, instead of going through the C
 * library's allocator arenas (whose locks two threads then fight over).
 * At most LUA_POOL_IDLE idle buffers of LUA_POOL_IDLE_BYTES in all are
 * kept; larger buffers are plain.  NULL with SL_ENOMEM. */
SL_API sl_buffer *sl__lua_buffer_new(size_t size, int zero);
/* The bytes of the buffers sl__lua_buffer_new made on this thread since the
 * last call (a worker state's tensors: lua_heap.c), and zero again. */
uint64_t sl__lua_buffers_made(void);

/* A source running the Lua reader creator `fn` (Paddle's reader creator:
 * fn() returns an iterator; each call of the iterator returns a sample or
 * a table row, nil at the end) in a worker state of its own, under
 * sl_prefetch(.., buffer): prefetch's thread runs it, `buffer` samples
 * ahead.  `schema` (may be NULL;
 * retained) is what every row must match; without it the first row's schema
 * is used (known at construction: the first row is produced then).  Each
 * reset calls fn() again for a fresh iterator. */
SL_API int sl__lua_reader(sl__shipped *fn, sl__lua_env *env, size_t buffer,
                          sl_schema *schema, sl_reader **out);

#endif
