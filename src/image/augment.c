/*
 * augment.c - sl_random_crop_flip: a random crop of a fixed size and a
 * random horizontal flip of a u8 [H, W, C] image field, drawn from a
 * counter-based key so that the result does not depend on thread timing.
 *
 * Draws: sample i of pass p (i counted from 0 in each pass, in the order
 * the stage receives its samples) uses epoch e = opts.epoch + p and a
 * xoshiro256** state seeded by splitmix64 from
 *   key = mix(mix(seed) ^ mix(e + GOLDEN) ^ mix(i + 2 * GOLDEN))
 * (mix = the splitmix64 finalizer of core/rng.h).  It draws, in this order,
 * top = bounded(H - h + 1), left = bounded(W - w + 1) (only when cropping)
 * and flip = the top bit of the next output (only when flipping).  The
 * stage runs on the consumer's thread; put it after an ordered stage
 * (decode_image's default) and the same (seed, epoch, i) gives the same
 * pixels for any number of decode threads, run after run.
 *
 * The output is a new buffer (the input may be shared with other samples);
 * every other field is passed on by reference.
 */
#include "core/rng.h"
#include "image/image.h"
#include "stages/stage.h"

typedef struct crop_state {
  sl_reader *up;
  sl_schema *schema;
  int field;
  uint32_t h, w; /* 0: no crop */
  bool flip;
  uint64_t seed, epoch, index;
  uint64_t epoch0; /* the epoch option: epoch = epoch0 + passes */
} crop_state;

static void seed_state(const crop_state *c, uint64_t index, uint64_t s[4]) {
  uint64_t key =
      sl__splitmix64_mix(sl__splitmix64_mix(c->seed) ^
                         sl__splitmix64_mix(c->epoch + SL__RNG_GOLDEN) ^
                         sl__splitmix64_mix(index + 2 * SL__RNG_GOLDEN));
  sl__rng_seed(s, key);
}

static int crop_next(void *st, sl_sample **out) {
  crop_state *c = st;
  sl_sample *in;
  int rc = sl_reader_next(c->up, &in);
  if (rc != SL_OK) return rc;
  uint64_t index = c->index++;
  const sl_tensor *t = sl_sample_at_const(in, c->field);
  if (t->dtype != SL_U8 || t->rank != 3) {
    char desc[64];
    sl_sample_release(in);
    return sl_set_error(SL_ESHAPE,
                        "random_crop_flip: sample %llu: field '%s' is %s, "
                        "not a u8[H,W,C] image",
                        (unsigned long long)index,
                        sl_schema_field_name(c->schema, c->field),
                        sl_tensor_describe(t, desc, sizeof desc));
  }
  uint32_t H = (uint32_t)t->shape[0], W = (uint32_t)t->shape[1],
           C = (uint32_t)t->shape[2];
  uint32_t h = c->h ? c->h : H, w = c->w ? c->w : W;
  if (h > H || w > W) {
    sl_sample_release(in);
    return sl_set_error(SL_ESHAPE,
                        "random_crop_flip: sample %llu: the image is %ux%u, "
                        "smaller than the %ux%u crop",
                        (unsigned long long)index, H, W, h, w);
  }
  uint64_t s[4];
  seed_state(c, index, s);
  uint32_t top = 0, left = 0;
  bool flip = false;
  if (c->h) {
    top = (uint32_t)sl__rng_bounded(s, (uint64_t)H - h + 1);
    left = (uint32_t)sl__rng_bounded(s, (uint64_t)W - w + 1);
  }
  if (c->flip) flip = (sl__xoshiro256ss(s) >> 63) != 0;

  sl_sample *res = sl_sample_new(c->schema);
  sl_tensor px = {0};
  int64_t shape[3] = {h, w, C};
  rc = res ? sl_tensor_alloc(&px, SL_U8, 3, shape) : SL_ENOMEM;
  if (rc == SL_OK) {
    const uint8_t *src = t->data;
    uint8_t *dst = px.data;
    for (uint32_t y = 0; y < h; y++) {
      const uint8_t *row = src + ((size_t)(top + y) * W + left) * C;
      uint8_t *o = dst + (size_t)y * w * C;
      if (!flip) {
        memcpy(o, row, (size_t)w * C);
      } else {
        for (uint32_t x = 0; x < w; x++)
          memcpy(o + (size_t)x * C, row + (size_t)(w - 1 - x) * C, C);
      }
    }
  }
  int n = sl_sample_nfields(in);
  for (int i = 0; i < n && rc == SL_OK; i++)
    if (i != c->field) rc = sl_sample_set(res, i, sl_sample_at_const(in, i));
  if (rc == SL_OK) rc = sl_sample_set_move(res, c->field, &px);
  sl_sample_release(in);
  if (rc < 0) {
    sl_tensor_clear(&px);
    sl_sample_release(res);
    if (rc == SL_ENOMEM)
      sl_set_error(rc, "random_crop_flip: sample %llu: cannot allocate",
                   (unsigned long long)index);
    return rc;
  }
  *out = res;
  return SL_OK;
}

