/*
 * lua_internal.h - helpers shared by the Lua host's own files (lua_env.c,
 * lua_ship.c, lua_stage.c, lua_flow.c, lua_reader.c).  Private to src/script/:
 * not exported, not called by the binding.
 */
#ifndef SLUICE_LUA_INTERNAL_H
#define SLUICE_LUA_INTERNAL_H

#include "stages/engine_stage.h"
#include "script/lua_host.h"

#include <pthread.h>
#include "sluice.h"

#include <lua.h>

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Pushes the C function registered in L's registry under the light-userdata
 * `key`, creating and registering it (inside lua_cpcall, so a memory error
 * cannot panic) on first use.  0, or -1 after a memory error (then nothing
 * is pushed).  Defined in lua_env.c. */
int sl__lua_push_cached_cfunction(lua_State *L, const void *key,
                                  lua_CFunction fn);

/* --- sluice's own Lua folders (lua_path.c) -------------------------------- */

/* The package.path patterns of the Lua modules that belong to this
 * libsluice: the source and build trees' lua/ when the library is the build
 * tree's, else the install prefix's Lua folder relative to the library's
 * own folder; "" when the library cannot tell where it was loaded from.
 * Computed once; thread-safe. */
const char *sl__lua_own_path(void);
/* Adds sl__lua_own_path() to L's package.path: before everything when
 * `first`, else after everything and only when `require "sluice"` would
 * otherwise fail (not loaded, not preloaded, not on package.path).  A path
 * already holding them is left alone.  Call inside a protected call (it
 * allocates, and calls package.searchpath). */
void sl__lua_add_own_path(lua_State *L, bool first);

/* --- worker states of the stages and the reader (lua_common.c) ----------- */

/* Pushes pointer p for sluice.worker, which ffi.casts it: as a number
 * when it is exact in a double (every user-space address on x86-64 and
 * arm64), because LuaJIT compiles a cast from a number but not from a light
 * userdata (a trace aborts there, and the per-sample protocol would run
 * interpreted); as a light userdata otherwise. */
void sl__lua_push_ptr(lua_State *L, const void *p);
/* sl__lua_push_ptr, or nil for NULL. */
void sl__lua_push_ptr_or_nil(lua_State *L, const void *p);

/* A new worker state (sl__lua_worker_new from `env`) set up for a stage's
 * per-sample protocol: `sluice.worker`'s function `op` ("map", "filter",
 * "export") stored in the registry under *op_ref, then `fn` rebuilt
 * (sl__lua_unship) under *fn_ref.  Messages read "<what> (<where>): ...".
 * SL_OK with the state in *out; else the error (this thread's detail
 * message set), the state closed and *out untouched. */
int sl__lua_worker_setup(const sl__lua_env *env, const sl__shipped *fn,
                         const char *what, const char *where, const char *op,
                         int *op_ref, int *fn_ref, lua_State **out);
/* math.randomseed of a worker state (docs/LUA.md "Randomness": each worker
 * draws its own numbers, the same from run to run, but which sample gets
 * which depends on the threads' timing: ctx.rng is the reproducible
 * generator): a value mixed from the stage's seed, the function's
 * source:line and the worker's index.  SL_OK, or SL_ELUA/SL_ENOMEM. */
/* The file name and line of a function's "<source>:<line>" without its
 * folder ("a/b/f.lua:12" -> "f.lua:12"): what a saved state records, so a
 * state saved running "examples/x.lua" restores running "./examples/x.lua"
 * or the script from another working directory. */
static inline const char *sl__lua_where_base(const char *where) {
  const char *slash = where ? strrchr(where, '/') : NULL;
  return slash ? slash + 1 : where;
}

int sl__lua_worker_seed_random(lua_State *L, uint64_t seed, const char *where,
                               int worker);

/* The words of sl__lua_check_sample's messages, which differ by caller:
 *   "<what> (<where>): <item> N: <fields> {got} do not match <whose> {want}"
 *   "<what> (<where>): <item> N: <the sl_schema_check message>"
 *   "<what> (<where>): <item> N: field '<name>' was not filled"
 * e.g. item "sample", fields "output fields", whose "the stage's" (a map
 * stage), or "row", "fields", "the reader's" (the Lua reader). */
typedef struct sl__lua_check_words {
  const char *what, *where;
  const char *item;
  const char *fields;
  const char *whose;
  bool require_filled; /* also reject tensors whose data was not filled */
} sl__lua_check_words;

