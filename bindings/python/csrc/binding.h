/*
 * binding.h - the pieces of the CPython extension sluice._sluice that its
 * files share: one C file per exposed type (pipeline.c: sluice.Pipeline,
 * batch.c: sluice.Batch, tensor.c: sluice.Tensor) and module.c (the module,
 * its functions and the exception classes).
 *
 * The extension is written against the limited API of CPython 3.11 (the
 * first with the buffer protocol in it), so one abi3 build serves 3.11 and
 * later.  Every object that exposes sluice memory holds a reference to the
 * sl_sample that owns it: a Tensor (and so every memoryview, numpy array or
 * DLPack capsule made from it) keeps its batch alive after the batch, the
 * pipeline or both are gone.
 */
#ifndef SLUICE_PY_BINDING_H
#define SLUICE_PY_BINDING_H

#define PY_SSIZE_T_CLEAN
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030B0000
#endif
#include <Python.h>

#include <sluice.h>
#include <sluice/unstable.h>

/* The types, made from their specs at module init (heap types). */
extern PyObject *slpy_PipelineType;
extern PyObject *slpy_BatchType;
extern PyObject *slpy_TensorType;

int slpy_pipeline_init_type(PyObject *module);
int slpy_batch_init_type(PyObject *module);
int slpy_tensor_init_type(PyObject *module);

/* Raises the sluice.Error subclass of `code` with `detail` (the C detail
 * message, copied), and returns NULL. */
PyObject *slpy_raise(int code, const char *detail);

/* sluice.Pipeline over `p` (taken: closed by the object). */
PyObject *slpy_pipeline_new(sl_reader *p);

/* A Batch over `s` (the reference is taken).  `names` is a tuple of the
 * field names and `index` a dict name -> position (both borrowed and
 * retained). */
PyObject *slpy_batch_new(sl_sample *s, PyObject *names, PyObject *index);

/* A Tensor over field `field` of `s` (retains `s`). */
PyObject *slpy_tensor_of_field(sl_sample *s, int field);

/* arrow.c: the module's Arrow functions (from_arrow's reader, parking a
 * stream for a script) and Batch.__arrow_c_array__'s capsules of `s`
 * (borrowed; the array retains it). */
PyObject *slpy_arrow_reader(PyObject *m, PyObject *args, PyObject *kw);
PyObject *slpy_arrow_park(PyObject *m, PyObject *args);
PyObject *slpy_arrow_unpark(PyObject *m, PyObject *arg);
PyObject *slpy_sample_arrow_c_array(sl_sample *s, PyObject *requested);

#endif /* SLUICE_PY_BINDING_H */
