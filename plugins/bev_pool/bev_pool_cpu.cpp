#include "bev_pool/bev_pool.h"

#include <algorithm>

#include "common/status.h"

namespace
{

using deploykit::fail;
constexpr char kOp[] = "BEVPoolV2";

int32_t checkRanks(char const* tensor, int32_t const* ranks, int64_t numPoints, int64_t limit, char const* extent,
    char* err, size_t errLen)
{
    for (int64_t i = 0; i < numPoints; ++i)
    {
        if (ranks[i] < 0 || ranks[i] >= limit)
        {
            return fail(err, errLen, DEPLOYKIT_ERR_INDEX, "%s: %s[%lld] = %d is outside [0, %lld) (%s)", kOp, tensor,
                static_cast<long long>(i), ranks[i], static_cast<long long>(limit), extent);
        }
    }
    return DEPLOYKIT_OK;
}

int32_t checkIntervals(
    int32_t const* starts, int32_t const* lengths, int64_t numIntervals, int64_t numPoints, char* err, size_t errLen)
{
    for (int64_t k = 0; k < numIntervals; ++k)
    {
        int64_t const start = starts[k];
        int64_t const length = lengths[k];
        if (start < 0 || length < 0 || start + length > numPoints)
        {
            return fail(err, errLen, DEPLOYKIT_ERR_INDEX,
                "%s: interval %lld (interval_starts[%lld] = %lld, interval_lengths[%lld] = %lld) is outside the %lld "
                "points [0, P)",
                kOp, static_cast<long long>(k), static_cast<long long>(k), static_cast<long long>(start),
                static_cast<long long>(k), static_cast<long long>(length), static_cast<long long>(numPoints));
        }
    }
    return DEPLOYKIT_OK;
}

int32_t validate(float const* depth, float const* feat, int32_t const* ranksDepth, int32_t const* ranksFeat,
    int32_t const* ranksBev, int32_t const* starts, int32_t const* lengths, deploykit_bev_pool_dims const& d,
    float const* out, char* err, size_t errLen)
{
    if (int32_t status = deploykit::checkSizes(kOp,
            {{"B", d.batch}, {"N", d.cameras}, {"D", d.depth_bins}, {"H", d.height}, {"W", d.width},
                {"C", d.channels}, {"P", d.num_points}, {"K", d.num_intervals}, {"Z", d.bev_z}, {"Y", d.bev_y},
                {"X", d.bev_x}},
            err, errLen))
    {
        return status;
    }
    int64_t const featRows = d.batch * d.cameras * d.height * d.width;
    int64_t const depthSize = featRows * d.depth_bins;
    int64_t const cells = d.batch * d.bev_z * d.bev_y * d.bev_x;
    if (int32_t status = deploykit::checkBuffers(kOp,
            {{"depth", depth, depthSize}, {"feat", feat, featRows * d.channels},
                {"ranks_depth", ranksDepth, d.num_points}, {"ranks_feat", ranksFeat, d.num_points},
                {"ranks_bev", ranksBev, d.num_points}, {"interval_starts", starts, d.num_intervals},
                {"interval_lengths", lengths, d.num_intervals}, {"out", out, cells * d.channels}},
            err, errLen))
    {
        return status;
    }
    struct
    {
        char const* name;
        int32_t const* ranks;
        int64_t limit;
        char const* extent;
    } const ranks[] = {{"ranks_depth", ranksDepth, depthSize, "B*N*D*H*W"}, {"ranks_feat", ranksFeat, featRows, "B*N*H*W"},
        {"ranks_bev", ranksBev, cells, "B*Z*Y*X"}};
    for (auto const& r : ranks)
    {
        if (int32_t status = checkRanks(r.name, r.ranks, d.num_points, r.limit, r.extent, err, errLen))
        {
            return status;
        }
    }
    return checkIntervals(starts, lengths, d.num_intervals, d.num_points, err, errLen);
}

} // namespace

extern "C" int32_t deploykit_bev_pool_v2_cpu(float const* depth, float const* feat, int32_t const* ranks_depth,
    int32_t const* ranks_feat, int32_t const* ranks_bev, int32_t const* interval_starts,
    int32_t const* interval_lengths, deploykit_bev_pool_dims const* dims, float* out, char* err, size_t err_len)
{
    if (dims == nullptr)
    {
        return fail(err, err_len, DEPLOYKIT_ERR_ARGUMENT, "%s: dims is NULL", kOp);
    }
    deploykit_bev_pool_dims const& d = *dims;
    if (int32_t status = validate(depth, feat, ranks_depth, ranks_feat, ranks_bev, interval_starts, interval_lengths,
            d, out, err, err_len))
    {
        return status;
    }
    int64_t const channels = d.channels;
    std::fill_n(out, d.batch * d.bev_z * d.bev_y * d.bev_x * channels, 0.0F);
    for (int64_t k = 0; k < d.num_intervals; ++k)
    {
        int64_t const start = interval_starts[k];
        int64_t const end = start + interval_lengths[k];
        if (start == end)
        {
            continue; // an empty interval places nothing, and P may be 0
        }
        float* cell = out + ranks_bev[start] * channels;
        for (int64_t i = start; i < end; ++i)
        {
            float const weight = depth[ranks_depth[i]];
            float const* row = feat + ranks_feat[i] * channels;
            for (int64_t c = 0; c < channels; ++c)
            {
                cell[c] += weight * row[c];
            }
        }
    }
    return DEPLOYKIT_OK;
}
