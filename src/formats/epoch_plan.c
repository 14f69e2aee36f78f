/*
 * epoch_plan.c - the epoch plan: for (files, seed, epoch, shuffle, window,
 * rank, world, remainder policy), the ordered list of work units one rank
 * reads.  Everything here is a pure function of its arguments, so every rank
 * computes the same global sequence without talking to the others, and a
 * plan is the same for any number of reader threads.
 *
 * Definition (docs/DATA.md has it with examples):
 *
 *   1. Chunks.  The chunks of all files are numbered in file order, then
 *      chunk order: C chunks, chunk k holding n_k records.
 *   2. Chunk order.  Without shuffle, chunk k is read k-th.  With shuffle,
 *      the order is a Fisher-Yates permutation pi of [0, C) drawn with the
 *      key of stream 0 (below): pi[i] is the chunk read i-th.
 *   3. Windows.  With shuffle, window w is the permuted chunks
 *      pi[w*W .. min((w+1)*W, C)) (W = window); its records, M_w of them,
 *      taken chunk after chunk in that order, are reordered by the
 *      Fisher-Yates permutation sigma_w of [0, M_w) drawn with the key of
 *      stream w + 1: output offset j of the window is input record
 *      sigma_w[j].  Without shuffle nothing is reordered (W plays no part).
 *   4. The epoch sequence is the windows' outputs one after another: N
 *      records in all, positions 0 .. N-1.
 *   5. Shares.  Rank r reads the positions of sl__shard_segments: UNEVEN
 *      [floor(r*N/world), floor((r+1)*N/world)); DROP [r*q, (r+1)*q) with
 *      q = floor(N/world); PAD [r*Q, (r+1)*Q) with Q = ceil(N/world) of the
 *      sequence extended by position p >= N meaning position (p - N) mod N.
 *
 * Random numbers.  f is the splitmix64 finalizer, g = 0x9E3779B97F4A7C15 and
 * sm(x) = f(x + g).  The epoch key is K = sm(seed ^ sm(epoch)); stream i's
 * key is f(K + (i + 1) * g), the i-th output of a splitmix64 generator
 * started at K (counter-based: any window's key is computed directly).  A
 * permutation with key k runs xoshiro256** seeded with s[j] = f(k + (j+1)*g),
 * j = 0..3, and draws j = u(i + 1) for i = n-1 down to 1, swapping a[i] and
 * a[j], where u(m) is Lemire's unbiased multiply-shift draw in [0, m).
 *
 * Units.  A rank's share is a list of segments of the sequence; each segment
 * meets consecutive windows.  The part of a segment inside one window is a
 * *group*: its records come from some of the window's chunks.  Each chunk
 * contributes one unit, holding the chunk's record numbers that the group
 * needs, sorted by output position, and each one's position (slot) within
 * the group; a reader decodes each chunk once and scatters its records into
 * the group's output.  A group of one unit needs no slots: its records are
 * already in output order (always the case without shuffle, or with a
 * window of one chunk).  Units are listed group after group, and within a
 * group in window order, so a reader that processes units in list order
 * reads chunks in the permuted order (good locality: one decode per chunk
 * per group).
 *
 * Key schemes (sl__plan_keys): each format keeps the order its tests pin.
 * SLR is the above.  WDS (a chunk per tar shard, samples as records) draws
 * the chunk order with key seed ^ f(epoch + 0x5EED) and never reorders
 * records.  TOKENS (a chunk per token shard, rounds as records, planned
 * with world 1: every rank reads every round, its part of each) draws the
 * chunk order with key seed ^ sm(epoch) ^ f(3 (g - 1) + 1) and keeps the
 * records in order; its reader orders shard s's rounds by the permutation
 * of key seed ^ sm(epoch) ^ f(3 (s + g) + 1) (sl__plan_stream_key).
 *
 * Cost: O(C) for the chunk order and O(R + M) for a rank's R records and
 * the windows it meets; memory: the units, plus two 32-bit words per record
 * when shuffling (record numbers and slots).
 */
#include "formats/epoch_plan.h"
#include "core/rng.h"

#include <stdlib.h>

/* --- random numbers --------------------------------------------------------
 */

/* sm(x) = f(x + g): the output of a splitmix64 generator at state x. */
static uint64_t sm(uint64_t x) {
  return sl__splitmix64_mix(x + SL__RNG_GOLDEN);
}

uint64_t sl__plan_key(uint64_t seed, uint64_t epoch, uint64_t window) {
  uint64_t k = sm(seed ^ sm(epoch));
  uint64_t stream = window == UINT64_MAX ? 0 : window + 1;
  return sl__splitmix64_mix(k + (stream + 1) * SL__RNG_GOLDEN);
}

