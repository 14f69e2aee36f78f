/*
 * tokens_reader.c - sl_tokens_reader: fixed-length next-token windows over
 * token shards (llm.c's .bin format or a 1-D .npy of u16/u32), the reader
 * behind the `tokens:` tag (docs/TEXT.md).
 *
 * Files.  Every shard is opened and its header checked at construction
 * (magic, version, token count against the file size), so a bad shard is
 * an error naming it before anything is read; the descriptor is closed
 * again.  While a shard is read it is mapped whole (mmap, PROT_READ): a
 * window is cut by converting its T + 1 tokens straight from the mapping
 * into the sample's i32 rows, the only copy.  The mapping of the previous
 * shard is dropped when the next is mapped.
 *
 * Windows and ranks.  Window w of a shard holds tokens [w*T, w*T + T] (T + 1
 * of them: inputs the first T, targets the last T); a shard of N tokens has
 * (N - 1) / T.  They form rounds of world x block windows; only complete
 * rounds are used, so every rank reads as many windows from each shard
 * (llm.c's DataLoader drops the same remainder: its shard_num_samples is
 * (N - 1) / (B*T*W)).  Local window j of rank r in round order g = j /
 * block is window (g*world + r)*block + j % block.
 *
 * Order.  Pass p is the epoch plan of epoch p (io/epoch_plan.h, keys
 * SL__PLAN_TOKENS: a chunk per shard, its rounds the records, planned with
 * world 1 since every rank reads every round, its part of each): without
 * shuffle, shards in the order given and rounds in order; with shuffle the
 * shard order drawn from (seed, p) and the round order of shard s from
 * (seed, p, s) (sl__plan_stream_key, core/rng.h's permutation, drawn when
 * the shard is reached): every rank draws the same permutations, so ranks
 * stay disjoint.  The order is a pure function of (seed, pass), hence the
 * position (pass, k) is all a saved state needs.
 *
 * Batches.  With the batch option a sample is a whole block: {inputs,
 * targets} of [block, T], exactly what sl_batch(block) makes of the block's
 * windows - whose tokens are contiguous, so the block is cut in one go and
 * nothing is copied a second time.
 *
 * Samples come from a buffer pool (the same few buffers go round when the
 * trainer releases its batches): {inputs, targets} are two views of one
 * 8T-byte buffer.
 */
#include "core/rng.h"
#include "formats/npy.h"
#include "formats/tokens_set.h"
#include "formats/epoch_plan.h"
#include "stages/stage.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LLMC_MAGIC 20240520
#define LLMC_HEADER_BYTES (256 * 4)
#define POOL_IDLE 16
#define POOL_IDLE_BYTES ((size_t)64 << 20)

typedef struct tshard {
  size_t data_off; /* byte offset of token 0 */
  size_t esize;    /* 2 (u16) or 4 (u32) */
  uint64_t ntok;
  uint32_t rounds; /* complete rounds of world x block windows */
} tshard;

typedef struct tokens_state {
  tshard *shards;
  char **paths;
  sl__file_id *ids; /* as probed: what a saved state checks */
  size_t n;
  int64_t T;
  int shuffle;
  uint64_t seed;
  int rank, world;
  uint64_t block;
  int batch;      /* 1: each sample is a block, [block, T] */
  uint64_t per;   /* windows per sample: block with batch, else 1 */
  uint64_t total; /* windows this rank reads per pass */
  sl_schema *schema;
  sl__buffer_pool *pool;
  sl__plan_file *pf; /* per shard: one chunk of `rounds` records */
  /* position: unit si of the pass's plan, local window j; pass */
  uint64_t pass;
  sl__plan plan;
  size_t si;
  uint64_t j;
  uint64_t *rperm;    /* round order of the current shard (shuffle) */
  size_t rperm_shard; /* the shard rperm is for; SIZE_MAX: none */
  size_t rperm_cap;
  /* the mapping of one shard */
  size_t mapped; /* shard index, SIZE_MAX: none */
  const unsigned char *map;
  size_t maplen;
} tokens_state;

