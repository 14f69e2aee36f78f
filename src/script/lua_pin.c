/*
 * lua_pin.c - what a sample seen by Lua pins, and compact copies of
 * samples (lua_host.h).
 *
 * Samples are zero-copy: a record decoded from an SLR chunk is a view into
 * the chunk's buffer, so one small sample kept alive keeps the whole chunk
 * (megabytes) alive.  Lua's collector counts only Lua memory: a loop whose
 * Lua garbage is a few small tables may hold gigabytes of C memory through
 * them before a cycle runs.  Pipeline:next (lua/sluice/init.lua) therefore
 * passes each sample through sl__lua_sample_account, which adds the size of
 * every buffer not seen lately to a per-state counter, and turns that
 * counter into collector steps (docs/LUA.md, "Lifetime").
 *
 * Cost: one call per sample instead of sl_sample_nbytes (which it also
 * returns), a loop over the fields comparing each buffer with the last
 * SL__LUA_PIN_SLOTS counted ones; sl_buffer_size only for a new buffer.
 *
 * sl__lua_sample_clone is sluice.clone: one buffer holding every field's
 * data and LoD offsets, each at a 64-byte aligned offset.
 *
 * sl__lua_buffer_new: the buffers of Lua-made tensors, from one pool
 * (core/buffer_pool.c) made at the first call and kept for the process.
 */
#include "core/internal.h"
#include "script/lua_host.h"

#include <pthread.h>

#define LUA_POOL_IDLE 1024
#define LUA_POOL_IDLE_BYTES ((size_t)32 << 20)
#define LUA_POOL_MAX_BUFFER ((size_t)1 << 20) /* larger: plain buffers */

static sl__buffer_pool *lua_pool;
static pthread_once_t lua_pool_once = PTHREAD_ONCE_INIT;

static void lua_pool_make(void) {
  lua_pool = sl__buffer_pool_new(LUA_POOL_IDLE, LUA_POOL_IDLE_BYTES);
}

static _Thread_local uint64_t tl_made; /* sl__lua_buffers_made */

uint64_t sl__lua_buffers_made(void) {
  uint64_t n = tl_made;
  tl_made = 0;
  return n;
}

sl_buffer *sl__lua_buffer_new(size_t size, int zero) {
  tl_made += size;
  if (size == 0 || size > LUA_POOL_MAX_BUFFER)
    return zero ? sl_buffer_new_zero(size) : sl_buffer_new(size);
  pthread_once(&lua_pool_once, lua_pool_make);
  if (!lua_pool) return zero ? sl_buffer_new_zero(size) : sl_buffer_new(size);
  sl_buffer *b = sl__buffer_pool_get(lua_pool, size);
  if (b && zero) memset(sl_buffer_data(b), 0, size);
  return b;
}

#define ALIGN 64

static size_t up_align(size_t n) {
  return (n + (ALIGN - 1)) & ~(size_t)(ALIGN - 1);
}

static void count_buffer(const sl_buffer *b, sl__lua_pins *pins) {
  if (!b) return;
  for (int k = 0; k < SL__LUA_PIN_SLOTS; k++)
    if (pins->last[k] == b) return;
  pins->last[pins->next] = b;
  pins->next = (pins->next + 1) % SL__LUA_PIN_SLOTS;
  if (pins->total) *pins->total += (double)sl_buffer_size(b);
}

size_t sl__lua_sample_account(const sl_sample *s, sl__lua_pins *pins) {
  if (!s) return 0;
  size_t n = 0;
  int nf = sl_sample_nfields(s);
  for (int i = 0; i < nf; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    n += t->nbytes + (t->lod ? (size_t)t->lod_len * sizeof(int64_t) : 0);
    if (pins) {
      count_buffer(t->buf, pins);
      if (t->lod) count_buffer(t->lod_buf, pins);
    }
  }
  return n;
}

sl_sample *sl__lua_sample_clone(const sl_sample *s) {
  if (!s) {
    sl_set_error(SL_EINVAL, "clone: NULL sample");
    return NULL;
  }
  int nf = sl_sample_nfields(s);
  size_t total = 0;
  for (int i = 0; i < nf; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    total += up_align(t->nbytes);
    if (t->lod) total += up_align((size_t)t->lod_len * sizeof(int64_t));
  }
  sl_sample *q = sl_sample_new((sl_schema *)sl_sample_schema(s));
  sl_buffer *b = total ? sl_buffer_new(total) : NULL;
  if (!q || (total && !b)) {
    sl_sample_release(q);
    sl_buffer_release(b);
    sl_set_error(SL_ENOMEM, "clone: cannot allocate %zu bytes", total);
    return NULL;
  }
  char *base = b ? sl_buffer_data(b) : NULL;
  size_t off = 0;
  int rc = SL_OK;
  for (int i = 0; i < nf && rc == SL_OK; i++) {
    const sl_tensor *t = sl_sample_at_const(s, i);
    sl_tensor c;
    memset(&c, 0, sizeof c);
    if (t->nbytes) {
      rc = sl_tensor_view(&c, t->dtype, t->rank, t->shape, b, off);
      if (rc == SL_OK) memcpy(base + off, t->data, t->nbytes);
      off += up_align(t->nbytes);
    } else {
      c.dtype = t->dtype;
      c.rank = t->rank;
      memcpy(c.shape, t->shape, sizeof c.shape);
    }
    if (rc == SL_OK && t->lod) {
      size_t lb = (size_t)t->lod_len * sizeof(int64_t);
      memcpy(base + off, t->lod, lb);
      rc = sl_tensor_set_lod(&c, b, (const int64_t *)(void *)(base + off),
                             t->lod_len);
      off += up_align(lb);
    }
    if (rc == SL_OK) rc = sl_sample_set_move(q, i, &c);
    sl_tensor_clear(&c);
  }
  sl_buffer_release(b); /* the fields hold it now */
  if (rc < 0) {
    sl_sample_release(q);
    sl_wrap_error(rc, "clone");
    return NULL;
  }
  return q;
}