uint64_t sl__plan_stream_key(sl__plan_keys keys, uint64_t seed, uint64_t epoch,
                             uint64_t stream) {
  if (keys == SL__PLAN_SLR) return sl__plan_key(seed, epoch, stream);
  if (keys == SL__PLAN_WDS) return seed ^ sl__splitmix64_mix(epoch + 0x5EED);
  return seed ^ sm(epoch) ^
         sl__splitmix64_mix((stream + SL__RNG_GOLDEN) * 3 + 1);
}

void sl__plan_permute(uint64_t key, uint32_t *a, size_t n) {
  sl__permute_u32(key, a, n);
}

/* --- the plan ---------------------------------------------------------------
 */

/* Scratch space of one build, freed at its end. */
typedef struct build {
  const sl__plan_params *p;
  const uint64_t *segs; /* explicit segments, or NULL: the rank's share */
  size_t nsegs;
  sl__plan *plan;
  size_t C;
  uint32_t *cfile; /* [C] file of global chunk k */
  uint64_t *cidx;  /* [C] chunk number within its file */
  uint32_t *order; /* [C] order[i] = the global chunk read i-th */
  uint64_t *cum;   /* [C+1] first sequence position of the i-th chunk read */
  uint32_t W;      /* effective window: p->window with shuffle, else 1 */
  uint32_t *sigma; /* a window's record permutation */
  size_t sigma_cap;
  uint32_t *wchunk; /* per group record: index of its chunk in the window */
  uint32_t *wrec;   /* per group record: its record number in that chunk */
  size_t wchunk_cap, wrec_cap;
  uint32_t *cnt; /* [W] records each window chunk gives the group */
  size_t cap_units, cap_groups;
} build;

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return SL_OK;
  size_t c = *cap ? *cap : 16;
  while (c < need)
    c *= 2;
  void *q = sl__realloc(*p, c * elem);
  SL_RETURN_ERROR_IF(!q, SL_ENOMEM, "plan: cannot allocate %zu entries", c);
  *p = q;
  *cap = c;
  return SL_OK;
}

static int add_group(build *b, size_t first_unit, size_t nunits,
                     uint64_t records) {
  sl__plan *pl = b->plan;
  SL_FORWARD_IF_ERROR(grow((void **)&pl->groups, &b->cap_groups,
                           pl->ngroups + 1, sizeof *pl->groups));
  pl->groups[pl->ngroups++] = (sl__plan_group){first_unit, nunits, records};
  return SL_OK;
}

static int add_unit(build *b, size_t k, uint32_t first, uint32_t count,
                    const uint32_t *recs, const uint32_t *slots) {
  sl__plan *pl = b->plan;
  SL_FORWARD_IF_ERROR(grow((void **)&pl->units, &b->cap_units, pl->nunits + 1,
                           sizeof *pl->units));
  pl->units[pl->nunits++] =
      (sl__plan_unit){b->cfile[k], b->cidx[k], first, count, recs, slots};
  return SL_OK;
}

/* Pool space for n words.  The pool is sized before the build (two words
 * per record of the share at most), so the pointers handed out stay put. */
static uint32_t *take_pool(build *b, uint64_t n) {
  sl__plan *pl = b->plan;
  assert(pl->pool_len + n <= pl->pool_cap);
  uint32_t *p = pl->pool + pl->pool_len;
  pl->pool_len += (size_t)n;
  return p;
}

/* The last i in [lo, hi) with cum[i] <= x: the read slot holding position
 * x (empty chunks have cum[i] == cum[i+1] and are passed over). */
