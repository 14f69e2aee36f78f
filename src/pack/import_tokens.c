/*
 * import_tokens.c - `sluice pack tokens` (sl__pack_tokens, import.h): text
 * into token shards in llm.c's format, the input of the `tokens:` reader
 * (tokens_set.h has the header).
 *
 * Tokenizers: bytes (token = byte, for tests and examples; each file is one
 * document) or ids (whitespace-separated decimal token ids 0..65535; a
 * blank line ends a document).  eos >= 0 is appended after each document.
 * K shards split the tokens into K parts of about the same size, named OUT
 * without ".bin" + "_%06u.bin" (llm.c's naming); val > 0 writes the first
 * val tokens to "<name>_val.bin".  The files are one output set
 * (output.h): inputs refused as outputs, folders made, every file written
 * under a temporary name and all renamed once all are complete, each
 * recording the run's set identity.
 */
#include "core/bytes.h"
#include "pack/import.h"
#include "formats/tokens_set.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct tokens {
  uint16_t *v;
  size_t n, cap;
} tokens;

static int push(tokens *t, uint16_t x) {
  if (t->n == t->cap) {
    size_t cap = t->cap ? t->cap * 2 : 1 << 16;
    uint16_t *v = sl__realloc(t->v, cap * sizeof *v);
    SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "pack tokens: cannot allocate %zu tokens",
                       cap);
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n++] = x;
  return SL_OK;
}

/* The token ids of f (--ids). */
static int read_ids(FILE *f, const char *path, int64_t eos, tokens *t) {
  char word[32];
  size_t len = 0, line = 1, newlines = 0;
  bool in_doc = false;
  int rc = SL_OK;
  for (int c = getc(f); rc == SL_OK; c = getc(f)) {
    if (c != EOF && !isspace(c)) {
      SL_RETURN_ERROR_IF(len + 1 >= sizeof word || !isdigit(c), SL_EINVAL,
                         "pack tokens: %s:%zu: a token id is a decimal number "
                         "0..65535",
                         path, line);
      word[len++] = (char)c;
      newlines = 0;
      continue;
    }
    if (len) {
      word[len] = 0;
      unsigned long v = strtoul(word, NULL, 10);
      SL_RETURN_ERROR_IF(v > 65535, SL_EINVAL,
                         "pack tokens: %s:%zu: token id %s is above 65535",
                         path, line, word);
      rc = push(t, (uint16_t)v);
      in_doc = true;
      len = 0;
    }
    if (c == '\n') {
      line++;
      newlines++;
    }
    bool doc_end = c == EOF || newlines == 2;
    if (doc_end && in_doc && eos >= 0 && rc == SL_OK)
      rc = push(t, (uint16_t)eos);
    if (doc_end) in_doc = false;
    if (c == EOF) break;
  }
  return rc;
}

/* Appends the tokens of `path`. */
static int read_file(const char *path, bool ids, int64_t eos, tokens *t) {
  FILE *f = fopen(path, "rb");
  SL_RETURN_ERROR_IF(!f, SL_EIO, "pack tokens: %s: %s", path, strerror(errno));
  int rc = SL_OK;
  if (ids) {
    rc = read_ids(f, path, eos, t);
  } else {
    for (int c; rc == SL_OK && (c = getc(f)) != EOF;)
      rc = push(t, (uint16_t)c);
    if (rc == SL_OK && eos >= 0) rc = push(t, (uint16_t)eos);
  }
  if (rc == SL_OK && ferror(f))
    rc = sl_set_error(SL_EIO, "pack tokens: %s: read failed: %s", path,
                      strerror(errno));
  fclose(f);
  return rc;
}

/* Writes v[0..n) as file `index` of the set into `f` (NULL: it could not
 * be created, the error set) and finishes it: one file open at a time. */
static int write_shard(sl__out_file *f, const char *set_id, uint32_t size,
                       uint32_t index, const uint16_t *v, size_t n) {
  if (!f) return sl_last_error_code();
  SL_RETURN_ERROR_IF(n > INT32_MAX, SL_EINVAL,
                     "pack tokens: %s: %zu tokens do not fit llm.c's int32 "
                     "count (use more shards)",
                     sl__out_name(f), n);
  unsigned char header[SL__LLMC_HEADER_BYTES] = {0};
  sl__put32(header, SL__LLMC_MAGIC);
  sl__put32(header + 4, 1);
  sl__put32(header + 8, (uint32_t)n);
  sl__tokens_set_put(header, set_id, size, index);
  SL_FORWARD_IF_ERROR(sl__out_write(f, header, sizeof header));
  unsigned char buf[8192];
  for (size_t i = 0; i < n;) {
    size_t k = 0;
    for (; k < sizeof buf / 2 && i < n; k++, i++) {
      buf[2 * k] = (unsigned char)v[i];
      buf[2 * k + 1] = (unsigned char)(v[i] >> 8);
    }
    SL_FORWARD_IF_ERROR(sl__out_write(f, buf, 2 * k));
  }
  return sl__out_finish(f);
}

