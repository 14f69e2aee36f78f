/*
 * output.c - writing outputs (output.h): unique O_EXCL | O_NOFOLLOW
 * temporaries, the lock-free table of live temporary names and made folders
 * that a signal handler walks, input/output identity, folder creation, and
 * the all-or-nothing rename of a set of files.  Every packer writes here.
 */
#include "transport/output.h"
#include "transport/io_faults.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* --- random names ----------------------------------------------------------
 */

/* n random bytes: getrandom, else the clock and a counter (never fails). */
void sl__random_bytes(void *buf, size_t n) {
  unsigned char *b = buf;
  size_t got = 0;
  while (got < n) {
    ssize_t k = getrandom(b + got, n - got, GRND_NONBLOCK);
    if (k <= 0) break;
    got += (size_t)k;
  }
  if (got == n) return;
  static atomic_ulong counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
               ((uint64_t)getpid() << 16) ^ atomic_fetch_add(&counter, 1);
  for (; got < n; got++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
    b[got] = (unsigned char)(x >> 24);
  }
}

void sl__new_set_id(char out[SL__SET_ID_LEN + 1]) {
  unsigned char r[SL__SET_ID_LEN / 2];
  sl__random_bytes(r, sizeof r);
  for (size_t i = 0; i < sizeof r; i++)
    snprintf(out + 2 * i, 3, "%02x", r[i]);
  out[SL__SET_ID_LEN] = 0;
}

/* --- the tables of live temporary names and made folders --------------------
 * Blocks of slots, linked and never freed; a slot holds a path while that
 * file (folder) exists.  Registration claims a free slot with a CAS, so a
 * table needs no lock and a signal handler may walk it. */
#define SLOTS 256
typedef struct slot_block {
  _Atomic(char *) slot[SLOTS];
  _Atomic(struct slot_block *) next;
} slot_block;

typedef struct path_table {
  slot_block first;
  _Atomic(slot_block *) hint;
} path_table;

static path_table g_temps = {.hint = &g_temps.first};
static path_table g_dirs = {.hint = &g_dirs.first};

static _Atomic(char *) *claim_in(slot_block *b, slot_block *stop, char *path) {
  for (; b && b != stop; b = atomic_load(&b->next))
    for (int i = 0; i < SLOTS; i++) {
      char *expect = NULL;
      if (atomic_load_explicit(&b->slot[i], memory_order_relaxed) == NULL &&
          atomic_compare_exchange_strong(&b->slot[i], &expect, path))
        return &b->slot[i];
    }
  return NULL;
}

/* Registers `path` (kept, not copied): its slot, or NULL (SL_ENOMEM set). */
static _Atomic(char *) *table_add(path_table *t, char *path) {
  slot_block *hint = atomic_load(&t->hint);
  for (;;) {
    _Atomic(char *) *slot = claim_in(hint, NULL, path);
    if (!slot) slot = claim_in(&t->first, hint, path);
    if (slot) return slot;
    /* Every slot taken: append a block after the last one. */
    slot_block *last = hint;
    for (slot_block *n; (n = atomic_load(&last->next)) != NULL;)
      last = n;
    slot_block *nb = sl__calloc(1, sizeof *nb), *expect = NULL;
    if (!nb) {
      sl_set_error(SL_ENOMEM, "output: %s: cannot allocate", path);
      return NULL;
    }
    if (!atomic_compare_exchange_strong(&last->next, &expect, nb))
      sl__free(nb); /* another thread appended one: use that */
    hint = atomic_load(&last->next);
    atomic_store(&t->hint, hint);
  }
}

static void table_drop(_Atomic(char *) **slot) {
  if (*slot) atomic_store(*slot, NULL);
  *slot = NULL;
}

void sl__out_remove_temps(void) {
  for (slot_block *b = &g_temps.first; b; b = atomic_load(&b->next))
    for (int i = 0; i < SLOTS; i++) {
      char *p = atomic_load(&b->slot[i]);
      if (p) unlink(p);
    }
  /* Folders, innermost first: passes until one removes nothing. */
  for (int pass = 0; pass < 64; pass++) {
    bool removed = false;
    for (slot_block *b = &g_dirs.first; b; b = atomic_load(&b->next))
      for (int i = 0; i < SLOTS; i++) {
        char *p = atomic_load(&b->slot[i]);
        if (p && rmdir(p) == 0) removed = true;
      }
    if (!removed) break;
  }
}

