/*
 * import_sink.c - where packed records go: one SLR writer, or K writers
 * (shards) with records dealt round-robin or in contiguous ranges.
 *
 * Every writer writes to a unique temporary name; the sink adds the
 * all-or-nothing promise across shards: every shard is finished and synced
 * under its temporary name before the first is renamed, so a failure (a
 * full disk, a signal, a stdout that cannot take the summary) leaves the old
 * files as they were.  Every shard of one run records the same random set
 * id, the set size and its index (sluice.set_*), so readers can tell a
 * mixed set.  Output names that are inputs are refused; missing folders are
 * created.
 */
#include "io/import.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
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
  sl__commit_fn before_commit;
  const volatile sig_atomic_t *cancel;
  char **made_dirs; /* folders this pack created, outermost first */
  uint32_t n_made_dirs;
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

static void sink_free(sl__pack_sink *sink) {
  for (uint32_t i = 0; i < sink->k; i++)
    sl__free(sink->names[i]);
  for (uint32_t i = 0; i < sink->n_made_dirs; i++)
    sl__free(sink->made_dirs[i]);
  sl__free(sink->made_dirs);
  sl__free(sink->names);
  sl__free(sink->w);
  sl__free(sink);
}

void sl__sink_abort(sl__pack_sink *sink) {
  if (!sink) return;
  for (uint32_t i = 0; i < sink->k; i++)
    sl_slr_writer_abort(sink->w[i]);
  /* The folders this pack made, innermost first (empty again now). */
  for (uint32_t i = sink->n_made_dirs; i-- > 0;)
    rmdir(sink->made_dirs[i]);
  sink_free(sink);
}

/* Creates the missing folders of `path`'s directory, like mkdir -p,
 * remembering each one made. */
static int make_folders(sl__pack_sink *sink, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return SL_OK;
  size_t len = (size_t)(slash - path);
  char *dir = sl__malloc(len + 1);
  SL_RETURN_ERROR_IF(!dir, SL_ENOMEM, "pack: cannot allocate");
  memcpy(dir, path, len);
  dir[len] = 0;
  struct stat st;
  int rc = SL_OK;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      rc = sl_set_error(SL_EIO, "pack: %s: cannot write %s: %s is not a folder",
                        path, sl__basename(path), dir);
    sl__free(dir);
    return rc;
  }
  /* Each prefix ending before a '/', then the whole folder. */
  for (size_t i = 1; i <= len && rc == SL_OK; i++) {
    if (i < len && dir[i] != '/') continue;
    char c = dir[i];
    dir[i] = 0;
    if (mkdir(dir, 0777) == 0) {
      char **m = sl__realloc(sink->made_dirs,
                             (sink->n_made_dirs + 1) * sizeof *m);
      char *copy = sl__strdup(dir);
      if (m) sink->made_dirs = m;
      if (!m || !copy) {
        sl__free(copy);
        rmdir(dir);
        rc = sl_set_error(SL_ENOMEM, "pack: cannot allocate");
      } else {
        m[sink->n_made_dirs++] = copy;
      }
    } else if (errno != EEXIST) {
      rc = sl_set_error(SL_EIO, "pack: cannot create folder %s for %s: %s",
                        dir, path, strerror(errno));
    } else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
      rc = sl_set_error(SL_EIO, "pack: cannot write %s: %s is not a folder",
                        path, dir);
    }
    dir[i] = c;
  }
  sl__free(dir);
  return rc;
}

/* Refuses an output name that is one of the inputs: the same file (device
 * and inode, links followed) would be replaced by the output. */
static int check_not_input(const char *name, const char *const *inputs,
                           size_t n) {
  struct stat o, in;
  if (n == 0 || stat(name, &o) != 0) return SL_OK; /* nothing to replace */
  for (size_t i = 0; i < n; i++)
    if (stat(inputs[i], &in) == 0 && in.st_dev == o.st_dev &&
        in.st_ino == o.st_ino)
      return sl_set_error(SL_EINVAL,
                          "pack: the output %s is the input %s (the same "
                          "file): packing would replace it; choose another "
                          "output name",
                          name, inputs[i]);
  return SL_OK;
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
  sink->before_commit = o->before_commit;
  sink->cancel = o->cancel;
  char set_id[SL__SET_ID_LEN + 1];
  sl__new_set_id(set_id);
  size_t cap = strlen(out) + 32;
  /* Every name is checked before any folder or file is made. */
  for (uint32_t i = 0; i < k; i++) {
    sink->names[i] = sl__malloc(cap);
    int rc = !sink->names[i]
                 ? sl_set_error(SL_ENOMEM, "pack: cannot allocate a name")
             : o->shards ? sl__shard_name(out, i, k, sink->names[i], cap)
                         : (snprintf(sink->names[i], cap, "%s", out), SL_OK);
    if (rc == SL_OK) rc = check_not_input(sink->names[i], inputs, n_inputs);
    if (rc < 0) {
      sink->k = i + 1;
      sl__sink_abort(sink);
      return rc;
    }
  }
  sink->k = k;
  int mrc = make_folders(sink, sink->names[0]);
  if (mrc < 0) {
    sl__sink_abort(sink);
    return mrc;
  }
  for (uint32_t i = 0; i < k; i++) {
    int rc = sl_slr_writer_open(sink->names[i], schema, &o->writer, &sink->w[i]);
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

/* Renames every finished shard, with the catchable asynchronous signals
 * blocked so that none stops the renames half-way. */
static int commit_all(sl__pack_sink *sink) {
  sigset_t all, old;
  sigfillset(&all);
  static const int sync_sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP,
                                  SIGABRT, SIGSYS};
  for (size_t k = 0; k < sizeof sync_sigs / sizeof *sync_sigs; k++)
    sigdelset(&all, sync_sigs[k]);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = SL_OK;
  uint32_t i = 0;
  for (; rc == SL_OK && i < sink->k; i++) {
    rc = sl__slr_writer_commit(sink->w[i]); /* frees it, also on failure */
    sink->w[i] = NULL;
  }
  if (rc < 0 && i > 1)
    /* Shards [0, i-1) replaced what was under their names: they stay (an
     * error never removes a file that replaced an old one), and their set
     * id tells readers the set is mixed. */
    rc = sl_wrap_error(rc,
                       "pack: shards 0..%u of %u were renamed, replacing "
                       "any old files of those names, and the others were "
                       "not: %s and the old shards after it are a mixed set, "
                       "which readers refuse by its sluice.set_id",
                       i - 2, sink->k, sink->names[i - 1]);
  for (; i < sink->k; i++) {
    sl_slr_writer_abort(sink->w[i]);
    sink->w[i] = NULL;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
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
  rc = commit_all(sink);
  sink_free(sink);
  return rc;
}
