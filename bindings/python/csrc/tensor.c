/*
 * tensor.c - sluice.Tensor: one field of a batch (or the LoD offsets of a
 * ragged field), handed to numpy, PyTorch, JAX ... without a copy.
 *
 * A Tensor holds a reference to the sl_sample whose buffers hold its bytes,
 * so its memory stays valid for as long as the Tensor lives.  It exports
 * that memory two ways, both zero-copy:
 *
 *  - the buffer protocol (read-only; numpy.asarray, memoryview): the
 *    Py_buffer's `obj` is the Tensor, so the exporter lives as long as the
 *    view;
 *  - DLPack (__dlpack__ / __dlpack_device__): a "dltensor" capsule holding
 *    a DLManagedTensor made by sl_sample_to_dlpack, which holds its own
 *    reference to the sample.  The consumer calls the tensor's deleter when
 *    it is done (it renames the capsule "used_dltensor"); a capsule never
 *    consumed calls the deleter itself when it is collected.
 *
 * Samples are immutable once published (a cache stage hands the same
 * sample out again), hence a read-only buffer.  DLPack 0.6 has no read-only
 * flag: a consumer that writes into the tensor it got breaks that rule.
 *
 * Device memory (a double_buffer on "cuda:N") is refused by the buffer
 * protocol (BufferError) and exported by DLPack with its device.
 */
#include "binding.h"

#include <dlpack/dlpack.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

PyObject *slpy_TensorType;

typedef struct {
  PyObject_HEAD sl_sample *sample; /* owned reference: owns the bytes */
  int field;                       /* the field, or -1 for LoD offsets */
  sl_dtype dtype;
  int rank;
  void *data;
  size_t nbytes;
  int device_type; /* DLDeviceType, 0 until asked */
  int device_id;
  Py_ssize_t shape[SL_MAX_RANK];
  Py_ssize_t strides[SL_MAX_RANK]; /* in bytes, compact row-major */
} TensorObject;

static PyObject *tensor_alloc(sl_sample *s, int field, sl_dtype dtype, int rank,
                              const int64_t *shape, void *data, size_t nbytes) {
  PyTypeObject *tp = (PyTypeObject *)slpy_TensorType;
  allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
  TensorObject *t = (TensorObject *)alloc(tp, 0);
  if (!t) return NULL;
  t->sample = sl_sample_retain(s);
  t->field = field;
  t->dtype = dtype;
  t->rank = rank;
  t->data = data;
  t->nbytes = nbytes;
  t->device_type = 0;
  t->device_id = 0;
  Py_ssize_t stride = (Py_ssize_t)sl_dtype_size(dtype);
  for (int i = rank - 1; i >= 0; i--) {
    t->shape[i] = (Py_ssize_t)shape[i];
    t->strides[i] = stride;
    stride *= (Py_ssize_t)shape[i];
  }
  return (PyObject *)t;
}

PyObject *slpy_tensor_of_field(sl_sample *s, int field) {
  const sl_tensor *st = sl_sample_at_const(s, field);
  if (!st) {
    PyErr_Format(PyExc_IndexError, "sluice: no field %d in the batch", field);
    return NULL;
  }
  return tensor_alloc(s, field, st->dtype, st->rank, st->shape, st->data,
                      st->nbytes);
}

