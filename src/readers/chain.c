/*
 * chain.c - several readers one after another as one pass (Paddle's chain).
 *
 * Protocol: a pass reads reader 0 to its SL_EOF, then reader 1, and so on;
 * the last reader's SL_EOF is ours.  Errors from any reader pass through.
 * Reset resets every reader (stopping at the first that fails), so the next
 * pass starts again at reader 0.  All readers must yield the same schema,
 * which is checked once at construction.  The stage takes every reader it is
 * given, also when construction fails.
 */
#include "readers/reader_impl.h"

typedef struct chain_state {
  sl_reader **readers; /* n readers, all owned */
  size_t n;
  size_t cur; /* the reader being read in this pass */
} chain_state;

static int chain_next(void *st, sl_sample **out) {
  chain_state *c = st;
  while (c->cur < c->n) {
    int rc = sl_reader_next(c->readers[c->cur], out);
    if (rc != SL_EOF) return rc; /* a sample, or that reader's error */
    c->cur++;
  }
  return SL_EOF;
}

static int chain_reset(void *st) {
  chain_state *c = st;
  c->cur = 0;
  return sl__reset_readers(c->readers, c->n);
}

static void chain_destroy(void *st) {
  chain_state *c = st;
  if (!c) return;
  sl__destroy_readers(c->readers, c->n);
  sl__free(c->readers);
  sl__free(c);
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

static const sl_reader_vtable chain_vt = {"chain", chain_next, chain_reset,
                                          chain_destroy};

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
  if (!c || !copy || n > SIZE_MAX / sizeof *copy) {
    sl__free(c);
    sl__free(copy);
    sl__destroy_readers(readers, n);
    return sl_set_error(SL_ENOMEM, "chain: cannot allocate %zu readers", n);
  }
  memcpy(copy, readers, n * sizeof *copy);
  c->readers = copy;
  c->n = n;
  /* Hold the schema ourselves: a failing sl_reader_new destroys reader 0. */
  sl_schema *schema = sl_schema_retain((sl_schema *)first);
  int rc = sl__reader_make(&chain_vt, c, schema, out);
  sl_schema_release(schema);
  if (rc == SL_OK) {
    sl__reader_link(*out, c->readers, c->n, NULL);
    sl__reader_set_length(*out, chain_length);
  }
  return rc;
}
