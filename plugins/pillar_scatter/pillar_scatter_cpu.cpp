#include "pillar_scatter/pillar_scatter.h"

#include <algorithm>

#include "common/status.h"

namespace
{

using deploykit::fail;
constexpr char kOp[] = "PillarScatter";

int32_t validate(float const* features, int32_t const* coords, int32_t const* numPillars,
    deploykit_pillar_scatter_dims const& d, float const* out, char* err, size_t errLen)
{
    if (int32_t status = deploykit::checkSizes(kOp,
            {{"B", d.batch}, {"P", d.max_pillars}, {"C", d.channels}, {"ny", d.grid_y}, {"nx", d.grid_x}}, err,
            errLen))
    {
        return status;
    }
    if (int32_t status = deploykit::checkBuffers(kOp,
            {{"features", features, d.batch * d.max_pillars * d.channels},
                {"coords", coords, d.batch * d.max_pillars * 4}, {"num_pillars", numPillars, d.batch},
                {"out", out, d.batch * d.channels * d.grid_y * d.grid_x}},
            err, errLen))
    {
        return status;
    }
    for (int64_t b = 0; b < d.batch; ++b)
    {
        int32_t const live = numPillars[b];
        if (live < 0 || live > d.max_pillars)
        {
            return fail(err, errLen, DEPLOYKIT_ERR_INDEX, "%s: num_pillars[%lld] = %d is outside [0, P = %lld]", kOp,
                static_cast<long long>(b), live, static_cast<long long>(d.max_pillars));
        }
        for (int64_t p = 0; p < live; ++p)
        {
            int32_t const* c = coords + (b * d.max_pillars + p) * 4;
            if (c[2] < 0 || c[2] >= d.grid_y || c[3] < 0 || c[3] >= d.grid_x)
            {
                return fail(err, errLen, DEPLOYKIT_ERR_INDEX,
                    "%s: coords[%lld, %lld] = (%d, %d, %d, %d) puts (y, x) = (%d, %d) outside the grid (ny, nx) = "
                    "(%lld, %lld)",
                    kOp, static_cast<long long>(b), static_cast<long long>(p), c[0], c[1], c[2], c[3], c[2], c[3],
                    static_cast<long long>(d.grid_y), static_cast<long long>(d.grid_x));
            }
        }
    }
    return DEPLOYKIT_OK;
}

} // namespace

extern "C" int32_t deploykit_pillar_scatter_cpu(float const* features, int32_t const* coords,
    int32_t const* num_pillars, deploykit_pillar_scatter_dims const* dims, float* out, char* err, size_t err_len)
{
    if (dims == nullptr)
    {
        return fail(err, err_len, DEPLOYKIT_ERR_ARGUMENT, "%s: dims is NULL", kOp);
    }
    deploykit_pillar_scatter_dims const& d = *dims;
    if (int32_t status = validate(features, coords, num_pillars, d, out, err, err_len))
    {
        return status;
    }
    int64_t const plane = d.grid_y * d.grid_x;
    std::fill_n(out, d.batch * d.channels * plane, 0.0F);
    for (int64_t b = 0; b < d.batch; ++b)
    {
        float* canvas = out + b * d.channels * plane;
        for (int64_t p = 0; p < num_pillars[b]; ++p)
        {
            int64_t const row = b * d.max_pillars + p;
            int32_t const* c = coords + row * 4;
            int64_t const cell = c[2] * d.grid_x + c[3];
            float const* pillar = features + row * d.channels;
            for (int64_t ch = 0; ch < d.channels; ++ch)
            {
                canvas[ch * plane + cell] += pillar[ch];
            }
        }
    }
    return DEPLOYKIT_OK;
}