static void tensor_dealloc(PyObject *self) {
  TensorObject *t = (TensorObject *)self;
  PyTypeObject *tp = Py_TYPE(self);
  sl_sample_release(t->sample);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

/* --- the device ------------------------------------------------------------
 */

/* Fills t->device_type/id: the field's buffer's device, as DLPack names it
 * (sl_sample_to_dlpack knows it); the LoD offsets are always host memory. */
static int tensor_device(TensorObject *t) {
  if (t->device_type) return 0;
  if (t->field < 0) {
    t->device_type = kDLCPU;
    t->device_id = 0;
    return 0;
  }
  DLManagedTensor *mt = NULL;
  int rc = sl_sample_to_dlpack(t->sample, t->field, &mt);
  if (rc < 0) {
    slpy_raise(rc, sl_last_error());
    return -1;
  }
  t->device_type = (int)mt->dl_tensor.device.device_type;
  t->device_id = mt->dl_tensor.device.device_id;
  mt->deleter(mt);
  return 0;
}

/* --- the buffer protocol ------------------------------------------------- */

static const char *buffer_format(sl_dtype dt) {
  switch (dt) {
  case SL_BOOL:
    return "?";
  case SL_U8:
    return "B";
  case SL_I8:
    return "b";
  case SL_U16:
    return "H";
  case SL_I16:
    return "h";
  case SL_U32:
    return "I";
  case SL_I32:
    return "i";
  case SL_U64:
    return "Q";
  case SL_I64:
    return "q";
  case SL_F16:
    return "e";
  case SL_F32:
    return "f";
  case SL_F64:
    return "d";
  case SL_BYTES:
    return "B";
  default:
    return NULL; /* bf16: no struct format */
  }
}

static int tensor_getbuffer(PyObject *self, Py_buffer *view, int flags) {
  TensorObject *t = (TensorObject *)self;
  if (flags & PyBUF_WRITABLE) {
    PyErr_SetString(PyExc_BufferError,
                    "sluice: a batch is read-only (samples are immutable "
                    "once published); copy it to write");
    return -1;
  }
  if (tensor_device(t) < 0) return -1;
  if (t->device_type != kDLCPU && t->device_type != kDLCUDAHost) {
    PyErr_Format(PyExc_BufferError,
                 "sluice: the tensor is in device memory (DLPack device "
                 "type %d): use __dlpack__ (torch.from_dlpack)",
                 t->device_type);
    return -1;
  }
  const char *fmt = buffer_format(t->dtype);
  if (!fmt) {
    PyErr_Format(PyExc_BufferError,
                 "sluice: dtype %s has no buffer format: use __dlpack__ "
                 "(torch.from_dlpack)",
                 sl_dtype_name(t->dtype));
    return -1;
  }
  static char empty; /* a valid address for an empty tensor */
  view->buf = t->data ? t->data : &empty;
  view->obj = Py_NewRef(self);
  view->len = (Py_ssize_t)t->nbytes;
  view->readonly = 1;
  view->itemsize = (Py_ssize_t)sl_dtype_size(t->dtype);
  view->format = (flags & PyBUF_FORMAT) ? (char *)fmt : NULL;
  view->ndim = t->rank;
  view->shape = (flags & PyBUF_ND) == PyBUF_ND ? t->shape : NULL;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? t->strides : NULL;
  view->suboffsets = NULL;
  view->internal = NULL;
  return 0;
}

/* --- DLPack ------------------------------------------------------------------
 */

static const char DLTENSOR[] = "dltensor";

/* A capsule never consumed frees its tensor; a consumed one ("used_...") is
 * the consumer's to delete. */
static void dlpack_capsule_destructor(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, DLTENSOR)) return;
  DLManagedTensor *mt = PyCapsule_GetPointer(cap, DLTENSOR);
  if (mt && mt->deleter) mt->deleter(mt);
}

/* The LoD offsets' own DLManagedTensor (sl_sample_to_dlpack exports the
 * field's values): int64 [lod_len], holding a sample reference. */
typedef struct lod_export {
  DLManagedTensor mt;
  int64_t shape[1];
  sl_sample *sample;
} lod_export;

static void lod_export_delete(DLManagedTensor *mt) {
  lod_export *e = mt->manager_ctx;
  sl_sample_release(e->sample);
  free(e);
}

static DLManagedTensor *lod_to_dlpack(TensorObject *t) {
  lod_export *e = calloc(1, sizeof *e);
  if (!e) {
    PyErr_NoMemory();
    return NULL;
  }
  e->sample = sl_sample_retain(t->sample);
  e->shape[0] = (int64_t)t->shape[0];
  DLTensor *d = &e->mt.dl_tensor;
  d->data = t->data;
  d->device.device_type = kDLCPU;
  d->device.device_id = 0;
  d->ndim = 1;
  d->dtype.code = kDLInt;
  d->dtype.bits = 64;
  d->dtype.lanes = 1;
  d->shape = e->shape;
  d->strides = NULL; /* compact */
  d->byte_offset = 0;
  e->mt.manager_ctx = e;
  e->mt.deleter = lod_export_delete;
  return &e->mt;
}

static PyObject *tensor_dlpack(PyObject *self, PyObject *args,
                               PyObject *kwargs) {
  TensorObject *t = (TensorObject *)self;
  static char *kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None;
  PyObject *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO", kwlist, &stream,
                                   &max_version, &dl_device, &copy))
    return NULL;
  /* The stream is ignored: a batch is complete when next returns it (the
   * CUDA double buffer synchronises its copy before handing it over). */
  if (copy == Py_True) {
    PyErr_SetString(PyExc_BufferError,
                    "sluice: __dlpack__(copy=True) is not supported: sluice "
                    "exports without a copy");
    return NULL;
  }
  if (tensor_device(t) < 0) return NULL;
  if (dl_device != Py_None) {
    int type = 0, id = 0;
    if (!PyArg_ParseTuple(dl_device, "ii", &type, &id)) return NULL;
    if (type != t->device_type || id != t->device_id) {
      PyErr_Format(PyExc_BufferError,
                   "sluice: the tensor is on DLPack device (%d, %d), not "
                   "(%d, %d), and sluice does not copy",
                   t->device_type, t->device_id, type, id);
      return NULL;
    }
  }
  /* Only the legacy (unversioned) capsule: a consumer asking for
   * max_version >= (1, 0) accepts it too (the array API standard's
   * fallback). */
  (void)max_version;
  DLManagedTensor *mt = NULL;
  if (t->field < 0) {
    mt = lod_to_dlpack(t);
    if (!mt) return NULL;
  } else {
    int rc = sl_sample_to_dlpack(t->sample, t->field, &mt);
    if (rc < 0) return slpy_raise(rc, sl_last_error());
  }
  PyObject *cap = PyCapsule_New(mt, DLTENSOR, dlpack_capsule_destructor);
  if (!cap) mt->deleter(mt);
  return cap;
}

