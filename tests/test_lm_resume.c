/*
 * test_lm_resume.c - restore without replay for pack, mix and
 * bucket_batch (issue 28
 * item 4, docs/RESUME.md): every cut of a pass (start, middle, 90 %, just
 * before the end, mid-row) restores to the uninterrupted run's outputs, bit
 * for bit, with 1 and 2 threads upstream and with stages above holding
 * outputs (a save behind); the restore reads the documents since the oldest
 * held row opened (pack) or nothing (mix, bucket_batch), not the pass;
 * tampered, cut and foreign payloads are refused naming the stage; a state in
 * the format before (no payload: the pass re-read) still restores.
 */
#include "test.h"
#include "test_util.h"

#include "core/crc32c.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --- documents ------------------------------------------------------------
 * n documents of 1..40 tokens (a fixed generator), field "ids" i32[-1]:
 * document d holds d * 1000 + i + 1. */

static sl_reader *docs(size_t n, uint64_t seed) {
  sl_schema *sc = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  ASSERT_OK(sl_schema_add(sc, "ids", SL_I32, 1, &var));
  sl_sample **v = calloc(n, sizeof *v);
  uint64_t x = seed;
  for (size_t d = 0; d < n; d++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    int64_t len = 1 + (int64_t)((x >> 33) % 40);
    v[d] = sl_sample_new(sc);
    void *data = NULL;
    ASSERT_OK(sl_sample_alloc(v[d], 0, 1, &len, &data));
    for (int64_t i = 0; i < len; i++)
      ((int32_t *)data)[i] = (int32_t)(d * 1000 + (size_t)i + 1);
  }
  sl_reader *r = NULL;
  ASSERT_OK(sl_reader_from_array(v, n, sc, &r));
  for (size_t d = 0; d < n; d++)
    sl_sample_release(v[d]);
  free(v);
  sl_schema_release(sc);
  return r;
}

/* A 1:1 stage that counts the samples it passes (the reads a restore
 * makes upstream of the stage under test). */
static int counting(void *ud, sl_sample *in, sl_sample **out) {
  atomic_fetch_add((_Atomic uint64_t *)ud, 1);
  *out = in;
  return SL_OK;
}

/* the counting stages of the chains below (a prefetch's thread counts) */
static _Atomic uint64_t reads[2];

static int identity_fn(void *ud, sl_sample *in, sl_sample **out) {
  (void)ud;
  *out = in;
  return SL_OK;
}

/* docs -> (a shuffle of `window`, its order new each pass) -> (map on
 * `threads` threads) -> counting -> pack(T = 64, lookahead 3) */
static sl_reader *packed_from(size_t ndocs, uint64_t seed, size_t window,
                              int threads, _Atomic uint64_t *count) {
  sl_reader *r = docs(ndocs, seed);
  if (window) ASSERT_OK(sl_shuffle(r, window, seed + 100, &r));
  if (threads) {
    sl_parallel_opts po = SL_PARALLEL_OPTS_INIT;
    po.threads = (uint32_t)threads;
    ASSERT_OK(sl_map_parallel(r, identity_fn, NULL, NULL, NULL, &po, &r));
  }
  ASSERT_OK(sl_map(r, counting, count, NULL, NULL, &r));
  sl_pack_opts o = SL_PACK_OPTS_INIT;
  o.seq_len = 64;
  o.lookahead = 3;
  ASSERT_OK(sl_pack(r, &o, &r));
  return r;
}

static sl_reader *packed(size_t ndocs, uint64_t seed, int threads,
                         _Atomic uint64_t *count) {
  return packed_from(ndocs, seed, 0, threads, count);
}

enum {
  C_PACK,
  C_PACK_HELD,
  C_PACK_LONG,
  C_MIX,
  C_MIX_HELD,
  C_MIX_NEVER,
  C_MIX_NEVER_BARE, /* stop = never, no prefetch: counts reads exactly */
  C_BUCKET,
  C_BUCKET_HELD,
  C_WINDOW_SHUFFLED,
  /* stop = never over packs of shuffled documents (a new order each pass),
   * a shuffle of 8 batches above: saved in a pack's pass before its reset */
  C_MIX_NEVER_SHUFFLED,
  /* stop = all under a repeat of 2, a shuffle of 8 batches above: the
   * mixture (and the batch) saved in their pass before */
  C_MIX_REPEATED,
  C_END
};

