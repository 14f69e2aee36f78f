/*
 * chain.c - several readers one after another as one pass (Paddle's chain).
 *
 * Protocol: a pass reads reader 0 to its SL_EOF, then reader 1, and so on;
 * the last reader's SL_EOF is ours.  Errors from any reader pass through.
 * Reset resets every reader (stopping at the first that fails), so the next
 * pass starts again at reader 0.  All readers must yield the same schema,
 * which is checked once at construction.  The stage takes every reader it is
 * given, also when construction fails.
 *
 * Random access (fetch, stages/state.h): when every reader has it and a
 * known length, position k of the chain is position k - (the lengths of
 * the readers before) of the reader it falls in, so a sampler or
 * global_shuffle reads a set of files as one data set.
 */
#include "stages/stage.h"

typedef struct chain_state {
  sl_reader **readers; /* n readers, all owned */
  size_t n;
  size_t cur;       /* the reader being read in this pass */
  uint64_t *counts; /* samples each reader gave in this pass; then, from
                       counts + n, in the pass before (a save there) */
  size_t prev_cur;  /* `cur` when the pass before ended */
  bool has_prev;
  uint64_t *lens;   /* the readers' lengths, once a fetch needed them */
} chain_state;

static int chain_next(void *st, sl_sample **out) {
  chain_state *c = st;
  while (c->cur < c->n) {
    int rc = sl_reader_next(c->readers[c->cur], out);
    if (rc == SL_OK) c->counts[c->cur]++;
    if (rc != SL_EOF) return rc; /* a sample, or that reader's error */
    c->cur++;
  }
  return SL_EOF;
}

static int chain_reset(void *st) {
  chain_state *c = st;
  memcpy(c->counts + c->n, c->counts, c->n * sizeof *c->counts);
  c->prev_cur = c->cur;
  c->has_prev = true;
  c->cur = 0;
  memset(c->counts, 0, c->n * sizeof *c->counts);
  return sl__reset_readers(c->readers, c->n);
}

static void chain_destroy(void *st) {
  chain_state *c = st;
  if (!c) return;
  sl__destroy_readers(c->readers, c->n);
  SL__FREE(c->readers, c->counts, c->lens, c);
}

/* The sum of the readers' lengths. */
static int chain_length(const sl_reader *r, void *st, uint64_t *n) {
  const chain_state *c = st;
  uint64_t sum = 0;
  for (size_t i = 0; i < c->n; i++) {
    uint64_t k;
    SL_FORWARD_IF_ERROR(sl_reader_length(c->readers[i], &k));
    SL_RETURN_ERROR_IF(k > UINT64_MAX - sum, SL_EUNSUPPORTED,
                       "chain: the length does not fit 64 bits at reader %zu",
                       i);
    sum += k;
  }
  *n = sum;
  return SL_OK;
}

/* Output k falls in reader `cur` at position k minus what the readers
 * before it gave.  Payload: that reader's number; the readers before it are
 * saved at their ends, those after it at their starts. */
static int chain_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                      sl__state_out *w) {
  chain_state *c = st;
  /* this pass's counts, or the pass before's (a repeat above reset it) */
  uint64_t now = sl__reader_pass(r);
  SL_RETURN_ERROR_IF(pass + 1 < now || (pass + 1 == now && !c->has_prev),
                     SL_EUNSUPPORTED,
                     "save: chain: the position is in its pass %llu, it is "
                     "in pass %llu now: only the pass before is kept",
                     (unsigned long long)pass, (unsigned long long)now);
  const uint64_t *counts = pass == now ? c->counts : c->counts + c->n;
  size_t cur = pass == now ? c->cur : c->prev_cur, at = 0;
  while (at + 1 < c->n && at < cur && k >= counts[at])
    k -= counts[at++];
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, at));
  for (size_t i = 0; i < c->n; i++) {
    uint64_t pos = i < at ? counts[i] : i == at ? k : 0;
    SL_FORWARD_IF_ERROR(sl__state_save_up(
        w, c->readers[i], sl__state_up_pass(r, c->readers[i], pass), pos));
  }
  return SL_OK;
}

