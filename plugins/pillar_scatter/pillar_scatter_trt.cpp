// TensorRT IPluginV3 for PillarScatter (plugin "PillarScatter", version "1", namespace "deploykit").
#include "common/trt_plugin.h"
#include "pillar_scatter/pillar_scatter.h"

namespace deploykit::trt
{
namespace
{

using nvinfer1::DataType;

enum Input : int32_t
{
    kFeatures,
    kCoords,
    kNumPillars,
    kNbInputs
};

class PillarScatterPlugin final : public PluginBase
{
public:
    static constexpr char kName[] = "PillarScatter";
    static constexpr char kAttributeName[] = "grid";
    static constexpr int32_t kAttributeSize = 2;
    static constexpr char kAttributeDoc[] = "2 positive ints: ny, nx";

    explicit PillarScatterPlugin(std::vector<int32_t> grid)
        : PluginBase(kAttributeName, std::move(grid), kNbInputs)
    {
    }

    nvinfer1::IPluginV3* clone() noexcept override
    {
        try
        {
            return new PillarScatterPlugin(*this);
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
        outputTypes[0] = inputTypes[kFeatures];
        return 0;
    }

    // (B, C, ny, nx): B and C from features, ny and nx from grid.
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const*, int32_t,
        nvinfer1::DimsExprs* outputs, int32_t, nvinfer1::IExprBuilder& exprBuilder) noexcept override
    {
        if (nbInputs != kNbInputs || inputs[kFeatures].nbDims != 3)
        {
            return reportError("expects 3 inputs with 3-D features");
        }
        outputs[0].nbDims = 4;
        outputs[0].d[0] = inputs[kFeatures].d[0];
        outputs[0].d[1] = inputs[kFeatures].d[2];
        outputs[0].d[2] = exprBuilder.constant(mAttribute[0]);
        outputs[0].d[3] = exprBuilder.constant(mAttribute[1]);
        return 0;
    }

    // Linear layouts; features and the output share float32 or float16; coords and num_pillars are int32.
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
        case kFeatures: return desc.type == DataType::kFLOAT || desc.type == DataType::kHALF;
        case kNbInputs: return desc.type == inOut[kFeatures].desc.type;
        default: return desc.type == DataType::kINT32;
        }
    }

    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const*,
        void const* const* inputs, void* const* outputs, void*, cudaStream_t stream) noexcept override
    {
        nvinfer1::Dims const& features = inputDesc[kFeatures].dims;
        deploykit_pillar_scatter_dims const dims{
            features.d[0], features.d[1], features.d[2], mAttribute[0], mAttribute[1]};
        deploykit_dtype const dtype
            = inputDesc[kFeatures].type == DataType::kHALF ? DEPLOYKIT_FLOAT16 : DEPLOYKIT_FLOAT32;
        // No skip counter: reading it back would need a sync inside the engine.
        cudaError_t const status = deploykit_pillar_scatter_cuda(dtype, inputs[kFeatures],
            static_cast<int32_t const*>(inputs[kCoords]), static_cast<int32_t const*>(inputs[kNumPillars]), &dims,
            outputs[0], nullptr, stream);
        return status == cudaSuccess ? 0 : reportError(std::string("CUDA launch failed: ") + cudaGetErrorString(status));
    }

private:
    std::string shapeError(nvinfer1::Dims const* in) const override
    {
        nvinfer1::Dims const& f = in[kFeatures];
        nvinfer1::Dims const& c = in[kCoords];
        nvinfer1::Dims const& n = in[kNumPillars];
        if (f.nbDims != 3 || c.nbDims != 3 || n.nbDims != 1)
        {
            return "features must be (B, P, C), coords (B, P, 4) and num_pillars (B,)";
        }
        if (!sameDim(c.d[0], f.d[0]) || !sameDim(c.d[1], f.d[1]) || !sameDim(c.d[2], 4) || !sameDim(n.d[0], f.d[0]))
        {
            return "coords must be (B, P, 4) and num_pillars (B,) for features (B, P, C)";
        }
        return {};
    }
};

} // namespace

nvinfer1::IPluginCreatorV3One& pillarScatterCreator()
{
    static Creator<PillarScatterPlugin> creator;
    return creator;
}

} // namespace deploykit::trt
