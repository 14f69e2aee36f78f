/*
 * shard_set.c - refusing a mixed shard set.
 *
 * `sluice pack --shards K` records in every shard the run's set identity
 * (sluice.set_id: 32 lowercase hex digits, the same in all K shards), K
 * (sluice.set_size) and the shard's 0-based index (sluice.set_index), and
 * names shard i "PREFIX-%05u-of-%05u.slr".  A re-pack that failed half way
 * could leave new shards beside old ones under the same names: a set that
 * looks complete and verifies, but mixes two data sets.  The readers refuse
 * it by this rule, over the files one reader (or one `verify`) reads:
 *
 *   - Only files of a set of K >= 2 take part.  Files without the keys
 *     (older writers, other tools) and sets of one (every file the writer
 *     makes outside a sharded pack) are accepted as before, except a file
 *     named like a shard of a group that has set members (below): that is
 *     an older shard left beside newer ones.
 *   - A member named "PREFIX-N-of-M.slr" (N, M decimal) belongs to the group
 *     PREFIX (its directory and name without "-N-of-M.slr"); its name must
 *     agree with what it records (N = index, M = K), else it was renamed.
 *     A member not named that way belongs to the group of unnamed members
 *     of the same K.
 *   - Within a group every member must carry the same set id and K.  The
 *     first file of the group in the reader's order is the reference; the
 *     first file (in that order) that disagrees with its group's reference
 *     is named in the error.
 *
 * So a subset of one set (a rank reading some shards) is fine, and so are
 * two sets of different prefixes (train and validation) read together.
 * Cost: O(n log n) (a sort of the members by group), no I/O.
 */
#include "open/shard_set.h"

#include <stdlib.h>

#define KEY_ID "sluice.set_id"
#define KEY_SIZE "sluice.set_size"
#define KEY_INDEX "sluice.set_index"
#define ID_LEN 32

typedef struct member {
  size_t pos;        /* in the caller's order */
  const char *group; /* paths[pos]: its first glen bytes name the group */
  size_t glen;       /* 0: unnamed, grouped by size */
  const char *id;    /* NULL: a keyless file named like a shard */
  uint32_t size, index;
} member;

/* A decimal number of 1..10 digits that fits in 32 bits, the whole of s. */
static bool parse_u32(const char *s, size_t len, uint32_t *out) {
  if (len == 0 || len > 10) return false;
  uint64_t v = 0;
  for (size_t i = 0; i < len; i++) {
    if (s[i] < '0' || s[i] > '9') return false;
    v = v * 10 + (uint64_t)(s[i] - '0');
  }
  if (v > UINT32_MAX) return false;
  *out = (uint32_t)v;
  return true;
}

/* "PREFIX-N-of-M.slr": the prefix length, N and M; false when the name has
 * another form. */
static bool shard_name(const char *path, size_t *plen, uint32_t *n,
                       uint32_t *m) {
  size_t len = strlen(path);
  static const char ext[] = ".slr";
  if (len < 4 || strcmp(path + len - 4, ext) != 0) return false;
  size_t e = len - 4, b = e; /* M is [b, e) */
  while (b > 0 && path[b - 1] >= '0' && path[b - 1] <= '9')
    b--;
  if (b < 4 || memcmp(path + b - 4, "-of-", 4) != 0) return false;
  if (!parse_u32(path + b, e - b, m)) return false;
  size_t ne = b - 4, nb = ne;
  while (nb > 0 && path[nb - 1] >= '0' && path[nb - 1] <= '9')
    nb--;
  if (nb < 1 || path[nb - 1] != '-' || !parse_u32(path + nb, ne - nb, n))
    return false;
  *plen = nb - 1;
  return *plen > 0 && path[*plen - 1] != '/';
}

static int corrupt_key(const char *stage, const char *path, const char *key,
                       const char *value, const char *want) {
  return sl_set_error(SL_ECORRUPT, "%s%s%s: metadata %s is '%s', not %s",
                      stage ? stage : "", stage ? ": " : "", path, key,
                      value ? value : "(missing)", want);
}

/* Reads file i's set keys into *m.  1: a member of a set of K >= 2; 0: not
 * a member; < 0: malformed keys (SL_ECORRUPT). */
