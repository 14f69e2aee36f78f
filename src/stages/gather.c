/*
 * gather.c - the shared shape of the gathering stages (gather.h).
 */
#include "stages/gather.h"

#include <limits.h>

uint64_t sl__gather_count(uint64_t total, uint64_t size, uint64_t stride,
                          int drop) {
  if (drop) return total >= size ? (total - size) / stride + 1 : 0;
  return total / stride + (total % stride != 0);
}

bool sl__gather_init(sl__gather *g, sl_reader *up, size_t n, int drop) {
  g->up = up;
  g->n = n;
  g->drop = drop;
  g->held = sl__malloc(n * sizeof *g->held);
  atomic_init(&g->acct, NULL);
  g->charged = 0;
  return g->held != NULL;
}

static sl__budget_acct *acct_of(const sl__gather *g) {
  return atomic_load_explicit(&g->acct, memory_order_acquire);
}

void sl__gather_budget(void *st, sl__budget_acct *acct) {
  atomic_store_explicit(&((sl__gather *)st)->acct, acct, memory_order_release);
}

void sl__gather_uncharge(sl__gather *g) {
  sl__budget_acct *a = acct_of(g);
  if (a && g->charged) sl__budget_release(a, g->charged);
  g->charged = 0;
}

void sl__gather_release(sl__gather *g) {
  for (size_t j = 0; j < g->nheld; j++)
    sl_sample_release(g->held[j]);
  g->nheld = 0;
  sl__gather_uncharge(g);
}

int sl__gather_charge(sl__gather *g, const sl_sample *s, size_t count) {
  sl__budget_acct *a = acct_of(g);
  if (!a) return SL_OK;
  if (!s) { /* a fused row: what the map charged for it, its carry */
    g->charged += sl__budget_claim(a, UINT64_MAX);
    return SL_OK;
  }
  uint64_t n = sl_sample_nbytes(s);
  SL_FORWARD_IF_ERROR(sl__budget_charge(a, n, count));
  g->charged += n;
  return SL_OK;
}

/* Row j arrived: its bytes are charged (see gather.h). */
static int charge_row(sl__gather *g, size_t j) {
  return sl__gather_charge(g, g->held[j], j + 1);
}

int sl__gather_hand_out(sl__gather *g, sl_sample **o) {
  sl__budget_acct *a = acct_of(g);
  if (!a) return SL_OK;
  uint64_t n = sl_sample_nbytes(*o);
  /* the rows and the output from them: the burst the next batch takes */
  sl__budget_burst(a, g->charged + n);
  int rc = sl__budget_charge(a, n, g->nheld + 1);
  if (rc < 0) {
    sl_sample_release(*o);
    *o = NULL;
    return rc;
  }
  sl__budget_to_carry(a, n);
  return SL_OK;
}

void sl__gather_fini(sl__gather *g) {
  if (g->held) sl__gather_release(g);
  sl__free(g->held);
  sl_reader_destroy(g->up);
}

int sl__gather_pull(sl__gather *g, int (*check)(void *st, size_t j), void *st) {
  int rc = SL_OK;
  while (rc == SL_OK && g->nheld < g->n) {
    sl_sample *s = NULL;
    rc = sl_reader_next(g->up, &s); /* an error: upstream's, untouched */
    if (rc == SL_OK) {
      g->held[g->nheld++] = s;
      rc = charge_row(g, g->nheld - 1);
      if (rc == SL_OK) rc = check(st, g->nheld - 1);
    }
  }
  /* upstream at its end (latched by reader.c): a short last batch */
  if (rc == SL_EOF && g->nheld > 0 && !g->drop) rc = SL_OK;
  if (rc != SL_OK) sl__gather_release(g);
  return rc;
}

int sl__gather_put(sl_sample *o, int i, sl_tensor *t, sl_tensor *lens) {
  int rc = sl_sample_set_move(o, i, t);
  if (rc == SL_OK && lens) return sl__gather_put(o, i + 1, lens, NULL);
  if (rc < 0) sl_tensor_clear(t);
  if (rc < 0 && lens) sl_tensor_clear(lens);
  return rc;
}

int sl__gather_reset(void *st) {
  sl__gather *g = st;
  sl__gather_release(g);
  g->prev_no = g->no;
  g->prev_up = sl__reader_delivered(g->up);
  g->no = 0;
  return sl_reader_reset(g->up); /* its error, if any, as it is */
}

int sl__gather_length(const sl_reader *r, void *st, uint64_t *n) {
  const sl__gather *g = st;
  uint64_t up;
  SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  *n = sl__gather_count(up, g->n, g->n, g->drop);
  return SL_OK;
}

/* Batch k starts at upstream sample k x n; only the last batch of a pass
 * may be short, and after it upstream is at its end. */
int sl__gather_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w) {
  sl__gather *g = st;
  SL_RETURN_ERROR_IF(k > UINT64_MAX / g->n, SL_EUNSUPPORTED,
                     "save: %s: position %llu overflows", sl_reader_name(r),
                     (unsigned long long)k);
  uint64_t pos = k * g->n, now = sl__reader_pass(r);
  if (pass == now && k == g->no)
    pos = SL_MIN(pos, sl__reader_delivered(g->up));
  else if (pass + 1 == now && k == g->prev_no)
    pos = SL_MIN(pos, g->prev_up); /* the end of the pass before */
  return sl__state_save_up(w, g->up, sl__state_up_pass(r, g->up, pass), pos);
}

/* Upstream at k x n, or inside the last (short) batch. */
static int check_at(const sl_reader *r, const sl__gather *g, uint64_t k,
                    const sl__state_in *in) {
  uint64_t up;
  SL_FORWARD_IF_ERROR(sl__state_up_position(in, &up));
  SL_RETURN_ERROR_IF(k > UINT64_MAX / g->n || up > k * g->n ||
                         (up < k * g->n && up <= (k - 1) * g->n),
                     SL_ECORRUPT,
                     "restore: corrupt state: %s (size %zu) at batch %llu "
                     "but its upstream '%s' at sample %llu",
                     sl_reader_name(r), g->n, (unsigned long long)k,
                     sl_reader_name(g->up), (unsigned long long)up);
  return SL_OK;
}

int sl__gather_check(const sl_reader *r, void *st, sl__state_in *in) {
  return check_at(r, st, sl__state_position(in), in);
}

int sl__gather_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  sl__gather *g = st;
  SL_FORWARD_IF_ERROR(check_at(r, g, k, in));
  sl__gather_release(g);
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, g->up));
  g->no = k;
  g->prev_no = ULLONG_MAX; /* not known */
  return SL_OK;
}

int sl__gather_save_reread(sl_reader *const *ups, const uint64_t *passes,
                           size_t n, uint64_t k, sl__state_out *w) {
  for (size_t i = 0; i < n; i++) {
    SL_FORWARD_IF_ERROR(
        k == 0 ? sl__state_save_up(w, ups[i], passes[i], 0)
               : sl__state_save_up_replayed(w, ups[i], passes[i], 0));
  }
  return SL_OK;
}

int sl__gather_save_reread_up(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                              sl__state_out *w) {
  sl_reader *up = *(sl_reader *const *)st;
  uint64_t up_pass = sl__state_up_pass(r, up, pass);
  return sl__gather_save_reread(&up, &up_pass, 1, k, w);
}
