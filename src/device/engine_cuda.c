/*
 * engine_cuda.c - the CUDA copy engine: each slot has page-locked staging
 * (cudaHostAlloc) and device memory (cudaMalloc), allocated on the slot's
 * first batch and reused (grown only when a batch does not fit); copies run
 * on one non-blocking stream of the engine's own; two events per slot order
 * the copy and the consumer's use:
 *
 *   copied  recorded on the copy stream after the slot's upload.  acquire
 *           (the batch handed out) makes the consumer's stream wait for it,
 *           so the consumer's kernels see the whole batch without the host
 *           waiting; begin (the slot about to be refilled) waits for it on
 *           the host before the staging is overwritten.
 *   used    recorded on the consumer's stream by release (the last reference
 *           to the batch gone), so work the consumer queued on the batch
 *           before releasing it finishes before the next upload overwrites
 *           the slot: upload makes the copy stream wait for it.  When it
 *           cannot be recorded (a runtime shutting down, a stream destroyed
 *           by the consumer), the next upload synchronises the whole device
 *           instead: slower, never wrong.
 *
 * Threads.  thread_init, reserve, begin and upload run on the ring's worker
 * thread, which keeps the engine's device current.  acquire runs on the
 * consumer's thread (it queues on the consumer's stream, on the consumer's
 * current device).  release and teardown run on whatever thread drops the
 * last reference: they make the engine's device current for their calls and
 * restore the thread's previous device.  The per-slot flags are written by
 * release and read by the worker across the ring's mutex (the slot becomes
 * free under it), which orders them.
 *
 * Every CUDA call goes through SL_CUDA_CHECK (cudart.h).
 */
#include "device/cudart.h"
#include "device/device.h"

#ifdef SLUICE_HAVE_CUDA_HEADERS

typedef struct cuda_slot {
  cudaEvent_t copied, used;
  bool copied_pending; /* `copied` recorded, not yet waited for by begin */
  bool used_pending;   /* `used` recorded, not yet waited for by upload */
  bool used_lost;      /* recording `used` failed: synchronise the device */
} cuda_slot;

typedef struct cuda_engine {
  sl__copy_engine base;
  const sl__cudart *cu;
  cudaStream_t copy;     /* ours, non-blocking */
  cudaStream_t consumer; /* the consumer's (NULL: legacy default), borrowed */
} cuda_engine;

/* Every call below names the engine `e`. */
#define CHECK(fn, ...) SL_CUDA_CHECK(e->cu, e->base.device_id, fn, __VA_ARGS__)

/* Makes the engine's device current on this thread; *prev receives the
 * device that was, for leave_device. */
static int enter_device(cuda_engine *e, int *prev) {
  *prev = e->base.device_id;
  SL_FORWARD_IF_ERROR(CHECK(cudaGetDevice, prev));
  if (*prev == e->base.device_id) return SL_OK;
  return CHECK(cudaSetDevice, e->base.device_id);
}

static void leave_device(cuda_engine *e, int prev) {
  if (prev != e->base.device_id) (void)CHECK(cudaSetDevice, prev);
}

static int cuda_thread_init(sl__copy_engine *base) {
  cuda_engine *e = (cuda_engine *)base;
  return CHECK(cudaSetDevice, e->base.device_id);
}

/* Waits until the consumer's recorded use of the slot is over (before its
 * device memory is freed). */
static int wait_used(cuda_engine *e, cuda_slot *cs) {
  if (cs->used_lost) {
    SL_FORWARD_IF_ERROR(CHECK(cudaDeviceSynchronize, ));
    cs->used_lost = cs->used_pending = false;
  } else if (cs->used_pending) {
    SL_FORWARD_IF_ERROR(CHECK(cudaEventSynchronize, cs->used));
    cs->used_pending = false;
  }
  return SL_OK;
}

static int new_slot_state(cuda_engine *e, cuda_slot **out) {
  cuda_slot *cs = sl__calloc(1, sizeof *cs);
  SL_RETURN_ERROR_IF(!cs, SL_ENOMEM, "cuda:%d: cannot allocate slot state",
                     e->base.device_id);
  int rc = CHECK(cudaEventCreateWithFlags, &cs->copied, cudaEventDisableTiming);
  if (rc == SL_OK) {
    rc = CHECK(cudaEventCreateWithFlags, &cs->used, cudaEventDisableTiming);
    if (rc != SL_OK) (void)e->cu->cudaEventDestroy(cs->copied);
  }
  if (rc != SL_OK) {
    sl__free(cs);
    return rc;
  }
  *out = cs;
  return SL_OK;
}

