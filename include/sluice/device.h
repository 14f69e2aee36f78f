/*
 * sluice/device.h - devices and the double buffer.  Part of sluice.h:
 * include <sluice.h>, whose opening comment states the conventions that hold
 * here.
 */
#ifndef SLUICE_API_DEVICE_H
#define SLUICE_API_DEVICE_H

#include "reader.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* --- devices and the double buffer --- (docs/DEVICE.md)                    */
/* ------------------------------------------------------------------------ */

/* Where the bytes of a buffer live.  The values are DLPack's DLDeviceType
 * codes.  Every buffer is SL_DEVICE_CPU unless it was made by
 * sl_buffer_wrap_device (the double buffer's CUDA engine does so): a
 * tensor's `data` is then an address on that device, which host code must
 * not dereference. */
typedef enum sl_device_type {
  SL_DEVICE_CPU = 1,      /* ordinary host memory */
  SL_DEVICE_CUDA = 2,     /* CUDA device memory (not readable by the host) */
  SL_DEVICE_CUDA_HOST = 3 /* page-locked host memory (cudaHostAlloc):
                             readable by the host and by CUDA devices */
} sl_device_type;

/* Like sl_buffer_wrap, for `size` bytes at `data` on device `type` number
 * `device_id` (>= 0; 0 for host memory).  sl_buffer_data returns `data` (a
 * device address for SL_DEVICE_CUDA).  free_fn(ud, data) runs when the last
 * reference goes, on whatever thread drops it.  Returns NULL with
 * SL_EINVAL (unknown type, negative id) or SL_ENOMEM detail; free_fn is
 * then NOT called.  Thread-safe. */
SL_API sl_buffer *sl_buffer_wrap_device(void *data, size_t size,
                                        sl_device_type type, int device_id,
                                        sl_buffer_free_fn free_fn, void *ud);
/* The device of `b`'s bytes, and its number in *device_id (may be NULL).
 * A NULL buffer is SL_DEVICE_CPU, number 0.  Thread-safe. */
SL_API sl_device_type sl_buffer_device(const sl_buffer *b, int *device_id);
/* The device of tensor `t`'s data (that of t->buf; a tensor without a
 * buffer, or a NULL `t`, is SL_DEVICE_CPU).  The per-field device pointer
 * is t->data (sl_tensor_data).  LoD offsets are always host memory.
 * Borrows `t`; never fails.  Thread-safe on a published sample's tensor. */
SL_API sl_device_type sl_tensor_device(const sl_tensor *t, int *device_id);
/* Writes "cpu", "cuda:N" or "cuda_host" into buf (always NUL-terminated;
 * "unknown" for a type not in sl_device_type).  Returns buf.  Thread-safe. */
SL_API char *sl_device_describe(sl_device_type type, int device_id, char *buf,
                                size_t size);

/* Options of sl_double_buffer.  Extensible like sl_open_opts: `size` must be
 * sizeof(sl_double_buffer_opts) (SL_DOUBLE_BUFFER_OPTS_INIT sets it and the
 * defaults). */
typedef struct sl_double_buffer_opts {
  size_t size;        /* sizeof(sl_double_buffer_opts) */
  const char *device; /* "cpu", "cuda" (= "cuda:0"), "cuda:N" or "auto";
                         NULL means "auto".  Borrowed for the call. */
  uint32_t slots;     /* batches in flight, 1..256 (the INIT macro: 2).  The
                         consumer may hold at most this many at once. */
  void *stream;       /* CUDA: the cudaStream_t the consumer's work on the
                         batches is queued on; NULL is the legacy default
                         stream.  Handing a batch out makes this stream wait
                         for its copy; releasing it records an event on this
                         stream that the next copy into the slot waits for.
                         Ignored by the host engine. */
  uint32_t release_wait_ms; /* when every slot is held, how long next waits
                               for another thread to release a batch before
                               SL_ESTATE; 0 (default): report at once */
} sl_double_buffer_opts;
/* clang-format off */
#define SL_DOUBLE_BUFFER_OPTS_INIT                                             \
  {sizeof(sl_double_buffer_opts), "auto" /* device */, 2 /* slots */,         \
   NULL /* stream */, 0 /* release_wait_ms */}
/* clang-format on */