/* docs -> (map on `threads` threads) -> counting -> bucket_batch: lengths
 * < 2 (rare: its samples wait from far back), < 30, the rest */
static sl_reader *bucketed(int threads, int held) {
  sl_reader *r = docs(400, 6);
  if (threads) {
    sl_parallel_opts po = SL_PARALLEL_OPTS_INIT;
    po.threads = (uint32_t)threads;
    ASSERT_OK(sl_map_parallel(r, identity_fn, NULL, NULL, NULL, &po, &r));
  }
  ASSERT_OK(sl_map(r, counting, &reads[0], NULL, NULL, &r));
  const int64_t b[] = {2, 30};
  const size_t sz[] = {4, 5, 3};
  sl_bucket_batch_opts o = SL_BUCKET_BATCH_OPTS_INIT;
  o.boundaries = b;
  o.nboundaries = 2;
  o.batch_sizes = sz;
  ASSERT_OK(sl_bucket_batch(r, &o, &r));
  if (held) ASSERT_OK(sl_prefetch(r, 4, &r));
  return r;
}

typedef struct cfg {
  int kind, threads;
} cfg;

static sl_reader *build(void *ud) {
  const cfg *c = ud;
  reads[0] = reads[1] = 0;
  sl_reader *r = NULL;
  switch (c->kind) {
  case C_BUCKET:
  case C_BUCKET_HELD:
    return bucketed(c->threads, c->kind == C_BUCKET_HELD);
  case C_WINDOW_SHUFFLED: /* windows saved 2500 behind: from a checkpoint */
    r = docs(1000, 7);
    ASSERT_OK(sl_map(r, counting, &reads[0], NULL, NULL, &r));
    ASSERT_OK(sl_window(r, "ids", 4, 3, 0, &r));
    ASSERT_OK(sl_shuffle(r, 2500, 9, &r));
    return r;
  case C_PACK: /* nothing held above: saved at the pack's last row */
    r = packed(300, 1, c->threads, &reads[0]);
    ASSERT_OK(sl_batch(r, 2, NULL, &r));
    return r;
  case C_PACK_HELD: /* rows held above (prefetch): saved behind */
    r = packed(300, 2, c->threads, &reads[0]);
    ASSERT_OK(sl_prefetch(r, 5, &r));
    return r;
  case C_PACK_LONG: { /* documents longer than a row: several rows at once */
    sl_reader *d = docs(60, 3);
    ASSERT_OK(sl_map(d, counting, &reads[0], NULL, NULL, &d));
    sl_pack_opts o = SL_PACK_OPTS_INIT;
    o.seq_len = 8;
    o.lookahead = 2;
    o.has_eos = 1;
    o.eos = 9;
    ASSERT_OK(sl_pack(d, &o, &r));
    ASSERT_OK(sl_prefetch(r, 3, &r));
    return r;
  }
  default: {
    size_t win =
        c->kind == C_MIX_NEVER_SHUFFLED || c->kind == C_MIX_REPEATED ? 16 : 0;
    sl_reader *a = packed_from(200, 4, win, c->threads, &reads[0]);
    sl_reader *b = packed_from(120, 5, win, c->threads, &reads[1]);
    sl_reader *rs[2] = {a, b};
    sl_mix_opts mo = SL_MIX_OPTS_INIT;
    mo.seed = 11;
    bool never = c->kind == C_MIX_NEVER || c->kind == C_MIX_NEVER_BARE ||
                 c->kind == C_MIX_NEVER_SHUFFLED;
    mo.stop = never ? SL_MIX_STOP_NEVER : SL_MIX_STOP_ALL;
    ASSERT_OK(sl_mix(rs, 2, &mo, &r));
    if (never) ASSERT_OK(sl_take(r, 300, &r));
    ASSERT_OK(sl_batch(r, 3, NULL, &r));
    if (c->kind == C_MIX_HELD || c->kind == C_MIX_NEVER)
      ASSERT_OK(sl_prefetch(r, 4, &r));
    if (c->kind == C_MIX_REPEATED) ASSERT_OK(sl_multi_pass(r, 2, &r));
    if (c->kind == C_MIX_NEVER_SHUFFLED || c->kind == C_MIX_REPEATED)
      ASSERT_OK(sl_shuffle(r, 8, 13, &r));
    return r;
  }
  }
}

/* Outputs of one pass of a fresh chain. */
static uint64_t pass_len(cfg *c) {
  uint64_t n = 0;
  test_digest_all(build(c), &n);
  return n;
}

