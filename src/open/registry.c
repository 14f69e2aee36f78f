/*
 * registry.c - the format registry: file names "TAG:PATH" (or a bare PATH
 * tagged by its extension, or a glob pattern) expanded into tagged paths
 * and the constructor registered for each tag (sl_open, open.c, opens them;
 * open_files, wds_open and tokens_open expand names the same way).
 *
 * Tables.  Two fixed arrays of 64 slots: formats (tag -> constructor + user
 * data) and extensions (suffix -> tag).  Fixed storage means a registration
 * never allocates and nothing is left for a leak checker at exit; 64 is far
 * more than the built-in tags (slr, idx, text and image) plus a program's
 * own.  The built-in rows are static initialisers, so there is no "init"
 * call to forget and no registration order to get wrong.
 *
 * Locking: g_mu protects both tables (every field of every slot and the
 * counts).  Lookups copy what they need (fn, ud, the tag text) under the lock
 * and call the constructor after releasing it, so a constructor may itself
 * call sl_open or register formats, and a slow open never blocks another
 * thread's registration.  The price is that a replaced or removed format may
 * still be running in another thread; that is why the registry never frees
 * `ud` (see sl_format_register in sluice.h).
 *
 * A name's brace patterns ("train-{000..127}.tar", "{a,b}", braces.c) are
 * expanded first, in their order, then each result holding *, ? or [ is a
 * glob pattern; either applies only when no file of exactly that name
 * exists (lstat), so "[a].slr" and "{a}.slr" can always be opened.  A URL
 * takes braces but never globs ('?' starts its query).
 *
 * Expansion order is the caller's order of names, and within a pattern byte
 * order (strcmp).  glob(3) sorts with strcoll, which depends on LC_COLLATE;
 * the epoch plan numbers files by this order, so two ranks started with
 * different locales would otherwise split different file lists.
 */
#include "open/registry.h"
#include "transport/http.h"

#include <errno.h>
#include <glob.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>

#define SLOTS 64

typedef struct format_slot {
  char tag[SL__TAG_MAX];
  sl_format_open_fn fn;
  void *ud;
} format_slot;

typedef struct ext_slot {
  char ext[SL__TAG_MAX];
  char tag[SL__TAG_MAX];
} ext_slot;

static int open_slr(void *ud, const char *path, const sl_open_opts *opts,
                    sl_reader **out) {
  return sl_slr_reader(path, &opts->slr, 0, UINT64_MAX, out);
}

/* idx: the labels file from opts->labels, or derived from the name. */
static int open_idx(void *ud, const char *path, const sl_open_opts *opts,
                    sl_reader **out) {
  return sl_idx_reader(path, opts->labels, out);
}

static int open_text(void *ud, const char *path, const sl_open_opts *opts,
                     sl_reader **out) {
  return sl_text_reader(path, opts->text_mmap, opts->parser,
                        opts->parser_options, out);
}

/* image: a folder of JPEG/PNG files or one of them (src/image/). */
static int open_image(void *ud, const char *path, const sl_open_opts *opts,
                      sl_reader **out) {
  return sl_image_reader(path, opts->image, out);
}

/* tokens: llm.c token shards or .npy token arrays (sl_tokens_reader), one
 * reader per file; world 0 is the launcher's environment. */
static int open_tokens(void *ud, const char *path, const sl_open_opts *opts,
                       sl_reader **out) {
  SL_RETURN_ERROR_IF(!opts->tokens, SL_EINVAL,
                     "tokens: %s: needs options (sl_open_opts.tokens, at "
                     "least seq_len)",
                     path);
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  SL_FORWARD_IF_ERROR(
      sl__opts_copy("sl_tokens_opts", &o, sizeof o, opts->tokens));
  if (o.world == 0) SL_FORWARD_IF_ERROR(sl_shard_env(&o.rank, &o.world));
  return sl_tokens_reader(&path, 1, &o, out);
}

/* npy: a .npy array or an .npz archive (sl_npy_reader; opts->npy). */
static int open_npy(void *ud, const char *path, const sl_open_opts *opts,
                    sl_reader **out) {
  return sl_npy_reader(path, opts->npy, out);
}

/* csv: a CSV file (sl_csv_reader; opts->csv: columns, delimiter, header). */
static int open_csv(void *ud, const char *path, const sl_open_opts *opts,
                    sl_reader **out) {
  return sl_csv_reader(path, opts->csv, out);
}

/* wds: one WebDataset tar shard (sl_wds_reader); sl_wds_open reads many on
 * threads. */
