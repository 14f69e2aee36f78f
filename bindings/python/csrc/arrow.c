/*
 * arrow.c - Arrow through the PyCapsule interface (docs/PYTHON.md, "Arrow"):
 *
 *   arrow_reader(obj, batch=0, drop_last=False, name=None) -> Pipeline
 *       over obj's Arrow stream (sl_reader_from_arrow_stream), batched in
 *       C when batch > 0 (sl_batch);
 *   arrow_park(obj, name) / arrow_unpark(name)
 *       parks obj's stream for a pipeline script's sluice.open("arrow:NAME")
 *       (sl_arrow_stream_park), and releases it if the script left it;
 *   Batch.__arrow_c_array__ (slpy_sample_arrow_c_array): the batch as an
 *       "arrow_schema" and an "arrow_array" capsule (sl_sample_to_arrow,
 *       no copy: the array holds the sample).
 *
 * obj is anything with __arrow_c_stream__ (pyarrow tables, record-batch
 * readers and datasets' scanners, Polars, DuckDB, ...) or such a capsule
 * itself.  The stream is moved out of its capsule (the capsule's struct is
 * marked released, so its destructor does nothing): sluice releases it.
 */
#include "binding.h"

#include <stdlib.h>
#include <string.h>

/* Moves obj's stream into *out.  0, or -1 with an exception set. */
static int take_stream(PyObject *obj, struct ArrowArrayStream *out) {
  PyObject *cap;
  if (PyCapsule_CheckExact(obj)) {
    cap = Py_NewRef(obj);
  } else {
    PyObject *meth = PyObject_GetAttrString(obj, "__arrow_c_stream__");
    if (!meth) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "sluice.from_arrow: %R has no __arrow_c_stream__ (give "
                   "a pyarrow Table, RecordBatchReader or Dataset, a Polars "
                   "or DuckDB result, or any Arrow PyCapsule stream)",
                   (PyObject *)Py_TYPE(obj));
      return -1;
    }
    cap = PyObject_CallNoArgs(meth);
    Py_DECREF(meth);
    if (!cap) return -1;
  }
  struct ArrowArrayStream *st =
      PyCapsule_GetPointer(cap, "arrow_array_stream");
  if (!st) {
    Py_DECREF(cap);
    return -1;
  }
  if (!st->release) {
    Py_DECREF(cap);
    PyErr_SetString(PyExc_ValueError,
                    "sluice.from_arrow: the Arrow stream was consumed already");
    return -1;
  }
  *out = *st;
  st->release = NULL; /* moved */
  Py_DECREF(cap);
  return 0;
}

PyObject *slpy_arrow_reader(PyObject *m, PyObject *args, PyObject *kw) {
  static char *kwlist[] = {"obj", "batch", "drop_last", "name", NULL};
  PyObject *obj;
  Py_ssize_t batch = 0;
  int drop_last = 0;
  const char *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|npz:from_arrow", kwlist, &obj,
                                   &batch, &drop_last, &name))
    return NULL;
  if (batch < 0) {
    PyErr_SetString(PyExc_ValueError, "sluice.from_arrow: batch must be >= 0");
    return NULL;
  }
  struct ArrowArrayStream st;
  if (take_stream(obj, &st) < 0) return NULL;
  sl_arrow_opts o = SL_ARROW_OPTS_INIT;
  o.name = name;
  sl_reader *r = NULL;
  int rc;
  char *msg = NULL;
  Py_BEGIN_ALLOW_THREADS rc = sl_reader_from_arrow_stream(&st, &o, &r);
  if (rc == SL_OK && batch > 0) {
    sl_batch_opts bo = {0};
    bo.drop_last = drop_last;
    sl_reader *b = NULL;
    rc = sl_batch(r, (size_t)batch, &bo, &b);
    r = b;
  }
  if (rc < 0) msg = strdup(sl_last_error());
  Py_END_ALLOW_THREADS if (rc < 0) {
    slpy_raise(rc, msg ? msg : "");
    free(msg);
    return NULL;
  }
  return slpy_pipeline_new(r);
}

PyObject *slpy_arrow_park(PyObject *m, PyObject *args) {
  PyObject *obj;
  const char *name;
  if (!PyArg_ParseTuple(args, "Os:arrow_park", &obj, &name)) return NULL;
  struct ArrowArrayStream st;
  if (take_stream(obj, &st) < 0) return NULL;
  int rc = sl_arrow_stream_park(name, &st);
  if (rc < 0) return slpy_raise(rc, sl_last_error());
  Py_RETURN_NONE;
}

PyObject *slpy_arrow_unpark(PyObject *m, PyObject *arg) {
  const char *name = PyUnicode_AsUTF8AndSize(arg, NULL);
  if (!name) return NULL;
  int released;
  Py_BEGIN_ALLOW_THREADS released = sl_arrow_stream_unpark(name);
  Py_END_ALLOW_THREADS return PyBool_FromLong(released);
}

static void schema_capsule_free(PyObject *cap) {
  struct ArrowSchema *s = PyCapsule_GetPointer(cap, "arrow_schema");
  if (!s) {
    PyErr_Clear();
    return;
  }
  if (s->release) s->release(s);
  free(s);
}

static void array_capsule_free(PyObject *cap) {
  struct ArrowArray *a = PyCapsule_GetPointer(cap, "arrow_array");
  if (!a) {
    PyErr_Clear();
    return;
  }
  if (a->release) a->release(a);
  free(a);
}

PyObject *slpy_sample_arrow_c_array(sl_sample *s, PyObject *requested) {
  if (requested && requested != Py_None) {
    /* The interface lets a producer ignore the request; a consumer then
     * casts if it can.  Ours is the one type the batch has. */
  }
  struct ArrowSchema *sc = calloc(1, sizeof *sc);
  struct ArrowArray *a = calloc(1, sizeof *a);
  if (!sc || !a) {
    free(sc);
    free(a);
    return PyErr_NoMemory();
  }
  int rc = sl_sample_to_arrow(s, sc, a);
  if (rc < 0) {
    free(sc);
    free(a);
    return slpy_raise(rc, sl_last_error());
  }
  PyObject *c1 = PyCapsule_New(sc, "arrow_schema", schema_capsule_free);
  if (!c1) {
    sc->release(sc);
    free(sc);
    a->release(a);
    free(a);
    return NULL;
  }
  PyObject *c2 = PyCapsule_New(a, "arrow_array", array_capsule_free);
  if (!c2) {
    Py_DECREF(c1);
    a->release(a);
    free(a);
    return NULL;
  }
  PyObject *t = PyTuple_Pack(2, c1, c2);
  Py_DECREF(c1);
  Py_DECREF(c2);
  return t;
}
