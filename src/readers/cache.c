/*
 * cache.c - the first complete pass kept in memory and replayed (Paddle's
 * cache).
 *
 * Protocol: while the first pass runs, every upstream sample is retained in
 * a growable array as it passes through.  When upstream reports SL_EOF the
 * cache is complete: later passes replay the array (the same samples,
 * retained again) and never touch upstream, not even to reset it.  A reset
 * before the first pass completes, including after an upstream error,
 * discards the partial cache and resets upstream, so caching starts over.
 */
#include "readers/reader_impl.h"

typedef struct cache_state {
  sl_reader *up;
  sl_sample **items; /* the cached samples, each retained */
  size_t count, cap;
  bool complete; /* the first pass reached SL_EOF */
  size_t pos;    /* replay position once complete */
} cache_state;

static void discard(cache_state *c) {
  for (size_t i = 0; i < c->count; i++)
    sl_sample_release(c->items[i]);
  c->count = 0;
}

/* Appends `s` (taking a new reference), doubling the array as needed. */
static int keep(cache_state *c, sl_sample *s) {
  if (c->count == c->cap) {
    size_t cap = c->cap ? c->cap * 2 : 64;
    SL_RETURN_ERROR_IF(cap < c->cap || cap > SIZE_MAX / sizeof *c->items,
                       SL_ENOMEM, "cache: cannot grow past %zu samples",
                       c->cap);
    sl_sample **items = sl__realloc(c->items, cap * sizeof *items);
    SL_RETURN_ERROR_IF(!items, SL_ENOMEM, "cache: cannot grow to %zu samples",
                       cap);
    c->items = items;
    c->cap = cap;
  }
  c->items[c->count++] = sl_sample_retain(s);
  return SL_OK;
}

static int cache_next(void *st, sl_sample **out) {
  cache_state *c = st;
  if (c->complete) {
    if (c->pos == c->count) return SL_EOF;
    *out = sl_sample_retain(c->items[c->pos++]);
    return SL_OK;
  }
  int rc = sl_reader_next(c->up, out);
  if (rc == SL_EOF) {
    c->complete = true;
    c->pos = c->count; /* this pass is over; the next replays from 0 */
    return SL_EOF;
  }
  if (rc < 0) return rc;
  rc = keep(c, *out);
  if (rc < 0) {
    sl_sample_release(*out);
    *out = NULL;
  }
  return rc;
}

static int cache_reset(void *st) {
  cache_state *c = st;
  if (c->complete) {
    c->pos = 0;
    return SL_OK;
  }
  discard(c);
  return sl_reader_reset(c->up);
}

static void cache_destroy(void *st) {
  cache_state *c = st;
  if (!c) return;
  discard(c);
  sl__free(c->items);
  sl_reader_destroy(c->up);
  sl__free(c);
}

static const sl_reader_vtable cache_vt = {"cache", cache_next, cache_reset,
                                          cache_destroy};

int sl_cache(sl_reader *up, sl_reader **out) {
  SL_DECORATOR_ARGS("cache", up, out);
  cache_state *c = sl__calloc(1, sizeof *c);
  if (!c)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_ENOMEM, "cache: cannot allocate"));
  c->up = up;
  /* Hold the schema ourselves: a failing sl_reader_new destroys `up`. */
  sl_schema *schema = sl_schema_retain((sl_schema *)sl_reader_schema(up));
  int rc = sl__decorator_make_1to1(&cache_vt, c, schema, &c->up, NULL, out);
  sl_schema_release(schema);
  return rc;
}