static int cuda_reserve(sl__copy_engine *base, sl__slot_mem *m,
                        size_t host_bytes, size_t dev_bytes) {
  cuda_engine *e = (cuda_engine *)base;
  if (!m->priv) {
    cuda_slot *cs = NULL;
    SL_FORWARD_IF_ERROR(new_slot_state(e, &cs));
    m->priv = cs;
  }
  cuda_slot *cs = m->priv;
  if (m->host_cap < host_bytes) {
    size_t cap = sl__slot_grow(m->host_cap, host_bytes);
    SL_RETURN_ERROR_IF(!cap, SL_ENOMEM, "cuda:%d: %zu bytes of staging",
                       e->base.device_id, host_bytes);
    /* begin has waited for the last copy out of the old staging. */
    if (m->host) {
      void *old = m->host;
      m->host = NULL;
      m->host_cap = 0;
      SL_FORWARD_IF_ERROR(CHECK(cudaFreeHost, old));
    }
    void *p = NULL;
    SL_FORWARD_IF_ERROR(CHECK(cudaHostAlloc, &p, cap, cudaHostAllocDefault));
    m->host = p;
    m->host_cap = cap;
  }
  if (m->dev_cap < dev_bytes) {
    size_t cap = sl__slot_grow(m->dev_cap, dev_bytes);
    SL_RETURN_ERROR_IF(!cap, SL_ENOMEM, "cuda:%d: %zu bytes of device memory",
                       e->base.device_id, dev_bytes);
    SL_FORWARD_IF_ERROR(wait_used(e, cs));
    if (m->dev) {
      void *old = m->dev;
      m->dev = NULL;
      m->dev_cap = 0;
      SL_FORWARD_IF_ERROR(CHECK(cudaFree, old));
    }
    void *p = NULL;
    SL_FORWARD_IF_ERROR(CHECK(cudaMalloc, &p, cap));
    m->dev = p;
    m->dev_cap = cap;
  }
  return SL_OK;
}

static int cuda_begin(sl__copy_engine *base, sl__slot_mem *m) {
  cuda_engine *e = (cuda_engine *)base;
  cuda_slot *cs = m->priv;
  if (cs && cs->copied_pending) {
    SL_FORWARD_IF_ERROR(CHECK(cudaEventSynchronize, cs->copied));
    cs->copied_pending = false;
  }
  return SL_OK;
}

static int cuda_upload(sl__copy_engine *base, sl__slot_mem *m, size_t n) {
  cuda_engine *e = (cuda_engine *)base;
  cuda_slot *cs = m->priv;
  if (cs->used_lost) {
    SL_FORWARD_IF_ERROR(CHECK(cudaDeviceSynchronize, ));
    cs->used_lost = cs->used_pending = false;
  } else if (cs->used_pending) {
    SL_FORWARD_IF_ERROR(CHECK(cudaStreamWaitEvent, e->copy, cs->used, 0));
    cs->used_pending = false;
  }
  if (n)
    SL_FORWARD_IF_ERROR(CHECK(cudaMemcpyAsync, m->dev, m->host, n,
                              cudaMemcpyHostToDevice, e->copy));
  SL_FORWARD_IF_ERROR(CHECK(cudaEventRecord, cs->copied, e->copy));
  cs->copied_pending = true;
  return SL_OK;
}

static int cuda_acquire(sl__copy_engine *base, sl__slot_mem *m) {
  cuda_engine *e = (cuda_engine *)base;
  cuda_slot *cs = m->priv;
  return CHECK(cudaStreamWaitEvent, e->consumer, cs->copied, 0);
}

static void cuda_release(sl__copy_engine *base, sl__slot_mem *m) {
  cuda_engine *e = (cuda_engine *)base;
  cuda_slot *cs = m->priv;
  if (!cs) return;
  int prev;
  if (enter_device(e, &prev) != SL_OK) {
    cs->used_lost = true;
    return;
  }
  if (CHECK(cudaEventRecord, cs->used, e->consumer) == SL_OK)
    cs->used_pending = true;
  else
    cs->used_lost = true;
  leave_device(e, prev);
}

/* Teardown cannot report errors: it runs when the last batch is released.
 * Each call is still checked (the message is left on the thread). */
static void cuda_free_slot(sl__copy_engine *base, sl__slot_mem *m) {
  cuda_engine *e = (cuda_engine *)base;
  cuda_slot *cs = m->priv;
  int prev;
  if (enter_device(e, &prev) != SL_OK) return; /* the runtime is gone */
  if (cs) {
    (void)wait_used(e, cs);
    if (cs->copied_pending) (void)CHECK(cudaEventSynchronize, cs->copied);
    (void)CHECK(cudaEventDestroy, cs->copied);
    (void)CHECK(cudaEventDestroy, cs->used);
    sl__free(cs);
  }
  if (m->host) (void)CHECK(cudaFreeHost, m->host);
  if (m->dev) (void)CHECK(cudaFree, m->dev);
  memset(m, 0, sizeof *m);
  leave_device(e, prev);
}