static int read_member(const char *stage, const char *path,
                       const sl_schema *s, member *m) {
  const char *id = s ? sl_schema_meta(s, KEY_ID) : NULL;
  if (!id) return 0;
  bool hex = strlen(id) == ID_LEN;
  for (size_t i = 0; hex && i < ID_LEN; i++)
    hex = (id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f');
  if (!hex)
    return corrupt_key(stage, path, KEY_ID, id, "32 lowercase hex digits");
  const char *size = sl_schema_meta(s, KEY_SIZE);
  const char *index = sl_schema_meta(s, KEY_INDEX);
  if (!size || !parse_u32(size, strlen(size), &m->size) || m->size == 0)
    return corrupt_key(stage, path, KEY_SIZE, size, "a set size >= 1");
  if (!index || !parse_u32(index, strlen(index), &m->index) ||
      m->index >= m->size)
    return corrupt_key(stage, path, KEY_INDEX, index,
                       "a shard index below the set size");
  m->id = id;
  return m->size >= 2;
}

/* Members of one group are adjacent once sorted, in the caller's order. */
static int cmp_group(const member *a, const member *b) {
  if (a->glen != b->glen) return a->glen < b->glen ? -1 : 1;
  int c = a->glen ? memcmp(a->group, b->group, a->glen) : 0;
  if (c) return c;
  if (!a->glen && a->size != b->size) return a->size < b->size ? -1 : 1;
  return 0;
}

static int cmp_member(const void *pa, const void *pb) {
  const member *a = pa, *b = pb;
  int c = cmp_group(a, b);
  if (c) return c;
  return a->pos < b->pos ? -1 : a->pos > b->pos;
}

int sl__shard_set_check(const char *stage, const char *const *paths,
                        const sl_schema *const *schemas, size_t n) {
  if (n < 2) return SL_OK;
  member *v = sl__malloc(n * sizeof *v);
  SL_RETURN_ERROR_IF(!v, SL_ENOMEM, "%s%scannot allocate the shard set check",
                     stage ? stage : "", stage ? ": " : "");
  size_t k = 0;
  bool named_members = false;
  int rc = SL_OK;
  /* Members, and keyless files named like shards (kept for now). */
  for (size_t i = 0; i < n && rc == SL_OK; i++) {
    member m = {i, paths[i], 0, NULL, 0, 0};
    rc = read_member(stage, paths[i], schemas[i], &m);
    if (rc < 0) break;
    bool keyless = !schemas[i] || !sl_schema_meta(schemas[i], KEY_ID);
    if (rc == 0 && !keyless) continue; /* a set of one */
    rc = SL_OK;
    uint32_t nn, mm;
    size_t plen;
    if (shard_name(paths[i], &plen, &nn, &mm)) {
      m.glen = plen;
      if (!keyless && (nn != m.index || mm != m.size)) {
        rc = sl_set_error(SL_ECORRUPT,
                          "%s%s%s is named shard %u of %u, but it records "
                          "shard %u of %u of set %s (renamed?)",
                          stage ? stage : "", stage ? ": " : "", paths[i], nn,
                          mm, m.index, m.size, m.id);
        break;
      }
      if (!keyless) named_members = true;
    } else if (keyless) {
      continue;
    }
    v[k++] = m;
  }
  if (rc == SL_OK && !named_members) { /* drop the keyless: nothing to mix */
    size_t j = 0;
    for (size_t i = 0; i < k; i++)
      if (v[i].id) v[j++] = v[i];
    k = j;
  }
  /* The first disagreement, by the caller's order. */
  const member *odd = NULL, *ref = NULL;
  if (rc == SL_OK && k > 1) {
    qsort(v, k, sizeof *v, cmp_member);
    size_t first = 0;
    for (size_t i = 1; i < k; i++) {
      if (cmp_group(&v[first], &v[i]) != 0) {
        first = i; /* a new group */
        continue;
      }
      const member *a = &v[first], *b = &v[i];
      bool same = a->id && b->id && strcmp(a->id, b->id) == 0 &&
                  a->size == b->size;
      if (!a->id && !b->id) same = true; /* two keyless: not our business */
      if (!same && (!odd || b->pos < odd->pos)) {
        odd = b;
        ref = a;
      }
    }
  }
  if (odd) {
    const char *p = stage ? stage : "", *sep = stage ? ": " : "";
    if (odd->id && ref->id)
      rc = sl_set_error(SL_ECORRUPT,
                        "%s%s%s is from another pack run (set %s, shard %u of "
                        "%u) than %s (set %s, shard %u of %u): a mixed shard "
                        "set (a failed re-pack?)",
                        p, sep, paths[odd->pos], odd->id, odd->index,
                        odd->size, paths[ref->pos], ref->id, ref->index,
                        ref->size);
    else {
      const member *keyed = odd->id ? odd : ref, *old = odd->id ? ref : odd;
      rc = sl_set_error(SL_ECORRUPT,
                        "%s%s%s has no shard set identity (written by an "
                        "older sluice?) but %s, named as a shard of the same "
                        "set, is from pack run %s: a mixed shard set (a "
                        "failed re-pack?)",
                        p, sep, paths[old->pos], paths[keyed->pos], keyed->id);
    }
  }
  sl__free(v);
  return rc;
}
