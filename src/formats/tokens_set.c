/*
 * tokens_set.c - the set identity of token shards (tokens_set.h): written
 * by `pack tokens`, checked by every `tokens:` reader over the files it
 * reads together.  Cost: one 1 KiB read per file and a sort of the named
 * files by group, O(n log n).
 */
#include "formats/tokens_set.h"
#include "core/crc32c.h"
#include "core/bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#define ID_OFF 512
#define ID_TAG "sluice-set-v1"
#define ID_BYTES 60 /* tag 16, id 32, size 4, index 4, then the CRC */
#define ID_LEN 32

void sl__tokens_set_put(unsigned char *h, const char *id, uint32_t size,
                        uint32_t index) {
  unsigned char *p = h + ID_OFF;
  memset(p, 0, ID_BYTES + 4);
  memcpy(p, ID_TAG, sizeof ID_TAG);
  memcpy(p + 16, id, ID_LEN);
  sl__put32(p + 48, size);
  sl__put32(p + 52, index);
  sl__put32(p + ID_BYTES, sl__crc32c(0, p, ID_BYTES));
}

typedef struct member {
  size_t pos;       /* in the caller's order */
  const char *path; /* paths[pos] */
  size_t glen;      /* the group: the first glen bytes of the path */
  bool has_id;      /* a sluice identity was found */
  char id[ID_LEN + 1];
  uint32_t size, index;
} member;

/* "PREFIX_NNNNNN.bin" (digits) or "PREFIX_val.bin": the prefix length, or
 * 0 for another name. */
static size_t group_of(const char *path) {
  size_t len = strlen(path);
  if (len < 5 || strcmp(path + len - 4, ".bin") != 0) return 0;
  size_t e = len - 4, b = e;
  while (b > 0 && path[b - 1] >= '0' && path[b - 1] <= '9')
    b--;
  if (b == e) {
    if (e < 4 || memcmp(path + e - 4, "_val", 4) != 0) return 0;
    b = e - 3;
  }
  if (b < 2 || path[b - 1] != '_' || path[b - 2] == '/') return 0;
  return b - 1;
}

/* Reads the identity of `path` into m (has_id false when it has none). */
static int read_member(const char *stage, const char *path, member *m) {
  unsigned char h[ID_OFF + ID_BYTES + 4];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  ssize_t got = fd < 0 ? -1 : pread(fd, h, sizeof h, 0);
  int e = errno;
  if (fd >= 0) close(fd);
  if (got < 0)
    return sl_set_error(SL_EIO, "%s: %s: cannot read: %s", stage, path,
                        strerror(e));
  if ((size_t)got < sizeof h || sl__get32(h) != SL__LLMC_MAGIC) return SL_OK;
  const unsigned char *p = h + ID_OFF;
  if (memcmp(p, ID_TAG, sizeof ID_TAG) != 0) return SL_OK;
  if (sl__get32(p + ID_BYTES) != sl__crc32c(0, p, ID_BYTES))
    return sl_set_error(SL_ECORRUPT,
                        "%s: %s: the shard set identity in the header (bytes "
                        "%d..%d) fails its CRC",
                        stage, path, ID_OFF, ID_OFF + ID_BYTES + 3);
  memcpy(m->id, p + 16, ID_LEN);
  m->id[ID_LEN] = 0;
  m->size = sl__get32(p + 48);
  m->index = sl__get32(p + 52);
  m->has_id = true;
  return SL_OK;
}

static bool same_group(const member *a, const member *b) {
  return a->glen == b->glen && memcmp(a->path, b->path, a->glen) == 0;
}

/* By group, then in the caller's order. */
static int cmp_member(const void *pa, const void *pb) {
  const member *a = pa, *b = pb;
  if (a->glen != b->glen) return a->glen < b->glen ? -1 : 1;
  int c = memcmp(a->path, b->path, a->glen);
  if (c) return c;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

int sl__tokens_set_check(const char *stage, const char *const *paths,
                         size_t n) {
  if (n < 2) return SL_OK;
  member *v = sl__calloc(n, sizeof *v);
  SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "%s: cannot allocate the shard set check",
                     stage);
  size_t k = 0;
  int rc = SL_OK;
  for (size_t i = 0; i < n && rc == SL_OK; i++) {
    size_t glen = group_of(paths[i]);
    if (!glen) continue;
    v[k] = (member){.pos = i, .path = paths[i], .glen = glen};
    rc = read_member(stage, paths[i], &v[k]);
    k++;
  }
  const member *odd = NULL, *ref = NULL;
  if (rc == SL_OK && k > 1) {
    qsort(v, k, sizeof *v, cmp_member);
    /* Within each group, the first disagreement with the group's first
     * file that has an identity (or its first file), in the caller's
     * order. */
    for (size_t first = 0, end; first < k; first = end) {
      const member *keyed = NULL;
      for (end = first; end < k && same_group(&v[first], &v[end]); end++)
        if (!keyed && v[end].has_id) keyed = &v[end];
      if (!keyed) continue; /* no sluice identity: not ours to judge */
      for (size_t i = first; i < end; i++) {
        const member *m = &v[i];
        bool same = m->has_id && strcmp(m->id, keyed->id) == 0 &&
                    m->size == keyed->size;
        if (!same && (!odd || m->pos < odd->pos)) {
          odd = m;
          ref = keyed;
        }
      }
    }
  }
  if (odd && odd->has_id)
    rc = sl_set_error(SL_ECORRUPT,
                      "%s: %s is from another pack run (set %s, file %u of "
                      "%u) than %s (set %s, file %u of %u): a mixed shard "
                      "set (a failed re-pack?)",
                      stage, paths[odd->pos], odd->id, odd->index, odd->size,
                      paths[ref->pos], ref->id, ref->index, ref->size);
  else if (odd)
    rc = sl_set_error(SL_ECORRUPT,
                      "%s: %s has no shard set identity (written by another "
                      "tool or an older sluice?) but %s, named as a shard of "
                      "the same set, is from pack run %s: a mixed shard set "
                      "(a failed re-pack?)",
                      stage, paths[odd->pos], paths[ref->pos], ref->id);
  sl__free(v);
  return rc;
}
