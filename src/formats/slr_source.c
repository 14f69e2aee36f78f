/*
 * slr_source.c - the `slr` file reader on the reader contract: records
 * [first, first + count) of one file, read chunk by chunk.
 *
 * Under SL_CORRUPT_SKIP_CHUNK a chunk that fails a check is skipped as a
 * whole (no record of it is returned) and counted; past the cap the reader
 * fails.  Under SL_CORRUPT_FAIL (the default) the first bad chunk is the
 * error.  Records come out as zero-copy views of the decoded chunk.
 *
 * Saving (stages/state.h).  Under fail the k-th output of a pass is record
 * first + k: the state is the position alone.  Under skip_chunk a skipped
 * chunk's records leave holes, so the reader notes the record each output
 * came from (sl__state_log): a save at output k resumes at the record after
 * output k - 1's - a chunk-level position, no replay from the pass start -
 * and records the bad chunks met before it (the cap counts them).  The
 * record holds the range, the file's fingerprint and its identity
 * (sl__state_put_file_ids), so a state of a file rewritten since is refused
 * (SL_ECORRUPT naming it).
 */
#include "formats/slr_file.h"
#include "stages/stage.h"
#include "sync/budget.h"

typedef struct slr_state {
  sl_slr_file *f;
  uint64_t first, end; /* record range */
  uint64_t pos;        /* next record number */
  const slr_chunk *ch; /* loaded chunk holding pos, or NULL */
  uint64_t ch_first;
  /* skip_chunk: the record of each output, and the first record of each
   * chunk skipped this pass (the cap stops the pass past max_bad of them) */
  sl__state_log log;
  uint64_t *bad;
  size_t nbad, bad_cap;
  /* the memory budget (sync/budget.h): the account (set once, any time),
   * the file's sequential part (the thread that reads in order) and what
   * is charged (moved by exchange: fetches may run on other threads) */
  sl__budget_acct *_Atomic acct;
  atomic_uint_least64_t seq_bytes, charged;
  bool by_frame; /* every fetch through sl_slr_fetch (slr_keep, shared) */
} slr_state;

/* Charges the file's buffers to the account as resident bytes: `seq`, the
 * sequential part measured again (after a chunk load), else the last. */
static void charge(slr_state *s, bool seq) {
  sl__budget_acct *a = atomic_load_explicit(&s->acct, memory_order_acquire);
  if (!a) return;
  if (seq) atomic_store(&s->seq_bytes, sl__slr_held_bytes(s->f));
  uint64_t h = atomic_load(&s->seq_bytes) + sl__slr_fetch_bytes(s->f);
  uint64_t old = atomic_exchange(&s->charged, h);
  if (old != h) sl__budget_resident(a, old, h);
}

static void slr_budget(void *st, sl__budget_acct *acct) {
  slr_state *s = st;
  /* charged from the next chunk load (the reading thread's) */
  atomic_store_explicit(&s->acct, acct, memory_order_release);
}

/* Whether n more bytes of decoded frames may be kept (core/keep.h): under
 * a budget, while it would keep half its capacity free after them; without
 * one, only for an allowance of a size given. */
static bool keep_room(void *ud, const sl__keep *k, uint64_t n) {
  slr_state *s = ud;
  sl__budget_acct *a = atomic_load_explicit(&s->acct, memory_order_acquire);
  if (!a) return k->max != SL__KEEP_AUTO;
  sl__budget *b = sl__budget_of(a);
  return sl__budget_has_room(b, n + sl__budget_cap(b) / 2);
}

/* Fetches keep the frames (or whole chunks) they decode: every fetch goes
 * through sl_slr_fetch, whose cache of a few frames per thread also serves
 * fetches in position order. */
static int slr_keep(void *st, sl__keep *k) {
  slr_state *s = st;
  SL_FORWARD_IF_ERROR(sl__slr_keep(s->f, k, keep_room, s));
  s->by_frame = true;
  return SL_OK;
}

