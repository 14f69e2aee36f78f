/*
 * offset_log.h - the position of a source whose records lie at byte
 * offsets (tfrecord, wds, csv).  Each output notes the offset after it, so
 * a save a little behind the reader finds where to resume; further back
 * the record says UINT64_MAX and the restore walks k records from the
 * start.  The record: the file's identity (sl__state_put_file_ids), then
 * the offset.
 */
#ifndef SLUICE_IO_OFFSET_LOG_H
#define SLUICE_IO_OFFSET_LOG_H

#include "stages/stage.h"

typedef struct sl__offset_log {
  sl__state_log log; /* after output i: the offset of the next record */
  uint64_t from;     /* the log knows outputs from here on */
  uint64_t from_off; /* the offset at output `from` */
} sl__offset_log;

/* The pass goes on from output k at offset off: a reset (0 and the first
 * record's offset) or a restore. */
static inline void sl__offset_log_start(sl__offset_log *l, uint64_t k,
                                        uint64_t off) {
  l->log.count = l->from = k;
  l->from_off = off;
}

/* The offset that makes output k next; UINT64_MAX when the log does not
 * reach back there. */
uint64_t sl__offset_log_find(const sl__offset_log *l, uint64_t k);

/* The record for position k of the file `id`. */
int sl__offset_log_save(const sl__offset_log *l, uint64_t k,
                        const sl__file_id *id, sl__state_out *w);

/* Reads it back: the file (`stage` `path`) still `id`, *off at most `size`
 * (UINT64_MAX: not known) unless UINT64_MAX; else SL_ECORRUPT. */
int sl__offset_log_read(sl__state_in *in, const char *stage, const char *path,
                        const sl__file_id *id, uint64_t size, uint64_t *off);

#endif
