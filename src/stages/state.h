/*
 * state.h - saving and restoring the position of a chain of readers
 * (sl_reader_save / sl_reader_restore; docs/RESUME.md).
 *
 * Positions.  Every reader counts, in the wrapper of reader.c, its passes
 * (resets since construction, or as restored: sl__reader_pass) and the
 * samples it has handed out in the current pass (sl__reader_delivered; a
 * sample peeked by has_next is not handed out).  A saved state is the
 * position (pass, k) of the outermost reader - "the next sample is the k-th
 * of pass `pass`" - translated, stage by stage, into the positions of the
 * upstreams that reproduce it, plus what a stage cannot derive from
 * positions (nothing, for a deterministic stage).  Samples a stage holds
 * beyond the position it is asked for (a prefetch channel, a partial batch,
 * a window of in-flight samples) are not saved: the restored chain reads
 * them again.
 *
 * The protocol, per stage with save and restore entries (stage.h):
 *
 *   save(r, st, pass, k, w)      called with r's own position to save (its
 *       pass count and output count at that point, which may lie behind
 *       what r has handed out: the stage above holds samples).  Writes what
 *       the stage needs into its record (sl__state_put_*) and saves each of
 *       its upstreams (in sl__stage_new's order) exactly once, with
 *       sl__state_save_up(w, up, up_pass, up_k): the upstream position at
 *       which the stage, restored, must resume pulling.  Runs on the
 *       consumer's thread while nothing pulls r; must not change what r
 *       yields (it may read counters its own threads update under its lock).
 *       An error (SL_EUNSUPPORTED: this position cannot be saved) fails the
 *       whole save with its message.
 *   restore(r, st, pass, k, in)  called on a chain already checked to have
 *       the state's shape (stage names, identities, links).  Stops the
 *       stage's threads and drops what it holds, restores every upstream
 *       with sl__state_restore_up(in, up) in link order (each exactly once),
 *       reads its own record (sl__state_get_*), then sets itself so that its
 *       next sample is the k-th of pass `pass` (it may pull from its
 *       restored upstreams to get there), and restarts its threads.  An
 *       error becomes r's sticky error (a failed restore leaves the chain
 *       unusable until reset, like any failed reset).
 *   identity(r, st, buf, cap)    a short text that, with the stage name,
 *       tells this stage from another made differently: its options and
 *       data ("shuffle buffer_size=1000 seed=42", "range 0..100 step 1").
 *       A state whose identities differ from the chain's is refused before
 *       anything changes, naming the first stage that differs.  NULL: the
 *       name alone.
 *
 * A stage without a save entry cannot be saved: sl_reader_save fails naming it
 * (readers made with sl_reader_new are such stages).
 */
#ifndef SLUICE_READERS_STATE_H
#define SLUICE_READERS_STATE_H

#include "core/file_id.h"
#include "stages/reader_impl.h"

#include <pthread.h>

typedef struct sl__state_out sl__state_out;
typedef struct sl__state_in sl__state_in;

/* Optional, for sources: a check of the stage's record against its data,
 * run before any stage of the chain changes (it reads the record with
 * sl__state_get_*, as restore will again): SL_ECORRUPT naming the file when
 * the data changed since the save (fewer records, a rewritten file), which
 * refuses the state with the chain left as it was.  Must not change the
 * stage.  The stage's `check` entry (stage.h). */
typedef int (*sl__state_check_fn)(const sl_reader *r, void *state,
                                  sl__state_in *in);
/* r's pass count: resets since construction, or the pass a restore set. */
uint64_t sl__reader_pass(const sl_reader *r);
/* The pass of r's upstream `up` that matches r's pass `pass`: as many
 * passes before up's current one as `pass` is before r's (a stage resets
 * its upstream once per reset of its own).  A save asks a stage for an
 * earlier pass when a stage above resets it by itself (multi_pass, a mix
 * with stop = never) while the stages above still hold its outputs from
 * before; every upstream saved is then saved at its matching pass, never
 * its current one. */
uint64_t sl__state_up_pass(const sl_reader *r, const sl_reader *up,
                           uint64_t pass);
/* Samples r's next has handed out in the current pass. */
uint64_t sl__reader_delivered(const sl_reader *r);
/* sl_reader_save as of `back` outputs ago in the current pass (outputs
 * handed out but not yet used by the caller: the Python binding's batch of
 * an interrupted next).  SL_EINVAL when fewer were handed out. */
int sl__reader_save_back(sl_reader *r, uint64_t back, void **state,
                         size_t *len);

/* --- inside save ------------------------------------------------------------
 * Each returns SL_OK or SL_ENOMEM (with a message). */
