/*
 * shard.c - sl_shard: one rank's share of any reader (tf.data's shard, with
 * PyTorch DistributedSampler's remainder policies).
 *
 * Protocol.  Upstream sample i of a pass (counted from 0) belongs to rank
 * i % world; the stage reads the whole upstream pass and yields its rank's
 * samples in order, releasing the others.  The remainder policy says what
 * happens to the last n % world samples of a pass of n:
 *
 *   SL_SHARD_UNEVEN (default, tf.data)  ranks r < n % world yield one more:
 *       floor(n/world) + (r < n % world) samples.  No length is needed.
 *   SL_SHARD_DROP (DistributedSampler drop_last)  every rank yields
 *       floor(n/world): only complete groups [j*world, (j+1)*world) count,
 *       so the ranks together yield no sample twice.  A rank's sample of
 *       group j goes out when the group's last sample has been read (it is
 *       held until then; at most one sample held), so no length is needed.
 *   SL_SHARD_PAD (DistributedSampler's default)  every rank yields
 *       ceil(n/world): the pass is extended by wrapping around to its first
 *       samples (position p >= n is sample p mod n), and rank r takes
 *       positions r, r + world, ... of the extension.  A rank owes at most
 *       one wrapped sample (its last), sample t = (r + (Q-1)*world) mod n;
 *       the stage keeps a reference to sample t when it passes and yields
 *       it after upstream's end.  The rank needs n before the pass ends to
 *       know t: sl_reader_length of upstream at construction (SL_EUNSUPPORTED
 *       saying so when unknown); a pass of another length is SL_ECORRUPT.
 *
 * Save/restore.  Output k of a rank maps to an upstream position u where
 * the restored stage resumes reading: 0 for k = 0, r + (k-1)*world + 1
 * after k outputs (uneven, pad), k*world (drop: group k-1 complete).  A pad
 * rank that still owes its wrapped sample t but resumes past t (u > t)
 * restores upstream at t instead, keeps sample t and drops samples up to u:
 * that restore reads u - t samples (documented cost; below an order that is
 * not reproducible it is refused, sl__state_save_up_replayed).  After the
 * wrapped sample went out the position is upstream's end.
 *
 * Reset releases what is held and resets upstream.  Threads: none of its
 * own; single consumer like every reader.
 */
#include "stages/stage.h"

typedef struct shard_state {
  sl_reader *up;
  uint64_t world, rank;
  sl_shard_policy policy;
  uint64_t n;       /* pad: upstream's length at construction */
  uint64_t wrap_at; /* pad: the wrapped sample t, UINT64_MAX: none owed */
  uint64_t pos;     /* upstream samples read this pass */
  sl_sample *held;  /* drop: this rank's sample of the group being read */
  sl_sample *wrap;  /* pad: sample wrap_at, kept until upstream ends */
  bool wrap_done;   /* pad: the wrapped sample went out this pass */
} shard_state;

static const char *policy_name(sl_shard_policy p) {
  return p == SL_SHARD_PAD ? "pad" : p == SL_SHARD_DROP ? "drop" : "uneven";
}

/* Samples rank r yields from a pass of n (all policies). */
static uint64_t share(const shard_state *s, uint64_t n) {
  uint64_t q = n / s->world, rem = n % s->world;
  switch (s->policy) {
  case SL_SHARD_DROP:
    return q;
  case SL_SHARD_PAD:
    return q + (rem != 0);
  default:
    return q + (s->rank < rem);
  }
}

static void drop_held(shard_state *s) {
  sl_sample_release(s->held);
  sl_sample_release(s->wrap);
  s->held = s->wrap = NULL;
}

static int shard_end(shard_state *s, sl_sample **out) {
  sl_sample_release(s->held);
  s->held = NULL;
  if (s->policy != SL_SHARD_PAD) return SL_EOF;
  SL_RETURN_ERROR_IF(
      s->pos != s->n, SL_ECORRUPT,
      "shard: upstream '%s' yielded %llu samples this pass, but its length "
      "was %llu when the shard was made (remainder \"pad\" needs a fixed "
      "length)",
      sl_reader_name(s->up), (unsigned long long)s->pos,
      (unsigned long long)s->n);
  if (s->wrap_at == UINT64_MAX || s->wrap_done) return SL_EOF;
  SL_RETURN_ERROR_IF(
      !s->wrap, SL_ECORRUPT, "shard: rank %llu lost its wrapped sample %llu",
      (unsigned long long)s->rank, (unsigned long long)s->wrap_at);
  s->wrap_done = true;
  *out = s->wrap;
  s->wrap = NULL;
  return SL_OK;
}

static int shard_next(void *st, sl_sample **out) {
  shard_state *s = st;
  for (;;) {
    sl_sample *x;
    int rc = sl_reader_next(s->up, &x);
    if (rc == SL_EOF) return shard_end(s, out);
    if (rc != SL_OK) return rc;
    uint64_t i = s->pos++, slot = i % s->world;
    if (i == s->wrap_at) s->wrap = sl_sample_retain(x);
    if (slot != s->rank) {
      sl_sample_release(x);
    } else if (s->policy != SL_SHARD_DROP) {
      *out = x;
      return SL_OK;
    } else {
      s->held = x;
    }
    /* drop: the group is complete, so its sample for this rank counts. */
    if (s->held && slot == s->world - 1) {
      *out = s->held;
      s->held = NULL;
      return SL_OK;
    }
  }
}

static int shard_reset(void *st) {
  shard_state *s = st;
  drop_held(s);
  s->pos = 0;
  s->wrap_done = false;
  return sl_reader_reset(s->up);
}

