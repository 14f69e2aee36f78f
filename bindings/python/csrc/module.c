/*
 * module.c - the extension module sluice._sluice: opening pipelines,
 * run statistics, and the exception classes (sluice/__init__.py re-exports
 * all of it).
 *
 * Errors.  sluice.Error (an Exception) carries `code` (the negative
 * SL_E* value), `code_name` ("SL_ELUA") and `detail` (sl_last_error's
 * message: what and where, with the Lua traceback for a Lua error); each
 * code has a subclass named after it without the prefix (sluice.ELUA,
 * sluice.EIO, ...), generated from SL_ERRNO_MAP so the lists cannot drift.
 *
 * One libsluice per process.  The pipeline script's Lua facade reaches
 * libsluice through the LuaJIT FFI and uses ffi.C when the process already
 * exports the sl_* symbols (lua/sluice/cdef.lua).  Python loads extension
 * modules with RTLD_LOCAL, which hides the libsluice this module links, so
 * the module makes it global (dlopen RTLD_NOLOAD | RTLD_GLOBAL on the file
 * that holds sl_version) when it is imported: the facade then calls the
 * very library the binding calls (one set of error slots and registries),
 * never a second copy.
 */
#include "binding.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define SLPY_NCODES 32

static PyObject *error_base;
static PyObject *error_types[SLPY_NCODES]; /* by -code */

PyObject *slpy_raise(int code, const char *detail) {
  PyObject *cls = error_base;
  if (code < 0 && -code < SLPY_NCODES && error_types[-code])
    cls = error_types[-code];
  const char *name = sl_err_name(code);
  if (!detail || !*detail) detail = sl_strerror(code);
  PyObject *exc = PyObject_CallFunction(cls, "s", detail);
  if (!exc) return NULL;
  PyObject *c = PyLong_FromLong(code);
  PyObject *n = PyUnicode_FromString(name);
  PyObject *d = PyUnicode_FromString(detail);
  if (c && n && d && PyObject_SetAttrString(exc, "code", c) == 0 &&
      PyObject_SetAttrString(exc, "code_name", n) == 0 &&
      PyObject_SetAttrString(exc, "detail", d) == 0)
    PyErr_SetObject(cls, exc);
  Py_XDECREF(c);
  Py_XDECREF(n);
  Py_XDECREF(d);
  Py_DECREF(exc);
  return NULL;
}