static int crop_reset(void *st) {
  crop_state *c = st;
  c->index = 0;
  c->epoch++;
  return sl_reader_reset(c->up);
}

static void crop_destroy(void *st) {
  crop_state *c = st;
  if (c) sl__stage_free(c, c->up, c->schema);
}

/* A pure function of (seed, epoch, index): the position is all. */
static int crop_restore(sl_reader *r, void *st, uint64_t pass, uint64_t k,
                        sl__state_in *in) {
  crop_state *c = st;
  SL_FORWARD_IF_ERROR(sl__state_restore_up(in, c->up));
  c->index = k;
  c->epoch = c->epoch0 + pass;
  return SL_OK;
}

static void crop_identity(const sl_reader *r, void *st, char *buf, size_t cap) {
  const crop_state *c = st;
  snprintf(buf, cap, "field=%d crop=%ux%u flip=%d seed=%llu epoch=%llu",
           c->field, c->h, c->w, c->flip ? 1 : 0, (unsigned long long)c->seed,
           (unsigned long long)c->epoch0);
}

static const sl__stage_ops crop_ops = {
    .name = "random_crop_flip",
    .next = crop_next,
    .reset = crop_reset,
    .destroy = crop_destroy,
    .length = sl__length_of_upstream,
    .save = sl__state_save_1to1,
    .restore = crop_restore,
    .identity = crop_identity,
};

int sl_random_crop_flip(sl_reader *up, const sl_crop_flip_opts *opts,
                        sl_reader **out) {
  SL_DECORATOR_ARGS("random_crop_flip", up, out);
  sl_crop_flip_opts o = SL_CROP_FLIP_OPTS_INIT;
  SL_FORWARD_IF_ERROR(
      sl__decorator_opts(up, "sl_crop_flip_opts", &o, sizeof o, opts));
  const char *fname = o.field ? o.field : "image";
  const sl_schema *us = sl_reader_schema(up);
  int field = sl__image_field("random_crop_flip", us, fname);
  int rc = SL_OK;
  if (field < 0) {
    rc = field;
  } else if (sl_schema_field_dtype(us, field) != SL_U8 ||
             sl_schema_field_rank(us, field) != 3) {
    rc = sl_set_error(SL_ESHAPE,
                      "random_crop_flip: field '%s' must be u8[H,W,C] (decode "
                      "the images first)",
                      fname);
  } else if ((o.height == 0) != (o.width == 0) || o.height > 65535 ||
             o.width > 65535) {
    rc = sl_set_error(SL_EINVAL,
                      "random_crop_flip: the crop needs both a height and a "
                      "width (1..65535), or neither (got %ux%u)",
                      o.height, o.width);
  }
  if (rc < 0) return sl__fail_with_upstream(up, rc);
  crop_state *c = sl__decorator_state("random_crop_flip", up, sizeof *c);
  if (!c) return SL_ENOMEM;
  c->field = field;
  c->h = o.height;
  c->w = o.width;
  c->flip = o.flip != 0;
  c->seed = o.seed;
  c->epoch = c->epoch0 = o.epoch;
  const int64_t *ush = sl_schema_field_shape(us, field);
  int64_t dims[3] = {o.height ? (int64_t)o.height : ush[0],
                     o.width ? (int64_t)o.width : ush[1], ush[2]};
  rc = sl__schema_with_field(us, field, SL_U8, 3, dims, &c->schema);
  if (rc < 0) {
    crop_destroy(c);
    return sl_wrap_error(rc, "random_crop_flip");
  }
  return sl__stage_wrap(&crop_ops, c, c->schema, &c->up, NULL, out);
}