/* Checks sample *s (number `index`, for messages) against `want`: the same
 * field names, and every tensor fits its field (and, with
 * w->require_filled, holds numel * dtype size bytes).  The same names in
 * another order are accepted: *s is then replaced by a sample of schema
 * `want` sharing the tensors (the old reference released; one sample
 * allocation, no copy).  SL_OK, or SL_ESHAPE (or sl_schema_check's code,
 * or SL_ENOMEM) with the message above; *s is the caller's to release
 * either way. */
int sl__lua_check_sample(const sl_schema *want, sl_sample **s, uint64_t index,
                         const sl__lua_check_words *w);

/* An output made before its stage's schema `want` was known (a Lua
 * parser's row built against the schema inferred from that row alone):
 * a field holding an empty array, which the row's inference typed f64 (an
 * empty Lua table says no dtype), takes want's dtype when the rank agrees,
 * so an empty line among the first ones of a pass fits the stage schema
 * learned from a non-empty one.  *s is then replaced by a sample of schema
 * `want` sharing the other tensors (the old reference released); the field
 * names must be want's, in its order, else nothing changes (the check that
 * follows reports them).  Returns 1 when replaced, 0 when nothing needed
 * it, or SL_ENOMEM. */
int sl__lua_retype_empty(const sl_schema *want, sl_sample **s);

/* The schema of a stage that learns it from its first output `first`
 * (map without `schema`): first's own schema, except that a field which
 * upstream's schema `up` (may be NULL) also has, with the same dtype and
 * rank and a declaration `first`'s tensor fits, keeps up's shape - so the
 * variable dimensions (-1) upstream declared stay variable instead of
 * freezing to the first sample's sizes.  Metadata: first's.  SL_OK with a
 * reference in *out (frozen), or SL_ENOMEM / sl_schema_add's error. */
int sl__lua_infer_schema(const sl_schema *up, const sl_sample *first,
                         sl_schema **out);

/* --- what the Lua stages share (lua_stage.c, lua_flow.c; lua_common.c) --- */

/* The engine window of a stage: opts->queue, else max(128, 32 x threads). */
size_t sl__lua_stage_window(const sl__lua_stage_opts *opts);

/* What a stage's worker state is made from. */
typedef struct sl__lua_stage_worker_spec {
  const sl__lua_env *env;
  const sl__shipped *fn;   /* rebuilt under ref->fn */
  const sl__shipped *init; /* NULL, or rebuilt under ref->init (scan) */
  const char *what, *where, *label;
  const char *op;  /* sluice.worker's operation, under ref->op */
  const char *aux; /* NULL, or another sluice.worker function (ref->aux) */
  double deadline; /* 0: none */
  uint64_t seed;   /* ctx.seed, and math.random's (with the index) */
} sl__lua_stage_worker_spec;

/* A worker state's registry references (LUA_NOREF where none), and
 * whether fn takes ctx (ref->op is then worker.<op>_ctx). */
typedef struct sl__lua_worker_refs {
  int fn, op, aux, init;
  bool ctx;
} sl__lua_worker_refs;

/* Worker state `index` of a stage: sl__lua_worker_setup, the deadline
 * (watching *stop) when spec->deadline > 0, the aux and init functions, the
 * ctx variant of the operation when fn declares ctx (sluice.worker's
 * `context`), then math.random's seed (sl__lua_worker_seed_random).  SL_OK
 * with the state in *out; else the error (message set), the state closed
 * and *out untouched.  *ref is (re)set either way. */
int sl__lua_stage_worker(const sl__lua_stage_worker_spec *spec, int index,
                         const atomic_bool *stop, sl__lua_worker_refs *ref,
                         lua_State **out);

/* --- the heap of a worker state (lua_heap.c) -------------------------------
 * A worker state's heap above its size once made (base) is charged to its
 * stage's budget account as resident bytes (sync/budget.h), after each call;
 * when the growth does not fit the budget the state is fully collected
 * first (once it grew by a quantum since its last collection).  The worker
 * thread's own (the state's thread). */
typedef struct sl__lua_heap {
  uint64_t base;    /* bytes after the first full collection */
  uint64_t live;    /* after the last collection seen (the least since) */
  uint64_t charged; /* resident bytes charged now */
  uint64_t made;    /* bytes of tensors it made since its last collection */
} sl__lua_heap;
struct sl__budget_acct;
/* A full collection of the new state L; its size becomes the base. */
void sl__lua_heap_start(lua_State *L, sl__lua_heap *h);
/* After a call: moves the charge to the heap above the base (a NULL
 * account: nothing), collecting first when the growth does not fit. */
