/*
 * image_reader.c - the `image` file reader: a folder of JPEG and PNG files
 * (ImageFolder style: one sub-folder per class) or one image file, as
 * samples {image: u8[H, W, C], label: i64[]}.
 *
 * The reader is two stages: "image_files", a source that lists the folder
 * once at open (sorted, see sl__image_list in image.h) and yields each
 * file's bytes with its label, and the parallel decode stage of
 * decode_image.c under the name "image", which decodes them on `threads`
 * workers in order and names the file in every decode error (the list of
 * paths is owned by the source, the decode stage's upstream, so it lives as
 * long as the stage).  Files are read whole with read(2) by the worker
 * holding the pull turn; decoding, the expensive part, runs in parallel.
 *
 * Classes: the sorted names of the first-level sub-folders, every one of
 * them (an empty class folder still takes its index, so labels do not
 * shift when a class has no images yet), joined by ',' in the schema
 * metadata "classes"; a class name holding ',' or a newline is refused.
 */
#include "core/crc32c.h"
#include "image/image.h"
#include "stages/indexed.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* Deeper than this is a symlink loop, or not a data set. */
#define MAX_DEPTH 32

/* --- listing ------------------------------------------------------------- */

typedef struct strvec {
  char **v;
  size_t n, cap;
} strvec;

static int strvec_push(strvec *s, char *p) {
  if (s->n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    char **v = sl__realloc(s->v, cap * sizeof *v);
    if (!v) return SL_ENOMEM;
    s->v = v;
    s->cap = cap;
  }
  s->v[s->n++] = p;
  return SL_OK;
}

