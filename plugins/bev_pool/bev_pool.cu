#include "bev_pool/bev_pool.h"

#include "common/cuda_utils.cuh"

namespace
{

using deploykit::toFloat;

// One thread per (interval, channel), channel fastest: a warp reads one point's feature row
// coalesced while its depth weight and ranks are broadcast, as in BEVDet's bev_pool_v2.
template <typename T>
__global__ void bevPoolV2Kernel(T const* __restrict__ depth, T const* __restrict__ feat,
    int32_t const* __restrict__ ranksDepth, int32_t const* __restrict__ ranksFeat,
    int32_t const* __restrict__ ranksBev, int32_t const* __restrict__ starts, int32_t const* __restrict__ lengths,
    int64_t numIntervals, int64_t channels, int64_t numPoints, int64_t depthSize, int64_t featRows, int64_t cells,
    T* __restrict__ out, int32_t* skipped)
{
    int64_t const index = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
    int64_t const k = index / channels;
    int64_t const c = index % channels;
    if (k >= numIntervals)
    {
        return;
    }
    // Each skip is counted once, by the channel-0 thread.
    bool const counts = skipped != nullptr && c == 0;
    int64_t const start = starts[k];
    int64_t const length = lengths[k];
    if (start < 0 || length < 0 || start + length > numPoints)
    {
        if (counts)
        {
            atomicAdd(skipped, 1);
        }
        return;
    }
    if (length == 0)
    {
        return;
    }
    int64_t const cell = ranksBev[start];
    if (cell < 0 || cell >= cells)
    {
        if (counts)
        {
            atomicAdd(skipped, 1);
        }
        return;
    }
    float sum = 0.0F;
    for (int64_t i = start; i < start + length; ++i)
    {
        int64_t const d = ranksDepth[i];
        int64_t const f = ranksFeat[i];
        if (d < 0 || d >= depthSize || f < 0 || f >= featRows)
        {
            if (counts)
            {
                atomicAdd(skipped, 1);
            }
            continue;
        }
        sum += toFloat(depth[d]) * toFloat(feat[f * channels + c]);
    }
    deploykit::accumulate(out + cell * channels + c, sum);
}

template <typename T>
void launch(void const* depth, void const* feat, int32_t const* ranksDepth, int32_t const* ranksFeat,
    int32_t const* ranksBev, int32_t const* starts, int32_t const* lengths, deploykit_bev_pool_dims const& d,
    void* out, int32_t* skipped, cudaStream_t stream)
{
    int64_t const featRows = d.batch * d.cameras * d.height * d.width;
    int64_t const threads = d.num_intervals * d.channels;
    bevPoolV2Kernel<T><<<deploykit::blocksFor(threads), deploykit::kThreadsPerBlock, 0, stream>>>(
        static_cast<T const*>(depth), static_cast<T const*>(feat), ranksDepth, ranksFeat, ranksBev, starts, lengths,
        d.num_intervals, d.channels, d.num_points, featRows * d.depth_bins, featRows,
        d.batch * d.bev_z * d.bev_y * d.bev_x, static_cast<T*>(out), skipped);
}

} // namespace

extern "C" cudaError_t deploykit_bev_pool_v2_cuda(deploykit_dtype dtype, void const* depth, void const* feat,
    int32_t const* ranks_depth, int32_t const* ranks_feat, int32_t const* ranks_bev, int32_t const* interval_starts,
    int32_t const* interval_lengths, deploykit_bev_pool_dims const* dims, void* out, int32_t* skipped,
    cudaStream_t stream)
{
    if (dims == nullptr || !deploykit::isKnown(dtype))
    {
        return cudaErrorInvalidValue;
    }
    deploykit_bev_pool_dims const& d = *dims;
    int64_t const sizes[] = {d.batch, d.cameras, d.depth_bins, d.height, d.width, d.channels, d.num_points,
        d.num_intervals, d.bev_z, d.bev_y, d.bev_x};
    for (int64_t size : sizes)
    {
        if (size < 0)
        {
            return cudaErrorInvalidValue;
        }
    }
    size_t const outBytes = d.batch * d.bev_z * d.bev_y * d.bev_x * d.channels * deploykit::elementSize(dtype);
    if (outBytes == 0)
    {
        return cudaSuccess;
    }
    if (cudaError_t status = cudaMemsetAsync(out, 0, outBytes, stream))
    {
        return status;
    }
    if (d.num_intervals == 0)
    {
        return cudaSuccess;
    }
    if (dtype == DEPLOYKIT_FLOAT16)
    {
        launch<__half>(depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_starts, interval_lengths, d, out,
            skipped, stream);
    }
    else
    {
        launch<float>(depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_starts, interval_lengths, d, out,
            skipped, stream);
    }
    return cudaGetLastError();
}