/* --- one file ---------------------------------------------------------------
 */
struct sl__out_file {
  char *what, *path, *tmp;
  int fd;
  uint64_t bytes;
  _Atomic(char *) *slot; /* in g_temps while the temporary file exists */
  bool finished, failed;
};

static void file_free(sl__out_file *f) {
  if (f->fd >= 0) close(f->fd);
  SL__FREE(f->what, f->path, f->tmp, f);
}

/* Closes and removes the temporary file (it stays allocated). */
static void file_discard(sl__out_file *f) {
  if (f->fd >= 0) close(f->fd);
  f->fd = -1;
  if (f->slot) unlink(f->tmp);
  table_drop(&f->slot);
  f->failed = true;
}

void sl__out_abort(sl__out_file *f) {
  if (!f) return;
  file_discard(f);
  file_free(f);
}

int sl__out_open(const char *what, const char *path, sl__out_file **out) {
  *out = NULL;
  SL_RETURN_ERROR_IF(!path || !*path, SL_EINVAL, "%s: no output name", what);
  sl__out_file *f = sl__calloc(1, sizeof *f);
  SL_RETURN_ERROR_IF(!f, SL_ENOMEM, "%s: %s: cannot allocate", what, path);
  f->fd = -1;
  size_t cap = strlen(path) + 48;
  f->what = sl__strdup(what);
  f->path = sl__strdup(path);
  f->tmp = sl__malloc(cap);
  if (!f->what || !f->path || !f->tmp) {
    file_free(f);
    return sl_set_error(SL_ENOMEM, "%s: %s: cannot allocate", what, path);
  }
  static const char alnum[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  /* O_EXCL: an existing name (another writer's, or a planted symlink) is
   * never opened; a new random suffix is drawn instead. */
  for (int attempt = 0; attempt < 100 && f->fd < 0; attempt++) {
    unsigned char r[6];
    char sfx[7];
    sl__random_bytes(r, sizeof r);
    for (int i = 0; i < 6; i++)
      sfx[i] = alnum[r[i] % (sizeof alnum - 1)];
    sfx[6] = 0;
    snprintf(f->tmp, cap, "%s.tmp-%ld-%s", path, (long)getpid(), sfx);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                 0666); /* the mode a plain create gives: the umask applies */
    if (f->fd < 0 && errno != EEXIST) break;
  }
  if (f->fd < 0) {
    int rc = sl_set_error(SL_EIO, "%s: cannot create %s: %s", what, f->tmp,
                          strerror(errno));
    file_free(f);
    return rc;
  }
  if (!(f->slot = table_add(&g_temps, f->tmp))) {
    int rc = sl_last_error_code();
    close(f->fd);
    f->fd = -1;
    unlink(f->tmp);
    file_free(f);
    return rc;
  }
  *out = f;
  return SL_OK;
}

/* write, or what the fault hook (io_faults.h) makes of it. */
static ssize_t hooked_write(int fd, const void *p, size_t n) {
  switch (sl__io_fault_next(SL__IO_WRITE, &n)) {
  case SL__IO_EIO:
    errno = EIO;
    return -1;
  case SL__IO_ENOSPC:
    errno = ENOSPC;
    return -1;
  default: /* SL__IO_SHORT lowered n */
    return write(fd, p, n);
  }
}

int sl__out_write(sl__out_file *f, const void *data, size_t n) {
  SL_RETURN_ERROR_IF(
      f->failed || f->finished, SL_ESTATE, "%s: %s: %s", f->what, f->path,
      f->failed ? "an earlier write failed" : "written after it was finished");
  const char *p = data;
  while (n) {
    ssize_t k = hooked_write(f->fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      f->failed = true;
      return sl_set_error(SL_EIO, "%s: write failed at offset %llu: %s", f->tmp,
                          (unsigned long long)f->bytes,
                          k < 0 ? strerror(errno) : "no progress");
    }
    p += k;
    n -= (size_t)k;
    f->bytes += (uint64_t)k;
  }
  return SL_OK;
}

uint64_t sl__out_bytes(const sl__out_file *f) {
  return f ? f->bytes : 0;
}

const char *sl__out_name(const sl__out_file *f) {
  return f->path;
}

