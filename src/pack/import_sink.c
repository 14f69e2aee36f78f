/*
 * import_sink.c - where packed records go: one SLR writer, or K writers
 * (shards) with records dealt round-robin or in contiguous ranges.
 *
 * The files are an output set (output.h): names that are inputs are
 * refused, missing folders created, every shard finished and synced under
 * its temporary name before the first is renamed, so a failure (a full
 * disk, a signal, a stdout that cannot take the summary) leaves the old
 * files as they were.  Every shard of one run records the same random set
 * id, the set size and its index (sluice.set_*), so readers can tell a
 * mixed set.
 */
#include "pack/import.h"

/* Progress is reported every this many records (and at the end). */
#define PROGRESS_EVERY 1024

struct sl__pack_sink {
  sl__out_set *files;
  sl_slr_writer **w;
  uint32_t k; /* number of writers */
  sl__shard_mode mode;
  uint64_t total;   /* contiguous: records promised */
  uint64_t records; /* appended so far */
  uint64_t bytes;   /* raw payload bytes appended */
  uint32_t cur;     /* contiguous: current shard */
  uint64_t cur_end; /* contiguous: first record past the current shard */
  sl__progress_fn progress;
  void *progress_ud;
  sl__commit_fn before_commit;
  const volatile sig_atomic_t *cancel;
};

int sl__shard_name(const char *out, uint32_t shard, uint32_t shards, char *buf,
                   size_t size) {
  size_t n = strlen(out);
  if (n >= 4 && strcmp(out + n - 4, ".slr") == 0) n -= 4;
  int len =
      snprintf(buf, size, "%.*s-%05u-of-%05u.slr", (int)n, out, shard, shards);
  SL_RETURN_ERROR_IF(len < 0 || (size_t)len >= size, SL_EINVAL,
                     "pack: output name '%s' is too long", out);
  return SL_OK;
}

/* Records of contiguous shard s of k over `total`: the first total % k
 * shards hold one more. */
static uint64_t shard_size(uint64_t total, uint32_t k, uint32_t s) {
  return total / k + (s < total % k ? 1 : 0);
}

/* Frees the writers (their files stay the set's) and the sink. */
static void sink_free(sl__pack_sink *sink) {
  for (uint32_t i = 0; sink->w && i < sink->k; i++)
    sl_slr_writer_abort(sink->w[i]);
  sl__free(sink->w);
  sl__free(sink);
}

void sl__sink_abort(sl__pack_sink *sink) {
  if (!sink) return;
  sl__out_set_abort(sink->files);
  sink->files = NULL;
  sink_free(sink);
}

int sl__sink_open(const char *out, sl_schema *schema, uint64_t total,
                  const sl__pack_opts *o, const char *const *inputs,
                  size_t n_inputs, sl__pack_sink **sinkp) {
  *sinkp = NULL;
  sl__pack_opts def = {0};
  if (!o) o = &def;
  SL_RETURN_ERROR_IF(!out || !*out, SL_EINVAL, "pack: no output file name");
  SL_RETURN_ERROR_IF(o->shards > SL__MAX_SHARDS, SL_EINVAL,
                     "pack: %u shards is more than the maximum of %u",
                     o->shards, SL__MAX_SHARDS);
  SL_RETURN_ERROR_IF(o->mode == SL__SHARD_CONTIGUOUS && o->shards > 1 &&
                         total == SL__TOTAL_UNKNOWN,
                     SL_EINVAL,
                     "pack: contiguous shards need the record count first");
  uint32_t k = o->shards ? o->shards : 1;
  size_t cap = strlen(out) + 32;
  char **names = sl__calloc(k, sizeof *names);
  int rc = names ? SL_OK : sl_set_error(SL_ENOMEM, "pack: cannot allocate");
  for (uint32_t i = 0; i < k && rc == SL_OK; i++) {
    names[i] = sl__malloc(cap);
    rc = !names[i]   ? sl_set_error(SL_ENOMEM, "pack: cannot allocate a name")
         : o->shards ? sl__shard_name(out, i, k, names[i], cap)
                     : (snprintf(names[i], cap, "%s", out), SL_OK);
  }
  sl__out_set *files = NULL;
  if (rc == SL_OK)
    rc = sl__out_set_open("pack", (const char *const *)names, k, inputs,
                          n_inputs, &files);
  for (uint32_t i = 0; names && i < k; i++)
    sl__free(names[i]);
  sl__free(names);
  SL_FORWARD_IF_ERROR(rc);
  sl__pack_sink *sink = sl__calloc(1, sizeof *sink);
  if (sink) sink->w = sl__calloc(k, sizeof *sink->w);
  if (!sink || !sink->w) {
    sl__free(sink);
    sl__out_set_abort(files);
    return sl_set_error(SL_ENOMEM, "pack: cannot allocate %u shards", k);
  }
  sink->files = files;
  sink->k = k;
  sink->mode = o->mode;
  sink->total = total;
  sink->progress = o->progress;
  sink->progress_ud = o->progress_ud;
  sink->before_commit = o->before_commit;
  sink->cancel = o->cancel;
  char set_id[SL__SET_ID_LEN + 1];
  sl__new_set_id(set_id);
  for (uint32_t i = 0; i < k; i++) {
    sl__out_file *f = sl__out_set_file(files, i);
    rc = f ? sl__slr_writer_open_on(f, schema, &o->writer, &sink->w[i])
           : sl_last_error_code();
    if (rc == SL_OK) rc = sl_slr_writer_set_frames(sink->w[i], &o->frames);
    if (rc < 0) {
      sl__sink_abort(sink);
      return rc;
    }
    sl__slr_writer_set_member(sink->w[i], set_id, k, i);
    sl__slr_writer_set_cancel(sink->w[i], o->cancel);
  }
  sink->cur_end =
      sink->mode == SL__SHARD_CONTIGUOUS && k > 1 ? shard_size(total, k, 0) : 0;
  *sinkp = sink;
  return SL_OK;
}