/* Fetches from several threads: sl_slr_fetch is thread-safe (the chunk
 * cache of a file without frames is not).  Not under skip_chunk (no
 * random access). */
static bool slr_fetch_shared(void *st) {
  slr_state *s = st;
  if (sl__slr_policy(s->f) == SL_CORRUPT_SKIP_CHUNK) return false;
  s->by_frame = true;
  return true;
}

/* Notes a skipped chunk starting at record `first` (for a save). */
static int note_bad(slr_state *s, uint64_t first) {
  return sl__state_push_u64(&s->bad, &s->nbad, &s->bad_cap, first);
}

static int slr_next(void *st, sl_sample **out) {
  slr_state *s = st;
  for (;;) {
    if (s->pos >= s->end) return SL_EOF;
    if (!s->ch) {
      uint64_t c = sl_slr_chunk_of(s->f, s->pos);
      uint32_t n;
      sl__slr_chunk_span(s->f, c, &s->ch_first, &n);
      int rc = sl__slr_load_chunk(s->f, c, &s->ch);
      charge(s, true);
      if (rc < 0) {
        s->ch = NULL;
        if (rc != SL_ECORRUPT || sl__slr_policy(s->f) != SL_CORRUPT_SKIP_CHUNK)
          return rc;
        SL_FORWARD_IF_ERROR(note_bad(s, s->ch_first));
        SL_FORWARD_IF_ERROR(sl__slr_count_bad(s->f));
        s->pos = s->ch_first + n; /* skip the whole chunk */
        continue;
      }
    }
    uint64_t r = s->pos - s->ch_first;
    if (r >= s->ch->records) {
      s->ch = NULL;
      continue;
    }
    SL_FORWARD_IF_ERROR(sl__slr_chunk_record(s->f, s->ch, (uint32_t)r, out));
    sl__state_log_note(&s->log, s->pos);
    s->pos++;
    return SL_OK;
  }
}

static int slr_reset(void *st) {
  slr_state *s = st;
  s->pos = s->first;
  s->ch = NULL;
  s->log.count = 0;
  s->nbad = 0;
  sl__slr_pass_start(s->f);
  return SL_OK;
}

static void slr_destroy(void *st) {
  slr_state *s = st;
  if (!s) return;
  sl_slr_close(s->f);
  sl__free(s->bad);
  sl__free(s);
}

/* The records of the range; not known under skip_chunk (a bad chunk's
 * records are skipped). */
static int slr_length(const sl_reader *r, void *st, uint64_t *n) {
  const slr_state *s = st;
  SL_RETURN_ERROR_IF(
      sl__slr_policy(s->f) == SL_CORRUPT_SKIP_CHUNK, SL_EUNSUPPORTED,
      "slr: %s: under policy skip_chunk a pass may yield fewer "
      "than its %llu records",
      sl_slr_path(s->f), (unsigned long long)(s->end - s->first));
  *n = s->end - s->first;
  return SL_OK;
}

/* --- saving and restoring ---------------------------------------------- */

/* Record: first, end, records, fingerprint, the file's identity, the record
 * to resume at, then the bad chunks before it (count, first records). */
static int slr_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w) {
  slr_state *s = st;
  uint64_t at = s->first + k;
  if (sl__slr_policy(s->f) == SL_CORRUPT_SKIP_CHUNK) {
    SL_RETURN_ERROR_IF(!sl__state_log_find(&s->log, k, &at), SL_EUNSUPPORTED,
                       "save: slr %s: position %llu is more than %d samples "
                       "behind the reader",
                       sl_slr_path(s->f), (unsigned long long)k, SL__STATE_LOG);
    if (k == 0) at = s->first;
  }
  uint64_t nbad = 0;
  for (size_t i = 0; i < s->nbad; i++)
    nbad += s->bad[i] < at;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, s->first));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, s->end));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, sl_slr_records(s->f)));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, sl__slr_fingerprint(s->f)));
  SL_FORWARD_IF_ERROR(sl__state_put_file_ids(w, sl__slr_file_id(s->f), 1));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, at));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, nbad));
  for (size_t i = 0; i < s->nbad; i++)
    if (s->bad[i] < at) SL_FORWARD_IF_ERROR(sl__state_put_u64(w, s->bad[i]));
  return SL_OK;
}