const char *sl__out_temp_name(const sl__out_file *f) {
  return f->tmp;
}

int sl__out_finish(sl__out_file *f) {
  if (f->finished) return SL_OK;
  int rc = SL_OK;
  if (f->failed)
    rc = sl_set_error(SL_EIO, "%s: %s: an earlier write failed", f->what,
                      f->path);
  else if (fsync(f->fd) != 0)
    rc = sl_set_error(SL_EIO, "%s: %s: fsync: %s", f->what, f->tmp,
                      strerror(errno));
  if (rc == SL_OK) {
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0)
      rc = sl_set_error(SL_EIO, "%s: %s: close: %s", f->what, f->tmp,
                        strerror(errno));
  }
  if (rc < 0)
    file_discard(f);
  else
    f->finished = true;
  return rc;
}

/* Makes a rename durable.  Best effort: some file systems refuse to sync a
 * directory, and the file itself is already complete and synced. */
static void sync_dir(const char *path) {
  const char *slash = strrchr(path, '/');
  char dir[4096];
  if (!slash)
    snprintf(dir, sizeof dir, ".");
  else if (slash == path)
    snprintf(dir, sizeof dir, "/");
  else
    snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fsync(fd);
  close(fd);
}

int sl__out_commit(sl__out_file *f) {
  if (!f) return SL_OK;
  int rc = sl__out_finish(f);
  if (rc == SL_OK && rename(f->tmp, f->path) != 0) {
    rc = sl_set_error(SL_EIO, "%s: cannot rename %s to %s: %s", f->what, f->tmp,
                      f->path, strerror(errno));
    unlink(f->tmp);
  }
  table_drop(&f->slot);
  if (rc == SL_OK) sync_dir(f->path);
  file_free(f);
  return rc;
}

/* --- a set of files ---------------------------------------------------------
 */
struct sl__out_set {
  char *what;
  char **names;     /* the k final names */
  sl__out_file **f; /* created on first use (sl__out_set_file) */
  uint32_t k;
  char **dirs; /* folders this set made, outermost first */
  _Atomic(char *) **dir_slots;
  uint32_t ndirs;
};

static void set_free(sl__out_set *s) {
  for (uint32_t i = 0; i < s->ndirs; i++) {
    table_drop(&s->dir_slots[i]);
    sl__free(s->dirs[i]);
  }
  sl__free(s->dirs);
  sl__free(s->dir_slots);
  for (uint32_t i = 0; s->names && i < s->k; i++)
    sl__free(s->names[i]);
  SL__FREE(s->names, s->f, s->what, s);
}

void sl__out_set_abort(sl__out_set *s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->k; i++)
    sl__out_abort(s->f[i]);
  /* The folders this run made, innermost first (empty again now). */
  for (uint32_t i = s->ndirs; i-- > 0;)
    rmdir(s->dirs[i]);
  set_free(s);
}

/* Remembers folder `dir`, just made: for abort, and for the handlers. */
static int remember_dir(sl__out_set *s, const char *dir) {
  char **d = sl__realloc(s->dirs, (s->ndirs + 1) * sizeof *d);
  if (d) s->dirs = d;
  _Atomic(char *) **ds = sl__realloc(s->dir_slots, (s->ndirs + 1) * sizeof *ds);
  if (ds) s->dir_slots = ds;
  char *copy = d && ds ? sl__strdup(dir) : NULL;
  _Atomic(char *) *slot = copy ? table_add(&g_dirs, copy) : NULL;
  if (!slot) {
    sl__free(copy);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate", s->what);
  }
  s->dirs[s->ndirs] = copy;
  s->dir_slots[s->ndirs++] = slot;
  return SL_OK;
}

