#include "pillar_scatter/pillar_scatter.h"

#include "common/cuda_utils.cuh"

namespace
{

// One thread per feature element (b, p, c), channel fastest, so feature reads are coalesced; the
// writes go to C different planes of the canvas whatever the mapping.
template <typename T>
__global__ void pillarScatterKernel(T const* __restrict__ features, int32_t const* __restrict__ coords,
    int32_t const* __restrict__ numPillars, int64_t batch, int64_t maxPillars, int64_t channels, int64_t gridY,
    int64_t gridX, T* __restrict__ out, int32_t* skipped)
{
    int64_t const index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    int64_t const c = index % channels;
    int64_t const row = index / channels; // b * P + p
    int64_t const b = row / maxPillars;
    int64_t const p = row % maxPillars;
    if (b >= batch)
    {
        return;
    }
    // Clamping keeps a bad count from reading padding rows beyond P.
    int64_t const live = min(max(static_cast<int64_t>(numPillars[b]), int64_t{0}), maxPillars);
    if (p >= live)
    {
        return;
    }
    int64_t const y = coords[row * 4 + 2];
    int64_t const x = coords[row * 4 + 3];
    if (y < 0 || y >= gridY || x < 0 || x >= gridX)
    {
        if (skipped != nullptr && c == 0)
        {
            atomicAdd(skipped, 1);
        }
        return;
    }
    deploykit::accumulate(out + ((b * channels + c) * gridY + y) * gridX + x, deploykit::toFloat(features[index]));
}

} // namespace

extern "C" cudaError_t deploykit_pillar_scatter_cuda(deploykit_dtype dtype, void const* features,
    int32_t const* coords, int32_t const* num_pillars, deploykit_pillar_scatter_dims const* dims, void* out,
    int32_t* skipped, cudaStream_t stream)
{
    if (dims == nullptr || !deploykit::isKnown(dtype))
    {
        return cudaErrorInvalidValue;
    }
    deploykit_pillar_scatter_dims const& d = *dims;
    if (d.batch < 0 || d.max_pillars < 0 || d.channels < 0 || d.grid_y < 0 || d.grid_x < 0)
    {
        return cudaErrorInvalidValue;
    }
    size_t const outBytes = d.batch * d.channels * d.grid_y * d.grid_x * deploykit::elementSize(dtype);
    if (outBytes == 0)
    {
        return cudaSuccess;
    }
    if (cudaError_t status = cudaMemsetAsync(out, 0, outBytes, stream))
    {
        return status;
    }
    int64_t const threads = d.batch * d.max_pillars * d.channels;
    if (threads == 0)
    {
        return cudaSuccess;
    }
    unsigned int const blocks = deploykit::blocksFor(threads);
    if (dtype == DEPLOYKIT_FLOAT16)
    {
        pillarScatterKernel<__half><<<blocks, deploykit::kThreadsPerBlock, 0, stream>>>(
            static_cast<__half const*>(features), coords, num_pillars, d.batch, d.max_pillars, d.channels, d.grid_y,
            d.grid_x, static_cast<__half*>(out), skipped);
    }
    else
    {
        pillarScatterKernel<float><<<blocks, deploykit::kThreadsPerBlock, 0, stream>>>(
            static_cast<float const*>(features), coords, num_pillars, d.batch, d.max_pillars, d.channels, d.grid_y,
            d.grid_x, static_cast<float*>(out), skipped);
    }
    return cudaGetLastError();
}
