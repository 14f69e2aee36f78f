/* offset_log.c - the position of a source of records at byte offsets
 * (offset_log.h). */
#include "formats/offset_log.h"

uint64_t sl__offset_log_find(const sl__offset_log *l, uint64_t k) {
  if (k == l->from) return l->from_off;
  if (k > l->from && k <= l->log.count && l->log.count - k < SL__STATE_LOG - 1)
    return l->log.up[(k - 1) % SL__STATE_LOG];
  return UINT64_MAX;
}

int sl__offset_log_save(const sl__offset_log *l, uint64_t k,
                        const sl__file_id *id, sl__state_out *w) {
  SL_FORWARD_IF_ERROR(sl__state_put_file_ids(w, id, 1));
  return sl__state_put_u64(w, sl__offset_log_find(l, k));
}

int sl__offset_log_read(sl__state_in *in, const char *stage, const char *path,
                        const sl__file_id *id, uint64_t size, uint64_t *off) {
  SL_FORWARD_IF_ERROR(sl__state_check_file_id(in, stage, path, id));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, off));
  SL_RETURN_ERROR_IF(*off != UINT64_MAX && *off > size, SL_ECORRUPT,
                     "restore: corrupt state: %s %s: offset %llu of %llu bytes",
                     stage, path, (unsigned long long)*off,
                     (unsigned long long)size);
  return SL_OK;
}
