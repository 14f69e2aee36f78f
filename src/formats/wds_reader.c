/*
 * wds_reader.c - the `wds` reader of one WebDataset tar shard (tag wds;
 * sl_wds_reader).  The fields are the shard's first sample's (wds.h);
 * sl_wds_open (src/open/wds_open.c) reads many shards on threads.
 *
 * Saving (readers/state.h): the byte offset of the next sample's first
 * member header.  Each output notes the offset after it (sl__state_log), so
 * a save a little behind the reader seeks there; further behind, the
 * restore walks the headers from the start (no member data is touched).
 * The record holds the shard's identity (sl__state_put_file_ids: device,
 * inode, size, mtime; a URL's validators), checked before any stage
 * changes.
 *
 * Length: a local shard's samples, counted once by walking its headers
 * with a handle of its own; a URL's is not known.
 */
#include "formats/wds.h"
#include "stages/state.h"

typedef struct wds_state {
  sl__wds_shard *sh;
  sl__wds_layout *lay;
  sl__state_log offs; /* after output i: the tar offset */
  uint64_t log_from;  /* the log knows outputs from here on */
  uint64_t from_off;  /* the tar offset at output log_from */
  bool counted;       /* the length, once known: */
  uint64_t count;
} wds_state;

static int wds_next(void *st, sl_sample **out) {
  wds_state *s = st;
  int rc = sl__wds_shard_group(s->sh);
  if (rc != SL_OK) return rc;
  SL_FORWARD_IF_ERROR(sl__wds_shard_sample(s->sh, s->lay, out));
  sl__state_log_note(&s->offs, s->sh->tar.off);
  return SL_OK;
}

static int wds_reset(void *st) {
  wds_state *s = st;
  sl__wds_shard_seek(s->sh, 0, 0);
  s->offs.count = s->log_from = s->from_off = 0;
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
  (void)r;
  (void)pass;
  wds_state *s = st;
  uint64_t off = UINT64_MAX; /* walk k samples from the start */
  if (k == s->log_from)
    off = s->from_off;
  else if (k > s->log_from && k <= s->offs.count &&
           s->offs.count - k < SL__STATE_LOG - 1)
    off = s->offs.up[(k - 1) % SL__STATE_LOG];
  SL_FORWARD_IF_ERROR(sl__state_put_file_ids(w, &s->sh->id, 1));
  return sl__state_put_u64(w, off);
}

/* The shard unchanged and the offset inside it. */
static int wds_record(const wds_state *s, sl__state_in *in, uint64_t *off) {
  SL_FORWARD_IF_ERROR(
      sl__state_check_file_id(in, "wds", s->sh->path, &s->sh->id));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, off));
  SL_RETURN_ERROR_IF(*off != UINT64_MAX && *off > s->sh->size, SL_ECORRUPT,
                     "restore: corrupt state: wds %s: offset %llu of %llu "
                     "bytes",
                     s->sh->path, (unsigned long long)*off,
                     (unsigned long long)s->sh->size);
  return SL_OK;
}

static int wds_check(const sl_reader *r, void *st, sl__state_in *in) {
  (void)r;
  uint64_t off;
  return wds_record(st, in, &off);
}

static int wds_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_in *in) {
  (void)r;
  (void)pass;
  wds_state *s = st;
  uint64_t off;
  SL_FORWARD_IF_ERROR(wds_record(s, in, &off));
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
  } else {
    sl__wds_shard_seek(s->sh, off, k);
  }
  s->offs.count = s->log_from = k;
  s->from_off = s->sh->tar.off;
  return SL_OK;
}

static void wds_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  (void)r;
  const wds_state *s = st;
  snprintf(buf, cap, "%s", sl__basename(s->sh->path));
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

static const sl__state_ops wds_state_ops = {wds_save, wds_restore,
                                            wds_identity};
static const sl_reader_vtable wds_vt = {"wds", wds_next, wds_reset,
                                        wds_destroy};

int sl_wds_reader(const char *path, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "wds: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!path || !path[0], SL_EINVAL, "wds: %s path",
                     path ? "empty" : "NULL");
  wds_state *s = sl__calloc(1, sizeof *s);
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "wds: cannot allocate a reader");
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
  SL_FORWARD_IF_ERROR(sl__reader_make(&wds_vt, s, s->lay->schema, out));
  sl__reader_set_state_ops(*out, &wds_state_ops);
  sl__reader_set_state_check(*out, wds_check);
  sl__reader_set_length(*out, wds_length);
  return SL_OK;
}
