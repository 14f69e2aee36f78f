/*
 * dlpack.c - sl_sample_to_dlpack: a field of a batch as a DLPack
 * DLManagedTensor, zero-copy, so a framework (PyTorch, JAX, CuPy, a C++
 * trainer) takes sluice's batches, host or device, without a copy.
 *
 * Lifetime: the export holds one reference to the sample, dropped by its
 * deleter, so the batch's buffers - for a double buffer, its slot - live
 * until the consumer framework is done with the tensor.  The managed tensor,
 * its shape and its strides are one allocation, freed by the deleter.
 *
 * Layout choices: `data` is the field's own address and byte_offset 0
 * (consumers that predate byte_offset support read the right bytes);
 * strides are given, compact row-major in elements, rather than NULL
 * (DLPack 0.6's "compact"), which later DLPack versions discourage.
 */
#include "device/device.h"

#include <dlpack/dlpack.h>

/* kDLBool (DLPack 0.8) is absent from older dlpack.h; its code is fixed. */
#define SL_DL_BOOL 6

typedef struct export_ctx {
  DLManagedTensor m;
  int64_t shape[SL_MAX_RANK];
  int64_t strides[SL_MAX_RANK];
  sl_sample *sample; /* the reference the export holds */
} export_ctx;

/* Exports whose deleter has not run yet: a test hook against leaks and
 * double calls. */
static atomic_long live_exports;

long sl__dlpack_live(void) {
  return atomic_load(&live_exports);
}

static void export_deleter(DLManagedTensor *m) {
  if (!m) return;
  export_ctx *c = m->manager_ctx;
  sl_sample_release(c->sample);
  sl__free(c);
  atomic_fetch_sub(&live_exports, 1);
}

static bool dl_dtype(sl_dtype dt, DLDataType *out) {
  uint8_t code;
  switch (dt) {
  case SL_BOOL:
    code = SL_DL_BOOL;
    break;
  case SL_I8:
  case SL_I16:
  case SL_I32:
  case SL_I64:
    code = kDLInt;
    break;
  case SL_U8:
  case SL_U16:
  case SL_U32:
  case SL_U64:
  case SL_BYTES: /* a byte string is an array of octets */
    code = kDLUInt;
    break;
  case SL_F16:
  case SL_F32:
  case SL_F64:
    code = kDLFloat;
    break;
  case SL_BF16:
    code = kDLBfloat;
    break;
  default:
    return false;
  }
  out->code = code;
  out->bits = (uint8_t)(sl_dtype_size(dt) * 8);
  out->lanes = 1;
  return true;
}

static DLDevice dl_device(const sl_tensor *t) {
  int id = 0;
  DLDevice d;
  switch (sl_tensor_device(t, &id)) {
  case SL_DEVICE_CUDA:
    d.device_type = kDLCUDA;
    d.device_id = id;
    break;
  case SL_DEVICE_CUDA_HOST:
    d.device_type = kDLCUDAHost;
    d.device_id = 0;
    break;
  default:
    d.device_type = kDLCPU;
    d.device_id = 0;
    break;
  }
  return d;
}

int sl_sample_to_dlpack(sl_sample *s, int field, struct DLManagedTensor **out) {
  SL_RETURN_ERROR_IF(!out, SL_EINVAL, "dlpack: NULL out pointer");
  *out = NULL;
  SL_RETURN_ERROR_IF(!s, SL_EINVAL, "dlpack: NULL sample");
  int n = sl_sample_nfields(s);
  SL_RETURN_ERROR_IF(field < 0 || field >= n, SL_EINVAL,
                     "dlpack: field %d out of range (the sample has %d)", field,
                     n);
  const sl_tensor *t = sl_sample_at_const(s, field);
  DLDataType dt;
  SL_RETURN_ERROR_IF(!dl_dtype(t->dtype, &dt), SL_EINVAL,
                     "dlpack: field '%s': dtype %s has no DLPack code",
                     sl_schema_field_name(sl_sample_schema(s), field),
                     sl_dtype_name(t->dtype));
  export_ctx *c = sl__calloc(1, sizeof *c);
  SL_RETURN_ERROR_IF(!c, SL_ENOMEM, "dlpack: field '%s': cannot allocate",
                     sl_schema_field_name(sl_sample_schema(s), field));
  int64_t stride = 1;
  for (int d = t->rank - 1; d >= 0; d--) {
    c->shape[d] = t->shape[d];
    c->strides[d] = stride;
    stride *= t->shape[d] ? t->shape[d] : 1;
  }
  DLTensor *dl = &c->m.dl_tensor;
  dl->data = t->data;
  dl->device = dl_device(t);
  dl->ndim = t->rank;
  dl->dtype = dt;
  dl->shape = c->shape;
  dl->strides = c->strides;
  dl->byte_offset = 0;
  c->m.manager_ctx = c;
  c->m.deleter = export_deleter;
  c->sample = sl_sample_retain(s);
  atomic_fetch_add(&live_exports, 1);
  *out = &c->m;
  return SL_OK;
}