static void strvec_free(strvec *s) {
  for (size_t i = 0; i < s->n; i++)
    sl__free(s->v[i]);
  sl__free(s->v);
  memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_image_name(const char *name) {
  const char *dot = strrchr(name, '.');
  return dot && (strcasecmp(dot, ".jpg") == 0 ||
                 strcasecmp(dot, ".jpeg") == 0 || strcasecmp(dot, ".png") == 0);
}

static char *join_path(const char *dir, const char *name) {
  size_t a = strlen(dir), b = strlen(name);
  bool slash = a > 0 && dir[a - 1] == '/';
  char *p = sl__malloc(a + b + 2);
  if (!p) return NULL;
  memcpy(p, dir, a);
  if (!slash) p[a++] = '/';
  memcpy(p + a, name, b + 1);
  return p;
}

/* The entries of `dir` (hidden ones left out): sub-folders into `dirs`,
 * image files into `files` (either may be NULL: not collected), as full
 * paths. */
static int scan_dir(const char *stage, const char *dir, strvec *dirs,
                    strvec *files) {
  DIR *d = opendir(dir);
  SL_RETURN_ERROR_IF(!d, SL_EIO, "%s: %s: cannot open the folder: %s", stage,
                     dir, strerror(errno));
  int rc = SL_OK;
  struct dirent *e;
  errno = 0;
  while (rc == SL_OK && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char *p = join_path(dir, e->d_name);
    if (!p) {
      rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate a path", stage);
      break;
    }
    struct stat st;
    if (stat(p, &st) != 0) {
      rc = sl_set_error(SL_EIO, "%s: %s: %s", stage, p, strerror(errno));
      sl__free(p);
      break;
    }
    strvec *to = S_ISDIR(st.st_mode)                               ? dirs
                 : S_ISREG(st.st_mode) && is_image_name(e->d_name) ? files
                                                                   : NULL;
    if (!to) {
      sl__free(p);
    } else if (strvec_push(to, p) < 0) {
      sl__free(p);
      rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate the file list", stage);
    }
    errno = 0;
  }
  if (rc == SL_OK && errno)
    rc = sl_set_error(SL_EIO, "%s: %s: cannot read the folder: %s", stage, dir,
                      strerror(errno));
  closedir(d);
  return rc;
}

/* Every image below `dir`, at any depth, into `files`. */
static int scan_tree(const char *stage, const char *dir, int depth,
                     strvec *files) {
  SL_RETURN_ERROR_IF(depth > MAX_DEPTH, SL_EINVAL,
                     "%s: %s: folders nested more than %d deep (a symbolic "
                     "link loop?)",
                     stage, dir, MAX_DEPTH);
  strvec dirs = {0};
  int rc = scan_dir(stage, dir, &dirs, files);
  for (size_t i = 0; i < dirs.n && rc == SL_OK; i++)
    rc = scan_tree(stage, dirs.v[i], depth + 1, files);
  strvec_free(&dirs);
  return rc;
}

typedef struct labeled {
  char *path;
  int64_t label;
} labeled;

static int cmp_labeled(const void *a, const void *b) {
  return strcmp(((const labeled *)a)->path, ((const labeled *)b)->path);
}

void sl__image_list_free(sl__image_list *l) {
  if (!l) return;
  for (size_t i = 0; i < l->n; i++)
    sl__free(l->paths[i]);
  for (size_t i = 0; i < l->nclasses; i++)
    sl__free(l->classes[i]);
  SL__FREE(l->paths, l->labels, l->classes);
  memset(l, 0, sizeof *l);
}

/* Moves the files of class `label` (or -1) from `files` into `all`. */
static int take_files(labeled **all, size_t *n, size_t *cap, strvec *files,
                      int64_t label) {
  for (size_t i = 0; i < files->n; i++) {
    if (*n == *cap) {
      size_t c = *cap ? 2 * *cap : 256;
      labeled *v = sl__realloc(*all, c * sizeof *v);
      if (!v) return SL_ENOMEM;
      *all = v;
      *cap = c;
    }
    (*all)[(*n)++] = (labeled){files->v[i], label};
    files->v[i] = NULL;
  }
  files->n = 0;
  return SL_OK;
}

int sl__image_list_make(const char *stage, const char *root,
                        sl__image_list *out) {
  memset(out, 0, sizeof *out);
  struct stat st;
  SL_RETURN_ERROR_IF(stat(root, &st) != 0, SL_EIO, "%s: %s: %s", stage, root,
                     strerror(errno));
  if (!S_ISDIR(st.st_mode)) {
    out->paths = sl__malloc(sizeof *out->paths);
    char *p = sl__strdup(root);
    if (!out->paths || !p) {
      sl__free(p);
      sl__image_list_free(out);
      return sl_set_error(SL_ENOMEM, "%s: cannot allocate", stage);
    }
    out->paths[0] = p;
    out->n = 1;
    return SL_OK;
  }
  strvec classes = {0}, files = {0};
  labeled *all = NULL;
  size_t n = 0, cap = 0;
  int rc = scan_dir(stage, root, &classes, &files);
  if (rc == SL_OK && classes.n > 0 && files.n > 0)
    rc = sl_set_error(SL_EINVAL,
                      "%s: %s is not inside a class folder (%s has "
                      "sub-folders, so every image must be in one)",
                      stage, files.v[0], root);
  if (rc == SL_OK) {
    if (classes.n) qsort(classes.v, classes.n, sizeof *classes.v, cmp_str);
    if (classes.n == 0) rc = take_files(&all, &n, &cap, &files, -1);
  }
  for (size_t c = 0; c < classes.n && rc == SL_OK; c++) {
    const char *name = strrchr(classes.v[c], '/') + 1;
    if (strpbrk(name, ",\n")) {
      rc = sl_set_error(SL_EINVAL,
                        "%s: class folder '%s' holds a ',' or a newline, "
                        "which the classes metadata cannot list",
                        stage, classes.v[c]);
      break;
    }
    rc = scan_tree(stage, classes.v[c], 1, &files);
    if (rc == SL_OK) rc = take_files(&all, &n, &cap, &files, (int64_t)c);
    if (rc == SL_ENOMEM)
      sl_set_error(SL_ENOMEM, "%s: cannot allocate the file list", stage);
  }
  if (rc == SL_OK && n == 0)
    rc = sl_set_error(SL_EINVAL,
                      "%s: %s: no images (files named *.jpg, *.jpeg or "
                      "*.png)",
                      stage, root);
  if (rc == SL_OK) {
    qsort(all, n, sizeof *all, cmp_labeled);
    out->paths = sl__malloc(n * sizeof *out->paths);
    out->labels = classes.n ? sl__malloc(n * sizeof *out->labels) : NULL;
    out->classes = sl__calloc(classes.n ? classes.n : 1, sizeof(char *));
    if (!out->paths || (classes.n && !out->labels) || !out->classes) {
      rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate the file list", stage);
    } else {
      for (size_t i = 0; i < n; i++) {
        out->paths[i] = all[i].path;
        if (out->labels) out->labels[i] = all[i].label;
        all[i].path = NULL;
      }
      out->n = n;
      for (size_t c = 0; c < classes.n; c++) {
        char *name = sl__strdup(strrchr(classes.v[c], '/') + 1);
        if (!name) {
          rc = sl_set_error(SL_ENOMEM, "%s: cannot allocate", stage);
          break;
        }
        out->classes[out->nclasses++] = name;
      }
      out->is_dir = true;
    }
  }
  for (size_t i = 0; i < n; i++)
    sl__free(all[i].path);
  sl__free(all);
  strvec_free(&classes);
  strvec_free(&files);
  if (rc < 0) sl__image_list_free(out);
  return rc;
}

char *sl__image_classes_join(const sl__image_list *l) {
  size_t len = 1;
  for (size_t i = 0; i < l->nclasses; i++)
    len += strlen(l->classes[i]) + 1;
  char *s = sl__malloc(len);
  if (!s) return NULL;
  size_t k = 0;
  s[0] = 0;
  for (size_t i = 0; i < l->nclasses; i++)
    k += (size_t)snprintf(s + k, len - k, "%s%s", i ? "," : "", l->classes[i]);
  return s;
}

/* --- the source: file bytes and labels ------------------------------------ */

typedef struct files_state {
  sl__indexed ix; /* n: the listed files */
  sl__image_list list;
  sl_schema *schema;
  char *root;            /* as given, for messages */
  sl__file_id *ids;      /* each listed file's identity, after listing */
  sl__buffer_pool *pool; /* the files' bytes, released once decoded */
} files_state;

/* Idle file buffers kept for reuse, and the bytes they may hold. */
#define FILES_POOL_IDLE 8
#define FILES_POOL_IDLE_BYTES ((size_t)64 << 20)

/* The whole file at `path` into a new buffer from `pool`; a file whose
 * identity is no longer `id` (replaced or rewritten since the folder was
 * listed) is SL_ECORRUPT naming it. */
static int read_file(sl__buffer_pool *pool, const char *path,
                     const sl__file_id *id, sl_buffer **out) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  SL_RETURN_ERROR_IF(fd < 0, SL_EIO, "image: %s: cannot open: %s", path,
                     strerror(errno));
  struct stat st;
  int rc = SL_OK;
  sl__file_id now = {0};
  if (fstat(fd, &st) != 0) {
    rc = sl_set_error(SL_EIO, "image: %s: %s", path, strerror(errno));
  } else if ((now = sl__file_id_of(&st)), !sl__file_id_equal(&now, id)) {
    rc = sl_set_error(SL_ECORRUPT,
                      "image: %s: the file changed since the folder was "
                      "listed (replaced or rewritten: its inode, size or "
                      "modification time differs)",
                      path);
  } else if ((uint64_t)st.st_size > SL__IMAGE_MAX_BYTES) {
    rc = sl_set_error(SL_EINVAL,
                      "image: %s: %lld bytes, more than the %llu MiB an "
                      "encoded image may take",
                      path, (long long)st.st_size,
                      (unsigned long long)(SL__IMAGE_MAX_BYTES >> 20));
  } else {
    size_t size = (size_t)st.st_size, got = 0;
    sl_buffer *b = sl__buffer_pool_get(pool, size);
    if (!b) rc = sl_set_error(SL_ENOMEM, "image: %s: cannot allocate", path);
    while (rc == SL_OK && got < size) {
      ssize_t k = read(fd, (char *)sl_buffer_data(b) + got, size - got);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0)
        rc = sl_set_error(SL_EIO,
                          "image: %s: read failed after %zu of %zu "
                          "bytes: %s",
                          path, got, size,
                          k < 0 ? strerror(errno) : "the file shrank");
      else
        got += (size_t)k;
    }
    if (rc == SL_OK)
      *out = b;
    else
      sl_buffer_release(b);
  }
  close(fd);
  return rc;
}

