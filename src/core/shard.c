/*
 * shard.c - a rank's share of an epoch's sequence of n records
 * (sl_shard_policy, include/sluice/open.h): the arithmetic every sharded
 * source uses (the epoch plan, global_shuffle), and the rank and world the
 * launchers' environment gives (sl_shard_env); the bottom layer, so any
 * stage may use them.
 */
#include "core/internal.h"

#include <errno.h>
#include <stdlib.h>

/* floor(r * n / world) without overflow: r < world <= 2^31. */
static uint64_t split_point(uint64_t n, uint64_t r, uint64_t world) {
  return r * (n / world) + (r * (n % world)) / world;
}

size_t sl__shard_segments(uint64_t n, int rank, int world,
                          sl_shard_policy policy, uint64_t seg[4]) {
  uint64_t r = (uint64_t)rank, w = (uint64_t)world;
  if (n == 0) return 0;
  if (policy == SL_SHARD_DROP) {
    uint64_t q = n / w;
    seg[0] = r * q;
    seg[1] = (r + 1) * q;
    return q ? 1 : 0;
  }
  if (policy == SL_SHARD_UNEVEN) {
    seg[0] = split_point(n, r, w);
    seg[1] = split_point(n, r + 1, w);
    return seg[1] > seg[0] ? 1 : 0;
  }
  /* PAD.  Q <= n, so the part past n (shorter than Q) wraps at most once. */
  uint64_t q = n / w + (n % w != 0);
  uint64_t s = r * q, e = s + q;
  size_t k = 0;
  if (s < n) {
    seg[0] = s;
    seg[1] = SL_MIN(e, n);
    k = 1;
    s = seg[1];
  }
  while (s < e) {
    uint64_t off = (s - n) % n, len = SL_MIN(e - s, n - off);
    seg[2 * k] = off;
    seg[2 * k + 1] = off + len;
    k++;
    s += len;
  }
  return k;
}

uint64_t sl_shard_count(uint64_t n, int rank, int world,
                        sl_shard_policy policy) {
  if (world < 1 || rank < 0 || rank >= world) return 0;
  if (policy != SL_SHARD_PAD && policy != SL_SHARD_DROP &&
      policy != SL_SHARD_UNEVEN)
    return 0;
  uint64_t seg[4], total = 0;
  size_t k = sl__shard_segments(n, rank, world, policy, seg);
  for (size_t i = 0; i < k; i++)
    total += seg[2 * i + 1] - seg[2 * i];
  return total;
}

/* --- the environment -------------------------------------------------------
 */

static const struct {
  const char *rank, *world;
} k_launchers[] = {
    {"RANK", "WORLD_SIZE"},
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI_RANK", "PMI_SIZE"},
    {"PADDLE_TRAINER_ID", "PADDLE_TRAINERS_NUM"},
};

/* A decimal integer in [min, INT32_MAX], digits only. */
static int parse_env_int(const char *name, const char *v, int min, int *out) {
  size_t len = strlen(v);
  bool digits = len > 0 && len <= 10;
  for (size_t i = 0; i < len && digits; i++)
    digits = v[i] >= '0' && v[i] <= '9';
  long long x = digits ? strtoll(v, NULL, 10) : -1;
  SL_RETURN_ERROR_IF(!digits || x > INT32_MAX, SL_EINVAL,
                     "shard: %s='%s' is not a decimal integer", name, v);
  SL_RETURN_ERROR_IF(x < min, SL_EINVAL, "shard: %s=%lld must be at least %d",
                     name, x, min);
  *out = (int)x;
  return SL_OK;
}

int sl_shard_env(int *rank, int *world) {
  SL_RETURN_ERROR_IF(!rank || !world, SL_EINVAL, "shard: NULL out pointer");
  for (size_t i = 0; i < sizeof k_launchers / sizeof k_launchers[0]; i++) {
    const char *rn = k_launchers[i].rank, *wn = k_launchers[i].world;
    const char *rv = getenv(rn), *wv = getenv(wn);
    if (!rv && !wv) continue;
    SL_RETURN_ERROR_IF(!wv, SL_EINVAL,
                       "shard: %s is set (to '%s') but %s is not", rn, rv, wn);
    SL_RETURN_ERROR_IF(!rv, SL_EINVAL,
                       "shard: %s is set (to '%s') but %s is not", wn, wv, rn);
    int r, w;
    SL_FORWARD_IF_ERROR(parse_env_int(rn, rv, 0, &r));
    SL_FORWARD_IF_ERROR(parse_env_int(wn, wv, 1, &w));
    SL_RETURN_ERROR_IF(r >= w, SL_EINVAL, "shard: %s=%d is not below %s=%d", rn,
                       r, wn, w);
    *rank = r;
    *world = w;
    return SL_OK;
  }
  *rank = 0;
  *world = 1;
  return SL_OK;
}