static void shard_destroy(void *st) {
  shard_state *s = st;
  if (!s) return;
  drop_held(s);
  sl__stage_free(s, s->up, NULL);
}

static int shard_length(const sl_reader *r, void *st, uint64_t *n) {
  shard_state *s = st;
  uint64_t up;
  SL_FORWARD_IF_ERROR(sl__upstream_length(r, 0, &up));
  *n = share(s, up);
  return SL_OK;
}

/* Restore modes (the payload's second word). */
enum { AT_U, WRAP_FIRST, WRAP_DONE };

/* Payload: u (the upstream position to resume at) and a mode; see the
 * banner. */
static int shard_save(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                      sl__state_out *w) {
  shard_state *s = st;
  uint64_t u, mode = AT_U, up_pass = sl__state_up_pass(r, s->up, pass);
  if (s->policy == SL_SHARD_DROP) {
    u = k * s->world;
  } else {
    u = k == 0 ? 0 : s->rank + (k - 1) * s->world + 1;
  }
  if (s->policy == SL_SHARD_PAD && s->wrap_at != UINT64_MAX) {
    if (k >= share(s, s->n)) {
      mode = WRAP_DONE;
      u = s->n;
    } else if (u > s->wrap_at) {
      mode = WRAP_FIRST;
    }
  }
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, u));
  SL_FORWARD_IF_ERROR(sl__state_put_u64(w, mode));
  if (mode == WRAP_FIRST)
    return sl__state_save_up_replayed(w, s->up, up_pass, s->wrap_at);
  return sl__state_save_up(w, s->up, up_pass, u);
}

static int shard_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                         sl__state_in *in) {
  shard_state *s = st;
  uint64_t u, mode;
  drop_held(s);
  s->wrap_done = false;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, s->up));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &u));
  SL_FORWARD_IF_ERROR(sl__state_get_u64(in, &mode));
  SL_RETURN_ERROR_IF(
      mode > WRAP_DONE ||
          (mode == WRAP_FIRST && (s->wrap_at == UINT64_MAX || u <= s->wrap_at)),
      SL_ECORRUPT, "restore: shard: bad position %llu/%llu",
      (unsigned long long)u, (unsigned long long)mode);
  s->wrap_done = mode == WRAP_DONE;
  s->pos = u;
  if (mode != WRAP_FIRST) return SL_OK;
  sl_sample *x;
  int rc = sl_reader_next(s->up, &x);
  SL_RETURN_ERROR_IF(rc == SL_EOF, SL_ECORRUPT,
                     "restore: shard: upstream '%s' ended before sample %llu",
                     sl_reader_name(s->up), (unsigned long long)s->wrap_at);
  SL_FORWARD_IF_ERROR(rc);
  s->wrap = x;
  return sl__state_skip(s->up, u - s->wrap_at - 1, "shard");
}

static void shard_identity(const sl_reader *r, void *st, char *buf,
                           size_t cap) {
  shard_state *s = st;
  snprintf(buf, cap, "world=%llu rank=%llu remainder=%s",
           (unsigned long long)s->world, (unsigned long long)s->rank,
           policy_name(s->policy));
}

static const sl__stage_ops shard_ops = {
    .name = "shard",
    .next = shard_next,
    .reset = shard_reset,
    .destroy = shard_destroy,
    .length = shard_length,
    .save = shard_save,
    .restore = shard_restore,
    .identity = shard_identity,
};

int sl_shard(sl_reader *up, int world, int rank, const sl_shard_opts *opts,
             sl_reader **out) {
  SL_DECORATOR_ARGS("shard", up, out);
  if (opts && opts->size != sizeof *opts)
    return sl__fail_with_upstream(
        up,
        sl_set_error(opts->size > sizeof *opts ? SL_EUNSUPPORTED : SL_EINVAL,
                     "shard: options of size %zu, this library's are %zu "
                     "(initialise them with SL_SHARD_OPTS_INIT)",
                     opts->size, sizeof *opts));
  sl_shard_policy policy = opts ? opts->remainder : SL_SHARD_UNEVEN;
  if (policy != SL_SHARD_PAD && policy != SL_SHARD_DROP &&
      policy != SL_SHARD_UNEVEN)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "shard: remainder %d is not SL_SHARD_PAD, "
                         "SL_SHARD_DROP or SL_SHARD_UNEVEN",
                         (int)policy));
  if (world < 1)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL,
                         "shard: world %d must be >= 1 (sl_shard_env reads "
                         "the launcher's)",
                         world));
  if (rank < 0 || rank >= world)
    return sl__fail_with_upstream(
        up, sl_set_error(SL_EINVAL, "shard: rank %d is not in [0, world %d)",
                         rank, world));
  uint64_t n = 0;
  if (policy == SL_SHARD_PAD) {
    int rc = sl_reader_length(up, &n);
    if (rc < 0)
      return sl__fail_with_upstream(
          up, sl_wrap_error(rc,
                            "shard: remainder \"pad\" needs the length of "
                            "upstream '%s' (use \"uneven\" or \"drop\", "
                            "which do not)",
                            sl_reader_name(up)));
  }
  shard_state *s = sl__decorator_state("shard", up, sizeof *s);
  if (!s) return SL_ENOMEM;
  s->world = (uint64_t)world;
  s->rank = (uint64_t)rank;
  s->policy = policy;
  s->n = n;
  s->wrap_at = UINT64_MAX;
  if (policy == SL_SHARD_PAD && n % s->world != 0) {
    uint64_t last = s->rank + (share(s, n) - 1) * s->world;
    if (last >= n) s->wrap_at = last % n;
  }
  return sl__stage_wrap(&shard_ops, s, NULL, &s->up, NULL, out);
}