static int add_errors(PyObject *m) {
  error_base = PyErr_NewExceptionWithDoc(
      "sluice.Error",
      "A sluice failure: .code (SL_E* value), .code_name ('SL_ELUA'), "
      ".detail (the C detail message; a Lua error's traceback included).",
      NULL, NULL);
  if (!error_base) return -1;
  Py_INCREF(error_base);
  if (PyModule_AddObject(m, "Error", error_base) < 0) return -1;
#define SLPY_ERR(name, val, desc)                                              \
  if ((val) < 0 && -(val) < SLPY_NCODES && (val) != SL_EOF) {                  \
    PyObject *t = PyErr_NewExceptionWithDoc(                                   \
        "sluice." #name, "SL_" #name ": " desc, error_base, NULL);             \
    if (!t) return -1;                                                         \
    error_types[-(val)] = t;                                                   \
    Py_INCREF(t);                                                              \
    if (PyModule_AddObject(m, #name, t) < 0) return -1;                        \
  }
  SL_ERRNO_MAP(SLPY_ERR)
#undef SLPY_ERR
  return 0;
}

/* Converts the script arguments (any objects, through str()) to a NULL-
 * terminated array of UTF-8 strings kept alive by *keep (a list). */
static const char **script_args(PyObject *args, Py_ssize_t first,
                                PyObject **keep, int *argc) {
  Py_ssize_t n = PyTuple_Size(args) - first;
  *keep = PyList_New(0);
  const char **argv = PyMem_Calloc((size_t)n + 1, sizeof *argv);
  if (!*keep || !argv) {
    PyMem_Free(argv);
    Py_CLEAR(*keep);
    PyErr_NoMemory();
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *s = PyObject_Str(PyTuple_GetItem(args, first + i));
    const char *u = s ? PyUnicode_AsUTF8AndSize(s, NULL) : NULL;
    if (s && PyList_Append(*keep, s) < 0) u = NULL;
    Py_XDECREF(s);
    if (!u) {
      PyMem_Free(argv);
      Py_CLEAR(*keep);
      return NULL;
    }
    argv[i] = u;
  }
  *argc = (int)n;
  return argv;
}

/* Opens a pipeline from the file `path` or, when `path` is NULL, from the
 * source text `code` (chunk name `cname`), with the GIL released, and
 * wraps it.  Takes `argv` (PyMem) and `keep`. */
static PyObject *open_released(const char *path, const char *code,
                               const char *cname, const char **argv, int argc,
                               PyObject *keep) {
  sl_reader *p = NULL;
  int rc;
  char *msg = NULL;
  Py_BEGIN_ALLOW_THREADS rc =
      path ? sl_pipeline_open_file(path, argc, argv, &p)
           : sl_pipeline_open_string(code, cname, argc, argv, &p);
  /* The detail is thread-local: read it before anything else runs. */
  if (rc < 0) msg = strdup(sl_last_error());
  Py_END_ALLOW_THREADS PyMem_Free(argv);
  Py_DECREF(keep);
  if (rc < 0) {
    slpy_raise(rc, msg);
    free(msg);
    return NULL;
  }
  return slpy_pipeline_new(p);
}

static PyObject *open_script(PyObject *m, PyObject *args) {
  if (PyTuple_Size(args) < 1) {
    PyErr_SetString(PyExc_TypeError,
                    "open_script(path, *args): missing the script path");
    return NULL;
  }
  PyObject *path = NULL;
  if (!PyUnicode_FSConverter(PyTuple_GetItem(args, 0), &path)) return NULL;
  PyObject *keep = NULL;
  int argc = 0;
  const char **argv = script_args(args, 1, &keep, &argc);
  PyObject *r =
      argv ? open_released(PyBytes_AsString(path), NULL, NULL, argv, argc, keep)
           : NULL;
  Py_DECREF(path);
  return r;
}

static PyObject *open_string(PyObject *m, PyObject *args, PyObject *kw) {
  PyObject *name = Py_None;
  if (kw) {
    name = PyDict_GetItemString(kw, "name");
    if (!name) name = Py_None;
    if (PyDict_Size(kw) > (name != Py_None)) {
      PyErr_SetString(PyExc_TypeError,
                      "open_string(code, *args, name=None): unknown keyword");
      return NULL;
    }
  }
  if (PyTuple_Size(args) < 1) {
    PyErr_SetString(PyExc_TypeError,
                    "open_string(code, *args, name=None): missing the code");
    return NULL;
  }
  const char *code = PyUnicode_AsUTF8AndSize(PyTuple_GetItem(args, 0), NULL);
  if (!code) return NULL;
  const char *cname = NULL;
  if (name != Py_None && !(cname = PyUnicode_AsUTF8AndSize(name, NULL)))
    return NULL;
  PyObject *keep = NULL;
  int argc = 0;
  const char **argv = script_args(args, 1, &keep, &argc);
  if (!argv) return NULL;
  return open_released(NULL, code, cname, argv, argc, keep);
}

static PyObject *stats_enable(PyObject *m, PyObject *arg) {
  int on = PyObject_IsTrue(arg);
  if (on < 0) return NULL;
  sl_stats_enable(on);
  Py_RETURN_NONE;
}

static PyObject *stats_enabled(PyObject *m, PyObject *unused) {
  return PyBool_FromLong(sl_stats_enabled());
}

static PyObject *library_path(PyObject *m, PyObject *unused) {
  Dl_info info;
  if (!dladdr((void *)sl_version, &info) || !info.dli_fname) Py_RETURN_NONE;
  return PyUnicode_DecodeFSDefault(info.dli_fname);
}

static PyMethodDef module_methods[] = {
    {"open_script", open_script, METH_VARARGS,
     "open_script(path, *args) -> Pipeline: runs the Lua pipeline script "
     "(sl_pipeline_open_file); the arguments reach it as strings."},
    {"open_string", (PyCFunction)(void (*)(void))open_string,
     METH_VARARGS | METH_KEYWORDS,
     "open_string(code, *args, name=None) -> Pipeline: the same for Lua "
     "source text (sl_pipeline_open_string)."},
    {"stats_enable", stats_enable, METH_O,
     "stats_enable(on): per-stage timing for every pipeline of the process "
     "(sl_stats_enable)."},
    {"stats_enabled", stats_enabled, METH_NOARGS, "sl_stats_enabled()"},
    {"arrow_reader", (PyCFunction)(void (*)(void))slpy_arrow_reader,
     METH_VARARGS | METH_KEYWORDS,
     "arrow_reader(obj, batch=0, drop_last=False, name=None) -> Pipeline "
     "over obj's Arrow stream (__arrow_c_stream__), one sample per row, "
     "batched when batch > 0."},
    {"arrow_park", slpy_arrow_park, METH_VARARGS,
     "arrow_park(obj, name): parks obj's Arrow stream for "
     "sluice.open(\"arrow:NAME\") in a pipeline script."},
    {"arrow_unpark", slpy_arrow_unpark, METH_O,
     "arrow_unpark(name) -> bool: releases a parked stream not opened."},
    {"library_path", library_path, METH_NOARGS,
     "The file of the libsluice this module uses."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, .m_name = "sluice._sluice",
    .m_doc = "The C part of the sluice Python binding (use `import sluice`).",
    .m_size = -1, .m_methods = module_methods};

PyMODINIT_FUNC PyInit__sluice(void);
PyMODINIT_FUNC PyInit__sluice(void) {
  Dl_info info;
  if (dladdr((void *)sl_version, &info) && info.dli_fname) {
    /* Never closed: the library stays for the process's life anyway. */
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
  }
  PyObject *m = PyModule_Create(&module_def);
  if (!m) return NULL;
  if (add_errors(m) < 0 || slpy_tensor_init_type(m) < 0 ||
      slpy_batch_init_type(m) < 0 || slpy_pipeline_init_type(m) < 0 ||
      PyModule_AddStringConstant(m, "libsluice_version", sl_version()) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