TEST(pack_and_mix_resume_exactly_at_every_kind_of_cut) {
  for (int kind = C_PACK; kind < C_END; kind++) {
    for (int threads = 0; threads <= 2; threads++) {
      if ((kind == C_PACK_LONG || kind == C_WINDOW_SHUFFLED) && threads)
        continue;
      cfg c = {kind, threads};
      uint64_t n = pass_len(&c);
      ASSERT_TRUE(n > 10);
      /* start, 1, middle, 90 %, just before the end, the end, the next
       * pass's start and middle */
      const uint64_t cuts[] = {0,     1,     2, n / 3, n / 2,    n * 9 / 10,
                               n - 2, n - 1, n, n + 1, n + n / 2};
      test_resume_check(build, &c, 2, cuts, sizeof cuts / sizeof cuts[0], 0);
    }
  }
}

/* Every cut of `passes` passes of c's chain restores exactly. */
static void check_every_cut(cfg *c, int passes) {
  uint64_t n = pass_len(c) * (uint64_t)passes;
  uint64_t *cuts = calloc(n + 1, sizeof *cuts);
  for (uint64_t i = 0; i <= n; i++)
    cuts[i] = i;
  test_resume_check(build, c, passes, cuts, n + 1, 0);
  free(cuts);
}

/* A pack's reader reset by the mixture (stop = never) while the shuffle
 * above still holds its rows from before: the pack is saved in its pass
 * before, its shuffled upstream at that pass too (its order differs from
 * the current pass's) - every cut of two passes restores exactly. */
TEST(a_pack_saved_in_its_pass_before_a_mix_reset_resumes_exactly) {
  cfg c = {C_MIX_NEVER_SHUFFLED, 0};
  check_every_cut(&c, 2);
}

/* A mixture reset by a repeat while the shuffle above still holds its
 * batches: saved in its pass before (its readers re-read from where they
 * were when that pass began, its draws those of that pass). */
TEST(a_mix_saved_in_its_pass_before_a_repeat_resumes_exactly) {
  cfg c = {C_MIX_REPEATED, 0};
  check_every_cut(&c, 1);
}

TEST(pack_resumes_at_every_row_of_a_pass) {
  cfg c = {C_PACK_LONG, 0}, h = {C_PACK_HELD, 0};
  check_every_cut(&c, 2);
  check_every_cut(&h, 1);
}

/* Reads `n` outputs of r (resetting at the end of a pass). */
static void read_n(sl_reader *r, uint64_t n) {
  for (uint64_t i = 0; i < n; i++) {
    sl_sample *s = NULL;
    int rc = sl_reader_next(r, &s);
    if (rc == SL_EOF) {
      ASSERT_OK(sl_reader_reset(r));
      i--;
      continue;
    }
    ASSERT_OK(rc);
    sl_sample_release(s);
  }
}

static unsigned char *save_at(cfg *c, uint64_t cut, size_t *len) {
  sl_reader *r = build(c);
  read_n(r, cut);
  void *st = NULL;
  ASSERT_OK(sl_reader_save(r, &st, len));
  sl_reader_destroy(r);
  return st;
}

/* The documents read below the stage under test while a fresh chain is
 * restored to the state `c` saved at output `cut`. */
static uint64_t restore_reads(cfg *c, uint64_t cut) {
  size_t len;
  unsigned char *st = save_at(c, cut, &len);
  sl_reader *r = build(c);
  ASSERT_OK(sl_reader_restore(r, st, len));
  uint64_t n = atomic_load(&reads[0]) + atomic_load(&reads[1]);
  sl_free(st);
  sl_reader_destroy(r);
  return n;
}

/* The restore reads the documents since the oldest held row opened: at
 * 90 % of a pass of 300 documents, a few rows' worth, not 270. */
TEST(a_pack_restore_reads_a_few_rows_of_documents_not_the_pass) {
  for (int kind = C_PACK; kind <= C_PACK_HELD; kind++) {
    cfg c = {kind, 0};
    uint64_t n = pass_len(&c);
    for (int q = 1; q <= 9; q += 4) {
      /* 64-token rows of documents of 1..40 tokens, lookahead 3: the rows
       * open when the oldest held row opened hold about 4 x 64 / 20
       * documents (4 to 9 here); the prefetch's thread starts filling its
       * 5 slots as soon as the restore returns (about 20 more); the old
       * replay read 30 to 270 */
      uint64_t got = restore_reads(&c, n * (uint64_t)q / 10);
      if (got > (kind == C_PACK ? 24u : 64u))
        test_fail(__FILE__, __LINE__,
                  "kind %d at %d0 %%: the restore read %llu documents", kind, q,
                  (unsigned long long)got);
    }
  }
}

