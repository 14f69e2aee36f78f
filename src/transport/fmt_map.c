/*
 * fmt_map.c - whole files as refcounted buffers (see fmt_map.h).
 *
 * A mapping is MAP_PRIVATE and read-only: a file rewritten in place while
 * mapped shows the new bytes (POSIX leaves that unspecified for private
 * mappings; Linux shares unmodified pages), which is why the readers record
 * the file's identity and their states carry a fingerprint.  A file
 * truncated while mapped raises SIGBUS on access, as with any mmap reader;
 * the text reader's read(2) mode is the answer for files that change.
 */
#include "transport/fmt_map.h"
#include "transport/http.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void unmap(void *ud, void *data) {
  munmap(data, (size_t)(uintptr_t)ud);
}

int sl__map_file(const char *stage, const char *path, sl_buffer **out,
                 sl__file_id *id) {
  *out = NULL;
  if (sl__is_url(path)) { /* fetched whole (http.c) */
    sl__http_ident ident;
    int rc = sl__http_get(stage, path, out, &ident);
    if (id) {
      memset(id, 0, sizeof *id);
      if (rc == SL_OK) sl__http_ident_file_id(&ident, path, id);
    }
    return rc;
  }
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  SL_RETURN_ERROR_IF(fd < 0, SL_EIO, "%s: %s: %s", stage, path,
                     strerror(errno));
  struct stat st;
  int rc = SL_OK;
  if (fstat(fd, &st) != 0)
    rc = sl_set_error(SL_EIO, "%s: %s: %s", stage, path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = sl_set_error(SL_EIO, "%s: %s: not a regular file%s", stage, path,
                      S_ISDIR(st.st_mode) ? " (a directory)" : "");
  if (rc == SL_OK && id) *id = sl__file_id_of(&st);
  if (rc == SL_OK && st.st_size == 0) {
    *out = sl_buffer_new(0);
    if (!*out)
      rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, path);
  } else if (rc == SL_OK) {
    size_t n = (size_t)st.st_size;
    void *p = mmap(NULL, n, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      rc = sl_set_error(SL_EIO, "%s: %s: mmap: %s", stage, path,
                        strerror(errno));
    } else {
      *out = sl_buffer_wrap(p, n, unmap, (void *)(uintptr_t)n);
      if (!*out) {
        munmap(p, n);
        rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, path);
      }
    }
  }
  close(fd);
  return rc;
}

void sl__path_stem(const char *path, char *buf, size_t size) {
  const char *base = sl__basename(path), *dot = strrchr(base, '.');
  size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
  snprintf(buf, size, "%.*s", (int)n, base);
}
