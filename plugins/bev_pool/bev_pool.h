/* BEVPoolV2: lift-splat BEV pooling in BEVDet's bev_pool_v2 convention.
 *
 * For every interval k with length > 0:
 *   out[ranks_bev[s_k], c] += sum_{i in [s_k, s_k + len_k)} depth_flat[ranks_depth[i]] * feat_flat[ranks_feat[i], c]
 * with out viewed as (B*Z*Y*X, C) and zero-initialised, feat as (B*N*H*W, C), depth flat over B*N*D*H*W.
 * Only ranks_bev[s_k] (the interval's first point) places an interval. Intervals that share a BEV
 * cell are summed. Points not covered by any interval do not contribute.
 */
#ifndef DEPLOYKIT_BEV_POOL_H
#define DEPLOYKIT_BEV_POOL_H

#include "common/abi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Sizes of one call: depth (B, N, D, H, W), feat (B, N, H, W, C), ranks_* (P,), intervals (K,),
 * output (B, Z, Y, X, C). */
typedef struct deploykit_bev_pool_dims {
    int64_t batch;         /* B */
    int64_t cameras;       /* N */
    int64_t depth_bins;    /* D */
    int64_t height;        /* H */
    int64_t width;         /* W */
    int64_t channels;      /* C */
    int64_t num_points;    /* P */
    int64_t num_intervals; /* K */
    int64_t bev_z;         /* Z */
    int64_t bev_y;         /* Y */
    int64_t bev_x;         /* X */
} deploykit_bev_pool_dims;

/* CPU reference. Validates every rank (all P entries of the three rank tensors) and every interval
 * (0 <= start, 0 <= length, start + length <= P) before writing anything; returns DEPLOYKIT_OK or a
 * deploykit_status with a message in err. Writes every element of out (B*Z*Y*X*C floats). */
DEPLOYKIT_API int32_t deploykit_bev_pool_v2_cpu(const float* depth, const float* feat, const int32_t* ranks_depth,
    const int32_t* ranks_feat, const int32_t* ranks_bev, const int32_t* interval_starts,
    const int32_t* interval_lengths, const deploykit_bev_pool_dims* dims, float* out, char* err, size_t err_len);

#ifdef DEPLOYKIT_WITH_CUDA
/* CUDA launcher (device pointers, asynchronous on stream): zero-fills out, then accumulates.
 * Never reads or writes out of bounds: an interval outside [0, P] or whose ranks_bev is out of range
 * is skipped, and so is a point whose ranks_depth or ranks_feat is out of range. When `skipped` (a
 * device int32, may be NULL) is given, one is added to it per skipped interval or point; the caller
 * zeroes it. depth, feat and out are `dtype`; accumulation is float32. */
DEPLOYKIT_API cudaError_t deploykit_bev_pool_v2_cuda(deploykit_dtype dtype, const void* depth, const void* feat,
    const int32_t* ranks_depth, const int32_t* ranks_feat, const int32_t* ranks_bev, const int32_t* interval_starts,
    const int32_t* interval_lengths, const deploykit_bev_pool_dims* dims, void* out, int32_t* skipped,
    cudaStream_t stream);
#endif

#ifdef __cplusplus
}
#endif

#endif /* DEPLOYKIT_BEV_POOL_H */
