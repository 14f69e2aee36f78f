/*
 * lm.h - what the language-model stages share (docs/TEXT.md): the padded
 * assembly of padded_batch.c (bucket_batch.c builds its batches with it),
 * token access, and the search of a chain for a stage (their statistics).
 * Their gathering is gather.h's, and so is the re-read restore they keep for
 * old states and saves far behind.
 */
#ifndef SLUICE_READERS_LM_H
#define SLUICE_READERS_LM_H

#include "stages/gather.h"
#include "stages/stage.h"

/* How each upstream field is batched: stacked (fixed shape) or padded
 * along dim 0 (variable dim 0, fixed others) and followed by
 * "<name>_len". */
typedef struct sl__padplan {
  const char *stage;   /* "padded_batch", "bucket_batch" (static) */
  const sl_schema *in; /* borrowed from the upstream */
  sl_schema *out;      /* owned */
  int nfields;
  int *pad;      /* per field: 1 padded, 0 stacked */
  int *outi;     /* per field: its index in `out` */
  double *value; /* per field: the pad value */
} sl__padplan;

/* Plans batches of `in` with a leading dim `B` (SL_DIM_VAR when it
 * varies) and padded length `to` (> 0 fixed, else SL_DIM_VAR).  SL_OK or
 * SL_EINVAL/SL_ENOMEM naming `stage`; sl__padplan_fini in every case. */
int sl__padplan_init(sl__padplan *p, const char *stage, const sl_schema *in,
                     int64_t B, int64_t to, const sl_pad_value *pad,
                     size_t npad);
void sl__padplan_fini(sl__padplan *p);
/* Checks one upstream sample (its fields against the schema, no LoD). */
int sl__padplan_check(const sl__padplan *p, const sl_sample *s, uint64_t no);
/* The batch of rows[0..n), padded fields to `to` (0: the longest). */
int sl__padplan_build(const sl__padplan *p, sl_sample *const *rows, size_t n,
                      int64_t to, sl_sample **out);
/* The length of sample s's padded field i (its dim 0). */
static inline int64_t sl__field_len(const sl_sample *s, int i) {
  return sl_sample_at_const(s, i)->shape[0];
}

/* A token of a rank-1 i32/u16/u32/i64 tensor as i32. */
static inline int32_t sl__token_at(const void *data, sl_dtype dt, size_t i) {
  switch (dt) {
  case SL_U16:
    return ((const uint16_t *)data)[i];
  case SL_U32:
    return (int32_t)((const uint32_t *)data)[i];
  case SL_I64:
    return (int32_t)((const int64_t *)data)[i];
  default:
    return ((const int32_t *)data)[i];
  }
}
static inline bool sl__token_dtype(sl_dtype dt) {
  return dt == SL_I32 || dt == SL_U16 || dt == SL_U32 || dt == SL_I64;
}

/* The first stage with next function `next` in r's chain, r included, depth
 * first with upstreams in order (sl_reader_stats's order), or NULL. */
void *sl__lm_find(const sl_reader *r, sl__next_fn next);

#endif