int sl__state_put_u64(sl__state_out *w, uint64_t v);
int sl__state_put_bytes(sl__state_out *w, const void *data, size_t n);
/* Saves `up` (a linked upstream of the stage being saved) at position
 * (pass, k): its record and, recursively, its upstreams'. */
int sl__state_save_up(sl__state_out *w, sl_reader *up, uint64_t pass,
                      uint64_t k);

/* sl__state_save_up for a stage whose restore reads `up` again from
 * (pass, k) and needs the very samples, in the very order, it read before
 * (shuffle's window, a filter's replay, a cache, repeat_first): a stage
 * below whose order is not reproducible (an unordered map) refuses such a
 * save (sl__state_replayed). */
int sl__state_save_up_replayed(sl__state_out *w, sl_reader *up, uint64_t pass,
                               uint64_t k);
/* True while saving below a stage that will replay (see above). */
bool sl__state_replayed(const sl__state_out *w);

/* --- inside restore ---------------------------------------------------------
 * Each returns SL_OK or SL_ECORRUPT ("state: stage S: record too short"). */
int sl__state_get_u64(sl__state_in *in, uint64_t *v);
/* *data points into the state (valid during the restore). */
int sl__state_get_bytes(sl__state_in *in, const void **data, size_t n);
/* A sample in a payload, for a stage that holds samples no position can
 * give back (bucket_batch's buckets): per field its rank, dims, byte count
 * and bytes (the dtypes are the schema's).  put: SL_EUNSUPPORTED naming
 * `stage` for a field with LoD.  get: a new sample of `schema` (the
 * caller's); SL_ECORRUPT naming `stage` when the record does not hold one
 * of that schema (rank, sizes, cut short). */
int sl__state_put_sample(sl__state_out *w, const sl_sample *s,
                         const char *stage);
int sl__state_get_sample(sl__state_in *in, const sl_schema *schema,
                         const char *stage, sl_sample **out);
/* The payload bytes not read yet: a stage whose payload grew tells an
 * older state (shorter, or empty) from its own by it. */
size_t sl__state_left(const sl__state_in *in);
/* Restores the next upstream record into `up`. */
int sl__state_restore_up(sl__state_in *in, sl_reader *up);
/* Restores the next upstream record into `up`, after checking that the
 * record puts `up` at position k of its pass: the position the stage
 * derives from its own (a 1:1 stage: its k; a batch: k x size), so that a
 * state whose stages disagree (a tampered position that still passes the
 * checksum) is refused, SL_ECORRUPT naming the stage, before `up` moves. */
int sl__state_restore_up_at(sl__state_in *in, sl_reader *up, uint64_t k);
/* The position (k) the next upstream record holds, to bound a stage's own
 * position by it before any replay: SL_OK, or SL_ECORRUPT when there is no
 * next upstream record. */
int sl__state_up_position(const sl__state_in *in, uint64_t *k);
/* The position (k) of the record being read: for a state check, which is
 * not handed it (a stage may set a check to bound its position against
 * its upstream's before any stage changes). */
uint64_t sl__state_position(const sl__state_in *in);

/* --- file identity -----------------------------------------------------------
 * The one way a source's record carries the files it reads, so that a
 * state is refused when a file changed since the save (docs/RESUME.md,
 * "What is refused").  An identity is core/file_id.h's sl__file_id: a file's
 * device, inode, size and modification time (ns) as the reader opened it;
 * for a URL what source_http.c makes of the response at open (a hash of
 * the ETag, a hash of the URL, the size, Last-Modified).  The save op
 * writes the list with sl__state_put_file_ids; the source's state check
 * (its `check` entry: before any stage changes) and its restore
 * read it back with sl__state_check_file_ids, which compares it with the
 * identities the reader has now and returns SL_ECORRUPT naming the file
 * and what changed ("its modification time", "another file (inode)",
 * "its ETag"...).  A URL whose server sent neither an ETag nor a
 * Last-Modified cannot be told unchanged: refused too.  Up to
 * SL__STATE_FILE_IDS files are kept one by one; more are folded into one
 * hash (a change then names "one of the N files"). */
#define SL__STATE_FILE_IDS 16
/* One file: sl__state_check_file_ids over {path} and {*id}. */
int sl__state_check_file_id(sl__state_in *in, const char *stage,
                            const char *path, const sl__file_id *id);
int sl__state_put_file_ids(sl__state_out *w, const sl__file_id *ids, size_t n);
/* paths[i] names ids[i] in messages; `stage` is the source ("csv"). */
int sl__state_check_file_ids(sl__state_in *in, const char *stage,
                             const char *const *paths, const sl__file_id *ids,
                             size_t n);