static void cuda_destroy(sl__copy_engine *base) {
  cuda_engine *e = (cuda_engine *)base;
  int prev;
  if (enter_device(e, &prev) == SL_OK) {
    (void)CHECK(cudaStreamSynchronize, e->copy);
    (void)CHECK(cudaStreamDestroy, e->copy);
    leave_device(e, prev);
  }
  sl__free(e);
}

static const sl__copy_ops cuda_ops = {
    "cuda",       cuda_thread_init, cuda_reserve,   cuda_begin,  cuda_upload,
    cuda_acquire, cuda_release,     cuda_free_slot, cuda_destroy};

/* cudaGetDeviceCount's failures that mean "this machine has no CUDA to
 * offer": no driver (a toolkit alone: the runtime then says "CUDA driver
 * version is insufficient", which reads like an upgrade is due), a stub
 * driver, no device. */
static bool means_no_cuda(cudaError_t err) {
  return err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice
#if CUDART_VERSION >= 11010
         || err == cudaErrorStubLibrary
#endif
      ;
}

int sl__copy_cuda_open(int device_id, void *stream, sl__copy_engine **out,
                       const char **absent) {
  *out = NULL;
  *absent = NULL;
  const sl__cudart *cu = NULL;
  if (sl__cudart_get(&cu) != SL_OK) {
    *absent = "no CUDA runtime (libcudart) found";
    return sl_wrap_error(SL_ECUDA, "cuda:%d", device_id);
  }
  int n = 0;
  cudaError_t err = cudaSuccess;
  int rc = SL_CUDA_CHECK_ERR(cu, device_id, &err, cudaGetDeviceCount, &n);
  if (rc < 0 && means_no_cuda(err)) {
    /* Said plainly first; the CUDA error and the call in the parentheses.
     * The message is "cuda:N: <call> failed: ..." (sl__cuda_check). */
    *absent = "no CUDA device or driver found";
    const char *detail = strchr(sl_last_error(), ' ');
    char *copy = sl__strdup(detail ? detail + 1 : sl_last_error());
    sl_set_error(SL_ECUDA, "cuda:%d: %s (%s)", device_id, *absent,
                 copy ? copy : "?");
    sl__free(copy);
    return SL_ECUDA;
  }
  SL_FORWARD_IF_ERROR(rc);
  if (n == 0) {
    *absent = "no CUDA device or driver found";
    return sl_set_error(SL_ECUDA, "cuda:%d: %s (cudaGetDeviceCount: 0 devices)",
                        device_id, *absent);
  }
  SL_RETURN_ERROR_IF(device_id >= n, SL_ECUDA,
                     "cuda:%d: no such device: this machine has %d CUDA "
                     "device%s (cuda:0 .. cuda:%d)",
                     device_id, n, n == 1 ? "" : "s", n - 1);
  cuda_engine *e = sl__calloc(1, sizeof *e);
  SL_RETURN_ERROR_IF(!e, SL_ENOMEM, "cuda:%d: cannot allocate the engine",
                     device_id);
  e->base.ops = &cuda_ops;
  e->base.type = SL_DEVICE_CUDA;
  e->base.device_id = device_id;
  e->base.same = false;
  e->cu = cu;
  e->consumer = (cudaStream_t)stream;
  int prev;
  rc = enter_device(e, &prev);
  if (rc == SL_OK) {
    rc = CHECK(cudaStreamCreateWithFlags, &e->copy, cudaStreamNonBlocking);
    leave_device(e, prev);
  }
  if (rc != SL_OK) {
    sl__free(e);
    return rc;
  }
  *out = &e->base;
  return SL_OK;
}

int sl__cuda_engine_built(void) {
  return 1;
}

#else /* no CUDA headers at build time */

int sl__copy_cuda_open(int device_id, void *stream, sl__copy_engine **out,
                       const char **absent) {
  *out = NULL;
  *absent = "this libsluice was built without CUDA";
  return sl_set_error(SL_EUNSUPPORTED,
                      "cuda:%d: this libsluice was built without the CUDA "
                      "engine (CMake did not find the CUDA toolkit's "
                      "headers): rebuild it with the toolkit installed, or "
                      "use device \"cpu\"",
                      device_id);
}

int sl__cuda_engine_built(void) {
  return 0;
}

#endif