/* bucket_batch: the buckets come from the state; nothing is read again
 * (checked without a prefetch above, whose thread starts pulling at
 * once). */
TEST(a_bucket_batch_restore_reads_nothing_again) {
  cfg c = {C_BUCKET, 0};
  uint64_t n = pass_len(&c);
  for (int q = 1; q <= 9; q += 4)
    ASSERT_EQ(restore_reads(&c, n * (uint64_t)q / 10), 0);
}

/* mix: the readers are put at their own positions: nothing is read below
 * the mixture but the packs' few rows (checked without a prefetch above,
 * whose thread starts pulling at once). */
TEST(a_mix_restore_reads_no_draw_again) {
  const int kinds[] = {C_MIX, C_MIX_NEVER_BARE};
  for (int i = 0; i < 2; i++) {
    cfg c = {kinds[i], 0};
    int kind = kinds[i];
    uint64_t got = restore_reads(&c, pass_len(&c) * 9 / 10);
    if (got > 48)
      test_fail(__FILE__, __LINE__, "kind %d: the restore read %llu documents",
                kind, (unsigned long long)got);
  }
}

/* --- the state's records -------------------------------------------------
 * A parsed state (docs/RESUME.md's format), to patch payloads and seal
 * again as a hostile writer (or the format before) would. */

typedef struct rec {
  const unsigned char *name, *ident;
  uint32_t name_len, ident_len;
  uint64_t pass, k;
  unsigned char *payload;
  uint64_t size;
  struct rec *kids;
  uint32_t nkids;
} rec;

