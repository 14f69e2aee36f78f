/*
 * interleave_open.c - sl_interleave_open: tf.data's interleave over sources
 * named as sl_open names them, opened lazily.
 *
 * Protocol: the names are copied; source i is sl_open(names[i], NULL) when
 * the interleave (stages/interleave.c, sl_interleave_sources) needs it, so
 * at most `cycle` are open at once and each pass opens them again.  An open
 * failure reaches the consumer as "interleave: source I: <sl_open's
 * message>".  The identity names the first and last names and their count
 * (a state saved over other files is refused).  It lives in the open layer
 * because it calls sl_open.
 */
#include "core/internal.h"

#include <stdio.h>

typedef struct names {
  char **v;
  size_t n;
} names;

static void names_free(void *ud) {
  names *x = ud;
  if (!x) return;
  for (size_t i = 0; i < x->n; i++)
    sl__free(x->v[i]);
  sl__free(x->v);
  sl__free(x);
}

static int open_name(void *ud, size_t i, sl_reader **out) {
  names *x = ud;
  int rc = sl_open(x->v[i], NULL, out);
  return rc < 0 ? sl_wrap_error(rc, "interleave: source %zu", i) : rc;
}

int sl_interleave_open(const char *const *nv, size_t n,
                       const sl_interleave_opts *opts, sl_reader **out) {
  if (out) *out = NULL;
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "interleave: NULL out pointer");
  SL_RETURN_ERROR_IF(!nv || n == 0, SL_EINVAL,
                     "interleave: needs at least one name");
  for (size_t i = 0; i < n; i++)
    SL_RETURN_ERROR_IF(!nv[i], SL_EINVAL, "interleave: name %zu is NULL", i);
  names *x = sl__calloc(1, sizeof *x);
  if (x) x->v = sl__calloc(n, sizeof *x->v);
  for (size_t i = 0; x && x->v && i < n; i++, x->n++)
    if (!(x->v[i] = sl__strdup(nv[i]))) break;
  if (!x || !x->v || x->n != n) {
    names_free(x);
    return sl_set_error(SL_ENOMEM, "interleave: cannot copy %zu names", n);
  }
  char ident[512];
  snprintf(ident, sizeof ident, "names=%zu:%s..%s", n, nv[0], nv[n - 1]);
  return sl_interleave_sources(n, open_name, x, names_free, ident, opts, out);
}
