// TensorRT IPluginV3 for BEVPoolV2 (plugin "BEVPoolV2", version "1", namespace "deploykit").
#include "bev_pool/bev_pool.h"
#include "common/trt_plugin.h"

namespace deploykit::trt
{
namespace
{

using nvinfer1::DataType;

enum Input : int32_t
{
    kDepth,
    kFeat,
    kRanksDepth,
    kRanksFeat,
    kRanksBev,
    kIntervalStarts,
    kIntervalLengths,
    kNbInputs
};

class BevPoolV2Plugin final : public PluginBase
{
public:
    static constexpr char kName[] = "BEVPoolV2";
    static constexpr char kAttributeName[] = "bev_shape";
    static constexpr int32_t kAttributeSize = 3;
    static constexpr char kAttributeDoc[] = "3 positive ints: Z, Y, X";

    explicit BevPoolV2Plugin(std::vector<int32_t> bevShape)
        : PluginBase(kAttributeName, std::move(bevShape), kNbInputs)
    {
    }

    nvinfer1::IPluginV3* clone() noexcept override
    {
        try
        {
            return new BevPoolV2Plugin(*this);
        }
        catch (std::exception const& e)
        {
            reportError(e.what());
        }
        return nullptr;
    }

    char const* getPluginName() const noexcept override
    {
        return kName;
    }

    int32_t getOutputDataTypes(
        DataType* outputTypes, int32_t, DataType const* inputTypes, int32_t) const noexcept override
    {
        outputTypes[0] = inputTypes[kFeat];
        return 0;
    }

    // (B, Z, Y, X, C): B from depth, C from feat, Z, Y, X from bev_shape.
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const*, int32_t,
        nvinfer1::DimsExprs* outputs, int32_t, nvinfer1::IExprBuilder& exprBuilder) noexcept override
    {
        if (nbInputs != kNbInputs || inputs[kDepth].nbDims != 5 || inputs[kFeat].nbDims != 5)
        {
            return reportError("expects 7 inputs with 5-D depth and feat");
        }
        outputs[0].nbDims = 5;
        outputs[0].d[0] = inputs[kDepth].d[0];
        for (int32_t i = 0; i < kAttributeSize; ++i)
        {
            outputs[0].d[1 + i] = exprBuilder.constant(mAttribute[i]);
        }
        outputs[0].d[4] = inputs[kFeat].d[4];
        return 0;
    }

    // Linear layouts; depth, feat and the output share float32 or float16; ranks and intervals are int32.
    bool supportsFormatCombination(
        int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t, int32_t) noexcept override
    {
        nvinfer1::PluginTensorDesc const& desc = inOut[pos].desc;
        if (desc.format != nvinfer1::TensorFormat::kLINEAR)
        {
            return false;
        }
        switch (pos)
        {
        case kDepth: return desc.type == DataType::kFLOAT || desc.type == DataType::kHALF;
        case kFeat:
        case kNbInputs: return desc.type == inOut[kDepth].desc.type;
        default: return desc.type == DataType::kINT32;
        }
    }

    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const*,
        void const* const* inputs, void* const* outputs, void*, cudaStream_t stream) noexcept override
    {
        nvinfer1::Dims const& depth = inputDesc[kDepth].dims;
        deploykit_bev_pool_dims const dims{depth.d[0], depth.d[1], depth.d[2], depth.d[3], depth.d[4],
            inputDesc[kFeat].dims.d[4], inputDesc[kRanksDepth].dims.d[0], inputDesc[kIntervalStarts].dims.d[0],
            mAttribute[0], mAttribute[1], mAttribute[2]};
        deploykit_dtype const dtype = inputDesc[kFeat].type == DataType::kHALF ? DEPLOYKIT_FLOAT16 : DEPLOYKIT_FLOAT32;
        // No skip counter: reading it back would need a sync inside the engine.
        cudaError_t const status = deploykit_bev_pool_v2_cuda(dtype, inputs[kDepth], inputs[kFeat],
            static_cast<int32_t const*>(inputs[kRanksDepth]), static_cast<int32_t const*>(inputs[kRanksFeat]),
            static_cast<int32_t const*>(inputs[kRanksBev]), static_cast<int32_t const*>(inputs[kIntervalStarts]),
            static_cast<int32_t const*>(inputs[kIntervalLengths]), &dims, outputs[0], nullptr, stream);
        return status == cudaSuccess ? 0 : reportError(std::string("CUDA launch failed: ") + cudaGetErrorString(status));
    }

private:
    std::string shapeError(nvinfer1::Dims const* in) const override
    {
        if (in[kDepth].nbDims != 5 || in[kFeat].nbDims != 5)
        {
            return "depth must be (B, N, D, H, W) and feat (B, N, H, W, C)";
        }
        for (int32_t i = kRanksDepth; i < kNbInputs; ++i)
        {
            if (in[i].nbDims != 1)
            {
                return "ranks_depth, ranks_feat, ranks_bev, interval_starts and interval_lengths must be 1-D";
            }
        }
        nvinfer1::Dims const& d = in[kDepth];
        nvinfer1::Dims const& f = in[kFeat];
        if (!sameDim(f.d[0], d.d[0]) || !sameDim(f.d[1], d.d[1]) || !sameDim(f.d[2], d.d[3])
            || !sameDim(f.d[3], d.d[4]))
        {
            return "feat (B, N, H, W, C) and depth (B, N, D, H, W) disagree on B, N, H or W";
        }
        int64_t const points = in[kRanksDepth].d[0];
        if (!sameDim(in[kRanksFeat].d[0], points) || !sameDim(in[kRanksBev].d[0], points))
        {
            return "ranks_depth, ranks_feat and ranks_bev must have the same length P";
        }
        if (!sameDim(in[kIntervalStarts].d[0], in[kIntervalLengths].d[0]))
        {
            return "interval_starts and interval_lengths must have the same length K";
        }
        return {};
    }
};

} // namespace

nvinfer1::IPluginCreatorV3One& bevPoolV2Creator()
{
    static Creator<BevPoolV2Plugin> creator;
    return creator;
}

} // namespace deploykit::trt