/* --- headers ------------------------------------------------------------- */

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}

/* A .npy shard's header, by the one .npy header parser (npy.c): a 1-D
 * '<u2' or '<u4' array.  Its byte count is computed there with overflow
 * checks (as if the file could hold 2^64 bytes: probe compares it with the
 * file's size, saying truncated or trailing).  Every refusal is
 * SL_ECORRUPT (docs/TEXT.md), naming the file. */
static int parse_npy(const char *path, const unsigned char *b, size_t got,
                     tshard *s) {
  sl__npy h;
  if (sl__npy_parse_head(path, b, got, UINT64_MAX, &h) < 0)
    return sl_wrap_error(SL_ECORRUPT, "tokens");
  if (h.dtype != SL_U16 && h.dtype != SL_U32)
    return sl_set_error(SL_ECORRUPT,
                        "tokens: %s: .npy dtype '%s' is not '<u2' or '<u4' "
                        "(little-endian uint16 or uint32)",
                        path, sl__npy_descr(h.dtype));
  if (h.rank != 1)
    return sl_set_error(SL_ECORRUPT,
                        "tokens: %s: .npy shape must be 1-D, (N,), got %d "
                        "dimensions",
                        path, h.rank);
  s->esize = sl_dtype_size(h.dtype);
  s->ntok = (uint64_t)h.shape[0];
  s->data_off = (size_t)h.data_off;
  return SL_OK;
}

/* Opens `path`, checks its header and size, fills s and *id. */
static int probe(const char *path, tshard *s, sl__file_id *id) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl_set_error(SL_EIO, "tokens: %s: cannot open: %s", path,
                        strerror(errno));
  struct stat st;
  unsigned char *b = sl__malloc(LLMC_HEADER_BYTES + 65536);
  ssize_t got = -1;
  int rc = SL_OK;
  if (!b)
    rc = sl_set_error(SL_ENOMEM, "tokens: %s: cannot allocate", path);
  else if (fstat(fd, &st) != 0 ||
           (got = pread(fd, b, LLMC_HEADER_BYTES + 65535, 0)) < 0)
    rc = sl_set_error(SL_EIO, "tokens: %s: cannot read: %s", path,
                      strerror(errno));
  close(fd);
  if (rc < 0) {
    sl__free(b);
    return rc;
  }
  if (got >= 6 && memcmp(b, "\x93NUMPY", 6) == 0) {
    rc = parse_npy(path, b, (size_t)got, s);
  } else if (got < LLMC_HEADER_BYTES) {
    rc = sl_set_error(SL_ECORRUPT,
                      "tokens: %s: truncated header: %zd bytes, llm.c's "
                      "header is %d",
                      path, got, LLMC_HEADER_BYTES);
  } else if (le32(b) != LLMC_MAGIC) {
    rc = sl_set_error(SL_ECORRUPT,
                      "tokens: %s: bad magic %u (llm.c's token shards start "
                      "with %d; .npy files with \\x93NUMPY)",
                      path, le32(b), LLMC_MAGIC);
  } else if (le32(b + 4) != 1) {
    rc = sl_set_error(SL_ECORRUPT,
                      "tokens: %s: header version %u, expected 1 (uint16 "
                      "tokens)",
                      path, le32(b + 4));
  } else {
    s->esize = 2;
    s->data_off = LLMC_HEADER_BYTES;
    s->ntok = le32(b + 8);
  }
  sl__free(b);
  if (rc < 0) return rc;
  *id = sl__file_id_of(&st);
  /* Neither sum can wrap: a .npy's were checked not to (npy.c), an llm.c
   * count is 32 bits. */
  uint64_t want = (uint64_t)s->data_off + s->ntok * s->esize;
  if ((uint64_t)st.st_size != want)
    return sl_set_error(
        SL_ECORRUPT,
        "tokens: %s: the header declares %llu tokens (%llu "
        "bytes with the header) but the file has %llu "
        "bytes (%s)",
        path, (unsigned long long)s->ntok, (unsigned long long)want,
        (unsigned long long)st.st_size,
        (uint64_t)st.st_size < want ? "truncated" : "trailing bytes");
  return SL_OK;
}