static int files_get(void *st, uint64_t pos, sl_sample **out) {
  files_state *f = st;
  sl_buffer *b;
  SL_FORWARD_IF_ERROR(read_file(f->pool, f->list.paths[pos], &f->ids[pos], &b));
  sl_sample *s = sl_sample_new(f->schema);
  int rc = s ? SL_OK : sl_set_error(SL_ENOMEM, "image: cannot allocate");
  sl_tensor t;
  int64_t len = (int64_t)sl_buffer_size(b);
  if (rc == SL_OK) rc = sl_tensor_view(&t, SL_BYTES, 1, &len, b, 0);
  if (rc == SL_OK && (rc = sl_sample_set_move(s, 0, &t)) < 0)
    sl_tensor_clear(&t);
  if (rc == SL_OK && f->list.labels) {
    int64_t *lab;
    rc = sl_sample_alloc(s, 1, 0, NULL, (void **)&lab);
    if (rc == SL_OK) *lab = f->list.labels[pos];
  }
  sl_buffer_release(b);
  return sl__sample_out(rc, s, out);
}

static void files_destroy(void *st) {
  files_state *f = st;
  if (!f) return;
  sl__image_list_free(&f->list);
  SL__FREE(f->root, f->ids);
  sl__buffer_pool_release(f->pool);
  sl__stage_free(f, NULL, f->schema);
}

