/*
 * cuda_loader.c - loads the CUDA runtime (libcudart) with dlopen the first
 * time a CUDA engine is asked for, and maps CUDA errors to SL_ECUDA.
 *
 * libsluice is never linked against libcudart: a machine without CUDA runs
 * everything else, and asking for a CUDA device there is a clear SL_ECUDA
 * naming what is missing.  The library is looked up as $SLUICE_CUDART when
 * that is set (and only there), else by the dynamic linker's search under
 * its usual names, else where the toolkit was found at build time.  It is
 * never unloaded (buffers made by it may outlive every reader).
 */
#include "device/cudart.h"

#ifdef SLUICE_HAVE_CUDA_HEADERS

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static sl__cudart table;
static int load_failed;
static char load_msg[768];

/* Opens one candidate; on failure appends dlopen's reason to load_msg. */
static void *try_open(const char *name, size_t *used) {
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h && *used < sizeof load_msg) {
    const char *why = dlerror();
    *used += (size_t)snprintf(load_msg + *used, sizeof load_msg - *used, "%s%s",
                              *used ? "; " : "", why ? why : name);
  }
  return h;
}

static void load(void) {
  static const char *const names[] = {
      "libcudart.so",     "libcudart.so.13",
      "libcudart.so.12",  "libcudart.so.11.0",
#ifdef SLUICE_CUDART_PATH
      SLUICE_CUDART_PATH,
#endif
  };
  size_t used = 0;
  void *h = NULL;
  const char *env = getenv("SLUICE_CUDART");
  if (env && *env) {
    h = try_open(env, &used);
    table.path = env;
  } else {
    for (size_t i = 0; !h && i < sizeof names / sizeof names[0]; i++) {
      h = try_open(names[i], &used);
      table.path = names[i];
    }
  }
  if (!h) {
    char reasons[sizeof load_msg];
    memcpy(reasons, load_msg, sizeof reasons);
    snprintf(load_msg, sizeof load_msg, "cannot load the CUDA runtime (%s)%s",
             reasons,
             env && *env ? "" : ": set SLUICE_CUDART to libcudart.so's path");
    load_failed = 1;
    return;
  }
  /* dlsym returns an object pointer; POSIX guarantees it converts to a
   * function pointer, which memcpy does without a cast warning. */
#define SL__CUDART_SYM(fn)                                                     \
  do {                                                                         \
    void *sym = dlsym(h, #fn);                                                 \
    if (!sym) {                                                                \
      snprintf(load_msg, sizeof load_msg,                                      \
               "the CUDA runtime %s has no %s (too old a CUDA?)", table.path,  \
               #fn);                                                           \
      load_failed = 1;                                                         \
      return;                                                                  \
    }                                                                          \
    memcpy(&table.fn, &sym, sizeof sym);                                       \
  } while (0);
  SL_CUDART_FUNCTIONS(SL__CUDART_SYM)
#undef SL__CUDART_SYM
}

int sl__cudart_get(const sl__cudart **out) {
  pthread_once(&load_once, load);
  *out = NULL;
  if (load_failed) return sl_set_error(SL_ECUDA, "%s", load_msg);
  *out = &table;
  return SL_OK;
}

int sl__cuda_check(const sl__cudart *cu, cudaError_t err, int device_id,
                   const char *call, const char *file, int line) {
  if (err == cudaSuccess) return SL_OK;
  (void)cu->cudaGetLastError(); /* clear a non-sticky error */
  const char *base = strrchr(file, '/');
  const char *name = cu->cudaGetErrorName(err);
  const char *desc = cu->cudaGetErrorString(err);
  return sl_set_error(SL_ECUDA, "cuda:%d: %s failed: %s (%s) [%s:%d]",
                      device_id, call, name ? name : "cudaError?",
                      desc ? desc : "no description", base ? base + 1 : file,
                      line);
}

#else
/* Built without the CUDA headers: nothing to load (ISO C wants a
 * declaration in every translation unit). */
typedef int sl__no_cuda_loader;
#endif /* SLUICE_HAVE_CUDA_HEADERS */