static int slr_check(const sl_reader *r, void *st, sl__state_in *in) {
  const slr_state *s = st;
  uint64_t first, end, records, fp;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &first));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &end));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &records));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &fp));
  SL_RETURN_ERROR_IF(
      records != sl_slr_records(s->f) || fp != sl__slr_fingerprint(s->f),
      SL_ECORRUPT,
      "restore: slr %s: the file changed since the state was saved (%llu "
      "records, index %08llx then; %llu records, index %08x now)",
      sl_slr_path(s->f), (unsigned long long)records, (unsigned long long)fp,
      (unsigned long long)sl_slr_records(s->f), sl__slr_fingerprint(s->f));
  SL_RETURN_ERROR_IF(first != s->first || end != s->end, SL_EINVAL,
                     "restore: the state is of another pipeline: slr %s reads "
                     "records [%llu, %llu) here, [%llu, %llu) in the state; "
                     "the pipeline is unchanged",
                     sl_slr_path(s->f), (unsigned long long)s->first,
                     (unsigned long long)s->end, (unsigned long long)first,
                     (unsigned long long)end);
  return sl__state_check_file_id(in, "slr", sl_slr_path(s->f),
                                 sl__slr_file_id(s->f));
}

static int slr_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  slr_state *s = st;
  SL_FORWARD_IF_ERROR(slr_check(r, st, in));
  uint64_t at, nbad;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &at));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &nbad));
  SL_RETURN_ERROR_IF(at < s->first || at > s->end || nbad > at, SL_ECORRUPT,
                     "restore: corrupt state: slr %s: record %llu is outside "
                     "[%llu, %llu]",
                     sl_slr_path(s->f), (unsigned long long)at,
                     (unsigned long long)s->first, (unsigned long long)s->end);
  slr_reset(s);
  for (uint64_t i = 0; i < nbad; i++) {
    uint64_t b;
    SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &b));
    SL_FORWARD_IF_ERROR(note_bad(s, b));
  }
  sl__slr_set_pass_bad(s->f, nbad);
  s->pos = at;
  /* The log restarts at output k: outputs before it cannot be saved at. */
  s->log.count = k;
  if (k > 0) s->log.up[(k - 1) % SL__STATE_LOG] = at - 1;
  return SL_OK;
}

/* Random access (stages/state.h) under policy fail: record first + pos.
 * A framed file decodes only the record's frame (sl_slr_fetch, with its
 * frame cache; the sequential chunk stays loaded), and so does a file
 * whose decoded frames are kept (slr_keep: a chunk is one frame) or whose
 * fetches run on several threads (slr_fetch_shared); otherwise the file's
 * one-chunk cache makes fetches in position order decode each chunk once.
 * Under skip_chunk positions depend on the bad chunks met: not offered. */
static int slr_fetch(sl_reader *r, void *st, uint64_t pass, uint64_t pos,
                     sl_sample **out) {
  slr_state *s = st;
  SL_RETURN_ERROR_IF(
      sl__slr_policy(s->f) == SL_CORRUPT_SKIP_CHUNK, SL_EUNSUPPORTED,
      "slr: %s: no random access under policy skip_chunk", sl_slr_path(s->f));
  if (!out) return SL_OK;
  uint64_t rec = s->first + pos;
  SL_RETURN_ERROR_IF(pos >= s->end - s->first, SL_ECORRUPT,
                     "slr: %s: sample %llu is past its %llu records",
                     sl_slr_path(s->f), (unsigned long long)pos,
                     (unsigned long long)(s->end - s->first));
  if (sl__slr_framed(s->f) || s->by_frame) {
    int rc = sl_slr_fetch(s->f, rec, out);
    charge(s, false); /* any thread: the frame cache's part */
    return rc;
  }
  uint64_t c = sl_slr_chunk_of(s->f, rec), ch_first;
  uint32_t n;
  const slr_chunk *ch;
  sl__slr_chunk_span(s->f, c, &ch_first, &n);
  s->ch = NULL; /* the file's chunk cache moves: next reloads its own */
  int rc = sl__slr_load_chunk(s->f, c, &ch);
  charge(s, true);
  SL_FORWARD_IF_ERROR(rc);
  return sl__slr_chunk_record(s->f, ch, (uint32_t)(rec - ch_first), out);
}