static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
         (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) {
  return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

static size_t parse_rec(const unsigned char *p, rec *r) {
  size_t at = 0;
  r->name_len = rd32(p);
  r->name = p + 4;
  at += 4 + r->name_len;
  r->ident_len = rd32(p + at);
  r->ident = p + at + 4;
  at += 4 + r->ident_len;
  r->pass = rd64(p + at);
  r->k = rd64(p + at + 8);
  r->nkids = rd32(p + at + 16);
  r->size = rd64(p + at + 20);
  at += 28;
  r->payload = malloc(r->size + 1);
  memcpy(r->payload, p + at, r->size);
  at += r->size;
  r->kids = calloc(r->nkids + 1, sizeof *r->kids);
  for (uint32_t i = 0; i < r->nkids; i++)
    at += parse_rec(p + at, &r->kids[i]);
  return at;
}

static void free_rec(rec *r) {
  for (uint32_t i = 0; i < r->nkids; i++)
    free_rec(&r->kids[i]);
  free(r->kids);
  free(r->payload);
}

static void put(unsigned char **b, size_t *n, const void *p, size_t k) {
  *b = realloc(*b, *n + k);
  memcpy(*b + *n, p, k);
  *n += k;
}
static void put32(unsigned char **b, size_t *n, uint32_t v) {
  unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                        (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
  put(b, n, x, 4);
}
static void put64(unsigned char **b, size_t *n, uint64_t v) {
  put32(b, n, (uint32_t)v);
  put32(b, n, (uint32_t)(v >> 32));
}

static void write_rec(unsigned char **b, size_t *n, const rec *r) {
  put32(b, n, r->name_len);
  put(b, n, r->name, r->name_len);
  put32(b, n, r->ident_len);
  put(b, n, r->ident, r->ident_len);
  put64(b, n, r->pass);
  put64(b, n, r->k);
  put32(b, n, r->nkids);
  put64(b, n, r->size);
  put(b, n, r->payload, r->size);
  for (uint32_t i = 0; i < r->nkids; i++)
    write_rec(b, n, &r->kids[i]);
}

/* The state of `root` (header of `orig`, body length, CRC32C sealed). */
static unsigned char *seal(const unsigned char *orig, const rec *root,
                           size_t *len) {
  unsigned char *body = NULL, *out = NULL;
  size_t nb = 0, n = 0;
  write_rec(&body, &nb, root);
  put(&out, &n, orig, 16); /* magic, version, 0 */
  put64(&out, &n, nb);
  put(&out, &n, body, nb);
  put32(&out, &n, sl__crc32c(0, out, n));
  free(body);
  *len = n;
  return out;
}

/* The first record named `name`, depth first. */
static rec *find(rec *r, const char *name) {
  if (r->name_len == strlen(name) && !memcmp(r->name, name, r->name_len))
    return r;
  for (uint32_t i = 0; i < r->nkids; i++) {
    rec *f = find(&r->kids[i], name);
    if (f) return f;
  }
  return NULL;
}

static void set64(rec *r, size_t word, uint64_t v) {
  ASSERT_TRUE((word + 1) * 8 <= r->size);
  for (int b = 0; b < 8; b++)
    r->payload[word * 8 + b] = (unsigned char)(v >> (8 * b));
}

/* Restores `st` patched by fn into a fresh chain: the return code; the
 * chain's first output after a refusal is the fresh chain's first. */
static int restore_patched(cfg *c, const unsigned char *st, size_t len,
                           const char *stage, void (*fn)(rec *)) {
  rec root;
  parse_rec(st + 24, &root);
  fn(find(&root, stage));
  size_t n;
  unsigned char *p = seal(st, &root, &n);
  free_rec(&root);
  sl_reader *r = build(c);
  int rc = sl_reader_restore(r, p, n);
  free(p);
  sl_reader_destroy(r);
  return rc;
}

static void mode_7(rec *r) {
  set64(r, 0, 7);
}
static void cut_short(rec *r) {
  r->size = r->size > 12 ? r->size - 12 : 4;
}
static void too_many_open(rec *r) {
  set64(r, 4, 1000);
}
static void doc_past_count(rec *r) {
  set64(r, 2, 1ull << 40);
}
static void row_overfull(rec *r) {
  set64(r, 4, 1);
  set64(r, 5, 65);
  r->size = 6 * 8;
}
static void checkpoint_far(rec *r) {
  set64(r, 1, 1u << 20);
}
static void left_late(rec *r) {
  set64(r, 1, 1ull << 50);
}
static void bucket_overfull(rec *r) {
  set64(r, 4, 1000);
}
static void ended_5(rec *r) {
  set64(r, 3, 5);
}
static void sample_rank(rec *r) { /* the first held sample's first rank */
  for (size_t w = 4; w < 7; w++)
    if (r->payload[w * 8]) { /* a bucket with samples: its seq, rank */
      set64(r, w + 2, 3);
      return;
    }
  set64(r, 4, 1000);
}

TEST(tampered_or_cut_pack_and_mix_payloads_are_refused_naming_the_stage) {
  cfg c = {C_PACK, 0};
  size_t len;
  unsigned char *st = save_at(&c, 23, &len);
  void (*bad[])(rec *) = {mode_7, cut_short, too_many_open, doc_past_count,
                          row_overfull};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ASSERT_RC(restore_patched(&c, st, len, "pack", bad[i]), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), "pack");
  }
  sl_free(st);
  cfg m = {C_MIX, 0};
  st = save_at(&m, 20, &len);
  void (*badm[])(rec *) = {mode_7, cut_short, left_late};
  for (size_t i = 0; i < sizeof badm / sizeof badm[0]; i++) {
    ASSERT_RC(restore_patched(&m, st, len, "mix", badm[i]), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), "mix");
  }
  sl_free(st);
  cfg b = {C_BUCKET, 0};
  st = save_at(&b, 17, &len);
  void (*badb[])(rec *) = {mode_7, cut_short, bucket_overfull, ended_5,
                           sample_rank};
  for (size_t i = 0; i < sizeof badb / sizeof badb[0]; i++) {
    ASSERT_RC(restore_patched(&b, st, len, "bucket_batch", badb[i]),
              SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), "bucket_batch");
  }
  sl_free(st);
}

/* A window saved more than its log behind (under a shuffle of 2500
 * windows) saves the checkpoint before the position (mode 2): the restore
 * reads fewer than 1024 windows of the stream again, not the pass. */
/* ... and is saved as its rows (mode 0: a few rows of documents read
 * again), not as its pass to read again (mode 1), at every cut: its rings
 * run on across the reset.  (Pack b's passes change within the mixture's
 * pass, and the shuffle above pulls 8 batches past each cut, so some cuts
 * save it in the pass before the one it is in.) */
