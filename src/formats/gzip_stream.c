/*
 * gzip_stream.c - a gzip file inflated as it is read (gzip_stream.h).
 *
 * zlib's inflate with gzip framing (windowBits 15 + 16) over a fixed input
 * block refilled from the source by read_at, in order.  When a member ends
 * (Z_STREAM_END: its CRC-32 and length trailer checked by zlib), the next
 * bytes must be another member's magic, or nothing: inflateReset starts
 * the next.  zlib's gzread would stop quietly at trailing garbage, and an
 * inflate over a whole buffer stops after the first member; both lose
 * data without a word, which is what this module is for.
 */
#include "formats/gzip_stream.h"

#include <zlib.h>

/* Compressed bytes read from the source at a time. */
#define GZ_IN_BLOCK ((size_t)64 << 10)

struct sl__gz {
  sl__source *src;
  z_stream zs;
  uint64_t in_off;  /* source offset of the next byte read into in[] */
  uint64_t out_off; /* stream bytes produced */
  uint64_t members; /* members started */
  bool member_end;  /* between members (or before the first) */
  bool eof;         /* the last member ended and nothing follows */
  int failed;       /* the error every read repeats, or SL_OK */
  char why[400];
  size_t zbytes; /* what zlib allocated through gz_alloc, now */
  unsigned char in[GZ_IN_BLOCK];
};

/* zlib's allocator: each block prefixed by its size, counted in zbytes. */
#define GZ_HDR ((size_t)16) /* keeps malloc's alignment for the block */

static voidpf gz_alloc(voidpf opaque, uInt items, uInt size) {
  sl__gz *g = opaque;
  size_t n = (size_t)items * size;
  if (size && n / size != items) return Z_NULL;
  unsigned char *p = sl__malloc(n + GZ_HDR);
  if (!p) return Z_NULL;
  memcpy(p, &n, sizeof n);
  g->zbytes += n;
  return p + GZ_HDR;
}

static void gz_free(voidpf opaque, voidpf addr) {
  sl__gz *g = opaque;
  if (!addr) return;
  unsigned char *p = (unsigned char *)addr - GZ_HDR;
  size_t n;
  memcpy(&n, p, sizeof n);
  g->zbytes -= n;
  sl__free(p);
}

uint64_t sl__gz_held(const sl__gz *g) {
  return g ? sizeof *g + g->zbytes + sl__source_held(g->src) : 0;
}

/* Fails the stream with `code` and a message naming the source and the
 * compressed offset where the trouble is. */
static int fail(sl__gz *g, int code, uint64_t at, const char *why) {
  snprintf(g->why, sizeof g->why,
           "%s: gzip: %s (compressed offset %llu, stream offset %llu)",
           g->src->name, why, (unsigned long long)at,
           (unsigned long long)g->out_off);
  g->failed = code;
  return sl_set_error(code, "%s", g->why);
}

/* The compressed offset of the next byte inflate will take. */
static uint64_t in_pos(const sl__gz *g) {
  return g->in_off - g->zs.avail_in;
}

/* More compressed bytes after those unread in in[]; *more false at the
 * source's end. */
static int refill(sl__gz *g, bool *more) {
  size_t have = g->zs.avail_in;
  if (have && g->zs.next_in != g->in) memmove(g->in, g->zs.next_in, have);
  g->zs.next_in = g->in;
  uint64_t left = g->src->size - g->in_off;
  size_t want = (size_t)SL_MIN((uint64_t)(GZ_IN_BLOCK - have), left);
  *more = want > 0;
  if (!want) return SL_OK;
  int rc = g->src->read_at(g->src, g->in_off, g->in + have, want);
  if (rc < 0) {
    snprintf(g->why, sizeof g->why, "%s", sl_last_error());
    g->failed = rc;
    return rc;
  }
  g->in_off += want;
  g->zs.avail_in = (uInt)(have + want);
  return SL_OK;
}