static int interrupted(const sl__pack_sink *sink) {
  return sink->cancel && *sink->cancel
             ? sl_set_error(SL_EKILLED,
                            "pack: interrupted after %llu records (by signal "
                            "%d)",
                            (unsigned long long)sink->records,
                            (int)*sink->cancel)
             : SL_OK;
}

int sl__sink_append(sl__pack_sink *sink, const sl_sample *s) {
  uint32_t target = 0;
  if (sink->k > 1 && sink->mode == SL__SHARD_ROUND_ROBIN) {
    target = (uint32_t)(sink->records % sink->k);
  } else if (sink->k > 1) {
    /* Contiguous: move on past full (possibly empty) shards. */
    while (sink->records >= sink->cur_end && sink->cur + 1 < sink->k) {
      sink->cur++;
      sink->cur_end += shard_size(sink->total, sink->k, sink->cur);
    }
    SL_RETURN_ERROR_IF(sink->records >= sink->total, SL_ESTATE,
                       "pack: more records than the %llu counted before "
                       "packing (did the input change?)",
                       (unsigned long long)sink->total);
    target = sink->cur;
  }
  SL_FORWARD_IF_ERROR(interrupted(sink));
  SL_FORWARD_IF_ERROR(sl_slr_writer_append(sink->w[target], s));
  sink->records++;
  sink->bytes += sl_sample_nbytes(s);
  if (sink->progress && sink->records % PROGRESS_EVERY == 0)
    SL_FORWARD_IF_ERROR(
        sink->progress(sink->progress_ud, sink->records, sink->bytes));
  return SL_OK;
}

uint64_t sl__sink_records(const sl__pack_sink *sink) {
  return sink ? sink->records : 0;
}

int sl__sink_finish(sl__pack_sink *sink, int rc, uint64_t *records) {
  uint64_t got = sl__sink_records(sink);
  if (rc != SL_OK) {
    sl__sink_abort(sink);
    return rc;
  }
  rc = sl__sink_close(sink);
  if (rc == SL_OK && records) *records = got;
  return rc;
}

int sl__sink_close(sl__pack_sink *sink) {
  if (!sink) return SL_OK;
  int rc = SL_OK;
  if (sink->k > 1 && sink->mode == SL__SHARD_CONTIGUOUS &&
      sink->records != sink->total)
    rc = sl_set_error(SL_ESTATE,
                      "pack: %llu records packed, %llu counted "
                      "before packing (did the input change?)",
                      (unsigned long long)sink->records,
                      (unsigned long long)sink->total);
  if (rc == SL_OK && sink->progress)
    rc = sink->progress(sink->progress_ud, sink->records, sink->bytes);
  /* Every shard complete and synced under its temporary name first. */
  uint64_t bytes = 0;
  for (uint32_t i = 0; rc == SL_OK && i < sink->k; i++) {
    rc = sl__slr_writer_finish(sink->w[i]);
    bytes += sl__slr_writer_bytes(sink->w[i]);
    if (rc < 0 && sink->k > 1)
      rc = sl_wrap_error(rc, "pack: shard %u of %u", i, sink->k);
  }
  if (rc == SL_OK) rc = interrupted(sink);
  if (rc == SL_OK && sink->before_commit)
    rc = sink->before_commit(sink->progress_ud, sink->records, bytes);
  if (rc < 0) {
    sl__sink_abort(sink); /* nothing was renamed: the old files stay */
    return rc;
  }
  sl__out_set *files = sink->files;
  sink_free(sink);
  return sl__out_set_commit(files);
}