static int open_wds(void *ud, const char *path, const sl_open_opts *opts,
                    sl_reader **out) {
  return sl_wds_reader(path, out);
}

/* tfrecord: a TFRecord file as {record: bytes} (sl_tfrecord_reader;
 * opts->tfrecord's features decode tf.train.Example). */
static int open_tfrecord(void *ud, const char *path, const sl_open_opts *opts,
                         sl_reader **out) {
  return sl_tfrecord_reader(path, opts->tfrecord, out);
}

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static format_slot g_formats[SLOTS] = {
    {"slr", open_slr, NULL},          {"idx", open_idx, NULL},
    {"text", open_text, NULL},        {"image", open_image, NULL},
    {"tokens", open_tokens, NULL},    {"npy", open_npy, NULL},
    {"csv", open_csv, NULL},          {"wds", open_wds, NULL},
    {"tfrecord", open_tfrecord, NULL}}; /* g_mu */
static int g_nformats = 9;              /* g_mu */
/* The data sets' own names ("t10k-images-idx3-ubyte.gz") open as idx; text
 * has no extension: ".txt" files are too often something else.  ".csv" is
 * the csv reader's (a header line naming the columns); ".tar" the wds
 * reader's, since the only tar files sluice reads are WebDataset shards
 * ("train-{000..127}.tar" as WebDataset's users write it). */
static ext_slot g_exts[SLOTS] = {
    {".slr", "slr"},          {"-idx3-ubyte", "idx"}, {"-idx3-ubyte.gz", "idx"},
    {".jpg", "image"},        {".jpeg", "image"},     {".png", "image"},
    {".npy", "npy"},          {".npz", "npy"},        {".csv", "csv"},
    {".tfrecord", "tfrecord"}, {".tar", "wds"}}; /* g_mu */
static int g_nexts = 11;                         /* g_mu */

/* --- syntax -------------------------------------------------------------- */

