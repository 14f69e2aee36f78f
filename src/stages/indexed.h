/*
 * indexed.h - an indexed source: n samples known at open, sample i made on
 * demand by get (npy, idx, the image reader's files).  Its state begins
 * with an sl__indexed and its table takes SL__INDEXED_OPS: next is get(pos)
 * then pos + 1, reset pos = 0, length n; save is the position plus put's
 * record (what identifies the data: counts, sl__state_put_file_ids), check
 * reads it back (SL_ECORRUPT: the data changed), restore checks and sets
 * pos = k; .fetch = sl__indexed_fetch offers random access.  put and check
 * may be NULL; messages name "STAGE NAME" and n's UNIT ("restore: idx a.gz:
 * position 9 is past its 8 samples").
 */
#ifndef SLUICE_READERS_INDEXED_H
#define SLUICE_READERS_INDEXED_H

#include "stages/stage.h"

typedef struct sl__indexed {
  int (*get)(void *st, uint64_t i, sl_sample **out);
  int (*put)(void *st, sl__state_out *w);
  int (*check)(void *st, sl__state_in *in);
  const char *stage, *name, *unit; /* for messages (borrowed) */
  uint64_t n, pos;
} sl__indexed;

int sl__indexed_next(void *st, sl_sample **out);
int sl__indexed_reset(void *st);
int sl__indexed_length(const sl_reader *r, void *st, uint64_t *n);
int sl__indexed_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                     sl__state_out *w);
int sl__indexed_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in);
int sl__indexed_check(const sl_reader *r, void *st, sl__state_in *in);
int sl__indexed_fetch(sl_reader *r, void *st, uint64_t pass, uint64_t pos,
                      sl_sample **out);

#define SL__INDEXED_OPS                                                        \
  .next = sl__indexed_next, .reset = sl__indexed_reset,                        \
  .length = sl__indexed_length, .save = sl__indexed_save,                      \
  .restore = sl__indexed_restore, .check = sl__indexed_check

#endif