/* --- saving: the position, and the list it indexes -------------------- */

/* CRC32C of the listed names (below the root) and labels: a folder whose
 * images were added, removed or renamed since a save gives another. */
static uint64_t files_fingerprint(const files_state *f) {
  uint32_t crc = 0;
  size_t skip = strlen(f->root);
  for (size_t i = 0; i < f->list.n; i++) {
    const char *p = f->list.paths[i];
    const char *rel = strncmp(p, f->root, skip) == 0 ? p + skip : p;
    crc = sl__crc32c(crc, rel, strlen(rel) + 1);
    if (f->list.labels)
      crc = sl__crc32c(crc, &f->list.labels[i], sizeof f->list.labels[i]);
  }
  return crc;
}

/* Record: the count, the fingerprint and each file's identity. */
static int files_put(void *st, sl__state_out *w) {
  const files_state *f = st;
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, f->list.n));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, files_fingerprint(f)));
  return sl__state_put_file_ids(w, f->ids, f->list.n);
}

static int files_check(void *st, sl__state_in *in) {
  const files_state *f = st;
  uint64_t n, fp;
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &n));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &fp));
  SL_RETURN_ERROR_IF(n != f->list.n || fp != files_fingerprint(f), SL_ECORRUPT,
                     "restore: image %s: the images changed since the state "
                     "was saved (%llu files then, %zu now%s)",
                     f->root, (unsigned long long)n, f->list.n,
                     n == f->list.n ? ", other names or classes" : "");
  return sl__state_check_file_ids(
      in, "image", (const char *const *)f->list.paths, f->ids, f->list.n);
}