static bool is_alpha(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* A tag: a letter, then letters, digits, '_', '-' or '+'; 1..31 bytes. */
static bool valid_tag(const char *s, size_t len) {
  if (len == 0 || len >= SL__TAG_MAX || !is_alpha(s[0])) return false;
  for (size_t i = 1; i < len; i++) {
    char c = s[i];
    if (!is_alpha(c) && !(c >= '0' && c <= '9') && c != '_' && c != '-' &&
        c != '+')
      return false;
  }
  return true;
}

static bool is_pattern(const char *path) {
  return strpbrk(path, "*?[") != NULL;
}

/* --- tables (callers hold g_mu) ------------------------------------------ */

static int find_format(const char *tag) {
  for (int i = 0; i < g_nformats; i++)
    if (strcmp(g_formats[i].tag, tag) == 0) return i;
  return -1;
}

static int find_ext(const char *ext) {
  for (int i = 0; i < g_nexts; i++)
    if (strcmp(g_exts[i].ext, ext) == 0) return i;
  return -1;
}

static int cmp_tag(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "idx, slr, text": the registered tags sorted, for messages. */
static void known_tags(char *buf, size_t size) {
  const char *tags[SLOTS];
  int n = g_nformats;
  for (int i = 0; i < n; i++)
    tags[i] = g_formats[i].tag;
  qsort(tags, (size_t)n, sizeof *tags, cmp_tag);
  size_t used = 0;
  buf[0] = 0;
  for (int i = 0; i < n && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "",
                             tags[i]);
  if (n == 0) snprintf(buf, size, "none");
}

/* --- registration ----------------------------------------------------------
 */

int sl_format_register(const char *tag, sl_format_open_fn fn, void *ud) {
  SL_RETURN_ERROR_IF(!tag || !valid_tag(tag, strlen(tag)), SL_EINVAL,
                     "format_register: bad tag '%s' (a letter, then up to 30 "
                     "letters, digits, '_', '-' or '+')",
                     tag ? tag : "(null)");
  pthread_mutex_lock(&g_mu);
  int i = find_format(tag), rc = SL_OK;
  if (!fn) {
    if (i < 0)
      rc = sl_set_error(SL_EINVAL,
                        "format_register: cannot remove '%s': no "
                        "such format",
                        tag);
    else
      g_formats[i] = g_formats[--g_nformats]; /* order does not matter */
  } else if (i >= 0) {
    g_formats[i].fn = fn;
    g_formats[i].ud = ud;
  } else if (g_nformats == SLOTS) {
    rc = sl_set_error(SL_ENOMEM,
                      "format_register: cannot add '%s': all %d format "
                      "slots are taken",
                      tag, SLOTS);
  } else {
    format_slot *s = &g_formats[g_nformats++];
    snprintf(s->tag, sizeof s->tag, "%s", tag);
    s->fn = fn;
    s->ud = ud;
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

int sl_format_extension(const char *ext, const char *tag) {
  size_t el = ext ? strlen(ext) : 0;
  SL_RETURN_ERROR_IF(el == 0 || el >= SL__TAG_MAX || strchr(ext, '/'),
                     SL_EINVAL,
                     "format_extension: bad extension '%s' (1..31 bytes, "
                     "no '/')",
                     ext ? ext : "(null)");
  SL_RETURN_ERROR_IF(tag && !valid_tag(tag, strlen(tag)), SL_EINVAL,
                     "format_extension: bad tag '%s'", tag);
  pthread_mutex_lock(&g_mu);
  int i = find_ext(ext), rc = SL_OK;
  if (!tag) {
    if (i < 0)
      rc = sl_set_error(
          SL_EINVAL, "format_extension: cannot remove '%s': not mapped", ext);
    else
      g_exts[i] = g_exts[--g_nexts];
  } else if (i < 0 && g_nexts == SLOTS) {
    rc = sl_set_error(SL_ENOMEM,
                      "format_extension: cannot add '%s': all %d extension "
                      "slots are taken",
                      ext, SLOTS);
  } else {
    if (i < 0) {
      i = g_nexts++;
      snprintf(g_exts[i].ext, sizeof g_exts[i].ext, "%s", ext);
    }
    snprintf(g_exts[i].tag, sizeof g_exts[i].tag, "%s", tag);
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

/* --- expansion -------------------------------------------------------------
 */

int sl__format_find(const char *stage, const char *tag, const char *name,
                    sl_format_open_fn *fn, void **ud) {
  pthread_mutex_lock(&g_mu);
  int rc = SL_OK, i = find_format(tag);
  if (i >= 0 && fn) {
    *fn = g_formats[i].fn;
    *ud = g_formats[i].ud;
  } else if (i < 0) {
    char known[SLOTS * SL__TAG_MAX];
    known_tags(known, sizeof known);
    rc = sl_set_error(SL_EINVAL,
                      "%s: unknown format tag '%s' in '%s' (known "
                      "tags: %s)",
                      stage, tag, name, known);
  }
  pthread_mutex_unlock(&g_mu);
  return rc;
}

/* The tag of a bare path: the longest registered suffix ending it. */
static int infer_tag(const char *stage, const char *path,
                     char tag[SL__TAG_MAX]) {
  size_t pl = strlen(path), best = 0;
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_nexts; i++) {
    size_t el = strlen(g_exts[i].ext);
    if (el <= pl && el > best &&
        memcmp(path + pl - el, g_exts[i].ext, el) == 0) {
      best = el;
      memcpy(tag, g_exts[i].tag, SL__TAG_MAX);
    }
  }
  char known[SLOTS * SL__TAG_MAX];
  known_tags(known, sizeof known);
  pthread_mutex_unlock(&g_mu);
  SL_RETURN_ERROR_IF(best == 0, SL_EINVAL,
                     "%s: '%s' has no format tag and no known extension "
                     "(write TAG:PATH; known tags: %s)",
                     stage, path, known);
  return sl__format_find(stage, tag, path, NULL, NULL);
}

/* A growing array of named files. */
typedef struct file_list {
  sl__named_file *v;
  size_t n, cap;
} file_list;

static int list_add(const char *stage, file_list *l, const char *tag,
                    const char *path) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 8;
    sl__named_file *v = sl__realloc(l->v, cap * sizeof *v);
    SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "%s: cannot allocate the file list",
                       stage);
    l->v = v;
    l->cap = cap;
  }
  char *p = sl__strdup(path);
  SL_RETURN_ERROR_IF(!p, SL_ENOMEM, "%s: cannot allocate a path", stage);
  sl__named_file *f = &l->v[l->n++];
  memcpy(f->tag, tag, SL__TAG_MAX);
  f->path = p;
  return SL_OK;
}

/* Adds `path` with the explicit tag, or the one its extension maps to. */
static int add_file(const char *stage, file_list *l, const char *tag,
                    const char *path) {
  char t[SL__TAG_MAX];
  if (tag)
    memcpy(t, tag, SL__TAG_MAX);
  else
    SL_FORWARD_IF_ERROR(infer_tag(stage, path, t));
  return list_add(stage, l, t, path);
}

/* glob(3) reports the first directory it could not read through this
 * callback, which has no user pointer: the slot is per thread. */
static _Thread_local int g_glob_errno;
static _Thread_local char g_glob_path[256];

static int on_glob_error(const char *epath, int eerrno) {
  /* A directory of the pattern that does not exist just matches nothing. */
  if (eerrno == ENOENT || eerrno == ENOTDIR) return 0;
  if (!g_glob_errno) {
    g_glob_errno = eerrno;
    snprintf(g_glob_path, sizeof g_glob_path, "%s", epath);
  }
  return 1; /* stop: a partial expansion would silently drop files */
}

static int cmp_path(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static int expand_pattern(const char *stage, file_list *l, const char *tag,
                          const char *pattern) {
  glob_t g;
  memset(&g, 0, sizeof g);
  g_glob_errno = 0;
  int grc = glob(pattern, GLOB_NOSORT, on_glob_error, &g);
  int rc = SL_OK;
  if (grc == GLOB_NOMATCH || (grc == 0 && g.gl_pathc == 0)) {
    rc = sl_set_error(SL_EINVAL, "%s: pattern '%s' matches no file", stage,
                      pattern);
  } else if (grc == GLOB_NOSPACE) {
    rc = sl_set_error(SL_ENOMEM, "%s: out of memory expanding '%s'", stage,
                      pattern);
  } else if (grc != 0) {
    rc = sl_set_error(SL_EIO, "%s: cannot expand pattern '%s': %s: %s", stage,
                      pattern, g_glob_errno ? g_glob_path : "?",
                      g_glob_errno ? strerror(g_glob_errno) : "read error");
  } else {
    qsort(g.gl_pathv, g.gl_pathc, sizeof *g.gl_pathv, cmp_path);
    for (size_t i = 0; i < g.gl_pathc && rc == SL_OK; i++)
      rc = add_file(stage, l, tag, g.gl_pathv[i]);
  }
  globfree(&g);
  return rc;
}

/* One path (braces expanded): a glob's files, or the path itself. */
static int expand_path(const char *stage, file_list *l, const char *tag,
                       const char *path) {
  /* A file literally named like a pattern ("[a].slr") is that file. */
  struct stat st;
  if (is_pattern(path) && !sl__is_url(path) && lstat(path, &st) != 0)
    return expand_pattern(stage, l, tag, path);
  return add_file(stage, l, tag, path);
}

static int expand_one(const char *stage, file_list *l, const char *name) {
  const char *colon = strchr(name, ':'), *path = name;
  char tag[SL__TAG_MAX];
  bool tagged = false;
  /* "http://..." is a URL, not the tag "http" (src/transport/http.c). */
  if (colon && valid_tag(name, (size_t)(colon - name)) && !sl__is_url(name)) {
    memcpy(tag, name, (size_t)(colon - name));
    tag[colon - name] = 0;
    SL_FORWARD_IF_ERROR(sl__format_find(stage, tag, name, NULL, NULL));
    path = colon + 1;
    tagged = true;
  }
  SL_RETURN_ERROR_IF(!path[0], SL_EINVAL, "%s: '%s' has an empty path", stage,
                     name);
  /* A file literally named like a pattern ("[a].slr", "{a}.slr") is that
   * file. */
  struct stat st;
  bool url = sl__is_url(path);
  if (sl__has_braces(path) && (url || lstat(path, &st) != 0)) {
    char **v;
    size_t nv;
    SL_FORWARD_IF_ERROR(sl__braces_expand(stage, path, &v, &nv));
    int rc = SL_OK;
    for (size_t i = 0; i < nv && rc == SL_OK; i++)
      rc = expand_path(stage, l, tagged ? tag : NULL, v[i]);
    sl__braces_free(v, nv);
    return rc;
  }
  return expand_path(stage, l, tagged ? tag : NULL, path);
}

void sl__named_files_free(sl__named_file *files, size_t count) {
  if (!files) return;
  for (size_t i = 0; i < count; i++)
    sl__free(files[i].path);
  sl__free(files);
}

int sl__names_expand(const char *stage, const char *const *names, size_t n,
                     sl__named_file **out, size_t *count) {
  *out = NULL;
  *count = 0;
  SL_RETURN_ERROR_IF(!names || n == 0, SL_EINVAL, "%s: no file names", stage);
  file_list l = {0};
  for (size_t i = 0; i < n; i++) {
    int rc = names[i]
                 ? expand_one(stage, &l, names[i])
                 : sl_set_error(SL_EINVAL, "%s: name %zu is NULL", stage, i);
    if (rc < 0) {
      sl__named_files_free(l.v, l.n);
      return rc;
    }
  }
  *out = l.v;
  *count = l.n;
  return SL_OK;
}
