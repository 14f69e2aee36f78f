/*
 * import_sink.c - where packed records go: one SLR writer, or K writers
 * (shards) with records dealt round-robin or in contiguous ranges.
 *
 * Every writer writes to a temporary name and renames on close; the sink
 * adds the same all-or-nothing promise across shards: if any shard fails to
 * close, the shards already finished are removed as well, so a failed pack
 * never leaves a set of files that looks complete.
 */
#include "io/import.h"

#include <unistd.h>

/* Progress is reported every this many records (and at the end). */
#define PROGRESS_EVERY 1024

struct sl__pack_sink {
  sl_slr_writer **w;
  char **names;
  uint32_t k; /* number of writers */
  sl__shard_mode mode;
  uint64_t total;   /* contiguous: records promised */
  uint64_t records; /* appended so far */
  uint64_t bytes;   /* raw payload bytes appended */
  uint32_t cur;     /* contiguous: current shard */
  uint64_t cur_end; /* contiguous: first record past the current shard */
  sl__progress_fn progress;
  void *progress_ud;
};

const char *sl__basename(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

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

static void sink_free(sl__pack_sink *sink) {
  for (uint32_t i = 0; i < sink->k; i++)
    sl__free(sink->names[i]);
  sl__free(sink->names);
  sl__free(sink->w);
  sl__free(sink);
}

void sl__sink_abort(sl__pack_sink *sink) {
  if (!sink) return;
  for (uint32_t i = 0; i < sink->k; i++)
    sl_slr_writer_abort(sink->w[i]);
  sink_free(sink);
}

int sl__sink_open(const char *out, sl_schema *schema, uint64_t total,
                  const sl__pack_opts *o, sl__pack_sink **sinkp) {
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
  sl__pack_sink *sink = sl__calloc(1, sizeof *sink);
  SL_RETURN_ERROR_IF(!sink, SL_ENOMEM, "pack: cannot allocate");
  uint32_t k = o->shards ? o->shards : 1;
  sink->w = sl__calloc(k, sizeof *sink->w);
  sink->names = sl__calloc(k, sizeof *sink->names);
  if (!sink->w || !sink->names) {
    sink_free(sink);
    return sl_set_error(SL_ENOMEM, "pack: cannot allocate %u shards", k);
  }
  sink->mode = o->mode;
  sink->total = total;
  sink->progress = o->progress;
  sink->progress_ud = o->progress_ud;
  size_t cap = strlen(out) + 32;
  for (uint32_t i = 0; i < k; i++) {
    /* Count writers as they open, so abort closes exactly those. */
    sink->names[i] = sl__malloc(cap);
    if (!sink->names[i]) {
      sink->k = i;
      sl__sink_abort(sink);
      return sl_set_error(SL_ENOMEM, "pack: cannot allocate a name");
    }
    sink->k = i + 1;
    int rc = o->shards ? sl__shard_name(out, i, k, sink->names[i], cap)
                       : (snprintf(sink->names[i], cap, "%s", out), SL_OK);
    if (rc == SL_OK)
      rc = sl_slr_writer_open(sink->names[i], schema, &o->writer, &sink->w[i]);
    if (rc < 0) {
      sl__sink_abort(sink);
      return rc;
    }
  }
  sink->cur_end =
      sink->mode == SL__SHARD_CONTIGUOUS && k > 1 ? shard_size(total, k, 0) : 0;
  *sinkp = sink;
  return SL_OK;
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
  uint32_t i = 0;
  for (; rc == SL_OK && i < sink->k; i++) {
    rc = sl_slr_writer_close(sink->w[i]); /* frees it, also on failure */
    sink->w[i] = NULL;
  }
  if (rc < 0) {
    /* Shards [0, i-1) were finished: take them back.  (Shard i-1 failed
     * and its writer already removed its temporary file.) */
    for (uint32_t j = 0; j + 1 < i; j++)
      unlink(sink->names[j]);
    for (; i < sink->k; i++) {
      sl_slr_writer_abort(sink->w[i]);
      sink->w[i] = NULL;
    }
  }
  sink_free(sink);
  return rc;
}