/* Creates the missing folders of `path`'s directory, like mkdir -p. */
static int make_folders(sl__out_set *s, const char *path) {
  const char *slash = strrchr(path, '/');
  if (!slash || slash == path) return SL_OK;
  size_t len = (size_t)(slash - path);
  char *dir = sl__malloc(len + 1);
  SL_RETURN_ERROR_IF(!dir, SL_ENOMEM, "%s: cannot allocate", s->what);
  memcpy(dir, path, len);
  dir[len] = 0;
  struct stat st;
  int rc = SL_OK;
  if (stat(dir, &st) == 0) {
    if (!S_ISDIR(st.st_mode))
      rc = sl_set_error(SL_EIO, "%s: cannot write %s: %s is not a folder",
                        s->what, path, dir);
    sl__free(dir);
    return rc;
  }
  /* Each prefix ending before a '/', then the whole folder. */
  for (size_t i = 1; i <= len && rc == SL_OK; i++) {
    if (i < len && dir[i] != '/') continue;
    char c = dir[i];
    dir[i] = 0;
    if (mkdir(dir, 0777) == 0) {
      rc = remember_dir(s, dir);
      if (rc < 0) rmdir(dir);
    } else if (errno != EEXIST) {
      rc = sl_set_error(SL_EIO, "%s: cannot create folder %s for %s: %s",
                        s->what, dir, path, strerror(errno));
    } else if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
      rc = sl_set_error(SL_EIO, "%s: cannot write %s: %s is not a folder",
                        s->what, path, dir);
    }
    dir[i] = c;
  }
  sl__free(dir);
  return rc;
}

/* Refuses an output name that is one of the inputs (the same file, device
 * and inode, links followed, would be replaced), an existing folder (the
 * rename would fail after others succeeded), or a name given earlier. */
static int check_name(const char *what, const char *const *names, uint32_t i,
                      const char *const *inputs, size_t n) {
  const char *name = names[i];
  for (uint32_t j = 0; j < i; j++)
    SL_RETURN_ERROR_IF(strcmp(names[j], name) == 0, SL_EINVAL,
                       "%s: the output %s is named twice", what, name);
  struct stat o, in;
  if (stat(name, &o) != 0) return SL_OK; /* nothing to replace */
  SL_RETURN_ERROR_IF(S_ISDIR(o.st_mode), SL_EINVAL,
                     "%s: the output %s is a folder", what, name);
  for (size_t j = 0; j < n; j++)
    if (stat(inputs[j], &in) == 0 && in.st_dev == o.st_dev &&
        in.st_ino == o.st_ino)
      return sl_set_error(SL_EINVAL,
                          "%s: the output %s is the input %s (the same "
                          "file): packing would replace it; choose another "
                          "output name",
                          what, name, inputs[j]);
  return SL_OK;
}

int sl__out_set_open(const char *what, const char *const *names, uint32_t k,
                     const char *const *inputs, size_t n_inputs,
                     sl__out_set **setp) {
  *setp = NULL;
  SL_RETURN_ERROR_IF(k == 0, SL_EINVAL, "%s: no output", what);
  for (uint32_t i = 0; i < k; i++) {
    SL_RETURN_ERROR_IF(!names[i] || !*names[i], SL_EINVAL,
                       "%s: no output file name", what);
    SL_FORWARD_IF_ERROR(check_name(what, names, i, inputs, n_inputs));
  }
  sl__out_set *s = sl__calloc(1, sizeof *s);
  if (s) s->f = sl__calloc(k, sizeof *s->f);
  if (s) s->names = sl__calloc(k, sizeof *s->names);
  if (s) s->what = sl__strdup(what);
  bool ok = s && s->f && s->names && s->what;
  if (s) s->k = k;
  for (uint32_t i = 0; ok && i < k; i++)
    ok = (s->names[i] = sl__strdup(names[i])) != NULL;
  if (!ok) {
    if (s) set_free(s);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate %u outputs", what, k);
  }
  int rc = SL_OK;
  for (uint32_t i = 0; i < k && rc == SL_OK; i++)
    rc = make_folders(s, names[i]);
  if (rc < 0) {
    sl__out_set_abort(s);
    return rc;
  }
  *setp = s;
  return SL_OK;
}

sl__out_file *sl__out_set_file(sl__out_set *s, uint32_t i) {
  if (i >= s->k) {
    sl_set_error(SL_EINVAL, "%s: output %u of %u", s->what, i, s->k);
    return NULL;
  }
  if (!s->f[i] && sl__out_open(s->what, s->names[i], &s->f[i]) < 0)
    s->f[i] = NULL;
  return s->f[i];
}

uint64_t sl__out_set_bytes(const sl__out_set *s) {
  uint64_t n = 0;
  for (uint32_t i = 0; s && i < s->k; i++)
    n += sl__out_bytes(s->f[i]);
  return n;
}

/* Renames every finished file, with the catchable asynchronous signals
 * blocked so that none stops the renames half-way. */