static void files_identity(const sl_reader *r, void *st, char *buf,
                           size_t cap) {
  const files_state *f = st;
  snprintf(buf, cap, "%s labels=%d", sl__basename(f->root),
           f->list.labels ? 1 : 0);
}

static const sl__stage_ops files_ops = {
    .name = "image_files",
    SL__INDEXED_OPS,
    .destroy = files_destroy,
    .identity = files_identity,
};

static int files_schema(const char *root, const sl__image_list *l,
                        sl_schema **out) {
  sl_schema *s = sl_schema_new();
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "image: cannot allocate a schema");
  int64_t var = SL_DIM_VAR;
  int rc = sl_schema_add(s, "image", SL_BYTES, 1, &var);
  if (rc >= 0 && l->labels) rc = sl_schema_add(s, "label", SL_I64, 0, NULL);
  if (rc >= 0) rc = sl_schema_set_meta(s, "source", "image");
  if (rc >= 0) rc = sl_schema_set_meta(s, "root", root);
  if (rc >= 0 && l->labels) {
    char *classes = sl__image_classes_join(l);
    rc = classes ? sl_schema_set_meta(s, "classes", classes) : SL_ENOMEM;
    sl__free(classes);
  }
  if (rc < 0) {
    sl_schema_release(s);
    return sl_set_error(rc, "image: %s: cannot build the schema", root);
  }
  *out = s;
  return SL_OK;
}

/* Each listed file's identity (a stat after listing: what a saved state
 * carries and each read checks). */
static int list_ids(files_state *f) {
  f->ids = sl__calloc(f->list.n ? f->list.n : 1, sizeof *f->ids);
  SL_RETURN_ERROR_IF(!f->ids, SL_ENOMEM, "image: cannot allocate");
  for (size_t i = 0; i < f->list.n; i++) {
    struct stat st;
    SL_RETURN_ERROR_IF(stat(f->list.paths[i], &st) != 0, SL_EIO,
                       "image: %s: %s", f->list.paths[i], strerror(errno));
    f->ids[i] = sl__file_id_of(&st);
  }
  return SL_OK;
}

int sl_image_reader(const char *path, const sl_image_opts *opts,
                    sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "image: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!path || !path[0], SL_EINVAL, "image: empty path");
  sl_image_opts o = SL_IMAGE_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(sl__opts_copy("sl_image_opts", &o, sizeof o, opts));
  SL_RETURN_ERROR_IF(o.field && strcmp(o.field, "image") != 0, SL_EINVAL,
                     "image: the reader's field is 'image' (got field '%s')",
                     o.field);
  o.field = "image";
  SL_FORWARD_IF_ERROR(sl__image_shape_check("image", &o.shape));
  files_state *f = sl__calloc(1, sizeof *f);
  SL_RETURN_ERROR_IF(!f, SL_ENOMEM, "image: cannot allocate");
  f->pool = sl__buffer_pool_new(FILES_POOL_IDLE, FILES_POOL_IDLE_BYTES);
  f->root = sl__strdup(path);
  f->ix = (sl__indexed){files_get, files_put, files_check, "image",
                        f->root,   "files",   0,           0};
  int rc = f->pool && f->root
               ? sl__image_list_make("image", path, &f->list)
               : sl_set_error(SL_ENOMEM, "image: cannot allocate");
  if (rc == SL_OK) rc = files_schema(path, &f->list, &f->schema);
  if (rc == SL_OK) rc = list_ids(f);
  f->ix.n = f->list.n;
  if (rc < 0) {
    files_destroy(f);
    return rc;
  }
  const char *const *names = (const char *const *)f->list.paths;
  size_t n = f->list.n;
  sl_reader *src;
  SL_FORWARD_IF_ERROR(
      sl__stage_new(&files_ops, f, f->schema, NULL, 0, NULL, &src));
  return sl__decode_image_make(src, &o, "image", names, n, out);
}