void sl__lua_heap_charge(lua_State *L, sl__lua_heap *h,
                         struct sl__budget_acct *a);
/* The state is closed: its charge goes (a may be NULL). */
void sl__lua_heap_release(sl__lua_heap *h, struct sl__budget_acct *a);

/* One worker state of a stage and what its calls hand to Lua. */
typedef struct sl__lua_worker {
  lua_State *L;            /* NULL until made */
  sl__lua_worker_refs ref; /* fn; worker.<op> or, with ctx, its ctx variant */
  sl_sample *slot;         /* map's / parser's output slot */
  size_t cap;              /* flat_map: slots offered to the next call */
  sl__lua_heap heap;       /* its heap under the memory budget */
} sl__lua_worker;

/* The part every Lua stage's state starts with.  On the engine (map,
 * filter, parser, flat_map) worker state i is made by worker i at its first
 * start (sl__lua_base_worker_init: the engine's worker_init, watching the
 * engine's stop flag) and lives across passes until worker_fini; a
 * synchronous stage (take_while, scan) makes its one worker itself. */
typedef struct sl__lua_base {
  sl__engine_stage run; /* first: upstream, the pass; the engine if any */
  sl__lua_stage_worker_spec spec; /* fn, init, env retained; label owned */
  uint64_t epoch0;                /* ctx.epoch = epoch0 + run.pass */
  sl_schema *schema;              /* the stage's (retained), NULL until known */
  _Atomic(const sl_schema *) check_schema;
  sl__lua_worker *w; /* one per worker */
  /* On the engine: outputs made before the schema was known are noted by
   * item, in notes[seq % nnotes] as (seq << 1 | unchecked), by the worker
   * before it hands the item over, and checked by the consumer when it
   * takes them (sl__lua_base_note / _noted).  An item's note stays put
   * until the consumer took it, except in an unordered pass where an item
   * finishes more than nnotes items late: its slot then holds a later
   * item's note, and the consumer checks the outputs anyway (checking a
   * checked output again changes nothing).  Notes are atomic (release by
   * the worker, acquire by the consumer), so workers sharing a slot do not
   * race; note_mu guards a parser's line notes (lua_stage.c). */
  pthread_mutex_t note_mu;
  _Atomic uint64_t *notes;
  size_t nnotes;
  /* A synchronous stage's memory budget account (sl__lua_base_budget; set
   * while another thread may pull, so atomic); on the engine, the
   * engine's is the stage's. */
  struct sl__budget_acct *_Atomic acct;
} sl__lua_base;

/* A stage constructor's start.  Its checks, in this order: `out` NULL (up
 * destroyed), *out = NULL, `up` NULL, `bad` (the caller's own complaint,
 * NULL when none: "<what>: <bad>"), then the options' one check (the Lua
 * facade passes them on unchecked): deadline in [0, SL__LUA_DEADLINE_MAX]
 * and epoch < 2^53, "<what> (<fn's where>): option '...' ...".  Then *st:
 * a calloc'd state of `size` bytes, starting with an sl__lua_base whose
 * what and label ("<what> (<where>)") are set.  SL_OK, or the error with
 * up taken.  fn and opts must be non-NULL unless `bad`. */
int sl__lua_base_new(size_t size, sl_reader *up, sl_reader **out,
                     const char *what, const char *bad, const sl__shipped *fn,
                     const sl__lua_stage_opts *opts, void **st);
/* Fills the rest of b (up taken): the spec (op: `op`, aux: `aux`), the
 * worker slots and, with `cfg` (its what and stage set to the label here),
 * the engine stage and its unchecked flags.  SL_OK or the error; then the
 * stage's destroy (sl__engine_stage_destroy with cfg) frees it. */
int sl__lua_base_init(sl__lua_base *b, sl_reader *up, const char *op,
                      const char *aux, sl__shipped *fn, sl__shipped *init,
                      sl__lua_env *env, const sl__lua_stage_opts *opts,
                      sl__engine_stage_cfg *cfg);
/* The notes above: the worker's, and the consumer's, which answers whether
 * item seq's outputs need checking: the note's flag, or, when a later
 * item's note took its slot, whether the schema is known (a check is then
 * possible, and harmless). */