/* For stages whose restore is "restore the upstream, then pull and drop
 * until position k": the generic replay (drops `n` samples of `r`'s
 * upstream `up`, naming `stage` in errors: SL_ECORRUPT when the upstream
 * ends first, as data that changed since the save would). */
int sl__state_skip(sl_reader *up, uint64_t n, const char *stage);
/* The same over a stage's own next function (a vtable's next on its
 * state): "restore: <what> ended after I samples, the state needs N". */
typedef int (*sl__state_next_fn)(void *st, sl_sample **out);
int sl__state_replay(sl__state_next_fn next, void *st, uint64_t n,
                     const char *what);

/* The save op of a stage that yields exactly its upstream's k-th sample as
 * its own k-th (map, prefetch, decode_image, ...): saves the upstream at
 * (its pass, k). */
int sl__state_save_1to1(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                        sl__state_out *w);
/* The restore op of a pass-through stage with no counters of its own:
 * restores upstream 0. */
int sl__state_restore_1to1(sl_reader *r, void *state, uint64_t pass, uint64_t k,
                           sl__state_in *in);

/* A restore's bound on its position k in a pass of n samples: SL_OK when
 * k <= n, else SL_ECORRUPT "restore: <stage>: position K is past its N
 * samples". */
int sl__state_check_at(const char *stage, uint64_t k, uint64_t n);

/* The save op of a source that needs no payload: its position is all. */
int sl__state_save_position(sl_reader *r, void *state, uint64_t pass,
                            uint64_t k, sl__state_out *w);

/* Where each output of a stage that drops samples (filter) came from: a
 * ring of the upstream positions of its last SL__STATE_LOG outputs in this
 * pass, so a save at an output position a little behind (samples held by
 * the stages above) finds the upstream position to resume from. */
#define SL__STATE_LOG 1024
typedef struct sl__state_log {
  uint64_t up[SL__STATE_LOG]; /* upstream position of output i, at i % LOG */
  uint64_t count;             /* outputs this pass */
} sl__state_log;
/* Output number log->count came from upstream position `up_pos`. */
static inline void sl__state_log_note(sl__state_log *log, uint64_t up_pos) {
  log->up[log->count++ % SL__STATE_LOG] = up_pos;
}
/* The upstream position to resume from so that the next output is number k
 * (0 for k == 0): true and *up_pos, or false when k is too far behind. */
static inline bool sl__state_log_find(const sl__state_log *log, uint64_t k,
                                      uint64_t *up_pos) {
  if (k == 0) {
    *up_pos = 0;
    return true;
  }
  if (k > log->count || log->count - k >= SL__STATE_LOG) return false;
  *up_pos = log->up[(k - 1) % SL__STATE_LOG] + 1;
  return true;
}

/* --- stages on the parallel engine (sync/engine.h) ---------------------------
 * The position of a map or filter run by the engine (parallel.c, the Lua
 * stages), shared by their save and restore ops.  The engine numbers the
 * items it pulls (seq = upstream position, from sl__engine_start_at's
 * start), so:
 *
 *   SL__EPOS_1TO1       ordered, output k = item k (a map): the state is
 *                       the position; restore starts the engine at k.
 *   SL__EPOS_LOG        ordered, items may be dropped (filter, parser): a
 *                       log of the seqs delivered (sl__state_log); a save
 *                       too far behind it replays the pass from its start
 *                       (sl__state_save_up_replayed).
 *   SL__EPOS_UNORDERED  results as they finish (ordered=false): the order
 *                       is not reproducible, so a state holds what was done
 *                       by position k - the lowest seq L not done and a
 *                       bitmap of the seqs above it that were delivered
 *                       (or dropped: a drop is done whatever the order) -
 *                       and the restored pass pulls from L and drops the
 *                       seqs of the bitmap unseen.  A save at a position
 *                       behind the last delivery goes back through a log of
 *                       the last SL__STATE_LOG delivered seqs; further is
 *                       refused (SL_EUNSUPPORTED), and so is a save under a
 *                       stage that replays (sl__state_replayed: a shuffle
 *                       or a cache above needs the same order again).
 *
 * Threads: _delivered, _save and _restore are the consumer's; _dropped and
 * _skip are the workers' (UNORDERED: the done set has its own lock). */
typedef enum { SL__EPOS_1TO1, SL__EPOS_LOG, SL__EPOS_UNORDERED } sl__epos_mode;

typedef struct sl__engine_pos {
  sl__epos_mode mode;
  const char *what;  /* the stage in messages: "map (x.lua:3)" (borrowed) */
  sl__state_log log; /* LOG: upstream seq of each output this pass */
  /* UNORDERED: every seq < low is done; bit i of bits: seq low + i done */
  pthread_mutex_t mu;
  uint64_t low;
  unsigned char *bits;
  size_t nbytes;
  bool skipping;  /* a restored pass: workers drop the done seqs */
  bool replay;    /* LOG: the restore replays k outputs */
  uint64_t start; /* the restored pass's first seq */
  uint64_t ring[SL__STATE_LOG]; /* delivered seqs by output position */
  uint64_t count;               /* outputs this pass */
  uint64_t known;               /* the first output position the ring knows */
} sl__engine_pos;