static int chain_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                         sl__state_in *in) {
  chain_state *c = st;
  uint64_t at;
  for (size_t i = 0; i < c->n; i++)
    SL_FORWARD_IF_ERROR(sl__state_restore_up(in, c->readers[i]));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &at));
  SL_RETURN_ERROR_IF(at >= c->n, SL_ECORRUPT,
                     "restore: chain: reader %llu of %zu",
                     (unsigned long long)at, c->n);
  c->cur = (size_t)at;
  /* What the readers before `at` gave: the rest of k (their counts are
   * only used to place a later save). */
  memset(c->counts, 0, c->n * sizeof *c->counts);
  c->has_prev = false;
  for (size_t i = 0; i <= c->cur; i++)
    c->counts[i] = sl__reader_delivered(c->readers[i]);
  return SL_OK;
}

/* Position `pos` of the chain: that of the reader it falls in. */
static int chain_fetch(sl_reader *r, void *st, uint64_t pass, uint64_t pos,
                       sl_sample **out) {
  chain_state *c = st;
  if (!c->lens) {
    uint64_t *lens = sl__calloc(c->n, sizeof *lens);
    SL_RETURN_ERROR_IF(!lens, SL_ENOMEM, "chain: cannot allocate");
    for (size_t i = 0; i < c->n; i++) {
      int rc = sl__reader_fetch(c->readers[i], pass, 0, NULL);
      if (rc == SL_OK) rc = sl_reader_length(c->readers[i], &lens[i]);
      if (rc < 0) {
        sl__free(lens);
        return sl_set_error(SL_EUNSUPPORTED,
                            "chain: reader %zu ('%s') has no random access "
                            "or no known length",
                            i, sl_reader_name(c->readers[i]));
      }
    }
    c->lens = lens;
  }
  if (!out) return SL_OK;
  size_t i = 0;
  while (i < c->n && pos >= c->lens[i])
    pos -= c->lens[i++];
  SL_RETURN_ERROR_IF(i == c->n, SL_ECORRUPT,
                     "chain: a position past its samples");
  return sl__reader_fetch(c->readers[i], pass, pos, out);
}

/* Offers the allowance to every reader: the files share it. */
static int chain_keep(void *st, sl__keep *k) {
  chain_state *c = st;
  for (size_t i = 0; i < c->n; i++)
    SL_FORWARD_IF_ERROR(sl__reader_keep(c->readers[i], k));
  return SL_OK;
}

/* Shared when every reader's fetch is. */
static bool chain_fetch_shared(void *st) {
  chain_state *c = st;
  for (size_t i = 0; i < c->n; i++)
    if (!sl__reader_fetch_shared(c->readers[i])) return false;
  return true;
}

static const sl__stage_ops chain_ops = {
    .name = "chain",
    .next = chain_next,
    .reset = chain_reset,
    .destroy = chain_destroy,
    .length = chain_length,
    .save = chain_save,
    .restore = chain_restore,
    .fetch = chain_fetch,
    .keep = chain_keep,
    .fetch_shared = chain_fetch_shared,
};

int sl_chain(sl_reader **readers, size_t n, sl_reader **out) {
  SL_FORWARD_IF_ERROR(sl__check_readers("chain", readers, n, out));
  const sl_schema *first = sl_reader_schema(readers[0]);
  for (size_t i = 1; i < n; i++) {
    if (!sl_schema_equal(first, sl_reader_schema(readers[i]))) {
      char a[256], b[256];
      sl_schema_describe(sl_reader_schema(readers[i]), a, sizeof a);
      sl_schema_describe(first, b, sizeof b);
      sl__destroy_readers(readers, n);
      return sl_set_error(SL_ESHAPE,
                          "chain: reader %zu has schema %s, but reader 0 has "
                          "%s",
                          i, a, b);
    }
  }
  chain_state *c = sl__calloc(1, sizeof *c);
  sl_reader **copy = sl__malloc(n * sizeof *copy);
  uint64_t *counts = sl__calloc(2 * n, sizeof *counts);
  if (!c || !copy || !counts || n > SIZE_MAX / sizeof *copy) {
    SL__FREE(c, copy, counts);
    sl__destroy_readers(readers, n);
    return sl_set_error(SL_ENOMEM, "chain: cannot allocate %zu readers", n);
  }
  memcpy(copy, readers, n * sizeof *copy);
  c->readers = copy;
  c->counts = counts;
  c->n = n;
  return sl__stage_new(&chain_ops, c, (sl_schema *)first, c->readers, n, NULL,
                       out);
}