static size_t slot_of(const uint64_t *cum, size_t lo, size_t hi, uint64_t x) {
  while (hi - lo > 1) {
    size_t mid = lo + (hi - lo) / 2;
    if (cum[mid] <= x)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* Positions [lo, hi) of the sequence, all inside window w (read slots
 * [i0, i1)): one group. */
static int plan_window(build *b, uint64_t w, size_t i0, size_t i1, uint64_t lo,
                       uint64_t hi) {
  uint64_t ws = b->cum[i0], M = b->cum[i1] - ws, n = hi - lo;
  sl__plan *pl = b->plan;
  size_t first_unit = pl->nunits;
  if (!b->p->shuffle || b->p->keys != SL__PLAN_SLR) {
    /* one chunk per window, its records in order */
    SL_FORWARD_IF_ERROR(add_unit(b, b->order[i0], (uint32_t)(lo - ws),
                                 (uint32_t)n, NULL, NULL));
    return add_group(b, first_unit, 1, n);
  }
  SL_RETURN_ERROR_IF(M > UINT32_MAX, SL_EINVAL,
                     "plan: shuffle window %llu holds %llu records, more "
                     "than 2^32 - 1: use a smaller window",
                     (unsigned long long)w, (unsigned long long)M);
  SL_FORWARD_IF_ERROR(
      grow((void **)&b->sigma, &b->sigma_cap, (size_t)M, sizeof *b->sigma));
  sl__plan_permute(sl__plan_key(b->p->seed, b->p->epoch, w), b->sigma,
                   (size_t)M);
  const uint32_t *out = b->sigma + (lo - ws); /* the group's input records */
  size_t nk = i1 - i0;
  if (nk == 1) {
    uint32_t *recs = take_pool(b, n);
    memcpy(recs, out, (size_t)n * sizeof *recs);
    SL_FORWARD_IF_ERROR(add_unit(b, b->order[i0], 0, (uint32_t)n, recs, NULL));
    return add_group(b, first_unit, 1, n);
  }
  /* Which chunk of the window each output record comes from. */
  SL_FORWARD_IF_ERROR(
      grow((void **)&b->wchunk, &b->wchunk_cap, (size_t)n, sizeof *b->wchunk));
  SL_FORWARD_IF_ERROR(
      grow((void **)&b->wrec, &b->wrec_cap, (size_t)n, sizeof *b->wrec));
  memset(b->cnt, 0, nk * sizeof *b->cnt);
  for (uint64_t j = 0; j < n; j++) {
    uint64_t pos = ws + out[j];
    size_t i = slot_of(b->cum, i0, i1, pos);
    b->wchunk[j] = (uint32_t)(i - i0);
    b->wrec[j] = (uint32_t)(pos - b->cum[i]);
    b->cnt[i - i0]++;
  }
  size_t used = 0;
  for (size_t c = 0; c < nk; c++)
    used += b->cnt[c] != 0;
  /* Carve each unit's arrays, then fill them in output order. */
  size_t u0 = pl->nunits;
  for (size_t c = 0; c < nk; c++) {
    if (!b->cnt[c]) continue;
    uint32_t *recs = take_pool(b, b->cnt[c]);
    uint32_t *slots = used > 1 ? take_pool(b, b->cnt[c]) : NULL;
    SL_FORWARD_IF_ERROR(add_unit(b, b->order[i0 + c], 0, 0, recs, slots));
    b->cnt[c] = (uint32_t)(pl->nunits - 1 - u0); /* now: the unit's index */
  }
  for (uint64_t j = 0; j < n; j++) {
    sl__plan_unit *u = &pl->units[u0 + b->cnt[b->wchunk[j]]];
    uint32_t *recs = (uint32_t *)u->recs, *slots = (uint32_t *)u->slots;
    recs[u->count] = b->wrec[j];
    if (slots) slots[u->count] = (uint32_t)j;
    u->count++;
  }
  return add_group(b, first_unit, used, n);
}

/* Positions [s, e) of the sequence, window after window. */
static int plan_segment(build *b, uint64_t s, uint64_t e) {
  size_t i = slot_of(b->cum, 0, b->C, s);
  for (uint64_t w = i / b->W;; w++) {
    size_t i0 = (size_t)w * b->W, i1 = SL_MIN(i0 + b->W, b->C);
    uint64_t lo = SL_MAX(s, b->cum[i0]), hi = SL_MIN(e, b->cum[i1]);
    if (lo < hi) SL_FORWARD_IF_ERROR(plan_window(b, w, i0, i1, lo, hi));
    if (b->cum[i1] >= e || i1 == b->C) break;
  }
  return SL_OK;
}

static int check_params(const sl__plan_params *p) {
  SL_RETURN_ERROR_IF(p->world < 1 || p->rank < 0 || p->rank >= p->world,
                     SL_EINVAL, "plan: rank %d is not in [0, world %d)",
                     p->rank, p->world);
  SL_RETURN_ERROR_IF(p->window < 1, SL_EINVAL, "plan: window must be >= 1");
  SL_RETURN_ERROR_IF(p->keys != SL__PLAN_SLR && p->keys != SL__PLAN_WDS &&
                         p->keys != SL__PLAN_TOKENS,
                     SL_EINVAL, "plan: unknown key scheme %d", (int)p->keys);
  SL_RETURN_ERROR_IF(p->policy != SL_SHARD_PAD && p->policy != SL_SHARD_DROP &&
                         p->policy != SL_SHARD_UNEVEN,
                     SL_EINVAL, "plan: unknown remainder policy %d",
                     (int)p->policy);
  return SL_OK;
}

static int build_plan(build *b, const sl__plan_file *files, size_t nfiles) {
  const sl__plan_params *p = b->p;
  sl__plan *pl = b->plan;
  uint64_t C = 0;
  for (size_t f = 0; f < nfiles; f++) {
    SL_RETURN_ERROR_IF(files[f].nchunks > UINT32_MAX - C, SL_EINVAL,
                       "plan: more than 2^32 - 1 chunks in all");
    C += files[f].nchunks;
  }
  SL_RETURN_ERROR_IF(nfiles > UINT32_MAX, SL_EINVAL, "plan: too many files");
  b->C = (size_t)C;
  b->W = p->shuffle && p->keys == SL__PLAN_SLR ? p->window : 1;
  b->cfile = sl__malloc((b->C + 1) * sizeof *b->cfile);
  b->cidx = sl__malloc((b->C + 1) * sizeof *b->cidx);
  b->order = sl__malloc((b->C + 1) * sizeof *b->order);
  b->cum = sl__malloc((b->C + 1) * sizeof *b->cum);
  b->cnt = sl__malloc((size_t)SL_MIN(b->W, b->C + 1) * sizeof *b->cnt);
  SL_RETURN_ERROR_IF(!b->cfile || !b->cidx || !b->order || !b->cum || !b->cnt,
                     SL_ENOMEM,
                     "plan: cannot allocate the tables of %zu "
                     "chunks",
                     b->C);
  size_t k = 0;
  for (size_t f = 0; f < nfiles; f++)
    for (uint64_t c = 0; c < files[f].nchunks; c++, k++) {
      b->cfile[k] = (uint32_t)f;
      b->cidx[k] = c;
    }
  if (p->shuffle)
    sl__plan_permute(
        sl__plan_stream_key(p->keys, p->seed, p->epoch, UINT64_MAX), b->order,
        b->C);
  else
    for (size_t i = 0; i < b->C; i++)
      b->order[i] = (uint32_t)i;
  b->cum[0] = 0;
  for (size_t i = 0; i < b->C; i++) {
    uint32_t g = b->order[i];
    b->cum[i + 1] = b->cum[i] + files[b->cfile[g]].records[b->cidx[g]];
  }
  uint64_t N = b->cum[b->C], share[4];
  pl->total = N;
  const uint64_t *seg = share;
  size_t nseg;
  if (b->segs) {
    seg = b->segs;
    nseg = b->nsegs;
    for (size_t i = 0; i < nseg; i++)
      SL_RETURN_ERROR_IF(seg[2 * i] >= seg[2 * i + 1] || seg[2 * i + 1] > N ||
                             (i && seg[2 * i] < seg[2 * i - 1]),
                         SL_EINVAL,
                         "plan: segment %zu [%llu, %llu) is empty, out of "
                         "order or past the %llu records",
                         i, (unsigned long long)seg[2 * i],
                         (unsigned long long)seg[2 * i + 1],
                         (unsigned long long)N);
  } else {
    nseg = sl__shard_segments(N, p->rank, p->world, p->policy, share);
  }
  for (size_t i = 0; i < nseg; i++)
    pl->records += seg[2 * i + 1] - seg[2 * i];
  if (p->shuffle && p->keys == SL__PLAN_SLR && pl->records) {
    SL_RETURN_ERROR_IF(pl->records > SIZE_MAX / 8, SL_ENOMEM,
                       "plan: share too large");
    pl->pool_cap = (size_t)pl->records * 2;
    pl->pool = sl__malloc(pl->pool_cap * sizeof *pl->pool);
    SL_RETURN_ERROR_IF(!pl->pool, SL_ENOMEM,
                       "plan: cannot allocate the record lists of %llu "
                       "records",
                       (unsigned long long)pl->records);
  }
  for (size_t i = 0; i < nseg; i++)
    SL_FORWARD_IF_ERROR(plan_segment(b, seg[2 * i], seg[2 * i + 1]));
  return SL_OK;
}

void sl__plan_free(sl__plan *plan) {
  if (!plan) return;
  SL__FREE(plan->units, plan->groups, plan->pool);
  memset(plan, 0, sizeof *plan);
}

int sl__plan_build(const sl__plan_file *files, size_t nfiles,
                   const sl__plan_params *p, sl__plan *out) {
  return sl__plan_build_segments(files, nfiles, p, NULL, 0, out);
}

int sl__plan_build_segments(const sl__plan_file *files, size_t nfiles,
                            const sl__plan_params *p, const uint64_t *segs,
                            size_t nsegs, sl__plan *out) {
  memset(out, 0, sizeof *out);
  SL_FORWARD_IF_ERROR(check_params(p));
  build b = {.p = p, .segs = segs, .nsegs = nsegs, .plan = out};
  int rc = build_plan(&b, files, nfiles);
  SL__FREE(b.cfile, b.cidx, b.order, b.cum, b.sigma, b.wchunk, b.wrec, b.cnt);
  if (rc < 0) sl__plan_free(out);
  return rc;
}