static int rename_all(sl__out_set *s) {
  sigset_t all, old;
  sigfillset(&all);
  static const int sync_sigs[] = {SIGSEGV, SIGBUS,  SIGFPE, SIGILL,
                                  SIGTRAP, SIGABRT, SIGSYS};
  for (size_t j = 0; j < sizeof sync_sigs / sizeof *sync_sigs; j++)
    sigdelset(&all, sync_sigs[j]);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  int rc = SL_OK;
  uint32_t i = 0;
  char *failed = NULL;
  for (; rc == SL_OK && i < s->k; i++) {
    char *name = sl__strdup(sl__out_name(s->f[i]));
    rc = sl__out_commit(s->f[i]); /* frees it, also on failure */
    s->f[i] = NULL;
    if (rc < 0)
      failed = name;
    else
      sl__free(name);
  }
  if (rc < 0 && i > 1)
    /* Files [0, i-1) replaced what was under their names: they stay (an
     * error never removes a file that replaced an old one), and their set
     * identity tells readers the set is mixed. */
    rc = sl_wrap_error(rc,
                       "%s: outputs 0..%u of %u were renamed, replacing any "
                       "old files of those names, and the others were not: "
                       "%s and the old files after it are a mixed set, which "
                       "readers refuse by its set identity",
                       s->what, i - 2, s->k, failed ? failed : "the next");
  sl__free(failed);
  for (; i < s->k; i++) {
    sl__out_abort(s->f[i]);
    s->f[i] = NULL;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  return rc;
}

int sl__out_set_finish(sl__out_set *s) {
  int rc = SL_OK;
  for (uint32_t i = 0; rc == SL_OK && i < s->k; i++) {
    /* An output never written is an empty file. */
    sl__out_file *f = sl__out_set_file(s, i);
    rc = f ? sl__out_finish(f) : sl_last_error_code();
    if (rc < 0 && s->k > 1)
      rc = sl_wrap_error(rc, "%s: output %u of %u", s->what, i, s->k);
  }
  return rc;
}

int sl__out_set_commit(sl__out_set *s) {
  if (!s) return SL_OK;
  int rc = sl__out_set_finish(s);
  if (rc < 0) {
    sl__out_set_abort(s); /* nothing was renamed: the old files stay */
    return rc;
  }
  rc = rename_all(s);
  set_free(s);
  return rc;
}

/* --- signals -----------------------------------------------------------------
 */
static volatile sig_atomic_t g_interrupted;

/* Removes every temporary file and ends the process by `sig`. */
static void die_by(int sig) {
  sl__out_remove_temps();
  signal(sig, SIG_DFL);
  raise(sig); /* delivered when the handler returns */
}

/* SIGINT, SIGTERM, SIGHUP: the first asks the pack to stop (it cleans up
 * and exits 128 + sig); a second ends it now. */
static void on_interrupt(int sig) {
  if (g_interrupted)
    die_by(sig);
  else
    g_interrupted = sig;
}

static void on_fatal(int sig) {
  die_by(sig);
}

static const int g_sigs[SL__OUT_NSIGS] = {
    SIGINT,  SIGTERM,   SIGHUP, /* interrupts: the first N_INTERRUPT */
    SIGPIPE, SIGALRM,   SIGXFSZ, SIGQUIT, SIGUSR1,
    SIGUSR2, SIGVTALRM, SIGPROF, SIGXCPU};
#define N_INTERRUPT 3

const volatile sig_atomic_t *sl__out_signals_catch(sl__out_signals *save) {
  g_interrupted = 0;
  for (size_t i = 0; i < SL__OUT_NSIGS; i++) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = i < N_INTERRUPT ? on_interrupt : on_fatal;
    sa.sa_flags = SA_RESTART; /* I/O in progress continues; the flag is
                                 seen between compression blocks */
    sigemptyset(&sa.sa_mask);
    sigaction(g_sigs[i], NULL, &save->old[i]);
    if (save->old[i].sa_handler != SIG_IGN) sigaction(g_sigs[i], &sa, NULL);
  }
  return &g_interrupted;
}

void sl__out_signals_restore(const sl__out_signals *save) {
  for (size_t i = 0; i < SL__OUT_NSIGS; i++)
    sigaction(g_sigs[i], &save->old[i], NULL);
}
