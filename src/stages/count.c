/*
 * count.c - the entries the counting stages (skip, take, repeat_first,
 * multi_pass) share: their constructor, reset, destroy and identity
 * (stage.h, "counting stages").
 */
#include "stages/stage.h"

int sl__count_new(const sl__stage_ops *ops, size_t size, sl_reader *up,
                  uint64_t n, sl_reader **out) {
  if (!out) {
    sl_reader_destroy(up);
    return sl_set_error(SL_EINVAL, "%s: NULL out pointer", ops->name);
  }
  *out = NULL;
  SL_RETURN_ERROR_IF(!up, SL_EINVAL, "%s: NULL upstream reader", ops->name);
  sl__count *c = sl__decorator_state(ops->name, up, size);
  if (!c) return SL_ENOMEM;
  c->n = n;
  return sl__stage_wrap(ops, c, NULL, &c->up, NULL, out);
}

int sl__count_reset(void *st) {
  sl__count *c = st;
  c->count = 0;
  return sl_reader_reset(c->up);
}

void sl__count_destroy(void *st) {
  sl__count *c = st;
  if (!c) return;
  sl_reader_destroy(c->up);
  sl__free(c);
}

void sl__count_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  snprintf(buf, cap, "n=%llu", (unsigned long long)((sl__count *)st)->n);
}