void sl__engine_pos_init(sl__engine_pos *p, sl__epos_mode mode,
                         const char *what);
void sl__engine_pos_fini(sl__engine_pos *p);
/* A new pass (reset): forgets the last one.  No worker may run. */
void sl__engine_pos_reset(sl__engine_pos *p);
/* The consumer took the result of item `seq` (sl__engine_last_seq). */
void sl__engine_pos_delivered(sl__engine_pos *p, uint64_t seq);
/* UNORDERED, a worker: item `seq` was dropped (no result). */
void sl__engine_pos_dropped(sl__engine_pos *p, uint64_t seq);
/* UNORDERED, a worker: whether item `seq` was done before the restore this
 * pass resumes (drop it unprocessed). */
bool sl__engine_pos_skip(sl__engine_pos *p, uint64_t seq);

struct sl__engine;
/* The save op's work for output position k of pass `pass`: holds the engine's pull turn,
 * writes the payload and saves `up`. */
int sl__engine_pos_save(sl__engine_pos *p, struct sl__engine *e, sl_reader *r,
                        sl_reader *up, uint64_t pass, uint64_t k,
                        sl__state_out *w);
/* The restore op's work, in two steps, with the engine stopped
 * (sl__engine_stop) and the stage's own pass state dropped:
 *   _restore  restores `up` and reads the payload: *start is the upstream
 *             position the engine resumes from (the seq of its first item,
 *             for a stage's own per-item numbering);
 *   _resume   starts the engine there and, when the state says so (a LOG
 *             save too far behind), replays k outputs through `next` on
 *             `st` (the stage's next, which calls _delivered). */
int sl__engine_pos_restore(sl__engine_pos *p, sl_reader *up, uint64_t k,
                           sl__state_in *in, uint64_t *start);
int sl__engine_pos_resume(sl__engine_pos *p, struct sl__engine *e, uint64_t k,
                          sl__state_next_fn next, void *st);

/* A saved state's outermost record, for code that combines the states of
 * several readers (sl_reader_restore_elastic): parsed and checked (magic,
 * version, checksum) as sl_reader_restore does.  name and ident point into
 * the state (not NUL-terminated); `in` reads the record's payload
 * (sl__state_get_*) while the state lives.  Free with sl__state_root_free
 * (also after a failure: *out is then empty). */
typedef struct sl__state_root {
  const char *name, *ident;
  size_t name_len, ident_len, nups;
  uint64_t pass, k;
  sl__state_in *in;
  void *priv;
} sl__state_root;
int sl__state_root_parse(const void *state, size_t len, sl__state_root *out);
void sl__state_root_free(sl__state_root *root);

/* Appends x to the growing array *v (*n used of *cap), for the lists a
 * stage keeps for its saves (skipped chunks, done items): SL_OK or
 * SL_ENOMEM (message set). */
int sl__state_push_u64(uint64_t **v, size_t *n, size_t *cap, uint64_t x);

/* The upstreams given to r's constructor, for save ops: *ups[i]. */
sl_reader *sl__reader_up(const sl_reader *r, size_t i);

/* Random access, for a shuffle's restore (shuffle.c): a source that can
 * make the sample at position `pos` of pass `pass` - what a restore at
 * (pass, pos) followed by one next would give - without moving its own
 * position has a `fetch` entry (stage.h).  With out ==
 * NULL it only answers whether it can (SL_OK or SL_EUNSUPPORTED).
 * sl__reader_fetch: SL_EUNSUPPORTED for a reader without one; call it only
 * while nothing pulls the reader (a restore). */
typedef int (*sl__fetch_fn)(sl_reader *r, void *state, uint64_t pass,
                            uint64_t pos, sl_sample **out);
int sl__reader_fetch(sl_reader *r, uint64_t pass, uint64_t pos,
                     sl_sample **out);

/* reader.c's side of a restore (used by state.c only): begin locks a
 * shared reader and drops a peeked sample and a sticky error; end records
 * the position (pass, k) when rc is SL_OK, else makes rc sticky, and
 * unlocks. */
void sl__reader_restore_begin(sl_reader *r);
int sl__reader_restore_end(sl_reader *r, int rc, uint64_t pass, uint64_t k);
/* r's state ops and implementation state (NULL ops: none). */
const sl__stage_ops *sl__reader_state_ops(const sl_reader *r, void **state);

#endif