/* Moves batches into device memory ahead of the consumer (Paddle's
 * DoubleBuffer, without its guess): a copy thread, started now, pulls `up`
 * and copies each batch into one of `slots` slots while the consumer uses
 * the batches before it.  The batches it yields have `up`'s schema; each
 * field is a view into the batch's slot, on the engine's device
 * (sl_tensor_device: SL_DEVICE_CUDA for the CUDA engine, whose t->data are
 * device pointers; SL_DEVICE_CPU for the host engine, which copies into
 * 256-byte aligned host slots).  LoD offsets stay in host memory.
 *
 * Slots: a slot is reused only when every reference to its memory is gone
 * (the batch released, DLPack exports deleted, tensors copied from it
 * cleared), never on a guess.  A consumer that holds `slots` batches and
 * asks for another gets SL_ESTATE ("double_buffer: the consumer holds all 2
 * slots ...") instead of a deadlock - at once, or after release_wait_ms when
 * batches are released by other threads; the error is sticky until reset,
 * like every reader error.  Batches outstanding across sl_reader_reset and
 * sl_reader_destroy stay valid: their slots live until released.
 *
 * Engines: "cpu" is the host engine.  "cuda:N" is the CUDA engine on device
 * N: the CUDA runtime (libcudart.so) is loaded at run time, page-locked
 * staging and device memory are allocated per slot once (and grown only
 * when a batch does not fit), copies run on a dedicated non-blocking
 * stream, and events order the copy before the consumer's use and the
 * consumer's use (see `stream`) before the slot's next copy.  "auto" is
 * CUDA device 0 when the CUDA engine can start, else the host engine, saying
 * why on stderr once per process.
 *
 * Every field of upstream's batches must be in host memory (SL_DEVICE_CPU or
 * SL_DEVICE_CUDA_HOST): a batch already on a device is SL_EINVAL naming the
 * field.  Upstream errors reach the consumer in order with their message;
 * copy failures are SL_ENOMEM or SL_ECUDA naming the slot and the CUDA call.
 *
 * Takes `up` (destroyed also on failure).  `opts` NULL means
 * SL_DOUBLE_BUFFER_OPTS_INIT.  Returns SL_OK and *out, or: SL_EINVAL (NULL
 * up or out, bad size, slots outside 1..256, a device string that is not
 * one of the above, e.g. "tpu:0" or "cuda:x"), SL_EUNSUPPORTED (a CUDA
 * device asked of a libsluice built without the CUDA toolkit's headers, or
 * options from a newer header), SL_ECUDA (the runtime cannot be loaded, no
 * driver or device, or a failing CUDA call: the message names the CUDA
 * error, e.g. "cudaErrorNoDevice (no CUDA-capable device is detected)", and
 * the call), SL_ENOMEM.  The reader, like any, is used by one thread at a
 * time; its batches may be released from any thread. */
SL_API int sl_double_buffer(sl_reader *up, const sl_double_buffer_opts *opts,
                            sl_reader **out);

/* DLPack (https://github.com/dmlc/dlpack, the legacy DLManagedTensor of
 * dlpack.h 0.6 and later): `#include <dlpack/dlpack.h>` to read it. */
struct DLManagedTensor;
/* Exports field `field` of `s` as a new DLManagedTensor, zero-copy: its
 * data is the field's data (byte_offset 0), its device that of the field's
 * buffer (kDLCPU, kDLCUDA or kDLCUDAHost), shape the field's, strides the
 * compact row-major ones (in elements), dtype per sl_dtype: signed ints
 * kDLInt, unsigned ints kDLUInt, f16/f32/f64 kDLFloat, bf16 kDLBfloat,
 * bool code 6 (kDLBool since DLPack 0.8) with 8 bits, bytes kDLUInt 8 bits.
 * A ragged field exports its concatenated values (read the offsets with
 * sl_tensor_lod).  The export holds a reference to `s` (the caller keeps
 * its own): the batch and its slot stay alive until the consumer calls the
 * tensor's deleter, exactly once, from any thread.  Returns SL_OK and
 * *out, or SL_EINVAL (NULL argument, field out of range) or SL_ENOMEM.
 * Thread-safe on a published sample. */
SL_API int sl_sample_to_dlpack(sl_sample *s, int field,
                               struct DLManagedTensor **out);

#ifdef __cplusplus
}
#endif
#endif /* SLUICE_API_DEVICE_H */