static PyObject *tensor_dlpack_device(PyObject *self, PyObject *unused) {
  TensorObject *t = (TensorObject *)self;
  if (tensor_device(t) < 0) return NULL;
  return Py_BuildValue("(ii)", t->device_type, t->device_id);
}

/* --- attributes ------------------------------------------------------------
 */

static PyObject *tensor_get_dtype(PyObject *self, void *c) {
  return PyUnicode_FromString(sl_dtype_name(((TensorObject *)self)->dtype));
}

static PyObject *tensor_get_shape(PyObject *self, void *c) {
  TensorObject *t = (TensorObject *)self;
  PyObject *tup = PyTuple_New(t->rank);
  if (!tup) return NULL;
  for (int i = 0; i < t->rank; i++) {
    PyObject *v = PyLong_FromSsize_t(t->shape[i]);
    if (!v || PyTuple_SetItem(tup, i, v) < 0) {
      Py_DECREF(tup);
      return NULL;
    }
  }
  return tup;
}

static PyObject *tensor_get_ndim(PyObject *self, void *c) {
  return PyLong_FromLong(((TensorObject *)self)->rank);
}

static PyObject *tensor_get_nbytes(PyObject *self, void *c) {
  return PyLong_FromSize_t(((TensorObject *)self)->nbytes);
}

static PyObject *tensor_get_data_ptr(PyObject *self, void *c) {
  return PyLong_FromVoidPtr(((TensorObject *)self)->data);
}

static PyObject *tensor_get_device(PyObject *self, void *c) {
  return tensor_dlpack_device(self, NULL);
}

/* The LoD offsets of a ragged field as an i64 Tensor (lod_len entries,
 * zero-copy), or None. */
static PyObject *tensor_get_lod(PyObject *self, void *c) {
  TensorObject *t = (TensorObject *)self;
  if (t->field < 0) Py_RETURN_NONE;
  const sl_tensor *st = sl_sample_at_const(t->sample, t->field);
  int64_t len = 0;
  const int64_t *lod = sl_tensor_lod(st, &len);
  if (!lod) Py_RETURN_NONE;
  int64_t shape[1] = {len};
  return tensor_alloc(t->sample, -1, SL_I64, 1, shape, (void *)lod,
                      (size_t)len * sizeof(int64_t));
}

static PyObject *tensor_repr(PyObject *self) {
  TensorObject *t = (TensorObject *)self;
  char buf[256];
  int n = snprintf(buf, sizeof buf, "%s[", sl_dtype_name(t->dtype));
  for (int i = 0; i < t->rank && n < (int)sizeof buf; i++)
    n += snprintf(buf + n, sizeof buf - (size_t)n, "%s%zd", i ? "," : "",
                  t->shape[i]);
  if (n < (int)sizeof buf) snprintf(buf + n, sizeof buf - (size_t)n, "]");
  return PyUnicode_FromFormat("<sluice.Tensor %s%s>", buf,
                              t->field < 0 ? " (LoD offsets)" : "");
}

static PyMethodDef tensor_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))tensor_dlpack,
     METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, "
     "copy=None): a DLPack capsule of the tensor, without a copy."},
    {"__dlpack_device__", tensor_dlpack_device, METH_NOARGS,
     "(device_type, device_id) as DLPack names them."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef tensor_getset[] = {
    {"dtype", tensor_get_dtype, NULL, "sluice dtype name ('f32', 'u8', ...)",
     NULL},
    {"shape", tensor_get_shape, NULL, "shape tuple", NULL},
    {"ndim", tensor_get_ndim, NULL, "rank", NULL},
    {"nbytes", tensor_get_nbytes, NULL, "size of the data in bytes", NULL},
    {"data_ptr", tensor_get_data_ptr, NULL, "address of the first element",
     NULL},
    {"device", tensor_get_device, NULL, "(DLPack device type, id)", NULL},
    {"lod", tensor_get_lod, NULL,
     "the LoD offsets of a ragged field (an i64 Tensor), or None", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyType_Slot tensor_slots[] = {
    {Py_tp_dealloc, tensor_dealloc},
    {Py_tp_repr, tensor_repr},
    {Py_tp_methods, tensor_methods},
    {Py_tp_getset, tensor_getset},
    {Py_bf_getbuffer, tensor_getbuffer},
    {Py_tp_doc, "One field of a batch, viewed without a copy: buffer "
                "protocol (read-only) and DLPack."},
    {0, NULL}};

static PyType_Spec tensor_spec = {
    "sluice.Tensor", sizeof(TensorObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, tensor_slots};

int slpy_tensor_init_type(PyObject *module) {
  slpy_TensorType = PyType_FromSpec(&tensor_spec);
  if (!slpy_TensorType) return -1;
  Py_INCREF(slpy_TensorType);
  return PyModule_AddObject(module, "Tensor", slpy_TensorType);
}
