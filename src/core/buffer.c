/*
 * buffer.c - refcounted byte buffers.  A buffer from sl_buffer_new holds its
 * bytes in the same 64-byte-aligned block as its header (one allocation per
 * buffer); a wrapped buffer points at memory the caller allocated, possibly
 * on a device (sl_buffer_wrap_device: the double buffer's slots).  A buffer
 * made by a pool (buffer_pool.c) goes back to it on its last release,
 * through the recycle hook the pool sets: buffer.c knows no pools.
 */
#include "internal.h"

struct sl_buffer {
  sl__refcnt refs;
  size_t size;
  size_t cap; /* inline buffers: the bytes allocated (>= size) */
  sl__buffer_recycle_fn recycle; /* NULL, or what its last release calls */
  void *recycle_ud;
  void *data;
  sl_buffer_free_fn free_fn; /* NULL for inline data or static memory */
  void *ud;
  bool wrapped;
  sl_device_type device; /* where `data` lives: SL_DEVICE_CPU unless wrapped
                            with sl_buffer_wrap_device */
  int device_id;
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
  b->size = b->cap = size;
  b->recycle = NULL;
  b->data = (char *)b + SL_BUF_HDR;
  b->free_fn = NULL;
  b->ud = NULL;
  b->wrapped = false;
  b->device = SL_DEVICE_CPU;
  b->device_id = 0;
  return b;
}

sl_buffer *sl_buffer_new_zero(size_t size) {
  sl_buffer *b = sl_buffer_new(size);
  if (b && size) memset(b->data, 0, size);
  return b;
}

sl_buffer *sl_buffer_wrap(void *data, size_t size, sl_buffer_free_fn free_fn,
                          void *ud) {
  return sl_buffer_wrap_device(data, size, SL_DEVICE_CPU, 0, free_fn, ud);
}

sl_buffer *sl_buffer_wrap_device(void *data, size_t size, sl_device_type type,
                                 int device_id, sl_buffer_free_fn free_fn,
                                 void *ud) {
  if ((type != SL_DEVICE_CPU && type != SL_DEVICE_CUDA &&
       type != SL_DEVICE_CUDA_HOST) ||
      device_id < 0) {
    sl_set_error(SL_EINVAL, "buffer: bad device %d number %d", (int)type,
                 device_id);
    return NULL;
  }
  sl_buffer *b = sl__malloc(sizeof *b);
  if (!b) {
    sl_set_error(SL_ENOMEM, "buffer: cannot allocate a wrapper");
    return NULL;
  }
  sl__ref_init(&b->refs);
  b->size = b->cap = size;
  b->recycle = NULL;
  b->data = data;
  b->free_fn = free_fn;
  b->ud = ud;
  b->wrapped = true;
  b->device = type;
  b->device_id = device_id;
  return b;
}

sl_device_type sl_buffer_device(const sl_buffer *b, int *device_id) {
  if (device_id) *device_id = b ? b->device_id : 0;
  return b ? b->device : SL_DEVICE_CPU;
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
  if (b->recycle && b->recycle(b->recycle_ud, b)) return; /* kept */
  sl__buffer_free(b);
}

void sl__buffer_free(sl_buffer *b) {
  if (b->wrapped && b->free_fn) b->free_fn(b->ud, b->data);
  sl__free(b);
}

size_t sl__buffer_capacity(const sl_buffer *b) {
  return b->cap;
}

void sl__buffer_reuse(sl_buffer *b, size_t size) {
  sl__ref_init(&b->refs);
  b->size = size;
}

void sl__buffer_set_recycle(sl_buffer *b, sl__buffer_recycle_fn fn,
                            void *ud) {
  b->recycle = fn;
  b->recycle_ud = ud;
}
