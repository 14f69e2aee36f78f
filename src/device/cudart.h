/*
 * cudart.h - the CUDA runtime as sluice calls it: a table of function
 * pointers filled by dlopen/dlsym at run time (cuda_loader.c), so that
 * libsluice never links libcudart and runs on machines without CUDA, and
 * the one checking macro every CUDA call goes through.
 *
 * Only compiled with the CUDA toolkit's headers (SLUICE_HAVE_CUDA_HEADERS,
 * set by CMake when it finds the toolkit): the pointers take their exact
 * types from the header's declarations.
 */
#ifndef SLUICE_CUDART_H
#define SLUICE_CUDART_H

#ifdef SLUICE_HAVE_CUDA_HEADERS

/* The functions are looked up by their plain names; the per-thread default
 * stream variants (cudaMemcpyAsync_ptsz, ...) would be other symbols. */
#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#error                                                                         \
    "sluice looks CUDA functions up by their plain names: build it without CUDA_API_PER_THREAD_DEFAULT_STREAM"
#endif

#include <cuda_runtime_api.h>

#include "device/device.h"

/* Every runtime function sluice calls. */
#define SL_CUDART_FUNCTIONS(X)                                                 \
  X(cudaGetErrorName)                                                          \
  X(cudaGetErrorString)                                                        \
  X(cudaGetLastError)                                                          \
  X(cudaRuntimeGetVersion)                                                     \
  X(cudaDriverGetVersion)                                                      \
  X(cudaGetDeviceCount)                                                        \
  X(cudaGetDevice)                                                             \
  X(cudaSetDevice)                                                             \
  X(cudaDeviceSynchronize)                                                     \
  X(cudaMalloc)                                                                \
  X(cudaFree)                                                                  \
  X(cudaHostAlloc)                                                             \
  X(cudaFreeHost)                                                              \
  X(cudaStreamCreateWithFlags)                                                 \
  X(cudaStreamDestroy)                                                         \
  X(cudaStreamSynchronize)                                                     \
  X(cudaStreamWaitEvent)                                                       \
  X(cudaEventCreateWithFlags)                                                  \
  X(cudaEventDestroy)                                                          \
  X(cudaEventRecord)                                                           \
  X(cudaEventSynchronize)                                                      \
  X(cudaMemcpyAsync)

typedef struct sl__cudart {
  const char *path; /* the name the library was loaded by */
#define SL__CUDART_FIELD(fn) __typeof__(&fn) fn;
  SL_CUDART_FUNCTIONS(SL__CUDART_FIELD)
#undef SL__CUDART_FIELD
} sl__cudart;

/* The runtime, loaded on the first call (once per process; never
 * unloaded).  SL_OK and *out, or SL_ECUDA with a message naming the
 * libraries tried and dlopen's reason ("cannot load the CUDA runtime ..."),
 * the same on every later call. */
int sl__cudart_get(const sl__cudart **out);

/* The checking macro's body: SL_OK when err is cudaSuccess; otherwise
 * clears the runtime's last error (a sticky error stays: the context is
 * then unusable, and every later call says so) and returns SL_ECUDA with
 * "cuda:DEV: CALL failed: cudaErrorX (its description) [file.c:LINE]". */
int sl__cuda_check(const sl__cudart *cu, cudaError_t err, int device_id,
                   const char *call, const char *file, int line);

/* SL_CUDA_CHECK(cu, dev, fn, args...) calls cu->fn(args...) and evaluates
 * to SL_OK or SL_ECUDA with the message above naming the call as written:
 *   SL_FORWARD_IF_ERROR(SL_CUDA_CHECK(cu, 0, cudaMalloc, &p, n));
 * Every CUDA call of libsluice goes through it. */
#define SL_CUDA_CHECK(cu, dev, fn, ...)                                        \
  sl__cuda_check((cu), (cu)->fn(__VA_ARGS__), (dev), #fn "(" #__VA_ARGS__ ")", \
                 __FILE__, __LINE__)
/* The same, storing the call's cudaError_t in *errp as well, for a caller
 * that tells some errors apart (engine_cuda.c: no driver, no device). */
#define SL_CUDA_CHECK_ERR(cu, dev, errp, fn, ...)                              \
  sl__cuda_check((cu), (*(errp) = (cu)->fn(__VA_ARGS__)), (dev),               \
                 #fn "(" #__VA_ARGS__ ")", __FILE__, __LINE__)

#endif /* SLUICE_HAVE_CUDA_HEADERS */
#endif
