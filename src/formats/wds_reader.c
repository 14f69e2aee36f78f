/*
 * wds_reader.c - the `wds` reader of one WebDataset tar shard (tag wds;
 * sl_wds_reader).  The fields are the shard's first sample's (wds.h);
 * sl_wds_open (src/open/wds_open.c) reads many shards on threads.
 *
 * Saving (stages/state.h): the byte offset of the next sample's first
 * member header.  Each output notes the offset after it (sl__state_log), so
 * a save a little behind the reader seeks there; further behind, the
 * restore walks the headers from the start (no member data is touched).
 * The record holds the shard's identity (sl__state_put_file_ids: device,
 * inode, size, mtime; a URL's validators), checked before any stage
 * changes.
 *
 * Length: a local shard's samples, counted once by walking its headers
 * with a handle of its own; a URL's is not known.
 *
 * Memory budget: the shard's own buffers (sl__wds_shard_held: a URL's
 * read-ahead block, the walk's name and scratch buffers) are the stage's
 * resident charge, measured again after each group read.
 */
#include "transport/fmt_map.h"
#include "formats/offset_log.h"
#include "formats/wds.h"
#include "sync/resident.h"

typedef struct wds_state {
  sl__wds_shard *sh;
  sl__wds_layout *lay;
  sl__offset_log offs; /* of each sample's first member header */
  bool counted;        /* the length, once known: */
  uint64_t count;
  sl__resident held; /* the shard's buffers, charged to the budget */
} wds_state;

static void wds_budget(void *st, sl__budget_acct *acct) {
  wds_state *s = st;
  /* charged from the next group read (the reading thread's) */
  sl__resident_account(&s->held, acct);
}

static int wds_next(void *st, sl_sample **out) {
  wds_state *s = st;
  int rc = sl__wds_shard_group(s->sh);
  sl__resident_set(&s->held, sl__wds_shard_held(s->sh));
  if (rc != SL_OK) return rc;
  SL_FORWARD_IF_ERROR(sl__wds_shard_sample(s->sh, s->lay, out));
  sl__state_log_note(&s->offs.log, s->sh->tar.off);
  return SL_OK;
}

static int wds_reset(void *st) {
  wds_state *s = st;
  sl__wds_shard_seek(s->sh, 0, 0);
  sl__offset_log_start(&s->offs, 0, 0);
  return SL_OK;
}

static void wds_destroy(void *st) {
  wds_state *s = st;
  if (!s) return;
  sl__wds_shard_close(s->sh);
  sl__wds_layout_free(s->lay);
  sl__free(s);
}

static int wds_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                    sl__state_out *w) {
  wds_state *s = st;
  return sl__offset_log_save(&s->offs, k, &s->sh->id, w);
}

/* The shard unchanged and the offset inside it. */
static int wds_check(const sl_reader *r, void *st, sl__state_in *in) {
  const sl__wds_shard *sh = ((const wds_state *)st)->sh;
  uint64_t off;
  return sl__offset_log_read(in, "wds", sh->path, &sh->id, sh->size, &off);
}

static int wds_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  wds_state *s = st;
  uint64_t off;
  SL_FORWARD_IF_ERROR(sl__offset_log_read(in, "wds", s->sh->path, &s->sh->id,
                                          s->sh->size, &off));
  /* a sample takes at least one 512-byte header */
  SL_RETURN_ERROR_IF(k > s->sh->size / 512, SL_ECORRUPT,
                     "restore: corrupt state: wds %s: sample %llu of a "
                     "%llu-byte shard",
                     s->sh->path, (unsigned long long)k,
                     (unsigned long long)s->sh->size);
  wds_reset(s);
  if (off == UINT64_MAX) {
    s->sh->headers_only = true; /* a URL's walk reads headers alone */
    for (uint64_t i = 0; i < k; i++) {
      int rc = sl__wds_shard_group(s->sh);
      if (rc != SL_OK) s->sh->headers_only = false;
      SL_RETURN_ERROR_IF(rc == SL_EOF, SL_ECORRUPT,
                         "restore: wds %s: ended after %llu samples, the "
                         "state needs %llu",
                         s->sh->path, (unsigned long long)i,
                         (unsigned long long)k);
      SL_FORWARD_IF_ERROR(rc);
    }
    s->sh->headers_only = false;
    sl__resident_set(&s->held, sl__wds_shard_held(s->sh));
  } else {
    sl__wds_shard_seek(s->sh, off, k);
  }
  sl__offset_log_start(&s->offs, k, s->sh->tar.off);
  return SL_OK;
}

static void wds_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  snprintf(buf, cap, "%s", sl__basename(((const wds_state *)st)->sh->path));
}

/* A local shard's sample count, walking a second handle's headers once;
 * a URL's is not known before reading it. */
static int wds_length(const sl_reader *r, void *st, uint64_t *n) {
  wds_state *s = st;
  if (s->counted) {
    *n = s->count;
    return SL_OK;
  }
  SL_RETURN_ERROR_IF(s->sh->src, SL_EUNSUPPORTED,
                     "%s: the number of samples a pass yields is not known "
                     "before reading it (shard %s is read by URL)",
                     sl_reader_name(r), s->sh->path);
  uint64_t c;
  SL_FORWARD_IF_ERROR(sl__wds_shard_count(s->sh->path, s->lay, &c));
  s->count = c;
  s->counted = true;
  *n = c;
  return SL_OK;
}

static const sl__stage_ops wds_ops = {
    .name = "wds",
    .next = wds_next,
    .reset = wds_reset,
    .destroy = wds_destroy,
    .length = wds_length,
    .save = wds_save,
    .restore = wds_restore,
    .identity = wds_identity,
    .check = wds_check,
    .budget = wds_budget,
};

int sl_wds_reader(const char *path, sl_reader **out) {
  SL_SOURCE_ARGS("wds", path, out);
  wds_state *s = sl__calloc(1, sizeof *s);
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "wds: cannot allocate a reader");
  sl__resident_init(&s->held);
  int rc = sl__wds_shard_open(path, &s->sh);
  if (rc == SL_OK) {
    rc = sl__wds_shard_group(s->sh);
    if (rc == SL_EOF)
      rc = sl_set_error(SL_EINVAL,
                        "wds: %s: no samples (no member with a key and an "
                        "extension)",
                        path);
  }
  if (rc == SL_OK)
    rc = sl__wds_layout_make(s->sh, NULL, SL_WDS_MISSING_FAIL, &s->lay);
  if (rc < 0) {
    wds_destroy(s);
    return rc;
  }
  sl__wds_shard_seek(s->sh, 0, 0);
  return sl__stage_new(&wds_ops, s, s->lay->schema, NULL, 0, NULL, out);
}
