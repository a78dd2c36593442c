// TensorRT IPluginV3 plumbing shared by the deploykit plugins: logging, the common plugin base,
// the creator and the library entry points TensorRT looks up (getCreators, setLoggerFinder).
#pragma once

#include <NvInferRuntime.h>
#include <NvInferVersion.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/abi.h"

namespace deploykit::trt
{

inline constexpr char kPluginVersion[] = "1";
inline constexpr char kPluginNamespace[] = "deploykit";

// Sends an error to the logger TensorRT handed over through setLoggerFinder, or to stderr.
void logError(std::string const& message) noexcept;

// Both plugins have one output and are configured by one int array attribute (bev_shape, grid);
// this base holds that attribute, answers the capability and identity queries, and checks input
// shapes in configurePlugin (build time, -1 for dynamic dims) and onShapeChange (run time).
class PluginBase : public nvinfer1::IPluginV3,
                   public nvinfer1::IPluginV3OneCore,
                   public nvinfer1::IPluginV3OneBuild,
                   public nvinfer1::IPluginV3OneRuntime
{
public:
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;
    int32_t getNbOutputs() const noexcept override;
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::PluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

protected:
    PluginBase(char const* attributeName, std::vector<int32_t> attribute, int32_t nbInputs);

    // Empty when the input shapes fit the op; otherwise what is wrong. A dim of -1 (unknown at
    // build time) matches anything.
    virtual std::string shapeError(nvinfer1::Dims const* inputs) const = 0;

    // Logs "<plugin>: <message>" and returns -1, TensorRT's failure code.
    int32_t reportError(std::string const& message) const noexcept;

    std::vector<int32_t> mAttribute;

private:
    int32_t checkShapes(std::vector<nvinfer1::Dims> const& inputs, int32_t nbOutputs) const;

    char const* mAttributeName;
    int32_t mNbInputs;
    nvinfer1::PluginField mField;
    nvinfer1::PluginFieldCollection mFields{};
};

// True when the dims are equal or either is unknown (-1).
inline bool sameDim(int64_t a, int64_t b)
{
    return a < 0 || b < 0 || a == b;
}

// Reads the required attribute `name` (kINT32 or kINT64, `size` positive values) from fc. Returns an
// empty string and fills `values`, or says what is missing or wrong.
std::string readPositiveInts(
    nvinfer1::PluginFieldCollection const* fc, char const* name, int32_t size, std::vector<int32_t>& values);

// Creator of a PluginBase subclass; Plugin provides kName, kAttributeName, kAttributeSize,
// kAttributeDoc and a constructor from the attribute values.
template <class Plugin>
class Creator final : public nvinfer1::IPluginCreatorV3One
{
public:
    Creator()
        : mField(Plugin::kAttributeName, nullptr, nvinfer1::PluginFieldType::kINT32, Plugin::kAttributeSize)
        , mFields{1, &mField}
    {
    }

    // mFields points into this object.
    Creator(Creator const&) = delete;
    Creator& operator=(Creator const&) = delete;

    char const* getPluginName() const noexcept override
    {
        return Plugin::kName;
    }

    char const* getPluginVersion() const noexcept override
    {
        return kPluginVersion;
    }

    char const* getPluginNamespace() const noexcept override
    {
        return kPluginNamespace;
    }

    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override
    {
        return &mFields;
    }

    // The ONNX parser calls this with the node's attributes (phase kBUILD); deserialization calls
    // it with what getFieldsToSerialize wrote (phase kRUNTIME). Both carry the same field.
    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase) noexcept override
    {
        try
        {
            std::vector<int32_t> values;
            std::string const error = readPositiveInts(fc, Plugin::kAttributeName, Plugin::kAttributeSize, values);
            if (error.empty())
            {
                return new Plugin(std::move(values));
            }
            logError(std::string(Plugin::kName) + " '" + (name ? name : "") + "': " + error + " ("
                + Plugin::kAttributeDoc + ")");
        }
        catch (std::exception const& e)
        {
            logError(std::string(Plugin::kName) + ": " + e.what());
        }
        return nullptr;
    }

private:
    nvinfer1::PluginField mField;
    nvinfer1::PluginFieldCollection mFields;
};

// Defined next to each plugin.
nvinfer1::IPluginCreatorV3One& bevPoolV2Creator();
nvinfer1::IPluginCreatorV3One& pillarScatterCreator();

} // namespace deploykit::trt

// Entry points of libdeploykit_plugins.so for IPluginRegistry::loadLibrary
// (trt.get_plugin_registry().load_library(path) in Python).
extern "C" DEPLOYKIT_API void setLoggerFinder(nvinfer1::ILoggerFinder* finder);

// {major, minor, patch} of the TensorRT headers this library was compiled against. A data symbol, so
// deploykit reads it from the file without loading the library: the plugin ABI changes between
// majors (in 11, ILogger and ILoggerFinder derive from IVersionedInterface, so vtable slot 0 moves),
// and a library built for the other major crashes on its first log message.
extern "C" DEPLOYKIT_API int32_t const deploykit_tensorrt_headers[3];
extern "C" DEPLOYKIT_API nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators);
