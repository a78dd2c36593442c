#include "common/trt_plugin.h"

#include <atomic>
#include <cstdio>
#include <cstring>

namespace deploykit::trt
{
namespace
{

std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder{nullptr};

std::string join(std::vector<int64_t> const& values)
{
    std::string text;
    for (int64_t v : values)
    {
        text += (text.empty() ? "" : ", ") + std::to_string(v);
    }
    return "[" + text + "]";
}

} // namespace

void logError(std::string const& message) noexcept
{
    try
    {
        // findLogger is asked every time: TensorRT may swap the logger between builder and runtime.
        nvinfer1::ILoggerFinder* finder = gLoggerFinder.load();
        nvinfer1::ILogger* logger = finder != nullptr ? finder->findLogger() : nullptr;
        if (logger != nullptr)
        {
            logger->log(nvinfer1::ILogger::Severity::kERROR, message.c_str());
            return;
        }
        std::fprintf(stderr, "[deploykit plugins] %s\n", message.c_str());
    }
    catch (...)
    {
        // Logging must not let an exception cross TensorRT's noexcept interface.
    }
}

PluginBase::PluginBase(char const* attributeName, std::vector<int32_t> attribute, int32_t nbInputs)
    : mAttribute(std::move(attribute))
    , mAttributeName(attributeName)
    , mNbInputs(nbInputs)
{
}

nvinfer1::IPluginCapability* PluginBase::getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case nvinfer1::PluginCapabilityType::kCORE: return static_cast<nvinfer1::IPluginV3OneCore*>(this);
    case nvinfer1::PluginCapabilityType::kBUILD: return static_cast<nvinfer1::IPluginV3OneBuild*>(this);
    case nvinfer1::PluginCapabilityType::kRUNTIME: return static_cast<nvinfer1::IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

char const* PluginBase::getPluginVersion() const noexcept
{
    return kPluginVersion;
}

char const* PluginBase::getPluginNamespace() const noexcept
{
    return kPluginNamespace;
}

int32_t PluginBase::getNbOutputs() const noexcept
{
    return 1;
}

int32_t PluginBase::configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
    nvinfer1::DynamicPluginTensorDesc const*, int32_t nbOutputs) noexcept
{
    try
    {
        std::vector<nvinfer1::Dims> dims;
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            dims.push_back(in[i].desc.dims);
        }
        return checkShapes(dims, nbOutputs);
    }
    catch (std::exception const& e)
    {
        return reportError(e.what());
    }
}

int32_t PluginBase::onShapeChange(
    nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const*, int32_t nbOutputs) noexcept
{
    try
    {
        std::vector<nvinfer1::Dims> dims;
        for (int32_t i = 0; i < nbInputs; ++i)
        {
            dims.push_back(in[i].dims);
        }
        return checkShapes(dims, nbOutputs);
    }
    catch (std::exception const& e)
    {
        return reportError(e.what());
    }
}

int32_t PluginBase::checkShapes(std::vector<nvinfer1::Dims> const& inputs, int32_t nbOutputs) const
{
    if (static_cast<int32_t>(inputs.size()) != mNbInputs || nbOutputs != 1)
    {
        return reportError("expects " + std::to_string(mNbInputs) + " inputs and 1 output, got "
            + std::to_string(inputs.size()) + " and " + std::to_string(nbOutputs));
    }
    std::string const error = shapeError(inputs.data());
    return error.empty() ? 0 : reportError(error);
}

nvinfer1::IPluginV3* PluginBase::attachToContext(nvinfer1::IPluginResourceContext*) noexcept
{
    return clone(); // no per-context resources
}

nvinfer1::PluginFieldCollection const* PluginBase::getFieldsToSerialize() noexcept
{
    // Rebuilt on every call because a copied plugin would otherwise point at its source's data.
    mField = nvinfer1::PluginField(mAttributeName, mAttribute.data(), nvinfer1::PluginFieldType::kINT32,
        static_cast<int32_t>(mAttribute.size()));
    mFields = nvinfer1::PluginFieldCollection{1, &mField};
    return &mFields;
}

int32_t PluginBase::reportError(std::string const& message) const noexcept
{
    try
    {
        logError(std::string(getPluginName()) + ": " + message);
    }
    catch (...)
    {
        // Out of memory while formatting: the -1 still tells TensorRT that the call failed.
    }
    return -1;
}

std::string readPositiveInts(
    nvinfer1::PluginFieldCollection const* fc, char const* name, int32_t size, std::vector<int32_t>& values)
{
    nvinfer1::PluginField const* field = nullptr;
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        if (fc->fields[i].name != nullptr && std::strcmp(fc->fields[i].name, name) == 0)
        {
            field = &fc->fields[i];
        }
    }
    std::string const attribute = std::string("attribute '") + name + "'";
    if (field == nullptr || field->data == nullptr)
    {
        return "missing required " + attribute;
    }
    if (field->length != size)
    {
        return attribute + " must have " + std::to_string(size) + " values, got " + std::to_string(field->length);
    }
    std::vector<int64_t> raw(size);
    switch (field->type)
    {
    case nvinfer1::PluginFieldType::kINT32:
        for (int32_t i = 0; i < size; ++i)
        {
            raw[i] = static_cast<int32_t const*>(field->data)[i];
        }
        break;
    case nvinfer1::PluginFieldType::kINT64:
        for (int32_t i = 0; i < size; ++i)
        {
            raw[i] = static_cast<int64_t const*>(field->data)[i];
        }
        break;
    default: return attribute + " must be an int32 or int64 array";
    }
    for (int64_t v : raw)
    {
        if (v <= 0 || v > INT32_MAX)
        {
            return attribute + " must hold positive int32 values, got " + join(raw);
        }
    }
    values.assign(raw.begin(), raw.end());
    return {};
}

} // namespace deploykit::trt

extern "C" int32_t const deploykit_tensorrt_headers[3] = {NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR, NV_TENSORRT_PATCH};

extern "C" void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    deploykit::trt::gLoggerFinder.store(finder);
}

extern "C" nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    static nvinfer1::IPluginCreatorInterface* const creators[]
        = {&deploykit::trt::bevPoolV2Creator(), &deploykit::trt::pillarScatterCreator()};
    nbCreators = 2;
    return creators;
}
