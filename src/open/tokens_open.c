/*
 * tokens_open.c - sl_tokens_open: the token reader over every file a name
 * expands to (the registry's globs), as one reader, with the rank and world
 * of the launcher's environment when not given (docs/TEXT.md).  The io
 * layer's sl_tokens_reader knows neither names nor environments.
 */
#include "open/registry.h"

#include <stdio.h>

int sl_tokens_open(const char *name, const sl_tokens_opts *opts,
                   sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "tokens: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!name, SL_EINVAL, "tokens: NULL name");
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(sl__opts_copy("sl_tokens_opts", &o, sizeof o, opts));
  if (o.world == 0) SL_FORWARD_IF_ERROR(sl_shard_env(&o.rank, &o.world));
  /* A bare name is a token file whatever its extension. */
  char *tagged = NULL;
  if (strncmp(name, "tokens:", 7) != 0) {
    size_t len = strlen(name) + 8;
    tagged = sl__malloc(len);
    SL_RETURN_ERROR_IF(!tagged, SL_ENOMEM, "tokens: cannot allocate");
    snprintf(tagged, len, "tokens:%s", name);
    name = tagged;
  }
  sl__named_file *files;
  size_t n;
  int rc = sl__names_expand("tokens", &name, 1, &files, &n);
  if (rc < 0) {
    sl__free(tagged);
    return rc;
  }
  const char **paths = sl__calloc(n, sizeof *paths);
  if (!paths) {
    rc = sl_set_error(SL_ENOMEM, "tokens: cannot allocate %zu names", n);
  } else {
    for (size_t i = 0; i < n; i++)
      paths[i] = files[i].path;
    rc = sl_tokens_reader(paths, n, &o, out);
  }
  /* Every rank reads as many windows (whole rounds of world x block); a
   * world so large that no shard holds a round would give every rank
   * nothing: refused, when one rank alone would read something. */
  uint64_t mine = 0, alone = 0;
  if (rc == SL_OK && o.world > 1 && sl_reader_length(*out, &mine) == SL_OK &&
      mine == 0) {
    sl_tokens_opts one = o;
    one.rank = 0;
    one.world = 1;
    sl_reader *r1 = NULL;
    if (sl_tokens_reader(paths, n, &one, &r1) == SL_OK &&
        sl_reader_length(r1, &alone) == SL_OK && alone > 0) {
      sl_reader_destroy(*out);
      *out = NULL;
      rc = sl_set_error(
          SL_EINVAL,
          "tokens: %s: %llu %s of %lld tokens make no round of %d ranks x "
          "%llu in any of its %zu shards: every rank would read nothing "
          "(fewer ranks or a smaller block)",
          name, (unsigned long long)alone, one.batch ? "blocks" : "windows",
          (long long)o.seq_len, o.world,
          (unsigned long long)(o.block ? o.block : 1), n);
    }
    sl_reader_destroy(r1);
  }
  sl__free(paths);
  sl__free(tagged);
  sl__named_files_free(files, n);
  return rc;
}