/* --- mapping ------------------------------------------------------------- */

static void unmap(tokens_state *s) {
  if (s->map) munmap((void *)s->map, s->maplen);
  s->map = NULL;
  s->maplen = 0;
  s->mapped = SIZE_MAX;
}

static int map_shard(tokens_state *s, size_t i) {
  if (s->mapped == i) return SL_OK;
  unmap(s);
  const tshard *sh = &s->shards[i];
  const char *path = s->paths[i];
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return sl_set_error(SL_EIO, "tokens: %s: cannot open: %s", path,
                        strerror(errno));
  struct stat st;
  size_t len = sh->data_off + (size_t)sh->ntok * sh->esize;
  int rc = SL_OK;
  sl__file_id now = {0};
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != len)
    rc = sl_set_error(SL_ECORRUPT,
                      "tokens: %s: the file changed size since it was "
                      "opened (%llu bytes, expected %zu)",
                      path, (unsigned long long)st.st_size, len);
  else if ((now = sl__file_id_of(&st)), !sl__file_id_equal(&now, &s->ids[i]))
    rc = sl_set_error(SL_ECORRUPT,
                      "tokens: %s: the file was replaced or rewritten since "
                      "it was opened (inode or modification time differs)",
                      path);
  void *m = MAP_FAILED;
  if (rc == SL_OK) {
    m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
      rc = sl_set_error(SL_EIO, "tokens: %s: mmap: %s", path, strerror(errno));
  }
  close(fd);
  if (rc < 0) return rc;
  madvise(m, len, s->shuffle ? MADV_RANDOM : MADV_SEQUENTIAL);
  s->map = m;
  s->maplen = len;
  s->mapped = i;
  return SL_OK;
}

/* --- order --------------------------------------------------------------- */

/* The plan of pass `pass` (the shard order). */
static int order_pass(tokens_state *s, uint64_t pass) {
  sl__plan_params p = {s->seed, pass, s->shuffle != 0, 1,
                       0,       1,    SL_SHARD_UNEVEN, SL__PLAN_TOKENS};
  sl__plan_free(&s->plan);
  return sl__plan_build(s->pf, s->n, &p, &s->plan);
}

/* The round order of shard i in this pass, when shuffling. */
static int round_perm(tokens_state *s, size_t i) {
  if (!s->shuffle || s->rperm_shard == i) return SL_OK;
  uint64_t r = s->shards[i].rounds;
  if (r > s->rperm_cap) {
    SL_RETURN_ERROR_IF(r > SIZE_MAX / sizeof *s->rperm, SL_ENOMEM,
                       "tokens: %s: too many windows", s->paths[i]);
    uint64_t *p = sl__realloc(s->rperm, (size_t)r * sizeof *p);
    SL_RETURN_ERROR_IF(!p, SL_ENOMEM,
                       "tokens: cannot allocate the order of %llu rounds",
                       (unsigned long long)r);
    s->rperm = p;
    s->rperm_cap = (size_t)r;
  }
  sl__permute_u64(sl__plan_stream_key(SL__PLAN_TOKENS, s->seed, s->pass, i),
                  s->rperm, (size_t)r);
  s->rperm_shard = i;
  return SL_OK;
}

/* --- the reader ---------------------------------------------------------- */

/* Tokens [w*T, w*T + n] of shard sh (n + 1 of them) as n inputs and n
 * targets: one window (n = T), or the `block` consecutive windows of a
 * block, which are contiguous (n = block x T). */
