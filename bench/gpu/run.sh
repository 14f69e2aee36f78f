#!/usr/bin/env bash
# bench/gpu/run.sh - the double buffer on a GPU (bench_h2d.cu): host-to-device
# bandwidth against a plain cudaMemcpyAsync from pinned memory, and the
# overlap of copies with a dummy compute kernel.  Builds libsluice (Release,
# into $BUILD) and the benchmark with nvcc, then runs it; extra arguments go
# to the benchmark (--mb N --iters K --slots S --compute-ms T).
#
# Needs the CUDA toolkit (nvcc; $NVCC or /usr/local/cuda/bin/nvcc) and a CUDA
# GPU with its driver.  Without them it says so and exits 1.  Not run by the
# tests.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD=${BUILD:-build-gpu-bench}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}

if [ ! -x "$NVCC" ]; then
  echo "bench/gpu: nvcc not found (install the CUDA toolkit, or set NVCC)" >&2
  exit 1
fi
# A first check before building anything; the benchmark checks again with
# the CUDA runtime itself (cudaGetDeviceCount).
if command -v nvidia-smi >/dev/null 2>&1; then
  if ! nvidia-smi -L >/dev/null 2>&1; then
    echo "bench/gpu: nvidia-smi sees no GPU: this benchmark needs a CUDA device" >&2
    exit 1
  fi
elif [ ! -e /dev/nvidia0 ] && [ ! -e /dev/nvidiactl ]; then
  echo "bench/gpu: no NVIDIA driver or GPU on this machine (no nvidia-smi," \
       "no /dev/nvidia*): this benchmark needs a CUDA device" >&2
  exit 1
fi

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_TESTS=OFF \
  -DSLUICE_BUILD_BENCH=OFF -DSLUICE_BUILD_EXAMPLES=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target sluice_static >/dev/null
# -cudart shared: one CUDA runtime in the process, the libcudart.so that
# libsluice loads too.
"$NVCC" -O2 -std=c++17 -cudart shared -Iinclude bench/gpu/bench_h2d.cu \
  "$BUILD/libsluice.a" -o "$BUILD/bench_h2d" \
  $(pkg-config --libs luajit libzstd zlib) -lpthread -ldl -lm
exec "$BUILD/bench_h2d" "$@"
