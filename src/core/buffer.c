/*
 * buffer.c - refcounted byte buffers.  A buffer from sl_buffer_new holds its
 * bytes in the same 64-byte-aligned block as its header (one allocation per
 * buffer); a wrapped buffer points at memory the caller allocated.
 */
#include "internal.h"

struct sl_buffer {
  sl__refcnt refs;
  size_t size;
  void *data;
  sl_buffer_free_fn free_fn; /* NULL for inline data or static memory */
  void *ud;
  bool wrapped;
};

/* The header is padded so inline data starts 64-byte aligned. */
#define SL_BUF_HDR ((sizeof(struct sl_buffer) + 63) & ~(size_t)63)

sl_buffer *sl_buffer_new(size_t size) {
  if (size > SIZE_MAX - SL_BUF_HDR) {
    sl_set_error(SL_ENOMEM, "buffer: %zu bytes is too large", size);
    return NULL;
  }
  sl_buffer *b = sl__aligned_alloc(64, SL_BUF_HDR + size);
  if (!b) {
    sl_set_error(SL_ENOMEM, "buffer: cannot allocate %zu bytes", size);
    return NULL;
  }
  sl__ref_init(&b->refs);
  b->size = size;
  b->data = (char *)b + SL_BUF_HDR;
  b->free_fn = NULL;
  b->ud = NULL;
  b->wrapped = false;
  return b;
}

sl_buffer *sl_buffer_new_zero(size_t size) {
  sl_buffer *b = sl_buffer_new(size);
  if (b && size) memset(b->data, 0, size);
  return b;
}

sl_buffer *sl_buffer_wrap(void *data, size_t size, sl_buffer_free_fn free_fn,
                          void *ud) {
  sl_buffer *b = sl__malloc(sizeof *b);
  if (!b) {
    sl_set_error(SL_ENOMEM, "buffer: cannot allocate a wrapper");
    return NULL;
  }
  sl__ref_init(&b->refs);
  b->size = size;
  b->data = data;
  b->free_fn = free_fn;
  b->ud = ud;
  b->wrapped = true;
  return b;
}

void *sl_buffer_data(const sl_buffer *b) {
  return b ? b->data : NULL;
}

size_t sl_buffer_size(const sl_buffer *b) {
  return b ? b->size : 0;
}

int sl__buffer_refcount(const sl_buffer *b) {
  return b ? atomic_load_explicit(&((sl_buffer *)b)->refs, memory_order_acquire)
           : 0;
}

sl_buffer *sl_buffer_retain(sl_buffer *b) {
  if (b) sl__ref_inc(&b->refs);
  return b;
}

void sl_buffer_release(sl_buffer *b) {
  if (!b || !sl__ref_dec(&b->refs)) return;
  if (b->wrapped && b->free_fn) b->free_fn(b->ud, b->data);
  sl__free(b);
}
