/*
 * batch.c - sluice.Batch: what a pipeline yields, a read-only mapping of
 * field name -> sluice.Tensor, in the schema's order.
 *
 * The batch owns one reference to its sl_sample; each Tensor taken from it
 * holds another, so tensors (and the arrays made from them) outlive the
 * batch.  Tensors are made when first asked for and kept, so b["x"] is b["x"].
 * The names (a tuple) and the name -> index dict are the pipeline's, shared
 * by all its batches.  isinstance(batch, collections.abc.Mapping) holds
 * (sluice/__init__.py registers the type).
 */
#include "binding.h"

PyObject *slpy_BatchType;

typedef struct {
  PyObject_HEAD sl_sample *sample; /* owned reference */
  PyObject *names;                 /* tuple of str (shared) */
  PyObject *index;                 /* dict str -> int (shared) */
  PyObject *tensors;               /* list, None until made */
} BatchObject;

PyObject *slpy_batch_new(sl_sample *s, PyObject *names, PyObject *index) {
  PyTypeObject *tp = (PyTypeObject *)slpy_BatchType;
  allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
  BatchObject *b = (BatchObject *)alloc(tp, 0);
  if (!b) {
    sl_sample_release(s);
    return NULL;
  }
  b->sample = s;
  b->names = Py_NewRef(names);
  b->index = Py_NewRef(index);
  b->tensors = NULL;
  return (PyObject *)b;
}

static void batch_dealloc(PyObject *self) {
  BatchObject *b = (BatchObject *)self;
  PyTypeObject *tp = Py_TYPE(self);
  Py_XDECREF(b->tensors);
  Py_XDECREF(b->names);
  Py_XDECREF(b->index);
  sl_sample_release(b->sample);
  freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
  f(self);
  Py_DECREF(tp);
}

static Py_ssize_t batch_len(PyObject *self) {
  return PyTuple_Size(((BatchObject *)self)->names);
}

/* The Tensor of field i (new reference). */
static PyObject *batch_tensor(BatchObject *b, Py_ssize_t i) {
  Py_ssize_t n = PyTuple_Size(b->names);
  if (!b->tensors) {
    b->tensors = PyList_New(n);
    if (!b->tensors) return NULL;
    for (Py_ssize_t k = 0; k < n; k++)
      PyList_SetItem(b->tensors, k, Py_NewRef(Py_None));
  }
  PyObject *t = PyList_GetItem(b->tensors, i); /* borrowed */
  if (!t) return NULL;
  if (t != Py_None) return Py_NewRef(t);
  t = slpy_tensor_of_field(b->sample, (int)i);
  if (!t) return NULL;
  PyList_SetItem(b->tensors, i, Py_NewRef(t));
  return t;
}

static PyObject *batch_getitem(PyObject *self, PyObject *key) {
  BatchObject *b = (BatchObject *)self;
  PyObject *pos = PyDict_GetItemWithError(b->index, key); /* borrowed */
  if (!pos) {
    if (!PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
    return NULL;
  }
  return batch_tensor(b, PyLong_AsSsize_t(pos));
}

static int batch_contains(PyObject *self, PyObject *key) {
  return PyDict_Contains(((BatchObject *)self)->index, key);
}

static PyObject *batch_iter(PyObject *self) {
  return PyObject_GetIter(((BatchObject *)self)->names);
}

static PyObject *batch_keys(PyObject *self, PyObject *unused) {
  return PySequence_List(((BatchObject *)self)->names);
}

static PyObject *batch_values(PyObject *self, PyObject *unused) {
  BatchObject *b = (BatchObject *)self;
  Py_ssize_t n = PyTuple_Size(b->names);
  PyObject *out = PyList_New(n);
  if (!out) return NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *t = batch_tensor(b, i);
    if (!t) {
      Py_DECREF(out);
      return NULL;
    }
    PyList_SetItem(out, i, t);
  }
  return out;
}

static PyObject *batch_items(PyObject *self, PyObject *unused) {
  BatchObject *b = (BatchObject *)self;
  PyObject *vals = batch_values(self, NULL);
  if (!vals) return NULL;
  Py_ssize_t n = PyList_Size(vals);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *pair =
        PyTuple_Pack(2, PyTuple_GetItem(b->names, i), PyList_GetItem(vals, i));
    if (!pair) {
      Py_DECREF(vals);
      return NULL;
    }
    PyList_SetItem(vals, i, pair); /* replaces (and drops) the tensor */
  }
  return vals;
}

static PyObject *batch_get(PyObject *self, PyObject *args) {
  PyObject *key, *dflt = Py_None;
  if (!PyArg_ParseTuple(args, "O|O:get", &key, &dflt)) return NULL;
  BatchObject *b = (BatchObject *)self;
  PyObject *pos = PyDict_GetItemWithError(b->index, key);
  if (!pos) {
    if (PyErr_Occurred()) return NULL;
    return Py_NewRef(dflt);
  }
  return batch_tensor(b, PyLong_AsSsize_t(pos));
}

static PyObject *batch_repr(PyObject *self) {
  BatchObject *b = (BatchObject *)self;
  char buf[1024];
  sl_schema_describe(sl_sample_schema(b->sample), buf, sizeof buf);
  return PyUnicode_FromFormat("<sluice.Batch %s>", buf);
}

/* The Arrow PyCapsule interface: pyarrow.record_batch(batch). */
static PyObject *batch_arrow_c_array(PyObject *self, PyObject *args,
                                     PyObject *kw) {
  static char *kwlist[] = {"requested_schema", NULL};
  PyObject *req = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:__arrow_c_array__", kwlist,
                                   &req))
    return NULL;
  return slpy_sample_arrow_c_array(((BatchObject *)self)->sample, req);
}

static PyMethodDef batch_methods[] = {
    {"keys", batch_keys, METH_NOARGS, "the field names, in schema order"},
    {"values", batch_values, METH_NOARGS, "the Tensors, in schema order"},
    {"items", batch_items, METH_NOARGS, "(name, Tensor) pairs"},
    {"get", batch_get, METH_VARARGS, "get(name, default=None)"},
    {"__arrow_c_array__", (PyCFunction)(void (*)(void))batch_arrow_c_array,
     METH_VARARGS | METH_KEYWORDS,
     "__arrow_c_array__(requested_schema=None) -> (schema capsule, array "
     "capsule): the batch as an Arrow struct array (a record batch), "
     "without a copy (sl_sample_to_arrow)."},
    {NULL, NULL, 0, NULL}};

static PyType_Slot batch_slots[] = {
    {Py_tp_dealloc, batch_dealloc},
    {Py_tp_repr, batch_repr},
    {Py_tp_iter, batch_iter},
    {Py_tp_methods, batch_methods},
    {Py_mp_subscript, batch_getitem},
    {Py_mp_length, batch_len},
    {Py_sq_contains, batch_contains},
    {Py_tp_doc, "A batch: a read-only mapping of field name -> Tensor."},
    {0, NULL}};

static PyType_Spec batch_spec = {
    "sluice.Batch", sizeof(BatchObject), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, batch_slots};

int slpy_batch_init_type(PyObject *module) {
  slpy_BatchType = PyType_FromSpec(&batch_spec);
  if (!slpy_BatchType) return -1;
  Py_INCREF(slpy_BatchType);
  return PyModule_AddObject(module, "Batch", slpy_BatchType);
}