TEST(a_pack_saved_in_its_pass_before_a_mix_reset_reads_no_pass_again) {
  cfg c = {C_MIX_NEVER_SHUFFLED, 0};
  uint64_t n = pass_len(&c), lo = UINT64_MAX, hi = 0;
  for (uint64_t k = 1; k <= n; k++) {
    size_t len;
    unsigned char *st = save_at(&c, k, &len);
    rec root;
    parse_rec(st + 24, &root);
    rec *mix = find(&root, "mix");
    ASSERT_TRUE(mix != NULL);
    ASSERT_EQ(mix->nkids, 2);
    for (uint32_t i = 0; i < 2; i++) {
      rec *p = &mix->kids[i];
      ASSERT_TRUE(p->name_len == 4 && !memcmp(p->name, "pack", 4));
      if (rd64(p->payload) != 0)
        test_fail(__FILE__, __LINE__, "cut %llu: pack %u saved in mode %llu",
                  (unsigned long long)k, i,
                  (unsigned long long)rd64(p->payload));
    }
    ASSERT_EQ(rd64(mix->payload), 0); /* the mix walked back, too */
    if (mix->kids[1].pass < lo) lo = mix->kids[1].pass;
    if (mix->kids[1].pass > hi) hi = mix->kids[1].pass;
    free_rec(&root);
    sl_free(st);
  }
  ASSERT_TRUE(hi >= lo + 2); /* pack b was reset within the pass, twice */
}

TEST(a_window_saved_far_behind_starts_from_a_checkpoint) {
  cfg c = {C_WINDOW_SHUFFLED, 0};
  uint64_t n = pass_len(&c);
  size_t len;
  unsigned char *st = save_at(&c, n * 9 / 10, &len);
  rec root;
  parse_rec(st + 24, &root);
  rec *w = find(&root, "window");
  ASSERT_NOT_NULL(w);
  ASSERT_TRUE(w->size >= 8 && w->payload[0] == 2);
  free_rec(&root);
  /* another mode, another checkpoint, a cut record: refused */
  void (*bad[])(rec *) = {mode_7, checkpoint_far, cut_short};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    ASSERT_RC(restore_patched(&c, st, len, "window", bad[i]), SL_ECORRUPT);
    ASSERT_CONTAINS(sl_last_error(), "window");
  }
  sl_free(st);
}

/* --- the format before: no payload, upstream at the pass's start -------- */

/* The old save of pack and mix: no payload (states of before). */
static void strip(rec *r) {
  if ((r->name_len == 4 && !memcmp(r->name, "pack", 4)) ||
      (r->name_len == 3 && !memcmp(r->name, "mix", 3)) ||
      (r->name_len == 12 && !memcmp(r->name, "bucket_batch", 12)))
    r->size = 0;
  for (uint32_t i = 0; i < r->nkids; i++)
    strip(&r->kids[i]);
}

/* r as the save before wrote it: no payload, its upstreams at the start
 * of the pass (taken from `at0`, the same stage saved at 0: swapped). */
static void as_before(rec *r, rec *at0) {
  strip(at0);
  r->size = 0;
  rec *kids = r->kids;
  r->kids = at0->kids;
  at0->kids = kids;
}

/* Pulls the rest of the pass of a chain restored from `st` (patched to
 * the format before) and of a chain restored from `st` itself: equal. */
static void old_format_restores(cfg *c, const char *stage, uint64_t cut) {
  size_t len, len0;
  unsigned char *st = save_at(c, cut, &len);
  unsigned char *st0 = save_at(c, 0, &len0);
  rec root0, root;
  parse_rec(st0 + 24, &root0);
  parse_rec(st + 24, &root);
  as_before(find(&root, stage), find(&root0, stage));
  size_t n;
  unsigned char *old = seal(st, &root, &n);
  sl_reader *a = build(c), *b = build(c);
  ASSERT_OK(sl_reader_restore(a, st, len));
  ASSERT_OK(sl_reader_restore(b, old, n));
  uint64_t na = 0, nb = 0;
  uint64_t da = test_digest_all(a, &na), db = test_digest_all(b, &nb);
  ASSERT_EQ(na, nb);
  ASSERT_TRUE(da == db);
  free(old);
  free_rec(&root);
  free_rec(&root0);
  sl_free(st);
  sl_free(st0);
}

TEST(a_state_saved_before_the_payload_still_restores_by_re_reading) {
  cfg p = {C_PACK, 0}, m = {C_MIX, 0};
  old_format_restores(&p, "pack", 30);
  old_format_restores(&m, "mix", 25);
  cfg b = {C_BUCKET, 0};
  old_format_restores(&b, "bucket_batch", 21);
}
