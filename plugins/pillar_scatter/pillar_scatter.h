/* PillarScatter: scatter PointPillars pillar features onto a dense BEV canvas.
 *
 * For every batch row b and pillar p < num_pillars[b], with (y, x) = coords[b, p, 2:4]:
 *   out[b, c, y, x] += features[b, p, c]
 * out (B, C, ny, nx) is zero-initialised. The batch is the pillar's row b: coords[b, p, 0] (batch)
 * and coords[b, p, 1] (z) are not read. Pillars that share a cell are summed; pillars at index
 * >= num_pillars[b] (padding) are ignored whatever their coordinates.
 */
#ifndef DEPLOYKIT_PILLAR_SCATTER_H
#define DEPLOYKIT_PILLAR_SCATTER_H

#include "common/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes of one call: features (B, P, C), coords (B, P, 4), num_pillars (B,), output (B, C, ny, nx). */
typedef struct deploykit_pillar_scatter_dims {
    int64_t batch;       /* B */
    int64_t max_pillars; /* P */
    int64_t channels;    /* C */
    int64_t grid_y;      /* ny */
    int64_t grid_x;      /* nx */
} deploykit_pillar_scatter_dims;

/* CPU reference. Validates num_pillars[b] in [0, P] and the (y, x) of every live pillar against the
 * grid before writing anything; returns DEPLOYKIT_OK or a deploykit_status with a message in err.
 * Writes every element of out (B*C*ny*nx floats). */
DEPLOYKIT_API int32_t deploykit_pillar_scatter_cpu(const float* features, const int32_t* coords,
    const int32_t* num_pillars, const deploykit_pillar_scatter_dims* dims, float* out, char* err, size_t err_len);

#ifdef DEPLOYKIT_WITH_CUDA
/* CUDA launcher (device pointers, asynchronous on stream): zero-fills out, then scatters. Never
 * reads or writes out of bounds: num_pillars[b] is clamped to [0, P] and a live pillar whose (y, x)
 * lies outside the grid is skipped; when `skipped` (a device int32, may be NULL) is given, one is
 * added to it per skipped pillar; the caller zeroes it. features and out are `dtype`. */
DEPLOYKIT_API cudaError_t deploykit_pillar_scatter_cuda(deploykit_dtype dtype, const void* features,
    const int32_t* coords, const int32_t* num_pillars, const deploykit_pillar_scatter_dims* dims, void* out,
    int32_t* skipped, cudaStream_t stream);
#endif

#ifdef __cplusplus
}
#endif

#endif /* DEPLOYKIT_PILLAR_SCATTER_H */