static void cut(const tokens_state *s, const tshard *sh, uint64_t w, size_t n,
                int32_t *restrict in, int32_t *restrict tg) {
  const size_t T = n;
  const unsigned char *p =
      s->map + sh->data_off + (size_t)w * (size_t)s->T * sh->esize;
  /* Aligned data (llm.c's shards: a 1024-byte header) is read as an array:
   * two plain loops the compiler vectorises.  A .npy header may leave it
   * unaligned: then element by element through memcpy. */
  if (sh->esize == 2 && ((uintptr_t)p & 1) == 0) {
    const uint16_t *q = (const uint16_t *)(const void *)p;
    size_t i = 0;
    /* Runs of 16 of a fixed count: -O2's cheap vectoriser widens them
     * (it leaves a loop of unknown count scalar: 3x slower). */
    for (; i + 16 <= T; i += 16) {
      for (size_t j = 0; j < 16; j++)
        in[i + j] = q[i + j];
      for (size_t j = 0; j < 16; j++)
        tg[i + j] = q[i + j + 1];
    }
    for (; i < T; i++) {
      in[i] = q[i];
      tg[i] = q[i + 1];
    }
  } else if (sh->esize == 4 && ((uintptr_t)p & 3) == 0) {
    const uint32_t *q = (const uint32_t *)(const void *)p;
    for (size_t i = 0; i < T; i++)
      in[i] = (int32_t)q[i];
    for (size_t i = 0; i < T; i++)
      tg[i] = (int32_t)q[i + 1];
  } else {
    for (size_t i = 0; i <= T; i++) {
      int32_t v;
      if (sh->esize == 2) {
        uint16_t x;
        memcpy(&x, p + 2 * i, 2);
        v = x;
      } else {
        uint32_t x;
        memcpy(&x, p + 4 * i, 4);
        v = (int32_t)x;
      }
      if (i < T) in[i] = v;
      if (i > 0) tg[i - 1] = v;
    }
  }
}

static int tokens_next(void *st, sl_sample **out) {
  tokens_state *s = st;
  while (s->si < s->plan.nunits &&
         s->j >= (uint64_t)s->plan.units[s->si].count * s->block) {
    s->si++;
    s->j = 0;
  }
  if (s->si >= s->plan.nunits) return SL_EOF;
  size_t i = s->plan.units[s->si].file;
  const tshard *sh = &s->shards[i];
  SL_FORWARD_IF_ERROR(map_shard(s, i));
  SL_FORWARD_IF_ERROR(round_perm(s, i));
  uint64_t g = s->j / s->block, b = s->j % s->block;
  if (s->shuffle) g = s->rperm[g];
  uint64_t w = (g * (uint64_t)s->world + (uint64_t)s->rank) * s->block + b;

  /* one window, or (batch) the whole block: [block, T] */
  size_t n = (size_t)s->T * (size_t)s->per;
  sl_buffer *buf = sl__buffer_pool_get(s->pool, 8 * n);
  SL_RETURN_ERROR_IF(!buf, SL_ENOMEM, "tokens: cannot allocate a window");
  int32_t *in = sl_buffer_data(buf), *tg = in + n;
  cut(s, sh, w, n, in, tg);
  sl_sample *o = sl_sample_new(s->schema);
  int64_t shape[2] = {(int64_t)s->per, s->T};
  int rank = s->batch ? 2 : 1;
  const int64_t *dims = s->batch ? shape : shape + 1;
  int rc = o ? SL_OK : sl_set_error(SL_ENOMEM, "tokens: cannot allocate");
  sl_tensor t;
  if (rc == SL_OK) rc = sl_tensor_view(&t, SL_I32, rank, dims, buf, 0);
  if (rc == SL_OK) rc = sl_sample_set_move(o, 0, &t);
  if (rc == SL_OK) rc = sl_tensor_view(&t, SL_I32, rank, dims, buf, 4 * n);
  if (rc == SL_OK) rc = sl_sample_set_move(o, 1, &t);
  sl_buffer_release(buf);
  if (rc < 0) {
    sl_sample_release(o);
    return rc;
  }
  s->j += s->per;
  *out = o;
  return SL_OK;
}

static int start_pass(tokens_state *s, uint64_t pass) {
  s->pass = pass;
  s->si = 0;
  s->j = 0;
  s->rperm_shard = SIZE_MAX;
  return order_pass(s, pass);
}