/* Between members: the next one starts, or the stream ends. */
static int next_member(sl__gz *g) {
  bool more = true;
  while (g->zs.avail_in < 2 && more)
    SL_FORWARD_IF_ERROR(refill(g, &more));
  if (g->zs.avail_in == 0) {
    g->eof = true;
    return SL_OK;
  }
  if (g->zs.avail_in < 2 || g->zs.next_in[0] != 0x1f ||
      g->zs.next_in[1] != 0x8b) {
    char why[160];
    uint64_t at = in_pos(g);
    snprintf(why, sizeof why,
             g->members ? "%llu bytes after the last member are not another "
                          "gzip member (trailing garbage)"
                        : "not a gzip file (%llu bytes without the 1f 8b "
                          "magic)",
             (unsigned long long)(g->src->size - at));
    return fail(g, SL_ECORRUPT, at, why);
  }
  inflateReset(&g->zs);
  g->member_end = false;
  g->members++;
  return SL_OK;
}

int sl__gz_read(sl__gz *g, void *buf, size_t n, size_t *got) {
  *got = 0;
  if (g->failed) return sl_set_error(g->failed, "%s", g->why);
  unsigned char *out = buf;
  while (*got < n && !g->eof) {
    if (g->member_end) {
      SL_FORWARD_IF_ERROR(next_member(g));
      continue;
    }
    if (g->zs.avail_in == 0) {
      bool more;
      SL_FORWARD_IF_ERROR(refill(g, &more));
      if (!more)
        return fail(g, SL_ECORRUPT, g->in_off,
                    "the stream is cut short inside a member");
    }
    size_t step = SL_MIN(n - *got, (size_t)UINT32_MAX);
    g->zs.next_out = out + *got;
    g->zs.avail_out = (uInt)step;
    int z = inflate(&g->zs, Z_NO_FLUSH);
    size_t made = step - g->zs.avail_out;
    *got += made;
    g->out_off += made;
    if (z == Z_STREAM_END) {
      g->member_end = true;
    } else if (z == Z_MEM_ERROR) {
      return fail(g, SL_ENOMEM, in_pos(g), "out of memory");
    } else if (z != Z_OK && z != Z_BUF_ERROR) {
      return fail(g, SL_ECORRUPT, in_pos(g),
                  g->zs.msg ? g->zs.msg : "bad deflate data");
    }
  }
  return SL_OK;
}

int sl__gz_skip(sl__gz *g, uint64_t n, uint64_t *got) {
  unsigned char scratch[16 << 10];
  *got = 0;
  while (*got < n) {
    size_t k, want = (size_t)SL_MIN(n - *got, (uint64_t)sizeof scratch);
    SL_FORWARD_IF_ERROR(sl__gz_read(g, scratch, want, &k));
    *got += k;
    if (k < want) break;
  }
  return SL_OK;
}

void sl__gz_rewind(sl__gz *g) {
  inflateReset(&g->zs);
  g->zs.avail_in = 0;
  g->zs.next_in = g->in;
  g->in_off = g->out_off = g->members = 0;
  g->member_end = true;
  g->eof = false;
  g->failed = SL_OK;
  g->why[0] = 0;
}

int sl__gz_open(sl__source *src, sl__gz **out) {
  *out = NULL;
  sl__gz *g = sl__calloc(1, sizeof *g);
  if (g) {
    g->zs.zalloc = gz_alloc;
    g->zs.zfree = gz_free;
    g->zs.opaque = g;
  }
  if (!g || inflateInit2(&g->zs, 15 + 16) != Z_OK) {
    sl__free(g);
    int rc = sl_set_error(SL_ENOMEM, "%s: gzip: out of memory", src->name);
    sl__source_close(src);
    return rc;
  }
  g->src = src;
  sl__gz_rewind(g);
  *out = g;
  return SL_OK;
}

void sl__gz_close(sl__gz *g) {
  if (!g) return;
  inflateEnd(&g->zs);
  sl__source_close(g->src);
  sl__free(g);
}