int sl__tokens_shard_name(const char *out, uint32_t shard, uint32_t shards,
                          char *buf, size_t size) {
  size_t len = strlen(out);
  if (len > 4 && strcmp(out + len - 4, ".bin") == 0) len -= 4;
  int n = shard == UINT32_MAX
              ? snprintf(buf, size, "%.*s_val.bin", (int)len, out)
          : shards == 1
              ? snprintf(buf, size, "%s", out)
              : snprintf(buf, size, "%.*s_%06u.bin", (int)len, out, shard);
  SL_RETURN_ERROR_IF(n < 0 || (size_t)n >= size, SL_EINVAL,
                     "pack tokens: output name '%s' is too long", out);
  return SL_OK;
}

/* Opens the set: the validation file first (when val), then the K
 * shards. */
static int open_set(const char *out, uint32_t k, bool val,
                    const char *const *inputs, size_t n_inputs,
                    sl__out_set **set) {
  uint32_t nf = k + (val ? 1 : 0);
  size_t cap = strlen(out) + 32;
  char **names = sl__calloc(nf, sizeof *names);
  int rc =
      names ? SL_OK : sl_set_error(SL_ENOMEM, "pack tokens: cannot allocate");
  for (uint32_t i = 0; i < nf && rc == SL_OK; i++) {
    names[i] = sl__malloc(cap);
    rc = !names[i]
             ? sl_set_error(SL_ENOMEM, "pack tokens: cannot allocate")
             : sl__tokens_shard_name(out, val && i == 0 ? UINT32_MAX : i - val,
                                     k, names[i], cap);
  }
  if (rc == SL_OK)
    rc = sl__out_set_open("pack tokens", (const char *const *)names, nf, inputs,
                          n_inputs, set);
  for (uint32_t i = 0; names && i < nf; i++)
    sl__free(names[i]);
  sl__free(names);
  return rc;
}

int sl__pack_tokens(const char *const *files, size_t n, const char *out,
                    const sl__tokens_pack_opts *o, uint64_t *count) {
  if (count) *count = 0;
  sl__tokens_pack_opts def = {.eos = -1, .shards = 1};
  if (!o) o = &def;
  SL_RETURN_ERROR_IF(!files || n == 0 || !out || !*out, SL_EINVAL,
                     "pack tokens: no input files or no output");
  SL_RETURN_ERROR_IF(o->shards < 1 || o->shards > 999999, SL_EINVAL,
                     "pack tokens: %u shards is not in 1..999999", o->shards);
  SL_RETURN_ERROR_IF(o->eos > 65535, SL_EINVAL,
                     "pack tokens: eos %lld is not a token id 0..65535",
                     (long long)o->eos);
  tokens t = {0};
  int rc = SL_OK;
  for (size_t i = 0; i < n && rc == SL_OK; i++)
    rc = read_file(files[i], o->ids, o->eos, &t);
  sl__out_set *set = NULL;
  if (rc == SL_OK) rc = open_set(out, o->shards, o->val > 0, files, n, &set);
  char set_id[SL__SET_ID_LEN + 1];
  sl__new_set_id(set_id);
  uint32_t k = o->shards, nf = k + (o->val > 0 ? 1 : 0), at = 0;
  size_t first = 0;
  if (rc == SL_OK && o->val > 0) {
    first = o->val < t.n ? (size_t)o->val : t.n;
    rc = write_shard(sl__out_set_file(set, at++), set_id, nf, k, t.v, first);
  }
  size_t left = t.n - first;
  for (uint32_t s = 0; s < k && rc == SL_OK; s++) {
    size_t from = first + (size_t)((uint64_t)left * s / k);
    size_t to = first + (size_t)((uint64_t)left * (s + 1) / k);
    rc = write_shard(sl__out_set_file(set, at++), set_id, nf, s, t.v + from,
                     to - from);
    if (rc == SL_OK && o->cancel && *o->cancel)
      rc = sl_set_error(SL_EKILLED, "pack tokens: interrupted by signal %d",
                        (int)*o->cancel);
  }
  /* Every file complete and synced under its temporary name (write_shard
   * finished it), then the summary, then the renames. */
  if (rc == SL_OK && o->before_commit)
    rc = o->before_commit(o->ud, t.n, sl__out_set_bytes(set));
  sl__free(t.v);
  if (rc < 0) {
    sl__out_set_abort(set);
    return rc;
  }
  SL_FORWARD_IF_ERROR(sl__out_set_commit(set));
  if (count) *count = t.n;
  return SL_OK;
}
