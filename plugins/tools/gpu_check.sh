#!/usr/bin/env bash
# Builds the plugin kernels for this machine's GPU and checks them against the CPU reference
# (max abs error, skip counts, kernel time and bandwidth). Needs nvcc, cmake and a GPU.
#
# usage: plugins/tools/gpu_check.sh [RESULTS.json]
#   BUILD_DIR   build folder (default build/plugins-gpu-check, apart from build/plugins so that
#               the architecture picked here does not stick to the regular build)
#   CUDA_ARCHS  CMAKE_CUDA_ARCHITECTURES (default: the GPU's compute capability from nvidia-smi)
# Exit code: that of deploykit_gpu_check (0 passed, 1 a check failed, 2 no usable GPU), or 3 when
# no GPU driver is present.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$root/build/plugins-gpu-check}
json=${1:-$build/gpu_check.json}

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU driver (nvidia-smi missing or failing)" >&2
  exit 3
fi
archs=${CUDA_ARCHS:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d '. ')}

cmake -S "$root/plugins" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$archs" >/dev/null
cmake --build "$build" --target deploykit_gpu_check -j "$(nproc)" >/dev/null
"$build/deploykit_gpu_check" "$json"
echo "results: $json"