void sl__lua_base_note(sl__lua_base *b, uint64_t seq, bool unchecked);
bool sl__lua_base_noted(sl__lua_base *b, uint64_t seq);

/* Releases what sl__lua_base_init holds, but upstream, the engine (and
 * its worker states: sl__engine_stage_destroy) and b itself. */
void sl__lua_base_fini(sl__lua_base *b);
/* The engine's worker_init and worker_fini of a Lua stage (ud: its
 * state). */
int sl__lua_base_worker_init(void *ud, int index, void **wctx);
void sl__lua_base_worker_fini(void *ud, int index, void *wctx);
/* The memory budget of a synchronous stage (take_while, scan: the stage's
 * budget op; st: its state, starting with an sl__lua_base), and the
 * stage's account, the engine's or that one (NULL: none).  Its worker
 * state's heap is charged after each call (sl__lua_call_op), as an engine
 * worker's. */
void sl__lua_base_budget(void *st, struct sl__budget_acct *acct);
struct sl__budget_acct *sl__lua_base_acct(const sl__lua_base *b);
/* Calls the operation pushed on w->L with its nargs arguments, adding
 * ctx's index (seq) and epoch when fn takes ctx; sl__lua_pcall's result;
 * then charges w's heap to the stage's account (sl__lua_heap_charge). */
int sl__lua_call_op(const sl__lua_base *b, sl__lua_worker *w, uint64_t seq,
                    int nargs, int nres);
/* The stage's identity (stages/state.h): "<what> <where's base>
 * ordered=0|1 seed=S epoch=E schema=<described or ?><extra>" (extra may
 * be NULL).  Not threads nor queue: a state restores into any count. */
void sl__lua_base_identity(const sl__lua_base *b, char *buf, size_t cap,
                           const char *extra);
/* The stage schema, published in b->check_schema (release order):
 *   fix_schema: known at construction, `given` (retained) or upstream's;
 *   learn_schema: from the first output `first` (NULL: the engine's result
 *     0, sl__engine_peek; none, or an error or EOF there: upstream's),
 *     keeping the variable dimensions of `keep` (sl__lua_infer_schema; may
 *     be NULL).  SL_OK, or "<label>: the schema of the first output: ...". */
void sl__lua_base_fix_schema(sl__lua_base *b, sl_schema *given);
int sl__lua_base_learn_schema(sl__lua_base *b, const sl_schema *keep,
                              const sl_sample *first);
/* Checks output *s of upstream item `seq` against `want`
 * (sl__lua_retype_empty, then sl__lua_check_sample with "<item> N" and the
 * stage's words).  SL_OK or the error; *s is the caller's either way. */
int sl__lua_base_check(const sl__lua_base *b, const sl_schema *want,
                       sl_sample **s, uint64_t seq, const char *item);
/* The error rc of a call in a worker state with this thread's message,
 * "<label>: <sl_strerror>" when the call left none; _at also names where
 * (printf's `fmt`) after the label: "<label>: <where>: <the rest>". */
int sl__lua_base_error(const sl__lua_base *b, int rc);
int sl__lua_base_error_at(const sl__lua_base *b, int rc, const char *fmt, ...)
    SL_PRINTF(3, 4);

/* --- the per-sample deadline (lua_deadline.c) ------------------------------
 */

/* Bounds every protected call sl__lua_pcall makes in worker state L to
 * `seconds` (> 0), and interrupts one running while *stop (may be NULL)
 * becomes true.  Turns the JIT compiler off for the decorator (the function
 * under registry reference fn_ref and the code it reaches, modules
 * excepted): compiled loops never call the hook that enforces the deadline.
 * `what`/`where` name the stage for messages.  SL_OK, SL_EINVAL (seconds
 * not positive and finite) or SL_ENOMEM. */
int sl__lua_deadline_set(lua_State *L, double seconds, const atomic_bool *stop,
                         int fn_ref, const char *what, const char *where);
/* Used by sl__lua_pcall around its lua_pcall: arm returns a handle (NULL
 * when L has no deadline, which costs one lua_gethook) for disarm. */
void *sl__lua_deadline_arm(lua_State *L);
void sl__lua_deadline_disarm(lua_State *L, void *armed);
/* Tests only: the hook looks every n instructions in states given a
 * deadline from now on (n <= 0: the default, 10000). */
void sl__lua_deadline_hook_count(int n);

#endif
