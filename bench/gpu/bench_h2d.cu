// bench_h2d.cu - the double buffer on a GPU: host-to-device bandwidth
// against a plain cudaMemcpyAsync from pinned memory, and how much of the
// copy hides behind compute (a dummy kernel standing in for a training
// step).  Built and run by bench/gpu/run.sh; needs a CUDA device and exits
// 1 with a message without one.  Not part of the tests.
//
//   bench_h2d [--mb N] [--iters K] [--slots S] [--compute-ms T]
//
// Upstream is a generator whose batches are zero-copy views of one host
// buffer, so what is measured is the double buffer itself: the memcpy into
// pinned staging plus the copy to the device, on its own thread.
#include "sluice.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                               \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      std::fprintf(stderr, "bench/gpu: %s failed: %s (%s)\n", #call,           \
                   cudaGetErrorName(e_), cudaGetErrorString(e_));              \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

#define SK(call)                                                               \
  do {                                                                         \
    int rc_ = (call);                                                          \
    if (rc_ < 0) {                                                             \
      std::fprintf(stderr, "bench/gpu: %s failed: %s: %s\n", #call,            \
                   sl_err_name(rc_), sl_last_error());                         \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

static double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Spins for `cycles` GPU clock cycles, reading the batch so the copy must be
// complete and the slot in use while it runs.
__global__ void busy(const unsigned char *p, size_t n, long long cycles,
                     unsigned long long *sink) {
  long long t0 = clock64();
  unsigned long long acc = 0;
  size_t i = threadIdx.x;
  while (clock64() - t0 < cycles) {
    if (i < n) acc += p[i];
    i += blockDim.x;
    if (i >= n) i = threadIdx.x;
  }
  if (acc == 42) *sink = acc; // keeps the reads
}

// --- the upstream: zero-copy views of one host buffer ------------------------

struct source {
  sl_schema *schema;
  sl_buffer *buf;
  int64_t bytes;
  long left, total;
};

static int src_next(void *ud, sl_sample **out) {
  source *s = static_cast<source *>(ud);
  if (s->left == 0) return SL_EOF;
  s->left--;
  sl_sample *smp = sl_sample_new(s->schema);
  if (!smp) return SL_ENOMEM;
  sl_tensor t;
  int rc = sl_tensor_view(&t, SL_U8, 1, &s->bytes, s->buf, 0);
  if (rc == SL_OK) rc = sl_sample_set_move(smp, 0, &t);
  if (rc != SL_OK) {
    sl_sample_release(smp);
    return rc;
  }
  *out = smp;
  return SL_OK;
}

static int src_reset(void *ud) {
  source *s = static_cast<source *>(ud);
  s->left = s->total;
  return SL_OK;
}

static sl_reader *double_buffer(source *src, int slots) {
  sl_reader *up = nullptr, *r = nullptr;
  SK(sl_reader_from_generator(src->schema, src_next, src_reset, nullptr, src,
                              &up));
  sl_double_buffer_opts o = SL_DOUBLE_BUFFER_OPTS_INIT;
  o.device = "cuda:0";
  o.slots = (uint32_t)slots;
  SK(sl_double_buffer(up, &o, &r));
  return r;
}

int main(int argc, char **argv) {
  size_t mb = 64;
  long iters = 50;
  int slots = 2;
  double compute_ms = 5.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mb"))
      mb = std::strtoul(argv[i + 1], 0, 10);
    else if (!std::strcmp(argv[i], "--iters"))
      iters = std::atol(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--slots"))
      slots = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--compute-ms"))
      compute_ms = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--mb N] [--iters K] [--slots S] "
                   "[--compute-ms T]\n",
                   argv[0]);
      return 2;
    }
  }
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev == 0) {
    std::fprintf(stderr,
                 "bench/gpu: no CUDA device (%s: %s): this benchmark needs a "
                 "GPU\n",
                 e != cudaSuccess ? cudaGetErrorName(e) : "0 devices",
                 e != cudaSuccess ? cudaGetErrorString(e) : "none found");
    return 1;
  }
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  CK(cudaSetDevice(0));
  const size_t n = mb << 20;
  const double gb = (double)n * (double)iters / 1e9;
  std::printf("device 0: %s; batch %zu MiB, %ld batches, %d slots\n", prop.name,
              mb, iters, slots);

  // --- plain cudaMemcpyAsync from pinned memory --------------------------
  unsigned char *pinned = nullptr, *dev = nullptr;
  unsigned long long *sink = nullptr;
  CK(cudaHostAlloc((void **)&pinned, n, cudaHostAllocDefault));
  CK(cudaMalloc((void **)&dev, n));
  CK(cudaMalloc((void **)&sink, sizeof *sink));
  std::memset(pinned, 1, n);
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  CK(cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, st));
  CK(cudaStreamSynchronize(st));
  double t0 = now_s();
  for (long i = 0; i < iters; i++)
    CK(cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, st));
  CK(cudaStreamSynchronize(st));
  double plain_s = now_s() - t0;
  std::printf("plain cudaMemcpyAsync (pinned):    %8.2f GB/s\n", gb / plain_s);

  // --- the double buffer, consumer idle ----------------------------------
  source src{};
  src.schema = sl_schema_new();
  int64_t var = SL_DIM_VAR;
  SK(sl_schema_add(src.schema, "x", SL_U8, 1, &var));
  src.buf = sl_buffer_new(n);
  if (!src.schema || !src.buf) return 1;
  std::memset(sl_buffer_data(src.buf), 1, n);
  src.bytes = (int64_t)n;
  src.total = src.left = iters + 1;
  sl_reader *r = double_buffer(&src, slots);
  sl_sample *b = nullptr;
  SK(sl_reader_next(r, &b)); // warm-up: slot allocation
  sl_sample_release(b);
  t0 = now_s();
  for (long i = 0; i < iters; i++) {
    SK(sl_reader_next(r, &b));
    int id = -1;
    if (sl_tensor_device(sl_sample_at_const(b, 0), &id) != SL_DEVICE_CUDA) {
      std::fprintf(stderr, "bench/gpu: batch not on the GPU\n");
      return 1;
    }
    CK(cudaStreamSynchronize(0)); // the copy is complete
    sl_sample_release(b);
  }
  double db_s = now_s() - t0;
  std::printf("double buffer (staging + copy):    %8.2f GB/s (%.0f%% of "
              "plain)\n",
              gb / db_s, 100.0 * plain_s / db_s);

  // --- overlap with compute ------------------------------------------------
  // The kernel's length in cycles, from the clock rate (kHz).
  int khz = 0;
  CK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  long long cycles = (long long)(compute_ms * 1e-3 * khz * 1e3);
  if (cycles <= 0) cycles = 1000000;
  busy<<<1, 256>>>(dev, n, cycles, sink);
  CK(cudaDeviceSynchronize());
  t0 = now_s();
  for (long i = 0; i < iters; i++)
    busy<<<1, 256>>>(dev, n, cycles, sink);
  CK(cudaDeviceSynchronize());
  double compute_s = now_s() - t0;

  // Serial: copy, then compute, on one stream.
  t0 = now_s();
  for (long i = 0; i < iters; i++) {
    CK(cudaMemcpyAsync(dev, pinned, n, cudaMemcpyHostToDevice, 0));
    busy<<<1, 256>>>(dev, n, cycles, sink);
  }
  CK(cudaDeviceSynchronize());
  double serial_s = now_s() - t0;

  // The double buffer: the kernel on batch i (legacy default stream, the
  // opts.stream default) while batch i+1 is copied; releasing a batch right
  // after queuing its kernel is safe: the slot's next copy waits for it.
  SK(sl_reader_reset(r));
  SK(sl_reader_next(r, &b));
  sl_sample_release(b);
  t0 = now_s();
  for (long i = 0; i < iters; i++) {
    SK(sl_reader_next(r, &b));
    const sl_tensor *x = sl_sample_at_const(b, 0);
    busy<<<1, 256>>>((const unsigned char *)x->data, x->nbytes, cycles, sink);
    CK(cudaGetLastError());
    sl_sample_release(b);
  }
  CK(cudaDeviceSynchronize());
  double overlap_s = now_s() - t0;
  double copy_s = plain_s;
  double hidden =
      (serial_s - overlap_s) / (copy_s < compute_s ? copy_s : compute_s);
  std::printf("compute only:                      %8.3f s\n", compute_s);
  std::printf("copy then compute (serial):        %8.3f s\n", serial_s);
  std::printf("double buffer (copy || compute):   %8.3f s\n", overlap_s);
  std::printf("overlap: %.0f%% of the shorter of copy and compute hidden\n",
              100.0 * hidden);

  sl_reader_destroy(r);
  sl_buffer_release(src.buf);
  sl_schema_release(src.schema);
  CK(cudaStreamDestroy(st));
  CK(cudaFree(dev));
  CK(cudaFree(sink));
  CK(cudaFreeHost(pinned));
  return 0;
}
