/*
 * source_file.c - the pread-backed byte source, and a fault-injecting
 * wrapper for the tests.  Every pread also goes through the process-wide
 * I/O fault hook (io_faults.h), so the fault tests reach the sources that
 * the readers open by path themselves.
 */
#include "core/internal.h"
#include "transport/http.h"
#include "transport/io_faults.h"
#include "transport/s3.h"
#include "transport/sigbus_guard.h"
#include "transport/source.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct file_source {
  sl__source base;
  int fd;
  _Atomic(unsigned char *) map; /* made by the first file_view; MAP_FAILED:
                                   mmap failed, not tried again */
} file_source;

/* pread, or what the fault hook (io_faults.h) makes of it. */
static ssize_t hooked_pread(int fd, void *p, size_t n, off_t off) {
  switch (sl__io_fault_next(SL__IO_READ, &n)) {
  case SL__IO_EIO:
    errno = EIO;
    return -1;
  case SL__IO_SHRINK:
    return 0;
  default: /* SL__IO_SHORT lowered n */
    return pread(fd, p, n, off);
  }
}

static int file_read_at(sl__source *s, uint64_t off, void *buf, size_t n) {
  file_source *f = (file_source *)s;
  char *p = buf;
  while (n) {
    ssize_t k = hooked_pread(f->fd, p, n, (off_t)off);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0)
      return sl_set_error(SL_EIO,
                          "%s: read of %zu bytes at offset %llu "
                          "failed: %s",
                          s->name, n, (unsigned long long)off, strerror(errno));
    if (k == 0)
      return sl_set_error(SL_EIO,
                          "%s: file shrank: no data at offset %llu "
                          "(it was %llu bytes when opened)",
                          s->name, (unsigned long long)off,
                          (unsigned long long)s->size);
    p += k;
    n -= (size_t)k;
    off += (uint64_t)k;
  }
  return SL_OK;
}

/* The whole file mapped read-only (MAP_PRIVATE), made once: racing
 * threads each map, one publishes, the others unmap theirs. */
static const unsigned char *file_view(sl__source *s) {
  file_source *f = (file_source *)s;
  if (!SL_SIGBUS_GUARD_WORKS || sl__io_fault_armed(SL__IO_READ)) return NULL;
  unsigned char *m = atomic_load_explicit(&f->map, memory_order_acquire);
  if (!m) {
    if (s->size == 0 || s->size > SIZE_MAX) return NULL;
    void *p = mmap(NULL, (size_t)s->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
    unsigned char *none = NULL, *mine = p == MAP_FAILED ? MAP_FAILED : p;
    if (atomic_compare_exchange_strong(&f->map, &none, mine)) {
      m = mine;
    } else {
      if (mine != MAP_FAILED) munmap(mine, (size_t)s->size);
      m = none;
    }
  }
  return m == MAP_FAILED ? NULL : m;
}

static void file_close(sl__source *s) {
  file_source *f = (file_source *)s;
  unsigned char *m = atomic_load(&f->map);
  if (m && m != MAP_FAILED) munmap(m, (size_t)s->size);
  close(f->fd);
  sl__free(s->name);
  sl__free(f);
}

/* What a path that is not a regular file is, for messages. */
static const char *file_kind(mode_t m) {
  if (S_ISDIR(m)) return "is a directory";
  if (S_ISCHR(m)) return "is a character device";
  if (S_ISBLK(m)) return "is a block device";
  if (S_ISFIFO(m)) return "is a FIFO (named pipe)";
  if (S_ISSOCK(m)) return "is a socket";
  return "is of an unknown type";
}

int sl__source_open_file(const char *path, sl__source **out) {
  *out = NULL;
  /* An http(s):// or s3:// URL is read by ranged GETs (source_http.c). */
  if (sl__is_url(path))
    return sl__source_open_url(sl__is_s3(path) ? "s3" : "http", path, out);
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
   * writer forever; it is refused below, and cleared for a regular file. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SL_RETURN_ERROR_IF(fd < 0, SL_EIO, "%s: cannot open: %s", path,
                     strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return sl_set_error(SL_EIO, "%s: cannot stat: %s", path, strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return sl_set_error(SL_EIO, "%s: %s, not a regular file", path,
                        file_kind(st.st_mode));
  }
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0) {
    int e = errno;
    close(fd);
    return sl_set_error(SL_EIO, "%s: cannot clear O_NONBLOCK: %s", path,
                        strerror(e));
  }
  file_source *f = sl__calloc(1, sizeof *f);
  char *name = sl__strdup(path);
  if (!f || !name) {
    sl__free(f);
    sl__free(name);
    close(fd);
    return sl_set_error(SL_ENOMEM, "%s: cannot allocate a source", path);
  }
  f->fd = fd;
  f->base.read_at = file_read_at;
  f->base.close = file_close;
  f->base.view = file_view;
  f->base.size = (uint64_t)st.st_size;
  f->base.name = name;
  f->base.id = sl__file_id_of(&st);
  *out = &f->base;
  return SL_OK;
}

typedef struct faulty_source {
  sl__source base;
  sl__source *inner;
  long fail_at, reads;
  size_t short_step;
  uint64_t shrink_to;
} faulty_source;

static int faulty_read_at(sl__source *s, uint64_t off, void *buf, size_t n) {
  faulty_source *f = (faulty_source *)s;
  if (f->reads++ == f->fail_at)
    return sl_set_error(SL_EIO,
                        "%s: injected I/O error on read %ld at "
                        "offset %llu",
                        s->name, f->fail_at, (unsigned long long)off);
  if (off + n > f->shrink_to)
    return sl_set_error(SL_EIO, "%s: file shrank: no data at offset %llu",
                        s->name, (unsigned long long)f->shrink_to);
  if (!f->short_step) return f->inner->read_at(f->inner, off, buf, n);
  for (size_t done = 0; done < n;) {
    size_t k = SL_MIN(f->short_step, n - done);
    SL_FORWARD_IF_ERROR(
        f->inner->read_at(f->inner, off + done, (char *)buf + done, k));
    done += k;
  }
  return SL_OK;
}

/* The wrapped source's held bytes. */
static uint64_t faulty_held(sl__source *s) {
  return sl__source_held(((faulty_source *)s)->inner);
}

static void faulty_close(sl__source *s) {
  faulty_source *f = (faulty_source *)s;
  sl__source_close(f->inner);
  sl__free(f);
}

int sl__source_faulty(sl__source *inner, long fail_at, size_t short_step,
                      uint64_t shrink_to, sl__source **out) {
  faulty_source *f = sl__calloc(1, sizeof *f);
  if (!f) {
    sl__source_close(inner);
    return sl_set_error(SL_ENOMEM, "cannot allocate a faulty source");
  }
  f->inner = inner;
  f->fail_at = fail_at;
  f->short_step = short_step;
  f->shrink_to = shrink_to;
  f->base.read_at = faulty_read_at;
  f->base.close = faulty_close;
  f->base.held = faulty_held;
  f->base.size = inner->size;
  f->base.name = inner->name;
  f->base.id = inner->id;
  *out = &f->base;
  return SL_OK;
}