static int tokens_reset(void *st) {
  tokens_state *s = st;
  return start_pass(s, s->pass + 1);
}

static void tokens_destroy(void *st) {
  tokens_state *s = st;
  if (!s) return;
  unmap(s);
  for (size_t i = 0; i < s->n; i++)
    sl__free(s->paths ? s->paths[i] : NULL);
  SL__FREE(s->paths, s->ids, s->shards, s->pf);
  sl__plan_free(&s->plan);
  sl__free(s->rperm);
  sl__buffer_pool_release(s->pool);
  sl__stage_free(s, NULL, s->schema);
}

static int tokens_length(const sl_reader *r, void *st, uint64_t *n) {
  const tokens_state *s = st;
  *n = s->total / s->per;
  return SL_OK;
}

/* The record: the shards' identities (sl__state_put_file_ids); with them
 * the position (pass, k) is all: the order is a function of (seed, pass). */
static int tokens_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                       sl__state_out *w) {
  const tokens_state *s = st;
  return sl__state_put_file_ids(w, s->ids, s->n);
}

/* The shards now against the record: SL_ECORRUPT naming a changed one. */
static int tokens_check(const sl_reader *r, void *st, sl__state_in *in) {
  const tokens_state *s = st;
  return sl__state_check_file_ids(in, "tokens", (const char *const *)s->paths,
                                  s->ids, s->n);
}

static int tokens_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                          sl__state_in *in) {
  tokens_state *s = st;
  SL_FORWARD_IF_ERROR(tokens_check(r, st, in));
  SL_RETURN_ERROR_IF(k > s->total / s->per, SL_ECORRUPT,
                     "restore: tokens: position %llu is past the end of the "
                     "pass (%llu windows)",
                     (unsigned long long)k,
                     (unsigned long long)(s->total / s->per));
  k *= s->per; /* in windows */
  SL_FORWARD_IF_ERROR(start_pass(s, pass));
  while (s->si < s->plan.nunits) {
    uint64_t c = (uint64_t)s->plan.units[s->si].count * s->block;
    if (k < c) break;
    k -= c;
    s->si++;
  }
  s->j = k;
  return SL_OK;
}

static void tokens_identity(const sl_reader *r, void *st, char *buf,
                            size_t cap) {
  const tokens_state *s = st;
  snprintf(buf, cap,
           "files=%zu windows=%llu T=%lld shuffle=%d seed=%llu rank=%d "
           "world=%d block=%llu batch=%d",
           s->n, (unsigned long long)s->total, (long long)s->T, s->shuffle,
           (unsigned long long)s->seed, s->rank, s->world,
           (unsigned long long)s->block, s->batch);
}

static const sl__stage_ops tokens_ops = {
    .name = "tokens",
    .next = tokens_next,
    .reset = tokens_reset,
    .destroy = tokens_destroy,
    .length = tokens_length,
    .save = tokens_save,
    .restore = tokens_restore,
    .identity = tokens_identity,
    .check = tokens_check,
};

static int make_schema(sl_schema **out, int64_t T, int64_t B, int batch) {
  sl_schema *s = sl_schema_new();
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "tokens: cannot allocate the schema");
  int64_t dims[2] = {B, T};
  int rank = batch ? 2 : 1;
  const int64_t *d = batch ? dims : dims + 1;
  if (sl_schema_add(s, "inputs", SL_I32, rank, d) < 0 ||
      sl_schema_add(s, "targets", SL_I32, rank, d) < 0) {
    sl_schema_release(s);
    return sl_wrap_error(sl_last_error_code(), "tokens: schema");
  }
  *out = s;
  return SL_OK;
}

