/*
 * open.c - sl_open: a name expanded by the registry (registry.c: tags,
 * extensions, braces, globs) and each file opened by its format's
 * constructor, several chained; WebDataset shards read by several ranks, or
 * with wds options, go through sl_wds_open instead.  It sits above both the
 * registry and wds_open (which expands its names by the registry), so
 * neither calls the other back.
 */
#include "formats/tokens_set.h"
#include "formats/wds.h"
#include "open/registry.h"
#include "open/shard_set.h"

/* Opens one expanded file with its format's constructor. */
static int open_file(const sl__named_file *f, const sl_open_opts *o,
                     sl_reader **out) {
  sl_format_open_fn fn;
  void *ud;
  /* An error: removed by another thread since the name was expanded. */
  SL_FORWARD_IF_ERROR(sl__format_find("open", f->tag, f->path, &fn, &ud));
  *out = NULL;
  sl__error_forget_code();
  int rc = fn(ud, f->path, o, out);
  if (rc == SL_OK && !*out)
    rc = sl_set_error(SL_EINVAL,
                      "open: format '%s' returned no reader for "
                      "'%s'",
                      f->tag, f->path);
  if (rc < 0) {
    if (*out) sl_reader_destroy(*out); /* a misbehaving constructor */
    *out = NULL;
    sl__error_keep(rc, "open: format '%s' failed on '%s': %s", f->tag,
                   f->path, sl_strerror(rc));
  }
  return rc;
}

/* A pattern's files must not mix two pack runs' shards: SLR by the
 * readers' schemas (shard_set.c), token shards by their headers
 * (tokens_set.c), WebDataset shards by their first member (wds_shard.c). */
static int check_set(const sl__named_file *files, sl_reader *const *readers,
                     size_t n) {
  const char **paths = sl__calloc(n, sizeof *paths);
  const sl_schema **schemas = sl__calloc(n, sizeof *schemas);
  int rc = SL_OK;
  if (!paths || !schemas) {
    rc = sl_set_error(SL_ENOMEM, "open: cannot allocate %zu files", n);
  } else {
    for (size_t i = 0; i < n; i++) {
      paths[i] = files[i].path;
      schemas[i] = sl_reader_schema(readers[i]);
    }
    rc = sl__shard_set_check("open", paths, schemas, n);
  }
  /* Token shards carry their set identity in the header (tokens_set.h). */
  size_t nt = 0;
  for (size_t i = 0; rc == SL_OK && i < n; i++)
    if (strcmp(files[i].tag, "tokens") == 0) paths[nt++] = files[i].path;
  if (rc == SL_OK && nt > 1) rc = sl__tokens_set_check("open", paths, nt);
  /* WebDataset shards of `pack images --format wds` in their first member
   * (formats/wds.h). */
  size_t nw = 0;
  for (size_t i = 0; rc == SL_OK && i < n; i++)
    if (strcmp(files[i].tag, "wds") == 0) paths[nw++] = files[i].path;
  if (rc == SL_OK && nw > 1) rc = sl__wds_set_check("open", paths, nw);
  sl__free(paths);
  sl__free(schemas);
  return rc;
}

int sl_open(const char *name, const sl_open_opts *opts, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "open: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!name, SL_EINVAL, "open: NULL name");
  sl_open_opts o = SL_OPEN_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(sl__opts_copy("sl_open_opts", &o, sizeof o, opts));
  sl__named_file *files;
  size_t n;
  SL_FORWARD_IF_ERROR(sl__names_expand("open", &name, 1, &files, &n));
  /* Shards read by several ranks (the launcher's environment) go through
   * sl_wds_open too, so that every rank gets its equal share. */
  sl_wds_opts env_wds = SL_WDS_OPTS_INIT;
  bool all_wds = n > 0;
  for (size_t i = 0; i < n; i++)
    all_wds = all_wds && strcmp(files[i].tag, "wds") == 0;
  if (!o.wds && all_wds) {
    int rank, world;
    int rc = sl_shard_env(&rank, &world);
    if (rc < 0) {
      sl__named_files_free(files, n);
      return rc;
    }
    if (world > 1) o.wds = &env_wds; /* world 0: the environment's */
  }
  if (o.wds) { /* every shard through sl_wds_open's threads and plan */
    int rc = SL_OK;
    for (size_t i = 0; i < n && rc == SL_OK; i++)
      if (strcmp(files[i].tag, "wds") != 0)
        rc = sl_set_error(SL_EINVAL,
                          "open: wds options given, but '%s' is read as "
                          "format '%s', not wds",
                          files[i].path, files[i].tag);
    sl__named_files_free(files, n);
    SL_FORWARD_IF_ERROR(rc);
    return sl_wds_open(&name, 1, o.wds, out);
  }
  sl_reader **readers = sl__calloc(n, sizeof *readers);
  if (!readers) {
    sl__named_files_free(files, n);
    return sl_set_error(SL_ENOMEM, "open: cannot allocate %zu readers", n);
  }
  int rc = SL_OK;
  size_t made = 0;
  for (; made < n && rc == SL_OK; made++)
    rc = open_file(&files[made], &o, &readers[made]);
  if (rc == SL_OK && n > 1) rc = check_set(files, readers, n);
  sl__named_files_free(files, n);
  if (rc < 0) {
    for (size_t i = 0; i < made; i++)
      sl_reader_destroy(readers[i]);
  } else if (n == 1) {
    *out = readers[0];
  } else {
    rc = sl_chain(readers, n, out); /* takes the readers, also on failure */
  }
  sl__free(readers);
  return rc;
}
