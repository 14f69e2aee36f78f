/*
 * rng.h - the deterministic random numbers of the readers (shuffle.c,
 * epoch_plan.c, sampler.c): splitmix64 (for seeding and counter-based
 * keys), xoshiro256** (the stream), Lemire's unbiased bounded draw, the
 * seeded Fisher-Yates permutation and an O(1)-memory Feistel
 * permutation.  Header-only (static inline): the sequences are pinned by
 * tests, so every user must compute exactly these functions.
 */
#ifndef SLUICE_CORE_RNG_H
#define SLUICE_CORE_RNG_H

#include <stddef.h>
#include <stdint.h>

/* splitmix64's increment, 2^64 / golden ratio. */
#define SL__RNG_GOLDEN 0x9E3779B97F4A7C15ull

/* The splitmix64 finalizer (a bijective mix of 64 bits). */
static inline uint64_t sl__splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The next output of the splitmix64 generator whose state is *x. */
static inline uint64_t sl__splitmix64(uint64_t *x) {
  return sl__splitmix64_mix(*x += SL__RNG_GOLDEN);
}

static inline uint64_t sl__rotl64(uint64_t x, int k) {
  return (x << k) | (x >> (64 - k));
}

/* The next output of the xoshiro256** generator with state s. */
static inline uint64_t sl__xoshiro256ss(uint64_t s[4]) {
  const uint64_t result = sl__rotl64(s[1] * 5, 7) * 9;
  const uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = sl__rotl64(s[3], 45);
  return result;
}

/* The high 64 bits of a * b; the low ones in *lo. */
static inline uint64_t sl__mul128(uint64_t a, uint64_t b, uint64_t *lo) {
#if defined(__SIZEOF_INT128__)
  unsigned __int128 m = (unsigned __int128)a * b;
  *lo = (uint64_t)m;
  return (uint64_t)(m >> 64);
#else
  uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
  uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
  *lo = (mid << 32) | (uint32_t)p00;
  return p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
#endif
}

/* A uniform integer in [0, n), n >= 1, from the xoshiro256** generator s
 * (Lemire, "Fast random integer generation in an interval", 2019): the
 * multiply maps 64 random bits onto [0, n) and the rare draws that would
 * bias it are rejected. */
static inline uint64_t sl__rng_bounded(uint64_t s[4], uint64_t n) {
  uint64_t lo, hi = sl__mul128(sl__xoshiro256ss(s), n, &lo);
  if (lo < n) {
    const uint64_t threshold = (0 - n) % n;
    while (lo < threshold)
      hi = sl__mul128(sl__xoshiro256ss(s), n, &lo);
  }
  return hi;
}

/* Seeds the xoshiro256** state s from a 64-bit key: s[j] is the output of
 * a splitmix64 generator started at `key` (j = 0..3), i.e.
 * mix(key + (j + 1) * golden).  The one seeding every permutation uses. */
static inline void sl__rng_seed(uint64_t s[4], uint64_t key) {
  for (int j = 0; j < 4; j++)
    s[j] = sl__splitmix64(&key);
}

/* The one seeded permutation of sluice (pinned by tests: shards, chunks,
 * windows, splits and packed files are ordered by it): a[i] = i, then
 * Fisher-Yates from the end, i = n-1 down to 1 swapping a[i] with a[j], j
 * uniform in [0, i] (sl__rng_bounded over xoshiro256** seeded by
 * sl__rng_seed(key)).  One body for both element widths. */
#define SL__PERMUTE_BODY(T)                                                    \
  do {                                                                         \
    uint64_t s_[4];                                                            \
    sl__rng_seed(s_, key);                                                     \
    for (size_t i = 0; i < n; i++)                                             \
      a[i] = (T)i;                                                             \
    for (size_t i = n; i-- > 1;) {                                             \
      size_t j = (size_t)sl__rng_bounded(s_, (uint64_t)i + 1);                 \
      T t = a[i];                                                              \
      a[i] = a[j];                                                             \
      a[j] = t;                                                                \
    }                                                                          \
  } while (0)
static inline void sl__permute_u64(uint64_t key, uint64_t *a, size_t n) {
  SL__PERMUTE_BODY(uint64_t);
}
static inline void sl__permute_u32(uint64_t key, uint32_t *a, size_t n) {
  SL__PERMUTE_BODY(uint32_t);
}
#undef SL__PERMUTE_BODY

/* A pseudo-random permutation of [0, n) chosen by (seed, stream), in O(1)
 * memory (global_shuffle: a new uniform order of a data set per pass,
 * stream = the pass, with no index list): a 4-round balanced Feistel
 * network over the smallest even number b >= 2 of bits that covers n - 1,
 * its round function the splitmix64 finalizer of (half ^ round key), walked
 * back into [0, n) by re-encrypting the values >= n (cycle walking: a
 * bijection of [0, 2^b) restricted to [0, n) stays one; 2^b < 4n, so about
 * 4 steps at most on average).  sl__feistel_at(f, i) is the i-th element
 * of the permutation, for i < n. */
typedef struct sl__feistel {
  uint64_t n;
  unsigned half;    /* bits per half */
  uint64_t mask;    /* (1 << half) - 1 */
  uint64_t key[4];  /* round keys */
} sl__feistel;

static inline void sl__feistel_init(sl__feistel *f, uint64_t n, uint64_t seed,
                                    uint64_t stream) {
  unsigned b = 2;
  while (b < 64 && (n - 1) >> b) b++;
  b += b & 1;
  f->n = n;
  f->half = b / 2;
  f->mask = f->half >= 64 ? ~0ull : (1ull << f->half) - 1;
  uint64_t x = sl__splitmix64_mix(seed) ^
               sl__splitmix64_mix(stream + SL__RNG_GOLDEN);
  for (int r = 0; r < 4; r++)
    f->key[r] = sl__splitmix64(&x);
}

static inline uint64_t sl__feistel_encrypt(const sl__feistel *f, uint64_t v) {
  uint64_t l = (v >> f->half) & f->mask, r = v & f->mask;
  for (int k = 0; k < 4; k++) {
    uint64_t t = l ^ (sl__splitmix64_mix(r ^ f->key[k]) & f->mask);
    l = r;
    r = t;
  }
  return (l << f->half) | r;
}

static inline uint64_t sl__feistel_at(const sl__feistel *f, uint64_t i) {
  if (f->n <= 1) return 0;
  uint64_t v = sl__feistel_encrypt(f, i);
  while (v >= f->n) v = sl__feistel_encrypt(f, v);
  return v;
}

#endif
