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
#include "io/fmt_map.h"
#include "io/http.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

static void unmap(void *ud, void *data) {
  munmap(data, (size_t)(uintptr_t)ud);
}

/* A URL fetched whole through a URL byte source (source_http.c), for a
 * caller that needs its identity: *id is the one the source makes of the
 * ETag, Last-Modified and size it saw at open (every later response must
 * match them), which a saved state then carries (readers/state.h). */
#define FETCH_STEP ((size_t)64 << 20)

static int fetch_url(const char *stage, const char *url, sl_buffer **out,
                     sl__file_id *id) {
  sl__source *src;
  SL_FORWARD_IF_ERROR(sl__source_open_url(stage, url, &src));
  int rc = SL_OK;
  if (src->size > SIZE_MAX)
    rc = sl_set_error(SL_EUNSUPPORTED, "%s: %s: too large (%llu bytes)",
                      stage, url, (unsigned long long)src->size);
  else if (!(*out = sl_buffer_new((size_t)src->size)))
    rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, url);
  /* In steps, so that the source's block cache never holds more than one
   * step beside the buffer. */
  for (uint64_t off = 0; rc == SL_OK && *out && off < src->size;) {
    size_t n = (size_t)SL_MIN(src->size - off, (uint64_t)FETCH_STEP);
    rc = src->read_at(src, off, (unsigned char *)sl_buffer_data(*out) + off,
                      n);
    off += n;
  }
  if (rc == SL_OK) {
    *id = src->id;
  } else {
    sl_buffer_release(*out);
    *out = NULL;
  }
  sl__source_close(src);
  return rc;
}

int sl__map_file(const char *stage, const char *path, sl_buffer **out,
                 sl__file_id *id) {
  *out = NULL;
  if (sl__is_url(path)) /* fetched whole (http.c) */
    return id ? fetch_url(stage, path, out, id)
              : sl__http_get(stage, path, out);
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

/* Inflates the gzip stream z[0..zn) (or plain bytes, copied) into *out. */
static int gunzip_memory(const char *stage, const char *what,
                         const unsigned char *z, size_t zn, sl_buffer **out) {
  if (zn < 2 || z[0] != 0x1f || z[1] != 0x8b) {
    *out = sl_buffer_new(zn);
    SL_RETURN_ERROR_IF(!*out, SL_ENOMEM, "%s: %s: out of memory", stage, what);
    if (zn) memcpy(sl_buffer_data(*out), z, zn);
    return SL_OK;
  }
  z_stream st;
  memset(&st, 0, sizeof st);
  SL_RETURN_ERROR_IF(inflateInit2(&st, 15 + 32) != Z_OK, SL_ENOMEM,
                     "%s: %s: inflateInit failed", stage, what);
  size_t cap = zn * 4 + 1024, n = 0;
  unsigned char *d = sl__malloc(cap);
  int zrc = Z_OK, rc = SL_OK;
  st.next_in = (Bytef *)(uintptr_t)z;
  st.avail_in = (uInt)(zn > UINT32_MAX ? UINT32_MAX : zn);
  while (d && zrc != Z_STREAM_END) {
    if (n == cap) {
      unsigned char *g = sl__realloc(d, cap * 2);
      if (!g) break;
      d = g;
      cap *= 2;
    }
    size_t room = cap - n > UINT32_MAX ? UINT32_MAX : cap - n;
    st.next_out = d + n;
    st.avail_out = (uInt)room;
    zrc = inflate(&st, Z_NO_FLUSH);
    n += room - st.avail_out;
    if (zrc != Z_OK && zrc != Z_STREAM_END) break;
  }
  inflateEnd(&st);
  if (!d || (zrc != Z_STREAM_END && zrc != Z_OK))
    rc = d ? sl_set_error(SL_ECORRUPT, "%s: %s: gzip: %s", stage, what,
                          st.msg ? st.msg : "a damaged stream")
           : sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, what);
  else if (zrc != Z_STREAM_END)
    rc = sl_set_error(SL_ECORRUPT, "%s: %s: gzip: the stream is cut short",
                      stage, what);
  else if (!(*out = sl_buffer_new(n)))
    rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, what);
  else if (n)
    memcpy(sl_buffer_data(*out), d, n);
  sl__free(d);
  return rc;
}

int sl__read_gzip_file(const char *stage, const char *path, sl_buffer **out) {
  *out = NULL;
  if (sl__is_url(path)) {
    sl_buffer *z;
    SL_FORWARD_IF_ERROR(sl__http_get(stage, path, &z));
    int rc =
        gunzip_memory(stage, path, sl_buffer_data(z), sl_buffer_size(z), out);
    sl_buffer_release(z);
    return rc;
  }
  gzFile g = gzopen(path, "rb");
  SL_RETURN_ERROR_IF(!g, SL_EIO, "%s: %s: %s", stage, path,
                     errno ? strerror(errno) : "cannot open");
  size_t cap = 1 << 16, n = 0;
  unsigned char *data = sl__malloc(cap);
  int rc = data ? SL_OK
                : sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, path);
  while (rc == SL_OK) {
    if (n == cap) {
      unsigned char *d = cap > SIZE_MAX / 2 ? NULL : sl__realloc(data, cap * 2);
      if (!d) {
        rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, path);
        break;
      }
      data = d;
      cap *= 2;
    }
    size_t want = cap - n > (1u << 30) ? (1u << 30) : cap - n;
    int got = gzread(g, data + n, (unsigned)want);
    if (got < 0) {
      int err;
      const char *msg = gzerror(g, &err);
      rc = sl_set_error(err == Z_ERRNO ? SL_EIO : SL_ECORRUPT,
                        "%s: %s: gzip: %s", stage, path,
                        err == Z_ERRNO ? strerror(errno) : msg);
    } else if (got == 0) {
      int err;
      const char *msg = gzerror(g, &err);
      if (err != Z_OK && err != Z_BUF_ERROR)
        rc = sl_set_error(SL_ECORRUPT, "%s: %s: gzip: %s", stage, path, msg);
      else if (err == Z_BUF_ERROR)
        rc = sl_set_error(SL_ECORRUPT, "%s: %s: gzip: the stream is cut short",
                          stage, path);
      break;
    } else {
      n += (size_t)got;
    }
  }
  gzclose(g);
  if (rc == SL_OK) {
    *out = sl_buffer_new(n);
    if (!*out)
      rc = sl_set_error(SL_ENOMEM, "%s: %s: out of memory", stage, path);
    else if (n)
      memcpy(sl_buffer_data(*out), data, n);
  }
  sl__free(data);
  return rc;
}

void sl__path_stem(const char *path, char *buf, size_t size) {
  const char *base = sl__basename(path), *dot = strrchr(base, '.');
  size_t n = dot && dot != base ? (size_t)(dot - base) : strlen(base);
  snprintf(buf, size, "%.*s", (int)n, base);
}
