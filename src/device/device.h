/*
 * device.h - the copy-engine interface shared by the double buffer's ring
 * (ring.c) and its engines (engine_host.c, engine_cuda.c), the device-name
 * parser (select.c), and the CUDA runtime loader (cuda_loader.c).
 *
 * An engine moves one batch at a time from host staging memory into the
 * memory the consumer reads.  The ring (ring.c) owns the slots and the
 * protocol; an engine owns only memory and ordering:
 *
 *   reserve   make a slot hold `host_bytes` of staging and `dev_bytes` of
 *             device memory (allocated on a slot's first batch, grown only
 *             when a batch does not fit);
 *   begin     wait until the slot's staging is no longer read by the
 *             previous copy out of it, so the ring may overwrite it;
 *   upload    copy the first `n` staging bytes into device memory, ordered
 *             after the consumer's last use of the slot (release);
 *   acquire   on the consumer's thread, when the slot's batch is handed out:
 *             order the consumer's work after the copy;
 *   release   on any thread, when the last reference to the slot's batch
 *             goes: remember the consumer's use, for the next upload;
 *   free_slot, destroy  when the ring dies (the last batch released).
 *
 * For the host engine staging and device memory are one block (`same`), so
 * upload, acquire and release do nothing: the ring's memcpy into the slot is
 * the copy.
 */
#ifndef SLUICE_DEVICE_H
#define SLUICE_DEVICE_H

#include "core/internal.h"

/* Alignment of every field's data inside a slot: what CUDA's allocator
 * guarantees and DLPack asks of data pointers. */
#define SL_SLOT_ALIGN 256

/* The memory of one slot.  `host` is staging (the ring writes it); `dev` is
 * what the consumer's tensors point at.  Written by the worker while it
 * fills the slot; read-only while the slot's batch is out. */
typedef struct sl__slot_mem {
  void *host;
  size_t host_cap;
  void *dev;
  size_t dev_cap;
  void *priv; /* the engine's per-slot state (events), NULL until reserve */
} sl__slot_mem;

/* The capacity a slot grows to so it holds `need` bytes (`cap` has less):
 * at least half again as much as before, so that slowly growing (ragged)
 * batches reallocate rarely, rounded up to 4 KiB.  0 on overflow. */
static inline size_t sl__slot_grow(size_t cap, size_t need) {
  size_t want = cap + cap / 2;
  if (want < cap || want < need) want = need;
  if (want > SIZE_MAX - 4095) return 0;
  want = (want + 4095) & ~(size_t)4095;
  return want ? want : 4096;
}

typedef struct sl__copy_engine sl__copy_engine;

typedef struct sl__copy_ops {
  const char *name; /* "host", "cuda" */
  /* Worker thread, once before its first batch (binds the device). */
  int (*thread_init)(sl__copy_engine *e);
  int (*reserve)(sl__copy_engine *e, sl__slot_mem *m, size_t host_bytes,
                 size_t dev_bytes);
  int (*begin)(sl__copy_engine *e, sl__slot_mem *m);
  int (*upload)(sl__copy_engine *e, sl__slot_mem *m, size_t n);
  int (*acquire)(sl__copy_engine *e, sl__slot_mem *m);
  /* Cannot fail: an engine that cannot record the use falls back to a full
   * synchronisation before the slot's next upload. */
  void (*release)(sl__copy_engine *e, sl__slot_mem *m);
  void (*free_slot)(sl__copy_engine *e, sl__slot_mem *m);
  void (*destroy)(sl__copy_engine *e);
} sl__copy_ops;

struct sl__copy_engine {
  const sl__copy_ops *ops;
  sl_device_type type; /* of `dev` memory */
  int device_id;
  bool same; /* staging and device memory are one block */
};

/* The host engine (never fails but for SL_ENOMEM). */
int sl__copy_host_open(sl__copy_engine **out);

/* The CUDA engine on device `device_id`, its consumer stream `stream`
 * (a cudaStream_t, NULL = legacy default).  SL_ECUDA naming the CUDA error
 * (or the loader's failure), SL_EUNSUPPORTED when built without the CUDA
 * headers, SL_ENOMEM.  Messages start with "cuda:N: "; without a driver or
 * a device, "cuda:N: no CUDA device or driver found (<the CUDA error>)".
 * *absent (required) is set, on failure, to a plain phrase when the
 * machine (or this build) has no CUDA at all - "no CUDA device or driver
 * found", "no CUDA runtime (libcudart) found", "this libsluice was built
 * without CUDA" - else NULL (CUDA is there but failed: say it in full). */
int sl__copy_cuda_open(int device_id, void *stream, sl__copy_engine **out,
                       const char **absent);
/* 1 when this libsluice was built with the CUDA toolkit's headers (the CUDA
 * engine exists), else 0.  For tests and messages. */
int sl__cuda_engine_built(void);

/* --- device strings (select.c) ---------------------------------------------
 */

typedef enum sl__device_req {
  SL__DEV_CPU,  /* "cpu" */
  SL__DEV_CUDA, /* "cuda", "cuda:N" */
  SL__DEV_AUTO  /* "auto" (and NULL) */
} sl__device_req;

/* Parses `name` (NULL = "auto").  SL_EINVAL naming `stage` and listing the
 * accepted forms otherwise. */
int sl__device_parse(const char *stage, const char *name, sl__device_req *req,
                     int *device_id);

/* Opens the engine `name` asks for; "auto" falls back to the host engine
 * when the CUDA engine cannot start, saying so on stderr once per process.
 * Errors are prefixed with `stage`. */
int sl__copy_open(const char *stage, const char *name, void *stream,
                  sl__copy_engine **out);

/* Test hook: returns how many times "auto" fell back to the host engine
 * since the last call (or the start) and starts counting again, so the next
 * fallback is reported on stderr again. */
int sl__device_fallback_reset(void);

/* --- DLPack (dlpack.c) ------------------------------------------------------
 */

/* Test hook: DLPack exports whose deleter has not run yet. */
long sl__dlpack_live(void);

#endif