int sl_tokens_reader(const char *const *paths, size_t n,
                     const sl_tokens_opts *opts, sl_reader **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "tokens: NULL out pointer");
  *out = NULL;
  sl_tokens_opts o = SL_TOKENS_OPTS_INIT;
  if (opts)
    SL_FORWARD_IF_ERROR(sl__opts_copy("sl_tokens_opts", &o, sizeof o, opts));
  SL_RETURN_ERROR_IF(!paths || n == 0, SL_EINVAL, "tokens: no files");
  SL_RETURN_ERROR_IF(o.seq_len < 1 || o.seq_len > (INT32_MAX / 8), SL_EINVAL,
                     "tokens: seq_len must be between 1 and %d, got %lld",
                     INT32_MAX / 8, (long long)o.seq_len);
  if (o.world == 0) o.world = 1;
  SL_RETURN_ERROR_IF(o.world < 1 || o.rank < 0 || o.rank >= o.world, SL_EINVAL,
                     "tokens: rank %d is not in [0, world %d)", o.rank,
                     o.world);
  if (o.block == 0) o.block = 1;
  SL_RETURN_ERROR_IF(
      o.batch && (o.block > (uint64_t)INT32_MAX / 8 ||
                  (uint64_t)o.seq_len * o.block > (uint64_t)INT32_MAX / 8),
      SL_EINVAL,
      "tokens: a block of %llu windows of %lld is "
      "too large to batch",
      (unsigned long long)o.block, (long long)o.seq_len);
  tokens_state *s = sl__calloc(1, sizeof *s);
  SL_RETURN_ERROR_IF(!s, SL_ENOMEM, "tokens: cannot allocate");
  s->T = o.seq_len;
  s->shuffle = o.shuffle != 0;
  s->seed = o.seed;
  s->rank = o.rank;
  s->world = o.world;
  s->block = o.block;
  s->batch = o.batch != 0;
  s->per = s->batch ? s->block : 1;
  s->mapped = SIZE_MAX;
  s->shards = sl__calloc(n, sizeof *s->shards);
  s->paths = sl__calloc(n, sizeof *s->paths);
  s->ids = sl__calloc(n, sizeof *s->ids);
  s->pf = sl__calloc(n, sizeof *s->pf);
  s->pool = sl__buffer_pool_new(POOL_IDLE, POOL_IDLE_BYTES);
  int rc = (!s->shards || !s->paths || !s->ids || !s->pf || !s->pool)
               ? sl_set_error(SL_ENOMEM, "tokens: cannot allocate %zu files", n)
               : make_schema(&s->schema, s->T, (int64_t)s->block, s->batch);
  uint64_t per_round = (uint64_t)s->world * s->block;
  for (size_t i = 0; i < n && rc == SL_OK; i++) {
    if (!paths[i]) {
      rc = sl_set_error(SL_EINVAL, "tokens: path %zu is NULL", i);
      break;
    }
    s->n = i + 1;
    tshard *sh = &s->shards[i];
    if (!(s->paths[i] = sl__strdup(paths[i]))) {
      rc = sl_set_error(SL_ENOMEM, "tokens: cannot allocate");
      break;
    }
    rc = probe(paths[i], sh, &s->ids[i]);
    if (rc < 0) break;
    uint64_t windows = sh->ntok ? (sh->ntok - 1) / (uint64_t)s->T : 0;
    if (windows / per_round > UINT32_MAX) {
      rc = sl_set_error(SL_EINVAL,
                        "tokens: %s: more than 2^32 - 1 rounds "
                        "of %llu windows",
                        paths[i], (unsigned long long)per_round);
      break;
    }
    sh->rounds = (uint32_t)(windows / per_round);
    s->pf[i] = (sl__plan_file){1, &sh->rounds};
    s->total += (uint64_t)sh->rounds * s->block;
  }
  /* Files of two pack runs mixed under one set's names (tokens_set.h). */
  if (rc == SL_OK) rc = sl__tokens_set_check("tokens", paths, n);
  if (rc == SL_OK) rc = start_pass(s, 0);
  if (rc < 0) {
    tokens_destroy(s);
    return rc;
  }
  sl_schema *schema = sl_schema_retain(s->schema);
  rc = sl__stage_new(&tokens_ops, s, schema, NULL, 0, NULL, out);
  sl_schema_release(schema);
  return rc;
}
