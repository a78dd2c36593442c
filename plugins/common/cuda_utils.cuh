// Device helpers shared by the CUDA kernels: float32 or float16 storage, float32 arithmetic.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "common/abi.h"

namespace deploykit
{

constexpr int kThreadsPerBlock = 256;

__device__ __forceinline__ float toFloat(float v)
{
    return v;
}

__device__ __forceinline__ float toFloat(__half v)
{
    return __half2float(v);
}

// Outputs are accumulated with atomics so that cells hit by several intervals or pillars get the
// sum (the documented semantics) instead of a racy last write.
__device__ __forceinline__ void accumulate(float* target, float value)
{
    atomicAdd(target, value);
}

__device__ __forceinline__ void accumulate(__half* target, float value)
{
    atomicAdd(target, __float2half(value));
}

inline unsigned int blocksFor(int64_t threads)
{
    return static_cast<unsigned int>((threads + kThreadsPerBlock - 1) / kThreadsPerBlock);
}

inline bool isKnown(deploykit_dtype dtype)
{
    return dtype == DEPLOYKIT_FLOAT32 || dtype == DEPLOYKIT_FLOAT16;
}

inline size_t elementSize(deploykit_dtype dtype)
{
    return dtype == DEPLOYKIT_FLOAT16 ? sizeof(__half) : sizeof(float);
}

} // namespace deploykit
