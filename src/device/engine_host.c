/*
 * engine_host.c - the host copy engine: the ring's slots are plain host
 * memory (SL_SLOT_ALIGN-aligned blocks, allocated on a slot's first batch
 * and grown only when a batch does not fit), and the ring's memcpy into
 * them is the whole copy, so upload, acquire and release have nothing to
 * order.  It runs the same protocol as the CUDA engine: the ring's tests
 * use it, and it is what device "cpu" (or "auto" without CUDA) gives.
 */
#include "device/device.h"

static int host_thread_init(sl__copy_engine *e) {
  return SL_OK;
}

static int host_reserve(sl__copy_engine *e, sl__slot_mem *m, size_t host_bytes,
                        size_t dev_bytes) {
  size_t need = SL_MAX(host_bytes, dev_bytes);
  if (m->host && m->host_cap >= need) return SL_OK;
  size_t cap = sl__slot_grow(m->host_cap, need);
  SL_RETURN_ERROR_IF(!cap, SL_ENOMEM, "host: a slot of %zu bytes", need);
  /* The slot is free: nothing points into the old block. */
  void *p = sl__aligned_alloc(SL_SLOT_ALIGN, cap);
  SL_RETURN_ERROR_IF(!p, SL_ENOMEM, "host: cannot allocate a slot of %zu bytes",
                     cap);
  sl__free(m->host);
  m->host = m->dev = p;
  m->host_cap = m->dev_cap = cap;
  return SL_OK;
}

static int host_nothing(sl__copy_engine *e, sl__slot_mem *m) {
  return SL_OK;
}

static int host_upload(sl__copy_engine *e, sl__slot_mem *m, size_t n) {
  return SL_OK;
}

static void host_release(sl__copy_engine *e, sl__slot_mem *m) {}

static void host_free_slot(sl__copy_engine *e, sl__slot_mem *m) {
  sl__free(m->host);
  memset(m, 0, sizeof *m);
}

static void host_destroy(sl__copy_engine *e) {
  sl__free(e);
}

static const sl__copy_ops host_ops = {
    "host",       host_thread_init, host_reserve,   host_nothing, host_upload,
    host_nothing, host_release,     host_free_slot, host_destroy};

int sl__copy_host_open(sl__copy_engine **out) {
  sl__copy_engine *e = sl__calloc(1, sizeof *e);
  *out = NULL;
  SL_RETURN_ERROR_IF(!e, SL_ENOMEM, "host: cannot allocate the engine");
  e->ops = &host_ops;
  e->type = SL_DEVICE_CPU;
  e->device_id = 0;
  e->same = true;
  *out = e;
  return SL_OK;
}