static void slr_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const slr_state *s = st;
  snprintf(buf, cap, "%s policy=%s", sl__basename(sl_slr_path(s->f)),
           sl__slr_policy(s->f) == SL_CORRUPT_SKIP_CHUNK ? "skip_chunk"
                                                         : "fail");
}

static const sl__stage_ops slr_ops = {
    .name = "slr",
    .next = slr_next,
    .reset = slr_reset,
    .destroy = slr_destroy,
    .length = slr_length,
    .save = slr_save,
    .restore = slr_restore,
    .identity = slr_identity,
    .check = slr_check,
    .fetch = slr_fetch,
    .budget = slr_budget,
    .keep = slr_keep,
    .fetch_shared = slr_fetch_shared,
};

static int make(sl_slr_file *f, uint64_t first, uint64_t end, sl_reader **out) {
  slr_state *s = sl__calloc(1, sizeof *s);
  if (!s) {
    sl_slr_close(f);
    return sl_set_error(SL_ENOMEM, "slr: cannot allocate a reader");
  }
  s->f = f;
  atomic_init(&s->acct, NULL);
  atomic_init(&s->seq_bytes, 0);
  atomic_init(&s->charged, 0);
  s->first = s->pos = first;
  s->end = end;
  return sl__stage_new(&slr_ops, s, (sl_schema *)sl_slr_schema(f), NULL, 0,
                       NULL, out);
}

int sl__slr_reader_from_file(sl_slr_file *f, uint64_t first, uint64_t count,
                             sl_reader **out) {
  *out = NULL;
  uint64_t n = sl_slr_records(f);
  if (first > n) {
    int rc = sl_set_error(SL_EINVAL,
                          "slr: %s: first record %llu is beyond "
                          "the %llu records",
                          sl_slr_path(f), (unsigned long long)first,
                          (unsigned long long)n);
    sl_slr_close(f);
    return rc;
  }
  uint64_t end = (count > n - first) ? n : first + count;
  return make(f, first, end, out);
}

int sl_slr_reader(const char *path, const sl_slr_open_opts *opts,
                  uint64_t first, uint64_t count, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "slr: NULL out pointer");
  *out = NULL;
  sl_slr_file *f;
  SL_FORWARD_IF_ERROR(sl_slr_open(path, opts, &f));
  return sl__slr_reader_from_file(f, first, count, out);
}

int sl_slr_reader_chunks(const char *path, const sl_slr_open_opts *opts,
                         uint64_t first_chunk, uint64_t nchunks,
                         sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "slr: NULL out pointer");
  *out = NULL;
  sl_slr_file *f;
  SL_FORWARD_IF_ERROR(sl_slr_open(path, opts, &f));
  uint64_t nc = sl_slr_chunks(f);
  if (first_chunk > nc || nchunks > nc - first_chunk) {
    int rc = sl_set_error(SL_EINVAL,
                          "slr: %s: chunks [%llu, +%llu) are "
                          "outside the %llu chunks",
                          path, (unsigned long long)first_chunk,
                          (unsigned long long)nchunks, (unsigned long long)nc);
    sl_slr_close(f);
    return rc;
  }
  uint64_t first = 0, end = 0;
  uint32_t cnt;
  if (first_chunk < nc)
    sl__slr_chunk_span(f, first_chunk, &first, &cnt);
  else
    first = sl_slr_records(f);
  if (first_chunk + nchunks < nc)
    sl__slr_chunk_span(f, first_chunk + nchunks, &end, &cnt);
  else
    end = sl_slr_records(f);
  return make(f, first, end, out);
}
